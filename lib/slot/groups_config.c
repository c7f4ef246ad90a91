/* groups_config.c - stage 1 of the KV-cache groups from a Hugging Face
 * config.json: which cache every layer of the model keeps, per model
 * family, as the vLLM 0.33.0 model file named at each rule builds it.  The
 * block sizes and the grouping are groups.c's (groups_make_specs). */
#include "core/pyjson.h"
#include "slot/groups_impl.h"
#include "slot/groups_models.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jcfg {
    const char *name;
    json_t *top;             /* text_config when the model has one */
    json_t *root;
    struct kv_err *e;
};

/* An integer key of the text config (then of the top level); def when
 * absent or null; min..max checked. */
static int jint(struct jcfg *c, const char *key, int64_t def, int64_t min,
                int64_t max, int64_t *v)
{
    json_t *x = json_object_get(c->top, key);
    if (!x || json_is_null(x))
        x = c->top != c->root ? json_object_get(c->root, key) : NULL;
    if (!x || json_is_null(x)) {
        if (def < min)
            return kv_err_set(c->e, "%s: no '%s'", c->name, key);
        *v = def;
        return 0;
    }
    if (!json_is_integer(x) || json_integer_value(x) < min ||
        json_integer_value(x) > max)
        return kv_err_set(c->e, "%s: '%s': expected an integer in [%lld, "
                          "%lld]", c->name, key, (long long)min,
                          (long long)max);
    *v = json_integer_value(x);
    return 0;
}

/* jint, but a key given as null reads as 0 (None in the config class)
 * where an absent one takes the class's default def. */
static int jint_null(struct jcfg *c, const char *key, int64_t def, int64_t min,
                     int64_t max, int64_t *v)
{
    json_t *x = json_object_get(c->top, key);
    if (!x && c->top != c->root)
        x = json_object_get(c->root, key);
    if (x && json_is_null(x)) {
        *v = 0;
        return 0;
    }
    return jint(c, key, def, min, max, v);
}

static int jhas(struct jcfg *c, const char *key)
{
    json_t *x = json_object_get(c->top, key);
    if (!x && c->top != c->root)
        x = json_object_get(c->root, key);
    return x && !json_is_null(x);
}

static const char *jstr(struct jcfg *c, const char *key)
{
    json_t *x = json_object_get(c->top, key);
    if (!x && c->top != c->root)
        x = json_object_get(c->root, key);
    return x && json_is_string(x) ? json_string_value(x) : NULL;
}

static int dtype_bytes(const char *s)
{
    if (!s)
        return 0;
    if (!strcmp(s, "bfloat16") || !strcmp(s, "float16"))
        return 2;
    if (!strcmp(s, "float32"))
        return 4;
    return -1;
}

/* One string of the layer_types list, or NULL. */
static const char *layer_type(struct jcfg *c, int64_t i, int64_t n,
                              int *bad)
{
    json_t *lt = json_object_get(c->top, "layer_types");
    if (!lt || json_is_null(lt))
        return NULL;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) < n) {
        *bad = 1;
        return NULL;
    }
    json_t *x = json_array_get(lt, (size_t)i);
    if (!json_is_string(x)) {
        *bad = 1;
        return NULL;
    }
    return json_string_value(x);
}

/* The KV heads as vLLM's ModelArchConfigConvertor counts them: the first
 * of n_head_kv, num_kv_heads, num_key_value_heads, multi_query_group_num
 * in the config, else one with multi_query (GPT-BigCode's default), else
 * the config class's own number (cd->Hkv: Gemma 3's 4, Mistral's 8...)
 * or, in a class without one, the query heads H; the model file's own
 * count where it has one:
 * Falcon num_kv_heads with new_decoder_architecture, else one with
 * multi_query (its default); ChatGLM multi_query_group_num with
 * multi_query_attention, else H; DBRX attn_config's kv_n_heads (1 by
 * default). */
