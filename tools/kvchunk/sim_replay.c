/* kvchunk sim (replay): a trace through cache policies at byte budgets,
 * per policy hit rates, prefill tokens, bytes moved, evictions, TTFT
 * (lib/chunk/chunk_sim: the options, the replay and the report). */
#include "kvchunk.h"
#include "chunk/chunk_sim.h"

struct replay_args {
    struct arg_lit *help, *version, *csv, *quiet, *verbose, *miss_copy;
    struct arg_str *cap_t, *cap_b, *pool_b, *max_chunks, *rotate, *warmup,
                   *us_out, *pol, *bs, *mcfg, *layers, *heads, *hdim,
                   *dtype, *ctx, *salt, *maxses, *us_tok, *us_pair, *tier,
                   *bw_hbm, *bw_host, *bw_disk, *bw_net, *bw_rope, *jobs,
                   *tfmt, *tbs, *fmt, *max_mem;
    struct arg_file *out, *trace;
    struct arg_end *end;
};

/* sim's options, in the order --help lists them (each default in its
 * glossary); returns the count. */
static int replay_args_make(struct replay_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version");
    t[n++] = a->cap_t = arg_str0(NULL, "capacity-tokens", "N[,N..]",
                                 "cache budget in tokens; a list sweeps");
    t[n++] = a->cap_b = arg_str0(NULL, "capacity-bytes", "SIZE[,SIZE..]",
                                 "cache budget in bytes, K/M/G/T "
                                 "suffixes (16G); a list sweeps");
    t[n++] = a->pool_b = arg_str0(NULL, "pool-bytes", "SIZE[,SIZE..]",
                                  "the same, as a chunk pool's size: "
                                  "tokens = SIZE / bytes per token of all "
                                  "layers");
    t[n++] = a->max_chunks = arg_str0(NULL, "max-chunks", "N",
                                      "chunk, chunk-lfu: at most N "
                                      "resident entries (no limit)");
    t[n++] = a->rotate = arg_str0(NULL, "rotate", "MODE",
                                  "moved: a hit re-rotates K when it "
                                  "lands elsewhere; always: every hit "
                                  "does (moved)");
    t[n++] = a->miss_copy = arg_lit0(NULL, "miss-copy",
                                     "a chunk miss is computed into the "
                                     "cache, then copied like a hit");
    t[n++] = a->warmup = arg_str0(NULL, "warmup", "N",
                                  "the first N requests fill the caches "
                                  "and are not counted (0)");
    t[n++] = a->pol = arg_str0("p", "policies", "LIST",
                               "none,prefix,prefix-radix,prefix-sorted,"
                               "chunk,chunk-lfu,oracle (none,prefix,"
                               "chunk,oracle)");
    t[n++] = a->csv = arg_lit0(NULL, "csv", "CSV with a header line");
    t[n++] = a->fmt = arg_str0("f", "format", "text|json",
                               "json: an object a row, fields named as in "
                               "the CSV (text)");
    t[n++] = a->bs = arg_str0("B", "block-size", "N",
                              "prefix caching block size (16; on a "
                              "Mooncake trace, its own)");
    t[n++] = a->mcfg = arg_str0(NULL, "model-config", "FILE",
                                "layers, KV heads, head dim and dtype "
                                "from the model's config.json (an MLA "
                                "model: its latent)");
    t[n++] = a->layers = arg_str0(NULL, "layers", "L", "layers (32)");
    t[n++] = a->heads = arg_str0(NULL, "kv-heads", "H", "KV heads (8)");
    t[n++] = a->hdim = arg_str0(NULL, "head-dim", "D",
                                "head dimension (128)");
    t[n++] = a->dtype = arg_str0(NULL, "dtype", "T",
                                 "KV dtype: fp8, f16, bf16, f32 (bf16)");
    t[n++] = a->ctx = arg_str0(NULL, "chunk-context", "MODE",
                               "sys: chunk KV depends on the system "
                               "prompt; isolated (or none): it does not "
                               "(sys)");
    t[n++] = a->salt = arg_str0(NULL, "salt", "MODE",
                                "tenant: tenants never share entries; "
                                "none (none)");
    t[n++] = a->maxses = arg_str0(NULL, "max-sessions", "N",
                                  "conversations remembered (100000)");
    t[n++] = a->us_tok = arg_str0(NULL, "us-per-token", "A",
                                  "prefill microseconds per computed "
                                  "token (80)");
    t[n++] = a->us_pair = arg_str0(NULL, "us-per-pair", "B",
                                   "prefill microseconds per computed "
                                   "token and key it attends to "
                                   "(0.0035)");
    t[n++] = a->us_out = arg_str0(NULL, "us-per-output-token", "C",
                                  "decode microseconds per output token "
                                  "after the first, for e2e (0)");
    t[n++] = a->tier = arg_str0(NULL, "tier", "TIER",
                                "where chunk KV is loaded from: hbm, "
                                "host, disk, net (hbm)");
    t[n++] = a->bw_hbm = arg_str0(NULL, "bw-hbm", "GB/s",
                                  "device copy bandwidth (1000)");
    t[n++] = a->bw_host = arg_str0(NULL, "bw-host", "GB/s",
                                   "host-to-device bandwidth (25)");
    t[n++] = a->bw_disk = arg_str0(NULL, "bw-disk", "GB/s",
                                   "disk read bandwidth (5)");
    t[n++] = a->bw_net = arg_str0(NULL, "bw-net", "GB/s",
                                  "network store bandwidth (3)");
    t[n++] = a->bw_rope = arg_str0(NULL, "bw-rope", "GB/s",
                                   "K re-rotation bandwidth (200)");
    t[n++] = a->out = arg_file0("o", "output", "FILE",
                                "write the results to FILE");
    t[n++] = a->jobs = arg_str0("j", "jobs", "N", "threads (0 = all cores)");
    t[n++] = a->max_mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit "
                                   "(default 75% of RAM)");
    t[n++] = a->quiet = arg_lit0("q", "quiet", "no progress line");
    t[n++] = a->verbose = arg_lit0("v", "verbose",
                                   "timings and memory on stderr");
    t[n++] = a->tfmt = arg_str0(NULL, "trace-format", "FMT",
                                "auto, native or mooncake (auto: the first "
                                "line tells)");
    t[n++] = a->tbs = arg_str0(NULL, "trace-block-size", "N",
                               "mooncake: tokens per hash_id (512)");
    t[n++] = a->trace = arg_filen(NULL, NULL, "TRACE", 0, 1,
                                  "trace file (default stdin)");
    t[n++] = a->end = arg_end(20);
    return n;
}

