/* mla_sparse.c - DeepSeek-V3.2's sparse MLA (DSA): the absorbed form of
 * mla.h over only the latent positions each query's indexer selected.
 *
 * topk [T, K] (int32) names, for query t of request b, positions 0 ..
 * seq_lens[b] - 1 of b's keys (-1: unused), each read through b's
 * block-table row; per head
 *
 *   out[t][h] = sum_j p_j L_j[:Dl],  p = softmax(scale q'[t][h] . L_j)
 *
 * over the selected j only, LSE = log sum_j exp(scale q' . L_j).  A query
 * with no selected position gives 0 and LSE -inf.
 *
 * kv_mla_sparse_ref computes each row in double (products, maximum,
 * exponentials, sums) and rounds it once to the output's dtype: within
 * half a unit in the last place of the exact result.  kv_mla_sparse hands
 * each query to kv_mla_absorbed as a request of one query whose keys are
 * its selected rows in ascending position order, read in place through a
 * block table of one-row blocks (no copy of the cache), so it has that
 * kernel's speed, routes and bound, with seq_len the number of rows
 * selected.  A call of few queries splits each into groups of heads, or
 * chunks of keys merged in order (SPARSE_FEW below); queries go in groups
 * whose tables and partial results fit a budget.  Either way rows are
 * independent of the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "attn/mla_sparse.h"
#include "core/cli.h"
#include "core/half.h"
#include "core/tensor.h"

struct sjob {
    const struct kv_mla_req *r;
    const int32_t *topk;
    int64_t k, h, dl, dr;
    const int64_t *req_of;     /* request of each query */
    struct kv_tensor *out, *lse;
    int failed;
};

static double cache_at(const struct kv_tensor *c, size_t i)
{
    switch (c->dtype) {
    case KV_F32: return ((const float *)c->data)[i];
    case KV_BF16: return kv_bf16_to_f32(((const uint16_t *)c->data)[i]);
    case KV_F16: return kv_f16_to_f32(((const uint16_t *)c->data)[i]);
    default: return kv_tensor_get_f64(c, i);
    }
}

static void put(struct kv_tensor *t, size_t i, double v)
{
    switch (t->dtype) {
    case KV_F64: ((double *)t->data)[i] = v; break;
    case KV_BF16: ((uint16_t *)t->data)[i] = kv_f32_to_bf16((float)v); break;
    case KV_F16: ((uint16_t *)t->data)[i] = kv_f32_to_f16((float)v); break;
    default: ((float *)t->data)[i] = (float)v; break;
    }
}

/* The cache row of position j of request b. */
static size_t row_of(const struct kv_mla_req *r, int64_t b, int64_t j)
{
    int64_t bs = r->cache->shape[1];
    int64_t blk = r->block_table[(size_t)b * r->bt_cols + (size_t)(j / bs)];
    return (size_t)(blk * bs + j % bs);
}

static void srow(void *ctx, size_t t)
{
    struct sjob *s = ctx;
    const struct kv_mla_req *r = s->r;
    int64_t b = s->req_of[t], w = s->dl + s->dr;
    double *p = malloc((size_t)s->k * sizeof *p);
    double *acc = malloc((size_t)s->dl * sizeof *acc);
    if (!p || !acc) {
        __atomic_store_n(&s->failed, 1, __ATOMIC_RELAXED);
        free(p);
        free(acc);
        return;
    }
    const int32_t *sel = s->topk + t * (size_t)s->k;
    for (int64_t h = 0; h < s->h; h++) {
        size_t qo = (t * (size_t)s->h + (size_t)h) * (size_t)w;
        double mx = -INFINITY;
        for (int64_t m = 0; m < s->k; m++) {
            if (sel[m] < 0)
                continue;
            size_t co = row_of(r, b, sel[m]) * (size_t)w;
            double dot = 0;
            for (int64_t d = 0; d < w; d++)
                dot += cache_at(r->q, qo + (size_t)d) * cache_at(r->cache, co + (size_t)d);
            p[m] = dot * ldexp(r->scale, r->v_exp);
            if (p[m] > mx)
                mx = p[m];
        }
        double sum = 0;
        memset(acc, 0, (size_t)s->dl * sizeof *acc);
        for (int64_t m = 0; m < s->k; m++) {
            if (sel[m] < 0)
                continue;
            double e = exp(p[m] - mx);
            size_t co = row_of(r, b, sel[m]) * (size_t)w;
            sum += e;
            for (int64_t d = 0; d < s->dl; d++)
                acc[d] += e * cache_at(r->cache, co + (size_t)d);
        }
        size_t oo = (t * (size_t)s->h + (size_t)h) * (size_t)s->dl;
        for (int64_t d = 0; d < s->dl; d++)
            put(s->out, oo + (size_t)d, sum > 0 ? ldexp(acc[d] / sum, r->v_exp) : 0.0);
        if (s->lse)
            ((float *)s->lse->data)[t * (size_t)s->h + (size_t)h] =
                sum > 0 ? (float)(mx + log(sum)) : -INFINITY;
    }
    free(p);
    free(acc);
}

