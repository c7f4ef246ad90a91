/* kvmask chunk --segments: the segments of a prompt, as text or as
 * kvchunk split's .npy stream. */
#include "kvmask.h"

/* --segments FILE: text lines "KIND OFFSET LENGTH [KEY]" (KIND sys, chunk
 * or question; '#' starts a comment) or an integer .npy [n, 3] of
 * kind code (0 sys, 1 chunk, 2 question), offset, length.  Segments must
 * be contiguous from offset 0. */
/* What may follow the segments array seg in a 'kvchunk split' stream: the
 * content keys, one u8 [n, 16] array, and nothing after them. */
static int segment_keys(FILE *f, size_t max_mem, const struct kv_tensor *seg,
                        struct kv_err *e)
{
    struct kv_tensor k;
    char sh[96];
    int rc;

    kv_tensor_init(&k);
    rc = kv_npy_read(f, max_mem, &k, e);
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

int read_segments(struct opts *o, const char *path, struct kv_err *e)
{
    const char *name = kv_path_name(path, 0);
    size_t cap = 16, n = 0;
    int64_t expect = 0;
    FILE *f = kv_open_in(path, e);
    if (!f)
        return -1;
    int c = getc(f);
    if (c == 0x93) {                        /* .npy magic */
        struct kv_tensor t;
        int rc;
        ungetc(c, f);
        kv_tensor_init(&t);
        rc = kv_npy_read(f, o->max_mem, &t, e);
        if (rc == 0)    /* then at most the keys, as kvchunk split writes */
            rc = segment_keys(f, o->max_mem, &t, e) < 0 ? -1 : 0;
        kv_close_in(f);
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
            char sh[96];
            kv_err_set(e, "'%s': expected an integer array of shape (n, 3), "
                       "got %s %s", name, kv_dtype_name(t.dtype),
                       kv_shape_str(t.ndim, t.shape, sh, sizeof sh));
            kv_tensor_release(&t);
            return -1;
        }
        n = (size_t)t.shape[0];
        /* a kind and a length per segment, here and in the mask */
        if (rows_over(o, (double)n, 2 * (1 + sizeof(int64_t)), "the segments",
                      e)) {
            kv_tensor_release(&t);
            return -1;
        }
        o->seg_kinds = malloc(n ? n : 1);
        o->seg_lens = malloc((n ? n : 1) * sizeof *o->seg_lens);
        if (!o->seg_kinds || !o->seg_lens) {
            kv_tensor_release(&t);
            return kv_err_set(e, "out of memory");
        }
        for (size_t k = 0; k < n; k++) {
            int64_t kind = kv_tensor_get_i64(&t, 3 * k);
            int64_t off = kv_tensor_get_i64(&t, 3 * k + 1);
            int64_t len = kv_tensor_get_i64(&t, 3 * k + 2);
            if (kind < 0 || kind > 2) {
                kv_tensor_release(&t);
                return kv_err_set(e, "'%s': row %zu: kind code %lld (expected "
                                  "0 sys, 1 chunk, 2 question)", name, k,
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
            o->seg_kinds[k] = (uint8_t)kind;
            o->seg_lens[k] = len;
            expect += len;
        }
        kv_tensor_release(&t);
        o->spec.seg_kinds = o->seg_kinds;
        o->spec.seg_lens = o->seg_lens;
        o->spec.n_seg = n;
        return 0;
    }
    if (c != EOF)
        ungetc(c, f);
    o->seg_kinds = malloc(cap);
    o->seg_lens = malloc(cap * sizeof *o->seg_lens);
    if (!o->seg_kinds || !o->seg_lens) {
        kv_close_in(f);
        return kv_err_set(e, "out of memory");
    }
    char line[4096];
    size_t lineno = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[32], key[1024], extra[8];
        long long off, len;
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            kv_close_in(f);
            return kv_err_set(e, "'%s': line %zu is too long", name, lineno);
        }
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        int got = sscanf(p, "%31s %lld %lld %1023s %7s", kind, &off, &len, key,
                         extra);
        int k = strcmp(kind, "sys") == 0 ? 0 : strcmp(kind, "chunk") == 0 ? 1
              : strcmp(kind, "question") == 0 ? 2 : -1;
        if (got < 3 || got > 4 || k < 0) {
            kv_close_in(f);
            return kv_err_set(e, "'%s': line %zu: expected 'KIND OFFSET LENGTH "
                              "[KEY]' with KIND sys, chunk or question", name,
                              lineno);
        }
        if (len < 0 || len > KV_MASK_MAX_LEN || off != expect) {
            kv_close_in(f);
            return kv_err_set(e, "'%s': line %zu: offset %lld length %lld, "
                              "expected offset %lld and a length >= 0 "
                              "(segments are contiguous)", name, lineno, off,
                              len, (long long)expect);
        }
        if (n == cap) {
            cap *= 2;
            if (rows_over(o, (double)cap, 2 * (1 + sizeof(int64_t)),
                          "the segments read so far", e)) {
                kv_close_in(f);
                return -1;
            }
            uint8_t *nk = realloc(o->seg_kinds, cap);
            if (nk)
                o->seg_kinds = nk;
            int64_t *nl = realloc(o->seg_lens, cap * sizeof *nl);
            if (nl)
                o->seg_lens = nl;
            if (!nk || !nl) {
                kv_close_in(f);
                return kv_err_set(e, "out of memory");
            }
        }
        o->seg_kinds[n] = (uint8_t)k;
        o->seg_lens[n] = len;
        n++;
        expect += len;
    }
    int bad = ferror(f);
    kv_close_in(f);
    if (bad)
        return kv_err_set(e, "'%s': read error", name);
    if (n == 0)
        return kv_err_set(e, "'%s': no segments", name);
    o->spec.seg_kinds = o->seg_kinds;
    o->spec.seg_lens = o->seg_lens;
    o->spec.n_seg = n;
    return 0;
}
