/* kvslot map: one step's metadata from a block table and token counts;
 * with KV-cache groups (--model-config, --kv-groups), each group's block
 * table and slot mapping (map_groups below). */
#include "kvslot.h"
#include "slot/groups.h"

static const char map_synopsis[] =
    "\nOne step of vLLM's model-runner metadata: positions, token and "
    "block-table\nindices, slot mapping, query_start_loc, seq_lens ... "
    "(man 1 kvslot).";

/* Before anything is written with --dtype i32: whether every value of the
 * chosen fields fits in 32 bits.  The block ids of a request's columns up
 * to its last position are what slot_mapping, block_numbers and the rest
 * derive from (each slot is below (id + 1) * K); the whole table matters
 * for block_table.  Returns 0, or 1 after a message naming the request,
 * the block or the index and its value. */
static int map_i32_check(const enum fid *fl, size_t nf,
                         const struct kv_slot_step *st, const int32_t *ids32,
                         const int64_t *ids, size_t n_cols, int64_t K,
                         int64_t M, size_t n_slots)
{
    int want_ids = 0, want_table = 0, want_tok = 0, want_bti = 0;
    int want_len = 0;

    for (size_t i = 0; i < nf; i++) {
        want_ids |= fl[i] == F_SLOT_MAPPING || fl[i] == F_BLOCK_NUMBERS;
        want_table |= fl[i] == F_BLOCK_TABLE;
        want_tok |= fl[i] == F_TOKEN_INDICES;
        want_bti |= fl[i] == F_BTI;
        want_len |= fl[i] == F_POSITIONS || fl[i] == F_SEQ_LENS ||
                    fl[i] == F_NUM_COMPUTED;
    }
    for (size_t r = 0; r < st->n_reqs && want_len; r++)
        if (st->seq_lens[r] > INT32_MAX)
            return kv_fail("--dtype i32: request %zu: sequence length %lld "
                           "exceeds 32 bits; use --dtype i64", r,
                           (long long)st->seq_lens[r]);
    for (size_t r = 0; r < st->n_reqs && (want_ids || want_table); r++) {
        size_t used = st->seq_lens[r] > 0 && st->num_scheduled_tokens[r] > 0
                          ? (size_t)((st->seq_lens[r] - 1) / K) + 1 : 0;
        size_t end = want_table ? n_cols : (used < n_cols ? used : n_cols);
        for (size_t j = 0; j < end; j++) {
            int64_t b = ids32 ? ids32[r * n_cols + j] : ids[r * n_cols + j];
            if (want_table && b > INT32_MAX)
                return kv_fail("--dtype i32: request %zu: block table "
                               "column %zu holds block %lld, over 32 bits; "
                               "use --dtype i64", r, j, (long long)b);
            if (j < used && b >= INT32_MAX / K)
                return kv_fail("--dtype i32: request %zu: block %lld of "
                               "column %zu gives slots up to %lld, over 32 "
                               "bits; use --dtype i64", r, (long long)b, j,
                               (long long)(b > INT64_MAX / K - 1 ?
                                           INT64_MAX : (b + 1) * K - 1));
        }
    }
    for (size_t r = 0; r < st->n_reqs && want_tok; r++) {
        /* the last token index of request r: r * M + seq_lens[r] - 1 */
        int64_t last = st->seq_lens[r] - 1;
        if (st->num_scheduled_tokens[r] > 0 &&
            ((int64_t)r > INT32_MAX / M ||
             (int64_t)r * M > INT32_MAX - last))
            return kv_fail("--dtype i32: request %zu: token index %zu * "
                           "--max-model-len %lld + %lld exceeds 32 bits; "
                           "use --dtype i64", r, r, (long long)M,
                           (long long)last);
    }
    if (want_bti && st->n_reqs * n_cols > INT32_MAX)
        return kv_fail("--dtype i32: block_table_indices up to %zu rows * %zu "
                       "columns exceed 32 bits; use --dtype i64",
                       st->n_reqs, n_cols);
    if (n_slots > INT32_MAX || st->n_tokens > INT32_MAX)
        return kv_fail("--dtype i32: %zu tokens exceed 32 bits; use --dtype "
                       "i64", n_slots > st->n_tokens ? n_slots : st->n_tokens);
    return 0;
}

/* An int32 .npy block table mapped straight from its file (no copy, no
 * conversion; the page tables filled in one go).  Returns 1 when mapped,
 * 0 when the file is something else (stdin, text, another dtype: use
 * kv_read_int_table), -1 on a broken .npy. */
