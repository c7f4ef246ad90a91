/* blockmask.h - PyTorch FlexAttention BlockMask tensors from tile states.
 *
 * A block mask classifies every (q-block, kv-block) tile of an attention
 * matrix as empty (nothing attended), partial (some elements attended: the
 * kernel evaluates mask_mod there) or full (every element attended and the
 * tile lies wholly inside the matrix).  FlexAttention stores, per row of
 * tiles, how many partial and how many full tiles it has and their column
 * indices, and the same for the transposed tile matrix:
 *
 *   kv_num_blocks      int32 [.., n_qb]         partial tiles per q-block row
 *   kv_indices         int32 [.., n_qb, n_kb]   their kv-block indices
 *   full_kv_num_blocks int32 [.., n_qb]         full tiles per q-block row
 *   full_kv_indices    int32 [.., n_qb, n_kb]
 *   q_num_blocks       int32 [.., n_kb]         partial tiles per kv-block column
 *   q_indices          int32 [.., n_kb, n_qb]
 *   full_q_num_blocks  int32 [.., n_kb]
 *   full_q_indices     int32 [.., n_kb, n_qb]
 *
 * Index rows are ordered like a stable descending argsort of the 0/1 row:
 * the present blocks in ascending order first, then the absent ones in
 * ascending order (FlexAttention calls the tail undefined; this is what it
 * holds).  Padding rows/columns of a matrix whose length is not a multiple of
 * the block size count as not attended, so an edge tile is never full.
 */
#ifndef KV_BLOCKMASK_H
#define KV_BLOCKMASK_H

#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

enum { KV_TILE_EMPTY = 0, KV_TILE_PARTIAL = 1, KV_TILE_FULL = 2 };

/* The eight tensors in stream order (index into out[8]). */
enum {
    KV_BM_KV_NUM = 0, KV_BM_KV_IDX, KV_BM_FULL_KV_NUM, KV_BM_FULL_KV_IDX,
    KV_BM_Q_NUM, KV_BM_Q_IDX, KV_BM_FULL_Q_NUM, KV_BM_FULL_Q_IDX,
    KV_BM_NFIELDS
};

/* Field names as FlexAttention spells them, indexed as above. */
extern const char *const kv_blockmask_names[KV_BM_NFIELDS];

/* tiles: [n_outer][n_qb][n_kb] tile states (n_outer = product of
 * outer_shape, e.g. B*H).  Fills out[8] (zeroed or released tensors) with
 * the eight int32 tensors above, leading dims outer_shape[0..outer_ndim)
 * (outer_ndim <= KV_MAX_DIMS - 2).  A tile state other than 0/1/2 is an
 * error.  On failure out[] is left untouched (released).  The caller owns
 * and releases out[]. */
int kv_blockmask_build(const uint8_t *tiles, int outer_ndim,
                       const int64_t *outer_shape, int64_t n_qb, int64_t n_kb,
                       struct kv_tensor out[8], struct kv_err *e);

/* One index row: writes the indices t in [0, n) with states[t*stride] ==
 * want in ascending order, then the others in ascending order, into idx[n];
 * returns how many matched. */
int64_t kv_blockmask_order(const uint8_t *states, int64_t stride, int64_t n,
                           uint8_t want, int32_t *idx);

/* Tile state of a tile whose kept-element count is `kept`, with rows x cols
 * real (unpadded) elements out of bq x bk. */
static inline uint8_t kv_tile_state(uint64_t kept, int64_t rows, int64_t cols,
                                    int64_t bq, int64_t bk)
{
    if (kept == 0)
        return KV_TILE_EMPTY;
    if (rows == bq && cols == bk && kept == (uint64_t)bq * (uint64_t)bk)
        return KV_TILE_FULL;
    return KV_TILE_PARTIAL;
}

#endif