static const char *sv(const struct arg_str *a)
{
    return a->count ? a->sval[0] : NULL;
}

/* The options as the library reads them (NULL where absent). */
static void replay_opts(const struct replay_args *a,
                        struct kv_chunk_sim_opts *o)
{
    *o = (struct kv_chunk_sim_opts){
        .capacity_tokens = sv(a->cap_t), .capacity_bytes = sv(a->cap_b),
        .pool_bytes = sv(a->pool_b), .max_chunks = sv(a->max_chunks),
        .rotate = sv(a->rotate), .warmup = sv(a->warmup),
        .policies = sv(a->pol), .block_size = sv(a->bs),
        .model_config = sv(a->mcfg), .layers = sv(a->layers),
        .kv_heads = sv(a->heads), .head_dim = sv(a->hdim),
        .dtype = sv(a->dtype), .chunk_context = sv(a->ctx),
        .salt = sv(a->salt), .max_sessions = sv(a->maxses),
        .us_per_token = sv(a->us_tok), .us_per_pair = sv(a->us_pair),
        .us_per_output_token = sv(a->us_out), .tier = sv(a->tier),
        .bw_hbm = sv(a->bw_hbm), .bw_host = sv(a->bw_host),
        .bw_disk = sv(a->bw_disk), .bw_net = sv(a->bw_net),
        .bw_rope = sv(a->bw_rope), .jobs = sv(a->jobs),
        .trace_format = sv(a->tfmt), .trace_block_size = sv(a->tbs),
        .format = sv(a->fmt), .max_mem = sv(a->max_mem),
        .miss_copy = a->miss_copy->count > 0,
        .csv = a->csv->count > 0,
    };
}