struct mapped {
    void *base;
    size_t len;
    const int32_t *ids;
    size_t n_rows, n_cols;
};

static int map_table_i32(const char *path, size_t max_mem, struct mapped *m,
                         struct kv_err *e)
{
    struct kv_npy_header h;
    struct stat st;
    FILE *f;
    long off;
    int rc;

    memset(m, 0, sizeof *m);
    if (!path || strcmp(path, "-") == 0 || !(f = fopen(path, "rb")))
        return 0;
    {
        char magic[6];
        if (fread(magic, 1, 6, f) != 6 || memcmp(magic, "\x93NUMPY", 6)) {
            fclose(f);
            return 0;
        }
        rewind(f);
    }
    rc = kv_npy_read_header(f, max_mem, &h, e);
    if (rc != 0) {
        fclose(f);
        return rc < 0 ? kv_err_prefix(e, "'%s'", path) : 0;
    }
    off = ftell(f);
    if (h.dtype != KV_I32 || h.ndim < 1 || h.ndim > 2 || off < 0 ||
        off % 4 || h.nbytes == 0 || fstat(fileno(f), &st) ||
        (uint64_t)st.st_size != (uint64_t)off + h.nbytes) {
        fclose(f);
        return 0;   /* the general reader gives the precise message */
    }
    m->len = (size_t)off + h.nbytes;
    m->base = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE | MAP_POPULATE,
                   fileno(f), 0);
    fclose(f);
    if (m->base == MAP_FAILED) {
        m->base = NULL;
        return 0;
    }
    m->ids = (const int32_t *)(const void *)((const char *)m->base + off);
    m->n_rows = h.ndim == 2 ? (size_t)h.shape[0] : 1;
    m->n_cols = (size_t)h.shape[h.ndim - 1];
    return 1;
}

static void unmap_table(struct mapped *m)
{
    if (m->base)
        munmap(m->base, m->len);
    memset(m, 0, sizeof *m);
}

static void map_write(struct out *o, const enum fid *fl, size_t nf,
                      const struct stepview *v, const struct kv_slot_geom *g,
                      const struct kv_slot_table *t, const int64_t *scheduled,
                      const int64_t *computed, size_t n_ranks, int all,
                      size_t n_slots)
{
    size_t n_sched = v->t_rows;
    for (size_t i = 0; i < nf; i++) {
        unsigned bit = slot_want(fl[i]);
        struct tokfield tf;
        if (!bit) {
            write_step(o, fl + i, 1, v);
            continue;
        }
        memset(&tf, 0, sizeof tf);
        tf.g = g;
        tf.t = t;
        tf.n_reqs = n_sched;
        tf.sched = scheduled;
        tf.comp = computed;
        tf.f = (enum kv_slot_field)__builtin_ctz(bit);
        tf.n_ranks = 1;
        tf.row_len = v->s->n_tokens;
        if (fl[i] == F_SLOT_MAPPING) {
            tf.n_ranks = n_ranks;
            tf.two_d = all;
            tf.row_len = n_slots;
        }
        emit_tokens(o, fnames[fl[i]], &tf);
    }
}

/* map's block table: an int32 .npy stays int32 (mapped, no copy into
 * int64) unless hybrid blocks or the block_table field need it; kernel
 * blocks expanded; the max model len from the table when not given.
 * 0 or an exit code. */
static int map_table(const char *path, size_t max_mem, const enum fid *fl,
                     size_t nf, int64_t B, int64_t K, int64_t cpw,
                     size_t n_sched, const int64_t *scheduled,
                     const int64_t *computed, struct mapped *mt, int64_t **ids,
                     int64_t **kids, size_t *rows, size_t *kcols, int *have32,
                     int64_t *M)
{
    struct kv_err e;
    int need64 = K != B, rc;
    size_t cols = 0;
    *have32 = 0;
    for (size_t i = 0; i < nf; i++)
        if (fl[i] == F_BLOCK_TABLE)
            need64 = 1;
    if (!need64) {
        rc = map_table_i32(path, max_mem, mt, &e);
        if (rc < 0)
            return kv_fail_err(&e);
        if (rc > 0) {
            *rows = mt->n_rows;
            cols = mt->n_cols;
            *have32 = 1;
        }
    }
    if (!*have32 &&
        (kv_read_int_table(path, ROW_PAD, max_mem, ids, rows, &cols, &e) ||
         check_short_rows(*ids, *rows, cols, n_sched, scheduled, computed,
                          B * cpw, path, &e)))
        return kv_fail_err(&e);
    if (K != B) {
        /* the expanded table sits beside the one read */
        size_t read = mem_mul(mem_mul(*rows, cols), sizeof **ids);
        size_t grown = mem_mul(read, (size_t)(B / K));
        if ((rc = mem_check(mem_add(read, grown), max_mem,
                            "the block table with its kernel blocks")))
            return rc;
        if (kv_slot_expand_hybrid(*ids, *rows, cols, B, K, kids, kcols, &e))
            return kv_fail_err(&e);
    } else {
        *kids = *ids;
        *ids = NULL;
        *kcols = cols;
    }
    if (*M == 0) {
        if (*kcols == 0 || (uint64_t)*kcols > (uint64_t)(INT64_MAX / 4) / K /
                                              cpw)
            return kv_fail("'%s': a block table without columns holds no "
                           "tokens", kv_path_name(path, 0));
        *M = (int64_t)*kcols * K * cpw;
    }
    return 0;
}

