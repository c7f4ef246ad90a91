/* kvchunk sim from-split: 'kvchunk split' output -> a trace
 * (lib/chunk/chunk_sim). */
#include "kvchunk.h"
#include "chunk/chunk_sim.h"

int cmd_sim_from_split(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_str *rate = arg_str0(NULL, "rate", "R",
                                    "request i arrives at i/R seconds (1; 0 "
                                    "= all at 0)");
    struct arg_str *tenant = arg_str0(NULL, "tenant", "NAME",
                                      "tenant of every request (-)");
    struct arg_str *out_len = arg_str0(NULL, "out-len", "N",
                                       "output length of every request "
                                       "(128)");
    struct arg_file *out = arg_file0("o", "output", "FILE",
                                     "write the trace to FILE");
    struct arg_file *in = arg_filen(NULL, NULL, "FILE", 0, 1,
                                    "'kvchunk split' text output of many "
                                    "prompts (default stdin)");
    struct arg_end *end = arg_end(20);
    void *table[] = { help, version, rate, tenant, out_len, out, in, end };
    struct kv_err e;
    double r = 1.0;
    int64_t ol = 128;
    int rc;

    kv_setprogname("kvchunk sim from-split");
    rc = kv_arg_parse(table, argc, argv, help, version, end,
                      "\nTurn the segment lists 'kvchunk split' prints "
                      "(KIND OFFSET LENGTH KEY) for many prompts into a "
                      "trace for 'kvchunk sim', keys becoming ids.", NULL);
    if (rc >= 0)
        goto done;
    struct kv_chunk_sim_split_opts so = {
        rate->count ? rate->sval[0] : NULL,
        tenant->count ? tenant->sval[0] : NULL,
        out_len->count ? out_len->sval[0] : NULL};
    if (kv_chunk_sim_split_load(&so, &r, &ol, &e) < 0) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    {
        const char *path = in->count ? in->filename[0] : NULL;
        FILE *f = kv_open_in(path, &e);
        char *buf = NULL;
        size_t n = 0;
        int usage;
        if (!f) {
            rc = kv_fail_err(&e);
            goto done;
        }
        rc = kv_chunk_sim_split_run(&so, r, ol, f, kv_path_name(path, 0),
                                    &buf, &n, &usage, &e);
        kv_close_in(f);
        if (rc < 0) {
            rc = usage ? kv_usage("%s", e.msg) : kv_fail_err(&e);
            goto done;
        }
        struct kv_out ko;
        const char *opath = out->count ? out->filename[0] : NULL;
        if (kv_out_open(&ko, opath, &e) < 0) {
            free(buf);
            rc = kv_fail_err(&e);
            goto done;
        }
        if (n && fwrite(buf, 1, n, ko.f) != n) {
            free(buf);
            kv_out_abort(&ko);
            rc = kv_fail("write error on '%s'", kv_path_name(opath, 1));
            goto done;
        }
        free(buf);
        if (opath && kv_out_commit(&ko, &e) < 0)
            rc = kv_fail_err(&e);
        else
            rc = kv_close_stdout();
    }
done:
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}
