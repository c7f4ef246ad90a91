/* map.c - the content keys of the simulator (kv_sim_mix, kv_sim_key_id,
 * kv_sim_key_tokens), the open-addressing map from 64-bit keys every cache
 * and the conversations use, and the growth helper for their arrays. */
#include "sim/internal.h"

/* ---- small helpers ----------------------------------------------------- */

uint64_t kv_sim_mix(uint64_t a, uint64_t b)
{
    uint64_t v[2] = { a, b };
    uint64_t h = XXH3_64bits(v, sizeof v);
    return h ? h : 1;
}

uint64_t kv_sim_key_id(const char *id, size_t n, int64_t len)
{
    uint64_t h = XXH3_64bits_withSeed(id, n, 0x6b7673696d6964ULL);
    return kv_sim_mix(h, (uint64_t)len);
}

uint64_t kv_sim_key_tokens(const int32_t *tok, size_t n)
{
    /* int32 little-endian token ids, as kvchunk keys serialise them. */
    uint64_t h = XXH3_64bits_withSeed(tok, n * sizeof *tok,
                                      0x6b7673696d746bULL);
    return kv_sim_mix(h, (uint64_t)n);
}

void sim_map_release(struct map *m)
{
    free(m->s);
    memset(m, 0, sizeof *m);
}

static int sim_map_grow(struct map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    struct slot *ns;
    if (ncap > SIZE_MAX / 2 / sizeof *ns || !(ns = calloc(ncap, sizeof *ns)))
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->s[i].key)
            continue;
        size_t j = m->s[i].key & (ncap - 1);
        while (ns[j].key)
            j = (j + 1) & (ncap - 1);
        ns[j] = m->s[i];
    }
    free(m->s);
    m->s = ns;
    m->cap = ncap;
    return 0;
}

/* Make room for one more key (call before sim_map_slot when inserting). */
static int sim_map_reserve(struct map *m)
{
    if ((m->n + 1) * 10 > m->cap * 7)
        return sim_map_grow(m);
    return 0;
}

/* Slot of key k, or of the empty slot where it would go (cap > 0). */
static size_t sim_map_slot(const struct map *m, uint64_t k)
{
    size_t j = k & (m->cap - 1);
    while (m->s[j].key && m->s[j].key != k)
        j = (j + 1) & (m->cap - 1);
    return j;
}

int64_t sim_map_get(const struct map *m, uint64_t k)
{
    if (!m->cap)
        return -1;
    size_t j = sim_map_slot(m, k);
    return m->s[j].key ? (int64_t)m->s[j].val : -1;
}

/* Insert or overwrite. */
int sim_map_put(struct map *m, uint64_t k, uint32_t v)
{
    if (sim_map_reserve(m) < 0)
        return -1;
    size_t j = sim_map_slot(m, k);
    if (!m->s[j].key) {
        m->s[j].key = k;
        m->n++;
    }
    m->s[j].val = v;
    return 0;
}

/* Empty slot j (which holds a key). */
static void sim_map_del_slot(struct map *m, size_t j)
{
    size_t mask = m->cap - 1;
    m->s[j].key = 0;
    m->n--;
    /* Shift back the entries of the probe run that follows the hole. */
    for (size_t i = (j + 1) & mask; m->s[i].key; i = (i + 1) & mask) {
        size_t home = m->s[i].key & mask;
        /* Can the entry at i move to j?  Only if its home is not in (j, i]. */
        int between = j <= i ? (home > j && home <= i)
                             : (home > j || home <= i);
        if (!between) {
            m->s[j] = m->s[i];
            m->s[i].key = 0;
            j = i;
        }
    }
}

void sim_map_del(struct map *m, uint64_t k)
{
    if (!m->cap)
        return;
    size_t j = sim_map_slot(m, k);
    if (m->s[j].key)
        sim_map_del_slot(m, j);
}

size_t sim_map_mem(const struct map *m)
{
    return m->cap * sizeof *m->s;
}

/* Grow a buffer to hold at least n elements of size sz. */
int sim_grow(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < n) {
        if (ncap > SIZE_MAX / 2 / sz)
            return -1;
        ncap *= 2;
    }
    void *q = realloc(*p, ncap * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = ncap;
    return 0;
}
