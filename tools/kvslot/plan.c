/* kvslot plan: the scheduler and block allocator, step by step. */
#include "kvslot.h"
#include "plan_trace.h"
#include "plan_groups.h"


static const char plan_synopsis[] =
    "\nRun vLLM's scheduler and block allocator step by step and write "
    "every step's\nmetadata and block table (man 1 kvslot).";

/* What plan reads about the requests' content: prompts (lengths, or token
 * ids from --prompts), arrivals, cache salts and LoRA ids. */
struct apc_in {
    size_t n, table_bytes;
    int64_t *plens, *table, **tokens, *arrivals, *lora;
    char **salts, *salt_buf;
};

static void apc_in_free(struct apc_in *a)
{
    free(a->plens);
    free(a->table);
    free(a->tokens);
    free(a->arrivals);
    free(a->lora);
    free(a->salts);
    free(a->salt_buf);
}

/* A per-request list: one value for all, or one each. */
static int per_request(struct arg_str *a, const char *name, int64_t min,
                       size_t n, int64_t **out)
{
    int64_t *v = NULL;
    size_t k = 0;
    int rc;
    if (!a->count)
        return 0;
    if ((rc = opt_list(a, name, min, &v, &k)))
        return rc;
    if (k != 1 && k != n) {
        free(v);
        return kv_usage("%s has %zu values for %zu requests", name, k, n);
    }
    *out = malloc(n * sizeof **out);
    if (!*out) {
        free(v);
        return kv_fail("out of memory");
    }
    for (size_t i = 0; i < n; i++)
        (*out)[i] = v[k == 1 ? 0 : i];
    free(v);
    return 0;
}

static int apc_inputs(struct arg_str *plen, struct arg_str *pfile,
                      struct arg_str *arrive, struct arg_str *salt,
                      struct arg_str *lora, size_t max_mem, struct apc_in *a)
{
    struct kv_err e;
    size_t rows = 0, cols = 0;
    int rc;
    if (!!plen->count == !!pfile->count)
        return kv_usage("give --prompt-lens or --prompts, one of them");
    if (plen->count) {
        if ((rc = opt_list(plen, "--prompt-lens", 1, &a->plens, &a->n)))
            return rc;
        if (a->n == 0)
            return kv_usage("--prompt-lens: no requests");
    } else {
        if (kv_read_int_table(pfile->sval[0], -1, max_mem, &a->table,
                              &rows, &cols, &e))
            return kv_fail("--prompts: %s", e.msg);
        a->table_bytes = rows * cols * sizeof *a->table;
        a->n = rows;
        a->plens = calloc(rows ? rows : 1, sizeof *a->plens);
        a->tokens = calloc(rows ? rows : 1, sizeof *a->tokens);
        if (!a->plens || !a->tokens)
            return kv_fail("out of memory");
        for (size_t i = 0; i < rows; i++) {
            int64_t *row = a->table + i * cols, len = 0;
            while ((size_t)len < cols && row[len] >= 0)
                len++;
            /* -1 pads the end of a row; any other negative id, or an id
             * after the padding, is named where the ids stop */
            for (size_t j = (size_t)len; j < cols; j++)
                if (row[j] != -1)
                    return kv_fail("--prompts: request %zu: token %lld is "
                                   "%lld; ids are >= 0 (-1 pads only the end "
                                   "of a row)", i, (long long)len,
                                   (long long)row[len]);
            if (len == 0)
                return kv_fail("--prompts: request %zu (line %zu) is empty",
                               i, i + 1);
            a->plens[i] = len;
            a->tokens[i] = row;
        }
        if (rows == 0)
            return kv_fail("--prompts: no requests");
    }
    if ((rc = per_request(arrive, "--arrivals", 1, a->n, &a->arrivals)) ||
        (rc = per_request(lora, "--lora-ids", 0, a->n, &a->lora)))
        return rc;
    if (salt->count) {
        size_t k = 1;
        a->salt_buf = strdup(salt->sval[0]);
        a->salts = calloc(a->n, sizeof *a->salts);
        if (!a->salt_buf || !a->salts)
            return kv_fail("out of memory");
        for (const char *p = a->salt_buf; *p; p++)
            k += *p == ',';
        if (k != 1 && k != a->n)
            return kv_usage("--salt has %zu values for %zu requests", k, a->n);
        char *p = a->salt_buf;
        for (size_t i = 0; i < k; i++) {
            char *c = strchr(p, ',');
            if (c)
                *c = '\0';
            a->salts[i] = p;
            p = c ? c + 1 : p + strlen(p);
        }
        for (size_t i = k; i < a->n; i++)
            a->salts[i] = a->salts[0];
    }
    return 0;
}

