/* attn_bf16.c - the bf16 dot-product tiles (lib/attn/bf16.h).
 *
 * 1. The instruction models on vectors whose result the documented
 *    rounding decides (nearest-even adds one after the other for
 *    VDPBF16PS, round-to-odd for BFDOT, subnormals in and out as zero).
 * 2. The tile kernel against a plain loop over the lane model (the kernel
 *    source is the one the instructions compile from).
 * 3. Where the CPU has the instruction: the instruction against its model,
 *    bit for bit, on random and special values (NaN compared as NaN).
 *    BFMMLA's model and its kernel against the BFDOT lane model.
 * 4. bf16 attention through every route (both models; the instruction
 *    where present), P rounded and kept f32, causal / window / block mask /
 *    GQA / several key tiles, against a float64 reference within the bound
 *    of kvattn(1) ACCURACY (kv_bound_attn_out_bf16); the instruction's
 *    attention equals its model's bit for bit.
 * 5. Paged decode (the decode kernels through a block table): lengths 0,
 *    1, odd and past a chunk, head dims 64 to 256 and 80, 1 to 8 query
 *    heads a kv head, NaN in every cache slot past a request's keys,
 *    against the float64 reference; the instruction equal to its model.
 * 6. kvxattn's estimate with the strided GEMM on every route against the
 *    f32 sgemm route: block sums within the sum of the two routes' bounds
 *    of kvxattn(1), the instruction's sums and mask equal to its model's;
 *    over geometries whose score rows start inside a panel (compat
 *    chunks), end in a half panel, pad a last group (Lk % S) or an odd
 *    S D, with a q offset, GQA and two batches; the same bits for -j 1, 2
 *    and 3.
 * 6. The whole-panel packing against the column packing, word for word.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bf16.h"
#include "attn/bound.h"
#include "attn/xattn.h"
#include "core/half.h"
#include "core/tensor.h"
#include "tap.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t rnd32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static double urand(void)
{
    return (double)(rnd32() & 0xffffff) / 8388608.0 - 1.0;
}

static uint16_t bf(float f)
{
    return kv_f32_to_bf16_ref(f);
}

static uint32_t pair(float lo, float hi)
{
    return (uint32_t)bf(lo) | (uint32_t)bf(hi) << 16;
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int same(float a, float b)
{
    return (isnan(a) && isnan(b)) || f2u(a) == f2u(b);
}

/* A bf16 pattern: mostly moderate values, some of every kind. */
static uint16_t rand_bf16(void)
{
    uint16_t h = (uint16_t)rnd32();
    if (rnd32() % 4)
        h = (uint16_t)((h & 0x807f) | ((0x3c + rnd32() % 8) << 7));
    return h;
}

static float rand_acc(void)
{
    uint32_t u = rnd32() ^ rnd32() << 16;
    if (rnd32() % 2)
        u = (u & 0x807fffffu) | ((0x78 + rnd32() % 12) << 23);
    if (rnd32() % 16 == 0)
        u &= 0x807fffffu;           /* a subnormal */
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_models(void)
{
    const float u24 = 0x1p-24f;
    /* 1 + 2^-24 + 2^-24: two nearest-even adds give 1, the exact sum and
     * round-to-odd give 1 + 2^-23 */
    uint32_t a = pair(0x1p-12f, 0x1p-12f), b = a;
    TAP_OK(kv_bf16_dot2_x86(1.0f, a, b) == 1.0f, "vdpbf16ps: two adds, each to nearest even");
    TAP_OK(kv_bf16_dot2_arm(1.0f, a, b) == 1.0f + 2 * u24, "bfdot: products summed first");
    /* 1 + 2^-25: nearest even gives 1, round-to-odd 1 + 2^-23 */
    a = pair(0x1p-12f, 0.0f);
    b = pair(0x1p-13f, 0.0f);
    TAP_OK(kv_bf16_dot2_x86(1.0f, a, b) == 1.0f, "vdpbf16ps: 1 + 2^-25 rounds to 1");
    TAP_OK(kv_bf16_dot2_arm(1.0f, a, b) == 1.0f + 2 * u24, "bfdot: 1 + 2^-25 rounds to odd");
    /* 3 + 2^-23 (exactly between 3 and 3 + 2^-22): even 3, odd 3 + 2^-22 */
    a = pair(0x1p-12f, 0.0f);
    b = pair(0x1p-11f, 0.0f);
    TAP_OK(kv_bf16_dot2_x86(3.0f, a, b) == 3.0f, "vdpbf16ps: a tie goes to even");
    TAP_OK(kv_bf16_dot2_arm(3.0f, a, b) == 3.0f + 0x1p-22f, "bfdot: a tie goes to odd");
    /* a subnormal bf16 input counts as zero */
    uint16_t sub = 0x0001;
    a = sub;
    b = pair(0x1p100f, 0.0f);
    TAP_OK(f2u(kv_bf16_dot2_x86(0.0f, a, b)) == 0, "vdpbf16ps: subnormal input read as zero");
    TAP_OK(f2u(kv_bf16_dot2_arm(0.0f, a, b)) == 0, "bfdot: subnormal input read as zero");
    /* a subnormal result is flushed: 2^-65 * 2^-65 = 2^-130 */
    a = b = pair(0x1p-65f, 0.0f);
    TAP_OK(f2u(kv_bf16_dot2_x86(0.0f, a, b)) == 0, "vdpbf16ps: subnormal result flushed");
    TAP_OK(f2u(kv_bf16_dot2_arm(0.0f, a, b)) == 0, "bfdot: subnormal result flushed");
    /* a result is tiny when it is below 2^-126 once rounded to 24 bits
     * with the exponent unbounded (x86 detects underflow after rounding):
     * 2^-126 - 2^-150 is exact so tiny, flushed, though rounding it to a
     * subnormal's 2^-149 steps would give 2^-126; 2^-126 - 2^-151, half
     * way, rounds to even, 2^-126, not tiny (a VDPBF16PS on Zen 4 agrees) */
    TAP_OK(f2u(kv_bf16_dot2_x86(0x1p-126f, pair(0.0f, 0x1p-75f), pair(0.0f, -0x1p-75f))) == 0,
           "vdpbf16ps: 2^-126 - 2^-150 is tiny after rounding, flushed");
    TAP_OK(kv_bf16_dot2_x86(0x1p-126f, pair(0.0f, 0x1p-76f), pair(0.0f, -0x1p-75f)) == 0x1p-126f,
           "vdpbf16ps: 2^-126 - 2^-151 rounds to 2^-126, kept");
    TAP_OK(f2u(kv_bf16_dot2_x86(-0x1p-126f, pair(0x1p-75f, 0.0f), pair(0x1p-75f, 0.0f))) ==
           0x80000000u, "vdpbf16ps: -2^-126 + 2^-150 flushed to -0");
    /* a subnormal accumulator counts as zero */
    TAP_OK(kv_bf16_dot2_x86(0x1p-140f, pair(1.0f, 0.0f), pair(1.0f, 0.0f)) == 1.0f &&
           f2u(kv_bf16_dot2_x86(0x1p-140f, 0, 0)) == 0, "vdpbf16ps: subnormal accumulator as zero");
    /* products past the f32 range: VDPBF16PS keeps them exact and rounds
     * the sums (0 - 2^160 = -inf, then -inf + 2^160 = -inf); BFDOT rounds
     * each product to an infinity first (inf - inf = NaN) */
    a = pair(0x1p80f, 0x1p80f);
    b = pair(0x1p80f, -0x1p80f);
    TAP_OK(kv_bf16_dot2_x86(0.0f, a, b) == -INFINITY, "vdpbf16ps: exact products, -inf");
    TAP_OK(isnan(kv_bf16_dot2_arm(0.0f, a, b)), "bfdot: inf - inf is NaN");
}

/* The kernel through route r against a plain loop over the lane model. */
static void test_kernel(enum kv_bf16_route r, float (*lane)(float, uint32_t, uint32_t))
{
    const int64_t M = 11, N = 45, kp = 7, lda = 2 * kp + 3, ps = 32 * kp, ldc = 50;
    uint16_t A[11 * 17];
    uint32_t Bp[2 * 32 * 7];
    float C0[11 * 50], C[11 * 50];
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++)
        A[i] = bf((float)urand());
    for (size_t i = 0; i < sizeof Bp / sizeof Bp[0]; i++)
        Bp[i] = pair((float)urand(), (float)urand());
    for (size_t i = 0; i < sizeof C0 / sizeof C0[0]; i++)
        C0[i] = (float)urand();
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        memcpy(C, C0, sizeof C);
        kv_bf16_gemm(r, M, N, kp, A, lda, Bp, ps, C, ldc, 0.25f, accumulate);
        int bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t c = 0; c < ldc; c++) {
                float want = C0[i * ldc + c];
                if (c < N) {
                    float acc = accumulate ? want : 0.0f;
                    for (int64_t k = 0; k < kp; k++) {
                        uint32_t w;
                        memcpy(&w, A + i * lda + 2 * k, sizeof w);
                        acc = lane(acc, w, Bp[(c / 32) * ps + k * 32 + c % 32]);
                    }
                    want = accumulate ? acc : acc * 0.25f;
                }
                bad += !same(C[i * ldc + c], want);
            }
        TAP_OK(bad == 0, "%s kernel, %s: %d of %lld elements differ from the lane model",
               kv_bf16_route_name(r), accumulate ? "C +=" : "C =", bad,
               (long long)(M * ldc));
    }
}

