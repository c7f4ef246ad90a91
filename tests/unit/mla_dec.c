/* mla_dec.c - the absorbed MLA's bf16 decode tiles (lib/attn/mla_dec)
 * against the packed tiles of lib/attn/bf16 (kv_bf16_gemm on
 * kv_bf16_pack_panel and kv_bf16_pack_rows), bit for bit: the decode tiles
 * promise the same sums in the same order.  On the model of VDPBF16PS
 * everywhere and on the instruction where the CPU has it (and
 * KVTOOLS_ISA allows it).  Every key row is its own allocation of exactly
 * d values, so a read past it shows under ASan.  Shapes: row counts that
 * are not multiples of the register tiles, odd head dims, odd key counts,
 * values of many magnitudes with infinities, zeros of both signs and
 * subnormals among them.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attn/bf16.h"
#include "attn/mla_dec.h"
#include "core/half.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A bf16 value: mostly uniform in [-2, 2), some of wide magnitude, a few
 * special (with specials set). */
static uint16_t val(int specials)
{
    uint64_t z = next();
    double u = (double)(z >> 11) / 4503599627370496.0 * 4.0 - 2.0;
    switch (specials ? z % 64 : 10) {
    case 0: return 0x8000;                      /* -0 */
    case 1: return 0x0001;                      /* a subnormal */
    case 2: return 0x7f80;                      /* +inf */
    case 3: u = ldexp(u, (int)(z >> 5 & 31) - 16); break;
    default: break;
    }
    return kv_f32_to_bf16((float)u);
}

static int same_bits(const float *a, const float *b, size_t n, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *at = i;
            return 0;
        }
    return 1;
}

static uint16_t **key_rows(int64_t nk, int64_t d, int specials)
{
    uint16_t **k = malloc((size_t)nk * sizeof *k);
    for (int64_t t = 0; t < nk; t++) {
        k[t] = malloc((size_t)d * sizeof(uint16_t));
        for (int64_t i = 0; i < d; i++)
            k[t][i] = val(specials);
    }
    return k;
}

static void free_rows(uint16_t **k, int64_t nk)
{
    for (int64_t t = 0; t < nk; t++)
        free(k[t]);
    free(k);
}

/* Q K^T of n rows of d against nk keys, scaled. */
static void qk_case(enum kv_bf16_route r, int64_t n, int64_t d, int64_t nk, int specials)
{
    const int64_t kp = (d + 1) / 2, lda = 2 * kp, ldr = (n + 15) / 16 * 16, lds = nk + 3;
    const float scale = 0.0883883476f;
    uint16_t *q = calloc((size_t)(n * lda), sizeof *q);
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < d; c++)
            q[i * lda + c] = val(specials);
    uint16_t **k = key_rows(nk, d, specials);
    /* the packed reference */
    const int64_t ps = 32 * kp, np = (nk + 31) / 32;
    uint32_t *bp = calloc((size_t)(np * ps), sizeof *bp);
    for (int64_t c0 = 0; c0 < nk; c0 += 32)
        kv_bf16_pack_panel(bp + (c0 / 32) * ps, (const uint16_t *const *)k + c0,
                           nk - c0 < 32 ? (int)(nk - c0) : 32, d);
    float *want = calloc((size_t)(n * lds), sizeof *want);
    float *got = calloc((size_t)(n * lds), sizeof *got);
    kv_bf16_gemm(r, n, nk, kp, q, lda, bp, ps, want, lds, scale, 0);
    uint32_t *qt = calloc((size_t)(kp * ldr), sizeof *qt);
    float *st = malloc((size_t)(((nk + 15) / 16 * 16) * ldr) * sizeof *st);
    kv_mla_dec_pack_q(n, d, q, lda, ldr, qt);
    kv_mla_dec_qk(r, n, d, qt, ldr, (const uint16_t *const *)k, nk, scale, st, got, lds);
    int ok = 1;
    size_t at = 0;
    for (int64_t i = 0; i < n && ok; i++)
        if (!same_bits(want + i * lds, got + i * lds, (size_t)nk, &at)) {
            ok = 0;
            at += (size_t)(i * lds);
        }
    TAP_OK(ok, "Q K^T %s, %lld rows, d %lld, %lld keys%s: the packed tiles' bits%s",
           kv_bf16_route_name(r), (long long)n, (long long)d, (long long)nk,
           specials ? ", special values" : "", ok ? "" : " (first difference below)");
    if (!ok)
        TAP_OK(0, "  at %zu: %a, tiles %a", at, (double)got[at], (double)want[at]);
    free(q); free(bp); free(want); free(got); free(qt); free(st);
    free_rows(k, nk);
}

