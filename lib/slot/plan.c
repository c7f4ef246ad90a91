/* plan.c - vLLM v1's scheduler, block pool and persistent batch (see
 * plan.h for what is modelled).  Queues are rings of request ids; the
 * block lists of all requests live in one n_reqs x n_cols array. */
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
    int64_t n_cached_blocks;  /* its blocks inserted in the cache */
};

struct ring {
    int64_t *v;
    size_t cap, head, len;
};

struct kv_plan {
    size_t n;
    int64_t bs, mml, budget, max_seqs, num_blocks;
    size_t n_cols;
    struct req *reqs;
    int64_t *blocks;              /* n x n_cols */
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
    int64_t *bseq, seq;           /* insertion order of a cached block */
    int64_t *fscratch;            /* num_blocks, for compacting the ring */
    int64_t *owner;               /* per cached block: request * n_cols +
                                     block index that filled it */
    int64_t *ht;                  /* hash table of cached blocks: block id,
                                     -1 empty */
    size_t ht_cap;
    uint64_t *rhash;              /* n x n_cols: each request's block hashes */
    size_t flen;                  /* live entries of the free queue */
    int64_t *o_ncached, *o_shared;
    uint64_t *o_evicted;
    size_t n_shared, n_evicted;
};

static int64_t ring_at(const struct ring *q, size_t i)
{
    return q->v[(q->head + i) % q->cap];
}

static void ring_push_back(struct ring *q, int64_t x)
{
    q->v[(q->head + q->len) % q->cap] = x;
    q->len++;
}

static void ring_push_front(struct ring *q, int64_t x)
{
    q->head = (q->head + q->cap - 1) % q->cap;
    q->v[q->head] = x;
    q->len++;
}

/* Remove the first x from the ring, keeping the order of the rest. */
static void ring_remove(struct ring *q, int64_t x)
{
    size_t i = 0;
    while (i < q->len && ring_at(q, i) != x)
        i++;
    if (i == q->len)
        return;
    for (; i + 1 < q->len; i++)
        q->v[(q->head + i) % q->cap] = q->v[(q->head + i + 1) % q->cap];
    q->len--;
}

static int64_t ring_pop_front(struct ring *q)
{
    int64_t x = q->v[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return x;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* Tokens a request holds now: prompt plus the tokens it produced. */
static int64_t num_tokens(const struct req *r)
{
    return r->prompt + r->n_out;
}

/* Most tokens a request ever computes: its prompt plus all but the last
 * token it produces (at least one, at most up to max_model_len). */
static int64_t max_computed(int64_t prompt, int64_t out_max, int64_t mml)
{
    int64_t n_out = mml - prompt;

    if (out_max < n_out)
        n_out = out_max;
    if (n_out < 1)
        n_out = 1;
    return prompt + n_out - 1;
}

/* ---- the free queue ------------------------------------------------------
 * Without prefix caching the ring holds block ids.  With it, an entry is a
 * block id and the block's generation (id | gen << 32): a block taken out
 * of the middle (a cache hit) leaves a stale entry behind, skipped when it
 * reaches the front.  s->flen counts the live entries either way. */

static size_t free_len(const struct kv_plan *s)
{
    return s->apc ? s->flen : s->freeq.len;
}

static void free_push(struct kv_plan *s, int64_t b)
{
    if (!s->apc) {
        ring_push_back(&s->freeq, b);
        return;
    }
    if (s->freeq.len == s->freeq.cap) {
        /* full of stale entries: keep the live ones, in order */
        size_t n = s->freeq.len, keep = 0;
        for (size_t i = 0; i < n; i++) {
            int64_t x = ring_at(&s->freeq, i), bb = x & 0xffffffff;
            if (s->in_free[bb] && (x >> 32) == s->gen[bb])
                s->fscratch[keep++] = x;
        }
        memcpy(s->freeq.v, s->fscratch, keep * sizeof *s->fscratch);
        s->freeq.head = 0;
        s->freeq.len = keep;
    }
    s->gen[b]++;
    s->in_free[b] = 1;
    ring_push_back(&s->freeq, b | s->gen[b] << 32);
    s->flen++;
}

/* ---- cached blocks: a hash table of block ids keyed by block hash ----------
 * Linear probing at a load of at most one half (ht_cap >= 2 * num_blocks).
 * A deletion shifts the rest of its cluster back instead of leaving a
 * marker, so every slot is either a block id or empty (-1) and a lookup of
 * an absent hash always meets an empty slot within its cluster, however
 * many insertions and evictions came before. */

static size_t ht_slot(const struct kv_plan *s, uint64_t h)
{
    return (size_t)(h * 0x9e3779b97f4a7c15ull >> 7) & (s->ht_cap - 1);
}

static void cache_insert(struct kv_plan *s, int64_t b, uint64_t h)
{
    size_t i = ht_slot(s, h);
    while (s->ht[i] >= 0)
        i = (i + 1) & (s->ht_cap - 1);
    s->ht[i] = b;
    s->bhash[b] = h;
    s->hashed[b] = 1;
    s->bseq[b] = s->seq++;
}

/* The block cached first under hash h, or -1 (vLLM keeps the blocks of one
 * hash in insertion order and hands out the first). */
static int64_t cache_lookup(const struct kv_plan *s, uint64_t h)
{
    int64_t best = -1;
    for (size_t i = ht_slot(s, h); s->ht[i] >= 0; i = (i + 1) & (s->ht_cap - 1)) {
        int64_t b = s->ht[i];
        if (s->bhash[b] == h && (best < 0 || s->bseq[b] < s->bseq[best]))
            best = b;
    }
    return best;
}

/* Remove block b from the table: empty its slot, then move each later
 * entry of the cluster whose home slot is not cyclically in (hole, entry]
 * back into the hole, until the cluster ends. */
static void cache_remove(struct kv_plan *s, int64_t b)
{
    size_t mask = s->ht_cap - 1, i = ht_slot(s, s->bhash[b]), j;

    while (s->ht[i] != b) {
        assert(s->ht[i] >= 0);
        i = (i + 1) & mask;
    }
    for (j = (i + 1) & mask; s->ht[j] >= 0; j = (j + 1) & mask) {
        size_t home = ht_slot(s, s->bhash[s->ht[j]]);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            s->ht[i] = s->ht[j];
            i = j;
        }
    }
    s->ht[i] = -1;
}

static void cache_evict(struct kv_plan *s, int64_t b)
{
    cache_remove(s, b);
    s->hashed[b] = 0;
    s->o_evicted[s->n_evicted++] = s->bhash[b];
}

/* A block from the free queue's head; a cached one loses its hash. */
static int64_t free_pop(struct kv_plan *s)
{
    if (!s->apc)
        return ring_pop_front(&s->freeq);
    for (;;) {
        int64_t x = ring_pop_front(&s->freeq), b = x & 0xffffffff;
        if (!s->in_free[b] || (x >> 32) != s->gen[b])
            continue;                  /* stale: taken by a hit */
        s->in_free[b] = 0;
        s->flen--;
        if (s->hashed[b])
            cache_evict(s, b);
        s->ref[b] = 1;
        return b;
    }
}

/* Token j of request i: its prompt's id, or for the k-th token it produced
 * an id no prompt has (negative, unique to the request and k). */
static int64_t token_at(const struct kv_plan *s, int64_t i, int64_t j)
{
    const struct req *r = &s->reqs[i];
    if (j < r->prompt)
        return s->ptok[i][j];
    return -1 - (i << 32) - (j - r->prompt);
}

/* Hash of request i's block k (its parent's hash known): one XXH3-64 of
 * the bytes laid out as kvslot(1) says. */
static uint64_t block_hash(const struct kv_plan *s, int64_t i, int64_t k)
{
    unsigned char stack[8 * 66], *buf = stack;
    size_t need = 8 * (size_t)(s->bs + 2), at = 0;
    const char *salt = k == 0 && s->salts && s->salts[i] ? s->salts[i] : "";
    size_t sl = strlen(salt);
    uint64_t parent = k ? s->rhash[(size_t)i * s->n_cols + (size_t)k - 1] : 0;
    uint64_t h;
    if (need + sl > sizeof stack && !(buf = malloc(need + sl)))
        abort();                      /* a few bytes: cannot fail in practice */
#define PUT64(x) do { uint64_t v_ = (uint64_t)(x); \
        for (int q_ = 0; q_ < 8; q_++) buf[at++] = (unsigned char)(v_ >> (8 * q_)); } while (0)
    PUT64(parent);
    for (int64_t j = k * s->bs; j < (k + 1) * s->bs; j++)
        PUT64(token_at(s, i, j));
    if (s->lora && s->lora[i] > 0)
        PUT64(s->lora[i]);
#undef PUT64
    memcpy(buf + at, salt, sl);
    h = XXH3_64bits(buf, at + sl);
    if (buf != stack)
        free(buf);
    return h;
}

