/* plan_trace.c - a Mooncake-format trace as a plan's requests, and the
 * plan's summary counters (plan_trace.h).  The trace is read by
 * sim/requests.c, so that kvslot plan and kvchunk sim accept and refuse
 * the same lines; this file checks the options around it. */
#include <stdlib.h>
#include <string.h>
#include "slot/plan_trace.h"
#include "core/cli.h"

int kv_plan_trace_load(const struct kv_plan_trace_opts *o, size_t max_bytes,
                       struct kv_sim_requests *t, int *usage,
                       struct kv_err *e)
{
    static const char *const names[] = {
        "--prompt-lens", "--prompts", "--arrivals", "--output-lens",
        "--salt", "--lora-ids"
    };
    double ms = 10;
    FILE *f;
    *usage = 1;
    if (!o->trace) {
        if (o->ms_per_step || o->summary)
            return kv_err_set(e, "%s goes with --trace", o->ms_per_step
                              ? "--ms-per-step" : "--summary");
        return 0;
    }
    if (o->summary && !o->num_blocks)
        return kv_err_set(e, "--summary needs --num-blocks (the pool whose "
                          "peak use it reports)");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (o->others & (1u << i))
            return kv_err_set(e, "--trace gives the requests: %s cannot go "
                              "with it", names[i]);
    if (o->ms_per_step) {
        char *end;
        ms = strtod(o->ms_per_step, &end);
        if (*end || end == o->ms_per_step || !(ms > 0) || ms > 1e12)
            return kv_err_set(e, "--ms-per-step: expected a number of "
                              "milliseconds above 0, got '%s'",
                              o->ms_per_step);
    }
    *usage = 0;
    if (!(f = kv_open_in(o->trace, e)))
        return -1;
    int rc = kv_sim_requests_read(f, kv_path_name(o->trace, 0), 512, ms,
                                  max_bytes, t, e);
    kv_close_in(f);
    return rc < 0 ? -1 : 0;
}

void kv_plan_summary_init(struct kv_plan_summary *s, int64_t num_blocks,
                          size_t n_reqs)
{
    memset(s, 0, sizeof *s);
    s->num_blocks = num_blocks;
    s->min_free = INT64_MAX;
    s->n_reqs = n_reqs;
}

void kv_plan_summary_release(struct kv_plan_summary *s)
{
    free(s->seen);
    s->seen = NULL;
}

int kv_plan_summary_add(struct kv_plan_summary *s,
                        const struct kv_plan_step *ss, struct kv_err *e)
{
    if (!s->seen && !(s->seen = calloc(s->n_reqs ? s->n_reqs : 1, 1)))
        return kv_err_set(e, "out of memory");
    s->steps++;
    s->preemptions += (int64_t)ss->n_preempted;
    s->evictions += (int64_t)ss->n_evicted;
    if (ss->free_blocks < s->min_free) {
        s->min_free = ss->free_blocks;
        s->peak_blocks = s->num_blocks - 1 - s->min_free;
    }
    /* a request's hit is its num_cached_tokens, set when it is first
     * scheduled */
    for (size_t r = 0; r < ss->n_rows; r++) {
        int64_t id = ss->req_ids[r];
        if (id >= 0 && (size_t)id < s->n_reqs && !s->seen[id]) {
            s->seen[id] = 1;
            if (ss->num_cached)
                s->prefix_hit_tokens += ss->num_cached[r];
        }
    }
    return 0;
}

int kv_plan_summary_last(const struct kv_plan_step *ss, int decode,
                         int steps_given)
{
    return ss->all_done || (!decode && ss->prompts_done && !steps_given);
}

int kv_plan_summary_run(struct kv_plan *p, int64_t max_steps, int decode,
                        struct kv_plan_summary *s, struct kv_err *e)
{
    for (int64_t k = 0; max_steps < 0 || k < max_steps; k++) {
        struct kv_plan_step ss;
        if (kv_plan_step(p, &ss, e) || kv_plan_summary_add(s, &ss, e))
            return -1;
        if (kv_plan_summary_last(&ss, decode, max_steps >= 0))
            break;
    }
    return 0;
}
