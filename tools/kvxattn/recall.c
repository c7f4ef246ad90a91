/* kvxattn recall: the exact attention mass the kept blocks of a block mask
 * cover. */
#include "kvxattn.h"
#include "core/jsonfig.h"

/* Load a block mask for recall as bytes [B, Hq, nqb, nkb]: a dense array
 * (any integer or bool dtype, nonzero = keep; [nqb, nkb], [Hq, nqb, nkb] or
 * [B, Hq, nqb, nkb], broadcast over the missing leading dims) or a
 * FlexAttention BlockMask stream (eight int32 arrays, as kvmask -f block
 * and kvxattn -f block write). */
static int load_mask(const char *path, int64_t nb, int64_t hq, int64_t nqb,
                     int64_t nkb, size_t max, uint8_t **out, struct kv_err *e)
{
    struct kv_tensor t[4];
    FILE *f;
    uint8_t *m;
    int n = 0, r;
    char s1[128];
    const char *name = kv_path_name(path, 0);
    size_t total = (size_t)(nb * hq * nqb * nkb);

    f = kv_open_in(path, e);
    if (!f)
        return -1;
    for (int i = 0; i < 4; i++)
        kv_tensor_init(&t[i]);
    while (n < 4 && (r = kv_npy_read(f, max, &t[n], e)) == 0)
        n++;
    kv_close_in(f);
    if (n == 0) {
        if (!e->msg[0] || r == 1)
            kv_err_set(e, "no array");
        return kv_err_prefix(e, "mask '%s'", name);
    }
    m = calloc(total ? total : 1, 1);
    if (!m) {
        for (int i = 0; i < 4; i++)
            kv_tensor_release(&t[i]);
        return kv_err_set(e, "out of memory");
    }
    if (n == 4 && t[0].dtype == KV_I32 && t[1].dtype == KV_I32 &&
        t[0].ndim == 3 && t[1].ndim == 4) {
        /* BlockMask: kv_num_blocks, kv_indices, full_kv_num_blocks,
         * full_kv_indices; heads/batch of size 1 broadcast */
        for (int part = 0; part < 2; part++) {
            const struct kv_tensor *cnt = &t[2 * part], *idx = &t[2 * part + 1];
            if (cnt->ndim != 3 || idx->ndim != 4 || cnt->dtype != KV_I32 ||
                idx->dtype != KV_I32 || cnt->shape[2] != nqb ||
                idx->shape[2] != nqb || idx->shape[3] != nkb ||
                (cnt->shape[0] != nb && cnt->shape[0] != 1) ||
                (cnt->shape[1] != hq && cnt->shape[1] != 1) ||
                idx->shape[0] != cnt->shape[0] ||
                idx->shape[1] != cnt->shape[1]) {
                kv_err_set(e, "mask '%s': BlockMask indices of shape %s do "
                           "not fit [%lld, %lld, %lld, %lld] (batch, query "
                           "heads, query blocks, key blocks; batch and heads "
                           "may be 1)", name,
                           kv_shape_str(idx->ndim, idx->shape, s1, sizeof(s1)),
                           (long long)nb, (long long)hq, (long long)nqb,
                           (long long)nkb);
                goto bad;
            }
            for (int64_t b = 0; b < nb; b++)
                for (int64_t h = 0; h < hq; h++)
                    for (int64_t qb = 0; qb < nqb; qb++) {
                        int64_t cb = cnt->shape[0] == 1 ? 0 : b;
                        int64_t ch = cnt->shape[1] == 1 ? 0 : h;
                        int64_t crow = (cb * cnt->shape[1] + ch) * nqb + qb;
                        int32_t c = ((const int32_t *)cnt->data)[crow];
                        const int32_t *ix = (const int32_t *)idx->data +
                                            crow * idx->shape[3];
                        if (c < 0 || c > idx->shape[3]) {
                            kv_err_set(e, "mask '%s': block count %d out of "
                                       "range", name, (int)c);
                            goto bad;
                        }
                        for (int32_t j = 0; j < c; j++) {
                            if (ix[j] < 0 || ix[j] >= nkb) {
                                kv_err_set(e, "mask '%s': block index %d "
                                           "outside 0..%lld", name, (int)ix[j],
                                           (long long)nkb - 1);
                                goto bad;
                            }
                            m[((b * hq + h) * nqb + qb) * nkb + ix[j]] = 1;
                        }
                    }
        }
    } else {
        const struct kv_tensor *d = &t[0];
        int64_t db = 1, dh = 1;
        if (n > 1) {
            kv_err_set(e, "mask '%s': holds %d arrays; expected one dense "
                       "block mask or a BlockMask of eight", name, n);
            goto bad;
        }
        if (d->ndim == 4) {
            db = d->shape[0];
            dh = d->shape[1];
        } else if (d->ndim == 3) {
            dh = d->shape[0];
        }
        if (d->ndim < 2 || d->ndim > 4 || d->shape[d->ndim - 2] != nqb ||
            d->shape[d->ndim - 1] != nkb || (db != 1 && db != nb) ||
            (dh != 1 && dh != hq)) {
            kv_err_set(e, "mask '%s': shape %s does not fit [%lld, %lld, "
                       "%lld, %lld] (batch, query heads, query blocks, key "
                       "blocks)", name,
                       kv_shape_str(d->ndim, d->shape, s1, sizeof(s1)),
                       (long long)nb, (long long)hq, (long long)nqb,
                       (long long)nkb);
            goto bad;
        }
        if (kv_dtype_is_float(d->dtype)) {
            /* 0/1 floats are a keep mask; anything else (-inf of an
             * additive mask, where 0 means keep) would read inverted */
            size_t n_el = (size_t)(db * dh * nqb * nkb);
            for (size_t i = 0; i < n_el; i++) {
                double x = kv_tensor_get_f64(d, i);
                if (x != 0.0 && x != 1.0) {
                    kv_err_set(e, "mask '%s': a float block mask must hold "
                               "only 0 and 1 (1 = keep), found %g; an "
                               "additive mask (0 = keep) reads inverted",
                               name, x);
                    goto bad;
                }
            }
        }
        for (int64_t b = 0; b < nb; b++)
            for (int64_t h = 0; h < hq; h++)
                for (int64_t i = 0; i < nqb * nkb; i++) {
                    size_t src = (size_t)((((db == 1 ? 0 : b) * dh +
                                            (dh == 1 ? 0 : h)) * nqb * nkb) + i);
                    m[(b * hq + h) * nqb * nkb + i] =
                        kv_tensor_get_f64(d, src) != 0.0;
                }
    }
    for (int i = 0; i < 4; i++)
        kv_tensor_release(&t[i]);
    *out = m;
    return 0;
bad:
    free(m);
    for (int i = 0; i < 4; i++)
        kv_tensor_release(&t[i]);
    return -1;
}

