/* attn.c - tiled online-softmax attention and the LSE merge (see attn.h).
 *
 * Work is cut into items (request b, a group of hs query heads that share
 * one kv head, a tile of query positions [i0, i1)).  The hs heads of an
 * item are stacked into one row block of M = hs * (i1 - i0) rows, so a
 * decode step with GQA reads each K/V row once for the whole group.  For
 * every key tile [j0, j1) inside the item's reachable key range:
 *
 *   S = scale * Qtile Ktile^T                (sgemm, or the scalar loops)
 *   S += mask (-inf outside causal/window bounds, explicit masks)
 *   m' = max(m, rowmax S); P = exp(S - m'); l = l e^(m - m') + rowsum P
 *   O = O e^(m - m') + P Vtile               (sgemm)
 *
 * and at the end O /= l, LSE = m + log l.  Key tiles that no row of the
 * item may see (beyond the causal diagonal, before the window, blocks the
 * block mask drops) are never touched.  Each item is computed by one
 * thread in a fixed order, so results do not depend on the thread count.
 */
#include "attn/attn.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "attn/bf16.h"
#include "core/cli.h"
#include "core/half.h"
#include "core/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_X86 1
#endif

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
static float rowmax_ref(const float *s, int64_t n)
{
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > m)
            m = s[j];
    return m;
}

static float exp_sum_ref(float *s, int64_t n, float m)
{
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    return sum;
}

#ifdef ATTN_X86
__attribute__((target("avx512f"), always_inline))
static inline __m512 exp512(__m512 x)
{
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_LT_OQ);
    __m512 xc = _mm512_min_ps(x, _mm512_set1_ps(EXP_MAX + 1.0f));
    xc = _mm512_max_ps(xc, _mm512_set1_ps(EXP_MIN));
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
    __m512 y = _mm512_scalef_ps(p, n);
    y = _mm512_mask_mov_ps(y, tiny, _mm512_setzero_ps());
    return _mm512_mask_mov_ps(y, nan, x);
}

__attribute__((target("avx512f")))
static float rowmax_512(const float *s, int64_t n)
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
static float exp_sum_512(float *s, int64_t n, float m)
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
static __m256 exp256(__m256 x)
{
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_MIN), _CMP_LT_OQ);
    /* past EXP_MAX the product below overflows to +inf, as expf does */
    __m256 xc = _mm256_min_ps(x, _mm256_set1_ps(EXP_MAX + 1.0f));
    xc = _mm256_max_ps(xc, _mm256_set1_ps(EXP_MIN));
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
static float rowmax_256(const float *s, int64_t n)
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
static float exp_sum_256(float *s, int64_t n, float m)
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

enum { ISA_SCALAR = 0, ISA_AVX2, ISA_AVX512 };

/* The vector level the kernels use: AVX-512F, AVX2+FMA or plain scalar
 * code, as lib/core/isa.h allows (KVTOOLS_ISA caps it), lowered further by
 * kv_attn_limit_isa for tests. */
static int isa_cap = 99;

static int isa_level(void)
{
    int l = ISA_SCALAR;
#ifdef ATTN_X86
    if (kv_isa_has(KV_ISA_AVX512))
        l = ISA_AVX512;
    else if (kv_isa_has(KV_ISA_AVX2))
        l = ISA_AVX2;
#endif
    return l < isa_cap ? l : isa_cap;
}

int kv_attn_limit_isa(int level)
{
    isa_cap = level < 0 ? 99 : level;
    return isa_level();
}

/* Row max and fused exp/row-sum through the best vector path, or the
 * plain references when scalar is set. */
static float rowmax(const float *s, int64_t n, int scalar)
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

static float exp_sum(float *s, int64_t n, float m, int scalar)
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

void kv_attn_exp_n(float *x, size_t n)
{
    (void)exp_sum(x, (int64_t)n, 0.0f, 0);
}

/* ---- operands ------------------------------------------------------ */

/* Q, K, V or the output: element strides for (batch, head, position);
 * the feature axis is contiguous. */
struct operand {
    enum kv_dtype dtype;
    char *base;
    size_t esize;
    int64_t sb, sh, ss;
};

struct item {
    int64_t b, h0, i0, i1;
    int64_t j0, j1;         /* decode mode: the key chunk */
    uint64_t done, skipped;
};

struct scratch {
    atomic_int busy;
    float *qs, *qt, *s, *o, *kt, *vt, *m, *l;
    int64_t *lo, *hi;
    unsigned char *keep;
    /* bf16 tiles: Q rows and P rows as bf16, K^T and V packed (bf16.h) */
    uint16_t *qb, *pb;
    uint32_t *kp, *vp;
};

struct plan {
    int64_t B, Hq, Hkv, G, D, Dv;
    int64_t *q_start, *q_len, *kv_start, *kv_len;
    struct operand q, k, v, out;
    float *lse;
    int64_t lsb, lsh, lss;
    /* paged */
    int paged;
    const int64_t *bt;
    int64_t bt_cols, page, page_stride;
    /* explicit mask */
    const char *mask;
    enum kv_dtype mdtype;
    size_t msize;
    int mfloat, mkeep, mbinary;
    int64_t msb, msh, msi, msj;
    int mpacked;
    /* block mask */
    const struct kv_tensor *bm;
    int64_t bsb, bsh, bsq, bsk, bs;
    float scale;
    int causal;
    int64_t window;
    int64_t hs, tq, tk;
    int scalar, generic;
    /* bf16 tiles: route (KV_BF16_NONE = off), P kept f32, row strides of
     * qb and pb, panel strides of kp and vp */
    enum kv_bf16_route bf16;
    int p_f32;
    int64_t ldqb, ldpb, psk, psv;
    struct item *items;
    size_t n_items;
    struct scratch *pool;
    int n_pool;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* decode mode: items are (request, query, key chunk) over all heads,
     * rows padded to Gp per kv head; partial results merged at the end */
    int decode;
    int64_t Gp, kc;
    float *part;           /* per item: Hq x (m, l, Dv outputs) */
    atomic_ullong n_done;
    atomic_int progress_busy;
};

static struct kv_attn_stats last_stats;

void kv_attn_last_stats(struct kv_attn_stats *s)
{
    *s = last_stats;
}

/* Convert n elements at src (dtype t) to f32. */
static void load_f32(float *dst, const void *src, enum kv_dtype t, int64_t n)
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

static void store_f32(void *dst, const float *src, enum kv_dtype t, int64_t n)
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

static const char *q_row(const struct plan *p, int64_t b, int64_t h, int64_t i)
{
    const struct operand *o = &p->q;
    return o->base + (size_t)(b * o->sb + h * o->sh + (p->q_start[b] + i) * o->ss) * o->esize;
}

/* Address of key/value row j of request b, kv head h. */
static const char *kv_row(const struct plan *p, const struct operand *o,
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
static int bm_keep(const struct plan *p, int64_t b, int64_t h, int64_t qb, int64_t kb)
{
    size_t idx = (size_t)(b * p->bsb + h * p->bsh + qb * p->bsq + kb * p->bsk);
    return kv_tensor_get_i64(p->bm, idx) != 0;
}

static int any_keep(const struct plan *p, int64_t b, int64_t h0, int64_t hs, int64_t qb,
                    int64_t kb)
{
    for (int64_t hh = 0; hh < hs; hh++)
        if (bm_keep(p, b, h0 + hh, qb, kb))
            return 1;
    return 0;
}

/* Apply the explicit mask to scores s[0..n) of one row; mrow points at the
 * mask element of the first column, sj is the column stride. */
static void apply_mask(const struct plan *p, float *s, int64_t n, const char *mrow)
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

static void fill_ninf(float *s, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        s[j] = -INFINITY;
}

/* Scores S[M x n] = scale * Q[M x D] K[n x D]^T (K rows ldk apart). */
static void gemm_qk(const struct plan *p, int64_t M, int64_t n, const float *q,
                    const float *k, int64_t ldk, float *s, int64_t lds)
{
    int64_t D = p->D;
    if (!p->scalar) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)n, (int)D,
                    p->scale, q, (int)D, k, (int)ldk, 0.0f, s, (int)lds);
        return;
    }
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t d = 0; d < D; d++)
                acc += q[r * D + d] * k[j * ldk + d];
            s[r * lds + j] = p->scale * acc;
        }
}

/* O[M x Dv] += P[M x n] V[n x Dv] (V rows ldv apart). */
static void gemm_pv(const struct plan *p, int64_t M, int64_t n, const float *pm,
                    int64_t lds, const float *v, int64_t ldv, float *o)
{
    int64_t Dv = p->Dv;
    if (!p->scalar) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)Dv, (int)n,
                    1.0f, pm, (int)lds, v, (int)ldv, 1.0f, o, (int)Dv);
        return;
    }
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < n; j++) {
            float w = pm[r * lds + j];
            for (int64_t d = 0; d < Dv; d++)
                o[r * Dv + d] += w * v[j * ldv + d];
        }
}

#ifdef ATTN_X86
/* Decode-shaped tiles (M <= 8 stacked rows): a GEMM call would pack the
 * key tile again for four rows, so these read each key/value row once,
 * straight from the (paged) cache, converting 16 lanes at a time.  Rows
 * are done four at a time; qs, s and o carry zeroed padding rows up to a
 * multiple of four. */
/* Rows of one kv head are Hkv*D elements apart in a paged cache: too far
 * apart for the hardware prefetcher, so ask for them SMALL_PF rows ahead. */
#define SMALL_PF 16
static inline void prefetch_row(const char *row, int64_t nbytes)
{
    for (int64_t o = 0; o < nbytes; o += 64)
        _mm_prefetch(row + o, _MM_HINT_T0);
}

#define SMALL_KERNELS(NAME, LOAD)                                              \
__attribute__((target("avx512f")))                                             \
static void NAME##_qk(const struct plan *p, int64_t M, int64_t b, int64_t kvh,  \
                      int64_t j0, int64_t n, const float *qs, float *s,         \
                      int64_t lds)                                              \
{                                                                              \
    const int64_t D = p->D;                                                    \
    for (int64_t j = 0; j < n; j++) {                                          \
        const char *kr = kv_row(p, &p->k, b, kvh, j0 + j);                     \
        if (j + SMALL_PF < n)                                                  \
            prefetch_row(kv_row(p, &p->k, b, kvh, j0 + j + SMALL_PF), D * p->k.esize); \
        for (int64_t r0 = 0; r0 < M; r0 += 4) {                                \
            const float *q0 = qs + r0 * D;                                     \
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;        \
            for (int64_t c = 0; c < D; c += 16) {                              \
                __m512 kv = LOAD(kr, c);                                       \
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + c), kv, a0);         \
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + D + c), kv, a1);     \
                a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 2 * D + c), kv, a2); \
                a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 3 * D + c), kv, a3); \
            }                                                                  \
            s[r0 * lds + j] = p->scale * _mm512_reduce_add_ps(a0);             \
            s[(r0 + 1) * lds + j] = p->scale * _mm512_reduce_add_ps(a1);       \
            s[(r0 + 2) * lds + j] = p->scale * _mm512_reduce_add_ps(a2);       \
            s[(r0 + 3) * lds + j] = p->scale * _mm512_reduce_add_ps(a3);       \
        }                                                                      \
    }                                                                          \
}                                                                              \
__attribute__((target("avx512f")))                                             \
static void NAME##_pv(const struct plan *p, int64_t M, int64_t b, int64_t kvh,  \
                      int64_t j0, int64_t n, const float *s, int64_t lds,       \
                      float *o)                                                 \
{                                                                              \
    const int64_t Dv = p->Dv;                                                  \
    for (int64_t j = 0; j < n; j++) {                                          \
        const char *vr = kv_row(p, &p->v, b, kvh, j0 + j);                     \
        if (j + SMALL_PF < n)                                                  \
            prefetch_row(kv_row(p, &p->v, b, kvh, j0 + j + SMALL_PF), Dv * p->v.esize); \
        for (int64_t r0 = 0; r0 < M; r0 += 4) {                                \
            __m512 p0 = _mm512_set1_ps(s[r0 * lds + j]);                       \
            __m512 p1 = _mm512_set1_ps(s[(r0 + 1) * lds + j]);                 \
            __m512 p2 = _mm512_set1_ps(s[(r0 + 2) * lds + j]);                 \
            __m512 p3 = _mm512_set1_ps(s[(r0 + 3) * lds + j]);                 \
            float *o0 = o + r0 * Dv;                                           \
            for (int64_t c = 0; c < Dv; c += 16) {                             \
                __m512 vv = LOAD(vr, c);                                       \
                _mm512_storeu_ps(o0 + c, _mm512_fmadd_ps(p0, vv, _mm512_loadu_ps(o0 + c))); \
                _mm512_storeu_ps(o0 + Dv + c, _mm512_fmadd_ps(p1, vv, _mm512_loadu_ps(o0 + Dv + c))); \
                _mm512_storeu_ps(o0 + 2 * Dv + c, _mm512_fmadd_ps(p2, vv, _mm512_loadu_ps(o0 + 2 * Dv + c))); \
                _mm512_storeu_ps(o0 + 3 * Dv + c, _mm512_fmadd_ps(p3, vv, _mm512_loadu_ps(o0 + 3 * Dv + c))); \
            }                                                                  \
        }                                                                      \
    }                                                                          \
}

