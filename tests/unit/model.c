/* model.c - config.json reading: each shipped config's geometry, RoPE and
 * bytes per token against values written here by hand from the model's
 * published architecture, and every kind of bad file refused with the key
 * or the place named. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chunk/latent.h"
#include "chunk/model.h"
#include "tap.h"

static const char *top;

struct want {
    const char *file, *type;
    int64_t layers, heads, kv_heads, head_dim;
    enum kv_rope_style style;
    int rotary_dim;          /* the rotary dim kvtools uses */
    double theta;
    enum kv_rope_scaling scaling;
    double factor;
    int64_t orig;            /* llama3/yarn original max positions */
    enum kv_dtype dtype;
    int64_t max_pos, window, lora_rank;
    int64_t bytes;           /* per token, K and V of every layer */
};

/* Bytes per token by hand: layers x 2 (K, V) x KV heads x head dim x dtype
 * size; MLA: layers x (kv_lora_rank + qk_rope_head_dim) x dtype size. */
static const struct want wants[] = {
    {"llama-3.1-8b", "llama", 32, 32, 8, 128, KV_ROPE_NEOX, 128, 500000,
     KV_ROPE_SCALE_LLAMA3, 8, 8192, KV_BF16, 131072, 0, 0, 32 * 2 * 8 * 128 * 2},
    {"qwen2.5-7b", "qwen2", 28, 28, 4, 128, KV_ROPE_NEOX, 128, 1e6,
     KV_ROPE_SCALE_NONE, 0, 0, KV_BF16, 131072, 0, 0, 28 * 2 * 4 * 128 * 2},
    {"qwen2.5-7b-instruct-yarn", "qwen2", 28, 28, 4, 128, KV_ROPE_NEOX, 128, 1e6,
     KV_ROPE_SCALE_YARN, 4, 32768, KV_BF16, 32768, 0, 0, 28 * 2 * 4 * 128 * 2},
    {"mistral-7b-v0.1", "mistral", 32, 32, 8, 128, KV_ROPE_NEOX, 128, 10000,
     KV_ROPE_SCALE_NONE, 0, 0, KV_BF16, 32768, 4096, 0, 32 * 2 * 8 * 128 * 2},
    {"phi-3-mini-4k", "phi3", 32, 32, 32, 96, KV_ROPE_NEOX, 96, 10000,
     KV_ROPE_SCALE_NONE, 0, 0, KV_BF16, 4096, 2047, 0, 32 * 2 * 32 * 96 * 2},
    {"phi-2", "phi", 32, 32, 32, 80, KV_ROPE_NEOX, 32, 10000,
     KV_ROPE_SCALE_NONE, 0, 0, KV_F16, 2048, 0, 0, 32 * 2 * 32 * 80 * 2},
    {"gpt-j-6b", "gptj", 28, 16, 16, 256, KV_ROPE_GPTJ, 64, 10000,
     KV_ROPE_SCALE_NONE, 0, 0, KV_F16, 2048, 0, 0, 28 * 2 * 16 * 256 * 2},
    /* MLA: head dim qk_rope_head_dim, as DeepseekV2Config sets it (not
     * hidden / heads) */
    {"deepseek-v2-lite", "deepseek_v2", 27, 16, 16, 64, KV_ROPE_NEOX, 64, 10000,
     KV_ROPE_SCALE_YARN, 40, 4096, KV_BF16, 163840, 0, 512, 27 * (512 + 64) * 2},
};

static int load(const char *name, struct kv_model *m, struct kv_err *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/configs/%s.json", top, name);
    return kv_model_load(path, 0, m, e);
}

