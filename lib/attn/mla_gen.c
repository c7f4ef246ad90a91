/* mla_gen.c - synthetic MLA inputs of a real geometry (see mla.h). */
#include "attn/mla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1) from (seed, tensor, index). */
static double uni(uint64_t seed, uint64_t tensor, uint64_t i)
{
    uint64_t z = mix(seed * 0x9e3779b97f4a7c15ull + tensor * 0xd1b54a32d192ed03ull + i);
    return (double)(mix(z) >> 11) * 0x1p-52 - 1.0;
}

static void store(struct kv_tensor *t, size_t i, double x)
{
    float f = (float)x;
    switch (t->dtype) {
    case KV_BF16: ((uint16_t *)t->data)[i] = kv_f32_to_bf16(f); break;
    case KV_F16: ((uint16_t *)t->data)[i] = kv_f32_to_f16(f); break;
    default: ((float *)t->data)[i] = f;
    }
}

static int fill(struct kv_tensor *t, enum kv_dtype dt, int nd, const int64_t *sh,
                uint64_t seed, uint64_t id, double amp, size_t max_bytes, struct kv_err *e)
{
    if (kv_tensor_alloc(t, dt, nd, sh, max_bytes, e))
        return -1;
    size_t n = kv_tensor_numel(t);
    for (size_t i = 0; i < n; i++)
        store(t, i, amp * uni(seed, id, i));
    return 0;
}

void kv_mla_inputs_release(struct kv_mla_inputs *m)
{
    kv_tensor_release(&m->q); kv_tensor_release(&m->q_absorbed);
    kv_tensor_release(&m->c_kv); kv_tensor_release(&m->k_pe);
    kv_tensor_release(&m->w_uk); kv_tensor_release(&m->w_uv);
    kv_tensor_release(&m->cache); kv_tensor_release(&m->block_table);
}

int kv_mla_gen_inputs(const struct kv_mla_gen *g, size_t max_bytes,
                      struct kv_mla_inputs *out, struct kv_err *e)
{
    struct kv_mla_inputs m;
    memset(&m, 0, sizeof m);
    if (g->B < 1 || g->H < 1 || g->S < 1 || g->Lk < g->S || g->Dl < 1 || g->R < 0 ||
        g->P < 0 || g->Vd < 1 || g->block_size < 1)
        return kv_err_set(e, "MLA geometry out of range");
    int64_t D = g->Dl + g->R, T = g->B * g->S, Tk = g->B * g->Lk;
    int64_t per = (g->Lk + g->block_size - 1) / g->block_size, nb = g->B * per + 1;
    double u = sqrt(3.0), w = sqrt(3.0 / (double)g->Dl);
    int64_t sq[3] = {T, g->H, g->P + g->R}, sc[2] = {Tk, g->Dl}, sp[2] = {Tk, g->R};
    int64_t sk[3] = {g->H, g->Dl, g->P}, sv[3] = {g->H, g->Dl, g->Vd};
    int64_t scache[4] = {nb, g->block_size, 1, D}, sbt[2] = {g->B, per};
    int64_t *perm = NULL;
    /* everything this call holds at once, against max_bytes before any
     * allocation: the eight arrays and the block shuffle */
    const int64_t *shapes[] = {sq, sq, sc, sp, sk, sv, scache, sbt};
    const int nds[] = {3, 3, 2, 2, 3, 3, 4, 2};
    size_t es = kv_dtype_size(g->dtype), total = 0, part;
    for (int i = 0; i < 8; i++) {
        part = i == 7 ? 4 : es;
        for (int k = 0; k < nds[i]; k++) {
            int64_t d = i == 1 && k == 2 ? D : shapes[i][k];
            if (kv_size_mul(part, (size_t)d, &part))
                return kv_err_set(e, "MLA inputs: size overflows");
        }
        if (kv_size_add(total, part, &total))
            return kv_err_set(e, "MLA inputs: size overflows");
    }
    if (kv_size_mul((size_t)nb, sizeof *perm, &part) || kv_size_add(total, part, &total))
        return kv_err_set(e, "MLA inputs: size overflows");
    if (max_bytes && total > max_bytes)
        return kv_err_set(e, "the MLA inputs need %zu bytes, more than the limit of %zu "
                          "(--max-mem)", total, max_bytes);
    if (fill(&m.q, g->dtype, 3, sq, g->seed, 1, u, max_bytes, e) ||
        fill(&m.c_kv, g->dtype, 2, sc, g->seed, 2, u, max_bytes, e) ||
        fill(&m.k_pe, g->dtype, 2, sp, g->seed, 3, u, max_bytes, e) ||
        fill(&m.w_uk, g->dtype, 3, sk, g->seed, 4, w, max_bytes, e) ||
        fill(&m.w_uv, g->dtype, 3, sv, g->seed, 5, w, max_bytes, e) ||
        kv_mla_absorb_q(&m.q, &m.w_uk, g->dtype, max_bytes, &m.q_absorbed, e) ||
        kv_tensor_alloc(&m.cache, g->dtype, 4, scache, max_bytes, e) ||
        kv_tensor_alloc(&m.block_table, KV_I32, 2, sbt, max_bytes, e))
        goto fail;
    perm = malloc((size_t)nb * sizeof *perm);
    if (!perm) {
        kv_err_set(e, "out of memory");
        goto fail;
    }
    /* blocks 1 .. nb-1 shuffled (Fisher-Yates on the seed) */
    for (int64_t i = 0; i < nb - 1; i++)
        perm[i] = i + 1;
    for (int64_t i = nb - 2; i > 0; i--) {
        int64_t k = (int64_t)(mix(g->seed * 31 + (uint64_t)i + 0x5bd1e995ull) % (uint64_t)(i + 1));
        int64_t t = perm[i]; perm[i] = perm[k]; perm[k] = t;
    }
    int32_t *bt = m.block_table.data;
    for (int64_t b = 0; b < g->B; b++) {
        for (int64_t k = 0; k < per; k++)
            bt[b * per + k] = (int32_t)perm[b * per + k];
        for (int64_t j = 0; j < g->Lk; j++) {
            int64_t slot = bt[b * per + j / g->block_size] * g->block_size + j % g->block_size;
            char *row = (char *)m.cache.data + (size_t)(slot * D) * es;
            memcpy(row, (char *)m.c_kv.data + (size_t)((b * g->Lk + j) * g->Dl) * es,
                   (size_t)g->Dl * es);
            memcpy(row + (size_t)g->Dl * es,
                   (char *)m.k_pe.data + (size_t)((b * g->Lk + j) * g->R) * es, (size_t)g->R * es);
        }
    }
    free(perm);
    *out = m;
    return 0;
fail:
    free(perm);
    kv_mla_inputs_release(&m);
    return -1;
}

