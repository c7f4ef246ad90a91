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
 * byte (deadlines below); a dead, hung or trickling server is an error,
 * never a hang.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include "chunk/store.h"
#include "chunk/store_redis.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"

#define KEY_PREFIX "kvc:1:"
#define STATS_KEY "kvc:1:stats"

struct redis_store {
    struct kv_store base;
    redisContext *c;
    char name[300];          /* host:port/db, for messages */
    int no_stats;            /* a cluster node: counters are the cluster's */
    double timeout;          /* seconds each command may take (deadlines) */
    double deadline;         /* the streamed reply's (stream_get) */
    double armed[2];         /* SO_RCVTIMEO, SO_SNDTIMEO as set (0: unset) */
    /* the streamed reads' own reader (stream_get): protocol lines, and one
     * bulk reply read straight from the socket, both reused */
    char *line;
    size_t lpos, llen;
    uint8_t *blob;
    size_t blob_cap;
};

#define LINE_BUF 65536
/* the first size of the bulk reply buffer (stream_bulk) */
#define BULK_STEP ((size_t)1 << 20)
/* GETs a streamed read keeps in flight on a connection: the server then
 * has the next reply ready while one is read, and holds no more than two
 * copies of blobs at a time (all of them, pipelined at once, cost it fresh
 * memory for every reply; one at a time leaves it idle for a round trip) */
#define WINDOW 2

#define TIMED_OUT "no reply within the deadline"

/* Fill e from a failed context (I/O error, timeout, EOF). */
static int ctx_err(struct redis_store *r, struct kv_err *e)
{
    if (r->c->err == REDIS_ERR_IO && (errno == EAGAIN ||
                                      errno == EWOULDBLOCK ||
                                      !strcmp(r->c->errstr, TIMED_OUT)))
        return kv_err_set(e, "redis %s: no answer within %g s", r->name,
                          r->base.opts.timeout);
    return kv_err_set(e, "redis %s: %s", r->name,
                      r->c->errstr[0] ? r->c->errstr : strerror(errno));
}

/* ---- deadlines -------------------------------------------------------------
 * The timeout bounds each command as a whole, not each read: from the
 * moment it is sent (for a reply further down a pipeline: the moment the
 * reader starts on it) to the last byte of its reply.  Before every read
 * and every write the socket's SO_RCVTIMEO or SO_SNDTIMEO is set to the
 * time left (within ARM_SLACK), so that a server that trickles its reply a
 * byte at a time, each byte well within the timeout, is still cut off at
 * the deadline; past it, the context fails as a read that timed out. */
#define ARM_SLACK 1e-3

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The context failed: the deadline passed. */
static int timed_out(struct redis_store *r)
{
    r->c->err = REDIS_ERR_IO;
    snprintf(r->c->errstr, sizeof r->c->errstr, "%s", TIMED_OUT);
    errno = EAGAIN;
    return -1;
}

/* Bound the next read (which 0) or write (1) by deadline: 0, or -1 with
 * the context in error when the deadline has passed or the socket refuses
 * the timeout. */
static int arm(struct redis_store *r, int which, double deadline)
{
    double left = deadline - now_s(), *a = &r->armed[which];
    if (left <= 0)
        return timed_out(r);
    if (*a > 0 && *a <= left + ARM_SLACK && *a >= left - ARM_SLACK)
        return 0;
    struct timeval tv;
    tv.tv_sec = (time_t)left;
    tv.tv_usec = (suseconds_t)ceil((left - (double)tv.tv_sec) * 1e6);
    if (tv.tv_usec >= 1000000) {
        tv.tv_sec++;
        tv.tv_usec -= 1000000;
    }
    if (tv.tv_sec == 0 && tv.tv_usec == 0)
        tv.tv_usec = 1;            /* zero would mean no timeout at all */
    if (setsockopt(r->c->fd, SOL_SOCKET, which ? SO_SNDTIMEO : SO_RCVTIMEO,
                   &tv, sizeof tv) < 0) {
        int saved = errno;
        r->c->err = REDIS_ERR_IO;
        snprintf(r->c->errstr, sizeof r->c->errstr, "%s", strerror(saved));
        errno = saved;
        *a = 0;
        return -1;
    }
    *a = left;
    return 0;
}

/* A reply larger than --max-mem is not read on: a bulk string that
 * announces more (an incomplete bulk item leaves hiredis' reader at its
 * length line, the '$' read or not yet), or more bytes buffered.  0, or -1
 * with the context in error. */
