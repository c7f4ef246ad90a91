/* plan.c - vLLM v1's scheduler, block pool and persistent batch (see
 * plan.h for what is modelled).  Queues are rings of request ids; the
 * block lists of all requests live in one n_reqs x n_cols array.  This
 * file owns the configuration, the state, the scheduling of one step
 * (running, then waiting requests) and its output; the block pool is in
 * plan_pool.c, the persistent batch in plan_batch.c, asynchronous
 * scheduling in plan_async.c. */
#include "slot/plan_impl.h"

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
    free(s->free_slots);
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
    free(s->phash);
    free(s->pmark);
    free(s->bseq);
    free(s->fscratch);
    free(s->owner);
    free(s->ht);
    free(s->rhash);
    XXH3_freeState(s->hstate);
    free(s->o_ncached);
    free(s->o_shared);
    free(s->o_evicted);
    free(s->gkind);
    free(s->gwin);
    free(s->gbs);
    free(s->gnb);
    free(s->sg_gid);
    free(s->sg_start);
    free(s->sg_hl);
    free(s->gskip);
    free(s->gwindowed);
    free(s->bgroup);
    free(s->ghits);
    free(s->mcstep);
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
    for (size_t g = 0; g < c->n_groups; g++) {
        const struct kv_plan_group *q = &c->groups[g];
        if (q->kind < KV_PLAN_GROUP_FULL || q->kind > KV_PLAN_GROUP_MAMBA)
            return kv_err_set(e, "group %zu: unknown kind %d", g, q->kind);
        if (q->kind == KV_PLAN_GROUP_MAMBA) {
            if (c->prefix_caching && !q->align)
                return kv_err_set(e, "group %zu: Mamba prefix caching "
                                  "requires mamba_cache_mode='align'", g);
            if (q->align && q->block_size != c->block_size)
                return kv_err_set(e, "group %zu: Mamba blocks of %lld tokens "
                                  "in cache mode align, not the block size "
                                  "%lld", g, (long long)q->block_size,
                                  (long long)c->block_size);
            for (size_t h = 0; h < g; h++)
                if (c->groups[h].kind == KV_PLAN_GROUP_MAMBA &&
                    (c->groups[h].block_size != q->block_size ||
                     c->groups[h].align != q->align))
                    return kv_err_set(e, "groups %zu and %zu: Mamba blocks "
                                      "of %lld and %lld tokens, cache modes "
                                      "%s and %s", h, g,
                                      (long long)c->groups[h].block_size,
                                      (long long)q->block_size,
                                      c->groups[h].align ? "align" : "none",
                                      q->align ? "align" : "none");
            if (q->block_size < 1)
                return kv_err_set(e, "group %zu: Mamba block size %lld: "
                                  "expected >= 1", g,
                                  (long long)q->block_size);
            continue;
        }
        if (q->block_size < 0)
            return kv_err_set(e, "group %zu: block size %lld: expected >= 1 "
                              "(or 0: block_size)", g, (long long)q->block_size);
        if (q->kind != KV_PLAN_GROUP_FULL && q->window < 1)
            return kv_err_set(e, "group %zu: window %lld: expected >= 1", g,
                              (long long)q->window);
    }
    return 0;
}