/* The lane sums of 16 vectors, lane t the sum of a[t], each summed as
 * _mm512_reduce_add_ps sums one: halves (i + 8), quarters (i + 4), pairs
 * (i + 2), then the last two; done four levels at a time by shuffles
 * across keys, lane 4k + m of the last level being key 4m + k. */
__attribute__((target("avx512f")))
static inline __m512 dec_sum16(const __m512 *a)
{
    __m512 c[8], e[4], f[2];
    for (int k = 0; k < 8; k++)          /* key 2k in 128-bit lanes 0-1, 2k+1 in 2-3 */
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xee),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44));
    for (int k = 0; k < 4; k++)          /* 128-bit lane l: key 4k + l */
        e[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0xdd),
                             _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0x88));
    for (int k = 0; k < 2; k++)          /* lane l: keys 8k + l (0-1), 8k + 4 + l (2-3) */
        f[k] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * k], e[2 * k + 1], 0x44),
                             _mm512_shuffle_ps(e[2 * k], e[2 * k + 1], 0xee));
    __m512 g = _mm512_add_ps(_mm512_shuffle_ps(f[0], f[1], 0x88),
                             _mm512_shuffle_ps(f[0], f[1], 0xdd));
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2,
                                         13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, g);
}

/* Decode over all kv heads: for each key, the rows of every kv head
 * (padded to Gp per head) against that key; a token's heads lie next to
 * each other in a paged or thd cache, so memory is read front to back
 * (and the hardware prefetcher keeps up: no software prefetch here). */
#define DECODE_KERNELS(NAME, LOAD)                                             \
__attribute__((target("avx512f")))                                             \
static void NAME##_dqk(const struct plan *p, int64_t b, int64_t j0, int64_t n, \
                       const float *qs, float *s, int64_t lds)                 \
{                                                                              \
    const int64_t D = p->D, Hkv = p->Hkv, Gp = p->Gp;                          \
    const size_t hstep = (size_t)p->k.sh * p->k.esize;                         \
    const char *tok[16];                                                       \
    __m512 acc[4][16];                                                         \
    /* 16 keys at a time: the 16-lane sums of each row kept, then summed     \
     * across lanes for all 16 keys at once (dec_sum16) */                     \
    for (int64_t jb = 0; jb < n; jb += 16) {                                   \
        const int64_t nb = n - jb < 16 ? n - jb : 16;                          \
        for (int64_t t = 0; t < nb; t++)                                       \
            tok[t] = kv_row(p, &p->k, b, 0, j0 + jb + t);                      \
        /* the next block's keys, all heads: read head by head below, they  \
         * are too far apart for the hardware prefetcher */                   \
        for (int64_t t = jb + 16; t < jb + 32 && t < n; t++)                   \
            prefetch_row(kv_row(p, &p->k, b, 0, j0 + t), Hkv * hstep);         \
        for (int64_t g = 0; g < Hkv; g++)                                      \
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {            \
                const float *q0 = qs + r0 * D;                                 \
                for (int64_t t = 0; t < 16; t++) {                             \
                    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0; \
                    if (t < nb) {                                              \
                        const char *kr = tok[t] + g * hstep;                   \
                        for (int64_t c = 0; c < D; c += 16) {                  \
                            __m512 kv = LOAD(kr, c);                           \
                            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + c), kv, a0); \
                            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + D + c), kv, a1); \
                            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 2 * D + c), kv, a2); \
                            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 3 * D + c), kv, a3); \
                        }                                                      \
                    }                                                          \
                    acc[0][t] = a0;                                            \
                    acc[1][t] = a1;                                            \
                    acc[2][t] = a2;                                            \
                    acc[3][t] = a3;                                            \
                }                                                              \
                for (int r = 0; r < 4; r++)                                    \
                    _mm512_mask_storeu_ps(s + (r0 + r) * lds + jb,             \
                        (__mmask16)((1u << nb) - 1),                           \
                        _mm512_mul_ps(_mm512_set1_ps(p->scale), dec_sum16(acc[r]))); \
            }                                                                  \
    }                                                                          \
}                                                                              \
__attribute__((target("avx512f")))                                             \
static void NAME##_dpv(const struct plan *p, int64_t b, int64_t j0, int64_t n, \
                       const float *s, int64_t lds, float *o)                  \
{                                                                              \
    const int64_t Dv = p->Dv, Hkv = p->Hkv, Gp = p->Gp;                        \
    const size_t hstep = (size_t)p->v.sh * p->v.esize;                         \
    const char *tok[DEC_PV_KEYS];                                              \
    /* DEC_PV_KEYS keys at a time (read front to back, then again from L1):  \
     * 4 rows x 64 columns of the output stay in registers over the block,   \
     * each element still summed key by key, the same FMAs in the same      \
     * order as one key at a time */                                          \
    for (int64_t jb = 0; jb < n; jb += DEC_PV_KEYS) {                          \
        const int64_t nb = n - jb < DEC_PV_KEYS ? n - jb : DEC_PV_KEYS;        \
        for (int64_t t = 0; t < nb; t++)                                       \
            tok[t] = kv_row(p, &p->v, b, 0, j0 + jb + t);                      \
        for (int64_t g = 0; g < Hkv; g++)                                      \
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {            \
                const float *s0 = s + r0 * lds + jb;                           \
                float *o0 = o + r0 * Dv;                                       \
                int64_t c0 = 0;                                                \
                for (; c0 + 64 <= Dv; c0 += 64) {                              \
                    __m512 acc[4][4];                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                            \
                            acc[r][c] = _mm512_loadu_ps(o0 + r * Dv + c0 + 16 * c); \
                    for (int64_t t = 0; t < nb; t++) {                         \
                        const char *vr = tok[t] + g * hstep;                   \
                        __m512 x0 = LOAD(vr, c0), x1 = LOAD(vr, c0 + 16);      \
                        __m512 x2 = LOAD(vr, c0 + 32), x3 = LOAD(vr, c0 + 48); \
                        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                          \
                            __m512 pr = _mm512_set1_ps(s0[r * lds + t]);       \
                            acc[r][0] = _mm512_fmadd_ps(pr, x0, acc[r][0]);    \
                            acc[r][1] = _mm512_fmadd_ps(pr, x1, acc[r][1]);    \
                            acc[r][2] = _mm512_fmadd_ps(pr, x2, acc[r][2]);    \
                            acc[r][3] = _mm512_fmadd_ps(pr, x3, acc[r][3]);    \
                        }                                                      \
                    }                                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                            \
                            _mm512_storeu_ps(o0 + r * Dv + c0 + 16 * c, acc[r][c]); \
                }                                                              \
                for (; c0 < Dv; c0 += 16) {                                    \
                    __m512 acc[4];                                             \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        acc[r] = _mm512_loadu_ps(o0 + r * Dv + c0);            \
                    for (int64_t t = 0; t < nb; t++) {                         \
                        __m512 x = LOAD(tok[t] + g * hstep, c0);               \
                        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                            \
                            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(s0[r * lds + t]), x, acc[r]); \
                    }                                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        _mm512_storeu_ps(o0 + r * Dv + c0, acc[r]);            \
                }                                                              \
            }                                                                  \
    }                                                                          \
}

#define DEC_PV_KEYS 8
#define LOAD_F32(ptr, c) _mm512_loadu_ps((const float *)(ptr) + (c))
#define LOAD_BF16(ptr, c) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32( \
    _mm256_loadu_si256((const __m256i *)((const uint16_t *)(ptr) + (c)))), 16))
#define LOAD_F16(ptr, c) _mm512_cvtph_ps(_mm256_loadu_si256( \
    (const __m256i *)((const uint16_t *)(ptr) + (c))))
SMALL_KERNELS(small_f32, LOAD_F32)
SMALL_KERNELS(small_bf16, LOAD_BF16)
SMALL_KERNELS(small_f16, LOAD_F16)
DECODE_KERNELS(dec_f32, LOAD_F32)
DECODE_KERNELS(dec_bf16, LOAD_BF16)
DECODE_KERNELS(dec_f16, LOAD_F16)
#endif

#ifdef ATTN_X86
/* Decode Q K^T on the bf16 tiles (kv_bf16_dec_qk): qp holds the query
 * rows as bf16 pairs, D / 2 words a row; keys 16 at a time, each kv head's
 * rows four at a time. */
static void dec_qk_tiles(const struct plan *p, int64_t b, int64_t j0, int64_t n,
                         const uint32_t *qp, float *s, int64_t lds)
{
    const int64_t Hkv = p->Hkv, Gp = p->Gp, kp = p->D / 2;
    const size_t hstep = (size_t)p->k.sh * p->k.esize;
    const uint16_t *kr[16];
    float out[64];
    for (int64_t jb = 0; jb < n; jb += 16) {
        const int nb = (int)(n - jb < 16 ? n - jb : 16);
        for (int64_t t = jb + 16; t < jb + 32 && t < n; t++)
            prefetch_row(kv_row(p, &p->k, b, 0, j0 + t), Hkv * (int64_t)hstep);
        for (int64_t g = 0; g < Hkv; g++) {
            for (int t = 0; t < nb; t++)
                kr[t] = (const uint16_t *)(const void *)(kv_row(p, &p->k, b, 0, j0 + jb + t) +
                                                         g * hstep);
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {
                kv_bf16_dec_qk(p->bf16, qp + r0 * kp, kp, kp, kr, nb, out);
                for (int r = 0; r < 4; r++)
                    for (int t = 0; t < nb; t++)
                        s[(r0 + r) * lds + jb + t] = p->scale * out[16 * r + t];
            }
        }
    }
}
#endif

/* Decode mode with bf16 Q, K and V: Q K^T on the bf16 tiles (VDPBF16PS or
 * its model); P V stays f32, as with --no-p-round. */
static int dec_tiles_ok(const struct plan *p)
{
#ifdef ATTN_X86
    return p->k.dtype == KV_BF16 && p->D % 32 == 0 &&
           (p->bf16 == KV_BF16_AVX512 || p->bf16 == KV_BF16_MODEL_X86);
#else
    (void)p;
    return 0;
#endif
}

/* Can this plan use the decode-shaped kernels? */
static int small_ok(const struct plan *p, int64_t M)
{
#ifdef ATTN_X86
    return !p->scalar && !p->generic && M <= 8 && isa_level() == ISA_AVX512 && p->D % 16 == 0 &&
           p->Dv % 16 == 0 && p->k.dtype == p->v.dtype &&
           (p->k.dtype == KV_F32 || p->k.dtype == KV_BF16 || p->k.dtype == KV_F16);
#else
    (void)p;
    (void)M;
    return 0;
#endif
}

/* Dispatch the decode-shaped kernels on the key/value dtype. */
static void small_qk(const struct plan *p, int64_t M, int64_t b, int64_t kvh, int64_t j0,
                     int64_t n, const float *qs, float *s, int64_t lds)
{
#ifdef ATTN_X86
    switch (p->k.dtype) {
    case KV_BF16: small_bf16_qk(p, M, b, kvh, j0, n, qs, s, lds); break;
    case KV_F16: small_f16_qk(p, M, b, kvh, j0, n, qs, s, lds); break;
    default: small_f32_qk(p, M, b, kvh, j0, n, qs, s, lds); break;
    }
#else
    (void)p; (void)M; (void)b; (void)kvh; (void)j0; (void)n; (void)qs; (void)s; (void)lds;
#endif
}

