/* plan_cc.c - kvslot plan --chunk-cache's options, input and fields
 * around the chunk cache of ccplan.c (plan_cc.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "slot/plan_cc.h"
#include "core/cli.h"

/* The fields of a step, in their default order; the lists are named with
 * the member of struct kv_cc_step that holds them. */
#define CC_LIST(name, member) {name, offsetof(struct kv_cc_step, member)}
static const struct cc_field {
    const char *name;
    size_t off;             /* a struct kv_cc_list, or SIZE_MAX: special */
} cc_fields[KV_PLAN_CC_NF] = {
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

const char *kv_plan_cc_field_name(size_t k)
{
    return k < KV_PLAN_CC_NF ? cc_fields[k].name : NULL;
}

int kv_plan_cc_fields(const char *s, int *sel, size_t *n_sel,
                      struct kv_err *e)
{
    size_t n = 0;
    while (1) {
        size_t len = strcspn(s, ",");
        size_t k = 0;
        while (k < KV_PLAN_CC_NF && (strlen(cc_fields[k].name) != len ||
                                     strncmp(cc_fields[k].name, s, len)))
            k++;
        if (k == KV_PLAN_CC_NF) {
            char valid[1024] = "";
            for (size_t j = 0; j < KV_PLAN_CC_NF; j++) {
                strcat(valid, j ? " " : "");
                strcat(valid, cc_fields[j].name);
            }
            return kv_err_set(e, "--fields: unknown field '%.*s' for plan "
                              "--chunk-cache; valid: %s", (int)len, s, valid);
        }
        if (n == KV_PLAN_CC_NF)
            return kv_err_set(e, "--fields: too many fields");
        sel[n++] = (int)k;
        s += len;
        if (!*s)
            break;
        s++;
    }
    *n_sel = n;
    return 0;
}

void kv_plan_cc_field(const struct kv_cc_step *st, size_t k,
                      struct kv_plan_cc_value *val)
{
    const struct cc_field *f = &cc_fields[k];
    const char *n = f->name;
    memset(val, 0, sizeof *val);
    val->v = &val->scalar;
    if (f->off != SIZE_MAX) {
        const struct kv_cc_list *l =
            (const struct kv_cc_list *)(const void *)((const char *)st + f->off);
        val->ndim = 1;
        val->shape[0] = (int64_t)l->n;
        val->v = l->v;
    } else if (!strcmp(n, "block_table")) {
        val->ndim = 2;
        val->shape[0] = (int64_t)st->req_ids.n;
        val->shape[1] = st->bt_stride;
        val->v = st->block_table.v;
    } else if (!strcmp(n, "chunk_evicted_keys")) {
        val->ndim = -1;
        val->shape[0] = (int64_t)st->n_evicted;
        val->keys = (const uint8_t *)st->evicted;
    } else if (!strcmp(n, "step")) {
        val->scalar = st->step;
    } else if (!strcmp(n, "free_blocks")) {
        val->scalar = st->free_blocks;
    } else if (!strcmp(n, "chunk_hits")) {
        val->scalar = st->hits;
    } else if (!strcmp(n, "chunk_misses")) {
        val->scalar = st->misses;
    } else if (!strcmp(n, "chunk_evictions")) {
        val->scalar = (int64_t)st->n_evicted;
    } else if (!strcmp(n, "chunk_pool_free_blocks")) {
        val->scalar = st->pool_free_blocks;
    } else {                    /* chunk_pool_entries */
        val->scalar = st->pool_entries;
    }
}

/* Saturating size arithmetic: SIZE_MAX when the result overflows. */
static size_t sat_add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static size_t sat_mul(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
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
        blocks = sat_add(blocks, (size_t)((len + B - 1) / B));
        tokens = sat_add(tokens, (size_t)len);
        prompts = sat_add(prompts, (size_t)p);
        segs = sat_add(segs, r->n_segs);
    }
    if (tokens > (size_t)cfg->max_num_batched_tokens)
        tokens = (size_t)cfg->max_num_batched_tokens;
    size_t rows = cfg->n_reqs < (size_t)cfg->max_num_seqs
                      ? cfg->n_reqs : (size_t)cfg->max_num_seqs;
    size_t stride = (size_t)((M + B - 1) / B);
    t = sat_mul(blocks, 8);
    t = sat_add(t, sat_mul(16, sat_add(sat_add(sat_mul(tokens, 2),
                                               sat_mul(prompts, 3)),
                                       sat_mul(sat_add(cfg->n_reqs, segs), 12))));
    t = sat_add(t, sat_mul(16, sat_mul(rows, stride)));
    t = sat_add(t, sat_mul(16, blocks < (size_t)num_blocks
                                   ? blocks : (size_t)num_blocks));
    size_t pool = sat_add(prompts / (size_t)B, segs);  /* every chunk's blocks */
    t = sat_add(t, sat_mul(16, pool < (size_t)cfg->chunk_pool_blocks
                                   ? pool : (size_t)cfg->chunk_pool_blocks));
    t = sat_add(t, sat_mul(segs, 2 * (128 + 16)));
    t = sat_add(t, sat_mul(cfg->n_reqs, 256));
    return sat_add(t, (size_t)1 << 18);
}


/* The segment lists of o->segments into pc's requests with their output
 * lengths. */
