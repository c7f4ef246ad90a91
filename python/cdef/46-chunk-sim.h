/* kvchunk sim, sim gen, sim from-split (chunk/chunk_sim.h) and kvchunk
 * toy (chunk/chunk_toy.h) */
FILE *fmemopen(void *buf, size_t size, const char *mode);
FILE *kv_open_in(const char *path, struct kv_err *e);
void kv_close_in(FILE *f);
const char *kv_path_name(const char *path, int is_output);

struct kv_chunk_sim_opts {
    const char *capacity_tokens, *capacity_bytes, *pool_bytes, *max_chunks,
               *rotate, *warmup, *policies, *block_size, *model_config,
               *layers, *kv_heads, *head_dim, *dtype, *chunk_context, *salt,
               *max_sessions, *us_per_token, *us_per_pair,
               *us_per_output_token, *tier, *bw_hbm, *bw_host, *bw_disk,
               *bw_net, *bw_rope, *jobs, *trace_format, *trace_block_size,
               *format, *max_mem;
    int miss_copy;
    int csv;
    ...;
};
struct kv_chunk_sim { int format; int n_units; uint64_t n_requests; ...; };
typedef void (*kv_chunk_sim_progress_fn)(void *ctx, uint64_t n_read);
int kv_chunk_sim_load(struct kv_chunk_sim *cs,
                      const struct kv_chunk_sim_opts *o, struct kv_err *e);
int kv_chunk_sim_run(struct kv_chunk_sim *cs, FILE *f, const char *name,
                     kv_chunk_sim_progress_fn progress, void *ctx,
                     int *usage, struct kv_err *e);
int kv_chunk_sim_write(FILE *f, const struct kv_chunk_sim *cs,
                       struct kv_err *e);
void kv_chunk_sim_release(struct kv_chunk_sim *cs);

struct kv_sim_gen_opts { uint64_t seed; int64_t requests; ...; };
int kv_sim_gen(FILE *out, const struct kv_sim_gen_opts *o, struct kv_err *e);
struct kv_chunk_sim_gen_opts {
    const char *seed, *requests, *docs, *topk, *zipf, *fresh, *order,
               *sys_variants, *tenants, *topics, *turns, *conversations,
               *rate, *doc_len, *sys_len, *q_len, *out_len;
    ...;
};
int kv_chunk_sim_gen_load(const struct kv_chunk_sim_gen_opts *o,
                          struct kv_sim_gen_opts *g, struct kv_err *e);

struct kv_chunk_sim_split_opts { const char *rate, *tenant, *out_len; ...; };
int kv_chunk_sim_split_load(const struct kv_chunk_sim_split_opts *o,
                            double *rate, int64_t *out_len,
                            struct kv_err *e);
int kv_chunk_sim_split_run(const struct kv_chunk_sim_split_opts *o,
                           double rate, int64_t out_len, FILE *f,
                           const char *name, char **out, size_t *n_out,
                           int *usage, struct kv_err *e);

struct kv_chunk_toy_opts {
    const struct kv_namespace *ns;
    int have_shape;
    const char *tokens, *pos, *seed, *heads, *q, *embed_dim, *max_mem;
    ...;
};
struct kv_chunk_toy { int64_t pos, q_layer; size_t max_bytes; ...; };
int kv_chunk_toy_load(struct kv_chunk_toy *t,
                      const struct kv_chunk_toy_opts *o, struct kv_err *e);
int kv_chunk_toy_run(const struct kv_chunk_toy *t, const int32_t *tokens,
                     size_t n, struct kv_tensor *out, struct kv_err *e);
