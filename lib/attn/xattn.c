/* xattn.c - XAttention block selection and the exact block recall.
 *
 * The estimate, for one (batch, query head), in the reshaped space where
 * reshaped query row i holds the S query tokens of group i in reverse order
 * and reshaped key row j the S key tokens of group j in forward order
 * (xattn.md section 4), so that Qr[i] . Kr[j] is the sum of the logits on
 * the antidiagonal of the S x S tile:
 *
 *   score[i][j] = Qr[i] . Kr[j] / sqrt(D) / S / norm       (f32)
 *   P[i][.]     = softmax over the columns row i may see    (f32)
 *   A[qb][kb]   = sum of P over the R = B/S rows of qb and columns of kb
 *
 * Every row sees one interval [a, b) of columns (row_interval), so the work
 * is cut into tiles of whole query blocks; a tile computes the columns its
 * rows can see with OpenBLAS sgemm: the part all of them see in one product
 * and the causal triangle by halves (tri_gemm), so the masked half of the
 * score matrix is never computed but for thin slivers along the diagonal.
 * A fused softmax and block sum follows (vector row kernels, scalar
 * reference kept); nothing larger than the tile is ever stored.  The tile's
 * block rows are then selected (kv_xattn_select_row) and masked.  Tiles are
 * independent, so the result does not depend on the thread count.
 *
 * The recall reuses the same machinery with stride 1 (the exact attention
 * matrix) and adds, per query token, the mass inside its kept blocks.
 *
 * The engine (the row kernels, the tiles, its set-up and run) is in
 * xattn_eng.c; this file holds the options, the checks, the selection
 * of a block row, the references and the entry points (xattn_int.h).
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "attn/xattn_int.h"
#include "attn/bf16.h"
#include "core/half.h"
#include "core/cli.h"
#include "core/isa.h"

void kv_xattn_opts_init(struct kv_xattn_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->stride = 8;
    o->block_size = 128;
    o->causal = 1;
    o->q_offset = -1;
    o->norm = 1.0;
    o->select_mode = KV_XATTN_INVERSE;
    o->rule = KV_XATTN_RULE_ORIGINAL;
}

/* The candidate order: descending by value, ties (and -0 == +0) by lower
 * index, NaN (from NaN inputs) last, so the order is total.  1 when block
 * a comes before block b.  The first two tests settle every pair of
 * distinct ordered values; the rest sees equal values or a NaN. */
static inline int sel_before(const float *v, int64_t a, int64_t b)
{
    float x = v[a], y = v[b];
    int na, nb;

    if (x > y)
        return 1;
    if (x < y)
        return 0;
    na = isnan(x);
    nb = isnan(y);
    if (na != nb)
        return nb;
    return a < b;
}

/* Restore the heap below position i of the n-entry heap h (the first
 * candidate in the order above at the root). */
static void sel_sift(const float *v, int64_t *h, int64_t n, int64_t i)
{
    int64_t x = h[i];

    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && sel_before(v, h[c + 1], h[c]))
            c++;
        if (!sel_before(v, h[c], x))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Take the first candidate out of the heap h of *n (> 0) entries. */
static int64_t sel_pop(const float *v, int64_t *h, int64_t *n)
{
    int64_t top = h[0];

    h[0] = h[--*n];
    if (*n > 1)
        sel_sift(v, h, *n, 0);
    return top;
}

/* The candidates are visited in the order above, each only until the
 * threshold is crossed, so they sit in a heap (built in O(n)) rather than
 * being sorted: a row usually keeps a few blocks out of many. */
