/* kvslot plan: --model-config / --kv-groups (the KV-cache groups kvslot
 * groups derives) into the scheduler's groups, and --fields' per-group
 * names, through libkv's kv_plan_groups_load and kv_plan_groups_fields. */
#include "plan_groups.h"

int plan_groups_args(struct plan_groups *pg, void **t)
{
    int n = 0;
    kv_plan_groups_init(&pg->k);
    pg->skip = NULL;
    t[n++] = pg->mc = arg_str0(NULL, "model-config", "FILE",
                               "KV-cache groups of a Hugging Face "
                               "config.json (as kvslot groups)");
    t[n++] = pg->kg = arg_str0(NULL, "kv-groups", "SPEC",
                               "KV-cache groups spelled out (man 1 kvslot, "
                               "GROUPS)");
    t[n++] = pg->kb = arg_str0(NULL, "kernel-block", "K",
                               "with the groups: the backend's smallest "
                               "kernel block (default 16)");
    t[n++] = pg->mm = arg_str0(NULL, "mamba-cache-mode", "MODE",
                               "with the groups: none|align (default: "
                               "align with prefix caching, else none)");
    return n;
}

int plan_groups_load(struct plan_groups *pg, int64_t B, int64_t M,
                     int64_t dcp, int64_t pcp, int apc)
{
    struct kv_plan_groups_opts o;
    struct kv_err e;
    int usage = 0;

    memset(&o, 0, sizeof o);
    o.model_config = pg->mc->count ? pg->mc->sval[0] : NULL;
    o.kv_groups = pg->kg->count ? pg->kg->sval[0] : NULL;
    o.mamba_cache_mode = pg->mm->count ? pg->mm->sval[0] : NULL;
    o.kernel_block = pg->kb->count ? pg->kb->sval[0] : NULL;
    o.block_size = B;
    o.max_model_len = M;
    o.dcp = dcp;
    o.pcp = pcp;
    o.prefix_caching = apc;
    if (kv_plan_groups_load(&pg->k, &o, &usage, &e))
        return usage ? kv_usage("%s", e.msg) : kv_fail_err(&e);
    return 0;
}

int plan_groups_fields(struct plan_groups *pg, const char *fields)
{
    struct kv_err e;
    pg->skip = calloc(pg->k.n ? pg->k.n : 1, 1);
    if (!pg->skip)
        return kv_fail("out of memory");
    if (kv_plan_groups_fields(&pg->k, fields, &e))
        return strncmp(e.msg, "out of memory", 13) ? kv_usage("%s", e.msg)
                                                   : kv_fail_err(&e);
    return 0;
}

void plan_groups_free(struct plan_groups *pg)
{
    kv_plan_groups_release(&pg->k);
    free(pg->skip);
}
