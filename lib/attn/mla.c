/* mla.c - Multi-head Latent Attention, absorbed and naive (see mla.h).
 *
 * Both forms share one kernel: a block of query rows (already scaled, f32)
 * against key tiles, online softmax in f32, P V by single-threaded BLAS.
 * The absorbed form's keys are latent rows gathered from the paged cache
 * (V is their first Dl dims; an f32 cache's rows are read in place, its
 * tiles ending at the cache's blocks when those hold RUN_MIN keys or
 * more: measured on a Zen 5, 32k keys of DeepSeek-V3's 576, 16 heads,
 * blocks of 64 took 8-12% less CPU time than on copied tiles of 128, 128
 * heads 3-6%, blocks of 32 7-9%); the naive form's are K_h and V_h expanded
 * per (request, head) from c_kv by BLAS.  Work items never depend on the
 * thread count; partial results of a request's key chunks are merged in
 * chunk order.
 *
 * A bf16 Q and cache take the bf16 tiles instead of sgemm.  Which ones:
 * on an x86 route (VDPBF16PS or its model) with Dl a multiple of 32, for
 * an item of at most DEC_ROWS rows, the decode tiles of mla_dec.h, which
 * read each latent row where it lies in the cache (absorbed_item_dec);
 * otherwise (the Arm routes, another Dl, larger items, over whose rows
 * the copy is shared and which measured a few percent faster on the
 * packed kernel) the packed tiles of bf16.h, which copy each tile's keys
 * into panels first (absorbed_item_bf16).  Both add the same products in the same
 * order, so the choice changes the time, never the bits.
 *
 * The plan of the work items, their run on the threads and the merge of
 * their partial results are in mla_job.c (mla_int.h).
 */
#include "attn/mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bf16.h"
#include "attn/mla_dec.h"
#include "attn/mla_int.h"
#include "core/blas.h"
#include "core/cli.h"
#include "core/half.h"
#include "core/isa.h"

#define TILE_K 128          /* keys per tile */
#define DEC_ROWS 128        /* the decode tiles take items of at most this many rows */
#define DEC_AHEAD TILE_K    /* the decode tiles' rows fetched past a tile */
#define RUN_MIN 32          /* f32 cache blocks this long are read in place */

/* ---- the kernel ---------------------------------------------------- */

/* One block of rows: q [n, d] scaled, lim[r] the first key row r may not
 * see (keys j0 + t with j0 + t < lim[r] are visible), m/l/acc the running
 * max, sum and unnormalised output [n, dv]; s scratch [n, TILE_K]. */
struct rows {
    int64_t n, d, dv;
    const float *q;
    const int64_t *lim;
    float *m, *l, *acc, *s;
};

static void rows_init(struct rows *w)
{
    for (int64_t r = 0; r < w->n; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    memset(w->acc, 0, (size_t)(w->n * w->dv) * sizeof(float));
}

/* Keys j0 .. j0 + nk - 1: k rows of d floats (stride ldk), v rows of dv
 * floats (stride ldv). */
static int rows_any(const struct rows *w, int64_t j0)
{
    int any = 0;
    for (int64_t r = 0; r < w->n; r++)
        any |= w->lim[r] > j0;
    return any;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MLA_X86 1
__attribute__((target("avx512f")))
static float max_512(const float *s, int64_t n)
{
    __m512 acc = _mm512_set1_ps(-INFINITY);
    __mmask16 un = 0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 v = _mm512_loadu_ps(s + j);
        un |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        acc = _mm512_max_ps(v, acc);
    }
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), k, s + j);
        un |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        acc = _mm512_max_ps(v, acc);
    }
    return un ? NAN : _mm512_reduce_max_ps(acc);
}

__attribute__((target("avx512f")))
static void sub_512(float *s, int64_t n, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(s + j, _mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
    for (; j < n; j++)
        s[j] -= m;
}

__attribute__((target("avx512f")))
static void scale_512(float *acc, int64_t n, float a)
{
    const __m512 va = _mm512_set1_ps(a);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        _mm512_storeu_ps(acc + c, _mm512_mul_ps(_mm512_loadu_ps(acc + c), va));
    for (; c < n; c++)
        acc[c] *= a;
}

__attribute__((target("avx512f")))
static float sum_512(const float *s, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        acc = _mm512_add_ps(acc, _mm512_loadu_ps(s + j));
    if (j < n)
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - j)) - 1), s + j));
    return _mm512_reduce_add_ps(acc);
}
#endif

