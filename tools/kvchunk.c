/* kvchunk - the position-independent chunk cache (see man 1 kvchunk).
 *
 * One program with subcommands: split, key, put, get, assemble, ls, stat,
 * evict, fsck, rm, pin, unpin, toy, slice, and sim (trace replay, gen and
 * from-split, at the end of this file).  Every computation is in lib/
 * (chunk, blob, store, rope, toy, sim, trace); this file parses options,
 * validates, calls, and writes once. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <pthread.h>
#include <unistd.h>
#include <argtable2.h>
#include <xxhash.h>
#include "core/kv.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"
#include "chunk/store.h"
#include "chunk/model.h"
#include "chunk/latent.h"
#include "chunk/rope.h"
#include "chunk/toy.h"
#include "sim/sim.h"

enum { EXIT_MISS = 3 };

/* ---- option groups ------------------------------------------------------ */

struct ns_args {
    struct arg_str *model_config, *model, *tokenizer, *lora, *salt, *dtype,
                   *shape, *rope, *theta, *rotary_dim, *scaling, *nope,
                   *chunk_context, *base_policy;
};

struct store_args {
    struct arg_str *store, *timeout;
};

struct common {
    struct arg_lit *help, *verbose, *quiet;
    struct arg_str *max_mem;
    struct arg_end *end;
};

struct table {
    void *v[80];
    int n;
};

static void add(struct table *t, void *a)
{
    t->v[t->n++] = a;
}

static void add_ns(struct table *t, struct ns_args *a, int with_shape)
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

static void add_store(struct table *t, struct store_args *a)
{
    add(t, a->store = arg_str0(NULL, "store", "SPEC", "dir:PATH, "
                               "redis://HOST:PORT[/DB] or redis-cluster://"
                               "HOST:PORT[,..] (default $KVCHUNK_STORE, else "
                               "dir:~/.cache/kvchunk)"));
    add(t, a->timeout = arg_str0(NULL, "timeout", "SEC", "Redis connect and "
                                 "I/O timeout (default 2)"));
}

/* The output options -f (when formats is given), -o and --force. */
struct out_args {
    struct arg_str *fmt, *out;
    struct arg_lit *force;
};

static void add_out(struct table *t, struct out_args *a, const char *formats)
{
    a->fmt = NULL;
    if (formats)
        add(t, a->fmt = arg_str0("f", "format", formats, "output format"));
    add(t, a->out = arg_str0("o", "output", "FILE", "write to FILE"));
    add(t, a->force = arg_lit0(NULL, "force", "binary to a terminal"));
}

static void add_common(struct table *t, struct common *c)
{
    add(t, c->verbose = arg_lit0("v", "verbose", "timings and counters on "
                                 "stderr"));
    add(t, c->quiet = arg_lit0("q", "quiet", "no progress line"));
    add(t, c->max_mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit "
                                 "(default 75% of RAM)"));
    add(t, c->help = arg_lit0("h", "help", "print this help and exit"));
    add(t, c->end = arg_end(20));
}

static const char *sval(struct arg_str *a)
{
    return a && a->count ? a->sval[0] : NULL;
}

/* Parse argv with the table; -1 to go on, else the exit status.  argv[0]
 * is the subcommand: from here on messages, --help and the "Try ...
 * --help" hint name it ("kvchunk get: ..."). */
static int parse(struct table *t, struct common *c, int argc, char **argv,
                 const char *synopsis)
{
    char name[96];
    snprintf(name, sizeof name, "%s %s", kv_progname(), argv[0]);
    kv_setprogname(name);
    return kv_arg_parse(t->v, argc, argv, c->help, NULL, c->end, synopsis,
                        "See man 1 kvchunk.");
}

static void free_table(struct table *t)
{
    arg_freetable(t->v, (size_t)t->n);
}

/* ---- option values ------------------------------------------------------ */

struct nsv {
    struct kv_namespace ns;
    int have_shape, have_dtype;
};

/* "8,8,128" -> L, H, D. */
static int parse_shape(const char *s, int64_t out[3], struct kv_err *e)
{
    int64_t *v = NULL;
    size_t n = 0;
    if (kv_parse_i64_list(s, "--shape", 1, 1 << 20, &v, &n, e) < 0)
        return -1;
    if (n != 3) {
        free(v);
        return kv_err_set(e, "--shape: expected L,HKV,D, got '%s'", s);
    }
    memcpy(out, v, 3 * sizeof *v);
    free(v);
    if (out[2] > 65536)
        return kv_err_set(e, "--shape: head dim %lld is larger than 65536",
                          (long long)out[2]);
    return 0;
}

/* Say with -v which option overrides the config file. */
static void note_override(int verbose, const struct ns_args *a,
                          const char *opt)
{
    if (verbose && sval(a->model_config))
        fprintf(stderr, "%s: %s overrides %s\n", kv_progname(), opt,
                sval(a->model_config));
}

/* An MLA model's config: latent chunks [L, T, kv_lora_rank + R], k_pe's
 * RoPE (chunk/latent.h). */
static int ns_from_latent(const char *path, struct nsv *v, int64_t shape[3],
                          struct kv_err *e)
{
    struct kv_latent L;
    if (kv_latent_load(path, 0, &L, e) < 0)
        return -1;
    v->ns.dtype = L.dtype;
    v->have_dtype = 1;
    shape[0] = L.n_layers;
    shape[1] = 1;
    shape[2] = L.kv_lora_rank + L.rope_dim;
    v->have_shape = 1;
    v->ns.rope = L.rope;
    v->ns.kv_lora_rank = L.kv_lora_rank;
    return 0;
}

/* The RoPE head dim of a namespace: k_pe's for latent chunks. */
static int ns_rope_dim(const struct kv_namespace *ns)
{
    return (int)(ns->head_dim - ns->kv_lora_rank);
}

/* The model config's geometry, dtype and RoPE into v (before the explicit
 * options, which override them). */
static int ns_from_config(const char *path, struct nsv *v, int64_t shape[3],
                          struct kv_err *e)
{
    struct kv_model m;
    if (kv_model_load(path, 0, &m, e) < 0)
        return -1;
    if (m.kv_lora_rank)
        return ns_from_latent(path, v, shape, e);
    if (m.have_dtype) {
        v->ns.dtype = m.dtype;
        v->have_dtype = 1;
    }
    shape[0] = m.n_layers;
    shape[1] = m.n_kv_heads;
    shape[2] = m.head_dim;
    v->have_shape = 1;
    v->ns.rope = m.rope;
    return 0;
}

/* The RoPE options over r (from a config, or the defaults). */
static int ns_rope(const struct ns_args *a, int verbose, struct kv_rope *r,
                   struct kv_err *e)
{
    if (sval(a->rope)) {
        note_override(verbose, a, "--rope");
        if (kv_rope_parse_style(sval(a->rope), &r->style, e) < 0)
            return -1;
    }
    if (sval(a->theta)) {
        double th;
        note_override(verbose, a, "--rope-theta");
        if (kv_parse_f64(sval(a->theta), "--rope-theta", &th, e) < 0)
            return -1;
        if (!(th > 1) || !isfinite(th))
            return kv_err_set(e, "--rope-theta: expected a number > 1, got "
                              "'%s'", sval(a->theta));
        r->theta = th;
    }
    if (sval(a->rotary_dim)) {
        int64_t rd;
        note_override(verbose, a, "--rotary-dim");
        if (kv_parse_i64(sval(a->rotary_dim), "--rotary-dim", 2, 65536, &rd,
                         e) < 0)
            return -1;
        if (rd % 2)
            return kv_err_set(e, "--rotary-dim: expected an even number, "
                              "got %lld", (long long)rd);
        r->rotary_dim = (int)rd;
    }
    if (sval(a->scaling)) {
        /* a scaling given here replaces the file's with all its parameters */
        struct kv_rope fresh;
        note_override(verbose, a, "--rope-scaling");
        kv_rope_init(&fresh, r->head_dim);
        fresh.style = r->style;
        fresh.theta = r->theta;
        fresh.rotary_dim = r->rotary_dim;
        fresh.n_nope = r->n_nope;
        memcpy(fresh.nope_layers, r->nope_layers, sizeof fresh.nope_layers);
        fresh.local_theta = r->local_theta;
        fresh.n_local = r->n_local;
        memcpy(fresh.local_layers, r->local_layers, sizeof fresh.local_layers);
        *r = fresh;
        if (kv_rope_parse_scaling(sval(a->scaling), r, e) < 0)
            return -1;
    }
    if (sval(a->nope) && kv_rope_parse_nope(sval(a->nope), r, e) < 0)
        return -1;
    return 0;
}

/* Turn the namespace options into v; usage errors in e (exit 2).  With
 * --model-config the file gives geometry, dtype and RoPE first. */
static int ns_values(const struct ns_args *a, int verbose, struct nsv *v,
                     struct kv_err *e)
{
    int64_t shape[3] = {0, 0, 0};
    memset(v, 0, sizeof *v);
    v->ns.model = sval(a->model);
    v->ns.tokenizer = sval(a->tokenizer);
    v->ns.lora = sval(a->lora);
    v->ns.salt = sval(a->salt);
    v->ns.dtype = KV_BF16;
    kv_rope_init(&v->ns.rope, 0);
    if (sval(a->model_config) &&
        ns_from_config(sval(a->model_config), v, shape, e) < 0)
        return -1;
    if (sval(a->dtype)) {
        note_override(verbose, a, "--dtype");
        if (kv_dtype_parse(sval(a->dtype), &v->ns.dtype, e) < 0)
            return kv_err_prefix(e, "--dtype");
        if (v->ns.dtype != KV_F16 && v->ns.dtype != KV_BF16 &&
            v->ns.dtype != KV_F32)
            return kv_err_set(e, "--dtype: expected f16, bf16 or f32, got "
                              "'%s'", sval(a->dtype));
        v->have_dtype = 1;
    }
    if (a->shape && sval(a->shape)) {
        note_override(verbose, a, "--shape");
        if (parse_shape(sval(a->shape), shape, e) < 0)
            return -1;
        v->have_shape = 1;
    }
    v->ns.n_layers = shape[0];
    v->ns.n_kv_heads = shape[1];
    v->ns.head_dim = shape[2];
    v->ns.rope.head_dim = ns_rope_dim(&v->ns);
    if (ns_rope(a, verbose, &v->ns.rope, e) < 0)
        return -1;
    /* a config's NoPE layers past a --shape that keeps fewer layers */
    while (!sval(a->nope) && v->ns.rope.n_nope > 0 &&
           v->ns.rope.nope_layers[v->ns.rope.n_nope - 1] >= v->ns.n_layers)
        v->ns.rope.n_nope--;
    while (v->ns.rope.n_local > 0 &&
           v->ns.rope.local_layers[v->ns.rope.n_local - 1] >= v->ns.n_layers)
        v->ns.rope.n_local--;
    v->ns.mask = KV_CTX_SYS;
    if (sval(a->chunk_context)) {
        if (!strcmp(sval(a->chunk_context), "sys"))
            v->ns.mask = KV_CTX_SYS;
        else if (!strcmp(sval(a->chunk_context), "none"))
            v->ns.mask = KV_CTX_NONE;
        else
            return kv_err_set(e, "--chunk-context: expected sys or none, "
                              "got '%s'", sval(a->chunk_context));
    }
    if (sval(a->base_policy) && kv_base_policy_parse(sval(a->base_policy),
                                                     &v->ns.base, e) < 0)
        return -1;
    return 0;
}

