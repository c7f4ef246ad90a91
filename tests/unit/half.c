/* half.c - f16/bf16 conversion: every 16-bit pattern through the reference
 * and the fast path, checked against each other and against independent
 * facts (exactly representable values, rounding ties, signed zeros). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "core/half.h"
#include "core/isa.h"
#include "tap.h"

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* XXH64 of values of w bytes each, serialised little-endian, so the golden
 * hashes below hold on any byte order. */
static unsigned long long hash_le(const void *vals, size_t n, int w)
{
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t v = w == 4 ? ((const uint32_t *)vals)[i] : ((const uint16_t *)vals)[i];
        unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                              (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
        XXH64_update(st, b, (size_t)w);
    }
    unsigned long long h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

/* A conversion's whole output, pinned: the same bits on every CPU, vector
 * level and architecture (the values were computed once and are kept). */
static void golden(const char *what, const void *vals, size_t n, int w,
                   unsigned long long want)
{
    unsigned long long h = hash_le(vals, n, w);
    TAP_OK(h == want, "%s: golden XXH64 %016llx (got %016llx)", what, want, h);
}
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* An independent f16 decoder: value = (-1)^s * 2^(e-15) * (1 + m/1024). */
static double f16_value(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}


/* The finite scans against isfinite(): every bf16 pattern at positions
 * of a run of 70 finite values on either side of the vector boundaries
 * (the unrolled bodies, the partial vectors and the scalar tails of both
 * widths), and every f32 exponent and sign with scrambled mantissas (the
 * NaN and infinity encodings among them), and prefixes without the
 * pattern, at the generic level and at the best one allowed. */
static void test_nonfinite(void)
{
    enum kv_isa lv[2] = {KV_ISA_GENERIC, kv_isa_best()};
    for (int l = 0; l < 2; l++) {
        uint16_t h[70];
        float f[70];
        long bad = 0, tried = 0;
        kv_isa_set_cap(lv[l]);
        for (int n = 0; n <= 70; n += 7) {
            for (int i = 0; i < 70; i++) {
                h[i] = (uint16_t)(0x3f80 + i);
                f[i] = 1.0f + (float)i;
            }
            bad += kv_bf16_nonfinite_n(h, (size_t)n) != 0;
            bad += kv_f32_nonfinite_n(f, (size_t)n) != 0;
            tried += 2;
        }
        static const int at[] = {0, 1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 69};
        for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
            int pos = at[a];
            for (int i = 0; i < 70; i++) {
                h[i] = (uint16_t)(0x3f80 + i);
                f[i] = 1.0f + (float)i;
            }
            for (uint32_t p = 0; p < 65536; p++) {
                uint32_t u = p << 16 | (p * 2654435761u >> 16);
                float x = kv_bf16_to_f32_ref((uint16_t)p), y;
                int want = !isfinite(x);
                memcpy(&y, &u, 4);
                h[pos] = (uint16_t)p;
                f[pos] = y;
                bad += kv_bf16_nonfinite_n(h, 70) != want;
                bad += kv_bf16_nonfinite_n(h, (size_t)pos) != 0;
                bad += kv_f32_nonfinite_n(f, 70) != !isfinite(y);
                tried += 3;
            }
        }
        TAP_OK(bad == 0, "finite scans = isfinite() at level %s: %ld of %ld cases differ",
               kv_isa_name(lv[l]), bad, tried);
    }
    kv_isa_set_cap(lv[1]);
}