int kv_mla_gen_index(const struct kv_mla_gen *g, int64_t n_heads, int64_t head_dim,
                     size_t max_bytes, struct kv_tensor *q, struct kv_tensor *k,
                     struct kv_tensor *w, struct kv_err *e)
{
    if (g->B < 1 || g->S < 1 || g->Lk < g->S || n_heads < 1 || head_dim < 1)
        return kv_err_set(e, "indexer geometry out of range");
    int64_t sq[3] = {g->B * g->S, n_heads, head_dim}, sk[2] = {g->B * g->Lk, head_dim};
    int64_t sw[2] = {g->B * g->S, n_heads};
    size_t es = kv_dtype_size(g->dtype), nq, nk, nw, total;
    if (kv_size_mul((size_t)sq[0] * (size_t)n_heads, (size_t)head_dim * es, &nq) ||
        kv_size_mul((size_t)sk[0], (size_t)head_dim * es, &nk) ||
        kv_size_mul((size_t)sw[0] * (size_t)n_heads, sizeof(float), &nw) ||
        kv_size_add(nq, nk, &total) || kv_size_add(total, nw, &total))
        return kv_err_set(e, "indexer inputs: size overflows");
    if (max_bytes && total > max_bytes)
        return kv_err_set(e, "the indexer inputs need %zu bytes, more than the limit of %zu "
                          "(--max-mem)", total, max_bytes);
    struct kv_tensor a, b, c;
    kv_tensor_init(&a);
    kv_tensor_init(&b);
    kv_tensor_init(&c);
    if (fill(&a, g->dtype, 3, sq, g->seed, 11, sqrt(3.0), max_bytes, e) ||
        fill(&b, g->dtype, 2, sk, g->seed, 12, sqrt(3.0), max_bytes, e) ||
        fill(&c, KV_F32, 2, sw, g->seed, 13, 1.0 / sqrt((double)n_heads), max_bytes, e)) {
        kv_tensor_release(&a);
        kv_tensor_release(&b);
        kv_tensor_release(&c);
        return -1;
    }
    kv_tensor_move(q, &a);
    kv_tensor_move(k, &b);
    kv_tensor_move(w, &c);
    return 0;
}