struct map_args {
    struct arg_str *bs, *table, *sched, *comp, *padto, *kbs, *mml, *virt,
                   *maxmem, *mc, *kg, *kb;
    struct cp_args cp;
    struct common c;
};

/* map's options, in the order --help lists them; returns the count. */
static int map_args_make(struct map_args *a, void **t)
{
    int n = 0;
    common_make(&a->c);
    t[n++] = a->bs = arg_str0("B", "block-size", "N",
                              "block size of the block table's ids (with "
                              "groups: vLLM's --block-size)");
    t[n++] = a->table = arg_strn(NULL, "block-table", "[gK=]FILE", 1, 64,
                                 "block table: text rows or int .npy "
                                 "[R, C]; with groups one a group");
    t[n++] = a->sched = arg_str1(NULL, "scheduled", "n0,n1,..",
                                 "tokens scheduled per request");
    t[n++] = a->comp = arg_str0(NULL, "computed", "c0,c1,..",
                                "tokens already computed per request "
                                "(default 0)");
    t[n++] = a->padto = arg_str0(NULL, "pad-to", "N",
                                 "pad slot_mapping with -1 to N entries");
    t[n++] = a->kbs = arg_str0(NULL, "kernel-block-size", "K",
                               "kernel block size (hybrid blocks; "
                               "divides -B)");
    t[n++] = a->mml = arg_str0(NULL, "max-model-len", "M",
                               "token-table row width (default: the "
                               "table's capacity)");
    n += cp_args_make(&a->cp, t + n);
    t[n++] = a->virt = arg_str0(NULL, "virtual-block", "physical|kernel",
                                "CP virtual block from the allocation "
                                "block (vLLM, vllm-ascend; default) or "
                                "the kernel block (older vLLM)");
    t[n++] = a->maxmem = arg_str0(NULL, "max-mem", "SIZE",
                                  "memory limit (default 75% of RAM)");
    t[n++] = a->mc = arg_str0(NULL, "model-config", "FILE",
                              "KV-cache groups of a Hugging Face "
                              "config.json (as kvslot groups)");
    t[n++] = a->kg = arg_str0(NULL, "kv-groups", "SPEC",
                              "KV-cache groups spelled out (man 1 kvslot, "
                              "GROUPS)");
    t[n++] = a->kb = arg_str0(NULL, "kernel-block", "K",
                              "with the groups: the backend's smallest "
                              "kernel block (default 16)");
    n += common_add(&a->c, t + n);
    return n;
}

/* One map run: the geometry, the requests, the table and the fields. */
struct map_run {
    int64_t B, K, M, pad;
    size_t max_mem;
    int64_t *scheduled, *computed, *ids, *kids;
    size_t n_sched, n_comp, rows, kcols, nf;
    enum fid fl[NF];
    struct kv_slot_geom g;
    struct kv_slot_table t;
    struct mapped mt;
    int have32;
};

