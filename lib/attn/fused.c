/* fused.c - which plans run on the fused attention kernels (fused_kern.h)
 * and at which vector level, the size of their work space, and the
 * dispatch of one item to the level's copy.
 *
 * The rule (kvattn(1), DESCRIPTION): the fused kernels take a plan when
 * it multiplies f32 tiles with the vector code (not --scalar, not the
 * bf16 tiles, not decode mode), or bf16 tiles on VDPBF16PS or its model
 * with P rounded to bf16 at the AVX-512 level (fused_bf16.h), or on BFDOT
 * or its model with P rounded on aarch64 at the NEON level
 * (fused_bf16_neon.h; the other bf16 routes, --no-p-round and lower
 * levels keep the bf16 tiles), has
 * no explicit or block mask (those keep the BLAS tiles and their sparse
 * kernels), and ALiBi's positions, if any, are below 2^23 (the distance
 * stays exact in f32); in such a plan they take every item of at least
 * FUSED_MIN_ROWS stacked query rows.  A
 * smaller item (a short request, a few speculative tokens) keeps the BLAS
 * tiles or the decode-shaped kernels: a panel padded to 32 rows would
 * waste most of its lanes there, and the keys' bandwidth bounds both
 * routes.  Measured on a Zen 5 (CPU time, one thread), the BLAS tiles are
 * up to 1.4x faster at 12 and 24 rows, the fused kernels 1.1-1.2x (AVX2)
 * and 1.7-1.9x (AVX-512) faster at 32 and 64 rows against 16k keys, and
 * 1.4-1.9x (AVX-512) on 256-row tiles of head dims 128 to 4096.  The
 * choice depends on the shapes and the vector level only, never on the
 * thread count. */
#include "attn/attn_row.h"


int attn_fused_level(const struct plan *p)
{
    if (p->scalar || p->generic || p->mask || p->bm || p->decode)
        return FUSED_NONE;
    if (p->slopes)
        for (int64_t b = 0; b < p->B; b++)
            if (p->q_len[b] >= (1 << 23) || p->kv_len[b] >= (1 << 23))
                return FUSED_NONE;
    if (p->bf16 != KV_BF16_NONE) {
#ifdef FUSED_HAVE_BF16
        if ((p->bf16 == KV_BF16_AVX512 || p->bf16 == KV_BF16_MODEL_X86) && !p->p_f32 &&
            isa_level() == ISA_AVX512)
            return FUSED_BF16;
#endif
#ifdef FUSED_HAVE_BF16_NEON
        if ((p->bf16 == KV_BF16_NEON || p->bf16 == KV_BF16_MODEL_ARM) && !p->p_f32 &&
            attn_isa_cap >= ISA_AVX2 && kv_isa_has(KV_ISA_NEON))
            return FUSED_BF16;
#endif
        return FUSED_NONE;
    }
#ifdef ATTN_X86
    switch (isa_level()) {
    case ISA_AVX512: return FUSED_AVX512;
    case ISA_AVX2: return FUSED_AVX2;
    default: return FUSED_NONE;
    }
#elif defined(__aarch64__)
    return attn_isa_cap >= ISA_AVX2 && kv_isa_has(KV_ISA_NEON) ? FUSED_NEON : FUSED_NONE;
#else
    return FUSED_NONE;
#endif
}

/* Floats of one thread's work space for items of up to M rows (a
 * multiple of FUSED_ROWS): Q^T, O^T, S^T of a key block, slopes and
 * positions per row, one row, a zero row, the f32 copies of a block's
 * keys; and the block's key row pointers (attn_plan.c allocates them). */
size_t attn_fused_floats(const struct plan *p, int64_t M)
{
    if (p->fused == FUSED_BF16) {
        /* (fused_bf16.h; fused_bf16_neon.h in panels of 8) words of Q^T
         * pairs, O^T, S^T and P^T of a panel against a block, slopes and
         * positions per row, one output row, a zero key, the copies of a
         * block's keys (an odd head dim) and its value pairs */
        const int64_t kp = (p->D + 1) / 2, kb = p->fkb;
        return (size_t)(M * (kp + p->Dv + 2) + (kb + 2 * FUSED_KT) * FUSED_ROWS * 2 + p->Dv + kp
                        + kb * kp + (kb + 1) / 2 * p->Dv);
    }
    int64_t wd = p->D > p->Dv ? p->D : p->Dv;
    return (size_t)(M * (p->D + p->Dv + 2) + (p->fkb + 2 * FUSED_KT) * FUSED_ROWS + wd + p->D
                    + p->fkb * p->D);
}

void attn_fused_rows(const struct plan *p, const struct item *it, struct scratch *w, int64_t Mp,
                     float *sl, float *pos)
{
    const int64_t hs = p->hs, M = hs * (it->i1 - it->i0), b = it->b;
    const int64_t off = p->kv_len[b] - p->q_len[b];
    for (int64_t r = 0; r < Mp; r++) {
        int64_t rr = r < M ? r : M - 1, i = it->i0 + rr / hs;
        row_bounds(p, b, i, &w->lo[r], &w->hi[r]);
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
        sl[r] = p->slopes ? p->slopes[it->h0 + rr % hs] : 0.0f;
        pos[r] = (float)(i + off);
    }
}

void attn_fused_mask(float *s, int64_t rp, int64_t j0, int64_t a, int64_t z, int64_t zs,
                     const int64_t *lo, const int64_t *hi)
{
    if (hi[0] >= j0 + z && lo[rp - 1] <= j0 + a && zs == z)
        return;
    /* row by row, the keys before its first and from its last (or z) */
    for (int64_t r = 0; r < rp; r++) {
        int64_t e = lo[r] - j0, f = hi[r] - j0 < z ? hi[r] - j0 : z;
        e = e < zs ? e : zs;
        for (int64_t j = a; j < e; j++)
            s[(j - a) * rp + r] = -INFINITY;
        for (int64_t j = f > a ? f : a; j < zs; j++)
            s[(j - a) * rp + r] = -INFINITY;
    }
}

void attn_fused_finish(const struct plan *p, const struct item *it, struct scratch *w,
                       const float *ot, int64_t rp, float *row)
{
    const int64_t hs = p->hs, M = hs * (it->i1 - it->i0), Dv = p->Dv;
    for (int64_t r = 0; r < M; r++) {
        const float *o = ot + (r / rp) * Dv * rp + r % rp;
        for (int64_t c = 0; c < Dv; c++)
            row[c] = o[c * rp];
        finish_row(p, it->b, it->h0 + r % hs, it->i0 + r / hs, row, w->m[r], w->l[r]);
    }
}

void attn_fused_item(struct plan *p, struct item *it, struct scratch *w)
{
    switch (p->fused) {
#ifdef ATTN_X86
    case FUSED_AVX512: attn_fused_item_512(p, it, w); break;
    case FUSED_AVX2: attn_fused_item_256(p, it, w); break;
#endif
#ifdef FUSED_HAVE_BF16
    case FUSED_BF16:
        if (p->bf16 == KV_BF16_AVX512)
            attn_fused_item_bf16_dp(p, it, w);
        else
            attn_fused_item_bf16_model(p, it, w);
        break;
#endif
#ifdef FUSED_HAVE_BF16_NEON
    case FUSED_BF16:
        if (p->bf16 == KV_BF16_NEON)
            attn_fused_item_bf16_bfdot(p, it, w);
        else
            attn_fused_item_bf16_bfmodel(p, it, w);
        break;
#endif
#ifdef __aarch64__
    case FUSED_NEON: attn_fused_item_neon(p, it, w); break;
#endif
    default: break;
    }
}
