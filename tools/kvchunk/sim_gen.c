/* kvchunk sim gen: a synthetic request trace (lib/chunk/chunk_sim reads
 * the options, lib/sim writes the trace). */
#include "kvchunk.h"
#include "chunk/chunk_sim.h"

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

static const char *sv(const struct arg_str *a)
{
    return a->count ? a->sval[0] : NULL;
}

/* The options as the library reads them (NULL where absent). */
static void simgen_opts(const struct simgen_args *a,
                        struct kv_chunk_sim_gen_opts *o)
{
    *o = (struct kv_chunk_sim_gen_opts){
        sv(a->seed), sv(a->reqs), sv(a->docs), sv(a->topk), sv(a->zipf),
        sv(a->fresh), sv(a->order), sv(a->sysv), sv(a->tenants),
        sv(a->topics), sv(a->turns), sv(a->convs), sv(a->rate),
        sv(a->doc_len), sv(a->sys_len), sv(a->q_len), sv(a->out_len)};
}

int cmd_sim_gen(int argc, char **argv)
{
    struct simgen_args a;
    void *table[24];
    int n = simgen_args_make(&a, table);
    struct kv_chunk_sim_gen_opts go;
    struct kv_sim_gen_opts o;
    struct kv_err e;
    struct kv_out ko;
    int rc;

    kv_setprogname("kvchunk sim gen");
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                      "\nWrite a synthetic RAG request trace (one request per "
                      "line) for 'kvchunk sim'.",
                      "Deterministic: the same options and --seed give the "
                      "same bytes.  See man 1 kvchunk.");
    if (rc >= 0)
        goto done;
    simgen_opts(&a, &go);
    if (kv_chunk_sim_gen_load(&go, &o, &e) < 0) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
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
