/* kvxattn estimate: the XAttention block mask (and block sums) of Q and
 * K. */
#include "kvxattn.h"

/* The threshold of each of the n_heads query heads: the layer's row of
 * --threshold-file, else --threshold for every head.  *thr is the
 * caller's to free. */
static int head_thresholds(const struct opts *o, int64_t n_heads, double **thr,
                           struct kv_err *e)
{
    if (o->thr_file) {
        if (n_heads < 1)
            return kv_err_set(e, "Q has no heads");
        return read_thresholds(o->thr_file, o->layer, n_heads, o->x.max_bytes,
                               thr, e);
    }
    *thr = malloc((size_t)(n_heads > 0 ? n_heads : 1) * sizeof(double));
    if (!*thr)
        return kv_err_set(e, "out of memory");
    for (int64_t h = 0; h < n_heads; h++)
        (*thr)[h] = o->threshold;
    return 0;
}

/* Takes from --max-mem what the estimate holds beside its work: the mask,
 * the sums (--sums), and for -f block the tile states and the eight
 * BlockMask tensors.  *extra gets the bytes taken. */
static int estimate_reserve(struct opts *o, const int64_t *qshape,
                            const int64_t *kshape, size_t *extra,
                            struct kv_err *e)
{
    size_t nbh = (size_t)(qshape[0] * qshape[1]);
    size_t bs = (size_t)o->x.block_size;
    size_t nqb = ((size_t)qshape[2] + bs - 1) / bs;
    size_t nkb = ((size_t)kshape[2] + bs - 1) / bs;
    if (mem_add(extra, nbh, nqb, nkb, 1) ||
        (o->sums && mem_add(extra, nbh, nqb, nkb, 4)) ||
        (o->fmt == FMT_BLOCK && (mem_add(extra, nbh, nqb, nkb, 1 + 16) ||
                                 mem_add(extra, nbh, nqb + nkb, 1, 8))) ||
        mem_add(extra, nbh, 2, 1, 8))
        return kv_err_set(e, "the mask size overflows");
    return mem_take(&o->x.max_bytes, *extra, e);
}

/* Writes the block mask to f in the format -f asks for; lq and lk are the
 * query and key lengths, total and tread the seconds so far and spent
 * reading (for -f stats -v). */
static int write_estimate(const struct opts *o, FILE *f,
                          const struct kv_tensor *mask, int64_t qoff,
                          int64_t lq, int64_t lk,
                          const struct kv_xattn_times *tm, double total,
                          double tread, struct kv_err *e)
{
    switch (o->fmt) {
    case FMT_NPY:
        return kv_npy_write(f, mask, e);
    case FMT_TEXT:
        return kv_text_write(f, mask, e);
    case FMT_PGM:
        return write_pgm(f, mask, e);
    case FMT_BLOCK:
        return write_block(f, mask, o->x.causal, qoff, lq, lk,
                           o->x.block_size, o->text, e);
    case FMT_STATS:
        fprintf(f, "shape: %lld %lld %lld %lld\n",
                (long long)mask->shape[0], (long long)mask->shape[1],
                (long long)mask->shape[2], (long long)mask->shape[3]);
        write_density(f, mask, o->x.causal, qoff, lq, o->x.block_size, "",
                      NULL, NULL);
        /* timings only on request: stats are otherwise the same bytes
         * from run to run and for any -j */
        if (o->verbose)
            fprintf(f, "time: total %.6f read %.6f prep %.6f gemm %.6f "
                    "softmax %.6f select %.6f\n", total, tread,
                    tm->prep, tm->gemm, tm->softmax, tm->select);
        break;
    }
    return 0;
}

