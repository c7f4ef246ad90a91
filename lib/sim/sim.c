/* sim.c - replay of RAG request traces through KV cache policies at one
 * byte budget: no cache, vLLM automatic prefix caching (block hashes chained
 * over full blocks, LRU free queue, tail-first freeing), kvchunk's chunk
 * cache (whole chunks keyed by content, the system prompt as a prefix, LRU
 * or LFU by bytes) and an infinite chunk cache.  This file owns the replay
 * loop: a request's segments, its conversation, each policy fed in turn,
 * the cost model and the counters.  The policies are in prefix.c, radix.c
 * and chunkcache.c, the trace reader in reader.c, the generator and the
 * split converter in trace.c.
 *
 * The model of a prompt.  A request's prompt is a list of segments (system
 * prompt, history of its conversation, retrieved chunks, question); each
 * segment is named by a 64-bit content key and a length.  Token i of a
 * segment is identified by (key, i), so the simulator never holds tokens:
 * the prefix cache hashes a block as its parent's hash and the runs
 * (key, offset, length) it covers, which is the same as hashing its token
 * ids as long as equal keys mean equal content.  The question and the
 * output of each request get keys of their own (never shared).
 */
#include "sim/internal.h"

/* ---- conversations ------------------------------------------------------- */

struct hseg {
    uint64_t key;
    int64_t len;
    int kind;
};

struct session {
    uint64_t id;
    struct hseg *h;
    size_t n, cap;
    int32_t prev, next;   /* LRU */
};

/* ---- the replay ---------------------------------------------------------- */

struct kv_sim {
    struct kv_sim_opts o;
    uint64_t n_req;
    struct kv_sim_stats none;
    struct prefix prefix[3];        /* in order, chunk-sorted, LFU */
    struct radix radix;
    struct ccache cc[3];            /* chunk LRU, chunk LFU, oracle */
    /* conversations */
    struct session *ses;
    size_t n_ses, cap_ses;
    int32_t ses_head, ses_tail;
    int32_t *ses_free;
    size_t n_ses_free, cap_ses_free;
    struct map ses_map;
    /* scratch */
    struct kv_sim_seg *seg, *seg_sorted;
    size_t cap_seg, cap_seg_sorted;
};

static int on(const struct kv_sim *s, int p)
{
    return (s->o.policies >> p) & 1u;
}

void kv_sim_free(struct kv_sim *s);

int kv_sim_create(struct kv_sim **out, const struct kv_sim_opts *o,
                  struct kv_err *e)
{
    if (!o->policies || (o->policies >> KV_SIM_NPOLICIES))
        return kv_err_set(e, "no policy to simulate");
    if (o->block_size < 1 || o->block_size > 1 << 20)
        return kv_err_set(e, "block size %lld out of range",
                          (long long)o->block_size);
    if (o->capacity_tokens < 1)
        return kv_err_set(e, "capacity of %lld tokens: less than one token",
                          (long long)o->capacity_tokens);
    if (o->max_chunks < 0)
        return kv_err_set(e, "a limit of %lld chunks: negative",
                          (long long)o->max_chunks);
    if ((o->policies & ((3u << KV_SIM_PREFIX) |
                        (1u << KV_SIM_PREFIX_LFU))) &&
        o->capacity_tokens < o->block_size)
        return kv_err_set(e, "capacity of %lld tokens is smaller than one "
                          "block of %lld", (long long)o->capacity_tokens,
                          (long long)o->block_size);
    struct kv_sim *s = calloc(1, sizeof *s);
    if (!s)
        return kv_err_set(e, "out of memory");
    s->o = *o;
    if (!s->o.max_sessions)
        s->o.max_sessions = 1;
    for (int i = 0; i < 3; i++) {
        s->prefix[i].B = o->block_size;
        s->prefix[i].n_pool = o->capacity_tokens / o->block_size;
    }
    s->prefix[2].lfu = 1;
    for (int i = 0; i < 3; i++) {
        s->cc[i].cap = i == 2 ? INT64_MAX : o->capacity_tokens;
        s->cc[i].max_n = i == 2 ? 0 : o->max_chunks;
        s->cc[i].lfu = i == 1;
        s->cc[i].head = s->cc[i].tail = -1;
    }
    s->ses_head = s->ses_tail = -1;
    if (sim_rx_init(&s->radix, o->capacity_tokens) < 0) {
        kv_sim_free(s);
        return kv_err_set(e, "out of memory");
    }
    *out = s;
    return 0;
}

