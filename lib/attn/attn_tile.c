/* attn_tile.c - one work item of the tiled kernels: hs stacked query
 * heads x a tile of query positions against the key tiles it may see
 * (attn_run_item), with its GEMMs (OpenBLAS or the scalar loops), the
 * decode-shaped kernels for tiles of at most 8 rows, the pieces of the
 * causal diagonal and the bf16 tiles; block-sparse tiles are in
 * attn_sparse.c. */
#include <math.h>
#include <string.h>

#include "attn/attn_row.h"
#include "attn/bf16.h"
#include "core/blas.h"

/* Scores S[M x n] = scale * Q[M x D] K[n x D]^T (K rows ldk apart). */
static void gemm_qk(const struct plan *p, int64_t M, int64_t n, const float *q,
                    const float *k, int64_t ldk, float *s, int64_t lds)
{
    int64_t D = p->D;
    if (!p->scalar) {
        kv_blas_sgemm(KV_BLAS_N, KV_BLAS_T, (int)M, (int)n, (int)D,
                      p->scale, q, (int)D, k, (int)ldk, 0.0f, s, (int)lds);
        return;
    }
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int64_t d = 0; d < D; d++)
                acc += q[r * D + d] * k[j * ldk + d];
            s[r * lds + j] = p->scale * acc;
        }
}

/* O[M x Dv] += P[M x n] V[n x Dv] (V rows ldv apart). */
static void gemm_pv(const struct plan *p, int64_t M, int64_t n, const float *pm,
                    int64_t lds, const float *v, int64_t ldv, float *o)
{
    int64_t Dv = p->Dv;
    if (!p->scalar) {
        kv_blas_sgemm(KV_BLAS_N, KV_BLAS_N, (int)M, (int)Dv, (int)n,
                      1.0f, pm, (int)lds, v, (int)ldv, 1.0f, o, (int)Dv);
        return;
    }
    for (int64_t r = 0; r < M; r++)
        for (int64_t j = 0; j < n; j++) {
            float w = pm[r * lds + j];
            for (int64_t d = 0; d < Dv; d++)
                o[r * Dv + d] += w * v[j * ldv + d];
        }
}

#ifdef ATTN_X86
/* Decode-shaped tiles (M <= 8 stacked rows): a GEMM call would pack the
 * key tile again for four rows, so these read each key/value row once,
 * straight from the (paged) cache, converting 16 lanes at a time.  Rows
 * are done four at a time; qs, s and o carry zeroed padding rows up to a
 * multiple of four. */
