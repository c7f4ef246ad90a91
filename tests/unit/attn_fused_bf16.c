/* attn_fused_bf16.c - the fused bf16 kernel (lib/attn/fused_bf16.h) on
 * the avx512bf16 route and on its model (model-x86), which take every
 * item of at least 32 rows when the vector level is AVX-512 (the rule of
 * kvattn(1)): causal and windowed, Lq != Lk, GQA stacking, odd head dims
 * (a key row copied with a zero) and value dims past the register tiles,
 * odd key blocks (pairs of keys cut at a block's end) and blocks of 128,
 * a panel ending on an odd key, thd varlen with an empty request,
 * softcap, ALiBi and sinks, a NaN key, a paged cache.  Each against a float64 reference
 * from the bf16 values within the bf16 bound of kvattn(1) ACCURACY (P
 * rounded; lib/attn/bound.h), the output and LSE bit-identical for 1 and 3
 * threads, the instruction's bits equal to its model's where the CPU has
 * it, and the items counted on the fused kernels at AVX-512 (none below,
 * where the tiles run: make check runs every level); a paged cache gives
 * the bits of the same keys stored contiguously. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/bf16.h"
#include "attn/bound.h"
#include "core/half.h"
#include "tap.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void)   /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

struct bcase {
    const char *name;
    int thd, Hq, Hkv, D, Dv, causal, window;
    int nreq, lq[3], lk[3];     /* bhsd: one length pair for every request */
    double softcap;
    int alibi, sinks;
    int64_t tile_q, tile_k;
    double amp;                 /* amplitude of q and k */
    int nan;                    /* a NaN in key 5 of kv head 0 */
};

/* Element (request b, head h, position t, feature d) of a canonical
 * double array [nreq][H][Lmax][W]. */
#define AT(a, H, L, W, b, h, t, d) (a)[(((size_t)(b) * (H) + (h)) * (L) + (t)) * (W) + (d)]

static void reference(const struct bcase *c, int Lq, int Lk, const double *q, const double *k,
                      const double *v, const float *slopes, const float *sinks, double scale,
                      double *out, double *lse)
{
    int G = c->Hq / c->Hkv;
    double *w = malloc(sizeof(double) * (size_t)(Lk + 1));
    for (int b = 0; b < c->nreq; b++)
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < c->lq[b]; i++) {
                int pos = i + c->lk[b] - c->lq[b], lo = 0, hi = c->lk[b];
                if (c->causal || c->window)
                    hi = pos + 1 < hi ? (pos + 1 > 0 ? pos + 1 : 0) : hi;
                if (c->window)
                    lo = pos - c->window + 1 > 0 ? pos - c->window + 1 : 0;
                double mx = sinks ? sinks[h] : -INFINITY;
                for (int j = lo; j < hi; j++) {
                    double s = 0;
                    for (int d = 0; d < c->D; d++)
                        s += AT(q, c->Hq, Lq, c->D, b, h, i, d) * AT(k, c->Hkv, Lk, c->D, b, h / G, j, d);
                    s *= scale;
                    if (c->softcap)
                        s = c->softcap * tanh(s / c->softcap);
                    if (slopes)
                        s += (double)slopes[h] * (j - pos);
                    w[j] = s;
                    mx = s > mx ? s : mx;
                }
                double sum = sinks ? exp(sinks[h] - mx) : 0.0;
                for (int j = lo; j < hi; j++)
                    sum += (w[j] = exp(w[j] - mx));
                for (int d = 0; d < c->Dv; d++) {
                    double o = 0;
                    for (int j = lo; j < hi; j++)
                        o += w[j] * AT(v, c->Hkv, Lk, c->Dv, b, h / G, j, d);
                    AT(out, c->Hq, Lq, c->Dv, b, h, i, d) = sum != 0.0 ? o / sum : 0.0;
                }
                AT(lse, c->Hq, Lq, 1, b, h, i, 0) = sum != 0.0 ? mx + log(sum) : -INFINITY;
            }
    free(w);
}

/* Fill bf16 tensor t from the canonical array a (rounded to bf16 in
 * place), bhsd or thd. */
