/* chunk_sim_gen.c - kvchunk sim gen's and sim from-split's options read
 * and checked as the programs read them (chunk_sim.h), and from-split's
 * conversion after its --tenant check. */
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "chunk/chunk_sim.h"

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

/* A length distribution option over its default in d. */
static int opt_dist(const char *s, const char *opt, int64_t min,
                    struct kv_sim_dist *d, struct kv_err *e)
{
    return s ? kv_sim_dist_parse(s, opt, min, d, e) : 0;
}

int kv_chunk_sim_gen_load(const struct kv_chunk_sim_gen_opts *o,
                          struct kv_sim_gen_opts *g, struct kv_err *e)
{
    int64_t seed = 1;
    memset(g, 0, sizeof *g);
    g->seed = 1;
    g->requests = 1000;
    g->docs = 10000;
    g->topk = 5;
    g->zipf = 1.0;
    g->order = KV_SIM_ORDER_RETRIEVAL;
    g->sys_variants = 1;
    g->tenants = 1;
    g->turns = 1;
    g->conversations = 64;
    g->rate = 1.0;
    g->doc_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 512, 512 };
    g->sys_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 600, 600 };
    g->q_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 40, 40 };
    g->out_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 128, 128 };
    if (o->seed) {
        if (kv_parse_i64(o->seed, "--seed", 0, INT64_MAX, &seed, e) < 0)
            return -1;
        g->seed = (uint64_t)seed;
    }
    if (kv_parse_i64_opt(o->requests, "--requests", 0, (int64_t)1 << 40,
                         &g->requests, e) < 0 ||
        kv_parse_i64_opt(o->docs, "--docs", 1, 100000000, &g->docs, e) < 0 ||
        kv_parse_i64_opt(o->topk, "--topk", 0, 10000, &g->topk, e) < 0 ||
        kv_parse_f64_opt(o->zipf, "--zipf", 0, 10, &g->zipf, e) < 0 ||
        kv_parse_f64_opt(o->fresh, "--fresh", 0, 1, &g->fresh, e) < 0 ||
        kv_parse_i64_opt(o->sys_variants, "--sys-variants", 0, 100000000,
                         &g->sys_variants, e) < 0 ||
        kv_parse_i64_opt(o->tenants, "--tenants", 1, 100000000, &g->tenants, e) < 0 ||
        kv_parse_i64_opt(o->topics, "--topics", 0, 100000000, &g->topics, e) < 0 ||
        kv_parse_i64_opt(o->turns, "--turns", 1, 1000000, &g->turns, e) < 0 ||
        kv_parse_i64_opt(o->conversations, "--conversations", 1, 10000000,
                         &g->conversations, e) < 0 ||
        kv_parse_f64_opt(o->rate, "--rate", 0, 1e12, &g->rate, e) < 0)
        return -1;
    if (o->order && parse_order(o->order, &g->order) < 0)
        return kv_err_set(e, "--order: expected retrieval, sorted or random, "
                          "got '%s'", o->order);
    if (opt_dist(o->doc_len, "--doc-len", 1, &g->doc_len, e) < 0 ||
        opt_dist(o->sys_len, "--sys-len", 1, &g->sys_len, e) < 0 ||
        opt_dist(o->q_len, "--q-len", 0, &g->q_len, e) < 0 ||
        opt_dist(o->out_len, "--out-len", 0, &g->out_len, e) < 0)
        return -1;
    if (g->topics > g->docs)
        return kv_err_set(e, "--topics: %lld topics for %lld documents",
                          (long long)g->topics, (long long)g->docs);
    int64_t per = g->topics ? g->docs / g->topics : g->docs;
    if (g->topk > per)
        return kv_err_set(e, "--topk: %lld is more than the %lld documents "
                          "%s", (long long)g->topk, (long long)per,
                          g->topics ? "of a topic" : "there are");
    return 0;
}

int kv_chunk_sim_split_load(const struct kv_chunk_sim_split_opts *o,
                            double *rate, int64_t *out_len,
                            struct kv_err *e)
{
    *rate = 1.0;
    *out_len = 128;
    if (kv_parse_f64_opt(o->rate, "--rate", 0, 1e12, rate, e) < 0 ||
        kv_parse_i64_opt(o->out_len, "--out-len", 0, KV_SIM_MAX_LEN - 1, out_len,
                         e) < 0)
        return -1;
    return 0;
}

int kv_chunk_sim_split_run(const struct kv_chunk_sim_split_opts *o,
                           double rate, int64_t out_len, FILE *f,
                           const char *name, char **out, size_t *n_out,
                           int *usage, struct kv_err *e)
{
    const char *tn = o->tenant ? o->tenant : "-";
    *usage = 1;
    if (!*tn || strpbrk(tn, " \t\n"))
        return kv_err_set(e, "--tenant: expected a name without spaces");
    *usage = 0;
    return kv_sim_from_split(f, name, rate, tn, out_len, out, n_out, e);
}
