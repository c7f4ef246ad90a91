/* kvchunk sim gen: a synthetic request trace. */
#include "kvchunk.h"

struct simgen_args {
    struct arg_lit *help, *version;
    struct arg_str *seed, *reqs, *docs, *topk, *zipf, *fresh, *order, *sysv,
                   *tenants,
                   *topics, *turns, *convs, *rate, *doc_len, *sys_len, *q_len,
                   *out_len;
    struct arg_file *out;
    struct arg_end *end;
};

/* sim gen's options, each default in its glossary; returns the count. */
static int simgen_args_make(struct simgen_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version");
    t[n++] = a->seed = arg_str0(NULL, "seed", "N", "random seed (1)");
    t[n++] = a->reqs = arg_str0("n", "requests", "N",
                                "number of requests (1000)");
    t[n++] = a->docs = arg_str0(NULL, "docs", "N",
                                "documents in the corpus (10000)");
    t[n++] = a->topk = arg_str0("k", "topk", "K",
                                "chunks retrieved per request (5)");
    t[n++] = a->zipf = arg_str0(NULL, "zipf", "S",
                                "Zipf exponent of document popularity "
                                "(1.0; 0 = uniform)");
    t[n++] = a->fresh = arg_str0(NULL, "fresh", "F",
                                 "share of retrieved documents never seen "
                                 "before; reuse is 1 - F (0)");
    t[n++] = a->order = arg_str0(NULL, "order", "ORDER",
                                 "retrieval, sorted or random (retrieval)");
    t[n++] = a->sysv = arg_str0(NULL, "sys-variants", "M",
                                "system prompts to choose from (1; 0 = "
                                "none)");
    t[n++] = a->tenants = arg_str0(NULL, "tenants", "T", "tenants (1)");
    t[n++] = a->topics = arg_str0(NULL, "topics,topic-clusters", "C",
                                  "topic clusters: a request retrieves "
                                  "from one topic (0 = none)");
    t[n++] = a->turns = arg_str0(NULL, "turns", "N",
                                 "most turns per conversation (1 = "
                                 "single-turn)");
    t[n++] = a->convs = arg_str0(NULL, "conversations", "N",
                                 "conversations open at once (64)");
    t[n++] = a->rate = arg_str0(NULL, "rate", "R",
                                "Poisson arrivals per second (1; 0 = "
                                "all at time 0)");
    t[n++] = a->doc_len = arg_str0(NULL, "doc-len", "DIST",
                                   "document length: N, A-B or M~S (512)");
    t[n++] = a->sys_len = arg_str0(NULL, "sys-len", "DIST",
                                   "system prompt length (600)");
    t[n++] = a->q_len = arg_str0(NULL, "q-len", "DIST",
                                 "question length (40)");
    t[n++] = a->out_len = arg_str0(NULL, "out-len", "DIST",
                                   "output length (128)");
    t[n++] = a->out = arg_file0("o", "output", "FILE",
                                "write the trace to FILE");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* The generator's options over the defaults in o. */
static int simgen_values(const struct simgen_args *a,
                         struct kv_sim_gen_opts *o)
{
    struct kv_err e;
    int64_t v = 1;
    int rc;
    if (a->seed->count) {
        if ((rc = kv_opt_i64(a->seed, "--seed", 0, INT64_MAX, &v)))
            return rc;
        o->seed = (uint64_t)v;
    }
    if ((rc = kv_opt_i64(a->reqs, "--requests", 0, (int64_t)1 << 40,
                         &o->requests)) ||
        (rc = kv_opt_i64(a->docs, "--docs", 1, 100000000, &o->docs)) ||
        (rc = kv_opt_i64(a->topk, "--topk", 0, 10000, &o->topk)) ||
        (rc = opt_f64(a->zipf, "--zipf", 0, 10, &o->zipf)) ||
        (rc = opt_f64(a->fresh, "--fresh", 0, 1, &o->fresh)) ||
        (rc = kv_opt_i64(a->sysv, "--sys-variants", 0, 100000000,
                         &o->sys_variants)) ||
        (rc = kv_opt_i64(a->tenants, "--tenants", 1, 100000000,
                         &o->tenants)) ||
        (rc = kv_opt_i64(a->topics, "--topics", 0, 100000000, &o->topics)) ||
        (rc = kv_opt_i64(a->turns, "--turns", 1, 1000000, &o->turns)) ||
        (rc = kv_opt_i64(a->convs, "--conversations", 1, 10000000,
                         &o->conversations)) ||
        (rc = opt_f64(a->rate, "--rate", 0, 1e12, &o->rate)))
        return rc;
    if (a->order->count && parse_order(a->order->sval[0], &o->order) < 0)
        return kv_usage("--order: expected retrieval, sorted or random, got "
                        "'%s'", a->order->sval[0]);
    if ((a->doc_len->count && kv_sim_dist_parse(a->doc_len->sval[0],
                                                "--doc-len", 1, &o->doc_len,
                                                &e) < 0) ||
        (a->sys_len->count && kv_sim_dist_parse(a->sys_len->sval[0],
                                                "--sys-len", 1, &o->sys_len,
                                                &e) < 0) ||
        (a->q_len->count && kv_sim_dist_parse(a->q_len->sval[0], "--q-len",
                                              0, &o->q_len, &e) < 0) ||
        (a->out_len->count && kv_sim_dist_parse(a->out_len->sval[0],
                                                "--out-len", 0, &o->out_len,
                                                &e) < 0))
        return kv_usage("%s", e.msg);
    if (o->topics > o->docs)
        return kv_usage("--topics: %lld topics for %lld documents",
                        (long long)o->topics, (long long)o->docs);
    if (o->topk > (o->topics ? o->docs / o->topics : o->docs))
        return kv_usage("--topk: %lld is more than the %lld documents %s",
                        (long long)o->topk,
                        (long long)(o->topics ? o->docs / o->topics : o->docs),
                        o->topics ? "of a topic" : "there are");
    return 0;
}

int cmd_sim_gen(int argc, char **argv)
{
    struct simgen_args a;
    void *table[24];
    int n = simgen_args_make(&a, table);
    struct kv_sim_gen_opts o;
    struct kv_err e;
    struct kv_out ko;
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
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                      "\nWrite a synthetic RAG request trace (one request per "
                      "line) for 'kvchunk sim'.",
                      "Deterministic: the same options and --seed give the "
                      "same bytes.  See man 1 kvchunk.");
    if (rc >= 0 || (rc = simgen_values(&a, &o)))
        goto done;
    const char *path = a.out->count ? a.out->filename[0] : NULL;
    if (kv_out_open(&ko, path, &e) < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    if (kv_sim_gen(ko.f, &o, &e) < 0) {
        kv_out_abort(&ko);
        rc = kv_fail_err(&e);
        goto done;
    }
    rc = path && kv_out_commit(&ko, &e) < 0 ? kv_fail_err(&e)
                                            : kv_close_stdout();
done:
    arg_freetable(table, (size_t)n);
    return rc;
}
