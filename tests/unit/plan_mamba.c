/* plan_mamba.c - kvslot plan with Mamba groups in cache mode align beside
 * attention groups, properties over random plans (synchronous and
 * asynchronous, prefix caching on and off, pools as small as the largest
 * request allows), then a hand-worked plan held exactly:
 *  - a step reads each scheduled request's state where the step before
 *    left it (its Mamba entry at cdiv(computed, B) - 1) and writes it at
 *    cdiv(computed + scheduled, B) - 1: neither entry is the null block;
 *  - a Mamba row holds the running state and at most the one or (with
 *    asynchronous scheduling) two before it; every other entry is null;
 *  - no block is in two places at once but a prefix-cache hit (without
 *    prefix caching: none at all), and the pool's reference counts equal
 *    the tables holding each block (kv_plan_check);
 *  - a prompt chunk that does not end the prompt ends on a block boundary
 *    when a block fits in the token budget;
 *  - every request finishes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "slot/plan.h"
#include "tap.h"

static uint64_t seed = 0x9e3779b97f4a7c15ull;

static int64_t draw(int64_t lo, int64_t hi)   /* uniform in [lo, hi] */
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return lo + (int64_t)(seed % (uint64_t)(hi - lo + 1));
}

enum { MAXR = 8, MAXL = 48, MAXG = 5 };

struct plan_case {
    size_t n;
    int64_t plen[MAXR], out[MAXR], arr[MAXR], ids[MAXR][MAXL], *rows[MAXR];
    struct kv_plan_group g[MAXG];
    struct kv_plan_config c;
};

/* A random plan: groups full, Mamba (align), maybe a sliding window,
 * prompts sharing prefixes, and the smallest pool kv_plan_new accepts
 * (plus a few blocks, or many). */
static void random_case(struct plan_case *t)
{
    int64_t base[MAXL];
    struct kv_plan *s;
    struct kv_err e;
    size_t ng = 0;

    memset(t, 0, sizeof *t);
    t->c.block_size = (int64_t)1 << draw(1, 3);
    t->c.max_model_len = draw(2 * t->c.block_size, MAXL);
    for (int j = 0; j < MAXL; j++)
        base[j] = draw(0, 3);
    t->n = (size_t)draw(1, MAXR);
    for (size_t i = 0; i < t->n; i++) {
        int64_t len = draw(1, t->c.max_model_len - 1), common = draw(0, len);
        for (int64_t j = 0; j < len; j++)
            t->ids[i][j] = j < common ? base[j] : draw(0, 9);
        t->plen[i] = len;
        t->out[i] = draw(1, 10);
        t->arr[i] = draw(1, 4);
        t->rows[i] = t->ids[i];
    }
    t->g[ng++].kind = KV_PLAN_GROUP_MAMBA;
    if (draw(0, 1))
        t->g[ng++].kind = KV_PLAN_GROUP_MAMBA;
    t->g[ng++].kind = KV_PLAN_GROUP_FULL;
    if (draw(0, 1)) {
        t->g[ng].kind = KV_PLAN_GROUP_SLIDING;
        t->g[ng++].window = draw(1, 3 * t->c.block_size);
    }
    if (draw(0, 2) == 0) {      /* a full group of blocks twice as wide */
        t->g[ng].kind = KV_PLAN_GROUP_FULL;
        t->g[ng++].block_size = 2 * t->c.block_size;
    }
    for (size_t g = 0; g < ng; g++) {
        t->g[g].spec = t->g[g].kind * 1000 + t->g[g].window +
                       t->g[g].block_size * 100000;
        if (t->g[g].kind == KV_PLAN_GROUP_MAMBA) {
            t->g[g].align = 1;
            t->g[g].block_size = t->c.block_size;
        }
    }
    t->c.n_groups = ng;
    t->c.groups = t->g;
    t->c.n_reqs = t->n;
    t->c.prompt_lens = t->plen;
    t->c.output_lens = t->out;
    t->c.arrivals = t->arr;
    t->c.prompt_tokens = (const int64_t *const *)t->rows;
    t->c.max_num_batched_tokens = draw(1, 3 * t->c.block_size);
    t->c.max_num_seqs = draw(1, 5);
    t->c.prefix_caching = (int)draw(0, 1);
    t->c.async_scheduling = (int)draw(0, 1);
    t->c.admit_by_chunk = (int)draw(0, 1);
    for (t->c.num_blocks = 2; kv_plan_new(&s, &t->c, &e) < 0 &&
                              t->c.num_blocks < 10000; t->c.num_blocks++)
        ;
    kv_plan_free(s);
    t->c.num_blocks += draw(0, 1) ? draw(0, 3) : draw(0, 30);
}

