/* kvattn cmp: compare a tensor with a reference (numpy.allclose and the
 * error figures), or two attention-mass maps row by row. */
#include "kvattn.h"
#include "core/jsonfig.h"

static void print_index(const struct kv_tensor *t, size_t flat)
{
    int64_t idx[KV_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d] > 0 ? t->shape[d] : 1;
        idx[d] = (int64_t)(flat % (size_t)n);
        flat /= (size_t)n;
    }
    printf("(");
    for (int d = 0; d < t->ndim; d++)
        printf("%s%lld", d ? ", " : "", (long long)idx[d]);
    printf(t->ndim == 1 ? ",)" : ")");
}

/* The report as one JSON line (-f json): the text's fields, its figures. */
static int print_json(const struct kv_tensor *a, const struct kv_cmp_result *r,
                      int mass, double atol, double rtol)
{
    json_t *o = json_object();
    if (!o)
        return -1;
    json_object_set_new(o, "shape", kv_json_dims(a->ndim, a->shape));
    json_object_set_new(o, "max_abs", kv_json_fig(r->max_abs, 9, 1));
    json_object_set_new(o, "max_rel", kv_json_fig(r->max_rel, 9, 1));
    json_object_set_new(o, "rmse", kv_json_fig(r->rmse, 9, 1));
    json_object_set_new(o, "cosine", kv_json_fig(r->cosine, 9, 1));
    if (r->n > 0) {
        int64_t idx[KV_MAX_DIMS];
        size_t flat = r->worst;
        for (int d = a->ndim - 1; d >= 0; d--) {
            int64_t n = a->shape[d] > 0 ? a->shape[d] : 1;
            idx[d] = (int64_t)(flat % (size_t)n);
            flat /= (size_t)n;
        }
        json_t *w = json_array();
        json_array_append_new(w, json_integer((json_int_t)r->worst));
        json_array_append_new(w, kv_json_dims(a->ndim, idx));
        json_array_append_new(w, kv_json_fig(r->worst_a, 9, 1));
        json_array_append_new(w, kv_json_fig(r->worst_b, 9, 1));
        json_object_set_new(o, "worst", w);
    }
    if (r->n_nan_a || r->n_nan_b)
        json_object_set_new(o, "nan", json_pack("[I,I]", (json_int_t)r->n_nan_a,
                                                (json_int_t)r->n_nan_b));
    if (mass) {
        json_object_set_new(o, "rows", json_integer((json_int_t)r->n_rows));
        json_t *m = json_array();
        json_array_append_new(m, kv_json_fig(r->mass_a, 9, 1));
        json_array_append_new(m, kv_json_fig(r->mass_b, 9, 1));
        json_object_set_new(o, "mass", m);
        json_object_set_new(o, "max_mass_diff", kv_json_fig(r->max_mass_diff, 9, 1));
        json_object_set_new(o, "max_tv", kv_json_fig(r->max_tv, 9, 1));
        json_object_set_new(o, "worst_row", json_integer((json_int_t)r->worst_row));
        json_object_set_new(o, "mismatched_rows", json_integer((json_int_t)r->n_bad));
    } else {
        json_object_set_new(o, "mismatched", json_integer((json_int_t)r->n_bad));
        json_object_set_new(o, "of", json_integer((json_int_t)r->n));
    }
    json_object_set_new(o, "atol", kv_json_fig(atol, 6, 1));
    json_object_set_new(o, "rtol", kv_json_fig(rtol, 6, 1));
    return kv_json_line(stdout, o);
}

/* kvattn cmp A B: statistics on stdout; exit 0 when close, 1 when not, 2
 * when the tensors cannot be compared. */
