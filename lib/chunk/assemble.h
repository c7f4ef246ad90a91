/* assemble.h - a prompt's KV from the chunk store (kvchunk assemble).
 *
 * A split prompt (chunk.h) is keyed segment by segment: the system prompt
 * in the namespace of a chunk that attended to nothing, every chunk after
 * the system prompt's tokens; the question has no key and is always a
 * miss.  Each other segment is looked up, every hit checked against the
 * namespace's shape and RoPE and moved to its offset in one tensor
 * [L, 2, T, Hkv, D] (an MLA namespace: the latent [L, T, D]), zeros where
 * a segment missed, and every miss listed with the position its KV must be
 * computed at: 0 for the system prompt, the base policy's position for a
 * chunk (its offset under --base-policy free), its offset for the
 * question.
 *
 *     kv_assemble_init(&a, ns, sp, max_bytes, want_kv, e)   keys, tensor
 *     kv_store_open(..., a.store_bytes ...)                  the store
 *     kv_assemble_fetch(&a, s, n_threads, e)                 lookups, misses
 *     kv_assemble_tables / kv_assemble_plan                  the results
 *     kv_assemble_release(&a)
 *
 * Results do not depend on n_threads.
 */
#ifndef KV_ASSEMBLE_H
#define KV_ASSEMBLE_H

#include <stdint.h>
#include <stdio.h>
#include "core/err.h"
#include "core/tensor.h"
#include "chunk/chunk.h"
#include "chunk/store.h"

/* One assembly.  The namespace and the split are borrowed (the caller
 * keeps them alive until kv_assemble_release).  kv_assemble_release
 * frees the rest; safe on a zeroed struct. */
struct kv_assembly {
    const struct kv_namespace *ns;
    const struct kv_split *sp;
    size_t n_segs;              /* sp's segments; the question is the last */
    struct kv_chunk_req *req;   /* [n_segs] keys (the question's zeroed) */
    int *status;                /* [n_segs] enum kv_get_status */
    struct kv_err *why;         /* [n_segs] reason of a collision, corruption */
    int32_t *base;              /* [n_segs] each hit's base position */
    int64_t *miss;              /* [n_miss, 4]: segment, offset, length, the
                                 * base position to compute it at */
    int64_t n_miss;
    struct kv_tensor kv;        /* the assembled KV; empty without want_kv */
    size_t store_bytes;         /* what max_bytes leaves for a store's reply
                                 * read beside the KV (0 = no limit) */
    /* private */
    struct kv_blob_ref *refs;
    int want_kv;
};

/* Bytes an assembly holds per segment (for a bound on the prompt read
 * before kv_assemble_init, as kvchunk assemble checks it). */
size_t kv_assemble_seg_bytes(void);

/* The key of every segment of sp but the question (req[n_segs], zeroed
 * for the question): what assemble looks up and split prints. */
int kv_split_keys(const struct kv_namespace *ns, const struct kv_split *sp,
                  struct kv_chunk_req *req, struct kv_err *e);

/* Key the segments, check the tensor's shape against max_bytes (0 = no
 * limit) and, with want_kv, allocate it zeroed.  0, or -1 with e (what is
 * allocated stays in a, for kv_assemble_release). */
int kv_assemble_init(struct kv_assembly *a, const struct kv_namespace *ns,
                     const struct kv_split *sp, size_t max_bytes,
                     int want_kv, struct kv_err *e);

/* Look every segment but the question up in s, in batches of a few blobs
 * held at a time; a hit of another shape becomes a collision (why says
 * so), a hit the RoPE cannot move is an error; hits are moved into a->kv
 * over n_threads threads (0 = all cores).  Then the misses.  0, or -1
 * with e. */
int kv_assemble_fetch(struct kv_assembly *a, struct kv_store *s,
                      int n_threads, struct kv_err *e);

/* The segments as int64 [n, 3] (kind, offset, length) and the misses as
 * int64 [n_miss, 4]: the second and third arrays of kvchunk assemble's
 * stream.  Both allocated here; the caller releases them. */
int kv_assemble_tables(const struct kv_assembly *a, struct kv_tensor *segs,
                       struct kv_tensor *misses, struct kv_err *e);

/* The plan as text, one line a segment: KIND OFFSET LENGTH KEY|- then
 * "hit P0" or "miss BASE".  The caller checks f for errors. */
void kv_assemble_plan(FILE *f, const struct kv_assembly *a);

/* The plan written to the file path (through a temporary file renamed on
 * success; NULL and "-" are refused, not taken for stdout).  0, or -1
 * with e. */
int kv_assemble_report(const struct kv_assembly *a, const char *path,
                       struct kv_err *e);

/* The .npy stream: the KV, then (unless kv_only) the segments and the
 * misses.  0, or -1 with e. */
int kv_assemble_npy(FILE *f, const struct kv_assembly *a, int kv_only,
                    struct kv_err *e);

void kv_assemble_release(struct kv_assembly *a);

/* Move a chunk read from the store (m, its payload src) by delta into dst,
 * whose token axis has T rows with the chunk at row off: K and V
 * [L, 2, T, Hkv, D], or a latent [L, T, D] whose c_kv is copied and k_pe
 * rotated (rope's head dim is k_pe's).  What get and assemble do to a
 * hit.  0, or -1 with e. */
int kv_chunk_move(const struct kv_rope *rope, const struct kv_blob_meta *m,
                  const void *src, int64_t delta, void *dst, int64_t T,
                  int64_t off, struct kv_err *e);

#endif
