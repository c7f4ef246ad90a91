/* sim.c - unit tests of lib/sim/sim.c and lib/sim/trace.c: the replay against a
 * plain reference model that keeps real token sequences (no hashing, linear
 * scans) on random small traces (prefix-radix with room for everything
 * against the longest common prefix), the spec's toy trace, the invariants
 * (oracle = 1 - distinct/total, no policy above the oracle, prefix = chunk
 * for one system prompt, top-1 and block-aligned lengths), reader errors,
 * and the generator's determinism. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "sim/sim.h"
#include "tap.h"

/* ---- a reference model ----------------------------------------------------
 * Tokens are ints: segment "d7" of length n has tokens 1000000*(7+1)+i,
 * system prompt "s2" 500000000+1000000*2+i, and the question and output of
 * request r get 2000000000-ish values of their own.  A cached prefix block is
 * the whole token prefix it ends, compared element by element. */

#define MAXT 4096

struct rseg {
    int kind;      /* 0 sys, 1 chunk, 2 text */
    int id;        /* chunk/sys id, or -1 */
    int len;
    int base;      /* first token value */
};

struct rblock {
    int *pre;      /* the token prefix [0, (b+1)B) it caches, or NULL */
    int n_pre;
    long serial;   /* insertion order */
    int queued;
};

struct rprefix {
    int B, N, made;
    struct rblock blk[4096];
    int q[4096], nq;       /* free queue, q[0] = head */
    long serial;
    long hit, evict, stored, chunk_hits;
};

static void rq_remove(struct rprefix *p, int x)
{
    for (int i = 0; i < p->nq; i++)
        if (p->q[i] == x) {
            memmove(p->q + i, p->q + i + 1, (size_t)(p->nq - i - 1) * sizeof *p->q);
            p->nq--;
            p->blk[x].queued = 0;
            return;
        }
}

static int ralloc(struct rprefix *p)
{
    if (p->made < p->N) {
        int x = p->made++;
        memset(&p->blk[x], 0, sizeof p->blk[x]);
        return x;
    }
    if (!p->nq)
        return -1;
    int x = p->q[0];
    rq_remove(p, x);
    if (p->blk[x].pre) {
        free(p->blk[x].pre);
        p->blk[x].pre = NULL;
        p->evict++;
    }
    return x;
}

/* tok: the prompt (n) then the output; salt distinguishes tenants. */
static long rprefix_feed(struct rprefix *p, const int *tok, int n, int out,
                         int salt)
{
    int B = p->B, kv = n + (out > 0 ? out - 1 : 0);
    int n_full = kv / B, need = (kv + B - 1) / B, max_hit = n ? (n - 1) / B : 0;
    int held[MAXT], nh = 0, hits = 0;
    int key[MAXT + 1];
    if (!n)
        return 0;
    key[0] = salt;
    memcpy(key + 1, tok, (size_t)kv * sizeof *tok);
    while (hits < max_hit) {
        int best = -1;
        for (int x = 0; x < p->made; x++) {
            struct rblock *b = &p->blk[x];
            if (b->pre && b->n_pre == (hits + 1) * B + 1 &&
                !memcmp(b->pre, key, (size_t)b->n_pre * sizeof *key) &&
                (best < 0 || b->serial < p->blk[best].serial))
                best = x;
        }
        if (best < 0)
            break;
        if (p->blk[best].queued)
            rq_remove(p, best);
        held[nh++] = best;
        hits++;
    }
    for (int b = hits; b < need; b++) {
        int x = ralloc(p);
        if (x < 0)
            break;
        if (b < n_full) {
            int m = (b + 1) * B + 1;
            p->blk[x].pre = malloc((size_t)m * sizeof *key);
            memcpy(p->blk[x].pre, key, (size_t)m * sizeof *key);
            p->blk[x].n_pre = m;
            p->blk[x].serial = p->serial++;
            p->stored += B;
        }
        held[nh++] = x;
    }
    for (int i = nh; i-- > 0;) {
        p->q[p->nq++] = held[i];
        p->blk[held[i]].queued = 1;
    }
    return (long)hits * B;
}

static void rprefix_free(struct rprefix *p)
{
    for (int x = 0; x < p->made; x++)
        free(p->blk[x].pre);
}

/* Chunk cache entries: kind 0 sys (a = sys id), 1 chunk (a = ctx, b = id),
 * 2 conversation (the token sequence). */
struct rentry {
    int kind, a, b, salt;
    int *seq;
    int n_seq;
    long len, p0, uses, last;
};

struct rchunk {
    long cap, used, clock;
    int lfu;
    int max_n;      /* most entries, 0: no limit */
    struct rentry e[4096];
    int n;
    long hit, evict, stored, chunk_hits, sys_hits;
};

static int rc_find(struct rchunk *c, int kind, int a, int b, int salt,
                   const int *seq, int n_seq)
{
    for (int i = 0; i < c->n; i++) {
        struct rentry *t = &c->e[i];
        if (t->kind == kind && t->a == a && t->b == b && t->salt == salt &&
            t->n_seq == n_seq &&
            (!n_seq || !memcmp(t->seq, seq, (size_t)n_seq * sizeof *seq))) {
            t->uses++;
            t->last = ++c->clock;
            return i;
        }
    }
    return -1;
}

static void rc_insert(struct rchunk *c, int kind, int a, int b, int salt,
                      const int *seq, int n_seq, long len, long p0)
{
    if (len <= 0 || len > c->cap)
        return;
    while (c->used + len > c->cap || (c->max_n && c->n >= c->max_n)) {
        int v = 0;
        for (int i = 1; i < c->n; i++) {
            struct rentry *x = &c->e[i], *y = &c->e[v];
            int less = c->lfu ? (x->uses < y->uses ||
                                 (x->uses == y->uses && x->last < y->last))
                              : x->last < y->last;
            if (less)
                v = i;
        }
        c->used -= c->e[v].len;
        c->evict++;
        free(c->e[v].seq);
        c->e[v] = c->e[--c->n];
    }
    struct rentry *t = &c->e[c->n++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->a = a;
    t->b = b;
    t->salt = salt;
    if (n_seq) {
        t->seq = malloc((size_t)n_seq * sizeof *seq);
        memcpy(t->seq, seq, (size_t)n_seq * sizeof *seq);
    }
    t->n_seq = n_seq;
    t->len = len;
    t->p0 = p0;
    t->uses = 1;
    t->last = ++c->clock;
    c->used += len;
    c->stored += len;
}

static void rchunk_free(struct rchunk *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->e[i].seq);
}

