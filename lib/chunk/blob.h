/* blob.h - the self-describing blob of one cached chunk, the same bytes in
 * a dir: store file and in a Redis value.
 *
 *   off  size  field (integers little-endian)
 *   0    8     magic "KVCHUNK1"
 *   8    4     header_len: u32, a multiple of 4096, >= 256 + 4 n_tokens
 *   12   4     version = 1
 *   16   16    key            (canonical bytes, as hashed: see chunk.h)
 *   32   16    ns_digest
 *   48   16    ctx_digest
 *   64   4     n_tokens       u32
 *   68   4     n_layers       u32
 *   72   4     n_kv_heads     u32
 *   76   4     head_dim       u32
 *   80   2     dtype          u16: 1 f16, 2 bf16, 3 f32
 *   82   2     layout         u16: 1 = [L, 2, T, Hkv, D], 2 = MLA latent
 *                             [L, T, D] (n_kv_heads 1)
 *   84   4     base_pos       i32: the position of the first token when
 *                             K was computed (K is stored rotated there)
 *   88   8     payload_len    u64 = L * 2 * T * Hkv * D * element size
 *   96   8     payload_xxh3   u64: XXH3-64 of the payload
 *   104  8     created_ns     u64: unix time in nanoseconds
 *   112  16    rope_digest    XXH3-128 of the RoPE description text
 *   128  64    producer       NUL-padded text ("kvchunk 0.1.0")
 *   192  8     header_xxh3    u64: XXH3-64 of the header_len header bytes
 *                             with these 8 bytes zero
 *   200  56    zero
 *   256  4n    token ids      int32
 *   ...        zero up to header_len
 *   header_len payload_len    payload: [L][2][T][Hkv][D] row-major,
 *                             little-endian elements
 *
 * A blob is valid when the magic, version, sizes and both checksums hold;
 * it answers a request when key, ns_digest, ctx_digest and every token id
 * equal the request's (otherwise a hash collision: a miss, never data).
 */
#ifndef KV_BLOB_H
#define KV_BLOB_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

#define KV_BLOB_MAGIC "KVCHUNK1"
#define KV_BLOB_VERSION 1
#define KV_BLOB_ALIGN 4096
#define KV_BLOB_TOKENS_OFF 256
/* Upper bound of one blob (keeps every size computation far from
 * overflow; Redis' own limit is lower). */
#define KV_BLOB_MAX ((uint64_t)1 << 44)

struct kv_blob_meta {
    uint8_t key[16], ns[16], ctx[16], rope[16];
    uint32_t header_len;
    uint32_t n_tokens, n_layers, n_kv_heads, head_dim;
    enum kv_dtype dtype;
    int32_t base_pos;
    uint64_t payload_len, payload_xxh3, created_ns;
    char producer[65];
    unsigned layout;    /* KV_BLOB_LAYOUT_*; 0 is taken as KV */
};

/* Layout codes: K and V [L, 2, T, Hkv, D]; an MLA latent [L, T, D] (one
 * row of kv_lora_rank + k_pe dims per token, n_kv_heads 1). */
#define KV_BLOB_LAYOUT_KV 1
#define KV_BLOB_LAYOUT_LATENT 2

/* Result of checking a blob against a request. */
enum kv_blob_check { KV_BLOB_OK = 0, KV_BLOB_COLLISION = 1,
                     KV_BLOB_CORRUPT = 2 };

/* Payload bytes for the shape in m (0 and e set on overflow or > max). */
int kv_blob_payload_len(const struct kv_blob_meta *m, uint64_t *len,
                        struct kv_err *e);
/* header_len for n tokens. */
uint32_t kv_blob_header_len(uint32_t n_tokens);

/* Build the header for m (payload_len, header_len filled in here;
 * payload_xxh3 must be set) and tokens into a malloc'd buffer of
 * m->header_len bytes.  Caller frees *hdr. */
int kv_blob_header(struct kv_blob_meta *m, const int32_t *tokens,
                   uint8_t **hdr, struct kv_err *e);

/* Read the fixed part (the first 256 bytes) of a header without checking
 * its checksum: enough to know header_len and payload_len. */
int kv_blob_peek(const uint8_t *buf, size_t len, struct kv_blob_meta *m,
                 struct kv_err *e);

/* Check a header of m->header_len bytes (after kv_blob_peek): its checksum
 * and consistency.  KV_BLOB_OK or KV_BLOB_CORRUPT with the reason in e. */
int kv_blob_check_header(const uint8_t *hdr, const struct kv_blob_meta *m,
                         struct kv_err *e);

/* Does the header answer the request (key, ns, ctx, tokens)?  KV_BLOB_OK or
 * KV_BLOB_COLLISION with the reason in e. */
int kv_blob_match(const uint8_t *hdr, const struct kv_blob_meta *m,
                  const uint8_t key[16], const uint8_t ns[16],
                  const uint8_t ctx[16], const int32_t *tokens, size_t n,
                  struct kv_err *e);

/* The token ids of a checked header into out (m->n_tokens int32). */
void kv_blob_tokens(const uint8_t *hdr, const struct kv_blob_meta *m,
                    int32_t *out);

/* XXH3-64 of a payload. */
uint64_t kv_blob_checksum(const void *p, size_t n);

/* Whole-blob check of buf[0..len): header, sizes, payload checksum (when
 * verify_payload).  KV_BLOB_OK or KV_BLOB_CORRUPT; m filled on OK. */
int kv_blob_check(const uint8_t *buf, size_t len, int verify_payload,
                  struct kv_blob_meta *m, struct kv_err *e);

/* Blob dtype code <-> kv_dtype. */
int kv_blob_dtype_code(enum kv_dtype t);

#endif
