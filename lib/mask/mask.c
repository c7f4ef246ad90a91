/* mask.c - attention mask rules, tile classification and the writers of
 * every kvmask format (see mask.h).
 *
 * Everything here works from the rule of a mask kind, one row (or column)
 * at a time: kv_mask_row() turns the rule of row i into at most two spans
 * of attended columns, dense output is two pattern fills per span, and tile
 * states come from difference arrays over the spans of the rows of one tile
 * row.  Nothing allocates memory proportional to n_q * n_kv.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mask/mask.h"
#include "mask/blockmask.h"
#include "core/half.h"
#include "core/npy.h"
#include "core/isa.h"
#include <pthread.h>
#include <sys/stat.h>

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void kv_mask_init(struct kv_mask *m)
{
    memset(m, 0, sizeof *m);
}

void kv_mask_release(struct kv_mask *m)
{
    free(m->q_start);
    free(m->kv_start);
    free(m->seg_start);
    free(m->seg_kind);
    free(m->pos);
    free(m->hole);
    kv_mask_init(m);
}

static int check_len(int64_t v, int64_t min, const char *opt, struct kv_err *e)
{
    if (v < min || v > KV_MASK_MAX_LEN)
        return kv_err_set(e, "%s: expected an integer in [%lld, %lld], got %lld",
                          opt, (long long)min, (long long)KV_MASK_MAX_LEN,
                          (long long)v);
    return 0;
}

/* Cumulative starts of n lengths into a new [n + 1] array. */
static int cumulate(const int64_t *len, size_t n, const char *opt,
                    int64_t **out, struct kv_err *e)
{
    int64_t *c = malloc((n + 1) * sizeof *c);
    if (!c)
        return kv_err_set(e, "out of memory");
    c[0] = 0;
    for (size_t r = 0; r < n; r++) {
        c[r + 1] = c[r] + len[r];
        if (c[r + 1] > KV_MASK_MAX_LEN) {
            free(c);
            return kv_err_set(e, "%s: the lengths add up to more than %lld",
                              opt, (long long)KV_MASK_MAX_LEN);
        }
    }
    *out = c;
    return 0;
}

static int make_band(struct kv_mask *m, const struct kv_mask_spec *s,
                     struct kv_err *e)
{
    if (check_len(s->n_q, 1, "-q/-n", e) || check_len(s->n_kv, 1, "-k/-n", e))
        return -1;
    m->n_q = s->n_q;
    m->n_kv = s->n_kv;
    m->offset = s->top_left ? 0 : s->n_kv - s->n_q;
    m->before = KV_MASK_INF;
    m->after = 0;
    switch (s->kind) {
    case KV_MASK_CAUSAL:
        break;
    case KV_MASK_WINDOW:
        if (check_len(s->window, 1, "-w", e))
            return -1;
        m->before = s->window - 1;
        break;
    case KV_MASK_BAND:
        if (check_len(s->pre, 0, "--pre", e) || check_len(s->next, 0, "--next", e))
            return -1;
        m->before = s->pre;
        m->after = s->next;
        break;
    case KV_MASK_FULL:
        m->after = KV_MASK_INF;
        break;
    case KV_MASK_PREFIX:
        if (check_len(s->prefix, 0, "-p", e))
            return -1;
        m->prefix = s->prefix;
        break;
    default:
        return kv_err_set(e, "internal: not a band kind");
    }
    return 0;
}

static int make_varlen(struct kv_mask *m, const struct kv_mask_spec *s,
                       struct kv_err *e)
{
    const int64_t *kv = s->kv_lens ? s->kv_lens : s->q_lens;
    if (s->n_req == 0 || !s->q_lens)
        return kv_err_set(e, "--q-lens: expected at least one request length");
    /* a request may be empty (0 queries, as the padded slots of a
     * CUDA-graph batch, or 0 keys), the batch may not */
    for (size_t r = 0; r < s->n_req; r++)
        if (check_len(s->q_lens[r], 0, "--q-lens", e) ||
            check_len(kv[r], 0, "--kv-lens", e))
            return -1;
    if (s->window != 0 && check_len(s->window, 1, "-w", e))
        return -1;
    m->n_req = s->n_req;
    m->top_left = s->top_left;
    m->before = s->window ? s->window - 1 : KV_MASK_INF;
    m->after = 0;
    if (cumulate(s->q_lens, s->n_req, "--q-lens", &m->q_start, e) ||
        cumulate(kv, s->n_req, "--kv-lens", &m->kv_start, e))
        return -1;
    m->n_q = m->q_start[s->n_req];
    m->n_kv = m->kv_start[s->n_req];
    if (m->n_q == 0)
        return kv_err_set(e, "--q-lens: every request has 0 queries");
    if (m->n_kv == 0)
        return kv_err_set(e, "--kv-lens: every request has 0 keys");
    return 0;
}

