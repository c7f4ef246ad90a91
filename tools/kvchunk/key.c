/* kvchunk key: the content key of a chunk. */
#include "kvchunk.h"

int cmd_key(int argc, char **argv)
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
        || stdin_once(&ta, NULL, &e) < 0 ||
        context_used(&ta, &v, &e) < 0) {
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
