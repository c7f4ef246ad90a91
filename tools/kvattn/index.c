/* kvattn index: DeepSeek-V3.2's lightning indexer, its scores and top-k
 * key indices per query (man 1 kvattn, INDEX). */
#include "kvattn.h"
#include "attn/indexer.h"
#include "core/half.h"

struct index_opts {
    const char *q, *k, *w, *out, *scores;
    int64_t *q_lens, *kv_lens;     /* a batch, or NULL */
    size_t n_reqs;
    int64_t topk;
    int has_scale, causal, threads, force;
    double scale;
    enum kv_format fmt;
    size_t max_mem;
};

/* An input as f32 (bf16 and f16 widened exactly), its shape checked. */
static int load_f32(const char *path, const char *what, int ndim,
                    size_t max_mem, struct kv_tensor *t, struct kv_err *e)
{
    struct input in;
    if (input_load(&in, path, max_mem, e))
        return -1;
    int rc = 0;
    char sh[128];
    if (in.t.dtype != KV_F32 && in.t.dtype != KV_BF16 && in.t.dtype != KV_F16) {
        rc = kv_err_set(e, "%s '%s': expected f32, bf16 or f16, got %s", what,
                        path, kv_dtype_name(in.t.dtype));
    } else if (in.t.ndim != ndim) {
        kv_shape_str(in.t.ndim, in.t.shape, sh, sizeof sh);
        rc = kv_err_set(e, "%s '%s': shape %s, expected %d dimensions", what,
                        path, sh, ndim);
    } else {
        rc = kv_tensor_convert(t, &in.t, KV_F32, e);
    }
    input_release(&in);
    return rc;
}

static int run_index(const struct index_opts *o)
{
    struct kv_err e = {{0}};
    struct kv_tensor q, k, w, idx, sc;
    int rc = KV_EXIT_DATA;
    kv_tensor_init(&q);
    kv_tensor_init(&k);
    kv_tensor_init(&w);
    kv_tensor_init(&idx);
    kv_tensor_init(&sc);
    if (load_f32(o->q, "-q", 3, o->max_mem, &q, &e) ||
        load_f32(o->k, "-k", 2, o->max_mem, &k, &e) ||
        load_f32(o->w, "--weights", 2, o->max_mem, &w, &e))
        goto fail;
    int64_t tq = q.shape[0], h = q.shape[1], d = q.shape[2];
    if (k.shape[1] != d) {
        kv_err_set(&e, "keys [%lld, %lld] and queries [%lld, %lld, %lld]: the head "
                   "sizes differ", (long long)k.shape[0], (long long)k.shape[1],
                   (long long)tq, (long long)h, (long long)d);
        goto fail;
    }
    if (w.shape[0] != tq || w.shape[1] != h) {
        kv_err_set(&e, "--weights [%lld, %lld]: expected [%lld, %lld], one per query "
                   "and head", (long long)w.shape[0], (long long)w.shape[1],
                   (long long)tq, (long long)h);
        goto fail;
    }
    const struct kv_tensor *ins[3] = {&q, &k, &w};
    const char *names[3] = {"-q", "-k", "--weights"};
    for (int i = 0; i < 3; i++) {
        size_t n = kv_tensor_numel(ins[i]);
        const float *p = ins[i]->data;
        if (!kv_f32_nonfinite_n(p, n))
            continue;
        size_t at = 0;
        while (at < n && isfinite(p[at]))
            at++;
        kv_err_set(&e, "%s: element %zu is not finite", names[i], at);
        goto fail;
    }
    if (!o->q_lens && o->causal && tq > k.shape[0]) {
        kv_err_set(&e, "%lld queries over %lld keys: causal queries are the last "
                   "of the keys (or give --no-causal)", (long long)tq,
                   (long long)k.shape[0]);
        goto fail;
    }
    int64_t shape[2] = { tq, o->topk };
    if (kv_tensor_alloc(&idx, KV_I32, 2, shape, o->max_mem, &e) ||
        (o->scores && kv_tensor_alloc(&sc, KV_F32, 2, shape, o->max_mem, &e)))
        goto fail;
    struct kv_indexer_req r = {
        q.data, k.data, w.data, tq, k.shape[0], h, d,
        o->has_scale ? o->scale : 1.0 / sqrt((double)d), o->topk, o->causal,
        o->threads, o->q_lens, o->kv_lens, o->n_reqs,
    };
    if (kv_indexer_topk(&r, idx.data, o->scores ? sc.data : NULL, &e))
        goto fail;
    const struct kv_tensor *ss[1] = {&sc}, *is[1] = {&idx};
    struct tensor_out wo[2] = {
        {o->out, o->fmt, o->force, is, 1},
        {o->scores, KV_FMT_NPY, 1, ss, 1},
    };
    if ((rc = write_outputs(wo, o->scores ? 2 : 1)))
        goto done;
    rc = kv_close_stdout();
    goto done;
fail:
    rc = kv_fail_err(&e);
done:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&w);
    kv_tensor_release(&idx);
    kv_tensor_release(&sc);
    return rc;
}

