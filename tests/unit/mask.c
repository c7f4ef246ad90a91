/* mask.c - unit tests of lib/mask/mask.c and lib/mask/blockmask.c.
 *
 * Every fast path is checked against a plain reference on random
 * geometries of every kind: the rule written once more here as a dense
 * matrix straight from the inequalities of kvmask(1); spans against it;
 * tile runs against brute-force tile sums; dense rendering against the
 * per-element reference; and every writer (npy, bits, block, bsr, stats)
 * read back and compared with what the dense matrix gives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "mask/mask.h"
#include "mask/blockmask.h"
#include "tap.h"

static uint64_t rng = 88172645463325252ull;
static int64_t rnd(int64_t lo, int64_t hi)   /* inclusive */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

/* ---- independent dense reference ---------------------------------- */

struct geo {
    enum kv_mask_kind kind;
    int64_t n_q, n_kv, w, pre, next, p;
    int top_left;
    int64_t ql[6], kl[6];
    size_t n_req;
    uint8_t sk[8];
    int64_t sl[8];
    size_t n_seg;
    int64_t pos[64];
    int64_t hl[64], hh[64];
};

/* dense[i][j] = 1 when row i attends column j, from kvmask(1)'s table. */
static uint8_t *dense_ref(const struct geo *g, int64_t *nq, int64_t *nkv)
{
    int64_t Q = g->n_q, K = g->n_kv;
    if (g->kind == KV_MASK_VARLEN) {
        Q = K = 0;
        for (size_t r = 0; r < g->n_req; r++) {
            Q += g->ql[r];
            K += g->kl[r];
        }
    } else if (g->kind == KV_MASK_CHUNK) {
        Q = 0;
        for (size_t s = 0; s < g->n_seg; s++)
            Q += g->sl[s];
        K = Q;
    }
    uint8_t *d = calloc((size_t)(Q * K), 1);
    for (int64_t i = 0; i < Q; i++)
        for (int64_t j = 0; j < K; j++) {
            int keep = 0;
            int64_t ip = i + (g->top_left ? 0 : K - Q);
            switch (g->kind) {
            case KV_MASK_CAUSAL: keep = j <= ip; break;
            case KV_MASK_WINDOW: keep = ip - g->w < j && j <= ip; break;
            case KV_MASK_BAND: keep = ip - g->pre <= j && j <= ip + g->next; break;
            case KV_MASK_FULL: keep = 1; break;
            case KV_MASK_PREFIX: keep = j < g->p || j <= ip; break;
            case KV_MASK_VARLEN: {
                int64_t qs = 0, ks = 0;
                for (size_t r = 0; r < g->n_req; r++) {
                    if (i >= qs && i < qs + g->ql[r] && j >= ks &&
                        j < ks + g->kl[r]) {
                        int64_t li = i - qs, lj = j - ks;
                        int64_t lp = li + (g->top_left ? 0 : g->kl[r] - g->ql[r]);
                        keep = lj <= lp && (g->w == 0 || lj > lp - g->w);
                    }
                    qs += g->ql[r];
                    ks += g->kl[r];
                }
                break;
            }
            case KV_MASK_CHUNK: {
                /* segment of a token: index in the list */
                int64_t at = 0;
                size_t si = 0, sj = 0;
                for (size_t s = 0; s < g->n_seg; s++) {
                    if (i >= at && i < at + g->sl[s]) si = s;
                    if (j >= at && j < at + g->sl[s]) sj = s;
                    at += g->sl[s];
                }
                if (j > i)
                    keep = 0;
                else if (g->sk[si] == KV_SEG_SYS || g->sk[si] == KV_SEG_QUESTION)
                    keep = 1;
                else
                    keep = g->sk[sj] == KV_SEG_SYS || si == sj;
                break;
            }
            case KV_MASK_POSITIONS: keep = j <= g->pos[i]; break;
            case KV_MASK_HOLE: keep = j < g->hl[i] || j >= g->hh[i]; break;
            case KV_MASK_TREE: break;      /* tests/cli/kvmask-tree.sh */
            case KV_MASK_LOCAL: break;     /* tests/unit/groups.c */
            }
            d[i * K + j] = (uint8_t)keep;
        }
    *nq = Q;
    *nkv = K;
    return d;
}

static void random_geo(struct geo *g, enum kv_mask_kind kind)
{
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->n_q = rnd(1, 23);
    g->n_kv = rnd(1, 23);
    g->top_left = (int)rnd(0, 1);
    g->w = rnd(1, 9);
    g->pre = rnd(0, 6);
    g->next = rnd(0, 6);
    g->p = rnd(0, 12);
    if (kind == KV_MASK_VARLEN) {
        g->n_req = (size_t)rnd(1, 5);
        g->w = rnd(0, 1) ? 0 : rnd(1, 6);
        int64_t sq = 0, sk = 0;
        for (size_t r = 0; r < g->n_req; r++) {
            g->ql[r] = rnd(1, 7);
            g->kl[r] = rnd(0, 2) ? g->ql[r] + rnd(0, 6) : rnd(1, 7);
            /* empty requests: no queries (a padded slot) or no keys */
            if (rnd(0, 5) == 0)
                g->ql[r] = 0;
            else if (rnd(0, 5) == 0)
                g->kl[r] = 0;
            sq += g->ql[r];
            sk += g->kl[r];
        }
        if (sq == 0)
            g->ql[0] = 1;
        if (sk == 0)
            g->kl[0] = 1;
    }
    if (kind == KV_MASK_CHUNK) {
        int last = 0;
        g->n_seg = (size_t)rnd(1, 8);
        for (size_t s = 0; s < g->n_seg; s++) {
            last = (int)rnd(last, 2);
            g->sk[s] = (uint8_t)last;
            g->sl[s] = rnd(0, 2) ? rnd(1, 6) : 0;
        }
        g->sl[0] += 1;
    }
    if (kind == KV_MASK_POSITIONS) {
        g->n_q = rnd(1, 40);
        for (int64_t i = 0; i < g->n_q; i++)
            g->pos[i] = rnd(0, g->n_kv + 2);
    }
    if (kind == KV_MASK_HOLE) {
        g->n_q = rnd(1, 40);
        for (int64_t i = 0; i < g->n_q; i++) {
            g->hl[i] = rnd(0, g->n_kv);
            g->hh[i] = rnd(0, 3) ? rnd(g->hl[i], g->n_kv) : g->hl[i];
        }
    }
}

