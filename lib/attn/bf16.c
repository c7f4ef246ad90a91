/* bf16.c - bf16 dot-product tiles: the instructions' models, the routes
 * and the packing (see bf16.h). */
#include "attn/bf16.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "core/isa.h"

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 10)
#include <immintrin.h>
#define BF16_X86 1
#endif
#if defined(__aarch64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 10)
#include <arm_neon.h>
#define BF16_ARM 1
#endif

/* ---- the models ----------------------------------------------------- */

/* A bf16 as a double, subnormals as zero (both instructions' inputs). */
static double bf16_daz(uint32_t h)
{
    uint32_t u = (h & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    if ((u & 0x7f800000u) == 0 && (u & 0x7fffffu))
        return f < 0 ? -0.0 : 0.0;
    return f;
}

static float f32_daz(float f)
{
    return fpclassify(f) == FP_SUBNORMAL ? copysignf(0.0f, f) : f;
}

/* x + p rounded once to f32, nearest even (x an f32, p exact in double:
 * a product of two bf16 has 16 significant bits), a tiny result flushed to
 * a zero of its sign.  Tiny as x86 detects underflow, after rounding: the
 * sum rounded to 24 bits with the exponent unbounded is below 2^-126, that
 * is the exact sum is below 2^-126 - 2^-151 in magnitude (2^-126 - 2^-151
 * itself ties to 2^-126).  The double sum is corrected where it is an f32
 * halfway point but the exact sum is not. */
static float add_rne_ftz(double x, double p)
{
    double s = x + p;
    if (isfinite(s)) {
        double bb = s - x, e = (x - (s - bb)) + (p - bb);    /* s + e exact */
        const double tiny = 0x1p-126 - 0x1p-151;
        if (fabs(s) < tiny || (fabs(s) == tiny && e != 0.0 && (e < 0) != (s < 0)))
            return copysignf(0.0f, (float)s);
        if (e != 0.0) {
            float f = (float)s;
            float g = (double)f < s ? nextafterf(f, INFINITY) : nextafterf(f, -INFINITY);
            if (((double)f + (double)g) / 2.0 == s)
                s = nextafter(s, e > 0 ? INFINITY : -INFINITY);
        }
    }
    float r = (float)s;
    if (r != 0.0f && fabsf(r) < FLT_MIN)
        r = copysignf(0.0f, r);
    return r;
}

float kv_bf16_dot2_x86(float acc, uint32_t a, uint32_t b)
{
    double a0 = bf16_daz(a), a1 = bf16_daz(a >> 16);
    double b0 = bf16_daz(b), b1 = bf16_daz(b >> 16);
    float t = add_rne_ftz(f32_daz(acc), a1 * b1);
    return add_rne_ftz(t, a0 * b0);
}

/* x + y (both f32 values, held exactly in double) rounded to f32 by
 * round-to-odd: truncate, and set the last bit when inexact; past the
 * range an infinity; a result below FLT_MIN a zero of its sign; NaN the
 * default NaN. */
static float add_odd_ftz(double x, double y)
{
    double s = x + y;
    if (isnan(s))
        return NAN;
    if (isinf(s))
        return (float)s;
    double bb = s - x, e = (x - (s - bb)) + (y - bb);    /* s + e exact */
    if (fabs(s) >= 0x1p128)
        return s > 0 ? INFINITY : -INFINITY;
    if (fabs(s) < FLT_MIN)                  /* a zero keeps its sign */
        return copysignf(0.0f, (float)s);
    float t = fabs(s) > FLT_MAX ? copysignf(FLT_MAX, (float)s) : (float)s;
    if (fabs((double)t) > fabs(s))
        t = nextafterf(t, 0.0f);                /* toward zero */
    int inexact = (double)t != s || e != 0.0;
    if ((double)t == s && e != 0.0 && (e < 0) != (s < 0))
        t = nextafterf(t, 0.0f);                /* exact sum is just inside */
    if (inexact) {
        uint32_t u;
        memcpy(&u, &t, sizeof u);
        u |= 1u;
        memcpy(&t, &u, sizeof t);
    }
    if (fabsf(t) < FLT_MIN)
        t = copysignf(0.0f, t);
    return t;
}

/* A product of two bf16 as BFMul gives it: exact, or infinity past the
 * range, or zero below FLT_MIN. */
static double mul_ftz(double a, double b)
{
    double p = a * b;
    if (fabs(p) >= 0x1p128)
        return p > 0 ? INFINITY : -INFINITY;
    if (fabs(p) < FLT_MIN)
        return copysign(0.0, p);
    return p;
}

float kv_bf16_dot2_arm(float acc, uint32_t a, uint32_t b)
{
    double p0 = mul_ftz(bf16_daz(a), bf16_daz(b));
    double p1 = mul_ftz(bf16_daz(a >> 16), bf16_daz(b >> 16));
    float t = add_odd_ftz(p0, p1);
    return add_odd_ftz(f32_daz(acc), t);
}

void kv_bf16_mmla_arm(float acc[4], const uint32_t n[4], const uint32_t m[4])
{
    float r[4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            float t = kv_bf16_dot2_arm(acc[2 * i + j], n[2 * i], m[2 * j]);
            r[2 * i + j] = kv_bf16_dot2_arm(t, n[2 * i + 1], m[2 * j + 1]);
        }
    memcpy(acc, r, sizeof r);
}

/* ---- the kernel against the models ---------------------------------- */

typedef struct { float f[16]; } mvf;
typedef struct { uint32_t w[16]; } mvp;

static mvf mvf_zero(void)
{
    mvf v;
    memset(&v, 0, sizeof v);
    return v;
}

static mvf mvf_load_n(const float *p, int64_t n)
{
    mvf v = mvf_zero();
    memcpy(v.f, p, (size_t)n * sizeof(float));
    return v;
}

static void mvf_store_n(float *p, mvf v, int64_t n)
{
    memcpy(p, v.f, (size_t)n * sizeof(float));
}

static mvf mvf_scale(mvf v, float s)
{
    for (int i = 0; i < 16; i++)
        v.f[i] *= s;
    return v;
}

static mvp mvp_load(const uint32_t *p)
{
    mvp v;
    memcpy(v.w, p, sizeof v.w);
    return v;
}

static mvp mvp_bcast(uint32_t w)
{
    mvp v;
    for (int i = 0; i < 16; i++)
        v.w[i] = w;
    return v;
}

static mvf dot_model_x86(mvf acc, mvp a, mvp b)
{
    for (int i = 0; i < 16; i++)
        acc.f[i] = kv_bf16_dot2_x86(acc.f[i], a.w[i], b.w[i]);
    return acc;
}

static mvf dot_model_arm(mvf acc, mvp a, mvp b)
{
    for (int i = 0; i < 16; i++)
        acc.f[i] = kv_bf16_dot2_arm(acc.f[i], a.w[i], b.w[i]);
    return acc;
}

/* The lane sums of 16 vectors in the instruction route's order (halves,
 * quarters, pairs, the last two: _mm512_reduce_add_ps's). */
static mvf mvf_sum16(const mvf *a)
{
    mvf v;
    for (int t = 0; t < 16; t++) {
        float s8[8], s4[4], s2[2];
        for (int i = 0; i < 8; i++)
            s8[i] = a[t].f[i + 8] + a[t].f[i];
        for (int i = 0; i < 4; i++)
            s4[i] = s8[i + 4] + s8[i];
        for (int i = 0; i < 2; i++)
            s2[i] = s4[i + 2] + s4[i];
        v.f[t] = s2[0] + s2[1];
    }
    return v;
}

/* Pairs (a[c], b[c]) of the bf16 elements c = c0..c0+15 of a and b (32
 * each, two to a word, the even one low), a's in the low half. */
static mvp mvp_zip(mvp a, mvp b, int c0)
{
    mvp v;
    for (int i = 0; i < 16; i++) {
        int c = c0 + i;
        uint32_t x = a.w[c / 2] >> (16 * (c % 2)) & 0xffffu;
        uint32_t y = b.w[c / 2] >> (16 * (c % 2)) & 0xffffu;
        v.w[i] = x | y << 16;
    }
    return v;
}

#define VF mvf
#define VP mvp
#define VF_ZERO() mvf_zero()
#define VF_LOAD_N(p, n) mvf_load_n((p), (n))
#define VF_STORE_N(p, v, n) mvf_store_n((p), (v), (n))
#define VF_SCALE(v, s) mvf_scale((v), (s))
#define VP_LOAD(p) mvp_load(p)
#define VP_BCAST(w) mvp_bcast(w)
#define VF_DOT(acc, a, b) dot_model_x86((acc), (a), (b))
#define DQK dqk_model_x86
#define VF_SUM16(a) mvf_sum16(a)
#define DPV dpv_model_x86
#define VP_ZIP_LO(a, b) mvp_zip((a), (b), 0)
#define VP_ZIP_HI(a, b) mvp_zip((a), (b), 16)
#define VP_ZERO() mvp_bcast(0)
#define KERN gemm_model_x86
#define KERN_ATTR
#include "attn/bf16_kern.h"

#define VF mvf
#define VP mvp
#define VF_ZERO() mvf_zero()
#define VF_LOAD_N(p, n) mvf_load_n((p), (n))
#define VF_STORE_N(p, v, n) mvf_store_n((p), (v), (n))
#define VF_SCALE(v, s) mvf_scale((v), (s))
#define VP_LOAD(p) mvp_load(p)
#define VP_BCAST(w) mvp_bcast(w)
#define VF_DOT(acc, a, b) dot_model_arm((acc), (a), (b))
#define KERN gemm_model_arm
#define KERN_ATTR
#include "attn/bf16_kern.h"

/* BFMMLA's model on 2x2 blocks. */
typedef struct { float f[4]; } mvm;
typedef struct { uint32_t w[4]; } mvq;

static mvq mvq_load22(const uint32_t *p0, const uint32_t *p1)
{
    mvq v = {{p0[0], p0[1], p1[0], p1[1]}};
    return v;
}

static mvq mvq_load4(const uint32_t *p)
{
    mvq v = {{p[0], p[1], p[2], p[3]}};
    return v;
}

static mvq mvq_zip(mvq x, mvq y, int h)
{
    mvq v = {{x.w[2 * h], y.w[2 * h], x.w[2 * h + 1], y.w[2 * h + 1]}};
    return v;
}

static mvm mvm_set(const float *f)
{
    mvm v = {{f[0], f[1], f[2], f[3]}};
    return v;
}

static mvm mmla_model_arm(mvm acc, mvq n, mvq m)
{
    kv_bf16_mmla_arm(acc.f, n.w, m.w);
    return acc;
}

#define VM mvm
#define VQ mvq
#define VQ_LOAD4(p) mvq_load4(p)
#define VQ_LOAD22(p0, p1) mvq_load22((p0), (p1))
#define VQ_ZIP1(x, y) mvq_zip((x), (y), 0)
#define VQ_ZIP2(x, y) mvq_zip((x), (y), 1)
#define VM_MMLA(acc, a, b) mmla_model_arm((acc), (a), (b))
#define VM_GET(v, i) ((v).f[i])
#define VM_SET(f) mvm_set(f)
#define MMLA mmla_model_arm_gemm
#define KERN_ATTR
#include "attn/bf16_kern.h"

/* ---- the kernel against VDPBF16PS ----------------------------------- */

#ifdef BF16_X86
#define X86_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#include "attn/sum16_x86.h"

#define VF __m512
#define VP __m512i
#define VF_ZERO() _mm512_setzero_ps()
#define VF_LOAD_N(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1), (p))
#define VF_STORE_N(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1), (v))
#define VF_SCALE(v, s) _mm512_mul_ps((v), _mm512_set1_ps(s))
#define VP_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define VP_BCAST(w) _mm512_set1_epi32((int)(w))
#define VF_DOT(acc, a, b) _mm512_dpbf16_ps((acc), (__m512bh)(a), (__m512bh)(b))
#define DQK dqk_avx512
#define VF_SUM16(a) kv_sum16_avx512(a)
#define DPV dpv_avx512
#define VP_ZIP_LO(a, b) _mm512_permutex2var_epi16((a), _mm512_set_epi16( \
    47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,              \
    39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0), (b))
