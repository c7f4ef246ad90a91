/* xattn_kern.c - the register tiles of kvxattn's f32 strided scores
 * (lib/attn/xattn_kern.h) on every level this CPU has: each score equals,
 * bit for bit, the dot product summed in feature order with one rounding
 * per multiply-add (fmaf from 0), for partial tiles (fewer rows than the
 * tile's), column ranges cut inside a panel at either end, the last
 * panel's zero-padded keys, and a feature count of 1; the columns outside
 * the range and the rows after m are left as they were. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "core/isa.h"
#include "attn/xattn_int.h"
#include "tap.h"

static uint32_t rng = 12345;

static float rnd(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((int32_t)(rng >> 8) - (1 << 23)) / (float)(1 << 21);
}

/* One level's kernel against the reference on one case. */
static int check(xattn_kern_fn *fn, int64_t mr, int64_t nr, int m, int64_t sd,
                 int64_t nk, int64_t j0, int64_t j1)
{
    int64_t np = (nk + nr - 1) / nr, ld = j1 - j0 + 5;
    float *q = malloc((size_t)(mr * sd) * sizeof(float));
    float *k = malloc((size_t)(nk * sd) * sizeof(float));
    float *kp = malloc((size_t)(np * nr * sd) * sizeof(float));
    float *c = malloc((size_t)((mr + 1) * ld) * sizeof(float));
    int bad = 0;

    for (int64_t i = 0; i < mr * sd; i++)
        q[i] = rnd();
    for (int64_t i = 0; i < nk * sd; i++)
        k[i] = rnd();
    /* panel p: key p nr + j's feature f at [f nr + j], zeros after nk */
    for (int64_t p = 0; p < np; p++)
        for (int64_t f = 0; f < sd; f++)
            for (int64_t j = 0; j < nr; j++)
                kp[(p * sd + f) * nr + j] = p * nr + j < nk ? k[(p * nr + j) * sd + f] : 0.0f;
    for (int64_t i = 0; i < (mr + 1) * ld; i++)
        c[i] = -7.0f;
    fn(q, sd, m, sd, kp, j0, j1, c, ld);
    for (int64_t r = 0; r <= mr; r++)
        for (int64_t j = 0; j < ld; j++) {
            float want = -7.0f;
            if (r < m && j < j1 - j0) {
                want = 0.0f;
                for (int64_t f = 0; f < sd; f++)
                    want = fmaf(q[r * sd + f], k[(j0 + j) * sd + f], want);
            }
            if (memcmp(&want, &c[r * ld + j], sizeof(float)) != 0)
                bad++;
        }
    free(q);
    free(k);
    free(kp);
    free(c);
    return bad;
}

struct lvl {
    const char *name;
    enum kv_isa isa;
    xattn_kern_fn *fn;
    int64_t mr, nr;
};

int main(void)
{
    const struct lvl lv[] = {
#if defined(__x86_64__) && defined(__GNUC__)
        {"avx512", KV_ISA_AVX512, xattn_kern_tile_512, XK512_MR, XK512_NR},
        {"avx2", KV_ISA_AVX2, xattn_kern_tile_256, XK256_MR, XK256_NR},
#elif defined(__aarch64__)
        {"neon", KV_ISA_NEON, xattn_kern_tile_neon, XKNEON_MR, XKNEON_NR},
#endif
        {NULL, KV_ISA_GENERIC, NULL, 0, 0},
    };
    int ran = 0;

    for (const struct lvl *l = lv; l->name; l++) {
        int64_t nr = l->nr;
        if (!kv_isa_has(l->isa))
            continue;
        ran++;
        TAP_OK(check(l->fn, l->mr, nr, (int)l->mr, 64, 3 * nr, 0, 3 * nr) == 0,
               "%s: whole tiles, 3 panels", l->name);
        TAP_OK(check(l->fn, l->mr, nr, 1, 37, 2 * nr + 5, 3, 2 * nr + 5) == 0,
               "%s: one row, cut at both ends, zero-padded last panel", l->name);
        TAP_OK(check(l->fn, l->mr, nr, (int)l->mr - 1, 1, nr + 1, nr - 1, nr + 1) == 0,
               "%s: one feature, a range across a panel edge", l->name);
        TAP_OK(check(l->fn, l->mr, nr, 2, 1031, nr / 2 + 1, 1, nr / 2) == 0,
               "%s: 1031 features, inside one panel", l->name);
    }
    if (!ran)
        TAP_OK(1, "no level with register tiles on this CPU (sgemm only)");
    return tap_done();
}
