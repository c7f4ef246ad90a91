/* kvslot plan --trace FILE [--ms-per-step M] [--summary]: a recorded
 * Mooncake-format trace replayed through the scheduler (man 1 kvslot,
 * "Mooncake traces"): its prompts made of token ids from their hash_ids,
 * its output lengths, and arrivals at step 1 + floor(timestamp / M); with
 * --summary one line of counters instead of every step. */
#include <jansson.h>
#include "kvslot.h"
#include "plan_trace.h"
#include "sim/requests.h"

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
                      struct plan_summary *sum, struct arg_str **others,
                      size_t max_mem, size_t *n, int64_t **plens,
                      int64_t ***tokens, int64_t **arrivals, int64_t **table,
                      size_t *table_bytes, int64_t **olens)
{
    static const char *const names[] = {
        "--prompt-lens", "--prompts", "--arrivals", "--output-lens",
        "--salt", "--lora-ids"
    };
    struct kv_sim_requests t;
    struct kv_err e;
    double ms = 10;
    FILE *f;
    if (!trace->count) {
        if (msps->count || summary->count)
            return kv_usage("%s goes with --trace", msps->count
                            ? "--ms-per-step" : "--summary");
        return 0;
    }
    if (summary->count && !num_blocks)
        return kv_usage("--summary needs --num-blocks (the pool whose peak "
                        "use it reports)");
    sum->num_blocks = num_blocks;
    sum->min_free = INT64_MAX;
    for (int i = 0; others[i]; i++)
        if (others[i]->count)
            return kv_usage("--trace gives the requests: %s cannot go with "
                            "it", names[i]);
    if (msps->count) {
        char *end;
        ms = strtod(msps->sval[0], &end);
        if (*end || end == msps->sval[0] || !(ms > 0) || ms > 1e12)
            return kv_usage("--ms-per-step: expected a number of "
                            "milliseconds above 0, got '%s'", msps->sval[0]);
    }
    if (!(f = kv_open_in(trace->sval[0], &e)))
        return kv_fail_err(&e);
    int rc = kv_sim_requests_read(f, kv_path_name(trace->sval[0], 0), 512, ms,
                                max_mem, &t, &e);
    kv_close_in(f);
    if (rc < 0)
        return kv_fail_err(&e);
    *n = t.n;
    *plens = t.prompt_lens;
    *tokens = t.tokens;
    *arrivals = t.arrivals;
    *table = t.buf;
    *table_bytes = t.bytes;
    *olens = t.output_lens;
    return 0;
}

int plan_summary_add(struct plan_summary *s, const struct kv_plan_step *ss,
                     size_t n_reqs)
{
    if (!s->seen && !(s->seen = calloc(n_reqs ? n_reqs : 1, 1)))
        return kv_fail("out of memory");
    s->steps++;
    s->preemptions += (int64_t)ss->n_preempted;
    s->evictions += (int64_t)ss->n_evicted;
    if (ss->free_blocks < s->min_free)
        s->min_free = ss->free_blocks;
    /* a request's hit is its num_cached_tokens, set when it is first
     * scheduled */
    for (size_t r = 0; r < ss->n_rows; r++) {
        int64_t id = ss->req_ids[r];
        if (id >= 0 && (size_t)id < n_reqs && !s->seen[id]) {
            s->seen[id] = 1;
            if (ss->num_cached)
                s->hit_tokens += ss->num_cached[r];
        }
    }
    return 0;
}

int plan_summary_write(FILE *f, const struct plan_summary *s, int json)
{
    int64_t peak = s->min_free == INT64_MAX ? 0
                   : s->num_blocks - 1 - s->min_free;
    if (json) {
        json_t *o = json_pack("{sIsIsIsIsI}", "steps", (json_int_t)s->steps,
                              "prefix_hit_tokens", (json_int_t)s->hit_tokens,
                              "preemptions", (json_int_t)s->preemptions,
                              "evictions", (json_int_t)s->evictions,
                              "peak_blocks", (json_int_t)peak);
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
            (long long)s->hit_tokens, (long long)s->preemptions,
            (long long)s->evictions, (long long)peak);
    return 0;
}
