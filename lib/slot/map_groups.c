/* map_groups.c - one step's metadata with KV-cache groups
 * (map_groups.h): the groups and the options refused with them, each
 * group's table, the per-group fields, each group's step in its own block
 * size, and the table reader and int32 checks map shares with its run
 * without groups. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "slot/map_groups.h"
#include "core/cli.h"

void kv_map_groups_init(struct kv_map_groups *m)
{
    memset(m, 0, sizeof *m);
}

void kv_map_groups_release(struct kv_map_groups *m)
{
    for (size_t k = 0; m->g && k < m->n; k++)
        kv_slot_step_release(&m->g[k].st);
    free(m->g);
    kv_map_groups_init(m);
}

int kv_map_cp_parse(const char *cp_size, const char *cp_rank, const char *pcp_size,
                    const char *pcp_rank, const char *interleave, const char *convention,
                    int64_t cp[5], struct kv_err *e)
{
    cp[0] = 1, cp[1] = 0, cp[2] = 1, cp[3] = 0, cp[4] = 1;
    if (kv_parse_i64_opt(cp_size, "--cp-size", 1, 1 << 16, &cp[0], e) ||
        kv_parse_i64_opt(cp_rank, "--cp-rank", 0, INT64_MAX, &cp[1], e) ||
        kv_parse_i64_opt(pcp_size, "--pcp-size", 1, 1 << 16, &cp[2], e) ||
        kv_parse_i64_opt(pcp_rank, "--pcp-rank", 0, INT64_MAX, &cp[3], e) ||
        kv_parse_i64_opt(interleave, "--interleave", 1, INT32_MAX, &cp[4], e))
        return -1;
    if (cp[1] >= cp[0])
        return kv_err_set(e, "--cp-rank %lld: expected below --cp-size %lld",
                          (long long)cp[1], (long long)cp[0]);
    if (cp[3] >= cp[2])
        return kv_err_set(e, "--pcp-rank %lld: expected below --pcp-size "
                          "%lld", (long long)cp[3], (long long)cp[2]);
    if (convention && strcmp(convention, "pcp-dcp") && strcmp(convention, "dcp"))
        return kv_err_set(e, "--cp-convention: expected pcp-dcp or dcp, got "
                          "'%s'", convention);
    return 0;
}

/* The context-parallel options of o (kv_map_cp_parse), which groups take
 * on one rank only. */
static int cp_parse(const struct kv_map_groups_opts *o, int64_t cp[5],
                    struct kv_err *e)
{
    if (o->all_ranks)
        return kv_err_set(e, "--all-ranks: not with KV-cache groups (each "
                          "group's slot mapping is one rank's: give "
                          "--cp-rank)");
    if (kv_map_cp_parse(o->cp_size, o->cp_rank, o->pcp_size, o->pcp_rank, o->interleave,
                        o->cp_convention, cp, e))
        return -1;
    if (o->virtual_block && strcmp(o->virtual_block, "physical") &&
        strcmp(o->virtual_block, "kernel"))
        return kv_err_set(e, "--virtual-block: expected kernel or physical, "
                          "got '%s'", o->virtual_block);
    return 0;
}

/* What vLLM 0.33.0 refuses, or map does not model, of context
 * parallelism cp (cp_parse) with the groups of m, of a model with MLA
 * layers (mla) and an indexer among them (sparse); else each attention
 * group's geometry takes the DCP world, rank and interleave.  vLLM's model
 * runner (MRV2, its default) computes every attention group's slot
 * mapping under DCP alone, in the group's block size (BlockTables with
 * cp_size the DCP world); PCP runs only for MLA models
 * (PCPManager.validate_config), and there it rewrites the batch into
 * DualChunkSwap rows, which map does not model. */
