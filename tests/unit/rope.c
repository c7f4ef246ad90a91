/* rope.c - unit tests of lib/rope: frequencies and scalings, the delta
 * move against a long-double direct rotation (one rounding of the storage
 * dtype), SIMD == scalar, refusals, and the toy projection moved. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tap.h"
#include "core/kv.h"
#include "chunk/rope.h"
#include "chunk/toy.h"

static uint64_t rng_state = 0x1234567;

static double rnd(void)   /* [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1p-52 - 1.0;
}

static double load(enum kv_dtype dt, const void *p, size_t i)
{
    switch (dt) {
    case KV_BF16: return kv_bf16_to_f32_ref(((const uint16_t *)p)[i]);
    case KV_F16: return kv_f16_to_f32_ref(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Spacing of the storage dtype at magnitude |v|. */
static double ulp(enum kv_dtype dt, double v)
{
    int mant = dt == KV_BF16 ? 7 : dt == KV_F16 ? 10 : 23;
    int emin = dt == KV_BF16 ? -126 : dt == KV_F16 ? -14 : -126;
    int ex;
    frexp(fabs(v), &ex);
    ex -= 1;
    if (ex < emin)
        ex = emin;
    return ldexp(1.0, ex - mant);
}

/* Independent reference: rotate stored x (head_dim) by angle delta*theta
 * in long double, pairs chosen from the style. */
static void ref_rotate(const struct kv_rope *r, const double *freq,
                       int64_t delta, const double *x, double *y)
{
    int D = r->head_dim, rd = kv_rope_dim(r), half = rd / 2;
    for (int j = 0; j < D; j++)
        y[j] = x[j];
    for (int i = 0; i < half; i++) {
        long double a = (long double)delta * (long double)freq[i];
        long double c = cosl(a), s = sinl(a);
        int j0 = r->style == KV_ROPE_NEOX ? i : 2 * i;
        int j1 = r->style == KV_ROPE_NEOX ? i + half : 2 * i + 1;
        y[j0] = (double)(x[j0] * c - x[j1] * s);
        y[j1] = (double)(x[j1] * c + x[j0] * s);
    }
}

struct stats { size_t n, exact, bad; double worst; };

/* Move n_vec random stored vectors by delta, compare with ref_rotate. */
static void check_move(const struct kv_rope *r, enum kv_dtype dt,
                       int64_t delta, struct stats *st)
{
    int D = r->head_dim;
    size_t nv = 6, es = kv_dtype_size(dt);
    unsigned char *src = malloc(nv * D * es), *dst = malloc(nv * D * es);
    double *x = malloc(D * sizeof *x), *y = malloc(D * sizeof *y);
    double *freq = malloc((size_t)D * sizeof *freq);
    struct kv_err e;
    struct kv_rope_delta d;
    memset(&d, 0, sizeof d);
    if (kv_rope_inv_freq(r, freq, &e) < 0 ||
        kv_rope_delta_init(&d, r, delta, &e) < 0) {
        st->bad++;
        goto out;
    }
    for (size_t i = 0; i < nv * D; i++)
        kv_toy_store(dt, src, i, rnd() * 4.0);
    kv_rope_rotate(&d, dt, src, dst, nv);
    for (size_t v = 0; v < nv; v++) {
        for (int j = 0; j < D; j++)
            x[j] = load(dt, src, v * D + j);
        ref_rotate(r, freq, delta, x, y);
        for (int j = 0; j < D; j++) {
            double got = load(dt, dst, v * D + j);
            double want = y[j];
            unsigned char rne[4];
            kv_toy_store(dt, rne, 0, want);
            double round_want = load(dt, rne, 0);
            double err = fabs(got - want);
            /* one rounding, plus the f32 (or double) arithmetic error
             * and the double angle's error (|delta| * 2^-52 rad) */
            double eps = dt == KV_F32 ? 0x1p-53 : 0x1p-24;
            double arith = 2.0 * 4.0 * (4.0 * eps +
                                        fabs((double)delta) * 0x1p-52);
            double bound = 0.5 * ulp(dt, want) + arith;
            st->n++;
            if (got == round_want)
                st->exact++;
            if (!(err <= bound))
                st->bad++;
            if (err / ulp(dt, want) > st->worst)
                st->worst = err / ulp(dt, want);
        }
    }
out:
    kv_rope_delta_release(&d);
    free(src); free(dst); free(x); free(y); free(freq);
}

