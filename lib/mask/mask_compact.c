/* mask_compact.c - the compact writers: packed bits (FlashInfer), the
 * FlexAttention BlockMask tensors, FlashInfer's BSR and the tile
 * statistics, from the rows' spans and the tile states, never from a dense
 * mask. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "mask/mask_int.h"
#include "mask/blockmask.h"
#include "core/npy.h"
#include "core/jsonfig.h"

/* A little-endian bit stream built in a window buffer: bit k of the
 * stream is bit k % 8 of byte k / 8.  Whole bytes leave through ao (or stay
 * in the buffer when ao is NULL and the buffer holds everything). */
struct bitw {
    struct aout *ao;
    int big;             /* reverse the bits of each byte on the way out */
    uint8_t *buf;
    size_t cap;          /* bytes */
    uint64_t base;       /* stream bit offset of buf[0] (multiple of 8) */
};

/* Reverse the bit order of n bytes (little -> big bit order). */
static void reverse_bits(uint8_t *p, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        uint8_t x = p[k];
        x = (uint8_t)((x & 0xf0) >> 4 | (x & 0x0f) << 4);
        x = (uint8_t)((x & 0xcc) >> 2 | (x & 0x33) << 2);
        p[k] = (uint8_t)((x & 0xaa) >> 1 | (x & 0x55) << 1);
    }
}

static int bitw_init(struct bitw *b, struct aout *ao, uint64_t span_bits,
                     struct kv_err *e)
{
    b->ao = ao;
    b->big = 0;
    b->cap = (size_t)(span_bits / 8) + 64;
    if (b->cap < CHUNK_BYTES)
        b->cap = CHUNK_BYTES;
    b->buf = calloc(b->cap, 1);
    b->base = 0;
    if (!b->buf)
        return kv_err_set(e, "out of memory");
    return 0;
}

/* Make room for bits [at, at + n): pass on the whole bytes before `at`. */
static int bitw_reserve(struct bitw *b, uint64_t at, uint64_t n,
                        struct kv_err *e)
{
    if (at + n - b->base <= (uint64_t)b->cap * 8)
        return 0;
    size_t whole = (size_t)((at - b->base) / 8);
    if (b->big)
        reverse_bits(b->buf, whole);
    if (mask_aout_put(b->ao, b->buf, whole, e) != 0)
        return -1;
    memmove(b->buf, b->buf + whole, b->cap - whole);
    memset(b->buf + b->cap - whole, 0, whole);
    b->base += (uint64_t)whole * 8;
    return 0;
}

/* Set stream bits [a, c) (inside the reserved window). */
static void bitw_set(struct bitw *b, uint64_t a, uint64_t c)
{
    if (c <= a)
        return;
    a -= b->base;
    c -= b->base;
    uint64_t a8 = (a + 7) / 8, c8 = c / 8;
    if (a8 > c8) {               /* inside one byte */
        for (uint64_t k = a; k < c; k++)
            b->buf[k / 8] |= (uint8_t)(1u << (k % 8));
        return;
    }
    for (uint64_t k = a; k < a8 * 8; k++)
        b->buf[k / 8] |= (uint8_t)(1u << (k % 8));
    memset(b->buf + a8, 0xff, (size_t)(c8 - a8));
    for (uint64_t k = c8 * 8; k < c; k++)
        b->buf[k / 8] |= (uint8_t)(1u << (k % 8));
}

static int bitw_finish(struct bitw *b, uint64_t end, struct kv_err *e)
{
    size_t n = (size_t)((end - b->base + 7) / 8);
    if (b->big)
        reverse_bits(b->buf, n);
    int rc = mask_aout_put(b->ao, b->buf, n, e);
    free(b->buf);
    b->buf = NULL;
    return rc;
}

/* A stream of named tensors: .npy through an aout, or text ("name: v v v"
 * for 1-d, "name:" then one line per row otherwise) straight to f. */
struct sink {
    FILE *f;
    int text;
    int one_d;
    struct aout ao;
};

