/* kvchunk put: store a chunk's KV. */
#include "kvchunk.h"
#include "chunk/chunk_put.h"

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

/* The blob's metadata and header for the chunk's KV x computed at p0,
 * stamped with the current time (kv_chunk_blob). */
static int put_blob(const struct nsv *v, const struct kv_tokens *ctx,
                    const struct kv_tokens *tok, const struct kv_tensor *x,
                    int64_t p0, struct kv_blob_meta *m, uint8_t **hdr,
                    struct kv_err *e)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return kv_chunk_blob(&v->ns, ctx->ids, ctx->n, tok->ids, tok->n, x, p0,
                         (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                         m, hdr, e);
}

int cmd_put(int argc, char **argv)
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
        context_used(&ta, &v, &e) < 0 ||
        (!sval(base) && kv_err_set(&e, "--base-pos P0 is required") < 0) ||
        kv_parse_i64(sval(base), "--base-pos", 0, INT32_MAX, &p0, &e) < 0 ||
        (sval(ttl) && kv_parse_i64(sval(ttl), "--ttl", 1, INT32_MAX, &ttl_s,
                                   &e) < 0) ||
        (sval(maxsize) && kv_parse_size(sval(maxsize), &max_size, &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    int do_pin = pin->count > 0;
    double tmo;
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = store_usage(&sa, &tmo)) != 0) {
        free_table(&t);
        return rc;
    }
    /* options of one kind of store only, refused before any work */
    if (store_is_redis(&sa) && (do_pin || max_size)) {
        rc = kv_usage("%s is for dir: stores; a Redis server evicts by its "
                      "own maxmemory-policy", do_pin ? "--pin" : "--max-size");
        free_table(&t);
        return rc;
    }
    if (!store_is_redis(&sa) && ttl_s) {
        rc = kv_usage("--ttl is for redis:// and redis-cluster:// stores; a "
                      "dir: store keeps an entry until evict or rm removes "
                      "it (put --max-size bounds it)");
        free_table(&t);
        return rc;
    }
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
    /* a Redis SET holds the blob twice beside the KV read: the whole
     * value, and the command that carries it */
    if (store_is_redis(&sa) && lim) {
        size_t blob = (size_t)m.header_len + (size_t)m.payload_len;
        if (blob > (lim - x.nbytes) / 2) {
            kv_err_set(&e, "a put to Redis needs %zu bytes (the KV, and the "
                       "%zu-byte blob twice: the value and the command), "
                       "more than --max-mem %zu", x.nbytes + 2 * blob, blob,
                       lim);
            goto fail;
        }
    }
    if ((rc = open_store(&sa, -1, ttl_s, durable->count > 0, lim, &s)) != 0)
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