/* segs: [sys?] history, chunks (new from index first_new), question; then
 * the output (len out).  tok: the prompt's tokens then the output's. */
static void rchunk_feed(struct rchunk *c, const struct rseg *seg, int n_seg,
                        int first_new, int first_q, int sys_id, int ctx_sys,
                        int salt, int n, int out, const int *tok, int session,
                        int hist_tokens)
{
    long hit = 0, pos = 0;
    int i = 0, conv_hit = 0;
    int S = sys_id >= 0 ? seg[0].len : 0;
    int ctx = ctx_sys && sys_id >= 0 ? sys_id : -1;
    if (session && first_new > (sys_id >= 0 ? 1 : 0)) {
        int x = rc_find(c, 2, 0, 0, salt, tok, hist_tokens);
        if (x >= 0) {
            hit += c->e[x].len;
            i = first_new;
            conv_hit = 1;
            pos = hist_tokens;
            if (sys_id >= 0)
                c->sys_hits++;
        }
    }
    if (!conv_hit && sys_id >= 0) {
        if (rc_find(c, 0, sys_id, 0, salt, NULL, 0) >= 0) {
            hit += S;
            c->sys_hits++;
        } else
            rc_insert(c, 0, sys_id, 0, salt, NULL, 0, S, 0);
        i = 1;
        pos = S;
    }
    for (; i < first_q; i++) {
        if (seg[i].kind != 1) {
            pos += seg[i].len;
            continue;
        }
        if (rc_find(c, 1, ctx, seg[i].id, salt, NULL, 0) >= 0) {
            hit += seg[i].len;
            if (i >= first_new)
                c->chunk_hits++;
        } else {
            rc_insert(c, 1, ctx, seg[i].id, salt, NULL, 0, seg[i].len, pos);
        }
        pos += seg[i].len;
    }
    if (hit == n && n > 0)
        hit--;
    c->hit += hit;
    if (session) {
        int len = n + (out > 0 ? out - 1 : 0);
        /* the key is the whole sequence: prompt and output */
        if (rc_find(c, 2, 0, 0, salt, tok, n + out) < 0)
            rc_insert(c, 2, 0, 0, salt, tok, n + out, len, 0);
    }
    (void)n_seg;
}

/* ---- random traces ------------------------------------------------------- */

static uint64_t rs = 88172645463325252ULL;
static int rnd(int n)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (int)(rs % (uint64_t)n);
}

struct rsess {
    struct rseg h[256];
    int nh;
    int tok[MAXT];
    int ntok;   /* history tokens (without sys) */
};

/* Build a random trace of n_req lines into buf; replay it through the
 * reference; compare with kv_sim.  Returns the number of mismatches. */
