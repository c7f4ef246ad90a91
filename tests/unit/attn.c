/* attn.c - conformance of lib/attn against a plain float64 reference.
 *
 * The reference below is written from the formulas, not from the kernels:
 * canonical [B][H][L][D] double arrays, every score of a row computed,
 * masked keys left out, softmax in double.  Cases cover random shapes with
 * odd lengths, GQA and MQA, every mask route (implicit causal and window,
 * explicit bool/int/keep/additive masks with broadcasting, block masks),
 * the thd and paged layouts, f16/bf16 inputs, the scalar path, thread-count
 * invariance, and the LSE merge (spec C.4 numbers, split keys, the seed-003
 * PCP head/tail scheme).  Bound: the one kvattn(1) ACCURACY states for the
 * inputs (lib/attn/bound.h); two routes agree within the sum of theirs.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bound.h"
#include "core/half.h"
#include "core/tensor.h"
#include "tap.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static double urand(void)   /* uniform in [-1, 1) */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

/* ---- the reference --------------------------------------------------- */

struct ref {
    int B, Hq, Hkv, D, Dv, LQ, LK;      /* LQ/LK: array extents */
    const int *lq, *lk;                 /* per request */
    const double *q, *k, *v;            /* [B][Hq][LQ][D], [B][Hkv][LK][D|Dv] */
    double scale;
    int causal, window;
    /* explicit mask, canonical [B][Hq][LQ][LK]: kind 0 none, 1 masked-flag
     * (nonzero = masked), 2 additive */
    int mkind;
    const double *mask;
    /* block mask [B][Hq][nqb][nkb], nonzero = keep */
    const unsigned char *bm;
    int bs, nqb, nkb;
    double *out, *lse;                  /* [B][Hq][LQ][Dv], [B][Hq][LQ] */
    int bf16_in;                        /* Q, K, V bf16: the bf16 tiles' bound */
};

static void reference(struct ref *r)
{
    int G = r->Hq / r->Hkv;
    double *sc = malloc(sizeof(double) * (size_t)r->LK);
    for (int b = 0; b < r->B; b++)
        for (int h = 0; h < r->Hq; h++)
            for (int i = 0; i < r->lq[b]; i++) {
                int kh = h / G, any = 0;
                double mx = -INFINITY;
                size_t row = ((size_t)(b * r->Hq + h) * r->LQ + i);
                const double *qi = r->q + row * r->D;
                long pos = (long)i + r->lk[b] - r->lq[b];
                for (int j = 0; j < r->lk[b]; j++) {
                    int allowed = 1;
                    if (r->causal && j > pos)
                        allowed = 0;
                    if (r->window && (j > pos || j <= pos - r->window))
                        allowed = 0;
                    if (r->bm && !r->bm[((size_t)(b * r->Hq + h) * r->nqb + i / r->bs)
                                        * r->nkb + j / r->bs])
                        allowed = 0;
                    double add = 0.0;
                    if (r->mkind) {
                        double mv = r->mask[row * r->LK + j];
                        if (r->mkind == 1 && mv != 0.0)
                            allowed = 0;
                        if (r->mkind == 2)
                            add = mv;
                    }
                    const double *kj = r->k + ((size_t)(b * r->Hkv + kh) * r->LK + j) * r->D;
                    double dot = 0.0;
                    for (int d = 0; d < r->D; d++)
                        dot += qi[d] * kj[d];
                    sc[j] = allowed ? dot * r->scale + add : -INFINITY;
                    if (sc[j] > mx)
                        mx = sc[j];
                    if (sc[j] != -INFINITY)
                        any = 1;
                }
                double *o = r->out + row * r->Dv;
                for (int d = 0; d < r->Dv; d++)
                    o[d] = 0.0;
                if (!any) {
                    r->lse[row] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int j = 0; j < r->lk[b]; j++) {
                    if (sc[j] == -INFINITY)
                        continue;
                    double w = exp(sc[j] - mx);
                    sum += w;
                    const double *vj = r->v + ((size_t)(b * r->Hkv + kh) * r->LK + j) * r->Dv;
                    for (int d = 0; d < r->Dv; d++)
                        o[d] += w * vj[d];
                }
                for (int d = 0; d < r->Dv; d++)
                    o[d] /= sum;
                r->lse[row] = mx + log(sum);
            }
    free(sc);
}

/* ---- helpers ----------------------------------------------------------- */

static double *rand_array(size_t n, double amp)
{
    double *a = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        a[i] = amp * urand();
    return a;
}

/* Round an array through dtype t (f16/bf16) so the reference sees what the
 * fast path reads. */
static void round_through(double *a, size_t n, enum kv_dtype t)
{
    for (size_t i = 0; i < n; i++) {
        float f = (float)a[i];
        if (t == KV_F16)
            f = kv_f16_to_f32(kv_f32_to_f16(f));
        else if (t == KV_BF16)
            f = kv_bf16_to_f32(kv_f32_to_bf16(f));
        a[i] = f;
    }
}

static void put(struct kv_tensor *t, size_t idx, double x)
{
    float f = (float)x;
    switch (t->dtype) {
    case KV_F32: ((float *)t->data)[idx] = f; break;
    case KV_F16: ((uint16_t *)t->data)[idx] = kv_f32_to_f16(f); break;
    case KV_BF16: ((uint16_t *)t->data)[idx] = kv_f32_to_bf16(f); break;
    case KV_F64: ((double *)t->data)[idx] = x; break;
    case KV_BOOL: case KV_U8: ((uint8_t *)t->data)[idx] = (uint8_t)x; break;
    case KV_I32: ((int32_t *)t->data)[idx] = (int32_t)x; break;
    case KV_I64: ((int64_t *)t->data)[idx] = (int64_t)x; break;
    default: break;
    }
}

/* Canonical [B][H][L][D] (extent L) -> bhsd tensor [B][H][L][D]. */
static void to_bhsd(struct kv_tensor *t, enum kv_dtype dt, const double *a,
                    int B, int H, int L, int D)
{
    int64_t sh[4] = {B, H, L, D};
    kv_tensor_init(t);
    kv_tensor_alloc(t, dt, 4, sh, 0, NULL);
    for (size_t i = 0; i < (size_t)B * H * L * D; i++)
        put(t, i, a[i]);
}

/* Canonical -> packed thd [sum len][H][D]. */
static void to_thd(struct kv_tensor *t, enum kv_dtype dt, const double *a,
                   int B, int H, int L, int D, const int *len)
{
    int64_t T = 0;
    for (int b = 0; b < B; b++)
        T += len[b];
    int64_t sh[3] = {T, H, D};
    kv_tensor_init(t);
    kv_tensor_alloc(t, dt, 3, sh, 0, NULL);
    int64_t tok = 0;
    for (int b = 0; b < B; b++)
        for (int s = 0; s < len[b]; s++, tok++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < D; d++)
                    put(t, (size_t)((tok * H + h) * D + d),
                        a[((size_t)(b * H + h) * L + s) * D + d]);
}

static double out_get(const struct kv_tensor *t, size_t i)
{
    return kv_tensor_get_f64(t, i);
}

/* Largest 2-norm of the rows (length d) of a[n_rows][d]. */
static double max_norm(const double *a, size_t n_rows, int d)
{
    double m = 0.0;
    for (size_t r = 0; r < n_rows; r++) {
        double s = 0.0;
        for (int i = 0; i < d; i++)
            s += a[r * d + i] * a[r * d + i];
        m = fmax(m, s);
    }
    return sqrt(m);
}

/* Compare a bhsd result with the reference (rows i < lq[b] only), within
 * mult times the bound of kvattn(1) ACCURACY for the case's inputs (1: one
 * route against exact attention).  *worst: the largest error as a fraction
 * of the bound. */
static int cmp_bhsd(const struct ref *r, const struct kv_tensor *o,
                    const struct kv_tensor *l, double mult, double *worst)
{
    double A = r->scale * max_norm(r->q, (size_t)r->B * r->Hq * r->LQ, r->D) *
               max_norm(r->k, (size_t)r->B * r->Hkv * r->LK, r->D), V = 0.0, mabs = 0.0;
    for (size_t i = 0; i < (size_t)r->B * r->Hkv * r->LK * r->Dv; i++)
        V = fmax(V, fabs(r->v[i]));
    if (r->mkind == 2)
        for (size_t i = 0; i < (size_t)r->B * r->Hq * r->LQ * r->LK; i++)
            if (isfinite(r->mask[i]))
                mabs = fmax(mabs, fabs(r->mask[i]));
    A = A * (1 + 1e-12) + mabs;
    double bo = mult * kv_bound_attn_out(r->LK, r->D, A, V, o->dtype);
    double X = 0.0;
    if (r->bf16_in) {
        /* the bf16 tiles' bound of the loosest route (round-to-odd, P
         * rounded to bf16) */
        for (size_t i = 0; i < (size_t)r->B * r->Hq * r->LQ * r->D; i++)
            X = fmax(X, fabs(r->q[i]));
        for (size_t i = 0; i < (size_t)r->B * r->Hkv * r->LK * r->D; i++)
            X = fmax(X, fabs(r->k[i]));
        X = r->scale * (X + 1.0);
        bo = mult * kv_bound_attn_out_bf16(r->LK, r->D, A, V, X, o->dtype, 1, 1);
    }
    double err = 0.0, lerr = 0.0;
    for (int b = 0; b < r->B; b++)
        for (int h = 0; h < r->Hq; h++)
            for (int i = 0; i < r->lq[b]; i++) {
                size_t row = (size_t)(b * r->Hq + h) * r->LQ + i;
                for (int d = 0; d < r->Dv; d++) {
                    double x = fabs(out_get(o, row * r->Dv + d) - r->out[row * r->Dv + d]) / bo;
                    if (!(x <= err))
                        err = x;
                }
                if (l) {
                    double a = out_get(l, row), c = r->lse[row];
                    double bl = mult * (r->bf16_in
                        ? kv_bound_attn_lse_bf16(r->LK, r->D, A, isfinite(c) ? fabs(c) : 0, X, 1, 0)
                        : kv_bound_attn_lse(r->LK, r->D, A, isfinite(c) ? fabs(c) : 0, 0));
                    double x = (a == c) ? 0.0 : fabs(a - c) / bl;
                    if (!(x <= lerr))
                        lerr = x;
                }
            }
    if (worst)
        *worst = err > lerr ? err : lerr;
    return err <= 1.0 && lerr <= 1.0;
}