static int run_estimate(struct opts *o)
{
    struct input qi, ki;
    struct kv_tensor mask, sums;
    struct kv_xattn_times tm;
    struct kv_progress prog;
    struct kv_out out, side = {0};
    struct kv_err e;
    double *thr = NULL, t0 = kv_now(), tread;
    int64_t qoff = 0;
    size_t max = o->x.max_bytes, extra = 0;
    int rc = KV_EXIT_DATA, out_open = 0;

    e.msg[0] = 0;
    memset(&qi, 0, sizeof(qi));
    memset(&ki, 0, sizeof(ki));
    kv_tensor_init(&mask);
    kv_tensor_init(&sums);
    if (load_qk(o->qpath, "Q", o->thd, o->x.max_bytes, o->x.nthreads, 2,
                &qi, &e) ||
        load_qk(o->kpath, "K", o->thd, o->x.max_bytes, o->x.nthreads, 2,
                &ki, &e))
        goto fail;
    /* bf16 Q and K: the strided GEMM on the CPU's bf16 dot product, which
     * checks the values as its tiles read them; else OpenBLAS's sgemm (the
     * library loads it) on values checked first */
    if (qi.src == KV_BF16 && ki.src == KV_BF16)
        o->x.bf16_route = (int)kv_bf16_route_best();
    if (!(o->x.bf16_route != KV_BF16_NONE && qi.unchecked && ki.unchecked) &&
        (input_check(&qi, "Q", o->qpath, o->thd, o->x.nthreads, &e) ||
         input_check(&ki, "K", o->kpath, o->thd, o->x.nthreads, &e)))
        goto fail;
    if (head_thresholds(o, qi.t.shape[1], &thr, &e))
        goto fail;
    o->x.thresholds = thr;
    if (kv_xattn_check(&o->x, qi.t.shape, ki.t.shape, &qoff, &e))
        goto fail;
    if (estimate_reserve(o, qi.t.shape, ki.t.shape, &extra, &e))
        goto fail;
    tread = kv_now() - t0;
    kv_progress_start(&prog, "estimate", o->quiet);
    o->x.progress = on_progress;
    o->x.progress_ctx = &prog;
    rc = kv_xattn_estimate(&qi.t, &ki.t, &o->x, &mask, o->sums ? &sums : NULL,
                           &tm, &e);
    kv_progress_end(&prog);
    if (rc) {
        /* an inf or a nan the tiles met: name the first, as the check
         * before the estimate does */
        if (input_check(&qi, "Q", o->qpath, o->thd, o->x.nthreads, &e) == 0 &&
            input_check(&ki, "K", o->kpath, o->thd, o->x.nthreads, &e) == 0)
            scores_overflow(&e, o->x.norm != 1.0, "divided by", "--norm",
                            o->x.norm, "larger");
        mem_need(&e, extra, max);
        goto fail;
    }

    /* the sums file and the main output written, then both committed */
    if (open_side_npy(&side, o->sums, &sums, &e))
        goto fail;
    if (kv_out_open(&out, o->out, &e))
        goto fail;
    out_open = 1;
    if (write_estimate(o, out.f, &mask, qoff, qi.t.shape[2], ki.t.shape[2],
                       &tm, kv_now() - t0, tread, &e))
        goto fail;
    if (o->verbose)
        fprintf(stderr, "%s: read %.4f s, estimate %.4f s (prep %.4f; thread "
                "seconds: gemm %.4f, softmax+sums %.4f, select %.4f); "
                "gemm %.3f GFLOP, %.2f GFLOP/s per thread\n", kv_progname(),
                tread, tm.total, tm.prep, tm.gemm, tm.softmax, tm.select,
                tm.gemm_flops * 1e-9,
                tm.gemm > 0 ? tm.gemm_flops * 1e-9 / tm.gemm : 0.0);
    out_open = 0;
    struct kv_out *both[2] = {&out, &side};
    if (kv_out_commit_all(both, 2, &e))
        goto fail;
    rc = KV_EXIT_OK;
    goto done;
fail:
    if (out_open)
        kv_out_abort(&out);
    kv_out_abort(&side);
    rc = kv_fail_err(&e);
done:
    free(thr);
    input_release(&qi);
    input_release(&ki);
    kv_tensor_release(&mask);
    kv_tensor_release(&sums);
    if (rc == KV_EXIT_OK)
        return kv_close_stdout();
    return rc;
}

static const char *EST_SYN =
    "\nThe XAttention block mask [B, Hq, ceil(Lq/BS), ceil(Lk/BS)] (1 = keep)\n"
    "of Q [B, Hq, Lq, D] and K [B, Hkv, Lk, D] (f32, f16 or bf16 .npy).";
