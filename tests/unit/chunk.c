/* chunk.c - unit tests of lib/chunk and lib/blob: splitting, escapes,
 * token files, the key (fast == byte-wise reference, fixed values), the
 * namespace text, and the blob header (round trip, every flipped byte). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tap.h"
#include "core/kv.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"
#include "core/xxh.h"
#include "chunk/store.h"
#include <xxhash.h>

static int seg_is(const struct kv_split *s, size_t i, enum kv_seg_kind k,
                  int64_t off, int64_t len)
{
    return i < s->n_segs && s->segs[i].kind == k && s->segs[i].offset == off
           && s->segs[i].length == len;
}

static int toks_are(const struct kv_split *s, size_t i, const char *text)
{
    size_t n = strlen(text);
    if ((size_t)s->segs[i].length != n)
        return 0;
    for (size_t j = 0; j < n; j++)
        if (s->tokens[s->segs[i].offset + (int64_t)j] != (unsigned char)text[j])
            return 0;
    return 1;
}

static void test_split(void)
{
    struct kv_split s;
    struct kv_err e;
    const char *p = "You are kind.##Doc A##Doc \\##B##Q?";
    TAP_OK(kv_split_text(p, strlen(p), "##", &s, &e) == 0, "split text");
    TAP_OK(s.n_segs == 4 && seg_is(&s, 0, KV_SEG_SYS, 0, 13) &&
           seg_is(&s, 1, KV_SEG_CHUNK, 13, 5) &&
           seg_is(&s, 2, KV_SEG_CHUNK, 18, 7) &&
           seg_is(&s, 3, KV_SEG_QUESTION, 25, 2), "kinds, offsets, lengths");
    TAP_OK(toks_are(&s, 0, "You are kind.") && toks_are(&s, 2, "Doc ##B"),
           "token ids are the bytes; \\## is a literal ##");
    kv_split_release(&s);

    p = "a\\\\##b";           /* a\\##b: one backslash, then a separator */
    kv_split_text(p, strlen(p), "##", &s, &e);
    TAP_OK(s.n_segs == 2 && toks_are(&s, 0, "a\\") && toks_are(&s, 1, "b"),
           "\\\\## is a backslash and a separator");
    kv_split_release(&s);

    p = "a\\\\\\##b";         /* a\\\##b: backslash, then literal ## */
    kv_split_text(p, strlen(p), "##", &s, &e);
    TAP_OK(s.n_segs == 2 && toks_are(&s, 0, "a\\##b") && s.segs[1].length == 0,
           "\\\\\\## is a backslash and a literal ##");
    kv_split_release(&s);

    p = "no separator\\n";
    kv_split_text(p, strlen(p), "##", &s, &e);
    TAP_OK(s.n_segs == 2 && seg_is(&s, 0, KV_SEG_SYS, 0, 14) &&
           seg_is(&s, 1, KV_SEG_QUESTION, 14, 0) &&
           toks_are(&s, 0, "no separator\\n"),
           "no separator: all sys, empty question, other backslashes kept");
    kv_split_release(&s);

    p = "##x####";
    kv_split_text(p, strlen(p), "##", &s, &e);
    TAP_OK(s.n_segs == 4 && s.segs[0].length == 0 && s.segs[1].length == 1 &&
           s.segs[2].length == 0 && s.segs[3].length == 0, "empty segments");
    kv_split_release(&s);

    p = "é##ü";
    kv_split_text(p, strlen(p), "##", &s, &e);
    TAP_OK(s.n_segs == 2 && s.segs[0].length == 2 && s.tokens[0] == 0xc3 &&
           s.tokens[1] == 0xa9, "UTF-8 bytes are the ids (0..255)");
    kv_split_release(&s);

    p = "a||b||c";
    kv_split_text(p, strlen(p), "||", &s, &e);
    TAP_OK(s.n_segs == 3 && toks_are(&s, 1, "b"), "--sep ||");
    kv_split_release(&s);
    TAP_OK(kv_split_text("x", 1, "", &s, &e) < 0, "empty separator refused: "
           "%s", e.msg);

    int32_t ids[] = {1, 2, 9, 9, 3, 9, 4, 9, 9, 5, 6, 9, 9};
    int32_t sep[] = {9, 9};
    TAP_OK(kv_split_ids(ids, 13, sep, 2, &s, &e) == 0 && s.n_segs == 4 &&
           seg_is(&s, 0, KV_SEG_SYS, 0, 2) &&
           seg_is(&s, 1, KV_SEG_CHUNK, 2, 3) &&
           seg_is(&s, 2, KV_SEG_CHUNK, 5, 2) &&
           seg_is(&s, 3, KV_SEG_QUESTION, 7, 0) && s.tokens[2] == 3 &&
           s.tokens[3] == 9 && s.tokens[4] == 4,
           "split ids on a two-id separator (a lone 9 stays a token)");
    kv_split_release(&s);
}

