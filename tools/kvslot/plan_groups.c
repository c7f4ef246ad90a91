/* kvslot plan: --model-config / --kv-groups (the KV-cache groups kvslot
 * groups derives) into the scheduler's groups, and --fields' per-group
 * names. */
#include "plan_groups.h"
#include "slot/groups.h"

int plan_groups_args(struct plan_groups *pg, void **t)
{
    int n = 0;
    pg->n = 0;
    pg->g = NULL;
    pg->fields = NULL;
    pg->bt_sel = pg->sm_sel = pg->skip = NULL;
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
                               "with the groups: none (default; align is "
                               "not modelled)");
    return n;
}

static const char *spec_name(int kind)
{
    return kind == KV_PLAN_GROUP_SLIDING ? "SlidingWindowSpec"
                                         : "ChunkedLocalAttentionSpec";
}

/* What vLLM 0.33.0 says when context parallelism meets a group it does
 * not support: 0 or a usage exit code. */
static int cp_refusal(const struct plan_groups *pg, int64_t dcp, int64_t pcp,
                      int apc)
{
    for (size_t g = 0; g < pg->n; g++) {
        int k = pg->g[g].kind;
        const char *what = k == KV_PLAN_GROUP_SLIDING ? "sliding window"
                                                      : "chunked local";
        if (k == KV_PLAN_GROUP_FULL)
            continue;
        if (dcp > 1 && k == KV_PLAN_GROUP_SLIDING)
            /* SlidingWindowSpec.max_memory_usage_bytes, at start-up */
            return kv_usage("vLLM 0.33.0 refuses group %zu with --cp-size "
                            "%lld: DCP not support sliding window.", g,
                            (long long)dcp);
        if (pg->n > 1 && apc && pcp > 1)
            return kv_usage("vLLM 0.33.0 refuses group %zu with --pcp-size "
                            "%lld: PCP only supports full attention and "
                            "replicated draft groups.", g, (long long)pcp);
        if (pg->n > 1 && apc && dcp > 1)
            return kv_usage("vLLM 0.33.0 refuses group %zu with --cp-size "
                            "%lld: DCP with hybrid KV cache layouts only "
                            "supports full-attention, Mamba, and replicated "
                            "draft groups, got: %s.", g, (long long)dcp,
                            spec_name(k));
        if (dcp > 1 || pcp > 1)
            return kv_usage("vLLM 0.33.0 refuses group %zu with --%s %lld: "
                            "%s not support %s attn now.", g,
                            dcp > 1 ? "cp-size" : "pcp-size",
                            (long long)(dcp > 1 ? dcp : pcp),
                            dcp > 1 ? "DCP" : "PCP", what);
    }
    return 0;
}