#define VP_ZIP_HI(a, b) _mm512_permutex2var_epi16((a), _mm512_set_epi16( \
    63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24,            \
    55, 23, 54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16), (b))
#define VP_ZERO() _mm512_setzero_si512()
#define KERN gemm_avx512
#define KERN_ATTR X86_ATTR
#include "attn/bf16_kern.h"
#endif

/* ---- the kernel against BFDOT --------------------------------------- */

#ifdef BF16_ARM
#define ARM_ATTR __attribute__((target("arch=armv8.2-a+bf16")))
typedef struct { float32x4_t q[4]; } nvf;
typedef struct { uint32x4_t q[4]; } nvp;

ARM_ATTR static inline nvf nvf_zero(void)
{
    nvf v;
    for (int i = 0; i < 4; i++)
        v.q[i] = vdupq_n_f32(0.0f);
    return v;
}

ARM_ATTR static inline nvf nvf_load_n(const float *p, int64_t n)
{
    float t[16] = {0};
    memcpy(t, p, (size_t)n * sizeof(float));
    nvf v;
    for (int i = 0; i < 4; i++)
        v.q[i] = vld1q_f32(t + 4 * i);
    return v;
}

ARM_ATTR static inline void nvf_store_n(float *p, nvf v, int64_t n)
{
    if (n == 16) {
        for (int i = 0; i < 4; i++)
            vst1q_f32(p + 4 * i, v.q[i]);
        return;
    }
    float t[16];
    for (int i = 0; i < 4; i++)
        vst1q_f32(t + 4 * i, v.q[i]);
    memcpy(p, t, (size_t)n * sizeof(float));
}

