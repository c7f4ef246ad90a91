/* slice.h - one layer's K or V of a chunk's KV (kvchunk slice), in the
 * layouts kvattn reads: thd [T, HKV, D] or bhsd [1, HKV, T, D].
 */
#ifndef KV_SLICE_H
#define KV_SLICE_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

enum kv_slice_part { KV_SLICE_K = 0, KV_SLICE_V = 1 };
enum kv_slice_layout { KV_SLICE_THD = 0, KV_SLICE_BHSD = 1 };

/* Is x a KV [L, 2, T, HKV, D]?  0, or -1 with "WHAT: expected KV [L, 2,
 * T, HKV, D], found (..)" in e (what names x: a quoted file name, say). */
int kv_slice_check(const struct kv_tensor *x, const char *what,
                   struct kv_err *e);

/* Read the KV file path (kv_npy_load under max_bytes; "-" is stdin) and
 * check it as kv_slice_check does, naming the file.  0, or -1 with e
 * (x untouched). */
int kv_slice_read(const char *path, size_t max_bytes, struct kv_tensor *x,
                  struct kv_err *e);

/* Layer `layer` (in [0, L): a caller's range check, usually a usage
 * error) of the checked KV x, its K or V, into y (allocated here, the
 * caller releases it).  x and y together must fit max_bytes (0 = no
 * limit).  0, or -1 with e (y untouched). */
int kv_slice_layer(const struct kv_tensor *x, int64_t layer,
                   enum kv_slice_part part, enum kv_slice_layout layout,
                   size_t max_bytes, struct kv_tensor *y, struct kv_err *e);

#endif
