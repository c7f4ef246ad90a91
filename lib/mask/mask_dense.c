/* mask_dense.c - what a dense element holds (the value bits of each dtype,
 * the fill rules), rows rendered from their spans, and the dense writers:
 * npy (plain or FRACTAL_NZ), text and pgm. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mask/mask_int.h"
#include "core/half.h"
#include "core/npy.h"
#include "core/isa.h"

/* ---- values ----------------------------------------------------------- */

int kv_mask_value_bits(enum kv_dtype dtype, double x, uint32_t *bits)
{
    float f = (float)x;
    uint32_t u;
    switch (dtype) {
    case KV_BOOL:
        *bits = x != 0;
        return 0;
    case KV_U8:
        if (!(x >= 0 && x <= 255) || x != floor(x))
            return -1;
        *bits = (uint32_t)x;
        return 0;
    case KV_I8:
        if (!(x >= -128 && x <= 127) || x != floor(x))
            return -1;
        *bits = (uint8_t)(int8_t)x;
        return 0;
    case KV_F16:
        *bits = kv_f32_to_f16(f);
        return 0;
    case KV_BF16:
        *bits = kv_f32_to_bf16(f);
        return 0;
    case KV_F32:
        memcpy(&u, &f, 4);
        *bits = u;
        return 0;
    default:
        return -1;
    }
}