/* A row of n > 0 scores: its maximum (the scalar loop starts from s[0],
 * so only a NaN there shows; the vector one reports any NaN), s - m in
 * place, and the sum (in order; the vector one in sixteen lane sums).
 * vec: AVX-512, which the caller has checked. */
static float row_max(const float *s, int64_t n, int vec)
{
    float m = s[0];
#ifdef MLA_X86
    if (vec)
        return max_512(s, n);
#else
    (void)vec;
#endif
    for (int64_t j = 1; j < n; j++)
        m = s[j] > m ? s[j] : m;
    return m;
}

static void row_sub(float *s, int64_t n, float m, int vec)
{
#ifdef MLA_X86
    if (vec) {
        sub_512(s, n, m);
        return;
    }
#else
    (void)vec;
#endif
    for (int64_t j = 0; j < n; j++)
        s[j] -= m;
}

/* acc *= a, element by element (the same products either way). */
static void row_scale(float *acc, int64_t n, float a, int vec)
{
#ifdef MLA_X86
    if (vec) {
        scale_512(acc, n, a);
        return;
    }
#else
    (void)vec;
#endif
    for (int64_t c = 0; c < n; c++)
        acc[c] *= a;
}

static float row_sum(const float *s, int64_t n, int vec)
{
    float sum = 0.0f;
#ifdef MLA_X86
    if (vec)
        return sum_512(s, n);
#else
    (void)vec;
#endif
    for (int64_t j = 0; j < n; j++)
        sum += s[j];
    return sum;
}

/* The online softmax of a tile's scores s: s becomes exp(s - m) on the
 * visible keys and 0 past them, acc and l rescaled to the new maximum.
 * vec (the bf16 tiles, on AVX-512): the maximum, the shift and the sum in
 * vectors (the sum in another order: within the bound's gamma_n).  The
 * rescale of acc runs in vectors on AVX-512 on every route: one product
 * an element, the same bits. */
static void rows_softmax(struct rows *w, int64_t j0, int64_t nk, int vec)
{
#ifdef MLA_X86
    int vec_any = kv_isa_has(KV_ISA_AVX512);     /* the rescale: exact either way */
    vec = vec && vec_any;
#else
    int vec_any = 0;
    vec = 0;
#endif
    for (int64_t r = 0; r < w->n; r++) {
        float *s = w->s + r * TILE_K;
        int64_t vis = w->lim[r] - j0;
        vis = vis < 0 ? 0 : vis > nk ? nk : vis;
        if (vis == 0) {
            memset(s, 0, (size_t)nk * sizeof(float));
            continue;
        }
        float mt = row_max(s, vis, vec);
        float mo = w->m[r], mn = mo > mt ? mo : mt;
        if (isnan(mt))
            mn = mt;
        row_sub(s, vis, mn, vec);
        kv_attn_exp_n(s, (size_t)vis);
        for (int64_t j = vis; j < nk; j++)
            s[j] = 0.0f;
        float sum = row_sum(s, vis, vec);
        if (mo != -INFINITY && mo != mn) {
            float a = expf(mo - mn);
            row_scale(w->acc + r * w->dv, w->dv, a, vec_any);
            w->l[r] = w->l[r] * a + sum;
        } else {
            w->l[r] += sum;
        }
        w->m[r] = mn;
    }
}

static void rows_tile(struct rows *w, const float *k, int64_t ldk, const float *v,
                      int64_t ldv, int64_t j0, int64_t nk)
{
    if (!rows_any(w, j0))
        return;
    kv_blas_sgemm(KV_BLAS_N, KV_BLAS_T, (int)w->n, (int)nk, (int)w->d,
                  1.0f, w->q, (int)w->d, k, (int)ldk, 0.0f, w->s, TILE_K);
    rows_softmax(w, j0, nk, 0);
    kv_blas_sgemm(KV_BLAS_N, KV_BLAS_N, (int)w->n, (int)w->dv, (int)nk,
                  1.0f, w->s, TILE_K, v, (int)ldv, 1.0f, w->acc, (int)w->dv);
}

/* n elements of src (dtype dt) to f32. */
static void to_f32(enum kv_dtype dt, const void *src, float *dst, size_t n)
{
    switch (dt) {
    case KV_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case KV_BF16:
        kv_bf16_to_f32_n(src, dst, n);
        break;
    case KV_F16:
        kv_f16_to_f32_n(src, dst, n);
        break;
    default: {
        const double *d = src;
        for (size_t i = 0; i < n; i++)
            dst[i] = (float)d[i];
    }
    }
}

/* ---- items -------------------------------------------------------- */

