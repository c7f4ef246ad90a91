/* MLA */
struct kv_mla_req {
    const struct kv_tensor *q;
    const struct kv_tensor *cache;
    const int64_t *block_table;
    size_t bt_rows, bt_cols;
    const int64_t *seq_lens; size_t n_seq_lens;
    const int64_t *q_lens; size_t n_q_lens;
    int64_t kv_lora_rank;
    int causal;
    double scale;
    enum kv_dtype out_dtype;
    int n_threads;
    size_t max_bytes;
    int bf16_route;
    int v_exp;
    ...;
};
int kv_mla_absorbed(const struct kv_mla_req *r, struct kv_tensor *out,
                    struct kv_tensor *lse, struct kv_err *e);
int kv_mla_sparse(const struct kv_mla_req *r, const int32_t *topk,
                  int64_t n_rows, int64_t k, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e);
struct kv_mla_naive_req {
    const struct kv_tensor *q;
    const struct kv_tensor *c_kv;
    const struct kv_tensor *k_pe;
    const struct kv_tensor *w_uk;
    const struct kv_tensor *w_uv;
    const int64_t *q_lens; size_t n_q_lens;
    const int64_t *kv_lens; size_t n_kv_lens;
    int causal;
    int has_scale;
    double scale;
    enum kv_dtype out_dtype;
    int n_threads;
    size_t max_bytes;
    ...;
};
int kv_mla_naive(const struct kv_mla_naive_req *r, struct kv_tensor *out,
                 struct kv_tensor *lse, struct kv_err *e);
int kv_mla_project(const struct kv_tensor *o, const struct kv_tensor *w_uv,
                   enum kv_dtype dtype, size_t max_bytes,
                   struct kv_tensor *out, struct kv_err *e);
struct kv_latent {
    int64_t kv_lora_rank, rope_dim, nope_dim, v_dim;
    double softmax_scale;
    ...;
};
struct kv_latent_chunk {
    int64_t n_layers, n_tokens, kv_lora_rank, rope_dim;
    enum kv_dtype dtype;
    ...;
};
int kv_latent_move(const struct kv_rope *r, const struct kv_latent_chunk *c,
                   int64_t delta, const void *src, void *dst,
                   int64_t dst_stride_t, int64_t dst_off, struct kv_err *e);
#define KV_BLOB_LAYOUT_LATENT ...
int kv_latent_load_attn(const char *path, size_t max_bytes, struct kv_latent *l,
                        struct kv_err *e);

struct kv_bound_report {
    double out, lse;
    int64_t keys, head_dim;
    double score_max;
    double v_max;
    ...;
};
int kv_bound_for_inputs(const struct kv_tensor *q, const struct kv_tensor *k,
                        const struct kv_tensor *v, int has_scale, double scale,
                        double mask_abs, int64_t routes,
                        enum kv_dtype out_dtype, int p_round,
                        struct kv_bound_report *r, struct kv_err *e);

struct kv_bound_input_variants {
    double softcap;
    int alibi;
    const struct kv_tensor *alibi_slopes;
    const struct kv_tensor *sinks;
    ...;
};
int kv_bound_for_inputs_var(const struct kv_tensor *q, const struct kv_tensor *k,
                            const struct kv_tensor *v, int has_scale, double scale,
                            double mask_abs, int64_t routes,
                            enum kv_dtype out_dtype, int p_round,
                            const struct kv_bound_input_variants *iv,
                            struct kv_bound_report *r, struct kv_err *e);

struct kv_cmp_result {
    size_t n;
    size_t n_bad;
    size_t n_nan_a, n_nan_b;
    double max_abs;
    double max_rel;
    double rmse;
    double cosine;
    size_t worst;
    double worst_a, worst_b;
    size_t n_rows;
    double mass_a, mass_b;
    double max_mass_diff;
    double max_tv;
    size_t worst_row;
    ...;
};
int kv_cmp_tensors(const struct kv_tensor *a, const struct kv_tensor *b,
                   double atol, double rtol, int equal_nan,
                   struct kv_cmp_result *r, struct kv_err *e);
int kv_cmp_mass(const struct kv_tensor *a, const struct kv_tensor *b,
                double atol, double rtol, struct kv_cmp_result *r,
                struct kv_err *e);
