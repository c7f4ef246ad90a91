/* masks */
enum kv_mask_kind {
    KV_MASK_CAUSAL, KV_MASK_WINDOW, KV_MASK_BAND, KV_MASK_FULL,
    KV_MASK_PREFIX, KV_MASK_VARLEN, KV_MASK_CHUNK, KV_MASK_POSITIONS,
    KV_MASK_HOLE, KV_MASK_LOCAL, KV_MASK_TREE
};
struct kv_mask_spec {
    enum kv_mask_kind kind;
    int64_t n_q, n_kv;
    int top_left;
    int64_t window;
    int64_t pre, next;
    int64_t prefix;
    const int64_t *q_lens, *kv_lens;
    size_t n_req;
    const uint8_t *seg_kinds;
    const int64_t *seg_lens;
    size_t n_seg;
    const int64_t *positions;
    const int64_t *hole_lo, *hole_hi;
    int64_t rows_per_mat;
    const int64_t *parents;
    int64_t chunk_size;
    ...;
};
struct kv_mask { int64_t n_q, n_kv; ...; };
struct kv_mask_values { enum kv_dtype dtype; uint32_t keep, mask, pad; ...; };
int kv_mask_value_bits(enum kv_dtype dtype, double x, uint32_t *bits);
struct kv_mask_out {
    int n_outer_dims;
    int64_t outer[2];
    int text;
    int threads;
    ...;
};
void kv_mask_init(struct kv_mask *m);
void kv_mask_release(struct kv_mask *m);
int kv_mask_make(struct kv_mask *m, const struct kv_mask_spec *s,
                 struct kv_err *e);
int kv_mask_values_plain(struct kv_mask_values *v, enum kv_dtype dtype,
                         int keep_one, const char *fill, struct kv_err *e);
int kv_mask_dense_bytes(const struct kv_mask *m, const struct kv_mask_values *v,
                        const struct kv_mask_out *o, int nz, size_t *bytes);
int kv_mask_dense_shape(const struct kv_mask *m, const struct kv_mask_out *o,
                        int64_t *shape);
int kv_mask_render(const struct kv_mask *m, const struct kv_mask_values *v,
                   const struct kv_mask_out *o, void *dst, size_t cap,
                   struct kv_err *e);
int kv_mask_write_block(FILE *f, const struct kv_mask *m, int64_t bq,
                        int64_t bk, const struct kv_mask_out *o,
                        size_t max_mem, struct kv_err *e);

/* a prompt's segments */
typedef int (*kv_mask_limit_fn)(void *ctx, double n, double bytes,
                                const char *what, struct kv_err *e);
int kv_mask_segments_read(const char *path, size_t max_bytes,
                          kv_mask_limit_fn over, void *ctx, uint8_t **kinds,
                          int64_t **lens, size_t *n_seg, struct kv_err *e);

/* vllm-ascend's presets */
enum kv_ascend_preset {
    KV_ASCEND_NONE, KV_ASCEND_ATTN, KV_ASCEND_SPLITFUSE,
    KV_ASCEND_SPLITFUSE_310P, KV_ASCEND_POOLING, KV_ASCEND_MLA,
    KV_ASCEND_PCP_MLA, KV_ASCEND_SWA, KV_ASCEND_MTP_CP
};
const char *const kv_ascend_preset_names[];
int kv_ascend_preset_parse(const char *s, enum kv_ascend_preset *out,
                           struct kv_err *e);
int kv_ascend_setup(enum kv_ascend_preset p, int have_dtype, enum kv_dtype dt,
                    const char *cache_dtype, int64_t n, int have_n,
                    int fallback, struct kv_mask_spec *s,
                    struct kv_mask_values *v, struct kv_err *e);
int kv_ascend_mtp_dims(const int64_t *history, const int64_t *q_lens,
                       size_t n_req, int64_t cp, int64_t rank, int64_t I,
                       int64_t *max_q, int64_t *max_k, struct kv_err *e);
void kv_ascend_mtp_holes(const int64_t *history, const int64_t *q_lens,
                         size_t n_req, int64_t cp, int64_t rank, int64_t I,
                         int64_t max_q, int64_t *lo, int64_t *hi);