static int over_max(struct redis_store *r)
{
    redisReader *rd = r->c->reader;
    size_t max = r->base.opts.max_bytes;
    unsigned long long v = 0;
    size_t i = rd->pos;
    int bulk = 0;
    if (!max)
        return 0;
    if (rd->ridx >= 0 && rd->rstack[rd->ridx].type == REDIS_REPLY_STRING)
        bulk = 1;
    else if (rd->pos < rd->len && rd->buf[rd->pos] == '$')
        bulk = 1, i++;
    if (bulk) {
        /* the whole length line only (at most 19 digits: no overflow) */
        for (size_t i0 = i; i < rd->len && i < i0 + 19 && rd->buf[i] >= '0' &&
             rd->buf[i] <= '9'; i++)
            v = v * 10 + (unsigned)(rd->buf[i] - '0');
        if (i >= rd->len || rd->buf[i] != '\r')
            v = 0;
    }
    if (v <= max && rd->len <= max)
        return 0;
    r->c->err = REDIS_ERR_OOM;
    if (v > max)
        snprintf(r->c->errstr, sizeof r->c->errstr, "a blob of %llu bytes, "
                 "more than --max-mem %zu", v, max);
    else
        snprintf(r->c->errstr, sizeof r->c->errstr, "a reply of more than "
                 "--max-mem %zu bytes", max);
    return -1;
}

/* Send what is appended to the context, then read the next reply, all by
 * one deadline timeout seconds from now: redisGetReply, bounded.
 * REDIS_OK with *reply, or REDIS_ERR with the context in error. */
static int get_reply(struct redis_store *r, void **reply)
{
    redisContext *c = r->c;
    void *rep = NULL;
    *reply = NULL;
    if (redisGetReplyFromReader(c, &rep) != REDIS_OK)
        return REDIS_ERR;
    if (!rep) {
        double deadline = now_s() + r->timeout;
        int done = 0;
        do {
            if (arm(r, 1, deadline) < 0 ||
                redisBufferWrite(c, &done) != REDIS_OK)
                return REDIS_ERR;
        } while (!done);
        do {
            if (arm(r, 0, deadline) < 0 || redisBufferRead(c) != REDIS_OK ||
                redisGetReplyFromReader(c, &rep) != REDIS_OK)
                return REDIS_ERR;
            if (!rep && over_max(r) < 0)
                return REDIS_ERR;
        } while (!rep);
    }
    *reply = rep;
    return REDIS_OK;
}

/* redisCommand, bounded by the deadline: the reply, or NULL with the
 * context in error. */
static redisReply *vcommand(struct redis_store *r, const char *fmt,
                            va_list ap)
{
    void *rep = NULL;
    if (redisvAppendCommand(r->c, fmt, ap) != REDIS_OK ||
        get_reply(r, &rep) != REDIS_OK)
        return NULL;
    return rep;
}

static redisReply *command(struct redis_store *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcommand(r, fmt, ap);
    va_end(ap);
    return rep;
}

int kv_redis_reply(struct kv_store *s, void **reply)
{
    return get_reply((struct redis_store *)s, reply);
}

void *kv_redis_command(struct kv_store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcommand((struct redis_store *)s, fmt, ap);
    va_end(ap);
    return rep;
}

void *kv_redis_command_argv(struct kv_store *s, int argc, const char **argv,
                            const size_t *lens)
{
    struct redis_store *r = (struct redis_store *)s;
    void *rep = NULL;
    if (redisAppendCommandArgv(r->c, argc, argv, lens) != REDIS_OK ||
        get_reply(r, &rep) != REDIS_OK)
        return NULL;
    return rep;
}

int kv_redis_fail(struct kv_store *s, struct kv_err *e)
{
    return ctx_err((struct redis_store *)s, e);
}

static int reply_err(struct redis_store *r, redisReply *rep,
                     struct kv_err *e)
{
    if (!rep)
        return ctx_err(r, e);
    if (rep->type == REDIS_REPLY_ERROR) {
        int rc = kv_err_set(e, "redis %s: %.*s", r->name, (int)rep->len,
                            rep->str);
        if (strstr(rep->str, "bulk") || strstr(rep->str, "Protocol"))
            kv_err_set(e, "redis %s: %.*s (raise proto-max-bulk-len above "
                       "the blob size)", r->name, (int)rep->len, rep->str);
        freeReplyObject(rep);
        return rc;
    }
    int type = rep->type;
    freeReplyObject(rep);
    return kv_err_set(e, "redis %s: unexpected reply (type %d)", r->name,
                      type);
}

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