static int kv_heads(struct jcfg *c, const struct model_def *md,
                    const struct class_dims *cd, int64_t H, int64_t *hkv)
{
    static const char *const keys[] = { "n_head_kv", "num_kv_heads",
                                        "num_key_value_heads",
                                        "multi_query_group_num", NULL };
    json_t *mq = json_object_get(c->top, "multi_query");
    int multi = mq ? json_is_true(mq) : !strcmp(md->type, "gpt_bigcode");
    if (!strcmp(md->type, "dbrx")) {
        json_t *ac = json_object_get(c->top, "attn_config");
        json_t *x = json_is_object(ac) ? json_object_get(ac, "kv_n_heads")
                                       : NULL;
        *hkv = 1;
        if (x && !json_is_null(x) &&
            (!json_is_integer(x) || json_integer_value(x) < 1 ||
             json_integer_value(x) > 1 << 16))
            return kv_err_set(c->e, "%s: 'attn_config.kv_n_heads': expected an "
                              "integer in [1, 65536]", c->name);
        if (x && json_is_integer(x))
            *hkv = json_integer_value(x);
        return 0;
    }
    if (!strcmp(md->type, "falcon")) {     /* falcon.py */
        json_t *nd = json_object_get(c->top, "new_decoder_architecture");
        if (json_is_true(nd))
            return jint(c, "num_kv_heads", H, 0, 1 << 16, hkv);
        *hkv = mq && json_is_false(mq) ? H : 1;
        return 0;
    }
    if (!strcmp(md->type, "chatglm")) {    /* chatglm.py */
        json_t *m = json_object_get(c->top, "multi_query_attention");
        if (!json_is_true(m)) {
            *hkv = H;
            return 0;
        }
        return jint(c, "multi_query_group_num", -1, 1, 1 << 16, hkv);
    }
    for (const char *const *k = keys; *k; k++)
        if (jhas(c, *k))
            return jint(c, *k, H, 0, 1 << 16, hkv);
    if (!multi && cd && cd->Hkv < 0)
        return kv_err_set(c->e, "%s: no 'num_key_value_heads'", c->name);
    *hkv = multi ? 1 : cd && cd->Hkv ? cd->Hkv : H;
    return 0;
}

/* The sizes every model family shares: the layer count, the head size and
 * KV heads of its attention, the model-level sliding window, the model
 * and cache dtypes, and the bytes of one token of a standard attention
 * layer (K and V, FullAttentionSpec). */
struct dims {
    int64_t L, D, Hkv, window, maxpos, tok;
    int mdt, cdt;
};

/* Reads the sizes of d from the config, under the names transformers
 * gives them or the older ones it maps onto them (attribute_map), a size
 * the config lacks from the config class's defaults; mdt is
 * the model's dtype in bytes, cache_dtype_bytes the cache's (0: the
 * model's). */
static int config_dims(struct jcfg *c, const struct model_def *md, int mdt,
                       int cache_dtype_bytes, struct dims *d)
{
    const struct class_dims *cd = groups_model_class(md->type);
    int64_t H, hidden, head_def = cd ? cd->D : 0;
    const char *kl = jhas(c, "num_hidden_layers") ? "num_hidden_layers"
                     : jhas(c, "n_layer") ? "n_layer" : "num_layers";
    const char *kh = jhas(c, "num_attention_heads") ? "num_attention_heads"
                     : "n_head";
    const char *kd = jhas(c, "hidden_size") ? "hidden_size"
                     : jhas(c, "n_embd") ? "n_embd" : "d_model";
    if (jint(c, kl, cd ? cd->L : -1, 1, 4096, &d->L) < 0 ||
        jint(c, kh, cd ? cd->H : 0, 0, 1 << 16, &H) < 0 ||
        jint(c, kd, cd ? cd->hidden : 0, 0, 1 << 24, &hidden) < 0 ||
        kv_heads(c, md, cd, H, &d->Hkv) < 0 ||
        jint(c, "head_dim", head_def ? head_def : H ? hidden / H : 0, 0, 1 << 20,
             &d->D) < 0 ||
        jint_null(c, "sliding_window", md->window, 0, (int64_t)1 << 40,
                  &d->window) < 0 ||
        jint(c, "max_position_embeddings", 0, 0, (int64_t)1 << 40, &d->maxpos) < 0)
        return -1;
    if (md->flags & MF_HEAD_HIDDEN)
        d->D = H ? hidden / H : 0;
    /* use_sliding_window means something only to the config classes that
     * have it (Qwen's), false by default */
    json_t *usw = json_object_get(c->top, "use_sliding_window");
    if ((md->flags & MF_USW) && !(usw && json_is_true(usw)))
        d->window = 0;
    d->mdt = mdt;
    d->cdt = cache_dtype_bytes ? cache_dtype_bytes : mdt;
    d->tok = 2 * d->Hkv * d->D * d->cdt;
    return 0;
}

