/* plan_groups.c - kvslot plan with KV-cache groups (full attention,
 * sliding windows, chunked local attention, Mamba states in one pool),
 * properties over
 * random traces, synchronous and asynchronous, with prefix caching and
 * without, in pools as small as the largest request allows:
 *  - no slot is written by two requests in a step (each group's slots of
 *    the step's tokens are distinct, and none is in the null block);
 *  - no block is freed while a request still reads it: every block a
 *    scheduled token reads (its whole prefix for full attention, its
 *    window or its chunk) is in the request's table, and the pool's
 *    reference counts equal the tables holding each block (kv_plan_check);
 *  - a window's freed blocks are never read again: once a request's entry
 *    became the null block it stays null until the request is preempted;
 *  - every request finishes.
 * Groups of different block sizes (2 or 4 times the block) run with
 * prefix caching on and off: hashes of the GCD, hits of the LCM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "slot/plan.h"
#include "tap.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static int64_t pick(int64_t lo, int64_t hi)   /* uniform in [lo, hi] */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

enum { NR = 10, ML = 64, NG = 4 };

struct trial {
    size_t n, ng;
    int64_t plen[NR], out[NR], arr[NR], tok[NR][ML], *ptok[NR];
    struct kv_plan_group g[NG];
    struct kv_plan_config c;
};

static void make_trial(struct trial *t, int mix)
{
    int64_t base[ML];
    memset(t, 0, sizeof *t);
    t->c.block_size = (int64_t)1 << pick(1, 3);
    t->c.max_model_len = pick(3 * t->c.block_size, ML);
    for (int j = 0; j < ML; j++)
        base[j] = pick(0, 4);
    t->n = (size_t)pick(1, NR);
    for (size_t i = 0; i < t->n; i++) {
        int64_t len = pick(1, t->c.max_model_len - 1), shared = pick(0, len);
        for (int64_t j = 0; j < len; j++)
            t->tok[i][j] = j < shared ? base[j] : pick(0, 9);
        t->plen[i] = len;
        t->out[i] = pick(1, 12);
        t->arr[i] = pick(1, 5);
        t->ptok[i] = t->tok[i];
    }
    /* mix 0: full + sliding windows, 1: sliding only, 2: full + chunked,
     * 3: full + Mamba (cache mode none: one block of the model length),
     * 4: full, sliding and chunked groups of 1, 2 or 4 times the block (a
     * chunked one of 4, the LCM, as vLLM requires with prefix caching) */
    t->ng = (size_t)pick(1, NG);
    for (size_t g = 0; g < t->ng; g++) {
        int kind = mix == 1 ? KV_PLAN_GROUP_SLIDING
                 : g == 0 ? KV_PLAN_GROUP_FULL
                 : mix == 0 ? KV_PLAN_GROUP_SLIDING
                 : mix == 2 ? KV_PLAN_GROUP_CHUNKED
                 : mix == 4 ? (int)pick(0, 2) : KV_PLAN_GROUP_MAMBA;
        int64_t times = mix != 4 ? 1
                      : kind == KV_PLAN_GROUP_CHUNKED ? 4 : (int64_t)1 << pick(0, 2);
        t->g[g].kind = kind;
        t->g[g].window = kind == KV_PLAN_GROUP_SLIDING
                             ? pick(1, 3 * t->c.block_size * times)
                         : kind == KV_PLAN_GROUP_CHUNKED
                             ? t->c.block_size * times * pick(1, 3) : 0;
        t->g[g].block_size = kind == KV_PLAN_GROUP_MAMBA ? t->c.max_model_len
                           : times > 1 ? t->c.block_size * times : 0;
        t->g[g].spec = t->g[g].kind * 1000 + t->g[g].window +
                       t->g[g].block_size * 100000;
    }
    t->c.n_reqs = t->n;
    t->c.prompt_lens = t->plen;
    t->c.output_lens = t->out;
    t->c.max_num_batched_tokens = pick(1, 40);
    t->c.max_num_seqs = pick(1, 6);
    t->c.arrivals = t->arr;
    t->c.prompt_tokens = (const int64_t *const *)t->ptok;
    t->c.n_groups = t->ng;
    t->c.groups = t->g;
    t->c.prefix_caching = mix == 3 ? 0 : (int)pick(0, 1);
    t->c.async_scheduling = (int)pick(0, 1);
    t->c.admit_by_chunk = (int)pick(0, 1);
    /* a pool just large enough for the largest request: kv_plan_new
     * names the blocks it needs when the pool is too small */
    t->c.num_blocks = 2;
    struct kv_plan *s;
    struct kv_err e;
    while (kv_plan_new(&s, &t->c, &e) < 0 && t->c.num_blocks < 100000)
        t->c.num_blocks++;
    kv_plan_free(s);
    t->c.num_blocks += pick(0, 1) ? 0 : pick(0, 20);
}

/* The first position token `pos` of group g reads. */
static int64_t first_read(const struct kv_plan_group *g, int64_t pos)
{
    if (g->kind == KV_PLAN_GROUP_SLIDING)
        return pos - g->window + 1 > 0 ? pos - g->window + 1 : 0;
    if (g->kind == KV_PLAN_GROUP_CHUNKED)
        return pos / g->window * g->window;
    return 0;
}

static int64_t nulled[NR][NG][ML];   /* step an entry became null, 0: not */

