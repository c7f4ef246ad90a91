/* store_redis_resp.c - the connection of a Redis node store: every
 * command bounded as a whole by one deadline (sending it and reading its
 * reply to the last byte), replies larger than --max-mem refused as they
 * arrive, and the streamed reader of GET replies, which parses RESP itself
 * instead of hiredis' reader.  The store operations over it are in
 * store_redis.c. */
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
#include "chunk/store_redis_impl.h"
#include "chunk/blob.h"

#define TIMED_OUT "no reply within the deadline"
/* the streamed reader's line buffer: a protocol line is no longer */
#define LINE_BUF 65536
/* the first size of the bulk reply buffer (stream_bulk) */
#define BULK_STEP ((size_t)1 << 20)

/* Fill e from a failed context (I/O error, timeout, EOF). */
int redis_ctx_err(struct redis_store *r, struct kv_err *e)
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

double redis_now(void)
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
int redis_arm(struct redis_store *r, int which, double deadline)
{
    double left = deadline - redis_now(), *a = &r->armed[which];
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
int redis_get_reply(struct redis_store *r, void **reply)
{
    redisContext *c = r->c;
    void *rep = NULL;
    *reply = NULL;
    if (redisGetReplyFromReader(c, &rep) != REDIS_OK)
        return REDIS_ERR;
    if (!rep) {
        double deadline = redis_now() + r->timeout;
        int done = 0;
        do {
            if (redis_arm(r, 1, deadline) < 0 ||
                redisBufferWrite(c, &done) != REDIS_OK)
                return REDIS_ERR;
        } while (!done);
        do {
            if (redis_arm(r, 0, deadline) < 0 || redisBufferRead(c) != REDIS_OK ||
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
        redis_get_reply(r, &rep) != REDIS_OK)
        return NULL;
    return rep;
}

redisReply *redis_cmd(struct redis_store *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcommand(r, fmt, ap);
    va_end(ap);
    return rep;
}

int kv_redis_reply(struct kv_store *s, void **reply)
{
    return redis_get_reply((struct redis_store *)s, reply);
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
        redis_get_reply(r, &rep) != REDIS_OK)
        return NULL;
    return rep;
}

int kv_redis_fail(struct kv_store *s, struct kv_err *e)
{
    return redis_ctx_err((struct redis_store *)s, e);
}

int redis_reply_err(struct redis_store *r, redisReply *rep,
                           struct kv_err *e)
{
    if (!rep)
        return redis_ctx_err(r, e);
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

/* Read and drop the next n replies of a pipeline. */
void redis_drain(struct redis_store *r, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        void *x = NULL;
        if (redis_get_reply(r, &x) != REDIS_OK)
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
int redis_stream_fail(struct redis_store *r, int err, const char *msg,
                             struct kv_err *e)
{
    int saved = errno;
    r->c->err = err;
    snprintf(r->c->errstr, sizeof r->c->errstr, "%s",
             msg ? msg : strerror(saved));
    errno = saved;
    return redis_ctx_err(r, e);
}

/* Up to n bytes from the socket: how many, or -1 with e. */
static ssize_t stream_read(struct redis_store *r, void *p, size_t n,
                           struct kv_err *e)
{
    for (;;) {
        if (redis_arm(r, 0, r->deadline) < 0)
            return redis_ctx_err(r, e);
        ssize_t k = read(r->c->fd, p, n);
        if (k > 0)
            return k;
        if (k == 0)
            return redis_stream_fail(r, REDIS_ERR_EOF,
                                     "Server closed the connection", e);
        if (errno != EINTR)
            return redis_stream_fail(r, REDIS_ERR_IO, NULL, e);
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
            return redis_stream_fail(r, REDIS_ERR_PROTOCOL,
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
        return redis_stream_fail(r, REDIS_ERR_OOM, "Out of memory", e);
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
        return redis_stream_fail(r, REDIS_ERR_PROTOCOL,
                                 "Protocol error: bad bulk string end", e);
    return 0;
}

/* One reply of the pipeline: 1 a string (its bytes in r->blob, *len), 0
 * nil, -2 an error or unexpected reply (e; the pipeline still in step), -1
 * a failure (e; the context in error). */
int redis_stream_reply(struct redis_store *r, size_t *len, struct kv_err *e)
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
            return redis_stream_fail(r, REDIS_ERR_PROTOCOL,
                                     "Protocol error: bad bulk length", e);
        for (size_t k = 1; k < n; k++) {
            if (l[k] < '0' || l[k] > '9')
                return redis_stream_fail(r, REDIS_ERR_PROTOCOL,
                                         "Protocol error: bad bulk length", e);
            v = v * 10 + (unsigned)(l[k] - '0');
            /* no blob is longer (blob.h) */
            if (v > KV_BLOB_MAX)
                return redis_stream_fail(r, REDIS_ERR_PROTOCOL, "Protocol error: "
                                         "bulk length above the largest blob", e);
        }
        if (r->base.opts.max_bytes && v > r->base.opts.max_bytes) {
            char msg[128];
            snprintf(msg, sizeof msg, "a blob of %llu bytes, more than "
                     "--max-mem %zu", v, r->base.opts.max_bytes);
            return redis_stream_fail(r, REDIS_ERR_OOM, msg, e);
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
    return redis_stream_fail(r, REDIS_ERR_PROTOCOL,
                             "Protocol error: unexpected reply to GET", e);
}
