/* attn_row.h - the row kernels every path of the attention kernels runs,
 * static inline so that each file's loops keep them inlined: the vector
 * exp, row max and exp-sum (AVX-512, AVX2 or scalar), conversion of
 * operand rows to and from f32, the addresses of query and key/value rows
 * (dense, thd or paged), the block mask, the implicit and explicit masks
 * of a row, the online-softmax update and the normalised output row. */
#ifndef KV_ATTN_ROW_H
#define KV_ATTN_ROW_H
#include <math.h>
#include <string.h>

#include "attn/attn_int.h"
#include "core/half.h"

/* ---- vector exp and row kernels ------------------------------------ */

/* Coefficients of a degree-6 polynomial for exp(r) - 1 - r on
 * |r| <= ln2/2 (the classic single-precision minimax fit). */
#define EXP_C1 1.9875691500e-4f
#define EXP_C2 1.3981999507e-3f
#define EXP_C3 8.3334519073e-3f
#define EXP_C4 4.1665795894e-2f
#define EXP_C5 1.6666665459e-1f
#define EXP_C6 5.0000001201e-1f
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO (-2.12194440e-4f)
#define EXP_MIN (-87.33654f)     /* below: result < FLT_MIN, taken as 0 */
#define EXP_MAX 88.72283f

/* The plain reference: rowmax ignoring NaN, exp(s - m) in place, sum. */
static inline float rowmax_ref(const float *s, int64_t n)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > m)
            m = s[j];
    return m;
}

static inline float exp_sum_ref(float *s, int64_t n, float m)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    return sum;
}

#ifdef ATTN_X86
/* The part of every vector exp here that is the same: for xc already
 * clamped, n = round(xc / ln 2) into *np and the polynomial p with
 * e^xc = p * 2^n (the callers clamp, scale by 2^n and mask). */
__attribute__((target("avx512f"), always_inline))
static inline __m512 exp512_poly(__m512 xc, __m512 *np)
{
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_C1);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_C6));
    __m512 r2 = _mm512_mul_ps(r, r);
    p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    *np = n;
    return p;
}

__attribute__((target("avx2,fma"), always_inline))
static inline __m256 exp256_poly(__m256 xc, __m256 *np)
{
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_HI), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(EXP_C1);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_C6));
    __m256 r2 = _mm256_mul_ps(r, r);
    p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    *np = n;
    return p;
}

__attribute__((target("avx512f"), always_inline))
static inline __m512 exp512(__m512 x)
{
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_LT_OQ);
    __m512 xc = _mm512_min_ps(x, _mm512_set1_ps(EXP_MAX + 1.0f));
    xc = _mm512_max_ps(xc, _mm512_set1_ps(EXP_MIN));
    __m512 n, p = exp512_poly(xc, &n);
    __m512 y = _mm512_scalef_ps(p, n);
    y = _mm512_mask_mov_ps(y, tiny, _mm512_setzero_ps());
    return _mm512_mask_mov_ps(y, nan, x);
}

__attribute__((target("avx512f")))
static inline float rowmax_512(const float *s, int64_t n)
{
    __m512 acc = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        acc = _mm512_max_ps(_mm512_loadu_ps(s + j), acc);
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        acc = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + j), acc);
    }
    return _mm512_reduce_max_ps(acc);
}

__attribute__((target("avx512f")))
static inline float exp_sum_512(float *s, int64_t n, float m)
{
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm));
        _mm512_mask_storeu_ps(s + j, k, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx2,fma")))
static inline __m256 exp256(__m256 x)
{
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_MIN), _CMP_LT_OQ);
    /* past EXP_MAX the product below overflows to +inf, as expf does */
    __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(EXP_MAX + 1.0f));
    xc = _mm256_max_ps(xc, _mm256_set1_ps(EXP_MIN));
    __m256 n, p = exp256_poly(xc, &n);
    /* 2^n for n in [-126, 128]: split in two factors to reach 2^128 */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1);
    __m256i rest = _mm256_sub_epi32(ni, half);
    __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
    __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(rest, _mm256_set1_epi32(127)), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
    y = _mm256_andnot_ps(tiny, y);
    return _mm256_blendv_ps(y, x, nan);
}

