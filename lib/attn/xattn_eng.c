/* xattn_eng.c - the estimate engine of XAttention: the reshaped query and
 * key rows, the tiles of whole query blocks (sgemm or the bf16 tiles, the
 * causal triangle by halves, the softmax and block sums through the row
 * kernels of xattn_row.c, the selection of their block rows, the recall's
 * mass), and the set-up and threaded run of all tiles. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include "attn/xattn_int.h"
#include "core/half.h"
#include "core/cli.h"
#include "core/isa.h"

/* The interval [a, b) of reshaped key columns that reshaped query row i
 * may see (before the padded-row rule).  Clean causal: up to its own group
 * on the diagonal, capped at the real keys.  Compat causal reproduces the
 * original's per-chunk mask: columns before the chunk's diagonal square are
 * visible unless no key was padded (the "-0 slice" artifact), and the
 * triangle inside the square may include zero-padded keys. */
static void row_interval(const struct eng *g, int64_t i, int64_t *a,
                         int64_t *b)
{
    if (!g->causal) {
        *a = 0;
        *b = g->compat ? g->ncols : g->nk_r;
    } else if (!g->compat) {
        *a = 0;
        *b = min64(g->off_r + i + 1, g->nk_r);
    } else {
        int64_t c = i / g->cr, r = i % g->cr;
        int64_t cs = (c + g->nkc - g->nqc) * g->cr;
        *a = g->n_kpad > 0 ? 0 : cs;
        *b = cs + r + 1;
    }
}

/* Gather the reshaped query rows [i0, i1) of one head into qr, ld
 * elements of es bytes a row: f32 Q into rows of sd, or bf16 Q straight
 * into rows of sdp (a zero after an odd sd). */
static void build_qr(const struct eng *g, const void *qh, size_t es,
                     int64_t i0, int64_t i1, void *qr, int64_t ld)
{
    const size_t row = (size_t)g->d * es;
    for (int64_t i = i0; i < i1; i++) {
        char *dst = (char *)qr + (size_t)((i - i0) * ld) * es;
        for (int64_t s = 0; s < g->s; s++) {
            int64_t t = i * g->s + (g->inverse ? g->s - 1 - s : s);
            if (t < g->lq)
                memcpy(dst + (size_t)s * row, (const char *)qh + (size_t)t * row, row);
            else
                memset(dst + (size_t)s * row, 0, row);
        }
        if (ld > g->sd)
            memset(dst + (size_t)g->sd * es, 0, (size_t)(ld - g->sd) * es);
    }
}

/* The reshaped query rows [i0, i1) of one head (Q at offset qoff) as
 * bf16 rows of sdp for the bf16 tiles: bf16 Q gathered as it is, f32 Q
 * gathered and then rounded in place (a row of sdp <= 2 sd halves fits
 * in the sd floats it came from; front to back is safe). */
static void bf16_rows(const struct eng *g, size_t qoff, int64_t i0, int64_t i1, float *qr)
{
    uint16_t *qw = (uint16_t *)qr;

    if (g->q16) {
        build_qr(g, g->q16 + qoff, sizeof(uint16_t), i0, i1, qr, g->sdp);
        /* the tiles read Q as it is: its values are checked here */
        if (kv_bf16_nonfinite_n(qw, (size_t)((i1 - i0) * g->sdp)))
            atomic_store(&g->badinput, 1);
        return;
    }
    build_qr(g, g->q + qoff, sizeof(float), i0, i1, qr, g->sd);
    for (int64_t i = 0; i < i1 - i0; i++) {
        kv_f32_to_bf16_n(qr + i * g->sd, qw + i * g->sdp, (size_t)g->sd);
        if (g->sdp > g->sd)
            qw[i * g->sdp + g->sd] = 0;
    }
}

/* Which selection rule a q block row gets (spec 8.1/8.2/8.4, section 15). */
static enum kv_xattn_sel row_kind(const struct eng *g, int64_t qb)
{
    int64_t ci;

    if (!g->causal)
        return KV_XATTN_SEL_FREE;
    if (g->rule == KV_XATTN_RULE_INTENDED)
        return KV_XATTN_SEL_FORCED;
    ci = g->diag0;
    if (g->compat)
        ci += (qb / g->nbpc) * g->nbpc;
    return ci == 0 ? KV_XATTN_SEL_LAGGED : KV_XATTN_SEL_FORCED;
}

