/* sim.h - trace-driven simulation of KV caching for retrieval-augmented
 * prompts: the trace format (reader and generator), the conversion of
 * `kvchunk split` output into a trace, and a replay of one trace through
 * several cache policies at the same byte budget (see man 1 kvchunk,
 * "Trace simulation").
 *
 * A trace is text, one request per line, whitespace-separated fields:
 *
 *     TIME TENANT SYS CHUNKS QUESTION OUTPUT [SESSION]
 *
 *   TIME      arrival time in seconds (>= 0, never decreasing)
 *   TENANT    a name, or '-'
 *   SYS       the system prompt: ID:LEN, token ids T/T/T, or '-' (none)
 *   CHUNKS    the retrieved chunks in prompt order, comma-separated, each
 *             ID:LEN or T/T/T; '-' for none
 *   QUESTION  question length in tokens (>= 0)
 *   OUTPUT    output length in tokens (>= 0)
 *   SESSION   optional conversation name: the request continues that
 *             conversation, its prompt is the previous turn's prompt and
 *             output followed by its own chunks and question
 *
 * Blank lines and lines starting with '#' are skipped.  An ID names content:
 * two segments with the same ID and length hold the same tokens.  Token ids
 * name content by their values.
 */
#ifndef KV_SIM_H
#define KV_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/err.h"

enum kv_sim_kind { KV_SIM_SEG_SYS = 0, KV_SIM_SEG_CHUNK, KV_SIM_SEG_TEXT };

/* One segment of a prompt.  key names the content (never 0); name points
 * into the reader's line buffer (for messages), valid until the next read. */
struct kv_sim_seg {
    uint64_t key;
    int64_t len;
    int kind;
    const char *name;
    int name_len;
};

/* One request as read from a trace.  chunks points into the reader and is
 * valid until the next kv_sim_reader_next(). */
struct kv_sim_req {
    double t;
    uint64_t tenant;          /* 0 for '-' */
    struct kv_sim_seg sys;    /* len 0: no system prompt */
    struct kv_sim_seg *chunks;
    size_t n_chunks;
    int64_t q_len;
    int64_t out_len;
    uint64_t session;         /* 0: not part of a conversation */
    uint64_t line;            /* 1-based line number */
    int prompt_blocks;        /* 1: chunks are the prompt's blocks in order
                               * (a Mooncake trace), not retrieved chunks:
                               * they count as no chunk slots, and the
                               * output, which the trace names no block
                               * of, is not cached */
    const int64_t *hash_ids;  /* a Mooncake trace: its n_chunks hash_ids
                               * as written (else NULL); valid as chunks */
};

/* Largest length of one segment, and of one prompt, in tokens. */
#define KV_SIM_MAX_LEN ((int64_t)1 << 31)
#define KV_SIM_MAX_PROMPT ((int64_t)1 << 40)

/* Streaming trace reader.  kv_sim_reader_open() does not take ownership of
 * f; name is used in messages ("'t.txt' line 3: ...").  kv_sim_reader_next
 * returns 1 with *req filled, 0 at the end, -1 on a malformed line (e says
 * which line and field).  kv_sim_reader_free(NULL) is a no-op. */
struct kv_sim_reader;
int kv_sim_reader_open(struct kv_sim_reader **out, FILE *f, const char *name,
                       struct kv_err *e);
int kv_sim_reader_next(struct kv_sim_reader *r, struct kv_sim_req *req,
                       struct kv_err *e);
void kv_sim_reader_free(struct kv_sim_reader *r);

/* Trace formats: the text or JSON lines above, or Mooncake's JSONL (one
 * object a line with timestamp in ms, input_length, output_length and
 * hash_ids, one per block of block_size tokens, the last one possibly
 * partial).  AUTO: the first request line decides; a JSON object with a
 * key hash_ids or input_length is Mooncake's. */
enum { KV_SIM_FORMAT_AUTO = 0, KV_SIM_FORMAT_NATIVE, KV_SIM_FORMAT_MOONCAKE };

/* The longest trace line, in bytes: a longer one is refused. */
#define KV_SIM_MAX_LINE ((size_t)64 << 20)

/* Name the format and the Mooncake block size (1 to 2^20); call before
 * the first kv_sim_reader_next.  kv_sim_reader_format gives the format of
 * the trace, reading ahead to its first request line when it is AUTO
 * (the line is kept for kv_sim_reader_next); an empty trace is NATIVE.
 * Both return 0, or -1 with e set. */
int kv_sim_reader_set_format(struct kv_sim_reader *r, int format,
                             int64_t block_size, struct kv_err *e);
int kv_sim_reader_format(struct kv_sim_reader *r, int *format,
                         struct kv_err *e);