static int build(struct kv_mask *m, const struct geo *g, struct kv_err *e)
{
    struct kv_mask_spec s;
    memset(&s, 0, sizeof s);
    s.kind = g->kind;
    s.n_q = g->n_q;
    s.n_kv = g->n_kv;
    s.top_left = g->top_left;
    s.window = g->w;
    s.pre = g->pre;
    s.next = g->next;
    s.prefix = g->p;
    s.q_lens = g->ql;
    s.kv_lens = g->kl;
    s.n_req = g->n_req;
    s.seg_kinds = g->sk;
    s.seg_lens = g->sl;
    s.n_seg = g->n_seg;
    s.positions = g->pos;
    s.hole_lo = g->hl;
    s.hole_hi = g->hh;
    kv_mask_init(m);
    return kv_mask_make(m, &s, e);
}

/* ---- helpers reading back a writer's output ------------------------ */

struct membuf {
    char *buf;
    size_t len;
};

static FILE *mem_out(struct membuf *b)
{
    b->buf = NULL;
    b->len = 0;
    return open_memstream(&b->buf, &b->len);
}

/* Read array k of an npy stream in memory. */
static int read_nth(const struct membuf *b, int k, struct kv_tensor *t)
{
    FILE *f = fmemopen(b->buf, b->len, "rb");
    struct kv_err e;
    int rc = 0;
    kv_tensor_init(t);
    for (int n = 0; n <= k && rc == 0; n++) {
        kv_tensor_release(t);
        rc = kv_npy_read(f, 0, t, &e);
    }
    fclose(f);
    return rc;
}

static int count_arrays(const struct membuf *b)
{
    FILE *f = fmemopen(b->buf, b->len, "rb");
    struct kv_tensor t;
    struct kv_err e;
    int n = 0;
    kv_tensor_init(&t);
    while (kv_npy_read(f, 0, &t, &e) == 0) {
        n++;
        kv_tensor_release(&t);
    }
    fclose(f);
    return n;
}

/* ---- the checks ------------------------------------------------------ */

static const char *kind_name[] = { "causal", "window", "band", "full",
                                   "prefix", "varlen", "chunk", "positions",
                                   "hole" };

static int check_rule(const struct kv_mask *m, const uint8_t *d)
{
    int64_t lo[2], hi[2];
    for (int64_t i = 0; i < m->n_q; i++) {
        int n = kv_mask_row(m, i, lo, hi);
        for (int k = 0; k < n; k++)
            if (lo[k] >= hi[k] || lo[k] < 0 || hi[k] > m->n_kv ||
                (k && lo[k] <= hi[k - 1]))
                return 0;
        for (int64_t j = 0; j < m->n_kv; j++) {
            int in = 0;
            for (int k = 0; k < n; k++)
                in |= j >= lo[k] && j < hi[k];
            if (in != d[i * m->n_kv + j] || kv_mask_at(m, i, j) != in)
                return 0;
        }
    }
    if (m->kind == KV_MASK_POSITIONS || m->kind == KV_MASK_HOLE)
        return kv_mask_col(m, 0, lo, hi) == -1;
    for (int64_t j = 0; j < m->n_kv; j++) {
        int n = kv_mask_col(m, j, lo, hi);
        for (int k = 0; k < n; k++)
            if (lo[k] >= hi[k] || lo[k] < 0 || hi[k] > m->n_q ||
                (k && lo[k] <= hi[k - 1]))
                return 0;
        for (int64_t i = 0; i < m->n_q; i++) {
            int in = 0;
            for (int k = 0; k < n; k++)
                in |= i >= lo[k] && i < hi[k];
            if (in != d[i * m->n_kv + j])
                return 0;
        }
    }
    return 1;
}

/* Tile states from the dense matrix. */
static uint8_t *tiles_of(const uint8_t *d, int64_t Q, int64_t K, int64_t bq,
                         int64_t bk, int64_t *nqb, int64_t *nkb)
{
    int64_t a = (Q + bq - 1) / bq, b = (K + bk - 1) / bk;
    uint8_t *t = malloc((size_t)(a * b));
    for (int64_t x = 0; x < a; x++)
        for (int64_t y = 0; y < b; y++) {
            uint64_t kept = 0;
            int64_t rows = Q - x * bq < bq ? Q - x * bq : bq;
            int64_t cols = K - y * bk < bk ? K - y * bk : bk;
            for (int64_t i = x * bq; i < x * bq + rows; i++)
                for (int64_t j = y * bk; j < y * bk + cols; j++)
                    kept += d[i * K + j];
            t[x * b + y] = kv_tile_state(kept, rows, cols, bq, bk);
        }
    *nqb = a;
    *nkb = b;
    return t;
}

