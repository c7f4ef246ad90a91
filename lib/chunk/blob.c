/* blob.c - build, parse and verify the chunk blob (layout in blob.h). */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "chunk/blob.h"
#include "core/xxh.h"

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int kv_blob_dtype_code(enum kv_dtype t)
{
    switch (t) {
    case KV_F16: return 1;
    case KV_BF16: return 2;
    case KV_F32: return 3;
    default: return 0;
    }
}

static int code_dtype(int c, enum kv_dtype *t)
{
    switch (c) {
    case 1: *t = KV_F16; return 0;
    case 2: *t = KV_BF16; return 0;
    case 3: *t = KV_F32; return 0;
    default: return -1;
    }
}

uint32_t kv_blob_header_len(uint32_t n_tokens)
{
    uint64_t need = KV_BLOB_TOKENS_OFF + 4 * (uint64_t)n_tokens;
    return (uint32_t)((need + KV_BLOB_ALIGN - 1) / KV_BLOB_ALIGN *
                      KV_BLOB_ALIGN);
}

int kv_blob_payload_len(const struct kv_blob_meta *m, uint64_t *len,
                        struct kv_err *e)
{
    uint64_t es = kv_dtype_size(m->dtype);
    uint64_t v = (m->layout == KV_BLOB_LAYOUT_LATENT ? 1 : 2) * es;
    const uint64_t f[4] = {m->n_layers, m->n_tokens, m->n_kv_heads,
                           m->head_dim};
    for (int i = 0; i < 4; i++) {
        if (f[i] && v > KV_BLOB_MAX / f[i])
            return kv_err_set(e, "chunk of %u layers, %u tokens, %u heads, "
                              "head dim %u is too large", m->n_layers,
                              m->n_tokens, m->n_kv_heads, m->head_dim);
        v *= f[i];
    }
    *len = v;
    return 0;
}

uint64_t kv_blob_checksum(const void *p, size_t n)
{
    return kv_xxh3_64(p, n);
}

int kv_blob_header(struct kv_blob_meta *m, const int32_t *tokens,
                   uint8_t **hdr, struct kv_err *e)
{
    if (!kv_blob_dtype_code(m->dtype))
        return kv_err_set(e, "blobs hold f16, bf16 or f32, not %s",
                          kv_dtype_name(m->dtype));
    if (m->n_tokens > (UINT32_MAX - KV_BLOB_ALIGN - KV_BLOB_TOKENS_OFF) / 4)
        return kv_err_set(e, "chunk of %u tokens is too long", m->n_tokens);
    if (kv_blob_payload_len(m, &m->payload_len, e) < 0)
        return -1;
    m->header_len = kv_blob_header_len(m->n_tokens);
    uint8_t *h = calloc(1, m->header_len);
    if (!h)
        return kv_err_set(e, "out of memory");
    memcpy(h, KV_BLOB_MAGIC, 8);
    put32(h + 8, m->header_len);
    put32(h + 12, KV_BLOB_VERSION);
    memcpy(h + 16, m->key, 16);
    memcpy(h + 32, m->ns, 16);
    memcpy(h + 48, m->ctx, 16);
    put32(h + 64, m->n_tokens);
    put32(h + 68, m->n_layers);
    put32(h + 72, m->n_kv_heads);
    put32(h + 76, m->head_dim);
    put16(h + 80, (uint16_t)kv_blob_dtype_code(m->dtype));
    put16(h + 82, (uint16_t)(m->layout ? m->layout : KV_BLOB_LAYOUT_KV));
    put32(h + 84, (uint32_t)m->base_pos);
    put64(h + 88, m->payload_len);
    put64(h + 96, m->payload_xxh3);
    put64(h + 104, m->created_ns);
    memcpy(h + 112, m->rope, 16);
    memcpy(h + 128, m->producer, strnlen(m->producer, 63));
    for (uint32_t i = 0; i < m->n_tokens; i++)
        put32(h + KV_BLOB_TOKENS_OFF + 4 * (size_t)i, (uint32_t)tokens[i]);
    put64(h + 192, XXH3_64bits(h, m->header_len));
    *hdr = h;
    return 0;
}

