/* fused_case.h - what the tests of the fused kernels (attn_fused.c: f32,
 * attn_fused_bf16.c: bf16) share: one case of requests (bhsd or thd),
 * random inputs stored as the case's dtypes (rounded in place so that the
 * float64 reference sees the values the program reads), the reference
 * written from the formulas (masks, softcap, ALiBi, sinks), the request,
 * and the inputs of the bound of kvattn(1) ACCURACY. */
#ifndef KV_TESTS_FUSED_CASE_H
#define KV_TESTS_FUSED_CASE_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bound.h"
#include "core/half.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double urand(void)   /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

struct fcase {
    const char *name;
    int thd, Hq, Hkv, D, Dv, causal, window;
    int nreq, lq[3], lk[3];     /* bhsd: one length pair for every request */
    enum kv_dtype kvt;          /* of K and V (KV_BF16: of Q too) */
    double softcap;
    int alibi, sinks;
    int64_t tile_q, tile_k;
    double amp;                 /* amplitude of q and k */
    int nan;                    /* a NaN in key 5 of kv head 0 */
};

/* Element (request b, head h, position t, feature d) of a canonical
 * double array [nreq][H][Lmax][W]. */
#define AT(a, H, L, W, b, h, t, d) (a)[(((size_t)(b) * (H) + (h)) * (L) + (t)) * (W) + (d)]

/* One case's inputs, reference and request (fcase_init; fcase_free). */
struct fdata {
    int Lq, Lk;
    size_t nq, nk, nv, no;
    double *q, *k, *v, *ref, *lse;      /* canonical arrays; ref, lse [nreq][Hq][Lq] */
    struct kv_tensor tq, tk, tv, ts, tsl;
    float sinks[16], slopes[16];
    int64_t ql[3], kl[3];
    double scale;
    struct kv_attn_req r;
};

static void reference(const struct fcase *c, struct fdata *f)
{
    int G = c->Hq / c->Hkv, Lq = f->Lq, Lk = f->Lk;
    const float *slopes = c->alibi ? f->slopes : NULL, *sinks = c->sinks ? f->sinks : NULL;
    double *w = malloc(sizeof(double) * (size_t)(Lk + 1));
    for (int b = 0; b < c->nreq; b++)
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < c->lq[b]; i++) {
                int pos = i + c->lk[b] - c->lq[b], lo = 0, hi = c->lk[b];
                if (c->causal || c->window)
                    hi = pos + 1 < hi ? (pos + 1 > 0 ? pos + 1 : 0) : hi;
                if (c->window)
                    lo = pos - c->window + 1 > 0 ? pos - c->window + 1 : 0;
                double mx = sinks ? sinks[h] : -INFINITY;
                for (int j = lo; j < hi; j++) {
                    double s = 0;
                    for (int d = 0; d < c->D; d++)
                        s += AT(f->q, c->Hq, Lq, c->D, b, h, i, d) *
                             AT(f->k, c->Hkv, Lk, c->D, b, h / G, j, d);
                    s *= f->scale;
                    if (c->softcap)
                        s = c->softcap * tanh(s / c->softcap);
                    if (slopes)
                        s += (double)slopes[h] * (j - pos);
                    w[j] = s;
                    mx = s > mx ? s : mx;
                }
                double sum = sinks ? exp(sinks[h] - mx) : 0.0;
                for (int j = lo; j < hi; j++)
                    sum += (w[j] = exp(w[j] - mx));
                for (int d = 0; d < c->Dv; d++) {
                    double o = 0;
                    for (int j = lo; j < hi; j++)
                        o += w[j] * AT(f->v, c->Hkv, Lk, c->Dv, b, h / G, j, d);
                    AT(f->ref, c->Hq, Lq, c->Dv, b, h, i, d) = sum != 0.0 ? o / sum : 0.0;
                }
                AT(f->lse, c->Hq, Lq, 1, b, h, i, 0) = sum != 0.0 ? mx + log(sum) : -INFINITY;
            }
    free(w);
}

/* Fill tensor t (dtype dt: f32, f16 or bf16) from the canonical array a,
 * rounding a in place, bhsd or thd. */
