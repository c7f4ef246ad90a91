/* mla_ds.c - the fp8_ds_mla latent cache, written and read (mla_ds.h).
 *
 * The scale's log2 is taken in double and rounded to f32, which is the
 * correctly rounded f32 log2 (the double result is far closer than the
 * f32 spacing to the exact value, and an integer log2 is exact in both);
 * ceil then gives the power of two.  The scales and the rotary values are
 * stored little-endian, the hosts' order. */
#include <math.h>
#include <string.h>
#include "attn/mla_ds.h"
#include "core/fp8.h"
#include "core/half.h"

float kv_ds_mla_scale(float amax)
{
    const float inv = (float)(1.0 / 448.0), floor_s = (float)1e-4;
    float s = amax * inv;
    if (!(s >= floor_s))
        s = floor_s;
    float l = (float)log2((double)s);
    return ldexpf(1.0f, (int)ceilf(l));
}

/* Row r of x (576 values of f32, bf16 or f16) as f32 into v. */
static void row_f32(const struct kv_tensor *x, size_t r, float *v)
{
    size_t off = r * KV_DS_MLA_DIM;
    if (x->dtype == KV_F32)
        memcpy(v, (const float *)x->data + off, KV_DS_MLA_DIM * sizeof(float));
    else if (x->dtype == KV_BF16)
        kv_bf16_to_f32_n((const uint16_t *)x->data + off, v, KV_DS_MLA_DIM);
    else
        kv_f16_to_f32_n((const uint16_t *)x->data + off, v, KV_DS_MLA_DIM);
}

static int shape_check(const struct kv_tensor *t, enum kv_dtype want, int64_t width,
                       const char *what, struct kv_err *e)
{
    char sh[128];
    int ok_dt = want == KV_U8 ? t->dtype == KV_U8 :
        (t->dtype == KV_F32 || t->dtype == KV_BF16 || t->dtype == KV_F16);
    if (!ok_dt)
        return kv_err_set(e, "%s: expected %s, got %s", what,
                          want == KV_U8 ? "u8 bytes" : "f32, bf16 or f16 values",
                          kv_dtype_name(t->dtype));
    if (t->ndim < 1 || t->shape[t->ndim - 1] != width)
        return kv_err_set(e, "%s: shape %s: fp8_ds_mla rows are %d bytes (512 e4m3 "
                          "c_kv values, 4 f32 scales, 64 bf16 k_pe values) of latent "
                          "rows of %d values (kv_lora_rank 512, qk_rope_head_dim 64); "
                          "the last axis must be %lld", what,
                          kv_shape_str(t->ndim, t->shape, sh, sizeof sh), KV_DS_MLA_ROW,
                          KV_DS_MLA_DIM, (long long)width);
    return 0;
}

/* src checked (dtype, last axis width), and out allocated (zeroed) with
 * the same axes but the last, which becomes out_width of out_dt. */
static int rows_alloc(const struct kv_tensor *src, enum kv_dtype want, int64_t width,
                      const char *what, enum kv_dtype out_dt, int64_t out_width,
                      size_t max_bytes, struct kv_tensor *out, struct kv_err *e)
{
    int64_t shape[KV_MAX_DIMS];
    if (shape_check(src, want, width, what, e))
        return -1;
    memcpy(shape, src->shape, sizeof shape);
    shape[src->ndim - 1] = out_width;
    kv_tensor_init(out);
    return kv_tensor_alloc(out, out_dt, src->ndim, shape, max_bytes, e);
}

