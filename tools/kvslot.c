/* kvslot - slot mapping and the per-step attention metadata of vLLM's model
 * runner, the scheduler and block allocator over many steps, and the
 * context-parallel layouts (see man 1 kvslot).
 *
 *   kvslot map    one step from a block table and token counts
 *   kvslot plan   the scheduler and block allocator, step by step
 *   kvslot pcp    the DualChunkSwap split of prefill context parallelism
 *   kvslot cplens per-rank KV lengths under interleaving
 *
 * Every output is a list of named integer arrays: text `name: v v v` (a
 * 2-d array prints one such line per row) or a .npy stream with one array
 * per field in the same order (man 5 kvnpy). */
#include <argtable2.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "core/kv.h"
#include "slot/mla_cp.h"
#include "slot/slot.h"
#include "slot/ccplan.h"
#include "slot/plan.h"
#include "slot/pcp.h"

/* ---------------------------------------------------------------------- */
/* output: named integer arrays as text or npy                            */

struct out {
    FILE *f;
    int npy;
    enum kv_dtype dtype;      /* KV_I64 or KV_I32 */
    struct kv_err err;
    int failed;
    const char *field;        /* the token field being written */
    FILE *held;               /* the real output while o->f is a memory
                                 stream (out_hold), else NULL */
    char *mem;
    size_t mem_len;
    char *buf;                /* text / conversion buffer */
    size_t cap, len;
};

enum { OUT_BUF = 1 << 18 };

static int out_init(struct out *o, FILE *f, int npy, enum kv_dtype dtype)
{
    memset(o, 0, sizeof *o);
    o->f = f;
    o->npy = npy;
    o->dtype = dtype;
    o->cap = OUT_BUF;
    o->buf = malloc(o->cap);
    if (!o->buf)
        return kv_err_set(&o->err, "out of memory");
    return 0;
}

static void out_release(struct out *o)
{
    free(o->buf);
    o->buf = NULL;
    if (o->held) {
        fclose(o->f);
        o->f = o->held;
        o->held = NULL;
    }
    free(o->mem);
    o->mem = NULL;
}

static void out_flush(struct out *o)
{
    if (o->len && !o->failed && kv_write_all(o->f, o->buf, o->len, &o->err))
        o->failed = 1;
    o->len = 0;
}

/* Write into memory until out_unhold, so that an error found while
 * writing (a value over --dtype i32) leaves the real output untouched.
 * For the subcommands whose output is small next to what they compute. */
static void out_hold(struct out *o)
{
    FILE *m = open_memstream(&o->mem, &o->mem_len);
    if (!m) {
        kv_err_set(&o->err, "out of memory");
        o->failed = 1;
        return;
    }
    o->held = o->f;
    o->f = m;
}

/* Copy what out_hold kept to the real output, unless writing failed. */
static void out_unhold(struct out *o)
{
    FILE *m = o->f;

    if (!o->held)
        return;
    out_flush(o);
    o->f = o->held;
    o->held = NULL;
    if (fclose(m) && !o->failed) {
        kv_err_set(&o->err, "out of memory");
        o->failed = 1;
    }
    if (!o->failed && o->mem_len &&
        kv_write_all(o->f, o->mem, o->mem_len, &o->err))
        o->failed = 1;
    free(o->mem);
    o->mem = NULL;
}