static void put_all(const struct bcase *c, struct kv_tensor *t, double *a, int H, int L, int W,
                    const int *lens)
{
    int64_t tot = 0;
    for (int b = 0; b < c->nreq; b++)
        tot += lens[b];
    int64_t sh4[4] = {c->nreq, H, L, W}, sh3[3] = {tot, H, W};
    struct kv_err e = {{0}};
    kv_tensor_init(t);
    if (kv_tensor_alloc(t, KV_BF16, c->thd ? 3 : 4, c->thd ? sh3 : sh4, 0, &e))
        abort();
    int64_t t0 = 0;
    for (int b = 0; b < c->nreq; b++) {
        for (int h = 0; h < H; h++)
            for (int i = 0; i < lens[b]; i++)
                for (int d = 0; d < W; d++) {
                    double *x = &AT(a, H, L, W, b, h, i, d);
                    size_t at = c->thd ? ((size_t)(t0 + i) * H + h) * W + d
                                       : (((size_t)b * H + h) * L + i) * W + d;
                    uint16_t u = kv_f32_to_bf16((float)*x);
                    *x = kv_bf16_to_f32(u);
                    ((uint16_t *)t->data)[at] = u;
                }
        t0 += lens[b];
    }
}

/* Output row (b, h, i) of the result: its Dv floats, or its LSE. */
static const float *get_row(const struct bcase *c, const struct kv_tensor *o, int W, int b, int h,
                            int i, int Lq)
{
    if (!c->thd)
        return (const float *)o->data + (((size_t)b * c->Hq + h) * Lq + i) * W;
    int64_t t0 = 0;
    for (int r = 0; r < b; r++)
        t0 += c->lq[r];
    return (const float *)o->data + ((size_t)(t0 + i) * c->Hq + h) * W;
}