/* The block geometry and context parallelism, and the fields. */
static int map_geometry(struct map_args *a, struct map_run *r)
{
    int64_t cpw = 1, cprk = 0;
    int rc;
    if (!a->bs->count)
        return kv_usage("-B N is required (or --model-config / --kv-groups)");
    if (a->table->count > 1)
        return kv_usage("--block-table: one table without KV-cache groups");
    if (a->kb->count)
        return kv_usage("--kernel-block needs --model-config or --kv-groups");
    if ((rc = opt_i64(a->bs, "-B", 1, INT32_MAX, 0, &r->B)) ||
        (rc = opt_i64(a->kbs, "--kernel-block-size", 1, INT32_MAX, r->B,
                      &r->K)) ||
        (rc = opt_i64(a->mml, "--max-model-len", 1, INT64_MAX / 2, 0,
                      &r->M)) ||
        (rc = cp_numbers(&a->cp)) ||
        (rc = opt_i64(a->padto, "--pad-to", 0, INT32_MAX, -1, &r->pad)))
        return rc;
    if (r->B % r->K)
        return kv_usage("--kernel-block-size %lld does not divide -B %lld",
                        (long long)r->K, (long long)r->B);
    if ((rc = cp_options(&a->cp, r->B, &cpw, &cprk)))
        return rc;
    memset(&r->g, 0, sizeof r->g);
    r->g.block_size = r->B;
    r->g.kernel_block_size = r->K;
    r->g.cp_world = cpw;
    r->g.cp_rank = cprk;
    r->g.interleave = a->cp.I;
    r->g.virt = KV_SLOT_VIRTUAL_PHYSICAL;
    if (a->virt->count && strcmp(a->virt->sval[0], "kernel") == 0)
        r->g.virt = KV_SLOT_VIRTUAL_KERNEL;
    else if (a->virt->count && strcmp(a->virt->sval[0], "physical") != 0)
        return kv_usage("--virtual-block: expected kernel or physical, got "
                        "'%s'", a->virt->sval[0]);
    if (r->g.virt == KV_SLOT_VIRTUAL_KERNEL && cpw > 1 && r->K % a->cp.I)
        return kv_usage("--interleave %lld does not divide the kernel block "
                        "size %lld: the older vLLM layout would write some "
                        "slots twice (see --virtual-block physical)",
                        (long long)a->cp.I, (long long)r->K);
    if ((rc = parse_fields(a->c.fields->count ? a->c.fields->sval[0] : NULL, 0,
                           r->fl, &r->nf)))
        return rc;
    return slot_options_used(r->fl, r->nf, r->pad >= 0, a->cp.all->count > 0);
}

/* The requests (--scheduled, --computed) and the block table. */
static int map_requests(const struct map_args *a, struct map_run *r)
{
    struct kv_err e;
    size_t max_mem;
    int rc;
    if ((rc = opt_list(a->sched, "--scheduled", 0, &r->scheduled,
                       &r->n_sched)) ||
        (rc = opt_list(a->comp, "--computed", 0, &r->computed, &r->n_comp)))
        return rc;
    if (r->n_sched == 0)
        return kv_usage("--scheduled: no requests");
    if (a->comp->count && r->n_comp != r->n_sched)
        return kv_usage("--computed has %zu values, --scheduled has %zu",
                        r->n_comp, r->n_sched);
    if (kv_parse_max_mem(a->maxmem->count ? a->maxmem->sval[0] : NULL,
                         &max_mem, &e))
        return kv_usage("%s", e.msg);
    r->max_mem = max_mem;
    if ((rc = map_table(a->table->sval[0], max_mem, r->fl, r->nf, r->B, r->K,
                        r->g.cp_world, r->n_sched, r->scheduled, r->computed,
                        &r->mt, &r->ids, &r->kids, &r->rows, &r->kcols,
                        &r->have32, &r->M)))
        return rc;
    r->g.max_model_len = r->M;
    r->t.ids = r->kids;
    r->t.ids32 = r->have32 ? r->mt.ids : NULL;
    r->t.n_rows = r->rows;
    r->t.n_cols = r->kcols;
    return 0;
}

/* The entries map writes: each field's count, slot_mapping on n_ranks
 * rows of n_slots; SIZE_MAX when the count overflows. */
static size_t map_entries(const enum fid *fl, size_t nf, const struct kv_slot_step *st,
                          size_t n_sched, size_t kcols, size_t n_ranks, size_t n_slots)
{
    size_t t = 0;
    for (size_t i = 0; i < nf; i++) {
        size_t k;
        switch (fl[i]) {
        case F_SLOT_MAPPING: k = mem_mul(n_ranks, n_slots); break;
        case F_BLOCK_TABLE: k = mem_mul(n_sched, kcols); break;
        case F_QSL: k = n_sched + 1; break;
        case F_SEQ_LENS: case F_NUM_COMPUTED: case F_NUM_SCHEDULED: k = n_sched; break;
        case F_MAX_QUERY_LEN: case F_NUM_TOKENS: case F_NUM_REQS: k = 1; break;
        default: k = slot_want(fl[i]) ? st->n_tokens : 1; break;
        }
        t = mem_add(t, k);
    }
    return t;
}

/* ---- map with KV-cache groups ------------------------------------------- */

