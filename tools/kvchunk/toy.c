/* kvchunk toy: the toy projection, token ids -> KV. */
#include "kvchunk.h"

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
    if (hq && ql < 0) {
        /* the KV does not depend on the query heads */
        free_table(&t);
        return kv_usage("--heads: the query heads of --q LAYER; the KV has "
                        "none");
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