void kv_xattn_select_row(const float *vals, int64_t n, enum kv_xattn_sel kind,
                         int64_t diag, double tau, int64_t *scratch,
                         uint8_t *keep)
{
    double total = 0.0, required, acc = 0.0, lag_prev = 0.0;
    int64_t *cand = scratch, ncand = 0;
    int have_diag = diag >= 0 && diag < n;

    memset(keep, 0, (size_t)n);
    if (n <= 0)
        return;
    for (int64_t j = 0; j < n; j++)
        total += (double)vals[j];
    required = tau * total;

    if (kind == KV_XATTN_SEL_FREE) {
        have_diag = 0;
    } else if (kind == KV_XATTN_SEL_LAGGED && have_diag) {
        keep[diag] = 1;
        acc = (double)vals[diag];
    } else {
        /* forced: block 0 and the diagonal, summed once each */
        keep[0] = 1;
        acc = (double)vals[0];
        if (have_diag && diag != 0) {
            keep[diag] = 1;
            acc += (double)vals[diag];
        }
        kind = KV_XATTN_SEL_FORCED;
    }
    for (int64_t j = 0; j < n; j++)
        if (!keep[j])
            cand[ncand++] = j;
    for (int64_t i = ncand / 2; i-- > 0;)
        sel_sift(vals, cand, ncand, i);

    if (kind == KV_XATTN_SEL_LAGGED) {
        /* candidate 1 is judged on 0, candidate p >= 2 on A[diag] + o1 +
         * ... + o(p-2): the original's cumulative sum is one step late */
        double judged = 0.0;
        int first = 1;
        while (ncand > 0 && judged < required) {
            int64_t j = sel_pop(vals, cand, &ncand);
            keep[j] = 1;
            if (first) {
                judged = acc;
                first = 0;
            } else {
                judged += lag_prev;
            }
            lag_prev = (double)vals[j];
        }
    } else {
        while (ncand > 0 && acc < required) {
            int64_t j = sel_pop(vals, cand, &ncand);
            keep[j] = 1;
            acc += (double)vals[j];
        }
    }
    keep[0] = 1;   /* rejected candidates scatter into column 0 (8.3) */
}

void kv_xattn_scores_ref(const float *q, int64_t lq, const float *k,
                         int64_t lk, int64_t d, int64_t stride,
                         enum kv_xattn_mode mode, double norm, float *out)
{
    int64_t nq = cdiv(lq, stride), nk = cdiv(lk, stride);
    float dd = (float)sqrt((double)d), ds = (float)stride, dn = (float)norm;

    for (int64_t i = 0; i < nq; i++)
        for (int64_t j = 0; j < nk; j++) {
            float dot = 0.0f;
            for (int64_t s = 0; s < stride; s++) {
                int64_t tq = i * stride +
                             (mode == KV_XATTN_INVERSE ? stride - 1 - s : s);
                int64_t tk = j * stride + s;
                if (tq >= lq || tk >= lk)
                    continue;
                for (int64_t x = 0; x < d; x++)
                    dot += q[tq * d + x] * k[tk * d + x];
            }
            out[i * nk + j] = dot / dd / ds / dn;
        }
}

void kv_xattn_density(const uint8_t *mask, int64_t nbh, int64_t nqb,
                      int64_t nkb, int causal, int64_t q_offset, int64_t lq,
                      int64_t block, int64_t *kept, int64_t *valid)
{
    for (int64_t bh = 0; bh < nbh; bh++) {
        int64_t nk = 0, nv = 0;
        for (int64_t qb = 0; qb < nqb; qb++) {
            const uint8_t *row = mask + (bh * nqb + qb) * nkb;
            int64_t last = nkb - 1;
            if (causal) {
                int64_t tok = q_offset + min64((qb + 1) * block, lq) - 1;
                last = min64(tok / block, nkb - 1);
            }
            for (int64_t kb = 0; kb <= last; kb++)
                nk += row[kb] != 0;
            nv += last + 1;
        }
        kept[bh] = nk;
        valid[bh] = nv;
    }
}

/* kv_xattn_check, with the block alignment of a causal offset optional
 * (the recall works at token level and takes any offset). */
static int check_impl(const struct kv_xattn_opts *o, const int64_t qshape[4],
                      const int64_t kshape[4], int aligned, int64_t *q_offset,
                      struct kv_err *e)
{
    int64_t lq = qshape[2], lk = kshape[2], off;