/* The hashes of request i's full blocks among its first `tokens` tokens. */
static void hash_blocks(struct kv_plan *s, int64_t i, int64_t tokens)
{
    struct req *r = &s->reqs[i];
    int64_t full = tokens / s->bs;
    if (full > (int64_t)s->n_cols)
        full = (int64_t)s->n_cols;
    for (; r->n_hashed < full; r->n_hashed++)
        s->rhash[(size_t)i * s->n_cols + (size_t)r->n_hashed] =
            block_hash(s, i, r->n_hashed);
}

/* Cache request i's blocks that its first `upto` tokens fill (the tokens
 * whose ids are known at most). */
static void cache_upto(struct kv_plan *s, int64_t i, int64_t upto)
{
    struct req *r = &s->reqs[i];
    const int64_t *row = s->blocks + (size_t)i * s->n_cols;
    if (upto > num_tokens(r))
        upto = num_tokens(r);
    hash_blocks(s, i, upto);
    for (; r->n_cached_blocks < upto / s->bs; r->n_cached_blocks++) {
        int64_t b = row[r->n_cached_blocks];
        if (!s->hashed[b]) {
            cache_insert(s, b, s->rhash[(size_t)i * s->n_cols +
                                        (size_t)r->n_cached_blocks]);
            s->owner[b] = i * (int64_t)s->n_cols + r->n_cached_blocks;
        }
    }
}

/* After scheduling: cache request i's blocks that its computed and
 * scheduled tokens fill. */
static void cache_full_blocks(struct kv_plan *s, int64_t i)
{
    cache_upto(s, i, s->reqs[i].computed + s->reqs[i].sched);
}

/* A waiting request with nothing computed: its longest cached prefix of
 * full blocks (never all its tokens).  Fills hits[] and returns the count. */
static int64_t find_hits(struct kv_plan *s, int64_t i, int64_t *hits)
{
    struct req *r = &s->reqs[i];
    int64_t max_blocks = (num_tokens(r) - 1) / s->bs, n = 0;
    hash_blocks(s, i, max_blocks * s->bs);
    for (; n < max_blocks; n++) {
        int64_t b = cache_lookup(s, s->rhash[(size_t)i * s->n_cols + (size_t)n]);
        if (b < 0)
            break;
        hits[n] = b;
    }
    return n;
}

static int alloc_array(void *pp, size_t n, size_t size, struct kv_err *e)
{
    size_t bytes;
    void **p = pp;

    if (kv_size_mul(n ? n : 1, size, &bytes))
        return kv_err_set(e, "scheduler state of %zu entries is too large",
                          n);
    *p = calloc(1, bytes);
    if (!*p)
        return kv_err_set(e, "out of memory for the scheduler (%zu bytes)",
                          bytes);
    return 0;
}