/* Takes from --max-mem what recall holds beside its work for n_bh query
 * heads of lq tokens: the mask spread to [B, Hq, nqb, nkb], the per-token
 * recall (f64), the block masses (f32, --per-block) and the per-head
 * minima and means.  *extra gets the bytes taken. */
static int recall_reserve(struct opts *o, int64_t n_bh, int64_t lq,
                          int64_t nqb, int64_t nkb, size_t *extra,
                          struct kv_err *e)
{
    if (mem_add(extra, (size_t)n_bh, (size_t)nqb, (size_t)nkb, 1) ||
        mem_add(extra, (size_t)n_bh, (size_t)lq, 1, 8) ||
        (o->per_block && mem_add(extra, (size_t)n_bh, (size_t)nqb,
                                 (size_t)nkb, 4)) ||
        mem_add(extra, (size_t)n_bh, 2, 1, 8))
        return kv_err_set(e, "the mask size overflows");
    return mem_take(&o->x.max_bytes, *extra, e);
}

/* The minimum and the mean of each query head's per-token recall rr
 * ([n_bh, lq] f64): *rmin gets n_bh minima followed by n_bh means, one
 * buffer the caller frees. */
static int head_recall(const struct kv_tensor *rr, int64_t n_bh, int64_t lq,
                       double **rmin, struct kv_err *e)
{
    double *mn_out = malloc((size_t)n_bh * 2 * sizeof(double));
    if (!mn_out)
        return kv_err_set(e, "out of memory");
    for (int64_t i = 0; i < n_bh; i++) {
        const double *r = (const double *)rr->data + i * lq;
        double mn = INFINITY, sm = 0.0;
        for (int64_t t = 0; t < lq; t++) {
            if (r[t] < mn)
                mn = r[t];
            sm += r[t];
        }
        mn_out[i] = mn;
        mn_out[n_bh + i] = sm / (double)lq;
    }
    *rmin = mn_out;
    return 0;
}

/* The text report's fields as JSON lines (-f json): the overall recall_min,
 * recall_mean, density, kept and valid, then one line per query head with
 * its batch, head and the same five fields; the figures as the text has
 * them.  keep is the mask as a tensor. */
