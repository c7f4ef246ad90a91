/* mla.c - Multi-head Latent Attention (lib/attn/mla) against float64
 * references written from the formulas.
 *
 * naive reference:    s_j = scale (sum_p q_p sum_l c_jl W_UK[l,p]
 *                                  + sum_r q_{P+r} k_pe_jr),
 *                     o_v = sum_j softmax(s)_j sum_l c_jl W_UV[l,v]
 * absorbed reference: the same softmax over q'.L_j with V = L_j[:Dl], from
 *                     the f32 absorbed query and the cache as stored.
 * Cases: random small geometries (decode, multi-token decode, chunked
 * prefill, non-causal, odd block sizes, bf16 and f16 caches, long rows
 * that split into key chunks) and the DeepSeek-V2-Lite geometry read from
 * tests/configs (Dl 512, R 64, P 128, Vd 128, 16 heads, its YaRN scale).
 * Each form is held to its bound of kvattn(1) MLA; the two forms agree
 * within the sum of theirs; results are bit-identical for 1 and 3 threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/bf16.h"
#include "attn/bound.h"
#include "attn/mla.h"
#include "chunk/latent.h"
#include "core/half.h"
#include "core/tensor.h"
#include "tap.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static double urand(void)   /* uniform in [-1, 1) */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) / 4503599627370496.0 - 1.0;
}

struct mcase {
    const char *name;
    int H, Dl, R, P, Vd, bs, nreq;
    int ql[6], kl[6];
    int causal;
    enum kv_dtype cdt;      /* cache dtype (values rounded to it for both forms) */
    double scale;           /* 0: 1/sqrt(P + R) */
    double qamp;            /* query amplitude (sharp or flat softmax) */
};

static float round_to(enum kv_dtype dt, double x)
{
    float f = (float)x;
    if (dt == KV_BF16)
        return kv_bf16_to_f32(kv_f32_to_bf16(f));
    if (dt == KV_F16)
        return kv_f16_to_f32(kv_f32_to_f16(f));
    return f;
}

static void fill(struct kv_tensor *t, enum kv_dtype dt, int ndim, const int64_t *shape,
                 double amp, enum kv_dtype round)
{
    struct kv_err e = {{0}};
    kv_tensor_init(t);
    kv_tensor_alloc(t, dt, ndim, shape, 0, &e);
    float *p = t->data;
    for (size_t i = 0; i < kv_tensor_numel(t); i++)
        p[i] = round_to(round, amp * urand());
}

static double maxdiff(const struct kv_tensor *a, const double *ref, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = kv_tensor_get_f64(a, i);
        double d = fabs(x - ref[i]);
        if (isinf(ref[i]) && x == ref[i])
            d = 0.0;
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* Softmax of sc[0..n) in double into w, returning the LSE (-inf for n 0). */
static double softmax64(double *sc, int64_t n)
{
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < n; j++)
        m = fmax(m, sc[j]);
    for (int64_t j = 0; j < n; j++)
        s += exp(sc[j] - m);
    for (int64_t j = 0; j < n; j++)
        sc[j] = exp(sc[j] - m) / s;
    return n ? m + log(s) : -INFINITY;
}

