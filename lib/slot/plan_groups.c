/* plan_groups.c - the KV-cache groups of a hybrid model in the scheduler,
 * as vLLM 0.33.0's KV cache coordinator and single-type managers run them
 * (plan.h, "KV-cache groups"): each group's freeing rule, admission cap,
 * which of its blocks the prefix cache keeps, and the lookup all groups
 * agree on. */
#include "slot/plan_impl.h"

/* The groups into s: kinds, windows and the lookup groups (groups of one
 * spec, in order of first appearance, full attention first).  0 or -1. */
int plan_groups_init(struct kv_plan *s, const struct kv_plan_config *c,
                     struct kv_err *e)
{
    size_t ng = c->n_groups ? c->n_groups : 1, k = 0;
    unsigned char *done;

    s->ng = ng;
    s->gkind = calloc(ng, sizeof *s->gkind);
    s->gwin = calloc(ng, sizeof *s->gwin);
    s->sg_gid = calloc(ng, sizeof *s->sg_gid);
    s->sg_start = calloc(ng + 1, sizeof *s->sg_start);
    s->sg_hl = calloc(ng, sizeof *s->sg_hl);
    s->gskip = calloc(ng, 1);
    s->gwindowed = calloc(ng, sizeof *s->gwindowed);
    done = calloc(ng, 1);
    if (!s->gkind || !s->gwin || !s->sg_gid || !s->sg_start || !s->sg_hl ||
        !s->gskip || !s->gwindowed || !done) {
        free(done);
        return kv_err_set(e, "out of memory for the KV-cache groups");
    }
    for (size_t g = 0; c->n_groups && g < ng; g++) {
        s->gkind[g] = c->groups[g].kind;
        s->gwin[g] = c->groups[g].window;
        s->gskip[g] = c->skip_tables ? c->skip_tables[g] : 0;
        if (s->gkind[g] == KV_PLAN_GROUP_MAMBA && !c->groups[g].align)
            s->mbs = c->groups[g].block_size;
        if (s->gkind[g] != KV_PLAN_GROUP_FULL)
            s->gwindowed[s->n_windowed++] = g;
    }
    for (size_t g = 0; c->n_groups && g < ng && !s->gbs; g++)
        if (s->gkind[g] != KV_PLAN_GROUP_MAMBA && c->groups[g].block_size &&
            c->groups[g].block_size != s->bs) {
            /* attention groups of different block sizes: each group
             * counts its own blocks */
            s->gbs = calloc(ng, sizeof *s->gbs);
            s->gnb = calloc(s->n * ng, sizeof *s->gnb);
            if (!s->gbs || !s->gnb) {
                free(done);
                return kv_err_set(e, "out of memory for the KV-cache groups");
            }
            for (size_t h = 0; h < ng; h++)
                s->gbs[h] = c->groups[h].block_size ? c->groups[h].block_size
                                                    : s->bs;
        }
    s->inflight_max = c->max_num_batched_tokens * (c->async_scheduling ? 2 : 1);
    /* full attention first (a stable sort of vLLM's attention groups) */
    for (int pass = 0; pass < 2; pass++)
        for (size_t g = 0; g < ng; g++) {
            if (done[g] || (pass == 0) != (s->gkind[g] == KV_PLAN_GROUP_FULL))
                continue;
            s->sg_start[s->n_sg] = k;
            for (size_t h = g; h < ng; h++)
                if (!done[h] && s->gkind[h] == s->gkind[g] &&
                    s->gwin[h] == s->gwin[g] &&
                    plan_gbs(s, h) == plan_gbs(s, g) &&
                    (!c->n_groups || c->groups[h].spec == c->groups[g].spec)) {
                    done[h] = 1;
                    s->sg_gid[k++] = h;
                }
            s->n_sg++;
        }
    s->sg_start[s->n_sg] = k;
    free(done);
    return plan_mamba_init(s, c, e);
}

int64_t plan_gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* With prefix caching over groups, the hash block (the GCD of the groups'
 * block sizes) and the hit alignment (their LCM) into s, as vLLM's
 * resolve_kv_cache_block_sizes gives them; the block size otherwise.  A
 * chunked local group must have blocks of the LCM (vLLM asserts it at
 * the first lookup).  0 or -1. */
