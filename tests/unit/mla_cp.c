/* mla_cp.c - the MLA context-parallel AllGatherKV map (lib/slot/mla_cp),
 * proved end to end.
 *
 * For each geometry (PCP x DCP ranks, interleave, block size, context
 * chunking): a latent row per (request, position); every rank's cache
 * written through the context-parallel slot mapping (kv_slot_of on that
 * rank: -1 where another rank owns the token); every rank's chunk buffer
 * loaded as vllm-ascend's mla_cache_load does (the rank's local sequence
 * through the shared block table, padded to the chunk's padded local
 * length); the buffers stacked in rank order (the DCP all-gather inside the
 * PCP one); then the map moves gathered rows to the contiguous layout.
 * Checked: each placed row is bit for bit the latent row of its (request,
 * position); every context token appears once per chunk layout; the map's
 * local slot is the one the rank's slot mapping gave; and absorbed MLA
 * attention over the reorganised chunks, merged by LSE across chunks,
 * equals attention over the original single-rank cache within the sum of
 * the documented bounds.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bound.h"
#include "attn/mla.h"
#include "core/tensor.h"
#include "slot/mla_cp.h"
#include "slot/slot.h"
#include "tap.h"

#define DL 16
#define RD 8
#define D (DL + RD)
#define H 3

static uint64_t rs = 0x1234567ull;
static double urand(void)
{
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

/* Attention of one query set q [n_req, H, D] over per-request contiguous
 * rows (rows[b] of len[b]), as the absorbed form with block size 1. */
static int attend(const struct kv_tensor *q, const float *rows, const int64_t *start,
                  const int64_t *len, size_t n_req, double scale, struct kv_tensor *o,
                  struct kv_tensor *l)
{
    struct kv_err e = {{0}};
    int64_t total = 1, cols = 1;
    for (size_t b = 0; b < n_req; b++) {
        total = start[b] + len[b] > total ? start[b] + len[b] : total;
        cols = len[b] > cols ? len[b] : cols;
    }
    int64_t cs[4] = {total, 1, 1, D};
    struct kv_tensor cache;
    kv_tensor_init(&cache);
    kv_tensor_alloc(&cache, KV_F32, 4, cs, 0, &e);
    memcpy(cache.data, rows, cache.nbytes);
    int64_t *bt = calloc(n_req * (size_t)cols, sizeof *bt);
    for (size_t b = 0; b < n_req; b++)
        for (int64_t j = 0; j < len[b]; j++)
            bt[b * (size_t)cols + (size_t)j] = start[b] + j;
    struct kv_mla_req r;
    memset(&r, 0, sizeof r);
    r.q = q; r.cache = &cache; r.block_table = bt; r.bt_rows = n_req; r.bt_cols = (size_t)cols;
    r.seq_lens = len; r.n_seq_lens = n_req; r.kv_lora_rank = DL; r.scale = scale;
    r.out_dtype = KV_F32; r.n_threads = 2;
    int rc = kv_mla_absorbed(&r, o, l, &e);
    if (rc)
        printf("# attend: %s\n", e.msg);
    free(bt);
    kv_tensor_release(&cache);
    return rc;
}

