/* attn_fp8_decode.c - paged attention over an FP8 cache (kv_fp8) on
 * random shapes (GQA groups, head sizes, block sizes, several requests of
 * 1-4 queries, causal or not), bytes of every kind (subnormals, the
 * largest values, infinities and NaN bytes in some cases), scales from
 * tiny to large, at every vector level and 1-3 threads.  Where the decode
 * kernels read the bytes (AVX2 or AVX-512: levels 1 and 2,
 * kv_attn_last_stats), the output and LSE must lie within the bound
 * kvattn(1) states for FP8 of float64 attention over the bytes' exact
 * values times the scales; elsewhere (the cache dequantized to f32 first)
 * they must equal, bit for bit, those of the same request over the f32
 * cache kv_fp8_dequantize makes (V at v_scale 2^-v_exp and the output
 * times 2^v_exp, kv_attn_fp8_v_exp, where v_scale is large), and lie
 * within the same bound.  Every route gives the same bytes at any
 * thread count; NaN and infinity reach the same elements as over the f32
 * cache.  A query large enough to overflow the kernels' unscaled sums is
 * run over the dequantized cache. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "attn/attn.h"
#include "attn/bound.h"
#include "core/fp8.h"
#include "core/isa.h"
#include "tap.h"

static uint32_t rng = 2463534242u;
static uint32_t next(void)
{
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    return rng;
}
static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint32_t)(hi - lo + 1)); }
static float unif(void) { return (float)(next() >> 8) / 16777216.0f * 2.0f - 1.0f; }

/* bytes of format t: kind 0 values near 1 (the usual cache), 1 every
 * finite byte (subnormals and the largest), 2 every byte (NaN, inf) */
static uint8_t byte_of(int kind, enum kv_fp8 t)
{
    if (kind == 0)
        return kv_fp8_from_f32(unif() * 3.0f, t);
    for (;;) {
        uint8_t b = (uint8_t)next();
        if (kind == 2 || isfinite(kv_fp8_to_f32(b, t)))
            return b;
    }
}

/* a and b bit for bit, but for the sign and payload of an f32 NaN where
 * both hold one: a sum of NaNs of both signs takes the sign of the operand
 * the compiler puts first (it commutes additions), which may differ
 * between the copies of one kernel for two dtypes. */
static int same(const struct kv_tensor *a, const struct kv_tensor *b)
{
    if (a->dtype != b->dtype || a->nbytes != b->nbytes)
        return 0;
    if (a->dtype != KV_F32)
        return memcmp(a->data, b->data, a->nbytes) == 0;
    const float *x = a->data, *y = b->data;
    for (size_t i = 0; i < a->nbytes / sizeof(float); i++)
        if (memcmp(&x[i], &y[i], sizeof(float)) != 0 && !(isnan(x[i]) && isnan(y[i])))
            return 0;
    return 1;
}

/* The request of a case, with its cache bytes and scales. */
struct fcase {
    struct kv_attn_req r;
    const uint8_t *c8;
    enum kv_fp8 t;
    int64_t Hkv, G, D, bs, B, maxblk, nblk;
    const int64_t *bt, *ql, *sl;
    float ks, vs;
    int vx;            /* the f32 cache's V at vs 2^-vx (kv_attn_fp8_v_exp) */
};

/* Float64 attention over the exact values of case c into o [Tq, Hq, D]
 * and l [Tq, Hq], with each row's bounds (kvattn(1), ACCURACY: the
 * decode kernels over FP8 bytes take head dim d + 1 in W and one more
 * u V on the output) in bo and bl. */
