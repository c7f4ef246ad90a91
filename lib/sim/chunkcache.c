/* chunkcache.c - the chunk cache policy (kvchunk): whole chunks keyed by
 * content, the system prompt as a prefix, conversations, evicted LRU or
 * LFU by bytes; also the infinite (oracle) cache. */
#include "sim/internal.h"

/* ---- chunk cache (kvchunk) ----------------------------------------------- */

static int lfu_less(const struct ccache *c, int32_t a, int32_t b)
{
    if (c->e[a].uses != c->e[b].uses)
        return c->e[a].uses < c->e[b].uses;
    return c->e[a].last < c->e[b].last;
}

static void heap_set(struct ccache *c, size_t i, int32_t x)
{
    c->heap[i] = x;
    c->e[x].prev = (int32_t)i;
}

static void heap_down(struct ccache *c, size_t i)
{
    int32_t x = c->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        int32_t best = x;
        if (l < c->n_heap && lfu_less(c, c->heap[l], best))
            m = l, best = c->heap[l];
        if (l + 1 < c->n_heap && lfu_less(c, c->heap[l + 1], best))
            m = l + 1, best = c->heap[l + 1];
        if (m == i)
            break;
        heap_set(c, i, best);
        i = m;
    }
    heap_set(c, i, x);
}

static void heap_up(struct ccache *c, size_t i)
{
    int32_t x = c->heap[i];
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!lfu_less(c, x, c->heap[par]))
            break;
        heap_set(c, i, c->heap[par]);
        i = par;
    }
    heap_set(c, i, x);
}

static void lru_unlink(struct ccache *c, int32_t x)
{
    struct centry *t = &c->e[x];
    if (t->prev >= 0)
        c->e[t->prev].next = t->next;
    else
        c->head = t->next;
    if (t->next >= 0)
        c->e[t->next].prev = t->prev;
    else
        c->tail = t->prev;
}

static void lru_push_front(struct ccache *c, int32_t x)
{
    struct centry *t = &c->e[x];
    t->prev = -1;
    t->next = c->head;
    if (c->head >= 0)
        c->e[c->head].prev = x;
    else
        c->tail = x;
    c->head = x;
}

/* Look key up; on a hit mark it used and return its id, else -1. */
int32_t sim_cc_lookup(struct ccache *c, uint64_t key)
{
    int64_t x = sim_map_get(&c->map, key);
    if (x < 0)
        return -1;
    c->e[x].uses++;
    c->e[x].last = ++c->clock;
    if (c->lfu) {
        heap_down(c, (size_t)c->e[x].prev);
    } else if (c->head != x) {
        lru_unlink(c, (int32_t)x);
        lru_push_front(c, (int32_t)x);
    }
    return (int32_t)x;
}

static void cc_evict_one(struct ccache *c)
{
    int32_t x;
    if (c->lfu) {
        x = c->heap[0];
        c->n_heap--;
        if (c->n_heap) {
            heap_set(c, 0, c->heap[c->n_heap]);
            heap_down(c, 0);
        }
    } else {
        x = c->tail;
        lru_unlink(c, x);
    }
    sim_map_del(&c->map, c->e[x].key);
    c->used -= c->e[x].len;
    c->st.evictions++;
    c->st.evicted_tokens += (uint64_t)c->e[x].len;
    c->free_ids[c->n_free++] = x;
}

/* Store an entry of len tokens computed at p0 (the key is not resident),
 * evicting until it fits the tokens and the entry limit.  An entry larger
 * than the whole cache is not stored. */
int sim_cc_insert(struct ccache *c, uint64_t key, int64_t len, int64_t p0,
                  struct kv_err *e)
{
    if (len <= 0 || len > c->cap)
        return 0;
    while (c->used + len > c->cap ||
           (c->max_n && (int64_t)c->map.n >= c->max_n))
        cc_evict_one(c);
    int32_t x;
    if (c->n_free) {
        x = c->free_ids[--c->n_free];
    } else {
        if (c->n >= INT32_MAX - 1)
            return kv_err_set(e, "more than 2^31 cache entries");
        if (sim_grow((void **)&c->e, &c->cap_e, c->n + 1, sizeof *c->e) < 0 ||
            sim_grow((void **)&c->free_ids, &c->cap_free, c->n + 1,
                     sizeof *c->free_ids) < 0 ||
            (c->lfu && sim_grow((void **)&c->heap, &c->cap_heap, c->n + 1,
                                sizeof *c->heap) < 0))
            return kv_err_set(e, "out of memory");
        x = (int32_t)c->n++;
    }
    c->e[x] = (struct centry){ key, len, p0, 1, ++c->clock, -1, -1 };
    if (sim_map_put(&c->map, key, (uint32_t)x) < 0)
        return kv_err_set(e, "out of memory");
    if (c->lfu) {
        c->heap[c->n_heap] = x;
        c->e[x].prev = (int32_t)c->n_heap;
        c->n_heap++;
        heap_up(c, c->n_heap - 1);
    } else {
        lru_push_front(c, x);
    }
    c->used += len;
    c->st.stored_tokens += (uint64_t)len;
    if (c->map.n > c->st.entries_max)
        c->st.entries_max = c->map.n;
    return 0;
}

void sim_cc_release(struct ccache *c)
{
    free(c->e);
    free(c->free_ids);
    free(c->heap);
    sim_map_release(&c->map);
}

size_t sim_cc_mem(const struct ccache *c)
{
    return c->cap_e * sizeof *c->e + c->cap_free * sizeof *c->free_ids +
           c->cap_heap * sizeof *c->heap + sim_map_mem(&c->map);
}
