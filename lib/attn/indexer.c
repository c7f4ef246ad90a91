/* indexer.c - the lightning indexer's scores and top-k (see indexer.h).
 *
 * One query row at a time (rows in parallel, each written by one thread,
 * with a heap of its own): the visible keys' scores in double, then a
 * min-heap of the k best seen so far, ordered by (score, -index) so that of equal scores the smaller
 * index ranks higher; the heap is sorted at the end, best first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "attn/indexer.h"
#include "core/cli.h"
#include "core/tensor.h"

struct cand {
    double s;
    int64_t t;
};

/* a ranks below b: a lower score, or the same score and a larger index */
static int below(const struct cand *a, const struct cand *b)
{
    return a->s < b->s || (a->s == b->s && a->t > b->t);
}

static void sift_down(struct cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && below(&h[l], &h[m]))
            m = l;
        if (r < n && below(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        struct cand x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

static void sift_up(struct cand *h, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!below(&h[i], &h[p]))
            return;
        struct cand x = h[i];
        h[i] = h[p];
        h[p] = x;
        i = p;
    }
}

static int by_rank(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (below(x, y))
        return 1;
    if (below(y, x))
        return -1;
    return 0;
}

struct job {
    const struct kv_indexer_req *r;
    int32_t *idx;
    float *scores;
    const int64_t *cu_q, *cu_k;   /* a batch's starts (n_reqs + 1), or NULL */
    int failed;            /* a row could not get its heap */
};

/* q row i against key row t (both of the whole packed input). */
static double score(const struct kv_indexer_req *r, int64_t i, int64_t t)
{
    const float *k = r->k + t * r->head_dim;
    double sum = 0;
    for (int64_t h = 0; h < r->n_heads; h++) {
        const float *q = r->q + (i * r->n_heads + h) * r->head_dim;
        double dot = 0;
        for (int64_t d = 0; d < r->head_dim; d++)
            dot += (double)q[d] * k[d];
        dot *= r->scale;
        if (dot > 0)
            sum += (double)r->w[i * r->n_heads + h] * dot;
    }
    return sum;
}

static void row(void *ctx, size_t ii)
{
    struct job *j = ctx;
    const struct kv_indexer_req *r = j->r;
    int64_t i = (int64_t)ii, k = r->topk;
    /* the request of row i: its first query and key, its sizes */
    int64_t q0 = 0, k0 = 0, nq = r->n_q, nk = r->n_k;
    if (j->cu_q) {
        size_t lo = 0, hi = r->n_reqs;       /* cu_q[lo] <= i < cu_q[hi]; */
        /* at the end hi = lo + 1, so request lo holds row i (an empty
         * request shares its start with the next and is passed over) */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (j->cu_q[mid] <= i)
                lo = mid;
            else
                hi = mid;
        }
        q0 = j->cu_q[lo];
        k0 = j->cu_k[lo];
        nq = j->cu_q[lo + 1] - q0;
        nk = j->cu_k[lo + 1] - k0;
    }
    int64_t last = r->causal ? i - q0 + nk - nq : nk - 1;
    struct cand *h = malloc((size_t)k * sizeof *h);
    size_t n = 0;
    if (!h) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t t = 0; t <= last && t < nk; t++) {
        struct cand c = { score(r, i, k0 + t), t };
        if (n < (size_t)k) {
            h[n] = c;
            sift_up(h, n++);
        } else if (below(&h[0], &c)) {
            h[0] = c;
            sift_down(h, n, 0);
        }
    }
    qsort(h, n, sizeof *h, by_rank);
    for (int64_t m = 0; m < k; m++) {
        size_t o = (size_t)i * (size_t)k + (size_t)m;
        j->idx[o] = (size_t)m < n ? (int32_t)h[m].t : -1;
        if (j->scores)
            j->scores[o] = (size_t)m < n ? (float)h[m].s : -INFINITY;
    }
    free(h);
}

/* A batch's query and key starts, n_reqs + 1 each, in one array (*cu,
 * freed by the caller), once the lengths are checked. */
static int batch_starts(const struct kv_indexer_req *r, int64_t **cu, struct kv_err *e)
{
    size_t n = r->n_reqs;
    if (!r->kv_lens || n == 0)
        return kv_err_set(e, "a batch needs the queries and keys of each request");
    int64_t *c = malloc(2 * (n + 1) * sizeof *c);
    if (!c)
        return kv_err_set(e, "out of memory (%zu requests)", n);
    int64_t *cq = c, *ck = c + n + 1;
    cq[0] = ck[0] = 0;
    for (size_t b = 0; b < n; b++) {
        int64_t lq = r->q_lens[b], lk = r->kv_lens[b];
        const char *why = lq < 0 || lk < 0 ? "a length is negative" :
            lk > INT32_MAX ? "indices are int32" :
            r->causal && lq > lk ? "causal queries are the last of its keys" : NULL;
        if (why) {
            free(c);
            return kv_err_set(e, "request %zu: %lld queries over %lld keys: %s", b,
                              (long long)lq, (long long)lk, why);
        }
        if (lq > r->n_q - cq[b] || lk > r->n_k - ck[b]) {
            free(c);
            return kv_err_set(e, "requests 0 to %zu hold more than the %lld queries or "
                              "%lld keys of the inputs", b, (long long)r->n_q,
                              (long long)r->n_k);
        }
        cq[b + 1] = cq[b] + lq;
        ck[b + 1] = ck[b] + lk;
    }
    if (cq[n] != r->n_q || ck[n] != r->n_k) {
        long long sq = (long long)cq[n], sk = (long long)ck[n];
        free(c);
        return kv_err_set(e, "the requests hold %lld queries and %lld keys, the inputs "
                          "%lld and %lld", sq, sk, (long long)r->n_q, (long long)r->n_k);
    }
    *cu = c;
    return 0;
}

int kv_indexer_topk(const struct kv_indexer_req *r, int32_t *idx,
                    float *scores, struct kv_err *e)
{
    if (r->n_q < 0 || r->n_k < 0 || r->n_heads < 1 || r->head_dim < 1)
        return kv_err_set(e, "the indexer needs at least one head of size >= 1");
    if (r->topk < 1)
        return kv_err_set(e, "top-k must be at least 1, got %lld", (long long)r->topk);
    if (!r->q_lens && r->n_k > INT32_MAX)
        return kv_err_set(e, "%lld keys: indices are int32", (long long)r->n_k);
    if (r->causal && r->n_q > r->n_k)
        return kv_err_set(e, "causal: %lld queries over %lld keys (the queries are the "
                          "last of the keys)", (long long)r->n_q, (long long)r->n_k);
    if ((uint64_t)r->topk > SIZE_MAX / sizeof(struct cand))
        return kv_err_set(e, "top-k %lld is too large", (long long)r->topk);
    struct job j = { r, idx, scores, NULL, NULL, 0 };
    int64_t *cu = NULL;
    if (r->q_lens) {
        if (batch_starts(r, &cu, e))
            return -1;
        j.cu_q = cu;
        j.cu_k = cu + r->n_reqs + 1;
    }
    kv_parallel_for((size_t)r->n_q, r->n_threads, row, &j);
    free(cu);
    if (j.failed)
        return kv_err_set(e, "out of memory (a top-k list of %lld keys)",
                          (long long)r->topk);
    return 0;
}
