/* xattn_recall.c - kv_xattn_recall against a plain double-precision
 * reference written from its definition: the per-token recall (softmax mass
 * inside the kept blocks of the token's query-block row) and the block-mass
 * matrix (the mean over a query block's real tokens of the mass each key
 * block receives; every row sums to 1), for causal full and chunked
 * prefill, GQA, lengths that are not multiples of the block, non-causal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "attn/xattn.h"
#include "attn/bound.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static struct kv_tensor rand4(int64_t b, int64_t h, int64_t l, int64_t d)
{
    struct kv_tensor t;
    struct kv_err e;
    int64_t shape[4] = {b, h, l, d};
    kv_tensor_init(&t);
    kv_tensor_alloc(&t, KV_F32, 4, shape, 0, &e);
    float *p = t.data;
    for (size_t i = 0; i < kv_tensor_numel(&t); i++)
        p[i] = (float)((urand() * 2 - 1) * 1.5);
    return t;
}

/* One case: random Q, K and a random mask; compares the library with the
 * reference and checks that block-mass rows sum to 1. */
static void check_case(const char *title, int64_t nb, int64_t hq, int64_t hkv,
                       int64_t lq, int64_t lk, int64_t d, int64_t bs,
                       int causal)
{
    struct kv_tensor q = rand4(nb, hq, lq, d), k = rand4(nb, hkv, lk, d);
    struct kv_tensor rr, bm;
    struct kv_xattn_opts o;
    struct kv_err e;
    int64_t nqb = (lq + bs - 1) / bs, nkb = (lk + bs - 1) / bs;
    int64_t off = lk - lq, group = hq / hkv;
    size_t nmask = (size_t)(nb * hq * nqb * nkb);
    uint8_t *keep = malloc(nmask);
    double *p = malloc((size_t)lk * sizeof *p);
    double *mass = malloc((size_t)(nqb * nkb) * sizeof *mass);
    double worst_r = 0, worst_m = 0, worst_sum = 0;

    for (size_t i = 0; i < nmask; i++)
        keep[i] = urand() < 0.5;
    kv_tensor_init(&rr);
    kv_tensor_init(&bm);
    kv_xattn_opts_init(&o);
    o.block_size = bs;
    o.causal = causal;
    o.nthreads = 2;
    if (kv_xattn_recall(&q, &k, keep, &o, &rr, &bm, &e)) {
        TAP_OK(0, "%s: %s", title, e.msg);
        goto out;
    }
    const float *qf = q.data, *kf = k.data, *bmf = bm.data;
    const double *rrd = rr.data;
    double scale = 1.0 / sqrt((double)d);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t h = 0; h < hq; h++) {
            const float *kh = kf + (size_t)((b * hkv + h / group) * lk * d);
            const uint8_t *kp = keep + (size_t)((b * hq + h) * nqb * nkb);
            memset(mass, 0, (size_t)(nqb * nkb) * sizeof *mass);
            for (int64_t t = 0; t < lq; t++) {
                const float *qt = qf + (size_t)(((b * hq + h) * lq + t) * d);
                int64_t last = causal ? off + t : lk - 1, qb = t / bs;
                double mx = -INFINITY, z = 0, got = 0;
                for (int64_t j = 0; j <= last; j++) {
                    double s = 0;
                    for (int64_t x = 0; x < d; x++)
                        s += (double)qt[x] * kh[j * d + x];
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j <= last; j++)
                    z += p[j] = exp(p[j] - mx);
                for (int64_t j = 0; j <= last; j++) {
                    mass[qb * nkb + j / bs] += p[j] / z;
                    if (kp[qb * nkb + j / bs])
                        got += p[j] / z;
                }
                double r = rrd[(b * hq + h) * lq + t];
                worst_r = fmax(worst_r, fabs(r - got));
            }
            for (int64_t qb = 0; qb < nqb; qb++) {
                double n = (double)((qb + 1) * bs < lq ? bs : lq - qb * bs);
                double row = 0;
                for (int64_t kb = 0; kb < nkb; kb++) {
                    double m = bmf[((b * hq + h) * nqb + qb) * nkb + kb];
                    worst_m = fmax(worst_m, fabs(m - mass[qb * nkb + kb] / n));
                    row += m;
                }
                worst_sum = fmax(worst_sum, fabs(row - 1.0));
            }
        }
    TAP_OK(rr.ndim == 3 && rr.shape[2] == lq && bm.ndim == 4 &&
           bm.shape[2] == nqb && bm.shape[3] == nkb,
           "%s: shapes [B, Hq, Lq] and [B, Hq, nqb, nkb]", title);
    /* the recall bound of kvxattn(1) ACCURACY: a block mass is a recall
     * too (the mass of one block), averaged over the block's rows, and a
     * row of them sums n such masses */
    double A, V;
    kv_bound_scan(&q, &k, &k, scale, 0.0, &A, &V);
    double br = kv_bound_recall(lk, d, A);
    TAP_OK(worst_r <= br, "%s: per-token recall = reference (max error "
           "%.3g, bound %.3g)", title, worst_r, br);
    TAP_OK(worst_m <= br, "%s: block mass = reference (max error %.3g)",
           title, worst_m);
    TAP_OK(worst_sum <= br * (double)nkb, "%s: block-mass rows sum to 1 (max error %.3g)",
           title, worst_sum);
out:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&rr);
    kv_tensor_release(&bm);
    free(keep);
    free(p);
    free(mass);
}

int main(void)
{
    check_case("causal 100 x 100, GQA 4/2, block 32", 1, 4, 2, 100, 100, 16,
               32, 1);
    check_case("chunked 40 of 104, batch 2, block 32", 2, 2, 1, 40, 104, 8,
               32, 1);
    check_case("non-causal 70 x 90, block 16", 1, 2, 2, 70, 90, 8, 16, 0);
    return tap_done();
}
