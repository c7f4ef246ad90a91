/* chunk_sim_run.c - kvchunk sim's replay and report (chunk_sim.h): the
 * trace read in batches on the calling thread, each batch fed to every
 * replay instance (a budget of the sweep and a group of policies), the
 * instances spread over threads; then a row per budget and policy as a
 * table, CSV or JSON lines. */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "core/kv.h"
#include "chunk/chunk_sim.h"

#define BATCH 4096

struct batch {
    struct kv_sim_req *req;
    size_t n;
    struct kv_sim_seg *seg;
    size_t n_seg, cap_seg;
};

struct feed {
    struct kv_chunk_sim_unit *u;
    const struct batch *b;
    int *rc;
    struct kv_err *e;
};

static void feed_unit(void *ctx, size_t i)
{
    struct feed *fd = ctx;
    if (fd->rc[i] < 0)
        return;
    for (size_t k = 0; k < fd->b->n; k++)
        if (kv_sim_feed(fd->u[i].s, &fd->b->req[k], &fd->e[i]) < 0) {
            fd->rc[i] = -1;
            return;
        }
}

/* Copy a request (valid until the next read) into the batch. */
static int batch_add(struct batch *b, const struct kv_sim_req *r)
{
    if (b->n_seg + r->n_chunks > b->cap_seg) {
        size_t nc = (b->n_seg + r->n_chunks) * 2 + 64;
        struct kv_sim_seg *q = realloc(b->seg, nc * sizeof *q);
        if (!q)
            return -1;
        b->seg = q;
        b->cap_seg = nc;
    }
    struct kv_sim_req *d = &b->req[b->n++];
    *d = *r;
    d->sys.name = "";
    d->sys.name_len = 0;
    d->hash_ids = NULL;    /* not copied: the replay does not use them */
    /* chunks: an offset until the batch is complete */
    d->chunks = (struct kv_sim_seg *)(uintptr_t)b->n_seg;
    for (size_t i = 0; i < r->n_chunks; i++) {
        b->seg[b->n_seg] = r->chunks[i];
        b->seg[b->n_seg].name = "";
        b->seg[b->n_seg].name_len = 0;
        b->n_seg++;
    }
    return 0;
}

static void batch_seal(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        b->req[i].chunks = b->seg + (uintptr_t)b->req[i].chunks;
}

#define PREFIX_POOLS ((1u << KV_SIM_PREFIX) | (1u << KV_SIM_PREFIX_SORTED) | \
                      (1u << KV_SIM_PREFIX_LFU))

/* Open the trace reader in the format asked for (or the one its first
 * line shows).  A Mooncake trace has no chunks: its policies are the
 * prefix ones (by default prefix, prefix-lfu and prefix-radix). */
static int open_trace(struct kv_chunk_sim *cs, FILE *f, const char *name,
                      struct kv_sim_reader **rd, int *usage,
                      struct kv_err *e)
{
    const unsigned chunky = (1u << KV_SIM_PREFIX_SORTED) |
                            (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU) |
                            (1u << KV_SIM_ORACLE);
    int fmt;
    *usage = 0;
    if (kv_sim_reader_open(rd, f, name, e) < 0 ||
        kv_sim_reader_set_format(*rd, cs->trace_format, cs->trace_block,
                                 e) < 0 ||
        kv_sim_reader_format(*rd, &fmt, e) < 0)
        return -1;
    *usage = 1;
    if (fmt == KV_SIM_FORMAT_MOONCAKE) {
        if (!cs->block_given)
            cs->sim.block_size = cs->trace_block;   /* the trace's blocks */
        if (!cs->policies_given)
            cs->policies = (1u << KV_SIM_NONE) | (1u << KV_SIM_PREFIX) |
                           (1u << KV_SIM_PREFIX_LFU) |
                           (1u << KV_SIM_PREFIX_RADIX);
        for (int p = 0; p < KV_SIM_NPOLICIES; p++)
            if ((cs->policies & chunky) >> p & 1u)
                return kv_err_set(e, "policy '%s' needs retrieved chunks; a "
                                  "Mooncake trace has none (use none, "
                                  "prefix, prefix-lfu, prefix-radix)",
                                  kv_sim_policy_name(p));
        cs->sim.policies = cs->policies | (1u << KV_SIM_NONE);
    }
    /* the block size is known now: a block pool needs room for one */
    for (int c = 0; c < cs->n_caps; c++)
        if ((cs->policies & PREFIX_POOLS) && cs->caps[c] < cs->sim.block_size)
            return kv_err_set(e, "capacity of %lld tokens is smaller than "
                              "one block of %lld", (long long)cs->caps[c],
                              (long long)cs->sim.block_size);
    *usage = 0;
    return 0;
}

