/* attn_fused.c - the shapes the fused kernels take (lib/attn/fused.c):
 * causal and windowed, Lq != Lk, GQA stacking, odd head dims and lengths
 * that are not multiples of a panel or a register tile, tiny and default
 * tiles, thd varlen, f16 keys and values, softcap, ALiBi and sinks, a NaN
 * key, each against a float64 reference written from the formulas within
 * the bound of kvattn(1) ACCURACY (lib/attn/bound.h), at the vector level
 * KVTOOLS_ISA allows (make check runs every level); and the output
 * bit-identical for 1 and 3 threads. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bound.h"
#include "core/half.h"
#include "tap.h"

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
    enum kv_dtype kvt;
    double softcap;
    int alibi, sinks;
    int64_t tile_q, tile_k;
    double amp;                 /* amplitude of q and k */
    int nan;                    /* a NaN in key 5 of kv head 0 */
};

/* Element (request b, head h, position t, feature d) of a canonical
 * double array [nreq][H][Lmax][W]. */
#define AT(a, H, L, W, b, h, t, d) (a)[(((size_t)(b) * (H) + (h)) * (L) + (t)) * (W) + (d)]

static void reference(const struct fcase *c, int Lq, int Lk, const double *q, const double *k,
                      const double *v, const float *slopes, const float *sinks, double scale,
                      double *out)
{
    int G = c->Hq / c->Hkv;
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
                        s += AT(q, c->Hq, Lq, c->D, b, h, i, d) * AT(k, c->Hkv, Lk, c->D, b, h / G, j, d);
                    s *= scale;
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
                        o += w[j] * AT(v, c->Hkv, Lk, c->Dv, b, h / G, j, d);
                    AT(out, c->Hq, Lq, c->Dv, b, h, i, d) = sum != 0.0 ? o / sum : 0.0;
                }
            }
    free(w);
}

/* Fill tensor t (dtype dt) from the canonical array a, bhsd or thd. */
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
                    if (dt == KV_F16) {
                        uint16_t u = kv_f32_to_f16((float)*x);
                        *x = kv_f16_to_f32(u);
                        ((uint16_t *)t->data)[at] = u;
                    } else {
                        *x = (float)*x;
                        ((float *)t->data)[at] = (float)*x;
                    }
                }
        t0 += lens[b];
    }
}

static double get_out(const struct fcase *c, const struct kv_tensor *o, int b, int h, int i,
                      int d, int Lq)
{
    if (!c->thd)
        return ((const float *)o->data)[(((size_t)b * c->Hq + h) * Lq + i) * c->Dv + d];
    int64_t t0 = 0;
    for (int r = 0; r < b; r++)
        t0 += c->lq[r];
    return ((const float *)o->data)[((size_t)(t0 + i) * c->Hq + h) * c->Dv + d];
}

