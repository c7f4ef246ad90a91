/* fp8.c - the FP8 formats against independent facts: the decoded values
 * against the formats' definitions (largest, smallest, infinities, NaN),
 * every byte round-tripped, and the rounding of random and adversarial f32
 * values against a brute-force search for the nearest byte (ties to the
 * even byte), with saturation, signed zeros and NaN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/fp8.h"
#include "tap.h"

static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* The nearest finite byte to x by search over every finite byte of the
 * same sign (ties: the byte whose mantissa is even), after saturation. */
static uint8_t nearest(float x, enum kv_fp8 t)
{
    if (isnan(x))
        return (uint8_t)((signbit(x) ? 0x80 : 0) | 0x7f);
    double a = fabs((double)x), mx = kv_fp8_max(t);
    if (a > mx)
        a = mx;
    int best = -1;
    double bd = 0;
    for (int b = 0; b < 128; b++) {
        double v = kv_fp8_to_f32((uint8_t)b, t);
        if (!isfinite(v))
            continue;
        double d = fabs(v - a);
        if (best < 0 || d < bd || (d == bd && (b & 1) == 0 && (best & 1))) {
            best = b;
            bd = d;
        }
    }
    return (uint8_t)((signbit(x) ? 0x80 : 0) | best);
}

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    return rng;
}

