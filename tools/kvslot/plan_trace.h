/* plan_trace.h - kvslot plan --trace and --summary (plan_trace.c). */
#ifndef KVSLOT_PLAN_TRACE_H
#define KVSLOT_PLAN_TRACE_H
#include <argtable2.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "slot/plan_trace.h"

/* --trace, --ms-per-step and --summary into t[0..2]; returns 3. */
int plan_trace_args(struct arg_str **trace, struct arg_str **msps,
                    struct arg_lit **summary, void **t);

/* With --trace: the requests of the Mooncake trace (libkv's
 * kv_plan_trace_load) as plan's inputs: *n, prompt lengths, token rows
 * (pointers into *table, which holds every token; *table_bytes its size),
 * arrival steps and output lengths, each malloc'd for the caller.  The
 * options of `others` (NULL-terminated: --prompt-lens, --prompts,
 * --arrivals, --output-lens, --salt, --lora-ids) cannot go with it;
 * --summary needs the pool (num_blocks, > 0).  Without --trace,
 * --ms-per-step and --summary are refused and nothing is filled.  0 or an
 * exit code (the error printed). */
int plan_trace_inputs(struct arg_str *trace, struct arg_str *msps,
                      struct arg_lit *summary, int64_t num_blocks,
                      struct arg_str **others, size_t max_mem, size_t *n,
                      int64_t **plens, int64_t ***tokens, int64_t **arrivals,
                      int64_t **table, size_t *table_bytes, int64_t **olens);

/* The summary line, as text or (json) one JSON object with the same
 * names; 0 or the exit code (out of memory). */
int plan_summary_write(FILE *f, const struct kv_plan_summary *s, int json);

#endif