/* ---- a bhsd case ------------------------------------------------------- */

struct bcase {
    const char *name;
    int B, Hq, Hkv, LQ, LK, D, Dv;
    int causal, window;
    int mkind;          /* 0, 1 = bool masked, 2 = additive f32, 3 = keep u8, 4 = i32 */
    int mdims;          /* 2 = [Lq, Lk], 3 = [Hq, Lq, Lk], 4 = [B, 1, Lq, Lk] */
    int bsparse;        /* block size, 0 = none */
    enum kv_dtype dt;
    int tq, tk, scalar, threads;
};

static int run_bcase(const struct bcase *c, double mult)
{
    int lq[8], lk[8];
    for (int b = 0; b < c->B; b++) {
        lq[b] = c->LQ;
        lk[b] = c->LK;
    }
    size_t nq = (size_t)c->B * c->Hq * c->LQ * c->D;
    size_t nk = (size_t)c->B * c->Hkv * c->LK * c->D;
    size_t nv = (size_t)c->B * c->Hkv * c->LK * c->Dv;
    double *q = rand_array(nq, 2.0), *k = rand_array(nk, 2.0), *v = rand_array(nv, 1.0);
    if (c->dt != KV_F32) {
        round_through(q, nq, c->dt);
        round_through(k, nk, c->dt);
        round_through(v, nv, c->dt);
    }
    struct ref r = {0};
    r.B = c->B; r.Hq = c->Hq; r.Hkv = c->Hkv; r.D = c->D; r.Dv = c->Dv;
    r.LQ = c->LQ; r.LK = c->LK; r.lq = lq; r.lk = lk; r.q = q; r.k = k; r.v = v;
    r.scale = 1.0 / sqrt((double)c->D);
    r.causal = c->causal; r.window = c->window;
    r.out = calloc((size_t)c->B * c->Hq * c->LQ * c->Dv, sizeof(double));
    r.lse = calloc((size_t)c->B * c->Hq * c->LQ, sizeof(double));

    struct kv_tensor tq, tk, tv, tm, tb, out, lse;
    to_bhsd(&tq, c->dt, q, c->B, c->Hq, c->LQ, c->D);
    to_bhsd(&tk, c->dt, k, c->B, c->Hkv, c->LK, c->D);
    to_bhsd(&tv, c->dt, v, c->B, c->Hkv, c->LK, c->Dv);
    kv_tensor_init(&tm);
    kv_tensor_init(&tb);
    kv_tensor_init(&out);
    kv_tensor_init(&lse);
    double *canon = NULL;
    unsigned char *bmc = NULL;
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.layout = KV_ATTN_BHSD;
    req.q = &tq; req.k = &tk; req.v = &tv;
    req.causal = c->causal; req.window = c->window;
    req.out_dtype = KV_F32;
    req.tile_q = c->tq; req.tile_k = c->tk; req.scalar = c->scalar;
    req.n_threads = c->threads;
    if (c->mkind) {
        /* draw the mask over its own (broadcast) shape, expand canonically */
        int64_t sh[4];
        int nd = c->mdims;
        if (nd == 2) { sh[0] = c->LQ; sh[1] = c->LK; }
        else if (nd == 3) { sh[0] = c->Hq; sh[1] = c->LQ; sh[2] = c->LK; }
        else { sh[0] = c->B; sh[1] = 1; sh[2] = c->LQ; sh[3] = c->LK; }
        enum kv_dtype mdt = c->mkind == 1 ? KV_BOOL : c->mkind == 2 ? KV_F32
                          : c->mkind == 3 ? KV_U8 : KV_I32;
        kv_tensor_alloc(&tm, mdt, nd, sh, 0, NULL);
        size_t nm = kv_tensor_numel(&tm);
        double *mv = malloc(nm * sizeof(double));
        for (size_t i = 0; i < nm; i++) {
            double u = urand();
            if (c->mkind == 2)
                mv[i] = u < -0.6 ? -INFINITY : u < -0.3 ? -10000.0 : 0.7 * u;
            else if (c->mkind == 4)
                mv[i] = u < -0.2 ? (u < -0.6 ? 7 : 1) : 0;
            else
                mv[i] = u < -0.2;
            put(&tm, i, mv[i]);
        }
        canon = malloc(sizeof(double) * (size_t)c->B * c->Hq * c->LQ * c->LK);
        for (int b = 0; b < c->B; b++)
            for (int h = 0; h < c->Hq; h++)
                for (int i = 0; i < c->LQ; i++)
                    for (int j = 0; j < c->LK; j++) {
                        size_t src = nd == 2 ? (size_t)i * c->LK + j
                                   : nd == 3 ? ((size_t)h * c->LQ + i) * c->LK + j
                                   : ((size_t)b * c->LQ + i) * c->LK + j;
                        double x = mv[src];
                        if (c->mkind == 3)
                            x = x != 0 ? 0.0 : 1.0;      /* keep -> masked flag */
                        canon[(((size_t)b * c->Hq + h) * c->LQ + i) * c->LK + j] = x;
                    }
        free(mv);
        r.mkind = c->mkind == 2 ? 2 : 1;
        r.mask = canon;
        req.mask = &tm;
        req.mask_keep = c->mkind == 3;
    }
    if (c->bsparse) {
        int bs = c->bsparse, nqb = (c->LQ + bs - 1) / bs, nkb = (c->LK + bs - 1) / bs;
        int64_t sh[4] = {c->B, c->Hq, nqb, nkb};
        kv_tensor_alloc(&tb, KV_BOOL, 4, sh, 0, NULL);
        size_t n = kv_tensor_numel(&tb);
        bmc = malloc(n);
        for (size_t i = 0; i < n; i++) {
            bmc[i] = urand() < 0.2;
            put(&tb, i, bmc[i]);
        }
        r.bm = bmc; r.bs = bs; r.nqb = nqb; r.nkb = nkb;
        req.block_mask = &tb;
        req.block_size = bs;
    }
    reference(&r);
    r.bf16_in = req.q->dtype == KV_BF16 && req.v && req.v->dtype == KV_BF16 &&
                req.k->dtype == KV_BF16;
    struct kv_err e = {{0}};
    int ok = kv_attn_run(&req, &out, &lse, &e) == 0;
    double worst = -1;
    if (ok)
        ok = cmp_bhsd(&r, &out, &lse, mult, &worst);
    TAP_OK(ok, "%s: within the bound of the float64 reference (worst %.3g of it) %s",
           c->name, worst, e.msg);
    kv_tensor_release(&tq); kv_tensor_release(&tk); kv_tensor_release(&tv);
    kv_tensor_release(&tm); kv_tensor_release(&tb);
    kv_tensor_release(&out); kv_tensor_release(&lse);
    free(q); free(k); free(v); free(r.out); free(r.lse); free(canon); free(bmc);
    return ok;
}

/* ---- route equivalences ------------------------------------------------ */

static struct kv_tensor tensor_f32(int nd, const int64_t *sh)
{
    struct kv_tensor t;
    kv_tensor_init(&t);
    kv_tensor_alloc(&t, KV_F32, nd, sh, 0, NULL);
    float *f = t.data;
    for (size_t i = 0; i < kv_tensor_numel(&t); i++)
        f[i] = (float)(2.0 * urand());
    return t;
}

static double max_diff(const struct kv_tensor *a, const struct kv_tensor *b)
{
    if (kv_tensor_numel(a) != kv_tensor_numel(b))
        return INFINITY;
    double m = 0.0;
    for (size_t i = 0; i < kv_tensor_numel(a); i++) {
        double x = kv_tensor_get_f64(a, i), y = kv_tensor_get_f64(b, i);
        if (x == y)
            continue;
        double d = fabs(x - y);
        if (!(d <= m))
            m = d;
    }
    return m;
}

/* The documented bound of kvattn(1) ACCURACY for req's inputs (one route
 * against exact attention); two routes must agree within twice it. */
