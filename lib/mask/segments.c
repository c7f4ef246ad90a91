/* segments.c - a prompt's segments from a file (segments.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/cli.h"
#include "core/npy.h"
#include "core/tensor.h"
#include "mask/mask.h"
#include "mask/segments.h"

#define SEG_BYTES (2.0 * (1 + sizeof(int64_t)))

struct segs {
    uint8_t *kinds;
    int64_t *lens;
    size_t n, cap;
};

/* What may follow the segments array seg in a 'kvchunk split' stream: the
 * content keys, one u8 [n, 16] array, and nothing after them. */
static int segment_keys(FILE *f, size_t max_bytes, const struct kv_tensor *seg,
                        struct kv_err *e)
{
    struct kv_tensor k;
    char sh[96];
    int rc;

    kv_tensor_init(&k);
    rc = kv_npy_read(f, max_bytes, &k, e);
    if (rc != 0)
        return rc < 0 ? kv_err_prefix(e, "after the segments") : 0;
    if (k.dtype != KV_U8 || k.ndim != 2 || k.shape[1] != 16 ||
        (seg->ndim >= 1 && k.shape[0] != seg->shape[0])) {
        kv_err_set(e, "after the segments: expected their keys, a u8 array "
                   "of shape (%lld, 16), got %s %s", seg->ndim >= 1 ?
                   (long long)seg->shape[0] : 0LL, kv_dtype_name(k.dtype),
                   kv_shape_str(k.ndim, k.shape, sh, sizeof sh));
        kv_tensor_release(&k);
        return -1;
    }
    kv_tensor_release(&k);
    if (getc(f) != EOF)
        return kv_err_set(e, "extra data after the segments and their keys");
    return 0;
}

/* Room for cap segments in s. */
static int grow(struct segs *s, size_t cap, struct kv_err *e)
{
    uint8_t *nk = realloc(s->kinds, cap ? cap : 1);
    if (nk)
        s->kinds = nk;
    int64_t *nl = realloc(s->lens, (cap ? cap : 1) * sizeof *nl);
    if (nl)
        s->lens = nl;
    if (!nk || !nl)
        return kv_err_set(e, "out of memory");
    s->cap = cap;
    return 0;
}

/* The rows of an integer [n, 3] array (and the keys after it). */
static int read_npy(FILE *f, const char *name, size_t max_bytes,
                    kv_mask_limit_fn over, void *ctx, struct segs *s,
                    struct kv_err *e)
{
    struct kv_tensor t;
    char sh[96];
    int64_t expect = 0;
    int rc;
    kv_tensor_init(&t);
    rc = kv_npy_read(f, max_bytes, &t, e);
    if (rc == 0)    /* then at most the keys, as kvchunk split writes */
        rc = segment_keys(f, max_bytes, &t, e) < 0 ? -1 : 0;
    if (rc != 0) {
        if (rc > 0)
            kv_err_set(e, "'%s': no array in the stream", name);
        else
            kv_err_prefix(e, "'%s'", name);
        kv_tensor_release(&t);
        return -1;
    }
    if (kv_dtype_is_float(t.dtype) || t.dtype == KV_BOOL || t.ndim != 2 ||
        t.shape[1] != 3) {
        kv_err_set(e, "'%s': expected an integer array of shape (n, 3), got "
                   "%s %s", name, kv_dtype_name(t.dtype),
                   kv_shape_str(t.ndim, t.shape, sh, sizeof sh));
        kv_tensor_release(&t);
        return -1;
    }
    size_t n = (size_t)t.shape[0];
    /* a kind and a length per segment, here and in the mask */
    if ((over && over(ctx, (double)n, SEG_BYTES, "the segments", e)) ||
        grow(s, n, e)) {
        kv_tensor_release(&t);
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        int64_t kind = kv_tensor_get_i64(&t, 3 * k);
        int64_t off = kv_tensor_get_i64(&t, 3 * k + 1);
        int64_t len = kv_tensor_get_i64(&t, 3 * k + 2);
        if (kind < 0 || kind > 2) {
            kv_tensor_release(&t);
            return kv_err_set(e, "'%s': row %zu: kind code %lld (expected 0 "
                              "sys, 1 chunk, 2 question)", name, k,
                              (long long)kind);
        }
        if (len < 0 || len > KV_MASK_MAX_LEN || off != expect) {
            kv_tensor_release(&t);
            return kv_err_set(e, "'%s': row %zu: offset %lld length %lld, "
                              "expected offset %lld and a length >= 0 "
                              "(segments are contiguous)", name, k,
                              (long long)off, (long long)len,
                              (long long)expect);
        }
        s->kinds[k] = (uint8_t)kind;
        s->lens[k] = len;
        expect += len;
    }
    s->n = n;
    kv_tensor_release(&t);
    return 0;
}

