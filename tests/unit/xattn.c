/* xattn.c - the XAttention rules one by one on small hand-checkable inputs
 * (spec xattn.md sections 4-9, 11, 15), and the fast estimate against a
 * plain scalar reference written from the spec's mask construction. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "attn/xattn.h"
#include "attn/bound.h"
#include "attn/bf16.h"
#include "tap.h"

static struct kv_tensor mk4(int64_t b, int64_t h, int64_t l, int64_t d,
                            const float *vals)
{
    struct kv_tensor t;
    int64_t shape[4] = {b, h, l, d};
    struct kv_err e;

    kv_tensor_init(&t);
    kv_tensor_alloc(&t, KV_F32, 4, shape, 0, &e);
    if (vals)
        memcpy(t.data, vals, t.nbytes);
    return t;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Random "peaky" data: noise plus a few strong key tokens per head. */
static struct kv_tensor randt(int64_t b, int64_t h, int64_t l, int64_t d,
                              float amp)
{
    struct kv_tensor t = mk4(b, h, l, d, NULL);
    float *p = t.data;
    for (size_t i = 0; i < kv_tensor_numel(&t); i++)
        p[i] = frand() * amp;
    for (int64_t x = 0; x < b * h * l; x += 37)
        for (int64_t j = 0; j < d; j++)
            p[x * d + j] += 3.0f * amp;
    return t;
}