/* The latent of an MLA model (DeepSeek V2/V3, Kimi K2) and the indexer
 * of DeepSeek-V3.2; kv_lora_rank 0 when the config has none. */
struct mla {
    int64_t kv_lora, rope_dim, index_topk, index_dim;
};

static int config_mla(struct jcfg *c, const struct model_def *md,
                      struct mla *m)
{
    if (jint_null(c, "kv_lora_rank", md->kv_lora, 0, 1 << 20, &m->kv_lora) < 0 ||
        jint(c, "qk_rope_head_dim", md->rope, 0, 1 << 20, &m->rope_dim) < 0 ||
        jint_null(c, "index_topk", md->topk, 0, 1 << 30, &m->index_topk) < 0 ||
        jint(c, "index_head_dim", 128, 1, 1 << 20, &m->index_dim) < 0)
        return -1;
    /* head_dim, which the class maps onto qk_rope_head_dim, wins, unless
     * it equals qk_nope_head_dim: vLLM (ModelArchConfigConvertor's
     * _get_qk_rope_head_dim) then reads qk_rope_head_dim from the file */
    if ((md->flags & MF_HEAD_ROPE) && jhas(c, "head_dim")) {
        int64_t hd, nope;
        if (jint(c, "head_dim", 0, 0, 1 << 20, &hd) < 0 ||
            jint(c, "qk_nope_head_dim", 192, 0, 1 << 20, &nope) < 0)
            return -1;
        if (hd != nope || !jhas(c, "qk_rope_head_dim"))
            m->rope_dim = hd;
    }
    return 0;
}

/* deepseek_v2.py, DeepseekV2MLAAttention (IndexCache): whether layer i
 * of a model with index_topk keeps an indexer of its own.  With
 * index_topk_pattern, the layers it covers marked 'S' skip it; else
 * layer i skips it unless max(i - index_skip_topk_offset + 1, 0) is a
 * multiple of index_topk_freq (defaults 2 and 1: every layer keeps it).
 * 1 or 0; -1 on a bad key. */
static int index_leader(struct jcfg *c, int64_t i)
{
    json_t *pat = json_object_get(c->top, "index_topk_pattern");
    int64_t freq, offset;
    if (pat && !json_is_null(pat)) {
        if (json_is_string(pat))
            return i >= (int64_t)json_string_length(pat) ||
                   json_string_value(pat)[i] != 'S';
        if (!json_is_array(pat))
            return kv_err_set(c->e, "%s: 'index_topk_pattern': expected a "
                              "string or a list", c->name);
        if (i >= (int64_t)json_array_size(pat))
            return 1;
        json_t *x = json_array_get(pat, (size_t)i);
        return !(json_is_string(x) && !strcmp(json_string_value(x), "S"));
    }
    if (jint(c, "index_topk_freq", 1, 1, 1 << 20, &freq) < 0 ||
        jint(c, "index_skip_topk_offset", 2, -(1 << 20), 1 << 20, &offset) < 0)
        return -1;
    return (i - offset + 1 > 0 ? i - offset + 1 : 0) % freq == 0;
}

/* Layer i's latent spec (latent values, bytes a token), and where a
 * V3.2 indexer is kept on it (index: the model has one; index_leader) the
 * indexer's: fp8 keys with one f32 scale per 128 values, as bytes. */
static int mla_layer(struct jcfg *c, const struct mla *m, int64_t i,
                     int64_t latent, int64_t bytes, int index, struct raw *r,
                     size_t *n)
{
    int64_t ib = m->index_dim + m->index_dim / 128 * 4;
    int lead = index ? index_leader(c, i) : 0;
    if (lead < 0)
        return -1;
    r[(*n)++] = (struct raw){ KV_CACHE_MLA, i, bytes, 0, 0, latent, 1, lead };
    if (lead)
        r[(*n)++] = (struct raw){ KV_CACHE_MLA_INDEXER, i, ib, 0, 0, ib, 1, 0 };
    return 0;
}

/* deepseek_v2.py / mla_attention.py: one latent of kv_lora_rank +
 * qk_rope_head_dim values per token, one head, no V; V3.2 (a config with
 * index_topk) adds the indexer on each layer that keeps one (mla_layer).
 * The latent is the model's attention token. */
