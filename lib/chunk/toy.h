/* toy.h - a toy single-layer projection that turns token ids at positions
 * into K/V (and Q) the way a transformer layer would: an embedding per
 * token id, a linear projection per layer and head, RoPE on K and Q at the
 * token's position.  Deterministic from a seed, the same on every machine.
 *
 * It stands in for a model wherever kvtools needs KV with the right
 * structure: a chunk's K depends on its position only through RoPE and V
 * not at all, so a chunk computed at one position and moved must equal the
 * chunk computed at the other (kvchunk's end-to-end test), and `kvattn gen`
 * exposes it as a synthetic source.
 *
 * Definition (all arithmetic in double, one rounding to the output dtype):
 *   u(tag, a, b, c)  = a uniform number in [-1, 1) from splitmix64 chained
 *                      over seed ^ tag << 56, a, b, c (as uint64)
 *   x_t[i]           = u('E', token_t, i, 0)            i < embed_dim
 *   W_K[l][h*D+d][i] = u('K', l, h*D+d, i) / sqrt(embed_dim)  (also V, Q)
 *   k_raw            = W_K x_t, v = W_V x_t, q = W_Q x_t
 *   K[l,0,t,h,:]     = mscale * R(pos_t) k_raw (rope of the model)
 *   K[l,1,t,h,:]     = v
 *   Q[t,h,:]         = mscale * R(pos_t) q_raw
 * where R is kv_rope_apply_f64 with the scaled frequencies.
 */
#ifndef KV_TOY_H
#define KV_TOY_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"
#include "chunk/rope.h"

struct kv_toy {
    uint64_t seed;
    int64_t n_layers;      /* L */
    int64_t n_heads;       /* query heads Hq (a multiple of n_kv_heads) */
    int64_t n_kv_heads;    /* Hkv */
    int64_t head_dim;      /* D */
    int64_t embed_dim;     /* width of the token embedding, default 32 */
    struct kv_rope rope;   /* rope.head_dim must equal head_dim */
};

/* Defaults: seed 0, embed_dim 32, NeoX RoPE theta 10000 over all of D. */
void kv_toy_init(struct kv_toy *m, int64_t n_layers, int64_t n_heads,
                 int64_t n_kv_heads, int64_t head_dim);

/* Validate the model description. */
int kv_toy_check(const struct kv_toy *m, struct kv_err *e);

/* K/V of n tokens at the given positions: out gets [L, 2, n, Hkv, D] of
 * dtype f16, bf16, f32 or f64 (out must be zeroed or released).  max_bytes
 * bounds the output (0 = none). */
int kv_toy_kv(const struct kv_toy *m, const int32_t *tokens,
              const int64_t *positions, size_t n, enum kv_dtype dtype,
              size_t max_bytes, struct kv_tensor *out, struct kv_err *e);

/* Q of layer `layer` for n tokens: out gets [n, Hq, D]. */
int kv_toy_q(const struct kv_toy *m, const int32_t *tokens,
             const int64_t *positions, size_t n, int64_t layer,
             enum kv_dtype dtype, size_t max_bytes, struct kv_tensor *out,
             struct kv_err *e);

/* Round a double to f32 / f16 / bf16 with a single rounding (nearest
 * even), stored at dst[i] of the given dtype (f64 stores it as is). */
void kv_toy_store(enum kv_dtype dtype, void *dst, size_t i, double x);

#endif
