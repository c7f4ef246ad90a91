/* chunk.h - a RAG prompt as chunks, and the content key of a chunk.
 *
 * A prompt `sys##c1##c2##question` is split into segments: the system
 * prompt, the chunks, the question.  Each segment is a run of token ids;
 * in text mode the token ids are the segment's UTF-8 bytes (a stand-in for
 * a tokenizer: every segment is tokenized on its own, the separator never
 * becomes a token).
 *
 * The content key of a chunk does not depend on where the chunk lands:
 *
 *   preimage = "kvchunk/1\0"                       10 bytes
 *            | 0x01 | ns_digest[16]                namespace
 *            | 0x02 | ctx_digest[16]               what the chunk attended to
 *            | 0x03 | u32le n | int32le tok[n]     the chunk's tokens
 *   key      = XXH3-128(preimage), written as 32 hex digits (the canonical,
 *              big-endian form of the 128-bit value)
 *
 *   ns_digest  = XXH3-128 of the namespace text: the lines "name=value\n"
 *                in this order: base_pos, dtype, head_dim, layout, lora,
 *                mask, model, n_kv_heads, n_layers, rope, salt, tokenizer
 *   ctx_digest = XXH3-128(int32le sys tokens) with --chunk-context sys,
 *                sixteen zero bytes with --chunk-context none
 *
 * All integers little-endian; the digests in their canonical (big-endian)
 * byte order.  Nothing depends on the host.
 */
#ifndef KV_CHUNK_H
#define KV_CHUNK_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"
#include "chunk/rope.h"

enum kv_seg_kind { KV_SEG_SYS = 0, KV_SEG_CHUNK = 1, KV_SEG_QUESTION = 2 };

/* "sys" "chunk" "question" */
const char *kv_seg_kind_name(enum kv_seg_kind k);

struct kv_segment {
    enum kv_seg_kind kind;
    int64_t offset;      /* position of the first token in the prompt */
    int64_t length;      /* tokens */
};

/* A split prompt: n_segs segments over one token array (segment s covers
 * tokens[offset, offset + length)).  kv_split_release frees; safe on a
 * zeroed struct. */
struct kv_split {
    struct kv_segment *segs;
    size_t n_segs;
    int32_t *tokens;
    size_t n_tokens;
};

void kv_split_release(struct kv_split *s);

/* Split text: segments are separated by sep (default "##"); a backslash
 * run right before a separator is unescaped (each "\\" is one backslash,
 * an odd last "\" makes the separator literal text); other backslashes are
 * literal.  The first segment is sys, the last the question, the ones in
 * between chunks; without a separator the whole text is sys and the
 * question is empty.  Token ids are the bytes. */
int kv_split_text(const char *text, size_t len, const char *sep,
                  struct kv_split *out, struct kv_err *e);

/* Split token ids on every occurrence of the id sequence sep[0..n_sep). */
int kv_split_ids(const int32_t *ids, size_t n, const int32_t *sep,
                 size_t n_sep, struct kv_split *out, struct kv_err *e);

/* Token ids read from a file: whitespace- (or comma-) separated decimal
 * integers, or an integer .npy of any shape (flattened).  "-" is stdin.
 * Every id must fit in int32.  An int32 .npy in a regular file is mapped,
 * not copied (ids then points into the mapping).  kv_tokens_release frees;
 * safe on a zeroed struct. */
struct kv_tokens {
    const int32_t *ids;
    size_t n;
    int32_t *owned;      /* malloc'd ids, or NULL */
    void *map;           /* mmap'd file, or NULL */
    size_t map_len;
};

/* max_bytes bounds the input (0 = none). */
int kv_tokens_load(const char *path, size_t max_bytes, struct kv_tokens *t,
                   struct kv_err *e);
void kv_tokens_release(struct kv_tokens *t);

/* What the namespace digest covers. */
enum kv_ctx_mode { KV_CTX_SYS = 0, KV_CTX_NONE = 1 };
enum kv_base_policy { KV_BASE_CONTEXT = 0, KV_BASE_ZERO, KV_BASE_FREE };

struct kv_namespace {
    const char *model, *tokenizer, *lora, *salt;   /* NULL = "" */
    enum kv_dtype dtype;
    int64_t n_layers, n_kv_heads, head_dim;
    struct kv_rope rope;
    enum kv_ctx_mode mask;
    enum kv_base_policy base;
    /* MLA (DeepSeek): > 0 makes the chunks latent, [L, T, head_dim] with
     * head_dim = kv_lora_rank + the k_pe dims, n_kv_heads 1; the layout
     * line of the namespace text reads "LTD kv_lora_rank=N" (chunk/latent.h) */
    int64_t kv_lora_rank;
};

const char *kv_base_policy_name(enum kv_base_policy p);
int kv_base_policy_parse(const char *s, enum kv_base_policy *out,
                         struct kv_err *e);

/* The namespace text (see above) into a malloc'd string; caller frees. */
int kv_ns_text(const struct kv_namespace *ns, char **out, struct kv_err *e);
/* ns_digest. */
int kv_ns_digest(const struct kv_namespace *ns, uint8_t digest[16],
                 struct kv_err *e);
/* ctx_digest of the sys tokens (mode none: zeros). */
void kv_ctx_digest(enum kv_ctx_mode mode, const int32_t *sys, size_t n_sys,
                   uint8_t digest[16]);
/* The key.  The token ids are hashed as little-endian int32 with the
 * streaming XXH3 state, without building the preimage in memory. */
void kv_chunk_key(const uint8_t ns[16], const uint8_t ctx[16],
                  const int32_t *tok, size_t n, uint8_t key[16]);
/* Byte-at-a-time reference of the same key (tests compare the two). */
void kv_chunk_key_ref(const uint8_t ns[16], const uint8_t ctx[16],
                      const int32_t *tok, size_t n, uint8_t key[16]);

/* 16 bytes -> 32 lowercase hex digits and NUL; hex -> bytes (0 / -1). */
void kv_hex(const uint8_t b[16], char hex[33]);
int kv_unhex(const char *hex, uint8_t b[16]);

/* The base position a chunk of this namespace must be computed at, given
 * the number of context tokens (policy context: n_ctx in sys mode, 0 in
 * none mode; zero: 0; free: -1 = any). */
int64_t kv_base_pos_for(const struct kv_namespace *ns, int64_t n_ctx);

#endif
