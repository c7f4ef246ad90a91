/* blockmask.c - FlexAttention BlockMask tensors from a matrix of tile
 * states (see blockmask.h for the eight tensors and their ordering). */
#include <stdint.h>
#include <string.h>
#include "mask/blockmask.h"

const char *const kv_blockmask_names[KV_BM_NFIELDS] = {
    "kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
    "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices",
};

int64_t kv_blockmask_order(const uint8_t *states, int64_t stride, int64_t n,
                           uint8_t want, int32_t *idx)
{
    int64_t k = 0;
    for (int64_t t = 0; t < n; t++)
        if (states[t * stride] == want)
            idx[k++] = (int32_t)t;
    int64_t n_present = k;
    for (int64_t t = 0; t < n; t++)
        if (states[t * stride] != want)
            idx[k++] = (int32_t)t;
    return n_present;
}

/* Fill the num/indices pair of one orientation: rows of length n_cols read
 * at (row_stride, col_stride) inside each outer matrix. */
static void fill_side(const uint8_t *tiles, int64_t n_outer, int64_t mat,
                      int64_t n_rows, int64_t n_cols, int64_t row_stride,
                      int64_t col_stride, uint8_t want, int32_t *num,
                      int32_t *idx)
{
    if (n_rows == 0)
        return;
    for (int64_t o = 0; o < n_outer; o++)
        for (int64_t r = 0; r < n_rows; r++) {
            const uint8_t *row = tiles + o * mat + r * row_stride;
            int64_t at = o * n_rows + r;
            num[at] = n_cols == 0 ? 0 :
                (int32_t)kv_blockmask_order(row, col_stride, n_cols, want,
                                            idx + at * n_cols);
        }
}

int kv_blockmask_build(const uint8_t *tiles, int outer_ndim,
                       const int64_t *outer_shape, int64_t n_qb, int64_t n_kb,
                       struct kv_tensor out[8], struct kv_err *e)
{
    struct kv_tensor t[KV_BM_NFIELDS];
    int64_t shape[KV_MAX_DIMS];
    int64_t n_outer = 1;
    size_t mat, total;

    if (outer_ndim < 0 || outer_ndim > KV_MAX_DIMS - 2)
        return kv_err_set(e, "block mask: %d leading dimensions, at most %d",
                          outer_ndim, KV_MAX_DIMS - 2);
    if (n_qb < 0 || n_kb < 0 || n_qb > INT32_MAX || n_kb > INT32_MAX)
        return kv_err_set(e, "block mask: %lld x %lld tiles do not fit int32 "
                          "indices", (long long)n_qb, (long long)n_kb);
    for (int d = 0; d < outer_ndim; d++) {
        if (outer_shape[d] < 0)
            return kv_err_set(e, "block mask: negative leading dimension");
        size_t p;
        if (kv_size_mul((size_t)n_outer, (size_t)outer_shape[d], &p) ||
            p > INT64_MAX)
            return kv_err_set(e, "block mask: leading dimensions overflow");
        n_outer = (int64_t)p;
        shape[d] = outer_shape[d];
    }
    if (kv_size_mul((size_t)n_qb, (size_t)n_kb, &mat) ||
        kv_size_mul(mat, (size_t)n_outer, &total))
        return kv_err_set(e, "block mask: %lld x %lld tiles overflow",
                          (long long)n_qb, (long long)n_kb);
    for (size_t i = 0; i < total; i++)
        if (tiles[i] > KV_TILE_FULL)
            return kv_err_set(e, "block mask: tile state %u at %zu (expected "
                              "0 empty, 1 partial, 2 full)", tiles[i], i);

    for (int f = 0; f < KV_BM_NFIELDS; f++)
        kv_tensor_init(&t[f]);
    for (int f = 0; f < KV_BM_NFIELDS; f++) {
        int q_side = f >= KV_BM_Q_NUM;
        int is_idx = f & 1;
        int nd = outer_ndim;
        shape[nd++] = q_side ? n_kb : n_qb;
        if (is_idx)
            shape[nd++] = q_side ? n_qb : n_kb;
        if (kv_tensor_alloc(&t[f], KV_I32, nd, shape, 0, e) != 0) {
            for (int g = 0; g < KV_BM_NFIELDS; g++)
                kv_tensor_release(&t[g]);
            return -1;
        }
    }
    fill_side(tiles, n_outer, (int64_t)mat, n_qb, n_kb, n_kb, 1,
              KV_TILE_PARTIAL, t[KV_BM_KV_NUM].data, t[KV_BM_KV_IDX].data);
    fill_side(tiles, n_outer, (int64_t)mat, n_qb, n_kb, n_kb, 1,
              KV_TILE_FULL, t[KV_BM_FULL_KV_NUM].data,
              t[KV_BM_FULL_KV_IDX].data);
    fill_side(tiles, n_outer, (int64_t)mat, n_kb, n_qb, 1, n_kb,
              KV_TILE_PARTIAL, t[KV_BM_Q_NUM].data, t[KV_BM_Q_IDX].data);
    fill_side(tiles, n_outer, (int64_t)mat, n_kb, n_qb, 1, n_kb,
              KV_TILE_FULL, t[KV_BM_FULL_Q_NUM].data,
              t[KV_BM_FULL_Q_IDX].data);
    for (int f = 0; f < KV_BM_NFIELDS; f++) {
        kv_tensor_release(&out[f]);
        out[f] = t[f];
    }
    return 0;
}
