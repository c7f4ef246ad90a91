/* plan_cc.c - libkv's chunk-cache plan options (slot/plan_cc.h):
 *  - kv_plan_cc_load refuses what kvslot plan --chunk-cache refuses, a
 *    refused option or input flagged as usage and input that cannot be
 *    read or does not fit --max-mem not, and leaves the plan released;
 *  - a loaded plan holds the segments' prompts with their output lengths
 *    (one for all, one each, or none: "until max_model_len"), the defaults
 *    of --max-num-seqs, --max-chunks and --max-chunk-tokens, and a chunk
 *    pool sized as the seed sizes it (ceil(main * u / 0.70), raised to the
 *    least the input needs), or as given;
 *  - --fields names every field and only those; kv_plan_cc_field gives
 *    each field of a step from the struct kv_cc_step that holds it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "slot/plan_cc.h"
#include "tap.h"

#define K0 "0784e0338ff4cf00fdd2b2fb33c86d22"
#define K1 "a69c50bcdc6a397e08e5423a773da924"
#define K2 "d81738960039c6b4351cdf8a119291cd"

static void write_file(char *path, const char *text)
{
    strcpy(path, "/tmp/kvplanccXXXXXX");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static struct kv_plan_cc_opts base(const char *segs)
{
    struct kv_plan_cc_opts o;
    memset(&o, 0, sizeof o);
    o.segments = segs;
    o.max_tokens = 32;
    o.block_size = 4;
    o.max_model_len = 64;
    return o;
}

static int is_zero(const struct kv_plan_cc *pc)
{
    const unsigned char *b = (const unsigned char *)pc;
    for (size_t i = 0; i < sizeof *pc; i++)
        if (b[i])
            return 0;
    return 1;
}

static void refused(const struct kv_plan_cc_opts *o, int usage_want,
                    const char *want, const char *title)
{
    struct kv_plan_cc pc;
    struct kv_err e = {{0}};
    int usage = -1;
    int rc = kv_plan_cc_load(&pc, o, &usage, &e);
    TAP_OK(rc == -1 && usage == usage_want && strstr(e.msg, want) &&
           is_zero(&pc), "%s: usage %d, '%s'", title, usage, e.msg);
    kv_plan_cc_release(&pc);
}

static void test_refusals(const char *good)
{
    char nokey[64], nosys[64];
    struct kv_plan_cc_opts o = base(good);
    write_file(nokey, "sys 0 4\nquestion 4 3\n");
    write_file(nosys, "chunk 0 3 " K1 "\n");
    o.utilization = "1";
    refused(&o, 1, "--chunk-cache-gpu-memory-utilization: expected a "
            "fraction in (0, 1), got '1'", "a utilization of 1");
    o = base(good);
    o.chunk_context = "all";
    refused(&o, 1, "--chunk-context: expected sys or none, got 'all'",
            "--chunk-context all");
    o = base(good);
    o.max_mem = "2x";
    refused(&o, 1, "--max-mem", "a bad --max-mem");
    o = base(good);
    o.fields = "step,nosuch";
    refused(&o, 1, "--fields: unknown field 'nosuch' for plan --chunk-cache; "
            "valid: step chunk_req", "an unknown field");
    o.fields = "step,step,step,step,step,step,step,step,step,step,step,step,"
               "step,step,step,step,step,step,step,step,step,step,step,step,"
               "step,step,step,step,step,step,step,step,step,step,step,step,"
               "step";
    refused(&o, 1, "--fields: too many fields", "37 fields");
    o = base("/nonexistent/segs.txt");
    refused(&o, 0, "cannot open '/nonexistent/segs.txt'", "no such file");
    o = base(good);
    o.max_mem = "100";
    refused(&o, 0, "has 240 bytes, over --max-mem 100", "segments over "
            "--max-mem");
    o.max_mem = "4K";
    refused(&o, 0, "the chunk-cache plan needs ", "the plan over --max-mem");
    o = base(nokey);
    refused(&o, 1, "--segments: ", "a chunk without its key");
    o = base(nosys);
    refused(&o, 1, "--segments: ", "a prompt without its sys line");
    o = base(good);
    o.output_lens = "1,2,3";
    refused(&o, 1, "--output-lens has 3 values, --segments has 2 prompts",
            "three output lengths for two prompts");
    o.output_lens = "2,0";
    refused(&o, 1, "--output-lens: request 1: ", "an output length of 0");
    o = base(good);
    o.chunk_pool_blocks = 2;
    refused(&o, 1, "chunk-pool blocks, the pool has 2", "a chunk pool too "
            "small");
    o = base(good);
    o.max_chunk_tokens = 5;
    refused(&o, 1, "over --max-chunk-tokens 5", "a chunk over "
            "--max-chunk-tokens");
    o = base(good);
    o.max_model_len = 12;
    refused(&o, 1, "max_model_len is 12", "a prompt past --max-model-len");
    unlink(nokey);
    unlink(nosys);
}

static void test_load(const char *good)
{
    struct kv_plan_cc pc;
    struct kv_err e = {{0}};
    struct kv_cc_sizes sz;
    int usage = -1, ok;
    struct kv_plan_cc_opts o = base(good);

    ok = kv_plan_cc_load(&pc, &o, &usage, &e) == 0;
    TAP_OK(ok && pc.n_reqs == 2 && pc.reqs[0].n_segs == 3 &&
           pc.reqs[1].n_segs == 4 && pc.n_sel == 0 && pc.cc,
           "two prompts of 3 and 4 segments, every field (%s)", e.msg);
    if (!ok)
        return;
    TAP_OK(pc.cfg.max_num_seqs == 256 && pc.cfg.max_chunks == 500 &&
           pc.cfg.max_chunk_tokens == 4096 && !pc.cfg.ctx_none &&
           pc.reqs[0].output_len == INT64_MAX / 4 &&
           pc.reqs[1].output_len == INT64_MAX / 4,
           "the defaults: 256 sequences, 500 chunks of 4096 tokens, "
           "outputs until max_model_len, context sys");
    ok = kv_cc_sizes(&pc.cfg, &sz, &e) == 0;
    int64_t want = (int64_t)ceil((double)sz.main_blocks * 0.15 / 0.70);
    if (want < sz.pool_blocks_least)
        want = sz.pool_blocks_least;
    TAP_OK(ok && pc.cfg.chunk_pool_blocks == want,
           "the chunk pool sized ceil(%lld * 0.15 / 0.70) or the least (%lld)"
           ": %lld", (long long)sz.main_blocks,
           (long long)sz.pool_blocks_least, (long long)pc.cfg.chunk_pool_blocks);
    int64_t least = sz.pool_blocks_least;
    kv_plan_cc_release(&pc);
    kv_plan_cc_release(&pc);            /* safe twice */

    o.num_blocks = 700;
    o.utilization = "0.5";
    o.output_lens = "3";
    o.chunk_context = "none";
    ok = kv_plan_cc_load(&pc, &o, &usage, &e) == 0;
    /* 700 * 0.5 / 0.70 is a little above 500 in doubles: 501, as the
     * program sizes it */
    TAP_OK(ok && pc.cfg.chunk_pool_blocks == 501 && pc.cfg.ctx_none &&
           pc.reqs[0].output_len == 3 && pc.reqs[1].output_len == 3,
           "--num-blocks 700 at 0.5: a pool of 501 (%lld), one output length "
           "for all, context none", (long long)pc.cfg.chunk_pool_blocks);
    kv_plan_cc_release(&pc);
    o.output_lens = "4,7";
    o.chunk_pool_blocks = least + 1;
    o.max_chunks = 3;
    ok = kv_plan_cc_load(&pc, &o, &usage, &e) == 0;
    TAP_OK(ok && pc.cfg.chunk_pool_blocks == least + 1 &&
           pc.cfg.max_chunks == 3 && pc.reqs[0].output_len == 4 &&
           pc.reqs[1].output_len == 7,
           "a pool and --max-chunks given, one output length each");
    kv_plan_cc_release(&pc);
}

