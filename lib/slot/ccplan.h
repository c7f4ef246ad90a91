/* ccplan.h - seed 001's position-independent chunk cache, step by step:
 * what the model runner is handed for each prompt `sys##c1##..##question`.
 *
 * Two pools of blocks of block_size tokens:
 *  - the main KV pool, vLLM's: block 0 is the null block, the free queue
 *    starts 1, 2, ..; a request takes blocks from its front and, when it
 *    finishes, returns them to its back, last block first;
 *  - the chunk pool, the seed's separate pool: blocks 0 .. n-1, whole
 *    chunks kept by content key, least recently used first out, at most
 *    max_chunks of them, none longer than max_chunk_tokens.
 *
 * When a request is admitted, its segments are taken in order: the system
 * prompt (a chunk computed with nothing before it, at position 0), then each
 * chunk.  A chunk is looked up by its key and its length (the seed's
 * ChunkHash holds both: the same key with another length is a miss).  A miss is computed in a chunk
 * pass: its tokens at the virtual start (the system prompt's length in
 * context mode "sys", where it attends to the system prompt's pool slots;
 * 0 in mode "none"), its slots in newly allocated chunk-pool blocks; then
 * it is kept.  Every chunk, hit or just computed, is then copied into the
 * request's main-pool blocks at its real position: one copy per run of
 * tokens whose source and destination slots are both contiguous, K rotated
 * by delta = real position - virtual start.  The question is then
 * scheduled like any prompt with the chunks' tokens already computed (its
 * mask rows are causal over the whole prompt: the question sees
 * everything), and decodes follow.
 *
 * Scheduling: FCFS, one token budget per step for question and decode
 * tokens (chunk passes are forward passes of their own, outside the
 * budget), chunked prefill of long questions, at most max_num_seqs
 * running.  A request that cannot get its main blocks waits, and so does
 * everything behind it (no preemption in this flow).
 */
#ifndef KV_CCPLAN_H
#define KV_CCPLAN_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

enum { KV_CC_SYS = 0, KV_CC_CHUNK = 1, KV_CC_QUESTION = 2 };

struct kv_cc_seg {
    int kind;                 /* KV_CC_* */
    int64_t off, len;         /* position and length in the prompt */
    uint8_t key[16];          /* content key (sys and chunks) */
};

struct kv_cc_req {
    struct kv_cc_seg *segs;   /* sys first, question last */
    size_t n_segs;
    int64_t output_len;       /* tokens generated (>= 1) */
};

struct kv_cc_config {
    size_t n_reqs;
    const struct kv_cc_req *reqs;
    int64_t block_size;
    int64_t max_num_batched_tokens;
    int64_t max_num_seqs;
    int64_t max_model_len;
    int64_t num_blocks;           /* main pool, block 0 included; 0 = enough */
    int64_t chunk_pool_blocks;
    int64_t max_chunks;           /* seed default 500 */
    int64_t max_chunk_tokens;     /* seed default 4096 */
    int ctx_none;                 /* chunks computed without the sys prompt */
};

/* Read segment lists as `kvchunk split -f text` prints them with keys
 * ("sys OFF LEN KEY", "chunk OFF LEN KEY", "question OFF LEN"), one prompt
 * after another: each "sys" line starts a request.  name is for messages. */
int kv_cc_read(const char *text, size_t len, const char *name,
               struct kv_cc_req **reqs, size_t *n_reqs, struct kv_err *e);
void kv_cc_reqs_free(struct kv_cc_req *reqs, size_t n);

/* One step's lists.  Arrays stay valid until the next step or free. */
struct kv_cc_list {
    int64_t *v;
    size_t n, cap;
};

struct kv_cc_step {
    int64_t step;
    /* chunk lookups, one per sys/chunk segment of a request admitted now */
    struct kv_cc_list chunk_req, chunk_seg, chunk_hit, chunk_tokens,
        chunk_base_pos, chunk_pos;
    /* chunk passes, one per miss, in order */
    struct kv_cc_list pass_req, pass_query_start_loc, pass_positions,
        pass_slot_mapping, pass_context_lens, pass_context_slots;
    /* copies chunk pool -> main pool, one per contiguous run */
    struct kv_cc_list copy_req, copy_src, copy_dst, copy_len, copy_delta;
    /* the forward pass of questions and decodes, as kvslot plan prints it */
    struct kv_cc_list req_ids, num_scheduled, query_start_loc, seq_lens,
        num_computed, positions, slot_mapping;
    struct kv_cc_list block_table;        /* rows of bt_stride entries */
    int64_t bt_stride;
    struct kv_cc_list waiting, blocked, finished;
    int64_t free_blocks;
    /* the chunk pool after the step */
    int64_t pool_free_blocks, pool_entries, hits, misses;
    size_t n_evicted;
    uint8_t (*evicted)[16];               /* keys evicted this step */
    size_t evicted_cap;
};

struct kv_cc;

/* Validate the config and the requests (every chunk keyed, no chunk over
 * max_chunk_tokens, the pool able to hold a chunk and its context, the
 * prompt within max_model_len, a question of at least one token). */
int kv_cc_new(const struct kv_cc_config *cfg, struct kv_cc **out,
              struct kv_err *e);
/* 1 and *st filled when a step ran; 0 when every request has finished (or
 * with decode 0, when every prompt is complete); -1 on error. */
int kv_cc_step(struct kv_cc *cc, int decode, const struct kv_cc_step **st,
               struct kv_err *e);
void kv_cc_free(struct kv_cc *cc);
/* What the pools need for a config's requests (block 0 counted in the
 * main pool's figures). */
struct kv_cc_sizes {
    int64_t main_blocks;          /* every request's blocks at once: "enough" */
    int64_t main_blocks_least;    /* the biggest request's */
    int64_t pool_blocks_least;    /* the largest chunk with its context */
};

/* Validate the requests as kv_cc_new does, whatever the pool sizes, and
 * fill *sz; nothing is allocated, so this is the cheap way to size the
 * pools from the input. */
int kv_cc_sizes(const struct kv_cc_config *cfg, struct kv_cc_sizes *sz,
                struct kv_err *e);
/* The main pool's blocks, block 0 included (the "enough" count when the
 * config gave 0). */
int64_t kv_cc_num_blocks(const struct kv_cc *cc);

#endif
