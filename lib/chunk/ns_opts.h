/* ns_opts.h - a chunk namespace from the options that describe it, the
 * way kvchunk's --model-config, --model, --tokenizer, --lora, --salt,
 * --dtype, --shape, --rope, --rope-theta, --rotary-dim, --rope-scaling,
 * --nope-layers, --chunk-context and --base-policy read: a model config
 * first (geometry, dtype, RoPE; MLA configs give latent chunks), then
 * each option given over it.  kvchunk and the Python package's kvchunk
 * both read their options through it. */
#ifndef KV_NS_OPTS_H
#define KV_NS_OPTS_H

#include "core/err.h"
#include "chunk/chunk.h"

/* The options as text, NULL where not given (the strings are borrowed
 * and must outlive the namespace: it points at model, tokenizer, lora and
 * salt). */
struct kv_ns_options {
    const char *model_config, *model, *tokenizer, *lora, *salt, *dtype,
               *shape, *rope, *rope_theta, *rotary_dim, *rope_scaling,
               *nope_layers, *chunk_context, *base_policy;
};

/* Fill ns from o: the config first, then each option over it, without
 * the checks that need the geometry (kvchunk split and put read it from
 * the KV when no config or --shape gives it).  0, or -1 with the message
 * kvchunk prints for that option (a usage error).  *have_shape and
 * *have_dtype say whether a config or an option gave the geometry and the
 * dtype. */
int kv_ns_parse_options(const struct kv_ns_options *o, struct kv_namespace *ns,
                        int *have_shape, int *have_dtype, struct kv_err *e);

/* The checks once ns's geometry is known (a latent chunk's shape, the
 * NoPE layers, the rotary dim, the RoPE description); sets the RoPE head
 * dim from the geometry.  0 or -1 with e. */
int kv_ns_check(struct kv_namespace *ns, struct kv_err *e);

/* kv_ns_parse_options, a geometry required ("--shape L,HKV,D is
 * required"), then kv_ns_check. */
int kv_ns_from_options(const struct kv_ns_options *o, struct kv_namespace *ns,
                       int *have_shape, struct kv_err *e);

#endif
