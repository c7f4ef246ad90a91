/* chunk_put.c - a chunk's blob metadata and header, as kvchunk put makes
 * them. */
#include <stdio.h>
#include <string.h>
#include "core/kv.h"
#include "core/xxh.h"
#include "chunk/chunk_put.h"
#include "chunk/rope.h"

int kv_chunk_blob(const struct kv_namespace *ns, const int32_t *ctx,
                  size_t n_ctx, const int32_t *tok, size_t n_tok,
                  const struct kv_tensor *x, int64_t p0, uint64_t created_ns,
                  struct kv_blob_meta *m, uint8_t **hdr, struct kv_err *e)
{
    char rd[4096];
    memset(m, 0, sizeof *m);
    if (kv_ns_digest(ns, m->ns, e) < 0)
        return -1;
    kv_ctx_digest(ns->mask, ctx, n_ctx, m->ctx);
    kv_chunk_key(m->ns, m->ctx, tok, n_tok, m->key);
    int n = kv_rope_describe(&ns->rope, rd, sizeof rd);
    kv_xxh3_128_cat(rd, n > 0 ? (size_t)n : 0, NULL, 0, m->rope);
    m->n_tokens = (uint32_t)n_tok;
    m->n_layers = (uint32_t)x->shape[0];
    m->n_kv_heads = (uint32_t)(ns->kv_lora_rank ? 1 : x->shape[3]);
    m->head_dim = (uint32_t)x->shape[x->ndim - 1];
    m->dtype = x->dtype;
    m->layout = ns->kv_lora_rank ? KV_BLOB_LAYOUT_LATENT : KV_BLOB_LAYOUT_KV;
    m->base_pos = (int32_t)p0;
    m->created_ns = created_ns;
    snprintf(m->producer, sizeof m->producer, "kvchunk %s", KV_VERSION);
    m->payload_xxh3 = kv_blob_checksum(x->data, x->nbytes);
    if (kv_blob_header(m, tok, hdr, e) < 0)
        return -1;
    if (m->payload_len != x->nbytes)
        return kv_err_set(e, "internal: payload size mismatch");
    return 0;
}