__attribute__((target("avx2,fma")))
static inline float rowmax_256(const float *s, int64_t n)
{
    __m256 acc = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        acc = _mm256_max_ps(_mm256_loadu_ps(s + j), acc);
    float t[8], m;
    _mm256_storeu_ps(t, acc);
    m = t[0];
    for (int i = 1; i < 8; i++)
        if (t[i] > m)
            m = t[i];
    for (; j < n; j++)
        if (s[j] > m)
            m = s[j];
    return m;
}

__attribute__((target("avx2,fma")))
static inline float exp_sum_256(float *s, int64_t n, float m)
{
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (j < n) {
        float t[8] = {0};
        int64_t rem = n - j;
        memcpy(t, s + j, (size_t)rem * sizeof(float));
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(t), vm));
        _mm256_storeu_ps(t, e);
        memcpy(s + j, t, (size_t)rem * sizeof(float));
        /* add only the lanes below rem */
        __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
        __m256 live = _mm256_cmp_ps(lane, _mm256_set1_ps((float)rem), _CMP_LT_OQ);
        acc = _mm256_add_ps(acc, _mm256_and_ps(e, live));
    }
    float t[8];
    _mm256_storeu_ps(t, acc);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
#endif

/* Row max and fused exp/row-sum through the best vector path, or the
 * plain references when scalar is set. */
static inline float rowmax(const float *s, int64_t n, int scalar)
{
#ifdef ATTN_X86
    if (!scalar) {
        int l = isa_level();
        if (l == ISA_AVX512)
            return rowmax_512(s, n);
        if (l == ISA_AVX2)
            return rowmax_256(s, n);
    }
#endif
    (void)scalar;
    return rowmax_ref(s, n);
}

static inline float exp_sum(float *s, int64_t n, float m, int scalar)
{
#ifdef ATTN_X86
    if (!scalar) {
        int l = isa_level();
        if (l == ISA_AVX512)
            return exp_sum_512(s, n, m);
        if (l == ISA_AVX2)
            return exp_sum_256(s, n, m);
    }
#endif
    (void)scalar;
    return exp_sum_ref(s, n, m);
}

/* ---- softcap ------------------------------------------------------- */

/* s = C tanh(s / C) in place.  The vector code takes tanh|x| = (1 - t) /
 * (1 + t), t = exp(-2|x|), with the vector exp: every term of it errs by
 * at most 8u absolute (tests/unit/attn_variants.c sweeps it); NaN stays
 * NaN, +-inf gives +-C.  The reference is tanhf. */
static inline void softcap_ref(float *s, int64_t n, float C, float inv)
{
    for (int64_t j = 0; j < n; j++)
        s[j] = C * tanhf(s[j] * inv);
}

#ifdef ATTN_X86
__attribute__((target("avx512f")))
static inline void softcap_512(float *s, int64_t n, float C, float inv)
{
    const __m512 vi = _mm512_set1_ps(inv), vc = _mm512_set1_ps(C), one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 k = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), vi);
        __m512i xs = _mm512_and_si512(_mm512_castps_si512(x), sign);
        __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(x)));
        __m512 t = exp512(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
        __m512 th = _mm512_div_ps(_mm512_sub_ps(one, t), _mm512_add_ps(one, t));
        th = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(th), xs));
        _mm512_mask_storeu_ps(s + j, k, _mm512_mul_ps(th, vc));
    }
}

__attribute__((target("avx2,fma")))
static inline void softcap_256(float *s, int64_t n, float C, float inv)
{
    const __m256 vi = _mm256_set1_ps(inv), vc = _mm256_set1_ps(C), one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int64_t j = 0;
    for (; j < n; j += 8) {
        float t8[8] = {0};
        int64_t m = n - j < 8 ? n - j : 8;
        memcpy(t8, s + j, (size_t)m * sizeof(float));
        __m256 x = _mm256_mul_ps(_mm256_loadu_ps(t8), vi);
        __m256 xs = _mm256_and_ps(x, sign);
        __m256 t = exp256(_mm256_mul_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(-2.0f)));
        __m256 th = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
        _mm256_storeu_ps(t8, _mm256_mul_ps(_mm256_or_ps(th, xs), vc));
        memcpy(s + j, t8, (size_t)m * sizeof(float));
    }
}
#endif

