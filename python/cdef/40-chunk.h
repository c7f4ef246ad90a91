/* chunks */
enum kv_rope_style { KV_ROPE_NONE, KV_ROPE_NEOX, KV_ROPE_GPTJ, ... };
struct kv_rope { enum kv_rope_style style; int head_dim; int rotary_dim;
                 double theta; ...; };
enum kv_ctx_mode { KV_CTX_SYS, KV_CTX_NONE };
struct kv_namespace { int64_t n_layers, n_kv_heads, head_dim; struct kv_rope rope;
                      enum kv_ctx_mode mask; ...; };
struct kv_ns_options {
    const char *model_config, *model, *tokenizer, *lora, *salt, *dtype,
               *shape, *rope, *rope_theta, *rotary_dim, *rope_scaling,
               *nope_layers, *chunk_context, *base_policy;
    ...;
};
int kv_ns_from_options(const struct kv_ns_options *o, struct kv_namespace *ns,
                       int *have_shape, struct kv_err *e);
int kv_ns_parse_options(const struct kv_ns_options *o, struct kv_namespace *ns,
                        int *have_shape, int *have_dtype, struct kv_err *e);
int kv_ns_check(struct kv_namespace *ns, struct kv_err *e);
void kv_ns_set_dtype(struct kv_namespace *ns, int dtype);
int kv_ns_text(const struct kv_namespace *ns, char **out, struct kv_err *e);
int kv_ns_digest(const struct kv_namespace *ns, uint8_t digest[16],
                 struct kv_err *e);
void kv_ctx_digest(int mode, const int32_t *sys, size_t n_sys,
                   uint8_t digest[16]);
int kv_ns_mask(const struct kv_namespace *ns);
void kv_chunk_key(const uint8_t ns[16], const uint8_t ctx[16],
                  const int32_t *tok, size_t n, uint8_t key[16]);
int kv_rope_can_move(const struct kv_rope *r, int64_t p0, int64_t p_new,
                     int64_t n_tokens, int64_t seq_end, struct kv_err *e);
struct kv_rope_chunk {
    int64_t n_layers, n_tokens, n_kv_heads, head_dim;
    enum kv_dtype dtype;
    ...;
};
int kv_rope_move_kv(const struct kv_rope *r, const struct kv_rope_chunk *c,
                    int64_t delta, const void *src, void *dst,
                    int64_t dst_stride_t, int64_t dst_off, struct kv_err *e);

/* the chunk store */
struct kv_store;
struct kv_store_opts {
    double timeout;
    int64_t ttl;
    int durable;
    int read_only;
    int must_exist;
    size_t max_bytes;
    ...;
};
void kv_store_opts_init(struct kv_store_opts *o);
int kv_store_open(const char *spec, const struct kv_store_opts *o,
                  struct kv_store **out, struct kv_err *e);
void kv_store_close(struct kv_store *s);
const char *kv_store_kind(const struct kv_store *s);
struct kv_chunk_req {
    uint8_t key[16], ns[16], ctx[16];
    const int32_t *tokens;
    size_t n_tokens;
    ...;
};
struct kv_blob_meta {
    uint8_t key[16];
    uint32_t header_len;
    uint32_t n_tokens, n_layers, n_kv_heads, head_dim;
    enum kv_dtype dtype;
    int32_t base_pos;
    uint64_t payload_len, payload_xxh3;
    unsigned layout;
    ...;
};
struct kv_blob_ref {
    struct kv_blob_meta meta;
    const uint8_t *payload;
    ...;
};
void kv_blob_ref_release(struct kv_blob_ref *r);
int kv_store_get(struct kv_store *s, const struct kv_chunk_req *req,
                 size_t n, struct kv_blob_ref *refs, int *status,
                 struct kv_err *why, struct kv_err *e);
int kv_store_put(struct kv_store *s, const struct kv_blob_meta *m,
                 const uint8_t *hdr, const void *payload, int *existed,
                 struct kv_err *e);
int kv_store_pin(struct kv_store *s, const uint8_t key[16], int on,
                 int *found, struct kv_err *e);