static void small_pv(const struct plan *p, int64_t M, int64_t b, int64_t kvh, int64_t j0,
                     int64_t n, const float *s, int64_t lds, float *o)
{
#ifdef ATTN_X86
    switch (p->v.dtype) {
    case KV_BF16: small_bf16_pv(p, M, b, kvh, j0, n, s, lds, o); break;
    case KV_F16: small_f16_pv(p, M, b, kvh, j0, n, s, lds, o); break;
    default: small_f32_pv(p, M, b, kvh, j0, n, s, lds, o); break;
    }
#else
    (void)p; (void)M; (void)b; (void)kvh; (void)j0; (void)n; (void)s; (void)lds; (void)o;
#endif
}

/* Dispatch the all-heads decode kernels on the key/value dtype. */
static void dec_qk(const struct plan *p, int64_t b, int64_t j0, int64_t n, const float *qs,
                   float *s, int64_t lds)
{
#ifdef ATTN_X86
    switch (p->k.dtype) {
    case KV_BF16: dec_bf16_dqk(p, b, j0, n, qs, s, lds); break;
    case KV_F16: dec_f16_dqk(p, b, j0, n, qs, s, lds); break;
    default: dec_f32_dqk(p, b, j0, n, qs, s, lds); break;
    }
#else
    (void)p; (void)b; (void)j0; (void)n; (void)qs; (void)s; (void)lds;
#endif
}

static void dec_pv(const struct plan *p, int64_t b, int64_t j0, int64_t n, const float *s,
                   int64_t lds, float *o)
{
#ifdef ATTN_X86
    switch (p->v.dtype) {
    case KV_BF16: dec_bf16_dpv(p, b, j0, n, s, lds, o); break;
    case KV_F16: dec_f16_dpv(p, b, j0, n, s, lds, o); break;
    default: dec_f32_dpv(p, b, j0, n, s, lds, o); break;
    }
#else
    (void)p; (void)b; (void)j0; (void)n; (void)s; (void)lds; (void)o;
#endif
}

/* Take a free work space from the pool (one per thread, so there is
 * always one); the item gives it back by clearing busy. */
static struct scratch *scratch_get(struct plan *p)
{
    for (;;) {
        for (int i = 0; i < p->n_pool; i++) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&p->pool[i].busy, &expect, 1))
                return &p->pool[i];
        }
    }
}

/* Row bounds [lo, hi) of keys position i of request b may see under the
 * implicit masks. */
static void row_bounds(const struct plan *p, int64_t b, int64_t i, int64_t *lo, int64_t *hi)
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
    *lo = l;
    *hi = h;
}

/* Mask scores s[0..n) (keys j0..j0+n) of row (b, h, i): -inf outside the
 * implicit bounds [lo, hi), then the explicit mask. */
static void row_mask(const struct plan *p, float *s, int64_t n, int64_t b, int64_t h,
                     int64_t i, int64_t j0, int64_t lo, int64_t hi)
{
    int64_t a = lo - j0, z = hi - j0;
    if (a > 0)
        fill_ninf(s, a < n ? a : n);
    if (z < n)
        fill_ninf(s + (z > 0 ? z : 0), n - (z > 0 ? z : 0));
    if (!p->mask)
        return;
    if (a < 0)
        a = 0;
    if (z > n)
        z = n;
    if (a < z) {
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
static void row_softmax(const struct plan *p, float *s, int64_t n, float *m, float *l,
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
 * (l == 0) gets 0 and -inf; NaN stays NaN. */
static void finish_row(const struct plan *p, int64_t b, int64_t h, int64_t i, float *o,
                       float m, float l)
{
    const int64_t Dv = p->Dv;
    float lse;
    if (l == 0.0f) {
        memset(o, 0, (size_t)Dv * sizeof(float));
        lse = -INFINITY;
    } else {
        for (int64_t d = 0; d < Dv; d++)
            o[d] /= l;
        lse = m + logf(l);
    }
    const struct operand *oo = &p->out;
    char *dst = oo->base + (size_t)(b * oo->sb + h * oo->sh
                                    + (p->q_start[b] + i) * oo->ss) * oo->esize;
    store_f32(dst, o, oo->dtype, Dv);
    if (p->lse)
        p->lse[b * p->lsb + h * p->lsh + (p->q_start[b] + i) * p->lss] = lse;
}

static void item_done(struct plan *p);

/* Keys are split into pieces of DIAG on the causal diagonal. */
#define DIAG 64

/* The first (position-major) row that sees key j: rows of one position
 * share their bounds, and later positions see more. */
static int64_t first_row(const struct scratch *w, int64_t hs, int64_t ni, int64_t j)
{
    for (int64_t ii = 0; ii < ni; ii++)
        if (w->hi[ii * hs] > j)
            return ii * hs;
    return ni * hs;
}

/* Copy keys [a, z) of kv head kvh of request b, as f32, into rows
 * dst[0 ..) of width w (K or V, per operand o). */
static void gather_rows(const struct plan *p, const struct operand *o, int64_t w, int64_t b,
                        int64_t kvh, int64_t a, int64_t z, float *dst)
{
    if (!p->paged && o->dtype == KV_F32 && o->ss == w) {
        memcpy(dst, kv_row(p, o, b, kvh, a), (size_t)((z - a) * w) * sizeof(float));
        return;
    }
    for (int64_t j = a; j < z; j++)
        load_f32(dst + (j - a) * w, kv_row(p, o, b, kvh, j), o->dtype, w);
}

/* Block-sparse tile without masking: starting at the kept block at j0,
 * collect the blocks that some stacked row keeps -- all rows of the item
 * see every key of them under the implicit masks -- up to tk keys, with
 * the dropped blocks between them left out, so that one pair of GEMMs of
 * width up to tk covers several separate kept blocks.  Returns the number
 * of keys (0 when the block at j0 does not qualify); *j_end is where the
 * walk stopped.  kt/vt point at the keys and values: straight at the input
 * when they are one contiguous f32 run, else gathered into w->kt/w->vt. */
static int64_t gather_blocks(const struct plan *p, struct item *it, struct scratch *w,
                             int64_t M, int64_t kvh, int64_t j0, int64_t jhi, int direct,
                             const float **kt, int64_t *ldk, const float **vt, int64_t *ldv,
                             int64_t *j_end)
{
    const int64_t bs = p->bs, b = it->b, qb = it->i0 / bs, tk = p->tk;
    const int64_t min_hi = w->hi[0], max_lo = w->lo[M - 1];
    int64_t n = 0, run_end = -1, contiguous = 1, pending = 0;
    *j_end = j0;
    for (int64_t kb = j0 / bs; kb * bs < jhi; kb++) {
        int64_t a = kb * bs, z = (kb + 1) * bs < jhi ? (kb + 1) * bs : jhi;
        if (a < max_lo || z > min_hi || n + (z - a) > tk)
            break;
        if (!any_keep(p, b, it->h0, p->hs, qb, kb)) {
            pending++;
            continue;
        }
        /* stacked heads share one mask (plan_items stacks only then), so
         * every row keeps this block: no masking inside the tile */
        it->skipped += (uint64_t)pending;
        pending = 0;
        if (run_end >= 0 && a != run_end)
            contiguous = 0;
        run_end = z;
        n += z - a;
        *j_end = z;
    }
    if (n == 0)
        return 0;
    if (contiguous && direct) {
        *kt = (const float *)kv_row(p, &p->k, b, kvh, j0);
        *vt = (const float *)kv_row(p, &p->v, b, kvh, j0);
        *ldk = p->k.ss;
        *ldv = p->v.ss;
        return n;
    }
    int64_t at = 0;
    for (int64_t kb = j0 / bs; kb * bs < *j_end; kb++) {
        int64_t a = kb * bs, z = (kb + 1) * bs < *j_end ? (kb + 1) * bs : *j_end;
        if (!any_keep(p, b, it->h0, p->hs, qb, kb))
            continue;
        gather_rows(p, &p->k, p->D, b, kvh, a, z, w->kt + at * p->D);
        gather_rows(p, &p->v, p->Dv, b, kvh, a, z, w->vt + at * p->Dv);
        at += z - a;
    }
    *kt = w->kt;
    *vt = w->vt;
    *ldk = p->D;
    *ldv = p->Dv;
    return n;
}

/* ---- AVX-512 block-sparse tiles ------------------------------------ */

/* The kept key blocks of a block-sparse tile, multiplied straight from the
 * f32 inputs: no gathering of K and V into one run, no packing of them
 * for every query block (a BLAS call packs its operands each time, and
 * here each call is only bs query rows deep).  The scores are kept
 * transposed, St[j][r] (key-major, the M stacked query rows across), so
 * that K and V rows are read where they lie and only the item's queries
 * are transposed, once per item: Qt[d][r].  The softmax then runs 16 rows
 * at a time down the key axis.  The reference is the BLAS path
 * (gather_blocks, gemm_qk, row_softmax, gemm_pv) and the scalar loops. */

#define SP_MAXB 64              /* kept blocks in one tile at most */
/* Row stride of Qt and St for M query rows: a power-of-two stride would
 * map a panel's rows onto a few L1 sets and evict itself. */
#define SP_LD(M) ((M) + 16)

#ifdef ATTN_X86
/* Eight keys against 32 query rows: two accumulators per key. */
#define SP_ACC(i) __m512 c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps()
#define SP_QK_FMA(i)                                                    \
    do {                                                                \
        __m512 kk = _mm512_set1_ps(kr[(i) * ldk]);                            \
        c##i##a = _mm512_fmadd_ps(kk, q0, c##i##a);                     \
        c##i##b = _mm512_fmadd_ps(kk, q1, c##i##b);                     \
    } while (0)
#define SP_QK_STORE(i)                                                  \
    do {                                                                \
        _mm512_storeu_ps(so + (i) * lt, _mm512_mul_ps(c##i##a, vs));     \
        _mm512_storeu_ps(so + (i) * lt + 16, _mm512_mul_ps(c##i##b, vs)); \
    } while (0)

/* St[j][r] = scale * sum_d K[j][d] Qt[d][r] for the nk keys at k (rows ldk
 * apart, the first of them key a) and the M query rows of qt (M a multiple
 * of 32); Qt and St rows are lt apart.  Keys at or past a row's hi bound
 * are not computed where a whole panel of 32 rows is past them: they get
 * -inf (the rest is masked by the caller). */
__attribute__((target("avx512f")))
static void sp_qk(int64_t M, int64_t lt, int64_t D, const float *qt, const float *k,
                  int64_t ldk, int64_t nk, int64_t a, const int64_t *hi, float scale,
                  float *st)
{
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t r0 = 0; r0 < M; r0 += 32) {
        int64_t j = 0, lim = hi[r0 + 31] - a;
        lim = lim < 0 ? 0 : lim > nk ? nk : lim;
        for (int64_t jj = lim; jj < nk; jj++) {
            _mm512_storeu_ps(st + jj * lt + r0, _mm512_set1_ps(-INFINITY));
            _mm512_storeu_ps(st + jj * lt + r0 + 16, _mm512_set1_ps(-INFINITY));
        }
        for (; j + 8 <= lim; j += 8) {
            const float *kr = k + j * ldk, *qp = qt + r0;
            SP_ACC(0); SP_ACC(1); SP_ACC(2); SP_ACC(3);
            SP_ACC(4); SP_ACC(5); SP_ACC(6); SP_ACC(7);
            for (int64_t d = 0; d < D; d++, qp += lt, kr++) {
                __m512 q0 = _mm512_loadu_ps(qp), q1 = _mm512_loadu_ps(qp + 16);
                /* keep both in registers (GCC would spill one, and the
                 * reload per FMA makes the loop load-bound) */
                __asm__("" : "+v"(q0), "+v"(q1));
                SP_QK_FMA(0); SP_QK_FMA(1); SP_QK_FMA(2); SP_QK_FMA(3);
                SP_QK_FMA(4); SP_QK_FMA(5); SP_QK_FMA(6); SP_QK_FMA(7);
            }
            float *so = st + j * lt + r0;
            SP_QK_STORE(0); SP_QK_STORE(1); SP_QK_STORE(2); SP_QK_STORE(3);
            SP_QK_STORE(4); SP_QK_STORE(5); SP_QK_STORE(6); SP_QK_STORE(7);
        }
        for (; j < lim; j++) {
            const float *kr = k + j * ldk, *qp = qt + r0;
            SP_ACC(0);
            for (int64_t d = 0; d < D; d++, qp += lt, kr++) {
                __m512 q0 = _mm512_loadu_ps(qp), q1 = _mm512_loadu_ps(qp + 16);
                SP_QK_FMA(0);
            }
            float *so = st + j * lt + r0;
            SP_QK_STORE(0);
        }
    }
}

/* Eight query rows against 32 output columns. */
#define SP_LOAD(i)                                                      \
    __m512 c##i##a = _mm512_loadu_ps(oo + (i) * Dv),                    \
           c##i##b = _mm512_loadu_ps(oo + (i) * Dv + 16)
#define SP_PV_FMA(i)                                                    \
    do {                                                                \
        __m512 pp = _mm512_set1_ps(pj[i]);                              \
        c##i##a = _mm512_fmadd_ps(pp, v0, c##i##a);                     \
        c##i##b = _mm512_fmadd_ps(pp, v1, c##i##b);                     \
    } while (0)
#define SP_PV_STORE(i)                                                  \
    do {                                                                \
        _mm512_storeu_ps(oo + (i) * Dv, c##i##a);                       \
        _mm512_storeu_ps(oo + (i) * Dv + 16, c##i##b);                  \
    } while (0)

/* O[r][c] += sum_j Pt[j][r] V[j][c] over the nk keys at v (rows ldv apart,
 * the first of them key a), for the M rows of O (a multiple of 8; Pt rows
 * lt apart) and its Dv columns (a multiple of 32).  Keys at or past the hi
 * bound of all 8 rows of a panel weigh 0 there and are passed over.  Keys
 * go in chunks of SP_PVK, so that a chunk's 32 columns of V stay in L1
 * while all rows pass over them. */
#define SP_PVK 64
__attribute__((target("avx512f")))
static void sp_pv(int64_t M, int64_t lt, int64_t Dv, const float *pt, const float *v,
                  int64_t ldv, int64_t nk, int64_t a, const int64_t *hi, float *o)
{
    for (int64_t c0 = 0; c0 < Dv; c0 += 32)
        for (int64_t j0 = 0; j0 < nk; j0 += SP_PVK)
        for (int64_t r0 = 0; r0 < M; r0 += 8) {
            int64_t j1 = j0 + SP_PVK < nk ? j0 + SP_PVK : nk;
            if (j1 > hi[r0 + 7] - a)
                j1 = hi[r0 + 7] - a;
            if (j1 <= j0)
                continue;
            float *oo = o + r0 * Dv + c0;
            const float *pj = pt + j0 * lt + r0, *vp = v + j0 * ldv + c0;
            SP_LOAD(0); SP_LOAD(1); SP_LOAD(2); SP_LOAD(3);
            SP_LOAD(4); SP_LOAD(5); SP_LOAD(6); SP_LOAD(7);
            for (int64_t j = j0; j < j1; j++, pj += lt, vp += ldv) {
                __m512 v0 = _mm512_loadu_ps(vp), v1 = _mm512_loadu_ps(vp + 16);
                SP_PV_FMA(0); SP_PV_FMA(1); SP_PV_FMA(2); SP_PV_FMA(3);
                SP_PV_FMA(4); SP_PV_FMA(5); SP_PV_FMA(6); SP_PV_FMA(7);
            }
            SP_PV_STORE(0); SP_PV_STORE(1); SP_PV_STORE(2); SP_PV_STORE(3);
            SP_PV_STORE(4); SP_PV_STORE(5); SP_PV_STORE(6); SP_PV_STORE(7);
        }
}

/* Online-softmax update of the M rows (a multiple of 16) from their
 * transposed scores St[0..n)[M] (rows lt apart), turned into weights in place; the
 * running maxima m, sums l and output rows o (Dv a multiple of 16)
 * follow the rules of row_softmax: NaN scores are passed over by the max
 * and poison the sum; a row with nothing to attend yet (max -inf) keeps
 * m = -inf and weighs 0 (NaN stays NaN) without rescaling. */
__attribute__((target("avx512f")))
static void sp_softmax(int64_t M, int64_t lt, int64_t n, float *st, float *m, float *l,
                       float *o, int64_t Dv)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    for (int64_t g = 0; g < M; g += 16) {
        __m512 mx = ninf;
        for (int64_t j = 0; j < n; j++)
            mx = _mm512_max_ps(_mm512_loadu_ps(st + j * lt + g), mx);
        __m512 mo = _mm512_loadu_ps(m + g);
        __m512 mn = _mm512_max_ps(mx, mo);
        __mmask16 none = _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
        __m512 base = _mm512_mask_mov_ps(mn, none, _mm512_setzero_ps());
        __m512 alpha = _mm512_mask_mov_ps(exp512(_mm512_sub_ps(mo, mn)), none, one);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j++) {
            float *s = st + j * lt + g;
            __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s), base));
            _mm512_storeu_ps(s, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_storeu_ps(l + g, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l + g), alpha), sum));
        _mm512_storeu_ps(m + g, mn);
        __mmask16 rescale = _mm512_cmp_ps_mask(alpha, one, _CMP_NEQ_UQ);
        if (!rescale)
            continue;
        float a[16];
        _mm512_storeu_ps(a, alpha);
        for (int i = 0; i < 16; i++) {
            if (!(rescale >> i & 1))
                continue;
            __m512 va = _mm512_set1_ps(a[i]);
            float *orow = o + (g + i) * Dv;
            for (int64_t d = 0; d < Dv; d += 16)
                _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(orow + d), va));
        }
    }
}
#endif

