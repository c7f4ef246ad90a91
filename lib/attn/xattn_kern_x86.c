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

#define VT __m512
#define VL 16
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_ZERO() _mm512_setzero_ps()
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define MR XK512_MR
#define NV (XK512_NR / 16)
#define XK(name) name##_512
#define XK_ATTR __attribute__((target("avx512f")))
#include "attn/xattn_kern.h"
#undef VT
#undef VL
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_ZERO
#undef V_FMA
#undef MR
#undef NV
#undef XK
#undef XK_ATTR

#define VT __m256
#define VL 8
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_ZERO() _mm256_setzero_ps()
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define MR XK256_MR
#define NV (XK256_NR / 8)
#define XK(name) name##_256
#define XK_ATTR __attribute__((target("avx2,fma")))
#include "attn/xattn_kern.h"
#endif
