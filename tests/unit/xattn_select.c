/* xattn_select.c - kv_xattn_select_row against a plain reference: the
 * candidates fully sorted with qsort_r and a comparator (descending by
 * value, ties by lower index, -0 == +0, NaN last), then taken in that order
 * until the threshold is crossed.  Random rows of many lengths (0, 1, 2,
 * ... and large) drawn from small value sets so that ties, equal values,
 * zeros of both signs, NaN and infinities are common, for every selection
 * kind, diagonals inside and outside the row, and thresholds 0, 1 and in
 * between.  The kept sets must be equal byte for byte. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "attn/xattn.h"
#include "tap.h"

static int cmp_desc(const void *pa, const void *pb, void *ctx)
{
    const float *v = ctx;
    int64_t ia = *(const int64_t *)pa, ib = *(const int64_t *)pb;
    int na = isnan(v[ia]), nb = isnan(v[ib]);

    if (na != nb)
        return na ? 1 : -1;
    if (!na && v[ia] > v[ib])
        return -1;
    if (!na && v[ia] < v[ib])
        return 1;
    return ia < ib ? -1 : ia > ib;
}

/* The selection written out the plain way (xattn.h's contract). */
static void select_ref(const float *vals, int64_t n, enum kv_xattn_sel kind,
                       int64_t diag, double tau, int64_t *cand, uint8_t *keep)
{
    double total = 0.0, required, acc = 0.0;
    int64_t ncand = 0;
    int have_diag = diag >= 0 && diag < n;

    memset(keep, 0, (size_t)n);
    if (n <= 0)
        return;
    for (int64_t j = 0; j < n; j++)
        total += (double)vals[j];
    required = tau * total;
    if (kind == KV_XATTN_SEL_FREE) {
        have_diag = 0;
    } else if (kind == KV_XATTN_SEL_LAGGED && have_diag) {
        keep[diag] = 1;
        acc = (double)vals[diag];
    } else {
        keep[0] = 1;
        acc = (double)vals[0];
        if (have_diag && diag != 0) {
            keep[diag] = 1;
            acc += (double)vals[diag];
        }
        kind = KV_XATTN_SEL_FORCED;
    }
    for (int64_t j = 0; j < n; j++)
        if (!keep[j])
            cand[ncand++] = j;
    qsort_r(cand, (size_t)ncand, sizeof(int64_t), cmp_desc, (void *)vals);
    if (kind == KV_XATTN_SEL_LAGGED) {
        /* candidate p >= 1 is judged on the sum of the forced block and
         * the candidates before p - 1; candidate 0 on nothing */
        for (int64_t p = 0; p < ncand; p++) {
            double judged = 0.0;
            if (p > 0) {
                judged = acc;
                for (int64_t r = 0; r + 1 < p; r++)
                    judged += (double)vals[cand[r]];
            }
            if (!(judged < required))
                break;
            keep[cand[p]] = 1;
        }
    } else {
        for (int64_t p = 0; p < ncand; p++) {
            if (!(acc < required))
                break;
            keep[cand[p]] = 1;
            acc += (double)vals[cand[p]];
        }
    }
    keep[0] = 1;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static double unit(void)
{
    return (double)(rnd() >> 11) * 0x1p-53;
}

/* One value of a row of the given flavour. */
static float draw(int flavour)
{
    static const float few[] = {0.0f, -0.0f, 0.25f, 0.5f, 1.0f, 0.125f};
    uint64_t r = rnd();

    switch (flavour) {
    case 0:                 /* softmax-like masses, distinct */
        return (float)(unit() * unit());
    case 1:                 /* a few values: many ties */
        return few[r % 6];
    case 2:                 /* ties, zeros and some NaN */
        return r % 7 == 0 ? NAN : few[r % 6];
    case 3:                 /* everything, infinities and negatives too */
        switch (r % 10) {
        case 0: return NAN;
        case 1: return INFINITY;
        case 2: return -INFINITY;
        case 3: return -0.0f;
        case 4: return -(float)unit();
        case 5: return 0x1p-140f;       /* subnormal */
        default: return (float)unit();
        }
    default:                /* all equal */
        return 0.5f;
    }
}

int main(void)
{
    static const int64_t lens[] = {0, 1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 127,
                                   128, 129, 1000, 4096};
    static const double taus[] = {0.0, 1.0, 0.9, 0.5, 0.95, 0.999};
    const int nlen = (int)(sizeof(lens) / sizeof(lens[0]));
    int64_t maxn = 4096;
    float *v = malloc((size_t)maxn * sizeof(float));
    int64_t *scr = malloc((size_t)maxn * 2 * sizeof(int64_t));
    int64_t *cand = malloc((size_t)maxn * sizeof(int64_t));
    uint8_t *keep = malloc((size_t)maxn + 1), *want = malloc((size_t)maxn + 1);
    long rows[3] = {0, 0, 0}, bad[3] = {0, 0, 0}, kept = 0;

    if (!v || !scr || !cand || !keep || !want)
        return 1;
    for (int li = 0; li < nlen; li++) {
        int64_t n = lens[li];
        int reps = n <= 16 ? 600 : n <= 200 ? 120 : 12;
        for (int rep = 0; rep < reps; rep++) {
            int flavour = rep % 5;
            for (int64_t j = 0; j < n; j++)
                v[j] = draw(flavour);
            if (rep % 3 == 0 && n > 0)      /* one dominant block */
                v[rnd() % (uint64_t)n] = 8.0f;
            for (int k = 0; k < 3; k++) {
                enum kv_xattn_sel kind = (enum kv_xattn_sel)k;
                int64_t diag = (int64_t)(rnd() % (uint64_t)(n + 3)) - 1;
                double tau = rep % 4 == 0 ? unit() : taus[rnd() % 6];
                if (rep % 7 == 0)
                    diag = n - 1;
                else if (rep % 7 == 1)
                    diag = 0;
                keep[n] = want[n] = 0xa5;   /* nothing written past n */
                kv_xattn_select_row(v, n, kind, diag, tau, scr, keep);
                select_ref(v, n, kind, diag, tau, cand, want);
                rows[k]++;
                if (memcmp(keep, want, (size_t)n + 1) != 0)
                    bad[k]++;
                for (int64_t j = 0; j < n; j++)
                    kept += keep[j];
            }
        }
    }
    TAP_OK(bad[KV_XATTN_SEL_FORCED] == 0,
           "forced selection equals the sorted reference (%ld of %ld rows "
           "differ)", bad[KV_XATTN_SEL_FORCED], rows[KV_XATTN_SEL_FORCED]);
    TAP_OK(bad[KV_XATTN_SEL_LAGGED] == 0,
           "lagged selection equals the sorted reference (%ld of %ld rows "
           "differ)", bad[KV_XATTN_SEL_LAGGED], rows[KV_XATTN_SEL_LAGGED]);
    TAP_OK(bad[KV_XATTN_SEL_FREE] == 0,
           "free selection equals the sorted reference (%ld of %ld rows "
           "differ)", bad[KV_XATTN_SEL_FREE], rows[KV_XATTN_SEL_FREE]);
    TAP_OK(kept > 0, "the rows kept blocks (%ld in all)", kept);

    /* the order itself: ties by lower index, -0 == +0, NaN last */
    {
        const float fin[6] = {0.0f, -0.0f, 0.25f, 0.0f, 0.25f, 0.5f};
        const float zeros[4] = {0.5f, -0.0f, 0.0f, 0.5f};
        const float nan[6] = {NAN, -0.0f, 0.5f, 0.0f, 0.5f, NAN};

        kv_xattn_select_row(fin, 6, KV_XATTN_SEL_FREE, -1, 0.75, scr, keep);
        TAP_OK(memcmp(keep, "\1\0\1\0\0\1", 6) == 0,
               "of two equal values the lower index comes first");
        kv_xattn_select_row(fin, 6, KV_XATTN_SEL_FREE, -1, 1.0, scr, keep);
        TAP_OK(memcmp(keep, "\1\0\1\0\1\1", 6) == 0,
               "threshold 1 stops once the whole mass is reached");
        /* lagged, diagonal 3: the step after the mass is reached takes
         * one more candidate, the -0 at index 1 before the +0 at 2 */
        kv_xattn_select_row(zeros, 4, KV_XATTN_SEL_LAGGED, 3, 1.0, scr,
                            keep);
        TAP_OK(memcmp(keep, "\1\1\0\1", 4) == 0,
               "-0 and +0 are equal (the lower index first)");
        /* a NaN total makes the required mass NaN: nothing is below it
         * (so where NaN sorts never shows in a kept set) */
        kv_xattn_select_row(nan, 6, KV_XATTN_SEL_FREE, -1, 0.5, scr, keep);
        TAP_OK(memcmp(keep, "\1\0\0\0\0\0", 6) == 0,
               "a NaN total keeps only block 0");
    }
    free(v);
    free(scr);
    free(cand);
    free(keep);
    free(want);
    return tap_done();
}