/* Select and post-process the block rows of one tile (spec 8, 9). */
static void select_tile(struct eng *g, int64_t bh, int64_t qb0, int64_t qb1,
                        int64_t *scratch, uint8_t *keeprow)
{
    int64_t h = bh % g->hq;

    for (int64_t qb = qb0; qb < qb1; qb++) {
        const float *srow = g->sums + (bh * g->nqb + qb) * g->nkb_sel;
        int64_t diag = g->diag0 + qb;

        kv_xattn_select_row(srow, g->nkb_sel, row_kind(g, qb), diag,
                            g->thr[h], scratch, keeprow);
        if (g->causal)
            for (int64_t kb = max64(diag + 1, 0); kb < g->nkb_sel; kb++)
                keeprow[kb] = 0;
        if (g->keep_sink && qb == 0)
            memset(keeprow, 1, (size_t)g->nkb_sel);
        if (g->keep_recent && diag >= 0 && diag < g->nkb_sel)
            keeprow[diag] = 1;
        memcpy(g->mask + (bh * g->nqb + qb) * g->nkb, keeprow,
               (size_t)g->nkb);
    }
}

/* CPU time of the calling thread: the per-phase times are what the work
 * cost, not how long a shared machine kept the thread waiting. */
static double thread_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return kv_now();
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rows of a tile, of the smallest diagonal piece of the sgemm path, and
 * of a strip of the bf16 path (reshaped rows). */
#define TILE_ROWS 256
#define SUB_ROWS 64
#define STRIP_ROWS 8
/* Rows of the bf16 tiles whose scores go through the softmax together,
 * while they are in cache */
#define SOFT_ROWS 32

/* c[m x n] (leading dimension ldc) = a[m x k] . b[n x k]^T, row-major. */
static void gemm(const float *a, int64_t m, const float *b, int64_t n,
                 int64_t k, float *c, int64_t ldc)
{
    kv_blas_sgemm(KV_BLAS_N, KV_BLAS_T, (int)m, (int)n,
                  (int)k, 1.0f, a, (int)k, b, (int)k, 0.0f, c, (int)ldc);
}

static int64_t bcap(const struct eng *g, int64_t i)
{
    int64_t a, b;
    row_interval(g, i, &a, &b);
    return min64(b, g->nk_r);
}

/* The sgemm path's causal triangle of a tile: rows [r0, r1) each need
 * the columns [c, bcap(i)) where bcap(i) = min(b(i), nk_r) grows with i.
 * Halve: the top half recursively, the bottom half's rectangle
 * [c, bcap(mid - 1)) in one product, its own triangle recursively; pieces
 * of at most SUB_ROWS rows are computed whole.  So only thin slivers above
 * the diagonal are computed, in products large enough to run near the
 * sgemm rate. */
struct tri {
    const struct eng *g;
    const float *qr, *kr;
    float *sc;
    int64_t w, i0, amin;
    double flops;
};

static void tri_gemm(struct tri *t, int64_t r0, int64_t r1, int64_t c)
{
    const struct eng *g = t->g;
    const int64_t sd = g->sd;
    int64_t mid, cm;

    if (r1 <= r0)
        return;
    if (r1 - r0 <= SUB_ROWS) {
        int64_t b = bcap(g, r1 - 1);
        if (b > c) {
            gemm(t->qr + (r0 - t->i0) * sd, r1 - r0, t->kr + c * sd, b - c, sd,
                 t->sc + (r0 - t->i0) * t->w + (c - t->amin), t->w);
            t->flops += (double)(r1 - r0) * (double)(b - c);
        }
        return;
    }
    mid = r0 + (r1 - r0) / 2;
    tri_gemm(t, r0, mid, c);
    cm = max64(bcap(g, mid - 1), c);
    if (cm > c) {
        gemm(t->qr + (mid - t->i0) * sd, r1 - mid, t->kr + c * sd, cm - c, sd,
             t->sc + (mid - t->i0) * t->w + (c - t->amin), t->w);
        t->flops += (double)(r1 - mid) * (double)(cm - c);
    }
    tri_gemm(t, mid, r1, cm);
}

/* The scores of a tile on the sgemm path: the columns every row sees,
 * [amin, c0), in one product, then the causal triangle by halves.  Rows
 * [i0, i1) of qr (f32, sd a row) into sc (w a row, column amin first);
 * returns the products' multiply-adds per element of a row. */
static double scores_f32(const struct eng *g, const float *qr, const float *kr,
                         int64_t i0, int64_t i1, int64_t amin, int64_t bfirst,
                         float *sc, int64_t w)
{
    int64_t c0 = min64(bfirst, g->nk_r);
    struct tri tr = {g, qr, kr, sc, w, i0, amin, 0.0};

    if (c0 > amin) {
        gemm(qr, i1 - i0, kr + amin * g->sd, c0 - amin, g->sd, sc, w);
        tr.flops += (double)(i1 - i0) * (double)(c0 - amin);
    }
    tri_gemm(&tr, i0, i1, max64(c0, amin));
    return tr.flops;
}