static void reference(const struct fcase *c, const float *q, double *o, double *l, double *bo,
                      double *bl)
{
    const int64_t Hq = c->Hkv * c->G, D = c->D, bs = c->bs;
    const size_t half = (size_t)(c->nblk * bs * c->Hkv * D);
    const double sc = (float)(1.0 / sqrt((double)D));
    double val[256];
    for (int x = 0; x < 256; x++)
        val[x] = kv_fp8_to_f32((uint8_t)x, c->t);
    int64_t row = 0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t i = 0; i < c->ql[b]; i++, row++) {
            const int64_t n = c->r.causal ? i + c->sl[b] - c->ql[b] + 1 : c->sl[b];
            for (int64_t h = 0; h < Hq; h++) {
                const int64_t g = h / c->G;
                const float *qr = q + (row * Hq + h) * D;
                double *s = malloc((size_t)n * sizeof *s), m = -INFINITY, A = 0, V = 0, sum = 0;
                double *acc = calloc((size_t)D, sizeof *acc);
                for (int64_t j = 0; j < n; j++) {
                    size_t at = (size_t)(((c->bt[b * c->maxblk + j / bs] * bs + j % bs) * c->Hkv + g) * D);
                    double dot = 0, ab = 0;
                    for (int64_t d = 0; d < D; d++) {
                        double k = val[c->c8[at + d]] * c->ks, v = val[c->c8[half + at + d]] * c->vs;
                        dot += qr[d] * k;
                        ab += fabs(qr[d] * k);
                        V = fabs(v) > V ? fabs(v) : V;
                    }
                    s[j] = sc * dot;
                    A = sc * ab > A ? sc * ab : A;
                    m = s[j] > m ? s[j] : m;
                }
                for (int64_t j = 0; j < n; j++) {
                    size_t at = (size_t)(((c->bt[b * c->maxblk + j / bs] * bs + j % bs) * c->Hkv + g) * D);
                    double w = exp(s[j] - m);
                    sum += w;
                    for (int64_t d = 0; d < D; d++)
                        acc[d] += w * val[c->c8[half + at + d]] * c->vs;
                }
                for (int64_t d = 0; d < D; d++)
                    o[(row * Hq + h) * D + d] = acc[d] / sum;
                l[row * Hq + h] = m + log(sum);
                bo[row * Hq + h] = kv_bound_attn_out(n, D + 1, A, V, KV_F32) + 1.01 * KV_BOUND_U * V;
                bl[row * Hq + h] = kv_bound_attn_lse(n, D + 1, A, fabs(m) + log((double)n), 0);
                free(s);
                free(acc);
            }
        }
}

/* Whether NaN and infinity sit at the same elements of a and b (f32). */
static int same_class(const struct kv_tensor *a, const struct kv_tensor *b)
{
    const float *x = a->data, *y = b->data;
    for (size_t i = 0; i < a->nbytes / sizeof(float); i++)
        if (isnan(x[i]) != isnan(y[i]) || isinf(x[i]) != isinf(y[i]))
            return 0;
    return 1;
}

/* Whether every element of x (f32, n) lies within its bound b of ref. */
static int within(const struct kv_tensor *x, const double *ref, const double *b, size_t n,
                  int64_t per, double *worst)
{
    const float *v = x->data;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)v[i] - ref[i]), bd = b[i / (size_t)per];
        if (!(err <= bd))
            return 0;
        if (err / bd > *worst)
            *worst = err / bd;
    }
    return 1;
}

/* Case c at every vector level and 1-3 threads against the f32 cache cf
 * and, where every value of the cache is finite, the float64 reference. */
