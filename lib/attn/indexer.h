/* indexer.h - DeepSeek-V3.2's lightning indexer (DeepSeek Sparse
 * Attention): which keys each query's sparse MLA reads.
 *
 *   score[i][t] = sum_h w[i][h] * relu(scale * q[i][h] . k[t])
 *
 * over the keys t a query may see (causal, bottom-right aligned: query i of
 * Tq sits at position i + Tk - Tq), then the top k of each row: the highest
 * scores first, equal scores by the smaller key index, -1 filling the row
 * where fewer than k keys are visible.  Every dot product and the sum over
 * heads are accumulated in double and compared in double, so the selection
 * does not depend on the thread count or the CPU; the scores written are
 * those doubles rounded to f32.
 *
 * A batch packs requests as kvattn's varlen options do: with q_lens and
 * kv_lens, request b owns q_lens[b] rows of q and w and kv_lens[b] rows of
 * k, in order; each query sees only its own request's keys (causal within
 * the request, bottom-right aligned) and its indices are positions in that
 * request, 0 .. kv_lens[b] - 1: the int32 [T, topk] kv_mla_sparse reads
 * (attn/mla_sparse.h). */
#ifndef KV_INDEXER_H
#define KV_INDEXER_H

#include <stdint.h>
#include "core/err.h"

struct kv_indexer_req {
    const float *q;        /* [Tq, H, D] */
    const float *k;        /* [Tk, D] */
    const float *w;        /* [Tq, H]: the heads' weights */
    int64_t n_q, n_k, n_heads, head_dim;
    double scale;          /* the dot products' scale (head_dim^-0.5) */
    int64_t topk;
    int causal;            /* 0: every query sees every key */
    int n_threads;
    /* A batch (NULL: one request of n_q queries over n_k keys): n_reqs
     * requests, their queries and keys, summing to n_q and n_k. */
    const int64_t *q_lens, *kv_lens;
    size_t n_reqs;
};

/* idx [Tq, topk] (int32) and, when scores is not NULL, their scores
 * [Tq, topk] (f32, -inf where idx is -1).  Returns 0, or -1 with e set
 * (bad sizes, lengths that do not sum to n_q and n_k, or a causal request
 * with more queries than keys). */
int kv_indexer_topk(const struct kv_indexer_req *r, int32_t *idx,
                    float *scores, struct kv_err *e);

#endif
