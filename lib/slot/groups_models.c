/* groups_models.c - every model type kvslot groups reads from a config.json,
 * with the rule by which vLLM 0.33.0 builds its caches, and the model
 * types it refuses.  Each entry was compared with the model file vLLM
 * registers for the type (vllm/model_executor/models/NAME.py, or
 * vllm/models/NAME/ for the newer families) and with the defaults of the
 * transformers 5.23.0 config class that vLLM reads it through; the
 * cross-check (scripts/crosscheck/kvslot-groups.py) runs a minimal config
 * of each.  A type missing here is refused rather than read as plain
 * attention. */
#include "slot/groups_models.h"

#include <stddef.h>
#include <string.h>

#define LT MF_LT_HONOR
#define FILLED (MF_LT_HONOR | MF_LT_FILLED)
#define QWEN2 (MF_USW | MF_MWL | MF_MWL_ASSERT)

/* type, rule, flags, every, window, add, mwl_def, kv_lora, rope, topk, why */
static const struct model_def defs[] = {
    /* attention on every layer, the model-level sliding_window on all of
     * them (CacheConfig.sliding_window), which the model file never sets
     * per layer; but Mistral, Phi-3 and ERNIE 4.5 (dense) build llama.py's
     * attention, which reads layer_types per layer */
    { "bloom", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "bailing_moe", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "chatglm", MR_WINDOW, MF_HEAD_HIDDEN, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "cohere", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "dbrx", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "ernie4_5", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "ernie4_5_moe", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "exaone", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "falcon", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "gemma", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "glm4", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "glm4_moe", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "gpt2", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "gptj", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "hy_v3", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "hyperclovax", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "internlm2", MR_WINDOW, MF_HEAD_HIDDEN, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "minicpm", MR_WINDOW, MF_HEAD_HIDDEN, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "mistral", MR_WINDOW, LT, 0, 4096, 0, 0, 0, 0, 0, NULL },
    { "mixtral", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "nemotron", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "olmoe", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "opt", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "orion", MR_WINDOW, MF_HEAD_HIDDEN, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "phi3", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "solar", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "stablelm", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    /* Qwen: use_sliding_window (false by default) gates the window; the
     * layers from max_window_layers on slide (qwen2.py asserts against a
     * mix; the VL models' language model is qwen2.py's, over their
     * text_config); Qwen2-MoE's class fills them by a rule of its own */
    { "qwen2", MR_WINDOW, QWEN2, 0, 4096, 0, 28, 0, 0, 0, NULL },
    { "qwen3", MR_WINDOW, QWEN2, 0, 4096, 0, 28, 0, 0, 0, NULL },
    { "qwen2_vl_text", MR_WINDOW, QWEN2, 0, 4096, 0, 80, 0, 0, 0, NULL },
    { "qwen2_5_vl_text", MR_WINDOW, QWEN2, 0, 4096, 0, 80, 0, 0, 0, NULL },
    { "qwen3_vl_text", MR_WINDOW, MF_MWL_ASSERT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "qwen3_vl_moe_text", MR_WINDOW, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "qwen2_moe", MR_WINDOW, MF_USW | MF_LT_FILLED, 0, 4096, 0, 0, 0, 0, 0, NULL },
    { "qwen3_moe", MR_WINDOW, MF_USW, 0, 4096, 0, 0, 0, 0, 0, NULL },
    /* layer_types per layer (llama.py's rule, and vLLM's Transformers
     * modeling backend: transformers/base.py) */
    { "llama", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "internlm3", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "iquestcoder", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "apertus", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "granite", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "granitemoe", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "arcee", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "flex_olmo", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "gpt_bigcode", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "gpt_neox", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "hunyuan_v1_dense", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "hunyuan_v1_moe", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "jais2", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "seed_oss", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "glm", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "olmo", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "olmo2", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "phi", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "starcoder2", MR_WINDOW, LT, 0, 0, 0, 0, 0, 0, 0, NULL },
    /* ... whose config classes fill layer_types by a rule of their own */
    { "afmoe", MR_WINDOW, FILLED, 0, 1024, 0, 0, 0, 0, 0, NULL },
    { "beam", MR_WINDOW, FILLED, 0, 4096, 0, 0, 0, 0, 0, NULL },
    { "cwm", MR_WINDOW, FILLED, 0, 8192, 0, 0, 0, 0, 0, NULL },
    { "exaone4", MR_WINDOW, FILLED, 0, 4096, 0, 0, 0, 0, 0, NULL },
    { "granite_swa", MR_WINDOW, FILLED, 0, 128, 0, 0, 0, 0, 0, NULL },
    { "kolibri1", MR_WINDOW, FILLED, 0, 513, 0, 0, 0, 0, 0, NULL },
    { "laguna", MR_WINDOW, FILLED, 0, 512, 0, 0, 0, 0, 0, NULL },
    { "mellum", MR_WINDOW, FILLED, 0, 1024, 0, 0, 0, 0, 0, NULL },
    { "olmo3", MR_WINDOW, FILLED, 0, 4096, 0, 0, 0, 0, 0, NULL },
    { "smollm3", MR_WINDOW, FILLED, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "vaultgemma", MR_WINDOW, FILLED, 0, 4096, 0, 0, 0, 0, 0, NULL },
    { "cohere2_moe", MR_WINDOW, FILLED, 0, 4096, 1, 0, 0, 0, 0, NULL },
    /* ... filled as all but every sliding_window_pattern-th layer */
    { "gemma2", MR_WINDOW, LT | MF_EVERY_FIXED, 2, 4096, 0, 0, 0, 0, 0, NULL },
    { "gemma3_text", MR_WINDOW, LT, 6, 4096, 0, 0, 0, 0, 0, NULL },
    { "cohere2", MR_WINDOW, LT, 4, 4096, 1, 0, 0, 0, 0, NULL },
    /* families of their own */
    { "gpt_oss", MR_GPT_OSS, 0, 0, 128, 0, 0, 0, 0, 0, NULL },
    { "llama4", MR_LLAMA4, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "llama4_text", MR_LLAMA4, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "qwen3_next", MR_QWEN3_NEXT, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    /* qwen3_5.py: the same gated delta net and attention layers */
    { "qwen3_5_text", MR_QWEN3_NEXT, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "qwen3_5_moe_text", MR_QWEN3_NEXT, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "nemotron_h", MR_NEMOTRON_H, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "minicpm3", MR_MINICPM3, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    { "dots3_note", MR_DOTS3, 0, 0, 0, 0, 0, 0, 0, 0, NULL },
    /* MLA (ModelArchConfigConvertor.is_deepseek_mla); vLLM reads
     * deepseek_v32 and kimi_k2 through transformers' DeepseekV3Config */
    { "deepseek_v2", MR_MLA, 0, 0, 0, 0, 0, 512, 64, 0, NULL },
    { "deepseek_v3", MR_MLA, 0, 0, 0, 0, 0, 512, 64, 0, NULL },
    { "deepseek_v32", MR_MLA, 0, 0, 0, 0, 0, 512, 64, 0, NULL },
    { "kimi_k2", MR_MLA, 0, 0, 0, 0, 0, 512, 64, 0, NULL },
    { "axk1", MR_MLA, 0, 0, 0, 0, 0, 512, 64, 0, NULL },
    { "glm4_moe_lite", MR_MLA, MF_HEAD_ROPE, 0, 0, 0, 0, 512, 64, 0, NULL },
    { "glm_moe_dsa", MR_MLA, 0, 0, 0, 0, 0, 512, 64, 2048, NULL },
    /* refused: what vLLM builds that kvslot does not model */
#define MAMBA "Mamba or linear-attention states of a kind kvslot does not size"
    { "falcon_h1", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "jamba", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "zamba2", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "bamba", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "granitemoehybrid", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "mamba", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "mamba2", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "falcon_mamba", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "minimax_m1", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "kimi_linear", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "lfm2", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "lfm2_moe", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "plamo2", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "olmo_hybrid", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, MAMBA },
    { "deepseek_v4", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sliding-window MLA beside compressed caches" },
    { "deepseek_v41", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sliding-window MLA beside compressed caches" },
    { "kimi_k3", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "MLA beside delta-attention states" },
    { "step5", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "circular-buffer and summary caches" },
    { "step5_vl", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "circular-buffer and summary caches" },
    { "glm5_next", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sparse MLA beside gated delta net states and circular buffers" },
    { "glm5_next_text", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sparse MLA beside gated delta net states and circular buffers" },
    { "qwen4_exp", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "indexed attention caches beside gated delta net states" },
    { "qwen4_exp_text", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "indexed attention caches beside gated delta net states" },
    { "minimax_m3", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sparse attention with an indexer cache of its own layout" },
    { "minimax_m3_vl", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sparse attention with an indexer cache of its own layout" },
    { "hy_v4", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sparse MLA whose indexers are full or shared per layer (indexer_types)" },
    { "inkling_text", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "short-convolution states beside sliding-window attention" },
    { "inkling_mm_model", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "short-convolution states beside sliding-window attention" },
    { "longcat_flash", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "two MLA caches a layer" },
    { "gemma3n", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "layers that share another layer's KV cache" },
    { "gemma3n_text", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "layers that share another layer's KV cache" },
    { "gemma4", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "layers that share another layer's KV cache" },
    { "gemma4_text", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "layers that share another layer's KV cache" },
    { "mimo_v2", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sliding windows from hybrid_layer_pattern with head sizes of their own" },
    { "mimo_v2_flash", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sliding windows from hybrid_layer_pattern with head sizes of their own" },
    { "exaone_moe", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "a sliding window per layer" },
    { "step3p5", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "sliding-window layers with head counts of their own" },
    { "minimax_m2", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "a window per layer (attn_window_size)" },
    /* a multimodal config whose text model is not in a text_config with
     * its model_type: the class builds its default text model */
#define NESTED "its text model from text_config (give text_config its model_type)"
    { "gemma3", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, NESTED },
    { "qwen3_5", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, NESTED },
    { "qwen3_5_moe", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0, NESTED },
    { "whisper", MR_REFUSED, 0, 0, 0, 0, 0, 0, 0, 0,
      "cross-attention caches of an encoder-decoder" },
};

/* The sizes the config class gives when config.json has none (the
 * transformers 5.23.0 class, or the one vLLM 0.33.0 ships for the type):
 * layers, query heads, KV heads (0: the query heads, which the class
 * copies when it has no number of its own; -1: None, which nemotron.py
 * cannot take), hidden size, and head_dim (0: hidden_size / query heads;
 * a number for the classes whose model files, or the Transformers backend,
 * read config.head_dim with a default of their own).  Gemma 3's
 * multimodal files, for one, give no heads for the 4B model. */
static const struct class_dims class_defaults[] = {
    { "afmoe", 32, 16, 0, 2048, 128 },
    { "apertus", 32, 32, 0, 4096, 0 },
    { "arcee", 32, 32, 0, 2560, 0 },
    { "axk1", 61, 64, 64, 7168, 0 },
    { "beam", 24, 32, 4, 2048, 128 },
    { "bloom", 2, 8, 0, 64, 0 },
    { "chatglm", 28, 32, 1, 4096, 0 },
    { "cohere", 40, 64, 0, 8192, 0 },
    { "cohere2", 40, 64, 0, 8192, 0 },
    { "cohere2_moe", 40, 64, 0, 8192, 128 },
    { "cwm", 64, 48, 8, 6144, 128 },
    { "dbrx", 24, 16, 1, 2048, 0 },
    { "deepseek_v2", 32, 32, 0, 4096, 0 },
    { "deepseek_v3", 61, 128, 128, 7168, 0 },
    { "deepseek_v32", 61, 128, 128, 7168, 0 },
    { "dots3_note", 61, 128, 128, 7168, 0 },
    { "ernie4_5", 18, 16, 2, 1024, 128 },
    { "ernie4_5_moe", 28, 20, 4, 2560, 0 },
    { "exaone4", 32, 32, 32, 4096, 0 },
    { "falcon", 32, 71, 0, 4544, 0 },
    { "flex_olmo", 32, 32, 0, 4096, 0 },
    { "gemma", 28, 16, 16, 3072, 256 },
    { "gemma2", 26, 8, 4, 2304, 256 },
    { "gemma3_text", 26, 8, 4, 2304, 256 },
    { "glm", 40, 32, 2, 4096, 128 },
    { "glm4", 40, 32, 2, 4096, 128 },
    { "glm4_moe", 46, 96, 8, 4096, 0 },
    { "glm4_moe_lite", 47, 20, 20, 2048, 0 },
    { "glm_moe_dsa", 78, 64, 64, 6144, 0 },
    { "gpt2", 12, 12, 0, 768, 0 },
    { "gpt_bigcode", 12, 12, 1, 768, 0 },
    { "gpt_neox", 44, 64, 0, 6144, 0 },
    { "gpt_oss", 36, 64, 8, 2880, 64 },
    { "gptj", 28, 16, 0, 4096, 0 },
    { "granite", 32, 32, 0, 4096, 0 },
    { "granite_swa", 24, 20, 4, 2560, 0 },
    { "granitemoe", 32, 32, 0, 4096, 0 },
    { "hunyuan_v1_dense", 32, 32, 0, 4096, 0 },
    { "hunyuan_v1_moe", 32, 32, 0, 4096, 0 },
    { "hy_v3", 80, 64, 8, 4096, 128 },
    { "hyperclovax", 32, 32, 0, 4096, 0 },
    { "internlm3", 48, 32, 2, 4096, 128 },
    { "iquestcoder", 80, 40, 8, 5120, 128 },
    { "jais2", 32, 26, 0, 3328, 0 },
    { "kimi_k2", 61, 128, 128, 7168, 0 },
    { "kolibri1", 50, 48, 4, 2560, 128 },
    { "laguna", 40, 48, 8, 2048, 128 },
    { "llama", 32, 32, 0, 4096, 0 },
    { "llama4", 48, 40, 8, 5120, 0 },
    { "llama4_text", 48, 40, 8, 5120, 128 },
    { "mellum", 28, 32, 4, 2304, 128 },
    { "minicpm3", 62, 40, 40, 2560, 0 },
    { "mistral", 32, 32, 8, 4096, 0 },
    { "mixtral", 32, 32, 8, 4096, 0 },
    { "nemotron", 32, 48, -1, 6144, 0 },
    { "nemotron_h", 4, 32, 8, 4096, 128 },
    { "olmo", 32, 32, 0, 4096, 0 },
    { "olmo2", 32, 32, 0, 4096, 0 },
    { "olmo3", 32, 32, 0, 4096, 0 },
    { "olmoe", 16, 16, 0, 2048, 0 },
    { "opt", 12, 12, 0, 768, 0 },
    { "phi", 24, 32, 0, 2048, 0 },
    { "phi3", 32, 32, 0, 3072, 0 },
    { "qwen2", 32, 32, 32, 4096, 0 },
    { "qwen2_5_vl_text", 80, 64, 8, 8192, 0 },
    { "qwen2_moe", 24, 16, 16, 2048, 0 },
    { "qwen2_vl_text", 80, 64, 8, 8192, 0 },
    { "qwen3", 32, 32, 32, 4096, 128 },
    { "qwen3_5_moe_text", 40, 16, 2, 2048, 256 },
    { "qwen3_5_text", 32, 16, 4, 4096, 256 },
    { "qwen3_moe", 24, 32, 4, 2048, 0 },
    { "qwen3_next", 48, 16, 2, 2048, 256 },
    { "qwen3_vl_moe_text", 24, 16, 16, 2048, 0 },
    { "qwen3_vl_text", 32, 32, 32, 4096, 128 },
    { "seed_oss", 64, 80, 8, 4096, 128 },
    { "smollm3", 36, 16, 4, 2048, 0 },
    { "stablelm", 32, 32, 32, 2560, 0 },
    { "starcoder2", 30, 24, 2, 3072, 0 },
    { "vaultgemma", 26, 8, 4, 2304, 256 },
};

const struct class_dims *groups_model_class(const char *type)
{
    for (size_t i = 0; i < sizeof class_defaults / sizeof *class_defaults; i++)
        if (!strcmp(class_defaults[i].type, type))
            return &class_defaults[i];
    return NULL;
}

const struct model_def *groups_model_def(const char *type)
{
    for (size_t i = 0; i < sizeof defs / sizeof *defs; i++)
        if (!strcmp(defs[i].type, type))
            return &defs[i];
    return NULL;
}
