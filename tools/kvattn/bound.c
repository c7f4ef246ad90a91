/* kvattn bound: the documented error bound of kvattn run for given
 * inputs. */
#include "kvattn.h"
#include "core/jsonfig.h"

/* kvattn bound: the error bound of kvattn(1) ACCURACY for these inputs,
 * the tolerance a kernel test or `kvattn cmp --atol` should use. */
/* The report: the output's bound alone, or with --all the LSE's and what
 * they are made of; as text lines or one JSON object with the same names.
 * Returns -1 when the JSON cannot be made or written. */
static int write_report(int json, int all, double bo, double bl, int64_t n, int64_t D,
                        double A, double V)
{
    if (!json) {
        if (all)
            printf("out: %.3g\nlse: %.3g\nkeys: %lld\nhead_dim: %lld\nscore_max: %.6g\n"
                   "v_max: %.6g\n", bo, bl, (long long)n, (long long)D, A, V);
        else
            printf("%.3g\n", bo);
        return 0;
    }
    json_t *o = json_object();
    if (o) {
        json_object_set_new(o, "out", kv_json_fig(bo, 3, 1));
        if (all) {
            json_object_set_new(o, "lse", kv_json_fig(bl, 3, 1));
            json_object_set_new(o, "keys", json_integer((json_int_t)n));
            json_object_set_new(o, "head_dim", json_integer((json_int_t)D));
            json_object_set_new(o, "score_max", kv_json_fig(A, 6, 1));
            json_object_set_new(o, "v_max", kv_json_fig(V, 6, 1));
        }
    }
    return kv_json_line(stdout, o) ? -1 : 0;
}

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
    struct arg_str *acap = arg_str0(NULL, "softcap", "C", "the bound of run --softcap C");
    struct arg_lit *aalibi = arg_lit0(NULL, "alibi", "the bound of run --alibi");
    struct arg_file *aslopes = arg_file0(NULL, "alibi-slopes", "FILE", "the bound of run --alibi-slopes FILE");
    struct arg_file *asinks = arg_file0(NULL, "sinks", "FILE", "the bound of run --sinks FILE");
    struct arg_str *afmt = arg_str0("f", "format", "FMT", "text|json (default text)");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, aq, ak, av, ascale, amask, aroutes, aod, aall, anop, amem,
                     acap, aalibi, aslopes, asinks, afmt, end};
    struct kv_bound_variants var = {0};
    struct kv_tensor ts;
    struct kv_err e = {{0}};
    struct kv_tensor q, k, v;
    size_t max_mem;
    enum kv_dtype od = KV_F32;
    double scale = 0, mask_abs = 0;
    int64_t routes = 1;
    int json = 0;
    kv_tensor_init(&q);
    kv_tensor_init(&k);
    kv_tensor_init(&v);
    kv_tensor_init(&ts);
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
    if (acap->count && (kv_parse_f64(acap->sval[0], "--softcap", &var.softcap, &e) ||
                        !(var.softcap > 0.0) || !isfinite(var.softcap))) {
        rc = kv_usage("--softcap: expected a finite cap > 0, got '%s'", acap->sval[0]);
        goto out;
    }
    if (afmt->count) {
        if (strcmp(afmt->sval[0], "json") == 0) {
            json = 1;
        } else if (strcmp(afmt->sval[0], "text") != 0) {
            rc = kv_usage("-f: expected text or json, got '%s'", afmt->sval[0]);
            goto out;
        }
    }
    if (aalibi->count && aslopes->count) {
        rc = kv_usage("--alibi and --alibi-slopes exclude each other");
        goto out;
    }
    kv_setprogname("kvattn");
    size_t left = 0;     /* Q, K and V are held at once */
    if (load_shared(aq->filename[0], max_mem, &left, &q, &e) ||
        load_shared(ak->filename[0], max_mem, &left, &k, &e) ||
        load_shared(av->filename[0], max_mem, &left, &v, &e)) {
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
    /* ALiBi: |slope (j - i')| <= max|slope| max(Lq, Lk); sinks: max |sink| */
    int64_t Hq = q.shape[1], nq = q.ndim == 4 ? q.shape[2] : q.shape[0];
    double smax = 0.0;
    if (aalibi->count) {
        float *sl = malloc((size_t)Hq * sizeof(float));
        if (!sl) {
            rc = kv_fail("out of memory");
            goto out;
        }
        kv_attn_alibi_slopes(Hq, sl);
        for (int64_t h = 0; h < Hq; h++)
            smax = fmax(smax, fabs((double)sl[h]));
        free(sl);
    }
    for (int w = 0; w < 2; w++) {
        struct arg_file *f = w ? asinks : aslopes;
        if (!f->count)
            continue;
        kv_tensor_release(&ts);
        if (load_shared(f->filename[0], max_mem, &left, &ts, &e)) {
            rc = kv_fail_err(&e);
            goto out;
        }
        double mx = 0.0;
        for (size_t i = 0; i < kv_tensor_numel(&ts); i++)
            mx = fmax(mx, fabs(kv_tensor_get_f64(&ts, i)));
        if (w) {
            var.has_sink = 1;
            var.sink_abs = mx;
        } else {
            smax = mx;
        }
    }
    var.bias_abs = smax * (double)(nq > n ? nq : n);
    double bo = (double)routes * kv_bound_attn_out_var(n, D, A, V, od, &var);
    double la = kv_bound_variants_lse_abs(n, A, &var);
    double bl = (double)routes * kv_bound_attn_lse_var(n, D, A, la, 0, &var);
    if (q.dtype == KV_BF16 && k.dtype == KV_BF16 && v.dtype == KV_BF16) {
        /* the bf16 tiles (ACCURACY, bf16 tiles): the looser instruction,
         * P rounded to bf16 unless --no-p-round */
        double X = kv_bound_scan_x(&q, &k, scale);
        bo = (double)routes * kv_bound_attn_out_bf16_var(n, D, A, V, X, od, 1, !anop->count, &var);
        bl = (double)routes * kv_bound_attn_lse_bf16_var(n, D, A, la, X, 1, 0, &var);
    }
    if (write_report(json, aall->count > 0, bo, bl, n, D, A, V)) {
        rc = kv_fail("cannot write the report: out of memory or write error");
        goto out;
    }
    rc = kv_close_stdout();
out:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&v);
    kv_tensor_release(&ts);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}