static int cp_apply(struct kv_map_groups *m, const int64_t cp[5], int mla,
                    int sparse, struct kv_err *e)
{
    if (cp[2] > 1 && !mla)
        return kv_err_set(e, "vLLM 0.33.0 refuses --pcp-size %lld for a model "
                          "without MLA: MRV2 PCP currently supports MLA "
                          "models only.", (long long)cp[2]);
    if (cp[2] > 1 && cp[0] > 1 && !sparse)
        return kv_err_set(e, "vLLM 0.33.0 refuses --pcp-size %lld with "
                          "--cp-size %lld for a model without an indexer: "
                          "MRV2 PCP + DCP supports sparse MLA models only.",
                          (long long)cp[2], (long long)cp[0]);
    if (cp[2] > 1)
        return kv_err_set(e, "--pcp-size %lld with KV-cache groups: map does "
                          "not model it (vLLM 0.33.0's model runner splits "
                          "the batch into DualChunkSwap rows and writes the "
                          "KV gathered from every PCP rank)",
                          (long long)cp[2]);
    for (size_t k = 0; k < m->n; k++) {
        struct kv_map_group *q = &m->g[k];
        if (q->kind == KV_CACHE_MAMBA)
            continue;       /* a state cache: replicated, no slot mapping */
        if (cp[0] > 1 && (q->kind == KV_CACHE_SLIDING ||
                          q->kind == KV_CACHE_MLA_SLIDING))
            /* SlidingWindowSpec.max_memory_usage_bytes, at start-up */
            return kv_err_set(e, "vLLM 0.33.0 refuses group %zu (%s) with "
                              "--cp-size %lld: DCP not support sliding "
                              "window.", k, kv_cache_kind_name(q->kind),
                              (long long)cp[0]);
        if (q->geom.block_size % cp[4])
            return kv_err_set(e, "--interleave %lld does not divide group "
                              "%zu's block size %lld", (long long)cp[4], k,
                              (long long)q->geom.block_size);
        q->geom.cp_world = cp[0];
        q->geom.cp_rank = cp[1];
        q->geom.interleave = cp[4];
    }
    return 0;
}

int kv_map_groups_load(struct kv_map_groups *m,
                       const struct kv_map_groups_opts *o, int *usage,
                       struct kv_err *e)
{
    struct kv_groups_opts go = { 0, 16, 0, 0, 0 };
    struct kv_groups gs;
    int64_t cp[5];
    int mla = 0, sparse = 0;

    kv_map_groups_release(m);
    *usage = 1;
    if (o->model_config && o->kv_groups)
        return kv_err_set(e, "give --model-config FILE or --kv-groups SPEC, "
                          "not both");
    if (cp_parse(o, cp, e))
        return -1;
    if (o->kernel_block_size)
        return kv_err_set(e, "--kernel-block-size: not with KV-cache groups "
                          "(each group's table is in its group's block "
                          "size)");
    if ((o->block_size && kv_parse_i64(o->block_size, "-B", 1, INT32_MAX,
                                       &go.block_size, e)) ||
        (o->max_model_len &&
         kv_parse_i64(o->max_model_len, "--max-model-len", 1, INT32_MAX,
                      &go.max_model_len, e)) ||
        (o->kernel_block && kv_parse_i64(o->kernel_block, "--kernel-block",
                                         1, 1 << 20, &go.kernel_block, e)))
        return -1;
    kv_groups_init(&gs);
    if (kv_groups_load(&gs, o->model_config, o->kv_groups, &go, usage, e))
        return -1;
    *usage = 1;
    m->first = SIZE_MAX;
    m->g = calloc(gs.n_groups ? gs.n_groups : 1, sizeof *m->g);
    m->n = m->g ? gs.n_groups : 0;
    m->max_model_len = gs.max_model_len;
    for (size_t k = 0; k < m->n; k++) {
        struct kv_map_group *q = &m->g[k];
        q->kind = gs.group[k].kind;
        kv_slot_step_init(&q->st);
        q->geom.block_size = q->geom.kernel_block_size =
            gs.group[k].block_size;
        q->geom.cp_world = 1;
        q->geom.interleave = 1;
        q->geom.virt = KV_SLOT_VIRTUAL_PHYSICAL;
        if (m->first == SIZE_MAX && q->kind != KV_CACHE_MAMBA)
            m->first = k;
    }
    for (size_t i = 0; i < gs.n_specs; i++) {
        enum kv_cache_kind kd = gs.spec[i].kind;
        mla |= kd == KV_CACHE_MLA || kd == KV_CACHE_MLA_INDEXER ||
               kd == KV_CACHE_MLA_SLIDING;
        sparse |= kd == KV_CACHE_MLA_INDEXER;
    }
    kv_groups_release(&gs);
    if (!m->g) {
        *usage = 0;
        return kv_err_set(e, "out of memory");
    }
    if (m->first == SIZE_MAX)
        return kv_err_set(e, "map needs an attention group: every group is "
                          "mamba");
    return cp_apply(m, cp, mla, sparse, e);
}

