/* latent.c - MLA models: the softmax scale from config.json and latent
 * chunk moves (see latent.h). */
#include "chunk/latent.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "core/pyjson.h"
#include "chunk/toy.h"

/* yarn_get_mscale of transformers' DeepseekV2/V3: 0.1 * mscale * ln(factor)
 * + 1, evaluated left to right, each operation rounded (two statements,
 * so no compiler fuses the multiply and the add). */
double kv_latent_yarn_mscale(double factor, double mscale)
{
    if (factor <= 1.0)
        return 1.0;
    double p = 0.1 * mscale * log(factor);
    return p + 1.0;
}

double kv_latent_softmax_scale(int64_t qk_head_dim, double mscale)
{
    /* qk_head_dim ** (-0.5) * mscale * mscale, as Python evaluates it:
     * CPython's float power is the C library's pow() */
    double s = pow((double)qk_head_dim, -0.5);
    s = s * mscale;
    return s * mscale;
}

/* An integer at obj[key] (a JSON integer, or a real with an integral
 * value) in [lo, hi]: 0 found, 1 absent or null, -1 error (naming key). */
static int int_at(json_t *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                  struct kv_err *e)
{
    json_t *v = json_object_get(obj, key);
    double d;
    if (!v || json_is_null(v))
        return 1;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))
        d = json_real_value(v);
    else
        return kv_err_set(e, "\"%s\": expected an integer", key);
    if (!(d >= (double)lo && d <= (double)hi))
        return kv_err_set(e, "\"%s\": %.17g is out of range [%lld, %lld]", key, d,
                          (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

/* A number of obj[key] into out: 0 found, 1 absent or null (out
 * untouched), -1 not a number. */
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

/* The object an MLA config's attention keys sit in: the top level when it
 * has kv_lora_rank, else "text_config" when that has it (multimodal
 * configs); NULL when neither does. */
static json_t *mla_top(json_t *root)
{
    json_t *tc = json_object_get(root, "text_config");
    json_t *k = json_object_get(root, "kv_lora_rank");
    if (k && !json_is_null(k))
        return root;
    if (tc && json_is_object(tc)) {
        k = json_object_get(tc, "kv_lora_rank");
        if (k && !json_is_null(k))
            return tc;
    }
    return NULL;
}

/* The RoPE parameters DeepSeek's attention reads its mscale from, as
 * transformers 5 builds config.rope_parameters: a non-empty
 * "rope_scaling", else "rope_parameters"; NULL when neither is an
 * object. */
static json_t *scaling_of(json_t *top)
{
    json_t *sc = json_object_get(top, "rope_scaling");
    if (!sc || !json_is_object(sc) || json_object_size(sc) == 0)
        sc = json_object_get(top, "rope_parameters");
    return sc && json_is_object(sc) ? sc : NULL;
}

/* The YaRN mscale of DeepSeek's softmax scale (transformers'
 * yarn_apply_mscale): yarn_get_mscale(factor, mscale_all_dim) when the
 * rope type ("rope_type", else "type") is not "default" and
 * mscale_all_dim is nonzero, else 1. */
static int scale_mscale(json_t *top, double *mscale, struct kv_err *e)
{
    json_t *sc = scaling_of(top);
    *mscale = 1.0;
    if (!sc)
        return 0;
    json_t *t = json_object_get(sc, "rope_type");
    if (!t || json_is_null(t))
        t = json_object_get(sc, "type");
    if (t && !json_is_null(t) && !json_is_string(t))
        return kv_err_set(e, "rope_scaling: \"rope_type\": expected a string");
    const char *type = t && json_is_string(t) ? json_string_value(t) : "default";
    double factor = 0.0, ms_all = 0.0;
    if (num(sc, "mscale_all_dim", &ms_all) < 0 || !isfinite(ms_all))
        return kv_err_set(e, "rope_scaling: \"mscale_all_dim\" must be a finite number");
    if (!strcmp(type, "default") || ms_all == 0.0)
        return 0;
    int rc = num(sc, "factor", &factor);
    if (rc == 1)
        return kv_err_set(e, "rope_scaling: \"mscale_all_dim\" needs a \"factor\"");
    if (rc < 0 || !(factor > 0) || !isfinite(factor))
        return kv_err_set(e, "rope_scaling: \"factor\": expected a positive number");
    *mscale = kv_latent_yarn_mscale(factor, ms_all);
    return 0;
}

/* What one MLA attention layer needs of the config at top: Dl, R, P, Vd,
 * the heads (0 when absent), the dtype and the softmax scale.  strict: P
 * and Vd are required (attention); else absent ones are 0 and the scale
 * is left 0 without P (a latent cache needs neither). */
static int read_attn(json_t *top, int strict, struct kv_latent *l, struct kv_err *e)
{
    int rc;
    if ((rc = int_at(top, "kv_lora_rank", 1, 1 << 20, &l->kv_lora_rank, e)) != 0)
        return rc < 0 ? -1 : kv_err_set(e, "not an MLA model (no kv_lora_rank)");
    if ((rc = int_at(top, "qk_rope_head_dim", 2, 65536, &l->rope_dim, e)) != 0)
        return rc < 0 ? -1 : kv_err_set(e, "an MLA model needs \"qk_rope_head_dim\"");
    if (l->rope_dim % 2)
        return kv_err_set(e, "qk_rope_head_dim %lld is not an even number >= 2",
                          (long long)l->rope_dim);
    int has_p = (rc = int_at(top, "qk_nope_head_dim", 0, 65536, &l->nope_dim, e)) == 0;
    if (rc < 0 || (!has_p && strict))
        return rc < 0 ? -1 : kv_err_set(e, "an MLA model needs \"qk_nope_head_dim\"");
    if ((rc = int_at(top, "v_head_dim", 1, 65536, &l->v_dim, e)) < 0 || (rc == 1 && strict))
        return rc < 0 ? -1 : kv_err_set(e, "an MLA model needs \"v_head_dim\"");
    if ((rc = int_at(top, "num_attention_heads", 1, 1 << 20, &l->n_heads, e)) < 0 ||
        (rc == 1 && int_at(top, "n_head", 1, 1 << 20, &l->n_heads, e) < 0))
        return -1;
    json_t *d = json_object_get(top, "torch_dtype");
    if (!d || json_is_null(d))
        d = json_object_get(top, "dtype");
    l->dtype = KV_BF16;
    if (d && !json_is_null(d)) {
        const char *s = json_is_string(d) ? json_string_value(d) : "";
        if (!strcmp(s, "bfloat16"))
            l->dtype = KV_BF16;
        else if (!strcmp(s, "float16") || !strcmp(s, "half"))
            l->dtype = KV_F16;
        else if (!strcmp(s, "float32") || !strcmp(s, "float"))
            l->dtype = KV_F32;
        else
            return kv_err_set(e, "\"torch_dtype\": expected bfloat16, float16 or float32");
    }
    if (scale_mscale(top, &l->mscale, e) < 0)
        return -1;
    if (has_p)
        l->softmax_scale = kv_latent_softmax_scale(l->nope_dim + l->rope_dim, l->mscale);
    return 0;
}

/* The JSON text of a config into its root (an object). */
static json_t *load_root(const char *json, size_t len, struct kv_err *e)
{
    json_error_t je;
    json_t *root = kv_pyjson_loadb(json, len, 0, &je);
    if (!root)
        return kv_err_set(e, "line %d, column %d: %s", je.line, je.column, je.text), NULL;
    if (!json_is_object(root)) {
        json_decref(root);
        return kv_err_set(e, "expected a JSON object"), NULL;
    }
    return root;
}

int kv_latent_parse_attn(const char *json, size_t len, struct kv_latent *l,
                         struct kv_err *e)
{
    json_t *root = load_root(json, len, e);
    if (!root)
        return -1;
    struct kv_latent x;
    memset(&x, 0, sizeof x);
    json_t *top = mla_top(root);
    int rc = top ? read_attn(top, 1, &x, e)
                 : kv_err_set(e, "not an MLA model (no kv_lora_rank)");
    json_decref(root);
    if (rc == 0) {
        kv_rope_init(&x.rope, (int)x.rope_dim);
        x.rope.style = KV_ROPE_GPTJ;
        *l = x;
    }
    return rc;
}

/* The file's text: path ("-" stdin), at most max_bytes (0: 16 MiB). */
static int read_text(const char *path, size_t max_bytes, char **buf, size_t *len,
                     struct kv_err *e)
{
    return kv_read_all(path, max_bytes ? max_bytes : (size_t)16 << 20, buf, len, e);
}

int kv_latent_load_attn(const char *path, size_t max_bytes, struct kv_latent *l,
                        struct kv_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    if (read_text(path, max_bytes, &buf, &len, e) < 0)
        return -1;
    int rc = kv_latent_parse_attn(buf, len, l, e);
    free(buf);
    return rc < 0 ? kv_err_prefix(e, "%s", path) : 0;
}

int kv_latent_probe(const char *path, size_t max_bytes, struct kv_err *e)
{
    char *buf = NULL;
    size_t len = 0;
    if (read_text(path, max_bytes, &buf, &len, e) < 0)
        return -1;
    json_t *root = load_root(buf, len, e);
    free(buf);
    if (!root)
        return kv_err_prefix(e, "%s", path);
    int mla = mla_top(root) != NULL;
    json_decref(root);
    return mla;
}

int kv_latent_from_model(const struct kv_model *m, const char *json, size_t len,
                         struct kv_latent *l, struct kv_err *e)
{
    if (!m->kv_lora_rank)
        return kv_err_set(e, "not an MLA model (no kv_lora_rank)");
    json_t *root = load_root(json, len, e);
    if (!root)
        return -1;
    struct kv_latent x;
    memset(&x, 0, sizeof x);
    json_t *top = mla_top(root);
    int rc = top ? read_attn(top, 0, &x, e)
                 : kv_err_set(e, "not an MLA model (no kv_lora_rank)");
    json_decref(root);
    if (rc < 0)
        return -1;
    x.n_layers = m->n_layers;
    x.rope = m->rope;
    x.rope.head_dim = (int)x.rope_dim;
    x.rope.rotary_dim = (int)x.rope_dim;
    x.rope.style = KV_ROPE_GPTJ;
    *l = x;
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
    if (read_text(path, max_bytes, &buf, &len, e) < 0)
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