static void run_case(const struct fcase *c)
{
    int Lq = 0, Lk = 0;
    for (int b = 0; b < c->nreq; b++) {
        Lq = c->lq[b] > Lq ? c->lq[b] : Lq;
        Lk = c->lk[b] > Lk ? c->lk[b] : Lk;
    }
    size_t nq = (size_t)c->nreq * c->Hq * Lq * c->D, nk = (size_t)c->nreq * c->Hkv * Lk * c->D;
    size_t nv = (size_t)c->nreq * c->Hkv * Lk * c->Dv, no = (size_t)c->nreq * c->Hq * Lq * c->Dv;
    double *q = calloc(nq, sizeof(double)), *k = calloc(nk, sizeof(double));
    double *v = calloc(nv, sizeof(double)), *ref = calloc(no, sizeof(double));
    for (size_t i = 0; i < nq; i++)
        q[i] = c->amp * urand();
    for (size_t i = 0; i < nk; i++)
        k[i] = c->amp * urand();
    for (size_t i = 0; i < nv; i++)
        v[i] = urand();
    if (c->nan)
        k[5 * c->D] = NAN;
    struct kv_tensor tq, tk, tv, ts, tsl, o1, l1, o3, l3;
    put_all(c, &tq, KV_F32, q, c->Hq, Lq, c->D, c->lq);
    put_all(c, &tk, c->kvt, k, c->Hkv, Lk, c->D, c->lk);
    put_all(c, &tv, c->kvt, v, c->Hkv, Lk, c->Dv, c->lk);
    float sinks[16], slopes[16];
    int64_t hq = c->Hq, ql[3], kl[3];
    struct kv_err e = {{0}};
    kv_tensor_init(&ts);
    kv_tensor_init(&tsl);
    if (kv_tensor_alloc(&ts, KV_F32, 1, &hq, 0, &e) || kv_tensor_alloc(&tsl, KV_F32, 1, &hq, 0, &e))
        abort();
    for (int h = 0; h < c->Hq; h++) {
        sinks[h] = (float)(2.0 * urand());
        slopes[h] = (float)(0.25 * (urand() + 1.0));
    }
    memcpy(ts.data, sinks, sizeof(float) * (size_t)c->Hq);
    memcpy(tsl.data, slopes, sizeof(float) * (size_t)c->Hq);
    struct kv_attn_req r;
    memset(&r, 0, sizeof r);
    r.layout = c->thd ? KV_ATTN_THD : KV_ATTN_BHSD;
    r.q = &tq;
    r.k = &tk;
    r.v = &tv;
    r.causal = c->causal;
    r.window = c->window;
    r.softcap = c->softcap;
    r.alibi_slopes = c->alibi ? &tsl : NULL;
    r.sinks = c->sinks ? &ts : NULL;
    r.out_dtype = KV_F32;
    r.tile_q = c->tile_q;
    r.tile_k = c->tile_k;
    for (int b = 0; b < c->nreq; b++) {
        ql[b] = c->lq[b];
        kl[b] = c->lk[b];
    }
    if (c->thd) {
        r.q_lens = ql;
        r.kv_lens = kl;
        r.n_q_lens = r.n_kv_lens = (size_t)c->nreq;
    }
    double scale = (float)(1.0 / sqrt((double)c->D));
    reference(c, Lq, Lk, q, k, v, c->alibi ? slopes : NULL, c->sinks ? sinks : NULL, scale, ref);

    kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o3); kv_tensor_init(&l3);
    r.n_threads = 1;
    int ok1 = kv_attn_run(&r, &o1, &l1, &e) == 0;
    r.n_threads = 3;
    int ok3 = kv_attn_run(&r, &o3, &l3, &e) == 0;
    TAP_OK(ok1 && ok3, "%s: runs (%s)", c->name, ok1 && ok3 ? "" : e.msg);
    if (!ok1 || !ok3)
        goto out;
    /* the bound's inputs: A by Cauchy-Schwarz, V, the variants' sizes */
    double qn = 0, kn = 0, V = 0, smax = 0;
    for (size_t i = 0; i < nq; i += (size_t)c->D) {
        double s = 0;
        for (int d = 0; d < c->D; d++)
            s += q[i + d] * q[i + d];
        qn = fmax(qn, sqrt(s));
    }
    for (size_t i = 0; i < nk; i += (size_t)c->D) {
        double s = 0;
        for (int d = 0; d < c->D; d++)
            s += k[i + d] * k[i + d];
        kn = fmax(kn, sqrt(s));
    }
    for (size_t i = 0; i < nv; i++)
        V = fmax(V, fabs(v[i]));
    for (int h = 0; h < c->Hq; h++)
        smax = fmax(smax, fabs(sinks[h]));
    struct kv_bound_variants bv = {c->softcap, c->alibi ? 0.5 * (Lq > Lk ? Lq : Lk) : 0.0,
                                   c->sinks, smax};
    double bound = kv_bound_attn_out_var(Lk, c->D, scale * qn * kn * 1.0001, V, KV_F32, &bv);
    double worst = 0;
    for (int b = 0; b < c->nreq; b++)
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < c->lq[b]; i++)
                for (int d = 0; d < c->Dv; d++) {
                    double x = get_out(c, &o1, b, h, i, d, Lq);
                    double y = AT(ref, c->Hq, Lq, c->Dv, b, h, i, d), err = fabs(x - y);
                    if (isnan(x) || isnan(y))
                        err = isnan(x) && isnan(y) ? 0.0 : INFINITY;
                    if (err > worst)
                        worst = err;
                }
    TAP_OK(worst <= bound, "%s: within the bound (%.3g <= %.3g)", c->name, worst, bound);
    TAP_OK(o1.nbytes == o3.nbytes && memcmp(o1.data, o3.data, o1.nbytes) == 0 &&
           memcmp(l1.data, l3.data, l1.nbytes) == 0,
           "%s: output and LSE bit-identical for 1 and 3 threads", c->name);
out:
    kv_tensor_release(&o1); kv_tensor_release(&l1);
    kv_tensor_release(&o3); kv_tensor_release(&l3);
    kv_tensor_release(&tq); kv_tensor_release(&tk); kv_tensor_release(&tv);
    kv_tensor_release(&ts); kv_tensor_release(&tsl);
    free(q); free(k); free(v); free(ref);
}

int main(void)
{
    static const struct fcase cases[] = {
        {"causal D 128", 0, 2, 2, 128, 128, 1, 0, 1, {200}, {200}, KV_F32, 0, 0, 0, 0, 0, 1.0, 0},
        {"causal GQA 4:1, Lq < Lk, odd dims", 0, 8, 2, 37, 45, 1, 0, 2, {70, 70}, {131, 131},
         KV_F32, 0, 0, 0, 0, 0, 1.0, 0},
        {"full, small tiles", 0, 3, 1, 24, 19, 0, 0, 1, {53}, {77}, KV_F32, 0, 0, 0, 20, 7, 1.0, 0},
        {"window 33, Lq > Lk", 0, 4, 4, 64, 64, 0, 33, 1, {150}, {120}, KV_F32, 0, 0, 0, 0, 0,
         1.0, 0},
        {"thd varlen causal, f16 K/V", 1, 4, 2, 40, 40, 1, 0, 3, {1, 90, 33}, {5, 90, 140},
         KV_F16, 0, 0, 0, 48, 16, 1.0, 0},
        {"softcap, ALiBi and sinks", 0, 4, 2, 32, 48, 1, 0, 1, {99}, {99}, KV_F32, 2.5, 1, 1,
         0, 0, 3.0, 0},
        {"sinks over an empty row, window 1", 1, 2, 1, 16, 16, 1, 1, 2, {40, 7}, {0, 30},
         KV_F32, 0, 0, 1, 0, 0, 1.0, 0},
        {"D 256, large scores", 0, 2, 1, 256, 256, 1, 0, 1, {80}, {80}, KV_F32, 0, 0, 0, 0, 0,
         4.0, 0},
        {"a NaN key: the rows that see it NaN, the others not", 0, 4, 2, 32, 32, 1, 0, 1, {70},
         {70}, KV_F32, 0, 0, 0, 0, 0, 1.0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    return tap_done();
}
