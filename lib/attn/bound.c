/* bound.c - the documented error bounds (see bound.h and kvattn(1),
 * ACCURACY, where each term is derived). */
#include <math.h>
#include "attn/bound.h"

#define U KV_BOUND_U
#define CE KV_BOUND_EXP_U
#define SAFETY 1.01

/* Per-weight relative error of a softmax weight p_j = exp(s_j - m) with
 * tiles rescaled T <= n times: the score error 2*gamma_{d+1}*A of s_j and
 * m, the pre-scaling and mask roundings (2A), the subtraction (2A), exp
 * (CE), and T rescalings by an exp and a multiply (n*(CE+2)). */
static double weight_err(int64_t n, int64_t d, double A)
{
    return (2.0 * (double)d + 6.0) * A + CE + 1.0 + (double)n * (CE + 2.0);
}

/* The same with the variants (kvattn(1) ACCURACY, Variants), for a dot
 * product that errs by k gamma_{d+1} A (k = 1 in f32, 2 for a
 * round-to-odd bf16 route).  The dot products' error reaches the weights
 * unchanged: C tanh(x / C) has slope at most 1, a bias adds nothing to it.
 * On top, each score (s_j and the maximum, hence twice) carries its
 * variants' own roundings X: softcap 2A (x = s * f32(1/C): two roundings
 * of |s| <= A, times C tanh' <= 1) + 8C (tanh, 8u absolute) + C (the
 * product C tanh); ALiBi 2|b| (the product slope * distance, and a
 * margin).  The roundings after the variants (mask add, the subtraction
 * of the maximum) see scores up to A + |b|, and the maximum may be the
 * sink: As = max(A + |b|, |sink|).  A sink is one more term of the sum
 * and one more rescaling: n + 1. */
static double weight_err_var(int64_t n, int64_t d, double A, int k,
                             const struct kv_bound_variants *v)
{
    double X = 0.0, As = A, nn = (double)n;
    if (v) {
        if (v->softcap > 0.0)
            X += 2.0 * A + 9.0 * v->softcap;
        X += 2.0 * v->bias_abs;
        As = fmax(A + v->bias_abs, v->has_sink ? v->sink_abs : 0.0);
        nn += v->has_sink ? 1.0 : 0.0;
    }
    return 2.0 * k * ((double)d + 1.0) * A + 2.0 * X + 4.0 * As + CE + 1.0 + nn * (CE + 2.0);
}

static double keys_var(int64_t n, const struct kv_bound_variants *v)
{
    return (double)n + (v && v->has_sink ? 1.0 : 0.0);
}

double kv_bound_attn_out_var(int64_t n, int64_t d, double A, double V,
                             enum kv_dtype out_dtype, const struct kv_bound_variants *v)
{
    double b = (2.0 * weight_err_var(n, d, A, 1, v) + 4.0 * keys_var(n, v) + 1.0) * U * V;
    b *= SAFETY;
    if (out_dtype == KV_F16)
        b += ldexp(V, -11);
    else if (out_dtype == KV_BF16)
        b += ldexp(V, -8);
    return b;
}

double kv_bound_attn_lse_var(int64_t n, int64_t d, double A, double lse_abs, int base2,
                             const struct kv_bound_variants *v)
{
    double nn = keys_var(n, v);
    double b = (weight_err_var(n, d, A, 1, v) + 2.0 * nn + 2.0 * log(nn + 1.0) + 2.0 +
                lse_abs) * U;
    b *= SAFETY;
    if (base2)
        b = b * M_LOG2E + U * lse_abs * M_LOG2E;
    return b;
}

double kv_bound_variants_lse_abs(int64_t n, double A, const struct kv_bound_variants *v)
{
    double As = A + (v ? v->bias_abs : 0.0);
    if (v && v->has_sink)
        As = fmax(As, v->sink_abs);
    return As + log(keys_var(n, v));
}

double kv_bound_attn_out(int64_t n, int64_t d, double A, double V,
                         enum kv_dtype out_dtype)
{
    /* weights: sum_j w_j eps_j (v_j - o) <= 2 max|eps| V; the sums of
     * n positive weights and of n weighted values: 2 gamma_{2n}; the
     * division: u. */
    double b = (2.0 * weight_err(n, d, A) + 4.0 * (double)n + 1.0) * U * V;
    b *= SAFETY;
    if (out_dtype == KV_F16)
        b += ldexp(V, -11);
    else if (out_dtype == KV_BF16)
        b += ldexp(V, -8);
    return b;
}

/* bf16 tiles: the score's dot product errs by k*gamma_{d+1}*A (k = 2 for
 * round-to-odd), plus the flushed subnormals; the rest as weight_err. */
static double weight_err_k(int64_t n, int64_t d, double A, int k)
{
    return (2.0 * k * ((double)d + 1.0) + 4.0) * A + CE + 1.0 + (double)n * (CE + 2.0);
}

static double ftz_score(int64_t d, double X)
{
    return ldexp((double)d * X, -126);
}

double kv_bound_attn_out_bf16(int64_t n, int64_t d, double A, double V, double X,
                              enum kv_dtype out_dtype, int odd, int p_bf16)
{
    return kv_bound_attn_out_bf16_var(n, d, A, V, X, out_dtype, odd, p_bf16, NULL);
}