static int mla_layers(struct jcfg *c, const struct dims *d,
                      const struct mla *m, struct raw *r, size_t *n,
                      struct model_facts *mf)
{
    int64_t latent = m->kv_lora + m->rope_dim;
    mf->use_mla = 1;
    mf->attn_token_bytes = latent * d->cdt;
    for (int64_t i = 0; i < d->L; i++)
        if (mla_layer(c, m, i, latent, latent * d->cdt, m->index_topk > 0, r, n) < 0)
            return -1;
    return 0;
}

/* dots3_note/nvidia/model.py: layer_types; a sliding_attention layer is
 * MLAAttention with sliding_window_size over the swa_ latent
 * (swa_kv_lora_rank + swa_qk_rope_head_dim: SlidingWindowMLASpec, on the
 * cache block), a full_attention layer DeepSeek-V3.2's sparse MLA with its
 * rows padded to that latent (Dots3NotePaddedMLAAttention, which asserts
 * it is no narrower than kv_lora_rank + qk_rope_head_dim) and, where
 * index_leader keeps it, the indexer.  Its sparse backend supports only
 * the block-outermost layout BLHNC, so vLLM packs the groups. */
static int dots3_note_layers(struct jcfg *c, const struct dims *d,
                             const struct mla *m, struct raw *r, size_t *n,
                             struct model_facts *mf)
{
    int64_t swa_lora, swa_rope, window;
    int bad = 0;
    if (jint(c, "swa_kv_lora_rank", -1, 1, 1 << 20, &swa_lora) < 0 ||
        jint(c, "swa_qk_rope_head_dim", -1, 0, 1 << 20, &swa_rope) < 0 ||
        jint(c, "sliding_window_size", -1, 1, (int64_t)1 << 40, &window) < 0)
        return -1;
    if (m->index_topk < 1)   /* Dots3NoteModel sizes its buffer by it */
        return kv_err_set(c->e, "%s: model_type 'dots3_note' needs "
                          "'index_topk'", c->name);
    int64_t latent = swa_lora + swa_rope;
    if (latent < m->kv_lora + m->rope_dim)
        return kv_err_set(c->e, "%s: the swa_ latent (%lld) is narrower than "
                          "the MLA latent (%lld): vLLM's "
                          "Dots3NotePaddedMLAAttention asserts it is not",
                          c->name, (long long)latent,
                          (long long)(m->kv_lora + m->rope_dim));
    mf->use_mla = 1;
    mf->block_outermost = 1;
    mf->attn_token_bytes = latent * d->cdt;
    for (int64_t i = 0; i < d->L; i++) {
        const char *t = layer_type(c, i, d->L, &bad);
        if (bad || !t || (strcmp(t, "sliding_attention") &&
                          strcmp(t, "full_attention")))
            return kv_err_set(c->e, "%s: 'layer_types': layer %lld: expected "
                              "full_attention or sliding_attention", c->name,
                              (long long)i);
        if (!strcmp(t, "sliding_attention")) {
            r[(*n)++] = (struct raw){ KV_CACHE_MLA_SLIDING, i,
                                      latent * d->cdt, 0, window, latent, 1,
                                      0 };
            continue;
        }
        if (mla_layer(c, m, i, latent, latent * d->cdt, 1, r, n) < 0)
            return -1;
    }
    return 0;
}

/* gpt_oss.py: sliding_window on the even layers, full attention on the
 * odd ones. */
static int gpt_oss_layers(struct jcfg *c, const struct dims *d,
                          struct raw *r, size_t *n)
{
    if (!d->window)
        return kv_err_set(c->e, "%s: model_type 'gpt_oss' needs 'sliding_window'",
                          c->name);
    for (int64_t i = 0; i < d->L; i++)
        r[(*n)++] = (struct raw){ i % 2 == 0 ? KV_CACHE_SLIDING
                                             : KV_CACHE_FULL,
                                  i, d->tok, 0, i % 2 == 0 ? d->window : 0,
                                  d->D, d->Hkv, 0 };
    return 0;
}

/* llama4.py: chunked local attention on the layers with RoPE
 * (no_rope_layers[i] != 0) when attention_chunk_size is set;
 * transformers' default no_rope_layers: every 4th layer NoPE. */