/* One pair step of 16 lanes (A's two elements against Bp's 16 pairs,
 * accumulating into C1 and C2, which start equal) on the instruction and
 * on its model: how many lanes differ. */
static long lanes_differ(enum kv_bf16_route hw, enum kv_bf16_route model, const uint16_t *A,
                         const uint32_t *Bp, float *C1, float *C2)
{
    long bad = 0;
    kv_bf16_gemm(hw, 1, 16, 1, A, 2, Bp, 32, C1, 16, 1.0f, 1);
    kv_bf16_gemm(model, 1, 16, 1, A, 2, Bp, 32, C2, 16, 1.0f, 1);
    for (int i = 0; i < 16; i++)
        bad += !same(C1[i], C2[i]);
    return bad;
}

/* The instruction against its model: random lanes, specials included. */
static void test_hardware(enum kv_bf16_route hw, enum kv_bf16_route model)
{
    enum { N = 16 };
    long bad = 0, total = 0;
    for (int it = 0; it < 20000; it++) {
        uint16_t A[2];
        uint32_t Bp[32];
        float C1[N], C2[N];
        A[0] = rand_bf16();
        A[1] = rand_bf16();
        for (int i = 0; i < 32; i++)
            Bp[i] = rand_bf16() | (uint32_t)rand_bf16() << 16;
        for (int i = 0; i < N; i++)
            C1[i] = C2[i] = rand_acc();
        bad += lanes_differ(hw, model, A, Bp, C1, C2);
        total += N;
    }
    TAP_OK(bad == 0, "%s equals %s bit for bit: %ld of %ld lanes differ",
           kv_bf16_route_name(hw), kv_bf16_route_name(model), bad, total);
    /* results within a few ulps of +-2^-126, where underflow is decided:
     * accumulators just above it, products of 2^-120 to 2^-180 */
    bad = total = 0;
    for (int it = 0; it < 4000; it++) {
        uint16_t A[2];
        uint32_t Bp[32];
        float C1[N], C2[N];
        uint16_t e[2], f[64];
        for (int i = 0; i < 2; i++)
            e[i] = (uint16_t)((rnd32() & 0x807f) | (0x3c + rnd32() % 30) << 7);
        for (int i = 0; i < 64; i++)
            f[i] = (uint16_t)((rnd32() & 0x807f) | (0x0a + rnd32() % 30) << 7);
        A[0] = e[0];
        A[1] = e[1];
        for (int i = 0; i < 32; i++)
            Bp[i] = f[2 * i] | (uint32_t)f[2 * i + 1] << 16;
        for (int i = 0; i < N; i++) {
            uint32_t u = 0x00800000u + rnd32() % 8 + (rnd32() % 2 ? 0x80000000u : 0u);
            memcpy(&C1[i], &u, sizeof u);
            C2[i] = C1[i];
        }
        bad += lanes_differ(hw, model, A, Bp, C1, C2);
        total += N;
    }
    TAP_OK(bad == 0, "%s equals %s bit for bit next to 2^-126: %ld of %ld lanes differ",
           kv_bf16_route_name(hw), kv_bf16_route_name(model), bad, total);
    /* and a whole tile of moderate values, both modes */
    uint16_t A[40 * 64];
    static uint32_t Bp[3 * 32 * 32];
    float C1[40 * 70], C2[40 * 70];
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++)
        A[i] = bf((float)urand());
    for (size_t i = 0; i < sizeof Bp / sizeof Bp[0]; i++)
        Bp[i] = pair((float)urand(), (float)urand());
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        for (size_t i = 0; i < sizeof C1 / sizeof C1[0]; i++)
            C1[i] = C2[i] = (float)urand();
        kv_bf16_gemm(hw, 37, 70, 31, A, 64, Bp, 32 * 32, C1, 70, 0.125f, accumulate);
        kv_bf16_gemm(model, 37, 70, 31, A, 64, Bp, 32 * 32, C2, 70, 0.125f, accumulate);
        TAP_OK(memcmp(C1, C2, sizeof C1) == 0, "%s tile 37x70x62 equals %s (%s)",
               kv_bf16_route_name(hw), kv_bf16_route_name(model),
               accumulate ? "C +=" : "C =");
    }
}

/* BFMMLA: the model's layout on exact values (a 2x4 block of A by rows
 * times a 4x2 block of B by columns, C[i][j] in lane 2i + j); the tile
 * kernel on it against a plain loop over the BFDOT lane model (Arm's
 * pseudo-code makes BFMMLA two BFDotAdd steps), specials included; the
 * instruction, where present, against both, bit for bit. */