ARM_ATTR static inline nvf nvf_scale(nvf v, float s)
{
    for (int i = 0; i < 4; i++)
        v.q[i] = vmulq_n_f32(v.q[i], s);
    return v;
}

ARM_ATTR static inline nvp nvp_load(const uint32_t *p)
{
    nvp v;
    for (int i = 0; i < 4; i++)
        v.q[i] = vld1q_u32(p + 4 * i);
    return v;
}

ARM_ATTR static inline nvp nvp_bcast(uint32_t w)
{
    nvp v;
    for (int i = 0; i < 4; i++)
        v.q[i] = vdupq_n_u32(w);
    return v;
}

ARM_ATTR static inline nvf nvf_dot(nvf acc, nvp a, nvp b)
{
    for (int i = 0; i < 4; i++)
        acc.q[i] = vbfdotq_f32(acc.q[i], vreinterpretq_bf16_u32(a.q[i]),
                               vreinterpretq_bf16_u32(b.q[i]));
    return acc;
}

#define VF nvf
#define VP nvp
#define VF_ZERO() nvf_zero()
#define VF_LOAD_N(p, n) nvf_load_n((p), (n))
#define VF_STORE_N(p, v, n) nvf_store_n((p), (v), (n))
#define VF_SCALE(v, s) nvf_scale((v), (s))
#define VP_LOAD(p) nvp_load(p)
#define VP_BCAST(w) nvp_bcast(w)
#define VF_DOT(acc, a, b) nvf_dot((acc), (a), (b))
#define KERN gemm_neon
#define KERN_ATTR ARM_ATTR
#define KERN_MR 2
#include "attn/bf16_kern.h"

