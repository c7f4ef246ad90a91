/* kvchunk sim (replay): a trace through cache policies at byte budgets,
 * per policy hit rates, prefill tokens, bytes moved, evictions, TTFT. */
#include "kvchunk.h"

#define KV_SIM_MAX_CAPS 64

struct opts {
    unsigned policies;
    struct kv_sim_opts sim;
    int csv, json;
    int verbose, quiet;
    int jobs;
    const char *trace;
    const char *output;
    int64_t caps[KV_SIM_MAX_CAPS];   /* budgets in tokens, a sweep */
    int n_caps;
    const char *tier;
    int trace_format;                /* KV_SIM_FORMAT_* */
    int64_t trace_block;             /* Mooncake: tokens per hash_id */
    int policies_given;              /* -p was given */
    int block_given;                 /* -B was given */
};

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

/* One replay instance: a budget (index into caps, -1 for the
 * capacity-free policies none and oracle) and the policies it runs. */
struct unit {
    struct kv_sim *s;
    int cap;
    unsigned policies;
};

/* The unit holding policy p at budget c. */
static const struct kv_sim *unit_for(const struct unit *u, int n_units,
                                     int p, int c)
{
    for (int i = 0; i < n_units; i++)
        if (((u[i].policies >> p) & 1u) &&
            (u[i].cap == c || u[i].cap < 0))
            return u[i].s;
    return u[0].s;
}

/* v as the CSV prints it with prec decimals, read back: the JSON number
 * then equals the CSV's figure. */
static json_t *fixed(double v, int prec)
{
    char b[64];
    snprintf(b, sizeof b, "%.*f", prec, v);
    return json_real(strtod(b, NULL));
}

/* -f json: one row as an object, its fields named and rounded as in the
 * CSV (speedup_vs_prefix null where the CSV leaves it empty); 0 or -1 out
 * of memory. */
static int row_json(FILE *f, int p, const struct kv_sim_stats *st, double bpt,
                    double mean, double qmean, double speed, double pfx,
                    double hs, double e2e, double e2e_speed, double cap_bytes,
                    int64_t cap_tokens)
{
    json_t *o = json_object();
    if (!o)
        return -1;
#define SETI(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
#define SETF(k, v, d) json_object_set_new(o, k, fixed(v, d))
    json_object_set_new(o, "policy", json_string(kv_sim_policy_name(p)));
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
    SETF("ttft_mean_ms", mean / 1e3, 4);
    SETF("ttft_p50_ms", kv_sim_ttft_quantile(st, 0.5) / 1e3, 4);
    SETF("ttft_p99_ms", kv_sim_ttft_quantile(st, 0.99) / 1e3, 4);
    SETF("speedup_vs_none", speed, 4);
    SETF("queued_ttft_mean_ms", qmean / 1e3, 4);
    SETF("queued_ttft_p99_ms", kv_sim_queued_quantile(st, 0.99) / 1e3, 4);
    SETF("capacity_bytes", cap_bytes, 0);
    SETI("capacity_tokens", cap_tokens);
    if (pfx > 0 && mean > 0)
        SETF("speedup_vs_prefix", pfx / mean, 4);
    else
        json_object_set_new(o, "speedup_vs_prefix", json_null());
    SETF("chunk_hit_rate_sys", hs, 6);
    SETF("e2e_mean_ms", e2e / 1e3, 4);
    SETF("e2e_speedup_vs_none", e2e_speed, 4);
#undef SETI
#undef SETF
    return report_json(f, o);
}