static int llama4_layers(struct jcfg *c, const struct dims *d,
                         struct raw *r, size_t *n)
{
    int64_t chunk, every, L = d->L;
    json_t *nr = json_object_get(c->top, "no_rope_layers");
    if (jint(c, "attention_chunk_size", 0, 0, (int64_t)1 << 40, &chunk) < 0 ||
        jint(c, "no_rope_layer_interval", 4, 1, 1 << 20, &every) < 0)
        return -1;
    if (nr && !json_is_null(nr) &&
        (!json_is_array(nr) ||
         (json_array_size(nr) && (int64_t)json_array_size(nr) < L)))
        return kv_err_set(c->e, "%s: 'no_rope_layers': expected a list of %lld "
                          "integers", c->name, (long long)L);
    for (int64_t i = 0; i < L; i++) {
        int rope;
        if (nr && json_array_size(nr)) {
            json_t *x = json_array_get(nr, (size_t)i);
            if (!json_is_integer(x))
                return kv_err_set(c->e, "%s: 'no_rope_layers': expected integers",
                                  c->name);
            rope = json_integer_value(x) != 0;
        } else {
            rope = (i + 1) % every != 0;
        }
        int local = rope && chunk > 0;
        r[(*n)++] = (struct raw){ local ? KV_CACHE_CHUNKED : KV_CACHE_FULL,
                                  i, d->tok, 0, local ? chunk : 0, d->D, d->Hkv,
                                  0 };
    }
    return 0;
}

/* qwen3_next.py: layer_types (full_attention / linear_attention), else
 * every full_attention_interval-th layer full; the gated delta net's
 * state: a conv state of (2 K + V) * head dims by kernel - 1 and a
 * (V heads, head_v, head_k) state, model dtype. */
static int qwen3_next_layers(struct jcfg *c, const struct dims *d,
                             struct raw *r, size_t *n)
{
    int64_t nk, nv, hk, hv, ker, every;
    int bad = 0;
    if (jint(c, "linear_num_key_heads", -1, 1, 1 << 16, &nk) < 0 ||
        jint(c, "linear_num_value_heads", -1, 1, 1 << 16, &nv) < 0 ||
        jint(c, "linear_key_head_dim", -1, 1, 1 << 16, &hk) < 0 ||
        jint(c, "linear_value_head_dim", -1, 1, 1 << 16, &hv) < 0 ||
        jint(c, "linear_conv_kernel_dim", -1, 2, 1 << 10, &ker) < 0 ||
        jint(c, "full_attention_interval", 4, 1, 1 << 20, &every) < 0)
        return -1;
    int64_t state = ((hk * nk * 2 + hv * nv) * (ker - 1) + nv * hv * hk) *
                    d->mdt;
    for (int64_t i = 0; i < d->L; i++) {
        const char *t = layer_type(c, i, d->L, &bad);
        int full = t ? !strcmp(t, "full_attention") : (i + 1) % every == 0;
        if (bad || (t && !full && strcmp(t, "linear_attention")))
            return kv_err_set(c->e, "%s: 'layer_types': layer %lld: expected "
                              "full_attention or linear_attention", c->name,
                              (long long)i);
        r[(*n)++] = full ? (struct raw){ KV_CACHE_FULL, i, d->tok, 0, 0, d->D,
                                         d->Hkv, 0 }
                         : (struct raw){ KV_CACHE_MAMBA, i, 0, state, 0, 0, 0,
                                         0 };
    }
    return 0;
}

/* nemotron_h.py: hybrid_override_pattern, M = Mamba2, * = attention, -
 * and E (MLP, MoE) keep no cache; the Mamba2 state: conv (heads *
 * head_dim + 2 groups * state) by kernel - 1 in the model dtype, SSM
 * (heads, head_dim, state) in mamba_ssm_cache_dtype (float32 unless the
 * config names another). */