static void test_freq(void)
{
    struct kv_rope r;
    struct kv_err e;
    double f[64], g[64];
    char buf0[512], buf1[512];
    kv_rope_init(&r, 128);
    r.theta = 500000;
    TAP_OK(kv_rope_inv_freq(&r, f, &e) == 0, "default frequencies");
    TAP_OK(f[0] == 1.0 && fabs(f[63] - pow(500000, -126.0 / 128)) < 1e-20,
           "theta_i = base^(-2i/r)");
    r.scaling = KV_ROPE_SCALE_LINEAR;
    r.factor = 4;
    kv_rope_inv_freq(&r, g, &e);
    int ok = 1;
    for (int i = 0; i < 64; i++)
        ok &= fabs(g[i] - f[i] / 4) <= 1e-18;
    TAP_OK(ok, "linear divides every frequency");

    TAP_OK(kv_rope_parse_scaling("llama3:factor=8,low=1,high=4,orig=8192",
                                 &r, &e) == 0, "parse llama3");
    kv_rope_inv_freq(&r, g, &e);
    int kept = 0, scaled = 0, mono = 1;
    for (int i = 0; i < 64; i++) {
        double wl = 2 * M_PI / f[i];
        if (wl < 8192.0 / 4)
            kept += g[i] == f[i];
        else if (wl > 8192.0)
            scaled += fabs(g[i] - f[i] / 8) <= 1e-18;
        else
            mono &= g[i] < f[i] && g[i] > f[i] / 8;
        if (i)
            mono &= g[i] < g[i - 1];
    }
    TAP_OK(kept > 20 && scaled > 10 && mono,
           "llama3: high planes kept (%d), low planes /8 (%d), middle "
           "between, decreasing", kept, scaled);

    kv_rope_init(&r, 128);
    TAP_OK(kv_rope_parse_scaling("ntk:2", &r, &e) == 0 &&
           r.scaling == KV_ROPE_SCALE_NTK && r.factor == 2, "parse ntk:2");
    kv_rope_inv_freq(&r, g, &e);
    TAP_OK(fabs(g[1] - pow(10000 * pow(2, 128.0 / 126), -2.0 / 128)) < 1e-15,
           "ntk: base * factor^(r/(r-2))");

    kv_rope_init(&r, 128);
    TAP_OK(kv_rope_parse_scaling("yarn:factor=4,orig=4096", &r, &e) == 0,
           "parse yarn");
    kv_rope_inv_freq(&r, g, &e);
    kv_rope_init(&r, 128);
    kv_rope_inv_freq(&r, f, &e);
    TAP_OK(g[0] == f[0] && fabs(g[63] - f[63] / 4) < 1e-18 && g[30] < f[30]
           && g[30] > f[30] / 4, "yarn: fast planes kept, slow /factor");
    r.scaling = KV_ROPE_SCALE_YARN;
    r.factor = 4;
    TAP_OK(fabs(kv_rope_mscale(&r) - (0.1 * log(4) + 1)) < 1e-15,
           "yarn mscale 0.1 ln(factor) + 1");

    /* Values of the Hugging Face formulas (modeling_rope_utils:
     * _compute_yarn_parameters, _compute_llama3_parameters) evaluated in
     * double by an independent script; planes inside the ramp. */
    static const struct { int i; double trunc, notrunc; } yv[] = {
        {10, 0.23713737056616555, 0.23713737056616555},
        {25, 0.023434552639377708, 0.023925536288889757},
        {30, 0.009488517882700576, 0.009574461236755236},
        {40, 0.0013378867023789293, 0.0012856320307266878},
    };
    double h[64];
    kv_rope_init(&r, 128);
    kv_rope_parse_scaling("yarn:factor=4,orig=4096", &r, &e);
    kv_rope_inv_freq(&r, g, &e);
    TAP_OK(kv_rope_parse_scaling("yarn:factor=4,orig=4096,truncate=0", &r,
                                 &e) == 0 && !r.yarn_truncate,
           "parse yarn truncate=0");
    kv_rope_inv_freq(&r, h, &e);
    ok = 1;
    for (size_t k = 0; k < sizeof yv / sizeof yv[0]; k++)
        ok &= fabs(g[yv[k].i] / yv[k].trunc - 1) < 1e-14 &&
              fabs(h[yv[k].i] / yv[k].notrunc - 1) < 1e-14;
    TAP_OK(ok, "yarn frequencies equal HF's, with and without truncate");
    TAP_OK(kv_rope_parse_scaling("yarn:factor=4,truncate=2", &r, &e) < 0,
           "yarn truncate=2 refused: %s", e.msg);
    kv_rope_init(&r, 128);
    kv_rope_parse_scaling("yarn:factor=4,orig=4096", &r, &e);
    kv_rope_describe(&r, buf0, sizeof buf0);
    r.yarn_truncate = 0;
    kv_rope_describe(&r, buf1, sizeof buf1);
    TAP_OK(!strstr(buf0, "truncate") && strlen(buf1) == strlen(buf0) + 11 &&
           !strcmp(buf1 + strlen(buf0), " truncate=0"),
           "truncate=0 is in the description, the default is not: %s", buf1);
    static const struct { int i; double v; } lv[] = {
        {40, 3.428102195952591e-05}, {45, 1.2297638677963614e-05},
        {50, 4.411534674558404e-06},
    };
    kv_rope_init(&r, 128);
    r.theta = 500000;
    kv_rope_parse_scaling("llama3:factor=8,low=1,high=4,orig=8192", &r, &e);
    kv_rope_inv_freq(&r, g, &e);
    ok = 1;
    for (size_t k = 0; k < sizeof lv / sizeof lv[0]; k++)
        ok &= fabs(g[lv[k].i] / lv[k].v - 1) < 1e-14;
    TAP_OK(ok, "llama3 frequencies equal HF's");

    TAP_OK(kv_rope_parse_scaling("cubic:2", &r, &e) < 0 &&
           strstr(e.msg, "cubic"), "unknown scaling refused: %s", e.msg);
    TAP_OK(kv_rope_parse_scaling("llama3:factor=x", &r, &e) < 0,
           "bad number refused: %s", e.msg);
    kv_rope_init(&r, 128);
    r.rotary_dim = 63;
    TAP_OK(kv_rope_check(&r, &e) < 0, "odd rotary dim refused: %s", e.msg);
    char buf[512];
    kv_rope_init(&r, 128);
    kv_rope_describe(&r, buf, sizeof buf);
    TAP_OK(strcmp(buf, "neox theta=10000 rotary_dim=128 head_dim=128 "
                  "scaling=none") == 0, "describe: %s", buf);
}

