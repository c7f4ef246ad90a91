/* slots */
enum kv_slot_virtual { KV_SLOT_VIRTUAL_KERNEL, KV_SLOT_VIRTUAL_PHYSICAL };
struct kv_slot_geom {
    int64_t block_size;
    int64_t kernel_block_size;
    int64_t max_model_len;
    int64_t cp_world;
    int64_t cp_rank;
    int64_t interleave;
    enum kv_slot_virtual virt;
    ...;
};
struct kv_slot_table {
    const int64_t *ids;
    size_t n_rows, n_cols;
    const int32_t *ids32;
    ...;
};
struct kv_slot_step {
    size_t n_reqs, n_tokens;
    int64_t *query_start_loc;
    int64_t *seq_lens;
    int64_t *num_computed_tokens;
    int64_t *num_scheduled_tokens;
    int64_t *positions;
    int64_t *req_indices;
    int64_t *token_indices;
    int64_t *block_table_indices;
    int64_t *block_numbers;
    int64_t *block_offsets;
    int64_t *slot_mapping;
    int64_t *cp_owner;
    int64_t max_query_len;
    ...;
};
void kv_slot_step_init(struct kv_slot_step *s);
void kv_slot_step_release(struct kv_slot_step *s);
int kv_slot_compute(const struct kv_slot_geom *g,
                    const struct kv_slot_table *t, size_t n_reqs,
                    const int64_t *scheduled, const int64_t *computed,
                    unsigned want, struct kv_slot_step *s, struct kv_err *e);
int kv_slot_expand_hybrid(const int64_t *ids, size_t n_rows, size_t n_cols,
                          int64_t block_size, int64_t kernel_block_size,
                          int64_t **out, size_t *out_cols, struct kv_err *e);
int kv_slot_fill(const struct kv_slot_geom *g, const struct kv_slot_table *t,
                 size_t r, int64_t p, int64_t n, int f, int64_t *out);

/* the scheduler */
struct kv_plan_group {
    int kind;
    int64_t window;
    int64_t spec;
    int64_t block_size;
    ...;
};
struct kv_plan_config {
    size_t n_reqs;
    const int64_t *prompt_lens;
    const int64_t *output_lens;
    int64_t max_num_batched_tokens;
    int64_t max_num_seqs;
    int64_t block_size;
    int64_t max_model_len;
    int64_t num_blocks;
    size_t max_bytes;
    size_t extra_bytes;
    int split_decodes;
    int round_stride;
    int64_t kernel_block_size;
    int admit_by_chunk;
    int async_scheduling;
    int skip_waiting;
    int skip_shared;
    int prefix_caching;
    const int64_t *const *prompt_tokens;
    const int64_t *arrivals;
    const char *const *salts;
    const int64_t *lora_ids;
    size_t n_groups;
    const struct kv_plan_group *groups;
    const unsigned char *skip_tables;
    ...;
};
struct kv_plan_step {
    int64_t step;
    size_t n_rows;
    const int64_t *req_ids;
    const int64_t *num_scheduled;
    const int64_t *num_computed;
    const int64_t *block_table;
    size_t n_groups;
    const int64_t *tables;
    size_t n_cols;
    const int64_t *waiting;
    size_t n_waiting;
    const int64_t *blocked;
    size_t n_blocked;
    const int64_t *preempted;
    size_t n_preempted;
    const int64_t *finished;
    size_t n_finished;
    int64_t free_blocks;
    int64_t num_tokens;
    int prompts_done;
    int all_done;
    const int64_t *num_cached;
    const int64_t *shared;
    size_t n_shared;
    const uint64_t *evicted;
    size_t n_evicted;
    ...;
};
struct kv_plan;
int kv_plan_new(struct kv_plan **out, const struct kv_plan_config *cfg,
                struct kv_err *e);
void kv_plan_free(struct kv_plan *s);
int kv_plan_step(struct kv_plan *s, struct kv_plan_step *st,
                 struct kv_err *e);
struct kv_plan_groups_opts {
    const char *model_config;
    const char *kv_groups;
    const char *mamba_cache_mode;
    const char *kernel_block;
    int64_t block_size;
    int64_t max_model_len;
    int64_t dcp, pcp;
    int prefix_caching;
    ...;
};
struct kv_plan_groups {
    size_t n;
    struct kv_plan_group *g;
    int64_t block_size;
    char *fields;
    unsigned char *bt_sel, *sm_sel;
    ...;
};
void kv_plan_groups_init(struct kv_plan_groups *pg);
void kv_plan_groups_release(struct kv_plan_groups *pg);
int kv_plan_groups_load(struct kv_plan_groups *pg,
                        const struct kv_plan_groups_opts *o, int *usage,
                        struct kv_err *e);
