/* store_dir.c - the embedded chunk store: a content-addressed directory of
 * immutable blobs plus an SQLite (WAL) index.
 *
 *   ROOT/v1/objects/ab/cd/<key>.kvc   one blob per key (ab, cd: its first
 *                                     hex digits)
 *   ROOT/v1/staging/<key>.<pid>.<n>.tmp   blobs being written
 *   ROOT/v1/index.db                  entries(key, bytes, n_tokens,
 *                                     base_pos, created, last_access, hits,
 *                                     pinned), counters(name, value) and
 *                                     totals(entries, bytes) of the rows
 *
 * The blobs are the truth; the index is an accelerator for LRU order,
 * sizes, pins, counters and totals, and fsck rebuilds it from the blobs.
 * Its schema, versions and totals: store_dir_index.c.
 *
 * Put: write the blob to staging, fsync it, then under the index's write
 * lock (BEGIN IMMEDIATE) link() it to its final name (first writer wins; a
 * corrupt blob in the way is replaced by rename()), unlink the temporary
 * name and add the index row.  Evict and rm remove a blob and its row
 * under the same lock, so the blobs and the rows agree whatever runs in
 * parallel.  A crash leaves at worst a temporary file or a blob without a
 * row, never a torn blob under a final name.
 *
 * Get: open the blob, take a shared flock() for as long as it is read,
 * map it, verify it (header, request, payload checksum).  Eviction takes
 * the exclusive lock without waiting and skips a blob that is being read,
 * so it never removes a blob in use.
 *
 * This file owns the store: get, put, rm, pin, ls, stat and evict; the
 * index's schema and rows are in store_dir_index.c, fsck in
 * store_dir_fsck.c.
 */
#include "chunk/store_dir_impl.h"

double dir_now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* snprintf into a PATH_MAX (or other) buffer; a path that does not fit is
 * cut short, which only ever makes an open fail. */

void dir_pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

static int mkdir_p(const char *path, struct kv_err *e)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return kv_err_set(e, "path too long: '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) < 0 && errno != EEXIST) {
            int err = errno;
            struct stat st;
            if (!(stat(buf, &st) == 0 && S_ISDIR(st.st_mode)))
                return kv_err_set(e, "cannot create directory '%s': %s", buf,
                                  strerror(err));
        }
        buf[i] = c;
    }
    return 0;
}

void dir_blob_path(const struct dir_store *d, const uint8_t key[16],
                   char *buf, size_t len)
{
    char hex[33];
    kv_hex(key, hex);
    dir_pathf(buf, len, "%s/objects/%.2s/%.2s/%s.kvc", d->root, hex, hex + 2,
             hex);
}

/* ---- the index ---------------------------------------------------------- */

static void dir_busy(struct dir_store *d, int ms)
{
    d->busy_ms = ms;
    if (d->db)
        sqlite3_busy_timeout(d->db, ms);
}

static int need_db(struct dir_store *d, struct kv_err *e)
{
    if (!d->db)
        return kv_err_set(e, "%s", d->db_err[0] ? d->db_err
                                                : "store index unavailable");
    return 0;
}

static void count(sqlite3 *db, const char *name, int64_t by)
{
    sqlite3_stmt *st;
    if (!db || by == 0)
        return;
    if (sqlite3_prepare_v2(db, "INSERT INTO counters(name, value) "
                           "VALUES(?1, ?2) ON CONFLICT(name) DO UPDATE SET "
                           "value = value + ?2", -1, &st, NULL) != SQLITE_OK)
        return;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, by);
    sqlite3_step(st);
    sqlite3_finalize(st);
}

static void index_touch(sqlite3 *db, const struct kv_blob_meta *m, double t)
{
    sqlite3_stmt *st;
    char hex[33];
    kv_hex(m->key, hex);
    dir_index_add(db, m, t);
    if (sqlite3_prepare_v2(db, "UPDATE entries SET last_access = ?2, "
                           "hits = hits + 1 WHERE key = ?1", -1, &st, NULL)
        != SQLITE_OK)
        return;
    sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 2, t);
    sqlite3_step(st);
    sqlite3_finalize(st);
}

/* ---- reading blobs ------------------------------------------------------ */

/* Open and map the blob at path, shared-locked.  Returns 1 when it does
 * not exist, 0 with the mapping, its length and the fd set, -1 on an
 * error. */
