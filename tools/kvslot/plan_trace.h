/* plan_trace.h - kvslot plan --trace and --summary (plan_trace.c). */
#ifndef KVSLOT_PLAN_TRACE_H
#define KVSLOT_PLAN_TRACE_H
#include <argtable2.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "slot/plan.h"

/* --summary's counters over a plan's steps. */
struct plan_summary {
    int64_t num_blocks;       /* the pool, block 0 included */
    int64_t steps, hit_tokens, preemptions, evictions, min_free;
    unsigned char *seen;      /* requests scheduled once (malloc'd) */
};

/* --trace, --ms-per-step and --summary into t[0..2]; returns 3. */
int plan_trace_args(struct arg_str **trace, struct arg_str **msps,
                    struct arg_lit **summary, void **t);

/* With --trace: the requests of the Mooncake trace (lib/sim/requests.h) as
 * plan's inputs: *n, prompt lengths, token rows (pointers into *table,
 * which holds every token; *table_bytes its size), arrival steps and
 * output lengths, each malloc'd for the caller.  The options of
 * `others` (NULL-terminated: --prompt-lens, --prompts, --arrivals,
 * --output-lens, --salt, --lora-ids) cannot go with it; --summary needs
 * the pool (num_blocks, > 0), which goes into sum.  Without --trace,
 * --ms-per-step and --summary are refused and nothing is filled.  0 or an
 * exit code (the error printed). */
int plan_trace_inputs(struct arg_str *trace, struct arg_str *msps,
                      struct arg_lit *summary, int64_t num_blocks,
                      struct plan_summary *sum, struct arg_str **others,
                      size_t max_mem, size_t *n, int64_t **plens,
                      int64_t ***tokens, int64_t **arrivals, int64_t **table,
                      size_t *table_bytes, int64_t **olens);

/* Count one step (n_reqs: the plan's requests); 0 or an exit code. */
int plan_summary_add(struct plan_summary *s, const struct kv_plan_step *ss,
                     size_t n_reqs);
/* The summary line, as text or (json) one JSON object with the same
 * names; 0 or the exit code (out of memory). */
int plan_summary_write(FILE *f, const struct plan_summary *s, int json);

#endif