/* Every index in [-1, seq_len) of its query's request, at or before the
 * query's position when causal, and none twice in a row.  Repeats are
 * found with one stamp per key position (the row that last named it), so
 * a row costs O(k). */
static int check_indices(const struct kv_mla_req *r, const int32_t *topk,
                         int64_t n_t, int64_t k, const int64_t *req_of,
                         const int64_t *pos, struct kv_err *e)
{
    int64_t most = 1;
    for (size_t b = 0; b < r->n_seq_lens; b++)
        most = r->seq_lens[b] > most ? r->seq_lens[b] : most;
    int64_t *seen = malloc((size_t)most * sizeof *seen);
    if (!seen)
        return kv_err_set(e, "out of memory");
    for (int64_t j = 0; j < most; j++)
        seen[j] = -1;
    int rc = 0;
    for (int64_t t = 0; t < n_t && rc == 0; t++) {
        int64_t len = r->seq_lens[req_of[t]];
        for (int64_t m = 0; m < k; m++) {
            int32_t j = topk[t * k + m];
            if (j < -1 || j >= len) {
                rc = kv_err_set(e, "--topk-indices: row %lld holds %d, outside -1 .. %lld "
                                "(the request's %lld keys)", (long long)t, (int)j,
                                (long long)len - 1, (long long)len);
                break;
            }
            if (r->causal && j > pos[t]) {
                rc = kv_err_set(e, "--topk-indices: row %lld holds %d, after the query's "
                                "position %lld (causal)", (long long)t, (int)j,
                                (long long)pos[t]);
                break;
            }
            if (j < 0)
                continue;
            if (seen[j] == t) {
                rc = kv_err_set(e, "--topk-indices: row %lld names key %d twice",
                                (long long)t, (int)j);
                break;
            }
            seen[j] = t;
        }
    }
    free(seen);
    return rc;
}

/* Validate r and topk; fill req_of and pos (malloc'd, T each) with each
 * query's request and position. */