int kv_plan_groups_fields(struct kv_plan_groups *pg, const char *fields,
                          struct kv_err *e);
void kv_plan_group_slots(const struct kv_slot_geom *g,
                         const struct kv_plan_step *ss,
                         const struct kv_plan_group *groups, size_t k,
                         int64_t *out, size_t pad_to);

/* kvslot map with KV-cache groups */
enum kv_slot_field { KV_SLOT_BLOCK_TABLE, KV_SLOT_NFIELDS, ... };
struct kv_map_groups_opts {
    const char *model_config;
    const char *kv_groups;
    const char *block_size;
    const char *max_model_len;
    const char *kernel_block;
    const char *cp_size;
    const char *cp_rank;
    const char *pcp_size;
    const char *pcp_rank;
    const char *interleave;
    const char *cp_convention;
    const char *virtual_block;
    int all_ranks;
    int kernel_block_size;
    ...;
};
enum kv_cache_kind { KV_CACHE_MAMBA, ... };
/* kvslot groups: the KV-cache groups of a model (slot/groups.h) */
const char *kv_cache_kind_name(enum kv_cache_kind k);
struct kv_cache_spec { enum kv_cache_kind kind; int64_t layer; ...; };
struct kv_groups_opts {
    int64_t block_size;
    int64_t kernel_block;
    int64_t max_model_len;
    int cache_dtype_bytes;
    int mamba_align;
    ...;
};
struct kv_group {
    enum kv_cache_kind kind;
    int uniform_type;
    int64_t block_size;
    int64_t window;
    int64_t page_bytes;
    size_t n_specs;
    size_t *specs;
    ...;
};
struct kv_groups {
    char model_type[...];
    int64_t n_layers;
    int64_t block_size;
    int64_t mamba_block_size;
    int64_t mamba_page_padded;
    size_t n_specs;
    struct kv_cache_spec *spec;
    size_t n_groups;
    struct kv_group *group;
    int64_t padding_layers;
    ...;
};
void kv_groups_init(struct kv_groups *g);
void kv_groups_release(struct kv_groups *g);
int kv_groups_load(struct kv_groups *g, const char *model_config,
                   const char *spec, const struct kv_groups_opts *o,
                   int *usage, struct kv_err *e);
struct kv_local_batches {
    size_t n_virtual;
    size_t pages;
    int64_t *query_start_loc;
    int64_t *seq_lens;
    int64_t *req_indices;
    int64_t *k_start;
    int64_t *block_table;
    int64_t max_query_len, max_seq_len;
    ...;
};
void kv_local_batches_release(struct kv_local_batches *b);
int kv_local_virtual_batches(struct kv_local_batches *b, int64_t chunk,
                             int64_t block_size, const int64_t *q_lens,
                             const int64_t *seq_lens, size_t n_reqs,
                             const int64_t *block_table, size_t n_cols,
                             struct kv_err *e);
/* kvslot step --parents: speculative-decoding token trees (mask/tree.h) */
#define KV_TREE_MAX ...
int kv_tree_check(const int64_t *parents, int64_t n, struct kv_err *e);
int kv_tree_depths(const int64_t *parents, int64_t n, int64_t *depth,
                   struct kv_err *e);
/* kvslot hash: vLLM's prefix-caching block hashes (slot/hash.h) */
struct kv_hash_opts {
    int algo;
    int64_t block_size;
    const char *seed;
    const char *cache_salt;
    const char *lora_name;
    const char *lora_path;
    ...;
};
int kv_hash_algo_parse(const char *s, int *algo, struct kv_err *e);
const char *kv_hash_algo_name(int algo);
size_t kv_hash_len(int algo);
struct kv_hash;
int kv_hash_create(struct kv_hash **out, const struct kv_hash_opts *o,
                   struct kv_err *e);
void kv_hash_free(struct kv_hash *h);
int kv_hash_blocks(struct kv_hash *h, const int64_t *tok, size_t n,
                   const char *salt, const char *lora_name,
                   const char *lora_path, uint8_t *out, struct kv_err *e);
struct kv_hash_prompt {
    int64_t *tok;
    size_t n, cap;
    char *salt, *lora_name, *lora_path;
    ...;
};
int kv_hash_prompt_parse(struct kv_hash_prompt *p, const char *s, size_t n,
                         struct kv_err *e);
