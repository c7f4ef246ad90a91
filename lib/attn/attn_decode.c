/* attn_decode.c - decode mode: few queries per request, each item one
 * query of one request against one key chunk for all heads at once, rows
 * padded to Gp per kv head (attn_run_decode_item), on the all-heads
 * kernels that read each (paged) key and value row once
 * (attn_decode_x86.c), Q K^T and P V on the bf16 tiles when Q, K and V
 * are bf16; and the merge of the key chunks (attn_merge_decode). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_decode.h"
#include "attn/attn_row.h"
#include "attn/bf16.h"
#include "core/fp8.h"

/* Decode mode with bf16 Q, K and V: Q K^T on the bf16 tiles (VDPBF16PS or
 * its model); P V too (dec_pv_tiles_ok) unless P is kept f32, then in f32
 * as for the other dtypes. */
int attn_dec_tiles_ok(const struct plan *p)
{
#ifdef ATTN_X86
    return p->k.dtype == KV_BF16 && p->D % 32 == 0 &&
           (p->bf16 == KV_BF16_AVX512 || p->bf16 == KV_BF16_MODEL_X86);
#else
    (void)p;
    return 0;
#endif
}

#ifdef ATTN_X86
static int dec_pv_tiles_ok(const struct plan *p)
{
    return attn_dec_tiles_ok(p) && !p->p_f32 && p->Dv % 32 == 0;
}
#endif

/* Whether a plan may run in decode mode: the kernels above exist at
 * AVX-512 and AVX2 for f32, bf16 and f16 keys and values of 16-multiple
 * head dims (the decode-shaped tiles of attn_tile.c, AVX-512 only). */
int attn_dec_ok(const struct plan *p)
{
#ifdef ATTN_X86
    return !p->scalar && !p->generic && isa_level() >= ISA_AVX2 && p->D % 16 == 0 &&
           p->Dv % 16 == 0 && p->k.dtype == p->v.dtype &&
           (p->k.dtype == KV_F32 || p->k.dtype == KV_BF16 || p->k.dtype == KV_F16);
#else
    (void)p;
    return 0;
#endif
}

#ifdef ATTN_X86
/* Whether every sum of products of a query feature and an unscaled FP8
 * value (at most top in magnitude) over the head dim, as Q K^T forms it
 * before the factor, stays well inside f32: with a small k_scale the
 * unscaled products may overflow where those of the dequantized values do
 * not.  A NaN or infinite query (or no memory) says no. */
static int dec_fp8_q_fits(const struct plan *p, double top)
{
    const int64_t D = p->D;
    float *row = malloc((size_t)D * sizeof *row), qmax = 0.0f;
    if (!row)
        return 0;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t i = 0; i < p->q_len[b]; i++)
            for (int64_t h = 0; h < p->Hq; h++) {
                load_f32(row, q_row(p, b, h, i), p->q.dtype, D);
                for (int64_t d = 0; d < D; d++)
                    if (!(fabsf(row[d]) <= qmax))
                        qmax = isnan(row[d]) ? INFINITY : fabsf(row[d]);
            }
    free(row);
    return (double)qmax * top * (double)D < 0.5 * FLT_MAX;
}
#endif

/* An FP8 cache in decode mode: the kernels read its bytes where the CPU
 * has AVX-512 (F, BW, VL) or AVX2 (with FMA, F16C).  They take each byte
 * at its exact value unscaled (e4m3 at 2^-8 of it) and fold the scales
 * in: each score's sum is multiplied by fp8_ks = scale 2^8 k_scale (for
 * e4m3; scale k_scale for e5m2), rounded once to f32, and each merged
 * output row by fp8_vs = 2^8 v_scale (e5m2: v_scale) after its division
 * by the sum of its weights (before it, the product of a sum over many
 * keys could overflow where the output does not).  Plans whose factors are not normal f32
 * numbers, or whose queries could overflow the unscaled sums
 * (dec_fp8_q_fits), dequantize the cache first (attn.c), as do other
 * plans. */
int attn_dec_fp8_set(struct plan *p, const struct kv_tensor *cache, int fmt, float ks, float vs)
{
#ifdef ATTN_X86
    const float f = fmt == KV_FP8_E4M3 ? 256.0f : 1.0f;
    const float sk = p->scale * (ks * f), sv = vs * f;
    if (!p->decode || !p->paged || p->scalar || p->generic || isa_level() == ISA_SCALAR ||
        !isfinite(ks * f) || !isnormal(sk) || !isnormal(sv) ||
        !dec_fp8_q_fits(p, fmt == KV_FP8_E4M3 ? 448.0 / 256.0 : 57344.0))
        return 0;
    const int64_t nblk = cache->shape[1];
    p->fp8 = fmt + 1;
    p->fp8_ks = sk;
    p->fp8_vs = sv;
    p->k.dtype = p->v.dtype = KV_U8;
    p->k.esize = p->v.esize = 1;
    p->k.base = cache->data;
    p->v.base = (char *)cache->data + (size_t)(nblk * p->page_stride);
    return 1;
#else
    (void)p; (void)cache; (void)fmt; (void)ks; (void)vs;
    return 0;
#endif
}