/* Splits p into at most max whitespace-separated words (in place);
 * returns how many there are, max + 1 when there are more. */
static int split_words(char *p, char **w, int max)
{
    int n = 0;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            return n;
        if (n == max)
            return max + 1;
        w[n++] = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        if (*p)
            *p++ = '\0';
    }
}

/* Word w as a whole integer of at most KV_MASK_MAX_LEN in magnitude
 * (what it says is checked by the caller).  0 or -1. */
static int seg_number(const char *w, const char *name, size_t lineno,
                      const char *what, long long *v, struct kv_err *e)
{
    char *end;
    errno = 0;
    *v = strtoll(w, &end, 10);
    if (end == w || *end || errno == ERANGE || *v > KV_MASK_MAX_LEN ||
        *v < -KV_MASK_MAX_LEN)
        return kv_err_set(e, "'%s': line %zu: %s '%s' is not an integer "
                          "from 0 to %lld", name, lineno, what, w,
                          (long long)KV_MASK_MAX_LEN);
    return 0;
}

/* The text lines "KIND OFFSET LENGTH [KEY]". */
static int read_text(FILE *f, const char *name, kv_mask_limit_fn over,
                     void *ctx, struct segs *s, struct kv_err *e)
{
    char line[4096];
    size_t lineno = 0;
    int64_t expect = 0;
    if (grow(s, 16, e))
        return -1;
    while (fgets(line, sizeof line, f)) {
        char *w[4];
        long long off, len;
        lineno++;
        if (!strchr(line, '\n') && !feof(f))
            return kv_err_set(e, "'%s': line %zu is too long", name, lineno);
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        int got = split_words(p, w, 4);
        int k = got < 1 ? -1 : strcmp(w[0], "sys") == 0 ? 0
              : strcmp(w[0], "chunk") == 0 ? 1
              : strcmp(w[0], "question") == 0 ? 2 : -1;
        if (got < 3 || got > 4 || k < 0)
            return kv_err_set(e, "'%s': line %zu: expected 'KIND OFFSET LENGTH "
                              "[KEY]' with KIND sys, chunk or question", name,
                              lineno);
        if (seg_number(w[1], name, lineno, "offset", &off, e) ||
            seg_number(w[2], name, lineno, "length", &len, e))
            return -1;
        if (len < 0 || len > KV_MASK_MAX_LEN || off != expect)
            return kv_err_set(e, "'%s': line %zu: offset %lld length %lld, "
                              "expected offset %lld and a length >= 0 "
                              "(segments are contiguous)", name, lineno, off,
                              len, (long long)expect);
        if (s->n == s->cap &&
            ((over && over(ctx, (double)(2 * s->cap), SEG_BYTES,
                           "the segments read so far", e)) ||
             grow(s, 2 * s->cap, e)))
            return -1;
        s->kinds[s->n] = (uint8_t)k;
        s->lens[s->n] = len;
        s->n++;
        expect += len;
    }
    if (ferror(f))
        return kv_err_set(e, "'%s': read error", name);
    if (s->n == 0)
        return kv_err_set(e, "'%s': no segments", name);
    return 0;
}

int kv_mask_segments_read(const char *path, size_t max_bytes,
                          kv_mask_limit_fn over, void *ctx, uint8_t **kinds,
                          int64_t **lens, size_t *n_seg, struct kv_err *e)
{
    const char *name = kv_path_name(path, 0);
    struct segs s = {NULL, NULL, 0, 0};
    FILE *f = kv_open_in(path, e);
    int rc;
    if (!f)
        return -1;
    int c = getc(f);
    if (c != EOF)
        ungetc(c, f);
    if (c == 0x93)                          /* .npy magic */
        rc = read_npy(f, name, max_bytes, over, ctx, &s, e);
    else
        rc = read_text(f, name, over, ctx, &s, e);
    kv_close_in(f);
    if (rc) {
        free(s.kinds);
        free(s.lens);
        return -1;
    }
    *kinds = s.kinds;
    *lens = s.lens;
    *n_seg = s.n;
    return 0;
}
