/* plan_apc.c - prefix caching in kvslot plan, properties over random prompt
 * sets with shared prefixes: after every step the pool is whole (free queue
 * plus referenced blocks), reference counts match the requests holding
 * each block, no finished request holds one, every hit block holds the
 * tokens its request has there (kv_plan_check); hits are whole blocks below
 * the prompt's length; every request finishes; and with caching off the
 * plan of the same prompts equals the plan of their lengths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "slot/plan.h"
#include "tap.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static int64_t pick(int64_t lo, int64_t hi)   /* uniform in [lo, hi] */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

struct trial {
    size_t n;
    int64_t plen[12], out[12], arr[12], tok[12][48], *ptok[12];
    struct kv_plan_config c;
};

static void make_trial(struct trial *t)
{
    int64_t pre[3][24], prelen[3];
    memset(t, 0, sizeof *t);
    for (int p = 0; p < 3; p++) {
        prelen[p] = pick(0, 24);
        for (int64_t j = 0; j < prelen[p]; j++)
            pre[p][j] = pick(0, 5);        /* a small vocabulary: collisions */
    }
    t->n = (size_t)pick(2, 12);
    for (size_t i = 0; i < t->n; i++) {
        int p = (int)pick(0, 2);
        int64_t suf = pick(1, 16), len = prelen[p] + suf;
        for (int64_t j = 0; j < len; j++)
            t->tok[i][j] = j < prelen[p] ? pre[p][j] : pick(0, 7);
        t->plen[i] = len;
        t->out[i] = pick(1, 6);
        t->arr[i] = pick(1, 4);
        t->ptok[i] = t->tok[i];
    }
    t->c.n_reqs = t->n;
    t->c.prompt_lens = t->plen;
    t->c.output_lens = t->out;
    t->c.block_size = (int64_t)1 << pick(0, 3);
    t->c.max_model_len = 64;
    t->c.max_num_batched_tokens = pick(4, 48);
    t->c.max_num_seqs = pick(1, 8);
    int64_t need = 0;
    for (size_t i = 0; i < t->n; i++) {
        int64_t m = t->plen[i] + t->out[i] - 1;
        int64_t b = (m + t->c.block_size - 1) / t->c.block_size;
        if (b > need)
            need = b;
    }
    t->c.num_blocks = need + 1 + pick(0, 24);
    t->c.arrivals = t->arr;
    t->c.prompt_tokens = (const int64_t *const *)t->ptok;
}

/* Run to the end; 0 on success, else a message in why. */
static int run(const struct kv_plan_config *c, int check, char *why, size_t wl,
               int64_t *sig, size_t *nsig)
{
    struct kv_plan *s;
    struct kv_err e = {{0}};
    int64_t steps = 0, finished = 0;
    if (kv_plan_new(&s, c, &e) < 0) {
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
        if (check && kv_plan_check(s, &e) < 0) {
            snprintf(why, wl, "step %lld: %.200s", (long long)steps, e.msg);
            kv_plan_free(s);
            return -1;
        }
        for (size_t r = 0; st.num_cached && r < st.n_rows; r++) {
            int64_t nc = st.num_cached[r], id = st.req_ids[r];
            if (nc < 0 || nc % c->block_size || nc >= c->prompt_lens[id]) {
                snprintf(why, wl, "request %lld: num_cached_tokens %lld",
                         (long long)id, (long long)nc);
                kv_plan_free(s);
                return -1;
            }
        }
        /* a signature of the step for the caching-off comparison */
        for (size_t r = 0; sig && r < st.n_rows && *nsig + 3 < 100000; r++) {
            sig[(*nsig)++] = st.req_ids[r];
            sig[(*nsig)++] = st.num_scheduled[r];
            sig[(*nsig)++] = st.block_table[r * st.n_cols];
        }
        finished += (int64_t)st.n_finished;
        if (st.all_done)
            break;
        if (steps > 10000) {
            snprintf(why, wl, "no end after 10000 steps");
            kv_plan_free(s);
            return -1;
        }
    }
    kv_plan_free(s);
    if (finished != (int64_t)c->n_reqs) {
        snprintf(why, wl, "%lld of %zu finished", (long long)finished, c->n_reqs);
        return -1;
    }
    return 0;
}

/* n prompts of len tokens, prompt k being ids first + stride*k, +1, ..;
 * planned to the end with prefix caching: the steps taken, or -1. */
