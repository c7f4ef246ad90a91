/* xattn.h - XAttention block selection: stride-sampled antidiagonal scoring,
 * softmax, block sums and threshold selection (Xu et al., ICML 2025), and
 * the exact attention mass a block mask covers (recall).
 *
 * Inputs are f32 tensors Q [B, Hq, Lq, D] and K [B, Hkv, Lk, D] (heads
 * first); query head h uses kv head h / (Hq / Hkv).  The estimate also
 * takes bf16 Q and K: on a bf16 route the tiles read them as they are,
 * else they are widened to f32 first (the result is that of their f32
 * values either way).  Two geometries:
 *
 *   clean (compat_chunk == 0): Q and K are padded to the block size only,
 *     query token t sits at kv position q_offset + t, padded keys never get
 *     probability, padded query rows contribute nothing;
 *   compat (compat_chunk == C): the original pure-PyTorch xattn_estimate
 *     with chunk size C, artifacts included (padding to C, the chunk offset
 *     (ceil(Lk/C) - ceil(Lq/C)) * C, the "-0 slice" masking when Lk % C == 0,
 *     zero-padded keys inside a non-causal softmax, the per-chunk rule).
 *
 * The selection rules (the original's first-chunk lag, block 0 always kept,
 * strict '<' with the crossing block kept) are those of the specification
 * (xattn.md sections 8 and 9); kv_xattn_select_row() is one row of it.
 */
#ifndef KV_XATTN_H
#define KV_XATTN_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

enum kv_xattn_mode { KV_XATTN_INVERSE = 0, KV_XATTN_SLASH = 1 };
enum kv_xattn_rule { KV_XATTN_RULE_ORIGINAL = 0, KV_XATTN_RULE_INTENDED = 1 };

/* How one row of block sums is selected (spec 8.1, 8.2, 8.4). */
enum kv_xattn_sel {
    KV_XATTN_SEL_FORCED = 0,  /* 8.1: blocks 0 and diag forced, no lag */
    KV_XATTN_SEL_LAGGED = 1,  /* 8.2: only diag forced, sums lag by one */
    KV_XATTN_SEL_FREE = 2     /* 8.4: non-causal, nothing forced */
};

struct kv_xattn_opts {
    int64_t stride;           /* S; must divide block_size */
    int64_t block_size;       /* B */
    int causal;
    int64_t q_offset;         /* kv position of query token 0; -1 = Lk - Lq */
    double norm;              /* extra divisor of the scores (1) */
    double scale;             /* > 0: multiply dot products by it instead of
                                 dividing by sqrt(D), S and norm (recall) */
    enum kv_xattn_mode select_mode;
    enum kv_xattn_rule rule;
    int64_t compat_chunk;     /* 0 = clean geometry, else the original's C */
    int keep_sink;            /* original meaning: query-block row 0 all kept */
    int keep_recent;          /* the diagonal block kept */
    const double *thresholds; /* one per query head (Hq values) */
    int nthreads;             /* 0 = all cores */
    size_t max_bytes;         /* memory limit for work buffers (0 = none) */
    /* called (serialised, from worker threads) after each tile with the
     * number of tiles done and the total; may be NULL */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* the strided GEMM on bf16 dot-product tiles (attn/bf16.h: an enum
     * kv_bf16_route; 0 = f32 sgemm): Q and K are read as bf16 (exact when
     * they came from bf16 files); a hardware route the CPU lacks falls
     * back to sgemm */
    int bf16_route;
};

/* Time split of one estimate, in seconds.  gemm, softmax and select are
 * CPU time summed over the worker threads; prep and total are wall time
 * of the call. */
struct kv_xattn_times {
    double prep, gemm, softmax, select, total;
    double gemm_flops;        /* multiply-adds * 2 actually issued */
};

/* Fill o with the defaults: stride 8, block 128, causal, q_offset -1,
 * norm 1, inverse, original rule, clean geometry. */
void kv_xattn_opts_init(struct kv_xattn_opts *o);

/* Check the options against the shapes of Q [B, Hq, Lq, D] and
 * K [B, Hkv, Lk, D] and return the resolved q offset in *q_offset.
 * Messages name the values ("--stride 24 does not divide --block-size 128"). */
