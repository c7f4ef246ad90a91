/* store.h - where chunk blobs live: an embedded directory store
 * (dir:PATH, store_dir.c), a shared Redis (redis://HOST:PORT[/DB],
 * store_redis.c) or a Redis Cluster (redis-cluster://HOST:PORT[,..],
 * store_cluster.c), behind one interface.
 *
 * Both keep whole blobs (blob.h) under the chunk key, write them once
 * (first writer wins, a blob is never modified), and verify header,
 * request (namespace, context, token ids) and payload checksum on every
 * read: a corrupt blob or a key collision is reported and is a miss,
 * never wrong data.
 */
#ifndef KV_STORE_H
#define KV_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "chunk/blob.h"

struct kv_store;

struct kv_store_opts {
    double timeout;      /* Redis connect and I/O timeout, seconds (2) */
    int64_t ttl;         /* Redis SET EX seconds; 0 = none */
    int durable;         /* dir: also fsync the directories */
    int read_only;       /* open for reading only: no index updates */
    int must_exist;      /* dir: a missing store is an error, not created
                          * (every command but put) */
    size_t max_bytes;    /* Redis: the largest reply read into memory, a
                          * blob above it is an error (--max-mem); 0 = none */
};

void kv_store_opts_init(struct kv_store_opts *o);

/* spec with the password of a URL's [USER]:PASSWORD@ replaced by "***"
 * (USER:***@HOST, or ***@HOST), into buf; returns buf.  Every message that
 * names a store URL goes through it. */
const char *kv_store_redact(const char *spec, char *buf, size_t len);

/* Open "dir:PATH", "redis://HOST:PORT[/DB]", or a plain path (= dir:).
 * A dir store is created when missing, unless read_only or must_exist. */
int kv_store_open(const char *spec, const struct kv_store_opts *o,
                  struct kv_store **out, struct kv_err *e);
/* Close; safe on NULL. */
void kv_store_close(struct kv_store *s);
/* "dir", "redis" or "redis-cluster". */
const char *kv_store_kind(const struct kv_store *s);

/* A request: the chunk's key and what a stored blob must match. */
struct kv_chunk_req {
    uint8_t key[16], ns[16], ctx[16];
    const int32_t *tokens;
    size_t n_tokens;
};

/* A verified blob held for reading.  payload points at payload_len bytes
 * that stay valid until kv_blob_ref_release (safe on a zeroed struct). */
struct kv_blob_ref {
    struct kv_blob_meta meta;
    const uint8_t *payload;
    /* private */
    void *map;
    size_t map_len;
    int fd;
    void *reply;
    void *owned;
};
void kv_blob_ref_release(struct kv_blob_ref *r);

/* Outcome of one lookup. */
enum kv_get_status {
    KV_GET_HIT = 0,
    KV_GET_ABSENT,       /* no blob under the key */
    KV_GET_COLLISION,    /* a blob whose request fields differ */
    KV_GET_CORRUPT       /* a blob that fails its checks */
};

/* Look up n requests (Redis pipelines them).  status[i] says what
 * happened; refs[i] holds a hit.  why[i] (may be NULL) receives the reason
 * of a collision or corruption.  Returns 0, or -1 when the store itself
 * fails (I/O error, Redis down or timed out): then no ref is held.
 * Counters (hits, misses, collisions, checksum failures) are updated. */
int kv_store_get(struct kv_store *s, const struct kv_chunk_req *req,
                 size_t n, struct kv_blob_ref *refs, int *status,
                 struct kv_err *why, struct kv_err *e);

/* A consumer of hits, for a store that reads blobs one after another
 * (Redis, and each master of a cluster): hit() sees each hit as soon as it
 * is read and verified, in the thread that read it (on a cluster, the
 * masters' threads at once, each i once unless a redirection sends a
 * chunk again), and the blob is let go right after, so that the next
 * reply reuses its memory.  It returns 0 to keep the hit, 1 to make it a
 * collision (*why filled), -1 to stop the lookup with e. */
struct kv_get_sink {
    int (*hit)(void *ctx, size_t i, const struct kv_blob_ref *ref,
               struct kv_err *why, struct kv_err *e);
    void *ctx;
};

/* kv_store_get with a sink: a store that streams passes every hit to the
 * sink and leaves refs[i] empty (payload NULL); one that does not (dir:)
 * holds its hits in refs as kv_store_get does, for the caller. */
int kv_store_get_each(struct kv_store *s, const struct kv_chunk_req *req,
                      size_t n, struct kv_blob_ref *refs, int *status,
                      struct kv_err *why, const struct kv_get_sink *sink,
                      struct kv_err *e);