static void test_moves(void)
{
    static const char *scalings[] = {
        "none", "linear:4", "ntk:3", "llama3:factor=8,low=1,high=4,orig=8192",
        "yarn:factor=16,orig=4096,beta_fast=32,beta_slow=1",
        "dynamic:factor=2,max_pos=1000000",
    };
    static const int64_t deltas[] = {
        -131072, -65537, -4096, -1, 1, 3, 4095, 100000, 131072
    };
    static const enum kv_dtype dts[] = {KV_BF16, KV_F16, KV_F32};
    static const int dims[][2] = {{128, 128}, {128, 64}, {64, 16}, {80, 24}};
    for (int sty = 0; sty < 2; sty++)
        for (size_t sc = 0; sc < sizeof scalings / sizeof *scalings; sc++)
            for (size_t dm = 0; dm < sizeof dims / sizeof *dims; dm++)
                for (size_t dt = 0; dt < 3; dt++) {
                    struct kv_rope r;
                    struct kv_err e;
                    struct stats st = {0, 0, 0, 0};
                    kv_rope_init(&r, dims[dm][0]);
                    r.rotary_dim = dims[dm][1];
                    r.style = sty ? KV_ROPE_GPTJ : KV_ROPE_NEOX;
                    r.theta = sc % 2 ? 500000 : 10000;
                    kv_rope_parse_scaling(scalings[sc], &r, &e);
                    for (size_t k = 0; k < sizeof deltas / sizeof *deltas; k++)
                        check_move(&r, dts[dt], deltas[k], &st);
                    for (int k = 0; k < 4; k++)
                        check_move(&r, dts[dt],
                                   (int64_t)(rnd() * 131072), &st);
                    TAP_OK(st.bad == 0 && st.exact >= st.n * 995 / 1000,
                           "%s %s D=%d r=%d %s: %zu values within one "
                           "rounding, %zu correctly rounded, worst %.3f ulp",
                           sty ? "gptj" : "neox", scalings[sc], dims[dm][0],
                           dims[dm][1], kv_dtype_name(dts[dt]), st.n,
                           st.exact, st.worst);
                }
}

