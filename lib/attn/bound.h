/* bound.h - the error bounds kvtools promises for its floating-point routes.
 *
 * Every bound is a worst-case forward-error bound against the exact result
 * computed in real (float64) arithmetic from the same inputs, derived in
 * kvattn(1) and kvxattn(1), section ACCURACY, from the algorithm alone: it
 * holds for every summation order, so for every BLAS kernel, ISA level
 * (KVTOOLS_ISA), thread count and tiling.  u = 2^-24 is the unit roundoff
 * of f32.  First-order terms are kept and the total is raised by 1% to
 * cover the higher-order ones (valid while n*u < 0.01).
 *
 * Symbols: n keys in a row (an upper bound is fine), d the head dim, A a
 * bound on every |score| term, A >= |scale| * sum_i |q_i k_i| + |mask|
 * (Cauchy-Schwarz: |scale| * max|q|_2 * max|k|_2 + max|mask| will do), V a
 * bound on |v|.
 */
#ifndef KV_ATTN_BOUND_H
#define KV_ATTN_BOUND_H

#include <stdint.h>
#include "core/tensor.h"

/* The relative error of exp() in the softmax, in units of u (every path:
 * libm's expf and the vector polynomials; tests/unit/bound.c sweeps it). */
#define KV_BOUND_EXP_U 8.0

#define KV_BOUND_U (1.0 / 16777216.0)

/* Attention output: |o - exact| <= this, absolute, per element.  out_dtype
 * f16/bf16 adds the final rounding of |o| <= V. */
double kv_bound_attn_out(int64_t n, int64_t d, double A, double V,
                         enum kv_dtype out_dtype);

/* The same for the bf16 dot-product tiles (attn/bf16.h), Q, K and V bf16:
 * odd = 1 for a route whose adds round to odd (BFDOT: each add errs by up
 * to 2u, so the dot-product terms double), p_bf16 = 1 when P is rounded to
 * bf16 before P V (adds 2^-8 V).  X = |scale| * (max|q_i|, |k_i| + 1)
 * covers the subnormals the instructions read and write as zero: every
 * score may lose |scale| * d * 2^-126 * (max element + 1), every output
 * sum (n + 1) * 2^-126 * (V + 1). */
double kv_bound_attn_out_bf16(int64_t n, int64_t d, double A, double V, double X,
                              enum kv_dtype out_dtype, int odd, int p_bf16);
double kv_bound_attn_lse_bf16(int64_t n, int64_t d, double A, double lse_abs, double X,
                              int odd, int base2);

/* Its log-sum-exp (natural base; base2 adds the conversion). */
double kv_bound_attn_lse(int64_t n, int64_t d, double A, double lse_abs,
                         int base2);

/* The variants of kvattn run (attn.h): softcap C (0 = none), bias_abs a
 * bound on every |ALiBi bias| (max |slope| * max(Lq, Lk) will do; 0 =
 * none), has_sink and sink_abs a bound on every |sink logit|.  The _var
 * bounds with v = NULL are the plain ones. */
struct kv_bound_variants {
    double softcap;
    double bias_abs;
    int has_sink;
    double sink_abs;
};
double kv_bound_attn_out_var(int64_t n, int64_t d, double A, double V,
                             enum kv_dtype out_dtype, const struct kv_bound_variants *v);
double kv_bound_attn_lse_var(int64_t n, int64_t d, double A, double lse_abs, int base2,
                             const struct kv_bound_variants *v);
double kv_bound_attn_out_bf16_var(int64_t n, int64_t d, double A, double V, double X,
                                  enum kv_dtype out_dtype, int odd, int p_bf16,
                                  const struct kv_bound_variants *v);
double kv_bound_attn_lse_bf16_var(int64_t n, int64_t d, double A, double lse_abs, double X,
                                  int odd, int base2, const struct kv_bound_variants *v);
/* A bound on |LSE| for the LSE bounds: the largest score or sink plus
 * log of the terms. */
double kv_bound_variants_lse_abs(int64_t n, double A, const struct kv_bound_variants *v);

/* LSE merge of n_parts exact parts: output and LSE (add the parts' own
 * bounds: the output's, plus 2 * Omax times their LSE bound). */
double kv_bound_merge_out(int64_t n_parts, double o_abs);
double kv_bound_merge_lse(int64_t n_parts, double lse_abs);

/* XAttention: relative bound on each block sum (and on the row total) of
 * the estimate.  stride S, head dim d, A bounds |strided score| (scale
 * included), m strided keys in the row, per = (block/S)^2 terms a block. */
double kv_bound_xattn_sum(int64_t stride, int64_t d, double A, int64_t m,
                          int64_t per);

/* A for kvxattn estimate: the strided score of reshaped rows of S tokens
 * divided by sqrt(D), S and norm is at most max|q|_2 max|k|_2 /
 * (sqrt(D) norm) (Cauchy-Schwarz over the S token pairs). */
double kv_bound_xattn_A(const struct kv_tensor *q, const struct kv_tensor *k,
                        double norm);

/* Recall (kept attention mass, in [0, 1]): absolute bound. */
double kv_bound_recall(int64_t n, int64_t d, double A);

/* A and V from tensors whose last dimension is the head dim: |scale| *
 * max row 2-norm of q * that of k, and max |v|.  mask_abs is added to A. */
void kv_bound_scan(const struct kv_tensor *q, const struct kv_tensor *k,
                   const struct kv_tensor *v, double scale, double mask_abs,
                   double *A, double *V);

/* X of the bf16 bounds above: |scale| * (max |q_i|, |k_i| + 1) over every
 * element of q and k. */
double kv_bound_scan_x(const struct kv_tensor *q, const struct kv_tensor *k, double scale);

#endif