static void test_fields(const char *good)
{
    char all[1024] = "";
    int sel[KV_PLAN_CC_NF];
    size_t n = 0, bad = 0;
    struct kv_err e = {{0}};
    for (size_t k = 0; k < KV_PLAN_CC_NF; k++) {
        strcat(all, k ? "," : "");
        strcat(all, kv_plan_cc_field_name(k));
    }
    int rc = kv_plan_cc_fields(all, sel, &n, &e);
    for (size_t k = 0; k < n; k++)
        bad += sel[k] != (int)k;
    TAP_OK(rc == 0 && n == KV_PLAN_CC_NF && !bad &&
           !kv_plan_cc_field_name(KV_PLAN_CC_NF),
           "every field by name, in order (%zu)", n);

    struct kv_plan_cc pc;
    int usage;
    struct kv_plan_cc_opts o = base(good);
    o.output_lens = "2";
    o.fields = "block_table,step,chunk_hit,chunk_evicted_keys,free_blocks";
    if (kv_plan_cc_load(&pc, &o, &usage, &e)) {
        TAP_OK(0, "load: %s", e.msg);
        return;
    }
    TAP_OK(pc.n_sel == 5 && pc.sel[0] == 25 && pc.sel[1] == 0,
           "--fields in the order given");
    const struct kv_cc_step *st;
    int steps = 0, same = 1;
    while (kv_cc_step(pc.cc, 1, &st, &e) == 1) {
        struct kv_plan_cc_value v;
        steps++;
        for (size_t k = 0; k < KV_PLAN_CC_NF; k++) {
            const char *name = kv_plan_cc_field_name(k);
            kv_plan_cc_field(st, k, &v);
            if (!strcmp(name, "step"))
                same &= v.ndim == 0 && v.scalar == st->step && *v.v == st->step;
            else if (!strcmp(name, "chunk_hit"))
                same &= v.ndim == 1 && v.v == st->chunk_hit.v &&
                        v.shape[0] == (int64_t)st->chunk_hit.n;
            else if (!strcmp(name, "num_scheduled_tokens"))
                same &= v.ndim == 1 && v.v == st->num_scheduled.v;
            else if (!strcmp(name, "block_table"))
                same &= v.ndim == 2 && v.v == st->block_table.v &&
                        v.shape[0] == (int64_t)st->req_ids.n &&
                        v.shape[1] == st->bt_stride;
            else if (!strcmp(name, "chunk_evicted_keys"))
                same &= v.ndim == -1 && v.shape[0] == (int64_t)st->n_evicted;
            else if (!strcmp(name, "chunk_evictions"))
                same &= v.ndim == 0 && v.scalar == (int64_t)st->n_evicted;
            else if (!strcmp(name, "chunk_pool_entries"))
                same &= v.ndim == 0 && v.scalar == st->pool_entries;
            else if (!strcmp(name, "free_blocks"))
                same &= v.ndim == 0 && v.scalar == st->free_blocks;
        }
    }
    TAP_OK(steps > 1 && same, "each field from its member of the step "
           "(%d steps)", steps);
    kv_plan_cc_release(&pc);
}

int main(void)
{
    char good[64];
    /* two prompts sharing a sys prompt and a chunk (240 bytes) */
    write_file(good, "sys 0 4 " K0 "\nchunk 4 6 " K1 "\nquestion 10 3\n"
               "sys 0 4 " K0 "\nchunk 4 6 " K1 "\nchunk 10 5 " K2 "\n"
               "question 15 2\n");
    test_refusals(good);
    test_load(good);
    test_fields(good);
    unlink(good);
    return tap_done();
}