static inline void softcap_row(float *s, int64_t n, float C, float inv, int scalar)
{
#ifdef ATTN_X86
    if (!scalar) {
        int l = isa_level();
        if (l == ISA_AVX512) {
            softcap_512(s, n, C, inv);
            return;
        }
        if (l == ISA_AVX2) {
            softcap_256(s, n, C, inv);
            return;
        }
    }
#endif
    (void)scalar;
    softcap_ref(s, n, C, inv);
}

/* ALiBi: s[t] += slope * (j0 + t - pos), the distance exact in f32
 * (|j - i'| < 2^24, and so are the vector code's sums of it) and one
 * rounding for the product, one for the sum (the vector code fuses the
 * two into one). */
static inline void alibi_ref(float *s, int64_t n, float slope, int64_t j0, int64_t pos)
{
    for (int64_t t = 0; t < n; t++)
        s[t] += slope * (float)(j0 + t - pos);
}

#ifdef ATTN_X86
__attribute__((target("avx512f")))
static inline void alibi_512(float *s, int64_t n, float slope, int64_t j0, int64_t pos)
{
    const __m512 vs = _mm512_set1_ps(slope), step = _mm512_set1_ps(16.0f);
    __m512 d = _mm512_add_ps(_mm512_set1_ps((float)(j0 - pos)),
                             _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    for (int64_t t = 0; t < n; t += 16, d = _mm512_add_ps(d, step)) {
        __mmask16 k = n - t >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - t)) - 1);
        _mm512_mask_storeu_ps(s + t, k, _mm512_fmadd_ps(vs, d, _mm512_maskz_loadu_ps(k, s + t)));
    }
}

