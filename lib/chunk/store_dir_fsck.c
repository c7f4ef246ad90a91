/* store_dir_fsck.c - fsck of the directory store: temporary files left
 * in staging, every blob read and verified against its name, every index
 * row against its blob, the index's totals against its rows; with repair,
 * what is wrong removed or rebuilt (see store_dir.c for the layout). */
#include "chunk/store_dir_impl.h"

static void say(void (*cb)(void *, const char *), void *ctx, const char *fmt,
                ...) KV_PRINTF(3, 4);

static void say(void (*cb)(void *, const char *), void *ctx, const char *fmt,
                ...)
{
    char line[1024];
    va_list ap;
    if (!cb)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cb(ctx, line);
}

static int is_hex32(const char *s)
{
    uint8_t b[16];
    char tmp[33];
    if (strlen(s) < 32)
        return 0;
    memcpy(tmp, s, 32);
    tmp[32] = '\0';
    return kv_unhex(tmp, b) == 0;
}

/* Clean the staging directory of temporary files whose writer is gone. */
static void fsck_staging(struct dir_store *d, int repair,
                         void (*cb)(void *, const char *), void *ctx,
                         struct kv_fsck_report *r)
{
    char sdir[PATH_MAX];
    dir_pathf(sdir, sizeof sdir, "%s/staging", d->root);
    DIR *dp = opendir(sdir);
    struct dirent *de;
    if (!dp)
        return;
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.')
            continue;
        const char *dot = strchr(de->d_name, '.');
        long pid = dot ? strtol(dot + 1, NULL, 10) : 0;
        char path[PATH_MAX];
        struct stat st;
        dir_pathf(path, sizeof path, "%s/%s", sdir, de->d_name);
        if (stat(path, &st) < 0)
            continue;
        int alive = pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
        if (alive && time(NULL) - st.st_mtime < 86400)
            continue;
        r->stale_tmp++;
        say(cb, ctx, "stale temporary file %s%s", de->d_name,
            repair ? ": removed" : "");
        if (repair && unlink(path) == 0)
            r->repaired++;
    }
    closedir(dp);
}

/* One pass over objects/: check every blob, keep the sound keys. */
static int fsck_objects(struct dir_store *d, int repair,
                        void (*cb)(void *, const char *), void *ctx,
                        struct kv_fsck_report *r, struct kv_err *e)
{
    char odir[PATH_MAX];
    dir_pathf(odir, sizeof odir, "%s/objects", d->root);
    DIR *d1 = opendir(odir);
    struct dirent *a, *b, *c;
    if (!d1) {
        if (errno == ENOENT)
            return 0;
        return kv_err_set(e, "cannot read '%s': %s", odir, strerror(errno));
    }
    while ((a = readdir(d1))) {
        char p1[PATH_MAX];
        if (a->d_name[0] == '.')
            continue;
        dir_pathf(p1, sizeof p1, "%s/%s", odir, a->d_name);
        DIR *d2 = opendir(p1);
        if (!d2)
            continue;
        while ((b = readdir(d2))) {
            char p2[PATH_MAX];
            if (b->d_name[0] == '.')
                continue;
            dir_pathf(p2, sizeof p2, "%s/%s", p1, b->d_name);
            DIR *d3 = opendir(p2);
            if (!d3)
                continue;
            while ((c = readdir(d3))) {
                char path[PATH_MAX], hex[33];
                if (c->d_name[0] == '.')
                    continue;
                dir_pathf(path, sizeof path, "%s/%s", p2, c->d_name);
                size_t nl = strlen(c->d_name);
                if (nl != 36 || strcmp(c->d_name + 32, ".kvc") != 0 ||
                    !is_hex32(c->d_name)) {
                    say(cb, ctx, "stray file %s/%s/%s", a->d_name, b->d_name,
                        c->d_name);
                    continue;
                }
                memcpy(hex, c->d_name, 32);
                hex[32] = '\0';
                r->checked++;
                void *map;
                size_t len;
                int fd;
                struct kv_err w;
                struct kv_blob_meta m;
                int st = dir_map_blob(path, 0, &map, &len, &fd, &w);
                if (st != 0)
                    continue;
                int ok;
                if (!map) {
                    ok = 0;
                    kv_err_set(&w, "empty file");
                } else {
                    ok = kv_blob_check(map, len, 1, &m, &w) == KV_BLOB_OK;
                }
                if (ok) {
                    char mh[33];
                    kv_hex(m.key, mh);
                    if (strcmp(mh, hex) != 0 ||
                        strncmp(a->d_name, hex, 2) != 0 ||
                        strncmp(b->d_name, hex + 2, 2) != 0) {
                        ok = 0;
                        kv_err_set(&w, "blob holds key %s", mh);
                    }
                }
                if (map)
                    munmap(map, len);
                close(fd);
                if (!ok) {
                    r->corrupt++;
                    say(cb, ctx, "corrupt %s: %s%s", hex, w.msg,
                        repair ? ": removed" : "");
                    if (repair && unlink(path) == 0) {
                        if (d->db)
                            dir_index_del(d->db, hex);
                        r->repaired++;
                    }
                    continue;
                }
                if (d->db) {
                    sqlite3_stmt *q;
                    int have = 0;
                    int64_t bytes = -1;
                    if (sqlite3_prepare_v2(d->db, "SELECT bytes FROM entries "
                                           "WHERE key = ?1", -1, &q, NULL)
                        == SQLITE_OK) {
                        sqlite3_bind_text(q, 1, hex, -1, SQLITE_TRANSIENT);
                        if (sqlite3_step(q) == SQLITE_ROW) {
                            have = 1;
                            bytes = sqlite3_column_int64(q, 0);
                        }
                        sqlite3_finalize(q);
                    }
                    if (have && bytes != (int64_t)len) {
                        r->unindexed++;
                        say(cb, ctx, "index row of %s has the wrong size%s",
                            hex, repair ? ": fixed" : "");
                        if (repair) {
                            dir_index_del(d->db, hex);
                            have = 0;
                        }
                    } else if (!have) {
                        r->unindexed++;
                        say(cb, ctx, "unindexed %s%s", hex,
                            repair ? ": added" : "");
                    }
                    if (!have && repair &&
                        dir_index_add(d->db, &m, dir_now_unix()) == 0)
                        r->repaired++;
                }
            }
            closedir(d3);
        }
        closedir(d2);
    }
    closedir(d1);
    return 0;
}

