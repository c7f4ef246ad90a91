/* kvattn - reference attention on the CPU: run, merge, cmp, gen
 * (see man 1 kvattn).
 *
 * Each subcommand parses its own options into a struct, then run_*() reads
 * and validates every input, computes through lib/attn, lib/cmp or lib/gen,
 * and writes its output once.  Nothing reaches stdout on an error.
 */
#include <argtable2.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/kv.h"
#include "core/blas.h"
#include "attn/attn.h"
#include "attn/bf16.h"
#include "attn/bound.h"
#include "chunk/chunk.h"
#include "chunk/model.h"
#include "attn/cmp.h"
#include "attn/gen.h"
#include "attn/mla.h"
#include "chunk/latent.h"
#include "chunk/rope.h"
#include "chunk/toy.h"

/* ---- shared helpers ---------------------------------------------------- */

/* A tensor read from a file: either loaded into memory or, for large
 * regular files, mapped read-only (then t.data points into the mapping and
 * must not be freed). */
struct input {
    struct kv_tensor t;
    void *map;
    size_t map_len;
};

static void input_release(struct input *in)
{
    if (in->map) {
        munmap(in->map, in->map_len);
        kv_tensor_init(&in->t);
    } else {
        kv_tensor_release(&in->t);
    }
    in->map = NULL;
}

/* Read one array from path.  A regular file of at least 1 MiB holding a
 * single array is mapped instead of copied (a paged cache is read once,
 * so copying it would double the memory traffic); its pages fault in from
 * the worker threads, in parallel, as the kernel first touches them. */
static int input_load(struct input *in, const char *path, size_t max_bytes,
                      struct kv_err *e)
{
    memset(in, 0, sizeof *in);
    kv_tensor_init(&in->t);
    if (path && strcmp(path, "-") != 0) {
        struct stat st;
        int fd = open(path, O_RDONLY);
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            st.st_size >= (1 << 20)) {
            FILE *f = fdopen(fd, "rb");
            struct kv_npy_header h;
            if (!f) {
                close(fd);
                return kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
            }
            if (kv_npy_read_header(f, max_bytes, &h, e) != 0) {
                fclose(f);
                if (e->msg[0] == '\0')
                    kv_err_set(e, "'%s': no array in the file", path);
                return kv_err_prefix(e, "'%s'", path);
            }
            long off = ftell(f);
            if (off > 0 && (uint64_t)off + h.nbytes == (uint64_t)st.st_size &&
                off % 16 == 0 && h.nbytes > 0) {
                void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
                               fileno(f), 0);
                if (m != MAP_FAILED) {
                    fclose(f);
                    in->map = m;
                    in->map_len = (size_t)st.st_size;
                    in->t.dtype = h.dtype;
                    in->t.ndim = h.ndim;
                    memcpy(in->t.shape, h.shape, sizeof h.shape);
                    in->t.data = (char *)m + off;
                    in->t.nbytes = h.nbytes;
                    return 0;
                }
            }
            fclose(f);
        } else if (fd >= 0) {
            close(fd);
        }
    }
    return kv_npy_load(path, max_bytes, &in->t, e);
}

/* CPU time of the process, all threads (for -v). */
static double process_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_dtype_opt(struct arg_str *a, const char *opt, enum kv_dtype *out)
{
    struct kv_err e = {{0}};
    if (a->count == 0)
        return 0;
    if (kv_dtype_parse(a->sval[0], out, &e) ||
        !(*out == KV_F32 || *out == KV_F16 || *out == KV_BF16 || *out == KV_F64))
        return kv_usage("%s: expected f32, f16, bf16 or f64, got '%s'", opt, a->sval[0]);
    return 0;
}

static int parse_format(struct arg_str *a, enum kv_format *out)
{
    *out = KV_FMT_AUTO;
    if (a->count == 0)
        return 0;
    if (strcmp(a->sval[0], "npy") == 0)
        *out = KV_FMT_NPY;
    else if (strcmp(a->sval[0], "text") == 0)
        *out = KV_FMT_TEXT;
    else
        return kv_usage("-f: expected npy or text, got '%s'", a->sval[0]);
    return 0;
}

static int parse_threads(struct arg_int *a, int *out)
{
    *out = 0;
    if (a->count == 0)
        return 0;
    if (a->ival[0] < 0 || a->ival[0] > 1024)
        return kv_usage("-j: expected a thread count in 0..1024, got %d", a->ival[0]);
    *out = a->ival[0];
    return 0;
}

/* --lse-base e|2: 0 for the natural logarithm (FlashAttention, PyTorch,
 * vLLM, vllm-ascend), 1 for base 2 (FlashInfer's LSE). */
static int parse_lse_base(struct arg_str *a, int *base2)
{
    *base2 = 0;
    if (a->count == 0 || strcmp(a->sval[0], "e") == 0)
        return 0;
    if (strcmp(a->sval[0], "2") == 0) {
        *base2 = 1;
        return 0;
    }
    return kv_usage("--lse-base: expected e or 2, got '%s'", a->sval[0]);
}

/* Multiply every element of an f32 or f64 tensor by f (infinities and NaN
 * stay what they are). */
static void scale_tensor(struct kv_tensor *t, double f)
{
    size_t n = kv_tensor_numel(t);
    if (t->dtype == KV_F32) {
        float *x = t->data;
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(x[i] * f);
    } else if (t->dtype == KV_F64) {
        double *x = t->data;
        for (size_t i = 0; i < n; i++)
            x[i] *= f;
    }
}

/* A float mask is added to the scores; one that holds nothing but 0 and 1
 * is almost certainly a 1 = masked mask in a float dtype (vllm-ascend's bf16
 * masks), which adding would not mask at all.  Returns 1 for such a mask. */
static int mask_looks_binary(const struct kv_tensor *m)
{
    size_t n = kv_tensor_numel(m);
    int ones = 0;
    if (!kv_dtype_is_float(m->dtype))
        return 0;
    for (size_t i = 0; i < n; i++) {
        double x = kv_tensor_get_f64(m, i);
        if (x == 1.0)
            ones = 1;
        else if (x != 0.0)
            return 0;
    }
    return ones;
}

/* Write tensors to path ("-"/NULL = stdout) as one .npy stream, or as text.
 * Returns 0 or an exit code (the message printed). */
static int write_tensors(const char *path, enum kv_format fmt, int force,
                         const struct kv_tensor *const *ts, int n)
{
    struct kv_err e = {{0}};
    struct kv_out o;
    int to_stdout = !path || strcmp(path, "-") == 0;
    if (fmt == KV_FMT_AUTO)
        fmt = (to_stdout && kv_isatty(stdout)) ? KV_FMT_TEXT : KV_FMT_NPY;
    if (fmt == KV_FMT_NPY && to_stdout) {
        int rc = kv_check_binary_ok(stdout, force);
        if (rc)
            return rc;
    }
    if (kv_out_open(&o, path, &e))
        return kv_fail_err(&e);
    for (int i = 0; i < n; i++) {
        if (fmt == KV_FMT_TEXT && i > 0)
            fputc('\n', o.f);        /* a blank line between arrays */
        int rc = fmt == KV_FMT_NPY ? kv_npy_write(o.f, ts[i], &e) : kv_text_write(o.f, ts[i], &e);
        if (rc) {
            kv_out_abort(&o);
            return kv_fail_err(&e);
        }
    }
    if (kv_out_commit(&o, &e))
        return kv_fail_err(&e);
    return 0;
}

static int parse_list(struct arg_str *a, const char *opt, int64_t **v, size_t *n)
{
    struct kv_err e = {{0}};
    *v = NULL;
    *n = 0;
    if (a->count == 0)
        return 0;
    if (kv_parse_i64_list(a->sval[0], opt, 0, INT64_MAX / 8, v, n, &e))
        return kv_usage("%s", e.msg);
    return 0;
}

/* ---- run --------------------------------------------------------------- */

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    kv_progress_update(ctx, done, total);
}

struct run_opts {
    const char *q, *k, *v, *mask, *block_mask, *kv_cache, *block_table, *lse, *out;
    int thd, causal, mask_keep, mask_binary, lse_base2;
    int scalar, verbose, quiet, force, threads, has_scale, p_f32;
    int64_t window, block_size, tile_q, tile_k;
    double scale;
    int64_t *q_lens, *kv_lens, *seq_lens;
    size_t n_q_lens, n_kv_lens, n_seq_lens;
    enum kv_dtype out_dtype;
    enum kv_format fmt;
    size_t max_mem;
};

/* kvattn run: load every input (large files mapped), validate and compute
 * through kv_attn_run, then write the LSE file and the output.  Returns the
 * exit status. */