static int est(const struct kv_tensor *q, const struct kv_tensor *k,
               struct kv_xattn_opts *o, struct kv_tensor *m,
               struct kv_tensor *s)
{
    struct kv_err e;
    kv_tensor_init(m);
    kv_tensor_init(s);
    if (kv_xattn_estimate(q, k, o, m, s, NULL, &e)) {
        printf("# %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* ---- scalar reference of the sums, literally from the spec ---------- */

/* Block sums [nqb x nkb_out] for one head: padded domain (clean: to the
 * block; compat: to C), mask built as the spec describes, softmax and sums
 * in double. */
static void ref_sums(const float *q, int64_t lq, const float *k, int64_t lk,
                     int64_t d, int64_t s, int64_t bs, int causal,
                     int64_t qoff, int64_t chunk, enum kv_xattn_mode mode,
                     double norm, double *out, int64_t nkb_out)
{
    int64_t nq = (lq + s - 1) / s, nk = (lk + s - 1) / s;
    int64_t r = bs / s, lkp, lqp, ncol;
    float *sc = malloc((size_t)(nq * nk) * sizeof(float));
    double *row;
    kv_xattn_scores_ref(q, lq, k, lk, d, s, mode, norm, sc);
    if (chunk) {
        lkp = (lk + chunk - 1) / chunk * chunk;
        lqp = (lq + chunk - 1) / chunk * chunk;
    } else {
        lkp = (lk + bs - 1) / bs * bs;
        lqp = (lq + bs - 1) / bs * bs;
    }
    ncol = lkp / s;
    row = malloc((size_t)ncol * sizeof(double));
    memset(out, 0, (size_t)(((lq + bs - 1) / bs) * nkb_out) * sizeof(double));
    for (int64_t i = 0; i < nq; i++) {
        double mx = -INFINITY, tot = 0;
        for (int64_t j = 0; j < ncol; j++) {
            double v = j < nk ? sc[i * nk + j] : 0.0;
            int allowed = 1;
            if (!chunk) {
                if (j >= nk)
                    allowed = 0;           /* padded keys never count */
                if (causal && j > qoff / s + i)
                    allowed = 0;
            } else if (causal) {
                int64_t cr = chunk / s, c = i / cr, lr = i % cr;
                int64_t nkc = lkp / chunk, nqc = lqp / chunk;
                int64_t cs = (c + nkc - nqc) * cr, ce = cs + cr;
                int64_t npad = (lkp - lk) / s;
                /* 1. tail (or, for 0, everything: the "-0 slice") */
                allowed = npad == 0 ? 0 : (j < ncol - npad);
                /* 2. the triangle of the chunk's square */
                if (j >= cs && j < ce)
                    allowed = j - cs <= lr;
                /* 3. future chunks */
                if (j >= ce)
                    allowed = 0;
            }
            row[j] = allowed ? v : -INFINITY;
            if (row[j] > mx)
                mx = row[j];
        }
        for (int64_t j = 0; j < ncol; j++) {
            row[j] = row[j] == -INFINITY ? 0.0 : exp(row[j] - mx);
            tot += row[j];
        }
        for (int64_t j = 0; j < ncol; j++)
            if (j / r < nkb_out)
                out[(i / r) * nkb_out + j / r] += row[j] / tot;
    }
    free(row);
    free(sc);
}

/* Compare the fast estimate's sums with ref_sums for every head. */
static void check_vs_ref(const char *title, int64_t nb, int64_t hq,
                         int64_t hkv, int64_t lq, int64_t lk, int64_t d,
                         int64_t s, int64_t bs, int causal, int64_t qoff,
                         int64_t chunk, enum kv_xattn_mode mode, double norm)
{
    struct kv_tensor q = randt(nb, hq, lq, d, 1.0f);
    struct kv_tensor k = randt(nb, hkv, lk, d, 1.0f);
    struct kv_tensor m, su;
    struct kv_xattn_opts o;
    double thr[64], maxerr = 0.0, *ref;
    int64_t nqb = (lq + bs - 1) / bs, nkb = (lk + bs - 1) / bs;
    int64_t roff = qoff;

    for (int i = 0; i < 64; i++)
        thr[i] = 0.9;
    kv_xattn_opts_init(&o);
    o.stride = s;
    o.block_size = bs;
    o.causal = causal;
    o.q_offset = qoff;
    o.compat_chunk = chunk;
    o.select_mode = mode;
    o.norm = norm;
    o.thresholds = thr;
    o.nthreads = 2;
    if (roff < 0)
        roff = lk - lq;
    ref = malloc((size_t)(nqb * nkb) * sizeof(double));
    if (est(&q, &k, &o, &m, &su)) {
        TAP_OK(0, "%s", title);
    } else {
        for (int64_t b = 0; b < nb; b++)
            for (int64_t h = 0; h < hq; h++) {
                int64_t hk = h / (hq / hkv);
                ref_sums((float *)q.data + (b * hq + h) * lq * d, lq,
                         (float *)k.data + (b * hkv + hk) * lk * d, lk, d, s,
                         bs, causal, roff, chunk, mode, norm, ref, nkb);
                for (int64_t i = 0; i < nqb * nkb; i++) {
                    double g = ((float *)su.data)[(b * hq + h) * nqb * nkb + i];
                    if (fabs(g - ref[i]) > maxerr)
                        maxerr = fabs(g - ref[i]);
                }
            }
        TAP_OK(maxerr <= 2e-5, "%s: sums match the scalar reference (max "
               "error %.3g)", title, maxerr);
    }
    free(ref);
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&m);
    kv_tensor_release(&su);
}

static int keep_eq(const uint8_t *keep, const char *want)
{
    for (size_t i = 0; want[i]; i++)
        if ((keep[i] != 0) != (want[i] == '1'))
            return 0;
    return 1;
}

static void test_select(void)
{
    int64_t scr[64];
    uint8_t keep[32];

    /* 8.4 and 8.5: strict '<', the crossing block kept */
    {
        const float v[] = {0.5f, 0.375f, 0.125f};
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_FREE, -1, 0.5, scr, keep);
        TAP_OK(keep_eq(keep, "100"), "free: 0.5 of 0.5 reached by one block");
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_FREE, -1, 0.6, scr, keep);
        TAP_OK(keep_eq(keep, "110"), "free: the block crossing 0.6 is kept");
    }
    {
        const float v[] = {0.5f, 0.25f, 0.25f};
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_FREE, -1, 0.75, scr, keep);
        TAP_OK(keep_eq(keep, "110"), "free: acc == required stops (strict <)");
    }
    /* 8.5 ties: lower index first */
    {
        const float v[] = {0.1f, 0.3f, 0.3f, 0.3f};
        kv_xattn_select_row(v, 4, KV_XATTN_SEL_FREE, -1, 0.5, scr, keep);
        TAP_OK(keep_eq(keep, "1110"), "ties broken by lower block index");
    }
    /* 8.3: block 0 always kept */
    {
        const float v[] = {0.0f, 0.9f, 0.1f};
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_FREE, -1, 0.5, scr, keep);
        TAP_OK(keep_eq(keep, "110"), "free: block 0 kept though empty (8.3)");
    }
    /* 8.1: blocks 0 and diag forced, no lag */
    {
        const float v[] = {0.1f, 0.2f, 0.4f, 0.3f};
        kv_xattn_select_row(v, 4, KV_XATTN_SEL_FORCED, 3, 0.5, scr, keep);
        TAP_OK(keep_eq(keep, "1011"), "8.1: forced 0+3 = 0.4, one more block");
        kv_xattn_select_row(v, 4, KV_XATTN_SEL_FORCED, 3, 0.4, scr, keep);
        TAP_OK(keep_eq(keep, "1001"), "8.1: forced blocks alone reach 0.4");
    }
    /* 8.2: only diag forced, the cumulative sum lags by one */
    {
        const float v[] = {0.3f, 0.25f, 0.15f, 0.3f};
        kv_xattn_select_row(v, 4, KV_XATTN_SEL_LAGGED, 3, 0.5, scr, keep);
        TAP_OK(keep_eq(keep, "1101"), "8.2: lag keeps block 1 as well");
        kv_xattn_select_row(v, 4, KV_XATTN_SEL_FORCED, 3, 0.5, scr, keep);
        TAP_OK(keep_eq(keep, "1001"), "8.1 on the same row keeps less");
    }
    {
        const float v[] = {0.1f, 0.6f, 0.3f};
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_LAGGED, 2, 0.01, scr, keep);
        TAP_OK(keep_eq(keep, "111"), "8.2: first candidate kept "
               "unconditionally, block 0 by 8.3");
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_LAGGED, 2, 0.0, scr, keep);
        TAP_OK(keep_eq(keep, "101"), "8.2: threshold 0 keeps diag and block 0");
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_FORCED, 2, 0.0, scr, keep);
        TAP_OK(keep_eq(keep, "101"), "8.1: threshold 0 keeps the forced blocks");
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_FORCED, 2, 1.0, scr, keep);
        TAP_OK(keep_eq(keep, "111"), "threshold 1 keeps every block with mass");
    }
    {
        const float v[] = {0.0f, 0.0f, 0.0f};
        kv_xattn_select_row(v, 3, KV_XATTN_SEL_FREE, -1, 0.9, scr, keep);
        TAP_OK(keep_eq(keep, "100"), "empty row keeps block 0 only");
    }
}

