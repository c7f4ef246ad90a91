/* kvslot plan with KV-cache groups: --model-config / --kv-groups into the
 * scheduler's groups, and the per-group fields of --fields (the work is
 * libkv's, slot/plan_kvgroups.h). */
#ifndef KVSLOT_PLAN_GROUPS_H
#define KVSLOT_PLAN_GROUPS_H
#include "kvslot.h"
#include "slot/plan.h"
#include "slot/plan_kvgroups.h"

struct plan_groups {
    struct arg_str *mc, *kg, *kb, *mm;
    struct kv_plan_groups k;    /* n = 0 without the options */
    unsigned char *skip;        /* per group: no field writes its table */
};

/* The options, into t; returns how many. */
int plan_groups_args(struct plan_groups *pg, void **t);

/* The groups of the options (none given: pg->k.n = 0), with -B, the max
 * model len and the context-parallel sizes (DCP dcp, PCP pcp) refused
 * where vLLM 0.33.0 refuses them; with prefix caching (apc) or not.
 * 0 or an exit code. */
int plan_groups_load(struct plan_groups *pg, int64_t B, int64_t M,
                     int64_t dcp, int64_t pcp, int apc);

/* --fields (NULL: the defaults) for parse_fields: block_table.gK and
 * slot_mapping.gK select group K's (plain names: every group's); into
 * pg->k.fields, bt_sel, sm_sel.  0 or an exit code. */
int plan_groups_fields(struct plan_groups *pg, const char *fields);

void plan_groups_free(struct plan_groups *pg);

#endif
