/* npy.c - reading and writing NumPy .npy streams.
 *
 * Byte layout of one array (all integers little-endian):
 *
 *   offset  size  content
 *   0       6     magic "\x93NUMPY"
 *   6       1     major version (1, 2 or 3)
 *   7       1     minor version (0)
 *   8       2|4   header length HLEN: u16 in version 1, u32 in 2 and 3
 *   10|12   HLEN  header: an ASCII (v3: UTF-8) Python dict literal
 *                   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 *                 padded with spaces and ended by '\n' so that the data
 *                 starts at a multiple of 64 bytes (16 in old files)
 *   ...           data: prod(shape) * itemsize bytes, C order
 *
 * A stream is arrays back to back.  descr codes: |b1 bool, |u1 u8, |i1 i8,
 * <i2 <i4 <i8, <u2 <u4 <u8, <f2 f16, <f4 f32, <f8 f64, and <V2 (or |V2)
 * taken as bf16.  Big-endian ('>'), Fortran order, object and structured
 * dtypes are refused.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "core/npy.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER (1u << 20)

static const struct {
    const char *code;     /* without byte-order character */
    enum kv_dtype t;
} codes[] = {
    {"b1", KV_BOOL}, {"u1", KV_U8},  {"i1", KV_I8},  {"i2", KV_I16},
    {"i4", KV_I32},  {"i8", KV_I64}, {"u2", KV_U16}, {"u4", KV_U32},
    {"u8", KV_U64},  {"f2", KV_F16}, {"f4", KV_F32}, {"f8", KV_F64},
    {"V2", KV_BF16},
};

static const char *descr_of(enum kv_dtype t)
{
    switch (t) {
    case KV_BOOL: return "|b1";
    case KV_U8: return "|u1";
    case KV_I8: return "|i1";
    case KV_I16: return "<i2";
    case KV_I32: return "<i4";
    case KV_I64: return "<i8";
    case KV_U16: return "<u2";
    case KV_U32: return "<u4";
    case KV_U64: return "<u8";
    case KV_F16: return "<f2";
    case KV_BF16: return "<V2";
    case KV_F32: return "<f4";
    case KV_F64: return "<f8";
    default: return NULL;
    }
}

/* A tiny scanner over the dict text. */
struct scan {
    const char *p, *end;
};

static void skip_ws(struct scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' ||
                             *s->p == '\r'))
        s->p++;
}

