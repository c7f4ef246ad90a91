/* attn.h - exact reference attention on the CPU and the LSE merge.
 *
 *   O = softmax(scale * Q K^T + mask) V        LSE = log sum_j exp(scores)
 *
 * Layouts:
 *   bhsd  Q [B, Hq, Lq, D]   K [B, Hkv, Lk, D]   V [B, Hkv, Lk, Dv]
 *         out [B, Hq, Lq, Dv]                    LSE [B, Hq, Lq]
 *   thd   Q [Tq, Hq, D]      K [Tk, Hkv, D]      V [Tk, Hkv, Dv]
 *         requests packed back to back (q_lens / kv_lens, vLLM's cu_seqlens)
 *         out [Tq, Hq, Dv]                       LSE [Tq, Hq]
 *   paged K and V come from one cache [2, n_blocks, block_size, Hkv, D]
 *         (vLLM's layout: index 0 = K, 1 = V) through a block table and
 *         per-request seq_lens; Q is bhsd or thd as above.
 *
 * GQA/MQA: Hq is a multiple of Hkv; query head h reads kv head h / (Hq/Hkv).
 * Row i of a request with Lq queries and Lk keys sits at absolute position
 * i' = i + Lk - Lq (bottom-right alignment).  Implicit masks: causal keeps
 * j <= i'; window W keeps i' - W < j <= i' (W keys including self); chunk
 * C keeps i' - i' % C <= j <= i' (Llama 4's chunked local attention).  An
 * explicit mask broadcasts (numpy rules) over the scores [B, Hq, Lq, Lk]
 * (bhsd) or [Hq, Tq, Tk] (thd, packed indices): bool/integer masks mean
 * nonzero = masked (or nonzero = keep with mask_keep), float masks are added
 * to the scaled scores -- unless mask_binary or mask_keep is set: then a
 * float mask is read like an integer one (value != 0, -0.0 is zero).  A block mask [B, Hq, ceil(Lq/bs), ceil(Lk/bs)]
 * (nonzero = keep, broadcastable) drops whole bs x bs blocks; it combines
 * with the other masks, so token-level causality applies inside kept blocks
 * when causal is set.  All masks intersect.
 *
 * Numerics: inputs f32/f16/bf16/f64 are read as f32; scores, softmax and
 * the output accumulate in f32.  When Q, K and V are all bf16 and the CPU
 * has a bf16 dot-product instruction (bf16.h), the tiles' Q K^T and P V
 * run on it, with P rounded to bf16 (unless p_f32).  A row that attends to nothing gives output
 * 0 and LSE -inf.  NaN or inf in the inputs propagate (the affected rows
 * become NaN); they never crash.  The work is tiled (online softmax over
 * key tiles, never a full score matrix), GEMM-shaped work goes to
 * single-threaded OpenBLAS per worker (loaded by the first call that needs
 * it, core/blas.h: a library that cannot be loaded is that call's error),
 * and workers split (batch, head group,
 * query tile) -- or, when every request has at most 4 queries, (batch,
 * query, chunk of 4096 keys) over all heads, merged by LSE in chunk order.
 * The split depends on the shapes only: the result is bit-identical for
 * any thread count.
 *
 * Variants.  Each score s = scale * q.k of row i (absolute position i')
 * and key j of query head h becomes, in this order:
 *   softcap C      s = C tanh(s / C)              (Gemma 2, Grok)
 *   ALiBi          s += slope_h (j - i')          (BLOOM, MPT, Falcon)
 * before the masks are applied (an additive mask is added after them).
 * A sink logit sigma_h (gpt-oss) is one more term of the softmax's sum
 * with no value: out = sum_j e^s_j v_j / (sum_j e^s_j + e^sigma_h), and
 * LSE = log(sum_j e^s_j + e^sigma_h) includes it (ALiBi's bias is in the
 * LSE too).  A row that attends to nothing gives 0 and LSE = sigma_h.
 * The standard ALiBi slopes of H heads: with P = 2^floor(log2 H),
 * slope_k = b^k, b = f32(2^(-8/P)), k = 1..P, then for H > P the odd
 * powers c^1, c^3, .. of c = f32(2^(-4/P)) for the remaining H - P heads
 * (BLOOM's and vLLM's rule), each rounded once to f32 from b^k in double.
 */
