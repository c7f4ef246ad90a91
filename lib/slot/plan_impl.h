/* plan_impl.h - what the files of the scheduler (plan.c, plan_pool.c,
 * plan_batch.c, plan_async.c) share and nothing outside them sees: the
 * state, the queues and their small helpers. */
#ifndef KV_PLAN_IMPL_H
#define KV_PLAN_IMPL_H
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#include "slot/plan.h"
#include "core/tensor.h"

enum { ST_WAITING = 0, ST_RUNNING, ST_PREEMPTED, ST_FINISHED };

struct req {
    int64_t prompt, out_max, n_out, computed, n_blocks;
    int state;
    int64_t row;      /* persistent batch row, -1 when not in the batch */
    int64_t sched;    /* tokens scheduled in the current step, 0 if none */
    int resumed;      /* scheduled from the waiting queue after preemption */
    int64_t arrival;  /* step it joins the waiting queue */
    int64_t first_step;       /* step it was first scheduled in, 0 before */
    /* asynchronous scheduling: computed counts the steps in flight */
    int64_t ph;               /* output placeholders: tokens sampled by
                                 steps in flight */
    int64_t inflight;         /* tokens scheduled and not yet updated */
    int64_t stale;            /* of those, tokens scheduled before a
                                 preemption */
    int started;              /* a step sampling its first token was
                                 scheduled */
    int ending;               /* a step sampling its last token was
                                 scheduled */
    int64_t num_cached;       /* prefix caching: hit tokens at its first
                                 scheduling, -1 before */
    int64_t n_hashed;         /* full blocks whose hashes are known */
    int64_t n_cached_blocks;  /* its blocks inserted in the cache, in
                                 hash blocks (hbs tokens): group g's
                                 cached blocks are the whole blocks they
                                 cover */
    int64_t slot;             /* its rows in kv_plan.blocks while it holds
                                 blocks, else -1 */
    int64_t n_mblocks;        /* blocks in each Mamba group's row */
    int64_t mlast;            /* Mamba align: 1 + the index of its previous
                                 state block (vLLM's last_state_block_idx),
                                 0 for none */
    int64_t mretired;         /* Mamba align: blocks of its rows retired */
    int64_t rs_next;          /* processed tokens at which a window or
                                 chunk may next free a block */
    int64_t spb;              /* hybrid groups: the shared-prefix boundary
                                 of its last lookup (vLLM's
                                 shared_prefix_boundary), 0 for none */
};

struct ring {
    int64_t *v;
    size_t cap, head, len;
};

