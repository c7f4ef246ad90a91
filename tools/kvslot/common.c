/* kvslot: what the subcommands share: the fields, the option readers,
 * the common and context-parallel options, the output file, parse_sub. */
#include "kvslot.h"
#include "slot/map_groups.h"

/* ---------------------------------------------------------------------- */
/* fields                                                                 */

const char *const fnames[NF] = {
    "step", "req_ids", "query_start_loc", "seq_lens", "num_computed_tokens",
    "num_scheduled_tokens", "positions", "req_indices", "token_indices",
    "block_table_indices", "block_numbers", "block_offsets", "slot_mapping",
    "cp_owner", "max_query_len", "num_tokens", "num_reqs", "block_table",
    "waiting", "blocked", "preempted", "finished", "free_blocks",
    "num_cached_tokens", "shared_blocks", "evicted_hashes",
};

/* Library field bit of each token-level field (0 when none). */
unsigned slot_want(enum fid f)
{
    switch (f) {
    case F_POSITIONS: return 1u << KV_SLOT_POSITIONS;
    case F_REQ_INDICES: return 1u << KV_SLOT_REQ_INDICES;
    case F_TOKEN_INDICES: return 1u << KV_SLOT_TOKEN_INDICES;
    case F_BTI: return 1u << KV_SLOT_BLOCK_TABLE_INDICES;
    case F_BLOCK_NUMBERS: return 1u << KV_SLOT_BLOCK_NUMBERS;
    case F_BLOCK_OFFSETS: return 1u << KV_SLOT_BLOCK_OFFSETS;
    case F_SLOT_MAPPING: return 1u << KV_SLOT_SLOT_MAPPING;
    case F_CP_OWNER: return 1u << KV_SLOT_CP_OWNER;
    default: return 0;
    }
}

static const enum fid map_default[] = {
    F_QSL, F_SEQ_LENS, F_NUM_COMPUTED, F_POSITIONS, F_REQ_INDICES,
    F_TOKEN_INDICES, F_BTI, F_BLOCK_NUMBERS, F_BLOCK_OFFSETS, F_SLOT_MAPPING,
    F_MAX_QUERY_LEN, F_NUM_TOKENS,
};

static const enum fid plan_default[] = {
    F_STEP, F_REQ_IDS, F_NUM_SCHEDULED, F_QSL, F_SEQ_LENS, F_NUM_COMPUTED,
    F_POSITIONS, F_REQ_INDICES, F_TOKEN_INDICES, F_BTI, F_BLOCK_NUMBERS,
    F_BLOCK_OFFSETS, F_SLOT_MAPPING, F_MAX_QUERY_LEN, F_NUM_TOKENS,
    F_NUM_REQS, F_BLOCK_TABLE, F_WAITING, F_BLOCKED, F_PREEMPTED,
    F_FINISHED, F_FREE_BLOCKS,
};

/* Whether field i exists for map (the rest are plan's own). */
static int map_field(int i)
{
    return i != F_STEP && i != F_REQ_IDS && i < F_WAITING;
}

/* Parse --fields into list (at most NF entries); plan_only fields are
 * refused for map.  Returns 0 or a usage exit code. */
int parse_fields(const char *s, int is_plan, enum fid *list,
                 size_t *n)
{
    const enum fid *def = is_plan ? plan_default : map_default;
    size_t ndef = is_plan ? N_ELEMS(plan_default) : N_ELEMS(map_default);
    char name[64];

    *n = 0;
    if (!s) {
        memcpy(list, def, ndef * sizeof *def);
        *n = ndef;
        return 0;
    }
    while (*s) {
        size_t len = strcspn(s, ",");
        int found = -1;
        if (len == 0 || len >= sizeof name)
            return kv_usage("--fields: empty or overlong name in '%s'", s);
        memcpy(name, s, len);
        name[len] = '\0';
        for (int i = 0; i < NF; i++)
            if (strcmp(name, fnames[i]) == 0)
                found = i;
        if (found < 0 || (!is_plan && !map_field(found))) {
            char valid[1024];
            size_t k = 0;
            valid[0] = '\0';
            for (int i = 0; i < NF; i++)
                if (is_plan || map_field(i))
                    k += (size_t)snprintf(valid + k, sizeof valid - k,
                                          "%s%s", k ? " " : "", fnames[i]);
            return kv_usage("--fields: unknown field '%s' for %s; valid: %s",
                            name, is_plan ? "plan" : "map", valid);
        }
        if (*n >= NF)
            return kv_usage("--fields: too many fields");
        list[(*n)++] = (enum fid)found;
        s += len;
        if (*s == ',')
            s++;
    }
    if (*n == 0)
        return kv_usage("--fields: no field named");
    return 0;
}