/* plan --all-ranks: every rank's slot mapping of one step, padded with -1
 * to n_slots, in *buf (grown as needed).  0 or an exit code. */
static int all_ranks(const struct kv_slot_geom *g0, const struct kv_slot_table *t,
                     const struct kv_plan_step *ss, int64_t world,
                     size_t n_slots, int64_t **buf)
{
    struct kv_err e;
    int64_t *p = realloc(*buf, ((size_t)world * n_slots + 1) * sizeof *p);
    if (!p)
        return kv_fail("out of memory");
    *buf = p;
    for (int64_t r = 0; r < world; r++) {
        struct kv_slot_geom g = *g0;
        struct kv_slot_step st;
        g.cp_rank = r;
        kv_slot_step_init(&st);
        if (kv_slot_compute(&g, t, ss->n_rows, ss->num_scheduled,
                            ss->num_computed, 1u << KV_SLOT_SLOT_MAPPING,
                            &st, &e)) {
            kv_slot_step_release(&st);
            return kv_fail_err(&e);
        }
        int64_t *row = p + (size_t)r * n_slots;
        memcpy(row, st.slot_mapping, st.n_tokens * sizeof *row);
        for (size_t j = st.n_tokens; j < n_slots; j++)
            row[j] = KV_SLOT_PAD;
        kv_slot_step_release(&st);
    }
    return 0;
}

struct plan_args {
    struct arg_str *prompts, *pfile, *arrive, *salt, *lora, *outs, *budget,
                   *bs, *mml, *steps, *nblocks, *seqs, *padto, *reorder,
                   *maxmem, *trace, *msps;
    struct arg_lit *apc, *decode, *quiet, *verbose, *round, *noreserve,
                   *async, *summary;
    struct cp_args cp;
    struct plan_groups pg;
    struct common c;
};