static void put_all(const struct fcase *c, struct kv_tensor *t, enum kv_dtype dt, double *a,
                    int H, int L, int W, const int *lens)
{
    int64_t tot = 0;
    for (int b = 0; b < c->nreq; b++)
        tot += lens[b];
    int64_t sh4[4] = {c->nreq, H, L, W}, sh3[3] = {tot, H, W};
    struct kv_err e = {{0}};
    kv_tensor_init(t);
    if (kv_tensor_alloc(t, dt, c->thd ? 3 : 4, c->thd ? sh3 : sh4, 0, &e))
        abort();
    int64_t t0 = 0;
    for (int b = 0; b < c->nreq; b++) {
        for (int h = 0; h < H; h++)
            for (int i = 0; i < lens[b]; i++)
                for (int d = 0; d < W; d++) {
                    double *x = &AT(a, H, L, W, b, h, i, d);
                    size_t at = c->thd ? ((size_t)(t0 + i) * H + h) * W + d
                                       : (((size_t)b * H + h) * L + i) * W + d;
                    if (dt == KV_F16 || dt == KV_BF16) {
                        uint16_t u = dt == KV_F16 ? kv_f32_to_f16((float)*x)
                                                  : kv_f32_to_bf16((float)*x);
                        *x = dt == KV_F16 ? kv_f16_to_f32(u) : kv_bf16_to_f32(u);
                        ((uint16_t *)t->data)[at] = u;
                    } else {
                        *x = (float)*x;
                        ((float *)t->data)[at] = (float)*x;
                    }
                }
        t0 += lens[b];
    }
}

/* Row (b, h, i) of an f32 result of W values a row (the output, or the
 * LSE with W = 1). */
static const float *get_row(const struct fcase *c, const struct kv_tensor *o, int W, int b,
                            int h, int i, int Lq)
{
    if (!c->thd)
        return (const float *)o->data + (((size_t)b * c->Hq + h) * Lq + i) * W;
    int64_t t0 = 0;
    for (int r = 0; r < b; r++)
        t0 += c->lq[r];
    return (const float *)o->data + ((size_t)(t0 + i) * c->Hq + h) * W;
}

/* The case's random inputs (Q f32 unless kvt is bf16), its reference and
 * its request f->r (f32 output, one thread). */
