/* attn_fused.c - the shapes the fused kernels take (lib/attn/fused.c):
 * causal and windowed, Lq != Lk, GQA stacking, odd head dims and lengths
 * that are not multiples of a panel or a register tile, tiny and default
 * tiles, thd varlen, f16 keys and values, softcap, ALiBi and sinks, a NaN
 * key, each against a float64 reference written from the formulas within
 * the bound of kvattn(1) ACCURACY (lib/attn/bound.h), at the vector level
 * KVTOOLS_ISA allows (make check runs every level); and the output
 * bit-identical for 1 and 3 threads. */
#include <string.h>

#include "fused_case.h"
#include "tap.h"

static void run_case(const struct fcase *c)
{
    struct fdata f;
    struct kv_tensor o1, l1, o3, l3;
    struct kv_err e = {{0}};
    fcase_init(c, &f);
    kv_tensor_init(&o1); kv_tensor_init(&l1); kv_tensor_init(&o3); kv_tensor_init(&l3);
    f.r.n_threads = 1;
    int ok1 = kv_attn_run(&f.r, &o1, &l1, &e) == 0;
    f.r.n_threads = 3;
    int ok3 = kv_attn_run(&f.r, &o3, &l3, &e) == 0;
    TAP_OK(ok1 && ok3, "%s: runs (%s)", c->name, ok1 && ok3 ? "" : e.msg);
    if (!ok1 || !ok3)
        goto out;
    double A, V, qk_max;
    struct kv_bound_variants bv;
    fcase_bound_inputs(c, &f, &A, &V, &qk_max, &bv);
    double bound = kv_bound_attn_out_var(f.Lk, c->D, A, V, KV_F32, &bv);
    double worst = 0;
    for (int b = 0; b < c->nreq; b++)
        for (int h = 0; h < c->Hq; h++)
            for (int i = 0; i < c->lq[b]; i++) {
                const float *o = get_row(c, &o1, c->Dv, b, h, i, f.Lq);
                for (int d = 0; d < c->Dv; d++)
                    worst = fmax(worst, fcase_err(o[d], AT(f.ref, c->Hq, f.Lq, c->Dv, b, h, i, d)));
            }
    TAP_OK(worst <= bound, "%s: within the bound (%.3g <= %.3g)", c->name, worst, bound);
    TAP_OK(o1.nbytes == o3.nbytes && memcmp(o1.data, o3.data, o1.nbytes) == 0 &&
           memcmp(l1.data, l3.data, l1.nbytes) == 0,
           "%s: output and LSE bit-identical for 1 and 3 threads", c->name);
out:
    kv_tensor_release(&o1); kv_tensor_release(&l1);
    kv_tensor_release(&o3); kv_tensor_release(&l3);
    fcase_free(&f);
}

int main(void)
{
    static const struct fcase cases[] = {
        {"causal D 128", 0, 2, 2, 128, 128, 1, 0, 1, {200}, {200}, KV_F32, 0, 0, 0, 0, 0, 1.0, 0},
        {"causal GQA 4:1, Lq < Lk, odd dims", 0, 8, 2, 37, 45, 1, 0, 2, {70, 70}, {131, 131},
         KV_F32, 0, 0, 0, 0, 0, 1.0, 0},
        {"full, small tiles", 0, 3, 1, 24, 19, 0, 0, 1, {53}, {77}, KV_F32, 0, 0, 0, 20, 7, 1.0, 0},
        {"window 33, Lq > Lk", 0, 4, 4, 64, 64, 0, 33, 1, {150}, {120}, KV_F32, 0, 0, 0, 0, 0,
         1.0, 0},
        {"thd varlen causal, f16 K/V", 1, 4, 2, 40, 40, 1, 0, 3, {1, 90, 33}, {5, 90, 140},
         KV_F16, 0, 0, 0, 48, 16, 1.0, 0},
        {"softcap, ALiBi and sinks", 0, 4, 2, 32, 48, 1, 0, 1, {99}, {99}, KV_F32, 2.5, 1, 1,
         0, 0, 3.0, 0},
        {"sinks over an empty row, window 1", 1, 2, 1, 16, 16, 1, 1, 2, {40, 7}, {0, 30},
         KV_F32, 0, 0, 1, 0, 0, 1.0, 0},
        {"D 256, large scores", 0, 2, 1, 256, 256, 1, 0, 1, {80}, {80}, KV_F32, 0, 0, 0, 0, 0,
         4.0, 0},
        {"a NaN key: the rows that see it NaN, the others not", 0, 4, 2, 32, 32, 1, 0, 1, {70},
         {70}, KV_F32, 0, 0, 0, 0, 0, 1.0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i]);
    return tap_done();
}