/* 4 and 5: sampling order and scale on hand values. */
static void test_scores(void)
{
    /* S = 4, D = 1: q tokens 1..4, k tokens 10, 20, 30, 40 */
    const float q[] = {1, 2, 3, 4}, k[] = {10, 20, 30, 40};
    float out[1];

    kv_xattn_scores_ref(q, 4, k, 4, 1, 4, KV_XATTN_INVERSE, 1.0, out);
    /* (q3 k0 + q2 k1 + q1 k2 + q0 k3) / sqrt(1) / 4 = (40+60+60+40)/4 */
    TAP_OK(out[0] == 50.0f, "inverse: antidiagonal q reversed, k forward "
           "(%g)", out[0]);
    kv_xattn_scores_ref(q, 4, k, 4, 1, 4, KV_XATTN_SLASH, 1.0, out);
    TAP_OK(out[0] == 75.0f, "slash: main diagonal (%g)", out[0]);
    {
        /* D = 4, S = 2, norm 2: one group, dot = 2*(1*1*4) = 8;
         * 8 / sqrt(4) / 2 / 2 = 1 */
        float q4[8], k4[8];
        for (int i = 0; i < 8; i++)
            q4[i] = k4[i] = 1.0f;
        kv_xattn_scores_ref(q4, 2, k4, 2, 4, 2, KV_XATTN_INVERSE, 2.0, out);
        TAP_OK(out[0] == 1.0f, "scale 1/(sqrt(D) S norm) with D = 4, S = 2, "
               "norm 2 (%g)", out[0]);
    }
    {
        /* partial group: Lq = 3, S = 2 -> row 1 holds token 2 and a zero */
        const float q3[] = {1, 1, 5}, k2[] = {1, 3};
        float o2[2];
        kv_xattn_scores_ref(q3, 3, k2, 2, 1, 2, KV_XATTN_INVERSE, 1.0, o2);
        /* row 1: q[3]=0 pairs k0, q[2]=5 pairs k1=3 -> 15/1/2 */
        TAP_OK(o2[1] == 7.5f, "partial last group is zero-padded (%g)", o2[1]);
    }
}

/* 6: the group-level causal triangle keeps the future pair of the
 * diagonal tile. */
static void test_triangle(void)
{
    /* S = B = 2 (R = 1), D = 1, Lq = Lk = 4: q = [0, 0, 2, 0],
     * k = [0, 0, 0, 1].  Row 1, col 1: (q3 k2 + q2 k3)/1/2 = 1 (q2 . k3
     * has k after q); row 1, col 0: 0.  A[1][1] = e/(1+e). */
    const float qv[] = {0, 0, 2, 0}, kvv[] = {0, 0, 0, 1};
    struct kv_tensor q = mk4(1, 1, 4, 1, qv), k = mk4(1, 1, 4, 1, kvv);
    struct kv_tensor m, s;
    struct kv_xattn_opts o;
    double thr = 0.9;

    kv_xattn_opts_init(&o);
    o.stride = 2;
    o.block_size = 2;
    o.thresholds = &thr;
    if (est(&q, &k, &o, &m, &s) == 0) {
        const float *a = s.data;
        double want = exp(1.0) / (1.0 + exp(1.0));
        TAP_OK(a[0] == 1.0f && a[1] == 0.0f, "row 0 sees only its own group");
        TAP_OK(fabs(a[3] - want) < 1e-6 && fabs(a[2] - (1 - want)) < 1e-6,
               "diagonal group tile fully included: A[1][1] = %g", a[3]);
    } else {
        TAP_OK(0, "triangle estimate");
    }
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&m);
    kv_tensor_release(&s);
}