static int check_tiles(const struct kv_mask *m, const uint8_t *d, int64_t bq,
                       int64_t bk)
{
    int64_t a, b;
    uint8_t *t = tiles_of(d, m->n_q, m->n_kv, bq, bk, &a, &b);
    uint8_t *r = malloc((size_t)(a * b));
    struct kv_tile_scan s;
    struct kv_err e;
    int ok = 1;
    kv_tile_states_ref(m, bq, bk, r);
    ok &= memcmp(t, r, (size_t)(a * b)) == 0;
    for (int cols = 0; cols < 2 && ok; cols++) {
        if (cols && (m->kind == KV_MASK_POSITIONS || m->kind == KV_MASK_HOLE))
            break;
        kv_tile_scan_init(&s, m, cols, bq, bk, &e);
        for (int64_t blk = 0; blk < (cols ? b : a) && ok; blk++) {
            kv_tile_runs(&s, m, cols, blk, bq, bk);
            int64_t at = 0;
            for (size_t k = 0; k < s.n_runs; k++) {
                ok &= s.runs[k].start == at && s.runs[k].end > at;
                for (int64_t x = s.runs[k].start; x < s.runs[k].end; x++)
                    ok &= s.runs[k].state ==
                          (cols ? t[x * b + blk] : t[blk * b + x]);
                at = s.runs[k].end;
            }
            ok &= at == (cols ? a : b);
        }
        kv_tile_scan_release(&s);
    }
    free(t);
    free(r);
    return ok;
}

static int check_render(const struct kv_mask *m, const uint8_t *d)
{
    static const enum kv_dtype dts[] = { KV_BOOL, KV_U8, KV_I8, KV_F16,
                                         KV_BF16, KV_F32 };
    struct kv_err e;
    int ok = 1;
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
        for (int keep = 0; keep < 2; keep++) {
            struct kv_mask_values v;
            kv_mask_values_plain(&v, dts[k], keep, NULL, &e);
            size_t es = kv_dtype_size(dts[k]);
            uint8_t *a = malloc((size_t)m->n_kv * es);
            uint8_t *b = malloc((size_t)m->n_kv * es);
            for (int64_t i = 0; i < m->n_q; i++) {
                kv_mask_render_row(m, &v, i, a);
                kv_mask_render_row_ref(m, &v, i, b);
                ok &= memcmp(a, b, (size_t)m->n_kv * es) == 0;
                for (int64_t j = 0; j < m->n_kv; j++) {
                    uint32_t x = 0;
                    memcpy(&x, a + (size_t)j * es, es);
                    ok &= x == (d[i * m->n_kv + j] ? v.keep : v.mask);
                }
            }
            free(a);
            free(b);
        }
    return ok;
}

/* The dense npy writer, with leading dims, reads back as the matrix. */
static int check_npy(const struct kv_mask *m, const uint8_t *d)
{
    struct kv_mask_values v;
    struct kv_mask_out o = { .n_outer_dims = 2, .outer = { 2, 1 },
                             .threads = (int)rnd(1, 2) };
    struct membuf mb;
    struct kv_tensor t;
    struct kv_err e;
    int ok;
    kv_mask_values_plain(&v, KV_BOOL, 1, NULL, &e);
    FILE *f = mem_out(&mb);
    ok = kv_mask_write_npy(f, m, &v, &o, 0, &e) == 0;
    fclose(f);
    ok &= read_nth(&mb, 0, &t) == 0 && t.ndim == 4 && t.shape[0] == 2 &&
          t.shape[1] == 1 && t.shape[2] == m->n_q && t.shape[3] == m->n_kv;
    if (ok) {
        size_t n = (size_t)(m->n_q * m->n_kv);
        ok &= memcmp(t.data, d, n) == 0 &&
              memcmp((uint8_t *)t.data + n, d, n) == 0;
    }
    kv_tensor_release(&t);
    free(mb.buf);
    return ok;
}

/* FlashInfer packbits: little bit order over each request's block. */
static int check_bits(const struct kv_mask *m, const uint8_t *d,
                      const struct geo *g)
{
    struct kv_mask_out o = { .threads = (int)rnd(1, 2) };
    struct membuf mb;
    struct kv_tensor t;
    struct kv_err e;
    size_t n_seg = m->kind == KV_MASK_VARLEN ? g->n_req : 1;
    uint8_t want[4096];
    size_t nb = 0;
    int64_t qs = 0, ks = 0;
    int ok = 1;

    memset(want, 0, sizeof want);
    for (size_t r = 0; r < n_seg; r++) {
        int64_t q = n_seg > 1 || m->kind == KV_MASK_VARLEN ? g->ql[r] : m->n_q;
        int64_t kv = n_seg > 1 || m->kind == KV_MASK_VARLEN ? g->kl[r] : m->n_kv;
        size_t bit = 0;
        for (int64_t i = 0; i < q; i++)
            for (int64_t j = 0; j < kv; j++, bit++)
                if (d[(qs + i) * m->n_kv + ks + j])
                    want[nb + bit / 8] |= (uint8_t)(1u << (bit % 8));
        nb += (bit + 7) / 8;
        qs += q;
        ks += kv;
    }
    FILE *f = mem_out(&mb);
    ok &= kv_mask_write_bits(f, m, &o, &e) == 0;
    fclose(f);
    ok &= read_nth(&mb, 0, &t) == 0 && t.dtype == KV_U8 &&
          t.nbytes == nb && (nb == 0 || memcmp(t.data, want, nb) == 0);
    ok &= count_arrays(&mb) == (m->kind == KV_MASK_VARLEN ? 2 : 1);
    kv_tensor_release(&t);
    free(mb.buf);
    return ok;
}

