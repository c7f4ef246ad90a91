/* prefix.c - the prefix cache policy, vLLM automatic prefix caching:
 * block hashes chained over full blocks, the LRU free queue, tail-first
 * freeing, at a byte budget; prefix-lfu evicts from a heap on use counts
 * instead of the queue (prefix_lfu.c). */
#include "sim/internal.h"

/* ---- prefix caching (vLLM APC) ----------------------------------------- */

static size_t pm_home(const struct pmap *m, uint64_t word)
{
    return (size_t)(word >> 32) & (m->cap - 1);
}

static void pm_prefetch(const struct pmap *m, uint64_t h)
{
    if (m->cap)
        __builtin_prefetch(&m->s[(size_t)(h >> 32) & (m->cap - 1)]);
}

static int pm_reserve(struct pmap *m)
{
    if ((m->n + 1) * 4 <= m->cap)
        return 0;
    size_t ncap = m->cap ? m->cap * 2 : 4096;
    uint64_t *ns;
    if (ncap > SIZE_MAX / 2 / sizeof *ns || !(ns = calloc(ncap, sizeof *ns)))
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t w = m->s[i];
        if (!w)
            continue;
        size_t j = (size_t)(w >> 32) & (ncap - 1);
        while (ns[j])
            j = (j + 1) & (ncap - 1);
        ns[j] = w;
    }
    free(m->s);
    m->s = ns;
    m->cap = ncap;
    return 0;
}

static void pm_del_slot(struct pmap *m, size_t j)
{
    size_t mask = m->cap - 1;
    m->s[j] = 0;
    m->n--;
    for (size_t i = (j + 1) & mask; m->s[i]; i = (i + 1) & mask) {
        size_t home = pm_home(m, m->s[i]);
        /* Can the entry at i move to j?  Only if its home is not in (j, i]. */
        int between = j <= i ? (home > j && home <= i)
                             : (home > j || home <= i);
        if (!between) {
            m->s[j] = m->s[i];
            m->s[i] = 0;
            j = i;
        }
    }
}

static int q_live(const struct prefix *p, size_t i)
{
    return p->blk[p->q[i].id].stamp == p->q[i].stamp;
}

/* Take block x out of the free queue, if it is there. */
static void q_remove(struct prefix *p, int32_t x)
{
    p->blk[x].stamp++;
}

static int q_append(struct prefix *p, int32_t x)
{
    if (p->lfu)
        return sim_lfu_push(p, x);
    if (p->qt == p->cap_q) {
        /* compact: keep the live entries, in order */
        size_t n = 0;
        for (size_t i = p->qh; i < p->qt; i++)
            if (q_live(p, i))
                p->q[n++] = p->q[i];
        p->qh = 0;
        p->qt = n;
        if (n * 2 >= p->cap_q &&
            sim_grow((void **)&p->q, &p->cap_q, p->cap_q + 1, sizeof *p->q) < 0)
            return -1;
    }
    p->q[p->qt++] = (struct qent){ x, ++p->blk[x].stamp };
    return 0;
}

/* Pop the head of the free queue: a block id, or -1 when it is empty.
 * Fetches the blocks and map slots of the entries ahead. */
static int32_t q_pop(struct prefix *p)
{
    if (p->lfu)
        return sim_lfu_pop(p);
    while (p->qh < p->qt) {
        if (p->qh + 16 < p->qt)
            __builtin_prefetch(&p->blk[p->q[p->qh + 16].id]);
        if (p->qh + 8 < p->qt) {
            uint64_t h = p->blk[p->q[p->qh + 8].id].hash;
            if (h)
                pm_prefetch(&p->map, h);
        }
        size_t i = p->qh++;
        if (q_live(p, i)) {
            int32_t x = p->q[i].id;
            p->blk[x].stamp++;
            return x;
        }
    }
    return -1;
}

