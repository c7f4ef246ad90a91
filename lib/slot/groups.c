/* groups.c - KV-cache specs and groups of hybrid models, as vLLM 0.33.0
 * builds them (see groups.h; the rules are cited at each function).
 *
 * Three stages, each its own function:
 *   1. which cache every layer keeps (config_layers in groups_config.c,
 *      from config.json, or parse_list here, from an explicit string): a
 *      list of raw layers;
 *   2. the block size each gets (groups_make_specs): vLLM's platform
 *      alignment of hybrid Mamba models (Platform._align_hybrid_block_size)
 *      and the sliding-window block (Attention.get_kv_cache_spec);
 *   3. the grouping (kv_groups_build: get_kv_cache_groups and
 *      _get_kv_cache_groups_uniform_page_size of kv_cache_planning.py). */
#include "slot/groups_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_BLOCK 16
#define DEFAULT_KERNEL 16
#define DEFAULT_TOKEN_BYTES 4096
#define MAX_CACHES 16384
#define MAX_BYTES ((int64_t)1 << 50)

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t kv_cache_spec_page(const struct kv_cache_spec *s)
{
    if (s->page_padded)
        return s->page_padded;
    if (s->kind == KV_CACHE_MAMBA)
        return s->state_bytes;
    return s->block_size * s->token_bytes;
}

const char *kv_cache_kind_name(enum kv_cache_kind k)
{
    static const char *const names[] = {
        "full", "sliding_window", "chunked_local", "mamba", "mla",
        "mla_indexer", "mla_sliding_window"
    };
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

void kv_groups_init(struct kv_groups *g)
{
    memset(g, 0, sizeof *g);
}

void kv_groups_release(struct kv_groups *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_groups; i++)
        free(g->group[i].specs);
    free(g->group);
    free(g->spec);
    kv_groups_init(g);
}

/* ---------------------------------------------------------------------- */
/* stage 3: grouping                                                       */

static int spec_eq(const struct kv_cache_spec *a, const struct kv_cache_spec *b)
{
    return a->kind == b->kind && a->block_size == b->block_size &&
           a->token_bytes == b->token_bytes &&
           a->state_bytes == b->state_bytes &&
           a->page_padded == b->page_padded && a->window == b->window &&
           a->head_size == b->head_size && a->n_kv_heads == b->n_kv_heads &&
           a->index_leader == b->index_leader;
}

/* Whether the spec of a later bucket merges into an earlier bucket whose
 * first spec is a (KVCacheSpec.merge does not raise): equal specs, or two
 * sliding-window latents of one window. */
static int merges(const struct kv_cache_spec *a, const struct kv_cache_spec *b)
{
    if (a->kind == KV_CACHE_MLA_SLIDING && b->kind == KV_CACHE_MLA_SLIDING)
        return a->window == b->window;
    return spec_eq(a, b);
}

/* The registry's base type of UniformTypeKVCacheSpecs.is_uniform_type:
 * MLA and the indexer count as full attention. */
static int base_kind(enum kv_cache_kind k)
{
    return k == KV_CACHE_MLA || k == KV_CACHE_MLA_INDEXER ? KV_CACHE_FULL
                                                          : (int)k;
}

int groups_uniform_pair(const struct kv_cache_spec *first,
                        const struct kv_cache_spec *x)
{
    if (x->block_size != first->block_size ||
        base_kind(x->kind) != base_kind(first->kind))
        return 0;
    switch (first->kind) {
    case KV_CACHE_SLIDING:
    case KV_CACHE_MLA_SLIDING:
    case KV_CACHE_CHUNKED:
        return x->window == first->window;
    case KV_CACHE_MAMBA:
        return kv_cache_spec_page(x) == kv_cache_spec_page(first);
    default:
        return 1;
    }
}

/* UniformTypeKVCacheSpecs.is_uniform_type: one block size, one base type,
 * and the type's own test (a sliding window or chunk size in common; Mamba
 * pages equal). */