#ifndef KV_ATTN_H
#define KV_ATTN_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

enum kv_attn_layout { KV_ATTN_BHSD = 0, KV_ATTN_THD };

/* One attention request.  Zero it (memset) and fill what applies; the
 * tensors are borrowed, never freed or modified. */
struct kv_attn_req {
    enum kv_attn_layout layout;
    const struct kv_tensor *q;
    const struct kv_tensor *k, *v;        /* NULL when kv_cache is set */
    /* paged KV */
    const struct kv_tensor *kv_cache;     /* [2, n_blocks, block_size, Hkv, D] */
    const int64_t *block_table;           /* [bt_rows, bt_cols] row-major */
    size_t bt_rows, bt_cols;
    /* per-request lengths (thd; seq_lens = keys per request when paged, or
     * the used prefix of Lk in bhsd) */
    const int64_t *q_lens; size_t n_q_lens;
    const int64_t *kv_lens; size_t n_kv_lens;
    const int64_t *seq_lens; size_t n_seq_lens;
    /* masks */
    int causal;
    int64_t window;                       /* 0 = none */
    int64_t chunk;                        /* chunked local attention C: keep
                                             j // C == i' // C, causal
                                             implied; 0 = none */
    const struct kv_tensor *mask;
    int mask_keep;                        /* nonzero = keep (float masks too) */
    int mask_binary;                      /* float mask: nonzero = masked, not added */
    const struct kv_tensor *block_mask;
    int64_t block_size;
    /* numbers */
    int has_scale;
    double scale;                         /* default 1/sqrt(D) */
    /* variants of the scores and the softmax (see "Variants" above):
     * softcap C > 0 (0 = none); ALiBi with the standard slopes of Hq heads
     * (alibi) or given ones (alibi_slopes, f32/f16/bf16 [Hq]); one sink
     * logit per query head (sinks, f32/f16/bf16 [Hq]) */
    double softcap;
    int alibi;
    const struct kv_tensor *alibi_slopes;
    const struct kv_tensor *sinks;
    /* FP8 cache: kv_cache holds u8 bytes of format kv_fp8 - 1 (enum
     * kv_fp8 of core/fp8.h; 0 = not FP8), K's read as value * k_scale and
     * V's as value * v_scale, each product rounded once to f32 -- the
     * numbers kv_fp8_dequantize gives, so the result is that of the f32
     * cache it would make.  Decode mode reads the bytes in its kernels;
     * other shapes dequantize the cache first (max_bytes counts it). */
    int kv_fp8;
    float k_scale, v_scale;
    /* V given already dequantized at v_scale 2^-v_exp (0 .. 126): each
     * output row is multiplied by 2^v_exp after its division by the sum of
     * its weights (exact), so that large values summed over many keys stay
     * inside f32 before that division (kv_attn_fp8_v_exp chooses it; an
     * FP8 cache in kv_cache sets its own).  0: nothing. */
    int v_exp;
    enum kv_dtype out_dtype;              /* KV_NDTYPES = same as q */
    int n_threads;                        /* 0 = all cores */
    size_t max_bytes;                     /* 0 = no limit */
    /* tuning and testing: tile sizes (0 = default) and the plain scalar
     * path instead of BLAS and vector code */
    int64_t tile_q, tile_k;
    int scalar;
    int generic;        /* BLAS tiles only: no AVX-512 decode kernels */
    /* Q, K and V all bf16: the route of the bf16 dot-product tiles (0 =
     * the CPU's, kv_bf16_route_best(); -1 = none, widen to f32 as for the
     * other dtypes; else an enum kv_bf16_route -- the instruction models
     * are for tests), and p_f32 = keep P in f32 for P V instead of
     * rounding it to bf16 (as FlashAttention does) */
    int bf16_route;
    int p_f32;
    /* called now and then from one worker at a time with the work items
     * done so far (NULL = none) */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
};

/* Validate r completely, then compute.  out (and lse when not NULL) must be
 * zeroed or released; on success out holds the output in r->out_dtype and
 * lse the f32 LSE.  On failure both are untouched and e says why, naming
 * the shapes that disagree. */