/* The fields whose values come from a group's block size and table: each is
 * written per group, as NAME.gK. */
static int group_field_of(enum fid f)
{
    return f == F_BTI || f == F_BLOCK_NUMBERS || f == F_BLOCK_OFFSETS ||
           f == F_SLOT_MAPPING || f == F_BLOCK_TABLE;
}

/* One KV-cache group of map: its table, geometry and step. */
struct map_group {
    enum kv_cache_kind kind;
    const char *path;          /* its --block-table; NULL: none given */
    struct map_run r;
    struct kv_slot_step st;
    unsigned char sel[NF];     /* the per-group fields written for it */
};

struct map_groups_run {
    size_t n;
    struct map_group *g;
    enum fid fl[NF];           /* the fields, each once, in order */
    size_t nf;
    size_t first;              /* the group the shared fields come from */
};

/* --block-table with groups: gK=FILE for group K, or the files in group
 * order, one a group.  0 or an exit code. */
static int groups_tables(const struct arg_str *a, struct map_groups_run *m)
{
    int named = -1;
    for (int i = 0; i < a->count; i++) {
        const char *v = a->sval[i];
        size_t d = 1, k = 0;
        while (v[0] == 'g' && v[d] >= '0' && v[d] <= '9' && k < 100000)
            k = k * 10 + (size_t)(v[d++] - '0');
        int is_named = v[0] == 'g' && d > 1 && v[d] == '=';
        if (named >= 0 && named != is_named)
            return kv_usage("--block-table: give every table as gK=FILE or "
                            "none (then one a group, in order)");
        named = is_named;
        if (!is_named)
            k = (size_t)i;
        if (k >= m->n)
            return kv_usage("--block-table: '%s': the groups are g0 to g%zu",
                            v, m->n - 1);
        if (m->g[k].path)
            return kv_usage("--block-table: two tables for group %zu", k);
        m->g[k].path = is_named ? v + d + 1 : v;
    }
    if (!named && (size_t)a->count != m->n)
        return kv_usage("--block-table: %d tables for %zu groups (name them "
                        "gK=FILE to give some)", a->count, m->n);
    for (size_t k = 0; k < m->n; k++)
        if (!m->g[k].path && m->g[k].kind != KV_CACHE_MAMBA)
            return kv_usage("--block-table: none for group %zu (%s)", k,
                            kv_cache_kind_name(m->g[k].kind));
    return 0;
}

/* Select a per-group field for group k, or for every group it applies to
 * (k = SIZE_MAX).  A Mamba group has a block table (its state indices)
 * and no slot mapping: vLLM computes none for it.  0 or an exit code. */
static int groups_select(struct map_groups_run *m, enum fid f, size_t k)
{
    for (size_t g = 0; g < m->n; g++) {
        struct map_group *q = &m->g[g];
        int fits = f == F_BLOCK_TABLE || q->kind != KV_CACHE_MAMBA;
        if (k != SIZE_MAX && g != k)
            continue;
        if (k != SIZE_MAX && !fits)
            return kv_usage("--fields: '%s.g%zu': group %zu is mamba: vLLM "
                            "writes no %s for a state cache", fnames[f], g, g,
                            fnames[f]);
        if (k != SIZE_MAX && !q->path)
            return kv_usage("--fields: '%s.g%zu' needs group %zu's "
                            "--block-table", fnames[f], g, g);
        if (fits && q->path)
            q->sel[f] = 1;
    }
    return 0;
}

/* --fields with groups (NULL: map's defaults): NAME.gK names group K's
 * field, a plain per-group NAME every group's; each name is written once,
 * at its first place.  0 or an exit code. */
