/* segments.h - the segments of a prompt (system prompt, chunks, question)
 * read from a file, for the chunk-isolated mask (KV_MASK_CHUNK): text
 * lines "KIND OFFSET LENGTH [KEY]" (KIND sys, chunk or question; '#'
 * starts a comment), or an integer .npy [n, 3] of kind code (0 sys, 1
 * chunk, 2 question), offset and length, possibly followed by the
 * segments' keys (u8 [n, 16]) as kvchunk split writes them.  Segments are
 * contiguous from offset 0.  kvmask --segments and the Python package's
 * kvmask.chunk(segments=) read them through it. */
#ifndef KV_MASK_SEGMENTS_H
#define KV_MASK_SEGMENTS_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

/* The caller's memory check: 0 when n rows of `bytes` each may be held,
 * else -1 with e set (what names the rows).  NULL: no limit. */
typedef int (*kv_mask_limit_fn)(void *ctx, double n, double bytes,
                                const char *what, struct kv_err *e);

/* Read the segments of path ("-" = stdin) into *kinds (enum kv_seg_kind
 * codes) and *lens, n_seg of each (malloc'd; the caller frees both);
 * max_bytes bounds an .npy array.  Each segment costs 2 * (1 + 8) bytes,
 * counted through over before it is held.  0, or -1 with e naming the file
 * ("'NAME': row 2: ..."); the outputs are untouched on failure. */
int kv_mask_segments_read(const char *path, size_t max_bytes,
                          kv_mask_limit_fn over, void *ctx, uint8_t **kinds,
                          int64_t **lens, size_t *n_seg, struct kv_err *e);

#endif