/* plan's options, in the order --help lists them; returns the count. */
static int plan_args_make(struct plan_args *a, void **t)
{
    int n = 0;
    common_make(&a->c);
    a->c.format->hdr.datatype = "npy|text|json|auto";
    a->c.format->hdr.glossary = "output format (json: an object a step, "
                                "or the summary's; auto: npy unless stdout "
                                "is a terminal)";
    t[n++] = a->prompts = arg_str0(NULL, "prompt-lens", "a,b,..",
                                   "prompt length of each request");
    t[n++] = a->pfile = arg_str0(NULL, "prompts", "FILE",
                                 "token ids of each request, a line each "
                                 "(or an int .npy, -1 padded)");
    n += plan_trace_args(&a->trace, &a->msps, &a->summary, t + n);
    t[n++] = a->arrive = arg_str0(NULL, "arrivals", "s0,s1,..",
                                  "step each request arrives at (default 1)");
    t[n++] = a->apc = arg_lit0(NULL, "enable-prefix-caching",
                               "vLLM's automatic prefix caching (needs "
                               "--prompts)");
    t[n++] = a->salt = arg_str0(NULL, "salt", "S|a,b,..",
                                "cache salt of each request (its first "
                                "block's extra key)");
    t[n++] = a->lora = arg_str0(NULL, "lora-ids", "N|a,b,..",
                                "LoRA id of each request (every block's "
                                "extra key)");
    n += cp_args_make(&a->cp, t + n);
    n += plan_groups_args(&a->pg, t + n);
    t[n++] = a->outs = arg_str0(NULL, "output-lens", "N|a,b,..",
                                "tokens each request generates (default: "
                                "until --max-model-len)");
    t[n++] = a->budget = arg_str1(NULL, "max-tokens", "N",
                                  "token budget per step "
                                  "(max_num_batched_tokens)");
    t[n++] = a->bs = arg_str1("B", "block-size", "N", "block size");
    t[n++] = a->mml = arg_str1(NULL, "max-model-len", "M", "max model len");
    t[n++] = a->steps = arg_str0(NULL, "steps", "K", "stop after K steps");
    t[n++] = a->nblocks = arg_str0(NULL, "num-blocks", "N",
                                   "blocks in the pool, block 0 included "
                                   "(default: enough)");
    t[n++] = a->seqs = arg_str0(NULL, "max-num-seqs", "N",
                                "running requests at most (default 256)");
    t[n++] = a->noreserve = arg_lit0(NULL, "no-reserve-full-isl",
                                     "admit a waiting request when this "
                                     "step's chunk fits, not its whole "
                                     "prompt (vLLM before 2026-03)");
    t[n++] = a->async = arg_lit0(NULL, "async-scheduling",
                                 "vLLM's asynchronous scheduling: step k+1 "
                                 "scheduled before step k's output");
    t[n++] = a->decode = arg_lit0(NULL, "decode",
                                  "go on until every request has finished");
    t[n++] = a->padto = arg_str0(NULL, "pad-to", "N",
                                 "pad slot_mapping with -1 to N entries");
    t[n++] = a->round = arg_lit0(NULL, "round-stride",
                                 "block-table rows padded to a multiple of "
                                 "128/gcd(128,B) columns (newest vLLM)");
    t[n++] = a->reorder = arg_str0(NULL, "reorder",
                                   "none|split-decodes|decode-extend-prefill",
                                   "batch order: as scheduled, decodes "
                                   "swapped to the front (older vLLM), or "
                                   "decode, extend, prefill (newest; MLA "
                                   "backends)");
    t[n++] = a->maxmem = arg_str0(NULL, "max-mem", "SIZE",
                                  "memory limit (default 75% of RAM)");
    t[n++] = a->quiet = arg_lit0("q", "quiet", "no progress line");
    t[n++] = a->verbose = arg_lit0("v", "verbose",
                                   "print counters and the time taken");
    n += common_add(&a->c, t + n);
    return n;
}

/* What the step loop needs besides the scheduler. */
struct plan_run {
    int64_t B, M, I, cpw, cprk, pad, K_steps, budget, max_seqs;
    size_t max_mem;
    enum fid fl[NF];
    size_t nf, np;
    unsigned want;
    size_t n_groups;            /* --model-config / --kv-groups: 0 without */
    const struct kv_plan_group *groups; /* their block sizes (0: B) */
    const unsigned char *bt_sel, *sm_sel;
    int64_t *olens, *slot_pad, *slot_all, *gslots;
    struct apc_in ai;
    struct kv_plan_summary sum;
};

/* The output lengths: one for all, or one each. */
static int plan_outputs(struct arg_str *outs, size_t np, int64_t **olens)
{
    size_t no = 0;
    int rc = opt_list(outs, "--output-lens", 1, olens, &no);
    if (rc)
        return rc;
    if (outs->count && no == 1 && np > 1) {
        int64_t *x = realloc(*olens, np * sizeof *x);
        if (!x)
            return kv_fail("out of memory");
        *olens = x;
        for (size_t i = 1; i < np; i++)
            x[i] = x[0];
        no = np;
    }
    if (outs->count && no != np)
        return kv_usage("--output-lens has %zu values for %zu requests",
                        no, np);
    return 0;
}

