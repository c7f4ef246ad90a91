/* kvslot plan --trace FILE [--ms-per-step M] [--summary]: a recorded
 * Mooncake-format trace replayed through the scheduler (man 1 kvslot,
 * "Mooncake traces"): its prompts made of token ids from their hash_ids,
 * its output lengths, and arrivals at step 1 + floor(timestamp / M); with
 * --summary one line of counters instead of every step.  The trace and
 * the counters are libkv's (slot/plan_trace.h); here are the options and
 * the summary's line. */
#include <jansson.h>
#include "kvslot.h"
#include "plan_trace.h"

int plan_trace_args(struct arg_str **trace, struct arg_str **msps,
                    struct arg_lit **summary, void **t)
{
    t[2] = *summary = arg_lit0(NULL, "summary",
                               "--trace: one line of counters (steps, "
                               "prefix-hit tokens, preemptions, evictions, "
                               "peak blocks) instead of every step");
    t[0] = *trace = arg_str0(NULL, "trace", "FILE",
                             "a Mooncake-format trace: prompts, outputs and "
                             "arrivals");
    t[1] = *msps = arg_str0(NULL, "ms-per-step", "M",
                            "--trace: milliseconds a step takes (10)");
    return 3;
}

int plan_trace_inputs(struct arg_str *trace, struct arg_str *msps,
                      struct arg_lit *summary, int64_t num_blocks,
                      struct arg_str **others, size_t max_mem, size_t *n,
                      int64_t **plens, int64_t ***tokens, int64_t **arrivals,
                      int64_t **table, size_t *table_bytes, int64_t **olens)
{
    struct kv_plan_trace_opts o;
    struct kv_sim_requests t;
    struct kv_err e;
    int usage;
    memset(&o, 0, sizeof o);
    o.trace = trace->count ? trace->sval[0] : NULL;
    o.ms_per_step = msps->count ? msps->sval[0] : NULL;
    o.summary = summary->count > 0;
    o.num_blocks = num_blocks;
    for (unsigned i = 0; others[i]; i++)
        if (others[i]->count)
            o.others |= 1u << i;
    if (kv_plan_trace_load(&o, max_mem, &t, &usage, &e))
        return usage ? kv_usage("%s", e.msg) : kv_fail_err(&e);
    if (!o.trace)
        return 0;
    *n = t.n;
    *plens = t.prompt_lens;
    *tokens = t.tokens;
    *arrivals = t.arrivals;
    *table = t.buf;
    *table_bytes = t.bytes;
    *olens = t.output_lens;
    return 0;
}

int plan_summary_write(FILE *f, const struct kv_plan_summary *s, int json)
{
    if (json) {
        json_t *o = json_pack("{sIsIsIsIsI}", "steps", (json_int_t)s->steps,
                              "prefix_hit_tokens",
                              (json_int_t)s->prefix_hit_tokens,
                              "preemptions", (json_int_t)s->preemptions,
                              "evictions", (json_int_t)s->evictions,
                              "peak_blocks", (json_int_t)s->peak_blocks);
        char *t = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER)
                    : NULL;
        json_decref(o);
        if (!t)
            return kv_fail("out of memory");
        fprintf(f, "%s\n", t);
        free(t);
        return 0;
    }
    fprintf(f, "steps %lld prefix_hit_tokens %lld preemptions %lld "
            "evictions %lld peak_blocks %lld\n", (long long)s->steps,
            (long long)s->prefix_hit_tokens, (long long)s->preemptions,
            (long long)s->evictions, (long long)s->peak_blocks);
    return 0;
}
