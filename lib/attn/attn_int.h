/* attn_int.h - what the files of the attention kernels (attn.c, attn_plan.c,
 * attn_tile.c, attn_sparse.c, attn_decode.c, attn_merge.c) share and nothing
 * outside them sees: the plan of one call and its work items and work
 * spaces, the vector level, the pool and progress helpers, and the entries
 * each file offers the others, prefixed attn_.  The row kernels they all
 * run are in attn_row.h. */
#ifndef KV_ATTN_INT_H
#define KV_ATTN_INT_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"
#include "attn/bf16.h"
#include "core/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN_X86 1
#endif

enum { ISA_SCALAR = 0, ISA_AVX2, ISA_AVX512 };

/* The vector level the kernels use: AVX-512F, AVX2+FMA or plain scalar
 * code, as lib/core/isa.h allows (KVTOOLS_ISA caps it), lowered further by
 * kv_attn_limit_isa for tests. */
extern int attn_isa_cap;

static inline int isa_level(void)
{
    int l = ISA_SCALAR;
#ifdef ATTN_X86
    if (kv_isa_has(KV_ISA_AVX512))
        l = ISA_AVX512;
    else if (kv_isa_has(KV_ISA_AVX2))
        l = ISA_AVX2;
#endif
    return l < attn_isa_cap ? l : attn_isa_cap;
}

/* ---- operands ------------------------------------------------------ */

/* Q, K, V or the output: element strides for (batch, head, position);
 * the feature axis is contiguous. */
struct operand {
    enum kv_dtype dtype;
    char *base;
    size_t esize;
    int64_t sb, sh, ss;
};

struct item {
    int64_t b, h0, i0, i1;
    int64_t j0, j1;         /* decode mode: the key chunk */
    uint64_t done, skipped;
};

struct scratch {
    atomic_int busy;
    float *qs, *qt, *s, *o, *kt, *vt, *m, *l;
    int64_t *lo, *hi;
    unsigned char *keep;
    /* bf16 tiles: Q rows and P rows as bf16, K^T and V packed (bf16.h) */
    uint16_t *qb, *pb;
    uint32_t *kp, *vp;
    /* fused kernels (fused_kern.h): Q^T, O^T, S^T, slopes, positions,
     * rows, f32 keys; key row pointers */
    float *ft;
    const void **fkr;
};

struct plan {
    int64_t B, Hq, Hkv, G, D, Dv;
    int64_t *q_start, *q_len, *kv_start, *kv_len;
    struct operand q, k, v, out;
    float *lse;
    int64_t lsb, lsh, lss;
    /* paged */
    int paged;
    const int64_t *bt;
    int64_t bt_cols, page, page_stride;
    /* explicit mask */
    const char *mask;
    enum kv_dtype mdtype;
    size_t msize;
    int mfloat, mkeep, mbinary;
    int64_t msb, msh, msi, msj;
    int mpacked;
    /* block mask */
    const struct kv_tensor *bm;
    int64_t bsb, bsh, bsq, bsk, bs;
    float scale;
    /* variants: softcap C and 1/C (C = 0: none); ALiBi slopes and sink
     * logits per query head (owned, NULL = none) */
    float softcap, inv_softcap;
    float *slopes, *sinks;
    int causal;               /* set too by a chunk */
    int64_t window, chunk;
    int64_t hs, tq, tk;
    int scalar, generic;
    /* bf16 tiles: route (KV_BF16_NONE = off), P kept f32, row strides of
     * qb and pb, panel strides of kp and vp */
    enum kv_bf16_route bf16;
    int p_f32;
    /* fused kernels: the level (FUSED_NONE = the BLAS tiles), the keys
     * per block, and whether some items have too few rows for them (those
     * run on the BLAS tiles) */
    int fused;
    int64_t fkb;
    int fused_blas;
    int64_t ldqb, ldpb, psk, psv;
    struct item *items;
    size_t n_items;
    struct scratch *pool;
    int n_pool;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *progress_ctx;
    /* decode mode: items are (request, query, key chunk) over all heads,
     * rows padded to Gp per kv head; partial results merged at the end */
    int decode;
    int64_t Gp, kc;
    float *part;           /* per item: Hq x (m, l, Dv outputs) */
    /* decode mode over an FP8 cache (k and v dtype u8): the format + 1
     * (0 = none) and the factors of keys and values (attn_decode.c);
     * fp8_vs, when not 0, multiplies each output row after its division
     * by the sum of its weights (finish_row): 2^8 v_scale there, or
     * 2^v_exp for values dequantized at v_scale 2^-v_exp */
    int fp8;
    float fp8_ks, fp8_vs;
    atomic_ullong n_done;
    atomic_int progress_busy;
};

/* Row stride of Qt and St for M query rows: a power-of-two stride would
 * map a panel's rows onto a few L1 sets and evict itself. */
#define SP_LD(M) ((M) + 16)

/* Take a free work space from the pool (one per thread, so there is
 * always one); the item gives it back by clearing busy. */
static inline struct scratch *scratch_get(struct plan *p)
{
    for (;;) {
        for (int i = 0; i < p->n_pool; i++) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&p->pool[i].busy, &expect, 1))
                return &p->pool[i];
        }
    }
}

/* Count a finished item and report progress (one worker at a time). */
static inline void item_done(struct plan *p)
{
    unsigned long long done = atomic_fetch_add(&p->n_done, 1) + 1;
    if (p->progress && atomic_exchange(&p->progress_busy, 1) == 0) {
        p->progress(p->progress_ctx, done, p->n_items);
        atomic_store(&p->progress_busy, 0);
    }
}