/* Options into the scheduler's config and pr; 0 or an exit code. */
static int plan_config(struct plan_args *a, struct plan_run *pr,
                       struct kv_plan_config *cfg)
{
    struct kv_err e;
    int64_t nb, ms;
    int rc;
    if (kv_parse_max_mem(a->maxmem->count ? a->maxmem->sval[0] : NULL,
                         &cfg->max_bytes, &e))
        return kv_usage("%s", e.msg);
    pr->max_mem = cfg->max_bytes;
    if ((rc = opt_i64(a->budget, "--max-tokens", 1, INT32_MAX, 0, &pr->budget)) ||
        (rc = opt_i64(a->bs, "-B", 1, INT32_MAX, 0, &pr->B)) ||
        (rc = opt_i64(a->mml, "--max-model-len", 1, INT32_MAX, 0, &pr->M)) ||
        (rc = opt_i64(a->steps, "--steps", 1, INT64_MAX, INT64_MAX, &pr->K_steps)) ||
        (rc = opt_i64(a->nblocks, "--num-blocks", 2, INT32_MAX, 0, &nb)) ||
        (rc = opt_i64(a->seqs, "--max-num-seqs", 1, INT32_MAX, 256, &ms)) ||
        (rc = opt_i64(a->padto, "--pad-to", 0, INT32_MAX, -1, &pr->pad)) ||
        (rc = cp_numbers(&a->cp)) ||
        (rc = plan_groups_load(&a->pg, pr->B, pr->M, a->cp.W, a->cp.P,
                               a->apc->count > 0)) ||
        (rc = cp_options(&a->cp, a->pg.k.n ? a->pg.k.block_size : pr->B, &pr->cpw,
                         &pr->cprk)) ||
        (rc = plan_groups_fields(&a->pg, a->c.fields->count
                                 ? a->c.fields->sval[0] : NULL)) ||
        (rc = parse_fields(a->pg.k.fields, 1, pr->fl, &pr->nf)) ||
        (rc = plan_trace_inputs(a->trace, a->msps, a->summary, nb,
                                (struct arg_str *[]){
                                    a->prompts, a->pfile, a->arrive,
                                    a->outs, a->salt, a->lora, NULL },
                                pr->max_mem, &pr->ai.n, &pr->ai.plens,
                                &pr->ai.tokens, &pr->ai.arrivals,
                                &pr->ai.table, &pr->ai.table_bytes,
                                &pr->olens)) ||
        (!a->trace->count &&
         ((rc = apc_inputs(a->prompts, a->pfile, a->arrive, a->salt, a->lora,
                           pr->max_mem, &pr->ai)) ||
          (rc = plan_outputs(a->outs, pr->ai.n, &pr->olens)))))
        return rc;
    pr->I = a->cp.I;
    pr->np = pr->ai.n;
    kv_plan_summary_init(&pr->sum, nb, pr->np);
    if (a->pg.k.n) {
        /* every group's block size (kvslot groups): the scheduler's */
        pr->B = a->pg.k.block_size;
        pr->n_groups = a->pg.k.n;
        pr->groups = a->pg.k.g;
        pr->bt_sel = a->pg.k.bt_sel;
        pr->sm_sel = a->pg.k.sm_sel;
        if (a->cp.all->count)
            return kv_usage("--all-ranks with KV-cache groups: not modelled "
                            "(one rank's slot mapping a group is written)");
    }
    if (a->apc->count && !pr->ai.tokens)
        return kv_usage("--enable-prefix-caching needs --prompts FILE (the "
                        "token ids the block hashes are made of)");
    if (!a->apc->count && (a->salt->count || a->lora->count))
        return kv_usage("%s: an extra key of the block hashes, needs "
                        "--enable-prefix-caching", a->salt->count
                        ? "--salt" : "--lora-ids");
    if (a->apc->count && !a->c.fields->count) {
        pr->fl[pr->nf++] = F_NUM_CACHED;
        pr->fl[pr->nf++] = F_SHARED;
        pr->fl[pr->nf++] = F_EVICTED;
    }
    for (size_t i = 0; i < pr->np; i++)
        if (pr->ai.plens[i] >= pr->M)
            /* vLLM refuses a generation prompt of max_model_len tokens:
             * there is no room for the one output token */
            return kv_usage("%s: request %zu: prompt length %lld leaves no "
                            "room for an output token under --max-model-len "
                            "%lld", a->pfile->count ? "--prompts"
                                                    : "--prompt-lens", i,
                            (long long)pr->ai.plens[i], (long long)pr->M);
    if (pr->pad >= 0 && pr->pad < pr->budget)
        return kv_usage("--pad-to %lld is less than --max-tokens %lld",
                        (long long)pr->pad, (long long)pr->budget);
    if ((rc = slot_options_used(pr->fl, pr->nf, pr->pad >= 0, a->cp.all->count > 0)))
        return rc;
    if (a->summary->count)
        pr->nf = 0;         /* no step is written */
    for (size_t i = 0; i < pr->nf; i++)
        pr->want |= slot_want(pr->fl[i]);
    memset(cfg, 0, sizeof *cfg);
    cfg->max_bytes = pr->max_mem;
    cfg->n_reqs = pr->np;
    cfg->prompt_lens = pr->ai.plens;
    cfg->output_lens = pr->olens;
    cfg->max_num_batched_tokens = pr->budget;
    cfg->max_num_seqs = ms;
    pr->max_seqs = ms;
    /* with context parallelism the scheduler's block is the virtual block
     * of B tokens on each of the cpw ranks: vLLM's KV cache manager
     * allocates, and prefix caching hashes, blocks of B * cpw tokens */
    cfg->block_size = pr->B * pr->cpw;
    cfg->kernel_block_size = pr->B;
    cfg->max_model_len = pr->M;
    cfg->num_blocks = nb;
    cfg->round_stride = a->round->count > 0;
    cfg->prefix_caching = a->apc->count > 0;
    cfg->prompt_tokens = (const int64_t *const *)pr->ai.tokens;
    cfg->arrivals = pr->ai.arrivals;
    cfg->salts = (const char *const *)pr->ai.salts;
    cfg->lora_ids = pr->ai.lora;
    cfg->admit_by_chunk = a->noreserve->count > 0;
    cfg->async_scheduling = a->async->count > 0;
    cfg->n_groups = a->pg.k.n;
    cfg->groups = a->pg.k.g;
    if (a->pg.k.n) {
        /* a group's table is made only for the fields that write it */
        int bt = 0, sm = 0;
        for (size_t i = 0; i < pr->nf; i++) {
            bt |= pr->fl[i] == F_BLOCK_TABLE;
            sm |= pr->fl[i] == F_SLOT_MAPPING;
        }
        for (size_t g = 0; g < a->pg.k.n; g++) {
            /* 1: no table; 2: the blocks a slot mapping reads, no padding */
            a->pg.skip[g] = (bt && a->pg.k.bt_sel[g]) ? 0
                          : (sm && a->pg.k.sm_sel[g]) ? 2 : 1;
            if (!sm)
                a->pg.k.sm_sel[g] = 0;
        }
        /* group 0's table also makes the per-token block fields */
        if ((pr->want & ((1u << KV_SLOT_BLOCK_TABLE_INDICES) |
                         (1u << KV_SLOT_BLOCK_NUMBERS) |
                         (1u << KV_SLOT_BLOCK_OFFSETS))) && a->pg.skip[0] == 1)
            a->pg.skip[0] = 2;
        cfg->skip_tables = a->pg.skip;
    }
    cfg->skip_waiting = cfg->skip_shared = 1;
    for (size_t i = 0; i < pr->nf; i++) {
        if (pr->fl[i] == F_WAITING)
            cfg->skip_waiting = 0;
        if (pr->fl[i] == F_SHARED)
            cfg->skip_shared = 0;
    }
    const char *ro = a->reorder->count ? a->reorder->sval[0] : "none";
    if (strcmp(ro, "split-decodes") == 0)
        cfg->split_decodes = KV_PLAN_REORDER_SPLIT_DECODES;
    else if (strcmp(ro, "decode-extend-prefill") == 0)
        cfg->split_decodes = KV_PLAN_REORDER_REGIONS;
    else if (strcmp(ro, "none") != 0)
        return kv_usage("--reorder: expected none, split-decodes or "
                        "decode-extend-prefill, got '%s'", ro);
    return 0;
}

