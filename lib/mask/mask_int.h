/* mask_int.h - what the files of lib/mask (mask.c the rules, mask_tile.c
 * the tile states, mask_dense.c the values and dense writers, mask_out.c
 * the output stream, mask_compact.c the compact writers) share and
 * nothing outside them sees: small integer helpers, the progress tick, the
 * run list of a row of tiles, and the buffered output stream, its
 * functions prefixed mask_. */
#ifndef KV_MASK_INT_H
#define KV_MASK_INT_H
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include "mask/mask.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static inline void push_run(struct kv_tile_scan *s, int64_t a, int64_t b,
                     uint8_t state)
{
    if (b <= a)
        return;
    if (s->n_runs > 0 && s->runs[s->n_runs - 1].state == state &&
        s->runs[s->n_runs - 1].end == a) {
        s->runs[s->n_runs - 1].end = b;
        return;
    }
    s->runs[s->n_runs].start = a;
    s->runs[s->n_runs].end = b;
    s->runs[s->n_runs].state = state;
    s->n_runs++;
}

static inline int64_t n_outer(const struct kv_mask_out *o)
{
    int64_t n = 1;
    for (int d = 0; d < o->n_outer_dims; d++)
        n *= o->outer[d];
    return n;
}

/* Report progress every 2^shift units of work. */
static inline void tick(const struct kv_mask_out *o, uint64_t done, uint64_t total,
                 int shift)
{
    if (o->progress && (done & (((uint64_t)1 << shift) - 1)) == 0)
        o->progress(o->progress_ctx, done, total);
}

#define CHUNK_BYTES ((size_t)512 << 10)

/* Binary output through two large buffers: the caller fills one while a
 * writer thread writes the other (threads > 1), so rendering and the write
 * system calls overlap; with one thread the buffer is written in place.
 * The bytes written are the same either way. */
struct aout {
    FILE *f;
    int threaded;
    uint8_t *buf[2];
    size_t cap, len;
    int cur;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;            /* buffer handed to the writer, -1 none */
    size_t pending_len;
    int done, err;
};

int mask_aout_open(struct aout *a, FILE *f, int threads, struct kv_err *e);
int mask_aout_flush(struct aout *a, struct kv_err *e);
int mask_aout_put(struct aout *a, const void *data, size_t n,
             struct kv_err *e);
int mask_aout_header(struct aout *a, enum kv_dtype dt, int nd,
                const int64_t *shape, struct kv_err *e);
int mask_aout_close(struct aout *a, int rc, struct kv_err *e);

/* Room for n contiguous bytes, or NULL when n exceeds a buffer (*rc set
 * on a write error). */
static inline void *aout_slot(struct aout *a, size_t n, struct kv_err *e, int *rc)
{
    *rc = 0;
    if (n > a->cap)
        return NULL;
    if (a->len + n > a->cap && (*rc = mask_aout_flush(a, e)) != 0)
        return NULL;
    void *p = a->buf[a->cur] + a->len;
    a->len += n;
    return p;
}
#endif