static int nemotron_h_layers(struct jcfg *c, const struct dims *d,
                             struct raw *r, size_t *n)
{
    int64_t mh, mhd, ng, ss, ker;
    const char *pat = jstr(c, "hybrid_override_pattern");
    int sdt = dtype_bytes(jstr(c, "mamba_ssm_cache_dtype"));
    if (!pat || (int64_t)strlen(pat) != d->L)
        return kv_err_set(c->e, "%s: 'hybrid_override_pattern': expected %lld "
                          "characters", c->name, (long long)d->L);
    if (sdt < 0)
        return kv_err_set(c->e, "%s: 'mamba_ssm_cache_dtype': unknown dtype",
                          c->name);
    if (!sdt)
        sdt = 4;
    if (jint(c, "mamba_num_heads", -1, 1, 1 << 16, &mh) < 0 ||
        jint(c, "mamba_head_dim", -1, 1, 1 << 16, &mhd) < 0 ||
        jint(c, "n_groups", -1, 1, 1 << 16, &ng) < 0 ||
        jint(c, "ssm_state_size", -1, 1, 1 << 16, &ss) < 0 ||
        jint(c, "conv_kernel", -1, 2, 1 << 10, &ker) < 0)
        return -1;
    int64_t state = (mh * mhd + 2 * ng * ss) * (ker - 1) * d->mdt +
                    mh * mhd * ss * sdt;
    for (int64_t i = 0; i < d->L; i++) {
        switch (pat[i]) {
        case 'M':
            r[(*n)++] = (struct raw){ KV_CACHE_MAMBA, i, 0, state, 0, 0, 0,
                                      0 };
            break;
        case '*':
            r[(*n)++] = (struct raw){ KV_CACHE_FULL, i, d->tok, 0, 0, d->D,
                                      d->Hkv, 0 };
            break;
        case '-':
        case 'E':
            break;
        default:
            return kv_err_set(c->e, "%s: 'hybrid_override_pattern': unknown layer "
                              "type '%c' at %lld (M, *, -, E)", c->name, pat[i],
                              (long long)i);
        }
    }
    return 0;
}

/* Which layers of an MR_WINDOW model are sliding_attention (sl[i] = 1):
 * the config's layer_types, else the ones its config class fills in (all
 * but every sliding_window_pattern-th layer, Gemma and Cohere 2; Qwen's
 * layers from max_window_layers on, when it has a window); *have = 0 when
 * the model has none (no layer_types at all). */
static int window_types(struct jcfg *c, const struct model_def *md,
                        const struct dims *d, unsigned char *sl, int *have)
{
    int64_t every, mwl = 0;
    int bad = 0, mixed = 0;
    *have = 1;
    if ((md->flags & MF_MWL) &&
        jint(c, "max_window_layers", md->mwl_def, 0, 1 << 20, &mwl) < 0)
        return -1;
    if (json_object_get(c->top, "layer_types")) {
        for (int64_t i = 0; i < d->L; i++) {
            const char *t = layer_type(c, i, d->L, &bad);
            if (bad || !t)
                return kv_err_set(c->e, "%s: 'layer_types': expected %lld "
                                  "strings", c->name, (long long)d->L);
            sl[i] = !strcmp(t, "sliding_attention");
            if (!sl[i] && strcmp(t, "full_attention"))
                return kv_err_set(c->e, "%s: 'layer_types': layer %lld: unknown "
                                  "type '%s' (full_attention, sliding_attention)",
                                  c->name, (long long)i, t);
        }
    } else if (md->every) {
        every = md->every;
        if (!(md->flags & MF_EVERY_FIXED) &&
            jint(c, "sliding_window_pattern", md->every, 1, 1 << 20, &every) < 0)
            return -1;
        for (int64_t i = 0; i < d->L; i++)
            sl[i] = (i + 1) % every != 0;
    } else if (md->flags & MF_MWL) {
        for (int64_t i = 0; i < d->L; i++)
            sl[i] = d->window > 0 && i >= mwl;
    } else if ((md->flags & MF_LT_FILLED) && d->window > 0) {
        return kv_err_set(c->e, "%s: model_type '%s' with a sliding window needs "
                          "'layer_types' (its config class fills them by a rule "
                          "kvslot does not follow)", c->name, md->type);
    } else {
        *have = 0;
    }
    for (int64_t i = 1; *have && i < d->L; i++)
        mixed |= sl[i] != sl[0];
    if ((md->flags & MF_MWL_ASSERT) && mixed && mwl != d->L)
        return kv_err_set(c->e, "%s: 'layer_types': sliding on some layers only, "
                          "with 'max_window_layers' (%lld) not the layer count: "
                          "vLLM's Qwen2Model asserts against it", c->name,
                          (long long)mwl);
    return 0;
}