/* --dtype i32: refuse a run whose slots or token indices pass 32 bits. */
static int plan_i32_check(const struct plan_run *pr, int64_t nb)
{
    int64_t pool = nb ? nb : (int64_t)pr->np * (pr->M / pr->B + 1) + 1;
    if (pool > INT32_MAX / pr->B)
        return kv_usage("--dtype i32: a pool of %lld blocks of %lld tokens "
                        "(%s) has slots past 32 bits; use --dtype i64",
                        (long long)pool, (long long)pr->B,
                        nb ? "--num-blocks" : "enough for every request");
    if ((int64_t)pr->np * pr->M > INT32_MAX)
        return kv_usage("--dtype i32: token indices of %zu requests * "
                        "--max-model-len %lld pass 32 bits; use --dtype i64",
                        pr->np, (long long)pr->M);
    return 0;
}

/* With KV-cache groups: each group's slot mapping (its own table, -1
 * padded to v->pad_to) into pr->gslots, and the groups' tables, into v.
 * 0 or an exit code. */
static int group_fields(struct plan_run *pr, const struct kv_slot_geom *g,
                        const struct kv_plan_step *ss, struct stepview *v)
{
    size_t ng = ss->n_groups, cells = ng * (v->pad_to ? v->pad_to : 1);
    int64_t *p = realloc(pr->gslots, cells * sizeof *p);
    if (!p)
        return kv_fail("out of memory");
    pr->gslots = p;
    for (size_t k = 0; k < ng; k++)
        if (pr->sm_sel[k])
            kv_plan_group_slots(g, ss, pr->groups, k, p + k * v->pad_to,
                                v->pad_to);
    v->n_groups = ng;
    v->gtables = ss->tables;
    v->gslots = p;
    v->bt_sel = pr->bt_sel;
    v->sm_sel = pr->sm_sel;
    return 0;
}