static int same(const struct kv_tensor *a, const struct kv_tensor *b)
{
    return a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static void run_case(const struct bcase *c, enum kv_bf16_route hw, int level)
{
    int Lq = 0, Lk = 0;
    for (int b = 0; b < c->nreq; b++) {
        Lq = c->lq[b] > Lq ? c->lq[b] : Lq;
        Lk = c->lk[b] > Lk ? c->lk[b] : Lk;
    }
    size_t nq = (size_t)c->nreq * c->Hq * Lq * c->D, nk = (size_t)c->nreq * c->Hkv * Lk * c->D;
    size_t nv = (size_t)c->nreq * c->Hkv * Lk * c->Dv, no = (size_t)c->nreq * c->Hq * Lq * c->Dv;
    double *q = calloc(nq, sizeof(double)), *k = calloc(nk, sizeof(double));
    double *v = calloc(nv, sizeof(double)), *ref = calloc(no, sizeof(double));
    double *rl = calloc((size_t)c->nreq * c->Hq * Lq, sizeof(double));
    for (size_t i = 0; i < nq; i++)
        q[i] = c->amp * urand();
    for (size_t i = 0; i < nk; i++)
        k[i] = c->amp * urand();
    for (size_t i = 0; i < nv; i++)
        v[i] = urand();
    if (c->nan)
        k[5 * c->D] = NAN;
    struct kv_tensor tq, tk, tv, ts, tsl;
    put_all(c, &tq, q, c->Hq, Lq, c->D, c->lq);
    put_all(c, &tk, k, c->Hkv, Lk, c->D, c->lk);
    put_all(c, &tv, v, c->Hkv, Lk, c->Dv, c->lk);
    float sinks[16], slopes[16];
    int64_t hq = c->Hq, ql[3], kl[3];
    struct kv_err e = {{0}};
    kv_tensor_init(&ts);
    kv_tensor_init(&tsl);
    if (kv_tensor_alloc(&ts, KV_F32, 1, &hq, 0, &e) || kv_tensor_alloc(&tsl, KV_F32, 1, &hq, 0, &e))
        abort();
    for (int h = 0; h < c->Hq; h++) {
        sinks[h] = (float)(2.0 * urand());
        slopes[h] = (float)(0.25 * (urand() + 1.0));
    }
    memcpy(ts.data, sinks, sizeof(float) * (size_t)c->Hq);
    memcpy(tsl.data, slopes, sizeof(float) * (size_t)c->Hq);
    struct kv_attn_req r;
    memset(&r, 0, sizeof r);
    r.layout = c->thd ? KV_ATTN_THD : KV_ATTN_BHSD;
    r.q = &tq;
    r.k = &tk;
    r.v = &tv;
    r.causal = c->causal;
    r.window = c->window;
    r.softcap = c->softcap;
    r.alibi_slopes = c->alibi ? &tsl : NULL;
    r.sinks = c->sinks ? &ts : NULL;
    r.out_dtype = KV_F32;
    r.tile_q = c->tile_q;
    r.tile_k = c->tile_k;
    for (int b = 0; b < c->nreq; b++) {
        ql[b] = c->lq[b];
        kl[b] = c->lk[b];
    }
    if (c->thd) {
        r.q_lens = ql;
        r.kv_lens = kl;
        r.n_q_lens = r.n_kv_lens = (size_t)c->nreq;
    }
    double scale = (float)(1.0 / sqrt((double)c->D));
    reference(c, Lq, Lk, q, k, v, c->alibi ? slopes : NULL, c->sinks ? sinks : NULL, scale, ref,
              rl);

    /* the bound's inputs: A by Cauchy-Schwarz, V, X, the variants' sizes */
    double qn = 0, kn = 0, qm = 0, km = 0, V = 0, smax = 0;
    for (size_t i = 0; i < nq; i += (size_t)c->D) {
        double s = 0;
        for (int d = 0; d < c->D; d++) {
            s += q[i + d] * q[i + d];
            qm = fmax(qm, fabs(q[i + d]));
        }
        qn = fmax(qn, sqrt(s));
    }
    for (size_t i = 0; i < nk; i += (size_t)c->D) {
        double s = 0;
        for (int d = 0; d < c->D; d++) {
            s += k[i + d] * k[i + d];
            km = fmax(km, fabs(k[i + d]));
        }
        kn = fmax(kn, sqrt(s));
    }
    for (size_t i = 0; i < nv; i++)
        V = fmax(V, fabs(v[i]));
    for (int h = 0; h < c->Hq; h++)
        smax = fmax(smax, fabs(sinks[h]));
    struct kv_bound_variants bv = {c->softcap, c->alibi ? 0.5 * (Lq > Lk ? Lq : Lk) : 0.0,
                                   c->sinks, smax};
    double A = scale * qn * kn * 1.0001, X = scale * (fmax(qm, km) + 1.0);
    double bound = kv_bound_attn_out_bf16_var(Lk, c->D, A, V, X, KV_F32, 0, 1, &bv);

    enum kv_bf16_route routes[2] = {KV_BF16_MODEL_X86, hw};
    struct kv_tensor mo, ml;
    kv_tensor_init(&mo);
    kv_tensor_init(&ml);
    for (int ri = 0; ri < (hw == KV_BF16_AVX512 ? 2 : 1); ri++) {
        const char *rn = kv_bf16_route_name(routes[ri]);
        struct kv_tensor o1, l1, o3, l3;
        struct kv_attn_stats st;
        kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o3); kv_tensor_init(&l3);
        r.bf16_route = (int)routes[ri];
        r.n_threads = 1;
        int ok1 = kv_attn_run(&r, &o1, &l1, &e) == 0;
        kv_attn_last_stats(&st);
        r.n_threads = 3;
        int ok3 = kv_attn_run(&r, &o3, &l3, &e) == 0;
        TAP_OK(ok1 && ok3, "%s, %s: runs (%s)", c->name, rn, ok1 && ok3 ? "" : e.msg);
        if (!ok1 || !ok3)
            goto next;
#if defined(__x86_64__)
        int want = level == 2;
#else
        int want = 0;
        (void)level;
#endif
        TAP_OK(st.bf16_route == (int)routes[ri] && (st.fused_items > 0) == want,
               "%s, %s: %llu items on the fused kernels (%s expected)", c->name, rn,
               (unsigned long long)st.fused_items, want ? "some" : "none");
        double worst = 0, lworst = 0;
        for (int b = 0; b < c->nreq; b++)
            for (int h = 0; h < c->Hq; h++)
                for (int i = 0; i < c->lq[b]; i++) {
                    const float *o = get_row(c, &o1, c->Dv, b, h, i, Lq);
                    for (int d = 0; d < c->Dv; d++) {
                        double x = o[d], y = AT(ref, c->Hq, Lq, c->Dv, b, h, i, d);
                        double err = fabs(x - y);
                        if (isnan(x) || isnan(y))
                            err = isnan(x) && isnan(y) ? 0.0 : INFINITY;
                        worst = fmax(worst, err);
                    }
                    double x = *get_row(c, &l1, 1, b, h, i, Lq), y = AT(rl, c->Hq, Lq, 1, b, h, i, 0);
                    double lb = kv_bound_attn_lse_bf16_var(Lk, c->D, A, fabs(y), X, 0, 0, &bv);
                    double err = x == y ? 0.0 : fabs(x - y);
                    if (isnan(x) || isnan(y))
                        err = isnan(x) && isnan(y) ? 0.0 : INFINITY;
                    lworst = fmax(lworst, err / lb);
                }
        TAP_OK(worst <= bound && lworst <= 1.0,
               "%s, %s: within the bound (%.3g <= %.3g; lse at %.3g of its bound)", c->name, rn,
               worst, bound, lworst);
        TAP_OK(same(&o1, &o3) && same(&l1, &l3), "%s, %s: output and LSE bit-identical for 1 "
               "and 3 threads", c->name, rn);
        if (ri == 0) {
            kv_tensor_move(&mo, &o1);
            kv_tensor_move(&ml, &l1);
        } else {
            TAP_OK(same(&mo, &o1) && same(&ml, &l1), "%s: %s output and LSE equal its model's "
                   "bit for bit", c->name, rn);
        }
next:
        kv_tensor_release(&o1); kv_tensor_release(&l1);
        kv_tensor_release(&o3); kv_tensor_release(&l3);
    }
    kv_tensor_release(&mo); kv_tensor_release(&ml);
    kv_tensor_release(&tq); kv_tensor_release(&tk); kv_tensor_release(&tv);
    kv_tensor_release(&ts); kv_tensor_release(&tsl);
    free(q); free(k); free(v); free(ref); free(rl);
}