void kv_plan_free(struct kv_plan *s)
{
    if (!s)
        return;
    free(s->reqs);
    free(s->blocks);
    free(s->freeq.v);
    free(s->waitq.v);
    free(s->running);
    free(s->batch);
    free(s->order);
    free(s->o_new);
    free(s->o_cached);
    free(s->o_holes);
    free(s->o_req_ids);
    free(s->o_sched);
    free(s->o_comp);
    free(s->o_table);
    free(s->o_waiting);
    free(s->o_blocked);
    free(s->o_preempted);
    free(s->o_finished);
    free(s->p_ids);
    free(s->p_sched);
    free(s->p_samples);
    free(s->ref);
    free(s->gen);
    free(s->in_free);
    free(s->hashed);
    free(s->bhash);
    free(s->bseq);
    free(s->fscratch);
    free(s->owner);
    free(s->ht);
    free(s->rhash);
    free(s->o_ncached);
    free(s->o_shared);
    free(s->o_evicted);
    free(s);
}

/* The configuration's own checks; messages name the request. */
static int check_config(const struct kv_plan_config *c, struct kv_err *e)
{
    size_t n = c->n_reqs;

    if (n == 0)
        return kv_err_set(e, "no requests");
    if (c->block_size < 1)
        return kv_err_set(e, "block size %lld: expected >= 1",
                          (long long)c->block_size);
    if (c->max_model_len < 1)
        return kv_err_set(e, "max model len %lld: expected >= 1",
                          (long long)c->max_model_len);
    if (c->max_num_batched_tokens < 1)
        return kv_err_set(e, "token budget %lld: expected >= 1",
                          (long long)c->max_num_batched_tokens);
    if (c->max_num_seqs < 1)
        return kv_err_set(e, "max num seqs %lld: expected >= 1",
                          (long long)c->max_num_seqs);
    if (c->num_blocks != 0 && c->num_blocks < 2)
        return kv_err_set(e, "%lld blocks: expected >= 2 (block 0 is the "
                          "null block)", (long long)c->num_blocks);
    for (size_t i = 0; i < n; i++) {
        if (c->prompt_lens[i] < 1)
            return kv_err_set(e, "request %zu: prompt length %lld: "
                              "expected >= 1", i,
                              (long long)c->prompt_lens[i]);
        if (c->prompt_lens[i] >= c->max_model_len)
            return kv_err_set(e, "request %zu: prompt length %lld leaves "
                              "no room for an output token under the max "
                              "model len %lld", i,
                              (long long)c->prompt_lens[i],
                              (long long)c->max_model_len);
        if (c->output_lens && c->output_lens[i] < 1)
            return kv_err_set(e, "request %zu: output length %lld: "
                              "expected >= 1", i,
                              (long long)c->output_lens[i]);
        if (c->arrivals && c->arrivals[i] < 1)
            return kv_err_set(e, "request %zu: arrival step %lld: expected "
                              ">= 1", i, (long long)c->arrivals[i]);
        for (int64_t j = 0; c->prompt_tokens && j < c->prompt_lens[i]; j++)
            if (c->prompt_tokens[i][j] < 0)
                return kv_err_set(e, "request %zu: token %lld is %lld: "
                                  "expected ids >= 0", i, (long long)j,
                                  (long long)c->prompt_tokens[i][j]);
    }
    if (c->prefix_caching && !c->prompt_tokens)
        return kv_err_set(e, "prefix caching needs the prompts' token ids");
    return 0;
}

/* Prefix caching's state, when asked for (frees s on failure). */
static int init_prefix_caching(struct kv_plan *s, const struct kv_plan_config *c,
                               size_t rows, struct kv_err *e)
{
    size_t n = s->n, cells;

    s->apc = c->prefix_caching;
    s->ptok = c->prompt_tokens;
    s->salts = c->salts;
    s->lora = c->lora_ids;
    if (s->apc) {
        size_t nb = (size_t)s->num_blocks;
        s->ht_cap = 16;
        while (s->ht_cap < 2 * nb)
            s->ht_cap *= 2;
        if (s->num_blocks > INT32_MAX ||
            alloc_array(&s->ref, nb, sizeof(int64_t), e) ||
            alloc_array(&s->gen, nb, sizeof(int64_t), e) ||
            alloc_array(&s->in_free, nb, 1, e) ||
            alloc_array(&s->hashed, nb, 1, e) ||
            alloc_array(&s->bhash, nb, sizeof(uint64_t), e) ||
            alloc_array(&s->bseq, nb, sizeof(int64_t), e) ||
            alloc_array(&s->fscratch, nb, sizeof(int64_t), e) ||
            alloc_array(&s->owner, nb, sizeof(int64_t), e) ||
            alloc_array(&s->ht, s->ht_cap, sizeof(int64_t), e) ||
            kv_size_mul(n, s->n_cols, &cells) ||
            alloc_array(&s->rhash, cells, sizeof(uint64_t), e) ||
            alloc_array(&s->o_ncached, rows, sizeof(int64_t), e) ||
            alloc_array(&s->o_shared, nb, sizeof(int64_t), e) ||
            alloc_array(&s->o_evicted, nb, sizeof(uint64_t), e)) {
            kv_plan_free(s);
            return e && e->msg[0] ? -1
                                  : kv_err_set(e, "prefix-caching state too large");
        }
        for (size_t i = 0; i < s->ht_cap; i++)
            s->ht[i] = -1;
    }
    return 0;
}

struct arrival {
    int64_t step;
    size_t id;
};