/* The same on the bf16 tiles: strip by strip of STRIP_ROWS rows, each
 * against the columns [org, bcap(its last row)).  The tile kernel runs a
 * strip's rows against one 32-column panel after the other, so a strip
 * per call costs nothing in reuse, and only a strip's own small triangle
 * (and the rest of its last half panel) is computed above the diagonal.
 * org is a panel's first column: qb holds the rows as bf16 (sdp a row),
 * kp the packed keys of the row's kv head, sc the scores (w a row, column
 * org first).  Each score is one lane of the kernel, its pairs taken in
 * order, whatever the strip: the same bits for any tiling and any -j. */
static double scores_bf16(const struct eng *g, const uint16_t *qb, const uint32_t *kp,
                          int64_t i0, int64_t i1, int64_t org, float *sc, int64_t w)
{
    const uint32_t *bp = kp + (org / 32) * g->kps;
    double flops = 0.0;

    for (int64_t r = i0; r < i1; r += STRIP_ROWS) {
        int64_t r1 = min64(r + STRIP_ROWS, i1), b = bcap(g, r1 - 1);
        if (b <= org)
            continue;
        kv_bf16_gemm(g->bf16, r1 - r, b - org, g->kpairs, qb + (r - i0) * g->sdp, g->sdp,
                     bp, g->kps, sc + (r - i0) * w, w, 1.0f, 0);
        flops += (double)(r1 - r) * (double)(b - org);
    }
    return flops;
}

/* The same on the f32 register tiles (xattn_kern.h): kmr rows at a time,
 * each group against the columns [amin, bcap(its last row)) of kp, the
 * packed keys of the rows' kv head.  A score's sum runs over its features
 * in order, whatever the group or the panel. */
static double scores_kern(const struct eng *g, const float *qr, const float *kp,
                          int64_t i0, int64_t i1, int64_t amin, float *sc, int64_t w)
{
    double flops = 0.0;

    for (int64_t r = i0; r < i1; r += g->kmr) {
        int64_t r1 = min64(r + g->kmr, i1), b = bcap(g, r1 - 1);
        if (b <= amin)
            continue;
        g->kern(qr + (r - i0) * g->sd, g->sd, (int)(r1 - r), g->sd, kp, amin, b,
                sc + (r - i0) * w, w);
        flops += (double)(r1 - r) * (double)(b - amin);
    }
    return flops;
}

/* A large buffer on 2 MiB boundaries with huge pages asked for (a hint;
 * without THP it does nothing): the packed keys and a worker's scores
 * then fault in a few times instead of once every 4 KiB.  free() frees
 * it. */
static void *alloc_big(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (n < huge)
        return malloc(n);
    if (posix_memalign(&p, huge, n) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n & ~(huge - 1), MADV_HUGEPAGE);
#endif
    return p;
}

/* A worker's buffers: the first free one (at most nbufs tiles run at
 * once), allocated on its first use at the largest tile's size.  NULL
 * when out of memory. */
static struct tbuf *tbuf_get(struct eng *g)
{
    struct tbuf *t = NULL;
    for (int i = 0; !t; i = (i + 1) % g->nbufs)
        if (!atomic_exchange(&g->bufs[i].busy, 1))
            t = &g->bufs[i];
    if (!t->qr) {
        size_t rows = (size_t)(g->tqb * g->r), nsel = (size_t)g->nkb_sel;
        /* the bf16 tiles keep the rows and scores of SOFT_ROWS query
         * rows at a time */
        size_t srows = g->bf16 != KV_BF16_NONE ? SOFT_ROWS : rows;
        t->qr = malloc(srows * (size_t)g->sd * sizeof(float));
        t->sc = alloc_big(srows * (size_t)(g->ncols + 32) * sizeof(float));
        t->acc = malloc(((size_t)g->tqb + 1) * nsel * sizeof(double));
        t->scratch = malloc(nsel * 2 * sizeof(int64_t));
        t->keeprow = malloc(nsel);
        if (!t->qr || !t->sc || !t->acc || !t->scratch || !t->keeprow) {
            free(t->qr);
            free(t->sc);
            free(t->acc);
            free(t->scratch);
            free(t->keeprow);
            memset((char *)t + sizeof(t->busy), 0, sizeof(*t) - sizeof(t->busy));
            atomic_store(&t->busy, 0);
            return NULL;
        }
    }
    return t;
}

