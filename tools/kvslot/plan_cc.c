/* kvslot plan --chunk-cache: seed 001's flow (lib/slot/ccplan.h), its
 * options and fields checked by lib/slot/plan_cc.h; here the argtable
 * options and the writing of each step. */
#include "kvslot.h"

static const char cc_synopsis[] =
    "\nSeed 001's position-independent chunk cache step by step: chunk "
    "passes for misses, the copies into the main pool, then the question "
    "(man 1 kvslot).";

/* Field k of step st. */
static void cc_write_field(struct out *o, const struct kv_cc_step *st,
                           size_t k)
{
    const char *n = kv_plan_cc_field_name(k);
    struct kv_plan_cc_value v;
    kv_plan_cc_field(st, k, &v);
    if (v.ndim == 0) {
        emit_scalar(o, n, v.scalar);
    } else if (v.ndim == 1) {
        emit_vec(o, n, v.v, (size_t)v.shape[0]);
    } else if (v.ndim == 2) {
        if (o->npy)
            emit(o, n, 2, v.shape, v.v);
        else
            for (int64_t r = 0; r < v.shape[0]; r++)
                emit_vec(o, n, v.v + r * v.shape[1], (size_t)v.shape[1]);
    } else if (!o->npy) {       /* the evicted keys: text only */
        out_bytes(o, "chunk_evicted_keys:", 19);
        for (int64_t j = 0; j < v.shape[0]; j++) {
            char hex[34];
            hex[0] = ' ';
            for (int b = 0; b < 16; b++)
                snprintf(hex + 1 + 2 * b, 3, "%02x", v.keys[16 * j + b]);
            out_bytes(o, hex, 33);
        }
        out_bytes(o, "\n", 1);
    }
}

/* One step: the fields sel[0 .. nsel), or every field when nsel is 0. */
static void cc_write(struct out *o, const struct kv_cc_step *st,
                     const int *sel, size_t nsel)
{
    for (size_t i = 0; i < (nsel ? nsel : KV_PLAN_CC_NF); i++)
        cc_write_field(o, st, nsel ? (size_t)sel[i] : i);
}

struct cc_args {
    struct arg_lit *cc, *decode, *quiet, *verbose;
    struct arg_str *segs, *outs, *budget, *bs, *mml, *steps, *nblocks, *seqs,
                   *ctx, *pool, *util, *maxc, *maxt;
};

/* The options of plan --chunk-cache besides the output options. */
static void cc_args_make(struct cc_args *a)
{
    a->cc = arg_lit1(NULL, "chunk-cache", "seed 001's chunk cache");
    a->segs = arg_str0(NULL, "segments", "FILE",
                                    "kvchunk split lists with keys, one prompt "
                                    "after another (default stdin)");
    a->outs = arg_str0(NULL, "output-lens", "N|a,b,..",
                                    "tokens each request generates (default: "
                                    "until --max-model-len)");
    a->budget = arg_str1(NULL, "max-tokens", "N",
                                      "token budget per step");
    a->bs = arg_str1("B", "block-size", "N", "block size");
    a->mml = arg_str1(NULL, "max-model-len", "M", "max model len");
    a->steps = arg_str0(NULL, "steps", "K", "stop after K steps");
    a->nblocks = arg_str0(NULL, "num-blocks", "N",
                                       "main pool blocks, block 0 included "
                                       "(default: enough)");
    a->seqs = arg_str0(NULL, "max-num-seqs", "N",
                                    "running requests at most (default 256)");
    a->decode = arg_lit0(NULL, "decode", "go on until every "
                                      "request has finished");
    a->ctx = arg_str0(NULL, "chunk-context", "sys|none",
                                   "chunks computed after the system prompt "
                                   "(default) or alone");
    a->pool = arg_str0(NULL, "chunk-pool-blocks", "N",
                                    "chunk pool blocks (default: main pool * "
                                    "utilization / 0.70)");
    a->util = arg_str0(NULL, "chunk-cache-gpu-memory-utilization",
                                    "F", "the chunk pool's share of memory "
                                    "beside the main pool's 0.70 (0.15)");
    a->maxc = arg_str0(NULL, "max-chunks", "N",
                                    "chunks kept at most (500)");
    a->maxt = arg_str0(NULL, "max-chunk-tokens", "N",
                                    "tokens of one chunk at most (4096)");
    a->quiet = arg_lit0("q", "quiet", "no progress line");
    a->verbose = arg_lit0("v", "verbose", "print counters");
}