static void run_case(const struct mcase *c)
{
    struct kv_err e = {{0}};
    int H = c->H, Dl = c->Dl, R = c->R, P = c->P, Vd = c->Vd, bs = c->bs;
    int64_t T = 0, Tk = 0, nblk = 1;
    for (int b = 0; b < c->nreq; b++) {
        T += c->ql[b];
        Tk += c->kl[b];
        nblk += (c->kl[b] + bs - 1) / bs;
    }
    double scale = c->scale ? c->scale : 1.0 / sqrt((double)(P + R));
    struct kv_tensor q, ckv, kpe, wuk, wuv, qa, cache, oa, la, on, ln, proj;
    int64_t sq[3] = {T, H, P + R}, sc[2] = {Tk, Dl}, sp[2] = {Tk, R};
    int64_t swk[3] = {H, Dl, P}, swv[3] = {H, Dl, Vd};
    kv_tensor_init(&qa); kv_tensor_init(&cache); kv_tensor_init(&oa); kv_tensor_init(&la);
    kv_tensor_init(&on); kv_tensor_init(&ln); kv_tensor_init(&proj);
    fill(&q, KV_F32, 3, sq, c->qamp, KV_F32);
    fill(&ckv, KV_F32, 2, sc, 1.0, c->cdt);
    fill(&kpe, KV_F32, 2, sp, 1.0, c->cdt);
    fill(&wuk, KV_F32, 3, swk, 1.7 / sqrt((double)Dl), KV_F32);
    fill(&wuv, KV_F32, 3, swv, 1.7 / sqrt((double)Dl), KV_F32);
    TAP_OK(kv_mla_absorb_q(&q, &wuk, KV_F32, 0, &qa, &e) == 0, "%s: absorb Q", c->name);

    /* paged cache: block ids a fixed permutation, block 0 unused */
    int64_t D = Dl + R, scs[4] = {nblk, bs, 1, D};
    int64_t cols = 1;
    for (int b = 0; b < c->nreq; b++)
        cols = (c->kl[b] + bs - 1) / bs > cols ? (c->kl[b] + bs - 1) / bs : cols;
    int64_t *bt = calloc((size_t)(c->nreq * cols), sizeof *bt);
    int64_t *seq = calloc((size_t)c->nreq, sizeof *seq), *qls = calloc((size_t)c->nreq, sizeof *qls);
    int64_t *kls = calloc((size_t)c->nreq, sizeof *kls);
    kv_tensor_alloc(&cache, c->cdt, 4, scs, 0, &e);
    int64_t next = 0, k0 = 0;
    for (int b = 0; b < c->nreq; b++) {
        seq[b] = kls[b] = c->kl[b];
        qls[b] = c->ql[b];
        for (int64_t k = 0; k < (c->kl[b] + bs - 1) / bs; k++) {
            bt[b * cols + k] = 1 + (next * 7 + 3) % (nblk - 1);
            next++;
        }
        for (int64_t j = 0; j < c->kl[b]; j++) {
            int64_t slot = bt[b * cols + j / bs] * bs + j % bs;
            for (int64_t d = 0; d < D; d++) {
                float x = d < Dl ? ((float *)ckv.data)[(k0 + j) * Dl + d]
                                 : ((float *)kpe.data)[(k0 + j) * R + d - Dl];
                size_t at = (size_t)(slot * D + d);
                if (c->cdt == KV_BF16)
                    ((uint16_t *)cache.data)[at] = kv_f32_to_bf16(x);
                else if (c->cdt == KV_F16)
                    ((uint16_t *)cache.data)[at] = kv_f32_to_f16(x);
                else
                    ((float *)cache.data)[at] = x;
            }
        }
        k0 += c->kl[b];
    }
    /* block ids must be distinct: nblk - 1 and 7 coprime in every case */

    struct kv_mla_req ra;
    memset(&ra, 0, sizeof ra);
    ra.q = &qa; ra.cache = &cache; ra.block_table = bt; ra.bt_rows = (size_t)c->nreq;
    ra.bt_cols = (size_t)cols; ra.seq_lens = seq; ra.n_seq_lens = (size_t)c->nreq;
    ra.q_lens = qls; ra.n_q_lens = (size_t)c->nreq; ra.kv_lora_rank = Dl;
    ra.causal = c->causal; ra.scale = scale; ra.out_dtype = KV_NDTYPES; ra.n_threads = 3;
    int ok = kv_mla_absorbed(&ra, &oa, &la, &e) == 0;
    TAP_OK(ok, "%s: absorbed runs%s%s", c->name, ok ? "" : ": ", ok ? "" : e.msg);

    struct kv_mla_naive_req rn;
    memset(&rn, 0, sizeof rn);
    rn.q = &q; rn.c_kv = &ckv; rn.k_pe = &kpe; rn.w_uk = &wuk; rn.w_uv = &wuv;
    rn.q_lens = qls; rn.n_q_lens = (size_t)c->nreq; rn.kv_lens = kls;
    rn.n_kv_lens = (size_t)c->nreq; rn.causal = c->causal; rn.has_scale = 1;
    rn.scale = scale; rn.out_dtype = KV_NDTYPES; rn.n_threads = 3;
    int okn = kv_mla_naive(&rn, &on, &ln, &e) == 0;
    TAP_OK(okn, "%s: naive runs%s%s", c->name, okn ? "" : ": ", okn ? "" : e.msg);
    if (!ok || !okn)
        goto out;
    kv_mla_project(&oa, &wuv, KV_F64, 0, &proj, &e);

    /* float64 references */
    size_t nO = (size_t)(T * H);
    double *ref_n = calloc(nO * (size_t)Vd, sizeof(double)), *ref_nl = calloc(nO, sizeof(double));
    double *ref_a = calloc(nO * (size_t)Dl, sizeof(double)), *ref_al = calloc(nO, sizeof(double));
    int64_t maxk = 1;
    for (int b = 0; b < c->nreq; b++)
        maxk = c->kl[b] > maxk ? c->kl[b] : maxk;
    double *s = malloc(sizeof(double) * (size_t)maxk);
    double *kn = malloc(sizeof(double) * (size_t)(maxk * P));
    double *vn = malloc(sizeof(double) * (size_t)(maxk * Vd));
    const float *Q = q.data, *C = ckv.data, *KP = kpe.data, *WK = wuk.data, *WV = wuv.data;
    const float *QA = qa.data;
    int64_t t0 = 0;
    k0 = 0;
    for (int b = 0; b < c->nreq; b++) {
        int64_t Lq = c->ql[b], Lk = c->kl[b];
        for (int h = 0; h < H; h++) {
            for (int64_t j = 0; j < Lk; j++) {
                for (int p = 0; p < P; p++) {
                    double a = 0.0;
                    for (int l = 0; l < Dl; l++)
                        a += (double)C[(k0 + j) * Dl + l] * WK[((size_t)h * Dl + l) * P + p];
                    kn[j * P + p] = a;
                }
                for (int v = 0; v < Vd; v++) {
                    double a = 0.0;
                    for (int l = 0; l < Dl; l++)
                        a += (double)C[(k0 + j) * Dl + l] * WV[((size_t)h * Dl + l) * Vd + v];
                    vn[j * Vd + v] = a;
                }
            }
            for (int64_t i = 0; i < Lq; i++) {
                int64_t n = c->causal ? i + Lk - Lq + 1 : Lk;
                size_t row = (size_t)((t0 + i) * H + h);
                const float *qr = Q + row * (size_t)(P + R);
                for (int64_t j = 0; j < n; j++) {
                    double a = 0.0;
                    for (int p = 0; p < P; p++)
                        a += (double)qr[p] * kn[j * P + p];
                    for (int r = 0; r < R; r++)
                        a += (double)qr[P + r] * KP[(k0 + j) * R + r];
                    s[j] = scale * a;
                }
                ref_nl[row] = softmax64(s, n);
                for (int v = 0; v < Vd; v++) {
                    double a = 0.0;
                    for (int64_t j = 0; j < n; j++)
                        a += s[j] * vn[j * Vd + v];
                    ref_n[row * (size_t)Vd + (size_t)v] = a;
                }
                /* absorbed, from q' and the latent rows as stored */
                const float *qa_r = QA + row * (size_t)D;
                for (int64_t j = 0; j < n; j++) {
                    double a = 0.0;
                    for (int d = 0; d < D; d++) {
                        double x = d < Dl ? C[(k0 + j) * Dl + d] : KP[(k0 + j) * R + d - Dl];
                        a += (double)qa_r[d] * x;
                    }
                    s[j] = scale * a;
                }
                ref_al[row] = softmax64(s, n);
                for (int l = 0; l < Dl; l++) {
                    double a = 0.0;
                    for (int64_t j = 0; j < n; j++)
                        a += s[j] * C[(k0 + j) * Dl + l];
                    ref_a[row * (size_t)Dl + (size_t)l] = a;
                }
            }
        }
        t0 += Lq;
        k0 += Lk;
    }

    /* bounds */
    double A, V, An, Vn, w1;
    kv_mla_scan_absorbed(&qa, &cache, Dl, scale, &A, &V);
    kv_mla_scan_naive(&rn, scale, &An, &Vn, &w1);
    double ba = kv_mla_bound_absorbed(maxk, D, A, V, KV_F32);
    double bal = kv_bound_attn_lse(maxk, D, A, A + log((double)maxk), 0);
    double bn = kv_mla_bound_naive(maxk, Dl, P + R, An, Vn, KV_F32);
    double bnl = kv_bound_attn_lse(maxk, Dl + P + R, An, An + log((double)maxk), 0);
    /* the absorbed form as a route to the naive result: its query was
     * rounded once from the exact W_UK q (d + 1), then projected */
    double o_abs = Vn;
    double bp = kv_mla_bound_projected(kv_mla_bound_absorbed(maxk, D + 1, A, V, KV_F32), w1,
                                       o_abs, KV_F64);
    double bpl = kv_bound_attn_lse(maxk, D + 1, A, A + log((double)maxk), 0);
    double da = maxdiff(&oa, ref_a, nO * (size_t)Dl), dal = maxdiff(&la, ref_al, nO);
    double dn = maxdiff(&on, ref_n, nO * (size_t)Vd), dnl = maxdiff(&ln, ref_nl, nO);
    double dp = maxdiff(&proj, ref_n, nO * (size_t)Vd), dpl = maxdiff(&la, ref_nl, nO);
    TAP_OK(da <= ba, "%s: absorbed output within %.3g of float64 (err %.3g)", c->name, ba, da);
    TAP_OK(dal <= bal, "%s: absorbed LSE within %.3g (err %.3g)", c->name, bal, dal);
    TAP_OK(dn <= bn, "%s: naive output within %.3g of float64 (err %.3g)", c->name, bn, dn);
    TAP_OK(dnl <= bnl, "%s: naive LSE within %.3g (err %.3g)", c->name, bnl, dnl);
    TAP_OK(dp <= bp, "%s: absorbed x W_UV within %.3g of the naive float64 (err %.3g)",
           c->name, bp, dp);
    TAP_OK(dpl <= bpl, "%s: absorbed LSE within %.3g of the naive LSE (err %.3g)", c->name,
           bpl, dpl);
    /* the two forms against each other */
    double dx = 0.0;
    for (size_t i = 0; i < nO * (size_t)Vd; i++)
        dx = fmax(dx, fabs(kv_tensor_get_f64(&proj, i) - kv_tensor_get_f64(&on, i)));
    TAP_OK(dx <= bp + bn, "%s: the two forms agree within %.3g (diff %.3g)", c->name,
           bp + bn, dx);

    /* thread invariance */
    struct kv_tensor o1, l1;
    kv_tensor_init(&o1);
    kv_tensor_init(&l1);
    ra.n_threads = 1;
    int same = kv_mla_absorbed(&ra, &o1, &l1, &e) == 0 && o1.nbytes == oa.nbytes &&
               memcmp(o1.data, oa.data, oa.nbytes) == 0 && memcmp(l1.data, la.data, la.nbytes) == 0;
    TAP_OK(same, "%s: absorbed bit-identical for 1 and 3 threads", c->name);
    kv_tensor_release(&o1);
    kv_tensor_release(&l1);
    rn.n_threads = 1;
    same = kv_mla_naive(&rn, &o1, &l1, &e) == 0 && memcmp(o1.data, on.data, on.nbytes) == 0;
    TAP_OK(same, "%s: naive bit-identical for 1 and 3 threads", c->name);
    kv_tensor_release(&o1);
    kv_tensor_release(&l1);
    free(ref_n); free(ref_nl); free(ref_a); free(ref_al); free(s); free(kn); free(vn);
out:
    free(bt); free(seq); free(qls); free(kls);
    kv_tensor_release(&q); kv_tensor_release(&ckv); kv_tensor_release(&kpe);
    kv_tensor_release(&wuk); kv_tensor_release(&wuv); kv_tensor_release(&qa);
    kv_tensor_release(&cache); kv_tensor_release(&oa); kv_tensor_release(&la);
    kv_tensor_release(&on); kv_tensor_release(&ln); kv_tensor_release(&proj);
}