static void req_bounds(const struct kv_attn_req *req, const struct kv_tensor *lse,
                       double *bo, double *bl, double *v_max, double *lse_max)
{
    const struct kv_tensor *q = req->q, *k = req->k, *v = req->v;
    int64_t D = q->shape[q->ndim - 1];
    double scale = req->has_scale ? req->scale : 1.0 / sqrt((double)D);
    double mabs = 0.0, A, V, labs = 0.0;
    if (req->mask && !req->mask_keep && (req->mask->dtype == KV_F32 ||
        req->mask->dtype == KV_F16 || req->mask->dtype == KV_BF16))
        for (size_t i = 0; i < kv_tensor_numel(req->mask); i++) {
            double x = fabs(kv_tensor_get_f64(req->mask, i));
            if (isfinite(x) && x > mabs)
                mabs = x;
        }
    kv_bound_scan(q, k, v, scale, mabs, &A, &V);
    int64_t n = (int64_t)(kv_tensor_numel(k) / (size_t)D);
    for (size_t i = 0; lse && i < kv_tensor_numel(lse); i++) {
        double x = fabs(kv_tensor_get_f64(lse, i));
        if (isfinite(x) && x > labs)
            labs = x;
    }
    *bo = kv_bound_attn_out(n, D, A, V, req->out_dtype);
    *bl = kv_bound_attn_lse(n, D, A, labs, 0);
    if (k && v && q->dtype == KV_BF16 && k->dtype == KV_BF16 && v->dtype == KV_BF16) {
        /* the bf16 tiles (attn/bf16.h), the loosest route */
        double X = 0.0;
        for (size_t i = 0; i < kv_tensor_numel(q); i++)
            X = fmax(X, fabs(kv_tensor_get_f64(q, i)));
        for (size_t i = 0; i < kv_tensor_numel(k); i++)
            X = fmax(X, fabs(kv_tensor_get_f64(k, i)));
        X = fabs(scale) * (X + 1.0);
        *bo = kv_bound_attn_out_bf16(n, D, A, V, X, req->out_dtype, 1, 1);
        *bl = kv_bound_attn_lse_bf16(n, D, A, labs, X, 1, 0);
    }
    if (v_max)
        *v_max = V;
    if (lse_max)
        *lse_max = labs;
}

/* A merge of n_parts parts against the whole computed at once: each part is
 * within its bound (at most the whole's), its LSE error moves its weight
 * (2 V times the LSE bound), and the merge adds its own. */
static int merge_agree(const struct kv_attn_req *whole, int n_parts,
                       const struct kv_tensor *om, const struct kv_tensor *lm,
                       const struct kv_tensor *ow, const struct kv_tensor *lw)
{
    double bo, bl, V, lse_abs;
    req_bounds(whole, lw, &bo, &bl, &V, &lse_abs);
    double to = 2 * bo + 2 * V * bl + kv_bound_merge_out(n_parts, V);
    double tl = 2 * bl + kv_bound_merge_lse(n_parts, lse_abs);
    return max_diff(om, ow) <= to && max_diff(lm, lw) <= tl;
}

/* Two routes' outputs and LSEs agree within the sum of their bounds. */
static int routes_agree(const struct kv_attn_req *req, const struct kv_tensor *o1,
                        const struct kv_tensor *l1, const struct kv_tensor *o2,
                        const struct kv_tensor *l2, double (*diff)(const struct kv_tensor *,
                                                                    const struct kv_tensor *))
{
    double bo, bl;
    req_bounds(req, l1, &bo, &bl, NULL, NULL);
    return diff(o1, o2) <= 2 * bo && diff(l1, l2) <= 2 * bl;
}

static void run_req(struct kv_attn_req *req, struct kv_tensor *o, struct kv_tensor *l)
{
    struct kv_err e = {{0}};
    kv_tensor_init(o);
    kv_tensor_init(l);
    if (kv_attn_run(req, o, l, &e))
        printf("# kv_attn_run: %s\n", e.msg);
}

/* A block mask shared by all heads lets the heads of a kv group stack
 * (and kept blocks that are apart share one gathered tile); the same mask
 * repeated per head does neither.  Both must agree, for any -j, in f32 and
 * through the converting gather of f16 keys. */
static void test_block_stacking(void)
{
    int64_t H = 8, Hk = 2, L = 300, D = 32, bs = 16, nb = (L + bs - 1) / bs;
    int64_t sq[4] = {1, H, L, D}, sk[4] = {1, Hk, L, D};
    struct kv_tensor q = tensor_f32(4, sq), k = tensor_f32(4, sk), v = tensor_f32(4, sk);
    int64_t s2[2] = {nb, nb}, s4[4] = {1, H, nb, nb};
    struct kv_tensor bm2, bm4, o1, l1, o2, l2, o3, l3;
    kv_tensor_init(&bm2);
    kv_tensor_init(&bm4);
    kv_tensor_alloc(&bm2, KV_BOOL, 2, s2, 0, NULL);
    kv_tensor_alloc(&bm4, KV_BOOL, 4, s4, 0, NULL);
    for (int64_t i = 0; i < nb * nb; i++)
        ((uint8_t *)bm2.data)[i] = urand() < -0.3 || i / nb == i % nb;
    for (int64_t h = 0; h < H; h++)
        memcpy((uint8_t *)bm4.data + h * nb * nb, bm2.data, (size_t)(nb * nb));
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.q = &q; req.k = &k; req.v = &v; req.out_dtype = KV_F32;
    req.causal = 1;
    req.block_size = bs;
    req.block_mask = &bm2;
    req.n_threads = 1;
    run_req(&req, &o1, &l1);
    req.n_threads = 3;
    run_req(&req, &o3, &l3);
    TAP_OK(memcmp(o1.data, o3.data, o1.nbytes) == 0 && memcmp(l1.data, l3.data, l1.nbytes) == 0,
           "shared block mask: bit-identical for 1 and 3 threads");
    kv_tensor_release(&o3); kv_tensor_release(&l3);
    req.block_mask = &bm4;
    req.n_threads = 0;
    run_req(&req, &o2, &l2);
    TAP_OK(routes_agree(&req, &o1, &l1, &o2, &l2, max_diff),
           "block mask shared by heads (stacked) = repeated per head (%.3g)", max_diff(&o1, &o2));
    req.scalar = 1;
    run_req(&req, &o3, &l3);
    TAP_OK(routes_agree(&req, &o3, &l3, &o2, &l2, max_diff),
           "block mask: scalar path = fast path (%.3g)", max_diff(&o3, &o2));
    kv_tensor_release(&o2); kv_tensor_release(&l2);
    kv_tensor_release(&o3); kv_tensor_release(&l3);
    kv_tensor_release(&o1); kv_tensor_release(&l1);
    kv_tensor_release(&bm2); kv_tensor_release(&bm4);
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
}

/* Largest difference of two outputs where NaN must meet NaN (else inf). */
static double nan_diff(const struct kv_tensor *a, const struct kv_tensor *b)
{
    double m = 0.0;
    for (size_t i = 0; i < kv_tensor_numel(a); i++) {
        double x = kv_tensor_get_f64(a, i), y = kv_tensor_get_f64(b, i);
        if (isnan(x) || isnan(y)) {
            if (!(isnan(x) && isnan(y)))
                return INFINITY;
            continue;
        }
        if (x != y && fabs(x - y) > m)
            m = fabs(x - y);
    }
    return m;
}


/* Block-sparse tiles of 128 stacked rows, D 128 and Dv 64 take the AVX-512
 * kernels (where the CPU has them): several kept blocks with gaps in one
 * tile, a last key block cut short (no causal mask), blocks on the causal
 * diagonal and across a window's start (causal 2: window 70), fewer
 * queries than keys (causal 3: the diagonal bottom-right), a query row
 * with a NaN and keys of -inf and +inf.  They must agree with the scalar
 * loops and give the same bits for any -j. */
static void test_sparse_kernels(void)
{
    for (int causal = 0; causal < 4; causal++) {
        int64_t H = 4, Hk = 1, L = 300, D = 128, Dv = 64, bs = 32, nb = (L + bs - 1) / bs;
        int64_t LQ = causal == 3 ? 200 : L, nqb = (LQ + bs - 1) / bs;
        int64_t sq[4] = {1, H, LQ, D}, sk[4] = {1, Hk, L, D}, sv[4] = {1, Hk, L, Dv};
        struct kv_tensor q = tensor_f32(4, sq), k = tensor_f32(4, sk), v = tensor_f32(4, sv);
        int64_t s2[2] = {nqb, nb};
        struct kv_tensor bm, o1, l1, o2, l2, o3, l3;
        kv_tensor_init(&bm);
        kv_tensor_alloc(&bm, KV_BOOL, 2, s2, 0, NULL);
        for (int64_t i = 0; i < nqb * nb; i++)
            ((uint8_t *)bm.data)[i] = urand() < 0.5 || i / nb == i % nb;
        float *qf = q.data, *kf = k.data;
        qf[(2 * LQ + 150) * D + 5] = NAN;           /* head 2, row 150 */
        for (int64_t d = 0; d < D; d++) {
            kf[40 * D + d] = -INFINITY;             /* key 40: -inf scores */
            kf[70 * D + d] = d == 0 ? INFINITY : 0.0f;
        }
        struct kv_attn_req req;
        memset(&req, 0, sizeof req);
        req.q = &q; req.k = &k; req.v = &v; req.out_dtype = KV_F32;
        req.causal = causal > 0;
        req.window = causal == 2 ? 70 : 0;
        req.block_size = bs;
        req.block_mask = &bm;
        req.n_threads = 1;
        run_req(&req, &o1, &l1);
        req.n_threads = 2;
        run_req(&req, &o2, &l2);
        TAP_OK(o1.data && o2.data && memcmp(o1.data, o2.data, o1.nbytes) == 0
               && memcmp(l1.data, l2.data, l1.nbytes) == 0,
               "block-sparse kernels (causal %d): bit-identical for 1 and 2 threads", causal);
        req.scalar = 1;
        run_req(&req, &o3, &l3);
        TAP_OK(o3.data && routes_agree(&req, &o3, &l3, &o1, &l1, nan_diff),
               "block-sparse kernels (causal %d) = scalar path (%.3g)", causal,
               nan_diff(&o3, &o1));
        kv_tensor_release(&o1); kv_tensor_release(&l1);
        kv_tensor_release(&o2); kv_tensor_release(&l2);
        kv_tensor_release(&o3); kv_tensor_release(&l3);
        kv_tensor_release(&bm);
        kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
    }
}