/* Can run_item take block-sparse tiles of M stacked rows through the
 * AVX-512 kernels?  f32 keys and values in place, whole vectors. */
static int sp_ok(const struct plan *p, int64_t M)
{
    return isa_level() == ISA_AVX512 && !p->scalar && !p->paged && p->k.dtype == KV_F32
           && p->v.dtype == KV_F32 && M % 32 == 0 && p->Dv % 32 == 0;
}

/* Block-sparse tile through the AVX-512 kernels: the run of kept blocks
 * from j0, up to tk keys, the dropped blocks between them left out; its
 * scores (-inf outside each row's causal/window bounds: the diagonal
 * blocks come this way too, computed only where a panel of rows sees
 * them), softmax update and P V straight from the inputs; w->qt holds the
 * item's transposed queries.  Returns the number of keys (0 when the block
 * at j0 alone is more than tk keys); *j_end is where the walk stopped. */
static int64_t sp_tile(const struct plan *p, struct item *it, struct scratch *w, int64_t M,
                       int64_t kvh, int64_t j0, int64_t jhi, int64_t *j_end)
{
#ifdef ATTN_X86
    const int64_t bs = p->bs, b = it->b, qb = it->i0 / bs, tk = p->tk;
    const int64_t min_hi = w->hi[0], max_lo = w->lo[M - 1];
    const int64_t lt = SP_LD(M);
    const float ninf = -INFINITY;
    int64_t n = 0, pending = 0, ba[SP_MAXB], bz[SP_MAXB];
    int nb = 0;
    *j_end = j0;
    for (int64_t kb = j0 / bs; kb * bs < jhi && nb < SP_MAXB; kb++) {
        int64_t a = kb * bs, z = (kb + 1) * bs < jhi ? (kb + 1) * bs : jhi;
        if (n + (z - a) > tk)
            break;
        if (!any_keep(p, b, it->h0, p->hs, qb, kb)) {
            pending++;
            continue;
        }
        it->skipped += (uint64_t)pending;
        pending = 0;
        ba[nb] = a;
        bz[nb++] = z;
        n += z - a;
        *j_end = z;
    }
    if (n == 0)
        return 0;
    int64_t at = 0;
    for (int i = 0; i < nb; i++) {
        float *st = w->s + at * lt;
        sp_qk(M, lt, p->D, w->qt, (const float *)kv_row(p, &p->k, b, kvh, ba[i]), p->k.ss,
              bz[i] - ba[i], ba[i], w->hi, p->scale, st);
        /* keys some rows may not see (causal diagonal, window start): -inf
         * there; rows are position-major, so the rows past key j's bounds
         * are a prefix (hi <= j) and a suffix (lo > j) */
        if (ba[i] < max_lo || bz[i] > min_hi) {
            int64_t r_hi = 0, r_lo = 0;
            for (int64_t j = ba[i]; j < bz[i]; j++, st += lt) {
                while (r_hi < M && w->hi[r_hi] <= j)
                    r_hi++;
                while (r_lo < M && w->lo[r_lo] <= j)
                    r_lo++;
                for (int64_t r = 0; r < r_hi; r++)
                    st[r] = ninf;
                for (int64_t r = r_lo; r < M; r++)
                    st[r] = ninf;
            }
        }
        at += bz[i] - ba[i];
    }
    sp_softmax(M, lt, n, w->s, w->m, w->l, w->o, p->Dv);
    at = 0;
    for (int i = 0; i < nb; i++) {
        sp_pv(M, lt, p->Dv, w->s + at * lt, (const float *)kv_row(p, &p->v, b, kvh, ba[i]),
              p->v.ss, bz[i] - ba[i], ba[i], w->hi, w->o);
        at += bz[i] - ba[i];
    }
    return n;
#else
    (void)p; (void)it; (void)w; (void)M; (void)kvh; (void)j0; (void)jhi;
    *j_end = j0;
    return 0;
#endif
}

/* Ask for huge pages on the 2 MiB-aligned inside of a large, not yet
 * touched buffer (the output): a 16 MiB output then faults in 8 times
 * instead of 4096.  Only a hint; without THP it does nothing. */
static void advise_huge(void *data, size_t n)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)data + huge - 1) & ~(huge - 1);
    uintptr_t z = ((uintptr_t)data + n) & ~(huge - 1);
    if (z > a)
        (void)madvise((void *)a, (size_t)(z - a), MADV_HUGEPAGE);
#else
    (void)data;
    (void)n;
#endif
}

/* Compute one item: hs stacked heads x positions [i0, i1) of request b.
 * Over 150 lines on purpose: it is the tuned tile loop (scores, mask,
 * online softmax, P.V per key tile) whose locals the compiler keeps in
 * registers across the tiles; split into calls, the state would travel
 * through memory on every tile. */