static int64_t long_run(size_t n, int64_t len, int64_t stride, int64_t budget,
                        int64_t bs, int64_t mml, int64_t num_blocks,
                        int64_t max_steps)
{
    int64_t *tok = malloc(n * (size_t)len * sizeof *tok), steps = 0;
    int64_t *plen = malloc(n * sizeof *plen), *out = malloc(n * sizeof *out);
    const int64_t **ptok = malloc(n * sizeof *ptok);
    struct kv_plan_config c;
    struct kv_plan *s = NULL;
    struct kv_err e;
    int done = 0;

    if (!tok || !plen || !out || !ptok)
        goto end;
    for (size_t k = 0; k < n; k++) {
        for (int64_t j = 0; j < len; j++)
            tok[k * (size_t)len + (size_t)j] = stride * (int64_t)k + j;
        plen[k] = len;
        out[k] = 1;
        ptok[k] = tok + k * (size_t)len;
    }
    memset(&c, 0, sizeof c);
    c.n_reqs = n;
    c.prompt_lens = plen;
    c.output_lens = out;
    c.max_num_batched_tokens = budget;
    c.max_num_seqs = 256;
    c.block_size = bs;
    c.max_model_len = mml;
    c.num_blocks = num_blocks;
    c.prefix_caching = 1;
    c.prompt_tokens = ptok;
    if (kv_plan_new(&s, &c, &e) < 0)
        goto end;
    while (steps < max_steps) {
        struct kv_plan_step st;
        if (kv_plan_step(s, &st, &e) < 0)
            break;
        steps++;
        if (st.all_done) {
            done = 1;
            break;
        }
    }
end:
    kv_plan_free(s);
    free(tok);
    free(plen);
    free(out);
    free(ptok);
    return done ? steps : -1;
}

int main(void)
{
    static int64_t sig1[100000], sig2[100000];

    /* a plan that never ends is a failure, not a hung test */
    alarm(120);
    /* every prompt misses and evicts the hashes of the one before: the
     * cache table sees one insertion and one removal per block, forever */
    TAP_OK(long_run(45, 5, 10, 8, 4, 8, 3, 1000) == 45,
           "45 five-token prompts through a 2-block pool end in 45 steps "
           "(as vLLM)");
    TAP_OK(long_run(27, 8, 8, 64, 4, 16, 8, 1000) > 0,
           "27 eight-token prompts through a 7-block pool end");
    TAP_OK(long_run(20000, 40, 40, 2048, 16, 64, 64, 100000) > 0,
           "20000 forty-token prompts through a 63-block pool end");
    int bad_apc = 0, bad_off = 0, bad_async = 0, hit_trials = 0;
    char why[300] = "";
    for (int k = 0; k < 300; k++) {
        struct trial t;
        make_trial(&t);
        t.c.prefix_caching = 1;
        if (run(&t.c, 1, why, sizeof why, NULL, NULL) < 0) {
            if (!bad_apc++)
                printf("# trial %d: %s\n", k, why);
        }
        /* the same under asynchronous scheduling, and admitted by chunk */
        struct kv_plan_config as = t.c;
        as.async_scheduling = 1;
        as.admit_by_chunk = k % 2;
        if (run(&as, 1, why, sizeof why, NULL, NULL) < 0) {
            if (!bad_async++)
                printf("# trial %d (async): %s\n", k, why);
        }
        /* caching off: the same prompts plan as their lengths do */
        size_t n1 = 0, n2 = 0;
        struct kv_plan_config off = t.c;
        off.prefix_caching = 0;
        int r1 = run(&off, 0, why, sizeof why, sig1, &n1);
        off.prompt_tokens = NULL;
        int r2 = run(&off, 0, why, sizeof why, sig2, &n2);
        if (r1 || r2 || n1 != n2 || memcmp(sig1, sig2, n1 * sizeof *sig1)) {
            if (!bad_off++)
                printf("# trial %d: caching off differs (%s)\n", k, why);
        }
        /* did this trial hit at all? (it should, often) */
        struct kv_plan *s;
        struct kv_err e;
        if (kv_plan_new(&s, &t.c, &e) == 0) {
            struct kv_plan_step st;
            int hit = 0;
            while (kv_plan_step(s, &st, &e) == 0) {
                for (size_t r = 0; r < st.n_rows; r++)
                    hit |= st.num_cached[r] > 0;
                if (st.all_done)
                    break;
            }
            hit_trials += hit;
            kv_plan_free(s);
        }
    }
    TAP_OK(bad_apc == 0, "300 random prompt sets with caching: the pool whole, "
           "references right, hit blocks hold the right tokens, all finish "
           "(%d broken)", bad_apc);
    TAP_OK(bad_async == 0, "the same 300 under asynchronous scheduling: "
           "the pool whole, references right, all finish (%d broken)",
           bad_async);
    TAP_OK(bad_off == 0, "caching off: the same plan with or without token "
           "ids (%d differ)", bad_off);
    TAP_OK(hit_trials > 100, "the trials exercise hits (%d of 300 hit)", hit_trials);
    return tap_done();
}