/* q: the f32 rows, scaled; on the bf16 tiles (j->q16) the bf16 rows as
 * they are, a row every ldq halves (the tiles apply the scale). */
static void item_setup(const struct job *j, const struct item *it, void *q, int64_t ldq,
                       int64_t *lim)
{
    int64_t heads = it->hn, n = 0;
    int64_t Lq = j->q_len[it->b], Lk = j->kv_len[it->b];
    for (int64_t i = it->i0; i < it->i1; i++) {
        for (int64_t hh = 0; hh < heads; hh++, n++) {
            int64_t h = it->h + hh;
            size_t row = (size_t)(((j->q_start[it->b] + i) * j->H + h) * j->dq);
            if (j->q16) {
                memcpy((uint16_t *)q + n * ldq, j->q16 + row, (size_t)j->dq * sizeof(uint16_t));
            } else {
                float *dst = (float *)q + n * ldq;
                for (int64_t c = 0; c < j->dq; c++)
                    dst[c] = j->q[row + (size_t)c] * j->scale;
            }
            int64_t l = j->causal ? i + Lk - Lq + 1 : Lk;
            l = l < it->j0 ? it->j0 : l > it->j1 ? it->j1 : l;
            lim[n] = l;
        }
    }
}

static void item_store(const struct job *j, const struct item *it, const struct rows *w)
{
    float *p = j->parts + it->part;
    memcpy(p, w->m, (size_t)w->n * sizeof(float));
    memcpy(p + w->n, w->l, (size_t)w->n * sizeof(float));
    memcpy(p + 2 * w->n, w->acc, (size_t)(w->n * w->dv) * sizeof(float));
}

/* Floats of an item's scratch before its limits (an even count, so that
 * the int64 limits after them start 8-byte aligned), and its bytes. */
static size_t rows_floats(int64_t n, int64_t d, int64_t dv, size_t extra)
{
    size_t fl = (size_t)(n * d + 2 * n + n * dv + n * TILE_K) + extra;
    return fl + (fl & 1);
}

static size_t rows_bytes(int64_t n, int64_t d, int64_t dv, size_t extra)
{
    return rows_floats(n, d, dv, extra) * sizeof(float) + (size_t)n * sizeof(int64_t);
}

/* Lay an item's scratch over buf (rows_bytes of it). */
static float *rows_carve(struct rows *w, float *buf, int64_t n, int64_t d, int64_t dv,
                         size_t extra, int64_t **lim)
{
    size_t fl = rows_floats(n, d, dv, extra);
    w->n = n; w->d = d; w->dv = dv;
    w->q = buf;
    w->m = buf + n * d;
    w->l = w->m + n;
    w->acc = w->l + n;
    w->s = w->acc + n * dv;
    *lim = (int64_t *)(void *)(buf + fl);
    w->lim = *lim;
    return buf;
}

/* Scratch of one item, one allocation. */
static float *rows_alloc(struct rows *w, int64_t n, int64_t d, int64_t dv, size_t extra,
                         int64_t **lim)
{
    float *buf = malloc(rows_bytes(n, d, dv, extra));
    return buf ? rows_carve(w, buf, n, d, dv, extra, lim) : NULL;
}

/* Absorbed on the bf16 tiles: the queries' bf16 rows against each tile's
 * latent rows packed as they are stored (K^T for the scores, pairs of keys
 * of their first Dl dims for P V), the scale applied to the dot products,
 * P rounded to bf16. */