static int uniform_type(const struct kv_cache_spec *s, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (!groups_uniform_pair(&s[0], &s[i]))
            return 0;
    return 1;
}

/* unify_kv_cache_spec_page_size: every page grows to the largest, by a
 * larger block when it divides it, else by padding (Mamba and non-MLA
 * attention only). */
static int unify_pages(struct kv_cache_spec *s, size_t n, struct kv_err *e)
{
    int64_t max = 0;
    for (size_t i = 0; i < n; i++)
        if (kv_cache_spec_page(&s[i]) > max)
            max = kv_cache_spec_page(&s[i]);
    for (size_t i = 0; i < n; i++) {
        int64_t p = kv_cache_spec_page(&s[i]);
        if (p == max)
            continue;
        if (s[i].kind == KV_CACHE_MAMBA)
            s[i].page_padded = max;
        else if (max % p == 0)
            s[i].block_size *= max / p;
        else if (s[i].kind != KV_CACHE_MLA &&
                 s[i].kind != KV_CACHE_MLA_INDEXER)
            s[i].page_padded = max;
        else
            return kv_err_set(e, "layer %lld%s: MLA page of %lld bytes does "
                              "not divide the largest page, %lld bytes, and "
                              "cannot be padded (vLLM refuses it too)",
                              (long long)s[i].layer,
                              s[i].kind == KV_CACHE_MLA_INDEXER ? ".indexer"
                              : "", (long long)p, (long long)max);
    }
    return 0;
}

int groups_add(struct kv_groups *g, const size_t *idx, size_t n,
               int uniform, struct kv_err *e)
{
    struct kv_group *gr = &g->group[g->n_groups];
    const struct kv_cache_spec *first = &g->spec[idx[0]];
    memset(gr, 0, sizeof *gr);
    gr->specs = malloc(n * sizeof *gr->specs);
    if (!gr->specs)
        return kv_err_set(e, "out of memory");
    memcpy(gr->specs, idx, n * sizeof *idx);
    gr->n_specs = n;
    gr->kind = first->kind;
    gr->uniform_type = uniform;
    gr->block_size = first->block_size;
    gr->window = first->window;
    gr->layer_page_bytes = kv_cache_spec_page(first);
    gr->page_bytes = gr->layer_page_bytes;
    if (uniform) {
        gr->page_bytes = 0;
        for (size_t i = 0; i < n; i++)
            gr->page_bytes += kv_cache_spec_page(&g->spec[idx[i]]);
    }
    g->n_groups++;
    return 0;
}

/* The n layers in bucket order into tmp, an exact bucket's after the one
 * before (exact bucket x of bucket count[x] on entry, bucket_of[i]: layer
 * i's exact bucket); count[b] becomes bucket b's layer count.  0 or -1. */
static int bucket_order(size_t n, size_t n_exact, size_t n_buckets,
                        const size_t *bucket_of, size_t *count, size_t *tmp,
                        struct kv_err *e)
{
    size_t at = 0;
    size_t *bucket_n = calloc(n, sizeof *bucket_n);
    size_t *lay = malloc(n * sizeof *lay);
    if (!bucket_n || !lay) {
        free(bucket_n);
        free(lay);
        return kv_err_set(e, "out of memory");
    }
    for (size_t b = 0; b < n_buckets; b++)
        for (size_t x = 0; x < n_exact; x++)
            if (count[x] == b)
                for (size_t i = 0; i < n; i++)
                    if (bucket_of[i] == x) {
                        lay[at++] = i;
                        bucket_n[b]++;
                    }
    for (size_t i = 0; i < n; i++)
        tmp[i] = lay[i];
    for (size_t b = 0; b < n_buckets; b++)
        count[b] = bucket_n[b];
    for (size_t b = n_buckets; b < n; b++)
        count[b] = 0;
    free(bucket_n);
    free(lay);
    return 0;
}

