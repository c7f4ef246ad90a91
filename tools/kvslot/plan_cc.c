/* kvslot plan --chunk-cache: seed 001's flow (lib/slot/ccplan.h). */
#include "kvslot.h"

static const char cc_synopsis[] =
    "\nSeed 001's position-independent chunk cache step by step: chunk "
    "passes for misses, the copies into the main pool, then the question "
    "(man 1 kvslot).";

static void cc_emit(struct out *o, const char *name, const struct kv_cc_list *l)
{
    emit_vec(o, name, l->v, l->n);
}

/* The fields of a chunk-cache step, in their default order; the lists
 * are named with the member of struct kv_cc_step that holds them. */
#define CC_LIST(name, member) {name, offsetof(struct kv_cc_step, member)}
static const struct cc_field {
    const char *name;
    size_t off;             /* a struct kv_cc_list, or SIZE_MAX: special */
} cc_fields[] = {
    {"step", SIZE_MAX},
    CC_LIST("chunk_req", chunk_req), CC_LIST("chunk_seg", chunk_seg),
    CC_LIST("chunk_hit", chunk_hit), CC_LIST("chunk_tokens", chunk_tokens),
    CC_LIST("chunk_base_pos", chunk_base_pos), CC_LIST("chunk_pos", chunk_pos),
    CC_LIST("pass_req", pass_req),
    CC_LIST("pass_query_start_loc", pass_query_start_loc),
    CC_LIST("pass_positions", pass_positions),
    CC_LIST("pass_slot_mapping", pass_slot_mapping),
    CC_LIST("pass_context_lens", pass_context_lens),
    CC_LIST("pass_context_slots", pass_context_slots),
    CC_LIST("copy_req", copy_req), CC_LIST("copy_src", copy_src),
    CC_LIST("copy_dst", copy_dst), CC_LIST("copy_len", copy_len),
    CC_LIST("copy_delta", copy_delta), CC_LIST("req_ids", req_ids),
    CC_LIST("num_scheduled_tokens", num_scheduled),
    CC_LIST("query_start_loc", query_start_loc), CC_LIST("seq_lens", seq_lens),
    CC_LIST("num_computed_tokens", num_computed),
    CC_LIST("positions", positions), CC_LIST("slot_mapping", slot_mapping),
    {"block_table", SIZE_MAX},
    CC_LIST("waiting", waiting), CC_LIST("blocked", blocked),
    CC_LIST("finished", finished),
    {"free_blocks", SIZE_MAX}, {"chunk_hits", SIZE_MAX},
    {"chunk_misses", SIZE_MAX}, {"chunk_evictions", SIZE_MAX},
    {"chunk_evicted_keys", SIZE_MAX}, {"chunk_pool_free_blocks", SIZE_MAX},
    {"chunk_pool_entries", SIZE_MAX},
};
#define CC_NF (sizeof cc_fields / sizeof cc_fields[0])

static void cc_write_field(struct out *o, const struct kv_cc_step *st,
                           const struct cc_field *f)
{
    const char *n = f->name;
    if (f->off != SIZE_MAX) {
        cc_emit(o, n, (const struct kv_cc_list *)((const char *)st + f->off));
    } else if (!strcmp(n, "step")) {
        emit_scalar(o, n, st->step);
    } else if (!strcmp(n, "block_table")) {
        int64_t shape[2] = {(int64_t)st->req_ids.n, st->bt_stride};
        if (o->npy)
            emit(o, n, 2, shape, st->block_table.v);
        else
            for (size_t r = 0; r < st->req_ids.n; r++)
                emit_vec(o, n, st->block_table.v + r * st->bt_stride,
                         (size_t)st->bt_stride);
    } else if (!strcmp(n, "free_blocks")) {
        emit_scalar(o, n, st->free_blocks);
    } else if (!strcmp(n, "chunk_hits")) {
        emit_scalar(o, n, st->hits);
    } else if (!strcmp(n, "chunk_misses")) {
        emit_scalar(o, n, st->misses);
    } else if (!strcmp(n, "chunk_evictions")) {
        emit_scalar(o, n, (int64_t)st->n_evicted);
    } else if (!strcmp(n, "chunk_evicted_keys")) {
        if (o->npy)
            return;             /* text only: keys are not integers */
        out_bytes(o, "chunk_evicted_keys:", 19);
        for (size_t k = 0; k < st->n_evicted; k++) {
            char hex[34];
            hex[0] = ' ';
            for (int b = 0; b < 16; b++)
                snprintf(hex + 1 + 2 * b, 3, "%02x", st->evicted[k][b]);
            out_bytes(o, hex, 33);
        }
        out_bytes(o, "\n", 1);
    } else if (!strcmp(n, "chunk_pool_free_blocks")) {
        emit_scalar(o, n, st->pool_free_blocks);
    } else if (!strcmp(n, "chunk_pool_entries")) {
        emit_scalar(o, n, st->pool_entries);
    }
}

