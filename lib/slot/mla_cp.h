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
 *
 * vLLM's chunking (KV_MLA_CP_CHUNK_VLLM, its plan_mla_context_chunks and
 * build_mla_chunked_context_metadata; DCP only, P = 1) packs requests
 * instead: with workspace rows ws, alignment a = B (lcm(B, V) when W > 1),
 * max_context_chunk mcc = ws rounded down to a, row budget ws / W and
 * padded_rows(x) = cdiv(x, V) I (x when W = 1), requests are taken in
 * order while their remaining context's padded rows fit the budget; the
 * first that does not is split at the longest multiple of a, at most mcc
 * and below its remaining context, whose rows fit (the chunk ends there),
 * and a request without context ends the chunk.  Request b's slice of
 * chunk c starts at context offset s and holds n tokens; on every rank it
 * covers local indices from ls = padded_rows(s) for n_cb = padded_rows(s +
 * n) - ls rows, and the formulas above hold with c cs replaced by ls (the
 * reorganisation is the same, vLLM's reorg_kvcache).  A request outside a
 * chunk has n = n_cb = 0 there.
 */
#ifndef KV_SLOT_MLA_CP_H
#define KV_SLOT_MLA_CP_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

enum kv_mla_cp_chunking {
    KV_MLA_CP_CHUNK_ASCEND = 0,  /* every request in every chunk, fixed
                                    local slices (vllm-ascend) */
    KV_MLA_CP_CHUNK_VLLM = 1     /* requests packed under a row budget
                                    (vLLM) */
};

struct kv_mla_cp_geom {
    int64_t block_size;          /* B (a multiple of interleave) */
    int64_t pcp_size, dcp_size;  /* >= 1 (pcp_size 1 for vLLM's chunking) */
    int64_t interleave;          /* I >= 1 (cp_kv_cache_interleave_size) */
    int64_t max_context_chunk;   /* ascend: multiple of I W; 0 = one chunk */
    int chunking;                /* enum kv_mla_cp_chunking */
    int64_t workspace;           /* vLLM: chunked_prefill_workspace_size,
                                    rows, as vLLM aligns it (a multiple of
                                    the alignment a) */
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
    int64_t n_chunks, chunk_size;    /* ascend: the local chunk size cs;
                                        vLLM: max_context_chunk */
    int64_t *toks;                   /* [n_chunks]: rows per rank buffer */
    int64_t *padded_lens;            /* [n_chunks][n_req]: n_cb */
    int64_t *cu_seq_lens;            /* [n_chunks][n_req + 1] */
    int64_t *starts;                 /* [n_chunks][n_req]: s, the context
                                        offset of the request's slice */
    int64_t *seq_lens;               /* [n_chunks][n_req]: its tokens n */
    int64_t *local_lens;             /* [n_req][W]: len_r */
    struct kv_mla_cp_entry *e;
};

/* The size of the map kv_mla_cp_build would make: its entries (the
 * context tokens), chunks and bytes (every array it allocates).  Checks
 * the geometry and the lengths as build does, not the block table.  0, or
 * -1 with e naming the bad value (or the overflow). */
int kv_mla_cp_size(const struct kv_mla_cp_geom *g, const int64_t *ctx, size_t n_req,
                   size_t *n_entries, int64_t *n_chunks, size_t *bytes,
                   struct kv_err *e);

/* Build the map for n_req requests with context lengths ctx[] and block
 * table rows bt (n_rows x n_cols, row-major, ids >= 0 where used, small
 * enough that every slot fits int64).  0, or -1 with e naming the bad
 * value. */
int kv_mla_cp_build(const struct kv_mla_cp_geom *g, const int64_t *bt, size_t n_rows,
                    size_t n_cols, const int64_t *ctx, size_t n_req,
                    struct kv_mla_cp_map *m, struct kv_err *e);
void kv_mla_cp_map_release(struct kv_mla_cp_map *m);

#endif