int kv_groups_build(struct kv_groups *g, const struct kv_cache_spec *specs,
                    size_t n, struct kv_err *e)
{
    size_t *order = NULL, *bucket_of = NULL, *count = NULL, *tmp = NULL;
    size_t n_buckets = 0;
    int rc = -1;

    free(g->spec);
    for (size_t i = 0; i < g->n_groups; i++)
        free(g->group[i].specs);
    free(g->group);
    g->spec = NULL;
    g->group = NULL;
    g->n_groups = g->n_specs = 0;
    g->padding_layers = 0;
    if (n == 0)               /* attention-free: no group */
        return 0;
    g->spec = malloc(n * sizeof *g->spec);
    g->group = calloc(n, sizeof *g->group);
    order = malloc(n * sizeof *order);
    bucket_of = malloc(n * sizeof *bucket_of);
    count = calloc(n, sizeof *count);
    tmp = malloc(n * sizeof *tmp);
    if (!g->spec || !g->group || !order || !bucket_of || !count || !tmp) {
        kv_err_set(e, "out of memory");
        goto out;
    }
    memcpy(g->spec, specs, n * sizeof *specs);
    g->n_specs = n;
    for (size_t i = 0; i < n; i++)
        order[i] = i;

    /* is_kv_cache_spec_uniform: one spec for every layer (the first
     * layer's merge; SlidingWindowMLASpec.merge asks only for one window,
     * and keeps the first layer's block and head) */
    size_t same = 1;
    while (same < n && (spec_eq(&g->spec[same], &g->spec[0]) ||
                        (g->spec[0].kind == KV_CACHE_MLA_SLIDING &&
                         g->spec[same].kind == KV_CACHE_MLA_SLIDING &&
                         g->spec[same].window == g->spec[0].window)))
        same++;
    if (same == n) {
        rc = groups_add(g, order, n, 0, e);
        goto out;
    }
    /* UniformTypeKVCacheSpecs.from_specs: one group of every layer */
    if (uniform_type(g->spec, n)) {
        rc = groups_add(g, order, n, 1, e);
        goto out;
    }
    /* _get_packed_kv_cache_groups: a block-outermost layout packs layers
     * of different pages into one block */
    if (g->block_outermost) {
        rc = groups_packed(g, n, e);
        if (rc != 0) {
            rc = rc > 0 ? 0 : -1;
            goto out;
        }
    }
    if (unify_pages(g->spec, n, e) < 0)
        goto out;

    /* same_type_layers: buckets of equal specs, in order of first use;
     * then a bucket joins the first earlier one its spec merges with
     * (SlidingWindowMLASpec.merge: one window), its layers after theirs */
    size_t n_exact = 0;
    for (size_t i = 0; i < n; i++) {
        size_t x = 0;
        while (x < n_exact && !spec_eq(&g->spec[tmp[x]], &g->spec[i]))
            x++;
        if (x == n_exact) {
            tmp[n_exact++] = i;            /* tmp[x]: exact bucket x's first */
            size_t b = 0;
            while (b < n_buckets && !merges(&g->spec[order[b]], &g->spec[i]))
                b++;
            if (b == n_buckets)
                order[n_buckets++] = i;    /* order[b]: bucket b's first */
            count[x] = b;                  /* for now: x's bucket */
        }
        bucket_of[i] = x;
    }
    if (bucket_order(n, n_exact, n_buckets, bucket_of, count, tmp, e) < 0)
        goto out;
    size_t min = n, max = 0;
    for (size_t b = 0; b < n_buckets; b++) {
        if (count[b] < min)
            min = count[b];
        if (count[b] > max)
            max = count[b];
    }
    /* group_size: the smallest bucket, or the largest when it is below 1.5
     * times the smallest (max < min * 1.5, exactly: 2 max < 3 min) */
    size_t group_size = 2 * max < 3 * min ? max : min;
    /* the layers of each bucket, one bucket after the other in tmp */
    for (size_t b = 0, start = 0; b < n_buckets; b++) {
        size_t m = count[b];
        const size_t *lay = tmp + start;
        start += m;
        size_t n_sub = (m + group_size - 1) / group_size;
        if (m % group_size)
            g->padding_layers += (int64_t)(group_size - m % group_size);
        /* layers[i::num_groups] */
        for (size_t s = 0; s < n_sub; s++) {
            size_t k = 0;
            for (size_t i = s; i < m; i += n_sub)
                order[k++] = lay[i];
            if (groups_add(g, order, k, 0, e) < 0)
                goto out;
        }
    }
    rc = 0;
out:
    free(order);
    free(bucket_of);
    free(count);
    free(tmp);
    if (rc < 0) {
        for (size_t i = 0; i < g->n_groups; i++)
            free(g->group[i].specs);
        free(g->group);
        free(g->spec);
        g->group = NULL;
        g->spec = NULL;
        g->n_groups = g->n_specs = 0;
    }
    return rc;
}