static void test_routes(void)
{
    /* implicit causal = explicit causal mask = all-causal block mask */
    int64_t B = 2, H = 4, Hk = 2, L = 77, D = 32, bs = 16;
    int64_t sq[4] = {B, H, L, D}, sk[4] = {B, Hk, L, D};
    struct kv_tensor q = tensor_f32(4, sq), k = tensor_f32(4, sk), v = tensor_f32(4, sk);
    struct kv_tensor o1, l1, o2, l2, o3, l3, mask, bm;
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.q = &q; req.k = &k; req.v = &v; req.out_dtype = KV_F32;
    req.causal = 1;
    run_req(&req, &o1, &l1);
    int64_t ms[2] = {L, L}, nb = (L + bs - 1) / bs, bms[2] = {nb, nb};
    kv_tensor_init(&mask);
    kv_tensor_alloc(&mask, KV_BOOL, 2, ms, 0, NULL);
    for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < L; j++)
            ((uint8_t *)mask.data)[i * L + j] = j > i;
    req.causal = 0;
    req.mask = &mask;
    run_req(&req, &o2, &l2);
    TAP_OK(routes_agree(&req, &o1, &l1, &o2, &l2, max_diff),
           "implicit causal = kvmask-style causal tensor (%.3g)", max_diff(&o1, &o2));
    kv_tensor_init(&bm);
    kv_tensor_alloc(&bm, KV_BOOL, 2, bms, 0, NULL);
    for (int64_t i = 0; i < nb; i++)
        for (int64_t j = 0; j < nb; j++)
            ((uint8_t *)bm.data)[i * nb + j] = j <= i;
    req.mask = NULL;
    req.causal = 1;
    req.block_mask = &bm;
    req.block_size = bs;
    run_req(&req, &o3, &l3);
    TAP_OK(routes_agree(&req, &o1, &l1, &o3, &l3, max_diff),
           "implicit causal = causal + block mask of all causal blocks (%.3g)",
           max_diff(&o1, &o3));
    kv_tensor_release(&o2); kv_tensor_release(&l2);
    kv_tensor_release(&o3); kv_tensor_release(&l3);

    /* thread count: bit-identical */
    req.block_mask = NULL;
    req.n_threads = 1;
    run_req(&req, &o2, &l2);
    req.n_threads = 3;
    run_req(&req, &o3, &l3);
    TAP_OK(o2.nbytes == o3.nbytes && memcmp(o2.data, o3.data, o2.nbytes) == 0 &&
           memcmp(l2.data, l3.data, l2.nbytes) == 0 &&
           memcmp(o1.data, o2.data, o2.nbytes) == 0,
           "output bit-identical for 1, 3 and all threads");
    kv_tensor_release(&o2); kv_tensor_release(&l2);
    kv_tensor_release(&o3); kv_tensor_release(&l3);

    /* scalar path agrees with the fast path */
    req.n_threads = 0;
    req.scalar = 1;
    run_req(&req, &o2, &l2);
    TAP_OK(routes_agree(&req, &o1, &l1, &o2, &l2, max_diff),
           "plain scalar path = BLAS/vector path (%.3g)", max_diff(&o1, &o2));
    req.scalar = 0;
    kv_tensor_release(&o2); kv_tensor_release(&l2);

    /* chunked prefill against the cache = the same rows of the full prefill:
     * the last 20 queries against all L keys, bottom-right causal */
    int64_t c0 = L - 20, sq2[4] = {B, H, 20, D};
    struct kv_tensor q2;
    kv_tensor_init(&q2);
    kv_tensor_alloc(&q2, KV_F32, 4, sq2, 0, NULL);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            memcpy((float *)q2.data + ((b * H + h) * 20) * D,
                   (float *)q.data + ((b * H + h) * L + c0) * D, (size_t)(20 * D) * 4);
    req.q = &q2;
    run_req(&req, &o2, &l2);
    double md = 0.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < 20; i++) {
                for (int64_t d = 0; d < D; d++) {
                    double x = fabs(((float *)o2.data)[((b * H + h) * 20 + i) * D + d] -
                                    ((float *)o1.data)[((b * H + h) * L + c0 + i) * D + d]);
                    if (x > md)
                        md = x;
                }
            }
    double tol_o, tol_l;
    req_bounds(&req, &l2, &tol_o, &tol_l, NULL, NULL);
    TAP_OK(md <= 2 * tol_o, "chunked prefill against the cache = rows of the full prefill (%.3g)", md);
    kv_tensor_release(&o2); kv_tensor_release(&l2);

    /* paged = contiguous: scatter K/V into a shuffled paged cache */
    int64_t page = 8, npages_req = (L + page - 1) / page, nblocks = B * npages_req + 3;
    int64_t cs[5] = {2, nblocks, page, Hk, D};
    struct kv_tensor cache;
    kv_tensor_init(&cache);
    kv_tensor_alloc(&cache, KV_F32, 5, cs, 0, NULL);
    int64_t *bt = malloc(sizeof(int64_t) * (size_t)(B * npages_req));
    for (int64_t i = 0; i < B * npages_req; i++)
        bt[i] = (i * 7 + 2) % nblocks;     /* 7 is coprime with nblocks here */
    float *cd = cache.data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < L; j++) {
            int64_t blk = bt[b * npages_req + j / page], off = j % page;
            for (int64_t h = 0; h < Hk; h++)
                for (int64_t d = 0; d < D; d++) {
                    size_t src = (size_t)(((b * Hk + h) * L + j) * D + d);
                    cd[((blk * page + off) * Hk + h) * D + d] = ((float *)k.data)[src];
                    cd[(((nblocks + blk) * page + off) * Hk + h) * D + d] = ((float *)v.data)[src];
                }
        }
    int64_t seq[2] = {L, L};
    req.q = &q2; req.k = NULL; req.v = NULL;
    req.kv_cache = &cache; req.block_table = bt; req.bt_rows = (size_t)B;
    req.bt_cols = (size_t)npages_req; req.seq_lens = seq; req.n_seq_lens = 2;
    struct kv_tensor o4, l4;
    run_req(&req, &o4, &l4);
    req.q = &q2; req.k = &k; req.v = &v; req.kv_cache = NULL; req.block_table = NULL;
    req.seq_lens = NULL; req.n_seq_lens = 0;
    run_req(&req, &o2, &l2);
    TAP_OK(routes_agree(&req, &o2, &l2, &o4, &l4, max_diff),
           "paged cache = contiguous keys (%.3g)", max_diff(&o2, &o4));
    kv_tensor_release(&o2); kv_tensor_release(&l2);
    kv_tensor_release(&o4); kv_tensor_release(&l4);

    /* paged bf16 decode (thd, one query per request, GQA 4) vs reference */
    {
        int64_t Hq = 8, dq[3] = {B, Hq, D};
        struct kv_tensor qd = tensor_f32(3, dq), cb, od, ld;
        kv_tensor_init(&cb);
        kv_tensor_alloc(&cb, KV_BF16, 5, cs, 0, NULL);
        for (size_t i = 0; i < kv_tensor_numel(&cache); i++)
            ((uint16_t *)cb.data)[i] = kv_f32_to_bf16(cd[i]);
        int64_t seq2[2] = {L, 41};
        memset(&req, 0, sizeof req);
        req.layout = KV_ATTN_THD; req.q = &qd; req.out_dtype = KV_F32;
        req.kv_cache = &cb; req.block_table = bt; req.bt_rows = (size_t)B;
        req.bt_cols = (size_t)npages_req; req.seq_lens = seq2; req.n_seq_lens = 2;
        req.causal = 1;
        run_req(&req, &od, &ld);
        /* reference from the bf16-rounded contiguous keys */
        int lq[2] = {1, 1}, lk[2] = {(int)L, 41};
        double *qq = malloc(sizeof(double) * (size_t)(B * Hq * D));
        double *kk = malloc(sizeof(double) * (size_t)(B * Hk * L * D));
        double *vv = malloc(sizeof(double) * (size_t)(B * Hk * L * D));
        for (int64_t i = 0; i < B * Hq * D; i++)
            qq[i] = ((float *)qd.data)[i];
        for (int64_t i = 0; i < B * Hk * L * D; i++) {
            kk[i] = kv_bf16_to_f32(kv_f32_to_bf16(((float *)k.data)[i]));
            vv[i] = kv_bf16_to_f32(kv_f32_to_bf16(((float *)v.data)[i]));
        }
        struct ref r = {0};
        r.B = (int)B; r.Hq = (int)Hq; r.Hkv = (int)Hk; r.D = (int)D; r.Dv = (int)D;
        r.LQ = 1; r.LK = (int)L; r.lq = lq; r.lk = lk; r.q = qq; r.k = kk; r.v = vv;
        r.scale = 1.0 / sqrt((double)D); r.causal = 1;
        r.out = calloc((size_t)(B * Hq * D), sizeof(double));
        r.lse = calloc((size_t)(B * Hq), sizeof(double));
        reference(&r);
        double w = -1;
        int good = od.data && cmp_bhsd(&r, &od, &ld, 1.0, &w);
        TAP_OK(good,
               "paged bf16 decode, GQA 4, unequal seq_lens: within the bound (worst %.3g of it)", w);
        free(qq); free(kk); free(vv); free(r.out); free(r.lse);
        kv_tensor_release(&qd); kv_tensor_release(&cb);
        kv_tensor_release(&od); kv_tensor_release(&ld);
    }
    free(bt);
    kv_tensor_release(&cache);
    kv_tensor_release(&q2);
    kv_tensor_release(&mask); kv_tensor_release(&bm);
    kv_tensor_release(&o1); kv_tensor_release(&l1);
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
}

