/* tree.c - parent lists of speculative-decoding trees (see tree.h). */
#include "mask/tree.h"

int kv_tree_check(const int64_t *par, int64_t n, struct kv_err *e)
{
    if (n < 1 || !par)
        return kv_err_set(e, "--parents: expected at least one token");
    if (n > KV_TREE_MAX)
        return kv_err_set(e, "--parents: %lld tokens, at most %d", (long long)n,
                          KV_TREE_MAX);
    for (int64_t t = 0; t < n; t++) {
        int64_t p = par[t];
        if (p < -1 || p >= n)
            return kv_err_set(e, "--parents: token %lld: parent %lld is not a "
                              "token (expected -1 .. %lld)", (long long)t,
                              (long long)p, (long long)(n - 1));
    }
    for (int64_t t = 0; t < n; t++) {
        int64_t p = par[t];
        if (p == t)
            return kv_err_set(e, "--parents: token %lld is its own parent (a "
                              "cycle)", (long long)t);
        if (p > t) {
            /* a cycle when the chain from t comes back to t */
            int64_t x = p, steps = 0;
            while (x >= 0 && x != t && steps++ <= n)
                x = par[x];
            if (x == t)
                return kv_err_set(e, "--parents: a cycle through token %lld "
                                  "(its parent %lld descends from it)",
                                  (long long)t, (long long)p);
            return kv_err_set(e, "--parents: token %lld: parent %lld comes "
                              "after it (a forward reference: every parent "
                              "must come before its children)", (long long)t,
                              (long long)p);
        }
    }
    return 0;
}

int kv_tree_depths(const int64_t *par, int64_t n, int64_t *depth,
                   struct kv_err *e)
{
    if (kv_tree_check(par, n, e))
        return -1;
    /* parents come first, so one pass in order sees each parent's depth */
    for (int64_t t = 0; t < n; t++)
        depth[t] = par[t] < 0 ? 0 : depth[par[t]] + 1;
    return 0;
}
