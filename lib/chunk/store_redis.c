/* store_redis.c - the shared chunk store: one Redis string per chunk.
 *
 *   kvc:1:<key hex>    the whole blob (blob.h): header, token ids, payload
 *   kvc:1:stats        a hash of counters (hits, misses, collisions,
 *                      checksum_failures, puts)
 *
 * Writes are `SET key blob NX [EX ttl]`: the first writer wins and a blob
 * is never half there, since one key holds all of it (no separate metadata
 * key to orphan); a put that finds a damaged value there replaces it, as a
 * dir: store does.  Reads pipeline one GET per chunk and verify header,
 * request and payload checksum; a read with a sink (kv_store_get_each)
 * keeps two GETs in flight and parses the replies itself (stream_get).  Capacity is Redis' business: run it with
 * maxmemory and maxmemory-policy allkeys-lru, and proto-max-bulk-len above
 * the largest blob.  Every connect is bounded by the timeout, and so is
 * every command as a whole: sending it and reading its reply to the last
 * byte (the deadlines of store_redis_resp.c); a dead, hung or trickling
 * server is an error, never a hang.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <hiredis/hiredis.h>
#include "chunk/store.h"
#include "chunk/store_redis.h"
#include "chunk/store_redis_impl.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"

#define KEY_PREFIX "kvc:1:"
#define STATS_KEY "kvc:1:stats"

/* GETs a streamed read keeps in flight on a connection: the server then
 * has the next reply ready while one is read, and holds no more than two
 * copies of blobs at a time (all of them, pipelined at once, cost it fresh
 * memory for every reply; one at a time leaves it idle for a round trip) */
#define WINDOW 2

static void key_name(const uint8_t key[16], char out[64])
{
    char hex[33];
    kv_hex(key, hex);
    snprintf(out, 64, KEY_PREFIX "%s", hex);
}

static void bump(struct redis_store *r, const char *field, long long by)
{
    /* best effort, pipelined with the caller's reads; the replies are
     * drained after them */
    if (by && !r->no_stats)
        redisAppendCommand(r->c, "HINCRBY " STATS_KEY " %s %lld", field, by);
}

/* The replies of n pipelined GETs, each hit handed to the sink; the
 * counters in cnt (hits, misses, collisions, checksum failures). */
static int stream_get(struct redis_store *r, const struct kv_chunk_req *req,
                      size_t n, struct kv_blob_ref *refs, int *status,
                      struct kv_err *why, long long cnt[4], struct kv_err *e)
{
    const struct kv_get_sink *sink = r->base.sink;
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) {
        for (; sent < n && sent < i + WINDOW; sent++) {
            char name[64];
            key_name(req[sent].key, name);
            if (redisAppendCommand(r->c, "GET %s", name) != REDIS_OK)
                return redis_ctx_err(r, e);
        }
        /* reply i, and the sending of what is appended, by one deadline */
        r->deadline = redis_now() + r->timeout;
        int done = 0;
        while (!done)
            if (redis_arm(r, 1, r->deadline) < 0 ||
                redisBufferWrite(r->c, &done) != REDIS_OK)
                return redis_ctx_err(r, e);
        size_t len = 0;
        int k = redis_stream_reply(r, &len, e);
        if (k < 0) {
            /* an error reply: read the rest, so that the connection
             * stays in step for what follows (a MOVED, a retry) */
            for (size_t j = i + 1; k == -2 && j < sent; j++) {
                struct kv_err x;
                r->deadline = redis_now() + r->timeout;
                if (redis_stream_reply(r, &len, &x) == -1)
                    break;
            }
            return -1;
        }
        if (k == 0) {
            status[i] = KV_GET_ABSENT;
            cnt[1]++;
            continue;
        }
        struct kv_err w;
        int rejected = 0;
        w.msg[0] = '\0';
        status[i] = kv_store_verify(r->blob, len, &req[i], &refs[i].meta, &w);
        if (status[i] == KV_GET_HIT) {
            refs[i].payload = r->blob + refs[i].meta.header_len;
            k = sink->hit(sink->ctx, i, &refs[i], &w, e);
            memset(&refs[i], 0, sizeof refs[i]);
            if (k < 0) {
                for (size_t j = i + 1; j < sent; j++) {
                    struct kv_err x;
                    r->deadline = redis_now() + r->timeout;
                    if (redis_stream_reply(r, &len, &x) == -1)
                        break;
                }
                return -1;
            }
            if (k == 0) {
                cnt[0]++;
                continue;
            }
            status[i] = KV_GET_COLLISION;
            rejected = 1;
        }
        cnt[1]++;
        if (status[i] == KV_GET_COLLISION)
            cnt[2]++;
        else
            cnt[3]++;
        if (why && rejected)
            why[i] = w;
        else if (why) {
            char name[64];
            key_name(req[i].key, name);
            snprintf(why[i].msg, sizeof why[i].msg, "redis key %s: %.400s",
                     name, w.msg);
        }
    }
    if (r->lpos != r->llen)
        return redis_stream_fail(r, REDIS_ERR_PROTOCOL,
                                 "Protocol error: more replies than commands", e);
    return 0;
}