int dir_map_blob(const char *path, int lock, void **map, size_t *len,
                 int *fd_out, struct kv_err *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        if (errno == ENOENT)
            return 1;
        return kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
    }
    if (lock && flock(fd, LOCK_SH) < 0) {
        int err = errno;
        close(fd);
        return kv_err_set(e, "cannot lock '%s': %s", path, strerror(err));
    }
    if (fstat(fd, &st) < 0) {
        int err = errno;
        close(fd);
        return kv_err_set(e, "cannot stat '%s': %s", path, strerror(err));
    }
    if (st.st_size == 0) {
        *map = NULL;
        *len = 0;
        *fd_out = fd;
        return 0;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED) {
        int err = errno;
        close(fd);
        return kv_err_set(e, "cannot map '%s': %s", path, strerror(err));
    }
    *map = m;
    *len = (size_t)st.st_size;
    *fd_out = fd;
    return 0;
}

static int dir_get(struct kv_store *s, const struct kv_chunk_req *req,
                   size_t n, struct kv_blob_ref *refs, int *status,
                   struct kv_err *why, struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    int64_t hits = 0, misses = 0, coll = 0, bad = 0;
    double t = dir_now_unix();
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        void *map;
        size_t len;
        int fd;
        struct kv_err w;
        dir_blob_path(d, req[i].key, path, sizeof path);
        int rc = dir_map_blob(path, 1, &map, &len, &fd, e);
        if (rc < 0) {
            for (size_t j = 0; j < i; j++)
                kv_blob_ref_release(&refs[j]);
            return -1;
        }
        if (rc == 1) {
            status[i] = KV_GET_ABSENT;
            misses++;
            continue;
        }
        w.msg[0] = '\0';
        status[i] = kv_store_verify(map, len, &req[i], &refs[i].meta, &w);
        if (status[i] == KV_GET_HIT) {
            refs[i].map = map;
            refs[i].map_len = len;
            refs[i].fd = fd;
            refs[i].payload = (const uint8_t *)map + refs[i].meta.header_len;
            hits++;
            continue;
        }
        if (map)
            munmap(map, len);
        close(fd);
        misses++;
        if (status[i] == KV_GET_COLLISION)
            coll++;
        else
            bad++;
        if (why)
            dir_pathf(why[i].msg, sizeof why[i].msg, "'%s': %s", path, w.msg);
    }
    /* recency and counters are best effort: a reader waits for the index
     * a little, never long, and reads on without it */
    if (d->db && !s->opts.read_only)
        dir_busy(d, 2000);
    if (d->db && !s->opts.read_only &&
        dir_db_exec(d->db, "BEGIN IMMEDIATE") == 0) {
        for (size_t i = 0; i < n; i++)
            if (status[i] == KV_GET_HIT)
                index_touch(d->db, &refs[i].meta, t);
        count(d->db, "hits", hits);
        count(d->db, "misses", misses);
        count(d->db, "collisions", coll);
        count(d->db, "checksum_failures", bad);
        if (dir_db_exec(d->db, "COMMIT") < 0)
            dir_db_exec(d->db, "ROLLBACK");
    }
    dir_busy(d, 15000);
    return 0;
}

/* ---- writing blobs ------------------------------------------------------ */

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The index's write lock (BEGIN IMMEDIATE, waiting as long as the busy
 * timeout) around a change of blobs and rows that must look atomic to the
 * other processes; nothing to take when the index is unavailable. */
static int index_lock(struct dir_store *d, struct kv_err *e)
{
    if (d->db && dir_db_exec(d->db, "BEGIN IMMEDIATE") < 0)
        return kv_err_set(e, "index busy: %s", sqlite3_errmsg(d->db));
    return 0;
}

static int index_unlock(struct dir_store *d, struct kv_err *e)
{
    if (d->db && dir_db_exec(d->db, "COMMIT") < 0) {
        kv_err_set(e, "index: cannot commit: %s", sqlite3_errmsg(d->db));
        dir_db_exec(d->db, "ROLLBACK");
        return -1;
    }
    return 0;
}

static void index_abort(struct dir_store *d)
{
    if (d->db)
        dir_db_exec(d->db, "ROLLBACK");
}

/* Is the blob at path sound (header and payload)?  1 yes, 0 no / absent. */
static int blob_sound(const char *path)
{
    void *map;
    size_t len;
    int fd;
    struct kv_err e;
    struct kv_blob_meta m;
    if (dir_map_blob(path, 0, &map, &len, &fd, &e) != 0)
        return 0;
    int ok = map && kv_blob_check(map, len, 1, &m, &e) == KV_BLOB_OK;
    if (map)
        munmap(map, len);
    close(fd);
    return ok;
}