static void test_mmla(enum kv_bf16_route hw)
{
    uint32_t n[4] = {pair(1, 2), pair(3, 4), pair(5, 6), pair(7, 8)};
    uint32_t m[4] = {pair(1, 0), pair(0, 0), pair(0, 0), pair(0, 1)};
    float acc[4] = {0.5f, 0.0f, -1.0f, 0.0f};
    kv_bf16_mmla_arm(acc, n, m);
    TAP_OK(acc[0] == 1.5f && acc[1] == 4.0f && acc[2] == 4.0f && acc[3] == 8.0f,
           "BFMMLA model: row i of n times column j of m into lane 2i + j (%g %g %g %g)",
           acc[0], acc[1], acc[2], acc[3]);

    enum { M = 7, N = 45, KP = 6, LDA = 2 * KP + 2, PS = 32 * KP, LDC = 50 };
    static uint16_t A[M * LDA];
    static uint32_t Bp[2 * PS];
    static float C0[M * LDC], C1[M * LDC], C2[M * LDC];
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++)
        A[i] = rand_bf16();
    for (size_t i = 0; i < sizeof Bp / sizeof Bp[0]; i++)
        Bp[i] = rand_bf16() | (uint32_t)rand_bf16() << 16;
    for (size_t i = 0; i < sizeof C0 / sizeof C0[0]; i++)
        C0[i] = rand_acc();
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        memcpy(C1, C0, sizeof C1);
        kv_bf16_gemm_mmla(KV_BF16_MODEL_ARM, M, N, KP, A, LDA, Bp, PS, C1, LDC, 0.25f,
                          accumulate);
        int bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t c = 0; c < LDC; c++) {
                float want = C0[i * LDC + c];
                if (c < N) {
                    float a = accumulate ? want : 0.0f;
                    for (int64_t k = 0; k < KP; k++) {
                        uint32_t w;
                        memcpy(&w, A + i * LDA + 2 * k, sizeof w);
                        a = kv_bf16_dot2_arm(a, w, Bp[(c / 32) * PS + k * 32 + c % 32]);
                    }
                    want = accumulate ? a : a * 0.25f;
                }
                bad += !same(C1[i * LDC + c], want);
            }
        TAP_OK(bad == 0, "BFMMLA kernel (model), %s: %d of %d elements differ from the "
               "BFDOT lane model", accumulate ? "C +=" : "C =", bad, M * LDC);
        if (hw == KV_BF16_NEON) {
            memcpy(C2, C0, sizeof C2);
            kv_bf16_gemm_mmla(hw, M, N, KP, A, LDA, Bp, PS, C2, LDC, 0.25f, accumulate);
            int bad_hw = 0;
            for (size_t i = 0; i < sizeof C1 / sizeof C1[0]; i++)
                bad_hw += !same(C1[i], C2[i]);
            memcpy(C2, C0, sizeof C2);
            kv_bf16_gemm(hw, M, N, KP, A, LDA, Bp, PS, C2, LDC, 0.25f, accumulate);
            for (size_t i = 0; i < sizeof C1 / sizeof C1[0]; i++)
                bad_hw += !same(C1[i], C2[i]);
            TAP_OK(bad_hw == 0, "BFMMLA kernel, %s: the instruction equals its model bit "
                   "for bit (%d differ)", accumulate ? "C +=" : "C =", bad_hw);
        }
    }
}

/* The decode Q K^T tile: each score against the exact dot product within
 * (d + 1) u sum |q k| (VDPBF16PS's adds round to nearest), on the model
 * everywhere, and the instruction equal to the model bit for bit. */
static void test_dec_qk(enum kv_bf16_route hw)
{
    enum { KP = 48, D = 2 * KP };
    static uint16_t K[16][D];
    static uint32_t Q[4 * KP];
    const uint16_t *kr[16];
    float o1[64], o2[64];
    double worst = 0.0;
    int same_hw = 1;
    for (int it = 0; it < 40; it++) {
        int nk = 1 + it % 16;
        for (int t = 0; t < 16; t++) {
            for (int d = 0; d < D; d++)
                K[t][d] = bf((float)(2.0 * urand()));
            kr[t] = K[t];
        }
        for (int i = 0; i < 4 * KP; i++)
            Q[i] = pair((float)(2.0 * urand()), (float)(2.0 * urand()));
        kv_bf16_dec_qk(KV_BF16_MODEL_X86, Q, KP, KP, kr, nk, o1);
        for (int r = 0; r < 4; r++)
            for (int t = 0; t < 16; t++) {
                double exact = 0.0, mag = 0.0;
                for (int c = 0; t < nk && c < KP; c++) {
                    uint32_t w = Q[r * KP + c];
                    double a0 = kv_bf16_to_f32_ref((uint16_t)w), a1 = kv_bf16_to_f32_ref((uint16_t)(w >> 16));
                    double b0 = kv_bf16_to_f32_ref(K[t][2 * c]), b1 = kv_bf16_to_f32_ref(K[t][2 * c + 1]);
                    exact += a0 * b0 + a1 * b1;
                    mag += fabs(a0 * b0) + fabs(a1 * b1);
                }
                double err = fabs(o1[16 * r + t] - exact);
                double bound = 1.01 * (D + 1) * 0x1p-24 * mag;
                worst = fmax(worst, bound > 0 ? err / bound : (err > 0 ? INFINITY : 0));
            }
        if (hw == KV_BF16_AVX512) {
            kv_bf16_dec_qk(hw, Q, KP, KP, kr, nk, o2);
            same_hw &= memcmp(o1, o2, sizeof o1) == 0;
        }
    }
    TAP_OK(worst <= 1.0, "decode Q K^T tile (model-x86): scores within (d + 1) u sum|q k| "
           "(%.3g of it)", worst);
    if (hw == KV_BF16_AVX512)
        TAP_OK(same_hw, "decode Q K^T tile: avx512bf16 equals model-x86 bit for bit");
}

/* The decode P V tile against a plain loop over the lane model (each
 * output element one lane, the pairs in order; an odd count ends in a
 * zero row), on the model everywhere and the instruction where present,
 * bit for bit; 96 columns (a 64-column block and a 32-column one). */
static void test_dec_pv(enum kv_bf16_route hw)
{
    enum { DV = 96 };
    static uint16_t V[16][DV];
    static uint32_t P[4 * 8];
    static float o0[4 * DV], o1[4 * DV], o2[4 * DV], want[4 * DV];
    const uint16_t *vr[16];
    int same_model = 1, same_hw = 1;
    for (int it = 0; it < 40; it++) {
        int nv = 1 + it % 16, np = (nv + 1) / 2;
        for (int t = 0; t < 16; t++) {
            for (int c = 0; c < DV; c++)
                V[t][c] = bf((float)(2.0 * urand()));
            vr[t] = V[t];
        }
        for (int i = 0; i < 4 * 8; i++)
            P[i] = pair((float)fabs(urand()), (float)fabs(urand()));
        for (int i = 0; i < 4 * DV; i++)
            o0[i] = (float)urand();
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < DV; c++) {
                float acc = o0[r * DV + c];
                for (int t = 0; t < np; t++) {
                    uint32_t w = V[2 * t][c] | (2 * t + 1 < nv ? (uint32_t)V[2 * t + 1][c] << 16 : 0u);
                    acc = kv_bf16_dot2_x86(acc, P[r * 8 + t], w);
                }
                want[r * DV + c] = acc;
            }
        /* the row after an odd count is not read: make it NaN */
        if (nv < 16)
            for (int c = 0; c < DV; c++)
                V[nv][c] = 0x7fc0;
        memcpy(o1, o0, sizeof o1);
        kv_bf16_dec_pv(KV_BF16_MODEL_X86, P, 8, vr, nv, DV, o1, DV);
        same_model &= memcmp(o1, want, sizeof o1) == 0;
        if (hw == KV_BF16_AVX512) {
            memcpy(o2, o0, sizeof o2);
            kv_bf16_dec_pv(hw, P, 8, vr, nv, DV, o2, DV);
            same_hw &= memcmp(o2, want, sizeof o2) == 0;
        }
    }
    TAP_OK(same_model, "decode P V tile (model-x86) equals the lane model, pair by pair");
    if (hw == KV_BF16_AVX512)
        TAP_OK(same_hw, "decode P V tile: avx512bf16 equals the lane model bit for bit");
}

