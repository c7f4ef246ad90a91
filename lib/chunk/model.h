/* model.h - a model's geometry and RoPE from its Hugging Face config.json.
 *
 * What is read (the first key present wins; "text_config" is entered when
 * the top level has no layer count, as in multimodal configs):
 *   layers      num_hidden_layers | n_layer | num_layers
 *   heads       num_attention_heads | n_head
 *   KV heads    num_key_value_heads | multi_query_group_num (else = heads;
 *               "multi_query": true makes it 1)
 *   hidden      hidden_size | n_embd | d_model
 *   head dim    head_dim | hidden / heads (MLA: head_dim |
 *               qk_rope_head_dim, and neither hidden nor the KV heads
 *               are checked against the heads)
 *   RoPE style  learned for model_type gpt2, opt, gpt_neo, gpt_bigcode,
 *               biogpt, openai-gpt (absolute positions: never moved);
 *               none for bloom, mpt and "alibi": true (ALiBi: K has no
 *               position); gptj (interleaved pairs) for gptj, codegen,
 *               llama4, llama4_text; neox (rotate_half) otherwise
 *   NoPE layers no_rope_layers (0 = no RoPE), else for Llama 4 every
 *               no_rope_layer_interval-th layer (4)
 *   local RoPE  rope_local_base_freq, or rope_parameters.sliding_attention,
 *               when it differs and a layer slides (Gemma 3): the sliding
 *               layers (layer_types, else all but every
 *               sliding_window_pattern-th, 6) in rope.local_layers, turned
 *               with base rope.local_theta and no scaling
 *   rotary dim  rotary_dim | partial_rotary_factor * head dim |
 *               rotary_pct * head dim (GPT-NeoX) | head dim
 *   theta       rope_theta | rotary_emb_base | 10000; both may also sit in
 *               "rope_parameters" (newer configs)
 *   scaling     rope_scaling (or rope_parameters): its "rope_type" or
 *               "type": default, linear, dynamic, yarn, llama3; longrope,
 *               su, mrope and others are refused
 *   dtype       torch_dtype | dtype: float32, float16, bfloat16
 *   max pos     max_position_embeddings | n_positions
 *   window      sliding_window (none when use_sliding_window is false)
 *   MLA         kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
 *               v_head_dim (DeepSeek-V2/V3)
 * Every number is checked (type, integer, range); an error names the file
 * and the key, or the line and column where the JSON is malformed.
 */
#ifndef KV_MODEL_H
#define KV_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"
#include "chunk/rope.h"

struct kv_model {
    char model_type[64];          /* "" when absent */
    int64_t n_layers, n_heads, n_kv_heads, head_dim, hidden;
    struct kv_rope rope;          /* style, theta, rotary dim, scaling */
    enum kv_dtype dtype;          /* KV_F32 when have_dtype is 0 */
    int have_dtype;
    int64_t max_pos;              /* 0 when absent */
    int64_t sliding_window;       /* 0: none */
    /* MLA (kv_lora_rank > 0): the cache holds a compressed latent of
     * kv_lora_rank + qk_rope_head_dim values per token and layer. */
    int64_t kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim;
};

/* Read a config.json file ("-" is stdin); max_bytes bounds it (0: 16 MiB). */
int kv_model_load(const char *path, size_t max_bytes, struct kv_model *m,
                  struct kv_err *e);

/* The same from a buffer; name is what errors call it. */
int kv_model_parse(const char *buf, size_t len, const char *name,
                   struct kv_model *m, struct kv_err *e);

/* Bytes one token occupies in the cache across all layers, elt_bytes per
 * element: n_layers * 2 * n_kv_heads * head_dim (K and V) or, for an MLA
 * model (kv_lora_rank > 0), n_layers * (kv_lora_rank + qk_rope_head_dim),
 * the latent once per layer.  The one place this is computed (kvchunk
 * info, sim and its pool sizes).  -1 when it overflows int64. */
int64_t kv_model_bytes_per_token(const struct kv_model *m, size_t elt_bytes);

/* What kvtools understood, as "name: value" lines (kvchunk info). */
int kv_model_describe(const struct kv_model *m, char *buf, size_t len);

#endif