int plan_hash_geometry(struct kv_plan *s, const struct kv_plan_config *c,
                       struct kv_err *e)
{
    s->hbs = s->lcm = s->bs;
    if (c->prefix_caching && c->n_groups) {
        s->hbs = 0;             /* gcd(0, x) = x */
        s->lcm = 1;
    }
    for (size_t g = 0; c->prefix_caching && g < c->n_groups; g++) {
        int64_t bs = c->groups[g].block_size ? c->groups[g].block_size : s->bs;
        int64_t d = plan_gcd(s->lcm, bs);
        if (s->lcm / d > INT64_MAX / bs)
            return kv_err_set(e, "the LCM of the groups' block sizes "
                              "overflows");
        s->hbs = plan_gcd(s->hbs, bs);
        s->lcm = s->lcm / d * bs;
    }
    for (size_t g = 0; c->prefix_caching && g < c->n_groups; g++)
        if (c->groups[g].kind == KV_PLAN_GROUP_CHUNKED &&
            (c->groups[g].block_size ? c->groups[g].block_size : s->bs) !=
                s->lcm)
            return kv_err_set(e, "group %zu: KV cache groups with different "
                              "block sizes are not compatible with chunked "
                              "local attention now", g);
    s->hcols = (size_t)cdiv(s->mml, s->hbs);
    return 0;
}

/* The blocks group g counts a waiting request at most (vLLM's
 * max_admission_blocks_per_request); INT64_MAX for full attention. */
int64_t plan_group_cap(const struct kv_plan *s, size_t g)
{
    int64_t t, bs = plan_gbs(s, g);
    switch (s->gkind[g]) {
    case KV_PLAN_GROUP_SLIDING:
        t = s->gwin[g] - 1 + s->inflight_max;
        return cdiv(t < s->mml ? t : s->mml, bs) + 1;
    case KV_PLAN_GROUP_CHUNKED:
        t = s->gwin[g] + s->inflight_max;
        return cdiv(t < s->mml ? t : s->mml, bs);
    default:
        return INT64_MAX;
    }
}

/* The tokens group g no longer reads once `computed` are computed
 * (get_num_skipped_tokens). */
int64_t plan_group_skipped(const struct kv_plan *s, size_t g, int64_t computed)
{
    int64_t w = s->gwin[g];
    switch (s->gkind[g]) {
    case KV_PLAN_GROUP_SLIDING:
        return computed - w + 1 > 0 ? computed - w + 1 : 0;
    case KV_PLAN_GROUP_CHUNKED:
        return computed / w * w;
    case KV_PLAN_GROUP_MAMBA:   /* the state of the last token alone */
        return computed > 1 ? computed - 1 : 0;
    default:
        return 0;
    }
}

/* vLLM's BlockPool.free_blocks over b[0..n) in eviction order (the null
 * block skipped): a block left without a reference goes to the free
 * queue's back when it holds a cached hash, else to its front, the first
 * of those frontmost.  Request i and group g name the caller. */
void plan_release(struct kv_plan *s, int64_t i, size_t g, const int64_t *b,
                  size_t n, int64_t step)
{
    (void)i;
    (void)g;
    (void)step;
    if (!s->apc) {
        for (size_t k = n; k-- > 0;)
            if (b[k])
                ring_push_front(&s->freeq, b[k]);
        return;
    }
    for (size_t k = 0; k < n; k++)
        if (b[k] && s->apc && --s->ref[b[k]] == 0 && s->hashed[b[k]])
            plan_free_push(s, b[k]);
    for (size_t k = n; k-- > 0;)
        if (b[k] && (!s->apc || (s->ref[b[k]] == 0 && !s->hashed[b[k]])))
            plan_free_put(s, b[k], 1);
}

/* A running request's blocks that left its window or chunk, freed, group
 * by group (remove_skipped_blocks), counting only the computed tokens
 * whose step was processed. */
