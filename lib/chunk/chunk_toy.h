/* chunk_toy.h - kvchunk toy around the toy projection (chunk/toy.h,
 * chunk/latent.h): its options read and checked as the program reads
 * them, then the KV [L, 2, T, HKV, D] of token ids at positions P.., Q
 * [T, HQ, D] of one layer, or an MLA namespace's latent chunk.  kvchunk
 * toy and the Python package's kvchunk.toy both call these. */
#ifndef KV_CHUNK_TOY_H
#define KV_CHUNK_TOY_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"
#include "chunk/chunk.h"
#include "chunk/toy.h"

/* The options after the namespace's: text as given, NULL where absent.
 * ns is the namespace as kv_ns_parse_options read it (have_shape: a
 * config or --shape gave its geometry). */
struct kv_chunk_toy_opts {
    const struct kv_namespace *ns;
    int have_shape;
    const char *tokens;         /* only whether --tokens was given */
    const char *pos, *seed, *heads, *q, *embed_dim, *max_mem;
};

struct kv_chunk_toy {
    struct kv_namespace ns;     /* checked (kv_ns_check) */
    struct kv_toy model;
    int64_t pos;                /* position of the first token */
    int64_t q_layer;            /* --q LAYER; -1: the KV */
    size_t max_bytes;           /* --max-mem */
};

/* Read and check o into *t, in the program's order: the geometry, the
 * namespace, --tokens given, --pos, --seed, --heads, --q, --embed-dim,
 * --max-mem, then the options a latent (MLA) toy or the KV refuses and
 * the toy model.  0, or -1 with e's message (a usage error). */
int kv_chunk_toy_load(struct kv_chunk_toy *t,
                      const struct kv_chunk_toy_opts *o, struct kv_err *e);

/* The toy projection of tokens[0..n) at positions t->pos.. into out
 * (zeroed or released; f16, bf16 or f32 as the namespace says): the KV,
 * Q of layer t->q_layer, or the latent chunk [L, T, Dl + R] of an MLA
 * namespace, bounded by t->max_bytes.  0, or -1 with e (the tokens would
 * end past position 2^31, over --max-mem, out of memory). */
int kv_chunk_toy_run(const struct kv_chunk_toy *t, const int32_t *tokens,
                     size_t n, struct kv_tensor *out, struct kv_err *e);

#endif
