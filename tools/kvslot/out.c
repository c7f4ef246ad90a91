/* kvslot: the writer of named integer arrays, as text, npy or JSON
 * (o->npy == OUT_JSON: each field "name":value written by jansson; the
 * caller writes the braces and the commas between fields). */
#include <jansson.h>
#include "kvslot.h"

/* ---------------------------------------------------------------------- */
/* output: named integer arrays as text or npy                            */

enum { OUT_BUF = 1 << 18 };

int out_init(struct out *o, FILE *f, int npy, enum kv_dtype dtype)
{
    memset(o, 0, sizeof *o);
    o->f = f;
    o->npy = npy;
    o->dtype = dtype;
    o->cap = OUT_BUF;
    o->buf = malloc(o->cap);
    if (!o->buf)
        return kv_err_set(&o->err, "out of memory");
    return 0;
}

void out_release(struct out *o)
{
    free(o->buf);
    o->buf = NULL;
    if (o->held) {
        fclose(o->f);
        o->f = o->held;
        o->held = NULL;
    }
    free(o->mem);
    o->mem = NULL;
}

void out_flush(struct out *o)
{
    if (o->len && !o->failed && kv_write_all(o->f, o->buf, o->len, &o->err))
        o->failed = 1;
    o->len = 0;
}

/* Write into memory until out_unhold, so that an error found while
 * writing (a value over --dtype i32) leaves the real output untouched.
 * For the subcommands whose output is small next to what they compute. */
void out_hold(struct out *o)
{
    FILE *m = open_memstream(&o->mem, &o->mem_len);
    if (!m) {
        kv_err_set(&o->err, "out of memory");
        o->failed = 1;
        return;
    }
    o->held = o->f;
    o->f = m;
}

/* Copy what out_hold kept to the real output, unless writing failed. */
void out_unhold(struct out *o)
{
    FILE *m = o->f;

    if (!o->held)
        return;
    out_flush(o);
    o->f = o->held;
    o->held = NULL;
    if (fclose(m) && !o->failed) {
        kv_err_set(&o->err, "out of memory");
        o->failed = 1;
    }
    if (!o->failed && o->mem_len &&
        kv_write_all(o->f, o->mem, o->mem_len, &o->err))
        o->failed = 1;
    free(o->mem);
    o->mem = NULL;
}

