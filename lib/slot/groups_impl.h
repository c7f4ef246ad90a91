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
    int index_leader;          /* MLA: has its own indexer */
};

struct model_facts {
    int use_mla;
    int64_t attn_token_bytes;  /* one standard attention layer's token */
    int block_outermost;       /* the backend's only KV-cache layout is
                                  block-outermost (packed grouping) */
};

/* vLLM's packed grouping for a block-outermost layout
 * (_get_packed_kv_cache_groups): the n specs s into groups of g.  Returns
 * 1 when it grouped them, 0 when it does not apply (one page size), -1 on
 * failure.  groups_packed.c. */
int groups_packed(struct kv_groups *g, size_t n, struct kv_err *e);

/* UniformTypeKVCacheSpecs.is_uniform_type for a spec beside the first of
 * a collection: one block size, and x of the first's uniform-type base
 * (the type's own test: a window or chunk in common, Mamba pages equal). */
int groups_uniform_pair(const struct kv_cache_spec *first,
                        const struct kv_cache_spec *x);

/* Appends a group of the n specs idx of g (uniform: a
 * UniformTypeKVCacheSpecs, its page the sum of its layers'). */
int groups_add(struct kv_groups *g, const size_t *idx, size_t n, int uniform,
               struct kv_err *e);

/* Checks the ranges of o (block size, kernel block, model length). */
int groups_check_opts(const struct kv_groups_opts *o, struct kv_err *e);

/* Gives each of the n raw layers r its block size (vLLM's alignment of
 * hybrid Mamba models and the sliding-window block), then builds the
 * groups into g (kv_groups_build).  r stays the caller's. */
int groups_make_specs(struct kv_groups *g, const struct raw *r, size_t n,
                      const struct model_facts *mf,
                      const struct kv_groups_opts *o, struct kv_err *e);

#endif