/* One step's metadata: the slot fields of its table, on one rank or all. */
static int plan_write_step(struct plan_run *pr, int all, struct out *o,
                           const struct kv_plan_step *ss)
{
    struct kv_err e;
    struct kv_slot_geom g;
    struct kv_slot_table t = { NULL, 0, 0, NULL };
    struct kv_slot_step st;
    struct stepview v;
    int rc = 0;

    memset(&g, 0, sizeof g);
    g.block_size = pr->B;
    g.kernel_block_size = pr->B;
    g.max_model_len = pr->M;
    g.cp_world = pr->cpw;
    g.cp_rank = pr->cprk;
    g.interleave = pr->I;
    t.ids = ss->block_table;
    t.n_rows = ss->n_rows;
    t.n_cols = ss->n_cols;
    kv_slot_step_init(&st);
    /* with groups, each group's slot mapping is group_fields' */
    if (kv_slot_compute(&g, &t, ss->n_rows, ss->num_scheduled, ss->num_computed,
                        pr->n_groups ? pr->want & ~(1u << KV_SLOT_SLOT_MAPPING)
                                     : pr->want | (1u << KV_SLOT_SLOT_MAPPING),
                        &st, &e)) {
        kv_slot_step_release(&st);
        return kv_fail_err(&e);
    }
    memset(&v, 0, sizeof v);
    v.s = &st;
    v.n_ranks = 1;
    v.pad_to = st.n_tokens;
    v.slot_padded = st.slot_mapping;
    if (pr->slot_pad && pr->n_groups) {
        v.pad_to = (size_t)pr->pad;
    } else if (pr->slot_pad) {
        memcpy(pr->slot_pad, st.slot_mapping, st.n_tokens * sizeof *pr->slot_pad);
        for (size_t j = st.n_tokens; j < (size_t)pr->pad; j++)
            pr->slot_pad[j] = KV_SLOT_PAD;
        v.pad_to = (size_t)pr->pad;
        v.slot_padded = pr->slot_pad;
    }
    v.table = ss->block_table;
    v.t_rows = ss->n_rows;
    v.t_cols = ss->n_cols;
    v.plan = ss;
    if (pr->n_groups)
        rc = group_fields(pr, &g, ss, &v);
    if (rc == 0 && all && !(rc = all_ranks(&g, &t, ss, pr->cpw, v.pad_to, &pr->slot_all))) {
        v.slot_all = pr->slot_all;
        v.n_ranks = (size_t)pr->cpw;
    }
    if (rc == 0 && o->npy == OUT_JSON) {
        /* one object a step: the fields one by one, commas between */
        out_bytes(o, "{", 1);
        for (size_t i = 0; i < pr->nf; i++) {
            if (i)
                out_bytes(o, ",", 1);
            write_step(o, pr->fl + i, 1, &v);
        }
        out_bytes(o, "}\n", 2);
    } else if (rc == 0)
        write_step(o, pr->fl, pr->nf, &v);
    kv_slot_step_release(&st);
    return rc;
}

