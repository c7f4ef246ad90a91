/* mla_int.h - what mla.c (the kernel and the items of both MLA forms) and
 * mla_job.c (the plan of work items, their run on the thread pool and the
 * merge of their partial results) share.  Internal to libkv. */
#ifndef KV_MLA_INT_H
#define KV_MLA_INT_H

#include <stddef.h>
#include <stdint.h>

#include "attn/bf16.h"
#include "core/tensor.h"

/* A work item: request b, queries [i0, i1) of it, keys [j0, j1), the rows
 * of heads h .. h + hn - 1 (one head of the naive form; all heads, or a
 * group of them, of the absorbed form), its partial results at part
 * (floats) in the shared buffer. */
struct item {
    int64_t b, h, hn, i0, i1, j0, j1;
    size_t part;
};

/* A scratch buffer of the job's pool (mla_slot_get). */
struct slot {
    void *p;
    size_t n;
    int busy;
};

struct job {
    /* shared geometry */
    int64_t H, dq, dv;
    int causal;
    float scale;
    float out_mul;               /* not 0: each output row times it after
                                  * its division (kv_mla_req.v_exp) */
    int64_t *q_start, *q_len, *kv_start, *kv_len;
    const float *q;              /* [T, H, dq] f32 */
    /* absorbed */
    const struct kv_tensor *cache;
    enum kv_bf16_route bf16;     /* the bf16 tiles, or KV_BF16_NONE */
    const uint16_t *q16;         /* [T, H, dq] bf16 (the bf16 tiles) */
    int64_t bs, dl, chunk_k, head_group;
    const int64_t *bt;
    size_t bt_cols;
    /* naive */
    const float *ckv, *kpe, *wuk, *wuv;
    int64_t P, R, Vd;
    /* items and results */
    struct item *items;
    float *parts;                /* per item: rows * (dv + 2) floats */
    struct slot *slots;          /* the bf16 items' scratch pool */
    int n_slots;
    int failed;
    /* the run (mla_job_run): each item's function, the groups of items
     * merged together (item -> group, each group's first item, items
     * left to run), the output and LSE the merges write */
    void (*fn)(void *, size_t);
    size_t *group, *first, *left;
    struct kv_tensor *out, *lse;
};

/* Rows of an item (queries x heads of it). */
static inline int64_t mla_item_rows(const struct item *it)
{
    return (it->i1 - it->i0) * it->hn;
}
/* Per-request starts and lengths from lens (T queries or keys in all);
 * what names them in the error. */
int mla_lens_check(const int64_t *lens, size_t n, int64_t total, const char *what,
                   int64_t *start, struct kv_err *e);

/* Take n bytes from the budget *left (SIZE_MAX: no limit); what names
 * them in the error. */
int mla_budget_take(size_t *left, size_t n, const char *what, struct kv_err *e);

/* Bytes of an f32 copy of t (SIZE_MAX when it overflows). */
size_t mla_f32_bytes(const struct kv_tensor *t);

/* A scratch buffer of at least n bytes from the job's pool (mla_job.c),
 * or NULL; give it back with mla_slot_put. */
struct slot *mla_slot_get(struct job *j, size_t n);
void mla_slot_put(struct slot *s);

/* Plan the items of n_req requests (per head for the naive form), run fn
 * on each on n_threads threads, merge the partial results in chunk order
 * into out [T, H, dv] (dtype od) and lse [T, H] (if not NULL).  max_bytes
 * (SIZE_MAX: no limit) holds the partial results, the output and the LSE
 * together.  0, or -1 with e filled. */
int mla_job_run(struct job *j, size_t n_req, int per_head, void (*fn)(void *, size_t),
                int n_threads, size_t max_bytes, enum kv_dtype od, int64_t T,
                struct kv_tensor *out, struct kv_tensor *lse, struct kv_err *e);

#endif