static void check_one(const struct want *w)
{
    struct kv_model m;
    struct kv_err e = {{0}};
    if (load(w->file, &m, &e) < 0) {
        TAP_OK(0, "%s: %s", w->file, e.msg);
        return;
    }
    TAP_OK(!strcmp(m.model_type, w->type) && m.n_layers == w->layers &&
               m.n_heads == w->heads && m.n_kv_heads == w->kv_heads &&
               m.head_dim == w->head_dim,
           "%s: %s, %lld layers, %lld heads, %lld KV heads, head dim %lld", w->file,
           m.model_type, (long long)m.n_layers, (long long)m.n_heads,
           (long long)m.n_kv_heads, (long long)m.head_dim);
    TAP_OK(m.rope.style == w->style && kv_rope_dim(&m.rope) == w->rotary_dim &&
               m.rope.theta == w->theta && m.rope.scaling == w->scaling &&
               (w->scaling == KV_ROPE_SCALE_NONE ||
                (m.rope.factor == w->factor && m.rope.original_max_pos == w->orig)),
           "%s: RoPE style %d, rotary dim %d, theta %g, scaling %d factor %g orig %lld",
           w->file, (int)m.rope.style, kv_rope_dim(&m.rope), m.rope.theta,
           (int)m.rope.scaling, m.rope.factor, (long long)m.rope.original_max_pos);
    TAP_OK(m.have_dtype && m.dtype == w->dtype && m.max_pos == w->max_pos &&
               m.sliding_window == w->window && m.kv_lora_rank == w->lora_rank,
           "%s: %s, max positions %lld, sliding window %lld, kv_lora_rank %lld",
           w->file, kv_dtype_name(m.dtype), (long long)m.max_pos,
           (long long)m.sliding_window, (long long)m.kv_lora_rank);
    int64_t b = kv_model_bytes_per_token(&m, kv_dtype_size(m.dtype));
    TAP_OK(b == w->bytes, "%s: %lld bytes per token (want %lld)", w->file,
           (long long)b, (long long)w->bytes);
}

static void check_details(void)
{
    struct kv_model m;
    struct kv_err e = {{0}};
    int ok = load("llama-3.1-8b", &m, &e) == 0;
    TAP_OK(ok && m.rope.low_freq_factor == 1 && m.rope.high_freq_factor == 4,
           "llama3 low/high frequency factors 1 and 4");
    ok = load("deepseek-v2-lite", &m, &e) == 0;
    /* mscale == mscale_all_dim: the two YaRN mscales cancel */
    TAP_OK(ok && m.rope.attention_factor == 1.0 && m.rope.beta_fast == 32 &&
               m.rope.beta_slow == 1 && m.qk_rope_head_dim == 64,
           "DeepSeek YaRN: attention factor %g (mscale ratio), betas 32/1, rope dim 64",
           m.rope.attention_factor);
    ok = load("qwen2.5-7b-instruct-yarn", &m, &e) == 0;
    TAP_OK(ok && m.rope.attention_factor == 0,
           "plain YaRN keeps the default attention factor 0.1 ln(s) + 1");
    /* transformers' yarn init takes the mscale ratio only when both are
     * nonzero ("if mscale and mscale_all_dim"): a zero mscale_all_dim
     * leaves the default 0.1 ln(factor) + 1, as if it were absent */
    const char ms0[] = "{\"model_type\": \"deepseek_v2\", \"num_hidden_layers\": 2,"
                       " \"num_attention_heads\": 4, \"hidden_size\": 64, \"head_dim\": 16,"
                       " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40,"
                       " \"mscale\": 0.707, \"mscale_all_dim\": 0,"
                       " \"original_max_position_embeddings\": 4096}}";
    ok = kv_model_parse(ms0, strlen(ms0), "ms0", &m, &e) == 0;
    TAP_OK(ok && m.rope.attention_factor == 0 &&
               fabs(kv_rope_mscale(&m.rope) - (0.1 * log(40.0) + 1.0)) < 1e-15,
           "yarn with \"mscale_all_dim\": 0: the default attention factor "
           "0.1 ln(40) + 1 (%s)", ok ? "ok" : e.msg);
    /* DeepSeek's attention ("if mscale_all_dim:") then keeps the plain
     * softmax scale 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) */
    const char mla0[] = "{\"model_type\": \"deepseek_v2\", \"num_hidden_layers\": 2,"
                        " \"num_attention_heads\": 4, \"hidden_size\": 64,"
                        " \"kv_lora_rank\": 32, \"qk_rope_head_dim\": 16,"
                        " \"qk_nope_head_dim\": 48, \"v_head_dim\": 32,"
                        " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40,"
                        " \"mscale\": 1.0, \"mscale_all_dim\": 0,"
                        " \"original_max_position_embeddings\": 4096}}";
    struct kv_latent lat;
    ok = kv_model_parse(mla0, strlen(mla0), "mla0", &m, &e) == 0 &&
         kv_latent_from_model(&m, mla0, strlen(mla0), &lat, &e) == 0;
    TAP_OK(ok && lat.softmax_scale == 1.0 / sqrt(64.0),
           "MLA with \"mscale_all_dim\": 0: softmax scale 1/sqrt(64) (%s)",
           ok ? "ok" : e.msg);
    char buf[1024];
    ok = load("llama-3.1-8b", &m, &e) == 0 && kv_model_describe(&m, buf, sizeof buf) > 0;
    TAP_OK(ok && strstr(buf, "kv_heads: 8\n") && strstr(buf, "bytes_per_token: 131072\n") &&
               strstr(buf, "llama3"),
           "describe names KV heads, llama3 and the bytes per token");
    const char nested[] = "{\"model_type\": \"llava\", \"text_config\": {\"num_hidden_layers\": 2,"
                          " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                          " \"head_dim\": 16, \"rope_parameters\": {\"rope_theta\": 75000,"
                          " \"rope_type\": \"linear\", \"factor\": 2}}}";
    ok = kv_model_parse(nested, strlen(nested), "nested", &m, &e) == 0;
    TAP_OK(ok && m.n_layers == 2 && m.n_kv_heads == 2 && m.head_dim == 16 &&
               m.rope.theta == 75000 && m.rope.scaling == KV_ROPE_SCALE_LINEAR &&
               m.rope.factor == 2 && !strcmp(m.model_type, "llava"),
           "text_config and rope_parameters are read (%s)", ok ? "ok" : e.msg);
}

