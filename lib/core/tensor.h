/* tensor.h - a dense, C-ordered, owned n-dimensional array.
 *
 * struct kv_tensor owns its data buffer.  kv_tensor_init() zeroes a struct;
 * kv_tensor_release() frees the buffer and is safe on a zeroed or released
 * struct.  Sizes are overflow-checked with kv_size_mul/kv_size_add.
 */
#ifndef KV_TENSOR_H
#define KV_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

#define KV_MAX_DIMS 8

enum kv_dtype {
    KV_BOOL = 0, KV_U8, KV_I8, KV_I16, KV_I32, KV_I64,
    KV_F16, KV_BF16, KV_F32, KV_F64,
    KV_U16, KV_U32, KV_U64,
    KV_NDTYPES
};

struct kv_tensor {
    enum kv_dtype dtype;
    int ndim;
    int64_t shape[KV_MAX_DIMS];
    void *data;       /* owned; NULL when numel == 0 or released */
    size_t nbytes;    /* numel * element size */
};

/* Size in bytes of one element (1 for bool). */
size_t kv_dtype_size(enum kv_dtype t);
/* Short name: "bool" "u8" "i8" "i16" "i32" "i64" "f16" "bf16" "f32" "f64" ... */
const char *kv_dtype_name(enum kv_dtype t);
/* Parse a name as above (also "float32", "int32", "uint8", "float16",
 * "bfloat16", "int8"); returns 0 or -1. */
int kv_dtype_parse(const char *s, enum kv_dtype *out, struct kv_err *e);
int kv_dtype_is_float(enum kv_dtype t);
/* n f32 values to dst as dtype dt (f32, bf16, f16 rounded to nearest even,
 * f64 exact; any other dtype: f64). */
void kv_f32_store_n(enum kv_dtype dt, const float *src, void *dst, size_t n);

/* Overflow-checked arithmetic: return 0 and store the result, or -1. */
int kv_size_mul(size_t a, size_t b, size_t *out);
int kv_size_add(size_t a, size_t b, size_t *out);

void kv_tensor_init(struct kv_tensor *t);
void kv_tensor_release(struct kv_tensor *t);

/* Number of elements (product of shape; 1 for ndim 0).  The shape must have
 * been validated (kv_shape_check) first. */
size_t kv_tensor_numel(const struct kv_tensor *t);

/* Check that shape[0..ndim) is non-negative and that numel * elsize fits in
 * size_t (and in max_bytes when max_bytes != 0).  On success *nbytes holds
 * the byte size. */
int kv_shape_check(int ndim, const int64_t *shape, enum kv_dtype dtype,
                   size_t max_bytes, size_t *nbytes, struct kv_err *e);

/* Allocate a zero-filled tensor of the given shape into t (which must be
 * released or zeroed).  max_bytes as for kv_shape_check (0 = no limit). */
int kv_tensor_alloc(struct kv_tensor *t, enum kv_dtype dtype, int ndim,
                    const int64_t *shape, size_t max_bytes, struct kv_err *e);

/* Move src into dst (dst released first); src is left zeroed. */
void kv_tensor_move(struct kv_tensor *dst, struct kv_tensor *src);

/* Format a shape as "(3, 4)" into buf. Returns buf. */
char *kv_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

/* Convert every element of src to f32 / f64 / i64 into a new tensor dst of
 * the same shape (dst must be zeroed or released).  Bool is 0/1. */
int kv_tensor_convert(struct kv_tensor *dst, const struct kv_tensor *src,
                      enum kv_dtype to, struct kv_err *e);

/* Read element i (flat index) of any dtype as double / int64. */
double kv_tensor_get_f64(const struct kv_tensor *t, size_t i);
int64_t kv_tensor_get_i64(const struct kv_tensor *t, size_t i);

/* Ask for transparent huge pages on the 2 MiB-aligned inside of a large
 * buffer not yet touched (an output tensor): 64 MiB then faults in 32
 * times instead of 16384.  Only a hint; without THP it does nothing. */
void kv_advise_huge(void *data, size_t n);

#endif
