/* latent.c - MLA models: the softmax scale from config.json and latent
 * chunk moves (see latent.h). */
#include "chunk/latent.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"

double kv_latent_yarn_mscale(double factor, double mscale)
{
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* A number of obj[key] into out (absent or null: untouched, 1). */
static int num(json_t *obj, const char *key, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return 1;
    if (!json_is_number(v))
        return -1;
    *out = json_number_value(v);
    return 0;
}

/* The scaling object: rope_scaling, else rope_parameters (newer configs),
 * at the top or in text_config as kv_model_parse reads it. */
static json_t *scaling_of(json_t *root)
{
    json_t *top = root, *tc = json_object_get(root, "text_config");
    if (!json_object_get(root, "num_hidden_layers") && tc && json_is_object(tc))
        top = tc;
    json_t *sc = json_object_get(top, "rope_scaling");
    if (!sc || json_is_null(sc))
        sc = json_object_get(top, "rope_parameters");
    return sc && json_is_object(sc) ? sc : NULL;
}

int kv_latent_from_model(const struct kv_model *m, const char *json, size_t len,
                         struct kv_latent *l, struct kv_err *e)
{
    if (!m->kv_lora_rank)
        return kv_err_set(e, "not an MLA model (no kv_lora_rank)");
    if (m->qk_rope_head_dim < 2 || m->qk_rope_head_dim % 2)
        return kv_err_set(e, "qk_rope_head_dim %lld is not an even number >= 2",
                          (long long)m->qk_rope_head_dim);
    if (!m->v_head_dim)
        return kv_err_set(e, "an MLA model needs \"v_head_dim\"");
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return kv_err_set(e, "line %d, column %d: %s", je.line, je.column, je.text);
    memset(l, 0, sizeof *l);
    l->n_layers = m->n_layers;
    l->n_heads = m->n_heads;
    l->kv_lora_rank = m->kv_lora_rank;
    l->rope_dim = m->qk_rope_head_dim;
    l->nope_dim = m->qk_nope_head_dim;
    l->v_dim = m->v_head_dim;
    l->dtype = m->have_dtype ? m->dtype : KV_BF16;
    l->rope = m->rope;
    l->rope.head_dim = (int)m->qk_rope_head_dim;
    l->rope.rotary_dim = (int)m->qk_rope_head_dim;
    l->rope.style = KV_ROPE_GPTJ;
    l->mscale = 1.0;
    json_t *sc = scaling_of(root);
    int rc = 0;
    if (sc) {
        json_t *t = json_object_get(sc, "rope_type");
        if (!t || json_is_null(t))
            t = json_object_get(sc, "type");
        const char *type = t && json_is_string(t) ? json_string_value(t) : "default";
        double factor = 1.0, ms_all = 0.0;
        if (num(sc, "mscale_all_dim", &ms_all) < 0 || num(sc, "factor", &factor) < 0) {
            rc = kv_err_set(e, "rope_scaling: \"factor\" and \"mscale_all_dim\" must be numbers");
        } else if (strcmp(type, "default") != 0 && ms_all != 0.0) {
            if (!(factor > 0) || !isfinite(factor) || !isfinite(ms_all))
                rc = kv_err_set(e, "rope_scaling: factor %g is not a positive number", factor);
            else
                l->mscale = kv_latent_yarn_mscale(factor, ms_all);
        }
    }
    json_decref(root);
    if (rc)
        return rc;
    l->softmax_scale = 1.0 / sqrt((double)(l->nope_dim + l->rope_dim)) * l->mscale * l->mscale;
    return 0;
}

int kv_latent_load(const char *path, size_t max_bytes, struct kv_latent *l,
                   struct kv_err *e)
{
    struct kv_model m;
    char *buf = NULL;
    size_t len = 0;
    if (kv_model_load(path, max_bytes, &m, e) < 0)
        return -1;
    if (kv_read_all(path, max_bytes ? max_bytes : (size_t)16 << 20, &buf, &len, e) < 0)
        return -1;
    int rc = kv_latent_from_model(&m, buf, len, l, e);
    free(buf);
    return rc < 0 ? kv_err_prefix(e, "%s", path) : 0;
}

int kv_latent_move(const struct kv_rope *r, const struct kv_latent_chunk *c,
                   int64_t delta, const void *src, void *dst, int64_t dst_stride_t,
                   int64_t dst_off, struct kv_err *e)
{
    size_t es = kv_dtype_size(c->dtype), row, chk;
    if (c->dtype != KV_BF16 && c->dtype != KV_F16 && c->dtype != KV_F32)
        return kv_err_set(e, "latent moves need f16, bf16 or f32, not %s",
                          kv_dtype_name(c->dtype));
    if (c->rope_dim != r->head_dim || c->kv_lora_rank < 0)
        return kv_err_set(e, "k_pe has %lld dims, the RoPE %d", (long long)c->rope_dim,
                          r->head_dim);
    if (c->n_layers < 0 || c->n_tokens < 0 || dst_off < 0 ||
        dst_stride_t < dst_off + c->n_tokens)
        return kv_err_set(e, "chunk of %lld tokens does not fit at offset %lld of %lld",
                          (long long)c->n_tokens, (long long)dst_off,
                          (long long)dst_stride_t);
    if (kv_size_mul((size_t)(c->kv_lora_rank + c->rope_dim), es, &row) ||
        kv_size_mul(row, (size_t)dst_stride_t, &chk) ||
        kv_size_mul(chk, (size_t)c->n_layers, &chk))
        return kv_err_set(e, "latent size overflows");
    struct kv_rope_delta d;
    if (kv_rope_delta_init(&d, r, delta, e) < 0)
        return -1;
    size_t nope = (size_t)c->kv_lora_rank * es;
    for (int64_t l = 0; l < c->n_layers; l++) {
        for (int64_t t = 0; t < c->n_tokens; t++) {
            const unsigned char *s = (const unsigned char *)src +
                                     ((size_t)l * (size_t)c->n_tokens + (size_t)t) * row;
            unsigned char *o = (unsigned char *)dst +
                               ((size_t)l * (size_t)dst_stride_t + (size_t)(dst_off + t)) * row;
            if (o != s)
                memmove(o, s, nope);
            if (d.identity || kv_rope_layer_is_nope(r, l))
                memmove(o + nope, s + nope, row - nope);
            else
                kv_rope_rotate(&d, c->dtype, s + nope, o + nope, 1);
        }
    }
    kv_rope_delta_release(&d);
    return 0;
}
