/* plan_kvgroups.c - a model's KV-cache groups into the scheduler's
 * (plan_kvgroups.h): which manager runs each group, the specs that share
 * a prefix-cache lookup, the refusals, the per-group field names and one
 * group's slot mapping. */
#include <stdlib.h>
#include <string.h>
#include "slot/plan_kvgroups.h"
#include "slot/groups.h"
#include "core/cli.h"

void kv_plan_groups_init(struct kv_plan_groups *pg)
{
    memset(pg, 0, sizeof *pg);
}

void kv_plan_groups_release(struct kv_plan_groups *pg)
{
    free(pg->g);
    free(pg->fields);
    free(pg->bt_sel);
    free(pg->sm_sel);
    kv_plan_groups_init(pg);
}

static const char *spec_name(int kind)
{
    return kind == KV_PLAN_GROUP_SLIDING ? "SlidingWindowSpec"
                                         : "ChunkedLocalAttentionSpec";
}

/* What vLLM 0.33.0 says when context parallelism meets a group it does
 * not support, or what the plan does not model: 0 or -1.  Its Scheduler
 * hands the KV cache manager the DCP size and a PCP size of 1, so the
 * coordinator's and the managers' PCP assertions never fire; PCP is
 * refused by the model runner instead (MRV2 PCPManager.validate_config)
 * for every model without MLA.  The managers' DCP assertions sit in the
 * prefix-cache lookup: without prefix caching only the sliding window's
 * start-up check refuses DCP. */
static int cp_refusal(const struct kv_plan_groups *pg,
                      const struct kv_groups *gs, int64_t dcp, int64_t pcp,
                      int apc, struct kv_err *e)
{
    for (size_t g = 0; g < pg->n; g++) {
        int k = pg->g[g].kind;
        int mla = gs->group[g].kind == KV_CACHE_MLA_SLIDING;
        const char *what = k == KV_PLAN_GROUP_SLIDING ? "sliding window"
                                                      : "chunked local";
        if (k == KV_PLAN_GROUP_FULL || k == KV_PLAN_GROUP_MAMBA)
            continue;
        if (pcp > 1 && !mla)
            /* MRV2 PCPManager.validate_config, at start-up */
            return kv_err_set(e, "vLLM 0.33.0 refuses --pcp-size %lld for a "
                              "model without MLA (group %zu is %s): MRV2 PCP "
                              "currently supports MLA models only.",
                              (long long)pcp, g, what);
        if (dcp > 1 && k == KV_PLAN_GROUP_SLIDING)
            /* SlidingWindowSpec.max_memory_usage_bytes, at start-up */
            return kv_err_set(e, "vLLM 0.33.0 refuses group %zu with "
                              "--cp-size %lld: DCP not support sliding "
                              "window.", g, (long long)dcp);
        if (pcp > 1)
            return kv_err_set(e, "group %zu (sliding-window MLA) with "
                              "--pcp-size %lld: plan does not model it "
                              "(vLLM 0.33.0's scheduler leaves prefill "
                              "context parallelism out)", g, (long long)pcp);
        if (dcp > 1 && apc && pg->n > 1)
            return kv_err_set(e, "vLLM 0.33.0 refuses group %zu with "
                              "--cp-size %lld: DCP with hybrid KV cache "
                              "layouts only supports full-attention, Mamba, "
                              "and replicated draft groups, got: %s.", g,
                              (long long)dcp, spec_name(k));
        if (dcp > 1 && apc)
            return kv_err_set(e, "vLLM 0.33.0 refuses group %zu with "
                              "--cp-size %lld: DCP not support %s attn now.",
                              g, (long long)dcp, what);
        if (dcp > 1)
            return kv_err_set(e, "group %zu (%s) with --cp-size %lld and no "
                              "prefix caching: plan does not model it "
                              "(vLLM 0.33.0's scheduler refuses it only in "
                              "the prefix-cache lookup)", g, what,
                              (long long)dcp);
    }
    return 0;
}

/* Whether Mamba groups run in cache mode align: as asked, else as vLLM's
 * engine derives it (align with prefix caching, none without). */
static int mamba_align(const struct kv_plan_groups_opts *o)
{
    if (o->mamba_cache_mode)
        return !strcmp(o->mamba_cache_mode, "align");
    return o->prefix_caching;
}