static void test_simd(void)
{
    int ok = 1, okip = 1;
    static const int dims[][2] = {{128, 128}, {128, 64}, {64, 32}, {96, 48}};
    for (int sty = 0; sty < 2; sty++)
        for (size_t dm = 0; dm < 4; dm++) {
            struct kv_rope r;
            struct kv_err e;
            struct kv_rope_delta d;
            kv_rope_init(&r, dims[dm][0]);
            r.rotary_dim = dims[dm][1];
            r.style = sty ? KV_ROPE_GPTJ : KV_ROPE_NEOX;
            kv_rope_delta_init(&d, &r, 77777, &e);
            size_t nv = 37, n = nv * (size_t)dims[dm][0];
            uint16_t *src = malloc(n * 2), *a = malloc(n * 2),
                     *b = malloc(n * 2), *c = malloc(n * 2);
            for (size_t i = 0; i < n; i++)
                src[i] = (uint16_t)((rng_state = rng_state *
                                     6364136223846793005ull +
                                     1442695040888963407ull) >> 48);
            /* a few specials: inf, nan, -0, huge */
            src[0] = 0x7f80; src[1] = 0x7fc1; src[2] = 0x8000; src[3] = 0x7f7f;
            kv_rope_force_scalar(1);
            kv_rope_rotate(&d, KV_BF16, src, a, nv);
            kv_rope_force_scalar(2);
            kv_rope_rotate(&d, KV_BF16, src, b, nv);
            ok &= memcmp(a, b, n * 2) == 0;
            kv_rope_force_scalar(0);
            kv_rope_rotate(&d, KV_BF16, src, b, nv);
            memcpy(c, src, n * 2);
            kv_rope_rotate(&d, KV_BF16, c, c, nv);
            ok &= memcmp(a, b, n * 2) == 0;
            okip &= memcmp(b, c, n * 2) == 0;
            free(src); free(a); free(b); free(c);
            kv_rope_delta_release(&d);
        }
    TAP_OK(ok, "bf16 SIMD paths (AVX-512, AVX2) == scalar reference bit for "
           "bit");
    TAP_OK(okip, "in-place rotation == out-of-place");

    /* a chunk large enough for the streaming stores, into a 64-byte
     * aligned tensor at an offset: equal to the reference slab by slab */
    for (int sty = 0; sty < 2; sty++) {
        struct kv_rope r;
        struct kv_err e;
        struct kv_rope_delta d;
        const int64_t L = 2, T = 1100, H = 4, D = 128, TT = 1200, off = 64;
        struct kv_rope_chunk ch = {L, T, H, D, KV_BF16};
        size_t slab = (size_t)T * H * D, n = (size_t)L * 2 * slab;
        size_t big = (size_t)L * 2 * TT * H * D;
        uint16_t *src = malloc(n * 2), *dst = aligned_alloc(64, big * 2);
        uint16_t *want = malloc(slab * 2);
        kv_rope_init(&r, (int)D);
        r.style = sty ? KV_ROPE_GPTJ : KV_ROPE_NEOX;
        for (size_t i = 0; i < n; i++)
            src[i] = (uint16_t)((rng_state = rng_state *
                                 6364136223846793005ull + 1) >> 49) ^ 0x3000;
        memset(dst, 0, big * 2);
        int good = kv_rope_move_kv(&r, &ch, -4242, src, dst, TT, off, &e) == 0;
        kv_rope_delta_init(&d, &r, -4242, &e);
        for (int64_t l = 0; l < L; l++) {
            kv_rope_rotate_ref(&d, KV_BF16, src + (size_t)(2 * l) * slab, want,
                               (size_t)(T * H));
            good &= memcmp(dst + ((size_t)(2 * l) * TT + off) * H * D, want,
                           slab * 2) == 0;
            good &= memcmp(dst + ((size_t)(2 * l + 1) * TT + off) * H * D,
                           src + (size_t)(2 * l + 1) * slab, slab * 2) == 0;
            good &= dst[((size_t)(2 * l) * TT + off) * H * D - 1] == 0;
        }
        kv_rope_delta_release(&d);
        TAP_OK(good, "%s: a large move (streaming stores) == the reference, "
               "V copied, nothing outside the chunk touched",
               sty ? "gptj" : "neox");
        free(src);
        free(dst);
        free(want);
    }
}

