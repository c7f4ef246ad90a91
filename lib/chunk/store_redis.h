/* store_redis.h - what the Redis backends share (store_redis.c,
 * store_cluster.c): a node connection that is a whole kv_store (value
 * format, pipelined reads, verification), and the URL's credentials. */
#ifndef KV_STORE_REDIS_H
#define KV_STORE_REDIS_H

#include <stddef.h>
#include <stdint.h>
#include "chunk/store.h"

/* Connect to host:port (database db), AUTH when pass is given, every
 * connect and reply bounded by o->timeout.  no_stats: a cluster node,
 * whose reads and writes leave the counters to the cluster layer. */
int kv_redis_node_open(const char *host, int port, long db, const char *user,
                       const char *pass, int no_stats,
                       const struct kv_store_opts *o, struct kv_store **out,
                       struct kv_err *e);

/* A node store over a connected socket fd (taken over, closed with the
 * store), without AUTH, SELECT or counters: it exists for the protocol
 * fuzzer (tests/fuzz/resp.c), which plays the server on a socketpair. */
int kv_redis_fd_open(int fd, const struct kv_store_opts *o,
                     struct kv_store **out, struct kv_err *e);

/* [USER]:PASSWORD@ at the start of *p, percent-decoded; *p moves past. */
int kv_redis_parse_auth(const char **p, char *user, size_t ulen, char *pass,
                        size_t plen, int *auth, struct kv_err *e);

/* HOST[:PORT] at s[0..len): a name, an IPv4 address, or an IPv6 address
 * in brackets ([::1]:6379); host gets the address without brackets.
 * Without a port, dflt (none when dflt <= 0).  0, -1 bad host, -2 bad
 * port. */
int kv_redis_parse_hostport(const char *s, size_t len, char *host,
                            size_t hlen, long *port, long dflt);
/* "host:port", or "[host]:port" for an IPv6 address, as snprintf. */
int kv_redis_hostport_name(const char *host, int port, char *buf, size_t len);

/* Commands on a node, each bounded as a whole by the store's timeout: the
 * commands appended to the node's context are sent and the next reply
 * read to its last byte within that many seconds of the call, however the
 * bytes trickle in.  kv_redis_reply: REDIS_OK with *reply (a redisReply *
 * the caller frees) or REDIS_ERR; kv_redis_command(_argv): redisCommand
 * and redisCommandArgv so bounded, the reply or NULL.  On a failure the
 * context is in error and kv_redis_fail fills e from it ("no answer
 * within N s" for a deadline passed) and returns -1. */
int kv_redis_reply(struct kv_store *s, void **reply);
void *kv_redis_command(struct kv_store *s, const char *fmt, ...);
void *kv_redis_command_argv(struct kv_store *s, int argc, const char **argv,
                            const size_t *lens);
int kv_redis_fail(struct kv_store *s, struct kv_err *e);

/* The node's hiredis context (redisContext *) and its host:port name. */
void *kv_redis_context(struct kv_store *s);
const char *kv_redis_name(const struct kv_store *s);

/* Redis Cluster hash slots: CRC-16/XMODEM (CRC16("123456789") = 0x31C3),
 * and the slot of a key (its {hash tag} when there is a non-empty one). */
uint16_t kv_redis_crc16(const void *buf, size_t len);
int kv_redis_key_slot(const char *key, size_t len);

#endif