__attribute__((target("avx2,fma")))
static inline void alibi_256(float *s, int64_t n, float slope, int64_t j0, int64_t pos)
{
    const __m256 vs = _mm256_set1_ps(slope), step = _mm256_set1_ps(8.0f);
    __m256 d = _mm256_add_ps(_mm256_set1_ps((float)(j0 - pos)),
                             _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t t = 0;
    for (; t + 8 <= n; t += 8, d = _mm256_add_ps(d, step))
        _mm256_storeu_ps(s + t, _mm256_fmadd_ps(vs, d, _mm256_loadu_ps(s + t)));
    alibi_ref(s + t, n - t, slope, j0 + t, pos);
}
#endif

static inline void alibi_row(float *s, int64_t n, float slope, int64_t j0, int64_t pos,
                             int scalar)
{
#ifdef ATTN_X86
    /* the vector code counts the distance in f32: exact below 2^24 */
    if (!scalar && j0 - pos > -(1 << 23) && j0 + n - pos < (1 << 23)) {
        int l = isa_level();
        if (l == ISA_AVX512) {
            alibi_512(s, n, slope, j0, pos);
            return;
        }
        if (l == ISA_AVX2) {
            alibi_256(s, n, slope, j0, pos);
            return;
        }
    }
#endif
    (void)scalar;
    alibi_ref(s, n, slope, j0, pos);
}

/* Convert n elements at src (dtype t) to f32. */
static inline void load_f32(float *dst, const void *src, enum kv_dtype t, int64_t n)
{
    switch (t) {
    case KV_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case KV_F16:
        kv_f16_to_f32_n(src, dst, (size_t)n);
        break;
    case KV_BF16:
        kv_bf16_to_f32_n(src, dst, (size_t)n);
        break;
    default: {
        const double *d = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = (float)d[i];
        break;
    }
    }
}

static inline void store_f32(void *dst, const float *src, enum kv_dtype t, int64_t n)
{
    switch (t) {
    case KV_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case KV_F16:
        kv_f32_to_f16_n(src, dst, (size_t)n);
        break;
    case KV_BF16:
        kv_f32_to_bf16_n(src, dst, (size_t)n);
        break;
    default: {
        double *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = src[i];
        break;
    }
    }
}

static inline const char *q_row(const struct plan *p, int64_t b, int64_t h, int64_t i)
{
    const struct operand *o = &p->q;
    return o->base + (size_t)(b * o->sb + h * o->sh + (p->q_start[b] + i) * o->ss) * o->esize;
}

/* Address of key/value row j of request b, kv head h. */
static inline const char *kv_row(const struct plan *p, const struct operand *o,
                          int64_t b, int64_t h, int64_t j)
{
    if (p->paged) {
        int64_t blk = p->bt[b * p->bt_cols + j / p->page];
        return o->base + (size_t)(blk * p->page_stride + (j % p->page) * o->ss
                                  + h * o->sh) * o->esize;
    }
    return o->base + (size_t)(b * o->sb + h * o->sh + (p->kv_start[b] + j) * o->ss) * o->esize;
}

/* Block-mask value for (b, h, qb, kb): nonzero = keep. */
static inline int bm_keep(const struct plan *p, int64_t b, int64_t h, int64_t qb, int64_t kb)
{
    size_t idx = (size_t)(b * p->bsb + h * p->bsh + qb * p->bsq + kb * p->bsk);
    return kv_tensor_get_i64(p->bm, idx) != 0;
}

static inline int any_keep(const struct plan *p, int64_t b, int64_t h0, int64_t hs, int64_t qb,
                    int64_t kb)
{
    for (int64_t hh = 0; hh < hs; hh++)
        if (bm_keep(p, b, h0 + hh, qb, kb))
            return 1;
    return 0;
}

/* Apply the explicit mask to scores s[0..n) of one row; mrow points at the
 * mask element of the first column, sj is the column stride. */
static inline void apply_mask(const struct plan *p, float *s, int64_t n, const char *mrow)
{
    int64_t sj = p->msj;
    size_t es = p->msize;
    if (p->mfloat) {
        for (int64_t j = 0; j < n; j++) {
            const char *e = mrow + (size_t)(j * sj) * es;
            float v;
            switch (p->mdtype) {
            case KV_F32: memcpy(&v, e, 4); break;
            case KV_F16: { uint16_t h; memcpy(&h, e, 2); v = kv_f16_to_f32(h); break; }
            case KV_BF16: { uint16_t h; memcpy(&h, e, 2); v = kv_bf16_to_f32(h); break; }
            default: { double d; memcpy(&d, e, 8); v = (float)d; break; }
            }
            if (!p->mbinary)
                s[j] += v;
            else if ((v != 0.0f) != p->mkeep)   /* NaN counts as nonzero */
                s[j] = -INFINITY;
        }
        return;
    }
    int keep = p->mkeep;
    for (int64_t j = 0; j < n; j++) {
        const unsigned char *e = (const unsigned char *)mrow + (size_t)(j * sj) * es;
        int nz = 0;
        for (size_t k = 0; k < es; k++)
            nz |= e[k];
        if ((nz != 0) != keep)
            s[j] = -INFINITY;
    }
}

static inline void fill_ninf(float *s, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        s[j] = -INFINITY;
}

#ifdef ATTN_X86
/* Rows of one kv head are Hkv*D elements apart in a paged cache: too far
 * apart for the hardware prefetcher, so ask for them SMALL_PF rows ahead. */
#define SMALL_PF 16
static inline void prefetch_row(const char *row, int64_t nbytes)
{
    for (int64_t o = 0; o < nbytes; o += 64)
        _mm_prefetch(row + o, _MM_HINT_T0);
}

#define LOAD_F32(ptr, c) _mm512_loadu_ps((const float *)(ptr) + (c))
#define LOAD_BF16(ptr, c) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32( \
    _mm256_loadu_si256((const __m256i *)((const uint16_t *)(ptr) + (c)))), 16))
#define LOAD_F16(ptr, c) _mm512_cvtph_ps(_mm256_loadu_si256( \
    (const __m256i *)((const uint16_t *)(ptr) + (c))))
#endif

/* Row bounds [lo, hi) of keys position i of request b may see under the
 * implicit masks (a chunk sets causal too, so hi is the diagonal's). */
static inline void row_bounds(const struct plan *p, int64_t b, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t Lk = p->kv_len[b], pos = i + Lk - p->q_len[b];
    int64_t h = Lk, l = 0;
    if (p->causal || p->window > 0) {
        h = pos + 1;
        if (h > Lk)
            h = Lk;
        if (h < 0)
            h = 0;
    }
    if (p->window > 0) {
        l = pos - p->window + 1;
        if (l < 0)
            l = 0;
    }
    if (p->chunk > 0 && pos >= 0 && pos - pos % p->chunk > l)
        l = pos - pos % p->chunk;
    *lo = l;
    *hi = h;
}

/* Mask scores s[0..n) (keys j0..j0+n) of row (b, h, i): -inf outside the
 * implicit bounds [lo, hi), then the explicit mask. */
