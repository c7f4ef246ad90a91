/* mask.h - attention masks as rules: which (query row i, key column j)
 * pairs attend, the values a dense mask holds, and the writers of every
 * kvmask output format (dense npy/text/pgm, Ascend FRACTAL_NZ, FlashInfer
 * packed bits and BSR, FlexAttention BlockMask, statistics).
 *
 * A mask is never stored densely.  Every kind is described by its rule, and
 * for every kind the attended columns of one row form at most two intervals
 * (and, except for KV_MASK_POSITIONS and KV_MASK_HOLE, the attending rows
 * of one column do too).  Dense output is rendered row by row with fills; compact formats are
 * computed per tile from the intervals, so a 1M x 1M causal BlockMask needs
 * memory proportional to one row of tiles.
 *
 * Conventions: i is the row (query), j the column (key).  For the band
 * family i' = i + offset is the absolute position of row i: offset =
 * n_kv - n_q (bottom-right alignment, the vLLM / FlashAttention / Ascend
 * sparse_mode 3 rule) or 0 (top-left).
 */
#ifndef KV_MASK_H
#define KV_MASK_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
#include "core/err.h"
#include "core/tensor.h"

/* Largest length of one mask dimension (keeps every sum of positions far
 * from overflow). */
#define KV_MASK_MAX_LEN ((int64_t)1 << 40)
/* An unbounded band side. */
#define KV_MASK_INF ((int64_t)1 << 50)

enum kv_mask_kind {
    KV_MASK_CAUSAL = 0, /* j <= i' */
    KV_MASK_WINDOW,     /* i' - W < j <= i' */
    KV_MASK_BAND,       /* i' - pre <= j <= i' + next */
    KV_MASK_FULL,       /* always */
    KV_MASK_PREFIX,     /* j < P or j <= i' */
    KV_MASK_VARLEN,     /* same request, causal (or window) inside it */
    KV_MASK_CHUNK,      /* chunk-isolated RAG mask */
    KV_MASK_POSITIONS,  /* j <= pos[i] (Ascend per-row splitfuse rows) */
    KV_MASK_HOLE,       /* not hole_lo[i] <= j < hole_hi[i] (CP MTP decode) */
    KV_MASK_LOCAL,      /* j <= i' and j / C == i' / C (chunked local) */
    KV_MASK_TREE        /* j < P, or token j - P is i or an ancestor of i */
};

enum kv_seg_kind { KV_SEG_SYS = 0, KV_SEG_CHUNK = 1, KV_SEG_QUESTION = 2 };

/* What to build: filled by the caller, checked by kv_mask_make. */
struct kv_mask_spec {
    enum kv_mask_kind kind;
    int64_t n_q, n_kv;       /* band family; ignored by varlen/chunk */
    int top_left;            /* alignment (band family and varlen) */
    int64_t window;          /* window: W >= 1 keys including self;
                                varlen: 0 = causal, else window */
    int64_t pre, next;       /* band */
    int64_t prefix;          /* prefix */
    const int64_t *q_lens, *kv_lens;  /* varlen; kv_lens NULL = q_lens */
    size_t n_req;
    const uint8_t *seg_kinds;         /* chunk: enum kv_seg_kind */
    const int64_t *seg_lens;
    size_t n_seg;
    const int64_t *positions;         /* positions: one per row */
    const int64_t *hole_lo, *hole_hi; /* hole: the masked columns of a row */
    int64_t rows_per_mat;             /* > 0: rows form [n_q / this] matrices */
    const int64_t *parents;           /* tree: n_q parents, -1 = a root */
    int64_t chunk_size;               /* local: C, the attention chunk */
};

/* A built rule.  Owns its arrays; kv_mask_release frees them. */
struct kv_mask {
    enum kv_mask_kind kind;
    int64_t n_q, n_kv;
    int64_t offset;          /* i' = i + offset */
    int64_t before, after;   /* keep i' - before <= j <= i' + after */
    int64_t prefix;          /* and j < prefix */
    size_t n_req;            /* varlen */
    int64_t *q_start, *kv_start;   /* [n_req + 1] cumulative */
    int top_left;
    int64_t sys_end, q_begin;      /* chunk: [0,sys_end) sys, [q_begin,n) question */
    size_t n_seg;
    int64_t *seg_start;            /* [n_seg + 1] (empty segments dropped) */
    uint8_t *seg_kind;
    int64_t *pos;                  /* positions [n_q] */
    int64_t *hole;                 /* hole: [n_q][2] masked [lo, hi) */
    int64_t rows_per_mat;          /* dense output [n_q/rows_per_mat, rows, n_kv] */
    uint64_t *anc;                 /* tree: [n_q][anc_words] ancestor-or-self bits */
    int64_t anc_words;
    int64_t chunk;                 /* local: the chunk size C */
};