static int run_run(struct run_opts *o)
{
    struct kv_err e = {{0}};
    struct input q, k, v, mask, bmask, cache;
    struct kv_tensor out, lse;
    int64_t *bt = NULL;
    size_t bt_rows = 0, bt_cols = 0;
    int rc = KV_EXIT_DATA;
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    memset(&mask, 0, sizeof mask);
    memset(&bmask, 0, sizeof bmask);
    memset(&cache, 0, sizeof cache);
    kv_tensor_init(&out);
    kv_tensor_init(&lse);

    double t0 = kv_now();
    if (input_load(&q, o->q, o->max_mem, &e))
        goto fail;
    if (o->kv_cache) {
        if (input_load(&cache, o->kv_cache, o->max_mem, &e))
            goto fail;
        if (kv_read_int_table(o->block_table, -1, o->max_mem, &bt, &bt_rows, &bt_cols, &e)) {
            kv_err_prefix(&e, "--block-table");
            goto fail;
        }
    } else {
        if (input_load(&k, o->k, o->max_mem, &e) || input_load(&v, o->v, o->max_mem, &e))
            goto fail;
    }
    if (o->mask && input_load(&mask, o->mask, o->max_mem, &e))
        goto fail;
    if (o->block_mask && input_load(&bmask, o->block_mask, o->max_mem, &e))
        goto fail;
    double t1 = kv_now(), c1 = process_cpu();

    struct kv_attn_req r;
    memset(&r, 0, sizeof r);
    r.layout = o->thd ? KV_ATTN_THD : KV_ATTN_BHSD;
    r.q = &q.t;
    r.k = o->kv_cache ? NULL : &k.t;
    r.v = o->kv_cache ? NULL : &v.t;
    r.kv_cache = o->kv_cache ? &cache.t : NULL;
    r.block_table = bt;
    r.bt_rows = bt_rows;
    r.bt_cols = bt_cols;
    r.q_lens = o->q_lens; r.n_q_lens = o->n_q_lens;
    r.kv_lens = o->kv_lens; r.n_kv_lens = o->n_kv_lens;
    r.seq_lens = o->seq_lens; r.n_seq_lens = o->n_seq_lens;
    r.causal = o->causal;
    r.window = o->window;
    r.mask = o->mask ? &mask.t : NULL;
    r.mask_keep = o->mask_keep;
    r.mask_binary = o->mask_binary;
    if (o->mask && !o->mask_keep && !o->mask_binary && !o->quiet && mask_looks_binary(&mask.t))
        kv_warn("the %s mask holds only 0 and 1, which are added to the scores (1 does not "
                "mask); --mask-binary reads it as 1 = masked", kv_dtype_name(mask.t.dtype));
    r.block_mask = o->block_mask ? &bmask.t : NULL;
    r.block_size = o->block_size;
    r.has_scale = o->has_scale;
    r.scale = o->scale;
    r.out_dtype = o->out_dtype;
    r.n_threads = o->threads;
    r.max_bytes = o->max_mem;
    r.tile_q = o->tile_q;
    r.tile_k = o->tile_k;
    r.scalar = o->scalar;
    r.p_f32 = o->p_f32;
    struct kv_progress prog;
    kv_progress_start(&prog, "attention", o->quiet);
    r.progress = on_progress;
    r.progress_ctx = &prog;
    int arc = kv_attn_run(&r, &out, o->lse ? &lse : NULL, &e);
    kv_progress_end(&prog);
    if (arc)
        goto fail;
    double t2 = kv_now(), c2 = process_cpu();
    if (o->lse) {
        const struct kv_tensor *ls[1] = {&lse};
        if (o->lse_base2)
            scale_tensor(&lse, M_LOG2E);
        if ((rc = write_tensors(o->lse, o->fmt == KV_FMT_TEXT ? KV_FMT_TEXT : KV_FMT_NPY,
                                1, ls, 1)) != 0)
            goto done;
    }
    const struct kv_tensor *os[1] = {&out};
    if ((rc = write_tensors(o->out, o->fmt, o->force, os, 1)) != 0)
        goto done;
    if (o->verbose) {
        struct kv_attn_stats st;
        kv_attn_last_stats(&st);
        kv_warn("read %.3f s, attention %.3f s (%.4f CPU-s), %llu items, %llu tiles computed, "
                "%llu skipped by the block mask, bf16 tiles: %s", t1 - t0, t2 - t1, c2 - c1,
                (unsigned long long)st.items, (unsigned long long)st.tiles_done,
                (unsigned long long)st.tiles_skipped,
                kv_bf16_route_name((enum kv_bf16_route)st.bf16_route));
    }
    rc = kv_close_stdout();
    goto done;
fail:
    rc = kv_fail_err(&e);
done:
    input_release(&q);
    input_release(&k);
    input_release(&v);
    input_release(&mask);
    input_release(&bmask);
    input_release(&cache);
    kv_tensor_release(&out);
    kv_tensor_release(&lse);
    free(bt);
    return rc;
}

static const char run_synopsis[] =
    "\nO = softmax(scale * Q K^T + mask) V, tiled, on the CPU.\n"
    "bhsd: Q [B,Hq,Lq,D] K/V [B,Hkv,Lk,D]; thd: Q [Tq,Hq,D] K/V [Tk,Hkv,D] with\n"
    "--q-lens/--kv-lens; paged: --kv-cache [2,num_blocks,block_size,Hkv,D]\n"
    "--block-table FILE --seq-lens ...";

/* kvattn run: parse and range-check the options into run_opts. */
struct run_args {
    struct arg_lit *help, *version, *causal, *keep, *bin, *force, *scalar, *verb, *quiet, *pf32;
    struct arg_file *q, *k, *v, *mask, *bm, *cache, *bt, *lse, *out;
    struct arg_str *layout, *ql, *kl, *sl, *base, *od, *fmt, *mem;
    struct arg_int *window, *bs, *j, *tq, *tk;
    struct arg_dbl *scale;
    struct arg_end *end;
};

/* run's options, in the order --help lists them; returns the count. */
static int run_args_make(struct run_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version and exit");
    t[n++] = a->q = arg_file0("q", NULL, "FILE", "queries (.npy)");
    t[n++] = a->k = arg_file0("k", NULL, "FILE", "keys (.npy)");
    t[n++] = a->v = arg_file0("v", NULL, "FILE", "values (.npy)");
    t[n++] = a->layout = arg_str0(NULL, "layout", "bhsd|thd", "tensor layout (default bhsd)");
    t[n++] = a->causal = arg_lit0(NULL, "causal", "causal, bottom-right aligned: keep j <= i + Lk - Lq");
    t[n++] = a->window = arg_int0(NULL, "window", "W", "sliding window: keep the W keys up to and including the diagonal");
    t[n++] = a->mask = arg_file0(NULL, "mask", "FILE", "explicit mask: bool/int 1 = masked, float additive");
    t[n++] = a->keep = arg_lit0(NULL, "mask-keep", "mask means nonzero = keep (float masks too)");
    t[n++] = a->bin = arg_lit0(NULL, "mask-binary", "float mask means nonzero = masked, not added");
    t[n++] = a->bm = arg_file0(NULL, "block-mask", "FILE", "block mask [B,Hq,ceil(Lq/BS),ceil(Lk/BS)], 1 = keep");
    t[n++] = a->bs = arg_int0(NULL, "block-size", "BS", "block size of --block-mask");
    t[n++] = a->ql = arg_str0(NULL, "q-lens", "N,N..", "thd: query tokens per request");
    t[n++] = a->kl = arg_str0(NULL, "kv-lens", "N,N..", "thd: key tokens per request (default = q-lens)");
    t[n++] = a->cache = arg_file0(NULL, "kv-cache", "FILE", "paged cache [2,num_blocks,block_size,Hkv,D]");
    t[n++] = a->bt = arg_file0(NULL, "block-table", "FILE", "block table (text rows or integer .npy)");
    t[n++] = a->sl = arg_str0(NULL, "seq-lens", "N,N..", "keys per request (paged; or a used prefix in bhsd)");
    t[n++] = a->scale = arg_dbl0(NULL, "scale", "S", "score scale (default 1/sqrt(D))");
    t[n++] = a->lse = arg_file0(NULL, "lse", "FILE", "also write the log-sum-exp per row (f32)");
    t[n++] = a->base = arg_str0(NULL, "lse-base", "e|2", "LSE logarithm: e (FlashAttention; default) or 2 (FlashInfer)");
    t[n++] = a->od = arg_str0(NULL, "out-dtype", "T", "f32|f16|bf16|f64 (default: the query's)");
    t[n++] = a->out = arg_file0("o", NULL, "FILE", "output file (default stdout)");
    t[n++] = a->fmt = arg_str0("f", NULL, "npy|text", "output format (default: npy unless stdout is a terminal)");
    t[n++] = a->force = arg_lit0(NULL, "force", "write binary to a terminal");
    t[n++] = a->j = arg_int0("j", NULL, "N", "threads (default: all cores)");
    t[n++] = a->mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    t[n++] = a->tq = arg_int0(NULL, "tile-q", "N", "query rows per tile (tuning; default 256)");
    t[n++] = a->tk = arg_int0(NULL, "tile-k", "N", "keys per tile (tuning; default 512)");
    t[n++] = a->scalar = arg_lit0(NULL, "scalar", "plain scalar loops instead of BLAS and vector code");
    t[n++] = a->pf32 = arg_lit0(NULL, "no-p-round", "bf16 tiles: keep P in f32 for P V (default: rounded to bf16)");
    t[n++] = a->verb = arg_lit0(NULL, "verbose", "print timings and counters");
    t[n++] = a->quiet = arg_lit0(NULL, "quiet", "no progress line");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* Is path standard input? */
static int is_stdin(const char *path)
{
    return path && strcmp(path, "-") == 0;
}

/* The operands: q with k and v, or a paged cache; one of them may be stdin. */
static int run_inputs(const struct run_args *a, struct run_opts *o)
{
    if (a->q->count == 0)
        return kv_usage("-q FILE is required");
    o->q = a->q->filename[0];
    o->k = a->k->count ? a->k->filename[0] : NULL;
    o->v = a->v->count ? a->v->filename[0] : NULL;
    o->kv_cache = a->cache->count ? a->cache->filename[0] : NULL;
    o->block_table = a->bt->count ? a->bt->filename[0] : NULL;
    if (o->kv_cache) {
        if (o->k || o->v)
            return kv_usage("--kv-cache replaces -k/-v");
        if (!o->block_table || a->sl->count == 0)
            return kv_usage("--kv-cache needs --block-table and --seq-lens");
    } else if (!o->k || !o->v) {
        return kv_usage("-k FILE and -v FILE are required (or --kv-cache)");
    } else if (o->block_table) {
        return kv_usage("--block-table needs --kv-cache");
    }
    int nstdin = is_stdin(o->q) + is_stdin(o->k) + is_stdin(o->v) + is_stdin(o->kv_cache) +
                 (a->mask->count && is_stdin(a->mask->filename[0])) +
                 (a->bm->count && is_stdin(a->bm->filename[0])) + is_stdin(o->block_table);
    if (nstdin > 1)
        return kv_usage("only one input can be standard input");
    return 0;
}

/* The layout, the masks and the request lengths. */
static int run_masks(const struct run_args *a, struct run_opts *o)
{
    int rc;
    if (a->layout->count) {
        if (strcmp(a->layout->sval[0], "thd") == 0)
            o->thd = 1;
        else if (strcmp(a->layout->sval[0], "bhsd") != 0)
            return kv_usage("--layout: expected bhsd or thd, got '%s'", a->layout->sval[0]);
    }
    o->causal = a->causal->count > 0;
    if (a->window->count) {
        if (a->window->ival[0] < 1)
            return kv_usage("--window: expected a window of at least 1 key, got %d",
                            a->window->ival[0]);
        o->window = a->window->ival[0];
    }
    o->mask = a->mask->count ? a->mask->filename[0] : NULL;
    o->mask_keep = a->keep->count > 0;
    o->mask_binary = a->bin->count > 0;
    if ((o->mask_keep || o->mask_binary) && !o->mask)
        return kv_usage("%s needs --mask", o->mask_keep ? "--mask-keep" : "--mask-binary");
    if (o->mask_keep && o->mask_binary)
        return kv_usage("--mask-keep and --mask-binary exclude each other "
                        "(with --mask-keep a float mask is read as nonzero = keep)");
    o->block_mask = a->bm->count ? a->bm->filename[0] : NULL;
    if (o->block_mask && a->bs->count == 0)
        return kv_usage("--block-mask needs --block-size");
    if (a->bs->count) {
        if (!o->block_mask)
            return kv_usage("--block-size needs --block-mask");
        if (a->bs->ival[0] < 1)
            return kv_usage("--block-size: expected at least 1, got %d", a->bs->ival[0]);
        o->block_size = a->bs->ival[0];
    }
    if ((rc = parse_list(a->ql, "--q-lens", &o->q_lens, &o->n_q_lens)) ||
        (rc = parse_list(a->kl, "--kv-lens", &o->kv_lens, &o->n_kv_lens)) ||
        (rc = parse_list(a->sl, "--seq-lens", &o->seq_lens, &o->n_seq_lens)))
        return rc;
    if ((a->ql->count || a->kl->count) && !o->thd)
        return kv_usage("--q-lens/--kv-lens need --layout thd");
    return 0;
}

/* The scale, the outputs and the tuning knobs. */
static int run_outputs(struct run_args *a, struct run_opts *o)
{
    struct kv_err e = {{0}};
    int rc;
    if (a->scale->count) {
        if (!isfinite(a->scale->dval[0]))
            return kv_usage("--scale: expected a finite number, got %g", a->scale->dval[0]);
        o->has_scale = 1;
        o->scale = a->scale->dval[0];
    }
    o->lse = a->lse->count ? a->lse->filename[0] : NULL;
    o->out = a->out->count ? a->out->filename[0] : NULL;
    if (o->lse && o->out && strcmp(o->lse, o->out) == 0)
        return kv_usage("--lse and -o name the same file '%s'", o->lse);
    if (is_stdin(o->lse) && (!o->out || is_stdin(o->out)))
        return kv_usage("--lse -: the output already goes to stdout; give -o FILE");
    if ((rc = parse_dtype_opt(a->od, "--out-dtype", &o->out_dtype)) ||
        (rc = parse_format(a->fmt, &o->fmt)) || (rc = parse_threads(a->j, &o->threads)) ||
        (rc = parse_lse_base(a->base, &o->lse_base2)))
        return rc;
    o->force = a->force->count > 0;
    if (kv_parse_max_mem(a->mem->count ? a->mem->sval[0] : NULL, &o->max_mem, &e))
        return kv_usage("--max-mem: %s", e.msg);
    if (a->tq->count) {
        if (a->tq->ival[0] < 1 || a->tq->ival[0] > 4096)
            return kv_usage("--tile-q: expected 1..4096, got %d", a->tq->ival[0]);
        o->tile_q = a->tq->ival[0];
    }
    if (a->tk->count) {
        if (a->tk->ival[0] < 1 || a->tk->ival[0] > 65536)
            return kv_usage("--tile-k: expected 1..65536, got %d", a->tk->ival[0]);
        o->tile_k = a->tk->ival[0];
    }
    o->scalar = a->scalar->count > 0;
    o->p_f32 = a->pf32->count > 0;
    o->verbose = a->verb->count > 0;
    o->quiet = a->quiet->count > 0;
    return 0;
}

static int main_run(int argc, char **argv)
{
    struct run_args a;
    void *table[40];
    int n = run_args_make(&a, table);
    struct run_opts o;
    memset(&o, 0, sizeof o);
    kv_setprogname("kvattn run");   /* usage line and hints name the subcommand */
    int rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end, run_synopsis, NULL);
    o.out_dtype = KV_NDTYPES;
    if (rc < 0 && !(rc = run_inputs(&a, &o)) && !(rc = run_masks(&a, &o)) &&
        !(rc = run_outputs(&a, &o))) {
        kv_setprogname("kvattn");   /* data errors: "kvattn: ..." */
        rc = run_run(&o);
    }
    free(o.q_lens);
    free(o.kv_lens);
    free(o.seq_lens);
    arg_freetable(table, (size_t)n);
    return rc;
}