/* 9: keep_sink is query-block row 0; keep_recent the diagonal;
 * per-head thresholds; GQA; the lag (8.2) against intended (8.1). */
static void test_options(void)
{
    struct kv_tensor q = randt(1, 4, 512, 16, 1.5f);
    struct kv_tensor k = randt(1, 2, 512, 16, 1.5f);
    struct kv_tensor m0, s0, m1, s1;
    struct kv_xattn_opts o;
    double thr[4] = {0.0, 1.0, 0.7, 0.7};
    const uint8_t *a, *b;
    int ok;

    kv_xattn_opts_init(&o);
    o.stride = 4;
    o.block_size = 64;   /* 8 x 8 blocks */
    o.thresholds = thr;
    if (est(&q, &k, &o, &m0, &s0)) {
        TAP_OK(0, "options base");
        return;
    }
    a = m0.data;
    ok = 1;
    for (int qb = 0; qb < 8; qb++)
        for (int kb = 0; kb < 8; kb++)
            ok &= a[qb * 8 + kb] == (kb == 0 || kb == qb);
    TAP_OK(ok, "threshold 0 (head 0): only block 0 and the diagonal");
    ok = 1;
    for (int qb = 0; qb < 8; qb++)
        for (int kb = 0; kb < 8; kb++)
            ok &= a[64 + qb * 8 + kb] == (kb <= qb);
    TAP_OK(ok, "threshold 1 (head 1): every causal block");
    /* heads 2 and 3 share kv head 1 but have their own queries */
    TAP_OK(memcmp((char *)s0.data + 128 * 4, (char *)s0.data + 192 * 4,
                  64 * 4) != 0, "GQA: heads 2, 3 differ (own queries)");
    {
        /* GQA: the same as an expanded K with one kv head per q head */
        struct kv_tensor ke = mk4(1, 4, 512, 16, NULL), me, se;
        for (int h = 0; h < 4; h++)
            memcpy((float *)ke.data + h * 512 * 16,
                   (float *)k.data + (h / 2) * 512 * 16, 512 * 16 * 4);
        if (est(&q, &ke, &o, &me, &se) == 0) {
            TAP_OK(memcmp(me.data, m0.data, m0.nbytes) == 0 &&
                   memcmp(se.data, s0.data, s0.nbytes) == 0,
                   "GQA: q head h uses kv head h / (Hq/Hkv)");
        }
        kv_tensor_release(&ke);
        kv_tensor_release(&me);
        kv_tensor_release(&se);
    }
    o.keep_sink = 1;
    if (est(&q, &k, &o, &m1, &s1) == 0) {
        b = m1.data;
        ok = 1;
        for (int h = 0; h < 4; h++)
            for (int kb = 0; kb < 8; kb++)
                ok &= b[h * 64 + kb] == 1;
        ok &= memcmp(b + 8, a + 8, 56) == 0;
        TAP_OK(ok, "keep_sink: query-block row 0 all kept, future included");
    }
    kv_tensor_release(&m1);
    kv_tensor_release(&s1);
    o.keep_sink = 0;
    o.rule = KV_XATTN_RULE_INTENDED;
    thr[0] = thr[1] = thr[2] = thr[3] = 0.8;
    if (est(&q, &k, &o, &m1, &s1) == 0) {
        struct kv_tensor m2, s2;
        size_t sub = 1, more = 0;
        o.rule = KV_XATTN_RULE_ORIGINAL;
        est(&q, &k, &o, &m2, &s2);
        for (size_t i = 0; i < m1.nbytes; i++) {
            uint8_t x = ((uint8_t *)m1.data)[i], y = ((uint8_t *)m2.data)[i];
            if (x && !y)
                sub = 0;
            more += y && !x;
        }
        TAP_OK(sub && more > 0, "original rule (lag) keeps a superset of "
               "intended: %zu more blocks", more);
        kv_tensor_release(&m2);
        kv_tensor_release(&s2);
    }
    kv_tensor_release(&m1);
    kv_tensor_release(&s1);
    /* with an offset (ci > 0) both rules agree: 8.1 everywhere */
    {
        struct kv_tensor ql = mk4(1, 4, 256, 16, NULL), m2, s2;
        for (int h = 0; h < 4; h++)
            memcpy((float *)ql.data + h * 256 * 16,
                   (float *)q.data + (h * 512 + 256) * 16, 256 * 16 * 4);
        o.rule = KV_XATTN_RULE_ORIGINAL;
        est(&ql, &k, &o, &m1, &s1);
        o.rule = KV_XATTN_RULE_INTENDED;
        est(&ql, &k, &o, &m2, &s2);
        TAP_OK(m1.nbytes && memcmp(m1.data, m2.data, m1.nbytes) == 0,
               "q offset 256: original and intended agree (no lag)");
        kv_tensor_release(&ql);
        kv_tensor_release(&m1);
        kv_tensor_release(&s1);
        kv_tensor_release(&m2);
        kv_tensor_release(&s2);
    }
    /* keep_recent in non-causal mode keeps the diagonal */
    o.rule = KV_XATTN_RULE_ORIGINAL;
    o.causal = 0;
    thr[0] = thr[1] = thr[2] = thr[3] = 0.0;
    if (est(&q, &k, &o, &m1, &s1) == 0) {
        struct kv_tensor m2, s2;
        b = m1.data;
        ok = 1;
        for (int i = 0; i < 4 * 64; i++)
            ok &= b[i] == ((i % 8) == 0);
        TAP_OK(ok, "non-causal threshold 0: block 0 only");
        o.keep_recent = 1;
        est(&q, &k, &o, &m2, &s2);
        b = m2.data;
        ok = 1;
        for (int i = 0; i < 4 * 64; i++)
            ok &= b[i] == ((i % 8) == 0 || (i % 8) == (i / 8) % 8);
        TAP_OK(ok, "keep_recent: the diagonal kept too");
        kv_tensor_release(&m2);
        kv_tensor_release(&s2);
    }
    kv_tensor_release(&m1);
    kv_tensor_release(&s1);
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&m0);
    kv_tensor_release(&s0);
}

