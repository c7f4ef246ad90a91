/* kvattn gen with an MLA config (attn/mla.h) */
int kv_latent_probe(const char *path, size_t max_bytes, struct kv_err *e);
struct kv_mla_gen {
    int64_t B, H, S, Lk, Dl, R, P, Vd, block_size;
    uint64_t seed;
    enum kv_dtype dtype;
    ...;
};
struct kv_mla_inputs {
    struct kv_tensor q, q_absorbed, c_kv, k_pe, w_uk, w_uv, cache;
    struct kv_tensor block_table;
    ...;
};
struct kv_mla_gen_args {
    const char *config;
    const char *shape, *seed, *dtype, *max_mem;
    int64_t kv_len, block_size;
    ...;
};
struct kv_mla_indexer {
    int64_t n_heads, head_dim, topk;
    ...;
};
struct kv_mla_gen_plan {
    struct kv_mla_gen g;
    struct kv_mla_indexer index;
    double scale;
    size_t max_mem;
    ...;
};
int kv_mla_gen_prepare(const struct kv_latent *l, const struct kv_mla_gen_args *a,
                       struct kv_mla_gen_plan *p, struct kv_err *e);
int kv_mla_index_fields(const char *path, struct kv_mla_indexer *ix,
                        struct kv_err *e);
#define KV_MLA_GEN_FILES ...
extern const char *const kv_mla_gen_files[15];
struct kv_mla_gen_set {
    struct kv_mla_inputs m;
    struct kv_tensor index_q, index_k, index_w;
    ...;
};
size_t kv_mla_gen_n_files(const struct kv_mla_gen_plan *p);
int kv_mla_gen_make(const struct kv_mla_gen_plan *p, struct kv_mla_gen_set *s,
                    struct kv_err *e);
const struct kv_tensor *kv_mla_gen_tensor(const struct kv_mla_gen_set *s, size_t i);
void kv_mla_gen_release(struct kv_mla_gen_set *s);