/* Attention layers, full or sliding.  A model file that reads layer_types
 * per layer (MF_LT_HONOR: llama.py, gemma3.py, the Transformers backend...)
 * gives its sliding_attention layers sliding_window (+ add, Cohere 2's
 * convention); any other gives every layer the model-level window
 * (CacheConfig.sliding_window), which vLLM sets only when the model has no
 * layer_types or all of them slide. */
static int windowed_layers(struct jcfg *c, const struct model_def *md,
                           const struct dims *d, struct raw *r, size_t *n)
{
    unsigned char *sl = calloc((size_t)d->L, 1);
    int have, all = 1;
    if (!sl)
        return kv_err_set(c->e, "out of memory");
    if (window_types(c, md, d, sl, &have) < 0) {
        free(sl);
        return -1;
    }
    for (int64_t i = 0; have && i < d->L; i++)
        all &= sl[i];
    for (int64_t i = 0; i < d->L; i++) {
        int honor = (md->flags & MF_LT_HONOR) && have;
        int slide = (honor ? sl[i] : !have || all) && d->window > 0;
        int64_t w = d->window + (honor ? md->add : 0);
        r[(*n)++] = (struct raw){ slide ? KV_CACHE_SLIDING : KV_CACHE_FULL,
                                  i, d->tok, 0, slide ? w : 0, d->D,
                                  d->Hkv, 0 };
    }
    free(sl);
    return 0;
}

/* minicpm3.py: plain attention over all heads (num_kv_heads = the query
 * heads) of qk_nope_head_dim + qk_rope_head_dim values, not MLA. */
static int minicpm3_layers(struct jcfg *c, const struct model_def *md,
                           struct dims *d, struct raw *r, size_t *n)
{
    const struct class_dims *cd = groups_model_class(md->type);
    int64_t H, nope, rope;
    if (jint(c, "num_attention_heads", cd ? cd->H : -1, 1, 1 << 16, &H) < 0 ||
        jint(c, "qk_nope_head_dim", 64, 0, 1 << 20, &nope) < 0 ||
        jint(c, "qk_rope_head_dim", 32, 0, 1 << 20, &rope) < 0)
        return -1;
    d->Hkv = H;
    d->D = nope + rope;
    d->tok = 2 * d->Hkv * d->D * d->cdt;
    return windowed_layers(c, md, d, r, n);
}

/* Which cache every layer keeps: the model's dtype and type, the sizes
 * all families share, then the family's own rule (the helpers above, each
 * naming the vLLM 0.33.0 model file it follows).  *out gets at most two
 * caches a layer, the caller's to free. */
