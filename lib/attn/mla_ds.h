/* mla_ds.h - fp8_ds_mla, DeepSeek-V3.2's FP8 latent cache as vLLM 0.33.0
 * stores it for its FLASHMLA_SPARSE backend (kv_cache_dtype fp8_ds_mla,
 * and fp8 / fp8_e4m3 there), 656 bytes a token:
 *
 *   bytes   0 .. 511   the 512 c_kv values (the NoPE part) in e4m3
 *   bytes 512 .. 527   four f32 scales (little-endian), scale t for
 *                      values 128 t .. 128 t + 127
 *   bytes 528 .. 655   the 64 rotary values (k_pe) in bf16, unquantized
 *
 * vLLM keeps it as a uint8 cache [num_blocks, block_size, 656] (FlashMLA
 * takes [num_blocks, block_size, 1, 656]).  The unquantized row is the
 * latent row [c_kv (512) | k_pe (64)] of mla.h, 576 values.
 *
 * Writing (the rule of vLLM's DeepSeek-V3.2 cache writer, the Triton
 * kernel of vllm/models/deepseek_v32/common/kernels.py, with f32
 * arithmetic throughout): for each tile of 128 values
 *   amax  = max |x|
 *   s     = max(amax * f32(1/448), f32(1e-4))       (one f32 product)
 *   scale = 2^ceil(log2 s)                          (log2 rounded to f32)
 *   q     = e4m3(x / scale)       nearest, ties to even, saturating at 448
 * so every scale is a power of two from 2^-13 up, and x / scale is exact.
 * The rotary values are rounded to bf16 (nearest even).
 *
 * Reading: value(byte) * scale in f32 (exact for a power-of-two scale),
 * the rotary values widened from bf16 (exact). */
#ifndef KV_MLA_DS_H
#define KV_MLA_DS_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

#define KV_DS_MLA_NOPE 512      /* c_kv values, kv_lora_rank */
#define KV_DS_MLA_ROPE 64       /* k_pe values, qk_rope_head_dim */
#define KV_DS_MLA_TILE 128      /* values per scale */
#define KV_DS_MLA_ROW 656       /* bytes a token */
#define KV_DS_MLA_DIM (KV_DS_MLA_NOPE + KV_DS_MLA_ROPE)

/* The scale of a tile whose largest magnitude is amax (finite, >= 0). */
float kv_ds_mla_scale(float amax);

/* x [..., 576] (f32, bf16 or f16) -> out u8 [..., 656]: the other axes
 * kept.  Every c_kv value must be finite (its tile's scale is computed
 * from it); -1 with e naming the element otherwise, or on a wrong shape
 * or dtype.  out must be zeroed or released; untouched on failure. */
int kv_ds_mla_quantize(const struct kv_tensor *x, size_t max_bytes,
                       struct kv_tensor *out, struct kv_err *e);

/* q u8 [..., 656] -> out f32 [..., 576].  Every scale must be finite and
 * not negative (a row of zero bytes, never written, reads as zeros); -1
 * with e naming the row and tile otherwise, or on a wrong shape or dtype.
 * out must be zeroed or released; untouched on failure. */
int kv_ds_mla_dequantize(const struct kv_tensor *q, size_t max_bytes,
                         struct kv_tensor *out, struct kv_err *e);

/* The largest finite scale of the rows of q (u8 [..., 656]; 0 for any
 * other tensor or none): 448 times it bounds every c_kv value, which
 * chooses the kv_mla_req.v_exp of the cache (kv_attn_fp8_v_exp of e4m3
 * with this scale and the cache's rows). */
float kv_ds_mla_max_scale(const struct kv_tensor *q);

#endif
