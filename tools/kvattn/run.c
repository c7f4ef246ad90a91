/* kvattn run: attention (O and LSE) of Q, K, V, dense, thd or paged,
 * with the implicit, explicit and block masks. */
#include "kvattn.h"
#include "core/fp8.h"

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    kv_progress_update(ctx, done, total);
}

struct run_opts {
    const char *q, *k, *v, *mask, *block_mask, *kv_cache, *block_table, *lse, *out;
    const char *sinks, *alibi_slopes;
    int kv_fp8;            /* enum kv_fp8 + 1 with --kv-dtype, else 0 */
    float k_scale, v_scale;
    int alibi;
    double softcap;
    int thd, causal, mask_keep, mask_binary, lse_base2;
    int scalar, verbose, quiet, force, threads, has_scale, p_f32;
    int64_t window, chunk, block_size, tile_q, tile_k;
    double scale;
    int64_t *q_lens, *kv_lens, *seq_lens;
    size_t n_q_lens, n_kv_lens, n_seq_lens;
    enum kv_dtype out_dtype;
    enum kv_format fmt;
    size_t max_mem;
};

/* An FP8 cache (--kv-dtype): K and V dequantized to f32 with their scales
 * before the attention reads them, V at v_scale 2^-v_exp for a scale so
 * large that its sums over the keys could overflow (*v_exp for
 * kv_attn_req, kv_attn_fp8_v_exp); the paged cache is checked here and
 * handed to the library as bytes (kv_attn_req.kv_fp8: its decode kernels
 * read them, other shapes dequantize it there). */
static int fp8_inputs(const struct run_opts *o, struct input *k,
                      struct input *v, struct input *cache, int *v_exp, struct kv_err *e)
{
    int fmt = o->kv_fp8 - 1;
    if (o->kv_cache) {
        if (cache->t.dtype != KV_U8)
            return kv_err_set(e, "'%s': an FP8 cache is stored as u8 (man 5 kvnpy), got %s",
                              o->kv_cache, kv_dtype_name(cache->t.dtype));
        return 0;
    }
    if (fp8_dequant_input(k, fmt, o->k_scale, o->k_scale, kv_tensor_numel(&k->t),
                          o->max_mem, e))
        return kv_err_prefix(e, "'%s'", o->k);
    const struct kv_tensor *vt = &v->t;
    const int64_t dv = vt->ndim ? vt->shape[vt->ndim - 1] : 1;
    *v_exp = kv_attn_fp8_v_exp(fmt, o->v_scale,
                               kv_tensor_numel(vt) / (size_t)(dv > 0 ? dv : 1));
    const float vs = ldexpf(o->v_scale, -*v_exp);
    if (fp8_dequant_input(v, fmt, vs, vs, kv_tensor_numel(&v->t), o->max_mem, e))
        return kv_err_prefix(e, "'%s'", o->v);
    return 0;
}

/* kvattn run: load every input (large files mapped), validate and compute
 * through kv_attn_run, then write the LSE file and the output.  Returns the
 * exit status. */
/* A query of the other layout's rank is refused with the option that
 * fits it.  0, or -1 with e filled. */
static int query_layout_check(const struct kv_tensor *q, int thd, struct kv_err *e)
{
    char sh[128];
    if (q->ndim != (thd ? 4 : 3))
        return 0;
    kv_shape_str(q->ndim, q->shape, sh, sizeof sh);
    if (thd)
        return kv_err_set(e, "query shape %s: --layout thd takes Q [T, Hq, D]; "
                          "a [B, Hq, Lq, D] query is the default layout bhsd "
                          "(drop --layout thd)", sh);
    return kv_err_set(e, "query shape %s: the layout is bhsd (the default), "
                      "Q [B, Hq, Lq, D]; for Q [T, Hq, D] give --layout thd", sh);
}

