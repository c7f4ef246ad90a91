/* chunk.c - splitting a RAG prompt into segments, reading token ids, and
 * the position-free content key of a chunk (byte layout in chunk.h). */
#define XXH_STATIC_LINKING_ONLY
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include "chunk/chunk.h"
#include "core/npy.h"
#include "core/cli.h"
#include "core/xxh.h"

const char *kv_seg_kind_name(enum kv_seg_kind k)
{
    switch (k) {
    case KV_SEG_SYS: return "sys";
    case KV_SEG_CHUNK: return "chunk";
    default: return "question";
    }
}

void kv_split_release(struct kv_split *s)
{
    free(s->segs);
    free(s->tokens);
    memset(s, 0, sizeof *s);
}

/* A growing split under construction. */
struct builder {
    struct kv_split s;
    size_t cap_segs, cap_tok;
};

static int push_token(struct builder *b, int32_t t)
{
    if (b->s.n_tokens == b->cap_tok) {
        size_t nc = b->cap_tok ? b->cap_tok * 2 : 256;
        int32_t *nt = realloc(b->s.tokens, nc * sizeof *nt);
        if (!nt)
            return -1;
        b->s.tokens = nt;
        b->cap_tok = nc;
    }
    b->s.tokens[b->s.n_tokens++] = t;
    return 0;
}

/* Close the current segment: it started at token `start`. */
static int push_seg(struct builder *b, size_t start)
{
    if (b->s.n_segs == b->cap_segs) {
        size_t nc = b->cap_segs ? b->cap_segs * 2 : 8;
        struct kv_segment *ns = realloc(b->s.segs, nc * sizeof *ns);
        if (!ns)
            return -1;
        b->s.segs = ns;
        b->cap_segs = nc;
    }
    struct kv_segment *g = &b->s.segs[b->s.n_segs++];
    g->kind = KV_SEG_CHUNK;
    g->offset = (int64_t)start;
    g->length = (int64_t)(b->s.n_tokens - start);
    return 0;
}

/* Mark kinds: first sys, last question; a single segment is sys and an
 * empty question is added. */
static int finish(struct builder *b, struct kv_split *out, struct kv_err *e)
{
    if (b->s.n_segs == 1 && push_seg(b, b->s.n_tokens) < 0) {
        kv_split_release(&b->s);
        return kv_err_set(e, "out of memory");
    }
    if (b->s.n_tokens > INT32_MAX) {
        kv_split_release(&b->s);
        return kv_err_set(e, "prompt of %zu tokens is too long", b->s.n_tokens);
    }
    b->s.segs[0].kind = KV_SEG_SYS;
    b->s.segs[b->s.n_segs - 1].kind = KV_SEG_QUESTION;
    *out = b->s;
    return 0;
}

int kv_split_text(const char *text, size_t len, const char *sep,
                  struct kv_split *out, struct kv_err *e)
{
    struct builder b;
    size_t sl = sep ? strlen(sep) : 0, start = 0, seg_raw = 0;
    memset(&b, 0, sizeof b);
    if (sl == 0)
        return kv_err_set(e, "--sep: the separator must not be empty");
    if (sep[0] == '\\')
        return kv_err_set(e, "--sep: the separator must not start with a "
                          "backslash");
    for (size_t i = 0; i < len;) {
        if (len - i >= sl && memcmp(text + i, sep, sl) == 0) {
            size_t k = 0;
            while (i - k > seg_raw && text[i - k - 1] == '\\')
                k++;
            /* the k backslashes were copied as tokens: keep k/2 of them */
            b.s.n_tokens -= k - k / 2;
            if (k % 2) {
                for (size_t j = 0; j < sl; j++)
                    if (push_token(&b, (unsigned char)sep[j]) < 0)
                        goto oom;
                i += sl;
                continue;
            }
            if (push_seg(&b, start) < 0)
                goto oom;
            start = b.s.n_tokens;
            i += sl;
            seg_raw = i;
            continue;
        }
        if (push_token(&b, (unsigned char)text[i]) < 0)
            goto oom;
        i++;
    }
    if (push_seg(&b, start) < 0)
        goto oom;
    return finish(&b, out, e);
oom:
    kv_split_release(&b.s);
    return kv_err_set(e, "out of memory");
}