static int make_chunk(struct kv_mask *m, const struct kv_mask_spec *s,
                      struct kv_err *e)
{
    static const char *names[] = { "sys", "chunk", "question" };
    size_t n = 0;
    int64_t total = 0;
    int last = KV_SEG_SYS;

    if (s->n_seg == 0)
        return kv_err_set(e, "segments: no segment given");
    for (size_t k = 0; k < s->n_seg; k++) {
        if (s->seg_kinds[k] > KV_SEG_QUESTION)
            return kv_err_set(e, "segments: segment %zu: unknown kind %u",
                              k, s->seg_kinds[k]);
        if (s->seg_lens[k] < 0 || s->seg_lens[k] > KV_MASK_MAX_LEN)
            return kv_err_set(e, "segments: segment %zu (%s): bad length %lld",
                              k, names[s->seg_kinds[k]],
                              (long long)s->seg_lens[k]);
        if (s->seg_lens[k] == 0)
            continue;
        if (s->seg_kinds[k] < last)
            return kv_err_set(e, "segments: segment %zu: a %s segment after a "
                              "%s segment (expected sys, then chunks, then the "
                              "question)", k, names[s->seg_kinds[k]],
                              names[last]);
        last = s->seg_kinds[k];
        total += s->seg_lens[k];
        if (total > KV_MASK_MAX_LEN)
            return kv_err_set(e, "segments: more than %lld tokens",
                              (long long)KV_MASK_MAX_LEN);
        n++;
    }
    if (total == 0)
        return kv_err_set(e, "segments: all segments are empty");
    m->seg_start = malloc((n + 1) * sizeof *m->seg_start);
    m->seg_kind = malloc(n);
    if (!m->seg_start || !m->seg_kind)
        return kv_err_set(e, "out of memory");
    m->n_seg = n;
    m->seg_start[0] = 0;
    m->sys_end = 0;
    m->q_begin = total;
    n = 0;
    for (size_t k = 0; k < s->n_seg; k++) {
        if (s->seg_lens[k] == 0)
            continue;
        m->seg_kind[n] = s->seg_kinds[k];
        m->seg_start[n + 1] = m->seg_start[n] + s->seg_lens[k];
        if (s->seg_kinds[k] == KV_SEG_SYS)
            m->sys_end = m->seg_start[n + 1];
        if (s->seg_kinds[k] == KV_SEG_QUESTION && m->q_begin == total)
            m->q_begin = m->seg_start[n];
        n++;
    }
    m->n_q = m->n_kv = total;
    return 0;
}

int kv_mask_make(struct kv_mask *m, const struct kv_mask_spec *s,
                 struct kv_err *e)
{
    struct kv_mask t;
    int rc;

