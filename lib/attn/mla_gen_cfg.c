/* mla_gen_cfg.c - kvattn gen with an MLA model's config: its options
 * checked against the config, DeepSeek-V3.2's indexer fields, and the set
 * of arrays gen writes into --dir (see mla.h). */
#include "attn/mla.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "chunk/latent.h"
#include "core/cli.h"
#include "core/pyjson.h"

const char *const kv_mla_gen_files[KV_MLA_GEN_FILES] = {
    "q.npy", "q_absorbed.npy", "c_kv.npy", "k_pe.npy", "w_uk.npy", "w_uv.npy",
    "kv_cache.npy", "block_table.npy", "seq_lens", "q_lens", "scale",
    "index_q.npy", "index_k.npy", "index_weights.npy", "index_topk"};

int kv_mla_index_fields(const char *cfg, struct kv_mla_indexer *ix, struct kv_err *e)
{
    static const char *const keys[3] = {"index_n_heads", "index_head_dim", "index_topk"};
    int64_t v3[3] = {0, 0, 0};
    json_error_t je;
    char *buf = NULL;
    size_t len = 0;
    if (kv_read_all(cfg, (size_t)16 << 20, &buf, &len, e) < 0)
        return -1;
    json_t *root = kv_pyjson_loadb(buf, len, 0, &je);
    free(buf);
    if (!root)
        return kv_err_set(e, "'%s': %s", cfg, je.text);
    json_t *o = root, *tc = json_object_get(root, "text_config");
    if (!json_object_get(root, "kv_lora_rank") && json_is_object(tc))
        o = tc;
    int n = 0, rc = 0;
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (!v || json_is_null(v))
            continue;
        n++;
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : 0;
        int64_t hi = i == 2 ? INT32_MAX : 1 << 16;
        if (x < 1 || x > hi) {
            rc = kv_err_set(e, "'%s': %s: expected an integer 1 .. %lld", cfg, keys[i],
                            (long long)hi);
            break;
        }
        v3[i] = (int64_t)x;
    }
    if (rc == 0 && n != 0 && n != 3)
        rc = kv_err_set(e, "'%s': an indexer needs index_n_heads, index_head_dim and "
                        "index_topk, all three", cfg);
    json_decref(root);
    if (rc == 0) {
        ix->n_heads = v3[0];
        ix->head_dim = v3[1];
        ix->topk = v3[2];
    }
    return rc;
}

/* --shape B,S or B,H,S against the config: B, H, S into g. */
static int gen_shape(const struct kv_latent *L, const struct kv_mla_gen_args *a,
                     struct kv_mla_gen *g, struct kv_err *e)
{
    int64_t *sh = NULL;
    size_t nsh = 0;
    if (!a->shape)
        return kv_err_set(e, "--shape B,S or B,H,S is required");
    if (kv_parse_i64_list(a->shape, "--shape", 1, 1 << 20, &sh, &nsh, e))
        return -1;
    if (nsh != 2 && nsh != 3) {
        free(sh);
        return kv_err_set(e, "--shape: expected B,S or B,H,S with an MLA config, got '%s'",
                          a->shape);
    }
    if (nsh == 2 && !L->n_heads) {
        free(sh);
        return kv_err_set(e, "--shape: '%s' has no num_attention_heads: give B,H,S",
                          a->config);
    }
    g->B = sh[0];
    g->H = nsh == 3 ? sh[1] : L->n_heads;
    g->S = sh[nsh - 1];
    free(sh);
    return 0;
}

int kv_mla_gen_prepare(const struct kv_latent *L, const struct kv_mla_gen_args *a,
                       struct kv_mla_gen_plan *p, struct kv_err *e)
{
    struct kv_mla_gen_plan x;
    int64_t seed = 0;
    memset(&x, 0, sizeof x);
    if (gen_shape(L, a, &x.g, e))
        return -1;
    x.g.Lk = a->kv_len ? a->kv_len : x.g.S;
    if (x.g.Lk < x.g.S)
        return kv_err_set(e, "--kv-len: expected at least S = %lld, got %lld",
                          (long long)x.g.S, (long long)x.g.Lk);
    if (a->block_size < 1 || a->block_size > 1 << 16)
        return kv_err_set(e, "--block-size: expected 1..65536, got %lld",
                          (long long)a->block_size);
    if (a->seed && kv_parse_i64(a->seed, "--seed", 0, INT64_MAX, &seed, e))
        return -1;
    x.g.dtype = L->dtype;
    if (a->dtype && (kv_dtype_parse(a->dtype, &x.g.dtype, e) ||
                     !(x.g.dtype == KV_F32 || x.g.dtype == KV_F16 || x.g.dtype == KV_BF16)))
        return kv_err_set(e, "--dtype: expected f32, f16 or bf16, got '%s'", a->dtype);
    if (kv_parse_max_mem(a->max_mem, &x.max_mem, e))
        return -1;
    x.g.Dl = L->kv_lora_rank;
    x.g.R = L->rope_dim;
    x.g.P = L->nope_dim;
    x.g.Vd = L->v_dim;
    x.g.block_size = a->block_size;
    x.g.seed = (uint64_t)seed;
    x.scale = L->softmax_scale;
    *p = x;
    return 0;
}