static void absorbed_item_bf16(struct job *j, const struct item *it)
{
    const int64_t n = mla_item_rows(it), D = j->dq, Dl = j->dl;
    const int64_t kpd = (D + 1) / 2, ldqb = 2 * kpd, ldpb = TILE_K + 2;
    const int64_t psk = 32 * kpd, psv = 32 * (TILE_K / 2), nvp = (Dl + 31) / 32;
    struct rows w;
    int64_t *lim;
    size_t nrow = (rows_bytes(n, D, Dl, 0) + 63) & ~(size_t)63;
    size_t nqb = ((size_t)(n * (ldqb + ldpb)) * sizeof(uint16_t) + 63) & ~(size_t)63;
    size_t nkp = (size_t)((TILE_K / 32) * psk + nvp * psv) * sizeof(uint32_t);
    struct slot *sl = mla_slot_get(j, nrow + nqb + nkp);
    if (!sl) {
        j->failed = 1;
        return;
    }
    char *mem = sl->p;
    rows_carve(&w, (float *)(void *)mem, n, D, Dl, 0, &lim);
    /* zeroed: the tiles read whole panels and pairs, padding included */
    uint16_t *qb = (uint16_t *)(void *)(mem + nrow);
    uint32_t *kp = (uint32_t *)(void *)(mem + nrow + nqb);
    memset(qb, 0, nqb + nkp);
    uint16_t *pb = qb + n * ldqb;
    uint32_t *vp = kp + (TILE_K / 32) * psk;
    item_setup(j, it, qb, ldqb, lim);
    rows_init(&w);
    int64_t end = it->j0;
    for (int64_t r = 0; r < n; r++)
        end = lim[r] > end ? lim[r] : end;
    const uint16_t *c16 = j->cache->data;
    const int64_t *bt = j->bt + (size_t)it->b * j->bt_cols;
#define LATENT(jj) (c16 + (size_t)((bt[(jj) / j->bs] * j->bs + (jj) % j->bs) * D))
    for (int64_t j0 = it->j0; j0 < end; j0 += TILE_K) {
        int64_t nk = end - j0 < TILE_K ? end - j0 : TILE_K;
        if (!rows_any(&w, j0))
            continue;
        for (int64_t c0 = 0; c0 < nk; c0 += 32) {
            const uint16_t *rows[32];
            int nc = nk - c0 < 32 ? (int)(nk - c0) : 32;
            for (int c = 0; c < nc; c++)
                rows[c] = LATENT(j0 + c0 + c);
            kv_bf16_pack_panel(kp + (c0 / 32) * psk, rows, nc, D);
        }
        kv_bf16_gemm(j->bf16, n, nk, kpd, qb, ldqb, kp, psk, w.s, TILE_K, j->scale, 0);
        rows_softmax(&w, j0, nk, 1);
        for (int64_t r = 0; r < n; r++) {
            kv_f32_to_bf16_n(w.s + r * TILE_K, pb + r * ldpb, (size_t)nk);
            pb[r * ldpb + nk] = 0;
        }
        for (int64_t t = 0; t < nk; t += 2)
            kv_bf16_pack_rows(vp, psv, t, LATENT(j0 + t), t + 1 < nk ? LATENT(j0 + t + 1) : NULL,
                              Dl);
        kv_bf16_gemm(j->bf16, n, Dl, (nk + 1) / 2, pb, ldpb, vp, psv, w.acc, Dl, 1.0f, 1);
    }
#undef LATENT
    item_store(j, it, &w);
    mla_slot_put(sl);
}

/* Absorbed on the bf16 decode tiles (mla_dec.h; an x86 route and Dl a
 * multiple of 32): the latent rows read where they lie, for Q K^T against
 * the item's Q^T packed once, and for P V (kv_bf16_dec_pv: two keys'
 * values interleaved in registers, four rows at a time).  The same sums
 * in the same order as absorbed_item_bf16, so the same bits, without
 * packing each tile's keys twice. */
static void absorbed_item_dec(struct job *j, const struct item *it)
{
    const int64_t n = mla_item_rows(it), D = j->dq, Dl = j->dl, ldpb = TILE_K + 2;
    const int64_t n8 = (n + 7) & ~(int64_t)7, ldr = (n + 15) & ~(int64_t)15;
    struct rows w;
    int64_t *lim;
    size_t nrow = (rows_bytes(n8, D, Dl, 0) + 63) & ~(size_t)63;
    size_t nqt = ((size_t)(((D + 1) / 2) * ldr) * sizeof(uint32_t) + 63) & ~(size_t)63;
    size_t nst = (size_t)(TILE_K * ldr) * sizeof(float);
    size_t npb = (size_t)(n8 * ldpb) * sizeof(uint16_t);
    struct slot *sl = mla_slot_get(j, nrow + nqt + nst + npb);
    if (!sl) {
        j->failed = 1;
        return;
    }
    char *mem = sl->p;
    rows_carve(&w, (float *)(void *)mem, n8, D, Dl, 0, &lim);
    w.n = n;
    uint32_t *qt = (uint32_t *)(void *)(mem + nrow);
    float *st = (float *)(void *)(mem + nrow + nqt);
    uint16_t *pb = (uint16_t *)(void *)(mem + nrow + nqt + nst);
    const uint32_t *pw = (const uint32_t *)(void *)pb;
    memset(pb, 0, npb);
    item_setup(j, it, (void *)w.q, D, lim);     /* the bf16 rows, D halves apart */
    kv_mla_dec_pack_q(n, D, (const uint16_t *)(const void *)w.q, D, ldr, qt);
    rows_init(&w);      /* and the rows past n that the P V tiles also write */
    memset(w.acc + n * Dl, 0, (size_t)((n8 - n) * Dl) * sizeof(float));
    int64_t end = it->j0;
    for (int64_t r = 0; r < n; r++)
        end = lim[r] > end ? lim[r] : end;
    const uint16_t *c16 = j->cache->data, *kr[TILE_K + DEC_AHEAD];
    const int64_t *bt = j->bt + (size_t)it->b * j->bt_cols;
    for (int64_t j0 = it->j0; j0 < end; j0 += TILE_K) {
        int64_t nk = end - j0 < TILE_K ? end - j0 : TILE_K;
        if (!rows_any(&w, j0))
            continue;
        /* the tile's rows and, to fetch them early, the next tile's */
        int64_t na = end - j0 < TILE_K + DEC_AHEAD ? end - j0 : TILE_K + DEC_AHEAD;
        for (int64_t t = 0; t < na; t++)
            kr[t] = c16 + (size_t)((bt[(j0 + t) / j->bs] * j->bs + (j0 + t) % j->bs) * D);
        kv_mla_dec_qk(j->bf16, n, D, qt, ldr, kr, nk, j->scale, st, w.s, TILE_K);
        rows_softmax(&w, j0, nk, 1);
        for (int64_t r = 0; r < n; r++) {
            kv_f32_to_bf16_n(w.s + r * TILE_K, pb + r * ldpb, (size_t)nk);
            pb[r * ldpb + nk] = 0;
        }
        kv_mla_dec_pv(j->bf16, n8, pw, ldpb / 2, kr, nk, Dl, na - nk, D, w.acc, Dl);
    }
    item_store(j, it, &w);
    mla_slot_put(sl);
}