int kv_attn_run(const struct kv_attn_req *r, struct kv_tensor *out,
                struct kv_tensor *lse, struct kv_err *e);

/* Work counters of the last kv_attn_run in this process (for -v). */
struct kv_attn_stats {
    uint64_t tiles_done, tiles_skipped;
    uint64_t items;
    int bf16_route;     /* enum kv_bf16_route of the tiles, 0 = none */
    int decode;         /* the decode kernels ran (few queries a request) */
    int fp8_kernels;    /* they read an FP8 cache's bytes (no f32 copy) */
    uint64_t fused_items;   /* items the fused kernels took (kvattn(1)) */
};
void kv_attn_last_stats(struct kv_attn_stats *s);

/* The v_exp of kv_attn_req for V dequantized from FP8 format fmt (enum
 * kv_fp8) with v_scale, n_keys or fewer keys a row: the least k >= 0 with
 * max(fmt) v_scale 2^-k n_keys <= 2^126, so that a row's sum of its
 * weights (each at most 1) times the values stays within half of f32's
 * range.
 * Dividing the scale by 2^k is exact: the values are those of v_scale
 * over 2^k, and the output times 2^k is that of v_scale, bit for bit,
 * while neither overflows nor falls below 2^-126. */
int kv_attn_fp8_v_exp(int fmt, float v_scale, size_t n_keys);

/* LSE merge of n partial results over disjoint key sets (spec C.4):
 *   lse = log sum_i exp(lse_i),  out = sum_i exp(lse_i - lse) out_i.
 * outs[i] all have one shape [..., Dv] and lses[i] that shape without the
 * last axis (f32, f16, bf16 or f64).  An LSE of +inf is taken as -inf (as
 * vLLM's merge_attn_states does); a row whose parts are all -inf gives 0
 * and -inf.  out gets out_dtype (KV_NDTYPES = that of outs[0]), lse f32
 * (lse may be NULL). */
int kv_attn_merge(const struct kv_tensor *outs, const struct kv_tensor *lses,
                  size_t n, enum kv_dtype out_dtype, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e);

/* The same with sinks [Hq] (f32, f16 or bf16; the LSEs [B, Hq, Lq] or
 * [Tq, Hq], the head on axis 1), counted once in the merged sum:
 * parts_have_sinks = 0 -- the parts were computed without the sink, it is
 * added: lse = log(sum_i exp(lse_i) + exp(sink)); = 1 -- every part
 * included it, n - 1 copies are taken away: lse = log(sum_i exp(lse_i) -
 * (n - 1) exp(sink)) (each exp(lse_i) >= exp(sink), so the difference is
 * at least exp(sink) and the rounding of the parts is amplified n times
 * at most).  The outputs are weighted by exp(lse_i - lse) either way. */
int kv_attn_merge_sinks(const struct kv_tensor *outs, const struct kv_tensor *lses,
                        size_t n, const struct kv_tensor *sinks, int parts_have_sinks,
                        enum kv_dtype out_dtype, struct kv_tensor *out,
                        struct kv_tensor *lse, struct kv_err *e);

/* exp of n floats in place, vector code where the CPU has it; agrees with
 * expf within 2 ulp (tests/unit/attn_exp.c).  Exposed for tests. */
void kv_attn_exp_n(float *x, size_t n);

/* The softcap C tanh(x / C) of n floats in place, the vector code where
 * the CPU has it (kv_attn_limit_isa caps it; scalar = 1: the plain tanhf
 * reference).  Exposed for tests. */
void kv_attn_softcap_n(float *x, size_t n, float C, int scalar);

/* The standard ALiBi slopes of n_heads heads (see Variants above) into
 * slopes[0..n_heads). */
void kv_attn_alibi_slopes(int64_t n_heads, float *slopes);

/* Tests: use at most vector level `level` (0 scalar, 1 AVX2+FMA, 2 AVX-512;
 * negative = no limit) from now on, so that one machine exercises the
 * paths of older CPUs.  Returns the level in effect. */
int kv_attn_limit_isa(int level);

#endif
