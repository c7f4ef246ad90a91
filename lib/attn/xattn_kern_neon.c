/* xattn_kern_neon.c - the register tiles of the strided scores
 * (xattn_kern.h) for aarch64's Advanced SIMD: 8 query rows x 12 keys (24
 * of the 32 registers accumulate, three hold the keys' vectors). */
#include <stdint.h>
#include <string.h>

#include "attn/xattn_int.h"

#ifdef __aarch64__
#include <arm_neon.h>

#define VEC_BITS 128
#include "attn/vec_ops.h"
#define MR XKNEON_MR
#define NV (XKNEON_NR / 4)
#define XK(name) name##_neon
#define XK_ATTR
#include "attn/xattn_kern.h"
#endif