static void test_tokens(void)
{
    char path[] = "/tmp/kvchunk-tok.XXXXXX";
    int fd = mkstemp(path);
    struct kv_tokens t;
    struct kv_err e;
    const char *txt = "1 2,3\n# comment 9\n-4\t2147483647\n";
    TAP_OK(write(fd, txt, strlen(txt)) == (ssize_t)strlen(txt), "write");
    close(fd);
    TAP_OK(kv_tokens_load(path, 0, &t, &e) == 0 && t.n == 5 && t.ids[0] == 1
           && t.ids[3] == -4 && t.ids[4] == 2147483647, "text token ids");
    kv_tokens_release(&t);
    FILE *f = fopen(path, "w");
    fputs("1 2 2147483648\n", f);
    fclose(f);
    TAP_OK(kv_tokens_load(path, 0, &t, &e) < 0 && strstr(e.msg, "line 1"),
           "id past int32 refused: %s", e.msg);
    f = fopen(path, "w");
    fputs("1 x2\n", f);
    fclose(f);
    TAP_OK(kv_tokens_load(path, 0, &t, &e) < 0, "junk refused: %s", e.msg);

    /* int32 .npy: mapped; int64 .npy: converted */
    struct kv_tensor x;
    int64_t shape[1] = {6};
    kv_tensor_init(&x);
    kv_tensor_alloc(&x, KV_I32, 1, shape, 0, &e);
    for (int i = 0; i < 6; i++)
        ((int32_t *)x.data)[i] = 100 * i - 7;
    f = fopen(path, "wb");
    kv_npy_write(f, &x, &e);
    fclose(f);
    kv_tensor_release(&x);
    TAP_OK(kv_tokens_load(path, 0, &t, &e) == 0 && t.n == 6 && t.map &&
           t.ids[5] == 493, "int32 .npy is mapped");
    kv_tokens_release(&t);
    kv_tensor_alloc(&x, KV_I64, 1, shape, 0, &e);
    for (int i = 0; i < 6; i++)
        ((int64_t *)x.data)[i] = i;
    ((int64_t *)x.data)[2] = (int64_t)1 << 40;
    f = fopen(path, "wb");
    kv_npy_write(f, &x, &e);
    fclose(f);
    kv_tensor_release(&x);
    TAP_OK(kv_tokens_load(path, 0, &t, &e) < 0 && strstr(e.msg, "int32"),
           "int64 id past int32 refused: %s", e.msg);
    unlink(path);
}

static void ns_default(struct kv_namespace *ns)
{
    memset(ns, 0, sizeof *ns);
    ns->model = "meta-llama/Llama-3.1-8B@0e9e39f";
    ns->dtype = KV_BF16;
    ns->n_layers = 32;
    ns->n_kv_heads = 8;
    ns->head_dim = 128;
    kv_rope_init(&ns->rope, 128);
    ns->rope.theta = 500000;
    kv_rope_parse_scaling("llama3:factor=8,low=1,high=4,orig=8192",
                          &ns->rope, NULL);
}