int main(void)
{
    static uint16_t pats[65536];
    static float ref[65536], fast[65536];
    static uint16_t back_ref[65536], back_fast[65536];
    int bad, i;

    for (i = 0; i < 65536; i++)
        pats[i] = (uint16_t)i;

    /* f16 -> f32 */
    for (i = 0; i < 65536; i++)
        ref[i] = kv_f16_to_f32_ref(pats[i]);
    kv_f16_to_f32_n(pats, fast, 65536);
    bad = 0;
    for (i = 0; i < 65536; i++)
        if (f2u(ref[i]) != f2u(fast[i]))
            bad++;
    TAP_OK(bad == 0, "f16->f32 fast path equals reference on all 65536 "
           "patterns (%d differ, features %u)", bad, kv_half_features());
    bad = 0;
    for (i = 0; i < 65536; i++) {
        int e = (i >> 10) & 31;
        if (e == 31)
            continue;
        if ((double)ref[i] != f16_value((uint16_t)i) ||
            !!signbit(ref[i]) != (i >> 15))
            bad++;
    }
    golden("f16->f32 of every pattern", fast, 65536, 4, 0x98e984cccc3d64e4ull);
    TAP_OK(bad == 0, "f16->f32 gives the exact value of every finite "
           "pattern, signed zeros included (%d wrong)", bad);
    TAP_OK(isinf(ref[0x7c00]) && ref[0x7c00] > 0 && isinf(ref[0xfc00]) &&
           ref[0xfc00] < 0, "f16 infinities");
    bad = 0;
    for (i = 0; i < 65536; i++)
        if (((i >> 10) & 31) == 31 && (i & 1023) &&
            !(isnan(ref[i]) && !!signbit(ref[i]) == (i >> 15)))
            bad++;
    TAP_OK(bad == 0, "f16 NaNs stay NaN with their sign");

    /* f32 -> f16 round trip of every f16 pattern */
    kv_f32_to_f16_n(ref, back_fast, 65536);
    for (i = 0; i < 65536; i++)
        back_ref[i] = kv_f32_to_f16_ref(ref[i]);
    bad = 0;
    for (i = 0; i < 65536; i++) {
        int nan = ((i >> 10) & 31) == 31 && (i & 1023);
        uint16_t want = nan ? (uint16_t)(i | 0x200) : (uint16_t)i;
        if (back_ref[i] != want || back_fast[i] != want)
            bad++;
    }
    TAP_OK(bad == 0, "f16 -> f32 -> f16 round trip, both paths (%d wrong)",
           bad);

    /* ties to even: midpoints between consecutive finite f16 values */
    {
        static float mid[65536];
        static uint16_t r1[65536], r2[65536];
        int n = 0, wrong = 0;
        for (i = 0; i < 0x7bff; i++) {
            double a = f16_value((uint16_t)i), b = f16_value((uint16_t)(i + 1));
            mid[n++] = (float)((a + b) / 2);
        }
        kv_f32_to_f16_n(mid, r2, (size_t)n);
        for (i = 0; i < n; i++) {
            r1[i] = kv_f32_to_f16_ref(mid[i]);
            uint16_t even = (i & 1) ? (uint16_t)(i + 1) : (uint16_t)i;
            if (r1[i] != even || r2[i] != even)
                wrong++;
        }
        TAP_OK(wrong == 0, "f32->f16 midpoints round to even, both paths "
               "(%d wrong of %d)", wrong, n);
    }
    TAP_OK(kv_f32_to_f16_ref(65520.0f) == 0x7c00 &&
           kv_f32_to_f16_ref(65519.99f) == 0x7bff,
           "f32->f16 overflow threshold 65520 rounds to inf");
    TAP_OK(kv_f32_to_f16_ref(-0.0f) == 0x8000 &&
           kv_f32_to_f16_ref(-1e-10f) == 0x8000,
           "f32->f16 keeps the sign of zero and of underflow");
    TAP_OK(kv_f32_to_f16_ref(-3.4028234663852886e38f) == 0xfc00,
           "finfo(float32).min becomes -inf in f16");

    /* random f32 patterns: fast == reference */
    {
        static float rnd[1 << 20];
        static uint16_t a[1 << 20], b[1 << 20];
        uint64_t x = 88172645463325252ull;
        int n = 1 << 20, wrong = 0;
        for (i = 0; i < n; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            rnd[i] = u2f((uint32_t)x);
        }
        kv_f32_to_f16_n(rnd, a, (size_t)n);
        for (i = 0; i < n; i++)
            if (a[i] != kv_f32_to_f16_ref(rnd[i]))
                wrong++;
        TAP_OK(wrong == 0, "f32->f16 fast == reference on 2^20 random "
               "patterns (%d differ)", wrong);
        kv_f32_to_bf16_n(rnd, b, (size_t)n);
        wrong = 0;
        for (i = 0; i < n; i++)
            if (b[i] != kv_f32_to_bf16_ref(rnd[i]))
                wrong++;
        TAP_OK(wrong == 0, "f32->bf16 fast == reference on 2^20 random "
               "patterns (%d differ)", wrong);
        golden("f32->f16 of the 2^20 random patterns", a, (size_t)n, 2,
               0xc1b6f56bcc07b51bull);
        golden("f32->bf16 of the 2^20 random patterns", b, (size_t)n, 2,
               0x9029da653c4fb030ull);
    }

    /* bf16 */
    kv_bf16_to_f32_n(pats, fast, 65536);
    bad = 0;
    for (i = 0; i < 65536; i++)
        if (f2u(fast[i]) != f2u(kv_bf16_to_f32_ref(pats[i])))
            bad++;
    TAP_OK(bad == 0, "bf16->f32 fast == reference on all 65536 patterns");
    golden("bf16->f32 of every pattern", fast, 65536, 4, 0xd002f84f17921a7aull);
    bad = 0;
    for (i = 0; i < 65536; i++) {
        float f = kv_bf16_to_f32_ref((uint16_t)i);
        int nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f);
        if (!nan && f2u(f) != (uint32_t)i << 16)
            bad++;
        uint16_t want = nan ? (uint16_t)(i | 0x40) : (uint16_t)i;
        if (kv_f32_to_bf16_ref(f) != want)
            bad++;
    }
    kv_f32_to_bf16_n(fast, back_fast, 65536);
    for (i = 0; i < 65536; i++) {
        int nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f);
        if (back_fast[i] != (nan ? (uint16_t)(i | 0x40) : (uint16_t)i))
            bad++;
    }
    TAP_OK(bad == 0, "bf16 -> f32 -> bf16 round trip, both paths");
    TAP_OK(kv_f32_to_bf16_ref(-10000.0f) == kv_f32_to_bf16_ref(-9984.0f) &&
           kv_bf16_to_f32_ref(kv_f32_to_bf16_ref(-10000.0f)) == -9984.0f,
           "bf16(-10000) is -9984");
    TAP_OK(kv_f32_to_bf16_ref(u2f(0x3f808000)) == 0x3f80 &&
           kv_f32_to_bf16_ref(u2f(0x3f818000)) == 0x3f82 &&
           kv_f32_to_bf16_ref(u2f(0x3f808001)) == 0x3f81,
           "f32->bf16 ties to even, above-tie rounds up");

    /* scalar-forced bulk path equals the default one */
    kv_half_force_scalar(1);
    kv_f16_to_f32_n(pats, fast, 65536);
    kv_half_force_scalar(0);
    bad = 0;
    for (i = 0; i < 65536; i++)
        if (f2u(fast[i]) != f2u(ref[i]))
            bad++;
    TAP_OK(bad == 0, "forced scalar bulk path equals the reference");
    test_nonfinite();
    return tap_done();
}