/* Errors are refused with a reason and leave the outputs alone. */
static void errors(void)
{
    struct kv_err e = {{0}};
    struct kv_tensor q, cache, o, l;
    int64_t sq[3] = {1, 2, 12}, sc[4] = {2, 4, 1, 12};
    int64_t bt[1] = {5}, sl[1] = {3};
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    fill(&q, KV_F32, 3, sq, 1.0, KV_F32);
    fill(&cache, KV_F32, 4, sc, 1.0, KV_F32);
    struct kv_mla_req r;
    memset(&r, 0, sizeof r);
    r.q = &q; r.cache = &cache; r.block_table = bt; r.bt_rows = 1; r.bt_cols = 1;
    r.seq_lens = sl; r.n_seq_lens = 1; r.kv_lora_rank = 8; r.scale = 0.1;
    r.out_dtype = KV_NDTYPES;
    TAP_OK(kv_mla_absorbed(&r, &o, &l, &e) < 0 && strstr(e.msg, "block_table[0][0] = 5") &&
           o.data == NULL, "a block id past the cache is refused (%s)", e.msg);
    bt[0] = 1;
    sl[0] = 5;
    TAP_OK(kv_mla_absorbed(&r, &o, &l, &e) < 0 && strstr(e.msg, "seq_lens[0] = 5"),
           "a seq_len past the block table row is refused (%s)", e.msg);
    sl[0] = 3;
    r.kv_lora_rank = 12;
    TAP_OK(kv_mla_absorbed(&r, &o, &l, &e) < 0 && strstr(e.msg, "kv_lora_rank 12"),
           "kv_lora_rank must leave rope dims (%s)", e.msg);
    r.kv_lora_rank = 8;
    sc[3] = 10;
    kv_tensor_release(&cache);
    fill(&cache, KV_F32, 4, sc, 1.0, KV_F32);
    TAP_OK(kv_mla_absorbed(&r, &o, &l, &e) < 0 && strstr(e.msg, "disagree"),
           "Q and cache head dims must agree (%s)", e.msg);
    kv_tensor_release(&q);
    kv_tensor_release(&cache);
}