/* The softmax of the reshaped query rows [r0, r1) of a tile (q blocks
 * from qb0; their scores at sc, w a row, column org first) and its block
 * sums, added to the tile's accumulators acc (rowblk: one row's sums);
 * the recall's mass of each row. */
static void soft_rows(struct eng *g, int64_t bh, int64_t qb0, int64_t r0,
                      int64_t r1, float *sc, int64_t w, int64_t org, double *acc,
                      double *rowblk)
{
    for (int64_t i = r0; i < r1; i++) {
        int64_t qb = i / g->r, a, bb, kb0, kb1;
        float *seg;       /* the row's visible columns [a, bb) */
        double tot = 0.0, inv;

        row_interval(g, i, &a, &bb);
        if (bb <= a)
            continue;
        seg = sc + (i - r0) * w + (a - org);
        kb0 = a / g->r;
        kb1 = cdiv(bb, g->r);
        if (!xattn_exp_sums(&g->sc, seg, a, bb, g->r, rowblk)) {
            atomic_store(&g->nonfinite, 1);
            return;
        }
        for (int64_t kb = kb0; kb < kb1; kb++)
            tot += rowblk[kb];
        inv = 1.0 / tot;
        for (int64_t kb = kb0; kb < kb1; kb++)
            acc[(qb - qb0) * g->nkb_sel + kb] += rowblk[kb] * inv;
        if (g->keep) {
            const uint8_t *kp = g->keep + (bh * g->nqb + qb) * g->nkb;
            double mass = 0.0;
            for (int64_t kb = kb0; kb < kb1 && kb < g->nkb; kb++)
                if (kp[kb])
                    mass += rowblk[kb] * inv;
            g->row_recall[bh * g->lq + i] = mass;
        }
    }
}

/* Zero the scores of zero-padded keys (columns >= nk_r, not computed) of
 * rows [r0, r1) (sc as for soft_rows; the visible columns end by bmax). */
static void zero_pad_cols(const struct eng *g, int64_t r0, int64_t r1, int64_t amin,
                          int64_t bmax, int64_t org, float *sc, int64_t w)
{
    int64_t z0 = max64(g->nk_r, amin);
    if (g->nk_r >= bmax)
        return;
    for (int64_t i = 0; i < r1 - r0; i++)
        memset(sc + i * w + (z0 - org), 0, (size_t)(bmax - z0) * sizeof(float));
}

/* One tile: q blocks [qb0, qb1) of one (batch, query head).  Tasks are
 * numbered so that the widest (last) tiles of every head come first.  On
 * the bf16 tiles SOFT_ROWS rows at a time go through the scores and then
 * the softmax, while their scores are in cache. */