/* Absorbed: latent rows of request b from the paged cache. */
static void absorbed_item(void *ctx, size_t idx)
{
    struct job *j = ctx;
    const struct item *it = &j->items[idx];
    if (j->bf16 != KV_BF16_NONE && kv_mla_dec_route(j->bf16) && j->dl % 32 == 0 &&
        mla_item_rows(it) <= DEC_ROWS) {
        absorbed_item_dec(j, it);
        return;
    }
    if (j->bf16 != KV_BF16_NONE) {
        absorbed_item_bf16(j, it);
        return;
    }
    int64_t n = mla_item_rows(it), D = j->dq;
    struct rows w;
    int64_t *lim;
    float *buf = rows_alloc(&w, n, D, j->dl, (size_t)(TILE_K * D), &lim);
    if (!buf) {
        j->failed = 1;
        return;
    }
    float *kt = w.s + n * TILE_K;
    item_setup(j, it, (float *)w.q, j->dq, lim);
    rows_init(&w);
    int64_t end = it->j0;
    for (int64_t r = 0; r < n; r++)
        end = lim[r] > end ? lim[r] : end;
    const struct kv_tensor *c = j->cache;
    size_t es = kv_dtype_size(c->dtype);
    const int64_t *bt = j->bt + (size_t)it->b * j->bt_cols;
    for (int64_t j0 = it->j0, nk; j0 < end; j0 += nk) {
        int64_t blk = j0 / j->bs, off = j0 % j->bs;
        nk = end - j0 < TILE_K ? end - j0 : TILE_K;
        /* an f32 cache of blocks of RUN_MIN keys or more: tiles end at
         * the cache's blocks, so that sgemm reads the rows in place */
        if (c->dtype == KV_F32 && j->bs >= RUN_MIN && nk > j->bs - off)
            nk = j->bs - off;
        const float *k;
        if (c->dtype == KV_F32 && off + nk <= j->bs) {
            k = (const float *)c->data + (bt[blk] * j->bs + off) * D;
        } else {
            for (int64_t t = 0; t < nk; t++) {
                int64_t jj = j0 + t;
                const char *row = (const char *)c->data +
                                  (size_t)((bt[jj / j->bs] * j->bs + jj % j->bs) * D) * es;
                to_f32(c->dtype, row, kt + t * D, (size_t)D);
            }
            k = kt;
        }
        rows_tile(&w, k, D, k, D, j0, nk);
    }
    item_store(j, it, &w);
    free(buf);
}

/* Naive: K_h = [c W_UK[h] | k_pe] and V_h = c W_UV[h] of request b,
 * expanded in tiles of TILE_K keys. */