/* A paged bf16 cache read in place: two causal prefill requests (thd,
 * GQA 2:1, 100 and 77 tokens) through a shuffled block table of 16-token
 * pages give the bits of the same keys and values stored contiguously. */
static void test_paged(enum kv_bf16_route route)
{
    const int64_t Hq = 4, Hkv = 2, D = 64, page = 16, len[2] = {100, 77}, T = 177;
    const int64_t npb = (len[0] + page - 1) / page, nblocks = 2 * npb + 3;
    int64_t sq[3] = {T, Hq, D}, sk[3] = {T, Hkv, D}, sc[5] = {2, nblocks, page, Hkv, D};
    struct kv_tensor q, k, v, cache, o1, l1, o2, l2;
    kv_tensor_init(&q); kv_tensor_init(&k); kv_tensor_init(&v); kv_tensor_init(&cache);
    kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o2); kv_tensor_init(&l2);
    if (kv_tensor_alloc(&q, KV_BF16, 3, sq, 0, NULL) || kv_tensor_alloc(&k, KV_BF16, 3, sk, 0, NULL) ||
        kv_tensor_alloc(&v, KV_BF16, 3, sk, 0, NULL) ||
        kv_tensor_alloc(&cache, KV_BF16, 5, sc, 0, NULL))
        abort();
    uint16_t *qd = q.data, *kd = k.data, *vd = v.data, *cd = cache.data;
    for (int64_t i = 0; i < T * Hq * D; i++)
        qd[i] = kv_f32_to_bf16((float)urand());
    for (int64_t i = 0; i < T * Hkv * D; i++) {
        kd[i] = kv_f32_to_bf16((float)urand());
        vd[i] = kv_f32_to_bf16((float)urand());
    }
    int64_t bt[2 * 7];
    for (int64_t i = 0; i < 2 * npb; i++)
        bt[i] = (i * 5 + 1) % nblocks;      /* 5 is coprime with nblocks */
    for (int b = 0, t0 = 0; b < 2; t0 += (int)len[b], b++)
        for (int64_t j = 0; j < len[b]; j++) {
            int64_t blk = bt[b * npb + j / page], off = j % page;
            size_t src = (size_t)((t0 + j) * Hkv * D), row = (size_t)(Hkv * D) * sizeof(uint16_t);
            memcpy(cd + ((blk * page + off) * Hkv) * D, kd + src, row);
            memcpy(cd + (((nblocks + blk) * page + off) * Hkv) * D, vd + src, row);
        }
    struct kv_attn_req r;
    struct kv_err e = {{0}};
    memset(&r, 0, sizeof r);
    r.layout = KV_ATTN_THD;
    r.q = &q;
    r.kv_cache = &cache;
    r.block_table = bt;
    r.bt_rows = 2;
    r.bt_cols = (size_t)npb;
    r.q_lens = len;
    r.n_q_lens = 2;
    r.seq_lens = len;
    r.n_seq_lens = 2;
    r.causal = 1;
    r.out_dtype = KV_F32;
    r.n_threads = 2;
    r.bf16_route = (int)route;
    int ok = kv_attn_run(&r, &o1, &l1, &e) == 0;
    struct kv_attn_stats st;
    kv_attn_last_stats(&st);
    r.kv_cache = NULL;
    r.block_table = NULL;
    r.seq_lens = NULL;
    r.n_seq_lens = 0;
    r.k = &k;
    r.v = &v;
    r.kv_lens = len;
    r.n_kv_lens = 2;
    ok = ok && kv_attn_run(&r, &o2, &l2, &e) == 0;
    TAP_OK(ok && same(&o1, &o2) && same(&l1, &l2),
           "paged bf16 cache, %s: the bits of the contiguous keys (%llu items fused) %s",
           kv_bf16_route_name(route), (unsigned long long)st.fused_items, ok ? "" : e.msg);
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
    kv_tensor_release(&cache);
    kv_tensor_release(&o1); kv_tensor_release(&l1); kv_tensor_release(&o2); kv_tensor_release(&l2);
}