static int write_recall_json(FILE *f, const struct kv_tensor *keep,
                             int causal, int64_t qoff, int64_t lq,
                             int64_t block, double mn, double mean,
                             const double *rmin, const double *rmean,
                             struct kv_err *e)
{
    int64_t nb = keep->shape[0], hq = keep->shape[1], nbh = nb * hq;
    int64_t tk = 0, tv = 0;
    int64_t *kept = calloc((size_t)nbh * 2, sizeof(int64_t));
    json_t *o;
    int rc = 0;

    if (!kept)
        return kv_err_set(e, "out of memory");
    kv_xattn_density(keep->data, nbh, keep->shape[2], keep->shape[3], causal,
                     qoff, lq, block, kept, kept + nbh);
    for (int64_t i = 0; i < nbh; i++) {
        tk += kept[i];
        tv += kept[nbh + i];
    }
    for (int64_t i = -1; i < nbh && rc == 0; i++) {
        int64_t k = i < 0 ? tk : kept[i], v = i < 0 ? tv : kept[nbh + i];
        o = json_object();
        if (o && i >= 0) {
            json_object_set_new(o, "batch", json_integer(i / hq));
            json_object_set_new(o, "head", json_integer(i % hq));
        }
        if (o) {
            json_object_set_new(o, "recall_min",
                                kv_json_fig(i < 0 ? mn : rmin[i], 6, 0));
            json_object_set_new(o, "recall_mean",
                                kv_json_fig(i < 0 ? mean : rmean[i], 6, 0));
            json_object_set_new(o, "density",
                                kv_json_fig(v ? (double)k / (double)v : 0.0,
                                            6, 0));
            json_object_set_new(o, "kept", json_integer(k));
            json_object_set_new(o, "valid", json_integer(v));
        }
        if (kv_json_line(f, o) && ferror(f))
            rc = kv_err_set(e, "write error: %s", strerror(errno));
        else if (ferror(f) == 0 && !o)
            rc = kv_err_set(e, "out of memory");
    }
    free(kept);
    return rc;
}

/* Writes the recall to f in the format -f asks for: the per-token recall
 * rr as .npy or rows, else the overall minimum and mean and the density
 * of the kept blocks keep ([nb, hq, nqb, nkb]) beside each head's minimum
 * and mean (rmin, as head_recall leaves it); lq is the query length. */
static int write_recall(const struct opts *o, FILE *f,
                        const struct kv_tensor *rr, uint8_t *keep, int64_t nb,
                        int64_t hq, int64_t nqb, int64_t nkb, int64_t lq,
                        const double *rmin, int64_t qoff, struct kv_err *e)
{
    const double *rmean = rmin + nb * hq;
    struct kv_tensor mt;
    double mn = INFINITY, sm = 0.0;

    if (o->fmt == FMT_NPY)
        return kv_npy_write(f, rr, e);
    if (o->fmt == FMT_ROWS)
        return kv_text_write(f, rr, e);
    /* the mask as a tensor for the density: a view of keep */
    kv_tensor_init(&mt);
    mt.dtype = KV_BOOL;
    mt.ndim = 4;
    mt.shape[0] = nb;
    mt.shape[1] = hq;
    mt.shape[2] = nqb;
    mt.shape[3] = nkb;
    mt.data = keep;
    mt.nbytes = (size_t)(nb * hq * nqb * nkb);
    for (int64_t i = 0; i < nb * hq; i++) {
        if (rmin[i] < mn)
            mn = rmin[i];
        sm += rmean[i];
    }
    if (o->fmt == FMT_JSON)
        return write_recall_json(f, &mt, o->x.causal, qoff, lq,
                                 o->x.block_size, mn, sm / (double)(nb * hq),
                                 rmin, rmean, e);
    fprintf(f, "recall_min: %.6f\nrecall_mean: %.6f\n", mn,
            sm / (double)(nb * hq));
    write_density(f, &mt, o->x.causal, qoff, lq, o->x.block_size,
                  "", rmin, rmean);
    return 0;
}

