/* plan_cc.h - kvslot plan --chunk-cache around the chunk cache (ccplan.h):
 * its options checked (--chunk-context, the chunk pool's share of memory,
 * --fields, --max-mem), the segment lists read with their output lengths,
 * the chunk pool sized, the plan's memory counted against --max-mem and
 * the plan made; then each step's fields by name, in the program's order.
 * kvslot plan --chunk-cache and the Python binding both call these. */
#ifndef KV_PLAN_CC_H
#define KV_PLAN_CC_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "slot/ccplan.h"

/* The fields of a chunk-cache step (kv_plan_cc_field_name gives them in
 * their default order). */
enum { KV_PLAN_CC_NF = 36 };

struct kv_plan_cc_opts {
    const char *segments;       /* kvchunk split lists with keys, a path or
                                   "-" (stdin); NULL: stdin */
    const char *output_lens;    /* --output-lens "N" or "a,b,.." as given;
                                   NULL: until max_model_len */
    const char *chunk_context;  /* "sys" or "none"; NULL: sys */
    const char *utilization;    /* --chunk-cache-gpu-memory-utilization as
                                   given; NULL: 0.15 */
    const char *fields;         /* --fields a,b; NULL: every field */
    const char *max_mem;        /* --max-mem as given; NULL: 75% of RAM */
    /* already range-checked by the caller, as the program's options */
    int64_t max_tokens, block_size, max_model_len;
    int64_t num_blocks;         /* main pool; 0: enough */
    int64_t max_num_seqs;       /* 0: 256 */
    int64_t chunk_pool_blocks;  /* 0: sized from the utilization */
    int64_t max_chunks;         /* 0: 500 */
    int64_t max_chunk_tokens;   /* 0: 4096 */
};

struct kv_plan_cc {
    struct kv_cc_config cfg;    /* chunk_pool_blocks as sized */
    struct kv_cc_req *reqs;     /* the prompts' segments */
    size_t n_reqs;
    struct kv_cc *cc;           /* the plan: kv_cc_step */
    int sel[KV_PLAN_CC_NF];     /* the fields asked for, in their order */
    size_t n_sel;               /* 0: every field */
    size_t max_bytes;           /* --max-mem */
};

/* Check o and make the plan into *pc (kv_plan_cc_release frees it; pc is
 * zeroed first).  0, or -1 with e's message (the program's) and *usage
 * set: 1 for a refused option or input (the program's exit 2), 0 for
 * input that cannot be read, over --max-mem or out of memory (exit 1);
 * *pc is then released. */
int kv_plan_cc_load(struct kv_plan_cc *pc, const struct kv_plan_cc_opts *o,
                    int *usage, struct kv_err *e);
/* Free what kv_plan_cc_load made; safe on a zeroed or released struct. */
void kv_plan_cc_release(struct kv_plan_cc *pc);

/* Field k's name (k < KV_PLAN_CC_NF), NULL past the end. */
const char *kv_plan_cc_field_name(size_t k);

/* --fields a,b into sel[0 .. *n_sel) (at most KV_PLAN_CC_NF indices).
 * 0, or -1 with e (an unknown field names the valid ones). */
int kv_plan_cc_fields(const char *s, int *sel, size_t *n_sel,
                      struct kv_err *e);

/* One field of a step. */
struct kv_plan_cc_value {
    int ndim;                   /* 0 a number, 1 a list, 2 the block table
                                   (rows of shape[1]); -1 the evicted keys
                                   (keys[0 .. shape[0]), 16 bytes each,
                                   written as text only) */
    int64_t shape[2];
    const int64_t *v;           /* ndim 0: &scalar */
    int64_t scalar;
    const uint8_t *keys;        /* ndim -1: 16 bytes a key, in a row */
};

/* Field k of step st into *val (pointing into st or at val->scalar:
 * valid until the next step). */
void kv_plan_cc_field(const struct kv_cc_step *st, size_t k,
                      struct kv_plan_cc_value *val);

#endif