static void run_tile(void *ctx, size_t idx)
{
    struct eng *g = ctx;
    int64_t nbh = g->nb * g->hq;
    int64_t t = g->ntiles - 1 - (int64_t)idx / nbh;
    int64_t bh = (int64_t)idx % nbh;
    int64_t b = bh / g->hq, h = bh % g->hq;
    int64_t hk = h / (g->hq / g->hkv);
    int64_t qb0 = t * g->tqb, qb1 = min64(qb0 + g->tqb, g->nqb);
    int64_t i0 = qb0 * g->r, i1 = min64(qb1 * g->r, g->nq_r);
    int64_t amin, bmax, bfirst, a, w, org;
    const size_t qoff = (size_t)((b * g->hq + h) * g->lq * g->d);
    const float *qh = g->q ? g->q + qoff : NULL;
    struct tbuf *tb;
    float *qr, *sc;
    double *acc, *rowblk;
    double t0, t1, tg = 0.0, ts = 0.0, flops = 0.0;
    size_t nacc = (size_t)((qb1 - qb0) * g->nkb_sel);

    row_interval(g, i0, &amin, &bfirst);
    row_interval(g, i1 - 1, &a, &bmax);
    /* the scores' first column: amin, or on the bf16 tiles the start of
     * its panel (the columns before amin are computed and not read) */
    org = g->bf16 != KV_BF16_NONE ? amin - amin % 32 : amin;
    w = bmax - org;
    tb = tbuf_get(g);
    if (!tb) {
        atomic_store(&g->failed, 1);
        return;
    }
    qr = tb->qr;
    sc = tb->sc;
    acc = tb->acc;
    memset(acc, 0, (nacc + (size_t)g->nkb_sel) * sizeof(double));
    rowblk = acc + nacc;

    /* The scores of the columns [amin, bmax) each row may see; columns
     * of zero-padded keys (>= nk_r) score 0 and are not computed. */
    {
        /* the bf16 tiles take SOFT_ROWS rows at a time, sgemm the tile */
        const int tiles16 = g->bf16 != KV_BF16_NONE;
        const int64_t step = tiles16 ? SOFT_ROWS : i1 - i0;
        const uint32_t *kp = tiles16 ? g->kpack + (b * g->hkv + hk) * g->kpanels * g->kps
                                     : NULL;
        t1 = thread_cpu();
        for (int64_t p = i0; p < i1; p += step) {
            int64_t p1 = min64(p + step, i1);
            if (tiles16) {
                bf16_rows(g, qoff, p, p1, qr);
                flops += scores_bf16(g, (const uint16_t *)qr, kp, p, p1, org, sc, w);
            } else if (g->kern) {
                build_qr(g, qh, sizeof(float), p, p1, qr, g->sd);
                flops += scores_kern(g, qr, g->kpf + (b * g->hkv + hk) * g->kpanels *
                                     g->knr * g->sd, p, p1, amin, sc, w);
            } else {
                build_qr(g, qh, sizeof(float), p, p1, qr, g->sd);
                flops += scores_f32(g, qr, g->kr[b * g->hkv + hk], p, p1, amin, bfirst,
                                    sc, w);
            }
            zero_pad_cols(g, p, p1, amin, bmax, org, sc, w);
            t0 = thread_cpu();
            tg += t0 - t1;
            soft_rows(g, bh, qb0, p, p1, sc, w, org, acc, rowblk);
            t1 = thread_cpu();
            ts += t1 - t0;
        }
    }
    t0 = thread_cpu();
    for (int64_t qb = qb0; qb < qb1; qb++) {
        float *srow = g->sums + (bh * g->nqb + qb) * g->nkb_sel;
        const double *arow = acc + (qb - qb0) * g->nkb_sel;
        for (int64_t kb = 0; kb < g->nkb_sel; kb++)
            srow[kb] = (float)arow[kb];
    }
    if (g->mask)
        select_tile(g, bh, qb0, qb1, tb->scratch, tb->keeprow);
    t1 = thread_cpu();
    g->t_gemm[idx] = tg;
    g->t_soft[idx] = ts;
    g->t_sel[idx] = t1 - t0;
    g->flops[idx] = 2.0 * flops * (double)g->sd;
    if (g->progress) {
        pthread_mutex_lock(&g->lock);
        g->progress(g->progress_ctx, ++g->n_done, g->n_total);
        pthread_mutex_unlock(&g->lock);
    }
    atomic_store(&tb->busy, 0);
}

/* The f32 scores' route: the register tiles of the best vector level
 * KVTOOLS_ISA allows (AVX-512F, AVX2+FMA, Advanced SIMD), sgemm at the
 * generic level. */
static void pick_kern(struct eng *g)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (kv_isa_has(KV_ISA_AVX512)) {
        g->kern = xattn_kern_tile_512;
        g->kmr = XK512_MR;
        g->knr = XK512_NR;
    } else if (kv_isa_has(KV_ISA_AVX2)) {
        g->kern = xattn_kern_tile_256;
        g->kmr = XK256_MR;
        g->knr = XK256_NR;
    }
#elif defined(__aarch64__)
    if (kv_isa_has(KV_ISA_NEON)) {
        g->kern = xattn_kern_tile_neon;
        g->kmr = XKNEON_MR;
        g->knr = XKNEON_NR;
    }
#endif
}

/* Shared set-up of the engine for estimate (stride o->stride) and recall
 * (stride 1).  Fills g from the shapes; allocates the reshaped K views. */
int xattn_eng_setup(struct eng *g, const struct kv_tensor *q,
              const struct kv_tensor *k, const struct kv_xattn_opts *o,
              int64_t stride, int64_t off, int compat, size_t *need,
              struct kv_err *e)
{
    int64_t lk_p, lq_p;
    size_t tile, nt;