/* ---------------------------------------------------------------------- */
/* stage 2: block sizes                                                    */

/* The block sizes (Platform.update_block_size_for_backend and each
 * layer's get_kv_cache_spec), then the grouping. */
int groups_make_specs(struct kv_groups *g, const struct raw *r, size_t n,
                      const struct model_facts *mf,
                      const struct kv_groups_opts *o, struct kv_err *e)
{
    int64_t B = o->block_size ? o->block_size : DEFAULT_BLOCK;
    int64_t K = o->kernel_block ? o->kernel_block : DEFAULT_KERNEL;
    int64_t mamba_page = 0, mamba_padded = 0, mamba_block = 0;
    int have_attn = 0;
    struct kv_cache_spec *s;

    for (size_t i = 0; i < n; i++) {
        if (r[i].kind == KV_CACHE_MAMBA) {
            if (r[i].state_bytes > mamba_page)
                mamba_page = r[i].state_bytes;
        } else {
            have_attn = 1;
        }
    }
    if (mamba_page && o->max_model_len <= 0)
        return kv_err_set(e, "a Mamba layer needs the model length "
                          "(--max-model-len, or max_position_embeddings)");
    /* _align_hybrid_block_size: the smallest block whose attention page
     * holds a Mamba state, on the kernel block (128 with MLA), then the
     * Mamba page padded to exactly that page */
    if (mamba_page && have_attn) {
        int64_t kal = K > B ? K : B;
        if (mf->use_mla && kal < 128)
            kal = 128;
        int64_t t = mf->attn_token_bytes;
        if (t <= 0)
            return kv_err_set(e, "no attention layer size to align Mamba to");
        int64_t ab = kal * cdiv(mamba_page, kal * t);
        ab = K * cdiv(ab, K);
        if (B < ab)
            B = ab;
        /* equal pages need no padding (vLLM leaves it unset) */
        mamba_padded = B * t == mamba_page ? 0 : B * t;
    }
    if (mamba_page)
        mamba_block = o->mamba_align ? B : o->max_model_len;
    g->block_size = B;
    g->mamba_block_size = mamba_block;
    g->mamba_page_padded = mamba_padded;

    s = calloc(n ? n : 1, sizeof *s);
    if (!s)
        return kv_err_set(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        s[i].kind = r[i].kind;
        s[i].layer = r[i].layer;
        s[i].token_bytes = r[i].token_bytes;
        s[i].state_bytes = r[i].state_bytes;
        s[i].window = r[i].window;
        s[i].head_size = r[i].head_size;
        s[i].n_kv_heads = r[i].n_kv_heads;
        s[i].index_leader = r[i].index_leader;
        switch (r[i].kind) {
        case KV_CACHE_MAMBA:
            s[i].block_size = mamba_block;
            s[i].page_padded = mamba_padded;
            if (mamba_padded && mamba_padded < r[i].state_bytes) {
                free(s);
                return kv_err_set(e, "layer %lld: Mamba state of %lld bytes "
                                  "exceeds the aligned page of %lld bytes",
                                  (long long)r[i].layer,
                                  (long long)r[i].state_bytes,
                                  (long long)mamba_padded);
            }
            break;
        case KV_CACHE_SLIDING: {
            /* _largest_kernel_block_within: MultipleOf(K) expands to the
             * largest multiple of K within the page of B tokens */
            int64_t c = B / K * K;
            if (c < K)
                c = K;
            s[i].block_size = c;
            break;
        }
        default:
            s[i].block_size = B;
            break;
        }
        if (r[i].kind != KV_CACHE_MAMBA &&
            s[i].block_size > MAX_BYTES / s[i].token_bytes) {
            free(s);
            return kv_err_set(e, "layer %lld: page size overflows",
                              (long long)r[i].layer);
        }
    }
    g->block_outermost = mf->block_outermost;
    int rc = kv_groups_build(g, s, n, e);
    free(s);
    return rc;
}