static void out_bytes(struct out *o, const char *s, size_t n)
{
    if (o->len + n > o->cap)
        out_flush(o);
    if (n > o->cap) {
        if (!o->failed && kv_write_all(o->f, s, n, &o->err))
            o->failed = 1;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

/* Append " v" (or "v" when first) in decimal to the text buffer. */
static void out_num(struct out *o, int64_t v, int space)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;

    if (o->len + 24 > o->cap)
        out_flush(o);
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (space)
        o->buf[o->len++] = ' ';
    if (v < 0)
        o->buf[o->len++] = '-';
    while (n > 0)
        o->buf[o->len++] = tmp[--n];
}

/* Whether v fits the int32 of --dtype i32; if not, the output fails with
 * a message naming the field and the value (the subcommands check their
 * bounds before writing; this is the last guard against truncation). */
static int fits_i32(struct out *o, const char *name, int64_t v)
{
    if (v >= INT32_MIN && v <= INT32_MAX)
        return 1;
    kv_err_set(&o->err, "--dtype i32: %s holds %lld, over 32 bits; use "
               "--dtype i64", name ? name : "a field", (long long)v);
    o->failed = 1;
    return 0;
}

/* One field: a scalar (ndim 0), a vector or a matrix of int64 values. */
static void emit(struct out *o, const char *name, int ndim,
                 const int64_t *shape, const int64_t *v)
{
    size_t rows = ndim == 2 ? (size_t)shape[0] : 1;
    size_t cols = ndim == 0 ? 1 : (size_t)shape[ndim - 1];
    size_t total = rows * cols;

    if (o->failed)
        return;
    if (!o->npy) {
        size_t nl = strlen(name);
        for (size_t r = 0; r < rows; r++) {
            out_bytes(o, name, nl);
            out_bytes(o, ":", 1);
            for (size_t c = 0; c < cols; c++)
                out_num(o, v[r * cols + c], 1);
            out_bytes(o, "\n", 1);
        }
        return;
    }
    out_flush(o);
    if (o->failed ||
        kv_npy_write_header(o->f, o->dtype, ndim, shape, &o->err)) {
        o->failed = 1;
        return;
    }
    if (o->dtype == KV_I64) {
        if (total && kv_write_all(o->f, v, total * sizeof *v, &o->err))
            o->failed = 1;
        return;
    }
    for (size_t at = 0; at < total;) {
        size_t n = total - at < o->cap / 4 ? total - at : o->cap / 4;
        int32_t *d = (int32_t *)(void *)o->buf;
        for (size_t j = 0; j < n; j++) {
            if (!fits_i32(o, name, v[at + j]))
                return;
            d[j] = (int32_t)v[at + j];
        }
        if (kv_write_all(o->f, d, n * 4, &o->err)) {
            o->failed = 1;
            return;
        }
        at += n;
    }
}

static void emit_scalar(struct out *o, const char *name, int64_t v)
{
    emit(o, name, 0, NULL, &v);
}

static void emit_vec(struct out *o, const char *name, const int64_t *v,
                     size_t n)
{
    int64_t shape[1] = { (int64_t)n };
    emit(o, name, 1, shape, v);
}

static void emit_mat(struct out *o, const char *name, const int64_t *v,
                     size_t rows, size_t cols)
{
    int64_t shape[2] = { (int64_t)rows, (int64_t)cols };
    emit(o, name, 2, shape, v);
}

/* A token-level field of a step written in pieces, never whole in memory:
 * n_ranks rows (one per CP rank, or 1) of n_tokens values followed by -1
 * up to row_len. */
struct tokfield {
    const struct kv_slot_geom *g;
    const struct kv_slot_table *t;
    size_t n_reqs;
    const int64_t *sched, *comp;
    enum kv_slot_field f;
    size_t n_ranks, row_len;
    int two_d;
};

enum { TOK_CHUNK = 4096 };

static void tok_put(struct out *o, const int64_t *v, size_t n)
{
    if (o->failed)
        return;
    if (!o->npy) {
        for (size_t j = 0; j < n; j++)
            out_num(o, v[j], 1);
        return;
    }
    if (o->dtype == KV_I64) {
        out_bytes(o, (const char *)v, n * sizeof *v);
        return;
    }
    for (size_t j = 0; j < n; j++) {
        int32_t x = (int32_t)v[j];
        if (!fits_i32(o, o->field, v[j]))
            return;
        if (o->len + 4 > o->cap)
            out_flush(o);
        memcpy(o->buf + o->len, &x, 4);
        o->len += 4;
    }
}

static void emit_tokens(struct out *o, const char *name,
                        const struct tokfield *tf)
{
    int64_t chunk[TOK_CHUNK];
    int64_t shape[2] = { (int64_t)tf->n_ranks, (int64_t)tf->row_len };
    struct kv_slot_geom g = *tf->g;
    size_t nl = strlen(name);

    if (o->failed)
        return;
    o->field = name;
    if (o->npy) {
        out_flush(o);
        if (o->failed ||
            kv_npy_write_header(o->f, o->dtype, tf->two_d ? 2 : 1,
                                tf->two_d ? shape : shape + 1, &o->err)) {
            o->failed = 1;
            return;
        }
    }
    for (size_t rank = 0; rank < tf->n_ranks && !o->failed; rank++) {
        size_t done = 0;
        if (tf->two_d)
            g.cp_rank = (int64_t)rank;
        if (!o->npy) {
            out_bytes(o, name, nl);
            out_bytes(o, ":", 1);
        }
        for (size_t r = 0; r < tf->n_reqs; r++) {
            int64_t c = tf->comp ? tf->comp[r] : 0;
            for (int64_t j = 0; j < tf->sched[r]; j += TOK_CHUNK) {
                int64_t n = tf->sched[r] - j < TOK_CHUNK ? tf->sched[r] - j
                                                         : TOK_CHUNK;
                (void)kv_slot_fill(&g, tf->t, r, c + j, n, tf->f, chunk);
                tok_put(o, chunk, (size_t)n);
                done += (size_t)n;
            }
        }
        for (size_t j = 0; j < TOK_CHUNK; j++)
            chunk[j] = KV_SLOT_PAD;
        while (done < tf->row_len) {
            size_t n = tf->row_len - done < TOK_CHUNK ? tf->row_len - done
                                                      : TOK_CHUNK;
            tok_put(o, chunk, n);
            done += n;
        }
        if (!o->npy)
            out_bytes(o, "\n", 1);
    }
}

/* ---------------------------------------------------------------------- */
/* fields                                                                 */

enum fid {
    F_STEP, F_REQ_IDS, F_QSL, F_SEQ_LENS, F_NUM_COMPUTED, F_NUM_SCHEDULED,
    F_POSITIONS, F_REQ_INDICES, F_TOKEN_INDICES, F_BTI, F_BLOCK_NUMBERS,
    F_BLOCK_OFFSETS, F_SLOT_MAPPING, F_CP_OWNER, F_MAX_QUERY_LEN,
    F_NUM_TOKENS, F_NUM_REQS, F_BLOCK_TABLE, F_WAITING, F_BLOCKED,
    F_PREEMPTED, F_FINISHED, F_FREE_BLOCKS, F_NUM_CACHED, F_SHARED,
    F_EVICTED,
    NF
};

static const char *const fnames[NF] = {
    "step", "req_ids", "query_start_loc", "seq_lens", "num_computed_tokens",
    "num_scheduled_tokens", "positions", "req_indices", "token_indices",
    "block_table_indices", "block_numbers", "block_offsets", "slot_mapping",
    "cp_owner", "max_query_len", "num_tokens", "num_reqs", "block_table",
    "waiting", "blocked", "preempted", "finished", "free_blocks",
    "num_cached_tokens", "shared_blocks", "evicted_hashes",
};

/* Library field bit of each token-level field (0 when none). */
static unsigned slot_want(enum fid f)
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

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* Whether field i exists for map (the rest are plan's own). */
static int map_field(int i)
{
    return i != F_STEP && i != F_REQ_IDS && i < F_WAITING;
}

/* Parse --fields into list (at most NF entries); plan_only fields are
 * refused for map.  Returns 0 or a usage exit code. */
static int parse_fields(const char *s, int is_plan, enum fid *list,
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
static int opt_i64(struct arg_str *a, const char *name, int64_t min,
                   int64_t max, int64_t def, int64_t *out)
{
    *out = def;
    return kv_opt_i64(a, name, min, max, out);
}

/* A per-request count list: every value >= min, naming the request. */
static int opt_list(struct arg_str *a, const char *name, int64_t min,
                    int64_t **out, size_t *n)
{
    struct kv_err e;
    const char *p;
    size_t cap = 1, k = 0;

    *out = NULL;
    *n = 0;
    if (a->count == 0)
        return 0;
    for (p = a->sval[0]; *p; p++)
        if (*p == ',')
            cap++;
    *out = malloc(cap * sizeof **out);
    if (!*out)
        return kv_fail("out of memory");
    /* item by item, so that a bad value names its request */
    for (p = a->sval[0]; ; k++) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        char item[64], label[96];

        snprintf(label, sizeof label, "%s: request %zu", name, k);
        if (len >= sizeof item) {
            free(*out);
            *out = NULL;
            return kv_usage("%s: '%.20s...' is too long", label, p);
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (kv_parse_i64(item, label, min, INT64_MAX, &(*out)[k], &e)) {
            free(*out);
            *out = NULL;
            return kv_usage("%s", e.msg);
        }
        if (!c)
            break;
        p = c + 1;
    }
    *n = k + 1;
    return 0;
}

/* Common output options of every subcommand. */
struct common {
    struct arg_str *fields, *format, *dtype, *output;
    struct arg_lit *force, *help, *version;
    struct arg_end *end;
};

static void common_make(struct common *c)
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
static int common_add(struct common *c, void **t)
{
    int n = 0;
    t[n++] = c->fields; t[n++] = c->format; t[n++] = c->dtype;
    t[n++] = c->output; t[n++] = c->force; t[n++] = c->help;
    t[n++] = c->version; t[n++] = c->end;
    return n;
}

/* Open the output and choose the format; returns 0 or an exit code. */
static int open_output(struct common *c, struct kv_out *ko, struct out *o)
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
static int close_output(struct kv_out *ko, struct out *o)
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

/* ---------------------------------------------------------------------- */
/* writing one step                                                       */

struct stepview {
    const struct kv_slot_step *s;
    const int64_t *slot_all;   /* [n_ranks, n_slots] with --all-ranks */
    size_t n_ranks;
    size_t pad_to;             /* slot_mapping length (>= n_tokens) */
    const int64_t *slot_padded;/* n_slots entries */
    const int64_t *table;      /* block table rows */
    size_t t_rows, t_cols;
    const struct kv_plan_step *plan;  /* NULL for map */
};

/* Block hashes: 16 hex digits each in text, their int64 bits in npy. */
static void emit_hashes(struct out *o, const char *name, const uint64_t *h,
                        size_t n)
{
    if (o->npy) {
        emit_vec(o, name, (const int64_t *)(const void *)h, n);
        return;
    }
    out_bytes(o, name, strlen(name));
    out_bytes(o, ":", 1);
    for (size_t i = 0; i < n; i++) {
        char hex[18];
        snprintf(hex, sizeof hex, " %016llx", (unsigned long long)h[i]);
        out_bytes(o, hex, 17);
    }
    out_bytes(o, "\n", 1);
}

static void write_step(struct out *o, const enum fid *fl, size_t nf,
                       const struct stepview *v)
{
    const struct kv_slot_step *s = v->s;
    const struct kv_plan_step *p = v->plan;

    for (size_t i = 0; i < nf; i++) {
        const char *nm = fnames[fl[i]];
        switch (fl[i]) {
        case F_STEP: emit_scalar(o, nm, p->step); break;
        case F_REQ_IDS: emit_vec(o, nm, p->req_ids, p->n_rows); break;
        case F_QSL: emit_vec(o, nm, s->query_start_loc, s->n_reqs + 1); break;
        case F_SEQ_LENS: emit_vec(o, nm, s->seq_lens, s->n_reqs); break;
        case F_NUM_COMPUTED:
            emit_vec(o, nm, s->num_computed_tokens, s->n_reqs);
            break;
        case F_NUM_SCHEDULED:
            emit_vec(o, nm, s->num_scheduled_tokens, s->n_reqs);
            break;
        case F_POSITIONS: emit_vec(o, nm, s->positions, s->n_tokens); break;
        case F_REQ_INDICES:
            emit_vec(o, nm, s->req_indices, s->n_tokens);
            break;
        case F_TOKEN_INDICES:
            emit_vec(o, nm, s->token_indices, s->n_tokens);
            break;
        case F_BTI:
            emit_vec(o, nm, s->block_table_indices, s->n_tokens);
            break;
        case F_BLOCK_NUMBERS:
            emit_vec(o, nm, s->block_numbers, s->n_tokens);
            break;
        case F_BLOCK_OFFSETS:
            emit_vec(o, nm, s->block_offsets, s->n_tokens);
            break;
        case F_SLOT_MAPPING:
            if (v->slot_all)
                emit_mat(o, nm, v->slot_all, v->n_ranks, v->pad_to);
            else
                emit_vec(o, nm, v->slot_padded, v->pad_to);
            break;
        case F_CP_OWNER: emit_vec(o, nm, s->cp_owner, s->n_tokens); break;
        case F_MAX_QUERY_LEN: emit_scalar(o, nm, s->max_query_len); break;
        case F_NUM_TOKENS: emit_scalar(o, nm, (int64_t)s->n_tokens); break;
        case F_NUM_REQS: emit_scalar(o, nm, (int64_t)s->n_reqs); break;
        case F_BLOCK_TABLE:
            emit_mat(o, nm, v->table, v->t_rows, v->t_cols);
            break;
        case F_WAITING: emit_vec(o, nm, p->waiting, p->n_waiting); break;
        case F_BLOCKED: emit_vec(o, nm, p->blocked, p->n_blocked); break;
        case F_PREEMPTED:
            emit_vec(o, nm, p->preempted, p->n_preempted);
            break;
        case F_FINISHED: emit_vec(o, nm, p->finished, p->n_finished); break;
        case F_FREE_BLOCKS: emit_scalar(o, nm, p->free_blocks); break;
        case F_NUM_CACHED:
            emit_vec(o, nm, p->num_cached, p->num_cached ? p->n_rows : 0);
            break;
        case F_SHARED: emit_vec(o, nm, p->shared, p->n_shared); break;
        case F_EVICTED: emit_hashes(o, nm, p->evicted, p->n_evicted); break;
        case NF: break;
        }
    }
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

/* ---------------------------------------------------------------------- */
/* kvslot map                                                             */

static const char map_synopsis[] =
    "\nOne step of vLLM's model-runner metadata: positions, token and "
    "block-table\nindices, slot mapping, query_start_loc, seq_lens ... "
    "(man 1 kvslot).";

/* kv_arg_parse with the usage line, messages and hints naming the
 * subcommand ("Usage: kvslot map ...", "kvslot map: --cp-rank 3: ...",
 * "Try 'kvslot map --help'"); the name stays for the whole subcommand so
 * that a usage error found after parsing points at the subcommand's help,
 * which lists its options, not at the bare list of subcommands. */
static char *cc_help_text(void);

static int parse_sub(const char *sub, void **argtable, int argc, char **argv,
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

/* Text rows shorter than the table are padded with ROW_PAD by
 * kv_read_int_table; a request whose positions reach into its row's padding
 * would silently map tokens to block 0, so it is refused here, naming the
 * request, the row's length and the column needed.  A column spans span
 * positions (the block size times the CP world).  Afterwards the padding
 * becomes 0, as documented.  Returns 0, or -1 with e filled. */
#define ROW_PAD INT64_MIN
static int check_short_rows(int64_t *ids, size_t n_rows, size_t n_cols,
                            size_t n_reqs, const int64_t *sched,
                            const int64_t *comp, int64_t span,
                            const char *path, struct kv_err *e)
{
    for (size_t r = 0; r < n_reqs && r < n_rows; r++) {
        int64_t last = (comp ? comp[r] : 0) + sched[r] - 1;
        size_t len = 0, col;
        if (sched[r] <= 0)
            continue;
        while (len < n_cols && ids[r * n_cols + len] != ROW_PAD)
            len++;
        col = (size_t)(last / span);
        if (col < n_cols && col >= len)
            return kv_err_set(e, "request %zu: position %lld needs block "
                              "table column %zu, row %zu (line %zu of '%s') "
                              "has %zu entries", r, (long long)last, col, r,
                              r + 1, kv_path_name(path, 0), len);
    }
    for (size_t i = 0; i < n_rows * n_cols; i++)
        if (ids[i] == ROW_PAD)
            ids[i] = 0;
    return 0;
}

/* The context-parallel options map and plan share, and their values. */
struct cp_args {
    struct arg_str *cps, *cpr, *pcps, *pcpr, *il, *conv;
    struct arg_lit *all;
    int64_t W, R, P, Q, I;
};

/* Declare the context-parallel options into t; returns the count. */
static int cp_args_make(struct cp_args *c, void **t)
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
    t[n++] = c->conv = arg_str0(NULL, "cp-convention", "dcp|pcp-dcp",
                                "which ranks shard the KV cache (default "
                                "dcp)");
    return n;
}

/* The context-parallel sizes and ranks, each in its range. */
static int cp_numbers(struct cp_args *c)
{
    int rc;
    if ((rc = opt_i64(c->cps, "--cp-size", 1, 1 << 16, 1, &c->W)) ||
        (rc = opt_i64(c->cpr, "--cp-rank", 0, INT64_MAX, 0, &c->R)) ||
        (rc = opt_i64(c->pcps, "--pcp-size", 1, 1 << 16, 1, &c->P)) ||
        (rc = opt_i64(c->pcpr, "--pcp-rank", 0, INT64_MAX, 0, &c->Q)) ||
        (rc = opt_i64(c->il, "--interleave", 1, INT32_MAX, 1, &c->I)))
        return rc;
    return 0;
}

/* The world and rank of the KV-cache shards under --cp-convention, with
 * block size B.  0 or a usage exit code. */
static int cp_options(const struct cp_args *c, int64_t B, int64_t *cpw,
                      int64_t *cpr)
{
    if (c->R >= c->W)
        return kv_usage("--cp-rank %lld: expected below --cp-size %lld",
                        (long long)c->R, (long long)c->W);
    if (c->Q >= c->P)
        return kv_usage("--pcp-rank %lld: expected below --pcp-size %lld",
                        (long long)c->Q, (long long)c->P);
    if (B % c->I)
        return kv_usage("--interleave %lld does not divide -B %lld",
                        (long long)c->I, (long long)B);
    if (c->conv->count && strcmp(c->conv->sval[0], "pcp-dcp") == 0) {
        *cpw = c->P * c->W;
        *cpr = c->Q * c->W + c->R;
    } else if (c->conv->count && strcmp(c->conv->sval[0], "dcp") != 0) {
        return kv_usage("--cp-convention: expected dcp or pcp-dcp, got '%s'",
                        c->conv->sval[0]);
    } else {
        *cpw = c->W;
        *cpr = c->R;
    }
    return 0;
}

/* map's fields in order: the step-level ones from v, the token-level ones
 * streamed per rank. */
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
                   *maxmem;
    struct cp_args cp;
    struct common c;
};

/* map's options, in the order --help lists them; returns the count. */
static int map_args_make(struct map_args *a, void **t)
{
    int n = 0;
    common_make(&a->c);
    t[n++] = a->bs = arg_str1("B", "block-size", "N",
                              "block size of the block table's ids");
    t[n++] = a->table = arg_str1(NULL, "block-table", "FILE",
                                 "block table: text rows or int .npy "
                                 "[R, C]");
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
    n += common_add(&a->c, t + n);
    return n;
}

/* One map run: the geometry, the requests, the table and the fields. */
struct map_run {
    int64_t B, K, M, pad;
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
    return parse_fields(a->c.fields->count ? a->c.fields->sval[0] : NULL, 0,
                        r->fl, &r->nf);
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

static int map_main(int argc, char **argv)
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

/* ---------------------------------------------------------------------- */
/* kvslot plan                                                            */

static const char plan_synopsis[] =
    "\nRun vLLM's scheduler and block allocator step by step and write "
    "every step's\nmetadata and block table (man 1 kvslot).";

/* What plan reads about the requests' content: prompts (lengths, or token
 * ids from --prompts), arrivals, cache salts and LoRA ids. */
struct apc_in {
    size_t n;
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
                      struct arg_str *lora, struct apc_in *a)
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
        if (kv_read_int_table(pfile->sval[0], -1, (size_t)1 << 30, &a->table,
                              &rows, &cols, &e))
            return kv_fail("--prompts: %s", e.msg);
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
                   *maxmem;
    struct arg_lit *apc, *decode, *quiet, *verbose, *round, *noreserve,
                   *async;
    struct cp_args cp;
    struct common c;
};

/* plan's options, in the order --help lists them; returns the count. */
static int plan_args_make(struct plan_args *a, void **t)
{
    int n = 0;
    common_make(&a->c);
    t[n++] = a->prompts = arg_str0(NULL, "prompt-lens", "a,b,..",
                                   "prompt length of each request");
    t[n++] = a->pfile = arg_str0(NULL, "prompts", "FILE",
                                 "token ids of each request, a line each "
                                 "(or an int .npy, -1 padded)");
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
    int64_t B, M, I, cpw, cprk, pad, K_steps, budget;
    enum fid fl[NF];
    size_t nf, np;
    unsigned want;
    int64_t *olens, *slot_pad, *slot_all;
    struct apc_in ai;
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
    if ((rc = opt_i64(a->budget, "--max-tokens", 1, INT32_MAX, 0, &pr->budget)) ||
        (rc = opt_i64(a->bs, "-B", 1, INT32_MAX, 0, &pr->B)) ||
        (rc = opt_i64(a->mml, "--max-model-len", 1, INT32_MAX, 0, &pr->M)) ||
        (rc = opt_i64(a->steps, "--steps", 1, INT64_MAX, INT64_MAX, &pr->K_steps)) ||
        (rc = opt_i64(a->nblocks, "--num-blocks", 2, INT32_MAX, 0, &nb)) ||
        (rc = opt_i64(a->seqs, "--max-num-seqs", 1, INT32_MAX, 256, &ms)) ||
        (rc = opt_i64(a->padto, "--pad-to", 0, INT32_MAX, -1, &pr->pad)) ||
        (rc = cp_numbers(&a->cp)) ||
        (rc = cp_options(&a->cp, pr->B, &pr->cpw, &pr->cprk)) ||
        (rc = parse_fields(a->c.fields->count ? a->c.fields->sval[0] : NULL, 1,
                           pr->fl, &pr->nf)) ||
        (rc = apc_inputs(a->prompts, a->pfile, a->arrive, a->salt, a->lora,
                         &pr->ai)) ||
        (rc = plan_outputs(a->outs, pr->ai.n, &pr->olens)))
        return rc;
    pr->I = a->cp.I;
    pr->np = pr->ai.n;
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
    for (size_t i = 0; i < pr->nf; i++)
        pr->want |= slot_want(pr->fl[i]);
    memset(cfg, 0, sizeof *cfg);
    cfg->n_reqs = pr->np;
    cfg->prompt_lens = pr->ai.plens;
    cfg->output_lens = pr->olens;
    cfg->max_num_batched_tokens = pr->budget;
    cfg->max_num_seqs = ms;
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
    cfg->skip_waiting = cfg->skip_shared = 1;
    for (size_t i = 0; i < pr->nf; i++) {
        if (pr->fl[i] == F_WAITING)
            cfg->skip_waiting = 0;
        if (pr->fl[i] == F_SHARED)
            cfg->skip_shared = 0;
    }
    if (kv_parse_max_mem(a->maxmem->count ? a->maxmem->sval[0] : NULL,
                         &cfg->max_bytes, &e))
        return kv_usage("%s", e.msg);
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
    if (kv_slot_compute(&g, &t, ss->n_rows, ss->num_scheduled, ss->num_computed,
                        pr->want | (1u << KV_SLOT_SLOT_MAPPING), &st, &e)) {
        kv_slot_step_release(&st);
        return kv_fail_err(&e);
    }
    memset(&v, 0, sizeof v);
    v.s = &st;
    v.n_ranks = 1;
    v.pad_to = st.n_tokens;
    v.slot_padded = st.slot_mapping;
    if (pr->slot_pad) {
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
    if (all && !(rc = all_ranks(&g, &t, ss, pr->cpw, v.pad_to, &pr->slot_all))) {
        v.slot_all = pr->slot_all;
        v.n_ranks = (size_t)pr->cpw;
    }
    if (rc == 0)
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
        if ((rc = plan_write_step(pr, a->cp.all->count > 0, o, &ss)))
            break;
        n_steps++;
        n_tokens += ss.num_tokens;
        n_preempted += (int64_t)ss.n_preempted;
        n_finished += (int64_t)ss.n_finished;
        kv_progress_update(&prog, (uint64_t)n_finished, pr->np);
        if (ss.all_done ||
            (!a->decode->count && ss.prompts_done && !a->steps->count))
            break;
    }
    kv_progress_end(&prog);
    if (rc == 0 && a->verbose->count && !o->failed)
        kv_warn("%lld steps, %lld tokens, %lld preemptions, %lld of %zu "
                "requests finished, %.3f s", (long long)n_steps,
                (long long)n_tokens, (long long)n_preempted,
                (long long)n_finished, pr->np, kv_now() - t0);
    return rc;
}

static int plan_main(int argc, char **argv)
{
    struct plan_args a;
    struct plan_run pr;
    struct kv_plan_config cfg;
    struct kv_plan *s = NULL;
    struct kv_out ko;
    struct out o;
    struct kv_err e;
    void *argtable[40];
    int n = plan_args_make(&a, argtable), rc, opened = 0;

    memset(&pr, 0, sizeof pr);
    pr.cpw = 1;
    rc = parse_sub("plan", argtable, argc, argv, a.c.help, a.c.version,
                   a.c.end, plan_synopsis);
    if (rc >= 0 || (rc = plan_config(&a, &pr, &cfg)))
        goto done;
    if (kv_plan_new(&s, &cfg, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if ((rc = open_output(&a.c, &ko, &o)))
        goto done;
    opened = 1;
    if (o.npy && o.dtype == KV_I32 && (rc = plan_i32_check(&pr, cfg.num_blocks)))
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
    free(pr.slot_pad);
    free(pr.slot_all);
    arg_freetable(argtable, (size_t)n);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* kvslot pcp                                                             */

/* Is name selected by --fields (NULL = everything)? */
static int selected(const char *fields, const char *name)
{
    size_t n = strlen(name);
    const char *p = fields;

    if (!fields)
        return 1;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == fields || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
        p += n;
    }
    return 0;
}

static const char *const pcp_ascend_fields[] = {
    "pcp_tokens", "num_pcp_pads", "pcp_unpad_mask",
    "pcp_allgather_restore_idx", "rank", "positions", "q_head_idx",
    "q_tail_idx", "kv_with_q_head_nomask_idx", "kv_with_q_head_mask_idx",
    "kv_with_q_tail_nomask_idx", "kv_with_q_tail_mask_idx", "q_full_idx",
    "attn_mask_seqlens", "head_attn_nomask_seqlens",
    "tail_attn_nomask_seqlens", "slot_mapping",
};

static const char *const pcp_vllm_fields[] = {
    "num_tokens_per_rank", "padded_gather_idx", "gathered_kv_write_mask",
    "hidden_restore_idx", "slot_mapping", "rank", "positions", "req_indices",
    "row_req_ids", "query_start_loc", "seq_lens",
};

/* Every name in --fields must be one of names[]. */
static int check_names(const char *fields, const char *const *names,
                       size_t n_names, const char *what)
{
    char name[64];

    if (!fields)
        return 0;
    while (*fields) {
        size_t len = strcspn(fields, ",");
        int ok = 0;
        if (len == 0 || len >= sizeof name)
            return kv_usage("--fields: empty or overlong name");
        memcpy(name, fields, len);
        name[len] = '\0';
        for (size_t i = 0; i < n_names; i++)
            if (strcmp(name, names[i]) == 0)
                ok = 1;
        if (!ok) {
            char valid[1024];
            size_t k = 0;
            valid[0] = '\0';
            for (size_t i = 0; i < n_names; i++)
                k += (size_t)snprintf(valid + k, sizeof valid - k, "%s%s",
                                      k ? " " : "", names[i]);
            return kv_usage("--fields: unknown field '%s' for %s; valid: %s",
                            name, what, valid);
        }
        fields += len;
        if (*fields == ',')
            fields++;
    }
    return 0;
}

/* Slot mapping of the unsplit batch (tokens per request, computed) for a
 * CP geometry, into *out (malloc'd, n_tokens entries). */
static int batch_slots(const struct kv_slot_geom *g,
                       const struct kv_slot_table *t, size_t n_reqs,
                       const int64_t *tokens, const int64_t *computed,
                       int64_t **out, struct kv_err *e)
{
    struct kv_slot_step st;

    kv_slot_step_init(&st);
    if (kv_slot_compute(g, t, n_reqs, tokens, computed,
                        1u << KV_SLOT_SLOT_MAPPING, &st, e))
        return -1;
    *out = st.slot_mapping;
    st.slot_mapping = NULL;
    kv_slot_step_release(&st);
    return 0;
}

static const char pcp_synopsis[] =
    "\nThe DualChunkSwap split of prefill context parallelism: per-rank "
    "positions,\npads, unpad mask, all-gather restore index, head/tail "
    "index sets (man 1 kvslot).";

/* pcp --layout vllm's fields. */
static void pcp_write_vllm(struct out *po, const char *fields,
                           const struct kv_pcp_vllm *pv, int64_t P,
                           int64_t k_only, const int64_t *computed,
                           const int64_t *sm)
{
    if (selected(fields, "num_tokens_per_rank"))
        emit_vec(po, "num_tokens_per_rank", pv->per_rank, (size_t)P);
    if (selected(fields, "padded_gather_idx"))
        emit_vec(po, "padded_gather_idx", pv->gather_idx,
                 (size_t)(P * pv->padded));
    if (selected(fields, "gathered_kv_write_mask"))
        emit_vec(po, "gathered_kv_write_mask", pv->write_mask,
                 (size_t)(P * pv->padded));
    if (selected(fields, "hidden_restore_idx"))
        emit_vec(po, "hidden_restore_idx", pv->restore_idx, pv->n_tokens);
    if (sm && selected(fields, "slot_mapping"))
        emit_vec(po, "slot_mapping", sm, (size_t)(P * pv->padded));
    for (int64_t k = 0; k < P; k++) {
        int64_t r0 = pv->row_start[k], r1 = pv->row_start[k + 1];
        size_t t0 = 0, nr = (size_t)(r1 - r0);
        int64_t *qsl, *sl, *ri;
        if (k_only >= 0 && k != k_only)
            continue;
        for (int64_t q = 0; q < k; q++)
            t0 += (size_t)pv->per_rank[q];
        qsl = malloc((nr + 2) * sizeof *qsl);
        sl = malloc((nr ? nr : 1) * sizeof *sl);
        ri = malloc(((size_t)pv->per_rank[k] ? (size_t)pv->per_rank[k] : 1) *
                    sizeof *ri);
        if (!qsl || !sl || !ri) {
            free(qsl);
            free(sl);
            free(ri);
            po->failed = 1;
            kv_err_set(&po->err, "out of memory");
            break;
        }
        qsl[0] = 0;
        for (size_t r = 0; r < nr; r++) {
            size_t i = (size_t)pv->row_req[r0 + (int64_t)r];
            qsl[r + 1] = qsl[r] + pv->row_len[r0 + (int64_t)r];
            sl[r] = (computed ? computed[i] : 0) +
                    pv->row_pos[r0 + (int64_t)r] + pv->row_len[r0 + (int64_t)r];
            for (int64_t j = qsl[r]; j < qsl[r + 1]; j++)
                ri[j] = (int64_t)i;
        }
        if (selected(fields, "rank"))
            emit_scalar(po, "rank", k);
        if (selected(fields, "positions"))
            emit_vec(po, "positions", pv->positions + t0,
                     (size_t)pv->per_rank[k]);
        if (selected(fields, "req_indices"))
            emit_vec(po, "req_indices", ri, (size_t)pv->per_rank[k]);
        if (nr == 0) {
            /* MRV2 partition_batch gives a rank without tokens one
             * empty row of request 0 starting at its computed tokens */
            static const int64_t req0 = 0;
            qsl[1] = 0;
            sl[0] = computed ? computed[0] : 0;
            if (selected(fields, "row_req_ids"))
                emit_vec(po, "row_req_ids", &req0, 1);
            if (selected(fields, "query_start_loc"))
                emit_vec(po, "query_start_loc", qsl, 2);
            if (selected(fields, "seq_lens"))
                emit_vec(po, "seq_lens", sl, 1);
            free(qsl);
            free(sl);
            free(ri);
            continue;
        }
        if (selected(fields, "row_req_ids"))
            emit_vec(po, "row_req_ids", pv->row_req + r0, nr);
        if (selected(fields, "query_start_loc"))
            emit_vec(po, "query_start_loc", qsl, nr + 1);
        if (selected(fields, "seq_lens"))
            emit_vec(po, "seq_lens", sl, nr);
        free(qsl);
        free(sl);
        free(ri);
    }
}

/* pcp --layout ascend's fields: the global ones from rank 0, then each
 * rank's (a is split again per rank). */
static void pcp_write_ascend(struct out *po, const char *fields,
                             struct kv_pcp_ascend *pa,
                             const struct kv_slot_geom *g0,
                             const struct kv_slot_table *t, int64_t P,
                             int64_t DS, int64_t DR, int64_t k_only, int64_t B,
                             size_t n_tok, const int64_t *tokens,
                             const int64_t *computed, size_t n_dec,
                             int64_t **gslots)
{
    struct kv_slot_geom g = *g0;
    /* the global fields (the same on every rank), from rank 0 */
    if (selected(fields, "pcp_tokens"))
        emit_vec(po, "pcp_tokens", pa->pcp_tokens, n_tok);
    if (selected(fields, "num_pcp_pads"))
        emit_vec(po, "num_pcp_pads", pa->num_pcp_pads, n_tok);
    if (selected(fields, "pcp_unpad_mask"))
        emit_vec(po, "pcp_unpad_mask", pa->unpad_mask, pa->n_padded);
    if (selected(fields, "pcp_allgather_restore_idx"))
        emit_vec(po, "pcp_allgather_restore_idx", pa->restore_idx,
                 pa->n_padded);
    for (int64_t k = 0; k < P && !po->failed; k++) {
        if (k_only >= 0 && k != k_only)
            continue;
        if (k > 0) {
            kv_pcp_ascend_release(pa);
            if (kv_pcp_ascend_split(tokens, computed, n_tok, n_dec, P, k,
                                    pa, &po->err)) {
                po->failed = 1;
                break;
            }
        }
        if (selected(fields, "rank"))
            emit_scalar(po, "rank", k);
        if (selected(fields, "positions"))
            emit_vec(po, "positions", pa->positions, pa->n_local);
        if (selected(fields, "q_head_idx"))
            emit_vec(po, "q_head_idx", pa->q_head_idx, pa->n_q);
        if (selected(fields, "q_tail_idx"))
            emit_vec(po, "q_tail_idx", pa->q_tail_idx, pa->n_q);
        if (selected(fields, "kv_with_q_head_nomask_idx"))
            emit_vec(po, "kv_with_q_head_nomask_idx", pa->kv_head_nomask,
                     pa->n_head_nomask);
        if (selected(fields, "kv_with_q_head_mask_idx"))
            emit_vec(po, "kv_with_q_head_mask_idx", pa->kv_head_mask,
                     pa->n_q);
        if (selected(fields, "kv_with_q_tail_nomask_idx"))
            emit_vec(po, "kv_with_q_tail_nomask_idx", pa->kv_tail_nomask,
                     pa->n_tail_nomask);
        if (selected(fields, "kv_with_q_tail_mask_idx"))
            emit_vec(po, "kv_with_q_tail_mask_idx", pa->kv_tail_mask,
                     pa->n_q);
        if (selected(fields, "q_full_idx"))
            emit_vec(po, "q_full_idx", pa->q_full_idx, 2 * pa->n_q);
        if (selected(fields, "attn_mask_seqlens"))
            emit_vec(po, "attn_mask_seqlens", pa->attn_mask_seqlens,
                     pa->n_reqs - pa->n_decodes);
        if (selected(fields, "head_attn_nomask_seqlens"))
            emit_vec(po, "head_attn_nomask_seqlens",
                     pa->head_attn_nomask_seqlens, pa->n_reqs - pa->n_decodes);
        if (selected(fields, "tail_attn_nomask_seqlens"))
            emit_vec(po, "tail_attn_nomask_seqlens",
                     pa->tail_attn_nomask_seqlens, pa->n_reqs - pa->n_decodes);
        if (B && selected(fields, "slot_mapping")) {
            /* this rank's slots of the unsplit batch, scattered into
             * the padded all-gather layout (get_padded_slot_mapping) */
            struct kv_err e2;
            size_t src = 0;
            int64_t *pad = malloc((pa->n_padded ? pa->n_padded : 1) *
                                  sizeof *pad);
            g.cp_rank = k * DS + DR;
            free(*gslots);
            *gslots = NULL;
            if (!pad || batch_slots(&g, t, n_tok, tokens, computed,
                                    gslots, &e2)) {
                free(pad);
                po->failed = 1;
                kv_err_set(&po->err, "out of memory");
                break;
            }
            for (size_t j = 0; j < pa->n_padded; j++)
                pad[j] = pa->unpad_mask[j] ? (*gslots)[src++] : KV_SLOT_PAD;
            emit_vec(po, "slot_mapping", pad, pa->n_padded);
            free(pad);
        }
    }
}

struct pcp_args {
    struct arg_str *ps, *tok, *dec, *comp, *rk, *lay, *bs, *table, *ds, *dr,
                   *il;
    struct common c;
};

/* pcp's options, in the order --help lists them; returns the count. */
static int pcp_args_make(struct pcp_args *a, void **t)
{
    int n = 0;
    common_make(&a->c);
    a->c.fields->hdr.glossary = "fields to write (pcp keeps its fixed order)";
    t[n++] = a->ps = arg_str1(NULL, "pcp-size", "P", "PCP world size");
    t[n++] = a->tok = arg_str1(NULL, "tokens", "n0,n1,..",
                               "tokens scheduled per request");
    t[n++] = a->dec = arg_str0(NULL, "decodes", "D",
                               "the first D requests are decodes "
                               "(default: leading 1-token requests)");
    t[n++] = a->comp = arg_str0(NULL, "computed", "c0,c1,..",
                                "tokens already computed per request");
    t[n++] = a->rk = arg_str0(NULL, "rank", "k", "only this rank");
    t[n++] = a->lay = arg_str0(NULL, "layout", "ascend|vllm",
                               "vllm-ascend (padded) or vLLM MRV2 "
                               "(default ascend)");
    t[n++] = a->bs = arg_str0("B", "block-size", "N",
                              "block size (with --block-table: "
                              "slot_mapping)");
    t[n++] = a->table = arg_str0(NULL, "block-table", "FILE",
                                 "block table: text rows or int .npy");
    t[n++] = a->ds = arg_str0(NULL, "dcp-size", "D",
                              "decode context parallel size (default 1)");
    t[n++] = a->dr = arg_str0(NULL, "dcp-rank", "d",
                              "this DCP rank (default 0)");
    t[n++] = a->il = arg_str0(NULL, "interleave", "I",
                              "cp_kv_cache_interleave_size (default 1)");
    n += common_add(&a->c, t + n);
    return n;
}

/* One pcp run: the options' values, the block table and the split. */
struct pcp_run {
    int64_t P, D, k_only, B, DS, DR, I;
    int64_t *tokens, *computed, *ids, *gslots, *sm;
    size_t n_tok, n_comp, n_dec;
    int vllm;
    const char *fields;
    struct kv_pcp_ascend a;
    struct kv_pcp_vllm v;
    struct kv_slot_geom g;
    struct kv_slot_table t;
};

/* The numeric options and the layout, checked against each other. */
static int pcp_numbers(const struct pcp_args *a, struct pcp_run *r)
{
    int rc;
    if ((rc = opt_i64(a->ps, "--pcp-size", 1, 1 << 16, 1, &r->P)) ||
        (rc = opt_i64(a->dec, "--decodes", 0, INT64_MAX, -1, &r->D)) ||
        (rc = opt_i64(a->rk, "--rank", 0, INT64_MAX, -1, &r->k_only)) ||
        (rc = opt_i64(a->bs, "-B", 1, INT32_MAX, 0, &r->B)) ||
        (rc = opt_i64(a->ds, "--dcp-size", 1, 1 << 16, 1, &r->DS)) ||
        (rc = opt_i64(a->dr, "--dcp-rank", 0, INT64_MAX, 0, &r->DR)) ||
        (rc = opt_i64(a->il, "--interleave", 1, INT32_MAX, 1, &r->I)))
        return rc;
    if (a->lay->count && strcmp(a->lay->sval[0], "vllm") == 0)
        r->vllm = 1;
    else if (a->lay->count && strcmp(a->lay->sval[0], "ascend") != 0)
        return kv_usage("--layout: expected ascend or vllm, got '%s'",
                        a->lay->sval[0]);
    r->fields = a->c.fields->count ? a->c.fields->sval[0] : NULL;
    if ((rc = r->vllm ? check_names(r->fields, pcp_vllm_fields,
                                    N_ELEMS(pcp_vllm_fields),
                                    "pcp --layout vllm")
                      : check_names(r->fields, pcp_ascend_fields,
                                    N_ELEMS(pcp_ascend_fields),
                                    "pcp --layout ascend")))
        return rc;
    if (r->k_only >= r->P)
        return kv_usage("--rank %lld: expected below --pcp-size %lld",
                        (long long)r->k_only, (long long)r->P);
    if (r->DR >= r->DS)
        return kv_usage("--dcp-rank %lld: expected below --dcp-size %lld",
                        (long long)r->DR, (long long)r->DS);
    return 0;
}

/* The requests (--tokens, --computed, --decodes) and the block table. */
static int pcp_requests(const struct pcp_args *a, struct pcp_run *r)
{
    struct kv_err e;
    size_t rows = 0, cols = 0;
    int rc;
    if ((rc = opt_list(a->tok, "--tokens", 1, &r->tokens, &r->n_tok)) ||
        (rc = opt_list(a->comp, "--computed", 0, &r->computed, &r->n_comp)))
        return rc;
    if (r->n_tok == 0)
        return kv_usage("--tokens: no requests");
    if (a->comp->count && r->n_comp != r->n_tok)
        return kv_usage("--computed has %zu values, --tokens has %zu",
                        r->n_comp, r->n_tok);
    if (r->D > (int64_t)r->n_tok)
        return kv_usage("--decodes %lld: only %zu requests", (long long)r->D,
                        r->n_tok);
    r->n_dec = r->D >= 0 ? (size_t)r->D
                         : kv_pcp_count_decodes(r->tokens, r->computed,
                                                r->n_tok, 1);
    if (!!a->bs->count != !!a->table->count)
        return kv_usage("-B and --block-table go together");
    if (!r->B && (a->ds->count || a->dr->count || a->il->count))
        /* they only shape slot_mapping; silently ignoring them would let
         * a caller believe the split depends on them */
        return kv_usage("%s only shapes slot_mapping: give -B and "
                        "--block-table too", a->ds->count ? "--dcp-size" :
                        a->dr->count ? "--dcp-rank" : "--interleave");
    if (r->B && r->B % r->I)
        return kv_usage("--interleave %lld does not divide -B %lld",
                        (long long)r->I, (long long)r->B);
    if (!r->B)
        return 0;
    if (kv_read_int_table(a->table->sval[0], ROW_PAD, kv_default_max_mem(),
                          &r->ids, &rows, &cols, &e) ||
        check_short_rows(r->ids, rows, cols, r->n_tok, r->tokens, r->computed,
                         r->B * (r->vllm ? r->DS : r->P * r->DS),
                         a->table->sval[0], &e))
        return kv_fail_err(&e);
    memset(&r->g, 0, sizeof r->g);
    r->g.block_size = r->B;
    r->g.kernel_block_size = r->B;
    r->g.interleave = r->I;
    r->g.virt = KV_SLOT_VIRTUAL_KERNEL;
    r->g.max_model_len = INT64_MAX / 4;
    r->t.ids = r->ids;
    r->t.n_rows = rows;
    r->t.n_cols = cols;
    return 0;
}

/* The split of either layout, and with -B the slots it needs. */
static int pcp_split(struct pcp_run *r)
{
    struct kv_err e;
    if (!r->vllm) {
        /* rank 0 validates the input and gives the global fields */
        if (kv_pcp_ascend_split(r->tokens, r->computed, r->n_tok, r->n_dec,
                                r->P, 0, &r->a, &e))
            return kv_fail_err(&e);
        if (!r->B)
            return 0;
        /* checked once here so that the rank loop cannot fail */
        r->g.cp_world = r->P * r->DS;
        r->g.cp_rank = 0;
        if (batch_slots(&r->g, &r->t, r->n_tok, r->tokens, r->computed,
                        &r->gslots, &e))
            return kv_fail_err(&e);
        return 0;
    }
    if (kv_pcp_vllm_split(r->tokens, r->computed, r->n_tok, r->n_dec, r->P,
                          &r->v, &e))
        return kv_fail_err(&e);
    if (!r->B)
        return 0;
    /* newest convention: only DCP shards the KV cache */
    size_t m = (size_t)r->P * (size_t)r->v.padded;
    r->g.cp_world = r->DS;
    r->g.cp_rank = r->DR;
    if (batch_slots(&r->g, &r->t, r->n_tok, r->tokens, r->computed,
                    &r->gslots, &e))
        return kv_fail_err(&e);
    r->sm = malloc((m ? m : 1) * sizeof *r->sm);
    if (!r->sm)
        return kv_fail("out of memory");
    for (size_t j = 0; j < m; j++)
        r->sm[j] = r->v.write_mask[j] ? r->gslots[r->v.gather_idx[j]]
                                      : KV_SLOT_PAD;
    return 0;
}

static int pcp_main(int argc, char **argv)
{
    struct pcp_args a;
    struct pcp_run r;
    struct kv_out ko;
    struct out o;
    void *argtable[24];
    int n = pcp_args_make(&a, argtable), rc, opened = 0;

    memset(&r, 0, sizeof r);
    r.D = r.k_only = -1;
    rc = parse_sub("pcp", argtable, argc, argv, a.c.help, a.c.version,
                   a.c.end, pcp_synopsis);
    if (rc >= 0 || (rc = pcp_numbers(&a, &r)) || (rc = pcp_requests(&a, &r)) ||
        (rc = pcp_split(&r)) || (rc = open_output(&a.c, &ko, &o)))
        goto done;
    opened = 1;
    out_hold(&o);    /* an i32 overflow found mid-way leaves no output */
    if (r.vllm)
        pcp_write_vllm(&o, r.fields, &r.v, r.P, r.k_only, r.computed, r.sm);
    else
        pcp_write_ascend(&o, r.fields, &r.a, &r.g, &r.t, r.P, r.DS, r.DR,
                         r.k_only, r.B, r.n_tok, r.tokens, r.computed, r.n_dec,
                         &r.gslots);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_pcp_ascend_release(&r.a);
    kv_pcp_vllm_release(&r.v);
    free(r.tokens);
    free(r.computed);
    free(r.ids);
    free(r.gslots);
    free(r.sm);
    arg_freetable(argtable, (size_t)n);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* kvslot cplens                                                          */

static int cplens_main(int argc, char **argv)
{
    struct arg_str *cps = arg_str1(NULL, "cp-size", "W",
                                   "ranks that shard the KV cache");
    struct arg_str *il = arg_str0(NULL, "interleave", "I",
                                  "cp_kv_cache_interleave_size (default 1)");
    struct arg_str *sl = arg_str1(NULL, "seq-lens", "L0,L1,..",
                                  "sequence length of each request");
    struct arg_str *rk = arg_str0(NULL, "cp-rank", "R",
                                  "only this rank's lengths");
    struct common c;
    void *argtable[16];
    int n = 0, rc, opened = 0;
    int64_t W, I, R, *lens = NULL, *out = NULL;
    size_t n_lens = 0;
    struct kv_out ko;
    struct out o;

    common_make(&c);
    argtable[n++] = cps; argtable[n++] = il; argtable[n++] = sl;
    argtable[n++] = rk; argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("cplens", argtable, argc, argv, c.help, c.version, c.end,
                   "\nPer-rank KV lengths under interleaving (man 1 kvslot).");
    if (rc >= 0)
        goto done;
    if ((rc = opt_i64(cps, "--cp-size", 1, 1 << 16, 1, &W)) ||
        (rc = opt_i64(il, "--interleave", 1, INT32_MAX, 1, &I)) ||
        (rc = opt_i64(rk, "--cp-rank", 0, INT64_MAX, -1, &R)))
        goto done;
    if (R >= W) {
        rc = kv_usage("--cp-rank %lld: expected below --cp-size %lld",
                      (long long)R, (long long)W);
        goto done;
    }
    if ((rc = opt_list(sl, "--seq-lens", 0, &lens, &n_lens)))
        goto done;
    if (n_lens == 0) {
        rc = kv_usage("--seq-lens: no requests");
        goto done;
    }
    out = malloc(n_lens * (size_t)W * sizeof *out);
    if (!out) {
        rc = kv_fail("out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_lens; i++)
        kv_slot_cp_local_lens(lens[i], W, I, out + i * (size_t)W);
    if (R >= 0)
        for (size_t i = 0; i < n_lens; i++)
            out[i] = out[i * (size_t)W + (size_t)R];
    if ((rc = open_output(&c, &ko, &o)))
        goto done;
    opened = 1;
    out_hold(&o);    /* an i32 overflow found mid-way leaves no output */
    if (R >= 0)
        emit_vec(&o, "cp_local_seq_lens", out, n_lens);
    else
        emit_mat(&o, "cp_local_seq_lens", out, n_lens, (size_t)W);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    free(lens);
    free(out);
    free(c.fields);     /* made by common_make, not in this table */
    arg_freetable(argtable, (size_t)n);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* kvslot reorg: MLA context parallel, the AllGatherKV index map          */

static int reorg_main(int argc, char **argv)
{
    struct arg_str *bs = arg_str1("B", "block-size", "N", "block size");
    struct arg_str *tab = arg_str1(NULL, "block-table", "FILE",
                                   "block table (text rows or integer .npy), one row a request");
    struct arg_str *cl = arg_str1(NULL, "context-lens", "C0,C1,..",
                                  "context tokens of each request (num_computed_tokens)");
    struct arg_str *ps = arg_str0(NULL, "pcp-size", "P", "prefill context-parallel ranks (default 1)");
    struct arg_str *ds = arg_str0(NULL, "dcp-size", "D", "decode context-parallel ranks (default 1)");
    struct arg_str *il = arg_str0(NULL, "interleave", "I",
                                  "cp_kv_cache_interleave_size (default 1)");
    struct arg_str *mc = arg_str0(NULL, "max-context-chunk", "N",
                                  "context tokens a chunk (multiple of I x P x D; default one chunk)");
    struct common c;
    void *argtable[20];
    int n = 0, rc, opened = 0;
    int64_t B, P, D, I, MC, *ctx = NULL, *bt = NULL, *rows9 = NULL;
    size_t n_ctx = 0, bt_rows = 0, bt_cols = 0;
    struct kv_out ko;
    struct out o;
    struct kv_mla_cp_map m;
    struct kv_err e = {{0}};
    memset(&m, 0, sizeof m);
    common_make(&c);
    argtable[n++] = bs; argtable[n++] = tab; argtable[n++] = cl; argtable[n++] = ps;
    argtable[n++] = ds; argtable[n++] = il; argtable[n++] = mc; argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("reorg", argtable, argc, argv, c.help, c.version, c.end,
                   "\nMLA context parallel: where every context token of a chunked-prefill\n"
                   "step sits on the ranks, in the all-gathered buffer and in the\n"
                   "reorganised contiguous layout (man 1 kvslot).");
    if (rc >= 0)
        goto done;
    if ((rc = opt_i64(bs, "--block-size", 1, 1 << 20, 1, &B)) ||
        (rc = opt_i64(ps, "--pcp-size", 1, 1024, 1, &P)) ||
        (rc = opt_i64(ds, "--dcp-size", 1, 1024, 1, &D)) ||
        (rc = opt_i64(il, "--interleave", 1, 1 << 20, 1, &I)) ||
        (rc = opt_i64(mc, "--max-context-chunk", 0, INT64_C(1) << 40, 0, &MC)) ||
        (rc = opt_list(cl, "--context-lens", 0, &ctx, &n_ctx)))
        goto done;
    if (n_ctx == 0) {
        rc = kv_usage("--context-lens: no requests");
        goto done;
    }
    if (B % I) {
        rc = kv_usage("--interleave %lld must divide --block-size %lld", (long long)I,
                      (long long)B);
        goto done;
    }
    if (MC % (I * P * D)) {
        rc = kv_usage("--max-context-chunk %lld: expected a multiple of I x P x D = %lld",
                      (long long)MC, (long long)(I * P * D));
        goto done;
    }
    if (kv_read_int_table(tab->sval[0], 0, kv_default_max_mem(), &bt, &bt_rows, &bt_cols, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    struct kv_mla_cp_geom g = {B, P, D, I, MC};
    if (kv_mla_cp_build(&g, bt, bt_rows, bt_cols, ctx, n_ctx, &m, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    rows9 = malloc((m.n ? m.n : 1) * 9 * sizeof *rows9);
    if (!rows9) {
        rc = kv_fail("out of memory");
        goto done;
    }
    for (size_t i = 0; i < m.n; i++) {
        const struct kv_mla_cp_entry *x = &m.e[i];
        int64_t r[9] = {x->req, x->pos, x->chunk, x->pcp_rank, x->dcp_rank, x->local_index,
                        x->local_slot, x->gathered, x->reorg};
        memcpy(rows9 + 9 * i, r, sizeof r);
    }
    if ((rc = open_output(&c, &ko, &o)))
        goto done;
    opened = 1;
    out_hold(&o);
    size_t nc = (size_t)m.n_chunks;
    emit_scalar(&o, "chunk_size", m.chunk_size);
    emit_vec(&o, "toks", m.toks, nc);
    emit_mat(&o, "padded_local_chunk_seq_lens", m.padded_lens, nc, n_ctx);
    emit_mat(&o, "cu_seq_lens", m.cu_seq_lens, nc, n_ctx + 1);
    emit_mat(&o, "local_context_lens", m.local_lens, n_ctx, (size_t)(P * D));
    emit_mat(&o, "map", rows9, m.n, 9);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_mla_cp_map_release(&m);
    free(ctx);
    free(bt);
    free(rows9);
    free(c.fields);
    arg_freetable(argtable, (size_t)n);
    return rc;
}

/* ---------------------------------------------------------------------- */

static void usage_list(void)
{
    printf("Usage: %s map|plan|pcp|cplens [options]\n"
           "  map     one step's metadata from a block table\n"
           "  plan    the scheduler and block allocator, step by step\n"
           "  pcp     the DualChunkSwap split of prefill context "
           "parallelism\n"
           "  cplens  per-rank KV lengths under interleaving\n"
           "  reorg   MLA context parallel: the AllGatherKV index map\n"
           "'%s SUBCOMMAND --help' lists the options.\n",
           kv_progname(), kv_progname());
}


/* ---------------------------------------------------------------------- */
/* kvslot plan --chunk-cache: seed 001's flow (lib/slot/ccplan.h)         */

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
static char *cc_help_text(void)
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

static int plan_cc_main(int argc, char **argv)
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

int main(int argc, char **argv)
{
    kv_setprogname(argv[0]);
    if (argc < 2)
        return kv_usage("missing subcommand (map, plan, pcp or cplens)");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage_list();
        return kv_close_stdout();
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("%s (kvtools) %s\n", kv_progname(), KV_VERSION);
        return kv_close_stdout();
    }
    if (strcmp(argv[1], "map") == 0)
        return map_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "plan") == 0) {
        for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
            if (!strcmp(argv[i], "--chunk-cache"))
                return plan_cc_main(argc - 1, argv + 1);
        return plan_main(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "pcp") == 0)
        return pcp_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "cplens") == 0)
        return cplens_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "reorg") == 0)
        return reorg_main(argc - 1, argv + 1);
    return kv_usage("unknown subcommand '%s' (map, plan, pcp or cplens)",
                    argv[1]);
}
