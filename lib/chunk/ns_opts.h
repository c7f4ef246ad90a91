/* ns_opts.h - a chunk namespace from the options that describe it, the
 * way kvchunk's --model-config, --model, --tokenizer, --lora, --salt,
 * --dtype, --shape, --rope, --rope-theta, --rotary-dim, --rope-scaling,
 * --nope-layers, --chunk-context and --base-policy read: a model config
 * first (geometry, dtype, RoPE; MLA configs give latent chunks), then
 * each option given over it.  Used by the Python package's kvchunk. */
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

/* Fill ns from o and check it (kvchunk's ns_values then ns_finish): 0,
 * or -1 with the message kvchunk prints for that option (a usage error;
 * a geometry needed and absent: "--shape L,HKV,D is required").
 * *have_shape says whether a config or --shape gave the geometry. */
int kv_ns_from_options(const struct kv_ns_options *o, struct kv_namespace *ns,
                       int *have_shape, struct kv_err *e);

#endif