static const char index_synopsis[] =
    "\nDeepSeek-V3.2's lightning indexer: score[i][t] = sum_h w[i][h] relu(scale\n"
    "q[i][h].k[t]) over the keys query i sees (causal, bottom-right aligned),\n"
    "then the top k per query (highest first, ties by the smaller index; -1\n"
    "fills a row with fewer visible keys).  Q [Tq,H,D], K [Tk,D], W [Tq,H].\n"
    "A batch: --q-lens (and --kv-lens) pack requests; indices are positions\n"
    "in each query's own request, as kvattn mla --topk-indices reads them.";

/* --q-lens and --kv-lens: a batch (kv-lens defaults to q-lens). */
static int parse_index_lens(struct arg_str *ql, struct arg_str *kl, struct index_opts *o)
{
    size_t nk = 0;
    int rc;
    if (kl->count && !ql->count)
        return kv_usage("--kv-lens needs --q-lens");
    if (!ql->count)
        return 0;
    if ((rc = parse_list(ql, "--q-lens", &o->q_lens, &o->n_reqs)) ||
        (rc = parse_list(kl, "--kv-lens", &o->kv_lens, &nk)))
        return rc;
    if (!kl->count) {
        o->kv_lens = malloc(o->n_reqs * sizeof *o->kv_lens);
        if (!o->kv_lens)
            return kv_usage("out of memory");
        memcpy(o->kv_lens, o->q_lens, o->n_reqs * sizeof *o->kv_lens);
        nk = o->n_reqs;
    }
    if (nk != o->n_reqs || !o->n_reqs)
        return kv_usage("--q-lens and --kv-lens: %zu and %zu requests, expected the same "
                        "number, at least one", o->n_reqs, nk);
    return 0;
}

int cmd_index(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *q = arg_file0("q", NULL, "FILE", "indexer queries [Tq, H, D] (f32, bf16)");
    struct arg_file *k = arg_file0("k", NULL, "FILE", "indexer keys [Tk, D]");
    struct arg_file *w = arg_file0(NULL, "weights", "FILE", "head weights [Tq, H] (weights_proj(x) H^-0.5)");
    struct arg_str *topk = arg_str0(NULL, "topk", "N", "keys per query (default 2048, index_topk)");
    struct arg_dbl *scale = arg_dbl0(NULL, "scale", "S", "dot-product scale (default D^-0.5)");
    struct arg_lit *nocausal = arg_lit0(NULL, "no-causal", "every query sees every key");
    struct arg_str *ql = arg_str0(NULL, "q-lens", "N,N..", "a batch: queries per request (rows of Q, W)");
    struct arg_str *kl = arg_str0(NULL, "kv-lens", "N,N..", "keys per request (rows of K; default = q-lens)");
    struct arg_file *scores = arg_file0(NULL, "scores", "FILE", "also write the selected scores (f32)");
    struct arg_file *out = arg_file0("o", NULL, "FILE", "indices (int32 [Tq, topk]; default stdout)");
    struct arg_str *fmt = arg_str0("f", NULL, "npy|text", "output format");
    struct arg_lit *force = arg_lit0(NULL, "force", "write binary to a terminal");
    struct arg_int *j = arg_int0("j", NULL, "N", "threads (default: all cores)");
    struct arg_str *mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_end *end = arg_end(20);
    void *t[] = {help, version, q, k, w, topk, scale, nocausal, ql, kl, scores, out, fmt, force,
                 j, mem, end};
    struct index_opts o;
    int rc;
    memset(&o, 0, sizeof o);
    if ((rc = kv_arg_parse(t, argc, argv, help, version, end,
                           "kvattn index -q Q -k K --weights W [--topk N] [options]",
                           index_synopsis)) >= 0)
        goto out;
    rc = KV_EXIT_USAGE;
    if (!q->count || !k->count || !w->count) {
        kv_usage("-q FILE, -k FILE and --weights FILE are required");
        goto out;
    }
    o.q = q->filename[0];
    o.k = k->filename[0];
    o.w = w->filename[0];
    o.topk = 2048;
    if (kv_opt_i64(topk, "--topk", 1, INT32_MAX, &o.topk))
        goto out;
    if (scale->count) {
        if (!isfinite(scale->dval[0]) || scale->dval[0] <= 0) {
            kv_usage("--scale: expected a finite number > 0, got %g", scale->dval[0]);
            goto out;
        }
        o.has_scale = 1;
        o.scale = scale->dval[0];
    }
    o.causal = nocausal->count == 0;
    if ((rc = parse_index_lens(ql, kl, &o)))
        goto out;
    o.out = out->count ? out->filename[0] : NULL;
    o.scores = scores->count ? scores->filename[0] : NULL;
    const char *opts[] = {"-o", "--scores"};
    const char *outs[] = {o.out ? o.out : "-", o.scores};
    if ((rc = outputs_distinct(opts, outs, 2)))
        goto out;
    if (is_stdin(o.q) + is_stdin(o.k) + is_stdin(o.w) > 1) {
        rc = kv_usage("only one input can be standard input");
        goto out;
    }
    if ((rc = parse_format(fmt, &o.fmt)) || (rc = parse_threads(j, &o.threads)) ||
        (rc = parse_max_mem(mem, &o.max_mem)))
        goto out;
    o.force = force->count > 0;
    rc = run_index(&o);
out:
    free(o.q_lens);
    free(o.kv_lens);
    arg_freetable(t, sizeof t / sizeof *t);
    return rc;
}