static void check_levels(struct fcase *c, struct kv_tensor *c8, struct kv_tensor *cf,
                         const struct kv_tensor *q, int levels, int kind)
{
    const int64_t Hq = c->Hkv * c->G, Tq = q->shape[0];
    const size_t no = (size_t)(Tq * Hq * c->D), nl = (size_t)(Tq * Hq);
    const float f = c->t == KV_FP8_E4M3 ? 256.0f : 1.0f, sc = (float)(1.0 / sqrt((double)c->D));
    struct kv_attn_req *r = &c->r;
    struct kv_err e = {{0}};
    /* finite: every value (byte times scale, in f32) is; over: a finite
     * byte's value times its scale is beyond f32, where no route keeps a
     * bound */
    int finite = 1, over = 0;
    const size_t nc = c8->nbytes;
    for (size_t i = 0; i < nc; i++) {
        float x = kv_fp8_to_f32(((const uint8_t *)c8->data)[i], c->t);
        int fin = isfinite(x * (i < nc / 2 ? c->ks : c->vs));
        finite &= fin;
        over |= !fin && isfinite(x);
    }
    double *o = malloc(no * sizeof *o), *l = malloc(nl * sizeof *l);
    double *bo = malloc(nl * sizeof *bo), *bl = malloc(nl * sizeof *bl);
    if (finite)
        reference(c, q->data, o, l, bo, bl);
    for (int lv = 0; lv < levels; lv++) {
        struct kv_tensor o1, l1;
        kv_tensor_init(&o1); kv_tensor_init(&l1);
        kv_attn_limit_isa(lv);
        for (int th = 1; th <= 3; th++) {
            struct kv_tensor o8, of, l8, lf;
            kv_tensor_init(&o8); kv_tensor_init(&of); kv_tensor_init(&l8); kv_tensor_init(&lf);
            r->n_threads = th;
            r->kv_cache = cf;
            r->kv_fp8 = 0;
            r->v_exp = c->vx;
            int rf = kv_attn_run(r, &of, &lf, &e);
            r->kv_cache = c8;
            r->kv_fp8 = (int)c->t + 1;
            r->v_exp = 0;
            r->k_scale = c->ks;
            r->v_scale = c->vs;
            int r8 = kv_attn_run(r, &o8, &l8, &e);
            struct kv_attn_stats st;
            kv_attn_last_stats(&st);
            int want_kernels = lv >= 1 && st.decode && isfinite(c->ks * f) &&
                               isnormal(sc * (c->ks * f)) && isnormal(c->vs * f);
            double wo = 0, wl = 0;
            int ok = rf == 0 && r8 == 0 && (!want_kernels || st.fp8_kernels);
            const char *what;
            if (ok && !st.fp8_kernels) {
                /* and within the same bound: kvattn(1) states it for both */
                what = finite ? "= the f32 cache's, within the bound of float64"
                              : "= the f32 cache's";
                ok = same(&o8, &of) && same(&l8, &lf) &&
                     (!finite || (within(&o8, o, bo, no, c->D, &wo) &&
                                  within(&l8, l, bl, nl, 1, &wl)));
            } else if (ok && finite) {
                what = "within the bound of float64";
                ok = within(&o8, o, bo, no, c->D, &wo) && within(&l8, l, bl, nl, 1, &wl);
            } else if (over) {
                what = "computed (values beyond f32: no bound)";
            } else {
                what = "NaN and inf where the f32 cache's";
                ok = ok && same_class(&o8, &of) && same_class(&l8, &lf);
            }
            /* the bytes of -j 1 at any -j */
            if (ok && th == 1) {
                o1 = o8; l1 = l8;
                kv_tensor_init(&o8); kv_tensor_init(&l8);
            } else if (ok) {
                ok = memcmp(o8.data, o1.data, o8.nbytes) == 0 &&
                     memcmp(l8.data, l1.data, l8.nbytes) == 0;
            }
            TAP_OK(ok, "%s bytes kind %d, Hq %lld Hkv %lld D %lld bs %lld, %lld requests, "
                   "scales %g %g, level %d, -j %d: output and LSE %s%s (worst %.3g, %.3g of "
                   "it)%s", kv_fp8_name(c->t), kind, (long long)Hq, (long long)c->Hkv,
                   (long long)c->D, (long long)c->bs, (long long)c->B, c->ks, c->vs, lv, th,
                   what, st.fp8_kernels ? ", read in the kernels" : "", wo, wl,
                   th > 1 ? ", the bytes of -j 1" : "");
            kv_tensor_release(&o8); kv_tensor_release(&of);
            kv_tensor_release(&l8); kv_tensor_release(&lf);
        }
        kv_tensor_release(&o1); kv_tensor_release(&l1);
    }
    free(o); free(l); free(bo); free(bl);
}

/* A query so large that its products with the unscaled values would
 * overflow f32 where those with the dequantized ones (small k_scale) do
 * not: the same finite output and LSE as over the f32 cache. */