/* Q10: compat non-causal keeps zero keys in the softmax; clean does not. */
static void test_padding(void)
{
    struct kv_tensor q = randt(1, 1, 1000, 8, 1.0f);
    struct kv_tensor k = randt(1, 1, 1000, 8, 1.0f);
    struct kv_tensor m, s;
    struct kv_xattn_opts o;
    double thr = 0.9, row = 0;
    kv_xattn_opts_init(&o);
    o.causal = 0;
    o.thresholds = &thr;
    if (est(&q, &k, &o, &m, &s) == 0) {
        for (int kb = 0; kb < 8; kb++)
            row += ((float *)s.data)[kb];
        TAP_OK(fabs(row - 16.0) < 1e-4, "clean non-causal: a full q block "
               "row sums to R = 16 (%g)", row);
    }
    kv_tensor_release(&m);
    kv_tensor_release(&s);
    o.compat_chunk = 16384;
    row = 0;
    if (est(&q, &k, &o, &m, &s) == 0) {
        for (int kb = 0; kb < 8; kb++)
            row += ((float *)s.data)[kb];
        TAP_OK(row < 8.0, "compat non-causal: zero keys dilute the real "
               "blocks (%g of 16)", row);
    }
    kv_tensor_release(&m);
    kv_tensor_release(&s);
    kv_tensor_release(&q);
    kv_tensor_release(&k);
}

static void test_density(void)
{
    /* 2 x 3 mask, causal, offset 128, block 128, lq 256 */
    const uint8_t mask[] = {1, 0, 0, 1, 1, 1};
    int64_t kept, valid;
    kv_xattn_density(mask, 1, 2, 3, 1, 128, 256, 128, &kept, &valid);
    TAP_OK(kept == 4 && valid == 5, "density: kept 4 of 5 valid (%lld/%lld)",
           (long long)kept, (long long)valid);
    kv_xattn_density(mask, 1, 2, 3, 0, 0, 256, 128, &kept, &valid);
    TAP_OK(kept == 4 && valid == 6, "density non-causal: 4 of 6");
}

