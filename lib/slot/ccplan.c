/* ccplan.c - seed 001's chunk-cache flow step by step (see ccplan.h). */
#include "slot/ccplan.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ------------------------------------------------------ */

static int push(struct kv_cc_list *l, int64_t v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        int64_t *p = realloc(l->v, cap * sizeof *p);
        if (!p)
            return -1;
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return 0;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* A FIFO of block ids: take from the front, give back to the back.  The
 * ids never taken yet (fresh .. last - 1, the front of the queue: every
 * given id went behind them) are a range, not an array, so a pool of a
 * billion blocks costs nothing until its blocks are used; the ring holds
 * the ids given back, in order. */
struct fifo {
    int64_t fresh, last;       /* untaken ids, ahead of the ring */
    int64_t *v;                /* ring of given ids */
    int64_t cap, head, len;
    int64_t n;                 /* free ids in all */
};

static void fifo_init(struct fifo *q, int64_t first, int64_t count)
{
    memset(q, 0, sizeof *q);
    q->fresh = first;
    q->last = first + count;
    q->n = count;
}

static int64_t fifo_take(struct fifo *q)
{
    int64_t b;
    assert(q->n > 0);
    if (q->fresh < q->last) {
        b = q->fresh++;
    } else {
        b = q->v[q->head];
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
    q->n--;
    return b;
}

static int fifo_give(struct fifo *q, int64_t b)
{
    if (q->len == q->cap) {
        int64_t cap = q->cap ? 2 * q->cap : 64;
        int64_t *p = malloc((size_t)cap * sizeof *p);
        if (!p)
            return -1;
        for (int64_t i = 0; i < q->len; i++)
            p[i] = q->v[(q->head + i) % q->cap];
        free(q->v);
        q->v = p;
        q->cap = cap;
        q->head = 0;
    }
    q->v[(q->head + q->len) % q->cap] = b;
    q->len++;
    q->n++;
    return 0;
}

/* ---- state ---------------------------------------------------------------- */

struct entry {                 /* a chunk kept in the chunk pool */
    uint8_t key[16];
    int64_t len, nblk, last_use;
    int64_t *blocks;
    int live, pinned;
};

struct rq {
    const struct kv_cc_req *in;
    int64_t plen, q_off, sys_len;
    int64_t computed, produced;
    int64_t *blocks, nblk;
    int state;                 /* 0 waiting, 1 running, 2 finished */
};

struct kv_cc {
    struct kv_cc_config cfg;
    struct rq *rq;
    size_t *waiting, n_waiting, *running, n_running;
    struct fifo main_free, pool_free;
    struct entry *ent;
    size_t n_ent, cap_ent;
    int64_t clock, live_entries;
    struct kv_cc_step st;
};

/* ---- reading segment lists ----------------------------------------------- */

static int unhex16(const char *s, uint8_t out[16])
{
    for (int i = 0; i < 32; i++) {
        int c = s[i], v = c >= '0' && c <= '9' ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        out[i / 2] = (uint8_t)(i % 2 ? out[i / 2] | v : v << 4);
    }
    return s[32] == 0 ? 0 : -1;
}

static int add_seg(struct kv_cc_req *r, const struct kv_cc_seg *s)
{
    struct kv_cc_seg *p = realloc(r->segs, (r->n_segs + 1) * sizeof *p);
    if (!p)
        return -1;
    r->segs = p;
    p[r->n_segs++] = *s;
    return 0;
}

/* One line "kind off len [key]" into s; the line number names errors. */
static int parse_line(char *line, const char *name, size_t ln,
                      struct kv_cc_seg *s, struct kv_err *e)
{
    char kind[16], key[64] = "";
    long long off, len;
    int n = sscanf(line, "%15s %lld %lld %63s", kind, &off, &len, key);
    if (n < 3)
        return kv_err_set(e, "%s: line %zu: expected 'sys|chunk|question OFF "
                          "LEN [KEY]'", name, ln);
    s->kind = !strcmp(kind, "sys") ? KV_CC_SYS : !strcmp(kind, "chunk")
              ? KV_CC_CHUNK : !strcmp(kind, "question") ? KV_CC_QUESTION : -1;
    if (s->kind < 0)
        return kv_err_set(e, "%s: line %zu: unknown segment kind '%s'", name,
                          ln, kind);
    if (off < 0 || len < 0 || off > INT32_MAX || len > INT32_MAX)
        return kv_err_set(e, "%s: line %zu: bad offset or length", name, ln);
    s->off = off;
    s->len = len;
    memset(s->key, 0, sizeof s->key);
    if (s->kind != KV_CC_QUESTION && s->len > 0 && n < 4)
        return kv_err_set(e, "%s: line %zu: a %s without its key (kvchunk "
                          "split prints keys when given the model's shape)",
                          name, ln, kind);
    if (s->kind != KV_CC_QUESTION && s->len > 0 && unhex16(key, s->key) < 0)
        return kv_err_set(e, "%s: line %zu: the %s's key '%s' is not 32 "
                          "lowercase hex digits", name, ln, kind, key);
    return 0;
}

int kv_cc_read(const char *text, size_t len, const char *name,
               struct kv_cc_req **reqs, size_t *n_reqs, struct kv_err *e)
{
    struct kv_cc_req *v = NULL;
    size_t n = 0, ln = 0, i = 0;
    char line[256];
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n')
            j++;
        ln++;
        size_t l = j - i < sizeof line - 1 ? j - i : sizeof line - 1;
        memcpy(line, text + i, l);
        line[l] = 0;
        i = j + 1;
        if (strspn(line, " \t\r") == strlen(line))
            continue;
        struct kv_cc_seg s;
        if (parse_line(line, name, ln, &s, e) < 0)
            goto fail;
        if (s.kind == KV_CC_SYS) {
            struct kv_cc_req *p = realloc(v, (n + 1) * sizeof *p);
            if (!p)
                goto oom;
            v = p;
            memset(&v[n++], 0, sizeof *v);
        } else if (!n || (v[n - 1].n_segs &&
                          v[n - 1].segs[v[n - 1].n_segs - 1].kind == KV_CC_QUESTION)) {
            kv_err_set(e, "%s: line %zu: a prompt starts with its sys line", name, ln);
            goto fail;
        }
        struct kv_cc_req *r = &v[n - 1];
        int64_t want = r->n_segs ? r->segs[r->n_segs - 1].off + r->segs[r->n_segs - 1].len : 0;
        if (s.off != want) {
            kv_err_set(e, "%s: line %zu: prompt %zu: offset %lld, expected %lld",
                       name, ln, n - 1, (long long)s.off, (long long)want);
            goto fail;
        }
        if (add_seg(r, &s) < 0)
            goto oom;
    }
    for (size_t k = 0; k < n; k++)
        if (v[k].segs[v[k].n_segs - 1].kind != KV_CC_QUESTION) {
            kv_err_set(e, "%s: prompt %zu has no question line", name, k);
            goto fail;
        }
    if (!n) {
        kv_err_set(e, "%s: no prompt", name);
        goto fail;
    }
    *reqs = v;
    *n_reqs = n;
    return 0;
oom:
    kv_err_set(e, "%s: out of memory", name);
fail:
    kv_cc_reqs_free(v, n);
    return -1;
}

void kv_cc_reqs_free(struct kv_cc_req *reqs, size_t n)
{
    for (size_t i = 0; i < n && reqs; i++)
        free(reqs[i].segs);
    free(reqs);
}

/* ---- validation ------------------------------------------------------------ */

/* Check request i and fill r; *blocks_needed is the main blocks it holds at
 * most, *pool_needed the chunk-pool blocks its largest chunk and the
 * context it attends to take at once. */
static int check_req(const struct kv_cc_config *c, size_t i, struct rq *r,
                     int64_t *blocks_needed, int64_t *pool_needed,
                     struct kv_err *e)
{
    const struct kv_cc_req *in = &c->reqs[i];
    const struct kv_cc_seg *q = &in->segs[in->n_segs - 1];
    int64_t longest = 0;
    r->in = in;
    r->plen = q->off + q->len;
    r->q_off = q->off;
    r->sys_len = in->segs[0].kind == KV_CC_SYS ? in->segs[0].len : 0;
    if (q->len < 1)
        return kv_err_set(e, "prompt %zu: the question is empty (the flow "
                          "computes at least one token)", i);
    if (in->output_len < 1)
        return kv_err_set(e, "prompt %zu: output length must be >= 1", i);
    if (r->plen >= c->max_model_len)
        return kv_err_set(e, "prompt %zu: %lld tokens, max_model_len is %lld",
                          i, (long long)r->plen, (long long)c->max_model_len);
    for (size_t s = 0; s + 1 < in->n_segs; s++) {
        if (in->segs[s].len > c->max_chunk_tokens)
            return kv_err_set(e, "prompt %zu: segment %zu has %lld tokens, "
                              "over --max-chunk-tokens %lld", i, s,
                              (long long)in->segs[s].len,
                              (long long)c->max_chunk_tokens);
        if (in->segs[s].kind == KV_CC_CHUNK && in->segs[s].len > longest)
            longest = in->segs[s].len;
    }
    /* the sys prompt stays while the chunks that attend to it are computed */
    int64_t ctx = c->ctx_none ? 0 : cdiv(r->sys_len, c->block_size);
    int64_t need = ctx + cdiv(longest, c->block_size);
    if (need < cdiv(r->sys_len, c->block_size))
        need = cdiv(r->sys_len, c->block_size);
    *pool_needed = need;
    if (!c->ctx_none && r->sys_len && longest && c->max_chunks < 2)
        return kv_err_set(e, "prompt %zu: --max-chunks must be >= 2 to keep "
                          "the system prompt beside a chunk", i);
    int64_t maxlen = r->plen + in->output_len;
    if (maxlen > c->max_model_len)
        maxlen = c->max_model_len;
    *blocks_needed = cdiv(maxlen, c->block_size);
    return 0;
}

/* Check every request (rq, when not NULL, filled) and add up what the
 * pools need: main blocks for all at once and for the biggest, chunk-pool
 * blocks for the hungriest prompt (*pool_prompt). */
static int check_reqs(const struct kv_cc_config *cfg, struct rq *rq,
                      struct kv_cc_sizes *sz, size_t *pool_prompt,
                      struct kv_err *e)
{
    if (cfg->block_size < 1 || cfg->max_num_batched_tokens < 1 ||
        cfg->max_num_seqs < 1 || cfg->max_model_len < 2 ||
        cfg->max_chunks < 1 || cfg->max_chunk_tokens < 1 || cfg->n_reqs < 1)
        return kv_err_set(e, "chunk-cache plan: bad configuration");
    sz->main_blocks = 1;
    sz->main_blocks_least = 1;
    sz->pool_blocks_least = 1;
    *pool_prompt = 0;
    for (size_t i = 0; i < cfg->n_reqs; i++) {
        struct rq tmp;
        int64_t nb = 0, pb = 0;
        if (check_req(cfg, i, rq ? &rq[i] : &tmp, &nb, &pb, e) < 0)
            return -1;
        sz->main_blocks += nb;
        if (nb + 1 > sz->main_blocks_least)
            sz->main_blocks_least = nb + 1;
        if (pb > sz->pool_blocks_least) {
            sz->pool_blocks_least = pb;
            *pool_prompt = i;
        }
    }
    return 0;
}

int kv_cc_sizes(const struct kv_cc_config *cfg, struct kv_cc_sizes *sz,
                struct kv_err *e)
{
    struct kv_cc_sizes v;
    size_t at;
    if (check_reqs(cfg, NULL, &v, &at, e) < 0)
        return -1;
    *sz = v;
    return 0;
}

int kv_cc_new(const struct kv_cc_config *cfg, struct kv_cc **out,
              struct kv_err *e)
{
    struct kv_cc *cc;
    struct kv_cc_sizes sz;
    size_t at;
    if (cfg->chunk_pool_blocks < 1 || cfg->n_reqs < 1)
        return kv_err_set(e, "chunk-cache plan: bad configuration");
    cc = calloc(1, sizeof *cc);
    if (!cc)
        return kv_err_set(e, "out of memory");
    cc->cfg = *cfg;
    cc->rq = calloc(cfg->n_reqs, sizeof *cc->rq);
    cc->waiting = calloc(cfg->n_reqs, sizeof *cc->waiting);
    cc->running = calloc(cfg->n_reqs, sizeof *cc->running);
    if (!cc->rq || !cc->waiting || !cc->running)
        goto oom;
    if (check_reqs(cfg, cc->rq, &sz, &at, e) < 0)
        goto fail;
    for (size_t i = 0; i < cfg->n_reqs; i++)
        cc->waiting[cc->n_waiting++] = i;
    if (sz.pool_blocks_least > cfg->chunk_pool_blocks) {
        kv_err_set(e, "prompt %zu: a chunk and its context need %lld "
                   "chunk-pool blocks, the pool has %lld (--chunk-pool-blocks "
                   "%lld or more fits every prompt)", at,
                   (long long)sz.pool_blocks_least,
                   (long long)cfg->chunk_pool_blocks,
                   (long long)sz.pool_blocks_least);
        goto fail;
    }
    if (!cc->cfg.num_blocks)
        cc->cfg.num_blocks = sz.main_blocks;
    if (sz.main_blocks_least > cc->cfg.num_blocks) {
        kv_err_set(e, "a request needs %lld blocks, the pool has %lld besides "
                   "the null block (--num-blocks %lld or more)",
                   (long long)sz.main_blocks_least - 1,
                   (long long)cc->cfg.num_blocks - 1,
                   (long long)sz.main_blocks_least);
        goto fail;
    }
    fifo_init(&cc->main_free, 1, cc->cfg.num_blocks - 1);
    fifo_init(&cc->pool_free, 0, cfg->chunk_pool_blocks);
    cc->st.bt_stride = cdiv(cfg->max_model_len, cfg->block_size);
    *out = cc;
    return 0;
oom:
    kv_err_set(e, "out of memory");
fail:
    kv_cc_free(cc);
    return -1;
}

int64_t kv_cc_num_blocks(const struct kv_cc *cc)
{
    return cc->cfg.num_blocks;
}

void kv_cc_free(struct kv_cc *cc)
{
    if (!cc)
        return;
    for (size_t i = 0; i < cc->cfg.n_reqs && cc->rq; i++)
        free(cc->rq[i].blocks);
    for (size_t i = 0; i < cc->n_ent; i++)
        free(cc->ent[i].blocks);
    struct kv_cc_list *lists[] = {
        &cc->st.chunk_req, &cc->st.chunk_seg, &cc->st.chunk_hit,
        &cc->st.chunk_tokens, &cc->st.chunk_base_pos, &cc->st.chunk_pos,
        &cc->st.pass_req, &cc->st.pass_query_start_loc, &cc->st.pass_positions,
        &cc->st.pass_slot_mapping, &cc->st.pass_context_lens,
        &cc->st.pass_context_slots, &cc->st.copy_req, &cc->st.copy_src,
        &cc->st.copy_dst, &cc->st.copy_len, &cc->st.copy_delta,
        &cc->st.req_ids, &cc->st.num_scheduled, &cc->st.query_start_loc,
        &cc->st.seq_lens, &cc->st.num_computed, &cc->st.positions,
        &cc->st.slot_mapping, &cc->st.block_table, &cc->st.waiting,
        &cc->st.blocked, &cc->st.finished};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        free(lists[i]->v);
    free(cc->st.evicted);
    free(cc->ent);
    free(cc->rq);
    free(cc->waiting);
    free(cc->running);
    free(cc->main_free.v);
    free(cc->pool_free.v);
    free(cc);
}

/* ---- the chunk pool ---------------------------------------------------------- */

/* The chunk kept under key with len tokens.  A chunk is named by its key
 * and its token count together (the seed's ChunkHash holds both), so the
 * same key with another length is a miss, and the two are kept side by
 * side: a hit never copies fewer or more tokens than the prompt has. */
static struct entry *lookup(struct kv_cc *cc, const uint8_t key[16],
                            int64_t len)
{
    for (size_t i = 0; i < cc->n_ent; i++)
        if (cc->ent[i].live && cc->ent[i].len == len &&
            !memcmp(cc->ent[i].key, key, 16))
            return &cc->ent[i];
    return NULL;
}

static int note_evicted(struct kv_cc_step *st, const uint8_t key[16])
{
    if (st->n_evicted == st->evicted_cap) {
        size_t cap = st->evicted_cap ? 2 * st->evicted_cap : 8;
        uint8_t (*p)[16] = realloc(st->evicted, cap * sizeof *p);
        if (!p)
            return -1;
        st->evicted = p;
        st->evicted_cap = cap;
    }
    memcpy(st->evicted[st->n_evicted++], key, 16);
    return 0;
}

/* Evict least recently used chunks until nblk blocks and an entry are free. */
static int make_room(struct kv_cc *cc, int64_t nblk, struct kv_err *e)
{
    while (cc->pool_free.n < nblk || cc->live_entries >= cc->cfg.max_chunks) {
        struct entry *victim = NULL;
        for (size_t i = 0; i < cc->n_ent; i++) {
            struct entry *x = &cc->ent[i];
            if (x->live && !x->pinned && (!victim || x->last_use < victim->last_use))
                victim = x;
        }
        if (!victim)
            return kv_err_set(e, "chunk pool: no chunk can be evicted");
        for (int64_t b = 0; b < victim->nblk; b++)
            if (fifo_give(&cc->pool_free, victim->blocks[b]) < 0)
                return kv_err_set(e, "out of memory");
        victim->live = 0;
        cc->live_entries--;
        if (note_evicted(&cc->st, victim->key) < 0)
            return kv_err_set(e, "out of memory");
    }
    return 0;
}

static struct entry *insert(struct kv_cc *cc, const uint8_t key[16], int64_t len)
{
    struct entry *x = NULL;
    for (size_t i = 0; i < cc->n_ent && !x; i++)
        if (!cc->ent[i].live)
            x = &cc->ent[i];
    if (!x) {
        if (cc->n_ent == cc->cap_ent) {
            size_t cap = cc->cap_ent ? 2 * cc->cap_ent : 16;
            struct entry *p = realloc(cc->ent, cap * sizeof *p);
            if (!p)
                return NULL;
            cc->ent = p;
            cc->cap_ent = cap;
        }
        x = &cc->ent[cc->n_ent++];
        memset(x, 0, sizeof *x);
    }
    int64_t nblk = cdiv(len, cc->cfg.block_size);
    int64_t *bl = realloc(x->blocks, (size_t)(nblk ? nblk : 1) * sizeof *bl);
    if (!bl)
        return NULL;
    x->blocks = bl;
    for (int64_t b = 0; b < nblk; b++)
        bl[b] = fifo_take(&cc->pool_free);
    memcpy(x->key, key, 16);
    x->len = len;
    x->nblk = nblk;
    x->live = 1;
    x->pinned = 0;
    cc->live_entries++;
    return x;
}

static int64_t pool_slot(const struct kv_cc *cc, const struct entry *x, int64_t t)
{
    int64_t B = cc->cfg.block_size;
    return x->blocks[t / B] * B + t % B;
}

static int64_t main_slot(const struct kv_cc *cc, const struct rq *r, int64_t pos)
{
    int64_t B = cc->cfg.block_size;
    return r->blocks[pos / B] * B + pos % B;
}

/* The chunk pass of a miss: positions from base, slots in the pool, the
 * context (the sys prompt's pool slots) it attends to. */
static int chunk_pass(struct kv_cc *cc, size_t id, const struct entry *x,
                      int64_t base, const struct entry *ctx, int64_t ctx_len)
{
    struct kv_cc_step *st = &cc->st;
    int rc = push(&st->pass_req, (int64_t)id) | push(&st->pass_context_lens, ctx_len);
    if (!st->pass_query_start_loc.n)
        rc |= push(&st->pass_query_start_loc, 0);
    rc |= push(&st->pass_query_start_loc,
               st->pass_query_start_loc.v[st->pass_query_start_loc.n - 1] + x->len);
    for (int64_t t = 0; t < x->len; t++)
        rc |= push(&st->pass_positions, base + t) |
              push(&st->pass_slot_mapping, pool_slot(cc, x, t));
    for (int64_t t = 0; t < ctx_len; t++)
        rc |= push(&st->pass_context_slots, pool_slot(cc, ctx, t));
    return rc;
}

/* Copies of chunk x into the request's main blocks at prompt offset off,
 * one per run of contiguous source and destination slots. */
static int copy_runs(struct kv_cc *cc, size_t id, const struct rq *r,
                     const struct entry *x, int64_t off, int64_t delta)
{
    struct kv_cc_step *st = &cc->st;
    int rc = 0;
    int64_t src0 = -1, dst0 = -1, n = 0;
    for (int64_t t = 0; t <= x->len; t++) {
        int64_t src = t < x->len ? pool_slot(cc, x, t) : -1;
        int64_t dst = t < x->len ? main_slot(cc, r, off + t) : -1;
        if (n && t < x->len && src == src0 + n && dst == dst0 + n) {
            n++;
            continue;
        }
        if (n)
            rc |= push(&st->copy_req, (int64_t)id) | push(&st->copy_src, src0) |
                  push(&st->copy_dst, dst0) | push(&st->copy_len, n) |
                  push(&st->copy_delta, delta);
        src0 = src;
        dst0 = dst;
        n = 1;
    }
    return rc;
}

/* Look up, compute when missing, and copy every sys and chunk segment of
 * request id, whose main blocks cover its chunks already. */
static int admit_chunks(struct kv_cc *cc, size_t id, struct kv_err *e)
{
    struct rq *r = &cc->rq[id];
    struct kv_cc_step *st = &cc->st;
    struct entry *sys = NULL;
    for (size_t s = 0; s + 1 < r->in->n_segs; s++) {
        const struct kv_cc_seg *g = &r->in->segs[s];
        int is_sys = g->kind == KV_CC_SYS;
        int64_t base = is_sys || cc->cfg.ctx_none ? 0 : r->sys_len;
        int64_t ctx_len = is_sys || cc->cfg.ctx_none ? 0 : r->sys_len;
        if (g->len == 0)
            continue;
        struct entry *x = lookup(cc, g->key, g->len);
        if (push(&st->chunk_req, (int64_t)id) | push(&st->chunk_seg, (int64_t)s) |
            push(&st->chunk_hit, x != NULL) | push(&st->chunk_tokens, g->len) |
            push(&st->chunk_base_pos, base) | push(&st->chunk_pos, g->off))
            return kv_err_set(e, "out of memory");
        if (!x) {
            if (sys)
                sys->pinned = 1;
            int rc = make_room(cc, cdiv(g->len, cc->cfg.block_size), e);
            if (sys)
                sys->pinned = 0;
            if (rc < 0)
                return -1;
            if (!(x = insert(cc, g->key, g->len)) ||
                chunk_pass(cc, id, x, base, sys, sys ? ctx_len : 0))
                return kv_err_set(e, "out of memory");
            st->misses++;
        } else {
            st->hits++;
        }
        x->last_use = ++cc->clock;
        if (copy_runs(cc, id, r, x, g->off, g->off - base))
            return kv_err_set(e, "out of memory");
        if (is_sys)
            sys = x;
    }
    return 0;
}

/* ---- scheduling ---------------------------------------------------------------- */

static int grow(struct kv_cc *cc, struct rq *r, int64_t tokens)
{
    int64_t want = cdiv(tokens, cc->cfg.block_size);
    if (want <= r->nblk)
        return 1;
    if (want - r->nblk > cc->main_free.n)
        return 0;
    int64_t *p = realloc(r->blocks, (size_t)want * sizeof *p);
    if (!p)
        return -1;
    r->blocks = p;
    while (r->nblk < want)
        p[r->nblk++] = fifo_take(&cc->main_free);
    return 1;
}

static int schedule(struct kv_cc *cc, size_t id, int64_t n)
{
    struct kv_cc_step *st = &cc->st;
    struct rq *r = &cc->rq[id];
    int rc = push(&st->req_ids, (int64_t)id) | push(&st->num_scheduled, n) |
             push(&st->seq_lens, r->computed + n) | push(&st->num_computed, r->computed);
    if (!st->query_start_loc.n)
        rc |= push(&st->query_start_loc, 0);
    rc |= push(&st->query_start_loc, st->query_start_loc.v[st->query_start_loc.n - 1] + n);
    for (int64_t t = 0; t < n; t++)
        rc |= push(&st->positions, r->computed + t) |
              push(&st->slot_mapping, main_slot(cc, r, r->computed + t));
    for (int64_t b = 0; b < st->bt_stride; b++)
        rc |= push(&st->block_table, b < r->nblk ? r->blocks[b] : 0);
    return rc;
}

static void reset_step(struct kv_cc_step *st)
{
    struct kv_cc_list *lists[] = {
        &st->chunk_req, &st->chunk_seg, &st->chunk_hit, &st->chunk_tokens,
        &st->chunk_base_pos, &st->chunk_pos, &st->pass_req,
        &st->pass_query_start_loc, &st->pass_positions, &st->pass_slot_mapping,
        &st->pass_context_lens, &st->pass_context_slots, &st->copy_req,
        &st->copy_src, &st->copy_dst, &st->copy_len, &st->copy_delta,
        &st->req_ids, &st->num_scheduled, &st->query_start_loc, &st->seq_lens,
        &st->num_computed, &st->positions, &st->slot_mapping, &st->block_table,
        &st->waiting, &st->blocked, &st->finished};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        lists[i]->n = 0;
    st->n_evicted = 0;
    st->hits = st->misses = 0;
}

/* Running requests first, in order; then waiting ones, FCFS. */
static int schedule_all(struct kv_cc *cc, int64_t *budget, struct kv_err *e)
{
    struct kv_cc_step *st = &cc->st;
    for (size_t k = 0; k < cc->n_running && *budget > 0; k++) {
        size_t id = cc->running[k];
        struct rq *r = &cc->rq[id];
        int64_t need = r->plen + r->produced - r->computed;
        int64_t n = need < *budget ? need : *budget;
        int g = grow(cc, r, r->computed + n);
        if (g < 0 || (g == 0 && push(&st->blocked, (int64_t)id)))
            return kv_err_set(e, "out of memory");
        if (g == 0)
            continue;
        if (schedule(cc, id, n))
            return kv_err_set(e, "out of memory");
        *budget -= n;
    }
    while (cc->n_waiting && *budget > 0 &&
           (int64_t)cc->n_running < cc->cfg.max_num_seqs) {
        size_t id = cc->waiting[0];
        struct rq *r = &cc->rq[id];
        int64_t q = r->plen - r->q_off, n = q < *budget ? q : *budget;
        if (cdiv(r->q_off + n, cc->cfg.block_size) > cc->main_free.n) {
            if (push(&st->blocked, (int64_t)id))
                return kv_err_set(e, "out of memory");
            break;
        }
        if (grow(cc, r, r->q_off + n) < 0 || admit_chunks(cc, id, e) < 0)
            return e->msg[0] ? -1 : kv_err_set(e, "out of memory");
        r->computed = r->q_off;
        r->state = 1;
        memmove(cc->waiting, cc->waiting + 1, --cc->n_waiting * sizeof *cc->waiting);
        cc->running[cc->n_running++] = id;
        if (schedule(cc, id, n))
            return kv_err_set(e, "out of memory");
        *budget -= n;
    }
    return 0;
}

/* After the forward pass: computed tokens, sampled tokens, finished ones
 * return their blocks to the back of the queue, last block first. */
static int advance(struct kv_cc *cc)
{
    struct kv_cc_step *st = &cc->st;
    for (size_t k = 0; k < st->req_ids.n; k++) {
        struct rq *r = &cc->rq[st->req_ids.v[k]];
        r->computed += st->num_scheduled.v[k];
        if (r->computed >= r->plen + r->produced)
            r->produced++;
    }
    size_t w = 0;
    for (size_t k = 0; k < cc->n_running; k++) {
        size_t id = cc->running[k];
        struct rq *r = &cc->rq[id];
        if (r->produced >= r->in->output_len ||
            r->plen + r->produced >= cc->cfg.max_model_len) {
            for (int64_t b = r->nblk - 1; b >= 0; b--)
                if (fifo_give(&cc->main_free, r->blocks[b]) < 0)
                    return -1;
            r->nblk = 0;
            r->state = 2;
            if (push(&st->finished, (int64_t)id))
                return -1;
        } else {
            cc->running[w++] = id;
        }
    }
    cc->n_running = w;
    for (size_t k = 0; k < cc->n_waiting; k++)
        if (push(&st->waiting, (int64_t)cc->waiting[k]))
            return -1;
    return 0;
}

int kv_cc_step(struct kv_cc *cc, int decode, const struct kv_cc_step **out,
               struct kv_err *e)
{
    struct kv_cc_step *st = &cc->st;
    int prompts_done = 1;
    for (size_t i = 0; i < cc->cfg.n_reqs; i++)
        if (cc->rq[i].state == 0 || (cc->rq[i].state == 1 &&
                                     cc->rq[i].computed < cc->rq[i].plen))
            prompts_done = 0;
    if (prompts_done && (!decode || cc->n_running == 0))
        return 0;
    reset_step(st);
    st->step++;
    int64_t budget = cc->cfg.max_num_batched_tokens;
    if (schedule_all(cc, &budget, e) < 0)
        return -1;
    if (st->req_ids.n == 0)
        return kv_err_set(e, "step %lld: the main pool has no block for any "
                          "request (this flow does not preempt): give "
                          "--num-blocks more", (long long)st->step);
    if (advance(cc) < 0)
        return kv_err_set(e, "out of memory");
    st->free_blocks = cc->main_free.n;
    st->pool_free_blocks = cc->pool_free.n;
    st->pool_entries = cc->live_entries;
    *out = st;
    return 1;
}