/* Mix two 64-bit values into one well-spread, non-zero value. */
uint64_t kv_sim_mix(uint64_t a, uint64_t b);

/* Content key of an ID (what ID:LEN names) and of token ids. */
uint64_t kv_sim_key_id(const char *id, size_t n, int64_t len);
uint64_t kv_sim_key_tokens(const int32_t *tok, size_t n);

/* ---- policies ---------------------------------------------------------- */

enum kv_sim_policy {
    KV_SIM_NONE = 0,       /* no cache */
    KV_SIM_PREFIX,         /* vLLM automatic prefix caching */
    KV_SIM_PREFIX_SORTED,  /* the same over chunk-sorted prompts */
    KV_SIM_CHUNK,          /* kvchunk: whole chunks by content, LRU by bytes */
    KV_SIM_CHUNK_LFU,      /* the same, evicting the least frequently used */
    KV_SIM_ORACLE,         /* the chunk scheme with infinite capacity */
    KV_SIM_PREFIX_RADIX,   /* SGLang radix-tree prefix caching */
    KV_SIM_PREFIX_LFU,     /* vLLM's block pool evicting the least
                            * frequently used free block first */
    KV_SIM_NPOLICIES
};

const char *kv_sim_policy_name(int policy);
/* "none,prefix,chunk,oracle" -> bit mask of (1 << policy).  Unknown names,
 * duplicates and an empty list fail. */
int kv_sim_policy_parse(const char *list, unsigned *mask, struct kv_err *e);

/* The TTFT cost model: a request computing n_new tokens, whose computed
 * tokens attend to `pairs` keys in total, loading `loaded` bytes from the
 * cache tier and re-rotating `rotated` bytes of K, takes
 *     us_token * n_new + us_pair * pairs
 *     + loaded / (bw_load GB/s) + rotated / (bw_rope GB/s)     microseconds.
 * Prefix-cache hits are used in place and load nothing.  End to end adds
 * us_decode * (OUTPUT - 1): the first output token comes from the
 * prefill. */
struct kv_sim_cost {
    double us_token;
    double us_pair;
    double bw_load;   /* GB/s (1e9 bytes per second) */
    double bw_rope;   /* GB/s */
    double us_decode; /* microseconds per output token after the first */
};

struct kv_sim_opts {
    unsigned policies;          /* mask of (1 << enum kv_sim_policy) */
    int64_t capacity_tokens;    /* budget in tokens (bytes / bytes_per_token) */
    uint64_t bytes_per_token;   /* kv_model_bytes_per_token: K and V of
                                 * every layer, or an MLA latent row */
    int64_t block_size;         /* prefix caching block, default 16 */
    int ctx_sys;                /* 1: chunk keys include the system prompt */
    int salt_tenant;            /* 1: tenants never share cache entries */
    size_t max_sessions;        /* open conversations kept, LRU beyond */
    int64_t max_chunks;         /* chunk, chunk-lfu: most resident entries
                                 * (0: no limit); the oracle has none */
    int rotate_always;          /* 1: every chunk-cache hit re-rotates K,
                                 * even where it was computed */
    int miss_copy;              /* 1: a chunk-cache miss is computed into
                                 * the cache, then copied (and, with
                                 * rotate_always, rotated) like a hit */
    uint64_t warmup;            /* the first warmup requests fill the
                                 * caches and are not counted */
    struct kv_sim_cost cost;
};

/* TTFT histogram: 100 buckets per decade from 1 ns to 1e9 us. */
#define KV_SIM_HIST 1800

/* Counters of one policy over a replay.  Token counts, not bytes: bytes
 * are tokens * bytes_per_token. */
struct kv_sim_stats {
    uint64_t requests;
    uint64_t prompt_tokens;   /* all prompt tokens */
    uint64_t hit_tokens;      /* reused from the cache */
    uint64_t prefill_tokens;  /* computed */
    uint64_t chunk_slots;     /* retrieved chunks in the requests */
    uint64_t chunk_hits;      /* of which fully reused */
    uint64_t loaded_tokens;   /* copied from the cache */
    uint64_t stored_tokens;   /* written into the cache */
    uint64_t rotated_tokens;  /* loaded at a position other than stored */
    uint64_t evictions;       /* entries (blocks for prefix) evicted */
    uint64_t evicted_tokens;
    uint64_t entries_max;     /* largest number of resident entries */
    uint64_t sys_slots;       /* requests with a system prompt */
    uint64_t sys_hits;        /* of which the system prompt was reused */
    double ttft_sum_us;
    /* end to end: TTFT plus us_decode per output token after the first */
    double e2e_sum_us;
    double ttft_min_us;
    double ttft_max_us;
    uint64_t hist[KV_SIM_HIST];
    /* The same with queueing: one prefill server takes the requests in
     * arrival order (TIME), each for its modelled TTFT; a request's queued
     * TTFT is its wait plus its own. */
    double busy_until_us;
    double queued_sum_us;
    double queued_min_us;
    double queued_max_us;
    uint64_t queued_hist[KV_SIM_HIST];
};