    memset(g, 0, sizeof(*g));
    if (q->dtype == KV_BF16) {
        g->q16 = q->data;
        g->k16 = k->data;
    } else {
        g->q = q->data;
        g->k = k->data;
    }
    g->nb = q->shape[0];
    g->hq = q->shape[1];
    g->hkv = k->shape[1];
    g->lq = q->shape[2];
    g->lk = k->shape[2];
    g->d = q->shape[3];
    g->s = stride;
    g->bs = o->block_size;
    g->r = g->bs / g->s;
    g->sd = g->s * g->d;
    g->nq_r = cdiv(g->lq, g->s);
    g->nk_r = cdiv(g->lk, g->s);
    g->nqb = cdiv(g->lq, g->bs);
    g->nkb = cdiv(g->lk, g->bs);
    g->causal = o->causal;
    g->bf16 = kv_bf16_route_usable((enum kv_bf16_route)o->bf16_route);
    g->nthreads = o->nthreads;
    if (g->bf16 == KV_BF16_NONE)
        pick_kern(g);
    g->inverse = o->select_mode == KV_XATTN_INVERSE;
    g->compat = compat;
    if (compat) {
        int64_t c = o->compat_chunk;
        lq_p = cdiv(g->lq, c) * c;
        lk_p = cdiv(g->lk, c) * c;
        g->cr = c / g->s;
        g->nqc = lq_p / c;
        g->nkc = lk_p / c;
        g->nbpc = c / g->bs;
        g->n_kpad = (lk_p - g->lk) / g->s;
        g->nkb_sel = lk_p / g->bs;
        g->ncols = lk_p / g->s;
        g->diag0 = lk_p / g->bs - lq_p / g->bs;
        g->off_r = (g->nkc - g->nqc) * g->cr;
    } else {
        g->nkb_sel = g->nkb;
        g->ncols = g->nk_r;
        g->off_r = off / g->s;
        g->diag0 = off / g->bs;
    }
    if (o->scale > 0.0) {
        g->sc.use_scale = 1;
        g->sc.scale = (float)o->scale;
    } else {
        int e1, e2;
        g->sc.div_d = (float)sqrt((double)g->d);
        g->sc.div_s = (float)g->s;
        g->sc.div_n = (float)o->norm;
        /* S and norm powers of two: dividing by them is exact scaling */
        g->sc.sn_pow2 = frexp((double)g->s, &e1) == 0.5 &&
                        frexp(o->norm, &e2) == 0.5 && e1 + e2 < 100;
        g->sc.mul_sn = (float)(1.0 / ((double)g->s * o->norm));
    }
    g->tqb = g->r >= TILE_ROWS ? 1 : TILE_ROWS / g->r;
    g->progress = o->progress;
    g->progress_ctx = o->progress_ctx;
    g->ntiles = cdiv(g->nqb, g->tqb);
    atomic_init(&g->failed, 0);
    atomic_init(&g->nonfinite, 0);
    atomic_init(&g->badinput, 0);

    /* memory: per-thread tile buffers, K copies, sums; every product
     * overflow-checked (a huge compat chunk makes huge padded rows) */
    nt = (size_t)(o->nthreads > 0 ? o->nthreads : kv_nproc());
    if (g->ncols > INT32_MAX || g->nkb_sel > INT32_MAX)
        return kv_err_set(e, "%lld reshaped key columns are too many",
                          (long long)g->ncols);
    {
        /* a worker's rows: a tile's, or on the bf16 tiles SOFT_ROWS */
        size_t rows = g->bf16 != KV_BF16_NONE ? SOFT_ROWS : (size_t)(g->tqb * g->r);
        size_t a, b, c;
        int bad = kv_size_mul(rows, (size_t)(g->sd + g->ncols + 32), &a) ||
                  kv_size_mul(a, 4, &a) ||
                  kv_size_mul((size_t)(g->tqb + 1), (size_t)g->nkb_sel, &b) ||
                  kv_size_mul(b, 8 + 24, &b) || kv_size_add(a, b, &tile) ||
                  kv_size_mul(tile, nt, &tile) ||
                  kv_size_mul((size_t)(g->nb * g->hq), (size_t)g->nqb, &c) ||
                  kv_size_mul(c, (size_t)g->nkb_sel, &c) ||
                  kv_size_mul(c, 4, &c) || kv_size_add(tile, c, need);
        if (!bad && g->bf16 != KV_BF16_NONE) {     /* the packed keys */
            size_t kp;
            bad = kv_size_mul((size_t)(g->nb * g->hkv), (size_t)cdiv(g->nk_r, 32), &kp) ||
                  kv_size_mul(kp, (size_t)(32 * ((g->sd + 1) / 2)) * 4, &kp) ||
                  kv_size_add(*need, kp, need);
        }
        if (!bad && g->kern) {                     /* the packed f32 keys */
            size_t kp;
            bad = kv_size_mul((size_t)(g->nb * g->hkv), (size_t)cdiv(g->nk_r, g->knr), &kp) ||
                  kv_size_mul(kp, (size_t)(g->knr * g->sd) * 4, &kp) ||
                  kv_size_add(*need, kp, need);
        }
        if (!bad && g->lk % g->s != 0 && !(g->bf16 != KV_BF16_NONE && g->k16)) {
            size_t kc;
            bad = kv_size_mul((size_t)(g->nb * g->hkv), (size_t)g->nk_r, &kc) ||
                  kv_size_mul(kc, (size_t)g->sd * 4, &kc) ||
                  kv_size_add(*need, kc, need);
        }
        if (bad)
            return kv_err_set(e, "the work memory size overflows (%lld "
                              "query blocks x %lld key blocks)",
                              (long long)g->nqb, (long long)g->nkb_sel);
    }
    if (o->max_bytes && *need > o->max_bytes)
        return kv_err_set(e, "the work needs %zu bytes of memory, more "
                          "than --max-mem %zu", *need, o->max_bytes);
    return 0;
}