void kv_hash_prompt_release(struct kv_hash_prompt *p);
struct kv_hash_set;
int kv_hash_set_create(struct kv_hash_set **out, struct kv_err *e);
void kv_hash_set_free(struct kv_hash_set *s);
int kv_hash_set_feed(struct kv_hash_set *s, const uint8_t *hashes,
                     size_t hash_len, int64_t n_tokens, int64_t block_size,
                     int64_t *hit, struct kv_err *e);
/* kvslot cplens (slot/slot.h) */
void kv_slot_cp_local_lens(int64_t len, int64_t world, int64_t interleave,
                           int64_t *out);
/* kvslot pcp (slot/pcp.h) */
struct kv_pcp_ascend {
    size_t n_reqs, n_decodes, n_prefills;
    int64_t *pcp_tokens;
    int64_t *num_pcp_pads;
    size_t n_padded;
    int64_t *unpad_mask;
    int64_t *restore_idx;
    size_t n_local;
    int64_t *positions;
    size_t n_q;
    int64_t *q_head_idx, *q_tail_idx;
    int64_t *q_full_idx;
    size_t n_head_nomask, n_tail_nomask;
    int64_t *kv_head_nomask, *kv_head_mask;
    int64_t *kv_tail_nomask, *kv_tail_mask;
    int64_t *attn_mask_seqlens;
    int64_t *head_attn_nomask_seqlens;
    int64_t *tail_attn_nomask_seqlens;
    ...;
};
int kv_pcp_ascend_split(const int64_t *tokens, const int64_t *computed,
                        size_t n_reqs, size_t n_decodes, int64_t pcp_size,
                        int64_t rank, struct kv_pcp_ascend *out,
                        struct kv_err *e);
void kv_pcp_ascend_release(struct kv_pcp_ascend *p);
struct kv_pcp_vllm {
    size_t n_reqs, n_decodes, n_tokens;
    int64_t *per_rank;
    int64_t padded;
    int64_t *gather_idx;
    int64_t *write_mask;
    int64_t *restore_idx;
    int64_t *row_start;
    int64_t *row_req;
    int64_t *row_pos;
    int64_t *row_len;
    size_t n_rows;
    int64_t *positions;
    ...;
};
int kv_pcp_vllm_split(const int64_t *tokens, const int64_t *computed,
                      size_t n_reqs, size_t n_decodes, int64_t pcp_size,
                      int64_t dcp_size, struct kv_pcp_vllm *out,
                      struct kv_err *e);
void kv_pcp_vllm_release(struct kv_pcp_vllm *p);
size_t kv_pcp_count_decodes(const int64_t *tokens, const int64_t *computed,
                            size_t n_reqs, int64_t threshold);
/* kvslot reorg (slot/mla_cp.h) */
enum kv_mla_cp_chunking { KV_MLA_CP_CHUNK_ASCEND, KV_MLA_CP_CHUNK_VLLM };
struct kv_mla_cp_geom {
    int64_t block_size;
    int64_t pcp_size, dcp_size;
    int64_t interleave;
    int64_t max_context_chunk;
    int chunking;
    int64_t workspace;
    ...;
};
struct kv_mla_cp_entry { int64_t req; ...; };
struct kv_mla_cp_map {
    size_t n, n_req;
    int64_t n_chunks, chunk_size;
    int64_t *toks;
    int64_t *padded_lens;
    int64_t *cu_seq_lens;
    int64_t *starts;
    int64_t *seq_lens;
    int64_t *local_lens;
    struct kv_mla_cp_entry *e;
    ...;
};
int kv_mla_cp_size(const struct kv_mla_cp_geom *g, const int64_t *ctx,
                   size_t n_req, size_t *n_entries, int64_t *n_chunks,
                   size_t *bytes, struct kv_err *e);
int kv_mla_cp_build(const struct kv_mla_cp_geom *g, const int64_t *bt,
                    size_t n_rows, size_t n_cols, const int64_t *ctx,
                    size_t n_req, struct kv_mla_cp_map *m, struct kv_err *e);
void kv_mla_cp_map_release(struct kv_mla_cp_map *m);
struct kv_map_group {
    enum kv_cache_kind kind;
    const char *path;
    size_t table;
    int use_table;
    unsigned char sel[...];
    struct kv_slot_geom geom;
    struct kv_slot_table t;
    struct kv_slot_step st;
    ...;
};
struct kv_map_groups {
    size_t n;
    struct kv_map_group *g;
    size_t first;
    enum kv_slot_field fl[...];
    size_t nf;
    size_t n_slots;
    ...;
};
void kv_map_groups_init(struct kv_map_groups *m);
void kv_map_groups_release(struct kv_map_groups *m);
int kv_map_groups_load(struct kv_map_groups *m,
                       const struct kv_map_groups_opts *o, int *usage,
                       struct kv_err *e);