static int redis_get(struct kv_store *s, const struct kv_chunk_req *req,
                     size_t n, struct kv_blob_ref *refs, int *status,
                     struct kv_err *why, struct kv_err *e)
{
    struct redis_store *r = (struct redis_store *)s;
    long long hits = 0, misses = 0, coll = 0, bad = 0;
    /* streamed, unless hiredis holds part of a reply already */
    if (s->sink && r->c->reader->pos == r->c->reader->len &&
        r->c->reader->ridx == -1) {
        long long cnt[4] = {0, 0, 0, 0};
        if (stream_get(r, req, n, refs, status, why, cnt, e) < 0)
            return -1;
        hits = cnt[0];
        misses = cnt[1];
        coll = cnt[2];
        bad = cnt[3];
        goto counted;
    }
    for (size_t i = 0; i < n; i++) {
        char name[64];
        key_name(req[i].key, name);
        if (redisAppendCommand(r->c, "GET %s", name) != REDIS_OK)
            return redis_ctx_err(r, e);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *rep = NULL;
        if (redis_get_reply(r, (void **)&rep) != REDIS_OK || !rep) {
            for (size_t j = 0; j < i; j++)
                kv_blob_ref_release(&refs[j]);
            return redis_ctx_err(r, e);
        }
        if (rep->type == REDIS_REPLY_NIL) {
            freeReplyObject(rep);
            status[i] = KV_GET_ABSENT;
            misses++;
            continue;
        }
        if (rep->type != REDIS_REPLY_STRING) {
            for (size_t j = 0; j < i; j++)
                kv_blob_ref_release(&refs[j]);
            redis_drain(r, n - i - 1);
            return redis_reply_err(r, rep, e);
        }
        struct kv_err w;
        w.msg[0] = '\0';
        status[i] = kv_store_verify((const uint8_t *)rep->str, rep->len,
                                    &req[i], &refs[i].meta, &w);
        if (status[i] == KV_GET_HIT) {
            refs[i].reply = rep;
            refs[i].payload = (const uint8_t *)rep->str +
                              refs[i].meta.header_len;
            if (!s->sink) {
                hits++;
                continue;
            }
            /* streamed: the sink takes it now and the reply goes, so
             * that the next one reuses its memory */
            int k = s->sink->hit(s->sink->ctx, i, &refs[i], &w, e);
            kv_blob_ref_release(&refs[i]);
            if (k < 0) {
                redis_drain(r, n - i - 1);
                return -1;
            }
            if (k == 0) {
                hits++;
                continue;
            }
            status[i] = KV_GET_COLLISION;
            misses++;
            coll++;
            if (why)
                why[i] = w;
            continue;
        }
        freeReplyObject(rep);
        misses++;
        if (status[i] == KV_GET_COLLISION)
            coll++;
        else
            bad++;
        if (why) {
            char name[64];
            key_name(req[i].key, name);
            snprintf(why[i].msg, sizeof why[i].msg, "redis key %s: %.400s",
                     name, w.msg);
        }
    }
counted:;
    int nb = r->no_stats ? 0 : (hits > 0) + (misses > 0) + (coll > 0) + (bad > 0);
    bump(r, "hits", hits);
    bump(r, "misses", misses);
    bump(r, "collisions", coll);
    bump(r, "checksum_failures", bad);
    redis_drain(r, (size_t)nb);
    return 0;
}