/* Pack one panel (32 reshaped K rows) of one (b, kv head) for the bf16
 * tiles: item i is panel i % kpanels of head i / kpanels.  A whole
 * reshaped row of bf16 K is S consecutive keys, read where it is; a last
 * partial one (and f32 K) goes through a copy, zero-padded. */
static void pack_panel(void *ctx, size_t idx)
{
    struct eng *g = ctx;
    int64_t i = (int64_t)idx / g->kpanels, q = (int64_t)idx % g->kpanels;
    int64_t j0 = q * 32, n = min64(32, g->nk_r - j0);
    const uint16_t *rows[32];
    uint16_t *buf = NULL;
    int nbuf = 0;

    for (int64_t c = 0; c < n; c++) {
        int64_t j = j0 + c;
        size_t at = (size_t)((i * g->lk + j * g->s) * g->d);
        if (g->k16 && (j + 1) * g->s <= g->lk) {
            rows[c] = g->k16 + at;
            continue;
        }
        if (!buf) {
            buf = malloc((size_t)(n - c) * (size_t)g->sd * sizeof(uint16_t));
            if (!buf) {
                atomic_store(&g->failed, 1);
                return;
            }
        }
        int64_t have = min64(g->sd, (g->lk - j * g->s) * g->d);
        uint16_t *dst = buf + (size_t)nbuf++ * (size_t)g->sd;
        if (g->k16)
            memcpy(dst, g->k16 + at, (size_t)have * sizeof(uint16_t));
        else
            kv_f32_to_bf16_n(g->k + at, dst, (size_t)have);
        memset(dst + have, 0, (size_t)(g->sd - have) * sizeof(uint16_t));
        rows[c] = dst;
    }
    uint32_t *panel = g->kpack + (i * g->kpanels + q) * g->kps;
    kv_bf16_pack_panel(panel, rows, (int)n, g->sd);
    /* and K's values here, as they are packed */
    if (g->k16 && kv_bf16_nonfinite_n((const uint16_t *)panel, 2 * (size_t)g->kps))
        atomic_store(&g->badinput, 1);
    free(buf);
}

/* Pack one panel (knr reshaped K rows, zeros after the last) of one
 * (b, kv head) for the f32 register tiles, feature-major: item i is panel
 * i % kpanels of head i / kpanels. */
static void pack_f32_panel(void *ctx, size_t idx)
{
    struct eng *g = ctx;
    int64_t i = (int64_t)idx / g->kpanels, q = (int64_t)idx % g->kpanels;
    int64_t j0 = q * g->knr, n = min64(g->knr, g->nk_r - j0);
    float *dst = g->kpf + (i * g->kpanels + q) * g->knr * g->sd;
    const float *src = g->kr[i] + j0 * g->sd;

    /* 16 features (a cache line of each key row) at a time: the rows lie
     * sd floats apart, often a multiple of 4 KiB, and reading one feature
     * of every row in turn would evict its own lines */
    for (int64_t f0 = 0; f0 < g->sd; f0 += 16) {
        int64_t nf = min64(16, g->sd - f0);
        float *d = dst + f0 * g->knr;
        for (int64_t j = 0; j < n; j++)
            for (int64_t f = 0; f < nf; f++)
                d[f * g->knr + j] = src[j * g->sd + f0 + f];
        for (int64_t f = 0; f < nf; f++)
            memset(d + f * g->knr + n, 0, (size_t)(g->knr - n) * sizeof(float));
    }
}

static int pack_f32_keys(struct eng *g, struct kv_err *e)
{
    int64_t nbk = g->nb * g->hkv;

    g->kpanels = cdiv(g->nk_r, g->knr);
    g->kpf = alloc_big((size_t)(nbk * g->kpanels * g->knr) * (size_t)g->sd * sizeof(float));
    if (!g->kpf)
        return kv_err_set(e, "out of memory for the packed keys");
    kv_parallel_for((size_t)(nbk * g->kpanels), g->nthreads, pack_f32_panel, g);
    return 0;
}

/* Point g->kr at reshaped K rows: K itself when Lk % S == 0, else a padded
 * copy (returned in *copy, freed by the caller). */
