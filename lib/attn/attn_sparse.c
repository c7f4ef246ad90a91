/* attn_sparse.c - the block-sparse tiles of attn_run_item: the runs of kept
 * key blocks gathered into one pair of GEMMs (attn_gather_blocks), and the
 * AVX-512 kernels that multiply kept blocks straight from the f32 inputs
 * with the scores kept transposed (attn_sp_tile). */
#include <math.h>
#include <string.h>

#include "attn/attn_row.h"

/* Copy keys [a, z) of kv head kvh of request b, as f32, into rows
 * dst[0 ..) of width w (K or V, per operand o). */
static void gather_rows(const struct plan *p, const struct operand *o, int64_t w, int64_t b,
                        int64_t kvh, int64_t a, int64_t z, float *dst)
{
    if (!p->paged && o->dtype == KV_F32 && o->ss == w) {
        memcpy(dst, kv_row(p, o, b, kvh, a), (size_t)((z - a) * w) * sizeof(float));
        return;
    }
    for (int64_t j = a; j < z; j++)
        load_f32(dst + (j - a) * w, kv_row(p, o, b, kvh, j), o->dtype, w);
}

/* Block-sparse tile without masking: starting at the kept block at j0,
 * collect the blocks that some stacked row keeps -- all rows of the item
 * see every key of them under the implicit masks -- up to tk keys, with
 * the dropped blocks between them left out, so that one pair of GEMMs of
 * width up to tk covers several separate kept blocks.  Returns the number
 * of keys (0 when the block at j0 does not qualify); *j_end is where the
 * walk stopped.  kt/vt point at the keys and values: straight at the input
 * when they are one contiguous f32 run, else gathered into w->kt/w->vt. */
int64_t attn_gather_blocks(const struct plan *p, struct item *it, struct scratch *w,
                           int64_t M, int64_t kvh, int64_t j0, int64_t jhi, int direct,
                           const float **kt, int64_t *ldk, const float **vt, int64_t *ldv,
                           int64_t *j_end)
{
    const int64_t bs = p->bs, b = it->b, qb = it->i0 / bs, tk = p->tk;
    const int64_t min_hi = w->hi[0], max_lo = w->lo[M - 1];
    int64_t n = 0, run_end = -1, contiguous = 1, pending = 0;
    *j_end = j0;
    for (int64_t kb = j0 / bs; kb * bs < jhi; kb++) {
        int64_t a = kb * bs, z = (kb + 1) * bs < jhi ? (kb + 1) * bs : jhi;
        if (a < max_lo || z > min_hi || n + (z - a) > tk)
            break;
        if (!any_keep(p, b, it->h0, p->hs, qb, kb)) {
            pending++;
            continue;
        }
        /* stacked heads share one mask (attn_plan_items stacks only then), so
         * every row keeps this block: no masking inside the tile */
        it->skipped += (uint64_t)pending;
        pending = 0;
        if (run_end >= 0 && a != run_end)
            contiguous = 0;
        run_end = z;
        n += z - a;
        *j_end = z;
    }
    if (n == 0)
        return 0;
    if (contiguous && direct) {
        *kt = (const float *)kv_row(p, &p->k, b, kvh, j0);
        *vt = (const float *)kv_row(p, &p->v, b, kvh, j0);
        *ldk = p->k.ss;
        *ldv = p->v.ss;
        return n;
    }
    int64_t at = 0;
    for (int64_t kb = j0 / bs; kb * bs < *j_end; kb++) {
        int64_t a = kb * bs, z = (kb + 1) * bs < *j_end ? (kb + 1) * bs : *j_end;
        if (!any_keep(p, b, it->h0, p->hs, qb, kb))
            continue;
        gather_rows(p, &p->k, p->D, b, kvh, a, z, w->kt + at * p->D);
        gather_rows(p, &p->v, p->Dv, b, kvh, a, z, w->vt + at * p->Dv);
        at += z - a;
    }
    *kt = w->kt;
    *vt = w->vt;
    *ldk = p->D;
    *ldv = p->Dv;
    return n;
}

/* ---- AVX-512 block-sparse tiles ------------------------------------ */

