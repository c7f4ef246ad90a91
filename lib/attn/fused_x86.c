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

#define VT __m512
#define VL 16
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_ZERO() _mm512_setzero_ps()
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
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
#undef VT
#undef VL
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_ZERO
#undef V_FMA
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

#define VT __m256
#define VL 8
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_ZERO() _mm256_setzero_ps()
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
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