/* One step: the fields sel[0 .. nsel) (indices into cc_fields), or every
 * field when nsel is 0. */
static void cc_write(struct out *o, const struct kv_cc_step *st,
                     const int *sel, size_t nsel)
{
    for (size_t i = 0; i < (nsel ? nsel : CC_NF); i++)
        cc_write_field(o, st, &cc_fields[nsel ? (size_t)sel[i] : i]);
}

/* --fields a,b for the chunk-cache plan into sel (at most CC_NF). */
static int cc_parse_fields(const char *s, int *sel, size_t *nsel)
{
    *nsel = 0;
    if (!s)
        return -1;
    while (1) {
        size_t len = strcspn(s, ",");
        size_t k = 0;
        while (k < CC_NF && (strlen(cc_fields[k].name) != len ||
                             strncmp(cc_fields[k].name, s, len)))
            k++;
        if (k == CC_NF) {
            char valid[1024] = "";
            for (size_t j = 0; j < CC_NF; j++) {
                strcat(valid, j ? " " : "");
                strcat(valid, cc_fields[j].name);
            }
            return kv_usage("--fields: unknown field '%.*s' for plan "
                            "--chunk-cache; valid: %s", (int)len, s, valid);
        }
        if (*nsel == CC_NF)
            return kv_usage("--fields: too many fields");
        sel[(*nsel)++] = (int)k;
        s += len;
        if (!*s)
            return -1;
        s++;
    }
}

/* The segment lists (a file or "-") into requests with their output lens. */
static int cc_requests(const char *path, struct arg_str *outs,
                       size_t max_mem, struct kv_cc_req **reqs, size_t *n)
{
    struct kv_err e;
    char *text = NULL;
    size_t len = 0;
    int64_t *ol = NULL;
    size_t nol = 0;
    int rc;
    if (kv_read_all(path, max_mem < ((size_t)64 << 20) ? max_mem
                                                        : (size_t)64 << 20,
                    &text, &len, &e))
        return kv_fail_err(&e);
    if (len > max_mem) {
        free(text);
        return kv_fail("--segments: '%s' has %zu bytes, over --max-mem %zu",
                       path, len, max_mem);
    }
    rc = kv_cc_read(text, len, strcmp(path, "-") ? path : "stdin", reqs, n, &e);
    free(text);
    if (rc)
        return kv_usage("--segments: %s", e.msg);
    if ((rc = opt_list(outs, "--output-lens", 1, &ol, &nol)))
        return rc;
    if (outs->count && nol != 1 && nol != *n) {
        free(ol);
        return kv_usage("--output-lens has %zu values, --segments has %zu "
                        "prompts", nol, *n);
    }
    for (size_t i = 0; i < *n; i++)
        (*reqs)[i].output_len = !outs->count ? INT64_MAX / 4
                                : ol[nol == 1 ? 0 : i];
    free(ol);
    return -1;
}

/* The chunk pool's size: --chunk-pool-blocks, else the seed's split (the
 * main pool is 70% of memory, the chunk pool the utilization u), raised to
 * the least the input needs (its largest chunk with the context). */