static int cc_requests(struct kv_plan_cc *pc, const struct kv_plan_cc_opts *o,
                       int *usage, struct kv_err *e)
{
    const char *path = o->segments ? o->segments : "-";
    size_t cap = pc->max_bytes < ((size_t)64 << 20) ? pc->max_bytes
                                                    : (size_t)64 << 20;
    char *text = NULL;
    size_t len = 0, nol = 0;
    int64_t *ol = NULL;
    *usage = 0;
    if (kv_read_all(path, cap, &text, &len, e))
        return -1;
    if (len > pc->max_bytes) {
        free(text);
        return kv_err_set(e, "--segments: '%s' has %zu bytes, over --max-mem "
                          "%zu", path, len, pc->max_bytes);
    }
    *usage = 1;
    int rc = kv_cc_read(text, len, strcmp(path, "-") ? path : "stdin",
                        &pc->reqs, &pc->n_reqs, e);
    free(text);
    if (rc) {
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "%s", e->msg);
        return kv_err_set(e, "--segments: %s", msg);
    }
    if (o->output_lens &&
        kv_parse_request_list(o->output_lens, "--output-lens", 1, &ol, &nol, e) < 0) {
        *usage = strcmp(e->msg, "out of memory") != 0;
        return -1;
    }
    if (o->output_lens && nol != 1 && nol != pc->n_reqs) {
        free(ol);
        return kv_err_set(e, "--output-lens has %zu values, --segments has "
                          "%zu prompts", nol, pc->n_reqs);
    }
    for (size_t i = 0; i < pc->n_reqs; i++)
        pc->reqs[i].output_len = !o->output_lens ? INT64_MAX / 4
                                 : ol[nol == 1 ? 0 : i];
    free(ol);
    return 0;
}

/* The chunk pool's size: o's, else the seed's split (the main pool is 70%
 * of memory, the chunk pool the utilization u), raised to the least the
 * input needs (its largest chunk with the context). */
static int cc_pool_blocks(struct kv_cc_config *cfg, int64_t pb, double u,
                          struct kv_err *e)
{
    struct kv_cc_sizes sz;
    int64_t main_blocks = cfg->num_blocks;
    if (pb) {
        cfg->chunk_pool_blocks = pb;
        return 0;
    }
    if (kv_cc_sizes(cfg, &sz, e))
        return -1;
    if (!main_blocks)
        main_blocks = sz.main_blocks;
    cfg->chunk_pool_blocks = (int64_t)ceil((double)main_blocks * u / 0.70);
    if (cfg->chunk_pool_blocks < sz.pool_blocks_least)
        cfg->chunk_pool_blocks = sz.pool_blocks_least;
    return 0;
}

/* The option checks, in the program's order, before any input is read. */
static int cc_options(struct kv_plan_cc *pc, const struct kv_plan_cc_opts *o,
                      double *u, struct kv_err *e)
{
    const char *ctx = o->chunk_context;
    struct kv_err pe;
    if (o->utilization && (kv_parse_f64(o->utilization,
                                        "--chunk-cache-gpu-memory-utilization",
                                        u, &pe) || !(*u > 0 && *u < 1)))
        return kv_err_set(e, "--chunk-cache-gpu-memory-utilization: expected "
                          "a fraction in (0, 1), got '%s'", o->utilization);
    if (ctx && strcmp(ctx, "sys") && strcmp(ctx, "none"))
        return kv_err_set(e, "--chunk-context: expected sys or none, got "
                          "'%s'", ctx);
    if (kv_parse_max_mem(o->max_mem, &pc->max_bytes, e))
        return -1;
    if (o->fields && kv_plan_cc_fields(o->fields, pc->sel, &pc->n_sel, e))
        return -1;
    pc->cfg.ctx_none = ctx && !strcmp(ctx, "none");
    return 0;
}

static int cc_load(struct kv_plan_cc *pc, const struct kv_plan_cc_opts *o,
                   int *usage, struct kv_err *e)
{
    struct kv_cc_config *cfg = &pc->cfg;
    struct kv_cc_sizes sz;
    double u = 0.15;
    *usage = 1;
    if (cc_options(pc, o, &u, e) || cc_requests(pc, o, usage, e))
        return -1;
    *usage = 1;
    cfg->n_reqs = pc->n_reqs;
    cfg->reqs = pc->reqs;
    cfg->block_size = o->block_size;
    cfg->max_num_batched_tokens = o->max_tokens;
    cfg->max_model_len = o->max_model_len;
    cfg->max_num_seqs = o->max_num_seqs ? o->max_num_seqs : 256;
    cfg->num_blocks = o->num_blocks;
    cfg->max_chunks = o->max_chunks ? o->max_chunks : 500;
    cfg->max_chunk_tokens = o->max_chunk_tokens ? o->max_chunk_tokens : 4096;
    if (cc_pool_blocks(cfg, o->chunk_pool_blocks, u, e) ||
        kv_cc_sizes(cfg, &sz, e))
        return -1;
    size_t need = cc_mem_bytes(cfg, o->num_blocks ? o->num_blocks
                                                  : sz.main_blocks);
    if (need > pc->max_bytes) {
        *usage = 0;
        if (need == SIZE_MAX)
            return kv_err_set(e, "the chunk-cache plan needs more bytes than "
                              "the address space holds");
        return kv_err_set(e, "the chunk-cache plan needs %zu bytes, more than "
                          "--max-mem %zu; raise --max-mem", need,
                          pc->max_bytes);
    }
    return kv_cc_new(cfg, &pc->cc, e);
}

int kv_plan_cc_load(struct kv_plan_cc *pc, const struct kv_plan_cc_opts *o,
                    int *usage, struct kv_err *e)
{
    memset(pc, 0, sizeof *pc);
    if (cc_load(pc, o, usage, e)) {
        kv_plan_cc_release(pc);
        return -1;
    }
    return 0;
}

void kv_plan_cc_release(struct kv_plan_cc *pc)
{
    kv_cc_free(pc->cc);
    kv_cc_reqs_free(pc->reqs, pc->n_reqs);
    memset(pc, 0, sizeof *pc);
}