static void test_errors(void)
{
    struct kv_xattn_opts o;
    struct kv_err e;
    int64_t qs[4] = {1, 4, 256, 64}, ks[4] = {1, 3, 256, 64}, off;
    double thr[4] = {0.9, 0.9, 0.9, 0.9};

    kv_xattn_opts_init(&o);
    o.thresholds = thr;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == -1 &&
           strstr(e.msg, "4") && strstr(e.msg, "3"),
           "head counts that don't divide: %s", e.msg);
    qs[1] = ks[1] = 0;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == -1 &&
           strstr(e.msg, "empty") && strstr(e.msg, "0 heads"),
           "no heads is empty input: %s", e.msg);
    qs[1] = 4;
    ks[1] = 2;
    ks[3] = 32;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == -1 &&
           strstr(e.msg, "64") && strstr(e.msg, "32"),
           "mismatched D: %s", e.msg);
    ks[3] = 64;
    ks[2] = 128;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == -1 &&
           strstr(e.msg, "256") && strstr(e.msg, "128"),
           "Lq > Lk causal without offset: %s", e.msg);
    o.q_offset = 0;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == 0 && off == 0,
           "Lq > Lk with an explicit offset is accepted");
    o.stride = 24;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == -1 &&
           strstr(e.msg, "24") && strstr(e.msg, "128"),
           "stride not dividing the block: %s", e.msg);
    o.stride = 8;
    thr[2] = 1.5;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == -1 &&
           strstr(e.msg, "1.5"), "threshold outside [0, 1]: %s", e.msg);
    thr[2] = 0.9;
    o.q_offset = -1;
    o.compat_chunk = 128;
    TAP_OK(kv_xattn_check(&o, qs, ks, &off, &e) == -1,
           "compat: more q chunks than k chunks: %s", e.msg);
}

/* The vector row kernels against the scalar reference. */
static void test_kernels(void)
{
    float x[1000], y[1000];
    double worst = 0.0;
    struct kv_tensor q = randt(1, 2, 700, 32, 2.0f);
    struct kv_tensor k = randt(1, 2, 700, 32, 2.0f);
    struct kv_tensor m0, s0, m1, s1;
    struct kv_xattn_opts o;
    double thr[2] = {0.9, 0.8}, maxd = 0.0;

    for (int i = 0; i < 1000; i++)
        x[i] = y[i] = -90.0f + 90.0f * (float)i / 999.0f + frand() * 0.01f;
    kv_xattn_exp_shift(x, 1000, 0.5f);
    for (int i = 0; i < 1000; i++) {
        double want = expf(y[i] - 0.5f);
        double rel = want > 0 ? fabs(x[i] - want) / want : fabs(x[i]);
        if (want > 1e-37 && rel > worst)
            worst = rel;
    }
    TAP_OK(worst <= 2.5e-7, "vector exp within 2 ulp of expf (rel %.3g)",
           worst);
    /* blocks of 16 reshaped columns (the AVX-512 row kernel), 8, 4 (a
     * block inside one vector) and 32, with and without a q offset, norm
     * a power of two or not */
    static const struct { int64_t s, bs, off; double norm; } cf[] = {
        {4, 64, -1, 1.0}, {8, 64, -1, 1.0}, {16, 64, 64, 3.0}, {2, 64, -1, 2.0},
    };
    for (size_t c = 0; c < sizeof(cf) / sizeof(cf[0]); c++) {
        kv_xattn_opts_init(&o);
        o.stride = cf[c].s;
        o.block_size = cf[c].bs;
        o.q_offset = cf[c].off;
        o.norm = cf[c].norm;
        o.thresholds = thr;
        kv_xattn_force_scalar(1);
        est(&q, &k, &o, &m0, &s0);
        kv_xattn_force_scalar(0);
        est(&q, &k, &o, &m1, &s1);
        /* two routes: within twice the relative bound of each sum */
        double beta = kv_bound_xattn_sum(o.stride, q.shape[q.ndim - 1],
                                         kv_bound_xattn_A(&q, &k, o.norm),
                                         (k.shape[k.ndim - 2] + o.stride - 1) / o.stride,
                                         (o.block_size / o.stride) * (o.block_size / o.stride));
        maxd = 0.0;
        for (size_t i = 0; i < kv_tensor_numel(&s0); i++) {
            double a = ((float *)s0.data)[i], b = ((float *)s1.data)[i];
            double d = a == b ? 0 : fabs(a - b) / (2 * beta * fmax(fabs(a), fabs(b)));
            if (d > maxd)
                maxd = d;
        }
        TAP_OK(m0.nbytes && memcmp(m0.data, m1.data, m0.nbytes) == 0 &&
               maxd <= 1.0, "S %lld BS %lld: scalar and vector paths: masks "
               "equal, sums within the sum of two bounds (%.3g of it)",
               (long long)o.stride, (long long)o.block_size, maxd);
        kv_tensor_release(&m0);
        kv_tensor_release(&s0);
        kv_tensor_release(&m1);
        kv_tensor_release(&s1);
    }
    kv_tensor_release(&q);
    kv_tensor_release(&k);
}