/* thd varlen = per-request bhsd, and against the reference */
static void test_thd(void)
{
    int B = 3, H = 6, Hk = 3, D = 20;
    int lq[3] = {13, 1, 40}, lk[3] = {29, 17, 40};
    int LQ = 40, LK = 40;
    double *q = rand_array((size_t)B * H * LQ * D, 2.0);
    double *k = rand_array((size_t)B * Hk * LK * D, 2.0);
    double *v = rand_array((size_t)B * Hk * LK * D, 1.0);
    struct kv_tensor tq, tk, tv, o, l;
    to_thd(&tq, KV_F32, q, B, H, LQ, D, lq);
    to_thd(&tk, KV_F32, k, B, Hk, LK, D, lk);
    to_thd(&tv, KV_F32, v, B, Hk, LK, D, lk);
    int64_t ql[3] = {13, 1, 40}, kl[3] = {29, 17, 40};
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.layout = KV_ATTN_THD; req.q = &tq; req.k = &tk; req.v = &tv;
    req.q_lens = ql; req.n_q_lens = 3; req.kv_lens = kl; req.n_kv_lens = 3;
    req.causal = 1; req.out_dtype = KV_F32; req.tile_q = 8; req.tile_k = 16;
    run_req(&req, &o, &l);
    struct ref r = {0};
    r.B = B; r.Hq = H; r.Hkv = Hk; r.D = D; r.Dv = D; r.LQ = LQ; r.LK = LK;
    r.lq = lq; r.lk = lk; r.q = q; r.k = k; r.v = v; r.scale = 1.0 / sqrt(D); r.causal = 1;
    r.out = calloc((size_t)B * H * LQ * D, sizeof(double));
    r.lse = calloc((size_t)B * H * LQ, sizeof(double));
    reference(&r);
    /* unpack thd result into canonical order for comparison */
    double err = 0.0, lerr = 0.0;
    int64_t tok = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < lq[b]; i++, tok++)
            for (int h = 0; h < H; h++) {
                size_t row = (size_t)(b * H + h) * LQ + i;
                for (int d = 0; d < D; d++) {
                    double x = fabs(((float *)o.data)[(tok * H + h) * D + d] - r.out[row * D + d]);
                    if (!(x <= err))
                        err = x;
                }
                double x = fabs(((float *)l.data)[tok * H + h] - r.lse[row]);
                if (!(x <= lerr))
                    lerr = x;
            }
    double tol_o, tol_l;
    req_bounds(&req, &l, &tol_o, &tol_l, NULL, NULL);
    TAP_OK(err <= tol_o && lerr <= tol_l, "thd varlen causal, GQA 2, q<kv and q=1 rows: "
           "within the bound (%.3g, lse %.3g)", err, lerr);

    /* request 0 alone in bhsd gives the same rows */
    struct kv_tensor bq, bk, bv, bo, bl;
    int64_t s0q[4] = {1, H, 13, D}, s0k[4] = {1, Hk, 29, D};
    kv_tensor_init(&bq); kv_tensor_init(&bk); kv_tensor_init(&bv);
    kv_tensor_alloc(&bq, KV_F32, 4, s0q, 0, NULL);
    kv_tensor_alloc(&bk, KV_F32, 4, s0k, 0, NULL);
    kv_tensor_alloc(&bv, KV_F32, 4, s0k, 0, NULL);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < 13; i++)
            for (int d = 0; d < D; d++)
                ((float *)bq.data)[(h * 13 + i) * D + d] = ((float *)tq.data)[(i * H + h) * D + d];
    for (int h = 0; h < Hk; h++)
        for (int j = 0; j < 29; j++)
            for (int d = 0; d < D; d++) {
                ((float *)bk.data)[(h * 29 + j) * D + d] = ((float *)tk.data)[(j * Hk + h) * D + d];
                ((float *)bv.data)[(h * 29 + j) * D + d] = ((float *)tv.data)[(j * Hk + h) * D + d];
            }
    memset(&req, 0, sizeof req);
    req.q = &bq; req.k = &bk; req.v = &bv; req.causal = 1; req.out_dtype = KV_F32;
    run_req(&req, &bo, &bl);
    double md = 0.0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < 13; i++)
            for (int d = 0; d < D; d++) {
                double x = fabs(((float *)bo.data)[(h * 13 + i) * D + d] -
                                ((float *)o.data)[(i * H + h) * D + d]);
                if (x > md)
                    md = x;
            }
    double tol_o2, tol_l2;
    req_bounds(&req, &bl, &tol_o2, &tol_l2, NULL, NULL);
    TAP_OK(md <= 2 * tol_o2, "thd varlen request = the same request alone in bhsd (%.3g)", md);
    kv_tensor_release(&bq); kv_tensor_release(&bk); kv_tensor_release(&bv);
    kv_tensor_release(&bo); kv_tensor_release(&bl);
    kv_tensor_release(&tq); kv_tensor_release(&tk); kv_tensor_release(&tv);
    kv_tensor_release(&o); kv_tensor_release(&l);
    free(q); free(k); free(v); free(r.out); free(r.lse);
}

/* ---- merge ------------------------------------------------------------- */

static void test_merge(void)
{
    /* spec C.4: one query, scaled scores [0.5, -1, 2, 0.25] (D = 1, q = 1,
     * scale 1), values [[1,0],[0,1],[2,2],[-1,3]] */
    float kk[4] = {0.5f, -1.0f, 2.0f, 0.25f}, vv[8] = {1, 0, 0, 1, 2, 2, -1, 3};
    int64_t sq[4] = {1, 1, 1, 1}, sk[4] = {1, 1, 2, 1}, sv[4] = {1, 1, 2, 2};
    int64_t skall[4] = {1, 1, 4, 1}, svall[4] = {1, 1, 4, 2};
    struct kv_tensor q, k[2], v[2], ka, va, o[2], l[2], oa, la, om, lm;
    kv_tensor_init(&q);
    kv_tensor_alloc(&q, KV_F32, 4, sq, 0, NULL);
    ((float *)q.data)[0] = 1.0f;
    struct kv_attn_req req;
    for (int p = 0; p < 2; p++) {
        kv_tensor_init(&k[p]); kv_tensor_init(&v[p]);
        kv_tensor_alloc(&k[p], KV_F32, 4, sk, 0, NULL);
        kv_tensor_alloc(&v[p], KV_F32, 4, sv, 0, NULL);
        memcpy(k[p].data, kk + 2 * p, 8);
        memcpy(v[p].data, vv + 4 * p, 16);
        memset(&req, 0, sizeof req);
        req.q = &q; req.k = &k[p]; req.v = &v[p]; req.has_scale = 1; req.scale = 1.0;
        req.out_dtype = KV_F32;
        run_req(&req, &o[p], &l[p]);
    }
    const float *o0 = o[0].data, *o1 = o[1].data;
    TAP_OK(fabsf(o0[0] - 0.817574f) < 1e-6 && fabsf(o0[1] - 0.182426f) < 1e-6 &&
           fabsf(((float *)l[0].data)[0] - 0.701413f) < 1e-6,
           "C.4 part {0,1}: out [0.817574, 0.182426], lse 0.701413");
    TAP_OK(fabsf(o1[0] - 1.555858f) < 1e-6 && fabsf(o1[1] - 2.148047f) < 1e-6 &&
           fabsf(((float *)l[1].data)[0] - 2.160224f) < 1e-6,
           "C.4 part {2,3}: out [1.555858, 2.148047], lse 2.160224");
    struct kv_err e = {{0}};
    kv_tensor_init(&om); kv_tensor_init(&lm);
    int rc = kv_attn_merge(o, l, 2, KV_NDTYPES, &om, &lm, &e);
    const float *m = om.data;
    TAP_OK(rc == 0 && fabsf(m[0] - 1.416582f) < 1e-6 && fabsf(m[1] - 1.777234f) < 1e-6 &&
           fabsf(((float *)lm.data)[0] - 2.369279f) < 1e-6,
           "C.4 merged: out [1.416582, 1.777234], lse 2.369279 %s", e.msg);
    kv_tensor_init(&ka); kv_tensor_init(&va);
    kv_tensor_alloc(&ka, KV_F32, 4, skall, 0, NULL);
    kv_tensor_alloc(&va, KV_F32, 4, svall, 0, NULL);
    memcpy(ka.data, kk, 16);
    memcpy(va.data, vv, 32);
    memset(&req, 0, sizeof req);
    req.q = &q; req.k = &ka; req.v = &va; req.has_scale = 1; req.scale = 1.0;
    req.out_dtype = KV_F32;
    run_req(&req, &oa, &la);
    TAP_OK(merge_agree(&req, 2, &om, &lm, &oa, &la),
           "C.4 merged = attention over all four keys");

    /* -inf parts: an empty part contributes nothing; all empty gives 0, -inf;
     * +inf is taken as -inf */
    struct kv_tensor pl[2], po[2], mo, ml;
    int64_t s1[2] = {3, 2}, s0[1] = {3};
    for (int p = 0; p < 2; p++) {
        kv_tensor_init(&po[p]); kv_tensor_init(&pl[p]);
        kv_tensor_alloc(&po[p], KV_F32, 2, s1, 0, NULL);
        kv_tensor_alloc(&pl[p], KV_F32, 1, s0, 0, NULL);
    }
    float *a = po[0].data, *b = po[1].data, *la0 = pl[0].data, *lb = pl[1].data;
    a[0] = 1; a[1] = 2; b[0] = 5; b[1] = 6; la0[0] = 0.3f; lb[0] = -INFINITY;
    a[2] = 0; a[3] = 0; b[2] = 0; b[3] = 0; la0[1] = -INFINITY; lb[1] = INFINITY;
    a[4] = 1; a[5] = 1; b[4] = 3; b[5] = 3; la0[2] = 0.0f; lb[2] = 0.0f;
    kv_tensor_init(&mo); kv_tensor_init(&ml);
    rc = kv_attn_merge(po, pl, 2, KV_F32, &mo, &ml, &e);
    float *x = mo.data, *y = ml.data;
    TAP_OK(rc == 0 && x[0] == 1 && x[1] == 2 && y[0] == 0.3f,
           "merge: a -inf part contributes nothing");
    TAP_OK(rc == 0 && x[2] == 0 && x[3] == 0 && y[1] == -INFINITY,
           "merge: all parts -inf (+inf read as -inf) gives 0 and -inf");
    TAP_OK(rc == 0 && fabsf(x[4] - 2.0f) < 1e-7 && fabsf(y[2] - logf(2.0f)) < 1e-7,
           "merge: equal lse averages the outputs");
    for (int p = 0; p < 2; p++) {
        kv_tensor_release(&po[p]); kv_tensor_release(&pl[p]);
        kv_tensor_release(&k[p]); kv_tensor_release(&v[p]);
        kv_tensor_release(&o[p]); kv_tensor_release(&l[p]);
    }
    kv_tensor_release(&mo); kv_tensor_release(&ml);
    kv_tensor_release(&q); kv_tensor_release(&ka); kv_tensor_release(&va);
    kv_tensor_release(&oa); kv_tensor_release(&la);
    kv_tensor_release(&om); kv_tensor_release(&lm);
}