void kv_sim_free(struct kv_sim *s)
{
    if (!s)
        return;
    for (int i = 0; i < 3; i++)
        sim_prefix_release(&s->prefix[i]);
    for (int i = 0; i < 3; i++)
        sim_cc_release(&s->cc[i]);
    sim_rx_release(&s->radix);
    for (size_t i = 0; i < s->n_ses; i++)
        free(s->ses[i].h);
    free(s->ses);
    free(s->ses_free);
    sim_map_release(&s->ses_map);
    free(s->seg);
    free(s->seg_sorted);
    free(s);
}

size_t kv_sim_mem(const struct kv_sim *s)
{
    size_t m = sizeof *s;
    for (int i = 0; i < 3; i++)
        m += s->prefix[i].cap_blk * sizeof(struct pblock) +
             s->prefix[i].cap_uses * 4 +
             s->prefix[i].cap_heap * sizeof(struct lent) +
             s->prefix[i].cap_q * sizeof(struct qent) +
             s->prefix[i].map.cap * sizeof *s->prefix[i].map.s +
             s->prefix[i].cap_hashes * 8 + s->prefix[i].cap_held * 4;
    for (int i = 0; i < 3; i++)
        m += sim_cc_mem(&s->cc[i]);
    m += s->radix.cap_node * sizeof(struct rnode) + sim_map_mem(&s->radix.child) +
         s->radix.cap_heap * sizeof(struct rheap);
    for (size_t i = 0; i < s->n_ses; i++)
        m += s->ses[i].cap * sizeof(struct hseg);
    m += s->cap_ses * sizeof *s->ses + sim_map_mem(&s->ses_map);
    m += (s->cap_seg + s->cap_seg_sorted) * sizeof(struct kv_sim_seg);
    return m;
}

size_t kv_sim_feed_mem(const struct kv_sim *s, const struct kv_sim_req *r)
{
    /* the prompt as kv_sim_feed builds it: system prompt, the history,
     * the chunks, the question, then the output a prefix pool stores */
    double tok = (double)r->sys.len + (double)r->q_len +
                 (double)(r->out_len > 0 ? r->out_len : 0) + 1;
    double m = 0;
    for (size_t i = 0; i < r->n_chunks; i++)
        tok += (double)r->chunks[i].len;
    if (r->session) {
        int64_t x = sim_map_get(&s->ses_map, r->session);
        for (size_t i = 0; x >= 0 && i < s->ses[x].n; i++)
            tok += (double)s->ses[x].h[i].len;
    }
    for (int v = 0; v < 3; v++) {
        static const int ppol[3] = { KV_SIM_PREFIX, KV_SIM_PREFIX_SORTED,
                                     KV_SIM_PREFIX_LFU };
        const struct prefix *p = &s->prefix[v];
        if (!on(s, ppol[v]))
            continue;
        double blocks = tok / (double)p->B + 2;
        double left = (double)p->n_pool - (double)p->n_made;
        double made = blocks < left ? blocks : left > 0 ? left : 0;
        /* the request's hashes and held blocks; the blocks it makes, their
         * queue entries and map slots (at most a quarter full) */
        m += blocks * (sizeof(uint64_t) + sizeof(int32_t)) +
             made * (sizeof(struct pblock) + sizeof(struct qent) +
                     4 * sizeof(uint64_t) +
                     (p->lfu ? sizeof(uint32_t) + sizeof(struct lent) : 0));
    }
    m = 2 * m + (double)((r->n_chunks + 2) * 2 * sizeof(struct kv_sim_seg));
    return m >= (double)SIZE_MAX ? SIZE_MAX : (size_t)m;
}

void kv_sim_get(const struct kv_sim *s, int p, struct kv_sim_stats *out)
{
    switch (p) {
    case KV_SIM_PREFIX:        *out = s->prefix[0].st; break;
    case KV_SIM_PREFIX_SORTED: *out = s->prefix[1].st; break;
    case KV_SIM_PREFIX_LFU:    *out = s->prefix[2].st; break;
    case KV_SIM_PREFIX_RADIX:  *out = s->radix.st; break;
    case KV_SIM_CHUNK:         *out = s->cc[0].st; break;
    case KV_SIM_CHUNK_LFU:     *out = s->cc[1].st; break;
    case KV_SIM_ORACLE:        *out = s->cc[2].st; break;
    default:                   *out = s->none; break;
    }
}

