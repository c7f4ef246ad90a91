/* radix.c - the radix prefix cache policy, SGLang RadixAttention: a
 * token-granular radix tree evicted leaf by leaf, least recently used first. */
#include "sim/internal.h"

/* ---- radix prefix caching (SGLang RadixAttention) ------------------------
 *
 * A token-granular radix tree of cached sequences.  An edge is a list of
 * runs (content key, offset, length); token t of a run is (key, offset + t),
 * so two edges share a token exactly when key and position agree.  A
 * request matches the longest cached prefix of its first n - 1 tokens
 * (splitting the edge where the match ends), locks that path, evicts
 * unlocked leaves least recently used first until its new tokens fit the
 * budget, and then inserts its prompt and output (all but the last output
 * token, whose KV is never computed).  Leaves are evicted whole. */

static uint64_t rx_child_key(int32_t parent, uint64_t key, int64_t off,
                             uint64_t salt)
{
    if (parent == 0 && salt)   /* tenants never share a tree */
        key = kv_sim_mix(key, salt);
    return kv_sim_mix(kv_sim_mix((uint64_t)parent + 1, key), (uint64_t)off);
}

/* The child-map key of node id. */
static uint64_t rx_key_of(const struct radix *r, int32_t id)
{
    const struct rnode *x = &r->node[id];
    return rx_child_key(x->parent, x->run[0].key, x->run[0].off, x->salt);
}

static int rx_heap_less(const struct rheap *a, const struct rheap *b)
{
    return a->last != b->last ? a->last < b->last : a->id < b->id;
}

static int rx_push(struct radix *r, int32_t id)
{
    if (sim_grow((void **)&r->heap, &r->cap_heap, r->n_heap + 1,
                 sizeof *r->heap) < 0)
        return -1;
    size_t i = r->n_heap++;
    struct rheap x = { r->node[id].last, id, r->node[id].version };
    while (i > 0 && rx_heap_less(&x, &r->heap[(i - 1) / 2])) {
        r->heap[i] = r->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = x;
    return 0;
}

static struct rheap rx_pop(struct radix *r)
{
    struct rheap top = r->heap[0], x = r->heap[--r->n_heap];
    size_t i = 0, n = r->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && rx_heap_less(&r->heap[c + 1], &r->heap[c]))
            c++;
        if (!rx_heap_less(&r->heap[c], &x))
            break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n)
        r->heap[i] = x;
    return top;
}

static int rx_evictable(const struct radix *r, int32_t id)
{
    const struct rnode *x = &r->node[id];
    return id != 0 && x->alive && x->n_children == 0 && x->lock == 0;
}

/* A new node (runs not set); -1 when out of memory. */
static int32_t rx_new(struct radix *r)
{
    int32_t id;
    if (r->n_free) {
        id = r->free_ids[--r->n_free];
    } else {
        if (r->n_node >= INT32_MAX - 1 ||
            sim_grow((void **)&r->node, &r->cap_node, r->n_node + 1,
                     sizeof *r->node) < 0)
            return -1;
        id = (int32_t)r->n_node++;
        r->node[id].version = 0;
    }
    uint32_t v = r->node[id].version;
    memset(&r->node[id], 0, sizeof r->node[id]);
    r->node[id].version = v;
    r->node[id].alive = 1;
    r->n_alive++;
    if (r->n_alive > r->st.entries_max)
        r->st.entries_max = r->n_alive;
    return id;
}

int sim_rx_init(struct radix *r, int64_t cap)
{
    memset(r, 0, sizeof *r);
    r->cap = cap;
    int32_t root = rx_new(r);
    if (root < 0)
        return -1;
    r->node[root].parent = -1;
    r->n_alive = 0;
    r->st.entries_max = 0;
    return 0;
}

void sim_rx_release(struct radix *r)
{
    for (size_t i = 0; i < r->n_node; i++)
        free(r->node[i].run);
    free(r->node);
    free(r->free_ids);
    sim_map_release(&r->child);
    free(r->heap);
    free(r->path);
    free(r->req);
}

/* Tokens node c's edge shares with the request from cursor (*ri, *ro),
 * at most limit; the cursor moves past them. */