/* Seed 003 PCP head/tail: one 8-token prefill (padded, P = 2, c = 2); rank k
 * computes its head chunk k and tail chunk 2P-1-k, each as "nomask" (full
 * attention over all earlier chunks) + "mask" (causal within the chunk),
 * merged by LSE; reassembled they equal full causal attention. */
static void test_pcp(void)
{
    int64_t H = 2, D = 16, S = 8, P = 2, c = 2;
    int64_t sf[4] = {1, H, S, D};
    struct kv_tensor q = tensor_f32(4, sf), k = tensor_f32(4, sf), v = tensor_f32(4, sf);
    struct kv_tensor of, lf;
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.q = &q; req.k = &k; req.v = &v; req.causal = 1; req.out_dtype = KV_F32;
    run_req(&req, &of, &lf);
    double worst = 0.0, pcp_tol, pcp_V, pcp_lse, bo_w, bl_w;
    /* two parts merged against the whole: as merge_agree, for outputs and
     * LSEs alike (the larger of the two tolerances) */
    req_bounds(&req, &lf, &bo_w, &bl_w, &pcp_V, &pcp_lse);
    pcp_tol = 2 * bo_w + 2 * pcp_V * bl_w + kv_bound_merge_out(2, pcp_V) + 2 * bl_w +
              kv_bound_merge_lse(2, pcp_lse);
    int nparts_ok = 1;
    for (int64_t rank = 0; rank < P; rank++) {
        int64_t chunks[2] = {rank, 2 * P - 1 - rank};
        for (int half = 0; half < 2; half++) {
            int64_t ch = chunks[half], q0 = ch * c;
            /* slice helpers: rows [a, a+n) of every head */
            struct kv_tensor sq, snk, snv, smk, smv, po[2], pl[2], mo, ml;
            int64_t s_q[4] = {1, H, c, D}, s_n[4] = {1, H, q0, D};
            kv_tensor_init(&sq); kv_tensor_init(&snk); kv_tensor_init(&snv);
            kv_tensor_init(&smk); kv_tensor_init(&smv);
            kv_tensor_alloc(&sq, KV_F32, 4, s_q, 0, NULL);
            kv_tensor_alloc(&smk, KV_F32, 4, s_q, 0, NULL);
            kv_tensor_alloc(&smv, KV_F32, 4, s_q, 0, NULL);
            kv_tensor_alloc(&snk, KV_F32, 4, s_n, 0, NULL);
            kv_tensor_alloc(&snv, KV_F32, 4, s_n, 0, NULL);
            for (int64_t h = 0; h < H; h++) {
                memcpy((float *)sq.data + h * c * D, (float *)q.data + (h * S + q0) * D, (size_t)(c * D) * 4);
                memcpy((float *)smk.data + h * c * D, (float *)k.data + (h * S + q0) * D, (size_t)(c * D) * 4);
                memcpy((float *)smv.data + h * c * D, (float *)v.data + (h * S + q0) * D, (size_t)(c * D) * 4);
                if (q0) {
                    memcpy((float *)snk.data + h * q0 * D, (float *)k.data + h * S * D, (size_t)(q0 * D) * 4);
                    memcpy((float *)snv.data + h * q0 * D, (float *)v.data + h * S * D, (size_t)(q0 * D) * 4);
                }
            }
            memset(&req, 0, sizeof req);
            req.q = &sq; req.out_dtype = KV_F32;
            req.k = &smk; req.v = &smv; req.causal = 1;
            run_req(&req, &po[0], &pl[0]);
            req.k = &snk; req.v = &snv; req.causal = 0;   /* empty for rank 0's head */
            run_req(&req, &po[1], &pl[1]);
            struct kv_err e = {{0}};
            kv_tensor_init(&mo); kv_tensor_init(&ml);
            if (kv_attn_merge(po, pl, 2, KV_F32, &mo, &ml, &e))
                nparts_ok = 0;
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < c; i++) {
                    for (int64_t d = 0; d < D; d++) {
                        double x = fabs(((float *)mo.data)[(h * c + i) * D + d] -
                                        ((float *)of.data)[(h * S + q0 + i) * D + d]);
                        if (!(x <= worst))
                            worst = x;
                    }
                    double x = fabs(((float *)ml.data)[h * c + i] -
                                    ((float *)lf.data)[h * S + q0 + i]);
                    if (!(x <= worst))
                        worst = x;
                }
            kv_tensor_release(&sq); kv_tensor_release(&snk); kv_tensor_release(&snv);
            kv_tensor_release(&smk); kv_tensor_release(&smv);
            kv_tensor_release(&po[0]); kv_tensor_release(&pl[0]);
            kv_tensor_release(&po[1]); kv_tensor_release(&pl[1]);
            kv_tensor_release(&mo); kv_tensor_release(&ml);
        }
    }
    TAP_OK(nparts_ok && worst <= pcp_tol,
           "seed-003 PCP head/tail (P=2, 8 tokens): nomask + mask merged = full causal (%.3g)",
           worst);
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
    kv_tensor_release(&of); kv_tensor_release(&lf);
}

/* split keys into 3 parts + merge = whole (bhsd, non-causal, GQA) */
static void test_split_merge(void)
{
    int64_t B = 1, H = 4, Hk = 1, Lq = 9, D = 8, cuts[4] = {0, 10, 11, 35};
    int64_t sq[4] = {B, H, Lq, D}, sk[4] = {B, Hk, 35, D};
    struct kv_tensor q = tensor_f32(4, sq), k = tensor_f32(4, sk), v = tensor_f32(4, sk);
    struct kv_tensor of, lf, po[3], pl[3], mo, ml;
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.q = &q; req.k = &k; req.v = &v; req.out_dtype = KV_F32;
    run_req(&req, &of, &lf);
    for (int p = 0; p < 3; p++) {
        int64_t n = cuts[p + 1] - cuts[p], s[4] = {B, Hk, n, D};
        struct kv_tensor pk, pv;
        kv_tensor_init(&pk); kv_tensor_init(&pv);
        kv_tensor_alloc(&pk, KV_F32, 4, s, 0, NULL);
        kv_tensor_alloc(&pv, KV_F32, 4, s, 0, NULL);
        memcpy(pk.data, (float *)k.data + cuts[p] * D, (size_t)(n * D) * 4);
        memcpy(pv.data, (float *)v.data + cuts[p] * D, (size_t)(n * D) * 4);
        req.k = &pk; req.v = &pv;
        run_req(&req, &po[p], &pl[p]);
        kv_tensor_release(&pk); kv_tensor_release(&pv);
    }
    struct kv_err e = {{0}};
    kv_tensor_init(&mo); kv_tensor_init(&ml);
    int rc = kv_attn_merge(po, pl, 3, KV_NDTYPES, &mo, &ml, &e);
    req.k = &k; req.v = &v;
    TAP_OK(rc == 0 && merge_agree(&req, 3, &mo, &ml, &of, &lf),
           "keys split in 3 parts + merge = whole (%.3g)", max_diff(&mo, &of));
    for (int p = 0; p < 3; p++) {
        kv_tensor_release(&po[p]); kv_tensor_release(&pl[p]);
    }
    kv_tensor_release(&mo); kv_tensor_release(&ml);
    kv_tensor_release(&of); kv_tensor_release(&lf);
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
}

/* ---- bad input and special values ------------------------------------- */