static void run_item(void *ctx, size_t idx)
{
    struct plan *p = ctx;
    struct item *it = &p->items[idx];
    struct scratch *w = scratch_get(p);
    const int64_t b = it->b, h0 = it->h0, i0 = it->i0, ni = it->i1 - it->i0;
    const int64_t hs = p->hs, M = hs * ni, D = p->D, Dv = p->Dv, tk = p->tk;
    const int64_t kvh = h0 / p->G;
    int64_t jlo, jhi, tmp;

    for (int64_t hh = 0; hh < hs; hh++)
        for (int64_t ii = 0; ii < ni; ii++) {
            int64_t r = ii * hs + hh;       /* position-major rows */
            load_f32(w->qs + r * D, q_row(p, b, h0 + hh, i0 + ii), p->q.dtype, D);
            row_bounds(p, b, i0 + ii, &w->lo[r], &w->hi[r]);
            w->m[r] = -INFINITY;
            w->l[r] = 0.0f;
        }
    const int small = small_ok(p, M);
    const int bf = p->bf16 != KV_BF16_NONE && !small;
    if (bf)
        for (int64_t r = 0; r < M; r++) {
            uint16_t *dst = w->qb + r * p->ldqb;
            memcpy(dst, q_row(p, b, h0 + r % hs, i0 + r / hs), (size_t)D * sizeof(uint16_t));
            if (D % 2)
                dst[D] = 0;
        }
    const int64_t Mp = (M + 3) / 4 * 4;       /* rows incl. padding */
    memset(w->o, 0, (size_t)(Mp * Dv) * sizeof(float));
    if (small && Mp > M) {
        memset(w->qs + M * D, 0, (size_t)((Mp - M) * D) * sizeof(float));
        memset(w->s + M * tk, 0, (size_t)((Mp - M) * tk) * sizeof(float));
    }
    row_bounds(p, b, i0, &jlo, &tmp);
    row_bounds(p, b, i0 + ni - 1, &tmp, &jhi);

    const int direct = !p->paged && p->k.dtype == KV_F32 && p->v.dtype == KV_F32;
    const int64_t maxkb = p->bm ? tk / p->bs + 2 : 0;
    const int gather = p->bm && !p->mask && !small && !bf;
    const int sp = gather && sp_ok(p, M);
    if (sp)
        for (int64_t r = 0; r < M; r++)
            for (int64_t d = 0; d < D; d++)
                w->qt[d * SP_LD(M) + r] = w->qs[r * D + d];
    int64_t nkb = 0;
    for (int64_t j0 = jlo, j1; j0 < jhi; j0 = j1) {
        j1 = j0 + tk < jhi ? j0 + tk : jhi;
        if (p->bm) {
            /* skip blocks no stacked head keeps, then take the run of
             * blocks that some head keeps, up to tk keys */
            const int64_t bs = p->bs, qb = i0 / bs;
            while (j0 < jhi && !any_keep(p, b, h0, hs, qb, j0 / bs)) {
                it->skipped++;
                j0 = (j0 / bs + 1) * bs;
            }
            if (j0 >= jhi)
                break;
            if (sp) {
                if (sp_tile(p, it, w, M, kvh, j0, jhi, &j1) > 0) {
                    it->done++;
                    continue;
                }
            } else if (gather) {
                const float *gk, *gv;
                int64_t gldk, gldv;
                int64_t n = gather_blocks(p, it, w, M, kvh, j0, jhi, direct, &gk, &gldk,
                                          &gv, &gldv, &j1);
                if (n > 0) {
                    it->done++;
                    gemm_qk(p, M, n, w->qs, gk, gldk, w->s, tk);
                    for (int64_t r = 0; r < M; r++)
                        row_softmax(p, w->s + r * tk, n, &w->m[r], &w->l[r], w->o + r * Dv);
                    gemm_pv(p, M, n, w->s, tk, gv, gldv, w->o);
                    continue;
                }
            }
            j1 = j0;
            nkb = 0;
            while (j1 < jhi && j1 - j0 < tk && nkb < maxkb) {
                int64_t kb = j1 / bs;
                if (nkb > 0 && !any_keep(p, b, h0, hs, qb, kb))
                    break;
                for (int64_t hh = 0; hh < hs; hh++)
                    w->keep[hh * maxkb + nkb] = (unsigned char)bm_keep(p, b, h0 + hh, qb, kb);
                nkb++;
                j1 = (kb + 1) * bs < jhi ? (kb + 1) * bs : jhi;
            }
            if (j1 - j0 > tk)
                j1 = j0 + tk;
        }
        it->done++;
        const int64_t n = j1 - j0;
        const float *kt, *vt;
        int64_t ldk, ldv;
        if (small) {
            kt = vt = NULL;
            ldk = ldv = 0;
            small_qk(p, Mp, b, kvh, j0, n, w->qs, w->s, tk);
        } else if (bf) {
            /* K^T packed for the bf16 tiles; V in f32 only when P stays f32 */
            for (int64_t j = 0; j < n; j++)
                kv_bf16_pack_col(w->kp, p->psk, j,
                                 (const uint16_t *)kv_row(p, &p->k, b, kvh, j0 + j), D);
            for (int64_t j = 0; p->p_f32 && j < n; j++)
                load_f32(w->vt + j * Dv, kv_row(p, &p->v, b, kvh, j0 + j), p->v.dtype, Dv);
            kt = NULL;
            vt = w->vt;
            ldk = D;
            ldv = Dv;
        } else if (direct) {
            kt = (const float *)kv_row(p, &p->k, b, kvh, j0);
            vt = (const float *)kv_row(p, &p->v, b, kvh, j0);
            ldk = p->k.ss;
            ldv = p->v.ss;
        } else {
            for (int64_t j = 0; j < n; j++) {
                load_f32(w->kt + j * D, kv_row(p, &p->k, b, kvh, j0 + j), p->k.dtype, D);
                load_f32(w->vt + j * Dv, kv_row(p, &p->v, b, kvh, j0 + j), p->v.dtype, Dv);
            }
            kt = w->kt;
            vt = w->vt;
            ldk = D;
            ldv = Dv;
        }
        /* On the causal diagonal the first rows do not see the last keys
         * of the tile: there, multiply each piece of DIAG keys with only
         * the rows (position-major, so a suffix) that see it.  The rows
         * left out get -inf from row_mask and weigh nothing. */
        const int diag = !small && (p->causal || p->window > 0) && w->hi[0] < j0 + n;
        const int64_t kpd = (D + 1) / 2;
        if (bf && !diag)
            kv_bf16_gemm(p->bf16, M, n, kpd, w->qb, p->ldqb, w->kp, p->psk, w->s, tk,
                         p->scale, 0);
        else if (bf)
            for (int64_t c0 = 0; c0 < n; c0 += DIAG) {
                int64_t c1 = c0 + DIAG < n ? c0 + DIAG : n, rs = first_row(w, hs, ni, j0 + c0);
                if (rs < M)
                    kv_bf16_gemm(p->bf16, M - rs, c1 - c0, kpd, w->qb + rs * p->ldqb, p->ldqb,
                                 w->kp + (c0 / 32) * p->psk, p->psk, w->s + rs * tk + c0, tk,
                                 p->scale, 0);
            }
        else if (!small && !diag)
            gemm_qk(p, M, n, w->qs, kt, ldk, w->s, tk);
        else if (diag)
            for (int64_t c0 = 0; c0 < n; c0 += DIAG) {
                int64_t c1 = c0 + DIAG < n ? c0 + DIAG : n, rs = first_row(w, hs, ni, j0 + c0);
                if (rs < M)
                    gemm_qk(p, M - rs, c1 - c0, w->qs + rs * D, kt + c0 * ldk, ldk,
                            w->s + rs * tk + c0, tk);
            }

        for (int64_t r = 0; r < M; r++) {
            int64_t hh = r % hs, i = i0 + r / hs, h = h0 + hh;
            float *s = w->s + r * tk;
            row_mask(p, s, n, b, h, i, j0, w->lo[r], w->hi[r]);
            if (p->bm)
                for (int64_t t = 0; t < nkb; t++) {
                    if (w->keep[hh * maxkb + t])
                        continue;
                    int64_t a = (j0 / p->bs + t) * p->bs - j0, z = a + p->bs;
                    if (a < 0)
                        a = 0;
                    if (z > n)
                        z = n;
                    if (a < z)
                        fill_ninf(s + a, z - a);
                }
            row_softmax(p, s, n, &w->m[r], &w->l[r], w->o + r * Dv);
        }
        if (small) {
            small_pv(p, Mp, b, kvh, j0, n, w->s, tk, w->o);
        } else if (bf && !p->p_f32) {
            /* P rounded to bf16 (a zero after an odd n), V packed in pairs
             * of keys (a zero key after an odd n) */
            for (int64_t r = 0; r < M; r++) {
                kv_f32_to_bf16_n(w->s + r * tk, w->pb + r * p->ldpb, (size_t)n);
                w->pb[r * p->ldpb + n] = 0;
            }
            for (int64_t j = 0; j < n; j += 2)
                kv_bf16_pack_rows(w->vp, p->psv, j,
                                  (const uint16_t *)kv_row(p, &p->v, b, kvh, j0 + j),
                                  j + 1 < n ? (const uint16_t *)kv_row(p, &p->v, b, kvh, j0 + j + 1)
                                            : NULL, Dv);
            for (int64_t c0 = 0; c0 < n; c0 += diag ? DIAG : n) {
                int64_t c1 = diag && c0 + DIAG < n ? c0 + DIAG : n;
                int64_t rs = diag ? first_row(w, hs, ni, j0 + c0) : 0;
                if (rs < M)
                    kv_bf16_gemm(p->bf16, M - rs, Dv, (c1 - c0 + 1) / 2,
                                 w->pb + rs * p->ldpb + c0, p->ldpb, w->vp + (c0 / 2) * 32,
                                 p->psv, w->o + rs * Dv, Dv, 1.0f, 1);
            }
        } else if (diag) {
            for (int64_t c0 = 0; c0 < n; c0 += DIAG) {
                int64_t c1 = c0 + DIAG < n ? c0 + DIAG : n, rs = first_row(w, hs, ni, j0 + c0);
                if (rs < M)
                    gemm_pv(p, M - rs, c1 - c0, w->s + rs * tk + c0, tk, vt + c0 * ldv, ldv,
                            w->o + rs * Dv);
            }
        } else {
            gemm_pv(p, M, n, w->s, tk, vt, ldv, w->o);
        }
    }

    for (int64_t r = 0; r < M; r++) {
        int64_t hh = r % hs, i = i0 + r / hs, h = h0 + hh;
        finish_row(p, b, h, i, w->o + r * Dv, w->m[r], w->l[r]);
    }
    atomic_store(&w->busy, 0);
    item_done(p);
}

/* Count a finished item and report progress (one worker at a time). */
static void item_done(struct plan *p)
{
    unsigned long long done = atomic_fetch_add(&p->n_done, 1) + 1;
    if (p->progress && atomic_exchange(&p->progress_busy, 1) == 0) {
        p->progress(p->progress_ctx, done, p->n_items);
        atomic_store(&p->progress_busy, 0);
    }
}

/* Decode mode: one item is query i of request b against the key chunk
 * [j0, j1), for every head at once.  Leaves the unnormalised partial
 * (m, l, o) of each head in p->part. */
