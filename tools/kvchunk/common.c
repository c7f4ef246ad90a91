/* kvchunk: the option groups its subcommands share (namespace, store,
 * output, common), turning them into values, opening the store, and the
 * chunk request. */
#include "kvchunk.h"
#include "chunk/ns_opts.h"

/* ---- option groups ------------------------------------------------------ */

void add(struct table *t, void *a)
{
    t->v[t->n++] = a;
}

void add_ns(struct table *t, struct ns_args *a, int with_shape)
{
    add(t, a->model_config = arg_str0(NULL, "model-config", "FILE",
                                      "the model's config.json: geometry, "
                                      "RoPE, dtype (options override it)"));
    add(t, a->model = arg_str0(NULL, "model", "NAME",
                               "model id in the namespace (HF id@revision)"));
    add(t, a->tokenizer = arg_str0(NULL, "tokenizer", "ID",
                                   "tokenizer id in the namespace"));
    add(t, a->lora = arg_str0(NULL, "lora", "ID", "adapter id in the "
                              "namespace"));
    add(t, a->salt = arg_str0(NULL, "salt", "S", "tenant salt in the "
                              "namespace"));
    add(t, a->dtype = arg_str0(NULL, "dtype", "f16|bf16|f32",
                               "KV dtype (default bf16)"));
    if (with_shape)
        add(t, a->shape = arg_str0(NULL, "shape", "L,HKV,D",
                                   "layers, KV heads, head dim"));
    else
        a->shape = NULL;
    add(t, a->rope = arg_str0(NULL, "rope", "neox|gptj|none|learned",
                              "RoPE style (default neox)"));
    add(t, a->theta = arg_str0(NULL, "rope-theta", "X",
                               "RoPE base (default 10000)"));
    add(t, a->rotary_dim = arg_str0(NULL, "rotary-dim", "R",
                                    "rotated dims (default: head dim)"));
    add(t, a->scaling = arg_str0(NULL, "rope-scaling", "SPEC",
                                 "none, linear:F, ntk:F, llama3:..., "
                                 "yarn:..., dynamic:..."));
    add(t, a->nope = arg_str0(NULL, "nope-layers", "A,B,..", "layers "
                              "without RoPE (never rotated)"));
    add(t, a->chunk_context = arg_str0(NULL, "chunk-context", "sys|none",
                                       "what a chunk attended to (default "
                                       "sys)"));
    add(t, a->base_policy = arg_str0(NULL, "base-policy",
                                     "context|zero|free", "where chunks are "
                                     "computed (default context)"));
}

void add_store(struct table *t, struct store_args *a)
{
    add(t, a->store = arg_str0(NULL, "store", "SPEC", "dir:PATH, "
                               "redis://HOST:PORT[/DB] or redis-cluster://"
                               "HOST:PORT[,..] (default $KVCHUNK_STORE, else "
                               "dir:~/.cache/kvchunk)"));
    add(t, a->timeout = arg_str0(NULL, "timeout", "SEC", "longest a Redis "
                                 "connect or command with its whole reply "
                                 "may take (default 2)"));
}

void add_out(struct table *t, struct out_args *a, const char *formats)
{
    a->fmt = NULL;
    if (formats)
        add(t, a->fmt = arg_str0("f", "format", formats, "output format"));
    add(t, a->out = arg_str0("o", "output", "FILE", "write to FILE"));
    add(t, a->force = arg_lit0(NULL, "force", "binary to a terminal"));
}

void add_common(struct table *t, struct common *c)
{
    add(t, c->verbose = arg_lit0("v", "verbose", "timings and counters on "
                                 "stderr"));
    add(t, c->quiet = arg_lit0("q", "quiet", "no progress line"));
    add(t, c->max_mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit "
                                 "(default 75% of RAM)"));
    add(t, c->help = arg_lit0("h", "help", "print this help and exit"));
    add(t, c->end = arg_end(20));
}

const char *sval(struct arg_str *a)
{
    return a && a->count ? a->sval[0] : NULL;
}

/* Parse argv with the table; -1 to go on, else the exit status.  argv[0]
 * is the subcommand: from here on messages, --help and the "Try ...
 * --help" hint name it ("kvchunk get: ..."). */