static void big_query(int levels)
{
    for (int fi = 0; fi < 2; fi++) {
        const enum kv_fp8 t = fi ? KV_FP8_E5M2 : KV_FP8_E4M3;
        struct kv_tensor c8, cf, q;
        struct kv_err e = {{0}};
        kv_tensor_init(&c8); kv_tensor_init(&cf); kv_tensor_init(&q);
        int64_t csh[5] = { 2, 1, 4, 1, 16 }, qsh[3] = { 1, 1, 16 }, bt = 0, sl = 4, ql = 1;
        if (kv_tensor_alloc(&c8, KV_U8, 5, csh, 0, &e) || kv_tensor_alloc(&q, KV_F32, 3, qsh, 0, &e) ||
            kv_tensor_alloc(&cf, KV_F32, 5, csh, 0, &e))
            return;
        uint8_t *cb = c8.data;
        memset(cb, kv_fp8_from_f32(1.0f, t), c8.nbytes);
        cb[0] = fi ? 0x7b : 0x7e;   /* the largest finite value */
        memset(q.data, 0, q.nbytes);
        ((float *)q.data)[0] = fi ? 1e34f : 3e38f;
        const float ks = fi ? 1e-4f : 1e-3f;
        kv_fp8_dequantize(cb, c8.nbytes / 2, ks, t, cf.data);
        kv_fp8_dequantize(cb + c8.nbytes / 2, c8.nbytes / 2, 1.0f, t, (float *)cf.data + c8.nbytes / 2);
        struct kv_attn_req r;
        memset(&r, 0, sizeof r);
        r.layout = KV_ATTN_THD;
        r.q = &q; r.block_table = &bt; r.bt_rows = 1; r.bt_cols = 1;
        r.q_lens = &ql; r.n_q_lens = 1; r.seq_lens = &sl; r.n_seq_lens = 1;
        r.has_scale = 1; r.scale = 1e-30; r.out_dtype = KV_NDTYPES;
        for (int lv = 0; lv < levels; lv++) {
            struct kv_tensor o8, of, l8, lf;
            kv_tensor_init(&o8); kv_tensor_init(&of); kv_tensor_init(&l8); kv_tensor_init(&lf);
            kv_attn_limit_isa(lv);
            r.kv_cache = &cf; r.kv_fp8 = 0;
            int rf = kv_attn_run(&r, &of, &lf, &e);
            r.kv_cache = &c8; r.kv_fp8 = (int)t + 1; r.k_scale = ks; r.v_scale = 1.0f;
            int r8 = kv_attn_run(&r, &o8, &l8, &e);
            int ok = rf == 0 && r8 == 0;
            if (ok) {
                const float *o = o8.data;
                for (int64_t d = 0; d < 16; d++)
                    ok &= isfinite(o[d]);
                ok = ok && isfinite(*(const float *)l8.data) && same(&o8, &of) && same(&l8, &lf);
            }
            TAP_OK(ok, "%s, query 1 feature %g, k_scale %g, level %d: output and LSE finite, "
                   "those over the f32 cache", kv_fp8_name(t), (double)((float *)q.data)[0],
                   (double)ks, lv);
            kv_tensor_release(&o8); kv_tensor_release(&of);
            kv_tensor_release(&l8); kv_tensor_release(&lf);
        }
        kv_attn_limit_isa(-1);
        kv_tensor_release(&c8); kv_tensor_release(&cf); kv_tensor_release(&q);
    }
}