int kv_map_groups_tables(struct kv_map_groups *m, const char *const *specs,
                         size_t n_specs, struct kv_err *e)
{
    int named = -1;
    for (size_t i = 0; i < n_specs; i++) {
        const char *v = specs[i];
        size_t d = 1, k = 0;
        while (v[0] == 'g' && v[d] >= '0' && v[d] <= '9' && k < 100000)
            k = k * 10 + (size_t)(v[d++] - '0');
        int is_named = v[0] == 'g' && d > 1 && v[d] == '=';
        if (named >= 0 && named != is_named)
            return kv_err_set(e, "--block-table: give every table as gK=FILE "
                              "or none (then one a group, in order)");
        named = is_named;
        if (!is_named)
            k = i;
        else if (v[1] == '0' && d > 2)
            return kv_err_set(e, "--block-table: '%s': expected gK=FILE, K "
                              "without leading zeros", v);
        if (!v[is_named ? d + 1 : 0])
            return kv_err_set(e, "--block-table: '%s': no file named", v);
        if (k >= m->n)
            return kv_err_set(e, "--block-table: '%s': the groups are g0 to "
                              "g%zu", v, m->n - 1);
        if (m->g[k].path)
            return kv_err_set(e, "--block-table: two tables for group %zu",
                              k);
        m->g[k].path = is_named ? v + d + 1 : v;
        m->g[k].table = i;
    }
    if (!named && n_specs != m->n)
        return kv_err_set(e, "--block-table: %zu tables for %zu groups (name "
                          "them gK=FILE to give some)", n_specs, m->n);
    for (size_t k = 0; k < m->n; k++)
        if (!m->g[k].path && m->g[k].kind != KV_CACHE_MAMBA)
            return kv_err_set(e, "--block-table: none for group %zu (%s)", k,
                              kv_cache_kind_name(m->g[k].kind));
    return 0;
}

int kv_map_field_per_group(enum kv_slot_field f)
{
    return f == KV_SLOT_BLOCK_TABLE_INDICES || f == KV_SLOT_BLOCK_NUMBERS ||
           f == KV_SLOT_BLOCK_OFFSETS || f == KV_SLOT_SLOT_MAPPING ||
           f == KV_SLOT_BLOCK_TABLE;
}

/* Select per-group field f for group k, or for every group it applies to
 * (k = SIZE_MAX).  A Mamba group has a block table (its state indices)
 * and no slot mapping: vLLM computes none for it. */
static int select_field(struct kv_map_groups *m, enum kv_slot_field f,
                        size_t k, struct kv_err *e)
{
    const char *nm = kv_slot_field_name(f);
    for (size_t g = 0; g < m->n; g++) {
        struct kv_map_group *q = &m->g[g];
        int fits = f == KV_SLOT_BLOCK_TABLE || q->kind != KV_CACHE_MAMBA;
        if (k != SIZE_MAX && g != k)
            continue;
        if (k != SIZE_MAX && !fits)
            return kv_err_set(e, "--fields: '%s.g%zu': group %zu is mamba: "
                              "vLLM writes no %s for a state cache", nm, g, g,
                              nm);
        if (k != SIZE_MAX && !q->path)
            return kv_err_set(e, "--fields: '%s.g%zu' needs group %zu's "
                              "--block-table", nm, g, g);
        if (fits && q->path)
            q->sel[f] = 1;
    }
    return 0;
}

