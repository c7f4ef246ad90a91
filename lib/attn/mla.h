/* mla.h - DeepSeek's Multi-head Latent Attention (MLA), in its two forms.
 *
 * Symbols: H query heads, Dl = kv_lora_rank (512 for DeepSeek), R =
 * qk_rope_head_dim (64), P = qk_nope_head_dim (128), Vd = v_head_dim (128).
 * Every token caches one latent row [c_kv (Dl) | k_pe (R)]: c_kv is the
 * normalised compressed KV, k_pe the decoupled rotary key, shared by all
 * heads.  Per head h the up-projections W_UK[h] [Dl, P] and W_UV[h]
 * [Dl, Vd] give
 *
 *   naive     K_h = [c_kv W_UK[h] | k_pe]   V_h = c_kv W_UV[h]
 *             O_h = softmax(scale q_h K_h^T) V_h           q_h [P + R]
 *   absorbed  q'_h = [W_UK[h] q_nope_h | q_pe_h]            [Dl + R]
 *             O'_h = softmax(scale q'_h L^T) L[:, :Dl]      L = latent rows
 *             O_h  = O'_h W_UV[h]
 *
 * In real arithmetic q'_h . L_j = q_h . K_h,j, so both give the same O and
 * the same LSE; the absorbed form is what decode kernels (FlashMLA) run:
 * one KV head of Dl + R dims whose first Dl dims are also V.  The scale is
 * the model's, 1/sqrt(P + R) times DeepSeek's YaRN mscale squared (see
 * chunk/latent.h), not 1/sqrt(Dl + R).
 *
 * Layouts (packed requests, vLLM's names):
 *   absorbed  q [T, H, Dl + R]; cache [n_blocks, block_size, 1, Dl + R]
 *             through block_table [n_req, cols] and seq_lens (keys per
 *             request); q_lens queries per request (default 1 each:
 *             decode).  out [T, H, Dl], LSE [T, H].
 *   naive     q [T, H, P + R]; c_kv [Tk, Dl]; k_pe [Tk, R]; W_UK
 *             [H, Dl, P]; W_UV [H, Dl, Vd]; q_lens / kv_lens (default one
 *             request).  out [T, H, Vd], LSE [T, H].
 * Query i of a request with Lq queries and Lk keys sits at position
 * i + Lk - Lq; causal keeps keys j <= that (decode and chunked prefill).
 *
 * Numerics as kv_attn_run (attn.h): inputs f32/f16/bf16/f64 read as f32,
 * scores, online softmax and sums in f32, exp within 2 ulp, a row with no
 * key gives 0 and LSE -inf.  Work items are (request, query tile, key
 * chunk); requests with at most 4 queries split their keys into chunks of
 * 4096 merged in chunk order, so the result is bit-identical for any
 * thread count.  The error bounds are kv_mla_bound_*() below, derived in
 * kvattn(1), MLA.
 */
#ifndef KV_MLA_H
#define KV_MLA_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

/* The absorbed form over a paged latent cache.  Zero it and fill what
 * applies; tensors and arrays are borrowed. */
