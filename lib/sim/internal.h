/* internal.h - what the files of lib/sim share and nothing outside it
 * sees: the key map (map.c), the caches the replay drives (prefix.c,
 * radix.c, chunkcache.c) and the statistics helpers (stats.c). */
#ifndef KV_SIM_INTERNAL_H
#define KV_SIM_INTERNAL_H
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include "sim/sim.h"

/* Open-addressing map from a non-zero 64-bit hash to a 32-bit index, linear
 * probing with backward-shift deletion; key and value share a slot so that
 * a probe touches one cache line.  Keys are already well mixed. */
struct slot {
    uint64_t key;    /* 0: empty */
    uint64_t val;
};

struct map {
    struct slot *s;
    size_t cap;      /* power of two, or 0 */
    size_t n;
};

/* One physical block of the pool.  A block is in the free queue (LRU
 * order: head evicted first) unless the request being replayed holds it.
 *
 * The free queue is an array of (block, stamp) in queue order rather than a
 * linked list, so that eviction reads it sequentially and can fetch ahead:
 * appending a block bumps its stamp and pushes (block, stamp); taking a
 * block out of the middle (a hit) bumps its stamp, which makes its entry
 * stale; popping the head skips stale entries.  The array is compacted when
 * it fills up, so it stays within a small multiple of the pool. */
struct pblock {
    uint64_t hash;     /* 0: holds no cached content */
    int32_t dup;       /* next block with the same hash, -1 */
    uint32_t stamp;    /* the queue entry with this stamp is live */
};

struct qent {
    int32_t id;
    uint32_t stamp;
};

struct lent {
    uint64_t seq;
    uint32_t uses;
    uint32_t stamp;
    int32_t id;
};

/* The prefix cache's map from a block hash h to the first block holding
 * it: open addressing with linear probing, each slot one 64-bit word
 * (h >> 32) << 32 | (block + 1), 0 when empty.  The high half of h is both
 * the home slot and a fingerprint; a fingerprint match is confirmed against
 * the block's full hash, so the map is exact.  Removal finds the slot by
 * its exact word and shifts the run back (no hash needed: the home is in
 * the word).  At most a quarter full: short, predictable probes. */
struct pmap {
    uint64_t *s;
    size_t cap;      /* power of two, or 0 */
    size_t n;
};

struct prefix {
    int64_t B;
    int64_t n_pool;              /* blocks in the pool */
    struct pblock *blk;
    size_t n_made, cap_blk;      /* blocks materialised so far */
    struct qent *q;              /* free queue: q[qh..qt) */
    size_t qh, qt, cap_q;
    struct pmap map;             /* hash -> first block with it */
    int32_t *held;               /* blocks of the current request */
    size_t cap_held;
    uint64_t *hashes;
    size_t cap_hashes;
    unsigned char *buf;          /* one block's hash preimage */
    size_t cap_buf;
    /* LFU (prefix-lfu): the free blocks in a binary min-heap on (uses,
     * order freed) instead of the queue, stale entries skipped by stamp
     * as in the queue; uses[x] counts the requests that used block x's
     * content (1 when it is stored) */
    int lfu;
    uint32_t *uses;
    size_t cap_uses;
    struct lent *heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    struct kv_sim_stats st;
};

struct rrun {
    uint64_t key;
    int64_t off, len;
};

struct rnode {
    int32_t parent;
    int32_t n_children;
    int32_t lock;
    uint32_t version;
    uint64_t last;        /* last access */
    int64_t len;          /* tokens on the edge from the parent */
    struct rrun *run;
    int32_t n_run;
    int32_t alive;
    uint64_t salt;        /* children of the root: the tenant salt */
};

struct rheap {
    uint64_t last;
    int32_t id;
    uint32_t version;
};

struct radix {
    int64_t cap, size;    /* tokens */
    struct rnode *node;
    size_t n_node, cap_node;
    int32_t *free_ids;
    size_t n_free, cap_free;
    size_t n_alive;
    struct map child;     /* (parent, first token) -> child */
    struct rheap *heap;   /* leaves by last access (lazy: stale entries) */
    size_t n_heap, cap_heap;
    uint64_t clock;
    int32_t *path;
    size_t n_path, cap_path;
    struct rrun *req;     /* the request as runs */
    size_t n_req, cap_req;
    struct kv_sim_stats st;
};

/* An entry: a chunk's KV (keyed by context and content), a system prompt's
 * KV, or a conversation's KV.  LRU: a doubly linked list, head = most
 * recent.  LFU: a binary min-heap on (uses, last use). */
struct centry {
    uint64_t key;
    int64_t len;
    int64_t p0;          /* position it was computed at */
    uint64_t uses, last;
    int32_t prev, next;  /* LRU links, or heap position in prev */
};

struct ccache {
    int64_t cap;          /* tokens; INT64_MAX for the oracle */
    int64_t max_n;        /* most resident entries; 0: no limit */
    int64_t used;
    int lfu;
    struct centry *e;
    size_t n, cap_e;
    int32_t *free_ids;
    size_t n_free, cap_free;
    int32_t head, tail;
    int32_t *heap;        /* LFU: entry ids */
    size_t n_heap, cap_heap;
    uint64_t clock;
    struct map map;
    struct kv_sim_stats st;
};

/* mooncake.c: is the line a Mooncake request (a JSON object with
 * hash_ids or input_length); one line as a request (1, or -1 naming the
 * line); chunks grow into *chunks. */
int sim_mooncake_detect(const char *s, size_t n);
int sim_mooncake_line(const char *name, uint64_t line, const char *s,
                      size_t n, int64_t B, double *last_t,
                      struct kv_sim_seg **chunks, size_t *cap,
                      int64_t **ids, size_t *ids_cap,
                      struct kv_sim_req *req, struct kv_err *e);

/* map.c */
void sim_map_release(struct map *m);
int64_t sim_map_get(const struct map *m, uint64_t k);
int sim_map_put(struct map *m, uint64_t k, uint32_t v);
void sim_map_del(struct map *m, uint64_t k);
size_t sim_map_mem(const struct map *m);
int sim_grow(void **p, size_t *cap, size_t n, size_t sz);

/* stats.c */
void sim_hist_add(struct kv_sim_stats *st, double us, double t);
double sim_causal_pairs(int64_t p, int64_t n);

/* prefix.c */
int64_t sim_prefix_feed(struct prefix *p, const struct kv_sim_seg *seg,
                        size_t n_seg, int64_t n_prompt, int64_t out_len,
                        uint64_t salt, struct kv_err *e);
void sim_prefix_release(struct prefix *p);

/* prefix_lfu.c: the free blocks of prefix-lfu (push: 0 or -1 out of
 * memory; pop: a block id or -1 when none is free) */
int sim_lfu_push(struct prefix *p, int32_t x);
int32_t sim_lfu_pop(struct prefix *p);

/* radix.c */
int sim_rx_init(struct radix *r, int64_t cap);
void sim_rx_release(struct radix *r);
int64_t sim_radix_feed(struct radix *r, const struct kv_sim_seg *seg,
                       size_t n_seg, int64_t n_prompt, int64_t out_len,
                       uint64_t salt, struct kv_err *e);

/* chunkcache.c */
int32_t sim_cc_lookup(struct ccache *c, uint64_t key);
int sim_cc_insert(struct ccache *c, uint64_t key, int64_t len, int64_t p0,
                  struct kv_err *e);
void sim_cc_release(struct ccache *c);
size_t sim_cc_mem(const struct ccache *c);

#endif