/* bf16 Q and K handed over as bf16 tensors (read by the tiles as they
 * are) give the masks and sums of the same values as f32 on the same
 * route, bit for bit; without a route (or with one of them f32) they are
 * widened first, as the f32 path reads them. */
static struct kv_tensor to_bf16(const struct kv_tensor *f, struct kv_tensor *exact)
{
    struct kv_tensor b;
    struct kv_err e;
    kv_tensor_init(&b);
    kv_tensor_init(exact);
    kv_tensor_convert(&b, f, KV_BF16, &e);
    kv_tensor_convert(exact, &b, KV_F32, &e);
    return b;
}

static void test_bf16_inputs(void)
{
    static const struct { int64_t lq, lk, d, s, bs, compat; int slash, causal; } cs[] = {
        {700, 700, 32, 4, 64, 0, 0, 1},
        {300, 517, 15, 5, 20, 0, 1, 0},      /* Lk % S != 0, odd S x D */
        {256, 600, 16, 8, 64, 128, 0, 1},    /* compat chunks */
        {130, 258, 8, 2, 16, 0, 0, 1},
    };
    double thr[4] = {0.9, 0.8, 0.95, 0.7};
    int ok_eq = 1, ok_f32 = 1, ok_mixed = 1;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        struct kv_tensor qf = randt(1, 4, cs[c].lq, cs[c].d, 1.5f);
        struct kv_tensor kf = randt(1, 2, cs[c].lk, cs[c].d, 1.5f);
        struct kv_tensor qx, kx, m0, s0, m1, s1, m2, s2, m3, s3;
        struct kv_tensor qb = to_bf16(&qf, &qx), kb = to_bf16(&kf, &kx);
        struct kv_xattn_opts o;
        kv_xattn_opts_init(&o);
        o.stride = cs[c].s;
        o.block_size = cs[c].bs;
        o.compat_chunk = cs[c].compat;
        o.select_mode = cs[c].slash ? KV_XATTN_SLASH : KV_XATTN_INVERSE;
        o.causal = cs[c].causal;
        o.thresholds = thr;
        o.bf16_route = KV_BF16_MODEL_X86;
        int rc = est(&qx, &kx, &o, &m0, &s0) | est(&qb, &kb, &o, &m1, &s1);
        ok_eq &= rc == 0 && m0.nbytes == m1.nbytes && s0.nbytes == s1.nbytes &&
                 memcmp(m0.data, m1.data, m0.nbytes) == 0 &&
                 memcmp(s0.data, s1.data, s0.nbytes) == 0;
        /* Q bf16, K f32: both read as f32 values, the same route */
        rc = est(&qb, &kx, &o, &m3, &s3);
        ok_mixed &= rc == 0 && s3.nbytes == s0.nbytes &&
                    memcmp(s0.data, s3.data, s0.nbytes) == 0;
        o.bf16_route = 0;
        kv_tensor_release(&m0);
        kv_tensor_release(&s0);
        rc = est(&qx, &kx, &o, &m0, &s0) | est(&qb, &kb, &o, &m2, &s2);
        ok_f32 &= rc == 0 && s0.nbytes == s2.nbytes &&
                  memcmp(s0.data, s2.data, s0.nbytes) == 0 &&
                  memcmp(m0.data, m2.data, m0.nbytes) == 0;
        struct kv_tensor *all[] = {&qf, &kf, &qx, &kx, &qb, &kb, &m0, &s0, &m1,
                                   &s1, &m2, &s2, &m3, &s3};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            kv_tensor_release(all[i]);
    }
    TAP_OK(ok_eq, "bf16 tensors on the bf16 tiles = their f32 values on the "
           "same route, masks and sums bit for bit (4 geometries)");
    TAP_OK(ok_mixed, "bf16 Q with f32 K = both f32, bit for bit");
    TAP_OK(ok_f32, "bf16 tensors without a bf16 route = their f32 values on "
           "the f32 path, bit for bit");
}

/* On the bf16 tiles Q and K are read as they are, so the tiles check them:
 * an inf or a nan anywhere in bf16 Q or K is refused with a message naming
 * the tensor, the outputs untouched, even in keys no query sees (q_offset
 * 0 with Lk > Lq) and in a partial last group of keys; on every route this
 * machine has (the model everywhere, the hardware where present). */