size_t kv_mla_gen_n_files(const struct kv_mla_gen_plan *p)
{
    return p->index.topk > 0 ? KV_MLA_GEN_FILES : KV_MLA_GEN_FILES - 4;
}

/* The bytes of the eight arrays of kv_mla_gen_inputs (*in) and of the
 * indexer's three (*ix, 0 without one), as they are held at once; -1
 * when a size overflows (the makers then refuse it themselves). */
static int set_bytes(const struct kv_mla_gen_plan *p, size_t *in, size_t *ix)
{
    const struct kv_mla_gen *g = &p->g;
    size_t es = kv_dtype_size(g->dtype);
    int64_t per = (g->Lk + g->block_size - 1) / g->block_size;
    size_t T = (size_t)g->B * (size_t)g->S, Tk = (size_t)g->B * (size_t)g->Lk;
    size_t D = (size_t)(g->Dl + g->R), H = (size_t)g->H, Dl = (size_t)g->Dl;
    size_t nh = (size_t)p->index.n_heads, hd = (size_t)p->index.head_dim;
    const size_t dims[][4] = {
        {T, H, (size_t)(g->P + g->R), es}, {T, H, D, es}, {Tk, Dl, es, 1},
        {Tk, (size_t)g->R, es, 1}, {H, Dl, (size_t)g->P, es}, {H, Dl, (size_t)g->Vd, es},
        {(size_t)(g->B * per + 1), (size_t)g->block_size, D, es},
        {(size_t)g->B, (size_t)per, 4, 1},
        {T, nh, hd, es}, {Tk, hd, es, 1}, {T, nh, 4, 1}};
    *in = *ix = 0;
    for (size_t i = 0; i < (p->index.topk > 0 ? 11u : 8u); i++) {
        size_t x = dims[i][0];
        for (int k = 1; k < 4; k++)
            if (kv_size_mul(x, dims[i][k], &x))
                return -1;
        if (kv_size_add(i < 8 ? *in : *ix, x, i < 8 ? in : ix))
            return -1;
    }
    return 0;
}

int kv_mla_gen_make(const struct kv_mla_gen_plan *p, struct kv_mla_gen_set *s,
                    struct kv_err *e)
{
    size_t in, ix, all;
    memset(s, 0, sizeof *s);
    kv_tensor_init(&s->index_q);
    kv_tensor_init(&s->index_k);
    kv_tensor_init(&s->index_w);
    /* the set is held whole: the inputs and the indexer's together
     * against --max-mem (each alone is refused by its maker) */
    if (p->max_mem && set_bytes(p, &in, &ix) == 0 && in <= p->max_mem &&
        ix <= p->max_mem && (kv_size_add(in, ix, &all) || all > p->max_mem))
        return kv_err_set(e, "the MLA inputs and the indexer's need %zu + %zu bytes, more "
                          "than the limit of %zu (--max-mem)", in, ix, p->max_mem);
    if (kv_mla_gen_inputs(&p->g, p->max_mem, &s->m, e))
        return -1;
    if (p->index.topk > 0 &&
        kv_mla_gen_index(&p->g, p->index.n_heads, p->index.head_dim, p->max_mem,
                         &s->index_q, &s->index_k, &s->index_w, e)) {
        kv_mla_gen_release(s);
        return -1;
    }
    return 0;
}

const struct kv_tensor *kv_mla_gen_tensor(const struct kv_mla_gen_set *s, size_t i)
{
    const struct kv_tensor *ts[KV_MLA_GEN_FILES] = {
        &s->m.q, &s->m.q_absorbed, &s->m.c_kv, &s->m.k_pe, &s->m.w_uk, &s->m.w_uv,
        &s->m.cache, &s->m.block_table, NULL, NULL, NULL,
        &s->index_q, &s->index_k, &s->index_w, NULL};
    return i < KV_MLA_GEN_FILES ? ts[i] : NULL;
}

void kv_mla_gen_release(struct kv_mla_gen_set *s)
{
    kv_mla_inputs_release(&s->m);
    kv_tensor_release(&s->index_q);
    kv_tensor_release(&s->index_k);
    kv_tensor_release(&s->index_w);
}