/* ---- merge ------------------------------------------------------------- */

/* kvattn merge OUT1 LSE1 OUT2 LSE2 ...: load the pairs, merge by LSE
 * (kv_attn_merge), write the output and optionally the merged LSE. */
static int main_merge(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *aparts = arg_filen(NULL, NULL, "OUT LSE", 0, 1024, "partial outputs and their LSE, in pairs");
    struct arg_file *aout = arg_file0("o", NULL, "FILE", "merged output (default stdout)");
    struct arg_file *alse = arg_file0(NULL, "lse-out", "FILE", "also write the merged LSE (f32)");
    struct arg_str *abase = arg_str0(NULL, "lse-base", "e|2", "logarithm of the LSE files: e (default) or 2 (FlashInfer)");
    struct arg_str *aod = arg_str0(NULL, "out-dtype", "T", "f32|f16|bf16|f64 (default: the first part's)");
    struct arg_str *afmt = arg_str0("f", NULL, "npy|text", "output format");
    struct arg_lit *aforce = arg_lit0(NULL, "force", "write binary to a terminal");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, aparts, aout, alse, abase, aod, afmt, aforce, amem, end};
    struct kv_err e = {{0}};
    struct kv_tensor *outs = NULL, *lses = NULL, mo, ml;
    size_t n = 0, max_mem;
    enum kv_dtype od = KV_NDTYPES;
    enum kv_format fmt;
    int base2 = 0;
    kv_setprogname("kvattn merge");   /* usage line and hints name the subcommand */
    int rc = kv_arg_parse(table, argc, argv, help, version, end,
                          "\nLSE merge of partial attention over disjoint key sets:\n"
                          "lse = log sum exp(lse_i), out = sum exp(lse_i - lse) out_i", NULL);
    kv_tensor_init(&mo);
    kv_tensor_init(&ml);
    if (rc >= 0)
        goto out;
    if (aparts->count < 2 || aparts->count % 2) {
        rc = kv_usage("expected pairs OUT LSE, got %d file(s)", aparts->count);
        goto out;
    }
    if ((rc = parse_dtype_opt(aod, "--out-dtype", &od)) || (rc = parse_format(afmt, &fmt)) ||
        (rc = parse_lse_base(abase, &base2)))
        goto out;
    if (kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("--max-mem: %s", e.msg);
        goto out;
    }
    kv_setprogname("kvattn");
    n = (size_t)aparts->count / 2;
    outs = calloc(n, sizeof *outs);
    lses = calloc(n, sizeof *lses);
    if (!outs || !lses) {
        rc = kv_fail("out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        kv_tensor_init(&outs[i]);
        kv_tensor_init(&lses[i]);
    }
    for (size_t i = 0; i < n; i++)
        if (kv_npy_load(aparts->filename[2 * i], max_mem, &outs[i], &e) ||
            kv_npy_load(aparts->filename[2 * i + 1], max_mem, &lses[i], &e)) {
            rc = kv_fail_err(&e);
            goto out;
        }
    for (size_t i = 0; i < n && base2; i++) {
        /* base-2 LSE in: merge in natural units */
        struct kv_tensor t;
        kv_tensor_init(&t);
        if (kv_tensor_convert(&t, &lses[i], KV_F64, &e)) {
            rc = kv_fail_err(&e);
            goto out;
        }
        scale_tensor(&t, M_LN2);
        kv_tensor_move(&lses[i], &t);
    }
    if (kv_attn_merge(outs, lses, n, od, &mo, alse->count ? &ml : NULL, &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    if (alse->count) {
        const struct kv_tensor *ls[1] = {&ml};
        if (base2)
            scale_tensor(&ml, M_LOG2E);
        if ((rc = write_tensors(alse->filename[0], fmt == KV_FMT_TEXT ? KV_FMT_TEXT : KV_FMT_NPY,
                                1, ls, 1)) != 0)
            goto out;
    }
    const struct kv_tensor *os[1] = {&mo};
    if ((rc = write_tensors(aout->count ? aout->filename[0] : NULL, fmt, aforce->count > 0,
                            os, 1)) != 0)
        goto out;
    rc = kv_close_stdout();
out:
    for (size_t i = 0; i < n && outs && lses; i++) {
        kv_tensor_release(&outs[i]);
        kv_tensor_release(&lses[i]);
    }
    free(outs);
    free(lses);
    kv_tensor_release(&mo);
    kv_tensor_release(&ml);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}

/* ---- cmp --------------------------------------------------------------- */

static void print_index(const struct kv_tensor *t, size_t flat)
{
    int64_t idx[KV_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d] > 0 ? t->shape[d] : 1;
        idx[d] = (int64_t)(flat % (size_t)n);
        flat /= (size_t)n;
    }
    printf("(");
    for (int d = 0; d < t->ndim; d++)
        printf("%s%lld", d ? ", " : "", (long long)idx[d]);
    printf(t->ndim == 1 ? ",)" : ")");
}

/* kvattn cmp A B: statistics on stdout; exit 0 when close, 1 when not, 2
 * when the tensors cannot be compared. */
static int main_cmp(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *afiles = arg_filen(NULL, NULL, "FILE", 0, 2, "A, then the reference B");
    struct arg_dbl *aatol = arg_dbl0(NULL, "atol", "X", "absolute tolerance (default 1e-8)");
    struct arg_dbl *artol = arg_dbl0(NULL, "rtol", "Y", "relative tolerance (default 1e-5)");
    struct arg_lit *anan = arg_lit0(NULL, "equal-nan", "NaN in both places counts as close");
    struct arg_lit *amass = arg_lit0(NULL, "mass", "compare attention-mass maps row by row");
    struct arg_lit *aquiet = arg_lit0(NULL, "quiet", "print nothing; the exit status says it");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, afiles, aatol, artol, anan, amass, aquiet, amem, end};
    struct kv_err e = {{0}};
    struct kv_tensor a, b;
    struct kv_cmp_result r;
    double atol = 1e-8, rtol = 1e-5;
    size_t max_mem;
    kv_setprogname("kvattn cmp");   /* usage line and hints name the subcommand */
    int rc = kv_arg_parse(table, argc, argv, help, version, end,
                          "\nCompare A with the reference B: max abs/rel error, RMSE, cosine,\n"
                          "worst index; exit 0 when close (numpy.allclose), 1 when not.",
                          NULL);
    kv_tensor_init(&a);
    kv_tensor_init(&b);
    if (rc >= 0)
        goto out;
    if (afiles->count != 2) {
        rc = kv_usage("expected two files A B, got %d", afiles->count);
        goto out;
    }
    if (aatol->count) {
        if (!(aatol->dval[0] >= 0) || !isfinite(aatol->dval[0])) {
            rc = kv_usage("--atol: expected a finite number >= 0, got %g", aatol->dval[0]);
            goto out;
        }
        atol = aatol->dval[0];
    }
    if (artol->count) {
        if (!(artol->dval[0] >= 0) || !isfinite(artol->dval[0])) {
            rc = kv_usage("--rtol: expected a finite number >= 0, got %g", artol->dval[0]);
            goto out;
        }
        rtol = artol->dval[0];
    }
    if (kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("--max-mem: %s", e.msg);
        goto out;
    }
    if (strcmp(afiles->filename[0], "-") == 0 && strcmp(afiles->filename[1], "-") == 0) {
        rc = kv_usage("only one of A and B can be standard input");
        goto out;
    }
    kv_setprogname("kvattn");
    if (kv_npy_load(afiles->filename[0], max_mem, &a, &e) ||
        kv_npy_load(afiles->filename[1], max_mem, &b, &e)) {
        /* exit 1 means "not close": an unreadable input is trouble, 2 */
        kv_warn("%s", e.msg);
        rc = KV_EXIT_USAGE;
        goto out;
    }
    /* different shapes cannot be compared: exit 2, like cmp(1) trouble */
    if (amass->count ? kv_cmp_mass(&a, &b, atol, rtol, &r, &e)
                     : kv_cmp_tensors(&a, &b, atol, rtol, anan->count > 0, &r, &e)) {
        kv_warn("%s", e.msg);
        rc = KV_EXIT_USAGE;
        goto out;
    }
    if (!aquiet->count) {
        char sh[128];
        printf("shape: %s\n", kv_shape_str(a.ndim, a.shape, sh, sizeof sh));
        printf("max_abs: %.9g\nmax_rel: %.9g\nrmse: %.9g\ncosine: %.9g\n",
               r.max_abs, r.max_rel, r.rmse, r.cosine);
        if (r.n > 0) {
            printf("worst: %zu ", r.worst);
            print_index(&a, r.worst);
            printf(" %.9g %.9g\n", r.worst_a, r.worst_b);
        }
        if (r.n_nan_a || r.n_nan_b)
            printf("nan: %zu %zu\n", r.n_nan_a, r.n_nan_b);
        if (amass->count) {
            printf("rows: %zu\nmass: %.9g %.9g\nmax_mass_diff: %.9g\nmax_tv: %.9g\n",
                   r.n_rows, r.mass_a, r.mass_b, r.max_mass_diff, r.max_tv);
            printf("worst_row: %zu\n", r.worst_row);
            printf("mismatched_rows: %zu of %zu (atol %g rtol %g)\n", r.n_bad, r.n_rows, atol, rtol);
        } else {
            printf("mismatched: %zu of %zu (atol %g rtol %g)\n", r.n_bad, r.n, atol, rtol);
        }
    }
    /* a report that cannot be written is trouble (2): 1 would read as "not close" */
    rc = kv_close_stdout() ? KV_EXIT_USAGE : r.n_bad > 0;
out:
    kv_tensor_release(&a);
    kv_tensor_release(&b);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}

