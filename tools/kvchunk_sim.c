/* kvchunk_sim.c - `kvchunk sim`: replay a RAG request trace through no
 * cache, vLLM prefix caching, kvchunk chunk caching and an infinite-cache
 * oracle at one byte budget (`kvchunk sim [TRACE]`), generate a synthetic
 * trace (`kvchunk sim gen`), and turn `kvchunk split` output of real
 * prompts into a trace (`kvchunk sim from-split`).  See man 1 kvchunk.
 */
#include <argtable2.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include "kv.h"
#include "sim.h"
#include "kvchunk_sim.h"

/* ---- kvchunk sim gen ----------------------------------------------------- */

static int parse_order(const char *s, int *out)
{
    if (!strcmp(s, "retrieval"))
        *out = KV_SIM_ORDER_RETRIEVAL;
    else if (!strcmp(s, "sorted"))
        *out = KV_SIM_ORDER_SORTED;
    else if (!strcmp(s, "random"))
        *out = KV_SIM_ORDER_RANDOM;
    else
        return -1;
    return 0;
}

/* Parse an integer option given as text (argtable's int is 32-bit). */
static int opt_i64(struct arg_str *a, const char *opt, int64_t min,
                   int64_t max, int64_t *out)
{
    struct kv_err e;
    if (!a->count)
        return 0;
    if (kv_parse_i64(a->sval[0], opt, min, max, out, &e) < 0)
        return kv_usage("%s", e.msg);
    return 0;
}

static int opt_f64(struct arg_str *a, const char *opt, double min,
                   double max, double *out)
{
    struct kv_err e;
    double v;
    if (!a->count)
        return 0;
    if (kv_parse_f64(a->sval[0], opt, &v, &e) < 0)
        return kv_usage("%s", e.msg);
    if (!(v >= min && v <= max))
        return kv_usage("%s: expected a number from %g to %g, got '%s'",
                        opt, min, max, a->sval[0]);
    *out = v;
    return 0;
}

