/* plan_mamba.c - Mamba groups in cache mode "align" in the scheduler, as
 * vLLM 0.33.0's Scheduler (_mamba_block_aligned_split) and MambaManager
 * run them with its defaults (no speculative blocks, no prefill
 * checkpoint blocks, hash block = Mamba block = block_size, prefix cache
 * retention interval 0): plan.h, "Mamba cache mode align".
 *
 * A request's row in a Mamba group is position-indexed like an
 * attention row (as long): entry p would hold the state after (p + 1) *
 * block_size tokens; only the running state block and the one before it
 * are real, the rest is the null block 0. */
#include "slot/plan_impl.h"

/* Mamba groups in align mode into s (every Mamba group is in one mode;
 * plan.c checked it), and with prefix caching the per-block step of its
 * last insertion in the cache.  0 or -1. */
int plan_mamba_init(struct kv_plan *s, const struct kv_plan_config *c,
                    struct kv_err *e)
{
    for (size_t g = 0; g < c->n_groups; g++)
        if (c->groups[g].kind == KV_PLAN_GROUP_MAMBA && c->groups[g].align)
            s->malign = 1;
    if (!s->malign || !c->prefix_caching)
        return 0;
    s->mcstep = calloc((size_t)s->num_blocks, sizeof *s->mcstep);
    return s->mcstep ? 0 : kv_err_set(e, "out of memory for the Mamba groups");
}

/* Tokens a prefill chunk of n tokens from `start` keeps (vLLM's
 * _mamba_block_aligned_split): while the prefill (the prompt, or all but
 * the last token of a resumed request) goes on, a chunk ends on a block
 * boundary (a block wider than the token budget may advance inside
 * itself), a chunk starting inside a block stops at its end, none runs
 * past the last block boundary before the request's last token, and one
 * that crosses the shared-prefix boundary stops at the last block
 * boundary before it.  0: the request is not scheduled in this step. */
int64_t plan_mamba_split(const struct kv_plan *s, const struct req *r,
                         int64_t start, int64_t n)
{
    int64_t B = s->bs, pend = num_tokens(r) - 1, end = start + n, best;
    int64_t last = (num_tokens(r) - 1) / B * B, stops[3];

    if (pend < r->prompt)
        pend = r->prompt;
    if (start >= pend)
        return n;
    if (end < pend && (end / B * B > start || B <= s->budget))
        end = end / B * B;
    stops[0] = start % B ? (start / B + 1) * B : 0;
    stops[1] = last > 0 ? last : 0;
    stops[2] = start < r->spb && r->spb < end
                   ? start + (r->spb - start) / B * B : 0;
    best = end;
    for (int k = 0; k < 3; k++)
        if (stops[k] > start && stops[k] < best)
            best = stops[k];
    return best > start ? best - start : 0;
}

/* Request i's blocks in group g after the first `tokens` tokens (it holds
 * need more in each attention group): the row padded with null blocks to
 * one short of cdiv(tokens, block_size), then one new block, the running
 * state (MambaManager.allocate_new_blocks); the row's last block before
 * becomes the previous state. */
static void take_state(struct kv_plan *s, int64_t i, size_t g, int64_t need)
{
    struct req *r = &s->reqs[i];
    int64_t *row = plan_row(s, i, g), at = r->n_blocks + need - 1;

    for (int64_t k = r->n_blocks; k < at; k++)
        row[k] = 0;
    row[at] = s->apc ? plan_free_pop(s) : ring_pop_front(&s->freeq);
}

/* Give request i the blocks of its first `tokens` tokens (need more in
 * each attention group, its rows' length growing as much), group after
 * group: an attention group takes need blocks, a Mamba group one (none
 * when need is 0).  0, or -1 when the free queue is too short (nothing
 * taken then). */
int plan_mamba_allocate(struct kv_plan *s, int64_t i, int64_t need)
{
    struct req *r = &s->reqs[i];
    int64_t total = 0;

    if (need == 0)
        return 0;
    for (size_t g = 0; g < s->ng; g++)
        total += s->gkind[g] == KV_PLAN_GROUP_MAMBA ? 1 : need;
    if (total > (int64_t)plan_free_len(s))
        return -1;
    for (size_t g = 0; g < s->ng; g++) {
        int64_t *row = plan_row(s, i, g) + r->n_blocks;
        if (s->gkind[g] == KV_PLAN_GROUP_MAMBA) {
            take_state(s, i, g, need);
            continue;
        }
        if (!s->apc)
            ring_pop_n(&s->freeq, row, (size_t)need);
        for (int64_t k = 0; s->apc && k < need; k++)
            row[k] = plan_free_pop(s);
    }
    if (r->n_blocks > 0)
        r->mlast = r->n_blocks;         /* 1 + its index */
    r->n_blocks += need;
    return 0;
}

