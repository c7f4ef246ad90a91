/* kvslot map: one step's metadata from a block table and token counts;
 * with KV-cache groups (--model-config, --kv-groups), each group's block
 * table and slot mapping (map_groups below). */
#include "kvslot.h"
#include "slot/map_groups.h"

static const char map_synopsis[] =
    "\nOne step of vLLM's model-runner metadata: positions, token and "
    "block-table\nindices, slot mapping, query_start_loc, seq_lens ... "
    "(man 1 kvslot).";

/* The library's field bits (1 << enum kv_slot_field) of a field list:
 * map's fields are the library's, in its order, from F_QSL on. */
static unsigned field_bits(const enum fid *fl, size_t nf)
{
    unsigned bits = 0;
    for (size_t i = 0; i < nf; i++)
        if (fl[i] >= F_QSL && fl[i] <= F_BLOCK_TABLE)
            bits |= 1u << (fl[i] - F_QSL);
    return bits;
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
 * blocks expanded; the max model len from the table when not given
 * (M NULL: left to the caller).  0 or an exit code. */
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
        kv_map_table_read(path, max_mem, n_sched, scheduled, computed,
                          B * cpw, ids, rows, &cols, &e))
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
    if (M && *M == 0 &&
        kv_map_table_len(*kcols, K, cpw, kv_path_name(path, 0), M, &e))
        return kv_fail_err(&e);
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

/* Refuse (exit 1) an output of entries entries over --max-mem, before
 * any of it is written: each at its npy size (8 bytes, 4 with --dtype
 * i32; text counted as i64).  0 when it fits. */
static int output_check(const struct out *o, size_t entries, size_t max_mem)
{
    struct kv_err e;
    if (kv_map_output_check(entries, o->npy && o->dtype == KV_I32 ? 4 : 8, max_mem, &e))
        return kv_fail_err(&e);
    return 0;
}

/* ---- map with KV-cache groups ------------------------------------------- */

/* Group k's table read (an attention group's as map reads one, a Mamba
 * group's state indices as they are) into r, and its step computed by
 * libkv (kv_map_groups_compute; token fields left to the writer).  0 or
 * an exit code. */
static int group_load(struct kv_map_groups *m, size_t k, struct map_run *r,
                      size_t max_mem, const int64_t *sched,
                      const int64_t *comp, size_t n_sched)
{
    const struct kv_map_group *q = &m->g[k];
    struct kv_slot_table t = { NULL, 0, 0, NULL };
    struct kv_err e;
    enum fid fl[NF];
    size_t nf = 0;
    int rc;

    if (!q->use_table)
        return 0;
    if (q->kind == KV_CACHE_MAMBA) {
        if (kv_map_table_read(q->path, max_mem, 0, NULL, NULL, 0, &r->kids,
                              &r->rows, &r->kcols, &e))
            return kv_fail_err(&e);
    } else {
        for (int f = 0; f < KV_SLOT_NFIELDS; f++)
            if (q->sel[f])
                fl[nf++] = (enum fid)(f + F_QSL);
        if ((rc = map_table(q->path, max_mem, fl, nf, q->geom.block_size,
                            q->geom.block_size, q->geom.cp_world, n_sched,
                            sched, comp,
                            &r->mt, &r->ids, &r->kids, &r->rows, &r->kcols,
                            &r->have32, NULL)))
            return rc;
    }
    t.ids = r->kids;
    t.ids32 = r->have32 ? r->mt.ids : NULL;
    t.n_rows = r->rows;
    t.n_cols = r->kcols;
    if (kv_map_groups_compute(m, k, &t, kv_path_name(q->path, 0), sched,
                              comp, n_sched, 0, &e))
        return kv_fail_err(&e);
    return 0;
}

/* The fields, in order: the shared ones from group m->first, the
 * per-group ones as NAME.gK. */
static void groups_write(struct out *o, const struct kv_map_groups *m,
                         const int64_t *sched, const int64_t *comp,
                         size_t n_sched)
{
    const struct kv_map_group *f0 = &m->g[m->first];
    struct stepview v;

    memset(&v, 0, sizeof v);
    v.s = &f0->st;
    v.table = f0->t.ids;
    v.t_rows = n_sched;
    v.t_cols = f0->t.n_cols;
    for (size_t i = 0; i < m->nf; i++) {
        enum kv_slot_field lf = m->fl[i];
        enum fid f = (enum fid)(lf + F_QSL);
        if (!kv_map_field_per_group(lf)) {
            map_write(o, &f, 1, &v, &f0->geom, &f0->t, sched, comp, 1, 0,
                      m->n_slots);
            continue;
        }
        for (size_t k = 0; k < m->n; k++) {
            const struct kv_map_group *q = &m->g[k];
            struct tokfield tf;
            char name[64];
            if (!q->sel[lf])
                continue;
            snprintf(name, sizeof name, "%s.g%zu", fnames[f], k);
            if (f == F_BLOCK_TABLE) {
                emit_mat(o, name, q->t.ids, n_sched, q->t.n_cols);
                continue;
            }
            memset(&tf, 0, sizeof tf);
            tf.g = &q->geom;
            tf.t = &q->t;
            tf.n_reqs = n_sched;
            tf.sched = sched;
            tf.comp = comp;
            tf.f = lf;
            tf.n_ranks = 1;
            tf.row_len = f == F_SLOT_MAPPING ? m->n_slots : q->st.n_tokens;
            emit_tokens(o, name, &tf);
        }
    }
}