static void naive_item(void *ctx, size_t idx)
{
    struct job *j = ctx;
    const struct item *it = &j->items[idx];
    int64_t n = mla_item_rows(it), D = j->P + j->R, Dl = j->dl;
    struct rows w;
    int64_t *lim;
    float *buf = rows_alloc(&w, n, D, j->Vd, (size_t)(TILE_K * (D + j->Vd)), &lim);
    if (!buf) {
        j->failed = 1;
        return;
    }
    float *kt = w.s + n * TILE_K, *vt = kt + TILE_K * D;
    item_setup(j, it, (float *)w.q, j->dq, lim);
    rows_init(&w);
    int64_t end = it->j0;
    for (int64_t r = 0; r < n; r++)
        end = lim[r] > end ? lim[r] : end;
    const float *wuk = j->wuk + it->h * Dl * j->P, *wuv = j->wuv + it->h * Dl * j->Vd;
    for (int64_t j0 = it->j0; j0 < end; j0 += TILE_K) {
        int64_t nk = end - j0 < TILE_K ? end - j0 : TILE_K;
        const float *c = j->ckv + (j->kv_start[it->b] + j0) * Dl;
        const float *pe = j->kpe + (j->kv_start[it->b] + j0) * j->R;
        kv_blas_sgemm(KV_BLAS_N, KV_BLAS_N, (int)nk, (int)j->P, (int)Dl,
                      1.0f, c, (int)Dl, wuk, (int)j->P, 0.0f, kt, (int)D);
        for (int64_t t = 0; t < nk; t++)
            memcpy(kt + t * D + j->P, pe + t * j->R, (size_t)j->R * sizeof(float));
        kv_blas_sgemm(KV_BLAS_N, KV_BLAS_N, (int)nk, (int)j->Vd, (int)Dl,
                      1.0f, c, (int)Dl, wuv, (int)j->Vd, 0.0f, vt, (int)j->Vd);
        rows_tile(&w, kt, D, vt, j->Vd, j0, nk);
    }
    item_store(j, it, &w);
    free(buf);
}

/* ---- absorbed ------------------------------------------------------ */

