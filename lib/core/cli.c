/* cli.c - the parts every kvtools program shares (see cli.h). */
#include <argtable2.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/cli.h"
#include "core/isa.h"
#include "core/half.h"
#include "core/kv.h"
#include "core/npy.h"

static char progname[64] = "kvtools";

void kv_setprogname(const char *argv0)
{
    const char *b = argv0 ? strrchr(argv0, '/') : NULL;
    b = b ? b + 1 : (argv0 ? argv0 : "kvtools");
    snprintf(progname, sizeof progname, "%s", b);
}

const char *kv_progname(void)
{
    return progname;
}

static void vwarn(const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fflush(stdout);
    fprintf(stderr, "%s: %s\n", progname, msg);
}

void kv_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}

int kv_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
    return KV_EXIT_DATA;
}

int kv_fail_err(const struct kv_err *e)
{
    kv_warn("%s", e && e->msg[0] ? e->msg : "unknown error");
    return KV_EXIT_DATA;
}

int kv_usage(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kv_warn("%s", msg);
    /* a library message passed on as a usage error may be a failure of
     * resources (kvtools(7): exit 1), not of the command line */
    if (strstr(msg, "out of memory"))
        return KV_EXIT_DATA;
    fprintf(stderr, "Try '%s --help' for more information.\n", progname);
    return KV_EXIT_USAGE;
}

/* "Usage: prog [-vh] [-n N] ..." wrapped at 79 columns, breaking only
 * between option groups (never inside "[-q SQ]"), continuation lines
 * indented under the first option. */
static void print_usage(void **argtable)
{
    char *syn = NULL;
    size_t len = 0, col, indent;
    FILE *m = open_memstream(&syn, &len);

    if (m) {
        arg_print_syntax(m, argtable, "");
        fclose(m);
    }
    printf("Usage: %s", progname);
    col = indent = strlen("Usage: ") + strlen(progname);
    if (!syn) {
        putchar('\n');
        return;
    }
    for (size_t i = 0; i < len;) {
        size_t j = i, depth = 0;
        while (j < len && syn[j] == ' ')
            j++;
        size_t start = j;
        /* one group: up to the next space outside brackets */
        while (j < len && (syn[j] != ' ' || depth > 0)) {
            if (syn[j] == '[' || syn[j] == '<' || syn[j] == '{')
                depth++;
            else if ((syn[j] == ']' || syn[j] == '>' || syn[j] == '}') &&
                     depth > 0)
                depth--;
            j++;
        }
        if (j > start) {
            if (col + 1 + (j - start) > 79 && col > indent) {
                printf("\n%*s", (int)indent, "");
                col = indent;
            }
            printf(" %.*s", (int)(j - start), syn + start);
            col += 1 + (j - start);
        }
        i = j;
    }
    putchar('\n');
    free(syn);
}

/* argtable reports a long option given an empty value ('--format ""') as
 * 'option "" requires an argument', naming nothing: find such an option
 * among those that take a value.  Returns its argv index or 0. */
static int empty_long_value(void **argtable, int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++) {
        const char *name = argv[i];
        size_t n;
        if (strcmp(name, "--") == 0)
            break;
        if (strncmp(name, "--", 2) != 0 || strchr(name, '=') ||
            argv[i + 1][0] != '\0')
            continue;
        name += 2;
        n = strlen(name);
        for (struct arg_hdr **a = (struct arg_hdr **)argtable;; a++) {
            const char *l = (*a)->longopts;
            if ((*a)->flag & ARG_TERMINATOR)
                break;
            if (!((*a)->flag & ARG_HASVALUE) || !l)
                continue;
            while (*l) {      /* a comma-separated list; a prefix is taken */
                size_t len = strcspn(l, ",");
                if (n > 0 && n <= len && strncmp(l, name, n) == 0)
                    return i;
                l += len + (l[len] == ',');
            }
        }
    }
    return 0;
}

