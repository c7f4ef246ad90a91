/* fp8.c - FP8 (e4m3, e5m2) bytes from and to f32, and the per-tensor
 * quantization of a KV cache (see fp8.h for the formats and the rule).
 *
 * The conversion works on the value, not on bit tricks: a finite |x| no
 * larger than the format's maximum is divided by the spacing of the format
 * at its binade (a power of two, so the quotient is exact in double),
 * rounded to the nearest integer with ties to even (nearbyint in the
 * default rounding mode), and the rounded value is encoded.  Rounding a
 * value at most the maximum never passes it, so no overflow case exists. */
#include <math.h>
#include <string.h>
#include "core/fp8.h"
#include "core/half.h"

struct fmt {
    int mbits, bias, emin;
    float max;
};

static const struct fmt fmts[2] = {
    [KV_FP8_E4M3] = { 3, 7, -6, 448.0f },
    [KV_FP8_E5M2] = { 2, 15, -14, 57344.0f },
};

int kv_fp8_parse(const char *s, enum kv_fp8 *out, struct kv_err *e)
{
    if (strcmp(s, "fp8_e4m3") == 0 || strcmp(s, "fp8") == 0)
        *out = KV_FP8_E4M3;
    else if (strcmp(s, "fp8_e5m2") == 0)
        *out = KV_FP8_E5M2;
    else
        return kv_err_set(e, "unknown FP8 format '%s' (fp8_e4m3, fp8_e5m2)",
                          s);
    return 0;
}

const char *kv_fp8_name(enum kv_fp8 t)
{
    return t == KV_FP8_E5M2 ? "fp8_e5m2" : "fp8_e4m3";
}

float kv_fp8_max(enum kv_fp8 t)
{
    return fmts[t].max;
}

uint8_t kv_fp8_from_f32(float x, enum kv_fp8 t)
{
    const struct fmt *f = &fmts[t];
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x))
        return (uint8_t)(sign | 0x7f);
    double a = fabs((double)x);
    if (a > f->max)
        a = f->max;
    if (a == 0)
        return sign;
    int k;
    frexp(a, &k);              /* a in [2^(k-1), 2^k) */
    int e = k - 1;
    if (e < f->emin)
        e = f->emin;
    double quantum = ldexp(1.0, e - f->mbits);
    double v = nearbyint(a / quantum) * quantum;
    if (v == 0)
        return sign;
    frexp(v, &k);
    e = k - 1;
    unsigned field, mant;
    if (e < f->emin) {
        field = 0;
        mant = (unsigned)ldexp(v, f->mbits - f->emin);
    } else {
        field = (unsigned)(e + f->bias);
        mant = (unsigned)(ldexp(v, f->mbits - e) - ldexp(1.0, f->mbits));
    }
    return (uint8_t)(sign | field << f->mbits | mant);
}

float kv_fp8_to_f32(uint8_t b, enum kv_fp8 t)
{
    const struct fmt *f = &fmts[t];
    unsigned mmask = (1u << f->mbits) - 1;
    unsigned field = (b & 0x7f) >> f->mbits, mant = b & mmask;
    unsigned top = 0x7fu >> f->mbits;
    float v;
    if (t == KV_FP8_E4M3 && field == top && mant == mmask)
        v = NAN;
    else if (t == KV_FP8_E5M2 && field == top)
        v = mant ? NAN : INFINITY;
    else if (field == 0)
        v = ldexpf((float)mant, f->emin - f->mbits);
    else
        v = ldexpf((float)(mant | (1u << f->mbits)),
                   (int)field - f->bias - f->mbits);
    return b & 0x80 ? -v : v;
}

/* The 256 values of each format, made once (the table is the same for
 * every thread; a race would only write the same values). */
static float lut[2][256];
static int lut_ready[2];

static const float *table(enum kv_fp8 t)
{
    if (!__atomic_load_n(&lut_ready[t], __ATOMIC_ACQUIRE)) {
        for (int b = 0; b < 256; b++)
            lut[t][b] = kv_fp8_to_f32((uint8_t)b, t);
        __atomic_store_n(&lut_ready[t], 1, __ATOMIC_RELEASE);
    }
    return lut[t];
}

static float elem_f32(const struct kv_tensor *src, size_t i)
{
    switch (src->dtype) {
    case KV_F32: return ((const float *)src->data)[i];
    case KV_BF16: return kv_bf16_to_f32(((const uint16_t *)src->data)[i]);
    case KV_F16: return kv_f16_to_f32(((const uint16_t *)src->data)[i]);
    default: return (float)kv_tensor_get_f64(src, i);
    }
}

void kv_fp8_quantize(const struct kv_tensor *src, size_t off, size_t n,
                     float scale, enum kv_fp8 t, uint8_t *dst)
{
    for (size_t i = off; i < off + n; i++)
        dst[i] = kv_fp8_from_f32(elem_f32(src, i) / scale, t);
}

void kv_fp8_dequantize(const uint8_t *q, size_t n, float scale,
                       enum kv_fp8 t, float *y)
{
    const float *v = table(t);
    for (size_t i = 0; i < n; i++)
        y[i] = v[q[i]] * scale;
}

int kv_fp8_scale_check(double s, const char *what, struct kv_err *e)
{
    if (!isfinite(s) || s <= 0 || (float)s <= 0 || !isfinite((float)s))
        return kv_err_set(e, "%s: a scale must be a finite number > 0 "
                          "(in f32), got %g", what, s);
    return 0;
}

int kv_fp8_quantize_rows(const struct kv_tensor *x, size_t n, size_t d,
                         uint8_t *q, float *scales, struct kv_err *e)
{
    const float qmax = kv_fp8_max(KV_FP8_E4M3);
    for (size_t r = 0; r < n / d; r++) {
        size_t base = r * d;
        float amax = 0;
        for (size_t i = 0; i < d; i++) {
            float a = fabsf((float)kv_tensor_get_f64(x, base + i));
            if (!isfinite(a))
                return kv_err_set(e, "element %zu is not finite: a per-token "
                                  "scale needs finite values", base + i);
            if (a > amax)
                amax = a;
        }
        float s = amax / qmax;
        if (s < 1e-6f)
            s = 1e-6f;
        scales[r] = s;
        float inv = 1.0f / s;
        for (size_t i = 0; i < d; i++)
            q[base + i] = kv_fp8_from_f32((float)kv_tensor_get_f64(x, base + i) * inv,
                                          KV_FP8_E4M3);
    }
    return 0;
}