ARM_ATTR static inline float32x4_t nvm_set(const float *f)
{
    return vld1q_f32(f);
}

ARM_ATTR static inline uint32x4_t nvq_load22(const uint32_t *p0, const uint32_t *p1)
{
    return vcombine_u32(vld1_u32(p0), vld1_u32(p1));
}

#define VM float32x4_t
#define VQ uint32x4_t
#define VQ_LOAD4(p) vld1q_u32(p)
#define VQ_LOAD22(p0, p1) nvq_load22((p0), (p1))
#define VQ_ZIP1(x, y) vzip1q_u32((x), (y))
#define VQ_ZIP2(x, y) vzip2q_u32((x), (y))
#define VM_MMLA(acc, a, b) vbfmmlaq_f32((acc), vreinterpretq_bf16_u32(a), \
                                       vreinterpretq_bf16_u32(b))
#define VM_GET(v, i) ((v)[i])
#define VM_SET(f) nvm_set(f)
#define MMLA mmla_neon_gemm
#define KERN_ATTR ARM_ATTR
#include "attn/bf16_kern.h"
#endif

/* ---- routes and packing --------------------------------------------- */

enum kv_bf16_route kv_bf16_route_best(void)
{
#ifdef BF16_X86
    if (kv_isa_has(KV_ISA_AVX512BF16))
        return KV_BF16_AVX512;
#endif
#ifdef BF16_ARM
    if (kv_isa_has(KV_ISA_NEON_BF16))
        return KV_BF16_NEON;
#endif
    return KV_BF16_NONE;
}

enum kv_bf16_route kv_bf16_route_usable(enum kv_bf16_route r)
{
    if ((r == KV_BF16_AVX512 || r == KV_BF16_NEON) && r != kv_bf16_route_best())
        return KV_BF16_NONE;
    return r;
}

