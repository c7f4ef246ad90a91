/* rope_selftest.c - the moves of kvchunk selftest-rope (see
 * rope_selftest.h). */
#include "chunk/rope_selftest.h"

const int64_t kv_rope_selftest_moves[KV_ROPE_SELFTEST_MOVES][2] = {
    {0, 1}, {0, 4096}, {0, 131072}, {1, 0}, {4096, 0}, {131072, 0},
    {100, 32768}, {4096, 131072}, {131072, 4096}, {65536, 65537},
};

int kv_rope_selftest_ok(const struct kv_rope_error *r)
{
    return r->rms_ulp <= 1.0 && r->max_ulp <= 2.0;
}

int kv_rope_selftest(const struct kv_rope *r, enum kv_dtype dtype,
                     size_t n_vecs, uint64_t seed,
                     struct kv_rope_error res[KV_ROPE_SELFTEST_MOVES],
                     int *n_bad, struct kv_err *e)
{
    struct kv_rope_error out[KV_ROPE_SELFTEST_MOVES];
    int bad = 0;
    for (int i = 0; i < KV_ROPE_SELFTEST_MOVES; i++) {
        if (kv_rope_measure(r, dtype, kv_rope_selftest_moves[i][0],
                            kv_rope_selftest_moves[i][1], n_vecs,
                            seed + (uint64_t)i, &out[i], e) < 0)
            return -1;
        bad += !kv_rope_selftest_ok(&out[i]);
    }
    for (int i = 0; i < KV_ROPE_SELFTEST_MOVES; i++)
        res[i] = out[i];
    *n_bad = bad;
    return 0;
}
