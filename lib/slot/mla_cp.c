/* mla_cp.c - the MLA context-parallel AllGatherKV index map (mla_cp.h):
 * the chunk plans of vllm-ascend and of vLLM, the map's size, the map. */
#include "slot/mla_cp.h"

#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "slot/slot.h"

void kv_mla_cp_map_release(struct kv_mla_cp_map *m)
{
    free(m->toks);
    free(m->padded_lens);
    free(m->cu_seq_lens);
    free(m->starts);
    free(m->seq_lens);
    free(m->local_lens);
    free(m->e);
    memset(m, 0, sizeof *m);
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* What the geometry derives: ranks W, virtual block V; the ascend chunk
 * (mcc global tokens, cs local rows); vLLM's alignment, row budget and
 * max_context_chunk. */
struct cp_plan {
    int64_t W, V, I, n_chunks_max;
    int vllm;
    int64_t mcc, cs;             /* ascend */
    int64_t align, budget, vmcc; /* vLLM */
};

/* vLLM's padded_rows: local rows of the first x context tokens. */
static int64_t padded_rows(const struct cp_plan *p, int64_t x)
{
    return p->W > 1 ? cdiv(x, p->V) * p->I : x;
}

/* vLLM's aligned_split_len: the longest multiple of the alignment, at most
 * max_context_chunk and below remaining, whose rows from start fit in
 * available (a binary search, as vLLM does). */
static int64_t split_len(const struct cp_plan *p, int64_t start, int64_t remaining,
                         int64_t available)
{
    int64_t max_split = (remaining - 1) / p->align * p->align;
    if (max_split > p->vmcc)
        max_split = p->vmcc;
    int64_t lo = 0, hi = max_split / p->align;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2, len = mid * p->align;
        if (padded_rows(p, start + len) - padded_rows(p, start) <= available)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * p->align;
}

/* Check the geometry and the lengths; fill p.  0 or -1. */
static int plan_geometry(const struct kv_mla_cp_geom *g, const int64_t *ctx, size_t n_req,
                         struct cp_plan *p, struct kv_err *e)
{
    int64_t B = g->block_size, I = g->interleave, maxctx = 0;
    memset(p, 0, sizeof *p);
    if (g->pcp_size < 1 || g->dcp_size < 1 || g->pcp_size > 1024 || g->dcp_size > 1024)
        return kv_err_set(e, "pcp and dcp sizes must be 1 .. 1024");
    p->W = g->pcp_size * g->dcp_size;
    p->I = I;
    p->V = I * p->W;
    p->vllm = g->chunking == KV_MLA_CP_CHUNK_VLLM;
    if (B < 1 || I < 1 || B % I || B > ((int64_t)1 << 40) || I > ((int64_t)1 << 40))
        return kv_err_set(e, "interleave %lld must divide the block size %lld", (long long)I,
                          (long long)B);
    for (size_t b = 0; b < n_req; b++) {
        if (ctx[b] < 0 || ctx[b] > ((int64_t)1 << 40))
            return kv_err_set(e, "context length %lld of request %zu is out of range",
                              (long long)ctx[b], b);
        maxctx = ctx[b] > maxctx ? ctx[b] : maxctx;
    }
    if (!p->vllm) {
        if (g->chunking != KV_MLA_CP_CHUNK_ASCEND)
            return kv_err_set(e, "unknown context chunking %d", g->chunking);
        if (g->max_context_chunk < 0 || g->max_context_chunk % p->V ||
            g->max_context_chunk > ((int64_t)1 << 40))
            return kv_err_set(e, "max_context_chunk %lld is not a multiple of interleave x "
                              "ranks = %lld (the local chunks would not tile the context)",
                              (long long)g->max_context_chunk, (long long)p->V);
        p->mcc = g->max_context_chunk ? g->max_context_chunk
                                      : cdiv(maxctx > 0 ? maxctx : 1, p->V) * p->V;
        p->cs = p->mcc / p->V * I;
        p->n_chunks_max = cdiv(maxctx, p->mcc);
        return 0;
    }
    if (g->pcp_size != 1)
        return kv_err_set(e, "vLLM's context chunking shards over DCP only (pcp size %lld)",
                          (long long)g->pcp_size);
    p->align = B;
    if (p->W > 1)
        p->align = B / gcd(B, p->V) * p->V;
    if (g->workspace < 1 || g->workspace > ((int64_t)1 << 40) || g->workspace % p->align)
        return kv_err_set(e, "workspace %lld: expected a multiple of the chunk alignment "
                          "%lld (the block size%s), up to 2^40", (long long)g->workspace,
                          (long long)p->align, p->W > 1 ? " and interleave x ranks" : "");
    p->budget = p->W > 1 ? g->workspace / p->W : g->workspace;
    p->vmcc = g->workspace / p->align * p->align;
    return 0;
}

/* vLLM's plan_mla_context_chunks.  Counts the chunks into *n_chunks,
 * stopping past max_chunks (then *n_chunks = max_chunks + 1); with st and
 * ln ([chunks][n_req], zeroed) also writes each request's slice.  A run of
 * chunks that each hold one slice of one request too long for the budget
 * is counted at once: from an aligned start every such slice has the same
 * length.  0, or -1 when a request cannot be split to fit. */
static int vllm_chunks(const struct cp_plan *p, const int64_t *ctx, size_t n, int64_t max_chunks,
                       int64_t *st, int64_t *ln, int64_t *n_chunks, struct kv_err *e)
{
    size_t b = 0;
    int64_t start = 0, nc = 0;
    /* the most context tokens a lone slice may hold within the budget */
    int64_t fit = p->W > 1 ? p->budget / p->I * p->V : p->budget;

    /* filling, stop at the chunks there is room for */
    while (b < n && (st ? nc < max_chunks : nc <= max_chunks)) {
        if (ctx[b] == 0) {
            b++;
            continue;
        }
        int64_t rows = 0, any = 0;
        if (!st && ctx[b] - start > fit) {
            /* a lone split: every chunk takes the same length until the
             * rest fits */
            int64_t len = split_len(p, start, ctx[b] - start, p->budget);
            if (len <= 0)
                return kv_err_set(e, "request %zu: context from %lld does not fit the "
                                  "workspace's %lld rows", b, (long long)start,
                                  (long long)p->budget);
            int64_t k = cdiv(ctx[b] - start - fit, len);
            nc += k;
            start += k * len;
            continue;
        }
        while (b < n && ctx[b] > 0) {
            int64_t rem = ctx[b] - start;
            int64_t rr = padded_rows(p, start + rem) - padded_rows(p, start);
            if (rows + rr > p->budget) {
                int64_t len = split_len(p, start, rem, p->budget - rows);
                if (len > 0) {
                    if (st) {
                        st[(size_t)nc * n + b] = start;
                        ln[(size_t)nc * n + b] = len;
                    }
                    rows += padded_rows(p, start + len) - padded_rows(p, start);
                    start += len;
                    any = 1;
                }
                break;
            }
            rows += rr;
            if (st) {
                st[(size_t)nc * n + b] = start;
                ln[(size_t)nc * n + b] = rem;
            }
            any = 1;
            b++;
            start = 0;
        }
        if (!any)
            return kv_err_set(e, "request %zu: context from %lld does not fit the "
                              "workspace's %lld rows", b, (long long)start,
                              (long long)p->budget);
        nc++;
    }
    while (st && b < n && ctx[b] == 0)
        b++;
    if (st && b < n)
        return kv_err_set(e, "the chunk plan outgrew its %lld chunks", (long long)max_chunks);
    *n_chunks = nc;
    return 0;
}

/* Bytes of the map's arrays (and the build's one scratch row) for n
 * entries, nc chunks, n_req requests and W ranks; 0, or -1 on overflow. */
static int map_bytes(size_t n, size_t nc, size_t n_req, size_t W, size_t *out)
{
    size_t a, b, t = 0;
    if (kv_size_mul(n + 1, sizeof(struct kv_mla_cp_entry), &t) ||
        kv_size_mul(nc + 1, sizeof(int64_t), &a) || kv_size_add(t, a, &t) ||
        kv_size_mul(nc, n_req, &a) || kv_size_add(a, 1, &a) ||
        kv_size_mul(a, 3 * sizeof(int64_t), &a) || kv_size_add(t, a, &t) ||
        kv_size_mul(nc, n_req + 1, &a) || kv_size_add(a, 1, &a) ||
        kv_size_mul(a, sizeof(int64_t), &a) || kv_size_add(t, a, &t) ||
        kv_size_mul(n_req, W, &b) || kv_size_add(b, n_req + 2, &b) ||
        kv_size_mul(b, sizeof(int64_t), &b) || kv_size_add(t, b, &t))
        return -1;
    *out = t;
    return 0;
}

/* The largest chunk count worth counting: past it the matrices alone
 * overflow the address space. */
static int64_t chunk_cap(size_t n_req)
{
    return (int64_t)(SIZE_MAX / 64 / (n_req + 1));
}

int kv_mla_cp_size(const struct kv_mla_cp_geom *g, const int64_t *ctx, size_t n_req,
                   size_t *n_entries, int64_t *n_chunks, size_t *bytes, struct kv_err *e)
{
    struct cp_plan p;
    uint64_t total = 0;
    int64_t nc;
    if (plan_geometry(g, ctx, n_req, &p, e))
        return -1;
    for (size_t b = 0; b < n_req; b++) {
        total += (uint64_t)ctx[b];
        if (total > SIZE_MAX / sizeof(struct kv_mla_cp_entry))
            return kv_err_set(e, "%zu requests of up to 2^40 context tokens: the map "
                              "overflows the address space", n_req);
    }
    nc = p.n_chunks_max;
    if (p.vllm && vllm_chunks(&p, ctx, n_req, chunk_cap(n_req), NULL, NULL, &nc, e))
        return -1;
    if (nc > chunk_cap(n_req) ||
        map_bytes((size_t)total, (size_t)nc, n_req, (size_t)p.W, bytes))
        return kv_err_set(e, "%lld chunks of %zu requests: the map overflows the address "
                          "space", (long long)nc, n_req);
    *n_entries = (size_t)total;
    *n_chunks = nc;
    return 0;
}

int kv_mla_cp_build(const struct kv_mla_cp_geom *g, const int64_t *bt, size_t n_rows,
                    size_t n_cols, const int64_t *ctx, size_t n_req,
                    struct kv_mla_cp_map *out, struct kv_err *e)
{
    struct kv_mla_cp_map m;
    struct cp_plan p;
    size_t total, bytes;
    int64_t nc, B = g->block_size, I = g->interleave;
    memset(&m, 0, sizeof m);
    if (kv_mla_cp_size(g, ctx, n_req, &total, &nc, &bytes, e) ||
        plan_geometry(g, ctx, n_req, &p, e))
        return -1;
    int64_t W = p.W, V = p.V;
    if (n_rows < n_req)
        return kv_err_set(e, "the block table has %zu rows for %zu requests", n_rows, n_req);
    for (size_t b = 0; b < n_req; b++) {
        /* every rank's local sequence must fit its block table row */
        if ((uint64_t)cdiv(ctx[b], V) * (uint64_t)I > (uint64_t)n_cols * (uint64_t)B)
            return kv_err_set(e, "request %zu: %lld context tokens need %lld local rows, the "
                              "block table row holds %zu blocks of %lld", b,
                              (long long)ctx[b], (long long)(cdiv(ctx[b], V) * I), n_cols,
                              (long long)B);
        /* a slot is id * B + offset: the ids must keep it within int64 */
        for (int64_t k = 0; k < cdiv(cdiv(ctx[b], V) * I, B); k++) {
            int64_t id = bt[b * n_cols + (size_t)k];
            if (id < 0)
                return kv_err_set(e, "block_table[%zu][%lld] = %lld", b, (long long)k,
                                  (long long)id);
            if (id > INT64_MAX / B - 1)
                return kv_err_set(e, "block_table[%zu][%lld] = %lld: its slots overflow "
                                  "int64 with block size %lld", b, (long long)k,
                                  (long long)id, (long long)B);
        }
    }
    size_t ncs = (size_t)nc;
    m.n_req = n_req;
    m.n_chunks = nc;
    m.chunk_size = p.vllm ? p.vmcc : p.cs;
    m.toks = calloc(ncs + 1, sizeof *m.toks);
    m.padded_lens = calloc(ncs * n_req + 1, sizeof *m.padded_lens);
    m.starts = calloc(ncs * n_req + 1, sizeof *m.starts);
    m.seq_lens = calloc(ncs * n_req + 1, sizeof *m.seq_lens);
    m.cu_seq_lens = calloc(ncs * (n_req + 1) + 1, sizeof *m.cu_seq_lens);
    m.local_lens = calloc(n_req * (size_t)W + 1, sizeof *m.local_lens);
    m.e = calloc(total + 1, sizeof *m.e);
    int64_t *ls = calloc(n_req + 1, sizeof *ls);   /* local start per request */
    if (!m.toks || !m.padded_lens || !m.starts || !m.seq_lens || !m.cu_seq_lens ||
        !m.local_lens || !m.e || !ls) {
        free(ls);
        kv_mla_cp_map_release(&m);
        return kv_err_set(e, "out of memory (%zu bytes for %zu context tokens)", bytes,
                          total);
    }
    for (size_t b = 0; b < n_req; b++)
        kv_slot_cp_local_lens(ctx[b], W, I, m.local_lens + b * (size_t)W);
    /* each request's slice of each chunk: context offset and length */
    if (p.vllm) {
        int64_t got = 0;
        if (vllm_chunks(&p, ctx, n_req, nc, m.starts, m.seq_lens, &got, e) ||
            (got != nc && kv_err_set(e, "the chunk plan made %lld chunks, counted %lld",
                                     (long long)got, (long long)nc))) {
            free(ls);
            kv_mla_cp_map_release(&m);
            return -1;
        }
    } else {
        for (int64_t c = 0; c < nc; c++)
            for (size_t b = 0; b < n_req; b++) {
                int64_t s = c * p.mcc, n = ctx[b] - s;
                m.starts[(size_t)c * n_req + b] = n > 0 ? s : 0;
                m.seq_lens[(size_t)c * n_req + b] = n < 0 ? 0 : n > p.mcc ? p.mcc : n;
            }
    }
    struct kv_slot_geom sg;
    memset(&sg, 0, sizeof sg);
    sg.block_size = sg.kernel_block_size = B;
    sg.max_model_len = (int64_t)n_cols * B * W;
    sg.cp_world = W;
    sg.interleave = I;
    sg.virt = KV_SLOT_VIRTUAL_PHYSICAL;
    size_t k = 0;
    for (int64_t c = 0; c < nc; c++) {
        size_t row = (size_t)c * n_req;
        int64_t *pl = m.padded_lens + row, *cu = m.cu_seq_lens + (size_t)c * (n_req + 1);
        for (size_t b = 0; b < n_req; b++) {
            /* the local rows of request b in this chunk, on every rank */
            if (p.vllm) {
                int64_t s = m.starts[row + b], n = m.seq_lens[row + b];
                ls[b] = padded_rows(&p, s);
                pl[b] = n ? padded_rows(&p, s + n) - ls[b] : 0;
            } else {
                int64_t n = cdiv(ctx[b], V) * I - c * p.cs;
                ls[b] = c * p.cs;
                pl[b] = n < 0 ? 0 : n > p.cs ? p.cs : n;
            }
            m.toks[c] += pl[b];
        }
        int64_t src = 0;
        cu[0] = 0;
        for (size_t b = 0; b < n_req; b++) {
            int64_t dst = cu[b];
            for (int64_t r = 0; r < W; r++) {
                int64_t real = m.local_lens[b * (size_t)W + (size_t)r] - ls[b];
                real = real < 0 ? 0 : real > pl[b] ? pl[b] : real;
                for (int64_t t = 0; t < real; t++) {
                    struct kv_mla_cp_entry *x = &m.e[k++];
                    int64_t j = ls[b] + t, owner = 0;
                    x->req = (int64_t)b;
                    x->chunk = c;
                    x->pcp_rank = r / g->dcp_size;
                    x->dcp_rank = r % g->dcp_size;
                    x->local_index = j;
                    x->pos = (j / I) * V + r * I + j % I;
                    sg.cp_rank = r;
                    x->local_slot = kv_slot_of(&sg, bt + b * n_cols, x->pos, &owner, NULL, NULL);
                    x->gathered = r * m.toks[c] + src + t;
                    x->reorg = dst + t;
                }
                dst += real;
            }
            cu[b + 1] = dst;
            src += pl[b];
        }
    }
    free(ls);
    m.n = k;
    *out = m;
    return 0;
}
