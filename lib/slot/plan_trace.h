/* plan_trace.h - a recorded trace planned by the scheduler (plan.h): the
 * requests of a Mooncake-format trace (sim/requests.h) checked against
 * the options they replace, and the summary of a plan's steps (steps,
 * prefix-hit tokens, preemptions, evictions, peak blocks).  kvslot plan
 * --trace / --ms-per-step / --summary and the Python binding both call
 * these. */
#ifndef KV_PLAN_TRACE_H
#define KV_PLAN_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "sim/requests.h"
#include "slot/plan.h"

/* The options a trace replaces, as bits of kv_plan_trace_opts.others; a
 * refusal names the first given in this order. */
enum {
    KV_PLAN_TRACE_PROMPT_LENS = 1 << 0,     /* --prompt-lens */
    KV_PLAN_TRACE_PROMPTS = 1 << 1,         /* --prompts */
    KV_PLAN_TRACE_ARRIVALS = 1 << 2,        /* --arrivals */
    KV_PLAN_TRACE_OUTPUT_LENS = 1 << 3,     /* --output-lens */
    KV_PLAN_TRACE_SALT = 1 << 4,            /* --salt */
    KV_PLAN_TRACE_LORA_IDS = 1 << 5         /* --lora-ids */
};

struct kv_plan_trace_opts {
    const char *trace;          /* a Mooncake-format trace ("-": stdin);
                                   NULL: none */
    const char *ms_per_step;    /* milliseconds a step, as given; NULL: 10 */
    int summary;                /* --summary asked for */
    int64_t num_blocks;         /* the pool (--num-blocks); 0: not given */
    unsigned others;            /* KV_PLAN_TRACE_* of the options given */
};

/* The requests of o->trace into *t (kv_sim_requests_release frees them),
 * prompts in 512-token blocks, arrivals at step 1 + floor(timestamp /
 * ms_per_step), holding at most max_bytes (0: no limit).  Without a
 * trace nothing is read and *t is left alone, but --ms-per-step and
 * --summary are refused.
 * 0, or -1 with e's message and *usage set: 1 for a refused option (the
 * programs' exit 2), 0 for a trace that cannot be read or is refused
 * (exit 1). */
int kv_plan_trace_load(const struct kv_plan_trace_opts *o, size_t max_bytes,
                       struct kv_sim_requests *t, int *usage,
                       struct kv_err *e);

/* A plan's counters, as kvslot plan --summary prints them. */
struct kv_plan_summary {
    int64_t steps;              /* steps run */
    int64_t prefix_hit_tokens;  /* each request's num_cached_tokens, taken
                                   when it is first scheduled */
    int64_t preemptions;        /* requests preempted */
    int64_t evictions;          /* block hashes evicted */
    int64_t peak_blocks;        /* most blocks in use after a step's
                                   scheduling (the pool less the null
                                   block and the fewest free blocks); 0
                                   before any step */
    /* private */
    int64_t num_blocks, min_free;
    size_t n_reqs;
    unsigned char *seen;        /* requests scheduled once (malloc'd) */
};

/* Counters at zero for a plan of n_reqs requests in a pool of num_blocks
 * blocks (block 0 included); release with kv_plan_summary_release (safe
 * on a zeroed or released struct). */
void kv_plan_summary_init(struct kv_plan_summary *s, int64_t num_blocks,
                          size_t n_reqs);
void kv_plan_summary_release(struct kv_plan_summary *s);

/* Count step ss of the plan.  0, or -1 out of memory (s unchanged). */
int kv_plan_summary_add(struct kv_plan_summary *s,
                        const struct kv_plan_step *ss, struct kv_err *e);

/* Whether the plan stops after step ss: every request finished, or every
 * prompt computed unless decode or a step count (steps_given) asks for
 * more. */
int kv_plan_summary_last(const struct kv_plan_step *ss, int decode,
                         int steps_given);

/* Run plan p for at most max_steps steps (< 0: no limit) until
 * kv_plan_summary_last (steps_given: max_steps >= 0), counting each step
 * into s.  0, or -1 with e (a step refused, or out of memory). */
int kv_plan_summary_run(struct kv_plan *p, int64_t max_steps, int decode,
                        struct kv_plan_summary *s, struct kv_err *e);

#endif