/* SET name blob [NX] [EX ttl]; the reply or NULL. */
static redisReply *set_blob(struct redis_store *r, const char *name,
                            const uint8_t *blob, size_t len, int nx)
{
    const struct kv_store *s = &r->base;
    if (s->opts.ttl > 0)
        return redis_cmd(r, nx ? "SET %s %b NX EX %lld"
                                       : "SET %s %b EX %lld", name, blob, len,
                              (long long)s->opts.ttl);
    return redis_cmd(r, nx ? "SET %s %b NX" : "SET %s %b", name, blob,
                          len);
}

/* Is a stored value a sound blob (header, payload checksum) of key? */
static int value_sound(const redisReply *rep, const uint8_t key[16])
{
    struct kv_blob_meta mm;
    struct kv_err w;
    return kv_blob_check((const uint8_t *)rep->str, rep->len, 1, &mm, &w) ==
           KV_BLOB_OK && memcmp(mm.key, key, 16) == 0;
}

static int redis_put(struct kv_store *s, const struct kv_blob_meta *m,
                     const uint8_t *hdr, const void *payload, int *existed,
                     struct kv_err *e)
{
    struct redis_store *r = (struct redis_store *)s;
    char name[64];
    size_t len = (size_t)m->header_len + (size_t)m->payload_len;
    uint8_t *blob = malloc(len ? len : 1);
    redisReply *rep;
    if (!blob)
        return kv_err_set(e, "out of memory");
    memcpy(blob, hdr, m->header_len);
    memcpy(blob + m->header_len, payload, m->payload_len);
    *existed = 0;
    key_name(m->key, name);
    rep = set_blob(r, name, blob, len, 1);
    if (rep && rep->type == REDIS_REPLY_NIL) {
        /* a value is there: sound (the first writer won), or damaged,
         * which this put replaces as a dir: store does */
        int damaged = 0;
        freeReplyObject(rep);
        rep = redis_cmd(r, "GET %s", name);
        if (rep && rep->type == REDIS_REPLY_STRING)
            damaged = !value_sound(rep, m->key);
        if (rep && (rep->type == REDIS_REPLY_STRING ||
                    rep->type == REDIS_REPLY_NIL)) {
            int gone = rep->type == REDIS_REPLY_NIL;   /* expired meanwhile */
            freeReplyObject(rep);
            rep = NULL;
            if (damaged || gone)
                rep = set_blob(r, name, blob, len, gone);
            else
                *existed = 1;
        }
        if (*existed) {
            free(blob);
            return 0;
        }
    }
    free(blob);
    if (!rep)
        return redis_ctx_err(r, e);
    if (rep->type == REDIS_REPLY_NIL) {
        *existed = 1;           /* another writer came first */
    } else if (rep->type == REDIS_REPLY_STATUS) {
        *existed = 0;
    } else {
        return redis_reply_err(r, rep, e);
    }
    freeReplyObject(rep);
    if (!*existed && !r->no_stats) {
        rep = redis_cmd(r, "HINCRBY " STATS_KEY " puts 1");
        if (rep)
            freeReplyObject(rep);
    }
    return 0;
}

static int redis_rm(struct kv_store *s, const uint8_t *key, int *found,
                    struct kv_err *e)
{
    struct redis_store *r = (struct redis_store *)s;
    char name[64];
    key_name(key, name);
    redisReply *rep = redis_cmd(r, "UNLINK %s", name);
    if (!rep || rep->type != REDIS_REPLY_INTEGER)
        return redis_reply_err(r, rep, e);
    *found = rep->integer > 0;
    freeReplyObject(rep);
    return 0;
}

static int redis_pin(struct kv_store *s, const uint8_t *key, int on,
                     int *found, struct kv_err *e)
{
    (void)s; (void)key; (void)on; (void)found;
    return kv_err_set(e, "pins belong to dir: stores; Redis evicts by its "
                      "own maxmemory-policy");
}