static void test_bad(void)
{
    int64_t sq[4] = {1, 3, 4, 8}, sk[4] = {1, 2, 5, 8}, sk2[4] = {1, 1, 5, 6};
    struct kv_tensor q = tensor_f32(4, sq), k = tensor_f32(4, sk), k2 = tensor_f32(4, sk2);
    struct kv_tensor o, l;
    struct kv_err e = {{0}};
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.q = &q; req.k = &k; req.v = &k; req.out_dtype = KV_F32;
    kv_tensor_init(&o); kv_tensor_init(&l);
    int rc = kv_attn_run(&req, &o, &l, &e);
    TAP_OK(rc == -1 && strstr(e.msg, "(1, 3, 4, 8)") && strstr(e.msg, "(1, 2, 5, 8)") &&
           o.data == NULL, "Hq not a multiple of Hkv names both shapes: %s", e.msg);
    req.k = &k2; req.v = &k2;
    rc = kv_attn_run(&req, &o, &l, &e);
    TAP_OK(rc == -1 && strstr(e.msg, "(1, 3, 4, 8)") && strstr(e.msg, "(1, 1, 5, 6)"),
           "head size mismatch names both shapes: %s", e.msg);
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&k2);

    /* NaN propagates to its row only; empty rows (Lq > Lk causal) are 0/-inf */
    int64_t s2[4] = {1, 1, 4, 4}, s3[4] = {1, 1, 2, 4};
    struct kv_tensor qq = tensor_f32(4, s2), kk = tensor_f32(4, s3), vv = tensor_f32(4, s3);
    ((float *)qq.data)[3 * 4] = NAN;        /* row 3 */
    memset(&req, 0, sizeof req);
    req.q = &qq; req.k = &kk; req.v = &vv; req.causal = 1; req.out_dtype = KV_F32;
    rc = kv_attn_run(&req, &o, &l, &e);
    float *of = o.data, *lf = l.data;
    TAP_OK(rc == 0 && of[0] == 0 && of[4] == 0 && lf[0] == -INFINITY && lf[1] == -INFINITY,
           "rows with nothing to attend give 0 and lse -inf");
    TAP_OK(rc == 0 && isnan(of[12]) && isnan(lf[3]) && isfinite(of[8]) && isfinite(lf[2]),
           "NaN in a query row propagates to that row only");
    kv_tensor_release(&o); kv_tensor_release(&l);
    ((float *)vv.data)[0] = INFINITY;
    rc = kv_attn_run(&req, &o, &l, &e);
    of = o.data;
    lf = l.data;
    TAP_OK(rc == 0 && !isfinite(of[8]) && isfinite(lf[2]), "inf in V makes the rows that see it non-finite");
    kv_tensor_release(&o); kv_tensor_release(&l);
    kv_tensor_release(&qq); kv_tensor_release(&kk); kv_tensor_release(&vv);
}

/* The AVX2 and scalar paths (what older CPUs run) agree with the float64
 * reference too, and their exp is as exact. */
static void test_lower_isa(void)
{
    for (int lv = 1; lv >= 0; lv--) {
        if (kv_attn_limit_isa(lv) != lv)
            continue;          /* this CPU lacks the level */
        const struct bcase c[2] = {
            {"causal GQA", 1, 4, 2, 45, 70, 32, 32, 1, 0, 0, 0, 0, KV_F32, 16, 24, 0, 0},
            {"decode bf16 mask", 2, 8, 2, 1, 300, 64, 64, 0, 0, 1, 2, 0, KV_BF16, 0, 0, 0, 0},
        };
        for (int i = 0; i < 2; i++) {
            struct bcase x = c[i];
            x.name = lv ? (i ? "AVX2 level: decode bf16 mask" : "AVX2 level: causal GQA")
                        : (i ? "scalar level: decode bf16 mask" : "scalar level: causal GQA");
            run_bcase(&x, 1.0);
        }
        enum { N = 4003 };   /* not a multiple of the vector width */
        static float x[N], ref[N];
        double worst = 0;
        for (int i = 0; i < N; i++) {
            x[i] = -90.0f + 180.0f * (float)i / N;
            ref[i] = expf(x[i]);
        }
        kv_attn_exp_n(x, N);
        for (int i = 0; i < N; i++) {
            if (ref[i] < 1.2e-38f || isinf(ref[i]))
                continue;
            double u = fabs((double)x[i] - ref[i]) / (nextafterf(ref[i], INFINITY) - ref[i]);
            if (u > worst)
                worst = u;
        }
        TAP_OK(worst <= 2.0, "%s level: exp within 2 ulp (%.2f)", lv ? "AVX2" : "scalar", worst);
    }
    kv_attn_limit_isa(-1);
}

static void test_exp(void)
{
    /* vector exp vs expf over [-100, 90] plus specials */
    enum { N = 20000 };
    static float x[N + 8], ref[N + 8];
    for (int i = 0; i < N; i++)
        x[i] = -100.0f + 190.0f * (float)i / N;
    x[N] = -INFINITY; x[N + 1] = INFINITY; x[N + 2] = NAN; x[N + 3] = 0.0f;
    x[N + 4] = -87.0f; x[N + 5] = 88.7f; x[N + 6] = 1e-8f; x[N + 7] = -1e-8f;
    for (int i = 0; i < N + 8; i++)
        ref[i] = expf(x[i]);
    kv_attn_exp_n(x, N + 8);
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < N + 8; i++) {
        if (isnan(ref[i])) {
            bad += !isnan(x[i]);
            continue;
        }
        if (ref[i] < 1.2e-38f) {      /* below FLT_MIN: flushed to 0 is fine */
            bad += !(x[i] <= 1.2e-38f && x[i] >= 0);
            continue;
        }
        if (isinf(ref[i])) {
            bad += x[i] != ref[i];
            continue;
        }
        double u = fabs((double)x[i] - ref[i]) / (nextafterf(ref[i], INFINITY) - ref[i]);
        if (u > worst)
            worst = u;
    }
    TAP_OK(bad == 0 && worst <= 2.0, "vector exp within 2 ulp of expf, specials kept "
           "(worst %.2f ulp, %d bad)", worst, bad);
}

/* decode mode (split over key chunks, merged in chunk order): bit-identical
 * for any thread count, and equal to the tiled path within rounding */
static void test_decode_threads(void)
{
    int64_t sq[4] = {2, 8, 1, 64}, sk[4] = {2, 2, 10000, 64};
    struct kv_tensor q = tensor_f32(4, sq), k = tensor_f32(4, sk), v = tensor_f32(4, sk);
    struct kv_tensor o1, l1, o2, l2, o3, l3;
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.q = &q; req.k = &k; req.v = &v; req.out_dtype = KV_F32; req.causal = 1;
    req.n_threads = 1;
    run_req(&req, &o1, &l1);
    req.n_threads = 3;
    run_req(&req, &o2, &l2);
    TAP_OK(o1.data && o2.data && memcmp(o1.data, o2.data, o1.nbytes) == 0 &&
           memcmp(l1.data, l2.data, l1.nbytes) == 0, "decode mode: bit-identical for -j 1 and 3");
    req.tile_q = 8;                    /* forces the tiled path */
    run_req(&req, &o3, &l3);
    TAP_OK(routes_agree(&req, &o1, &l1, &o3, &l3, max_diff),
           "decode mode = tiled path (%.3g)", max_diff(&o1, &o3));
    kv_tensor_release(&o3); kv_tensor_release(&l3);
    req.tile_q = 0;
    req.generic = 1;                   /* BLAS tiles, no AVX-512 kernels */
    run_req(&req, &o3, &l3);
    TAP_OK(routes_agree(&req, &o1, &l1, &o3, &l3, max_diff),
           "decode kernels = generic BLAS path (%.3g)", max_diff(&o1, &o3));
    kv_tensor_release(&o1); kv_tensor_release(&l1); kv_tensor_release(&o2);
    kv_tensor_release(&l2); kv_tensor_release(&o3); kv_tensor_release(&l3);
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
}

/* bhsd with --seq-lens: each batch entry uses a prefix of the keys
 * (FlashAttention's seqused_k); causal alignment follows the used length */
static void test_seq_lens(void)
{
    int B = 2, H = 4, Hk = 2, LQ = 6, LK = 40, D = 16;
    int lq[2] = {6, 6}, lk[2] = {40, 17};
    double *q = rand_array((size_t)B * H * LQ * D, 2.0);
    double *k = rand_array((size_t)B * Hk * LK * D, 2.0);
    double *v = rand_array((size_t)B * Hk * LK * D, 1.0);
    struct kv_tensor tq, tk, tv, o, l;
    to_bhsd(&tq, KV_F32, q, B, H, LQ, D);
    to_bhsd(&tk, KV_F32, k, B, Hk, LK, D);
    to_bhsd(&tv, KV_F32, v, B, Hk, LK, D);
    int64_t sl[2] = {40, 17};
    struct kv_attn_req req;
    memset(&req, 0, sizeof req);
    req.q = &tq; req.k = &tk; req.v = &tv; req.causal = 1; req.out_dtype = KV_F32;
    req.seq_lens = sl; req.n_seq_lens = 2;
    run_req(&req, &o, &l);
    struct ref r = {0};
    r.B = B; r.Hq = H; r.Hkv = Hk; r.D = D; r.Dv = D; r.LQ = LQ; r.LK = LK;
    r.lq = lq; r.lk = lk; r.q = q; r.k = k; r.v = v; r.scale = 1.0 / sqrt(D); r.causal = 1;
    r.out = calloc((size_t)B * H * LQ * D, sizeof(double));
    r.lse = calloc((size_t)B * H * LQ, sizeof(double));
    reference(&r);
    double w = -1;
    int good = o.data && cmp_bhsd(&r, &o, &l, 1.0, &w);
    TAP_OK(good, "bhsd --seq-lens 40,17 of 40 keys: within the bound (worst %.3g of it)", w);
    int64_t bad[2] = {41, 3};
    struct kv_err e = {{0}};
    struct kv_tensor o2, l2;
    kv_tensor_init(&o2); kv_tensor_init(&l2);
    req.seq_lens = bad;
    TAP_OK(kv_attn_run(&req, &o2, &l2, &e) == -1 && strstr(e.msg, "41"),
           "a seq_len beyond the keys is refused: %s", e.msg);
    kv_tensor_release(&tq); kv_tensor_release(&tk); kv_tensor_release(&tv);
    kv_tensor_release(&o); kv_tensor_release(&l);
    free(q); free(k); free(v); free(r.out); free(r.lse);
}

