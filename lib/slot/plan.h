/* plan.h - vLLM v1's scheduler, block allocator and persistent batch, step
 * by step, so that a plan of many steps can print what the model runner
 * sees before every forward pass.
 *
 * What is modelled (vLLM v1 defaults, prefix caching off):
 *  - FCFS.  Running requests are scheduled first, in order, each getting
 *    min(tokens it still needs, remaining budget) tokens (chunked prefill);
 *    then waiting requests, while the budget lasts and fewer than
 *    max_num_seqs run.  No waiting request is scheduled in a step that
 *    preempted one.  A waiting (or preempted) request is admitted only if
 *    the blocks for all its tokens, not just this step's chunk, can be
 *    allocated (vLLM's scheduler_reserve_full_isl; admit_by_chunk turns
 *    it off).
 *  - Block pool: block 0 is the null block and is never handed out; the
 *    free queue starts as 1, 2, .., num_blocks-1; a request needing blocks
 *    takes them from the front; a finished or preempted request returns its
 *    blocks to the back, last block first.
 *  - Out of blocks: a running request preempts the last running request
 *    (recompute: its blocks are freed, it goes back to the front of the
 *    waiting queue with nothing computed), possibly itself; a waiting
 *    request that cannot get its blocks waits, and so does everything
 *    behind it.  Nothing is dropped: every step reports who waits, who was
 *    preempted and who was blocked.
 *  - A request that finishes its prompt samples one token per step; it
 *    finishes when it has produced output_len tokens or its length reaches
 *    max_model_len.
 *  - The persistent batch: finished and unscheduled requests leave their
 *    rows; new requests, then returning ones, fill the lowest free rows;
 *    remaining holes are filled by moving the last rows down (condense);
 *    optionally decodes are then swapped to the front.  Block table row =
 *    batch row.
 */
#ifndef KV_PLAN_H
#define KV_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

/* Batch reorders (kv_plan_config.split_decodes). */
enum {
    KV_PLAN_REORDER_NONE = 0,
    /* older vLLM: one-token requests to the front with the fewest swaps,
     * the last decode behind the region trading with the first prefill */
    KV_PLAN_REORDER_SPLIT_DECODES = 1,
    /* newest vLLM: decode (computed > 0, one token), extend (computed > 0,
     * more), prefill (computed == 0); the misplaced rows, stably sorted by
     * region, give a permutation applied cycle by cycle with swaps */
    KV_PLAN_REORDER_REGIONS = 2
};

/* KV-cache group kinds (vLLM's single-type managers). */
enum {
    KV_PLAN_GROUP_FULL = 0,         /* FullAttentionManager (MLA too) */
    KV_PLAN_GROUP_SLIDING,          /* SlidingWindowManager */
    KV_PLAN_GROUP_CHUNKED,          /* ChunkedLocalAttentionManager */
    KV_PLAN_GROUP_MAMBA             /* MambaManager: in cache mode
                                       "none" its own block size (vLLM's:
                                       the model length), no prefix
                                       caching; in "align" (see "Mamba
                                       cache mode align") block_size */
};

/* One KV-cache group of a hybrid model (see "KV-cache groups" below). */
struct kv_plan_group {
    int kind;                       /* KV_PLAN_GROUP_* */
    int64_t window;                 /* sliding window or attention chunk
                                       (tokens); 0 for full attention */
    int64_t spec;                   /* groups of one spec share a number:
                                       their prefix-cache lookup is one */
    int64_t block_size;             /* Mamba: its block (every Mamba group
                                       the same); others: 0 (block_size)
                                       or their own (without prefix
                                       caching only) */
    int align;                      /* Mamba: cache mode "align" (every
                                       Mamba group in one mode; its block
                                       is block_size, as every group's) */
};

