/* slot.h - the per-step attention metadata of vLLM's model runner: positions,
 * token and block-table indices, slot mapping, query_start_loc, seq_lens...
 * with hybrid blocks and the context-parallel (DCP, PCP x DCP) slot layout.
 *
 * Formulas (spec masks-slots.md B.1-B.3), for a token of batch row r at
 * absolute position p, kernel block size K, kernel block table bt (row
 * stride C), CP world W, rank R, interleave I:
 *
 *   no CP:  slot = bt[r*C + p/K] * K + p%K
 *   CP:     V = B*W (vllm-ascend, newest vLLM; B = allocation block) or
 *           K*W (older vLLM);
 *           o = p%V; owner = (o/I)%W; local = (o/(W*I))*I + o%I;
 *           column = (p/V)*(V/W/K) + local/K; slot = bt[r*C+column]*K +
 *           local%K on the owner, -1 (PAD_SLOT_ID) on every other rank.
 */
#ifndef KV_SLOT_H
#define KV_SLOT_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

#define KV_SLOT_PAD (-1)

/* Which block size builds the CP virtual block when allocation and kernel
 * block sizes differ (spec B.3): older vLLM uses the kernel block;
 * vllm-ascend and vLLM since its slot-mapping kernel took
 * KV_CACHE_BLOCK_SIZE / BLOCKS_PER_KV_BLOCK use the allocation (physical)
 * block.  They agree whenever K % I == 0. */
enum kv_slot_virtual { KV_SLOT_VIRTUAL_KERNEL = 0, KV_SLOT_VIRTUAL_PHYSICAL };

/* The fields of one step, in their canonical (output) order. */
enum kv_slot_field {
    KV_SLOT_QUERY_START_LOC = 0, KV_SLOT_SEQ_LENS, KV_SLOT_NUM_COMPUTED,
    KV_SLOT_NUM_SCHEDULED, KV_SLOT_POSITIONS, KV_SLOT_REQ_INDICES,
    KV_SLOT_TOKEN_INDICES, KV_SLOT_BLOCK_TABLE_INDICES, KV_SLOT_BLOCK_NUMBERS,
    KV_SLOT_BLOCK_OFFSETS, KV_SLOT_SLOT_MAPPING, KV_SLOT_CP_OWNER,
    KV_SLOT_MAX_QUERY_LEN, KV_SLOT_NUM_TOKENS, KV_SLOT_NUM_REQS,
    KV_SLOT_BLOCK_TABLE,
    KV_SLOT_NFIELDS
};

/* Name of a field ("slot_mapping"); kv_slot_field_parse is its inverse. */
const char *kv_slot_field_name(enum kv_slot_field f);
int kv_slot_field_parse(const char *s, enum kv_slot_field *out);

/* Geometry of one step. */
struct kv_slot_geom {
    int64_t block_size;        /* B: allocation block of the KV manager */
    int64_t kernel_block_size; /* K: divides B; == B without hybrid blocks */
    int64_t max_model_len;     /* M: token-table row width (token_indices) */
    int64_t cp_world;          /* W >= 1: ranks that shard the KV cache */
    int64_t cp_rank;           /* R in [0, W) */
    int64_t interleave;        /* I >= 1, divides B */
    enum kv_slot_virtual virt;
};

/* A block table in kernel block ids: n_rows x n_cols, row-major, either
 * int64 (ids) or int32 (ids32, as vLLM keeps it; used when not NULL). */
struct kv_slot_table {
    const int64_t *ids;
    size_t n_rows, n_cols;
    const int32_t *ids32;
};

/* Check the geometry alone (sizes, rank, interleave). */
int kv_slot_geom_check(const struct kv_slot_geom *g, struct kv_err *e);

/* Expand a table of allocation block ids (blocks of B tokens) into kernel
 * block ids (blocks of K tokens) as map_to_kernel_blocks does: every id b
 * a row holds becomes b*(B/K) + 0 .. B/K-1, the null block 0 included
 * (0 .. B/K-1); the zeros after a row's last non-zero entry are the unused
 * tail and stay 0.  *out is malloc'd n_rows x n_cols*(B/K); the caller
 * frees it. */
int kv_slot_expand_hybrid(const int64_t *ids, size_t n_rows, size_t n_cols,
                          int64_t block_size, int64_t kernel_block_size,
                          int64_t **out, size_t *out_cols, struct kv_err *e);

/* The metadata of one step.  Arrays are malloc'd by kv_slot_compute and
 * owned by the struct; kv_slot_step_release frees them (safe on a zeroed
 * struct).  Token-level arrays hold n_tokens entries; a field that was not
 * asked for is NULL. */
struct kv_slot_step {
    size_t n_reqs, n_tokens;
    int64_t *query_start_loc;      /* n_reqs + 1 */
    int64_t *seq_lens;             /* n_reqs */
    int64_t *num_computed_tokens;  /* n_reqs */
    int64_t *num_scheduled_tokens; /* n_reqs */
    int64_t *positions;
    int64_t *req_indices;
    int64_t *token_indices;        /* req * M + position */
    int64_t *block_table_indices;  /* req * n_cols + column */
    int64_t *block_numbers;        /* kernel block id */
    int64_t *block_offsets;        /* offset inside the kernel block */
    int64_t *slot_mapping;         /* -1 where another CP rank owns it */
    int64_t *cp_owner;             /* CP rank that stores the token */
    int64_t max_query_len;
};

void kv_slot_step_init(struct kv_slot_step *s);
void kv_slot_step_release(struct kv_slot_step *s);

/* Validate a step without computing it: n_reqs rows of scheduled[] (>= 0)
 * and computed[] (>= 0, may be NULL = all 0) against the table (enough rows
 * and columns for every position, used entries >= 0) and max_model_len.
 * Messages name the request and the value. */
int kv_slot_check(const struct kv_slot_geom *g, const struct kv_slot_table *t,
                  size_t n_reqs, const int64_t *scheduled,
                  const int64_t *computed, struct kv_err *e);

/* Compute the fields selected by the bit mask want (1 << enum kv_slot_field;
 * request-level and scalar fields are always filled) into s (zeroed or
 * released).  Validates first (kv_slot_check). */
int kv_slot_compute(const struct kv_slot_geom *g,
                    const struct kv_slot_table *t, size_t n_reqs,
                    const int64_t *scheduled, const int64_t *computed,
                    unsigned want, struct kv_slot_step *s, struct kv_err *e);

/* One token-level field (positions, req_indices, token_indices,
 * block_table_indices, block_numbers, block_offsets, slot_mapping,
 * cp_owner) of batch row r for positions [p, p+n) into out[0..n).  The
 * step must have passed kv_slot_check.  Lets a caller stream a large step
 * in pieces.  Returns 0, or -1 for a field that is not token-level. */
int kv_slot_fill(const struct kv_slot_geom *g, const struct kv_slot_table *t,
                 size_t r, int64_t p, int64_t n, enum kv_slot_field f,
                 int64_t *out);

/* Slot of one token: the plain scalar reference of the formula above
 * (used by the tests and by kv_slot_compute for the CP case). owner gets
 * the rank that stores it; column and offset (may be NULL) the kernel table
 * column and offset. */
int64_t kv_slot_of(const struct kv_slot_geom *g, const int64_t *row,
                   int64_t p, int64_t *owner, int64_t *column,
                   int64_t *offset);

/* Per-rank KV lengths under interleaving (get_dcp_local_seq_lens): for a
 * sequence of L tokens, out[r] for r in [0, W). */
void kv_slot_cp_local_lens(int64_t len, int64_t world, int64_t interleave,
                           int64_t *out);

#endif