/* Read and drop the next n replies of a pipeline. */
static void drain(struct redis_store *r, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        void *x = NULL;
        if (get_reply(r, &x) != REDIS_OK)
            break;
        freeReplyObject(x);
    }
}

/* ---- streamed reads ---------------------------------------------------------
 * A streamed get reads its GET replies itself: hiredis reads 16 KiB at a
 * time into a buffer that it grows for a reply of megabytes, then copies
 * the reply out; here the protocol lines go through a small buffer and each
 * bulk reply is read straight from the socket into one buffer, in reads as
 * large as the kernel has, verified, handed to the sink and overwritten by
 * the next.  A failure leaves the context in error, as hiredis would. */

/* The context failed (err, with errno as the failing call left it). */
static int stream_fail(struct redis_store *r, int err, const char *msg,
                       struct kv_err *e)
{
    int saved = errno;
    r->c->err = err;
    snprintf(r->c->errstr, sizeof r->c->errstr, "%s",
             msg ? msg : strerror(saved));
    errno = saved;
    return ctx_err(r, e);
}

/* Up to n bytes from the socket: how many, or -1 with e. */
static ssize_t stream_read(struct redis_store *r, void *p, size_t n,
                           struct kv_err *e)
{
    for (;;) {
        if (arm(r, 0, r->deadline) < 0)
            return ctx_err(r, e);
        ssize_t k = read(r->c->fd, p, n);
        if (k > 0)
            return k;
        if (k == 0)
            return stream_fail(r, REDIS_ERR_EOF,
                               "Server closed the connection", e);
        if (errno != EINTR)
            return stream_fail(r, REDIS_ERR_IO, NULL, e);
    }
}

/* The next protocol line, CRLF cut off: valid until the next read. */
static int stream_line(struct redis_store *r, const char **line,
                       size_t *len, struct kv_err *e)
{
    if (!r->line && !(r->line = malloc(LINE_BUF)))
        return kv_err_set(e, "out of memory");
    for (;;) {
        char *p = r->line + r->lpos;
        size_t have = r->llen - r->lpos;
        for (size_t k = 0; k + 1 < have; k++)
            if (p[k] == '\r' && p[k + 1] == '\n') {
                *line = p;
                *len = k;
                r->lpos += k + 2;
                return 0;
            }
        memmove(r->line, p, have);
        r->lpos = 0;
        r->llen = have;
        if (have == LINE_BUF)
            return stream_fail(r, REDIS_ERR_PROTOCOL,
                               "Protocol error: line too long", e);
        ssize_t k = stream_read(r, r->line + have, LINE_BUF - have, e);
        if (k < 0)
            return -1;
        r->llen += (size_t)k;
    }
}

/* Room for need bytes in r->blob (need <= want, the whole reply): the
 * buffer doubles from BULK_STEP and never passes want. */
static int blob_room(struct redis_store *r, size_t need, size_t want,
                     struct kv_err *e)
{
    if (need <= r->blob_cap)
        return 0;
    size_t cap = r->blob_cap > BULK_STEP ? r->blob_cap : BULK_STEP;
    while (cap < need)
        cap *= 2;
    if (cap > want)
        cap = want;
    uint8_t *p = realloc(r->blob, cap);
    if (!p)
        return stream_fail(r, REDIS_ERR_OOM, "Out of memory", e);
    r->blob = p;
    r->blob_cap = cap;
    return 0;
}

/* A bulk reply's n bytes and CRLF into r->blob.  The buffer grows with
 * the bytes that arrive, not with the announced length: that is only the
 * server's word, and a broken or hostile one could announce a terabyte
 * and send nothing (memory stays below twice what was sent, or BULK_STEP,
 * or the largest reply read before). */
static int stream_bulk(struct redis_store *r, size_t n, struct kv_err *e)
{
    size_t want = n + 2, have = r->llen - r->lpos;
    size_t k = have < want ? have : want;
    if (blob_room(r, k, want, e) < 0)
        return -1;
    if (k)
        memcpy(r->blob, r->line + r->lpos, k);
    r->lpos += k;
    while (k < want) {
        size_t lim = r->blob_cap < want ? r->blob_cap : want;
        if (k == lim) {
            if (blob_room(r, k + 1, want, e) < 0)
                return -1;
            continue;
        }
        ssize_t g = stream_read(r, r->blob + k, lim - k, e);
        if (g < 0)
            return -1;
        k += (size_t)g;
    }
    if (r->blob[n] != '\r' || r->blob[n + 1] != '\n')
        return stream_fail(r, REDIS_ERR_PROTOCOL,
                           "Protocol error: bad bulk string end", e);
    return 0;
}