    if (o->stride < 1 || o->block_size < 1)
        return kv_err_set(e, "stride %lld and block size %lld must be >= 1",
                          (long long)o->stride, (long long)o->block_size);
    if (o->block_size % o->stride != 0)
        return kv_err_set(e, "stride %lld does not divide block size %lld",
                          (long long)o->stride, (long long)o->block_size);
    if (qshape[0] != kshape[0])
        return kv_err_set(e, "batch: Q has %lld, K has %lld",
                          (long long)qshape[0], (long long)kshape[0]);
    if (qshape[3] != kshape[3])
        return kv_err_set(e, "head dim: Q has %lld, K has %lld",
                          (long long)qshape[3], (long long)kshape[3]);
    if (qshape[1] < 1 || kshape[1] < 1)
        return kv_err_set(e, "empty input: Q has %lld heads, K has %lld",
                          (long long)qshape[1], (long long)kshape[1]);
    if (qshape[1] % kshape[1] != 0)
        return kv_err_set(e, "query heads %lld are not a multiple of kv "
                          "heads %lld", (long long)qshape[1],
                          (long long)kshape[1]);
    if (qshape[0] < 1 || lq < 1 || lk < 1 || qshape[3] < 1)
        return kv_err_set(e, "empty input: Q length %lld, K length %lld, "
                          "head dim %lld, batch %lld", (long long)lq,
                          (long long)lk, (long long)qshape[3],
                          (long long)qshape[0]);
    if (!(o->norm > 0.0) || !isfinite(o->norm))
        return kv_err_set(e, "norm %g must be > 0", o->norm);
    if (o->stride * qshape[3] > INT32_MAX || lk > INT32_MAX ||
        lq > INT64_MAX / 4)
        return kv_err_set(e, "sizes too large (stride x head dim %lld)",
                          (long long)(o->stride * qshape[3]));
    if (o->thresholds)
        for (int64_t h = 0; h < qshape[1]; h++)
            if (!(o->thresholds[h] >= 0.0 && o->thresholds[h] <= 1.0))
                return kv_err_set(e, "threshold %g of head %lld is outside "
                                  "[0, 1]", o->thresholds[h], (long long)h);
    if (o->compat_chunk > 0) {
        int64_t c = o->compat_chunk, nqc, nkc;
        if (c % o->block_size != 0)
            return kv_err_set(e, "chunk size %lld is not a multiple of block "
                              "size %lld", (long long)c,
                              (long long)o->block_size);
        nqc = cdiv(lq, c);
        nkc = cdiv(lk, c);
        if (nkc < nqc)
            return kv_err_set(e, "chunk size %lld gives %lld query chunks "
                              "but only %lld key chunks (Lq %lld, Lk %lld)",
                              (long long)c, (long long)nqc, (long long)nkc,
                              (long long)lq, (long long)lk);
        if (nkc > INT64_MAX / c / 4)
            return kv_err_set(e, "chunk size %lld too large", (long long)c);
        *q_offset = (nkc - nqc) * c;
        return 0;
    }
    off = o->q_offset;
    if (off < 0) {
        off = lk - lq;
        if (off < 0 && o->causal)
            return kv_err_set(e, "causal with Lq %lld > Lk %lld: give "
                              "--q-offset (the kv position of query token "
                              "0) or --no-causal", (long long)lq,
                              (long long)lk);
        if (off < 0)
            off = 0;
    }
    if (aligned && o->causal && off % o->block_size != 0 &&
        o->q_offset >= 0)
        return kv_err_set(e, "--q-offset %lld is not a multiple of "
                          "--block-size %lld: causal selection needs the "
                          "queries to start on a key block boundary",
                          (long long)off, (long long)o->block_size);
    if (aligned && o->causal && off % o->block_size != 0)
        return kv_err_set(e, "the default --q-offset Lk - Lq = %lld - %lld "
                          "= %lld is not a multiple of --block-size %lld: "
                          "causal selection needs the queries to start on a "
                          "key block boundary", (long long)lk, (long long)lq,
                          (long long)off, (long long)o->block_size);
    *q_offset = off;
    return 0;
}

int kv_xattn_check(const struct kv_xattn_opts *o, const int64_t qshape[4],
                   const int64_t kshape[4], int64_t *q_offset,
                   struct kv_err *e)
{
    return check_impl(o, qshape, kshape, 1, q_offset, e);
}