static int run_run(struct run_opts *o)
{
    struct kv_err e = {{0}};
    struct input q, k, v, mask, bmask, cache, sinks, slopes;
    struct kv_tensor out, lse;
    int64_t *bt = NULL;
    size_t bt_rows = 0, bt_cols = 0;
    int rc = KV_EXIT_DATA;
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    memset(&mask, 0, sizeof mask);
    memset(&bmask, 0, sizeof bmask);
    memset(&cache, 0, sizeof cache);
    memset(&sinks, 0, sizeof sinks);
    memset(&slopes, 0, sizeof slopes);
    kv_tensor_init(&out);
    kv_tensor_init(&lse);

    double t0 = kv_now();
    if (input_load(&q, o->q, o->max_mem, &e))
        goto fail;
    if (query_layout_check(&q.t, o->thd, &e))
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
    int v_exp = 0;
    if (o->kv_fp8 && fp8_inputs(o, &k, &v, &cache, &v_exp, &e))
        goto fail;
    if (o->mask && input_load(&mask, o->mask, o->max_mem, &e))
        goto fail;
    if (o->block_mask && input_load(&bmask, o->block_mask, o->max_mem, &e))
        goto fail;
    if (o->sinks && input_load(&sinks, o->sinks, o->max_mem, &e))
        goto fail;
    if (o->alibi_slopes && input_load(&slopes, o->alibi_slopes, o->max_mem, &e))
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
    r.chunk = o->chunk;
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
    r.softcap = o->softcap;
    r.alibi = o->alibi;
    r.alibi_slopes = o->alibi_slopes ? &slopes.t : NULL;
    r.sinks = o->sinks ? &sinks.t : NULL;
    r.out_dtype = o->out_dtype;
    r.n_threads = o->threads;
    r.v_exp = v_exp;
    if (o->kv_fp8 && o->kv_cache) {
        r.kv_fp8 = o->kv_fp8;
        r.k_scale = o->k_scale;
        r.v_scale = o->v_scale;
    }
    /* the inputs are held while the attention runs: it gets what is left */
    const struct kv_tensor *held[] = {&q.t, &k.t, &v.t, &cache.t, &mask.t, &bmask.t, &sinks.t,
                                      &slopes.t};
    if (mem_after(o->max_mem, held, sizeof held / sizeof held[0],
                  bt_rows * bt_cols * sizeof(int64_t), &r.max_bytes, &e))
        goto fail;
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
    const struct kv_tensor *ls[1] = {&lse}, *os[1] = {&out};
    struct tensor_out w[2] = {
        {o->out, o->fmt, o->force, os, 1},
        {o->lse, o->fmt == KV_FMT_TEXT ? KV_FMT_TEXT : KV_FMT_NPY, 1, ls, 1},
    };
    if (o->lse && o->lse_base2)
        scale_tensor(&lse, M_LOG2E);
    if ((rc = write_outputs(w, o->lse ? 2 : 1)) != 0)
        goto done;
    if (o->verbose) {
        struct kv_attn_stats st;
        kv_attn_last_stats(&st);
        kv_warn("read %.3f s, attention %.3f s (%.4f CPU-s), %llu items, %llu tiles computed, "
                "%llu skipped by the block mask, %llu items on the fused kernels, bf16 tiles: "
                "%s%s%s", t1 - t0, t2 - t1, c2 - c1,
                (unsigned long long)st.items, (unsigned long long)st.tiles_done,
                (unsigned long long)st.tiles_skipped, (unsigned long long)st.fused_items,
                kv_bf16_route_name((enum kv_bf16_route)st.bf16_route),
                st.decode ? ", decode kernels" : "",
                st.fp8_kernels ? " reading the FP8 bytes" : "");
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
    input_release(&sinks);
    input_release(&slopes);
    kv_tensor_release(&out);
    kv_tensor_release(&lse);
    free(bt);
    return rc;
}

static const char run_synopsis[] =
    "\nO = softmax(scale * Q K^T + mask) V, tiled, on the CPU.\n"
    "bhsd: Q [B,Hq,Lq,D] K/V [B,Hkv,Lk,D]; thd: Q [Tq,Hq,D] K/V [Tk,Hkv,D] with\n"
    "--q-lens/--kv-lens; paged: --kv-cache [2,num_blocks,block_size,Hkv,D]\n"
    "--block-table FILE --seq-lens ...\n"
    "Variants: --softcap C (s = C tanh(s/C)), --alibi or --alibi-slopes FILE\n"
    "(s += slope_h (j - i')), --sinks FILE (one logit per query head in the sum).";

/* kvattn run: parse and range-check the options into run_opts. */
struct run_args {
    struct arg_lit *help, *version, *causal, *keep, *bin, *force, *scalar, *verb, *quiet, *pf32;
    struct arg_file *q, *k, *v, *mask, *bm, *cache, *bt, *lse, *out, *sinks, *slopes;
    struct arg_str *layout, *ql, *kl, *sl, *base, *od, *fmt, *mem, *softcap;
    struct arg_str *kvdt, *kscale, *vscale;
    struct arg_lit *alibi;
    struct arg_int *window, *chunk, *bs, *j, *tq, *tk;
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
    t[n++] = a->chunk = arg_int0(NULL, "chunk-size", "C", "chunked local attention (Llama 4): causal within the C-key chunk of i'");
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
    t[n++] = a->softcap = arg_str0(NULL, "softcap", "C", "logit softcap: s = C tanh(s / C) after the scale (Gemma 2)");
    t[n++] = a->alibi = arg_lit0(NULL, "alibi", "ALiBi bias slope_h (j - i') with the standard slopes");
    t[n++] = a->slopes = arg_file0(NULL, "alibi-slopes", "FILE", "ALiBi with these slopes (f32 [Hq])");
    t[n++] = a->sinks = arg_file0(NULL, "sinks", "FILE", "attention sinks: one logit per query head (f32 [Hq], gpt-oss)");
    t[n++] = a->kvdt = arg_str0(NULL, "kv-dtype", "T", "K and V (or the cache) are FP8 bytes: fp8_e4m3 (fp8) or fp8_e5m2");
    t[n++] = a->kscale = arg_str0(NULL, "k-scale", "S", "FP8 keys' scale (default 1)");
    t[n++] = a->vscale = arg_str0(NULL, "v-scale", "S", "FP8 values' scale (default 1)");
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
                 (a->bm->count && is_stdin(a->bm->filename[0])) + is_stdin(o->block_table) +
                 (a->sinks->count && is_stdin(a->sinks->filename[0])) +
                 (a->slopes->count && is_stdin(a->slopes->filename[0]));
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
    if (a->chunk->count) {
        if (a->chunk->ival[0] < 1)
            return kv_usage("--chunk-size: expected a chunk of at least 1 key, got %d",
                            a->chunk->ival[0]);
        o->chunk = a->chunk->ival[0];
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
    if (a->softcap->count) {
        if (kv_parse_f64(a->softcap->sval[0], "--softcap", &o->softcap, &e))
            return kv_usage("%s", e.msg);
        if (!(o->softcap > 0.0) || !isfinite(o->softcap) || !isfinite((float)o->softcap))
            return kv_usage("--softcap: expected a finite cap > 0, got '%s'",
                            a->softcap->sval[0]);
    }
    if (a->kvdt->count) {
        enum kv_fp8 f;
        if (kv_fp8_parse(a->kvdt->sval[0], &f, &e))
            return kv_usage("--kv-dtype: %s", e.msg);
        o->kv_fp8 = (int)f + 1;
    } else if (a->kscale->count || a->vscale->count) {
        return kv_usage("%s needs --kv-dtype (the scales are an FP8 cache's)",
                        a->kscale->count ? "--k-scale" : "--v-scale");
    }
    if ((rc = parse_fp8_scale(a->kscale, "--k-scale", &o->k_scale)) ||
        (rc = parse_fp8_scale(a->vscale, "--v-scale", &o->v_scale)))
        return rc;
    o->alibi = a->alibi->count > 0;
    o->alibi_slopes = a->slopes->count ? a->slopes->filename[0] : NULL;
    if (o->alibi && o->alibi_slopes)
        return kv_usage("--alibi and --alibi-slopes exclude each other (--alibi takes the "
                        "standard slopes)");
    o->sinks = a->sinks->count ? a->sinks->filename[0] : NULL;
    o->lse = a->lse->count ? a->lse->filename[0] : NULL;
    o->out = a->out->count ? a->out->filename[0] : NULL;
    const char *opts[] = {"-o", "--lse"};
    const char *outs[] = {o->out ? o->out : "-", o->lse};
    if (kv_outputs_distinct(opts, outs, 2, &e))
        return kv_usage("%s", e.msg);
    if ((rc = parse_dtype_opt(a->od, "--out-dtype", &o->out_dtype)) ||
        (rc = parse_format(a->fmt, &o->fmt)) || (rc = parse_threads(a->j, &o->threads)) ||
        (rc = parse_lse_base(a->base, &o->lse_base2)))
        return rc;
    o->force = a->force->count > 0;
    if (kv_parse_max_mem(a->mem->count ? a->mem->sval[0] : NULL, &o->max_mem, &e))
        return kv_usage("%s", e.msg);
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

int cmd_run(int argc, char **argv)
{
    struct run_args a;
    void *table[48];
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