int parse(struct table *t, struct common *c, int argc, char **argv,
          const char *synopsis)
{
    char name[96];
    snprintf(name, sizeof name, "%s %s", kv_progname(), argv[0]);
    kv_setprogname(name);
    return kv_arg_parse(t->v, argc, argv, c->help, NULL, c->end, synopsis,
                        "See man 1 kvchunk.");
}

void free_table(struct table *t)
{
    arg_freetable(t->v, (size_t)t->n);
}

/* ---- option values ------------------------------------------------------ */

/* The namespace options as the library reads them (NULL where absent). */
static void ns_options(const struct ns_args *a, struct kv_ns_options *o)
{
    *o = (struct kv_ns_options){
        sval(a->model_config), sval(a->model), sval(a->tokenizer), sval(a->lora),
        sval(a->salt), sval(a->dtype), a->shape ? sval(a->shape) : NULL, sval(a->rope),
        sval(a->theta), sval(a->rotary_dim), sval(a->scaling), sval(a->nope),
        sval(a->chunk_context), sval(a->base_policy)};
}

/* Turn the namespace options into v (kv_ns_parse_options); usage errors
 * in e (exit 2).  With -v, say which options override --model-config. */
int ns_values(const struct ns_args *a, int verbose, struct nsv *v,
              struct kv_err *e)
{
    struct kv_ns_options o;
    memset(v, 0, sizeof *v);
    ns_options(a, &o);
    if (kv_ns_parse_options(&o, &v->ns, &v->have_shape, &v->have_dtype, e) < 0)
        return -1;
    const char *over[][2] = {
        {o.dtype, "--dtype"}, {o.shape, "--shape"}, {o.rope, "--rope"},
        {o.rope_theta, "--rope-theta"}, {o.rotary_dim, "--rotary-dim"},
        {o.rope_scaling, "--rope-scaling"}};
    for (size_t i = 0; verbose && o.model_config && i < sizeof over / sizeof over[0]; i++)
        if (over[i][0])
            fprintf(stderr, "%s: %s overrides %s\n", kv_progname(), over[i][1],
                    o.model_config);
    return 0;
}

/* Check the namespace once the geometry is known (kv_ns_check). */
int ns_finish(struct nsv *v, struct kv_err *e)
{
    return kv_ns_check(&v->ns, e);
}

static const char *default_store(char *buf, size_t len)
{
    const char *s = getenv("KVCHUNK_STORE");
    if (s && *s)
        return s;
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && *x) {
        snprintf(buf, len, "dir:%s/kvchunk", x);
        return buf;
    }
    const char *h = getenv("HOME");
    snprintf(buf, len, "dir:%s/.cache/kvchunk", h && *h ? h : ".");
    return buf;
}

/* Is the store the options name a Redis one (redis:// or
 * redis-cluster://), before opening it? */
int store_is_redis(const struct store_args *a)
{
    char buf[4096];
    const char *spec = sval(a->store) ? sval(a->store)
                                      : default_store(buf, sizeof buf);
    return !strncmp(spec, "redis://", 8) || !strncmp(spec, "redis-cluster://", 16);
}

/* The store options alone, before any work: --timeout (a number of
 * seconds, and only for a Redis store).  0 or the usage exit code. */
int store_usage(const struct store_args *a, double *timeout)
{
    struct kv_err e;
    if (!sval(a->timeout))
        return 0;
    char buf[4096];
    const char *spec = sval(a->store) ? sval(a->store)
                                      : default_store(buf, sizeof buf);
    /* a dir: store (a URL of another scheme is refused as such on open) */
    if (!strncmp(spec, "dir:", 4) || !strstr(spec, "://"))
        return kv_usage("--timeout is for redis:// and redis-cluster:// "
                        "stores; a dir: store has none");
    if (kv_parse_f64(sval(a->timeout), "--timeout", timeout, &e) < 0)
        return kv_usage("%s", e.msg);
    if (!(*timeout > 0 && *timeout <= 3600))
        return kv_usage("--timeout: expected seconds in (0, 3600], got "
                        "'%s'", sval(a->timeout));
    return 0;
}

