/* kvxattn: the inputs: Q and K loaded or mapped (f32, f16 or bf16, bhsd
 * or thd), checked finite, and the per-head threshold tables. */
#include "kvxattn.h"

void input_release(struct input *in)
{
    if (in->map) {
        munmap(in->map, in->map_len);
        kv_tensor_init(&in->t);
        in->map = NULL;
    } else {
        kv_tensor_release(&in->t);
    }
}

/* Map a regular file whose first array is f32 (or bf16 when bf16 is set)
 * read-only instead of reading it (large inputs are used in place,
 * straight from the page cache).  Returns 1 and fills in, or 0 when the
 * file does not qualify; then kv_npy_load reads it and reports any
 * problem. */
static int map_f32(const char *path, size_t max, int bf16, struct input *in)
{
    struct kv_npy_header h;
    struct kv_err e;
    struct stat st;
    FILE *f;
    long off;
    void *p;

    if (!path || strcmp(path, "-") == 0)
        return 0;
    f = fopen(path, "rb");
    if (!f)
        return 0;
    if (kv_npy_read_header(f, max, &h, &e) != 0 ||
        (h.dtype != KV_F32 && !(bf16 && h.dtype == KV_BF16)) ||
        fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
        (off = ftell(f)) < 0 || off % 4 != 0 ||
        (uint64_t)off + h.nbytes > (uint64_t)st.st_size || h.nbytes == 0) {
        fclose(f);
        return 0;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE,
             fileno(f), 0);
    fclose(f);
    if (p == MAP_FAILED)
        return 0;
    kv_tensor_init(&in->t);
    in->t.dtype = h.dtype;
    in->src = h.dtype;
    in->t.ndim = h.ndim;
    memcpy(in->t.shape, h.shape, sizeof(h.shape));
    in->t.data = (char *)p + off;
    in->t.nbytes = h.nbytes;
    in->map = p;
    in->map_len = (size_t)st.st_size;
    return 1;
}

/* Refuse a NaN or infinity in a loaded Q or K ([B, H, L, D] f32): the
 * scores, the softmax and so the selection would be meaningless.  Names
 * the first one by its index in the file's own layout. */
/* The scan (kv_*_nonfinite_n of core/half.h) runs in chunks on the -j
 * workers; only a chunk that holds a bad value is searched element by
 * element for the first. */
#define FIN_CHUNK ((size_t)1 << 16)

struct fin_scan {
    const float *v;
    const uint16_t *h;      /* bf16 values instead of v */
    size_t n;
    unsigned char *bad;     /* one flag per chunk */
};

static void fin_chunk(void *ctx, size_t c)
{
    const struct fin_scan *f = ctx;
    size_t i0 = c * FIN_CHUNK, i1 = i0 + FIN_CHUNK;

    if (i1 > f->n)
        i1 = f->n;
    f->bad[c] = (unsigned char)(f->h ? kv_bf16_nonfinite_n(f->h + i0, i1 - i0)
                                     : kv_f32_nonfinite_n(f->v + i0, i1 - i0));
}

static int check_finite(const struct input *in, const char *what,
                        const char *path, int thd, int nthreads,
                        struct kv_err *e)
{
    const int b16 = in->t.dtype == KV_BF16;
    const float *v = b16 ? NULL : in->t.data;
    const uint16_t *hv = b16 ? in->t.data : NULL;
    const int64_t *s = in->t.shape;
    size_t n = (size_t)(s[0] * s[1] * s[2] * s[3]);
    size_t nc = (n + FIN_CHUNK - 1) / FIN_CHUNK, start = 0;
    struct fin_scan f = {v, hv, n, NULL};

    f.bad = calloc(nc > 0 ? nc : 1, 1);
    if (f.bad) {
        kv_parallel_for(nc, nthreads, fin_chunk, &f);
        while (start < nc && !f.bad[start])
            start++;
        free(f.bad);
        if (start == nc)
            return 0;
        start *= FIN_CHUNK;
    }
    for (size_t i = start; i < n; i++) {
        float x = b16 ? kv_bf16_to_f32(hv[i]) : v[i];
        if (isfinite(x))
            continue;
        int64_t d = (int64_t)i % s[3], l = (int64_t)i / s[3] % s[2];
        int64_t h = (int64_t)i / s[3] / s[2] % s[1];
        int64_t b = (int64_t)i / s[3] / s[2] / s[1];
        if (thd)
            return kv_err_set(e, "%s '%s': element (%lld, %lld, %lld) is %s",
                              what, kv_path_name(path, 0), (long long)l,
                              (long long)h, (long long)d,
                              isnan(x) ? "nan" : "inf");
        return kv_err_set(e, "%s '%s': element (%lld, %lld, %lld, %lld) is "
                          "%s", what, kv_path_name(path, 0), (long long)b,
                          (long long)h, (long long)l, (long long)d,
                          isnan(x) ? "nan" : "inf");
    }
    return 0;
}

