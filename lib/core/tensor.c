/* tensor.c - dtypes, checked sizes and the owned n-d array. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "core/half.h"
#include "core/tensor.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[KV_NDTYPES] = {
    [KV_BOOL] = {"bool", 1}, [KV_U8] = {"u8", 1},   [KV_I8] = {"i8", 1},
    [KV_I16] = {"i16", 2},   [KV_I32] = {"i32", 4}, [KV_I64] = {"i64", 8},
    [KV_F16] = {"f16", 2},   [KV_BF16] = {"bf16", 2}, [KV_F32] = {"f32", 4},
    [KV_F64] = {"f64", 8},   [KV_U16] = {"u16", 2}, [KV_U32] = {"u32", 4},
    [KV_U64] = {"u64", 8},
};

size_t kv_dtype_size(enum kv_dtype t)
{
    return (unsigned)t < KV_NDTYPES ? dtypes[t].size : 0;
}

const char *kv_dtype_name(enum kv_dtype t)
{
    return (unsigned)t < KV_NDTYPES ? dtypes[t].name : "?";
}

int kv_dtype_is_float(enum kv_dtype t)
{
    return t == KV_F16 || t == KV_BF16 || t == KV_F32 || t == KV_F64;
}

void kv_f32_store_n(enum kv_dtype dt, const float *src, void *dst, size_t n)
{
    switch (dt) {
    case KV_F32:
        memcpy(dst, src, n * sizeof(float));
        break;
    case KV_BF16:
        kv_f32_to_bf16_n(src, dst, n);
        break;
    case KV_F16:
        kv_f32_to_f16_n(src, dst, n);
        break;
    default: {
        double *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = src[i];
    }
    }
}

int kv_dtype_parse(const char *s, enum kv_dtype *out, struct kv_err *e)
{
    static const struct {
        const char *alias;
        enum kv_dtype t;
    } aliases[] = {
        {"float16", KV_F16}, {"half", KV_F16}, {"bfloat16", KV_BF16},
        {"float32", KV_F32}, {"float", KV_F32}, {"float64", KV_F64},
        {"double", KV_F64}, {"int8", KV_I8}, {"uint8", KV_U8},
        {"int16", KV_I16}, {"int32", KV_I32}, {"int64", KV_I64},
        {"uint16", KV_U16}, {"uint32", KV_U32}, {"uint64", KV_U64},
    };
    for (int i = 0; i < KV_NDTYPES; i++)
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (enum kv_dtype)i;
            return 0;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(s, aliases[i].alias) == 0) {
            *out = aliases[i].t;
            return 0;
        }
    return kv_err_set(e, "unknown dtype '%s'", s);
}

int kv_size_mul(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

int kv_size_add(size_t a, size_t b, size_t *out)
{
    if (b > SIZE_MAX - a)
        return -1;
    *out = a + b;
    return 0;
}

void kv_tensor_init(struct kv_tensor *t)
{
    memset(t, 0, sizeof *t);
}

void kv_tensor_release(struct kv_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    kv_tensor_init(t);
}

size_t kv_tensor_numel(const struct kv_tensor *t)
{
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= (size_t)t->shape[i];
    return n;
}

char *kv_shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t off = 0;
    int n;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    n = snprintf(buf, len, "(");
    off = n > 0 ? (size_t)n : 0;
    for (int i = 0; i < ndim && off < len; i++) {
        n = snprintf(buf + off, len - off, "%s%" PRId64, i ? ", " : "",
                     shape[i]);
        if (n < 0)
            break;
        off += (size_t)n;
    }
    if (off < len)
        snprintf(buf + off, len - off, ndim == 1 ? ",)" : ")");
    return buf;
}

int kv_shape_check(int ndim, const int64_t *shape, enum kv_dtype dtype,
                   size_t max_bytes, size_t *nbytes, struct kv_err *e)
{
    char s[256];
    size_t n = kv_dtype_size(dtype);

    if (ndim < 0 || ndim > KV_MAX_DIMS)
        return kv_err_set(e, "%d dimensions, at most %d supported", ndim,
                          KV_MAX_DIMS);
    if (n == 0)
        return kv_err_set(e, "invalid dtype");
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return kv_err_set(e, "shape %s has a negative dimension",
                              kv_shape_str(ndim, shape, s, sizeof s));
        if ((uint64_t)shape[i] > SIZE_MAX ||
            kv_size_mul(n, (size_t)shape[i], &n) < 0)
            return kv_err_set(e, "shape %s of %s is too large",
                              kv_shape_str(ndim, shape, s, sizeof s),
                              kv_dtype_name(dtype));
    }
    if (max_bytes && n > max_bytes)
        return kv_err_set(e, "shape %s of %s needs %zu bytes, more than the "
                          "limit of %zu (--max-mem)",
                          kv_shape_str(ndim, shape, s, sizeof s),
                          kv_dtype_name(dtype), n, max_bytes);
    *nbytes = n;
    return 0;
}

int kv_tensor_alloc(struct kv_tensor *t, enum kv_dtype dtype, int ndim,
                    const int64_t *shape, size_t max_bytes, struct kv_err *e)
{
    size_t nbytes;
    void *p = NULL;

    if (kv_shape_check(ndim, shape, dtype, max_bytes, &nbytes, e) < 0)
        return -1;
    if (nbytes) {
        p = calloc(1, nbytes);
        if (!p)
            return kv_err_set(e, "out of memory allocating %zu bytes", nbytes);
    }
    kv_tensor_release(t);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->data = p;
    t->nbytes = nbytes;
    return 0;
}

void kv_tensor_move(struct kv_tensor *dst, struct kv_tensor *src)
{
    kv_tensor_release(dst);
    *dst = *src;
    kv_tensor_init(src);
}

double kv_tensor_get_f64(const struct kv_tensor *t, size_t i)
{
    const void *p = t->data;
    switch (t->dtype) {
    case KV_BOOL:
    case KV_U8: return ((const uint8_t *)p)[i];
    case KV_I8: return ((const int8_t *)p)[i];
    case KV_I16: return ((const int16_t *)p)[i];
    case KV_U16: return ((const uint16_t *)p)[i];
    case KV_I32: return ((const int32_t *)p)[i];
    case KV_U32: return ((const uint32_t *)p)[i];
    case KV_I64: return (double)((const int64_t *)p)[i];
    case KV_U64: return (double)((const uint64_t *)p)[i];
    case KV_F16: return kv_f16_to_f32(((const uint16_t *)p)[i]);
    case KV_BF16: return kv_bf16_to_f32(((const uint16_t *)p)[i]);
    case KV_F32: return ((const float *)p)[i];
    case KV_F64: return ((const double *)p)[i];
    default: return 0;
    }
}

int64_t kv_tensor_get_i64(const struct kv_tensor *t, size_t i)
{
    const void *p = t->data;
    switch (t->dtype) {
    case KV_BOOL:
    case KV_U8: return ((const uint8_t *)p)[i];
    case KV_I8: return ((const int8_t *)p)[i];
    case KV_I16: return ((const int16_t *)p)[i];
    case KV_U16: return ((const uint16_t *)p)[i];
    case KV_I32: return ((const int32_t *)p)[i];
    case KV_U32: return ((const uint32_t *)p)[i];
    case KV_I64: return ((const int64_t *)p)[i];
    case KV_U64: return (int64_t)((const uint64_t *)p)[i];
    default: {
        double d = kv_tensor_get_f64(t, i);
        if (!(d == d))
            return 0;
        if (d >= 9.2e18)
            return INT64_MAX;
        if (d <= -9.2e18)
            return INT64_MIN;
        return (int64_t)d;
    }
    }
}

/* Convert src into a new tensor of dtype `to`.  Float to float goes through
 * the half-precision helpers (round to nearest even); integers convert by
 * value.  Float to integer truncates toward zero as C does (NaN gives 0). */