/* Output format from -f and --force: 1 = npy, 0 = text, or -(exit code). */
static int pick_format(const char *fmt, int force, FILE *f)
{
    int npy;

    if (!fmt || strcmp(fmt, "auto") == 0)
        npy = !kv_isatty(f);
    else if (strcmp(fmt, "npy") == 0)
        npy = 1;
    else if (strcmp(fmt, "text") == 0)
        return 0;
    else
        return -kv_usage("-f: expected npy, text or auto, got '%s'", fmt);
    if (npy && fmt && kv_check_binary_ok(f, force))
        return -KV_EXIT_USAGE;
    return npy;
}

static int parse_dtype(const char *s, enum kv_dtype *dt)
{
    if (!s || strcmp(s, "i64") == 0 || strcmp(s, "int64") == 0)
        *dt = KV_I64;
    else if (strcmp(s, "i32") == 0 || strcmp(s, "int32") == 0)
        *dt = KV_I32;
    else
        return kv_usage("--dtype: expected i64 or i32, got '%s'", s);
    return 0;
}

/* kv_opt_i64 with a default for an absent option. */
int opt_i64(struct arg_str *a, const char *name, int64_t min,
            int64_t max, int64_t def, int64_t *out)
{
    *out = def;
    return kv_opt_i64(a, name, min, max, out);
}

/* A per-request count list: every value >= min, naming the request. */
int opt_list(struct arg_str *a, const char *name, int64_t min,
             int64_t **out, size_t *n)
{
    struct kv_err e;

    *out = NULL;
    *n = 0;
    if (a->count == 0)
        return 0;
    if (kv_parse_request_list(a->sval[0], name, min, out, n, &e) < 0)
        return strcmp(e.msg, "out of memory") ? kv_usage("%s", e.msg)
                                               : kv_fail("%s", e.msg);
    return 0;
}

void common_make(struct common *c)
{
    c->fields = arg_str0(NULL, "fields", "a,b,..",
                         "fields to write, in this order");
    c->format = arg_str0("f", "format", "npy|text|auto",
                         "output format (auto: npy unless stdout is a "
                         "terminal)");
    c->dtype = arg_str0(NULL, "dtype", "i64|i32",
                        "integer type of the npy arrays (default i64)");
    c->output = arg_str0("o", "output", "FILE", "write to FILE");
    c->force = arg_lit0(NULL, "force", "write npy to a terminal");
    c->help = arg_lit0("h", "help", "print this help and exit");
    c->version = arg_lit0(NULL, "version", "print the version and exit");
    c->end = arg_end(20);
}

/* Append the common options to t, last in --help; returns the count. */
int common_add(struct common *c, void **t)
{
    int n = 0;
    t[n++] = c->fields; t[n++] = c->format; t[n++] = c->dtype;
    t[n++] = c->output; t[n++] = c->force; t[n++] = c->help;
    t[n++] = c->version; t[n++] = c->end;
    return n;
}

/* Open the output and choose the format; returns 0 or an exit code. */
int open_output(struct common *c, struct kv_out *ko, struct out *o)
{
    struct kv_err e;
    enum kv_dtype dt = KV_I64;   /* parse_dtype sets it or fails */
    int npy, rc;

    if ((rc = parse_dtype(c->dtype->count ? c->dtype->sval[0] : NULL, &dt)))
        return rc;
    if (kv_out_open(ko, c->output->count ? c->output->sval[0] : NULL, &e))
        return kv_fail_err(&e);
    npy = pick_format(c->format->count ? c->format->sval[0] : NULL,
                      c->force->count, ko->f);
    if (npy < 0) {
        kv_out_abort(ko);
        return -npy;
    }
    if (out_init(o, ko->f, npy, dt)) {
        kv_out_abort(ko);
        return kv_fail_err(&o->err);
    }
    if (!c->output->count && npy)
        setvbuf(ko->f, NULL, _IOFBF, 1 << 16);
    return 0;
}

/* Flush and commit; returns the exit code. */
int close_output(struct kv_out *ko, struct out *o)
{
    struct kv_err e;

    out_unhold(o);
    out_flush(o);
    if (o->failed) {
        out_release(o);
        kv_out_abort(ko);
        return kv_fail_err(&o->err);
    }
    out_release(o);
    if (ko->path) {
        if (kv_out_commit(ko, &e))
            return kv_fail_err(&e);
        return KV_EXIT_OK;
    }
    return kv_close_stdout();
}

/* kv_arg_parse with the usage line, messages and hints naming the
 * subcommand ("Usage: kvslot map ...", "kvslot map: --cp-rank 3: ...",
 * "Try 'kvslot map --help'"); the name stays for the whole subcommand so
 * that a usage error found after parsing points at the subcommand's help,
 * which lists its options, not at the bare list of subcommands. */