/* One reply of the pipeline: 1 a string (its bytes in r->blob, *len), 0
 * nil, -2 an error or unexpected reply (e; the pipeline still in step), -1
 * a failure (e; the context in error). */
static int stream_reply(struct redis_store *r, size_t *len, struct kv_err *e)
{
    const char *l = NULL;
    size_t n = 0;
    if (stream_line(r, &l, &n, e) < 0)
        return -1;
    if (n >= 2 && l[0] == '$') {
        if (n == 3 && l[1] == '-' && l[2] == '1')
            return 0;
        unsigned long long v = 0;
        /* a length is written without leading zeros (hiredis refuses
         * them too): "$0" only for the empty string */
        if (l[1] == '0' && n > 2)
            return stream_fail(r, REDIS_ERR_PROTOCOL,
                               "Protocol error: bad bulk length", e);
        for (size_t k = 1; k < n; k++) {
            if (l[k] < '0' || l[k] > '9')
                return stream_fail(r, REDIS_ERR_PROTOCOL,
                                   "Protocol error: bad bulk length", e);
            v = v * 10 + (unsigned)(l[k] - '0');
            /* no blob is longer (blob.h) */
            if (v > KV_BLOB_MAX)
                return stream_fail(r, REDIS_ERR_PROTOCOL, "Protocol error: "
                                   "bulk length above the largest blob", e);
        }
        if (r->base.opts.max_bytes && v > r->base.opts.max_bytes) {
            char msg[128];
            snprintf(msg, sizeof msg, "a blob of %llu bytes, more than "
                     "--max-mem %zu", v, r->base.opts.max_bytes);
            return stream_fail(r, REDIS_ERR_OOM, msg, e);
        }
        if (stream_bulk(r, (size_t)v, e) < 0)
            return -1;
        *len = (size_t)v;
        return 1;
    }
    if (n >= 1 && l[0] == '-') {
        char msg[512];
        snprintf(msg, sizeof msg, "%.*s", (int)(n - 1), l + 1);
        kv_err_set(e, "redis %s: %s", r->name, msg);
        if (strstr(msg, "bulk") || strstr(msg, "Protocol"))
            kv_err_set(e, "redis %s: %s (raise proto-max-bulk-len above "
                       "the blob size)", r->name, msg);
        return -2;
    }
    if (n >= 1 && (l[0] == '+' || l[0] == ':')) {
        kv_err_set(e, "redis %s: unexpected reply (type %d)", r->name,
                   l[0] == '+' ? REDIS_REPLY_STATUS : REDIS_REPLY_INTEGER);
        return -2;
    }
    return stream_fail(r, REDIS_ERR_PROTOCOL,
                       "Protocol error: unexpected reply to GET", e);
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
                return ctx_err(r, e);
        }
        /* reply i, and the sending of what is appended, by one deadline */
        r->deadline = now_s() + r->timeout;
        int done = 0;
        while (!done)
            if (arm(r, 1, r->deadline) < 0 ||
                redisBufferWrite(r->c, &done) != REDIS_OK)
                return ctx_err(r, e);
        size_t len = 0;
        int k = stream_reply(r, &len, e);
        if (k < 0) {
            /* an error reply: read the rest, so that the connection
             * stays in step for what follows (a MOVED, a retry) */
            for (size_t j = i + 1; k == -2 && j < sent; j++) {
                struct kv_err x;
                r->deadline = now_s() + r->timeout;
                if (stream_reply(r, &len, &x) == -1)
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
                    r->deadline = now_s() + r->timeout;
                    if (stream_reply(r, &len, &x) == -1)
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
        return stream_fail(r, REDIS_ERR_PROTOCOL,
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
            return ctx_err(r, e);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *rep = NULL;
        if (get_reply(r, (void **)&rep) != REDIS_OK || !rep) {
            for (size_t j = 0; j < i; j++)
                kv_blob_ref_release(&refs[j]);
            return ctx_err(r, e);
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
            drain(r, n - i - 1);
            return reply_err(r, rep, e);
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
                drain(r, n - i - 1);
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
    drain(r, (size_t)nb);
    return 0;
}

/* SET name blob [NX] [EX ttl]; the reply or NULL. */
static redisReply *set_blob(struct redis_store *r, const char *name,
                            const uint8_t *blob, size_t len, int nx)
{
    const struct kv_store *s = &r->base;
    if (s->opts.ttl > 0)
        return command(r, nx ? "SET %s %b NX EX %lld"
                                     : "SET %s %b EX %lld", name, blob, len,
                            (long long)s->opts.ttl);
    return command(r, nx ? "SET %s %b NX" : "SET %s %b", name, blob,
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
        rep = command(r, "GET %s", name);
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
        return ctx_err(r, e);
    if (rep->type == REDIS_REPLY_NIL) {
        *existed = 1;           /* another writer came first */
    } else if (rep->type == REDIS_REPLY_STATUS) {
        *existed = 0;
    } else {
        return reply_err(r, rep, e);
    }
    freeReplyObject(rep);
    if (!*existed && !r->no_stats) {
        rep = command(r, "HINCRBY " STATS_KEY " puts 1");
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
    redisReply *rep = command(r, "UNLINK %s", name);
    if (!rep || rep->type != REDIS_REPLY_INTEGER)
        return reply_err(r, rep, e);
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

/* SCAN every blob key; fn gets each name.  Returns 0 or -1. */
static int scan_keys(struct redis_store *r,
                     int (*fn)(struct redis_store *, const char *, void *),
                     void *arg, struct kv_err *e)
{
    char cursor[32] = "0";
    do {
        redisReply *rep = command(r, "SCAN %s MATCH " KEY_PREFIX "* "
                                       "COUNT 1000", cursor);
        if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING)
            return reply_err(r, rep, e);
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *k = keys->element[i]->str;
            if (!k || strcmp(k, STATS_KEY) == 0 ||
                strlen(k) != strlen(KEY_PREFIX) + 32)
                continue;
            if (fn(r, k, arg) < 0) {
                freeReplyObject(rep);
                return -1;
            }
        }
        freeReplyObject(rep);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

struct ls_ctx {
    int (*cb)(void *, const struct kv_store_entry *);
    void *ctx;
    struct kv_err *e;
    struct kv_store_stats *st;
};

static int ls_one(struct redis_store *r, const char *k, void *arg)
{
    struct ls_ctx *l = arg;
    redisReply *rep = command(r, "GETRANGE %s 0 %d", k,
                                   KV_BLOB_TOKENS_OFF - 1);
    if (!rep)
        return ctx_err(r, l->e);
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

static int redis_ls(struct kv_store *s,
                    int (*cb)(void *, const struct kv_store_entry *),
                    void *ctx, struct kv_err *e)
{
    struct ls_ctx l = {cb, ctx, e, NULL};
    return scan_keys((struct redis_store *)s, ls_one, &l, e);
}

static int redis_stat(struct kv_store *s, struct kv_store_stats *st,
                      struct kv_err *e)
{
    struct redis_store *r = (struct redis_store *)s;
    struct ls_ctx l = {NULL, NULL, e, st};
    if (scan_keys(r, ls_one, &l, e) < 0)
        return -1;
    redisReply *rep = command(r, "HGETALL " STATS_KEY);
    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        return reply_err(r, rep, e);
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
    rep = command(r, "INFO stats");
    if (!rep || rep->type != REDIS_REPLY_STRING)
        return reply_err(r, rep, e);
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
    redisReply *rep = command(r, "GET %s", k);
    if (!rep)
        return ctx_err(r, f->e);
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
        rep = command(r, "UNLINK %s", k);
        if (!rep)
            return ctx_err(r, f->e);
        freeReplyObject(rep);
        f->r->repaired++;
    }
    return 0;
}

static int redis_fsck(struct kv_store *s, int repair,
                      void (*cb)(void *, const char *), void *ctx,
                      struct kv_fsck_report *rp, struct kv_err *e)
{
    struct fsck_ctx f = {repair, cb, ctx, rp, e};
    return scan_keys((struct redis_store *)s, fsck_one, &f, e);
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
            ? command(r, "AUTH %s %s", user, pass)
            : command(r, "AUTH %s", pass);
        if (!rep || rep->type != REDIS_REPLY_STATUS) {
            int rc = reply_err(r, rep, e);
            redis_close(&r->base);
            return rc;
        }
        freeReplyObject(rep);
    }
    if (db) {
        redisReply *rep = command(r, "SELECT %ld", db);
        if (!rep || rep->type != REDIS_REPLY_STATUS) {
            int rc = reply_err(r, rep, e);
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