int kv_mla_absorbed(const struct kv_mla_req *r, struct kv_tensor *out,
                    struct kv_tensor *lse, struct kv_err *e)
{
    const struct kv_tensor *q = r->q, *c = r->cache;
    char s1[64], s2[64];
    if (!q || !c || !r->seq_lens || !r->block_table)
        return kv_err_set(e, "the absorbed form needs Q, the cache, a block table and seq_lens");
    if (q->ndim != 3)
        return kv_err_set(e, "Q: expected [T, H, Dl + R], got %s",
                          kv_shape_str(q->ndim, q->shape, s1, sizeof s1));
    if (c->ndim != 4 || c->shape[2] != 1)
        return kv_err_set(e, "latent cache: expected [num_blocks, block_size, 1, Dl + R], got %s",
                          kv_shape_str(c->ndim, c->shape, s1, sizeof s1));
    if (!kv_dtype_is_float(q->dtype) || !kv_dtype_is_float(c->dtype))
        return kv_err_set(e, "Q and the cache must be f32, f16, bf16 or f64");
    int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    int64_t NB = c->shape[0], bs = c->shape[1];
    if (c->shape[3] != D)
        return kv_err_set(e, "Q %s and the latent cache %s disagree on Dl + R",
                          kv_shape_str(q->ndim, q->shape, s1, sizeof s1),
                          kv_shape_str(c->ndim, c->shape, s2, sizeof s2));
    if (r->kv_lora_rank < 1 || r->kv_lora_rank >= D)
        return kv_err_set(e, "kv_lora_rank %lld: expected 1 .. %lld (the head dim %lld "
                          "holds Dl + R)", (long long)r->kv_lora_rank, (long long)D - 1,
                          (long long)D);
    if (H < 1 || bs < 1 || T < 0)
        return kv_err_set(e, "Q needs at least one head and the cache a block size");
    if (!(isfinite(r->scale)))
        return kv_err_set(e, "the scale %g is not finite", r->scale);
    if (r->v_exp < 0 || r->v_exp > 126)
        return kv_err_set(e, "v_exp %d: expected 0 .. 126", r->v_exp);
    if (!isfinite(ldexpf((float)r->scale, r->v_exp)))
        return kv_err_set(e, "the scale %g times 2^%d is not finite in f32", r->scale, r->v_exp);
    size_t nr = r->n_seq_lens;
    if (r->q_lens && r->n_q_lens != nr)
        return kv_err_set(e, "%zu q_lens for %zu seq_lens", r->n_q_lens, nr);
    if (r->bt_rows < nr)
        return kv_err_set(e, "the block table has %zu rows for %zu requests", r->bt_rows, nr);
    enum kv_dtype od = r->out_dtype == KV_NDTYPES ? q->dtype : r->out_dtype;
    if (!kv_dtype_is_float(od))
        return kv_err_set(e, "output dtype must be f32, f16, bf16 or f64");
    struct job j;
    memset(&j, 0, sizeof j);
    int64_t *lens = calloc(4 * (nr ? nr : 1), sizeof(int64_t));
    struct kv_tensor qf;
    kv_tensor_init(&qf);
    int rc = -1;
    if (!lens)
        return kv_err_set(e, "out of memory");
    j.q_start = lens; j.q_len = lens + nr; j.kv_start = lens + 2 * nr; j.kv_len = lens + 3 * nr;
    for (size_t b = 0; b < nr; b++) {
        j.q_len[b] = r->q_lens ? r->q_lens[b] : 1;
        j.kv_len[b] = r->seq_lens[b];
        if (j.kv_len[b] < 0 || (uint64_t)j.kv_len[b] > (uint64_t)r->bt_cols * (uint64_t)bs) {
            kv_err_set(e, "seq_lens[%zu] = %lld: the block table row holds %zu blocks of %lld",
                       b, (long long)j.kv_len[b], r->bt_cols, (long long)bs);
            goto out;
        }
        if (r->causal && j.q_len[b] > j.kv_len[b]) {
            kv_err_set(e, "request %zu: %lld queries but %lld keys (causal needs q_len <= "
                       "seq_len)", b, (long long)j.q_len[b], (long long)j.kv_len[b]);
            goto out;
        }
        for (int64_t k = 0; k < (j.kv_len[b] + bs - 1) / bs; k++) {
            int64_t id = r->block_table[b * r->bt_cols + (size_t)k];
            if (id < 0 || id >= NB) {
                kv_err_set(e, "block_table[%zu][%lld] = %lld: the cache has %lld blocks", b,
                           (long long)k, (long long)id, (long long)NB);
                goto out;
            }
        }
    }
    if (mla_lens_check(j.q_len, nr, T, "q_lens", j.q_start, e))
        goto out;
    j.bf16 = KV_BF16_NONE;
    if (r->bf16_route > 0 && q->dtype == KV_BF16 && c->dtype == KV_BF16)
        /* an instruction this CPU lacks (or KVTOOLS_ISA bars): sgemm */
        j.bf16 = kv_bf16_route_usable((enum kv_bf16_route)r->bf16_route);
    size_t left = r->max_bytes ? r->max_bytes : SIZE_MAX;
    if (j.bf16 != KV_BF16_NONE) {
        j.q16 = q->data;     /* read as it is: no f32 copy of Q */
    } else {
        if (mla_budget_take(&left, mla_f32_bytes(q), "an f32 copy of Q would", e) ||
            kv_tensor_convert(&qf, q, KV_F32, e))
            goto out;
        j.q = qf.data;
    }
    j.H = H; j.dq = D; j.dv = r->kv_lora_rank; j.dl = r->kv_lora_rank;
    /* a cache at 2^-v_exp of its values: the scores' scale times 2^v_exp
     * (exact), the output rows times 2^v_exp after the division */
    j.causal = r->causal; j.scale = ldexpf((float)r->scale, r->v_exp);
    j.out_mul = r->v_exp ? ldexpf(1.0f, r->v_exp) : 0.0f;
    j.cache = c; j.bs = bs; j.bt = r->block_table; j.bt_cols = r->bt_cols;
    j.chunk_k = r->chunk_k;
    j.head_group = r->head_group;
    rc = mla_job_run(&j, nr, 0, absorbed_item, r->n_threads, left, od, T, out, lse, e);
out:
    kv_tensor_release(&qf);
    free(lens);
    return rc;
}

/* ---- naive --------------------------------------------------------- */

