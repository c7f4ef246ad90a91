/* hash.c - vLLM's prefix-caching block hashes (hash.h): the pickle
 * (protocol 5) and canonical CBOR encodings of the one shape vLLM hashes,
 * (bytes, tuple of ints, None | tuple of tuples of str), then SHA-256
 * (nettle) or XXH3-128 (libxxhash).
 *
 * Pickle, as CPython's _pickle writes it for these types:
 *   PROTO 5 (80 05), then frames: FRAME (95) + 8-byte little-endian length,
 *   a new frame begun at the first write after the previous one closed; a
 *   frame closes before an object is saved once it holds 64 KiB or more,
 *   and at the end; a frame of fewer than 4 bytes loses its header; a str
 *   or bytes payload of 64 KiB or more closes the frame and is written
 *   outside any (its opcode and length too).
 *   int      K b (0..255) | M b b (..65535) | J 4 bytes (signed 32-bit) |
 *            LONG1 8a n bytes (two's complement, little-endian, shortest)
 *   bytes    C n data (n < 256) | B 4-byte n data, then MEMOIZE (94)
 *   str      8c n utf8 (n < 256) | X 4-byte n utf8, then MEMOIZE; a str
 *            already in the memo is BINGET h i
 *   None     N
 *   tuple    ) when empty; elements then TUPLE1/2/3 (85/86/87) up to 3;
 *            else MARK ( elements TUPLE t; then MEMOIZE
 *   STOP     .
 * The memo is by object identity: CPython keeps one object for the empty
 * str and each one-character str below U+0100, so those repeat as BINGET;
 * every other str here is a distinct object.
 *
 * CBOR (RFC 8949), as cbor2 writes it: ints major type 0 / 1, bytes 2, str
 * 3, tuple an array (4), None f6; each head in its shortest form. */
#include <nettle/sha2.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "slot/hash.h"

#define FRAME_TARGET 65536
#define FRAME_MIN 4
#define NO_FRAME ((size_t)-1)

struct kv_hash {
    struct kv_hash_opts o;
    uint8_t none[KV_HASH_MAX_LEN];
    int cbor;
    /* the encoding buffer */
    uint8_t *buf;
    size_t len, cap;
    int oom;
    /* pickle state */
    size_t frame;            /* offset of the open frame's header */
    uint32_t memo_n;
    struct { const char *s; size_t n; uint32_t idx; } single[8];
    int n_single;
};

static const char *const algo_names[4] = {
    "sha256", "sha256_cbor", "xxhash", "xxhash_cbor"
};

int kv_hash_algo_parse(const char *s, int *algo, struct kv_err *e)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, algo_names[i])) {
            *algo = i;
            return 0;
        }
    return kv_err_set(e, "unknown hash algorithm '%s' (expected sha256, "
                      "sha256_cbor, xxhash or xxhash_cbor)", s);
}

const char *kv_hash_algo_name(int algo)
{
    return algo >= 0 && algo < 4 ? algo_names[algo] : "?";
}

size_t kv_hash_len(int algo)
{
    return algo == KV_HASH_XXHASH || algo == KV_HASH_XXHASH_CBOR ? 16 : 32;
}

/* ---- the buffer ---------------------------------------------------------- */

static void put(struct kv_hash *h, const void *p, size_t n)
{
    if (h->oom)
        return;
    if (h->len + n > h->cap) {
        size_t cap = h->cap ? h->cap : 4096;
        while (cap < h->len + n)
            cap *= 2;
        uint8_t *b = realloc(h->buf, cap);
        if (!b) {
            h->oom = 1;
            return;
        }
        h->buf = b;
        h->cap = cap;
    }
    memcpy(h->buf + h->len, p, n);
    h->len += n;
}

static void put1(struct kv_hash *h, uint8_t c)
{
    put(h, &c, 1);
}

/* ---- pickle -------------------------------------------------------------- */

static void pk_close_frame(struct kv_hash *h)
{
    if (h->frame == NO_FRAME || h->oom) {
        h->frame = NO_FRAME;
        return;
    }
    size_t n = h->len - h->frame - 9;
    if (n >= FRAME_MIN) {
        h->buf[h->frame] = 0x95;
        for (int i = 0; i < 8; i++)
            h->buf[h->frame + 1 + i] = (uint8_t)((uint64_t)n >> (8 * i));
    } else {
        memmove(h->buf + h->frame, h->buf + h->frame + 9, n);
        h->len -= 9;
    }
    h->frame = NO_FRAME;
}

