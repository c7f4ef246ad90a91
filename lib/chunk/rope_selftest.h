/* rope_selftest.h - a model's RoPE moves measured against the exact
 * rotation (kvchunk selftest-rope): ten moves (P0, p) of +-1, +-4096 and
 * +-131072 positions, each within 1 ulp RMS and 2 ulps max of the KV dtype
 * or not.
 */
#ifndef KV_ROPE_SELFTEST_H
#define KV_ROPE_SELFTEST_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "chunk/rope.h"

enum { KV_ROPE_SELFTEST_MOVES = 10 };

/* The moves, in the order measured: {P0, p}. */
extern const int64_t kv_rope_selftest_moves[KV_ROPE_SELFTEST_MOVES][2];

/* Is a measured move within 1 ulp RMS and 2 ulps max? */
int kv_rope_selftest_ok(const struct kv_rope_error *r);

/* Measure every move with n_vecs random head vectors (move i seeded with
 * seed + i; kv_rope_measure) into res; *n_bad receives the moves that are
 * not within the bound.  0, or -1 with e when a move cannot be made. */
int kv_rope_selftest(const struct kv_rope *r, enum kv_dtype dtype,
                     size_t n_vecs, uint64_t seed,
                     struct kv_rope_error res[KV_ROPE_SELFTEST_MOVES],
                     int *n_bad, struct kv_err *e);

#endif
