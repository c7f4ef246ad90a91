/* groups_models.h - the model types kvslot groups reads from a config.json,
 * each with the rule its vLLM 0.33.0 model file builds the caches by
 * (groups_models.c), and the refusals.  A model type not in the table has
 * not been compared with vLLM and is refused: read as plain attention it
 * could be a wrong answer. */
#ifndef KV_GROUPS_MODELS_H
#define KV_GROUPS_MODELS_H

#include <stdint.h>

enum model_rule {
    MR_WINDOW,      /* attention layers, full or sliding (groups_config.c) */
    MR_GPT_OSS,     /* gpt_oss.py: the even layers slide */
    MR_LLAMA4,      /* llama4.py: chunked local attention */
    MR_QWEN3_NEXT,  /* qwen3_next.py: gated delta net beside attention */
    MR_NEMOTRON_H,  /* nemotron_h.py: Mamba2 beside attention */
    MR_MLA,         /* deepseek_v2.py: one latent a layer (+ V3.2 indexer) */
    MR_DOTS3,       /* dots3_note: sliding-window MLA beside sparse MLA */
    MR_MINICPM3,    /* minicpm3.py: attention over all heads, q/k head dims */
    MR_REFUSED      /* vLLM builds caches kvslot does not model */
};

/* How an MR_WINDOW model's layers slide (a window of 0: none do). */
#define MF_LT_HONOR  1  /* the model file reads layer_types per layer; else
                           a window applies only when every layer slides
                           (CacheConfig.sliding_window) */
#define MF_LT_FILLED 2  /* transformers fills layer_types by a rule kvslot
                           does not follow: the config must list them when
                           the model has a window */
#define MF_USW       4  /* use_sliding_window (default false) gates it */
#define MF_MWL       8  /* layer_types filled from max_window_layers (layers
                           from it on slide), default mwl_def */
#define MF_MWL_ASSERT 16 /* qwen2.py's Qwen2Model: mixed layer types with
                            max_window_layers below the layer count assert */
#define MF_EVERY_FIXED 32 /* the pattern is the class's, whatever
                             sliding_window_pattern says (Gemma 2) */
#define MF_HEAD_ROPE 64  /* head_dim, when given, is qk_rope_head_dim
                            (the config class's attribute_map) */
#define MF_HEAD_HIDDEN 128 /* the head size is hidden_size / heads whatever
                              head_dim says (the model file's own) */

struct model_def {
    const char *type;
    enum model_rule rule;
    int flags;
    int every;          /* MR_WINDOW without layer_types: all but every
                           every-th layer slide (transformers' pattern) */
    int64_t window;     /* the config class's default sliding_window */
    int add;            /* the model file passes sliding_window + add */
    int64_t mwl_def;    /* max_window_layers default (MF_MWL) */
    int64_t kv_lora, rope, topk; /* MLA defaults of the config class */
    const char *why;    /* MR_REFUSED: what vLLM builds */
};

/* The sizes of a config class's defaults; Hkv 0: the query heads, -1:
 * none (the config must give them); D 0: hidden / H. */
struct class_dims {
    const char *type;
    int64_t L, H, Hkv, hidden;
    int64_t D;          /* head_dim; 0: hidden / H */
};

/* The defaults of the type's config class, or NULL when vLLM has none
 * (the config must then give every size). */
const struct class_dims *groups_model_class(const char *type);

/* The entry of a model type, or NULL when it has not been reviewed. */
const struct model_def *groups_model_def(const char *type);

#endif
