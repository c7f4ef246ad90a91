/* latent.c - MLA models: the softmax scale from config.json and latent
 * chunk moves (see latent.h). */
#include "chunk/latent.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "chunk/toy.h"

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

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-sqrt 3, sqrt 3) from (seed, layer, token, dim). */
static double toy_val(uint64_t seed, int64_t l, int32_t tok, int64_t d)
{
    uint64_t z = mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)l * 0xd1b54a32d192ed03ull +
                     (uint64_t)(uint32_t)tok * 0x8cb92ba72f3d8dd7ull + (uint64_t)d);
    return ((double)(mix(z) >> 11) * 0x1p-52 - 1.0) * 1.7320508075688772;
}

int kv_latent_toy(const struct kv_rope *r, int64_t L, int64_t Dl, uint64_t seed,
                  const int32_t *tok, const int64_t *pos, size_t n, enum kv_dtype dt,
                  size_t max_bytes, struct kv_tensor *out, struct kv_err *e)
{
    int64_t R = r->head_dim, D = Dl + R;
    int64_t shape[3] = {L, (int64_t)n, D};
    struct kv_tensor x;
    kv_tensor_init(&x);
    if (dt != KV_BF16 && dt != KV_F16 && dt != KV_F32)
        return kv_err_set(e, "latent chunks are f16, bf16 or f32, not %s", kv_dtype_name(dt));
    if (L < 1 || Dl < 1 || R < 2 || kv_rope_check(r, e) < 0)
        return L < 1 || Dl < 1 || R < 2 ? kv_err_set(e, "bad latent geometry") : -1;
    double *inv = malloc((size_t)R * sizeof *inv), *kp = malloc((size_t)R * sizeof *kp);
    int rc = -1;
    if (!inv || !kp) {
        kv_err_set(e, "out of memory");
        goto out;
    }
    if (kv_rope_inv_freq(r, inv, e) < 0 || kv_tensor_alloc(&x, dt, 3, shape, max_bytes, e) < 0)
        goto out;
    double ms = kv_rope_mscale(r);
    for (int64_t l = 0; l < L; l++) {
        for (size_t t = 0; t < n; t++) {
            size_t base = ((size_t)l * n + t) * (size_t)D;
            for (int64_t d = 0; d < Dl; d++)
                kv_toy_store(dt, x.data, base + (size_t)d, toy_val(seed, l, tok[t], d));
            for (int64_t k = 0; k < R; k++)
                kp[k] = toy_val(seed, l, tok[t], Dl + k);
            kv_rope_apply_f64(r, inv, pos[t], ms, kp);
            for (int64_t k = 0; k < R; k++)
                kv_toy_store(dt, x.data, base + (size_t)(Dl + k), kp[k]);
        }
    }
    kv_tensor_move(out, &x);
    rc = 0;
out:
    free(inv);
    free(kp);
    kv_tensor_release(&x);
    return rc;
}