/* Every step until the plan ends (or --steps); 0 or an exit code. */
static int plan_steps(struct plan_run *pr, const struct plan_args *a,
                      struct kv_plan *s, struct out *o)
{
    struct kv_err e;
    struct kv_progress prog;
    int64_t n_steps = 0, n_tokens = 0, n_preempted = 0, n_finished = 0;
    double t0 = kv_now();
    int rc = 0;

    kv_progress_start(&prog, "plan", a->quiet->count > 0);
    for (int64_t k = 0; k < pr->K_steps && !o->failed; k++) {
        struct kv_plan_step ss;
        if (kv_plan_step(s, &ss, &e)) {
            rc = kv_fail_err(&e);
            break;
        }
        if (!a->summary->count &&
            (rc = plan_write_step(pr, a->cp.all->count > 0, o, &ss)))
            break;
        if (kv_plan_summary_add(&pr->sum, &ss, &e)) {
            rc = kv_fail_err(&e);
            break;
        }
        n_steps++;
        n_tokens += ss.num_tokens;
        n_preempted += (int64_t)ss.n_preempted;
        n_finished += (int64_t)ss.n_finished;
        kv_progress_update(&prog, (uint64_t)n_finished, pr->np);
        if (kv_plan_summary_last(&ss, a->decode->count > 0,
                                 a->steps->count > 0))
            break;
    }
    kv_progress_end(&prog);
    if (rc == 0 && a->summary->count && !o->failed)
        rc = plan_summary_write(o->f, &pr->sum, o->npy == OUT_JSON);
    if (rc == 0 && a->verbose->count && !o->failed)
        kv_warn("%lld steps, %lld tokens, %lld preemptions, %lld of %zu "
                "requests finished, %.3f s", (long long)n_steps,
                (long long)n_tokens, (long long)n_preempted,
                (long long)n_finished, pr->np, kv_now() - t0);
    return rc;
}

/* The bytes plan holds besides the scheduler's state, all growing with the
 * input: the requests' lists and --prompts table, and one step's metadata:
 * the token fields kv_slot_compute fills (slot_mapping always) for the
 * most tokens a step can schedule, the request rows, the --pad-to copy,
 * and with --all-ranks every rank's row and the rank being computed; the
 * output buffer.  A step schedules at most the budget and, per request,
 * its prompt (a decode is one token); a preempted request recomputes what
 * it has, up to its whole length, so with --num-blocks (a pool that may
 * run short) the bound per request is that length. */