static int run_recall(struct opts *o)
{
    struct input qi, ki;
    struct kv_tensor rr, bm;
    struct kv_out out, side = {0};
    struct kv_progress prog;
    struct kv_err e;
    uint8_t *keep = NULL;
    double *rmin = NULL, t0 = kv_now(), tread, twork;
    int64_t qoff, nb, hq, lq, nqb, nkb;
    int rc = KV_EXIT_DATA, out_open = 0;
    size_t max = o->x.max_bytes, extra = 0;

    e.msg[0] = 0;
    memset(&qi, 0, sizeof(qi));
    memset(&ki, 0, sizeof(ki));
    kv_tensor_init(&rr);
    kv_tensor_init(&bm);
    if (load_qk(o->qpath, "Q", o->thd, o->x.max_bytes, o->x.nthreads, 0,
                &qi, &e) ||
        load_qk(o->kpath, "K", o->thd, o->x.max_bytes, o->x.nthreads, 0,
                &ki, &e))
        goto fail;
    nb = qi.t.shape[0];
    hq = qi.t.shape[1];
    lq = qi.t.shape[2];
    nqb = (lq + o->x.block_size - 1) / o->x.block_size;
    nkb = (ki.t.shape[2] + o->x.block_size - 1) / o->x.block_size;
    if (nb != ki.t.shape[0] || qi.t.shape[3] != ki.t.shape[3] || ki.t.shape[1] < 1 ||
        hq % ki.t.shape[1] != 0) {
        int64_t dummy;
        o->x.stride = 1;
        if (kv_xattn_check(&o->x, qi.t.shape, ki.t.shape, &dummy, &e) == 0)
            kv_err_set(&e, "Q and K do not fit");
        goto fail;
    }
    if (recall_reserve(o, nb * hq, lq, nqb, nkb, &extra, &e))
        goto fail;
    if (load_mask(o->mpath, nb, hq, nqb, nkb, o->x.max_bytes, &keep, &e))
        goto fail;
    /* bf16 Q and K: the bf16 tiles; else OpenBLAS's sgemm (the library
     * loads it) */
    if (qi.src == KV_BF16 && ki.src == KV_BF16)
        o->x.bf16_route = (int)kv_bf16_route_best();
    tread = kv_now() - t0;
    kv_progress_start(&prog, "recall", o->quiet);
    o->x.progress = on_progress;
    o->x.progress_ctx = &prog;
    rc = kv_xattn_recall(&qi.t, &ki.t, keep, &o->x, &rr,
                         o->per_block ? &bm : NULL, &e);
    kv_progress_end(&prog);
    if (rc) {
        scores_overflow(&e, o->x.scale > 0, "times", "--scale", o->x.scale,
                        "smaller");
        mem_need(&e, extra, max);
        goto fail;
    }
    twork = kv_now() - t0 - tread;
    qoff = o->x.q_offset >= 0 ? o->x.q_offset : ki.t.shape[2] - lq;
    if (qoff < 0)
        qoff = 0;
    if (head_recall(&rr, nb * hq, lq, &rmin, &e))
        goto fail;
    if (open_side_npy(&side, o->per_block, &bm, &e))
        goto fail;
    if (kv_out_open(&out, o->out, &e))
        goto fail;
    out_open = 1;
    if (write_recall(o, out.f, &rr, keep, nb, hq, nqb, nkb, lq, rmin, qoff, &e))
        goto fail;
    if (o->verbose)
        fprintf(stderr, "%s: read %.4f s, recall %.4f s (%lld x %lld query "
                "rows against %lld keys)\n", kv_progname(), tread, twork,
                (long long)(nb * hq), (long long)lq,
                (long long)ki.t.shape[2]);
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
    free(keep);
    free(rmin);
    input_release(&qi);
    input_release(&ki);
    kv_tensor_release(&rr);
    kv_tensor_release(&bm);
    if (rc == KV_EXIT_OK)
        return kv_close_stdout();
    return rc;
}

static const char *REC_SYN =
    "\nThe exact attention mass each query token's kept blocks cover\n"
    "(min / mean per head) and the density of the block mask M.";

