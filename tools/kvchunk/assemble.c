/* kvchunk assemble: a prompt's KV from the store, misses listed.  The
 * work is libkv's (chunk/assemble.h); this file reads the options and the
 * prompt, opens the store and writes the plan or the stream. */
#include "kvchunk.h"

/* One assemble run: the prompt's segments, the assembly, the store. */
struct asm_run {
    struct kv_split sp;
    struct kv_assembly a;
    struct kv_store *s;
    double t0, t1;              /* start, lookups done (for -v) */
};

/* Free what an assemble run holds. */
static void asm_release(struct asm_run *r)
{
    kv_assemble_release(&r->a);
    kv_split_release(&r->sp);
    kv_store_close(r->s);
}

/* Read the prompt, key its segments and look every one but the question
 * up, each hit moved into the tensor when want_kv.  0, -1 with e, or the
 * exit code of a store that did not open. */
static int assemble_lookup(const struct prompt_args *pa,
                           const struct store_args *sa, const struct nsv *v,
                           size_t lim, int64_t nj, int want_kv,
                           struct asm_run *r, struct kv_err *e)
{
    int rc;
    if (read_prompt(pa, lim, kv_assemble_seg_bytes(), &r->sp, e) < 0 ||
        kv_assemble_init(&r->a, &v->ns, &r->sp, lim, want_kv, e) < 0)
        return -1;
    if ((rc = open_store(sa, 0, 0, 0, r->a.store_bytes, &r->s)) != 0)
        return rc;
    rc = kv_assemble_fetch(&r->a, r->s, (int)nj, e);
    r->t1 = kv_now();
    if (rc < 0)
        return -1;
    for (size_t i = 0; i + 1 < r->a.n_segs; i++)
        if (r->a.status[i] == KV_GET_COLLISION ||
            r->a.status[i] == KV_GET_CORRUPT)
            kv_warn("miss: segment %zu: %s (%s)", i,
                    status_name(r->a.status[i]), r->a.why[i].msg);
    return 0;
}

/* assemble's own options. */
struct asm_args {
    struct arg_str *fmt, *out, *report, *jobs;
    struct arg_lit *force, *kv_only;
};

/* Write the plan (text, and --report) or the tensors (npy); the exit code. */
static int assemble_write(const struct asm_args *aa, int want_kv, int verbose,
                          const struct asm_run *r, struct kv_err *e)
{
    struct kv_out o, ro;
    enum kv_format f;
    int rc;
    memset(&o, 0, sizeof o);
    memset(&ro, 0, sizeof ro);
    if (kv_out_open(&o, sval(aa->out), e) < 0)
        return kv_fail_err(e);
    if ((rc = out_format(aa->fmt, o.f, aa->force->count, &f)) != 0) {
        kv_out_abort(&o);
        return rc;
    }
    if (f == KV_FMT_NPY && !want_kv) {
        kv_out_abort(&o);
        kv_err_set(e, "internal: no KV tensor for npy output");
        return kv_fail_err(e);
    }
    /* the report first, written and committed before anything goes to
     * the output, so that a report that cannot be written (a full disk,
     * /dev/full) leaves stdout empty */
    if (sval(aa->report)) {
        if (kv_out_open(&ro, sval(aa->report), e) < 0) {
            kv_out_abort(&o);
            return kv_fail_err(e);
        }
        kv_assemble_plan(ro.f, &r->a);
        if (kv_out_commit(&ro, e) < 0) {
            kv_out_abort(&o);
            return kv_fail_err(e);
        }
    }
    if (f == KV_FMT_TEXT)
        kv_assemble_plan(o.f, &r->a);
    else if (kv_assemble_npy(o.f, &r->a, aa->kv_only->count > 0, e) < 0) {
        kv_out_abort(&o);
        return kv_fail_err(e);
    }
    if (verbose) {
        size_t hits = 0;
        for (size_t i = 0; i < r->a.n_segs; i++)
            hits += r->a.status[i] == KV_GET_HIT;
        kv_warn("%zu segments, %zu hits, %lld misses; lookup %.3f s, move "
                "and write %.3f s", r->a.n_segs, hits,
                (long long)r->a.n_miss,
                r->t1 - r->t0, kv_now() - r->t1);
    }
    return o.path ? (kv_out_commit(&o, e) < 0 ? kv_fail_err(e) : 0)
                  : kv_close_stdout();
}

int cmd_assemble(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct prompt_args pa;
    struct store_args sa;
    struct common c;
    struct asm_args aa;
    add_prompt(&t, &pa);
    add_ns(&t, &na, 1);
    add_store(&t, &sa);
    add(&t, aa.fmt = arg_str0("f", "format", "npy|text", "npy: KV, segments, "
                              "misses; text: the plan only"));
    add(&t, aa.out = arg_str0("o", "output", "FILE", "write to FILE"));
    add(&t, aa.report = arg_str0(NULL, "report", "FILE", "also write the "
                                 "plan as text to FILE"));
    add(&t, aa.jobs = arg_str0("j", "jobs", "N", "threads (default: all "
                               "cores)"));
    add(&t, aa.kv_only = arg_lit0(NULL, "kv-only", "write the KV tensor only "
                                  "(no segments, no misses)"));
    add(&t, aa.force = arg_lit0(NULL, "force", "binary to a terminal"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nAssemble a prompt's KV from the "
                   "store: every hit moved to its position.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    int64_t nj = 0;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (sval(aa.jobs) && kv_parse_i64(sval(aa.jobs), "-j", 0, 1024, &nj,
                                       &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    double tmo;
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = prompt_usage(&pa)) != 0 ||
        (rc = store_usage(&sa, &tmo)) != 0) {
        free_table(&t);
        return rc;
    }
    if (sval(aa.report) && !strcmp(sval(aa.report), "-")) {
        free_table(&t);
        return kv_usage("--report: a file name, not '-'");
    }
    {
        const char *opt[2] = {"-o", "--report"};
        const char *path[2] = {sval(aa.out) ? sval(aa.out) : "-",
                               sval(aa.report)};
        if (kv_outputs_distinct(opt, path, 2, &e) < 0) {
            free_table(&t);
            return kv_usage("%s", e.msg);
        }
    }
    int want_kv = sval(aa.fmt) ? strcmp(sval(aa.fmt), "npy") == 0
                               : (sval(aa.out) != NULL || !kv_isatty(stdout));
    if (aa.kv_only->count && !want_kv) {
        free_table(&t);
        return kv_usage("--kv-only: only for the npy stream (-f text, or "
                        "text on a terminal, writes the plan)");
    }
    struct asm_run r;
    memset(&r, 0, sizeof r);
    r.t0 = kv_now();
    rc = assemble_lookup(&pa, &sa, &v, lim, nj, want_kv, &r, &e);
    if (rc == 0)
        rc = assemble_write(&aa, want_kv, c.verbose->count > 0, &r, &e);
    if (rc < 0)
        rc = kv_fail_err(&e);
    asm_release(&r);
    free_table(&t);
    return rc;
}