struct kv_mla_req {
    const struct kv_tensor *q;        /* [T, H, Dl + R] */
    const struct kv_tensor *cache;    /* [n_blocks, block_size, 1, Dl + R] */
    const int64_t *block_table;       /* [bt_rows, bt_cols] row-major */
    size_t bt_rows, bt_cols;
    const int64_t *seq_lens; size_t n_seq_lens;   /* keys per request */
    const int64_t *q_lens; size_t n_q_lens;       /* NULL: 1 per request */
    int64_t kv_lora_rank;             /* Dl: the leading dims that are V */
    int causal;
    double scale;                     /* required: the model's */
    enum kv_dtype out_dtype;          /* KV_NDTYPES = same as q */
    int n_threads;                    /* 0 = all cores */
    size_t max_bytes;                 /* 0 = no limit; else what the f32 copy
                                       * of Q, the partial results, the
                                       * output and the LSE may take
                                       * together */
    /* bf16 Q and cache: the products on the bf16 dot-product tiles (an
     * enum kv_bf16_route of attn/bf16.h; 0 = f32 sgemm on the widened
     * values, as for every other dtype); the scores scaled after the dot
     * product, P rounded to bf16 before P V.  A hardware route the CPU
     * lacks falls back to sgemm. */
    int bf16_route;
    /* Keys per chunk of a request with at most 4 queries (0: 4096).
     * Fixed by the caller, never by the thread count, so the result stays
     * bit-identical for any -j. */
    int64_t chunk_k;
    /* Heads per work item of a request with at most 4 queries (0: all
     * of them in one item): the items of a decode step that has few keys
     * to chunk split its heads instead, so that each row is summed over
     * all of its keys in one item, with no partial results to merge.  A
     * shape's choice, like chunk_k. */
    int64_t head_group;
    /* The cache given at 2^-v_exp of its values (0 .. 126; an FP8 cache
     * dequantized at k_scale 2^-v_exp, v_exp from kv_attn_fp8_v_exp of
     * attn.h): the scores use scale 2^v_exp and each output row is
     * multiplied by 2^v_exp after its division by the sum of its
     * weights, so that large latent values summed over many keys stay
     * inside f32 before that division.  Both factors are exact: the
     * scores and the output are those of the cache at its own values
     * wherever these did not overflow (and no product or value fell
     * below 2^-126).  0: nothing. */
    int v_exp;
};

/* Validate r completely, then compute out [T, H, Dl] and (lse != NULL)
 * lse [T, H] f32.  out and lse must be zeroed or released; on failure they
 * are untouched and e names the disagreeing shapes. */
int kv_mla_absorbed(const struct kv_mla_req *r, struct kv_tensor *out,
                    struct kv_tensor *lse, struct kv_err *e);

/* The naive form. */
struct kv_mla_naive_req {
    const struct kv_tensor *q;        /* [T, H, P + R] */
    const struct kv_tensor *c_kv;     /* [Tk, Dl] */
    const struct kv_tensor *k_pe;     /* [Tk, R] */
    const struct kv_tensor *w_uk;     /* [H, Dl, P] */
    const struct kv_tensor *w_uv;     /* [H, Dl, Vd] */
    const int64_t *q_lens; size_t n_q_lens;    /* NULL: one request */
    const int64_t *kv_lens; size_t n_kv_lens;  /* NULL: = q_lens */
    int causal;
    int has_scale;
    double scale;                     /* default 1/sqrt(P + R) */
    enum kv_dtype out_dtype;          /* KV_NDTYPES = same as q */
    int n_threads;
    size_t max_bytes;                 /* 0 = no limit; else the f32 copies of
                                       * the five inputs, the partial
                                       * results, output and LSE together */
};

int kv_mla_naive(const struct kv_mla_naive_req *r, struct kv_tensor *out,
                 struct kv_tensor *lse, struct kv_err *e);

/* q [T, H, P + R] and W_UK [H, Dl, P] -> the absorbed query
 * [T, H, Dl + R] (W_UK[h] q_nope in double, one rounding to dtype; q_pe
 * copied).  The dtype is q's unless `dtype` is given (KV_NDTYPES = q's). */
int kv_mla_absorb_q(const struct kv_tensor *q, const struct kv_tensor *w_uk,
                    enum kv_dtype dtype, size_t max_bytes,
                    struct kv_tensor *out, struct kv_err *e);

/* The absorbed output [T, H, Dl] times W_UV [H, Dl, Vd] -> [T, H, Vd]
 * (double sums, one rounding to dtype; KV_NDTYPES = o's). */
int kv_mla_project(const struct kv_tensor *o, const struct kv_tensor *w_uv,
                   enum kv_dtype dtype, size_t max_bytes,
                   struct kv_tensor *out, struct kv_err *e);