static void run_decode_item(void *ctx, size_t idx)
{
    struct plan *p = ctx;
    struct item *it = &p->items[idx];
    struct scratch *w = scratch_get(p);
    const int64_t b = it->b, i = it->i0, D = p->D, Dv = p->Dv, tk = p->tk;
    const int64_t G = p->G, Gp = p->Gp, R = p->Hkv * Gp;
    int64_t lo, hi;

    memset(w->qs, 0, (size_t)(R * D) * sizeof(float));
    memset(w->o, 0, (size_t)(R * Dv) * sizeof(float));
    memset(w->s, 0, (size_t)(R * tk) * sizeof(float));
    for (int64_t g = 0; g < p->Hkv; g++)
        for (int64_t gg = 0; gg < G; gg++)
            load_f32(w->qs + (g * Gp + gg) * D, q_row(p, b, g * G + gg, i), p->q.dtype, D);
    for (int64_t r = 0; r < R; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    /* the query rows as bf16 pairs for the bf16 tiles (exact: Q is bf16) */
    uint16_t *qp = dec_tiles_ok(p) ? malloc((size_t)(R * D) * sizeof(uint16_t)) : NULL;
    if (qp)
        kv_f32_to_bf16_n(w->qs, qp, (size_t)(R * D));
    row_bounds(p, b, i, &lo, &hi);
    int64_t a = lo > it->j0 ? lo : it->j0, z = hi < it->j1 ? hi : it->j1;
    for (int64_t j0 = a, j1; j0 < z; j0 = j1) {
        j1 = j0 + tk < z ? j0 + tk : z;
        const int64_t n = j1 - j0;
        it->done++;
#ifdef ATTN_X86
        if (qp)
            dec_qk_tiles(p, b, j0, n, (const uint32_t *)(const void *)qp, w->s, tk);
        else
#endif
            dec_qk(p, b, j0, n, w->qs, w->s, tk);
        for (int64_t g = 0; g < p->Hkv; g++)
            for (int64_t gg = 0; gg < G; gg++) {
                int64_t r = g * Gp + gg;
                float *sr = w->s + r * tk;
                row_mask(p, sr, n, b, g * G + gg, i, j0, lo, hi);
                row_softmax(p, sr, n, &w->m[r], &w->l[r], w->o + r * Dv);
            }
        dec_pv(p, b, j0, n, w->s, tk, w->o);
    }
    free(qp);
    float *part = p->part + idx * (size_t)(p->Hq * (Dv + 2));
    for (int64_t g = 0; g < p->Hkv; g++)
        for (int64_t gg = 0; gg < G; gg++) {
            int64_t r = g * Gp + gg;
            float *dst = part + (g * G + gg) * (Dv + 2);
            dst[0] = w->m[r];
            dst[1] = w->l[r];
            memcpy(dst + 2, w->o + r * Dv, (size_t)Dv * sizeof(float));
        }
    atomic_store(&w->busy, 0);
    item_done(p);
}

/* Decode mode: merge the key chunks of each (request, query, head) in
 * chunk order and store the rows. */
static void merge_decode(struct plan *p, float *acc)
{
    const int64_t Dv = p->Dv, stride = p->Hq * (Dv + 2);
    for (size_t i0 = 0, i1; i0 < p->n_items; i0 = i1) {
        const struct item *first = &p->items[i0];
        for (i1 = i0 + 1; i1 < p->n_items; i1++)
            if (p->items[i1].b != first->b || p->items[i1].i0 != first->i0)
                break;
        for (int64_t h = 0; h < p->Hq; h++) {
            float m = -INFINITY, l = 0.0f;
            for (size_t c = i0; c < i1; c++) {
                float mc = p->part[c * stride + h * (Dv + 2)];
                if (mc > m)
                    m = mc;
            }
            memset(acc, 0, (size_t)Dv * sizeof(float));
            for (size_t c = i0; c < i1; c++) {
                const float *pc = p->part + c * stride + h * (Dv + 2);
                float wgt = m == -INFINITY ? 1.0f : expf(pc[0] - m);
                l += wgt * pc[1];
                for (int64_t d = 0; d < Dv; d++)
                    acc[d] += wgt * pc[2 + d];
            }
            finish_row(p, first->b, h, first->i0, acc, m, l);
        }
    }
}

/* ---- validation ---------------------------------------------------- */

static int is_input_float(enum kv_dtype t)
{
    return t == KV_F32 || t == KV_F16 || t == KV_BF16 || t == KV_F64;
}

static const char *shp(const struct kv_tensor *t, char *buf, size_t n)
{
    return kv_shape_str(t->ndim, t->shape, buf, n);
}

/* Broadcast strides of a tensor t (numpy rules, aligned right) against the
 * target shape tgt[0..nt).  st gets nt element strides (0 = broadcast). */
static int bcast_strides(const struct kv_tensor *t, int nt, const int64_t *tgt,
                         int64_t *st, const char *what, struct kv_err *e)
{
    char a[128], b[128];
    if (t->ndim < 2 || t->ndim > nt)
        goto bad;
    int64_t stride = 1;
    for (int k = nt - 1; k >= 0; k--) {
        int ti = t->ndim - (nt - k);
        if (ti < 0) {
            st[k] = 0;
            continue;
        }
        if (t->shape[ti] == tgt[k])
            st[k] = tgt[k] == 1 ? 0 : stride;
        else if (t->shape[ti] == 1)
            st[k] = 0;
        else
            goto bad;
        stride *= t->shape[ti];
    }
    return 0;
bad:
    return kv_err_set(e, "%s shape %s does not broadcast to %s", what,
                      shp(t, a, sizeof a), kv_shape_str(nt, tgt, b, sizeof b));
}

static int check_lens(const int64_t *v, size_t n, const char *what, struct kv_err *e)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0)
            return kv_err_set(e, "%s: length %lld of request %zu is negative",
                              what, (long long)v[i], i);
    return 0;
}

/* Free what plan_build/plan_items allocated; safe on a partial plan. */
static void plan_free(struct plan *p)
{
    if (p->pool)
        for (int i = 0; i < p->n_pool; i++) {
            struct scratch *w = &p->pool[i];
            free(w->qs); free(w->qt); free(w->s); free(w->o); free(w->kt); free(w->vt);
            free(w->m); free(w->l); free(w->lo); free(w->hi);
            free(w->keep);
            free(w->qb); free(w->pb); free(w->kp); free(w->vp);
        }
    free(p->pool);
    free(p->items);
    free(p->part);
    free(p->q_start); free(p->q_len); free(p->kv_start); free(p->kv_len);
}

/* Plan, step 1: the operands' dtypes and ranks, and the head geometry. */
static int plan_heads(const struct kv_attn_req *r, struct plan *p, int thd, struct kv_err *e)
{
    char a[128], c[128];
    const struct kv_tensor *q = r->q, *k = r->k, *v = r->v;
    int qnd = thd ? 3 : 4;
    if (!q)
        return kv_err_set(e, "no query tensor");
    if (!is_input_float(q->dtype))
        return kv_err_set(e, "query: dtype %s is not a float type (f32, f16, bf16, f64)",
                          kv_dtype_name(q->dtype));
    if (q->ndim != qnd)
        return kv_err_set(e, "query shape %s: layout %s needs %d dimensions",
                          shp(q, a, sizeof a), thd ? "thd" : "bhsd", qnd);
    p->Hq = q->shape[thd ? 1 : 1];
    p->D = q->shape[qnd - 1];
    p->paged = r->kv_cache != NULL;
    if (p->paged) {
        const struct kv_tensor *kc = r->kv_cache;
        if (k || v)
            return kv_err_set(e, "a paged cache replaces -k/-v: give one or the other");
        if (!is_input_float(kc->dtype))
            return kv_err_set(e, "kv cache: dtype %s is not a float type", kv_dtype_name(kc->dtype));
        if (kc->ndim != 5 || kc->shape[0] != 2)
            return kv_err_set(e, "kv cache shape %s: expected [2, num_blocks, block_size, Hkv, D]",
                              shp(kc, a, sizeof a));
        p->Hkv = kc->shape[3];
        p->Dv = kc->shape[4];
        if (kc->shape[4] != p->D)
            return kv_err_set(e, "head size differs: query %s, kv cache %s",
                              shp(q, a, sizeof a), shp(kc, c, sizeof c));
        if (kc->shape[2] < 1)
            return kv_err_set(e, "kv cache shape %s: block size 0", shp(kc, a, sizeof a));
    } else {
        if (!k || !v)
            return kv_err_set(e, "need both keys and values (or a paged kv cache)");
        if (!is_input_float(k->dtype) || !is_input_float(v->dtype))
            return kv_err_set(e, "keys/values: dtype %s/%s is not a float type",
                              kv_dtype_name(k->dtype), kv_dtype_name(v->dtype));
        if (k->ndim != qnd || v->ndim != qnd)
            return kv_err_set(e, "keys %s, values %s: layout %s needs %d dimensions",
                              shp(k, a, sizeof a), shp(v, c, sizeof c),
                              thd ? "thd" : "bhsd", qnd);
        p->Hkv = k->shape[1];
        p->Dv = v->shape[qnd - 1];
        if (k->shape[qnd - 1] != p->D)
            return kv_err_set(e, "head size differs: query %s, keys %s",
                              shp(q, a, sizeof a), shp(k, c, sizeof c));
        for (int d = 0; d < qnd - 1; d++)
            if (k->shape[d] != v->shape[d])
                return kv_err_set(e, "keys %s and values %s disagree",
                                  shp(k, a, sizeof a), shp(v, c, sizeof c));
        if (!thd && k->shape[0] != q->shape[0])
            return kv_err_set(e, "batch differs: query %s, keys %s",
                              shp(q, a, sizeof a), shp(k, c, sizeof c));
    }
    if (p->D < 1 || p->Dv < 1)
        return kv_err_set(e, "head size must be at least 1: query %s", shp(q, a, sizeof a));
    if (p->Hkv < 1 || p->Hq < 1 || p->Hq % p->Hkv != 0)
        return kv_err_set(e, "query heads %lld are not a multiple of kv heads %lld "
                          "(query %s, %s %s)", (long long)p->Hq, (long long)p->Hkv,
                          shp(q, a, sizeof a), p->paged ? "kv cache" : "keys",
                          shp(p->paged ? r->kv_cache : k, c, sizeof c));
    p->G = p->Hq / p->Hkv;
    return 0;
}

/* Plan, step 2: the requests' query and key spans, from the layout and the lengths. */
static int plan_requests(const struct kv_attn_req *r, struct plan *p, int thd,
                         struct kv_err *e)
{
    char a[128];
    const struct kv_tensor *q = r->q, *k = r->k;
    int64_t B;
    if (!thd) {
        B = q->shape[0];
        if (r->q_lens || r->kv_lens)
            return kv_err_set(e, "--q-lens/--kv-lens need the thd layout");
    } else if (r->q_lens) {
        B = (int64_t)r->n_q_lens;
    } else if (p->paged && r->seq_lens) {
        B = (int64_t)r->n_seq_lens;
    } else {
        B = 1;
    }
    if (p->paged && !r->seq_lens)
        return kv_err_set(e, "a paged cache needs --seq-lens");
    if (r->seq_lens && (int64_t)r->n_seq_lens != B)
        return kv_err_set(e, "--seq-lens has %zu entries for %lld requests",
                          r->n_seq_lens, (long long)B);
    if (r->kv_lens && r->n_kv_lens != r->n_q_lens)
        return kv_err_set(e, "--kv-lens has %zu entries, --q-lens %zu",
                          r->n_kv_lens, r->n_q_lens);
    if (r->kv_lens && p->paged)
        return kv_err_set(e, "a paged cache takes --seq-lens, not --kv-lens");
    if (check_lens(r->q_lens, r->n_q_lens, "--q-lens", e) ||
        check_lens(r->kv_lens, r->n_kv_lens, "--kv-lens", e) ||
        check_lens(r->seq_lens, r->n_seq_lens, "--seq-lens", e))
        return -1;
    p->B = B;
    size_t nb = (size_t)(B > 0 ? B : 1);
    p->q_start = calloc(nb, sizeof(int64_t));
    p->q_len = calloc(nb, sizeof(int64_t));
    p->kv_start = calloc(nb, sizeof(int64_t));
    p->kv_len = calloc(nb, sizeof(int64_t));
    if (!p->q_start || !p->q_len || !p->kv_start || !p->kv_len)
        return kv_err_set(e, "out of memory");
    if (!thd) {
        int64_t Lk = p->paged ? 0 : k->shape[2];
        for (int64_t b = 0; b < B; b++) {
            p->q_len[b] = q->shape[2];
            p->kv_len[b] = Lk;
            if (r->seq_lens) {
                if (!p->paged && r->seq_lens[b] > Lk)
                    return kv_err_set(e, "--seq-lens: %lld keys for request %lld, keys %s hold %lld",
                                      (long long)r->seq_lens[b], (long long)b,
                                      shp(k, a, sizeof a), (long long)Lk);
                p->kv_len[b] = r->seq_lens[b];
            }
        }
    } else {
        int64_t Tq = q->shape[0], sq = 0, sk = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t lq = r->q_lens ? r->q_lens[b] : (p->paged ? 1 : Tq);
            int64_t lk = r->kv_lens ? r->kv_lens[b] : r->q_lens ? lq : (p->paged ? 0 : k->shape[0]);
            if (p->paged)
                lk = r->seq_lens[b];
            else if (r->seq_lens)
                return kv_err_set(e, "thd layout takes --kv-lens, not --seq-lens");
            p->q_start[b] = sq;
            p->q_len[b] = lq;
            p->kv_start[b] = sk;
            p->kv_len[b] = lk;
            if (lq > INT64_MAX / 4 - sq || lk > INT64_MAX / 4 - sk)
                return kv_err_set(e, "lengths overflow");
            sq += lq;
            sk += lk;
        }
        if (sq != Tq)
            return kv_err_set(e, "query %s holds %lld tokens, the query lengths add up to %lld",
                              shp(q, a, sizeof a), (long long)Tq, (long long)sq);
        if (!p->paged && sk != k->shape[0])
            return kv_err_set(e, "keys %s hold %lld tokens, the kv lengths add up to %lld",
                              shp(k, a, sizeof a), (long long)k->shape[0], (long long)sk);
    }
    return 0;
}

