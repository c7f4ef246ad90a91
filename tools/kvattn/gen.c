/* kvattn gen: deterministic synthetic Q, K, V (lib/attn/gen), the toy
 * projection of kvchunk, and an MLA model's inputs of both forms. */
#include "kvattn.h"

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
    /* the whole KV, Q, and Q, K, V in their layout, held at once */
    if (o->max_mem) {
        double need = (double)kv_dtype_size(o->dtype) * (double)o->T * (double)o->D *
                      (2.0 * (double)o->layers * (double)o->hkv + 2.0 * (double)o->hq +
                       2.0 * (double)o->hkv);
        if (need > (double)o->max_mem) {
            kv_err_set(&e, "--toy needs %.0f bytes, more than the limit of %zu (--max-mem)",
                       need, o->max_mem);
            goto fail;
        }
    }
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
        struct tensor_out w[3] = {{o->q, KV_FMT_NPY, 1, t1, 1},
                                  {o->k, KV_FMT_NPY, 1, t2, 1},
                                  {o->v, KV_FMT_NPY, 1, t3, 1}};
        if ((rc = write_outputs(w, 3)))
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


/* What gen writes for an MLA config (lib/attn mla.h, kv_mla_gen_*):
 * the plan (B, S, Lk, the scale, the indexer's top-k) and its arrays. */
struct mla_set {
    struct kv_mla_gen_plan p;
    struct kv_mla_gen_set s;
};

/* Write one file of the set into folder tmp: the arrays as .npy, the
 * lists, the scale and the top-k as one text line. */
static int mla_write_one(const char *tmp, size_t i, const struct mla_set *m)
{
    struct kv_err e = {{0}};
    const struct kv_tensor *t = kv_mla_gen_tensor(&m->s, i);
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", tmp, kv_mla_gen_files[i]) >= sizeof path)
        return kv_fail("'%s': path too long", tmp);
    if (t) {
        const struct kv_tensor *one[1] = {t};
        return write_tensors(path, KV_FMT_NPY, 1, one, 1);
    }
    struct kv_out o;
    if (kv_out_open(&o, path, &e))
        return kv_fail_err(&e);
    size_t f = i - 8;
    for (int64_t b = 0; b < m->p.g.B && f < 2; b++)
        fprintf(o.f, "%s%lld", b ? "," : "", (long long)(f == 0 ? m->p.g.Lk : m->p.g.S));
    if (f == 2) {
        char num[32];
        shortest_double(num, sizeof num, m->p.scale);
        fputs(num, o.f);
    } else if (f > 2) {
        fprintf(o.f, "%lld", (long long)m->p.index.topk);
    }
    fputc('\n', o.f);
    return kv_out_commit(&o, &e) ? kv_fail_err(&e) : 0;
}

/* Remove the temporary folder tmp and what gen wrote into it. */
static void mla_remove_tmp(const char *tmp)
{
    char path[4096];
    for (size_t i = 0; i < KV_MLA_GEN_FILES; i++)
        if ((size_t)snprintf(path, sizeof path, "%s/%s", tmp, kv_mla_gen_files[i]) < sizeof path)
            unlink(path);
    rmdir(tmp);
}

/* Write the whole set into dir, never half of it: into a new temporary
 * folder first (beside dir when dir does not exist, inside it when it
 * does), then that folder is renamed to dir, or its files moved over the
 * old ones (an earlier set's indexer files removed when this set has
 * none).  A failure before the move leaves dir as it was. */
static int mla_write_set(const char *dir, const struct mla_set *m)
{
    struct stat st;
    char tmp[4096], from[4160], to[4160];
    int exists = stat(dir, &st) == 0;
    size_t nf = kv_mla_gen_n_files(&m->p);
    if (exists && !S_ISDIR(st.st_mode))
        return kv_fail("cannot create '%s': %s", dir, strerror(ENOTDIR));
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    if ((size_t)snprintf(tmp, sizeof tmp, exists ? "%.*s/.kvattn-gen.XXXXXX"
                                                  : "%.*s.kvattn-gen.XXXXXX",
                         (int)dl, dir) >= sizeof tmp)
        return kv_fail("'%s': path too long", dir);
    if (!mkdtemp(tmp))
        return kv_fail("cannot create '%s': %s", dir, strerror(errno));
    int rc = 0;
    for (size_t i = 0; i < nf && !rc; i++)
        rc = mla_write_one(tmp, i, m);
    if (rc) {
        mla_remove_tmp(tmp);
        return rc;
    }
    if (!exists) {
        if (rename(tmp, dir) == 0)
            return 0;
        int err = errno;
        mla_remove_tmp(tmp);
        return kv_fail("cannot create '%s': %s", dir, strerror(err));
    }
    for (size_t i = 0; i < nf; i++) {
        snprintf(from, sizeof from, "%s/%s", tmp, kv_mla_gen_files[i]);
        snprintf(to, sizeof to, "%.*s/%s", (int)dl, dir, kv_mla_gen_files[i]);
        if (rename(from, to) != 0) {     /* tmp's name fits: so do these */
            int err = errno;
            mla_remove_tmp(tmp);
            return kv_fail("cannot move '%s' into '%s': %s", kv_mla_gen_files[i], dir,
                           strerror(err));
        }
    }
    rmdir(tmp);
    /* the files of a set with an indexer that this one has not: left
     * there, index_q.npy .. index_topk would pass for this set's */
    for (size_t i = nf; i < KV_MLA_GEN_FILES; i++) {
        snprintf(to, sizeof to, "%.*s/%s", (int)dl, dir, kv_mla_gen_files[i]);
        if (unlink(to) != 0 && errno != ENOENT)
            return kv_fail("cannot remove '%s' of an earlier set from '%s': %s",
                           kv_mla_gen_files[i], dir, strerror(errno));
    }
    return 0;
}