static int sparse_check(const struct kv_mla_req *r, const int32_t *topk,
                        int64_t n_topk_rows, int64_t k, int64_t **req_of_out,
                        int64_t **pos_out, struct kv_err *e)
{
    const struct kv_tensor *q = r->q, *c = r->cache;
    char sh[128];
    if (q->ndim != 3) {
        kv_shape_str(q->ndim, q->shape, sh, sizeof sh);
        return kv_err_set(e, "query shape %s: expected [T, H, Dl + R]", sh);
    }
    if (c->ndim != 4 || c->shape[2] != 1 || c->shape[3] != q->shape[2]) {
        kv_shape_str(c->ndim, c->shape, sh, sizeof sh);
        return kv_err_set(e, "latent cache %s: expected [num_blocks, block_size, 1, %lld]",
                          sh, (long long)q->shape[2]);
    }
    int64_t n_t = q->shape[0], dl = r->kv_lora_rank;
    if (dl < 1 || dl > q->shape[2])
        return kv_err_set(e, "kv_lora_rank %lld does not fit rows of %lld", (long long)dl,
                          (long long)q->shape[2]);
    if (n_topk_rows != n_t)
        return kv_err_set(e, "--topk-indices has %lld rows for %lld queries",
                          (long long)n_topk_rows, (long long)n_t);
    if (r->bt_rows < r->n_seq_lens)     /* as the dense form: more rows may be */
        return kv_err_set(e, "%zu --seq-lens for %zu block-table rows", r->n_seq_lens,
                          r->bt_rows);
    int64_t *req_of = malloc((size_t)(n_t ? n_t : 1) * sizeof *req_of);
    int64_t *pos = malloc((size_t)(n_t ? n_t : 1) * sizeof *pos);
    if (!req_of || !pos) {
        free(req_of);
        free(pos);
        return kv_err_set(e, "out of memory");
    }
    int64_t t = 0;
    int rc = 0;
    for (size_t b = 0; b < r->n_seq_lens && rc == 0; b++) {
        int64_t lq = r->q_lens ? r->q_lens[b] : 1, lk = r->seq_lens[b];
        if (r->q_lens && r->n_q_lens != r->n_seq_lens)
            rc = kv_err_set(e, "%zu --q-lens for %zu requests", r->n_q_lens, r->n_seq_lens);
        else if (lk < lq || lk < 0)
            rc = kv_err_set(e, "request %zu: %lld queries over %lld keys", b, (long long)lq,
                            (long long)lk);
        else if ((uint64_t)(lk + c->shape[1] - 1) / (uint64_t)c->shape[1] > r->bt_cols)
            rc = kv_err_set(e, "request %zu: %lld keys need more than the block table's "
                            "%zu columns", b, (long long)lk, r->bt_cols);
        for (int64_t i = 0; rc == 0 && i < lq; i++, t++) {
            if (t >= n_t) {
                rc = kv_err_set(e, "the query lengths add up to more than the %lld queries",
                                (long long)n_t);
                break;
            }
            req_of[t] = (int64_t)b;
            pos[t] = i + lk - lq;
        }
        for (int64_t j = 0; rc == 0 && j < (lk + c->shape[1] - 1) / c->shape[1]; j++) {
            int64_t blk = r->block_table[b * r->bt_cols + (size_t)j];
            if (blk < 0 || blk >= c->shape[0])
                rc = kv_err_set(e, "request %zu: block %lld is outside the cache's %lld",
                                b, (long long)blk, (long long)c->shape[0]);
        }
    }
    if (rc == 0 && t != n_t)
        rc = kv_err_set(e, "the query lengths add up to %lld, the query holds %lld",
                        (long long)t, (long long)n_t);
    if (rc == 0)
        rc = check_indices(r, topk, n_t, k, req_of, pos, e);
    if (rc) {
        free(req_of);
        free(pos);
        return -1;
    }
    *req_of_out = req_of;
    *pos_out = pos;
    return 0;
}

/* The end of either form: on success o and l move into out and lse (lse
 * may be NULL), else both are released and out, lse stay untouched. */
static int hand_over(int rc, struct kv_tensor *o, struct kv_tensor *l,
                     struct kv_tensor *out, struct kv_tensor *lse)
{
    if (rc) {
        kv_tensor_release(o);
        kv_tensor_release(l);
        return -1;
    }
    kv_tensor_move(out, o);
    if (lse)
        kv_tensor_move(lse, l);
    return 0;
}

static enum kv_dtype out_type(const struct kv_mla_req *r)
{
    enum kv_dtype od = r->out_dtype == KV_NDTYPES ? r->q->dtype : r->out_dtype;
    return od == KV_F32 || od == KV_F64 || od == KV_BF16 || od == KV_F16 ? od : KV_F32;
}

int kv_mla_sparse_ref(const struct kv_mla_req *r, const int32_t *topk,
                      int64_t n_topk_rows, int64_t k, struct kv_tensor *out,
                      struct kv_tensor *lse, struct kv_err *e)
{
    int64_t *req_of, *pos;
    if (sparse_check(r, topk, n_topk_rows, k, &req_of, &pos, e))
        return -1;
    const struct kv_tensor *q = r->q;
    int64_t n_t = q->shape[0], h = q->shape[1], dl = r->kv_lora_rank;
    int rc = 0;
    enum kv_dtype od = out_type(r);
    int64_t oshape[3] = { n_t, h, dl };
    struct kv_tensor o, l;
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    if (kv_tensor_alloc(&o, od, 3, oshape, r->max_bytes, e) ||
        (lse && kv_tensor_alloc(&l, KV_F32, 2, oshape, r->max_bytes, e)))
        rc = -1;
    if (rc == 0) {
        struct sjob s = { r, topk, k, h, dl, q->shape[2] - dl, req_of, &o,
                          lse ? &l : NULL, 0 };
        kv_parallel_for((size_t)n_t, r->n_threads, srow, &s);
        if (s.failed)
            rc = kv_err_set(e, "out of memory");
    }
    free(req_of);
    free(pos);
    return hand_over(rc, &o, &l, out, lse);
}

/* ---- the fast path: the selected rows read in place ---------------- */

