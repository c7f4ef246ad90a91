"""cffi (API mode) declaration of kvtools._kv: libkv's public calls.

The module is compiled by the platform's C compiler from the same lib/
sources the programs link (../lib beside this directory), or, when
KVTOOLS_LIBKV names a static libkv built with -fPIC (make python does
that), linked against it.  cffi checks every declaration below against
the real headers at compile time: a struct given with '...' takes its
layout from the header, so a field added to libkv needs no change here.
"""
import glob
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, ".."))
LIB = os.path.join(TOP, "lib")

CDEF = r"""
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
    int cp;
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
    ...;
};
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
    uint64_t payload_len;
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
    uint64_t index_unreadable;
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
"""

SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include "core/kv.h"
#include "core/fp8.h"
#include "mask/mask.h"
#include "mask/mask_mem.h"
#include "mask/ascend.h"
#include "mask/segments.h"
#include "mask/tree.h"
#include "slot/hash.h"
#include "slot/pcp.h"
#include "slot/mla_cp.h"
#include "slot/slot.h"
#include "slot/plan.h"
#include "slot/plan_kvgroups.h"
#include "slot/map_groups.h"
#include "slot/plan_trace.h"
#include "slot/plan_cc.h"
#include "attn/attn.h"
#include "attn/bound_inputs.h"
#include "attn/cmp.h"
#include "attn/xattn.h"
#include "attn/mla.h"
#include "attn/mla_sparse.h"
#include "attn/mla_ds.h"
#include "attn/bf16.h"
#include "attn/indexer.h"
#include "attn/gen.h"
/* mask.h and chunk.h each define enum kv_seg_kind (the same three
 * values); this file includes both, so chunk.h's is renamed here */
#define kv_seg_kind kv_chunk_seg_kind
#define KV_SEG_SYS KV_CHUNK_SEG_SYS
#define KV_SEG_CHUNK KV_CHUNK_SEG_CHUNK
#define KV_SEG_QUESTION KV_CHUNK_SEG_QUESTION
#include "chunk/chunk.h"
#include "chunk/rope.h"
#include "chunk/ns_opts.h"
#include "chunk/store.h"
#include "chunk/chunk_put.h"
#include "chunk/latent.h"
#include "chunk/toy.h"
#undef kv_seg_kind
#undef KV_SEG_SYS
#undef KV_SEG_CHUNK
#undef KV_SEG_QUESTION

/* the namespace's context mode, for kv_ctx_digest (an enum field) */
static int kv_ns_mask(const struct kv_namespace *ns) { return (int)ns->mask; }
static int kv_ns_base(const struct kv_namespace *ns) { return (int)ns->base; }
static int64_t kv_ns_lora_rank(const struct kv_namespace *ns) { return ns->kv_lora_rank; }
static int kv_ns_dtype(const struct kv_namespace *ns) { return (int)ns->dtype; }
static void kv_ns_set_dtype(struct kv_namespace *ns, int dtype)
{
    ns->dtype = (enum kv_dtype)dtype;
}
"""

LIBS = ["xxhash", "nettle", "argtable2", "sqlite3", "hiredis", "jansson", "dl", "m"]
CFLAGS = ["-std=c11", "-O2", "-pthread"]

ffibuilder = FFI()
ffibuilder.cdef(CDEF)

# libkv itself: KVTOOLS_LIBKV names a static libkv built with -fPIC (make
# python); otherwise setup.py'"'"'s build_ext compiles lib_sources() into the
# build directory first and links the objects (LIBKV_OBJECTS_FROM_SETUP).
_prebuilt = os.environ.get("KVTOOLS_LIBKV")


def lib_sources():
    if not os.path.isdir(LIB):
        raise SystemExit("kvtools: the C sources are not beside this "
                         "directory ('%s' is missing); build from a kvtools "
                         "checkout" % LIB)
    return sorted(glob.glob(os.path.join(LIB, "*", "*.c")))


ffibuilder.set_source(
    "kvtools._kv", SOURCE, include_dirs=[LIB],
    define_macros=[("_GNU_SOURCE", None)], extra_compile_args=CFLAGS,
    extra_objects=[os.path.abspath(_prebuilt)] if _prebuilt else [],
    libraries=LIBS, extra_link_args=["-pthread"])

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
