/* kvxattn - XAttention sparse block selection (see man 1 kvxattn).
 *
 *   kvxattn estimate -q Q -k K [options]   the block mask (and block sums)
 *   kvxattn recall -q Q -k K --mask M      exact mass the kept blocks cover
 *
 * Thin: options -> lib/attn/xattn.c -> output. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <argtable2.h>
#include "core/kv.h"
#include "core/blas.h"
#include "mask/blockmask.h"
#include "attn/bf16.h"
#include "attn/xattn.h"

enum { FMT_AUTO, FMT_NPY, FMT_TEXT, FMT_PGM, FMT_STATS, FMT_BLOCK,
       FMT_ROWS };

struct opts {
    const char *qpath, *kpath, *mpath;
    const char *out, *sums, *per_block, *thr_file;
    int thd, fmt, force, verbose, quiet, text;
    int64_t layer;
    double threshold;
    struct kv_xattn_opts x;
};

/* ---- inputs ------------------------------------------------------------ */

/* An input tensor, read into memory or mapped from its file. */
struct input {
    struct kv_tensor t;
    enum kv_dtype src;  /* the file's dtype (t is f32) */
    void *map;          /* mapping to munmap, or NULL (t owns its data) */
    size_t map_len;
};

static void input_release(struct input *in)
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
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
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

/* Load one of Q/K as f32 [B, H, L, D]; thd [T, H, D] becomes [1, H, T, D]. */
/* Refuse a NaN or infinity in a loaded Q or K ([B, H, L, D] f32): the
 * scores, the softmax and so the selection would be meaningless.  Names
 * the first one by its index in the file's own layout. */
/* The scan runs in chunks on the -j workers, each chunk a branch-free
 * test of the exponent bits that the compiler vectorises; only a chunk
 * that holds a bad value is searched element by element for the first. */
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
    uint32_t top = 0;   /* the largest exponent field seen */
    size_t i = i0;

    if (i1 > f->n)
        i1 = f->n;
    if (f->h) {                 /* bf16: the exponent field is 0x7f80 */
        uint16_t top16 = 0;
        for (; i + 64 <= i1; i += 64) {
            uint16_t b[64];
            memcpy(b, f->h + i, sizeof(b));
            for (int j = 0; j < 64; j++) {
                uint16_t x = b[j] & 0x7f80u;
                top16 = x > top16 ? x : top16;
            }
        }
        for (; i < i1; i++) {
            uint16_t x = f->h[i] & 0x7f80u;
            top16 = x > top16 ? x : top16;
        }
        f->bad[c] = top16 == 0x7f80u;
        return;
    }
    /* fixed-length inner loops, which the compiler vectorises at -O2 */
    for (; i + 64 <= i1; i += 64) {
        uint32_t b[64];
        memcpy(b, f->v + i, sizeof(b));
        for (int j = 0; j < 64; j++) {
            uint32_t x = b[j] & 0x7f800000u;
            top = x > top ? x : top;
        }
    }
    for (; i < i1; i++) {
        uint32_t x;
        memcpy(&x, f->v + i, sizeof(x));
        x &= 0x7f800000u;
        top = x > top ? x : top;
    }
    f->bad[c] = top == 0x7f800000u;
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