static int cmp_arrival(const void *x, const void *y)
{
    const struct arrival *a = x, *b = y;
    if (a->step != b->step)
        return a->step < b->step ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The waiting queue in arrival order, ties by request id.  0 or -1. */
static int queue_by_arrival(struct kv_plan *s, struct kv_err *e)
{
    struct arrival *v;

    if (alloc_array(&v, s->n, sizeof *v, e) < 0)
        return -1;
    for (size_t i = 0; i < s->n; i++) {
        v[i].step = s->reqs[i].arrival;
        v[i].id = i;
    }
    qsort(v, s->n, sizeof *v, cmp_arrival);
    for (size_t i = 0; i < s->n; i++)
        ring_push_back(&s->waitq, (int64_t)v[i].id);
    free(v);
    return 0;
}

int kv_plan_new(struct kv_plan **out, const struct kv_plan_config *c,
                 struct kv_err *e)
{
    struct kv_plan *s;
    size_t n = c->n_reqs, rows, cells;
    int64_t usable;

    if (check_config(c, e) < 0)
        return -1;
    s = calloc(1, sizeof *s);
    if (!s)
        return kv_err_set(e, "out of memory");
    s->n = n;
    s->bs = c->block_size;
    s->mml = c->max_model_len;
    s->budget = c->max_num_batched_tokens;
    s->max_seqs = c->max_num_seqs;
    s->split_decodes = c->split_decodes;
    s->skip_waiting = c->skip_waiting;
    s->skip_shared = c->skip_shared;
    s->admit_by_chunk = c->admit_by_chunk;
    s->async = c->async_scheduling;
    s->n_cols = (size_t)cdiv(s->mml, s->bs);
    if (c->round_stride) {
        /* get_block_table_width: a multiple of 128 / gcd(128, B) columns,
         * so that a row holds a multiple of lcm(128, B) tokens */
        int64_t a = 128, b = c->kernel_block_size > 0 ? c->kernel_block_size
                                                      : s->bs;
        size_t m;
        while (b) {
            int64_t t = a % b;
            a = b;
            b = t;
        }
        m = (size_t)(128 / a);
        s->n_cols = (s->n_cols + m - 1) / m * m;
    }
    rows = (size_t)s->max_seqs < n ? (size_t)s->max_seqs : n;
    if (c->num_blocks) {
        s->num_blocks = c->num_blocks;
    } else if (kv_size_mul(rows, s->n_cols, &cells) ||
               cells >= (size_t)INT64_MAX / 16) {
        kv_plan_free(s);
        return kv_err_set(e, "%zu requests of %zu blocks are too many", rows,
                          s->n_cols);
    } else {
        s->num_blocks = (int64_t)cells + 1;
    }
    usable = s->num_blocks - 1;
    for (size_t i = 0; i < n; i++) {
        int64_t om = c->output_lens ? c->output_lens[i] : INT64_MAX;
        int64_t need = cdiv(max_computed(c->prompt_lens[i], om, s->mml),
                            s->bs);
        if (need > usable) {
            kv_err_set(e, "request %zu needs %lld blocks of %lld tokens, "
                       "the pool has %lld (besides the null block): it "
                       "could never run", i, (long long)need,
                       (long long)s->bs, (long long)usable);
            kv_plan_free(s);
            return -1;
        }
    }
    if (c->max_bytes) {
        /* the big arrays: block lists, the step's table, the free queue */
        size_t a = 0, b = 0, need = 0;
        int over = kv_size_mul(n, s->n_cols, &a) ||
                   kv_size_mul(rows, s->n_cols, &b) ||
                   kv_size_add(a, b, &need) ||
                   kv_size_add(need, (size_t)s->num_blocks, &need) ||
                   kv_size_mul(need, sizeof(int64_t), &need);
        if (over || need > c->max_bytes) {
            if (over)
                kv_err_set(e, "the plan's state overflows the address space "
                           "(%zu requests of %zu block-table columns)", n,
                           s->n_cols);
            else
                kv_err_set(e, "the plan needs %zu bytes for %zu requests of "
                           "%zu block-table columns, over the limit of %zu",
                           need, n, s->n_cols, c->max_bytes);
            kv_plan_free(s);
            return -1;
        }
    }
    if ((uint64_t)s->num_blocks > SIZE_MAX / 16 ||
        kv_size_mul(n, s->n_cols, &cells) ||
        alloc_array(&s->reqs, n, sizeof *s->reqs, e) ||
        alloc_array(&s->blocks, cells, sizeof(int64_t), e) ||
        alloc_array(&s->freeq.v, (size_t)s->num_blocks, sizeof(int64_t), e) ||
        alloc_array(&s->waitq.v, n, sizeof(int64_t), e) ||
        alloc_array(&s->running, n, sizeof(int64_t), e) ||
        alloc_array(&s->batch, n, sizeof(int64_t), e) ||
        alloc_array(&s->order, n, sizeof(int64_t), e) ||
        alloc_array(&s->o_new, n, sizeof(int64_t), e) ||
        alloc_array(&s->o_cached, n, sizeof(int64_t), e) ||
        alloc_array(&s->o_holes, n, sizeof(int64_t), e) ||
        alloc_array(&s->o_req_ids, rows, sizeof(int64_t), e) ||
        alloc_array(&s->o_sched, rows, sizeof(int64_t), e) ||
        alloc_array(&s->o_comp, rows, sizeof(int64_t), e) ||
        kv_size_mul(rows, s->n_cols, &cells) ||
        alloc_array(&s->o_table, cells, sizeof(int64_t), e) ||
        alloc_array(&s->o_waiting, n, sizeof(int64_t), e) ||
        alloc_array(&s->o_blocked, n, sizeof(int64_t), e) ||
        alloc_array(&s->o_preempted, n, sizeof(int64_t), e) ||
        alloc_array(&s->o_finished, n, sizeof(int64_t), e) ||
        alloc_array(&s->p_ids, n, sizeof(int64_t), e) ||
        alloc_array(&s->p_sched, n, sizeof(int64_t), e) ||
        alloc_array(&s->p_samples, n, 1, e)) {
        kv_plan_free(s);
        return e && e->msg[0] ? -1
                              : kv_err_set(e, "scheduler state too large");
    }
    if (init_prefix_caching(s, c, rows, e) < 0)
        return -1;
    s->freeq.cap = (size_t)s->num_blocks;
    for (int64_t b = 1; b < s->num_blocks; b++)
        free_push(s, b);
    s->waitq.cap = n;
    for (size_t i = 0; i < n; i++) {
        struct req *r = &s->reqs[i];
        r->prompt = c->prompt_lens[i];
        r->out_max = c->output_lens ? c->output_lens[i] : INT64_MAX;
        r->row = -1;
        r->arrival = c->arrivals ? c->arrivals[i] : 1;
        r->num_cached = -1;
        s->batch[i] = -1;
    }
    if (queue_by_arrival(s, e) < 0) {
        kv_plan_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* Give request i enough blocks for its first `tokens` tokens; 0 or -1 when
 * the free queue is too short (nothing taken then). */
static int allocate(struct kv_plan *s, int64_t i, int64_t tokens)
{
    struct req *r = &s->reqs[i];
    int64_t need = cdiv(tokens, s->bs) - r->n_blocks;
    int64_t *row = s->blocks + (size_t)i * s->n_cols;

    if (need <= 0)
        return 0;
    if ((size_t)need > free_len(s))
        return -1;
    while (need-- > 0)
        row[r->n_blocks++] = free_pop(s);
    return 0;
}

/* Return a request's blocks to the back of the free queue, last first. */
static void free_blocks(struct kv_plan *s, int64_t i)
{
    struct req *r = &s->reqs[i];
    int64_t *row = s->blocks + (size_t)i * s->n_cols;

    while (r->n_blocks > 0) {
        int64_t b = row[--r->n_blocks];
        if (!s->apc || --s->ref[b] == 0)
            free_push(s, b);
    }
    r->n_cached_blocks = 0;
}

/* The model runner's persistent batch update: rows of requests not
 * scheduled now are emptied, new then returning requests fill the lowest
 * empty rows (or append), the last rows move down into remaining holes. */
static void update_batch(struct kv_plan *s)
{
    size_t n_holes = 0, n_new = 0, n_cached = 0, hole = 0;

    for (size_t row = 0; row < s->batch_len; row++) {
        int64_t id = s->batch[row];
        if (id >= 0 && s->reqs[id].sched == 0) {
            s->reqs[id].row = -1;
            s->batch[row] = -1;
        }
        if (s->batch[row] < 0)
            s->o_holes[n_holes++] = (int64_t)row;
    }
    for (size_t k = 0; k < s->n_order; k++) {
        int64_t id = s->order[k];
        struct req *r = &s->reqs[id];
        if (r->row >= 0)
            continue;
        /* new: scheduled for the first time (its prefix hits count as
         * computed); cached: resumed, or back after a step without tokens */
        if (r->first_step != s->step)
            s->o_cached[n_cached++] = id;
        else
            s->o_new[n_new++] = id;
    }
    for (size_t k = 0; k < n_new + n_cached; k++) {
        int64_t id = k < n_new ? s->o_new[k] : s->o_cached[k - n_new];
        size_t row = hole < n_holes ? (size_t)s->o_holes[hole++]
                                    : s->batch_len++;
        s->batch[row] = id;
        s->reqs[id].row = (int64_t)row;
    }
    /* condense: the holes are ascending, move the last rows into them */
    for (; hole < n_holes; hole++) {
        size_t h = (size_t)s->o_holes[hole];
        while (s->batch_len > 0 && s->batch[s->batch_len - 1] < 0)
            s->batch_len--;
        if (h >= s->batch_len)
            break;
        s->batch[h] = s->batch[s->batch_len - 1];
        s->reqs[s->batch[h]].row = (int64_t)h;
        s->batch[--s->batch_len] = -1;
    }
    while (s->batch_len > 0 && s->batch[s->batch_len - 1] < 0)
        s->batch_len--;
}

/* Decodes (one scheduled token) to the front of the batch with the fewest
 * swaps: the last decode that sits behind the decode region trades rows
 * with the first prefill, until the regions separate.  The swap persists
 * in the batch, as in vLLM. */
static void split_decodes(struct kv_plan *s)
{
    size_t n_dec = 0, n_pre = 0;
    int64_t *dec = s->o_new, *pre = s->o_cached;   /* scratch */

    for (size_t row = 0; row < s->batch_len; row++) {
        if (s->reqs[s->batch[row]].sched <= 1)
            dec[n_dec++] = (int64_t)row;
        else
            pre[n_pre++] = (int64_t)row;
    }
    for (size_t i = 1; i <= n_dec && i <= n_pre; i++) {
        size_t d = (size_t)dec[n_dec - i], p = (size_t)pre[i - 1];
        int64_t x;
        if (d < n_dec)
            break;
        x = s->batch[d];
        s->batch[d] = s->batch[p];
        s->batch[p] = x;
        s->reqs[s->batch[d]].row = (int64_t)d;
        s->reqs[s->batch[p]].row = (int64_t)p;
    }
}

/* Region of a batch row for the newest reorder: 0 decode, 1 extend,
 * 2 prefill (nothing computed, whatever the count). */
static int row_region(const struct kv_plan *s, size_t row)
{
    const struct req *r = &s->reqs[s->batch[row]];

    if (r->computed == 0)
        return 2;
    return r->sched <= 1 ? 0 : 1;
}

static void swap_rows(struct kv_plan *s, size_t a, size_t b)
{
    int64_t x = s->batch[a];

    s->batch[a] = s->batch[b];
    s->batch[b] = x;
    s->reqs[s->batch[a]].row = (int64_t)a;
    s->reqs[s->batch[b]].row = (int64_t)b;
}

/* The newest vLLM reorder: decode -> extend -> prefill.  The rows whose
 * region differs from the target region of their position, stably sorted
 * by region, are the sources; the same rows in ascending order are the
 * destinations; each cycle of that mapping is applied with swaps through
 * its first source, in source order (as the upstream loop does). */
static void reorder_regions(struct kv_plan *s)
{
    size_t count[3] = { 0, 0, 0 }, n_mis = 0, k;
    int64_t *mis = s->o_new, *src = s->o_cached, *dest = s->o_holes;

    for (size_t row = 0; row < s->batch_len; row++)
        count[row_region(s, row)]++;
    for (size_t row = 0; row < s->batch_len; row++) {
        int want = row < count[0] ? 0 : row < count[0] + count[1] ? 1 : 2;
        dest[row] = -1;
        if (row_region(s, row) != want)
            mis[n_mis++] = (int64_t)row;
    }
    k = 0;
    for (int g = 0; g < 3; g++)
        for (size_t i = 0; i < n_mis; i++)
            if (row_region(s, (size_t)mis[i]) == g)
                src[k++] = mis[i];
    for (size_t i = 0; i < n_mis; i++)
        dest[src[i]] = mis[i];
    for (size_t i = 0; i < n_mis; i++) {
        int64_t a = src[i], d = dest[a];
        while (a != d) {
            int64_t next;
            swap_rows(s, (size_t)a, (size_t)d);
            next = dest[d] >= 0 ? dest[d] : d;
            dest[d] = d;
            d = next;
        }
    }
}

/* Blocks for a waiting request's whole sequence, min(tokens, max model
 * len): what vLLM's full-sequence admission check asks of the pool (the
 * request holds no block while it waits). */
static int64_t full_need(const struct kv_plan *s, int64_t id)
{
    int64_t t = num_tokens(&s->reqs[id]);

    return cdiv(t < s->mml ? t : s->mml, s->bs);
}

/* Prefix caching, for a waiting request with nothing computed: take the
 * cache hits if the blocks it then needs for its whole sequence (or, with
 * admit_by_chunk, for the budget's tokens) are free (the hit blocks still
 * in the free queue do not count as free).  The hits
 * gain a reference and leave the free queue.  -1 when it must wait. */
static int admit_hits(struct kv_plan *s, int64_t id, int64_t budget,
                      int64_t *n_hit)
{
    struct req *r = &s->reqs[id];
    int64_t *row = s->blocks + (size_t)id * s->n_cols;
    int64_t *hits = s->o_shared;          /* scratch: reset at the output */
    int64_t n = find_hits(s, id, hits), evictable = 0, want, need;
    for (int64_t k = 0; k < n; k++)
        evictable += s->ref[hits[k]] == 0;
    if (!s->admit_by_chunk &&
        full_need(s, id) - n > (int64_t)free_len(s) - evictable)
        return -1;
    want = num_tokens(r) - n * s->bs;
    if (want > budget)
        want = budget;
    need = cdiv(n * s->bs + want, s->bs) - n;
    if (need > (int64_t)free_len(s) - evictable)
        return -1;
    for (int64_t k = 0; k < n; k++) {
        int64_t b = hits[k];
        if (s->ref[b] == 0) {
            s->in_free[b] = 0;       /* its ring entry turns stale */
            s->flen--;
        }
        s->ref[b]++;
        row[r->n_blocks++] = b;
    }
    r->computed = n * s->bs;
    r->n_cached_blocks = n;
    *n_hit = n;
    return 0;
}

static void preempt(struct kv_plan *s, int64_t id)
{
    struct req *r = &s->reqs[id];

    free_blocks(s, id);
    r->computed = 0;
    r->stale = r->inflight;       /* its step in flight still delivers */
    r->ph = 0;
    r->state = ST_PREEMPTED;
    ring_push_front(&s->waitq, id);
    s->o_preempted[s->n_preempted++] = id;
}

/* Running requests first, in order, each the tokens it still needs up to
 * the budget; out of blocks, the last running request is preempted (maybe
 * itself, which then waits: blocked). */
static void schedule_running(struct kv_plan *s, int64_t *budget_p)
{
    int64_t budget = *budget_p;

    for (size_t k = 0; k < s->n_running && budget > 0;) {
        int64_t id = s->running[k];
        struct req *r = &s->reqs[id];
        int64_t want = num_tokens(r) + r->ph - r->computed;
        int ok = 1;

        /* asynchronous: a request whose steps in flight sample its last
         * token is not scheduled again */
        if (r->ph > 0 && r->computed + 2 - r->ph - r->prompt >= r->out_max) {
            k++;
            continue;
        }
        if (want > budget)
            want = budget;
        /* no position at or past max_model_len (one token is sampled) */
        if (want > s->mml - r->computed - 1)
            want = s->mml - r->computed - 1;
        if (want <= 0) {
            k++;
            continue;
        }
        while (allocate(s, id, r->computed + want)) {
            int64_t victim = s->running[--s->n_running];
            preempt(s, victim);
            if (victim == id) {
                ok = 0;
                break;
            }
        }
        if (!ok) {
            s->o_blocked[s->n_blocked++] = id;
            break;
        }
        r->sched = want;
        r->resumed = 0;
        if (s->apc)
            cache_full_blocks(s, id);
        s->order[s->n_order++] = id;
        budget -= want;
        k++;
    }
    *budget_p = budget;
}

/* Then waiting requests that have arrived, first come first served, unless
 * this step preempted one; a request that cannot get its blocks waits and
 * so does everything behind it. */
static void schedule_waiting(struct kv_plan *s, int64_t *budget_p)
{
    int64_t budget = *budget_p;

    while (s->n_preempted == 0 && s->waitq.len > 0 && budget > 0) {
        int64_t id, want, n_hit = 0;
        struct req *r;

        if ((int64_t)s->n_running >= s->max_seqs)
            break;
        id = ring_at(&s->waitq, 0);
        r = &s->reqs[id];
        if (r->arrival > s->step)
            break;
        if (s->apc && r->computed == 0 && admit_hits(s, id, budget, &n_hit) < 0) {
            s->o_blocked[s->n_blocked++] = id;
            break;
        }
        want = num_tokens(r) - r->computed;
        if (want > budget)
            want = budget;
        if ((!s->apc && !s->admit_by_chunk &&
             full_need(s, id) > (int64_t)free_len(s)) ||
            allocate(s, id, r->computed + want)) {
            s->o_blocked[s->n_blocked++] = id;
            break;
        }
        (void)ring_pop_front(&s->waitq);
        if (r->num_cached < 0)
            r->num_cached = n_hit * s->bs;
        r->resumed = r->state == ST_PREEMPTED;
        if (r->state == ST_WAITING)
            r->first_step = s->step;
        r->state = ST_RUNNING;
        r->sched = want;
        if (s->apc)
            cache_full_blocks(s, id);
        s->running[s->n_running++] = id;
        s->order[s->n_order++] = id;
        budget -= want;
    }
    *budget_p = budget;
}

/* After the forward pass: tokens computed, one sampled by every request
 * whose prompt is complete, finished requests' blocks freed. */
static void advance(struct kv_plan *s)
{
    size_t keep;

    for (size_t k = 0; k < s->n_order; k++) {
        int64_t id = s->order[k];
        struct req *r = &s->reqs[id];

        r->computed += r->sched;
        r->sched = 0;
        if (r->computed < num_tokens(r))
            continue;
        if (r->n_out == 0)
            s->n_started++;
        r->n_out++;
        if (num_tokens(r) >= s->mml || r->n_out >= r->out_max) {
            r->state = ST_FINISHED;
            free_blocks(s, id);
            s->o_finished[s->n_finished++] = id;
            s->n_finished_total++;
        }
    }
    keep = 0;
    for (size_t k = 0; k < s->n_running; k++)
        if (s->reqs[s->running[k]].state != ST_FINISHED)
            s->running[keep++] = s->running[k];
    s->n_running = keep;
}

static void fill_output(struct kv_plan *s, struct kv_plan_step *st);
static int step_async(struct kv_plan *s, struct kv_plan_step *st,
                      struct kv_err *e);

int kv_plan_step(struct kv_plan *s, struct kv_plan_step *st,
                  struct kv_err *e)
{
    int64_t budget = s->budget;

    if (s->async)
        return step_async(s, st, e);
    if (s->n_finished_total == s->n)
        return kv_err_set(e, "every request has finished");
    /* nothing running and the next request not yet arrived: vLLM's engine
     * runs no step with nothing to schedule, the clock moves on to the
     * arrival */
    if (s->n_running == 0 && s->waitq.len > 0 &&
        s->reqs[ring_at(&s->waitq, 0)].arrival > s->step + 1)
        s->step = s->reqs[ring_at(&s->waitq, 0)].arrival - 1;
    s->step++;
    s->n_order = s->n_blocked = s->n_preempted = s->n_finished = 0;
    s->n_evicted = s->n_shared = 0;

    schedule_running(s, &budget);
    schedule_waiting(s, &budget);
    /* a step before the next arrival, with nothing running, is empty */
    if (s->n_order == 0 && !(s->n_running == 0 && s->n_blocked == 0 &&
                             s->waitq.len > 0 &&
                             s->reqs[ring_at(&s->waitq, 0)].arrival > s->step))
        return kv_err_set(e, "step %lld: nothing can be scheduled (%zu "
                          "waiting, %zu free blocks)", (long long)s->step,
                          s->waitq.len, free_len(s));

    fill_output(s, st);
    advance(s);
    st->finished = s->o_finished;
    st->n_finished = s->n_finished;
    st->prompts_done = s->n_started == s->n;
    st->all_done = s->n_finished_total == s->n;
    return 0;
}

/* The step's rows (persistent batch update and reorder), their metadata
 * and block tables, the waiting list and the pool's counters into st. */
static void fill_output(struct kv_plan *s, struct kv_plan_step *st)
{
    int64_t total = 0;
    size_t n_rows = 0;

    update_batch(s);
    if (s->split_decodes == KV_PLAN_REORDER_SPLIT_DECODES)
        split_decodes(s);
    else if (s->split_decodes == KV_PLAN_REORDER_REGIONS)
        reorder_regions(s);
    for (size_t row = 0; row < s->batch_len; row++) {
        int64_t id = s->batch[row];
        const struct req *r = &s->reqs[id];
        int64_t *t = s->o_table + row * s->n_cols;
        const int64_t *b = s->blocks + (size_t)id * s->n_cols;

        s->o_req_ids[row] = id;
        if (s->apc)
            s->o_ncached[row] = r->num_cached;
        s->o_sched[row] = r->sched;
        s->o_comp[row] = r->computed;
        total += r->sched;
        memcpy(t, b, (size_t)r->n_blocks * sizeof *t);
        memset(t + r->n_blocks, 0,
               (s->n_cols - (size_t)r->n_blocks) * sizeof *t);
        n_rows++;
    }
    /* the queue holds the arrived requests first (arrival order, the
     * preempted ones in front) */
    s->n_waiting_out = 0;
    for (size_t k = 0; !s->skip_waiting && k < s->waitq.len &&
                       s->reqs[ring_at(&s->waitq, k)].arrival <= s->step; k++)
        s->o_waiting[s->n_waiting_out++] = ring_at(&s->waitq, k);
    for (int64_t b = 1; s->apc && !s->skip_shared && b < s->num_blocks; b++)
        if (s->ref[b] > 1)
            s->o_shared[s->n_shared++] = b;
    st->step = s->step;
    st->n_rows = n_rows;
    st->req_ids = s->o_req_ids;
    st->num_scheduled = s->o_sched;
    st->num_computed = s->o_comp;
    st->block_table = s->o_table;
    st->n_cols = s->n_cols;
    st->waiting = s->o_waiting;
    st->n_waiting = s->n_waiting_out;
    st->num_cached = s->apc ? s->o_ncached : NULL;
    st->shared = s->o_shared;
    st->n_shared = s->n_shared;
    st->evicted = s->o_evicted;
    st->n_evicted = s->n_evicted;
    st->blocked = s->o_blocked;
    st->n_blocked = s->n_blocked;
    st->preempted = s->o_preempted;
    st->n_preempted = s->n_preempted;
    st->free_blocks = (int64_t)free_len(s);
    st->num_tokens = total;
}

int kv_plan_check(const struct kv_plan *s, struct kv_err *e)
{
    int64_t live = 0, held = 0;
    if (!s->apc)
        return 0;
    for (int64_t b = 1; b < s->num_blocks; b++) {
        live += s->in_free[b];
        held += s->ref[b] > 0;
        if (s->in_free[b] && s->ref[b] != 0)
            return kv_err_set(e, "block %lld is free with %lld references",
                              (long long)b, (long long)s->ref[b]);
    }
    if ((size_t)live != s->flen || live + held != s->num_blocks - 1)
        return kv_err_set(e, "free %lld + referenced %lld != %lld blocks",
                          (long long)live, (long long)held,
                          (long long)s->num_blocks - 1);
    for (int64_t b = 1; b < s->num_blocks; b++) {
        int64_t refs = 0;
        for (size_t i = 0; i < s->n; i++) {
            const int64_t *row = s->blocks + i * s->n_cols;
            if (s->reqs[i].state == ST_FINISHED && s->reqs[i].n_blocks)
                return kv_err_set(e, "finished request %zu holds blocks", i);
            for (int64_t k = 0; k < s->reqs[i].n_blocks; k++) {
                if (row[k] != b)
                    continue;
                refs++;
                /* a cached block a request holds below its cached count
                 * has exactly the tokens that request has there */
                if (k < s->reqs[i].n_cached_blocks && s->hashed[b]) {
                    int64_t oi = s->owner[b] / (int64_t)s->n_cols;
                    int64_t ok = s->owner[b] % (int64_t)s->n_cols;
                    for (int64_t j = 0; j < s->bs; j++)
                        if (token_at(s, oi, ok * s->bs + j) !=
                            token_at(s, (int64_t)i, k * s->bs + j))
                            return kv_err_set(e, "request %zu block %lld "
                                              "(id %lld) holds other tokens",
                                              i, (long long)k, (long long)b);
                }
            }
        }
        if (refs != s->ref[b])
            return kv_err_set(e, "block %lld: %lld references counted, %lld "
                              "held", (long long)b, (long long)s->ref[b],
                              (long long)refs);
    }
    return 0;
}

/* ---- asynchronous scheduling ----------------------------------------------
 * vLLM's engine with async scheduling keeps two steps in flight: it
 * schedules step k+1, then processes step k's output (its batch queue of
 * two).  The scheduler advances num_computed_tokens when it schedules, and
 * a step that samples leaves an output placeholder, resolved when its
 * output is processed.  Requests that finish in step k are freed only
 * then, after step k+1 was scheduled. */

/* A request finishes when its output is processed: its blocks return to
 * the pool (it holds none if it was preempted) and it leaves the queues. */
static void finish_async(struct kv_plan *s, int64_t id)
{
    struct req *r = &s->reqs[id];

    if (r->state == ST_PREEMPTED)
        ring_remove(&s->waitq, id);
    r->state = ST_FINISHED;
    free_blocks(s, id);
    s->n_finished_total++;
}

/* The step in flight's output (update_from_output): each request that
 * sampled gets its token; a token of a step scheduled before the request
 * was preempted is stale: delivered, but it resolves no placeholder. */
static void update_async(struct kv_plan *s)
{
    size_t keep = 0;

    for (size_t k = 0; k < s->n_pending; k++) {
        int64_t id = s->p_ids[k];
        struct req *r = &s->reqs[id];
        int stale = 0;

        r->inflight -= s->p_sched[k];
        if (r->stale > 0) {
            stale = 1;
            r->stale -= s->p_sched[k];
        }
        if (r->state == ST_FINISHED || !s->p_samples[k])
            continue;
        r->n_out++;
        if (!stale && r->ph > 0) {
            r->ph--;
            /* the blocks its known tokens fill, now that the token is */
            if (s->apc && r->state == ST_RUNNING)
                cache_upto(s, id, r->computed - r->inflight);
        }
        if (num_tokens(r) >= s->mml || r->n_out >= r->out_max)
            finish_async(s, id);
    }
    for (size_t k = 0; k < s->n_running; k++)
        if (s->reqs[s->running[k]].state != ST_FINISHED)
            s->running[keep++] = s->running[k];
    s->n_running = keep;
    s->n_pending = 0;
    s->has_pending = 0;
}

/* After scheduling (_update_after_schedule): computed tokens advance now,
 * a step that samples adds a placeholder; a request whose last token this
 * step samples is reported finished with this step (it is freed when the
 * step's output is processed).  The step becomes the one in flight. */
static void after_schedule_async(struct kv_plan *s)
{
    s->n_finished = 0;
    for (size_t k = 0; k < s->n_order; k++) {
        int64_t id = s->order[k];
        struct req *r = &s->reqs[id];
        int samples;

        r->computed += r->sched;
        r->inflight += r->sched;
        samples = r->computed >= num_tokens(r) + r->ph;
        s->p_ids[k] = id;
        s->p_sched[k] = r->sched;
        s->p_samples[k] = (unsigned char)samples;
        r->sched = 0;
        if (!samples)
            continue;
        r->ph++;
        if (!r->started) {
            r->started = 1;
            s->n_started++;
        }
        if (!r->ending && (num_tokens(r) + r->ph >= s->mml ||
                           r->n_out + r->ph >= r->out_max)) {
            r->ending = 1;
            s->n_ending++;
            s->o_finished[s->n_finished++] = id;
        }
    }
    /* a step with no rows leaves nothing in flight */
    s->n_pending = s->n_order;
    s->has_pending = s->n_order > 0;
}

/* One step of the asynchronous engine: schedule, write, then process the
 * step in flight before this one.  A scheduling that finds nothing to run
 * (every running request waits for its last token) is a step too: it has
 * no rows and empties the model runner's batch. */
static int step_async(struct kv_plan *s, struct kv_plan_step *st,
                      struct kv_err *e)
{
    int64_t budget = s->budget;

    if (s->n_ending == s->n)
        return kv_err_set(e, "every request has finished");
    if (s->n_running == 0 && !s->has_pending && s->waitq.len > 0 &&
        s->reqs[ring_at(&s->waitq, 0)].arrival > s->step + 1)
        s->step = s->reqs[ring_at(&s->waitq, 0)].arrival - 1;
    s->step++;
    s->n_order = s->n_blocked = s->n_preempted = s->n_finished = 0;
    s->n_evicted = s->n_shared = 0;
    schedule_running(s, &budget);
    schedule_waiting(s, &budget);
    if (s->n_order == 0 && !s->has_pending)
        return kv_err_set(e, "step %lld: nothing can be scheduled (%zu "
                          "waiting, %zu free blocks)", (long long)s->step,
                          s->waitq.len, free_len(s));
    fill_output(s, st);
    if (s->has_pending)
        update_async(s);
    after_schedule_async(s);
    st->finished = s->o_finished;
    st->n_finished = s->n_finished;
    st->prompts_done = s->n_started == s->n;
    st->all_done = s->n_ending == s->n;
    return 0;
}