/* Plan, step 3: base pointers and strides of q, k and v (paged or dense). */
static int plan_operands(const struct kv_attn_req *r, struct plan *p, int thd,
                         struct kv_err *e)
{
    char a[128];
    const struct kv_tensor *q = r->q, *k = r->k, *v = r->v;
    int64_t B = p->B;
    p->q.dtype = q->dtype;
    p->q.base = q->data;
    p->q.esize = kv_dtype_size(q->dtype);
    if (thd) {
        p->q.sb = 0; p->q.sh = p->D; p->q.ss = p->Hq * p->D;
    } else {
        p->q.sb = p->Hq * q->shape[2] * p->D; p->q.sh = q->shape[2] * p->D; p->q.ss = p->D;
    }
    if (p->paged) {
        const struct kv_tensor *kc = r->kv_cache;
        int64_t nblk = kc->shape[1], bs = kc->shape[2];
        p->page = bs;
        p->page_stride = bs * p->Hkv * p->D;
        p->bt = r->block_table;
        p->bt_cols = (int64_t)r->bt_cols;
        if (!r->block_table)
            return kv_err_set(e, "a paged cache needs --block-table");
        if ((int64_t)r->bt_rows < B)
            return kv_err_set(e, "block table has %zu rows for %lld requests",
                              r->bt_rows, (long long)B);
        for (int64_t b = 0; b < B; b++) {
            int64_t need = (p->kv_len[b] + bs - 1) / bs;
            if (need > p->bt_cols)
                return kv_err_set(e, "block table too short: request %lld has %lld tokens, "
                                  "needs %lld blocks of %lld, table (%zu, %zu) has %zu",
                                  (long long)b, (long long)p->kv_len[b], (long long)need,
                                  (long long)bs, r->bt_rows, r->bt_cols, r->bt_cols);
            for (int64_t c2 = 0; c2 < need; c2++) {
                int64_t id = p->bt[b * p->bt_cols + c2];
                if (id < 0 || id >= nblk)
                    return kv_err_set(e, "block table row %lld: block %lld outside the "
                                      "cache %s", (long long)b, (long long)id, shp(kc, a, sizeof a));
            }
        }
        p->k.dtype = p->v.dtype = kc->dtype;
        p->k.esize = p->v.esize = kv_dtype_size(kc->dtype);
        p->k.base = kc->data;
        p->v.base = (char *)kc->data + (size_t)(nblk * p->page_stride) * p->k.esize;
        p->k.sh = p->v.sh = p->D;
        p->k.ss = p->v.ss = p->Hkv * p->D;
    } else {
        p->k.dtype = k->dtype;
        p->v.dtype = v->dtype;
        p->k.base = k->data;
        p->v.base = v->data;
        p->k.esize = kv_dtype_size(k->dtype);
        p->v.esize = kv_dtype_size(v->dtype);
        if (thd) {
            p->k.sb = 0; p->k.sh = p->D; p->k.ss = p->Hkv * p->D;
            p->v.sb = 0; p->v.sh = p->Dv; p->v.ss = p->Hkv * p->Dv;
        } else {
            int64_t Lk = k->shape[2];
            p->k.sb = p->Hkv * Lk * p->D; p->k.sh = Lk * p->D; p->k.ss = p->D;
            p->v.sb = p->Hkv * Lk * p->Dv; p->v.sh = Lk * p->Dv; p->v.ss = p->Dv;
        }
    }
    return 0;
}

/* Plan, step 4: the output's dtype, shape and strides. */
static int plan_output(const struct kv_attn_req *r, struct plan *p, int thd, int64_t *out_shape,
                       int *out_ndim, struct kv_err *e)
{
    const struct kv_tensor *q = r->q;
    int qnd = thd ? 3 : 4;
    enum kv_dtype od = r->out_dtype == KV_NDTYPES ? q->dtype : r->out_dtype;
    if (!is_input_float(od))
        return kv_err_set(e, "output dtype %s is not a float type", kv_dtype_name(od));
    p->out.dtype = od;
    p->out.esize = kv_dtype_size(od);
    *out_ndim = qnd;
    for (int d = 0; d < qnd - 1; d++)
        out_shape[d] = q->shape[d];
    out_shape[qnd - 1] = p->Dv;
    if (thd) {
        p->out.sb = 0; p->out.sh = p->Dv; p->out.ss = p->Hq * p->Dv;
        p->lsb = 0; p->lsh = 1; p->lss = p->Hq;
    } else {
        int64_t Lq = q->shape[2];
        p->out.sb = p->Hq * Lq * p->Dv; p->out.sh = Lq * p->Dv; p->out.ss = p->Dv;
        p->lsb = p->Hq * Lq; p->lsh = Lq; p->lss = 1;
    }
    return 0;
}

/* Plan, step 5: the mask, block mask and scale. */
static int plan_masks(const struct kv_attn_req *r, struct plan *p, int thd,
                      struct kv_err *e)
{
    const struct kv_tensor *q = r->q, *k = r->k;
    int64_t B = p->B;
    if (r->window < 0)
        return kv_err_set(e, "window %lld is negative", (long long)r->window);
    p->causal = r->causal;
    p->window = r->window;
    if (r->mask) {
        const struct kv_tensor *m = r->mask;
        int64_t tgt[4], st[4];
        if (p->paged)
            return kv_err_set(e, "an explicit mask cannot be combined with a paged cache");
        if (m->dtype == KV_F16 || m->dtype == KV_BF16 || m->dtype == KV_F32 || m->dtype == KV_F64) {
            p->mfloat = 1;
            /* a keep-convention float mask (kvmask --keep --dtype f32) is
             * 1.0 = attend, 0 = masked: never additive */
            p->mbinary = r->mask_binary || r->mask_keep;
        }
        p->mdtype = m->dtype;
        p->msize = kv_dtype_size(m->dtype);
        p->mkeep = r->mask_keep;
        p->mask = m->data;
        if (!thd) {
            tgt[0] = B; tgt[1] = p->Hq; tgt[2] = q->shape[2]; tgt[3] = k->shape[2];
            if (bcast_strides(m, 4, tgt, st, "mask", e))
                return -1;
            p->msb = st[0]; p->msh = st[1]; p->msi = st[2]; p->msj = st[3];
        } else {
            tgt[0] = p->Hq; tgt[1] = q->shape[0]; tgt[2] = k->shape[0];
            if (bcast_strides(m, 3, tgt, st, "mask", e))
                return -1;
            p->msb = 0; p->msh = st[0]; p->msi = st[1]; p->msj = st[2];
            p->mpacked = 1;
        }
        if (kv_tensor_numel(m) == 0)
            p->mask = NULL;
    }
    if (r->block_mask) {
        const struct kv_tensor *m = r->block_mask;
        int64_t tgt[4], st[4];
        if (thd && B != 1)
            return kv_err_set(e, "a block mask needs the bhsd layout or a single request");
        if (r->block_size < 1)
            return kv_err_set(e, "a block mask needs --block-size");
        if (kv_dtype_is_float(m->dtype))
            return kv_err_set(e, "block mask: dtype %s, expected bool or integer (1 = keep)",
                              kv_dtype_name(m->dtype));
        int64_t bs = r->block_size, Lq = 0, Lk = 0;
        for (int64_t b = 0; b < B; b++) {
            if (p->q_len[b] > Lq) Lq = p->q_len[b];
            if (p->kv_len[b] > Lk) Lk = p->kv_len[b];
        }
        if (!p->paged && !thd)
            Lk = k->shape[2];
        tgt[0] = B; tgt[1] = p->Hq; tgt[2] = (Lq + bs - 1) / bs; tgt[3] = (Lk + bs - 1) / bs;
        if (bcast_strides(m, 4, tgt, st, "block mask", e))
            return -1;
        p->bm = m;
        p->bs = bs;
        p->bsb = st[0]; p->bsh = st[1]; p->bsq = st[2]; p->bsk = st[3];
        if (kv_tensor_numel(m) == 0)
            p->bm = NULL;
    }
    if (r->has_scale) {
        if (!isfinite(r->scale))
            return kv_err_set(e, "scale %g is not finite", r->scale);
        p->scale = (float)r->scale;
    } else {
        p->scale = (float)(1.0 / sqrt((double)p->D));
    }
    p->scalar = r->scalar;
    p->generic = r->generic;
    p->p_f32 = r->p_f32;
    p->bf16 = KV_BF16_NONE;
    if (!r->scalar && p->q.dtype == KV_BF16 && p->k.dtype == KV_BF16 &&
        p->v.dtype == KV_BF16 && r->bf16_route >= 0)
        p->bf16 = r->bf16_route > 0 ? (enum kv_bf16_route)r->bf16_route
                                    : kv_bf16_route_best();
    /* an instruction this CPU lacks (or KVTOOLS_ISA bars): the f32 path */
    if ((p->bf16 == KV_BF16_AVX512 || p->bf16 == KV_BF16_NEON) && p->bf16 != kv_bf16_route_best())
        p->bf16 = KV_BF16_NONE;
    return 0;
}

/* Fill p from r, validating every shape; allocates the per-request arrays. */
static int plan_build(const struct kv_attn_req *r, struct plan *p, int64_t *out_shape,
                      int *out_ndim, struct kv_err *e)
{
    int thd = r->layout == KV_ATTN_THD;
    memset(p, 0, sizeof *p);
    if (plan_heads(r, p, thd, e) || plan_requests(r, p, thd, e) ||
        plan_operands(r, p, thd, e) || plan_output(r, p, thd, out_shape, out_ndim, e) ||
        plan_masks(r, p, thd, e))
        return -1;
    return 0;
}

/* One work space per thread for tiles of M stacked rows (plan_items). */
static int pool_alloc(struct plan *p, const struct kv_attn_req *r, int64_t M, int nt,
                      struct kv_err *e)
{
    /* transposed queries, and the scores stored transposed (sp_tile) */
    const int64_t nqt = p->bm ? SP_LD(M) * p->D : 1, ns = p->bm ? SP_LD(M) * p->tk : M * p->tk;
    size_t per = (size_t)(M * p->D + nqt + ns + M * p->Dv + p->tk * p->D + p->tk * p->Dv
                          + 3 * M) * sizeof(float) + (size_t)(2 * M) * sizeof(int64_t);
    if (p->bf16 != KV_BF16_NONE) {
        p->ldqb = (p->D + 1) / 2 * 2;
        p->ldpb = (p->tk + 2) / 2 * 2;
        p->psk = 32 * ((p->D + 1) / 2);
        p->psv = 32 * ((p->tk + 1) / 2);
        per += (size_t)(M * (p->ldqb + p->ldpb)) * sizeof(uint16_t)
               + (size_t)(((p->tk + 31) / 32) * p->psk + ((p->Dv + 31) / 32) * p->psv)
                 * sizeof(uint32_t);
    }
    if (r->max_bytes && per * (size_t)nt > r->max_bytes)
        return kv_err_set(e, "attention needs %zu bytes of work space, limit is %zu",
                          per * (size_t)nt, r->max_bytes);
    p->pool = calloc((size_t)nt, sizeof *p->pool);
    if (!p->pool)
        return kv_err_set(e, "out of memory");
    p->n_pool = nt;
    for (int i = 0; i < nt; i++) {
        struct scratch *w = &p->pool[i];
        atomic_init(&w->busy, 0);
        w->qs = malloc((size_t)(M * p->D) * sizeof(float));
        w->qt = malloc((size_t)nqt * sizeof(float));
        w->s = malloc((size_t)ns * sizeof(float));
        w->o = malloc((size_t)(M * p->Dv) * sizeof(float));
        w->kt = malloc((size_t)(p->tk * p->D) * sizeof(float));
        w->vt = malloc((size_t)(p->tk * p->Dv) * sizeof(float));
        w->m = malloc((size_t)M * sizeof(float));
        w->l = malloc((size_t)M * sizeof(float));
        w->lo = malloc((size_t)M * sizeof(int64_t));
        w->hi = malloc((size_t)M * sizeof(int64_t));
        w->keep = malloc((size_t)(p->hs * (p->bm ? p->tk / p->bs + 2 : 1)));
        if (p->bf16 != KV_BF16_NONE) {
            /* zeroed: the models read whole panels, padding included */
            w->qb = calloc((size_t)(M * p->ldqb), sizeof(uint16_t));
            w->pb = calloc((size_t)(M * p->ldpb), sizeof(uint16_t));
            w->kp = calloc((size_t)(((p->tk + 31) / 32) * p->psk), sizeof(uint32_t));
            w->vp = calloc((size_t)(((p->Dv + 31) / 32) * p->psv), sizeof(uint32_t));
            if (!w->qb || !w->pb || !w->kp || !w->vp)
                return kv_err_set(e, "out of memory for bf16 work space");
        }
        if (!w->qs || !w->qt || !w->s || !w->o || !w->kt || !w->vt || !w->m || !w->l ||
            !w->lo || !w->hi || !w->keep)
            return kv_err_set(e, "out of memory for %zu bytes of work space", per);
    }
    return 0;
}