static void test_refusals(void)
{
    struct kv_rope r;
    struct kv_err e;
    kv_rope_init(&r, 64);
    r.style = KV_ROPE_LEARNED;
    TAP_OK(kv_rope_can_move(&r, 0, 10, 5, 0, &e) < 0 &&
           strstr(e.msg, "learned"), "learned positions refused: %s", e.msg);
    TAP_OK(kv_rope_can_move(&r, 10, 10, 5, 0, &e) == 0,
           "learned positions at the same place: fine");
    kv_rope_init(&r, 64);
    kv_rope_parse_scaling("dynamic:factor=2,max_pos=4096", &r, &e);
    TAP_OK(kv_rope_can_move(&r, 0, 4000, 96, 0, &e) == 0,
           "dynamic NTK below max_pos moves");
    TAP_OK(kv_rope_can_move(&r, 0, 4001, 96, 0, &e) < 0 &&
           strstr(e.msg, "dynamic"), "dynamic NTK past max_pos refused: %s",
           e.msg);
    TAP_OK(kv_rope_can_move(&r, 0, 100, 96, 5000, &e) < 0,
           "dynamic NTK in a sequence longer than max_pos refused");
    TAP_OK(kv_rope_can_move(&r, 100, 100, 96, 5000, &e) < 0,
           "dynamic NTK: not moved, but in a sequence longer than max_pos: "
           "refused too");
    TAP_OK(kv_rope_can_move(&r, 100, 100, 96, 4096, &e) == 0,
           "dynamic NTK: not moved, within max_pos: fine");
}

/* The toy projection at P0, moved by delta, equals the toy at P0 + delta. */
static void test_toy_move(void)
{
    static const char *scalings[] = {"none", "yarn:factor=8,orig=2048",
                                     "llama3:factor=8,low=1,high=4,orig=8192"};
    for (int s = 0; s < 3; s++)
        for (int sty = 0; sty < 2; sty++) {
            struct kv_toy m;
            struct kv_err e;
            struct kv_tensor a, b;
            kv_tensor_init(&a);
            kv_tensor_init(&b);
            kv_toy_init(&m, 2, 4, 2, 64);
            m.seed = 42;
            m.rope.style = sty ? KV_ROPE_GPTJ : KV_ROPE_NEOX;
            m.rope.rotary_dim = s == 1 ? 32 : 0;
            kv_rope_parse_scaling(scalings[s], &m.rope, &e);
            int32_t tok[7] = {5, 900, 17, 3, 3, 65000, 1};
            int64_t p0[7], p1[7];
            int64_t P0 = 37, P1 = 100003;
            for (int i = 0; i < 7; i++) {
                p0[i] = P0 + i;
                p1[i] = P1 + i;
            }
            int rc = kv_toy_kv(&m, tok, p0, 7, KV_F32, 0, &a, &e);
            rc |= kv_toy_kv(&m, tok, p1, 7, KV_F32, 0, &b, &e);
            struct kv_rope_chunk c = {2, 7, 2, 64, KV_F32};
            float *moved = malloc(a.nbytes);
            rc |= kv_rope_move_kv(&m.rope, &c, P1 - P0, a.data, moved, 7, 0,
                                  &e);
            double worst = 0;
            int vsame = 1;
            const float *want = b.data;
            for (int l = 0; l < 2; l++) {
                for (int i = 0; i < 7 * 2 * 64; i++) {
                    size_t k = (size_t)l * 2 * 7 * 128 + (size_t)i;
                    double err = fabs(moved[k] - want[k]) /
                                 ulp(KV_F32, fmax(fabs(want[k]), 0.25));
                    if (err > worst)
                        worst = err;
                }
                vsame &= memcmp(moved + (size_t)(l * 2 + 1) * 7 * 128,
                                want + (size_t)(l * 2 + 1) * 7 * 128,
                                7 * 128 * 4) == 0;
            }
            TAP_OK(rc == 0 && worst <= 4.0 && vsame,
                   "toy %s %s: K moved %lld positions == K computed there "
                   "(worst %.2f f32 ulp), V identical", scalings[s],
                   sty ? "gptj" : "neox", (long long)(P1 - P0), worst);
            free(moved);
            kv_tensor_release(&a);
            kv_tensor_release(&b);
        }
}