/* The block size the plan counts in: with Mamba in cache mode align,
 * vLLM's cache block size, the Mamba block (attention groups of smaller
 * pages have larger blocks); else the first attention group's. */
static int64_t ref_block(const struct kv_groups *gs, int64_t attn,
                         const struct kv_plan_groups_opts *o)
{
    if (gs->mamba_block_size && mamba_align(o))
        return gs->block_size;
    return gs->group[attn].block_size;
}

/* Whether group q holds an MLA latent beside its indexer caches: a
 * uniform-type group whose first layer is an indexer (the order a packed
 * grouping can give) runs, as vLLM's scheduler runs its first spec, an
 * MLAAttentionSpec, as full attention. */
static int with_latent(const struct kv_groups *gs, const struct kv_group *q)
{
    for (size_t i = 0; i < q->n_specs; i++)
        if (gs->spec[q->specs[i]].kind == KV_CACHE_MLA)
            return 1;
    return 0;
}

/* Group g of gs as the scheduler runs it, into pg->g[g] (attn: the first
 * attention group so far, -1 before it).  0 or -1. */
static int plan_group(struct kv_plan_groups *pg, const struct kv_groups *gs,
                      size_t g, int64_t attn,
                      const struct kv_plan_groups_opts *o, struct kv_err *e)
{
    const struct kv_group *q = &gs->group[g];
    struct kv_plan_group *p = &pg->g[g];
    if (q->kind == KV_CACHE_MLA_INDEXER && !with_latent(gs, q))
        return kv_err_set(e, "group %zu is %s: plan does not model it (man "
                          "1 kvslot, KV-cache groups in the plan)", g,
                          kv_cache_kind_name(q->kind));
    if (q->kind == KV_CACHE_MAMBA) {
        if (o->prefix_caching && !mamba_align(o))
            return kv_err_set(e, "group %zu is mamba, in cache mode none with "
                              "prefix caching: vLLM 0.33.0's MambaManager "
                              "asserts \"Mamba prefix caching requires "
                              "mamba_cache_mode='align'\"", g);
        if (o->dcp > 1 || o->pcp > 1)
            return kv_err_set(e, "group %zu is mamba: context parallelism "
                              "with it is not modelled", g);
        p->kind = KV_PLAN_GROUP_MAMBA;
        p->block_size = q->block_size;
        p->align = mamba_align(o);
        p->spec = (int64_t)g;
        return 0;
    }
    if (attn < 0)
        attn = (int64_t)g;
    /* the group's own block size where it is not the first attention
     * group's (each group counts its blocks in it) */
    p->block_size = q->block_size != ref_block(gs, attn, o)
                        ? q->block_size : 0;
    /* SlidingWindowMLASpec runs under vLLM's SlidingWindowManager and
     * MLAAttentionSpec under its FullAttentionManager */
    p->kind = q->kind == KV_CACHE_SLIDING || q->kind == KV_CACHE_MLA_SLIDING
                  ? KV_PLAN_GROUP_SLIDING
              : q->kind == KV_CACHE_CHUNKED ? KV_PLAN_GROUP_CHUNKED
                                            : KV_PLAN_GROUP_FULL;
    p->window = p->kind == KV_PLAN_GROUP_FULL ? 0 : q->window;
    /* one spec: the same kind, window, block and page (vLLM compares
     * every field of the spec) */
    p->spec = (int64_t)g;
    for (size_t h = 0; h < g; h++)
        if (gs->group[h].kind == q->kind && gs->group[h].window == q->window &&
            gs->group[h].block_size == q->block_size &&
            gs->group[h].layer_page_bytes == q->layer_page_bytes &&
            gs->group[h].uniform_type == q->uniform_type) {
            p->spec = pg->g[h].spec;
            break;
        }
    return 0;
}

/* With prefix caching, vLLM 0.33.0's ChunkedLocalAttentionManager asserts
 * at the first lookup that a chunked local group's blocks are the hit
 * alignment, the LCM of every group's block size: that every block size
 * divides them.  0 or -1. */
