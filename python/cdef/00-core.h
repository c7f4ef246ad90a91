typedef struct _IO_FILE FILE;
FILE *open_memstream(char **ptr, size_t *sizeloc);
int fclose(FILE *f);
void free(void *p);

struct kv_err { char msg[...]; };

enum kv_dtype {
    KV_BOOL, KV_U8, KV_I8, KV_I16, KV_I32, KV_I64,
    KV_F16, KV_BF16, KV_F32, KV_F64, KV_U16, KV_U32, KV_U64, KV_NDTYPES
};
struct kv_tensor {
    enum kv_dtype dtype;
    int ndim;
    int64_t shape[8];
    void *data;
    size_t nbytes;
    ...;
};
void kv_tensor_release(struct kv_tensor *t);
int kv_dtype_parse(const char *s, enum kv_dtype *out, struct kv_err *e);
int kv_parse_max_mem(const char *s, size_t *out, struct kv_err *e);
size_t kv_default_max_mem(void);
int kv_nproc(void);
int kv_parse_i64(const char *s, const char *opt, int64_t min, int64_t max,
                 int64_t *out, struct kv_err *e);
int kv_parse_f64(const char *s, const char *opt, double *out,
                 struct kv_err *e);
int kv_parse_i64_list(const char *s, const char *opt, int64_t min, int64_t max,
                      int64_t **out, size_t *n, struct kv_err *e);
int kv_npy_write(FILE *f, const struct kv_tensor *t, struct kv_err *e);
int kv_read_int_table(const char *path, int64_t pad, size_t max_bytes,
                      int64_t **out, size_t *n_rows, size_t *n_cols,
                      struct kv_err *e);

const char *kv_dtype_name(enum kv_dtype t);

/* FP8 caches */
enum kv_fp8 { KV_FP8_E4M3, KV_FP8_E5M2 };
int kv_fp8_parse(const char *s, enum kv_fp8 *out, struct kv_err *e);
void kv_fp8_quantize(const struct kv_tensor *src, size_t off, size_t n,
                     float scale, enum kv_fp8 t, uint8_t *dst);
void kv_fp8_dequantize(const uint8_t *q, size_t n, float scale,
                       enum kv_fp8 t, float *y);
int kv_fp8_scale_check(double s, const char *what, struct kv_err *e);
int kv_fp8_quantize_rows(const struct kv_tensor *x, size_t n, size_t d,
                         uint8_t *q, float *scales, struct kv_err *e);
int kv_tensor_convert(struct kv_tensor *dst, const struct kv_tensor *src,
                      enum kv_dtype to, struct kv_err *e);
int kv_ds_mla_quantize(const struct kv_tensor *x, size_t max_bytes,
                       struct kv_tensor *out, struct kv_err *e);
int kv_ds_mla_dequantize(const struct kv_tensor *q, size_t max_bytes,
                         struct kv_tensor *out, struct kv_err *e);

/* DeepSeek-V3.2's lightning indexer */
struct kv_indexer_req {
    const float *q;
    const float *k;
    const float *w;
    int64_t n_q, n_k, n_heads, head_dim;
    double scale;
    int64_t topk;
    int causal;
    int n_threads;
    const int64_t *q_lens, *kv_lens;
    size_t n_reqs;
    ...;
};
int kv_indexer_topk(const struct kv_indexer_req *r, int32_t *idx,
                    float *scores, struct kv_err *e);