/* The rows read out of the cache file (kv_mla_sparse_packed): cache row
 * rows[i] (ascending; every selected row among them) is row i of t. */
struct packed {
    const int64_t *rows;
    size_t n;
    const struct kv_tensor *t;
};

/* A call of fewer than SPARSE_FEW queries splits each query into items
 * that keep every core busy: with SPARSE_GROUP_MIN heads or more, into
 * groups of SPARSE_GROUP heads, each over all of the query's keys (no
 * partial results to keep and merge: measured on a Zen 5, DeepSeek's 128
 * heads over 2,048 keys took 0.67 of the time of chunks of 512 keys, in
 * a process's one call); with fewer heads, into chunks of SPARSE_CHUNK
 * keys merged in order.  More queries are items enough, and each is one
 * item.  All of it depends on the shape only, so the sums never depend
 * on the thread count. */
enum { SPARSE_CHUNK = 512, SPARSE_FEW = 8, SPARSE_GROUP = 32, SPARSE_GROUP_MIN = 64 };

/* The split above, as kv_mla_req's chunk_k and head_group. */
static void item_split(const struct kv_mla_req *r, int64_t *chunk_k, int64_t *head_group)
{
    *chunk_k = INT32_MAX;
    *head_group = 0;
    if (r->q->shape[0] >= SPARSE_FEW)
        return;
    if (r->q->shape[1] >= SPARSE_GROUP_MIN)
        *head_group = SPARSE_GROUP;
    else
        *chunk_k = SPARSE_CHUNK;
}

/* Sort n non-negative int64 (below 2^33) ascending: least significant
 * digit first, 11 bits a pass, tmp n elements of scratch. */
static void radix_sort(int64_t *a, int64_t *tmp, int64_t n)
{
    int64_t most = 0;
    for (int64_t i = 0; i < n; i++)
        most = a[i] > most ? a[i] : most;
    for (int shift = 0; shift < 33 && (most >> shift) > 0; shift += 11) {
        size_t count[2049] = {0};
        for (int64_t i = 0; i < n; i++)
            count[((a[i] >> shift) & 2047) + 1]++;
        for (int d = 1; d <= 2048; d++)
            count[d] += count[d - 1];
        for (int64_t i = 0; i < n; i++)
            tmp[count[(a[i] >> shift) & 2047]++] = a[i];
        memcpy(a, tmp, (size_t)n * sizeof *a);
    }
}

/* Selected positions of query t (not -1). */
static int64_t n_selected(const int32_t *topk, int64_t k, int64_t t)
{
    int64_t m = 0;
    for (int64_t i = 0; i < k; i++)
        m += topk[t * k + i] >= 0;
    return m;
}

/* Queries [t0, t1): each becomes a request of one query whose keys are its
 * selected rows in ascending position order (so the sums depend on the
 * set, not on the order of the indices).  Nothing is copied: the cache is
 * viewed as blocks of one row, and each request's block-table row lists
 * the cache rows of its positions, which the kernel reads in place.
 * kv_mla_absorbed computes them, non-causal (the selection is the mask),
 * and the rows land in out and lse at t0; or, when out holds no buffer
 * yet (one chunk of every query), its result becomes out and lse, with
 * no copy. */
/* The index of cache row s among the n ascending rows of pk (present). */
static int64_t packed_at(const struct packed *pk, int64_t s)
{
    size_t lo = 0, hi = pk->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (pk->rows[mid] <= s)
            lo = mid;
        else
            hi = mid;
    }
    return (int64_t)lo;
}