struct kv_plan {
    size_t n;
    int64_t bs, mml, budget, max_seqs, num_blocks;
    int64_t short_req;            /* with groups, 1 + the first request
                                     whose bound on held blocks passes the
                                     pool (a trial run decides), else 0 */
    size_t n_cols;
    struct req *reqs;
    int64_t *blocks;              /* rows x ng x n_cols: the row of group g
                                     of the request in slot k at (k * ng +
                                     g) * n_cols (a request holds a slot
                                     while it holds blocks: a running one) */
    int64_t *free_slots;
    size_t n_free_slots;
    /* KV-cache groups (one full-attention group unless configured) */
    size_t ng;
    int *gkind;                   /* KV_PLAN_GROUP_* per group */
    int64_t *gwin;                /* window or chunk per group */
    int64_t mbs;                  /* the Mamba groups' block size (cache
                                     mode none; 0 in align) */
    int malign;                   /* Mamba groups in cache mode align */
    int64_t *mcstep;              /* with it and prefix caching: per block,
                                     the step it was last cached in */
    int64_t *gbs;                 /* with attention groups of different
                                     block sizes: each group's, and */
    int64_t *gnb;                 /* n x ng: the blocks each request holds
                                     in each group (else NULL, and
                                     n_blocks / n_mblocks count them) */
    size_t n_sg;                  /* lookup groups: groups of one spec */
    size_t *sg_gid, *sg_start;    /* their group ids, full attention first;
                                     lookup group k is sg_gid[sg_start[k]
                                     .. sg_start[k+1]) */
    int64_t *sg_hl;               /* a lookup's hit per lookup group */
    unsigned char *gskip;         /* per group: its table not written */
    size_t *gwindowed, n_windowed;/* the sliding and chunked groups */
    int64_t inflight_max;         /* vLLM's max_in_flight_tokens */
    /* prefix caching over groups: block hashes at hbs tokens (the GCD of
     * the groups' block sizes), hits and cached extents aligned to lcm
     * (their LCM: vLLM's hash_block_size and scheduler_block_size; both
     * the block size with one size); hcols hashes per request at most */
    int64_t hbs, lcm;
    size_t hcols;
    int32_t *bgroup;              /* per cached block: its group */
    int64_t *ghits;               /* ng x n_cols scratch: hit blocks */
    struct ring freeq, waitq;
    int64_t *running;
    size_t n_running;
    int64_t *batch;               /* row -> request id or -1 */
    size_t batch_len;             /* rows in use: [0, batch_len) dense */
    int split_decodes, skip_waiting, skip_shared, admit_by_chunk, async;
    /* asynchronous scheduling: the step in flight, not yet updated */
    int64_t *p_ids, *p_sched;
    unsigned char *p_samples;
    size_t n_pending;
    int has_pending;
    size_t n_ending;              /* requests whose last token is known */
    int64_t step;
    size_t n_started;             /* requests that produced a token */
    size_t n_finished_total;
    /* scratch and per-step output */
    int64_t *order, *o_new, *o_cached, *o_holes;
    size_t n_order;
    int64_t *o_req_ids, *o_sched, *o_comp, *o_table;
    int64_t *o_waiting, *o_blocked, *o_preempted, *o_finished;
    size_t n_blocked, n_preempted, n_finished, n_waiting_out;
    /* prefix caching (allocated only with it) */
    int apc;
    const int64_t *const *ptok;
    const char *const *salts;
    const int64_t *lora;
    int64_t *ref, *gen;           /* per block: references, free-queue
                                     generation (ring entries of an older
                                     generation are stale) */
    unsigned char *in_free, *hashed;
    uint64_t *bhash;              /* per block, when hashed */
    uint64_t *phash;              /* per block: the partial prefix entry a
                                     full-attention block of more than hbs
                                     tokens also holds (vLLM's
                                     cache_partial_block), when pmark */
    unsigned char *pmark;
    int64_t *bseq, seq;           /* insertion order of a cached block */
    int64_t *fscratch;            /* num_blocks, for compacting the ring */
    int64_t *owner;               /* per cached block: request * n_cols +
                                     block index that filled it */
    int64_t *ht;                  /* hash table of cached blocks: block id,
                                     -1 empty */
    size_t ht_cap;
    uint64_t *rhash;              /* n x n_cols: each request's block hashes */
    void *hstate;                 /* XXH3_state_t of block_hash */
    size_t flen;                  /* live entries of the free queue */
    int64_t *o_ncached, *o_shared;
    uint64_t *o_evicted;
    size_t n_shared, n_evicted;
};

/* The rings of the queues, and small arithmetic.  An index into a ring
 * is below twice its capacity: one subtraction wraps it. */
static inline size_t ring_wrap(const struct ring *q, size_t i)
{
    return i >= q->cap ? i - q->cap : i;
}

static inline int64_t ring_at(const struct ring *q, size_t i)
{
    return q->v[ring_wrap(q, q->head + i)];
}

static inline void ring_push_back(struct ring *q, int64_t x)
{
    q->v[ring_wrap(q, q->head + q->len)] = x;
    q->len++;
}

static inline void ring_push_front(struct ring *q, int64_t x)
{
    q->head = ring_wrap(q, q->head + q->cap - 1);
    q->v[q->head] = x;
    q->len++;
}

/* Remove the first x from the ring, keeping the order of the rest. */
static inline void ring_remove(struct ring *q, int64_t x)
{
    size_t i = 0;
    while (i < q->len && ring_at(q, i) != x)
        i++;
    if (i == q->len)
        return;
    for (; i + 1 < q->len; i++)
        q->v[ring_wrap(q, q->head + i)] = q->v[ring_wrap(q, q->head + i + 1)];
    q->len--;
}

static inline int64_t ring_pop_front(struct ring *q)
{
    int64_t x = q->v[q->head];
    q->head = ring_wrap(q, q->head + 1);
    q->len--;
    return x;
}

/* The first n entries into out, in order, taken off the ring. */
static inline void ring_pop_n(struct ring *q, int64_t *out, size_t n)
{
    size_t a = q->cap - q->head < n ? q->cap - q->head : n;
    memcpy(out, q->v + q->head, a * sizeof *out);
    memcpy(out + a, q->v, (n - a) * sizeof *out);
    q->head = ring_wrap(q, q->head + n);
    q->len -= n;
}

