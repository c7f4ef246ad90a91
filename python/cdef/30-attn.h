/* attention */
enum kv_attn_layout { KV_ATTN_BHSD, KV_ATTN_THD };
struct kv_attn_req {
    enum kv_attn_layout layout;
    const struct kv_tensor *q;
    const struct kv_tensor *k, *v;
    const struct kv_tensor *kv_cache;
    const int64_t *block_table;
    size_t bt_rows, bt_cols;
    const int64_t *q_lens; size_t n_q_lens;
    const int64_t *kv_lens; size_t n_kv_lens;
    const int64_t *seq_lens; size_t n_seq_lens;
    int causal;
    int64_t window;
    int64_t chunk;
    const struct kv_tensor *mask;
    int mask_keep;
    int mask_binary;
    const struct kv_tensor *block_mask;
    int64_t block_size;
    int has_scale;
    double scale;
    enum kv_dtype out_dtype;
    int n_threads;
    size_t max_bytes;
    int64_t tile_q, tile_k;
    int scalar;
    int p_f32;
    double softcap;
    int alibi;
    const struct kv_tensor *alibi_slopes;
    const struct kv_tensor *sinks;
    int kv_fp8;
    float k_scale, v_scale;
    int v_exp;
    ...;
};
int kv_attn_fp8_v_exp(int fmt, float v_scale, size_t n_keys);
int kv_attn_run(const struct kv_attn_req *r, struct kv_tensor *out,
                struct kv_tensor *lse, struct kv_err *e);
int kv_attn_merge(const struct kv_tensor *outs, const struct kv_tensor *lses,
                  size_t n, enum kv_dtype out_dtype, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e);
int kv_attn_merge_sinks(const struct kv_tensor *outs, const struct kv_tensor *lses,
                        size_t n, const struct kv_tensor *sinks, int parts_have_sinks,
                        enum kv_dtype out_dtype, struct kv_tensor *out,
                        struct kv_tensor *lse, struct kv_err *e);

/* XAttention */
enum kv_xattn_mode { KV_XATTN_INVERSE, KV_XATTN_SLASH };
enum kv_xattn_rule { KV_XATTN_RULE_ORIGINAL, KV_XATTN_RULE_INTENDED };
struct kv_xattn_opts {
    int64_t stride;
    int64_t block_size;
    int causal;
    int64_t q_offset;
    double norm;
    double scale;
    enum kv_xattn_mode select_mode;
    enum kv_xattn_rule rule;
    int64_t compat_chunk;
    int keep_sink;
    int keep_recent;
    const double *thresholds;
    int nthreads;
    size_t max_bytes;
    int bf16_route;
    ...;
};
struct kv_xattn_times { ...; };
void kv_xattn_opts_init(struct kv_xattn_opts *o);
int kv_xattn_check(const struct kv_xattn_opts *o, const int64_t qshape[4],
                   const int64_t kshape[4], int64_t *q_offset,
                   struct kv_err *e);
int kv_xattn_estimate(const struct kv_tensor *q, const struct kv_tensor *k,
                      const struct kv_xattn_opts *o, struct kv_tensor *mask,
                      struct kv_tensor *sums, struct kv_xattn_times *times,
                      struct kv_err *e);
int kv_xattn_recall(const struct kv_tensor *q, const struct kv_tensor *k,
                    const uint8_t *keep, const struct kv_xattn_opts *o,
                    struct kv_tensor *row_recall, struct kv_tensor *block_mass,
                    struct kv_err *e);
void kv_xattn_density(const uint8_t *mask, int64_t nbh, int64_t nqb,
                      int64_t nkb, int causal, int64_t q_offset, int64_t lq,
                      int64_t block, int64_t *kept, int64_t *valid);
enum kv_bf16_route { KV_BF16_NONE, ... };
enum kv_bf16_route kv_bf16_route_best(void);