/* kv_mask_write_block against kv_blockmask_build on dense tiles, and both
 * against a direct reading of the FlexAttention definition. */
static int check_block(const struct kv_mask *m, const uint8_t *d, int64_t bq,
                       int64_t bk)
{
    int64_t a, b;
    uint8_t *t = tiles_of(d, m->n_q, m->n_kv, bq, bk, &a, &b);
    uint8_t *t2 = malloc((size_t)(2 * a * b));
    struct kv_tensor bm[8];
    struct kv_mask_out o = { .n_outer_dims = 1, .outer = { 2, 0 },
                             .threads = (int)rnd(1, 2) };
    struct membuf mb;
    struct kv_err e;
    int64_t outer[2] = { 2, 1 };
    int ok = 1;

    memcpy(t2, t, (size_t)(a * b));
    memcpy(t2 + a * b, t, (size_t)(a * b));
    for (int k = 0; k < 8; k++)
        kv_tensor_init(&bm[k]);
    ok &= kv_blockmask_build(t2, 2, outer, a, b, bm, &e) == 0;
    FILE *f = mem_out(&mb);
    ok &= kv_mask_write_block(f, m, bq, bk, &o, 0, &e) == 0;
    fclose(f);
    for (int k = 0; k < 8 && ok; k++) {
        struct kv_tensor x;
        ok &= read_nth(&mb, k, &x) == 0 && x.dtype == KV_I32 &&
              x.ndim == bm[k].ndim && x.nbytes == bm[k].nbytes &&
              memcmp(x.shape, bm[k].shape, sizeof(int64_t) * (size_t)x.ndim) == 0 &&
              (x.nbytes == 0 || memcmp(x.data, bm[k].data, x.nbytes) == 0);
        kv_tensor_release(&x);
    }
    /* the definition: row r of kv_indices holds the partial columns in
     * ascending order, then the rest ascending */
    if (ok) {
        const int32_t *num = bm[KV_BM_KV_NUM].data, *idx = bm[KV_BM_KV_IDX].data;
        const int32_t *fq = bm[KV_BM_FULL_Q_NUM].data, *fqi = bm[KV_BM_FULL_Q_IDX].data;
        for (int64_t r = 0; r < a; r++) {
            int64_t k = 0;
            for (int64_t c = 0; c < b; c++)
                if (t[r * b + c] == KV_TILE_PARTIAL)
                    ok &= idx[r * b + k++] == c;
            ok &= num[r] == k;
            for (int64_t c = 0; c < b; c++)
                if (t[r * b + c] != KV_TILE_PARTIAL)
                    ok &= idx[r * b + k++] == c;
        }
        for (int64_t c = 0; c < b; c++) {
            int64_t k = 0;
            for (int64_t r = 0; r < a; r++)
                if (t[r * b + c] == KV_TILE_FULL)
                    ok &= fqi[c * a + k++] == r;
            ok &= fq[c] == k;
        }
    }
    for (int k = 0; k < 8; k++)
        kv_tensor_release(&bm[k]);
    free(mb.buf);
    free(t);
    free(t2);
    return ok;
}

/* FlashInfer BSR: indptr/indices of the non-empty tiles, mask laid out
 * [R rows][blocks of the row][C cols] per block row, packed little; the
 * last block row holds only its real rows (FlashInfer's plan packs
 * qo_len = M - R * (block rows - 1) rows there). */
static int check_bsr(const struct kv_mask *m, const uint8_t *d, int64_t R)
{
    int64_t C = 1;
    for (int64_t c = 1; c <= 5; c++)       /* a width dividing n_kv */
        if (m->n_kv % c == 0)
            C = c;
    int64_t a, b;
    uint8_t *t = tiles_of(d, m->n_q, m->n_kv, R, C, &a, &b);
    struct kv_mask_out o = { .threads = (int)rnd(1, 2) };
    struct membuf mb;
    struct kv_tensor ip, ix, pk;
    struct kv_err e;
    int ok = 1;
    uint8_t *want = calloc((size_t)(a * b * R * C / 8 + a + 8), 1);
    size_t wb = 0;

    FILE *f = mem_out(&mb);
    ok &= kv_mask_write_bsr(f, m, R, C, 1, &o, 0, &e) == 0;
    fclose(f);
    ok &= read_nth(&mb, 0, &ip) == 0 && read_nth(&mb, 1, &ix) == 0 &&
          read_nth(&mb, 2, &pk) == 0;
    if (ok) {
        const int32_t *indptr = ip.data, *indices = ix.data;
        int64_t nnz = 0;
        ok &= ip.shape[0] == a + 1 && indptr[0] == 0;
        for (int64_t r = 0; r < a && ok; r++) {
            int64_t row_nnz = 0;
            for (int64_t c = 0; c < b; c++)
                if (t[r * b + c] != KV_TILE_EMPTY) {
                    ok &= indices[nnz + row_nnz] == c;
                    row_nnz++;
                }
            size_t bit = 0;
            for (int64_t rr = 0; rr < R && r * R + rr < m->n_q; rr++)
                for (int64_t c = 0; c < b; c++) {
                    if (t[r * b + c] == KV_TILE_EMPTY)
                        continue;
                    for (int64_t cc = 0; cc < C; cc++, bit++) {
                        int64_t i = r * R + rr, j = c * C + cc;
                        if (i < m->n_q && d[i * m->n_kv + j])
                            want[wb + bit / 8] |= (uint8_t)(1u << (bit % 8));
                    }
                }
            wb += (bit + 7) / 8;
            nnz += row_nnz;
            ok &= indptr[r + 1] == nnz;
        }
        ok &= ix.shape[0] == nnz && pk.nbytes == wb &&
              (wb == 0 || memcmp(pk.data, want, wb) == 0);
    }
    kv_tensor_release(&ip);
    kv_tensor_release(&ix);
    kv_tensor_release(&pk);
    free(want);
    free(mb.buf);
    free(t);
    return ok;
}

