/* mla_cp.h - the AllGatherKV reorganisation of MLA under context
 * parallelism (vllm-ascend's _reorg_kvcache, its chunked-context path), as
 * an index map.
 *
 * W = pcp_size * dcp_size ranks shard the latent cache; rank r = pcp_rank *
 * dcp_size + dcp_rank (the order of the DCP all-gather inside the PCP one,
 * and of num_computed_tokens_of_pcp_dcp [req, pcp, dcp]).  With interleave
 * I and virtual block V = I W, the token at position p lives on rank
 * (p / I) % W at local index j = (p / V) I + p % I of that rank's sequence
 * (its slot: kv_slot_of with the same W, I and block table on every rank);
 * inversely p = (j / I) V + r I + j % I.  Rank r holds len_r =
 * kv_slot_cp_local_lens(ctx, W, I)[r] of a request's ctx context tokens.
 *
 * The context is read in chunks of max_context_chunk global tokens (a
 * multiple of V; one chunk when 0).  Chunk c of every rank covers local
 * indices [c cs, c cs + n_cb) with cs = max_context_chunk / V * I and
 * n_cb = clamp(cdiv(ctx_b, V) I - c cs, 0, cs) for request b (the padded
 * local chunk length, the same on every rank); every rank loads its
 * requests' slices back to back, n_cb rows each (rows past len_r are
 * padding), toks_c = sum_b n_cb rows in all; the all-gather stacks the W
 * buffers in rank order.  The reorganisation then keeps, request by
 * request and within it rank by rank, the real rows:
 *
 *   gathered = r toks_c + sum_{b' < b} n_cb' + (j - c cs)
 *   reorg    = cu_c[b] + sum_{r' < r} real_{c b r'} + (j - c cs)
 *
 * real_{c b r} = min(max(0, len_r - c cs), n_cb) and cu_c the prefix sums
 * of sum_r real (= the chunk's context tokens per request).  A request's
 * segment is contiguous but in rank order, not position order: the
 * attention over it has no mask, so the order does not matter.
 */
#ifndef KV_SLOT_MLA_CP_H
#define KV_SLOT_MLA_CP_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

struct kv_mla_cp_geom {
    int64_t block_size;          /* B (a multiple of interleave) */
    int64_t pcp_size, dcp_size;  /* >= 1 */
    int64_t interleave;          /* I >= 1 (cp_kv_cache_interleave_size) */
    int64_t max_context_chunk;   /* multiple of I W; 0 = one chunk */
};

/* One context token of one request in one chunk. */
struct kv_mla_cp_entry {
    int64_t req, pos, chunk;
    int64_t pcp_rank, dcp_rank;
    int64_t local_index;         /* j: index in the rank's sequence */
    int64_t local_slot;          /* its slot in the rank's cache */
    int64_t gathered;            /* row of the padded all-gather buffer */
    int64_t reorg;               /* row of the chunk's contiguous layout */
};

/* The map, entries ordered by (chunk, reorg).  Owned arrays; release with
 * kv_mla_cp_map_release (safe on a zeroed struct). */
struct kv_mla_cp_map {
    size_t n, n_req;
    int64_t n_chunks, chunk_size;    /* local chunk size cs */
    int64_t *toks;                   /* [n_chunks]: rows per rank buffer */
    int64_t *padded_lens;            /* [n_chunks][n_req]: n_cb */
    int64_t *cu_seq_lens;            /* [n_chunks][n_req + 1] */
    int64_t *local_lens;             /* [n_req][W]: len_r */
    struct kv_mla_cp_entry *e;
};

/* Build the map for n_req requests with context lengths ctx[] and block
 * table rows bt (n_rows x n_cols, row-major, ids >= 0 where used).  0, or
 * -1 with e naming the bad value. */
int kv_mla_cp_build(const struct kv_mla_cp_geom *g, const int64_t *bt, size_t n_rows,
                    size_t n_cols, const int64_t *ctx, size_t n_req,
                    struct kv_mla_cp_map *m, struct kv_err *e);
void kv_mla_cp_map_release(struct kv_mla_cp_map *m);

#endif
