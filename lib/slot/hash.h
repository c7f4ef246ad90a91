/* hash.h - vLLM 0.33.0's prefix-caching block hashes, byte for byte
 * (vllm/v1/core/kv_cache_utils.py, vllm/utils/hashing.py; man 1 kvslot,
 * "Block hashes").
 *
 * Block b of a prompt (tokens [b B, (b + 1) B), full blocks only) hashes
 *
 *     H((parent, (t0, t1, ..., tB-1), extra_keys))
 *
 * a Python 3-tuple: parent is the previous block's hash (bytes), NONE_HASH
 * for block 0; the tokens are a tuple of ints; extra_keys is None or a
 * tuple of tuples: ("lora", lora_name, lora_path) on every block of a LoRA
 * request, then ("cache_salt", salt) on block 0 when the salt is not
 * empty.  H is one of
 *
 *     sha256       SHA-256 of pickle.dumps(x, protocol=5)
 *     sha256_cbor  SHA-256 of cbor2.dumps(x, canonical=True)
 *     xxhash       XXH3-128 (big-endian digest) of the pickle
 *     xxhash_cbor  XXH3-128 of the CBOR
 *
 * and NONE_HASH = H(seed), seed a str: PYTHONHASHSEED when it is set, else
 * "vllm-none-hash" for the SHA-256 ones (the xxhash ones draw a random
 * seed, so they need one given).  The encoders here write exactly the bytes
 * CPython's pickle and cbor2 write for these types, frames and memo
 * included. */
#ifndef KV_SLOT_HASH_H
#define KV_SLOT_HASH_H
#include <stddef.h>
#include <stdint.h>
#include "core/err.h"

enum kv_hash_algo {
    KV_HASH_SHA256 = 0, KV_HASH_SHA256_CBOR, KV_HASH_XXHASH,
    KV_HASH_XXHASH_CBOR
};

#define KV_HASH_MAX_LEN 32            /* bytes of the longest digest */
#define KV_HASH_MAX_STR ((size_t)1 << 20) /* longest salt or LoRA string */
#define KV_HASH_DEFAULT_SEED "vllm-none-hash"

struct kv_hash_opts {
    int algo;                 /* enum kv_hash_algo */
    int64_t block_size;       /* tokens per block, >= 1 */
    const char *seed;         /* PYTHONHASHSEED; NULL: the default, which
                               * the xxhash algorithms do not have */
    const char *cache_salt;   /* NULL or "": none */
    const char *lora_name;    /* NULL: not a LoRA request */
    const char *lora_path;    /* with lora_name: not empty */
};

/* "sha256" ... -> *algo; the name of an algo. */
int kv_hash_algo_parse(const char *s, int *algo, struct kv_err *e);
const char *kv_hash_algo_name(int algo);
/* Bytes of one digest: 32 (SHA-256) or 16 (XXH3-128). */
size_t kv_hash_len(int algo);

/* The hasher of one configuration: NONE_HASH computed once, the encoding
 * buffer reused.  kv_hash_free(NULL) is a no-op. */
struct kv_hash;
int kv_hash_create(struct kv_hash **out, const struct kv_hash_opts *o,
                   struct kv_err *e);
void kv_hash_free(struct kv_hash *h);
/* NONE_HASH (kv_hash_len bytes). */
const uint8_t *kv_hash_none(const struct kv_hash *h);

/* The hashes of the n / B full blocks of tok[0..n), chained from
 * NONE_HASH, into out (n / B * kv_hash_len bytes, caller's).  The extra
 * keys (salt, LoRA) are those of h's options, or of the request's own when
 * salt or lora_name is not NULL here (lora_path then too).  0, or -1. */
int kv_hash_blocks(struct kv_hash *h, const int64_t *tok, size_t n,
                   const char *salt, const char *lora_name,
                   const char *lora_path, uint8_t *out, struct kv_err *e);

/* The serialised bytes of one block's tuple (for tests and -v): *buf
 * (valid until the next call on h) and *len. */
int kv_hash_preimage(struct kv_hash *h, const uint8_t *parent,
                     const int64_t *tok, size_t n, const char *salt,
                     const char *lora_name, const char *lora_path,
                     const uint8_t **buf, size_t *len, struct kv_err *e);

/* One prompt of the input of kvslot hash (hash_input.c): its token ids
 * and the request's own salt and LoRA (NULL: not given).  parse reads one
 * line (without its newline) into p, reusing its buffers: 0, or -1 with
 * e saying why (the caller adds the line).  release frees them (safe on a
 * zeroed struct). */
struct kv_hash_prompt {
    int64_t *tok;
    size_t n, cap;
    char *salt, *lora_name, *lora_path;
};
int kv_hash_prompt_parse(struct kv_hash_prompt *p, const char *s, size_t n,
                         struct kv_err *e);
void kv_hash_prompt_release(struct kv_hash_prompt *p);

/* An unbounded prefix cache over block hashes, for the cacheability of a
 * set of prompts.  kv_hash_set_feed looks up a prompt of n_tokens whose
 * full blocks have the given hashes (n_tokens / block_size of them): *hit
 * is the tokens of its leading cached blocks, at most (n_tokens - 1) /
 * block_size blocks (vLLM always computes the last prompt token); then
 * every full block is cached.  0, or -1 out of memory. */
struct kv_hash_set;
int kv_hash_set_create(struct kv_hash_set **out, struct kv_err *e);
void kv_hash_set_free(struct kv_hash_set *s);
int kv_hash_set_feed(struct kv_hash_set *s, const uint8_t *hashes,
                     size_t hash_len, int64_t n_tokens, int64_t block_size,
                     int64_t *hit, struct kv_err *e);

#endif