/* The kept key blocks of a block-sparse tile, multiplied straight from the
 * f32 inputs: no gathering of K and V into one run, no packing of them
 * for every query block (a BLAS call packs its operands each time, and
 * here each call is only bs query rows deep).  The scores are kept
 * transposed, St[j][r] (key-major, the M stacked query rows across), so
 * that K and V rows are read where they lie and only the item's queries
 * are transposed, once per item: Qt[d][r].  The softmax then runs 16 rows
 * at a time down the key axis.  The reference is the BLAS path
 * (attn_gather_blocks, gemm_qk, row_softmax, gemm_pv) and the scalar loops. */

#define SP_MAXB 64              /* kept blocks in one tile at most */

#ifdef ATTN_X86
/* Eight keys against 32 query rows: two accumulators per key. */
#define SP_ACC(i) __m512 c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps()
#define SP_QK_FMA(i)                                                    \
    do {                                                                \
        __m512 kk = _mm512_set1_ps(kr[(i) * ldk]);                            \
        c##i##a = _mm512_fmadd_ps(kk, q0, c##i##a);                     \
        c##i##b = _mm512_fmadd_ps(kk, q1, c##i##b);                     \
    } while (0)
#define SP_QK_STORE(i)                                                  \
    do {                                                                \
        _mm512_storeu_ps(so + (i) * lt, _mm512_mul_ps(c##i##a, vs));     \
        _mm512_storeu_ps(so + (i) * lt + 16, _mm512_mul_ps(c##i##b, vs)); \
    } while (0)

/* St[j][r] = scale * sum_d K[j][d] Qt[d][r] for the nk keys at k (rows ldk
 * apart, the first of them key a) and the M query rows of qt (M a multiple
 * of 32); Qt and St rows are lt apart.  Keys at or past a row's hi bound
 * are not computed where a whole panel of 32 rows is past them: they get
 * -inf (the rest is masked by the caller). */
__attribute__((target("avx512f")))
static void sp_qk(int64_t M, int64_t lt, int64_t D, const float *qt, const float *k,
                  int64_t ldk, int64_t nk, int64_t a, const int64_t *hi, float scale,
                  float *st)
{
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t r0 = 0; r0 < M; r0 += 32) {
        int64_t j = 0, lim = hi[r0 + 31] - a;
        lim = lim < 0 ? 0 : lim > nk ? nk : lim;
        for (int64_t jj = lim; jj < nk; jj++) {
            _mm512_storeu_ps(st + jj * lt + r0, _mm512_set1_ps(-INFINITY));
            _mm512_storeu_ps(st + jj * lt + r0 + 16, _mm512_set1_ps(-INFINITY));
        }
        for (; j + 8 <= lim; j += 8) {
            const float *kr = k + j * ldk, *qp = qt + r0;
            SP_ACC(0); SP_ACC(1); SP_ACC(2); SP_ACC(3);
            SP_ACC(4); SP_ACC(5); SP_ACC(6); SP_ACC(7);
            for (int64_t d = 0; d < D; d++, qp += lt, kr++) {
                __m512 q0 = _mm512_loadu_ps(qp), q1 = _mm512_loadu_ps(qp + 16);
                /* keep both in registers (GCC would spill one, and the
                 * reload per FMA makes the loop load-bound) */
                __asm__("" : "+v"(q0), "+v"(q1));
                SP_QK_FMA(0); SP_QK_FMA(1); SP_QK_FMA(2); SP_QK_FMA(3);
                SP_QK_FMA(4); SP_QK_FMA(5); SP_QK_FMA(6); SP_QK_FMA(7);
            }
            float *so = st + j * lt + r0;
            SP_QK_STORE(0); SP_QK_STORE(1); SP_QK_STORE(2); SP_QK_STORE(3);
            SP_QK_STORE(4); SP_QK_STORE(5); SP_QK_STORE(6); SP_QK_STORE(7);
        }
        for (; j < lim; j++) {
            const float *kr = k + j * ldk, *qp = qt + r0;
            SP_ACC(0);
            for (int64_t d = 0; d < D; d++, qp += lt, kr++) {
                __m512 q0 = _mm512_loadu_ps(qp), q1 = _mm512_loadu_ps(qp + 16);
                SP_QK_FMA(0);
            }
            float *so = st + j * lt + r0;
            SP_QK_STORE(0);
        }
    }
}

/* Eight query rows against 32 output columns. */
#define SP_LOAD(i)                                                      \
    __m512 c##i##a = _mm512_loadu_ps(oo + (i) * Dv),                    \
           c##i##b = _mm512_loadu_ps(oo + (i) * Dv + 16)
#define SP_PV_FMA(i)                                                    \
    do {                                                                \
        __m512 pp = _mm512_set1_ps(pj[i]);                              \
        c##i##a = _mm512_fmadd_ps(pp, v0, c##i##a);                     \
        c##i##b = _mm512_fmadd_ps(pp, v1, c##i##b);                     \
    } while (0)
#define SP_PV_STORE(i)                                                  \
    do {                                                                \
        _mm512_storeu_ps(oo + (i) * Dv, c##i##a);                       \
        _mm512_storeu_ps(oo + (i) * Dv + 16, c##i##b);                  \
    } while (0)

/* O[r][c] += sum_j Pt[j][r] V[j][c] over the nk keys at v (rows ldv apart,
 * the first of them key a), for the M rows of O (a multiple of 8; Pt rows
 * lt apart) and its Dv columns (a multiple of 32).  Keys at or past the hi
 * bound of all 8 rows of a panel weigh 0 there and are passed over.  Keys
 * go in chunks of SP_PVK, so that a chunk's 32 columns of V stay in L1
 * while all rows pass over them. */
#define SP_PVK 64
__attribute__((target("avx512f")))
static void sp_pv(int64_t M, int64_t lt, int64_t Dv, const float *pt, const float *v,
                  int64_t ldv, int64_t nk, int64_t a, const int64_t *hi, float *o)
{
    for (int64_t c0 = 0; c0 < Dv; c0 += 32)
        for (int64_t j0 = 0; j0 < nk; j0 += SP_PVK)
        for (int64_t r0 = 0; r0 < M; r0 += 8) {
            int64_t j1 = j0 + SP_PVK < nk ? j0 + SP_PVK : nk;
            if (j1 > hi[r0 + 7] - a)
                j1 = hi[r0 + 7] - a;
            if (j1 <= j0)
                continue;
            float *oo = o + r0 * Dv + c0;
            const float *pj = pt + j0 * lt + r0, *vp = v + j0 * ldv + c0;
            SP_LOAD(0); SP_LOAD(1); SP_LOAD(2); SP_LOAD(3);
            SP_LOAD(4); SP_LOAD(5); SP_LOAD(6); SP_LOAD(7);
            for (int64_t j = j0; j < j1; j++, pj += lt, vp += ldv) {
                __m512 v0 = _mm512_loadu_ps(vp), v1 = _mm512_loadu_ps(vp + 16);
                SP_PV_FMA(0); SP_PV_FMA(1); SP_PV_FMA(2); SP_PV_FMA(3);
                SP_PV_FMA(4); SP_PV_FMA(5); SP_PV_FMA(6); SP_PV_FMA(7);
            }
            SP_PV_STORE(0); SP_PV_STORE(1); SP_PV_STORE(2); SP_PV_STORE(3);
            SP_PV_STORE(4); SP_PV_STORE(5); SP_PV_STORE(6); SP_PV_STORE(7);
        }
}

/* Online-softmax update of the M rows (a multiple of 16) from their
 * transposed scores St[0..n)[M] (rows lt apart), turned into weights in place; the
 * running maxima m, sums l and output rows o (Dv a multiple of 16)
 * follow the rules of row_softmax: NaN scores are passed over by the max
 * and poison the sum; a row with nothing to attend yet (max -inf) keeps
 * m = -inf and weighs 0 (NaN stays NaN) without rescaling. */
__attribute__((target("avx512f")))
static void sp_softmax(int64_t M, int64_t lt, int64_t n, float *st, float *m, float *l,
                       float *o, int64_t Dv)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    for (int64_t g = 0; g < M; g += 16) {
        __m512 mx = ninf;
        for (int64_t j = 0; j < n; j++)
            mx = _mm512_max_ps(_mm512_loadu_ps(st + j * lt + g), mx);
        __m512 mo = _mm512_loadu_ps(m + g);
        __m512 mn = _mm512_max_ps(mx, mo);
        __mmask16 none = _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
        __m512 base = _mm512_mask_mov_ps(mn, none, _mm512_setzero_ps());
        __m512 alpha = _mm512_mask_mov_ps(exp512(_mm512_sub_ps(mo, mn)), none, one);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j++) {
            float *s = st + j * lt + g;
            __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s), base));
            _mm512_storeu_ps(s, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_storeu_ps(l + g, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l + g), alpha), sum));
        _mm512_storeu_ps(m + g, mn);
        __mmask16 rescale = _mm512_cmp_ps_mask(alpha, one, _CMP_NEQ_UQ);
        if (!rescale)
            continue;
        float a[16];
        _mm512_storeu_ps(a, alpha);
        for (int i = 0; i < 16; i++) {
            if (!(rescale >> i & 1))
                continue;
            __m512 va = _mm512_set1_ps(a[i]);
            float *orow = o + (g + i) * Dv;
            for (int64_t d = 0; d < Dv; d += 16)
                _mm512_storeu_ps(orow + d, _mm512_mul_ps(_mm512_loadu_ps(orow + d), va));
        }
    }
}
#endif

