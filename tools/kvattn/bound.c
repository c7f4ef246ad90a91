/* kvattn bound: the documented error bound of kvattn run for given
 * inputs. */
#include "kvattn.h"

/* kvattn bound: the error bound of kvattn(1) ACCURACY for these inputs,
 * the tolerance a kernel test or `kvattn cmp --atol` should use. */
int cmd_bound(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *aq = arg_file1("q", NULL, "Q", "queries (.npy, head dim last)");
    struct arg_file *ak = arg_file1("k", NULL, "K", "keys (.npy)");
    struct arg_file *av = arg_file1("v", NULL, "V", "values (.npy)");
    struct arg_str *ascale = arg_str0(NULL, "scale", "S", "softmax scale (default 1/sqrt(D))");
    struct arg_str *amask = arg_str0(NULL, "mask-max", "M", "largest finite |value| of an additive mask (default 0)");
    struct arg_str *aroutes = arg_str0(NULL, "routes", "N", "routes compared with each other: N times the bound (default 1)");
    struct arg_str *aod = arg_str0(NULL, "out-dtype", "T", "f32|f16|bf16 (default f32)");
    struct arg_lit *aall = arg_lit0(NULL, "all", "print out:, lse: and their inputs, not only the output's bound");
    struct arg_lit *anop = arg_lit0(NULL, "no-p-round", "bf16 Q, K, V: the bound of run --no-p-round");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, aq, ak, av, ascale, amask, aroutes, aod, aall, anop, amem, end};
    struct kv_err e = {{0}};
    struct kv_tensor q, k, v;
    size_t max_mem;
    enum kv_dtype od = KV_F32;
    double scale = 0, mask_abs = 0;
    int64_t routes = 1;
    kv_tensor_init(&q);
    kv_tensor_init(&k);
    kv_tensor_init(&v);
    kv_setprogname("kvattn bound");
    int rc = kv_arg_parse(table, argc, argv, help, version, end,
                          "\nThe documented error bound (kvattn(1) ACCURACY) of kvattn run's\n"
                          "output for these inputs, against exact attention", NULL);
    if (rc >= 0)
        goto out;
    if ((rc = kv_opt_i64(aroutes, "--routes", 1, 1000, &routes)))
        goto out;
    if ((ascale->count && kv_parse_f64(ascale->sval[0], "--scale", &scale, &e)) ||
        (amask->count && kv_parse_f64(amask->sval[0], "--mask-max", &mask_abs, &e)) ||
        kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto out;
    }
    if ((rc = parse_dtype_opt(aod, "--out-dtype", &od)))
        goto out;
    kv_setprogname("kvattn");
    if (kv_npy_load(aq->filename[0], max_mem, &q, &e) ||
        kv_npy_load(ak->filename[0], max_mem, &k, &e) ||
        kv_npy_load(av->filename[0], max_mem, &v, &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    int64_t D = q.ndim ? q.shape[q.ndim - 1] : 0;
    if (q.ndim < 2 || k.ndim < 2 || v.ndim < 2 || D < 1 || k.shape[k.ndim - 1] != D) {
        rc = kv_fail("Q and K need the same head dim as their last dimension");
        goto out;
    }
    if (!ascale->count)
        scale = 1.0 / sqrt((double)D);
    double A, V;
    /* keys a row can see: bhsd [B, H, S, D] S; packed thd [T, H, D] T */
    int64_t n = k.ndim == 4 ? k.shape[2] : k.ndim == 3 ? k.shape[0]
                                         : (int64_t)(kv_tensor_numel(&k) / (size_t)D);
    kv_bound_scan(&q, &k, &v, scale, fabs(mask_abs), &A, &V);
    double bo = (double)routes * kv_bound_attn_out(n, D, A, V, od);
    double bl = (double)routes * kv_bound_attn_lse(n, D, A, A + log((double)n), 0);
    if (q.dtype == KV_BF16 && k.dtype == KV_BF16 && v.dtype == KV_BF16) {
        /* the bf16 tiles (ACCURACY, bf16 tiles): the looser instruction,
         * P rounded to bf16 unless --no-p-round */
        double X = kv_bound_scan_x(&q, &k, scale);
        bo = (double)routes * kv_bound_attn_out_bf16(n, D, A, V, X, od, 1, !anop->count);
        bl = (double)routes * kv_bound_attn_lse_bf16(n, D, A, A + log((double)n), X, 1, 0);
    }
    if (aall->count)
        printf("out: %.3g\nlse: %.3g\nkeys: %lld\nhead_dim: %lld\nscore_max: %.6g\nv_max: %.6g\n",
               bo, bl, (long long)n, (long long)D, A, V);
    else
        printf("%.3g\n", bo);
    rc = kv_close_stdout();
out:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&v);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}
