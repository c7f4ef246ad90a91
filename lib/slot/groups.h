/* groups.h - the KV-cache groups of a hybrid model, as vLLM 0.33.0 derives
 * them: each layer's KV-cache spec (full attention, sliding window,
 * chunked local attention, Mamba / linear-attention state, MLA latent)
 * from a Hugging Face config.json or from an explicit spec string, then the
 * block size every spec gets (the Mamba page-size alignment that inflates
 * the attention block) and the grouping of vLLM's KV-cache config builder
 * (vllm/v1/core/kv_cache_planning.py get_kv_cache_groups).
 *
 * What is modelled (man 1 kvslot, GROUPS, states it for users):
 *   - one spec per cache: attention layers keep one cache, DeepSeek-V3.2
 *     layers two (the MLA latent and the lightning indexer's keys);
 *   - the hybrid KV-cache manager on, tensor parallel size 1, no
 *     speculative decoding, a layer-outermost KV-cache layout, or the
 *     block-outermost one (packed grouping) where the model's backend
 *     supports only that (dots3_note), no hidden-state or HiSparse specs;
 *   - the attention backend is described by its smallest kernel block
 *     (vLLM's MultipleOf(K), FlashAttention's 16): it sets the sliding
 *     window block size and the Mamba alignment.
 *
 * Sizes are bytes.  A layer's page is block_size * token_bytes for
 * attention, its state bytes for Mamba, or the padded size when one is set.
 */
#ifndef KV_GROUPS_H
#define KV_GROUPS_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

enum kv_cache_kind {
    KV_CACHE_FULL = 0,      /* FullAttentionSpec */
    KV_CACHE_SLIDING,       /* SlidingWindowSpec (window = sliding_window) */
    KV_CACHE_CHUNKED,       /* ChunkedLocalAttentionSpec (window = chunk) */
    KV_CACHE_MAMBA,         /* MambaSpec (Mamba, Mamba2, gated delta net) */
    KV_CACHE_MLA,           /* MLAAttentionSpec, the latent cache */
    KV_CACHE_MLA_INDEXER,   /* MLAAttentionSpec of DeepSeek-V3.2's indexer */
    KV_CACHE_MLA_SLIDING    /* SlidingWindowMLASpec: a latent cache's window */
};

/* One cache of one layer. */
struct kv_cache_spec {
    enum kv_cache_kind kind;
    int64_t layer;            /* decoder layer index */
    int64_t block_size;       /* tokens per block (Mamba: mamba_block_size) */
    int64_t token_bytes;      /* attention: bytes per token in this layer */
    int64_t state_bytes;      /* Mamba: bytes of the state (unpadded) */
    int64_t page_padded;      /* 0, or the padded page size */
    int64_t window;           /* sliding window or attention chunk size */
    int64_t head_size;        /* per-head content (specs equal only when
                                 every field is equal, as in vLLM) */
    int64_t n_kv_heads;
    int index_leader;         /* MLA: the layer has its own indexer
                                 (MLAAttentionSpec.is_index_group_leader) */
};

/* Bytes of one block of this cache. */
int64_t kv_cache_spec_page(const struct kv_cache_spec *s);

/* The name of a kind as kvslot prints it: full, sliding_window,
 * chunked_local, mamba, mla, mla_indexer, mla_sliding_window. */
const char *kv_cache_kind_name(enum kv_cache_kind k);

/* How vLLM is configured around the model. */
struct kv_groups_opts {
    int64_t block_size;       /* --block-size; 0: vLLM's default, 16 */
    int64_t kernel_block;     /* backend's smallest kernel block (16) */
    int64_t max_model_len;    /* 0: max_position_embeddings of the config */
    int cache_dtype_bytes;    /* 0: the model's dtype ("auto") */
    int mamba_align;          /* mamba_cache_mode "align" (prefix caching) */
};

/* One KV-cache group: its layers share one block table. */
struct kv_group {
    enum kv_cache_kind kind;  /* of its (first) spec */
    int uniform_type;         /* vLLM's UniformTypeKVCacheSpecs: layers of
                                 one type with different page sizes */
    int64_t block_size;
    int64_t window;
    int64_t page_bytes;       /* the group spec's page_size_bytes (for a
                                 uniform-type group, the sum over layers) */
    int64_t layer_page_bytes; /* one layer's page (uniform-type: the first) */
    size_t n_specs;
    size_t *specs;            /* indices into kv_groups.spec, in order */
};

