/* store_totals.c - the entries and bytes that stat reports on a dir:
 * store are the totals its index keeps, and they equal an independent
 * count (the rows, read with SQLite apart from libkv, and the blob files
 * on disk) after puts, puts of chunks already there, rm, evict, several
 * processes writing at once, the upgrade of an index of the first schema
 * (no totals) by one opener or by several at once; fsck finds totals
 * that differ from the rows, a lost totals row, table or trigger, and
 * --repair makes them right again. */
#include <dirent.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tap.h"
#include "core/kv.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"
#include "chunk/store.h"

enum { NKEYS = 40 };

static char root[256], spec[300], index_path[320];
static struct kv_namespace ns;

/* Chunk k: 4 + k % 9 tokens from 1000 * (k + 1), so sizes differ. */
struct chunk {
    int32_t tok[16];
    struct kv_blob_meta meta;
    uint8_t *hdr, *payload;
};

static void make_chunk(struct chunk *c, int k)
{
    struct kv_err e;
    size_t n = 4 + (size_t)(k % 9);
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < n; i++)
        c->tok[i] = 1000 * (k + 1) + (int32_t)i;
    struct kv_blob_meta *m = &c->meta;
    kv_ns_digest(&ns, m->ns, &e);
    kv_ctx_digest(KV_CTX_NONE, NULL, 0, m->ctx);
    kv_chunk_key(m->ns, m->ctx, c->tok, n, m->key);
    m->n_tokens = (uint32_t)n;
    m->n_layers = m->n_kv_heads = 1;
    m->head_dim = 8;
    m->dtype = KV_F32;
    kv_blob_payload_len(m, &m->payload_len, &e);
    c->payload = malloc(m->payload_len);
    for (size_t i = 0; i < m->payload_len; i++)
        c->payload[i] = (uint8_t)(k * 31 + (int)i * 7);
    m->payload_xxh3 = kv_blob_checksum(c->payload, m->payload_len);
    kv_blob_header(m, c->tok, &c->hdr, &e);
}

static struct chunk chunks[NKEYS];

static struct kv_store *open_store(int read_only)
{
    struct kv_store_opts o;
    struct kv_store *s = NULL;
    struct kv_err e;
    kv_store_opts_init(&o);
    o.read_only = read_only;
    if (kv_store_open(spec, &o, &s, &e) < 0)
        printf("# open: %s\n", e.msg);
    return s;
}