int kv_blob_peek(const uint8_t *buf, size_t len, struct kv_blob_meta *m,
                 struct kv_err *e)
{
    struct kv_blob_meta t;
    memset(&t, 0, sizeof t);
    if (len < KV_BLOB_TOKENS_OFF)
        return kv_err_set(e, "truncated header (%zu bytes)", len);
    if (memcmp(buf, KV_BLOB_MAGIC, 8) != 0)
        return kv_err_set(e, "not a kvchunk blob (bad magic)");
    if (get32(buf + 12) != KV_BLOB_VERSION)
        return kv_err_set(e, "blob version %u, expected %d", get32(buf + 12),
                          KV_BLOB_VERSION);
    t.header_len = get32(buf + 8);
    memcpy(t.key, buf + 16, 16);
    memcpy(t.ns, buf + 32, 16);
    memcpy(t.ctx, buf + 48, 16);
    t.n_tokens = get32(buf + 64);
    t.n_layers = get32(buf + 68);
    t.n_kv_heads = get32(buf + 72);
    t.head_dim = get32(buf + 76);
    if (code_dtype(get16(buf + 80), &t.dtype) < 0)
        return kv_err_set(e, "bad dtype code %u", get16(buf + 80));
    if (get16(buf + 82) != KV_BLOB_LAYOUT_KV && get16(buf + 82) != KV_BLOB_LAYOUT_LATENT)
        return kv_err_set(e, "bad layout code %u", get16(buf + 82));
    t.layout = get16(buf + 82);
    t.base_pos = (int32_t)get32(buf + 84);
    t.payload_len = get64(buf + 88);
    t.payload_xxh3 = get64(buf + 96);
    t.created_ns = get64(buf + 104);
    memcpy(t.rope, buf + 112, 16);
    memcpy(t.producer, buf + 128, 64);
    t.producer[64] = '\0';
    if (t.n_tokens > (UINT32_MAX - KV_BLOB_ALIGN - KV_BLOB_TOKENS_OFF) / 4 ||
        t.header_len != kv_blob_header_len(t.n_tokens))
        return kv_err_set(e, "header length %u does not fit %u tokens",
                          t.header_len, t.n_tokens);
    uint64_t pl;
    if (kv_blob_payload_len(&t, &pl, e) < 0)
        return -1;
    if (pl != t.payload_len)
        return kv_err_set(e, "payload length %llu does not match the shape "
                          "(%llu)", (unsigned long long)t.payload_len,
                          (unsigned long long)pl);
    if (t.base_pos < 0)
        return kv_err_set(e, "negative base position %d", t.base_pos);
    *m = t;
    return 0;
}

int kv_blob_check_header(const uint8_t *hdr, const struct kv_blob_meta *m,
                         struct kv_err *e)
{
    uint64_t want = get64(hdr + 192);
    XXH3_state_t *st = XXH3_createState();
    static const uint8_t zero[8];
    if (!st)
        return kv_err_set(e, "out of memory"), KV_BLOB_CORRUPT;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, hdr, 192);
    XXH3_64bits_update(st, zero, 8);
    XXH3_64bits_update(st, hdr + 200, m->header_len - 200);
    uint64_t got = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (got != want) {
        kv_err_set(e, "header checksum mismatch");
        return KV_BLOB_CORRUPT;
    }
    return KV_BLOB_OK;
}

int kv_blob_match(const uint8_t *hdr, const struct kv_blob_meta *m,
                  const uint8_t key[16], const uint8_t ns[16],
                  const uint8_t ctx[16], const int32_t *tokens, size_t n,
                  struct kv_err *e)
{
    if (memcmp(m->key, key, 16) != 0) {
        kv_err_set(e, "blob holds another key");
        return KV_BLOB_COLLISION;
    }
    if (memcmp(m->ns, ns, 16) != 0 || memcmp(m->ctx, ctx, 16) != 0) {
        kv_err_set(e, "key collision: namespace or context differs");
        return KV_BLOB_COLLISION;
    }
    if (m->n_tokens != n) {
        kv_err_set(e, "key collision: %u tokens stored, %zu asked",
                   m->n_tokens, n);
        return KV_BLOB_COLLISION;
    }
    const uint8_t *p = hdr + KV_BLOB_TOKENS_OFF;
    for (size_t i = 0; i < n; i++)
        if (get32(p + 4 * i) != (uint32_t)tokens[i]) {
            kv_err_set(e, "key collision: token %zu differs", i);
            return KV_BLOB_COLLISION;
        }
    return KV_BLOB_OK;
}

void kv_blob_tokens(const uint8_t *hdr, const struct kv_blob_meta *m,
                    int32_t *out)
{
    for (uint32_t i = 0; i < m->n_tokens; i++)
        out[i] = (int32_t)get32(hdr + KV_BLOB_TOKENS_OFF + 4 * (size_t)i);
}

int kv_blob_check(const uint8_t *buf, size_t len, int verify_payload,
                  struct kv_blob_meta *m, struct kv_err *e)
{
    struct kv_blob_meta t;
    if (kv_blob_peek(buf, len, &t, e) < 0)
        return KV_BLOB_CORRUPT;
    if (len < t.header_len || len - t.header_len != t.payload_len) {
        kv_err_set(e, "blob is %zu bytes, header says %llu", len,
                   (unsigned long long)(t.header_len + t.payload_len));
        return KV_BLOB_CORRUPT;
    }
    if (kv_blob_check_header(buf, &t, e) != KV_BLOB_OK)
        return KV_BLOB_CORRUPT;
    if (verify_payload &&
        kv_blob_checksum(buf + t.header_len, t.payload_len) != t.payload_xxh3) {
        kv_err_set(e, "payload checksum mismatch");
        return KV_BLOB_CORRUPT;
    }
    *m = t;
    return KV_BLOB_OK;
}
