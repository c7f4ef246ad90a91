/* kvattn: what the subcommands share: inputs loaded or mapped, the
 * parsers of the options several take (dtype, format, threads, LSE base,
 * integer lists), the LSE base change, the mask's kind, and the writer of
 * one or more tensors. */
#include "kvattn.h"
#include "core/fp8.h"

void input_release(struct input *in)
{
    if (in->map) {
        munmap(in->map, in->map_len);
        kv_tensor_init(&in->t);
    } else {
        kv_tensor_release(&in->t);
    }
    in->map = NULL;
}

/* Read one array from path.  A regular file of at least 1 MiB holding a
 * single array is mapped instead of copied (a paged cache is read once,
 * so copying it would double the memory traffic); its pages fault in from
 * the worker threads, in parallel, as the kernel first touches them. */
int input_load(struct input *in, const char *path, size_t max_bytes,
               struct kv_err *e)
{
    memset(in, 0, sizeof *in);
    kv_tensor_init(&in->t);
    if (path && strcmp(path, "-") != 0) {
        struct stat st;
        int fd = open(path, O_RDONLY);
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            st.st_size >= (1 << 20)) {
            FILE *f = fdopen(fd, "rb");
            struct kv_npy_header h;
            if (!f) {
                close(fd);
                return kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
            }
            if (kv_npy_read_header(f, max_bytes, &h, e) != 0) {
                fclose(f);
                if (e->msg[0] == '\0')
                    kv_err_set(e, "'%s': no array in the file", path);
                return kv_err_prefix(e, "'%s'", path);
            }
            long off = ftell(f);
            if (off > 0 && (uint64_t)off + h.nbytes == (uint64_t)st.st_size &&
                off % 16 == 0 && h.nbytes > 0) {
                void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
                               fileno(f), 0);
                if (m != MAP_FAILED) {
                    fclose(f);
                    in->map = m;
                    in->map_len = (size_t)st.st_size;
                    in->t.dtype = h.dtype;
                    in->t.ndim = h.ndim;
                    memcpy(in->t.shape, h.shape, sizeof h.shape);
                    in->t.data = (char *)m + off;
                    in->t.nbytes = h.nbytes;
                    return 0;
                }
            }
            fclose(f);
        } else if (fd >= 0) {
            close(fd);
        }
    }
    return kv_npy_load(path, max_bytes, &in->t, e);
}

/* CPU time of the process, all threads (for -v). */
double process_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int parse_dtype_opt(struct arg_str *a, const char *opt, enum kv_dtype *out)
{
    struct kv_err e = {{0}};
    if (a->count == 0)
        return 0;
    if (kv_dtype_parse(a->sval[0], out, &e) ||
        !(*out == KV_F32 || *out == KV_F16 || *out == KV_BF16 || *out == KV_F64))
        return kv_usage("%s: expected f32, f16, bf16 or f64, got '%s'", opt, a->sval[0]);
    return 0;
}

/* An FP8 cache's per-tensor scale (--k-scale, --v-scale): 1 when absent,
 * vLLM's default; finite and > 0 in f32.  0 or the usage error's status. */
int parse_fp8_scale(struct arg_str *a, const char *opt, float *out)
{
    struct kv_err e = {{0}};
    double s = 1.0;
    if ((a->count && kv_parse_f64(a->sval[0], opt, &s, &e)) ||
        kv_fp8_scale_check(s, opt, &e))
        return kv_usage("%s", e.msg);
    *out = (float)s;
    return 0;
}

/* --max-mem (default 75% of RAM): 0 or the usage error's exit status. */
int parse_max_mem(struct arg_str *a, size_t *out)
{
    struct kv_err e = {{0}};
    if (kv_parse_max_mem(a->count ? a->sval[0] : NULL, out, &e))
        return kv_usage("%s", e.msg);
    return 0;
}

/* The n outputs named by opts[i] (paths[i] NULL when absent, "-" for
 * stdout) land in n places: 0, or the usage error's exit status. */
int outputs_distinct(const char *const *opts, const char *const *paths, size_t n)
{
    struct kv_err e = {{0}};
    if (kv_outputs_distinct(opts, paths, n, &e))
        return kv_usage("%s", e.msg);
    return 0;
}

int parse_format(struct arg_str *a, enum kv_format *out)
{
    *out = KV_FMT_AUTO;
    if (a->count == 0)
        return 0;
    if (strcmp(a->sval[0], "npy") == 0)
        *out = KV_FMT_NPY;
    else if (strcmp(a->sval[0], "text") == 0)
        *out = KV_FMT_TEXT;
    else
        return kv_usage("-f: expected npy or text, got '%s'", a->sval[0]);
    return 0;
}

int parse_threads(struct arg_int *a, int *out)
{
    *out = 0;
    if (a->count == 0)
        return 0;
    if (a->ival[0] < 0 || a->ival[0] > 1024)
        return kv_usage("-j: expected a thread count in 0..1024, got %d", a->ival[0]);
    *out = a->ival[0];
    return 0;
}

/* --lse-base e|2: 0 for the natural logarithm (FlashAttention, PyTorch,
 * vLLM, vllm-ascend), 1 for base 2 (FlashInfer's LSE). */
int parse_lse_base(struct arg_str *a, int *base2)
{
    *base2 = 0;
    if (a->count == 0 || strcmp(a->sval[0], "e") == 0)
        return 0;
    if (strcmp(a->sval[0], "2") == 0) {
        *base2 = 1;
        return 0;
    }
    return kv_usage("--lse-base: expected e or 2, got '%s'", a->sval[0]);
}