/* The scale and k_pe RoPE of the DeepSeek configs. */
static void configs(void)
{
    const char *top = getenv("KV_TOP");
    char path[4096];
    struct kv_latent L;
    struct kv_err e = {{0}};
    snprintf(path, sizeof path, "%s/tests/configs/deepseek-v2-lite.json", top ? top : ".");
    int ok = kv_latent_load(path, 0, &L, &e) == 0;
    TAP_OK(ok, "deepseek-v2-lite.json reads as MLA%s%s", ok ? "" : ": ", ok ? "" : e.msg);
    if (ok) {
        double m = 0.1 * 0.707 * log(40.0) + 1.0;
        double want = m * m / sqrt(192.0);
        TAP_OK(fabs(L.softmax_scale - want) <= 1e-15 * want,
               "V2-Lite scale 1/sqrt(192) * mscale(40, 0.707)^2 = %.17g (got %.17g)", want,
               L.softmax_scale);
        /* transformers' DeepseekV2Attention.scaling, as Python prints it */
        TAP_OK(L.softmax_scale == 0.1147213867929261,
               "V2-Lite scale bit-equal to transformers' 0.1147213867929261 (got %.17g)",
               L.softmax_scale);
        TAP_OK(L.kv_lora_rank == 512 && L.rope_dim == 64 && L.nope_dim == 128 &&
               L.v_dim == 128 && L.n_heads == 16 && L.n_layers == 27,
               "V2-Lite geometry 512/64/128/128, 16 heads, 27 layers");
        TAP_OK(L.rope.head_dim == 64 && L.rope.style == KV_ROPE_GPTJ &&
               L.rope.scaling == KV_ROPE_SCALE_YARN && L.rope.factor == 40.0,
               "V2-Lite k_pe: 64 dims, interleaved pairs, yarn factor 40");
    }
    snprintf(path, sizeof path, "%s/tests/configs/deepseek-v3.json", top ? top : ".");
    ok = kv_latent_load(path, 0, &L, &e) == 0;
    TAP_OK(ok, "deepseek-v3.json reads as MLA%s%s", ok ? "" : ": ", ok ? "" : e.msg);
    if (ok) {
        double m = 0.1 * 1.0 * log(40.0) + 1.0;
        double want = m * m / sqrt(192.0);
        TAP_OK(fabs(L.softmax_scale - want) <= 1e-15 * want,
               "V3 scale 1/sqrt(192) * mscale(40, 1)^2 = %.17g (got %.17g)", want,
               L.softmax_scale);
        TAP_OK(L.softmax_scale == 0.1352337788608801,
               "V3 scale bit-equal to transformers' 0.1352337788608801 (got %.17g)",
               L.softmax_scale);
        TAP_OK(L.kv_lora_rank == 512 && L.n_heads == 128 && L.n_layers == 61,
               "V3 geometry: 512 latent, 128 heads, 61 layers");
    }
    /* no YaRN: 192 ** -0.5, which 1/sqrt(192) misses by an ulp */
    const char plain[] = "{\"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64,"
                         " \"qk_nope_head_dim\": 128, \"v_head_dim\": 128}";
    ok = kv_latent_parse_attn(plain, strlen(plain), &L, &e) == 0;
    TAP_OK(ok && L.softmax_scale == 0.07216878364870322 && L.n_heads == 0 && L.n_layers == 0,
           "no rope_scaling, no heads, no layers: 192 ** -0.5 = 0.07216878364870322 "
           "(got %.17g)", ok ? L.softmax_scale : 0.0);
    /* only what attention needs: hidden_size 1000 over 3 heads reads */
    const char loose[] = "{\"hidden_size\": 1000, \"num_attention_heads\": 3,"
                         " \"kv_lora_rank\": 32, \"qk_rope_head_dim\": 16,"
                         " \"qk_nope_head_dim\": 32, \"v_head_dim\": 24,"
                         " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4,"
                         " \"mscale_all_dim\": 1.0}}";
    ok = kv_latent_parse_attn(loose, strlen(loose), &L, &e) == 0;
    TAP_OK(ok && L.n_heads == 3 && L.kv_lora_rank == 32 &&
               L.softmax_scale == 0.18713033519502428,
           "hidden_size 1000 over 3 heads: read; scale 48 ** -0.5 * mscale(4, 1)^2 "
           "(got %.17g)", ok ? L.softmax_scale : 0.0);
    snprintf(path, sizeof path, "%s/tests/configs/llama-3.1-8b.json", top ? top : ".");
    TAP_OK(kv_latent_load(path, 0, &L, &e) < 0 && strstr(e.msg, "not an MLA model"),
           "a non-MLA config is refused (%s)", e.msg);
}