const char *kv_bf16_route_name(enum kv_bf16_route r)
{
    switch (r) {
    case KV_BF16_AVX512: return "avx512bf16";
    case KV_BF16_NEON: return "neon-bf16";
    case KV_BF16_MODEL_X86: return "model-x86";
    case KV_BF16_MODEL_ARM: return "model-arm";
    default: return "none";
    }
}

int kv_bf16_route_odd(enum kv_bf16_route r)
{
    return r == KV_BF16_NEON || r == KV_BF16_MODEL_ARM;
}

void kv_bf16_gemm(enum kv_bf16_route r, int64_t M, int64_t N, int64_t kp,
                  const uint16_t *A, int64_t lda, const uint32_t *Bp, int64_t ps,
                  float *C, int64_t ldc, float alpha, int accumulate)
{
    switch (r) {
#ifdef BF16_X86
    case KV_BF16_AVX512:
        gemm_avx512(M, N, kp, A, lda, Bp, ps, C, ldc, alpha, accumulate);
        return;
#endif
#ifdef BF16_ARM
    case KV_BF16_NEON:
        /* BFMMLA where the pairs come two by two: the same bits as BFDOT */
        if (kp % 2 == 0)
            mmla_neon_gemm(M, N, kp, A, lda, Bp, ps, C, ldc, alpha, accumulate);
        else
            gemm_neon(M, N, kp, A, lda, Bp, ps, C, ldc, alpha, accumulate);
        return;
#endif
    case KV_BF16_MODEL_ARM:
        gemm_model_arm(M, N, kp, A, lda, Bp, ps, C, ldc, alpha, accumulate);
        return;
    default:
        gemm_model_x86(M, N, kp, A, lda, Bp, ps, C, ldc, alpha, accumulate);
        return;
    }
}

void kv_bf16_pack_col(uint32_t *Bp, int64_t ps, int64_t j, const uint16_t *row,
                      int64_t d)
{
    uint32_t *dst = Bp + (j / 32) * ps + j % 32;
    int64_t k = 0;
    for (; 2 * k + 1 < d; k++)
        dst[k * 32] = (uint32_t)row[2 * k] | (uint32_t)row[2 * k + 1] << 16;
    if (2 * k < d)
        dst[k * 32] = row[2 * k];
}

#ifdef BF16_X86
/* 16 pairs (k0..k0+15, whole) of the 16 columns c0..c0+15 (all real) of
 * a panel: the 16 x 16 words transposed in registers (words, then pairs
 * of words, then quarters and halves of the vectors). */
__attribute__((target("avx512f")))
static void pack_16x16_avx512(uint32_t *P, const uint16_t *const *rows, int c0, int64_t k0,
                              int64_t kfull)
{
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i++) {
        const uint16_t *r = rows[c0 + i] + 2 * k0;
        if (k0 + 64 < kfull)
            _mm_prefetch((const char *)(r + 128), _MM_HINT_T0);
        a[i] = _mm512_loadu_si512((const void *)r);
    }
    for (int i = 0; i < 16; i += 2) {
        b[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);
        b[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        a[i] = _mm512_unpacklo_epi64(b[i], b[i + 2]);
        a[i + 1] = _mm512_unpackhi_epi64(b[i], b[i + 2]);
        a[i + 2] = _mm512_unpacklo_epi64(b[i + 1], b[i + 3]);
        a[i + 3] = _mm512_unpackhi_epi64(b[i + 1], b[i + 3]);
    }
    /* a[4g + s] holds, in 128-bit lane l, word 4l + s' of columns 4g..4g+3
     * (s' = 0, 1, 2, 3 for s = 0, 1, 2, 3) */
    for (int s = 0; s < 4; s++) {
        __m512i x = _mm512_shuffle_i32x4(a[s], a[4 + s], 0x88);      /* lanes 0, 2 */
        __m512i y = _mm512_shuffle_i32x4(a[s], a[4 + s], 0xdd);      /* lanes 1, 3 */
        __m512i z = _mm512_shuffle_i32x4(a[8 + s], a[12 + s], 0x88);
        __m512i w = _mm512_shuffle_i32x4(a[8 + s], a[12 + s], 0xdd);
        /* word 4l + s of the 16 columns, for l = 0, 1, 2, 3 */
        b[s] = _mm512_shuffle_i32x4(x, z, 0x88);
        b[8 + s] = _mm512_shuffle_i32x4(x, z, 0xdd);
        b[4 + s] = _mm512_shuffle_i32x4(y, w, 0x88);
        b[12 + s] = _mm512_shuffle_i32x4(y, w, 0xdd);
    }
    for (int k = 0; k < 16; k++)
        _mm512_storeu_si512((void *)(P + (k0 + k) * 32 + c0), b[k]);
}
#endif