static int groups_fields(const char *s, struct map_groups_run *m)
{
    enum fid one[NF];
    size_t nf;
    int rc;
    if (!s) {
        if ((rc = parse_fields(NULL, 0, m->fl, &m->nf)))
            return rc;
        for (size_t i = 0; i < m->nf; i++)
            if (group_field_of(m->fl[i]) &&
                (rc = groups_select(m, m->fl[i], SIZE_MAX)))
                return rc;
        return 0;
    }
    while (*s) {
        size_t len = strcspn(s, ","), k = SIZE_MAX, dot = len, j;
        char nm[64];
        for (size_t i = 0; i < len; i++)
            if (s[i] == '.')
                dot = i;
        if (dot < len) {
            if (dot + 2 >= len || s[dot + 1] != 'g')
                return kv_usage("--fields: '%.*s': expected NAME.gK", (int)len, s);
            k = 0;
            for (size_t d = dot + 2; d < len; d++) {
                if (s[d] < '0' || s[d] > '9' || k > 100000)
                    return kv_usage("--fields: '%.*s': expected NAME.gK",
                                    (int)len, s);
                k = k * 10 + (size_t)(s[d] - '0');
            }
            if (k >= m->n)
                return kv_usage("--fields: '%.*s': the groups are g0 to g%zu",
                                (int)len, s, m->n - 1);
        }
        snprintf(nm, sizeof nm, "%.*s", (int)(dot < 63 ? dot : 63), s);
        if (dot == 0 || (rc = parse_fields(nm, 0, one, &nf)))
            return dot == 0 ? kv_usage("--fields: empty name in '%s'", s) : rc;
        if (k != SIZE_MAX && !group_field_of(one[0]))
            return kv_usage("--fields: '%.*s': %s is one for every group",
                            (int)len, s, nm);
        if (group_field_of(one[0]) && (rc = groups_select(m, one[0], k)))
            return rc;
        for (j = 0; j < m->nf && m->fl[j] != one[0]; j++)
            ;
        if (j == m->nf)
            m->fl[m->nf++] = one[0];
        s += len;
        if (*s == ',')
            s++;
    }
    return 0;
}

/* Group q's table read and its step computed (an attention group), or its
 * table alone (a Mamba group's state indices, when written).  0 or an exit
 * code. */
static int group_load(struct map_group *q, size_t k, int64_t B, int64_t M,
                      size_t max_mem, const int64_t *sched,
                      const int64_t *comp, size_t n_sched)
{
    struct map_run *r = &q->r;
    struct kv_err e;
    enum fid fl[NF];
    size_t nf = 0;
    int rc;

    for (int f = 0; f < NF; f++)
        if (q->sel[f])
            fl[nf++] = (enum fid)f;
    r->B = r->K = B;
    r->M = M;
    if (q->kind == KV_CACHE_MAMBA) {
        if (!q->sel[F_BLOCK_TABLE])
            return 0;
        if (kv_read_int_table(q->path, 0, max_mem, &r->kids, &r->rows,
                              &r->kcols, &e))
            return kv_fail_err(&e);
        if (r->rows < n_sched)
            return kv_fail("'%s': %zu rows for %zu requests",
                           kv_path_name(q->path, 0), r->rows, n_sched);
        return 0;
    }
    r->g.block_size = r->g.kernel_block_size = B;
    r->g.cp_world = 1;
    r->g.interleave = 1;
    r->g.virt = KV_SLOT_VIRTUAL_PHYSICAL;
    if ((rc = map_table(q->path, max_mem, fl, nf, B, B, 1, n_sched, sched,
                        comp, &r->mt, &r->ids, &r->kids, &r->rows, &r->kcols,
                        &r->have32, &r->M)))
        return rc;
    r->g.max_model_len = r->M;
    r->t.ids = r->kids;
    r->t.ids32 = r->have32 ? r->mt.ids : NULL;
    r->t.n_rows = r->rows;
    r->t.n_cols = r->kcols;
    if (kv_slot_compute(&r->g, &r->t, n_sched, sched, comp, 0, &q->st, &e))
        return kv_fail("group %zu: %s", k, e.msg);
    return 0;
}

/* The fields, in order: the shared ones from group m->first, the
 * per-group ones as NAME.gK. */
static void groups_write(struct out *o, const struct map_groups_run *m,
                         const int64_t *sched, const int64_t *comp,
                         size_t n_sched, size_t n_slots)
{
    const struct map_group *f0 = &m->g[m->first];
    struct stepview v;

    memset(&v, 0, sizeof v);
    v.s = &f0->st;
    v.table = f0->r.kids;
    v.t_rows = n_sched;
    v.t_cols = f0->r.kcols;
    for (size_t i = 0; i < m->nf; i++) {
        enum fid f = m->fl[i];
        if (!group_field_of(f)) {
            map_write(o, &f, 1, &v, &f0->r.g, &f0->r.t, sched, comp, 1, 0,
                      n_slots);
            continue;
        }
        for (size_t k = 0; k < m->n; k++) {
            const struct map_group *q = &m->g[k];
            struct tokfield tf;
            char name[64];
            if (!q->sel[f])
                continue;
            snprintf(name, sizeof name, "%s.g%zu", fnames[f], k);
            if (f == F_BLOCK_TABLE) {
                emit_mat(o, name, q->r.kids, n_sched, q->r.kcols);
                continue;
            }
            memset(&tf, 0, sizeof tf);
            tf.g = &q->r.g;
            tf.t = &q->r.t;
            tf.n_reqs = n_sched;
            tf.sched = sched;
            tf.comp = comp;
            tf.f = (enum kv_slot_field)__builtin_ctz(slot_want(f));
            tf.n_ranks = 1;
            tf.row_len = f == F_SLOT_MAPPING ? n_slots : q->st.n_tokens;
            emit_tokens(o, name, &tf);
        }
    }
}