static int dir_put(struct kv_store *s, const struct kv_blob_meta *m,
                   const uint8_t *hdr, const void *payload, int *existed,
                   struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    char final[PATH_MAX], tmp[PATH_MAX], dir[PATH_MAX], hex[33];
    int replace = 0;
    kv_hex(m->key, hex);
    dir_blob_path(d, m->key, final, sizeof final);
    *existed = 0;
    /* Looking at the blob and writing its row is one step under the
     * index's write lock, so that an evict cannot remove the blob in
     * between (a row without its blob) or delete the row of a blob
     * published since (a blob without its row). */
    if (index_lock(d, e) < 0)
        return -1;
    if (access(final, F_OK) == 0 && blob_sound(final)) {
        *existed = 1;
        if (d->db)
            dir_index_add(d->db, m, dir_now_unix());
        return index_unlock(d, e);
    }
    if (d->db)
        dir_db_exec(d->db, "ROLLBACK");
    dir_pathf(tmp, sizeof tmp, "%s/staging/%s.%ld.%u.tmp", d->root, hex,
             (long)getpid(), d->tmp_seq++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        char sdir[PATH_MAX];
        dir_pathf(sdir, sizeof sdir, "%s/staging", d->root);
        if (errno == ENOENT && mkdir_p(sdir, e) == 0)
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
            return kv_err_set(e, "cannot create '%s': %s", tmp,
                              strerror(errno));
    }
    if (write_all(fd, hdr, m->header_len) < 0 ||
        write_all(fd, payload, m->payload_len) < 0 || fsync(fd) < 0) {
        int err = errno;
        close(fd);
        unlink(tmp);
        return kv_err_set(e, "cannot write '%s': %s", tmp, strerror(err));
    }
    if (close(fd) < 0) {
        int err = errno;
        unlink(tmp);
        return kv_err_set(e, "cannot write '%s': %s", tmp, strerror(err));
    }
    dir_pathf(dir, sizeof dir, "%s/objects/%.2s/%.2s", d->root, hex, hex + 2);
    if (mkdir_p(dir, e) < 0) {
        unlink(tmp);
        return -1;
    }
    if (index_lock(d, e) < 0) {
        unlink(tmp);
        return -1;
    }
    if (access(final, F_OK) == 0 && !blob_sound(final))
        replace = 1;            /* a corrupt blob is in the way */
    if (replace) {
        if (rename(tmp, final) < 0) {
            int err = errno;
            unlink(tmp);
            index_abort(d);
            return kv_err_set(e, "cannot publish '%s': %s", final,
                              strerror(err));
        }
    } else if (link(tmp, final) < 0) {
        int err = errno;
        unlink(tmp);
        if (err != EEXIST) {
            index_abort(d);
            return kv_err_set(e, "cannot publish '%s': %s", final,
                              strerror(err));
        }
        *existed = 1;           /* another writer was first */
    } else {
        unlink(tmp);
    }
    if (s->opts.durable) {
        /* the new name, and the names of directories mkdir_p may just
         * have made: objects/ab/cd, objects/ab, objects */
        char up[PATH_MAX];
        fsync_dir(dir);
        dir_pathf(up, sizeof up, "%s/objects/%.2s", d->root, hex);
        fsync_dir(up);
        dir_pathf(up, sizeof up, "%s/objects", d->root);
        fsync_dir(up);
    }
    if (d->db) {
        double t = dir_now_unix();
        if (replace)
            dir_index_del(d->db, hex);
        if (dir_index_add(d->db, m, t) < 0) {
            kv_err_set(e, "index: cannot add %s: %s", hex,
                       sqlite3_errmsg(d->db));
            index_abort(d);
            return -1;      /* the blob stays: fsck --repair indexes it */
        }
        if (!*existed)
            count(d->db, "puts", 1);
    }
    return index_unlock(d, e);
}

static int dir_rm(struct kv_store *s, const uint8_t *key, int *found,
                  struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    char path[PATH_MAX], hex[33];
    kv_hex(key, hex);
    dir_blob_path(d, key, path, sizeof path);
    *found = 1;
    if (index_lock(d, e) < 0)
        return -1;
    if (unlink(path) < 0) {
        if (errno != ENOENT) {
            int err = errno;
            index_abort(d);
            return kv_err_set(e, "cannot remove '%s': %s", path,
                              strerror(err));
        }
        *found = 0;
    }
    if (d->db)
        dir_index_del(d->db, hex);
    return index_unlock(d, e);
}

