/* mla_sparse.h - DeepSeek-V3.2's sparse MLA: the absorbed form of mla.h
 * over the latent positions an indexer selected (kvattn index).
 * kv_mla_sparse runs kv_mla_absorbed's kernels over each query's selected
 * rows, in ascending position order, read in place from the cache (its
 * numerics, bound and routes, with seq_len the number selected);
 * kv_mla_sparse_ref computes each row in double and rounds it once, the
 * reference the tests hold it to. */
#ifndef KV_MLA_SPARSE_H
#define KV_MLA_SPARSE_H

#include <stdint.h>
#include "attn/mla.h"

/* r as for kv_mla_absorbed (q [T, H, Dl + R], the paged latent cache, the
 * block table, seq_lens, q_lens, kv_lora_rank, causal, scale, out_dtype,
 * n_threads, max_bytes, bf16_route); topk [n_rows, k] int32:
 * for each query, positions of its request's keys, -1 = unused.  Indices
 * outside -1 .. seq_len - 1, after the query's position when causal, or
 * repeated within a row are refused.  out [T, H, Dl] and (lse != NULL)
 * lse [T, H] f32; both zeroed or released, untouched on failure. */
int kv_mla_sparse(const struct kv_mla_req *r, const int32_t *topk,
                  int64_t n_rows, int64_t k, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e);
/* The rows of r's cache that kv_mla_sparse reads for topk (slot numbers
 * block * block_size + offset, ascending, each once) into *rows (malloc'd,
 * the caller frees) and *n_rows, after the checks of kv_mla_sparse (their
 * messages); the cache's shape is read, never its data (which may be
 * NULL).  With kv_mla_sparse_packed, a caller reads only those rows of a
 * cache file. */
int kv_mla_sparse_rows(const struct kv_mla_req *r, const int32_t *topk,
                       int64_t n_rows_topk, int64_t k, int64_t **rows, size_t *n_rows,
                       struct kv_err *e);
/* kv_mla_sparse over packed [n_rows, Dl + R] (the cache's dtype), whose
 * row i holds cache row rows[i] (ascending, at least those that
 * kv_mla_sparse_rows gives; a missing one is an error): the same result,
 * bit for bit; r->cache gives the shape only. */
int kv_mla_sparse_packed(const struct kv_mla_req *r, const int32_t *topk,
                         int64_t n_rows_topk, int64_t k, const int64_t *rows, size_t n_rows,
                         const struct kv_tensor *packed, struct kv_tensor *out,
                         struct kv_tensor *lse, struct kv_err *e);
int kv_mla_sparse_ref(const struct kv_mla_req *r, const int32_t *topk,
                      int64_t n_rows, int64_t k, struct kv_tensor *out,
                      struct kv_tensor *lse, struct kv_err *e);

#endif