int parse_sub(const char *sub, void **argtable, int argc, char **argv,
              struct arg_lit *help, struct arg_lit *version,
              struct arg_end *end, const char *synopsis)
{
    char name[64];
    int rc;

    snprintf(name, sizeof name, "kvslot %s", sub);
    kv_setprogname(name);
    char *extra = strcmp(sub, "plan") || strstr(synopsis, "Seed 001") ||
                  !help || (arg_parse(argc, argv, argtable), help->count == 0)
                  ? NULL : cc_help_text();
    rc = kv_arg_parse(argtable, argc, argv, help, version, end, synopsis,
                      extra);
    free(extra);
    return rc;
}

/* --pad-to and --all-ranks shape slot_mapping alone: with --fields leaving
 * it out they would be ignored, so they are refused.  0 or a usage exit. */
int slot_options_used(const enum fid *fl, size_t nf, int pad, int all)
{
    for (size_t i = 0; i < nf; i++)
        if (fl[i] == F_SLOT_MAPPING)
            return 0;
    if (pad || all)
        return kv_usage("%s shapes slot_mapping, which --fields leaves out",
                        pad ? "--pad-to" : "--all-ranks");
    return 0;
}

/* Memory accounting: a + b, or SIZE_MAX when the sum overflows. */
size_t mem_add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

/* a * b, or SIZE_MAX when the product overflows. */
size_t mem_mul(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* Refuse (exit 1) when need bytes are over the --max-mem limit, naming
 * what needs them; 0 when they fit. */
int mem_check(size_t need, size_t max_mem, const char *what)
{
    if (need <= max_mem)
        return 0;
    if (need == SIZE_MAX)
        return kv_fail("%s needs more bytes than the address space holds", what);
    return kv_fail("%s needs %zu bytes, more than --max-mem %zu; raise --max-mem", what,
                   need, max_mem);
}

/* Declare the context-parallel options into t; returns the count. */
int cp_args_make(struct cp_args *c, void **t)
{
    int n = 0;
    t[n++] = c->cps = arg_str0(NULL, "cp-size", "W",
                               "decode context parallel world size");
    t[n++] = c->cpr = arg_str0(NULL, "cp-rank", "R", "this DCP rank");
    t[n++] = c->pcps = arg_str0(NULL, "pcp-size", "P",
                                "prefill context parallel size (pcp-dcp "
                                "convention)");
    t[n++] = c->pcpr = arg_str0(NULL, "pcp-rank", "Q", "this PCP rank");
    t[n++] = c->il = arg_str0(NULL, "interleave", "I",
                              "cp_kv_cache_interleave_size (default 1)");
    t[n++] = c->all = arg_lit0(NULL, "all-ranks",
                               "slot_mapping of every rank, one row each");
    t[n++] = c->conv = arg_str0(NULL, "cp-convention", "pcp-dcp|dcp",
                                "which ranks shard the KV cache: PCP x DCP "
                                "(default; vllm-ascend) or DCP alone (vLLM)");
    return n;
}

/* The context-parallel sizes and ranks, each in its range, and the
 * convention (kv_map_cp_parse, which map with KV-cache groups reads them
 * with too). */
int cp_numbers(struct cp_args *c)
{
#define OPT(x) ((x)->count ? (x)->sval[0] : NULL)
    int64_t cp[5];
    struct kv_err e;
    if (kv_map_cp_parse(OPT(c->cps), OPT(c->cpr), OPT(c->pcps), OPT(c->pcpr), OPT(c->il),
                        OPT(c->conv), cp, &e))
        return kv_usage("%s", e.msg);
#undef OPT
    c->W = cp[0], c->R = cp[1], c->P = cp[2], c->Q = cp[3], c->I = cp[4];
    return 0;
}

/* The world and rank of the KV-cache shards under --cp-convention, with
 * block size B (after cp_numbers).  0 or a usage exit code. */
int cp_options(const struct cp_args *c, int64_t B, int64_t *cpw,
               int64_t *cpr)
{
    if (B % c->I)
        return kv_usage("--interleave %lld does not divide -B %lld",
                        (long long)c->I, (long long)B);
    if (!c->conv->count || strcmp(c->conv->sval[0], "pcp-dcp") == 0) {
        /* vllm-ascend 0.23.0.post1's BlockTable: PCP x DCP ranks */
        *cpw = c->P * c->W;
        *cpr = c->Q * c->W + c->R;
    } else {
        /* vLLM's BlockTable: DCP alone shards, every PCP rank holds the
         * same DCP shard (so --pcp-rank changes nothing, rightly) */
        *cpw = c->W;
        *cpr = c->R;
    }
    return 0;
}

/* map's fields in order: the step-level ones from v, the token-level ones
 * streamed per rank. */