int plan_groups_load(struct plan_groups *pg, int64_t B, int64_t M,
                     int64_t dcp, int64_t pcp, int apc)
{
    struct kv_groups_opts o = { 0, 0, 0, 0, 0 };
    struct kv_groups gs;
    struct kv_err e;
    int64_t attn = -1;          /* the first attention group */
    int64_t differ = -1;        /* the first of another block size */
    int rc = 0;

    pg->n = 0;
    if (!pg->mc->count && !pg->kg->count) {
        if (pg->kb->count || pg->mm->count)
            return kv_usage("%s needs --model-config or --kv-groups",
                            pg->kb->count ? "--kernel-block"
                                          : "--mamba-cache-mode");
        return 0;
    }
    if (pg->mm->count && strcmp(pg->mm->sval[0], "none"))
        return kv_usage("--mamba-cache-mode %s: plan models none (vLLM's "
                        "mode without prefix caching); align's chunk "
                        "splitting and state checkpoints are not modelled",
                        pg->mm->sval[0]);
    if (pg->mc->count && pg->kg->count)
        return kv_usage("give --model-config FILE or --kv-groups SPEC, not "
                        "both");
    o.block_size = B;
    o.max_model_len = M;
    if ((rc = opt_i64(pg->kb, "--kernel-block", 1, 1 << 20, 16,
                      &o.kernel_block)))
        return rc;
    kv_groups_init(&gs);
    if (pg->mc->count ? kv_groups_from_config(&gs, pg->mc->sval[0], &o, &e)
                      : kv_groups_from_spec(&gs, pg->kg->sval[0], &o, &e)) {
        rc = pg->mc->count ? kv_fail_err(&e) : kv_usage("--kv-groups: %s",
                                                         e.msg);
        goto done;
    }
    pg->g = calloc(gs.n_groups ? gs.n_groups : 1, sizeof *pg->g);
    if (!pg->g) {
        rc = kv_fail("out of memory");
        goto done;
    }
    for (size_t g = 0; g < gs.n_groups; g++) {
        const struct kv_group *q = &gs.group[g];
        struct kv_plan_group *p = &pg->g[g];
        if (q->kind == KV_CACHE_MLA_INDEXER) {
            rc = kv_usage("group %zu is %s: plan does not model it (man 1 "
                          "kvslot, KV-cache groups in the plan)", g,
                          kv_cache_kind_name(q->kind));
            goto done;
        }
        if (q->kind == KV_CACHE_MAMBA) {
            if (apc) {
                rc = kv_usage("group %zu is mamba: vLLM 0.33.0 refuses "
                              "prefix caching with it unless "
                              "mamba_cache_mode='align' (not modelled)", g);
                goto done;
            }
            if (dcp > 1 || pcp > 1) {
                rc = kv_usage("group %zu is mamba: context parallelism with "
                              "it is not modelled", g);
                goto done;
            }
            p->kind = KV_PLAN_GROUP_MAMBA;
            p->block_size = q->block_size;
            p->spec = (int64_t)g;
            continue;
        }
        if (attn >= 0 && q->block_size != gs.group[attn].block_size &&
            differ < 0)
            differ = (int64_t)g;
        if (attn < 0)
            attn = (int64_t)g;
        /* the group's own block size where it is not the first
         * attention group's (each group counts its blocks in it) */
        p->block_size = q->block_size != gs.group[attn].block_size
                            ? q->block_size : 0;
        /* SlidingWindowMLASpec runs under vLLM's SlidingWindowManager and
         * MLAAttentionSpec under its FullAttentionManager */
        p->kind = q->kind == KV_CACHE_SLIDING ||
                          q->kind == KV_CACHE_MLA_SLIDING
                      ? KV_PLAN_GROUP_SLIDING
                  : q->kind == KV_CACHE_CHUNKED ? KV_PLAN_GROUP_CHUNKED
                                                : KV_PLAN_GROUP_FULL;
        p->window = p->kind == KV_PLAN_GROUP_FULL ? 0 : q->window;
        /* one spec: the same kind, window and page (vLLM compares every
         * field of the spec) */
        p->spec = (int64_t)g;
        for (size_t h = 0; h < g; h++)
            if (gs.group[h].kind == q->kind && gs.group[h].window == q->window &&
                gs.group[h].layer_page_bytes == q->layer_page_bytes &&
                gs.group[h].uniform_type == q->uniform_type) {
                p->spec = pg->g[h].spec;
                break;
            }
    }
    pg->n = gs.n_groups;
    if (attn < 0) {
        rc = kv_usage("no attention group: plan needs one");
        goto done;
    }
    pg->block_size = gs.group[attn].block_size;
    rc = cp_refusal(pg, dcp, pcp, apc);
    if (!rc && differ >= 0 && (apc || dcp > 1 || pcp > 1))
        rc = kv_usage("groups %lld and %lld have blocks of %lld and %lld "
                      "tokens: plan models attention groups of different "
                      "block sizes without prefix caching and context "
                      "parallelism only (vLLM's hash block of their GCD and "
                      "hit alignment of their LCM are not modelled)",
                      (long long)attn, (long long)differ,
                      (long long)gs.group[attn].block_size,
                      (long long)gs.group[differ].block_size);
done:
    kv_groups_release(&gs);
    return rc;
}