struct kv_plan_config {
    size_t n_reqs;
    const int64_t *prompt_lens;     /* n_reqs, each 1 .. max_model_len-1
                                       (vLLM refuses a generation prompt
                                       of max_model_len tokens) */
    const int64_t *output_lens;     /* n_reqs, each >= 1; NULL = no limit */
    int64_t max_num_batched_tokens; /* token budget per step */
    int64_t max_num_seqs;           /* running requests at most */
    int64_t block_size;
    int64_t max_model_len;
    int64_t num_blocks;             /* total including block 0; 0 = enough */
    size_t max_bytes;               /* refuse a state larger than this,
                                       extra_bytes included (0 = no
                                       limit) */
    size_t extra_bytes;             /* what the caller holds besides the
                                       plan (each step's metadata), counted
                                       with its state against max_bytes */
    int split_decodes;              /* reorder the batch after the
                                       persistent-batch update (vLLM's
                                       reorder_batch_to_split_decodes_and_
                                       prefills, threshold 1: MLA and
                                       FlashInfer backends):
                                       KV_PLAN_REORDER_* */
    int round_stride;               /* newest vLLM: block-table rows padded
                                       to a multiple of 128 / gcd(128,
                                       block_size) columns (128/block_size
                                       for block sizes dividing 128) */
    int64_t kernel_block_size;      /* the block size of that rounding when
                                       a rank's block is smaller than the
                                       scheduler's (context parallelism:
                                       block_size / cp world); 0: block_size */
    /* Automatic prefix caching (vLLM's --enable-prefix-caching); needs
     * prompt_tokens.  See "Prefix caching" below. */
    int prefix_caching;
    const int64_t *const *prompt_tokens; /* n_reqs arrays of prompt_lens[i]
                                            ids >= 0, or NULL */
    const int64_t *arrivals;        /* step each request arrives at (>= 1);
                                       NULL: all at step 1 */
    const char *const *salts;       /* per request cache_salt, or NULL */
    const int64_t *lora_ids;        /* per request LoRA int id (0 none), or
                                       NULL */
    int admit_by_chunk;             /* vLLM before 2026-03 (scheduler_
                                       reserve_full_isl off): a waiting
                                       request is admitted when this step's
                                       chunk fits; 0 (vLLM 0.33.0's default):
                                       only when blocks for its whole
                                       sequence, min(tokens, max_model_len),
                                       can be allocated */
    int async_scheduling;           /* vLLM's asynchronous scheduling: the
                                       engine schedules step k+1 before it
                                       processes step k's output (see
                                       kvslot(1)) */
    int skip_waiting;               /* leave kv_plan_step.waiting empty: a
                                       step then costs nothing per waiting
                                       request, so a plan's cost is linear
                                       in the tokens it schedules */
    int skip_shared;                /* leave kv_plan_step.shared empty: a
                                       step then costs nothing per block of
                                       the pool */
    size_t n_groups;                /* KV-cache groups; 0: one full-
                                       attention group */
    const struct kv_plan_group *groups;
    const unsigned char *skip_tables; /* per group, 1: leave its rows of
                                         kv_plan_step.tables unfilled (stale
                                         block ids); 2: fill each row's
                                         blocks, not its zero padding;
                                         NULL: fill all */
};

/* KV-cache groups, as vLLM 0.33.0's KV cache coordinator runs them (every
 * group of the same block size, block_size; one shared pool):
 *  - a request holds a row of blocks in every group; each step allocates
 *    the same count in each, group after group from the free queue;
 *  - before a running request's allocation, each sliding-window group
 *    frees the blocks wholly before its window (tokens below computed -
 *    window + 1) and each chunked-local group those before its current
 *    chunk, computed counting only the tokens whose step was processed
 *    (vLLM's remove_skipped_blocks); their entries become the null block
 *    0, the freed blocks go to the pool last first;
 *  - the prefix-cache lookup (find_longest_cache_hit): full attention left
 *    to right, sliding windows right to left (a run of cdiv(window - 1,
 *    block_size) cached blocks), chunked local from the current chunk's
 *    start, iterated until every group agrees on one hit length; a block
 *    is cached per group (its hash and its group are the key);
 *  - sliding-window groups keep in the cache only the blocks a later
 *    lookup can reach (vLLM's default prefix_cache_retention_interval 0):
 *    the run ending at the block boundary at or below the prompt's last
 *    token, and the one ending at a shared prefix's boundary;
 *  - a waiting request is admitted when the blocks of its whole sequence
 *    fit, a sliding-window group's counted up to cdiv(window - 1 +
 *    in-flight tokens, block_size) + 1, a chunked group's up to
 *    cdiv(chunk + in-flight tokens, block_size) (in-flight tokens: the
 *    budget, twice it with asynchronous scheduling). */

/* Mamba cache mode align, as vLLM 0.33.0's Scheduler and MambaManager
 * run it (plan_mamba.c; vLLM's engine picks it with prefix caching):
 *  - a prefill chunk (of the prompt, or of all but the last token of a
 *    resumed request) ends on a block boundary unless it ends the prefill
 *    (a block wider than the token budget may advance inside itself); one
 *    starting inside a block stops at its end; none runs past the last
 *    block boundary before the request's last token, nor past the last
 *    block boundary before its shared-prefix boundary; a running request
 *    left with 0 tokens is skipped, a waiting one stops the admissions;
 *  - a request's row in a Mamba group is as long as its attention rows:
 *    a step that needs new blocks pads it with null blocks and takes one,
 *    the running state; the state before it is freed once the processed
 *    tokens reach the block after it, every block before the last
 *    processed token's block too;
 *  - the lookup takes the rightmost cached state block; a Mamba group
 *    caches only the states at the block boundary at or below the
 *    prompt's last token and at the shared-prefix boundary; a request
 *    whose hit state was cached in this step is not admitted in it;
 *  - admission counts one state block a Mamba group (and its hit block
 *    when it sits in the free queue). */

