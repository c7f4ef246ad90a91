/* half.c - f16/bf16 <-> f32 with a scalar reference and run-time chosen
 * fast paths (F16C for f16; AVX2 or AVX-512 integer rounding for bf16).
 *
 * NaN rule, shared by every path: a NaN keeps its sign, its payload is
 * truncated (or widened with zeros) and the quiet bit is set, which is what
 * the F16C instructions do; so the fast and reference paths agree on all
 * inputs, not only on numbers.
 */
#include <string.h>
#include "core/half.h"
#include "core/isa.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_X86 1
#endif

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float kv_f16_to_f32_ref(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;

    if (exp == 0x1f) {                       /* inf or NaN */
        if (mant == 0)
            return u2f(sign | 0x7f800000u);
        return u2f(sign | 0x7fc00000u | (mant << 13));
    }
    if (exp == 0) {
        if (mant == 0)
            return u2f(sign);                /* signed zero */
        /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while (!(mant & 0x400));
        mant &= 0x3ff;
        return u2f(sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13));
    }
    return u2f(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t kv_f32_to_f16_ref(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xff;
    uint32_t mant = u & 0x7fffff;

    if (exp == 0xff) {
        if (mant == 0)
            return sign | 0x7c00;
        return sign | 0x7e00 | (uint16_t)(mant >> 13);
    }
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f)
        return sign | 0x7c00;                /* overflow to inf */
    if (e <= 0) {
        /* subnormal or zero in f16: value = mant24 * 2^(exp-150); the f16
         * subnormal unit is 2^-24, so shift right by (126 - exp) - ... */
        if (e < -10)
            return sign;                     /* below half the smallest */
        uint32_t m = mant | 0x800000;        /* 24-bit significand */
        int shift = 14 - e;                  /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return sign | (uint16_t)q;           /* may carry into exponent 1 */
    }
    uint32_t q = ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1)))
        q++;                                 /* may carry up to inf: right */
    return sign | (uint16_t)q;
}

float kv_bf16_to_f32_ref(uint16_t h)
{
    if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
        return u2f(((uint32_t)h << 16) | 0x400000u);
    return u2f((uint32_t)h << 16);
}

uint16_t kv_f32_to_bf16_ref(float f)
{
    uint32_t u = f2u(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffff))
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* ---- dispatch ---------------------------------------------------------- */

static int force_scalar;

#ifdef KV_X86
/* Both fast paths (F16C, which every AVX2 CPU has, and the AVX2 bf16
 * rounding) need the avx2 level; the cap of KVTOOLS_ISA applies (isa.h). */
static int use_avx2(void)
{
    return kv_isa_has(KV_ISA_AVX2) && !force_scalar;
}
#endif

unsigned kv_half_features(void)
{
    return kv_isa_has(KV_ISA_AVX2) ? 3u : 0u;
}

void kv_half_force_scalar(int on)
{
    force_scalar = on;
}

float kv_f16_to_f32(uint16_t h) { return kv_f16_to_f32_ref(h); }
float kv_bf16_to_f32(uint16_t h) { return kv_bf16_to_f32_ref(h); }
uint16_t kv_f32_to_f16(float f) { return kv_f32_to_f16_ref(f); }
uint16_t kv_f32_to_bf16(float f) { return kv_f32_to_bf16_ref(f); }

#ifdef KV_X86
__attribute__((target("avx,f16c")))
static void f16_to_f32_f16c(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        dst[i] = kv_f16_to_f32_ref(src[i]);
}

__attribute__((target("avx,f16c")))
static void f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 f = _mm256_loadu_ps(src + i);
        __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT |
                                           _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    for (; i < n; i++)
        dst[i] = kv_f32_to_f16_ref(src[i]);
}

