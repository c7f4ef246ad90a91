/* fused_neon.c - the fused attention item (fused_kern.h) for aarch64's
 * Advanced SIMD: 4 lanes, register tiles of 8 keys x 8 rows and 8 value
 * columns x 8 rows (16 of the 32 registers accumulate), and exp and the
 * lane-wise max written for NEON the way attn_row.h writes them for x86:
 * the same polynomial, the same range reduction, 2^n in two factors.
 * With FEAT_BF16 also the bf16 kernel (fused_bf16_neon.h) on BFDOT and on
 * its model. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "attn/attn_row.h"
#include "attn/bf16.h"

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

#ifdef FUSED_HAVE_BF16_NEON
/* The bf16 kernel (fused_bf16_neon.h) twice: on BFDOT, for the route
 * neon-bf16 on a CPU with FEAT_BF16 (HWCAP2_BF16), and on the models of
 * BFDOT (kv_bf16_dot2_arm) and of the rounding of P (kv_f32_to_bf16), for
 * the route model-arm on any aarch64 CPU, so that the tests hold the
 * instruction to its model bit for bit inside the kernel. */

/* Each lane of e rounded to bf16, nearest even, in the top half of its
 * word (the low half left as it falls): a NaN keeps its sign and top
 * bits, quieted; the rest adds 0x7fff and the lowest kept bit. */
static inline uint32x4_t bf16_hi_neon(float32x4_t e)
{
    uint32x4_t u = vreinterpretq_u32_f32(e);
    uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), odd);
    uint32x4_t nan = vmvnq_u32(vceqq_f32(e, e));
    return vbslq_u32(nan, vorrq_u32(u, vdupq_n_u32(0x400000)), r);
}

/* Weights e0 (keys 2t) and e1 (keys 2t + 1) of 4 rows as words of bf16
 * pairs, e0's in the low half. */
static inline uint32x4_t pair_neon(float32x4_t e0, float32x4_t e1)
{
    return vsriq_n_u32(bf16_hi_neon(e1), bf16_hi_neon(e0), 16);
}

#define BN(name) name##_bfdot
#define BN_ATTR __attribute__((target("arch=armv8.2-a+bf16")))
#define BN_DOT(acc, a, b) vbfdotq_f32((acc), vreinterpretq_bf16_u32(a), \
                                      vreinterpretq_bf16_u32(b))
#define BN_DOTL(acc, a, b, j) vbfdotq_laneq_f32((acc), vreinterpretq_bf16_u32(a), \
                                               vreinterpretq_bf16_u32(b), j)
#define BN_PAIR(e0, e1) pair_neon(e0, e1)
#include "attn/fused_bf16_neon.h"

static inline float32x4_t dot_model(float32x4_t acc, uint32x4_t a, uint32x4_t b)
{
    float f[4];
    uint32_t x[4], y[4];
    vst1q_f32(f, acc);
    vst1q_u32(x, a);
    vst1q_u32(y, b);
    for (int i = 0; i < 4; i++)
        f[i] = kv_bf16_dot2_arm(f[i], x[i], y[i]);
    return vld1q_f32(f);
}

static inline uint32x4_t pair_model(float32x4_t e0, float32x4_t e1)
{
    float f0[4], f1[4];
    uint32_t w[4];
    vst1q_f32(f0, e0);
    vst1q_f32(f1, e1);
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)kv_f32_to_bf16(f0[i]) | (uint32_t)kv_f32_to_bf16(f1[i]) << 16;
    return vld1q_u32(w);
}

#define BN(name) name##_bfmodel
#define BN_ATTR
#define BN_DOT(acc, a, b) dot_model((acc), (a), (b))
#define BN_DOTL(acc, a, b, j) dot_model((acc), (a), vdupq_laneq_u32((b), j))
#define BN_PAIR(e0, e1) pair_model(e0, e1)
#include "attn/fused_bf16_neon.h"
#endif
#endif