static int put(struct kv_store *s, int k)
{
    struct kv_err e;
    int existed;
    struct chunk *c = &chunks[k];
    if (kv_store_put(s, &c->meta, c->hdr, c->payload, &existed, &e) < 0) {
        printf("# put: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static int rm(struct kv_store *s, int k)
{
    struct kv_err e;
    int found;
    return kv_store_rm(s, chunks[k].meta.key, &found, &e);
}

/* Run sql on the index with SQLite itself; 0 or -1. */
static int sql(const char *q)
{
    sqlite3 *db;
    int rc = -1;
    if (sqlite3_open_v2(index_path, &db, SQLITE_OPEN_READWRITE, NULL) ==
        SQLITE_OK) {
        sqlite3_busy_timeout(db, 15000);
        rc = sqlite3_exec(db, q, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    }
    sqlite3_close(db);
    return rc;
}

/* One integer from the index (-1 on an error). */
static long long sql_int(const char *q)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_open_v2(index_path, &db, SQLITE_OPEN_READONLY, NULL) ==
        SQLITE_OK && sqlite3_prepare_v2(db, q, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

/* The blob files under objects/: their number and sizes. */
static void count_files(const char *dir, int depth, long long *n,
                        long long *bytes)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    if (!dp)
        return;
    while ((de = readdir(dp))) {
        char p[600];
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (depth < 2)
            count_files(p, depth + 1, n, bytes);
        else if (stat(p, &st) == 0 && strstr(de->d_name, ".kvc")) {
            (*n)++;
            *bytes += st.st_size;
        }
    }
    closedir(dp);
}

/* stat's entries and bytes against the rows and against the files. */
static void check(const char *when, int read_only)
{
    struct kv_store *s = open_store(read_only);
    struct kv_store_stats t;
    struct kv_err e;
    char dir[300];
    long long nf = 0, bf = 0;
    int rc = s && kv_store_stat(s, &t, &e) == 0;
    kv_store_close(s);
    long long nr = sql_int("SELECT count(*) FROM entries"),
              br = sql_int("SELECT coalesce(sum(bytes), 0) FROM entries");
    snprintf(dir, sizeof dir, "%s/v1/objects", root);
    count_files(dir, 0, &nf, &bf);
    TAP_OK(rc && (long long)t.entries == nr && (long long)t.bytes == br &&
           nr == nf && br == bf,
           "%s: stat %llu entries, %llu bytes; rows %lld, %lld; files "
           "%lld, %lld", when, rc ? (unsigned long long)t.entries : 0,
           rc ? (unsigned long long)t.bytes : 0, nr, br, nf, bf);
}

static void line_cb(void *ctx, const char *line)
{
    char *buf = ctx;
    size_t n = strlen(buf);
    snprintf(buf + n, 4096 - n, "%s\n", line);
}

/* fsck (the lines it says in lines, 4096 bytes) into r. */
static void fsck(int repair, struct kv_fsck_report *r, char *lines)
{
    struct kv_store *s = open_store(0);
    struct kv_err e;
    lines[0] = '\0';
    memset(r, 0xff, sizeof *r);
    if (!s || kv_store_fsck(s, repair, line_cb, lines, r, &e) < 0)
        printf("# fsck: %s\n", s ? e.msg : "no store");
    kv_store_close(s);
}

/* n processes at once, each doing ops puts, rms and evicts over the keys
 * (overlapping: the same chunk put by several), reopening the store now
 * and then as separate commands would.  0 when all went well. */
static int writers(int n, int ops)
{
    pid_t pid[8];
    for (int p = 0; p < n; p++) {
        pid[p] = fork();
        if (pid[p] != 0)
            continue;
        unsigned seed = 7u * (unsigned)p + 3;
        struct kv_store *s = NULL;
        int bad = 0;
        for (int i = 0; i < ops && !bad; i++) {
            if (!s && !(s = open_store(0)))
                bad = 1;
            int k = (int)(rand_r(&seed) % NKEYS), what = rand_r(&seed) % 10;
            if (bad)
                break;
            if (what < 6)
                bad = put(s, k) < 0;
            else if (what < 9)
                bad = rm(s, k) < 0;
            else {
                struct kv_evict_report er;
                struct kv_err e;
                bad = kv_store_evict(s, 100000, 0.8, &er, &e) < 0;
            }
            if (i % 8 == 7) {
                kv_store_close(s);
                s = NULL;
            }
        }
        kv_store_close(s);
        _exit(bad);
    }
    int fails = 0;
    for (int p = 0; p < n; p++) {
        int st;
        waitpid(pid[p], &st, 0);
        fails += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return fails;
}

/* The index as the first stores made it: no totals, version 0. */
static int downgrade(void)
{
    return sql("BEGIN; DROP TRIGGER totals_add; DROP TRIGGER totals_del; "
               "DROP TRIGGER totals_size; DROP TABLE totals; "
               "PRAGMA user_version = 0; COMMIT");
}

int main(void)
{
    struct kv_store *s;
    struct kv_fsck_report r;
    char lines[4096];
    int ok;

    snprintf(root, sizeof root, "%s/kvchunk-totals.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(spec, sizeof spec, "dir:%s", root);
    snprintf(index_path, sizeof index_path, "%s/v1/index.db", root);
    memset(&ns, 0, sizeof ns);
    ns.model = "totals";
    ns.dtype = KV_F32;
    ns.n_layers = ns.n_kv_heads = 1;
    ns.head_dim = 8;
    ns.mask = KV_CTX_NONE;
    kv_rope_init(&ns.rope, 8);
    for (int k = 0; k < NKEYS; k++)
        make_chunk(&chunks[k], k);

    /* one process: puts, the same chunks again, rm, evict */
    s = open_store(0);
    ok = s != NULL;
    for (int k = 0; k < 20 && ok; k++)
        ok = put(s, k) == 0;
    kv_store_close(s);
    TAP_OK(ok, "20 chunks put");
    TAP_OK(sql_int("PRAGMA user_version") == 1, "a new index is of schema 1");
    check("after 20 puts", 0);
    s = open_store(0);
    for (int k = 10; k < 25 && ok; k++)
        ok = put(s, k) == 0;
    kv_store_close(s);
    check("after 15 puts, 10 of chunks already there", 0);
    s = open_store(0);
    for (int k = 0; k < 25 && ok; k += 3)
        ok = rm(s, k) == 0;
    ok = ok && rm(s, 0) == 0;           /* absent: nothing changes */
    kv_store_close(s);
    check("after 9 rm and one of a missing key", 0);
    s = open_store(0);
    struct kv_evict_report er;
    struct kv_err e;
    ok = ok && kv_store_evict(s, 30000, 0.5, &er, &e) == 0 && er.removed > 0;
    kv_store_close(s);
    TAP_OK(ok, "evict removed %llu entries",
           ok ? (unsigned long long)er.removed : 0);
    check("after evict", 0);
    check("read-only", 1);

    /* stat reads the totals: a row changed behind its back shows */
    ok = sql("UPDATE totals SET entries = entries + 5, bytes = bytes + 7") == 0;
    s = open_store(1);
    struct kv_store_stats t;
    long long nr = sql_int("SELECT count(*) FROM entries");
    ok = ok && s && kv_store_stat(s, &t, &e) == 0 &&
         (long long)t.entries == nr + 5;
    kv_store_close(s);
    TAP_OK(ok, "stat reads the kept totals (%lld rows, stat says %llu)", nr,
           ok ? (unsigned long long)t.entries : 0);
    fsck(0, &r, lines);
    TAP_OK(r.wrong_totals == 1 && r.repaired == 0 &&
           strstr(lines, "index totals say") && strstr(lines, "the rows hold"),
           "fsck finds the totals wrong: %s", lines);
    fsck(1, &r, lines);
    TAP_OK(r.wrong_totals == 1 && r.repaired == 1 &&
           strstr(lines, ": recounted"), "fsck --repair recounts them");
    fsck(0, &r, lines);
    TAP_OK(r.wrong_totals == 0 && lines[0] == '\0', "then fsck is clean");
    check("after the repair", 0);
    ok = sql("DELETE FROM totals") == 0;
    check("totals row lost: stat counts the rows", 1);
    fsck(1, &r, lines);
    TAP_OK(ok && r.wrong_totals == 1 && strstr(lines, "totals missing"),
           "fsck --repair finds the totals row lost and makes it again");
    check("after that repair", 0);
    ok = sql("DROP TRIGGER totals_del") == 0;
    fsck(0, &r, lines);
    TAP_OK(ok && r.wrong_totals == 1 &&
           strstr(lines, "2 of the 3 triggers"),
           "fsck finds a trigger of the totals missing: %s", lines);
    fsck(1, &r, lines);
    TAP_OK(r.repaired == 1 && strstr(lines, ": made again") &&
           sql_int("SELECT count(*) FROM sqlite_master WHERE type = "
                   "'trigger'") == 3, "fsck --repair makes it again");
    s = open_store(0);
    ok = s && rm(s, 1) == 0 && rm(s, 2) == 0 && put(s, 30) == 0;
    kv_store_close(s);
    check("then rm and put", 0);
    ok = ok && sql("DROP TABLE totals") == 0;
    check("totals table lost: stat counts the rows", 1);
    fsck(1, &r, lines);
    TAP_OK(ok && r.wrong_totals == 1 && strstr(lines, "totals missing") &&
           sql_int("SELECT count(*) FROM totals") == 1,
           "fsck --repair makes the table again");
    s = open_store(0);
    ok = s && put(s, 31) == 0;
    kv_store_close(s);
    TAP_OK(ok, "then a put");
    check("after it", 0);

    /* several processes at once */
    TAP_OK(writers(4, 60) == 0, "4 processes put, rm and evict at once");
    check("after the writers", 0);
    fsck(0, &r, lines);
    TAP_OK(r.wrong_totals == 0 && r.orphan_rows == 0 && r.unindexed == 0,
           "fsck: totals and rows agree");

    /* an index of the first schema */
    ok = downgrade() == 0;
    TAP_OK(ok && sql_int("PRAGMA user_version") == 0 &&
           sql_int("SELECT count(*) FROM sqlite_master WHERE name = "
                   "'totals'") == 0, "an index of schema 0 (no totals)");
    check("schema 0, read-only: stat counts the rows", 1);
    TAP_OK(sql_int("PRAGMA user_version") == 0,
           "a read-only open leaves the index as it is");
    check("schema 0, opened to write: upgraded", 0);
    TAP_OK(sql_int("PRAGMA user_version") == 1 &&
           sql_int("SELECT count(*) FROM totals") == 1,
           "the upgrade sets version 1 with one totals row");
    ok = downgrade() == 0;
    TAP_OK(ok && writers(5, 30) == 0,
           "schema 0 again: 5 processes open it at once and write");
    TAP_OK(sql_int("PRAGMA user_version") == 1 &&
           sql_int("SELECT count(*) FROM sqlite_master WHERE type = "
                   "'trigger'") == 3, "upgraded once: three triggers");
    check("after the concurrent upgrade", 0);
    fsck(0, &r, lines);
    TAP_OK(r.wrong_totals == 0, "fsck: totals and rows agree");

    for (int k = 0; k < NKEYS; k++) {
        free(chunks[k].hdr);
        free(chunks[k].payload);
    }
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", root);
    return tap_done();
}