static void check_bad(void)
{
    static const struct {
        const char *file, *needle;
    } bad[] = {
        {"bad/syntax", "line 4"},
        {"bad/no-layers", "\"num_hidden_layers\""},
        {"bad/type", "\"num_hidden_layers\": expected an integer"},
        {"bad/gqa", "not a multiple of 5 KV heads"},
        {"bad/longrope", "'longrope' is not supported"},
        {"no-such-file", "cannot open"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct kv_model m;
        struct kv_err e = {{0}};
        int rc = load(bad[i].file, &m, &e);
        TAP_OK(rc == -1 && strstr(e.msg, bad[i].needle) &&
                   (strstr(e.msg, bad[i].file) || i == 5),
               "%s refused: %s", bad[i].file, e.msg);
    }
    static const char *const snippets[] = {
        "[]", "", "{\"num_hidden_layers\": 1e400}", "{\"num_hidden_layers\": -3}",
        "{\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8,"
        " \"rope_theta\": 0.5}",
        "{\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8,"
        " \"rotary_dim\": 3}",
        "{\"num_hidden_layers\": 2, \"num_hidden_layers\": 3}",
        "{\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8,"
        " \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8}}",
        "{\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8,"
        " \"torch_dtype\": \"int8\"}",
    };
    int refused = 0;
    for (size_t i = 0; i < sizeof snippets / sizeof snippets[0]; i++) {
        struct kv_model m;
        struct kv_err e = {{0}};
        if (kv_model_parse(snippets[i], strlen(snippets[i]), "x", &m, &e) == -1 && e.msg[0])
            refused++;
        else
            printf("# accepted: %s\n", snippets[i]);
    }
    TAP_OK(refused == (int)(sizeof snippets / sizeof snippets[0]),
           "%d malformed configs refused with a message", refused);
}

int main(void)
{
    top = getenv("KV_TOP");
    if (!top)
        top = ".";
    for (size_t i = 0; i < sizeof wants / sizeof wants[0]; i++)
        check_one(&wants[i]);
    check_details();
    check_bad();
    return tap_done();
}