/* Decode mode: one item is query i of request b against the key chunk
 * [j0, j1), for every head at once.  Leaves the unnormalised partial
 * (m, l, o) of each head in p->part. */
void attn_run_decode_item(void *ctx, size_t idx)
{
    struct plan *p = ctx;
    struct item *it = &p->items[idx];
    struct scratch *w = scratch_get(p);
    const int64_t b = it->b, i = it->i0, D = p->D, Dv = p->Dv, tk = p->tk;
    const int64_t G = p->G, Gp = p->Gp, R = p->Hkv * Gp;
    int64_t lo, hi;

    memset(w->qs, 0, (size_t)(R * D) * sizeof(float));
    memset(w->o, 0, (size_t)(R * Dv) * sizeof(float));
    memset(w->s, 0, (size_t)(R * tk) * sizeof(float));
    for (int64_t g = 0; g < p->Hkv; g++)
        for (int64_t gg = 0; gg < G; gg++)
            load_f32(w->qs + (g * Gp + gg) * D, q_row(p, b, g * G + gg, i), p->q.dtype, D);
    for (int64_t r = 0; r < R; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    /* the query rows as bf16 pairs for the bf16 tiles (exact: Q is bf16) */
    uint16_t *qp = attn_dec_tiles_ok(p) ? malloc((size_t)(R * D) * sizeof(uint16_t)) : NULL;
    if (qp)
        kv_f32_to_bf16_n(w->qs, qp, (size_t)(R * D));
    row_bounds(p, b, i, &lo, &hi);
    int64_t a = lo > it->j0 ? lo : it->j0, z = hi < it->j1 ? hi : it->j1;
#ifdef ATTN_X86
    const int pv_tiles = qp && dec_pv_tiles_ok(p);
    attn_dec_prefetch_first(p, b, a, z);
#endif
    for (int64_t j0 = a, j1; j0 < z; j0 = j1) {
        j1 = j0 + tk < z ? j0 + tk : z;
        const int64_t n = j1 - j0;
        it->done++;
#ifdef ATTN_X86
        if (qp)
            attn_dec_qk_tiles(p, b, j0, n, (const uint32_t *)(const void *)qp, w->s, tk);
        else
            attn_dec_qk(p, b, j0, n, w->qs, w->s, tk);
#endif
        for (int64_t g = 0; g < p->Hkv; g++)
            for (int64_t gg = 0; gg < G; gg++) {
                int64_t r = g * Gp + gg;
                float *sr = w->s + r * tk;
                row_mask(p, sr, n, b, g * G + gg, i, j0, lo, hi);
                row_softmax(p, sr, n, &w->m[r], &w->l[r], w->o + r * Dv);
            }
#ifdef ATTN_X86
        if (pv_tiles) {
            /* P rounded to bf16, a zero after an odd n (the padding rows
             * of a kv head carry zero scores, never used) */
            for (int64_t r = 0; r < R; r++) {
                kv_f32_to_bf16_n(w->s + r * tk, w->pb + r * p->ldpb, (size_t)n);
                w->pb[r * p->ldpb + n] = 0;
            }
            attn_dec_pv_tiles(p, b, j0, n, z, w->pb, p->ldpb, w->o);
        } else {
            attn_dec_pv(p, b, j0, n, z, w->s, tk, w->o);
        }
#endif
    }
    free(qp);
    float *part = p->part + idx * (size_t)(p->Hq * (Dv + 2));
    for (int64_t g = 0; g < p->Hkv; g++)
        for (int64_t gg = 0; gg < G; gg++) {
            int64_t r = g * Gp + gg;
            float *dst = part + (g * G + gg) * (Dv + 2);
            dst[0] = w->m[r];
            dst[1] = w->l[r];
            memcpy(dst + 2, w->o + r * Dv, (size_t)Dv * sizeof(float));
        }
    atomic_store(&w->busy, 0);
    item_done(p);
}

/* Decode mode: merge the key chunks of each (request, query, head) in
 * chunk order and store the rows (finish_row: an FP8 cache's rows divided
 * by the sum of their weights, then times fp8_vs). */
void attn_merge_decode(struct plan *p, float *acc)
{
    const int64_t Dv = p->Dv, stride = p->Hq * (Dv + 2);
    for (size_t i0 = 0, i1; i0 < p->n_items; i0 = i1) {
        const struct item *first = &p->items[i0];
        for (i1 = i0 + 1; i1 < p->n_items; i1++)
            if (p->items[i1].b != first->b || p->items[i1].i0 != first->i0)
                break;
        for (int64_t h = 0; h < p->Hq; h++) {
            float m = -INFINITY, l = 0.0f;
            for (size_t c = i0; c < i1; c++) {
                float mc = p->part[c * stride + h * (Dv + 2)];
                if (mc > m)
                    m = mc;
            }
            memset(acc, 0, (size_t)Dv * sizeof(float));
            for (size_t c = i0; c < i1; c++) {
                const float *pc = p->part + c * stride + h * (Dv + 2);
                float wgt = m == -INFINITY ? 1.0f : expf(pc[0] - m);
                l += wgt * pc[1];
                for (int64_t d = 0; d < Dv; d++)
                    acc[d] += wgt * pc[2 + d];
            }
            finish_row(p, first->b, h, first->i0, acc, m, l);
        }
    }
}
