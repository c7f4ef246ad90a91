/* requests.h - a Mooncake-format trace (kvchunk(1), "Mooncake traces") as
 * the requests of a scheduler plan (kvslot plan --trace): each prompt's
 * token ids made from its hash_ids, its output length and its arrival
 * step, in plain arrays (lib/slot's plan takes them as they are). */
#ifndef KV_SIM_REQUESTS_H
#define KV_SIM_REQUESTS_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "core/err.h"

/* Token j of the block a hash id h names, in a trace of blocks of T tokens:
 * h * T + j.  Equal ids give equal blocks, different ids different ones;
 * a prompt is the first input_length tokens of its blocks in order.  Ids
 * are at least 0 and below KV_SIM_MAX_HASH_ID. */
#define KV_SIM_MAX_HASH_ID ((int64_t)1 << 40)

struct kv_sim_requests {
    size_t n;                 /* requests */
    int64_t *prompt_lens;     /* input_length */
    int64_t *output_lens;     /* output_length (at least 1) */
    int64_t *arrivals;        /* step 1 + floor(timestamp / ms_per_step) */
    int64_t **tokens;         /* n pointers into buf */
    int64_t *buf;             /* every prompt's token ids */
    size_t bytes;             /* what the arrays above hold */
};

/* Read the whole trace from f (name for messages) with blocks of
 * block_size tokens and ms_per_step milliseconds a step, holding at most
 * max_bytes (0: no limit).  0 and *t filled (kv_sim_requests_release
 * frees it), or -1 with e naming the line (a malformed line as kvchunk
 * sim refuses it, an output_length of 0, an id out of range, an empty
 * trace, more than max_bytes). */
int kv_sim_requests_read(FILE *f, const char *name, int64_t block_size,
                       double ms_per_step, size_t max_bytes,
                       struct kv_sim_requests *t, struct kv_err *e);
void kv_sim_requests_release(struct kv_sim_requests *t);

#endif