/* SCAN every blob key; fn gets the names of each SCAN reply (about a
 * thousand) at once, so that it can pipeline its commands over them.
 * Returns 0 or -1. */
static int scan_keys(struct redis_store *r,
                     int (*fn)(struct redis_store *, const char **, size_t,
                               void *),
                     void *arg, struct kv_err *e)
{
    char cursor[32] = "0";
    const char **names = NULL;
    size_t cap = 0;
    int rc = 0;
    do {
        redisReply *rep = redis_cmd(r, "SCAN %s MATCH " KEY_PREFIX "* "
                                         "COUNT 1000", cursor);
        if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING) {
            free(names);
            return redis_reply_err(r, rep, e);
        }
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        redisReply *keys = rep->element[1];
        if (keys->elements > cap) {
            const char **nn = realloc(names, keys->elements * sizeof *nn);
            if (!nn) {
                freeReplyObject(rep);
                free(names);
                return kv_err_set(e, "out of memory");
            }
            names = nn;
            cap = keys->elements;
        }
        size_t n = 0;
        for (size_t i = 0; i < keys->elements; i++) {
            const char *k = keys->element[i]->str;
            if (!k || strcmp(k, STATS_KEY) == 0 ||
                strlen(k) != strlen(KEY_PREFIX) + 32)
                continue;
            names[n++] = k;
        }
        if (n)
            rc = fn(r, names, n, arg);
        freeReplyObject(rep);
    } while (rc == 0 && strcmp(cursor, "0") != 0);
    free(names);
    return rc;
}

struct ls_ctx {
    int (*cb)(void *, const struct kv_store_entry *);
    void *ctx;
    struct kv_err *e;
    struct kv_store_stats *st;
};

/* One entry of ls (or stat's count) from the head of blob k, rep (freed
 * here). */
static int ls_one(struct ls_ctx *l, const char *k, redisReply *rep)
{
    struct kv_store_entry en;
    struct kv_blob_meta m;
    struct kv_err w;
    memset(&en, 0, sizeof en);
    if (rep->type != REDIS_REPLY_STRING || rep->len == 0) {
        freeReplyObject(rep);
        return 0;                /* gone (evicted) meanwhile */
    }
    if (kv_blob_peek((const uint8_t *)rep->str, rep->len, &m, &w) < 0) {
        kv_unhex(k + strlen(KEY_PREFIX), en.key);
    } else {
        memcpy(en.key, m.key, 16);
        en.bytes = m.header_len + m.payload_len;
        en.n_tokens = m.n_tokens;
        en.base_pos = m.base_pos;
    }
    freeReplyObject(rep);
    if (l->st) {
        l->st->entries++;
        l->st->bytes += en.bytes;
        return 0;
    }
    return l->cb(l->ctx, &en) < 0 ? kv_err_set(l->e, "listing stopped") : 0;
}

/* ls and stat over the names of one SCAN reply: the GETRANGEs of their
 * heads pipelined, one round trip for all instead of one for each. */
static int ls_keys(struct redis_store *r, const char **k, size_t n,
                   void *arg)
{
    struct ls_ctx *l = arg;
    for (size_t i = 0; i < n; i++)
        if (redisAppendCommand(r->c, "GETRANGE %s 0 %d", k[i],
                               KV_BLOB_TOKENS_OFF - 1) != REDIS_OK)
            return redis_ctx_err(r, l->e);
    for (size_t i = 0; i < n; i++) {
        redisReply *rep = NULL;
        if (redis_get_reply(r, (void **)&rep) != REDIS_OK || !rep)
            return redis_ctx_err(r, l->e);
        if (ls_one(l, k[i], rep) < 0) {
            redis_drain(r, n - i - 1);
            return -1;
        }
    }
    return 0;
}

static int redis_ls(struct kv_store *s,
                    int (*cb)(void *, const struct kv_store_entry *),
                    void *ctx, struct kv_err *e)
{
    struct ls_ctx l = {cb, ctx, e, NULL};
    return scan_keys((struct redis_store *)s, ls_keys, &l, e);
}

