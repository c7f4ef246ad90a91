/* slice.c - one layer's K or V of a KV tensor (see slice.h). */
#include <stdlib.h>
#include <string.h>
#include "chunk/slice.h"
#include "core/cli.h"
#include "core/npy.h"

int kv_slice_check(const struct kv_tensor *x, const char *what,
                   struct kv_err *e)
{
    char sh[128];
    if (x->ndim != 5 || x->shape[1] != 2)
        return kv_err_set(e, "%s: expected KV [L, 2, T, HKV, D], found %s",
                          what, kv_shape_str(x->ndim, x->shape, sh, sizeof sh));
    return 0;
}

int kv_slice_read(const char *path, size_t max_bytes, struct kv_tensor *x,
                  struct kv_err *e)
{
    struct kv_tensor t;
    const char *name = kv_path_name(path, 0);
    size_t len = strlen(name) + 3;
    char *what = malloc(len);
    if (!what)
        return kv_err_set(e, "out of memory");
    snprintf(what, len, "'%s'", name);
    kv_tensor_init(&t);
    int rc = kv_npy_load(path, max_bytes, &t, e) < 0 ||
             kv_slice_check(&t, what, e) < 0 ? -1 : 0;
    free(what);
    if (rc < 0) {
        kv_tensor_release(&t);
        return -1;
    }
    *x = t;
    return 0;
}

int kv_slice_layer(const struct kv_tensor *x, int64_t layer,
                   enum kv_slice_part part, enum kv_slice_layout layout,
                   size_t max_bytes, struct kv_tensor *y, struct kv_err *e)
{
    if (kv_slice_check(x, "KV", e) < 0)
        return -1;
    if (layer < 0 || layer >= x->shape[0])
        return kv_err_set(e, "--layer: %lld out of range [0, %lld)",
                          (long long)layer, (long long)x->shape[0]);
    int64_t T = x->shape[2], H = x->shape[3], D = x->shape[4];
    int64_t s3[3] = {T, H, D}, s4[4] = {1, H, T, D};
    int bhsd = layout == KV_SLICE_BHSD;
    /* the slice beside the KV read, both under max_bytes */
    size_t ybytes = x->nbytes / (size_t)x->shape[0] / 2;
    if (max_bytes && (x->nbytes > max_bytes ||
                      ybytes > max_bytes - x->nbytes))
        return kv_err_set(e, "the slice needs %zu bytes beside the %zu of the "
                          "KV read, more than --max-mem %zu", ybytes,
                          x->nbytes, max_bytes);
    struct kv_tensor t;
    kv_tensor_init(&t);
    if (kv_tensor_alloc(&t, x->dtype, bhsd ? 4 : 3, bhsd ? s4 : s3, 0, e) < 0)
        return -1;
    size_t es = kv_dtype_size(x->dtype), row = (size_t)D * es;
    const uint8_t *src = (const uint8_t *)x->data +
                         ((size_t)layer * 2 + (size_t)(part == KV_SLICE_V)) *
                         (size_t)(T * H) * row;
    if (!bhsd) {
        if (t.nbytes)
            memcpy(t.data, src, t.nbytes);
    } else {
        for (int64_t tt = 0; tt < T; tt++)
            for (int64_t h = 0; h < H; h++)
                memcpy((uint8_t *)t.data + ((size_t)h * T + tt) * row,
                       src + ((size_t)tt * H + h) * row, row);
    }
    *y = t;
    return 0;
}