static int64_t up(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* The properties of one step (see the top); 0, or -1 with a message. */
static int check_step(const struct plan_case *t, const struct kv_plan_step *st,
                      char *why, size_t wl)
{
    int64_t B = t->c.block_size, held = t->c.async_scheduling ? 3 : 2;
    static int64_t seen[1 << 14];

    memset(seen, 0, sizeof seen);
    for (size_t r = 0; r < st->n_rows; r++) {
        int64_t id = st->req_ids[r], c0 = st->num_computed[r];
        int64_t end = c0 + st->num_scheduled[r];
        if (end < t->plen[id] && B <= t->c.max_num_batched_tokens &&
            end % B) {
            snprintf(why, wl, "step %lld request %lld: a prompt chunk ends "
                     "at %lld", (long long)st->step, (long long)id,
                     (long long)end);
            return -1;
        }
        for (size_t g = 0; g < t->c.n_groups; g++) {
            const int64_t *row = st->tables + (g * st->n_rows + r) * st->n_cols;
            int64_t live = 0;
            for (size_t k = 0; k < st->n_cols; k++) {
                if (!row[k])
                    continue;
                live++;
                if (row[k] < (int64_t)(sizeof seen / sizeof *seen) &&
                    seen[row[k]]++ && !t->c.prefix_caching) {
                    snprintf(why, wl, "step %lld: block %lld twice",
                             (long long)st->step, (long long)row[k]);
                    return -1;
                }
            }
            if (t->g[g].kind != KV_PLAN_GROUP_MAMBA)
                continue;
            if (!row[up(end, B) - 1] || (c0 > 0 && !row[up(c0, B) - 1]) ||
                live > held) {
                snprintf(why, wl, "step %lld request %lld group %zu: "
                         "computed %lld, scheduled to %lld, %lld states",
                         (long long)st->step, (long long)id, g,
                         (long long)c0, (long long)end, (long long)live);
                return -1;
            }
        }
    }
    return 0;
}

/* Run t to the end; 0, or -1 with a message. */
static int run_case(const struct plan_case *t, char *why, size_t wl)
{
    struct kv_plan *s;
    struct kv_err e = {{0}};
    size_t done = 0;
    int rc = 0;

    if (kv_plan_new(&s, &t->c, &e) < 0) {
        snprintf(why, wl, "new: %.200s", e.msg);
        return -1;
    }
    for (int64_t k = 0; rc == 0 && k < 100000; k++) {
        struct kv_plan_step st;
        if (kv_plan_step(s, &st, &e) < 0 || kv_plan_check(s, &e) < 0) {
            snprintf(why, wl, "%.200s", e.msg);
            rc = -1;
            break;
        }
        rc = check_step(t, &st, why, wl);
        done += st.n_finished;
        if (st.all_done)
            break;
    }
    if (rc == 0 && done != t->n) {
        snprintf(why, wl, "%zu of %zu requests finished", done, t->n);
        rc = -1;
    }
    kv_plan_free(s);
    return rc;
}

/* kvslot(1)'s worked example: prompts of 10 and 13 tokens sharing the
 * first 10, the second arriving at step 3, blocks of 4, a budget of 8,
 * prefix caching; one Mamba group then one full-attention group.  Each
 * step's scheduled tokens and both groups' tables, as the manual gives
 * them. */
static void worked_example(void)
{
    static const int64_t p0[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    static const int64_t p1[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 };
    const int64_t *ptok[] = { p0, p1 };
    int64_t plen[] = { 10, 13 }, out[] = { 3, 2 }, arr[] = { 1, 3 };
    struct kv_plan_group g[2] = {
        { KV_PLAN_GROUP_MAMBA, 0, 0, 4, 1 }, { KV_PLAN_GROUP_FULL, 0, 1, 0, 0 }
    };
    /* per step: tokens of each row, then each group's rows (4 columns) */
    static const int64_t want[5][2 + 2 * 2 * 4] = {
        { 8, -1, 0, 1, 0, 0, -1, -1, -1, -1, 2, 3, 0, 0, -1, -1, -1, -1 },
        { 2, -1, 0, 1, 4, 0, -1, -1, -1, -1, 2, 3, 5, 0, -1, -1, -1, -1 },
        { 1, 4, 0, 0, 4, 0, 0, 1, 6, 0, 2, 3, 5, 0, 2, 3, 7, 0 },
        { 1, 1, 0, 0, 4, 0, 0, 0, 6, 8, 2, 3, 5, 0, 2, 3, 7, 9 },
        { 1, -1, 0, 0, 0, 8, -1, -1, -1, -1, 2, 3, 7, 9, -1, -1, -1, -1 },
    };
    struct kv_plan_config c;
    struct kv_plan *s;
    struct kv_err e = {{0}};
    int ok = 1;

    memset(&c, 0, sizeof c);
    c.n_reqs = 2;
    c.prompt_lens = plen;
    c.output_lens = out;
    c.arrivals = arr;
    c.prompt_tokens = ptok;
    c.max_num_batched_tokens = 8;
    c.max_num_seqs = 8;
    c.block_size = 4;
    c.max_model_len = 16;
    c.num_blocks = 12;
    c.prefix_caching = 1;
    c.n_groups = 2;
    c.groups = g;
    if (kv_plan_new(&s, &c, &e) < 0) {
        TAP_OK(0, "kvslot(1)'s Mamba align example: %s", e.msg);
        return;
    }
    for (int k = 0; k < 5 && ok; k++) {
        struct kv_plan_step st;
        ok = kv_plan_step(s, &st, &e) == 0 && st.n_cols == 4;
        for (size_t r = 0; ok && r < 2; r++) {
            int64_t n = r < st.n_rows ? st.num_scheduled[r] : -1;
            ok = n == want[k][r];
            for (size_t q = 0; ok && n >= 0 && q < 2; q++)
                for (size_t j = 0; ok && j < 4; j++)
                    ok = st.tables[(q * st.n_rows + r) * 4 + j] ==
                         want[k][2 + (q * 2 + r) * 4 + j];
        }
        if (!ok)
            printf("# step %d differs\n", k + 1);
    }
    TAP_OK(ok, "kvslot(1)'s Mamba align example, step by step");
    kv_plan_free(s);
}

int main(void)
{
    static struct plan_case t;
    char why[300];
    int bad = 0, trials = 400;

    for (int k = 0; k < trials && bad < 3; k++) {
        random_case(&t);
        if (run_case(&t, why, sizeof why) < 0) {
            bad++;
            printf("# plan %d (B %lld, budget %lld, %zu groups, apc %d, async "
                 "%d, %lld blocks): %s", k, (long long)t.c.block_size,
                 (long long)t.c.max_num_batched_tokens, t.c.n_groups,
                 t.c.prefix_caching, t.c.async_scheduling,
                 (long long)t.c.num_blocks, why);
            putchar('\n');
        }
    }
    TAP_OK(bad == 0, "%d random plans with Mamba groups in align: states read "
        "and written held, at most %s, prompt chunks on block boundaries, "
        "pool consistent, all finished", trials, "2 (3 async) states a row");
    worked_example();
    return tap_done();
}