static int config_layers(struct jcfg *c, struct raw **out, size_t *n_out,
                         struct model_facts *mf, struct kv_groups *g,
                         const struct kv_groups_opts *o)
{
    struct kv_err *e = c->e;
    const char *mt = jstr(c, "model_type");
    const struct model_def *md;
    int mdt = dtype_bytes(jstr(c, "torch_dtype"));
    struct dims d;
    struct mla m = { 0, 0, 0, 0 };
    struct raw *r = NULL;
    size_t n = 0;
    int rc;

    if (!mdt)
        mdt = dtype_bytes(jstr(c, "dtype"));
    if (mdt < 0)
        return kv_err_set(e, "%s: 'torch_dtype': expected bfloat16, float16 "
                          "or float32", c->name);
    if (!mdt)
        mdt = 2;     /* vLLM serves a config without a dtype in bf16/f16 */
    if (!mt)
        return kv_err_set(e, "%s: no 'model_type'", c->name);
    md = groups_model_def(mt);
    if (!md)
        return kv_err_set(e, "%s: model_type '%s' has not been compared with "
                          "vLLM 0.33.0's model files: its caches are not "
                          "derived (see kvslot(1), GROUPS; --kv-groups gives "
                          "them explicitly)", c->name, mt);
    if (md->rule == MR_REFUSED)
        return kv_err_set(e, "%s: model_type '%s': its cache layout is not "
                          "modelled: vLLM builds %s (see kvslot(1), GROUPS)",
                          c->name, mt, md->why);
    snprintf(g->model_type, sizeof g->model_type, "%s", mt);
    if (config_dims(c, md, mdt, o->cache_dtype_bytes, &d) < 0)
        return -1;
    g->n_layers = d.L;
    g->max_model_len = o->max_model_len ? o->max_model_len : d.maxpos;
    r = calloc((size_t)d.L * 2, sizeof *r);
    if (!r)
        return kv_err_set(e, "out of memory");

    if ((md->rule == MR_MLA || md->rule == MR_DOTS3) &&
        config_mla(c, md, &m) < 0)
        goto fail;
    if (md->rule == MR_MLA && m.kv_lora < 1) {
        kv_err_set(e, "%s: model_type '%s' without 'kv_lora_rank': vLLM's "
                   "multi-head attention path for it is not modelled", c->name,
                   mt);
        goto fail;
    }
    switch (md->rule) {
    case MR_DOTS3:
        rc = dots3_note_layers(c, &d, &m, r, &n, mf);
        break;
    case MR_MLA:
        rc = mla_layers(c, &d, &m, r, &n, mf);
        break;
    case MR_GPT_OSS:
        rc = gpt_oss_layers(c, &d, r, &n);
        break;
    case MR_LLAMA4:
        rc = llama4_layers(c, &d, r, &n);
        break;
    case MR_QWEN3_NEXT:
        rc = qwen3_next_layers(c, &d, r, &n);
        break;
    case MR_NEMOTRON_H:
        rc = nemotron_h_layers(c, &d, r, &n);
        break;
    case MR_MINICPM3:
        rc = minicpm3_layers(c, md, &d, r, &n);
        break;
    default:
        rc = windowed_layers(c, md, &d, r, &n);
        break;
    }
    if (!mf->use_mla)
        mf->attn_token_bytes = d.tok;
    if (rc < 0)
        goto fail;
    for (size_t i = 0; i < n; i++)
        if (r[i].kind != KV_CACHE_MAMBA && r[i].token_bytes <= 0) {
            kv_err_set(e, "%s: layer %lld has no KV heads or head size",
                       c->name, (long long)r[i].layer);
            goto fail;
        }
    *out = r;
    *n_out = n;
    return 0;
fail:
    free(r);
    return -1;
}

int kv_groups_from_json(struct kv_groups *g, const char *buf, size_t len,
                        const char *name, const struct kv_groups_opts *o,
                        struct kv_err *e)
{
    json_error_t je;
    struct jcfg c = { name, NULL, NULL, e };
    struct model_facts mf = { 0, 0, 0 };
    struct raw *r = NULL;
    size_t n = 0;
    int rc = -1;

    kv_groups_release(g);
    if (groups_check_opts(o, e) < 0)
        return -1;
    /* as json.load reads it: NaN and Infinity (Nemotron-H's time_step_limit) */
    c.root = kv_pyjson_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!c.root)
        return kv_err_set(e, "%s: line %d, column %d: %s", name, je.line,
                          je.column, je.text);
    if (!json_is_object(c.root)) {
        kv_err_set(e, "%s: expected a JSON object", name);
        goto out;
    }
    c.top = c.root;
    json_t *tc = json_object_get(c.root, "text_config");
    if (!json_object_get(c.root, "num_hidden_layers") && tc &&
        json_is_object(tc))
        c.top = tc;
    if (config_layers(&c, &r, &n, &mf, g, o) < 0)
        goto out;
    struct kv_groups_opts oo = *o;
    oo.max_model_len = g->max_model_len;
    rc = groups_make_specs(g, r, n, &mf, &oo, e);
out:
    free(r);
    json_decref(c.root);
    if (rc < 0)
        kv_groups_release(g);
    return rc;
}

int kv_groups_from_config(struct kv_groups *g, const char *path,
                          const struct kv_groups_opts *o, struct kv_err *e)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    const char *name = strcmp(path, "-") ? path : "<stdin>";
    size_t cap = (size_t)16 << 20, n;
    char *buf;
    int rc;

    kv_groups_release(g);
    if (!f)
        return kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
    buf = malloc(cap + 1);
    if (!buf) {
        if (f != stdin)
            fclose(f);
        return kv_err_set(e, "out of memory");
    }
    n = fread(buf, 1, cap + 1, f);
    rc = ferror(f) ? kv_err_set(e, "cannot read '%s'", name)
         : n > cap ? kv_err_set(e, "%s: larger than %zu bytes", name, cap) : 0;
    if (f != stdin)
        fclose(f);
    if (rc == 0)
        rc = kv_groups_from_json(g, buf, n, name, o, e);
    free(buf);
    return rc;
}