static int sink_open(struct sink *s, FILE *f, const struct kv_mask_out *o,
                     struct kv_err *e)
{
    memset(s, 0, sizeof *s);
    s->f = f;
    s->text = o->text;
    if (!s->text)
        return mask_aout_open(&s->ao, f, o->threads, e);
    return 0;
}

static int sink_close(struct sink *s, int rc, struct kv_err *e)
{
    if (!s->text)
        return mask_aout_close(&s->ao, rc, e);
    return rc;
}

static int sink_begin(struct sink *s, const char *name, enum kv_dtype dt,
                      int nd, const int64_t *shape, struct kv_err *e)
{
    s->one_d = nd == 1;
    if (!s->text)
        return mask_aout_header(&s->ao, dt, nd, shape, e);
    if (fprintf(s->f, s->one_d ? "%s:" : "%s:\n", name) < 0)
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

/* n values (int32 or u8); for text with ndim >= 2 they are one row. */
static int sink_put(struct sink *s, const void *vals, int is_u8, size_t n,
                    struct kv_err *e)
{
    if (!s->text)
        return mask_aout_put(&s->ao, vals, n * (is_u8 ? 1 : 4), e);
    for (size_t k = 0; k < n; k++) {
        long x = is_u8 ? (long)((const uint8_t *)vals)[k]
                       : (long)((const int32_t *)vals)[k];
        const char *sep = s->one_d ? " " : (k ? " " : "");
        if (fprintf(s->f, "%s%ld", sep, x) < 0)
            return kv_err_set(e, "write error: %s", strerror(errno));
    }
    if (!s->one_d && fputc('\n', s->f) == EOF)
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

static int sink_end(struct sink *s, struct kv_err *e)
{
    if (s->text && s->one_d && fputc('\n', s->f) == EOF)
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

int kv_mask_write_bits(FILE *f, const struct kv_mask *m,
                       const struct kv_mask_out *o, struct kv_err *e)
{
    struct sink sk;
    size_t n_segs = m->kind == KV_MASK_VARLEN ? m->n_req : 1;
    int64_t *seg_bytes;
    uint64_t total = 0;
    int64_t lo[2], hi[2];
    int rc = 0;

    if (sink_open(&sk, f, o, e) != 0)
        return -1;
    seg_bytes = malloc((n_segs + 1) * sizeof *seg_bytes);
    if (!seg_bytes)
        return sink_close(&sk, kv_err_set(e, "out of memory"), e);
    seg_bytes[0] = 0;
    for (size_t r = 0; r < n_segs; r++) {
        uint64_t q = m->kind == KV_MASK_VARLEN ?
            (uint64_t)(m->q_start[r + 1] - m->q_start[r]) : (uint64_t)m->n_q;
        uint64_t kv = m->kind == KV_MASK_VARLEN ?
            (uint64_t)(m->kv_start[r + 1] - m->kv_start[r]) : (uint64_t)m->n_kv;
        if (kv > 0 && q > UINT64_MAX / kv)
            rc = kv_err_set(e, "bit mask size overflows");
        else
            total += (q * kv + 7) / 8;
        seg_bytes[r + 1] = (int64_t)total;
    }
    if (rc == 0 && m->kind == KV_MASK_VARLEN && total > INT32_MAX)
        rc = kv_err_set(e, "bit mask of %llu bytes: segment offsets do not "
                        "fit int32", (unsigned long long)total);
    int64_t shape = (int64_t)total;
    if (rc == 0)
        rc = sink_begin(&sk, "packed", KV_U8, 1, &shape, e);
    if (rc == 0 && sk.text) {
        /* text: the bytes in decimal, built in memory row by row is not
         * needed at text sizes; pack into one buffer. */
        uint8_t *all = calloc((size_t)total + 1, 1);
        if (!all)
            rc = kv_err_set(e, "out of memory");
        for (size_t r = 0; rc == 0 && r < n_segs; r++) {
            int64_t q0 = m->kind == KV_MASK_VARLEN ? m->q_start[r] : 0;
            int64_t q1 = m->kind == KV_MASK_VARLEN ? m->q_start[r + 1] : m->n_q;
            int64_t k0 = m->kind == KV_MASK_VARLEN ? m->kv_start[r] : 0;
            int64_t kvl = m->kind == KV_MASK_VARLEN ?
                m->kv_start[r + 1] - k0 : m->n_kv;
            uint64_t base = (uint64_t)seg_bytes[r] * 8;
            for (int64_t i = q0; i < q1; i++) {
                int n = kv_mask_row(m, i, lo, hi);
                for (int k = 0; k < n; k++)
                    for (int64_t j = lo[k]; j < hi[k]; j++) {
                        uint64_t bit = base + (uint64_t)(i - q0) * (uint64_t)kvl
                                       + (uint64_t)(j - k0);
                        all[bit / 8] |= (uint8_t)(1u << (bit % 8));
                    }
            }
        }
        if (rc == 0) {
            if (o->bits_big)
                reverse_bits(all, (size_t)total);
            rc = sink_put(&sk, all, 1, (size_t)total, e);
        }
        free(all);
    } else if (rc == 0) {
        struct bitw b = { .buf = NULL };
        uint64_t widest = 0;
        for (size_t r = 0; r < n_segs; r++) {
            uint64_t kvl = m->kind == KV_MASK_VARLEN ?
                (uint64_t)(m->kv_start[r + 1] - m->kv_start[r]) : (uint64_t)m->n_kv;
            if (kvl > widest)
                widest = kvl;
        }
        rc = bitw_init(&b, &sk.ao, widest + 16, e);
        b.big = o->bits_big;
        uint64_t pos = 0;
        for (size_t r = 0; rc == 0 && r < n_segs; r++) {
            int64_t q0 = m->kind == KV_MASK_VARLEN ? m->q_start[r] : 0;
            int64_t q1 = m->kind == KV_MASK_VARLEN ? m->q_start[r + 1] : m->n_q;
            int64_t k0 = m->kind == KV_MASK_VARLEN ? m->kv_start[r] : 0;
            int64_t kvl = m->kind == KV_MASK_VARLEN ?
                m->kv_start[r + 1] - k0 : m->n_kv;
            pos = (uint64_t)seg_bytes[r] * 8;
            for (int64_t i = q0; rc == 0 && i < q1; i++) {
                rc = bitw_reserve(&b, pos, (uint64_t)kvl, e);
                int n = kv_mask_row(m, i, lo, hi);
                for (int k = 0; k < n; k++)
                    bitw_set(&b, pos + (uint64_t)(lo[k] - k0),
                             pos + (uint64_t)(hi[k] - k0));
                pos += (uint64_t)kvl;
            }
        }
        if (rc == 0)
            rc = bitw_finish(&b, total * 8, e);
        else
            free(b.buf);
    }
    if (rc == 0)
        rc = sink_end(&sk, e);
    if (rc == 0 && m->kind == KV_MASK_VARLEN) {
        int64_t sh = (int64_t)n_segs + 1;
        rc = sink_begin(&sk, "indptr", KV_I32, 1, &sh, e);
        for (size_t r = 0; rc == 0 && r <= n_segs; r++) {
            int32_t x = (int32_t)seg_bytes[r];
            rc = sink_put(&sk, &x, 0, 1, e);
        }
        if (rc == 0)
            rc = sink_end(&sk, e);
    }
    free(seg_bytes);
    return sink_close(&sk, rc, e);
}

/* Write one ordered index row from runs: tiles whose state is `want` in
 * ascending order, then the others. */
static int64_t order_from_runs(const struct kv_tile_run *runs, size_t n_runs,
                               uint8_t want, int32_t *idx)
{
    int64_t k = 0, present;
    for (size_t r = 0; r < n_runs; r++)
        if (runs[r].state == want)
            for (int64_t t = runs[r].start; t < runs[r].end; t++)
                idx[k++] = (int32_t)t;
    present = k;
    for (size_t r = 0; r < n_runs; r++)
        if (runs[r].state != want)
            for (int64_t t = runs[r].start; t < runs[r].end; t++)
                idx[k++] = (int32_t)t;
    return present;
}

static int64_t count_state(const struct kv_tile_run *runs, size_t n_runs,
                           uint8_t want)
{
    int64_t k = 0;
    for (size_t r = 0; r < n_runs; r++)
        if (runs[r].state == want)
            k += runs[r].end - runs[r].start;
    return k;
}

/* Runs of one row or column of tiles: from the rule, or (for kinds whose
 * columns are not intervals) from a precomputed tile matrix. */
struct tile_source {
    const struct kv_mask *m;
    int64_t bq, bk, n_qb, n_kb;
    struct kv_tile_scan scan[2];
    uint8_t *matrix;            /* [n_qb][n_kb] or NULL */
};

static void matrix_runs(struct tile_source *ts, int cols, int64_t blk)
{
    struct kv_tile_scan *s = &ts->scan[cols];
    int64_t n = cols ? ts->n_qb : ts->n_kb;
    s->n_runs = 0;
    for (int64_t t = 0; t < n; t++) {
        uint8_t st = cols ? ts->matrix[t * ts->n_kb + blk]
                          : ts->matrix[blk * ts->n_kb + t];
        push_run(s, t, t + 1, st);
    }
}

static const struct kv_tile_scan *source_runs(struct tile_source *ts,
                                              int cols, int64_t blk)
{
    if (cols && ts->matrix)
        matrix_runs(ts, cols, blk);
    else
        kv_tile_runs(&ts->scan[cols], ts->m, cols, blk, ts->bq, ts->bk);
    return &ts->scan[cols];
}

static void source_release(struct tile_source *ts)
{
    kv_tile_scan_release(&ts->scan[0]);
    kv_tile_scan_release(&ts->scan[1]);
    free(ts->matrix);
}

static int source_init(struct tile_source *ts, const struct kv_mask *m,
                       int64_t bq, int64_t bk, size_t max_mem,
                       struct kv_err *e)
{
    memset(ts, 0, sizeof *ts);
    ts->m = m;
    ts->bq = bq;
    ts->bk = bk;
    ts->n_qb = ceil_div(m->n_q, bq);
    ts->n_kb = ceil_div(m->n_kv, bk);
    if (ts->n_qb > INT32_MAX || ts->n_kb > INT32_MAX)
        return kv_err_set(e, "--block-size: %lld x %lld tiles do not fit "
                          "int32 indices", (long long)ts->n_qb,
                          (long long)ts->n_kb);
    if (kv_tile_scan_init(&ts->scan[0], m, 0, bq, bk, e) ||
        kv_tile_scan_init(&ts->scan[1], m, 1, bq, bk, e)) {
        source_release(ts);
        return -1;
    }
    if (m->kind == KV_MASK_POSITIONS || m->kind == KV_MASK_HOLE) {
        size_t n;
        if (kv_size_mul((size_t)ts->n_qb, (size_t)ts->n_kb, &n) ||
            (max_mem && n > max_mem)) {
            source_release(ts);
            return kv_err_set(e, "tile matrix of %lld x %lld tiles exceeds "
                              "--max-mem", (long long)ts->n_qb,
                              (long long)ts->n_kb);
        }
        ts->matrix = malloc(n ? n : 1);
        if (!ts->matrix) {
            source_release(ts);
            return kv_err_set(e, "out of memory");
        }
        for (int64_t a = 0; a < ts->n_qb; a++) {
            const struct kv_tile_scan *s = source_runs(ts, 0, a);
            for (size_t r = 0; r < s->n_runs; r++)
                memset(ts->matrix + a * ts->n_kb + s->runs[r].start,
                       s->runs[r].state,
                       (size_t)(s->runs[r].end - s->runs[r].start));
        }
    }
    return 0;
}

int kv_mask_write_block(FILE *f, const struct kv_mask *m, int64_t bq,
                        int64_t bk, const struct kv_mask_out *o,
                        size_t max_mem, struct kv_err *e)
{
    struct tile_source ts;
    struct sink sk;
    int64_t outer[2] = { 1, 1 };
    int32_t *num[4] = { NULL, NULL, NULL, NULL }, *idx = NULL;
    int rc = 0;

    if (o->n_outer_dims == 2) {
        outer[0] = o->outer[0];
        outer[1] = o->outer[1];
    } else if (o->n_outer_dims == 1) {
        outer[0] = o->outer[0];
    }
    if (source_init(&ts, m, bq, bk, max_mem, e) != 0)
        return -1;
    if (sink_open(&sk, f, o, e) != 0) {
        source_release(&ts);
        return -1;
    }
    int64_t reps = outer[0] * outer[1];
    int64_t widest = ts.n_qb > ts.n_kb ? ts.n_qb : ts.n_kb;
    for (int k = 0; k < 4; k++)
        num[k] = malloc((size_t)(widest ? widest : 1) * sizeof *num[k]);
    idx = malloc((size_t)(widest ? widest : 1) * sizeof *idx);
    if (!num[0] || !num[1] || !num[2] || !num[3] || !idx)
        rc = kv_err_set(e, "out of memory");
    /* counts of both sides first */
    for (int side = 0; rc == 0 && side < 2; side++) {
        int64_t n_lines = side ? ts.n_kb : ts.n_qb;
        for (int64_t a = 0; a < n_lines; a++) {
            const struct kv_tile_scan *s = source_runs(&ts, side, a);
            num[side * 2][a] = (int32_t)count_state(s->runs, s->n_runs,
                                                    KV_TILE_PARTIAL);
            num[side * 2 + 1][a] = (int32_t)count_state(s->runs, s->n_runs,
                                                        KV_TILE_FULL);
        }
    }
    for (int fld = 0; rc == 0 && fld < KV_BM_NFIELDS; fld++) {
        int side = fld >= KV_BM_Q_NUM;
        int is_idx = fld & 1;
        uint8_t want = (fld / 2) % 2 ? KV_TILE_FULL : KV_TILE_PARTIAL;
        int64_t n_lines = side ? ts.n_kb : ts.n_qb;
        int64_t n_cols = side ? ts.n_qb : ts.n_kb;
        int64_t shape[4] = { outer[0], outer[1], n_lines, n_cols };
        rc = sink_begin(&sk, kv_blockmask_names[fld], KV_I32, is_idx ? 4 : 3,
                        shape, e);
        const int32_t *counts = num[side * 2 + (want == KV_TILE_FULL)];
        for (int64_t rep = 0; rc == 0 && rep < reps; rep++) {
            if (!is_idx) {
                rc = sink_put(&sk, counts, 0, (size_t)n_lines, e);
                continue;
            }
            for (int64_t a = 0; rc == 0 && a < n_lines; a++) {
                const struct kv_tile_scan *s = source_runs(&ts, side, a);
                int32_t *slot = sk.text ? NULL :
                    aout_slot(&sk.ao, (size_t)n_cols * 4, e, &rc);
                if (rc != 0)
                    break;
                order_from_runs(s->runs, s->n_runs, want, slot ? slot : idx);
                if (!slot)
                    rc = sink_put(&sk, idx, 0, (size_t)n_cols, e);
                tick(o, (uint64_t)((fld / 2 * reps + rep) * n_lines + a),
                     (uint64_t)(4 * reps * n_lines), 6);
            }
        }
        if (rc == 0)
            rc = sink_end(&sk, e);
    }
    for (int k = 0; k < 4; k++)
        free(num[k]);
    free(idx);
    source_release(&ts);
    return sink_close(&sk, rc, e);
}

/* Query rows of block row a of R rows: R, or fewer in the last one. */
static int64_t bsr_rows(const struct kv_mask *m, int64_t r, int64_t a)
{
    return min64(r, m->n_q - a * r);
}

int kv_mask_write_bsr(FILE *f, const struct kv_mask *m, int64_t r,
                      int64_t c, int with_mask, const struct kv_mask_out *o,
                      size_t max_mem, struct kv_err *e)
{
    struct tile_source ts;
    struct sink sk;
    int32_t *row = NULL;
    int64_t *nnz_row = NULL;
    uint64_t nnz = 0, mask_bytes = 0;
    int64_t lo[2], hi[2];
    int rc = 0;

    if (m->n_kv % c != 0)
        return kv_err_set(e, "--block-size: the key length %lld is not a "
                          "multiple of the block width %lld (FlashInfer BSR "
                          "needs N %% C == 0)", (long long)m->n_kv,
                          (long long)c);
    if (source_init(&ts, m, r, c, max_mem, e) != 0)
        return -1;
    if (sink_open(&sk, f, o, e) != 0) {
        source_release(&ts);
        return -1;
    }
    nnz_row = malloc((size_t)ts.n_qb * sizeof *nnz_row);
    row = malloc((size_t)(ts.n_kb ? ts.n_kb : 1) * sizeof *row);
    if (!nnz_row || !row)
        rc = kv_err_set(e, "out of memory");
    for (int64_t a = 0; rc == 0 && a < ts.n_qb; a++) {
        const struct kv_tile_scan *s = source_runs(&ts, 0, a);
        size_t bits, bytes;
        nnz_row[a] = ts.n_kb - count_state(s->runs, s->n_runs, KV_TILE_EMPTY);
        nnz += (uint64_t)nnz_row[a];
        /* rows x nnz x C bits per block row (the last block row has only
         * its real rows, as FlashInfer's plan packs it): huge tiles
         * overflow 64 bits */
        if (with_mask &&
            (kv_size_mul((size_t)bsr_rows(m, r, a), (size_t)nnz_row[a], &bits) ||
             kv_size_mul(bits, (size_t)c, &bits) ||
             kv_size_add(mask_bytes, bits / 8 + (bits % 8 != 0), &bytes)))
            rc = kv_err_set(e, "BSR block mask of %lld x %lld blocks: its "
                            "size overflows; use --no-mask", (long long)r,
                            (long long)c);
        else if (with_mask)
            mask_bytes = bytes;
    }
    if (rc == 0 && nnz > INT32_MAX)
        rc = kv_err_set(e, "BSR with %llu blocks: indptr does not fit int32",
                        (unsigned long long)nnz);
    if (rc == 0 && with_mask && max_mem && mask_bytes > max_mem)
        rc = kv_err_set(e, "BSR block mask needs %llu bytes, more than "
                        "--max-mem %zu; use --no-mask", (unsigned long long)
                        mask_bytes, max_mem);
    int64_t sh = ts.n_qb + 1;
    if (rc == 0)
        rc = sink_begin(&sk, "indptr", KV_I32, 1, &sh, e);
    int32_t acc = 0;
    for (int64_t a = 0; rc == 0 && a <= ts.n_qb; a++) {
        rc = sink_put(&sk, &acc, 0, 1, e);
        if (a < ts.n_qb)
            acc += (int32_t)nnz_row[a];
    }
    if (rc == 0)
        rc = sink_end(&sk, e);
    sh = (int64_t)nnz;
    if (rc == 0)
        rc = sink_begin(&sk, "indices", KV_I32, 1, &sh, e);
    for (int64_t a = 0; rc == 0 && a < ts.n_qb; a++) {
        const struct kv_tile_scan *s = source_runs(&ts, 0, a);
        int64_t k = 0;
        for (size_t q = 0; q < s->n_runs; q++)
            if (s->runs[q].state != KV_TILE_EMPTY)
                for (int64_t t = s->runs[q].start; t < s->runs[q].end; t++)
                    row[k++] = (int32_t)t;
        if (k)
            rc = sink_put(&sk, row, 0, (size_t)k, e);
    }
    if (rc == 0)
        rc = sink_end(&sk, e);
    if (rc == 0 && with_mask) {
        sh = (int64_t)mask_bytes;
        rc = sink_begin(&sk, "packed_mask", KV_U8, 1, &sh, e);
        struct bitw b = { .buf = NULL };
        uint64_t widest = 0;
        for (int64_t a = 0; a < ts.n_qb; a++)
            if ((uint64_t)(bsr_rows(m, r, a) * nnz_row[a] * c) > widest)
                widest = (uint64_t)(bsr_rows(m, r, a) * nnz_row[a] * c);
        if (rc == 0)
            rc = bitw_init(&b, sk.text ? NULL : &sk.ao, sk.text ? mask_bytes * 8 + 8
                                                           : widest + 16, e);
        uint64_t seg = 0;      /* bit offset of the block row's segment */
        for (int64_t a = 0; rc == 0 && a < ts.n_qb; a++) {
            const struct kv_tile_scan *s = source_runs(&ts, 0, a);
            uint64_t width = (uint64_t)(nnz_row[a] * c);
            uint64_t rows = (uint64_t)bsr_rows(m, r, a);
            if (!sk.text)
                rc = bitw_reserve(&b, seg, width * rows, e);
            for (int64_t rr = 0; rc == 0 && rr < r; rr++) {
                int64_t i = a * r + rr;
                if (i >= m->n_q)
                    break;
                int n = kv_mask_row(m, i, lo, hi);
                uint64_t base = seg + (uint64_t)rr * width;
                int64_t rank = 0;     /* nonzero blocks before this run */
                for (size_t q = 0; q < s->n_runs; q++) {
                    const struct kv_tile_run *run = &s->runs[q];
                    if (run->state == KV_TILE_EMPTY)
                        continue;
                    int64_t x0 = run->start * c, x1 = run->end * c;
                    for (int k = 0; k < n; k++) {
                        int64_t a0 = max64(lo[k], x0), a1 = min64(hi[k], x1);
                        if (a1 > a0)
                            bitw_set(&b, base + (uint64_t)(rank * c + a0 - x0),
                                     base + (uint64_t)(rank * c + a1 - x0));
                    }
                    rank += run->end - run->start;
                }
            }
            seg += (width * rows + 7) / 8 * 8;
        }
        b.big = o->bits_big;
        if (rc == 0 && sk.text) {
            if (b.big)
                reverse_bits(b.buf, (size_t)mask_bytes);
            rc = sink_put(&sk, b.buf, 1, (size_t)mask_bytes, e);
            free(b.buf);
        } else if (rc == 0) {
            rc = bitw_finish(&b, seg, e);
        } else {
            free(b.buf);
        }
        if (rc == 0)
            rc = sink_end(&sk, e);
    }
    free(nnz_row);
    free(row);
    source_release(&ts);
    return sink_close(&sk, rc, e);
}

/* Statistics as text fields or (json) one JSON object: the head's fields
 * are gathered in an object, written without its closing brace, and the
 * rows' first and last columns streamed after it as two arrays. */
static int write_stats(FILE *f, const struct kv_mask *m, int64_t bq,
                       int64_t bk, int json, struct kv_err *e)
{
    uint64_t kept = kv_mask_kept(m);
    double total = (double)m->n_q * (double)m->n_kv;
    int64_t lo[2], hi[2];
    int rc = 0;
    json_t *o = json ? json_object() : NULL;

    if (json && !o)
        return kv_err_set(e, "out of memory");
    if (m->rows_per_mat > 0) {   /* a batch of matrices, as npy has it */
        int64_t sh[3] = { m->n_q / m->rows_per_mat, m->rows_per_mat, m->n_kv };
        if (json)
            json_object_set_new(o, "shape", kv_json_dims(3, sh));
        else
            fprintf(f, "shape: %lld %lld %lld\n", (long long)sh[0],
                    (long long)sh[1], (long long)sh[2]);
    } else {
        int64_t sh[2] = { m->n_q, m->n_kv };
        if (json)
            json_object_set_new(o, "shape", kv_json_dims(2, sh));
        else
            fprintf(f, "shape: %lld %lld\n", (long long)sh[0],
                    (long long)sh[1]);
    }
    if (json) {
        json_object_set_new(o, "kept", json_integer((json_int_t)kept));
        json_object_set_new(o, "total", json_integer((json_int_t)total));
        json_object_set_new(o, "density", kv_json_fig((double)kept / total, 9, 1));
    } else {
        fprintf(f, "kept: %llu\n", (unsigned long long)kept);
        fprintf(f, "total: %.0f\n", total);
        fprintf(f, "density: %.9g\n", (double)kept / total);
    }
    if (bq > 0 && bk > 0) {
        struct tile_source ts;
        uint64_t cnt[3] = { 0, 0, 0 };
        if (source_init(&ts, m, bq, bk, 0, e) != 0) {
            json_decref(o);
            return -1;
        }
        for (int64_t a = 0; a < ts.n_qb; a++) {
            const struct kv_tile_scan *s = source_runs(&ts, 0, a);
            for (size_t q = 0; q < s->n_runs; q++)
                cnt[s->runs[q].state] +=
                    (uint64_t)(s->runs[q].end - s->runs[q].start);
        }
        double nt = (double)ts.n_qb * (double)ts.n_kb;
        if (json) {
            int64_t b[2] = { bq, bk }, t[2] = { ts.n_qb, ts.n_kb };
            json_object_set_new(o, "block_size", kv_json_dims(2, b));
            json_object_set_new(o, "tiles", kv_json_dims(2, t));
            json_object_set_new(o, "full", json_integer((json_int_t)cnt[KV_TILE_FULL]));
            json_object_set_new(o, "partial", json_integer((json_int_t)cnt[KV_TILE_PARTIAL]));
            json_object_set_new(o, "empty", json_integer((json_int_t)cnt[KV_TILE_EMPTY]));
            json_object_set_new(o, "sparsity",
                                kv_json_fig((double)cnt[KV_TILE_EMPTY] / nt, 9, 1));
        } else {
            fprintf(f, "block_size: %lld %lld\n", (long long)bq, (long long)bk);
            fprintf(f, "tiles: %lld %lld\n", (long long)ts.n_qb, (long long)ts.n_kb);
            fprintf(f, "full: %llu\n", (unsigned long long)cnt[KV_TILE_FULL]);
            fprintf(f, "partial: %llu\n", (unsigned long long)cnt[KV_TILE_PARTIAL]);
            fprintf(f, "empty: %llu\n", (unsigned long long)cnt[KV_TILE_EMPTY]);
            fprintf(f, "sparsity: %.9g\n", (double)cnt[KV_TILE_EMPTY] / nt);
        }
        source_release(&ts);
    }
    if (json) {
        char *head = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                   JSON_REAL_PRECISION(15));
        json_decref(o);
        if (!head)
            return kv_err_set(e, "out of memory");
        fwrite(head, 1, strlen(head) - 1, f);   /* all but the '}' */
        free(head);
    }
    for (int pass = 0; pass < 2; pass++) {
        if (json)
            fputs(pass ? "],\"last\":[" : ",\"first\":[", f);
        else
            fputs(pass ? "last:" : "first:", f);
        for (int64_t i = 0; i < m->n_q; i++) {
            int n = kv_mask_row(m, i, lo, hi);
            long long x = n == 0 ? -1 : pass ? hi[n - 1] - 1 : lo[0];
            fprintf(f, json ? (i ? ",%lld" : "%lld") : " %lld", x);
        }
        if (!json)
            fputc('\n', f);
    }
    if (json)
        fputs("]}\n", f);
    if (ferror(f))
        rc = kv_err_set(e, "write error: %s", strerror(errno));
    return rc;
}

int kv_mask_write_stats(FILE *f, const struct kv_mask *m, int64_t bq,
                        int64_t bk, struct kv_err *e)
{
    return write_stats(f, m, bq, bk, 0, e);
}

int kv_mask_write_stats_json(FILE *f, const struct kv_mask *m, int64_t bq,
                             int64_t bk, struct kv_err *e)
{
    return write_stats(f, m, bq, bk, 1, e);
}