int kv_arg_parse(void **argtable, int argc, char **argv, struct arg_lit *help,
                 struct arg_lit *version, struct arg_end *end,
                 const char *synopsis, const char *extra)
{
    int nerr;

    if (arg_nullcheck(argtable) != 0) {
        kv_warn("out of memory building the option table");
        return KV_EXIT_DATA;
    }
    nerr = arg_parse(argc, argv, argtable);
    if (help && help->count > 0) {
        print_usage(argtable);
        if (synopsis)
            printf("%s\n", synopsis);
        printf("\nOptions:\n");
        arg_print_glossary(stdout, argtable, "  %-28s %s\n");
        if (extra)
            printf("\n%s\n", extra);
        return kv_close_stdout();
    }
    if (version && version->count > 0) {
        printf("%s (kvtools) %s\n", progname, KV_VERSION);
        return kv_close_stdout();
    }
    if (nerr > 0) {
        int i = empty_long_value(argtable, argc, argv);
        if (i > 0)
            return kv_usage("%s: expected a value, got an empty one",
                            argv[i]);
        fflush(stdout);
        arg_print_errors(stderr, end, progname);
        fprintf(stderr, "Try '%s --help' for more information.\n", progname);
        return KV_EXIT_USAGE;
    }
    struct kv_err e;
    if (kv_isa_check_env(&e) < 0) {
        kv_warn("%s", e.msg);
        return KV_EXIT_USAGE;
    }
    return -1;
}

int kv_parse_size(const char *s, size_t *out, struct kv_err *e)
{
    char *end;
    double v;
    double mul = 1;

    errno = 0;
    if (!s || !*s)
        return kv_err_set(e, "empty size");
    v = strtod(s, &end);
    if (end == s || errno || !(v >= 0))
        return kv_err_set(e, "bad size '%s'", s);
    if (*end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1024.0 * 1024; break;
        case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        case 'b': case 'B': mul = 1; end--; break;
        default: return kv_err_set(e, "bad size '%s' (use a number with "
                                   "an optional K, M, G or T suffix)", s);
        }
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if (*end)
            return kv_err_set(e, "bad size '%s' (use a number with an "
                              "optional K, M, G or T suffix)", s);
    }
    v *= mul;
    if (v >= 1.8e19)
        return kv_err_set(e, "size '%s' is too large", s);
    *out = (size_t)v;
    return 0;
}

size_t kv_default_max_mem(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
        return (size_t)1 << 32;
    return (size_t)((double)pages * (double)psz * 0.75);
}

int kv_parse_max_mem(const char *s, size_t *out, struct kv_err *e)
{
    size_t n = strlen(s ? s : "");
    if (!s || !*s) {
        *out = kv_default_max_mem();
        return 0;
    }
    if (s[n - 1] == '%') {
        char *end;
        double p = strtod(s, &end);
        if (end != s + n - 1 || !(p > 0 && p <= 100))
            return kv_err_set(e, "--max-mem: bad percentage '%s'", s);
        *out = (size_t)(kv_default_max_mem() / 0.75 * p / 100.0);
        return 0;
    }
    if (kv_parse_size(s, out, e) < 0)
        return kv_err_prefix(e, "--max-mem");
    if (*out == 0)
        return kv_err_set(e, "--max-mem: must be greater than 0");
    return 0;
}

int kv_nproc(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > 1024 ? 1024 : n) : 1;
}

struct pfor {
    size_t n;
    atomic_size_t next;
    void (*fn)(void *, size_t);
    void *ctx;
};

static void *pfor_worker(void *arg)
{
    struct pfor *p = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        p->fn(p->ctx, i);
    }
    return NULL;
}