static int check_random(int trial)
{
    int B = (int[]){ 1, 4, 16 }[rnd(3)];
    int cap = 60 + rnd(400);
    int ctx_sys = rnd(2), salt_tenant = rnd(2), with_sessions = rnd(2);
    int n_req = 20 + rnd(120);
    int dlen[12], slen[3] = { 20 + rnd(20), 7 + rnd(30), 16 };
    for (int i = 0; i < 12; i++)
        dlen[i] = 1 + rnd(40);
    if (cap < B)
        cap = B;
    char *buf = NULL;
    size_t bn = 0;
    FILE *f = open_memstream(&buf, &bn);
    struct rprefix *rp = calloc(1, sizeof *rp);
    struct rchunk *rc[3];
    struct rsess *ss = calloc(3, sizeof *ss);
    for (int v = 0; v < 3; v++) {
        rc[v] = calloc(1, sizeof *rc[v]);
        rc[v]->cap = v == 2 ? 1L << 40 : cap;
        rc[v]->lfu = v == 1;
    }
    /* half the trials limit the chunk caches' entries too */
    int max_n = rnd(2) ? 0 : 1 + rnd(6);
    rc[0]->max_n = rc[1]->max_n = max_n;
    rp->B = B;
    rp->N = cap / B;
    long prompt = 0, slots = 0, p_chunk_hits = 0, lcp_hit = 0;
    int uniq = 0;
    /* every earlier request's cached sequence, for the radix reference */
    int **seqs = calloc((size_t)n_req, sizeof *seqs);
    int *seq_len = calloc((size_t)n_req, sizeof *seq_len);
    for (int r = 0; r < n_req; r++) {
        int sys = rnd(4) - 1, k = rnd(5), q = rnd(6), out = rnd(6);
        int tenant = rnd(2), sess = with_sessions ? rnd(4) - 1 : -1;
        int ids[8];
        fprintf(f, "%d t%d ", r, tenant);
        if (sys >= 0)
            fprintf(f, "s%d:%d ", sys, slen[sys]);
        else
            fprintf(f, "- ");
        for (int i = 0; i < k; i++) {
            ids[i] = rnd(12);
            fprintf(f, "%sd%d:%d", i ? "," : "", ids[i], dlen[ids[i]]);
        }
        fprintf(f, "%s %d %d", k ? "" : "-", q, out);
        if (sess >= 0)
            fprintf(f, " c%d", sess);
        fputc('\n', f);

        /* the reference request */
        struct rseg seg[300];
        static int tok[MAXT * 2];
        int ns = 0, n = 0;
        if (sys >= 0) {
            seg[ns++] = (struct rseg){ 0, sys, slen[sys],
                                       500000000 + 1000000 * sys };
        }
        struct rsess *se = sess >= 0 ? &ss[sess] : NULL;
        for (int i = 0; se && i < se->nh; i++)
            seg[ns++] = se->h[i];
        int first_new = ns;
        for (int i = 0; i < k; i++)
            seg[ns++] = (struct rseg){ 1, ids[i], dlen[ids[i]],
                                       1000000 * (ids[i] + 1) };
        int first_q = ns;
        seg[ns++] = (struct rseg){ 2, -1, q, 1000000000 + 1000 * uniq++ };
        seg[ns++] = (struct rseg){ 2, -1, out, 1000000000 + 1000 * uniq++ };
        for (int i = 0; i < ns; i++)
            for (int j = 0; j < seg[i].len; j++)
                tok[n++] = seg[i].base + j;
        int np = n - out;
        int hist_tokens = 0;
        for (int i = 0; i < first_new; i++)
            hist_tokens += seg[i].len;
        prompt += np;
        slots += k;
        {
            /* radix with room for everything: the longest common prefix of
             * the first np - 1 tokens with any earlier sequence */
            int best = 0, lim = np - 1, kvn = np + (out > 0 ? out - 1 : 0);
            for (int q2 = 0; q2 < r; q2++) {
                int m = 0;
                if (salt_tenant && seq_len[q2] && seqs[q2][0] != tenant)
                    continue;
                while (m < lim && m < seq_len[q2] - 1 &&
                       seqs[q2][m + 1] == tok[m])
                    m++;
                if (m > best)
                    best = m;
            }
            /* an empty prompt computes and caches nothing */
            lcp_hit += np > 0 ? best : 0;
            seqs[r] = malloc(((size_t)kvn + 1) * sizeof **seqs);
            seqs[r][0] = tenant;
            memcpy(seqs[r] + 1, tok, (size_t)kvn * sizeof *tok);
            seq_len[r] = np > 0 ? kvn + 1 : 0;
        }
        int salt = salt_tenant ? tenant + 1 : 0;
        long h = rprefix_feed(rp, tok, np, out, salt);
        rp->hit += h;
        {
            int pos = 0;
            for (int i = 0; i < first_q; i++) {
                pos += seg[i].len;
                if (i >= first_new && pos <= h)
                    p_chunk_hits++;
            }
        }
        for (int v = 0; v < 3; v++) {
            int sc = salt;
            rchunk_feed(rc[v], seg, ns, first_new, first_q, sys, ctx_sys, sc,
                        np, out, tok, se != NULL, hist_tokens);
        }
        if (se) {
            for (int i = first_new; i < ns; i++)
                se->h[se->nh++] = seg[i];
        }
    }
    fclose(f);

    /* the library */
    struct kv_sim_opts o;
    memset(&o, 0, sizeof o);
    o.policies = (1u << KV_SIM_NPOLICIES) - 1;
    o.capacity_tokens = cap;
    o.bytes_per_token = 2;
    o.block_size = B;
    o.ctx_sys = ctx_sys;
    o.salt_tenant = salt_tenant;
    o.max_sessions = 100;
    o.max_chunks = max_n;
    o.cost = (struct kv_sim_cost){ 1, 0.001, 100, 100, 0 };
    struct kv_err e;
    struct kv_sim *s = NULL;
    struct kv_sim_reader *rd = NULL;
    struct kv_sim_req req;
    FILE *in = fmemopen(buf, bn, "r");
    int bad = 0, got;
    if (kv_sim_create(&s, &o, &e) < 0 ||
        kv_sim_reader_open(&rd, in, "mem", &e) < 0) {
        printf("# %s\n", e.msg);
        return 1;
    }
    while ((got = kv_sim_reader_next(rd, &req, &e)) > 0)
        if (kv_sim_feed(s, &req, &e) < 0) {
            printf("# %s\n", e.msg);
            return 1;
        }
    if (got < 0) {
        printf("# %s\n", e.msg);
        return 1;
    }
    struct kv_sim_stats st;
    kv_sim_get(s, KV_SIM_PREFIX, &st);
    if ((long)st.hit_tokens != rp->hit || (long)st.evictions != rp->evict ||
        (long)st.stored_tokens != rp->stored ||
        (long)st.prompt_tokens != prompt ||
        (long)st.chunk_hits != p_chunk_hits || (long)st.chunk_slots != slots) {
        printf("# trial %d B=%d cap=%d prefix: hit %llu/%ld evict %llu/%ld "
               "stored %llu/%ld chunk hits %llu/%ld\n", trial, B, cap,
               (unsigned long long)st.hit_tokens, rp->hit,
               (unsigned long long)st.evictions, rp->evict,
               (unsigned long long)st.stored_tokens, rp->stored,
               (unsigned long long)st.chunk_hits, p_chunk_hits);
        bad++;
    }
    static const int pol[3] = { KV_SIM_CHUNK, KV_SIM_CHUNK_LFU, KV_SIM_ORACLE };
    for (int v = 0; v < 3; v++) {
        kv_sim_get(s, pol[v], &st);
        if ((long)st.hit_tokens != rc[v]->hit ||
            (long)st.evictions != rc[v]->evict ||
            (long)st.stored_tokens != rc[v]->stored ||
            (long)st.chunk_hits != rc[v]->chunk_hits ||
            (long)st.sys_hits != rc[v]->sys_hits) {
            printf("# trial %d %s ctx_sys=%d sessions=%d cap=%d max=%d: hit "
                   "%llu/%ld sys hits %llu/%ld evict %llu/%ld stored %llu/%ld "
                   "chunk hits %llu/%ld\n",
                   trial, kv_sim_policy_name(pol[v]), ctx_sys, with_sessions,
                   cap, max_n, (unsigned long long)st.hit_tokens, rc[v]->hit,
                   (unsigned long long)st.sys_hits, rc[v]->sys_hits,
                   (unsigned long long)st.evictions, rc[v]->evict,
                   (unsigned long long)st.stored_tokens, rc[v]->stored,
                   (unsigned long long)st.chunk_hits, rc[v]->chunk_hits);
            bad++;
        }
    }
    /* nothing above the oracle */
    struct kv_sim_stats orc;
    kv_sim_get(s, KV_SIM_ORACLE, &orc);
    for (int p = 0; p < KV_SIM_NPOLICIES; p++) {
        kv_sim_get(s, p, &st);
        if (st.hit_tokens > orc.hit_tokens || st.chunk_hits > orc.chunk_hits) {
            printf("# trial %d: %s above the oracle\n", trial,
                   kv_sim_policy_name(p));
            bad++;
        }
    }
    /* radix: within the budget; with room for everything, the reference */
    kv_sim_get(s, KV_SIM_PREFIX_RADIX, &st);
    if (st.stored_tokens - st.evicted_tokens > (uint64_t)cap) {
        printf("# trial %d radix holds %llu tokens, budget %d\n", trial,
               (unsigned long long)(st.stored_tokens - st.evicted_tokens), cap);
        bad++;
    }
    kv_sim_free(s);
    kv_sim_reader_free(rd);
    s = NULL;
    rd = NULL;
    o.capacity_tokens = (int64_t)1 << 40;
    o.policies = (1u << KV_SIM_PREFIX_RADIX) | (1u << KV_SIM_PREFIX);
    rewind(in);
    if (kv_sim_create(&s, &o, &e) < 0 ||
        kv_sim_reader_open(&rd, in, "mem", &e) < 0)
        return 1;
    while ((got = kv_sim_reader_next(rd, &req, &e)) > 0)
        if (kv_sim_feed(s, &req, &e) < 0)
            return 1;
    struct kv_sim_stats pb;
    kv_sim_get(s, KV_SIM_PREFIX_RADIX, &st);
    kv_sim_get(s, KV_SIM_PREFIX, &pb);
    if ((long)st.hit_tokens != lcp_hit || st.hit_tokens < pb.hit_tokens ||
        st.hit_tokens - pb.hit_tokens >= (uint64_t)B * (uint64_t)n_req + 1) {
        printf("# trial %d radix unbounded: hit %llu, reference %ld, prefix "
               "%llu\n", trial, (unsigned long long)st.hit_tokens, lcp_hit,
               (unsigned long long)pb.hit_tokens);
        bad++;
    }
    for (int q2 = 0; q2 < n_req; q2++)
        free(seqs[q2]);
    free(seqs);
    free(seq_len);
    kv_sim_free(s);
    kv_sim_reader_free(rd);
    fclose(in);
    free(buf);
    rprefix_free(rp);
    free(rp);
    for (int v = 0; v < 3; v++) {
        rchunk_free(rc[v]);
        free(rc[v]);
    }
    free(ss);
    return bad;
}