/* ---- attention ------------------------------------------------------ */

struct acase {
    const char *name;
    int Hq, Hkv, Lq, Lk, D, Dv, causal, window, bs, tile_k, decode;
};

/* Reference in double from the bf16 values: out [Hq][Lq][Dv], lse. */
static void reference(const struct acase *c, const double *q, const double *k,
                      const double *v, const unsigned char *bm, double *out, double *lse)
{
    int G = c->Hq / c->Hkv, nkb = c->bs ? (c->Lk + c->bs - 1) / c->bs : 0;
    int nqb = c->bs ? (c->Lq + c->bs - 1) / c->bs : 0;
    double scale = 1.0 / sqrt((double)c->D), *s = malloc(sizeof(double) * (size_t)c->Lk);
    for (int h = 0; h < c->Hq; h++)
        for (int i = 0; i < c->Lq; i++) {
            int pos = i + c->Lk - c->Lq;
            double mx = -INFINITY, sum = 0.0;
            double *o = out + ((size_t)h * c->Lq + i) * c->Dv;
            for (int j = 0; j < c->Lk; j++) {
                int ok = 1;
                if ((c->causal || c->window) && j > pos)
                    ok = 0;
                if (c->window && j <= pos - c->window)
                    ok = 0;
                if (bm && !bm[((size_t)h * nqb + i / c->bs) * nkb + j / c->bs])
                    ok = 0;
                double dot = 0.0;
                for (int d = 0; d < c->D; d++)
                    dot += q[((size_t)h * c->Lq + i) * c->D + d] *
                           k[((size_t)(h / G) * c->Lk + j) * c->D + d];
                s[j] = ok ? dot * scale : -INFINITY;
                if (s[j] > mx)
                    mx = s[j];
            }
            for (int d = 0; d < c->Dv; d++)
                o[d] = 0.0;
            if (mx == -INFINITY) {
                lse[(size_t)h * c->Lq + i] = -INFINITY;
                continue;
            }
            for (int j = 0; j < c->Lk; j++) {
                if (s[j] == -INFINITY)
                    continue;
                double w = exp(s[j] - mx);
                sum += w;
                for (int d = 0; d < c->Dv; d++)
                    o[d] += w * v[((size_t)(h / G) * c->Lk + j) * c->Dv + d];
            }
            for (int d = 0; d < c->Dv; d++)
                o[d] /= sum;
            lse[(size_t)h * c->Lq + i] = mx + log(sum);
        }
    free(s);
}

static void fill(struct kv_tensor *t, int64_t h, int64_t l, int64_t d, double amp, double *ref)
{
    int64_t sh[4] = {1, h, l, d};
    kv_tensor_alloc(t, KV_BF16, 4, sh, 0, NULL);
    uint16_t *p = t->data;
    for (int64_t i = 0; i < h * l * d; i++) {
        p[i] = bf((float)(amp * urand()));
        ref[i] = kv_bf16_to_f32_ref(p[i]);
    }
}

static double run_case(const struct acase *c, enum kv_bf16_route route, int p_f32,
                       const struct kv_tensor *tq, const struct kv_tensor *tk,
                       const struct kv_tensor *tv, const struct kv_tensor *tbm,
                       const double *ro, const double *rl, struct kv_tensor *out,
                       double *lse_err)
{
    struct kv_attn_req r;
    struct kv_tensor lse;
    struct kv_err e;
    memset(&r, 0, sizeof r);
    kv_tensor_init(&lse);
    *lse_err = INFINITY;
    r.q = tq; r.k = tk; r.v = tv;
    r.causal = c->causal;
    r.window = c->window;
    r.block_mask = tbm;
    r.block_size = c->bs;
    r.out_dtype = KV_F32;
    r.tile_k = c->tile_k;
    r.tile_q = c->decode ? 0 : 48;
    r.n_threads = 2;
    r.bf16_route = (int)route;
    r.p_f32 = p_f32;
    if (kv_attn_run(&r, out, &lse, &e) < 0) {
        printf("# %s\n", e.msg);
        return INFINITY;
    }
    struct kv_attn_stats st;
    kv_attn_last_stats(&st);
    if (st.bf16_route != (int)route)
        printf("# route in effect %d, asked %d\n", st.bf16_route, (int)route);
    double err = st.bf16_route == (int)route ? 0.0 : INFINITY;
    const float *o = out->data, *l = lse.data;
    size_t n = (size_t)c->Hq * c->Lq;
    for (size_t i = 0; i < n * (size_t)c->Dv; i++)
        err = fmax(err, fabs(o[i] - ro[i]));
    *lse_err = 0.0;
    for (size_t i = 0; i < n; i++)
        if (!(isinf(rl[i]) && l[i] == rl[i]))
            *lse_err = fmax(*lse_err, fabs(l[i] - rl[i]));
    kv_tensor_release(&lse);
    return err;
}

