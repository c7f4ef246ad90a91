/* xattn_kern_neon.c - the register tiles of the strided scores
 * (xattn_kern.h) for aarch64's Advanced SIMD: 8 query rows x 12 keys (24
 * of the 32 registers accumulate, three hold the keys' vectors). */
#include <stdint.h>
#include <string.h>

#include "attn/xattn_int.h"

#ifdef __aarch64__
#include <arm_neon.h>

#define VT float32x4_t
#define VL 4
#define V_LOAD(p) vld1q_f32(p)
#define V_STORE(p, x) vst1q_f32(p, x)
#define V_SET1(x) vdupq_n_f32(x)
#define V_ZERO() vdupq_n_f32(0.0f)
#define V_FMA(a, b, c) vfmaq_f32(c, a, b)
#define MR XKNEON_MR
#define NV (XKNEON_NR / 4)
#define XK(name) name##_neon
#define XK_ATTR
#include "attn/xattn_kern.h"
#endif
