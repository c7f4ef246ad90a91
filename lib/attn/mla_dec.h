/* mla_dec.h - the absorbed MLA's bf16 decode tiles that read the latent
 * rows where they lie in the paged cache (mla.c's bf16 items on the x86
 * routes).  Internal to libkv.
 *
 * Q K^T takes the query rows transposed, as words of bf16 pairs: pair c of
 * row r (Q[r][2c], Q[r][2c+1]; after an odd D the last pair (Q[r][D-1], 0))
 * at qt[c * ldr + r], ldr a multiple of 16, rows past n zero.  Each score
 * is one lane that adds the pairs 0, 1, .. in order from zero (VDPBF16PS
 * or its model kv_bf16_dot2_x86), then is multiplied by the scale: the
 * same sums, in the same order, as kv_bf16_gemm on the packed panels of
 * bf16.h, so the same bits.
 */
#ifndef KV_ATTN_MLA_DEC_H
#define KV_ATTN_MLA_DEC_H

#include <stddef.h>
#include <stdint.h>

#include "attn/bf16.h"

/* 1 when route r runs the decode tiles: KV_BF16_AVX512 and
 * KV_BF16_MODEL_X86 (the routes of kv_bf16_dec_pv). */
int kv_mla_dec_route(enum kv_bf16_route r);

/* qt (words, ((d + 1) / 2) * ldr of them) from n rows of d bf16, row r at
 * q + r * ldq (halves); rows n .. ldr - 1 zero. */
void kv_mla_dec_pack_q(int64_t n, int64_t d, const uint16_t *q, int64_t ldq, int64_t ldr,
                       uint32_t *qt);

/* s[r * lds + t] = scale * (Q row r . key t) for r < n, t < nk, the key
 * rows k[t] of d bf16 each read in place (no element past d).  st is
 * scratch of nk rounded up to 16, times ldr floats. */
void kv_mla_dec_qk(enum kv_bf16_route r, int64_t n, int64_t d, const uint32_t *qt,
                   int64_t ldr, const uint16_t *const *k, int64_t nk, float scale, float *st,
                   float *s, int64_t lds);

/* o[r * ldo + c] += P V for r < n (a multiple of 8), c < dv (a multiple
 * of 32): row r of P as words of pairs, p[r * ldp + t] (P of key 2t low,
 * 2t + 1 high; after an odd nk the high half zero), the value rows v[t]
 * (dv bf16 each, read in place), t < nk.  Each output element is one lane
 * that adds the pairs of keys in order, from o's value: the sums of
 * kv_bf16_dec_pv and kv_bf16_gemm on packed pairs of rows.  v[nk .. nk +
 * ahead) are rows of d bf16 that come next, only fetched into the cache
 * while it works. */
void kv_mla_dec_pv(enum kv_bf16_route r, int64_t n, const uint32_t *p, int64_t ldp,
                   const uint16_t *const *v, int64_t nk, int64_t dv, int64_t ahead, int64_t d,
                   float *o, int64_t ldo);

#endif
