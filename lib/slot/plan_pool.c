/* plan_pool.c - the block pool of the scheduler: the free queue, the
 * table of cached blocks keyed by block hash, block hashing and the
 * longest cached prefix (prefix caching). */
#include "slot/plan_impl.h"

/* ---- the free queue ------------------------------------------------------
 * Without prefix caching the ring holds block ids.  With it, an entry is a
 * block id and the block's generation (id | gen << 32): a block taken out
 * of the middle (a cache hit) leaves a stale entry behind, skipped when it
 * reaches the front.  s->flen counts the live entries either way. */

size_t plan_free_len(const struct kv_plan *s)
{
    return s->apc ? s->flen : s->freeq.len;
}

/* Put block b at the back of the free queue, or at its front (front != 0). */
void plan_free_put(struct kv_plan *s, int64_t b, int front)
{
    if (!s->apc) {
        if (front)
            ring_push_front(&s->freeq, b);
        else
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
    if (front)
        ring_push_front(&s->freeq, b | s->gen[b] << 32);
    else
        ring_push_back(&s->freeq, b | s->gen[b] << 32);
    s->flen++;
}

void plan_free_push(struct kv_plan *s, int64_t b)
{
    plan_free_put(s, b, 0);
}

/* ---- cached blocks: a hash table of block ids keyed by block hash ----------
 * Linear probing at a load of at most one half (ht_cap >= 2 * num_blocks).
 * A deletion shifts the rest of its cluster back instead of leaving a
 * marker, so every slot is either a block id or empty (-1) and a lookup of
 * an absent hash always meets an empty slot within its cluster, however
 * many insertions and evictions came before. */

static size_t ht_slot(const struct kv_plan *s, uint64_t h, int32_t g)
{
    h += (uint64_t)g * 0xc2b2ae3d27d4eb4full;
    return (size_t)(h * 0x9e3779b97f4a7c15ull >> 7) & (s->ht_cap - 1);
}

/* Cache block b under hash h in group g (vLLM keys a cached block by its
 * hash and its KV-cache group). */
static void cache_insert(struct kv_plan *s, int64_t b, uint64_t h, int32_t g)
{
    size_t i = ht_slot(s, h, g);
    while (s->ht[i] >= 0)
        i = (i + 1) & (s->ht_cap - 1);
    s->ht[i] = b;
    s->bhash[b] = h;
    s->bgroup[b] = g;
    s->hashed[b] = 1;
    s->bseq[b] = s->seq++;
    if (s->mcstep)
        s->mcstep[b] = s->step;
}

/* The block cached first under hash h in group g, or -1 (vLLM keeps the
 * blocks of one hash in insertion order and hands out the first). */
static int64_t cache_lookup(const struct kv_plan *s, uint64_t h, int32_t g)
{
    int64_t best = -1;
    for (size_t i = ht_slot(s, h, g); s->ht[i] >= 0; i = (i + 1) & (s->ht_cap - 1)) {
        int64_t b = s->ht[i];
        if (s->bhash[b] == h && s->bgroup[b] == g &&
            (best < 0 || s->bseq[b] < s->bseq[best]))
            best = b;
    }
    return best;
}

/* Remove block b from the table: empty its slot, then move each later
 * entry of the cluster whose home slot is not cyclically in (hole, entry]
 * back into the hole, until the cluster ends. */
static void cache_remove(struct kv_plan *s, int64_t b)
{
    size_t mask = s->ht_cap - 1, i = ht_slot(s, s->bhash[b], s->bgroup[b]), j;

    while (s->ht[i] != b) {
        assert(s->ht[i] >= 0);
        i = (i + 1) & mask;
    }
    for (j = (i + 1) & mask; s->ht[j] >= 0; j = (j + 1) & mask) {
        size_t home = ht_slot(s, s->bhash[s->ht[j]], s->bgroup[s->ht[j]]);
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
    if (s->pmark[b])            /* its partial entry leaves with it */
        s->o_evicted[s->n_evicted++] = s->phash[b];
    s->pmark[b] = 0;
}

/* A block from the free queue's head; a cached one loses its hash. */
int64_t plan_free_pop(struct kv_plan *s)
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
int64_t plan_token_at(const struct kv_plan *s, int64_t i, int64_t j)
{
    const struct req *r = &s->reqs[i];
    if (j < r->prompt)
        return s->ptok[i][j];
    return -1 - (i << 32) - (j - r->prompt);
}

/* Hash of request i's hash block k (hbs tokens; its parent's hash known):
 * XXH3-64 of the bytes laid out as kvslot(1) says, fed to the plan's streaming state a
 * few tokens at a time (the same hash as over the whole layout at once,
 * with no buffer that grows with the block size). */
static uint64_t block_hash(const struct kv_plan *s, int64_t i, int64_t k)
{
    unsigned char buf[8 * 64];
    size_t at = 0;
    const char *salt = k == 0 && s->salts && s->salts[i] ? s->salts[i] : "";
    uint64_t parent = k ? s->rhash[(size_t)i * s->hcols + (size_t)k - 1] : 0;
    XXH3_state_t *h = s->hstate;
    XXH3_64bits_reset(h);
#define PUT64(x) do { uint64_t v_ = (uint64_t)(x); \
        if (at == sizeof buf) { XXH3_64bits_update(h, buf, at); at = 0; } \
        for (int q_ = 0; q_ < 8; q_++) buf[at++] = (unsigned char)(v_ >> (8 * q_)); } while (0)
    PUT64(parent);
    for (int64_t j = k * s->hbs; j < (k + 1) * s->hbs; j++)
        PUT64(plan_token_at(s, i, j));
    if (s->lora && s->lora[i] > 0)
        PUT64(s->lora[i]);
#undef PUT64
    XXH3_64bits_update(h, buf, at);
    XXH3_64bits_update(h, salt, strlen(salt));
    return XXH3_64bits_digest(h);
}

/* The hashes of request i's full hash blocks among its first `tokens`
 * tokens. */
void plan_hash_blocks(struct kv_plan *s, int64_t i, int64_t tokens)
{
    struct req *r = &s->reqs[i];
    int64_t full = tokens / s->hbs;
    if (full > (int64_t)s->hcols)
        full = (int64_t)s->hcols;
    for (; r->n_hashed < full; r->n_hashed++)
        s->rhash[(size_t)i * s->hcols + (size_t)r->n_hashed] =
            block_hash(s, i, r->n_hashed);
}

/* Request i's hash of block k of group g: the hash at the block's last
 * hash block (vLLM's BlockHashListWithBlockSize). */
static uint64_t group_hash(const struct kv_plan *s, int64_t i, size_t g,
                           int64_t k)
{
    int64_t m = plan_gbs(s, g) / s->hbs;
    return s->rhash[(size_t)i * s->hcols + (size_t)((k + 1) * m - 1)];
}

/* Cache request i's blocks that its first `upto` tokens fill, in every
 * group that keeps them: upto rounded down to lcm, then at most the whole
 * hash blocks of the tokens whose ids are known (vLLM's
 * get_num_cacheable_tokens and cache_blocks, group by group); then the
 * full-attention groups' partial entries. */
void plan_cache_upto(struct kv_plan *s, int64_t i, int64_t upto)
{
    struct req *r = &s->reqs[i];
    int64_t known = num_tokens(r) / s->hbs * s->hbs;
    int64_t to = upto / s->lcm * s->lcm;

    if (to > known)
        to = known;
    plan_hash_blocks(s, i, to);
    if (to / s->hbs > r->n_cached_blocks) {
        for (size_t g = 0; g < s->ng; g++) {
            int64_t k = plan_gcached(s, r, g), end = to / plan_gbs(s, g);
            const int64_t *row = plan_row(s, i, g);
            for (; k < end; k++) {
                int64_t b = row[k];
                if (b == 0 || s->hashed[b] || !plan_cacheable(s, i, g, k))
                    continue;
                cache_insert(s, b, group_hash(s, i, g, k), (int32_t)g);
                s->owner[b] = i * (int64_t)s->n_cols + k;
            }
        }
        r->n_cached_blocks = to / s->hbs;
    }
    if (s->hbs != s->lcm)
        plan_cache_partial(s, i, upto / s->lcm * s->lcm);
}

/* The prompt's tail entry in each full-attention group whose blocks are
 * longer than a hash block (vLLM's _cache_partial_tail_block): the hash
 * at the last hash-block boundary below the prompt's last token, when it
 * falls inside a block of the group and `to` (upto rounded down to lcm)
 * reaches it, kept on that block beside its own hash.  No lookup here
 * asks for it (a hit is lcm-aligned); it leaves the cache with the block. */
void plan_cache_partial(struct kv_plan *s, int64_t i, int64_t to)
{
    const struct req *r = &s->reqs[i];
    int64_t at = (r->prompt - 1) / s->hbs;

    if (at > num_tokens(r) / s->hbs)
        at = num_tokens(r) / s->hbs;
    at *= s->hbs;
    if (at == 0 || at > to)
        return;
    for (size_t g = 0; g < s->ng; g++) {
        int64_t bs = plan_gbs(s, g), k = at / bs, b;
        uint64_t h;
        if (s->gkind[g] != KV_PLAN_GROUP_FULL || bs == s->hbs || at % bs == 0 ||
            k >= plan_gblocks(s, r, g))
            continue;
        b = plan_row(s, i, g)[k];
        if (b == 0 || !s->hashed[b])
            continue;
        plan_hash_blocks(s, i, at);
        h = s->rhash[(size_t)i * s->hcols + (size_t)(at / s->hbs - 1)];
        if (!s->pmark[b]) {
            s->pmark[b] = 1;
            s->phash[b] = h;
        }
    }
}

/* After scheduling: cache request i's blocks that its computed and
 * scheduled tokens fill, at most its tokens whose ids are known
 * (allocate_slots' num_tokens_to_cache, before the rounding). */
void plan_cache_full_blocks(struct kv_plan *s, int64_t i)
{
    const struct req *r = &s->reqs[i];
    int64_t upto = r->computed + r->sched;
    plan_cache_upto(s, i, upto < num_tokens(r) ? upto : num_tokens(r));
}

/* Request i's block k in group g's cache: the block, or -1. */
int64_t plan_cached(struct kv_plan *s, int64_t i, size_t g, int64_t k)
{
    return cache_lookup(s, group_hash(s, i, g, k), (int32_t)g);
}

/* Whether request i's hash of block k in group g was cached in group g in
 * this step, by any block (vLLM's cached_blocks_this_step of a Mamba
 * group; needs s->mcstep).  No block cached in a step leaves the cache
 * before that step's admissions: only a preemption could free it, and a
 * step that preempts admits no one. */
int plan_cached_now(const struct kv_plan *s, int64_t i, size_t g, int64_t k)
{
    uint64_t h = group_hash(s, i, g, k);
    size_t mask = s->ht_cap - 1;

    for (size_t j = ht_slot(s, h, (int32_t)g); s->ht[j] >= 0; j = (j + 1) & mask) {
        int64_t b = s->ht[j];
        if (s->bhash[b] == h && s->bgroup[b] == (int32_t)g &&
            s->mcstep[b] == s->step)
            return 1;
    }
    return 0;
}

/* The error of a step where nothing can be scheduled: with nothing
 * running and a request refused its blocks, the pool is as free as it
 * gets and vLLM's scheduler would refuse it at every later step. */
int plan_stuck(const struct kv_plan *s, struct kv_err *e)
{
    if (s->n_running == 0 && s->n_blocked > 0) {
        int64_t id = s->o_blocked[0];
        const struct req *r = &s->reqs[id];
        int64_t t = num_tokens(r) < s->mml ? num_tokens(r) : s->mml;
        int64_t chunk = t < s->budget ? t : s->budget;
        int64_t a = plan_admit_need(s, id, t, 0, 1);
        int64_t b = plan_admit_need(s, id, chunk, 0, 0);
        if (s->admit_by_chunk || b > a)
            a = b;
        return kv_err_set(e, "request %lld needs %lld blocks at its peak "
                          "(%lld tokens), the pool has %lld (besides the "
                          "null block): it could never run", (long long)id,
                          (long long)a, (long long)t,
                          (long long)(s->num_blocks - 1));
    }
    return kv_err_set(e, "step %lld: nothing can be scheduled (%zu "
                      "waiting, %zu free blocks)", (long long)s->step,
                      s->waitq.len, plan_free_len(s));
}

/* Sum of the tokens every request has produced. */
static int64_t produced(const struct kv_plan *s)
{
    int64_t t = 0;
    for (size_t i = 0; i < s->n; i++)
        t += s->reqs[i].n_out;
    return t;
}

/* The trial run of a pool shorter than the bound on some request's held
 * blocks: to the end, or to the step where vLLM's scheduler could never
 * go on (nothing schedulable, or steps enough for every request to
 * recompute its whole length with no token produced: preemption without
 * end).  0 or -1 with that request's refusal. */
static int plan_trial(const struct kv_plan_config *c, struct kv_err *e)
{
    struct kv_plan *t;
    struct kv_plan_step st;
    int64_t k = 0, mark = 0, window;
    int rc = 0;

    if (plan_new(&t, c, e) < 0)
        return -1;
    window = (int64_t)t->n * (t->mml + 2) + 2;
    for (;;) {
        if (kv_plan_step(t, &st, e) < 0) {
            rc = -1;
            break;
        }
        if (st.all_done)
            break;
        if (++k % window == 0) {
            int64_t now = produced(t);
            if (now == mark) {
                int64_t id = t->n_running ? t->running[0]
                                          : ring_at(&t->waitq, 0);
                const struct req *r = &t->reqs[id];
                int64_t n = num_tokens(r) < t->mml ? num_tokens(r) : t->mml;
                int64_t need = plan_admit_need(t, id, n, 0, 1);
                /* the admission count can fit the pool while a window
                 * or chunk that straddles a block needs one more */
                if (need > t->num_blocks - 1)
                    rc = kv_err_set(e, "request %lld needs %lld blocks at "
                                    "its peak (%lld tokens), the pool has "
                                    "%lld (besides the null block): it "
                                    "would be preempted without end",
                                    (long long)id, (long long)need,
                                    (long long)n,
                                    (long long)(t->num_blocks - 1));
                else
                    rc = kv_err_set(e, "request %lld needs more blocks at "
                                    "its peak (%lld tokens) than the "
                                    "pool's %lld (besides the null "
                                    "block): it would be preempted "
                                    "without end",
                                    (long long)id, (long long)n,
                                    (long long)(t->num_blocks - 1));
                break;
            }
            mark = now;
        }
    }
    kv_plan_free(t);
    return rc;
}

int kv_plan_new(struct kv_plan **out, const struct kv_plan_config *c,
                struct kv_err *e)
{
    if (plan_new(out, c, e) < 0)
        return -1;
    if ((*out)->short_req && plan_trial(c, e) < 0) {
        kv_plan_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}