static int cc_pool_blocks(struct kv_cc_config *cfg, int64_t pb, double u)
{
    struct kv_err e;
    struct kv_cc_sizes sz;
    int64_t main_blocks = cfg->num_blocks;
    if (pb) {
        cfg->chunk_pool_blocks = pb;
        return 0;
    }
    if (kv_cc_sizes(cfg, &sz, &e))
        return kv_usage("%s", e.msg);
    if (!main_blocks)
        main_blocks = sz.main_blocks;
    cfg->chunk_pool_blocks = (int64_t)ceil((double)main_blocks * u / 0.70);
    if (cfg->chunk_pool_blocks < sz.pool_blocks_least)
        cfg->chunk_pool_blocks = sz.pool_blocks_least;
    return 0;
}

struct cc_args {
    struct arg_lit *cc, *decode, *quiet, *verbose;
    struct arg_str *segs, *outs, *budget, *bs, *mml, *steps, *nblocks, *seqs,
                   *ctx, *pool, *util, *maxc, *maxt;
};

/* The options of plan --chunk-cache besides the output options. */
static void cc_args_make(struct cc_args *a)
{
    a->cc = arg_lit1(NULL, "chunk-cache", "seed 001's chunk cache");
    a->segs = arg_str0(NULL, "segments", "FILE",
                                    "kvchunk split lists with keys, one prompt "
                                    "after another (default stdin)");
    a->outs = arg_str0(NULL, "output-lens", "N|a,b,..",
                                    "tokens each request generates (default: "
                                    "until --max-model-len)");
    a->budget = arg_str1(NULL, "max-tokens", "N",
                                      "token budget per step");
    a->bs = arg_str1("B", "block-size", "N", "block size");
    a->mml = arg_str1(NULL, "max-model-len", "M", "max model len");
    a->steps = arg_str0(NULL, "steps", "K", "stop after K steps");
    a->nblocks = arg_str0(NULL, "num-blocks", "N",
                                       "main pool blocks, block 0 included "
                                       "(default: enough)");
    a->seqs = arg_str0(NULL, "max-num-seqs", "N",
                                    "running requests at most (default 256)");
    a->decode = arg_lit0(NULL, "decode", "go on until every "
                                      "request has finished");
    a->ctx = arg_str0(NULL, "chunk-context", "sys|none",
                                   "chunks computed after the system prompt "
                                   "(default) or alone");
    a->pool = arg_str0(NULL, "chunk-pool-blocks", "N",
                                    "chunk pool blocks (default: main pool * "
                                    "utilization / 0.70)");
    a->util = arg_str0(NULL, "chunk-cache-gpu-memory-utilization",
                                    "F", "the chunk pool's share of memory "
                                    "beside the main pool's 0.70 (0.15)");
    a->maxc = arg_str0(NULL, "max-chunks", "N",
                                    "chunks kept at most (500)");
    a->maxt = arg_str0(NULL, "max-chunk-tokens", "N",
                                    "tokens of one chunk at most (4096)");
    a->quiet = arg_lit0("q", "quiet", "no progress line");
    a->verbose = arg_lit0("v", "verbose", "print counters");
}

/* The table of a (13 entries and the given tail). */
static int cc_table(struct cc_args *a, void **t)
{
    int n = 0;
    t[n++] = a->cc; t[n++] = a->segs; t[n++] = a->outs; t[n++] = a->budget;
    t[n++] = a->bs; t[n++] = a->mml; t[n++] = a->steps; t[n++] = a->nblocks;
    t[n++] = a->seqs; t[n++] = a->decode; t[n++] = a->ctx; t[n++] = a->pool;
    t[n++] = a->util; t[n++] = a->maxc; t[n++] = a->maxt; t[n++] = a->quiet;
    t[n++] = a->verbose;
    return n;
}