void kv_parallel_for(size_t n, int nthreads, void (*fn)(void *ctx, size_t i),
                     void *ctx)
{
    struct pfor p;
    pthread_t tid[256];
    int nt, started = 0;

    if (nthreads <= 0)
        nthreads = kv_nproc();
    nt = nthreads > 256 ? 256 : nthreads;
    if ((size_t)nt > n)
        nt = (int)n;
    if (nt <= 1) {
        for (size_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    p.n = n;
    atomic_init(&p.next, 0);
    p.fn = fn;
    p.ctx = ctx;
    for (int t = 1; t < nt; t++)
        if (pthread_create(&tid[started], NULL, pfor_worker, &p) == 0)
            started++;
    pfor_worker(&p);   /* the calling thread works too */
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

double kv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* KV_PROGRESS_DELAY (seconds, default 1) is how long work runs before its
 * progress line appears; 0 shows every update (for tests). */
static double progress_delay(void)
{
    const char *s = getenv("KV_PROGRESS_DELAY");
    char *end;
    double d;
    if (!s || !*s)
        return 1.0;
    d = strtod(s, &end);
    return (*end || !(d >= 0)) ? 1.0 : d;
}

void kv_progress_start(struct kv_progress *p, const char *what, int quiet)
{
    p->what = what;
    p->enabled = !quiet && isatty(2);
    p->t0 = p->last = kv_now();
    p->shown = 0;
    p->delay = p->enabled ? progress_delay() : 1.0;
}

void kv_progress_update(struct kv_progress *p, uint64_t done, uint64_t total)
{
    double t;
    if (!p->enabled)
        return;
    t = kv_now();
    if (t - p->t0 < p->delay || (p->shown && t - p->last < 0.2 * p->delay))
        return;
    p->last = t;
    p->shown = 1;
    if (total)
        fprintf(stderr, "\r%s: %s: %3.0f%%", progname, p->what,
                100.0 * (double)done / (double)total);
    else
        fprintf(stderr, "\r%s: %s: %" PRIu64, progname, p->what, done);
    fflush(stderr);
}

void kv_progress_end(struct kv_progress *p)
{
    if (p->enabled && p->shown)
        fprintf(stderr, "\r\033[K");
    p->shown = 0;
}

int kv_parse_i64(const char *s, const char *opt, int64_t min, int64_t max,
                 int64_t *out, struct kv_err *e)
{
    char *end;
    long long v;

    errno = 0;
    while (s && (*s == ' ' || *s == '\t'))
        s++;
    if (!s || !*s)
        return kv_err_set(e, "%s: expected an integer, got an empty value",
                          opt);
    v = strtoll(s, &end, 10);
    while (*end == ' ' || *end == '\t')
        end++;
    if (end == s || *end || errno == ERANGE || v < min || v > max) {
        if (max == INT64_MAX)
            return kv_err_set(e, "%s: expected an integer >= %" PRId64
                              ", got '%s'", opt, min, s);
        return kv_err_set(e, "%s: expected an integer from %" PRId64
                          " to %" PRId64 ", got '%s'", opt, min, max, s);
    }
    *out = v;
    return 0;
}

int kv_opt_i64(const struct arg_str *a, const char *opt, int64_t min,
               int64_t max, int64_t *out)
{
    struct kv_err e;

    if (a->count == 0)
        return 0;
    if (kv_parse_i64(a->sval[0], opt, min, max, out, &e) < 0)
        return kv_usage("%s", e.msg);
    return 0;
}

int kv_parse_f64(const char *s, const char *opt, double *out,
                 struct kv_err *e)
{
    char *end;
    double v;

    errno = 0;
    if (!s || !*s)
        return kv_err_set(e, "%s: expected a number, got an empty value",
                          opt);
    v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE)
        return kv_err_set(e, "%s: expected a number, got '%s'", opt, s);
    *out = v;
    return 0;
}

int kv_parse_i64_opt(const char *s, const char *opt, int64_t min, int64_t max,
                     int64_t *out, struct kv_err *e)
{
    return s ? kv_parse_i64(s, opt, min, max, out, e) : 0;
}

int kv_parse_f64_opt(const char *s, const char *opt, double min, double max,
                     double *out, struct kv_err *e)
{
    double v;
    if (!s)
        return 0;
    if (kv_parse_f64(s, opt, &v, e) < 0)
        return -1;
    if (!(v >= min && v <= max))
        return kv_err_set(e, "%s: expected a number from %g to %g, got '%s'",
                          opt, min, max, s);
    *out = v;
    return 0;
}

/* A comma-separated list, item by item: as a plain list (leading blanks
 * skipped, "" gives none, an item is named by opt) or per request (every
 * item given, each named "OPT: request K"). */
static int parse_list(const char *s, const char *opt, int per_request,
                      int64_t min, int64_t max, int64_t **out, size_t *n,
                      struct kv_err *e)
{
    size_t cap = 1, k = 0;
    const char *p;
    int64_t *v;

    for (p = s; *p; p++)
        if (*p == ',')
            cap++;
    v = malloc(cap * sizeof *v);
    if (!v)
        return kv_err_set(e, "out of memory");
    p = s;
    while (!per_request && *p == ' ')
        p++;
    if (per_request || *p) /* "" is no items only as a plain list */
        for (;;) {
            const char *c = strchr(p, ',');
            size_t len = c ? (size_t)(c - p) : strlen(p);
            char item[64], label[96];
            if (per_request)
                snprintf(label, sizeof label, "%s: request %zu", opt, k);
            else
                snprintf(label, sizeof label, "%s", opt);
            if (len >= sizeof item) {
                free(v);
                return kv_err_set(e, "%s: %s'%.20s...' is too long", label,
                                  per_request ? "" : "list item ", p);
            }
            memcpy(item, p, len);
            item[len] = '\0';
            if (kv_parse_i64(item, label, min, max, &v[k++], e) < 0) {
                free(v);
                return -1;
            }
            if (!c)
                break;
            p = c + 1;
        }
    *out = v;
    *n = k;
    return 0;
}

int kv_parse_i64_list(const char *s, const char *opt, int64_t min, int64_t max,
                      int64_t **out, size_t *n, struct kv_err *e)
{
    return parse_list(s, opt, 0, min, max, out, n, e);
}

int kv_parse_request_list(const char *s, const char *opt, int64_t min,
                          int64_t **out, size_t *n, struct kv_err *e)
{
    return parse_list(s, opt, 1, min, INT64_MAX, out, n, e);
}

int kv_read_all(const char *path, size_t max_bytes, char **buf, size_t *len,
                struct kv_err *e)
{
    FILE *f = kv_open_in(path, e);
    size_t cap = 65536, n = 0;
    char *b;

    if (!f)
        return -1;
    b = malloc(cap + 1);
    if (!b) {
        kv_close_in(f);
        return kv_err_set(e, "out of memory");
    }
    for (;;) {
        size_t got;
        if (n == cap) {
            char *nb;
            if (max_bytes && cap >= max_bytes) {
                free(b);
                kv_close_in(f);
                return kv_err_set(e, "'%s' is larger than the limit of %zu "
                                  "bytes", kv_path_name(path, 0), max_bytes);
            }
            cap *= 2;
            nb = realloc(b, cap + 1);
            if (!nb) {
                free(b);
                kv_close_in(f);
                return kv_err_set(e, "out of memory");
            }
            b = nb;
        }
        got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(b);
        kv_close_in(f);
        return kv_err_set(e, "read error on '%s': %s", kv_path_name(path, 0),
                          strerror(errno));
    }
    kv_close_in(f);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
}

/* Is [p, le) a line holding only white space and a '#' comment? */
static int comment_only(const char *p, const char *le)
{
    while (p < le && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p < le && *p == '#';
}

/* A separator between table entries. */
static int int_sep(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == ',';
}

/* An integer .npy file (in buf, freed here) as a row-major table. */
static int int_table_npy(const char *name, char *buf, size_t len,
                         size_t max_bytes, int64_t **out, size_t *n_rows,
                         size_t *n_cols, struct kv_err *e)
{
    struct kv_tensor t;
    FILE *m = fmemopen(buf, len, "rb");
    int rc;
    if (!m) {
        free(buf);
        return kv_err_set(e, "out of memory");
    }
    kv_tensor_init(&t);
    rc = kv_npy_read_one(m, max_bytes, &t, e);
    fclose(m);
    free(buf);
    if (rc != 0)
        return rc < 0 ? kv_err_prefix(e, "'%s'", name)
                      : kv_err_set(e, "'%s': empty input", name);
    if (kv_dtype_is_float(t.dtype) || t.ndim < 1 || t.ndim > 2) {
        char s[128];
        kv_err_set(e, "'%s': expected a 1-d or 2-d integer array, found "
                   "%s of %s", name, kv_shape_str(t.ndim, t.shape, s,
                   sizeof s), kv_dtype_name(t.dtype));
        kv_tensor_release(&t);
        return -1;
    }
    size_t rows = t.ndim == 2 ? (size_t)t.shape[0] : 1;
    size_t cols = t.ndim == 2 ? (size_t)t.shape[1] : (size_t)t.shape[0];
    size_t total = rows * cols;
    int64_t *v = malloc((total ? total : 1) * sizeof *v);
    if (!v) {
        kv_tensor_release(&t);
        return kv_err_set(e, "out of memory");
    }
    if (t.dtype == KV_I32) {
        const int32_t *s32 = t.data;
        for (size_t i = 0; i < total; i++)
            v[i] = s32[i];
    } else if (t.dtype == KV_U64) {
        const uint64_t *s64 = t.data;
        for (size_t i = 0; i < total; i++) {
            if (s64[i] > (uint64_t)INT64_MAX) {
                kv_err_set(e, "'%s': value %" PRIu64 " at index %zu is "
                           "too large", name, s64[i], i);
                free(v);
                kv_tensor_release(&t);
                return -1;
            }
            v[i] = (int64_t)s64[i];
        }
    } else {
        for (size_t i = 0; i < total; i++)
            v[i] = kv_tensor_get_i64(&t, i);
    }
    kv_tensor_release(&t);
    *out = v;
    *n_rows = rows;
    *n_cols = cols;
    return 0;
}

/* A text table's rows (lines with an entry) and its longest row. */
static void int_table_size(const char *buf, size_t len, size_t *rows,
                           size_t *cols)
{
    const char *p = buf, *end = buf + len;
    *rows = *cols = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        size_t c = 0;
        const char *q = p;
        if (comment_only(p, le)) {
            p = nl ? nl + 1 : end;
            continue;
        }
        while (q < le) {
            while (q < le && int_sep(*q))
                q++;
            if (q < le && *q == '#')
                break;
            if (q < le) {
                c++;
                while (q < le && !int_sep(*q))
                    q++;
            }
        }
        (*rows)++;
        if (c > *cols)
            *cols = c;
        p = nl ? nl + 1 : end;
    }
}

/* Parse the entries of one line [q, le) into row; -1 at a bad entry. */
static int int_table_row(const char *name, size_t line, const char *q,
                         const char *le, int64_t *row, struct kv_err *e)
{
    size_t c = 0;
    while (q < le) {
        while (q < le && int_sep(*q))
            q++;
        if (q >= le || *q == '#')
            break;
        /* the common case, up to 18 plain digits, without strtoll;
         * anything else goes through it */
        const char *d = q + (*q == '-');
        long long acc = 0;
        int nd = 0;
        while (d + nd < le && nd < 18 && d[nd] >= '0' && d[nd] <= '9') {
            acc = acc * 10 + (d[nd] - '0');
            nd++;
        }
        if (nd > 0 && (d + nd == le || int_sep(d[nd]))) {
            row[c++] = *q == '-' ? -acc : acc;
            q = d + nd;
            continue;
        }
        char *ep;
        errno = 0;
        long long x = strtoll(q, &ep, 10);
        if (ep == q || errno == ERANGE || (ep < le && !int_sep(*ep))) {
            const char *te = q;
            while (te < le && !(*te == ' ' || *te == '\t'))
                te++;
            return kv_err_set(e, "'%s' line %zu: expected an integer, "
                              "found '%.*s'", name, line,
                              (int)(te - q > 20 ? 20 : te - q), q);
        }
        row[c++] = x;
        q = ep;
    }
    return 0;
}

int kv_read_int_table(const char *path, int64_t pad, size_t max_bytes,
                      int64_t **out, size_t *n_rows, size_t *n_cols,
                      struct kv_err *e)
{
    const char *name = kv_path_name(path, 0);
    char *buf = NULL;
    size_t len = 0, rows, cols, total;
    int64_t *v;

    if (kv_read_all(path, max_bytes, &buf, &len, e) < 0)
        return -1;
    if (len >= 6 && memcmp(buf, "\x93NUMPY", 6) == 0)
        return int_table_npy(name, buf, len, max_bytes, out, n_rows, n_cols,
                             e);
    /* text: count rows and the longest row first */
    int_table_size(buf, len, &rows, &cols);
    if (kv_size_mul(rows, cols, &total) < 0 || total > SIZE_MAX / sizeof *v) {
        free(buf);
        return kv_err_set(e, "'%s': table too large", name);
    }
    v = malloc((total ? total : 1) * sizeof *v);
    if (!v) {
        free(buf);
        return kv_err_set(e, "out of memory");
    }
    for (size_t i = 0; i < total; i++)
        v[i] = pad;
    const char *p = buf, *end = buf + len;
    size_t line = 0, r = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        if (!comment_only(p, le)) {
            if (int_table_row(name, line, p, le, v + r * cols, e) < 0) {
                free(v);
                free(buf);
                return -1;
            }
            r++;
        }
        p = nl ? nl + 1 : end;
    }
    free(buf);
    *out = v;
    *n_rows = rows;
    *n_cols = cols;
    return 0;
}

/* Shortest text that reads back to the same value in the given dtype. */
static void fmt_float(char *buf, size_t len, double v, enum kv_dtype t)
{
    if (isnan(v)) {
        snprintf(buf, len, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, len, v < 0 ? "-inf" : "inf");
        return;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, len, "%.*g", p, v);
        double r = strtod(buf, NULL);
        int same;
        switch (t) {
        case KV_F64: same = r == v; break;
        case KV_F32: same = (float)r == (float)v; break;
        case KV_F16: same = kv_f32_to_f16((float)r) == kv_f32_to_f16((float)v);
            break;
        case KV_BF16: same = kv_f32_to_bf16((float)r) ==
                             kv_f32_to_bf16((float)v);
            break;
        default: same = 1;
        }
        if (same && !(r == 0 && signbit(r) != signbit(v)))
            return;
    }
}