/* The streaming state block hashes are computed in.  0 or -1. */
static int hash_state(struct kv_plan *s, struct kv_err *e)
{
    s->hstate = XXH3_createState();
    return s->hstate ? 0 : kv_err_set(e, "out of memory for the block hash state");
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
            alloc_array(&s->phash, nb, sizeof(uint64_t), e) ||
            alloc_array(&s->pmark, nb, 1, e) ||
            alloc_array(&s->bgroup, nb, sizeof(int32_t), e) ||
            alloc_array(&s->bseq, nb, sizeof(int64_t), e) ||
            alloc_array(&s->fscratch, nb, sizeof(int64_t), e) ||
            alloc_array(&s->owner, nb, sizeof(int64_t), e) ||
            alloc_array(&s->ht, s->ht_cap, sizeof(int64_t), e) ||
            kv_size_mul(n, s->hcols, &cells) ||
            alloc_array(&s->rhash, cells, sizeof(uint64_t), e) ||
            alloc_array(&s->o_ncached, rows, sizeof(int64_t), e) ||
            alloc_array(&s->o_shared, nb, sizeof(int64_t), e) ||
            /* a block evicted with its partial entry: two hashes */
            alloc_array(&s->o_evicted, 2 * nb, sizeof(uint64_t), e) ||
            hash_state(s, e)) {
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

/* The bytes kv_plan_new allocates for s's geometry (n requests, rows batch
 * rows, n_cols columns, num_blocks blocks) and, with prefix caching, its
 * tables; SIZE_MAX when the sum overflows. */
static size_t state_bytes(const struct kv_plan *s, const struct kv_plan_config *c,
                          size_t rows)
{
    size_t n = s->n, nb = (size_t)s->num_blocks, t = 0, x;
    size_t ht = 16, ng = c->n_groups ? c->n_groups : 1;
    while (c->prefix_caching && ht < 2 * nb && ht < SIZE_MAX / 4)
        ht *= 2;
    /* (count, bytes each) of every array */
    const size_t a[][2] = {
        {n, sizeof(struct req)},
        {nb, 8},                      /* free queue */
        {n, 8 * 13 + 1 + 16},         /* queues, outputs, pending, arrivals */
        {rows, 8 * 3},                /* the step's request rows */
        {c->prefix_caching ? nb : 0, 8 * 10 + 3 + 4},
        {c->prefix_caching ? ht : 0, 8},
        {c->prefix_caching ? rows : 0, 8},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (kv_size_mul(a[i][0], a[i][1], &x) || kv_size_add(t, x, &t))
            return SIZE_MAX;
    /* block lists (a running request's) and the step's tables, each group's;
     * with prefix caching, every request's hashes; the groups' scratch */
    if (kv_size_mul(rows, s->n_cols, &x) || kv_size_mul(x, 16 * ng, &x) ||
        kv_size_add(t, x, &t) ||
        kv_size_mul(n, s->hcols, &x) ||
        kv_size_mul(x, c->prefix_caching ? 8 : 0, &x) ||
        kv_size_add(t, x, &t) ||
        (ng > 1 && (kv_size_mul(ng, s->n_cols, &x) || kv_size_mul(x, 8, &x) ||
                    kv_size_add(t, x, &t) || kv_size_mul(ng, 48, &x) ||
                    kv_size_add(t, x, &t))))
        return SIZE_MAX;
    return t;
}

/* The blocks group g of c holds at most for a request computing maxc
 * tokens: all of them, or its admission cap (plan_group_cap, from the
 * config) with the block a window's span can straddle. */
static int64_t group_blocks(const struct kv_plan_config *c,
                            const struct kv_plan *s, size_t g, int64_t maxc)
{
    const struct kv_plan_group *q = &c->groups[g];
    int64_t fl = c->max_num_batched_tokens * (c->async_scheduling ? 2 : 1);
    int64_t bs = q->block_size ? q->block_size : s->bs;
    int64_t t, cap, one = cdiv(maxc, bs);
    if (q->kind == KV_PLAN_GROUP_MAMBA && q->align) {
        /* the running state, the one before, and with asynchronous
         * scheduling the one before that (freed once processed) */
        t = c->async_scheduling ? 3 : 2;
        return one < t ? one : t;
    }
    if (q->kind == KV_PLAN_GROUP_FULL || q->kind == KV_PLAN_GROUP_MAMBA)
        return one;             /* Mamba: its state blocks */
    /* the tokens a window or chunk holds span one block more than they
     * fill when they need not start on a block: always for a sliding
     * window, for a chunk that is not a multiple of the block (a chunk
     * of 32 in blocks of 128) */
    t = q->window + fl - (q->kind == KV_PLAN_GROUP_SLIDING);
    cap = cdiv(t < s->mml ? t : s->mml, bs) +
          (q->kind == KV_PLAN_GROUP_SLIDING || q->window % bs != 0);
    return cap < one ? cap : one;
}

/* The configuration checked and its geometry into s (zeroed): sizes,
 * block-table columns, pool; the batch rows into *rows.  0 or -1. */
static int plan_geometry(struct kv_plan *s, const struct kv_plan_config *c,
                         size_t *rows, struct kv_err *e)
{
    size_t n = c->n_reqs, cells, ng;
    int64_t usable;

    if (check_config(c, e) < 0)
        return -1;
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
    for (size_t g = 0; g < c->n_groups; g++)    /* a smaller group block */
        if (c->groups[g].kind != KV_PLAN_GROUP_MAMBA &&
            c->groups[g].block_size &&
            (size_t)cdiv(s->mml, c->groups[g].block_size) > s->n_cols)
            s->n_cols = (size_t)cdiv(s->mml, c->groups[g].block_size);
    if (c->round_stride) {
        /* get_block_table_width: a multiple of 128 / gcd(128, B) columns,
         * so that a row holds a multiple of lcm(128, B) tokens */
        size_t m = (size_t)(128 / plan_gcd(128, c->kernel_block_size > 0
                                                     ? c->kernel_block_size
                                                     : s->bs));
        s->n_cols = (s->n_cols + m - 1) / m * m;
    }
    if (plan_hash_geometry(s, c, e) < 0)
        return -1;
    *rows = (size_t)s->max_seqs < n ? (size_t)s->max_seqs : n;
    ng = c->n_groups ? c->n_groups : 1;
    if (c->num_blocks) {
        s->num_blocks = c->num_blocks;
    } else if (kv_size_mul(*rows, s->n_cols, &cells) ||
               kv_size_mul(cells, ng, &cells) ||
               cells >= (size_t)INT64_MAX / 16) {
        return kv_err_set(e, "%zu requests of %zu blocks are too many", *rows,
                          s->n_cols);
    } else {
        s->num_blocks = (int64_t)cells + 1;
    }
    usable = s->num_blocks - 1;
    for (size_t i = 0; i < n; i++) {
        int64_t om = c->output_lens ? c->output_lens[i] : INT64_MAX;
        int64_t maxc = max_computed(c->prompt_lens[i], om, s->mml);
        int64_t one = cdiv(maxc, s->bs), need = 0;
        /* a sliding-window or chunked group holds its admission cap at
         * most */
        for (size_t g = 0; g < ng; g++)
            need += c->n_groups ? group_blocks(c, s, g, maxc) : one;
        /* with groups the bound can pass what vLLM needs (a window holds
         * its cap only with a full budget in flight): a trial run decides */
        if (need > usable && c->n_groups) {
            if (!s->short_req)
                s->short_req = (int64_t)i + 1;
        } else if (need > usable) {
            return kv_err_set(e, "request %zu needs %lld blocks of %lld "
                              "tokens, the pool has %lld (besides the null "
                              "block): it could never run", i,
                              (long long)need, (long long)s->bs,
                              (long long)usable);
        }
    }
    return 0;
}

int kv_plan_state_bytes(const struct kv_plan_config *c, size_t *bytes,
                        struct kv_err *e)
{
    struct kv_plan s;
    size_t rows;

    memset(&s, 0, sizeof s);
    if (plan_geometry(&s, c, &rows, e) < 0)
        return -1;
    *bytes = state_bytes(&s, c, rows);
    return 0;
}

int plan_new(struct kv_plan **out, const struct kv_plan_config *c,
             struct kv_err *e)
{
    struct kv_plan *s;
    size_t n = c->n_reqs, rows, cells;

    s = calloc(1, sizeof *s);
    if (!s)
        return kv_err_set(e, "out of memory");
    if (plan_geometry(s, c, &rows, e) < 0) {
        kv_plan_free(s);
        return -1;
    }
    if (c->max_bytes) {
        size_t need = state_bytes(s, c, rows);
        if (need != SIZE_MAX && c->extra_bytes <= SIZE_MAX - need)
            need += c->extra_bytes;
        else
            need = SIZE_MAX;
        if (need > c->max_bytes) {
            if (need == SIZE_MAX)
                kv_err_set(e, "the plan's state overflows the address space "
                           "(%zu requests of %zu block-table columns)", n,
                           s->n_cols);
            else
                kv_err_set(e, "the plan needs %zu bytes for %zu requests of "
                           "%zu block-table columns (%zu of them for each "
                           "step's metadata), over the limit of %zu", need, n,
                           s->n_cols, c->extra_bytes, c->max_bytes);
            kv_plan_free(s);
            return -1;
        }
    }
    if ((uint64_t)s->num_blocks > SIZE_MAX / 16 ||
        plan_groups_init(s, c, e) < 0 ||
        kv_size_mul(rows, s->n_cols, &cells) ||
        kv_size_mul(cells, s->ng, &cells) ||
        alloc_array(&s->reqs, n, sizeof *s->reqs, e) ||
        alloc_array(&s->blocks, cells, sizeof(int64_t), e) ||
        alloc_array(&s->free_slots, rows, sizeof(int64_t), e) ||
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
        kv_size_mul(cells, s->ng, &cells) ||
        alloc_array(&s->o_table, cells, sizeof(int64_t), e) ||
        alloc_array(&s->ghits, s->ng * s->n_cols, sizeof(int64_t), e) ||
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
        plan_free_push(s, b);
    s->waitq.cap = n;
    for (size_t k = rows; k-- > 0;)
        s->free_slots[s->n_free_slots++] = (int64_t)k;
    for (size_t i = 0; i < n; i++) {
        struct req *r = &s->reqs[i];
        r->slot = -1;
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

/* Rows for request i (a running request holds one slot of max_num_seqs). */
static void take_slot(struct kv_plan *s, int64_t i)
{
    if (s->reqs[i].slot < 0) {
        assert(s->n_free_slots > 0);
        s->reqs[i].slot = s->free_slots[--s->n_free_slots];
        s->reqs[i].rs_next = 0;
    }
}

/* Give request i enough blocks in every group for its first `tokens`
 * tokens, group after group, after freeing the blocks that left its
 * windows (allocate_slots); 0 or -1 when the free queue is too short
 * (nothing taken then). */
static int allocate(struct kv_plan *s, int64_t i, int64_t tokens)
{
    struct req *r = &s->reqs[i];
    int64_t need;

    take_slot(s, i);
    if (s->n_windowed)
        plan_remove_skipped(s, i);
    if (s->gnb && s->malign)
        return plan_mamba_allocate_each(s, i, tokens);
    if (s->gnb) {               /* each group in its own block size */
        int64_t *have = s->gnb + (size_t)i * s->ng, total = 0;
        for (size_t g = 0; g < s->ng; g++) {
            int64_t k = cdiv(tokens, s->gbs[g]) - have[g];
            total += k > 0 ? k : 0;
        }
        if (total > (int64_t)plan_free_len(s))
            return -1;
        for (size_t g = 0; g < s->ng; g++) {
            int64_t k = cdiv(tokens, s->gbs[g]) - have[g];
            int64_t *row = plan_row(s, i, g) + have[g];
            if (k <= 0)
                continue;
            if (!s->apc)
                ring_pop_n(&s->freeq, row, (size_t)k);
            for (int64_t j = 0; s->apc && j < k; j++)
                row[j] = plan_free_pop(s);
            have[g] += k;
        }
        return 0;
    }
    need = cdiv(tokens, s->bs) - r->n_blocks;
    if (need < 0)
        need = 0;
    if (s->malign)
        return plan_mamba_allocate(s, i, need);
    if (s->mbs) {               /* Mamba groups: their own block count */
        int64_t m = cdiv(tokens, s->mbs) - r->n_mblocks, total = 0;
        m = m > 0 ? m : 0;
        for (size_t g = 0; g < s->ng; g++)
            total += s->gkind[g] == KV_PLAN_GROUP_MAMBA ? m : need;
        if (total > (int64_t)plan_free_len(s))
            return -1;
        for (size_t g = 0; g < s->ng; g++) {
            int mamba = s->gkind[g] == KV_PLAN_GROUP_MAMBA;
            int64_t k = mamba ? m : need, at = mamba ? r->n_mblocks : r->n_blocks;
            ring_pop_n(&s->freeq, plan_row(s, i, g) + at, (size_t)k);
        }
        r->n_blocks += need;
        r->n_mblocks += m;
        return 0;
    }
    if (need == 0)
        return 0;
    if ((size_t)need * s->ng > plan_free_len(s))
        return -1;
    for (size_t g = 0; g < s->ng; g++) {
        int64_t *row = plan_row(s, i, g);
        if (!s->apc) {          /* a plain ring of block ids */
            ring_pop_n(&s->freeq, row + r->n_blocks, (size_t)need);
            continue;
        }
        for (int64_t k = 0; k < need; k++)
            row[r->n_blocks + k] = plan_free_pop(s);
    }
    r->n_blocks += need;
    return 0;
}

/* Release a request's blocks as vLLM's coordinator does, group after
 * group, each group's last block first (BlockPool.free_blocks: a block
 * left with no reference goes to the back of the free queue when it holds
 * a cached hash, evicted in LRU order, and to the front when it holds
 * none, which is every block without prefix caching, the request's last
 * block frontmost); the null entries of a window are skipped. */
void plan_free_blocks(struct kv_plan *s, int64_t i)
{
    struct req *r = &s->reqs[i];
    int64_t *tmp = s->ghits;

    r->mlast = r->mretired = 0;
    if (r->slot < 0) {
        r->n_blocks = r->n_cached_blocks = r->n_mblocks = 0;
        return;
    }
    for (size_t g = 0; !s->apc && g < s->ng; g++) {
        /* the fast path of plan_release: the row's blocks to the front,
         * its last block frontmost */
        const int64_t *row = plan_row(s, i, g);
        for (int64_t j = 0, m = plan_gblocks(s, r, g); j < m; j++)
            if (row[j])
                ring_push_front(&s->freeq, row[j]);
    }
    for (size_t g = 0; s->apc && g < s->ng; g++) {
        const int64_t *row = plan_row(s, i, g);
        int64_t n = plan_gblocks(s, r, g);
        for (int64_t j = 0; j < n; j++)
            tmp[j] = row[n - 1 - j];
        plan_release(s, i, g, tmp, (size_t)n, s->step);
    }
    r->n_blocks = 0;
    r->n_mblocks = 0;
    r->n_cached_blocks = 0;
    if (s->gnb)
        memset(s->gnb + (size_t)i * s->ng, 0, s->ng * sizeof *s->gnb);
    s->free_slots[s->n_free_slots++] = r->slot;
    r->slot = -1;
}

/* A waiting request's admission (allocate_slots for it): with prefix
 * caching and nothing computed, its hit every group agrees on; then the
 * blocks of its whole sequence, min(tokens, max model len), each group's
 * counted up to its cap, must be free (unless admit_by_chunk), and those
 * of this step's chunk (a hit block still in the free queue counts as one
 * taken); then the hits join its rows (a window's blocks before the hit's
 * window as null blocks), leaving the free queue, and new blocks follow,
 * group after group.  *want: the tokens it is scheduled; -1 when it must
 * wait (nothing taken then), -2 when Mamba's align leaves it no tokens. */
static int admit(struct kv_plan *s, int64_t id, int64_t budget,
                 int64_t *want_p, int64_t *n_hit)
{
    struct req *r = &s->reqs[id];
    int64_t n = 0, want, local, full, free = (int64_t)plan_free_len(s);

    if (s->apc && r->computed == 0)
        n = plan_lookup(s, id);         /* tokens */
    local = r->computed + n;
    want = num_tokens(r) - local;
    if (want > budget)
        want = budget;
    if (s->malign && (want = plan_mamba_split(s, r, local, want)) == 0)
        return -2;
    full = num_tokens(r) < s->mml ? num_tokens(r) : s->mml;
    if (!s->admit_by_chunk && plan_admit_need(s, id, full, n, 1) > free)
        return -1;
    if (plan_admit_need(s, id, local + want < s->mml ? local + want : s->mml,
                        n, 0) > free)
        return -1;
    take_slot(s, id);
    for (size_t g = 0; g < s->ng && n > 0; g++) {
        int64_t *row = plan_row(s, id, g), bs = plan_gbs(s, g);
        const int64_t *h = s->ghits + g * s->n_cols;
        int64_t sk = plan_group_skipped(s, g, n) / bs;
        if (s->gnb)
            s->gnb[(size_t)id * s->ng + g] = n / bs;
        for (int64_t k = 0; k < n / bs; k++) {
            int64_t b = k < sk ? 0 : h[k];
            row[k] = b;
            if (b == 0)
                continue;
            if (s->ref[b] == 0) {
                s->in_free[b] = 0;       /* its ring entry turns stale */
                s->flen--;
            }
            s->ref[b]++;
        }
    }
    r->n_blocks = n / s->bs;
    r->n_cached_blocks = n / s->hbs;
    r->computed = local;
    *n_hit = n;
    *want_p = want;
    return allocate(s, id, local + want);
}

static void preempt(struct kv_plan *s, int64_t id)
{
    struct req *r = &s->reqs[id];

    plan_free_blocks(s, id);
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
void plan_schedule_running(struct kv_plan *s, int64_t *budget_p)
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
        if (s->malign && want > 0)
            want = plan_mamba_split(s, r, r->computed, want);
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
            plan_cache_full_blocks(s, id);
        s->order[s->n_order++] = id;
        budget -= want;
        k++;
    }
    *budget_p = budget;
}

/* Then waiting requests that have arrived, first come first served, unless
 * this step preempted one; a request that cannot get its blocks waits and
 * so does everything behind it. */
void plan_schedule_waiting(struct kv_plan *s, int64_t *budget_p)
{
    int64_t budget = *budget_p;

    while (s->n_preempted == 0 && s->waitq.len > 0 && budget > 0) {
        int64_t id, want, n_hit = 0;
        struct req *r;
        int rc;

        if ((int64_t)s->n_running >= s->max_seqs)
            break;
        id = ring_at(&s->waitq, 0);
        r = &s->reqs[id];
        if (r->arrival > s->step)
            break;
        if ((rc = admit(s, id, budget, &want, &n_hit)) < 0) {
            if (rc == -1)
                s->o_blocked[s->n_blocked++] = id;
            break;              /* -2: a Mamba chunk of no tokens */
        }
        (void)ring_pop_front(&s->waitq);
        if (r->num_cached < 0)
            r->num_cached = n_hit;
        r->resumed = r->state == ST_PREEMPTED;
        if (r->state == ST_WAITING)
            r->first_step = s->step;
        r->state = ST_RUNNING;
        r->sched = want;
        if (s->apc)
            plan_cache_full_blocks(s, id);
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
            plan_free_blocks(s, id);
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

int kv_plan_step(struct kv_plan *s, struct kv_plan_step *st,
                  struct kv_err *e)
{
    int64_t budget = s->budget;

    if (s->async)
        return plan_step_async(s, st, e);
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

    plan_schedule_running(s, &budget);
    plan_schedule_waiting(s, &budget);
    /* a step before the next arrival, with nothing running, is empty */
    /* (a step whose one running request preempted itself is a step) */
    if (s->n_order == 0 && s->n_preempted == 0 &&
        !(s->n_running == 0 && s->n_blocked == 0 && s->waitq.len > 0 &&
          s->reqs[ring_at(&s->waitq, 0)].arrival > s->step))
        return plan_stuck(s, e);

    plan_fill_output(s, st);
    advance(s);
    st->finished = s->o_finished;
    st->n_finished = s->n_finished;
    st->prompts_done = s->n_started == s->n;
    st->all_done = s->n_finished_total == s->n;
    return 0;
}

/* The step's rows (persistent batch update and reorder), their metadata
 * and block tables, the waiting list and the pool's counters into st. */
void plan_fill_output(struct kv_plan *s, struct kv_plan_step *st)
{
    int64_t total = 0;
    size_t n_rows = 0;

    plan_update_batch(s);
    if (s->split_decodes == KV_PLAN_REORDER_SPLIT_DECODES)
        plan_split_decodes(s);
    else if (s->split_decodes == KV_PLAN_REORDER_REGIONS)
        plan_reorder_regions(s);
    for (size_t row = 0; row < s->batch_len; row++) {
        int64_t id = s->batch[row];
        const struct req *r = &s->reqs[id];

        s->o_req_ids[row] = id;
        if (s->apc)
            s->o_ncached[row] = r->num_cached;
        s->o_sched[row] = r->sched;
        s->o_comp[row] = r->computed;
        total += r->sched;
        for (size_t g = 0; g < s->ng; g++) {
            int64_t *t = s->o_table + (g * s->batch_len + row) * s->n_cols;
            size_t m = (size_t)plan_gblocks(s, r, g);
            if (s->gskip[g] == 1)
                continue;
            memcpy(t, plan_row(s, id, g), m * sizeof *t);
            if (s->gskip[g] != 2)
                memset(t + m, 0, (s->n_cols - m) * sizeof *t);
        }
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
    st->n_groups = s->ng;
    st->tables = s->o_table;
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
    st->free_blocks = (int64_t)plan_free_len(s);
    st->num_tokens = total;
}

/* Whether cached block b, held by request i at index k, has the tokens
 * its owner had there: 0 or -1. */
static int check_owner(const struct kv_plan *s, int64_t b, size_t i, int64_t k)
{
    int64_t oi = s->owner[b] / (int64_t)s->n_cols;
    int64_t ok = s->owner[b] % (int64_t)s->n_cols;
    int64_t bs = plan_gbs(s, (size_t)s->bgroup[b]);
    for (int64_t j = 0; j < bs; j++)
        if (plan_token_at(s, oi, ok * bs + j) !=
            plan_token_at(s, (int64_t)i, k * bs + j))
            return -1;
    return 0;
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
            if (s->reqs[i].state == ST_FINISHED &&
                (s->reqs[i].n_blocks || s->reqs[i].n_mblocks ||
                 (s->gnb && s->reqs[i].slot >= 0)))
                return kv_err_set(e, "finished request %zu holds blocks", i);
            for (size_t g = 0; s->reqs[i].slot >= 0 && g < s->ng; g++) {
                const int64_t *row = plan_row(s, (int64_t)i, g);
                int64_t m = plan_gblocks(s, &s->reqs[i], g);
                for (int64_t k = 0; k < m; k++) {
                    if (row[k] != b)
                        continue;
                    refs++;
                    /* a cached block a request holds below its cached
                     * count has exactly the tokens that request has there */
                    if (k < plan_gcached(s, &s->reqs[i], g) && s->hashed[b] &&
                        check_owner(s, b, i, k) < 0)
                        return kv_err_set(e, "request %zu group %zu block "
                                          "%lld (id %lld) holds other "
                                          "tokens", i, g, (long long)k,
                                          (long long)b);
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