/* The absorbed form on the bf16 tiles (bf16 Q and cache): on the model of
 * VDPBF16PS everywhere, and on the instruction where the CPU has it,
 * against the float64 attention of the same bf16 values within
 * kv_mla_bound_absorbed_bf16: decode and MTP rows, causal, keys across
 * tiles and chunks, an odd Dl + R, bf16 output. */
static void bf16_case(const char *name, int H, int Dl, int R, int bs, int nreq,
                      const int *ql, const int *kl, int causal, double qamp,
                      enum kv_dtype od)
{
    struct kv_err e = {{0}};
    int64_t T = 0, nblk = 1, cols = 1, D = Dl + R, maxk = 1;
    for (int b = 0; b < nreq; b++) {
        T += ql[b];
        nblk += (kl[b] + bs - 1) / bs;
        cols = (kl[b] + bs - 1) / bs > cols ? (kl[b] + bs - 1) / bs : cols;
        maxk = kl[b] > maxk ? kl[b] : maxk;
    }
    double scale = 1.0 / sqrt((double)D);
    struct kv_tensor q, cache;
    int64_t sq[3] = {T, H, D}, sc[4] = {nblk, bs, 1, D};
    kv_tensor_init(&q);
    kv_tensor_init(&cache);
    kv_tensor_alloc(&q, KV_BF16, 3, sq, 0, &e);
    kv_tensor_alloc(&cache, KV_BF16, 4, sc, 0, &e);
    for (size_t i = 0; i < kv_tensor_numel(&q); i++)
        ((uint16_t *)q.data)[i] = kv_f32_to_bf16((float)(urand() * qamp));
    for (size_t i = 0; i < kv_tensor_numel(&cache); i++)
        ((uint16_t *)cache.data)[i] = kv_f32_to_bf16((float)urand());
    int64_t *bt = calloc((size_t)(nreq * cols), sizeof *bt), next = 0;
    int64_t *seq = calloc((size_t)nreq, sizeof *seq), *qls = calloc((size_t)nreq, sizeof *qls);
    for (int b = 0; b < nreq; b++) {
        seq[b] = kl[b];
        qls[b] = ql[b];
        for (int64_t k = 0; k < (kl[b] + bs - 1) / bs; k++, next++)
            bt[b * cols + k] = 1 + (next * 7 + 3) % (nblk - 1);
    }
    double A, V, X = kv_bound_scan_x(&q, &cache, scale);
    kv_mla_scan_absorbed(&q, &cache, Dl, scale, &A, &V);
    int routes[2] = {KV_BF16_MODEL_X86, (int)kv_bf16_route_best()};
    int nr = routes[1] != KV_BF16_NONE ? 2 : 1;
    for (int ri = 0; ri < nr; ri++) {
        struct kv_tensor o;
        struct kv_mla_req r;
        kv_tensor_init(&o);
        memset(&r, 0, sizeof r);
        r.q = &q; r.cache = &cache; r.block_table = bt; r.bt_rows = (size_t)nreq;
        r.bt_cols = (size_t)cols; r.seq_lens = seq; r.n_seq_lens = (size_t)nreq;
        r.q_lens = qls; r.n_q_lens = (size_t)nreq; r.kv_lora_rank = Dl; r.causal = causal;
        r.scale = scale; r.out_dtype = od; r.n_threads = 2; r.bf16_route = routes[ri];
        if (kv_mla_absorbed(&r, &o, NULL, &e)) {
            TAP_OK(0, "bf16 tiles, %s (%s): %s", name, kv_bf16_route_name(routes[ri]), e.msg);
            continue;
        }
        double worst = 0.0, *s = malloc(sizeof(double) * (size_t)maxk);
        int64_t t0 = 0;
        for (int b = 0; b < nreq; b++) {
            for (int64_t i = 0; i < ql[b]; i++)
                for (int h = 0; h < H; h++) {
                    int64_t n = causal ? i + kl[b] - ql[b] + 1 : kl[b], row = (t0 + i) * H + h;
                    for (int64_t j = 0; j < n; j++) {
                        int64_t slot = bt[b * cols + j / bs] * bs + j % bs;
                        double a = 0.0;
                        for (int64_t d = 0; d < D; d++)
                            a += (double)kv_bf16_to_f32(((uint16_t *)q.data)[row * D + d]) *
                                 kv_bf16_to_f32(((uint16_t *)cache.data)[slot * D + d]);
                        s[j] = scale * a;
                    }
                    softmax64(s, n);
                    for (int64_t l = 0; l < Dl; l++) {
                        double a = 0.0;
                        for (int64_t j = 0; j < n; j++) {
                            int64_t slot = bt[b * cols + j / bs] * bs + j % bs;
                            a += s[j] * kv_bf16_to_f32(((uint16_t *)cache.data)[slot * D + l]);
                        }
                        double got = kv_tensor_get_f64(&o, (size_t)(row * Dl + l));
                        worst = fmax(worst, fabs(got - a));
                    }
                }
            t0 += ql[b];
        }
        free(s);
        double bound = kv_mla_bound_absorbed_bf16(maxk, D, A, V, X, od,
                                                  kv_bf16_route_odd(routes[ri]));
        TAP_OK(worst <= bound, "bf16 tiles, %s (%s): max error %.3g <= bound %.3g", name,
               kv_bf16_route_name(routes[ri]), worst, bound);
        kv_tensor_release(&o);
    }
    free(bt);
    free(seq);
    free(qls);
    kv_tensor_release(&q);
    kv_tensor_release(&cache);
}