static int chunked_refusal(const struct kv_groups *gs, struct kv_err *e)
{
    for (size_t g = 0; g < gs->n_groups; g++)
        for (size_t h = 0; gs->group[g].kind == KV_CACHE_CHUNKED &&
                           h < gs->n_groups; h++)
            if (gs->group[g].block_size % gs->group[h].block_size)
                return kv_err_set(e, "vLLM 0.33.0 refuses group %zu (chunked "
                                  "local, blocks of %lld tokens, not a "
                                  "multiple of group %zu's %lld) with prefix "
                                  "caching: KV cache groups with different "
                                  "block sizes are not compatible with "
                                  "chunked local attention now", g,
                                  (long long)gs->group[g].block_size, h,
                                  (long long)gs->group[h].block_size);
    return 0;
}

/* The groups of gs into pg, refused where the plan or vLLM refuses them.
 * 0 or -1 (a usage error). */
static int plan_groups_of(struct kv_plan_groups *pg, const struct kv_groups *gs,
                          const struct kv_plan_groups_opts *o, struct kv_err *e)
{
    int64_t attn = -1;          /* the first attention group */
    int64_t differ = -1;        /* the first of another block size */
    int apc = o->prefix_caching;

    for (size_t g = 0; g < gs->n_groups; g++) {
        const struct kv_group *q = &gs->group[g];
        if (plan_group(pg, gs, g, attn, o, e))
            return -1;
        if (q->kind == KV_CACHE_MAMBA)
            continue;
        if (attn >= 0 && q->block_size != gs->group[attn].block_size &&
            differ < 0)
            differ = (int64_t)g;
        if (attn < 0)
            attn = (int64_t)g;
    }
    pg->n = gs->n_groups;
    if (attn < 0)
        return kv_err_set(e, "no attention group: plan needs one");
    pg->block_size = ref_block(gs, attn, o);
    if (cp_refusal(pg, gs, o->dcp, o->pcp, apc, e))
        return -1;
    if (differ >= 0 && (o->dcp > 1 || o->pcp > 1))
        return kv_err_set(e, "groups %lld and %lld have blocks of %lld and "
                          "%lld tokens: plan models attention groups of "
                          "different block sizes without context "
                          "parallelism only", (long long)attn,
                          (long long)differ,
                          (long long)gs->group[attn].block_size,
                          (long long)gs->group[differ].block_size);
    return differ >= 0 && apc ? chunked_refusal(gs, e) : 0;
}

int kv_plan_groups_load(struct kv_plan_groups *pg,
                        const struct kv_plan_groups_opts *o, int *usage,
                        struct kv_err *e)
{
    struct kv_groups_opts go = { 0, 0, 0, 0, 0 };
    struct kv_groups gs;
    int rc;

    kv_plan_groups_release(pg);
    *usage = 1;
    if (!o->model_config && !o->kv_groups) {
        if (o->kernel_block || o->mamba_cache_mode)
            return kv_err_set(e, "%s needs --model-config or --kv-groups",
                              o->kernel_block ? "--kernel-block"
                                              : "--mamba-cache-mode");
        return 0;
    }
    if (o->mamba_cache_mode && strcmp(o->mamba_cache_mode, "none") &&
        strcmp(o->mamba_cache_mode, "align"))
        return kv_err_set(e, "--mamba-cache-mode: expected none or align, "
                          "got '%s'", o->mamba_cache_mode);
    if (o->model_config && o->kv_groups)
        return kv_err_set(e, "give --model-config FILE or --kv-groups SPEC, "
                          "not both");
    go.block_size = o->block_size;
    go.max_model_len = o->max_model_len;
    go.kernel_block = 16;
    go.mamba_align = mamba_align(o);
    if (o->kernel_block && kv_parse_i64(o->kernel_block, "--kernel-block", 1,
                                        1 << 20, &go.kernel_block, e))
        return -1;
    kv_groups_init(&gs);
    if (kv_groups_load(&gs, o->model_config, o->kv_groups, &go, usage, e)) {
        kv_groups_release(&gs);
        return -1;
    }
    *usage = 1;
    pg->g = calloc(gs.n_groups ? gs.n_groups : 1, sizeof *pg->g);
    if (!pg->g) {
        kv_groups_release(&gs);
        *usage = 0;
        return kv_err_set(e, "out of memory");
    }
    rc = plan_groups_of(pg, &gs, o, e);
    kv_groups_release(&gs);
    return rc;
}

/* Whether name is base.gK (1; K into *k), not (0) or base.g and no
 * number (-1). */
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

