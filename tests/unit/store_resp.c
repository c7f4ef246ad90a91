/* store_resp.c - unit tests of a Redis store's streamed reader of GET
 * replies against scripted servers (the server's bytes written into a
 * socketpair, then shut down): nils, an error reply, a bulk with a wrong
 * end, more replies than commands, and lengths no server should send (one
 * with leading zeros, one above the largest blob, one of a terabyte
 * followed by nothing: read as what arrives, never allocated up front). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "tap.h"
#include "chunk/store.h"
#include "chunk/store_redis.h"

#define NREQ 2

static int hit(void *ctx, size_t i, const struct kv_blob_ref *ref,
               struct kv_err *why, struct kv_err *e)
{
    (void)ctx; (void)i; (void)ref; (void)why; (void)e;
    return 0;
}

/* Look up NREQ chunks from a server that answers srv; the result, the
 * statuses and the message. */
static int lookup(const char *srv, int *status, char *msg, size_t len)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return -9;
    size_t n = strlen(srv);
    if (write(sv[1], srv, n) != (ssize_t)n)
        return -9;
    shutdown(sv[1], SHUT_WR);
    struct kv_store_opts o;
    struct kv_store *st = NULL;
    struct kv_err e;
    kv_store_opts_init(&o);
    if (kv_redis_fd_open(sv[0], &o, &st, &e) < 0)
        return -9;
    static const int32_t tok[1] = {1};
    struct kv_chunk_req req[NREQ];
    struct kv_blob_ref refs[NREQ];
    struct kv_err why[NREQ];
    struct kv_get_sink sink = {hit, NULL};
    memset(req, 0, sizeof req);
    memset(refs, 0, sizeof refs);
    for (int i = 0; i < NREQ; i++) {
        req[i].key[0] = (uint8_t)i;
        req[i].tokens = tok;
        req[i].n_tokens = 1;
    }
    e.msg[0] = '\0';
    int rc = kv_store_get_each(st, req, NREQ, refs, status, why, &sink, &e);
    snprintf(msg, len, "%s", rc == 0 && status[0] == KV_GET_CORRUPT
                             ? why[0].msg : e.msg);
    kv_store_close(st);
    close(sv[1]);
    return rc;
}

int main(void)
{
    int st[NREQ], rc;
    char msg[512];

    rc = lookup("$-1\r\n$-1\r\n", st, msg, sizeof msg);
    TAP_OK(rc == 0 && st[0] == KV_GET_ABSENT && st[1] == KV_GET_ABSENT,
           "two nils: two misses");

    rc = lookup("$5\r\nhello\r\n$-1\r\n", st, msg, sizeof msg);
    TAP_OK(rc == 0 && st[0] == KV_GET_CORRUPT && st[1] == KV_GET_ABSENT &&
           strstr(msg, "redis key kvc:1:"),
           "a value that is no blob: a named damaged blob (%s)", msg);

    rc = lookup("-ERR wrong\r\n$-1\r\n", st, msg, sizeof msg);
    TAP_OK(rc == -1 && strstr(msg, "ERR wrong"),
           "an error reply fails with its text (%s)", msg);

    rc = lookup("$3\r\nabcXY$-1\r\n", st, msg, sizeof msg);
    TAP_OK(rc == -1 && strstr(msg, "Protocol error: bad bulk string end"),
           "a bulk with a wrong end: protocol error (%s)", msg);

    rc = lookup("$-1\r\n$-1\r\n$-1\r\n", st, msg, sizeof msg);
    TAP_OK(rc == -1 && strstr(msg, "more replies than commands"),
           "a reply too many: protocol error (%s)", msg);

    /* a length with leading zeros: not what a server writes (hiredis
     * refuses it); read as 5, it would take "hello" as a value */
    rc = lookup("$005\r\nhello\r\n$-1\r\n", st, msg, sizeof msg);
    TAP_OK(rc == -1 && strstr(msg, "Protocol error: bad bulk length"),
           "a length with leading zeros: protocol error (%s)", msg);

    rc = lookup("$0\r\n\r\n$-1\r\n", st, msg, sizeof msg);
    TAP_OK(rc == 0 && st[0] == KV_GET_CORRUPT && st[1] == KV_GET_ABSENT,
           "an empty value (\"$0\"): a damaged blob, not a protocol error (%s)",
           msg);

    rc = lookup("$17592186044417\r\n", st, msg, sizeof msg);
    TAP_OK(rc == -1 && strstr(msg, "Protocol error: bulk length above the "
                                   "largest blob"),
           "a length above 2^44: protocol error (%s)", msg);

    /* a terabyte announced, 8 bytes sent: the connection ends (the
     * announced length was once allocated whole, "Out of memory") */
    rc = lookup("$1000000000000\r\nKVCHUNK1", st, msg, sizeof msg);
    TAP_OK(rc == -1 && strstr(msg, "Server closed the connection"),
           "a terabyte announced and not sent: the server closed (%s)", msg);

    rc = lookup("$4", st, msg, sizeof msg);
    TAP_OK(rc == -1 && strstr(msg, "Server closed the connection"),
           "a truncated length line: the server closed (%s)", msg);
    return tap_done();
}
