/* fused_x86.c - the fused attention item (fused_kern.h) for x86-64:
 * AVX-512F (16 lanes, 8 keys x 32 rows and 8 value columns x 32 rows per
 * register tile) and AVX2+FMA (8 lanes, 6 x 16 and 6 x 16: the 16
 * registers hold 12 accumulators, two query or weight vectors and one
 * broadcast). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "attn/attn_row.h"

#ifdef ATTN_X86
/* exp512 for the softmax's arguments, s - max <= 0 (or -inf, or NaN):
 * the same result without the upper clamp, and a NaN argument carried
 * through the arithmetic (the lower clamp returns it) instead of masked
 * back in. */
__attribute__((target("avx512f"), always_inline))
static inline __m512 exp512_le0(__m512 x)
{
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_LT_OQ);
    __m512 xc = _mm512_max_ps(_mm512_set1_ps(EXP_MIN), x);
    __m512 n, p = exp512_poly(xc, &n);
    return _mm512_mask_mov_ps(_mm512_scalef_ps(p, n), tiny, _mm512_setzero_ps());
}

#define VEC_BITS 512
#include "attn/vec_ops.h"
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_EXP(x) exp512_le0(x)
#define KT 8
#define CT 8
#define FK(name) name##_512
#define FK_ATTR __attribute__((target("avx512f")))
#define FK_SOFTCAP(s, n, C, inv) softcap_512(s, n, C, inv)
#include "attn/fused_kern.h"
#undef VEC_BITS
#include "attn/vec_ops.h"
#undef V_MUL
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_EXP
#undef KT
#undef CT
#undef FK
#undef FK_ATTR
#undef FK_SOFTCAP

#ifdef FUSED_HAVE_BF16
/* exp512 for the bf16 kernel's weights, x <= 0 (or -inf, or NaN): the
 * argument clamped at EXP_MIN_W, where the polynomial times 2^n (n <=
 * -153) is 0 in scalef's rounding, instead of exp512_le0's compare and
 * blend at EXP_MIN.  Between the two a weight is subnormal, not 0: its
 * bf16 is 0 either way (VCVTNE2PS2BF16 takes a subnormal as zero), and in
 * the running sum, at least 1 from a row's first visible key on, it is
 * far below an ulp: a change, if any, inside the bound's term for flushed
 * subnormals. */
#define EXP_MIN_W (-110.0f)
__attribute__((target("avx512f"), always_inline))
static inline __m512 exp512_w(__m512 x)
{
    __m512 n, p = exp512_poly(_mm512_max_ps(_mm512_set1_ps(EXP_MIN_W), x), &n);
    return _mm512_scalef_ps(p, n);
}

/* The bf16 kernel (fused_bf16.h) twice: on VDPBF16PS and VCVTNE2PS2BF16,
 * and on their models, for the route KV_BF16_MODEL_X86 on any AVX-512
 * CPU, so that the tests hold the instructions to the models bit for bit
 * inside the kernel. */

/* Weights e0 (keys 2t) and e1 (keys 2t + 1) of 16 rows as words of bf16
 * pairs, e0's in the low half. */
__attribute__((target("avx512f,avx512bw,avx512bf16")))
static inline __m512i pair_bf16(__m512 e0, __m512 e1)
{
    const __m512i zip = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17,
                                         1, 16, 0);
    return _mm512_permutexvar_epi16(zip, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
}

#define BF(name) name##_dp
#define BF_ATTR __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define BF_DOT(acc, a, b) _mm512_dpbf16_ps(acc, (__m512bh)(a), (__m512bh)(b))
#define BF_PAIR(e0, e1) pair_bf16(e0, e1)
#include "attn/fused_bf16.h"

/* VCVTNE2PS2BF16's one lane, from Intel's pseudo-code: a zero or
 * subnormal gives a zero of its sign, a NaN its top half with the quiet
 * bit set, the rest rounds to nearest even. */
static uint32_t bf16_cvt_model(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0)
        return (u >> 16) & 0x8000u;
    if ((u & 0x7f800000u) == 0x7f800000u)
        return (u >> 16) | ((u & 0x7fffffu) ? 0x40u : 0u);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__attribute__((target("avx512f")))
static inline __m512 dot_model(__m512 acc, __m512i a, __m512i b)
{
    float f[16];
    uint32_t x[16], y[16];
    _mm512_storeu_ps(f, acc);
    _mm512_storeu_si512((void *)x, a);
    _mm512_storeu_si512((void *)y, b);
    for (int i = 0; i < 16; i++)
        f[i] = kv_bf16_dot2_x86(f[i], x[i], y[i]);
    return _mm512_loadu_ps(f);
}

__attribute__((target("avx512f")))
static inline __m512i pair_model(__m512 e0, __m512 e1)
{
    float f0[16], f1[16];
    uint32_t w[16];
    _mm512_storeu_ps(f0, e0);
    _mm512_storeu_ps(f1, e1);
    for (int i = 0; i < 16; i++)
        w[i] = bf16_cvt_model(f0[i]) | bf16_cvt_model(f1[i]) << 16;
    return _mm512_loadu_si512((const void *)w);
}

#define BF(name) name##_model
#define BF_ATTR __attribute__((target("avx512f,avx512bw")))
#define BF_DOT(acc, a, b) dot_model(acc, a, b)
#define BF_PAIR(e0, e1) pair_model(e0, e1)
#include "attn/fused_bf16.h"
#endif

/* exp256 for the softmax's arguments, x <= 0 (or -inf, or NaN): the same
 * result, 2^n in one factor (n >= -126 after the lower clamp), a NaN
 * argument carried through the arithmetic. */
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 exp256_le0(__m256 x)
{
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_MIN), _CMP_LT_OQ);
    __m256 xc = _mm256_max_ps(_mm256_set1_ps(EXP_MIN), x);
    __m256 n, p = exp256_poly(xc, &n);
    __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, f));
}

#define VEC_BITS 256
#include "attn/vec_ops.h"
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_EXP(x) exp256_le0(x)
#define KT 6
#define CT 6
#define FK(name) name##_256
#define FK_ATTR __attribute__((target("avx2,fma")))
#define FK_SOFTCAP(s, n, C, inv) softcap_256(s, n, C, inv)
#include "attn/fused_kern.h"
#endif