/* ---- gen --------------------------------------------------------------- */

/* The toy projection of lib/toy (the kvchunk model): token ids at positions
 * P0, P0+1, ... -> Q, K, V of one layer, RoPE on Q and K.  Writes Q, K, V
 * in the requested layout, and the whole [L, 2, T, Hkv, D] KV when kv_path
 * is set. */
struct toy_opts {
    const char *tokens, *kv_path, *q, *k, *v;
    int64_t pos, layers, layer, embed, hq, hkv, T, D;
    uint64_t seed;
    int thd, force, threads;
    enum kv_dtype dtype;
    enum kv_format fmt;
    struct kv_rope rope;
    size_t max_mem;
};

/* src [T, H, D] (one layer slice, contiguous) -> bhsd [1, H, T, D] or thd. */
static int toy_layout(const char *src, int64_t T, int64_t H, int64_t D, enum kv_dtype dt,
                      int thd, struct kv_tensor *out, struct kv_err *e)
{
    size_t es = kv_dtype_size(dt);
    int64_t sh4[4] = {1, H, T, D}, sh3[3] = {T, H, D};
    if (kv_tensor_alloc(out, dt, thd ? 3 : 4, thd ? sh3 : sh4, 0, e))
        return -1;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            size_t from = (size_t)((t * H + h) * D) * es;
            size_t to = thd ? from : (size_t)((h * T + t) * D) * es;
            memcpy((char *)out->data + to, src + from, (size_t)D * es);
        }
    return 0;
}