int kv_mask_values_plain(struct kv_mask_values *v, enum kv_dtype dtype,
                         int keep_one, const char *fill, struct kv_err *e)
{
    struct kv_mask_values t = { dtype, 0, 0, 0 };
    int is_float = dtype == KV_F16 || dtype == KV_BF16 || dtype == KV_F32;

    if (dtype != KV_BOOL && dtype != KV_U8 && dtype != KV_I8 && !is_float)
        return kv_err_set(e, "--dtype: '%s' is not a mask dtype (bool, u8, "
                          "i8, f16, bf16, f32)", kv_dtype_name(dtype));
    if (fill && keep_one)
        return kv_err_set(e, "--fill: not with --keep (attend = 1, masked = 0)");
    if (fill && !is_float)
        return kv_err_set(e, "--fill: only for float dtypes, not %s",
                          kv_dtype_name(dtype));
    if (keep_one) {
        kv_mask_value_bits(dtype, 1.0, &t.keep);
        kv_mask_value_bits(dtype, 0.0, &t.mask);
    } else if (!is_float) {
        kv_mask_value_bits(dtype, 0.0, &t.keep);
        kv_mask_value_bits(dtype, 1.0, &t.mask);
    } else {
        double x;
        kv_mask_value_bits(dtype, 0.0, &t.keep);
        if (!fill || strcmp(fill, "-inf") == 0) {
            x = -INFINITY;
        } else if (strcmp(fill, "min") == 0) {
            x = dtype == KV_F16 ? -65504.0 :
                dtype == KV_BF16 ? -3.3895313892515355e38 : -3.4028234663852886e38;
        } else {
            char *end;
            errno = 0;
            x = strtod(fill, &end);
            if (end == fill || *end != '\0' || isnan(x))
                return kv_err_set(e, "--fill: expected -inf, min or a number, "
                                  "got '%s'", fill);
        }
        kv_mask_value_bits(dtype, x, &t.mask);
    }
    *v = t;
    return 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MASK_X86 1
/* n >= 64 bytes of a 4-byte pattern w (little-endian) from p: 64-byte
 * stores, the last one ending at p + n; p + k carries phase k % 4. */
__attribute__((target("avx512f")))
static void fill_512(uint8_t *p, uint32_t w, size_t n)
{
    __m512i v = _mm512_set1_epi32((int)w);
    size_t k = 0;
    for (; k + 256 <= n; k += 256) {
        _mm512_storeu_si512((void *)(p + k), v);
        _mm512_storeu_si512((void *)(p + k + 64), v);
        _mm512_storeu_si512((void *)(p + k + 128), v);
        _mm512_storeu_si512((void *)(p + k + 192), v);
    }
    for (; k + 64 <= n; k += 64)
        _mm512_storeu_si512((void *)(p + k), v);
    if (k < n)      /* n - 64 is a whole number of elements: same phase */
        _mm512_storeu_si512((void *)(p + n - 64), v);
}
#endif

/* Fill elements [a, b) of a row of elsize-byte elements with a pattern:
 * memset when every byte of the pattern is the same; otherwise copies of a
 * 4 KiB block of the pattern (glibc's vector memcpy, close to memset
 * speed).  The block is built on first use of a pattern and kept per
 * thread. */
static void fill_elems(void *row, int elsize, uint32_t pat, int64_t a,
                       int64_t b)
{
    static _Thread_local uint8_t tmpl[4096];
    static _Thread_local uint32_t tmpl_pat;
    static _Thread_local int tmpl_es;

    if (b <= a)
        return;
    uint8_t *p = (uint8_t *)row + (size_t)a * (size_t)elsize;
    size_t n = (size_t)(b - a) * (size_t)elsize;
    uint8_t b0 = (uint8_t)pat;
    if (elsize == 1 || (elsize == 2 && (pat >> 8) == b0) ||
        (elsize == 4 && pat == b0 * 0x01010101u)) {
        memset(p, b0, n);
        return;
    }
#ifdef MASK_X86
    if (n >= 64 && kv_isa_has(KV_ISA_AVX512)) {
        fill_512(p, elsize == 2 ? (pat & 0xffffu) * 0x10001u : pat, n);
        return;
    }
#endif
    if (tmpl_es != elsize || tmpl_pat != pat) {
        for (size_t k = 0; k < sizeof tmpl; k += (size_t)elsize)
            memcpy(tmpl + k, &pat, (size_t)elsize);   /* little-endian */
        tmpl_es = elsize;
        tmpl_pat = pat;
    }
    for (size_t k = 0; k < n; k += sizeof tmpl)
        memcpy(p + k, tmpl, n - k < sizeof tmpl ? n - k : sizeof tmpl);
}

/* Plain per-element fill: the reference fill_elems is tested against. */
static void fill_elems_ref(void *row, int elsize, uint32_t pat, int64_t a,
                           int64_t b)
{
    for (int64_t j = a; j < b; j++) {
        if (elsize == 1)
            ((uint8_t *)row)[j] = (uint8_t)pat;
        else if (elsize == 2)
            ((uint16_t *)row)[j] = (uint16_t)pat;
        else
            ((uint32_t *)row)[j] = pat;
    }
}

/* Render columns [c0, c1) of row i into dst (element 0 = column c0);
 * columns >= n_kv and rows >= n_q get the pad value. */
static void render_cols(const struct kv_mask *m, const struct kv_mask_values *v,
                        int64_t i, int64_t c0, int64_t c1, void *dst)
{
    int es = (int)kv_dtype_size(v->dtype);
    int64_t lo[2], hi[2];
    if (i >= m->n_q) {
        fill_elems(dst, es, v->pad, 0, c1 - c0);
        return;
    }
    /* each element written once: the masked gaps and the attended spans
     * (sorted and disjoint) left to right, then the pad */
    int64_t real = max64(min64(c1, m->n_kv), c0), at = c0;
    int n = kv_mask_row(m, i, lo, hi);
    if (n < 0) {            /* a row that is not intervals: element by element */
        for (int64_t j = c0; j < real; j++)
            fill_elems(dst, es, kv_mask_at(m, i, j) ? v->keep : v->mask, j - c0, j - c0 + 1);
        at = real;
    }
    for (int k = 0; k < n; k++) {
        int64_t a = max64(lo[k], at), b = min64(hi[k], real);
        if (b <= a)
            continue;
        fill_elems(dst, es, v->mask, at - c0, a - c0);
        fill_elems(dst, es, v->keep, a - c0, b - c0);
        at = b;
    }
    fill_elems(dst, es, v->mask, at - c0, real - c0);
    fill_elems(dst, es, v->pad, real - c0, c1 - c0);
}

void kv_mask_render_row(const struct kv_mask *m, const struct kv_mask_values *v,
                        int64_t i, void *dst)
{
    render_cols(m, v, i, 0, m->n_kv, dst);
}

void kv_mask_render_row_ref(const struct kv_mask *m,
                            const struct kv_mask_values *v, int64_t i,
                            void *dst)
{
    int es = (int)kv_dtype_size(v->dtype);
    for (int64_t j = 0; j < m->n_kv; j++)
        fill_elems_ref(dst, es, kv_mask_at(m, i, j) ? v->keep : v->mask, j,
                       j + 1);
}

void kv_mask_value_text(enum kv_dtype dtype, uint32_t bits, char *buf,
                        size_t len)
{
    double x;
    switch (dtype) {
    case KV_BOOL: case KV_U8:
        snprintf(buf, len, "%u", bits & 0xff);
        return;
    case KV_I8:
        snprintf(buf, len, "%d", (int)(int8_t)(uint8_t)bits);
        return;
    case KV_F16:
        x = kv_f16_to_f32((uint16_t)bits);
        break;
    case KV_BF16:
        x = kv_bf16_to_f32((uint16_t)bits);
        break;
    default: {
        float f;
        memcpy(&f, &bits, 4);
        x = f;
    }
    }
    if (isnan(x)) {
        snprintf(buf, len, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, len, x < 0 ? "-inf" : "inf");
        return;
    }
    if (x == floor(x) && fabs(x) < 1e7) {    /* -9984, -10000, -0 */
        snprintf(buf, len, "%.0f", x);
        return;
    }
    /* the shortest text that reads back to the same bits */
    for (int p = 1; p <= 9; p++) {
        uint32_t back;
        snprintf(buf, len, "%.*g", p, x);
        kv_mask_value_bits(dtype, strtod(buf, NULL), &back);
        if (back == bits)
            return;
    }
}

int kv_mask_dense_bytes(const struct kv_mask *m, const struct kv_mask_values *v,
                        const struct kv_mask_out *o, int nz, size_t *bytes)
{
    size_t b = kv_dtype_size(v->dtype);
    int64_t r = nz ? ceil_div(m->n_q, 16) * 16 : m->n_q;
    int64_t c = nz ? ceil_div(m->n_kv, 16) * 16 : m->n_kv;
    if (kv_size_mul(b, (size_t)r, &b) || kv_size_mul(b, (size_t)c, &b))
        return -1;
    for (int d = 0; d < o->n_outer_dims; d++)
        if (kv_size_mul(b, (size_t)o->outer[d], &b))
            return -1;
    *bytes = b;
    return 0;
}

/* What a row slot of an output buffer holds: the attended spans of the
 * full row last rendered there (valid 0: nothing known). */
struct slot_hist {
    int valid, n;
    int64_t lo[2], hi[2];
};

static int in_spans(int n, const int64_t *lo, const int64_t *hi, int64_t x)
{
    for (int k = 0; k < n; k++)
        if (x >= lo[k] && x < hi[k])
            return 1;
    return 0;
}

/* Render full row i into dst, which holds the row h records: only the
 * stretches between the old and new span ends whose value changes are
 * written (every element when h knows nothing); h then records row i. */
static void render_slot(const struct kv_mask *m, const struct kv_mask_values *v,
                        int64_t i, void *dst, struct slot_hist *h)
{
    int64_t lo[2], hi[2], cut[10];
    int n = kv_mask_row(m, i, lo, hi), nc = 0;
    if (n < 0) {            /* not intervals: the whole row, nothing recorded */
        kv_mask_render_row(m, v, i, dst);
        h->valid = 0;
        return;
    }
    for (int k = 0; k < n; k++) {
        lo[k] = max64(0, min64(lo[k], m->n_kv));
        hi[k] = max64(lo[k], min64(hi[k], m->n_kv));
    }
    if (!h->valid) {
        kv_mask_render_row(m, v, i, dst);
    } else {
        int es = (int)kv_dtype_size(v->dtype);
        cut[nc++] = 0;
        cut[nc++] = m->n_kv;
        for (int k = 0; k < n; k++) {
            cut[nc++] = lo[k];
            cut[nc++] = hi[k];
        }
        for (int k = 0; k < h->n; k++) {
            cut[nc++] = h->lo[k];
            cut[nc++] = h->hi[k];
        }
        for (int a = 1; a < nc; a++)            /* insertion sort */
            for (int b = a; b > 0 && cut[b - 1] > cut[b]; b--) {
                int64_t t = cut[b];
                cut[b] = cut[b - 1];
                cut[b - 1] = t;
            }
        for (int a = 0; a + 1 < nc; a++) {
            int64_t x = cut[a], y = cut[a + 1];
            if (y <= x)
                continue;
            int now = in_spans(n, lo, hi, x);
            if (now != in_spans(h->n, h->lo, h->hi, x))
                fill_elems(dst, es, now ? v->keep : v->mask, x, y);
        }
    }
    h->valid = 1;
    h->n = n;
    memcpy(h->lo, lo, sizeof lo);
    memcpy(h->hi, hi, sizeof hi);
}

int kv_mask_write_npy(FILE *f, const struct kv_mask *m,
                      const struct kv_mask_values *v,
                      const struct kv_mask_out *o, int nz, struct kv_err *e)
{
    int64_t shape[KV_MAX_DIMS];
    int nd = 0;
    size_t es = kv_dtype_size(v->dtype), row_bytes, total;
    struct aout ao;
    uint8_t *row = NULL;
    int rc = 0;

    if (kv_mask_dense_bytes(m, v, o, nz, &total))
        return kv_err_set(e, "dense mask size overflows");
    if (nz) {
        if (o->n_outer_dims || m->rows_per_mat > 0)
            return kv_err_set(e, "--layout nz: only for a 2-d mask (no "
                              "--batch/--heads)");
        shape[nd++] = 1;
        shape[nd++] = ceil_div(m->n_kv, 16);
        shape[nd++] = ceil_div(m->n_q, 16) * 16;
        shape[nd++] = 16;
    } else {
        for (int d = 0; d < o->n_outer_dims; d++)
            shape[nd++] = o->outer[d];
        if (m->rows_per_mat > 0) {
            shape[nd++] = m->n_q / m->rows_per_mat;
            shape[nd++] = m->rows_per_mat;
        } else {
            shape[nd++] = m->n_q;
        }
        shape[nd++] = m->n_kv;
    }
    row_bytes = (size_t)m->n_kv * es;
    if (mask_aout_open(&ao, f, o->threads, e) != 0)
        return -1;
    rc = mask_aout_header(&ao, v->dtype, nd, shape, e);
    if (nz) {
        int64_t r16 = shape[2];
        for (int64_t cb = 0; rc == 0 && cb < shape[1]; cb++)
            for (int64_t i = 0; rc == 0 && i < r16; i++) {
                void *p = aout_slot(&ao, 16 * es, e, &rc);
                if (p)
                    render_cols(m, v, i, cb * 16, cb * 16 + 16, p);
            }
        return mask_aout_close(&ao, rc, e);
    }
    if (row_bytes > ao.cap) {          /* rows wider than a buffer */
        row = malloc(row_bytes);
        if (!row)
            rc = kv_err_set(e, "out of memory (%zu bytes for a row)",
                            row_bytes);
    }
    /* the header goes out on its own, so that every fill of a buffer puts
     * its rows at the same offsets: a row then only rewrites what differs
     * from the row the same place held (next to none for causal rows) */
    struct slot_hist *hist[2] = { NULL, NULL };
    size_t n_slot = !row && row_bytes >= 4096 ? ao.cap / row_bytes : 0;
    if (rc == 0 && n_slot > 0) {
        rc = mask_aout_flush(&ao, e);
        hist[0] = calloc(n_slot, sizeof **hist);
        hist[1] = calloc(n_slot, sizeof **hist);
    }
    int64_t reps = n_outer(o);
    for (int64_t rep = 0; rc == 0 && rep < reps; rep++)
        for (int64_t i = 0; rc == 0 && i < m->n_q; i++) {
            void *p = row ? NULL : aout_slot(&ao, row_bytes, e, &rc);
            if (rc != 0)
                break;
            if (p && hist[0] && hist[1])
                render_slot(m, v, i, p, &hist[ao.cur][(ao.len - row_bytes) / row_bytes]);
            else
                kv_mask_render_row(m, v, i, p ? p : row);
            if (!p)
                rc = mask_aout_put(&ao, row, row_bytes, e);
            tick(o, (uint64_t)(rep * m->n_q + i), (uint64_t)(reps * m->n_q), 10);
        }
    free(row);
    rc = mask_aout_close(&ao, rc, e);
    free(hist[0]);
    free(hist[1]);
    return rc;
}

int kv_mask_write_text(FILE *f, const struct kv_mask *m,
                       const struct kv_mask_values *v,
                       const struct kv_mask_out *o, struct kv_err *e)
{
    char ks[48], ms[48];
    size_t kl, ml, cap;
    char *line;
    int64_t lo[2], hi[2];
    int rc = 0;

    kv_mask_value_text(v->dtype, v->keep, ks, sizeof ks);
    kv_mask_value_text(v->dtype, v->mask, ms, sizeof ms);
    kl = strlen(ks);
    ml = strlen(ms);
    if (kv_size_mul((size_t)m->n_kv, (kl > ml ? kl : ml) + 1, &cap))
        return kv_err_set(e, "text row size overflows");
    line = malloc(cap + 1);
    if (!line)
        return kv_err_set(e, "out of memory");
    int64_t reps = n_outer(o);
    for (int64_t rep = 0; rc == 0 && rep < reps; rep++) {
        if (rep > 0 && fputc('\n', f) == EOF)
            rc = kv_err_set(e, "write error: %s", strerror(errno));
        for (int64_t i = 0; rc == 0 && i < m->n_q; i++) {
            int n = kv_mask_row(m, i, lo, hi), k = 0;
            size_t p = 0;
            if (i > 0 && m->rows_per_mat > 0 && i % m->rows_per_mat == 0 &&
                fputc('\n', f) == EOF) {
                rc = kv_err_set(e, "write error: %s", strerror(errno));
                break;
            }
            for (int64_t j = 0; j < m->n_kv; j++) {
                while (k < n && j >= hi[k])
                    k++;
                int keep = n < 0 ? kv_mask_at(m, i, j) : k < n && j >= lo[k];
                memcpy(line + p, keep ? ks : ms, keep ? kl : ml);
                p += keep ? kl : ml;
                line[p++] = ' ';
            }
            line[p - 1] = '\n';
            rc = kv_write_all(f, line, p, e);
            tick(o, (uint64_t)(rep * m->n_q + i), (uint64_t)(reps * m->n_q), 6);
        }
    }
    free(line);
    return rc;
}

int kv_mask_write_pgm(FILE *f, const struct kv_mask *m,
                      const struct kv_mask_out *o, int64_t cell,
                      struct kv_err *e)
{
    struct kv_mask_values v = { KV_U8, 255, 0, 0 };
    int64_t reps = n_outer(o);
    size_t w, h;
    uint8_t *row, *wide;
    int rc = 0;

    if (cell < 1 || kv_size_mul((size_t)m->n_kv, (size_t)cell, &w) ||
        kv_size_mul((size_t)m->n_q, (size_t)cell, &h) ||
        kv_size_mul(h, (size_t)reps, &h))
        return kv_err_set(e, "picture size overflows");
    if (fprintf(f, "P5\n%zu %zu\n255\n", w, h) < 0)
        return kv_err_set(e, "write error: %s", strerror(errno));
    row = malloc((size_t)m->n_kv);
    wide = malloc(w);
    if (!row || !wide) {
        free(row);
        free(wide);
        return kv_err_set(e, "out of memory");
    }
    for (int64_t rep = 0; rc == 0 && rep < reps; rep++)
        for (int64_t i = 0; rc == 0 && i < m->n_q; i++) {
            kv_mask_render_row(m, &v, i, row);
            for (int64_t j = 0; j < m->n_kv; j++)
                memset(wide + j * cell, row[j], (size_t)cell);
            for (int64_t c = 0; rc == 0 && c < cell; c++)
                rc = kv_write_all(f, wide, w, e);
        }
    free(row);
    free(wide);
    return rc;
}