static int gen_main(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_str *seed = arg_str0(NULL, "seed", "N", "random seed (1)");
    struct arg_str *reqs = arg_str0("n", "requests", "N",
                                    "number of requests (1000)");
    struct arg_str *docs = arg_str0(NULL, "docs", "N",
                                    "documents in the corpus (10000)");
    struct arg_str *topk = arg_str0("k", "topk", "K",
                                    "chunks retrieved per request (5)");
    struct arg_str *zipf = arg_str0(NULL, "zipf", "S",
                                    "Zipf exponent of document popularity "
                                    "(1.0; 0 = uniform)");
    struct arg_str *order = arg_str0(NULL, "order", "ORDER",
                                     "retrieval, sorted or random "
                                     "(retrieval)");
    struct arg_str *sysv = arg_str0(NULL, "sys-variants", "M",
                                    "system prompts to choose from (1; 0 = "
                                    "none)");
    struct arg_str *tenants = arg_str0(NULL, "tenants", "T",
                                       "tenants (1)");
    struct arg_str *topics = arg_str0(NULL, "topics,topic-clusters", "C",
                                      "topic clusters: a request retrieves "
                                      "from one topic (0 = none)");
    struct arg_str *turns = arg_str0(NULL, "turns", "N",
                                     "most turns per conversation (1 = "
                                     "single-turn)");
    struct arg_str *convs = arg_str0(NULL, "conversations", "N",
                                     "conversations open at once (64)");
    struct arg_str *rate = arg_str0(NULL, "rate", "R",
                                    "Poisson arrivals per second (1; 0 = "
                                    "all at time 0)");
    struct arg_str *doc_len = arg_str0(NULL, "doc-len", "DIST",
                                       "document length: N, A-B or M~S "
                                       "(512)");
    struct arg_str *sys_len = arg_str0(NULL, "sys-len", "DIST",
                                       "system prompt length (600)");
    struct arg_str *q_len = arg_str0(NULL, "q-len", "DIST",
                                     "question length (40)");
    struct arg_str *out_len = arg_str0(NULL, "out-len", "DIST",
                                       "output length (128)");
    struct arg_file *out = arg_file0("o", "output", "FILE",
                                     "write the trace to FILE");
    struct arg_end *end = arg_end(20);
    void *table[] = { help, version, seed, reqs, docs, topk, zipf, order,
                      sysv, tenants, topics, turns, convs, rate, doc_len,
                      sys_len, q_len, out_len, out, end };
    struct kv_sim_gen_opts o;
    struct kv_err e;
    int rc;

    kv_setprogname("kvchunk sim gen");
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.requests = 1000;
    o.docs = 10000;
    o.topk = 5;
    o.zipf = 1.0;
    o.order = KV_SIM_ORDER_RETRIEVAL;
    o.sys_variants = 1;
    o.tenants = 1;
    o.turns = 1;
    o.conversations = 64;
    o.rate = 1.0;
    o.doc_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 512, 512 };
    o.sys_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 600, 600 };
    o.q_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 40, 40 };
    o.out_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 128, 128 };
    rc = kv_arg_parse(table, argc, argv, help, version, end,
                      "\nWrite a synthetic RAG request trace (one request per "
                      "line) for 'kvchunk sim'.",
                      "Deterministic: the same options and --seed give the "
                      "same bytes.  See man 1 kvchunk.");
    if (rc >= 0)
        goto done;
    int64_t v = 1;
    if (seed->count) {
        if ((rc = opt_i64(seed, "--seed", 0, INT64_MAX, &v)))
            goto done;
        o.seed = (uint64_t)v;
    }
    if ((rc = opt_i64(reqs, "--requests", 0, (int64_t)1 << 40, &o.requests)) ||
        (rc = opt_i64(docs, "--docs", 1, 100000000, &o.docs)) ||
        (rc = opt_i64(topk, "--topk", 0, 10000, &o.topk)) ||
        (rc = opt_f64(zipf, "--zipf", 0, 10, &o.zipf)) ||
        (rc = opt_i64(sysv, "--sys-variants", 0, 100000000,
                      &o.sys_variants)) ||
        (rc = opt_i64(tenants, "--tenants", 1, 100000000, &o.tenants)) ||
        (rc = opt_i64(topics, "--topics", 0, 100000000, &o.topics)) ||
        (rc = opt_i64(turns, "--turns", 1, 1000000, &o.turns)) ||
        (rc = opt_i64(convs, "--conversations", 1, 10000000,
                      &o.conversations)) ||
        (rc = opt_f64(rate, "--rate", 0, 1e12, &o.rate)))
        goto done;
    if (order->count && parse_order(order->sval[0], &o.order) < 0) {
        rc = kv_usage("--order: expected retrieval, sorted or random, got "
                      "'%s'", order->sval[0]);
        goto done;
    }
    if ((doc_len->count && kv_sim_dist_parse(doc_len->sval[0], "--doc-len",
                                              1, &o.doc_len, &e) < 0) ||
        (sys_len->count && kv_sim_dist_parse(sys_len->sval[0], "--sys-len",
                                              1, &o.sys_len, &e) < 0) ||
        (q_len->count && kv_sim_dist_parse(q_len->sval[0], "--q-len", 0,
                                            &o.q_len, &e) < 0) ||
        (out_len->count && kv_sim_dist_parse(out_len->sval[0], "--out-len",
                                              0, &o.out_len, &e) < 0)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if (o.topics > o.docs) {
        rc = kv_usage("--topics: %lld topics for %lld documents",
                      (long long)o.topics, (long long)o.docs);
        goto done;
    }
    if (o.topk > (o.topics ? o.docs / o.topics : o.docs)) {
        rc = kv_usage("--topk: %lld is more than the %lld documents %s",
                      (long long)o.topk,
                      (long long)(o.topics ? o.docs / o.topics : o.docs),
                      o.topics ? "of a topic" : "there are");
        goto done;
    }
    {
        struct kv_out ko;
        const char *path = out->count ? out->filename[0] : NULL;
        if (kv_out_open(&ko, path, &e) < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        if (kv_sim_gen(ko.f, &o, &e) < 0) {
            kv_out_abort(&ko);
            rc = kv_fail_err(&e);
            goto done;
        }
        if (path) {
            rc = kv_out_commit(&ko, &e) < 0 ? kv_fail_err(&e) : 0;
            if (!rc)
                rc = kv_close_stdout();
        } else {
            rc = kv_close_stdout();
        }
    }
done:
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}

/* ---- kvchunk sim from-split ---------------------------------------------- */

static int split_main(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_str *rate = arg_str0(NULL, "rate", "R",
                                    "request i arrives at i/R seconds (1; 0 "
                                    "= all at 0)");
    struct arg_str *tenant = arg_str0(NULL, "tenant", "NAME",
                                      "tenant of every request (-)");
    struct arg_str *out_len = arg_str0(NULL, "out-len", "N",
                                       "output length of every request "
                                       "(128)");
    struct arg_file *out = arg_file0("o", "output", "FILE",
                                     "write the trace to FILE");
    struct arg_file *in = arg_filen(NULL, NULL, "FILE", 0, 1,
                                    "'kvchunk split' text output of many "
                                    "prompts (default stdin)");
    struct arg_end *end = arg_end(20);
    void *table[] = { help, version, rate, tenant, out_len, out, in, end };
    struct kv_err e;
    double r = 1.0;
    int64_t ol = 128;
    int rc;

    kv_setprogname("kvchunk sim from-split");
    rc = kv_arg_parse(table, argc, argv, help, version, end,
                      "\nTurn the segment lists 'kvchunk split' prints "
                      "(KIND OFFSET LENGTH KEY) for many prompts into a "
                      "trace for 'kvchunk sim', keys becoming ids.", NULL);
    if (rc >= 0)
        goto done;
    if ((rc = opt_f64(rate, "--rate", 0, 1e12, &r)) ||
        (rc = opt_i64(out_len, "--out-len", 0, KV_SIM_MAX_LEN - 1, &ol)))
        goto done;
    {
        const char *path = in->count ? in->filename[0] : NULL;
        const char *tn = tenant->count ? tenant->sval[0] : "-";
        FILE *f = kv_open_in(path, &e);
        char *buf = NULL;
        size_t n = 0;
        if (!f) {
            rc = kv_fail_err(&e);
            goto done;
        }
        if (!*tn || strpbrk(tn, " \t\n")) {
            kv_close_in(f);
            rc = kv_usage("--tenant: expected a name without spaces");
            goto done;
        }
        rc = kv_sim_from_split(f, kv_path_name(path, 0), r, tn, ol, &buf, &n,
                               &e);
        kv_close_in(f);
        if (rc < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        struct kv_out ko;
        const char *opath = out->count ? out->filename[0] : NULL;
        if (kv_out_open(&ko, opath, &e) < 0) {
            free(buf);
            rc = kv_fail_err(&e);
            goto done;
        }
        if (n && fwrite(buf, 1, n, ko.f) != n) {
            free(buf);
            kv_out_abort(&ko);
            rc = kv_fail("write error on '%s'", kv_path_name(opath, 1));
            goto done;
        }
        free(buf);
        if (opath && kv_out_commit(&ko, &e) < 0)
            rc = kv_fail_err(&e);
        else
            rc = kv_close_stdout();
    }
done:
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}

/* ---- kvchunk sim (replay) ------------------------------------------------ */

#define KV_SIM_MAX_CAPS 64

struct opts {
    unsigned policies;
    struct kv_sim_opts sim;
    int csv;
    int verbose, quiet;
    int jobs;
    const char *trace;
    const char *output;
    int64_t caps[KV_SIM_MAX_CAPS];   /* budgets in tokens, a sweep */
    int n_caps;
    const char *tier;
};

/* "12.3G": a byte count for the table. */
static void human(char *buf, size_t n, double v)
{
    static const char units[] = "BKMGTPE";
    int u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.1f%c", v, units[u]);
}

static double rate(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

/* One replay instance: a budget (index into caps, -1 for the
 * capacity-free policies none and oracle) and the policies it runs. */
struct unit {
    struct kv_sim *s;
    int cap;
    unsigned policies;
};

/* The unit holding policy p at budget c. */
static const struct kv_sim *unit_for(const struct unit *u, int n_units,
                                     int p, int c)
{
    for (int i = 0; i < n_units; i++)
        if (((u[i].policies >> p) & 1u) &&
            (u[i].cap == c || u[i].cap < 0))
            return u[i].s;
    return u[0].s;
}

/* Write the results: a row per budget and policy. */
static void write_results(FILE *f, const struct opts *o, const struct unit *u,
                          int n_units)
{
    struct kv_sim_stats none, st;
    double bpt = (double)o->sim.bytes_per_token;
    int sweep = o->n_caps > 1;
    kv_sim_get(unit_for(u, n_units, KV_SIM_NONE, -1), KV_SIM_NONE, &none);
    double none_mean = none.requests ? none.ttft_sum_us / none.requests : 0;
    if (o->csv)
        fprintf(f, "policy,token_hit_rate,chunk_hit_rate,requests,"
                "prompt_tokens,hit_tokens,prefill_tokens,chunk_slots,"
                "chunk_hits,bytes_loaded,bytes_stored,bytes_rotated,"
                "evictions,bytes_evicted,entries_max,ttft_mean_ms,"
                "ttft_p50_ms,ttft_p99_ms,speedup_vs_none,queued_ttft_mean_ms,"
                "queued_ttft_p99_ms,capacity_bytes,capacity_tokens,"
                "speedup_vs_prefix\n");
    else
        fprintf(f, "%s%-13s %9s %9s %14s %8s %8s %10s %9s %9s %7s %10s\n",
                sweep ? "capacity " : "", "policy", "token_hit", "chunk_hit",
                "prefill_tokens", "loaded", "stored", "evictions", "ttft_ms",
                "p99_ms", "speedup", "queued_ms");
    static const int order[KV_SIM_NPOLICIES] = {
        KV_SIM_NONE, KV_SIM_PREFIX, KV_SIM_PREFIX_RADIX, KV_SIM_PREFIX_SORTED,
        KV_SIM_CHUNK, KV_SIM_CHUNK_LFU, KV_SIM_ORACLE
    };
    for (int c = 0; c < o->n_caps; c++) {
        double cap_bytes = (double)o->caps[c] * bpt, prefix_mean = 0;
        if ((o->policies >> KV_SIM_PREFIX) & 1u) {
            kv_sim_get(unit_for(u, n_units, KV_SIM_PREFIX, c), KV_SIM_PREFIX,
                       &st);
            prefix_mean = st.requests ? st.ttft_sum_us / st.requests : 0;
        }
        for (int q = 0; q < KV_SIM_NPOLICIES; q++) {
            int p = order[q];
            if (!((o->policies >> p) & 1u))
                continue;
            kv_sim_get(unit_for(u, n_units, p, c), p, &st);
            double mean = st.requests ? st.ttft_sum_us / st.requests : 0;
            double qmean = st.requests ? st.queued_sum_us / st.requests : 0;
            double speed = mean > 0 ? none_mean / mean : 1.0;
            if (o->csv) {
                fprintf(f, "%s,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu,%llu,%.0f,"
                        "%.0f,%.0f,%llu,%.0f,%llu,%.4f,%.4f,%.4f,%.4f,%.4f,"
                        "%.4f,%.0f,%lld,",
                        kv_sim_policy_name(p),
                        rate(st.hit_tokens, st.prompt_tokens),
                        rate(st.chunk_hits, st.chunk_slots),
                        (unsigned long long)st.requests,
                        (unsigned long long)st.prompt_tokens,
                        (unsigned long long)st.hit_tokens,
                        (unsigned long long)st.prefill_tokens,
                        (unsigned long long)st.chunk_slots,
                        (unsigned long long)st.chunk_hits,
                        (double)st.loaded_tokens * bpt,
                        (double)st.stored_tokens * bpt,
                        (double)st.rotated_tokens * bpt,
                        (unsigned long long)st.evictions,
                        (double)st.evicted_tokens * bpt,
                        (unsigned long long)st.entries_max,
                        mean / 1e3, kv_sim_ttft_quantile(&st, 0.5) / 1e3,
                        kv_sim_ttft_quantile(&st, 0.99) / 1e3, speed,
                        qmean / 1e3, kv_sim_queued_quantile(&st, 0.99) / 1e3,
                        cap_bytes, (long long)o->caps[c]);
                if (prefix_mean > 0 && mean > 0)
                    fprintf(f, "%.4f\n", prefix_mean / mean);
                else
                    fputc('\n', f);
            } else {
                char ld[16], sd[16], cb[16];
                human(ld, sizeof ld, (double)st.loaded_tokens * bpt);
                human(sd, sizeof sd, (double)st.stored_tokens * bpt);
                human(cb, sizeof cb, cap_bytes);
                if (sweep)
                    fprintf(f, "%8s ", cb);
                fprintf(f, "%-13s %9.4f %9.4f %14llu %8s %8s %10llu %9.2f "
                        "%9.2f %7.2f %10.2f\n", kv_sim_policy_name(p),
                        rate(st.hit_tokens, st.prompt_tokens),
                        rate(st.chunk_hits, st.chunk_slots),
                        (unsigned long long)st.prefill_tokens, ld, sd,
                        (unsigned long long)st.evictions, mean / 1e3,
                        kv_sim_ttft_quantile(&st, 0.99) / 1e3, speed,
                        qmean / 1e3);
            }
        }
    }
}

/* The replay: the trace is read in batches on the calling thread; each
 * batch then goes through every unit (a budget of the sweep and a group of
 * policies: prefix caching, chunk caching, and the budget-free none and
 * oracle), the units spread over -j threads.  Each unit keeps its own
 * conversations, so the results do not depend on -j. */
#define BATCH 4096

struct batch {
    struct kv_sim_req *req;
    size_t n;
    struct kv_sim_seg *seg;
    size_t n_seg, cap_seg;
};

struct feed {
    struct unit *u;
    const struct batch *b;
    int *rc;
    struct kv_err *e;
};

static void feed_unit(void *ctx, size_t i)
{
    struct feed *fd = ctx;
    if (fd->rc[i] < 0)
        return;
    for (size_t k = 0; k < fd->b->n; k++)
        if (kv_sim_feed(fd->u[i].s, &fd->b->req[k], &fd->e[i]) < 0) {
            fd->rc[i] = -1;
            return;
        }
}

/* Copy a request (valid until the next read) into the batch. */
static int batch_add(struct batch *b, const struct kv_sim_req *r)
{
    if (b->n_seg + r->n_chunks > b->cap_seg) {
        size_t nc = (b->n_seg + r->n_chunks) * 2 + 64;
        struct kv_sim_seg *q = realloc(b->seg, nc * sizeof *q);
        if (!q)
            return -1;
        b->seg = q;
        b->cap_seg = nc;
    }
    struct kv_sim_req *d = &b->req[b->n++];
    *d = *r;
    d->sys.name = "";
    d->sys.name_len = 0;
    /* chunks: an offset until the batch is complete */
    d->chunks = (struct kv_sim_seg *)(uintptr_t)b->n_seg;
    for (size_t i = 0; i < r->n_chunks; i++) {
        b->seg[b->n_seg] = r->chunks[i];
        b->seg[b->n_seg].name = "";
        b->seg[b->n_seg].name_len = 0;
        b->n_seg++;
    }
    return 0;
}

static void batch_seal(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        b->req[i].chunks = b->seg + (uintptr_t)b->req[i].chunks;
}

static int run(struct opts *o)
{
    struct kv_err e, ue[2 * KV_SIM_MAX_CAPS + 1];
    struct kv_sim_reader *rd = NULL;
    struct unit u[2 * KV_SIM_MAX_CAPS + 1];
    int urc[2 * KV_SIM_MAX_CAPS + 1];
    int n_units = 0;
    struct kv_sim_opts check = o->sim;
    struct kv_sim_req req;
    struct kv_progress pr;
    struct batch bt;
    struct stat sb;
    uint64_t n = 0, total = 0;
    double t0 = kv_now();
    int rc = 0, got = 1;
    const unsigned none = 1u << KV_SIM_NONE;
    const unsigned groups[3] = {
        (1u << KV_SIM_PREFIX) | (1u << KV_SIM_PREFIX_SORTED) |
            (1u << KV_SIM_PREFIX_RADIX),
        (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU),
        none | (1u << KV_SIM_ORACLE),
    };
    FILE *f = kv_open_in(o->trace, &e);
    if (!f)
        return kv_fail_err(&e);
    memset(&bt, 0, sizeof bt);
    memset(u, 0, sizeof u);
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode))
        total = (uint64_t)sb.st_size;
    /* the units */
    for (int g = 0; g < 3; g++) {
        unsigned pol = o->policies & groups[g];
        if (g == 2)
            pol |= none;   /* always: the speedups need it */
        if (!pol)
            continue;
        for (int c = 0; c < (g == 2 ? 1 : o->n_caps); c++) {
            struct kv_sim_opts so = o->sim;
            so.policies = pol | none;
            so.capacity_tokens = o->caps[g == 2 ? 0 : c];
            u[n_units].cap = g == 2 ? -1 : c;
            u[n_units].policies = pol;
            if (kv_sim_create(&u[n_units].s, &so, &e) < 0) {
                rc = kv_fail_err(&e);
                goto done;
            }
            urc[n_units] = 0;
            n_units++;
        }
    }
    /* every segment must fit the smallest budget */
    for (int c = 0; c < o->n_caps; c++)
        if (o->caps[c] < check.capacity_tokens)
            check.capacity_tokens = o->caps[c];
    bt.req = malloc(BATCH * sizeof *bt.req);
    if (!bt.req) {
        rc = kv_fail("out of memory");
        goto done;
    }
    if (kv_sim_reader_open(&rd, f, kv_path_name(o->trace, 0), &e) < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    kv_progress_start(&pr, "replaying", o->quiet);
    while (got > 0) {
        bt.n = bt.n_seg = 0;
        while (bt.n < BATCH && (got = kv_sim_reader_next(rd, &req, &e)) > 0) {
            if (kv_sim_check(&check, &req, &e) < 0) {
                got = -2;
                break;
            }
            if (batch_add(&bt, &req) < 0) {
                kv_err_set(&e, "out of memory");
                got = -3;
                break;
            }
        }
        if (got < 0)
            break;
        batch_seal(&bt);
        struct feed fd = { u, &bt, urc, ue };
        kv_parallel_for((size_t)n_units, o->jobs, feed_unit, &fd);
        for (int i = 0; i < n_units; i++)
            if (urc[i] < 0) {
                e = ue[i];
                got = -3;
            }
        n += bt.n;
        kv_progress_update(&pr, total ? (uint64_t)ftello(f) : n, total);
    }
    kv_progress_end(&pr);
    if (got == -2) {
        /* kv_sim_check names the line; add the file */
        rc = kv_fail("'%s' %s", kv_path_name(o->trace, 0), e.msg);
        goto done;
    }
    if (got < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    if (o->verbose) {
        struct rusage ru;
        size_t mem = 0;
        for (int i = 0; i < n_units; i++)
            mem += kv_sim_mem(u[i].s);
        getrusage(RUSAGE_SELF, &ru);
        kv_warn("%llu requests in %.3f s (%d replays, -j %d); simulator "
                "tables %.1f MiB, max RSS %.1f MiB", (unsigned long long)n,
                kv_now() - t0, n_units, o->jobs, (double)mem / 1048576.0,
                ru.ru_maxrss / 1024.0);
        for (int c = 0; c < o->n_caps; c++)
            kv_warn("capacity %.0f bytes = %lld tokens of %llu bytes (%lld "
                    "blocks of %lld)",
                    (double)o->caps[c] * (double)o->sim.bytes_per_token,
                    (long long)o->caps[c],
                    (unsigned long long)o->sim.bytes_per_token,
                    (long long)(o->caps[c] / o->sim.block_size),
                    (long long)o->sim.block_size);
    }
    {
        struct kv_out ko;
        if (kv_out_open(&ko, o->output, &e) < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        write_results(ko.f, o, u, n_units);
        if (o->output) {
            if (kv_out_commit(&ko, &e) < 0) {
                rc = kv_fail_err(&e);
                goto done;
            }
        }
        rc = kv_close_stdout();
    }
done:
    for (int i = 0; i < n_units; i++)
        kv_sim_free(u[i].s);
    free(bt.req);
    free(bt.seg);
    kv_sim_reader_free(rd);
    kv_close_in(f);
    return rc;
}

/* Parse a comma-separated list of budgets into o->caps (tokens). */
static int parse_caps(struct opts *o, const char *list, int in_bytes,
                      int64_t B)
{
    const char *opt = in_bytes ? "--capacity-bytes" : "--capacity-tokens";
    const char *p = list;
    struct kv_err e;
    o->n_caps = 0;
    for (;;) {
        char buf[64];
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        size_t v;
        if (len == 0 || len >= sizeof buf)
            return kv_usage("%s: expected a size or a comma-separated list, "
                            "got '%s'", opt, list);
        if (o->n_caps == KV_SIM_MAX_CAPS)
            return kv_usage("%s: at most %d budgets", opt, KV_SIM_MAX_CAPS);
        memcpy(buf, p, len);
        buf[len] = 0;
        if (kv_parse_size(buf, &v, &e) < 0)
            return kv_usage("%s: %s", opt, e.msg);
        if (in_bytes) {
            if (v < o->sim.bytes_per_token)
                return kv_usage("%s: %zu bytes is less than one token (%llu "
                                "bytes)", opt, v,
                                (unsigned long long)o->sim.bytes_per_token);
            v /= o->sim.bytes_per_token;
        }
        if (v < 1 || v > (size_t)1 << 50)
            return kv_usage("%s: expected a count from 1 to 2^50 tokens, got "
                            "'%s'", opt, buf);
        if ((o->policies & ((1u << KV_SIM_PREFIX) |
                            (1u << KV_SIM_PREFIX_SORTED))) &&
            (int64_t)v < B)
            return kv_usage("capacity of %zu tokens is smaller than one block "
                            "of %lld", v, (long long)B);
        o->caps[o->n_caps++] = (int64_t)v;
        if (!c)
            break;
        p = c + 1;
    }
    o->sim.capacity_tokens = o->caps[0];
    return 0;
}

static int replay_main(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_str *cap_t = arg_str0(NULL, "capacity-tokens", "N[,N..]",
                                     "cache budget in tokens; a list sweeps");
    struct arg_str *cap_b = arg_str0(NULL, "capacity-bytes", "SIZE[,SIZE..]",
                                     "cache budget in bytes, K/M/G/T "
                                     "suffixes (16G); a list sweeps");
    struct arg_str *pol = arg_str0("p", "policies", "LIST",
                                   "none,prefix,prefix-radix,prefix-sorted,"
                                   "chunk,chunk-lfu,oracle (none,prefix,"
                                   "chunk,oracle)");
    struct arg_lit *csv = arg_lit0(NULL, "csv", "CSV with a header line");
    struct arg_str *bs = arg_str0("B", "block-size", "N",
                                  "prefix caching block size (16)");
    struct arg_str *layers = arg_str0(NULL, "layers", "L", "layers (32)");
    struct arg_str *heads = arg_str0(NULL, "kv-heads", "H",
                                     "KV heads (8)");
    struct arg_str *hdim = arg_str0(NULL, "head-dim", "D",
                                    "head dimension (128)");
    struct arg_str *dtype = arg_str0(NULL, "dtype", "T",
                                     "KV dtype: fp8, f16, bf16, f32 (bf16)");
    struct arg_str *ctx = arg_str0(NULL, "chunk-context", "MODE",
                                   "sys: chunk KV depends on the system "
                                   "prompt; isolated (or none): it does not "
                                   "(sys)");
    struct arg_str *salt = arg_str0(NULL, "salt", "MODE",
                                    "tenant: tenants never share entries; "
                                    "none (none)");
    struct arg_str *maxses = arg_str0(NULL, "max-sessions", "N",
                                      "conversations remembered (100000)");
    struct arg_str *us_tok = arg_str0(NULL, "us-per-token", "A",
                                      "prefill microseconds per computed "
                                      "token (80)");
    struct arg_str *us_pair = arg_str0(NULL, "us-per-pair", "B",
                                       "prefill microseconds per computed "
                                       "token and key it attends to "
                                       "(0.0035)");
    struct arg_str *tier = arg_str0(NULL, "tier", "TIER",
                                    "where chunk KV is loaded from: hbm, "
                                    "host, disk, net (hbm)");
    struct arg_str *bw_hbm = arg_str0(NULL, "bw-hbm", "GB/s",
                                      "device copy bandwidth (1000)");
    struct arg_str *bw_host = arg_str0(NULL, "bw-host", "GB/s",
                                       "host-to-device bandwidth (25)");
    struct arg_str *bw_disk = arg_str0(NULL, "bw-disk", "GB/s",
                                       "disk read bandwidth (5)");
    struct arg_str *bw_net = arg_str0(NULL, "bw-net", "GB/s",
                                      "network store bandwidth (3)");
    struct arg_str *bw_rope = arg_str0(NULL, "bw-rope", "GB/s",
                                       "K re-rotation bandwidth (200)");
    struct arg_file *out = arg_file0("o", "output", "FILE",
                                     "write the results to FILE");
    struct arg_str *jobs = arg_str0("j", "jobs", "N",
                                    "threads (0 = all cores)");
    struct arg_lit *quiet = arg_lit0("q", "quiet", "no progress line");
    struct arg_lit *verbose = arg_lit0("v", "verbose",
                                       "timings and memory on stderr");
    struct arg_file *trace = arg_filen(NULL, NULL, "TRACE", 0, 1,
                                       "trace file (default stdin)");
    struct arg_end *end = arg_end(20);
    void *table[] = { help, version, cap_t, cap_b, pol, csv, bs, layers,
                      heads, hdim, dtype, ctx, salt, maxses, us_tok, us_pair,
                      tier, bw_hbm, bw_host, bw_disk, bw_net, bw_rope, out,
                      jobs, quiet, verbose, trace, end };
    struct opts o;
    struct kv_err e;
    int64_t L = 32, H = 8, D = 128, B = 16, ms = 100000, elt = 2, nj = 0;
    double bw[4] = { 1000, 25, 5, 3 };
    int rc;

    kv_setprogname("kvchunk sim");
    memset(&o, 0, sizeof o);
    o.policies = (1u << KV_SIM_NONE) | (1u << KV_SIM_PREFIX) |
                 (1u << KV_SIM_CHUNK) | (1u << KV_SIM_ORACLE);
    o.sim.ctx_sys = 1;
    o.sim.cost = (struct kv_sim_cost){ 80, 0.0035, 1000, 200 };
    rc = kv_arg_parse(table, argc, argv, help, version, end,
                      "\nReplay a request trace through cache policies at one "
                      "byte budget and print, per policy, hit rates, prefill "
                      "tokens, bytes moved, evictions and modelled TTFT.",
                      "Subcommands: 'kvchunk sim gen' writes a synthetic "
                      "trace, 'kvchunk sim from-split' converts 'kvchunk "
                      "split' output.  See man 1 kvchunk.");
    if (rc >= 0)
        goto done;
    if (pol->count && kv_sim_policy_parse(pol->sval[0], &o.policies, &e) < 0) {
        rc = kv_usage("--policies: %s", e.msg);
        goto done;
    }
    if ((rc = opt_i64(bs, "--block-size", 1, 1 << 20, &B)) ||
        (rc = opt_i64(layers, "--layers", 1, 100000, &L)) ||
        (rc = opt_i64(heads, "--kv-heads", 1, 100000, &H)) ||
        (rc = opt_i64(hdim, "--head-dim", 1, 100000, &D)) ||
        (rc = opt_i64(maxses, "--max-sessions", 1, 1000000000, &ms)) ||
        (rc = opt_i64(jobs, "-j", 0, 1024, &nj)) ||
        (rc = opt_f64(us_tok, "--us-per-token", 0, 1e12,
                      &o.sim.cost.us_token)) ||
        (rc = opt_f64(us_pair, "--us-per-pair", 0, 1e12,
                      &o.sim.cost.us_pair)) ||
        (rc = opt_f64(bw_hbm, "--bw-hbm", 1e-9, 1e12, &bw[0])) ||
        (rc = opt_f64(bw_host, "--bw-host", 1e-9, 1e12, &bw[1])) ||
        (rc = opt_f64(bw_disk, "--bw-disk", 1e-9, 1e12, &bw[2])) ||
        (rc = opt_f64(bw_net, "--bw-net", 1e-9, 1e12, &bw[3])) ||
        (rc = opt_f64(bw_rope, "--bw-rope", 1e-9, 1e12,
                      &o.sim.cost.bw_rope)))
        goto done;
    if (dtype->count) {
        const char *d = dtype->sval[0];
        if (!strcmp(d, "fp8") || !strcmp(d, "fp8e4m3") || !strcmp(d, "u8") ||
            !strcmp(d, "i8"))
            elt = 1;
        else if (!strcmp(d, "f16") || !strcmp(d, "bf16") ||
                 !strcmp(d, "float16") || !strcmp(d, "bfloat16"))
            elt = 2;
        else if (!strcmp(d, "f32") || !strcmp(d, "float32"))
            elt = 4;
        else {
            rc = kv_usage("--dtype: expected fp8, f16, bf16 or f32, got '%s'",
                          d);
            goto done;
        }
    }
    o.sim.bytes_per_token = (uint64_t)(2 * L * H * D * elt); /* <= 8e15 */
    o.sim.block_size = B;
    o.sim.max_sessions = (size_t)ms;
    if (ctx->count) {
        if (!strcmp(ctx->sval[0], "sys"))
            o.sim.ctx_sys = 1;
        else if (!strcmp(ctx->sval[0], "isolated") ||
                 !strcmp(ctx->sval[0], "none"))
            o.sim.ctx_sys = 0;
        else {
            rc = kv_usage("--chunk-context: expected sys or isolated "
                          "(none), got '%s'", ctx->sval[0]);
            goto done;
        }
    }
    if (salt->count) {
        if (!strcmp(salt->sval[0], "tenant"))
            o.sim.salt_tenant = 1;
        else if (strcmp(salt->sval[0], "none")) {
            rc = kv_usage("--salt: expected none or tenant, got '%s'",
                          salt->sval[0]);
            goto done;
        }
    }
    {
        static const char *const tiers[4] = { "hbm", "host", "disk", "net" };
        int ti = 0;
        if (tier->count) {
            for (ti = 0; ti < 4 && strcmp(tier->sval[0], tiers[ti]); ti++)
                ;
            if (ti == 4) {
                rc = kv_usage("--tier: expected hbm, host, disk or net, got "
                              "'%s'", tier->sval[0]);
                goto done;
            }
        }
        o.sim.cost.bw_load = bw[ti];
        o.tier = tiers[ti];
    }
    if (cap_t->count && cap_b->count) {
        rc = kv_usage("--capacity-tokens and --capacity-bytes: give one");
        goto done;
    }
    if ((rc = parse_caps(&o, cap_t->count ? cap_t->sval[0] :
                         cap_b->count ? cap_b->sval[0] : "16G",
                         !cap_t->count, B)))
        goto done;
    o.sim.policies = o.policies | (1u << KV_SIM_NONE);
    o.csv = csv->count > 0;
    o.quiet = quiet->count > 0;
    o.verbose = verbose->count > 0;
    o.jobs = nj ? (int)nj : kv_nproc();
    o.trace = trace->count ? trace->filename[0] : NULL;
    o.output = out->count ? out->filename[0] : NULL;
    rc = run(&o);
done:
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}

int kvchunk_sim_main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "gen"))
        return gen_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "from-split"))
        return split_main(argc - 1, argv + 1);
    return replay_main(argc, argv);
}