int cmd_recall(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_file *aq = arg_file1("q", "query", "Q", "query .npy");
    struct arg_file *ak = arg_file1("k", "key", "K", "key .npy");
    struct arg_file *am = arg_file1("m", "mask", "M",
                                    "block mask .npy or BlockMask stream");
    struct arg_str *alayout = arg_str0(NULL, "layout", "bhsd|thd",
                                       "input layout (default bhsd)");
    struct arg_str *abs = arg_str0(NULL, "block-size", "BS",
                                   "block size (default 128)");
    struct arg_lit *anc = arg_lit0(NULL, "no-causal", "non-causal attention");
    struct arg_str *aoff = arg_str0(NULL, "q-offset", "N",
                                    "kv position of query token 0 "
                                    "(default Lk - Lq)");
    struct arg_str *ascale = arg_str0(NULL, "scale", "X",
                                      "softmax scale (default 1/sqrt(D))");
    struct arg_file *apb = arg_file0(NULL, "per-block", "FILE",
                                     "write the exact block-mass matrix");
    struct arg_str *afmt = arg_str0("f", "format", "FMT",
                                    "text or json (report); rows or npy "
                                    "(per-token recall)");
    struct arg_lit *aforce = arg_lit0(NULL, "force",
                                      "binary output to a terminal");
    struct arg_file *aout = arg_file0("o", "output", "FILE", "output file");
    struct arg_str *aj = arg_str0("j", "jobs,threads", "N",
                                  "threads (default: all cores)");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE",
                                    "memory limit (default 75% of RAM)");
    struct arg_lit *aquiet = arg_lit0(NULL, "quiet", "no progress line");
    struct arg_lit *averb = arg_lit0("v", "verbose", "print timings");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, aq, ak, am, alayout, abs, anc, aoff,
                     ascale, apb, afmt, aforce, aout, aj, amem, aquiet,
                     averb, end};
    struct opts o;
    struct kv_err e;
    int rc;
    int64_t v;

    memset(&o, 0, sizeof(o));
    kv_xattn_opts_init(&o.x);
    kv_setprogname("kvxattn recall");
    rc = kv_arg_parse(table, argc, argv, help, version, end, REC_SYN, NULL);
    if (rc >= 0)
        goto out;
    rc = KV_EXIT_USAGE;
    o.qpath = aq->filename[0];
    o.kpath = ak->filename[0];
    o.mpath = am->filename[0];
    if ((strcmp(o.qpath, "-") == 0) + (strcmp(o.kpath, "-") == 0) +
        (strcmp(o.mpath, "-") == 0) > 1) {
        rc = kv_usage("only one of -q, -k and --mask can read stdin");
        goto out;
    }
    if (alayout->count) {
        if (strcmp(alayout->sval[0], "thd") == 0)
            o.thd = 1;
        else if (strcmp(alayout->sval[0], "bhsd") != 0) {
            rc = kv_usage("--layout: expected bhsd or thd, got '%s'",
                          alayout->sval[0]);
            goto out;
        }
    }
    if (kv_opt_i64(abs, "--block-size", 1, 1 << 24, &o.x.block_size))
        goto out;
    o.x.stride = 1;
    o.x.causal = anc->count == 0;
    if (kv_opt_i64(aoff, "--q-offset", 0, INT64_MAX / 4, &o.x.q_offset))
        goto out;
    if (aoff->count && !o.x.causal) {
        rc = kv_usage("--q-offset places the queries for causal attention; "
                      "with --no-causal every key is visible and it would "
                      "change nothing");
        goto out;
    }
    if (ascale->count) {
        if (kv_parse_f64(ascale->sval[0], "--scale", &o.x.scale, &e) ||
            !((float)o.x.scale > 0.0f) || !isfinite((float)o.x.scale)) {
            /* the scores are scaled in f32: the scale must be one */
            rc = kv_usage("--scale: expected a number > 0 that is a finite "
                          "nonzero f32, got '%s'", ascale->sval[0]);
            goto out;
        }
    }
    if (apb->count)
        o.per_block = apb->filename[0];
    if (aout->count)
        o.out = aout->filename[0];
    o.fmt = FMT_TEXT;
    if (afmt->count && parse_format(afmt->sval[0], 1, &o.fmt))
        goto out;
    if (kv_opt_i64(aj, "-j", 0, 256, &v))
        goto out;
    o.x.nthreads = aj->count ? (int)v : 0;
    if (kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &o.x.max_bytes,
                         &e)) {
        rc = kv_usage("%s", e.msg);
        goto out;
    }
    o.force = aforce->count > 0;
    o.quiet = aquiet->count > 0;
    o.verbose = averb->count > 0;
    if (o.per_block && strcmp(o.per_block, "-") == 0) {
        rc = kv_usage("--per-block needs a file name");
        goto out;
    }
    {
        const char *opt[2] = {"--per-block", "-o"};
        const char *path[2] = {o.per_block, o.out ? o.out : "-"};
        if (kv_outputs_distinct(opt, path, 2, &e) < 0) {
            rc = kv_usage("%s", e.msg);
            goto out;
        }
    }
    if (o.fmt == FMT_NPY && (!o.out || strcmp(o.out, "-") == 0)) {
        rc = kv_check_binary_ok(stdout, o.force);
        if (rc)
            goto out;
    }
    kv_setprogname("kvxattn");
    rc = run_recall(&o);
out:
    arg_freetable(table, sizeof(table) / sizeof(table[0]));
    return rc;
}
