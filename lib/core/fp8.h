/* fp8.h - the two 8-bit float formats of an FP8 KV cache, and the
 * per-tensor quantization vLLM applies when it writes one.
 *
 *   e4m3 (OCP E4M3FN, torch.float8_e4m3fn): sign, 4 exponent bits (bias 7),
 *        3 mantissa bits; no infinity; S.1111.111 is NaN; largest 448,
 *        smallest subnormal 2^-9.
 *   e5m2 (torch.float8_e5m2): IEEE-like, sign, 5 exponent bits (bias 15),
 *        2 mantissa bits; S.11111.00 is infinity, S.11111.xx (xx != 0) NaN;
 *        largest finite 57344, smallest subnormal 2^-16.
 *
 * A byte is stored as u8 in .npy files (man 5 kvnpy).  Quantizing a value x
 * with scale s is fp8(clamp(x / s, -max, max)): the division in f32, the
 * clamp to the largest finite value (infinities saturate, NaN stays NaN with
 * its sign, as 0x7f | sign), then rounding to nearest, ties to even,
 * subnormals included.  That is torch's
 * (x / s).clamp(-max, max).to(float8) and the saturating conversion of
 * vLLM's cache-writing kernels.  Dequantizing is the exact value of the
 * byte times s, in f32. */
#ifndef KV_FP8_H
#define KV_FP8_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

enum kv_fp8 { KV_FP8_E4M3 = 0, KV_FP8_E5M2 };

/* "fp8_e4m3" (also "fp8", vLLM's alias) or "fp8_e5m2"; 0 or -1 with e set. */
int kv_fp8_parse(const char *s, enum kv_fp8 *out, struct kv_err *e);
const char *kv_fp8_name(enum kv_fp8 t);
/* The largest finite value of the format (448 or 57344). */
float kv_fp8_max(enum kv_fp8 t);

/* The byte of x: saturated to +-max, NaN as 0x7f | sign, round to nearest
 * even.  No scale. */
uint8_t kv_fp8_from_f32(float x, enum kv_fp8 t);
/* The exact value of a byte. */
float kv_fp8_to_f32(uint8_t b, enum kv_fp8 t);

/* q[i] = fp8(clamp(x[i] / scale)) for the n values of src (f32, bf16 or
 * f16, any shape) starting at element off; dst is u8 of at least off + n
 * elements.  scale must be finite and > 0 (checked by the caller). */
void kv_fp8_quantize(const struct kv_tensor *src, size_t off, size_t n,
                     float scale, enum kv_fp8 t, uint8_t *dst);
/* y[i] = value(q[i]) * scale in f32, for n bytes from q into y. */
void kv_fp8_dequantize(const uint8_t *q, size_t n, float scale,
                       enum kv_fp8 t, float *y);

/* vLLM's fp8_per_token_head: the n values of x (f32, bf16 or f16) as rows
 * of d, each quantized to e4m3 with its own scale max(absmax / 448, 1e-6)
 * in f32, the row multiplied by the scale's reciprocal; q receives the n
 * bytes, scales[r] row r's scale.  -1 with e at a value that is not finite
 * (its row's scale would not be). */
int kv_fp8_quantize_rows(const struct kv_tensor *x, size_t n, size_t d,
                         uint8_t *q, float *scales, struct kv_err *e);

/* Check a scale given on the command line or in a file: finite and > 0. */
int kv_fp8_scale_check(double s, const char *what, struct kv_err *e);

#endif