/* Prefix caching, as vLLM v1's KV cache manager and block pool do it:
 *  - a full block's hash is XXH3-64 (seed 0) of: the parent block's hash
 *    (u64 LE; 0 for the first block), the block's token ids (int64 LE),
 *    then the extra keys: the LoRA id (u64 LE, every block, when > 0) and
 *    the cache salt's bytes (first block only).  Python's hash is not
 *    reproduced; equal prefixes give equal hashes, which is what counts.
 *  - a request with nothing computed looks up the longest run of its full
 *    blocks whose hashes are cached, never its whole prompt: at most
 *    (tokens - 1) / block_size blocks, so the last token is recomputed.
 *    Hit blocks gain a reference and leave the free queue; the request's
 *    num_cached_tokens is set then, the first time it is scheduled.
 *  - a new block comes from the free queue's head; if it held a hash, the
 *    hash is evicted.
 *  - blocks are cached (hash inserted) as soon as the scheduled tokens fill
 *    them, so a request scheduled later in the same step can hit them.
 *  - a finished or preempted request drops a reference on each of its
 *    blocks, last block first; those left without one go to the free
 *    queue's tail (they stay cached until reused).
 *  - decode tokens have ids that never occur in a prompt. */


/* What one step did.  The arrays belong to the scheduler and stay valid
 * until the next kv_plan_step or kv_plan_free. */
struct kv_plan_step {
    int64_t step;                   /* 1, 2, ... */
    size_t n_rows;                  /* batch rows (scheduled requests) */
    const int64_t *req_ids;         /* request of each row */
    const int64_t *num_scheduled;   /* tokens scheduled per row */
    const int64_t *num_computed;    /* tokens computed before this step */
    const int64_t *block_table;     /* n_rows x n_cols block ids, 0-padded
                                       (group 0's) */
    size_t n_groups;                /* KV-cache groups (1 without) */
    const int64_t *tables;          /* n_groups x n_rows x n_cols: each
                                       group's table (block 0: null) */
    size_t n_cols;                  /* cdiv(max_model_len, block_size),
                                       maybe rounded (round_stride) */
    const int64_t *waiting;         /* request ids still waiting */
    size_t n_waiting;
    const int64_t *blocked;         /* wanted blocks and did not get them */
    size_t n_blocked;
    const int64_t *preempted;       /* preempted in this step */
    size_t n_preempted;
    const int64_t *finished;        /* finished at the end of this step */
    size_t n_finished;
    int64_t free_blocks;            /* free blocks after this step's
                                       scheduling */
    int64_t num_tokens;             /* tokens scheduled in this step */
    int prompts_done;               /* every prompt fully computed */
    int all_done;                   /* every request finished */
    /* prefix caching (zero-length without it) */
    const int64_t *num_cached;      /* per row: the request's
                                       num_cached_tokens */
    const int64_t *shared;          /* blocks with more than one reference,
                                       ascending */
    size_t n_shared;
    const uint64_t *evicted;        /* block hashes evicted this step */
    size_t n_evicted;
};

struct kv_plan;

/* Check cfg (every request must fit the block pool on its own; messages
 * name the request) and create a scheduler.  kv_plan_free frees it
 * (NULL is fine). */
int kv_plan_new(struct kv_plan **out, const struct kv_plan_config *cfg,
                 struct kv_err *e);
void kv_plan_free(struct kv_plan *s);

/* The bytes kv_plan_new would allocate for cfg (its whole state: block
 * lists, pool, queues, per-step outputs, prefix-caching tables), without
 * allocating them, SIZE_MAX when they overflow; extra_bytes is not
 * included.  0, or -1 when cfg is refused (as kv_plan_new refuses it). */
int kv_plan_state_bytes(const struct kv_plan_config *cfg, size_t *bytes,
                        struct kv_err *e);

/* Run one step.  Returns 0 and fills *st, or -1 (no progress possible:
 * a bug or an impossible configuration). */
int kv_plan_step(struct kv_plan *s, struct kv_plan_step *st,
                  struct kv_err *e);

/* Prefix caching's invariants, for tests: the free queue and the
 * referenced blocks make the whole pool, reference counts equal the
 * requests holding each block, no finished request holds one, and every
 * cached block a request holds has the tokens that request has there.
 * 0, or -1 with the broken one in e. */
int kv_plan_check(const struct kv_plan *s, struct kv_err *e);

#endif