/* plan_mamba_allocate with attention groups of different block sizes,
 * each group counting its own blocks (s->gnb): an attention group takes
 * the blocks up to cdiv(tokens, its block size), a Mamba group, whose row
 * counts blocks of block_size, one new running state when its row grows
 * (MambaManager.allocate_new_blocks).  0, or -1 when the free queue is too
 * short (nothing taken then). */
int plan_mamba_allocate_each(struct kv_plan *s, int64_t i, int64_t tokens)
{
    struct req *r = &s->reqs[i];
    int64_t *have = s->gnb + (size_t)i * s->ng, total = 0, last = -1;

    for (size_t g = 0; g < s->ng; g++) {
        int64_t k = cdiv(tokens, s->gbs[g]) - have[g];
        if (k > 0)
            total += s->gkind[g] == KV_PLAN_GROUP_MAMBA ? 1 : k;
    }
    if (total > (int64_t)plan_free_len(s))
        return -1;
    for (size_t g = 0; g < s->ng; g++) {
        int64_t k = cdiv(tokens, s->gbs[g]) - have[g];
        int64_t *row = plan_row(s, i, g) + have[g];
        if (k <= 0)
            continue;
        if (s->gkind[g] == KV_PLAN_GROUP_MAMBA) {
            for (int64_t j = 0; j < k - 1; j++)
                row[j] = 0;
            row[k - 1] = s->apc ? plan_free_pop(s) : ring_pop_front(&s->freeq);
            last = have[g];
        } else if (!s->apc) {
            ring_pop_n(&s->freeq, row, (size_t)k);
        }
        for (int64_t j = 0; s->apc && s->gkind[g] != KV_PLAN_GROUP_MAMBA &&
                            j < k; j++)
            row[j] = plan_free_pop(s);
        have[g] += k;
    }
    if (last > 0)
        r->mlast = last;                /* 1 + its index */
    return 0;
}

/* Group g's blocks request i no longer needs once `done` tokens are
 * processed, freed (MambaManager.remove_skipped_blocks): those before the
 * block of the last processed token that no earlier call retired, last
 * first, then the previous state block once the processed tokens reach
 * the block after it.  Returns the blocks retired so far (the caller
 * keeps it once every Mamba group has been through). */
int64_t plan_mamba_remove(struct kv_plan *s, int64_t i, size_t g,
                          int64_t done)
{
    struct req *r = &s->reqs[i];
    int64_t *row = plan_row(s, i, g), *out = s->ghits, n = 0;
    int64_t nb = done > 1 ? (done - 1) / s->bs : 0, ret = r->mretired;
    int64_t prev = r->mlast - 1, have = plan_gblocks(s, r, g);

    if (nb > have)
        nb = have;
    if (ret < nb) {
        for (int64_t k = nb - 1; k >= ret; k--)
            if (row[k]) {
                out[n++] = row[k];
                row[k] = 0;
            }
        if (n)
            plan_release(s, i, g, out, (size_t)n, s->step);
        ret = nb;
    }
    if (prev >= 0 && prev < cdiv(done, s->bs) - 1 && row[prev]) {
        out[0] = row[prev];
        row[prev] = 0;
        plan_release(s, i, g, out, 1, s->step);
    }
    return ret;
}

/* Whether a Mamba group caches request i's block k when it fills (a
 * retention interval of 0 keeps the states a later lookup can reach: at
 * the hit alignment at or below the prompt's last token, and at the
 * shared-prefix boundary). */
int plan_mamba_cacheable(const struct kv_plan *s, int64_t i, int64_t k)
{
    const struct req *r = &s->reqs[i];
    int64_t a = s->lcm;

    if (k == (r->prompt - 1) / a * a / s->bs - 1)
        return 1;
    return r->spb > 0 && k == r->spb / a * a / s->bs - 1;
}

/* The blocks group g needs to admit request i for its first `tokens`
 * tokens after a hit of `hit` tokens (MambaManager.get_num_blocks_to_
 * allocate): one state block, and the hit's state block if it sits in the
 * free queue; more than the pool when that state was cached in this step
 * (a state another request is still computing is not used before the next
 * step). */
int64_t plan_mamba_need(const struct kv_plan *s, int64_t i, size_t g,
                        int64_t tokens, int64_t hit)
{
    int64_t n = hit / s->bs, req = cdiv(tokens, s->bs) - n, b;

    if (req > 0)
        req = 1;
    if (n == 0)
        return req;
    b = s->ghits[g * s->n_cols + (size_t)n - 1];
    if (s->mcstep && plan_cached_now(s, i, g, n - 1))
        return s->num_blocks + 1;
    return req + (b != 0 && s->ref[b] == 0);
}
