/* xattn_row.c - the row kernels of XAttention's fused softmax: a row of
 * strided dot products becomes its block sums (the scores, their maximum,
 * exp and the sums of each block's columns), on AVX2, on AVX-512 for
 * blocks of 16 columns, or by the scalar reference the vector paths are
 * tested against (tests/unit/xattn.c). */
#include <math.h>
#include <string.h>
#include "attn/xattn_int.h"
#include "core/isa.h"

/* Row kernels of the fused softmax.  A row's n dot products become
 * scores by three f32 divisions, by sqrt(D), S and norm, exactly as the
 * original rounds them (a power-of-two divisor S norm is applied as the
 * exact multiplication by its reciprocal); the block sums add exp(score -
 * max) over each block's columns.  The scalar versions are the reference:
 * scale_max_ref stores the scores and returns their maximum, exp_shift_ref
 * takes exp in place, and the blocks are summed in order.  The AVX2 path
 * takes the maximum of the dot products and scales only that (the
 * divisions round monotonically, so it is the scores' maximum, bit for
 * bit), then scales, exponentiates and sums in one pass without storing:
 * exp within 2 ulp of expf, the sums in another order, both inside the
 * bound of kvxattn(1) (tests/unit/xattn.c). */
static float scale_max_ref(const struct scaler *c, float *x, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        float v = c->use_scale ? x[j] * c->scale
                               : x[j] / c->div_d / c->div_s / c->div_n;
        x[j] = v;
        if (v > mx)
            mx = v;
    }
    return mx;
}

static void exp_shift_ref(float *x, int64_t n, float mx)
{
    for (int64_t j = 0; j < n; j++)
        x[j] = expf(x[j] - mx);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1

/* One dot product as a score, as the AVX2 path rounds it (scale8_avx2). */
static float scale_one(const struct scaler *c, float x)
{
    if (c->use_scale)
        return x * c->scale;
    if (c->sn_pow2)
        return x / c->div_d * c->mul_sn;
    return x / c->div_d / c->div_s / c->div_n;
}

/* The maximum of n dot products, or NaN when one of them is NaN. */
__attribute__((target("avx2,fma")))
static float raw_max_avx2(const float *x, int64_t n)
{
    __m256 vm = _mm256_set1_ps(-INFINITY), un = _mm256_setzero_ps();
    __m128 h;
    int64_t j = 0;
    float mx;
    int nan;

    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        un = _mm256_or_ps(un, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        vm = _mm256_max_ps(v, vm);          /* a NaN v gives vm */
    }
    h = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    mx = _mm_cvtss_f32(h);
    nan = _mm256_movemask_ps(un) != 0;
    for (; j < n; j++) {
        nan |= isnan(x[j]);
        mx = x[j] > mx ? x[j] : mx;
    }
    return nan ? NAN : mx;
}

/* Eight dot products as scores, as scale_one rounds them: mode 0 scales
 * by c->scale, 1 divides by sqrt(D) and multiplies by 1/(S norm), 2
 * divides three times (the mode a constant where it is inlined). */
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 scale8_avx2(const struct scaler *c, int mode, __m256 v)
{
    if (mode == 0)
        return _mm256_mul_ps(v, _mm256_set1_ps(c->scale));
    v = _mm256_div_ps(v, _mm256_set1_ps(c->div_d));
    if (mode == 1)
        return _mm256_mul_ps(v, _mm256_set1_ps(c->mul_sn));
    v = _mm256_div_ps(v, _mm256_set1_ps(c->div_s));
    return _mm256_div_ps(v, _mm256_set1_ps(c->div_n));
}

/* exp(v) for v <= 0: v = n ln2 + r, |r| <= ln2/2, e^r by a degree-7
 * polynomial (Taylor-like minimax coefficients), times 2^n. */
__attribute__((target("avx2,fma")))
static inline __m256 exp8_avx2(__m256 v)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2hi = _mm256_set1_ps(0.693359375f);
    const __m256 ln2lo = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 p0 = _mm256_set1_ps(1.9875691500e-4f);
    const __m256 p1 = _mm256_set1_ps(1.3981999507e-3f);
    const __m256 p2 = _mm256_set1_ps(8.3334519073e-3f);
    const __m256 p3 = _mm256_set1_ps(4.1665795894e-2f);
    const __m256 p4 = _mm256_set1_ps(1.6666665459e-1f);
    const __m256 p5 = _mm256_set1_ps(5.0000001201e-1f);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 fx, r, y, r2;
    __m256i e;

    v = _mm256_max_ps(v, lo);
    fx = _mm256_round_ps(_mm256_mul_ps(v, log2e),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(fx, ln2hi, v);
    r = _mm256_fnmadd_ps(fx, ln2lo, r);
    r2 = _mm256_mul_ps(r, r);
    y = _mm256_fmadd_ps(p0, r, p1);
    y = _mm256_fmadd_ps(y, r, p2);
    y = _mm256_fmadd_ps(y, r, p3);
    y = _mm256_fmadd_ps(y, r, p4);
    y = _mm256_fmadd_ps(y, r, p5);
    y = _mm256_fmadd_ps(y, r2, _mm256_add_ps(r, one));
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx),
                                           _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

__attribute__((target("avx2,fma")))
static void exp_shift_avx2(float *x, int64_t n, float mx)
{
    const __m256 vmx = _mm256_set1_ps(mx);
    int64_t j = 0;

    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(x + j, exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmx)));
    exp_shift_ref(x + j, n - j, mx);
}