/* Store a blob: hdr (m->header_len bytes, from kv_blob_header) and payload
 * (m->payload_len bytes).  *existed = 1 when the key was already stored
 * (nothing written).  Crash-safe: a reader sees all of it or nothing. */
int kv_store_put(struct kv_store *s, const struct kv_blob_meta *m,
                 const uint8_t *hdr, const void *payload, int *existed,
                 struct kv_err *e);

/* Remove a key.  *found = 0 when it was not there. */
int kv_store_rm(struct kv_store *s, const uint8_t key[16], int *found,
                struct kv_err *e);

/* Pin (on = 1) or unpin a key: pinned entries are never evicted (dir). */
int kv_store_pin(struct kv_store *s, const uint8_t key[16], int on,
                 int *found, struct kv_err *e);

/* One stored entry, for ls. */
struct kv_store_entry {
    uint8_t key[16];
    uint64_t bytes;
    uint32_t n_tokens;
    int32_t base_pos;
    uint64_t hits;
    double last_access;     /* unix seconds; 0 = unknown */
    int pinned;
};
int kv_store_ls(struct kv_store *s,
                int (*cb)(void *ctx, const struct kv_store_entry *),
                void *ctx, struct kv_err *e);

struct kv_store_stats {
    uint64_t entries, bytes, hits, misses, evictions, collisions,
             checksum_failures, puts;
};
int kv_store_stat(struct kv_store *s, struct kv_store_stats *st,
                  struct kv_err *e);

/* Evict least recently used, unpinned entries not being read until the
 * total is at most low * max_bytes (only when it exceeds max_bytes). */
struct kv_evict_report {
    uint64_t removed, removed_bytes, skipped_busy, total_before, total_after;
};
int kv_store_evict(struct kv_store *s, uint64_t max_bytes, double low,
                   struct kv_evict_report *r, struct kv_err *e);

/* Check every blob; with repair, fix what is found.  cb (may be NULL)
 * hears every problem as one line. */
struct kv_fsck_report {
    uint64_t checked, corrupt, orphan_rows, unindexed, stale_tmp, repaired;
    uint64_t index_unreadable;  /* 1: the index itself cannot be used */
    uint64_t wrong_totals;      /* 1: the index's totals of its rows (what
                                 * stat reads, dir:) differ from a count */
};
int kv_store_fsck(struct kv_store *s, int repair,
                  void (*cb)(void *ctx, const char *line), void *ctx,
                  struct kv_fsck_report *r, struct kv_err *e);

/* Backends (store_dir.c, store_redis.c). */
struct kv_store_ops {
    const char *kind;
    int (*get)(struct kv_store *, const struct kv_chunk_req *, size_t,
               struct kv_blob_ref *, int *, struct kv_err *, struct kv_err *);
    int (*put)(struct kv_store *, const struct kv_blob_meta *,
               const uint8_t *, const void *, int *, struct kv_err *);
    int (*rm)(struct kv_store *, const uint8_t *, int *, struct kv_err *);
    int (*pin)(struct kv_store *, const uint8_t *, int, int *,
               struct kv_err *);
    int (*ls)(struct kv_store *, int (*)(void *, const struct kv_store_entry *),
              void *, struct kv_err *);
    int (*stat)(struct kv_store *, struct kv_store_stats *, struct kv_err *);
    int (*evict)(struct kv_store *, uint64_t, double,
                 struct kv_evict_report *, struct kv_err *);
    int (*fsck)(struct kv_store *, int, void (*)(void *, const char *),
                void *, struct kv_fsck_report *, struct kv_err *);
    void (*close)(struct kv_store *);
};

struct kv_store {
    const struct kv_store_ops *ops;
    struct kv_store_opts opts;
    const struct kv_get_sink *sink;  /* during kv_store_get_each only */
};

int kv_store_dir_open(const char *path, const struct kv_store_opts *o,
                      struct kv_store **out, struct kv_err *e);
int kv_store_redis_open(const char *url, const struct kv_store_opts *o,
                        struct kv_store **out, struct kv_err *e);
int kv_store_cluster_open(const char *url, const struct kv_store_opts *o,
                          struct kv_store **out, struct kv_err *e);

/* Check a whole blob in memory against a request: used by both backends.
 * Returns a kv_get_status; fills m on a hit. */
int kv_store_verify(const uint8_t *buf, size_t len,
                    const struct kv_chunk_req *req, struct kv_blob_meta *m,
                    struct kv_err *why);

#endif