static int64_t rx_common(const struct radix *r, const struct rnode *c,
                         size_t *ri, int64_t *ro, int64_t limit)
{
    int64_t m = 0, eo = 0;
    int32_t ei = 0;
    while (m < limit && ei < c->n_run && *ri < r->n_req) {
        const struct rrun *E = &c->run[ei], *R = &r->req[*ri];
        if (E->key != R->key || E->off + eo != R->off + *ro)
            break;
        int64_t take = E->len - eo;
        if (R->len - *ro < take)
            take = R->len - *ro;
        if (limit - m < take)
            take = limit - m;
        m += take;
        eo += take;
        *ro += take;
        if (eo == E->len) {
            ei++;
            eo = 0;
        }
        if (*ro == R->len) {
            (*ri)++;
            *ro = 0;
        }
    }
    return m;
}

/* Split node c after m tokens (0 < m < len): a new node takes the first m
 * tokens and becomes c's parent.  Returns it, or -1. */
static int32_t rx_split(struct radix *r, int32_t c, int64_t m)
{
    int32_t mid = rx_new(r);
    if (mid < 0)
        return -1;
    struct rnode *C = &r->node[c], *M = &r->node[mid];
    /* runs of the first m tokens */
    int32_t k = 0;
    int64_t acc = 0;
    while (acc + C->run[k].len <= m)
        acc += C->run[k++].len;
    int32_t n_first = k + (acc < m);
    M->run = malloc((size_t)n_first * sizeof *M->run);
    if (!M->run)
        return -1;
    memcpy(M->run, C->run, (size_t)n_first * sizeof *M->run);
    M->n_run = n_first;
    if (acc < m)
        M->run[k].len = m - acc;
    /* c keeps the rest */
    struct rrun *rest = C->run + k;
    int32_t n_rest = C->n_run - k;
    if (acc < m) {
        rest[0].off += m - acc;
        rest[0].len -= m - acc;
    }
    memmove(C->run, rest, (size_t)n_rest * sizeof *C->run);
    C->n_run = n_rest;
    M->parent = C->parent;
    M->salt = C->salt;
    M->len = m;
    M->last = C->last;
    M->lock = C->lock;
    M->n_children = 1;
    C->len -= m;
    C->parent = mid;
    C->salt = 0;
    if (sim_map_put(&r->child, rx_key_of(r, mid), (uint32_t)mid) < 0 ||
        sim_map_put(&r->child, rx_key_of(r, c), (uint32_t)c) < 0)
        return -1;
    return mid;
}

/* Evict unlocked leaves, least recently used first, until need more tokens
 * fit (or nothing is left to evict). */
static int rx_evict(struct radix *r, int64_t need)
{
    while (r->size + need > r->cap && r->n_heap) {
        struct rheap h = rx_pop(r);
        struct rnode *x = &r->node[h.id];
        if (!rx_evictable(r, h.id) || x->version != h.version ||
            x->last != h.last)
            continue;
        int32_t parent = x->parent;
        sim_map_del(&r->child, rx_key_of(r, h.id));
        r->node[parent].n_children--;
        r->size -= x->len;
        r->st.evictions++;
        r->st.evicted_tokens += (uint64_t)x->len;
        free(x->run);
        x->run = NULL;
        x->alive = 0;
        x->version++;
        r->n_alive--;
        if (sim_grow((void **)&r->free_ids, &r->cap_free, r->n_free + 1,
                     sizeof *r->free_ids) < 0)
            return -1;
        r->free_ids[r->n_free++] = h.id;
        if (rx_evictable(r, parent) && rx_push(r, parent) < 0)
            return -1;
    }
    /* Stale heap entries pile up with every access: rebuild now and then. */
    if (r->n_heap > 4 * r->n_alive + 1024) {
        r->n_heap = 0;
        for (size_t i = 1; i < r->n_node; i++)
            if (rx_evictable(r, (int32_t)i) && rx_push(r, (int32_t)i) < 0)
                return -1;
    }
    return 0;
}

/* Replay one request (prompt then output segment); returns the hit length
 * or -1. */