/* Read a blob's header into m (no payload check). */
static int read_meta(const char *path, struct kv_blob_meta *m)
{
    void *map;
    size_t len;
    int fd;
    struct kv_err e;
    if (dir_map_blob(path, 0, &map, &len, &fd, &e) != 0)
        return -1;
    int rc = -1;
    if (map && kv_blob_peek(map, len, m, &e) == 0 && len >= m->header_len &&
        kv_blob_check_header(map, m, &e) == KV_BLOB_OK)
        rc = 0;
    if (map)
        munmap(map, len);
    close(fd);
    return rc;
}

static int dir_pin(struct kv_store *s, const uint8_t *key, int on,
                   int *found, struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    char path[PATH_MAX], hex[33];
    struct kv_blob_meta m;
    sqlite3_stmt *st;
    if (need_db(d, e) < 0)
        return -1;
    kv_hex(key, hex);
    dir_blob_path(d, key, path, sizeof path);
    *found = 0;
    if (read_meta(path, &m) < 0)
        return 0;
    *found = 1;
    dir_index_add(d->db, &m, dir_now_unix());
    if (sqlite3_prepare_v2(d->db, "UPDATE entries SET pinned = ?2 WHERE "
                           "key = ?1", -1, &st, NULL) != SQLITE_OK)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, on);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    return 0;
}

static int dir_ls(struct kv_store *s,
                  int (*cb)(void *, const struct kv_store_entry *), void *ctx,
                  struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    sqlite3_stmt *st;
    if (need_db(d, e) < 0)
        return -1;
    if (sqlite3_prepare_v2(d->db, "SELECT key, bytes, n_tokens, base_pos, "
                           "hits, last_access, pinned FROM entries ORDER BY "
                           "key", -1, &st, NULL) != SQLITE_OK)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct kv_store_entry en;
        memset(&en, 0, sizeof en);
        const char *hex = (const char *)sqlite3_column_text(st, 0);
        if (!hex || kv_unhex(hex, en.key) < 0)
            continue;
        en.bytes = (uint64_t)sqlite3_column_int64(st, 1);
        en.n_tokens = (uint32_t)sqlite3_column_int64(st, 2);
        en.base_pos = (int32_t)sqlite3_column_int64(st, 3);
        en.hits = (uint64_t)sqlite3_column_int64(st, 4);
        en.last_access = sqlite3_column_double(st, 5);
        en.pinned = sqlite3_column_int(st, 6);
        if (cb(ctx, &en) < 0) {
            sqlite3_finalize(st);
            return kv_err_set(e, "listing stopped");
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    return 0;
}

static int dir_stat(struct kv_store *s, struct kv_store_stats *o,
                    struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    sqlite3_stmt *st;
    if (need_db(d, e) < 0)
        return -1;
    if (dir_index_totals(d, &o->entries, &o->bytes) < 0)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    if (sqlite3_prepare_v2(d->db, "SELECT name, value FROM counters", -1, &st,
                           NULL) != SQLITE_OK)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        uint64_t v = (uint64_t)sqlite3_column_int64(st, 1);
        if (!name)
            continue;
        if (!strcmp(name, "hits")) o->hits = v;
        else if (!strcmp(name, "misses")) o->misses = v;
        else if (!strcmp(name, "evictions")) o->evictions = v;
        else if (!strcmp(name, "collisions")) o->collisions = v;
        else if (!strcmp(name, "checksum_failures")) o->checksum_failures = v;
        else if (!strcmp(name, "puts")) o->puts = v;
    }
    sqlite3_finalize(st);
    return 0;
}

/* Remove the blob at path unless a reader holds it.  1 removed (or gone
 * already), 0 busy, -1 error. */
static int remove_if_idle(const char *path, struct kv_err *e)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 1;
        return kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd);
        return 0;
    }
    int rc = 1;
    if (unlink(path) < 0 && errno != ENOENT)
        rc = kv_err_set(e, "cannot remove '%s': %s", path, strerror(errno));
    close(fd);
    return rc;
}