static int check_kept(const struct kv_mask *m, const uint8_t *d)
{
    uint64_t k = 0;
    for (int64_t x = 0; x < m->n_q * m->n_kv; x++)
        k += d[x];
    return k == kv_mask_kept(m);
}

static void random_kinds(void)
{
    static const enum kv_mask_kind kinds[] = {
        KV_MASK_CAUSAL, KV_MASK_WINDOW, KV_MASK_BAND, KV_MASK_FULL,
        KV_MASK_PREFIX, KV_MASK_VARLEN, KV_MASK_CHUNK, KV_MASK_POSITIONS,
        KV_MASK_HOLE };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int ok_rule = 1, ok_tiles = 1, ok_render = 1, ok_npy = 1, ok_bits = 1,
            ok_block = 1, ok_bsr = 1, ok_kept = 1, ok_make = 1;
        for (int it = 0; it < 150; it++) {
            struct geo g;
            struct kv_mask m;
            struct kv_err e;
            int64_t Q, K;
            random_geo(&g, kinds[k]);
            if (build(&m, &g, &e) != 0) {
                if (ok_make)
                    printf("# %s: %s\n", kind_name[k], e.msg);
                ok_make = 0;
                continue;
            }
            uint8_t *d = dense_ref(&g, &Q, &K);
            ok_make &= Q == m.n_q && K == m.n_kv;
            if (!ok_make) {
                free(d);
                kv_mask_release(&m);
                continue;
            }
            ok_rule &= check_rule(&m, d);
            int64_t bq = rnd(1, 7), bk = rnd(1, 7);
            ok_tiles &= check_tiles(&m, d, bq, bk);
            ok_render &= check_render(&m, d);
            ok_npy &= check_npy(&m, d);
            ok_bits &= check_bits(&m, d, &g);
            ok_block &= check_block(&m, d, bq, bk);
            ok_bsr &= check_bsr(&m, d, rnd(1, 6));
            ok_kept &= check_kept(&m, d);
            free(d);
            kv_mask_release(&m);
        }
        TAP_OK(ok_make, "%s: built on random geometries", kind_name[k]);
        TAP_OK(ok_rule, "%s: row and column spans = the inequality", kind_name[k]);
        TAP_OK(ok_tiles, "%s: tile runs = brute-force tile sums", kind_name[k]);
        TAP_OK(ok_render, "%s: rendered rows = per-element reference, 6 dtypes",
               kind_name[k]);
        TAP_OK(ok_npy, "%s: dense npy with leading dims reads back", kind_name[k]);
        TAP_OK(ok_bits, "%s: packed bits = little-endian packbits", kind_name[k]);
        TAP_OK(ok_block, "%s: streamed BlockMask = built from dense tiles",
               kind_name[k]);
        TAP_OK(ok_bsr, "%s: BSR indptr/indices/mask = dense", kind_name[k]);
        TAP_OK(ok_kept, "%s: kept count", kind_name[k]);
    }
}

/* ---- worked examples ------------------------------------------------- */

static struct kv_mask band(enum kv_mask_kind kind, int64_t q, int64_t kv,
                           int64_t w, int64_t pre, int64_t next, int64_t p,
                           int top_left)
{
    struct kv_mask_spec s;
    struct kv_mask m;
    struct kv_err e;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.n_q = q;
    s.n_kv = kv;
    s.window = w;
    s.pre = pre;
    s.next = next;
    s.prefix = p;
    s.top_left = top_left;
    kv_mask_init(&m);
    if (kv_mask_make(&m, &s, &e) != 0)
        printf("# %s\n", e.msg);
    return m;
}

/* "1110|..." pattern of keep bits, rows separated by '|'. */
static int pattern_is(const struct kv_mask *m, const char *want)
{
    char buf[512];
    size_t p = 0;
    for (int64_t i = 0; i < m->n_q; i++) {
        if (i)
            buf[p++] = '|';
        for (int64_t j = 0; j < m->n_kv; j++)
            buf[p++] = kv_mask_at(m, i, j) ? '1' : '0';
    }
    buf[p] = '\0';
    if (strcmp(buf, want) != 0)
        printf("# got %s\n# want %s\n", buf, want);
    return strcmp(buf, want) == 0;
}