/* Whether name is base.gK; K into *k. */
static int group_field(const char *name, size_t len, const char *base,
                       size_t *k)
{
    size_t bl = strlen(base), v = 0;
    if (len <= bl + 2 || strncmp(name, base, bl) || name[bl] != '.' ||
        name[bl + 1] != 'g')
        return 0;
    for (size_t i = bl + 2; i < len; i++) {
        if (name[i] < '0' || name[i] > '9' || v > 100000)
            return -1;
        v = v * 10 + (size_t)(name[i] - '0');
    }
    *k = v;
    return 1;
}

int plan_groups_fields(struct plan_groups *pg, const char *fields)
{
    size_t ng = pg->n ? pg->n : 1, at = 0;
    int bt_seen = 0, sm_seen = 0;

    pg->bt_sel = calloc(ng, 1);
    pg->sm_sel = calloc(ng, 1);
    pg->skip = calloc(ng, 1);
    pg->fields = fields ? malloc(strlen(fields) + 1) : NULL;
    if (!pg->bt_sel || !pg->sm_sel || !pg->skip || (fields && !pg->fields))
        return kv_fail("out of memory");
    if (!fields) {
        memset(pg->bt_sel, 1, ng);
        memset(pg->sm_sel, 1, ng);
        for (size_t g = 0; g < pg->n; g++)
            if (pg->g[g].kind == KV_PLAN_GROUP_MAMBA)
                pg->sm_sel[g] = 0;
        return 0;
    }
    for (const char *s = fields; *s;) {
        size_t len = strcspn(s, ","), k = 0;
        int bt = group_field(s, len, "block_table", &k);
        int sm = bt ? 0 : group_field(s, len, "slot_mapping", &k);
        int plain_bt = len == 11 && !strncmp(s, "block_table", 11);
        int plain_sm = len == 12 && !strncmp(s, "slot_mapping", 12);
        if (bt || sm) {
            if (!pg->n)
                return kv_usage("--fields: '%.*s' names a KV-cache group: "
                                "it needs --model-config or --kv-groups",
                                (int)len, s);
            if (bt < 0 || sm < 0 || k >= pg->n)
                return kv_usage("--fields: '%.*s': the groups are g0 to "
                                "g%zu", (int)len, s, pg->n - 1);
            if (sm && pg->g[k].kind == KV_PLAN_GROUP_MAMBA)
                return kv_usage("--fields: '%.*s': group %zu is mamba, its "
                                "block table holds its state blocks and it "
                                "has no slot mapping", (int)len, s, k);
            (bt ? pg->bt_sel : pg->sm_sel)[k] = 1;
        } else if (plain_bt || plain_sm) {
            memset(plain_bt ? pg->bt_sel : pg->sm_sel, 1, ng);
        }
        /* the base name once, where it first appears */
        if (!((bt || plain_bt) && bt_seen) && !((sm || plain_sm) && sm_seen)) {
            const char *nm = bt ? "block_table" : sm ? "slot_mapping" : NULL;
            if (at)
                pg->fields[at++] = ',';
            if (nm) {
                memcpy(pg->fields + at, nm, strlen(nm));
                at += strlen(nm);
            } else {
                memcpy(pg->fields + at, s, len);
                at += len;
            }
        }
        bt_seen |= bt || plain_bt;
        sm_seen |= sm || plain_sm;
        s += len;
        if (*s == ',')
            s++;
    }
    pg->fields[at] = '\0';
    for (size_t g = 0; g < pg->n; g++)
        if (pg->g[g].kind == KV_PLAN_GROUP_MAMBA)
            pg->sm_sel[g] = 0;
    return 0;
}

void plan_groups_free(struct plan_groups *pg)
{
    free(pg->g);
    free(pg->fields);
    free(pg->bt_sel);
    free(pg->sm_sel);
    free(pg->skip);
}