int kv_split_ids(const int32_t *ids, size_t n, const int32_t *sep,
                 size_t n_sep, struct kv_split *out, struct kv_err *e)
{
    struct builder b;
    size_t start = 0;
    memset(&b, 0, sizeof b);
    if (n_sep == 0)
        return kv_err_set(e, "--sep-ids: the separator must not be empty");
    for (size_t i = 0; i < n;) {
        if (n - i >= n_sep && memcmp(ids + i, sep, n_sep * sizeof *sep) == 0) {
            if (push_seg(&b, start) < 0)
                goto oom;
            start = b.s.n_tokens;
            i += n_sep;
            continue;
        }
        if (push_token(&b, ids[i]) < 0)
            goto oom;
        i++;
    }
    if (push_seg(&b, start) < 0)
        goto oom;
    return finish(&b, out, e);
oom:
    kv_split_release(&b.s);
    return kv_err_set(e, "out of memory");
}

void kv_tokens_release(struct kv_tokens *t)
{
    free(t->owned);
    if (t->map)
        munmap(t->map, t->map_len);
    memset(t, 0, sizeof *t);
}

/* An integer .npy in memory -> int32 ids. */
static int npy_ids(const char *name, char *buf, size_t len, size_t max_bytes,
                   struct kv_tokens *t, struct kv_err *e)
{
    struct kv_tensor x;
    FILE *m = fmemopen(buf, len, "rb");
    int rc;
    if (!m)
        return kv_err_set(e, "out of memory");
    kv_tensor_init(&x);
    rc = kv_npy_read_one(m, max_bytes, &x, e);
    fclose(m);
    if (rc != 0)
        return rc < 0 ? kv_err_prefix(e, "'%s'", name)
                      : kv_err_set(e, "'%s': no array", name);
    if (kv_dtype_is_float(x.dtype) || x.dtype == KV_BOOL) {
        kv_err_set(e, "'%s': token ids must be integers, found %s", name,
                   kv_dtype_name(x.dtype));
        kv_tensor_release(&x);
        return -1;
    }
    size_t n = kv_tensor_numel(&x);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        kv_tensor_release(&x);
        return kv_err_set(e, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v = kv_tensor_get_i64(&x, i);
        if (v < INT32_MIN || v > INT32_MAX ||
            (x.dtype == KV_U64 && ((const uint64_t *)x.data)[i] > INT32_MAX)) {
            kv_err_set(e, "'%s': token id %lld at index %zu does not fit in "
                       "int32", name, (long long)v, i);
            free(ids);
            kv_tensor_release(&x);
            return -1;
        }
        ids[i] = (int32_t)v;
    }
    kv_tensor_release(&x);
    t->owned = ids;
    t->ids = ids;
    t->n = n;
    return 0;
}

/* Whitespace/comma-separated decimal ids, '#' to the end of a line is a
 * comment. */
static int text_ids(const char *name, const char *buf, size_t len,
                    struct kv_tokens *t, struct kv_err *e)
{
    size_t cap = 1024, n = 0, line = 1;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = buf, *end = buf + len;
    if (!ids)
        return kv_err_set(e, "out of memory");
    while (p < end) {
        if (*p == '\n') {
            line++;
            p++;
            continue;
        }
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == ',') {
            p++;
            continue;
        }
        if (*p == '#') {
            while (p < end && *p != '\n')
                p++;
            continue;
        }
        char *ep;
        errno = 0;
        long long v = strtoll(p, &ep, 10);
        if (ep == p || errno == ERANGE || v < INT32_MIN || v > INT32_MAX ||
            (ep < end && !(*ep == ' ' || *ep == '\t' || *ep == '\r' ||
                           *ep == '\n' || *ep == ',' || *ep == '#'))) {
            const char *te = p;
            while (te < end && !(*te == ' ' || *te == '\t' || *te == '\n'))
                te++;
            kv_err_set(e, "'%s' line %zu: expected a token id (int32), found "
                       "'%.*s'", name, line, (int)(te - p > 20 ? 20 : te - p),
                       p);
            free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *ni = realloc(ids, cap * 2 * sizeof *ids);
            if (!ni) {
                free(ids);
                return kv_err_set(e, "out of memory");
            }
            ids = ni;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = ep;
    }
    t->owned = ids;
    t->ids = ids;
    t->n = n;
    return 0;
}

/* Try to map an int32 .npy regular file.  Returns 1 when done, 0 when the
 * file is something else (caller reads it the ordinary way), -1 on error. */
