/* chunk_put.h - the blob a chunk's KV is stored as: its metadata and
 * header, as kvchunk put writes them.  Used by the Python package's
 * kvchunk.put. */
#ifndef KV_CHUNK_PUT_H
#define KV_CHUNK_PUT_H

#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"
#include "chunk/blob.h"
#include "chunk/chunk.h"

/* The metadata (key, namespace, context and RoPE digests, shape, dtype,
 * base position p0, created_ns, producer, payload checksum) of the chunk
 * with token ids tok[0..n_tok) after the context ids ctx[0..n_ctx), whose
 * KV x ([L, 2, T, Hkv, D], or a latent [L, T, D] for an MLA namespace)
 * was computed at p0, into m, and its header into *hdr (malloc'd; the
 * caller frees it).  x must already match the namespace. */
int kv_chunk_blob(const struct kv_namespace *ns, const int32_t *ctx,
                  size_t n_ctx, const int32_t *tok, size_t n_tok,
                  const struct kv_tensor *x, int64_t p0, uint64_t created_ns,
                  struct kv_blob_meta *m, uint8_t **hdr, struct kv_err *e);

#endif