static int redis_stat(struct kv_store *s, struct kv_store_stats *st,
                      struct kv_err *e)
{
    struct redis_store *r = (struct redis_store *)s;
    struct ls_ctx l = {NULL, NULL, e, st};
    if (scan_keys(r, ls_keys, &l, e) < 0)
        return -1;
    redisReply *rep = redis_cmd(r, "HGETALL " STATS_KEY);
    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        return redis_reply_err(r, rep, e);
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const char *k = rep->element[i]->str;
        uint64_t v = strtoull(rep->element[i + 1]->str, NULL, 10);
        if (!strcmp(k, "hits")) st->hits = v;
        else if (!strcmp(k, "misses")) st->misses = v;
        else if (!strcmp(k, "collisions")) st->collisions = v;
        else if (!strcmp(k, "checksum_failures")) st->checksum_failures = v;
        else if (!strcmp(k, "puts")) st->puts = v;
    }
    freeReplyObject(rep);
    rep = redis_cmd(r, "INFO stats");
    if (!rep || rep->type != REDIS_REPLY_STRING)
        return redis_reply_err(r, rep, e);
    const char *ev = strstr(rep->str, "evicted_keys:");
    if (ev)
        st->evictions = strtoull(ev + 13, NULL, 10);
    freeReplyObject(rep);
    return 0;
}

static int redis_evict(struct kv_store *s, uint64_t max_bytes, double low,
                       struct kv_evict_report *rp, struct kv_err *e)
{
    (void)s; (void)max_bytes; (void)low; (void)rp;
    return kv_err_set(e, "a Redis store evicts by itself: run redis-server "
                      "with maxmemory and maxmemory-policy allkeys-lru");
}

struct fsck_ctx {
    int repair;
    void (*cb)(void *, const char *);
    void *ctx;
    struct kv_fsck_report *r;
    struct kv_err *e;
};

static int fsck_one(struct redis_store *r, const char *k, void *arg)
{
    struct fsck_ctx *f = arg;
    redisReply *rep = redis_cmd(r, "GET %s", k);
    if (!rep)
        return redis_ctx_err(r, f->e);
    if (rep->type != REDIS_REPLY_STRING) {
        freeReplyObject(rep);
        return 0;
    }
    struct kv_blob_meta m;
    struct kv_err w;
    int ok = kv_blob_check((const uint8_t *)rep->str, rep->len, 1, &m, &w)
             == KV_BLOB_OK;
    freeReplyObject(rep);
    if (ok) {
        char name[64];
        key_name(m.key, name);
        if (strcmp(name, k) != 0) {
            ok = 0;
            kv_err_set(&w, "blob holds another key");
        }
    }
    f->r->checked++;
    if (ok)
        return 0;
    f->r->corrupt++;
    if (f->cb) {
        char line[700];
        snprintf(line, sizeof line, "corrupt %s: %s%s",
                 k + strlen(KEY_PREFIX), w.msg,
                 f->repair ? ": removed" : "");
        f->cb(f->ctx, line);
    }
    if (f->repair) {
        rep = redis_cmd(r, "UNLINK %s", k);
        if (!rep)
            return redis_ctx_err(r, f->e);
        freeReplyObject(rep);
        f->r->repaired++;
    }
    return 0;
}

static int fsck_keys(struct redis_store *r, const char **k, size_t n,
                     void *arg)
{
    for (size_t i = 0; i < n; i++)
        if (fsck_one(r, k[i], arg) < 0)
            return -1;
    return 0;
}

static int redis_fsck(struct kv_store *s, int repair,
                      void (*cb)(void *, const char *), void *ctx,
                      struct kv_fsck_report *rp, struct kv_err *e)
{
    struct fsck_ctx f = {repair, cb, ctx, rp, e};
    return scan_keys((struct redis_store *)s, fsck_keys, &f, e);
}

static void redis_close(struct kv_store *s)
{
    struct redis_store *r = (struct redis_store *)s;
    if (r->c)
        redisFree(r->c);
    free(r->line);
    free(r->blob);
    free(r);
}

static const struct kv_store_ops redis_ops = {
    "redis", redis_get, redis_put, redis_rm, redis_pin, redis_ls, redis_stat,
    redis_evict, redis_fsck, redis_close,
};

/* Percent-decode s[0..n) into out (size len).  0, or -1 when it does not
 * fit or a %XX is malformed. */
