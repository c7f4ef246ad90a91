/* attn_variants.c - the pieces of kvattn run's variants (attn.h,
 * Variants): the softcap's vector tanh against tanh in double at every
 * vector level, within the 8u the bound takes; the standard ALiBi slopes
 * against their definition; and attention with softcap, ALiBi and sinks
 * over more than one decode key chunk (4096 keys), where the chunks are
 * merged and the sink must be counted once, against a float64 reference,
 * within the bound and bit-identical for 1 and 3 threads. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bound.h"
#include "core/isa.h"
#include "tap.h"

#define U (1.0 / 16777216.0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static double nrand(void)
{
    double a = urand(), b = urand();
    return sqrt(-2.0 * log(a + 1e-300)) * cos(2.0 * M_PI * b);
}

/* The vector softcap at the capped level against C tanh(x / C) in double
 * from the same f32 x: |err| <= 2u|x| (x * f32(1/C)) + 8u C (tanh) + u C. */
static void softcap_sweep(int level)
{
    static const float caps[] = {0.05f, 1.0f, 30.0f, 5000.0f};
    enum { N = 20000 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    int got = kv_attn_limit_isa(level);
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        float C = caps[c];
        for (int i = 0; i < N; i++) {
            /* magnitudes from 1e-8 C to 1e3 C, both signs, and exact zeros */
            double m = C * pow(10.0, -8.0 + 11.0 * urand());
            x[i] = (float)(i % 97 == 0 ? 0.0 : (i & 1 ? m : -m));
        }
        memcpy(y, x, N * sizeof(float));
        kv_attn_softcap_n(y, N, C, 0);
        double worst = 0.0;
        int bad = -1;
        float inv = (float)(1.0 / (double)C);
        for (int i = 0; i < N; i++) {
            double want = (double)C * tanh((double)x[i] * (double)inv);
            double err = fabs((double)y[i] - want);
            double lim = 2.0 * U * fabs((double)x[i]) + 9.0 * U * C;
            if (err / lim > worst)
                worst = err / lim;
            if (err > lim && bad < 0)
                bad = i;
        }
        TAP_OK(bad < 0, "softcap C=%g at vector level %d: within 2u|x| + 9uC (worst %.3f of it)%s",
               (double)C, got, worst, bad < 0 ? "" : " -- exceeded");
    }
    float sp[4] = {INFINITY, -INFINITY, NAN, -0.0f};
    kv_attn_softcap_n(sp, 4, 2.0f, 0);
    TAP_OK(sp[0] == 2.0f && sp[1] == -2.0f && isnan(sp[2]) && sp[3] == 0.0f,
           "softcap at level %d: +-inf give +-C, NaN stays NaN, zero stays zero", got);
    free(x);
    free(y);
}

/* The standard slopes against 2^(-8k/P) and the odd powers of 2^(-4/P)
 * (each within 2^-20 relative of the real number: b is rounded to f32
 * before it is raised), powers of two exact. */
static void slopes(void)
{
    float s[64];
    kv_attn_alibi_slopes(8, s);
    int exact = 1;
    for (int k = 0; k < 8; k++)
        exact &= s[k] == ldexpf(1.0f, -(k + 1));
    TAP_OK(exact, "alibi slopes of 8 heads: 2^-1 .. 2^-8 exactly");
    kv_attn_alibi_slopes(12, s);
    exact = 1;
    for (int k = 0; k < 8; k++)
        exact &= s[k] == ldexpf(1.0f, -(k + 1));
    double rel = 0.0;
    for (int k = 0; k < 4; k++)
        rel = fmax(rel, fabs(s[8 + k] / exp2(-0.5 - (double)k) - 1.0));
    TAP_OK(exact && rel < ldexp(1.0, -20),
           "alibi slopes of 12 heads: 2^-1 .. 2^-8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5");
    int ok = 1;
    for (int H = 1; H <= 64; H++) {
        kv_attn_alibi_slopes(H, s);
        int P = 1;
        while (P * 2 <= H)
            P *= 2;
        for (int k = 0; k < H; k++) {
            double want = k < P ? exp2(-8.0 * (k + 1) / P) : exp2(-4.0 * (2 * (k - P) + 1) / P);
            if (!(fabs(s[k] / want - 1.0) < ldexp(1.0, -18)))
                ok = 0;
        }
    }
    TAP_OK(ok, "alibi slopes of 1..64 heads follow the rule");
}

