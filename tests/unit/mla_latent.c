/* mla_latent.c - latent (MLA) chunk moves of lib/chunk/latent against a
 * float64 re-rotation of k_pe written from the formulas.
 *
 * The reference computes DeepSeek's YaRN frequencies itself (transformers'
 * _compute_yarn_parameters: base^(-2i/R), the correction range of
 * beta_fast/beta_slow over original_max_position_embeddings, floored and
 * ceiled, a linear ramp between interpolation by factor and
 * extrapolation), turns each pair of the stored k_pe by delta * theta_i
 * in double -- pairs (2i, 2i+1) for DeepSeek's and vLLM's interleaved
 * layout, (i, i + R/2) for transformers' de-interleaved one -- and holds
 * the move to one rounding of the dtype plus f32 arithmetic.  c_kv must
 * come out bit-equal, wherever the chunk lands in the destination.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunk/latent.h"
#include "chunk/rope.h"
#include "core/half.h"
#include "core/tensor.h"
#include "tap.h"

static double get(enum kv_dtype dt, const void *p, size_t i)
{
    if (dt == KV_BF16)
        return kv_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == KV_F16)
        return kv_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* transformers' YaRN inverse frequencies for R dims (truncate = true). */
static void yarn_inv_freq(int R, double base, double factor, double orig, double bf, double bs,
                          double *inv)
{
    double lo = floor(R * log(orig / (bf * 2 * M_PI)) / (2 * log(base)));
    double hi = ceil(R * log(orig / (bs * 2 * M_PI)) / (2 * log(base)));
    if (lo < 0)
        lo = 0;
    if (hi > R - 1)
        hi = R - 1;
    if (lo == hi)
        hi += 0.001;
    for (int i = 0; i < R / 2; i++) {
        double pf = pow(base, 2.0 * i / R);
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double ext = 1.0 - ramp;
        inv[i] = (1.0 / (factor * pf)) * (1.0 - ext) + (1.0 / pf) * ext;
    }
}

static double unit_round(enum kv_dtype dt)
{
    return dt == KV_BF16 ? ldexp(1, -8) : dt == KV_F16 ? ldexp(1, -11) : ldexp(1, -24);
}

static void run(const char *name, const struct kv_rope *rope, const double *inv, int64_t L,
                int64_t T, int64_t Dl, enum kv_dtype dt, int64_t p0, int64_t delta)
{
    struct kv_err e = {{0}};
    int64_t R = rope->head_dim, D = Dl + R, stride = T + 7, off = 4;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    int64_t *pos = malloc((size_t)T * sizeof *pos), *pos2 = malloc((size_t)T * sizeof *pos2);
    for (int64_t t = 0; t < T; t++) {
        tok[t] = (int32_t)(1000 + 37 * t % 101);
        pos[t] = p0 + t;
        pos2[t] = p0 + delta + t;
    }
    struct kv_tensor src, direct;
    kv_tensor_init(&src);
    kv_tensor_init(&direct);
    int ok = kv_latent_toy(rope, L, Dl, 5, tok, pos, (size_t)T, dt, 0, &src, &e) == 0 &&
             kv_latent_toy(rope, L, Dl, 5, tok, pos2, (size_t)T, dt, 0, &direct, &e) == 0;
    TAP_OK(ok, "%s: toy latent chunks%s%s", name, ok ? "" : ": ", ok ? "" : e.msg);
    if (!ok)
        goto out;
    size_t es = kv_dtype_size(dt);
    unsigned char *dst = calloc((size_t)(L * stride * D), es);
    struct kv_latent_chunk c = {L, T, Dl, R, dt};
    ok = kv_latent_move(rope, &c, delta, src.data, dst, stride, off, &e) == 0;
    TAP_OK(ok, "%s: moved by %lld%s%s", name, (long long)delta, ok ? "" : ": ", ok ? "" : e.msg);
    int ckv_equal = 1, untouched = 1;
    double err = 0.0, err_direct = 0.0, kmax = 0.0;
    for (int64_t l = 0; l < L; l++) {
        for (int64_t t = 0; t < stride; t++) {
            const unsigned char *row = dst + (size_t)((l * stride + t) * D) * es;
            if (t < off || t >= off + T) {
                for (size_t b = 0; b < (size_t)D * es; b++)
                    untouched &= row[b] == 0;
                continue;
            }
            int64_t ts = t - off;
            const unsigned char *srow = (const unsigned char *)src.data +
                                        (size_t)((l * T + ts) * D) * es;
            ckv_equal &= memcmp(row, srow, (size_t)Dl * es) == 0;
            for (int64_t i = 0; i < R / 2; i++) {
                int64_t j0 = rope->style == KV_ROPE_NEOX ? i : 2 * i;
                int64_t j1 = rope->style == KV_ROPE_NEOX ? i + R / 2 : 2 * i + 1;
                double a = (double)delta * inv[i], cs = cos(a), sn = sin(a);
                double x0 = get(dt, srow, (size_t)(Dl + j0)), x1 = get(dt, srow, (size_t)(Dl + j1));
                double y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
                kmax = fmax(kmax, fmax(fabs(x0), fabs(x1)));
                err = fmax(err, fabs(get(dt, row, (size_t)(Dl + j0)) - y0));
                err = fmax(err, fabs(get(dt, row, (size_t)(Dl + j1)) - y1));
            }
            const unsigned char *drow = (const unsigned char *)direct.data +
                                        (size_t)((l * T + ts) * D) * es;
            for (int64_t k = 0; k < D; k++)
                err_direct = fmax(err_direct, fabs(get(dt, row, (size_t)k) -
                                                   get(dt, drow, (size_t)k)));
        }
    }
    /* a turned pair value is at most sqrt 2 kmax */
    double b1 = (unit_round(dt) + ldexp(1, -21)) * sqrt(2.0) * kmax * 1.01;
    TAP_OK(ckv_equal, "%s: c_kv bit-equal", name);
    TAP_OK(untouched, "%s: the rows around the chunk untouched", name);
    TAP_OK(err <= b1, "%s: k_pe = float64 re-rotation within one rounding %.3g (err %.3g)",
           name, b1, err);
    TAP_OK(err_direct <= 2 * b1 + unit_round(dt) * kmax,
           "%s: = the chunk computed at %lld within two roundings (err %.3g)", name,
           (long long)(p0 + delta), err_direct);
    free(dst);
out:
    kv_tensor_release(&src);
    kv_tensor_release(&direct);
    free(tok);
    free(pos);
    free(pos2);
}