void plan_remove_skipped(struct kv_plan *s, int64_t i)
{
    struct req *r = &s->reqs[i];
    int64_t done = (r->computed < s->mml ? r->computed : s->mml) - r->inflight;
    int64_t *out = s->ghits;          /* scratch */

    int64_t next = INT64_MAX, retired = r->mretired;

    if (done < 0)
        done = 0;
    if (done < r->rs_next)
        return;                 /* no window moved past a block since */
    for (size_t w = 0; w < s->n_windowed; w++) {
        size_t g = s->gwindowed[w];
        if (s->malign && s->gkind[g] == KV_PLAN_GROUP_MAMBA) {
            retired = plan_mamba_remove(s, i, g, done);
            next = done < next ? done : next;
            continue;
        }
        int64_t bs = plan_gbs(s, g), have = plan_gblocks(s, r, g);
        int64_t nb = plan_group_skipped(s, g, done) / bs, n = 0, at;
        int64_t *row = plan_row(s, i, g);
        /* the processed tokens at which block nb leaves the window */
        if (nb >= have)
            at = done + 1;
        else if (s->gkind[g] == KV_PLAN_GROUP_SLIDING)
            at = (nb + 1) * bs + s->gwin[g] - 1;
        else if (s->gkind[g] == KV_PLAN_GROUP_MAMBA)
            at = (nb + 1) * bs + 1;
        else
            at = cdiv((nb + 1) * bs, s->gwin[g]) * s->gwin[g];
        next = at < next ? at : next;
        if (nb > have)
            nb = have;
        for (int64_t j = nb - 1; j >= 0 && row[j] != 0; j--) {
            out[n++] = row[j];
            row[j] = 0;
        }
        if (n)
            plan_release(s, i, g, out, (size_t)n, s->step);
    }
    r->rs_next = next;
    r->mretired = retired;
}

/* Whether group g caches request i's block k when it fills (a sliding
 * window keeps only the runs a later lookup can reach: the run ending at
 * the lcm boundary at or below the prompt's last token, and the one
 * ending at the shared prefix's). */
int plan_cacheable(const struct kv_plan *s, int64_t i, size_t g, int64_t k)
{
    const struct req *r = &s->reqs[i];
    int64_t need, end, bs = plan_gbs(s, g);

    if (s->malign && s->gkind[g] == KV_PLAN_GROUP_MAMBA)
        return plan_mamba_cacheable(s, i, k);
    if (s->gkind[g] != KV_PLAN_GROUP_SLIDING)
        return 1;
    need = cdiv(s->gwin[g] - 1, bs);
    end = (r->prompt - 1) / s->lcm * s->lcm / bs;
    if (k >= end - need && k < end)
        return 1;
    end = r->spb / s->lcm * s->lcm / bs;
    return r->spb > 0 && k >= end - need && k < end;
}

/* Whether block k of request i is cached in every group of lookup group
 * sg; the blocks into s->ghits (vLLM's get_cached_block). */
static int hit_all(struct kv_plan *s, int64_t i, size_t sg, int64_t k)
{
    for (size_t q = s->sg_start[sg]; q < s->sg_start[sg + 1]; q++) {
        size_t g = s->sg_gid[q];
        int64_t b = plan_cached(s, i, g, k);
        if (b < 0)
            return 0;
        s->ghits[g * s->n_cols + (size_t)k] = b;
    }
    return 1;
}

/* Null entries [from, to) of lookup group sg's hit blocks. */
static void null_hits(struct kv_plan *s, size_t sg, int64_t from, int64_t to)
{
    for (size_t q = s->sg_start[sg]; q < s->sg_start[sg + 1]; q++)
        for (int64_t k = from; k < to; k++)
            s->ghits[s->sg_gid[q] * s->n_cols + (size_t)k] = 0;
}

/* One lookup group's longest hit of at most max_len tokens, in tokens (its
 * blocks into s->ghits, 0 for the null block), in the group's own block
 * size and aligned to lcm: full attention from the left; a sliding window
 * from the right, the first run of cdiv(window - 1, block_size) cached
 * blocks that ends on an lcm boundary (else the run from the start);
 * chunked local (its blocks of lcm tokens) from the start of the chunk
 * max_len is in. */