#define SMALL_KERNELS(NAME, LOAD)                                              \
__attribute__((target("avx512f")))                                             \
static void NAME##_qk(const struct plan *p, int64_t M, int64_t b, int64_t kvh,  \
                      int64_t j0, int64_t n, const float *qs, float *s,         \
                      int64_t lds)                                              \
{                                                                              \
    const int64_t D = p->D;                                                    \
    for (int64_t j = 0; j < n; j++) {                                          \
        const char *kr = kv_row(p, &p->k, b, kvh, j0 + j);                     \
        if (j + SMALL_PF < n)                                                  \
            prefetch_row(kv_row(p, &p->k, b, kvh, j0 + j + SMALL_PF), D * p->k.esize); \
        for (int64_t r0 = 0; r0 < M; r0 += 4) {                                \
            const float *q0 = qs + r0 * D;                                     \
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;        \
            for (int64_t c = 0; c < D; c += 16) {                              \
                __m512 kv = LOAD(kr, c);                                       \
                a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + c), kv, a0);         \
                a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + D + c), kv, a1);     \
                a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 2 * D + c), kv, a2); \
                a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 3 * D + c), kv, a3); \
            }                                                                  \
            s[r0 * lds + j] = p->scale * _mm512_reduce_add_ps(a0);             \
            s[(r0 + 1) * lds + j] = p->scale * _mm512_reduce_add_ps(a1);       \
            s[(r0 + 2) * lds + j] = p->scale * _mm512_reduce_add_ps(a2);       \
            s[(r0 + 3) * lds + j] = p->scale * _mm512_reduce_add_ps(a3);       \
        }                                                                      \
    }                                                                          \
}                                                                              \
__attribute__((target("avx512f")))                                             \
static void NAME##_pv(const struct plan *p, int64_t M, int64_t b, int64_t kvh,  \
                      int64_t j0, int64_t n, const float *s, int64_t lds,       \
                      float *o)                                                 \
{                                                                              \
    const int64_t Dv = p->Dv;                                                  \
    for (int64_t j = 0; j < n; j++) {                                          \
        const char *vr = kv_row(p, &p->v, b, kvh, j0 + j);                     \
        if (j + SMALL_PF < n)                                                  \
            prefetch_row(kv_row(p, &p->v, b, kvh, j0 + j + SMALL_PF), Dv * p->v.esize); \
        for (int64_t r0 = 0; r0 < M; r0 += 4) {                                \
            __m512 p0 = _mm512_set1_ps(s[r0 * lds + j]);                       \
            __m512 p1 = _mm512_set1_ps(s[(r0 + 1) * lds + j]);                 \
            __m512 p2 = _mm512_set1_ps(s[(r0 + 2) * lds + j]);                 \
            __m512 p3 = _mm512_set1_ps(s[(r0 + 3) * lds + j]);                 \
            float *o0 = o + r0 * Dv;                                           \
            for (int64_t c = 0; c < Dv; c += 16) {                             \
                __m512 vv = LOAD(vr, c);                                       \
                _mm512_storeu_ps(o0 + c, _mm512_fmadd_ps(p0, vv, _mm512_loadu_ps(o0 + c))); \
                _mm512_storeu_ps(o0 + Dv + c, _mm512_fmadd_ps(p1, vv, _mm512_loadu_ps(o0 + Dv + c))); \
                _mm512_storeu_ps(o0 + 2 * Dv + c, _mm512_fmadd_ps(p2, vv, _mm512_loadu_ps(o0 + 2 * Dv + c))); \
                _mm512_storeu_ps(o0 + 3 * Dv + c, _mm512_fmadd_ps(p3, vv, _mm512_loadu_ps(o0 + 3 * Dv + c))); \
            }                                                                  \
        }                                                                      \
    }                                                                          \
}

SMALL_KERNELS(small_f32, LOAD_F32)
SMALL_KERNELS(small_bf16, LOAD_BF16)
SMALL_KERNELS(small_f16, LOAD_F16)
#endif

/* Can this plan use the decode-shaped kernels? */
int attn_small_ok(const struct plan *p, int64_t M)
{
#ifdef ATTN_X86
    return !p->scalar && !p->generic && M <= 8 && isa_level() == ISA_AVX512 && p->D % 16 == 0 &&
           p->Dv % 16 == 0 && p->k.dtype == p->v.dtype &&
           (p->k.dtype == KV_F32 || p->k.dtype == KV_BF16 || p->k.dtype == KV_F16);
#else
    (void)p;
    (void)M;
    return 0;
#endif
}

/* Dispatch the decode-shaped kernels on the key/value dtype. */
static void small_qk(const struct plan *p, int64_t M, int64_t b, int64_t kvh, int64_t j0,
                     int64_t n, const float *qs, float *s, int64_t lds)
{
#ifdef ATTN_X86
    switch (p->k.dtype) {
    case KV_BF16: small_bf16_qk(p, M, b, kvh, j0, n, qs, s, lds); break;
    case KV_F16: small_f16_qk(p, M, b, kvh, j0, n, qs, s, lds); break;
    default: small_f32_qk(p, M, b, kvh, j0, n, qs, s, lds); break;
    }
#else
    (void)p; (void)M; (void)b; (void)kvh; (void)j0; (void)n; (void)qs; (void)s; (void)lds;
#endif
}

static void small_pv(const struct plan *p, int64_t M, int64_t b, int64_t kvh, int64_t j0,
                     int64_t n, const float *s, int64_t lds, float *o)
{
#ifdef ATTN_X86
    switch (p->v.dtype) {
    case KV_BF16: small_bf16_pv(p, M, b, kvh, j0, n, s, lds, o); break;
    case KV_F16: small_f16_pv(p, M, b, kvh, j0, n, s, lds, o); break;
    default: small_f32_pv(p, M, b, kvh, j0, n, s, lds, o); break;
    }
#else
    (void)p; (void)M; (void)b; (void)kvh; (void)j0; (void)n; (void)s; (void)lds; (void)o;
#endif
}

