/* mla_sparse.c - sparse MLA: the fast path (the selected rows gathered,
 * the dense kernel) against the double reference, within the absorbed
 * form's stated bound, on random geometries, selections (unsorted, -1
 * padding, empty rows), block sizes and thread counts; and the refusals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "attn/mla_sparse.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}
static float unif(void) { return (float)((double)(next() >> 11) / 9007199254740992.0 * 2 - 1); }

int main(void)
{
    for (int c = 0; c < 40; c++) {
        int64_t nreq = 1 + (int64_t)(next() % 3), h = 1 + (int64_t)(next() % 4);
        int64_t dl = 4 + (int64_t)(next() % 12), dr = 1 + (int64_t)(next() % 4), w = dl + dr;
        int64_t bs = 1 + (int64_t)(next() % 8), k = 1 + (int64_t)(next() % 12);
        int64_t sl[3], ql[3], T = 0, cols = 0;
        for (int64_t b = 0; b < nreq; b++) {
            sl[b] = 1 + (int64_t)(next() % 30);
            ql[b] = 1 + (int64_t)(next() % (uint64_t)(sl[b] < 4 ? sl[b] : 4));
            T += ql[b];
            int64_t nb = (sl[b] + bs - 1) / bs;
            cols = nb > cols ? nb : cols;
        }
        int64_t nblocks = nreq * cols + 1;
        int64_t qs[3] = { T, h, w }, cs[4] = { nblocks, bs, 1, w };
        struct kv_tensor q, cache, o1, l1, o2, l2;
        struct kv_err e = {{0}};
        kv_tensor_init(&q); kv_tensor_init(&cache);
        kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o2); kv_tensor_init(&l2);
        kv_tensor_alloc(&q, KV_F32, 3, qs, 0, &e);
        kv_tensor_alloc(&cache, KV_F32, 4, cs, 0, &e);
        for (size_t i = 0; i < kv_tensor_numel(&q); i++)
            ((float *)q.data)[i] = unif() * 3;
        for (size_t i = 0; i < kv_tensor_numel(&cache); i++)
            ((float *)cache.data)[i] = unif();
        int64_t *bt = malloc((size_t)(nreq * cols) * sizeof *bt);
        for (int64_t i = 0; i < nreq * cols; i++)    /* blocks 1.. in reverse */
            bt[i] = nblocks - 1 - i;
        int32_t *idx = malloc((size_t)(T * k) * sizeof *idx);
        int64_t t = 0;
        for (int64_t b = 0; b < nreq; b++)
            for (int64_t i = 0; i < ql[b]; i++, t++) {
                int64_t pos = i + sl[b] - ql[b], m = 0;
                for (int64_t s = 0; s < k; s++)
                    idx[t * k + s] = -1;
                if (next() % 6 == 0)
                    continue;                           /* an empty row */
                for (int64_t j = pos; j >= 0 && m < k; j--)   /* a random subset */
                    if (next() % 2)
                        idx[t * k + (k - 1 - m++)] = (int32_t)j;
            }
        struct kv_mla_req r;
        memset(&r, 0, sizeof r);
        r.q = &q; r.cache = &cache; r.block_table = bt;
        r.bt_rows = (size_t)nreq; r.bt_cols = (size_t)cols;
        r.seq_lens = sl; r.n_seq_lens = (size_t)nreq;
        r.q_lens = ql; r.n_q_lens = (size_t)nreq;
        r.kv_lora_rank = dl; r.causal = 1; r.scale = 0.3; r.out_dtype = KV_NDTYPES;
        r.n_threads = 1 + (int)(next() % 3);
        int a = kv_mla_sparse(&r, idx, T, k, &o1, &l1, &e);
        int b2 = kv_mla_sparse_ref(&r, idx, T, k, &o2, &l2, &e);
        double A = 0, V = 0;
        kv_mla_scan_absorbed(&q, &cache, dl, r.scale, &A, &V);
        double bound = kv_mla_bound_absorbed(k, w, A, V, KV_F32);
        double worst = 0;
        int lse_ok = 1;
        for (size_t i = 0; a == 0 && b2 == 0 && i < kv_tensor_numel(&o1); i++)
            worst = fmax(worst, fabs((double)((float *)o1.data)[i] - ((float *)o2.data)[i]));
        for (size_t i = 0; a == 0 && b2 == 0 && i < kv_tensor_numel(&l1); i++) {
            float x = ((float *)l1.data)[i], y = ((float *)l2.data)[i];
            if (isinf(x) || isinf(y))
                lse_ok &= x == y;
            else
                lse_ok &= fabs((double)x - y) <= 1e-5 * fmax(1, fabs((double)y));
        }
        TAP_OK(a == 0 && b2 == 0 && worst <= bound && lse_ok,
               "case %d (%lld requests, H %lld, Dl %lld, R %lld, block %lld, K %lld): fast - "
               "reference %.3g <= bound %.3g, LSE %s", c, (long long)nreq, (long long)h,
               (long long)dl, (long long)dr, (long long)bs, (long long)k, worst, bound,
               lse_ok ? "agrees" : "differs");
        if (c == 0) {
            idx[0] = (int32_t)sl[0];      /* past the keys */
            kv_tensor_release(&o1);
            TAP_OK(kv_mla_sparse(&r, idx, T, k, &o1, NULL, &e) < 0 && !o1.data &&
                   strstr(e.msg, "outside"), "an index past the keys: '%s'", e.msg);
        }
        kv_tensor_release(&q); kv_tensor_release(&cache);
        kv_tensor_release(&o1); kv_tensor_release(&l1);
        kv_tensor_release(&o2); kv_tensor_release(&l2);
        free(bt);
        free(idx);
    }
    /* Long selections in shuffled order: positions past 2^11 (two sorting
     * passes), chunks of keys for a few queries and none for many, and a
     * repeat found far into a row. */
    for (int c = 0; c < 2; c++) {
        int64_t sl = 5000, T = c ? 9 : 3, h = 2, dl = 8, w = 10, bs = 16, k = 1500;
        int64_t nb = (sl + bs - 1) / bs, ql = T;
        int64_t qs[3] = { T, h, w }, cs[4] = { nb, bs, 1, w };
        struct kv_tensor q, cache, o1, l1, o2, l2;
        struct kv_err e = {{0}};
        kv_tensor_init(&q); kv_tensor_init(&cache);
        kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o2); kv_tensor_init(&l2);
        kv_tensor_alloc(&q, KV_F32, 3, qs, 0, &e);
        kv_tensor_alloc(&cache, KV_F32, 4, cs, 0, &e);
        for (size_t i = 0; i < kv_tensor_numel(&q); i++)
            ((float *)q.data)[i] = unif() * 3;
        for (size_t i = 0; i < kv_tensor_numel(&cache); i++)
            ((float *)cache.data)[i] = unif();
        int64_t *bt = malloc((size_t)nb * sizeof *bt);
        for (int64_t i = 0; i < nb; i++)
            bt[i] = (i * 7) % nb;               /* 7 and 313 are coprime */
        int32_t *idx = malloc((size_t)(T * k) * sizeof *idx), *perm = malloc((size_t)sl * 4);
        for (int64_t t = 0; t < T; t++) {
            int64_t vis = sl - T + t + 1;
            for (int64_t j = 0; j < vis; j++)
                perm[j] = (int32_t)j;
            for (int64_t j = 0; j < k; j++) {   /* the first k of a shuffle */
                int64_t x = j + (int64_t)(next() % (uint64_t)(vis - j));
                int32_t y = perm[j];
                perm[j] = perm[x];
                perm[x] = y;
                idx[t * k + j] = perm[j];
            }
        }
        struct kv_mla_req r;
        memset(&r, 0, sizeof r);
        r.q = &q; r.cache = &cache; r.block_table = bt;
        r.bt_rows = 1; r.bt_cols = (size_t)nb;
        r.seq_lens = &sl; r.n_seq_lens = 1; r.q_lens = &ql; r.n_q_lens = 1;
        r.kv_lora_rank = dl; r.causal = 1; r.scale = 0.3; r.out_dtype = KV_NDTYPES;
        r.n_threads = 2;
        int a = kv_mla_sparse(&r, idx, T, k, &o1, &l1, &e);
        int b2 = kv_mla_sparse_ref(&r, idx, T, k, &o2, &l2, &e);
        double A = 0, V = 0, worst = 0;
        kv_mla_scan_absorbed(&q, &cache, dl, r.scale, &A, &V);
        double bound = kv_mla_bound_absorbed(k, w, A, V, KV_F32);
        for (size_t i = 0; a == 0 && b2 == 0 && i < kv_tensor_numel(&o1); i++)
            worst = fmax(worst, fabs((double)((float *)o1.data)[i] - ((float *)o2.data)[i]));
        TAP_OK(a == 0 && b2 == 0 && worst <= bound,
               "%lld queries selecting %lld of %lld keys, shuffled: fast - reference %.3g <= "
               "bound %.3g", (long long)T, (long long)k, (long long)sl, worst, bound);
        idx[(T - 1) * k + k - 1] = idx[(T - 1) * k + 3];
        kv_tensor_release(&o1);
        TAP_OK(kv_mla_sparse(&r, idx, T, k, &o1, NULL, &e) < 0 && !o1.data &&
               strstr(e.msg, "twice"), "a repeat at the end of a long row: '%s'", e.msg);
        kv_tensor_release(&q); kv_tensor_release(&cache);
        kv_tensor_release(&o1); kv_tensor_release(&l1);
        kv_tensor_release(&o2); kv_tensor_release(&l2);
        free(bt);
        free(idx);
        free(perm);
    }
    return tap_done();
}
