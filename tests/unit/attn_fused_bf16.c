/* attn_fused_bf16.c - the fused bf16 kernels, lib/attn/fused_bf16.h on
 * the avx512bf16 route and on its model (model-x86), which take every
 * item of at least 32 rows when the vector level is AVX-512, and on
 * aarch64 lib/attn/fused_bf16_neon.h on the neon-bf16 route (BFDOT) and
 * on its model (model-arm), which take them at the NEON level (the rule
 * of kvattn(1)): causal and windowed, Lq != Lk, GQA stacking, odd head dims
 * (a key row copied with a zero) and value dims past the register tiles,
 * odd key blocks (pairs of keys cut at a block's end) and blocks of 128,
 * a panel ending on an odd key, thd varlen with an empty request,
 * softcap, ALiBi and sinks, a NaN key, a paged cache.  Each against a float64 reference
 * from the bf16 values within the bf16 bound of kvattn(1) ACCURACY (P
 * rounded; lib/attn/bound.h), the output and LSE bit-identical for 1 and 3
 * threads, the instruction's bits equal to its model's where the CPU has
 * it, and the items counted on the fused kernels at AVX-512 or NEON (none
 * below, where the tiles run: make check runs every level); a paged cache gives
 * the bits of the same keys stored contiguously. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/bf16.h"
#include "core/isa.h"
#include "fused_case.h"
#include "tap.h"

/* This machine's model route, and whether route r is its instruction. */
#if defined(__aarch64__)
#define MODEL_ROUTE KV_BF16_MODEL_ARM
#define IS_HW(r) ((r) == KV_BF16_NEON)
#else
#define MODEL_ROUTE KV_BF16_MODEL_X86
#define IS_HW(r) ((r) == KV_BF16_AVX512)
#endif

static int same(const struct kv_tensor *a, const struct kv_tensor *b)
{
    return a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

/* The case's output and LSE (o1, l1, one thread) against the reference:
 * the worst output error, and the worst LSE error over its bound. */
static void check_ref(const struct fcase *c, const struct fdata *f, const struct kv_tensor *o1,
                      const struct kv_tensor *l1, double A, double X,
                      const struct kv_bound_variants *bv, double *worst, double *lworst)
{
    *worst = *lworst = 0;
    for (int b = 0; b < c->nreq; b++)
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < c->lq[b]; i++) {
                const float *o = get_row(c, o1, c->Dv, b, h, i, f->Lq);
                for (int d = 0; d < c->Dv; d++)
                    *worst = fmax(*worst, fcase_err(o[d], AT(f->ref, c->Hq, f->Lq, c->Dv, b, h,
                                                            i, d)));
                double y = AT(f->lse, c->Hq, f->Lq, 1, b, h, i, 0);
                double lb = kv_bound_attn_lse_bf16_var(f->Lk, c->D, A, fabs(y), X, 0, 0, bv);
                *lworst = fmax(*lworst, fcase_err(*get_row(c, l1, 1, b, h, i, f->Lq), y) / lb);
            }
}

static void run_case(const struct fcase *c, enum kv_bf16_route hw, int level)
{
    struct fdata f;
    struct kv_err e = {{0}};
    fcase_init(c, &f);
    double A, V, qk_max;
    struct kv_bound_variants bv;
    fcase_bound_inputs(c, &f, &A, &V, &qk_max, &bv);
    double X = f.scale * (qk_max + 1.0);
    double bound = kv_bound_attn_out_bf16_var(f.Lk, c->D, A, V, X, KV_F32, 0, 1, &bv);
    enum kv_bf16_route routes[2] = {MODEL_ROUTE, hw};
    struct kv_tensor mo, ml;
    kv_tensor_init(&mo);
    kv_tensor_init(&ml);
    for (int ri = 0; ri < (IS_HW(hw) ? 2 : 1); ri++) {
        const char *rn = kv_bf16_route_name(routes[ri]);
        struct kv_tensor o1, l1, o3, l3;
        struct kv_attn_stats st;
        kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o3); kv_tensor_init(&l3);
        f.r.bf16_route = (int)routes[ri];
        f.r.n_threads = 1;
        int ok1 = kv_attn_run(&f.r, &o1, &l1, &e) == 0;
        kv_attn_last_stats(&st);
        f.r.n_threads = 3;
        int ok3 = kv_attn_run(&f.r, &o3, &l3, &e) == 0;
        TAP_OK(ok1 && ok3, "%s, %s: runs (%s)", c->name, rn, ok1 && ok3 ? "" : e.msg);
        if (!ok1 || !ok3)
            goto next;
#if defined(__x86_64__)
        int want = level == 2;
#elif defined(__aarch64__)
        int want = kv_isa_has(KV_ISA_NEON);
        (void)level;
#else
        int want = 0;
        (void)level;
#endif
        TAP_OK(st.bf16_route == (int)routes[ri] && (st.fused_items > 0) == want,
               "%s, %s: %llu items on the fused kernels (%s expected)", c->name, rn,
               (unsigned long long)st.fused_items, want ? "some" : "none");
        double worst, lworst;
        check_ref(c, &f, &o1, &l1, A, X, &bv, &worst, &lworst);
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
    fcase_free(&f);
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
    if (kv_tensor_alloc(&q, KV_BF16, 3, sq, 0, NULL) ||
        kv_tensor_alloc(&k, KV_BF16, 3, sk, 0, NULL) ||
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
    static const struct fcase cases[] = {
        {"causal D 128, blocks of 128", 0, 2, 2, 128, 128, 1, 0, 1, {300}, {300}, KV_BF16,
         0, 0, 0, 0, 0, 1.0, 0},
        {"causal GQA 4:1, Lq < Lk, odd D, Dv 45", 0, 8, 2, 37, 45, 1, 0, 2, {70, 70},
         {131, 131}, KV_BF16, 0, 0, 0, 0, 0, 1.0, 0},
        {"full, odd key blocks of 7", 0, 3, 1, 24, 19, 0, 0, 1, {53}, {77}, KV_BF16, 0, 0, 0,
         40, 7, 1.0, 0},
        {"window 33, Lq > Lk, key blocks of 37", 0, 4, 4, 64, 64, 0, 33, 1, {150}, {120},
         KV_BF16, 0, 0, 0, 0, 37, 1.0, 0},
        {"thd varlen causal, an empty request", 1, 4, 2, 40, 40, 1, 0, 3, {1, 90, 33},
         {0, 90, 141}, KV_BF16, 0, 0, 0, 48, 16, 1.0, 0},
        {"softcap, ALiBi and sinks", 0, 4, 2, 32, 48, 1, 0, 1, {99}, {99}, KV_BF16, 2.5, 1, 1,
         0, 0, 3.0, 0},
        {"sinks over an empty row, window 1", 1, 2, 1, 16, 16, 1, 1, 2, {40, 7}, {0, 30},
         KV_BF16, 0, 0, 1, 0, 0, 1.0, 0},
        {"a NaN key: the rows that see it NaN, the others not", 0, 4, 2, 32, 32, 1, 0, 1, {70},
         {70}, KV_BF16, 0, 0, 0, 0, 0, 1.0, 1},
    };
    enum kv_bf16_route hw = kv_bf16_route_best();
    int level = kv_attn_limit_isa(-1);
    printf("# instruction route: %s, vector level %d\n", kv_bf16_route_name(hw), level);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], hw, level);
    test_paged(MODEL_ROUTE);
    if (IS_HW(hw))
        test_paged(hw);
    return tap_done();
}