static void test_bf16_nonfinite(void)
{
    int routes[2] = {KV_BF16_MODEL_X86, (int)kv_bf16_route_best()};
    static const struct { int q; int64_t at; uint16_t v; } cs[] = {
        {1, -1, 0x7fc0},        /* Q's last value: nan */
        {1, 0, 0xff80},         /* Q's first: -inf */
        {1, 2 * 96 * 24 / 2 + 5, 0x7f81},   /* Q, head 1: a signalling nan */
        {0, -1, 0x7f80},        /* K's last (a partial group, never seen) */
        {0, 7, 0xffc0},         /* K, early */
    };
    int nr = routes[1] != KV_BF16_NONE && routes[1] != routes[0] ? 2 : 1;
    int ok_msg = 1, ok_keep = 1, ok_fine = 1, n = 0;
    double thr[2] = {0.9, 0.9};

    for (int r = 0; r < nr; r++) {
        for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
            struct kv_tensor qf = randt(1, 2, 96, 24, 1.0f), kf = randt(1, 1, 301, 24, 1.0f);
            struct kv_tensor qx, kx, qb = to_bf16(&qf, &qx), kb = to_bf16(&kf, &kx);
            struct kv_tensor m, sm, *t = cs[c].q ? &qb : &kb;
            struct kv_xattn_opts o;
            struct kv_err e;
            int64_t at = cs[c].at < 0 ? (int64_t)kv_tensor_numel(t) + cs[c].at : cs[c].at;

            kv_xattn_opts_init(&o);
            o.stride = 4;
            o.block_size = 32;
            o.q_offset = 0;
            o.thresholds = thr;
            o.bf16_route = routes[r];
            ok_fine &= est(&qb, &kb, &o, &m, &sm) == 0;
            kv_tensor_release(&m);
            kv_tensor_release(&sm);
            ((uint16_t *)t->data)[at] = cs[c].v;
            kv_tensor_init(&m);
            kv_tensor_init(&sm);
            e.msg[0] = 0;
            ok_msg &= kv_xattn_estimate(&qb, &kb, &o, &m, &sm, NULL, &e) != 0 &&
                      strstr(e.msg, cs[c].q ? "Q holds an inf or a nan"
                                            : "K holds an inf or a nan") != NULL;
            ok_keep &= m.data == NULL && sm.data == NULL;
            n++;
            struct kv_tensor *all[] = {&qf, &kf, &qx, &kx, &qb, &kb, &m, &sm};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                kv_tensor_release(all[i]);
        }
    }
    TAP_OK(ok_fine, "bf16 tiles: finite Q and K accepted (%d runs)", n);
    TAP_OK(ok_msg, "bf16 tiles: an inf or a nan in Q or K refused, the tensor named "
           "(%d cases, %d route(s))", n, nr);
    TAP_OK(ok_keep, "bf16 tiles: the outputs untouched on refusal");
}

int main(void)
{
    test_bf16_inputs();
    test_bf16_nonfinite();
    test_kernels();
    test_scores();
    test_select();
    test_triangle();
    test_options();
    test_padding();
    test_density();
    test_errors();
    check_vs_ref("square 1024 S8", 1, 2, 2, 1024, 1024, 32, 8, 128, 1, -1, 0,
                 KV_XATTN_INVERSE, 1.0);
    check_vs_ref("odd 1001 S8", 1, 2, 1, 1001, 1001, 16, 8, 128, 1, -1, 0,
                 KV_XATTN_INVERSE, 1.0);
    check_vs_ref("chunked 256 of 1024 S4 norm 2", 2, 4, 2, 256, 1024, 16, 4,
                 64, 1, 768, 0, KV_XATTN_INVERSE, 2.0);
    check_vs_ref("non-causal 300 x 777 S16 slash", 1, 2, 2, 300, 777, 8, 16,
                 128, 0, -1, 0, KV_XATTN_SLASH, 1.0);
    check_vs_ref("compat C=384 201 x 969", 1, 2, 2, 201, 969, 16, 8, 128, 1,
                 -1, 384, KV_XATTN_INVERSE, 1.0);
    check_vs_ref("compat C=256 1024 (-0 slice)", 1, 1, 1, 1024, 1024, 16, 8,
                 128, 1, -1, 256, KV_XATTN_INVERSE, 1.0);
    check_vs_ref("compat C=256 256 x 1024 (-0 slice)", 1, 1, 1, 256, 1024, 16,
                 8, 128, 1, -1, 256, KV_XATTN_INVERSE, 1.0);
    check_vs_ref("compat C=1024 non-causal 700 x 1000", 1, 1, 1, 700, 1000, 16,
                 8, 128, 0, -1, 1024, KV_XATTN_INVERSE, 1.0);
    check_vs_ref("compat C=512 misplaced 300 x 1000", 1, 1, 1, 300, 1000, 16,
                 8, 128, 1, -1, 512, KV_XATTN_INVERSE, 1.0);
    return tap_done();
}