/* Index rows without a blob. */
static int fsck_rows(struct dir_store *d, int repair,
                     void (*cb)(void *, const char *), void *ctx,
                     struct kv_fsck_report *r, struct kv_err *e)
{
    sqlite3_stmt *st;
    if (!d->db)
        return 0;
    if (sqlite3_prepare_v2(d->db, "SELECT key FROM entries", -1, &st, NULL)
        != SQLITE_OK)
        return kv_err_set(e, "index: %s", sqlite3_errmsg(d->db));
    char (*gone)[33] = NULL;
    size_t n = 0, cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *hex = (const char *)sqlite3_column_text(st, 0);
        uint8_t key[16];
        char path[PATH_MAX];
        if (!hex || kv_unhex(hex, key) < 0) {
            continue;
        }
        dir_blob_path(d, key, path, sizeof path);
        if (access(path, F_OK) == 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char (*ng)[33] = realloc(gone, nc * sizeof *gone);
            if (!ng)
                break;
            gone = ng;
            cap = nc;
        }
        memcpy(gone[n++], hex, 33);
    }
    sqlite3_finalize(st);
    for (size_t i = 0; i < n; i++) {
        r->orphan_rows++;
        say(cb, ctx, "index row without blob %s%s", gone[i],
            repair ? ": removed" : "");
        if (repair && dir_index_del(d->db, gone[i]) == 0)
            r->repaired++;
    }
    free(gone);
    return 0;
}

/* The totals stat reads against a count of the rows, after the repairs
 * above (whose changes of rows the totals follow). */
static int fsck_totals(struct dir_store *d, int repair,
                       void (*cb)(void *, const char *), void *ctx,
                       struct kv_fsck_report *r, struct kv_err *e)
{
    struct dir_totals_check c;
    int rc = dir_index_check_totals(d, repair, &c);
    const char *fix = repair ? ": recounted" : "";
    if (rc < 0)
        return kv_err_set(e, "index: cannot check its totals: %s",
                          sqlite3_errmsg(d->db));
    if (rc == 0)
        return 0;
    r->wrong_totals++;
    if (c.kept[0] < 0)
        say(cb, ctx, "index totals missing; the rows hold %lld entries, "
            "%lld bytes%s", (long long)c.rows[0], (long long)c.rows[1], fix);
    else if (c.kept[0] != c.rows[0] || c.kept[1] != c.rows[1])
        say(cb, ctx, "index totals say %lld entries, %lld bytes; the rows "
            "hold %lld entries, %lld bytes%s", (long long)c.kept[0],
            (long long)c.kept[1], (long long)c.rows[0], (long long)c.rows[1],
            fix);
    if (c.triggers != 3)
        say(cb, ctx, "index: %d of the 3 triggers that keep its totals%s",
            c.triggers, repair ? ": made again" : "");
    if (repair)
        r->repaired++;
    return 0;
}

int dir_fsck(struct kv_store *s, int repair,
             void (*cb)(void *, const char *), void *ctx,
             struct kv_fsck_report *r, struct kv_err *e)
{
    struct dir_store *d = (struct dir_store *)s;
    if (repair && !d->db) {
        /* an unusable index is rebuilt from the blobs */
        char path[PATH_MAX];
        const char *sfx[] = {"", "-wal", "-shm"};
        say(cb, ctx, "index unreadable (%s): rebuilding it", d->db_err);
        r->index_unreadable = 1;
        for (int i = 0; i < 3; i++) {
            dir_pathf(path, sizeof path, "%s/index.db%s", d->root, sfx[i]);
            if (unlink(path) < 0 && errno != ENOENT)
                return kv_err_set(e, "the index is unreadable (%s) and "
                                  "cannot be replaced: cannot remove '%s': "
                                  "%s", d->db_err, path, strerror(errno));
        }
        if (dir_index_open(d, 1) < 0)
            return kv_err_set(e, "the index is unreadable and cannot be "
                              "rebuilt: %s", d->db_err);
        r->repaired++;
    } else if (!d->db) {
        /* not rows without blobs: nothing of the index can be read */
        say(cb, ctx, "index unreadable: %s", d->db_err);
        r->index_unreadable = 1;
    }
    if (d->db && sqlite3_exec(d->db, "PRAGMA quick_check", NULL, NULL, NULL)
        != SQLITE_OK)
        say(cb, ctx, "index: %s", sqlite3_errmsg(d->db));
    fsck_staging(d, repair, cb, ctx, r);
    if (fsck_objects(d, repair, cb, ctx, r, e) < 0 ||
        fsck_rows(d, repair, cb, ctx, r, e) < 0)
        return -1;
    return fsck_totals(d, repair, cb, ctx, r, e);
}
