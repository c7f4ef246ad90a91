/* groups_packed.c - the KV-cache groups of a block-outermost layout, as
 * vLLM 0.33.0 packs them (_get_packed_kv_cache_groups,
 * vllm/v1/core/kv_cache_planning.py).  A block then holds every layer of
 * a group side by side, so layers of different page sizes share a group
 * and no page is grown or padded:
 *   1. buckets: each spec joins the first bucket it is of a uniform type
 *      with (UniformTypeKVCacheSpecs.is_uniform_type), else opens one;
 *   2. within a bucket, its layers by page size (in order of first use);
 *      a bucket is balanced when every page size has as many layers;
 *   3. the repeats per group: the largest layer count of a balanced
 *      bucket with several page sizes is the floor, the count of
 *      _approximate_gcd over the balanced buckets' counts the choice;
 *   4. a balanced bucket splits into cdiv(count, repeats) groups, repeat r
 *      to group r mod groups; a state bucket (Mamba; a sliding window
 *      when nothing repeats) into as many as it takes for each to fit the
 *      widest block of the others; every other bucket stays whole.
 * Every group is a UniformTypeKVCacheSpecs: its page is the sum of its
 * layers'. */
#include "slot/groups_impl.h"

#include <stdlib.h>
#include <string.h>

struct bucket {
    size_t n;                 /* specs in it */
    size_t *idx;              /* [n] in order of arrival */
    size_t n_pages;           /* distinct page sizes */
    int64_t *page;            /* [n_pages] in order of first use */
    size_t *count;            /* [n_pages] layers of each */
    size_t most;              /* get_max_layers_per_page_size */
    int balanced;
};

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* _approximate_gcd: the d in [lb, max] that pads the values least when
 * each is rounded up to a multiple of d, the larger on a tie. */
static int64_t approximate_gcd(const int64_t *v, size_t n, int64_t lb)
{
    int64_t max = 0, best = lb < 1 ? 1 : lb, best_pad = -1;
    for (size_t i = 0; i < n; i++)
        if (v[i] > max)
            max = v[i];
    for (int64_t d = best; d <= max; d++) {
        int64_t pad = 0;
        for (size_t i = 0; i < n; i++)
            pad += (d - v[i] % d) % d;
        if (best_pad < 0 || pad <= best_pad) {
            best_pad = pad;
            best = d;
        }
    }
    return best;
}

/* The bytes of the widest of the k groups bucket b splits into. */
static int64_t widest(const struct bucket *b, int64_t k)
{
    int64_t sum = 0;
    for (size_t p = 0; p < b->n_pages; p++)
        sum += cdiv((int64_t)b->count[p], k) * b->page[p];
    return sum;
}

/* The index of bucket b's r-th spec of page size p (in order), -1 when
 * there is none. */
static int64_t nth_of_page(const struct kv_groups *g, const struct bucket *b,
                           int64_t p, size_t r)
{
    for (size_t i = 0; i < b->n; i++)
        if (kv_cache_spec_page(&g->spec[b->idx[i]]) == p && r-- == 0)
            return (int64_t)b->idx[i];
    return -1;
}

static void buckets_free(struct bucket *b, size_t n)
{
    for (size_t i = 0; b && i < n; i++) {
        free(b[i].idx);
        free(b[i].page);
        free(b[i].count);
    }
    free(b);
}

/* Step 1 and 2: the buckets of g's n specs into *out (n_out of them). */
static int make_buckets(const struct kv_groups *g, size_t n,
                        struct bucket **out, size_t *n_out, struct kv_err *e)
{
    struct bucket *b = calloc(n, sizeof *b);
    size_t nb = 0;
    if (!b)
        return kv_err_set(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        while (k < nb &&
               !groups_uniform_pair(&g->spec[b[k].idx[0]], &g->spec[i]))
            k++;
        if (k == nb) {
            b[nb].idx = malloc(n * sizeof *b[nb].idx);
            b[nb].page = malloc(n * sizeof *b[nb].page);
            b[nb].count = calloc(n, sizeof *b[nb].count);
            nb++;
            if (!b[k].idx || !b[k].page || !b[k].count) {
                buckets_free(b, nb);
                return kv_err_set(e, "out of memory");
            }
        }
        struct bucket *q = &b[k];
        int64_t p = kv_cache_spec_page(&g->spec[i]);
        size_t x = 0;
        q->idx[q->n++] = i;
        while (x < q->n_pages && q->page[x] != p)
            x++;
        if (x == q->n_pages)
            q->page[q->n_pages++] = p;
        q->count[x]++;
    }
    for (size_t k = 0; k < nb; k++) {
        b[k].balanced = 1;
        for (size_t x = 0; x < b[k].n_pages; x++) {
            if (b[k].count[x] > b[k].most)
                b[k].most = b[k].count[x];
            if (b[k].count[x] != b[k].count[0])
                b[k].balanced = 0;
        }
    }
    *out = b;
    *n_out = nb;
    return 0;
}

