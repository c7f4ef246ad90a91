/* requests.c - a Mooncake trace as scheduler requests (requests.h).  The
 * lines are read and checked by the trace reader (reader.c, Mooncake
 * format), so that kvslot plan and kvchunk sim accept and refuse the same
 * traces. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sim/sim.h"
#include "sim/requests.h"

void kv_sim_requests_release(struct kv_sim_requests *t)
{
    free(t->prompt_lens);
    free(t->output_lens);
    free(t->arrivals);
    free(t->tokens);
    free(t->buf);
    memset(t, 0, sizeof *t);
}

/* Grow *p to hold n items of sz bytes (doubling); -1 when out of memory or
 * over the limit (*used counts the bytes of every array). */
static int grow(void **p, size_t *cap, size_t n, size_t sz, size_t *used,
                size_t max_bytes)
{
    if (n <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 1024;
    while (nc < n)
        nc *= 2;
    if (nc > SIZE_MAX / sz || *used - *cap * sz + nc * sz > max_bytes)
        return -1;
    void *q = realloc(*p, nc * sz);
    if (!q)
        return -1;
    *used += (nc - *cap) * sz;
    *p = q;
    *cap = nc;
    return 0;
}

int kv_sim_requests_read(FILE *f, const char *name, int64_t block_size,
                       double ms_per_step, size_t max_bytes,
                       struct kv_sim_requests *t, struct kv_err *e)
{
    struct kv_sim_reader *rd = NULL;
    struct kv_sim_req q;
    struct kv_sim_requests r;
    size_t cap_tok = 0, n_tok = 0, *offs = NULL, cap_offs = 0;
    size_t c1 = 0, c2 = 0, c3 = 0;
    int got, rc = -1;
    memset(&r, 0, sizeof r);
    if (!max_bytes)             /* 0: no limit, as everywhere in libkv */
        max_bytes = SIZE_MAX;
    if (!(ms_per_step > 0) || !isfinite(ms_per_step))
        return kv_err_set(e, "milliseconds per step: expected more than 0");
    if (kv_sim_reader_open(&rd, f, name, e) < 0)
        return -1;
    if (kv_sim_reader_set_format(rd, KV_SIM_FORMAT_MOONCAKE, block_size,
                                 e) < 0)
        goto out;
    while ((got = kv_sim_reader_next(rd, &q, e)) > 0) {
        size_t i = r.n;
        if (q.out_len < 1) {
            kv_err_set(e, "'%s' line %llu: output_length 0 (vLLM generates "
                       "at least one token)", name,
                       (unsigned long long)q.line);
            goto out;
        }
        double step = 1.0 + floor(q.t * 1000.0 / ms_per_step);
        if (step > (double)INT64_MAX / 2) {
            kv_err_set(e, "'%s' line %llu: arrival step out of range", name,
                       (unsigned long long)q.line);
            goto out;
        }
        if (grow((void **)&r.prompt_lens, &c1, i + 1, 8, &r.bytes,
                 max_bytes) < 0 ||
            grow((void **)&r.output_lens, &c2, i + 1, 8, &r.bytes,
                 max_bytes) < 0 ||
            grow((void **)&r.arrivals, &c3, i + 1, 8, &r.bytes,
                 max_bytes) < 0 ||
            grow((void **)&offs, &cap_offs, i + 1, sizeof *offs, &r.bytes,
                 max_bytes) < 0 ||
            grow((void **)&r.buf, &cap_tok, n_tok + (size_t)q.n_chunks *
                 (size_t)block_size, 8, &r.bytes, max_bytes) < 0) {
            kv_err_set(e, "'%s' line %llu: the trace's token ids need more "
                       "than %zu bytes (--max-mem)", name,
                       (unsigned long long)q.line, max_bytes);
            goto out;
        }
        offs[i] = n_tok;
        int64_t left = 0;
        for (size_t k = 0; k < q.n_chunks; k++) {
            int64_t h = q.hash_ids[k];
            if (h < 0 || h >= KV_SIM_MAX_HASH_ID) {
                kv_err_set(e, "'%s' line %llu, key 'hash_ids': %lld is out "
                           "of range (0 to 2^40 - 1)", name,
                           (unsigned long long)q.line, (long long)h);
                goto out;
            }
            for (int64_t j = 0; j < q.chunks[k].len; j++)
                r.buf[n_tok++] = h * block_size + j;
            left += q.chunks[k].len;
        }
        r.prompt_lens[i] = left;
        r.output_lens[i] = q.out_len;
        r.arrivals[i] = (int64_t)step;
        r.n++;
    }
    if (got < 0)
        goto out;
    if (!r.n) {
        kv_err_set(e, "'%s': no requests", name);
        goto out;
    }
    r.tokens = malloc(r.n * sizeof *r.tokens);
    if (!r.tokens || (r.bytes += r.n * sizeof *r.tokens) > max_bytes) {
        kv_err_set(e, "'%s': out of memory", name);
        goto out;
    }
    for (size_t i = 0; i < r.n; i++)
        r.tokens[i] = r.buf + offs[i];
    *t = r;
    memset(&r, 0, sizeof r);
    rc = 0;
out:
    free(offs);
    kv_sim_requests_release(&r);
    kv_sim_reader_free(rd);
    return rc;
}