static void run(int64_t pcp, int64_t dcp, int64_t I, int64_t B, int64_t mcc_mult,
                const int64_t *ctx, size_t n_req)
{
    char name[128];
    struct kv_err e = {{0}};
    int64_t W = pcp * dcp, V = I * W;
    snprintf(name, sizeof name, "pcp %lld dcp %lld interleave %lld block %lld chunk %lld",
             (long long)pcp, (long long)dcp, (long long)I, (long long)B,
             (long long)(mcc_mult * V));
    /* latent rows, per request in position order */
    int64_t *start = calloc(n_req, sizeof *start), total = 0, maxctx = 0;
    for (size_t b = 0; b < n_req; b++) {
        start[b] = total;
        total += ctx[b];
        maxctx = ctx[b] > maxctx ? ctx[b] : maxctx;
    }
    float *lat = malloc(sizeof(float) * (size_t)((total + 1) * D));
    for (int64_t i = 0; i < total * D; i++)
        lat[i] = (float)urand();
    /* block table: local rows of every rank need cdiv(cdiv(ctx, V) I, B) blocks */
    int64_t cols = 1, nb = 1;
    for (size_t b = 0; b < n_req; b++) {
        int64_t need = ((ctx[b] + V - 1) / V * I + B - 1) / B;
        cols = need > cols ? need : cols;
        nb += need;
    }
    int64_t *bt = calloc(n_req * (size_t)cols, sizeof *bt);
    int64_t next = 0;
    for (size_t b = 0; b < n_req; b++) {
        int64_t need = ((ctx[b] + V - 1) / V * I + B - 1) / B;
        for (int64_t k = 0; k < need; k++, next++)
            bt[b * (size_t)cols + (size_t)k] = nb - 1 - next;   /* distinct, descending */
    }
    /* per-rank caches through the slot mapping; NaN where nothing was written */
    float *rc = malloc(sizeof(float) * (size_t)(W * nb * B * D));
    for (int64_t i = 0; i < W * nb * B * D; i++)
        rc[i] = NAN;
    struct kv_slot_geom sg;
    memset(&sg, 0, sizeof sg);
    sg.block_size = sg.kernel_block_size = B;
    sg.max_model_len = cols * B * W;
    sg.cp_world = W;
    sg.interleave = I;
    sg.virt = KV_SLOT_VIRTUAL_PHYSICAL;
    int writes_ok = 1;
    for (int64_t r = 0; r < W; r++) {
        sg.cp_rank = r;
        for (size_t b = 0; b < n_req; b++) {
            for (int64_t p = 0; p < ctx[b]; p++) {
                int64_t own;
                int64_t slot = kv_slot_of(&sg, bt + b * (size_t)cols, p, &own, NULL, NULL);
                if (slot == KV_SLOT_PAD)
                    continue;
                writes_ok &= own == r && slot >= 0 && slot < nb * B;
                memcpy(rc + (size_t)((r * nb * B + slot) * D), lat + (start[b] + p) * D,
                       sizeof(float) * D);
            }
        }
    }
    TAP_OK(writes_ok, "%s: per-rank caches from the slot mapping", name);

    struct kv_mla_cp_geom g = {B, pcp, dcp, I, mcc_mult * V, KV_MLA_CP_CHUNK_ASCEND, 0};
    struct kv_mla_cp_map m;
    int ok = kv_mla_cp_build(&g, bt, n_req, (size_t)cols, ctx, n_req, &m, &e) == 0;
    TAP_OK(ok, "%s: map built%s%s", name, ok ? "" : ": ", ok ? "" : e.msg);
    if (!ok)
        goto out;
    TAP_OK((int64_t)m.n == total * 1, "%s: %zu entries for %lld context tokens", name, m.n,
           (long long)total);

    /* queries and the reference over the original cache */
    int64_t qs[3] = {(int64_t)n_req, H, D};
    struct kv_tensor q, oref, lref;
    kv_tensor_init(&q); kv_tensor_init(&oref); kv_tensor_init(&lref);
    kv_tensor_alloc(&q, KV_F32, 3, qs, 0, &e);
    for (size_t i = 0; i < kv_tensor_numel(&q); i++)
        ((float *)q.data)[i] = (float)(2.0 * urand());
    double scale = 0.3;
    attend(&q, lat, start, ctx, n_req, scale, &oref, &lref);

    int rows_ok = 1, slots_ok = 1, once_ok = 1;
    struct kv_tensor *outs = calloc((size_t)m.n_chunks + 1, sizeof *outs);
    struct kv_tensor *lses = calloc((size_t)m.n_chunks + 1, sizeof *lses);
    size_t k = 0;
    for (int64_t c = 0; c < m.n_chunks; c++) {
        int64_t toks = m.toks[c];
        /* each rank loads its chunk slice: local index j -> bt[j / B] B + j % B */
        float *gath = malloc(sizeof(float) * (size_t)((W * toks + 1) * D));
        for (int64_t r = 0; r < W; r++) {
            int64_t src = 0;
            for (size_t b = 0; b < n_req; b++) {
                int64_t n = m.padded_lens[c * (int64_t)n_req + (int64_t)b];
                for (int64_t t = 0; t < n; t++) {
                    int64_t j = c * m.chunk_size + t;
                    int64_t slot = bt[b * (size_t)cols + (size_t)(j / B)] * B + j % B;
                    memcpy(gath + (size_t)((r * toks + src + t) * D),
                           rc + (size_t)((r * nb * B + slot) * D), sizeof(float) * D);
                }
                src += n;
            }
        }
        int64_t *cu = m.cu_seq_lens + c * (int64_t)(n_req + 1);
        int64_t nrows = cu[n_req];
        float *reorg = malloc(sizeof(float) * (size_t)((nrows + 1) * D));
        unsigned char *seen = calloc((size_t)(total + 1), 1);
        for (; k < m.n && m.e[k].chunk == c; k++) {
            const struct kv_mla_cp_entry *x = &m.e[k];
            memcpy(reorg + x->reorg * D, gath + x->gathered * D, sizeof(float) * D);
            rows_ok &= memcmp(reorg + x->reorg * D, lat + (start[x->req] + x->pos) * D,
                              sizeof(float) * D) == 0;
            sg.cp_rank = x->pcp_rank * dcp + x->dcp_rank;
            int64_t own;
            int64_t s = kv_slot_of(&sg, bt + x->req * cols, x->pos, &own, NULL, NULL);
            slots_ok &= s == x->local_slot && own == sg.cp_rank &&
                        x->local_slot == bt[x->req * cols + x->local_index / B] * B +
                                         x->local_index % B;
            once_ok &= !seen[start[x->req] + x->pos];
            seen[start[x->req] + x->pos] = 1;
        }
        int64_t *len = calloc(n_req, sizeof *len);
        for (size_t b = 0; b < n_req; b++)
            len[b] = cu[b + 1] - cu[b];
        kv_tensor_init(&outs[c]);
        kv_tensor_init(&lses[c]);
        attend(&q, reorg, cu, len, n_req, scale, &outs[c], &lses[c]);
        free(len);
        free(seen);
        free(reorg);
        free(gath);
    }
    TAP_OK(rows_ok, "%s: every placed row is its token's latent, bit for bit", name);
    TAP_OK(slots_ok, "%s: local slots agree with the rank's slot mapping", name);
    TAP_OK(once_ok, "%s: no token twice in a chunk", name);

    /* merge the chunks (as the ring attention's prev_lse does) and compare */
    struct kv_tensor om, lm;
    kv_tensor_init(&om);
    kv_tensor_init(&lm);
    ok = m.n_chunks > 0 &&
         kv_attn_merge(outs, lses, (size_t)m.n_chunks, KV_F32, &om, &lm, &e) == 0;
    if (m.n_chunks > 0) {
        double A, Vm;
        int64_t cs4[4] = {total ? total : 1, 1, 1, D};
        struct kv_tensor lc = {KV_F32, 4, {cs4[0], 1, 1, D}, lat, (size_t)(cs4[0] * D * 4)};
        kv_mla_scan_absorbed(&q, &lc, DL, scale, &A, &Vm);
        double b = 2 * kv_mla_bound_absorbed(maxctx, D, A, Vm, KV_F32) +
                   kv_bound_merge_out(m.n_chunks, Vm);
        double bl = 2 * kv_bound_attn_lse(maxctx, D, A, A + log((double)maxctx + 1), 0) +
                    kv_bound_merge_lse(m.n_chunks, A + log((double)maxctx + 1));
        double d = 0, dl = 0;
        for (size_t i = 0; ok && i < kv_tensor_numel(&om); i++)
            d = fmax(d, fabs(((float *)om.data)[i] - ((float *)oref.data)[i]));
        for (size_t i = 0; ok && i < kv_tensor_numel(&lm); i++) {
            float a = ((float *)lm.data)[i], r2 = ((float *)lref.data)[i];
            if (!(isinf(a) && a == r2))
                dl = fmax(dl, fabs(a - r2));
        }
        TAP_OK(ok && d <= b, "%s: attention over the gathered chunks = over the original "
               "cache within %.3g (diff %.3g)", name, b, d);
        TAP_OK(ok && dl <= bl, "%s: and the LSE within %.3g (diff %.3g)", name, bl, dl);
    }
    for (int64_t c = 0; c < m.n_chunks; c++) {
        kv_tensor_release(&outs[c]);
        kv_tensor_release(&lses[c]);
    }
    free(outs);
    free(lses);
    kv_tensor_release(&om); kv_tensor_release(&lm);
    kv_tensor_release(&q); kv_tensor_release(&oref); kv_tensor_release(&lref);
    kv_mla_cp_map_release(&m);
out:
    free(start); free(lat); free(bt); free(rc);
}

