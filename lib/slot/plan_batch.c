/* plan_batch.c - the model runner's persistent batch: the update after
 * each schedule (rows emptied, filled, condensed) and the reorders of its
 * rows (decodes first; decode, extend, prefill). */
#include "slot/plan_impl.h"

/* The model runner's persistent batch update: rows of requests not
 * scheduled now are emptied, new then returning requests fill the lowest
 * empty rows (or append), the last rows move down into remaining holes. */
void plan_update_batch(struct kv_plan *s)
{
    size_t n_holes = 0, n_new = 0, n_cached = 0, hole = 0;

    for (size_t row = 0; row < s->batch_len; row++) {
        int64_t id = s->batch[row];
        if (id >= 0 && s->reqs[id].sched == 0) {
            s->reqs[id].row = -1;
            s->batch[row] = -1;
        }
        if (s->batch[row] < 0)
            s->o_holes[n_holes++] = (int64_t)row;
    }
    for (size_t k = 0; k < s->n_order; k++) {
        int64_t id = s->order[k];
        struct req *r = &s->reqs[id];
        if (r->row >= 0)
            continue;
        /* new: scheduled for the first time (its prefix hits count as
         * computed); cached: resumed, or back after a step without tokens */
        if (r->first_step != s->step)
            s->o_cached[n_cached++] = id;
        else
            s->o_new[n_new++] = id;
    }
    for (size_t k = 0; k < n_new + n_cached; k++) {
        int64_t id = k < n_new ? s->o_new[k] : s->o_cached[k - n_new];
        size_t row = hole < n_holes ? (size_t)s->o_holes[hole++]
                                    : s->batch_len++;
        s->batch[row] = id;
        s->reqs[id].row = (int64_t)row;
    }
    /* condense: the holes are ascending, move the last rows into them */
    for (; hole < n_holes; hole++) {
        size_t h = (size_t)s->o_holes[hole];
        while (s->batch_len > 0 && s->batch[s->batch_len - 1] < 0)
            s->batch_len--;
        if (h >= s->batch_len)
            break;
        s->batch[h] = s->batch[s->batch_len - 1];
        s->reqs[s->batch[h]].row = (int64_t)h;
        s->batch[--s->batch_len] = -1;
    }
    while (s->batch_len > 0 && s->batch[s->batch_len - 1] < 0)
        s->batch_len--;
}

/* Decodes (one scheduled token) to the front of the batch with the fewest
 * swaps: the last decode that sits behind the decode region trades rows
 * with the first prefill, until the regions separate.  The swap persists
 * in the batch, as in vLLM. */
void plan_split_decodes(struct kv_plan *s)
{
    size_t n_dec = 0, n_pre = 0;
    int64_t *dec = s->o_new, *pre = s->o_cached;   /* scratch */

    for (size_t row = 0; row < s->batch_len; row++) {
        if (s->reqs[s->batch[row]].sched <= 1)
            dec[n_dec++] = (int64_t)row;
        else
            pre[n_pre++] = (int64_t)row;
    }
    for (size_t i = 1; i <= n_dec && i <= n_pre; i++) {
        size_t d = (size_t)dec[n_dec - i], p = (size_t)pre[i - 1];
        int64_t x;
        if (d < n_dec)
            break;
        x = s->batch[d];
        s->batch[d] = s->batch[p];
        s->batch[p] = x;
        s->reqs[s->batch[d]].row = (int64_t)d;
        s->reqs[s->batch[p]].row = (int64_t)p;
    }
}

/* Region of a batch row for the newest reorder: 0 decode, 1 extend,
 * 2 prefill (nothing computed, whatever the count). */
static int row_region(const struct kv_plan *s, size_t row)
{
    const struct req *r = &s->reqs[s->batch[row]];

    if (r->computed == 0)
        return 2;
    return r->sched <= 1 ? 0 : 1;
}

static void swap_rows(struct kv_plan *s, size_t a, size_t b)
{
    int64_t x = s->batch[a];

    s->batch[a] = s->batch[b];
    s->batch[b] = x;
    s->reqs[s->batch[a]].row = (int64_t)a;
    s->reqs[s->batch[b]].row = (int64_t)b;
}

/* The newest vLLM reorder: decode -> extend -> prefill.  The rows whose
 * region differs from the target region of their position, stably sorted
 * by region, are the sources; the same rows in ascending order are the
 * destinations; each cycle of that mapping is applied with swaps through
 * its first source, in source order (as the upstream loop does). */
void plan_reorder_regions(struct kv_plan *s)
{
    size_t count[3] = { 0, 0, 0 }, n_mis = 0, k;
    int64_t *mis = s->o_new, *src = s->o_cached, *dest = s->o_holes;

    for (size_t row = 0; row < s->batch_len; row++)
        count[row_region(s, row)]++;
    for (size_t row = 0; row < s->batch_len; row++) {
        int want = row < count[0] ? 0 : row < count[0] + count[1] ? 1 : 2;
        dest[row] = -1;
        if (row_region(s, row) != want)
            mis[n_mis++] = (int64_t)row;
    }
    k = 0;
    for (int g = 0; g < 3; g++)
        for (size_t i = 0; i < n_mis; i++)
            if (row_region(s, (size_t)mis[i]) == g)
                src[k++] = mis[i];
    for (size_t i = 0; i < n_mis; i++)
        dest[src[i]] = mis[i];
    for (size_t i = 0; i < n_mis; i++) {
        int64_t a = src[i], d = dest[a];
        while (a != d) {
            int64_t next;
            swap_rows(s, (size_t)a, (size_t)d);
            next = dest[d] >= 0 ? dest[d] : d;
            dest[d] = d;
            d = next;
        }
    }
}