/* The conversation with this id: found (moved to the front of the LRU), or
 * created when create is set (dropping the least recent one beyond
 * max_sessions).  NULL when absent and not created. */
static struct session *session_get(struct kv_sim *s, uint64_t id, int create,
                                   struct kv_err *e, int *fail)
{
    int64_t x = sim_map_get(&s->ses_map, id);
    struct session *t;
    if (x >= 0) {
        t = &s->ses[x];
        if (s->ses_head != x) {
            /* unlink, push front */
            if (t->prev >= 0)
                s->ses[t->prev].next = t->next;
            if (t->next >= 0)
                s->ses[t->next].prev = t->prev;
            else
                s->ses_tail = t->prev;
            t->prev = -1;
            t->next = s->ses_head;
            s->ses[s->ses_head].prev = (int32_t)x;
            s->ses_head = (int32_t)x;
        }
        return t;
    }
    if (!create)
        return NULL;
    if (s->ses_map.n >= s->o.max_sessions) {
        int32_t y = s->ses_tail;
        struct session *u = &s->ses[y];
        s->ses_tail = u->prev;
        if (u->prev >= 0)
            s->ses[u->prev].next = -1;
        else
            s->ses_head = -1;
        sim_map_del(&s->ses_map, u->id);
        free(u->h);
        u->h = NULL;
        u->n = u->cap = 0;
        if (sim_grow((void **)&s->ses_free, &s->cap_ses_free, s->n_ses_free + 1,
                     sizeof *s->ses_free) < 0) {
            *fail = kv_err_set(e, "out of memory");
            return NULL;
        }
        s->ses_free[s->n_ses_free++] = y;
    }
    int32_t y;
    if (s->n_ses_free) {
        y = s->ses_free[--s->n_ses_free];
    } else {
        if (s->n_ses >= INT32_MAX - 1 ||
            sim_grow((void **)&s->ses, &s->cap_ses, s->n_ses + 1,
                     sizeof *s->ses) < 0) {
            *fail = kv_err_set(e, "out of memory");
            return NULL;
        }
        y = (int32_t)s->n_ses++;
    }
    t = &s->ses[y];
    memset(t, 0, sizeof *t);
    t->id = id;
    t->prev = -1;
    t->next = s->ses_head;
    if (s->ses_head >= 0)
        s->ses[s->ses_head].prev = y;
    else
        s->ses_tail = y;
    s->ses_head = y;
    if (sim_map_put(&s->ses_map, id, (uint32_t)y) < 0) {
        *fail = kv_err_set(e, "out of memory");
        return NULL;
    }
    return t;
}