/* The chunk-cache options for plan's --help. */
char *cc_help_text(void)
{
    struct cc_args a;
    void *t[20];
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cc_args_make(&a);
    int n = cc_table(&a, t);
    t[n++] = arg_end(1);
    if (f && arg_nullcheck(t) == 0) {
        fprintf(f, "With --chunk-cache, seed 001's chunk cache (man 1 kvslot, "
                "The chunk cache of seed 001), plan takes:\n");
        arg_print_glossary(f, t, "  %-28s %s\n");
    }
    if (f && fclose(f)) {
        free(buf);
        buf = NULL;
    }
    arg_freetable(t, (size_t)n);
    return buf;
}

/* An upper bound on what the chunk-cache plan allocates, all of it growing
 * with the input: each request's blocks (its whole length), the step's
 * lists (tokens of one step: the budget or every request's length when
 * that is less; chunk passes: every prompt token, with its context; a few
 * entries per request and segment; the block table's rows of
 * cdiv(M, B) columns), the free queues and the chunk pool's entries (a
 * pool holds no more blocks than the chunks have, whatever its size; the
 * queues hold only the blocks given back); the lists grow by doubling, so
 * twice their length. */
static size_t cc_mem_bytes(const struct kv_cc_config *cfg, int64_t num_blocks)
{
    size_t blocks = 0, tokens = 0, prompts = 0, segs = 0, t = 0;
    int64_t B = cfg->block_size, M = cfg->max_model_len;
    for (size_t i = 0; i < cfg->n_reqs; i++) {
        const struct kv_cc_req *r = &cfg->reqs[i];
        const struct kv_cc_seg *last = &r->segs[r->n_segs - 1];
        int64_t p = last->off + last->len;
        int64_t len = r->output_len < M - p ? p + r->output_len : M;
        blocks = mem_add(blocks, (size_t)((len + B - 1) / B));
        tokens = mem_add(tokens, (size_t)len);
        prompts = mem_add(prompts, (size_t)p);
        segs = mem_add(segs, r->n_segs);
    }
    if (tokens > (size_t)cfg->max_num_batched_tokens)
        tokens = (size_t)cfg->max_num_batched_tokens;
    size_t rows = cfg->n_reqs < (size_t)cfg->max_num_seqs ? cfg->n_reqs
                                                          : (size_t)cfg->max_num_seqs;
    size_t stride = (size_t)((M + B - 1) / B);
    t = mem_mul(blocks, 8);
    t = mem_add(t, mem_mul(16, mem_add(mem_add(mem_mul(tokens, 2), mem_mul(prompts, 3)),
                                       mem_mul(mem_add(cfg->n_reqs, segs), 12))));
    t = mem_add(t, mem_mul(16, mem_mul(rows, stride)));
    t = mem_add(t, mem_mul(16, blocks < (size_t)num_blocks ? blocks : (size_t)num_blocks));
    size_t pool = mem_add(prompts / (size_t)B, segs);   /* blocks of every chunk */
    t = mem_add(t, mem_mul(16, pool < (size_t)cfg->chunk_pool_blocks
                                   ? pool : (size_t)cfg->chunk_pool_blocks));
    t = mem_add(t, mem_mul(segs, 2 * (128 + 16)));
    t = mem_add(t, mem_mul(cfg->n_reqs, 256));
    return mem_add(t, (size_t)1 << 18);
}