/* The first block holding hash h, or -1. */
static int64_t pm_find(const struct prefix *p, uint64_t h)
{
    const struct pmap *m = &p->map;
    if (!m->cap)
        return -1;
    uint64_t fp = h >> 32;
    for (size_t j = (size_t)fp & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
        uint64_t w = m->s[j];
        if (!w)
            return -1;
        if ((w >> 32) == fp) {
            int64_t x = (int64_t)(uint32_t)w - 1;
            if (p->blk[x].hash == h)
                return x;
        }
    }
}

/* Drop block x's hash from the map (it is being reused). */
static void uncache(struct prefix *p, int32_t x)
{
    struct pmap *m = &p->map;
    uint64_t h = p->blk[x].hash;
    uint64_t fp = h >> 32, want = fp << 32 | (uint64_t)(x + 1);
    size_t j = (size_t)fp & (m->cap - 1);
    while (m->s[j] && m->s[j] != want)
        j = (j + 1) & (m->cap - 1);
    if (m->s[j]) {
        /* x is the first block with h */
        if (p->blk[x].dup >= 0)
            m->s[j] = fp << 32 | (uint64_t)(p->blk[x].dup + 1);
        else
            pm_del_slot(m, j);
    } else {
        int64_t y = pm_find(p, h);
        assert(y >= 0);
        while (p->blk[y].dup != x)
            y = p->blk[y].dup;
        p->blk[y].dup = p->blk[x].dup;
    }
    p->blk[x].hash = 0;
    p->blk[x].dup = -1;
}

/* Take a block for new content: a never used one while the pool has them,
 * else the head of the free queue (evicting what it caches).  -1 when
 * every block is held by the current request. */
static int32_t alloc_block(struct prefix *p, struct kv_err *e, int *fail)
{
    if ((int64_t)p->n_made < p->n_pool) {
        if (p->n_made >= INT32_MAX - 1) {
            *fail = kv_err_set(e, "prefix cache pool of more than 2^31 "
                               "blocks");
            return -1;
        }
        if (sim_grow((void **)&p->blk, &p->cap_blk, p->n_made + 1,
                     sizeof *p->blk) < 0) {
            *fail = kv_err_set(e, "out of memory");
            return -1;
        }
        if (p->lfu && sim_grow((void **)&p->uses, &p->cap_uses,
                               p->n_made + 1, sizeof *p->uses) < 0) {
            *fail = kv_err_set(e, "out of memory");
            return -1;
        }
        int32_t x = (int32_t)p->n_made++;
        p->blk[x] = (struct pblock){ 0, -1, 0 };
        if (p->lfu)
            p->uses[x] = 1;
        return x;
    }
    int32_t x = q_pop(p);
    if (x < 0)
        return -1;
    if (p->blk[x].hash) {
        uncache(p, x);
        p->st.evictions++;
        p->st.evicted_tokens += (uint64_t)p->B;
    }
    if (p->lfu)
        p->uses[x] = 1;
    return x;
}

static int insert_hash(struct prefix *p, int32_t x, uint64_t h)
{
    struct pmap *m = &p->map;
    if (pm_reserve(m) < 0)
        return -1;
    uint64_t fp = h >> 32;
    size_t j = (size_t)fp & (m->cap - 1);
    int64_t y = -1;
    for (;; j = (j + 1) & (m->cap - 1)) {
        uint64_t w = m->s[j];
        if (!w)
            break;
        if ((w >> 32) == fp && p->blk[(uint32_t)w - 1].hash == h) {
            y = (int64_t)(uint32_t)w - 1;
            break;
        }
    }
    p->blk[x].hash = h;
    p->blk[x].dup = -1;
    if (y < 0) {
        m->s[j] = fp << 32 | (uint64_t)(x + 1);
        m->n++;
        return 0;
    }
    /* Not de-duplicated: keep it behind the first one. */
    while (p->blk[y].dup >= 0)
        y = p->blk[y].dup;
    p->blk[y].dup = x;
    return 0;
}

/* Hashes of the first n_full full blocks of the segment list, chained from
 * the seed (vLLM's NONE_HASH, or the tenant salt on the first block). */
