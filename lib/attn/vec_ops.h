/* The seven vector operations the kernel templates (fused_kern.h,
 * xattn_kern.h, attn_decode_kern.h) are written in, at the width VEC_BITS
 * names: 512 (AVX-512F), 256 (AVX2 with FMA) or 128 (NEON).  Define
 * VEC_BITS and include this before a template; undefine VEC_BITS and
 * include it again to drop them before the next width.  The file has no
 * include guard on purpose. */
#undef VT
#undef VL
#undef V_LOAD
#undef V_STORE
#undef V_SET1
#undef V_ZERO
#undef V_FMA
#if !defined(VEC_BITS)
/* dropped */
#elif VEC_BITS == 512
#define VT __m512
#define VL 16
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_SET1(x) _mm512_set1_ps(x)
#define V_ZERO() _mm512_setzero_ps()
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#elif VEC_BITS == 256
#define VT __m256
#define VL 8
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_SET1(x) _mm256_set1_ps(x)
#define V_ZERO() _mm256_setzero_ps()
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#elif VEC_BITS == 128
#define VT float32x4_t
#define VL 4
#define V_LOAD(p) vld1q_f32(p)
#define V_STORE(p, x) vst1q_f32(p, x)
#define V_SET1(x) vdupq_n_f32(x)
#define V_ZERO() vdupq_n_f32(0.0f)
#define V_FMA(a, b, c) vfmaq_f32(c, a, b)
#else
#error "VEC_BITS: 512, 256 or 128"
#endif