static inline void row_mask(const struct plan *p, float *s, int64_t n, int64_t b, int64_t h,
                     int64_t i, int64_t j0, int64_t lo, int64_t hi)
{
    int64_t a = lo - j0, z = hi - j0;
    if (a > 0)
        fill_ninf(s, a < n ? a : n);
    if (z < n)
        fill_ninf(s + (z > 0 ? z : 0), n - (z > 0 ? z : 0));
    if (!p->mask && !p->softcap && !p->slopes)
        return;
    if (a < 0)
        a = 0;
    if (z > n)
        z = n;
    if (a < z && p->softcap)
        softcap_row(s + a, z - a, p->softcap, p->inv_softcap, p->scalar);
    if (a < z && p->slopes)
        alibi_row(s + a, z - a, p->slopes[h], j0 + a, i + p->kv_len[b] - p->q_len[b],
                  p->scalar);
    if (a < z && p->mask) {
        int64_t mi = p->mpacked ? p->q_start[b] + i : i;
        int64_t mj = (p->mpacked ? p->kv_start[b] : 0) + j0 + a;
        const char *mrow = p->mask + (size_t)(b * p->msb + h * p->msh + mi * p->msi
                                              + mj * p->msj) * p->msize;
        apply_mask(p, s + a, z - a, mrow);
    }
}

/* Online-softmax update of one row with the masked scores s[0..n): the
 * running max *m and sum *l, s turned into weights in place, the partial
 * output row o rescaled. */
static inline void row_softmax(const struct plan *p, float *s, int64_t n, float *m, float *l,
                        float *o)
{
    float mt = rowmax(s, n, p->scalar), mo = *m;
    float mn = mt > mo ? mt : mo, alpha = 1.0f;
    if (mn == -INFINITY) {
        /* nothing to attend yet; NaN scores still poison the row */
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            s[j] = isnan(s[j]) ? s[j] : 0.0f;
            sum += s[j];
        }
        *l += sum;
    } else {
        alpha = mo == -INFINITY ? 0.0f : expf(mo - mn);
        float sum = exp_sum(s, n, mn, p->scalar);
        *l = *l * alpha + sum;
        *m = mn;
    }
    if (alpha != 1.0f)
        for (int64_t d = 0; d < p->Dv; d++)
            o[d] *= alpha;
}

/* Normalise the accumulated output row o (running max m, sum l) of
 * (b, h, i) and store it and its LSE.  A row that attended to nothing
 * (l == 0) gets 0 and -inf; NaN stays NaN.  A sink logit joins the sum
 * here, once, as one more key of no value: the maximum becomes
 * max(m, sink), the sum and the row are rescaled to it (so that a row
 * with nothing to attend gets 0 and LSE = sink). */
static inline void finish_row(const struct plan *p, int64_t b, int64_t h, int64_t i, float *o,
                       float m, float l)
{
    const int64_t Dv = p->Dv;
    float lse;
    if (p->sinks) {
        float sk = p->sinks[h], mn = m > sk ? m : sk;
        float alpha = m == -INFINITY ? 0.0f : expf(m - mn);
        l = l * alpha + expf(sk - mn);
        m = mn;
        if (alpha != 1.0f)
            for (int64_t d = 0; d < Dv; d++)
                o[d] *= alpha;
    }
    if (l == 0.0f) {
        memset(o, 0, (size_t)Dv * sizeof(float));
        lse = -INFINITY;
    } else {
        /* in runs of 8 (a trip count the compiler vectorises at -O2): the
         * same quotients, several at a time */
        int64_t c = 0;
        for (; c + 8 <= Dv; c += 8)
            for (int k = 0; k < 8; k++)
                o[c + k] /= l;
        for (; c < Dv; c++)
            o[c] /= l;
        /* an FP8 cache's value factor, after the division: the unscaled
         * sums stay in range where the output does */
        if (p->fp8_vs != 0.0f)
            for (int64_t d = 0; d < Dv; d++)
                o[d] *= p->fp8_vs;
        lse = m + logf(l);
    }
    const struct operand *oo = &p->out;
    char *dst = oo->base + (size_t)(b * oo->sb + h * oo->sh
                                    + (p->q_start[b] + i) * oo->ss) * oo->esize;
    store_f32(dst, o, oo->dtype, Dv);
    if (p->lse)
        p->lse[b * p->lsb + h * p->lsh + (p->q_start[b] + i) * p->lss] = lse;
}
#endif
