/* store_redis_impl.h - what the two files of a Redis node store share and
 * nothing outside them sees: the store, and the calls of its connection.
 * store_redis_resp.c holds the connection: every command bounded by one
 * deadline, and the streamed reader of GET replies (RESP parsed by hand);
 * store_redis.c holds the store operations over it, the URLs and the
 * connect. */
#ifndef KV_STORE_REDIS_IMPL_H
#define KV_STORE_REDIS_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include "chunk/store.h"

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

/* Fill e from a failed context (I/O error, timeout, EOF); returns -1. */
int redis_ctx_err(struct redis_store *r, struct kv_err *e);
/* Fill e from a reply that is not the one expected (NULL: the context
 * failed; an error reply, with a hint when the blob exceeded the server's
 * proto-max-bulk-len), which it frees; returns -1. */
int redis_reply_err(struct redis_store *r, redisReply *rep, struct kv_err *e);

/* Seconds on the monotonic clock, for the deadlines. */
double redis_now(void);
/* Bound the next read (which 0) or write (1) by deadline: 0, or -1 with
 * the context in error when the deadline has passed or the socket refuses
 * the timeout. */
int redis_arm(struct redis_store *r, int which, double deadline);

/* Send what is appended to the context, then read the next reply, all by
 * one deadline: REDIS_OK with *reply, or REDIS_ERR with the context in
 * error. */
int redis_get_reply(struct redis_store *r, void **reply);
/* redisCommand, bounded by the deadline: the reply (the caller frees it),
 * or NULL with the context in error. */
redisReply *redis_cmd(struct redis_store *r, const char *fmt, ...);
/* Read and drop the next n replies of a pipeline. */
void redis_drain(struct redis_store *r, size_t n);

/* The streamed reader of GET replies (r->line, r->blob), by r->deadline.
 * redis_stream_fail puts the context in error (err, msg or errno's text)
 * and fills e; -1.  redis_stream_reply reads one reply: 1 a string (its
 * bytes in r->blob, *len), 0 nil, -2 an error or unexpected reply (e; the
 * pipeline still in step), -1 a failure (e; the context in error). */
int redis_stream_fail(struct redis_store *r, int err, const char *msg,
                      struct kv_err *e);
int redis_stream_reply(struct redis_store *r, size_t *len, struct kv_err *e);

#endif