int main(void)
{
    const float scales[] = { 1.0f, 0.0173f, 3.5f, 1e-30f, 2e36f };
    int levels = kv_isa_has(KV_ISA_AVX512) ? 3 : kv_isa_has(KV_ISA_AVX2) ? 2 : 1;
    for (int cs = 0; cs < 24; cs++) {
        enum kv_fp8 t = cs % 2 ? KV_FP8_E5M2 : KV_FP8_E4M3;
        int kind = cs < 12 ? 0 : cs < 20 ? 1 : 2;
        int64_t Hkv = pick(1, 3), G = pick(1, 6), D = 16 * pick(1, 5), bs = pick(1, 20);
        int64_t B = pick(1, 3), Hq = Hkv * G;
        int64_t ql[3], sl[3], Tq = 0, maxblk = 0;
        for (int64_t b = 0; b < B; b++) {
            ql[b] = pick(1, 4);
            sl[b] = pick(ql[b], cs % 3 == 0 ? 9000 : 300);
            Tq += ql[b];
            if ((sl[b] + bs - 1) / bs > maxblk)
                maxblk = (sl[b] + bs - 1) / bs;
        }
        int64_t nblk = maxblk * B + 2;
        struct kv_tensor c8, cf, q;
        struct kv_err e = {{0}};
        kv_tensor_init(&c8); kv_tensor_init(&cf); kv_tensor_init(&q);
        int64_t csh[5] = { 2, nblk, bs, Hkv, D }, qsh[3] = { Tq, Hq, D };
        if (kv_tensor_alloc(&c8, KV_U8, 5, csh, 0, &e) || kv_tensor_alloc(&q, KV_F32, 3, qsh, 0, &e) ||
            kv_tensor_alloc(&cf, KV_F32, 5, csh, 0, &e))
            return 1;
        size_t n = c8.nbytes;
        for (size_t i = 0; i < n; i++)
            ((uint8_t *)c8.data)[i] = byte_of(kind, t);
        for (size_t i = 0; i < (size_t)(Tq * Hq * D); i++)
            ((float *)q.data)[i] = unif() * (kind ? 0.05f : 1.0f);
        float ks = scales[cs % 5], vs = scales[(cs + 2) % 5];
        /* V as the library dequantizes it: at vs 2^-vx, the output times 2^vx */
        const int vx = kv_attn_fp8_v_exp((int)t, vs, n / 2 / (size_t)D);
        kv_fp8_dequantize(c8.data, n / 2, ks, t, cf.data);
        kv_fp8_dequantize((uint8_t *)c8.data + n / 2, n / 2, ldexpf(vs, -vx), t,
                          (float *)cf.data + n / 2);
        /* a block table of distinct blocks in random order */
        int64_t *bt = malloc((size_t)(B * maxblk) * sizeof *bt), *perm = malloc((size_t)nblk * sizeof *perm);
        for (int64_t i = 0; i < nblk; i++)
            perm[i] = i;
        for (int64_t i = nblk - 1; i > 0; i--) {
            int64_t j = pick(0, i), x = perm[i];
            perm[i] = perm[j]; perm[j] = x;
        }
        memcpy(bt, perm, (size_t)(B * maxblk) * sizeof *bt);
        struct kv_attn_req r;
        memset(&r, 0, sizeof r);
        r.layout = KV_ATTN_THD;
        r.q = &q;
        r.block_table = bt;
        r.bt_rows = (size_t)B;
        r.bt_cols = (size_t)maxblk;
        r.q_lens = ql; r.n_q_lens = (size_t)B;
        r.seq_lens = sl; r.n_seq_lens = (size_t)B;
        r.causal = cs % 4 != 1;
        r.out_dtype = KV_NDTYPES;
        struct fcase c = { r, c8.data, t, Hkv, G, D, bs, B, maxblk, nblk, bt, ql, sl, ks, vs, vx };
        check_levels(&c, &c8, &cf, &q, levels, kind);
        kv_attn_limit_isa(-1);
        free(bt);
        free(perm);
        kv_tensor_release(&c8); kv_tensor_release(&cf); kv_tensor_release(&q);
    }
    /* the kernels did run somewhere when the CPU can */
    {
        struct kv_tensor c8, q, o;
        struct kv_err e = {{0}};
        kv_tensor_init(&c8); kv_tensor_init(&q); kv_tensor_init(&o);
        int64_t csh[5] = { 2, 4, 16, 2, 64 }, qsh[3] = { 1, 4, 64 }, sl = 60, ql = 1;
        int64_t bt[4] = { 3, 1, 0, 2 };
        if (kv_tensor_alloc(&c8, KV_U8, 5, csh, 0, &e) || kv_tensor_alloc(&q, KV_F32, 3, qsh, 0, &e))
            return 1;
        for (size_t i = 0; i < c8.nbytes; i++)
            ((uint8_t *)c8.data)[i] = byte_of(0, KV_FP8_E4M3);
        struct kv_attn_req r;
        memset(&r, 0, sizeof r);
        r.layout = KV_ATTN_THD;
        r.q = &q; r.kv_cache = &c8; r.block_table = bt; r.bt_rows = 1; r.bt_cols = 4;
        r.q_lens = &ql; r.n_q_lens = 1; r.seq_lens = &sl; r.n_seq_lens = 1;
        r.out_dtype = KV_NDTYPES; r.kv_fp8 = 1; r.k_scale = 0.5f; r.v_scale = 0.5f;
        int rc = kv_attn_run(&r, &o, NULL, &e);
        struct kv_attn_stats st;
        kv_attn_last_stats(&st);
        TAP_OK(rc == 0 && st.decode == kv_isa_has(KV_ISA_AVX2) &&
               st.fp8_kernels == kv_isa_has(KV_ISA_AVX2),
               "decode over FP8 reads the bytes in its kernels where the CPU has AVX2 or "
               "AVX-512 (%d)", st.fp8_kernels);
        r.k_scale = 0.0f;
        TAP_OK(kv_attn_run(&r, &o, NULL, &e) == -1 && strstr(e.msg, "scale"),
               "a zero scale is refused: %s", e.msg);
        r.k_scale = 1.0f;
        r.kv_cache = &q;
        TAP_OK(kv_attn_run(&r, &o, NULL, &e) == -1 && strstr(e.msg, "u8"),
               "an FP8 cache that is not u8 is refused: %s", e.msg);
        kv_tensor_release(&o);
        kv_tensor_release(&c8); kv_tensor_release(&q);
    }
    big_query(levels);
    return tap_done();
}