/* Store options -> an open store.  read_only: 1 for ls and stat, 0 for the
 * other readers and writers of an existing store, -1 for put, which
 * creates a missing dir: store.  lim (--max-mem) bounds a Redis reply
 * read into memory.  rc: 2 usage, 1 failure. */
int open_store(const struct store_args *a, int read_only,
               int64_t ttl, int durable, size_t lim, struct kv_store **s)
{
    struct kv_store_opts o;
    struct kv_err e;
    char buf[4096];
    kv_store_opts_init(&o);
    o.read_only = read_only > 0;
    o.must_exist = read_only >= 0;      /* put (-1) alone creates a store */
    o.ttl = ttl;
    o.durable = durable;
    o.max_bytes = lim;
    int rc = store_usage(a, &o.timeout);
    if (rc)
        return rc;
    const char *spec = sval(a->store) ? sval(a->store)
                                      : default_store(buf, sizeof buf);
    if (kv_store_open(spec, &o, s, &e) < 0) {
        /* a malformed spec is a usage error; the rest are failures */
        if (strncmp(e.msg, "--store:", 8) == 0)
            return kv_usage("%s", e.msg);
        return kv_fail_err(&e);
    }
    return 0;
}

int max_mem(const struct common *c, size_t *out)
{
    struct kv_err e;
    if (kv_parse_max_mem(sval(c->max_mem), out, &e) < 0)
        return kv_usage("%s", e.msg);
    return 0;
}

/* Output format: -f text|npy (auto by terminal). */
int out_format(struct arg_str *f, FILE *out, int force,
               enum kv_format *fmt)
{
    *fmt = KV_FMT_AUTO;
    if (sval(f)) {
        if (!strcmp(sval(f), "npy"))
            *fmt = KV_FMT_NPY;
        else if (!strcmp(sval(f), "text"))
            *fmt = KV_FMT_TEXT;
        else
            return kv_usage("-f: expected npy or text, got '%s'", sval(f));
    }
    if (*fmt == KV_FMT_AUTO)
        *fmt = kv_isatty(out) ? KV_FMT_TEXT : KV_FMT_NPY;
    if (*fmt == KV_FMT_NPY)
        return kv_check_binary_ok(out, force);
    return 0;
}

/* -f text|json of a report (info, stat, fsck): *json set to 1 for json;
 * 0 or the usage exit code. */
int report_format(struct arg_str *f, int *json)
{
    *json = 0;
    if (!sval(f) || !strcmp(sval(f), "text"))
        return 0;
    if (!strcmp(sval(f), "json")) {
        *json = 1;
        return 0;
    }
    return kv_usage("-f: expected text or json, got '%s'", sval(f));
}

/* Write o (which this takes) to f as one compact JSON line, its fields in
 * the order they were set; 0 or -1 out of memory. */
int report_json(FILE *f, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!s)
        return -1;
    fprintf(f, "%s\n", s);
    free(s);
    return 0;
}

/* ---- the chunk request -------------------------------------------------- */

/* The key of tokens under ns with the given context tokens. */
int chunk_req(const struct kv_namespace *ns, const int32_t *ctx,
              size_t n_ctx, const int32_t *tok, size_t n,
              struct kv_chunk_req *r, struct kv_err *e)
{
    memset(r, 0, sizeof *r);
    if (kv_ns_digest(ns, r->ns, e) < 0)
        return -1;
    kv_ctx_digest(ns->mask, ctx, n_ctx, r->ctx);
    kv_chunk_key(r->ns, r->ctx, tok, n, r->key);
    r->tokens = tok;
    r->n_tokens = n;
    return 0;
}

int load_tokens(const char *path, const char *opt, size_t lim,
                struct kv_tokens *t, struct kv_err *e)
{
    if (kv_tokens_load(path, lim, t, e) < 0)
        return -1;
    if (t->n > (size_t)INT32_MAX / 2) {
        kv_tokens_release(t);
        return kv_err_set(e, "%s: %zu tokens is too many", opt, t->n);
    }
    return 0;
}