static void test_key(void)
{
    struct kv_namespace ns;
    struct kv_err e;
    char *text;
    ns_default(&ns);
    TAP_OK(kv_ns_text(&ns, &text, &e) == 0, "namespace text");
    const char *want =
        "base_pos=context\ndtype=bf16\nhead_dim=128\nlayout=L2THD\nlora=\n"
        "mask=sys\nmodel=meta-llama/Llama-3.1-8B@0e9e39f\nn_kv_heads=8\n"
        "n_layers=32\nrope=neox theta=500000 rotary_dim=128 head_dim=128 "
        "scaling=llama3 factor=8 low_freq_factor=1 high_freq_factor=4 "
        "original_max_position_embeddings=8192\nsalt=\ntokenizer=\n";
    TAP_OK(strcmp(text, want) == 0, "namespace text is canonical");
    if (strcmp(text, want) != 0)
        printf("# got:\n%s", text);
    free(text);

    uint8_t nsd[16], ctx[16], k1[16], k2[16], z[16] = {0};
    int32_t sys[3] = {128000, 9906, 13};
    int32_t tok[5] = {791, 6864, 374, -1, 2147483647};
    kv_ns_digest(&ns, nsd, &e);
    kv_ctx_digest(KV_CTX_NONE, sys, 3, ctx);
    TAP_OK(memcmp(ctx, z, 16) == 0, "context none: sixteen zero bytes");
    kv_ctx_digest(KV_CTX_SYS, sys, 3, ctx);
    kv_chunk_key(nsd, ctx, tok, 5, k1);
    kv_chunk_key_ref(nsd, ctx, tok, 5, k2);
    TAP_OK(memcmp(k1, k2, 16) == 0, "streaming key == byte-wise reference");
    char hex[33], hns[33], hctx[33];
    kv_hex(k1, hex);
    kv_hex(nsd, hns);
    kv_hex(ctx, hctx);
    /* Fixed values: the key is a file format.  If these change, every
     * stored chunk in every store is orphaned. */
    TAP_OK(strcmp(hns, "6c5b1bde65cc7a7a47a0a60bd61b2f20") == 0,
           "ns digest is fixed: %s", hns);
    TAP_OK(strcmp(hctx, "496f94945e2fd9fe8bd3640e76c71a43") == 0,
           "ctx digest is fixed: %s", hctx);
    TAP_OK(strcmp(hex, "01b864b66ab0a42a2415b47bab3917c3") == 0,
           "key is fixed: %s", hex);

    int ok = 1;
    unsigned seed = 7;
    for (int trial = 0; trial < 200; trial++) {
        size_t n = (size_t)(rand_r(&seed) % 3000);
        int32_t *t = malloc((n + 1) * sizeof *t);
        for (size_t i = 0; i < n; i++)
            t[i] = (int32_t)((unsigned)rand_r(&seed) * 2654435761u);
        kv_chunk_key(nsd, ctx, t, n, k1);
        kv_chunk_key_ref(nsd, ctx, t, n, k2);
        ok &= memcmp(k1, k2, 16) == 0;
        free(t);
    }
    TAP_OK(ok, "200 random lengths: streaming == reference");

    kv_chunk_key(nsd, ctx, tok, 5, k1);
    ns.salt = "tenant-a";
    kv_ns_digest(&ns, nsd, &e);
    kv_chunk_key(nsd, ctx, tok, 5, k2);
    TAP_OK(memcmp(k1, k2, 16) != 0, "the salt changes the key");
    ns.salt = NULL;
    ns.rope.rotary_dim = 64;
    kv_ns_digest(&ns, nsd, &e);
    kv_chunk_key(nsd, ctx, tok, 5, k2);
    TAP_OK(memcmp(k1, k2, 16) != 0, "the rotary dim changes the key");
    ns.rope.rotary_dim = 0;
    kv_ns_digest(&ns, nsd, &e);
    kv_chunk_key(nsd, ctx, tok, 4, k2);
    TAP_OK(memcmp(k1, k2, 16) != 0, "a token fewer changes the key");
    ns.model = "a\nb";
    TAP_OK(kv_ns_digest(&ns, nsd, &e) < 0, "newline in a value refused: %s",
           e.msg);
    uint8_t back[16];
    kv_hex(k1, hex);
    TAP_OK(kv_unhex(hex, back) == 0 && memcmp(back, k1, 16) == 0 &&
           kv_unhex("xyz", back) < 0, "hex round trip");
}