int kv_mla_naive(const struct kv_mla_naive_req *r, struct kv_tensor *out,
                 struct kv_tensor *lse, struct kv_err *e)
{
    const struct kv_tensor *q = r->q, *ck = r->c_kv, *pe = r->k_pe, *wk = r->w_uk, *wv = r->w_uv;
    char s1[64], s2[64];
    if (!q || !ck || !pe || !wk || !wv)
        return kv_err_set(e, "the naive form needs Q, c_kv, k_pe, W_UK and W_UV");
    if (q->ndim != 3 || ck->ndim != 2 || pe->ndim != 2 || wk->ndim != 3 || wv->ndim != 3)
        return kv_err_set(e, "expected Q [T, H, P + R], c_kv [Tk, Dl], k_pe [Tk, R], "
                          "W_UK [H, Dl, P], W_UV [H, Dl, Vd]");
    const struct kv_tensor *all[5] = {q, ck, pe, wk, wv};
    for (int i = 0; i < 5; i++)
        if (!kv_dtype_is_float(all[i]->dtype))
            return kv_err_set(e, "the MLA inputs must be f32, f16, bf16 or f64");
    int64_t T = q->shape[0], H = q->shape[1], Tk = ck->shape[0], Dl = ck->shape[1];
    int64_t R = pe->shape[1], P = wk->shape[2], Vd = wv->shape[2];
    if (pe->shape[0] != Tk)
        return kv_err_set(e, "c_kv %s and k_pe %s disagree on the tokens",
                          kv_shape_str(2, ck->shape, s1, sizeof s1),
                          kv_shape_str(2, pe->shape, s2, sizeof s2));
    if (wk->shape[0] != H || wk->shape[1] != Dl || wv->shape[0] != H || wv->shape[1] != Dl)
        return kv_err_set(e, "W_UK %s and W_UV %s: expected [H = %lld, Dl = %lld, ...]",
                          kv_shape_str(3, wk->shape, s1, sizeof s1),
                          kv_shape_str(3, wv->shape, s2, sizeof s2), (long long)H,
                          (long long)Dl);
    if (q->shape[2] != P + R)
        return kv_err_set(e, "Q %s: expected a head dim of P + R = %lld + %lld",
                          kv_shape_str(3, q->shape, s1, sizeof s1), (long long)P, (long long)R);
    if (H < 1 || Dl < 1 || R < 0 || P < 0 || Vd < 1 || P + R < 1)
        return kv_err_set(e, "empty MLA dimensions");
    enum kv_dtype od = r->out_dtype == KV_NDTYPES ? q->dtype : r->out_dtype;
    if (!kv_dtype_is_float(od))
        return kv_err_set(e, "output dtype must be f32, f16, bf16 or f64");
    size_t nr = r->q_lens ? r->n_q_lens : 1;
    if (r->kv_lens && r->n_kv_lens != nr)
        return kv_err_set(e, "%zu kv_lens for %zu q_lens", r->n_kv_lens, nr);
    struct job j;
    memset(&j, 0, sizeof j);
    int64_t *lens = calloc(4 * (nr ? nr : 1), sizeof(int64_t));
    struct kv_tensor f[5];
    for (int i = 0; i < 5; i++)
        kv_tensor_init(&f[i]);
    int rc = -1;
    if (!lens)
        return kv_err_set(e, "out of memory");
    j.q_start = lens; j.q_len = lens + nr; j.kv_start = lens + 2 * nr; j.kv_len = lens + 3 * nr;
    for (size_t b = 0; b < nr; b++) {
        j.q_len[b] = r->q_lens ? r->q_lens[b] : T;
        j.kv_len[b] = r->kv_lens ? r->kv_lens[b] : r->q_lens ? j.q_len[b] : Tk;
    }
    if (mla_lens_check(j.q_len, nr, T, "q_lens", j.q_start, e) ||
        mla_lens_check(j.kv_len, nr, Tk, "kv_lens", j.kv_start, e))
        goto out;
    for (size_t b = 0; b < nr; b++) {
        if (r->causal && j.q_len[b] > j.kv_len[b]) {
            kv_err_set(e, "request %zu: %lld queries but %lld keys (causal needs q_len <= "
                       "kv_len)", b, (long long)j.q_len[b], (long long)j.kv_len[b]);
            goto out;
        }
    }
    size_t left = r->max_bytes ? r->max_bytes : SIZE_MAX;
    for (int i = 0; i < 5; i++)
        if (mla_budget_take(&left, mla_f32_bytes(all[i]), "the f32 copies of the five inputs", e) ||
            kv_tensor_convert(&f[i], all[i], KV_F32, e))
            goto out;
    j.H = H; j.dq = P + R; j.dv = Vd; j.dl = Dl; j.P = P; j.R = R; j.Vd = Vd;
    j.causal = r->causal;
    j.scale = (float)(r->has_scale ? r->scale : 1.0 / sqrt((double)(P + R)));
    j.q = f[0].data; j.ckv = f[1].data; j.kpe = f[2].data; j.wuk = f[3].data; j.wuv = f[4].data;
    rc = mla_job_run(&j, nr, 1, naive_item, r->n_threads, left, od, T, out, lse, e);
out:
    for (int i = 0; i < 5; i++)
        kv_tensor_release(&f[i]);
    free(lens);
    return rc;
}