__attribute__((target("avx2")))
static void bf16_to_f32_avx2(const uint16_t *src, float *dst, size_t n)
{
    const __m256i expm = _mm256_set1_epi32(0x7f800000);
    const __m256i mantm = _mm256_set1_epi32(0x007fffff);
    const __m256i quiet = _mm256_set1_epi32(0x00400000);
    const __m256i zero = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        __m256i isnan = _mm256_and_si256(
            _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), expm),
            _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(u, mantm), zero),
                             _mm256_set1_epi32(-1)));
        u = _mm256_or_si256(u, _mm256_and_si256(isnan, quiet));
        _mm256_storeu_si256((__m256i *)(dst + i), u);
    }
    for (; i < n; i++)
        dst[i] = kv_bf16_to_f32_ref(src[i]);
}

__attribute__((target("avx2")))
static void f32_to_bf16_avx2(const float *src, uint16_t *dst, size_t n)
{
    const __m256i expm = _mm256_set1_epi32(0x7f800000);
    const __m256i mantm = _mm256_set1_epi32(0x007fffff);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i q = _mm256_set1_epi32(0x40);
    const __m256i zero = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(src + i + 8 * k));
            __m256i isnan = _mm256_and_si256(
                _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), expm),
                _mm256_xor_si256(
                    _mm256_cmpeq_epi32(_mm256_and_si256(u, mantm), zero),
                    _mm256_set1_epi32(-1)));
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
            __m256i rounded = _mm256_srli_epi32(
                _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
            __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(u, 16), q);
            r[k] = _mm256_blendv_epi8(rounded, nanv, isnan);
        }
        /* pack 32-bit lanes (values < 65536) to 16 bits, fix lane order */
        __m256i p = _mm256_packus_epi32(r[0], r[1]);
        p = _mm256_permute4x64_epi64(p, 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i++)
        dst[i] = kv_f32_to_bf16_ref(src[i]);
}

/* The same rounding sixteen lanes at a time (AVX-512F/BW): the same
 * integer steps, so the same bits; the lanes narrowed by VPMOVDW. */
__attribute__((target("avx512f,avx512bw")))
static void f32_to_bf16_avx512(const float *src, uint16_t *dst, size_t n)
{
    const __m512i expm = _mm512_set1_epi32(0x7f800000);
    const __m512i mantm = _mm512_set1_epi32(0x007fffff);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i bias = _mm512_set1_epi32(0x7fff);
    const __m512i q = _mm512_set1_epi32(0x40);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(src + i));
        __mmask16 isnan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expm), expm) &
                          _mm512_test_epi32_mask(u, mantm);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
        __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
        __m512i nanv = _mm512_or_si512(_mm512_srli_epi32(u, 16), q);
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(isnan, rounded, nanv)));
    }
    for (; i < n; i++)
        dst[i] = kv_f32_to_bf16_ref(src[i]);
}
#endif