int kv_text_write(FILE *f, const struct kv_tensor *t, struct kv_err *e)
{
    size_t n = kv_tensor_numel(t);
    size_t row = t->ndim ? (size_t)t->shape[t->ndim - 1] : 1;
    size_t mat = t->ndim >= 2 ? row * (size_t)t->shape[t->ndim - 2] : 0;
    char buf[64];

    if (row == 0) {
        /* nothing to print per row; still one empty line per row */
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (t->ndim >= 3 && i && mat && i % mat == 0)
            fputc('\n', f);
        if (kv_dtype_is_float(t->dtype))
            fmt_float(buf, sizeof buf, kv_tensor_get_f64(t, i), t->dtype);
        else if (t->dtype == KV_U64)
            snprintf(buf, sizeof buf, "%" PRIu64, ((const uint64_t *)t->data)[i]);
        else
            snprintf(buf, sizeof buf, "%" PRId64, kv_tensor_get_i64(t, i));
        fputs(buf, f);
        fputc((i + 1) % row == 0 ? '\n' : ' ', f);
    }
    if (ferror(f))
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

int kv_text_field_i64(FILE *f, const char *name, const int64_t *v, size_t n,
                      struct kv_err *e)
{
    fprintf(f, "%s:", name);
    for (size_t i = 0; i < n; i++)
        fprintf(f, " %" PRId64, v[i]);
    fputc('\n', f);
    if (ferror(f))
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}