static void test_attention(enum kv_bf16_route hw)
{
    static const struct acase cases[] = {
        {"causal prefill, GQA 4/2", 4, 2, 70, 70, 32, 32, 1, 0, 0, 0, 0},
        {"causal, 3 key tiles of 40, Lq < Lk", 2, 1, 45, 111, 16, 48, 1, 0, 0, 40, 0},
        {"window 19, odd head dim 17", 2, 2, 50, 50, 17, 17, 0, 19, 0, 32, 0},
        {"block mask 16, causal", 2, 2, 64, 64, 32, 32, 1, 0, 16, 0, 0},
        {"no mask, MQA 3/1", 3, 1, 20, 90, 24, 40, 0, 0, 0, 64, 0},
        /* decode-shaped (the decode kernels where the CPU has AVX-512) */
        {"decode, GQA 8/2, 333 keys", 8, 2, 1, 333, 64, 64, 1, 0, 0, 0, 1},
        {"decode, 3 queries, GQA 6/1, D 32", 6, 1, 3, 200, 32, 48, 1, 0, 0, 0, 1},
        /* two key chunks, key tiles of 512 and an odd last one, two groups of
         * four rows per kv head, value columns in a block of 64 and one of 32 */
        {"decode, GQA 16/2, 4501 keys, Dv 96", 16, 2, 1, 4501, 64, 96, 1, 0, 0, 0, 1},
    };
    enum kv_bf16_route routes[3] = {KV_BF16_MODEL_X86, KV_BF16_MODEL_ARM, hw};
    int n_routes = hw != KV_BF16_NONE ? 3 : 2;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct acase *c = &cases[ci];
        struct kv_tensor tq, tk, tv, tbm, out;
        kv_tensor_init(&tq); kv_tensor_init(&tk); kv_tensor_init(&tv);
        kv_tensor_init(&tbm); kv_tensor_init(&out);
        double *q = malloc(sizeof(double) * (size_t)(c->Hq * c->Lq * c->D));
        double *k = malloc(sizeof(double) * (size_t)(c->Hkv * c->Lk * c->D));
        double *v = malloc(sizeof(double) * (size_t)(c->Hkv * c->Lk * c->Dv));
        double *ro = malloc(sizeof(double) * (size_t)(c->Hq * c->Lq * c->Dv));
        double *rl = malloc(sizeof(double) * (size_t)(c->Hq * c->Lq));
        fill(&tq, c->Hq, c->Lq, c->D, 2.0, q);
        fill(&tk, c->Hkv, c->Lk, c->D, 2.0, k);
        fill(&tv, c->Hkv, c->Lk, c->Dv, 1.5, v);
        unsigned char *bm = NULL;
        if (c->bs) {
            int64_t nqb = (c->Lq + c->bs - 1) / c->bs, nkb = (c->Lk + c->bs - 1) / c->bs;
            int64_t sh[4] = {1, c->Hq, nqb, nkb};
            kv_tensor_alloc(&tbm, KV_U8, 4, sh, 0, NULL);
            bm = tbm.data;
            for (int64_t i = 0; i < c->Hq * nqb * nkb; i++)
                bm[i] = (unsigned char)(rnd32() % 3 != 0 || i % (nkb + 1) == 0);
        }
        reference(c, q, k, v, bm, ro, rl);
        double A, V, qm = 0.0, km = 0.0;
        kv_bound_scan(&tq, &tk, &tv, 1.0 / sqrt((double)c->D), 0.0, &A, &V);
        for (int64_t i = 0; i < c->Hq * c->Lq * c->D; i++)
            qm = fmax(qm, fabs(q[i]));
        for (int64_t i = 0; i < c->Hkv * c->Lk * c->D; i++)
            km = fmax(km, fabs(k[i]));
        double X = (fmax(qm, km) + 1.0) / sqrt((double)c->D);
        /* the models' outputs (P rounded), to hold the instruction to */
        struct kv_tensor model_out[2];
        kv_tensor_init(&model_out[0]);
        kv_tensor_init(&model_out[1]);
        int mi = kv_bf16_route_odd(hw) ? 1 : 0;
        for (int ri = 0; ri < n_routes; ri++)
            for (int p_f32 = 0; p_f32 < 2; p_f32++) {
                double le, err = run_case(c, routes[ri], p_f32, &tq, &tk, &tv,
                                          c->bs ? &tbm : NULL, ro, rl, &out, &le);
                int odd = kv_bf16_route_odd(routes[ri]);
                double bo = kv_bound_attn_out_bf16(c->Lk, c->D, A, V, X, KV_F32, odd, !p_f32);
                double bl = kv_bound_attn_lse_bf16(c->Lk, c->D, A, 0.0, X, odd, 0);
                for (size_t i = 0; i < (size_t)(c->Hq * c->Lq); i++)
                    if (isfinite(rl[i]))
                        bl = fmax(bl, kv_bound_attn_lse_bf16(c->Lk, c->D, A, fabs(rl[i]), X,
                                                             odd, 0));
                TAP_OK(err <= bo && le <= bl, "%s, %s, P %s: error %.3g (bound %.3g), lse %.3g (%.3g)",
                       c->name, kv_bf16_route_name(routes[ri]), p_f32 ? "f32" : "bf16",
                       err, bo, le, bl);
                if (ri < 2 && p_f32 == 0) {
                    model_out[ri] = out;
                    kv_tensor_init(&out);
                } else {
                    if (ri == 2 && p_f32 == 0)
                        TAP_OK(model_out[mi].nbytes == out.nbytes &&
                               memcmp(model_out[mi].data, out.data, out.nbytes) == 0,
                               "%s: %s attention equals its model's bit for bit", c->name,
                               kv_bf16_route_name(routes[ri]));
                    kv_tensor_release(&out);
                }
            }
        kv_tensor_release(&model_out[0]);
        kv_tensor_release(&model_out[1]);
        kv_tensor_release(&tq); kv_tensor_release(&tk); kv_tensor_release(&tv);
        kv_tensor_release(&tbm);
        free(q); free(k); free(v); free(ro); free(rl);
    }
}

static void test_xattn(enum kv_bf16_route hw)
{
    const int64_t L = 700, D = 32, S = 8, BS = 64;
    int64_t sh[4] = {1, 2, L, D};
    struct kv_tensor q, k;
    kv_tensor_init(&q);
    kv_tensor_init(&k);
    kv_tensor_alloc(&q, KV_F32, 4, sh, 0, NULL);
    kv_tensor_alloc(&k, KV_F32, 4, sh, 0, NULL);
    float *qd = q.data, *kd = k.data;
    for (int64_t i = 0; i < 2 * L * D; i++) {
        /* bf16 values, so that reading them as bf16 is exact */
        qd[i] = kv_bf16_to_f32_ref(bf((float)(2.0 * urand() + (i % D == 3))));
        kd[i] = kv_bf16_to_f32_ref(bf((float)(2.0 * urand() + (i % D == 3))));
    }
    double thr[2] = {0.9, 0.9};
    struct kv_xattn_opts o;
    kv_xattn_opts_init(&o);
    o.stride = S;
    o.block_size = BS;
    o.thresholds = thr;
    o.nthreads = 2;
    struct kv_tensor m0, s0;
    struct kv_err e;
    kv_tensor_init(&m0);
    kv_tensor_init(&s0);
    int ok = kv_xattn_estimate(&q, &k, &o, &m0, &s0, NULL, &e) == 0;
    double A = kv_bound_xattn_A(&q, &k, 1.0);
    int64_t nq = (L + BS - 1) / BS, m_cols = (L + S - 1) / S, per = (BS / S) * (BS / S);
    double rel = kv_bound_xattn_sum(S, D, A, m_cols, per);
    enum kv_bf16_route routes[3] = {KV_BF16_MODEL_X86, KV_BF16_MODEL_ARM, hw};
    struct kv_tensor mx, sx;
    kv_tensor_init(&mx);
    kv_tensor_init(&sx);
    for (int ri = 0; ri < (hw != KV_BF16_NONE ? 3 : 2); ri++) {
        struct kv_tensor m1, s1;
        kv_tensor_init(&m1);
        kv_tensor_init(&s1);
        o.bf16_route = (int)routes[ri];
        int ok1 = ok && kv_xattn_estimate(&q, &k, &o, &m1, &s1, NULL, &e) == 0;
        /* the round-to-odd route's bound: the dot product term doubled,
         * at most twice the whole */
        double tol = (kv_bf16_route_odd(routes[ri]) ? 3.0 : 2.0) * rel, worst = 0.0;
        const float *a = s0.data, *b = s1.data;
        for (size_t i = 0; ok1 && i < kv_tensor_numel(&s0); i++)
            worst = fmax(worst, fabs(a[i] - b[i]) / (fabs(a[i]) + 1e-30));
        TAP_OK(ok1 && worst <= tol, "xattn estimate %dx%d blocks, %s: block sums within %.3g "
               "relative of sgemm's (worst %.3g)", (int)nq, (int)nq,
               kv_bf16_route_name(routes[ri]), tol, worst);
        if (ri == (kv_bf16_route_odd(hw) ? 1 : 0)) {
            kv_tensor_move(&mx, &m1);
            kv_tensor_move(&sx, &s1);
        } else if (ri == 2) {
            TAP_OK(ok1 && memcmp(mx.data, m1.data, m1.nbytes) == 0 &&
                   memcmp(sx.data, s1.data, s1.nbytes) == 0,
                   "xattn estimate: %s sums and mask equal its model's",
                   kv_bf16_route_name(routes[ri]));
        }
        kv_tensor_release(&m1);
        kv_tensor_release(&s1);
    }
    kv_tensor_release(&mx); kv_tensor_release(&sx);
    kv_tensor_release(&m0); kv_tensor_release(&s0);
    kv_tensor_release(&q); kv_tensor_release(&k);
}