/* Write into the open frame, opening one first if none is. */
static void pk(struct kv_hash *h, const void *p, size_t n)
{
    if (h->frame == NO_FRAME) {
        static const uint8_t hdr[9];
        h->frame = h->len;
        put(h, hdr, 9);
    }
    put(h, p, n);
}

static void pk1(struct kv_hash *h, uint8_t c)
{
    pk(h, &c, 1);
}

static void pk_le(struct kv_hash *h, uint64_t v, int n)
{
    uint8_t b[8];
    for (int i = 0; i < n; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    pk(h, b, (size_t)n);
}

/* Before an object is saved: close a frame of 64 KiB or more. */
static void pk_boundary(struct kv_hash *h)
{
    if (h->frame != NO_FRAME && h->len - h->frame - 9 >= FRAME_TARGET)
        pk_close_frame(h);
}

static void pk_int(struct kv_hash *h, int64_t v)
{
    pk_boundary(h);
    if (v >= 0 && v <= 0xff) {
        pk1(h, 'K');
        pk_le(h, (uint64_t)v, 1);
    } else if (v >= 0 && v <= 0xffff) {
        pk1(h, 'M');
        pk_le(h, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        pk1(h, 'J');
        pk_le(h, (uint64_t)v, 4);
    } else {
        /* LONG1: the shortest two's complement that keeps the sign */
        int n = 8;
        while (n > 1) {
            int64_t top = v >> (8 * (n - 1) - 1);   /* the bits dropped + sign */
            if (top != 0 && top != -1)
                break;
            n--;
        }
        pk1(h, 0x8a);
        pk1(h, (uint8_t)n);
        pk_le(h, (uint64_t)v, n);
    }
}

/* A payload of 64 KiB or more goes outside the frames. */
static void pk_payload(struct kv_hash *h, const uint8_t *hdr, size_t n_hdr,
                       const void *p, size_t n)
{
    if (n >= FRAME_TARGET) {
        pk_close_frame(h);
        put(h, hdr, n_hdr);
        put(h, p, n);
    } else {
        pk(h, hdr, n_hdr);
        pk(h, p, n);
    }
}

static void pk_memoize(struct kv_hash *h)
{
    pk1(h, 0x94);
    h->memo_n++;
}

static void pk_bytes(struct kv_hash *h, const uint8_t *p, size_t n)
{
    uint8_t hdr[5];
    pk_boundary(h);
    if (n < 256) {
        hdr[0] = 'C';
        hdr[1] = (uint8_t)n;
        pk_payload(h, hdr, 2, p, n);
    } else {
        hdr[0] = 'B';
        for (int i = 0; i < 4; i++)
            hdr[1 + i] = (uint8_t)((uint64_t)n >> (8 * i));
        pk_payload(h, hdr, 5, p, n);
    }
    pk_memoize(h);
}

/* Is s one of CPython's shared str objects (empty, or one character below
 * U+0100)? */
static int shared_str(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    return n == 0 || (n == 1 && u[0] < 0x80) ||
           (n == 2 && (u[0] == 0xc2 || u[0] == 0xc3) && (u[1] & 0xc0) == 0x80);
}

static void pk_str(struct kv_hash *h, const char *s)
{
    size_t n = strlen(s);
    uint8_t hdr[5];
    int shared = shared_str(s, n);
    pk_boundary(h);
    if (shared)
        for (int i = 0; i < h->n_single; i++)
            if (h->single[i].n == n && !memcmp(h->single[i].s, s, n)) {
                uint32_t x = h->single[i].idx;
                if (x < 256) {
                    pk1(h, 'h');
                    pk1(h, (uint8_t)x);
                } else {
                    pk1(h, 'j');
                    pk_le(h, x, 4);
                }
                return;
            }
    if (n < 256) {
        hdr[0] = 0x8c;
        hdr[1] = (uint8_t)n;
        pk_payload(h, hdr, 2, s, n);
    } else {
        hdr[0] = 'X';
        for (int i = 0; i < 4; i++)
            hdr[1 + i] = (uint8_t)((uint64_t)n >> (8 * i));
        pk_payload(h, hdr, 5, s, n);
    }
    if (shared && h->n_single < 8) {
        h->single[h->n_single].s = s;
        h->single[h->n_single].n = n;
        h->single[h->n_single].idx = h->memo_n;
        h->n_single++;
    }
    pk_memoize(h);
}

/* The end of a tuple of n elements (saved already). */
static void pk_tuple_end(struct kv_hash *h, size_t n)
{
    if (n == 0) {
        pk1(h, ')');
        return;
    }
    pk1(h, n <= 3 ? (uint8_t)(0x84 + n) : 't');
    pk_memoize(h);
}

/* The start of a tuple of n elements. */
static void pk_tuple_begin(struct kv_hash *h, size_t n)
{
    pk_boundary(h);
    if (n > 3)
        pk1(h, '(');
}

/* ---- CBOR ---------------------------------------------------------------- */

static void cb_head(struct kv_hash *h, int major, uint64_t v)
{
    uint8_t m = (uint8_t)(major << 5);
    if (v < 24) {
        put1(h, m | (uint8_t)v);
        return;
    }
    int n = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
    uint8_t b[9];
    b[0] = m | (uint8_t)(n == 1 ? 24 : n == 2 ? 25 : n == 4 ? 26 : 27);
    for (int i = 0; i < n; i++)
        b[1 + i] = (uint8_t)(v >> (8 * (n - 1 - i)));
    put(h, b, (size_t)n + 1);
}

static void cb_int(struct kv_hash *h, int64_t v)
{
    if (v >= 0)
        cb_head(h, 0, (uint64_t)v);
    else
        cb_head(h, 1, (uint64_t)(-1 - v));
}

static void cb_str(struct kv_hash *h, const char *s)
{
    size_t n = strlen(s);
    cb_head(h, 3, n);
    put(h, s, n);
}

/* ---- one object ---------------------------------------------------------- */

/* The extra keys of a block: LoRA on every block, the salt on block 0. */
static size_t n_extra(const char *salt, const char *lora, int first)
{
    return (lora ? 1 : 0) + (first && salt && *salt ? 1 : 0);
}

/* Serialise (parent, tokens, extra_keys) into h->buf. */
static void encode_block(struct kv_hash *h, const uint8_t *parent,
                         size_t n_parent, const int64_t *tok, size_t n,
                         const char *salt, const char *lora,
                         const char *lora_path, int first)
{
    size_t ne = n_extra(salt, lora, first);
    h->len = 0;
    h->oom = 0;
    if (h->cbor) {
        cb_head(h, 4, 3);
        cb_head(h, 2, n_parent);
        put(h, parent, n_parent);
        cb_head(h, 4, n);
        for (size_t i = 0; i < n; i++)
            cb_int(h, tok[i]);
        if (!ne) {
            put1(h, 0xf6);
            return;
        }
        cb_head(h, 4, ne);
        if (lora) {
            cb_head(h, 4, 3);
            cb_str(h, "lora");
            cb_str(h, lora);
            cb_str(h, lora_path);
        }
        if (first && salt && *salt) {
            cb_head(h, 4, 2);
            cb_str(h, "cache_salt");
            cb_str(h, salt);
        }
        return;
    }
    h->frame = NO_FRAME;
    h->memo_n = 0;
    h->n_single = 0;
    put1(h, 0x80);
    put1(h, 5);
    pk_tuple_begin(h, 3);
    pk_bytes(h, parent, n_parent);
    pk_tuple_begin(h, n);
    for (size_t i = 0; i < n; i++)
        pk_int(h, tok[i]);
    pk_tuple_end(h, n);
    if (!ne) {
        pk_boundary(h);
        pk1(h, 'N');
    } else {
        pk_tuple_begin(h, ne);
        if (lora) {
            pk_tuple_begin(h, 3);
            pk_str(h, "lora");
            pk_str(h, lora);
            pk_str(h, lora_path);
            pk_tuple_end(h, 3);
        }
        if (first && salt && *salt) {
            pk_tuple_begin(h, 2);
            pk_str(h, "cache_salt");
            pk_str(h, salt);
            pk_tuple_end(h, 2);
        }
        pk_tuple_end(h, ne);
    }
    pk_tuple_end(h, 3);
    pk1(h, '.');
    pk_close_frame(h);
}

/* The seed str alone. */
static void encode_seed(struct kv_hash *h, const char *seed)
{
    h->len = 0;
    h->oom = 0;
    if (h->cbor) {
        cb_str(h, seed);
        return;
    }
    h->frame = NO_FRAME;
    h->memo_n = 0;
    h->n_single = 0;
    put1(h, 0x80);
    put1(h, 5);
    pk_str(h, seed);
    pk1(h, '.');
    pk_close_frame(h);
}

static void digest(const struct kv_hash *h, uint8_t *out)
{
    if (h->o.algo == KV_HASH_SHA256 || h->o.algo == KV_HASH_SHA256_CBOR) {
        struct sha256_ctx c;
        sha256_init(&c);
        sha256_update(&c, h->len, h->buf);
        sha256_digest(&c, SHA256_DIGEST_SIZE, out);
    } else {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(h->buf, h->len));
        memcpy(out, c.digest, 16);
    }
}

/* ---- the API ------------------------------------------------------------- */

/* Is s valid UTF-8 (what a Python str encodes to) and short enough? */
static int check_str(const char *what, const char *s, struct kv_err *e)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    if (n > KV_HASH_MAX_STR)
        return kv_err_set(e, "%s of %zu bytes: at most %zu", what, n,
                          KV_HASH_MAX_STR);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 :
                   (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1f : k == 3 ? c & 0x0f :
                      c & 0x07;
        if (!k || i + k > n)
            return kv_err_set(e, "%s is not valid UTF-8", what);
        for (size_t j = 1; j < k; j++) {
            if ((u[i + j] & 0xc0) != 0x80)
                return kv_err_set(e, "%s is not valid UTF-8", what);
            cp = cp << 6 | (u[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) ||
            (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return kv_err_set(e, "%s is not valid UTF-8", what);
        i += k;
    }
    return 0;
}

static int check_extra(const char *salt, const char *lora,
                       const char *lora_path, struct kv_err *e)
{
    if (salt && check_str("cache salt", salt, e) < 0)
        return -1;
    if (lora) {
        if (!lora_path || !*lora_path)
            return kv_err_set(e, "LoRA '%.60s' without a path (vLLM "
                              "requires a non-empty lora_path)", lora);
        if (check_str("LoRA name", lora, e) < 0 ||
            check_str("LoRA path", lora_path, e) < 0)
            return -1;
    }
    return 0;
}

int kv_hash_create(struct kv_hash **out, const struct kv_hash_opts *o,
                   struct kv_err *e)
{
    if (o->algo < 0 || o->algo > 3)
        return kv_err_set(e, "unknown hash algorithm %d", o->algo);
    if (o->block_size < 1 || o->block_size > (int64_t)1 << 24)
        return kv_err_set(e, "block size %lld out of range (1 to 2^24)",
                          (long long)o->block_size);
    if (!o->seed && (o->algo == KV_HASH_XXHASH ||
                     o->algo == KV_HASH_XXHASH_CBOR))
        return kv_err_set(e, "%s: vLLM draws a random NONE_HASH seed unless "
                          "PYTHONHASHSEED is set; give the seed",
                          kv_hash_algo_name(o->algo));
    if ((o->seed && check_str("hash seed", o->seed, e) < 0) ||
        check_extra(o->cache_salt, o->lora_name, o->lora_path, e) < 0)
        return -1;
    struct kv_hash *h = calloc(1, sizeof *h);
    if (!h)
        return kv_err_set(e, "out of memory");
    h->o = *o;
    h->cbor = o->algo == KV_HASH_SHA256_CBOR || o->algo == KV_HASH_XXHASH_CBOR;
    encode_seed(h, o->seed ? o->seed : KV_HASH_DEFAULT_SEED);
    if (h->oom) {
        kv_hash_free(h);
        return kv_err_set(e, "out of memory");
    }
    digest(h, h->none);
    *out = h;
    return 0;
}

void kv_hash_free(struct kv_hash *h)
{
    if (!h)
        return;
    free(h->buf);
    free(h);
}

const uint8_t *kv_hash_none(const struct kv_hash *h)
{
    return h->none;
}

int kv_hash_preimage(struct kv_hash *h, const uint8_t *parent,
                     const int64_t *tok, size_t n, const char *salt,
                     const char *lora_name, const char *lora_path,
                     const uint8_t **buf, size_t *len, struct kv_err *e)
{
    if (!salt && !lora_name) {
        salt = h->o.cache_salt;
        lora_name = h->o.lora_name;
        lora_path = h->o.lora_path;
    } else if (check_extra(salt, lora_name, lora_path, e) < 0) {
        return -1;
    }
    encode_block(h, parent ? parent : h->none, kv_hash_len(h->o.algo), tok,
                 n, salt, lora_name, lora_path, !parent);
    if (h->oom)
        return kv_err_set(e, "out of memory");
    *buf = h->buf;
    *len = h->len;
    return 0;
}

int kv_hash_blocks(struct kv_hash *h, const int64_t *tok, size_t n,
                   const char *salt, const char *lora_name,
                   const char *lora_path, uint8_t *out, struct kv_err *e)
{
    size_t B = (size_t)h->o.block_size, hl = kv_hash_len(h->o.algo);
    if (!salt && !lora_name) {
        salt = h->o.cache_salt;
        lora_name = h->o.lora_name;
        lora_path = h->o.lora_path;
    } else if (check_extra(salt, lora_name, lora_path, e) < 0) {
        return -1;
    }
    for (size_t b = 0; b < n / B; b++) {
        const uint8_t *parent = b ? out + (b - 1) * hl : h->none;
        encode_block(h, parent, hl, tok + b * B, B, salt, lora_name,
                     lora_path, b == 0);
        if (h->oom)
            return kv_err_set(e, "out of memory");
        digest(h, out + b * hl);
    }
    return 0;
}

/* ---- an unbounded prefix cache ------------------------------------------- */

/* A set of block hashes (their first 16 bytes), open addressing. */
struct kv_hash_set {
    uint8_t (*k)[16];
    uint8_t *used;
    size_t cap, n;
};

int kv_hash_set_create(struct kv_hash_set **out, struct kv_err *e)
{
    struct kv_hash_set *s = calloc(1, sizeof *s);
    if (!s)
        return kv_err_set(e, "out of memory");
    *out = s;
    return 0;
}

void kv_hash_set_free(struct kv_hash_set *s)
{
    if (!s)
        return;
    free(s->k);
    free(s->used);
    free(s);
}

static size_t set_home(const uint8_t *k, size_t cap)
{
    uint64_t x;
    memcpy(&x, k, 8);
    return (size_t)(x ^ (x >> 29)) & (cap - 1);
}

static int set_has(const struct kv_hash_set *s, const uint8_t *k)
{
    if (!s->cap)
        return 0;
    for (size_t i = set_home(k, s->cap);; i = (i + 1) & (s->cap - 1)) {
        if (!s->used[i])
            return 0;
        if (!memcmp(s->k[i], k, 16))
            return 1;
    }
}

static int set_add(struct kv_hash_set *s, const uint8_t *k)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        uint8_t (*nk)[16] = calloc(cap, 16);
        uint8_t *nu = calloc(cap, 1);
        if (!nk || !nu) {
            free(nk);
            free(nu);
            return -1;
        }
        for (size_t i = 0; i < s->cap; i++)
            if (s->used[i]) {
                size_t j = set_home(s->k[i], cap);
                while (nu[j])
                    j = (j + 1) & (cap - 1);
                memcpy(nk[j], s->k[i], 16);
                nu[j] = 1;
            }
        free(s->k);
        free(s->used);
        s->k = nk;
        s->used = nu;
        s->cap = cap;
    }
    size_t i = set_home(k, s->cap);
    while (s->used[i]) {
        if (!memcmp(s->k[i], k, 16))
            return 0;
        i = (i + 1) & (s->cap - 1);
    }
    memcpy(s->k[i], k, 16);
    s->used[i] = 1;
    s->n++;
    return 0;
}

int kv_hash_set_feed(struct kv_hash_set *s, const uint8_t *hashes,
                     size_t hash_len, int64_t n_tokens, int64_t block_size,
                     int64_t *hit, struct kv_err *e)
{
    int64_t n_full = n_tokens / block_size;
    int64_t max_hit = n_tokens > 0 ? (n_tokens - 1) / block_size : 0;
    int64_t k = 0;
    while (k < max_hit && set_has(s, hashes + (size_t)k * hash_len))
        k++;
    for (int64_t b = 0; b < n_full; b++)
        if (set_add(s, hashes + (size_t)b * hash_len) < 0)
            return kv_err_set(e, "out of memory");
    *hit = k * block_size;
    return 0;
}