int kv_ds_mla_quantize(const struct kv_tensor *x, size_t max_bytes,
                       struct kv_tensor *out, struct kv_err *e)
{
    struct kv_tensor q;
    float v[KV_DS_MLA_DIM];
    if (rows_alloc(x, KV_F32, KV_DS_MLA_DIM, "the latent cache", KV_U8, KV_DS_MLA_ROW,
                   max_bytes, &q, e))
        return -1;
    size_t rows = kv_tensor_numel(x) / KV_DS_MLA_DIM;
    for (size_t r = 0; r < rows; r++) {
        uint8_t *b = (uint8_t *)q.data + r * KV_DS_MLA_ROW;
        row_f32(x, r, v);
        for (int t = 0; t < KV_DS_MLA_NOPE / KV_DS_MLA_TILE; t++) {
            const float *tv = v + t * KV_DS_MLA_TILE;
            float amax = 0;
            for (int i = 0; i < KV_DS_MLA_TILE; i++) {
                if (!isfinite(tv[i])) {
                    kv_tensor_release(&q);
                    return kv_err_set(e, "element %zu (row %zu, c_kv %d) is %g: a "
                                      "tile's scale needs finite values",
                                      r * KV_DS_MLA_DIM + (size_t)(t * KV_DS_MLA_TILE + i),
                                      r, t * KV_DS_MLA_TILE + i, (double)tv[i]);
                }
                amax = fmaxf(amax, fabsf(tv[i]));
            }
            float s = kv_ds_mla_scale(amax);
            for (int i = 0; i < KV_DS_MLA_TILE; i++)
                b[t * KV_DS_MLA_TILE + i] = kv_fp8_from_f32(tv[i] / s, KV_FP8_E4M3);
            memcpy(b + KV_DS_MLA_NOPE + 4 * t, &s, sizeof s);
        }
        uint8_t *rb = b + KV_DS_MLA_NOPE + 4 * (KV_DS_MLA_NOPE / KV_DS_MLA_TILE);
        for (int i = 0; i < KV_DS_MLA_ROPE; i++) {
            uint16_t h = x->dtype == KV_BF16 ?
                ((const uint16_t *)x->data)[r * KV_DS_MLA_DIM + KV_DS_MLA_NOPE + (size_t)i] :
                kv_f32_to_bf16(v[KV_DS_MLA_NOPE + i]);
            memcpy(rb + 2 * i, &h, sizeof h);
        }
    }
    kv_tensor_move(out, &q);
    return 0;
}

int kv_ds_mla_dequantize(const struct kv_tensor *q, size_t max_bytes,
                         struct kv_tensor *out, struct kv_err *e)
{
    struct kv_tensor f;
    if (rows_alloc(q, KV_U8, KV_DS_MLA_ROW, "an fp8_ds_mla cache", KV_F32, KV_DS_MLA_DIM,
                   max_bytes, &f, e))
        return -1;
    size_t rows = kv_tensor_numel(q) / KV_DS_MLA_ROW;
    for (size_t r = 0; r < rows; r++) {
        const uint8_t *b = (const uint8_t *)q->data + r * KV_DS_MLA_ROW;
        float *y = (float *)f.data + r * KV_DS_MLA_DIM;
        for (int t = 0; t < KV_DS_MLA_NOPE / KV_DS_MLA_TILE; t++) {
            float s;
            memcpy(&s, b + KV_DS_MLA_NOPE + 4 * t, sizeof s);
            if (!isfinite(s) || s < 0) {
                kv_tensor_release(&f);
                return kv_err_set(e, "row %zu: the scale of c_kv %d..%d is %g: a scale "
                                  "must be finite and not negative", r,
                                  t * KV_DS_MLA_TILE, t * KV_DS_MLA_TILE + KV_DS_MLA_TILE - 1,
                                  (double)s);
            }
            kv_fp8_dequantize(b + t * KV_DS_MLA_TILE, KV_DS_MLA_TILE, s, KV_FP8_E4M3,
                              y + t * KV_DS_MLA_TILE);
        }
        const uint8_t *rb = b + KV_DS_MLA_NOPE + 4 * (KV_DS_MLA_NOPE / KV_DS_MLA_TILE);
        for (int i = 0; i < KV_DS_MLA_ROPE; i++) {
            uint16_t h;
            memcpy(&h, rb + 2 * i, sizeof h);
            y[KV_DS_MLA_NOPE + i] = kv_bf16_to_f32(h);
        }
    }
    kv_tensor_move(out, &f);
    return 0;
}

float kv_ds_mla_max_scale(const struct kv_tensor *q)
{
    if (q->dtype != KV_U8 || q->ndim < 1 || q->shape[q->ndim - 1] != KV_DS_MLA_ROW)
        return 0.0f;
    const size_t n = kv_tensor_numel(q) / KV_DS_MLA_ROW;
    const uint8_t *b = q->data;
    float best = 0.0f;
    for (size_t r = 0; r < n; r++)
        for (int t = 0; t < KV_DS_MLA_NOPE / KV_DS_MLA_TILE; t++) {
            float s;
            memcpy(&s, b + r * KV_DS_MLA_ROW + KV_DS_MLA_NOPE + 4 * t, sizeof s);
            if (isfinite(s) && s > best)
                best = s;
        }
    return best;
}