/* ---- paged decode --------------------------------------------------- */

/* Paged decode with bf16 Q and cache: the decode kernels (the bf16 tiles
 * where the head dim allows, the widening kernels elsewhere) read keys
 * and values through the block table and ask for the ones ahead.  Request
 * lengths 0, 1, below and around a group of 16 keys, odd, several key
 * tiles and key chunks; head dims 64 to 256 and 80; 1 to 8 query heads a
 * kv head; one to four queries a request.  The block table is as large as
 * the longest request needs and no larger, the other requests' rows end
 * in -1, and every cache slot past a request's keys holds NaN: a key or
 * value read past the end, or a block looked up past a request's last,
 * shows (ASan: a read past the table).  Against a float64 reference within
 * the bound; the instruction equal to its model bit for bit. */
struct pcase {
    const char *name;
    int Hq, Hkv, D, page, nreq, window;
    int64_t seq[6], ql[6];
};

static void test_paged_decode(enum kv_bf16_route hw)
{
    static const struct pcase cases[] = {
        {"D 128, GQA 8/2, lengths 0 1 15 16 17 33", 8, 2, 128, 16, 6, 0,
         {0, 1, 15, 16, 17, 33}, {1, 1, 1, 1, 1, 1}},
        {"D 64, MHA 2/2, pages of 8, lengths 5 47 and 3 queries", 2, 2, 64, 8, 2, 0,
         {5, 47}, {1, 3}},
        {"D 96, GQA 4/2, lengths 7 and 1100", 4, 2, 96, 16, 2, 0, {7, 1100}, {1, 1}},
        {"D 192, GQA 7/1, lengths 31 and 545, 2 queries", 7, 1, 192, 32, 2, 0,
         {31, 545}, {2, 1}},
        {"D 256, GQA 16/2, lengths 4500 (two chunks) and 3", 16, 2, 256, 16, 2, 0,
         {4500, 3}, {1, 1}},
        {"D 80 (widening kernels), GQA 6/2, lengths 2 and 70", 6, 2, 80, 16, 2, 0,
         {2, 70}, {1, 4}},
        {"D 128, GQA 2/1, window 40, lengths 100 and 9", 2, 1, 128, 16, 2, 40,
         {100, 9}, {1, 2}},
    };
    enum kv_bf16_route routes[2] = {KV_BF16_MODEL_X86, hw};
    int n_routes = hw == KV_BF16_AVX512 ? 2 : 1;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const struct pcase *c = &cases[ci];
        const int64_t B = c->nreq, Hq = c->Hq, Hkv = c->Hkv, D = c->D, pg = c->page;
        int64_t cols = 1, nblk = 2, T = 0, Lm = 1;
        for (int64_t b = 0; b < B; b++) {
            int64_t need = (c->seq[b] + pg - 1) / pg;
            cols = need > cols ? need : cols;
            nblk += need;
            T += c->ql[b];
            Lm = c->seq[b] > Lm ? c->seq[b] : Lm;
        }
        /* the blocks in a shuffled order, -1 past each request's last */
        int64_t *bt = malloc(sizeof(int64_t) * (size_t)(B * cols));
        int64_t *perm = malloc(sizeof(int64_t) * (size_t)nblk);
        for (int64_t i = 0; i < nblk; i++)
            perm[i] = i;
        for (int64_t i = nblk - 1; i > 0; i--) {
            int64_t j = rnd32() % (uint32_t)(i + 1), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t b = 0, at = 0; b < B; b++)
            for (int64_t k = 0; k < cols; k++)
                bt[b * cols + k] = k < (c->seq[b] + pg - 1) / pg ? perm[at++] : -1;
        struct kv_tensor cache, q;
        kv_tensor_init(&cache);
        kv_tensor_init(&q);
        int64_t cs[5] = {2, nblk, pg, Hkv, D}, qs[3] = {T, Hq, D};
        kv_tensor_alloc(&cache, KV_BF16, 5, cs, 0, NULL);
        kv_tensor_alloc(&q, KV_BF16, 3, qs, 0, NULL);
        uint16_t *cd = cache.data, *qd = q.data;
        for (size_t i = 0; i < kv_tensor_numel(&cache); i++)
            cd[i] = 0x7fc0;                         /* NaN where no key is */
        double *kr = malloc(sizeof(double) * (size_t)(B * Lm * Hkv * D));
        double *vr = malloc(sizeof(double) * (size_t)(B * Lm * Hkv * D));
        double *qr = malloc(sizeof(double) * (size_t)(T * Hq * D));
        double qn = 0.0, kn = 0.0, V = 0.0, qm = 0.0, km = 0.0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < c->seq[b]; j++)
                for (int64_t h = 0; h < Hkv; h++) {
                    int64_t blk = bt[b * cols + j / pg];
                    size_t ko = (size_t)(((blk * pg + j % pg) * Hkv + h) * D);
                    size_t vo = ko + (size_t)(nblk * pg * Hkv * D);
                    double n2 = 0.0;
                    for (int64_t d = 0; d < D; d++) {
                        uint16_t kb = bf((float)(2.0 * urand())), vb = bf((float)(1.5 * urand()));
                        cd[ko + d] = kb;
                        cd[vo + d] = vb;
                        size_t r = (size_t)(((b * Lm + j) * Hkv + h) * D + d);
                        kr[r] = kv_bf16_to_f32_ref(kb);
                        vr[r] = kv_bf16_to_f32_ref(vb);
                        n2 += kr[r] * kr[r];
                        V = fmax(V, fabs(vr[r]));
                        km = fmax(km, fabs(kr[r]));
                    }
                    kn = fmax(kn, sqrt(n2));
                }
        for (int64_t t = 0; t < T * Hq; t++) {
            double n2 = 0.0;
            for (int64_t d = 0; d < D; d++) {
                qd[t * D + d] = bf((float)(2.0 * urand()));
                qr[t * D + d] = kv_bf16_to_f32_ref(qd[t * D + d]);
                n2 += qr[t * D + d] * qr[t * D + d];
                qm = fmax(qm, fabs(qr[t * D + d]));
            }
            qn = fmax(qn, sqrt(n2));
        }
        /* the float64 reference, bottom-right causal */
        const double scale = 1.0 / sqrt((double)D);
        double *ro = calloc((size_t)(T * Hq * D), sizeof(double));
        double *rl = malloc(sizeof(double) * (size_t)(T * Hq));
        double *s = malloc(sizeof(double) * (size_t)Lm);
        int64_t nmax = 1;
        for (int64_t b = 0, t0 = 0; b < B; t0 += c->ql[b], b++)
            for (int64_t i = 0; i < c->ql[b]; i++)
                for (int64_t h = 0; h < Hq; h++) {
                    int64_t pos = i + c->seq[b] - c->ql[b], g = h / (Hq / Hkv);
                    const double *qv = qr + ((t0 + i) * Hq + h) * D;
                    double mx = -INFINITY, sum = 0.0, *o = ro + ((t0 + i) * Hq + h) * D;
                    nmax = c->seq[b] > nmax ? c->seq[b] : nmax;
                    for (int64_t j = 0; j < c->seq[b]; j++) {
                        double dot = 0.0;
                        for (int64_t d = 0; d < D; d++)
                            dot += qv[d] * kr[((b * Lm + j) * Hkv + g) * D + d];
                        int ok = j <= pos && (!c->window || j > pos - c->window);
                        s[j] = ok ? dot * scale : -INFINITY;
                        mx = fmax(mx, s[j]);
                    }
                    rl[(t0 + i) * Hq + h] = -INFINITY;
                    if (mx == -INFINITY)
                        continue;
                    for (int64_t j = 0; j < c->seq[b]; j++) {
                        if (s[j] == -INFINITY)
                            continue;
                        double w = exp(s[j] - mx);
                        sum += w;
                        for (int64_t d = 0; d < D; d++)
                            o[d] += w * vr[((b * Lm + j) * Hkv + g) * D + d];
                    }
                    for (int64_t d = 0; d < D; d++)
                        o[d] /= sum;
                    rl[(t0 + i) * Hq + h] = mx + log(sum);
                }
        double A = scale * qn * kn * (1.0 + 1e-12), X = (fmax(qm, km) + 1.0) * scale;
        struct kv_tensor model_out;
        kv_tensor_init(&model_out);
        for (int ri = 0; ri < n_routes; ri++)
            for (int p_f32 = 0; p_f32 < 2; p_f32++) {
                struct kv_attn_req r;
                struct kv_tensor out, lse;
                struct kv_err e;
                memset(&r, 0, sizeof r);
                kv_tensor_init(&out);
                kv_tensor_init(&lse);
                r.layout = KV_ATTN_THD;
                r.q = &q;
                r.kv_cache = &cache;
                r.block_table = bt;
                r.bt_rows = (size_t)B;
                r.bt_cols = (size_t)cols;
                r.seq_lens = c->seq;
                r.n_seq_lens = (size_t)B;
                r.q_lens = c->ql;
                r.n_q_lens = (size_t)B;
                r.causal = 1;
                r.window = c->window;
                r.out_dtype = KV_F32;
                r.n_threads = 2;
                r.bf16_route = (int)routes[ri];
                r.p_f32 = p_f32;
                double err = INFINITY, lerr = INFINITY, bl = 0.0;
                if (kv_attn_run(&r, &out, &lse, &e) < 0) {
                    printf("# %s\n", e.msg);
                } else {
                    const float *o = out.data, *l = lse.data;
                    err = lerr = 0.0;
                    for (int64_t x = 0; x < T * Hq * D; x++)
                        err = fmax(err, isnan(o[x]) ? INFINITY : fabs(o[x] - ro[x]));
                    for (int64_t x = 0; x < T * Hq; x++) {
                        if (isinf(rl[x]))
                            lerr = fmax(lerr, l[x] == rl[x] ? 0.0 : INFINITY);
                        else
                            lerr = fmax(lerr, isnan(l[x]) ? INFINITY : fabs(l[x] - rl[x]));
                        if (isfinite(rl[x]))
                            bl = fmax(bl, kv_bound_attn_lse_bf16(nmax, D, A, fabs(rl[x]), X, 0, 0));
                    }
                }
                double bo = kv_bound_attn_out_bf16(nmax, D, A, V, X, KV_F32, 0, !p_f32);
                TAP_OK(err <= bo && lerr <= bl, "paged decode, %s, %s, P %s: error %.3g "
                       "(bound %.3g), lse %.3g (%.3g)", c->name, kv_bf16_route_name(routes[ri]),
                       p_f32 ? "f32" : "bf16", err, bo, lerr, bl);
                if (ri == 0 && p_f32 == 0) {
                    kv_tensor_move(&model_out, &out);
                } else if (ri == 1 && p_f32 == 0) {
                    TAP_OK(model_out.nbytes == out.nbytes &&
                           memcmp(model_out.data, out.data, out.nbytes) == 0,
                           "paged decode, %s: %s equals its model bit for bit", c->name,
                           kv_bf16_route_name(routes[ri]));
                }
                kv_tensor_release(&out);
                kv_tensor_release(&lse);
            }
        kv_tensor_release(&model_out);
        kv_tensor_release(&cache);
        kv_tensor_release(&q);
        free(bt); free(perm); free(kr); free(vr); free(qr); free(ro); free(rl); free(s);
    }
}

