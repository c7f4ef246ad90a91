/* kvchunk assemble, slice and selftest-rope (chunk/assemble.h,
 * chunk/slice.h, chunk/rope_selftest.h) */
struct kv_assembly {
    size_t n_segs;
    int *status;
    int32_t *base;
    int64_t *miss;
    int64_t n_miss;
    struct kv_tensor kv;
    size_t store_bytes;
    ...;
};
size_t kv_assemble_seg_bytes(void);
int kv_assemble_init(struct kv_assembly *a, const struct kv_namespace *ns,
                     const struct kv_split *sp, size_t max_bytes,
                     int want_kv, struct kv_err *e);
int kv_assemble_fetch(struct kv_assembly *a, struct kv_store *s,
                      int n_threads, struct kv_err *e);
int kv_assemble_tables(const struct kv_assembly *a, struct kv_tensor *segs,
                       struct kv_tensor *misses, struct kv_err *e);
void kv_assemble_plan(FILE *f, const struct kv_assembly *a);
int kv_assemble_report(const struct kv_assembly *a, const char *path,
                       struct kv_err *e);
void kv_assemble_release(struct kv_assembly *a);
enum kv_slice_part { KV_SLICE_K, KV_SLICE_V };
enum kv_slice_layout { KV_SLICE_THD, KV_SLICE_BHSD };
int kv_slice_check(const struct kv_tensor *x, const char *what,
                   struct kv_err *e);
int kv_slice_read(const char *path, size_t max_bytes, struct kv_tensor *x,
                  struct kv_err *e);
int kv_slice_layer(const struct kv_tensor *x, int64_t layer,
                   enum kv_slice_part part, enum kv_slice_layout layout,
                   size_t max_bytes, struct kv_tensor *y, struct kv_err *e);
struct kv_rope_error {
    double max_rel, rms_rel;
    double max_ulp, rms_ulp;
    ...;
};
#define KV_ROPE_SELFTEST_MOVES ...
extern const int64_t kv_rope_selftest_moves[][2];
int kv_rope_selftest_ok(const struct kv_rope_error *r);
int kv_rope_selftest(const struct kv_rope *r, enum kv_dtype dtype,
                     size_t n_vecs, uint64_t seed, struct kv_rope_error *res,
                     int *n_bad, struct kv_err *e);