static const char *EST_EXTRA =
    "Threshold: 0 keeps only the forced blocks (block 0 and the diagonal);\n"
    "1 keeps blocks until their running sum reaches the row's total.\n"
    "See man 1 kvxattn.";

struct est_args {
    struct arg_lit *help, *version, *nc, *sink, *recent, *text, *force,
                   *quiet, *verb;
    struct arg_file *q, *k, *thrs, *sums, *out;
    struct arg_str *layout, *stride, *bs, *thr, *layer, *off, *norm, *mode,
                   *rule, *compat, *fmt, *j, *mem;
    struct arg_end *end;
};

/* estimate's options, in the order --help lists them; returns the count. */
static int est_args_make(struct est_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version");
    t[n++] = a->q = arg_file1("q", "query", "Q", "query .npy ('-' = stdin)");
    t[n++] = a->k = arg_file1("k", "key", "K", "key .npy");
    t[n++] = a->layout = arg_str0(NULL, "layout", "bhsd|thd",
                                  "input layout (default bhsd)");
    t[n++] = a->stride = arg_str0(NULL, "stride", "S", "stride S (default 8)");
    t[n++] = a->bs = arg_str0(NULL, "block-size", "BS",
                              "block size (default 128)");
    t[n++] = a->thr = arg_str0(NULL, "threshold", "T",
                               "threshold in [0, 1] (default 0.9)");
    t[n++] = a->thrs = arg_file0(NULL, "thresholds", "FILE",
                                 "per-head thresholds (.npy or text)");
    t[n++] = a->layer = arg_str0(NULL, "layer", "L",
                                 "row L of a layer x head table");
    t[n++] = a->nc = arg_lit0(NULL, "no-causal", "non-causal attention");
    t[n++] = a->off = arg_str0(NULL, "q-offset", "N",
                               "kv position of query token 0 "
                               "(default Lk - Lq)");
    t[n++] = a->norm = arg_str0(NULL, "norm", "X",
                                "extra score divisor (default 1)");
    t[n++] = a->sink = arg_lit0(NULL, "keep-sink",
                                "keep query-block row 0 entirely "
                                "(the original's meaning)");
    t[n++] = a->recent = arg_lit0(NULL, "keep-recent",
                                  "keep the diagonal block");
    t[n++] = a->mode = arg_str0(NULL, "select-mode", "inverse|slash",
                                "antidiagonal (default) or diagonal");
    t[n++] = a->rule = arg_str0(NULL, "rule", "original|intended",
                                "selection rule (default original)");
    t[n++] = a->compat = arg_str0(NULL, "compat-chunk-size", "C",
                                  "reproduce the original with chunk C");
    t[n++] = a->sums = arg_file0(NULL, "sums", "FILE",
                                 "write the f32 block sums (.npy)");
    t[n++] = a->fmt = arg_str0("f", "format", "FMT",
                               "npy|text|pgm|stats|block");
    t[n++] = a->text = arg_lit0(NULL, "text", "-f block as text fields");
    t[n++] = a->force = arg_lit0(NULL, "force",
                                 "binary output to a terminal");
    t[n++] = a->out = arg_file0("o", "output", "FILE", "output file");
    t[n++] = a->j = arg_str0("j", "jobs,threads", "N",
                             "threads (default: all cores)");
    t[n++] = a->mem = arg_str0(NULL, "max-mem", "SIZE",
                               "memory limit (default 75% of RAM)");
    t[n++] = a->quiet = arg_lit0(NULL, "quiet", "no progress line");
    t[n++] = a->verb = arg_lit0("v", "verbose", "print timings");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* Inputs, geometry and thresholds: -q, -k, --layout, --stride,
 * --block-size, --threshold(s) and --layer. */
static int est_inputs(struct est_args *a, struct opts *o)
{
    struct kv_err e;
    o->qpath = a->q->filename[0];
    o->kpath = a->k->filename[0];
    if ((strcmp(o->qpath, "-") == 0) + (strcmp(o->kpath, "-") == 0) +
        (a->thrs->count && strcmp(a->thrs->filename[0], "-") == 0) > 1)
        return kv_usage("only one of -q, -k and --thresholds can read stdin");
    if (a->layout->count) {
        if (strcmp(a->layout->sval[0], "thd") == 0)
            o->thd = 1;
        else if (strcmp(a->layout->sval[0], "bhsd") != 0)
            return kv_usage("--layout: expected bhsd or thd, got '%s'",
                            a->layout->sval[0]);
    }
    if (kv_opt_i64(a->stride, "--stride", 1, 1 << 20, &o->x.stride) ||
        kv_opt_i64(a->bs, "--block-size", 1, 1 << 24, &o->x.block_size))
        return KV_EXIT_USAGE;
    if (o->x.block_size % o->x.stride != 0)
        return kv_usage("--stride %lld does not divide --block-size %lld",
                        (long long)o->x.stride, (long long)o->x.block_size);
    if (a->thr->count && a->thrs->count)
        return kv_usage("--threshold and --thresholds exclude each other");
    if (a->thr->count) {
        if (kv_parse_f64(a->thr->sval[0], "--threshold", &o->threshold, &e))
            return kv_usage("%s", e.msg);
        if (!(o->threshold >= 0.0 && o->threshold <= 1.0))
            return kv_usage("--threshold: expected a number in [0, 1] (0 "
                            "keeps only the forced blocks, 1 keeps blocks "
                            "until their running sum reaches the row's "
                            "total), got '%s'", a->thr->sval[0]);
    }
    if (a->thrs->count)
        o->thr_file = a->thrs->filename[0];
    if (a->layer->count && !a->thrs->count)
        return kv_usage("--layer needs --thresholds FILE");
    if (kv_opt_i64(a->layer, "--layer", 0, INT32_MAX, &o->layer))
        return KV_EXIT_USAGE;
    return 0;
}

/* The selection: causality and offset, norm, forced blocks, mode, rule
 * and the original's chunking. */
static int est_selection(struct est_args *a, struct opts *o)
{
    struct kv_err e;
    o->x.causal = a->nc->count == 0;
    if (kv_opt_i64(a->off, "--q-offset", 0, INT64_MAX / 4, &o->x.q_offset))
        return KV_EXIT_USAGE;
    if (a->off->count && !o->x.causal)
        return kv_usage("--q-offset places the queries for causal selection; "
                        "with --no-causal every key is visible and it would "
                        "change nothing");
    if (a->off->count && o->x.causal && o->x.q_offset % o->x.block_size != 0)
        return kv_usage("--q-offset %lld is not a multiple of --block-size "
                        "%lld (needed for causal selection)",
                        (long long)o->x.q_offset, (long long)o->x.block_size);
    /* the scores are divided by norm in f32: it must be a normal f32 (a
     * subnormal or zero divisor makes every score inf) */
    if (a->norm->count &&
        (kv_parse_f64(a->norm->sval[0], "--norm", &o->x.norm, &e) ||
         !((float)o->x.norm >= FLT_MIN) || !isfinite((float)o->x.norm)))
        return kv_usage("--norm: expected a number > 0 that is a normal f32 "
                        "(about 1.2e-38 to 3.4e38: the scores are divided by "
                        "it in f32), got '%s'", a->norm->sval[0]);
    o->x.keep_sink = a->sink->count > 0;
    o->x.keep_recent = a->recent->count > 0;
    if (a->mode->count) {
        if (strcmp(a->mode->sval[0], "slash") == 0)
            o->x.select_mode = KV_XATTN_SLASH;
        else if (strcmp(a->mode->sval[0], "inverse") != 0)
            return kv_usage("--select-mode: expected inverse or slash, got "
                            "'%s'", a->mode->sval[0]);
    }
    if (a->rule->count) {
        if (strcmp(a->rule->sval[0], "intended") == 0)
            o->x.rule = KV_XATTN_RULE_INTENDED;
        else if (strcmp(a->rule->sval[0], "original") != 0)
            return kv_usage("--rule: expected original or intended, got '%s'",
                            a->rule->sval[0]);
    }
    if (kv_opt_i64(a->compat, "--compat-chunk-size", 1, (int64_t)1 << 40,
                   &o->x.compat_chunk))
        return KV_EXIT_USAGE;
    /* the original pads K to whole chunks: one chunk alone is C / S
     * reshaped key columns, which must fit an int32 whatever the input */
    if (a->compat->count && o->x.compat_chunk / o->x.stride > INT32_MAX)
        return kv_usage("--compat-chunk-size %lld: one chunk is %lld "
                        "reshaped key columns (C / --stride), more than "
                        "2^31 - 1", (long long)o->x.compat_chunk,
                        (long long)(o->x.compat_chunk / o->x.stride));
    if (a->compat->count && o->x.compat_chunk % o->x.block_size != 0)
        return kv_usage("--compat-chunk-size %lld is not a multiple of "
                        "--block-size %lld", (long long)o->x.compat_chunk,
                        (long long)o->x.block_size);
    if (a->compat->count && a->off->count)
        return kv_usage("--q-offset and --compat-chunk-size exclude each "
                        "other (the original places the query at "
                        "(ceil(Lk/C) - ceil(Lq/C)) * C)");
    return 0;
}

/* Is path unset or standard output? */
static int to_stdout(const char *path)
{
    return !path || strcmp(path, "-") == 0;
}

/* The outputs: --sums, -o, -f, --text, threads and memory. */
static int est_outputs(struct est_args *a, struct opts *o)
{
    struct kv_err e;
    int64_t v;
    int rc;
    if (a->sums->count)
        o->sums = a->sums->filename[0];
    if (a->out->count)
        o->out = a->out->filename[0];
    o->force = a->force->count > 0;
    o->fmt = FMT_AUTO;
    if ((a->fmt->count && parse_format(a->fmt->sval[0], 0, &o->fmt)) ||
        kv_opt_i64(a->j, "-j", 0, 256, &v))
        return KV_EXIT_USAGE;
    o->x.nthreads = a->j->count ? (int)v : 0;
    if (kv_parse_max_mem(a->mem->count ? a->mem->sval[0] : NULL,
                         &o->x.max_bytes, &e))
        return kv_usage("%s", e.msg);
    o->quiet = a->quiet->count > 0;
    o->verbose = a->verb->count > 0;
    {
        const char *opt[2] = {"--sums", "-o"};
        const char *path[2] = {o->sums, o->out ? o->out : "-"};
        if (kv_outputs_distinct(opt, path, 2, &e) < 0)
            return kv_usage("%s", e.msg);
    }
    if (o->fmt == FMT_AUTO)
        o->fmt = to_stdout(o->out) && kv_isatty(stdout) ? FMT_TEXT : FMT_NPY;
    if (o->fmt == FMT_PGM && to_stdout(o->out) && !o->force &&
        kv_isatty(stdout))
        return kv_usage("refusing to write a binary PGM picture to a "
                        "terminal; use -o FILE, redirect the output, or add "
                        "--force");
    if (a->text->count && o->fmt != FMT_BLOCK)
        return kv_usage("--text: only for -f block (use -f text for the "
                        "mask)");
    /* a BlockMask on a terminal prints as text fields, as in kvmask */
    o->text = a->text->count > 0 ||
              (o->fmt == FMT_BLOCK && !o->force && to_stdout(o->out) &&
               kv_isatty(stdout));
    if ((o->fmt == FMT_NPY || (o->fmt == FMT_BLOCK && !o->text)) &&
        to_stdout(o->out) && (rc = kv_check_binary_ok(stdout, o->force)))
        return rc;
    if (o->sums && strcmp(o->sums, "-") == 0 &&
        (rc = kv_check_binary_ok(stdout, o->force)))
        return rc;
    return 0;
}

int cmd_estimate(int argc, char **argv)
{
    struct est_args a;
    void *table[32];
    int n = est_args_make(&a, table);
    struct opts o;
    int rc;

    memset(&o, 0, sizeof(o));
    kv_xattn_opts_init(&o.x);
    o.threshold = 0.9;
    o.layer = -1;
    kv_setprogname("kvxattn estimate");   /* for the usage line and hints */
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end, EST_SYN,
                      EST_EXTRA);
    if (rc < 0 && !(rc = est_inputs(&a, &o)) && !(rc = est_selection(&a, &o))
        && !(rc = est_outputs(&a, &o))) {
        kv_setprogname("kvxattn");   /* data errors: "kvxattn: ..." */
        rc = run_estimate(&o);
    }
    arg_freetable(table, (size_t)n);
    return rc;
}