/* Can attn_run_item take block-sparse tiles of M stacked rows through the
 * AVX-512 kernels?  f32 keys and values in place, whole vectors. */
int attn_sp_ok(const struct plan *p, int64_t M)
{
    return isa_level() == ISA_AVX512 && !p->scalar && !p->paged && p->k.dtype == KV_F32
           && p->v.dtype == KV_F32 && M % 32 == 0 && p->Dv % 32 == 0;
}

/* Block-sparse tile through the AVX-512 kernels: the run of kept blocks
 * from j0, up to tk keys, the dropped blocks between them left out; its
 * scores (-inf outside each row's causal/window bounds: the diagonal
 * blocks come this way too, computed only where a panel of rows sees
 * them), softmax update and P V straight from the inputs; w->qt holds the
 * item's transposed queries.  Returns the number of keys (0 when the block
 * at j0 alone is more than tk keys); *j_end is where the walk stopped. */
int64_t attn_sp_tile(const struct plan *p, struct item *it, struct scratch *w, int64_t M,
                     int64_t kvh, int64_t j0, int64_t jhi, int64_t *j_end)
{
#ifdef ATTN_X86
    const int64_t bs = p->bs, b = it->b, qb = it->i0 / bs, tk = p->tk;
    const int64_t min_hi = w->hi[0], max_lo = w->lo[M - 1];
    const int64_t lt = SP_LD(M);
    const float ninf = -INFINITY;
    int64_t n = 0, pending = 0, ba[SP_MAXB], bz[SP_MAXB];
    int nb = 0;
    *j_end = j0;
    for (int64_t kb = j0 / bs; kb * bs < jhi && nb < SP_MAXB; kb++) {
        int64_t a = kb * bs, z = (kb + 1) * bs < jhi ? (kb + 1) * bs : jhi;
        if (n + (z - a) > tk)
            break;
        if (!any_keep(p, b, it->h0, p->hs, qb, kb)) {
            pending++;
            continue;
        }
        it->skipped += (uint64_t)pending;
        pending = 0;
        ba[nb] = a;
        bz[nb++] = z;
        n += z - a;
        *j_end = z;
    }
    if (n == 0)
        return 0;
    int64_t at = 0;
    for (int i = 0; i < nb; i++) {
        float *st = w->s + at * lt;
        sp_qk(M, lt, p->D, w->qt, (const float *)kv_row(p, &p->k, b, kvh, ba[i]), p->k.ss,
              bz[i] - ba[i], ba[i], w->hi, p->scale, st);
        /* keys some rows may not see (causal diagonal, window start): -inf
         * there; rows are position-major, so the rows past key j's bounds
         * are a prefix (hi <= j) and a suffix (lo > j) */
        if (ba[i] < max_lo || bz[i] > min_hi) {
            int64_t r_hi = 0, r_lo = 0;
            for (int64_t j = ba[i]; j < bz[i]; j++, st += lt) {
                while (r_hi < M && w->hi[r_hi] <= j)
                    r_hi++;
                while (r_lo < M && w->lo[r_lo] <= j)
                    r_lo++;
                for (int64_t r = 0; r < r_hi; r++)
                    st[r] = ninf;
                for (int64_t r = r_lo; r < M; r++)
                    st[r] = ninf;
            }
        }
        at += bz[i] - ba[i];
    }
    sp_softmax(M, lt, n, w->s, w->m, w->l, w->o, p->Dv);
    at = 0;
    for (int i = 0; i < nb; i++) {
        sp_pv(M, lt, p->Dv, w->s + at * lt, (const float *)kv_row(p, &p->v, b, kvh, ba[i]),
              p->v.ss, bz[i] - ba[i], ba[i], w->hi, w->o);
        at += bz[i] - ba[i];
    }
    return n;
#else
    (void)p; (void)it; (void)w; (void)M; (void)kvh; (void)j0; (void)jhi;
    *j_end = j0;
    return 0;
#endif
}
