/* mask_tile.c - the state of each tile of a mask (empty, partial, full)
 * from the spans of its rows or columns: the runs of one row of tiles
 * through difference arrays, and the plain reference. */
#include <stdlib.h>
#include <string.h>
#include "mask/mask_int.h"
#include "mask/blockmask.h"

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