int64_t sim_radix_feed(struct radix *r, const struct kv_sim_seg *seg,
                       size_t n_seg, int64_t n_prompt, int64_t out_len,
                       uint64_t salt, struct kv_err *e)
{
    uint64_t now = ++r->clock;
    int64_t kv = n_prompt + (out_len > 0 ? out_len - 1 : 0);
    if (n_prompt == 0)
        return 0;
    /* the request as runs */
    r->n_req = 0;
    if (sim_grow((void **)&r->req, &r->cap_req, n_seg + 1, sizeof *r->req) < 0)
        return kv_err_set(e, "out of memory");
    for (size_t i = 0; i < n_seg; i++)
        if (seg[i].len)
            r->req[r->n_req++] = (struct rrun){ seg[i].key, 0, seg[i].len };
    /* match the first n - 1 tokens */
    int32_t node = 0;
    int64_t pos = 0, limit = n_prompt - 1, ro = 0;
    size_t ri = 0;
    r->n_path = 0;
    for (;;) {
        if (sim_grow((void **)&r->path, &r->cap_path, r->n_path + 1,
                     sizeof *r->path) < 0)
            return kv_err_set(e, "out of memory");
        r->path[r->n_path++] = node;
        if (pos >= limit || ri >= r->n_req)
            break;
        int64_t c = sim_map_get(&r->child, rx_child_key(node, r->req[ri].key,
                                                    r->req[ri].off + ro,
                                                    salt));
        if (c < 0)
            break;
        int64_t m = rx_common(r, &r->node[c], &ri, &ro, limit - pos);
        if (m <= 0)
            break;
        if (m < r->node[c].len && (c = rx_split(r, (int32_t)c, m)) < 0)
            return kv_err_set(e, "out of memory");
        node = (int32_t)c;
        pos += m;
        if (m < r->node[c].len)
            break;
    }
    int64_t hit = pos;
    for (size_t i = 0; i < r->n_path; i++) {
        r->node[r->path[i]].last = now;
        r->node[r->path[i]].lock++;
    }
    /* room for the new tokens */
    if (rx_evict(r, kv - hit) < 0)
        return kv_err_set(e, "out of memory");
    /* insert [0, kv) */
    node = 0;
    pos = 0;
    ri = 0;
    ro = 0;
    while (pos < kv && ri < r->n_req) {
        int64_t c = sim_map_get(&r->child, rx_child_key(node, r->req[ri].key,
                                                    r->req[ri].off + ro,
                                                    salt));
        if (c < 0) {
            int64_t len = kv - pos, room = r->cap - r->size;
            if (len > room)
                len = room;
            if (len <= 0)
                break;
            int32_t leaf = rx_new(r);
            if (leaf < 0)
                return kv_err_set(e, "out of memory");
            struct rnode *L = &r->node[leaf];
            /* runs from the cursor, len tokens */
            size_t n = 0;
            int64_t left = len;
            for (size_t i = ri; i < r->n_req && left > 0; i++, n++)
                left -= r->req[i].len - (i == ri ? ro : 0);
            L->run = malloc(n * sizeof *L->run);
            if (!L->run)
                return kv_err_set(e, "out of memory");
            left = len;
            for (size_t i = 0; i < n; i++) {
                const struct rrun *R = &r->req[ri + i];
                int64_t off = R->off + (i == 0 ? ro : 0);
                int64_t take = R->len - (i == 0 ? ro : 0);
                if (take > left)
                    take = left;
                L->run[i] = (struct rrun){ R->key, off, take };
                left -= take;
            }
            L->n_run = (int32_t)n;
            L->len = len;
            L->parent = node;
            L->salt = node == 0 ? salt : 0;
            L->last = now;
            r->node[node].n_children++;
            if (sim_map_put(&r->child, rx_key_of(r, leaf), (uint32_t)leaf) < 0 ||
                rx_push(r, leaf) < 0)
                return kv_err_set(e, "out of memory");
            r->size += len;
            r->st.stored_tokens += (uint64_t)len;
            break;
        }
        int64_t m = rx_common(r, &r->node[c], &ri, &ro, kv - pos);
        if (m <= 0)
            break;
        if (m < r->node[c].len && (c = rx_split(r, (int32_t)c, m)) < 0)
            return kv_err_set(e, "out of memory");
        r->node[c].last = now;
        if (rx_evictable(r, (int32_t)c) && rx_push(r, (int32_t)c) < 0)
            return kv_err_set(e, "out of memory");
        node = (int32_t)c;
        pos += m;
    }
    for (size_t i = 0; i < r->n_path; i++) {
        int32_t x = r->path[i];
        r->node[x].lock--;
        if (rx_evictable(r, x) && rx_push(r, x) < 0)
            return kv_err_set(e, "out of memory");
    }
    return hit;
}