/* Quantile q in [0, 1] of the TTFT histogram (queued: of the queued TTFT),
 * in microseconds (to about 1.2%: the geometric middle of the bucket,
 * clamped to the smallest and largest TTFT seen). */
double kv_sim_ttft_quantile(const struct kv_sim_stats *s, double q);
double kv_sim_queued_quantile(const struct kv_sim_stats *s, double q);

/* A replay in progress.  kv_sim_create copies *o; kv_sim_feed replays one
 * request through every policy of the mask (requests in trace order);
 * kv_sim_get copies a policy's counters out.  kv_sim_feed fails (and says
 * the line) when a segment does not fit the capacity of a policy that has
 * one.  kv_sim_free(NULL) is a no-op. */
struct kv_sim;
int kv_sim_create(struct kv_sim **out, const struct kv_sim_opts *o,
                  struct kv_err *e);
int kv_sim_feed(struct kv_sim *s, const struct kv_sim_req *r,
                struct kv_err *e);
void kv_sim_get(const struct kv_sim *s, int policy, struct kv_sim_stats *out);
/* The check kv_sim_feed starts with: every segment of r fits the capacity
 * (when o has a policy with one).  0, or -1 naming the line. */
int kv_sim_check(const struct kv_sim_opts *o, const struct kv_sim_req *r,
                 struct kv_err *e);
/* Bytes of memory the simulator holds now (its own tables). */
size_t kv_sim_mem(const struct kv_sim *s);
/* Bytes feeding r next may add to that, at most (within the doubling of
 * a growing table): what grows with its tokens, a prefix pool's per-block
 * tables, taking every block as new; SIZE_MAX when it does not fit. */
size_t kv_sim_feed_mem(const struct kv_sim *s, const struct kv_sim_req *r);
void kv_sim_free(struct kv_sim *s);

/* ---- generator --------------------------------------------------------- */

/* A length distribution: "N" (fixed), "A-B" (uniform, inclusive) or "M~S"
 * (log-normal with median M and shape S, rounded, at least 1). */
enum { KV_SIM_DIST_FIXED = 0, KV_SIM_DIST_UNIFORM, KV_SIM_DIST_LOGNORMAL };
struct kv_sim_dist {
    int kind;
    double a, b;
};
int kv_sim_dist_parse(const char *s, const char *opt, int64_t min,
                      struct kv_sim_dist *d, struct kv_err *e);

enum { KV_SIM_ORDER_RETRIEVAL = 0, KV_SIM_ORDER_SORTED, KV_SIM_ORDER_RANDOM };

struct kv_sim_gen_opts {
    uint64_t seed;
    int64_t requests;
    int64_t docs;
    int64_t topk;
    double zipf;
    double fresh;             /* share of retrieved documents never seen
                               * before (new ids from docs up): the steady
                               * state's document reuse is 1 - fresh */
    int order;
    int64_t sys_variants;     /* 0: no system prompt */
    int64_t tenants;
    int64_t topics;           /* 0: no topic clusters */
    int64_t turns;            /* most turns per conversation; 1: none */
    int64_t conversations;    /* conversations open at once */
    double rate;              /* Poisson arrivals per second; 0: all at 0 */
    struct kv_sim_dist doc_len, sys_len, q_len, out_len;
};

/* Write a trace to out, line by line (the same options and seed give the
 * same bytes).  Fails on bad options (before writing) or a write error. */
int kv_sim_gen(FILE *out, const struct kv_sim_gen_opts *o, struct kv_err *e);

/* ---- kvchunk split output -> trace ------------------------------------- */

/* Convert the text output of `kvchunk split` for many prompts (lines
 * "KIND OFFSET LENGTH [KEY]", KIND sys, chunk or question; sys and chunk
 * lines need their key; a prompt ends at its question line) into trace
 * lines, keys becoming ids.  Request i
 * arrives at i / rate (0 when rate is 0), with the given tenant ("-" for
 * none) and output length.  The whole output is built in memory first:
 * *out (malloc'd, caller frees) and *n_out, untouched on failure. */
int kv_sim_from_split(FILE *in, const char *name, double rate,
                      const char *tenant, int64_t out_len, char **out,
                      size_t *n_out, struct kv_err *e);

#endif