static int check_f32(const struct kv_tensor *t, const char *name,
                     struct kv_err *e)
{
    if (t->dtype != KV_F32 || t->ndim != 4)
        return kv_err_set(e, "%s: expected a 4-d f32 tensor, got %d-d %s",
                          name, t->ndim, kv_dtype_name(t->dtype));
    return 0;
}

/* f32, or bf16 (estimate_impl sees bf16 only when both are, on a route) */
static int check_in(const struct kv_tensor *t, const char *name,
                    struct kv_err *e)
{
    if ((t->dtype != KV_F32 && t->dtype != KV_BF16) || t->ndim != 4)
        return kv_err_set(e, "%s: expected a 4-d f32 or bf16 tensor, got %d-d %s",
                          name, t->ndim, kv_dtype_name(t->dtype));
    return 0;
}

static int estimate_impl(const struct kv_tensor *q, const struct kv_tensor *k,
                         const struct kv_xattn_opts *o, struct kv_tensor *mask,
                         struct kv_tensor *sums, struct kv_xattn_times *times,
                         double t0, struct kv_err *e);

int kv_xattn_estimate(const struct kv_tensor *q, const struct kv_tensor *k,
                      const struct kv_xattn_opts *o, struct kv_tensor *mask,
                      struct kv_tensor *sums, struct kv_xattn_times *times,
                      struct kv_err *e)
{
    double t0 = kv_now();
    int rc;
    struct kv_tensor qw, kw;
    kv_tensor_init(&qw);
    kv_tensor_init(&kw);
    /* bf16 Q and K go to the bf16 tiles as they are; widened to f32 only
     * for the f32 path (no bf16 route, or one of them f32) */
    enum kv_bf16_route route = kv_bf16_route_usable((enum kv_bf16_route)o->bf16_route);
    if (!(q->dtype == KV_BF16 && k->dtype == KV_BF16 && route != KV_BF16_NONE)) {
        if (q->dtype == KV_BF16) {
            if (kv_tensor_convert(&qw, q, KV_F32, e))
                return -1;
            q = &qw;
        }
        if (k->dtype == KV_BF16) {
            if (kv_tensor_convert(&kw, k, KV_F32, e)) {
                kv_tensor_release(&qw);
                return -1;
            }
            k = &kw;
        }
    }
    rc = estimate_impl(q, k, o, mask, sums, times, t0, e);
    kv_tensor_release(&qw);
    kv_tensor_release(&kw);
    return rc;
}

static int estimate_impl(const struct kv_tensor *q, const struct kv_tensor *k,
                         const struct kv_xattn_opts *o, struct kv_tensor *mask,
                         struct kv_tensor *sums, struct kv_xattn_times *times,
                         double t0, struct kv_err *e)
{
    struct eng g;
    struct kv_tensor m, su;
    int64_t off, shape[4];
    float *kcopy = NULL, *isums = NULL;
    size_t need;
    int rc = -1;

    if (check_in(q, "Q", e) || check_in(k, "K", e))
        return -1;
    if (!o->thresholds)
        return kv_err_set(e, "no thresholds");
    if (kv_xattn_check(o, q->shape, k->shape, &off, e))
        return -1;
    if (xattn_eng_setup(&g, q, k, o, o->stride, off, o->compat_chunk > 0, &need, e))
        return -1;
    if (g.bf16 == KV_BF16_NONE && !g.kern && kv_blas_load(e))    /* the f32 path's sgemm */
        return -1;
    kv_tensor_init(&m);
    kv_tensor_init(&su);
    shape[0] = g.nb;
    shape[1] = g.hq;
    shape[2] = g.nqb;
    shape[3] = g.nkb;
    if (kv_tensor_alloc(&m, KV_BOOL, 4, shape, 0, e) ||
        (sums && kv_tensor_alloc(&su, KV_F32, 4, shape, 0, e)))
        goto done;
    isums = malloc((size_t)(g.nb * g.hq * g.nqb) * (size_t)g.nkb_sel *
                   sizeof(float));
    if (!isums) {
        kv_err_set(e, "out of memory for the block sums");
        goto done;
    }
    if (xattn_eng_kviews(&g, &kcopy, e))
        goto done;
    g.sums = isums;
    g.mask = m.data;
    g.thr = o->thresholds;
    g.rule = o->rule;
    g.keep_sink = o->keep_sink;
    g.keep_recent = o->keep_recent;
    if (times) {
        memset(times, 0, sizeof(*times));
        times->prep = kv_now() - t0;
    }
    if (xattn_eng_run(&g, o->nthreads, times, e))
        goto done;
    if (sums) {
        float *dst = su.data;
        for (int64_t row = 0; row < g.nb * g.hq * g.nqb; row++)
            memcpy(dst + row * g.nkb, isums + row * g.nkb_sel,
                   (size_t)g.nkb * sizeof(float));
        kv_tensor_move(sums, &su);
    }
    kv_tensor_move(mask, &m);
    if (times)
        times->total = kv_now() - t0;
    rc = 0;
done:
    free(g.kr);
    free(g.kpack);
    free(g.kpf);
    free(kcopy);
    free(isums);
    kv_tensor_release(&m);
    kv_tensor_release(&su);
    return rc;
}

