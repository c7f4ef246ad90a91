/* xattn_int.h - what xattn.c (the options, checks, selection and entry
 * points) and xattn_eng.c (the tiled estimate engine) share and nothing
 * outside them sees: small integer helpers, the engine's state, and its
 * set-up and run, prefixed xattn_. */
#ifndef KV_XATTN_INT_H
#define KV_XATTN_INT_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "attn/xattn.h"
#include "attn/bf16.h"
#include "core/blas.h"

static inline int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static inline int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static inline int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* The divisors of the scores (xattn_row.c). */
struct scaler {
    int use_scale;
    float scale, div_d, mul_sn, div_s, div_n;
    int sn_pow2;
};

/* The register tiles of the f32 scores (xattn_kern.h, xattn_kern_x86.c,
 * xattn_kern_neon.c): query rows and keys (the packed panels' width) of a
 * tile on each level.  xattn_kern_tile_*: the scores of m <= MR query rows
 * (f32, ldq apart, sd features) against the packed keys' columns [j0, j1),
 * into c (ldc apart, column j0 first). */
#define XK512_MR 8
#define XK512_NR 48
#define XK256_MR 4
#define XK256_NR 24
#define XKNEON_MR 8
#define XKNEON_NR 12
typedef void xattn_kern_fn(const float *q, int64_t ldq, int m, int64_t sd,
                           const float *kp, int64_t j0, int64_t j1, float *c,
                           int64_t ldc);
xattn_kern_fn xattn_kern_tile_512, xattn_kern_tile_256, xattn_kern_tile_neon;

/* One worker's tile buffers, allocated on first use at the largest
 * tile's size and reused by every tile that worker runs (xattn_eng.c). */
struct tbuf {
    atomic_int busy;
    float *qr, *sc;
    double *acc;
    int64_t *scratch;
    uint8_t *keeprow;
};

/* The engine: geometry, inputs and outputs shared by the tiles. */
struct eng {
    const float *q, *k;
    const uint16_t *q16, *k16; /* bf16 inputs, read by the bf16 tiles as they
                                  are (q and k then NULL) */
    int64_t nb, hq, hkv, lq, lk, d, s, bs, r, sd;
    int64_t nq_r, nk_r;        /* real reshaped rows (partial groups kept) */
    int64_t nqb, nkb;          /* output blocks */
    int64_t nkb_sel;           /* blocks in a selection row (compat: padded) */
    int64_t ncols;             /* columns of the softmax domain */
    int64_t off_r;             /* reshaped q offset (clean, causal) */
    int64_t diag0;             /* k block on the diagonal of q block 0 */
    int causal, compat, inverse;
    int64_t cr, nkc, nqc, n_kpad, nbpc;
    struct scaler sc;
    const float **kr;          /* per (b, kv head): nk_r rows of sd floats */
    /* bf16 tiles: route (NONE = sgemm), the reshaped K rows of each
     * (b, kv head) packed as B^T (attn/bf16.h) with panel stride kps, and
     * the pairs of a reshaped row (sdp = 2 * pairs elements) */
    enum kv_bf16_route bf16;
    int nthreads;
    /* f32 register tiles (NULL = sgemm): the level's kernel, its rows and
     * panel width, the keys of each (b, kv head) packed in kpanels panels
     * of knr reshaped rows (sd * knr floats each) */
    xattn_kern_fn *kern;
    int64_t kmr, knr;
    float *kpf;
    uint32_t *kpack;
    int64_t kps, kpairs, sdp, kpanels;
    int64_t tqb, ntiles;
    struct tbuf *bufs;         /* one per worker (xattn_eng_run) */
    int nbufs;
    /* estimate */
    float *sums;               /* [nb*hq, nqb, nkb_sel] */
    uint8_t *mask;             /* [nb*hq, nqb, nkb] or NULL */
    const double *thr;
    int rule, keep_sink, keep_recent;
    /* recall */
    const uint8_t *keep;       /* [nb*hq, nqb, nkb] or NULL */
    double *row_recall;        /* [nb*hq, lq] */
    /* per-task accounting */
    double *t_gemm, *t_soft, *t_sel, *flops;
    atomic_int failed;
    atomic_int nonfinite;      /* a row's scores were not all finite */
    atomic_int badinput;       /* bf16 Q or K holds an inf or a nan */
    /* progress */
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    pthread_mutex_t lock;
    uint64_t n_done, n_total;
};

/* The block sums part[a / r .. ceil(b / r)) of one row of dot products x
 * (its columns [a, b), blocks of r columns; x may be overwritten):
 * xattn_row.c.  Returns 0 when a score is not finite, else 1. */
int xattn_exp_sums(const struct scaler *c, float *x, int64_t a, int64_t b, int64_t r,
                   double *part);

int xattn_eng_setup(struct eng *g, const struct kv_tensor *q,
              const struct kv_tensor *k, const struct kv_xattn_opts *o,
              int64_t stride, int64_t off, int compat, size_t *need,
              struct kv_err *e);
int xattn_eng_kviews(struct eng *g, float **copy, struct kv_err *e);
int xattn_eng_run(struct eng *g, int nthreads, struct kv_xattn_times *tm,
            struct kv_err *e);
#endif