/* The table of a (13 entries and the given tail). */
static int cc_table(struct cc_args *a, void **t)
{
    int n = 0;
    t[n++] = a->cc; t[n++] = a->segs; t[n++] = a->outs; t[n++] = a->budget;
    t[n++] = a->bs; t[n++] = a->mml; t[n++] = a->steps; t[n++] = a->nblocks;
    t[n++] = a->seqs; t[n++] = a->decode; t[n++] = a->ctx; t[n++] = a->pool;
    t[n++] = a->util; t[n++] = a->maxc; t[n++] = a->maxt; t[n++] = a->quiet;
    t[n++] = a->verbose;
    return n;
}

/* The chunk-cache options for plan's --help. */
char *cc_help_text(void)
{
    struct cc_args a;
    void *t[20];
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cc_args_make(&a);
    int n = cc_table(&a, t);
    t[n++] = arg_end(1);
    if (f && arg_nullcheck(t) == 0) {
        fprintf(f, "With --chunk-cache, seed 001's chunk cache (man 1 kvslot, "
                "The chunk cache of seed 001), plan takes:\n");
        arg_print_glossary(f, t, "  %-28s %s\n");
    }
    if (f && fclose(f)) {
        free(buf);
        buf = NULL;
    }
    arg_freetable(t, (size_t)n);
    return buf;
}

/* A string option's value, or NULL when it is not given. */
static const char *opt_str(const struct arg_str *a)
{
    return a->count ? a->sval[0] : NULL;
}

int cmd_plan_cc(int argc, char **argv)
{
    struct cc_args A;
    struct common c;
    void *argtable[28];
    int n = 0, rc, opened = 0, usage;
    struct kv_err e;
    struct kv_plan_cc pc;
    struct kv_plan_cc_opts po;
    struct kv_out ko;
    struct out o;
    int64_t K_steps, hits = 0, misses = 0, steps_n = 0;

    memset(&pc, 0, sizeof pc);
    memset(&po, 0, sizeof po);
    common_make(&c);
    cc_args_make(&A);
    struct arg_str *maxmem = arg_str0(NULL, "max-mem", "SIZE",
                                      "memory limit (default 75% of RAM)");
    n = cc_table(&A, argtable);
    argtable[n++] = maxmem;
    argtable[n++] = c.fields;
    argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("plan", argtable, argc, argv, c.help, c.version, c.end,
                   cc_synopsis);
    if (rc >= 0)
        goto done;
    if ((rc = opt_i64(A.budget, "--max-tokens", 1, INT32_MAX, 0,
                      &po.max_tokens)) ||
        (rc = opt_i64(A.bs, "-B", 1, INT32_MAX, 0, &po.block_size)) ||
        (rc = opt_i64(A.mml, "--max-model-len", 2, INT32_MAX, 0,
                      &po.max_model_len)) ||
        (rc = opt_i64(A.steps, "--steps", 1, INT64_MAX, INT64_MAX, &K_steps)) ||
        (rc = opt_i64(A.nblocks, "--num-blocks", 2, INT32_MAX, 0,
                      &po.num_blocks)) ||
        (rc = opt_i64(A.seqs, "--max-num-seqs", 1, INT32_MAX, 256,
                      &po.max_num_seqs)) ||
        (rc = opt_i64(A.pool, "--chunk-pool-blocks", 1, INT32_MAX, 0,
                      &po.chunk_pool_blocks)) ||
        (rc = opt_i64(A.maxc, "--max-chunks", 1, INT32_MAX, 500,
                      &po.max_chunks)) ||
        (rc = opt_i64(A.maxt, "--max-chunk-tokens", 1, INT32_MAX, 4096,
                      &po.max_chunk_tokens)))
        goto done;
    po.utilization = opt_str(A.util);
    po.chunk_context = opt_str(A.ctx);
    po.max_mem = opt_str(maxmem);
    po.fields = opt_str(c.fields);
    po.segments = opt_str(A.segs);
    po.output_lens = opt_str(A.outs);
    if (kv_plan_cc_load(&pc, &po, &usage, &e)) {
        rc = usage ? kv_usage("%s", e.msg) : kv_fail_err(&e);
        goto done;
    }
    if ((rc = open_output(&c, &ko, &o)))
        goto done;
    opened = 1;
    for (int64_t k = 0; k < K_steps && !o.failed; k++) {
        const struct kv_cc_step *st;
        int got = kv_cc_step(pc.cc, A.decode->count > 0, &st, &e);
        if (got < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        if (got == 0)
            break;
        cc_write(&o, st, pc.sel, pc.n_sel);
        hits += st->hits;
        misses += st->misses;
        steps_n++;
    }
    if (A.verbose->count && !o.failed)
        kv_warn("%lld steps, %lld chunk hits, %lld misses, chunk pool of %lld "
                "blocks", (long long)steps_n, (long long)hits, (long long)misses,
                (long long)pc.cfg.chunk_pool_blocks);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_plan_cc_release(&pc);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