/* The groups of --model-config / --kv-groups, their tables and fields,
 * through libkv (kv_map_groups_load, _tables, _fields).  0 or an exit
 * code. */
static int groups_load(struct map_args *a, struct kv_map_groups *m)
{
    struct kv_map_groups_opts go;
    const struct cp_args *c = &a->cp;
    struct kv_err e;
    int usage = 0;

    memset(&go, 0, sizeof go);
    go.model_config = a->mc->count ? a->mc->sval[0] : NULL;
    go.kv_groups = a->kg->count ? a->kg->sval[0] : NULL;
    go.block_size = a->bs->count ? a->bs->sval[0] : NULL;
    go.max_model_len = a->mml->count ? a->mml->sval[0] : NULL;
    go.kernel_block = a->kb->count ? a->kb->sval[0] : NULL;
#define OPT(x) ((x)->count ? (x)->sval[0] : NULL)
    go.cp_size = OPT(c->cps);
    go.cp_rank = OPT(c->cpr);
    go.pcp_size = OPT(c->pcps);
    go.pcp_rank = OPT(c->pcpr);
    go.interleave = OPT(c->il);
    go.cp_convention = OPT(c->conv);
    go.virtual_block = OPT(a->virt);
#undef OPT
    go.all_ranks = c->all->count > 0;
    go.kernel_block_size = a->kbs->count > 0;
    if (kv_map_groups_load(m, &go, &usage, &e))
        return usage ? kv_usage("%s", e.msg) : kv_fail_err(&e);
    if (kv_map_groups_tables(m, a->table->sval, (size_t)a->table->count,
                             &e) ||
        kv_map_groups_fields(m, a->c.fields->count ? a->c.fields->sval[0]
                                                   : NULL, &e))
        return kv_usage("%s", e.msg);
    return 0;
}

/* kvslot map --model-config F | --kv-groups SPEC: every group's block
 * table and slot mapping of one step, as vLLM 0.33.0's MultiGroupBlockTable
 * computes them (each group's table in its own block size; no slot
 * mapping for a Mamba group). */
static int map_groups(struct map_args *a)
{
    struct kv_map_groups m;
    struct map_run *rs = NULL;
    struct kv_out ko;
    struct out o;
    struct kv_err e;
    int64_t *sched = NULL, *comp = NULL, pad = -1;
    size_t n_sched = 0, n_comp = 0, max_mem = 0;
    enum fid fl[NF];
    int rc;

    kv_map_groups_init(&m);
    if ((rc = groups_load(a, &m)))
        goto done;
    if (!(rs = calloc(m.n, sizeof *rs))) {
        rc = kv_fail("out of memory");
        goto done;
    }
    for (size_t i = 0; i < m.nf; i++)
        fl[i] = (enum fid)(m.fl[i] + F_QSL);
    if ((rc = opt_i64(a->padto, "--pad-to", 0, INT32_MAX, -1, &pad)) ||
        (rc = opt_list(a->sched, "--scheduled", 0, &sched, &n_sched)) ||
        (rc = opt_list(a->comp, "--computed", 0, &comp, &n_comp)))
        goto done;
    if ((rc = n_sched == 0 ? kv_usage("--scheduled: no requests") : 0) ||
        (rc = a->comp->count && n_comp != n_sched
                  ? kv_usage("--computed has %zu values, --scheduled has %zu",
                             n_comp, n_sched) : 0) ||
        (rc = slot_options_used(fl, m.nf, pad >= 0, 0)))
        goto done;
    if (kv_parse_max_mem(a->maxmem->count ? a->maxmem->sval[0] : NULL,
                         &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    for (size_t k = 0; k < m.n; k++)
        if ((rc = group_load(&m, k, &rs[k], max_mem, sched, comp, n_sched)))
            goto done;
    if (kv_map_groups_pad(&m, pad, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if ((rc = open_output(&a->c, &ko, &o)))
        goto done;
    if ((rc = output_check(&o, kv_map_groups_entries(&m, n_sched), max_mem))) {
        out_release(&o);
        kv_out_abort(&ko);
        goto done;
    }
    if (o.npy && o.dtype == KV_I32 && kv_map_groups_i32_check(&m, &e)) {
        rc = kv_fail_err(&e);
        out_release(&o);
        kv_out_abort(&ko);
        goto done;
    }
    groups_write(&o, &m, sched, comp, n_sched);
    rc = close_output(&ko, &o);
done:
    for (size_t k = 0; rs && k < m.n; k++) {
        free(rs[k].ids);
        free(rs[k].kids);
        unmap_table(&rs[k].mt);
    }
    free(rs);
    kv_map_groups_release(&m);
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
        enum kv_slot_field lf[NF];
        for (size_t i = 0; i < r.nf; i++)
            lf[i] = (enum kv_slot_field)(r.fl[i] - F_QSL);
        if ((rc = output_check(&o, kv_map_entries(lf, r.nf, st.n_tokens, r.n_sched, r.kcols,
                                                  a.cp.all->count ? (size_t)r.g.cp_world : 1,
                                                  n_slots), r.max_mem))) {
            out_release(&o);
            kv_out_abort(&ko);
            goto done;
        }
    }
    if (o.npy && o.dtype == KV_I32 &&
        kv_map_i32_check(field_bits(r.fl, r.nf), &st, &r.t, r.K, r.M, n_slots,
                         &e)) {
        rc = kv_fail_err(&e);
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