static int dir_evict(struct kv_store *s, uint64_t max_bytes, double low,
                     struct kv_evict_report *r, struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    sqlite3_stmt *st;
    struct kv_store_stats t;
    if (need_db(d, e) < 0 || dir_stat(s, &t, e) < 0)
        return -1;
    r->total_before = r->total_after = t.bytes;
    if (t.bytes <= max_bytes)
        return 0;
    uint64_t target = (uint64_t)((double)max_bytes * low);
    /* the candidates, oldest first, read before any change */
    if (sqlite3_prepare_v2(d->db, "SELECT key, bytes FROM entries WHERE "
                           "pinned = 0 ORDER BY last_access, key", -1, &st,
                           NULL) != SQLITE_OK)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    size_t n = 0, cap = 64;
    struct cand { char hex[33]; uint64_t bytes; } *c = malloc(cap * sizeof *c);
    if (!c) {
        sqlite3_finalize(st);
        return kv_err_set(e, "out of memory");
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *hex = (const char *)sqlite3_column_text(st, 0);
        if (!hex || strlen(hex) != 32)
            continue;
        if (n == cap) {
            struct cand *nc = realloc(c, cap * 2 * sizeof *c);
            if (!nc) {
                free(c);
                sqlite3_finalize(st);
                return kv_err_set(e, "out of memory");
            }
            c = nc;
            cap *= 2;
        }
        memcpy(c[n].hex, hex, 33);
        c[n].bytes = (uint64_t)sqlite3_column_int64(st, 1);
        n++;
    }
    sqlite3_finalize(st);
    uint64_t total = t.bytes;
    for (size_t i = 0; i < n && total > target; i++) {
        char path[PATH_MAX];
        uint8_t key[16];
        kv_unhex(c[i].hex, key);
        dir_blob_path(d, key, path, sizeof path);
        /* the blob and its row go together, under the lock a put holds
         * while it publishes a blob and adds its row */
        if (index_lock(d, e) < 0) {
            free(c);
            return -1;
        }
        int rc = remove_if_idle(path, e);
        if (rc <= 0) {
            index_abort(d);
            if (rc < 0) {
                free(c);
                return -1;
            }
            r->skipped_busy++;
            continue;
        }
        dir_index_del(d->db, c[i].hex);
        count(d->db, "evictions", 1);
        if (index_unlock(d, e) < 0) {
            free(c);
            return -1;
        }
        total -= c[i].bytes;
        r->removed++;
        r->removed_bytes += c[i].bytes;
    }
    free(c);
    r->total_after = total;
    return 0;
}

static void dir_close(struct kv_store *s)
{
    struct dir_store *d = (struct dir_store *)s;
    if (d->db)
        sqlite3_close(d->db);
    free(d->root);
    free(d);
}

static const struct kv_store_ops dir_ops = {
    "dir", dir_get, dir_put, dir_rm, dir_pin, dir_ls, dir_stat, dir_evict,
    dir_fsck, dir_close,
};

int kv_store_dir_open(const char *path, const struct kv_store_opts *o,
                      struct kv_store **out, struct kv_err *e)
{
    struct dir_store *d = calloc(1, sizeof *d);
    size_t n = strlen(path);
    if (!d)
        return kv_err_set(e, "out of memory");
    while (n > 1 && path[n - 1] == '/')
        n--;
    d->root = malloc(n + 4);
    if (!d->root) {
        free(d);
        return kv_err_set(e, "out of memory");
    }
    memcpy(d->root, path, n);
    memcpy(d->root + n, "/v1", 4);
    if (n + 64 + 40 >= PATH_MAX) {
        free(d->root);
        free(d);
        return kv_err_set(e, "store path too long: '%s'", path);
    }
    d->base.ops = &dir_ops;
    d->base.opts = *o;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        free(d->root);
        free(d);
        return kv_err_set(e, "store '%s' is not a directory", path);
    }
    if (o->must_exist && !o->read_only && stat(d->root, &st) != 0) {
        int err = errno;
        free(d->root);
        free(d);
        if (err == ENOENT)
            return kv_err_set(e, "no store at '%s': nothing has been put "
                              "there yet", path);
        return kv_err_set(e, "cannot open store '%s': %s", path,
                          strerror(err));
    }
    if (!o->read_only) {
        char sub[PATH_MAX];
        dir_pathf(sub, sizeof sub, "%s/objects", d->root);
        if (mkdir_p(sub, e) < 0) {
            /* a store we cannot write to may still be read */
            if (stat(sub, &st) != 0) {
                free(d->root);
                free(d);
                return -1;
            }
        }
        dir_pathf(sub, sizeof sub, "%s/staging", d->root);
        mkdir(sub, 0777);
    } else if (stat(path, &st) != 0) {
        int err = errno;
        free(d->root);
        free(d);
        if (err == ENOENT)
            return kv_err_set(e, "no store at '%s': nothing has been put "
                              "there yet", path);
        return kv_err_set(e, "cannot open store '%s': %s", path,
                          strerror(err));
    }
    dir_index_open(d, !o->read_only);
    *out = &d->base;
    return 0;
}