static void bf16_tiles(void)
{
    static const int d_ql[3] = {1, 1, 1}, d_kl[3] = {300, 129, 1};
    static const int m_ql[2] = {2, 3}, m_kl[2] = {5000, 70};
    bf16_case("decode, 16 heads", 16, 64, 16, 64, 3, d_ql, d_kl, 1, 2.0, KV_F32);
    bf16_case("mtp rows across key chunks, odd Dl + R", 8, 48, 9, 16, 2, m_ql, m_kl, 1, 1.0,
              KV_F32);
    bf16_case("non-causal, bf16 out", 4, 32, 8, 7, 3, d_ql, d_kl, 0, 3.0, KV_BF16);
    /* the decode tiles (Dl a multiple of 32): an odd Dl + R, rows that
     * fill no register tile, keys across tiles of 128 */
    bf16_case("decode tiles, odd Dl + R, 20 heads", 20, 64, 7, 16, 3, d_ql, d_kl, 1, 2.0,
              KV_F32);
}

int main(void)
{
    static const struct mcase cases[] = {
        {"decode", 3, 16, 8, 8, 12, 4, 3, {1, 1, 1}, {5, 9, 1}, 1, KV_F32, 0, 1.0},
        {"mtp decode", 4, 32, 8, 16, 8, 64, 2, {2, 3}, {70, 3}, 1, KV_F32, 0, 2.0},
        {"chunked prefill", 2, 24, 6, 10, 10, 7, 3, {5, 17, 1}, {12, 17, 30}, 1, KV_F32, 0, 1.5},
        {"non-causal", 3, 16, 4, 4, 4, 5, 2, {3, 2}, {3, 11}, 0, KV_F32, 0.3, 3.0},
        {"bf16 cache", 2, 32, 8, 8, 8, 16, 2, {1, 4}, {40, 33}, 1, KV_BF16, 0, 2.0},
        {"f16 cache, sharp", 2, 16, 8, 8, 8, 8, 1, {3}, {20}, 1, KV_F16, 0, 12.0},
        {"key chunks", 2, 16, 8, 8, 8, 64, 2, {1, 2}, {9000, 4100}, 1, KV_F32, 0, 2.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    /* the DeepSeek-V2-Lite geometry and scale */
    const char *top = getenv("KV_TOP");
    char path[4096];
    struct kv_latent L;
    struct kv_err e = {{0}};
    snprintf(path, sizeof path, "%s/tests/configs/deepseek-v2-lite.json", top ? top : ".");
    if (kv_latent_load(path, 0, &L, &e) == 0) {
        struct mcase v2 = {"deepseek-v2-lite", (int)L.n_heads, (int)L.kv_lora_rank,
                           (int)L.rope_dim, (int)L.nope_dim, (int)L.v_dim, 64, 2,
                           {1, 40}, {150, 100}, 1, KV_BF16, L.softmax_scale, 1.0};
        run_case(&v2);
    } else {
        TAP_OK(0, "deepseek-v2-lite.json: %s", e.msg);
    }
    errors();
    configs();
    bf16_tiles();
    return tap_done();
}