/* Everything derived: owns its arrays (kv_groups_release). */
struct kv_groups {
    char model_type[64];      /* "" for an explicit spec */
    int64_t n_layers;         /* decoder layers of the model */
    int64_t block_size;       /* the attention block size after alignment */
    int64_t mamba_block_size; /* 0: no Mamba layer */
    int64_t mamba_page_padded;/* 0: none */
    int64_t max_model_len;
    size_t n_specs;
    struct kv_cache_spec *spec;   /* per cache, after page unification */
    size_t n_groups;
    struct kv_group *group;
    int64_t padding_layers;   /* layers vLLM pads the last groups with */
    int block_outermost;      /* set before kv_groups_build: the model's
                                 backend needs a block-outermost KV-cache
                                 layout, grouped as vLLM packs it */
};

void kv_groups_init(struct kv_groups *g);
void kv_groups_release(struct kv_groups *g);

/* Derive every cache spec of the model in the config.json at path ("-" is
 * stdin), then group them; g is released first.  Unknown or inconsistent
 * configs are refused with a message naming the key. */
int kv_groups_from_config(struct kv_groups *g, const char *path,
                          const struct kv_groups_opts *o, struct kv_err *e);

/* The same from a buffer (name: what errors call it). */
int kv_groups_from_json(struct kv_groups *g, const char *buf, size_t len,
                        const char *name, const struct kv_groups_opts *o,
                        struct kv_err *e);

/* The same from an explicit spec (grammar in kvslot(1), GROUPS):
 *   KVG   := ['packed:'] SPEC
 *   SPEC  := ITEM (',' ITEM)*
 *   ITEM  := [N '*'] LAYER | [N '*'] '(' SPEC ')'
 *   LAYER := 'full' [':' T] | 'sliding=' W [':' T] | 'chunked=' C [':' T]
 *          | 'mla' [':' T] | 'indexer' [':' T] | 'mamba=' S
 * T: bytes per token of the layer (default 4096; an indexer's 132), S:
 * bytes of a Mamba state.  Layers are numbered in order.  'packed:': a
 * block-outermost layout, grouped as vLLM packs it (block_outermost). */
int kv_groups_from_spec(struct kv_groups *g, const char *spec,
                        const struct kv_groups_opts *o, struct kv_err *e);

/* The groups of the config.json at model_config when it is given, else of
 * the spec, as the programs' --model-config and --kv-groups give them.
 * On failure g is released and *usage is 1 for the spec (the message
 * prefixed "--kv-groups: "), 0 for the file. */
int kv_groups_load(struct kv_groups *g, const char *model_config,
                   const char *spec, const struct kv_groups_opts *o,
                   int *usage, struct kv_err *e);

/* The grouping alone, from per-cache specs whose block sizes and paddings
 * are final (vLLM's get_kv_cache_groups); g takes a copy of specs. */
int kv_groups_build(struct kv_groups *g, const struct kv_cache_spec *specs,
                    size_t n_specs, struct kv_err *e);

/* ---- chunked local attention: vLLM's virtual batches ------------------ */

/* The batch a chunked local attention layer sees (vLLM 0.33.0
 * make_local_attention_virtual_batches): every request split at the chunk
 * boundaries of its keys into virtual requests, each with its queries, its
 * keys (a whole chunk except the last) and the block-table columns of its
 * chunk.  Owns its arrays (kv_local_batches_release). */
struct kv_local_batches {
    size_t n_virtual;         /* virtual requests */
    size_t pages;             /* block-table columns of one: chunk / block */
    int64_t *query_start_loc; /* [n_virtual + 1] cu_seqlens_q_local */
    int64_t *seq_lens;        /* [n_virtual] seqlens_k_local */
    int64_t *req_indices;     /* [n_virtual] the request each comes from */
    int64_t *k_start;         /* [n_virtual] its first key's position */
    int64_t *block_table;     /* [n_virtual][pages] block_table_local */
    int64_t max_query_len, max_seq_len;
};

void kv_local_batches_release(struct kv_local_batches *b);

/* Split a step: q_lens and seq_lens per request (seq_lens = computed +
 * scheduled), the block table [n_reqs][n_cols] (a short row is read as
 * vLLM reads its zero-filled tensor).  chunk must be a multiple of
 * block_size; every seq_len at least its q_len.  b is released first. */
int kv_local_virtual_batches(struct kv_local_batches *b, int64_t chunk,
                             int64_t block_size, const int64_t *q_lens,
                             const int64_t *seq_lens, size_t n_reqs,
                             const int64_t *block_table, size_t n_cols,
                             struct kv_err *e);

#endif