static int eat(struct scan *s, char c)
{
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

/* Read a quoted Python string into buf; returns 0 or -1. */
static int read_str(struct scan *s, char *buf, size_t len)
{
    char q;
    size_t n = 0;

    skip_ws(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return -1;
    q = *s->p++;
    while (s->p < s->end && *s->p != q) {
        if (*s->p == '\\' || n + 1 >= len)
            return -1;
        buf[n++] = *s->p++;
    }
    if (s->p >= s->end)
        return -1;
    s->p++;
    buf[n] = '\0';
    return 0;
}

static int read_word(struct scan *s, const char *w)
{
    size_t n = strlen(w);
    skip_ws(s);
    if ((size_t)(s->end - s->p) >= n && memcmp(s->p, w, n) == 0) {
        s->p += n;
        return 1;
    }
    return 0;
}

/* Up to 10 characters at the scan position, for messages (the header
 * text is not NUL-terminated). */
static const char *where(const struct scan *s, char *buf, size_t len)
{
    size_t n = (size_t)(s->end - s->p);
    if (n == 0)
        return "end of header";
    if (n > 10)
        n = 10;
    if (n >= len)
        n = len - 1;
    memcpy(buf, s->p, n);
    buf[n] = '\0';
    return buf;
}

int kv_npy_parse_dict(const char *text, size_t len, size_t max_bytes,
                      struct kv_npy_header *h, struct kv_err *e)
{
    struct scan s = {text, text + len};
    struct kv_npy_header out;
    int have_descr = 0, have_order = 0, have_shape = 0;
    char key[32], descr[32], at[16];

    memset(&out, 0, sizeof out);
    if (!eat(&s, '{'))
        return kv_err_set(e, "npy header: expected '{' at the start of the "
                          "header dict");
    for (;;) {
        if (eat(&s, '}'))
            break;
        if (read_str(&s, key, sizeof key) < 0)
            return kv_err_set(e, "npy header: expected a quoted key, found "
                              "'%s'", where(&s, at, sizeof at));
        if (!eat(&s, ':'))
            return kv_err_set(e, "npy header: expected ':' after '%s'", key);
        if (strcmp(key, "descr") == 0) {
            skip_ws(&s);
            if (s.p < s.end && *s.p == '[')
                return kv_err_set(e, "npy header: structured dtypes are not "
                                  "supported");
            if (read_str(&s, descr, sizeof descr) < 0)
                return kv_err_set(e, "npy header: 'descr' must be a quoted "
                                  "type string");
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (read_word(&s, "True"))
                return kv_err_set(e, "npy header: Fortran-ordered arrays are "
                                  "not supported (save with C order)");
            if (!read_word(&s, "False"))
                return kv_err_set(e, "npy header: 'fortran_order' must be "
                                  "True or False");
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (!eat(&s, '('))
                return kv_err_set(e, "npy header: 'shape' must be a tuple");
            out.ndim = 0;
            while (!eat(&s, ')')) {
                int64_t v = 0;
                int digits = 0;
                skip_ws(&s);
                while (s.p < s.end && *s.p >= '0' && *s.p <= '9') {
                    if (v > (INT64_MAX - 9) / 10)
                        return kv_err_set(e, "npy header: shape dimension "
                                          "too large");
                    v = v * 10 + (*s.p++ - '0');
                    digits++;
                }
                if (s.p < s.end && *s.p == 'L')   /* Python 2 long */
                    s.p++;
                if (!digits)
                    return kv_err_set(e, "npy header: expected a "
                                      "non-negative integer in 'shape', found "
                                      "'%s'", where(&s, at, sizeof at));
                if (out.ndim >= KV_MAX_DIMS)
                    return kv_err_set(e, "npy header: more than %d "
                                      "dimensions", KV_MAX_DIMS);
                out.shape[out.ndim++] = v;
                if (eat(&s, ')'))
                    break;
                if (!eat(&s, ','))
                    return kv_err_set(e, "npy header: expected ',' or ')' "
                                      "in 'shape'");
            }
            have_shape = 1;
        } else {
            return kv_err_set(e, "npy header: unexpected key '%s'", key);
        }
        if (eat(&s, ','))
            continue;
        if (eat(&s, '}'))
            break;
        return kv_err_set(e, "npy header: expected ',' or '}' after '%s'",
                          key);
    }
    skip_ws(&s);
    if (s.p != s.end)
        return kv_err_set(e, "npy header: unexpected text after the dict");
    if (!have_descr || !have_order || !have_shape)
        return kv_err_set(e, "npy header: missing key '%s'",
                          !have_descr ? "descr" :
                          !have_order ? "fortran_order" : "shape");

    /* descr: byte order + code */
    {
        char bo = descr[0];
        const char *code = descr + 1;
        int found = 0;
        if (bo == '>')
            return kv_err_set(e, "npy header: big-endian dtype '%s' is not "
                              "supported (use '<')", descr);
        if (bo != '<' && bo != '|' && bo != '=')
            return kv_err_set(e, "npy header: unsupported dtype '%s'", descr);
        for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
            if (strcmp(code, codes[i].code) == 0) {
                out.dtype = codes[i].t;
                found = 1;
            }
        if (!found) {
            if (code[0] == 'O')
                return kv_err_set(e, "npy header: object arrays are not "
                                  "supported");
            return kv_err_set(e, "npy header: unsupported dtype '%s'", descr);
        }
    }
    if (kv_shape_check(out.ndim, out.shape, out.dtype, max_bytes, &out.nbytes,
                       e) < 0)
        return kv_err_prefix(e, "npy header");
    *h = out;
    return 0;
}

static int read_exact(FILE *f, void *buf, size_t n, size_t *got)
{
    *got = fread(buf, 1, n, f);
    return *got == n ? 0 : -1;
}

int kv_npy_read_header(FILE *f, size_t max_bytes, struct kv_npy_header *h,
                       struct kv_err *e)
{
    unsigned char pre[12];
    size_t got, hlen, lensz;
    char *text;
    int rc;

    if (read_exact(f, pre, 8, &got) < 0) {
        if (ferror(f))
            return kv_err_set(e, "read error: %s", strerror(errno));
        if (got == 0)
            return 1;
        return kv_err_set(e, "not a .npy stream: %zu bytes where the 8-byte "
                          "magic and version were expected", got);
    }
    if (memcmp(pre, NPY_MAGIC, 6) != 0)
        return kv_err_set(e, "not a .npy stream: bad magic (expected "
                          "\\x93NUMPY)");
    if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)
        return kv_err_set(e, "unsupported .npy version %u.%u (1.0, 2.0 and "
                          "3.0 are read)", pre[6], pre[7]);
    lensz = pre[6] == 1 ? 2 : 4;
    if (read_exact(f, pre + 8, lensz, &got) < 0)
        return kv_err_set(e, "truncated .npy header length");
    hlen = pre[8] | (size_t)pre[9] << 8;
    if (lensz == 4)
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    if (hlen == 0 || hlen > NPY_MAX_HEADER)
        return kv_err_set(e, "npy header length %zu out of range (1 to %u)",
                          hlen, NPY_MAX_HEADER);
    text = malloc(hlen);
    if (!text)
        return kv_err_set(e, "out of memory");
    if (read_exact(f, text, hlen, &got) < 0) {
        free(text);
        return kv_err_set(e, "truncated .npy header: %zu bytes announced, "
                          "%zu read", hlen, got);
    }
    rc = kv_npy_parse_dict(text, hlen, max_bytes, h, e);
    free(text);
    return rc;
}

int kv_npy_read(FILE *f, size_t max_bytes, struct kv_tensor *t,
                struct kv_err *e)
{
    struct kv_npy_header h;
    struct kv_tensor tmp;
    char s[256];
    size_t got = 0;
    int rc;

    rc = kv_npy_read_header(f, max_bytes, &h, e);
    if (rc != 0)
        return rc;
    kv_tensor_init(&tmp);
    if (kv_tensor_alloc(&tmp, h.dtype, h.ndim, h.shape, max_bytes, e) < 0)
        return -1;
    if (h.nbytes && read_exact(f, tmp.data, h.nbytes, &got) < 0) {
        kv_tensor_release(&tmp);
        if (ferror(f))
            return kv_err_set(e, "read error: %s", strerror(errno));
        return kv_err_set(e, "truncated data: shape %s of %s needs %zu "
                          "bytes, found %zu",
                          kv_shape_str(h.ndim, h.shape, s, sizeof s),
                          kv_dtype_name(h.dtype), h.nbytes, got);
    }
    kv_tensor_move(t, &tmp);
    return 0;
}

int kv_npy_read_one(FILE *f, size_t max_bytes, struct kv_tensor *t,
                    struct kv_err *e)
{
    struct kv_tensor tmp;
    unsigned char more[6];
    size_t n;
    int rc;

    kv_tensor_init(&tmp);
    rc = kv_npy_read(f, max_bytes, &tmp, e);
    if (rc != 0)
        return rc;
    n = fread(more, 1, sizeof more, f);
    if (n == 0 && ferror(f)) {
        kv_tensor_release(&tmp);
        return kv_err_set(e, "read error: %s", strerror(errno));
    }
    if (n > 0) {
        size_t nbytes = tmp.nbytes;
        kv_tensor_release(&tmp);
        if (n == sizeof more && memcmp(more, NPY_MAGIC, 6) == 0)
            return kv_err_set(e, "more than one array where one was "
                              "expected (a stream of several arrays)");
        return kv_err_set(e, "extra data after the array (the header "
                          "announces %zu data bytes)", nbytes);
    }
    kv_tensor_move(t, &tmp);
    return 0;
}

int kv_npy_load(const char *path, size_t max_bytes, struct kv_tensor *t,
                struct kv_err *e)
{
    const char *name = (!path || strcmp(path, "-") == 0) ? "<stdin>" : path;
    FILE *f;
    int rc;

    if (!path || strcmp(path, "-") == 0) {
        f = stdin;
    } else {
        f = fopen(path, "rb");
        if (!f)
            return kv_err_set(e, "cannot open '%s': %s", path,
                              strerror(errno));
    }
    rc = kv_npy_read_one(f, max_bytes, t, e);
    if (f != stdin)
        fclose(f);
    if (rc == 1)
        return kv_err_set(e, "'%s': empty input, expected a .npy array",
                          name);
    if (rc < 0)
        return kv_err_prefix(e, "'%s'", name);
    return 0;
}

int kv_write_all(FILE *f, const void *buf, size_t n, struct kv_err *e)
{
    if (n && fwrite(buf, 1, n, f) != n)
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

int kv_npy_write_header(FILE *f, enum kv_dtype dtype, int ndim,
                        const int64_t *shape, struct kv_err *e)
{
    char dict[64 + 24 * KV_MAX_DIMS], buf[sizeof dict + 80];
    const char *descr = descr_of(dtype);
    size_t n, total, pad, nbytes;
    int k;

    if (!descr)
        return kv_err_set(e, "cannot write dtype %s", kv_dtype_name(dtype));
    if (kv_shape_check(ndim, shape, dtype, 0, &nbytes, e) < 0)
        return -1;
    k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                 "'shape': (", descr);
    n = (size_t)k;
    for (int i = 0; i < ndim; i++) {
        k = snprintf(dict + n, sizeof dict - n, "%s%" PRId64,
                     i ? ", " : "", shape[i]);
        n += (size_t)k;
    }
    k = snprintf(dict + n, sizeof dict - n, "%s), }", ndim == 1 ? "," : "");
    n += (size_t)k;
    /* 10 bytes of preamble + dict + padding + '\n', a multiple of 64 */
    total = 10 + n + 1;
    pad = (64 - total % 64) % 64;
    memcpy(buf, NPY_MAGIC, 6);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)((n + pad + 1) & 0xff);
    buf[9] = (char)((n + pad + 1) >> 8);
    memcpy(buf + 10, dict, n);
    memset(buf + 10 + n, ' ', pad);
    buf[10 + n + pad] = '\n';
    return kv_write_all(f, buf, total + pad, e);
}

