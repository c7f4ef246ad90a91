/* mask_mem.h - a dense mask rendered into a caller's buffer: the same
 * elements kv_mask_write_npy writes after its header, for a program that
 * keeps the mask in memory (the Python package hands the buffer of a
 * numpy array). */
#ifndef KV_MASK_MEM_H
#define KV_MASK_MEM_H

#include <stddef.h>
#include "core/err.h"
#include "mask/mask.h"

/* Shape of the dense output of m under o: [outer.., (n_q / rows_per_mat,
 * rows_per_mat | n_q), n_kv].  Writes up to KV_MAX_DIMS entries into shape
 * and returns the number of dimensions. */
int kv_mask_dense_shape(const struct kv_mask *m, const struct kv_mask_out *o,
                        int64_t *shape);

/* Render every element of the dense mask (C order, the shape above) into
 * dst, which holds cap bytes (kv_mask_dense_bytes with nz = 0 gives the
 * size needed; a smaller cap is an error and dst is untouched).  Rows are
 * split over o->threads workers (0 = all cores); the bytes do not depend
 * on the count.  The outer matrices repeat the first one. */
int kv_mask_render(const struct kv_mask *m, const struct kv_mask_values *v,
                   const struct kv_mask_out *o, void *dst, size_t cap,
                   struct kv_err *e);

#endif