/* kvxattn's estimate over geometries the strip tiling must get right:
 * compat chunks of 48 reshaped columns (a tile's score rows start at
 * column 336, inside a panel), a last group padded (Lk % S != 0) with an
 * odd S D (sdp > sd), non-causal, a q offset with GQA and two batches.
 * Each route against the f32 path within the bounds (as test_xattn), the
 * same bits for -j 1, 2 and 3, the instruction equal to its model. */
static void test_xattn_geoms(enum kv_bf16_route hw)
{
    static const struct {
        int64_t nb, hq, hkv, lq, lk, d, s, bs, chunk, qoff;
        int causal;
    } cs[] = {
        {1, 2, 1, 1152, 1536, 16, 4, 64, 192, -1, 1},
        {1, 4, 2, 300, 517, 15, 5, 20, 0, -1, 0},
        {2, 2, 1, 500, 1520, 24, 3, 24, 0, 720, 1},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t shq[4] = {cs[c].nb, cs[c].hq, cs[c].lq, cs[c].d};
        int64_t shk[4] = {cs[c].nb, cs[c].hkv, cs[c].lk, cs[c].d};
        struct kv_tensor q, k, m0, s0;
        struct kv_err e;
        kv_tensor_init(&q);
        kv_tensor_init(&k);
        kv_tensor_init(&m0);
        kv_tensor_init(&s0);
        kv_tensor_alloc(&q, KV_F32, 4, shq, 0, NULL);
        kv_tensor_alloc(&k, KV_F32, 4, shk, 0, NULL);
        float *qd = q.data, *kd = k.data;
        for (size_t i = 0; i < kv_tensor_numel(&q); i++)
            qd[i] = kv_bf16_to_f32_ref(bf((float)(2.0 * urand() + (i % 5 == 1))));
        for (size_t i = 0; i < kv_tensor_numel(&k); i++)
            kd[i] = kv_bf16_to_f32_ref(bf((float)(2.0 * urand() + (i % 5 == 1))));
        double thr[4] = {0.9, 0.8, 0.95, 0.9};
        struct kv_xattn_opts o;
        kv_xattn_opts_init(&o);
        o.stride = cs[c].s;
        o.block_size = cs[c].bs;
        o.compat_chunk = cs[c].chunk;
        o.causal = cs[c].causal;
        if (cs[c].qoff >= 0)
            o.q_offset = cs[c].qoff;
        o.thresholds = thr;
        o.nthreads = 2;
        int ok = kv_xattn_estimate(&q, &k, &o, &m0, &s0, NULL, &e) == 0;
        int64_t lkp = cs[c].chunk ? (cs[c].lk + cs[c].chunk - 1) / cs[c].chunk * cs[c].chunk
                                  : cs[c].lk;
        int64_t cols = (lkp + cs[c].s - 1) / cs[c].s;
        int64_t per = (cs[c].bs / cs[c].s) * (cs[c].bs / cs[c].s);
        double rel = kv_bound_xattn_sum(cs[c].s, cs[c].d, kv_bound_xattn_A(&q, &k, 1.0),
                                        cols, per);
        enum kv_bf16_route routes[3] = {KV_BF16_MODEL_X86, KV_BF16_MODEL_ARM, hw};
        struct kv_tensor mm[2], sm[2];     /* the models' -j 1 results */
        for (int i = 0; i < 2; i++) {
            kv_tensor_init(&mm[i]);
            kv_tensor_init(&sm[i]);
        }
        for (int ri = 0; ri < (hw != KV_BF16_NONE ? 3 : 2); ri++) {
            double tol = (kv_bf16_route_odd(routes[ri]) ? 3.0 : 2.0) * rel, worst = 0.0;
            int same_j = 1, okr = ok;
            struct kv_tensor m1, s1;
            kv_tensor_init(&m1);
            kv_tensor_init(&s1);
            o.bf16_route = (int)routes[ri];
            for (int j = 1; j <= 3; j++) {
                struct kv_tensor m2, s2;
                kv_tensor_init(&m2);
                kv_tensor_init(&s2);
                o.nthreads = j;
                okr &= kv_xattn_estimate(&q, &k, &o, &m2, &s2, NULL, &e) == 0;
                if (j == 1) {
                    kv_tensor_move(&m1, &m2);
                    kv_tensor_move(&s1, &s2);
                    continue;
                }
                same_j &= okr && memcmp(m1.data, m2.data, m1.nbytes) == 0 &&
                          memcmp(s1.data, s2.data, s1.nbytes) == 0;
                kv_tensor_release(&m2);
                kv_tensor_release(&s2);
            }
            const float *a = s0.data, *b = s1.data;
            for (size_t i = 0; okr && i < kv_tensor_numel(&s0); i++)
                worst = fmax(worst, fabs(a[i] - b[i]) / (fabs(a[i]) + 1e-30));
            TAP_OK(okr && worst <= tol && same_j, "xattn estimate, geometry %d, %s: block sums "
                   "within %.3g relative of sgemm's (worst %.3g), -j 1, 2, 3 %s", (int)c,
                   kv_bf16_route_name(routes[ri]), tol, worst,
                   same_j ? "the same bits" : "DIFFER");
            if (ri < 2) {
                kv_tensor_move(&mm[ri], &m1);
                kv_tensor_move(&sm[ri], &s1);
            } else {
                int mi = kv_bf16_route_odd(hw) ? 1 : 0;
                TAP_OK(okr && memcmp(mm[mi].data, m1.data, m1.nbytes) == 0 &&
                       memcmp(sm[mi].data, s1.data, s1.nbytes) == 0,
                       "xattn estimate, geometry %d: %s sums and mask equal its model's",
                       (int)c, kv_bf16_route_name(hw));
            }
            kv_tensor_release(&m1);
            kv_tensor_release(&s1);
        }
        for (int i = 0; i < 2; i++) {
            kv_tensor_release(&mm[i]);
            kv_tensor_release(&sm[i]);
        }
        kv_tensor_release(&m0); kv_tensor_release(&s0);
        kv_tensor_release(&q); kv_tensor_release(&k);
    }
}