/* Random geometries through every route (odd lengths, GQA/MQA, Dv != D,
 * every mask kind and shape, block masks, f16/bf16 inputs, tile sizes,
 * threads, the scalar path), each against the float64 reference. */
static void test_random_geometries(void)
{
    static const int dims[] = {4, 8, 12, 16, 24, 40, 64, 128};
    static const int tqs[] = {0, 2, 5, 8, 16}, tks[] = {0, 8, 24, 40, 64};
    static const int bss[] = {4, 8, 12, 16};
    static const enum kv_dtype dts[] = {KV_F32, KV_F32, KV_F16, KV_BF16};
    static const char *const routes[] = {"full", "causal", "window", "mask", "mask + causal",
                                         "block mask + causal", "block mask"};
    char name[200];
    uint64_t saved = rng_state;   /* later tests draw what they drew before */
    rng_state = 0x2545f4914f6cdd1dull;
    for (int n = 0; n < 24; n++) {
        struct bcase c;
        memset(&c, 0, sizeof c);
#define PICK(a) (a)[(int)((urand() + 1.0) / 2.0 * (double)(sizeof(a) / sizeof((a)[0])))]
#define RANGE(lo, hi) ((lo) + (int)((urand() + 1.0) / 2.0 * (double)((hi) - (lo) + 1)))
        c.B = RANGE(1, 2);
        c.Hkv = RANGE(1, 3);
        c.Hq = c.Hkv * RANGE(1, 4);
        c.LQ = RANGE(1, 45);
        c.LK = RANGE(1, 70);
        c.D = PICK(dims);
        c.Dv = urand() < 0 ? c.D : PICK(dims);
        c.dt = PICK(dts);
        c.tq = PICK(tqs);
        c.tk = PICK(tks);
        c.scalar = urand() < -0.75;
        c.threads = RANGE(0, 3);
        int route = RANGE(0, 6);
        if (route == 1 || route == 4 || route == 5)
            c.causal = 1;
        if (route == 2)
            c.window = RANGE(1, c.LK);
        if (route == 3 || route == 4) {
            c.mkind = RANGE(1, 4);
            c.mdims = RANGE(2, 4);
        }
        if (route >= 5)
            c.bsparse = PICK(bss);
#undef PICK
#undef RANGE
        snprintf(name, sizeof name, "random %d: %s, B %d Hq %d Hkv %d Lq %d Lk %d D %d Dv %d, %s%s",
                 n, routes[route], c.B, c.Hq, c.Hkv, c.LQ, c.LK, c.D, c.Dv,
                 kv_dtype_name(c.dt), c.scalar ? ", scalar" : "");
        c.name = name;
        run_bcase(&c, 1.0);
    }
    rng_state = saved;
}

int main(void)
{
    const struct bcase cases[] = {
        /* name, B, Hq, Hkv, LQ, LK, D, Dv, causal, window, mkind, mdims, bs, dt, tq, tk, scalar, thr */
        {"full, MHA, odd sizes", 2, 3, 3, 37, 53, 24, 24, 0, 0, 0, 0, 0, KV_F32, 0, 0, 0, 0},
        {"full, GQA 4, Dv != D", 1, 8, 2, 19, 70, 16, 40, 0, 0, 0, 0, 0, KV_F32, 0, 0, 0, 0},
        {"causal square, small tiles", 2, 4, 2, 70, 70, 32, 32, 1, 0, 0, 0, 0, KV_F32, 16, 24, 0, 2},
        {"causal Lq < Lk (chunked prefill)", 1, 4, 1, 23, 100, 32, 32, 1, 0, 0, 0, 0, KV_F32, 8, 32, 0, 0},
        {"causal Lq > Lk (empty rows)", 1, 2, 1, 30, 11, 8, 8, 1, 0, 0, 0, 0, KV_F32, 0, 0, 0, 0},
        {"window 7", 1, 4, 2, 50, 60, 16, 16, 0, 7, 0, 0, 0, KV_F32, 16, 16, 0, 0},
        {"MQA, causal, D 128", 1, 6, 1, 65, 65, 128, 128, 1, 0, 0, 0, 0, KV_F32, 0, 0, 0, 0},
        {"bool mask [Lq, Lk]", 2, 4, 2, 33, 41, 16, 16, 0, 0, 1, 2, 0, KV_F32, 8, 16, 0, 0},
        {"additive f32 mask [Hq, Lq, Lk]", 1, 4, 4, 29, 31, 16, 16, 0, 0, 2, 3, 0, KV_F32, 0, 0, 0, 0},
        {"keep u8 mask [B, 1, Lq, Lk] + causal", 2, 2, 1, 40, 40, 16, 16, 1, 0, 3, 4, 0, KV_F32, 16, 16, 0, 0},
        {"i32 mask (1 and 7 masked)", 1, 2, 2, 17, 17, 8, 8, 0, 0, 4, 2, 0, KV_F32, 0, 0, 0, 0},
        {"block mask bs 16 + causal", 2, 4, 2, 90, 90, 32, 32, 1, 0, 0, 0, 16, KV_F32, 0, 0, 0, 0},
        {"block mask bs 8, Lq < Lk, no causal", 1, 2, 1, 21, 45, 8, 8, 0, 0, 0, 0, 8, KV_F32, 0, 0, 0, 0},
        {"block mask bs 16, key tiles of 8 (blocks split)", 1, 2, 2, 50, 70, 16, 16, 1, 0, 0, 0, 16, KV_F32, 16, 8, 0, 0},
        {"block mask bs 12, key tiles of 40, query tiles of 5", 1, 2, 1, 50, 70, 16, 16, 1, 0, 1, 2, 12, KV_F32, 5, 40, 0, 0},
        {"block mask bs 16, f16 (gathered kept blocks converted)", 1, 4, 2, 80, 130, 32, 32, 1, 0, 0, 0, 16, KV_F16, 0, 0, 0, 0},
        {"block mask bs 8, window 30, key tiles of 64", 1, 2, 1, 60, 90, 16, 16, 0, 30, 0, 0, 8, KV_F32, 0, 64, 0, 2},
        {"block mask bs 8, no causal, scalar", 2, 2, 2, 40, 100, 16, 16, 0, 0, 0, 0, 8, KV_F32, 0, 0, 1, 0},
        {"f16 inputs, causal", 1, 4, 2, 45, 45, 64, 64, 1, 0, 0, 0, 0, KV_F16, 0, 0, 0, 0},
        {"bf16 inputs, GQA", 1, 4, 1, 12, 300, 64, 64, 1, 0, 0, 0, 0, KV_BF16, 0, 0, 0, 0},
        {"scalar path, causal + bool mask", 1, 4, 2, 33, 47, 16, 16, 1, 0, 1, 2, 0, KV_F32, 8, 8, 1, 0},
        {"decode f32, GQA 3 (stacked rows 3)", 2, 6, 2, 1, 300, 32, 32, 1, 0, 0, 0, 0, KV_F32, 0, 0, 0, 0},
        {"decode f16, MHA, bool mask", 2, 2, 2, 1, 100, 64, 48, 0, 0, 1, 2, 0, KV_F16, 0, 0, 0, 0},
        {"decode bf16, window 9", 1, 8, 1, 1, 77, 16, 16, 0, 9, 0, 0, 0, KV_BF16, 0, 0, 0, 0},
        {"tiny query tiles (M = 2 and 6), window", 1, 4, 2, 19, 40, 32, 32, 0, 6, 0, 0, 0, KV_F32, 2, 8, 0, 0},
        {"decode over 3 key chunks, GQA 4, bf16", 1, 8, 2, 1, 9000, 64, 64, 1, 0, 0, 0, 0, KV_BF16, 0, 0, 0, 0},
        {"decode, window 100 (empty leading chunks), f16", 2, 4, 4, 1, 8500, 32, 32, 0, 100, 0, 0, 0, KV_F16, 0, 0, 0, 3},
        {"speculative decode (3 queries), mask [B,1,Lq,Lk], f32", 2, 6, 3, 3, 5000, 32, 32, 1, 0, 3, 4, 0, KV_F32, 0, 0, 0, 0},
        {"one thread, long keys", 1, 2, 2, 5, 1000, 32, 32, 0, 0, 0, 0, 0, KV_F32, 0, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_bcase(&cases[i], 1.0);
    test_random_geometries();
    test_routes();
    test_block_stacking();
    test_sparse_kernels();
    test_decode_threads();
    test_seq_lens();
    test_thd();
    test_merge();
    test_pcp();
    test_split_merge();
    test_bad();
    test_exp();
    test_lower_isa();
    return tap_done();
}