static void examples(void)
{
    struct kv_mask m;
    m = band(KV_MASK_CAUSAL, 2, 5, 0, 0, 0, 0, 0);
    TAP_OK(pattern_is(&m, "11110|11111"), "F: FA causal q2 kv5 (bottom-right)");
    kv_mask_release(&m);
    m = band(KV_MASK_CAUSAL, 5, 2, 0, 0, 0, 0, 0);
    TAP_OK(pattern_is(&m, "00|00|00|10|11"), "F: FA causal q5 kv2 (empty rows)");
    kv_mask_release(&m);
    m = band(KV_MASK_WINDOW, 3, 6, 3, 0, 0, 0, 0);
    TAP_OK(pattern_is(&m, "011100|001110|000111"), "F: vLLM window W3 q3 kv6");
    kv_mask_release(&m);
    m = band(KV_MASK_CAUSAL, 3, 6, 0, 0, 0, 0, 1);
    TAP_OK(pattern_is(&m, "100000|110000|111000"), "F: FIA sparse 2 top-left q3 kv6");
    kv_mask_release(&m);
    m = band(KV_MASK_CAUSAL, 3, 6, 0, 0, 0, 0, 0);
    TAP_OK(pattern_is(&m, "111100|111110|111111"), "F: FIA sparse 3 q3 kv6");
    kv_mask_release(&m);
    m = band(KV_MASK_BAND, 3, 6, 0, 2, 0, 0, 0);
    TAP_OK(pattern_is(&m, "011100|001110|000111"), "F: FIA sparse 4 band pre2 next0");
    kv_mask_release(&m);
    m = band(KV_MASK_BAND, 6, 6, 0, 2, 0, 0, 0);
    TAP_OK(pattern_is(&m, "100000|110000|111000|011100|001110|000111"),
           "F: Flex sliding window W2 (= band pre 2)");
    kv_mask_release(&m);
    m = band(KV_MASK_PREFIX, 6, 6, 0, 0, 0, 3, 0);
    TAP_OK(pattern_is(&m, "111000|111000|111000|111100|111110|111111"),
           "F: Flex prefix-LM P3");
    kv_mask_release(&m);
    m = band(KV_MASK_WINDOW, 6, 6, 2, 0, 0, 0, 1);
    TAP_OK(pattern_is(&m, "100000|110000|011000|001100|000110|000011"),
           "A.2: SWA W=2 keeps W keys (complement of the table's masked form)");
    kv_mask_release(&m);
    {   /* Flex document causal, offsets [0,2,6] = varlen 2,4 */
        struct kv_mask_spec s;
        int64_t ql[2] = { 2, 4 };
        struct kv_err e;
        memset(&s, 0, sizeof s);
        s.kind = KV_MASK_VARLEN;
        s.q_lens = ql;
        s.n_req = 2;
        kv_mask_init(&m);
        kv_mask_make(&m, &s, &e);
        TAP_OK(pattern_is(&m, "100000|110000|001000|001100|001110|001111"),
               "F: Flex document causal offsets [0,2,6]");
        kv_mask_release(&m);
    }
    {   /* A.2 per-row splitfuse rows: positions [3,4,0,1,2], 5 columns */
        struct kv_mask_spec s;
        int64_t pos[5] = { 3, 4, 0, 1, 2 };
        struct kv_err e;
        memset(&s, 0, sizeof s);
        s.kind = KV_MASK_POSITIONS;
        s.n_q = 5;
        s.n_kv = 5;
        s.positions = pos;
        kv_mask_init(&m);
        kv_mask_make(&m, &s, &e);
        TAP_OK(pattern_is(&m, "11110|11111|10000|11000|11100"),
               "A.2: splitfuse rows seq [5,3] pos [3,4,0,1,2]");
        kv_mask_release(&m);
    }
    {   /* seed 001 chunk mask: sys 2, chunks 2,2, question 2 */
        struct kv_mask_spec s;
        uint8_t sk[4] = { KV_SEG_SYS, KV_SEG_CHUNK, KV_SEG_CHUNK, KV_SEG_QUESTION };
        int64_t sl[4] = { 2, 2, 2, 2 };
        struct kv_err e;
        memset(&s, 0, sizeof s);
        s.kind = KV_MASK_CHUNK;
        s.seg_kinds = sk;
        s.seg_lens = sl;
        s.n_seg = 4;
        kv_mask_init(&m);
        kv_mask_make(&m, &s, &e);
        TAP_OK(pattern_is(&m, "10000000|11000000|11100000|11110000|"
                          "11001000|11001100|11111110|11111111"),
               "seed 001: sys causal, chunks isolated, question sees all");
        kv_mask_release(&m);
    }
}