static inline int64_t cdiv(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* Tokens a request holds now: prompt plus the tokens it produced. */
static inline int64_t num_tokens(const struct req *r)
{
    return r->prompt + r->n_out;
}

/* Most tokens a request ever computes: its prompt plus all but the last
 * token it produces (at least one, at most up to max_model_len). */
static inline int64_t max_computed(int64_t prompt, int64_t out_max, int64_t mml)
{
    int64_t n_out = mml - prompt;

    if (out_max < n_out)
        n_out = out_max;
    if (n_out < 1)
        n_out = 1;
    return prompt + n_out - 1;
}

/* Request i's block row of group g (it holds a slot). */
static inline int64_t *plan_row(const struct kv_plan *s, int64_t i, size_t g)
{
    assert(s->reqs[i].slot >= 0);
    return s->blocks + ((size_t)s->reqs[i].slot * s->ng + g) * s->n_cols;
}

/* Group g's block size, and the blocks request r holds in it. */
static inline int64_t plan_gbs(const struct kv_plan *s, size_t g)
{
    if (s->gbs)
        return s->gbs[g];
    return s->gkind[g] == KV_PLAN_GROUP_MAMBA && s->mbs ? s->mbs : s->bs;
}

/* The blocks of group g that request r has inserted in the cache. */
static inline int64_t plan_gcached(const struct kv_plan *s, const struct req *r,
                                   size_t g)
{
    return r->n_cached_blocks * s->hbs / plan_gbs(s, g);
}

static inline int64_t plan_gblocks(const struct kv_plan *s, const struct req *r,
                                   size_t g)
{
    if (s->gnb)
        return s->gnb[(size_t)(r - s->reqs) * s->ng + g];
    return s->gkind[g] == KV_PLAN_GROUP_MAMBA && s->mbs ? r->n_mblocks
                                                        : r->n_blocks;
}

/* plan.c */
void plan_free_blocks(struct kv_plan *s, int64_t i);
void plan_schedule_running(struct kv_plan *s, int64_t *budget_p);
void plan_schedule_waiting(struct kv_plan *s, int64_t *budget_p);
void plan_fill_output(struct kv_plan *s, struct kv_plan_step *st);

/* plan_pool.c */
size_t plan_free_len(const struct kv_plan *s);
void plan_free_push(struct kv_plan *s, int64_t b);
void plan_free_put(struct kv_plan *s, int64_t b, int front);
int64_t plan_free_pop(struct kv_plan *s);
int64_t plan_token_at(const struct kv_plan *s, int64_t i, int64_t j);
void plan_cache_upto(struct kv_plan *s, int64_t i, int64_t upto);
void plan_cache_full_blocks(struct kv_plan *s, int64_t i);
void plan_hash_blocks(struct kv_plan *s, int64_t i, int64_t tokens);
int64_t plan_cached(struct kv_plan *s, int64_t i, size_t g, int64_t k);
int plan_cached_now(const struct kv_plan *s, int64_t i, size_t g, int64_t k);
void plan_cache_partial(struct kv_plan *s, int64_t i, int64_t upto);

/* plan_batch.c */
void plan_update_batch(struct kv_plan *s);
void plan_split_decodes(struct kv_plan *s);
void plan_reorder_regions(struct kv_plan *s);

/* plan_groups.c */
int plan_groups_init(struct kv_plan *s, const struct kv_plan_config *c,
                     struct kv_err *e);
int64_t plan_gcd(int64_t a, int64_t b);
int plan_hash_geometry(struct kv_plan *s, const struct kv_plan_config *c,
                       struct kv_err *e);
int64_t plan_group_cap(const struct kv_plan *s, size_t g);
int64_t plan_group_skipped(const struct kv_plan *s, size_t g, int64_t computed);
void plan_release(struct kv_plan *s, int64_t i, size_t g, const int64_t *b,
                  size_t n, int64_t step);
void plan_remove_skipped(struct kv_plan *s, int64_t i);
int64_t plan_lookup(struct kv_plan *s, int64_t i);
int plan_stuck(const struct kv_plan *s, struct kv_err *e);
/* kv_plan_new without the trial run of a short pool. */
int plan_new(struct kv_plan **out, const struct kv_plan_config *c,
             struct kv_err *e);
int64_t plan_admit_need(const struct kv_plan *s, int64_t i, int64_t tokens,
                        int64_t n_hit, int cap);
int plan_cacheable(const struct kv_plan *s, int64_t i, size_t g, int64_t k);

/* plan_mamba.c */
int plan_mamba_init(struct kv_plan *s, const struct kv_plan_config *c,
                    struct kv_err *e);
int64_t plan_mamba_split(const struct kv_plan *s, const struct req *r,
                         int64_t start, int64_t n);
int plan_mamba_allocate(struct kv_plan *s, int64_t i, int64_t need);
int plan_mamba_allocate_each(struct kv_plan *s, int64_t i, int64_t tokens);
int64_t plan_mamba_remove(struct kv_plan *s, int64_t i, size_t g,
                          int64_t done);
int plan_mamba_cacheable(const struct kv_plan *s, int64_t i, int64_t k);
int64_t plan_mamba_need(const struct kv_plan *s, int64_t i, size_t g,
                        int64_t tokens, int64_t hit);

/* plan_async.c */
int plan_step_async(struct kv_plan *s, struct kv_plan_step *st,
                    struct kv_err *e);

#endif