/* Multiply every element of an f32 or f64 tensor by f (infinities and NaN
 * stay what they are). */
void scale_tensor(struct kv_tensor *t, double f)
{
    size_t n = kv_tensor_numel(t);
    if (t->dtype == KV_F32) {
        float *x = t->data;
        for (size_t i = 0; i < n; i++)
            x[i] = (float)(x[i] * f);
    } else if (t->dtype == KV_F64) {
        double *x = t->data;
        for (size_t i = 0; i < n; i++)
            x[i] *= f;
    }
}

/* A float mask is added to the scores; one that holds nothing but 0 and 1
 * is almost certainly a 1 = masked mask in a float dtype (vllm-ascend's bf16
 * masks), which adding would not mask at all.  Returns 1 for such a mask. */
int mask_looks_binary(const struct kv_tensor *m)
{
    size_t n = kv_tensor_numel(m);
    int ones = 0;
    if (!kv_dtype_is_float(m->dtype))
        return 0;
    for (size_t i = 0; i < n; i++) {
        double x = kv_tensor_get_f64(m, i);
        if (x == 1.0)
            ones = 1;
        else if (x != 0.0)
            return 0;
    }
    return ones;
}

/* Write tensors to path ("-"/NULL = stdout) as one .npy stream, or as text.
 * Returns 0 or an exit code (the message printed). */
/* The format an output gets: text on a terminal and .npy elsewhere when
 * not chosen; .npy reaches a terminal only when forced (else the usage
 * status, the message printed). */
static int out_format(const struct tensor_out *w, enum kv_format *fmt)
{
    int to_stdout = !w->path || strcmp(w->path, "-") == 0;
    *fmt = w->fmt;
    if (*fmt == KV_FMT_AUTO)
        *fmt = (to_stdout && kv_isatty(stdout)) ? KV_FMT_TEXT : KV_FMT_NPY;
    return *fmt == KV_FMT_NPY && to_stdout ? kv_check_binary_ok(stdout, w->force) : 0;
}

int write_outputs(const struct tensor_out *w, int n)
{
    struct kv_err e = {{0}};
    struct kv_out o[8], *op[8];
    enum kv_format fmt[8];
    int opened = 0, rc = 0;

    if (n > 8)
        return kv_fail("internal: %d outputs", n);
    for (int j = 0; j < n; j++)
        if ((rc = out_format(&w[j], &fmt[j])) != 0)
            return rc;
    for (; opened < n; opened++) {
        op[opened] = &o[opened];
        if (kv_out_open(&o[opened], w[opened].path, &e))
            goto fail;
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < w[j].n; i++) {
            if (fmt[j] == KV_FMT_TEXT && i > 0)
                fputc('\n', o[j].f);        /* a blank line between arrays */
            if (fmt[j] == KV_FMT_NPY ? kv_npy_write(o[j].f, w[j].ts[i], &e)
                                     : kv_text_write(o[j].f, w[j].ts[i], &e))
                goto fail;
        }
    if (kv_out_commit_all(op, (size_t)n, &e))
        return kv_fail_err(&e);
    return 0;
fail:
    for (int j = 0; j < opened; j++)
        kv_out_abort(&o[j]);
    return kv_fail_err(&e);
}

int write_tensors(const char *path, enum kv_format fmt, int force,
                  const struct kv_tensor *const *ts, int n)
{
    struct tensor_out w = {path, fmt, force, ts, n};
    return write_outputs(&w, 1);
}

int parse_list(struct arg_str *a, const char *opt, int64_t **v, size_t *n)
{
    struct kv_err e = {{0}};
    *v = NULL;
    *n = 0;
    if (a->count == 0)
        return 0;
    if (kv_parse_i64_list(a->sval[0], opt, 0, INT64_MAX / 8, v, n, &e))
        return kv_usage("%s", e.msg);
    return 0;
}


/* Is path standard input? */
int is_stdin(const char *path)
{
    return path && strcmp(path, "-") == 0;
}

/* x in the fewest significant digits (at most 17) that read back as the
 * same double: the text Python's repr() gives a float. */
void shortest_double(char *buf, size_t n, double x)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

/* What is left of the memory limit max_mem (0: none) once the n arrays
 * ts (NULL entries skipped) and extra bytes are held: 0 again for no
 * limit, else at least 1.  Fills e, naming the limit, when they alone
 * pass it. */
int mem_after(size_t max_mem, const struct kv_tensor *const *ts, size_t n, size_t extra,
              size_t *left, struct kv_err *e)
{
    size_t held = extra;
    for (size_t i = 0; i < n; i++)
        if (ts[i] && kv_size_add(held, ts[i]->nbytes, &held))
            held = SIZE_MAX;
    *left = 0;
    if (!max_mem)
        return 0;
    if (held >= max_mem)
        return kv_err_set(e, "the inputs take %zu bytes, more than the limit of %zu "
                          "(--max-mem)", held, max_mem);
    *left = max_mem - held;
    return 0;
}

/* kv_npy_load under a limit several inputs share: *left is what remains
 * of it (0: no limit), and the array's bytes are taken from it. */
int load_shared(const char *path, size_t max_mem, size_t *left, struct kv_tensor *t,
                struct kv_err *e)
{
    if (max_mem && *left == 0)
        *left = max_mem;           /* the first input */
    if (max_mem && *left == 1)
        return kv_err_set(e, "'%s': the inputs before it take all of --max-mem %zu",
                          path ? path : "-", max_mem);
    if (kv_npy_load(path, max_mem ? *left : 0, t, e))
        return -1;
    if (max_mem)
        *left = t->nbytes < *left ? *left - t->nbytes : 1;
    return 0;
}