/* The replay instances: prefix caching, chunk caching (one per budget of
 * the sweep each) and the budget-free none and oracle; each keeps its
 * own conversations, so the results do not depend on the threads. */
static int make_units(struct kv_chunk_sim *cs, struct kv_err *e)
{
    const unsigned none = 1u << KV_SIM_NONE;
    const unsigned groups[3] = {
        PREFIX_POOLS | (1u << KV_SIM_PREFIX_RADIX),
        (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU),
        none | (1u << KV_SIM_ORACLE),
    };
    for (int g = 0; g < 3; g++) {
        unsigned pol = cs->policies & groups[g];
        if (g == 2)
            pol |= none;   /* always: the speedups need it */
        if (!pol)
            continue;
        for (int c = 0; c < (g == 2 ? 1 : cs->n_caps); c++) {
            struct kv_chunk_sim_unit *u = &cs->units[cs->n_units];
            struct kv_sim_opts so = cs->sim;
            so.policies = pol | none;
            so.capacity_tokens = cs->caps[g == 2 ? 0 : c];
            u->cap = g == 2 ? -1 : c;
            u->policies = pol;
            if (kv_sim_create(&u->s, &so, e) < 0)
                return -1;
            cs->n_units++;
        }
    }
    return 0;
}

/* What feeding r to every unit may add to their tables, at most. */
static size_t feed_mem(const struct kv_chunk_sim *cs,
                       const struct kv_sim_req *r)
{
    size_t m = 0;
    for (int i = 0; i < cs->n_units; i++) {
        size_t u = kv_sim_feed_mem(cs->units[i].s, r);
        if (u > SIZE_MAX - m)
            return SIZE_MAX;
        m += u;
    }
    return m;
}

/* Fill the batch from the trace; a request that would take the memory
 * over --max-mem ends the batch (*pending: it goes first in the next,
 * once the tables are measured again), or is refused in an empty one.
 * 1 while there is more to read, 0 at the end, -1 (e set), -2 (e names
 * the line, kv_sim_check), -3 (e set: --max-mem or out of memory). */
static int fill(struct kv_chunk_sim *cs, struct kv_sim_reader *rd,
                const char *name, const struct kv_sim_opts *check,
                struct batch *bt, struct kv_sim_req *req, int *pending,
                struct kv_err *e)
{
    size_t max = cs->max_mem ? cs->max_mem : SIZE_MAX;
    size_t held = kv_chunk_sim_mem(cs) + BATCH * sizeof *bt->req;
    int got = 1;
    bt->n = bt->n_seg = 0;
    while (bt->n < BATCH) {
        if (!*pending && (got = kv_sim_reader_next(rd, req, e)) <= 0)
            return got;
        *pending = 0;
        if (kv_sim_check(check, req, e) < 0)
            return -2;
        size_t need = feed_mem(cs, req),
               have = held + bt->cap_seg * sizeof *bt->seg;
        if (have > max || need > max - have) {
            if (bt->n) {
                *pending = 1;
                return 1;
            }
            kv_err_set(e, "'%s' line %llu: replaying it takes about %.0f "
                       "bytes, more than %zu bytes (--max-mem)", name,
                       (unsigned long long)req->line,
                       (double)have + (double)need, max);
            return -3;
        }
        held += need;
        if (batch_add(bt, req) < 0) {
            kv_err_set(e, "out of memory");
            return -3;
        }
    }
    return got;
}