int main(void)
{
    const enum kv_fp8 ts[2] = { KV_FP8_E4M3, KV_FP8_E5M2 };
    TAP_OK(kv_fp8_to_f32(0x7e, KV_FP8_E4M3) == 448.0f, "e4m3 0x7e is 448");
    TAP_OK(isnan(kv_fp8_to_f32(0x7f, KV_FP8_E4M3)) &&
           isnan(kv_fp8_to_f32(0xff, KV_FP8_E4M3)), "e4m3 0x7f, 0xff are NaN");
    TAP_OK(kv_fp8_to_f32(0x01, KV_FP8_E4M3) == ldexpf(1, -9),
           "e4m3 smallest subnormal 2^-9");
    TAP_OK(kv_fp8_to_f32(0x08, KV_FP8_E4M3) == ldexpf(1, -6),
           "e4m3 smallest normal 2^-6");
    TAP_OK(kv_fp8_to_f32(0x38, KV_FP8_E4M3) == 1.0f, "e4m3 0x38 is 1");
    TAP_OK(kv_fp8_to_f32(0x7b, KV_FP8_E5M2) == 57344.0f, "e5m2 0x7b is 57344");
    TAP_OK(kv_fp8_to_f32(0x7c, KV_FP8_E5M2) == INFINITY &&
           kv_fp8_to_f32(0xfc, KV_FP8_E5M2) == -INFINITY, "e5m2 0x7c/0xfc are +-inf");
    TAP_OK(isnan(kv_fp8_to_f32(0x7d, KV_FP8_E5M2)), "e5m2 0x7d is NaN");
    TAP_OK(kv_fp8_to_f32(0x01, KV_FP8_E5M2) == ldexpf(1, -16),
           "e5m2 smallest subnormal 2^-16");
    TAP_OK(kv_fp8_to_f32(0x3c, KV_FP8_E5M2) == 1.0f, "e5m2 0x3c is 1");

    for (int ti = 0; ti < 2; ti++) {
        enum kv_fp8 t = ts[ti];
        const char *nm = kv_fp8_name(t);
        int bad = 0;
        for (int b = 0; b < 256; b++) {
            float v = kv_fp8_to_f32((uint8_t)b, t);
            if (isnan(v) || isinf(v))
                continue;
            if (kv_fp8_from_f32(v, t) != b)
                bad++;
        }
        TAP_OK(bad == 0, "%s: every finite byte round-trips (%d wrong)", nm, bad);
        TAP_OK(kv_fp8_from_f32(INFINITY, t) == (t == KV_FP8_E4M3 ? 0x7e : 0x7b) &&
               kv_fp8_from_f32(-1e30f, t) == (t == KV_FP8_E4M3 ? 0xfe : 0xfb),
               "%s: infinities and large values saturate to +-max", nm);
        TAP_OK(kv_fp8_from_f32(NAN, t) == 0x7f &&
               kv_fp8_from_f32(-NAN, t) == 0xff, "%s: NaN is 0x7f | sign", nm);
        TAP_OK(kv_fp8_from_f32(-0.0f, t) == 0x80 && kv_fp8_from_f32(0.0f, t) == 0,
               "%s: signed zeros kept", nm);
        /* Midpoints between neighbouring bytes: ties go to the even byte. */
        int ties = 0, tie_bad = 0;
        for (int b = 0; b < 127; b++) {
            float lo = kv_fp8_to_f32((uint8_t)b, t), hi = kv_fp8_to_f32((uint8_t)(b + 1), t);
            if (!isfinite(lo) || !isfinite(hi))
                continue;
            float mid = (float)(((double)lo + hi) / 2);
            ties++;
            uint8_t want = (b & 1) ? (uint8_t)(b + 1) : (uint8_t)b;
            if (kv_fp8_from_f32(mid, t) != want || kv_fp8_from_f32(-mid, t) != (want | 0x80))
                tie_bad++;
        }
        TAP_OK(tie_bad == 0, "%s: %d midpoints round to the even byte (%d wrong)",
               nm, ties, tie_bad);
        /* Random bit patterns in the format's range and beyond, and values
         * a hair either side of midpoints. */
        int n = 0, wrong = 0;
        for (int i = 0; i < 200000; i++) {
            uint32_t u = next();
            /* exponents from 2^-30 to 2^20 */
            uint32_t ex = 97 + next() % 51;
            u = (u & 0x807fffffu) | ex << 23;
            float x = u2f(u);
            n++;
            if (kv_fp8_from_f32(x, t) != nearest(x, t))
                wrong++;
        }
        for (int b = 0; b < 127; b++) {
            float lo = kv_fp8_to_f32((uint8_t)b, t), hi = kv_fp8_to_f32((uint8_t)(b + 1), t);
            if (!isfinite(lo) || !isfinite(hi))
                continue;
            float mid = (float)(((double)lo + hi) / 2);
            float xs[2] = { nextafterf(mid, 0), nextafterf(mid, INFINITY) };
            for (int j = 0; j < 2; j++) {
                n++;
                if (kv_fp8_from_f32(xs[j], t) != nearest(xs[j], t))
                    wrong++;
            }
        }
        TAP_OK(wrong == 0, "%s: %d values equal the nearest-byte search (%d wrong)",
               nm, n, wrong);
        /* Quantize and dequantize a tensor with a scale. */
        struct kv_tensor s;
        kv_tensor_init(&s);
        int64_t shape[1] = { 64 };
        struct kv_err e = {{0}};
        kv_tensor_alloc(&s, KV_F32, 1, shape, 0, &e);
        float *x = s.data;
        for (int i = 0; i < 64; i++)
            x[i] = (float)((int)(next() % 2001) - 1000) / 7.0f;
        uint8_t q[64];
        float y[64];
        float scale = 0.37f;
        kv_fp8_quantize(&s, 0, 64, scale, t, q);
        kv_fp8_dequantize(q, 64, scale, t, y);
        int qbad = 0;
        for (int i = 0; i < 64; i++)
            if (q[i] != nearest(x[i] / scale, t) ||
                y[i] != kv_fp8_to_f32(q[i], t) * scale)
                qbad++;
        TAP_OK(qbad == 0, "%s: quantize x / scale and dequantize q * scale (%d wrong)",
               nm, qbad);
        kv_tensor_release(&s);
    }
    struct kv_err e = {{0}};
    enum kv_fp8 t;
    TAP_OK(kv_fp8_parse("fp8", &t, &e) == 0 && t == KV_FP8_E4M3, "'fp8' is e4m3");
    TAP_OK(kv_fp8_parse("fp8_e5m2", &t, &e) == 0 && t == KV_FP8_E5M2, "'fp8_e5m2'");
    TAP_OK(kv_fp8_parse("fp8_e4m3fnuz", &t, &e) < 0, "unknown format refused");
    TAP_OK(kv_fp8_scale_check(0, "--k-scale", &e) < 0 &&
           kv_fp8_scale_check(NAN, "--k-scale", &e) < 0 &&
           kv_fp8_scale_check(1e-50, "--k-scale", &e) < 0 &&
           kv_fp8_scale_check(1e300, "--k-scale", &e) < 0 &&
           kv_fp8_scale_check(0.5, "--k-scale", &e) == 0, "scales: finite and > 0 in f32");
    return tap_done();
}