/* P V: n rows (a multiple of 8) of P over nk keys, dv values, added to a
 * random start. */
static void pv_case(enum kv_bf16_route r, int64_t n, int64_t dv, int64_t nk, int specials)
{
    const int64_t ldp = nk + 1 + (nk + 1) % 2 + 2, kp = (nk + 1) / 2;
    uint16_t *p = calloc((size_t)(n * ldp), sizeof *p);
    for (int64_t i = 0; i < n; i++)
        for (int64_t t = 0; t < nk; t++)
            p[i * ldp + t] = kv_f32_to_bf16((float)((next() >> 11) / 9007199254740992.0));
    uint16_t **v = key_rows(nk + 3, dv, specials);     /* 3 more: fetched ahead only */
    float *want = malloc((size_t)(n * dv) * sizeof *want), *got = malloc((size_t)(n * dv) * sizeof *got);
    for (int64_t i = 0; i < n * dv; i++)
        want[i] = got[i] = kv_bf16_to_f32(val(0)) * 3.0f;
    const int64_t ps = 32 * kp;
    uint32_t *vp = calloc((size_t)(((dv + 31) / 32) * ps), sizeof *vp);
    for (int64_t t = 0; t < nk; t += 2)
        kv_bf16_pack_rows(vp, ps, t, v[t], t + 1 < nk ? v[t + 1] : NULL, dv);
    kv_bf16_gemm(r, n, dv, kp, p, ldp, vp, ps, want, dv, 1.0f, 1);
    kv_mla_dec_pv(r, n, (const uint32_t *)(const void *)p, ldp / 2, (const uint16_t *const *)v,
                  nk, dv, 3, dv, got, dv);
    size_t at = 0;
    int ok = same_bits(want, got, (size_t)(n * dv), &at);
    TAP_OK(ok, "P V %s, %lld rows, dv %lld, %lld keys%s: the packed tiles' bits",
           kv_bf16_route_name(r), (long long)n, (long long)dv, (long long)nk,
           specials ? ", special values" : "");
    if (!ok)
        TAP_OK(0, "  at %zu: %a, tiles %a", at, (double)got[at], (double)want[at]);
    free(p); free(want); free(got); free(vp);
    free_rows(v, nk + 3);
}

int main(void)
{
    enum kv_bf16_route routes[2] = {KV_BF16_MODEL_X86, kv_bf16_route_usable(KV_BF16_AVX512)};
    int nr = routes[1] != KV_BF16_NONE ? 2 : 1;
    TAP_OK(kv_mla_dec_route(KV_BF16_AVX512) && kv_mla_dec_route(KV_BF16_MODEL_X86) &&
           !kv_mla_dec_route(KV_BF16_NEON) && !kv_mla_dec_route(KV_BF16_MODEL_ARM) &&
           !kv_mla_dec_route(KV_BF16_NONE), "the decode tiles take the x86 routes only");
    static const int64_t qk[][3] = {
        {16, 576, 128}, {128, 576, 37}, {1, 64, 1}, {5, 71, 7}, {20, 33, 16}, {33, 40, 25},
        {64, 71, 13}, {130, 96, 29}, {48, 2, 6}, {7, 1, 3},
    };
    static const int64_t pv[][3] = {
        {8, 512, 128}, {16, 32, 1}, {24, 64, 7}, {136, 96, 31}, {8, 32, 16}, {40, 64, 2},
    };
    for (int ri = 0; ri < nr; ri++) {
        for (size_t i = 0; i < sizeof qk / sizeof qk[0]; i++)
            for (int sp = 0; sp < 2; sp++)
                qk_case(routes[ri], qk[i][0], qk[i][1], qk[i][2], sp);
        for (size_t i = 0; i < sizeof pv / sizeof pv[0]; i++)
            for (int sp = 0; sp < 2; sp++)
                pv_case(routes[ri], pv[i][0], pv[i][1], pv[i][2], sp);
    }
    return tap_done();
}
