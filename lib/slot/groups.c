/* groups.c - KV-cache specs and groups of hybrid models, as vLLM 0.33.0
 * builds them (see groups.h; the rules are cited at each function).
 *
 * Three stages, each its own function:
 *   1. which cache every layer keeps (config_layers, from config.json, or
 *      parse_spec, from an explicit string): a list of raw layers;
 *   2. the block size each gets (make_specs): vLLM's platform alignment of
 *      hybrid Mamba models (Platform._align_hybrid_block_size) and the
 *      sliding-window block (Attention.get_kv_cache_spec);
 *   3. the grouping (kv_groups_build: get_kv_cache_groups and
 *      _get_kv_cache_groups_uniform_page_size of kv_cache_planning.py). */
#include "slot/groups.h"

#include <errno.h>
#include <jansson.h>
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
        "mla_indexer"
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
           a->head_size == b->head_size && a->n_kv_heads == b->n_kv_heads;
}

/* The registry's base type of UniformTypeKVCacheSpecs.is_uniform_type:
 * MLA and the indexer count as full attention. */
static int base_kind(enum kv_cache_kind k)
{
    return k == KV_CACHE_MLA || k == KV_CACHE_MLA_INDEXER ? KV_CACHE_FULL
                                                          : (int)k;
}

/* UniformTypeKVCacheSpecs.is_uniform_type: one block size, one base type,
 * and the type's own test (a sliding window or chunk size in common; Mamba
 * pages equal). */
static int uniform_type(const struct kv_cache_spec *s, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (s[i].block_size != s[0].block_size ||
            base_kind(s[i].kind) != base_kind(s[0].kind))
            return 0;
        switch (s[0].kind) {
        case KV_CACHE_SLIDING:
        case KV_CACHE_CHUNKED:
            if (s[i].window != s[0].window)
                return 0;
            break;
        case KV_CACHE_MAMBA:
            if (kv_cache_spec_page(&s[i]) != kv_cache_spec_page(&s[0]))
                return 0;
            break;
        default:
            break;
        }
    }
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