/* One field name of map (name[len]) into *f, or -1 with map's message
 * listing the valid names. */
static int field_of(const char *name, enum kv_slot_field *f,
                    struct kv_err *e)
{
    char valid[512];
    size_t at = 0;
    if (kv_slot_field_parse(name, f) == 0)
        return 0;
    valid[0] = '\0';
    for (int i = 0; i < KV_SLOT_NFIELDS; i++)
        at += (size_t)snprintf(valid + at, sizeof valid - at, "%s%s",
                               at ? " " : "",
                               kv_slot_field_name((enum kv_slot_field)i));
    return kv_err_set(e, "--fields: unknown field '%s' for map; valid: %s",
                      name, valid);
}

/* "NAME.gK" (the last dot at dot < len): K into *k, or -1. */
static int group_suffix(const struct kv_map_groups *m, const char *s,
                        size_t len, size_t dot, size_t *k, struct kv_err *e)
{
    if (dot + 2 >= len || s[dot + 1] != 'g')
        return kv_err_set(e, "--fields: '%.*s': expected NAME.gK", (int)len,
                          s);
    *k = 0;
    for (size_t d = dot + 2; d < len; d++) {
        if (s[d] < '0' || s[d] > '9' || *k > 100000)
            return kv_err_set(e, "--fields: '%.*s': expected NAME.gK",
                              (int)len, s);
        *k = *k * 10 + (size_t)(s[d] - '0');
    }
    if (s[dot + 2] == '0' && dot + 3 < len)
        return kv_err_set(e, "--fields: '%.*s': expected NAME.gK, K without "
                          "leading zeros", (int)len, s);
    if (*k >= m->n)
        return kv_err_set(e, "--fields: '%.*s': the groups are g0 to g%zu",
                          (int)len, s, m->n - 1);
    return 0;
}

int kv_map_groups_fields(struct kv_map_groups *m, const char *s,
                         struct kv_err *e)
{
    static const enum kv_slot_field defaults[] = {
        KV_SLOT_QUERY_START_LOC, KV_SLOT_SEQ_LENS, KV_SLOT_NUM_COMPUTED,
        KV_SLOT_POSITIONS, KV_SLOT_REQ_INDICES, KV_SLOT_TOKEN_INDICES,
        KV_SLOT_BLOCK_TABLE_INDICES, KV_SLOT_BLOCK_NUMBERS,
        KV_SLOT_BLOCK_OFFSETS, KV_SLOT_SLOT_MAPPING, KV_SLOT_MAX_QUERY_LEN,
        KV_SLOT_NUM_TOKENS,
    };
    m->nf = 0;
    if (!s) {
        for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
            m->fl[m->nf++] = defaults[i];
            if (kv_map_field_per_group(defaults[i]) &&
                select_field(m, defaults[i], SIZE_MAX, e))
                return -1;
        }
    }
    while (s && *s) {
        size_t len = strcspn(s, ","), k = SIZE_MAX, dot = len, j;
        enum kv_slot_field f;
        char nm[64];
        for (size_t i = 0; i < len; i++)
            if (s[i] == '.')
                dot = i;
        if (dot < len && group_suffix(m, s, len, dot, &k, e))
            return -1;
        if (dot == 0)
            return kv_err_set(e, "--fields: empty name in '%s'", s);
        snprintf(nm, sizeof nm, "%.*s", (int)(dot < 63 ? dot : 63), s);
        if (field_of(nm, &f, e))
            return -1;
        if (k != SIZE_MAX && !kv_map_field_per_group(f))
            return kv_err_set(e, "--fields: '%.*s': %s is one for every "
                              "group", (int)len, s, nm);
        if (kv_map_field_per_group(f) && select_field(m, f, k, e))
            return -1;
        for (j = 0; j < m->nf && m->fl[j] != f; j++)
            ;
        if (j == m->nf)
            m->fl[m->nf++] = f;
        s += len;
        if (*s == ',')
            s++;
    }
    for (size_t k = 0; k < m->n; k++)
        m->g[k].use_table = m->g[k].kind != KV_CACHE_MAMBA ||
                            m->g[k].sel[KV_SLOT_BLOCK_TABLE];
    return 0;
}