double kv_bound_attn_out_bf16_var(int64_t n, int64_t d, double A, double V, double X,
                                  enum kv_dtype out_dtype, int odd, int p_bf16,
                                  const struct kv_bound_variants *v)
{
    int k = odd ? 2 : 1;
    /* weights as for f32 with weight_err_k; the weighted values' sum
     * (n/2 dot-product adds, in pairs) k * gamma_{2n}, the weights' sum
     * gamma_{2n} (f32 softmax); the division u */
    double w = v ? weight_err_var(n, d, A, k, v) : weight_err_k(n, d, A, k);
    double b = (2.0 * w + 2.0 * keys_var(n, v) * (1.0 + k) + 1.0) * U * V;
    b *= SAFETY;
    /* flushed subnormals: each score (and the max) moves by ftz_score,
     * each weight by twice that; the output sums by (n + 1) 2^-126 */
    b += 4.0 * ftz_score(d, X) * V + ldexp(((double)n + 1.0) * (V + 1.0), -126);
    if (p_bf16)
        b += ldexp(V, -8);
    if (out_dtype == KV_F16)
        b += ldexp(V, -11);
    else if (out_dtype == KV_BF16)
        b += ldexp(V, -8);
    return b;
}

double kv_bound_attn_lse_bf16(int64_t n, int64_t d, double A, double lse_abs, double X,
                              int odd, int base2)
{
    return kv_bound_attn_lse_bf16_var(n, d, A, lse_abs, X, odd, base2, NULL);
}

double kv_bound_attn_lse_bf16_var(int64_t n, int64_t d, double A, double lse_abs, double X,
                                  int odd, int base2, const struct kv_bound_variants *v)
{
    double nn = keys_var(n, v);
    double w = v ? weight_err_var(n, d, A, odd ? 2 : 1, v) : weight_err_k(n, d, A, odd ? 2 : 1);
    double b = (w + 2.0 * nn + 2.0 * log(nn + 1.0) + 2.0 + lse_abs) * U;
    b = b * SAFETY + 2.0 * ftz_score(d, X);
    if (base2)
        b = b * M_LOG2E + U * lse_abs * M_LOG2E;
    return b;
}

double kv_bound_attn_lse(int64_t n, int64_t d, double A, double lse_abs,
                         int base2)
{
    /* max + log(sum): the max's and the weights' errors, the sum
     * (gamma_{2n}), logf (2u * ln n + 2u), the final add (u |lse|). */
    double b = (weight_err(n, d, A) + 2.0 * (double)n + 2.0 * log((double)n + 1.0) +
                2.0 + lse_abs) * U;
    b *= SAFETY;
    if (base2)
        b = b * M_LOG2E + U * lse_abs * M_LOG2E;
    return b;
}

double kv_bound_merge_out(int64_t n_parts, double o_abs)
{
    /* weights exp(lse_p - m): CE + 1 each, plus u |lse_p - m| w_p <= u/e
     * summed over the parts; the sums: 2 gamma_P; the division. */
    return SAFETY * (2.0 * (CE + 1.0) + 4.0 * (double)n_parts + 1.0) * U * o_abs;
}

double kv_bound_merge_lse(int64_t n_parts, double lse_abs)
{
    return SAFETY * (CE + 2.0 * (double)n_parts + 3.0 + lse_abs) * U;
}

double kv_bound_xattn_sum(int64_t stride, int64_t d, double A, int64_t m,
                          int64_t per)
{
    /* a strided score is a dot product of length S*d: the same weight
     * error with d -> S*d and no tile rescaling (the row is one softmax);
     * each probability 2x that; the row sum m terms, a block sum per
     * terms, one division. */
    double w = (2.0 * (double)(stride * d) + 10.0) * A + CE + 1.0;
    return SAFETY * (2.0 * w + (double)m + (double)per + 1.0) * U;
}

double kv_bound_recall(int64_t n, int64_t d, double A)
{
    return SAFETY * (2.0 * weight_err(n, d, A) + 4.0 * (double)n + 1.0) * U;
}

/* Largest 2-norm of a row of t's last dimension (0 for NULL). */
static double max_row_norm(const struct kv_tensor *t)
{
    if (!t || t->ndim < 1)
        return 0.0;
    int64_t D = t->shape[t->ndim - 1];
    size_t n = kv_tensor_numel(t);
    double best = 0.0;
    for (size_t r = 0; D > 0 && r < n; r += (size_t)D) {
        double s = 0.0;
        for (int64_t i = 0; i < D; i++) {
            double x = kv_tensor_get_f64(t, r + (size_t)i);
            s += x * x;
        }
        best = fmax(best, s);
    }
    return sqrt(best);
}

void kv_bound_scan(const struct kv_tensor *q, const struct kv_tensor *k,
                   const struct kv_tensor *v, double scale, double mask_abs,
                   double *A, double *V)
{
    *A = fabs(scale) * max_row_norm(q) * max_row_norm(k) * (1.0 + 1e-12) + mask_abs;
    double vm = 0.0;
    size_t n = v ? kv_tensor_numel(v) : 0;
    for (size_t i = 0; i < n; i++)
        vm = fmax(vm, fabs(kv_tensor_get_f64(v, i)));
    *V = vm;
}

double kv_bound_scan_x(const struct kv_tensor *q, const struct kv_tensor *k, double scale)
{
    double x = 0.0;
    for (size_t i = 0; i < kv_tensor_numel(q); i++)
        x = fmax(x, fabs(kv_tensor_get_f64(q, i)));
    for (size_t i = 0; i < kv_tensor_numel(k); i++)
        x = fmax(x, fabs(kv_tensor_get_f64(k, i)));
    return fabs(scale) * (x + 1.0);
}

double kv_bound_xattn_A(const struct kv_tensor *q, const struct kv_tensor *k,
                        double norm)
{
    int64_t D = q->ndim ? q->shape[q->ndim - 1] : 1;
    return max_row_norm(q) * max_row_norm(k) / (sqrt((double)D) * norm) * (1.0 + 1e-12);
}