void kv_mask_init(struct kv_mask *m);
void kv_mask_release(struct kv_mask *m);

/* Check the spec (every length and count, overflow) and build m (zeroed
 * or released).  Messages name the option a user sets ("-w: ..."). */
int kv_mask_make(struct kv_mask *m, const struct kv_mask_spec *s,
                 struct kv_err *e);

/* The rule itself, straight from its inequality: 1 when row i attends
 * column j.  The reference every other path is tested against. */
int kv_mask_at(const struct kv_mask *m, int64_t i, int64_t j);

/* Attended columns of row i as at most two half-open spans [lo, hi),
 * sorted, disjoint and not adjacent.  Returns the number of spans; -1 for
 * KV_MASK_TREE, whose rows are not intervals (the dense writers take its
 * rows element by element; the compact formats refuse it). */
int kv_mask_row(const struct kv_mask *m, int64_t i, int64_t lo[2],
                int64_t hi[2]);

/* Attending rows of column j, likewise; -1 for KV_MASK_POSITIONS,
 * KV_MASK_HOLE and KV_MASK_TREE (whose columns are not intervals). */
int kv_mask_col(const struct kv_mask *m, int64_t j, int64_t lo[2],
                int64_t hi[2]);

/* Number of attended pairs (exact, O(n_q)). */
uint64_t kv_mask_kept(const struct kv_mask *m);

/* ---- tile states ------------------------------------------------------ */

/* One run of equal tile states [start, end) along a row (or column) of
 * tiles. */
struct kv_tile_run {
    int64_t start, end;
    uint8_t state;           /* KV_TILE_EMPTY / PARTIAL / FULL */
};

/* Scratch space for kv_tile_runs; sized for one orientation. */
struct kv_tile_scan {
    int64_t n_tiles;
    int64_t *touch, *full, *dirty;
    uint8_t *is_dirty;
    size_t n_dirty;
    struct kv_tile_run *runs;
    size_t n_runs;
};

/* Prepare scan for rows of tiles (cols = 0) or columns of tiles (cols = 1)
 * with block sizes bq x bk.  Returns -1 on allocation failure. */
int kv_tile_scan_init(struct kv_tile_scan *s, const struct kv_mask *m,
                      int cols, int64_t bq, int64_t bk, struct kv_err *e);
void kv_tile_scan_release(struct kv_tile_scan *s);

/* States of the tiles of q-block row `blk` (cols = 0) or kv-block column
 * `blk` (cols = 1) as runs in s->runs[0..s->n_runs), covering every tile.
 * A tile is full only when every element is attended and it lies wholly
 * inside the matrix (FlexAttention pads with "not attended"). */
int kv_tile_runs(struct kv_tile_scan *s, const struct kv_mask *m, int cols,
                 int64_t blk, int64_t bq, int64_t bk);

/* The same by brute force from kv_mask_at (tests). */
void kv_tile_states_ref(const struct kv_mask *m, int64_t bq, int64_t bk,
                        uint8_t *tiles /* [n_qb][n_kb] */);

/* ---- values ----------------------------------------------------------- */

/* The two element values of a dense mask, as raw bit patterns of dtype
 * (1, 2 or 4 bytes): `keep` where row i attends column j, `mask` elsewhere;
 * `pad` for the zero padding of FRACTAL_NZ. */
struct kv_mask_values {
    enum kv_dtype dtype;
    uint32_t keep, mask, pad;
};

/* Values for the plain kinds.  keep_one = 0: attend = 0 and masked = fill
 * (True / 1 for bool and integers; for floats the fill: "-inf", "min" =
 * the dtype's most negative finite value, or a number, rounded to the dtype
 * to nearest even).  keep_one = 1: attend = 1 / True / 1.0, masked = 0 (fill
 * must be NULL). */
int kv_mask_values_plain(struct kv_mask_values *v, enum kv_dtype dtype,
                         int keep_one, const char *fill, struct kv_err *e);