static inline int is_input_float(enum kv_dtype t)
{
    return t == KV_F32 || t == KV_F16 || t == KV_BF16 || t == KV_F64;
}

static inline const char *shp(const struct kv_tensor *t, char *buf, size_t n)
{
    return kv_shape_str(t->ndim, t->shape, buf, n);
}

/* attn_plan.c: validate the request and fill the plan; cut the work into
 * items and allocate the work spaces; free both. */
int attn_plan_build(const struct kv_attn_req *r, struct plan *p, int64_t *out_shape,
                    int *out_ndim, struct kv_err *e);
int attn_plan_items(struct plan *p, const struct kv_attn_req *r, int n_threads, struct kv_err *e);
void attn_plan_free(struct plan *p);

/* attn_tile.c: one item of stacked heads x query positions, tile by tile;
 * whether the decode-shaped kernels take tiles of M stacked rows. */
void attn_run_item(void *ctx, size_t idx);
int attn_small_ok(const struct plan *p, int64_t M);

/* fused.c: whether the plan runs on the fused kernels and at which level
 * (the rule of kvattn(1)), the floats of their work space, and one item
 * through them; the levels' copies are in fused_x86.c and fused_neon.c. */
enum { FUSED_NONE = 0, FUSED_AVX2, FUSED_AVX512, FUSED_NEON, FUSED_BF16 };
#if defined(ATTN_X86) && (defined(__clang__) || __GNUC__ >= 10)
#define FUSED_HAVE_BF16 1       /* the compiler has the AVX512_BF16 intrinsics */
#endif
#if defined(__aarch64__) && (defined(__clang__) || __GNUC__ >= 10)
#define FUSED_HAVE_BF16_NEON 1  /* the compiler has the BF16 (BFDOT) intrinsics */
#endif
#define FUSED_ROWS 32           /* rows per panel at most: pad M to it */
#define FUSED_KT 8              /* keys per register tile at most */
#define FUSED_MIN_ROWS 32       /* an item of fewer rows keeps the BLAS tiles */
int attn_fused_level(const struct plan *p);
size_t attn_fused_floats(const struct plan *p, int64_t M);
void attn_fused_item(struct plan *p, struct item *it, struct scratch *w);
/* What the levels' copies share: the rows' key bounds, running max and
 * sum, ALiBi slopes and positions (Mp rows, the padding as the last row);
 * -inf for the keys [a, zs) of a panel of rp rows (S^T from key j0 + a)
 * that a row may not see, or past z; the output rows from O^T (panels of
 * rp rows) through finish_row, row a work row of Dv floats. */
void attn_fused_rows(const struct plan *p, const struct item *it, struct scratch *w, int64_t Mp,
                     float *sl, float *pos);
void attn_fused_mask(float *s, int64_t rp, int64_t j0, int64_t a, int64_t z, int64_t zs,
                     const int64_t *lo, const int64_t *hi);
void attn_fused_finish(const struct plan *p, const struct item *it, struct scratch *w,
                       const float *ot, int64_t rp, float *row);
void attn_fused_item_512(struct plan *p, struct item *it, struct scratch *w);
void attn_fused_item_256(struct plan *p, struct item *it, struct scratch *w);
void attn_fused_item_neon(struct plan *p, struct item *it, struct scratch *w);
/* fused_bf16.h (in fused_x86.c): the bf16 kernel on VDPBF16PS and on its
 * model (routes KV_BF16_AVX512 and KV_BF16_MODEL_X86) */
void attn_fused_item_bf16_dp(struct plan *p, struct item *it, struct scratch *w);
void attn_fused_item_bf16_model(struct plan *p, struct item *it, struct scratch *w);
/* fused_bf16_neon.h (in fused_neon.c): the bf16 kernel on BFDOT and on its
 * model (routes KV_BF16_NEON and KV_BF16_MODEL_ARM) */
void attn_fused_item_bf16_bfdot(struct plan *p, struct item *it, struct scratch *w);
void attn_fused_item_bf16_bfmodel(struct plan *p, struct item *it, struct scratch *w);

/* attn_sparse.c: the block-sparse tiles of attn_run_item. */
int attn_sp_ok(const struct plan *p, int64_t M);
int64_t attn_sp_tile(const struct plan *p, struct item *it, struct scratch *w, int64_t M,
                     int64_t kvh, int64_t j0, int64_t jhi, int64_t *j_end);
int64_t attn_gather_blocks(const struct plan *p, struct item *it, struct scratch *w,
                           int64_t M, int64_t kvh, int64_t j0, int64_t jhi, int direct,
                           const float **kt, int64_t *ldk, const float **vt, int64_t *ldv,
                           int64_t *j_end);

/* attn_decode.c: decode mode, one (request, query, key chunk) item over
 * all heads, and the merge of the chunks; whether Q K^T runs on the bf16
 * tiles there. */
void attn_run_decode_item(void *ctx, size_t idx);
void attn_merge_decode(struct plan *p, float *acc);
int attn_dec_tiles_ok(const struct plan *p);
int attn_dec_ok(const struct plan *p);
/* Point a decode plan made for an f32 cache at the bytes of an FP8 one
 * (cache, format fmt, scales ks and vs) when its kernels read FP8: 1 then,
 * 0 and the plan unchanged otherwise. */
int attn_dec_fp8_set(struct plan *p, const struct kv_tensor *cache, int fmt, float ks,
                     float vs);
#endif
