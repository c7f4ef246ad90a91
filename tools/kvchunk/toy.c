/* kvchunk toy: the toy projection, token ids -> KV (lib/chunk/chunk_toy). */
#include "kvchunk.h"
#include "chunk/chunk_toy.h"

int cmd_toy(int argc, char **argv)
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
    struct kv_chunk_toy toy;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    struct kv_chunk_toy_opts o = {
        &v.ns, v.have_shape, sval(tokens), sval(pos), sval(seed), sval(heads),
        sval(qlayer), sval(embed), sval(c.max_mem)};
    if (kv_chunk_toy_load(&toy, &o, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    struct kv_tokens tok;
    memset(&tok, 0, sizeof tok);
    if (load_tokens(sval(tokens), "--tokens", toy.max_bytes, &tok, &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    struct kv_tensor x;
    kv_tensor_init(&x);
    if (kv_chunk_toy_run(&toy, tok.ids, tok.n, &x, &e) < 0)
        rc = kv_fail_err(&e);
    else
        rc = kv_write_tensors(sval(oa.out), KV_FMT_AUTO, oa.force->count, &x,
                              1);
    kv_tensor_release(&x);
    kv_tokens_release(&tok);
    free_table(&t);
    return rc;
}
