/* prefix_lfu.c - the free blocks of the prefix-lfu policy: a binary
 * min-heap on (uses, order freed), so that the block evicted next is the
 * least frequently used one and, among equals, the one freed first (with
 * every count equal this is vLLM's LRU free queue, tail-first freeing
 * included).  A block taken out of the heap by a hit bumps its stamp, which
 * makes its entry stale, as in the queue; stale entries are dropped when
 * they reach the top, and all at once when they outnumber the pool. */
#include "sim/internal.h"

static int lfu_less(const struct lent *a, const struct lent *b)
{
    return a->uses != b->uses ? a->uses < b->uses : a->seq < b->seq;
}

static void sift_down(struct lent *h, size_t n, size_t i)
{
    struct lent x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && lfu_less(&h[c + 1], &h[c]))
            c++;
        if (!lfu_less(&h[c], &x))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static int live(const struct prefix *p, const struct lent *x)
{
    return p->blk[x->id].stamp == x->stamp;
}

/* Drop the stale entries and restore the heap order. */
static void compact(struct prefix *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_heap; i++)
        if (live(p, &p->heap[i]))
            p->heap[n++] = p->heap[i];
    p->n_heap = n;
    for (size_t i = n / 2; i-- > 0;)
        sift_down(p->heap, n, i);
}

int sim_lfu_push(struct prefix *p, int32_t x)
{
    if (p->n_heap >= 2 * p->n_made + 1024)
        compact(p);
    if (sim_grow((void **)&p->heap, &p->cap_heap, p->n_heap + 1,
                 sizeof *p->heap) < 0)
        return -1;
    struct lent v = { ++p->seq, p->uses[x], ++p->blk[x].stamp, x };
    size_t i = p->n_heap++;
    while (i > 0 && lfu_less(&v, &p->heap[(i - 1) / 2])) {
        p->heap[i] = p->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    p->heap[i] = v;
    return 0;
}

int32_t sim_lfu_pop(struct prefix *p)
{
    while (p->n_heap) {
        struct lent top = p->heap[0];
        p->heap[0] = p->heap[--p->n_heap];
        if (p->n_heap)
            sift_down(p->heap, p->n_heap, 0);
        if (live(p, &top)) {
            p->blk[top.id].stamp++;
            return top.id;
        }
    }
    return -1;
}