int cmd_cmp(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *afiles = arg_filen(NULL, NULL, "FILE", 0, 2, "A, then the reference B");
    struct arg_dbl *aatol = arg_dbl0(NULL, "atol", "X", "absolute tolerance (default 1e-8)");
    struct arg_dbl *artol = arg_dbl0(NULL, "rtol", "Y", "relative tolerance (default 1e-5)");
    struct arg_lit *anan = arg_lit0(NULL, "equal-nan", "NaN in both places counts as close");
    struct arg_lit *amass = arg_lit0(NULL, "mass", "compare attention-mass maps row by row");
    struct arg_lit *aquiet = arg_lit0(NULL, "quiet", "print nothing; the exit status says it");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_str *afmt = arg_str0("f", "format", "FMT", "text|json (default text)");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, afiles, aatol, artol, anan, amass, aquiet, amem, afmt, end};
    struct kv_err e = {{0}};
    struct kv_tensor a, b;
    struct kv_cmp_result r;
    double atol = 1e-8, rtol = 1e-5;
    size_t max_mem;
    int json = 0;
    kv_setprogname("kvattn cmp");   /* usage line and hints name the subcommand */
    int rc = kv_arg_parse(table, argc, argv, help, version, end,
                          "\nCompare A with the reference B: max abs/rel error, RMSE, cosine,\n"
                          "worst index; exit 0 when close (numpy.allclose), 1 when not.",
                          NULL);
    kv_tensor_init(&a);
    kv_tensor_init(&b);
    if (rc >= 0)
        goto out;
    if (afiles->count != 2) {
        rc = kv_usage("expected two files A B, got %d", afiles->count);
        goto out;
    }
    if (aatol->count) {
        if (!(aatol->dval[0] >= 0) || !isfinite(aatol->dval[0])) {
            rc = kv_usage("--atol: expected a finite number >= 0, got %g", aatol->dval[0]);
            goto out;
        }
        atol = aatol->dval[0];
    }
    if (artol->count) {
        if (!(artol->dval[0] >= 0) || !isfinite(artol->dval[0])) {
            rc = kv_usage("--rtol: expected a finite number >= 0, got %g", artol->dval[0]);
            goto out;
        }
        rtol = artol->dval[0];
    }
    if (kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
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
    if (strcmp(afiles->filename[0], "-") == 0 && strcmp(afiles->filename[1], "-") == 0) {
        rc = kv_usage("only one of A and B can be standard input");
        goto out;
    }
    kv_setprogname("kvattn");
    size_t left = 0;     /* A and B are held at once */
    if (load_shared(afiles->filename[0], max_mem, &left, &a, &e) ||
        load_shared(afiles->filename[1], max_mem, &left, &b, &e)) {
        /* exit 1 means "not close": an unreadable input is trouble, 2 */
        kv_warn("%s", e.msg);
        rc = KV_EXIT_USAGE;
        goto out;
    }
    /* different shapes cannot be compared: exit 2, like cmp(1) trouble */
    if (amass->count ? kv_cmp_mass(&a, &b, atol, rtol, &r, &e)
                     : kv_cmp_tensors(&a, &b, atol, rtol, anan->count > 0, &r, &e)) {
        kv_warn("%s", e.msg);
        rc = KV_EXIT_USAGE;
        goto out;
    }
    if (!aquiet->count && json) {
        if (print_json(&a, &r, amass->count > 0, atol, rtol)) {
            kv_warn("cannot write the report: out of memory or write error");
            rc = KV_EXIT_USAGE;
            goto out;
        }
    } else if (!aquiet->count) {
        char sh[128];
        printf("shape: %s\n", kv_shape_str(a.ndim, a.shape, sh, sizeof sh));
        printf("max_abs: %.9g\nmax_rel: %.9g\nrmse: %.9g\ncosine: %.9g\n",
               r.max_abs, r.max_rel, r.rmse, r.cosine);
        if (r.n > 0) {
            printf("worst: %zu ", r.worst);
            print_index(&a, r.worst);
            printf(" %.9g %.9g\n", r.worst_a, r.worst_b);
        }
        if (r.n_nan_a || r.n_nan_b)
            printf("nan: %zu %zu\n", r.n_nan_a, r.n_nan_b);
        if (amass->count) {
            printf("rows: %zu\nmass: %.9g %.9g\nmax_mass_diff: %.9g\nmax_tv: %.9g\n",
                   r.n_rows, r.mass_a, r.mass_b, r.max_mass_diff, r.max_tv);
            printf("worst_row: %zu\n", r.worst_row);
            printf("mismatched_rows: %zu of %zu (atol %g rtol %g)\n", r.n_bad, r.n_rows, atol, rtol);
        } else {
            printf("mismatched: %zu of %zu (atol %g rtol %g)\n", r.n_bad, r.n, atol, rtol);
        }
    }
    /* a report that cannot be written is trouble (2): 1 would read as "not close" */
    rc = kv_close_stdout() ? KV_EXIT_USAGE : r.n_bad > 0;
out:
    kv_tensor_release(&a);
    kv_tensor_release(&b);
    arg_freetable(table, sizeof table / sizeof table[0]);
    return rc;
}