int kv_npy_write(FILE *f, const struct kv_tensor *t, struct kv_err *e)
{
    if (kv_npy_write_header(f, t->dtype, t->ndim, t->shape, e) < 0)
        return -1;
    return kv_write_all(f, t->data, t->nbytes, e);
}

int kv_npy_file_open(const char *path, size_t max_bytes, struct kv_npy_file *nf)
{
    struct kv_err e = {{0}};
    struct stat st;
    memset(nf, 0, sizeof *nf);
    if (!path || strcmp(path, "-") == 0)
        return -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    long off;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) ||
        kv_npy_read_header(f, max_bytes, &nf->h, &e) != 0 || (off = ftell(f)) < 0 ||
        (uint64_t)off + nf->h.nbytes != (uint64_t)st.st_size) {
        fclose(f);
        memset(nf, 0, sizeof *nf);
        return -1;
    }
    nf->f = f;
    nf->data_off = (uint64_t)off;
    return 0;
}

void kv_npy_file_close(struct kv_npy_file *nf)
{
    if (nf->f)
        fclose(nf->f);
    memset(nf, 0, sizeof *nf);
}

/* n bytes at offset off of fd into buf; 0, or -1 with e at a read error
 * or an early end. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off, struct kv_err *e)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return kv_err_set(e, "read error: %s", strerror(errno));
        if (r == 0)
            return kv_err_set(e, "the file ends at byte %" PRIu64 ", %zu bytes short of the "
                              "rows to read (it shrank while it was read?)", off + done,
                              n - done);
        done += (size_t)r;
    }
    return 0;
}

int kv_npy_file_rows(const struct kv_npy_file *nf, size_t row_bytes, const int64_t *rows,
                     size_t n, void *dst, struct kv_err *e)
{
    const uint64_t n_rows = row_bytes ? nf->h.nbytes / row_bytes : 0;
    for (size_t i = 0, j; i < n; i = j) {
        if (rows[i] < 0 || (uint64_t)rows[i] >= n_rows || (i && rows[i] <= rows[i - 1]))
            return kv_err_set(e, "row %" PRId64 " is not one of the %" PRIu64 " rows in order",
                              rows[i], n_rows);
        for (j = i + 1; j < n && rows[j] == rows[j - 1] + 1 && (uint64_t)rows[j] < n_rows; j++)
            ;
        if (pread_all(fileno(nf->f), (char *)dst + i * row_bytes, (j - i) * row_bytes,
                      nf->data_off + (uint64_t)rows[i] * row_bytes, e))
            return -1;
    }
    return 0;
}
