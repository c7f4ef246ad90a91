/* kvattn merge: the LSE merge of partial outputs. */
#include "kvattn.h"

/* kvattn merge OUT1 LSE1 OUT2 LSE2 ...: load the pairs, merge by LSE
 * (kv_attn_merge), write the output and optionally the merged LSE. */
int cmd_merge(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *aparts = arg_filen(NULL, NULL, "OUT LSE", 0, 1024, "partial outputs and their LSE, in pairs");
    struct arg_file *aout = arg_file0("o", NULL, "FILE", "merged output (default stdout)");
    struct arg_file *alse = arg_file0(NULL, "lse-out", "FILE", "also write the merged LSE (f32)");
    struct arg_str *abase = arg_str0(NULL, "lse-base", "e|2", "logarithm of the LSE files: e (default) or 2 (FlashInfer)");
    struct arg_str *aod = arg_str0(NULL, "out-dtype", "T", "f32|f16|bf16|f64 (default: the first part's)");
    struct arg_str *afmt = arg_str0("f", NULL, "npy|text", "output format");
    struct arg_lit *aforce = arg_lit0(NULL, "force", "write binary to a terminal");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_file *asinks = arg_file0(NULL, "sinks", "FILE", "count these sinks (one logit per query head) once in the merged sum");
    struct arg_lit *ahave = arg_lit0(NULL, "parts-have-sinks", "with --sinks: every part was computed with the sinks (default: without)");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, aparts, aout, alse, abase, aod, afmt, aforce, amem, asinks,
                     ahave, end};
    struct kv_tensor sinks;
    struct kv_err e = {{0}};
    struct kv_tensor *outs = NULL, *lses = NULL, mo, ml;
    size_t n = 0, max_mem;
    enum kv_dtype od = KV_NDTYPES;
    enum kv_format fmt;
    int base2 = 0;
    kv_setprogname("kvattn merge");   /* usage line and hints name the subcommand */
    int rc = kv_arg_parse(table, argc, argv, help, version, end,
                          "\nLSE merge of partial attention over disjoint key sets:\n"
                          "lse = log sum exp(lse_i), out = sum exp(lse_i - lse) out_i\n"
                          "(--sinks: the sink counted once in the sum)", NULL);
    kv_tensor_init(&mo);
    kv_tensor_init(&ml);
    kv_tensor_init(&sinks);
    if (rc >= 0)
        goto out;
    if (ahave->count && !asinks->count) {
        rc = kv_usage("--parts-have-sinks needs --sinks FILE");
        goto out;
    }
    if (aparts->count < 2 || aparts->count % 2) {
        rc = kv_usage("expected pairs OUT LSE, got %d file(s)", aparts->count);
        goto out;
    }
    if ((rc = parse_dtype_opt(aod, "--out-dtype", &od)) || (rc = parse_format(afmt, &fmt)) ||
        (rc = parse_lse_base(abase, &base2)))
        goto out;
    {
        const char *opts[] = {"-o", "--lse-out"};
        const char *dsts[] = {aout->count ? aout->filename[0] : "-",
                              alse->count ? alse->filename[0] : NULL};
        if (kv_outputs_distinct(opts, dsts, 2, &e)) {
            rc = kv_usage("%s", e.msg);
            goto out;
        }
    }
    if (kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto out;
    }
    kv_setprogname("kvattn");
    n = (size_t)aparts->count / 2;
    outs = calloc(n, sizeof *outs);
    lses = calloc(n, sizeof *lses);
    if (!outs || !lses) {
        rc = kv_fail("out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        kv_tensor_init(&outs[i]);
        kv_tensor_init(&lses[i]);
    }
    /* every part is held at once: --max-mem bounds them together */
    size_t left = 0;
    for (size_t i = 0; i < n; i++)
        if (load_shared(aparts->filename[2 * i], max_mem, &left, &outs[i], &e) ||
            load_shared(aparts->filename[2 * i + 1], max_mem, &left, &lses[i], &e)) {
            rc = kv_fail_err(&e);
            goto out;
        }
    if (asinks->count && load_shared(asinks->filename[0], max_mem, &left, &sinks, &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    for (size_t i = 0; i < n && base2; i++) {
        /* base-2 LSE in: merge in natural units */
        struct kv_tensor t;
        kv_tensor_init(&t);
        if (kv_tensor_convert(&t, &lses[i], KV_F64, &e)) {
            rc = kv_fail_err(&e);
            goto out;
        }
        scale_tensor(&t, M_LN2);
        kv_tensor_move(&lses[i], &t);
    }
    if (kv_attn_merge_sinks(outs, lses, n, asinks->count ? &sinks : NULL, ahave->count > 0, od,
                            &mo, alse->count ? &ml : NULL, &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    const struct kv_tensor *ls[1] = {&ml}, *os[1] = {&mo};
    struct tensor_out w[2] = {
        {aout->count ? aout->filename[0] : NULL, fmt, aforce->count > 0, os, 1},
        {alse->count ? alse->filename[0] : NULL,
         fmt == KV_FMT_TEXT ? KV_FMT_TEXT : KV_FMT_NPY, 1, ls, 1},
    };
    if (alse->count && base2)
        scale_tensor(&ml, M_LOG2E);
    if ((rc = write_outputs(w, alse->count ? 2 : 1)) != 0)
        goto out;
    rc = kv_close_stdout();
out:
    for (size_t i = 0; i < n && outs && lses; i++) {
        kv_tensor_release(&outs[i]);
        kv_tensor_release(&lses[i]);
    }
    free(outs);
    free(lses);
    kv_tensor_release(&mo);
    kv_tensor_release(&ml);
    kv_tensor_release(&sinks);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}