static int sparse_chunk(const struct kv_mla_req *r, const int32_t *topk, int64_t k,
                        const int64_t *req_of, int64_t t0, int64_t t1, const struct packed *pk,
                        struct kv_tensor *out, struct kv_tensor *lse, struct kv_err *e)
{
    const struct kv_tensor *q = r->q, *c = r->cache;
    int64_t n = t1 - t0, w = q->shape[2], h = q->shape[1];
    int64_t *lens = calloc((size_t)n, sizeof *lens);
    int64_t cols = 1;
    int rc = -1;
    struct kv_tensor o, l;
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    int64_t *bt = NULL, *tmp = malloc((size_t)(k ? k : 1) * sizeof *tmp);
    if (!lens || !tmp)
        goto oom;
    for (int64_t t = t0; t < t1; t++) {
        lens[t - t0] = n_selected(topk, k, t);
        cols = lens[t - t0] > cols ? lens[t - t0] : cols;
    }
    bt = calloc((size_t)n * (size_t)cols, sizeof *bt);
    if (!bt)
        goto oom;
    for (int64_t t = t0; t < t1; t++) {
        int64_t m = 0, b = req_of[t], *row = bt + (t - t0) * cols;
        for (int64_t i = 0; i < k; i++)
            if (topk[t * k + i] >= 0)
                row[m++] = topk[t * k + i];
        /* ascending positions; rows of one request grow with the position
         * within a block but not across blocks, so sort positions first */
        radix_sort(row, tmp, m);
        for (int64_t i = 0; i < m; i++)
            row[i] = (int64_t)row_of(r, b, row[i]);
        for (int64_t i = 0; pk && i < m; i++) {
            int64_t at = pk->n ? packed_at(pk, row[i]) : 0;
            if (!pk->n || pk->rows[at] != row[i]) {
                kv_err_set(e, "cache row %lld is not among the %zu rows read", (long long)row[i],
                           pk->n);
                goto out;
            }
            row[i] = at;
        }
    }
    struct kv_tensor cv = *c;          /* the same bytes, blocks of one row */
    cv.shape[0] = c->shape[0] * c->shape[1];
    cv.shape[1] = 1;
    if (pk) {                          /* or the rows read, in their order */
        cv.data = pk->t->data;
        cv.nbytes = pk->t->nbytes;
        cv.shape[0] = (int64_t)pk->n;
    }
    struct kv_tensor qv = *q;
    qv.shape[0] = n;
    qv.data = (char *)q->data + (size_t)t0 * (size_t)h * (size_t)w * kv_dtype_size(q->dtype);
    qv.nbytes = (size_t)n * (size_t)h * (size_t)w * kv_dtype_size(q->dtype);
    struct kv_mla_req r2 = *r;
    r2.q = &qv;
    r2.cache = &cv;
    r2.block_table = bt;
    r2.bt_rows = (size_t)n;
    r2.bt_cols = (size_t)cols;
    r2.seq_lens = lens;
    r2.n_seq_lens = (size_t)n;
    r2.q_lens = NULL;
    r2.n_q_lens = 0;
    r2.causal = 0;
    r2.max_bytes = 0;
    item_split(r, &r2.chunk_k, &r2.head_group);
    if (kv_mla_absorbed(&r2, &o, lse ? &l : NULL, e))
        goto out;
    if (out->data == NULL) {     /* every query (sparse_run): the result as it is */
        kv_tensor_move(out, &o);
        if (lse)
            kv_tensor_move(lse, &l);
        rc = 0;
        goto out;
    }
    size_t orow = (size_t)h * (size_t)r->kv_lora_rank * kv_dtype_size(o.dtype);
    memcpy((char *)out->data + (size_t)t0 * orow, o.data, (size_t)n * orow);
    if (lse)
        memcpy((float *)lse->data + (size_t)t0 * (size_t)h, l.data,
               (size_t)n * (size_t)h * sizeof(float));
    rc = 0;
    goto out;
oom:
    kv_err_set(e, "out of memory");
out:
    kv_tensor_release(&o);
    kv_tensor_release(&l);
    free(bt);
    free(tmp);
    free(lens);
    return rc;
}

/* The end of the chunk of queries that starts at t0: queries whose block
 * tables and partial results (H rows of Dl + 2 floats, and one more per
 * chunk of keys when item_split chunks them) take at most a budget, an
 * eighth of --max-mem between 16 MiB and 1 GiB; at least one. */
static int64_t chunk_end(const struct kv_mla_req *r, const int32_t *topk, int64_t k, int64_t t0)
{
    int64_t n_t = r->q->shape[0], h = r->q->shape[1], dl = r->kv_lora_rank;
    size_t budget = r->max_bytes ? r->max_bytes / 8 : (size_t)1 << 30;
    budget = budget < ((size_t)16 << 20) ? (size_t)16 << 20 :
             budget > ((size_t)1 << 30) ? (size_t)1 << 30 : budget;
    size_t per_part = (size_t)h * (size_t)(dl + 2) * sizeof(float), used = 0;
    int64_t t1 = t0, ck, hg;
    item_split(r, &ck, &hg);
    while (t1 < n_t) {
        int64_t m = n_selected(topk, k, t1);
        size_t need = (size_t)m * sizeof(int64_t) +
                      (size_t)(ck < INT32_MAX ? (m + ck - 1) / ck + 1 : 1) * per_part;
        if (t1 > t0 && used + need > budget)
            break;
        used += need;
        t1++;
    }
    return t1;
}