    kv_mask_init(&t);
    t.kind = s->kind;
    switch (s->kind) {
    case KV_MASK_CAUSAL: case KV_MASK_WINDOW: case KV_MASK_BAND:
    case KV_MASK_FULL: case KV_MASK_PREFIX:
        rc = make_band(&t, s, e);
        break;
    case KV_MASK_VARLEN:
        rc = make_varlen(&t, s, e);
        break;
    case KV_MASK_CHUNK:
        rc = make_chunk(&t, s, e);
        break;
    case KV_MASK_POSITIONS:
        rc = check_len(s->n_q, 1, "--positions", e);
        if (rc == 0)
            rc = check_len(s->n_kv, 1, "--seq-lens", e);
        if (rc == 0) {
            t.n_q = s->n_q;
            t.n_kv = s->n_kv;
            t.pos = malloc((size_t)s->n_q * sizeof *t.pos);
            if (!t.pos)
                rc = kv_err_set(e, "out of memory");
        }
        for (int64_t i = 0; rc == 0 && i < s->n_q; i++) {
            rc = check_len(s->positions[i], 0, "--positions", e);
            if (rc == 0)
                t.pos[i] = s->positions[i];
        }
        break;
    case KV_MASK_HOLE:
        rc = check_len(s->n_q, 1, "--q-lens", e);
        if (rc == 0)
            rc = check_len(s->n_kv, 1, "--cp-rank", e);
        if (rc == 0) {
            t.n_q = s->n_q;
            t.n_kv = s->n_kv;
            t.hole = malloc((size_t)s->n_q * 2 * sizeof *t.hole);
            if (!t.hole)
                rc = kv_err_set(e, "out of memory");
        }
        for (int64_t i = 0; rc == 0 && i < s->n_q; i++) {
            if (s->hole_lo[i] < 0 || s->hole_hi[i] > s->n_kv)
                rc = kv_err_set(e, "row %lld: masked columns [%lld, %lld) "
                                "outside [0, %lld)", (long long)i,
                                (long long)s->hole_lo[i],
                                (long long)s->hole_hi[i], (long long)s->n_kv);
            t.hole[2 * i] = s->hole_lo[i];
            t.hole[2 * i + 1] = s->hole_hi[i];
        }
        break;
    default:
        rc = kv_err_set(e, "unknown mask kind %d", (int)s->kind);
    }
    if (rc == 0 && s->rows_per_mat > 0) {
        if (t.n_q % s->rows_per_mat != 0)
            rc = kv_err_set(e, "%lld rows do not split into matrices of %lld",
                            (long long)t.n_q, (long long)s->rows_per_mat);
        t.rows_per_mat = s->rows_per_mat;
    }
    if (rc != 0) {
        kv_mask_release(&t);
        return -1;
    }
    kv_mask_release(m);
    *m = t;
    return 0;
}

/* ---- the rule ------------------------------------------------------- */

int kv_mask_at(const struct kv_mask *m, int64_t i, int64_t j)
{
    if (i < 0 || i >= m->n_q || j < 0 || j >= m->n_kv)
        return 0;
    switch (m->kind) {
    case KV_MASK_VARLEN:
        for (size_t r = 0; r < m->n_req; r++) {
            int64_t qs = m->q_start[r], ks = m->kv_start[r];
            int64_t q = m->q_start[r + 1] - qs, kv = m->kv_start[r + 1] - ks;
            if (i < qs || i >= qs + q)
                continue;
            if (j < ks || j >= ks + kv)
                return 0;
            int64_t ip = (i - qs) + (m->top_left ? 0 : kv - q);
            return j - ks <= ip + m->after && j - ks >= ip - m->before;
        }
        return 0;
    case KV_MASK_CHUNK: {
        size_t si = 0, sj = 0;
        while (m->seg_start[si + 1] <= i)
            si++;
        while (m->seg_start[sj + 1] <= j)
            sj++;
        if (j > i)
            return 0;
        return m->seg_kind[si] != KV_SEG_CHUNK || m->seg_kind[sj] == KV_SEG_SYS
               || si == sj;
    }
    case KV_MASK_POSITIONS:
        return j <= m->pos[i];
    case KV_MASK_HOLE:
        return !(j >= m->hole[2 * i] && j < m->hole[2 * i + 1]);
    default: {
        int64_t ip = i + m->offset;
        return j < m->prefix || (j >= ip - m->before && j <= ip + m->after);
    }
    }
}

/* Index r with start[r] <= x < start[r + 1] (start ascending, n + 1
 * entries, x inside). */