/* Check the RoPE description once the head dim is known. */
static int ns_finish(struct nsv *v, struct kv_err *e)
{
    if (v->ns.kv_lora_rank && (v->ns.n_kv_heads != 1 || v->ns.head_dim <= v->ns.kv_lora_rank))
        return kv_err_set(e, "--shape: a latent chunk is L,1,%lld + R",
                          (long long)v->ns.kv_lora_rank);
    v->ns.rope.head_dim = ns_rope_dim(&v->ns);
    if (v->ns.rope.n_nope > 0 &&
        v->ns.rope.nope_layers[v->ns.rope.n_nope - 1] >= v->ns.n_layers)
        return kv_err_set(e, "--nope-layers: layer %d, but the model has %lld "
                          "layers",
                          v->ns.rope.nope_layers[v->ns.rope.n_nope - 1],
                          (long long)v->ns.n_layers);
    if (v->ns.rope.rotary_dim > v->ns.head_dim)
        return kv_err_set(e, "--rotary-dim: %d is larger than the head dim "
                          "%lld", v->ns.rope.rotary_dim,
                          (long long)v->ns.head_dim);
    return kv_rope_check(&v->ns.rope, e);
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
static int store_is_redis(const struct store_args *a)
{
    char buf[4096];
    const char *spec = sval(a->store) ? sval(a->store)
                                      : default_store(buf, sizeof buf);
    return !strncmp(spec, "redis://", 8) || !strncmp(spec, "redis-cluster://", 16);
}

/* Store options -> an open store.  read_only: 1 for ls and stat, 0 for the
 * other readers and writers of an existing store, -1 for put, which
 * creates a missing dir: store.  rc: 2 usage, 1 failure. */
static int open_store(const struct store_args *a, int read_only,
                      int64_t ttl, int durable, struct kv_store **s)
{
    struct kv_store_opts o;
    struct kv_err e;
    char buf[4096];
    kv_store_opts_init(&o);
    o.read_only = read_only > 0;
    o.must_exist = read_only >= 0;      /* put (-1) alone creates a store */
    o.ttl = ttl;
    o.durable = durable;
    if (sval(a->timeout)) {
        double t;
        if (kv_parse_f64(sval(a->timeout), "--timeout", &t, &e) < 0)
            return kv_usage("%s", e.msg);
        if (!(t > 0 && t <= 3600))
            return kv_usage("--timeout: expected seconds in (0, 3600], got "
                            "'%s'", sval(a->timeout));
        o.timeout = t;
    }
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

static int max_mem(const struct common *c, size_t *out)
{
    struct kv_err e;
    if (kv_parse_max_mem(sval(c->max_mem), out, &e) < 0)
        return kv_usage("%s", e.msg);
    return 0;
}

/* Output format: -f text|npy (auto by terminal). */
static int out_format(struct arg_str *f, FILE *out, int force,
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

/* ---- the chunk request -------------------------------------------------- */

/* The key of tokens under ns with the given context tokens. */
static int chunk_req(const struct kv_namespace *ns, const int32_t *ctx,
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

static int load_tokens(const char *path, const char *opt, size_t lim,
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

/* ---- split -------------------------------------------------------------- */

struct prompt_args {
    struct arg_str *sep, *sep_ids;
    struct arg_lit *ids;
    struct arg_file *prompt;
};

static void add_prompt(struct table *t, struct prompt_args *p)
{
    add(t, p->sep = arg_str0(NULL, "sep", "S", "separator of text prompts "
                             "(default ##)"));
    add(t, p->ids = arg_lit0(NULL, "ids", "the prompt is token ids"));
    add(t, p->sep_ids = arg_str0(NULL, "sep-ids", "A,B,..",
                                 "separator token ids (with --ids)"));
    add(t, p->prompt = arg_file0(NULL, NULL, "PROMPT", "prompt file (default "
                                 "stdin)"));
}

/* Read and split the prompt. */
static int read_prompt(const struct prompt_args *p, size_t lim,
                       struct kv_split *sp, struct kv_err *e)
{
    const char *path = p->prompt->count ? p->prompt->filename[0] : "-";
    if (p->ids->count) {
        int64_t *sv = NULL;
        size_t ns = 0;
        struct kv_tokens t;
        memset(&t, 0, sizeof t);
        if (!sval(p->sep_ids))
            return kv_err_set(e, "--ids needs --sep-ids");
        if (kv_parse_i64_list(sval(p->sep_ids), "--sep-ids", INT32_MIN,
                              INT32_MAX, &sv, &ns, e) < 0)
            return -1;
        if (ns == 0) {
            free(sv);
            return kv_err_set(e, "--sep-ids: empty separator");
        }
        int32_t sep[64];
        if (ns > 64) {
            free(sv);
            return kv_err_set(e, "--sep-ids: at most 64 ids");
        }
        for (size_t i = 0; i < ns; i++)
            sep[i] = (int32_t)sv[i];
        free(sv);
        if (load_tokens(path, "PROMPT", lim, &t, e) < 0)
            return -1;
        int rc = kv_split_ids(t.ids, t.n, sep, ns, sp, e);
        kv_tokens_release(&t);
        return rc;
    }
    if (sval(p->sep_ids))
        return kv_err_set(e, "--sep-ids needs --ids");
    FILE *f = kv_open_in(path, e);
    if (!f)
        return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        kv_close_in(f);
        return kv_err_set(e, "out of memory");
    }
    for (;;) {
        if (n == cap) {
            if (cap >= lim) {
                free(buf);
                kv_close_in(f);
                return kv_err_set(e, "'%s' is larger than --max-mem",
                                  kv_path_name(path, 0));
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                kv_close_in(f);
                return kv_err_set(e, "out of memory");
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (!got)
            break;
    }
    int bad = ferror(f);
    kv_close_in(f);
    if (bad) {
        free(buf);
        return kv_err_set(e, "cannot read '%s'", kv_path_name(path, 0));
    }
    int rc = kv_split_text(buf, n, sval(p->sep) ? sval(p->sep) : "##", sp, e);
    free(buf);
    return rc;
}

/* The namespace of the system prompt: cached like a chunk that attended
 * to nothing. */
static struct kv_namespace sys_ns(const struct kv_namespace *ns)
{
    struct kv_namespace s = *ns;
    s.mask = KV_CTX_NONE;
    return s;
}

/* Keys of every segment but the question. */
static int segment_keys(const struct kv_namespace *ns,
                        const struct kv_split *sp, struct kv_chunk_req *req,
                        struct kv_err *e)
{
    struct kv_namespace sn = sys_ns(ns);
    const int32_t *sys = sp->tokens + sp->segs[0].offset;
    size_t n_sys = (size_t)sp->segs[0].length;
    for (size_t i = 0; i < sp->n_segs; i++) {
        const struct kv_segment *g = &sp->segs[i];
        const int32_t *tok = sp->tokens + g->offset;
        memset(&req[i], 0, sizeof req[i]);
        if (g->kind == KV_SEG_QUESTION)
            continue;
        if (chunk_req(g->kind == KV_SEG_SYS ? &sn : ns, sys, n_sys, tok,
                      (size_t)g->length, &req[i], e) < 0)
            return -1;
    }
    return 0;
}

/* Usage checks of the prompt options. */
static int prompt_usage(const struct prompt_args *p)
{
    if (p->ids->count && !sval(p->sep_ids))
        return kv_usage("--ids needs --sep-ids");
    if (!p->ids->count && sval(p->sep_ids))
        return kv_usage("--sep-ids needs --ids");
    if (sval(p->sep) && p->ids->count)
        return kv_usage("--sep is for text prompts; use --sep-ids with --ids");
    return 0;
}

static int cmd_split(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct prompt_args pa;
    struct common c;
    struct out_args oa;
    add_prompt(&t, &pa);
    add_ns(&t, &na, 1);
    add_out(&t, &oa, "text|npy");
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nSplit a prompt sys##chunk##..."
                   "##question into segments: KIND OFFSET LENGTH [KEY].\n"
                   "Keys are printed when --shape is given.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = prompt_usage(&pa)) != 0) {
        free_table(&t);
        return rc;
    }
    if (v.have_shape && ns_finish(&v, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    struct kv_split sp;
    memset(&sp, 0, sizeof sp);
    if (read_prompt(&pa, lim, &sp, &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    struct kv_chunk_req *req = calloc(sp.n_segs, sizeof *req);
    if (!req || (v.have_shape && segment_keys(&v.ns, &sp, req, &e) < 0)) {
        if (!req)
            kv_err_set(&e, "out of memory");
        free(req);
        kv_split_release(&sp);
        free_table(&t);
        return kv_fail_err(&e);
    }
    struct kv_out o;
    enum kv_format f;
    if (kv_out_open(&o, sval(oa.out), &e) < 0) {
        free(req);
        kv_split_release(&sp);
        free_table(&t);
        return kv_fail_err(&e);
    }
    if ((rc = out_format(oa.fmt, o.f, oa.force->count, &f)) != 0) {
        kv_out_abort(&o);
        free(req);
        kv_split_release(&sp);
        free_table(&t);
        return rc;
    }
    int bad = 0;
    if (f == KV_FMT_TEXT) {
        for (size_t i = 0; i < sp.n_segs; i++) {
            const struct kv_segment *g = &sp.segs[i];
            char hex[33];
            fprintf(o.f, "%s %lld %lld", kv_seg_kind_name(g->kind),
                    (long long)g->offset, (long long)g->length);
            if (v.have_shape && g->kind != KV_SEG_QUESTION) {
                kv_hex(req[i].key, hex);
                fprintf(o.f, " %s", hex);
            }
            fputc('\n', o.f);
        }
    } else {
        struct kv_tensor st;
        int64_t shape[2] = {(int64_t)sp.n_segs, 3};
        kv_tensor_init(&st);
        if (kv_tensor_alloc(&st, KV_I64, 2, shape, 0, &e) < 0) {
            bad = 1;
        } else {
            int64_t *d = st.data;
            for (size_t i = 0; i < sp.n_segs; i++) {
                d[3 * i] = sp.segs[i].kind;
                d[3 * i + 1] = sp.segs[i].offset;
                d[3 * i + 2] = sp.segs[i].length;
            }
            bad = kv_npy_write(o.f, &st, &e) < 0;
            kv_tensor_release(&st);
            if (!bad && v.have_shape) {
                int64_t ks[2] = {(int64_t)sp.n_segs, 16};
                if (kv_tensor_alloc(&st, KV_U8, 2, ks, 0, &e) < 0) {
                    bad = 1;
                } else {
                    for (size_t i = 0; i < sp.n_segs; i++)
                        memcpy((uint8_t *)st.data + 16 * i, req[i].key, 16);
                    bad = kv_npy_write(o.f, &st, &e) < 0;
                    kv_tensor_release(&st);
                }
            }
        }
    }
    free(req);
    kv_split_release(&sp);
    free_table(&t);
    if (bad) {
        kv_out_abort(&o);
        return kv_fail_err(&e);
    }
    if (o.path) {
        if (kv_out_commit(&o, &e) < 0)
            return kv_fail_err(&e);
        return 0;
    }
    return kv_close_stdout();
}

/* ---- key ---------------------------------------------------------------- */

struct tok_args {
    struct arg_str *tokens, *context;
};

static void add_tok(struct table *t, struct tok_args *a)
{
    add(t, a->tokens = arg_str0(NULL, "tokens", "FILE", "the chunk's token "
                                "ids (text or int .npy; - = stdin)"));
    add(t, a->context = arg_str0(NULL, "context", "FILE", "the sys tokens "
                                 "the chunk attended to (default none)"));
}

/* Standard input can be read once: at most one of the inputs may be "-"
 * (kv may be NULL for subcommands without --kv). */
static int stdin_once(const struct tok_args *a, struct arg_str *kv,
                      struct kv_err *e)
{
    const char *v[3] = {sval(a->tokens), sval(a->context),
                        kv ? sval(kv) : NULL};
    int n = 0;
    for (int i = 0; i < 3; i++)
        n += v[i] && !strcmp(v[i], "-");
    if (n > 1)
        return kv_err_set(e, "only one of --tokens, --context%s can be '-' "
                          "(standard input)", kv ? " and --kv" : "");
    return 0;
}

/* Load the chunk and context tokens. */
static int tok_values(const struct tok_args *a, size_t lim,
                      struct kv_tokens *tok, struct kv_tokens *ctx,
                      struct kv_err *e)
{
    memset(tok, 0, sizeof *tok);
    memset(ctx, 0, sizeof *ctx);
    if (load_tokens(sval(a->tokens), "--tokens", lim, tok, e) < 0)
        return -1;
    if (sval(a->context) && load_tokens(sval(a->context), "--context", lim,
                                        ctx, e) < 0) {
        kv_tokens_release(tok);
        return -1;
    }
    return 0;
}

static int cmd_key(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct tok_args ta;
    struct common c;
    struct arg_lit *explain;
    add_tok(&t, &ta);
    add_ns(&t, &na, 1);
    add(&t, explain = arg_lit0(NULL, "explain", "also print the namespace "
                               "text and the digests"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nPrint the content key of a chunk.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (!sval(ta.tokens) && kv_err_set(&e, "--tokens FILE is required") < 0)
        || stdin_once(&ta, NULL, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if ((rc = max_mem(&c, &lim)) != 0) {
        free_table(&t);
        return rc;
    }
    int do_explain = explain->count > 0, verbose = c.verbose->count > 0;
    struct kv_tokens tok, ctx;
    double t0 = kv_now();
    if (tok_values(&ta, lim, &tok, &ctx, &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    double t1 = kv_now();
    struct kv_chunk_req r;
    char *text = NULL;
    if (chunk_req(&v.ns, ctx.ids, ctx.n, tok.ids, tok.n, &r, &e) < 0 ||
        (do_explain && kv_ns_text(&v.ns, &text, &e) < 0)) {
        kv_tokens_release(&tok);
        kv_tokens_release(&ctx);
        free_table(&t);
        return kv_fail_err(&e);
    }
    double t2 = kv_now();
    char hex[33];
    if (do_explain) {
        kv_hex(r.ns, hex);
        printf("namespace:\n%sns_digest: %s\n", text, hex);
        kv_hex(r.ctx, hex);
        printf("ctx_digest: %s\ntokens: %zu\n", hex, tok.n);
        free(text);
    }
    kv_hex(r.key, hex);
    printf(do_explain ? "key: %s\n" : "%s\n", hex);
    if (verbose)
        kv_warn("%zu tokens: read %.3f s, hashed %.3f s (%.2f GB/s)", tok.n,
                t1 - t0, t2 - t1,
                t2 > t1 ? tok.n * 4.0 / (t2 - t1) / 1e9 : 0.0);
    kv_tokens_release(&tok);
    kv_tokens_release(&ctx);
    free_table(&t);
    return kv_close_stdout();
}

/* ---- put ---------------------------------------------------------------- */

/* The model as kvchunk understands it: from --model-config, explicit
 * options, or both. */
static int print_info(const struct ns_args *na, const struct nsv *v,
                      struct kv_err *e)
{
    struct kv_model m;
    uint8_t d[16];
    char rope[4096], hex[33];
    if (sval(na->model_config)) {
        if (kv_model_load(sval(na->model_config), 0, &m, e) < 0)
            return -1;
        printf("model_config: %s\nmodel_type: %s\nheads: %lld\n"
               "max_position_embeddings: %lld\nsliding_window: %lld\n",
               sval(na->model_config), m.model_type[0] ? m.model_type : "-",
               (long long)m.n_heads, (long long)m.max_pos,
               (long long)m.sliding_window);
    }
    if (kv_rope_describe(&v->ns.rope, rope, sizeof rope) < 0 ||
        kv_ns_digest(&v->ns, d, e) < 0)
        return kv_err_set(e, "cannot describe the namespace");
    kv_hex(d, hex);
    printf("layers: %lld\nkv_heads: %lld\nhead_dim: %lld\ndtype: %s\n"
           "rope: %s\nbytes_per_token: %lld\nns_digest: %s\n",
           (long long)v->ns.n_layers, (long long)v->ns.n_kv_heads,
           (long long)v->ns.head_dim, kv_dtype_name(v->ns.dtype), rope,
           (long long)((v->ns.kv_lora_rank ? 1 : 2) * v->ns.n_layers * v->ns.n_kv_heads *
                       v->ns.head_dim * (int64_t)kv_dtype_size(v->ns.dtype)),
           hex);
    return 0;
}

static int cmd_info(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct common c;
    add_ns(&t, &na, 1);
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nPrint what kvchunk understood of "
                   "the model: geometry, RoPE, bytes per token, namespace.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape &&
         kv_err_set(&e, "--model-config FILE or --shape L,HKV,D is required")
             < 0) ||
        ns_finish(&v, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    rc = print_info(&na, &v, &e);
    free_table(&t);
    return rc < 0 ? kv_fail_err(&e) : kv_close_stdout();
}

/* A latent chunk's [L, T, Dl + R], checked against the tokens and the
 * namespace (which an MLA --model-config fixed). */
static int put_load_latent(const char *name, size_t n_tok, const struct nsv *v,
                           const struct kv_tensor *x, struct kv_err *e)
{
    char sh[128];
    if (x->ndim != 3 || x->shape[1] != (int64_t)n_tok || x->shape[0] != v->ns.n_layers ||
        x->shape[2] != v->ns.head_dim)
        return kv_err_set(e, "'%s': expected a latent chunk [L, T, Dl + R] = [%lld, %zu, "
                          "%lld], found %s", name, (long long)v->ns.n_layers, n_tok,
                          (long long)v->ns.head_dim,
                          kv_shape_str(x->ndim, x->shape, sh, sizeof sh));
    if (x->dtype != v->ns.dtype)
        return kv_err_set(e, "'%s' is %s, the namespace says %s", name,
                          kv_dtype_name(x->dtype), kv_dtype_name(v->ns.dtype));
    return 0;
}

/* Load the chunk's KV and check it against the tokens and the namespace
 * options; the namespace takes its geometry and dtype.  0 or -1 with e. */
static int put_load(const char *kvpath, size_t lim, size_t n_tok,
                    struct nsv *v, struct kv_tensor *x, struct kv_err *e)
{
    const char *name = kv_path_name(kvpath, 0);
    char sh[128];
    if (kv_npy_load(kvpath, lim, x, e) < 0)
        return -1;
    if (v->ns.kv_lora_rank)
        return put_load_latent(name, n_tok, v, x, e);
    if (x->ndim != 5 || x->shape[1] != 2 || x->shape[2] != (int64_t)n_tok)
        return kv_err_set(e, "'%s': expected KV [L, 2, %zu, HKV, D], found %s",
                          name, n_tok,
                          kv_shape_str(x->ndim, x->shape, sh, sizeof sh));
    if (x->dtype != KV_F16 && x->dtype != KV_BF16 && x->dtype != KV_F32)
        return kv_err_set(e, "'%s': KV must be f16, bf16 or f32, found %s",
                          name, kv_dtype_name(x->dtype));
    if (v->have_dtype && x->dtype != v->ns.dtype)
        return kv_err_set(e, "'%s' is %s, --dtype says %s", name,
                          kv_dtype_name(x->dtype), kv_dtype_name(v->ns.dtype));
    if (v->have_shape && (x->shape[0] != v->ns.n_layers ||
                          x->shape[3] != v->ns.n_kv_heads ||
                          x->shape[4] != v->ns.head_dim))
        return kv_err_set(e, "'%s' has shape %s, --shape says %lld,%lld,%lld",
                          name, kv_shape_str(x->ndim, x->shape, sh, sizeof sh),
                          (long long)v->ns.n_layers, (long long)v->ns.n_kv_heads,
                          (long long)v->ns.head_dim);
    if (x->shape[0] < 1 || x->shape[3] < 1 || x->shape[4] < 1 ||
        x->shape[0] > (1 << 20) || x->shape[3] > (1 << 20) ||
        x->shape[4] > 65536)
        return kv_err_set(e, "'%s': bad KV shape %s", name,
                          kv_shape_str(x->ndim, x->shape, sh, sizeof sh));
    v->ns.dtype = x->dtype;
    v->ns.n_layers = x->shape[0];
    v->ns.n_kv_heads = x->shape[3];
    v->ns.head_dim = x->shape[4];
    return 0;
}

/* Is p0 where the base policy wants a chunk of n_tok tokens after n_ctx
 * context tokens?  0 or the usage exit code, said. */
static int put_position(const struct nsv *v, int64_t p0, size_t n_ctx,
                        size_t n_tok, int have_context)
{
    int64_t want = kv_base_pos_for(&v->ns, (int64_t)n_ctx);
    if (want >= 0 && p0 != want) {
        int after = v->ns.base == KV_BASE_CONTEXT && v->ns.mask == KV_CTX_SYS;
        return kv_usage("--base-pos %lld: with --base-policy %s%s the chunk "
                        "must be computed at %lld%s", (long long)p0,
                        kv_base_policy_name(v->ns.base),
                        after ? " (after the context tokens)" : "",
                        (long long)want, after && !have_context ?
                        "; no --context was given: name the system prompt "
                        "the chunk attended to" : "");
    }
    if (p0 + (int64_t)n_tok > INT32_MAX)
        return kv_usage("--base-pos %lld: the chunk would end past position "
                        "2^31", (long long)p0);
    return 0;
}

/* Is key still in s (after put --max-size evicted)?  1, 0, or -1. */
struct find_key {
    const uint8_t *key;
    int found;
};

static int find_key_cb(void *ctx, const struct kv_store_entry *en)
{
    struct find_key *f = ctx;
    if (!memcmp(en->key, f->key, 16))
        f->found = 1;
    return 0;
}

static int still_stored(struct kv_store *s, const uint8_t key[16],
                        struct kv_err *e)
{
    struct find_key f = {key, 0};
    if (kv_store_ls(s, find_key_cb, &f, e) < 0)
        return -1;
    return f.found;
}

/* The blob's metadata and header for the chunk's KV x computed at p0. */
static int put_blob(const struct nsv *v, const struct kv_tokens *ctx,
                    const struct kv_tokens *tok, const struct kv_tensor *x,
                    int64_t p0, struct kv_blob_meta *m, uint8_t **hdr,
                    struct kv_err *e)
{
    struct kv_chunk_req r;
    char rd[4096];
    XXH128_canonical_t cr;
    struct timespec ts;
    if (chunk_req(&v->ns, ctx->ids, ctx->n, tok->ids, tok->n, &r, e) < 0)
        return -1;
    memset(m, 0, sizeof *m);
    memcpy(m->key, r.key, 16);
    memcpy(m->ns, r.ns, 16);
    memcpy(m->ctx, r.ctx, 16);
    int n = kv_rope_describe(&v->ns.rope, rd, sizeof rd);
    XXH128_canonicalFromHash(&cr, XXH3_128bits(rd, n > 0 ? (size_t)n : 0));
    memcpy(m->rope, cr.digest, 16);
    m->n_tokens = (uint32_t)tok->n;
    m->n_layers = (uint32_t)x->shape[0];
    m->n_kv_heads = (uint32_t)(v->ns.kv_lora_rank ? 1 : x->shape[3]);
    m->head_dim = (uint32_t)x->shape[x->ndim - 1];
    m->dtype = x->dtype;
    m->layout = v->ns.kv_lora_rank ? KV_BLOB_LAYOUT_LATENT : KV_BLOB_LAYOUT_KV;
    m->base_pos = (int32_t)p0;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    snprintf(m->producer, sizeof m->producer, "kvchunk %s", KV_VERSION);
    m->payload_xxh3 = kv_blob_checksum(x->data, x->nbytes);
    if (kv_blob_header(m, tok->ids, hdr, e) < 0)
        return -1;
    if (m->payload_len != x->nbytes)
        return kv_err_set(e, "internal: payload size mismatch");
    return 0;
}

static int cmd_put(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct tok_args ta;
    struct store_args sa;
    struct common c;
    struct arg_str *kv, *base, *ttl, *maxsize;
    struct arg_lit *pin, *durable;
    add_tok(&t, &ta);
    add(&t, kv = arg_str0(NULL, "kv", "FILE", "the chunk's KV [L, 2, T, HKV, "
                          "D] .npy (- = stdin)"));
    add(&t, base = arg_str0(NULL, "base-pos", "P0", "position of the chunk's "
                            "first token when the KV was computed"));
    add_ns(&t, &na, 1);
    add_store(&t, &sa);
    add(&t, ttl = arg_str0(NULL, "ttl", "SEC", "Redis expiry (default none)"));
    add(&t, pin = arg_lit0(NULL, "pin", "never evict this entry"));
    add(&t, durable = arg_lit0(NULL, "durable", "also fsync directories"));
    add(&t, maxsize = arg_str0(NULL, "max-size", "SIZE", "evict down to this "
                               "size after storing"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nStore a chunk's KV under its "
                   "content key; prints KEY stored|present.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim, max_size = 0;
    int64_t p0 = -1, ttl_s = 0;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!sval(ta.tokens) && kv_err_set(&e, "--tokens FILE is required") < 0)
        || (!sval(kv) && kv_err_set(&e, "--kv FILE is required") < 0) ||
        stdin_once(&ta, kv, &e) < 0 ||
        (!sval(base) && kv_err_set(&e, "--base-pos P0 is required") < 0) ||
        kv_parse_i64(sval(base), "--base-pos", 0, INT32_MAX, &p0, &e) < 0 ||
        (sval(ttl) && kv_parse_i64(sval(ttl), "--ttl", 1, INT32_MAX, &ttl_s,
                                   &e) < 0) ||
        (sval(maxsize) && kv_parse_size(sval(maxsize), &max_size, &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if ((rc = max_mem(&c, &lim)) != 0) {
        free_table(&t);
        return rc;
    }
    int do_pin = pin->count > 0;
    struct kv_tokens tok, ctx;
    struct kv_tensor x;
    kv_tensor_init(&x);
    if (tok_values(&ta, lim, &tok, &ctx, &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    struct kv_store *s = NULL;
    uint8_t *hdr = NULL;
    struct kv_blob_meta m;
    double t0 = 0;
    if (put_load(sval(kv), lim, tok.n, &v, &x, &e) < 0)
        goto fail;
    if (ns_finish(&v, &e) < 0) {
        kv_fail_err(&e);
        rc = 2;
        goto out;
    }
    if ((rc = put_position(&v, p0, ctx.n, tok.n, sval(ta.context) != NULL)))
        goto out;
    t0 = kv_now();
    if (put_blob(&v, &ctx, &tok, &x, p0, &m, &hdr, &e) < 0)
        goto fail;
    /* options of one kind of store only, refused before anything is made */
    if (store_is_redis(&sa) && (do_pin || max_size)) {
        rc = kv_usage("%s is for dir: stores; a Redis server evicts by its "
                      "own maxmemory-policy", do_pin ? "--pin" : "--max-size");
        goto out;
    }
    if (!store_is_redis(&sa) && ttl_s) {
        rc = kv_usage("--ttl is for redis:// and redis-cluster:// stores; a "
                      "dir: store keeps an entry until evict or rm removes "
                      "it (put --max-size bounds it)");
        goto out;
    }
    if ((rc = open_store(&sa, -1, ttl_s, durable->count > 0, &s)) != 0)
        goto out;
    int existed = 0, found;
    struct kv_evict_report er;
    if (kv_store_put(s, &m, hdr, x.data, &existed, &e) < 0 ||
        (do_pin && kv_store_pin(s, m.key, 1, &found, &e) < 0) ||
        (max_size && kv_store_evict(s, max_size, 0.9, &er, &e) < 0))
        goto fail;
    char hex[33];
    kv_hex(m.key, hex);
    int kept = 1;
    if (max_size && er.removed && (kept = still_stored(s, m.key, &e)) < 0)
        goto fail;
    if (!kept)
        kv_warn("%s: evicted at once: it is larger than what --max-size "
                "leaves room for", hex);
    printf("%s %s\n", hex, !kept ? "evicted" : existed ? "present" : "stored");
    if (c.verbose->count)
        kv_warn("%s: %llu bytes in %.3f s", hex,
                (unsigned long long)(m.header_len + m.payload_len),
                kv_now() - t0);
    rc = kv_close_stdout();
    goto out;
fail:
    rc = kv_fail_err(&e);
out:
    free(hdr);
    kv_store_close(s);
    kv_tensor_release(&x);
    kv_tokens_release(&tok);
    kv_tokens_release(&ctx);
    free_table(&t);
    return rc;
}

/* ---- get ---------------------------------------------------------------- */

/* Move a hit by delta into dst, whose token axis has T rows with the chunk
 * at off: K and V [L, 2, T, Hkv, D], or a latent [L, T, D] whose c_kv is
 * copied and k_pe rotated (rope's head dim is k_pe's). */
static int move_hit(const struct kv_rope *rope, const struct kv_blob_meta *m,
                    const void *src, int64_t delta, void *dst, int64_t T,
                    int64_t off, struct kv_err *e)
{
    if (m->layout == KV_BLOB_LAYOUT_LATENT) {
        struct kv_latent_chunk c = {m->n_layers, m->n_tokens,
                                    (int64_t)m->head_dim - rope->head_dim,
                                    rope->head_dim, m->dtype};
        return kv_latent_move(rope, &c, delta, src, dst, T, off, e);
    }
    struct kv_rope_chunk ch = {m->n_layers, m->n_tokens, m->n_kv_heads,
                               m->head_dim, m->dtype};
    return kv_rope_move_kv(rope, &ch, delta, src, dst, T, off, e);
}

/* A latent hit moved to at, written as one .npy [L, T, D] or as text. */
static int write_latent(FILE *f, const struct kv_rope *rope,
                        const struct kv_blob_ref *ref, int64_t at, int text,
                        struct kv_err *e)
{
    struct kv_tensor x;
    int64_t shape[3] = {ref->meta.n_layers, ref->meta.n_tokens, ref->meta.head_dim};
    kv_tensor_init(&x);
    int bad = kv_tensor_alloc(&x, ref->meta.dtype, 3, shape, 0, e) < 0 ||
              move_hit(rope, &ref->meta, ref->payload, at - ref->meta.base_pos, x.data,
                       ref->meta.n_tokens, 0, e) < 0 ||
              (text ? kv_text_write(f, &x, e) : kv_npy_write(f, &x, e)) < 0;
    kv_tensor_release(&x);
    return bad ? -1 : 0;
}

/* Write the hit, moved to position at, as one .npy: the header, then per
 * layer the K slab rotated through a small buffer and the V slab copied
 * straight from the blob. */
static int write_moved(FILE *f, const struct kv_rope *rope,
                       const struct kv_blob_ref *ref, int64_t at,
                       struct kv_err *e)
{
    const struct kv_blob_meta *m = &ref->meta;
    if (m->layout == KV_BLOB_LAYOUT_LATENT)
        return write_latent(f, rope, ref, at, 0, e);
    int64_t shape[5] = {m->n_layers, 2, m->n_tokens, m->n_kv_heads,
                        m->head_dim};
    size_t es = kv_dtype_size(m->dtype);
    size_t vec = (size_t)m->n_kv_heads * m->head_dim * es;
    size_t n_vecs = (size_t)m->n_tokens * m->n_kv_heads;
    size_t slab = vec / m->n_kv_heads * n_vecs;
    struct kv_rope_delta d, dl;
    struct kv_rope local;
    memset(&dl, 0, sizeof dl);
    if (kv_rope_delta_init(&d, rope, at - m->base_pos, e) < 0)
        return -1;
    kv_rope_local(rope, &local);
    if ((rope->n_local &&
         kv_rope_delta_init(&dl, &local, at - m->base_pos, e) < 0) ||
        kv_npy_write_header(f, m->dtype, 5, shape, e) < 0) {
        kv_rope_delta_release(&d);
        kv_rope_delta_release(&dl);
        return -1;
    }
    size_t hvec = (size_t)m->head_dim * es;
    size_t per = (1u << 20) / hvec;
    if (per == 0)
        per = 1;
    int turns = !d.identity || (rope->n_local && !dl.identity);
    void *buf = turns ? malloc(per * hvec) : NULL;
    if (turns && !buf) {
        kv_rope_delta_release(&d);
        kv_rope_delta_release(&dl);
        return kv_err_set(e, "out of memory");
    }
    int rc = 0;
    for (uint32_t l = 0; l < m->n_layers && rc == 0; l++) {
        const uint8_t *k = ref->payload + (size_t)2 * l * slab;
        /* a local layer turns with its own RoPE */
        const struct kv_rope_delta *dd = kv_rope_layer_is_local(rope, l) ? &dl
                                                                         : &d;
        if (dd->identity || kv_rope_layer_is_nope(rope, l)) {
            rc = kv_write_all(f, k, slab, e);
        } else {
            for (size_t i = 0; i < n_vecs && rc == 0; i += per) {
                size_t nv = n_vecs - i < per ? n_vecs - i : per;
                kv_rope_rotate(dd, m->dtype, k + i * hvec, buf, nv);
                rc = kv_write_all(f, buf, nv * hvec, e);
            }
        }
        if (rc == 0)
            rc = kv_write_all(f, k + slab, slab, e);
    }
    free(buf);
    kv_rope_delta_release(&d);
    kv_rope_delta_release(&dl);
    return rc;
}

static const char *status_name(int st)
{
    switch (st) {
    case KV_GET_HIT: return "hit";
    case KV_GET_COLLISION: return "collision";
    case KV_GET_CORRUPT: return "corrupt";
    default: return "absent";
    }
}

/* Is the get a usable hit?  Otherwise say why it is a miss (exit 3): not
 * stored (with what the key covered: the usual reasons for an unexpected
 * miss are another dtype or a missing --context), rejected, or of another
 * shape. */
static int get_hit(const struct nsv *v, int st, const struct kv_err *why,
                   const struct kv_blob_ref *ref, const char *hex,
                   size_t n_tok, size_t n_ctx)
{
    if (st == KV_GET_ABSENT) {
        kv_warn("miss: %s is not in the store (%zu tokens, %zu context "
                "tokens, %s KV; 'kvchunk key --explain' shows the rest)",
                hex, n_tok, v->ns.mask == KV_CTX_NONE ? (size_t)0 : n_ctx,
                kv_dtype_name(v->ns.dtype));
        return EXIT_MISS;
    }
    if (st != KV_GET_HIT) {
        kv_warn("miss: %s: %s (%s)", hex, status_name(st), why->msg);
        return EXIT_MISS;
    }
    if (ref->meta.n_layers != v->ns.n_layers ||
        ref->meta.n_kv_heads != v->ns.n_kv_heads ||
        ref->meta.head_dim != v->ns.head_dim ||
        ref->meta.dtype != v->ns.dtype) {
        kv_warn("miss: %s: stored shape differs from --shape", hex);
        return EXIT_MISS;
    }
    return 0;
}

/* A hit's KV moved to pos, as text. */
static int write_moved_text(FILE *f, const struct kv_rope *rope,
                            const struct kv_blob_ref *ref, int64_t pos,
                            size_t lim, struct kv_err *e)
{
    struct kv_tensor x;
    if (ref->meta.layout == KV_BLOB_LAYOUT_LATENT)
        return write_latent(f, rope, ref, pos, 1, e);
    int64_t shape[5] = {ref->meta.n_layers, 2, ref->meta.n_tokens,
                        ref->meta.n_kv_heads, ref->meta.head_dim};
    struct kv_rope_chunk ch = {ref->meta.n_layers, ref->meta.n_tokens,
                               ref->meta.n_kv_heads, ref->meta.head_dim,
                               ref->meta.dtype};
    kv_tensor_init(&x);
    int bad = kv_tensor_alloc(&x, ref->meta.dtype, 5, shape, lim, e) < 0 ||
              kv_rope_move_kv(rope, &ch, pos - ref->meta.base_pos,
                              ref->payload, x.data, ref->meta.n_tokens, 0,
                              e) < 0 ||
              kv_text_write(f, &x, e) < 0;
    kv_tensor_release(&x);
    return bad ? -1 : 0;
}

static int cmd_get(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct tok_args ta;
    struct store_args sa;
    struct common c;
    struct arg_str *at;
    struct out_args oa;
    add_tok(&t, &ta);
    add(&t, at = arg_str0(NULL, "at", "POS", "position of the chunk's first "
                          "token in the new prompt"));
    add_ns(&t, &na, 1);
    add_store(&t, &sa);
    add_out(&t, &oa, "npy|text");
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nWrite a cached chunk's KV moved to "
                   "--at; exit 3 on a miss.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    int64_t pos;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (!sval(ta.tokens) && kv_err_set(&e, "--tokens FILE is required") < 0)
        || stdin_once(&ta, NULL, &e) < 0 ||
        (!sval(at) && kv_err_set(&e, "--at POS is required") < 0) ||
        kv_parse_i64(sval(at), "--at", 0, INT32_MAX, &pos, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if ((rc = max_mem(&c, &lim)) != 0) {
        free_table(&t);
        return rc;
    }
    int verbose = c.verbose->count > 0;
    double t0 = kv_now();
    struct kv_tokens tok, ctx;
    struct kv_store *s = NULL;
    struct kv_blob_ref ref;
    struct kv_out o;
    memset(&ref, 0, sizeof ref);
    memset(&o, 0, sizeof o);
    if (tok_values(&ta, lim, &tok, &ctx, &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    struct kv_chunk_req r;
    int st;
    struct kv_err why;
    enum kv_format f;
    rc = 1;
    if (chunk_req(&v.ns, ctx.ids, ctx.n, tok.ids, tok.n, &r, &e) < 0)
        goto fail;
    if (pos + (int64_t)tok.n > INT32_MAX) {
        kv_usage("--at %lld: the chunk would end past position 2^31",
                 (long long)pos);
        rc = 2;
        goto out;
    }
    if ((rc = open_store(&sa, 0, 0, 0, &s)) != 0)
        goto out;
    rc = 1;
    if (kv_store_get(s, &r, 1, &ref, &st, &why, &e) < 0)
        goto fail;
    double t1 = kv_now();
    char hex[33];
    kv_hex(r.key, hex);
    if ((rc = get_hit(&v, st, &why, &ref, hex, tok.n, ctx.n)) != 0)
        goto out;
    if (kv_rope_can_move(&v.ns.rope, ref.meta.base_pos, pos, (int64_t)tok.n,
                         0, &e) < 0)
        goto fail;
    if (kv_out_open(&o, sval(oa.out), &e) < 0)
        goto fail;
    if ((rc = out_format(oa.fmt, o.f, oa.force->count, &f)) != 0) {
        kv_out_abort(&o);
        goto out;
    }
    rc = 1;
    if (f == KV_FMT_NPY) {
        if (write_moved(o.f, &v.ns.rope, &ref, pos, &e) < 0) {
            kv_out_abort(&o);
            goto fail;
        }
    } else if (write_moved_text(o.f, &v.ns.rope, &ref, pos, lim, &e) < 0) {
        kv_out_abort(&o);
        goto fail;
    }
    if (verbose)
        kv_warn("%s: hit, base %d -> %lld, read+verify %.3f s, move+write "
                "%.3f s", hex, ref.meta.base_pos, (long long)pos, t1 - t0,
                kv_now() - t1);
    if (o.path) {
        rc = kv_out_commit(&o, &e) < 0 ? kv_fail_err(&e) : 0;
        goto out;
    }
    rc = kv_close_stdout();
    goto out;
fail:
    rc = kv_fail_err(&e);
out:
    kv_blob_ref_release(&ref);
    kv_store_close(s);
    kv_tokens_release(&tok);
    kv_tokens_release(&ctx);
    free_table(&t);
    return rc;
}

/* ---- assemble ----------------------------------------------------------- */

struct move_job {
    const struct kv_rope *rope;
    const struct kv_split *sp;
    const struct kv_blob_ref *refs;
    const int *status;
    void *dst;
    int64_t T;
    size_t first;          /* segment index of job index 0 */
    struct kv_err err;
    int failed;
};

static void move_one(void *ctx, size_t k)
{
    struct move_job *j = ctx;
    size_t i = j->first + k;
    if (j->status[i] != KV_GET_HIT)
        return;
    const struct kv_blob_meta *m = &j->refs[i].meta;
    const struct kv_segment *g = &j->sp->segs[i];
    struct kv_err e;
    if (move_hit(j->rope, m, j->refs[i].payload, g->offset - m->base_pos, j->dst,
                 j->T, g->offset, &e) < 0) {
        j->failed = 1;
        j->err = e;
    }
}

/* Look the segments up in batches, so that a prompt of many chunks holds
 * few blobs (open files, Redis replies) at a time; every hit is checked
 * against the shape and the RoPE, moved into kvt (when given) and let go.
 * base[i] receives each hit's base position.  0 or -1 with e. */
static int assemble_fetch(struct kv_store *s, const struct nsv *v,
                          const struct kv_split *sp, struct kv_chunk_req *req,
                          struct kv_blob_ref *refs, int *status,
                          struct kv_err *why, int32_t *base,
                          struct kv_tensor *kvt, size_t n_look, int64_t nj,
                          struct kv_err *e)
{
    enum { BATCH = 64 };
    for (size_t b0 = 0; b0 < n_look; b0 += BATCH) {
        size_t nb = n_look - b0 < BATCH ? n_look - b0 : BATCH;
        if (kv_store_get(s, req + b0, nb, refs + b0, status + b0, why + b0,
                         e) < 0)
            return -1;
        for (size_t i = b0; i < b0 + nb; i++) {
            if (status[i] != KV_GET_HIT)
                continue;
            const struct kv_blob_meta *m = &refs[i].meta;
            if (m->n_layers != v->ns.n_layers ||
                m->n_kv_heads != v->ns.n_kv_heads ||
                m->head_dim != v->ns.head_dim || m->dtype != v->ns.dtype) {
                status[i] = KV_GET_COLLISION;
                kv_err_set(&why[i], "stored shape differs from --shape");
                kv_blob_ref_release(&refs[i]);
                continue;
            }
            if (kv_rope_can_move(&v->ns.rope, m->base_pos, sp->segs[i].offset,
                                 sp->segs[i].length, (int64_t)sp->n_tokens,
                                 e) < 0)
                return -1;
            base[i] = m->base_pos;
        }
        if (kvt) {
            struct move_job job;
            memset(&job, 0, sizeof job);
            job.rope = &v->ns.rope;
            job.sp = sp;
            job.refs = refs;
            job.status = status;
            job.dst = kvt->data;
            job.T = (int64_t)sp->n_tokens;
            job.first = b0;
            kv_parallel_for(nb, (int)nj, move_one, &job);
            if (job.failed) {
                *e = job.err;
                return -1;
            }
        }
        for (size_t i = b0; i < b0 + nb; i++)
            kv_blob_ref_release(&refs[i]);
    }
    return 0;
}

/* One assemble run: the prompt's segments, their lookups and the tensor. */
struct asm_run {
    struct kv_split sp;
    size_t n;                   /* segments; the question is the last */
    struct kv_chunk_req *req;
    struct kv_blob_ref *refs;
    int *status;
    struct kv_err *why;
    int32_t *base;              /* each hit's base position */
    int64_t *miss, n_miss;      /* [n_miss, 4]: segment, offset, length, base */
    struct kv_tensor kvt;
    struct kv_store *s;
    double t0, t1;              /* start, lookups done (for -v) */
};

/* Free what an assemble run holds. */
static void asm_release(struct asm_run *r)
{
    for (size_t i = 0; r->refs && i < r->n; i++)
        kv_blob_ref_release(&r->refs[i]);
    free(r->refs);
    free(r->base);
    free(r->req);
    free(r->status);
    free(r->why);
    free(r->miss);
    kv_tensor_release(&r->kvt);
    kv_split_release(&r->sp);
    kv_store_close(r->s);
}

/* Read the prompt, key its segments and look every one but the question up,
 * each hit moved into r->kvt when want_kv.  0, -1 with e, or the exit code
 * of a store that did not open. */
static int assemble_lookup(const struct prompt_args *pa,
                           const struct store_args *sa, const struct nsv *v,
                           size_t lim, int64_t nj, int want_kv,
                           struct asm_run *r, struct kv_err *e)
{
    size_t need, n;
    int rc;
    if (read_prompt(pa, lim, &r->sp, e) < 0)
        return -1;
    n = r->n = r->sp.n_segs;
    r->req = calloc(n, sizeof *r->req);
    r->refs = calloc(n, sizeof *r->refs);
    r->status = calloc(n, sizeof *r->status);
    r->why = calloc(n, sizeof *r->why);
    if (!r->req || !r->refs || !r->status || !r->why)
        return kv_err_set(e, "out of memory");
    if (segment_keys(&v->ns, &r->sp, r->req, e) < 0)
        return -1;
    int64_t shape[5] = {v->ns.n_layers, 2, (int64_t)r->sp.n_tokens,
                        v->ns.n_kv_heads, v->ns.head_dim};
    int nd = 5;
    if (v->ns.kv_lora_rank) {   /* latent [L, T, D] */
        int64_t lat[3] = {v->ns.n_layers, (int64_t)r->sp.n_tokens, v->ns.head_dim};
        memcpy(shape, lat, sizeof lat);
        nd = 3;
    }
    if (kv_shape_check(nd, shape, v->ns.dtype, lim, &need, e) < 0)
        return -1;
    if (!(r->base = calloc(n, sizeof *r->base)))
        return kv_err_set(e, "out of memory");
    if (want_kv && kv_tensor_alloc(&r->kvt, v->ns.dtype, nd, shape, lim, e) < 0)
        return -1;
    if ((rc = open_store(sa, 0, 0, 0, &r->s)) != 0)
        return rc;
    r->status[n - 1] = KV_GET_ABSENT;
    /* in batches, so that a prompt of many chunks holds few blobs (open
     * files, Redis replies) at a time; every hit is checked, moved into
     * the tensor and let go */
    rc = assemble_fetch(r->s, v, &r->sp, r->req, r->refs, r->status, r->why,
                        r->base, want_kv ? &r->kvt : NULL, n - 1, nj, e);
    r->t1 = kv_now();
    if (rc < 0)
        return -1;
    for (size_t i = 0; i + 1 < n; i++)
        if (r->status[i] == KV_GET_COLLISION || r->status[i] == KV_GET_CORRUPT)
            kv_warn("miss: segment %zu: %s (%s)", i,
                    status_name(r->status[i]), r->why[i].msg);
    return 0;
}

/* The misses, each with the position its KV must be computed at. */
static int assemble_misses(const struct nsv *v, struct asm_run *r,
                           struct kv_err *e)
{
    int64_t ctx_len = r->sp.segs[0].length, mi = 0;
    r->n_miss = 0;
    for (size_t i = 0; i < r->n; i++)
        r->n_miss += r->status[i] != KV_GET_HIT;
    r->miss = calloc((size_t)r->n_miss * 4 + 1, sizeof *r->miss);
    if (!r->miss)
        return kv_err_set(e, "out of memory");
    for (size_t i = 0; i < r->n; i++) {
        const struct kv_segment *g = &r->sp.segs[i];
        int64_t basep;
        if (r->status[i] == KV_GET_HIT)
            continue;
        if (g->kind == KV_SEG_SYS)
            basep = 0;
        else if (g->kind == KV_SEG_QUESTION)
            basep = g->offset;
        else {
            basep = kv_base_pos_for(&v->ns, ctx_len);
            if (basep < 0)
                basep = g->offset;
        }
        r->miss[4 * mi] = (int64_t)i;
        r->miss[4 * mi + 1] = g->offset;
        r->miss[4 * mi + 2] = g->length;
        r->miss[4 * mi + 3] = basep;
        mi++;
    }
    return 0;
}

/* The plan as text: KIND OFFSET LENGTH KEY|- hit|miss BASE. */
static void assemble_plan(FILE *pf, const struct asm_run *r)
{
    int64_t mi = 0;
    for (size_t i = 0; i < r->n; i++) {
        const struct kv_segment *g = &r->sp.segs[i];
        char hex[33] = "-";
        if (g->kind != KV_SEG_QUESTION)
            kv_hex(r->req[i].key, hex);
        fprintf(pf, "%s %lld %lld %s", kv_seg_kind_name(g->kind),
                (long long)g->offset, (long long)g->length, hex);
        if (r->status[i] == KV_GET_HIT)
            fprintf(pf, " hit %d\n", r->base[i]);
        else
            fprintf(pf, " miss %lld\n", (long long)r->miss[4 * mi++ + 3]);
    }
}

/* The KV tensor, then (unless kv_only) the segments and the misses. */
static int assemble_npy(FILE *f, const struct asm_run *r, int kv_only,
                        struct kv_err *e)
{
    struct kv_tensor segt, mt;
    int64_t ss[2] = {(int64_t)r->n, 3}, ms[2] = {r->n_miss, 4};
    kv_tensor_init(&segt);
    kv_tensor_init(&mt);
    int bad = kv_tensor_alloc(&segt, KV_I64, 2, ss, 0, e) < 0 ||
              kv_tensor_alloc(&mt, KV_I64, 2, ms, 0, e) < 0;
    if (!bad) {
        int64_t *d = segt.data;
        for (size_t i = 0; i < r->n; i++) {
            d[3 * i] = r->sp.segs[i].kind;
            d[3 * i + 1] = r->sp.segs[i].offset;
            d[3 * i + 2] = r->sp.segs[i].length;
        }
        if (r->n_miss)
            memcpy(mt.data, r->miss, (size_t)r->n_miss * 4 * sizeof *r->miss);
        bad = kv_npy_write(f, &r->kvt, e) < 0 ||
              (!kv_only && (kv_npy_write(f, &segt, e) < 0 ||
                            kv_npy_write(f, &mt, e) < 0));
    }
    kv_tensor_release(&segt);
    kv_tensor_release(&mt);
    return bad ? -1 : 0;
}

/* assemble's own options. */
struct asm_args {
    struct arg_str *fmt, *out, *report, *jobs;
    struct arg_lit *force, *kv_only;
};

/* Write the plan (text, and --report) or the tensors (npy); the exit code. */
static int assemble_write(const struct asm_args *aa, int want_kv, int verbose,
                          const struct asm_run *r, struct kv_err *e)
{
    struct kv_out o, ro;
    enum kv_format f;
    int rc;
    memset(&o, 0, sizeof o);
    memset(&ro, 0, sizeof ro);
    if (kv_out_open(&o, sval(aa->out), e) < 0)
        return kv_fail_err(e);
    if ((rc = out_format(aa->fmt, o.f, aa->force->count, &f)) != 0) {
        kv_out_abort(&o);
        return rc;
    }
    if (sval(aa->report) && !strcmp(sval(aa->report), "-")) {
        kv_out_abort(&o);
        return kv_usage("--report: a file name, not '-'");
    }
    if (sval(aa->report) && kv_out_open(&ro, sval(aa->report), e) < 0) {
        kv_out_abort(&o);
        return kv_fail_err(e);
    }
    if (f == KV_FMT_TEXT)
        assemble_plan(o.f, r);
    if (ro.f)
        assemble_plan(ro.f, r);
    if (ro.f && ferror(ro.f))
        kv_err_set(e, "cannot write '%s'", sval(aa->report));
    else if (f == KV_FMT_NPY && !want_kv)
        kv_err_set(e, "internal: no KV tensor for npy output");
    else if (f != KV_FMT_NPY ||
             assemble_npy(o.f, r, aa->kv_only->count > 0, e) == 0)
        goto commit;
    if (ro.f)
        kv_out_abort(&ro);
    kv_out_abort(&o);
    return kv_fail_err(e);
commit:
    if (verbose) {
        size_t hits = 0;
        for (size_t i = 0; i < r->n; i++)
            hits += r->status[i] == KV_GET_HIT;
        kv_warn("%zu segments, %zu hits, %lld misses; lookup %.3f s, move "
                "and write %.3f s", r->n, hits, (long long)r->n_miss,
                r->t1 - r->t0, kv_now() - r->t1);
    }
    rc = o.path ? (kv_out_commit(&o, e) < 0 ? kv_fail_err(e) : 0)
                : kv_close_stdout();
    if (rc == 0 && ro.f && kv_out_commit(&ro, e) < 0)
        return kv_fail_err(e);
    if (rc != 0 && ro.f)
        kv_out_abort(&ro);
    return rc;
}

static int cmd_assemble(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct prompt_args pa;
    struct store_args sa;
    struct common c;
    struct asm_args aa;
    add_prompt(&t, &pa);
    add_ns(&t, &na, 1);
    add_store(&t, &sa);
    add(&t, aa.fmt = arg_str0("f", "format", "npy|text", "npy: KV, segments, "
                              "misses; text: the plan only"));
    add(&t, aa.out = arg_str0("o", "output", "FILE", "write to FILE"));
    add(&t, aa.report = arg_str0(NULL, "report", "FILE", "also write the "
                                 "plan as text to FILE"));
    add(&t, aa.jobs = arg_str0("j", "jobs", "N", "threads (default: all "
                               "cores)"));
    add(&t, aa.kv_only = arg_lit0(NULL, "kv-only", "write the KV tensor only "
                                  "(no segments, no misses)"));
    add(&t, aa.force = arg_lit0(NULL, "force", "binary to a terminal"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nAssemble a prompt's KV from the "
                   "store: every hit moved to its position.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    int64_t nj = 0;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (sval(aa.jobs) && kv_parse_i64(sval(aa.jobs), "-j", 0, 1024, &nj,
                                       &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = prompt_usage(&pa)) != 0) {
        free_table(&t);
        return rc;
    }
    struct asm_run r;
    memset(&r, 0, sizeof r);
    kv_tensor_init(&r.kvt);
    r.t0 = kv_now();
    int want_kv = sval(aa.fmt) ? strcmp(sval(aa.fmt), "npy") == 0
                               : (sval(aa.out) != NULL || !kv_isatty(stdout));
    rc = assemble_lookup(&pa, &sa, &v, lim, nj, want_kv, &r, &e);
    if (rc == 0 && assemble_misses(&v, &r, &e) < 0)
        rc = -1;
    if (rc == 0)
        rc = assemble_write(&aa, want_kv, c.verbose->count > 0, &r, &e);
    if (rc < 0)
        rc = kv_fail_err(&e);
    asm_release(&r);
    free_table(&t);
    return rc;
}

/* ---- ls, stat, evict, fsck, rm, pin ------------------------------------- */

struct ls_out {
    FILE *f;
    int tty;        /* for a person: aligned, the time as a UTC date */
};

static int ls_line(void *ctx, const struct kv_store_entry *en)
{
    struct ls_out *o = ctx;
    char hex[33];
    kv_hex(en->key, hex);
    if (!o->tty) {
        fprintf(o->f, "%s %u %llu %d %llu %d %.0f\n", hex, en->n_tokens,
                (unsigned long long)en->bytes, en->base_pos,
                (unsigned long long)en->hits, en->pinned, en->last_access);
        return 0;
    }
    char when[32] = "-";
    struct tm tm;
    time_t tt = (time_t)en->last_access;
    if (en->last_access > 0 && gmtime_r(&tt, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(o->f, "%s %7u %12llu %8d %6llu %6s %s\n", hex, en->n_tokens,
            (unsigned long long)en->bytes, en->base_pos,
            (unsigned long long)en->hits, en->pinned ? "yes" : "no", when);
    return 0;
}

static void fsck_line(void *ctx, const char *line)
{
    fprintf(ctx, "%s\n", line);
}

/* The shared frame of the store-only subcommands. */
/* kvchunk ls: the entries, listed into memory first so that a failure
 * half way prints nothing. */
static int store_ls(struct kv_store *s)
{
    struct kv_err e;
    char *buf = NULL;
    size_t len = 0;
    int rc = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem)
        return kv_fail("out of memory");
    struct ls_out lo = {mem, kv_isatty(stdout)};
    if (lo.tty)
        fprintf(mem, "%-32s %7s %12s %8s %6s %6s %s\n", "KEY", "TOKENS",
                "BYTES", "BASE_POS", "HITS", "PINNED", "LAST_ACCESS");
    int bad = kv_store_ls(s, ls_line, &lo, &e) < 0;
    fclose(mem);
    if (bad)
        rc = kv_fail_err(&e);
    else
        fwrite(buf, 1, len, stdout);
    free(buf);
    return rc;
}

/* kvchunk stat: the store's counters. */
static int store_stat(struct kv_store *s)
{
    struct kv_err e;
    struct kv_store_stats st;
    if (kv_store_stat(s, &st, &e) < 0)
        return kv_fail_err(&e);
    printf("entries: %llu\nbytes: %llu\nhits: %llu\nmisses: %llu\n"
           "evictions: %llu\ncollisions_rejected: %llu\n"
           "checksum_failures: %llu\nputs: %llu\n",
           (unsigned long long)st.entries, (unsigned long long)st.bytes,
           (unsigned long long)st.hits, (unsigned long long)st.misses,
           (unsigned long long)st.evictions, (unsigned long long)st.collisions,
           (unsigned long long)st.checksum_failures,
           (unsigned long long)st.puts);
    return 0;
}

/* kvchunk evict: down to lw * max_size, and what it removed. */
static int store_evict(struct kv_store *s, size_t max_size, double lw)
{
    struct kv_err e;
    struct kv_evict_report r;
    if (kv_store_evict(s, max_size, lw, &r, &e) < 0)
        return kv_fail_err(&e);
    printf("removed: %llu\nremoved_bytes: %llu\nskipped_busy: %llu\n"
           "bytes_before: %llu\nbytes_after: %llu\n",
           (unsigned long long)r.removed, (unsigned long long)r.removed_bytes,
           (unsigned long long)r.skipped_busy,
           (unsigned long long)r.total_before,
           (unsigned long long)r.total_after);
    return 0;
}

/* kvchunk fsck: the problems (printed after the walk, so that a failure
 * leaves stdout empty) and the counts.  Problems left unrepaired close
 * stdout here and return 1. */
static int store_fsck(struct kv_store *s, int repair)
{
    struct kv_err e;
    struct kv_fsck_report r;
    char *buf = NULL;
    size_t len = 0;
    int rc = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem)
        return kv_fail("out of memory");
    if (kv_store_fsck(s, repair, fsck_line, mem, &r, &e) < 0) {
        fclose(mem);
        free(buf);
        return kv_fail_err(&e);
    }
    fclose(mem);
    fwrite(buf, 1, len, stdout);
    free(buf);
    printf("checked: %llu\ncorrupt: %llu\nunindexed: %llu\n"
           "orphan_rows: %llu\nstale_tmp: %llu\nrepaired: %llu\n"
           "index_unreadable: %llu\n",
           (unsigned long long)r.checked, (unsigned long long)r.corrupt,
           (unsigned long long)r.unindexed, (unsigned long long)r.orphan_rows,
           (unsigned long long)r.stale_tmp, (unsigned long long)r.repaired,
           (unsigned long long)r.index_unreadable);
    uint64_t problems = r.corrupt + r.unindexed + r.orphan_rows + r.stale_tmp +
                        r.index_unreadable;
    if (problems && !repair) {
        rc = kv_close_stdout();
        if (rc == 0) {
            kv_warn("%llu problems found; 'fsck --repair' fixes them",
                    (unsigned long long)problems);
            rc = 1;
        }
    }
    return rc;
}

/* kvchunk rm, pin and unpin: each key (checked already) in turn, stopping
 * at the first that fails or is absent. */
static int store_keys(struct kv_store *s, const struct arg_str *keys,
                      int is_rm, int is_pin)
{
    struct kv_err e;
    uint8_t kb[16];
    int rc = 0;
    for (int i = 0; i < keys->count && rc == 0; i++) {
        int found = 0;
        kv_unhex(keys->sval[i], kb);
        int r2 = is_rm ? kv_store_rm(s, kb, &found, &e)
                       : kv_store_pin(s, kb, is_pin, &found, &e);
        if (r2 < 0)
            rc = kv_fail_err(&e);
        else if (!found)
            rc = kv_fail("%s: no such entry", keys->sval[i]);
    }
    return rc;
}

/* evict's --max-size and --low-watermark; 0 or the usage exit code. */
static int evict_options(struct arg_str *maxsize, struct arg_str *low,
                         size_t *max_size,
                         double *lw)
{
    struct kv_err e;
    if (!sval(maxsize))
        return kv_usage("--max-size SIZE is required");
    if (kv_parse_size(sval(maxsize), max_size, &e) < 0 ||
        (sval(low) && kv_parse_f64(sval(low), "--low-watermark", lw, &e) < 0))
        return kv_usage("%s", e.msg);
    if (!(*lw > 0 && *lw <= 1))
        return kv_usage("--low-watermark: expected a number in (0, 1], "
                        "got '%s'", sval(low));
    return 0;
}

static int simple_store_cmd(int argc, char **argv, const char *what)
{
    struct table t = {{0}, 0};
    struct store_args sa;
    struct common c;
    struct arg_str *maxsize = NULL, *low = NULL, *keys = NULL;
    struct arg_lit *repair = NULL;
    int is_ls = !strcmp(what, "ls"), is_stat = !strcmp(what, "stat"),
        is_evict = !strcmp(what, "evict"), is_fsck = !strcmp(what, "fsck"),
        is_rm = !strcmp(what, "rm"), is_pin = !strcmp(what, "pin"),
        is_unpin = !strcmp(what, "unpin");
    add_store(&t, &sa);
    if (is_evict) {
        add(&t, maxsize = arg_str0(NULL, "max-size", "SIZE", "evict when the "
                                   "store is larger (512M, 4G, ...)"));
        add(&t, low = arg_str0(NULL, "low-watermark", "F", "evict down to "
                               "F * SIZE (default 0.9)"));
    }
    if (is_fsck)
        add(&t, repair = arg_lit0(NULL, "repair", "remove corrupt blobs, fix "
                                  "the index, clean temporary files"));
    if (is_rm || is_pin || is_unpin)
        add(&t, keys = arg_strn(NULL, NULL, "KEY", 1, 100000, "chunk keys "
                                "(32 hex digits)"));
    add_common(&t, &c);
    const char *syn = is_ls ? "\nList the entries: KEY TOKENS BYTES BASE_POS "
                              "HITS PINNED LAST_ACCESS."
                    : is_stat ? "\nPrint the store's counters."
                    : is_evict ? "\nEvict least recently used entries."
                    : is_fsck ? "\nCheck every blob and the index."
                    : is_rm ? "\nRemove entries."
                    : "\nPin or unpin entries.";
    int rc = parse(&t, &c, argc, argv, syn);
    size_t max_size = 0;
    double lw = 0.9;
    uint8_t kb[16];
    struct kv_store *s = NULL;
    if (rc >= 0 || (is_evict && (rc = evict_options(maxsize, low, &max_size,
                                                    &lw)) != 0))
        goto done;
    for (int i = 0; keys && i < keys->count; i++)
        if (kv_unhex(keys->sval[i], kb) < 0) {
            rc = kv_usage("KEY: expected 32 hex digits, got '%s'",
                          keys->sval[i]);
            goto done;
        }
    if ((rc = open_store(&sa, is_ls || is_stat, 0, 0, &s)) != 0)
        goto done;
    rc = is_ls ? store_ls(s)
       : is_stat ? store_stat(s)
       : is_evict ? store_evict(s, max_size, lw)
       : is_fsck ? store_fsck(s, repair->count > 0)
       : store_keys(s, keys, is_rm, is_pin);
    kv_store_close(s);
    if (rc == 0)
        rc = kv_close_stdout();
done:
    free_table(&t);
    return rc;
}

/* ---- toy, slice ---------------------------------------------------------- */

static int cmd_toy(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct common c;
    struct arg_str *tokens, *pos, *seed, *heads, *qlayer, *embed;
    struct out_args oa;
    add(&t, tokens = arg_str0(NULL, "tokens", "FILE", "token ids"));
    add(&t, pos = arg_str0(NULL, "pos", "P", "position of the first token "
                           "(default 0)"));
    add(&t, seed = arg_str0(NULL, "seed", "N", "model seed (default 0)"));
    add(&t, heads = arg_str0(NULL, "heads", "HQ", "query heads (default "
                             "HKV)"));
    add(&t, qlayer = arg_str0(NULL, "q", "LAYER", "write Q [T, HQ, D] of "
                              "this layer instead of KV"));
    add(&t, embed = arg_str0(NULL, "embed-dim", "E", "embedding width "
                             "(default 32)"));
    add_ns(&t, &na, 1);
    add_out(&t, &oa, NULL);
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nThe toy projection: token ids at "
                   "positions P.. -> KV [L, 2, T, HKV, D] (RoPE on K).");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    int64_t p = 0, sd = 0, hq = 0, ql = -1, ed = 32;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (!sval(tokens) && kv_err_set(&e, "--tokens FILE is required") < 0) ||
        (sval(pos) && kv_parse_i64(sval(pos), "--pos", 0, INT32_MAX, &p,
                                   &e) < 0) ||
        (sval(seed) && kv_parse_i64(sval(seed), "--seed", 0, INT64_MAX, &sd,
                                    &e) < 0) ||
        (sval(heads) && kv_parse_i64(sval(heads), "--heads", 1, 65536, &hq,
                                     &e) < 0) ||
        (sval(qlayer) && kv_parse_i64(sval(qlayer), "--q", 0, 1 << 20, &ql,
                                      &e) < 0) ||
        (sval(embed) && kv_parse_i64(sval(embed), "--embed-dim", 1, 65536,
                                     &ed, &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if ((rc = max_mem(&c, &lim)) != 0) {
        free_table(&t);
        return rc;
    }
    if (v.ns.kv_lora_rank && (ql >= 0 || hq || sval(embed))) {
        free_table(&t);
        return kv_usage("--q, --heads and --embed-dim do not apply to a latent (MLA) toy");
    }
    struct kv_toy m;
    kv_toy_init(&m, v.ns.n_layers, hq ? hq : v.ns.n_kv_heads,
                v.ns.n_kv_heads, v.ns.head_dim);
    if (v.ns.kv_lora_rank) {   /* MLA: the latent toy, checked there */
        m.head_dim = v.ns.rope.head_dim;
        m.n_heads = m.n_kv_heads = 1;
    }
    m.seed = (uint64_t)sd;
    m.embed_dim = ed;
    m.rope = v.ns.rope;
    if (kv_toy_check(&m, &e) < 0 || (ql >= m.n_layers &&
        kv_err_set(&e, "--q: layer %lld out of range [0, %lld)",
                   (long long)ql, (long long)m.n_layers) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    struct kv_tokens tok;
    memset(&tok, 0, sizeof tok);
    if (load_tokens(sval(tokens), "--tokens", lim, &tok, &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    int64_t *ps = malloc((tok.n ? tok.n : 1) * sizeof *ps);
    struct kv_tensor x;
    kv_tensor_init(&x);
    rc = 1;
    if (!ps) {
        kv_err_set(&e, "out of memory");
        goto fail;
    }
    if (p + (int64_t)tok.n > INT32_MAX) {
        kv_err_set(&e, "--pos %lld: the tokens would end past 2^31",
                   (long long)p);
        goto fail;
    }
    for (size_t i = 0; i < tok.n; i++)
        ps[i] = p + (int64_t)i;
    if (v.ns.kv_lora_rank) {
        if (kv_latent_toy(&v.ns.rope, v.ns.n_layers, v.ns.kv_lora_rank, (uint64_t)sd, tok.ids,
                          ps, tok.n, v.ns.dtype, lim, &x, &e) < 0)
            goto fail;
    } else if ((ql >= 0 ? kv_toy_q(&m, tok.ids, ps, tok.n, ql, v.ns.dtype, lim, &x,
                            &e)
                 : kv_toy_kv(&m, tok.ids, ps, tok.n, v.ns.dtype, lim, &x,
                             &e)) < 0)
        goto fail;
    rc = kv_write_tensors(sval(oa.out), KV_FMT_AUTO, oa.force->count, &x, 1);
    goto out;
fail:
    rc = kv_fail_err(&e);
out:
    free(ps);
    kv_tensor_release(&x);
    kv_tokens_release(&tok);
    free_table(&t);
    return rc;
}

static int cmd_slice(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct common c;
    struct arg_str *layer, *part, *layout;
    struct out_args oa;
    struct arg_file *in;
    add(&t, layer = arg_str0(NULL, "layer", "L", "layer (default 0)"));
    add(&t, part = arg_str0(NULL, "part", "k|v", "K or V (default k)"));
    add(&t, layout = arg_str0(NULL, "layout", "thd|bhsd", "output layout: "
                              "[T, HKV, D] or [1, HKV, T, D] (default thd)"));
    add_out(&t, &oa, NULL);
    add(&t, in = arg_file0(NULL, NULL, "KV", "KV [L, 2, T, HKV, D] .npy "
                           "(default stdin)"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nOne layer's K or V of a KV tensor, "
                   "for kvattn.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct kv_err e;
    size_t lim;
    int64_t l = 0;
    int is_v = 0, bhsd = 0;
    if (sval(layer) && kv_parse_i64(sval(layer), "--layer", 0, 1 << 20, &l,
                                    &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if (sval(part)) {
        if (!strcmp(sval(part), "v"))
            is_v = 1;
        else if (strcmp(sval(part), "k")) {
            free_table(&t);
            return kv_usage("--part: expected k or v, got '%s'", sval(part));
        }
    }
    if (sval(layout)) {
        if (!strcmp(sval(layout), "bhsd"))
            bhsd = 1;
        else if (strcmp(sval(layout), "thd")) {
            free_table(&t);
            return kv_usage("--layout: expected thd or bhsd, got '%s'",
                            sval(layout));
        }
    }
    if ((rc = max_mem(&c, &lim)) != 0) {
        free_table(&t);
        return rc;
    }
    const char *path = in->count ? in->filename[0] : "-";
    struct kv_tensor x, y;
    char sh[128];
    kv_tensor_init(&x);
    kv_tensor_init(&y);
    rc = 1;
    if (kv_npy_load(path, lim, &x, &e) < 0)
        goto fail;
    if (x.ndim != 5 || x.shape[1] != 2) {
        kv_err_set(&e, "'%s': expected KV [L, 2, T, HKV, D], found %s",
                   kv_path_name(path, 0),
                   kv_shape_str(x.ndim, x.shape, sh, sizeof sh));
        goto fail;
    }
    if (l >= x.shape[0]) {
        kv_usage("--layer: %lld out of range [0, %lld)", (long long)l,
                 (long long)x.shape[0]);
        rc = 2;
        goto out;
    }
    int64_t T = x.shape[2], H = x.shape[3], D = x.shape[4];
    int64_t s3[3] = {T, H, D}, s4[4] = {1, H, T, D};
    if (kv_tensor_alloc(&y, x.dtype, bhsd ? 4 : 3, bhsd ? s4 : s3, 0, &e) < 0)
        goto fail;
    size_t es = kv_dtype_size(x.dtype), row = (size_t)D * es;
    const uint8_t *src = (const uint8_t *)x.data +
                         ((size_t)l * 2 + (size_t)is_v) * (size_t)(T * H) * row;
    if (!bhsd) {
        memcpy(y.data, src, y.nbytes);
    } else {
        for (int64_t tt = 0; tt < T; tt++)
            for (int64_t h = 0; h < H; h++)
                memcpy((uint8_t *)y.data + ((size_t)h * T + tt) * row,
                       src + ((size_t)tt * H + h) * row, row);
    }
    rc = kv_write_tensors(sval(oa.out), KV_FMT_AUTO, oa.force->count, &y, 1);
    goto out;
fail:
    rc = kv_fail_err(&e);
out:
    kv_tensor_release(&x);
    kv_tensor_release(&y);
    free_table(&t);
    return rc;
}

/* ---- selftest-rope ------------------------------------------------------- */

static int cmd_selftest(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct common c;
    struct arg_str *vecs, *seed;
    add_ns(&t, &na, 1);
    add(&t, vecs = arg_str0(NULL, "vectors", "N", "random head vectors per "
                            "move (default 2000)"));
    add(&t, seed = arg_str0(NULL, "seed", "N", "seed (default 1)"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nMeasure RoPE moves of this model "
                   "against the exact rotation: exit 0 when every move is "
                   "within\n1 ulp RMS and 2 ulps max of the KV dtype, 1 when "
                   "not.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    int64_t nv = 2000, sd = 1;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (sval(vecs) && kv_parse_i64(sval(vecs), "--vectors", 1, 1000000, &nv,
                                    &e) < 0) ||
        (sval(seed) && kv_parse_i64(sval(seed), "--seed", 0, INT64_MAX, &sd,
                                    &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    static const int64_t pairs[][2] = {
        {0, 1}, {0, 4096}, {0, 131072}, {1, 0}, {4096, 0}, {131072, 0},
        {100, 32768}, {4096, 131072}, {131072, 4096}, {65536, 65537},
    };
    enum { NP = sizeof pairs / sizeof pairs[0] };
    struct kv_rope_error res[NP];
    for (int i = 0; i < NP; i++)
        if (kv_rope_measure(&v.ns.rope, v.ns.dtype, pairs[i][0], pairs[i][1],
                            (size_t)nv, (uint64_t)sd + (uint64_t)i, &res[i],
                            &e) < 0) {
            free_table(&t);
            return kv_fail_err(&e);
        }
    int bad = 0;
    printf("p0 p_new max_rel rms_rel max_ulp rms_ulp\n");
    for (int i = 0; i < NP; i++) {
        int ok = res[i].rms_ulp <= 1.0 && res[i].max_ulp <= 2.0;
        bad += !ok;
        printf("%lld %lld %.3g %.3g %.3f %.3f%s\n", (long long)pairs[i][0],
               (long long)pairs[i][1], res[i].max_rel, res[i].rms_rel,
               res[i].max_ulp, res[i].rms_ulp, ok ? "" : " FAIL");
    }
    free_table(&t);
    rc = kv_close_stdout();
    if (rc == 0 && bad) {
        kv_warn("%d of %d moves above 1 ulp RMS or 2 ulps max", bad, (int)NP);
        rc = 1;
    }
    return rc;
}

/* ---- main --------------------------------------------------------------- */

static int usage_all(FILE *f)
{
    fprintf(f, "Usage: %s SUBCOMMAND [options]\n\n"
            "  split     prompt -> segments sys, chunks, question (+ keys)\n"
            "  key       content key of a chunk\n"
            "  info      what kvchunk understood of a model (--model-config)\n"
            "  put       store a chunk's KV\n"
            "  get       a cached chunk's KV moved to --at (exit 3: miss)\n"
            "  assemble  a prompt's KV from the store, misses listed\n"
            "  ls        list entries\n"
            "  stat      counters\n"
            "  evict     evict to --max-size\n"
            "  fsck      check (and --repair) the store\n"
            "  rm        remove entries\n"
            "  pin, unpin  keep entries from eviction\n"
            "  toy       the toy projection: token ids -> KV\n"
            "  slice     one layer's K or V for kvattn\n"
            "  selftest-rope  moves of this RoPE against the exact rotation\n"
            "  sim       trace simulation (kvchunk sim --help)\n\n"
            "'%s SUBCOMMAND --help' lists its options; see man 1 kvchunk.\n",
            kv_progname(), kv_progname());
    return 0;
}

/* ==== kvchunk sim: trace replay (lib/sim/sim.c, lib/sim/trace.c) ================ */

/* ---- kvchunk sim gen ----------------------------------------------------- */

static int parse_order(const char *s, int *out)
{
    if (!strcmp(s, "retrieval"))
        *out = KV_SIM_ORDER_RETRIEVAL;
    else if (!strcmp(s, "sorted"))
        *out = KV_SIM_ORDER_SORTED;
    else if (!strcmp(s, "random"))
        *out = KV_SIM_ORDER_RANDOM;
    else
        return -1;
    return 0;
}

static int opt_f64(struct arg_str *a, const char *opt, double min,
                   double max, double *out)
{
    struct kv_err e;
    double v;
    if (!a->count)
        return 0;
    if (kv_parse_f64(a->sval[0], opt, &v, &e) < 0)
        return kv_usage("%s", e.msg);
    if (!(v >= min && v <= max))
        return kv_usage("%s: expected a number from %g to %g, got '%s'",
                        opt, min, max, a->sval[0]);
    *out = v;
    return 0;
}

struct simgen_args {
    struct arg_lit *help, *version;
    struct arg_str *seed, *reqs, *docs, *topk, *zipf, *fresh, *order, *sysv,
                   *tenants,
                   *topics, *turns, *convs, *rate, *doc_len, *sys_len, *q_len,
                   *out_len;
    struct arg_file *out;
    struct arg_end *end;
};

/* sim gen's options, each default in its glossary; returns the count. */
static int simgen_args_make(struct simgen_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version");
    t[n++] = a->seed = arg_str0(NULL, "seed", "N", "random seed (1)");
    t[n++] = a->reqs = arg_str0("n", "requests", "N",
                                "number of requests (1000)");
    t[n++] = a->docs = arg_str0(NULL, "docs", "N",
                                "documents in the corpus (10000)");
    t[n++] = a->topk = arg_str0("k", "topk", "K",
                                "chunks retrieved per request (5)");
    t[n++] = a->zipf = arg_str0(NULL, "zipf", "S",
                                "Zipf exponent of document popularity "
                                "(1.0; 0 = uniform)");
    t[n++] = a->fresh = arg_str0(NULL, "fresh", "F",
                                 "share of retrieved documents never seen "
                                 "before; reuse is 1 - F (0)");
    t[n++] = a->order = arg_str0(NULL, "order", "ORDER",
                                 "retrieval, sorted or random (retrieval)");
    t[n++] = a->sysv = arg_str0(NULL, "sys-variants", "M",
                                "system prompts to choose from (1; 0 = "
                                "none)");
    t[n++] = a->tenants = arg_str0(NULL, "tenants", "T", "tenants (1)");
    t[n++] = a->topics = arg_str0(NULL, "topics,topic-clusters", "C",
                                  "topic clusters: a request retrieves "
                                  "from one topic (0 = none)");
    t[n++] = a->turns = arg_str0(NULL, "turns", "N",
                                 "most turns per conversation (1 = "
                                 "single-turn)");
    t[n++] = a->convs = arg_str0(NULL, "conversations", "N",
                                 "conversations open at once (64)");
    t[n++] = a->rate = arg_str0(NULL, "rate", "R",
                                "Poisson arrivals per second (1; 0 = "
                                "all at time 0)");
    t[n++] = a->doc_len = arg_str0(NULL, "doc-len", "DIST",
                                   "document length: N, A-B or M~S (512)");
    t[n++] = a->sys_len = arg_str0(NULL, "sys-len", "DIST",
                                   "system prompt length (600)");
    t[n++] = a->q_len = arg_str0(NULL, "q-len", "DIST",
                                 "question length (40)");
    t[n++] = a->out_len = arg_str0(NULL, "out-len", "DIST",
                                   "output length (128)");
    t[n++] = a->out = arg_file0("o", "output", "FILE",
                                "write the trace to FILE");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* The generator's options over the defaults in o. */
static int simgen_values(const struct simgen_args *a,
                         struct kv_sim_gen_opts *o)
{
    struct kv_err e;
    int64_t v = 1;
    int rc;
    if (a->seed->count) {
        if ((rc = kv_opt_i64(a->seed, "--seed", 0, INT64_MAX, &v)))
            return rc;
        o->seed = (uint64_t)v;
    }
    if ((rc = kv_opt_i64(a->reqs, "--requests", 0, (int64_t)1 << 40,
                         &o->requests)) ||
        (rc = kv_opt_i64(a->docs, "--docs", 1, 100000000, &o->docs)) ||
        (rc = kv_opt_i64(a->topk, "--topk", 0, 10000, &o->topk)) ||
        (rc = opt_f64(a->zipf, "--zipf", 0, 10, &o->zipf)) ||
        (rc = opt_f64(a->fresh, "--fresh", 0, 1, &o->fresh)) ||
        (rc = kv_opt_i64(a->sysv, "--sys-variants", 0, 100000000,
                         &o->sys_variants)) ||
        (rc = kv_opt_i64(a->tenants, "--tenants", 1, 100000000,
                         &o->tenants)) ||
        (rc = kv_opt_i64(a->topics, "--topics", 0, 100000000, &o->topics)) ||
        (rc = kv_opt_i64(a->turns, "--turns", 1, 1000000, &o->turns)) ||
        (rc = kv_opt_i64(a->convs, "--conversations", 1, 10000000,
                         &o->conversations)) ||
        (rc = opt_f64(a->rate, "--rate", 0, 1e12, &o->rate)))
        return rc;
    if (a->order->count && parse_order(a->order->sval[0], &o->order) < 0)
        return kv_usage("--order: expected retrieval, sorted or random, got "
                        "'%s'", a->order->sval[0]);
    if ((a->doc_len->count && kv_sim_dist_parse(a->doc_len->sval[0],
                                                "--doc-len", 1, &o->doc_len,
                                                &e) < 0) ||
        (a->sys_len->count && kv_sim_dist_parse(a->sys_len->sval[0],
                                                "--sys-len", 1, &o->sys_len,
                                                &e) < 0) ||
        (a->q_len->count && kv_sim_dist_parse(a->q_len->sval[0], "--q-len",
                                              0, &o->q_len, &e) < 0) ||
        (a->out_len->count && kv_sim_dist_parse(a->out_len->sval[0],
                                                "--out-len", 0, &o->out_len,
                                                &e) < 0))
        return kv_usage("%s", e.msg);
    if (o->topics > o->docs)
        return kv_usage("--topics: %lld topics for %lld documents",
                        (long long)o->topics, (long long)o->docs);
    if (o->topk > (o->topics ? o->docs / o->topics : o->docs))
        return kv_usage("--topk: %lld is more than the %lld documents %s",
                        (long long)o->topk,
                        (long long)(o->topics ? o->docs / o->topics : o->docs),
                        o->topics ? "of a topic" : "there are");
    return 0;
}

static int gen_main(int argc, char **argv)
{
    struct simgen_args a;
    void *table[24];
    int n = simgen_args_make(&a, table);
    struct kv_sim_gen_opts o;
    struct kv_err e;
    struct kv_out ko;
    int rc;

    kv_setprogname("kvchunk sim gen");
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.requests = 1000;
    o.docs = 10000;
    o.topk = 5;
    o.zipf = 1.0;
    o.order = KV_SIM_ORDER_RETRIEVAL;
    o.sys_variants = 1;
    o.tenants = 1;
    o.turns = 1;
    o.conversations = 64;
    o.rate = 1.0;
    o.doc_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 512, 512 };
    o.sys_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 600, 600 };
    o.q_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 40, 40 };
    o.out_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 128, 128 };
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                      "\nWrite a synthetic RAG request trace (one request per "
                      "line) for 'kvchunk sim'.",
                      "Deterministic: the same options and --seed give the "
                      "same bytes.  See man 1 kvchunk.");
    if (rc >= 0 || (rc = simgen_values(&a, &o)))
        goto done;
    const char *path = a.out->count ? a.out->filename[0] : NULL;
    if (kv_out_open(&ko, path, &e) < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    if (kv_sim_gen(ko.f, &o, &e) < 0) {
        kv_out_abort(&ko);
        rc = kv_fail_err(&e);
        goto done;
    }
    rc = path && kv_out_commit(&ko, &e) < 0 ? kv_fail_err(&e)
                                            : kv_close_stdout();
done:
    arg_freetable(table, (size_t)n);
    return rc;
}

/* ---- kvchunk sim from-split ---------------------------------------------- */

static int split_main(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_str *rate = arg_str0(NULL, "rate", "R",
                                    "request i arrives at i/R seconds (1; 0 "
                                    "= all at 0)");
    struct arg_str *tenant = arg_str0(NULL, "tenant", "NAME",
                                      "tenant of every request (-)");
    struct arg_str *out_len = arg_str0(NULL, "out-len", "N",
                                       "output length of every request "
                                       "(128)");
    struct arg_file *out = arg_file0("o", "output", "FILE",
                                     "write the trace to FILE");
    struct arg_file *in = arg_filen(NULL, NULL, "FILE", 0, 1,
                                    "'kvchunk split' text output of many "
                                    "prompts (default stdin)");
    struct arg_end *end = arg_end(20);
    void *table[] = { help, version, rate, tenant, out_len, out, in, end };
    struct kv_err e;
    double r = 1.0;
    int64_t ol = 128;
    int rc;

    kv_setprogname("kvchunk sim from-split");
    rc = kv_arg_parse(table, argc, argv, help, version, end,
                      "\nTurn the segment lists 'kvchunk split' prints "
                      "(KIND OFFSET LENGTH KEY) for many prompts into a "
                      "trace for 'kvchunk sim', keys becoming ids.", NULL);
    if (rc >= 0)
        goto done;
    if ((rc = opt_f64(rate, "--rate", 0, 1e12, &r)) ||
        (rc = kv_opt_i64(out_len, "--out-len", 0, KV_SIM_MAX_LEN - 1, &ol)))
        goto done;
    {
        const char *path = in->count ? in->filename[0] : NULL;
        const char *tn = tenant->count ? tenant->sval[0] : "-";
        FILE *f = kv_open_in(path, &e);
        char *buf = NULL;
        size_t n = 0;
        if (!f) {
            rc = kv_fail_err(&e);
            goto done;
        }
        if (!*tn || strpbrk(tn, " \t\n")) {
            kv_close_in(f);
            rc = kv_usage("--tenant: expected a name without spaces");
            goto done;
        }
        rc = kv_sim_from_split(f, kv_path_name(path, 0), r, tn, ol, &buf, &n,
                               &e);
        kv_close_in(f);
        if (rc < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        struct kv_out ko;
        const char *opath = out->count ? out->filename[0] : NULL;
        if (kv_out_open(&ko, opath, &e) < 0) {
            free(buf);
            rc = kv_fail_err(&e);
            goto done;
        }
        if (n && fwrite(buf, 1, n, ko.f) != n) {
            free(buf);
            kv_out_abort(&ko);
            rc = kv_fail("write error on '%s'", kv_path_name(opath, 1));
            goto done;
        }
        free(buf);
        if (opath && kv_out_commit(&ko, &e) < 0)
            rc = kv_fail_err(&e);
        else
            rc = kv_close_stdout();
    }
done:
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}

/* ---- kvchunk sim (replay) ------------------------------------------------ */

#define KV_SIM_MAX_CAPS 64

struct opts {
    unsigned policies;
    struct kv_sim_opts sim;
    int csv;
    int verbose, quiet;
    int jobs;
    const char *trace;
    const char *output;
    int64_t caps[KV_SIM_MAX_CAPS];   /* budgets in tokens, a sweep */
    int n_caps;
    const char *tier;
};

/* "12.3G": a byte count for the table. */
static void human(char *buf, size_t n, double v)
{
    static const char units[] = "BKMGTPE";
    int u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.1f%c", v, units[u]);
}

static double rate(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

/* One replay instance: a budget (index into caps, -1 for the
 * capacity-free policies none and oracle) and the policies it runs. */
struct unit {
    struct kv_sim *s;
    int cap;
    unsigned policies;
};

/* The unit holding policy p at budget c. */
static const struct kv_sim *unit_for(const struct unit *u, int n_units,
                                     int p, int c)
{
    for (int i = 0; i < n_units; i++)
        if (((u[i].policies >> p) & 1u) &&
            (u[i].cap == c || u[i].cap < 0))
            return u[i].s;
    return u[0].s;
}

/* Write the results: a row per budget and policy. */
static void write_results(FILE *f, const struct opts *o, const struct unit *u,
                          int n_units)
{
    struct kv_sim_stats none, st;
    double bpt = (double)o->sim.bytes_per_token;
    int sweep = o->n_caps > 1;
    kv_sim_get(unit_for(u, n_units, KV_SIM_NONE, -1), KV_SIM_NONE, &none);
    double none_mean = none.requests ? none.ttft_sum_us / none.requests : 0;
    double none_e2e = none.requests ? none.e2e_sum_us / none.requests : 0;
    if (o->csv)
        fprintf(f, "policy,token_hit_rate,chunk_hit_rate,requests,"
                "prompt_tokens,hit_tokens,prefill_tokens,chunk_slots,"
                "chunk_hits,bytes_loaded,bytes_stored,bytes_rotated,"
                "evictions,bytes_evicted,entries_max,ttft_mean_ms,"
                "ttft_p50_ms,ttft_p99_ms,speedup_vs_none,queued_ttft_mean_ms,"
                "queued_ttft_p99_ms,capacity_bytes,capacity_tokens,"
                "speedup_vs_prefix,chunk_hit_rate_sys,e2e_mean_ms,"
                "e2e_speedup_vs_none\n");
    else
        fprintf(f, "%s%-13s %9s %9s %14s %8s %8s %10s %9s %9s %7s %10s "
                "%9s %9s\n", sweep ? "capacity " : "", "policy", "token_hit",
                "chunk_hit", "prefill_tokens", "loaded", "stored",
                "evictions", "ttft_ms", "p99_ms", "speedup", "queued_ms",
                "hit+sys", "e2e_ms");
    static const int order[KV_SIM_NPOLICIES] = {
        KV_SIM_NONE, KV_SIM_PREFIX, KV_SIM_PREFIX_RADIX, KV_SIM_PREFIX_SORTED,
        KV_SIM_CHUNK, KV_SIM_CHUNK_LFU, KV_SIM_ORACLE
    };
    for (int c = 0; c < o->n_caps; c++) {
        double cap_bytes = (double)o->caps[c] * bpt, prefix_mean = 0;
        if ((o->policies >> KV_SIM_PREFIX) & 1u) {
            kv_sim_get(unit_for(u, n_units, KV_SIM_PREFIX, c), KV_SIM_PREFIX,
                       &st);
            prefix_mean = st.requests ? st.ttft_sum_us / st.requests : 0;
        }
        for (int q = 0; q < KV_SIM_NPOLICIES; q++) {
            int p = order[q];
            if (!((o->policies >> p) & 1u))
                continue;
            kv_sim_get(unit_for(u, n_units, p, c), p, &st);
            double mean = st.requests ? st.ttft_sum_us / st.requests : 0;
            double qmean = st.requests ? st.queued_sum_us / st.requests : 0;
            double speed = mean > 0 ? none_mean / mean : 1.0;
            double e2e = st.requests ? st.e2e_sum_us / st.requests : 0;
            /* chunk hits counting the system prompt as one more chunk */
            double hs = rate(st.chunk_hits + st.sys_hits,
                             st.chunk_slots + st.sys_slots);
            if (o->csv) {
                fprintf(f, "%s,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu,%llu,%.0f,"
                        "%.0f,%.0f,%llu,%.0f,%llu,%.4f,%.4f,%.4f,%.4f,%.4f,"
                        "%.4f,%.0f,%lld,",
                        kv_sim_policy_name(p),
                        rate(st.hit_tokens, st.prompt_tokens),
                        rate(st.chunk_hits, st.chunk_slots),
                        (unsigned long long)st.requests,
                        (unsigned long long)st.prompt_tokens,
                        (unsigned long long)st.hit_tokens,
                        (unsigned long long)st.prefill_tokens,
                        (unsigned long long)st.chunk_slots,
                        (unsigned long long)st.chunk_hits,
                        (double)st.loaded_tokens * bpt,
                        (double)st.stored_tokens * bpt,
                        (double)st.rotated_tokens * bpt,
                        (unsigned long long)st.evictions,
                        (double)st.evicted_tokens * bpt,
                        (unsigned long long)st.entries_max,
                        mean / 1e3, kv_sim_ttft_quantile(&st, 0.5) / 1e3,
                        kv_sim_ttft_quantile(&st, 0.99) / 1e3, speed,
                        qmean / 1e3, kv_sim_queued_quantile(&st, 0.99) / 1e3,
                        cap_bytes, (long long)o->caps[c]);
                if (prefix_mean > 0 && mean > 0)
                    fprintf(f, "%.4f", prefix_mean / mean);
                fprintf(f, ",%.6f,%.4f,%.4f\n", hs, e2e / 1e3,
                        e2e > 0 ? none_e2e / e2e : 1.0);
            } else {
                char ld[16], sd[16], cb[16];
                human(ld, sizeof ld, (double)st.loaded_tokens * bpt);
                human(sd, sizeof sd, (double)st.stored_tokens * bpt);
                human(cb, sizeof cb, cap_bytes);
                if (sweep)
                    fprintf(f, "%8s ", cb);
                fprintf(f, "%-13s %9.4f %9.4f %14llu %8s %8s %10llu %9.2f "
                        "%9.2f %7.2f %10.2f %9.4f %9.2f\n",
                        kv_sim_policy_name(p),
                        rate(st.hit_tokens, st.prompt_tokens),
                        rate(st.chunk_hits, st.chunk_slots),
                        (unsigned long long)st.prefill_tokens, ld, sd,
                        (unsigned long long)st.evictions, mean / 1e3,
                        kv_sim_ttft_quantile(&st, 0.99) / 1e3, speed,
                        qmean / 1e3, hs, e2e / 1e3);
            }
        }
    }
}

/* The replay: the trace is read in batches on the calling thread; each
 * batch then goes through every unit (a budget of the sweep and a group of
 * policies: prefix caching, chunk caching, and the budget-free none and
 * oracle), the units spread over -j threads.  Each unit keeps its own
 * conversations, so the results do not depend on -j. */
#define BATCH 4096

struct batch {
    struct kv_sim_req *req;
    size_t n;
    struct kv_sim_seg *seg;
    size_t n_seg, cap_seg;
};

struct feed {
    struct unit *u;
    const struct batch *b;
    int *rc;
    struct kv_err *e;
};

static void feed_unit(void *ctx, size_t i)
{
    struct feed *fd = ctx;
    if (fd->rc[i] < 0)
        return;
    for (size_t k = 0; k < fd->b->n; k++)
        if (kv_sim_feed(fd->u[i].s, &fd->b->req[k], &fd->e[i]) < 0) {
            fd->rc[i] = -1;
            return;
        }
}

/* Copy a request (valid until the next read) into the batch. */
static int batch_add(struct batch *b, const struct kv_sim_req *r)
{
    if (b->n_seg + r->n_chunks > b->cap_seg) {
        size_t nc = (b->n_seg + r->n_chunks) * 2 + 64;
        struct kv_sim_seg *q = realloc(b->seg, nc * sizeof *q);
        if (!q)
            return -1;
        b->seg = q;
        b->cap_seg = nc;
    }
    struct kv_sim_req *d = &b->req[b->n++];
    *d = *r;
    d->sys.name = "";
    d->sys.name_len = 0;
    /* chunks: an offset until the batch is complete */
    d->chunks = (struct kv_sim_seg *)(uintptr_t)b->n_seg;
    for (size_t i = 0; i < r->n_chunks; i++) {
        b->seg[b->n_seg] = r->chunks[i];
        b->seg[b->n_seg].name = "";
        b->seg[b->n_seg].name_len = 0;
        b->n_seg++;
    }
    return 0;
}

static void batch_seal(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        b->req[i].chunks = b->seg + (uintptr_t)b->req[i].chunks;
}

static int run(struct opts *o)
{
    struct kv_err e, ue[2 * KV_SIM_MAX_CAPS + 1];
    struct kv_sim_reader *rd = NULL;
    struct unit u[2 * KV_SIM_MAX_CAPS + 1];
    int urc[2 * KV_SIM_MAX_CAPS + 1];
    int n_units = 0;
    struct kv_sim_opts check = o->sim;
    struct kv_sim_req req;
    struct kv_progress pr;
    struct batch bt;
    struct stat sb;
    uint64_t n = 0, total = 0;
    double t0 = kv_now();
    int rc = 0, got = 1;
    const unsigned none = 1u << KV_SIM_NONE;
    const unsigned groups[3] = {
        (1u << KV_SIM_PREFIX) | (1u << KV_SIM_PREFIX_SORTED) |
            (1u << KV_SIM_PREFIX_RADIX),
        (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU),
        none | (1u << KV_SIM_ORACLE),
    };
    FILE *f = kv_open_in(o->trace, &e);
    if (!f)
        return kv_fail_err(&e);
    memset(&bt, 0, sizeof bt);
    memset(u, 0, sizeof u);
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode))
        total = (uint64_t)sb.st_size;
    /* the units */
    for (int g = 0; g < 3; g++) {
        unsigned pol = o->policies & groups[g];
        if (g == 2)
            pol |= none;   /* always: the speedups need it */
        if (!pol)
            continue;
        for (int c = 0; c < (g == 2 ? 1 : o->n_caps); c++) {
            struct kv_sim_opts so = o->sim;
            so.policies = pol | none;
            so.capacity_tokens = o->caps[g == 2 ? 0 : c];
            u[n_units].cap = g == 2 ? -1 : c;
            u[n_units].policies = pol;
            if (kv_sim_create(&u[n_units].s, &so, &e) < 0) {
                rc = kv_fail_err(&e);
                goto done;
            }
            urc[n_units] = 0;
            n_units++;
        }
    }
    /* every segment must fit the smallest budget */
    for (int c = 0; c < o->n_caps; c++)
        if (o->caps[c] < check.capacity_tokens)
            check.capacity_tokens = o->caps[c];
    bt.req = malloc(BATCH * sizeof *bt.req);
    if (!bt.req) {
        rc = kv_fail("out of memory");
        goto done;
    }
    if (kv_sim_reader_open(&rd, f, kv_path_name(o->trace, 0), &e) < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    kv_progress_start(&pr, "replaying", o->quiet);
    while (got > 0) {
        bt.n = bt.n_seg = 0;
        while (bt.n < BATCH && (got = kv_sim_reader_next(rd, &req, &e)) > 0) {
            if (kv_sim_check(&check, &req, &e) < 0) {
                got = -2;
                break;
            }
            if (batch_add(&bt, &req) < 0) {
                kv_err_set(&e, "out of memory");
                got = -3;
                break;
            }
        }
        if (got < 0)
            break;
        batch_seal(&bt);
        struct feed fd = { u, &bt, urc, ue };
        kv_parallel_for((size_t)n_units, o->jobs, feed_unit, &fd);
        for (int i = 0; i < n_units; i++)
            if (urc[i] < 0) {
                e = ue[i];
                got = -3;
            }
        n += bt.n;
        kv_progress_update(&pr, total ? (uint64_t)ftello(f) : n, total);
    }
    kv_progress_end(&pr);
    if (got == -2) {
        /* kv_sim_check names the line; add the file */
        rc = kv_fail("'%s' %s", kv_path_name(o->trace, 0), e.msg);
        goto done;
    }
    if (got < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    if (o->sim.warmup && n <= o->sim.warmup) {
        rc = kv_fail("'%s': --warmup %llu leaves nothing to count: the "
                     "trace has %llu requests", kv_path_name(o->trace, 0),
                     (unsigned long long)o->sim.warmup,
                     (unsigned long long)n);
        goto done;
    }
    if (o->verbose) {
        struct rusage ru;
        size_t mem = 0;
        for (int i = 0; i < n_units; i++)
            mem += kv_sim_mem(u[i].s);
        getrusage(RUSAGE_SELF, &ru);
        kv_warn("%llu requests in %.3f s (%d replays, -j %d); simulator "
                "tables %.1f MiB, max RSS %.1f MiB", (unsigned long long)n,
                kv_now() - t0, n_units, o->jobs, (double)mem / 1048576.0,
                ru.ru_maxrss / 1024.0);
        for (int c = 0; c < o->n_caps; c++)
            kv_warn("capacity %.0f bytes = %lld tokens of %llu bytes (%lld "
                    "blocks of %lld)",
                    (double)o->caps[c] * (double)o->sim.bytes_per_token,
                    (long long)o->caps[c],
                    (unsigned long long)o->sim.bytes_per_token,
                    (long long)(o->caps[c] / o->sim.block_size),
                    (long long)o->sim.block_size);
    }
    {
        struct kv_out ko;
        if (kv_out_open(&ko, o->output, &e) < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        write_results(ko.f, o, u, n_units);
        if (o->output) {
            if (kv_out_commit(&ko, &e) < 0) {
                rc = kv_fail_err(&e);
                goto done;
            }
        }
        rc = kv_close_stdout();
    }
done:
    for (int i = 0; i < n_units; i++)
        kv_sim_free(u[i].s);
    free(bt.req);
    free(bt.seg);
    kv_sim_reader_free(rd);
    kv_close_in(f);
    return rc;
}

/* Parse a comma-separated list of budgets into o->caps (tokens). */
static int parse_caps(struct opts *o, const char *list, const char *opt,
                      int64_t B)
{
    int in_bytes = strcmp(opt, "--capacity-tokens") != 0;
    const char *p = list;
    struct kv_err e;
    o->n_caps = 0;
    for (;;) {
        char buf[64];
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        size_t v;
        if (len == 0 || len >= sizeof buf)
            return kv_usage("%s: expected a size or a comma-separated list, "
                            "got '%s'", opt, list);
        if (o->n_caps == KV_SIM_MAX_CAPS)
            return kv_usage("%s: at most %d budgets", opt, KV_SIM_MAX_CAPS);
        memcpy(buf, p, len);
        buf[len] = 0;
        if (kv_parse_size(buf, &v, &e) < 0)
            return kv_usage("%s: %s", opt, e.msg);
        if (in_bytes) {
            if (v < o->sim.bytes_per_token)
                return kv_usage("%s: %zu bytes is less than one token (%llu "
                                "bytes)", opt, v,
                                (unsigned long long)o->sim.bytes_per_token);
            v /= o->sim.bytes_per_token;
        }
        if (v < 1 || v > (size_t)1 << 50)
            return kv_usage("%s: expected a count from 1 to 2^50 tokens, got "
                            "'%s'", opt, buf);
        if ((o->policies & ((1u << KV_SIM_PREFIX) |
                            (1u << KV_SIM_PREFIX_SORTED))) &&
            (int64_t)v < B)
            return kv_usage("capacity of %zu tokens is smaller than one block "
                            "of %lld", v, (long long)B);
        o->caps[o->n_caps++] = (int64_t)v;
        if (!c)
            break;
        p = c + 1;
    }
    o->sim.capacity_tokens = o->caps[0];
    return 0;
}

/* --model-config for sim: the geometry and element size bytes per token
 * are made of (an MLA model: its latent's bytes per token). */
static int sim_model_config(const char *path, int64_t *L, int64_t *H,
                            int64_t *D, int64_t *elt, int64_t *mla_bpt)
{
    struct kv_model m;
    struct kv_err e;
    if (kv_model_load(path, 0, &m, &e) < 0)
        return kv_usage("--model-config: %s", e.msg);
    if (m.n_layers > 100000 || m.n_kv_heads > 100000 || m.head_dim > 100000)
        return kv_usage("--model-config: %s: geometry out of range", path);
    *L = m.n_layers;
    *H = m.n_kv_heads;
    *D = m.head_dim;
    if (m.have_dtype)
        *elt = (int64_t)kv_dtype_size(m.dtype);
    if (m.kv_lora_rank)
        *mla_bpt = kv_model_bytes_per_token(&m, m.have_dtype ? m.dtype : KV_BF16);
    return 0;
}

struct replay_args {
    struct arg_lit *help, *version, *csv, *quiet, *verbose, *miss_copy;
    struct arg_str *cap_t, *cap_b, *pool_b, *max_chunks, *rotate, *warmup,
                   *us_out, *pol, *bs, *mcfg, *layers, *heads, *hdim,
                   *dtype, *ctx, *salt, *maxses, *us_tok, *us_pair, *tier,
                   *bw_hbm, *bw_host, *bw_disk, *bw_net, *bw_rope, *jobs;
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
    t[n++] = a->bs = arg_str0("B", "block-size", "N",
                              "prefix caching block size (16)");
    t[n++] = a->mcfg = arg_str0(NULL, "model-config", "FILE",
                                "layers, KV heads, head dim and dtype "
                                "from the model's config.json");
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
    t[n++] = a->quiet = arg_lit0("q", "quiet", "no progress line");
    t[n++] = a->verbose = arg_lit0("v", "verbose",
                                   "timings and memory on stderr");
    t[n++] = a->trace = arg_filen(NULL, NULL, "TRACE", 0, 1,
                                  "trace file (default stdin)");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* Bytes per token of a KV element type named by --dtype: 1, 2 or 4, or 0. */
static int64_t replay_elt(const char *d)
{
    if (!strcmp(d, "fp8") || !strcmp(d, "fp8e4m3") || !strcmp(d, "u8") ||
        !strcmp(d, "i8"))
        return 1;
    if (!strcmp(d, "f16") || !strcmp(d, "bf16") || !strcmp(d, "float16") ||
        !strcmp(d, "bfloat16"))
        return 2;
    if (!strcmp(d, "f32") || !strcmp(d, "float32"))
        return 4;
    return 0;
}

/* The numbers: model geometry (bytes per token), block size, sessions,
 * jobs, costs and the bandwidths of the four tiers. */
static int replay_numbers(const struct replay_args *a, struct opts *o,
                          double bw[4], int64_t *B, int64_t *nj)
{
    int64_t L = 32, H = 8, D = 128, ms = 100000, elt = 2;
    int64_t mla_bpt = 0;   /* an MLA model's latent bytes per token */
    int64_t wu = 0;
    int rc;
    if (a->mcfg->count && (rc = sim_model_config(a->mcfg->sval[0], &L, &H, &D,
                                                 &elt, &mla_bpt)))
        return rc;
    if (a->layers->count || a->heads->count || a->hdim->count ||
        a->dtype->count)
        mla_bpt = 0;       /* explicit geometry: K and V per head */
    if ((rc = kv_opt_i64(a->bs, "--block-size", 1, 1 << 20, B)) ||
        (rc = kv_opt_i64(a->layers, "--layers", 1, 100000, &L)) ||
        (rc = kv_opt_i64(a->heads, "--kv-heads", 1, 100000, &H)) ||
        (rc = kv_opt_i64(a->hdim, "--head-dim", 1, 100000, &D)) ||
        (rc = kv_opt_i64(a->maxses, "--max-sessions", 1, 1000000000, &ms)) ||
        (rc = kv_opt_i64(a->jobs, "-j", 0, 1024, nj)) ||
        (rc = opt_f64(a->us_tok, "--us-per-token", 0, 1e12,
                      &o->sim.cost.us_token)) ||
        (rc = opt_f64(a->us_pair, "--us-per-pair", 0, 1e12,
                      &o->sim.cost.us_pair)) ||
        (rc = opt_f64(a->us_out, "--us-per-output-token", 0, 1e12,
                      &o->sim.cost.us_decode)) ||
        (rc = kv_opt_i64(a->max_chunks, "--max-chunks", 1, INT32_MAX,
                         &o->sim.max_chunks)) ||
        (rc = kv_opt_i64(a->warmup, "--warmup", 0, INT64_MAX, &wu)) ||
        (rc = opt_f64(a->bw_hbm, "--bw-hbm", 1e-9, 1e12, &bw[0])) ||
        (rc = opt_f64(a->bw_host, "--bw-host", 1e-9, 1e12, &bw[1])) ||
        (rc = opt_f64(a->bw_disk, "--bw-disk", 1e-9, 1e12, &bw[2])) ||
        (rc = opt_f64(a->bw_net, "--bw-net", 1e-9, 1e12, &bw[3])) ||
        (rc = opt_f64(a->bw_rope, "--bw-rope", 1e-9, 1e12,
                      &o->sim.cost.bw_rope)))
        return rc;
    if (a->dtype->count && !(elt = replay_elt(a->dtype->sval[0])))
        return kv_usage("--dtype: expected fp8, f16, bf16 or f32, got '%s'",
                        a->dtype->sval[0]);
    o->sim.bytes_per_token = mla_bpt ? (uint64_t)mla_bpt
                                     : (uint64_t)(2 * L * H * D * elt); /* <= 8e15 */
    o->sim.block_size = *B;
    o->sim.max_sessions = (size_t)ms;
    o->sim.warmup = (uint64_t)wu;
    return 0;
}

/* The words: chunk context, salt, tier (and its bandwidth), budgets. */
static int replay_modes(const struct replay_args *a, struct opts *o,
                        const double bw[4], int64_t B)
{
    static const char *const tiers[4] = { "hbm", "host", "disk", "net" };
    const char *cx = a->ctx->count ? a->ctx->sval[0] : "sys";
    const char *st = a->salt->count ? a->salt->sval[0] : "none";
    int ti = 0;
    if (!strcmp(cx, "sys"))
        o->sim.ctx_sys = 1;
    else if (!strcmp(cx, "isolated") || !strcmp(cx, "none"))
        o->sim.ctx_sys = 0;
    else
        return kv_usage("--chunk-context: expected sys or isolated "
                        "(none), got '%s'", cx);
    if (!strcmp(st, "tenant"))
        o->sim.salt_tenant = 1;
    else if (strcmp(st, "none"))
        return kv_usage("--salt: expected none or tenant, got '%s'", st);
    if (a->tier->count) {
        for (ti = 0; ti < 4 && strcmp(a->tier->sval[0], tiers[ti]); ti++)
            ;
        if (ti == 4)
            return kv_usage("--tier: expected hbm, host, disk or net, got "
                            "'%s'", a->tier->sval[0]);
    }
    o->sim.cost.bw_load = bw[ti];
    o->tier = tiers[ti];
    if (a->rotate->count) {
        if (!strcmp(a->rotate->sval[0], "always"))
            o->sim.rotate_always = 1;
        else if (strcmp(a->rotate->sval[0], "moved"))
            return kv_usage("--rotate: expected moved or always, got '%s'",
                            a->rotate->sval[0]);
    }
    o->sim.miss_copy = a->miss_copy->count > 0;
    if (a->cap_t->count + a->cap_b->count + a->pool_b->count > 1)
        return kv_usage("--capacity-tokens, --capacity-bytes and "
                        "--pool-bytes: give one");
    if (a->cap_t->count)
        return parse_caps(o, a->cap_t->sval[0], "--capacity-tokens", B);
    if (a->pool_b->count)
        return parse_caps(o, a->pool_b->sval[0], "--pool-bytes", B);
    return parse_caps(o, a->cap_b->count ? a->cap_b->sval[0] : "16G",
                      "--capacity-bytes", B);
}

static int replay_main(int argc, char **argv)
{
    struct replay_args a;
    void *table[40];
    int n = replay_args_make(&a, table);
    struct opts o;
    struct kv_err e;
    int64_t B = 16, nj = 0;
    double bw[4] = { 1000, 25, 5, 3 };
    int rc;

    kv_setprogname("kvchunk sim");
    memset(&o, 0, sizeof o);
    o.policies = (1u << KV_SIM_NONE) | (1u << KV_SIM_PREFIX) |
                 (1u << KV_SIM_CHUNK) | (1u << KV_SIM_ORACLE);
    o.sim.cost = (struct kv_sim_cost){ 80, 0.0035, 1000, 200, 0 };
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                      "\nReplay a request trace through cache policies at one "
                      "byte budget and print, per policy, hit rates, prefill "
                      "tokens, bytes moved, evictions and modelled TTFT.",
                      "Subcommands: 'kvchunk sim gen' writes a synthetic "
                      "trace, 'kvchunk sim from-split' converts 'kvchunk "
                      "split' output.  See man 1 kvchunk.");
    if (rc >= 0)
        goto done;
    if (a.pol->count &&
        kv_sim_policy_parse(a.pol->sval[0], &o.policies, &e) < 0) {
        rc = kv_usage("--policies: %s", e.msg);
        goto done;
    }
    if ((rc = replay_numbers(&a, &o, bw, &B, &nj)) ||
        (rc = replay_modes(&a, &o, bw, B)))
        goto done;
    o.sim.policies = o.policies | (1u << KV_SIM_NONE);
    o.csv = a.csv->count > 0;
    o.quiet = a.quiet->count > 0;
    o.verbose = a.verbose->count > 0;
    o.jobs = nj ? (int)nj : kv_nproc();
    o.trace = a.trace->count ? a.trace->filename[0] : NULL;
    o.output = a.out->count ? a.out->filename[0] : NULL;
    rc = run(&o);
done:
    arg_freetable(table, (size_t)n);
    return rc;
}

static int sim_main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "gen"))
        return gen_main(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "from-split"))
        return split_main(argc - 1, argv + 1);
    return replay_main(argc, argv);
}

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    /* a file size limit is an error to report, not a signal to die of */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2)
        return kv_usage("missing subcommand");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "sim"))
        return sim_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        usage_all(stdout);
        return kv_close_stdout();
    }
    if (!strcmp(cmd, "--version")) {
        printf("%s (kvtools) %s\n", kv_progname(), KV_VERSION);
        return kv_close_stdout();
    }
    if (!strcmp(cmd, "split"))
        return cmd_split(argc - 1, argv + 1);
    if (!strcmp(cmd, "key"))
        return cmd_key(argc - 1, argv + 1);
    if (!strcmp(cmd, "info"))
        return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "put"))
        return cmd_put(argc - 1, argv + 1);
    if (!strcmp(cmd, "get"))
        return cmd_get(argc - 1, argv + 1);
    if (!strcmp(cmd, "assemble"))
        return cmd_assemble(argc - 1, argv + 1);
    if (!strcmp(cmd, "toy"))
        return cmd_toy(argc - 1, argv + 1);
    if (!strcmp(cmd, "slice"))
        return cmd_slice(argc - 1, argv + 1);
    if (!strcmp(cmd, "selftest-rope"))
        return cmd_selftest(argc - 1, argv + 1);
    static const char *simple[] = {"ls", "stat", "evict", "fsck", "rm", "pin",
                                   "unpin"};
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++)
        if (!strcmp(cmd, simple[i]))
            return simple_store_cmd(argc - 1, argv + 1, simple[i]);
    return kv_usage("unknown subcommand '%s'", cmd);
}