/* Refusals and the groups of --model-config / --kv-groups, into m.  0 or
 * an exit code. */
static int groups_load(struct map_args *a, struct map_groups_run *m,
                       struct kv_groups *gs)
{
    struct kv_groups_opts o = { 0, 0, 0, 0, 0 };
    struct kv_err e;
    int rc;

    if (a->mc->count && a->kg->count)
        return kv_usage("give --model-config FILE or --kv-groups SPEC, not "
                        "both");
    if (a->cp.cps->count || a->cp.cpr->count || a->cp.pcps->count ||
        a->cp.pcpr->count || a->cp.il->count || a->cp.conv->count ||
        a->cp.all->count || a->virt->count)
        return kv_usage("map does not model context parallelism with "
                        "KV-cache groups");
    if (a->kbs->count)
        return kv_usage("--kernel-block-size: not with KV-cache groups (each "
                        "group's table is in its group's block size)");
    if ((rc = opt_i64(a->bs, "-B", 1, INT32_MAX, 0, &o.block_size)) ||
        (rc = opt_i64(a->mml, "--max-model-len", 1, INT32_MAX, 0,
                      &o.max_model_len)) ||
        (rc = opt_i64(a->kb, "--kernel-block", 1, 1 << 20, 16,
                      &o.kernel_block)))
        return rc;
    if (a->mc->count ? kv_groups_from_config(gs, a->mc->sval[0], &o, &e)
                     : kv_groups_from_spec(gs, a->kg->sval[0], &o, &e))
        return a->mc->count ? kv_fail_err(&e) : kv_usage("--kv-groups: %s",
                                                         e.msg);
    m->n = gs->n_groups;
    m->g = calloc(m->n ? m->n : 1, sizeof *m->g);
    if (!m->g)
        return kv_fail("out of memory");
    m->first = SIZE_MAX;
    for (size_t k = 0; k < m->n; k++) {
        m->g[k].kind = gs->group[k].kind;
        kv_slot_step_init(&m->g[k].st);
        if (m->first == SIZE_MAX && m->g[k].kind != KV_CACHE_MAMBA)
            m->first = k;
    }
    if (m->first == SIZE_MAX)
        return kv_usage("map needs an attention group: every group is mamba");
    return 0;
}

/* kvslot map --model-config F | --kv-groups SPEC: every group's block
 * table and slot mapping of one step, as vLLM 0.33.0's MultiGroupBlockTable
 * computes them (each group's table in its own block size; no slot
 * mapping for a Mamba group). */