/* The token-level arrays kv_slot_compute fills for group k: its own
 * fields, and for the first attention group the shared ones. */
static unsigned group_arrays(const struct kv_map_groups *m, size_t k)
{
    unsigned want = 0;
    for (size_t i = 0; i < m->nf; i++) {
        enum kv_slot_field f = m->fl[i];
        int token = f >= KV_SLOT_POSITIONS && f <= KV_SLOT_CP_OWNER;
        if (token && (kv_map_field_per_group(f) ? m->g[k].sel[f]
                                                  : k == m->first))
            want |= 1u << f;
    }
    return want;
}

int kv_map_groups_compute(struct kv_map_groups *m, size_t k,
                          const struct kv_slot_table *t, const char *name,
                          const int64_t *scheduled, const int64_t *computed,
                          size_t n_sched, int arrays, struct kv_err *e)
{
    struct kv_map_group *q = &m->g[k];
    if (q->kind == KV_CACHE_MAMBA) {
        if (!q->sel[KV_SLOT_BLOCK_TABLE])
            return 0;
        if (t->n_rows < n_sched)
            return kv_err_set(e, "'%s': %zu rows for %zu requests", name,
                              t->n_rows, n_sched);
        q->t = *t;
        return 0;
    }
    q->geom.max_model_len = m->max_model_len;
    if (!m->max_model_len &&
        kv_map_table_len(t->n_cols, q->geom.block_size, q->geom.cp_world,
                         name,
                         &q->geom.max_model_len, e))
        return -1;
    q->t = *t;
    if (kv_slot_compute(&q->geom, &q->t, n_sched, scheduled, computed,
                        arrays ? group_arrays(m, k) : 0, &q->st, e))
        return kv_err_prefix(e, "group %zu", k);
    return 0;
}

int kv_map_groups_pad(struct kv_map_groups *m, int64_t pad_to,
                      struct kv_err *e)
{
    size_t n = m->g[m->first].st.n_tokens;
    if (pad_to >= 0 && (uint64_t)pad_to < n)
        return kv_err_set(e, "--pad-to %lld is less than the %zu scheduled "
                          "tokens", (long long)pad_to, n);
    m->n_slots = pad_to >= 0 ? (size_t)pad_to : n;
    return 0;
}