int cmd_plan_cc(int argc, char **argv)
{
    struct cc_args A;
    struct common c;
    void *argtable[28];
    int n = 0, rc, opened = 0;
    struct kv_err e;
    struct kv_cc_config cfg;
    struct kv_cc_req *reqs = NULL;
    size_t nr = 0;
    struct kv_cc *p = NULL;
    struct kv_out ko;
    struct out o;
    int64_t K_steps, nb, ms, pb, mc, mt, hits = 0, misses = 0, steps_n = 0;
    double u = 0.15;
    size_t mem = 0, nsel = 0;
    int sel[CC_NF];

    common_make(&c);
    cc_args_make(&A);
    struct arg_str *maxmem = arg_str0(NULL, "max-mem", "SIZE",
                                      "memory limit (default 75% of RAM)");
    n = cc_table(&A, argtable);
    argtable[n++] = maxmem;
    argtable[n++] = c.fields;
    argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("plan", argtable, argc, argv, c.help, c.version, c.end,
                   cc_synopsis);
    if (rc >= 0)
        goto done;
    memset(&cfg, 0, sizeof cfg);
    if ((rc = opt_i64(A.budget, "--max-tokens", 1, INT32_MAX, 0,
                      &cfg.max_num_batched_tokens)) ||
        (rc = opt_i64(A.bs, "-B", 1, INT32_MAX, 0, &cfg.block_size)) ||
        (rc = opt_i64(A.mml, "--max-model-len", 2, INT32_MAX, 0,
                      &cfg.max_model_len)) ||
        (rc = opt_i64(A.steps, "--steps", 1, INT64_MAX, INT64_MAX, &K_steps)) ||
        (rc = opt_i64(A.nblocks, "--num-blocks", 2, INT32_MAX, 0, &nb)) ||
        (rc = opt_i64(A.seqs, "--max-num-seqs", 1, INT32_MAX, 256, &ms)) ||
        (rc = opt_i64(A.pool, "--chunk-pool-blocks", 1, INT32_MAX, 0, &pb)) ||
        (rc = opt_i64(A.maxc, "--max-chunks", 1, INT32_MAX, 500, &mc)) ||
        (rc = opt_i64(A.maxt, "--max-chunk-tokens", 1, INT32_MAX, 4096, &mt)))
        goto done;
    if (A.util->count && (kv_parse_f64(A.util->sval[0],
                                     "--chunk-cache-gpu-memory-utilization",
                                     &u, &e) || !(u > 0 && u < 1))) {
        rc = kv_usage("--chunk-cache-gpu-memory-utilization: expected a "
                      "fraction in (0, 1), got '%s'", A.util->sval[0]);
        goto done;
    }
    if (A.ctx->count && strcmp(A.ctx->sval[0], "sys") && strcmp(A.ctx->sval[0], "none")) {
        rc = kv_usage("--chunk-context: expected sys or none, got '%s'",
                      A.ctx->sval[0]);
        goto done;
    }
    if (kv_parse_max_mem(maxmem->count ? maxmem->sval[0] : NULL, &mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if (c.fields->count &&
        (rc = cc_parse_fields(c.fields->sval[0], sel, &nsel)) >= 0)
        goto done;
    if ((rc = cc_requests(A.segs->count ? A.segs->sval[0] : "-", A.outs, mem,
                          &reqs, &nr)) >= 0)
        goto done;
    cfg.n_reqs = nr;
    cfg.reqs = reqs;
    cfg.max_num_seqs = ms;
    cfg.num_blocks = nb;
    cfg.max_chunks = mc;
    cfg.max_chunk_tokens = mt;
    cfg.ctx_none = A.ctx->count && !strcmp(A.ctx->sval[0], "none");
    if ((rc = cc_pool_blocks(&cfg, pb, u)))
        goto done;
    {
        struct kv_cc_sizes sz;
        if (kv_cc_sizes(&cfg, &sz, &e)) {
            rc = kv_usage("%s", e.msg);
            goto done;
        }
        if ((rc = mem_check(cc_mem_bytes(&cfg, nb ? nb : sz.main_blocks), mem,
                            "the chunk-cache plan")))
            goto done;
    }
    if (kv_cc_new(&cfg, &p, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if ((rc = open_output(&c, &ko, &o)))
        goto done;
    opened = 1;
    for (int64_t k = 0; k < K_steps && !o.failed; k++) {
        const struct kv_cc_step *st;
        int got = kv_cc_step(p, A.decode->count > 0, &st, &e);
        if (got < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        if (got == 0)
            break;
        cc_write(&o, st, sel, nsel);
        hits += st->hits;
        misses += st->misses;
        steps_n++;
    }
    if (A.verbose->count && !o.failed)
        kv_warn("%lld steps, %lld chunk hits, %lld misses, chunk pool of %lld "
                "blocks", (long long)steps_n, (long long)hits, (long long)misses,
                (long long)cfg.chunk_pool_blocks);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_cc_free(p);
    kv_cc_reqs_free(reqs, nr);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
