/* attn_decode.h - what decode mode's items (attn_decode.c) take from its
 * kernels on x86-64 (attn_decode_x86.c): Q K^T and P V over all kv heads
 * for a plan's dtype at the vector level in effect, the same on the bf16
 * tiles, and the prefetch of an item's first keys. */
#ifndef KV_ATTN_DECODE_H
#define KV_ATTN_DECODE_H

#include "attn/attn_int.h"

#ifdef ATTN_X86
/* Q K^T of keys j0.. j0 + n of request b against the rows of qs (f32,
 * Gp per kv head, D apart), scaled, into s (lds apart). */
void attn_dec_qk(const struct plan *p, int64_t b, int64_t j0, int64_t n, const float *qs,
                 float *s, int64_t lds);
/* o (Dv apart) += P V of values j0.. j0 + n, P in s (lds apart); the keys
 * of the work item end at z (the prefetch runs on into them). */
void attn_dec_pv(const struct plan *p, int64_t b, int64_t j0, int64_t n, int64_t z,
                 const float *s, int64_t lds, float *o);
/* The same on the bf16 tiles: Q as bf16 pairs (qp), P rounded to bf16
 * (pb, ldpb apart). */
void attn_dec_qk_tiles(const struct plan *p, int64_t b, int64_t j0, int64_t n,
                       const uint32_t *qp, float *s, int64_t lds);
void attn_dec_pv_tiles(const struct plan *p, int64_t b, int64_t j0, int64_t n, int64_t z,
                       const uint16_t *pb, int64_t ldpb, float *o);
void attn_dec_prefetch_first(const struct plan *p, int64_t b, int64_t a, int64_t z);
#endif

#endif