static void test_blob(void)
{
    struct kv_blob_meta m, p;
    struct kv_err e;
    uint8_t *hdr;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < 16; i++) {
        m.key[i] = (uint8_t)i;
        m.ns[i] = (uint8_t)(i * 3);
        m.ctx[i] = (uint8_t)(i * 5);
    }
    m.n_tokens = 1100;
    m.n_layers = 2;
    m.n_kv_heads = 3;
    m.head_dim = 4;
    m.dtype = KV_BF16;
    m.base_pos = 77;
    strcpy(m.producer, "test");
    int32_t *tok = malloc(1100 * sizeof *tok);
    for (int i = 0; i < 1100; i++)
        tok[i] = i * 7 - 5;
    size_t plen = 2 * 2 * 1100 * 3 * 4 * 2;
    uint8_t *blob = malloc(8192 + plen);
    for (size_t i = 0; i < plen; i++)
        blob[8192 + i] = (uint8_t)(i * 13);
    m.payload_xxh3 = kv_blob_checksum(blob + 8192, plen);
    TAP_OK(kv_blob_header(&m, tok, &hdr, &e) == 0 && m.header_len == 8192 &&
           m.payload_len == plen, "header of 1100 tokens is 8192 bytes");
    memcpy(blob, hdr, 8192);
    TAP_OK(memcmp(blob, "KVCHUNK1", 8) == 0 && blob[8] == 0 && blob[9] == 0x20
           && blob[84] == 77 && blob[256] == 0xfb && blob[257] == 0xff,
           "little-endian fields at their offsets");
    TAP_OK(kv_blob_check(blob, 8192 + plen, 1, &p, &e) == KV_BLOB_OK &&
           p.base_pos == 77 && p.n_tokens == 1100 && p.dtype == KV_BF16,
           "round trip");
    TAP_OK(kv_blob_match(blob, &p, m.key, m.ns, m.ctx, tok, 1100, &e) ==
           KV_BLOB_OK, "matches its request");
    tok[1099]++;
    TAP_OK(kv_blob_match(blob, &p, m.key, m.ns, m.ctx, tok, 1100, &e) ==
           KV_BLOB_COLLISION, "a different token is a collision: %s", e.msg);
    tok[1099]--;
    int all = 1;
    for (size_t i = 0; i < 8192 + plen; i += (i < 8192 ? 1 : 997)) {
        blob[i] ^= 0x10;
        all &= kv_blob_check(blob, 8192 + plen, 1, &p, &e) == KV_BLOB_CORRUPT;
        blob[i] ^= 0x10;
    }
    TAP_OK(all, "a flipped bit anywhere in the header or payload is caught");
    TAP_OK(kv_blob_check(blob, 8192 + plen - 1, 1, &p, &e) == KV_BLOB_CORRUPT,
           "a truncated blob is caught: %s", e.msg);

    /* random damage: a few bytes changed, or the blob cut short or grown;
     * the full read check never crashes and never answers */
    struct kv_chunk_req rq;
    memcpy(rq.key, m.key, 16);
    memcpy(rq.ns, m.ns, 16);
    memcpy(rq.ctx, m.ctx, 16);
    rq.tokens = tok;
    rq.n_tokens = 1100;
    size_t full = 8192 + plen;
    uint8_t *work = malloc(full + 64);
    unsigned seed = 5;
    int never = 1, hit_clean;
    struct kv_blob_meta got;
    hit_clean = kv_store_verify(blob, full, &rq, &got, &e) == KV_GET_HIT;
    for (int trial = 0; trial < 3000; trial++) {
        size_t len = full;
        memcpy(work, blob, full);
        int kind = rand_r(&seed) % 4;
        if (kind == 0)
            len = (size_t)rand_r(&seed) % full;
        else if (kind == 1)
            len = full + 1 + (size_t)rand_r(&seed) % 63;
        int flips = 1 + rand_r(&seed) % 4;
        for (int k = 0; k < flips; k++) {
            size_t span = rand_r(&seed) % 2 ? 300 : len ? len : 1;
            size_t at = (size_t)rand_r(&seed) % span;
            if (at < len)
                work[at] ^= (uint8_t)(1 + rand_r(&seed) % 255);
        }
        if (len == full && memcmp(work, blob, full) == 0)
            continue;
        never &= kv_store_verify(work, len, &rq, &got, &e) != KV_GET_HIT;
    }
    TAP_OK(hit_clean && never, "3000 damaged blobs: none answers the request");
    free(work);
    free(hdr);
    free(blob);
    free(tok);
}

/* The AVX2 build of XXH3 gives the library's values, at every length. */
static void test_xxh(void)
{
    size_t big = (1u << 20) + 13;
    unsigned char *b = malloc(big);
    int ok64 = 1, ok128 = 1;
    for (size_t i = 0; i < big; i++)
        b[i] = (unsigned char)(i * 131 + (i >> 9));
    for (size_t n = 0; n < big; n = n < 600 ? n + 1 : n * 3 + 7) {
        ok64 &= kv_xxh3_64(b, n) == XXH3_64bits(b, n);
        for (size_t cut = 0; cut <= n; cut += n / 3 + 1) {
            uint8_t got[16];
            XXH128_canonical_t c;
            XXH128_canonicalFromHash(&c, XXH3_128bits(b, n));
            kv_xxh3_128_cat(b, cut, b + cut, n - cut, got);
            ok128 &= memcmp(got, c.digest, 16) == 0;
        }
    }
    TAP_OK(ok64, "kv_xxh3_64 == XXH3_64bits, lengths 0..1M");
    TAP_OK(ok128, "kv_xxh3_128_cat == XXH3_128bits of the concatenation");
    free(b);
}

int main(void)
{
    test_xxh();
    test_split();
    test_tokens();
    test_key();
    test_blob();
    return tap_done();
}
