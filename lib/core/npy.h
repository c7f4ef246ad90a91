/* npy.h - NumPy .npy streams (the kvtools wire format, see man 5 kvnpy).
 *
 * Reads format versions 1.0, 2.0 and 3.0; writes 1.0 (2.0 only when a header
 * would not fit in 65535 bytes).  Little-endian, C order only.  A stream may
 * hold several arrays back to back.  bf16 is the descr '<V2'.
 */
#ifndef KV_NPY_H
#define KV_NPY_H

#include <stdio.h>
#include "core/tensor.h"

/* A parsed header. */
struct kv_npy_header {
    enum kv_dtype dtype;
    int ndim;
    int64_t shape[KV_MAX_DIMS];
    size_t nbytes;        /* data bytes that follow the header */
};

/* Parse the dict text of a header (the bytes after the length field,
 * len bytes, not NUL-terminated) into h.  Exposed for fuzzing. */
int kv_npy_parse_dict(const char *text, size_t len, size_t max_bytes,
                      struct kv_npy_header *h, struct kv_err *e);

/* Read the next header from f.  Returns 0 on success, 1 on a clean end of
 * stream (no byte left), -1 on error.  max_bytes (0 = none) bounds the data
 * size the header may announce. */
int kv_npy_read_header(FILE *f, size_t max_bytes, struct kv_npy_header *h,
                       struct kv_err *e);

/* Read the next array of the stream into t (zeroed or released).  Returns
 * 0, 1 at a clean end of stream, or -1 (truncated data, bad header...). */
int kv_npy_read(FILE *f, size_t max_bytes, struct kv_tensor *t,
                struct kv_err *e);

/* Read the one array of f: like kv_npy_read, but any byte after the
 * array (a second array, trailing garbage) is an error. */
int kv_npy_read_one(FILE *f, size_t max_bytes, struct kv_tensor *t,
                    struct kv_err *e);

/* Read exactly one array from the file at path ("-" = stdin); error when the
 * file holds none or anything after it.  Messages name the file ('<stdin>'
 * for stdin). */
int kv_npy_load(const char *path, size_t max_bytes, struct kv_tensor *t,
                struct kv_err *e);

/* A .npy file of one array read row by row without loading it: its
 * header, where its data starts, and the open file.  kv_npy_file_open
 * returns 0 for a regular file whose size is exactly its header and the
 * data that header announces; else -1 (not regular, a bad or short
 * header, a size that differs: a whole read reports the fault).
 * kv_npy_file_close accepts a zeroed struct. */
struct kv_npy_file {
    FILE *f;
    struct kv_npy_header h;
    uint64_t data_off;
};
int kv_npy_file_open(const char *path, size_t max_bytes, struct kv_npy_file *nf);
void kv_npy_file_close(struct kv_npy_file *nf);

/* Copy the rows rows[0..n) (ascending, row_bytes each, counted from the
 * start of the data) into dst back to back, each run of adjacent rows in
 * one read (pread).  A row past the data or a read that ends early (the
 * file shrank) fails with e: nothing is mapped, so a changed file cannot
 * fault the process. */
int kv_npy_file_rows(const struct kv_npy_file *nf, size_t row_bytes, const int64_t *rows,
                     size_t n, void *dst, struct kv_err *e);

/* Write a header for dtype/shape; the caller then writes the data bytes
 * itself (used to stream large outputs). */
int kv_npy_write_header(FILE *f, enum kv_dtype dtype, int ndim,
                        const int64_t *shape, struct kv_err *e);

/* Write header and data of t. */
int kv_npy_write(FILE *f, const struct kv_tensor *t, struct kv_err *e);

/* Write raw data of a header already written; checks fwrite. */
int kv_write_all(FILE *f, const void *buf, size_t n, struct kv_err *e);

#endif