void kv_f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
#ifdef KV_X86
    if (use_avx2()) {
        f16_to_f32_f16c(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = kv_f16_to_f32_ref(src[i]);
}

void kv_f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
#ifdef KV_X86
    if (use_avx2()) {
        f32_to_f16_f16c(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = kv_f32_to_f16_ref(src[i]);
}

void kv_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
#ifdef KV_X86
    if (use_avx2()) {
        bf16_to_f32_avx2(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = kv_bf16_to_f32_ref(src[i]);
}

void kv_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n)
{
#ifdef KV_X86
    if (use_avx2() && kv_isa_has(KV_ISA_AVX512)) {
        f32_to_bf16_avx512(src, dst, n);
        return;
    }
    if (use_avx2()) {
        f32_to_bf16_avx2(src, dst, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = kv_f32_to_bf16_ref(src[i]);
}

/* The finite scans.  Branch-free: each value's exponent field plus one
 * unit of it carries into the sign bit exactly when the field is all ones
 * (an infinity or a NaN), and those sums are ORed together.  The loops
 * work on four GCC/Clang vectors at a time (four accumulators): 16-byte
 * vectors, which every target has (SSE2, NEON), and on an x86 CPU with
 * AVX2 the same code compiled for 32-byte ones. */
typedef uint16_t fin_u16x8 __attribute__((vector_size(16)));
typedef uint32_t fin_u32x4 __attribute__((vector_size(16)));
typedef uint16_t fin_u16x16 __attribute__((vector_size(32)));
typedef uint32_t fin_u32x8 __attribute__((vector_size(32)));

/* name_bf16(h, i, i1) / name_f32(v, i, i1): 1 when a value in [i, i1) is
 * an infinity or a NaN.  U16 holds L bf16 values, U32 the same bytes as
 * L / 2 f32 values. */
#define FIN_SCAN(name, attr, U16, U32, L)                                   \
attr static int name##_bf16(const uint16_t *h, size_t i, size_t i1)         \
{                                                                           \
    U16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, x0, x1, x2, x3;             \
    uint16_t r = 0;                                                         \
                                                                            \
    for (; i + 4 * L <= i1; i += 4 * L) {                                   \
        memcpy(&x0, h + i, sizeof(x0));                                     \
        memcpy(&x1, h + i + L, sizeof(x1));                                 \
        memcpy(&x2, h + i + 2 * L, sizeof(x2));                             \
        memcpy(&x3, h + i + 3 * L, sizeof(x3));                             \
        a0 |= (x0 & 0x7f80u) + 0x80u;                                       \
        a1 |= (x1 & 0x7f80u) + 0x80u;                                       \
        a2 |= (x2 & 0x7f80u) + 0x80u;                                       \
        a3 |= (x3 & 0x7f80u) + 0x80u;                                       \
    }                                                                       \
    a0 |= a1 | a2 | a3;                                                     \
    for (int j = 0; j < L; j++)                                             \
        r |= a0[j];                                                         \
    for (; i < i1; i++)                                                     \
        r |= (uint16_t)((h[i] & 0x7f80u) + 0x80u);                          \
    return r >> 15;                                                         \
}                                                                           \
                                                                            \
attr static int name##_f32(const float *v, size_t i, size_t i1)             \
{                                                                           \
    U32 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, x0, x1, x2, x3;             \
    uint32_t r = 0, x;                                                      \
                                                                            \
    for (; i + 2 * L <= i1; i += 2 * L) {                                   \
        memcpy(&x0, v + i, sizeof(x0));                                     \
        memcpy(&x1, v + i + L / 2, sizeof(x1));                             \
        memcpy(&x2, v + i + L, sizeof(x2));                                 \
        memcpy(&x3, v + i + 3 * L / 2, sizeof(x3));                         \
        a0 |= (x0 & 0x7f800000u) + 0x800000u;                               \
        a1 |= (x1 & 0x7f800000u) + 0x800000u;                               \
        a2 |= (x2 & 0x7f800000u) + 0x800000u;                               \
        a3 |= (x3 & 0x7f800000u) + 0x800000u;                               \
    }                                                                       \
    a0 |= a1 | a2 | a3;                                                     \
    for (int j = 0; j < L / 2; j++)                                         \
        r |= a0[j];                                                         \
    for (; i < i1; i++) {                                                   \
        memcpy(&x, v + i, sizeof(x));                                       \
        r |= (x & 0x7f800000u) + 0x800000u;                                 \
    }                                                                       \
    return (int)(r >> 31);                                                  \
}

FIN_SCAN(fin_any, , fin_u16x8, fin_u32x4, 8)
#if defined(__x86_64__) && defined(__GNUC__)
#define FIN_AVX2 1
FIN_SCAN(fin_any_avx2, __attribute__((target("avx2"))), fin_u16x16,
         fin_u32x8, 16)
#endif


int kv_bf16_nonfinite_n(const uint16_t *p, size_t n)
{
#ifdef FIN_AVX2
    if (kv_isa_has(KV_ISA_AVX2))
        return fin_any_avx2_bf16(p, 0, n);
#endif
    return fin_any_bf16(p, 0, n);
}

int kv_f32_nonfinite_n(const float *p, size_t n)
{
#ifdef FIN_AVX2
    if (kv_isa_has(KV_ISA_AVX2))
        return fin_any_avx2_f32(p, 0, n);
#endif
    return fin_any_f32(p, 0, n);
}