/* Read the trace in batches, each fed to every unit over the threads. */
static int replay(struct kv_chunk_sim *cs, struct kv_sim_reader *rd,
                  const char *name, kv_chunk_sim_progress_fn progress,
                  void *ctx, struct kv_err *e)
{
    struct kv_err ue[2 * KV_CHUNK_SIM_MAX_CAPS + 1];
    int urc[2 * KV_CHUNK_SIM_MAX_CAPS + 1] = { 0 };
    struct kv_sim_opts check = cs->sim;
    struct kv_sim_req req;
    struct batch bt;
    int got = 1, pending = 0;
    memset(&bt, 0, sizeof bt);
    /* every segment must fit the smallest budget */
    for (int c = 0; c < cs->n_caps; c++)
        if (cs->caps[c] < check.capacity_tokens)
            check.capacity_tokens = cs->caps[c];
    bt.req = malloc(BATCH * sizeof *bt.req);
    if (!bt.req)
        return kv_err_set(e, "out of memory");
    while (got > 0) {
        got = fill(cs, rd, name, &check, &bt, &req, &pending, e);
        if (got < 0)
            break;
        batch_seal(&bt);
        struct feed fd = { cs->units, &bt, urc, ue };
        kv_parallel_for((size_t)cs->n_units, cs->jobs, feed_unit, &fd);
        for (int i = 0; i < cs->n_units; i++)
            if (urc[i] < 0) {
                *e = ue[i];
                got = -3;
            }
        cs->n_requests += bt.n;
        if (progress)
            progress(ctx, cs->n_requests);
    }
    free(bt.req);
    free(bt.seg);
    if (got == -2) {
        /* kv_sim_check names the line; add the file */
        struct kv_err le = *e;
        return kv_err_set(e, "'%s' %s", name, le.msg);
    }
    return got < 0 ? -1 : 0;
}

int kv_chunk_sim_run(struct kv_chunk_sim *cs, FILE *f, const char *name,
                     kv_chunk_sim_progress_fn progress, void *ctx,
                     int *usage, struct kv_err *e)
{
    struct kv_sim_reader *rd = NULL;
    int rc = -1;
    cs->n_requests = 0;
    if (open_trace(cs, f, name, &rd, usage, e) < 0)
        goto done;
    if (make_units(cs, e) < 0 || replay(cs, rd, name, progress, ctx, e) < 0)
        goto done;
    if (cs->sim.warmup && cs->n_requests <= cs->sim.warmup) {
        kv_err_set(e, "'%s': --warmup %llu leaves nothing to count: the "
                   "trace has %llu requests", name,
                   (unsigned long long)cs->sim.warmup,
                   (unsigned long long)cs->n_requests);
        goto done;
    }
    rc = 0;
done:
    kv_sim_reader_free(rd);
    return rc;
}

/* ---- the report ---------------------------------------------------------- */