/* kv_mla_sparse over the cache in place (pk NULL) or over the rows of
 * pk. */
static int sparse_run(const struct kv_mla_req *r, const int32_t *topk, int64_t n_topk_rows,
                      int64_t k, const struct packed *pk, struct kv_tensor *out,
                      struct kv_tensor *lse, struct kv_err *e)
{
    int64_t *req_of, *pos;
    if (sparse_check(r, topk, n_topk_rows, k, &req_of, &pos, e))
        return -1;
    const struct kv_tensor *q = r->q;
    int64_t n_t = q->shape[0], h = q->shape[1], dl = r->kv_lora_rank;
    int64_t oshape[3] = { n_t, h, dl };
    /* kv_mla_absorbed writes the output's dtype; f32 for the others */
    enum kv_dtype od = r->out_dtype == KV_NDTYPES ? q->dtype : r->out_dtype;
    struct kv_tensor o, l;
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    int rc = 0;
    int64_t t1 = chunk_end(r, topk, k, 0);
    /* one chunk of every query: its result is the output, else the
     * chunks' rows are copied into it */
    if ((t1 < n_t || n_t == 0) &&
        (kv_tensor_alloc(&o, od, 3, oshape, r->max_bytes, e) ||
         (lse && kv_tensor_alloc(&l, KV_F32, 2, oshape, r->max_bytes, e))))
        rc = -1;
    for (int64_t t0 = 0; rc == 0 && t0 < n_t; t0 = t1) {
        if (t0 > 0)
            t1 = chunk_end(r, topk, k, t0);
        rc = sparse_chunk(r, topk, k, req_of, t0, t1, pk, &o, lse ? &l : NULL, e);
    }
    free(req_of);
    free(pos);
    return hand_over(rc, &o, &l, out, lse);
}

int kv_mla_sparse(const struct kv_mla_req *r, const int32_t *topk,
                  int64_t n_topk_rows, int64_t k, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e)
{
    return sparse_run(r, topk, n_topk_rows, k, NULL, out, lse, e);
}

int kv_mla_sparse_rows(const struct kv_mla_req *r, const int32_t *topk, int64_t n_topk_rows,
                       int64_t k, int64_t **rows, size_t *n_rows, struct kv_err *e)
{
    int64_t *req_of, *pos;
    if (sparse_check(r, topk, n_topk_rows, k, &req_of, &pos, e))
        return -1;
    const struct kv_tensor *c = r->cache;
    size_t n_slots = (size_t)c->shape[0] * (size_t)c->shape[1], n = 0;
    unsigned char *seen = calloc(n_slots ? n_slots : 1, 1);
    int64_t *out = NULL;
    if (!seen)
        goto oom;
    for (int64_t t = 0; t < n_topk_rows; t++)
        for (int64_t m = 0; m < k; m++)
            if (topk[t * k + m] >= 0) {
                size_t s = row_of(r, req_of[t], topk[t * k + m]);
                n += !seen[s];
                seen[s] = 1;
            }
    out = malloc((n ? n : 1) * sizeof *out);
    if (!out)
        goto oom;
    for (size_t s = 0, i = 0; s < n_slots; s++)
        if (seen[s])
            out[i++] = (int64_t)s;
    free(seen);
    free(req_of);
    free(pos);
    *rows = out;
    *n_rows = n;
    return 0;
oom:
    free(seen);
    free(req_of);
    free(pos);
    return kv_err_set(e, "out of memory");
}

int kv_mla_sparse_packed(const struct kv_mla_req *r, const int32_t *topk,
                         int64_t n_topk_rows, int64_t k, const int64_t *rows, size_t n_rows,
                         const struct kv_tensor *packed, struct kv_tensor *out,
                         struct kv_tensor *lse, struct kv_err *e)
{
    const struct kv_tensor *c = r->cache;
    const int64_t w = c->ndim == 4 ? c->shape[3] : 0;
    if (packed->dtype != c->dtype || packed->nbytes != n_rows * (size_t)w *
                                                        kv_dtype_size(c->dtype))
        return kv_err_set(e, "the packed rows are not %zu rows of %lld %s values", n_rows,
                          (long long)w, kv_dtype_name(c->dtype));
    struct packed pk = { rows, n_rows, packed };
    return sparse_run(r, topk, n_topk_rows, k, &pk, out, lse, e);
}
