/* half.h - IEEE binary16 (f16) and bfloat16 (bf16) <-> f32 conversion.
 *
 * All conversions round to nearest, ties to even, and keep signed zeros,
 * infinities and NaN (a NaN stays a NaN; its sign is kept and the payload
 * is truncated with the quiet bit set).  f16 subnormals are exact.
 *
 * The *_ref functions are the plain scalar reference.  The bulk *_n
 * functions choose a fast path at run time (F16C for f16; for f32->bf16 the
 * reference's integer rounding on AVX2, or AVX-512 where the CPU has it)
 * and agree with the reference bit for bit; tests/unit/half.c checks all
 * 65536 patterns and 2^20 random f32 at every vector level.
 */
#ifndef KV_HALF_H
#define KV_HALF_H

#include <stddef.h>
#include <stdint.h>

float kv_f16_to_f32_ref(uint16_t h);
uint16_t kv_f32_to_f16_ref(float f);
float kv_bf16_to_f32_ref(uint16_t h);
uint16_t kv_f32_to_bf16_ref(float f);

/* Scalar conversions (same results as the reference). */
float kv_bf16_to_f32(uint16_t h);
float kv_f16_to_f32(uint16_t h);
uint16_t kv_f32_to_f16(float f);
uint16_t kv_f32_to_bf16(float f);

/* Bulk conversion of n elements; src and dst must not overlap. */
void kv_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void kv_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void kv_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void kv_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);

/* 1 when one of the n values at p is an infinity or a NaN, else 0: a
 * branch-free scan, on AVX2 where the CPU has it (KVTOOLS_ISA caps it). */
int kv_bf16_nonfinite_n(const uint16_t *p, size_t n);
int kv_f32_nonfinite_n(const float *p, size_t n);

/* Which fast paths this CPU uses (for -v output and tests):
 * bit 0 = F16C, bit 1 = the AVX2 bf16 rounding; both need the avx2 level
 * of isa.h (KVTOOLS_ISA caps them).  kv_half_force_scalar(1) disables
 * them (tests compare the two paths). */
unsigned kv_half_features(void);
void kv_half_force_scalar(int on);

#endif