static size_t plan_extra_bytes(const struct plan_run *pr, int all, int64_t num_blocks)
{
    size_t tokens = 0, rows, fields = 0, t, slots;
    for (size_t i = 0; i < pr->np; i++) {
        int64_t len = pr->ai.plens[i];
        if (num_blocks)
            len = pr->olens && pr->olens[i] < pr->M - len ? len + pr->olens[i] : pr->M;
        tokens = mem_add(tokens, (size_t)len);
    }
    if (tokens > (size_t)pr->budget)
        tokens = (size_t)pr->budget;
    rows = pr->np < (size_t)pr->max_seqs ? pr->np : (size_t)pr->max_seqs;
    for (unsigned w = pr->want | (1u << KV_SLOT_SLOT_MAPPING); w; w &= w - 1)
        fields++;
    t = mem_add(mem_mul(mem_mul(tokens, fields), 8), mem_mul(rows + 1, 4 * 8));
    slots = pr->pad > (int64_t)tokens ? (size_t)pr->pad : tokens;
    if (pr->pad >= 0)
        t = mem_add(t, mem_mul((size_t)pr->pad, 8));
    if (all)
        t = mem_add(t, mem_add(mem_mul(mem_mul((size_t)pr->cpw, slots), 8),
                               mem_add(mem_mul(tokens, 8), mem_mul(rows + 1, 4 * 8))));
    t = mem_add(t, mem_mul(pr->np, 6 * 8));
    t = mem_add(t, pr->ai.table_bytes);
    return mem_add(t, (size_t)1 << 18);
}

int cmd_plan_sched(int argc, char **argv)
{
    struct plan_args a;
    struct plan_run pr;
    struct kv_plan_config cfg;
    struct kv_plan *s = NULL;
    struct kv_out ko;
    struct out o;
    struct kv_err e;
    void *argtable[48];
    int n = plan_args_make(&a, argtable), rc, opened = 0, json;

    memset(&pr, 0, sizeof pr);
    pr.cpw = 1;
    rc = parse_sub("plan", argtable, argc, argv, a.c.help, a.c.version,
                   a.c.end, plan_synopsis);
    if (rc >= 0 || (rc = plan_config(&a, &pr, &cfg)))
        goto done;
    /* every allocation that grows with the input, before any of it */
    size_t state = 0;
    cfg.extra_bytes = plan_extra_bytes(&pr, a.cp.all->count > 0, cfg.num_blocks);
    if (kv_plan_state_bytes(&cfg, &state, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if (mem_add(state, cfg.extra_bytes) > cfg.max_bytes) {
        char what[160];
        snprintf(what, sizeof what, "the plan (%zu bytes of scheduler state, %zu of "
                 "step metadata and inputs)", state, cfg.extra_bytes);
        rc = mem_check(mem_add(state, cfg.extra_bytes), cfg.max_bytes, what);
        goto done;
    }
    if (kv_plan_new(&s, &cfg, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    /* -f json is plan's own: the output opens as text, then the writer
     * is switched to JSON */
    json = a.c.format->count && !strcmp(a.c.format->sval[0], "json");
    if (json)
        a.c.format->sval[0] = "text";
    if ((rc = open_output(&a.c, &ko, &o)))
        goto done;
    opened = 1;
    if (json)
        o.npy = OUT_JSON;
    if (o.npy == 1 && o.dtype == KV_I32 && (rc = plan_i32_check(&pr, cfg.num_blocks)))
        goto done;
    if (pr.pad >= 0 &&
        !(pr.slot_pad = malloc((size_t)(pr.pad ? pr.pad : 1) * sizeof *pr.slot_pad))) {
        rc = kv_fail("out of memory");
        goto done;
    }
    if ((rc = plan_steps(&pr, &a, s, &o)))
        goto done;
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_plan_free(s);
    free(pr.olens);
    apc_in_free(&pr.ai);
    kv_plan_summary_release(&pr.sum);
    free(pr.slot_pad);
    free(pr.slot_all);
    free(pr.gslots);
    plan_groups_free(&a.pg);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
