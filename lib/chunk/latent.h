/* latent.h - DeepSeek MLA models: the latent cache's geometry, the softmax
 * scale, and position moves of latent chunks.
 *
 * An MLA model caches per token and layer one latent row of Dl + R values
 * (kv_lora_rank + qk_rope_head_dim; 512 + 64 for DeepSeek-V2/V3): c_kv,
 * the normalised compressed KV, carries no position; k_pe, the decoupled
 * rotary key, was rotated at the token's position.  A latent chunk is
 * [L, T, Dl + R]; moving it by a position delta copies every c_kv bit for
 * bit and rotates only k_pe, with the model's YaRN frequencies and unit
 * cos/sin (the YaRN attention factor already sits in the stored k_pe).
 *
 * Rotation layout of k_pe (which dims pair up):
 *   gptj  pairs (2i, 2i + 1): DeepSeek's own inference code and vLLM
 *         (is_neox_style=False) rotate the interleaved pairs in place and
 *         cache them so -- the default;
 *   neox  pairs (i, i + R/2): transformers' DeepseekV2/V3 (rope_interleave
 *         true) rotates the interleaved pairs but writes the result
 *         de-interleaved, [evens | odds], which is what its cache holds.
 *
 * Softmax scale (transformers 5.23.0's DeepseekV2/V3 Attention.scaling,
 * yarn_apply_mscale): qk_head_dim ** -0.5 * mscale * mscale, evaluated in
 * that order, with qk_head_dim = P + R and
 * mscale = yarn_get_mscale(factor, mscale_all_dim) = 0.1 mscale_all_dim
 * ln(factor) + 1 (1 when factor <= 1) when the RoPE parameters
 * ("rope_scaling" when non-empty, else "rope_parameters") have a type
 * other than "default" and a nonzero mscale_all_dim, else mscale = 1.
 * Bit-equal to Python's float arithmetic on the same numbers.
 */
#ifndef KV_LATENT_H
#define KV_LATENT_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"
#include "chunk/model.h"
#include "chunk/rope.h"

struct kv_latent {
    int64_t n_layers, n_heads;
    int64_t kv_lora_rank, rope_dim, nope_dim, v_dim;   /* Dl, R, P, Vd */
    double softmax_scale;
    double mscale;              /* the YaRN mscale of the scale (1: none) */
    struct kv_rope rope;        /* k_pe: head_dim = rotary dim = R */
    enum kv_dtype dtype;        /* the config's, KV_BF16 when absent */
};

/* Read an MLA model's config.json for its latent cache (kvchunk):
 * kv_model_load (layers and the RoPE of k_pe), then the MLA keys.  A model
 * without kv_lora_rank is an error.  qk_nope_head_dim and v_head_dim may
 * be absent here (0; softmax_scale is then 0). */
int kv_latent_load(const char *path, size_t max_bytes, struct kv_latent *l,
                   struct kv_err *e);

/* The same from a kv_model already read and the JSON text of its file. */
int kv_latent_from_model(const struct kv_model *m, const char *json, size_t len,
                         struct kv_latent *l, struct kv_err *e);

/* Read only what one MLA attention layer needs (kvattn): kv_lora_rank,
 * qk_rope_head_dim, qk_nope_head_dim and v_head_dim (all required),
 * num_attention_heads (0 when absent), the dtype (bf16 when absent) and
 * the RoPE parameters of the softmax scale.  Layers, hidden size and the
 * rest of the RoPE are not read (n_layers is 0; rope is R dims of
 * interleaved pairs, unscaled).  The keys are read at the top level, or in
 * "text_config" when only that has kv_lora_rank. */
int kv_latent_load_attn(const char *path, size_t max_bytes, struct kv_latent *l,
                        struct kv_err *e);
int kv_latent_parse_attn(const char *json, size_t len, struct kv_latent *l,
                         struct kv_err *e);

/* Is path an MLA model's config (it has kv_lora_rank)?  1 yes, 0 no, -1
 * when the file does not read as a JSON object (e says why). */
int kv_latent_probe(const char *path, size_t max_bytes, struct kv_err *e);

/* yarn_get_mscale: 0.1 * mscale * ln(factor) + 1, or 1 when factor <= 1. */
double kv_latent_yarn_mscale(double factor, double mscale);

/* The softmax scale qk_head_dim ** -0.5 * mscale * mscale (above). */
double kv_latent_softmax_scale(int64_t qk_head_dim, double mscale);

/* Move a latent chunk [L, T, Dl + R] by delta from src into dst, whose
 * token axis has dst_stride_t rows with the chunk at token dst_off
 * ([L, dst_stride_t, Dl + R]; dst may equal src when the offsets agree).
 * c_kv is copied bit for bit; k_pe rotated by kv_rope_rotate (f16, bf16,
 * f32).  r->head_dim must be R. */
struct kv_latent_chunk {
    int64_t n_layers, n_tokens, kv_lora_rank, rope_dim;
    enum kv_dtype dtype;
};
int kv_latent_move(const struct kv_rope *r, const struct kv_latent_chunk *c,
                   int64_t delta, const void *src, void *dst, int64_t dst_stride_t,
                   int64_t dst_off, struct kv_err *e);

/* A toy latent cache [L, T, Dl + R] for tokens at positions pos[0..n):
 * c_kv[l][t] depends on (seed, l, token id) only (uniform, unit variance:
 * position-free), k_pe[l][t] is such a vector of R dims rotated in double
 * to pos[t] by r (times its YaRN attention factor), all rounded once to
 * dtype.  The same token ids at other positions give bit-equal c_kv and a
 * k_pe rotated elsewhere: what a moved latent chunk must reproduce. */
int kv_latent_toy(const struct kv_rope *r, int64_t n_layers, int64_t kv_lora_rank,
                  uint64_t seed, const int32_t *tokens, const int64_t *pos, size_t n,
                  enum kv_dtype dtype, size_t max_bytes, struct kv_tensor *out,
                  struct kv_err *e);

#endif
