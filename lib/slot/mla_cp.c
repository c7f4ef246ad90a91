/* mla_cp.c - the MLA context-parallel AllGatherKV index map (mla_cp.h). */
#include "slot/mla_cp.h"

#include <stdlib.h>
#include <string.h>

#include "slot/slot.h"

void kv_mla_cp_map_release(struct kv_mla_cp_map *m)
{
    free(m->toks);
    free(m->padded_lens);
    free(m->cu_seq_lens);
    free(m->local_lens);
    free(m->e);
    memset(m, 0, sizeof *m);
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

int kv_mla_cp_build(const struct kv_mla_cp_geom *g, const int64_t *bt, size_t n_rows,
                    size_t n_cols, const int64_t *ctx, size_t n_req,
                    struct kv_mla_cp_map *out, struct kv_err *e)
{
    struct kv_mla_cp_map m;
    memset(&m, 0, sizeof m);
    int64_t B = g->block_size, I = g->interleave;
    if (g->pcp_size < 1 || g->dcp_size < 1 || g->pcp_size > 1024 || g->dcp_size > 1024)
        return kv_err_set(e, "pcp and dcp sizes must be 1 .. 1024");
    int64_t W = g->pcp_size * g->dcp_size, V = I * W;
    if (B < 1 || I < 1 || B % I)
        return kv_err_set(e, "interleave %lld must divide the block size %lld", (long long)I,
                          (long long)B);
    if (g->max_context_chunk < 0 || g->max_context_chunk % V)
        return kv_err_set(e, "max_context_chunk %lld is not a multiple of interleave x "
                          "ranks = %lld (the local chunks would not tile the context)",
                          (long long)g->max_context_chunk, (long long)V);
    if (n_rows < n_req)
        return kv_err_set(e, "the block table has %zu rows for %zu requests", n_rows, n_req);
    int64_t maxctx = 0, total = 0;
    for (size_t b = 0; b < n_req; b++) {
        if (ctx[b] < 0 || ctx[b] > ((int64_t)1 << 40))
            return kv_err_set(e, "context length %lld of request %zu is out of range",
                              (long long)ctx[b], b);
        /* every rank's local sequence must fit its block table row */
        if ((uint64_t)cdiv(ctx[b], V) * (uint64_t)I > (uint64_t)n_cols * (uint64_t)B)
            return kv_err_set(e, "request %zu: %lld context tokens need %lld local rows, the "
                              "block table row holds %zu blocks of %lld", b,
                              (long long)ctx[b], (long long)(cdiv(ctx[b], V) * I), n_cols,
                              (long long)B);
        for (int64_t k = 0; k < cdiv(cdiv(ctx[b], V) * I, B); k++)
            if (bt[b * n_cols + (size_t)k] < 0)
                return kv_err_set(e, "block_table[%zu][%lld] = %lld", b, (long long)k,
                                  (long long)bt[b * n_cols + (size_t)k]);
        maxctx = ctx[b] > maxctx ? ctx[b] : maxctx;
        total += ctx[b];
    }
    int64_t mcc = g->max_context_chunk ? g->max_context_chunk : cdiv(maxctx > 0 ? maxctx : 1, V) * V;
    int64_t cs = mcc / V * I, nc = cdiv(maxctx, mcc);
    size_t ncs = (size_t)(nc > 0 ? nc : 0);
    m.n_req = n_req;
    m.n_chunks = nc;
    m.chunk_size = cs;
    m.toks = calloc(ncs + 1, sizeof *m.toks);
    m.padded_lens = calloc(ncs * n_req + 1, sizeof *m.padded_lens);
    m.cu_seq_lens = calloc(ncs * (n_req + 1) + 1, sizeof *m.cu_seq_lens);
    m.local_lens = calloc(n_req * (size_t)W + 1, sizeof *m.local_lens);
    m.e = calloc((size_t)total + 1, sizeof *m.e);
    if (!m.toks || !m.padded_lens || !m.cu_seq_lens || !m.local_lens || !m.e) {
        kv_mla_cp_map_release(&m);
        return kv_err_set(e, "out of memory (%lld context tokens)", (long long)total);
    }
    for (size_t b = 0; b < n_req; b++)
        kv_slot_cp_local_lens(ctx[b], W, I, m.local_lens + b * (size_t)W);
    struct kv_slot_geom sg;
    memset(&sg, 0, sizeof sg);
    sg.block_size = sg.kernel_block_size = B;
    sg.max_model_len = (int64_t)n_cols * B * W;
    sg.cp_world = W;
    sg.interleave = I;
    sg.virt = KV_SLOT_VIRTUAL_PHYSICAL;
    size_t k = 0;
    for (int64_t c = 0; c < nc; c++) {
        int64_t *pl = m.padded_lens + (size_t)c * n_req, *cu = m.cu_seq_lens + (size_t)c * (n_req + 1);
        for (size_t b = 0; b < n_req; b++) {
            int64_t n = cdiv(ctx[b], V) * I - c * cs;
            pl[b] = n < 0 ? 0 : n > cs ? cs : n;
            m.toks[c] += pl[b];
        }
        int64_t src = 0;
        cu[0] = 0;
        for (size_t b = 0; b < n_req; b++) {
            int64_t dst = cu[b];
            for (int64_t r = 0; r < W; r++) {
                int64_t real = m.local_lens[b * (size_t)W + (size_t)r] - c * cs;
                real = real < 0 ? 0 : real > pl[b] ? pl[b] : real;
                for (int64_t t = 0; t < real; t++) {
                    struct kv_mla_cp_entry *x = &m.e[k++];
                    int64_t j = c * cs + t, owner = 0;
                    x->req = (int64_t)b;
                    x->chunk = c;
                    x->pcp_rank = r / g->dcp_size;
                    x->dcp_rank = r % g->dcp_size;
                    x->local_index = j;
                    x->pos = (j / I) * V + r * I + j % I;
                    sg.cp_rank = r;
                    x->local_slot = kv_slot_of(&sg, bt + b * n_cols, x->pos, &owner, NULL, NULL);
                    x->gathered = r * m.toks[c] + src + t;
                    x->reorg = dst + t;
                }
                dst += real;
            }
            cu[b + 1] = dst;
            src += pl[b];
        }
    }
    m.n = k;
    *out = m;
    return 0;
}