/* Write the results: a row per budget and policy; 0 or the exit code. */
static int write_results(FILE *f, const struct opts *o, const struct unit *u,
                          int n_units)
{
    struct kv_sim_stats none, st;
    double bpt = (double)o->sim.bytes_per_token;
    int sweep = o->n_caps > 1;
    kv_sim_get(unit_for(u, n_units, KV_SIM_NONE, -1), KV_SIM_NONE, &none);
    double none_mean = none.requests ? none.ttft_sum_us / none.requests : 0;
    double none_e2e = none.requests ? none.e2e_sum_us / none.requests : 0;
    if (o->json)
        ;                           /* no header: each object names its fields */
    else if (o->csv)
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
    static const int order[KV_SIM_NPOLICIES] = {
        KV_SIM_NONE, KV_SIM_PREFIX, KV_SIM_PREFIX_LFU, KV_SIM_PREFIX_RADIX,
        KV_SIM_PREFIX_SORTED, KV_SIM_CHUNK, KV_SIM_CHUNK_LFU, KV_SIM_ORACLE
    };
    for (int c = 0; c < o->n_caps; c++) {
        double cap_bytes = (double)o->caps[c] * bpt, prefix_mean = 0;
        if ((o->policies >> KV_SIM_PREFIX) & 1u) {
            kv_sim_get(unit_for(u, n_units, KV_SIM_PREFIX, c), KV_SIM_PREFIX,
                       &st);
            prefix_mean = st.requests ? st.ttft_sum_us / st.requests : 0;
        }
        for (int q = 0; q < KV_SIM_NPOLICIES; q++) {
            int p = order[q];
            if (!((o->policies >> p) & 1u))
                continue;
            kv_sim_get(unit_for(u, n_units, p, c), p, &st);
            double mean = st.requests ? st.ttft_sum_us / st.requests : 0;
            double qmean = st.requests ? st.queued_sum_us / st.requests : 0;
            double speed = mean > 0 ? none_mean / mean : 1.0;
            double e2e = st.requests ? st.e2e_sum_us / st.requests : 0;
            /* chunk hits counting the system prompt as one more chunk */
            double hs = rate(st.chunk_hits + st.sys_hits,
                             st.chunk_slots + st.sys_slots);
            if (o->json) {
                if (row_json(f, p, &st, bpt, mean, qmean, speed, prefix_mean,
                             hs, e2e, e2e > 0 ? none_e2e / e2e : 1.0,
                             cap_bytes, o->caps[c]) < 0)
                    return kv_fail("out of memory");
            } else if (o->csv) {
                fprintf(f, "%s,%.6f,%.6f,%llu,%llu,%llu,%llu,%llu,%llu,%.0f,"
                        "%.0f,%.0f,%llu,%.0f,%llu,%.4f,%.4f,%.4f,%.4f,%.4f,"
                        "%.4f,%.0f,%lld,",
                        kv_sim_policy_name(p),
                        rate(st.hit_tokens, st.prompt_tokens),
                        rate(st.chunk_hits, st.chunk_slots),
                        (unsigned long long)st.requests,
                        (unsigned long long)st.prompt_tokens,
                        (unsigned long long)st.hit_tokens,
                        (unsigned long long)st.prefill_tokens,
                        (unsigned long long)st.chunk_slots,
                        (unsigned long long)st.chunk_hits,
                        (double)st.loaded_tokens * bpt,
                        (double)st.stored_tokens * bpt,
                        (double)st.rotated_tokens * bpt,
                        (unsigned long long)st.evictions,
                        (double)st.evicted_tokens * bpt,
                        (unsigned long long)st.entries_max,
                        mean / 1e3, kv_sim_ttft_quantile(&st, 0.5) / 1e3,
                        kv_sim_ttft_quantile(&st, 0.99) / 1e3, speed,
                        qmean / 1e3, kv_sim_queued_quantile(&st, 0.99) / 1e3,
                        cap_bytes, (long long)o->caps[c]);
                if (prefix_mean > 0 && mean > 0)
                    fprintf(f, "%.4f", prefix_mean / mean);
                fprintf(f, ",%.6f,%.4f,%.4f\n", hs, e2e / 1e3,
                        e2e > 0 ? none_e2e / e2e : 1.0);
            } else {
                char ld[16], sd[16], cb[16];
                human(ld, sizeof ld, (double)st.loaded_tokens * bpt);
                human(sd, sizeof sd, (double)st.stored_tokens * bpt);
                human(cb, sizeof cb, cap_bytes);
                if (sweep)
                    fprintf(f, "%8s ", cb);
                fprintf(f, "%-13s %9.4f %9.4f %14llu %8s %8s %10llu %9.2f "
                        "%9.2f %7.2f %10.2f %9.4f %9.2f\n",
                        kv_sim_policy_name(p),
                        rate(st.hit_tokens, st.prompt_tokens),
                        rate(st.chunk_hits, st.chunk_slots),
                        (unsigned long long)st.prefill_tokens, ld, sd,
                        (unsigned long long)st.evictions, mean / 1e3,
                        kv_sim_ttft_quantile(&st, 0.99) / 1e3, speed,
                        qmean / 1e3, hs, e2e / 1e3);
            }
        }
    }
    return 0;
}

/* The replay: the trace is read in batches on the calling thread; each
 * batch then goes through every unit (a budget of the sweep and a group of
 * policies: prefix caching, chunk caching, and the budget-free none and
 * oracle), the units spread over -j threads.  Each unit keeps its own
 * conversations, so the results do not depend on -j. */
#define BATCH 4096

struct batch {
    struct kv_sim_req *req;
    size_t n;
    struct kv_sim_seg *seg;
    size_t n_seg, cap_seg;
};

