/* xattn_kern_x86.c - the register tiles of the strided scores
 * (xattn_kern.h) for x86-64: AVX-512F, 8 query rows x 48 keys (24 of the
 * 32 registers accumulate, three hold the keys' vectors), and AVX2+FMA,
 * 4 rows x 24 keys (12 of the 16 accumulate, three hold keys, one the
 * broadcast query feature). */
#include <stdint.h>
#include <string.h>

#include "attn/xattn_int.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define VEC_BITS 512
#include "attn/vec_ops.h"
#define MR XK512_MR
#define NV (XK512_NR / 16)
#define XK(name) name##_512
#define XK_ATTR __attribute__((target("avx512f")))
#include "attn/xattn_kern.h"
#undef VEC_BITS
#include "attn/vec_ops.h"
#undef MR
#undef NV
#undef XK
#undef XK_ATTR

#define VEC_BITS 256
#include "attn/vec_ops.h"
#define MR XK256_MR
#define NV (XK256_NR / 8)
#define XK(name) name##_256
#define XK_ATTR __attribute__((target("avx2,fma")))
#include "attn/xattn_kern.h"
#endif