struct kv_evict_report {
    uint64_t removed, removed_bytes, skipped_busy, total_before, total_after;
    ...;
};
int kv_store_evict(struct kv_store *s, uint64_t max_bytes, double low,
                   struct kv_evict_report *r, struct kv_err *e);
int kv_store_rm(struct kv_store *s, const uint8_t key[16], int *found,
                struct kv_err *e);
struct kv_fsck_report {
    uint64_t checked, corrupt, orphan_rows, unindexed, stale_tmp, repaired;
    uint64_t index_unreadable, wrong_totals;
    ...;
};
int kv_store_fsck(struct kv_store *s, int repair,
                  void (*cb)(void *ctx, const char *line), void *ctx,
                  struct kv_fsck_report *r, struct kv_err *e);
extern "Python" void kv_py_fsck_line(void *ctx, const char *line);
/* kvchunk split: a prompt's segments (chunk/chunk.h; its enum
 * kv_seg_kind is kv_chunk_seg_kind here, see SOURCE) */
enum kv_chunk_seg_kind { KV_CHUNK_SEG_SYS, KV_CHUNK_SEG_CHUNK,
                         KV_CHUNK_SEG_QUESTION };
struct kv_segment { enum kv_chunk_seg_kind kind; int64_t offset, length; };
struct kv_split {
    struct kv_segment *segs;
    size_t n_segs;
    int32_t *tokens;
    size_t n_tokens;
};
void kv_split_release(struct kv_split *s);
int kv_split_text(const char *text, size_t len, const char *sep,
                  struct kv_split *out, struct kv_err *e);
int kv_split_ids(const int32_t *ids, size_t n, const int32_t *sep,
                 size_t n_sep, struct kv_split *out, struct kv_err *e);
struct kv_tokens { const int32_t *ids; size_t n; ...; };
int kv_tokens_load(const char *path, size_t max_bytes, struct kv_tokens *t,
                   struct kv_err *e);
void kv_tokens_release(struct kv_tokens *t);
/* kvchunk ls and stat */
struct kv_store_entry {
    uint8_t key[16];
    uint64_t bytes;
    uint32_t n_tokens;
    int32_t base_pos;
    uint64_t hits;
    double last_access;
    int pinned;
};
int kv_store_ls(struct kv_store *s,
                int (*cb)(void *ctx, const struct kv_store_entry *),
                void *ctx, struct kv_err *e);
extern "Python" int kv_py_ls_entry(void *ctx, const struct kv_store_entry *en);
struct kv_store_stats {
    uint64_t entries, bytes, hits, misses, evictions, collisions,
             checksum_failures, puts;
};
int kv_store_stat(struct kv_store *s, struct kv_store_stats *st,
                  struct kv_err *e);
int kv_chunk_blob(const struct kv_namespace *ns, const int32_t *ctx,
                  size_t n_ctx, const int32_t *tok, size_t n_tok,
                  const struct kv_tensor *x, int64_t p0, uint64_t created_ns,
                  struct kv_blob_meta *m, uint8_t **hdr, struct kv_err *e);
int64_t kv_base_pos_for(const struct kv_namespace *ns, int64_t n_ctx);
int kv_ns_base(const struct kv_namespace *ns);
int64_t kv_ns_lora_rank(const struct kv_namespace *ns);
int kv_ns_dtype(const struct kv_namespace *ns);
int kv_parse_size(const char *s, size_t *out, struct kv_err *e);
/* kvchunk info: the model as kvchunk reads it (chunk/model.h) */
struct kv_model {
    char model_type[...];
    int64_t n_layers, n_heads, n_kv_heads, head_dim;
    int64_t max_pos;
    int64_t sliding_window;
    int64_t kv_lora_rank, qk_rope_head_dim;
    enum kv_dtype dtype;
    int have_dtype;
    struct kv_rope rope;
    ...;
};
int kv_model_load(const char *path, size_t max_bytes, struct kv_model *m,
                  struct kv_err *e);
int64_t kv_model_bytes_per_token(const struct kv_model *m, size_t elt_bytes);