/* Replay text through the given policies; stats of policy p into *st. */
static int replay(const char *text, const struct kv_sim_opts *o, int p,
                  struct kv_sim_stats *st, char *err, size_t n_err)
{
    struct kv_err e;
    struct kv_sim *s = NULL;
    struct kv_sim_reader *rd = NULL;
    struct kv_sim_req req;
    FILE *in = fmemopen((void *)text, strlen(text), "r");
    int got, rc = 0;
    if (kv_sim_create(&s, o, &e) < 0 ||
        kv_sim_reader_open(&rd, in, "t", &e) < 0) {
        rc = -1;
    } else {
        while ((got = kv_sim_reader_next(rd, &req, &e)) > 0)
            if (kv_sim_feed(s, &req, &e) < 0) {
                got = -1;
                break;
            }
        if (got < 0)
            rc = -1;
        else
            kv_sim_get(s, p, st);
    }
    if (rc < 0 && err)
        snprintf(err, n_err, "%s", e.msg);
    kv_sim_free(s);
    kv_sim_reader_free(rd);
    fclose(in);
    return rc;
}

static struct kv_sim_opts base_opts(int64_t cap, int64_t B)
{
    struct kv_sim_opts o;
    memset(&o, 0, sizeof o);
    o.policies = (1u << KV_SIM_NPOLICIES) - 1;
    o.capacity_tokens = cap;
    o.bytes_per_token = 4;
    o.block_size = B;
    o.ctx_sys = 1;
    o.max_sessions = 1000;
    o.cost = (struct kv_sim_cost){ 80, 0.0035, 1000, 200, 0 };
    return o;
}

static char *gen_text(const struct kv_sim_gen_opts *g, size_t *n)
{
    char *buf = NULL;
    struct kv_err e;
    FILE *f = open_memstream(&buf, n);
    if (kv_sim_gen(f, g, &e) < 0)
        printf("# gen: %s\n", e.msg);
    fclose(f);
    return buf;
}

static struct kv_sim_gen_opts gen_opts(void)
{
    struct kv_sim_gen_opts g;
    memset(&g, 0, sizeof g);
    g.seed = 7;
    g.requests = 3000;
    g.docs = 500;
    g.topk = 5;
    g.zipf = 1.0;
    g.sys_variants = 1;
    g.tenants = 1;
    g.turns = 1;
    g.conversations = 8;
    g.rate = 2;
    g.doc_len = (struct kv_sim_dist){ KV_SIM_DIST_UNIFORM, 100, 700 };
    g.sys_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 600, 600 };
    g.q_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 40, 40 };
    g.out_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 64, 64 };
    return g;
}