static int try_map(const char *path, size_t max_bytes, struct kv_tokens *t,
                   struct kv_err *e)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 128) {
        close(fd);
        return 0;
    }
    size_t flen = (size_t)st.st_size;
    void *m = mmap(NULL, flen, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    const unsigned char *b = m;
    if (memcmp(b, "\x93NUMPY", 6) != 0 || b[6] != 1) {
        munmap(m, flen);
        return 0;
    }
    size_t hl = (size_t)b[8] | (size_t)b[9] << 8;
    if (10 + hl > flen) {
        munmap(m, flen);
        return 0;
    }
    struct kv_npy_header h;
    struct kv_err e2;
    if (kv_npy_parse_dict((const char *)b + 10, hl, max_bytes, &h, &e2) < 0 ||
        h.dtype != KV_I32 || (10 + hl) % 4 != 0 ||
        h.nbytes != flen - 10 - hl) {
        /* trailing arrays, other dtypes, odd headers: the ordinary way */
        munmap(m, flen);
        return 0;
    }
    (void)e;
    madvise(m, flen, MADV_SEQUENTIAL);
    t->map = m;
    t->map_len = flen;
    t->ids = (const int32_t *)(const void *)(b + 10 + hl);
    t->n = h.nbytes / 4;
    return 1;
}

int kv_tokens_load(const char *path, size_t max_bytes, struct kv_tokens *t,
                   struct kv_err *e)
{
    const char *name = kv_path_name(path, 0);
    struct kv_tokens r;
    char *buf = NULL;
    size_t len = 0;
    int rc;
    memset(&r, 0, sizeof r);
    if (path && strcmp(path, "-") != 0) {
        rc = try_map(path, max_bytes, &r, e);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            *t = r;
            return 0;
        }
    }
    if (kv_read_all(path, max_bytes, &buf, &len, e) < 0)
        return -1;
    if (len >= 6 && memcmp(buf, "\x93NUMPY", 6) == 0)
        rc = npy_ids(name, buf, len, max_bytes, &r, e);
    else
        rc = text_ids(name, buf, len, &r, e);
    free(buf);
    if (rc < 0)
        return -1;
    *t = r;
    return 0;
}

const char *kv_base_policy_name(enum kv_base_policy p)
{
    switch (p) {
    case KV_BASE_ZERO: return "zero";
    case KV_BASE_FREE: return "free";
    default: return "context";
    }
}

int kv_base_policy_parse(const char *s, enum kv_base_policy *out,
                         struct kv_err *e)
{
    if (strcmp(s, "context") == 0)
        *out = KV_BASE_CONTEXT;
    else if (strcmp(s, "zero") == 0)
        *out = KV_BASE_ZERO;
    else if (strcmp(s, "free") == 0)
        *out = KV_BASE_FREE;
    else
        return kv_err_set(e, "--base-policy: expected context, zero or free, "
                          "got '%s'", s);
    return 0;
}

static int bad_value(const char *name, const char *v, struct kv_err *e)
{
    if (v && (strchr(v, '\n') || strlen(v) > 4096))
        return kv_err_set(e, "--%s: must be one line of at most 4096 bytes",
                          name);
    return 0;
}

int kv_ns_text(const struct kv_namespace *ns, char **out, struct kv_err *e)
{
    char rope[4096];
    if (bad_value("model", ns->model, e) || bad_value("tokenizer",
        ns->tokenizer, e) || bad_value("lora", ns->lora, e) ||
        bad_value("salt", ns->salt, e))
        return -1;
    if (ns->dtype != KV_F16 && ns->dtype != KV_BF16 && ns->dtype != KV_F32)
        return kv_err_set(e, "KV dtype must be f16, bf16 or f32, not %s",
                          kv_dtype_name(ns->dtype));
    if (kv_rope_check(&ns->rope, e) < 0 ||
        kv_rope_describe(&ns->rope, rope, sizeof rope) < 0)
        return -1;
    size_t cap = 1024 + 4 * 4097 + sizeof rope;
    char *s = malloc(cap);
    if (!s)
        return kv_err_set(e, "out of memory");
    char layout[64];
    if (ns->kv_lora_rank > 0)
        snprintf(layout, sizeof layout, "LTD kv_lora_rank=%lld", (long long)ns->kv_lora_rank);
    else
        snprintf(layout, sizeof layout, "L2THD");
    int n = snprintf(s, cap,
                     "base_pos=%s\ndtype=%s\nhead_dim=%lld\nlayout=%s\n"
                     "lora=%s\nmask=%s\nmodel=%s\nn_kv_heads=%lld\n"
                     "n_layers=%lld\nrope=%s\nsalt=%s\ntokenizer=%s\n",
                     kv_base_policy_name(ns->base), kv_dtype_name(ns->dtype),
                     (long long)ns->head_dim, layout, ns->lora ? ns->lora : "",
                     ns->mask == KV_CTX_NONE ? "none" : "sys",
                     ns->model ? ns->model : "", (long long)ns->n_kv_heads,
                     (long long)ns->n_layers, rope, ns->salt ? ns->salt : "",
                     ns->tokenizer ? ns->tokenizer : "");
    if (n < 0 || (size_t)n >= cap) {
        free(s);
        return kv_err_set(e, "namespace text too long");
    }
    *out = s;
    return 0;
}