static int hexval(int c)
{
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

static int url_decode(const char *s, size_t n, char *out, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (n - i < 3 || !isxdigit((unsigned char)s[i + 1]) ||
                !isxdigit((unsigned char)s[i + 2]))
                return -1;
            c = hexval((unsigned char)s[i + 1]) * 16 +
                hexval((unsigned char)s[i + 2]);
            i += 2;
        }
        if (o + 1 >= len)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

/* [USER]:PASSWORD@ at the start of *p (credentials end at the last '@'
 * before the host list: a password may hold ':' and, percent-encoded,
 * anything).  *p moves past them; *auth says whether there were any. */
int kv_redis_parse_auth(const char **p, char *user, size_t ulen, char *pass,
                        size_t plen, int *auth, struct kv_err *e)
{
    const char *at = strrchr(*p, '@');
    *auth = 0;
    user[0] = pass[0] = '\0';
    if (!at)
        return 0;
    const char *c = memchr(*p, ':', (size_t)(at - *p));
    if (!c)
        return kv_err_set(e, "--store: expected [USER]:PASSWORD@ before "
                          "the Redis host");
    if (url_decode(*p, (size_t)(c - *p), user, ulen) < 0 ||
        url_decode(c + 1, (size_t)(at - c - 1), pass, plen) < 0)
        return kv_err_set(e, "--store: bad Redis user or password (too "
                          "long, or a bad %%XX)");
    *auth = 1;
    *p = at + 1;
    return 0;
}

void *kv_redis_context(struct kv_store *s)
{
    return ((struct redis_store *)s)->c;
}

const char *kv_redis_name(const struct kv_store *s)
{
    return ((const struct redis_store *)s)->name;
}

int kv_redis_fd_open(int fd, const struct kv_store_opts *o,
                     struct kv_store **out, struct kv_err *e)
{
    struct redis_store *r = calloc(1, sizeof *r);
    if (!r)
        return kv_err_set(e, "out of memory");
    r->base.ops = &redis_ops;
    r->base.opts = *o;
    r->no_stats = 1;
    r->timeout = o->timeout > 0 ? o->timeout : 2.0;
    snprintf(r->name, sizeof r->name, "fd %d", fd);
    if (!(r->c = redisConnectFd(fd)) || r->c->err) {
        kv_err_set(e, "redis %s: cannot wrap the socket", r->name);
        redis_close(&r->base);
        return -1;
    }
    r->c->reader->maxbuf = 0;
    *out = &r->base;
    return 0;
}

int kv_redis_node_open(const char *host, int port, long db, const char *user,
                       const char *pass, int no_stats,
                       const struct kv_store_opts *o, struct kv_store **out,
                       struct kv_err *e)
{
    struct redis_store *r = calloc(1, sizeof *r);
    if (!r)
        return kv_err_set(e, "out of memory");
    r->base.ops = &redis_ops;
    r->base.opts = *o;
    r->no_stats = no_stats;
    char hp[300];
    kv_redis_hostport_name(host, port, hp, sizeof hp);
    snprintf(r->name, sizeof r->name, no_stats ? "%s" : "%s/%ld", hp, db);
    double t = o->timeout > 0 ? o->timeout : 2.0;
    r->timeout = t;
    struct timeval tv;
    tv.tv_sec = (time_t)floor(t);
    tv.tv_usec = (suseconds_t)((t - floor(t)) * 1e6);
    r->c = redisConnectWithTimeout(host, port, tv);
    if (!r->c) {
        free(r);
        return kv_err_set(e, "out of memory");
    }
    if (r->c->err) {
        int rc = (errno == EINPROGRESS || errno == ETIMEDOUT ||
                  strstr(r->c->errstr, "timed out"))
                 ? kv_err_set(e, "redis %s: cannot connect within %g s",
                              r->name, t)
                 : kv_err_set(e, "redis %s: cannot connect: %s", r->name,
                              r->c->errstr);
        redis_close(&r->base);
        return rc;
    }
    redisSetTimeout(r->c, tv);
    /* keep the reader's buffer: by default hiredis frees it whenever it
     * runs empty (above 16 KiB), and a blob of megabytes then grows a new
     * one, page by page, for every reply */
    r->c->reader->maxbuf = 0;
    if (pass && pass[0]) {
        redisReply *rep = user && user[0]
            ? redis_cmd(r, "AUTH %s %s", user, pass)
              : redis_cmd(r, "AUTH %s", pass);
        if (!rep || rep->type != REDIS_REPLY_STATUS) {
            int rc = redis_reply_err(r, rep, e);
            redis_close(&r->base);
            return rc;
        }
        freeReplyObject(rep);
    }
    if (db) {
        redisReply *rep = redis_cmd(r, "SELECT %ld", db);
        if (!rep || rep->type != REDIS_REPLY_STATUS) {
            int rc = redis_reply_err(r, rep, e);
            redis_close(&r->base);
            return rc;
        }
        freeReplyObject(rep);
    }
    *out = &r->base;
    return 0;
}

int kv_redis_parse_hostport(const char *s, size_t len, char *host,
                            size_t hlen, long *port, long dflt)
{
    const char *h = s, *rest;
    size_t hl;
    if (len && s[0] == '[') {           /* [IPv6]:PORT */
        const char *close = memchr(s, ']', len);
        if (!close)
            return -1;
        h = s + 1;
        hl = (size_t)(close - h);
        rest = close + 1;
        if (hl == 0 || memchr(h, ':', hl) == NULL)
            return -1;                  /* brackets hold an IPv6 address */
    } else {
        const char *colon = memchr(s, ':', len);
        hl = colon ? (size_t)(colon - s) : len;
        rest = s + hl;
        if (colon && memchr(colon + 1, ':', len - hl - 1))
            return -1;                  /* a bare IPv6 address: bracket it */
    }
    if (hl == 0 || hl >= hlen || memchr(h, '@', hl) || memchr(h, '/', hl) ||
        memchr(h, '[', hl) || memchr(h, ']', hl) || memchr(h, '\0', hl))
        return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    size_t left = len - (size_t)(rest - s);
    if (left == 0) {
        if (dflt <= 0)
            return -2;
        *port = dflt;
        return 0;
    }
    if (rest[0] != ':' || left < 2 || left > 6)
        return -2;
    long v = 0;
    for (size_t i = 1; i < left; i++) {
        if (rest[i] < '0' || rest[i] > '9')
            return -2;
        v = v * 10 + (rest[i] - '0');
    }
    if (v < 1 || v > 65535)
        return -2;
    *port = v;
    return 0;
}

int kv_redis_hostport_name(const char *host, int port, char *buf, size_t len)
{
    return snprintf(buf, len, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host,
                    port);
}

int kv_store_redis_open(const char *url, const struct kv_store_opts *o,
                        struct kv_store **out, struct kv_err *e)
{
    char host[256], user[256], pass[512], safe[512];
#define SAFE(u) kv_store_redact(u, safe, sizeof safe)
    const char *p = url + strlen("redis://");
    int auth, rc;
    if (kv_redis_parse_auth(&p, user, sizeof user, pass, sizeof pass, &auth,
                            e) < 0)
        return -1;
    const char *slash = strchr(p, '/');   /* an IPv6 address has none */
    long port = 6379, db = 0;
    rc = kv_redis_parse_hostport(p, slash ? (size_t)(slash - p) : strlen(p),
                                 host, sizeof host, &port, 6379);
    if (rc == -1)
        return kv_err_set(e, "--store: bad Redis address '%s' (HOST[:PORT], "
                          "an IPv6 address in brackets: [::1]:6379)",
                          SAFE(url));
    if (rc == -2)
        return kv_err_set(e, "--store: bad Redis port in '%s'", SAFE(url));
    if (slash && slash[1]) {
        char *end;
        db = strtol(slash + 1, &end, 10);
        if (*end != '\0' || db < 0 || db > 1000000)
            return kv_err_set(e, "--store: bad Redis database number in '%s'",
                              SAFE(url));
    }
    rc = kv_redis_node_open(host, (int)port, db, user, auth ? pass : NULL, 0,
                            o, out, e);
    memset(pass, 0, sizeof pass);
    return rc;
#undef SAFE
}