static int64_t find_group(struct kv_plan *s, int64_t i, size_t sg,
                          int64_t max_len)
{
    size_t g0 = s->sg_gid[s->sg_start[sg]];
    int64_t bs = plan_gbs(s, g0), maxb = max_len / bs, n = 0, w = s->gwin[g0];

    if (s->gkind[g0] == KV_PLAN_GROUP_SLIDING) {
        int64_t need = cdiv(w - 1, bs), run = 0;
        for (int64_t k = maxb - 1; k >= 0; k--) {
            if (!hit_all(s, i, sg, k)) {
                run = 0;
                continue;
            }
            if (run == 0 && (k + 1) * bs % s->lcm)
                continue;       /* a run must end on an lcm boundary */
            if (++run >= need) {
                null_hits(s, sg, 0, k);
                return (k + run) * bs;
            }
        }
        return run * bs / s->lcm * s->lcm;
    }
    if (s->gkind[g0] == KV_PLAN_GROUP_MAMBA) {
        /* align: the rightmost cached state on an lcm boundary */
        for (int64_t k = maxb - 1; k >= 0; k--)
            if (hit_all(s, i, sg, k) && (k + 1) * bs % s->lcm == 0) {
                null_hits(s, sg, 0, k);
                return (k + 1) * bs;
            }
        return 0;
    }
    if (s->gkind[g0] == KV_PLAN_GROUP_CHUNKED) {
        n = max_len > 0 ? max_len / w * w / bs : 0;
        null_hits(s, sg, 0, n);
    }
    while (n < maxb && hit_all(s, i, sg, n))
        n++;
    return n * bs / s->lcm * s->lcm;
}

/* A waiting request with nothing computed: the hit every group agrees on
 * (vLLM's find_longest_cache_hit: each lookup group in turn may shorten
 * the candidate, full attention looked up once; again until none does;
 * one round when there are two lookup groups and the first is full
 * attention; one group alone is looked up once).  The hit blocks of each
 * group into s->ghits, the request's shared-prefix boundary set (the
 * longest single lookup past the hit); returns the hit in tokens. */
int64_t plan_lookup(struct kv_plan *s, int64_t i)
{
    struct req *r = &s->reqs[i];
    int64_t max_len = num_tokens(r) - 1, hit = max_len, longest = 0;
    int full0 = s->gkind[s->sg_gid[0]] == KV_PLAN_GROUP_FULL;

    plan_hash_blocks(s, i, max_len);
    r->spb = 0;
    if (s->ng == 1)
        return find_group(s, i, 0, max_len);
    for (size_t sg = 0; sg < s->n_sg; sg++)
        s->sg_hl[sg] = -1;
    for (;;) {
        int64_t cur = hit;
        for (size_t sg = 0; sg < s->n_sg; sg++) {
            int full = s->gkind[s->sg_gid[s->sg_start[sg]]] == KV_PLAN_GROUP_FULL;
            if (full && s->sg_hl[sg] >= 0) {
                cur = cur < s->sg_hl[sg] ? cur : s->sg_hl[sg];
                continue;
            }
            cur = s->sg_hl[sg] = find_group(s, i, sg, cur);
            if (cur > longest)
                longest = cur;
        }
        if (cur >= hit)
            break;
        hit = cur;
        if (s->n_sg == 2 && full0)
            break;
    }
    r->spb = longest > hit ? longest : 0;
    return hit;
}

int64_t plan_admit_need(const struct kv_plan *s, int64_t i, int64_t tokens,
                        int64_t hit, int cap)
{
    int64_t total = 0;
    for (size_t g = 0; g < s->ng; g++) {
        int64_t bs = plan_gbs(s, g), n_hit = hit / bs;
        int64_t req = cdiv(tokens, bs), cp = plan_group_cap(s, g);
        int64_t sk = plan_group_skipped(s, g, hit) / bs;
        const int64_t *h = s->ghits + g * s->n_cols;
        if (s->malign && s->gkind[g] == KV_PLAN_GROUP_MAMBA) {
            total += plan_mamba_need(s, i, g, tokens, hit);
            continue;
        }
        if (cap && cp < req)
            req = cp;
        req -= sk > n_hit ? sk : n_hit;
        total += req > 0 ? req : 0;
        for (int64_t k = sk; k < n_hit; k++)
            total += h[k] != 0 && s->ref[h[k]] == 0;
    }
    return total;
}
