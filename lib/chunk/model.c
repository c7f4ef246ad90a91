/* model.c - a model's geometry and RoPE from its config.json (see model.h).
 *
 * JSON is parsed by Jansson: it reports the line and column of a syntax
 * error, keeps integers apart from reals, and rejects invalid UTF-8,
 * trailing garbage and (as asked here) duplicate keys. */
#include "chunk/model.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pyjson.h"

struct cfg {
    const char *name;       /* file name, for messages */
    json_t *top;            /* the object keys are read from */
    json_t *rope_params;    /* "rope_parameters" (its full_attention
                             * member when keyed by layer type), or NULL */
    json_t *rope_layered;   /* "rope_parameters" itself, or NULL */
    struct kv_err *e;
};

/* The first of keys[] present and not null in obj, and its name. */
static json_t *first(json_t *obj, const char *const *keys, const char **which)
{
    for (; *keys; keys++) {
        json_t *v = json_object_get(obj, *keys);
        if (v && !json_is_null(v)) {
            *which = *keys;
            return v;
        }
    }
    return NULL;
}

/* A number at key (a JSON integer, or a real with an integral value) in
 * [lo, hi] into out; 0 when found, 1 when absent, -1 on error. */
static int get_int(struct cfg *c, json_t *obj, const char *const *keys,
                   int64_t lo, int64_t hi, int64_t *out)
{
    const char *k = NULL;
    json_t *v = first(obj, keys, &k);
    double d;
    if (!v)
        return 1;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)))
        d = json_real_value(v);
    else
        return kv_err_set(c->e, "%s: \"%s\": expected an integer", c->name, k);
    if (!(d >= (double)lo && d <= (double)hi))
        return kv_err_set(c->e, "%s: \"%s\": %.17g is out of range [%lld, %lld]",
                          c->name, k, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

/* A finite number at key in (lo, hi]; 0 found, 1 absent, -1 error. */
static int get_num(struct cfg *c, json_t *obj, const char *const *keys,
                   double lo, double hi, double *out)
{
    const char *k = NULL;
    json_t *v = first(obj, keys, &k);
    if (!v)
        return 1;
    if (!json_is_number(v))
        return kv_err_set(c->e, "%s: \"%s\": expected a number", c->name, k);
    double d = json_number_value(v);
    if (!(d > lo && d <= hi) || !isfinite(d))
        return kv_err_set(c->e, "%s: \"%s\": %.17g is out of range (%g, %g]",
                          c->name, k, d, lo, hi);
    *out = d;
    return 0;
}

/* get_num for a number that may be 0: [0, hi]. */
static int get_num0(struct cfg *c, json_t *obj, const char *const *keys,
                    double hi, double *out)
{
    const char *k = NULL;
    json_t *v = first(obj, keys, &k);
    if (v && json_is_number(v) && json_number_value(v) == 0) {
        *out = 0;
        return 0;
    }
    return get_num(c, obj, keys, 0, hi, out);
}

/* A string at key; 0 found, 1 absent, -1 error. */
static int get_str(struct cfg *c, json_t *obj, const char *const *keys,
                   const char **out)
{
    const char *k = NULL;
    json_t *v = first(obj, keys, &k);
    if (!v)
        return 1;
    if (!json_is_string(v))
        return kv_err_set(c->e, "%s: \"%s\": expected a string", c->name, k);
    *out = json_string_value(v);
    return 0;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* rc of a get_*: a missing key (1) becomes an error naming it. */
static int need(struct cfg *c, int rc, const char *what)
{
    if (rc == 1)
        return kv_err_set(c->e, "%s: no \"%s\"", c->name, what);
    return rc;
}

/* Layers, heads, KV heads, hidden size, head dim. */
static int read_geometry(struct cfg *c, struct kv_model *m)
{
    json_t *t = c->top;
    int rc;
    if (need(c, get_int(c, t, KEYS("num_hidden_layers", "n_layer", "num_layers"),
                        1, 1 << 20, &m->n_layers), "num_hidden_layers") < 0)
        return -1;
    if (need(c, get_int(c, t, KEYS("num_attention_heads", "n_head"), 1, 1 << 20,
                        &m->n_heads), "num_attention_heads") < 0)
        return -1;
    rc = get_int(c, t, KEYS("num_key_value_heads", "multi_query_group_num"), 1,
                 m->n_heads, &m->n_kv_heads);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        json_t *mq = json_object_get(t, "multi_query");
        m->n_kv_heads = mq && json_is_true(mq) ? 1 : m->n_heads;
    }
    /* MLA caches one latent per layer: its KV heads and head dim play no
     * part (transformers takes head_dim = qk_rope_head_dim, read_extras) */
    json_t *lora = json_object_get(t, "kv_lora_rank");
    int mla = lora && !json_is_null(lora);
    if (m->n_heads % m->n_kv_heads && !mla)
        return kv_err_set(c->e, "%s: %lld attention heads are not a multiple of "
                          "%lld KV heads", c->name, (long long)m->n_heads,
                          (long long)m->n_kv_heads);
    if (get_int(c, t, KEYS("hidden_size", "n_embd", "d_model"), 1, 1 << 24,
                &m->hidden) < 0)
        return -1;
    rc = get_int(c, t, KEYS("head_dim"), 1, 65536, &m->head_dim);
    if (rc < 0)
        return -1;
    if (rc == 1 && !mla) {
        if (!m->hidden)
            return kv_err_set(c->e, "%s: neither \"head_dim\" nor "
                              "\"hidden_size\"", c->name);
        if (m->hidden % m->n_heads)
            return kv_err_set(c->e, "%s: hidden_size %lld is not a multiple of "
                              "%lld heads", c->name, (long long)m->hidden,
                              (long long)m->n_heads);
        m->head_dim = m->hidden / m->n_heads;
    }
    if (m->head_dim > 65536)
        return kv_err_set(c->e, "%s: head dim %lld is larger than 65536",
                          c->name, (long long)m->head_dim);
    return 0;
}

/* dtype, max positions, sliding window, MLA fields. */
static int read_extras(struct cfg *c, struct kv_model *m)
{
    json_t *t = c->top;
    const char *s = NULL;
    int rc = get_str(c, t, KEYS("torch_dtype", "dtype"), &s);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        m->have_dtype = 1;
        if (!strcmp(s, "bfloat16"))
            m->dtype = KV_BF16;
        else if (!strcmp(s, "float16") || !strcmp(s, "half"))
            m->dtype = KV_F16;
        else if (!strcmp(s, "float32") || !strcmp(s, "float"))
            m->dtype = KV_F32;
        else
            return kv_err_set(c->e, "%s: \"torch_dtype\": expected bfloat16, "
                              "float16 or float32, got '%s'", c->name, s);
    }
    if (get_int(c, t, KEYS("max_position_embeddings", "n_positions", "seq_length"),
                1, INT64_C(1) << 40, &m->max_pos) < 0)
        return -1;
    if (get_int(c, t, KEYS("sliding_window"), 1, INT64_C(1) << 40,
                &m->sliding_window) < 0)
        return -1;
    json_t *use = json_object_get(t, "use_sliding_window");
    if (use && json_is_false(use))
        m->sliding_window = 0;
    rc = get_int(c, t, KEYS("kv_lora_rank"), 1, 1 << 20, &m->kv_lora_rank);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        if (need(c, get_int(c, t, KEYS("qk_rope_head_dim"), 2, 65536,
                            &m->qk_rope_head_dim), "qk_rope_head_dim") < 0 ||
            get_int(c, t, KEYS("qk_nope_head_dim"), 0, 65536,
                    &m->qk_nope_head_dim) < 0 ||
            get_int(c, t, KEYS("v_head_dim"), 1, 65536, &m->v_head_dim) < 0)
            return -1;
        if (!m->head_dim)
            m->head_dim = m->qk_rope_head_dim;
    }
    return 0;
}

