/* sum16_x86.h - the lane sums of 16 AVX-512 vectors, shared by the decode
 * kernels (attn_decode.c) and the bf16 tiles (bf16.c); include it only
 * where <immintrin.h> is (ATTN_X86, BF16_X86).
 *
 * Lane t of the result is the sum of a[t]'s 16 lanes, each summed as
 * _mm512_reduce_add_ps sums one: halves (i + 8), quarters (i + 4), pairs
 * (i + 2), then the last two; done four levels at a time by shuffles
 * across the vectors, lane 4k + m of the last level being vector 4m + k,
 * put back in order by one permute.  The software model of the bf16 tiles
 * (mvf_sum16 in bf16.c) adds in the same order. */
#ifndef KV_ATTN_SUM16_X86_H
#define KV_ATTN_SUM16_X86_H

#include <immintrin.h>

__attribute__((target("avx512f")))
static inline __m512 kv_sum16_avx512(const __m512 *a)
{
    __m512 c[8], e[4], f[2];
    /* unrolled, so that the partial sums stay in registers */
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)          /* vector 2k in 128-bit lanes 0-1, 2k+1 in 2-3 */
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xee),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)          /* 128-bit lane l: vector 4k + l */
        e[k] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0xdd),
                             _mm512_shuffle_f32x4(c[2 * k], c[2 * k + 1], 0x88));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++)          /* lane l: vectors 8k + l (0-1), 8k + 4 + l (2-3) */
        f[k] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * k], e[2 * k + 1], 0xee),
                             _mm512_shuffle_ps(e[2 * k], e[2 * k + 1], 0x44));
    __m512 g = _mm512_add_ps(_mm512_shuffle_ps(f[0], f[1], 0xdd),
                             _mm512_shuffle_ps(f[0], f[1], 0x88));
    const __m512i idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2,
                                         13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(idx, g);
}

#endif