/* Bit pattern of the double x rounded to dtype the way torch stores a
 * Python scalar (double -> f32 -> f16/bf16 with round to nearest even;
 * integers truncate, bool is x != 0).  -1 when x does not fit an integer
 * dtype. */
int kv_mask_value_bits(enum kv_dtype dtype, double x, uint32_t *bits);

/* Render row i (n_kv elements) into dst, and the plain per-element
 * reference of the same. */
void kv_mask_render_row(const struct kv_mask *m, const struct kv_mask_values *v,
                        int64_t i, void *dst);
void kv_mask_render_row_ref(const struct kv_mask *m,
                            const struct kv_mask_values *v, int64_t i,
                            void *dst);

/* Format one value as kvtools text ("0", "1", "-inf", "-9984", "-0"). */
void kv_mask_value_text(enum kv_dtype dtype, uint32_t bits, char *buf,
                        size_t len);

/* ---- writers ---------------------------------------------------------- */

/* Output geometry shared by the writers: outer leading dimensions (batch,
 * heads) that repeat the same matrix. */
struct kv_mask_out {
    int n_outer_dims;             /* 0..2 */
    int64_t outer[2];
    int text;                     /* compact formats: text instead of npy */
    int threads;                  /* > 1: write while rendering */
    int bits_big;                 /* bits/bsr: big-endian bit order */
    /* called now and then with work done out of total (may be NULL) */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
};

/* Bytes of the dense output (npy data) or -1 (0 returned) on overflow. */
int kv_mask_dense_bytes(const struct kv_mask *m, const struct kv_mask_values *v,
                        const struct kv_mask_out *o, int nz, size_t *bytes);

/* Dense .npy: shape [outer.., n_q, n_kv], or with nz = 1 the Ascend
 * FRACTAL_NZ layout (1, ceil(n_kv/16), ceil16(n_q), 16) of a 2-d mask. */
int kv_mask_write_npy(FILE *f, const struct kv_mask *m,
                      const struct kv_mask_values *v,
                      const struct kv_mask_out *o, int nz, struct kv_err *e);
/* Dense text: one line per row; a blank line between matrices. */
int kv_mask_write_text(FILE *f, const struct kv_mask *m,
                       const struct kv_mask_values *v,
                       const struct kv_mask_out *o, struct kv_err *e);
/* Binary PGM (P5): white = attend, black = masked; the matrices of the
 * outer dimensions stacked vertically; each element cell x cell pixels. */
int kv_mask_write_pgm(FILE *f, const struct kv_mask *m,
                      const struct kv_mask_out *o, int64_t cell,
                      struct kv_err *e);
/* FlashInfer packbits (little bit order) of the attend mask, one segment
 * per request (varlen) or one for the matrix; writes `packed` u8 and, for
 * varlen, `indptr` int32 [n_req + 1] (byte offsets of the segments). */
int kv_mask_write_bits(FILE *f, const struct kv_mask *m,
                       const struct kv_mask_out *o, struct kv_err *e);
/* FlexAttention BlockMask: the eight int32 tensors of blockmask.h with
 * leading dims [B, H] (outer, 1 when absent), streamed row by row. */
int kv_mask_write_block(FILE *f, const struct kv_mask *m, int64_t bq,
                        int64_t bk, const struct kv_mask_out *o,
                        size_t max_mem, struct kv_err *e);
/* FlashInfer BSR with blocks R x C: indptr int32 [ceil(n_q/R)+1], indices
 * int32 [nnz] and (with_mask) the packed little-endian block mask in
 * convert_bsr_mask_layout order.  n_kv must be a multiple of C. */
int kv_mask_write_bsr(FILE *f, const struct kv_mask *m, int64_t r,
                      int64_t c, int with_mask, const struct kv_mask_out *o,
                      size_t max_mem, struct kv_err *e);
/* Statistics as named text fields (see kvmask(1)); bq/bk = 0: no tiles. */
int kv_mask_write_stats(FILE *f, const struct kv_mask *m, int64_t bq,
                        int64_t bk, struct kv_err *e);
/* The same statistics as one JSON object on one line (kvmask -f json):
 * the text's field names, its figures; shapes and pairs as arrays. */
int kv_mask_write_stats_json(FILE *f, const struct kv_mask *m, int64_t bq,
                             int64_t bk, struct kv_err *e);

#endif