/* The finite check load_qk deferred (in->unchecked), now; 0 when there
 * was none to do. */
int input_check(struct input *in, const char *what, const char *path,
                int thd, int nthreads, struct kv_err *e)
{
    if (!in->unchecked)
        return 0;
    in->unchecked = 0;
    return check_finite(in, what, path, thd, nthreads, e);
}

/* Load one of Q/K as f32 [B, H, L, D]; thd [T, H, D] becomes [1, H, T, D].
 * bf16: a bf16 file is mapped and kept bf16 (for the bf16 tiles); 2: its
 * finite check is also left to the caller (in->unchecked, input_check):
 * the bf16 tiles check the values as they read them. */
int load_qk(const char *path, const char *what, int thd, size_t max,
            int nthreads, int bf16, struct input *in, struct kv_err *e)
{
    struct kv_tensor raw, f;
    char sbuf[128];
    int rc = -1;

    in->map = NULL;
    in->src = KV_F32;
    in->unchecked = 0;
    kv_tensor_init(&in->t);
    if (!thd && map_f32(path, max, bf16, in)) {
        if (in->t.ndim == 4) {
            if (bf16 == 2 && in->t.dtype == KV_BF16) {
                in->unchecked = 1;
                return 0;
            }
            if (check_finite(in, what, path, thd, nthreads, e) == 0)
                return 0;
            input_release(in);
            return -1;
        }
        input_release(in);
    }
    kv_tensor_init(&raw);
    kv_tensor_init(&f);
    if (kv_npy_load(path, max, &raw, e))
        return -1;
    in->src = raw.dtype;
    if (!kv_dtype_is_float(raw.dtype)) {
        kv_err_set(e, "%s '%s': expected f32, f16 or bf16, got %s", what,
                   kv_path_name(path, 0), kv_dtype_name(raw.dtype));
        goto done;
    }
    if (raw.ndim != (thd ? 3 : 4)) {
        kv_err_set(e, "%s '%s': expected %s, got shape %s", what,
                   kv_path_name(path, 0),
                   thd ? "3 dims [T, H, D] (--layout thd)"
                       : "4 dims [B, H, L, D] (--layout bhsd)",
                   kv_shape_str(raw.ndim, raw.shape, sbuf, sizeof(sbuf)));
        goto done;
    }
    if (raw.dtype == KV_F32)
        kv_tensor_move(&f, &raw);
    else if (kv_tensor_convert(&f, &raw, KV_F32, e))
        goto done;
    if (thd) {
        int64_t t = f.shape[0], h = f.shape[1], d = f.shape[2];
        int64_t shape[4] = {1, h, t, d};
        struct kv_tensor g;
        const float *src;
        float *dst;

        kv_tensor_init(&g);
        if (kv_tensor_alloc(&g, KV_F32, 4, shape, 0, e))
            goto done;
        src = f.data;
        dst = g.data;
        for (int64_t i = 0; i < t; i++)
            for (int64_t j = 0; j < h; j++)
                memcpy(dst + (j * t + i) * d, src + (i * h + j) * d,
                       (size_t)d * sizeof(float));
        kv_tensor_move(&f, &g);
    }
    kv_tensor_move(&in->t, &f);
    rc = check_finite(in, what, path, thd, nthreads, e);
    if (rc)
        input_release(in);
done:
    kv_tensor_release(&raw);
    kv_tensor_release(&f);
    return rc;
}

/* Read a thresholds table: a float .npy (1-d, or 2-d with --layer) or text
 * (one line per layer, numbers separated by white space).  Returns the hq
 * thresholds of the chosen layer in out (malloc'd). */