/* Error bounds, absolute per element, against exact MLA attention of the
 * same inputs (kvattn(1), MLA).  n keys in a row (an upper bound will do),
 * A a bound on every |score|, V on every |value|, out_dtype the output's.
 *   absorbed: d = Dl + R, A >= scale max|q'|_2 max|L|_2, V = max|c_kv|.
 *   naive:    A >= scale (max|q_nope|_2 max|c|_2 max_h |W_UK[h]|_F +
 *                         max|q_pe|_2 max|k_pe|_2),
 *             V >= max|c|_2 max_{h,v} |W_UV[h][:, v]|_2; the dot
 *             products of length Dl + P + R and the f32 value
 *             projection (Dl u V) are charged.
 *   projected: an absorbed output bound b over Dl dims after W_UV: b
 *             max_{h,v} |W_UV[h][:, v]|_1 plus the projection's rounding
 *             (u |O|, one rounding). */
double kv_mla_bound_absorbed(int64_t n, int64_t d, double A, double V,
                             enum kv_dtype out_dtype);
/* The absorbed form on the bf16 tiles (kv_mla_req.bf16_route): as
 * kvattn's bf16 tiles (attn/bound.h kv_bound_attn_out_bf16, P rounded),
 * X from kv_bound_scan_x of Q and the cache, odd for a route whose adds
 * round to odd. */
double kv_mla_bound_absorbed_bf16(int64_t n, int64_t d, double A, double V, double X,
                                  enum kv_dtype out_dtype, int odd);
double kv_mla_bound_naive(int64_t n, int64_t dl, int64_t d, double A,
                          double V, enum kv_dtype out_dtype);
double kv_mla_bound_projected(double b_absorbed, double w_uv_col_l1,
                              double o_abs, enum kv_dtype out_dtype);

/* The rows of r's latent cache that its requests read (keys 0 ..
 * seq_lens[b] - 1 of each request with a query, through its block-table
 * row), each once, in slot order, copied into rows [n, Dl + R] of the
 * cache's dtype: what the bounds' scans take instead of the whole cache,
 * whose unread blocks play no part in the output.  Call after
 * kv_mla_absorbed accepted r.  rows must be zeroed or released. */
int kv_mla_rows_read(const struct kv_mla_req *r, size_t max_bytes, struct kv_tensor *rows,
                     struct kv_err *e);

/* A and V of the bounds above from the tensors (the absorbed form's from
 * q' and the cache, the naive form's from its five inputs). */
void kv_mla_scan_absorbed(const struct kv_tensor *q, const struct kv_tensor *cache,
                          int64_t dl, double scale, double *A, double *V);
void kv_mla_scan_naive(const struct kv_mla_naive_req *r, double scale,
                       double *A, double *V, double *w_uv_col_l1);

/* Synthetic inputs of both forms for one geometry (kvattn gen with an MLA
 * config): B requests of S queries at the end of Lk keys each, packed.
 * Values are uniform with unit variance (c_kv as after its RMSNorm), the
 * up-projections scaled by 1/sqrt(Dl) so that K and V have unit variance
 * too, all rounded once to dtype; q_absorbed = kv_mla_absorb_q(q, W_UK);
 * the cache holds [c_kv | k_pe] of request b's token j in block
 * block_table[b][j / block_size] (block 0 unused, the others handed out
 * by a shuffle of the seed), row j % block_size.  Everything is a function
 * of the seed.  kv_mla_inputs_release frees, safe on a zeroed struct. */
struct kv_mla_gen {
    int64_t B, H, S, Lk, Dl, R, P, Vd, block_size;
    uint64_t seed;
    enum kv_dtype dtype;
};
struct kv_mla_inputs {
    struct kv_tensor q, q_absorbed, c_kv, k_pe, w_uk, w_uv, cache;
    struct kv_tensor block_table;      /* i32 [B, ceil(Lk / block_size)] */
};
int kv_mla_gen_inputs(const struct kv_mla_gen *g, size_t max_bytes,
                      struct kv_mla_inputs *m, struct kv_err *e);
void kv_mla_inputs_release(struct kv_mla_inputs *m);

