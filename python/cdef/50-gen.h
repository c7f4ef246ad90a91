/* kvattn gen: synthetic Q, K, V (attn/gen.h) */
enum kv_gen_pattern {
    KV_GEN_RANDOM, KV_GEN_ROPE, KV_GEN_LOCAL, KV_GEN_SINK, KV_GEN_STRIPES,
    KV_GEN_MIX
};
struct kv_gen_spec {
    int64_t B, Hq, Hkv, Lq, Lk, D;
    enum kv_gen_pattern pattern;
    uint64_t seed;
    enum kv_dtype dtype;
    int64_t n_sink;
    double theta;
    int thd;
    int n_threads;
    size_t max_bytes;
    ...;
};
int kv_gen_pattern_parse(const char *s, enum kv_gen_pattern *p, struct kv_err *e);
int kv_gen_qkv(const struct kv_gen_spec *s, struct kv_tensor *q,
               struct kv_tensor *k, struct kv_tensor *v, struct kv_err *e);
/* kvattn gen --toy: the toy projection (chunk/toy.h) */
struct kv_toy {
    uint64_t seed;
    int64_t n_layers, n_heads, n_kv_heads, head_dim, embed_dim;
    struct kv_rope rope;
    ...;
};
void kv_toy_init(struct kv_toy *m, int64_t n_layers, int64_t n_heads,
                 int64_t n_kv_heads, int64_t head_dim);
int kv_toy_check(const struct kv_toy *m, struct kv_err *e);
int kv_toy_kv(const struct kv_toy *m, const int32_t *tokens,
              const int64_t *positions, size_t n, enum kv_dtype dtype,
              size_t max_bytes, struct kv_tensor *out, struct kv_err *e);
int kv_toy_q(const struct kv_toy *m, const int32_t *tokens,
             const int64_t *positions, size_t n, int64_t layer,
             enum kv_dtype dtype, size_t max_bytes, struct kv_tensor *out,
             struct kv_err *e);
void kv_rope_init(struct kv_rope *r, int head_dim);
int kv_rope_parse_style(const char *s, enum kv_rope_style *out,
                        struct kv_err *e);
int kv_rope_check(const struct kv_rope *r, struct kv_err *e);
int kv_rope_describe(const struct kv_rope *r, char *buf, size_t len);
size_t kv_dtype_size(enum kv_dtype t);

