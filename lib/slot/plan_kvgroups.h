/* plan_kvgroups.h - the KV-cache groups of a model (groups.h) turned into
 * the scheduler's groups (plan.h, struct kv_plan_group), with the
 * refusals vLLM 0.33.0 makes and those of what the plan does not model;
 * the per-group fields (block_table.gK, slot_mapping.gK) of a field list;
 * and one group's slot mapping of a step.  kvslot plan --model-config /
 * --kv-groups and the Python binding both call these. */
#ifndef KV_PLAN_KVGROUPS_H
#define KV_PLAN_KVGROUPS_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "slot/plan.h"
#include "slot/slot.h"

/* What selects the groups and how vLLM runs around them. */
struct kv_plan_groups_opts {
    const char *model_config;   /* a config.json path ("-": stdin), or */
    const char *kv_groups;      /* a spec (kvslot(1), GROUPS); neither:
                                   no groups */
    const char *mamba_cache_mode; /* NULL or "none" (align: refused) */
    const char *kernel_block;   /* the backend's smallest kernel block,
                                   as given (NULL: 16) */
    int64_t block_size;         /* -B */
    int64_t max_model_len;
    int64_t dcp, pcp;           /* context-parallel sizes (1: none) */
    int prefix_caching;
};

/* The groups and the field selection; owns its arrays
 * (kv_plan_groups_release, safe on an initialised struct). */
struct kv_plan_groups {
    size_t n;                   /* groups; 0 without them */
    struct kv_plan_group *g;
    int64_t block_size;         /* the first attention group's */
    char *fields;               /* the field list with .gK names folded
                                   into their base name, once each; NULL
                                   for the defaults */
    unsigned char *bt_sel, *sm_sel; /* per group: block_table.gK and
                                       slot_mapping.gK are selected */
};

void kv_plan_groups_init(struct kv_plan_groups *pg);
void kv_plan_groups_release(struct kv_plan_groups *pg);

/* The groups of o into pg (none asked for: pg->n = 0).  On failure -1,
 * e's message and *usage set: 1 for a refused option (the programs'
 * exit 2), 0 for a bad config file (exit 1). */
int kv_plan_groups_load(struct kv_plan_groups *pg,
                        const struct kv_plan_groups_opts *o, int *usage,
                        struct kv_err *e);

/* A field list (NULL: the defaults) after kv_plan_groups_load:
 * block_table.gK and slot_mapping.gK select group K's (plain names:
 * every group's); a Mamba group has no slot mapping.  Fills pg->fields,
 * bt_sel and sm_sel.  0, or -1 for a refused list (a usage error). */
int kv_plan_groups_fields(struct kv_plan_groups *pg, const char *fields,
                          struct kv_err *e);

/* Group k's slot mapping of step ss into out[pad_to] (-1 padded): its
 * table of ss->tables read in its own block size (g is the plan's
 * geometry).  The step's counts have passed kv_slot_compute. */
void kv_plan_group_slots(const struct kv_slot_geom *g,
                         const struct kv_plan_step *ss,
                         const struct kv_plan_group *groups, size_t k,
                         int64_t *out, size_t pad_to);

#endif