int main(void)
{
    const char *top = getenv("KV_TOP");
    char path[4096];
    struct kv_latent L;
    struct kv_err e = {{0}};
    double inv[64], lib_inv[64];
    snprintf(path, sizeof path, "%s/tests/configs/deepseek-v2-lite.json", top ? top : ".");
    int ok = kv_latent_load(path, 0, &L, &e) == 0;
    TAP_OK(ok, "deepseek-v2-lite.json%s%s", ok ? "" : ": ", ok ? "" : e.msg);
    if (!ok)
        return tap_done();
    /* the frequencies: ours from the formula, the library's */
    yarn_inv_freq(64, 10000, 40, 4096, 32, 1, inv);
    kv_rope_inv_freq(&L.rope, lib_inv, &e);
    double fe = 0.0;
    for (int i = 0; i < 32; i++)
        fe = fmax(fe, fabs(inv[i] - lib_inv[i]) / inv[i]);
    TAP_OK(fe <= 1e-14, "DeepSeek YaRN frequencies match the formula (rel %.3g)", fe);
    TAP_OK(fabs(kv_rope_mscale(&L.rope) - 1.0) < 1e-15,
           "k_pe attention factor mscale/mscale_all_dim = 0.707/0.707 = 1");
    run("v2-lite bf16 interleaved", &L.rope, inv, 3, 11, 512, KV_BF16, 0, 1000);
    run("v2-lite bf16 interleaved, back", &L.rope, inv, 2, 7, 512, KV_BF16, 5000, -4321);
    run("v2-lite f32", &L.rope, inv, 2, 9, 512, KV_F32, 17, 123456);
    run("v2-lite f16", &L.rope, inv, 1, 5, 64, KV_F16, 3, 77);
    struct kv_rope nx = L.rope;
    nx.style = KV_ROPE_NEOX;
    run("transformers layout (neox) bf16", &nx, inv, 2, 6, 512, KV_BF16, 10, 2048);
    /* plain RoPE without scaling, a small geometry */
    struct kv_rope plain;
    kv_rope_init(&plain, 16);
    plain.style = KV_ROPE_GPTJ;
    double pinv[8];
    for (int i = 0; i < 8; i++)
        pinv[i] = pow(10000.0, -2.0 * i / 16);
    run("plain rope, Dl 24, R 16", &plain, pinv, 2, 13, 24, KV_BF16, 0, 31);
    /* delta 0 is a copy */
    {
        int32_t tok[4] = {1, 2, 3, 4};
        int64_t pos[4] = {9, 10, 11, 12};
        struct kv_tensor a;
        kv_tensor_init(&a);
        kv_latent_toy(&L.rope, 2, 32, 1, tok, pos, 4, KV_BF16, 0, &a, &e);
        unsigned char *d = malloc(a.nbytes);
        struct kv_latent_chunk c = {2, 4, 32, 64, KV_BF16};
        TAP_OK(kv_latent_move(&L.rope, &c, 0, a.data, d, 4, 0, &e) == 0 &&
               memcmp(d, a.data, a.nbytes) == 0, "delta 0: bit-equal copy");
        TAP_OK(kv_latent_move(&L.rope, &c, 5, a.data, a.data, 4, 0, &e) == 0,
               "in place (dst = src)");
        struct kv_latent_chunk bad = {2, 4, 32, 32, KV_BF16};
        TAP_OK(kv_latent_move(&L.rope, &bad, 5, a.data, d, 4, 0, &e) < 0 &&
               strstr(e.msg, "k_pe has 32 dims"), "a k_pe width unlike the RoPE's is refused (%s)",
               e.msg);
        TAP_OK(kv_latent_move(&L.rope, &c, 5, a.data, d, 3, 0, &e) < 0,
               "a chunk that does not fit the destination is refused");
        free(d);
        kv_tensor_release(&a);
    }
    return tap_done();
}