int groups_check_opts(const struct kv_groups_opts *o, struct kv_err *e)
{
    if (o->block_size < 0 || o->block_size > (1 << 24))
        return kv_err_set(e, "block size %lld out of range",
                          (long long)o->block_size);
    if (o->kernel_block < 0 || o->kernel_block > (1 << 24))
        return kv_err_set(e, "kernel block %lld out of range",
                          (long long)o->kernel_block);
    if (o->max_model_len < 0 || o->max_model_len > ((int64_t)1 << 40))
        return kv_err_set(e, "model length %lld out of range",
                          (long long)o->max_model_len);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* stage 1a: the explicit spec                                             */

struct parser {
    const char *s, *p;
    struct raw *r;
    size_t n, cap;
    struct kv_err *e;
    int depth;
};

static int perr(struct parser *ps, const char *what)
{
    return kv_err_set(ps->e, "at offset %d: %s",
                      (int)(ps->p - ps->s), what);
}

static int num(struct parser *ps, int64_t min, int64_t max, int64_t *v)
{
    char *end;
    if (*ps->p < '0' || *ps->p > '9')
        return perr(ps, "expected a number");
    errno = 0;
    long long x = strtoll(ps->p, &end, 10);
    if (errno || x < min || x > max)
        return kv_err_set(ps->e, "at offset %d: %.*s out of range [%lld, %lld]",
                          (int)(ps->p - ps->s), (int)(end - ps->p), ps->p,
                          (long long)min, (long long)max);
    ps->p = end;
    *v = x;
    return 0;
}

static int push(struct parser *ps, const struct raw *x)
{
    if (ps->n == MAX_CACHES)
        return kv_err_set(ps->e, "more than %d layers", MAX_CACHES);
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? 2 * ps->cap : 64;
        struct raw *r = realloc(ps->r, cap * sizeof *r);
        if (!r)
            return kv_err_set(ps->e, "out of memory");
        ps->r = r;
        ps->cap = cap;
    }
    ps->r[ps->n] = *x;
    ps->r[ps->n].layer = (int64_t)ps->n;
    ps->n++;
    return 0;
}

static int word(struct parser *ps, const char *w)
{
    size_t l = strlen(w);
    if (strncmp(ps->p, w, l) != 0)
        return 0;
    char c = ps->p[l];
    if ((c >= 'a' && c <= 'z') || c == '_')
        return 0;
    ps->p += l;
    return 1;
}

static int parse_list(struct parser *ps);