int kv_xattn_check(const struct kv_xattn_opts *o, const int64_t qshape[4],
                   const int64_t kshape[4], int64_t *q_offset,
                   struct kv_err *e);

/* Run the estimate.  q, k: f32 tensors as above.  On success mask holds a
 * bool tensor [B, Hq, ceil(Lq/B), ceil(Lk/B)] (1 = keep) and, when sums is
 * not NULL, sums the f32 block sums of the same shape; the caller releases
 * both.  times may be NULL.  The caller checks f32 inputs finite; bf16 Q
 * and K on a bf16 route are checked by the tiles as they read them (an
 * error "Q holds an inf or a nan", or K's, nothing returned), and scores
 * that overflow f32 are an error on every route. */
int kv_xattn_estimate(const struct kv_tensor *q, const struct kv_tensor *k,
                      const struct kv_xattn_opts *o, struct kv_tensor *mask,
                      struct kv_tensor *sums, struct kv_xattn_times *times,
                      struct kv_err *e);

/* Select one row of n block sums vals (as stored, f32) with threshold tau:
 * the row total T is summed in index order in double, required = tau * T,
 * candidates are taken in descending order (ties: lower index first) and a
 * candidate is kept while the accumulated sum is strictly below required,
 * so the block that crosses the threshold is kept.  kind picks the rule;
 * diag is the forced diagonal block (ignored for KV_XATTN_SEL_FREE, or when
 * outside [0, n)).  Block 0 is always kept (the original's artifact 8.3).
 * Causal clearing of future blocks is NOT done here.  scratch must hold
 * 2 * n int64 values.  keep receives n bytes of 0/1. */
void kv_xattn_select_row(const float *vals, int64_t n, enum kv_xattn_sel kind,
                         int64_t diag, double tau, int64_t *scratch,
                         uint8_t *keep);

/* The plain reference of the strided scores: score[i][j] for one head
 * (Qr[i] . Kr[j] divided by sqrt(D), S and norm, no masking), written into
 * out[n_qrows * n_krows] where n_qrows = ceil(Lq/S), n_krows = ceil(Lk/S).
 * q is [Lq, D], k is [Lk, D].  Used by tests against the fast path. */
void kv_xattn_scores_ref(const float *q, int64_t lq, const float *k,
                         int64_t lk, int64_t d, int64_t stride,
                         enum kv_xattn_mode mode, double norm, float *out);

/* exp(x[j] - mx) in place for j < n: the AVX2 path where the CPU has it
 * (within 2 ulp of expf), else expf.  kv_xattn_force_scalar(1) makes every
 * row kernel take the plain scalar reference (tests compare the paths). */
void kv_xattn_exp_shift(float *x, int64_t n, float mx);
void kv_xattn_force_scalar(int on);

/* Exact attention mass covered by a block mask (recall).  Q, K as above
 * (f32); keep [B, Hq, nqb, nkb] bytes (nonzero = kept) with
 * nqb = ceil(Lq/block), nkb = ceil(Lk/block).  Uses o->block_size,
 * o->causal, o->q_offset, o->scale (<= 0: 1/sqrt(D)), o->nthreads,
 * o->max_bytes.  row_recall receives f64 [B, Hq, Lq]: the probability mass
 * of each query token inside its kept blocks.  block_mass (may be NULL)
 * receives f32 [B, Hq, nqb, nkb]: the mean over the q block's tokens of the
 * mass each k block receives (a row sums to 1). */
int kv_xattn_recall(const struct kv_tensor *q, const struct kv_tensor *k,
                    const uint8_t *keep, const struct kv_xattn_opts *o,
                    struct kv_tensor *row_recall, struct kv_tensor *block_mass,
                    struct kv_err *e);

/* Density bookkeeping of a mask [nbh, nqb, nkb]: for each of the nbh
 * (batch, head) pairs, the kept blocks among the causally valid ones into
 * kept[] and valid[].  Valid when not causal: every block; when causal: k
 * blocks up to the one holding the last key the q block's last query token
 * sees (q_offset + min((qb + 1) * block, lq) - 1). */
void kv_xattn_density(const uint8_t *mask, int64_t nbh, int64_t nqb,
                      int64_t nkb, int causal, int64_t q_offset, int64_t lq,
                      int64_t block, int64_t *kept, int64_t *valid);

#endif