/* Set why (printf-style); -1. */
static int why_set(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- warm-up ----------------------------------------------------------------
 * A replay with --warmup W counts what a full replay counts minus what it had
 * counted after W requests, for every additive counter of every policy; run
 * with the design's flow (an entry limit, every chunk copied and rotated). */
static int check_warmup(uint64_t seed, char *why, size_t n_why)
{
    struct kv_sim_gen_opts g;
    memset(&g, 0, sizeof g);
    g.seed = seed;
    g.requests = 400;
    g.docs = 40;
    g.topk = 4;
    g.zipf = 0.5;
    g.fresh = 0.3;
    g.sys_variants = 3;
    g.tenants = 1;
    g.turns = 1;
    g.conversations = 1;
    g.doc_len = (struct kv_sim_dist){ KV_SIM_DIST_UNIFORM, 20, 300 };
    g.sys_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 100, 100 };
    g.q_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 40, 40 };
    g.out_len = (struct kv_sim_dist){ KV_SIM_DIST_UNIFORM, 1, 50 };
    char *buf = NULL;
    size_t bn = 0;
    struct kv_err e;
    FILE *f = open_memstream(&buf, &bn);
    if (kv_sim_gen(f, &g, &e) < 0) {
        fclose(f);
        free(buf);
        return why_set(why, n_why, "gen: %s", e.msg);
    }
    fclose(f);
    struct kv_sim_opts o;
    memset(&o, 0, sizeof o);
    o.policies = (1u << KV_SIM_NPOLICIES) - 1;
    o.capacity_tokens = 3000;
    o.bytes_per_token = 1000;
    o.block_size = 16;
    o.max_sessions = 10;
    o.max_chunks = 12;
    o.rotate_always = 1;
    o.miss_copy = 1;
    o.cost = (struct kv_sim_cost){ 2, 0.001, 10, 5, 7 };
    const uint64_t W = 150;
    struct kv_sim_stats at_w[KV_SIM_NPOLICIES], end[KV_SIM_NPOLICIES],
                        warm[KV_SIM_NPOLICIES];
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        struct kv_sim *s = NULL;
        struct kv_sim_reader *rd = NULL;
        struct kv_sim_req req;
        FILE *in = fmemopen(buf, bn, "r");
        o.warmup = pass ? W : 0;
        uint64_t n = 0;
        int got = -1;
        if (kv_sim_create(&s, &o, &e) == 0 &&
            kv_sim_reader_open(&rd, in, "t", &e) == 0) {
            while ((got = kv_sim_reader_next(rd, &req, &e)) > 0) {
                if (kv_sim_feed(s, &req, &e) < 0) {
                    got = -1;
                    break;
                }
                if (++n == W && !pass)
                    for (int p = 0; p < KV_SIM_NPOLICIES; p++)
                        kv_sim_get(s, p, &at_w[p]);
            }
            for (int p = 0; p < KV_SIM_NPOLICIES; p++)
                kv_sim_get(s, p, pass ? &warm[p] : &end[p]);
        }
        if (got < 0)
            rc = why_set(why, n_why, "replay: %s", e.msg);
        kv_sim_free(s);
        kv_sim_reader_free(rd);
        fclose(in);
    }
    free(buf);
    for (int p = 0; p < KV_SIM_NPOLICIES && !rc; p++) {
#define SAME(field) \
        if (warm[p].field != end[p].field - at_w[p].field) \
            rc = why_set(why, n_why, "%s " #field ": %llu, not %llu", \
                          kv_sim_policy_name(p), \
                          (unsigned long long)warm[p].field, \
                          (unsigned long long)(end[p].field - \
                                               at_w[p].field));
        SAME(requests) SAME(prompt_tokens) SAME(hit_tokens)
        SAME(prefill_tokens) SAME(chunk_slots) SAME(chunk_hits)
        SAME(sys_slots) SAME(sys_hits) SAME(loaded_tokens)
        SAME(stored_tokens) SAME(rotated_tokens) SAME(evictions)
#undef SAME
        double a = warm[p].ttft_sum_us, b = end[p].ttft_sum_us -
                   at_w[p].ttft_sum_us;
        double c = warm[p].e2e_sum_us, d = end[p].e2e_sum_us -
                   at_w[p].e2e_sum_us;
        if (!rc && (fabs(a - b) > 1e-9 * b || fabs(c - d) > 1e-9 * d))
            rc = why_set(why, n_why, "%s: TTFT sum %g, not %g; end to end "
                          "%g, not %g", kv_sim_policy_name(p), a, b, c, d);
    }
    /* every system prompt and chunk is copied and rotated, hit or miss:
     * loaded = rotated = prompt - questions (40 a request) */
    if (!rc) {
        const struct kv_sim_stats *c = &end[KV_SIM_CHUNK];
        uint64_t want = c->prompt_tokens - 40 * c->requests;
        if (c->loaded_tokens != want || c->rotated_tokens != want)
            rc = why_set(why, n_why, "chunk loaded %llu, rotated %llu, not "
                          "%llu", (unsigned long long)c->loaded_tokens,
                          (unsigned long long)c->rotated_tokens,
                          (unsigned long long)want);
        if (!rc && end[KV_SIM_CHUNK].entries_max > 12)
            rc = why_set(why, n_why, "%llu entries resident, limit 12",
                          (unsigned long long)c->entries_max);
    }
    return rc;
}