/* The numbers of a small case by hand: W = 2, I = 1, one request of 5
 * context tokens: rank 0 holds positions 0 2 4, rank 1 holds 1 3; the
 * padded local length is 3, so the gathered buffer is
 * [p0 p2 p4 | p1 p3 pad] and the reorganised one [p0 p2 p4 p1 p3]. */
static void by_hand(void)
{
    struct kv_err e = {{0}};
    int64_t bt[2] = {7, 8}, ctx[1] = {5};
    struct kv_mla_cp_geom g = {4, 1, 2, 1, 0, KV_MLA_CP_CHUNK_ASCEND, 0};
    struct kv_mla_cp_map m;
    int ok = kv_mla_cp_build(&g, bt, 1, 2, ctx, 1, &m, &e) == 0;
    TAP_OK(ok && m.n == 5 && m.toks[0] == 3 && m.padded_lens[0] == 3 && m.cu_seq_lens[1] == 5,
           "by hand: 5 tokens, 3 rows a rank, 5 in the layout");
    static const int64_t pos[5] = {0, 2, 4, 1, 3}, gat[5] = {0, 1, 2, 3, 4};
    static const int64_t rank[5] = {0, 0, 0, 1, 1}, slot[5] = {28, 29, 30, 28, 29};
    int same = ok;
    for (int i = 0; ok && i < 5; i++)
        same &= m.e[i].pos == pos[i] && m.e[i].gathered == gat[i] && m.e[i].reorg == i &&
                m.e[i].dcp_rank == rank[i] && m.e[i].local_slot == slot[i];
    TAP_OK(same, "by hand: positions 0 2 4 1 3 from rows 0 1 2 3 4, slots 28 29 30 | 28 29");
    kv_mla_cp_map_release(&m);
    struct kv_mla_cp_geom bad = {4, 1, 2, 1, 3, KV_MLA_CP_CHUNK_ASCEND, 0};
    TAP_OK(kv_mla_cp_build(&bad, bt, 1, 2, ctx, 1, &m, &e) < 0 &&
           strstr(e.msg, "not a multiple"), "a chunk that is not a multiple of I W (%s)", e.msg);
    struct kv_mla_cp_geom bad2 = {4, 1, 2, 3, 0, KV_MLA_CP_CHUNK_ASCEND, 0};
    TAP_OK(kv_mla_cp_build(&bad2, bt, 1, 2, ctx, 1, &m, &e) < 0,
           "an interleave that does not divide the block (%s)", e.msg);
    int64_t big[1] = {17};
    TAP_OK(kv_mla_cp_build(&g, bt, 1, 2, big, 1, &m, &e) < 0 && strstr(e.msg, "local rows"),
           "a context past the block table (%s)", e.msg);
}

int main(void)
{
    static const int64_t ctx[] = {300, 1, 77, 0, 129, 64};
    size_t n = sizeof ctx / sizeof ctx[0];
    by_hand();
    run(1, 2, 1, 64, 0, ctx, n);      /* DCP 2 */
    run(1, 4, 1, 64, 0, ctx, n);      /* DCP 4 */
    run(2, 1, 1, 64, 0, ctx, n);      /* PCP 2 */
    run(2, 2, 1, 64, 0, ctx, n);      /* PCP 2 x DCP 2 */
    run(2, 4, 1, 64, 0, ctx, n);      /* PCP 2 x DCP 4 */
    run(1, 2, 4, 16, 0, ctx, n);      /* interleave 4 */
    run(2, 2, 2, 8, 0, ctx, n);       /* interleave 2, small blocks */
    run(1, 4, 1, 64, 8, ctx, n);      /* context chunks of 32 tokens */
    run(2, 2, 2, 16, 3, ctx, n);      /* chunks of 24, interleave 2 */
    return tap_done();
}