int xattn_eng_kviews(struct eng *g, float **copy, struct kv_err *e)
{
    int64_t nbk = g->nb * g->hkv;

    *copy = NULL;
    g->kr = calloc((size_t)nbk, sizeof(*g->kr));
    if (!g->kr)
        return kv_err_set(e, "out of memory");
    if (g->bf16 != KV_BF16_NONE) {
        /* every reshaped K row as a packed column, as bf16; the rows of a
         * last partial group padded with zeros */
        g->kpairs = (g->sd + 1) / 2;
        g->sdp = 2 * g->kpairs;
        g->kps = 32 * g->kpairs;
        g->kpanels = cdiv(g->nk_r, 32);
        g->kpack = alloc_big((size_t)(nbk * g->kpanels) * (size_t)g->kps * sizeof(uint32_t));
        if (!g->kpack)
            return kv_err_set(e, "out of memory for the bf16 keys");
        kv_parallel_for((size_t)(nbk * g->kpanels), g->nthreads, pack_panel, g);
        if (atomic_load(&g->failed))
            return kv_err_set(e, "out of memory for the bf16 keys");
        if (atomic_load(&g->badinput))
            return kv_err_set(e, "K holds an inf or a nan");
        if (g->k16)             /* the tiles read only the packed keys */
            return 0;
    }
    if (g->lk % g->s == 0) {
        for (int64_t i = 0; i < nbk; i++)
            g->kr[i] = g->k + i * g->lk * g->d;
        return g->kern ? pack_f32_keys(g, e) : 0;
    }
    *copy = calloc((size_t)(nbk * g->nk_r) * (size_t)g->sd, sizeof(float));
    if (!*copy)
        return kv_err_set(e, "out of memory for the padded keys");
    for (int64_t i = 0; i < nbk; i++) {
        memcpy(*copy + i * g->nk_r * g->sd, g->k + i * g->lk * g->d,
               (size_t)(g->lk * g->d) * sizeof(float));
        g->kr[i] = *copy + i * g->nk_r * g->sd;
    }
    return g->kern ? pack_f32_keys(g, e) : 0;
}

int xattn_eng_run(struct eng *g, int nthreads, struct kv_xattn_times *tm,
            struct kv_err *e)
{
    size_t ntask = (size_t)(g->nb * g->hq * g->ntiles);
    double *tbuf = calloc(ntask * 4, sizeof(double));
    int nt = nthreads > 0 ? nthreads : kv_nproc();

    /* one set of tile buffers per worker (kv_parallel_for runs at most
     * min(threads, 256, tasks) of them) */
    nt = nt > 256 ? 256 : nt;
    g->nbufs = (size_t)nt < ntask ? nt : (int)ntask;
    g->nbufs = g->nbufs > 0 ? g->nbufs : 1;
    g->bufs = calloc((size_t)g->nbufs, sizeof(*g->bufs));
    if (!tbuf || !g->bufs) {
        free(tbuf);
        free(g->bufs);
        g->bufs = NULL;
        return kv_err_set(e, "out of memory");
    }
    for (int i = 0; i < g->nbufs; i++)
        atomic_init(&g->bufs[i].busy, 0);
    g->t_gemm = tbuf;
    g->t_soft = tbuf + ntask;
    g->t_sel = tbuf + 2 * ntask;
    g->flops = tbuf + 3 * ntask;
    kv_blas_set_threads(1);
    g->n_total = ntask;
    g->n_done = 0;
    if (g->progress)
        pthread_mutex_init(&g->lock, NULL);
    kv_parallel_for(ntask, nthreads, run_tile, g);
    if (g->progress)
        pthread_mutex_destroy(&g->lock);
    if (tm)
        for (size_t i = 0; i < ntask; i++) {
            tm->gemm += g->t_gemm[i];
            tm->softmax += g->t_soft[i];
            tm->select += g->t_sel[i];
            tm->gemm_flops += g->flops[i];
        }
    free(tbuf);
    for (int i = 0; i < g->nbufs; i++) {
        free(g->bufs[i].qr);
        free(g->bufs[i].sc);
        free(g->bufs[i].acc);
        free(g->bufs[i].scratch);
        free(g->bufs[i].keeprow);
    }
    free(g->bufs);
    g->bufs = NULL;
    if (atomic_load(&g->failed))
        return kv_err_set(e, "out of memory in a worker");
    if (atomic_load(&g->badinput))
        return kv_err_set(e, "Q holds an inf or a nan");
    if (atomic_load(&g->nonfinite))
        return kv_err_set(e, "a score of Q and K is not finite in f32 (inf or "
                          "nan): the inputs are too large");
    return 0;
}