/* Keys are split into pieces of DIAG on the causal diagonal. */
#define DIAG 64

/* The first (position-major) row that sees key j: rows of one position
 * share their bounds, and later positions see more. */
static int64_t first_row(const struct scratch *w, int64_t hs, int64_t ni, int64_t j)
{
    for (int64_t ii = 0; ii < ni; ii++)
        if (w->hi[ii * hs] > j)
            return ii * hs;
    return ni * hs;
}

/* Compute one item: hs stacked heads x positions [i0, i1) of request b.
 * Over 150 lines on purpose: it is the tuned tile loop (scores, mask,
 * online softmax, P.V per key tile) whose locals the compiler keeps in
 * registers across the tiles; split into calls, the state would travel
 * through memory on every tile. */
void attn_run_item(void *ctx, size_t idx)
{
    struct plan *p = ctx;
    struct item *it = &p->items[idx];
    struct scratch *w = scratch_get(p);
    if (p->fused && p->hs * (it->i1 - it->i0) >= FUSED_MIN_ROWS) {
        attn_fused_item(p, it, w);
        atomic_store(&w->busy, 0);
        item_done(p);
        return;
    }
    const int64_t b = it->b, h0 = it->h0, i0 = it->i0, ni = it->i1 - it->i0;
    const int64_t hs = p->hs, M = hs * ni, D = p->D, Dv = p->Dv, tk = p->tk;
    const int64_t kvh = h0 / p->G;
    int64_t jlo, jhi, tmp;

    for (int64_t hh = 0; hh < hs; hh++)
        for (int64_t ii = 0; ii < ni; ii++) {
            int64_t r = ii * hs + hh;       /* position-major rows */
            load_f32(w->qs + r * D, q_row(p, b, h0 + hh, i0 + ii), p->q.dtype, D);
            row_bounds(p, b, i0 + ii, &w->lo[r], &w->hi[r]);
            w->m[r] = -INFINITY;
            w->l[r] = 0.0f;
        }
    const int small = attn_small_ok(p, M);
    const int bf = p->bf16 != KV_BF16_NONE && !small;
    if (bf)
        for (int64_t r = 0; r < M; r++) {
            uint16_t *dst = w->qb + r * p->ldqb;
            memcpy(dst, q_row(p, b, h0 + r % hs, i0 + r / hs), (size_t)D * sizeof(uint16_t));
            if (D % 2)
                dst[D] = 0;
        }
    const int64_t Mp = (M + 3) / 4 * 4;       /* rows incl. padding */
    memset(w->o, 0, (size_t)(Mp * Dv) * sizeof(float));
    if (small && Mp > M) {
        memset(w->qs + M * D, 0, (size_t)((Mp - M) * D) * sizeof(float));
        memset(w->s + M * tk, 0, (size_t)((Mp - M) * tk) * sizeof(float));
    }
    row_bounds(p, b, i0, &jlo, &tmp);
    row_bounds(p, b, i0 + ni - 1, &tmp, &jhi);

    const int direct = !p->paged && p->k.dtype == KV_F32 && p->v.dtype == KV_F32;
    const int64_t maxkb = p->bm ? tk / p->bs + 2 : 0;
    /* (softcap and ALiBi go through row_mask, with the keys in place) */
    const int gather = p->bm && !p->mask && !small && !bf && !p->softcap && !p->slopes;
    const int sp = gather && attn_sp_ok(p, M);
    if (sp)
        for (int64_t r = 0; r < M; r++)
            for (int64_t d = 0; d < D; d++)
                w->qt[d * SP_LD(M) + r] = w->qs[r * D + d];
    int64_t nkb = 0;
    for (int64_t j0 = jlo, j1; j0 < jhi; j0 = j1) {
        j1 = j0 + tk < jhi ? j0 + tk : jhi;
        if (p->bm) {
            /* skip blocks no stacked head keeps, then take the run of
             * blocks that some head keeps, up to tk keys */
            const int64_t bs = p->bs, qb = i0 / bs;
            while (j0 < jhi && !any_keep(p, b, h0, hs, qb, j0 / bs)) {
                it->skipped++;
                j0 = (j0 / bs + 1) * bs;
            }
            if (j0 >= jhi)
                break;
            if (sp) {
                if (attn_sp_tile(p, it, w, M, kvh, j0, jhi, &j1) > 0) {
                    it->done++;
                    continue;
                }
            } else if (gather) {
                const float *gk, *gv;
                int64_t gldk, gldv;
                int64_t n = attn_gather_blocks(p, it, w, M, kvh, j0, jhi, direct, &gk, &gldk,
                                          &gv, &gldv, &j1);
                if (n > 0) {
                    it->done++;
                    gemm_qk(p, M, n, w->qs, gk, gldk, w->s, tk);
                    for (int64_t r = 0; r < M; r++)
                        row_softmax(p, w->s + r * tk, n, &w->m[r], &w->l[r], w->o + r * Dv);
                    gemm_pv(p, M, n, w->s, tk, gv, gldv, w->o);
                    continue;
                }
            }
            j1 = j0;
            nkb = 0;
            while (j1 < jhi && j1 - j0 < tk && nkb < maxkb) {
                int64_t kb = j1 / bs;
                if (nkb > 0 && !any_keep(p, b, h0, hs, qb, kb))
                    break;
                for (int64_t hh = 0; hh < hs; hh++)
                    w->keep[hh * maxkb + nkb] = (unsigned char)bm_keep(p, b, h0 + hh, qb, kb);
                nkb++;
                j1 = (kb + 1) * bs < jhi ? (kb + 1) * bs : jhi;
            }
            if (j1 - j0 > tk)
                j1 = j0 + tk;
        }
        it->done++;
        const int64_t n = j1 - j0;
        const float *kt, *vt;
        int64_t ldk, ldv;
        if (small) {
            kt = vt = NULL;
            ldk = ldv = 0;
            small_qk(p, Mp, b, kvh, j0, n, w->qs, w->s, tk);
        } else if (bf) {
            /* K^T packed for the bf16 tiles; V in f32 only when P stays f32 */
            for (int64_t j = 0; j < n; j++)
                kv_bf16_pack_col(w->kp, p->psk, j,
                                 (const uint16_t *)kv_row(p, &p->k, b, kvh, j0 + j), D);
            for (int64_t j = 0; p->p_f32 && j < n; j++)
                load_f32(w->vt + j * Dv, kv_row(p, &p->v, b, kvh, j0 + j), p->v.dtype, Dv);
            kt = NULL;
            vt = w->vt;
            ldk = D;
            ldv = Dv;
        } else if (direct) {
            kt = (const float *)kv_row(p, &p->k, b, kvh, j0);
            vt = (const float *)kv_row(p, &p->v, b, kvh, j0);
            ldk = p->k.ss;
            ldv = p->v.ss;
        } else {
            for (int64_t j = 0; j < n; j++) {
                load_f32(w->kt + j * D, kv_row(p, &p->k, b, kvh, j0 + j), p->k.dtype, D);
                load_f32(w->vt + j * Dv, kv_row(p, &p->v, b, kvh, j0 + j), p->v.dtype, Dv);
            }
            kt = w->kt;
            vt = w->vt;
            ldk = D;
            ldv = Dv;
        }
        /* On the causal diagonal the first rows do not see the last keys
         * of the tile: there, multiply each piece of DIAG keys with only
         * the rows (position-major, so a suffix) that see it.  The rows
         * left out get -inf from row_mask and weigh nothing. */
        const int diag = !small && (p->causal || p->window > 0) && w->hi[0] < j0 + n;
        const int64_t kpd = (D + 1) / 2;
        if (bf && !diag)
            kv_bf16_gemm(p->bf16, M, n, kpd, w->qb, p->ldqb, w->kp, p->psk, w->s, tk,
                         p->scale, 0);
        else if (bf)
            for (int64_t c0 = 0; c0 < n; c0 += DIAG) {
                int64_t c1 = c0 + DIAG < n ? c0 + DIAG : n, rs = first_row(w, hs, ni, j0 + c0);
                if (rs < M)
                    kv_bf16_gemm(p->bf16, M - rs, c1 - c0, kpd, w->qb + rs * p->ldqb, p->ldqb,
                                 w->kp + (c0 / 32) * p->psk, p->psk, w->s + rs * tk + c0, tk,
                                 p->scale, 0);
            }
        else if (!small && !diag)
            gemm_qk(p, M, n, w->qs, kt, ldk, w->s, tk);
        else if (diag)
            for (int64_t c0 = 0; c0 < n; c0 += DIAG) {
                int64_t c1 = c0 + DIAG < n ? c0 + DIAG : n, rs = first_row(w, hs, ni, j0 + c0);
                if (rs < M)
                    gemm_qk(p, M - rs, c1 - c0, w->qs + rs * D, kt + c0 * ldk, ldk,
                            w->s + rs * tk + c0, tk);
            }

        for (int64_t r = 0; r < M; r++) {
            int64_t hh = r % hs, i = i0 + r / hs, h = h0 + hh;
            float *s = w->s + r * tk;
            row_mask(p, s, n, b, h, i, j0, w->lo[r], w->hi[r]);
            if (p->bm)
                for (int64_t t = 0; t < nkb; t++) {
                    if (w->keep[hh * maxkb + t])
                        continue;
                    int64_t a = (j0 / p->bs + t) * p->bs - j0, z = a + p->bs;
                    if (a < 0)
                        a = 0;
                    if (z > n)
                        z = n;
                    if (a < z)
                        fill_ninf(s + a, z - a);
                }
            row_softmax(p, s, n, &w->m[r], &w->l[r], w->o + r * Dv);
        }
        if (small) {
            small_pv(p, Mp, b, kvh, j0, n, w->s, tk, w->o);
        } else if (bf && !p->p_f32) {
            /* P rounded to bf16 (a zero after an odd n), V packed in pairs
             * of keys (a zero key after an odd n) */
            for (int64_t r = 0; r < M; r++) {
                kv_f32_to_bf16_n(w->s + r * tk, w->pb + r * p->ldpb, (size_t)n);
                w->pb[r * p->ldpb + n] = 0;
            }
            for (int64_t j = 0; j < n; j += 2)
                kv_bf16_pack_rows(w->vp, p->psv, j,
                                  (const uint16_t *)kv_row(p, &p->v, b, kvh, j0 + j),
                                  j + 1 < n ? (const uint16_t *)kv_row(p, &p->v, b, kvh, j0 + j + 1)
                                            : NULL, Dv);
            for (int64_t c0 = 0; c0 < n; c0 += diag ? DIAG : n) {
                int64_t c1 = diag && c0 + DIAG < n ? c0 + DIAG : n;
                int64_t rs = diag ? first_row(w, hs, ni, j0 + c0) : 0;
                if (rs < M)
                    kv_bf16_gemm(p->bf16, M - rs, Dv, (c1 - c0 + 1) / 2,
                                 w->pb + rs * p->ldpb + c0, p->ldpb, w->vp + (c0 / 2) * 32,
                                 p->psv, w->o + rs * Dv, Dv, 1.0f, 1);
            }
        } else if (diag) {
            for (int64_t c0 = 0; c0 < n; c0 += DIAG) {
                int64_t c1 = c0 + DIAG < n ? c0 + DIAG : n, rs = first_row(w, hs, ni, j0 + c0);
                if (rs < M)
                    gemm_pv(p, M - rs, c1 - c0, w->s + rs * tk + c0, tk, vt + c0 * ldv, ldv,
                            w->o + rs * Dv);
            }
        } else {
            gemm_pv(p, M, n, w->s, tk, vt, ldv, w->o);
        }
    }

    for (int64_t r = 0; r < M; r++) {
        int64_t hh = r % hs, i = i0 + r / hs, h = h0 + hh;
        finish_row(p, b, h, i, w->o + r * Dv, w->m[r], w->l[r]);
    }
    atomic_store(&w->busy, 0);
    item_done(p);
}
