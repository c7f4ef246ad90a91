/* mask.c - attention mask rules (see mask.h): a kind and its lengths made
 * into a struct kv_mask, and the rule of an element, a row and a column.
 *
 * Everything here works from the rule of a mask kind, one row (or column)
 * at a time: kv_mask_row() turns the rule of row i into at most two spans
 * of attended columns, dense output is two pattern fills per span, and tile
 * states come from difference arrays over the spans of the rows of one tile
 * row.  Nothing allocates memory proportional to n_q * n_kv.
 *
 * The tile states are in mask_tile.c, the values and the dense writers in
 * mask_dense.c, the compact writers in mask_compact.c, the output stream
 * they share in mask_out.c (mask_int.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "mask/mask_int.h"
#include "mask/tree.h"

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
    free(m->anc);
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
    case KV_MASK_LOCAL:
        if (check_len(s->chunk_size, 1, "--chunk-size", e))
            return -1;
        m->chunk = s->chunk_size;
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

/* A speculative-decoding token tree: n_q tokens after a prefix of
 * P = n_kv - n_q keys; token t's parent parents[t] comes before it (-1: a
 * root).  Each token attends to the prefix, its ancestors and itself,
 * kept as one bit row per token (its parent's row and its own bit). */
static int make_tree(struct kv_mask *m, const struct kv_mask_spec *s, struct kv_err *e)
{
    const int64_t n = s->n_q, *par = s->parents;
    if (kv_tree_check(par, n, e))
        return -1;
    if (s->n_kv < n || s->n_kv > KV_MASK_MAX_LEN)
        return kv_err_set(e, "-p: %lld prefix keys and %lld tokens make "
                          "more than %lld keys", (long long)(s->n_kv - n),
                          (long long)n, (long long)KV_MASK_MAX_LEN);
    m->n_q = n;
    m->n_kv = s->n_kv;
    m->prefix = s->n_kv - n;
    m->anc_words = (n + 63) / 64;
    m->anc = calloc((size_t)(n * m->anc_words), sizeof *m->anc);
    if (!m->anc)
        return kv_err_set(e, "out of memory");
    for (int64_t t = 0; t < n; t++) {
        uint64_t *row = m->anc + t * m->anc_words;
        if (par[t] >= 0)
            memcpy(row, m->anc + par[t] * m->anc_words, (size_t)m->anc_words * sizeof *row);
        row[t / 64] |= (uint64_t)1 << (t % 64);
    }
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
    case KV_MASK_FULL: case KV_MASK_PREFIX: case KV_MASK_LOCAL:
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
    case KV_MASK_TREE:
        rc = make_tree(&t, s, e);
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
    case KV_MASK_TREE: {
        int64_t c = j - m->prefix;
        return c < 0 || (m->anc[i * m->anc_words + c / 64] >> (c % 64) & 1);
    }
    case KV_MASK_POSITIONS:
        return j <= m->pos[i];
    case KV_MASK_HOLE:
        return !(j >= m->hole[2 * i] && j < m->hole[2 * i + 1]);
    case KV_MASK_LOCAL: {
        int64_t ip = i + m->offset;
        return ip >= 0 && j <= ip && j / m->chunk == ip / m->chunk;
    }
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
    case KV_MASK_TREE:
        return -1;
    case KV_MASK_POSITIONS:
        return add_span(n, lo, hi, 0, m->pos[i] + 1, m->n_kv);
    case KV_MASK_HOLE:
        if (m->hole[2 * i] >= m->hole[2 * i + 1])
            return add_span(n, lo, hi, 0, m->n_kv, m->n_kv);
        n = add_span(n, lo, hi, 0, m->hole[2 * i], m->n_kv);
        return add_span(n, lo, hi, m->hole[2 * i + 1], m->n_kv, m->n_kv);
    case KV_MASK_LOCAL: {
        /* the keys of the query's own chunk up to the query (none for a
         * row above the keys, i' < 0) */
        int64_t ip = i + m->offset;
        if (ip < 0)
            return 0;
        return add_span(n, lo, hi, ip / m->chunk * m->chunk, ip + 1, m->n_kv);
    }
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
    case KV_MASK_TREE:
        return -1;
    case KV_MASK_LOCAL:
        /* the rows at positions j .. the end of j's chunk */
        return add_span(n, lo, hi, j - m->offset,
                        (j / m->chunk + 1) * m->chunk - m->offset, m->n_q);
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
    if (m->kind == KV_MASK_TREE) {
        for (int64_t i = 0; i < m->n_q; i++) {
            kept += (uint64_t)m->prefix;
            for (int64_t w = 0; w < m->anc_words; w++)
                kept += (uint64_t)__builtin_popcountll(m->anc[i * m->anc_words + w]);
        }
        return kept;
    }
    for (int64_t i = 0; i < m->n_q; i++) {
        int n = kv_mask_row(m, i, lo, hi);
        for (int k = 0; k < n; k++)
            kept += (uint64_t)(hi[k] - lo[k]);
    }
    return kept;
}