static void digest128(const void *p, size_t n, uint8_t out[16])
{
    kv_xxh3_128_cat(p, n, NULL, 0, out);
}

int kv_ns_digest(const struct kv_namespace *ns, uint8_t digest[16],
                 struct kv_err *e)
{
    char *s;
    if (kv_ns_text(ns, &s, e) < 0)
        return -1;
    digest128(s, strlen(s), digest);
    free(s);
    return 0;
}

static int host_is_le(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

void kv_ctx_digest(enum kv_ctx_mode mode, const int32_t *sys, size_t n_sys,
                   uint8_t digest[16])
{
    if (mode == KV_CTX_NONE) {
        memset(digest, 0, 16);
        return;
    }
    if (host_is_le()) {
        kv_xxh3_128_cat(sys, n_sys * 4, NULL, 0, digest);
        return;
    }
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    {
        for (size_t i = 0; i < n_sys; i++) {
            uint32_t v = (uint32_t)sys[i];
            uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                            (uint8_t)(v >> 24)};
            XXH3_128bits_update(&st, b, 4);
        }
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(digest, c.digest, 16);
}

static const char key_tag[10] = "kvchunk/1";   /* with its NUL: 10 bytes */

void kv_chunk_key(const uint8_t ns[16], const uint8_t ctx[16],
                  const int32_t *tok, size_t n, uint8_t key[16])
{
    uint8_t head[10 + 17 + 17 + 5];
    uint32_t n32 = (uint32_t)n;
    memcpy(head, key_tag, 10);
    head[10] = 1;
    memcpy(head + 11, ns, 16);
    head[27] = 2;
    memcpy(head + 28, ctx, 16);
    head[44] = 3;
    head[45] = (uint8_t)n32;
    head[46] = (uint8_t)(n32 >> 8);
    head[47] = (uint8_t)(n32 >> 16);
    head[48] = (uint8_t)(n32 >> 24);
    if (host_is_le()) {
        kv_xxh3_128_cat(head, sizeof head, tok, n * 4, key);
        return;
    }
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, head, sizeof head);
    {
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)tok[i];
            uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                            (uint8_t)(v >> 24)};
            XXH3_128bits_update(&st, b, 4);
        }
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(key, c.digest, 16);
}

void kv_chunk_key_ref(const uint8_t ns[16], const uint8_t ctx[16],
                      const int32_t *tok, size_t n, uint8_t key[16])
{
    size_t len = 10 + 17 + 17 + 5 + 4 * n, o = 0;
    uint8_t *p = malloc(len);
    if (!p) {
        memset(key, 0, 16);
        return;
    }
    memcpy(p, "kvchunk/1", 10);        /* the NUL is the tenth byte */
    o = 10;
    p[o++] = 1;
    for (int i = 0; i < 16; i++)
        p[o++] = ns[i];
    p[o++] = 2;
    for (int i = 0; i < 16; i++)
        p[o++] = ctx[i];
    p[o++] = 3;
    for (int s = 0; s < 32; s += 8)
        p[o++] = (uint8_t)((uint32_t)n >> s);
    for (size_t i = 0; i < n; i++)
        for (int s = 0; s < 32; s += 8)
            p[o++] = (uint8_t)((uint32_t)tok[i] >> s);
    XXH128_hash_t h = XXH3_128bits(p, len);
    for (int i = 0; i < 8; i++) {
        key[i] = (uint8_t)(h.high64 >> (56 - 8 * i));
        key[8 + i] = (uint8_t)(h.low64 >> (56 - 8 * i));
    }
    free(p);
}

void kv_hex(const uint8_t b[16], char hex[33])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        hex[2 * i] = d[b[i] >> 4];
        hex[2 * i + 1] = d[b[i] & 15];
    }
    hex[32] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int kv_unhex(const char *hex, uint8_t b[16])
{
    uint8_t t[16];
    if (strlen(hex) != 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        t[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(b, t, 16);
    return 0;
}

int64_t kv_base_pos_for(const struct kv_namespace *ns, int64_t n_ctx)
{
    switch (ns->base) {
    case KV_BASE_ZERO: return 0;
    case KV_BASE_FREE: return -1;
    default: return ns->mask == KV_CTX_SYS ? n_ctx : 0;
    }
}
