/* groups_impl.h - what the two files of the KV-cache groups share and
 * nothing outside them sees: a layer's cache before its block size is
 * chosen, the model-level facts the block size depends on, and the stage
 * both readers end in.  groups.c reads the explicit spec string and builds
 * the groups; groups_config.c reads a Hugging Face config.json. */
#ifndef KV_GROUPS_IMPL_H
#define KV_GROUPS_IMPL_H

#include "slot/groups.h"

/* A layer before vLLM has chosen its block size. */
struct raw {
    enum kv_cache_kind kind;
    int64_t layer, token_bytes, state_bytes, window, head_size, n_kv_heads;
};

struct model_facts {
    int use_mla;
    int64_t attn_token_bytes;  /* one standard attention layer's token */
};

/* Checks the ranges of o (block size, kernel block, model length). */
int groups_check_opts(const struct kv_groups_opts *o, struct kv_err *e);

/* Gives each of the n raw layers r its block size (vLLM's alignment of
 * hybrid Mamba models and the sliding-window block), then builds the
 * groups into g (kv_groups_build).  r stays the caller's. */
int groups_make_specs(struct kv_groups *g, const struct raw *r, size_t n,
                      const struct model_facts *mf,
                      const struct kv_groups_opts *o, struct kv_err *e);

#endif