/* The block sums of one row without storing the probabilities: for the
 * blocks of r columns that meet [a, b) (x holds the dot products of
 * [a, b)), part[kb] = the sum of exp(score - mx) over the block's
 * columns there.  Each block is summed as eight lane sums (a last partial
 * group of a block through a masked load, its other lanes 0), and eight
 * blocks' lane sums are added up together, pairs of lanes, then pairs of
 * pairs, then the two halves. */
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 block8_avx2(const struct scaler *c, int mode, const float *x,
                                 int64_t j, int64_t j1, __m256 vmx)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 acc = _mm256_setzero_ps();

    for (; j + 8 <= j1; j += 8)
        acc = _mm256_add_ps(acc, exp8_avx2(_mm256_sub_ps(
                  scale8_avx2(c, mode, _mm256_loadu_ps(x + j)), vmx)));
    if (j < j1) {
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(j1 - j)), lane);
        __m256 v = exp8_avx2(_mm256_sub_ps(
            scale8_avx2(c, mode, _mm256_maskload_ps(x + j, m)), vmx));
        acc = _mm256_add_ps(acc, _mm256_and_ps(v, _mm256_castsi256_ps(m)));
    }
    return acc;
}

/* The lane sums of v[0..8) (pairs of lanes, pairs of pairs, the two
 * halves), the first nb of them to part as doubles. */
__attribute__((target("avx2,fma"), always_inline))
static inline void sums8_avx2(const __m256 *v, int nb, double *part)
{
    __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                               _mm256_permute2f128_ps(u0, u1, 0x31));
    double out[8];
    _mm256_storeu_pd(out, _mm256_cvtps_pd(_mm256_castps256_ps128(sum)));
    _mm256_storeu_pd(out + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(sum, 1)));
    memcpy(part, out, (size_t)nb * sizeof(double));
}

__attribute__((target("avx2,fma"), always_inline))
static inline void exp_sums_mode(const struct scaler *c, int mode, const float *x,
                                 int64_t a, int64_t b, int64_t r, float mx, double *part)
{
    const __m256 vmx = _mm256_set1_ps(mx);
    const int64_t kend = cdiv(b, r);

    for (int64_t kb = a / r; kb < kend; kb += 8) {
        __m256 v[8];
        int nb = (int)min64(8, kend - kb);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++)
            v[t] = t < nb ? block8_avx2(c, mode, x - a, max64((kb + t) * r, a),
                                        min64((kb + t + 1) * r, b), vmx)
                          : _mm256_setzero_ps();
        sums8_avx2(v, nb, part + kb);
    }
}

__attribute__((target("avx2,fma")))
static void exp_sums_avx2(const struct scaler *c, const float *x, int64_t a, int64_t b,
                          int64_t r, float mx, double *part)
{
    if (c->use_scale)
        exp_sums_mode(c, 0, x, a, b, r, mx, part);
    else if (c->sn_pow2)
        exp_sums_mode(c, 1, x, a, b, r, mx, part);
    else
        exp_sums_mode(c, 2, x, a, b, r, mx, part);
}

/* The same on AVX-512 for blocks of 16 columns (r = 16, the default
 * block and stride), a block one vector: exp and the scores as above,
 * sixteen lanes at a time, a block's two halves added, then eight blocks'
 * lanes at once as above. */