static int run_toy(struct toy_opts *o)
{
    struct kv_err e = {{0}};
    struct kv_tokens tok;
    struct kv_toy m;
    struct kv_tensor kv, q, tq, tk, tv;
    int64_t *pos = NULL;
    int rc = KV_EXIT_DATA;
    memset(&tok, 0, sizeof tok);
    kv_tensor_init(&kv); kv_tensor_init(&q);
    kv_tensor_init(&tq); kv_tensor_init(&tk); kv_tensor_init(&tv);

    kv_toy_init(&m, o->layers, o->hq, o->hkv, o->D);
    m.seed = o->seed;
    m.embed_dim = o->embed;
    m.rope = o->rope;
    if (kv_toy_check(&m, &e))
        return kv_usage("--toy: %s", e.msg);
    if (kv_tokens_load(o->tokens, o->max_mem, &tok, &e))
        goto fail;
    if ((int64_t)tok.n != o->T) {
        kv_err_set(&e, "--tokens: %zu token ids, --shape says %lld", tok.n, (long long)o->T);
        goto fail;
    }
    if (o->pos + (int64_t)tok.n > INT32_MAX) {
        kv_err_set(&e, "--pos %lld: the tokens would end past 2^31", (long long)o->pos);
        goto fail;
    }
    pos = malloc((tok.n ? tok.n : 1) * sizeof *pos);
    if (!pos) {
        kv_err_set(&e, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < tok.n; i++)
        pos[i] = o->pos + (int64_t)i;
    if (kv_toy_kv(&m, tok.ids, pos, tok.n, o->dtype, o->max_mem, &kv, &e) ||
        kv_toy_q(&m, tok.ids, pos, tok.n, o->layer, o->dtype, o->max_mem, &q, &e))
        goto fail;
    size_t es = kv_dtype_size(o->dtype);
    size_t slice = (size_t)(o->T * o->hkv * o->D) * es;
    const char *layer = (const char *)kv.data + (size_t)o->layer * 2 * slice;
    if (toy_layout(q.data, o->T, o->hq, o->D, o->dtype, o->thd, &tq, &e) ||
        toy_layout(layer, o->T, o->hkv, o->D, o->dtype, o->thd, &tk, &e) ||
        toy_layout(layer + slice, o->T, o->hkv, o->D, o->dtype, o->thd, &tv, &e))
        goto fail;
    if (o->kv_path) {
        const struct kv_tensor *t1[1] = {&kv};
        if ((rc = write_tensors(o->kv_path, KV_FMT_NPY, 1, t1, 1)) != 0)
            goto done;
    }
    if (o->q) {
        const struct kv_tensor *t1[1] = {&tq}, *t2[1] = {&tk}, *t3[1] = {&tv};
        if ((rc = write_tensors(o->q, KV_FMT_NPY, 1, t1, 1)) ||
            (rc = write_tensors(o->k, KV_FMT_NPY, 1, t2, 1)) ||
            (rc = write_tensors(o->v, KV_FMT_NPY, 1, t3, 1)))
            goto done;
    } else if (!o->kv_path) {
        const struct kv_tensor *ts[3] = {&tq, &tk, &tv};
        if ((rc = write_tensors(NULL, o->fmt, o->force, ts, 3)) != 0)
            goto done;
    }
    rc = kv_close_stdout();
    goto done;
fail:
    rc = kv_fail_err(&e);
done:
    free(pos);
    if (tok.ids)
        kv_tokens_release(&tok);
    kv_tensor_release(&kv); kv_tensor_release(&q);
    kv_tensor_release(&tq); kv_tensor_release(&tk); kv_tensor_release(&tv);
    return rc;
}

/* ---- mla --------------------------------------------------------------- */

/* kvattn mla: Multi-head Latent Attention through lib/attn/mla.  The form
 * follows from the inputs: --kv-cache (absorbed, a paged latent cache) or
 * --c-kv (naive, with --k-pe --w-uk --w-uv). */
struct mla_args {
    struct arg_lit *help, *version, *causal, *force, *verb;
    struct arg_file *q, *cache, *bt, *ckv, *kpe, *wuk, *wuv, *cfg, *lse, *out;
    struct arg_str *ql, *kl, *sl, *od, *fmt, *mem, *scale, *rank;
    struct arg_int *j;
    struct arg_end *end;
};

static int mla_args_make(struct mla_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version and exit");
    t[n++] = a->q = arg_file0("q", NULL, "FILE", "queries [T,H,Dl+R] (absorbed) or [T,H,P+R] (naive)");
    t[n++] = a->cache = arg_file0(NULL, "kv-cache", "FILE", "absorbed: latent cache [num_blocks,block_size,1,Dl+R]");
    t[n++] = a->bt = arg_file0(NULL, "block-table", "FILE", "absorbed: block table (text rows or integer .npy)");
    t[n++] = a->sl = arg_str0(NULL, "seq-lens", "N,N..", "absorbed: keys per request");
    t[n++] = a->ckv = arg_file0(NULL, "c-kv", "FILE", "naive: compressed KV [Tk,Dl]");
    t[n++] = a->kpe = arg_file0(NULL, "k-pe", "FILE", "naive: rotary keys [Tk,R]");
    t[n++] = a->wuk = arg_file0(NULL, "w-uk", "FILE", "naive: up-projection of K [H,Dl,P]");
    t[n++] = a->wuv = arg_file0(NULL, "w-uv", "FILE", "up-projection of V [H,Dl,Vd] (absorbed: project the output)");
    t[n++] = a->ql = arg_str0(NULL, "q-lens", "N,N..", "queries per request (absorbed default: 1 each)");
    t[n++] = a->kl = arg_str0(NULL, "kv-lens", "N,N..", "naive: keys per request (default = q-lens)");
    t[n++] = a->causal = arg_lit0(NULL, "causal", "keep j <= i + Lk - Lq (decode, chunked prefill)");
    t[n++] = a->cfg = arg_file0(NULL, "model-config", "FILE", "scale and kv_lora_rank from config.json");
    t[n++] = a->scale = arg_str0(NULL, "scale", "S", "softmax scale (default: the config's; naive: 1/sqrt(P+R))");
    t[n++] = a->rank = arg_str0(NULL, "kv-lora-rank", "Dl", "absorbed: latent dims that are V (default: the config's)");
    t[n++] = a->lse = arg_file0(NULL, "lse", "FILE", "also write the log-sum-exp per row (f32)");
    t[n++] = a->od = arg_str0(NULL, "out-dtype", "T", "f32|f16|bf16|f64 (default: the query's)");
    t[n++] = a->out = arg_file0("o", NULL, "FILE", "output file (default stdout)");
    t[n++] = a->fmt = arg_str0("f", NULL, "npy|text", "output format (default: npy unless stdout is a terminal)");
    t[n++] = a->force = arg_lit0(NULL, "force", "write binary to a terminal");
    t[n++] = a->j = arg_int0("j", NULL, "N", "threads (default: all cores)");
    t[n++] = a->mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    t[n++] = a->verb = arg_lit0("v", "verbose", "print the form, the scale and the error bound on stderr");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* Inputs of kvattn mla, loaded (large files mapped). */
struct mla_in {
    struct input q, cache, ckv, kpe, wuk, wuv;
    int64_t *bt, *ql, *kl, *sl;
    size_t bt_rows, bt_cols, n_ql, n_kl, n_sl;
};

static void mla_in_release(struct mla_in *m)
{
    input_release(&m->q); input_release(&m->cache); input_release(&m->ckv);
    input_release(&m->kpe); input_release(&m->wuk); input_release(&m->wuv);
    free(m->bt); free(m->ql); free(m->kl); free(m->sl);
}

/* Check the options: one form, its inputs, at most one stdin, a scale. */
static int mla_check(const struct mla_args *a, int *absorbed, double *scale, int *has_scale,
                     int64_t *rank, enum kv_dtype *od, enum kv_format *fmt, int *threads,
                     size_t *max_mem)
{
    struct kv_err e = {{0}};
    int rc;
    if (!a->q->count)
        return kv_usage("-q FILE is required");
    *absorbed = a->cache->count > 0;
    if (*absorbed == (a->ckv->count > 0))
        return kv_usage("give --kv-cache (absorbed) or --c-kv (naive), one of them");
    if (*absorbed && (!a->bt->count || !a->sl->count))
        return kv_usage("--kv-cache needs --block-table and --seq-lens");
    if (*absorbed && (a->kpe->count || a->wuk->count || a->kl->count))
        return kv_usage("--k-pe, --w-uk and --kv-lens belong to the naive form (--c-kv)");
    if (!*absorbed && (!a->kpe->count || !a->wuk->count || !a->wuv->count))
        return kv_usage("--c-kv needs --k-pe, --w-uk and --w-uv");
    if (!*absorbed && (a->bt->count || a->sl->count || a->rank->count))
        return kv_usage("--block-table, --seq-lens and --kv-lora-rank belong to the absorbed form");
    const char *paths[] = {a->q->filename[0], a->cache->count ? a->cache->filename[0] : NULL,
                           a->bt->count ? a->bt->filename[0] : NULL,
                           a->ckv->count ? a->ckv->filename[0] : NULL,
                           a->kpe->count ? a->kpe->filename[0] : NULL,
                           a->wuk->count ? a->wuk->filename[0] : NULL,
                           a->wuv->count ? a->wuv->filename[0] : NULL,
                           a->cfg->count ? a->cfg->filename[0] : NULL};
    int nstdin = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        nstdin += is_stdin(paths[i]);
    if (nstdin > 1)
        return kv_usage("only one input can be standard input");
    *has_scale = 0;
    *rank = 0;
    if (a->cfg->count) {
        struct kv_latent L;
        if (kv_latent_load(a->cfg->filename[0], 0, &L, &e))
            return kv_usage("--model-config: %s", e.msg);
        *scale = L.softmax_scale;
        *has_scale = 1;
        *rank = L.kv_lora_rank;
    }
    if (a->scale->count) {
        if (kv_parse_f64(a->scale->sval[0], "--scale", scale, &e))
            return kv_usage("%s", e.msg);
        if (!isfinite(*scale))
            return kv_usage("--scale: expected a finite number, got '%s'", a->scale->sval[0]);
        *has_scale = 1;
    }
    if (*absorbed && !*has_scale)
        return kv_usage("the absorbed form needs --model-config or --scale (MLA's scale is "
                        "1/sqrt(qk_nope_head_dim + qk_rope_head_dim), not that of Q's width)");
    if (a->rank->count && kv_opt_i64(a->rank, "--kv-lora-rank", 1, 1 << 20, rank))
        return KV_EXIT_USAGE;
    if (*absorbed && !*rank)
        return kv_usage("the absorbed form needs --kv-lora-rank or --model-config");
    *od = KV_NDTYPES;
    if ((rc = parse_dtype_opt(a->od, "--out-dtype", od)) || (rc = parse_format(a->fmt, fmt)) ||
        (rc = parse_threads(a->j, threads)))
        return rc;
    if (kv_parse_max_mem(a->mem->count ? a->mem->sval[0] : NULL, max_mem, &e))
        return kv_usage("--max-mem: %s", e.msg);
    return 0;
}

static int main_mla(int argc, char **argv)
{
    struct mla_args a;
    void *table[32];
    int n = mla_args_make(&a, table);
    struct kv_err e = {{0}};
    struct mla_in in;
    struct kv_tensor out, lse, proj;
    int absorbed = 0, has_scale = 0, threads = 0;
    double scale = 0, bound = 0;
    int64_t rank = 0;
    enum kv_dtype od = KV_NDTYPES;
    enum kv_format fmt = KV_FMT_AUTO;
    size_t max_mem = 0;
    memset(&in, 0, sizeof in);
    kv_tensor_init(&out);
    kv_tensor_init(&lse);
    kv_tensor_init(&proj);
    kv_setprogname("kvattn mla");
    int rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                          "\nMulti-head Latent Attention (DeepSeek), in one of its two forms:\n"
                          "absorbed  -q Q' --kv-cache C --block-table BT --seq-lens ..: out [T,H,Dl]\n"
                          "naive     -q Q --c-kv C --k-pe K --w-uk W --w-uv W: out [T,H,Vd]", NULL);
    if (rc >= 0)
        goto out;
    if ((rc = mla_check(&a, &absorbed, &scale, &has_scale, &rank, &od, &fmt, &threads, &max_mem)) ||
        (rc = parse_list(a.ql, "--q-lens", &in.ql, &in.n_ql)) ||
        (rc = parse_list(a.kl, "--kv-lens", &in.kl, &in.n_kl)) ||
        (rc = parse_list(a.sl, "--seq-lens", &in.sl, &in.n_sl)))
        goto out;
    if (fmt == KV_FMT_NPY && (!a.out->count || is_stdin(a.out->filename[0])) &&
        (rc = kv_check_binary_ok(stdout, a.force->count > 0)))
        goto out;
    kv_setprogname("kvattn");
    rc = KV_EXIT_DATA;
    if (input_load(&in.q, a.q->filename[0], max_mem, &e) ||
        (a.wuv->count && input_load(&in.wuv, a.wuv->filename[0], max_mem, &e)))
        goto fail;
    if (absorbed) {
        if (input_load(&in.cache, a.cache->filename[0], max_mem, &e) ||
            kv_read_int_table(a.bt->filename[0], -1, max_mem, &in.bt, &in.bt_rows, &in.bt_cols, &e))
            goto fail;
        struct kv_mla_req r;
        memset(&r, 0, sizeof r);
        r.q = &in.q.t; r.cache = &in.cache.t; r.block_table = in.bt;
        r.bt_rows = in.bt_rows; r.bt_cols = in.bt_cols;
        r.seq_lens = in.sl; r.n_seq_lens = in.n_sl;
        r.q_lens = in.ql; r.n_q_lens = in.n_ql;
        r.kv_lora_rank = rank; r.causal = a.causal->count > 0; r.scale = scale;
        r.out_dtype = a.wuv->count ? KV_F32 : od; r.n_threads = threads; r.max_bytes = max_mem;
        if (kv_mla_absorbed(&r, &out, &lse, &e))
            goto fail;
        int64_t maxk = 1;
        for (size_t i = 0; i < in.n_sl; i++)
            maxk = in.sl[i] > maxk ? in.sl[i] : maxk;
        double A = 0, V = 0;
        int64_t D = in.q.t.shape[2];
        /* the bound scans every input: only when -v prints it */
        if (a.verb->count)
            kv_mla_scan_absorbed(&in.q.t, &in.cache.t, rank, scale, &A, &V);
        bound = kv_mla_bound_absorbed(maxk, D, A, V, a.wuv->count ? KV_F32 : out.dtype);
        if (a.wuv->count) {
            enum kv_dtype pd = od == KV_NDTYPES ? in.q.t.dtype : od;
            double w1 = 0.0, om = 0.0;
            if (kv_mla_project(&out, &in.wuv.t, pd, max_mem, &proj, &e))
                goto fail;
            int64_t H = in.wuv.t.shape[0], Dl = in.wuv.t.shape[1], Vd = in.wuv.t.shape[2];
            for (int64_t h = 0; a.verb->count && h < H; h++)
                for (int64_t v = 0; v < Vd; v++) {
                    double s = 0.0;
                    for (int64_t l = 0; l < Dl; l++)
                        s += fabs(kv_tensor_get_f64(&in.wuv.t, (size_t)((h * Dl + l) * Vd + v)));
                    w1 = fmax(w1, s);
                }
            for (size_t i = 0; a.verb->count && i < kv_tensor_numel(&proj); i++)
                om = fmax(om, fabs(kv_tensor_get_f64(&proj, i)));
            bound = kv_mla_bound_projected(bound, w1, om, pd);
            kv_tensor_move(&out, &proj);
        }
    } else {
        if (input_load(&in.ckv, a.ckv->filename[0], max_mem, &e) ||
            input_load(&in.kpe, a.kpe->filename[0], max_mem, &e) ||
            input_load(&in.wuk, a.wuk->filename[0], max_mem, &e))
            goto fail;
        struct kv_mla_naive_req r;
        memset(&r, 0, sizeof r);
        r.q = &in.q.t; r.c_kv = &in.ckv.t; r.k_pe = &in.kpe.t;
        r.w_uk = &in.wuk.t; r.w_uv = &in.wuv.t;
        r.q_lens = in.ql; r.n_q_lens = in.n_ql; r.kv_lens = in.kl; r.n_kv_lens = in.n_kl;
        r.causal = a.causal->count > 0; r.has_scale = has_scale; r.scale = scale;
        r.out_dtype = od; r.n_threads = threads; r.max_bytes = max_mem;
        if (kv_mla_naive(&r, &out, &lse, &e))
            goto fail;
        double A, V;
        int64_t Dl = in.wuk.t.shape[1], D = in.q.t.shape[2], maxk = 1;
        if (!has_scale)
            scale = 1.0 / sqrt((double)D);
        for (size_t i = 0; i < in.n_kl; i++)
            maxk = in.kl[i] > maxk ? in.kl[i] : maxk;
        if (!in.n_kl)
            maxk = in.ckv.t.shape[0];
        A = V = 0;
        if (a.verb->count)
            kv_mla_scan_naive(&r, scale, &A, &V, NULL);
        bound = kv_mla_bound_naive(maxk, Dl, D, A, V, out.dtype);
    }
    if (a.verb->count)
        fprintf(stderr, "kvattn: mla %s form, scale %.17g, error bound %.3g\n",
                absorbed ? (a.wuv->count ? "absorbed (projected by W_UV)" : "absorbed") : "naive",
                scale, bound);
    if (a.lse->count) {
        const struct kv_tensor *t1[1] = {&lse};
        if ((rc = write_tensors(a.lse->filename[0], KV_FMT_NPY, 1, t1, 1)))
            goto out;
    }
    const struct kv_tensor *ts[1] = {&out};
    if ((rc = write_tensors(a.out->count ? a.out->filename[0] : NULL, fmt, a.force->count > 0,
                            ts, 1)))
        goto out;
    rc = kv_close_stdout();
    goto out;
fail:
    rc = kv_fail_err(&e);
out:
    mla_in_release(&in);
    kv_tensor_release(&out);
    kv_tensor_release(&lse);
    kv_tensor_release(&proj);
    arg_freetable(table, (size_t)n);
    return rc;
}

/* kvattn gen --model-config with an MLA model: the inputs of both forms
 * into a directory (see kvattn(1), MLA). */
static int mla_gen(const char *cfg, const char *shape_s, const char *seed_s, const char *dt_s,
                   int kvlen, const char *dir, int bsz)
{
    struct kv_err e = {{0}};
    struct kv_latent L;
    int64_t *sh = NULL, seed = 0;
    size_t nsh = 0;
    enum kv_dtype dt = KV_NDTYPES;
    if (kv_latent_load(cfg, 0, &L, &e))
        return kv_usage("--model-config: %s", e.msg);
    if (!dir)
        return kv_usage("an MLA config writes several arrays: give --dir DIR");
    if (!shape_s)
        return kv_usage("--shape B,S or B,H,S is required");
    if (kv_parse_i64_list(shape_s, "--shape", 1, 1 << 20, &sh, &nsh, &e))
        return kv_usage("%s", e.msg);
    if (nsh != 2 && nsh != 3) {
        free(sh);
        return kv_usage("--shape: expected B,S or B,H,S with an MLA config, got '%s'", shape_s);
    }
    int64_t B = sh[0], H = nsh == 3 ? sh[1] : L.n_heads, S = sh[nsh - 1];
    free(sh);
    int64_t Lk = kvlen ? kvlen : S;
    if (Lk < S)
        return kv_usage("--kv-len: expected at least S = %lld, got %lld", (long long)S,
                        (long long)Lk);
    if (bsz < 1 || bsz > 1 << 16)
        return kv_usage("--block-size: expected 1..65536, got %d", bsz);
    if (seed_s && kv_parse_i64(seed_s, "--seed", 0, INT64_MAX, &seed, &e))
        return kv_usage("%s", e.msg);
    if (dt_s) {
        if (kv_dtype_parse(dt_s, &dt, &e) || !(dt == KV_F32 || dt == KV_F16 || dt == KV_BF16))
            return kv_usage("--dtype: expected f32, f16 or bf16, got '%s'", dt_s);
    } else {
        dt = L.dtype;
    }
    struct kv_mla_gen g = {B, H, S, Lk, L.kv_lora_rank, L.rope_dim, L.nope_dim, L.v_dim,
                           bsz, (uint64_t)seed, dt};
    struct kv_mla_inputs m;
    kv_setprogname("kvattn");
    if (kv_mla_gen_inputs(&g, 0, &m, &e))
        return kv_fail_err(&e);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        kv_mla_inputs_release(&m);
        return kv_fail("cannot create '%s': %s", dir, strerror(errno));
    }
    static const char *names[] = {"q.npy", "q_absorbed.npy", "c_kv.npy", "k_pe.npy",
                                  "w_uk.npy", "w_uv.npy", "kv_cache.npy", "block_table.npy"};
    const struct kv_tensor *ts[] = {&m.q, &m.q_absorbed, &m.c_kv, &m.k_pe, &m.w_uk, &m.w_uv,
                                    &m.cache, &m.block_table};
    int rc = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !rc; i++) {
        char path[4096];
        const struct kv_tensor *one[1] = {ts[i]};
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        rc = write_tensors(path, KV_FMT_NPY, 1, one, 1);
    }
    for (int f = 0; f < 3 && !rc; f++) {
        static const char *lists[] = {"seq_lens", "q_lens", "scale"};
        char path[4096];
        struct kv_out o;
        snprintf(path, sizeof path, "%s/%s", dir, lists[f]);
        if (kv_out_open(&o, path, &e)) {
            rc = kv_fail_err(&e);
            break;
        }
        for (int64_t b = 0; b < B && f < 2; b++)
            fprintf(o.f, "%s%lld", b ? "," : "", (long long)(f == 0 ? Lk : S));
        if (f == 2)
            fprintf(o.f, "%.17g", L.softmax_scale);
        fputc('\n', o.f);
        if (kv_out_commit(&o, &e))
            rc = kv_fail_err(&e);
    }
    kv_mla_inputs_release(&m);
    return rc;
}