/* Step 4 for one bucket: its n_groups groups, repeat r into group
 * r mod n_groups (zip of its page sizes' layer lists). */
static int split_bucket(struct kv_groups *g, const struct bucket *b,
                        int64_t n_groups, size_t *tmp, struct kv_err *e)
{
    size_t repeats = b->count[0];
    for (size_t x = 1; x < b->n_pages; x++)
        if (b->count[x] < repeats)
            repeats = b->count[x];
    if (n_groups == 1)
        return groups_add(g, b->idx, b->n, 1, e);
    /* vLLM splits by the zip of the page sizes' layer lists, which stops
     * at the shortest: an unbalanced bucket loses layers, and a group
     * past its repeats is empty (UniformTypeKVCacheSpecs.from_specs of no
     * spec raises StopIteration); the engine fails at start-up either way
     * (its exact-partition check asserts the lost layers) */
    if (repeats * b->n_pages != b->n)
        return kv_err_set(e, "vLLM 0.33.0 cannot pack the bucket of layer "
                          "%lld: %zu layers of %zu page sizes in unequal "
                          "counts, split into %lld groups, keep %zu of "
                          "them (%s)", (long long)g->spec[b->idx[0]].layer,
                          b->n, b->n_pages, (long long)n_groups,
                          repeats * b->n_pages,
                          (size_t)n_groups > repeats
                              ? "an empty group raises StopIteration"
                              : "KV cache groups miss layers");
    for (int64_t k = 0; k < n_groups; k++) {
        size_t m = 0;
        for (size_t r = (size_t)k; r < repeats; r += (size_t)n_groups)
            for (size_t x = 0; x < b->n_pages; x++)
                tmp[m++] = (size_t)nth_of_page(g, b, b->page[x], r);
        if (m && groups_add(g, tmp, m, 1, e) < 0)
            return -1;
    }
    return 0;
}

int groups_packed(struct kv_groups *g, size_t n, struct kv_err *e)
{
    struct bucket *b = NULL;
    size_t nb = 0, *tmp = NULL;
    int64_t *counts = NULL, floor = 0, repeats = 0, anchor = 0;
    int rc = -1;

    size_t same = 1;
    while (same < n && kv_cache_spec_page(&g->spec[same]) ==
                           kv_cache_spec_page(&g->spec[0]))
        same++;
    if (same == n)            /* one page size: nothing to pack */
        return 0;
    if (make_buckets(g, n, &b, &nb, e) < 0)
        return -1;
    counts = malloc(nb * sizeof *counts);
    tmp = malloc(n * sizeof *tmp);
    if (!counts || !tmp) {
        kv_err_set(e, "out of memory");
        goto out;
    }
    /* step 3 */
    size_t n_counts = 0;
    for (size_t k = 0; k < nb; k++) {
        if (!b[k].balanced)
            continue;
        counts[n_counts++] = (int64_t)b[k].most;
        if (b[k].n_pages > 1 && (int64_t)b[k].most > floor)
            floor = (int64_t)b[k].most;
    }
    if (floor)
        repeats = approximate_gcd(counts, n_counts, floor);
    /* step 4: the widest block any bucket needs, then the groups */
    for (size_t k = 0; k < nb; k++) {
        const struct kv_cache_spec *f = &g->spec[b[k].idx[0]];
        int state = f->kind == KV_CACHE_MAMBA ||
                    (!repeats && (f->kind == KV_CACHE_SLIDING ||
                                  f->kind == KV_CACHE_MLA_SLIDING));
        int64_t ng = b[k].balanced && repeats ? cdiv((int64_t)b[k].most,
                                                     repeats) : 1;
        int64_t w = widest(&b[k], state ? (int64_t)b[k].n : ng);
        if (w > anchor)
            anchor = w;
        counts[k] = ng * (state ? -1 : 1);   /* reused: groups, sign: state */
    }
    for (size_t k = 0; k < nb; k++) {
        int64_t ng = counts[k] < 0 ? -counts[k] : counts[k];
        if (anchor && counts[k] < 0) {
            int64_t per = anchor / kv_cache_spec_page(&g->spec[b[k].idx[0]]);
            int64_t need = cdiv((int64_t)b[k].n, per > 1 ? per : 1);
            if (need > ng)
                ng = need;
        }
        if (split_bucket(g, &b[k], ng, tmp, e) < 0)
            goto out;
    }
    /* vLLM's padding: the largest group's layer count less each group's */
    size_t most = 0;
    for (size_t k = 0; k < g->n_groups; k++)
        if (g->group[k].n_specs > most)
            most = g->group[k].n_specs;
    for (size_t k = 0; g->n_groups > 1 && k < g->n_groups; k++)
        g->padding_layers += (int64_t)(most - g->group[k].n_specs);
    rc = 1;
out:
    buckets_free(b, nb);
    free(counts);
    free(tmp);
    return rc;
}
