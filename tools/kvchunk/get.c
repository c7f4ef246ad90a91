/* kvchunk get: a cached chunk's KV moved to --at (exit 3: miss). */
#include "kvchunk.h"

/* Room under --max-mem (lim) for a moved copy of need bytes beside the
 * blob the read holds in memory (a Redis reply; a dir: store's blob is a
 * mapping of its file).  0, or -1 with e. */
static int room(const struct kv_blob_ref *ref, size_t need, size_t lim,
                struct kv_err *e)
{
    size_t held = ref->map ? 0 : (size_t)ref->meta.header_len +
                                 (size_t)ref->meta.payload_len;
    if (lim && (need > lim || held > lim - need))
        return kv_err_set(e, "the moved KV needs %zu bytes beside the %zu of "
                          "the blob read, more than --max-mem %zu", need,
                          held, lim);
    return 0;
}

/* A latent hit moved to at, written as one .npy [L, T, D] or as text. */
static int write_latent(FILE *f, const struct kv_rope *rope,
                        const struct kv_blob_ref *ref, int64_t at, int text,
                        size_t lim, struct kv_err *e)
{
    struct kv_tensor x;
    int64_t shape[3] = {ref->meta.n_layers, ref->meta.n_tokens, ref->meta.head_dim};
    kv_tensor_init(&x);
    int bad = room(ref, (size_t)ref->meta.payload_len, lim, e) < 0 ||
              kv_tensor_alloc(&x, ref->meta.dtype, 3, shape, 0, e) < 0 ||
              kv_chunk_move(rope, &ref->meta, ref->payload,
                            at - ref->meta.base_pos, x.data,
                            ref->meta.n_tokens, 0, e) < 0 ||
              (text ? kv_text_write(f, &x, e) : kv_npy_write(f, &x, e)) < 0;
    kv_tensor_release(&x);
    return bad ? -1 : 0;
}

/* Write the hit, moved to position at, as one .npy: the header, then per
 * layer the K slab rotated through a small buffer and the V slab copied
 * straight from the blob. */
static int write_moved(FILE *f, const struct kv_rope *rope,
                       const struct kv_blob_ref *ref, int64_t at, size_t lim,
                       struct kv_err *e)
{
    const struct kv_blob_meta *m = &ref->meta;
    if (m->layout == KV_BLOB_LAYOUT_LATENT)
        return write_latent(f, rope, ref, at, 0, lim, e);
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

const char *status_name(int st)
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
 * shape (geometry, dtype, or layout: an MLA latent chunk for a KV
 * namespace, KV for a latent one). */
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
        ref->meta.dtype != v->ns.dtype ||
        (ref->meta.layout == KV_BLOB_LAYOUT_LATENT) !=
            (v->ns.kv_lora_rank != 0)) {
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
        return write_latent(f, rope, ref, pos, 1, lim, e);
    int64_t shape[5] = {ref->meta.n_layers, 2, ref->meta.n_tokens,
                        ref->meta.n_kv_heads, ref->meta.head_dim};
    struct kv_rope_chunk ch = {ref->meta.n_layers, ref->meta.n_tokens,
                               ref->meta.n_kv_heads, ref->meta.head_dim,
                               ref->meta.dtype};
    kv_tensor_init(&x);
    int bad = room(ref, (size_t)ref->meta.payload_len, lim, e) < 0 ||
              kv_tensor_alloc(&x, ref->meta.dtype, 5, shape, lim, e) < 0 ||
              kv_rope_move_kv(rope, &ch, pos - ref->meta.base_pos,
                              ref->payload, x.data, ref->meta.n_tokens, 0,
                              e) < 0 ||
              kv_text_write(f, &x, e) < 0;
    kv_tensor_release(&x);
    return bad ? -1 : 0;
}

int cmd_get(int argc, char **argv)
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
        context_used(&ta, &v, &e) < 0 ||
        (!sval(at) && kv_err_set(&e, "--at POS is required") < 0) ||
        kv_parse_i64(sval(at), "--at", 0, INT32_MAX, &pos, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    double tmo;
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = store_usage(&sa, &tmo)) != 0) {
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
    if ((rc = open_store(&sa, 0, 0, 0, lim, &s)) != 0)
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
        if (write_moved(o.f, &v.ns.rope, &ref, pos, lim, &e) < 0) {
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