static int parse_layer(struct parser *ps, struct raw *x)
{
    memset(x, 0, sizeof *x);
    x->token_bytes = DEFAULT_TOKEN_BYTES;
    if (word(ps, "full"))
        x->kind = KV_CACHE_FULL;
    else if (word(ps, "mla"))
        x->kind = KV_CACHE_MLA;
    else if (word(ps, "mla_sliding")) {
        /* SlidingWindowMLASpec (mla_attention.py): the latent of a layer
         * with a sliding window, on the MLA block */
        x->kind = KV_CACHE_MLA_SLIDING;
        if (*ps->p != '=')
            return perr(ps, "expected '=' and the window after "
                        "'mla_sliding'");
        ps->p++;
        if (num(ps, 1, (int64_t)1 << 40, &x->window) < 0)
            return -1;
    }
    else if (word(ps, "indexer")) {
        /* DeepSeek-V3.2's indexer keys: 128 fp8 values and one f32 scale */
        x->kind = KV_CACHE_MLA_INDEXER;
        x->token_bytes = 132;
    }
    else if (word(ps, "sliding") || word(ps, "chunked")) {
        x->kind = ps->p[-1] == 'g' ? KV_CACHE_SLIDING : KV_CACHE_CHUNKED;
        if (*ps->p != '=')
            return perr(ps, x->kind == KV_CACHE_SLIDING
                        ? "expected '=' and the window after 'sliding'"
                        : "expected '=' and the chunk size after 'chunked'");
        ps->p++;
        if (num(ps, 1, (int64_t)1 << 40, &x->window) < 0)
            return -1;
    } else if (word(ps, "mamba")) {
        x->kind = KV_CACHE_MAMBA;
        x->token_bytes = 0;
        if (*ps->p != '=')
            return perr(ps, "expected '=' and the state bytes after 'mamba'");
        ps->p++;
        return num(ps, 1, MAX_BYTES, &x->state_bytes);
    } else if (word(ps, "packed")) {
        return kv_err_set(ps->e, "at offset %d: 'packed:' goes before the "
                          "first layer, once", (int)(ps->p - ps->s - 6));
    } else {
        size_t l = strcspn(ps->p, ",()*:=");
        return kv_err_set(ps->e, "at offset %d: unknown layer type '%.*s' "
                          "(full, sliding=W, chunked=C, mla, "
                          "mla_sliding=W, indexer, mamba=S)",
                          (int)(ps->p - ps->s), (int)(l ? l : 1), ps->p);
    }
    if (*ps->p == ':') {
        ps->p++;
        if (num(ps, 1, (int64_t)1 << 30, &x->token_bytes) < 0)
            return -1;
    }
    return 0;
}

static int parse_item(struct parser *ps)
{
    int64_t times = 1;
    if (*ps->p >= '0' && *ps->p <= '9') {
        if (num(ps, 1, MAX_CACHES, &times) < 0)
            return -1;
        if (*ps->p != '*')
            return perr(ps, "expected '*' after a count");
        ps->p++;
    }
    if (*ps->p == '(') {
        size_t start = ps->n;
        if (++ps->depth > 8)
            return perr(ps, "parentheses nested too deep");
        ps->p++;
        if (parse_list(ps) < 0)
            return -1;
        if (*ps->p != ')')
            return perr(ps, "expected ')'");
        ps->p++;
        ps->depth--;
        size_t len = ps->n - start;
        for (int64_t t = 1; t < times; t++)
            for (size_t i = 0; i < len; i++) {
                struct raw x = ps->r[start + i];
                if (push(ps, &x) < 0)
                    return -1;
            }
        return 0;
    }
    struct raw x;
    memset(&x, 0, sizeof x);
    if (parse_layer(ps, &x) < 0)
        return -1;
    for (int64_t t = 0; t < times; t++)
        if (push(ps, &x) < 0)
            return -1;
    return 0;
}

static int parse_list(struct parser *ps)
{
    for (;;) {
        if (parse_item(ps) < 0)
            return -1;
        if (*ps->p != ',')
            return 0;
        ps->p++;
    }
}

/* 'packed:' before the first layer: the model's backend supports only a
 * block-outermost KV-cache layout (vLLM's BLHNC), so layers of different
 * page sizes are packed into groups (_get_packed_kv_cache_groups) instead
 * of having their pages unified.  0 or -1. */
static int parse_layout(struct parser *ps, struct model_facts *mf)
{
    if (!word(ps, "packed"))
        return 0;
    if (*ps->p != ':')
        return perr(ps, "expected ':' and the layers after 'packed'");
    ps->p++;
    if (!*ps->p)
        return perr(ps, "no layers after 'packed:'");
    mf->block_outermost = 1;
    return 0;
}