/* One step's properties; 0, or -1 with a message. */
static int check_step(const struct trial *t, const struct kv_plan_step *st,
                      int64_t step, char *why, size_t wl)
{
    for (size_t g = 0; g < t->ng; g++) {
        int64_t bs = t->g[g].kind != KV_PLAN_GROUP_MAMBA && t->g[g].block_size
                         ? t->g[g].block_size : t->c.block_size;
        const int64_t *tab = st->tables + g * st->n_rows * st->n_cols;
        static int64_t slots[4096];
        size_t ns = 0;
        for (size_t r = 0; r < st->n_rows; r++) {
            int64_t id = st->req_ids[r], c0 = st->num_computed[r];
            int64_t end = c0 + st->num_scheduled[r];
            const int64_t *row = tab + r * st->n_cols;
            if (t->g[g].kind == KV_PLAN_GROUP_MAMBA) {
                /* its one state block, held from admission to the end */
                if (row[0] == 0 || row[1] != 0) {
                    snprintf(why, wl, "step %lld request %lld group %zu: "
                             "state blocks %lld %lld", (long long)step,
                             (long long)id, g, (long long)row[0],
                             (long long)row[1]);
                    return -1;
                }
                continue;
            }
            /* the blocks the step's tokens read, and write */
            for (int64_t k = first_read(&t->g[g], c0) / bs;
                 k < (end + bs - 1) / bs; k++)
                if (row[k] == 0) {
                    snprintf(why, wl, "step %lld request %lld group %zu: "
                             "block %lld read, null", (long long)step,
                             (long long)id, g, (long long)k);
                    return -1;
                }
            for (int64_t p = c0; p < end && ns < 4096; p++)
                slots[ns++] = row[p / bs] * bs + p % bs;
            /* nulled entries stay null */
            for (size_t k = 0; k < st->n_cols && k < ML; k++) {
                if (row[k] == 0 && k < (size_t)(c0 / bs) && !nulled[id][g][k])
                    nulled[id][g][k] = step;
                if (row[k] != 0 && nulled[id][g][k]) {
                    snprintf(why, wl, "step %lld request %lld group %zu: "
                             "block %zu read again after it was freed at "
                             "step %lld", (long long)step, (long long)id, g, k,
                             (long long)nulled[id][g][k]);
                    return -1;
                }
            }
        }
        for (size_t a = 0; a < ns; a++)
            for (size_t b = a + 1; b < ns; b++)
                if (slots[a] == slots[b]) {
                    snprintf(why, wl, "step %lld group %zu: slot %lld "
                             "written twice", (long long)step, g,
                             (long long)slots[a]);
                    return -1;
                }
    }
    return 0;
}

/* Run to the end; 0 on success, else a message in why. */
static int run(const struct trial *t, char *why, size_t wl)
{
    struct kv_plan *s;
    struct kv_err e = {{0}};
    int64_t steps = 0, finished = 0;
    memset(nulled, 0, sizeof nulled);
    if (kv_plan_new(&s, &t->c, &e) < 0) {
        snprintf(why, wl, "new: %.200s", e.msg);
        return -1;
    }
    for (;;) {
        struct kv_plan_step st;
        if (kv_plan_step(s, &st, &e) < 0) {
            snprintf(why, wl, "step %lld: %.200s", (long long)steps + 1, e.msg);
            kv_plan_free(s);
            return -1;
        }
        steps++;
        /* a preempted request starts over: its nulls are no history */
        for (size_t k = 0; k < st.n_preempted; k++)
            memset(nulled[st.preempted[k]], 0, sizeof nulled[0]);
        if (st.n_groups != t->ng || kv_plan_check(s, &e) < 0 ||
            check_step(t, &st, steps, why, wl) < 0) {
            if (st.n_groups != t->ng)
                snprintf(why, wl, "%zu groups written", st.n_groups);
            else if (e.msg[0])
                snprintf(why, wl, "step %lld: %.200s", (long long)steps, e.msg);
            kv_plan_free(s);
            return -1;
        }
        finished += (int64_t)st.n_finished;
        if (st.all_done)
            break;
        if (steps > 20000) {
            snprintf(why, wl, "no end after 20000 steps");
            kv_plan_free(s);
            return -1;
        }
    }
    kv_plan_free(s);
    if (finished != (int64_t)t->c.n_reqs) {
        snprintf(why, wl, "%lld of %zu finished", (long long)finished,
                 t->c.n_reqs);
        return -1;
    }
    return 0;
}

int main(void)
{
    static const char *mixes[] = { "full + sliding", "sliding only",
                                   "full + chunked", "full + Mamba",
                                   "groups of different block sizes" };
    alarm(120);
    for (int mix = 0; mix < 5; mix++) {
        int bad = 0, trials = 400;
        char why[300] = "";
        for (int k = 0; k < trials; k++) {
            struct trial t;
            make_trial(&t, mix);
            if (run(&t, why, sizeof why) < 0 && !bad++)
                printf("# %s, trial %d (%zu groups, block %lld, prefix "
                       "caching %d, async %d): %s\n", mixes[mix], k, t.ng,
                       (long long)t.c.block_size, t.c.prefix_caching,
                       t.c.async_scheduling, why);
        }
        TAP_OK(bad == 0, "%s: %d random plans keep the invariants (%d "
               "broke one)", mixes[mix], trials, bad);
    }
    return tap_done();
}