int main(void)
{
    static const struct bcase cases[] = {
        {"causal D 128, blocks of 128", 0, 2, 2, 128, 128, 1, 0, 1, {300}, {300}, 0, 0, 0, 0, 0,
         1.0, 0},
        {"causal GQA 4:1, Lq < Lk, odd D, Dv 45", 0, 8, 2, 37, 45, 1, 0, 2, {70, 70},
         {131, 131}, 0, 0, 0, 0, 0, 1.0, 0},
        {"full, odd key blocks of 7", 0, 3, 1, 24, 19, 0, 0, 1, {53}, {77}, 0, 0, 0, 40, 7, 1.0,
         0},
        {"window 33, Lq > Lk, key blocks of 37", 0, 4, 4, 64, 64, 0, 33, 1, {150}, {120}, 0, 0,
         0, 0, 37, 1.0, 0},
        {"thd varlen causal, an empty request", 1, 4, 2, 40, 40, 1, 0, 3, {1, 90, 33},
         {0, 90, 141}, 0, 0, 0, 48, 16, 1.0, 0},
        {"softcap, ALiBi and sinks", 0, 4, 2, 32, 48, 1, 0, 1, {99}, {99}, 2.5, 1, 1, 0, 0, 3.0,
         0},
        {"sinks over an empty row, window 1", 1, 2, 1, 16, 16, 1, 1, 2, {40, 7}, {0, 30}, 0, 0, 1,
         0, 0, 1.0, 0},
        {"a NaN key: the rows that see it NaN, the others not", 0, 4, 2, 32, 32, 1, 0, 1, {70},
         {70}, 0, 0, 0, 0, 0, 1.0, 1},
    };
    enum kv_bf16_route hw = kv_bf16_route_best();
    int level = kv_attn_limit_isa(-1);
    printf("# instruction route: %s, vector level %d\n", kv_bf16_route_name(hw), level);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], hw, level);
    test_paged(KV_BF16_MODEL_X86);
    if (hw == KV_BF16_AVX512)
        test_paged(hw);
    return tap_done();
}