static double yarn_mscale(double factor, double mscale)
{
    return factor <= 1 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* rope_scaling (or rope_parameters) into m->rope. */
static int read_scaling(struct cfg *c, struct kv_model *m)
{
    json_t *sc = json_object_get(c->top, "rope_scaling");
    const char *type = NULL;
    struct kv_rope *r = &m->rope;
    if ((!sc || json_is_null(sc)) && c->rope_params)
        sc = c->rope_params;
    if (!sc || json_is_null(sc))
        return 0;
    if (!json_is_object(sc))
        return kv_err_set(c->e, "%s: \"rope_scaling\": expected an object or "
                          "null", c->name);
    int rc = get_str(c, sc, KEYS("rope_type", "type"), &type);
    if (rc < 0)
        return -1;
    if (rc == 1 || !strcmp(type, "default"))
        return 0;
    if (!strcmp(type, "linear"))
        r->scaling = KV_ROPE_SCALE_LINEAR;
    else if (!strcmp(type, "dynamic"))
        r->scaling = KV_ROPE_SCALE_DYNAMIC;
    else if (!strcmp(type, "yarn"))
        r->scaling = KV_ROPE_SCALE_YARN;
    else if (!strcmp(type, "llama3"))
        r->scaling = KV_ROPE_SCALE_LLAMA3;
    else
        return kv_err_set(c->e, "%s: \"rope_scaling\": type '%s' is not "
                          "supported (kvtools moves K under none, linear, "
                          "dynamic, yarn and llama3 scaling)", c->name, type);
    if (need(c, get_num(c, sc, KEYS("factor"), 0, 1e6, &r->factor), "factor") < 0)
        return -1;
    if (r->scaling == KV_ROPE_SCALE_DYNAMIC) {
        r->max_pos = m->max_pos;
        if (get_int(c, sc, KEYS("original_max_position_embeddings"), 1,
                    INT64_C(1) << 40, &r->max_pos) < 0)
            return -1;
        if (!r->max_pos)
            return kv_err_set(c->e, "%s: dynamic scaling needs "
                              "\"max_position_embeddings\"", c->name);
    }
    if (r->scaling == KV_ROPE_SCALE_LLAMA3 || r->scaling == KV_ROPE_SCALE_YARN) {
        rc = get_int(c, sc, KEYS("original_max_position_embeddings"), 1,
                     INT64_C(1) << 40, &r->original_max_pos);
        if (rc < 0)
            return -1;
        if (rc == 1 && r->scaling == KV_ROPE_SCALE_LLAMA3)
            return need(c, 1, "original_max_position_embeddings");
        if (rc == 1 && !(r->original_max_pos = m->max_pos))
            return need(c, 1, "original_max_position_embeddings");
    }
    if (r->scaling == KV_ROPE_SCALE_LLAMA3 &&
        (need(c, get_num(c, sc, KEYS("low_freq_factor"), 0, 1e6,
                         &r->low_freq_factor), "low_freq_factor") < 0 ||
         need(c, get_num(c, sc, KEYS("high_freq_factor"), 0, 1e6,
                         &r->high_freq_factor), "high_freq_factor") < 0))
        return -1;
    if (r->scaling == KV_ROPE_SCALE_YARN) {
        double ms = 0, ms_all = 0, af = 0;
        if (get_num(c, sc, KEYS("beta_fast"), 0, 1e6, &r->beta_fast) < 0 ||
            get_num(c, sc, KEYS("beta_slow"), 0, 1e6, &r->beta_slow) < 0 ||
            get_num(c, sc, KEYS("attention_factor"), 0, 1e6, &af) < 0 ||
            /* 0 as transformers reads it: no mscale ratio (the
             * default factor; DeepSeek's softmax scale unadjusted) */
            get_num0(c, sc, KEYS("mscale"), 1e6, &ms) < 0 ||
            get_num0(c, sc, KEYS("mscale_all_dim"), 1e6, &ms_all) < 0)
            return -1;
        json_t *tr = json_object_get(sc, "truncate");
        if (tr && json_is_boolean(tr))
            r->yarn_truncate = json_is_true(tr);
        /* DeepSeek's ratio of two mscales, as vLLM applies it */
        if (af == 0 && ms > 0 && ms_all > 0)
            af = yarn_mscale(r->factor, ms) / yarn_mscale(r->factor, ms_all);
        r->attention_factor = af;
    }
    return 0;
}

/* Add layer l to r's NoPE layers (kept sorted: l grows). */
static int add_nope(struct cfg *c, struct kv_rope *r, int64_t l)
{
    if (r->n_nope >= KV_ROPE_MAX_NOPE)
        return kv_err_set(c->e, "%s: \"no_rope_layers\": more than %d layers "
                          "without RoPE", c->name, KV_ROPE_MAX_NOPE);
    r->nope_layers[r->n_nope++] = (int32_t)l;
    return 0;
}

/* Does some layer use a sliding window ("layer_types" naming one, or a
 * sliding window with Gemma's "sliding_window_pattern")? */
static int has_sliding_layer(struct cfg *c, const struct kv_model *m)
{
    json_t *lt = json_object_get(c->top, "layer_types");
    if (lt && json_is_array(lt)) {
        for (size_t i = 0; i < json_array_size(lt); i++) {
            json_t *t = json_array_get(lt, i);
            if (json_is_string(t) &&
                !strcmp(json_string_value(t), "sliding_attention"))
                return 1;
        }
        return 0;
    }
    return m->sliding_window > 0;
}

/* Is model_type one of names[]? */
static int type_in(const struct kv_model *m, const char *const *names)
{
    for (; *names; names++)
        if (!strcmp(m->model_type, *names))
            return 1;
    return 0;
}

/* How positions enter the model, from its model_type (and Falcon's
 * "alibi"): learned absolute embeddings added to the input (GPT-2, OPT,
 * GPT-Neo, GPT-BigCode, BioGPT, GPT-1), ALiBi biases on the scores with a
 * position-free K (BLOOM, MPT, Falcon with alibi), interleaved pairs
 * (GPT-J, CodeGen; Llama 4, whose RoPE multiplies complex pairs (2i,
 * 2i + 1)), else NeoX's rotate_half. */
static int position_kind(struct cfg *c, struct kv_model *m)
{
    struct kv_rope *r = &m->rope;
    json_t *alibi = json_object_get(c->top, "alibi");
    if (type_in(m, KEYS("gpt2", "opt", "gpt_neo", "gpt_bigcode", "biogpt",
                        "openai-gpt")))
        r->style = KV_ROPE_LEARNED;
    else if (type_in(m, KEYS("bloom", "mpt")) ||
             (alibi && json_is_true(alibi)))
        r->style = KV_ROPE_NONE;
    else if (type_in(m, KEYS("gptj", "codegen", "llama4", "llama4_text")))
        r->style = KV_ROPE_GPTJ;
    return 0;
}

/* Layers without RoPE: "no_rope_layers" holds one flag per layer, 1 where
 * the layer uses RoPE and 0 where it does not (Llama 4, SmolLM3); when it
 * is absent or empty, Llama 4 leaves out every "no_rope_layer_interval"-th
 * layer (default 4: layers 3, 7, 11, ..). */
static int read_nope(struct cfg *c, struct kv_model *m)
{
    struct kv_rope *r = &m->rope;
    json_t *v = json_object_get(c->top, "no_rope_layers");
    int64_t every = 0;
    r->n_nope = 0;
    if (v && !json_is_null(v) && !json_is_array(v))
        return kv_err_set(c->e, "%s: \"no_rope_layers\": expected a list of "
                          "0 and 1 per layer", c->name);
    if (v && json_is_array(v) && json_array_size(v) > 0) {
        if ((int64_t)json_array_size(v) < m->n_layers)
            return kv_err_set(c->e, "%s: \"no_rope_layers\": %zu flags for "
                              "%lld layers", c->name, json_array_size(v),
                              (long long)m->n_layers);
        for (int64_t l = 0; l < m->n_layers; l++) {
            json_t *f = json_array_get(v, (size_t)l);
            if (!json_is_integer(f) || (json_integer_value(f) != 0 &&
                                        json_integer_value(f) != 1))
                return kv_err_set(c->e, "%s: \"no_rope_layers\": entry %lld "
                                  "is not 0 or 1", c->name, (long long)l);
            if (json_integer_value(f) == 0 && add_nope(c, r, l) < 0)
                return -1;
        }
        return 0;
    }
    if (!type_in(m, KEYS("llama4", "llama4_text")))
        return 0;
    every = 4;
    if (get_int(c, c->top, KEYS("no_rope_layer_interval"), 1, 1 << 20,
                &every) < 0)
        return -1;
    for (int64_t l = every - 1; l < m->n_layers; l += every)
        if (add_nope(c, r, l) < 0)
            return -1;
    return 0;
}

/* The sliding-window layers into r's local layers: those "layer_types"
 * calls "sliding_attention", else all but every "sliding_window_pattern"-th
 * (Gemma 3: 6, layers 5, 11, .. are global). */
static int read_local_layers(struct cfg *c, const struct kv_model *m,
                             struct kv_rope *r)
{
    json_t *lt = json_object_get(c->top, "layer_types");
    r->n_local = 0;
    if (lt && json_is_array(lt)) {
        for (int64_t l = 0; l < m->n_layers && l < (int64_t)json_array_size(lt);
             l++) {
            json_t *t = json_array_get(lt, (size_t)l);
            if (!json_is_string(t) ||
                strcmp(json_string_value(t), "sliding_attention"))
                continue;
            if (r->n_local >= KV_ROPE_MAX_NOPE)
                return kv_err_set(c->e, "%s: \"layer_types\": more than %d "
                                  "sliding layers", c->name, KV_ROPE_MAX_NOPE);
            r->local_layers[r->n_local++] = (int32_t)l;
        }
        return 0;
    }
    int64_t every = 6;
    if (get_int(c, c->top, KEYS("sliding_window_pattern",
                                "_sliding_window_pattern"), 1, 1 << 20,
                &every) < 0)
        return -1;
    for (int64_t l = 0; l < m->n_layers; l++) {
        if ((l + 1) % every == 0)
            continue;
        if (r->n_local >= KV_ROPE_MAX_NOPE)
            return kv_err_set(c->e, "%s: more than %d sliding layers",
                              c->name, KV_ROPE_MAX_NOPE);
        r->local_layers[r->n_local++] = (int32_t)l;
    }
    return 0;
}

/* Gemma 3 gives the sliding-window layers a RoPE of their own
 * ("rope_local_base_freq", or transformers 5's rope_parameters keyed by
 * layer type): base rope_local_base_freq, never scaled, while the global
 * layers have rope_theta and the scaling.  Moves turn each layer with its
 * own RoPE (rope.local_theta, rope.local_layers). */
static int check_local_rope(struct cfg *c, struct kv_model *m)
{
    double local = 0;
    int rc = get_num(c, c->top, KEYS("rope_local_base_freq"), 1, 1e30, &local);
    if (rc < 0)
        return -1;
    json_t *sl = c->rope_layered ? json_object_get(c->rope_layered,
                                                   "sliding_attention") : NULL;
    json_t *fu = c->rope_layered ? json_object_get(c->rope_layered,
                                                   "full_attention") : NULL;
    if (fu && sl && json_is_object(sl)) {
        json_t *tv = json_object_get(sl, "rope_theta");
        json_t *ty = json_object_get(sl, "rope_type");
        if (ty && json_is_string(ty) && strcmp(json_string_value(ty), "default"))
            return kv_err_set(c->e, "%s: \"rope_parameters\": the "
                              "sliding_attention layers' rope_type '%s' is "
                              "not supported", c->name, json_string_value(ty));
        if (tv && (!json_is_number(tv) || !(json_number_value(tv) > 1) ||
                   !isfinite(json_number_value(tv))))
            return kv_err_set(c->e, "%s: \"rope_parameters\": "
                              "sliding_attention: bad rope_theta", c->name);
        local = tv ? json_number_value(tv) : 10000;
        rc = 0;
    }
    if (rc != 0 || !has_sliding_layer(c, m) ||
        (local == m->rope.theta && m->rope.scaling == KV_ROPE_SCALE_NONE))
        return 0;
    m->rope.local_theta = local;
    return read_local_layers(c, m, &m->rope);
}

/* Style, rotary dim, theta, scaling. */
static int read_rope(struct cfg *c, struct kv_model *m)
{
    struct kv_rope *r = &m->rope;
    int64_t rd = 0;
    double f = 0;
    kv_rope_init(r, (int)m->head_dim);
    if (position_kind(c, m) < 0)
        return -1;
    if (r->style == KV_ROPE_NONE || r->style == KV_ROPE_LEARNED)
        return 0;                   /* no rotary fields to read */
    int rc = get_num(c, c->top, KEYS("rope_theta", "rotary_emb_base"), 1, 1e30,
                     &r->theta);
    if (rc < 0 || (rc == 1 && c->rope_params &&
                   get_num(c, c->rope_params, KEYS("rope_theta"), 1, 1e30,
                           &r->theta) < 0))
        return -1;
    /* MLA rotates only its rope part of qk_rope_head_dim dims */
    int64_t dim = m->kv_lora_rank ? m->qk_rope_head_dim : m->head_dim;
    r->head_dim = (int)dim;
    if ((rc = get_int(c, c->top, KEYS("rotary_dim"), 2, dim, &rd)) < 0)
        return -1;
    if (rc == 1) {
        rc = get_num(c, c->top, KEYS("partial_rotary_factor", "rotary_pct"), 0,
                     1, &f);
        if (rc < 0)
            return -1;
        if (rc == 0 && f < 1)
            rd = (int64_t)((double)dim * f);
    }
    if (rd) {
        if (rd % 2 || rd < 2)
            return kv_err_set(c->e, "%s: \"%s\": a rotary dim of %lld, not "
                              "an even number >= 2", c->name,
                              rc == 0 && f > 0 ? "partial_rotary_factor"
                                               : "rotary_dim", (long long)rd);
        r->rotary_dim = (int)rd;
    } else if (dim % 2) {
        /* every dim rotates: the head dim must pair up */
        return kv_err_set(c->e, "%s: \"%s\": %lld is odd, and RoPE turns "
                          "the head dim in pairs (give an even \"rotary_dim\" "
                          "to rotate part of it)", c->name,
                          m->kv_lora_rank ? "qk_rope_head_dim" : "head_dim",
                          (long long)dim);
    }
    if (read_scaling(c, m) < 0 || read_nope(c, m) < 0 ||
        check_local_rope(c, m) < 0)
        return -1;
    return kv_rope_check(r, c->e) < 0 ? kv_err_prefix(c->e, "%s", c->name) : 0;
}

int kv_model_parse(const char *buf, size_t len, const char *name,
                   struct kv_model *m, struct kv_err *e)
{
    json_error_t je;
    struct cfg c = {name, NULL, NULL, NULL, e};
    json_t *root = kv_pyjson_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    const char *mt = NULL;
    int rc = -1;
    memset(m, 0, sizeof *m);
    m->dtype = KV_F32;
    if (!root)
        return kv_err_set(e, "%s: line %d, column %d: %s", name, je.line,
                          je.column, je.text);
    if (!json_is_object(root)) {
        kv_err_set(e, "%s: expected a JSON object", name);
        goto out;
    }
    c.top = root;
    json_t *tc = json_object_get(root, "text_config");
    if (!json_object_get(root, "num_hidden_layers") && tc && json_is_object(tc))
        c.top = tc;
    json_t *rp = json_object_get(c.top, "rope_parameters");
    c.rope_params = rp && json_is_object(rp) ? rp : NULL;
    /* transformers 5 keys them by layer type: the full-attention layers'
     * here, the sliding ones are checked against it (check_local_rope) */
    json_t *full = c.rope_params ? json_object_get(c.rope_params,
                                                   "full_attention") : NULL;
    c.rope_layered = c.rope_params;
    if (full && json_is_object(full))
        c.rope_params = full;
    if (get_str(&c, c.top, KEYS("model_type"), &mt) < 0 ||
        (!mt && get_str(&c, root, KEYS("model_type"), &mt) < 0))
        goto out;
    snprintf(m->model_type, sizeof m->model_type, "%s", mt ? mt : "");
    if (read_geometry(&c, m) < 0 || read_extras(&c, m) < 0 || read_rope(&c, m) < 0)
        goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int kv_model_load(const char *path, size_t max_bytes, struct kv_model *m,
                  struct kv_err *e)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    size_t cap = max_bytes ? max_bytes : (size_t)16 << 20, n = 0;
    char *buf;
    int rc;
    if (!f)
        return kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
    buf = malloc(cap + 1);
    if (!buf) {
        if (f != stdin)
            fclose(f);
        return kv_err_set(e, "%s: out of memory", path);
    }
    n = fread(buf, 1, cap + 1, f);
    rc = ferror(f) ? kv_err_set(e, "cannot read '%s'", path)
         : n > cap ? kv_err_set(e, "%s: larger than %zu bytes", path, cap) : 0;
    if (f != stdin)
        fclose(f);
    if (rc == 0)
        rc = kv_model_parse(buf, n, path, m, e);
    free(buf);
    return rc;
}

int64_t kv_model_bytes_per_token(const struct kv_model *m, size_t elt_bytes)
{
    int64_t per_layer, r;
    if (m->kv_lora_rank)
        per_layer = m->kv_lora_rank + m->qk_rope_head_dim;
    else if (__builtin_mul_overflow(2 * m->n_kv_heads, m->head_dim, &per_layer))
        return -1;
    if (m->n_layers < 0 || per_layer < 0 ||
        __builtin_mul_overflow(m->n_layers, per_layer, &r) ||
        __builtin_mul_overflow(r, (int64_t)elt_bytes, &r))
        return -1;
    return r;
}

int kv_model_describe(const struct kv_model *m, char *buf, size_t len)
{
    char rope[512];
    enum kv_dtype dt = m->have_dtype ? m->dtype : KV_BF16;
    if (kv_rope_describe(&m->rope, rope, sizeof rope) < 0)
        snprintf(rope, sizeof rope, "?");
    int n = snprintf(buf, len,
                     "model_type: %s\nlayers: %lld\nheads: %lld\nkv_heads: %lld\n"
                     "head_dim: %lld\nrope: %s\ndtype: %s%s\n"
                     "max_position_embeddings: %lld\nsliding_window: %lld\n",
                     m->model_type[0] ? m->model_type : "-",
                     (long long)m->n_layers, (long long)m->n_heads,
                     (long long)m->n_kv_heads, (long long)m->head_dim, rope,
                     kv_dtype_name(dt), m->have_dtype ? "" : " (not in the file)",
                     (long long)m->max_pos, (long long)m->sliding_window);
    if (n < 0 || (size_t)n >= len)
        return -1;
    if (m->kv_lora_rank) {
        int k = snprintf(buf + n, len - (size_t)n,
                         "mla: kv_lora_rank=%lld qk_rope_head_dim=%lld "
                         "qk_nope_head_dim=%lld v_head_dim=%lld\n",
                         (long long)m->kv_lora_rank, (long long)m->qk_rope_head_dim,
                         (long long)m->qk_nope_head_dim, (long long)m->v_head_dim);
        if (k < 0 || (size_t)k >= len - (size_t)n)
            return -1;
        n += k;
    }
    int k = snprintf(buf + n, len - (size_t)n, "bytes_per_token: %lld\n",
                     (long long)kv_model_bytes_per_token(m, kv_dtype_size(dt)));
    if (k < 0 || (size_t)k >= len - (size_t)n)
        return -1;
    return n + k;
}
