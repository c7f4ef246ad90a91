/* kvattn mla: Multi-head Latent Attention, absorbed or naive. */
#include "kvattn.h"
#include "attn/mla_sparse.h"
#include "core/fp8.h"
#include "attn/mla_ds.h"

/* kvattn mla: Multi-head Latent Attention through lib/attn/mla.  The form
 * follows from the inputs: --kv-cache (absorbed, a paged latent cache) or
 * --c-kv (naive, with --k-pe --w-uk --w-uv). */
struct mla_args {
    struct arg_lit *help, *version, *causal, *force, *verb;
    struct arg_file *q, *cache, *bt, *ckv, *kpe, *wuk, *wuv, *cfg, *lse, *out, *topk;
    struct arg_str *ql, *kl, *sl, *od, *fmt, *mem, *scale, *rank, *kvdt, *kscale;
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
    t[n++] = a->topk = arg_file0(NULL, "topk-indices", "FILE", "absorbed: sparse MLA over these positions (int32 [T,K], -1 unused)");
    t[n++] = a->kvdt = arg_str0(NULL, "kv-dtype", "T", "absorbed: the cache is FP8 bytes (u8): fp8_e4m3 (fp8), fp8_e5m2, fp8_ds_mla");
    t[n++] = a->kscale = arg_str0(NULL, "k-scale", "S", "the FP8 latent cache's one scale (default 1)");
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

/* --topk-indices (int32 [T, K]) into ti, or ti zeroed without it. */
static int load_topk(struct arg_file *topk, size_t max_mem, struct input *ti,
                     struct kv_err *e)
{
    memset(ti, 0, sizeof *ti);
    if (!topk->count)
        return 0;
    if (input_load(ti, topk->filename[0], max_mem, e))
        return -1;
    if (ti->t.dtype == KV_I32 && ti->t.ndim == 2)
        return 0;
    char sh[128];
    kv_shape_str(ti->t.ndim, ti->t.shape, sh, sizeof sh);
    kv_err_set(e, "--topk-indices '%s': %s %s, expected int32 [T, K] (kvattn index "
               "writes it)", topk->filename[0], kv_dtype_name(ti->t.dtype), sh);
    input_release(ti);
    return -1;
}

/* Check the options: one form, its inputs, at most one stdin, a scale. */
static int mla_check(const struct mla_args *a, int *absorbed, double *scale, int *has_scale,
                     int64_t *rank, enum kv_dtype *od, enum kv_format *fmt, int *threads,
                     size_t *max_mem, struct kv_latent *cfg)
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
    if (!*absorbed && a->topk->count)
        return kv_usage("--topk-indices belongs to the absorbed form (--kv-cache)");
    if (!*absorbed && (a->kvdt->count || a->kscale->count))
        return kv_usage("--kv-dtype and --k-scale belong to the absorbed form (its latent cache)");
    if (a->kscale->count && !a->kvdt->count)
        return kv_usage("--k-scale needs --kv-dtype (the scale is an FP8 cache's)");
    if (!*absorbed && (a->bt->count || a->sl->count || a->rank->count))
        return kv_usage("--block-table, --seq-lens and --kv-lora-rank belong to the absorbed form");
    const char *paths[] = {a->q->filename[0], a->cache->count ? a->cache->filename[0] : NULL,
                           a->bt->count ? a->bt->filename[0] : NULL,
                           a->ckv->count ? a->ckv->filename[0] : NULL,
                           a->kpe->count ? a->kpe->filename[0] : NULL,
                           a->wuk->count ? a->wuk->filename[0] : NULL,
                           a->wuv->count ? a->wuv->filename[0] : NULL,
                           a->cfg->count ? a->cfg->filename[0] : NULL,
                           a->topk->count ? a->topk->filename[0] : NULL};
    int nstdin = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        nstdin += is_stdin(paths[i]);
    if (nstdin > 1)
        return kv_usage("only one input can be standard input");
    *has_scale = 0;
    *rank = 0;
    memset(cfg, 0, sizeof *cfg);
    if (a->cfg->count) {
        if (kv_latent_load_attn(a->cfg->filename[0], 0, cfg, &e))
            return kv_usage("--model-config: %s", e.msg);
        *scale = cfg->softmax_scale;
        *has_scale = 1;
        *rank = cfg->kv_lora_rank;
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
    const char *opts[] = {"-o", "--lse"};
    const char *outs[] = {a->out->count ? a->out->filename[0] : "-",
                          a->lse->count ? a->lse->filename[0] : NULL};
    if (kv_outputs_distinct(opts, outs, 2, &e))
        return kv_usage("%s", e.msg);
    *od = KV_NDTYPES;
    if ((rc = parse_dtype_opt(a->od, "--out-dtype", od)) || (rc = parse_format(a->fmt, fmt)) ||
        (rc = parse_threads(a->j, threads)))
        return rc;
    if (kv_parse_max_mem(a->mem->count ? a->mem->sval[0] : NULL, max_mem, &e))
        return kv_usage("%s", e.msg);
    return 0;
}

/* What is left of the memory limit max_mem (0: none) once the inputs are
 * held; 0 again for no limit, else at least 1.  Fills e when the inputs
 * alone pass it. */
static int mem_left(const struct mla_in *in, size_t max_mem, size_t *left, struct kv_err *e)
{
    const struct input *ins[] = {&in->q, &in->cache, &in->ckv, &in->kpe, &in->wuk, &in->wuv};
    size_t held = (in->bt_rows * in->bt_cols + in->n_ql + in->n_kl + in->n_sl) * sizeof(int64_t);
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
        held += ins[i]->t.nbytes;
    *left = 0;
    if (!max_mem)
        return 0;
    if (held >= max_mem)
        return kv_err_set(e, "the inputs take %zu bytes, more than the limit of %zu "
                          "(--max-mem)", held, max_mem);
    *left = max_mem - held;
    return 0;
}

/* The naive form's inputs against the config the scale comes from. */
static int naive_cfg_check(const struct mla_args *a, const struct mla_in *in,
                           const struct kv_latent *cfg, struct kv_err *e)
{
    if (cfg->kv_lora_rank && in->wuk.t.ndim == 3 && in->kpe.t.ndim == 2 &&
        (in->wuk.t.shape[1] != cfg->kv_lora_rank || in->wuk.t.shape[2] != cfg->nope_dim ||
         in->kpe.t.shape[1] != cfg->rope_dim))
        return kv_err_set(e, "'%s' [H, %lld, %lld] and '%s' [Tk, %lld] are not the "
                          "kv_lora_rank %lld, qk_nope_head_dim %lld and qk_rope_head_dim %lld "
                          "of '%s'", a->wuk->filename[0], (long long)in->wuk.t.shape[1],
                          (long long)in->wuk.t.shape[2], a->kpe->filename[0],
                          (long long)in->kpe.t.shape[1], (long long)cfg->kv_lora_rank,
                          (long long)cfg->nope_dim, (long long)cfg->rope_dim,
                          a->cfg->filename[0]);
    return 0;
}

/* The absorbed form's bound for keys up to maxk a row: its scans of Q and
 * the cache rows the requests read (have_rows: the rows already in rows,
 * sparse MLA's selected ones) happen only when verbose (-v prints the
 * bound); the output type is f32 when W_UV projects it after. */
static int absorbed_bound(const struct kv_mla_req *r, int64_t maxk, int verbose,
                          enum kv_dtype out_type, struct kv_tensor *rows, int have_rows,
                          double *bound, struct kv_err *e)
{
    double A = 0, V = 0, X = 0;
    int64_t D = r->q->shape[2];
    if (verbose) {
        if (!have_rows && kv_mla_rows_read(r, r->max_bytes, rows, e))
            return -1;
        kv_mla_scan_absorbed(r->q, rows, r->kv_lora_rank, r->scale, &A, &V);
        if (r->bf16_route != KV_BF16_NONE)
            X = kv_bound_scan_x(r->q, rows, r->scale);
        /* a cache at 2^-v_exp of its values: the scores and values' */
        A = ldexp(A, r->v_exp);
        V = ldexp(V, r->v_exp);
    }
    if (r->bf16_route != KV_BF16_NONE)
        *bound = kv_mla_bound_absorbed_bf16(maxk, D, A, V, X, out_type,
                                            kv_bf16_route_odd((enum kv_bf16_route)r->bf16_route));
    else
        *bound = kv_mla_bound_absorbed(maxk, D, A, V, out_type);
    return 0;
}

/* The absorbed output [T, H, Dl] projected by W_UV [H, Dl, Vd] into pd,
 * moved into out, and the bound carried through the projection (its
 * scans only when verbose). */
static int project_wuv(const struct kv_tensor *wuv, enum kv_dtype pd, size_t max_bytes,
                       int verbose, struct kv_tensor *out, struct kv_tensor *proj,
                       double *bound, struct kv_err *e)
{
    double w1 = 0.0, om = 0.0;
    if (kv_mla_project(out, wuv, pd, max_bytes, proj, e))
        return -1;
    int64_t H = wuv->shape[0], Dl = wuv->shape[1], Vd = wuv->shape[2];
    for (int64_t h = 0; verbose && h < H; h++)
        for (int64_t v = 0; v < Vd; v++) {
            double s = 0.0;
            for (int64_t l = 0; l < Dl; l++)
                s += fabs(kv_tensor_get_f64(wuv, (size_t)((h * Dl + l) * Vd + v)));
            w1 = fmax(w1, s);
        }
    for (size_t i = 0; verbose && i < kv_tensor_numel(proj); i++)
        om = fmax(om, fabs(kv_tensor_get_f64(proj, i)));
    *bound = kv_mla_bound_projected(*bound, w1, om, pd);
    kv_tensor_move(out, proj);
    return 0;
}

/* The naive form: its inputs loaded and checked against the config, the
 * attention, and its bound (the scans only when verbose); *scale becomes
 * the default 1/sqrt(P + R) when none was given. */
static int run_naive(const struct mla_args *a, struct mla_in *in, const struct kv_latent *cfg,
                     int has_scale, double *scale, enum kv_dtype od, int threads,
                     size_t max_mem, struct kv_tensor *out, struct kv_tensor *lse,
                     double *bound, struct kv_err *e)
{
    if (input_load(&in->ckv, a->ckv->filename[0], max_mem, e) ||
        input_load(&in->kpe, a->kpe->filename[0], max_mem, e) ||
        input_load(&in->wuk, a->wuk->filename[0], max_mem, e))
        return -1;
    /* the config's geometry is what the scale belongs to */
    if (naive_cfg_check(a, in, cfg, e))
        return -1;
    struct kv_mla_naive_req r;
    memset(&r, 0, sizeof r);
    r.q = &in->q.t; r.c_kv = &in->ckv.t; r.k_pe = &in->kpe.t;
    r.w_uk = &in->wuk.t; r.w_uv = &in->wuv.t;
    r.q_lens = in->ql; r.n_q_lens = in->n_ql; r.kv_lens = in->kl; r.n_kv_lens = in->n_kl;
    r.causal = a->causal->count > 0; r.has_scale = has_scale; r.scale = *scale;
    r.out_dtype = od; r.n_threads = threads;
    if (mem_left(in, max_mem, &r.max_bytes, e) || kv_mla_naive(&r, out, lse, e))
        return -1;
    double A = 0, V = 0;
    int64_t Dl = in->wuk.t.shape[1], D = in->q.t.shape[2], maxk = 1;
    if (!has_scale)
        *scale = 1.0 / sqrt((double)D);
    for (size_t i = 0; i < in->n_kl; i++)
        maxk = in->kl[i] > maxk ? in->kl[i] : maxk;
    if (!in->n_kl)
        maxk = in->ckv.t.shape[0];
    if (a->verb->count)
        kv_mla_scan_naive(&r, *scale, &A, &V, NULL);
    *bound = kv_mla_bound_naive(maxk, Dl, D, A, V, out->dtype);
    return 0;
}

/* --kv-dtype and --k-scale: fp8 becomes 0 (no FP8), 1 + enum kv_fp8 for
 * a per-tensor scale, or FP8_DS_MLA (DeepSeek's 656-byte rows, which
 * carry their scales and need kv_lora_rank 512). */
#define FP8_DS_MLA 100
static int parse_kv_dtype(const struct mla_args *a, int64_t rank, int *fp8, float *k_scale)
{
    struct kv_err e = {{0}};
    enum kv_fp8 f;
    *fp8 = 0;
    if (!a->kvdt->count)
        return 0;
    if (strcmp(a->kvdt->sval[0], "fp8_ds_mla") == 0) {
        if (a->kscale->count)
            return kv_usage("--k-scale: fp8_ds_mla rows carry their own scales");
        if (rank != KV_DS_MLA_NOPE)
            return kv_usage("--kv-dtype fp8_ds_mla: kv_lora_rank is %lld, the format holds "
                            "%d c_kv values and %d k_pe values a row", (long long)rank,
                            KV_DS_MLA_NOPE, KV_DS_MLA_ROPE);
        *fp8 = FP8_DS_MLA;
        return 0;
    }
    if (kv_fp8_parse(a->kvdt->sval[0], &f, &e))
        return kv_usage("--kv-dtype: %s (or fp8_ds_mla)", e.msg);
    *fp8 = (int)f + 1;
    return parse_fp8_scale(a->kscale, "--k-scale", k_scale);
}

/* An fp8_ds_mla cache, u8 [num_blocks, block_size, 656] as vLLM holds it
 * or [num_blocks, block_size, 1, 656] as FlashMLA takes it, replaced by
 * its f32 values [num_blocks, block_size, 1, 576]. */
static int ds_dequant_input(struct input *in, size_t max_mem, struct kv_err *e)
{
    struct kv_tensor f;
    char sh[128];
    const struct kv_tensor *t = &in->t;
    if (t->ndim != 3 && !(t->ndim == 4 && t->shape[2] == 1))
        return kv_err_set(e, "shape %s: an fp8_ds_mla cache is [num_blocks, block_size, 656] "
                          "(or [num_blocks, block_size, 1, 656])",
                          kv_shape_str(t->ndim, t->shape, sh, sizeof sh));
    kv_tensor_init(&f);
    if (kv_ds_mla_dequantize(t, max_mem, &f, e))
        return -1;
    f.ndim = 4;
    f.shape[3] = KV_DS_MLA_DIM;
    f.shape[2] = 1;
    input_release(in);
    kv_tensor_move(&in->t, &f);
    return 0;
}

/* An FP8 latent cache in `in` (n_keys rows in the whole cache, of which
 * `in` may hold a selection) as f32 at 2^-*v_exp of its values, *v_exp
 * the least that keeps the largest value the format and scale allow
 * times n_keys under 2^126 (kv_attn_fp8_v_exp; fp8_ds_mla: 448 times the
 * largest tile scale of the rows in hand): kv_mla_req.v_exp undoes it
 * exactly, after the division by the sum of the weights, so that the
 * unnormalised sums over the keys do not overflow where the output does
 * not.  fp8 as parse_kv_dtype gives it (not 0). */
static size_t cache_rows(const struct kv_tensor *t)
{
    const int64_t w = t->ndim ? t->shape[t->ndim - 1] : 1;
    return kv_tensor_numel(t) / (size_t)(w > 0 ? w : 1);
}

static int latent_values(struct input *in, int fp8, float k_scale, size_t n_keys, int *v_exp,
                         size_t max_mem, struct kv_err *e)
{
    if (fp8 != FP8_DS_MLA) {
        *v_exp = kv_attn_fp8_v_exp(fp8 - 1, k_scale, n_keys);
        const float s = ldexpf(k_scale, -*v_exp);
        return fp8_dequant_input(in, fp8 - 1, s, s, kv_tensor_numel(&in->t), max_mem, e);
    }
    *v_exp = kv_attn_fp8_v_exp(KV_FP8_E4M3, kv_ds_mla_max_scale(&in->t), n_keys);
    if (ds_dequant_input(in, max_mem, e))
        return -1;
    if (*v_exp) {
        const float s = ldexpf(1.0f, -*v_exp);
        float *x = in->t.data;
        for (size_t i = 0, n = kv_tensor_numel(&in->t); i < n; i++)
            x[i] *= s;
    }
    return 0;
}

/* What a run of the absorbed form reports under -v: its start, how long
 * the inputs took, the attention call's wall and CPU time, the bound and
 * the bf16 route. */
struct mla_stat {
    double start, load_s, kernel_s, kernel_cpu, bound;
    int route;
};

/* Sparse MLA over a cache file: its header now, and only the rows the
 * indices select once they are checked (sparse_rows_read), so that the
 * process reads what top-k names rather than the whole cache.  1 when the
 * file is taken that way: a regular .npy file of exactly its header and
 * data, whose dtype and shape are those --kv-dtype reads; anything else
 * (stdin too) is loaded whole, which reports its faults.  *shape then
 * describes the cache the attention sees, without data: f32 for an FP8
 * cache, rows of 576 values for fp8_ds_mla. */
static int sparse_file_open(const char *path, int fp8, size_t max_mem, struct kv_npy_file *nf,
                            struct kv_tensor *shape)
{
    if (kv_npy_file_open(path, max_mem, nf))
        return 0;
    const struct kv_npy_header *h = &nf->h;
    int ok;
    if (fp8 == FP8_DS_MLA)
        ok = h->dtype == KV_U8 && (h->ndim == 3 || (h->ndim == 4 && h->shape[2] == 1)) &&
             h->shape[h->ndim - 1] == KV_DS_MLA_ROW;
    else if (fp8)
        ok = h->dtype == KV_U8 && h->ndim == 4 && h->shape[2] == 1;
    else
        ok = (h->dtype == KV_F32 || h->dtype == KV_BF16 || h->dtype == KV_F16) &&
             h->ndim == 4 && h->shape[2] == 1;
    if (!ok) {
        kv_npy_file_close(nf);
        return 0;
    }
    kv_tensor_init(shape);
    shape->dtype = fp8 ? KV_F32 : h->dtype;
    shape->ndim = 4;
    shape->shape[0] = h->shape[0];
    shape->shape[1] = h->shape[1];
    shape->shape[2] = 1;
    shape->shape[3] = fp8 == FP8_DS_MLA ? KV_DS_MLA_DIM : h->shape[h->ndim - 1];
    return 1;
}

/* The buffer the selected rows are read into, faulted in at once rather
 * than page by page inside each read: huge pages for 8 MiB or more (a
 * dense selection, several queries), below that its pages populated in
 * one call (MADV_POPULATE_WRITE, Linux 5.14; elsewhere nothing). */
static void rows_advise(void *data, size_t n)
{
    if (n >= ((size_t)8 << 20)) {
        kv_advise_huge(data, n);
        return;
    }
#ifdef MADV_POPULATE_WRITE
    const uintptr_t pg = 4096;
    uintptr_t a = ((uintptr_t)data + pg - 1) & ~(pg - 1), z = ((uintptr_t)data + n) & ~(pg - 1);
    if (z > a)
        (void)madvise((void *)a, (size_t)(z - a), MADV_POPULATE_WRITE);
#endif
}

/* The rows of the cache file nf (at path) that the sparse attention of r
 * reads for the indices topk (kv_mla_sparse_rows, which checks them: its
 * messages as kv_mla_sparse's), read with pread into packed as the values
 * the whole cache would give (FP8 bytes dequantized alike), and their
 * slots into *prow (malloc'd) and *n_prow. */
static int sparse_rows_read(const struct kv_mla_req *r, const struct kv_tensor *topk,
                            const struct kv_npy_file *nf, const char *path, int fp8,
                            float k_scale, int *v_exp, size_t max_bytes, int64_t **prow,
                            size_t *n_prow, struct input *packed, struct kv_err *e)
{
    const struct kv_npy_header *h = &nf->h;
    const int64_t w = h->shape[h->ndim - 1];
    memset(packed, 0, sizeof *packed);
    kv_tensor_init(&packed->t);
    if (kv_mla_sparse_rows(r, topk->data, topk->shape[0], topk->shape[1], prow, n_prow, e))
        return -1;
    int64_t sh[3] = {(int64_t)*n_prow, 1, w};
    int rc = kv_tensor_alloc(&packed->t, h->dtype, 3, sh, max_bytes, e);
    if (rc == 0)
        rows_advise(packed->t.data, packed->t.nbytes);
    if (rc ||
        kv_npy_file_rows(nf, (size_t)w * kv_dtype_size(h->dtype), *prow, *n_prow,
                         packed->t.data, e) ||
        (fp8 && latent_values(packed, fp8, k_scale,
                              (size_t)h->shape[0] * (size_t)h->shape[1], v_exp, max_bytes,
                              e))) {
        free(*prow);
        *prow = NULL;
        input_release(packed);
        return kv_err_prefix(e, "'%s'", path);
    }
    return 0;
}

/* The rows the sparse attention of r reads for topk, copied from its
 * cache in memory into sel (for -v's bound when the cache was loaded
 * whole). */
static int sel_from_cache(const struct kv_mla_req *r, const struct kv_tensor *topk,
                          struct kv_tensor *sel, struct kv_err *e)
{
    int64_t *rows;
    size_t n;
    const struct kv_tensor *c = r->cache;
    const int64_t w = c->shape[c->ndim - 1];
    if (kv_mla_sparse_rows(r, topk->data, topk->shape[0], topk->shape[1], &rows, &n, e))
        return -1;
    int64_t sh[2] = {(int64_t)n, w};
    const size_t row = (size_t)w * kv_dtype_size(c->dtype);
    if (kv_tensor_alloc(sel, c->dtype, 2, sh, r->max_bytes, e)) {
        free(rows);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        memcpy((char *)sel->data + i * row, (const char *)c->data + (size_t)rows[i] * row, row);
    free(rows);
    return 0;
}

/* The absorbed form, dense or sparse (--topk-indices): the cache (for
 * sparse MLA over a cache file, only its selected rows), the block table,
 * the attention into out and lse, its bound (the scans only with -v, over
 * the rows the attention reads) and the projection by W_UV. */
static int run_absorbed(const struct mla_args *a, struct mla_in *in, const struct kv_latent *cfg,
                        int fp8, float k_scale, double scale, int64_t rank, enum kv_dtype od,
                        int threads, size_t max_mem, struct mla_stat *st, struct kv_tensor *out,
                        struct kv_tensor *lse, struct kv_tensor *proj, struct kv_tensor *rows,
                        struct kv_err *e)
{
    const char *path = a->cache->filename[0];
    const int verbose = a->verb->count > 0;
    struct kv_npy_file nf;
    struct input ti, packed;
    int64_t *prow = NULL;
    size_t n_prow = 0;
    int rc = -1;
    memset(&nf, 0, sizeof nf);
    memset(&ti, 0, sizeof ti);
    memset(&packed, 0, sizeof packed);
    const int by_rows = a->topk->count && sparse_file_open(path, fp8, max_mem, &nf, &in->cache.t);
    int v_exp = 0;
    if ((!by_rows &&
         (input_load(&in->cache, path, max_mem, e) ||
          (fp8 && latent_values(&in->cache, fp8, k_scale, cache_rows(&in->cache.t), &v_exp,
                                max_mem, e) &&
           kv_err_prefix(e, "'%s'", path)))) ||
        kv_read_int_table(a->bt->filename[0], -1, max_mem, &in->bt, &in->bt_rows, &in->bt_cols,
                          e))
        goto done;
    /* the config's latent is what the scale belongs to */
    int64_t cw = in->cache.t.ndim ? in->cache.t.shape[in->cache.t.ndim - 1] : 0;
    if (cfg->kv_lora_rank && !a->rank->count && cw != cfg->kv_lora_rank + cfg->rope_dim) {
        kv_err_set(e, "'%s': latent rows of %lld values, but '%s' has kv_lora_rank + "
                   "qk_rope_head_dim = %lld", path, (long long)cw, a->cfg->filename[0],
                   (long long)(cfg->kv_lora_rank + cfg->rope_dim));
        goto done;
    }
    struct kv_mla_req r;
    memset(&r, 0, sizeof r);
    r.q = &in->q.t; r.cache = &in->cache.t; r.block_table = in->bt;
    r.bt_rows = in->bt_rows; r.bt_cols = in->bt_cols;
    r.seq_lens = in->sl; r.n_seq_lens = in->n_sl;
    r.q_lens = in->ql; r.n_q_lens = in->n_ql;
    r.kv_lora_rank = rank; r.causal = a->causal->count > 0; r.scale = scale;
    r.out_dtype = a->wuv->count ? KV_F32 : od; r.n_threads = threads;
    r.v_exp = v_exp;
    if (mem_left(in, max_mem, &r.max_bytes, e))
        goto done;
    /* bf16 Q and cache: the bf16 tiles where the CPU has the instruction */
    if (in->q.t.dtype == KV_BF16 && in->cache.t.dtype == KV_BF16)
        r.bf16_route = (int)kv_bf16_route_best();
    if (load_topk(a->topk, max_mem, &ti, e))
        goto done;
    if (by_rows) {
        if (sparse_rows_read(&r, &ti.t, &nf, path, fp8, k_scale, &v_exp, r.max_bytes, &prow,
                             &n_prow, &packed, e))
            goto done;
        r.v_exp = v_exp;
        if (r.max_bytes)     /* the rows are held too */
            r.max_bytes = r.max_bytes > packed.t.nbytes ? r.max_bytes - packed.t.nbytes : 1;
    }
    st->load_s = kv_now() - st->start;
    int64_t sel_k = a->topk->count ? ti.t.shape[1] : INT64_MAX;
    double t0 = kv_now(), c0 = process_cpu();
    int arc = !a->topk->count ? kv_mla_absorbed(&r, out, lse, e) :
              by_rows ? kv_mla_sparse_packed(&r, ti.t.data, ti.t.shape[0], sel_k, prow, n_prow,
                                             &packed.t, out, lse, e)
                      : kv_mla_sparse(&r, ti.t.data, ti.t.shape[0], sel_k, out, lse, e);
    st->kernel_s = kv_now() - t0;
    st->kernel_cpu = process_cpu() - c0;
    if (arc)
        goto done;
    int64_t maxk = 1;      /* sparse: at most K keys a row */
    for (size_t i = 0; i < in->n_sl; i++)
        maxk = in->sl[i] > maxk ? (in->sl[i] < sel_k ? in->sl[i] : sel_k) : maxk;
    maxk = maxk < 1 ? 1 : maxk;
    /* sparse: -v's scans over the rows the attention read */
    if (verbose && a->topk->count) {
        if (by_rows) {
            kv_tensor_move(rows, &packed.t);
            rows->ndim = 2;
            rows->shape[0] = (int64_t)n_prow;
            rows->shape[1] = in->cache.t.shape[3];
        } else if (sel_from_cache(&r, &ti.t, rows, e)) {
            goto done;
        }
    }
    if (absorbed_bound(&r, maxk, verbose, out->dtype, rows, a->topk->count > 0, &st->bound, e))
        goto done;
    st->route = r.bf16_route;
    if (a->wuv->count && project_wuv(&in->wuv.t, od == KV_NDTYPES ? in->q.t.dtype : od,
                                     r.max_bytes, verbose, out, proj, &st->bound, e))
        goto done;
    rc = 0;
done:
    input_release(&ti);
    input_release(&packed);
    free(prow);
    kv_npy_file_close(&nf);
    return rc;
}

int cmd_mla(int argc, char **argv)
{
    struct mla_args a;
    void *table[32];
    int n = mla_args_make(&a, table);
    struct kv_err e = {{0}};
    struct mla_in in;
    struct kv_tensor out, lse, proj, rows;
    struct kv_latent cfg;
    int absorbed = 0, has_scale = 0, threads = 0, fp8 = 0;
    float k_scale = 1.0f;
    double scale = 0;
    struct mla_stat st = { kv_now(), 0, -1, 0, 0, KV_BF16_NONE };
    int64_t rank = 0;
    enum kv_dtype od = KV_NDTYPES;
    enum kv_format fmt = KV_FMT_AUTO;
    size_t max_mem = 0;
    memset(&in, 0, sizeof in);
    kv_tensor_init(&out);
    kv_tensor_init(&lse);
    kv_tensor_init(&proj);
    kv_tensor_init(&rows);
    kv_setprogname("kvattn mla");
    int rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                          "\nMulti-head Latent Attention (DeepSeek), in one of its two forms:\n"
                          "absorbed  -q Q' --kv-cache C --block-table BT --seq-lens ..\n"
                          "          and --model-config F, or --scale S --kv-lora-rank Dl: out [T,H,Dl]\n"
                          "naive     -q Q --c-kv C --k-pe K --w-uk W --w-uv W: out [T,H,Vd]", NULL);
    if (rc >= 0)
        goto out;
    if ((rc = mla_check(&a, &absorbed, &scale, &has_scale, &rank, &od, &fmt, &threads, &max_mem,
                        &cfg)) ||
        (rc = parse_list(a.ql, "--q-lens", &in.ql, &in.n_ql)) ||
        (rc = parse_list(a.kl, "--kv-lens", &in.kl, &in.n_kl)) ||
        (rc = parse_list(a.sl, "--seq-lens", &in.sl, &in.n_sl)))
        goto out;
    if ((rc = parse_kv_dtype(&a, rank, &fp8, &k_scale)))
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
        if (run_absorbed(&a, &in, &cfg, fp8, k_scale, scale, rank, od, threads, max_mem, &st,
                         &out, &lse, &proj, &rows, &e))
            goto fail;
    } else if (run_naive(&a, &in, &cfg, has_scale, &scale, od, threads, max_mem, &out, &lse,
                         &st.bound, &e)) {
        goto fail;
    }
    char scale_s[32];
    shortest_double(scale_s, sizeof scale_s, scale);
    if (a.verb->count)
        fprintf(stderr, "kvattn: mla %s form%s%s, scale %s, error bound %.3g\n",
                !absorbed ? "naive" : a.topk->count ?
                    (a.wuv->count ? "sparse absorbed (projected by W_UV)" : "sparse absorbed") :
                    (a.wuv->count ? "absorbed (projected by W_UV)" : "absorbed"),
                st.route != KV_BF16_NONE ? " on the bf16 tiles of " : "",
                st.route != KV_BF16_NONE ? kv_bf16_route_name((enum kv_bf16_route)st.route) : "",
                scale_s, st.bound);
    if (a.verb->count && st.kernel_s >= 0)
        fprintf(stderr, "kvattn: mla attention %.6f s (%.6f s cpu), inputs read in %.6f s\n",
                st.kernel_s, st.kernel_cpu, st.load_s);
    const struct kv_tensor *t1[1] = {&lse}, *ts[1] = {&out};
    struct tensor_out w[2] = {
        {a.out->count ? a.out->filename[0] : NULL, fmt, a.force->count > 0, ts, 1},
        {a.lse->count ? a.lse->filename[0] : NULL,
         fmt == KV_FMT_TEXT ? KV_FMT_TEXT : KV_FMT_NPY, 1, t1, 1},
    };
    if ((rc = write_outputs(w, a.lse->count ? 2 : 1)))
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
    kv_tensor_release(&rows);
    arg_freetable(table, (size_t)n);
    return rc;
}
