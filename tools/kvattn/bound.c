/* kvattn bound: the documented error bound of kvattn run for given
 * inputs. */
#include "kvattn.h"
#include "core/jsonfig.h"
#include "attn/bound_inputs.h"

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
    struct kv_tensor ts, tsink;
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
    kv_tensor_init(&tsink);
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
    for (int w = 0; w < 2; w++) {
        struct arg_file *f = w ? asinks : aslopes;
        if (f->count && load_shared(f->filename[0], max_mem, &left, w ? &tsink : &ts, &e)) {
            rc = kv_fail_err(&e);
            goto out;
        }
    }
    struct kv_bound_input_variants iv = {var.softcap, aalibi->count > 0,
                                         aslopes->count ? &ts : NULL,
                                         asinks->count ? &tsink : NULL};
    struct kv_bound_report r;
    if (kv_bound_for_inputs_var(&q, &k, &v, ascale->count > 0, scale, mask_abs, routes, od,
                                !anop->count, &iv, &r, &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    if (write_report(json, aall->count > 0, r.out, r.lse, r.keys, r.head_dim, r.score_max,
                     r.v_max)) {
        rc = kv_fail("cannot write the report: out of memory or write error");
        goto out;
    }
    rc = kv_close_stdout();
out:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&v);
    kv_tensor_release(&ts);
    kv_tensor_release(&tsink);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}