/* "12.3G": a byte count for the table. */
static void human(char *buf, size_t n, double v)
{
    static const char units[] = "BKMGTPE";
    int u = 0;
    while (v >= 1024 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.1f%c", v, units[u]);
}

static double rate(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

/* The unit holding policy p at budget c. */
static const struct kv_sim *unit_for(const struct kv_chunk_sim *cs, int p,
                                     int c)
{
    for (int i = 0; i < cs->n_units; i++)
        if (((cs->units[i].policies >> p) & 1u) &&
            (cs->units[i].cap == c || cs->units[i].cap < 0))
            return cs->units[i].s;
    return cs->units[0].s;
}

/* One row's figures beside the policy's counters. */
struct row {
    int policy;
    struct kv_sim_stats st;
    double bpt, mean, qmean, speed, prefix_mean, hs, e2e, e2e_speed;
    double cap_bytes;
    int64_t cap_tokens;
};

/* v as the CSV prints it with prec decimals, read back: the JSON number
 * then equals the CSV's figure. */
static json_t *fixed(double v, int prec)
{
    char b[64];
    snprintf(b, sizeof b, "%.*f", prec, v);
    return json_real(strtod(b, NULL));
}

/* -f json: one row as an object, its fields named and rounded as in the
 * CSV (speedup_vs_prefix null where the CSV leaves it empty), written as
 * one compact line; 0 or -1 out of memory. */
static int row_json(FILE *f, const struct row *r)
{
    const struct kv_sim_stats *st = &r->st;
    double bpt = r->bpt;
    json_t *o = json_object();
    char *s;
    if (!o)
        return -1;
#define SETI(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
#define SETF(k, v, d) json_object_set_new(o, k, fixed(v, d))
    json_object_set_new(o, "policy", json_string(kv_sim_policy_name(r->policy)));
    SETF("token_hit_rate", rate(st->hit_tokens, st->prompt_tokens), 6);
    SETF("chunk_hit_rate", rate(st->chunk_hits, st->chunk_slots), 6);
    SETI("requests", st->requests);
    SETI("prompt_tokens", st->prompt_tokens);
    SETI("hit_tokens", st->hit_tokens);
    SETI("prefill_tokens", st->prefill_tokens);
    SETI("chunk_slots", st->chunk_slots);
    SETI("chunk_hits", st->chunk_hits);
    SETF("bytes_loaded", (double)st->loaded_tokens * bpt, 0);
    SETF("bytes_stored", (double)st->stored_tokens * bpt, 0);
    SETF("bytes_rotated", (double)st->rotated_tokens * bpt, 0);
    SETI("evictions", st->evictions);
    SETF("bytes_evicted", (double)st->evicted_tokens * bpt, 0);
    SETI("entries_max", st->entries_max);
    SETF("ttft_mean_ms", r->mean / 1e3, 4);
    SETF("ttft_p50_ms", kv_sim_ttft_quantile(st, 0.5) / 1e3, 4);
    SETF("ttft_p99_ms", kv_sim_ttft_quantile(st, 0.99) / 1e3, 4);
    SETF("speedup_vs_none", r->speed, 4);
    SETF("queued_ttft_mean_ms", r->qmean / 1e3, 4);
    SETF("queued_ttft_p99_ms", kv_sim_queued_quantile(st, 0.99) / 1e3, 4);
    SETF("capacity_bytes", r->cap_bytes, 0);
    SETI("capacity_tokens", r->cap_tokens);
    if (r->prefix_mean > 0 && r->mean > 0)
        SETF("speedup_vs_prefix", r->prefix_mean / r->mean, 4);
    else
        json_object_set_new(o, "speedup_vs_prefix", json_null());
    SETF("chunk_hit_rate_sys", r->hs, 6);
    SETF("e2e_mean_ms", r->e2e / 1e3, 4);
    SETF("e2e_speedup_vs_none", r->e2e_speed, 4);
#undef SETI
#undef SETF
    s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s)
        return -1;
    fprintf(f, "%s\n", s);
    free(s);
    return 0;
}

static void row_csv(FILE *f, const struct row *r)
{
    const struct kv_sim_stats *st = &r->st;
    double bpt = r->bpt;
    fprintf(f, "%s,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu,%llu,%.0f,%.0f,%.0f,"
            "%llu,%.0f,%llu,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.0f,%lld,",
            kv_sim_policy_name(r->policy),
            rate(st->hit_tokens, st->prompt_tokens),
            rate(st->chunk_hits, st->chunk_slots),
            (unsigned long long)st->requests,
            (unsigned long long)st->prompt_tokens,
            (unsigned long long)st->hit_tokens,
            (unsigned long long)st->prefill_tokens,
            (unsigned long long)st->chunk_slots,
            (unsigned long long)st->chunk_hits,
            (double)st->loaded_tokens * bpt, (double)st->stored_tokens * bpt,
            (double)st->rotated_tokens * bpt,
            (unsigned long long)st->evictions,
            (double)st->evicted_tokens * bpt,
            (unsigned long long)st->entries_max, r->mean / 1e3,
            kv_sim_ttft_quantile(st, 0.5) / 1e3,
            kv_sim_ttft_quantile(st, 0.99) / 1e3, r->speed, r->qmean / 1e3,
            kv_sim_queued_quantile(st, 0.99) / 1e3, r->cap_bytes,
            (long long)r->cap_tokens);
    if (r->prefix_mean > 0 && r->mean > 0)
        fprintf(f, "%.4f", r->prefix_mean / r->mean);
    fprintf(f, ",%.6f,%.4f,%.4f\n", r->hs, r->e2e / 1e3, r->e2e_speed);
}

static void row_text(FILE *f, const struct row *r, int sweep)
{
    const struct kv_sim_stats *st = &r->st;
    char ld[32], sd[32], cb[32];   /* 2^64 tokens of 8e15 bytes: 21 chars */
    human(ld, sizeof ld, (double)st->loaded_tokens * r->bpt);
    human(sd, sizeof sd, (double)st->stored_tokens * r->bpt);
    human(cb, sizeof cb, r->cap_bytes);
    if (sweep)
        fprintf(f, "%8s ", cb);
    fprintf(f, "%-13s %9.4f %9.4f %14llu %8s %8s %10llu %9.2f %9.2f %7.2f "
            "%10.2f %9.4f %9.2f\n", kv_sim_policy_name(r->policy),
            rate(st->hit_tokens, st->prompt_tokens),
            rate(st->chunk_hits, st->chunk_slots),
            (unsigned long long)st->prefill_tokens, ld, sd,
            (unsigned long long)st->evictions, r->mean / 1e3,
            kv_sim_ttft_quantile(st, 0.99) / 1e3, r->speed, r->qmean / 1e3,
            r->hs, r->e2e / 1e3);
}

static void header(FILE *f, int format, int sweep)
{
    if (format == KV_CHUNK_SIM_JSON)
        ;                           /* no header: each object names its fields */
    else if (format == KV_CHUNK_SIM_CSV)
        fprintf(f, "policy,token_hit_rate,chunk_hit_rate,requests,"
                "prompt_tokens,hit_tokens,prefill_tokens,chunk_slots,"
                "chunk_hits,bytes_loaded,bytes_stored,bytes_rotated,"
                "evictions,bytes_evicted,entries_max,ttft_mean_ms,"
                "ttft_p50_ms,ttft_p99_ms,speedup_vs_none,queued_ttft_mean_ms,"
                "queued_ttft_p99_ms,capacity_bytes,capacity_tokens,"
                "speedup_vs_prefix,chunk_hit_rate_sys,e2e_mean_ms,"
                "e2e_speedup_vs_none\n");
    else
        fprintf(f, "%s%-13s %9s %9s %14s %8s %8s %10s %9s %9s %7s %10s "
                "%9s %9s\n", sweep ? "capacity " : "", "policy", "token_hit",
                "chunk_hit", "prefill_tokens", "loaded", "stored",
                "evictions", "ttft_ms", "p99_ms", "speedup", "queued_ms",
                "hit+sys", "e2e_ms");
}

int kv_chunk_sim_write(FILE *f, const struct kv_chunk_sim *cs,
                       struct kv_err *e)
{
    static const int order[KV_SIM_NPOLICIES] = {
        KV_SIM_NONE, KV_SIM_PREFIX, KV_SIM_PREFIX_LFU, KV_SIM_PREFIX_RADIX,
        KV_SIM_PREFIX_SORTED, KV_SIM_CHUNK, KV_SIM_CHUNK_LFU, KV_SIM_ORACLE
    };
    struct kv_sim_stats none;
    struct row r;
    double bpt = (double)cs->sim.bytes_per_token;
    int sweep = cs->n_caps > 1;
    if (!cs->n_units)
        return kv_err_set(e, "no replay to report");
    kv_sim_get(unit_for(cs, KV_SIM_NONE, -1), KV_SIM_NONE, &none);
    double none_mean = none.requests ? none.ttft_sum_us / none.requests : 0;
    double none_e2e = none.requests ? none.e2e_sum_us / none.requests : 0;
    header(f, cs->format, sweep);
    for (int c = 0; c < cs->n_caps; c++) {
        double prefix_mean = 0;
        if ((cs->policies >> KV_SIM_PREFIX) & 1u) {
            kv_sim_get(unit_for(cs, KV_SIM_PREFIX, c), KV_SIM_PREFIX, &r.st);
            prefix_mean = r.st.requests ? r.st.ttft_sum_us / r.st.requests
                                        : 0;
        }
        for (int q = 0; q < KV_SIM_NPOLICIES; q++) {
            int p = order[q];
            if (!((cs->policies >> p) & 1u))
                continue;
            kv_sim_get(unit_for(cs, p, c), p, &r.st);
            const struct kv_sim_stats *st = &r.st;
            r.policy = p;
            r.bpt = bpt;
            r.mean = st->requests ? st->ttft_sum_us / st->requests : 0;
            r.qmean = st->requests ? st->queued_sum_us / st->requests : 0;
            r.speed = r.mean > 0 ? none_mean / r.mean : 1.0;
            r.e2e = st->requests ? st->e2e_sum_us / st->requests : 0;
            r.e2e_speed = r.e2e > 0 ? none_e2e / r.e2e : 1.0;
            r.prefix_mean = prefix_mean;
            /* chunk hits counting the system prompt as one more chunk */
            r.hs = rate(st->chunk_hits + st->sys_hits,
                        st->chunk_slots + st->sys_slots);
            r.cap_bytes = (double)cs->caps[c] * bpt;
            r.cap_tokens = cs->caps[c];
            if (cs->format == KV_CHUNK_SIM_JSON) {
                if (row_json(f, &r) < 0)
                    return kv_err_set(e, "out of memory");
            } else if (cs->format == KV_CHUNK_SIM_CSV) {
                row_csv(f, &r);
            } else {
                row_text(f, &r, sweep);
            }
        }
    }
    return 0;
}