/* Cut the work into items and allocate one scratch set per thread. */
static int plan_items(struct plan *p, const struct kv_attn_req *r, int n_threads,
                      struct kv_err *e)
{
    int64_t target = r->tile_q > 0 ? r->tile_q : 256;
    p->hs = p->G;
    if (p->bm && p->bsh != 0)
        p->hs = 1;                  /* blocks differ per head: do not stack */
    if (p->hs > target)
        p->hs = 1;
    p->tq = target / p->hs;
    if (p->tq < 1)
        p->tq = 1;
    p->tk = r->tile_k > 0 ? r->tile_k : 512;
    if (p->bm && p->tq > p->bs)
        p->tq = p->bs;

    /* decode mode: few queries per request, the small kernels available,
     * no block mask.  The choice depends on the shapes only, never on the
     * thread count, so the output stays bit-identical for any -j. */
    /* (the model of BFDOT has no decode tile: its route runs the tiles) */
    p->decode = r->tile_q == 0 && !p->bm && small_ok(p, 4) && p->bf16 != KV_BF16_MODEL_ARM;
    for (int64_t b = 0; p->decode && b < p->B; b++)
        if (p->q_len[b] > 4)
            p->decode = 0;
    p->Gp = (p->G + 3) / 4 * 4;
    if (p->Hkv * p->Gp > 1024)
        p->decode = 0;
    if (p->decode) {
        size_t n = 0;
        p->kc = 4096;
        for (int64_t b = 0; b < p->B; b++) {
            int64_t chunks = p->kv_len[b] > 0 ? (p->kv_len[b] + p->kc - 1) / p->kc : 1;
            n += (size_t)(p->q_len[b] * chunks);
        }
        p->items = calloc(n ? n : 1, sizeof *p->items);
        size_t part_bytes;
        if (kv_size_mul(n ? n : 1, (size_t)(p->Hq * (p->Dv + 2)) * sizeof(float), &part_bytes))
            return kv_err_set(e, "too many requests");
        if (r->max_bytes && part_bytes > r->max_bytes)
            return kv_err_set(e, "attention needs %zu bytes for partial results, limit is %zu",
                              part_bytes, r->max_bytes);
        p->part = malloc(part_bytes);
        if (!p->items || !p->part)
            return kv_err_set(e, "out of memory");
        p->n_items = n;
        size_t at = 0;
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t i = 0; i < p->q_len[b]; i++) {
                int64_t c0 = 0;
                do {
                    struct item *it = &p->items[at++];
                    it->b = b; it->i0 = i; it->i1 = i + 1;
                    it->j0 = c0;
                    it->j1 = c0 + p->kc < p->kv_len[b] ? c0 + p->kc : p->kv_len[b];
                    c0 += p->kc;
                } while (c0 < p->kv_len[b]);
            }
        p->hs = p->Hkv * p->Gp;     /* rows of the work space */
        p->tq = 1;
    }

    size_t n = 0;
    for (int64_t b = 0; !p->decode && b < p->B; b++) {
        int64_t per = 0;
        for (int64_t i0 = 0; i0 < p->q_len[b];) {
            int64_t i1 = i0 + p->tq;
            if (p->bm && i1 > (i0 / p->bs + 1) * p->bs)
                i1 = (i0 / p->bs + 1) * p->bs;
            if (i1 > p->q_len[b])
                i1 = p->q_len[b];
            per++;
            i0 = i1;
        }
        n += (size_t)(per * (p->Hq / p->hs));
    }
    if (!p->decode) {
        p->items = calloc(n ? n : 1, sizeof *p->items);
        if (!p->items)
            return kv_err_set(e, "out of memory");
        p->n_items = n;
    }
    size_t at = 0;
    for (int64_t b = 0; !p->decode && b < p->B; b++) {
        /* head by head, so that the threads share one head's keys and
         * values in the cache; within a head the last query tiles run
         * first (after the reversal below): under a causal mask they are
         * the costliest */
        for (int64_t h0 = 0; h0 < p->Hq; h0 += p->hs)
            for (int64_t i0 = 0; i0 < p->q_len[b];) {
                int64_t i1 = i0 + p->tq;
                if (p->bm && i1 > (i0 / p->bs + 1) * p->bs)
                    i1 = (i0 / p->bs + 1) * p->bs;
                if (i1 > p->q_len[b])
                    i1 = p->q_len[b];
                struct item *it = &p->items[at++];
                it->b = b; it->h0 = h0; it->i0 = i0; it->i1 = i1;
                i0 = i1;
            }
    }
    /* reverse so that late (long) tiles run first */
    for (size_t i = 0, j = n ? n - 1 : 0; !p->decode && i < j; i++, j--) {
        struct item t = p->items[i];
        p->items[i] = p->items[j];
        p->items[j] = t;
    }

    int64_t M = (p->hs * p->tq + 3) / 4 * 4;
    n = p->n_items;
    int nt = n_threads > 0 ? n_threads : kv_nproc();
    if (nt < 1)
        nt = 1;
    if ((size_t)nt > n && n > 0)
        nt = (int)n;
    return pool_alloc(p, r, M, nt, e);
}

int kv_attn_run(const struct kv_attn_req *r, struct kv_tensor *out,
                struct kv_tensor *lse, struct kv_err *e)
{
    struct plan p;
    struct kv_tensor o, l;
    int64_t oshape[KV_MAX_DIMS];
    int ond = 0;

    kv_tensor_init(&o);
    kv_tensor_init(&l);
    if (plan_build(r, &p, oshape, &ond, e))
        goto fail;
    if (kv_tensor_alloc(&o, p.out.dtype, ond, oshape, r->max_bytes, e))
        goto fail;
    advise_huge(o.data, o.nbytes);
    if (lse && kv_tensor_alloc(&l, KV_F32, ond - 1, oshape, r->max_bytes, e))
        goto fail;
    if (plan_items(&p, r, r->n_threads, e))
        goto fail;
    p.progress = r->progress;
    p.progress_ctx = r->progress_ctx;
    atomic_init(&p.n_done, 0);
    atomic_init(&p.progress_busy, 0);
    p.out.base = o.data;
    p.lse = lse ? l.data : NULL;
    if (!r->scalar)
        openblas_set_num_threads(1);
    if (p.decode) {
        float *acc = malloc((size_t)p.Dv * sizeof(float));
        if (!acc) {
            kv_err_set(e, "out of memory");
            goto fail;
        }
        kv_parallel_for(p.n_items, p.n_pool, run_decode_item, &p);
        merge_decode(&p, acc);
        free(acc);
    } else {
        kv_parallel_for(p.n_items, p.n_pool, run_item, &p);
    }
    memset(&last_stats, 0, sizeof last_stats);
    last_stats.items = p.n_items;
    last_stats.bf16_route = !p.decode ? p.bf16 : dec_tiles_ok(&p) ? p.bf16 : KV_BF16_NONE;
    for (size_t i = 0; i < p.n_items; i++) {
        last_stats.tiles_done += p.items[i].done;
        last_stats.tiles_skipped += p.items[i].skipped;
    }
    plan_free(&p);
    kv_tensor_move(out, &o);
    if (lse)
        kv_tensor_move(lse, &l);
    return 0;
fail:
    plan_free(&p);
    kv_tensor_release(&o);
    kv_tensor_release(&l);
    return -1;
}

/* ---- LSE merge ----------------------------------------------------- */

int kv_attn_merge(const struct kv_tensor *outs, const struct kv_tensor *lses,
                  size_t n, enum kv_dtype out_dtype, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e)
{
    char a[128], c[128];
    struct kv_tensor o, l;
    if (n < 1)
        return kv_err_set(e, "merge needs at least one part");
    const struct kv_tensor *o0 = &outs[0];
    if (o0->ndim < 1)
        return kv_err_set(e, "output 1: shape %s has no feature axis", shp(o0, a, sizeof a));
    for (size_t i = 0; i < n; i++) {
        const struct kv_tensor *oi = &outs[i], *li = &lses[i];
        if (!kv_dtype_is_float(oi->dtype) || !kv_dtype_is_float(li->dtype))
            return kv_err_set(e, "part %zu: dtypes %s/%s, expected float", i + 1,
                              kv_dtype_name(oi->dtype), kv_dtype_name(li->dtype));
        int same = oi->ndim == o0->ndim;
        for (int d = 0; same && d < o0->ndim; d++)
            same = oi->shape[d] == o0->shape[d];
        if (!same)
            return kv_err_set(e, "output shapes differ: part 1 %s, part %zu %s",
                              shp(o0, a, sizeof a), i + 1, shp(oi, c, sizeof c));
        same = li->ndim == o0->ndim - 1;
        for (int d = 0; same && d < li->ndim; d++)
            same = li->shape[d] == o0->shape[d];
        if (!same)
            return kv_err_set(e, "part %zu: lse shape %s does not match output %s "
                              "without its last axis", i + 1, shp(li, a, sizeof a),
                              shp(oi, c, sizeof c));
    }
    enum kv_dtype od = out_dtype == KV_NDTYPES ? o0->dtype : out_dtype;
    if (!is_input_float(od))
        return kv_err_set(e, "output dtype %s is not a float type", kv_dtype_name(od));
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    if (kv_tensor_alloc(&o, od, o0->ndim, o0->shape, 0, e) ||
        kv_tensor_alloc(&l, KV_F32, o0->ndim - 1, o0->shape, 0, e)) {
        kv_tensor_release(&o);
        return -1;
    }
    size_t Dv = (size_t)o0->shape[o0->ndim - 1];
    size_t rows = kv_tensor_numel(&l);
    double *acc = malloc((Dv ? Dv : 1) * sizeof(double));
    double *w = malloc(n * sizeof(double));
    float *row = malloc((Dv ? Dv : 1) * sizeof(float));
    if (!acc || !w || !row) {
        free(acc); free(w); free(row);
        kv_tensor_release(&o);
        kv_tensor_release(&l);
        return kv_err_set(e, "out of memory");
    }
    float *lo = l.data;
    for (size_t r = 0; r < rows; r++) {
        double m = -INFINITY, sum = 0.0;
        int nan = 0;
        for (size_t i = 0; i < n; i++) {
            double x = kv_tensor_get_f64(&lses[i], r);
            if (x == INFINITY)
                x = -INFINITY;
            if (isnan(x))
                nan = 1;
            w[i] = x;
            if (x > m)
                m = x;
        }
        for (size_t d = 0; d < Dv; d++)
            acc[d] = 0.0;
        double L;
        if (nan) {
            L = NAN;
            for (size_t d = 0; d < Dv; d++)
                acc[d] = NAN;
        } else if (m == -INFINITY) {
            L = -INFINITY;
        } else {
            for (size_t i = 0; i < n; i++) {
                w[i] = exp(w[i] - m);
                sum += w[i];
            }
            L = m + log(sum);
            for (size_t i = 0; i < n; i++) {
                double wi = w[i] / sum;
                if (wi == 0.0)
                    continue;
                for (size_t d = 0; d < Dv; d++)
                    acc[d] += wi * kv_tensor_get_f64(&outs[i], r * Dv + d);
            }
        }
        for (size_t d = 0; d < Dv; d++)
            row[d] = (float)acc[d];
        if (od == KV_F64) {
            double *dst = (double *)o.data + r * Dv;
            for (size_t d = 0; d < Dv; d++)
                dst[d] = acc[d];
        } else {
            store_f32((char *)o.data + r * Dv * kv_dtype_size(od), row, od, (int64_t)Dv);
        }
        lo[r] = (float)L;
    }
    free(acc); free(w); free(row);
    kv_tensor_move(out, &o);
    if (lse)
        kv_tensor_move(lse, &l);
    else
        kv_tensor_release(&l);
    return 0;
}
