/* chunk_toy.c - kvchunk toy's checks and projection (chunk_toy.h). */
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "chunk/chunk_toy.h"
#include "chunk/latent.h"
#include "chunk/ns_opts.h"

int kv_chunk_toy_load(struct kv_chunk_toy *t,
                      const struct kv_chunk_toy_opts *o, struct kv_err *e)
{
    int64_t sd = 0, hq = 0, ed = 32;
    struct kv_toy *m = &t->model;
    memset(t, 0, sizeof *t);
    t->ns = *o->ns;
    t->q_layer = -1;
    if (!o->have_shape)
        return kv_err_set(e, "--shape L,HKV,D is required");
    if (kv_ns_check(&t->ns, e) < 0)
        return -1;
    if (!o->tokens)
        return kv_err_set(e, "--tokens FILE is required");
    if (kv_parse_i64_opt(o->pos, "--pos", 0, INT32_MAX, &t->pos, e) < 0 ||
        kv_parse_i64_opt(o->seed, "--seed", 0, INT64_MAX, &sd, e) < 0 ||
        kv_parse_i64_opt(o->heads, "--heads", 1, 65536, &hq, e) < 0 ||
        kv_parse_i64_opt(o->q, "--q", 0, 1 << 20, &t->q_layer, e) < 0 ||
        kv_parse_i64_opt(o->embed_dim, "--embed-dim", 1, 65536, &ed, e) < 0 ||
        kv_parse_max_mem(o->max_mem, &t->max_bytes, e) < 0)
        return -1;
    if (t->ns.kv_lora_rank && (t->q_layer >= 0 || hq || o->embed_dim))
        return kv_err_set(e, "--q, --heads and --embed-dim do not apply to "
                          "a latent (MLA) toy");
    if (hq && t->q_layer < 0)   /* the KV does not depend on the query heads */
        return kv_err_set(e, "--heads: the query heads of --q LAYER; the KV "
                          "has none");
    kv_toy_init(m, t->ns.n_layers, hq ? hq : t->ns.n_kv_heads,
                t->ns.n_kv_heads, t->ns.head_dim);
    if (t->ns.kv_lora_rank) {   /* MLA: the latent toy, checked there */
        m->head_dim = t->ns.rope.head_dim;
        m->n_heads = m->n_kv_heads = 1;
    }
    m->seed = (uint64_t)sd;
    m->embed_dim = ed;
    m->rope = t->ns.rope;
    if (kv_toy_check(m, e) < 0)
        return -1;
    if (t->q_layer >= m->n_layers)
        return kv_err_set(e, "--q: layer %lld out of range [0, %lld)",
                          (long long)t->q_layer, (long long)m->n_layers);
    return 0;
}

int kv_chunk_toy_run(const struct kv_chunk_toy *t, const int32_t *tokens,
                     size_t n, struct kv_tensor *out, struct kv_err *e)
{
    const struct kv_namespace *ns = &t->ns;
    int64_t *ps = malloc((n ? n : 1) * sizeof *ps);
    int rc = -1;
    if (!ps)
        return kv_err_set(e, "out of memory");
    if (t->pos + (int64_t)n > INT32_MAX) {
        kv_err_set(e, "--pos %lld: the tokens would end past 2^31",
                   (long long)t->pos);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        ps[i] = t->pos + (int64_t)i;
    if (ns->kv_lora_rank)
        rc = kv_latent_toy(&ns->rope, ns->n_layers, ns->kv_lora_rank,
                           t->model.seed, tokens, ps, n, ns->dtype,
                           t->max_bytes, out, e);
    else if (t->q_layer >= 0)
        rc = kv_toy_q(&t->model, tokens, ps, n, t->q_layer, ns->dtype,
                      t->max_bytes, out, e);
    else
        rc = kv_toy_kv(&t->model, tokens, ps, n, ns->dtype, t->max_bytes,
                       out, e);
done:
    free(ps);
    return rc;
}
