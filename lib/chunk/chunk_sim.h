/* chunk_sim.h - kvchunk sim, sim gen and sim from-split around the trace
 * simulator (sim/sim.h): their options read and checked as the program
 * reads them, the replay of a trace through cache policies at one budget
 * or a sweep of budgets, spread over threads, and its report as a table,
 * CSV or JSON lines.  kvchunk sim and the Python package's kvchunk.sim,
 * sim_gen and sim_from_split all call these.
 *
 * Options are text as given on the command line, NULL where not given;
 * a refusal's message is the program's ("--tier: expected hbm, host, disk
 * or net, got 'x'").
 */
#ifndef KV_CHUNK_SIM_H
#define KV_CHUNK_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/err.h"
#include "sim/sim.h"

/* ---- kvchunk sim (the replay) ------------------------------------------ */

#define KV_CHUNK_SIM_MAX_CAPS 64

struct kv_chunk_sim_opts {
    const char *capacity_tokens, *capacity_bytes, *pool_bytes, *max_chunks,
               *rotate, *warmup, *policies, *block_size, *model_config,
               *layers, *kv_heads, *head_dim, *dtype, *chunk_context, *salt,
               *max_sessions, *us_per_token, *us_per_pair,
               *us_per_output_token, *tier, *bw_hbm, *bw_host, *bw_disk,
               *bw_net, *bw_rope, *jobs, *trace_format, *trace_block_size,
               *format,             /* -f text|json */
               *max_mem;            /* --max-mem (75% of RAM) */
    int miss_copy;                  /* --miss-copy given */
    int csv;                        /* --csv given */
};

/* The report's form: the table, --csv, or -f json (an object a row). */
enum { KV_CHUNK_SIM_TEXT = 0, KV_CHUNK_SIM_CSV, KV_CHUNK_SIM_JSON };

/* One replay instance: a budget (an index into caps; -1 for none and
 * oracle, which have no budget) and the policies it runs. */
struct kv_chunk_sim_unit {
    struct kv_sim *s;
    int cap;
    unsigned policies;
};

/* A replay: the options as read (kv_chunk_sim_load), then the replay
 * instances and the request count (kv_chunk_sim_run).  A loaded replay
 * is run once: running kv_chunk_sim_run twice on one struct is not
 * supported (load it again for another trace). */
struct kv_chunk_sim {
    unsigned policies;              /* asked for: mask of 1 << policy */
    struct kv_sim_opts sim;
    int64_t caps[KV_CHUNK_SIM_MAX_CAPS];   /* budgets in tokens */
    int n_caps;
    const char *tier;               /* "hbm", "host", "disk" or "net" */
    int trace_format;               /* KV_SIM_FORMAT_* */
    int64_t trace_block;            /* Mooncake: tokens per hash_id */
    int policies_given, block_given;
    int format;                     /* KV_CHUNK_SIM_* */
    int jobs;                       /* threads (-j 0: every core) */
    size_t max_mem;                 /* --max-mem in bytes */
    struct kv_chunk_sim_unit units[2 * KV_CHUNK_SIM_MAX_CAPS + 1];
    int n_units;
    uint64_t n_requests;            /* requests read */
};

/* Read and check o into *cs (zeroed first), in the program's order:
 * --policies, the model and numbers, the modes and budgets, the options
 * no policy given reads, the trace format, the report's form.  0, or -1
 * with e's message; every refusal here is a usage error (exit 2).
 * kv_chunk_sim_release frees what a later run makes. */
int kv_chunk_sim_load(struct kv_chunk_sim *cs,
                      const struct kv_chunk_sim_opts *o, struct kv_err *e);

/* Called after each batch of requests with the count read so far. */
typedef void (*kv_chunk_sim_progress_fn)(void *ctx, uint64_t n_read);

/* Replay the trace read from f (name: the trace's name in messages, as
 * kv_path_name gives it) through every policy and budget of cs, over
 * cs->jobs threads (the result does not depend on them); progress (may be
 * NULL) is called between batches.  0, or -1 with e's message and *usage
 * set: 1 for a policy or budget the trace refuses (a Mooncake trace has
 * no chunks; a budget under its block), 0 for a trace that cannot be
 * read, a segment over a budget, a --warmup that leaves nothing, a
 * request whose replay would take the tables over cs->max_mem (refused
 * before it is fed: "'t' line 2: replaying it takes about N bytes, more
 * than M bytes (--max-mem)"), or out of memory (exit 1). */
int kv_chunk_sim_run(struct kv_chunk_sim *cs, FILE *f, const char *name,
                     kv_chunk_sim_progress_fn progress, void *ctx,
                     int *usage, struct kv_err *e);

/* The report of a run to f in cs->format: a row per budget and policy
 * (none, prefix, prefix-lfu, prefix-radix, prefix-sorted, chunk,
 * chunk-lfu, oracle, those asked for).  0, or -1 out of memory. */
int kv_chunk_sim_write(FILE *f, const struct kv_chunk_sim *cs,
                       struct kv_err *e);

/* Bytes the replay instances hold now (kv_sim_mem of each). */
size_t kv_chunk_sim_mem(const struct kv_chunk_sim *cs);

/* Free the replay instances; safe on a zeroed or released struct. */
void kv_chunk_sim_release(struct kv_chunk_sim *cs);

/* ---- kvchunk sim gen ---------------------------------------------------- */

struct kv_chunk_sim_gen_opts {
    const char *seed, *requests, *docs, *topk, *zipf, *fresh, *order,
               *sys_variants, *tenants, *topics, *turns, *conversations,
               *rate, *doc_len, *sys_len, *q_len, *out_len;
};

/* The generator's options over its defaults (seed 1, 1000 requests,
 * 10000 documents, top-5, zipf 1.0, retrieval order, one system prompt
 * and tenant, 64 conversations, rate 1, lengths 512, 600, 40 and 128)
 * into *g, for kv_sim_gen.  0, or -1 with e's message (a usage error). */
int kv_chunk_sim_gen_load(const struct kv_chunk_sim_gen_opts *o,
                          struct kv_sim_gen_opts *g, struct kv_err *e);

/* ---- kvchunk sim from-split --------------------------------------------- */

struct kv_chunk_sim_split_opts {
    const char *rate, *tenant, *out_len;
};

/* --rate (default 1) and --out-len (default 128) into *rate and
 * *out_len.  0, or -1 with e's message (a usage error). */
int kv_chunk_sim_split_load(const struct kv_chunk_sim_split_opts *o,
                            double *rate, int64_t *out_len,
                            struct kv_err *e);

/* The trace of the kvchunk split output read from f (named name in
 * messages), after --tenant is checked: *out (malloc'd, the caller
 * frees it) and *n_out, untouched on failure.  0, or -1 with e's message
 * and *usage set: 1 for a refused --tenant, 0 for input refused. */
int kv_chunk_sim_split_run(const struct kv_chunk_sim_split_opts *o,
                           double rate, int64_t out_len, FILE *f,
                           const char *name, char **out, size_t *n_out,
                           int *usage, struct kv_err *e);

#endif