static size_t find_run(const int64_t *start, size_t n, int64_t x)
{
    size_t lo = 0, hi = n;     /* answer in [lo, hi) */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (start[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Append span [a, b) clipped to [0, len), merging with the previous one
 * when they touch. */
static int add_span(int n, int64_t lo[2], int64_t hi[2], int64_t a,
                    int64_t b, int64_t len)
{
    a = max64(a, 0);
    b = min64(b, len);
    if (b <= a)
        return n;
    if (n > 0 && a <= hi[n - 1]) {
        if (b > hi[n - 1])
            hi[n - 1] = b;
        return n;
    }
    lo[n] = a;
    hi[n] = b;
    return n + 1;
}

int kv_mask_row(const struct kv_mask *m, int64_t i, int64_t lo[2],
                int64_t hi[2])
{
    int n = 0;
    switch (m->kind) {
    case KV_MASK_VARLEN: {
        size_t r = find_run(m->q_start, m->n_req, i);
        int64_t qs = m->q_start[r], ks = m->kv_start[r];
        int64_t q = m->q_start[r + 1] - qs, kv = m->kv_start[r + 1] - ks;
        int64_t ip = (i - qs) + (m->top_left ? 0 : kv - q);
        int64_t a = max64(0, ip - m->before), b = min64(kv, ip + m->after + 1);
        if (b > a)
            n = add_span(n, lo, hi, ks + a, ks + b, m->n_kv);
        return n;
    }
    case KV_MASK_CHUNK: {
        size_t s = find_run(m->seg_start, m->n_seg, i);
        if (m->seg_kind[s] == KV_SEG_CHUNK) {
            n = add_span(n, lo, hi, 0, m->sys_end, m->n_kv);
            return add_span(n, lo, hi, m->seg_start[s], i + 1, m->n_kv);
        }
        return add_span(n, lo, hi, 0, i + 1, m->n_kv);
    }
    case KV_MASK_POSITIONS:
        return add_span(n, lo, hi, 0, m->pos[i] + 1, m->n_kv);
    case KV_MASK_HOLE:
        if (m->hole[2 * i] >= m->hole[2 * i + 1])
            return add_span(n, lo, hi, 0, m->n_kv, m->n_kv);
        n = add_span(n, lo, hi, 0, m->hole[2 * i], m->n_kv);
        return add_span(n, lo, hi, m->hole[2 * i + 1], m->n_kv, m->n_kv);
    default: {
        int64_t ip = i + m->offset;
        n = add_span(n, lo, hi, 0, m->prefix, m->n_kv);
        return add_span(n, lo, hi, ip - m->before, ip + m->after + 1, m->n_kv);
    }
    }
}

int kv_mask_col(const struct kv_mask *m, int64_t j, int64_t lo[2],
                int64_t hi[2])
{
    int n = 0;
    switch (m->kind) {
    case KV_MASK_VARLEN: {
        size_t r = find_run(m->kv_start, m->n_req, j);
        int64_t qs = m->q_start[r], ks = m->kv_start[r];
        int64_t q = m->q_start[r + 1] - qs, kv = m->kv_start[r + 1] - ks;
        int64_t d = m->top_left ? 0 : kv - q, lk = j - ks;
        /* lk <= li + d + after and lk >= li + d - before */
        int64_t a = max64(0, lk - d - m->after);
        int64_t b = min64(q, lk - d + m->before + 1);
        if (b > a)
            n = add_span(n, lo, hi, qs + a, qs + b, m->n_q);
        return n;
    }
    case KV_MASK_CHUNK: {
        size_t s = find_run(m->seg_start, m->n_seg, j);
        if (m->seg_kind[s] == KV_SEG_CHUNK) {
            n = add_span(n, lo, hi, j, m->seg_start[s + 1], m->n_q);
            return add_span(n, lo, hi, m->q_begin, m->n_q, m->n_q);
        }
        return add_span(n, lo, hi, j, m->n_q, m->n_q);
    }
    case KV_MASK_POSITIONS:
    case KV_MASK_HOLE:
        return -1;
    default:
        if (j < m->prefix)
            return add_span(n, lo, hi, 0, m->n_q, m->n_q);
        return add_span(n, lo, hi, j - m->after - m->offset,
                        j + m->before - m->offset + 1, m->n_q);
    }
}

uint64_t kv_mask_kept(const struct kv_mask *m)
{
    uint64_t kept = 0;
    int64_t lo[2], hi[2];
    for (int64_t i = 0; i < m->n_q; i++) {
        int n = kv_mask_row(m, i, lo, hi);
        for (int k = 0; k < n; k++)
            kept += (uint64_t)(hi[k] - lo[k]);
    }
    return kept;
}

/* ---- tile states ------------------------------------------------------ */

int kv_tile_scan_init(struct kv_tile_scan *s, const struct kv_mask *m,
                      int cols, int64_t bq, int64_t bk, struct kv_err *e)
{
    memset(s, 0, sizeof *s);
    s->n_tiles = cols ? ceil_div(m->n_q, bq) : ceil_div(m->n_kv, bk);
    size_t n = (size_t)s->n_tiles + 2;
    s->touch = calloc(n, sizeof *s->touch);
    s->full = calloc(n, sizeof *s->full);
    s->dirty = malloc(n * sizeof *s->dirty);
    s->is_dirty = calloc(n, 1);
    s->runs = malloc(n * sizeof *s->runs);
    if (!s->touch || !s->full || !s->dirty || !s->is_dirty || !s->runs) {
        long long tiles = (long long)s->n_tiles;  /* release clears it */
        kv_tile_scan_release(s);
        return kv_err_set(e, "out of memory (%lld tiles)", tiles);
    }
    return 0;
}

void kv_tile_scan_release(struct kv_tile_scan *s)
{
    free(s->touch);
    free(s->full);
    free(s->dirty);
    free(s->is_dirty);
    free(s->runs);
    memset(s, 0, sizeof *s);
}

static void mark(struct kv_tile_scan *s, int64_t p)
{
    if (!s->is_dirty[p]) {
        s->is_dirty[p] = 1;
        s->dirty[s->n_dirty++] = p;
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void push_run(struct kv_tile_scan *s, int64_t a, int64_t b,
                     uint8_t state)
{
    if (b <= a)
        return;
    if (s->n_runs > 0 && s->runs[s->n_runs - 1].state == state &&
        s->runs[s->n_runs - 1].end == a) {
        s->runs[s->n_runs - 1].end = b;
        return;
    }
    s->runs[s->n_runs].start = a;
    s->runs[s->n_runs].end = b;
    s->runs[s->n_runs].state = state;
    s->n_runs++;
}

/* The states of one row of tiles, in time proportional to its lines (rows
 * of the tile row) plus the number of distinct tile boundaries they touch,
 * not to the number of tiles.  Every span [lo, hi) of a line adds 1 over
 * the tiles it touches (`touch`) and over the tiles it covers entirely
 * (`full`), as +1/-1 at the two ends of a difference array; the positions
 * written are kept in `dirty`.  Sweeping the sorted dirty positions gives,
 * between two of them, a constant number of lines touching and of lines
 * covering the tiles: empty when none touches, full when all line_block
 * lines cover (a partial last tile row or column never reaches that),
 * partial otherwise.  The arrays are zeroed again as they are read. */
int kv_tile_runs(struct kv_tile_scan *s, const struct kv_mask *m, int cols,
                 int64_t blk, int64_t bq, int64_t bk)
{
    int64_t line_block = cols ? bk : bq;      /* lines in a tile */
    int64_t w = cols ? bq : bk;               /* tile width along a line */
    int64_t n_lines = cols ? m->n_kv : m->n_q;
    int64_t l0 = blk * line_block, l1 = min64(l0 + line_block, n_lines);
    int64_t lo[2], hi[2];

    s->n_dirty = 0;
    s->n_runs = 0;
    for (int64_t l = l0; l < l1; l++) {
        int n = cols ? kv_mask_col(m, l, lo, hi) : kv_mask_row(m, l, lo, hi);
        if (n < 0)
            return -1;
        for (int k = 0; k < n; k++) {
            int64_t t0 = lo[k] / w, t1 = (hi[k] - 1) / w + 1;
            s->touch[t0]++;
            s->touch[t1]--;
            mark(s, t0);
            mark(s, t1);
            int64_t f0 = ceil_div(lo[k], w), f1 = hi[k] / w;
            if (f1 > f0) {
                s->full[f0]++;
                s->full[f1]--;
                mark(s, f0);
                mark(s, f1);
            }
        }
    }
    if (s->n_dirty > (size_t)s->n_tiles / 4) {
        size_t k = 0;     /* dense: collect in order by a scan */
        for (int64_t p = 0; p <= s->n_tiles; p++)
            if (s->is_dirty[p])
                s->dirty[k++] = p;
    } else if (s->n_dirty > 1) {
        qsort(s->dirty, s->n_dirty, sizeof *s->dirty, cmp_i64);
    }
    int64_t cur = 0, c = 0, fc = 0;
    for (size_t k = 0; k < s->n_dirty; k++) {
        int64_t p = s->dirty[k];
        uint8_t st = c == 0 ? KV_TILE_EMPTY :
                     fc == line_block ? KV_TILE_FULL : KV_TILE_PARTIAL;
        push_run(s, cur, min64(p, s->n_tiles), st);
        c += s->touch[p];
        fc += s->full[p];
        s->touch[p] = s->full[p] = 0;
        s->is_dirty[p] = 0;
        cur = p;
    }
    push_run(s, cur, s->n_tiles, KV_TILE_EMPTY);
    return 0;
}

void kv_tile_states_ref(const struct kv_mask *m, int64_t bq, int64_t bk,
                        uint8_t *tiles)
{
    int64_t n_qb = ceil_div(m->n_q, bq), n_kb = ceil_div(m->n_kv, bk);
    for (int64_t a = 0; a < n_qb; a++)
        for (int64_t b = 0; b < n_kb; b++) {
            uint64_t kept = 0;
            int64_t rows = min64(bq, m->n_q - a * bq);
            int64_t cols = min64(bk, m->n_kv - b * bk);
            for (int64_t i = a * bq; i < a * bq + rows; i++)
                for (int64_t j = b * bk; j < b * bk + cols; j++)
                    kept += (uint64_t)kv_mask_at(m, i, j);
            tiles[a * n_kb + b] = kv_tile_state(kept, rows, cols, bq, bk);
        }
}

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

/* ---- writers ---------------------------------------------------------- */

static int64_t n_outer(const struct kv_mask_out *o)
{
    int64_t n = 1;
    for (int d = 0; d < o->n_outer_dims; d++)
        n *= o->outer[d];
    return n;
}

/* Report progress every 2^shift units of work. */
static void tick(const struct kv_mask_out *o, uint64_t done, uint64_t total,
                 int shift)
{
    if (o->progress && (done & (((uint64_t)1 << shift) - 1)) == 0)
        o->progress(o->progress_ctx, done, total);
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

#define CHUNK_BYTES ((size_t)512 << 10)

/* Binary output through two large buffers: the caller fills one while a
 * writer thread writes the other (threads > 1), so rendering and the write
 * system calls overlap; with one thread the buffer is written in place.
 * The bytes written are the same either way. */
struct aout {
    FILE *f;
    int threaded;
    uint8_t *buf[2];
    size_t cap, len;
    int cur;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;            /* buffer handed to the writer, -1 none */
    size_t pending_len;
    int done, err;
};

static void *aout_writer(void *arg)
{
    struct aout *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->pending < 0 && !a->done)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->pending < 0)
            break;
        int k = a->pending;
        size_t n = a->pending_len;
        pthread_mutex_unlock(&a->mu);
        int err = 0;
        if (n && fwrite(a->buf[k], 1, n, a->f) != n)
            err = errno ? errno : EIO;
        pthread_mutex_lock(&a->mu);
        if (err && !a->err)
            a->err = err;
        a->pending = -1;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static int aout_open(struct aout *a, FILE *f, int threads, struct kv_err *e)
{
    memset(a, 0, sizeof *a);
    a->f = f;
    a->cap = CHUNK_BYTES;
    a->pending = -1;
    a->threaded = threads > 1;
    /* a character device (a terminal, /dev/null) takes writes without
     * copying them: a writer thread would only add hand-offs */
    struct stat st;
    int fd = fileno(f);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode))
        a->threaded = 0;
    a->buf[0] = malloc(a->cap);
    a->buf[1] = a->threaded ? malloc(a->cap) : NULL;
    if (!a->buf[0] || (a->threaded && !a->buf[1])) {
        free(a->buf[0]);
        free(a->buf[1]);
        return kv_err_set(e, "out of memory");
    }
    if (a->threaded) {
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
        if (pthread_create(&a->th, NULL, aout_writer, a) != 0) {
            pthread_mutex_destroy(&a->mu);
            pthread_cond_destroy(&a->cv);
            a->threaded = 0;       /* fall back to writing in place */
        }
    }
    return 0;
}

/* Hand the filled buffer to the writer (or write it). */
static int aout_flush(struct aout *a, struct kv_err *e)
{
    if (a->len == 0)
        return 0;
    if (!a->threaded) {
        int rc = kv_write_all(a->f, a->buf[0], a->len, e);
        a->len = 0;
        return rc;
    }
    pthread_mutex_lock(&a->mu);
    while (a->pending >= 0)
        pthread_cond_wait(&a->cv, &a->mu);
    int err = a->err;
    if (!err) {
        a->pending = a->cur;
        a->pending_len = a->len;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    if (err)
        return kv_err_set(e, "write error: %s", strerror(err));
    a->cur ^= 1;
    a->len = 0;
    return 0;
}

/* Room for n contiguous bytes, or NULL when n exceeds a buffer (*rc set
 * on a write error). */
static void *aout_slot(struct aout *a, size_t n, struct kv_err *e, int *rc)
{
    *rc = 0;
    if (n > a->cap)
        return NULL;
    if (a->len + n > a->cap && (*rc = aout_flush(a, e)) != 0)
        return NULL;
    void *p = a->buf[a->cur] + a->len;
    a->len += n;
    return p;
}

static int aout_put(struct aout *a, const void *data, size_t n,
                    struct kv_err *e)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (a->len == a->cap && aout_flush(a, e) != 0)
            return -1;
        size_t k = a->cap - a->len < n ? a->cap - a->len : n;
        memcpy(a->buf[a->cur] + a->len, p, k);
        a->len += k;
        p += k;
        n -= k;
    }
    return 0;
}

static int aout_header(struct aout *a, enum kv_dtype dt, int nd,
                       const int64_t *shape, struct kv_err *e)
{
    char *h = NULL;
    size_t hl = 0;
    FILE *m = open_memstream(&h, &hl);
    if (!m)
        return kv_err_set(e, "out of memory");
    int rc = kv_npy_write_header(m, dt, nd, shape, e);
    if (fclose(m) != 0 && rc == 0)
        rc = kv_err_set(e, "out of memory");
    if (rc == 0)
        rc = aout_put(a, h, hl, e);
    free(h);
    return rc;
}

/* Write what is left, stop the writer, free; returns the first error. */
static int aout_close(struct aout *a, int rc, struct kv_err *e)
{
    if (rc == 0)
        rc = aout_flush(a, e);
    if (a->threaded) {
        pthread_mutex_lock(&a->mu);
        while (a->pending >= 0)
            pthread_cond_wait(&a->cv, &a->mu);
        a->done = 1;
        pthread_cond_broadcast(&a->cv);
        int err = a->err;
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->th, NULL);
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        if (err && rc == 0)
            rc = kv_err_set(e, "write error: %s", strerror(err));
    }
    free(a->buf[0]);
    free(a->buf[1]);
    a->buf[0] = a->buf[1] = NULL;
    return rc;
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
    if (aout_open(&ao, f, o->threads, e) != 0)
        return -1;
    rc = aout_header(&ao, v->dtype, nd, shape, e);
    if (nz) {
        int64_t r16 = shape[2];
        for (int64_t cb = 0; rc == 0 && cb < shape[1]; cb++)
            for (int64_t i = 0; rc == 0 && i < r16; i++) {
                void *p = aout_slot(&ao, 16 * es, e, &rc);
                if (p)
                    render_cols(m, v, i, cb * 16, cb * 16 + 16, p);
            }
        return aout_close(&ao, rc, e);
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
        rc = aout_flush(&ao, e);
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
                rc = aout_put(&ao, row, row_bytes, e);
            tick(o, (uint64_t)(rep * m->n_q + i), (uint64_t)(reps * m->n_q), 10);
        }
    free(row);
    rc = aout_close(&ao, rc, e);
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
                int keep = k < n && j >= lo[k];
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
    if (aout_put(b->ao, b->buf, whole, e) != 0)
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
    int rc = aout_put(b->ao, b->buf, n, e);
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
        return aout_open(&s->ao, f, o->threads, e);
    return 0;
}

static int sink_close(struct sink *s, int rc, struct kv_err *e)
{
    if (!s->text)
        return aout_close(&s->ao, rc, e);
    return rc;
}

static int sink_begin(struct sink *s, const char *name, enum kv_dtype dt,
                      int nd, const int64_t *shape, struct kv_err *e)
{
    s->one_d = nd == 1;
    if (!s->text)
        return aout_header(&s->ao, dt, nd, shape, e);
    if (fprintf(s->f, s->one_d ? "%s:" : "%s:\n", name) < 0)
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

/* n values (int32 or u8); for text with ndim >= 2 they are one row. */
static int sink_put(struct sink *s, const void *vals, int is_u8, size_t n,
                    struct kv_err *e)
{
    if (!s->text)
        return aout_put(&s->ao, vals, n * (is_u8 ? 1 : 4), e);
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

int kv_mask_write_stats(FILE *f, const struct kv_mask *m, int64_t bq,
                        int64_t bk, struct kv_err *e)
{
    uint64_t kept = kv_mask_kept(m);
    double total = (double)m->n_q * (double)m->n_kv;
    int64_t lo[2], hi[2];
    int rc = 0;

    if (m->rows_per_mat > 0)     /* a batch of matrices, as npy has it */
        fprintf(f, "shape: %lld %lld %lld\n",
                (long long)(m->n_q / m->rows_per_mat),
                (long long)m->rows_per_mat, (long long)m->n_kv);
    else
        fprintf(f, "shape: %lld %lld\n", (long long)m->n_q,
                (long long)m->n_kv);
    fprintf(f, "kept: %llu\n", (unsigned long long)kept);
    fprintf(f, "total: %.0f\n", total);
    fprintf(f, "density: %.9g\n", (double)kept / total);
    if (bq > 0 && bk > 0) {
        struct tile_source ts;
        uint64_t cnt[3] = { 0, 0, 0 };
        if (source_init(&ts, m, bq, bk, 0, e) != 0)
            return -1;
        for (int64_t a = 0; a < ts.n_qb; a++) {
            const struct kv_tile_scan *s = source_runs(&ts, 0, a);
            for (size_t q = 0; q < s->n_runs; q++)
                cnt[s->runs[q].state] +=
                    (uint64_t)(s->runs[q].end - s->runs[q].start);
        }
        double nt = (double)ts.n_qb * (double)ts.n_kb;
        fprintf(f, "block_size: %lld %lld\n", (long long)bq, (long long)bk);
        fprintf(f, "tiles: %lld %lld\n", (long long)ts.n_qb, (long long)ts.n_kb);
        fprintf(f, "full: %llu\n", (unsigned long long)cnt[KV_TILE_FULL]);
        fprintf(f, "partial: %llu\n", (unsigned long long)cnt[KV_TILE_PARTIAL]);
        fprintf(f, "empty: %llu\n", (unsigned long long)cnt[KV_TILE_EMPTY]);
        fprintf(f, "sparsity: %.9g\n", (double)cnt[KV_TILE_EMPTY] / nt);
        source_release(&ts);
    }
    for (int pass = 0; pass < 2; pass++) {
        fputs(pass ? "last:" : "first:", f);
        for (int64_t i = 0; i < m->n_q; i++) {
            int n = kv_mask_row(m, i, lo, hi);
            long long x = n == 0 ? -1 : pass ? hi[n - 1] - 1 : lo[0];
            fprintf(f, " %lld", x);
        }
        fputc('\n', f);
    }
    if (ferror(f))
        rc = kv_err_set(e, "write error: %s", strerror(errno));
    return rc;
}