void kv_bf16_pack_panel(uint32_t *P, const uint16_t *const *rows, int n, int64_t d)
{
    const int64_t kp = (d + 1) / 2, kfull = d / 2;
#ifdef BF16_X86
    const int vec = kv_isa_has(KV_ISA_AVX512);
#endif
    /* 16 pairs of every column at a time: 32 reads of 64 bytes, 16
     * writes of 128, all in L1 (the words the same in any order) */
    for (int64_t k0 = 0; k0 < kp; k0 += 16) {
        const int64_t k1 = k0 + 16 < kfull ? k0 + 16 : kfull;
        for (int c = 0; c < 32; c++) {
#ifdef BF16_X86
            if (vec && c % 16 == 0 && c + 16 <= n && k1 == k0 + 16) {
                pack_16x16_avx512(P, rows, c, k0, kfull);
                c += 15;
                continue;
            }
#endif
            uint32_t *dst = P + k0 * 32 + c;
            int64_t k = k0;
            if (c < n) {
                const uint16_t *r = rows[c];
                /* 32 rows at once defeat the hardware's stream
                 * prefetch: fetch each row's line four blocks ahead */
                if (k0 + 64 < kfull)
                    __builtin_prefetch(r + 2 * (k0 + 64));
                for (; k < k1; k++) {
                    uint32_t w;
                    memcpy(&w, r + 2 * k, sizeof w);
                    dst[(k - k0) * 32] = w;
                }
                if (k == kfull && kfull < kp && k < k0 + 16)
                    dst[(k++ - k0) * 32] = r[d - 1];
            }
            for (; k < k0 + 16 && k < kp; k++)
                dst[(k - k0) * 32] = 0;
        }
    }
}

void kv_bf16_pack_rows(uint32_t *Bp, int64_t ps, int64_t j, const uint16_t *r0,
                       const uint16_t *r1, int64_t n_cols)
{
    static const uint16_t zero[32];
    uint32_t *dst = Bp + (j / 2) * 32;
    int64_t c0 = 0;
    /* whole panels: 32 words from 32 elements of each row, a loop the
     * compiler turns into vector interleaves */
    for (; c0 + 32 <= n_cols; c0 += 32, dst += ps) {
        const uint16_t *a = r0 + c0, *b = r1 ? r1 + c0 : zero;
        for (int c = 0; c < 32; c++)
            dst[c] = (uint32_t)a[c] | (uint32_t)b[c] << 16;
    }
    for (int64_t c = c0; c < n_cols; c++)
        dst[c - c0] = (uint32_t)r0[c] | (r1 ? (uint32_t)r1[c] << 16 : 0u);
}

void kv_bf16_dec_qk(enum kv_bf16_route r, const uint32_t *q, int64_t ldq, int64_t kp,
                    const uint16_t *const *k, int nk, float *out)
{
#ifdef BF16_X86
    if (r == KV_BF16_AVX512) {
        dqk_avx512(q, ldq, kp, k, nk, out);
        return;
    }
#endif
    (void)r;
    dqk_model_x86(q, ldq, kp, k, nk, out);
}

void kv_bf16_dec_pv(enum kv_bf16_route r, const uint32_t *p, int64_t ldp,
                    const uint16_t *const *v, int nv, int64_t dv, float *o, int64_t ldo)
{
#ifdef BF16_X86
    if (r == KV_BF16_AVX512) {
        dpv_avx512(p, ldp, v, nv, dv, o, ldo);
        return;
    }
#endif
    (void)r;
    dpv_model_x86(p, ldp, v, nv, dv, o, ldo);
}

void kv_bf16_gemm_mmla(enum kv_bf16_route r, int64_t M, int64_t N, int64_t kp,
                       const uint16_t *A, int64_t lda, const uint32_t *Bp, int64_t ps,
                       float *C, int64_t ldc, float alpha, int accumulate)
{
#ifdef BF16_ARM
    if (r == KV_BF16_NEON) {
        mmla_neon_gemm(M, N, kp, A, lda, Bp, ps, C, ldc, alpha, accumulate);
        return;
    }
#endif
    (void)r;
    mmla_model_arm_gemm(M, N, kp, A, lda, Bp, ps, C, ldc, alpha, accumulate);
}