/* Is cfg an MLA model's config (it has kv_lora_rank)?  1 yes, 0 no, -1
 * when it does not load (the ordinary path reports why). */
static int mla_config(const char *cfg)
{
    struct kv_err e = {{0}};
    struct kv_model m;
    if (kv_model_load(cfg, 0, &m, &e) < 0)
        return -1;
    return m.kv_lora_rank > 0;
}

/* B, H, S, D and the KV heads of gen: from --shape B,H,S,D, or with
 * --model-config from the file (H, KV heads, D) and --shape B,S; a full
 * --shape with a config overrides its H and D.  m is zeroed without a
 * config. */
static int gen_geometry(const char *shape_s, const char *cfg, int kvh,
                        struct kv_gen_spec *s, struct kv_model *m)
{
    struct kv_err e = {{0}};
    int64_t *sh = NULL;
    size_t n = 0;
    memset(m, 0, sizeof *m);
    if (cfg) {
        if (kv_model_load(cfg, 0, m, &e) < 0)
            return kv_usage("--model-config: %s", e.msg);
        if (m->kv_lora_rank)
            return kv_usage("--model-config: %s: an MLA model (kv_lora_rank %lld); "
                            "gen makes per-head Q, K, V", cfg, (long long)m->kv_lora_rank);
    }
    if (!shape_s)
        return kv_usage(cfg ? "--shape B,S is required" : "--shape B,H,S,D is required");
    if (kv_parse_i64_list(shape_s, "--shape", 1, INT32_MAX, &sh, &n, &e))
        return kv_usage("%s", e.msg);
    if (n == 2 && cfg) {
        s->B = sh[0]; s->Lq = sh[1]; s->Hq = m->n_heads; s->D = m->head_dim;
        s->Hkv = m->n_kv_heads;
    } else if (n == 4) {
        s->B = sh[0]; s->Hq = sh[1]; s->Lq = sh[2]; s->D = sh[3];
        s->Hkv = cfg && s->Hq == m->n_heads ? m->n_kv_heads : s->Hq;
    } else {
        free(sh);
        return kv_usage(cfg ? "--shape: expected B,S or B,H,S,D, got '%s'"
                            : "--shape: expected B,H,S,D (4 numbers), got '%s'", shape_s);
    }
    free(sh);
    s->Lk = s->Lq;
    if (kvh) {
        if (kvh < 1 || s->Hq % kvh)
            return kv_usage("--kv-heads: expected a divisor of %lld, got %d", (long long)s->Hq, kvh);
        s->Hkv = kvh;
    }
    return 0;
}