int kv_tensor_convert(struct kv_tensor *dst, const struct kv_tensor *src,
                      enum kv_dtype to, struct kv_err *e)
{
    struct kv_tensor t;
    size_t n = kv_tensor_numel(src);

    kv_tensor_init(&t);
    if (kv_tensor_alloc(&t, to, src->ndim, src->shape, 0, e) < 0)
        return -1;
    if (src->dtype == to) {
        if (n)
            memcpy(t.data, src->data, src->nbytes);
    } else if (to == KV_F32 && src->dtype == KV_F16) {
        kv_f16_to_f32_n(src->data, t.data, n);
    } else if (to == KV_F32 && src->dtype == KV_BF16) {
        kv_bf16_to_f32_n(src->data, t.data, n);
    } else if (to == KV_F16 || to == KV_BF16) {
        uint16_t *d = t.data;
        for (size_t i = 0; i < n; i++) {
            float f = src->dtype == KV_F32 ? ((const float *)src->data)[i]
                                           : (float)kv_tensor_get_f64(src, i);
            d[i] = to == KV_F16 ? kv_f32_to_f16(f) : kv_f32_to_bf16(f);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            void *p = t.data;
            switch (to) {
            case KV_F32: ((float *)p)[i] = (float)kv_tensor_get_f64(src, i); break;
            case KV_F64: ((double *)p)[i] = kv_tensor_get_f64(src, i); break;
            case KV_BOOL: ((uint8_t *)p)[i] = kv_tensor_get_f64(src, i) != 0; break;
            case KV_U8: ((uint8_t *)p)[i] = (uint8_t)kv_tensor_get_i64(src, i); break;
            case KV_I8: ((int8_t *)p)[i] = (int8_t)kv_tensor_get_i64(src, i); break;
            case KV_I16: ((int16_t *)p)[i] = (int16_t)kv_tensor_get_i64(src, i); break;
            case KV_U16: ((uint16_t *)p)[i] = (uint16_t)kv_tensor_get_i64(src, i); break;
            case KV_I32: ((int32_t *)p)[i] = (int32_t)kv_tensor_get_i64(src, i); break;
            case KV_U32: ((uint32_t *)p)[i] = (uint32_t)kv_tensor_get_i64(src, i); break;
            case KV_I64: ((int64_t *)p)[i] = kv_tensor_get_i64(src, i); break;
            case KV_U64: ((uint64_t *)p)[i] = (uint64_t)kv_tensor_get_i64(src, i); break;
            default: break;
            }
        }
    }
    kv_tensor_move(dst, &t);
    return 0;
}

void kv_advise_huge(void *data, size_t n)
{
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)data + huge - 1) & ~(huge - 1);
    uintptr_t z = ((uintptr_t)data + n) & ~(huge - 1);
    if (z > a)
        (void)madvise((void *)a, (size_t)(z - a), MADV_HUGEPAGE);
#else
    (void)data;
    (void)n;
#endif
}
