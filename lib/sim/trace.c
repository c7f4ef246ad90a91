/* trace.c - writing request traces for `kvchunk sim` (format in sim.h):
 * a synthetic generator with the shapes used in the RAG caching literature
 * (Zipf document popularity, top-k retrieval in retrieval / sorted / random
 * order, topic clusters, system-prompt variants, tenants, multi-turn
 * conversations, Poisson arrivals), and a converter from the segment lists
 * `kvchunk split` prints for real prompts.
 *
 * The generator is deterministic: one xoshiro256** stream seeded from
 * --seed drives every request, and per-document and per-variant lengths
 * come from their own seeded streams, so a document has the same length
 * wherever it appears.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include "sim/sim.h"

/* ---- random numbers ------------------------------------------------------ */

struct rng {
    uint64_t s[4];
};

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1). */
static double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n >= 1 (Lemire's multiply-shift with
 * rejection, no modulo bias). */
static uint64_t rng_below(struct rng *r, uint64_t n)
{
    unsigned __int128 m = (unsigned __int128)rng_next(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = -n % n;
        while (lo < t) {
            m = (unsigned __int128)rng_next(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

static double rng_normal(struct rng *r)
{
    double u = rng_unit(r), v = rng_unit(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * 3.14159265358979323846 * v);
}

/* ---- length distributions ------------------------------------------------ */

int kv_sim_dist_parse(const char *s, const char *opt, int64_t min,
                      struct kv_sim_dist *d, struct kv_err *e)
{
    struct kv_sim_dist t = { KV_SIM_DIST_FIXED, 0, 0 };
    char *end;
    const char *dash = strchr(s, '-'), *tilde = strchr(s, '~');
    errno = 0;
    if (s[0] == '-' || s[0] == '+' || s[0] == ' ' || !s[0])
        goto bad;
    if (tilde) {
        t.kind = KV_SIM_DIST_LOGNORMAL;
        t.a = strtod(s, &end);
        if (end != tilde || !(t.a >= 1) || t.a > (double)(KV_SIM_MAX_LEN - 1))
            goto bad;
        t.b = strtod(tilde + 1, &end);
        if (*end || !(t.b >= 0) || t.b > 10 || tilde[1] == '-')
            goto bad;
    } else {
        long long a = strtoll(s, &end, 10), b = a;
        if (dash) {
            if (end != dash)
                goto bad;
            if (dash[1] == '-' || dash[1] == '+' || !dash[1])
                goto bad;
            b = strtoll(dash + 1, &end, 10);
            t.kind = KV_SIM_DIST_UNIFORM;
        }
        if (*end || errno || a < min || b < a || b > KV_SIM_MAX_LEN - 1)
            goto bad;
        t.a = (double)a;
        t.b = (double)b;
    }
    *d = t;
    return 0;
bad:
    return kv_err_set(e, "%s: expected N, A-B (uniform) or M~S (log-normal, "
                      "median M, shape S) with lengths >= %lld, got '%s'",
                      opt, (long long)min, s);
}

static int64_t dist_sample(const struct kv_sim_dist *d, struct rng *r)
{
    switch (d->kind) {
    case KV_SIM_DIST_UNIFORM:
        return (int64_t)d->a + (int64_t)rng_below(r, (uint64_t)(d->b - d->a) + 1);
    case KV_SIM_DIST_LOGNORMAL: {
        double v = floor(d->a * exp(d->b * rng_normal(r)) + 0.5);
        if (v < 1)
            v = 1;
        if (v > (double)(KV_SIM_MAX_LEN - 1))
            v = (double)(KV_SIM_MAX_LEN - 1);
        return (int64_t)v;
    }
    default:
        return (int64_t)d->a;
    }
}

/* A length drawn from d by a stream of its own, so that item i of a kind
 * always gets the same length. */
static int64_t fixed_len(const struct kv_sim_dist *d, uint64_t seed,
                         uint64_t kind, uint64_t i)
{
    struct rng r;
    if (d->kind == KV_SIM_DIST_FIXED)
        return (int64_t)d->a;
    rng_seed(&r, kv_sim_mix(kv_sim_mix(seed, kind), i));
    return dist_sample(d, &r);
}

/* ---- Zipf popularity ----------------------------------------------------- */

/* Cumulative weights of ranks 0..n-1 with weight (rank + 1)^-s. */
static double *zipf_cdf(int64_t n, double s)
{
    double *c = malloc((size_t)n * sizeof *c), acc = 0;
    if (!c)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        acc += pow((double)(i + 1), -s);
        c[i] = acc;
    }
    return c;
}

/* A rank in [0, n) drawn from the cumulative weights c. */
static int64_t zipf_draw(const double *c, int64_t n, struct rng *r)
{
    double u = rng_unit(r) * c[n - 1];
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (c[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* ---- output buffer ------------------------------------------------------- */

struct obuf {
    char *p;
    size_t n, cap;
    FILE *f;        /* flushed to f when set, else kept in memory */
    int failed;
};

static int ob_reserve(struct obuf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    if (b->f && b->n) {
        if (fwrite(b->p, 1, b->n, b->f) != b->n)
            b->failed = 1;
        b->n = 0;
        if (b->n + more <= b->cap)
            return 0;
    }
    size_t ncap = b->cap ? b->cap : 1 << 16;
    while (ncap < b->n + more) {
        if (ncap > SIZE_MAX / 2)
            return -1;
        ncap *= 2;
    }
    char *q = realloc(b->p, ncap);
    if (!q)
        return -1;
    b->p = q;
    b->cap = ncap;
    return 0;
}

static void ob_str(struct obuf *b, const char *s, size_t n)
{
    if (!n)   /* an empty buffer's s may be NULL */
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void ob_u64(struct obuf *b, uint64_t v)
{
    char t[24];
    int i = 24;
    do {
        t[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    ob_str(b, t + i, (size_t)(24 - i));
}

/* Seconds with six decimals, from microseconds. */
static void ob_time(struct obuf *b, uint64_t us)
{
    char t[8];
    ob_u64(b, us / 1000000);
    uint64_t f = us % 1000000;
    t[0] = '.';
    for (int i = 6; i >= 1; i--) {
        t[i] = (char)('0' + f % 10);
        f /= 10;
    }
    ob_str(b, t, 7);
}

/* ---- generator ----------------------------------------------------------- */

struct conv {
    uint64_t id;
    int64_t turns_left;
    int64_t tenant, sys, topic;
};

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Check the generator's options. */
static int gen_check(const struct kv_sim_gen_opts *o, struct kv_err *e)
{
    if (o->requests < 0)
        return kv_err_set(e, "--requests: negative");
    if (o->docs < 1 || o->docs > 100000000)
        return kv_err_set(e, "--docs: expected 1 to 100000000, got %lld",
                          (long long)o->docs);
    if (o->topk < 0 || o->topk > 10000)
        return kv_err_set(e, "--topk: expected 0 to 10000, got %lld",
                          (long long)o->topk);
    if (!(o->zipf >= 0 && o->zipf <= 10))
        return kv_err_set(e, "--zipf: expected 0 to 10, got %g", o->zipf);
    if (!(o->fresh >= 0 && o->fresh <= 1))
        return kv_err_set(e, "--fresh: expected 0 to 1, got %g", o->fresh);
    if (o->topics < 0 || o->topics > o->docs)
        return kv_err_set(e, "--topics: expected 0 to --docs (%lld), got "
                          "%lld", (long long)o->docs, (long long)o->topics);
    int64_t per_topic = o->topics ? o->docs / o->topics : o->docs;
    if (o->topk > per_topic)
        return kv_err_set(e, "--topk %lld is more than the %lld documents %s",
                          (long long)o->topk, (long long)per_topic,
                          o->topics ? "of the smallest topic" : "there are");
    if (o->sys_variants < 0 || o->sys_variants > 100000000 ||
        o->tenants < 1 || o->tenants > 100000000)
        return kv_err_set(e, "--sys-variants or --tenants out of range");
    if (o->turns < 1 || o->conversations < 1 || o->conversations > 10000000)
        return kv_err_set(e, "--turns or --conversations out of range");
    if (!(o->rate >= 0) || !isfinite(o->rate))
        return kv_err_set(e, "--rate: expected a rate >= 0, got %g", o->rate);
    return 0;
}

/* The generator's tables: popularity CDFs, the rank -> id permutation and
 * the per-request scratch. */
struct gen {
    const struct kv_sim_gen_opts *o;
    int64_t n_topics, n_in_topic;
    double *doc_cdf, *topic_cdf;
    int64_t *pick, *ids;
    char *fresh;           /* per slot: a never-seen document */
    uint64_t next_fresh;   /* the next one's number (id docs + it) */
    uint64_t N, mult, shift;
};

/* Allocate g's tables; -1 when out of memory. */
static int gen_init(struct gen *g, const struct kv_sim_gen_opts *o)
{
    g->o = o;
    g->n_topics = o->topics ? o->topics : 1;
    g->n_in_topic = (o->docs + g->n_topics - 1) / g->n_topics;
    g->doc_cdf = zipf_cdf(g->n_in_topic, o->zipf);
    g->topic_cdf = zipf_cdf(g->n_topics, o->zipf);
    g->pick = malloc(((size_t)o->topk + 1) * sizeof *g->pick);
    g->ids = malloc(((size_t)o->topk + 1) * sizeof *g->ids);
    g->fresh = malloc((size_t)o->topk + 1);
    /* Popularity rank -> document id: a multiplicative permutation, so
     * that "sorted" order is unrelated to popularity. */
    g->N = (uint64_t)o->docs;
    g->mult = (0x9e3779b97f4a7c15ULL ^ o->seed) % g->N;
    if (!g->mult)
        g->mult = 1;
    while (gcd(g->mult, g->N) != 1)
        g->mult++;
    g->shift = kv_sim_mix(o->seed, 0x5348) % g->N;
    return g->doc_cdf && g->topic_cdf && g->pick && g->ids && g->fresh ?
           0 : -1;
}

/* Draw one request's top-k documents of a topic into g->ids, in the order
 * --order asks for; their count. */
static int64_t gen_docs(struct gen *g, int64_t topic, struct rng *r)
{
    const struct kv_sim_gen_opts *o = g->o;
    int64_t *pick = g->pick, *ids = g->ids;
    /* top-k without replacement, in the order drawn */
    int64_t n_topic = (o->docs - topic + g->n_topics - 1) / g->n_topics;
    int64_t k = 0, tries = 0, n_fresh = 0, want;
    /* --fresh: which slots hold a document never retrieved before */
    for (int64_t i = 0; i < o->topk; i++) {
        g->fresh[i] = o->fresh > 0 && rng_unit(r) < o->fresh;
        n_fresh += g->fresh[i];
    }
    want = o->topk - n_fresh;
    while (k < want) {
        int64_t j;
        if (tries++ < 64 * (o->topk + 1)) {
            j = zipf_draw(g->doc_cdf, g->n_in_topic, r);
            if (j >= n_topic)
                continue;
        } else {
            /* Too skewed to finish by drawing: take the most popular
             * documents not yet picked. */
            for (j = 0; j < n_topic; j++) {
                int dup = 0;
                for (int64_t i = 0; i < k && !dup; i++)
                    dup = pick[i] == j;
                if (!dup)
                    break;
            }
        }
        int dup = 0;
        for (int64_t i = 0; i < k && !dup; i++)
            dup = pick[i] == j;
        if (!dup)
            pick[k++] = j;
    }
    for (int64_t i = 0; i < k; i++) {
        uint64_t rank = (uint64_t)(pick[i] * g->n_topics + topic);
        ids[i] = (int64_t)(((unsigned __int128)rank * g->mult + g->shift) % g->N);
    }
    if (n_fresh) {
        /* the hot documents in their slots, new ids (docs, docs + 1, ..)
         * in the others */
        memcpy(pick, ids, (size_t)k * sizeof *pick);
        for (int64_t i = 0, j = 0; i < o->topk; i++)
            ids[i] = g->fresh[i] ? o->docs + (int64_t)g->next_fresh++
                                 : pick[j++];
        k = o->topk;
    }
    if (o->order == KV_SIM_ORDER_SORTED) {
        qsort(ids, (size_t)k, sizeof *ids, cmp_i64);
    } else if (o->order == KV_SIM_ORDER_RANDOM) {
        for (int64_t i = k - 1; i > 0; i--) {
            int64_t j = (int64_t)rng_below(r, (uint64_t)i + 1);
            int64_t x = ids[i];
            ids[i] = ids[j];
            ids[j] = x;
        }
    }
    return k;
}

/* One request as it arrives: who asks, with which system prompt, about
 * which topic (a conversation keeps all three over its turns). */
struct gen_req {
    int64_t tenant, sys, topic;
    struct conv *cv;
};

/* Draw the next request's tenant, system prompt and topic. */
static void gen_who(const struct gen *g, struct conv *conv, uint64_t *next_conv,
                    struct rng *r, struct gen_req *q)
{
    const struct kv_sim_gen_opts *o = g->o;
    struct conv *cv = NULL;
    if (conv) {
        cv = &conv[rng_below(r, (uint64_t)o->conversations)];
        if (cv->turns_left == 0) {
            cv->id = (*next_conv)++;
            cv->turns_left = 1 + (int64_t)rng_below(r, (uint64_t)o->turns);
            cv->tenant = (int64_t)rng_below(r, (uint64_t)o->tenants);
            cv->sys = o->sys_variants ?
                (int64_t)rng_below(r, (uint64_t)o->sys_variants) : -1;
            cv->topic = zipf_draw(g->topic_cdf, g->n_topics, r);
        }
        cv->turns_left--;
        q->tenant = cv->tenant;
        q->sys = cv->sys;
        q->topic = cv->topic;
    } else {
        q->tenant = (int64_t)rng_below(r, (uint64_t)o->tenants);
        q->sys = o->sys_variants ?
            (int64_t)rng_below(r, (uint64_t)o->sys_variants) : -1;
        q->topic = zipf_draw(g->topic_cdf, g->n_topics, r);
    }
    q->cv = cv;
}

/* Write one trace line: time, tenant, system prompt, documents, question
 * and output lengths, and the conversation. */
static int gen_line(struct obuf *ob, const struct gen *g, double t,
                    const struct gen_req *q, int64_t k, int64_t ql, int64_t ol)
{
    const struct kv_sim_gen_opts *o = g->o;
    /* one line: at most 48 bytes per chunk plus the rest */
    if (ob_reserve(ob, 256 + 48 * (size_t)k) < 0)
        return -1;
    ob_time(ob, (uint64_t)llround(t * 1e6));
    ob_str(ob, " t", 2);
    ob_u64(ob, (uint64_t)q->tenant);
    if (q->sys >= 0) {
        ob_str(ob, " s", 2);
        ob_u64(ob, (uint64_t)q->sys);
        ob_str(ob, ":", 1);
        ob_u64(ob, (uint64_t)fixed_len(&o->sys_len, o->seed, 0x53,
                                       (uint64_t)q->sys));
    } else {
        ob_str(ob, " -", 2);
    }
    ob_str(ob, " ", 1);
    if (!k)
        ob_str(ob, "-", 1);
    for (int64_t i = 0; i < k; i++) {
        if (i)
            ob_str(ob, ",", 1);
        ob_str(ob, "d", 1);
        ob_u64(ob, (uint64_t)g->ids[i]);
        ob_str(ob, ":", 1);
        ob_u64(ob, (uint64_t)fixed_len(&o->doc_len, o->seed, 0x44,
                                       (uint64_t)g->ids[i]));
    }
    ob_str(ob, " ", 1);
    ob_u64(ob, (uint64_t)ql);
    ob_str(ob, " ", 1);
    ob_u64(ob, (uint64_t)ol);
    if (q->cv) {
        ob_str(ob, " c", 2);
        ob_u64(ob, q->cv->id);
    }
    ob_str(ob, "\n", 1);
    return 0;
}

int kv_sim_gen(FILE *out, const struct kv_sim_gen_opts *o, struct kv_err *e)
{
    if (gen_check(o, e))
        return -1;
    struct gen g = { 0 };
    struct conv *conv = o->turns > 1 ?
        calloc((size_t)o->conversations, sizeof *conv) : NULL;
    struct obuf ob = { 0 };
    int rc = 0;
    if (gen_init(&g, o) < 0 || (o->turns > 1 && !conv)) {
        rc = kv_err_set(e, "out of memory");
        goto done;
    }
    ob.f = out;
    struct rng r;
    rng_seed(&r, o->seed);
    double t = 0;
    uint64_t next_conv = 0;
    for (int64_t i = 0; i < o->requests; i++) {
        if (o->rate > 0)
            t += -log(1.0 - rng_unit(&r)) / o->rate;
        struct gen_req q;
        gen_who(&g, conv, &next_conv, &r, &q);
        int64_t k = gen_docs(&g, q.topic, &r);
        int64_t ql = dist_sample(&o->q_len, &r);
        int64_t ol = dist_sample(&o->out_len, &r);
        if (gen_line(&ob, &g, t, &q, k, ql, ol) < 0) {
            rc = kv_err_set(e, "out of memory");
            goto done;
        }
    }
    if (ob.n && fwrite(ob.p, 1, ob.n, out) != ob.n)
        ob.failed = 1;
    if (ob.failed || ferror(out))
        rc = kv_err_set(e, "write error: %s", strerror(errno ? errno : EIO));
done:
    free(g.doc_cdf);
    free(g.topic_cdf);
    free(g.pick);
    free(g.ids);
    free(g.fresh);
    free(conv);
    free(ob.p);
    return rc;
}

/* ---- kvchunk split output -> trace -------------------------------------- */

/* One prompt being read from the split listing: its request field so far. */
struct split_prompt {
    struct obuf req;        /* "sys:len chunk:len,.." as the trace writes it */
    int have_sys, n_chunks;
    uint64_t open_line;     /* the line it began on, 0 between prompts */
};

/* Split a line into at most 5 fields; the count may exceed 5. */
static int split_fields(char *line, char *f[5])
{
    int nf = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, " \t\r\n", &save); tok;
         tok = strtok_r(NULL, " \t\r\n", &save)) {
        if (nf < 5)
            f[nf] = tok;
        nf++;
    }
    return nf;
}

/* Check one segment line's fields; its kind (0 sys, 1 chunk, 2 question)
 * and length on success. */
static int split_check(const char *name, uint64_t line_no, char *f[5], int nf,
                       int *kind, long long *len, struct kv_err *e)
{
    if (nf < 3)
        return kv_err_set(e, "'%s' line %llu: %d field%s, expected KIND "
                          "OFFSET LENGTH [KEY]", name,
                          (unsigned long long)line_no, nf, nf == 1 ? "" : "s");
    *kind = !strcmp(f[0], "sys") ? 0 : !strcmp(f[0], "chunk") ? 1 :
            !strcmp(f[0], "question") ? 2 : -1;
    if (*kind < 0)
        return kv_err_set(e, "'%s' line %llu, field 1 (kind): expected "
                          "sys, chunk or question, got '%.40s'", name,
                          (unsigned long long)line_no, f[0]);
    for (int k = 1; k <= 2; k++) {
        char *end;
        errno = 0;
        long long v = strtoll(f[k], &end, 10);
        if (*end || errno || end == f[k] || v < 0 || v >= KV_SIM_MAX_LEN)
            return kv_err_set(e, "'%s' line %llu, field %d (%s): %s: "
                              "'%.40s'", name, (unsigned long long)line_no,
                              k + 1, k == 1 ? "offset" : "length",
                              v < 0 ? "negative" : "expected an integer", f[k]);
        *len = v;
    }
    if (nf < 4 && *kind != 2 && *len > 0)
        return kv_err_set(e, "'%s' line %llu: %s segment without a key "
                          "(run 'kvchunk split' with --shape so that it "
                          "prints keys)", name, (unsigned long long)line_no,
                          f[0]);
    if (nf >= 4 && strpbrk(f[3], ":,/"))
        return kv_err_set(e, "'%s' line %llu, field 4 (key): ':', ',' or "
                          "'/' in '%.40s'", name, (unsigned long long)line_no,
                          f[3]);
    return 0;
}

/* Add a sys or chunk segment (kind 0 or 1) of len tokens to the prompt. */
static int split_add(struct split_prompt *pr, int kind, const char *key,
                     long long len)
{
    if (len == 0)
        return 0;
    if (ob_reserve(&pr->req, strlen(key) + 40) < 0)
        return -1;
    if (kind == 1) {
        if (!pr->have_sys && !pr->n_chunks)
            ob_str(&pr->req, "-", 1);
        pr->have_sys = 1;
        ob_str(&pr->req, pr->n_chunks++ ? "," : " ", 1);
    } else {
        pr->have_sys = 1;
    }
    ob_str(&pr->req, key, strlen(key));
    ob_str(&pr->req, ":", 1);
    ob_u64(&pr->req, (uint64_t)len);
    return 0;
}

/* The question ends the prompt: write its trace line, arriving at n_req /
 * rate seconds, and start the next prompt. */
static int split_emit(struct obuf *ob, struct split_prompt *pr, uint64_t n_req,
                      double rate, const char *tenant, long long q_len,
                      int64_t out_len)
{
    uint64_t us = rate > 0 ? (uint64_t)llround((double)n_req / rate * 1e6) : 0;
    if (ob_reserve(ob, 64 + strlen(tenant) + pr->req.n) < 0)
        return -1;
    ob_time(ob, us);
    ob_str(ob, " ", 1);
    ob_str(ob, tenant, strlen(tenant));
    ob_str(ob, " ", 1);
    if (!pr->have_sys)
        ob_str(ob, "-", 1);
    ob_str(ob, pr->req.p, pr->req.n);
    ob_str(ob, pr->n_chunks ? " " : " - ", pr->n_chunks ? 1 : 3);
    ob_u64(ob, (uint64_t)q_len);
    ob_str(ob, " ", 1);
    ob_u64(ob, (uint64_t)out_len);
    ob_str(ob, "\n", 1);
    pr->req.n = 0;
    pr->have_sys = pr->n_chunks = 0;
    pr->open_line = 0;
    return 0;
}

int kv_sim_from_split(FILE *in, const char *name, double rate,
                      const char *tenant, int64_t out_len, char **out,
                      size_t *n_out, struct kv_err *e)
{
    struct obuf ob = { 0 };
    struct split_prompt pr = { 0 };
    char *line = NULL;
    size_t line_cap = 0;
    uint64_t line_no = 0, n_req = 0;
    int rc = 0;
    name = name ? name : "<stdin>";
    if (!tenant || !*tenant || strpbrk(tenant, " \t\n"))
        return kv_err_set(e, "--tenant: expected a name without spaces");
    if (!(rate >= 0) || !isfinite(rate))
        return kv_err_set(e, "--rate: expected a rate >= 0");
    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &line_cap, in);
        if (got < 0) {
            if (ferror(in))
                rc = kv_err_set(e, "cannot read '%s': %s", name,
                                strerror(errno ? errno : EIO));
            break;
        }
        line_no++;
        char *f[5];
        int nf = split_fields(line, f), kind = 0;
        long long len = 0;
        if (nf == 0 || f[0][0] == '#')
            continue;
        if ((rc = split_check(name, line_no, f, nf, &kind, &len, e)))
            break;
        if (kind == 0 && pr.open_line) {
            rc = kv_err_set(e, "'%s' line %llu: sys line inside the prompt "
                            "begun on line %llu (no question line)", name,
                            (unsigned long long)line_no,
                            (unsigned long long)pr.open_line);
            break;
        }
        if (!pr.open_line)
            pr.open_line = line_no;
        if (kind == 2 ? split_emit(&ob, &pr, n_req++, rate, tenant, len,
                                   out_len)
                      : split_add(&pr, kind, nf >= 4 ? f[3] : "", len)) {
            rc = kv_err_set(e, "out of memory");
            break;
        }
    }
    if (!rc && pr.open_line)
        rc = kv_err_set(e, "'%s' line %llu: the prompt begun there has no "
                        "question line", name, (unsigned long long)pr.open_line);
    if (!rc) {
        *out = ob.p;
        *n_out = ob.n;
        ob.p = NULL;
    }
    free(ob.p);
    free(pr.req.p);
    free(line);
    return rc;
}
