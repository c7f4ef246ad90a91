/* tree.h - speculative-decoding token trees given as parent lists: the
 * one check that kvmask tree and kvslot step share, and each token's depth.
 *
 * A tree of n tokens is parents[0..n): parents[t] is the token t hangs
 * from, -1 for a root.  Every parent comes before its children (vLLM lists
 * a tree's tokens level by level, and every order it accepts has this
 * property), so a list with a cycle or a forward reference is refused. */
#ifndef KV_MASK_TREE_H
#define KV_MASK_TREE_H

#include <stdint.h>
#include "core/err.h"

/* The most tokens one tree may have. */
#define KV_TREE_MAX 16384

/* 0 when parents[0..n) is a tree as above (1 <= n <= KV_TREE_MAX), else -1
 * with e naming the first bad token: out of range, its own parent, a cycle
 * or a forward reference.  Messages start with "--parents: ". */
int kv_tree_check(const int64_t *parents, int64_t n, struct kv_err *e);

/* depth[t] = 0 for a root, depth[parents[t]] + 1 otherwise (the number of
 * ancestors of t).  Checks the list first (kv_tree_check); depth is
 * untouched on failure. */
int kv_tree_depths(const int64_t *parents, int64_t n, int64_t *depth,
                   struct kv_err *e);

#endif