int kv_xattn_recall(const struct kv_tensor *q, const struct kv_tensor *k,
                    const uint8_t *keep, const struct kv_xattn_opts *o,
                    struct kv_tensor *row_recall, struct kv_tensor *block_mass,
                    struct kv_err *e)
{
    struct eng g;
    struct kv_xattn_opts ro = *o;
    struct kv_tensor rr, bm;
    int64_t off, shape[4];
    float *kcopy = NULL, *isums = NULL;
    size_t need;
    int rc = -1;

    if (check_f32(q, "Q", e) || check_f32(k, "K", e))
        return -1;
    ro.stride = 1;
    ro.compat_chunk = 0;
    ro.thresholds = NULL;
    ro.select_mode = KV_XATTN_SLASH;
    if (ro.scale <= 0.0)
        ro.scale = 1.0 / sqrt((double)q->shape[3]);
    ro.norm = 1.0;
    if (check_impl(&ro, q->shape, k->shape, 0, &off, e))
        return -1;
    if (xattn_eng_setup(&g, q, k, &ro, 1, off, 0, &need, e))
        return -1;
    if (g.bf16 == KV_BF16_NONE && !g.kern && kv_blas_load(e))
        return -1;
    kv_tensor_init(&rr);
    kv_tensor_init(&bm);
    shape[0] = g.nb;
    shape[1] = g.hq;
    shape[2] = g.lq;
    if (kv_tensor_alloc(&rr, KV_F64, 3, shape, 0, e))
        goto done;
    shape[2] = g.nqb;
    shape[3] = g.nkb;
    if (block_mass && kv_tensor_alloc(&bm, KV_F32, 4, shape, 0, e))
        goto done;
    isums = malloc((size_t)(g.nb * g.hq * g.nqb) * (size_t)g.nkb_sel *
                   sizeof(float));
    if (!isums) {
        kv_err_set(e, "out of memory for the block sums");
        goto done;
    }
    if (xattn_eng_kviews(&g, &kcopy, e))
        goto done;
    g.sums = isums;
    g.keep = keep;
    g.row_recall = rr.data;
    if (xattn_eng_run(&g, ro.nthreads, NULL, e))
        goto done;
    if (block_mass) {
        float *dst = bm.data;
        for (int64_t row = 0; row < g.nb * g.hq * g.nqb; row++) {
            int64_t qb = row % g.nqb;
            double n = (double)(min64((qb + 1) * g.bs, g.lq) - qb * g.bs);
            for (int64_t kb = 0; kb < g.nkb; kb++)
                dst[row * g.nkb + kb] =
                    (float)(isums[row * g.nkb_sel + kb] / n);
        }
        kv_tensor_move(block_mass, &bm);
    }
    kv_tensor_move(row_recall, &rr);
    rc = 0;
done:
    free(g.kr);
    free(g.kpack);
    free(g.kpf);
    free(kcopy);
    free(isums);
    kv_tensor_release(&rr);
    kv_tensor_release(&bm);
    return rc;
}