int main(void)
{
    struct kv_sim_stats st;
    char err[512];

    /* warm-up: counted = full - the first W */
    {
        int bad = 0;
        char why[512] = "";
        for (uint64_t seed = 1; seed <= 5; seed++)
            bad += check_warmup(seed, why, sizeof why) != 0;
        TAP_OK(bad == 0, "--warmup: every counter of every policy is the "
               "full replay's minus the warm-up's, 5 traces; the design's "
               "flow copies and rotates every segment (%s)",
               bad ? why : "ok");
    }

    /* random traces against the reference */
    {
        int bad = 0;
        for (int t = 0; t < 300; t++)
            bad += check_random(t) != 0;
        TAP_OK(bad == 0, "300 random traces: prefix, chunk, chunk-lfu and "
               "oracle match the reference model, prefix-radix the longest "
               "common prefix (%d differ)", bad);
    }

    /* the spec's toy trace: B = 4, token hit rate 12/32 */
    {
        struct kv_sim_opts o = base_opts(1000, 4);
        const char *t = "0 - - A:8 2 1\n1 - - A:8 3 1\n2 - - A:8 0 1\n"
                        "3 - - X:3 0 1\n";
        int rc = replay(t, &o, KV_SIM_PREFIX, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 12 && st.prompt_tokens == 32,
               "toy trace: prefix hits 12 of 32 tokens (got %llu of %llu)",
               (unsigned long long)st.hit_tokens,
               (unsigned long long)st.prompt_tokens);
        const char *t2 = "0 - - 1/2/3/4/5/6/7/8 2 1\n1 - - 1/2/3/4/5/6/7/8 3 1\n"
                         "2 - - 1/2/3/4/5/6/7/8 0 1\n3 - - 9/9/9 0 1\n";
        rc = replay(t2, &o, KV_SIM_PREFIX, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 12,
               "toy trace with token ids: the same");
        rc = replay(t, &o, KV_SIM_PREFIX_RADIX, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 15,
               "toy trace: radix hits 8 + 7 tokens (got %llu)",
               (unsigned long long)st.hit_tokens);
    }

    /* a pool of 2 blocks: LRU free queue with tail-first freeing */
    {
        struct kv_sim_opts o = base_opts(8, 4);
        /* A:8 fills both blocks; B:4 then reuses the block freed last of
         * A's, i.e. A's tail block went to the queue first and is evicted
         * first: A's first block survives. */
        const char *t = "0 - - A:8 0 1\n1 - - B:4 0 1\n2 - - A:8 1 1\n";
        int rc = replay(t, &o, KV_SIM_PREFIX, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 4 && st.evictions == 2,
               "tail-first freeing keeps the head block (hit %llu, evictions "
               "%llu)", (unsigned long long)st.hit_tokens,
               (unsigned long long)st.evictions);
    }

    /* A pool of 3 blocks of 4, worked by hand.  0: A:4 takes block 0 (hA);
     * queue [0].  1: C:8 takes the never used blocks 1, 2 (hC0, hC1), frees
     * them tail first; queue [0 2 1].  2: A:4 + 4 question tokens hits hA
     * (at most (8-1)/4 = 1 block): block 0 leaves the queue, so the new
     * block is the head after it, 2, and hC1 is evicted; queue [1 2 0].
     * 3: C:8 hits hC0 (block 1), its second block evicts the head, 2 (the
     * question block of request 2); queue [0 2 1].  4: A:4 + 4 hits hA
     * again (it survived request 2 because the hit took it out of the
     * queue) and evicts 2 (hC1).  Hits 0+0+4+4+4 = 12 of 36 prompt tokens,
     * 3 evictions, 6 full blocks stored. */
    {
        struct kv_sim_opts o = base_opts(12, 4);
        const char *t = "0 - - A:4 0 1\n1 - - C:8 0 1\n2 - - A:4 4 1\n"
                        "3 - - C:8 0 1\n4 - - A:4 4 1\n";
        int rc = replay(t, &o, KV_SIM_PREFIX, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 12 && st.prompt_tokens == 36 &&
               st.evictions == 3 && st.stored_tokens == 24,
               "a hit block leaves the free queue, the head is evicted, its "
               "hash is forgotten (hit %llu of %llu, evictions %llu, stored "
               "%llu)", (unsigned long long)st.hit_tokens,
               (unsigned long long)st.prompt_tokens,
               (unsigned long long)st.evictions,
               (unsigned long long)st.stored_tokens);
        /* An evicted hash misses: pool of 2 blocks, A:8 fills both, D:8
         * evicts both (head first), A:8 again hits nothing. */
        o = base_opts(8, 4);
        rc = replay("0 - - A:8 0 1\n1 - - D:8 0 1\n2 - - A:8 0 1\n", &o,
                    KV_SIM_PREFIX, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 0 && st.evictions == 4,
               "evicted blocks lose their hash (hit %llu, evictions %llu)",
               (unsigned long long)st.hit_tokens,
               (unsigned long long)st.evictions);
    }

    /* The chunk cache worked by hand: 30 tokens, LRU by tokens, chunks
     * keyed behind s.  0: s, a, b stored (26).  1: s, b, a all hit (26 of
     * 28), a and b at new positions (16 rotated).  2: s hits, c (8) needs
     * room: the LRU entry is b (order a b s, then s is used) -> 1 eviction.
     * 3: s, a hit; b misses and evicts c.  Hits 0+26+10+18 = 54 of 104,
     * chunk hits 0+2+0+1 of 7.  The oracle: 0+26+10+26 = 62, chunk hits
     * 4 = 7 slots - 3 distinct. */
    {
        struct kv_sim_opts o = base_opts(30, 4);
        const char *t = "0 - s:10 a:8,b:8 2 1\n1 - s:10 b:8,a:8 2 1\n"
                        "2 - s:10 c:8 2 1\n3 - s:10 a:8,b:8 2 1\n";
        int rc = replay(t, &o, KV_SIM_CHUNK, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 54 && st.prompt_tokens == 104 &&
               st.chunk_hits == 3 && st.chunk_slots == 7 &&
               st.evictions == 2 && st.rotated_tokens == 16 &&
               st.loaded_tokens == 54,
               "chunk LRU by hand (hit %llu of %llu, chunk hits %llu of "
               "%llu, evictions %llu, rotated %llu)",
               (unsigned long long)st.hit_tokens,
               (unsigned long long)st.prompt_tokens,
               (unsigned long long)st.chunk_hits,
               (unsigned long long)st.chunk_slots,
               (unsigned long long)st.evictions,
               (unsigned long long)st.rotated_tokens);
        rc = replay(t, &o, KV_SIM_ORACLE, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 62 && st.chunk_hits == 4 &&
               st.evictions == 0,
               "oracle by hand (hit %llu, chunk hits %llu)",
               (unsigned long long)st.hit_tokens,
               (unsigned long long)st.chunk_hits);

        /* The TTFT formula of the man page, A*computed + B*pairs +
         * loaded/bw + rotated/2/bw_rope, with A = B = 1 us, 1000 bytes per
         * token and 1 GB/s (1 byte per ns).  Request 0 computes all 28
         * tokens: s attends causally (55 pairs), a and b each to s and
         * themselves (80 + 36 = 116 each), the question to all before it
         * (2*26 + 3 = 55): 28 + 342 = 370 us.  Request 1 computes the
         * question (2 + 55), loads 26 tokens (26000 bytes: 26 us) and
         * re-rotates the K half of 16 (8000 bytes: 8 us): 91 us. */
        o.bytes_per_token = 1000;
        o.cost = (struct kv_sim_cost){ 1, 1, 1, 1, 0 };
        rc = replay("0 - s:10 a:8,b:8 2 1\n1 - s:10 b:8,a:8 2 1\n", &o,
                    KV_SIM_CHUNK, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.ttft_sum_us > 461 - 1e-6 &&
               st.ttft_sum_us < 461 + 1e-6 && st.ttft_max_us > 370 - 1e-6 &&
               st.ttft_max_us < 370 + 1e-6,
               "chunk TTFT by hand: 370 + 91 us (got %.6f, max %.6f)",
               st.ttft_sum_us, st.ttft_max_us);
        /* prefix, B = 4: request 1 hits 2 blocks of s (8 tokens: b differs
         * from a at token 10), computes 20 tokens at positions 8..27:
         * 20 + (20*8 + 20*21/2) = 20 + 370 = 390 us; request 0 computes
         * 28 + 28*29/2 = 434 us. */
        rc = replay("0 - s:10 a:8,b:8 2 1\n1 - s:10 b:8,a:8 2 1\n", &o,
                    KV_SIM_PREFIX, &st, err, sizeof err);
        TAP_OK(rc == 0 && st.hit_tokens == 8 &&
               st.ttft_sum_us > 824 - 1e-6 && st.ttft_sum_us < 824 + 1e-6,
               "prefix TTFT by hand: 434 + 390 us (hit %llu, got %.6f)",
               (unsigned long long)st.hit_tokens, st.ttft_sum_us);
    }

    /* Equal TTFTs: every quantile is that TTFT, not its bucket's middle
     * (a p99 below the mean would puzzle anyone). */
    {
        struct kv_sim_opts o = base_opts(1000, 16);
        int rc = replay("0 - s:600 a:512,b:512 40 1\n"
                        "9 - s:600 c:512,d:512 40 1\n", &o, KV_SIM_NONE,
                        &st, err, sizeof err);
        double mean = st.ttft_sum_us / 2, p50 = kv_sim_ttft_quantile(&st, 0.5),
               p99 = kv_sim_ttft_quantile(&st, 0.99),
               q99 = kv_sim_queued_quantile(&st, 0.99);
        TAP_OK(rc == 0 && p50 == mean && p99 == mean && q99 == mean,
               "equal TTFTs: p50 = p99 = mean (%.3f %.3f %.3f %.3f us)", p50,
               p99, mean, q99);
    }

    /* generated traces: invariants */
    {
        struct kv_sim_gen_opts g = gen_opts();
        size_t n1, n2;
        char *a = gen_text(&g, &n1), *b = gen_text(&g, &n2);
        TAP_OK(n1 == n2 && !memcmp(a, b, n1), "same seed, same trace bytes");
        g.seed = 8;
        char *c = gen_text(&g, &n2);
        TAP_OK(n1 != n2 || memcmp(a, c, n1), "another seed, another trace");
        free(b);
        free(c);
        int lines = 0;
        for (size_t i = 0; i < n1; i++)
            lines += a[i] == '\n';
        TAP_OK(lines == 3000, "3000 lines (%d)", lines);

        /* oracle chunk hit rate = 1 - distinct/total */
        int distinct = 0, total = 0;
        static char seen[500];
        for (char *p = a; *p;) {
            char *nl = strchr(p, '\n');
            char f4[8192];
            if (sscanf(p, "%*s %*s %*s %8191s", f4) == 1)
                for (char *tok = strtok(f4, ","); tok; tok = strtok(NULL, ",")) {
                    int d = atoi(tok + 1);
                    total++;
                    if (!seen[d]) {
                        seen[d] = 1;
                        distinct++;
                    }
                }
            p = nl + 1;
        }
        struct kv_sim_opts o = base_opts(20000, 16);
        struct kv_sim_stats orc, st2;
        replay(a, &o, KV_SIM_ORACLE, &orc, err, sizeof err);
        TAP_OK(orc.chunk_slots == (uint64_t)total &&
               orc.chunk_hits == (uint64_t)(total - distinct),
               "oracle chunk hits = total - distinct (%llu = %d - %d)",
               (unsigned long long)orc.chunk_hits, total, distinct);
        int above = 0;
        for (int p = 0; p < KV_SIM_NPOLICIES; p++) {
            replay(a, &o, p, &st2, err, sizeof err);
            above += st2.hit_tokens > orc.hit_tokens ||
                     st2.chunk_hits > orc.chunk_hits;
        }
        TAP_OK(!above, "no policy hits more than the oracle");
        struct kv_sim_stats x, y;
        replay(a, &o, KV_SIM_CHUNK, &x, err, sizeof err);
        replay(a, &o, KV_SIM_CHUNK, &y, err, sizeof err);
        TAP_OK(!memcmp(&x, &y, sizeof x), "two replays give the same counters");
        free(a);
    }

    /* one system prompt, top-1, sorted: prefix and chunk agree; exactly when
     * lengths are multiples of the block and the cache holds everything */
    {
        struct kv_sim_gen_opts g = gen_opts();
        g.topk = 1;
        g.order = KV_SIM_ORDER_SORTED;
        g.doc_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 512, 512 };
        g.sys_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 608, 608 };
        size_t n;
        char *a = gen_text(&g, &n);
        struct kv_sim_opts o = base_opts(1 << 30, 16);
        struct kv_sim_stats p, c;
        replay(a, &o, KV_SIM_PREFIX, &p, err, sizeof err);
        replay(a, &o, KV_SIM_CHUNK, &c, err, sizeof err);
        TAP_OK(p.hit_tokens == c.hit_tokens && p.chunk_hits == c.chunk_hits,
               "top-1 sorted, block-aligned: prefix = chunk (%llu, %llu)",
               (unsigned long long)p.hit_tokens,
               (unsigned long long)c.hit_tokens);
        free(a);
        g.doc_len = (struct kv_sim_dist){ KV_SIM_DIST_UNIFORM, 100, 900 };
        g.sys_len = (struct kv_sim_dist){ KV_SIM_DIST_FIXED, 601, 601 };
        a = gen_text(&g, &n);
        replay(a, &o, KV_SIM_PREFIX, &p, err, sizeof err);
        replay(a, &o, KV_SIM_CHUNK, &c, err, sizeof err);
        TAP_OK(p.hit_tokens <= c.hit_tokens &&
               c.hit_tokens - p.hit_tokens < 16 * p.requests,
               "top-1 sorted, any lengths: they differ by less than a block "
               "per request (%llu, %llu)", (unsigned long long)p.hit_tokens,
               (unsigned long long)c.hit_tokens);
        free(a);
    }

    /* multi-turn conversations: the conversation's KV is reused */
    {
        struct kv_sim_gen_opts g = gen_opts();
        g.turns = 6;
        size_t n;
        char *a = gen_text(&g, &n);
        struct kv_sim_opts o = base_opts(1 << 30, 16);
        struct kv_sim_stats p, orc;
        replay(a, &o, KV_SIM_PREFIX, &p, err, sizeof err);
        replay(a, &o, KV_SIM_ORACLE, &orc, err, sizeof err);
        TAP_OK(strstr(a, " c0\n") != NULL && p.hit_tokens <= orc.hit_tokens &&
               (double)p.hit_tokens / (double)p.prompt_tokens > 0.5,
               "conversations: prefix reuses history (%.3f), oracle above "
               "(%.3f)", (double)p.hit_tokens / (double)p.prompt_tokens,
               (double)orc.hit_tokens / (double)orc.prompt_tokens);
        free(a);
    }

    /* reader errors name the line and field */
    {
        static const struct { const char *text, *want; } cases[] = {
            { "0 - - a:1 1 1\nx - - a:1 1 1\n", "line 2, field 1 (time)" },
            { "0 - - a:-3 1 1\n", "field 4 (chunks): negative length" },
            { "0 - s:-1 a:3 1 1\n", "field 3 (sys): negative length" },
            { "0 - - a:3 -1 1\n", "field 5 (question): negative length" },
            { "0 - - a:3 1 x\n", "field 6 (output)" },
            { "0 - - a:3 1\n", "line 1: 5 fields" },
            { "0 - - a:3,,b:4 1 1\n", "empty chunk" },
            { "0 - - a:0 1 1\n", "length must be at least 1" },
            { "1 - - a:3 1 1\n0 - - a:3 1 1\n", "time goes backwards" },
            { "0 - - 1/2/ 1 1\n", "trailing '/'" },
            { "# c\n\n0 - - a:3 1 1 s x\n", "line 3: more than 7 fields" },
            { "{\"chunks\":[{\"id\":\"a\",\"len\":-2}],\"q_len\":1,"
              "\"out_len\":1}\n", "key 'chunks': negative length" },
            { "{\"chunks\":[],\"q_len\":1}\n", "missing key 'out_len'" },
            { "{\"chunks\":[{\"len\":3}],\"q_len\":1,\"out_len\":1}\n",
              "missing id" },
            { "{\"t\":1,\"chunks\":[],\"q_len\":1,\"out_len\":1}\n"
              "{\"t\":0,\"chunks\":[],\"q_len\":1,\"out_len\":1}\n",
              "line 2, key 't': time goes backwards" },
            { "{\"chunks\":[],\"q_len\":1,\"out_len\":1} x\n",
              "text after the JSON object" },
            { "{\"chunks\":[,],\"q_len\":1,\"out_len\":1}\n",
              "key 'chunks'" },
            { "0 - - a:3 1 1\n{\"chunks\":[],\"q_len\":1 \"out_len\":1}\n",
              "line 2, column 24: malformed JSON object" },
        };
        struct kv_sim_opts o = base_opts(1000, 16);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            err[0] = 0;
            int rc = replay(cases[i].text, &o, KV_SIM_CHUNK, &st, err,
                            sizeof err);
            TAP_OK(rc < 0 && strstr(err, cases[i].want),
                   "bad trace %zu: '%s'", i, err);
        }
        int rc = replay("0 - - a:30 1 1\n0 - - b:3000 1 1\n", &o,
                        KV_SIM_CHUNK, &st, err, sizeof err);
        TAP_OK(rc < 0 && strstr(err, "line 2") &&
               strstr(err, "does not fit the capacity"),
               "a chunk larger than the budget: '%s'", err);
    }

    /* JSON lines and text lines name the same content */
    {
        struct kv_sim_opts o = base_opts(100000, 16);
        struct kv_sim_stats a, b;
        const char *js =
            "{\"t\":0,\"tenant\":\"a\",\"sys\":{\"id\":\"s1\",\"len\":600},"
            "\"chunks\":[{\"id\":\"d9\",\"len\":480},{\"id\":\"d2\",\"len\":512}],"
            "\"q_len\":40,\"out_len\":64}\n"
            "{\"t\":1,\"tenant\":\"a\",\"sys\":{\"id\":\"s1\",\"len\":600},"
            "\"chunks\":[{\"id\":\"d2\",\"len\":512},{\"tokens\":[5,6,7]}],"
            "\"q_len\":40,\"out_len\":64,\"session\":\"c1\",\"x\":[true,null]}\n"
            "{\"t\":2,\"chunks\":[{\"id\":\"d9\",\"len\":480}],\"q_len\":4,"
            "\"out_len\":6,\"session\":\"c1\"}\n";
        const char *tx = "0 a s1:600 d9:480,d2:512 40 64\n"
                         "1 a s1:600 d2:512,5/6/7 40 64 c1\n"
                         "2 - - d9:480 4 6 c1\n";
        int same = 1;
        for (int p = 0; p < KV_SIM_NPOLICIES; p++) {
            int r1 = replay(js, &o, p, &a, err, sizeof err);
            int r2 = replay(tx, &o, p, &b, err, sizeof err);
            same &= r1 == 0 && r2 == 0 && !memcmp(&a, &b, sizeof a);
        }
        TAP_OK(same, "JSON lines replay like text lines");
    }

    /* distributions and policy lists */
    {
        struct kv_sim_dist d;
        struct kv_err e;
        TAP_OK(kv_sim_dist_parse("512", "--doc-len", 1, &d, &e) == 0 &&
               d.kind == KV_SIM_DIST_FIXED && d.a == 512, "dist N");
        TAP_OK(kv_sim_dist_parse("100-900", "--doc-len", 1, &d, &e) == 0 &&
               d.kind == KV_SIM_DIST_UNIFORM && d.b == 900, "dist A-B");
        TAP_OK(kv_sim_dist_parse("400~0.5", "--doc-len", 1, &d, &e) == 0 &&
               d.kind == KV_SIM_DIST_LOGNORMAL, "dist M~S");
        TAP_OK(kv_sim_dist_parse("-5", "--doc-len", 1, &d, &e) < 0 &&
               kv_sim_dist_parse("0", "--doc-len", 1, &d, &e) < 0 &&
               kv_sim_dist_parse("9-3", "--doc-len", 1, &d, &e) < 0 &&
               kv_sim_dist_parse("5x", "--doc-len", 1, &d, &e) < 0,
               "bad distributions refused");
        unsigned m;
        TAP_OK(kv_sim_policy_parse("none,prefix,chunk,oracle", &m, &e) == 0 &&
               m == 0x2bu, "policy list");
        TAP_OK(kv_sim_policy_parse("prefix,lru", &m, &e) < 0 &&
               strstr(e.msg, "'lru'"), "unknown policy: %s", e.msg);
        TAP_OK(kv_sim_policy_parse("chunk,chunk", &m, &e) < 0,
               "duplicate policy refused");
    }

    /* split output -> trace */
    {
        const char *in = "sys 0 5 aa\nchunk 5 7 bb\nchunk 12 3 cc\n"
                         "question 15 4 dd\n"
                         "sys 0 0\nquestion 0 9\n"
                         "chunk 0 2 bb\nquestion 2 1 gg\n";
        FILE *f = fmemopen((void *)in, strlen(in), "r");
        char *out = NULL;
        size_t n = 0;
        struct kv_err e;
        int rc = kv_sim_from_split(f, "x", 2, "-", 16, &out, &n, &e);
        fclose(f);
        const char *want = "0.000000 - aa:5 bb:7,cc:3 4 16\n"
                           "0.500000 - - - 9 16\n"
                           "1.000000 - - bb:2 1 16\n";
        TAP_OK(rc == 0 && n == strlen(want) && !memcmp(out, want, n),
               "from-split: %.*s", (int)n, out ? out : "");
        free(out);
        const char *bad = "sys 0 5 aa\nchunk 5 7 bb\nsys 0 5 aa\n";
        f = fmemopen((void *)bad, strlen(bad), "r");
        out = NULL;
        rc = kv_sim_from_split(f, "x", 2, "-", 16, &out, &n, &e);
        fclose(f);
        TAP_OK(rc < 0 && strstr(e.msg, "line 3") && !out,
               "from-split: prompt without a question: %s", e.msg);
        const char *nokey = "sys 0 5\nquestion 5 3\n";
        f = fmemopen((void *)nokey, strlen(nokey), "r");
        rc = kv_sim_from_split(f, "x", 2, "-", 16, &out, &n, &e);
        fclose(f);
        TAP_OK(rc < 0 && strstr(e.msg, "line 1") && strstr(e.msg, "--shape"),
               "from-split: a sys line without a key: %s", e.msg);
    }
    return tap_done();
}