static int cmp_seg_key(const void *a, const void *b)
{
    const struct kv_sim_seg *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Record one request's modelled TTFT (and end-to-end latency) and the
 * counters common to all. */
static void account(struct kv_sim_stats *st, const struct kv_sim_cost *c,
                    uint64_t bpt, const struct kv_sim_req *r, int64_t n_prompt,
                    int64_t hit, double pairs, int64_t loaded, int64_t rotated)
{
    int64_t computed = n_prompt - hit;
    double us = c->us_token * (double)computed + c->us_pair * pairs;
    if (loaded)
        us += (double)loaded * (double)bpt / (c->bw_load * 1e3);
    if (rotated)  /* only K moves: half of the bytes */
        us += (double)rotated * (double)bpt / 2.0 / (c->bw_rope * 1e3);
    st->e2e_sum_us += us;
    if (r->out_len > 1)
        st->e2e_sum_us += c->us_decode * (double)(r->out_len - 1);
    if (r->sys.len)
        st->sys_slots++;
    st->requests++;
    st->prompt_tokens += (uint64_t)n_prompt;
    st->hit_tokens += (uint64_t)hit;
    st->prefill_tokens += (uint64_t)computed;
    st->loaded_tokens += (uint64_t)loaded;
    st->rotated_tokens += (uint64_t)rotated;
    sim_hist_add(st, us, r->t);
}

/* Replay the request through the chunk scheme cache c.  seg: [sys?]
 * history, chunks, question, output; hist_end: index of the first new
 * chunk; first_q: index of the question. */
static int chunk_feed(struct kv_sim *s, struct ccache *c,
                      const struct kv_sim_req *r,
                      const struct kv_sim_seg *seg, size_t hist_end,
                      size_t first_q, int64_t n_prompt,
                      uint64_t conv_key_prev, uint64_t conv_key_next,
                      struct kv_err *e)
{
    uint64_t salt = s->o.salt_tenant ? r->tenant : 0;
    int64_t S = r->sys.len, pos = 0, hit = 0, loaded = 0, rotated = 0;
    double pairs = 0;
    uint64_t ctx = s->o.ctx_sys && S ? r->sys.key : 0;
    uint64_t ctx_salt = kv_sim_mix(ctx, salt);
    size_t i = 0;
    int conv_hit = 0;

    if (conv_key_prev) {
        int32_t x = sim_cc_lookup(c, conv_key_prev);
        if (x >= 0) {
            int64_t len = c->e[x].len;
            hit += len;
            loaded += len;
            pos = len;
            /* the rest of the history, if any, is computed */
            int64_t hist_tokens = 0;
            for (size_t k = 0; k < hist_end; k++)
                hist_tokens += seg[k].len;
            if (hist_tokens > len) {
                pairs += sim_causal_pairs(len, hist_tokens - len);
                pos = hist_tokens;
            }
            i = hist_end;
            conv_hit = 1;
            if (S)
                c->st.sys_hits++;
        }
    }
    if (!conv_hit && S) {
        uint64_t key = kv_sim_mix(kv_sim_mix(r->sys.key, salt), 0x535953);
        int32_t x = sim_cc_lookup(c, key);
        if (x >= 0) {
            hit += S;
            loaded += S;
            if (s->o.rotate_always)
                rotated += S;
            c->st.sys_hits++;
        } else {
            pairs += sim_causal_pairs(0, S);
            if (sim_cc_insert(c, key, S, 0, e) < 0)
                return -1;
            if (s->o.miss_copy) {
                loaded += S;
                if (s->o.rotate_always)
                    rotated += S;
            }
        }
        pos = S;
        i = 1;
    }
    for (; i < first_q; i++) {
        const struct kv_sim_seg *g = &seg[i];
        if (g->kind != KV_SIM_SEG_CHUNK) {          /* history text */
            pairs += sim_causal_pairs(pos, g->len);
            pos += g->len;
            continue;
        }
        uint64_t key = kv_sim_mix(g->key, ctx_salt);
        int32_t x = sim_cc_lookup(c, key);
        if (x >= 0) {
            hit += g->len;
            loaded += g->len;
            if (s->o.rotate_always || c->e[x].p0 != pos)
                rotated += g->len;
            if (i >= hist_end)
                c->st.chunk_hits++;
        } else {
            int64_t visible = ctx ? S : 0;
            pairs += sim_causal_pairs(visible, g->len);
            if (sim_cc_insert(c, key, g->len, pos, e) < 0)
                return -1;
            if (s->o.miss_copy) {
                loaded += g->len;
                if (s->o.rotate_always)
                    rotated += g->len;
            }
        }
        pos += g->len;
    }
    /* the question */
    pairs += sim_causal_pairs(pos, r->q_len);
    pos += r->q_len;
    /* The last prompt token is always computed (it gives the logits). */
    if (hit == n_prompt && n_prompt > 0) {
        hit--;
        pairs += (double)n_prompt;
    }
    c->st.chunk_slots += r->n_chunks;
    account(&c->st, &s->o.cost, s->o.bytes_per_token, r, n_prompt, hit,
            pairs, loaded, rotated);
    if (conv_key_next) {
        int64_t len = n_prompt + (r->out_len > 0 ? r->out_len - 1 : 0);
        if (sim_cc_lookup(c, conv_key_next) < 0 &&
            sim_cc_insert(c, conv_key_next, len, 0, e) < 0)
            return -1;
    }
    return 0;
}

/* Add prefix-policy chunk hits: chunks [hist_end, first_q) wholly inside
 * the first hit tokens; and the system prompt's (seg[0]). */
static void prefix_chunk_hits(struct kv_sim_stats *st,
                              const struct kv_sim_seg *seg, size_t first_q,
                              size_t hist_end, int64_t hit)
{
    int64_t pos = 0;
    if (first_q && seg[0].kind == KV_SIM_SEG_SYS && seg[0].len <= hit)
        st->sys_hits++;
    for (size_t i = 0; i < first_q; i++) {
        pos += seg[i].len;
        if (i >= hist_end && seg[i].kind == KV_SIM_SEG_CHUNK && pos <= hit)
            st->chunk_hits++;
    }
}

int kv_sim_check(const struct kv_sim_opts *o, const struct kv_sim_req *r,
                 struct kv_err *e)
{
    int limited = (o->policies & ((1u << KV_SIM_PREFIX) |
                                  (1u << KV_SIM_PREFIX_SORTED) |
                                  (1u << KV_SIM_PREFIX_LFU) |
                                  (1u << KV_SIM_PREFIX_RADIX) |
                                  (1u << KV_SIM_CHUNK) |
                                  (1u << KV_SIM_CHUNK_LFU))) != 0;
    const struct kv_sim_seg *big = NULL;
    if (!limited)
        return 0;
    if (r->sys.len > o->capacity_tokens)
        big = &r->sys;
    for (size_t i = 0; !big && i < r->n_chunks; i++)
        if (r->chunks[i].len > o->capacity_tokens)
            big = &r->chunks[i];
    if (big)
        return kv_err_set(e, "line %llu: %s '%.*s' of %lld tokens "
                          "(%.0f bytes) does not fit the capacity of "
                          "%lld tokens (%.0f bytes)",
                          (unsigned long long)r->line,
                          big->kind == KV_SIM_SEG_SYS ? "system prompt" :
                          "chunk", big->name_len, big->name,
                          (long long)big->len,
                          (double)big->len * (double)o->bytes_per_token,
                          (long long)o->capacity_tokens,
                          (double)o->capacity_tokens *
                          (double)o->bytes_per_token);
    return 0;
}

/* Counters back to zero; the prefill server's queue goes on. */
static void stats_reset(struct kv_sim_stats *st, uint64_t entries)
{
    double busy = st->busy_until_us;
    memset(st, 0, sizeof *st);
    st->busy_until_us = busy;
    st->entries_max = entries;
}

/* The warm-up is over: what it cached stays, what it counted goes. */
static void warmup_end(struct kv_sim *s)
{
    stats_reset(&s->none, 0);
    for (int i = 0; i < 3; i++)
        stats_reset(&s->prefix[i].st, s->prefix[i].map.n);
    stats_reset(&s->radix.st, (uint64_t)s->radix.n_alive);
    for (int i = 0; i < 3; i++)
        stats_reset(&s->cc[i].st, s->cc[i].map.n);
}

int kv_sim_feed(struct kv_sim *s, const struct kv_sim_req *r,
                struct kv_err *e)
{
    const struct kv_sim_opts *o = &s->o;
    uint64_t req_id = ++s->n_req;

    /* A budget must hold every segment. */
    if (kv_sim_check(o, r, e) < 0)
        return -1;

    /* The conversation, if any. */
    struct session *ses = NULL;
    int fail = 0;
    if (r->session) {
        ses = session_get(s, r->session, 1, e, &fail);
        if (fail)
            return -1;
    }
    size_t n_hist = ses ? ses->n : 0;
    size_t n_seg = (r->sys.len ? 1 : 0) + n_hist + r->n_chunks + 2;
    if (sim_grow((void **)&s->seg, &s->cap_seg, n_seg, sizeof *s->seg) < 0)
        return kv_err_set(e, "out of memory");
    struct kv_sim_seg *seg = s->seg;
    size_t k = 0;
    int64_t n_prompt = 0;
    if (r->sys.len)
        seg[k++] = r->sys;
    size_t hist_begin = k;
    for (size_t i = 0; i < n_hist; i++) {
        seg[k] = (struct kv_sim_seg){ ses->h[i].key, ses->h[i].len,
                                      ses->h[i].kind, "", 0 };
        k++;
    }
    size_t hist_end = k;
    for (size_t i = 0; i < r->n_chunks; i++)
        seg[k++] = r->chunks[i];
    size_t first_q = k;
    seg[k++] = (struct kv_sim_seg){ kv_sim_mix(req_id, 0x51), r->q_len,
                                    KV_SIM_SEG_TEXT, "", 0 };
    /* the output is cached unless the trace names none of its blocks */
    int64_t out_cached = r->prompt_blocks ? 0 : r->out_len;
    uint64_t chunk_slots = r->prompt_blocks ? 0 : r->n_chunks;
    seg[k++] = (struct kv_sim_seg){ kv_sim_mix(req_id, 0x4f), out_cached,
                                    KV_SIM_SEG_TEXT, "", 0 };
    for (size_t i = 0; i < first_q + 1; i++) {
        n_prompt += seg[i].len;
        if (n_prompt > KV_SIM_MAX_PROMPT)
            return kv_err_set(e, "line %llu: prompt longer than 2^40 tokens",
                              (unsigned long long)r->line);
    }

    /* Conversation keys: the history's (what the previous turn stored) and
     * this turn's (what it stores). */
    uint64_t salt = o->salt_tenant ? r->tenant : 0;
    uint64_t conv_prev = 0, conv_next = 0;
    if (ses) {
        uint64_t h = kv_sim_mix(salt, 0x434f4e56);
        if (r->sys.len)
            h = kv_sim_mix(h, seg[0].key);
        for (size_t i = hist_begin; i < k; i++) {
            if (i == hist_end && n_hist)
                conv_prev = h;
            if (seg[i].len)     /* empty segments add no tokens */
                h = kv_sim_mix(h, kv_sim_mix(seg[i].key,
                                             (uint64_t)seg[i].len));
        }
        conv_next = h;
    }

    /* none */
    {
        account(&s->none, &o->cost, o->bytes_per_token, r, n_prompt, 0,
                sim_causal_pairs(0, n_prompt), 0, 0);
        s->none.chunk_slots += chunk_slots;
    }
    /* prefix */
    for (int v = 0; v < 3; v++) {
        static const int ppol[3] = { KV_SIM_PREFIX, KV_SIM_PREFIX_SORTED,
                                     KV_SIM_PREFIX_LFU };
        int pol = ppol[v];
        if (!on(s, pol))
            continue;
        struct kv_sim_seg *ps = seg;
        if (v == 1) {
            if (sim_grow((void **)&s->seg_sorted, &s->cap_seg_sorted, n_seg,
                         sizeof *s->seg_sorted) < 0)
                return kv_err_set(e, "out of memory");
            ps = s->seg_sorted;
            memcpy(ps, seg, k * sizeof *ps);
            /* sort every run of consecutive chunks */
            for (size_t i = 0; i < k;) {
                size_t j = i;
                while (j < k && ps[j].kind == KV_SIM_SEG_CHUNK)
                    j++;
                if (j - i > 1)
                    qsort(ps + i, j - i, sizeof *ps, cmp_seg_key);
                i = j > i ? j : i + 1;
            }
        }
        struct prefix *p = &s->prefix[v];
        int64_t hit = sim_prefix_feed(p, ps, k, n_prompt, out_cached, salt,
                                      e);
        if (hit < 0)
            return -1;
        p->st.chunk_slots += chunk_slots;
        prefix_chunk_hits(&p->st, ps, first_q, hist_end, hit);
        account(&p->st, &o->cost, o->bytes_per_token, r, n_prompt, hit,
                sim_causal_pairs(hit, n_prompt - hit), 0, 0);
    }
    /* prefix-radix */
    if (on(s, KV_SIM_PREFIX_RADIX)) {
        struct radix *rx = &s->radix;
        int64_t hit = sim_radix_feed(rx, seg, k, n_prompt, out_cached, salt,
                                     e);
        if (hit < 0)
            return -1;
        rx->st.chunk_slots += chunk_slots;
        prefix_chunk_hits(&rx->st, seg, first_q, hist_end, hit);
        account(&rx->st, &o->cost, o->bytes_per_token, r, n_prompt, hit,
                sim_causal_pairs(hit, n_prompt - hit), 0, 0);
    }
    /* chunk, chunk-lfu, oracle */
    static const int cpol[3] = { KV_SIM_CHUNK, KV_SIM_CHUNK_LFU,
                                 KV_SIM_ORACLE };
    for (int v = 0; v < 3; v++) {
        if (!on(s, cpol[v]))
            continue;
        if (chunk_feed(s, &s->cc[v], r, seg, hist_end, first_q, n_prompt,
                       conv_prev, conv_next, e) < 0)
            return -1;
    }

    /* The conversation goes on with this turn's chunks, question, output. */
    if (ses) {
        size_t add = k - hist_end;
        if (sim_grow((void **)&ses->h, &ses->cap, ses->n + add,
                     sizeof *ses->h) < 0)
            return kv_err_set(e, "out of memory");
        for (size_t i = hist_end; i < k; i++)
            ses->h[ses->n++] = (struct hseg){ seg[i].key, seg[i].len,
                                              seg[i].kind };
    }
    if (o->warmup && req_id == o->warmup)
        warmup_end(s);
    return 0;
}