static int block_hashes(struct prefix *p, const struct kv_sim_seg *seg,
                        size_t n_seg, int64_t n_full, uint64_t seed,
                        struct kv_err *e)
{
    if (sim_grow((void **)&p->hashes, &p->cap_hashes, (size_t)n_full + 1,
                 sizeof *p->hashes) < 0 ||
        sim_grow((void **)&p->buf, &p->cap_buf, 8 + 16 * (size_t)p->B + 16, 1) < 0)
        return kv_err_set(e, "out of memory");
    uint64_t parent = seed;
    size_t si = 0;
    int64_t off = 0;       /* offset inside seg[si] */
    for (int64_t b = 0; b < n_full; b++) {
        unsigned char *w = p->buf;
        memcpy(w, &parent, 8);
        w += 8;
        int64_t need = p->B;
        while (need > 0) {
            while (seg[si].len - off == 0) {
                si++;
                off = 0;
            }
            assert(si < n_seg);
            int64_t take = seg[si].len - off;
            if (take > need)
                take = need;
            uint64_t run = ((uint64_t)off << 32) | (uint64_t)take;
            memcpy(w, &seg[si].key, 8);
            memcpy(w + 8, &run, 8);
            w += 16;
            off += take;
            need -= take;
        }
        uint64_t h = XXH3_64bits(p->buf, (size_t)(w - p->buf));
        parent = h ? h : 1;
        p->hashes[b] = parent;
    }
    (void)n_seg;
    return 0;
}

/* Replay one request: seg[0..n_seg) is the prompt followed by the output
 * segment (out_len tokens).  Fills the counters and returns the prefix hit
 * length in tokens (or -1 on failure). */
int64_t sim_prefix_feed(struct prefix *p, const struct kv_sim_seg *seg,
                        size_t n_seg, int64_t n_prompt, int64_t out_len,
                        uint64_t salt, struct kv_err *e)
{
    int64_t B = p->B;
    int64_t kv = n_prompt + (out_len > 0 ? out_len - 1 : 0);
    int64_t n_full = kv / B, need = (kv + B - 1) / B;
    if (n_prompt == 0)
        return 0;
    if (block_hashes(p, seg, n_seg, n_full, salt ? salt : 0x4e4f4e45ULL,
                     e) < 0)
        return -1;
    if (sim_grow((void **)&p->held, &p->cap_held, (size_t)need + 1,
                 sizeof *p->held) < 0)
        return kv_err_set(e, "out of memory");
    int64_t max_hit = (n_prompt - 1) / B, hits = 0;
    for (int64_t b = 0; b < max_hit && b < 8; b++)
        pm_prefetch(&p->map, p->hashes[b]);
    while (hits < max_hit) {
        if (hits + 8 < max_hit)
            pm_prefetch(&p->map, p->hashes[hits + 8]);
        int64_t x = pm_find(p, p->hashes[hits]);
        if (x < 0)
            break;
        q_remove(p, (int32_t)x);     /* touch */
        if (p->lfu && p->uses[x] < UINT32_MAX)
            p->uses[x]++;
        p->held[hits++] = (int32_t)x;
    }
    int64_t n_held = hits;
    for (int64_t b = hits; b < need; b++) {
        int fail = 0;
        if (b + 8 < n_full)
            pm_prefetch(&p->map, p->hashes[b + 8]);
        int32_t x = alloc_block(p, e, &fail);
        if (fail)
            return -1;
        if (x < 0)
            break;      /* the request is longer than the pool */
        if (b < n_full) {
            if (insert_hash(p, x, p->hashes[b]) < 0)
                return kv_err_set(e, "out of memory");
            p->st.stored_tokens += (uint64_t)B;
        }
        p->held[n_held++] = x;
    }
    /* Free the request's blocks tail first. */
    for (int64_t i = n_held; i-- > 0;)
        if (q_append(p, p->held[i]) < 0)
            return kv_err_set(e, "out of memory");
    if (p->map.n > p->st.entries_max)
        p->st.entries_max = p->map.n;
    return hits * B;
}

void sim_prefix_release(struct prefix *p)
{
    free(p->blk);
    free(p->q);
    free(p->map.s);
    free(p->held);
    free(p->hashes);
    free(p->buf);
    free(p->uses);
    free(p->heap);
}