struct feed {
    struct unit *u;
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

/* Open the trace reader in the format asked for (or the one its first
 * line shows).  A Mooncake trace has no chunks: its policies are the
 * prefix ones (by default prefix, prefix-lfu and prefix-radix). */
static int open_trace(struct opts *o, FILE *f, struct kv_sim_reader **rd)
{
    const unsigned chunky = (1u << KV_SIM_PREFIX_SORTED) |
                            (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU) |
                            (1u << KV_SIM_ORACLE);
    struct kv_err e;
    int fmt;
    if (kv_sim_reader_open(rd, f, kv_path_name(o->trace, 0), &e) < 0 ||
        kv_sim_reader_set_format(*rd, o->trace_format, o->trace_block,
                                 &e) < 0 ||
        kv_sim_reader_format(*rd, &fmt, &e) < 0)
        return kv_fail_err(&e);
    if (fmt == KV_SIM_FORMAT_MOONCAKE) {
        if (!o->block_given)
            o->sim.block_size = o->trace_block;   /* the trace's blocks */
        if (!o->policies_given)
            o->policies = (1u << KV_SIM_NONE) | (1u << KV_SIM_PREFIX) |
                          (1u << KV_SIM_PREFIX_LFU) |
                          (1u << KV_SIM_PREFIX_RADIX);
        for (int p = 0; p < KV_SIM_NPOLICIES; p++)
            if ((o->policies & chunky) >> p & 1u)
                return kv_usage("policy '%s' needs retrieved chunks; a "
                                "Mooncake trace has none (use none, prefix, "
                                "prefix-lfu, prefix-radix)",
                                kv_sim_policy_name(p));
        o->sim.policies = o->policies | (1u << KV_SIM_NONE);
    }
    /* the block size is known now: a block pool needs room for one */
    for (int c = 0; c < o->n_caps; c++)
        if ((o->policies & ((1u << KV_SIM_PREFIX) |
                            (1u << KV_SIM_PREFIX_SORTED) |
                            (1u << KV_SIM_PREFIX_LFU))) &&
            o->caps[c] < o->sim.block_size)
            return kv_usage("capacity of %lld tokens is smaller than one "
                            "block of %lld", (long long)o->caps[c],
                            (long long)o->sim.block_size);
    return 0;
}

/* -v: requests, time, replays and memory, then each budget in tokens. */
static void report_verbose(const struct opts *o, struct unit *u, int n_units,
                           uint64_t n, double t0)
{
    struct rusage ru;
    size_t mem = 0;
    for (int i = 0; i < n_units; i++)
        mem += kv_sim_mem(u[i].s);
    getrusage(RUSAGE_SELF, &ru);
    kv_warn("%llu requests in %.3f s (%d replays, -j %d); simulator "
            "tables %.1f MiB, max RSS %.1f MiB", (unsigned long long)n,
            kv_now() - t0, n_units, o->jobs, (double)mem / 1048576.0,
            ru.ru_maxrss / 1024.0);
    for (int c = 0; c < o->n_caps; c++)
        kv_warn("capacity %.0f bytes = %lld tokens of %llu bytes (%lld "
                "blocks of %lld)",
                (double)o->caps[c] * (double)o->sim.bytes_per_token,
                (long long)o->caps[c],
                (unsigned long long)o->sim.bytes_per_token,
                (long long)(o->caps[c] / o->sim.block_size),
                (long long)o->sim.block_size);
}

static int run(struct opts *o)
{
    struct kv_err e, ue[2 * KV_SIM_MAX_CAPS + 1];
    struct kv_sim_reader *rd = NULL;
    struct unit u[2 * KV_SIM_MAX_CAPS + 1];
    int urc[2 * KV_SIM_MAX_CAPS + 1];
    int n_units = 0;
    struct kv_sim_opts check = o->sim;
    struct kv_sim_req req;
    struct kv_progress pr;
    struct batch bt;
    struct stat sb;
    uint64_t n = 0, total = 0;
    double t0 = kv_now();
    int rc = 0, got = 1;
    const unsigned none = 1u << KV_SIM_NONE;
    const unsigned groups[3] = {
        (1u << KV_SIM_PREFIX) | (1u << KV_SIM_PREFIX_SORTED) |
            (1u << KV_SIM_PREFIX_RADIX) | (1u << KV_SIM_PREFIX_LFU),
        (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU),
        none | (1u << KV_SIM_ORACLE),
    };
    FILE *f = kv_open_in(o->trace, &e);
    if (!f)
        return kv_fail_err(&e);
    memset(&bt, 0, sizeof bt);
    memset(u, 0, sizeof u);
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode))
        total = (uint64_t)sb.st_size;
    if ((rc = open_trace(o, f, &rd)))
        goto done;
    check.policies = o->sim.policies;
    /* the units */
    for (int g = 0; g < 3; g++) {
        unsigned pol = o->policies & groups[g];
        if (g == 2)
            pol |= none;   /* always: the speedups need it */
        if (!pol)
            continue;
        for (int c = 0; c < (g == 2 ? 1 : o->n_caps); c++) {
            struct kv_sim_opts so = o->sim;
            so.policies = pol | none;
            so.capacity_tokens = o->caps[g == 2 ? 0 : c];
            u[n_units].cap = g == 2 ? -1 : c;
            u[n_units].policies = pol;
            if (kv_sim_create(&u[n_units].s, &so, &e) < 0) {
                rc = kv_fail_err(&e);
                goto done;
            }
            urc[n_units] = 0;
            n_units++;
        }
    }
    /* every segment must fit the smallest budget */
    for (int c = 0; c < o->n_caps; c++)
        if (o->caps[c] < check.capacity_tokens)
            check.capacity_tokens = o->caps[c];
    bt.req = malloc(BATCH * sizeof *bt.req);
    if (!bt.req) {
        rc = kv_fail("out of memory");
        goto done;
    }
    kv_progress_start(&pr, "replaying", o->quiet);
    while (got > 0) {
        bt.n = bt.n_seg = 0;
        while (bt.n < BATCH && (got = kv_sim_reader_next(rd, &req, &e)) > 0) {
            if (kv_sim_check(&check, &req, &e) < 0) {
                got = -2;
                break;
            }
            if (batch_add(&bt, &req) < 0) {
                kv_err_set(&e, "out of memory");
                got = -3;
                break;
            }
        }
        if (got < 0)
            break;
        batch_seal(&bt);
        struct feed fd = { u, &bt, urc, ue };
        kv_parallel_for((size_t)n_units, o->jobs, feed_unit, &fd);
        for (int i = 0; i < n_units; i++)
            if (urc[i] < 0) {
                e = ue[i];
                got = -3;
            }
        n += bt.n;
        kv_progress_update(&pr, total ? (uint64_t)ftello(f) : n, total);
    }
    kv_progress_end(&pr);
    if (got == -2) {
        /* kv_sim_check names the line; add the file */
        rc = kv_fail("'%s' %s", kv_path_name(o->trace, 0), e.msg);
        goto done;
    }
    if (got < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    if (o->sim.warmup && n <= o->sim.warmup) {
        rc = kv_fail("'%s': --warmup %llu leaves nothing to count: the "
                     "trace has %llu requests", kv_path_name(o->trace, 0),
                     (unsigned long long)o->sim.warmup,
                     (unsigned long long)n);
        goto done;
    }
    if (o->verbose)
        report_verbose(o, u, n_units, n, t0);
    {
        struct kv_out ko;
        if (kv_out_open(&ko, o->output, &e) < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
        if ((rc = write_results(ko.f, o, u, n_units))) {
            kv_out_abort(&ko);
            goto done;
        }
        if (o->output) {
            if (kv_out_commit(&ko, &e) < 0) {
                rc = kv_fail_err(&e);
                goto done;
            }
        }
        rc = kv_close_stdout();
    }
done:
    for (int i = 0; i < n_units; i++)
        kv_sim_free(u[i].s);
    free(bt.req);
    free(bt.seg);
    kv_sim_reader_free(rd);
    kv_close_in(f);
    return rc;
}

/* Parse a comma-separated list of budgets into o->caps (tokens). */
static int parse_caps(struct opts *o, const char *list, const char *opt,
                      int64_t B)
{
    int in_bytes = strcmp(opt, "--capacity-tokens") != 0;
    const char *p = list;
    struct kv_err e;
    o->n_caps = 0;
    for (;;) {
        char buf[64];
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        size_t v;
        if (len == 0 || len >= sizeof buf)
            return kv_usage("%s: expected a size or a comma-separated list, "
                            "got '%s'", opt, list);
        if (o->n_caps == KV_SIM_MAX_CAPS)
            return kv_usage("%s: at most %d budgets", opt, KV_SIM_MAX_CAPS);
        memcpy(buf, p, len);
        buf[len] = 0;
        if (!strcmp(buf, "inf")) {
            v = (size_t)1 << 50;     /* unbounded: more than any trace */
        } else if (kv_parse_size(buf, &v, &e) < 0) {
            return kv_usage("%s: %s", opt, e.msg);
        } else if (in_bytes) {
            if (v < o->sim.bytes_per_token)
                return kv_usage("%s: %zu bytes is less than one token (%llu "
                                "bytes)", opt, v,
                                (unsigned long long)o->sim.bytes_per_token);
            v /= o->sim.bytes_per_token;
        }
        if (v < 1 || v > (size_t)1 << 50)
            return kv_usage("%s: expected a count from 1 to 2^50 tokens, got "
                            "'%s'", opt, buf);
        if ((o->policies & ((1u << KV_SIM_PREFIX) |
                            (1u << KV_SIM_PREFIX_SORTED) |
                            (1u << KV_SIM_PREFIX_LFU))) &&
            (int64_t)v < B)
            return kv_usage("capacity of %zu tokens is smaller than one block "
                            "of %lld", v, (long long)B);
        o->caps[o->n_caps++] = (int64_t)v;
        if (!c)
            break;
        p = c + 1;
    }
    o->sim.capacity_tokens = o->caps[0];
    return 0;
}

/* --model-config for sim: the model whose bytes per token the budgets
 * are divided by (kv_model_bytes_per_token: K and V per head, or an MLA
 * model's latent), and its element size when the file names a dtype. */
static int sim_model_config(const char *path, struct kv_model *m, int64_t *elt)
{
    struct kv_err e;
    if (kv_model_load(path, 0, m, &e) < 0)
        return kv_usage("--model-config: %s", e.msg);
    if (m->n_layers > 100000 || m->n_kv_heads > 100000 || m->head_dim > 100000 ||
        m->kv_lora_rank + m->qk_rope_head_dim > 100000)
        return kv_usage("--model-config: %s: geometry out of range", path);
    if (m->have_dtype)
        *elt = (int64_t)kv_dtype_size(m->dtype);
    return 0;
}

struct replay_args {
    struct arg_lit *help, *version, *csv, *quiet, *verbose, *miss_copy;
    struct arg_str *cap_t, *cap_b, *pool_b, *max_chunks, *rotate, *warmup,
                   *us_out, *pol, *bs, *mcfg, *layers, *heads, *hdim,
                   *dtype, *ctx, *salt, *maxses, *us_tok, *us_pair, *tier,
                   *bw_hbm, *bw_host, *bw_disk, *bw_net, *bw_rope, *jobs,
                   *tfmt, *tbs, *fmt;
    struct arg_file *out, *trace;
    struct arg_end *end;
};

/* sim's options, in the order --help lists them (each default in its
 * glossary); returns the count. */
static int replay_args_make(struct replay_args *a, void **t)
{
    int n = 0;
    t[n++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[n++] = a->version = arg_lit0(NULL, "version", "print the version");
    t[n++] = a->cap_t = arg_str0(NULL, "capacity-tokens", "N[,N..]",
                                 "cache budget in tokens; a list sweeps");
    t[n++] = a->cap_b = arg_str0(NULL, "capacity-bytes", "SIZE[,SIZE..]",
                                 "cache budget in bytes, K/M/G/T "
                                 "suffixes (16G); a list sweeps");
    t[n++] = a->pool_b = arg_str0(NULL, "pool-bytes", "SIZE[,SIZE..]",
                                  "the same, as a chunk pool's size: "
                                  "tokens = SIZE / bytes per token of all "
                                  "layers");
    t[n++] = a->max_chunks = arg_str0(NULL, "max-chunks", "N",
                                      "chunk, chunk-lfu: at most N "
                                      "resident entries (no limit)");
    t[n++] = a->rotate = arg_str0(NULL, "rotate", "MODE",
                                  "moved: a hit re-rotates K when it "
                                  "lands elsewhere; always: every hit "
                                  "does (moved)");
    t[n++] = a->miss_copy = arg_lit0(NULL, "miss-copy",
                                     "a chunk miss is computed into the "
                                     "cache, then copied like a hit");
    t[n++] = a->warmup = arg_str0(NULL, "warmup", "N",
                                  "the first N requests fill the caches "
                                  "and are not counted (0)");
    t[n++] = a->pol = arg_str0("p", "policies", "LIST",
                               "none,prefix,prefix-radix,prefix-sorted,"
                               "chunk,chunk-lfu,oracle (none,prefix,"
                               "chunk,oracle)");
    t[n++] = a->csv = arg_lit0(NULL, "csv", "CSV with a header line");
    t[n++] = a->fmt = arg_str0("f", "format", "text|json",
                               "json: an object a row, fields named as in "
                               "the CSV (text)");
    t[n++] = a->bs = arg_str0("B", "block-size", "N",
                              "prefix caching block size (16; on a "
                              "Mooncake trace, its own)");
    t[n++] = a->mcfg = arg_str0(NULL, "model-config", "FILE",
                                "layers, KV heads, head dim and dtype "
                                "from the model's config.json (an MLA "
                                "model: its latent)");
    t[n++] = a->layers = arg_str0(NULL, "layers", "L", "layers (32)");
    t[n++] = a->heads = arg_str0(NULL, "kv-heads", "H", "KV heads (8)");
    t[n++] = a->hdim = arg_str0(NULL, "head-dim", "D",
                                "head dimension (128)");
    t[n++] = a->dtype = arg_str0(NULL, "dtype", "T",
                                 "KV dtype: fp8, f16, bf16, f32 (bf16)");
    t[n++] = a->ctx = arg_str0(NULL, "chunk-context", "MODE",
                               "sys: chunk KV depends on the system "
                               "prompt; isolated (or none): it does not "
                               "(sys)");
    t[n++] = a->salt = arg_str0(NULL, "salt", "MODE",
                                "tenant: tenants never share entries; "
                                "none (none)");
    t[n++] = a->maxses = arg_str0(NULL, "max-sessions", "N",
                                  "conversations remembered (100000)");
    t[n++] = a->us_tok = arg_str0(NULL, "us-per-token", "A",
                                  "prefill microseconds per computed "
                                  "token (80)");
    t[n++] = a->us_pair = arg_str0(NULL, "us-per-pair", "B",
                                   "prefill microseconds per computed "
                                   "token and key it attends to "
                                   "(0.0035)");
    t[n++] = a->us_out = arg_str0(NULL, "us-per-output-token", "C",
                                  "decode microseconds per output token "
                                  "after the first, for e2e (0)");
    t[n++] = a->tier = arg_str0(NULL, "tier", "TIER",
                                "where chunk KV is loaded from: hbm, "
                                "host, disk, net (hbm)");
    t[n++] = a->bw_hbm = arg_str0(NULL, "bw-hbm", "GB/s",
                                  "device copy bandwidth (1000)");
    t[n++] = a->bw_host = arg_str0(NULL, "bw-host", "GB/s",
                                   "host-to-device bandwidth (25)");
    t[n++] = a->bw_disk = arg_str0(NULL, "bw-disk", "GB/s",
                                   "disk read bandwidth (5)");
    t[n++] = a->bw_net = arg_str0(NULL, "bw-net", "GB/s",
                                  "network store bandwidth (3)");
    t[n++] = a->bw_rope = arg_str0(NULL, "bw-rope", "GB/s",
                                   "K re-rotation bandwidth (200)");
    t[n++] = a->out = arg_file0("o", "output", "FILE",
                                "write the results to FILE");
    t[n++] = a->jobs = arg_str0("j", "jobs", "N", "threads (0 = all cores)");
    t[n++] = a->quiet = arg_lit0("q", "quiet", "no progress line");
    t[n++] = a->verbose = arg_lit0("v", "verbose",
                                   "timings and memory on stderr");
    t[n++] = a->tfmt = arg_str0(NULL, "trace-format", "FMT",
                                "auto, native or mooncake (auto: the first "
                                "line tells)");
    t[n++] = a->tbs = arg_str0(NULL, "trace-block-size", "N",
                               "mooncake: tokens per hash_id (512)");
    t[n++] = a->trace = arg_filen(NULL, NULL, "TRACE", 0, 1,
                                  "trace file (default stdin)");
    t[n++] = a->end = arg_end(20);
    return n;
}

/* Bytes per token of a KV element type named by --dtype: 1, 2 or 4, or 0. */
static int64_t replay_elt(const char *d)
{
    if (!strcmp(d, "fp8") || !strcmp(d, "fp8e4m3") || !strcmp(d, "u8") ||
        !strcmp(d, "i8"))
        return 1;
    if (!strcmp(d, "f16") || !strcmp(d, "bf16") || !strcmp(d, "float16") ||
        !strcmp(d, "bfloat16"))
        return 2;
    if (!strcmp(d, "f32") || !strcmp(d, "float32"))
        return 4;
    return 0;
}

/* The numbers: model geometry (bytes per token), block size, sessions,
 * jobs, costs and the bandwidths of the four tiers. */
static int replay_numbers(const struct replay_args *a, struct opts *o,
                          double bw[4], int64_t *B, int64_t *nj)
{
    int64_t ms = 100000, elt = 2;
    int64_t wu = 0;
    int rc;
    struct kv_model m;
    /* without a config: the Llama-3.1-8B geometry, 32 x 8 x 128 */
    memset(&m, 0, sizeof m);
    m.n_layers = 32;
    m.n_kv_heads = 8;
    m.head_dim = 128;
    if (a->mcfg->count && (rc = sim_model_config(a->mcfg->sval[0], &m, &elt)))
        return rc;
    /* an MLA model caches one latent row per layer: it has no KV heads or
     * head dim that an option could set */
    if (m.kv_lora_rank && (a->heads->count || a->hdim->count))
        return kv_usage("%s: '%s' is an MLA model, whose cache holds %lld "
                        "latent values per token and layer, not KV heads",
                        a->heads->count ? "--kv-heads" : "--head-dim",
                        a->mcfg->sval[0],
                        (long long)(m.kv_lora_rank + m.qk_rope_head_dim));
    if ((rc = kv_opt_i64(a->bs, "--block-size", 1, 1 << 20, B)) ||
        (rc = kv_opt_i64(a->layers, "--layers", 1, 100000, &m.n_layers)) ||
        (rc = kv_opt_i64(a->heads, "--kv-heads", 1, 100000, &m.n_kv_heads)) ||
        (rc = kv_opt_i64(a->hdim, "--head-dim", 1, 100000, &m.head_dim)) ||
        (rc = kv_opt_i64(a->maxses, "--max-sessions", 1, 1000000000, &ms)) ||
        (rc = kv_opt_i64(a->jobs, "-j", 0, 1024, nj)) ||
        (rc = opt_f64(a->us_tok, "--us-per-token", 0, 1e12,
                      &o->sim.cost.us_token)) ||
        (rc = opt_f64(a->us_pair, "--us-per-pair", 0, 1e12,
                      &o->sim.cost.us_pair)) ||
        (rc = opt_f64(a->us_out, "--us-per-output-token", 0, 1e12,
                      &o->sim.cost.us_decode)) ||
        (rc = kv_opt_i64(a->max_chunks, "--max-chunks", 1, INT32_MAX,
                         &o->sim.max_chunks)) ||
        (rc = kv_opt_i64(a->warmup, "--warmup", 0, INT64_MAX, &wu)) ||
        (rc = opt_f64(a->bw_hbm, "--bw-hbm", 1e-9, 1e12, &bw[0])) ||
        (rc = opt_f64(a->bw_host, "--bw-host", 1e-9, 1e12, &bw[1])) ||
        (rc = opt_f64(a->bw_disk, "--bw-disk", 1e-9, 1e12, &bw[2])) ||
        (rc = opt_f64(a->bw_net, "--bw-net", 1e-9, 1e12, &bw[3])) ||
        (rc = opt_f64(a->bw_rope, "--bw-rope", 1e-9, 1e12,
                      &o->sim.cost.bw_rope)))
        return rc;
    if (a->dtype->count && !(elt = replay_elt(a->dtype->sval[0])))
        return kv_usage("--dtype: expected fp8, f16, bf16 or f32, got '%s'",
                        a->dtype->sval[0]);
    o->sim.bytes_per_token = (uint64_t)kv_model_bytes_per_token(&m, (size_t)elt); /* <= 8e15 */
    o->sim.block_size = *B;
    o->sim.max_sessions = (size_t)ms;
    o->sim.warmup = (uint64_t)wu;
    return 0;
}

/* The words: chunk context, salt, tier (and its bandwidth), budgets. */
static int replay_modes(const struct replay_args *a, struct opts *o,
                        const double bw[4], int64_t B)
{
    static const char *const tiers[4] = { "hbm", "host", "disk", "net" };
    const char *cx = a->ctx->count ? a->ctx->sval[0] : "sys";
    const char *st = a->salt->count ? a->salt->sval[0] : "none";
    int ti = 0;
    if (!strcmp(cx, "sys"))
        o->sim.ctx_sys = 1;
    else if (!strcmp(cx, "isolated") || !strcmp(cx, "none"))
        o->sim.ctx_sys = 0;
    else
        return kv_usage("--chunk-context: expected sys or isolated "
                        "(none), got '%s'", cx);
    if (!strcmp(st, "tenant"))
        o->sim.salt_tenant = 1;
    else if (strcmp(st, "none"))
        return kv_usage("--salt: expected none or tenant, got '%s'", st);
    if (a->tier->count) {
        for (ti = 0; ti < 4 && strcmp(a->tier->sval[0], tiers[ti]); ti++)
            ;
        if (ti == 4)
            return kv_usage("--tier: expected hbm, host, disk or net, got "
                            "'%s'", a->tier->sval[0]);
    }
    o->sim.cost.bw_load = bw[ti];
    o->tier = tiers[ti];
    if (a->rotate->count) {
        if (!strcmp(a->rotate->sval[0], "always"))
            o->sim.rotate_always = 1;
        else if (strcmp(a->rotate->sval[0], "moved"))
            return kv_usage("--rotate: expected moved or always, got '%s'",
                            a->rotate->sval[0]);
    }
    o->sim.miss_copy = a->miss_copy->count > 0;
    if (a->cap_t->count + a->cap_b->count + a->pool_b->count > 1)
        return kv_usage("--capacity-tokens, --capacity-bytes and "
                        "--pool-bytes: give one");
    if (a->cap_t->count)
        return parse_caps(o, a->cap_t->sval[0], "--capacity-tokens", B);
    if (a->pool_b->count)
        return parse_caps(o, a->pool_b->sval[0], "--pool-bytes", B);
    return parse_caps(o, a->cap_b->count ? a->cap_b->sval[0] : "16G",
                      "--capacity-bytes", B);
}

/* --trace-format, --trace-block-size */
static int trace_options(const struct replay_args *a, struct opts *o)
{
    static const char *const fmts[3] = { "auto", "native", "mooncake" };
    int rc;
    o->trace_block = 512;
    o->block_given = a->bs->count > 0;
    if ((rc = kv_opt_i64(a->tbs, "--trace-block-size", 1, 1 << 20,
                         &o->trace_block)))
        return rc;
    if (!a->tfmt->count)
        return 0;
    for (int i = 0; i < 3; i++)
        if (!strcmp(a->tfmt->sval[0], fmts[i])) {
            o->trace_format = i;     /* KV_SIM_FORMAT_* in this order */
            return 0;
        }
    return kv_usage("--trace-format: expected auto, native or mooncake, got "
                    "'%s'", a->tfmt->sval[0]);
}

/* Options no selected policy reads are refused, naming the option: the
 * chunk scheme's (--rotate, --miss-copy, --tier, --bw-rope,
 * --chunk-context) need chunk, chunk-lfu or oracle; --max-chunks chunk or
 * chunk-lfu; -B a block pool (prefix, prefix-sorted, prefix-lfu); a
 * bandwidth only its --tier; a budget a policy other than none and
 * oracle. */
static int replay_unused(const struct replay_args *a, unsigned pol)
{
    unsigned chunk = (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU),
             loads = chunk | (1u << KV_SIM_ORACLE),
             blocks = (1u << KV_SIM_PREFIX) | (1u << KV_SIM_PREFIX_SORTED) |
                      (1u << KV_SIM_PREFIX_LFU);
    static const char *const tiers[4] = { "hbm", "host", "disk", "net" };
    const struct {
        const struct arg_str *s;
        const struct arg_lit *l;
        const char *name;
        unsigned need;
        const char *what;
    } opt[] = {
        { a->rotate, NULL, "--rotate", loads, "chunk, chunk-lfu or oracle" },
        { NULL, a->miss_copy, "--miss-copy", loads, "chunk, chunk-lfu or oracle" },
        { a->tier, NULL, "--tier", loads, "chunk, chunk-lfu or oracle" },
        { a->bw_rope, NULL, "--bw-rope", loads, "chunk, chunk-lfu or oracle" },
        { a->ctx, NULL, "--chunk-context", loads, "chunk, chunk-lfu or oracle" },
        { a->max_chunks, NULL, "--max-chunks", chunk, "chunk or chunk-lfu" },
        { a->bs, NULL, "-B", blocks, "prefix, prefix-sorted or prefix-lfu" },
    };
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if ((opt[i].s ? opt[i].s->count : opt[i].l->count) && !(pol & opt[i].need))
            return kv_usage("%s: no policy given reads it (it applies to %s)",
                            opt[i].name, opt[i].what);
    const struct arg_str *caps[3] = { a->cap_t, a->cap_b, a->pool_b };
    static const char *const cap_names[3] = { "--capacity-tokens", "--capacity-bytes",
                                              "--pool-bytes" };
    for (int i = 0; i < 3; i++)
        if (caps[i]->count && !(pol & ~((1u << KV_SIM_NONE) | (1u << KV_SIM_ORACLE))))
            return kv_usage("%s: no policy given has a budget (none and oracle have "
                            "none)", cap_names[i]);
    const struct arg_str *bw[4] = { a->bw_hbm, a->bw_host, a->bw_disk, a->bw_net };
    const char *tier = a->tier->count ? a->tier->sval[0] : "hbm";
    for (int i = 0; i < 4; i++) {
        if (!bw[i]->count)
            continue;
        if (!(pol & loads))
            return kv_usage("--bw-%s: no policy given reads it (it applies to chunk, "
                            "chunk-lfu or oracle)", tiers[i]);
        if (strcmp(tier, tiers[i]))
            return kv_usage("--bw-%s: chunk KV is loaded from %s (--tier), at --bw-%s",
                            tiers[i], tier, tier);
    }
    return 0;
}

int cmd_sim_replay(int argc, char **argv)
{
    struct replay_args a;
    void *table[40];
    int n = replay_args_make(&a, table);
    struct opts o;
    struct kv_err e;
    int64_t B = 16, nj = 0;
    double bw[4] = { 1000, 25, 5, 3 };
    int rc;

    kv_setprogname("kvchunk sim");
    memset(&o, 0, sizeof o);
    o.policies = (1u << KV_SIM_NONE) | (1u << KV_SIM_PREFIX) |
                 (1u << KV_SIM_CHUNK) | (1u << KV_SIM_ORACLE);
    o.sim.cost = (struct kv_sim_cost){ 80, 0.0035, 1000, 200, 0 };
    rc = kv_arg_parse(table, argc, argv, a.help, a.version, a.end,
                      "\nReplay a request trace through cache policies at one "
                      "byte budget and print, per policy, hit rates, prefill "
                      "tokens, bytes moved, evictions and modelled TTFT.",
                      "Subcommands: 'kvchunk sim gen' writes a synthetic "
                      "trace, 'kvchunk sim from-split' converts 'kvchunk "
                      "split' output.  See man 1 kvchunk.");
    if (rc >= 0)
        goto done;
    if (a.pol->count &&
        kv_sim_policy_parse(a.pol->sval[0], &o.policies, &e) < 0) {
        rc = kv_usage("--policies: %s", e.msg);
        goto done;
    }
    if ((rc = replay_numbers(&a, &o, bw, &B, &nj)) ||
        (rc = replay_modes(&a, &o, bw, a.bs->count ? B : 1)) ||
        (rc = replay_unused(&a, o.policies)))
        goto done;
    o.sim.policies = o.policies | (1u << KV_SIM_NONE);
    o.policies_given = a.pol->count > 0;
    if ((rc = trace_options(&a, &o)))
        goto done;
    o.csv = a.csv->count > 0;
    if ((rc = report_format(a.fmt, &o.json)))
        goto done;
    if (o.csv && o.json) {
        rc = kv_usage("--csv and -f json: choose one");
        goto done;
    }
    o.quiet = a.quiet->count > 0;
    o.verbose = a.verbose->count > 0;
    o.jobs = nj ? (int)nj : kv_nproc();
    o.trace = a.trace->count ? a.trace->filename[0] : NULL;
    o.output = a.out->count ? a.out->filename[0] : NULL;
    rc = run(&o);
done:
    arg_freetable(table, (size_t)n);
    return rc;
}