void out_bytes(struct out *o, const char *s, size_t n)
{
    if (o->len + n > o->cap)
        out_flush(o);
    if (n > o->cap) {
        if (!o->failed && kv_write_all(o->f, s, n, &o->err))
            o->failed = 1;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

/* Append " v" (or "v" when first) in decimal to the text buffer. */
static void out_num(struct out *o, int64_t v, int space)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

    if (o->len + 24 > o->cap)
        out_flush(o);
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (space)
        o->buf[o->len++] = ' ';
    if (v < 0)
        o->buf[o->len++] = '-';
    while (n > 0)
        o->buf[o->len++] = tmp[--n];
}

/* Whether v fits the int32 of --dtype i32; if not, the output fails with
 * a message naming the field and the value (the subcommands check their
 * bounds before writing; this is the last guard against truncation). */
static int fits_i32(struct out *o, const char *name, int64_t v)
{
    if (v >= INT32_MIN && v <= INT32_MAX)
        return 1;
    kv_err_set(&o->err, "--dtype i32: %s holds %lld, over 32 bits; use "
               "--dtype i64", name ? name : "a field", (long long)v);
    o->failed = 1;
    return 0;
}

/* "name":value of plan -f json, written by jansson (compact), f freed. */
void out_json_field(struct out *o, const char *name, json_t *f)
{
    json_t *key = json_string(name);
    char *ks = key ? json_dumps(key, JSON_ENCODE_ANY) : NULL;
    char *vs = f ? json_dumps(f, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(key);
    json_decref(f);
    if (!ks || !vs) {
        kv_err_set(&o->err, "out of memory");
        o->failed = 1;
    } else {
        out_bytes(o, ks, strlen(ks));
        out_bytes(o, ":", 1);
        out_bytes(o, vs, strlen(vs));
    }
    free(ks);
    free(vs);
}

/* One field: a scalar (ndim 0), a vector or a matrix of int64 values. */
void emit(struct out *o, const char *name, int ndim,
          const int64_t *shape, const int64_t *v)
{
    size_t rows = ndim == 2 ? (size_t)shape[0] : 1;
    size_t cols = ndim == 0 ? 1 : (size_t)shape[ndim - 1];
    size_t total = rows * cols;

    if (o->failed)
        return;
    if (o->npy == OUT_JSON) {
        /* the field as jansson writes it: a number, an array, or an array
         * of rows */
        json_t *f = ndim == 0 ? json_integer(v[0]) : json_array();
        for (size_t r = 0; ndim && r < rows; r++) {
            json_t *row = ndim == 2 ? json_array() : f;
            for (size_t c = 0; c < cols; c++)
                json_array_append_new(row, json_integer(v[r * cols + c]));
            if (ndim == 2)
                json_array_append_new(f, row);
        }
        out_json_field(o, name, f);
        return;
    }
    if (!o->npy) {
        size_t nl = strlen(name);
        for (size_t r = 0; r < rows; r++) {
            out_bytes(o, name, nl);
            out_bytes(o, ":", 1);
            for (size_t c = 0; c < cols; c++)
                out_num(o, v[r * cols + c], 1);
            out_bytes(o, "\n", 1);
        }
        return;
    }
    out_flush(o);
    if (o->failed ||
        kv_npy_write_header(o->f, o->dtype, ndim, shape, &o->err)) {
        o->failed = 1;
        return;
    }
    if (o->dtype == KV_I64) {
        if (total && kv_write_all(o->f, v, total * sizeof *v, &o->err))
            o->failed = 1;
        return;
    }
    for (size_t at = 0; at < total;) {
        size_t n = total - at < o->cap / 4 ? total - at : o->cap / 4;
        int32_t *d = (int32_t *)(void *)o->buf;
        for (size_t j = 0; j < n; j++) {
            if (!fits_i32(o, name, v[at + j]))
                return;
            d[j] = (int32_t)v[at + j];
        }
        if (kv_write_all(o->f, d, n * 4, &o->err)) {
            o->failed = 1;
            return;
        }
        at += n;
    }
}

void emit_scalar(struct out *o, const char *name, int64_t v)
{
    emit(o, name, 0, NULL, &v);
}

void emit_vec(struct out *o, const char *name, const int64_t *v,
              size_t n)
{
    int64_t shape[1] = { (int64_t)n };
    emit(o, name, 1, shape, v);
}

void emit_mat(struct out *o, const char *name, const int64_t *v,
              size_t rows, size_t cols)
{
    int64_t shape[2] = { (int64_t)rows, (int64_t)cols };
    emit(o, name, 2, shape, v);
}

enum { TOK_CHUNK = 4096 };

static void tok_put(struct out *o, const int64_t *v, size_t n)
{
    if (o->failed)
        return;
    if (!o->npy) {
        for (size_t j = 0; j < n; j++)
            out_num(o, v[j], 1);
        return;
    }
    if (o->dtype == KV_I64) {
        out_bytes(o, (const char *)v, n * sizeof *v);
        return;
    }
    for (size_t j = 0; j < n; j++) {
        int32_t x = (int32_t)v[j];
        if (!fits_i32(o, o->field, v[j]))
            return;
        if (o->len + 4 > o->cap)
            out_flush(o);
        memcpy(o->buf + o->len, &x, 4);
        o->len += 4;
    }
}

void emit_tokens(struct out *o, const char *name,
                 const struct tokfield *tf)
{
    int64_t chunk[TOK_CHUNK];
    int64_t shape[2] = { (int64_t)tf->n_ranks, (int64_t)tf->row_len };
    struct kv_slot_geom g = *tf->g;
    size_t nl = strlen(name);

    if (o->failed)
        return;
    o->field = name;
    if (o->npy) {
        out_flush(o);
        if (o->failed ||
            kv_npy_write_header(o->f, o->dtype, tf->two_d ? 2 : 1,
                                tf->two_d ? shape : shape + 1, &o->err)) {
            o->failed = 1;
            return;
        }
    }
    for (size_t rank = 0; rank < tf->n_ranks && !o->failed; rank++) {
        size_t done = 0;
        if (tf->two_d)
            g.cp_rank = (int64_t)rank;
        if (!o->npy) {
            out_bytes(o, name, nl);
            out_bytes(o, ":", 1);
        }
        for (size_t r = 0; r < tf->n_reqs; r++) {
            int64_t c = tf->comp ? tf->comp[r] : 0;
            for (int64_t j = 0; j < tf->sched[r]; j += TOK_CHUNK) {
                int64_t n = tf->sched[r] - j < TOK_CHUNK ? tf->sched[r] - j
                                                         : TOK_CHUNK;
                (void)kv_slot_fill(&g, tf->t, r, c + j, n, tf->f, chunk);
                tok_put(o, chunk, (size_t)n);
                done += (size_t)n;
            }
        }
        for (size_t j = 0; j < TOK_CHUNK; j++)
            chunk[j] = KV_SLOT_PAD;
        while (done < tf->row_len) {
            size_t n = tf->row_len - done < TOK_CHUNK ? tf->row_len - done
                                                      : TOK_CHUNK;
            tok_put(o, chunk, n);
            done += n;
        }
        if (!o->npy)
            out_bytes(o, "\n", 1);
    }
}