/* -v: requests, time, replays and memory, then each budget in tokens. */
static void report_verbose(const struct kv_chunk_sim *cs, double t0)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    kv_warn("%llu requests in %.3f s (%d replays, -j %d); simulator "
            "tables %.1f MiB, max RSS %.1f MiB",
            (unsigned long long)cs->n_requests, kv_now() - t0, cs->n_units,
            cs->jobs, (double)kv_chunk_sim_mem(cs) / 1048576.0,
            ru.ru_maxrss / 1024.0);
    for (int c = 0; c < cs->n_caps; c++)
        kv_warn("capacity %.0f bytes = %lld tokens of %llu bytes (%lld "
                "blocks of %lld)",
                (double)cs->caps[c] * (double)cs->sim.bytes_per_token,
                (long long)cs->caps[c],
                (unsigned long long)cs->sim.bytes_per_token,
                (long long)(cs->caps[c] / cs->sim.block_size),
                (long long)cs->sim.block_size);
}

/* The progress line: bytes of a regular file read, else requests. */
struct progress {
    struct kv_progress pr;
    FILE *f;
    uint64_t total;
};

static void on_progress(void *ctx, uint64_t n)
{
    struct progress *p = ctx;
    kv_progress_update(&p->pr, p->total ? (uint64_t)ftello(p->f) : n,
                       p->total);
}

static int run(struct kv_chunk_sim *cs, const char *trace, const char *output,
               int quiet, int verbose)
{
    struct kv_err e;
    struct progress pg;
    struct stat sb;
    struct kv_out ko;
    double t0 = kv_now();
    int rc, usage;
    FILE *f = kv_open_in(trace, &e);
    if (!f)
        return kv_fail_err(&e);
    pg.f = f;
    pg.total = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode)
               ? (uint64_t)sb.st_size : 0;
    kv_progress_start(&pg.pr, "replaying", quiet);
    rc = kv_chunk_sim_run(cs, f, kv_path_name(trace, 0), on_progress, &pg,
                          &usage, &e);
    kv_progress_end(&pg.pr);
    kv_close_in(f);
    if (rc < 0)
        return usage ? kv_usage("%s", e.msg) : kv_fail_err(&e);
    if (verbose)
        report_verbose(cs, t0);
    if (kv_out_open(&ko, output, &e) < 0)
        return kv_fail_err(&e);
    if (kv_chunk_sim_write(ko.f, cs, &e) < 0) {
        kv_out_abort(&ko);
        return kv_fail_err(&e);
    }
    if (output && kv_out_commit(&ko, &e) < 0)
        return kv_fail_err(&e);
    return kv_close_stdout();
}

int cmd_sim_replay(int argc, char **argv)
{
    struct replay_args a;
    void *table[40];
    int n = replay_args_make(&a, table);
    struct kv_chunk_sim_opts o;
    struct kv_chunk_sim cs;
    struct kv_err e;
    int rc;

    kv_setprogname("kvchunk sim");
    memset(&cs, 0, sizeof cs);
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                      "\nReplay a request trace through cache policies at one "
                      "byte budget and print, per policy, hit rates, prefill "
                      "tokens, bytes moved, evictions and modelled TTFT.",
                      "Subcommands: 'kvchunk sim gen' writes a synthetic "
                      "trace, 'kvchunk sim from-split' converts 'kvchunk "
                      "split' output.  See man 1 kvchunk.");
    if (rc >= 0)
        goto done;
    replay_opts(&a, &o);
    if (kv_chunk_sim_load(&cs, &o, &e) < 0) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    rc = run(&cs, a.trace->count ? a.trace->filename[0] : NULL,
             a.out->count ? a.out->filename[0] : NULL, a.quiet->count > 0,
             a.verbose->count > 0);
done:
    kv_chunk_sim_release(&cs);
    arg_freetable(table, (size_t)n);
    return rc;
}
