/* fused_neon.c - the fused attention item (fused_kern.h) for aarch64's
 * Advanced SIMD: 4 lanes, register tiles of 8 keys x 8 rows and 8 value
 * columns x 8 rows (16 of the 32 registers accumulate), and exp and the
 * lane-wise max written for NEON the way attn_row.h writes them for x86:
 * the same polynomial, the same range reduction, 2^n in two factors. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "attn/attn_row.h"

#ifdef __aarch64__
#include <arm_neon.h>

static inline float32x4_t exp_neon(float32x4_t x)
{
    uint32x4_t nan = vmvnq_u32(vceqq_f32(x, x));
    uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(EXP_MIN));
    float32x4_t xc = vminq_f32(x, vdupq_n_f32(EXP_MAX + 1.0f));
    xc = vmaxq_f32(xc, vdupq_n_f32(EXP_MIN));
    float32x4_t n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(EXP_LOG2E)));
    float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(EXP_LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(EXP_LN2_LO));
    float32x4_t p = vdupq_n_f32(EXP_C1);
    p = vfmaq_f32(vdupq_n_f32(EXP_C2), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_C3), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_C4), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_C5), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_C6), p, r);
    float32x4_t r2 = vmulq_f32(r, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, r2);
    /* 2^n for n in [-126, 128]: two factors, to reach 2^128 */
    int32x4_t ni = vcvtq_s32_f32(n);
    int32x4_t half = vshrq_n_s32(ni, 1), rest = vsubq_s32(ni, half);
    float32x4_t f1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(half, vdupq_n_s32(127)), 23));
    float32x4_t f2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(rest, vdupq_n_s32(127)), 23));
    float32x4_t y = vmulq_f32(vmulq_f32(p, f1), f2);
    y = vbslq_f32(tiny, vdupq_n_f32(0.0f), y);
    return vbslq_f32(nan, x, y);
}

#define VEC_BITS 128
#include "attn/vec_ops.h"
#define V_MUL(a, b) vmulq_f32(a, b)
#define V_ADD(a, b) vaddq_f32(a, b)
#define V_SUB(a, b) vsubq_f32(a, b)
/* the number when one of the two is NaN: a is passed over */
#define V_MAX(a, b) vmaxnmq_f32(a, b)
#define V_EXP(x) exp_neon(x)
#define KT 8
#define CT 8
#define FK(name) name##_neon
#define FK_ATTR
#define FK_SOFTCAP(s, n, C, inv) softcap_ref(s, n, C, inv)
#include "attn/fused_kern.h"
#endif