static size_t sz_add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t sz_mul(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

size_t kv_map_entries(const enum kv_slot_field *fl, size_t nf, size_t n_tokens,
                      size_t n_sched, size_t n_cols, size_t n_ranks, size_t n_slots)
{
    size_t t = 0;
    for (size_t i = 0; i < nf; i++) {
        size_t k;
        switch (fl[i]) {
        case KV_SLOT_SLOT_MAPPING: k = sz_mul(n_ranks, n_slots); break;
        case KV_SLOT_BLOCK_TABLE: k = sz_mul(n_sched, n_cols); break;
        case KV_SLOT_QUERY_START_LOC: k = sz_add(n_sched, 1); break;
        case KV_SLOT_SEQ_LENS: case KV_SLOT_NUM_COMPUTED:
        case KV_SLOT_NUM_SCHEDULED: k = n_sched; break;
        case KV_SLOT_MAX_QUERY_LEN: case KV_SLOT_NUM_TOKENS:
        case KV_SLOT_NUM_REQS: k = 1; break;
        default: k = n_tokens; break;     /* positions .. cp_owner */
        }
        t = sz_add(t, k);
    }
    return t;
}

size_t kv_map_groups_entries(const struct kv_map_groups *m, size_t n_sched)
{
    const struct kv_slot_step *s0 = &m->g[m->first].st;
    size_t t = 0;
    for (size_t i = 0; i < m->nf; i++) {
        enum kv_slot_field f = m->fl[i];
        if (!kv_map_field_per_group(f)) {
            t = sz_add(t, kv_map_entries(&f, 1, s0->n_tokens, n_sched, 0, 1, m->n_slots));
            continue;
        }
        for (size_t k = 0; k < m->n; k++) {
            const struct kv_map_group *q = &m->g[k];
            if (q->sel[f])
                t = sz_add(t, kv_map_entries(&f, 1, q->st.n_tokens, n_sched, q->t.n_cols, 1,
                                             m->n_slots));
        }
    }
    return t;
}

int kv_map_output_check(size_t entries, size_t entry_size, size_t max_mem,
                        struct kv_err *e)
{
    size_t need = sz_mul(entries, entry_size);
    if (need <= max_mem)
        return 0;
    if (need == SIZE_MAX)
        return kv_err_set(e, "the output of %zu entries needs more bytes than the "
                          "address space holds", entries);
    return kv_err_set(e, "the output of %zu entries needs %zu bytes, more than "
                      "--max-mem %zu; raise --max-mem", entries, need, max_mem);
}

int kv_map_groups_i32_check(const struct kv_map_groups *m, struct kv_err *e)
{
    unsigned fields = 0;
    for (size_t i = 0; i < m->nf; i++)
        fields |= 1u << m->fl[i];
    for (size_t k = 0; k < m->n; k++) {
        const struct kv_map_group *q = &m->g[k];
        if (q->kind != KV_CACHE_MAMBA &&
            kv_map_i32_check(fields, &q->st, &q->t, q->geom.block_size,
                             q->geom.max_model_len, m->n_slots, e))
            return -1;
    }
    return 0;
}

int kv_map_table_len(size_t n_cols, int64_t K, int64_t W, const char *name,
                     int64_t *out, struct kv_err *e)
{
    if (n_cols == 0 || (uint64_t)n_cols > (uint64_t)(INT64_MAX / 4) / K / W)
        return kv_err_set(e, "'%s': a block table without columns holds no "
                          "tokens", name);
    *out = (int64_t)n_cols * K * W;
    return 0;
}

/* Short text rows are padded with this by kv_read_int_table, then with
 * 0 once checked. */
#define ROW_PAD INT64_MIN

int kv_map_table_read(const char *path, size_t max_mem, size_t n_reqs,
                      const int64_t *sched, const int64_t *comp, int64_t span,
                      int64_t **ids, size_t *rows, size_t *cols,
                      struct kv_err *e)
{
    int64_t *t;
    size_t nr, nc;

    *ids = NULL;
    if (kv_read_int_table(path, span > 0 ? ROW_PAD : 0, max_mem, &t, &nr,
                          &nc, e))
        return -1;
    for (size_t r = 0; span > 0 && r < n_reqs && r < nr; r++) {
        int64_t last = (comp ? comp[r] : 0) + sched[r] - 1;
        size_t len = 0, col;
        if (sched[r] <= 0)
            continue;
        while (len < nc && t[r * nc + len] != ROW_PAD)
            len++;
        col = (size_t)(last / span);
        if (col < nc && col >= len) {
            free(t);
            return kv_err_set(e, "request %zu: position %lld needs block "
                              "table column %zu, row %zu (line %zu of '%s') "
                              "has %zu entries", r, (long long)last, col, r,
                              r + 1, kv_path_name(path, 0), len);
        }
    }
    for (size_t i = 0; span > 0 && i < nr * nc; i++)
        if (t[i] == ROW_PAD)
            t[i] = 0;
    *ids = t;
    *rows = nr;
    *cols = nc;
    return 0;
}

/* The block table entries of request r that kv_map_i32_check reads: up
 * to its last position (used), or the whole row for block_table. */
static int i32_row(const struct kv_slot_step *st, const struct kv_slot_table *t,
                   size_t r, int table, int64_t K, struct kv_err *e)
{
    size_t used = st->seq_lens[r] > 0 && st->num_scheduled_tokens[r] > 0
                      ? (size_t)((st->seq_lens[r] - 1) / K) + 1 : 0;
    size_t end = table ? t->n_cols : (used < t->n_cols ? used : t->n_cols);
    for (size_t j = 0; j < end; j++) {
        size_t at = r * t->n_cols + j;
        int64_t b = t->ids32 ? t->ids32[at] : t->ids[at];
        if (table && b > INT32_MAX)
            return kv_err_set(e, "--dtype i32: request %zu: block table "
                              "column %zu holds block %lld, over 32 bits; "
                              "use --dtype i64", r, j, (long long)b);
        if (j < used && b >= INT32_MAX / K)
            return kv_err_set(e, "--dtype i32: request %zu: block %lld of "
                              "column %zu gives slots up to %lld, over 32 "
                              "bits; use --dtype i64", r, (long long)b, j,
                              (long long)(b > INT64_MAX / K - 1 ?
                                          INT64_MAX : (b + 1) * K - 1));
    }
    return 0;
}

int kv_map_i32_check(unsigned fields, const struct kv_slot_step *st,
                     const struct kv_slot_table *t, int64_t K, int64_t M,
                     size_t n_slots, struct kv_err *e)
{
#define HAS(f) ((fields >> (f)) & 1u)
    int want_ids = HAS(KV_SLOT_SLOT_MAPPING) || HAS(KV_SLOT_BLOCK_NUMBERS);
    int want_table = HAS(KV_SLOT_BLOCK_TABLE);
    int want_len = HAS(KV_SLOT_POSITIONS) || HAS(KV_SLOT_SEQ_LENS) ||
                   HAS(KV_SLOT_NUM_COMPUTED);

    for (size_t r = 0; r < st->n_reqs && want_len; r++)
        if (st->seq_lens[r] > INT32_MAX)
            return kv_err_set(e, "--dtype i32: request %zu: sequence length "
                              "%lld exceeds 32 bits; use --dtype i64", r,
                              (long long)st->seq_lens[r]);
    for (size_t r = 0; r < st->n_reqs && (want_ids || want_table); r++)
        if (i32_row(st, t, r, want_table, K, e))
            return -1;
    for (size_t r = 0; r < st->n_reqs && HAS(KV_SLOT_TOKEN_INDICES); r++) {
        /* the last token index of request r: r * M + seq_lens[r] - 1 */
        int64_t last = st->seq_lens[r] - 1;
        if (st->num_scheduled_tokens[r] > 0 &&
            ((int64_t)r > INT32_MAX / M ||
             (int64_t)r * M > INT32_MAX - last))
            return kv_err_set(e, "--dtype i32: request %zu: token index %zu "
                              "* --max-model-len %lld + %lld exceeds 32 "
                              "bits; use --dtype i64", r, r, (long long)M,
                              (long long)last);
    }
    if (HAS(KV_SLOT_BLOCK_TABLE_INDICES) && st->n_reqs * t->n_cols > INT32_MAX)
        return kv_err_set(e, "--dtype i32: block_table_indices up to %zu rows "
                          "* %zu columns exceed 32 bits; use --dtype i64",
                          st->n_reqs, t->n_cols);
    if (n_slots > INT32_MAX || st->n_tokens > INT32_MAX)
        return kv_err_set(e, "--dtype i32: %zu tokens exceed 32 bits; use "
                          "--dtype i64", n_slots > st->n_tokens ? n_slots
                                                               : st->n_tokens);
    return 0;
#undef HAS
}
