/* pcp.h - prefill context parallelism: the DualChunkSwap split of a batch
 * over P ranks, the all-gather restore indices and the head/tail index sets
 * (spec masks-slots.md C.1-C.3).
 *
 * Two layouts:
 *  - ascend (vllm-ascend PCPManager.update_tokens_for_pcp and
 *    generate_pcp_metadata): each prefill of n tokens is padded to a
 *    multiple of 2P and cut into 2P chunks of c tokens; rank k takes chunk k
 *    (head) and chunk 2P-1-k (tail).  Decode requests (the first n_decodes)
 *    are replicated on every rank.
 *  - vllm (vLLM 0.33.0 model runner V2 PCPManager): no padding, chunks of
 *    ceil(n/2P) clipped to the request and dropped when empty; each chunk
 *    is a local row, in request order (decodes first).  Without DCP each
 *    decode goes to one rank (the i-th decode to rank i % P); with DCP
 *    decodes, and prefills too short to fill all 2P chunks, are replicated
 *    on every rank and written by rank 0's copy.
 *
 * Every array is malloc'd and owned by its struct; the *_release functions
 * free them and are safe on a zeroed struct.
 */
#ifndef KV_PCP_H
#define KV_PCP_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

/* The ascend layout, for one rank (global fields are the same on all). */
struct kv_pcp_ascend {
    size_t n_reqs, n_decodes, n_prefills;
    int64_t pcp_size, rank;
    int64_t *pcp_tokens;     /* n_reqs: tokens per request on each rank */
    int64_t *num_pcp_pads;   /* n_reqs */
    size_t n_padded;         /* sum of padded lengths = P * n_local */
    int64_t *unpad_mask;     /* n_padded, 1 = real token */
    int64_t *restore_idx;    /* n_padded: pcp_allgather_restore_idx */
    size_t n_local;          /* sum of pcp_tokens */
    int64_t *positions;      /* n_local: computed + position in request */
    size_t n_q;              /* sum over prefills of c = pcp_tokens / 2 */
    int64_t *q_head_idx, *q_tail_idx;      /* n_q each */
    int64_t *q_full_idx;                   /* 2 n_q */
    size_t n_head_nomask, n_tail_nomask;
    int64_t *kv_head_nomask, *kv_head_mask;   /* n_head_nomask, n_q */
    int64_t *kv_tail_nomask, *kv_tail_mask;   /* n_tail_nomask, n_q */
    int64_t *attn_mask_seqlens;        /* n_prefills, cumulative c */
    int64_t *head_attn_nomask_seqlens; /* n_prefills, cumulative c*k */
    int64_t *tail_attn_nomask_seqlens; /* n_prefills, cumulative c*(2P-1-k) */
};

/* Split tokens[n_reqs] (each >= 1; computed may be NULL) whose first
 * n_decodes requests are decodes, over pcp_size ranks, for rank. */
int kv_pcp_ascend_split(const int64_t *tokens, const int64_t *computed,
                        size_t n_reqs, size_t n_decodes, int64_t pcp_size,
                        int64_t rank, struct kv_pcp_ascend *out,
                        struct kv_err *e);
void kv_pcp_ascend_release(struct kv_pcp_ascend *p);

/* The vllm (MRV2) layout, all ranks at once. */
struct kv_pcp_vllm {
    size_t n_reqs, n_decodes, n_tokens;
    int64_t pcp_size, dcp_size;
    int64_t *per_rank;          /* P: tokens on each rank */
    int64_t padded;             /* max of per_rank */
    int64_t *gather_idx;        /* P*padded: padded_gather_idx */
    int64_t *write_mask;        /* P*padded: gathered_kv_write_mask */
    int64_t *restore_idx;       /* n_tokens: hidden_restore_idx */
    /* local rows and tokens, rank after rank; rank k's rows are
     * [row_start[k], row_start[k+1]) and its tokens follow the same
     * order (tok_start[k] = sum of per_rank before k). */
    int64_t *row_start;         /* P+1 */
    int64_t *row_req;           /* request of each local row */
    int64_t *row_pos;           /* first position of the row */
    int64_t *row_len;           /* tokens in the row */
    size_t n_rows;
    int64_t *positions;         /* sum per_rank */
    int64_t *token_idx;         /* global token index of each local token */
};

/* dcp_size (>= 1) decides how decodes and short prefills are placed. */
int kv_pcp_vllm_split(const int64_t *tokens, const int64_t *computed,
                      size_t n_reqs, size_t n_decodes, int64_t pcp_size,
                      int64_t dcp_size, struct kv_pcp_vllm *out,
                      struct kv_err *e);
void kv_pcp_vllm_release(struct kv_pcp_vllm *p);

/* The number of leading decode requests: requests are decodes while they
 * schedule at most `threshold` tokens (1 + speculative) and, when computed
 * is not NULL, already have context (computed > 0): vllm-ascend's
 * classify_decode_request_mask and vLLM MRV2's is_prefilling both call a
 * request with nothing computed a prefill, whatever its length. */
size_t kv_pcp_count_decodes(const int64_t *tokens, const int64_t *computed,
                            size_t n_reqs, int64_t threshold);

#endif
