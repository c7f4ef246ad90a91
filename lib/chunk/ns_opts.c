/* ns_opts.c - a chunk namespace from kvchunk's namespace options. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/cli.h"
#include "chunk/latent.h"
#include "chunk/model.h"
#include "chunk/ns_opts.h"
#include "chunk/rope.h"

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

/* The RoPE head dim of a namespace: k_pe's for latent chunks. */
static int rope_dim(const struct kv_namespace *ns)
{
    return (int)(ns->head_dim - ns->kv_lora_rank);
}

/* A model config's geometry, dtype and RoPE (MLA: latent chunks). */
static int from_config(const char *path, struct kv_namespace *ns,
                       int64_t shape[3], int *have_shape, int *have_dtype,
                       struct kv_err *e)
{
    struct kv_model m;
    if (kv_model_load(path, 0, &m, e) < 0)
        return -1;
    if (m.kv_lora_rank) {
        struct kv_latent L;
        if (kv_latent_load(path, 0, &L, e) < 0)
            return -1;
        ns->dtype = L.dtype;
        *have_dtype = 1;
        shape[0] = L.n_layers;
        shape[1] = 1;
        shape[2] = L.kv_lora_rank + L.rope_dim;
        ns->rope = L.rope;
        ns->kv_lora_rank = L.kv_lora_rank;
        *have_shape = 1;
        return 0;
    }
    if (m.have_dtype) {
        ns->dtype = m.dtype;
        *have_dtype = 1;
    }
    shape[0] = m.n_layers;
    shape[1] = m.n_kv_heads;
    shape[2] = m.head_dim;
    *have_shape = 1;
    ns->rope = m.rope;
    return 0;
}

/* The RoPE options over r (from a config, or the defaults). */
static int rope_options(const struct kv_ns_options *o, struct kv_rope *r,
                        struct kv_err *e)
{
    if (o->rope && kv_rope_parse_style(o->rope, &r->style, e) < 0)
        return -1;
    if (o->rope_theta) {
        double th;
        if (kv_parse_f64(o->rope_theta, "--rope-theta", &th, e) < 0)
            return -1;
        if (!(th > 1) || !isfinite(th))
            return kv_err_set(e, "--rope-theta: expected a number > 1, got "
                              "'%s'", o->rope_theta);
        r->theta = th;
    }
    if (o->rotary_dim) {
        int64_t rd;
        if (kv_parse_i64(o->rotary_dim, "--rotary-dim", 2, 65536, &rd, e) < 0)
            return -1;
        if (rd % 2)
            return kv_err_set(e, "--rotary-dim: expected an even number, "
                              "got %lld", (long long)rd);
        r->rotary_dim = (int)rd;
    }
    if (o->rope_scaling) {
        /* a scaling given here replaces the file's with all its parameters */
        struct kv_rope fresh;
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
        if (kv_rope_parse_scaling(o->rope_scaling, r, e) < 0)
            return -1;
    }
    if (o->nope_layers && kv_rope_parse_nope(o->nope_layers, r, e) < 0)
        return -1;
    return 0;
}

int kv_ns_parse_options(const struct kv_ns_options *o, struct kv_namespace *ns,
                        int *have_shape, int *have_dtype, struct kv_err *e)
{
    int64_t shape[3] = {0, 0, 0};
    memset(ns, 0, sizeof *ns);
    *have_shape = 0;
    *have_dtype = 0;
    ns->model = o->model;
    ns->tokenizer = o->tokenizer;
    ns->lora = o->lora;
    ns->salt = o->salt;
    ns->dtype = KV_BF16;
    kv_rope_init(&ns->rope, 0);
    if (o->model_config &&
        from_config(o->model_config, ns, shape, have_shape, have_dtype, e) < 0)
        return -1;
    if (o->dtype) {
        if (kv_dtype_parse(o->dtype, &ns->dtype, e) < 0)
            return kv_err_prefix(e, "--dtype");
        if (ns->dtype != KV_F16 && ns->dtype != KV_BF16 && ns->dtype != KV_F32)
            return kv_err_set(e, "--dtype: expected f16, bf16 or f32, got "
                              "'%s'", o->dtype);
        *have_dtype = 1;
    }
    if (o->shape) {
        if (parse_shape(o->shape, shape, e) < 0)
            return -1;
        *have_shape = 1;
    }
    ns->n_layers = shape[0];
    ns->n_kv_heads = shape[1];
    ns->head_dim = shape[2];
    ns->rope.head_dim = rope_dim(ns);
    if (rope_options(o, &ns->rope, e) < 0)
        return -1;
    /* a config's NoPE layers past a --shape that keeps fewer layers */
    while (!o->nope_layers && ns->rope.n_nope > 0 &&
           ns->rope.nope_layers[ns->rope.n_nope - 1] >= ns->n_layers)
        ns->rope.n_nope--;
    while (ns->rope.n_local > 0 &&
           ns->rope.local_layers[ns->rope.n_local - 1] >= ns->n_layers)
        ns->rope.n_local--;
    ns->mask = KV_CTX_SYS;
    if (o->chunk_context) {
        if (!strcmp(o->chunk_context, "sys"))
            ns->mask = KV_CTX_SYS;
        else if (!strcmp(o->chunk_context, "none"))
            ns->mask = KV_CTX_NONE;
        else
            return kv_err_set(e, "--chunk-context: expected sys or none, "
                              "got '%s'", o->chunk_context);
    }
    if (o->base_policy && kv_base_policy_parse(o->base_policy, &ns->base, e) < 0)
        return -1;
    return 0;
}

int kv_ns_check(struct kv_namespace *ns, struct kv_err *e)
{
    if (ns->kv_lora_rank && (ns->n_kv_heads != 1 || ns->head_dim <= ns->kv_lora_rank))
        return kv_err_set(e, "--shape: a latent chunk is L,1,%lld + R",
                          (long long)ns->kv_lora_rank);
    ns->rope.head_dim = rope_dim(ns);
    if (ns->rope.n_nope > 0 &&
        ns->rope.nope_layers[ns->rope.n_nope - 1] >= ns->n_layers)
        return kv_err_set(e, "--nope-layers: layer %d, but the model has %lld "
                          "layers", ns->rope.nope_layers[ns->rope.n_nope - 1],
                          (long long)ns->n_layers);
    if (ns->rope.rotary_dim > ns->head_dim)
        return kv_err_set(e, "--rotary-dim: %d is larger than the head dim "
                          "%lld", ns->rope.rotary_dim, (long long)ns->head_dim);
    return kv_rope_check(&ns->rope, e);
}

int kv_ns_from_options(const struct kv_ns_options *o, struct kv_namespace *ns,
                       int *have_shape, struct kv_err *e)
{
    int have_dtype;
    if (kv_ns_parse_options(o, ns, have_shape, &have_dtype, e) < 0)
        return -1;
    if (!*have_shape)
        return kv_err_set(e, "--shape L,HKV,D is required");
    return kv_ns_check(ns, e);
}