static int map_groups(struct map_args *a)
{
    struct map_groups_run m;
    struct kv_groups gs;
    struct kv_out ko;
    struct out o;
    struct kv_err e;
    int64_t *sched = NULL, *comp = NULL, pad = -1;
    size_t n_sched = 0, n_comp = 0, max_mem = 0, n_slots;
    int rc;

    memset(&m, 0, sizeof m);
    kv_groups_init(&gs);
    if ((rc = groups_load(a, &m, &gs)) ||
        (rc = groups_tables(a->table, &m)) ||
        (rc = groups_fields(a->c.fields->count ? a->c.fields->sval[0] : NULL,
                            &m)) ||
        (rc = opt_i64(a->padto, "--pad-to", 0, INT32_MAX, -1, &pad)) ||
        (rc = opt_list(a->sched, "--scheduled", 0, &sched, &n_sched)) ||
        (rc = opt_list(a->comp, "--computed", 0, &comp, &n_comp)))
        goto done;
    if ((rc = n_sched == 0 ? kv_usage("--scheduled: no requests") : 0) ||
        (rc = a->comp->count && n_comp != n_sched
                  ? kv_usage("--computed has %zu values, --scheduled has %zu",
                             n_comp, n_sched) : 0) ||
        (rc = slot_options_used(m.fl, m.nf, pad >= 0, 0)))
        goto done;
    if (kv_parse_max_mem(a->maxmem->count ? a->maxmem->sval[0] : NULL,
                         &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    for (size_t k = 0; k < m.n; k++)
        if ((rc = group_load(&m.g[k], k, gs.group[k].block_size,
                             gs.max_model_len, max_mem, sched, comp,
                             n_sched)))
            goto done;
    n_slots = m.g[m.first].st.n_tokens;
    if (pad >= 0 && (uint64_t)pad < n_slots) {
        rc = kv_usage("--pad-to %lld is less than the %zu scheduled tokens",
                      (long long)pad, n_slots);
        goto done;
    }
    if (pad >= 0)
        n_slots = (size_t)pad;
    if ((rc = open_output(&a->c, &ko, &o)))
        goto done;
    for (size_t k = 0; k < m.n && o.npy && o.dtype == KV_I32; k++) {
        const struct map_run *r = &m.g[k].r;
        if (m.g[k].kind != KV_CACHE_MAMBA &&
            (rc = map_i32_check(m.fl, m.nf, &m.g[k].st,
                                r->have32 ? r->mt.ids : NULL, r->kids,
                                r->kcols, r->K, r->M, n_slots))) {
            out_release(&o);
            kv_out_abort(&ko);
            goto done;
        }
    }
    groups_write(&o, &m, sched, comp, n_sched, n_slots);
    rc = close_output(&ko, &o);
done:
    for (size_t k = 0; k < m.n; k++) {
        kv_slot_step_release(&m.g[k].st);
        free(m.g[k].r.ids);
        free(m.g[k].r.kids);
        unmap_table(&m.g[k].r.mt);
    }
    free(m.g);
    kv_groups_release(&gs);
    free(sched);
    free(comp);
    return rc;
}

int cmd_map(int argc, char **argv)
{
    struct map_args a;
    struct map_run r;
    struct kv_err e;
    struct kv_slot_step st;
    struct kv_out ko;
    struct out o;
    struct stepview v;
    void *argtable[32];
    int n = map_args_make(&a, argtable), rc;
    size_t n_slots;

    memset(&r, 0, sizeof r);
    r.pad = -1;
    kv_slot_step_init(&st);
    rc = parse_sub("map", argtable, argc, argv, a.c.help, a.c.version,
                   a.c.end, map_synopsis);
    if (rc < 0 && (a.mc->count || a.kg->count)) {
        rc = map_groups(&a);
        goto done;
    }
    if (rc >= 0 || (rc = map_geometry(&a, &r)) || (rc = map_requests(&a, &r)))
        goto done;
    /* validates everything; token-level fields are streamed below */
    if (kv_slot_compute(&r.g, &r.t, r.n_sched, r.scheduled, r.computed, 0,
                        &st, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    n_slots = st.n_tokens;
    if (r.pad >= 0) {
        if ((uint64_t)r.pad < st.n_tokens) {
            rc = kv_usage("--pad-to %lld is less than the %zu scheduled "
                          "tokens", (long long)r.pad, st.n_tokens);
            goto done;
        }
        n_slots = (size_t)r.pad;
    }
    memset(&v, 0, sizeof v);
    v.s = &st;
    v.table = r.kids;
    v.t_rows = r.n_sched;
    v.t_cols = r.kcols;
    if ((rc = open_output(&a.c, &ko, &o)))
        goto done;
    {
        /* the output, before any of it is written: its entries at their
         * npy size (8 bytes, 4 with --dtype i32; text counted as i64) */
        size_t entries = map_entries(r.fl, r.nf, &st, r.n_sched, r.kcols,
                                     a.cp.all->count ? (size_t)r.g.cp_world : 1, n_slots);
        char what[96];
        snprintf(what, sizeof what, "the output of %zu entries", entries);
        if ((rc = mem_check(mem_mul(entries, o.npy && o.dtype == KV_I32 ? 4 : 8),
                            r.max_mem, what))) {
            out_release(&o);
            kv_out_abort(&ko);
            goto done;
        }
    }
    if (o.npy && o.dtype == KV_I32 &&
        (rc = map_i32_check(r.fl, r.nf, &st, r.have32 ? r.mt.ids : NULL,
                            r.kids, r.kcols, r.K, r.M, n_slots))) {
        out_release(&o);
        kv_out_abort(&ko);
        goto done;
    }
    map_write(&o, r.fl, r.nf, &v, &r.g, &r.t, r.scheduled, r.computed,
              a.cp.all->count ? (size_t)r.g.cp_world : 1, a.cp.all->count > 0,
              n_slots);
    rc = close_output(&ko, &o);
done:
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_slot_step_release(&st);
    free(r.scheduled);
    free(r.computed);
    free(r.ids);
    free(r.kids);
    unmap_table(&r.mt);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
