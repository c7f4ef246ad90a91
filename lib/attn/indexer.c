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
    int failed;            /* a row could not get its heap */
};

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
    int64_t last = r->causal ? i + r->n_k - r->n_q : r->n_k - 1;
    struct cand *h = malloc((size_t)k * sizeof *h);
    size_t n = 0;
    if (!h) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t t = 0; t <= last && t < r->n_k; t++) {
        struct cand c = { score(r, i, t), t };
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

int kv_indexer_topk(const struct kv_indexer_req *r, int32_t *idx,
                    float *scores, struct kv_err *e)
{
    if (r->n_q < 0 || r->n_k < 0 || r->n_heads < 1 || r->head_dim < 1)
        return kv_err_set(e, "the indexer needs at least one head of size >= 1");
    if (r->topk < 1)
        return kv_err_set(e, "top-k must be at least 1, got %lld", (long long)r->topk);
    if (r->n_k > INT32_MAX)
        return kv_err_set(e, "%lld keys: indices are int32", (long long)r->n_k);
    if (r->causal && r->n_q > r->n_k)
        return kv_err_set(e, "causal: %lld queries over %lld keys (the queries are the "
                          "last of the keys)", (long long)r->n_q, (long long)r->n_k);
    if ((uint64_t)r->topk > SIZE_MAX / sizeof(struct cand))
        return kv_err_set(e, "top-k %lld is too large", (long long)r->topk);
    struct job j = { r, idx, scores, 0 };
    kv_parallel_for((size_t)r->n_q, r->n_threads, row, &j);
    if (j.failed)
        return kv_err_set(e, "out of memory (a top-k list of %lld keys)",
                          (long long)r->topk);
    return 0;
}