static void values(void)
{
    uint32_t b;
    struct kv_mask_values v;
    struct kv_err e;
    kv_mask_value_bits(KV_BF16, -10000.0, &b);
    TAP_OK(b == 0xc61c, "bf16 -10000 rounds to -9984 (0xc61c), got %04x", b);
    kv_mask_value_bits(KV_BF16, 0.0 * -10000.0, &b);
    TAP_OK(b == 0x8000, "0 * -10000 = -0.0 (0x8000) in bf16");
    kv_mask_value_bits(KV_F16, -10000.0, &b);
    TAP_OK(b == 0xf0e2, "f16 -10000 = 0xf0e2");
    kv_mask_value_bits(KV_F16, -3.4028234663852886e38, &b);
    TAP_OK(b == 0xfc00, "finfo(f32).min in f16 = -inf");
    kv_mask_values_plain(&v, KV_F16, 0, "min", &e);
    TAP_OK(v.mask == 0xfbff && v.keep == 0, "f16 --fill min = -65504");
    kv_mask_values_plain(&v, KV_BF16, 0, "min", &e);
    TAP_OK(v.mask == 0xff7f, "bf16 --fill min = 0xff7f");
    kv_mask_values_plain(&v, KV_F32, 0, NULL, &e);
    TAP_OK(v.mask == 0xff800000u, "f32 default fill -inf");
    kv_mask_values_plain(&v, KV_BF16, 0, "-10000", &e);
    TAP_OK(v.mask == 0xc61c, "bf16 --fill -10000 = -9984");
    kv_mask_values_plain(&v, KV_I8, 1, NULL, &e);
    TAP_OK(v.keep == 1 && v.mask == 0, "i8 --keep: 1 attend, 0 masked");
    TAP_OK(kv_mask_values_plain(&v, KV_I8, 0, "-inf", &e) == -1 &&
           strstr(e.msg, "--fill"), "--fill refused for i8: %s", e.msg);
    TAP_OK(kv_mask_values_plain(&v, KV_I64, 0, NULL, &e) == -1,
           "i64 is not a mask dtype");
    char s[48];
    kv_mask_value_text(KV_BF16, 0xc61c, s, sizeof s);
    TAP_OK(strcmp(s, "-9984") == 0, "text of bf16 0xc61c: %s", s);
    kv_mask_value_text(KV_BF16, 0x8000, s, sizeof s);
    TAP_OK(strcmp(s, "-0") == 0, "text of -0.0: %s", s);
    kv_mask_value_text(KV_F16, 0xfc00, s, sizeof s);
    TAP_OK(strcmp(s, "-inf") == 0, "text of f16 -inf: %s", s);
}

static void blockmask_api(void)
{
    /* spec E.1: causal 6x6, BLOCK_SIZE 2; and causal 5x5: counts */
    uint8_t t6[9] = { 1, 0, 0, 2, 1, 0, 2, 2, 1 };
    struct kv_tensor out[8];
    struct kv_err e;
    int64_t outer[2] = { 1, 1 };
    for (int k = 0; k < 8; k++)
        kv_tensor_init(&out[k]);
    int rc = kv_blockmask_build(t6, 2, outer, 3, 3, out, &e);
    TAP_OK(rc == 0, "build 6x6 causal BlockMask");
    static const int32_t want[8][9] = {
        { 1, 1, 1 }, { 0, 1, 2, 1, 0, 2, 2, 0, 1 },
        { 0, 1, 2 }, { 0, 1, 2, 0, 1, 2, 0, 1, 2 },
        { 1, 1, 1 }, { 0, 1, 2, 1, 0, 2, 2, 0, 1 },
        { 2, 1, 0 }, { 1, 2, 0, 2, 0, 1, 0, 1, 2 },
    };
    for (int k = 0; k < 8 && rc == 0; k++) {
        size_t n = (k & 1) ? 9 : 3;
        TAP_OK(out[k].dtype == KV_I32 && out[k].ndim == ((k & 1) ? 4 : 3) &&
               memcmp(out[k].data, want[k], n * 4) == 0,
               "E.1 %s", kv_blockmask_names[k]);
    }
    for (int k = 0; k < 8; k++)
        kv_tensor_release(&out[k]);
    uint8_t bad = 3;
    TAP_OK(kv_blockmask_build(&bad, 0, NULL, 1, 1, out, &e) == -1 &&
           out[0].data == NULL, "bad tile state refused, out untouched: %s",
           e.msg);
    /* causal 5x5, BS 2: padding makes every tile of the last row partial */
    struct kv_mask m = band(KV_MASK_CAUSAL, 5, 5, 0, 0, 0, 0, 0);
    uint8_t t5[9];
    kv_tile_states_ref(&m, 2, 2, t5);
    rc = kv_blockmask_build(t5, 0, NULL, 3, 3, out, &e);
    const int32_t *kvn = out[0].data, *fkvn = out[2].data;
    TAP_OK(rc == 0 && kvn[0] == 1 && kvn[1] == 1 && kvn[2] == 3 &&
           fkvn[0] == 0 && fkvn[1] == 1 && fkvn[2] == 0,
           "E.1: causal 5x5 BS2: kv_num_blocks [1,1,3], full [0,1,0]");
    for (int k = 0; k < 8; k++)
        kv_tensor_release(&out[k]);
    kv_mask_release(&m);
}

/* kvmask causal -n 1048576 at block 128: rows of tiles stay small. */
static void large(void)
{
    struct kv_mask m = band(KV_MASK_CAUSAL, 1 << 20, 1 << 20, 0, 0, 0, 0, 0);
    struct kv_tile_scan s;
    struct kv_err e;
    kv_tile_scan_init(&s, &m, 0, 128, 128, &e);
    kv_tile_runs(&s, &m, 0, 5000, 128, 128);
    TAP_OK(s.n_runs == 3 && s.runs[0].state == KV_TILE_FULL &&
           s.runs[0].end == 5000 && s.runs[1].state == KV_TILE_PARTIAL &&
           s.runs[2].state == KV_TILE_EMPTY && s.runs[2].end == 8192,
           "1M causal, tile row 5000: full 0..4999, partial 5000, empty");
    kv_tile_scan_release(&s);
    TAP_OK(kv_mask_kept(&m) == (uint64_t)(1 << 20) * ((1 << 20) + 1) / 2,
           "1M causal kept = n(n+1)/2");
    kv_mask_release(&m);
}

/* Rows wide enough that the dense writer rewrites only what differs from
 * the row its buffer held: every row written, over several buffer fills
 * and two repeats, equals the per-element reference. */