#define X512 __attribute__((target("avx2,fma,avx512f,avx512dq"), always_inline))
X512 static inline __m512 exp16_avx512(__m512 v)
{
    const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
    __m512 fx, r, y, r2;

    v = _mm512_max_ps(v, _mm512_set1_ps(-87.33654f));
    fx = _mm512_roundscale_ps(_mm512_mul_ps(v, log2e),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), v);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
    r2 = _mm512_mul_ps(r, r);
    y = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_mul_ps(y, _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23)));
}

X512 static inline __m512 scale16_avx512(const struct scaler *c, int mode, __m512 v)
{
    if (mode == 0)
        return _mm512_mul_ps(v, _mm512_set1_ps(c->scale));
    v = _mm512_div_ps(v, _mm512_set1_ps(c->div_d));
    if (mode == 1)
        return _mm512_mul_ps(v, _mm512_set1_ps(c->mul_sn));
    v = _mm512_div_ps(v, _mm512_set1_ps(c->div_s));
    return _mm512_div_ps(v, _mm512_set1_ps(c->div_n));
}

X512 static inline void exp_sums16_mode(const struct scaler *c, int mode, const float *x,
                                        int64_t a, int64_t b, float mx, double *part)
{
    const __m512 vmx = _mm512_set1_ps(mx);
    const int64_t kend = cdiv(b, 16);

    for (int64_t kb = a / 16; kb < kend; kb += 8) {
        __m256 h[8];
        int nb = (int)min64(8, kend - kb);
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            int64_t j = max64((kb + t) * 16, a), n = min64((kb + t + 1) * 16, b) - j;
            __mmask16 m = (__mmask16)(t >= nb ? 0 : n >= 16 ? 0xffffu : (1u << n) - 1);
            __m512 v = _mm512_maskz_mov_ps(m, exp16_avx512(_mm512_sub_ps(
                scale16_avx512(c, mode, _mm512_maskz_loadu_ps(m, x + j - a)), vmx)));
            h[t] = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
        }
        sums8_avx2(h, nb, part + kb);
    }
}
#undef X512

__attribute__((target("avx2,fma,avx512f,avx512dq")))
static void exp_sums16_avx512(const struct scaler *c, const float *x, int64_t a,
                              int64_t b, float mx, double *part)
{
    if (c->use_scale)
        exp_sums16_mode(c, 0, x, a, b, mx, part);
    else if (c->sn_pow2)
        exp_sums16_mode(c, 1, x, a, b, mx, part);
    else
        exp_sums16_mode(c, 2, x, a, b, mx, part);
}
#endif

static int force_scalar = 0;

void kv_xattn_force_scalar(int on)
{
    force_scalar = on;
}

#ifdef HAVE_AVX2_PATH
static int use_avx2(void)
{
    return kv_isa_has(KV_ISA_AVX2) && !force_scalar;
}
#endif

void kv_xattn_exp_shift(float *x, int64_t n, float mx)
{
#ifdef HAVE_AVX2_PATH
    if (use_avx2()) {
        exp_shift_avx2(x, n, mx);
        return;
    }
#endif
    exp_shift_ref(x, n, mx);
}

/* The block sums of one row of dot products x (columns [a, b), blocks of
 * r): on the AVX2 path in one pass, else by the scalar reference (scores
 * and exp in place, each block summed in order).  Returns 0 when a score
 * is not finite (its maximum is not, or a NaN), else 1. */
int xattn_exp_sums(const struct scaler *c, float *x, int64_t a, int64_t b, int64_t r,
                   double *part)
{
    float mx;
    int ok = 1;
#ifdef HAVE_AVX2_PATH
    if (use_avx2()) {
        mx = scale_one(c, raw_max_avx2(x, b - a));
        if (!isfinite(mx))
            return 0;
        if (r == 16 && kv_isa_has(KV_ISA_AVX512))
            exp_sums16_avx512(c, x, a, b, mx, part);
        else
            exp_sums_avx2(c, x, a, b, r, mx, part);
        return 1;
    }
#endif
    mx = scale_max_ref(c, x, b - a);
    if (!isfinite(mx))
        return 0;
    exp_shift_ref(x, b - a, mx);
    for (int64_t kb = a / r; kb * r < b; kb++) {
        int64_t j1 = min64((kb + 1) * r, b);
        float s = 0.0f;
        for (int64_t j = max64(kb * r, a); j < j1; j++)
            s += x[j - a];
        ok &= !isnan(s);            /* a NaN score among finite ones */
        part[kb] = s;
    }
    return ok;
}
