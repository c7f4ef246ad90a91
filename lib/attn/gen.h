/* gen.h - deterministic synthetic Q, K, V with the structure real attention
 * has, so that sparse selection and error studies have something to find.
 *
 * Every value is a function of (seed, tensor, index) only, so the output is
 * the same for any thread count.  Q [B, Hq, Lq, D], K/V [B, Hkv, Lk, D]
 * (bhsd); query i sits at position i + Lk - Lq, key j at position j.
 * Each head draws its own content direction u and sink direction s
 * (standard normal vectors); noise and V are standard normal.  Patterns:
 *
 *   random   Q, K, V i.i.d. N(0, 1): flat attention, no structure.
 *   rope     q_i = 0.6 R(i) u + 0.8 n, k_j = 0.6 R(j) u + 0.8 n, with R(p)
 *            the rotary rotation of position p (pairs (2m, 2m+1), angle
 *            p * theta^(-2m/D), theta 10000): scores depend on i - j and
 *            peak near the diagonal (mild locality).
 *   local    as rope with weights 1.0 / 0.5: a sharp diagonal band
 *            (sliding-window heads).
 *   sink     rope plus q += 0.5 s for every query and k += 1.0 s for the
 *            first n_sink keys (default 4): every row puts most of its
 *            mass on the first tokens (attention sinks).
 *   stripes  rope plus q += 0.5 s and k += 0.7 s on a sparse random set of
 *            key columns (about one in 32): vertical stripes.
 *   mix      head h uses rope, local, sink, stripes for h mod 4, and every
 *            head has the sinks: what a real layer looks like.
 */
#ifndef KV_GEN_H
#define KV_GEN_H

#include <stdint.h>
#include <stddef.h>
#include "core/err.h"
#include "core/tensor.h"

enum kv_gen_pattern {
    KV_GEN_RANDOM = 0, KV_GEN_ROPE, KV_GEN_LOCAL, KV_GEN_SINK, KV_GEN_STRIPES,
    KV_GEN_MIX
};

int kv_gen_pattern_parse(const char *s, enum kv_gen_pattern *p, struct kv_err *e);
const char *kv_gen_pattern_name(enum kv_gen_pattern p);

struct kv_gen_spec {
    int64_t B, Hq, Hkv, Lq, Lk, D;
    enum kv_gen_pattern pattern;
    uint64_t seed;
    enum kv_dtype dtype;          /* f32, f16, bf16 or f64 */
    int64_t n_sink;               /* sink keys (sink, mix); 0 = 4 */
    double theta;                 /* rotary base; 0 = 10000 */
    int thd;                      /* write [B*L, H, D] instead of bhsd */
    int n_threads;
    size_t max_bytes;
};

/* Fill q, k, v (zeroed or released) per the spec; validates sizes first. */
int kv_gen_qkv(const struct kv_gen_spec *s, struct kv_tensor *q,
               struct kv_tensor *k, struct kv_tensor *v, struct kv_err *e);

#endif