static void fcase_init(const struct fcase *c, struct fdata *f)
{
    memset(f, 0, sizeof *f);
    for (int b = 0; b < c->nreq; b++) {
        f->Lq = c->lq[b] > f->Lq ? c->lq[b] : f->Lq;
        f->Lk = c->lk[b] > f->Lk ? c->lk[b] : f->Lk;
    }
    f->nq = (size_t)c->nreq * c->Hq * f->Lq * c->D;
    f->nk = (size_t)c->nreq * c->Hkv * f->Lk * c->D;
    f->nv = (size_t)c->nreq * c->Hkv * f->Lk * c->Dv;
    f->no = (size_t)c->nreq * c->Hq * f->Lq * c->Dv;
    f->q = calloc(f->nq, sizeof(double));
    f->k = calloc(f->nk, sizeof(double));
    f->v = calloc(f->nv, sizeof(double));
    f->ref = calloc(f->no, sizeof(double));
    f->lse = calloc((size_t)c->nreq * c->Hq * f->Lq, sizeof(double));
    for (size_t i = 0; i < f->nq; i++)
        f->q[i] = c->amp * urand();
    for (size_t i = 0; i < f->nk; i++)
        f->k[i] = c->amp * urand();
    for (size_t i = 0; i < f->nv; i++)
        f->v[i] = urand();
    if (c->nan)
        f->k[5 * c->D] = NAN;
    put_all(c, &f->tq, c->kvt == KV_BF16 ? KV_BF16 : KV_F32, f->q, c->Hq, f->Lq, c->D, c->lq);
    put_all(c, &f->tk, c->kvt, f->k, c->Hkv, f->Lk, c->D, c->lk);
    put_all(c, &f->tv, c->kvt, f->v, c->Hkv, f->Lk, c->Dv, c->lk);
    int64_t hq = c->Hq;
    struct kv_err e = {{0}};
    kv_tensor_init(&f->ts);
    kv_tensor_init(&f->tsl);
    if (kv_tensor_alloc(&f->ts, KV_F32, 1, &hq, 0, &e) ||
        kv_tensor_alloc(&f->tsl, KV_F32, 1, &hq, 0, &e))
        abort();
    for (int h = 0; h < c->Hq; h++) {
        f->sinks[h] = (float)(2.0 * urand());
        f->slopes[h] = (float)(0.25 * (urand() + 1.0));
    }
    memcpy(f->ts.data, f->sinks, sizeof(float) * (size_t)c->Hq);
    memcpy(f->tsl.data, f->slopes, sizeof(float) * (size_t)c->Hq);
    struct kv_attn_req *r = &f->r;
    r->layout = c->thd ? KV_ATTN_THD : KV_ATTN_BHSD;
    r->q = &f->tq;
    r->k = &f->tk;
    r->v = &f->tv;
    r->causal = c->causal;
    r->window = c->window;
    r->softcap = c->softcap;
    r->alibi_slopes = c->alibi ? &f->tsl : NULL;
    r->sinks = c->sinks ? &f->ts : NULL;
    r->out_dtype = KV_F32;
    r->tile_q = c->tile_q;
    r->tile_k = c->tile_k;
    r->n_threads = 1;
    for (int b = 0; b < c->nreq; b++) {
        f->ql[b] = c->lq[b];
        f->kl[b] = c->lk[b];
    }
    if (c->thd) {
        r->q_lens = f->ql;
        r->kv_lens = f->kl;
        r->n_q_lens = r->n_kv_lens = (size_t)c->nreq;
    }
    f->scale = (float)(1.0 / sqrt((double)c->D));
    reference(c, f);
}

/* The bound's inputs: A by Cauchy-Schwarz (times 1.0001), V, the largest
 * |q| and |k| (for the bf16 bound's X) and the variants' sizes. */
static void fcase_bound_inputs(const struct fcase *c, const struct fdata *f, double *A,
                               double *V, double *qk_max, struct kv_bound_variants *bv)
{
    double qn = 0, kn = 0, m = 0, smax = 0;
    for (size_t i = 0; i < f->nq; i += (size_t)c->D) {
        double s = 0;
        for (int d = 0; d < c->D; d++) {
            s += f->q[i + d] * f->q[i + d];
            m = fmax(m, fabs(f->q[i + d]));
        }
        qn = fmax(qn, sqrt(s));
    }
    for (size_t i = 0; i < f->nk; i += (size_t)c->D) {
        double s = 0;
        for (int d = 0; d < c->D; d++) {
            s += f->k[i + d] * f->k[i + d];
            m = fmax(m, fabs(f->k[i + d]));
        }
        kn = fmax(kn, sqrt(s));
    }
    *V = 0;
    for (size_t i = 0; i < f->nv; i++)
        *V = fmax(*V, fabs(f->v[i]));
    for (int h = 0; h < c->Hq; h++)
        smax = fmax(smax, fabs(f->sinks[h]));
    *A = f->scale * qn * kn * 1.0001;
    *qk_max = m;
    bv->softcap = c->softcap;
    bv->bias_abs = c->alibi ? 0.5 * (f->Lq > f->Lk ? f->Lq : f->Lk) : 0.0;
    bv->has_sink = c->sinks;
    bv->sink_abs = smax;
}

/* |x - y|, 0 when both are NaN, infinite when one is. */
static double fcase_err(double x, double y)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y) ? 0.0 : INFINITY;
    return x == y ? 0.0 : fabs(x - y);
}

static void fcase_free(struct fdata *f)
{
    kv_tensor_release(&f->tq); kv_tensor_release(&f->tk); kv_tensor_release(&f->tv);
    kv_tensor_release(&f->ts); kv_tensor_release(&f->tsl);
    free(f->q); free(f->k); free(f->v); free(f->ref); free(f->lse);
}
#endif