/* kv_bf16_pack_panel against kv_bf16_pack_col, column by column: even
 * and odd d, a d of whole and partial 16-pair blocks, a partial panel
 * (its missing columns zero). */
static void test_pack_panel(void)
{
    static const struct { int64_t d; int n; } cs[] = {
        {64, 32}, {63, 32}, {1024, 32}, {15, 7}, {2, 1}, {33, 31}, {1, 32},
    };
    int bad = 0;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int64_t d = cs[c].d, kp = (d + 1) / 2, ps = 32 * kp;
        uint16_t *src = malloc((size_t)(32 * d) * sizeof(uint16_t));
        uint32_t *p1 = malloc((size_t)ps * sizeof(uint32_t));
        uint32_t *p2 = malloc((size_t)ps * sizeof(uint32_t));
        const uint16_t *rows[32];
        for (int64_t i = 0; i < 32 * d; i++)
            src[i] = rand_bf16();
        for (int j = 0; j < 32; j++)
            rows[j] = src + j * d;
        for (int64_t i = 0; i < ps; i++) {
            p1[i] = 0;
            p2[i] = rnd32();
        }
        for (int j = 0; j < cs[c].n; j++)
            kv_bf16_pack_col(p1, ps, j, rows[j], d);
        kv_bf16_pack_panel(p2, rows, cs[c].n, d);
        bad += memcmp(p1, p2, (size_t)ps * sizeof(uint32_t)) != 0;
        free(src);
        free(p1);
        free(p2);
    }
    TAP_OK(bad == 0, "whole-panel packing equals column packing (%d of %d panels differ)",
           bad, (int)(sizeof cs / sizeof cs[0]));
}

int main(void)
{
    test_models();
    test_kernel(KV_BF16_MODEL_X86, kv_bf16_dot2_x86);
    test_kernel(KV_BF16_MODEL_ARM, kv_bf16_dot2_arm);
    enum kv_bf16_route hw = kv_bf16_route_best();
    printf("# instruction route on this CPU: %s\n", kv_bf16_route_name(hw));
    if (hw == KV_BF16_AVX512) {
        test_kernel(hw, kv_bf16_dot2_x86);
        test_hardware(hw, KV_BF16_MODEL_X86);
    } else if (hw == KV_BF16_NEON) {
        test_kernel(hw, kv_bf16_dot2_arm);
        test_hardware(hw, KV_BF16_MODEL_ARM);
    }
    test_mmla(hw);
    test_dec_qk(hw);
    test_dec_pv(hw);
    test_attention(hw);
    test_paged_decode(hw);
    test_xattn(hw);
    test_xattn_geoms(hw);
    test_pack_panel();
    return tap_done();
}