int read_thresholds(const char *path, int64_t layer, int64_t hq,
                    size_t max, double **out, struct kv_err *e)
{
    double *v = NULL;
    size_t n = 0, cap = 0, n_rows = 0, row_len = 0, cur = 0, ragged = 0;
    const char *name = kv_path_name(path, 0);
    FILE *f = kv_open_in(path, e);
    int c;

    if (!f)
        return -1;
    c = getc(f);
    if (c == 0x93) {
        struct kv_tensor t, d;
        ungetc(c, f);
        kv_tensor_init(&t);
        kv_tensor_init(&d);
        if (kv_npy_read_one(f, max, &t, e) != 0) {
            kv_close_in(f);
            kv_tensor_release(&t);
            if (!e->msg[0])
                kv_err_set(e, "empty");
            return kv_err_prefix(e, "thresholds '%s'", name);
        }
        kv_close_in(f);
        if (t.ndim < 1 || t.ndim > 2 || kv_tensor_convert(&d, &t, KV_F64, e)) {
            kv_tensor_release(&t);
            return kv_err_set(e, "thresholds '%s': expected a 1-d or 2-d "
                              "numeric array", name);
        }
        n = kv_tensor_numel(&d);
        n_rows = t.ndim == 2 ? (size_t)t.shape[0] : 1;
        row_len = t.ndim == 2 ? (size_t)t.shape[1] : n;
        kv_tensor_release(&t);
        v = malloc((n ? n : 1) * sizeof(double));
        if (!v) {
            kv_tensor_release(&d);
            return kv_err_set(e, "out of memory");
        }
        if (n)
            memcpy(v, d.data, n * sizeof(double));
        kv_tensor_release(&d);
    } else {
        char tok[128];
        size_t tl = 0;
        for (;; c = getc(f)) {
            if (c == EOF || c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                c == ',') {
                if (tl) {
                    char *end;
                    tok[tl] = 0;
                    errno = 0;
                    if (n == cap) {
                        double *nv;
                        cap = cap ? cap * 2 : 64;
                        nv = realloc(v, cap * sizeof(double));
                        if (!nv) {
                            free(v);
                            kv_close_in(f);
                            return kv_err_set(e, "out of memory");
                        }
                        v = nv;
                    }
                    v[n] = strtod(tok, &end);
                    if (*end || errno == ERANGE) {
                        free(v);
                        kv_close_in(f);
                        return kv_err_set(e, "thresholds '%s': '%s' is not "
                                          "a number", name, tok);
                    }
                    n++;
                    cur++;
                    tl = 0;
                }
                if ((c == '\n' || c == EOF) && cur) {
                    if (n_rows && cur != row_len)
                        ragged = 1;
                    if (!n_rows)
                        row_len = cur;
                    n_rows++;
                    cur = 0;
                }
                if (c == EOF)
                    break;
            } else if (tl + 1 < sizeof(tok)) {
                tok[tl++] = (char)c;
            } else {
                free(v);
                kv_close_in(f);
                return kv_err_set(e, "thresholds '%s': token too long", name);
            }
        }
        kv_close_in(f);
        if (ragged) {
            free(v);
            return kv_err_set(e, "thresholds '%s': rows of different "
                              "lengths", name);
        }
    }
    if (layer >= 0) {
        if ((int64_t)n_rows <= layer || (int64_t)row_len != hq) {
            free(v);
            return kv_err_set(e, "thresholds '%s' has %zu rows of %zu; "
                              "--layer %lld needs at least %lld rows of %lld "
                              "(one per query head)", name, n_rows, row_len,
                              (long long)layer, (long long)layer + 1,
                              (long long)hq);
        }
        memmove(v, v + (size_t)layer * row_len, (size_t)hq * sizeof(double));
    } else if ((int64_t)n != hq) {
        free(v);
        return kv_err_set(e, "thresholds '%s' has %zu values (%zu rows of "
                          "%zu); expected %lld, one per query head (a layer "
                          "x head table needs --layer)", name, n, n_rows,
                          row_len, (long long)hq);
    }
    for (int64_t h = 0; h < hq; h++)
        if (!(v[h] >= 0.0 && v[h] <= 1.0)) {
            double bad = v[h];
            free(v);
            return kv_err_set(e, "thresholds '%s': value %g for head %lld "
                              "is outside [0, 1]", name, bad, (long long)h);
        }
    *out = v;
    return 0;
}