int kv_map_groups_tables(struct kv_map_groups *m, const char *const *specs,
                         size_t n_specs, struct kv_err *e);
int kv_map_groups_fields(struct kv_map_groups *m, const char *fields,
                         struct kv_err *e);
int kv_map_groups_compute(struct kv_map_groups *m, size_t k,
                          const struct kv_slot_table *t, const char *name,
                          const int64_t *scheduled, const int64_t *computed,
                          size_t n_sched, int arrays, struct kv_err *e);
int kv_map_groups_pad(struct kv_map_groups *m, int64_t pad_to,
                      struct kv_err *e);
int kv_map_groups_i32_check(const struct kv_map_groups *m, struct kv_err *e);
int kv_map_table_read(const char *path, size_t max_mem, size_t n_reqs,
                      const int64_t *sched, const int64_t *comp, int64_t span,
                      int64_t **ids, size_t *rows, size_t *cols,
                      struct kv_err *e);
int kv_map_i32_check(unsigned fields, const struct kv_slot_step *st,
                     const struct kv_slot_table *t, int64_t K, int64_t M,
                     size_t n_slots, struct kv_err *e);

/* kvslot plan --trace, --ms-per-step, --summary */
struct kv_sim_requests {
    size_t n;
    int64_t *prompt_lens;
    int64_t *output_lens;
    int64_t *arrivals;
    int64_t **tokens;
    int64_t *buf;
    size_t bytes;
    ...;
};
void kv_sim_requests_release(struct kv_sim_requests *t);
#define KV_PLAN_TRACE_PROMPT_LENS ...
#define KV_PLAN_TRACE_PROMPTS ...
#define KV_PLAN_TRACE_ARRIVALS ...
#define KV_PLAN_TRACE_OUTPUT_LENS ...
#define KV_PLAN_TRACE_SALT ...
#define KV_PLAN_TRACE_LORA_IDS ...
struct kv_plan_trace_opts {
    const char *trace;
    const char *ms_per_step;
    int summary;
    int64_t num_blocks;
    unsigned others;
    ...;
};
int kv_plan_trace_load(const struct kv_plan_trace_opts *o, size_t max_bytes,
                       struct kv_sim_requests *t, int *usage,
                       struct kv_err *e);
struct kv_plan_summary {
    int64_t steps;
    int64_t prefix_hit_tokens;
    int64_t preemptions;
    int64_t evictions;
    int64_t peak_blocks;
    ...;
};
void kv_plan_summary_init(struct kv_plan_summary *s, int64_t num_blocks,
                          size_t n_reqs);
void kv_plan_summary_release(struct kv_plan_summary *s);
int kv_plan_summary_run(struct kv_plan *p, int64_t max_steps, int decode,
                        struct kv_plan_summary *s, struct kv_err *e);

/* kvslot plan --chunk-cache */
struct kv_cc;
struct kv_cc_step;
int kv_cc_step(struct kv_cc *cc, int decode, const struct kv_cc_step **st,
               struct kv_err *e);
#define KV_PLAN_CC_NF ...
struct kv_plan_cc_opts {
    const char *segments;
    const char *output_lens;
    const char *chunk_context;
    const char *utilization;
    const char *fields;
    const char *max_mem;
    int64_t max_tokens, block_size, max_model_len;
    int64_t num_blocks;
    int64_t max_num_seqs;
    int64_t chunk_pool_blocks;
    int64_t max_chunks;
    int64_t max_chunk_tokens;
    ...;
};
struct kv_plan_cc {
    struct kv_cc *cc;
    int sel[...];
    size_t n_sel;
    ...;
};
int kv_plan_cc_load(struct kv_plan_cc *pc, const struct kv_plan_cc_opts *o,
                    int *usage, struct kv_err *e);
void kv_plan_cc_release(struct kv_plan_cc *pc);
const char *kv_plan_cc_field_name(size_t k);
struct kv_plan_cc_value {
    int ndim;
    int64_t shape[2];
    const int64_t *v;
    int64_t scalar;
    const uint8_t *keys;
    ...;
};
void kv_plan_cc_field(const struct kv_cc_step *st, size_t k,
                      struct kv_plan_cc_value *val);