int kv_groups_from_spec(struct kv_groups *g, const char *spec,
                        const struct kv_groups_opts *o, struct kv_err *e)
{
    struct parser ps = { spec, spec, NULL, 0, 0, e, 0 };
    struct model_facts mf = { 0, 0, 0 };
    int rc = -1;

    kv_groups_release(g);
    if (groups_check_opts(o, e) < 0)
        return -1;
    if (!*spec)
        return kv_err_set(e, "empty spec");
    if (parse_layout(&ps, &mf) < 0 || parse_list(&ps) < 0)
        goto out;
    if (*ps.p) {
        perr(&ps, *ps.p == ')' ? "unbalanced ')'" : "expected ',' or the end");
        goto out;
    }
    /* the model-level attention size: the first attention layer's (an
     * indexer cache is not the model's attention) */
    for (size_t i = 0; i < ps.n; i++)
        if (ps.r[i].kind != KV_CACHE_MAMBA &&
            ps.r[i].kind != KV_CACHE_MLA_INDEXER) {
            if (!mf.attn_token_bytes)
                mf.attn_token_bytes = ps.r[i].token_bytes;
        }
    for (size_t i = 0; i < ps.n; i++)
        if (ps.r[i].kind == KV_CACHE_MLA ||
            ps.r[i].kind == KV_CACHE_MLA_INDEXER ||
            ps.r[i].kind == KV_CACHE_MLA_SLIDING)
            mf.use_mla = 1;
    if (!mf.attn_token_bytes)
        for (size_t i = 0; i < ps.n && !mf.attn_token_bytes; i++)
            if (ps.r[i].kind != KV_CACHE_MAMBA)
                mf.attn_token_bytes = ps.r[i].token_bytes;
    for (size_t i = 0; i < ps.n; i++)
        if (ps.r[i].kind != KV_CACHE_MAMBA && mf.use_mla !=
            (ps.r[i].kind == KV_CACHE_MLA ||
             ps.r[i].kind == KV_CACHE_MLA_INDEXER ||
             ps.r[i].kind == KV_CACHE_MLA_SLIDING)) {
            kv_err_set(e, "layer %zu: MLA and other attention layers in one "
                       "model (vLLM builds one attention kind per model)", i);
            goto out;
        }
    g->n_layers = (int64_t)ps.n;
    g->max_model_len = o->max_model_len;
    rc = groups_make_specs(g, ps.r, ps.n, &mf, o, e);
out:
    free(ps.r);
    if (rc < 0)
        kv_groups_release(g);
    return rc;
}

int kv_groups_load(struct kv_groups *g, const char *model_config,
                   const char *spec, const struct kv_groups_opts *o,
                   int *usage, struct kv_err *e)
{
    *usage = !model_config;
    if (model_config ? kv_groups_from_config(g, model_config, o, e)
                     : kv_groups_from_spec(g, spec, o, e))
        return model_config ? -1 : kv_err_prefix(e, "--kv-groups");
    return 0;
}

/* ---------------------------------------------------------------------- */
/* chunked local attention: virtual batches                                */

void kv_local_batches_release(struct kv_local_batches *b)
{
    if (!b)
        return;
    free(b->query_start_loc);
    free(b->seq_lens);
    free(b->req_indices);
    free(b->k_start);
    free(b->block_table);
    memset(b, 0, sizeof *b);
}

/* numpy's floor division and modulo (the divisor is positive). */
static int64_t floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

int kv_local_virtual_batches(struct kv_local_batches *b, int64_t chunk,
                             int64_t block_size, const int64_t *q_lens,
                             const int64_t *seq_lens, size_t n_reqs,
                             const int64_t *block_table, size_t n_cols,
                             struct kv_err *e)
{
    struct kv_local_batches t;
    int64_t *blocks = NULL;
    uint64_t n_virtual = 0;