/* kvattn gen: synthetic patterns through lib/gen, or --toy through
 * lib/toy; one Q K V stream on stdout or three files. */
struct gen_args {
    struct arg_lit *help, *version, *force, *toy;
    struct arg_str *shape, *pat, *seed, *dt, *layout, *fmt, *mem, *pos, *rope;
    struct arg_int *kvh, *kvlen, *sink, *j, *layers, *layer, *embed, *rot, *mla_bs;
    struct arg_file *cfg, *q, *k, *v, *tok, *kv, *mla_dir;
    struct arg_dbl *theta;
    struct arg_end *end;
};

/* gen's options, in the order --help lists them; returns the count. */
static int gen_args_make(struct gen_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version and exit");
    t[n++] = a->shape = arg_str0(NULL, "shape", "B,H,S,D", "batch, query heads, length, head size");
    t[n++] = a->cfg = arg_file0(NULL, "model-config", "FILE",
                                "H, KV heads, D, dtype (and the toy's layers and RoPE) "
                                "from config.json; --shape is then B,S");
    t[n++] = a->kvh = arg_int0(NULL, "kv-heads", "H", "kv heads (default: = query heads)");
    t[n++] = a->kvlen = arg_int0(NULL, "kv-len", "N", "key length (default S; queries are the last S)");
    t[n++] = a->pat = arg_str0(NULL, "pattern", "P", "random|rope|local|sink|stripes|mix (default mix)");
    t[n++] = a->seed = arg_str0(NULL, "seed", "N", "seed (default 0)");
    t[n++] = a->sink = arg_int0(NULL, "sinks", "N", "sink tokens (sink, mix; default 4)");
    t[n++] = a->dt = arg_str0(NULL, "dtype", "T", "f32|f16|bf16|f64 (default f32)");
    t[n++] = a->layout = arg_str0(NULL, "layout", "bhsd|thd", "layout (default bhsd)");
    t[n++] = a->q = arg_file0("q", NULL, "FILE", "write Q here");
    t[n++] = a->k = arg_file0("k", NULL, "FILE", "write K here");
    t[n++] = a->v = arg_file0("v", NULL, "FILE", "write V here");
    t[n++] = a->fmt = arg_str0("f", NULL, "npy|text", "format of the stdout stream");
    t[n++] = a->force = arg_lit0(NULL, "force", "write binary to a terminal");
    t[n++] = a->j = arg_int0("j", NULL, "N", "threads (default: all cores)");
    t[n++] = a->mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    t[n++] = a->toy = arg_lit0(NULL, "toy", "the toy projection of kvchunk: --tokens at --pos");
    t[n++] = a->tok = arg_file0(NULL, "tokens", "FILE", "toy: token ids (text or integer .npy)");
    t[n++] = a->pos = arg_str0(NULL, "pos", "P0", "toy: position of the first token (default 0)");
    t[n++] = a->layers = arg_int0(NULL, "layers", "L", "toy: layers of the model (default 1)");
    t[n++] = a->layer = arg_int0(NULL, "layer", "l", "toy: the layer Q, K, V come from (default 0)");
    t[n++] = a->embed = arg_int0(NULL, "embed-dim", "E", "toy: embedding width (default 32)");
    t[n++] = a->rope = arg_str0(NULL, "rope", "neox|gptj|none", "toy: RoPE style (default neox)");
    t[n++] = a->theta = arg_dbl0(NULL, "rope-theta", "T", "toy: RoPE base (default 10000)");
    t[n++] = a->rot = arg_int0(NULL, "rotary-dim", "R", "toy: rotated dims (default D)");
    t[n++] = a->kv = arg_file0(NULL, "kv", "FILE", "toy: also write KV [L, 2, T, Hkv, D] (kvchunk's layout)");
    t[n++] = a->mla_dir = arg_file0(NULL, "dir", "DIR", "MLA config: write both forms' inputs into DIR");
    t[n++] = a->mla_bs = arg_int0(NULL, "block-size", "N", "MLA config: latent cache block size (default 64)");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* The generator's spec from the options after the geometry. */
static int gen_spec(const struct gen_args *a, const struct kv_model *model,
                    struct kv_gen_spec *s, enum kv_format *fmt)
{
    struct kv_err e = {{0}};
    int rc;
    if (a->kvlen->count) {
        if (a->kvlen->ival[0] < s->Lq)
            return kv_usage("--kv-len: expected at least S = %lld, got %d", (long long)s->Lq,
                            a->kvlen->ival[0]);
        s->Lk = a->kvlen->ival[0];
    }
    s->pattern = KV_GEN_MIX;
    if (a->pat->count && kv_gen_pattern_parse(a->pat->sval[0], &s->pattern, &e))
        return kv_usage("--pattern: %s", e.msg);
    if (a->seed->count) {
        int64_t sd;
        if (kv_parse_i64(a->seed->sval[0], "--seed", 0, INT64_MAX, &sd, &e))
            return kv_usage("%s", e.msg);
        s->seed = (uint64_t)sd;
    }
    if (a->sink->count) {
        if (a->sink->ival[0] < 1)
            return kv_usage("--sinks: expected at least 1, got %d", a->sink->ival[0]);
        s->n_sink = a->sink->ival[0];
    }
    s->dtype = model->have_dtype ? model->dtype : KV_F32;
    if ((rc = parse_dtype_opt(a->dt, "--dtype", &s->dtype)) || (rc = parse_format(a->fmt, fmt)) ||
        (rc = parse_threads(a->j, &s->n_threads)))
        return rc;
    if (a->layout->count) {
        if (strcmp(a->layout->sval[0], "thd") == 0)
            s->thd = 1;
        else if (strcmp(a->layout->sval[0], "bhsd") != 0)
            return kv_usage("--layout: expected bhsd or thd, got '%s'", a->layout->sval[0]);
    }
    if (kv_parse_max_mem(a->mem->count ? a->mem->sval[0] : NULL, &s->max_bytes, &e))
        return kv_usage("--max-mem: %s", e.msg);
    int nfiles = a->q->count + a->k->count + a->v->count;
    if (nfiles != 0 && nfiles != 3)
        return kv_usage("give all of -q, -k, -v, or none (one stream on stdout)");
    return 0;
}

/* --toy: the toy projection's options, checked, into t. */
static int gen_toy(const struct gen_args *a, const struct kv_model *model,
                   const struct kv_gen_spec *s, enum kv_format fmt, struct toy_opts *t)
{
    struct kv_err e = {{0}};
    memset(t, 0, sizeof *t);
    if (!a->tok->count)
        return kv_usage("--toy needs --tokens FILE");
    if (s->B != 1 || a->kvlen->count || a->pat->count || a->sink->count)
        return kv_usage("--toy: --shape must be 1,H,T,D; --kv-len, --pattern and --sinks do not apply");
    t->tokens = a->tok->filename[0];
    t->kv_path = a->kv->count ? a->kv->filename[0] : NULL;
    t->q = a->q->count ? a->q->filename[0] : NULL;
    t->k = a->k->count ? a->k->filename[0] : NULL;
    t->v = a->v->count ? a->v->filename[0] : NULL;
    t->hq = s->Hq; t->hkv = s->Hkv; t->T = s->Lq; t->D = s->D;
    t->seed = s->seed; t->thd = s->thd; t->dtype = s->dtype; t->fmt = fmt;
    t->force = a->force->count > 0; t->max_mem = s->max_bytes;
    t->layers = a->layers->count ? a->layers->ival[0] : model->n_layers ? model->n_layers : 1;
    t->layer = a->layer->count ? a->layer->ival[0] : 0;
    t->embed = a->embed->count ? a->embed->ival[0] : 32;
    if (t->layers < 1 || t->layer < 0 || t->layer >= t->layers)
        return kv_usage("--layer: expected 0..%lld, got %lld", (long long)t->layers - 1,
                        (long long)t->layer);
    if (t->embed < 1)
        return kv_usage("--embed-dim: expected at least 1, got %lld", (long long)t->embed);
    if (a->pos->count && kv_parse_i64(a->pos->sval[0], "--pos", 0, INT32_MAX, &t->pos, &e))
        return kv_usage("%s", e.msg);
    kv_rope_init(&t->rope, (int)t->D);
    if (model->n_layers)
        t->rope = model->rope;
    if (a->rope->count && kv_rope_parse_style(a->rope->sval[0], &t->rope.style, &e))
        return kv_usage("--rope: %s", e.msg);
    if (a->theta->count) {
        if (!(a->theta->dval[0] > 1.0) || !isfinite(a->theta->dval[0]))
            return kv_usage("--rope-theta: expected a number > 1, got %g", a->theta->dval[0]);
        t->rope.theta = a->theta->dval[0];
    }
    if (a->rot->count)
        t->rope.rotary_dim = a->rot->ival[0];
    if (kv_rope_check(&t->rope, &e))
        return kv_usage("--rope: %s", e.msg);
    return 0;
}

static int main_gen(int argc, char **argv)
{
    struct gen_args a;
    void *table[40];
    int n = gen_args_make(&a, table);
    struct kv_err e = {{0}};
    struct kv_gen_spec s;
    struct kv_tensor q, k, v;
    enum kv_format fmt;
    struct kv_model model;
    struct toy_opts t;
    kv_setprogname("kvattn gen");   /* usage line and hints name the subcommand */
    int rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                          "\nDeterministic synthetic Q, K, V with the structures of real attention.\n"
                          "Without -q/-k/-v the three arrays go to stdout as one .npy stream.",
                          NULL);
    kv_tensor_init(&q);
    kv_tensor_init(&k);
    kv_tensor_init(&v);
    memset(&s, 0, sizeof s);
    int mla = rc < 0 && a.cfg->count ? mla_config(a.cfg->filename[0]) : 0;
    if (mla == 1) {
        rc = mla_gen(a.cfg->filename[0], a.shape->count ? a.shape->sval[0] : NULL,
                     a.seed->count ? a.seed->sval[0] : NULL, a.dt->count ? a.dt->sval[0] : NULL,
                     a.kvlen->count ? a.kvlen->ival[0] : 0,
                     a.mla_dir->count ? a.mla_dir->filename[0] : NULL,
                     a.mla_bs->count ? a.mla_bs->ival[0] : 64);
        goto out;
    }
    if (rc < 0 && mla == 0 && (a.mla_dir->count || a.mla_bs->count)) {
        rc = kv_usage("--dir and --block-size need an MLA --model-config");
        goto out;
    }
    if (rc >= 0 ||
        (rc = gen_geometry(a.shape->count ? a.shape->sval[0] : NULL,
                           a.cfg->count ? a.cfg->filename[0] : NULL,
                           a.kvh->count ? a.kvh->ival[0] : 0, &s, &model)) ||
        (rc = gen_spec(&a, &model, &s, &fmt)))
        goto out;
    if (a.toy->count) {
        if ((rc = gen_toy(&a, &model, &s, fmt, &t)) == 0) {
            kv_setprogname("kvattn");
            rc = run_toy(&t);
        }
        goto out;
    }
    if (a.tok->count || a.pos->count || a.layers->count || a.layer->count || a.embed->count ||
        a.rope->count || a.theta->count || a.rot->count || a.kv->count) {
        rc = kv_usage("--tokens, --pos, --layers, --layer, --embed-dim, --rope*, --kv need --toy");
        goto out;
    }
    kv_setprogname("kvattn");
    if (kv_gen_qkv(&s, &q, &k, &v, &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    if (a.q->count) {
        const struct kv_tensor *t1[1] = {&q}, *t2[1] = {&k}, *t3[1] = {&v};
        if ((rc = write_tensors(a.q->filename[0], KV_FMT_NPY, 1, t1, 1)) ||
            (rc = write_tensors(a.k->filename[0], KV_FMT_NPY, 1, t2, 1)) ||
            (rc = write_tensors(a.v->filename[0], KV_FMT_NPY, 1, t3, 1)))
            goto out;
    } else {
        const struct kv_tensor *ts[3] = {&q, &k, &v};
        if ((rc = write_tensors(NULL, fmt, a.force->count > 0, ts, 3)) != 0)
            goto out;
    }
    rc = kv_close_stdout();
out:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&v);
    arg_freetable(table, (size_t)n);
    return rc;
}

/* kvattn bound: the error bound of kvattn(1) ACCURACY for these inputs,
 * the tolerance a kernel test or `kvattn cmp --atol` should use. */
static int main_bound(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *aq = arg_file1("q", NULL, "Q", "queries (.npy, head dim last)");
    struct arg_file *ak = arg_file1("k", NULL, "K", "keys (.npy)");
    struct arg_file *av = arg_file1("v", NULL, "V", "values (.npy)");
    struct arg_str *ascale = arg_str0(NULL, "scale", "S", "softmax scale (default 1/sqrt(D))");
    struct arg_str *amask = arg_str0(NULL, "mask-max", "M", "largest finite |value| of an additive mask (default 0)");
    struct arg_str *aroutes = arg_str0(NULL, "routes", "N", "routes compared with each other: N times the bound (default 1)");
    struct arg_str *aod = arg_str0(NULL, "out-dtype", "T", "f32|f16|bf16 (default f32)");
    struct arg_lit *aall = arg_lit0(NULL, "all", "print out:, lse: and their inputs, not only the output's bound");
    struct arg_lit *anop = arg_lit0(NULL, "no-p-round", "bf16 Q, K, V: the bound of run --no-p-round");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, aq, ak, av, ascale, amask, aroutes, aod, aall, anop, amem, end};
    struct kv_err e = {{0}};
    struct kv_tensor q, k, v;
    size_t max_mem;
    enum kv_dtype od = KV_F32;
    double scale = 0, mask_abs = 0;
    int64_t routes = 1;
    kv_tensor_init(&q);
    kv_tensor_init(&k);
    kv_tensor_init(&v);
    kv_setprogname("kvattn bound");
    int rc = kv_arg_parse(table, argc, argv, help, version, end,
                          "\nThe documented error bound (kvattn(1) ACCURACY) of kvattn run's\n"
                          "output for these inputs, against exact attention", NULL);
    if (rc >= 0)
        goto out;
    if ((rc = kv_opt_i64(aroutes, "--routes", 1, 1000, &routes)))
        goto out;
    if ((ascale->count && kv_parse_f64(ascale->sval[0], "--scale", &scale, &e)) ||
        (amask->count && kv_parse_f64(amask->sval[0], "--mask-max", &mask_abs, &e)) ||
        kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto out;
    }
    if ((rc = parse_dtype_opt(aod, "--out-dtype", &od)))
        goto out;
    kv_setprogname("kvattn");
    if (kv_npy_load(aq->filename[0], max_mem, &q, &e) ||
        kv_npy_load(ak->filename[0], max_mem, &k, &e) ||
        kv_npy_load(av->filename[0], max_mem, &v, &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    int64_t D = q.ndim ? q.shape[q.ndim - 1] : 0;
    if (q.ndim < 2 || k.ndim < 2 || v.ndim < 2 || D < 1 || k.shape[k.ndim - 1] != D) {
        rc = kv_fail("Q and K need the same head dim as their last dimension");
        goto out;
    }
    if (!ascale->count)
        scale = 1.0 / sqrt((double)D);
    double A, V;
    /* keys a row can see: bhsd [B, H, S, D] S; packed thd [T, H, D] T */
    int64_t n = k.ndim == 4 ? k.shape[2] : k.ndim == 3 ? k.shape[0]
                                         : (int64_t)(kv_tensor_numel(&k) / (size_t)D);
    kv_bound_scan(&q, &k, &v, scale, fabs(mask_abs), &A, &V);
    double bo = (double)routes * kv_bound_attn_out(n, D, A, V, od);
    double bl = (double)routes * kv_bound_attn_lse(n, D, A, A + log((double)n), 0);
    if (q.dtype == KV_BF16 && k.dtype == KV_BF16 && v.dtype == KV_BF16) {
        /* the bf16 tiles (ACCURACY, bf16 tiles): the looser instruction,
         * P rounded to bf16 unless --no-p-round */
        double X = 0.0;
        for (size_t i = 0; i < kv_tensor_numel(&q); i++)
            X = fmax(X, fabs(kv_tensor_get_f64(&q, i)));
        for (size_t i = 0; i < kv_tensor_numel(&k); i++)
            X = fmax(X, fabs(kv_tensor_get_f64(&k, i)));
        X = fabs(scale) * (X + 1.0);
        bo = (double)routes * kv_bound_attn_out_bf16(n, D, A, V, X, od, 1, !anop->count);
        bl = (double)routes * kv_bound_attn_lse_bf16(n, D, A, A + log((double)n), X, 1, 0);
    }
    if (aall->count)
        printf("out: %.3g\nlse: %.3g\nkeys: %lld\nhead_dim: %lld\nscore_max: %.6g\nv_max: %.6g\n",
               bo, bl, (long long)n, (long long)D, A, V);
    else
        printf("%.3g\n", bo);
    rc = kv_close_stdout();
out:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&v);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}

static int usage_main(int to_stdout)
{
    FILE *f = to_stdout ? stdout : stderr;
    fprintf(f, "Usage: kvattn run -q Q -k K -v V [options]   attention (O and LSE)\n"
               "       kvattn merge OUT1 LSE1 OUT2 LSE2 ... [-o OUT] [--lse-out FILE]\n"
               "       kvattn cmp A B [--atol X --rtol Y] [--mass]\n"
               "       kvattn gen --shape B,H,S,D [--kv-heads H] [--pattern P] [--seed N]\n"
               "       kvattn bound -q Q -k K -v V [--routes N]   the documented error bound\n"
               "       kvattn mla -q Q --kv-cache C ... | --c-kv C ...   latent attention (MLA)\n"
               "'kvattn SUBCOMMAND --help' lists the options; man 1 kvattn explains them.\n");
    if (to_stdout)
        return kv_close_stdout();
    return KV_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    if (argc < 2) {
        kv_warn("missing subcommand");
        return usage_main(0);
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return usage_main(1);
    if (strcmp(cmd, "--version") == 0) {
        printf("kvattn (kvtools) %s\n", KV_VERSION);
        return kv_close_stdout();
    }
    if (strcmp(cmd, "run") == 0) {
        kv_blas_single_thread(argv);
        return main_run(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "merge") == 0)
        return main_merge(argc - 1, argv + 1);
    if (strcmp(cmd, "cmp") == 0)
        return main_cmp(argc - 1, argv + 1);
    if (strcmp(cmd, "gen") == 0)
        return main_gen(argc - 1, argv + 1);
    if (strcmp(cmd, "bound") == 0)
        return main_bound(argc - 1, argv + 1);
    if (strcmp(cmd, "mla") == 0) {
        kv_blas_single_thread(argv);
        return main_mla(argc - 1, argv + 1);
    }
    return kv_usage("unknown subcommand '%s' (run, merge, cmp, gen, bound, mla)", cmd);
}
