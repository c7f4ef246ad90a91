/* mask_mem.c - a dense mask rendered into memory, row blocks over threads. */
#include <string.h>
#include "core/cli.h"
#include "mask/mask_mem.h"

/* Rows a worker renders at a time: enough to amortise the hand-out, few
 * enough to balance a causal mask's uneven rows. */
enum { ROWS_PER_ITEM = 64 };

struct render_job {
    const struct kv_mask *m;
    const struct kv_mask_values *v;
    uint8_t *dst;
    size_t row_bytes;
};

static void render_rows(void *ctx, size_t item)
{
    const struct render_job *j = ctx;
    int64_t lo = (int64_t)item * ROWS_PER_ITEM;
    int64_t hi = lo + ROWS_PER_ITEM < j->m->n_q ? lo + ROWS_PER_ITEM : j->m->n_q;
    for (int64_t i = lo; i < hi; i++)
        kv_mask_render_row(j->m, j->v, i, j->dst + (size_t)i * j->row_bytes);
}

int kv_mask_dense_shape(const struct kv_mask *m, const struct kv_mask_out *o,
                        int64_t *shape)
{
    int nd = 0;
    for (int d = 0; d < o->n_outer_dims; d++)
        shape[nd++] = o->outer[d];
    if (m->rows_per_mat > 0) {
        shape[nd++] = m->n_q / m->rows_per_mat;
        shape[nd++] = m->rows_per_mat;
    } else {
        shape[nd++] = m->n_q;
    }
    shape[nd++] = m->n_kv;
    return nd;
}

int kv_mask_render(const struct kv_mask *m, const struct kv_mask_values *v,
                   const struct kv_mask_out *o, void *dst, size_t cap,
                   struct kv_err *e)
{
    size_t total, mat;
    int64_t reps = 1;
    if (kv_mask_dense_bytes(m, v, o, 0, &total))
        return kv_err_set(e, "dense mask size overflows");
    if (total > cap)
        return kv_err_set(e, "the dense mask needs %zu bytes, the buffer "
                          "holds %zu", total, cap);
    for (int d = 0; d < o->n_outer_dims; d++)
        reps *= o->outer[d];
    if (total == 0)
        return 0;
    struct render_job j = { m, v, dst, (size_t)m->n_kv * kv_dtype_size(v->dtype) };
    mat = j.row_bytes * (size_t)m->n_q;
    size_t items = ((size_t)m->n_q + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM;
    kv_parallel_for(items, o->threads, render_rows, &j);
    for (int64_t r = 1; r < reps; r++)
        memcpy(j.dst + (size_t)r * mat, j.dst, mat);
    return 0;
}
