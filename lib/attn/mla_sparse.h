/* mla_sparse.h - DeepSeek-V3.2's sparse MLA: the absorbed form of mla.h
 * over the latent positions an indexer selected (kvattn index), computed
 * in double per row and rounded once (see mla_sparse.c). */
#ifndef KV_MLA_SPARSE_H
#define KV_MLA_SPARSE_H

#include <stdint.h>
#include "attn/mla.h"

/* r as for kv_mla_absorbed (q [T, H, Dl + R], the paged latent cache, the
 * block table, seq_lens, q_lens, kv_lora_rank, causal, scale, out_dtype,
 * n_threads, max_bytes; bf16_route is not used); topk [n_rows, k] int32:
 * for each query, positions of its request's keys, -1 = unused.  Indices
 * outside -1 .. seq_len - 1, after the query's position when causal, or
 * repeated within a row are refused.  out [T, H, Dl] and (lse != NULL)
 * lse [T, H] f32; both zeroed or released, untouched on failure. */
int kv_mla_sparse(const struct kv_mla_req *r, const int32_t *topk,
                  int64_t n_rows, int64_t k, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e);

#endif