static int wide_npy(const struct kv_mask *m, enum kv_dtype dt, int keep,
                    int threads)
{
    struct kv_mask_values v;
    struct kv_mask_out o = { .n_outer_dims = 1, .outer = { 2 }, .threads = threads };
    struct membuf mb;
    struct kv_tensor t;
    struct kv_err e;
    size_t es = kv_dtype_size(dt), rb = (size_t)m->n_kv * es;
    kv_mask_values_plain(&v, dt, keep, NULL, &e);
    FILE *f = mem_out(&mb);
    int ok = kv_mask_write_npy(f, m, &v, &o, 0, &e) == 0;
    fclose(f);
    ok &= read_nth(&mb, 0, &t) == 0 && t.ndim == 3 && t.shape[0] == 2 &&
          t.shape[1] == m->n_q && t.shape[2] == m->n_kv;
    uint8_t *b = malloc(rb);
    for (int64_t r = 0; ok && r < 2 * m->n_q; r++) {
        kv_mask_render_row_ref(m, &v, r % m->n_q, b);
        ok &= memcmp((uint8_t *)t.data + (size_t)r * rb, b, rb) == 0;
    }
    free(b);
    kv_tensor_release(&t);
    free(mb.buf);
    return ok;
}

static void wide_rows(void)
{
    static const enum kv_dtype dts[] = { KV_F16, KV_BF16, KV_F32, KV_U8 };
    static int64_t hl[300], hh[300];
    struct kv_mask ms[5];
    const char *names[] = { "causal", "window", "band", "prefix", "hole" };
    ms[0] = band(KV_MASK_CAUSAL, 300, 4200, 0, 0, 0, 0, 0);
    ms[1] = band(KV_MASK_WINDOW, 300, 4200, 700, 0, 0, 0, 0);
    ms[2] = band(KV_MASK_BAND, 300, 4200, 0, 900, 40, 0, 1);
    ms[3] = band(KV_MASK_PREFIX, 300, 4200, 0, 0, 0, 100, 1);
    struct kv_mask_spec s;
    struct kv_err e;
    memset(&s, 0, sizeof s);
    s.kind = KV_MASK_HOLE;
    s.n_q = 300;
    s.n_kv = 4200;
    for (int i = 0; i < 300; i++) {
        hl[i] = rnd(0, 4200);
        hh[i] = rnd(0, 3) ? rnd(hl[i], 4200) : hl[i];
    }
    s.hole_lo = hl;
    s.hole_hi = hh;
    kv_mask_init(&ms[4]);
    if (kv_mask_make(&ms[4], &s, &e) != 0)
        printf("# %s\n", e.msg);
    for (int k = 0; k < 5; k++) {
        int ok = ms[k].n_q == 300;
        for (size_t d = 0; ok && d < sizeof dts / sizeof dts[0]; d++)
            for (int keep = 0; keep < 2; keep++)
                ok &= wide_npy(&ms[k], dts[d], keep, 1 + (int)((d + (size_t)keep) % 2));
        TAP_OK(ok, "%s 300x4200: dense npy over several buffer fills = reference rows",
               names[k]);
        kv_mask_release(&ms[k]);
    }
}

static void bad_specs(void)
{
    struct kv_mask_spec s;
    struct kv_mask m;
    struct kv_err e;
    int64_t q[2] = { 1, 2 }, k[2] = { 0, 0 }, neg[2] = { 1, -1 };
    memset(&s, 0, sizeof s);
    kv_mask_init(&m);
    s.kind = KV_MASK_CAUSAL;
    TAP_OK(kv_mask_make(&m, &s, &e) == -1 && strstr(e.msg, "-n"),
           "n 0 refused: %s", e.msg);
    s.n_q = s.n_kv = 4;
    s.kind = KV_MASK_WINDOW;
    s.window = -3;
    TAP_OK(kv_mask_make(&m, &s, &e) == -1 && strstr(e.msg, "-w"),
           "window -3 refused: %s", e.msg);
    s.kind = KV_MASK_CAUSAL;
    s.n_q = KV_MASK_MAX_LEN + 1;
    TAP_OK(kv_mask_make(&m, &s, &e) == -1, "huge -q refused: %s", e.msg);
    s.kind = KV_MASK_VARLEN;
    s.window = 0;
    s.q_lens = q;
    s.kv_lens = k;
    s.n_req = 2;
    TAP_OK(kv_mask_make(&m, &s, &e) == -1 && strstr(e.msg, "--kv-lens"),
           "every kv length 0 refused: %s", e.msg);
    s.kv_lens = neg;
    TAP_OK(kv_mask_make(&m, &s, &e) == -1 && strstr(e.msg, "--kv-lens"),
           "kv length -1 refused: %s", e.msg);
    uint8_t sk[2] = { KV_SEG_CHUNK, KV_SEG_SYS };
    int64_t sl[2] = { 2, 2 };
    s.kind = KV_MASK_CHUNK;
    s.seg_kinds = sk;
    s.seg_lens = sl;
    s.n_seg = 2;
    TAP_OK(kv_mask_make(&m, &s, &e) == -1 && strstr(e.msg, "sys"),
           "sys after a chunk refused: %s", e.msg);
    TAP_OK(m.n_q == 0, "failed make leaves m untouched");
}

int main(void)
{
    random_kinds();
    examples();
    values();
    blockmask_api();
    large();
    wide_rows();
    bad_specs();
    return tap_done();
}