/* The inputs of DeepSeek-V3.2's lightning indexer (kvattn index) for the
 * same geometry and seed, packed as kv_mla_gen_inputs packs its requests:
 * q [B S, n_heads, head_dim] and k [B Lk, head_dim] in g's dtype, uniform
 * with unit variance (k as after the indexer's LayerNorm), and the heads'
 * weights w [B S, n_heads] in f32, uniform in [-1, 1) times
 * n_heads^-1/2 (weights_proj(x) n_heads^-1/2 of the model).  Each request
 * b's rows are q[b S ..], k[b Lk ..], w[b S ..].  Release with
 * kv_tensor_release; untouched on failure. */
int kv_mla_gen_index(const struct kv_mla_gen *g, int64_t n_heads, int64_t head_dim,
                     size_t max_bytes, struct kv_tensor *q, struct kv_tensor *k,
                     struct kv_tensor *w, struct kv_err *e);

/* kvattn gen with an MLA model's config (kvattn(1), MLA): the options as
 * the program takes them, checked against the config l read by
 * kv_latent_load_attn, in the program's order and with its messages (a
 * failure is a usage error).  shape is "B,S" (H the config's
 * num_attention_heads) or "B,H,S"; kv_len 0 means S; block_size is the
 * latent cache's (the program's default is 64); seed, dtype (f32, f16 or
 * bf16) and max_mem NULL mean 0, the config's dtype and the default
 * limit.  kv_mla_gen_prepare leaves p.index zero: kv_mla_index_fields
 * reads it from the same file. */
struct kv_latent;
struct kv_mla_gen_args {
    const char *config;               /* the file l was read from */
    const char *shape, *seed, *dtype, *max_mem;
    int64_t kv_len, block_size;
};
struct kv_mla_indexer {
    int64_t n_heads, head_dim, topk;  /* all 0: the model has none */
};
struct kv_mla_gen_plan {
    struct kv_mla_gen g;
    struct kv_mla_indexer index;
    double scale;                     /* the model's softmax scale */
    size_t max_mem;
};
int kv_mla_gen_prepare(const struct kv_latent *l, const struct kv_mla_gen_args *a,
                       struct kv_mla_gen_plan *p, struct kv_err *e);

/* DeepSeek-V3.2's lightning indexer in config.json: index_n_heads,
 * index_head_dim and index_topk, at the top level or in text_config
 * (when kv_lora_rank is only there); all 0 when the file has none of
 * them.  Refused: some but not all three, or a value that is not an
 * integer in 1 .. 2^16 (2^31 - 1 for index_topk).  ix is untouched on
 * failure. */
int kv_mla_index_fields(const char *path, struct kv_mla_indexer *ix, struct kv_err *e);

/* What gen writes into --dir, by file name in the order it writes them:
 * the eight arrays of kv_mla_gen_inputs (q.npy .. block_table.npy); three
 * text files, seq_lens and q_lens (B values Lk, B values S) and scale;
 * and with an indexer (index.topk > 0) kv_mla_gen_index's three arrays
 * and the text file index_topk.  kv_mla_gen_n_files is 11 or 15;
 * kv_mla_gen_tensor the array of file i (NULL for a text file).
 * kv_mla_gen_make makes the arrays of p (zeroed or released on failure);
 * kv_mla_gen_release frees them. */
#define KV_MLA_GEN_FILES 15
extern const char *const kv_mla_gen_files[KV_MLA_GEN_FILES];
struct kv_mla_gen_set {
    struct kv_mla_inputs m;
    struct kv_tensor index_q, index_k, index_w;
};
size_t kv_mla_gen_n_files(const struct kv_mla_gen_plan *p);
int kv_mla_gen_make(const struct kv_mla_gen_plan *p, struct kv_mla_gen_set *s,
                    struct kv_err *e);
const struct kv_tensor *kv_mla_gen_tensor(const struct kv_mla_gen_set *s, size_t i);
void kv_mla_gen_release(struct kv_mla_gen_set *s);

#endif