/* One decode query over Lk keys (two key chunks) for Hq = 2 query heads
 * sharing one kv head, bhsd f32, causal, softcap, standard ALiBi and
 * sinks: the float64 reference and the run. */
static void decode_chunks(void)
{
    enum { Hq = 2, D = 32, LK = 5000 };
    float *q = malloc(Hq * D * sizeof(float)), *k = malloc((size_t)LK * D * sizeof(float));
    float *v = malloc((size_t)LK * D * sizeof(float)), sinks[Hq] = {9.0f, -3.0f};
    for (int i = 0; i < Hq * D; i++)
        q[i] = (float)(4.0 * nrand());
    for (int i = 0; i < LK * D; i++) {
        k[i] = (float)nrand();
        v[i] = (float)(100.0 * nrand());
    }
    int64_t qs[4] = {1, Hq, 1, D}, ks[4] = {1, 1, LK, D}, ss[1] = {Hq};
    struct kv_tensor tq = {0}, tk = {0}, tv = {0}, ts = {0};
    tq.dtype = tk.dtype = tv.dtype = ts.dtype = KV_F32;
    tq.ndim = tk.ndim = tv.ndim = 4;
    ts.ndim = 1;
    memcpy(tq.shape, qs, sizeof qs);
    memcpy(tk.shape, ks, sizeof ks);
    memcpy(tv.shape, ks, sizeof ks);
    memcpy(ts.shape, ss, sizeof ss);
    tq.data = q; tk.data = k; tv.data = v; ts.data = sinks;
    tq.nbytes = sizeof(float) * Hq * D;
    tk.nbytes = tv.nbytes = sizeof(float) * (size_t)LK * D;
    ts.nbytes = sizeof sinks;
    const double C = 20.0;
    float sl[Hq];
    kv_attn_alibi_slopes(Hq, sl);

    /* reference */
    double ref_o[Hq][D], ref_l[Hq], scale = (float)(1.0 / sqrt((double)D));
    double *s = malloc((size_t)LK * sizeof(double));
    for (int h = 0; h < Hq; h++) {
        double m = sinks[h];
        for (int j = 0; j < LK; j++) {
            double a = 0.0;
            for (int d = 0; d < D; d++)
                a += (double)q[h * D + d] * k[(size_t)j * D + d];
            a *= scale;
            a = C * tanh(a / C);
            a += (double)sl[h] * (double)(j - (LK - 1));
            s[j] = a;
            if (a > m)
                m = a;
        }
        double l = exp(sinks[h] - m);
        for (int d = 0; d < D; d++)
            ref_o[h][d] = 0.0;
        for (int j = 0; j < LK; j++) {
            double w = exp(s[j] - m);
            l += w;
            for (int d = 0; d < D; d++)
                ref_o[h][d] += w * v[(size_t)j * D + d];
        }
        for (int d = 0; d < D; d++)
            ref_o[h][d] /= l;
        ref_l[h] = m + log(l);
    }
    free(s);

    struct kv_tensor o1, l1, o3, l3;
    kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o3); kv_tensor_init(&l3);
    struct kv_attn_req r;
    struct kv_err e = {{0}};
    memset(&r, 0, sizeof r);
    r.q = &tq; r.k = &tk; r.v = &tv;
    r.causal = 1;
    r.softcap = C;
    r.alibi = 1;
    r.sinks = &ts;
    r.out_dtype = KV_NDTYPES;
    r.n_threads = 1;
    int rc = kv_attn_run(&r, &o1, &l1, &e);
    struct kv_attn_stats st;
    kv_attn_last_stats(&st);
    r.n_threads = 3;
    rc |= kv_attn_run(&r, &o3, &l3, &e);
    TAP_OK(rc == 0, "decode over %d keys with softcap, ALiBi and sinks runs (%s)", LK,
           rc ? e.msg : "ok");
    if (rc) {
        free(q); free(k); free(v);
        return;
    }
    /* the bound (kvattn bound's): A from the norms, |bias| <= slope * Lk */
    double qn = 0, kn = 0, V = 0;
    for (int h = 0; h < Hq; h++) {
        double a = 0;
        for (int d = 0; d < D; d++)
            a += (double)q[h * D + d] * q[h * D + d];
        if (sqrt(a) > qn)
            qn = sqrt(a);
    }
    for (int j = 0; j < LK; j++) {
        double a = 0;
        for (int d = 0; d < D; d++) {
            a += (double)k[(size_t)j * D + d] * k[(size_t)j * D + d];
            if (fabs(v[(size_t)j * D + d]) > V)
                V = fabs(v[(size_t)j * D + d]);
        }
        if (sqrt(a) > kn)
            kn = sqrt(a);
    }
    struct kv_bound_variants bv = {C, fmax(sl[0], sl[1]) * LK, 1, 9.0};
    double A = scale * qn * kn * (1 + 1e-12);
    double bo = kv_bound_attn_out_var(LK, D, A, V, KV_F32, &bv);
    double bl = kv_bound_attn_lse_var(LK, D, A, kv_bound_variants_lse_abs(LK, A, &bv), 0, &bv);
    double eo = 0, el = 0;
    const float *po = o1.data, *pl = l1.data;
    for (int h = 0; h < Hq; h++) {
        for (int d = 0; d < D; d++)
            if (fabs(po[h * D + d] - ref_o[h][d]) > eo)
                eo = fabs(po[h * D + d] - ref_o[h][d]);
        if (fabs(pl[h] - ref_l[h]) > el)
            el = fabs(pl[h] - ref_l[h]);
    }
    /* the decode kernels need AVX2 or AVX-512 (elsewhere the tiles take
     * the 5000 keys in key tiles, the sink likewise added once at the end) */
    TAP_OK(st.decode == kv_isa_has(KV_ISA_AVX2),
           "the decode kernels ran where the CPU has them (%s)",
           st.decode ? "two key chunks merged" : "key tiles");
    TAP_OK(eo <= bo, "output within the bound: %.3g <= %.3g", eo, bo);
    TAP_OK(el <= bl, "LSE (with the sink) within the bound: %.3g <= %.3g", el, bl);
    TAP_OK(o1.nbytes == o3.nbytes && memcmp(o1.data, o3.data, o1.nbytes) == 0 &&
           memcmp(l1.data, l3.data, l1.nbytes) == 0, "1 and 3 threads: the same bytes");
    kv_tensor_release(&o1); kv_tensor_release(&l1);
    kv_tensor_release(&o3); kv_tensor_release(&l3);
    free(q); free(k); free(v);
}

int main(void)
{
    for (int level = 0; level <= 2; level++)
        softcap_sweep(level);
    kv_attn_limit_isa(-1);
    slopes();
    decode_chunks();
    struct kv_bound_variants none = {0, 0, 0, 0};
    TAP_OK(kv_bound_attn_out_var(100, 64, 5.0, 2.0, KV_F32, &none) ==
           kv_bound_attn_out(100, 64, 5.0, 2.0, KV_F32) &&
           kv_bound_attn_out_var(100, 64, 5.0, 2.0, KV_F32, NULL) ==
           kv_bound_attn_out(100, 64, 5.0, 2.0, KV_F32),
           "with no variant the bound is the plain one");
    return tap_done();
}