/* kvattn gen --model-config with an MLA model: the inputs of both forms
 * into a directory (see kvattn(1), MLA). */
static int mla_gen(const struct kv_mla_gen_args *args, const char *dir)
{
    struct kv_err e = {{0}};
    struct kv_latent L;
    struct mla_set m;
    if (kv_latent_load_attn(args->config, 0, &L, &e))
        return kv_usage("--model-config: %s", e.msg);
    if (!dir)
        return kv_usage("an MLA config writes several arrays: give --dir DIR");
    if (kv_mla_gen_prepare(&L, args, &m.p, &e))
        return kv_usage("%s", e.msg);
    if (kv_mla_index_fields(args->config, &m.p.index, &e))
        return kv_usage("--model-config: %s", e.msg);
    kv_setprogname("kvattn");
    if (kv_mla_gen_make(&m.p, &m.s, &e))
        return kv_fail_err(&e);
    int rc = mla_write_set(dir, &m);
    kv_mla_gen_release(&m.s);
    return rc;
}

/* Is cfg an MLA model's config (it has kv_lora_rank)?  1 yes, 0 no, -1
 * when it does not load (the ordinary path reports why). */
static int mla_config(const char *cfg)
{
    struct kv_err e = {{0}};
    return kv_latent_probe(cfg, 0, &e);
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
        /* the config's KV heads stay: --shape overrides H and D only */
        s->Hkv = cfg ? m->n_kv_heads : s->Hq;
        if (cfg && !kvh && s->Hq % s->Hkv) {
            free(sh);
            return kv_usage("--shape: %lld query heads are not a multiple of "
                            "the %lld KV heads of '%s'; give --kv-heads",
                            (long long)s->Hq, (long long)s->Hkv, cfg);
        }
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

/* gen's options an MLA config does not use, each refused by name. */
static int mla_refuse_unused(const struct gen_args *a)
{
    static const char *const names[] = {
        "--kv-heads", "--pattern", "--sinks", "--layout", "-q", "-k", "-v", "-f", "--force",
        "-j", "--toy", "--tokens", "--pos", "--layers", "--layer", "--embed-dim", "--rope",
        "--rope-theta", "--rotary-dim", "--kv"};
    const int counts[] = {
        a->kvh->count, a->pat->count, a->sink->count, a->layout->count, a->q->count,
        a->k->count, a->v->count, a->fmt->count, a->force->count, a->j->count,
        a->toy->count, a->tok->count, a->pos->count, a->layers->count, a->layer->count,
        a->embed->count, a->rope->count, a->theta->count, a->rot->count, a->kv->count};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (counts[i])
            return kv_usage("%s: not used with an MLA --model-config, which writes "
                            "its inputs into --dir (kvattn(1), MLA)", names[i]);
    return 0;
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
        return kv_usage("%s", e.msg);
    int nfiles = a->q->count + a->k->count + a->v->count;
    if (nfiles != 0 && nfiles != 3)
        return kv_usage("give all of -q, -k, -v, or none (one stream on stdout)");
    /* -f and --force are about the stream on stdout: none is written
     * with -q, -k, -v, or with --toy --kv alone */
    if ((a->fmt->count || a->force->count) &&
        (nfiles == 3 || (a->toy->count && a->kv->count)))
        return kv_usage("%s: no stream goes to standard output (-q, -k, -v and --kv "
                        "write .npy files)", a->fmt->count ? "-f" : "--force");
    const char *opts[] = {"-q", "-k", "-v", "--kv"};
    const char *paths[] = {a->q->count ? a->q->filename[0] : NULL,
                           a->k->count ? a->k->filename[0] : NULL,
                           a->v->count ? a->v->filename[0] : NULL,
                           a->kv->count ? a->kv->filename[0] : NULL};
    if (kv_outputs_distinct(opts, paths, 4, &e))
        return kv_usage("%s", e.msg);
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

int cmd_gen(int argc, char **argv)
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
        struct kv_mla_gen_args ga = {
            a.cfg->filename[0], a.shape->count ? a.shape->sval[0] : NULL,
            a.seed->count ? a.seed->sval[0] : NULL, a.dt->count ? a.dt->sval[0] : NULL,
            a.mem->count ? a.mem->sval[0] : NULL, a.kvlen->count ? a.kvlen->ival[0] : 0,
            a.mla_bs->count ? a.mla_bs->ival[0] : 64};
        if ((rc = mla_refuse_unused(&a)) == 0)
            rc = mla_gen(&ga, a.mla_dir->count ? a.mla_dir->filename[0] : NULL);
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
        struct tensor_out w[3] = {{a.q->filename[0], KV_FMT_NPY, 1, t1, 1},
                                  {a.k->filename[0], KV_FMT_NPY, 1, t2, 1},
                                  {a.v->filename[0], KV_FMT_NPY, 1, t3, 1}};
        if ((rc = write_outputs(w, 3)))
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