    kv_local_batches_release(b);
    memset(&t, 0, sizeof t);
    if (chunk < 1 || block_size < 1)
        return kv_err_set(e, "chunk and block sizes must be positive");
    if (chunk % block_size)
        return kv_err_set(e, "chunk size %lld is not a multiple of the block "
                          "size %lld (vLLM asserts it)", (long long)chunk,
                          (long long)block_size);
    if (n_reqs == 0)
        return kv_err_set(e, "no requests");
    if (n_cols == 0)
        return kv_err_set(e, "the block table has no columns");
    blocks = malloc(n_reqs * sizeof *blocks);
    if (!blocks)
        return kv_err_set(e, "out of memory");
    for (size_t r = 0; r < n_reqs; r++) {
        int64_t q = q_lens[r], k = seq_lens[r];
        if (q < 0 || k < q || k > INT32_MAX) {
            free(blocks);
            return kv_err_set(e, "request %zu: %lld queries and %lld keys "
                              "(expected 0 <= queries <= keys < 2^31)", r,
                              (long long)q, (long long)k);
        }
        int64_t first = chunk - (k - q) % chunk;
        if (first > q)
            first = q;
        blocks[r] = 1 + cdiv(q - first, chunk);
        n_virtual += (uint64_t)blocks[r];
    }
    t.pages = (size_t)(chunk / block_size);
    if (n_virtual > ((uint64_t)1 << 28) ||
        n_virtual * t.pages > ((uint64_t)1 << 28)) {
        free(blocks);
        return kv_err_set(e, "%llu virtual requests of %zu blocks: too many",
                          (unsigned long long)n_virtual, t.pages);
    }
    t.n_virtual = (size_t)n_virtual;
    t.query_start_loc = malloc((t.n_virtual + 1) * sizeof *t.query_start_loc);
    t.seq_lens = malloc(t.n_virtual * sizeof *t.seq_lens);
    t.req_indices = malloc(t.n_virtual * sizeof *t.req_indices);
    t.k_start = malloc(t.n_virtual * sizeof *t.k_start);
    t.block_table = malloc(t.n_virtual * t.pages * sizeof *t.block_table);
    if (!t.query_start_loc || !t.seq_lens || !t.req_indices || !t.k_start ||
        !t.block_table) {
        free(blocks);
        kv_local_batches_release(&t);
        return kv_err_set(e, "out of memory");
    }
    size_t v = 0;
    t.query_start_loc[0] = 0;
    for (size_t r = 0; r < n_reqs; r++) {
        int64_t q = q_lens[r], k = seq_lens[r];
        int64_t first = chunk - (k - q) % chunk;
        if (first > q)
            first = q;
        /* C + (k % -C): the keys of the last chunk, C when k is a multiple */
        int64_t last = k % chunk ? k % chunk : chunk;
        for (int64_t a = 0; a < blocks[r]; a++, v++) {
            int64_t rev = blocks[r] - a - 1;
            int64_t nq = a == 0 ? first : q - first - chunk * (a - 1);
            if (nq > chunk)
                nq = chunk;
            t.query_start_loc[v + 1] = t.query_start_loc[v] + nq;
            t.seq_lens[v] = rev == 0 ? last : chunk;
            t.req_indices[v] = (int64_t)r;
            t.k_start[v] = k - (rev * chunk + last);
            if (nq > t.max_query_len)
                t.max_query_len = nq;
            if (t.seq_lens[v] > t.max_seq_len)
                t.max_seq_len = t.seq_lens[v];
            int64_t start = floordiv(t.k_start[v], block_size);
            for (size_t p = 0; p < t.pages; p++) {
                int64_t col = start + (int64_t)p;
                if (col > (int64_t)n_cols - 1)
                    col = (int64_t)n_cols - 1;       /* .clip(max=...) */
                if (col < 0)
                    col += (int64_t)n_cols;          /* torch indexing */
                if (col < 0) {
                    free(blocks);
                    kv_local_batches_release(&t);
                    return kv_err_set(e, "request %zu: block index %lld out "
                                      "of range", r, (long long)(start + (int64_t)p));
                }
                t.block_table[v * t.pages + p] =
                    block_table[r * n_cols + (size_t)col];
            }
        }
    }
    free(blocks);
    *b = t;
    return 0;
}