static int add_group(struct kv_groups *g, const size_t *idx, size_t n,
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

    /* is_kv_cache_spec_uniform: one spec for every layer */
    size_t same = 1;
    while (same < n && spec_eq(&g->spec[same], &g->spec[0]))
        same++;
    if (same == n) {
        rc = add_group(g, order, n, 0, e);
        goto out;
    }
    /* UniformTypeKVCacheSpecs.from_specs: one group of every layer */
    if (uniform_type(g->spec, n)) {
        rc = add_group(g, order, n, 1, e);
        goto out;
    }
    if (unify_pages(g->spec, n, e) < 0)
        goto out;

    /* same_type_layers: buckets of equal specs, in order of first use */
    for (size_t i = 0; i < n; i++) {
        size_t b = 0;
        while (b < n_buckets && !spec_eq(&g->spec[order[b]], &g->spec[i]))
            b++;
        if (b == n_buckets)
            order[n_buckets++] = i;        /* order[b]: bucket b's first */
        bucket_of[i] = b;
        count[b]++;
    }
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
    /* the layers of each bucket, in order, one after the other in tmp:
     * count[b] becomes bucket b's start */
    for (size_t b = 0, at = 0; b < n_buckets; b++) {
        size_t c = count[b];
        count[b] = at;
        at += c;
    }
    for (size_t i = 0; i < n; i++)
        tmp[count[bucket_of[i]]++] = i;
    for (size_t b = 0, start = 0; b < n_buckets; b++) {
        size_t m = count[b] - start;
        const size_t *lay = tmp + start;
        start = count[b];
        size_t n_sub = (m + group_size - 1) / group_size;
        if (m % group_size)
            g->padding_layers += (int64_t)(group_size - m % group_size);
        /* layers[i::num_groups] */
        for (size_t s = 0; s < n_sub; s++) {
            size_t k = 0;
            for (size_t i = s; i < m; i += n_sub)
                order[k++] = lay[i];
            if (add_group(g, order, k, 0, e) < 0)
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

/* A layer before vLLM has chosen its block size. */
struct raw {
    enum kv_cache_kind kind;
    int64_t layer, token_bytes, state_bytes, window, head_size, n_kv_heads;
};

struct model_facts {
    int use_mla;
    int64_t attn_token_bytes;  /* one standard attention layer's token */
};

/* The block sizes (Platform.update_block_size_for_backend and each
 * layer's get_kv_cache_spec), then the grouping. */
static int make_specs(struct kv_groups *g, const struct raw *r, size_t n,
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
    int rc = kv_groups_build(g, s, n, e);
    free(s);
    return rc;
}

static int check_opts(const struct kv_groups_opts *o, struct kv_err *e)
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
    } else {
        size_t l = strcspn(ps->p, ",()*:=");
        return kv_err_set(ps->e, "at offset %d: unknown layer type '%.*s' "
                          "(full, sliding=W, chunked=C, mla, indexer, "
                          "mamba=S)",
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

int kv_groups_from_spec(struct kv_groups *g, const char *spec,
                        const struct kv_groups_opts *o, struct kv_err *e)
{
    struct parser ps = { spec, spec, NULL, 0, 0, e, 0 };
    struct model_facts mf = { 0, 0 };
    int rc = -1;

    kv_groups_release(g);
    if (check_opts(o, e) < 0)
        return -1;
    if (!*spec)
        return kv_err_set(e, "empty spec");
    if (parse_list(&ps) < 0)
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
            ps.r[i].kind == KV_CACHE_MLA_INDEXER)
            mf.use_mla = 1;
    if (!mf.attn_token_bytes)
        for (size_t i = 0; i < ps.n && !mf.attn_token_bytes; i++)
            if (ps.r[i].kind != KV_CACHE_MAMBA)
                mf.attn_token_bytes = ps.r[i].token_bytes;
    for (size_t i = 0; i < ps.n; i++)
        if (ps.r[i].kind != KV_CACHE_MAMBA && mf.use_mla !=
            (ps.r[i].kind == KV_CACHE_MLA ||
             ps.r[i].kind == KV_CACHE_MLA_INDEXER)) {
            kv_err_set(e, "layer %zu: MLA and other attention layers in one "
                       "model (vLLM builds one attention kind per model)", i);
            goto out;
        }
    g->n_layers = (int64_t)ps.n;
    g->max_model_len = o->max_model_len;
    rc = make_specs(g, ps.r, ps.n, &mf, o, e);
out:
    free(ps.r);
    if (rc < 0)
        kv_groups_release(g);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* stage 1b: config.json                                                   */

struct jcfg {
    const char *name;
    json_t *top;             /* text_config when the model has one */
    json_t *root;
    struct kv_err *e;
};

/* An integer key of the text config (then of the top level); def when
 * absent or null; min..max checked. */
static int jint(struct jcfg *c, const char *key, int64_t def, int64_t min,
                int64_t max, int64_t *v)
{
    json_t *x = json_object_get(c->top, key);
    if (!x || json_is_null(x))
        x = c->top != c->root ? json_object_get(c->root, key) : NULL;
    if (!x || json_is_null(x)) {
        if (def < min)
            return kv_err_set(c->e, "%s: no '%s'", c->name, key);
        *v = def;
        return 0;
    }
    if (!json_is_integer(x) || json_integer_value(x) < min ||
        json_integer_value(x) > max)
        return kv_err_set(c->e, "%s: '%s': expected an integer in [%lld, "
                          "%lld]", c->name, key, (long long)min,
                          (long long)max);
    *v = json_integer_value(x);
    return 0;
}

static int jhas(struct jcfg *c, const char *key)
{
    json_t *x = json_object_get(c->top, key);
    if (!x && c->top != c->root)
        x = json_object_get(c->root, key);
    return x && !json_is_null(x);
}

static const char *jstr(struct jcfg *c, const char *key)
{
    json_t *x = json_object_get(c->top, key);
    if (!x && c->top != c->root)
        x = json_object_get(c->root, key);
    return x && json_is_string(x) ? json_string_value(x) : NULL;
}

static int dtype_bytes(const char *s)
{
    if (!s)
        return 0;
    if (!strcmp(s, "bfloat16") || !strcmp(s, "float16"))
        return 2;
    if (!strcmp(s, "float32"))
        return 4;
    return -1;
}

/* One string of the layer_types list, or NULL. */
static const char *layer_type(struct jcfg *c, int64_t i, int64_t n,
                              int *bad)
{
    json_t *lt = json_object_get(c->top, "layer_types");
    if (!lt || json_is_null(lt))
        return NULL;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) < n) {
        *bad = 1;
        return NULL;
    }
    json_t *x = json_array_get(lt, (size_t)i);
    if (!json_is_string(x)) {
        *bad = 1;
        return NULL;
    }
    return json_string_value(x);
}

static int is_type(const char *mt, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(mt, *list))
            return 1;
    return 0;
}

/* Which cache every layer keeps, per model family (the vLLM 0.33.0 model
 * file each rule follows is named). */
static int config_layers(struct jcfg *c, struct raw **out, size_t *n_out,
                         struct model_facts *mf, struct kv_groups *g,
                         const struct kv_groups_opts *o)
{
    static const char *const gemma[] = { "gemma3", "gemma3_text", "gemma2",
                                         NULL };
    static const char *const llama4[] = { "llama4", "llama4_text", NULL };
    static const char *const deepseek[] = { "deepseek_v2", "deepseek_v3",
                                            "deepseek_v32", "kimi_k2", NULL };
    static const char *const refused[] = { "falcon_h1", "jamba", "zamba2",
                                           "bamba", "granitemoehybrid",
                                           "mamba", "mamba2", "falcon_mamba",
                                           "qwen3_5", "qwen3_5_moe",
                                           "minimax_m1", "kimi_linear",
                                           "lfm2", "plamo2", "deepseek_v4",
                                           "gemma3n", NULL };
    struct kv_err *e = c->e;
    int64_t L, H, Hkv, hidden, D, window, maxpos;
    const char *mt = jstr(c, "model_type");
    int mdt = dtype_bytes(jstr(c, "torch_dtype"));
    struct raw *r = NULL;
    size_t n = 0;
    int bad = 0;

    if (!mdt)
        mdt = dtype_bytes(jstr(c, "dtype"));
    if (mdt < 0)
        return kv_err_set(e, "%s: 'torch_dtype': expected bfloat16, float16 "
                          "or float32", c->name);
    if (!mdt)
        mdt = 2;     /* vLLM serves a config without a dtype in bf16/f16 */
    if (!mt)
        return kv_err_set(e, "%s: no 'model_type'", c->name);
    if (is_type(mt, refused))
        return kv_err_set(e, "%s: model_type '%s': its cache layout is not "
                          "modelled (see kvslot(1), GROUPS)", c->name, mt);
    snprintf(g->model_type, sizeof g->model_type, "%s", mt);
    /* the older names transformers maps onto these (attribute_map) */
    const char *kl = jhas(c, "num_hidden_layers") ? "num_hidden_layers"
                     : jhas(c, "n_layer") ? "n_layer" : "num_layers";
    const char *kh = jhas(c, "num_attention_heads") ? "num_attention_heads"
                     : "n_head";
    const char *kd = jhas(c, "hidden_size") ? "hidden_size"
                     : jhas(c, "n_embd") ? "n_embd" : "d_model";
    json_t *mq = json_object_get(c->top, "multi_query");
    if (jint(c, kl, -1, 1, 4096, &L) < 0 ||
        jint(c, kh, 0, 0, 1 << 16, &H) < 0 ||
        jint(c, kd, 0, 0, 1 << 24, &hidden) < 0 ||
        jint(c, jhas(c, "num_key_value_heads") ? "num_key_value_heads"
                : "multi_query_group_num", mq && json_is_true(mq) ? 1 : H,
             0, 1 << 16, &Hkv) < 0 ||
        jint(c, "head_dim", H ? hidden / H : 0, 0, 1 << 20, &D) < 0 ||
        jint(c, "sliding_window", 0, 0, (int64_t)1 << 40, &window) < 0 ||
        jint(c, "max_position_embeddings", 0, 0, (int64_t)1 << 40, &maxpos) < 0)
        return -1;
    {
        json_t *usw = json_object_get(c->top, "use_sliding_window");
        if (usw && json_is_false(usw))
            window = 0;
    }
    g->n_layers = L;
    g->max_model_len = o->max_model_len ? o->max_model_len : maxpos;
    int cdt = o->cache_dtype_bytes ? o->cache_dtype_bytes : mdt;
    r = calloc((size_t)L * 2, sizeof *r);
    if (!r)
        return kv_err_set(e, "out of memory");
    int64_t tok = 2 * Hkv * D * cdt;       /* K and V, FullAttentionSpec */
    mf->attn_token_bytes = tok;

    int64_t kv_lora = 0, rope_dim = 0, index_topk = 0, index_dim = 0;
    if (is_type(mt, deepseek)) {
        if (jint(c, "kv_lora_rank", 0, 0, 1 << 20, &kv_lora) < 0 ||
            jint(c, "qk_rope_head_dim", 0, 0, 1 << 20, &rope_dim) < 0 ||
            jint(c, "index_topk", 0, 0, 1 << 30, &index_topk) < 0 ||
            jint(c, "index_head_dim", 128, 1, 1 << 20, &index_dim) < 0)
            goto fail;
    }
    if (kv_lora > 0) {
        /* deepseek_v2.py / mla_attention.py: one latent of kv_lora_rank +
         * qk_rope_head_dim values per token, one head, no V; V3.2 (a
         * config with index_topk) adds the indexer's fp8 keys with one
         * f32 scale per 128 values, as bytes */
        mf->use_mla = 1;
        mf->attn_token_bytes = (kv_lora + rope_dim) * cdt;
        for (int64_t i = 0; i < L; i++) {
            r[n++] = (struct raw){ KV_CACHE_MLA, i, (kv_lora + rope_dim) * cdt,
                                   0, 0, kv_lora + rope_dim, 1 };
            if (index_topk > 0)
                r[n++] = (struct raw){ KV_CACHE_MLA_INDEXER, i,
                                       index_dim + index_dim / 128 * 4, 0, 0,
                                       index_dim + index_dim / 128 * 4, 1 };
        }
    } else if (!strcmp(mt, "gpt_oss")) {
        /* gpt_oss.py: sliding_window on the even layers */
        if (!window)
            goto nowindow;
        for (int64_t i = 0; i < L; i++)
            r[n++] = (struct raw){ i % 2 == 0 ? KV_CACHE_SLIDING
                                   : KV_CACHE_FULL, i, tok, 0,
                                   i % 2 == 0 ? window : 0, D, Hkv };
    } else if (is_type(mt, llama4)) {
        /* llama4.py: chunked local attention on the layers with RoPE
         * (no_rope_layers[i] != 0) when attention_chunk_size is set;
         * transformers' default no_rope_layers: every 4th layer NoPE */
        int64_t chunk, every;
        json_t *nr = json_object_get(c->top, "no_rope_layers");
        if (jint(c, "attention_chunk_size", 0, 0, (int64_t)1 << 40, &chunk) < 0 ||
            jint(c, "no_rope_layer_interval", 4, 1, 1 << 20, &every) < 0)
            goto fail;
        if (nr && !json_is_null(nr) &&
            (!json_is_array(nr) ||
             (json_array_size(nr) && (int64_t)json_array_size(nr) < L))) {
            kv_err_set(e, "%s: 'no_rope_layers': expected a list of %lld "
                       "integers", c->name, (long long)L);
            goto fail;
        }
        for (int64_t i = 0; i < L; i++) {
            int rope;
            if (nr && json_array_size(nr)) {
                json_t *x = json_array_get(nr, (size_t)i);
                if (!json_is_integer(x)) {
                    kv_err_set(e, "%s: 'no_rope_layers': expected integers",
                               c->name);
                    goto fail;
                }
                rope = json_integer_value(x) != 0;
            } else {
                rope = (i + 1) % every != 0;
            }
            int local = rope && chunk > 0;
            r[n++] = (struct raw){ local ? KV_CACHE_CHUNKED : KV_CACHE_FULL,
                                   i, tok, 0, local ? chunk : 0, D, Hkv };
        }
    } else if (!strcmp(mt, "qwen3_next")) {
        /* qwen3_next.py: layer_types (full_attention / linear_attention),
         * else every full_attention_interval-th layer full; the gated
         * delta net's state: a conv state of (2 K + V) * head dims by
         * kernel - 1 and a (V heads, head_v, head_k) state, model dtype */
        int64_t nk, nv, hk, hv, ker, every;
        if (jint(c, "linear_num_key_heads", -1, 1, 1 << 16, &nk) < 0 ||
            jint(c, "linear_num_value_heads", -1, 1, 1 << 16, &nv) < 0 ||
            jint(c, "linear_key_head_dim", -1, 1, 1 << 16, &hk) < 0 ||
            jint(c, "linear_value_head_dim", -1, 1, 1 << 16, &hv) < 0 ||
            jint(c, "linear_conv_kernel_dim", -1, 2, 1 << 10, &ker) < 0 ||
            jint(c, "full_attention_interval", 4, 1, 1 << 20, &every) < 0)
            goto fail;
        int64_t state = ((hk * nk * 2 + hv * nv) * (ker - 1) +
                         nv * hv * hk) * mdt;
        for (int64_t i = 0; i < L; i++) {
            const char *t = layer_type(c, i, L, &bad);
            int full = t ? !strcmp(t, "full_attention")
                         : (i + 1) % every == 0;
            if (bad || (t && !full && strcmp(t, "linear_attention"))) {
                kv_err_set(e, "%s: 'layer_types': layer %lld: expected "
                           "full_attention or linear_attention", c->name,
                           (long long)i);
                goto fail;
            }
            r[n++] = full ? (struct raw){ KV_CACHE_FULL, i, tok, 0, 0, D, Hkv }
                          : (struct raw){ KV_CACHE_MAMBA, i, 0, state, 0, 0, 0 };
        }
    } else if (!strcmp(mt, "nemotron_h")) {
        /* nemotron_h.py: hybrid_override_pattern, M = Mamba2, * =
         * attention, - and E (MLP, MoE) keep no cache; the Mamba2 state:
         * conv (heads * head_dim + 2 groups * state) by kernel - 1 in the
         * model dtype, SSM (heads, head_dim, state) in mamba_ssm_cache_dtype
         * (float32 unless the config names another) */
        int64_t mh, mhd, ng, ss, ker;
        const char *pat = jstr(c, "hybrid_override_pattern");
        int sdt = dtype_bytes(jstr(c, "mamba_ssm_cache_dtype"));
        if (!pat || (int64_t)strlen(pat) != L) {
            kv_err_set(e, "%s: 'hybrid_override_pattern': expected %lld "
                       "characters", c->name, (long long)L);
            goto fail;
        }
        if (sdt < 0) {
            kv_err_set(e, "%s: 'mamba_ssm_cache_dtype': unknown dtype",
                       c->name);
            goto fail;
        }
        if (!sdt)
            sdt = 4;
        if (jint(c, "mamba_num_heads", -1, 1, 1 << 16, &mh) < 0 ||
            jint(c, "mamba_head_dim", -1, 1, 1 << 16, &mhd) < 0 ||
            jint(c, "n_groups", -1, 1, 1 << 16, &ng) < 0 ||
            jint(c, "ssm_state_size", -1, 1, 1 << 16, &ss) < 0 ||
            jint(c, "conv_kernel", -1, 2, 1 << 10, &ker) < 0)
            goto fail;
        int64_t state = (mh * mhd + 2 * ng * ss) * (ker - 1) * mdt +
                        mh * mhd * ss * sdt;
        for (int64_t i = 0; i < L; i++) {
            switch (pat[i]) {
            case 'M':
                r[n++] = (struct raw){ KV_CACHE_MAMBA, i, 0, state, 0, 0, 0 };
                break;
            case '*':
                r[n++] = (struct raw){ KV_CACHE_FULL, i, tok, 0, 0, D, Hkv };
                break;
            case '-':
            case 'E':
                break;
            default:
                kv_err_set(e, "%s: 'hybrid_override_pattern': unknown layer "
                           "type '%c' at %lld (M, *, -, E)", c->name, pat[i],
                           (long long)i);
                goto fail;
            }
        }
    } else {
        /* llama.py, gemma3.py, mistral, qwen2...: layer_types when the
         * config has them (Gemma 3 without them: every
         * sliding_window_pattern-th layer full, 6); else the model-level
         * sliding_window on every layer (CacheConfig.sliding_window) */
        int64_t every = 0;
        if (is_type(mt, gemma) && !json_object_get(c->top, "layer_types") &&
            jint(c, "sliding_window_pattern", !strcmp(mt, "gemma2") ? 2 : 6,
                 1, 1 << 20, &every) < 0)
            goto fail;
        for (int64_t i = 0; i < L; i++) {
            const char *t = layer_type(c, i, L, &bad);
            int slide;
            if (bad) {
                kv_err_set(e, "%s: 'layer_types': expected %lld strings",
                           c->name, (long long)L);
                goto fail;
            }
            if (t) {
                slide = !strcmp(t, "sliding_attention");
                if (!slide && strcmp(t, "full_attention")) {
                    kv_err_set(e, "%s: 'layer_types': layer %lld: unknown "
                               "type '%s' (full_attention, sliding_attention)",
                               c->name, (long long)i, t);
                    goto fail;
                }
            } else {
                slide = every ? (i + 1) % every != 0 : 1;
            }
            slide = slide && window > 0;
            r[n++] = (struct raw){ slide ? KV_CACHE_SLIDING : KV_CACHE_FULL,
                                   i, tok, 0, slide ? window : 0, D, Hkv };
        }
    }
    for (size_t i = 0; i < n; i++)
        if (r[i].kind != KV_CACHE_MAMBA && r[i].token_bytes <= 0) {
            kv_err_set(e, "%s: layer %lld has no KV heads or head size",
                       c->name, (long long)r[i].layer);
            goto fail;
        }
    *out = r;
    *n_out = n;
    return 0;
nowindow:
    kv_err_set(e, "%s: model_type '%s' needs 'sliding_window'", c->name, mt);
fail:
    free(r);
    return -1;
}

int kv_groups_from_json(struct kv_groups *g, const char *buf, size_t len,
                        const char *name, const struct kv_groups_opts *o,
                        struct kv_err *e)
{
    json_error_t je;
    struct jcfg c = { name, NULL, NULL, e };
    struct model_facts mf = { 0, 0 };
    struct raw *r = NULL;
    size_t n = 0;
    int rc = -1;

    kv_groups_release(g);
    if (check_opts(o, e) < 0)
        return -1;
    c.root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!c.root)
        return kv_err_set(e, "%s: line %d, column %d: %s", name, je.line,
                          je.column, je.text);
    if (!json_is_object(c.root)) {
        kv_err_set(e, "%s: expected a JSON object", name);
        goto out;
    }
    c.top = c.root;
    json_t *tc = json_object_get(c.root, "text_config");
    if (!json_object_get(c.root, "num_hidden_layers") && tc &&
        json_is_object(tc))
        c.top = tc;
    if (config_layers(&c, &r, &n, &mf, g, o) < 0)
        goto out;
    struct kv_groups_opts oo = *o;
    oo.max_model_len = g->max_model_len;
    rc = make_specs(g, r, n, &mf, &oo, e);
out:
    free(r);
    json_decref(c.root);
    if (rc < 0)
        kv_groups_release(g);
    return rc;
}

int kv_groups_from_config(struct kv_groups *g, const char *path,
                          const struct kv_groups_opts *o, struct kv_err *e)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    const char *name = strcmp(path, "-") ? path : "<stdin>";
    size_t cap = (size_t)16 << 20, n;
    char *buf;
    int rc;

    kv_groups_release(g);
    if (!f)
        return kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
    buf = malloc(cap + 1);
    if (!buf) {
        if (f != stdin)
            fclose(f);
        return kv_err_set(e, "out of memory");
    }
    n = fread(buf, 1, cap + 1, f);
    rc = ferror(f) ? kv_err_set(e, "cannot read '%s'", name)
         : n > cap ? kv_err_set(e, "%s: larger than %zu bytes", name, cap) : 0;
    if (f != stdin)
        fclose(f);
    if (rc == 0)
        rc = kv_groups_from_json(g, buf, n, name, o, e);
    free(buf);
    return rc;
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