/* NoPE layers: parsed sorted and distinct, described, never rotated. */
static void test_nope(void)
{
    struct kv_rope r;
    struct kv_err e;
    char buf[512];
    kv_rope_init(&r, 64);
    TAP_OK(kv_rope_parse_nope("7,3,7,0", &r, &e) == 0 && r.n_nope == 3 &&
           r.nope_layers[0] == 0 && r.nope_layers[2] == 7 &&
           kv_rope_layer_is_nope(&r, 3) && !kv_rope_layer_is_nope(&r, 4),
           "--nope-layers 7,3,7,0 -> 0,3,7");
    kv_rope_describe(&r, buf, sizeof buf);
    TAP_OK(strstr(buf, " nope_layers=0,3,7") != NULL, "described: %s", buf);
    TAP_OK(kv_rope_parse_nope("1,x", &r, &e) < 0, "junk refused: %s", e.msg);

    struct kv_toy m;
    struct kv_tensor a, b;
    kv_tensor_init(&a);
    kv_tensor_init(&b);
    kv_toy_init(&m, 3, 2, 2, 32);
    kv_rope_parse_nope("1", &m.rope, &e);
    int32_t tok[4] = {9, 8, 7, 6};
    int64_t p0[4] = {2, 3, 4, 5}, p1[4] = {902, 903, 904, 905};
    kv_toy_kv(&m, tok, p0, 4, KV_F32, 0, &a, &e);
    kv_toy_kv(&m, tok, p1, 4, KV_F32, 0, &b, &e);
    size_t slab = 4 * 2 * 32;
    const float *A = a.data, *B = b.data;
    TAP_OK(memcmp(A + 2 * slab, B + 2 * slab, slab * 4) == 0 &&
           memcmp(A, B, slab * 4) != 0,
           "toy: the NoPE layer's K does not depend on position");
    float *moved = malloc(a.nbytes);
    struct kv_rope_chunk c = {3, 4, 2, 32, KV_F32};
    kv_rope_move_kv(&m.rope, &c, 900, a.data, moved, 4, 0, &e);
    double worst = 0;
    for (size_t i = 0; i < 3 * 2 * slab; i++) {
        double err = fabs(moved[i] - B[i]) /
                     ulp(KV_F32, fmax(fabs(B[i]), 0.25));
        if (err > worst)
            worst = err;
    }
    TAP_OK(memcmp(moved + 2 * slab, A + 2 * slab, slab * 4) == 0 &&
           worst <= 4, "move: the NoPE layer copied, the others rotated "
           "(worst %.2f ulp)", worst);
    free(moved);
    kv_tensor_release(&a);
    kv_tensor_release(&b);
}

int main(void)
{
    test_nope();
    test_freq();
    test_moves();
    test_simd();
    test_refusals();
    test_toy_move();
    return tap_done();
}