/* Append name[len] to the list at out (at: its length so far). */
static void append(char *out, size_t *at, const char *name, size_t len)
{
    if (*at)
        out[(*at)++] = ',';
    memcpy(out + *at, name, len);
    *at += len;
}

int kv_plan_groups_fields(struct kv_plan_groups *pg, const char *fields,
                          struct kv_err *e)
{
    size_t ng = pg->n ? pg->n : 1, at = 0;
    int bt_seen = 0, sm_seen = 0;

    free(pg->bt_sel);
    free(pg->sm_sel);
    free(pg->fields);
    pg->bt_sel = calloc(ng, 1);
    pg->sm_sel = calloc(ng, 1);
    pg->fields = fields ? malloc(strlen(fields) + 1) : NULL;
    if (!pg->bt_sel || !pg->sm_sel || (fields && !pg->fields))
        return kv_err_set(e, "out of memory");
    if (!fields) {
        memset(pg->bt_sel, 1, ng);
        memset(pg->sm_sel, 1, ng);
    }
    for (const char *s = fields; s && *s;) {
        size_t len = strcspn(s, ","), k = 0;
        int bt = group_field(s, len, "block_table", &k);
        int sm = bt ? 0 : group_field(s, len, "slot_mapping", &k);
        int plain_bt = len == 11 && !strncmp(s, "block_table", 11);
        int plain_sm = len == 12 && !strncmp(s, "slot_mapping", 12);
        if (bt || sm) {
            if (!pg->n)
                return kv_err_set(e, "--fields: '%.*s' names a KV-cache "
                                  "group: it needs --model-config or "
                                  "--kv-groups", (int)len, s);
            if (bt < 0 || sm < 0 || k >= pg->n)
                return kv_err_set(e, "--fields: '%.*s': the groups are g0 "
                                  "to g%zu", (int)len, s, pg->n - 1);
            if (sm && pg->g[k].kind == KV_PLAN_GROUP_MAMBA)
                return kv_err_set(e, "--fields: '%.*s': group %zu is mamba, "
                                  "its block table holds its state blocks "
                                  "and it has no slot mapping", (int)len, s,
                                  k);
            (bt ? pg->bt_sel : pg->sm_sel)[k] = 1;
        } else if (plain_bt || plain_sm) {
            memset(plain_bt ? pg->bt_sel : pg->sm_sel, 1, ng);
        }
        /* the base name once, where it first appears */
        if (!((bt || plain_bt) && bt_seen) && !((sm || plain_sm) && sm_seen)) {
            if (bt || sm)
                append(pg->fields, &at, bt ? "block_table" : "slot_mapping",
                       bt ? 11 : 12);
            else
                append(pg->fields, &at, s, len);
        }
        bt_seen |= bt || plain_bt;
        sm_seen |= sm || plain_sm;
        s += len;
        if (*s == ',')
            s++;
    }
    if (pg->fields)
        pg->fields[at] = '\0';
    for (size_t g = 0; g < pg->n; g++)
        if (pg->g[g].kind == KV_PLAN_GROUP_MAMBA)
            pg->sm_sel[g] = 0;
    return 0;
}

void kv_plan_group_slots(const struct kv_slot_geom *g,
                         const struct kv_plan_step *ss,
                         const struct kv_plan_group *groups, size_t k,
                         int64_t *out, size_t pad_to)
{
    struct kv_slot_table t = { NULL, 0, 0, NULL };
    struct kv_slot_geom gk = *g;        /* in the group's block size */
    size_t q = 0;
    if (groups && groups[k].block_size)
        gk.block_size = gk.kernel_block_size = groups[k].block_size;
    t.ids = ss->tables + k * ss->n_rows * ss->n_cols;
    t.n_rows = ss->n_rows;
    t.n_cols = ss->n_cols;
    /* the step's counts passed kv_slot_compute's checks; every group
     * holds a block for each position it schedules */
    for (size_t r = 0; r < ss->n_rows; r++) {
        (void)kv_slot_fill(&gk, &t, r, ss->num_computed[r],
                           ss->num_scheduled[r], KV_SLOT_SLOT_MAPPING,
                           out + q);
        q += (size_t)ss->num_scheduled[r];
    }
    for (size_t j = q; j < pad_to; j++)
        out[j] = KV_SLOT_PAD;
}