/* bf16: a bf16 file is mapped and kept bf16 (for the bf16 tiles). */
static int load_qk(const char *path, const char *what, int thd, size_t max,
                   int nthreads, int bf16, struct input *in, struct kv_err *e)
{
    struct kv_tensor raw, f;
    char sbuf[128];
    int rc = -1;

    in->map = NULL;
    in->src = KV_F32;
    kv_tensor_init(&in->t);
    if (!thd && map_f32(path, max, bf16, in)) {
        if (in->t.ndim == 4) {
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
static int read_thresholds(const char *path, int64_t layer, int64_t hq,
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

/* ---- outputs ----------------------------------------------------------- */

static int write_pgm(FILE *f, const struct kv_tensor *m, struct kv_err *e)
{
    int64_t w = m->shape[3];
    int64_t h = m->shape[0] * m->shape[1] * m->shape[2];
    const uint8_t *src = m->data;

    fprintf(f, "P5\n%lld %lld\n255\n", (long long)w, (long long)h);
    for (size_t i = 0; i < m->nbytes; i++)
        putc(src[i] ? 255 : 0, f);
    if (ferror(f))
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

/* Density per (batch, head) and overall. */
static void write_density(FILE *f, const struct kv_tensor *m, int causal,
                          int64_t q_offset, int64_t lq, int64_t block,
                          const char *prefix, const double *rmin,
                          const double *rmean)
{
    int64_t nb = m->shape[0], hq = m->shape[1];
    int64_t nbh = nb * hq, tk = 0, tv = 0;
    int64_t *kept = calloc((size_t)nbh * 2, sizeof(int64_t));

    if (!kept)
        return;
    kv_xattn_density(m->data, nbh, m->shape[2], m->shape[3], causal,
                     q_offset, lq, block, kept, kept + nbh);
    for (int64_t i = 0; i < nbh; i++) {
        tk += kept[i];
        tv += kept[nbh + i];
    }
    fprintf(f, "%sdensity: %.6f\nkept: %lld\nvalid: %lld\n", prefix,
            tv ? (double)tk / (double)tv : 0.0, (long long)tk, (long long)tv);
    for (int64_t i = 0; i < nbh; i++) {
        if (nb > 1)
            fprintf(f, "batch %lld ", (long long)(i / hq));
        fprintf(f, "head %lld:", (long long)(i % hq));
        if (rmin)
            fprintf(f, " recall_min %.6f recall_mean %.6f", rmin[i],
                    rmean[i]);
        fprintf(f, " density %.6f kept %lld valid %lld\n",
                kept[nbh + i] ? (double)kept[i] / (double)kept[nbh + i] : 0.0,
                (long long)kept[i], (long long)kept[nbh + i]);
    }
    free(kept);
}

/* An int32 tensor as kvmask prints a compact array: a "name:" line, then
 * one line per innermost row, the leading dimensions one after another. */
static int write_field(FILE *f, const char *name, const struct kv_tensor *t,
                       struct kv_err *e)
{
    const int32_t *v = t->data;
    int64_t w = t->ndim ? t->shape[t->ndim - 1] : 1;
    size_t n = t->nbytes / sizeof(int32_t);

    fprintf(f, "%s:\n", name);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%d%c", (int)v[i], (int64_t)(i + 1) % w ? ' ' : '\n');
    if (ferror(f))
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

/* FlexAttention BlockMask: the eight int32 tensors built from tile states.
 * A kept block's state follows the attention it stands for: the number of
 * (query, key) pairs inside it that causality allows (query token t at kv
 * position q_offset + t) among its real rows and columns, so the diagonal
 * and edge blocks are partial, the blocks below the diagonal full, and a
 * kept block wholly in the future (--keep-sink) empty. */
static int write_block(FILE *f, const struct kv_tensor *m, int causal,
                       int64_t q_offset, int64_t lq, int64_t lk, int64_t bs,
                       int text, struct kv_err *e)
{
    int64_t nbh = m->shape[0] * m->shape[1], nqb = m->shape[2];
    int64_t nkb = m->shape[3];
    const uint8_t *src = m->data;
    uint8_t *tiles = malloc(m->nbytes ? m->nbytes : 1);
    struct kv_tensor out[KV_BM_NFIELDS];
    int rc = -1;

    if (!tiles)
        return kv_err_set(e, "out of memory");
    for (int i = 0; i < KV_BM_NFIELDS; i++)
        kv_tensor_init(&out[i]);
    for (int64_t qb = 0; qb < nqb; qb++) {
        int64_t rows = (qb + 1) * bs <= lq ? bs : lq - qb * bs;
        for (int64_t kb = 0; kb < nkb; kb++) {
            int64_t cols = (kb + 1) * bs <= lk ? bs : lk - kb * bs;
            uint64_t kept = 0;
            uint8_t st;
            for (int64_t r = 0; r < rows; r++) {
                int64_t c = cols;
                if (causal) {
                    c = q_offset + qb * bs + r - kb * bs + 1;
                    c = c < 0 ? 0 : c > cols ? cols : c;
                }
                kept += (uint64_t)c;
            }
            st = kv_tile_state(kept, rows, cols, bs, bs);
            for (int64_t i = 0; i < nbh; i++) {
                size_t at = (size_t)((i * nqb + qb) * nkb + kb);
                tiles[at] = src[at] ? st : KV_TILE_EMPTY;
            }
        }
    }
    if (kv_blockmask_build(tiles, 2, m->shape, nqb, nkb, out, e) == 0) {
        rc = 0;
        for (int i = 0; i < KV_BM_NFIELDS && rc == 0; i++)
            rc = text ? write_field(f, kv_blockmask_names[i], &out[i], e)
                      : kv_npy_write(f, &out[i], e);
    }
    for (int i = 0; i < KV_BM_NFIELDS; i++)
        kv_tensor_release(&out[i]);
    free(tiles);
    return rc;
}

/* ---- estimate ---------------------------------------------------------- */

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    kv_progress_update(ctx, done, total);
}

static int run_estimate(struct opts *o)
{
    struct input qi, ki;
    struct kv_tensor mask, sums;
    struct kv_xattn_times tm;
    struct kv_progress prog;
    struct kv_out out, sout;
    struct kv_err e;
    double *thr = NULL, t0 = kv_now(), tread;
    int64_t qoff = 0;
    int rc = KV_EXIT_DATA, out_open = 0, sums_open = 0;

    e.msg[0] = 0;
    memset(&qi, 0, sizeof(qi));
    memset(&ki, 0, sizeof(ki));
    kv_tensor_init(&mask);
    kv_tensor_init(&sums);
    if (load_qk(o->qpath, "Q", o->thd, o->x.max_bytes, o->x.nthreads, 1,
                &qi, &e) ||
        load_qk(o->kpath, "K", o->thd, o->x.max_bytes, o->x.nthreads, 1,
                &ki, &e))
        goto fail;
    if (o->thr_file) {
        if (qi.t.shape[1] < 1) {
            kv_err_set(&e, "Q has no heads");
            goto fail;
        }
        if (read_thresholds(o->thr_file, o->layer, qi.t.shape[1],
                            o->x.max_bytes, &thr, &e))
            goto fail;
    } else {
        thr = malloc((size_t)(qi.t.shape[1] > 0 ? qi.t.shape[1] : 1) *
                     sizeof(double));
        if (!thr) {
            kv_err_set(&e, "out of memory");
            goto fail;
        }
        for (int64_t h = 0; h < qi.t.shape[1]; h++)
            thr[h] = o->threshold;
    }
    o->x.thresholds = thr;
    if (kv_xattn_check(&o->x, qi.t.shape, ki.t.shape, &qoff, &e))
        goto fail;
    tread = kv_now() - t0;
    kv_progress_start(&prog, "estimate", o->quiet);
    o->x.progress = on_progress;
    o->x.progress_ctx = &prog;
    /* bf16 Q and K: the strided GEMM on the CPU's bf16 dot product */
    if (qi.src == KV_BF16 && ki.src == KV_BF16)
        o->x.bf16_route = (int)kv_bf16_route_best();
    rc = kv_xattn_estimate(&qi.t, &ki.t, &o->x, &mask, o->sums ? &sums : NULL,
                           &tm, &e);
    kv_progress_end(&prog);
    if (rc)
        goto fail;

    /* the sums file first, complete, then the main output */
    if (o->sums) {
        if (kv_out_open(&sout, o->sums, &e))
            goto fail;
        sums_open = 1;
        if (kv_npy_write(sout.f, &sums, &e))
            goto fail;
        sums_open = 0;
        if (kv_out_commit(&sout, &e))
            goto fail;
    }
    if (kv_out_open(&out, o->out, &e))
        goto fail;
    out_open = 1;
    switch (o->fmt) {
    case FMT_NPY:
        if (kv_npy_write(out.f, &mask, &e))
            goto fail;
        break;
    case FMT_TEXT:
        if (kv_text_write(out.f, &mask, &e))
            goto fail;
        break;
    case FMT_PGM:
        if (write_pgm(out.f, &mask, &e))
            goto fail;
        break;
    case FMT_BLOCK:
        if (write_block(out.f, &mask, o->x.causal, qoff, qi.t.shape[2],
                        ki.t.shape[2], o->x.block_size, o->text, &e))
            goto fail;
        break;
    case FMT_STATS:
        fprintf(out.f, "shape: %lld %lld %lld %lld\n",
                (long long)mask.shape[0], (long long)mask.shape[1],
                (long long)mask.shape[2], (long long)mask.shape[3]);
        write_density(out.f, &mask, o->x.causal, qoff, qi.t.shape[2],
                      o->x.block_size, "", NULL, NULL);
        /* timings only on request: stats are otherwise the same bytes
         * from run to run and for any -j */
        if (o->verbose)
            fprintf(out.f, "time: total %.6f read %.6f prep %.6f gemm %.6f "
                    "softmax %.6f select %.6f\n", kv_now() - t0, tread,
                    tm.prep, tm.gemm, tm.softmax, tm.select);
        break;
    }
    if (o->verbose)
        fprintf(stderr, "%s: read %.4f s, estimate %.4f s (prep %.4f; thread "
                "seconds: gemm %.4f, softmax+sums %.4f, select %.4f); "
                "gemm %.3f GFLOP, %.2f GFLOP/s per thread\n", kv_progname(),
                tread, tm.total, tm.prep, tm.gemm, tm.softmax, tm.select,
                tm.gemm_flops * 1e-9,
                tm.gemm > 0 ? tm.gemm_flops * 1e-9 / tm.gemm : 0.0);
    out_open = 0;
    if (kv_out_commit(&out, &e))
        goto fail;
    rc = KV_EXIT_OK;
    goto done;
fail:
    if (sums_open)
        kv_out_abort(&sout);
    if (out_open)
        kv_out_abort(&out);
    rc = kv_fail_err(&e);
done:
    free(thr);
    input_release(&qi);
    input_release(&ki);
    kv_tensor_release(&mask);
    kv_tensor_release(&sums);
    if (rc == KV_EXIT_OK)
        return kv_close_stdout();
    return rc;
}

/* ---- recall ------------------------------------------------------------ */

/* Load a block mask for recall as bytes [B, Hq, nqb, nkb]: a dense array
 * (any integer or bool dtype, nonzero = keep; [nqb, nkb], [Hq, nqb, nkb] or
 * [B, Hq, nqb, nkb], broadcast over the missing leading dims) or a
 * FlexAttention BlockMask stream (eight int32 arrays, as kvmask -f block
 * and kvxattn -f block write). */
static int load_mask(const char *path, int64_t nb, int64_t hq, int64_t nqb,
                     int64_t nkb, size_t max, uint8_t **out, struct kv_err *e)
{
    struct kv_tensor t[4];
    FILE *f;
    uint8_t *m;
    int n = 0, r;
    char s1[128];
    const char *name = kv_path_name(path, 0);
    size_t total = (size_t)(nb * hq * nqb * nkb);

    f = kv_open_in(path, e);
    if (!f)
        return -1;
    for (int i = 0; i < 4; i++)
        kv_tensor_init(&t[i]);
    while (n < 4 && (r = kv_npy_read(f, max, &t[n], e)) == 0)
        n++;
    kv_close_in(f);
    if (n == 0) {
        if (!e->msg[0] || r == 1)
            kv_err_set(e, "no array");
        return kv_err_prefix(e, "mask '%s'", name);
    }
    m = calloc(total ? total : 1, 1);
    if (!m) {
        for (int i = 0; i < 4; i++)
            kv_tensor_release(&t[i]);
        return kv_err_set(e, "out of memory");
    }
    if (n == 4 && t[0].dtype == KV_I32 && t[1].dtype == KV_I32 &&
        t[0].ndim == 3 && t[1].ndim == 4) {
        /* BlockMask: kv_num_blocks, kv_indices, full_kv_num_blocks,
         * full_kv_indices; heads/batch of size 1 broadcast */
        for (int part = 0; part < 2; part++) {
            const struct kv_tensor *cnt = &t[2 * part], *idx = &t[2 * part + 1];
            if (cnt->ndim != 3 || idx->ndim != 4 || cnt->dtype != KV_I32 ||
                idx->dtype != KV_I32 || cnt->shape[2] != nqb ||
                idx->shape[2] != nqb || idx->shape[3] != nkb ||
                (cnt->shape[0] != nb && cnt->shape[0] != 1) ||
                (cnt->shape[1] != hq && cnt->shape[1] != 1) ||
                idx->shape[0] != cnt->shape[0] ||
                idx->shape[1] != cnt->shape[1]) {
                kv_err_set(e, "mask '%s': BlockMask indices of shape %s do "
                           "not fit [%lld, %lld, %lld, %lld] (batch, query "
                           "heads, query blocks, key blocks; batch and heads "
                           "may be 1)", name,
                           kv_shape_str(idx->ndim, idx->shape, s1, sizeof(s1)),
                           (long long)nb, (long long)hq, (long long)nqb,
                           (long long)nkb);
                goto bad;
            }
            for (int64_t b = 0; b < nb; b++)
                for (int64_t h = 0; h < hq; h++)
                    for (int64_t qb = 0; qb < nqb; qb++) {
                        int64_t cb = cnt->shape[0] == 1 ? 0 : b;
                        int64_t ch = cnt->shape[1] == 1 ? 0 : h;
                        int64_t crow = (cb * cnt->shape[1] + ch) * nqb + qb;
                        int32_t c = ((const int32_t *)cnt->data)[crow];
                        const int32_t *ix = (const int32_t *)idx->data +
                                            crow * idx->shape[3];
                        if (c < 0 || c > idx->shape[3]) {
                            kv_err_set(e, "mask '%s': block count %d out of "
                                       "range", name, (int)c);
                            goto bad;
                        }
                        for (int32_t j = 0; j < c; j++) {
                            if (ix[j] < 0 || ix[j] >= nkb) {
                                kv_err_set(e, "mask '%s': block index %d "
                                           "outside 0..%lld", name, (int)ix[j],
                                           (long long)nkb - 1);
                                goto bad;
                            }
                            m[((b * hq + h) * nqb + qb) * nkb + ix[j]] = 1;
                        }
                    }
        }
    } else {
        const struct kv_tensor *d = &t[0];
        int64_t db = 1, dh = 1;
        if (n > 1) {
            kv_err_set(e, "mask '%s': holds %d arrays; expected one dense "
                       "block mask or a BlockMask of eight", name, n);
            goto bad;
        }
        if (d->ndim == 4) {
            db = d->shape[0];
            dh = d->shape[1];
        } else if (d->ndim == 3) {
            dh = d->shape[0];
        }
        if (d->ndim < 2 || d->ndim > 4 || d->shape[d->ndim - 2] != nqb ||
            d->shape[d->ndim - 1] != nkb || (db != 1 && db != nb) ||
            (dh != 1 && dh != hq)) {
            kv_err_set(e, "mask '%s': shape %s does not fit [%lld, %lld, "
                       "%lld, %lld] (batch, query heads, query blocks, key "
                       "blocks)", name,
                       kv_shape_str(d->ndim, d->shape, s1, sizeof(s1)),
                       (long long)nb, (long long)hq, (long long)nqb,
                       (long long)nkb);
            goto bad;
        }
        if (kv_dtype_is_float(d->dtype)) {
            /* 0/1 floats are a keep mask; anything else (-inf of an
             * additive mask, where 0 means keep) would read inverted */
            size_t n_el = (size_t)(db * dh * nqb * nkb);
            for (size_t i = 0; i < n_el; i++) {
                double x = kv_tensor_get_f64(d, i);
                if (x != 0.0 && x != 1.0) {
                    kv_err_set(e, "mask '%s': a float block mask must hold "
                               "only 0 and 1 (1 = keep), found %g; an "
                               "additive mask (0 = keep) reads inverted",
                               name, x);
                    goto bad;
                }
            }
        }
        for (int64_t b = 0; b < nb; b++)
            for (int64_t h = 0; h < hq; h++)
                for (int64_t i = 0; i < nqb * nkb; i++) {
                    size_t src = (size_t)((((db == 1 ? 0 : b) * dh +
                                            (dh == 1 ? 0 : h)) * nqb * nkb) + i);
                    m[(b * hq + h) * nqb * nkb + i] =
                        kv_tensor_get_f64(d, src) != 0.0;
                }
    }
    for (int i = 0; i < 4; i++)
        kv_tensor_release(&t[i]);
    *out = m;
    return 0;
bad:
    free(m);
    for (int i = 0; i < 4; i++)
        kv_tensor_release(&t[i]);
    return -1;
}

static int run_recall(struct opts *o)
{
    struct input qi, ki;
    struct kv_tensor rr, bm, mt;
    struct kv_out out, bout;
    struct kv_progress prog;
    struct kv_err e;
    uint8_t *keep = NULL;
    double *rmin = NULL, *rmean = NULL, t0 = kv_now(), tread, twork;
    int64_t qoff, nb, hq, lq, nqb, nkb;
    int rc = KV_EXIT_DATA, out_open = 0, b_open = 0;

    e.msg[0] = 0;
    memset(&qi, 0, sizeof(qi));
    memset(&ki, 0, sizeof(ki));
    kv_tensor_init(&rr);
    kv_tensor_init(&bm);
    kv_tensor_init(&mt);
    if (load_qk(o->qpath, "Q", o->thd, o->x.max_bytes, o->x.nthreads, 0,
                &qi, &e) ||
        load_qk(o->kpath, "K", o->thd, o->x.max_bytes, o->x.nthreads, 0,
                &ki, &e))
        goto fail;
    nb = qi.t.shape[0];
    hq = qi.t.shape[1];
    lq = qi.t.shape[2];
    nqb = (lq + o->x.block_size - 1) / o->x.block_size;
    nkb = (ki.t.shape[2] + o->x.block_size - 1) / o->x.block_size;
    if (nb != ki.t.shape[0] || qi.t.shape[3] != ki.t.shape[3] || ki.t.shape[1] < 1 ||
        hq % ki.t.shape[1] != 0) {
        int64_t dummy;
        o->x.stride = 1;
        if (kv_xattn_check(&o->x, qi.t.shape, ki.t.shape, &dummy, &e) == 0)
            kv_err_set(&e, "Q and K do not fit");
        goto fail;
    }
    if (load_mask(o->mpath, nb, hq, nqb, nkb, o->x.max_bytes, &keep, &e))
        goto fail;
    tread = kv_now() - t0;
    kv_progress_start(&prog, "recall", o->quiet);
    o->x.progress = on_progress;
    o->x.progress_ctx = &prog;
    if (qi.src == KV_BF16 && ki.src == KV_BF16)
        o->x.bf16_route = (int)kv_bf16_route_best();
    rc = kv_xattn_recall(&qi.t, &ki.t, keep, &o->x, &rr,
                         o->per_block ? &bm : NULL, &e);
    kv_progress_end(&prog);
    if (rc)
        goto fail;
    twork = kv_now() - t0 - tread;
    qoff = o->x.q_offset >= 0 ? o->x.q_offset : ki.t.shape[2] - lq;
    if (qoff < 0)
        qoff = 0;
    rmin = malloc((size_t)(nb * hq) * 2 * sizeof(double));
    if (!rmin) {
        kv_err_set(&e, "out of memory");
        goto fail;
    }
    rmean = rmin + nb * hq;
    for (int64_t i = 0; i < nb * hq; i++) {
        const double *r = (const double *)rr.data + i * lq;
        double mn = INFINITY, sm = 0.0;
        for (int64_t t = 0; t < lq; t++) {
            if (r[t] < mn)
                mn = r[t];
            sm += r[t];
        }
        rmin[i] = mn;
        rmean[i] = sm / (double)lq;
    }
    if (o->per_block) {
        if (kv_out_open(&bout, o->per_block, &e))
            goto fail;
        b_open = 1;
        if (kv_npy_write(bout.f, &bm, &e))
            goto fail;
        b_open = 0;
        if (kv_out_commit(&bout, &e))
            goto fail;
    }
    if (kv_tensor_alloc(&mt, KV_BOOL, 4, (int64_t[4]){nb, hq, nqb, nkb}, 0,
                        &e))
        goto fail;
    memcpy(mt.data, keep, mt.nbytes);
    if (kv_out_open(&out, o->out, &e))
        goto fail;
    out_open = 1;
    if (o->fmt == FMT_NPY) {
        if (kv_npy_write(out.f, &rr, &e))
            goto fail;
    } else if (o->fmt == FMT_ROWS) {
        if (kv_text_write(out.f, &rr, &e))
            goto fail;
    } else {
        double mn = INFINITY, sm = 0.0;
        for (int64_t i = 0; i < nb * hq; i++) {
            if (rmin[i] < mn)
                mn = rmin[i];
            sm += rmean[i];
        }
        fprintf(out.f, "recall_min: %.6f\nrecall_mean: %.6f\n", mn,
                sm / (double)(nb * hq));
        write_density(out.f, &mt, o->x.causal, qoff, lq, o->x.block_size, "",
                      rmin, rmean);
    }
    if (o->verbose)
        fprintf(stderr, "%s: read %.4f s, recall %.4f s (%lld x %lld query "
                "rows against %lld keys)\n", kv_progname(), tread, twork,
                (long long)(nb * hq), (long long)lq,
                (long long)ki.t.shape[2]);
    out_open = 0;
    if (kv_out_commit(&out, &e))
        goto fail;
    rc = KV_EXIT_OK;
    goto done;
fail:
    if (b_open)
        kv_out_abort(&bout);
    if (out_open)
        kv_out_abort(&out);
    rc = kv_fail_err(&e);
done:
    free(keep);
    free(rmin);
    input_release(&qi);
    input_release(&ki);
    kv_tensor_release(&rr);
    kv_tensor_release(&bm);
    kv_tensor_release(&mt);
    if (rc == KV_EXIT_OK)
        return kv_close_stdout();
    return rc;
}

/* ---- option parsing ---------------------------------------------------- */

static int parse_format(const char *s, int recall, int *fmt)
{
    static const char *names[] = {"npy", "text", "pgm", "stats", "block",
                                  "rows"};
    static const int vals[] = {FMT_NPY, FMT_TEXT, FMT_PGM, FMT_STATS,
                               FMT_BLOCK, FMT_ROWS};

    for (int i = 0; i < 6; i++) {
        if (recall ? (i >= 2 && i != 5) : i == 5)
            continue;
        if (strcmp(s, names[i]) == 0) {
            *fmt = vals[i];
            return 0;
        }
    }
    return kv_usage("-f: expected %s, got '%s'",
                    recall ? "text, rows or npy"
                           : "npy, text, pgm, stats or block",
                    s);
}

static const char *EST_SYN =
    "\nThe XAttention block mask [B, Hq, ceil(Lq/BS), ceil(Lk/BS)] (1 = keep)\n"
    "of Q [B, Hq, Lq, D] and K [B, Hkv, Lk, D] (f32, f16 or bf16 .npy).";
static const char *EST_EXTRA =
    "Threshold: 0 keeps only the forced blocks (block 0 and the diagonal);\n"
    "1 keeps every block with mass.  See man 1 kvxattn.";

struct est_args {
    struct arg_lit *help, *version, *nc, *sink, *recent, *text, *force,
                   *quiet, *verb;
    struct arg_file *q, *k, *thrs, *sums, *out;
    struct arg_str *layout, *stride, *bs, *thr, *layer, *off, *norm, *mode,
                   *rule, *compat, *fmt, *j, *mem;
    struct arg_end *end;
};

/* estimate's options, in the order --help lists them; returns the count. */
static int est_args_make(struct est_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version");
    t[n++] = a->q = arg_file1("q", "query", "Q", "query .npy ('-' = stdin)");
    t[n++] = a->k = arg_file1("k", "key", "K", "key .npy");
    t[n++] = a->layout = arg_str0(NULL, "layout", "bhsd|thd",
                                  "input layout (default bhsd)");
    t[n++] = a->stride = arg_str0(NULL, "stride", "S", "stride S (default 8)");
    t[n++] = a->bs = arg_str0(NULL, "block-size", "BS",
                              "block size (default 128)");
    t[n++] = a->thr = arg_str0(NULL, "threshold", "T",
                               "threshold in [0, 1] (default 0.9)");
    t[n++] = a->thrs = arg_file0(NULL, "thresholds", "FILE",
                                 "per-head thresholds (.npy or text)");
    t[n++] = a->layer = arg_str0(NULL, "layer", "L",
                                 "row L of a layer x head table");
    t[n++] = a->nc = arg_lit0(NULL, "no-causal", "non-causal attention");
    t[n++] = a->off = arg_str0(NULL, "q-offset", "N",
                               "kv position of query token 0 "
                               "(default Lk - Lq)");
    t[n++] = a->norm = arg_str0(NULL, "norm", "X",
                                "extra score divisor (default 1)");
    t[n++] = a->sink = arg_lit0(NULL, "keep-sink",
                                "keep query-block row 0 entirely "
                                "(the original's meaning)");
    t[n++] = a->recent = arg_lit0(NULL, "keep-recent",
                                  "keep the diagonal block");
    t[n++] = a->mode = arg_str0(NULL, "select-mode", "inverse|slash",
                                "antidiagonal (default) or diagonal");
    t[n++] = a->rule = arg_str0(NULL, "rule", "original|intended",
                                "selection rule (default original)");
    t[n++] = a->compat = arg_str0(NULL, "compat-chunk-size", "C",
                                  "reproduce the original with chunk C");
    t[n++] = a->sums = arg_file0(NULL, "sums", "FILE",
                                 "write the f32 block sums (.npy)");
    t[n++] = a->fmt = arg_str0("f", "format", "FMT",
                               "npy|text|pgm|stats|block");
    t[n++] = a->text = arg_lit0(NULL, "text", "-f block as text fields");
    t[n++] = a->force = arg_lit0(NULL, "force",
                                 "binary output to a terminal");
    t[n++] = a->out = arg_file0("o", "output", "FILE", "output file");
    t[n++] = a->j = arg_str0("j", "jobs,threads", "N",
                             "threads (default: all cores)");
    t[n++] = a->mem = arg_str0(NULL, "max-mem", "SIZE",
                               "memory limit (default 75% of RAM)");
    t[n++] = a->quiet = arg_lit0(NULL, "quiet", "no progress line");
    t[n++] = a->verb = arg_lit0("v", "verbose", "print timings");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* Inputs, geometry and thresholds: -q, -k, --layout, --stride,
 * --block-size, --threshold(s) and --layer. */
static int est_inputs(struct est_args *a, struct opts *o)
{
    struct kv_err e;
    o->qpath = a->q->filename[0];
    o->kpath = a->k->filename[0];
    if ((strcmp(o->qpath, "-") == 0) + (strcmp(o->kpath, "-") == 0) +
        (a->thrs->count && strcmp(a->thrs->filename[0], "-") == 0) > 1)
        return kv_usage("only one of -q, -k and --thresholds can read stdin");
    if (a->layout->count) {
        if (strcmp(a->layout->sval[0], "thd") == 0)
            o->thd = 1;
        else if (strcmp(a->layout->sval[0], "bhsd") != 0)
            return kv_usage("--layout: expected bhsd or thd, got '%s'",
                            a->layout->sval[0]);
    }
    if (kv_opt_i64(a->stride, "--stride", 1, 1 << 20, &o->x.stride) ||
        kv_opt_i64(a->bs, "--block-size", 1, 1 << 24, &o->x.block_size))
        return KV_EXIT_USAGE;
    if (o->x.block_size % o->x.stride != 0)
        return kv_usage("--stride %lld does not divide --block-size %lld",
                        (long long)o->x.stride, (long long)o->x.block_size);
    if (a->thr->count && a->thrs->count)
        return kv_usage("--threshold and --thresholds exclude each other");
    if (a->thr->count) {
        if (kv_parse_f64(a->thr->sval[0], "--threshold", &o->threshold, &e))
            return kv_usage("%s", e.msg);
        if (!(o->threshold >= 0.0 && o->threshold <= 1.0))
            return kv_usage("--threshold: expected a number in [0, 1] (0 "
                            "keeps only the forced blocks, 1 every block "
                            "with mass), got '%s'", a->thr->sval[0]);
    }
    if (a->thrs->count)
        o->thr_file = a->thrs->filename[0];
    if (a->layer->count && !a->thrs->count)
        return kv_usage("--layer needs --thresholds FILE");
    if (kv_opt_i64(a->layer, "--layer", 0, INT32_MAX, &o->layer))
        return KV_EXIT_USAGE;
    return 0;
}

/* The selection: causality and offset, norm, forced blocks, mode, rule
 * and the original's chunking. */
static int est_selection(struct est_args *a, struct opts *o)
{
    struct kv_err e;
    o->x.causal = a->nc->count == 0;
    if (kv_opt_i64(a->off, "--q-offset", 0, INT64_MAX / 4, &o->x.q_offset))
        return KV_EXIT_USAGE;
    if (a->off->count && o->x.causal && o->x.q_offset % o->x.block_size != 0)
        return kv_usage("--q-offset %lld is not a multiple of --block-size "
                        "%lld (needed for causal selection)",
                        (long long)o->x.q_offset, (long long)o->x.block_size);
    if (a->norm->count &&
        (kv_parse_f64(a->norm->sval[0], "--norm", &o->x.norm, &e) ||
         !(o->x.norm > 0.0) || !isfinite(o->x.norm)))
        return kv_usage("--norm: expected a number > 0, got '%s'",
                        a->norm->sval[0]);
    o->x.keep_sink = a->sink->count > 0;
    o->x.keep_recent = a->recent->count > 0;
    if (a->mode->count) {
        if (strcmp(a->mode->sval[0], "slash") == 0)
            o->x.select_mode = KV_XATTN_SLASH;
        else if (strcmp(a->mode->sval[0], "inverse") != 0)
            return kv_usage("--select-mode: expected inverse or slash, got "
                            "'%s'", a->mode->sval[0]);
    }
    if (a->rule->count) {
        if (strcmp(a->rule->sval[0], "intended") == 0)
            o->x.rule = KV_XATTN_RULE_INTENDED;
        else if (strcmp(a->rule->sval[0], "original") != 0)
            return kv_usage("--rule: expected original or intended, got '%s'",
                            a->rule->sval[0]);
    }
    if (kv_opt_i64(a->compat, "--compat-chunk-size", 1, (int64_t)1 << 40,
                   &o->x.compat_chunk))
        return KV_EXIT_USAGE;
    if (a->compat->count && o->x.compat_chunk % o->x.block_size != 0)
        return kv_usage("--compat-chunk-size %lld is not a multiple of "
                        "--block-size %lld", (long long)o->x.compat_chunk,
                        (long long)o->x.block_size);
    if (a->compat->count && a->off->count)
        return kv_usage("--q-offset and --compat-chunk-size exclude each "
                        "other (the original places the query at "
                        "(ceil(Lk/C) - ceil(Lq/C)) * C)");
    return 0;
}

/* Is path unset or standard output? */
static int to_stdout(const char *path)
{
    return !path || strcmp(path, "-") == 0;
}

/* The outputs: --sums, -o, -f, --text, threads and memory. */
static int est_outputs(struct est_args *a, struct opts *o)
{
    struct kv_err e;
    int64_t v;
    int rc;
    if (a->sums->count)
        o->sums = a->sums->filename[0];
    if (a->out->count)
        o->out = a->out->filename[0];
    o->force = a->force->count > 0;
    o->fmt = FMT_AUTO;
    if ((a->fmt->count && parse_format(a->fmt->sval[0], 0, &o->fmt)) ||
        kv_opt_i64(a->j, "-j", 0, 256, &v))
        return KV_EXIT_USAGE;
    o->x.nthreads = a->j->count ? (int)v : 0;
    if (kv_parse_max_mem(a->mem->count ? a->mem->sval[0] : NULL,
                         &o->x.max_bytes, &e))
        return kv_usage("%s", e.msg);
    o->quiet = a->quiet->count > 0;
    o->verbose = a->verb->count > 0;
    if (o->sums && o->out && strcmp(o->sums, o->out) == 0)
        return kv_usage("--sums and -o name the same file '%s'", o->sums);
    if (o->sums && strcmp(o->sums, "-") == 0 && to_stdout(o->out))
        return kv_usage("--sums and the mask cannot both go to stdout");
    if (o->fmt == FMT_AUTO)
        o->fmt = to_stdout(o->out) && kv_isatty(stdout) ? FMT_TEXT : FMT_NPY;
    if (o->fmt == FMT_PGM && to_stdout(o->out) && !o->force &&
        kv_isatty(stdout))
        return kv_usage("refusing to write a binary PGM picture to a "
                        "terminal; use -o FILE, redirect the output, or add "
                        "--force");
    if (a->text->count && o->fmt != FMT_BLOCK)
        return kv_usage("--text: only for -f block (use -f text for the "
                        "mask)");
    /* a BlockMask on a terminal prints as text fields, as in kvmask */
    o->text = a->text->count > 0 ||
              (o->fmt == FMT_BLOCK && !o->force && to_stdout(o->out) &&
               kv_isatty(stdout));
    if ((o->fmt == FMT_NPY || (o->fmt == FMT_BLOCK && !o->text)) &&
        to_stdout(o->out) && (rc = kv_check_binary_ok(stdout, o->force)))
        return rc;
    if (o->sums && strcmp(o->sums, "-") == 0 &&
        (rc = kv_check_binary_ok(stdout, o->force)))
        return rc;
    return 0;
}

static int estimate_main(int argc, char **argv)
{
    struct est_args a;
    void *table[32];
    int n = est_args_make(&a, table);
    struct opts o;
    int rc;

    memset(&o, 0, sizeof(o));
    kv_xattn_opts_init(&o.x);
    o.threshold = 0.9;
    o.layer = -1;
    kv_setprogname("kvxattn estimate");   /* for the usage line and hints */
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end, EST_SYN,
                      EST_EXTRA);
    if (rc < 0 && !(rc = est_inputs(&a, &o)) && !(rc = est_selection(&a, &o))
        && !(rc = est_outputs(&a, &o))) {
        kv_setprogname("kvxattn");   /* data errors: "kvxattn: ..." */
        rc = run_estimate(&o);
    }
    arg_freetable(table, (size_t)n);
    return rc;
}

static const char *REC_SYN =
    "\nThe exact attention mass each query token's kept blocks cover\n"
    "(min / mean per head) and the density of the block mask M.";

static int recall_main(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_file *aq = arg_file1("q", "query", "Q", "query .npy");
    struct arg_file *ak = arg_file1("k", "key", "K", "key .npy");
    struct arg_file *am = arg_file1("m", "mask", "M",
                                    "block mask .npy or BlockMask stream");
    struct arg_str *alayout = arg_str0(NULL, "layout", "bhsd|thd",
                                       "input layout (default bhsd)");
    struct arg_str *abs = arg_str0(NULL, "block-size", "BS",
                                   "block size (default 128)");
    struct arg_lit *anc = arg_lit0(NULL, "no-causal", "non-causal attention");
    struct arg_str *aoff = arg_str0(NULL, "q-offset", "N",
                                    "kv position of query token 0 "
                                    "(default Lk - Lq)");
    struct arg_str *ascale = arg_str0(NULL, "scale", "X",
                                      "softmax scale (default 1/sqrt(D))");
    struct arg_file *apb = arg_file0(NULL, "per-block", "FILE",
                                     "write the exact block-mass matrix");
    struct arg_str *afmt = arg_str0("f", "format", "FMT",
                                    "text (report); rows or npy "
                                    "(per-token recall)");
    struct arg_lit *aforce = arg_lit0(NULL, "force",
                                      "binary output to a terminal");
    struct arg_file *aout = arg_file0("o", "output", "FILE", "output file");
    struct arg_str *aj = arg_str0("j", "jobs,threads", "N",
                                  "threads (default: all cores)");
    struct arg_str *amem = arg_str0(NULL, "max-mem", "SIZE",
                                    "memory limit (default 75% of RAM)");
    struct arg_lit *aquiet = arg_lit0(NULL, "quiet", "no progress line");
    struct arg_lit *averb = arg_lit0("v", "verbose", "print timings");
    struct arg_end *end = arg_end(20);
    void *table[] = {help, version, aq, ak, am, alayout, abs, anc, aoff,
                     ascale, apb, afmt, aforce, aout, aj, amem, aquiet,
                     averb, end};
    struct opts o;
    struct kv_err e;
    int rc;
    int64_t v;

    memset(&o, 0, sizeof(o));
    kv_xattn_opts_init(&o.x);
    kv_setprogname("kvxattn recall");
    rc = kv_arg_parse(table, argc, argv, help, version, end, REC_SYN, NULL);
    if (rc >= 0)
        goto out;
    rc = KV_EXIT_USAGE;
    o.qpath = aq->filename[0];
    o.kpath = ak->filename[0];
    o.mpath = am->filename[0];
    if ((strcmp(o.qpath, "-") == 0) + (strcmp(o.kpath, "-") == 0) +
        (strcmp(o.mpath, "-") == 0) > 1) {
        rc = kv_usage("only one of -q, -k and --mask can read stdin");
        goto out;
    }
    if (alayout->count) {
        if (strcmp(alayout->sval[0], "thd") == 0)
            o.thd = 1;
        else if (strcmp(alayout->sval[0], "bhsd") != 0) {
            rc = kv_usage("--layout: expected bhsd or thd, got '%s'",
                          alayout->sval[0]);
            goto out;
        }
    }
    if (kv_opt_i64(abs, "--block-size", 1, 1 << 24, &o.x.block_size))
        goto out;
    o.x.stride = 1;
    o.x.causal = anc->count == 0;
    if (kv_opt_i64(aoff, "--q-offset", 0, INT64_MAX / 4, &o.x.q_offset))
        goto out;
    if (ascale->count) {
        if (kv_parse_f64(ascale->sval[0], "--scale", &o.x.scale, &e) ||
            !(o.x.scale > 0.0) || !isfinite(o.x.scale)) {
            rc = kv_usage("--scale: expected a number > 0, got '%s'",
                          ascale->sval[0]);
            goto out;
        }
    }
    if (apb->count)
        o.per_block = apb->filename[0];
    if (aout->count)
        o.out = aout->filename[0];
    o.fmt = FMT_TEXT;
    if (afmt->count && parse_format(afmt->sval[0], 1, &o.fmt))
        goto out;
    if (kv_opt_i64(aj, "-j", 0, 256, &v))
        goto out;
    o.x.nthreads = aj->count ? (int)v : 0;
    if (kv_parse_max_mem(amem->count ? amem->sval[0] : NULL, &o.x.max_bytes,
                         &e)) {
        rc = kv_usage("%s", e.msg);
        goto out;
    }
    o.force = aforce->count > 0;
    o.quiet = aquiet->count > 0;
    o.verbose = averb->count > 0;
    if (o.per_block && strcmp(o.per_block, "-") == 0) {
        rc = kv_usage("--per-block needs a file name");
        goto out;
    }
    if (o.fmt == FMT_NPY && (!o.out || strcmp(o.out, "-") == 0)) {
        rc = kv_check_binary_ok(stdout, o.force);
        if (rc)
            goto out;
    }
    kv_setprogname("kvxattn");
    rc = run_recall(&o);
out:
    arg_freetable(table, sizeof(table) / sizeof(table[0]));
    return rc;
}

int main(int argc, char **argv)
{
    kv_blas_single_thread(argv);
    kv_setprogname(argv[0]);
    if (argc < 2)
        return kv_usage("missing subcommand (estimate or recall)");
    if (strcmp(argv[1], "estimate") == 0)
        return estimate_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "recall") == 0)
        return recall_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("Usage: %s estimate|recall [options]\n"
               "  estimate  the XAttention block mask of Q and K\n"
               "  recall    the exact attention mass a block mask covers\n"
               "'%s SUBCOMMAND --help' lists the options.\n",
               kv_progname(), kv_progname());
        return kv_close_stdout();
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("%s (kvtools) %s\n", kv_progname(), KV_VERSION);
        return kv_close_stdout();
    }
    return kv_usage("unknown subcommand '%s' (estimate or recall)", argv[1]);
}
