/* plan_trace.c - libkv's recorded-trace plan (slot/plan_trace.h):
 *  - kv_plan_trace_load refuses what kvslot plan refuses, a refused
 *    option flagged as usage and a bad trace not, and leaves its output
 *    alone then; a trace's requests are its prompts in 512-token blocks
 *    (token j of hash id h is h * 512 + j), its output lengths and its
 *    arrival steps 1 + floor(timestamp / ms_per_step);
 *  - kv_plan_summary_run's counters equal a recount made here from every
 *    step of the same plan (steps, each request's num_cached_tokens when
 *    it is first scheduled, preemptions, evictions, the pool less the null
 *    block and the fewest free blocks), on random plans with prefix
 *    caching in pools that preempt and evict, to the end and for K steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "slot/plan_trace.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int64_t pick(int64_t lo, int64_t hi)   /* uniform in [lo, hi] */
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

/* A file holding text; its path in path[64]. */
static void write_file(char *path, const char *text)
{
    strcpy(path, "/tmp/kvplantraceXXXXXX");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* One refusal: *usage as expected, e's message holds want, t untouched. */
static void refused(const struct kv_plan_trace_opts *o, int usage_want,
                    const char *want, const char *title)
{
    struct kv_sim_requests t;
    struct kv_err e = {{0}};
    int usage = -1;
    memset(&t, 0x5a, sizeof t);
    int rc = kv_plan_trace_load(o, 0, &t, &usage, &e);
    unsigned char *b = (unsigned char *)&t;
    int same = 1;
    for (size_t i = 0; i < sizeof t; i++)
        same &= b[i] == 0x5a;
    TAP_OK(rc == -1 && usage == usage_want && strstr(e.msg, want) && same,
           "%s: usage %d, '%s'", title, usage, e.msg);
}

static void test_load(void)
{
    char good[64], bad[64];
    write_file(good, "{\"timestamp\": 0, \"input_length\": 600, "
               "\"output_length\": 3, \"hash_ids\": [7, 2]}\n"
               "{\"timestamp\": 125.5, \"input_length\": 5, "
               "\"output_length\": 1, \"hash_ids\": [7]}\n");
    write_file(bad, "{\"timestamp\": 0, \"input_length\": 5, "
               "\"output_length\": 0, \"hash_ids\": [1]}\n");
    struct kv_plan_trace_opts o;
    struct kv_sim_requests t;
    struct kv_err e = {{0}};
    int usage = -1;

    memset(&o, 0, sizeof o);
    memset(&t, 0x5a, sizeof t);
    TAP_OK(kv_plan_trace_load(&o, 0, &t, &usage, &e) == 0 &&
           ((unsigned char *)&t)[0] == 0x5a, "no trace: nothing read");
    o.ms_per_step = "5";
    refused(&o, 1, "--ms-per-step goes with --trace", "--ms-per-step alone");
    o.ms_per_step = NULL;
    o.summary = 1;
    refused(&o, 1, "--summary goes with --trace", "--summary alone");
    o.trace = good;
    refused(&o, 1, "--summary needs --num-blocks", "--summary, no pool");
    o.num_blocks = 10;
    o.others = KV_PLAN_TRACE_SALT | KV_PLAN_TRACE_ARRIVALS;
    refused(&o, 1, "--arrivals cannot go with it", "the first option named");
    o.others = 0;
    const char *ms_bad[] = {"0", "-1", "x", "", "2ms", "1e13", "nan"};
    for (size_t i = 0; i < sizeof ms_bad / sizeof *ms_bad; i++) {
        o.ms_per_step = ms_bad[i];
        refused(&o, 1, "--ms-per-step: expected a number", ms_bad[i]);
    }
    o.ms_per_step = "50";
    o.trace = "/nonexistent/trace.jsonl";
    refused(&o, 0, "cannot open '/nonexistent/trace.jsonl'", "no such file");
    o.trace = bad;
    refused(&o, 0, "output_length 0", "a bad line");

    o.trace = good;
    memset(&t, 0, sizeof t);
    int rc = kv_plan_trace_load(&o, (size_t)1 << 30, &t, &usage, &e);
    TAP_OK(rc == 0 && t.n == 2, "a trace of two requests: %s", e.msg);
    if (rc == 0 && t.n == 2) {
        int ok = t.prompt_lens[0] == 600 && t.prompt_lens[1] == 5 &&
                 t.output_lens[0] == 3 && t.output_lens[1] == 1 &&
                 t.arrivals[0] == 1 && t.arrivals[1] == 1 + 125 / 50;
        TAP_OK(ok, "lengths and arrival steps at 50 ms a step");
        ok = 1;
        for (int64_t j = 0; j < 600; j++)
            ok &= t.tokens[0][j] == (j < 512 ? 7 * 512 + j : 2 * 512 + j - 512);
        for (int64_t j = 0; j < 5; j++)
            ok &= t.tokens[1][j] == 7 * 512 + j;
        TAP_OK(ok, "token j of hash id h is h * 512 + j");
    }
    kv_sim_requests_release(&t);
    unlink(good);
    unlink(bad);
}

enum { NR = 10, ML = 64 };

/* The summary recounted from every step of the plan c (at most max_steps,
 * < 0: none), with the same stop rule; 0 or -1. */
static int recount(const struct kv_plan_config *c, int64_t max_steps,
                   int decode, struct kv_plan_summary *r)
{
    struct kv_plan *p;
    struct kv_err e;
    unsigned char seen[NR] = {0};
    int64_t low = -1;
    memset(r, 0, sizeof *r);
    if (kv_plan_new(&p, c, &e))
        return -1;
    for (int64_t k = 0; max_steps < 0 || k < max_steps; k++) {
        struct kv_plan_step s;
        if (kv_plan_step(p, &s, &e)) {
            kv_plan_free(p);
            return -1;
        }
        r->steps++;
        r->preemptions += (int64_t)s.n_preempted;
        r->evictions += (int64_t)s.n_evicted;
        if (low < 0 || s.free_blocks < low)
            low = s.free_blocks;
        for (size_t i = 0; i < s.n_rows; i++)
            if (!seen[s.req_ids[i]]) {
                seen[s.req_ids[i]] = 1;
                r->prefix_hit_tokens += s.num_cached[i];
            }
        if (s.all_done || (!decode && s.prompts_done && max_steps < 0))
            break;
    }
    r->peak_blocks = c->num_blocks - 1 - low;
    kv_plan_free(p);
    return 0;
}

static void test_summary(void)
{
    int64_t plen[NR], out[NR], arr[NR], tok[NR][ML], *ptok[NR], base[ML];
    int bad = 0, preempted = 0, evicted = 0, hits = 0;
    for (int trial = 0; trial < 300; trial++) {
        struct kv_plan_config c;
        memset(&c, 0, sizeof c);
        c.block_size = (int64_t)1 << pick(0, 3);
        c.max_model_len = ML;
        c.max_num_batched_tokens = pick(4, 48);
        c.max_num_seqs = pick(1, 8);
        c.n_reqs = (size_t)pick(1, NR);
        for (int j = 0; j < ML; j++)
            base[j] = pick(0, 3);
        int64_t need = 0;
        for (size_t i = 0; i < c.n_reqs; i++) {
            int64_t shared = pick(0, 24);
            plen[i] = shared + pick(1, 24);
            for (int64_t j = 0; j < plen[i]; j++)
                tok[i][j] = j < shared ? base[j] : pick(0, 9);
            out[i] = pick(1, 8);
            arr[i] = pick(1, 6);
            ptok[i] = tok[i];
            int64_t b = (plen[i] + out[i] + c.block_size - 1) / c.block_size;
            need = b > need ? b : need;
        }
        c.prompt_lens = plen;
        c.output_lens = out;
        c.arrivals = arr;
        c.prompt_tokens = (const int64_t *const *)ptok;
        c.prefix_caching = 1;
        c.num_blocks = need + 1 + pick(0, 20);
        c.skip_waiting = c.skip_shared = 1;
        int decode = (int)pick(0, 1);
        int64_t K = pick(0, 3) ? -1 : pick(1, 20);

        struct kv_plan_summary s, r;
        struct kv_plan *p;
        struct kv_err e;
        kv_plan_summary_init(&s, c.num_blocks, c.n_reqs);
        int rc = kv_plan_new(&p, &c, &e) ? -1
                 : kv_plan_summary_run(p, K, decode, &s, &e);
        if (rc == 0)
            kv_plan_free(p);
        if (rc || recount(&c, K, decode, &r) ||
            s.steps != r.steps || s.prefix_hit_tokens != r.prefix_hit_tokens ||
            s.preemptions != r.preemptions || s.evictions != r.evictions ||
            s.peak_blocks != r.peak_blocks) {
            if (bad++ < 3)
                TAP_OK(0, "trial %d: summary %lld %lld %lld %lld %lld, "
                       "recount %lld %lld %lld %lld %lld", trial,
                       (long long)s.steps, (long long)s.prefix_hit_tokens,
                       (long long)s.preemptions, (long long)s.evictions,
                       (long long)s.peak_blocks, (long long)r.steps,
                       (long long)r.prefix_hit_tokens,
                       (long long)r.preemptions, (long long)r.evictions,
                       (long long)r.peak_blocks);
        }
        preempted += s.preemptions > 0;
        evicted += s.evictions > 0;
        hits += s.prefix_hit_tokens > 0;
        kv_plan_summary_release(&s);
        kv_plan_summary_release(&s);    /* safe twice */
    }
    TAP_OK(bad == 0, "300 random plans: kv_plan_summary_run = the recount "
           "(%d differ)", bad);
    TAP_OK(preempted > 10 && evicted > 10 && hits > 30,
           "the plans preempt (%d), evict (%d) and hit (%d)", preempted,
           evicted, hits);
}

int main(void)
{
    test_load();
    test_summary();
    return tap_done();
}
