/* sim.c - replay of RAG request traces through KV cache policies at one
 * byte budget: no cache, vLLM automatic prefix caching (block hashes chained
 * over full blocks, LRU free queue, tail-first freeing), kvchunk's chunk
 * cache (whole chunks keyed by content, the system prompt as a prefix, LRU
 * or LFU by bytes) and an infinite chunk cache.  Also the trace reader; the
 * generator and the split converter are in trace.c.
 *
 * The model of a prompt.  A request's prompt is a list of segments (system
 * prompt, history of its conversation, retrieved chunks, question); each
 * segment is named by a 64-bit content key and a length.  Token i of a
 * segment is identified by (key, i), so the simulator never holds tokens:
 * the prefix cache hashes a block as its parent's hash and the runs
 * (key, offset, length) it covers, which is the same as hashing its token
 * ids as long as equal keys mean equal content.  The question and the
 * output of each request get keys of their own (never shared).
 */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include "sim/sim.h"

/* ---- small helpers ----------------------------------------------------- */

uint64_t kv_sim_mix(uint64_t a, uint64_t b)
{
    uint64_t v[2] = { a, b };
    uint64_t h = XXH3_64bits(v, sizeof v);
    return h ? h : 1;
}

uint64_t kv_sim_key_id(const char *id, size_t n, int64_t len)
{
    uint64_t h = XXH3_64bits_withSeed(id, n, 0x6b7673696d6964ULL);
    return kv_sim_mix(h, (uint64_t)len);
}

uint64_t kv_sim_key_tokens(const int32_t *tok, size_t n)
{
    /* int32 little-endian token ids, as kvchunk keys serialise them. */
    uint64_t h = XXH3_64bits_withSeed(tok, n * sizeof *tok,
                                      0x6b7673696d746bULL);
    return kv_sim_mix(h, (uint64_t)n);
}

/* Open-addressing map from a non-zero 64-bit hash to a 32-bit index, linear
 * probing with backward-shift deletion; key and value share a slot so that
 * a probe touches one cache line.  Keys are already well mixed. */
struct slot {
    uint64_t key;    /* 0: empty */
    uint64_t val;
};

struct map {
    struct slot *s;
    size_t cap;      /* power of two, or 0 */
    size_t n;
};

static void map_release(struct map *m)
{
    free(m->s);
    memset(m, 0, sizeof *m);
}

static int map_grow(struct map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    struct slot *ns;
    if (ncap > SIZE_MAX / 2 / sizeof *ns || !(ns = calloc(ncap, sizeof *ns)))
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->s[i].key)
            continue;
        size_t j = m->s[i].key & (ncap - 1);
        while (ns[j].key)
            j = (j + 1) & (ncap - 1);
        ns[j] = m->s[i];
    }
    free(m->s);
    m->s = ns;
    m->cap = ncap;
    return 0;
}

/* Make room for one more key (call before map_slot when inserting). */
static int map_reserve(struct map *m)
{
    if ((m->n + 1) * 10 > m->cap * 7)
        return map_grow(m);
    return 0;
}

/* Slot of key k, or of the empty slot where it would go (cap > 0). */
static size_t map_slot(const struct map *m, uint64_t k)
{
    size_t j = k & (m->cap - 1);
    while (m->s[j].key && m->s[j].key != k)
        j = (j + 1) & (m->cap - 1);
    return j;
}

static int64_t map_get(const struct map *m, uint64_t k)
{
    if (!m->cap)
        return -1;
    size_t j = map_slot(m, k);
    return m->s[j].key ? (int64_t)m->s[j].val : -1;
}

/* Insert or overwrite. */
static int map_put(struct map *m, uint64_t k, uint32_t v)
{
    if (map_reserve(m) < 0)
        return -1;
    size_t j = map_slot(m, k);
    if (!m->s[j].key) {
        m->s[j].key = k;
        m->n++;
    }
    m->s[j].val = v;
    return 0;
}

/* Empty slot j (which holds a key). */
static void map_del_slot(struct map *m, size_t j)
{
    size_t mask = m->cap - 1;
    m->s[j].key = 0;
    m->n--;
    /* Shift back the entries of the probe run that follows the hole. */
    for (size_t i = (j + 1) & mask; m->s[i].key; i = (i + 1) & mask) {
        size_t home = m->s[i].key & mask;
        /* Can the entry at i move to j?  Only if its home is not in (j, i]. */
        int between = j <= i ? (home > j && home <= i)
                             : (home > j || home <= i);
        if (!between) {
            m->s[j] = m->s[i];
            m->s[i].key = 0;
            j = i;
        }
    }
}

static void map_del(struct map *m, uint64_t k)
{
    if (!m->cap)
        return;
    size_t j = map_slot(m, k);
    if (m->s[j].key)
        map_del_slot(m, j);
}

static size_t map_mem(const struct map *m)
{
    return m->cap * sizeof *m->s;
}

/* Grow a buffer to hold at least n elements of size sz. */
static int grow(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < n) {
        if (ncap > SIZE_MAX / 2 / sz)
            return -1;
        ncap *= 2;
    }
    void *q = realloc(*p, ncap * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = ncap;
    return 0;
}

/* ---- trace reader ------------------------------------------------------ */

struct kv_sim_reader {
    FILE *f;
    const char *name;
    char *line;
    size_t line_cap;
    uint64_t line_no;
    double last_t;
    struct kv_sim_seg *chunks;
    size_t chunks_cap;
    int32_t *tok;
    size_t tok_cap;
};

int kv_sim_reader_open(struct kv_sim_reader **out, FILE *f, const char *name,
                       struct kv_err *e)
{
    struct kv_sim_reader *r = calloc(1, sizeof *r);
    if (!r)
        return kv_err_set(e, "out of memory");
    r->f = f;
    r->name = name ? name : "<stdin>";
    *out = r;
    return 0;
}

void kv_sim_reader_free(struct kv_sim_reader *r)
{
    if (!r)
        return;
    free(r->line);
    free(r->chunks);
    free(r->tok);
    free(r);
}

static const char *const field_names[] = {
    "time", "tenant", "sys", "chunks", "question", "output", "session"
};

static int bad(struct kv_sim_reader *r, struct kv_err *e, int field,
               const char *what, const char *s, size_t n)
{
    if (n > 60)
        n = 60;
    return kv_err_set(e, "'%s' line %llu, field %d (%s): %s: '%.*s'",
                      r->name, (unsigned long long)r->line_no, field + 1,
                      field_names[field], what, (int)n, s);
}

/* Parse a non-negative decimal integer s[0..n) into *v (<= max).  Returns
 * 0, or -1 with a reason in *why. */
static int parse_len(const char *s, size_t n, int64_t max, int64_t *v,
                     const char **why)
{
    int64_t x = 0;
    if (n == 0) {
        *why = "expected a length";
        return -1;
    }
    if (s[0] == '-') {
        *why = "negative length";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            *why = "expected a length (a decimal integer)";
            return -1;
        }
        x = x * 10 + (s[i] - '0');
        if (x > max) {
            *why = "length too large";
            return -1;
        }
    }
    *v = x;
    return 0;
}

/* Parse one segment: ID:LEN or T/T/T (token ids). */
static int parse_seg(struct kv_sim_reader *r, struct kv_err *e, int field,
                     const char *s, size_t n, int kind, int64_t min_len,
                     struct kv_sim_seg *seg)
{
    const char *colon = memchr(s, ':', n);
    const char *why;
    seg->kind = kind;
    seg->name = s;
    seg->name_len = (int)(n > 200 ? 200 : n);
    if (colon) {
        size_t idn = (size_t)(colon - s);
        int64_t len;
        if (idn == 0)
            return bad(r, e, field, "empty id", s, n);
        if (memchr(s, '/', idn))
            return bad(r, e, field, "'/' in an id", s, n);
        if (parse_len(colon + 1, n - idn - 1, KV_SIM_MAX_LEN - 1, &len,
                      &why) < 0)
            return bad(r, e, field, why, s, n);
        if (len < min_len)
            return bad(r, e, field, "length must be at least 1", s, n);
        seg->key = kv_sim_key_id(s, idn, len);
        seg->len = len;
        seg->name_len = (int)(idn > 200 ? 200 : idn);
        return 0;
    }
    /* Token ids separated by '/'. */
    size_t nt = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int64_t v = 0;
        if (s[j] == '-')
            return bad(r, e, field, "negative token id", s, n);
        while (j < n && s[j] >= '0' && s[j] <= '9') {
            v = v * 10 + (s[j] - '0');
            if (v > INT32_MAX)
                return bad(r, e, field, "token id too large", s, n);
            j++;
        }
        if (j == i || (j < n && s[j] != '/'))
            return bad(r, e, field, "expected ID:LEN or token ids T/T/T",
                       s, n);
        if (grow((void **)&r->tok, &r->tok_cap, nt + 1, sizeof *r->tok) < 0)
            return kv_err_set(e, "out of memory");
        r->tok[nt++] = (int32_t)v;
        i = j + (j < n);
        if (j < n && i == n)
            return bad(r, e, field, "trailing '/'", s, n);
    }
    if ((int64_t)nt >= KV_SIM_MAX_LEN)
        return bad(r, e, field, "too many tokens", s, n);
    seg->key = kv_sim_key_tokens(r->tok, nt);
    seg->len = (int64_t)nt;
    return 0;
}

/* ---- JSON lines --------------------------------------------------------
 * The same request as one JSON object per line (the form of the chunk-cache
 * spec):
 *   {"t":12.5,"tenant":"a","sys":{"id":"s1","len":600},
 *    "chunks":[{"id":"d913","len":480},{"tokens":[1,2,3]}],
 *    "q_len":40,"out_len":64,"session":"c7"}
 * Every key but chunks, q_len and out_len may be left out or null; other
 * keys are ignored.  Ids are compared as written (escapes included). */

struct jp {
    const char *p, *end;
    struct kv_sim_reader *r;
    struct kv_err *e;
};

static int jbad(struct jp *j, const char *key, const char *what)
{
    return kv_err_set(j->e, "'%s' line %llu, key '%s': %s", j->r->name,
                      (unsigned long long)j->r->line_no, key, what);
}

static void jws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t'))
        j->p++;
}

static int jlit(struct jp *j, char c)
{
    jws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

/* A string: *s and *n get its raw contents (between the quotes). */
static int jstr(struct jp *j, const char **s, size_t *n)
{
    jws(j);
    if (j->p >= j->end || *j->p != '"')
        return -1;
    const char *b = ++j->p;
    while (j->p < j->end && *j->p != '"')
        j->p += (*j->p == '\\' && j->p + 1 < j->end) ? 2 : 1;
    if (j->p >= j->end)
        return -1;
    *s = b;
    *n = (size_t)(j->p - b);
    j->p++;
    return 0;
}

static int jnull(struct jp *j)
{
    jws(j);
    if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) {
        j->p += 4;
        return 1;
    }
    return 0;
}

static int jnum(struct jp *j, double *v)
{
    char buf[64], *q;
    size_t k = 0;
    jws(j);
    while (j->p + k < j->end && k < sizeof buf - 1 &&
           strchr("+-0123456789.eE", j->p[k]))
        k++;
    if (!k)
        return -1;
    memcpy(buf, j->p, k);
    buf[k] = 0;
    errno = 0;
    *v = strtod(buf, &q);
    if (*q || errno || !isfinite(*v))
        return -1;
    j->p += k;
    return 0;
}

/* A length: an integer in [min, KV_SIM_MAX_LEN). */
static int jlen(struct jp *j, const char *key, int64_t min, int64_t *out)
{
    double v;
    if (jnum(j, &v) < 0)
        return jbad(j, key, "expected a length");
    if (v < 0)
        return jbad(j, key, "negative length");
    if (v != floor(v) || v >= (double)KV_SIM_MAX_LEN)
        return jbad(j, key, "expected an integer length");
    if (v < (double)min)
        return jbad(j, key, "length must be at least 1");
    *out = (int64_t)v;
    return 0;
}

/* Skip any value. */
static int jskip(struct jp *j, int depth)
{
    const char *s;
    size_t n;
    double v;
    jws(j);
    if (depth > 32 || j->p >= j->end)
        return -1;
    if (*j->p == '"')
        return jstr(j, &s, &n);
    if (*j->p == '{' || *j->p == '[') {
        char close = *j->p == '{' ? '}' : ']';
        int obj = *j->p == '{';
        j->p++;
        if (jlit(j, close))
            return 0;
        do {
            if (obj && (jstr(j, &s, &n) < 0 || !jlit(j, ':')))
                return -1;
            if (jskip(j, depth + 1) < 0)
                return -1;
        } while (jlit(j, ','));
        return jlit(j, close) ? 0 : -1;
    }
    if (jnull(j))
        return 0;
    if (j->end - j->p >= 4 && !memcmp(j->p, "true", 4)) {
        j->p += 4;
        return 0;
    }
    if (j->end - j->p >= 5 && !memcmp(j->p, "false", 5)) {
        j->p += 5;
        return 0;
    }
    return jnum(j, &v);
}

/* A segment object {"id":..,"len":..} or {"tokens":[..]}. */
static int jseg(struct jp *j, const char *key, int kind, int64_t min_len,
                struct kv_sim_seg *seg)
{
    const char *id = NULL, *k;
    size_t idn = 0, kn, nt = 0;
    int64_t len = -1;
    int have_tok = 0;
    if (!jlit(j, '{'))
        return jbad(j, key, "expected {\"id\": ..., \"len\": ...}");
    if (!jlit(j, '}')) {
        do {
            if (jstr(j, &k, &kn) < 0 || !jlit(j, ':'))
                return jbad(j, key, "malformed object");
            if (kn == 2 && !memcmp(k, "id", 2)) {
                double v;
                const char *save = j->p;
                if (jstr(j, &id, &idn) < 0) {
                    /* a numeric id is taken as written */
                    j->p = save;
                    jws(j);
                    id = j->p;
                    if (jnum(j, &v) < 0)
                        return jbad(j, key, "id: expected a string");
                    idn = (size_t)(j->p - id);
                }
            } else if (kn == 3 && !memcmp(k, "len", 3)) {
                if (jlen(j, key, min_len, &len) < 0)
                    return -1;
            } else if (kn == 6 && !memcmp(k, "tokens", 6)) {
                have_tok = 1;
                if (!jlit(j, '['))
                    return jbad(j, key, "tokens: expected an array");
                if (!jlit(j, ']')) {
                    do {
                        double v;
                        if (jnum(j, &v) < 0 || v < 0 || v > INT32_MAX ||
                            v != floor(v))
                            return jbad(j, key, "tokens: expected token "
                                        "ids");
                        if (grow((void **)&j->r->tok, &j->r->tok_cap, nt + 1,
                                 sizeof *j->r->tok) < 0)
                            return kv_err_set(j->e, "out of memory");
                        j->r->tok[nt++] = (int32_t)v;
                    } while (jlit(j, ','));
                    if (!jlit(j, ']'))
                        return jbad(j, key, "tokens: malformed array");
                }
            } else if (jskip(j, 1) < 0) {
                return jbad(j, key, "malformed value");
            }
        } while (jlit(j, ','));
        if (!jlit(j, '}'))
            return jbad(j, key, "malformed object");
    }
    seg->kind = kind;
    if (have_tok) {
        if ((int64_t)nt < min_len)
            return jbad(j, key, "length must be at least 1");
        seg->key = kv_sim_key_tokens(j->r->tok, nt);
        seg->len = (int64_t)nt;
        seg->name = "tokens";
        seg->name_len = 6;
        return 0;
    }
    if (!id || !idn)
        return jbad(j, key, "missing id");
    if (len < 0)
        return jbad(j, key, "missing len");
    seg->key = kv_sim_key_id(id, idn, len);
    seg->len = len;
    seg->name = id;
    seg->name_len = (int)(idn > 200 ? 200 : idn);
    return 0;
}

static int json_line(struct kv_sim_reader *r, const char *s, size_t n,
                     struct kv_sim_req *req, struct kv_err *e)
{
    struct jp j = { s, s + n, r, e };
    struct kv_sim_req q;
    const char *k, *v;
    size_t kn, vn, nc = 0;
    int have_q = 0, have_out = 0, have_chunks = 0;
    memset(&q, 0, sizeof q);
    q.line = r->line_no;
    q.t = r->last_t;
    j.p++;   /* '{' */
    if (!jlit(&j, '}')) {
        do {
            if (jstr(&j, &k, &kn) < 0 || !jlit(&j, ':'))
                return kv_err_set(e, "'%s' line %llu, column %zu: malformed "
                                  "JSON object", r->name,
                                  (unsigned long long)r->line_no,
                                  (size_t)(j.p - s) + 1);
            char key[16] = "";
            if (kn < sizeof key)
                memcpy(key, k, kn);
            if (!strcmp(key, "t")) {
                if (!jnull(&j)) {
                    if (jnum(&j, &q.t) < 0)
                        return jbad(&j, "t", "expected seconds");
                    if (q.t < 0)
                        return jbad(&j, "t", "negative time");
                    if (q.t < r->last_t)
                        return jbad(&j, "t", "time goes backwards");
                }
            } else if (!strcmp(key, "tenant") || !strcmp(key, "session")) {
                uint64_t h = 0;
                if (!jnull(&j)) {
                    const char *save = j.p;
                    double num;
                    if (jstr(&j, &v, &vn) < 0) {
                        j.p = save;
                        jws(&j);
                        v = j.p;
                        if (jnum(&j, &num) < 0)
                            return jbad(&j, key, "expected a string");
                        vn = (size_t)(j.p - v);
                    }
                    h = kv_sim_mix(XXH3_64bits(v, vn),
                                   key[0] == 't' ? 0x74656e : 0x736573);
                    if (key[0] == 't' && vn == 1 && v[0] == '-')
                        h = 0;
                }
                if (key[0] == 't')
                    q.tenant = h;
                else
                    q.session = h;
            } else if (!strcmp(key, "sys")) {
                if (!jnull(&j) &&
                    jseg(&j, "sys", KV_SIM_SEG_SYS, 0, &q.sys) < 0)
                    return -1;
            } else if (!strcmp(key, "chunks")) {
                have_chunks = 1;
                if (!jlit(&j, '['))
                    return jbad(&j, "chunks", "expected an array");
                if (!jlit(&j, ']')) {
                    do {
                        if (grow((void **)&r->chunks, &r->chunks_cap, nc + 1,
                                 sizeof *r->chunks) < 0)
                            return kv_err_set(e, "out of memory");
                        if (jseg(&j, "chunks", KV_SIM_SEG_CHUNK, 1,
                                 &r->chunks[nc]) < 0)
                            return -1;
                        nc++;
                    } while (jlit(&j, ','));
                    if (!jlit(&j, ']'))
                        return jbad(&j, "chunks", "malformed array");
                }
            } else if (!strcmp(key, "q_len")) {
                have_q = 1;
                if (jlen(&j, "q_len", 0, &q.q_len) < 0)
                    return -1;
            } else if (!strcmp(key, "out_len")) {
                have_out = 1;
                if (jlen(&j, "out_len", 0, &q.out_len) < 0)
                    return -1;
            } else if (jskip(&j, 1) < 0) {
                return kv_err_set(e, "'%s' line %llu, column %zu: malformed "
                                  "JSON value", r->name,
                                  (unsigned long long)r->line_no,
                                  (size_t)(j.p - s) + 1);
            }
        } while (jlit(&j, ','));
        if (!jlit(&j, '}'))
            return kv_err_set(e, "'%s' line %llu, column %zu: malformed "
                              "JSON object", r->name,
                              (unsigned long long)r->line_no,
                              (size_t)(j.p - s) + 1);
    }
    jws(&j);
    if (j.p != j.end)
        return kv_err_set(e, "'%s' line %llu: text after the JSON object",
                          r->name, (unsigned long long)r->line_no);
    if (!have_chunks || !have_q || !have_out)
        return kv_err_set(e, "'%s' line %llu: missing key '%s'", r->name,
                          (unsigned long long)r->line_no,
                          !have_chunks ? "chunks" : !have_q ? "q_len" :
                          "out_len");
    r->last_t = q.t;
    q.chunks = r->chunks;
    q.n_chunks = nc;
    *req = q;
    return 1;
}

int kv_sim_reader_next(struct kv_sim_reader *r, struct kv_sim_req *req,
                       struct kv_err *e)
{
    for (;;) {
        errno = 0;
        ssize_t got = getline(&r->line, &r->line_cap, r->f);
        if (got < 0) {
            if (ferror(r->f))
                return kv_err_set(e, "cannot read '%s': %s", r->name,
                                  strerror(errno ? errno : EIO));
            return 0;
        }
        r->line_no++;
        char *s = r->line;
        size_t n = (size_t)got;
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
            n--;
        /* Split into at most 8 fields. */
        const char *f[8];
        size_t fl[8];
        int nf = 0;
        size_t i = 0;
        while (i < n && (s[i] == ' ' || s[i] == '\t'))
            i++;
        if (i == n || s[i] == '#')
            continue;
        if (memchr(s, '\0', n))
            return kv_err_set(e, "'%s' line %llu: NUL byte in the line",
                              r->name, (unsigned long long)r->line_no);
        if (s[i] == '{')
            return json_line(r, s + i, n - i, req, e);
        while (i < n) {
            size_t j = i;
            while (j < n && s[j] != ' ' && s[j] != '\t')
                j++;
            if (nf == 7)
                return kv_err_set(e, "'%s' line %llu: more than 7 fields "
                                  "(time tenant sys chunks question output "
                                  "[session])", r->name,
                                  (unsigned long long)r->line_no);
            f[nf] = s + i;
            fl[nf] = j - i;
            nf++;
            i = j;
            while (i < n && (s[i] == ' ' || s[i] == '\t'))
                i++;
        }
        if (nf < 6)
            return kv_err_set(e, "'%s' line %llu: %d field%s, expected 6 or "
                              "7 (time tenant sys chunks question output "
                              "[session])", r->name,
                              (unsigned long long)r->line_no, nf,
                              nf == 1 ? "" : "s");

        struct kv_sim_req q;
        memset(&q, 0, sizeof q);
        q.line = r->line_no;
        /* time */
        {
            char buf[64], *end;
            if (fl[0] >= sizeof buf)
                return bad(r, e, 0, "expected seconds", f[0], fl[0]);
            memcpy(buf, f[0], fl[0]);
            buf[fl[0]] = 0;
            errno = 0;
            q.t = strtod(buf, &end);
            if (*end || errno || !isfinite(q.t))
                return bad(r, e, 0, "expected seconds", f[0], fl[0]);
            if (q.t < 0)
                return bad(r, e, 0, "negative time", f[0], fl[0]);
            if (q.t < r->last_t)
                return bad(r, e, 0, "time goes backwards", f[0], fl[0]);
            r->last_t = q.t;
        }
        /* tenant */
        if (!(fl[1] == 1 && f[1][0] == '-'))
            q.tenant = kv_sim_mix(XXH3_64bits(f[1], fl[1]), 0x74656e);
        /* sys */
        if (!(fl[2] == 1 && f[2][0] == '-')) {
            if (parse_seg(r, e, 2, f[2], fl[2], KV_SIM_SEG_SYS, 0, &q.sys) < 0)
                return -1;
        }
        /* chunks */
        size_t nc = 0;
        if (!(fl[3] == 1 && f[3][0] == '-')) {
            const char *p = f[3], *end = f[3] + fl[3];
            for (;;) {
                const char *c = memchr(p, ',', (size_t)(end - p));
                const char *stop = c ? c : end;
                if (stop == p)
                    return bad(r, e, 3, "empty chunk", f[3], fl[3]);
                if (grow((void **)&r->chunks, &r->chunks_cap, nc + 1,
                         sizeof *r->chunks) < 0)
                    return kv_err_set(e, "out of memory");
                if (parse_seg(r, e, 3, p, (size_t)(stop - p), KV_SIM_SEG_CHUNK,
                              1, &r->chunks[nc]) < 0)
                    return -1;
                nc++;
                if (!c)
                    break;
                p = c + 1;
            }
        }
        q.chunks = r->chunks;
        q.n_chunks = nc;
        /* question, output */
        for (int k = 4; k <= 5; k++) {
            const char *why;
            int64_t v;
            if (parse_len(f[k], fl[k], KV_SIM_MAX_LEN - 1, &v, &why) < 0)
                return bad(r, e, k, why, f[k], fl[k]);
            if (k == 4)
                q.q_len = v;
            else
                q.out_len = v;
        }
        if (nf == 7 && !(fl[6] == 1 && f[6][0] == '-'))
            q.session = kv_sim_mix(XXH3_64bits(f[6], fl[6]), 0x736573);
        *req = q;
        return 1;
    }
}

/* ---- policies ------------------------------------------------------------ */

static const char *const policy_names[KV_SIM_NPOLICIES] = {
    "none", "prefix", "prefix-sorted", "chunk", "chunk-lfu", "oracle",
    "prefix-radix"
};

const char *kv_sim_policy_name(int p)
{
    return p >= 0 && p < KV_SIM_NPOLICIES ? policy_names[p] : "?";
}

int kv_sim_policy_parse(const char *list, unsigned *mask, struct kv_err *e)
{
    unsigned m = 0;
    const char *p = list;
    if (!*p)
        return kv_err_set(e, "empty policy list");
    for (;;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        int found = -1;
        for (int i = 0; i < KV_SIM_NPOLICIES; i++)
            if (strlen(policy_names[i]) == n && !memcmp(policy_names[i], p, n))
                found = i;
        if (found < 0)
            return kv_err_set(e, "unknown policy '%.*s' (expected none, "
                              "prefix, prefix-radix, prefix-sorted, chunk, "
                              "chunk-lfu or oracle)", (int)(n > 40 ? 40 : n),
                              p);
        if (m & (1u << found))
            return kv_err_set(e, "policy '%s' given twice",
                              policy_names[found]);
        m |= 1u << found;
        if (!c)
            break;
        p = c + 1;
    }
    *mask = m;
    return 0;
}

static void hist_put(uint64_t *hist, double us)
{
    int b = 0;
    if (us > 1e-3) {
        b = (int)floor((log10(us) + 3.0) * 100.0);
        if (b >= KV_SIM_HIST)
            b = KV_SIM_HIST - 1;
        if (b < 0)
            b = 0;
    }
    hist[b]++;
}

/* Record one request's modelled TTFT us, arriving at t seconds. */
static void hist_add(struct kv_sim_stats *st, double us, double t)
{
    double t_us = t * 1e6, start, q;
    int first = st->requests <= 1;   /* account() counted this one */
    hist_put(st->hist, us);
    st->ttft_sum_us += us;
    if (us > st->ttft_max_us)
        st->ttft_max_us = us;
    if (first || us < st->ttft_min_us)
        st->ttft_min_us = us;
    start = st->busy_until_us > t_us ? st->busy_until_us : t_us;
    st->busy_until_us = start + us;
    q = st->busy_until_us - t_us;
    hist_put(st->queued_hist, q);
    st->queued_sum_us += q;
    if (q > st->queued_max_us)
        st->queued_max_us = q;
    if (first || q < st->queued_min_us)
        st->queued_min_us = q;
}

/* Quantile q of a histogram whose samples lie in [min, max]: the geometric
 * middle of the bucket that holds it, clamped to [min, max] (so that the
 * quantiles of equal samples are that sample, never a bucket's middle). */
static double quantile(const uint64_t *hist, double min, double max,
                       double q)
{
    uint64_t total = 0, acc = 0;
    for (int i = 0; i < KV_SIM_HIST; i++)
        total += hist[i];
    if (!total)
        return 0;
    uint64_t want = (uint64_t)ceil(q * (double)total);
    if (want < 1)
        want = 1;
    for (int i = 0; i < KV_SIM_HIST; i++) {
        acc += hist[i];
        if (acc >= want) {
            double v = i ? pow(10.0, (i + 0.5) / 100.0 - 3.0) : 0;
            if (v > max)
                v = max;
            return v < min ? min : v;
        }
    }
    return max;
}

double kv_sim_ttft_quantile(const struct kv_sim_stats *s, double q)
{
    return quantile(s->hist, s->ttft_min_us, s->ttft_max_us, q);
}

double kv_sim_queued_quantile(const struct kv_sim_stats *s, double q)
{
    return quantile(s->queued_hist, s->queued_min_us, s->queued_max_us,
                    q);
}

/* Keys a causal run of n tokens starting at position p attends to:
 * sum of (p + i + 1) for i < n. */
static double causal_pairs(int64_t p, int64_t n)
{
    return (double)n * (double)p + (double)n * (double)(n + 1) / 2.0;
}

/* ---- prefix caching (vLLM APC) ----------------------------------------- */

/* One physical block of the pool.  A block is in the free queue (LRU
 * order: head evicted first) unless the request being replayed holds it.
 *
 * The free queue is an array of (block, stamp) in queue order rather than a
 * linked list, so that eviction reads it sequentially and can fetch ahead:
 * appending a block bumps its stamp and pushes (block, stamp); taking a
 * block out of the middle (a hit) bumps its stamp, which makes its entry
 * stale; popping the head skips stale entries.  The array is compacted when
 * it fills up, so it stays within a small multiple of the pool. */
struct pblock {
    uint64_t hash;     /* 0: holds no cached content */
    int32_t dup;       /* next block with the same hash, -1 */
    uint32_t stamp;    /* the queue entry with this stamp is live */
};

struct qent {
    int32_t id;
    uint32_t stamp;
};

/* The prefix cache's map from a block hash h to the first block holding
 * it: open addressing with linear probing, each slot one 64-bit word
 * (h >> 32) << 32 | (block + 1), 0 when empty.  The high half of h is both
 * the home slot and a fingerprint; a fingerprint match is confirmed against
 * the block's full hash, so the map is exact.  Removal finds the slot by
 * its exact word and shifts the run back (no hash needed: the home is in
 * the word).  At most a quarter full: short, predictable probes. */
struct pmap {
    uint64_t *s;
    size_t cap;      /* power of two, or 0 */
    size_t n;
};

static size_t pm_home(const struct pmap *m, uint64_t word)
{
    return (size_t)(word >> 32) & (m->cap - 1);
}

static void pm_prefetch(const struct pmap *m, uint64_t h)
{
    if (m->cap)
        __builtin_prefetch(&m->s[(size_t)(h >> 32) & (m->cap - 1)]);
}

static int pm_reserve(struct pmap *m)
{
    if ((m->n + 1) * 4 <= m->cap)
        return 0;
    size_t ncap = m->cap ? m->cap * 2 : 4096;
    uint64_t *ns;
    if (ncap > SIZE_MAX / 2 / sizeof *ns || !(ns = calloc(ncap, sizeof *ns)))
        return -1;
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t w = m->s[i];
        if (!w)
            continue;
        size_t j = (size_t)(w >> 32) & (ncap - 1);
        while (ns[j])
            j = (j + 1) & (ncap - 1);
        ns[j] = w;
    }
    free(m->s);
    m->s = ns;
    m->cap = ncap;
    return 0;
}

static void pm_del_slot(struct pmap *m, size_t j)
{
    size_t mask = m->cap - 1;
    m->s[j] = 0;
    m->n--;
    for (size_t i = (j + 1) & mask; m->s[i]; i = (i + 1) & mask) {
        size_t home = pm_home(m, m->s[i]);
        /* Can the entry at i move to j?  Only if its home is not in (j, i]. */
        int between = j <= i ? (home > j && home <= i)
                             : (home > j || home <= i);
        if (!between) {
            m->s[j] = m->s[i];
            m->s[i] = 0;
            j = i;
        }
    }
}

struct prefix {
    int64_t B;
    int64_t n_pool;              /* blocks in the pool */
    struct pblock *blk;
    size_t n_made, cap_blk;      /* blocks materialised so far */
    struct qent *q;              /* free queue: q[qh..qt) */
    size_t qh, qt, cap_q;
    struct pmap map;             /* hash -> first block with it */
    int32_t *held;               /* blocks of the current request */
    size_t cap_held;
    uint64_t *hashes;
    size_t cap_hashes;
    unsigned char *buf;          /* one block's hash preimage */
    size_t cap_buf;
    struct kv_sim_stats st;
};

static int q_live(const struct prefix *p, size_t i)
{
    return p->blk[p->q[i].id].stamp == p->q[i].stamp;
}

/* Take block x out of the free queue, if it is there. */
static void q_remove(struct prefix *p, int32_t x)
{
    p->blk[x].stamp++;
}

static int q_append(struct prefix *p, int32_t x)
{
    if (p->qt == p->cap_q) {
        /* compact: keep the live entries, in order */
        size_t n = 0;
        for (size_t i = p->qh; i < p->qt; i++)
            if (q_live(p, i))
                p->q[n++] = p->q[i];
        p->qh = 0;
        p->qt = n;
        if (n * 2 >= p->cap_q &&
            grow((void **)&p->q, &p->cap_q, p->cap_q + 1, sizeof *p->q) < 0)
            return -1;
    }
    p->q[p->qt++] = (struct qent){ x, ++p->blk[x].stamp };
    return 0;
}

/* Pop the head of the free queue: a block id, or -1 when it is empty.
 * Fetches the blocks and map slots of the entries ahead. */
static int32_t q_pop(struct prefix *p)
{
    while (p->qh < p->qt) {
        if (p->qh + 16 < p->qt)
            __builtin_prefetch(&p->blk[p->q[p->qh + 16].id]);
        if (p->qh + 8 < p->qt) {
            uint64_t h = p->blk[p->q[p->qh + 8].id].hash;
            if (h)
                pm_prefetch(&p->map, h);
        }
        size_t i = p->qh++;
        if (q_live(p, i)) {
            int32_t x = p->q[i].id;
            p->blk[x].stamp++;
            return x;
        }
    }
    return -1;
}

/* The first block holding hash h, or -1. */
static int64_t pm_find(const struct prefix *p, uint64_t h)
{
    const struct pmap *m = &p->map;
    if (!m->cap)
        return -1;
    uint64_t fp = h >> 32;
    for (size_t j = (size_t)fp & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
        uint64_t w = m->s[j];
        if (!w)
            return -1;
        if ((w >> 32) == fp) {
            int64_t x = (int64_t)(uint32_t)w - 1;
            if (p->blk[x].hash == h)
                return x;
        }
    }
}

/* Drop block x's hash from the map (it is being reused). */
static void uncache(struct prefix *p, int32_t x)
{
    struct pmap *m = &p->map;
    uint64_t h = p->blk[x].hash;
    uint64_t fp = h >> 32, want = fp << 32 | (uint64_t)(x + 1);
    size_t j = (size_t)fp & (m->cap - 1);
    while (m->s[j] && m->s[j] != want)
        j = (j + 1) & (m->cap - 1);
    if (m->s[j]) {
        /* x is the first block with h */
        if (p->blk[x].dup >= 0)
            m->s[j] = fp << 32 | (uint64_t)(p->blk[x].dup + 1);
        else
            pm_del_slot(m, j);
    } else {
        int64_t y = pm_find(p, h);
        assert(y >= 0);
        while (p->blk[y].dup != x)
            y = p->blk[y].dup;
        p->blk[y].dup = p->blk[x].dup;
    }
    p->blk[x].hash = 0;
    p->blk[x].dup = -1;
}

/* Take a block for new content: a never used one while the pool has them,
 * else the head of the free queue (evicting what it caches).  -1 when
 * every block is held by the current request. */
static int32_t alloc_block(struct prefix *p, struct kv_err *e, int *fail)
{
    if ((int64_t)p->n_made < p->n_pool) {
        if (p->n_made >= INT32_MAX - 1) {
            *fail = kv_err_set(e, "prefix cache pool of more than 2^31 "
                               "blocks");
            return -1;
        }
        if (grow((void **)&p->blk, &p->cap_blk, p->n_made + 1,
                 sizeof *p->blk) < 0) {
            *fail = kv_err_set(e, "out of memory");
            return -1;
        }
        int32_t x = (int32_t)p->n_made++;
        p->blk[x] = (struct pblock){ 0, -1, 0 };
        return x;
    }
    int32_t x = q_pop(p);
    if (x < 0)
        return -1;
    if (p->blk[x].hash) {
        uncache(p, x);
        p->st.evictions++;
        p->st.evicted_tokens += (uint64_t)p->B;
    }
    return x;
}

static int insert_hash(struct prefix *p, int32_t x, uint64_t h)
{
    struct pmap *m = &p->map;
    if (pm_reserve(m) < 0)
        return -1;
    uint64_t fp = h >> 32;
    size_t j = (size_t)fp & (m->cap - 1);
    int64_t y = -1;
    for (;; j = (j + 1) & (m->cap - 1)) {
        uint64_t w = m->s[j];
        if (!w)
            break;
        if ((w >> 32) == fp && p->blk[(uint32_t)w - 1].hash == h) {
            y = (int64_t)(uint32_t)w - 1;
            break;
        }
    }
    p->blk[x].hash = h;
    p->blk[x].dup = -1;
    if (y < 0) {
        m->s[j] = fp << 32 | (uint64_t)(x + 1);
        m->n++;
        return 0;
    }
    /* Not de-duplicated: keep it behind the first one. */
    while (p->blk[y].dup >= 0)
        y = p->blk[y].dup;
    p->blk[y].dup = x;
    return 0;
}

/* Hashes of the first n_full full blocks of the segment list, chained from
 * the seed (vLLM's NONE_HASH, or the tenant salt on the first block). */
static int block_hashes(struct prefix *p, const struct kv_sim_seg *seg,
                        size_t n_seg, int64_t n_full, uint64_t seed,
                        struct kv_err *e)
{
    if (grow((void **)&p->hashes, &p->cap_hashes, (size_t)n_full + 1,
             sizeof *p->hashes) < 0 ||
        grow((void **)&p->buf, &p->cap_buf, 8 + 16 * (size_t)p->B + 16, 1) < 0)
        return kv_err_set(e, "out of memory");
    uint64_t parent = seed;
    size_t si = 0;
    int64_t off = 0;       /* offset inside seg[si] */
    for (int64_t b = 0; b < n_full; b++) {
        unsigned char *w = p->buf;
        memcpy(w, &parent, 8);
        w += 8;
        int64_t need = p->B;
        while (need > 0) {
            while (seg[si].len - off == 0) {
                si++;
                off = 0;
            }
            assert(si < n_seg);
            int64_t take = seg[si].len - off;
            if (take > need)
                take = need;
            uint64_t run = ((uint64_t)off << 32) | (uint64_t)take;
            memcpy(w, &seg[si].key, 8);
            memcpy(w + 8, &run, 8);
            w += 16;
            off += take;
            need -= take;
        }
        uint64_t h = XXH3_64bits(p->buf, (size_t)(w - p->buf));
        parent = h ? h : 1;
        p->hashes[b] = parent;
    }
    (void)n_seg;
    return 0;
}

/* Replay one request: seg[0..n_seg) is the prompt followed by the output
 * segment (out_len tokens).  Fills the counters and returns the prefix hit
 * length in tokens (or -1 on failure). */
static int64_t prefix_feed(struct prefix *p, const struct kv_sim_seg *seg,
                           size_t n_seg, int64_t n_prompt, int64_t out_len,
                           uint64_t salt, struct kv_err *e)
{
    int64_t B = p->B;
    int64_t kv = n_prompt + (out_len > 0 ? out_len - 1 : 0);
    int64_t n_full = kv / B, need = (kv + B - 1) / B;
    if (n_prompt == 0)
        return 0;
    if (block_hashes(p, seg, n_seg, n_full, salt ? salt : 0x4e4f4e45ULL,
                     e) < 0)
        return -1;
    if (grow((void **)&p->held, &p->cap_held, (size_t)need + 1,
             sizeof *p->held) < 0)
        return kv_err_set(e, "out of memory");
    int64_t max_hit = (n_prompt - 1) / B, hits = 0;
    for (int64_t b = 0; b < max_hit && b < 8; b++)
        pm_prefetch(&p->map, p->hashes[b]);
    while (hits < max_hit) {
        if (hits + 8 < max_hit)
            pm_prefetch(&p->map, p->hashes[hits + 8]);
        int64_t x = pm_find(p, p->hashes[hits]);
        if (x < 0)
            break;
        q_remove(p, (int32_t)x);     /* touch */
        p->held[hits++] = (int32_t)x;
    }
    int64_t n_held = hits;
    for (int64_t b = hits; b < need; b++) {
        int fail = 0;
        if (b + 8 < n_full)
            pm_prefetch(&p->map, p->hashes[b + 8]);
        int32_t x = alloc_block(p, e, &fail);
        if (fail)
            return -1;
        if (x < 0)
            break;      /* the request is longer than the pool */
        if (b < n_full) {
            if (insert_hash(p, x, p->hashes[b]) < 0)
                return kv_err_set(e, "out of memory");
            p->st.stored_tokens += (uint64_t)B;
        }
        p->held[n_held++] = x;
    }
    /* Free the request's blocks tail first. */
    for (int64_t i = n_held; i-- > 0;)
        if (q_append(p, p->held[i]) < 0)
            return kv_err_set(e, "out of memory");
    if (p->map.n > p->st.entries_max)
        p->st.entries_max = p->map.n;
    return hits * B;
}

static void prefix_release(struct prefix *p)
{
    free(p->blk);
    free(p->q);
    free(p->map.s);
    free(p->held);
    free(p->hashes);
    free(p->buf);
}

/* ---- radix prefix caching (SGLang RadixAttention) ------------------------
 *
 * A token-granular radix tree of cached sequences.  An edge is a list of
 * runs (content key, offset, length); token t of a run is (key, offset + t),
 * so two edges share a token exactly when key and position agree.  A
 * request matches the longest cached prefix of its first n - 1 tokens
 * (splitting the edge where the match ends), locks that path, evicts
 * unlocked leaves least recently used first until its new tokens fit the
 * budget, and then inserts its prompt and output (all but the last output
 * token, whose KV is never computed).  Leaves are evicted whole. */

struct rrun {
    uint64_t key;
    int64_t off, len;
};

struct rnode {
    int32_t parent;
    int32_t n_children;
    int32_t lock;
    uint32_t version;
    uint64_t last;        /* last access */
    int64_t len;          /* tokens on the edge from the parent */
    struct rrun *run;
    int32_t n_run;
    int32_t alive;
    uint64_t salt;        /* children of the root: the tenant salt */
};

struct rheap {
    uint64_t last;
    int32_t id;
    uint32_t version;
};

struct radix {
    int64_t cap, size;    /* tokens */
    struct rnode *node;
    size_t n_node, cap_node;
    int32_t *free_ids;
    size_t n_free, cap_free;
    size_t n_alive;
    struct map child;     /* (parent, first token) -> child */
    struct rheap *heap;   /* leaves by last access (lazy: stale entries) */
    size_t n_heap, cap_heap;
    uint64_t clock;
    int32_t *path;
    size_t n_path, cap_path;
    struct rrun *req;     /* the request as runs */
    size_t n_req, cap_req;
    struct kv_sim_stats st;
};

static uint64_t rx_child_key(int32_t parent, uint64_t key, int64_t off,
                             uint64_t salt)
{
    if (parent == 0 && salt)   /* tenants never share a tree */
        key = kv_sim_mix(key, salt);
    return kv_sim_mix(kv_sim_mix((uint64_t)parent + 1, key), (uint64_t)off);
}

/* The child-map key of node id. */
static uint64_t rx_key_of(const struct radix *r, int32_t id)
{
    const struct rnode *x = &r->node[id];
    return rx_child_key(x->parent, x->run[0].key, x->run[0].off, x->salt);
}

static int rx_heap_less(const struct rheap *a, const struct rheap *b)
{
    return a->last != b->last ? a->last < b->last : a->id < b->id;
}

static int rx_push(struct radix *r, int32_t id)
{
    if (grow((void **)&r->heap, &r->cap_heap, r->n_heap + 1,
             sizeof *r->heap) < 0)
        return -1;
    size_t i = r->n_heap++;
    struct rheap x = { r->node[id].last, id, r->node[id].version };
    while (i > 0 && rx_heap_less(&x, &r->heap[(i - 1) / 2])) {
        r->heap[i] = r->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = x;
    return 0;
}

static struct rheap rx_pop(struct radix *r)
{
    struct rheap top = r->heap[0], x = r->heap[--r->n_heap];
    size_t i = 0, n = r->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && rx_heap_less(&r->heap[c + 1], &r->heap[c]))
            c++;
        if (!rx_heap_less(&r->heap[c], &x))
            break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n)
        r->heap[i] = x;
    return top;
}

static int rx_evictable(const struct radix *r, int32_t id)
{
    const struct rnode *x = &r->node[id];
    return id != 0 && x->alive && x->n_children == 0 && x->lock == 0;
}

/* A new node (runs not set); -1 when out of memory. */
static int32_t rx_new(struct radix *r)
{
    int32_t id;
    if (r->n_free) {
        id = r->free_ids[--r->n_free];
    } else {
        if (r->n_node >= INT32_MAX - 1 ||
            grow((void **)&r->node, &r->cap_node, r->n_node + 1,
                 sizeof *r->node) < 0)
            return -1;
        id = (int32_t)r->n_node++;
        r->node[id].version = 0;
    }
    uint32_t v = r->node[id].version;
    memset(&r->node[id], 0, sizeof r->node[id]);
    r->node[id].version = v;
    r->node[id].alive = 1;
    r->n_alive++;
    if (r->n_alive > r->st.entries_max)
        r->st.entries_max = r->n_alive;
    return id;
}

static int rx_init(struct radix *r, int64_t cap)
{
    memset(r, 0, sizeof *r);
    r->cap = cap;
    int32_t root = rx_new(r);
    if (root < 0)
        return -1;
    r->node[root].parent = -1;
    r->n_alive = 0;
    r->st.entries_max = 0;
    return 0;
}

static void rx_release(struct radix *r)
{
    for (size_t i = 0; i < r->n_node; i++)
        free(r->node[i].run);
    free(r->node);
    free(r->free_ids);
    map_release(&r->child);
    free(r->heap);
    free(r->path);
    free(r->req);
}

/* Tokens node c's edge shares with the request from cursor (*ri, *ro),
 * at most limit; the cursor moves past them. */
static int64_t rx_common(const struct radix *r, const struct rnode *c,
                         size_t *ri, int64_t *ro, int64_t limit)
{
    int64_t m = 0, eo = 0;
    int32_t ei = 0;
    while (m < limit && ei < c->n_run && *ri < r->n_req) {
        const struct rrun *E = &c->run[ei], *R = &r->req[*ri];
        if (E->key != R->key || E->off + eo != R->off + *ro)
            break;
        int64_t take = E->len - eo;
        if (R->len - *ro < take)
            take = R->len - *ro;
        if (limit - m < take)
            take = limit - m;
        m += take;
        eo += take;
        *ro += take;
        if (eo == E->len) {
            ei++;
            eo = 0;
        }
        if (*ro == R->len) {
            (*ri)++;
            *ro = 0;
        }
    }
    return m;
}

/* Split node c after m tokens (0 < m < len): a new node takes the first m
 * tokens and becomes c's parent.  Returns it, or -1. */
static int32_t rx_split(struct radix *r, int32_t c, int64_t m)
{
    int32_t mid = rx_new(r);
    if (mid < 0)
        return -1;
    struct rnode *C = &r->node[c], *M = &r->node[mid];
    /* runs of the first m tokens */
    int32_t k = 0;
    int64_t acc = 0;
    while (acc + C->run[k].len <= m)
        acc += C->run[k++].len;
    int32_t n_first = k + (acc < m);
    M->run = malloc((size_t)n_first * sizeof *M->run);
    if (!M->run)
        return -1;
    memcpy(M->run, C->run, (size_t)n_first * sizeof *M->run);
    M->n_run = n_first;
    if (acc < m)
        M->run[k].len = m - acc;
    /* c keeps the rest */
    struct rrun *rest = C->run + k;
    int32_t n_rest = C->n_run - k;
    if (acc < m) {
        rest[0].off += m - acc;
        rest[0].len -= m - acc;
    }
    memmove(C->run, rest, (size_t)n_rest * sizeof *C->run);
    C->n_run = n_rest;
    M->parent = C->parent;
    M->salt = C->salt;
    M->len = m;
    M->last = C->last;
    M->lock = C->lock;
    M->n_children = 1;
    C->len -= m;
    C->parent = mid;
    C->salt = 0;
    if (map_put(&r->child, rx_key_of(r, mid), (uint32_t)mid) < 0 ||
        map_put(&r->child, rx_key_of(r, c), (uint32_t)c) < 0)
        return -1;
    return mid;
}

/* Evict unlocked leaves, least recently used first, until need more tokens
 * fit (or nothing is left to evict). */
static int rx_evict(struct radix *r, int64_t need)
{
    while (r->size + need > r->cap && r->n_heap) {
        struct rheap h = rx_pop(r);
        struct rnode *x = &r->node[h.id];
        if (!rx_evictable(r, h.id) || x->version != h.version ||
            x->last != h.last)
            continue;
        int32_t parent = x->parent;
        map_del(&r->child, rx_key_of(r, h.id));
        r->node[parent].n_children--;
        r->size -= x->len;
        r->st.evictions++;
        r->st.evicted_tokens += (uint64_t)x->len;
        free(x->run);
        x->run = NULL;
        x->alive = 0;
        x->version++;
        r->n_alive--;
        if (grow((void **)&r->free_ids, &r->cap_free, r->n_free + 1,
                 sizeof *r->free_ids) < 0)
            return -1;
        r->free_ids[r->n_free++] = h.id;
        if (rx_evictable(r, parent) && rx_push(r, parent) < 0)
            return -1;
    }
    /* Stale heap entries pile up with every access: rebuild now and then. */
    if (r->n_heap > 4 * r->n_alive + 1024) {
        r->n_heap = 0;
        for (size_t i = 1; i < r->n_node; i++)
            if (rx_evictable(r, (int32_t)i) && rx_push(r, (int32_t)i) < 0)
                return -1;
    }
    return 0;
}

/* Replay one request (prompt then output segment); returns the hit length
 * or -1. */
static int64_t radix_feed(struct radix *r, const struct kv_sim_seg *seg,
                          size_t n_seg, int64_t n_prompt, int64_t out_len,
                          uint64_t salt, struct kv_err *e)
{
    uint64_t now = ++r->clock;
    int64_t kv = n_prompt + (out_len > 0 ? out_len - 1 : 0);
    if (n_prompt == 0)
        return 0;
    /* the request as runs */
    r->n_req = 0;
    if (grow((void **)&r->req, &r->cap_req, n_seg + 1, sizeof *r->req) < 0)
        return kv_err_set(e, "out of memory");
    for (size_t i = 0; i < n_seg; i++)
        if (seg[i].len)
            r->req[r->n_req++] = (struct rrun){ seg[i].key, 0, seg[i].len };
    /* match the first n - 1 tokens */
    int32_t node = 0;
    int64_t pos = 0, limit = n_prompt - 1, ro = 0;
    size_t ri = 0;
    r->n_path = 0;
    for (;;) {
        if (grow((void **)&r->path, &r->cap_path, r->n_path + 1,
                 sizeof *r->path) < 0)
            return kv_err_set(e, "out of memory");
        r->path[r->n_path++] = node;
        if (pos >= limit || ri >= r->n_req)
            break;
        int64_t c = map_get(&r->child, rx_child_key(node, r->req[ri].key,
                                                    r->req[ri].off + ro,
                                                    salt));
        if (c < 0)
            break;
        int64_t m = rx_common(r, &r->node[c], &ri, &ro, limit - pos);
        if (m <= 0)
            break;
        if (m < r->node[c].len && (c = rx_split(r, (int32_t)c, m)) < 0)
            return kv_err_set(e, "out of memory");
        node = (int32_t)c;
        pos += m;
        if (m < r->node[c].len)
            break;
    }
    int64_t hit = pos;
    for (size_t i = 0; i < r->n_path; i++) {
        r->node[r->path[i]].last = now;
        r->node[r->path[i]].lock++;
    }
    /* room for the new tokens */
    if (rx_evict(r, kv - hit) < 0)
        return kv_err_set(e, "out of memory");
    /* insert [0, kv) */
    node = 0;
    pos = 0;
    ri = 0;
    ro = 0;
    while (pos < kv && ri < r->n_req) {
        int64_t c = map_get(&r->child, rx_child_key(node, r->req[ri].key,
                                                    r->req[ri].off + ro,
                                                    salt));
        if (c < 0) {
            int64_t len = kv - pos, room = r->cap - r->size;
            if (len > room)
                len = room;
            if (len <= 0)
                break;
            int32_t leaf = rx_new(r);
            if (leaf < 0)
                return kv_err_set(e, "out of memory");
            struct rnode *L = &r->node[leaf];
            /* runs from the cursor, len tokens */
            size_t n = 0;
            int64_t left = len;
            for (size_t i = ri; i < r->n_req && left > 0; i++, n++)
                left -= r->req[i].len - (i == ri ? ro : 0);
            L->run = malloc(n * sizeof *L->run);
            if (!L->run)
                return kv_err_set(e, "out of memory");
            left = len;
            for (size_t i = 0; i < n; i++) {
                const struct rrun *R = &r->req[ri + i];
                int64_t off = R->off + (i == 0 ? ro : 0);
                int64_t take = R->len - (i == 0 ? ro : 0);
                if (take > left)
                    take = left;
                L->run[i] = (struct rrun){ R->key, off, take };
                left -= take;
            }
            L->n_run = (int32_t)n;
            L->len = len;
            L->parent = node;
            L->salt = node == 0 ? salt : 0;
            L->last = now;
            r->node[node].n_children++;
            if (map_put(&r->child, rx_key_of(r, leaf), (uint32_t)leaf) < 0 ||
                rx_push(r, leaf) < 0)
                return kv_err_set(e, "out of memory");
            r->size += len;
            r->st.stored_tokens += (uint64_t)len;
            break;
        }
        int64_t m = rx_common(r, &r->node[c], &ri, &ro, kv - pos);
        if (m <= 0)
            break;
        if (m < r->node[c].len && (c = rx_split(r, (int32_t)c, m)) < 0)
            return kv_err_set(e, "out of memory");
        r->node[c].last = now;
        if (rx_evictable(r, (int32_t)c) && rx_push(r, (int32_t)c) < 0)
            return kv_err_set(e, "out of memory");
        node = (int32_t)c;
        pos += m;
    }
    for (size_t i = 0; i < r->n_path; i++) {
        int32_t x = r->path[i];
        r->node[x].lock--;
        if (rx_evictable(r, x) && rx_push(r, x) < 0)
            return kv_err_set(e, "out of memory");
    }
    return hit;
}

/* ---- chunk cache (kvchunk) ----------------------------------------------- */

/* An entry: a chunk's KV (keyed by context and content), a system prompt's
 * KV, or a conversation's KV.  LRU: a doubly linked list, head = most
 * recent.  LFU: a binary min-heap on (uses, last use). */
struct centry {
    uint64_t key;
    int64_t len;
    int64_t p0;          /* position it was computed at */
    uint64_t uses, last;
    int32_t prev, next;  /* LRU links, or heap position in prev */
};

struct ccache {
    int64_t cap;          /* tokens; INT64_MAX for the oracle */
    int64_t max_n;        /* most resident entries; 0: no limit */
    int64_t used;
    int lfu;
    struct centry *e;
    size_t n, cap_e;
    int32_t *free_ids;
    size_t n_free, cap_free;
    int32_t head, tail;
    int32_t *heap;        /* LFU: entry ids */
    size_t n_heap, cap_heap;
    uint64_t clock;
    struct map map;
    struct kv_sim_stats st;
};

static int lfu_less(const struct ccache *c, int32_t a, int32_t b)
{
    if (c->e[a].uses != c->e[b].uses)
        return c->e[a].uses < c->e[b].uses;
    return c->e[a].last < c->e[b].last;
}

static void heap_set(struct ccache *c, size_t i, int32_t x)
{
    c->heap[i] = x;
    c->e[x].prev = (int32_t)i;
}

static void heap_down(struct ccache *c, size_t i)
{
    int32_t x = c->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        int32_t best = x;
        if (l < c->n_heap && lfu_less(c, c->heap[l], best))
            m = l, best = c->heap[l];
        if (l + 1 < c->n_heap && lfu_less(c, c->heap[l + 1], best))
            m = l + 1, best = c->heap[l + 1];
        if (m == i)
            break;
        heap_set(c, i, best);
        i = m;
    }
    heap_set(c, i, x);
}

static void heap_up(struct ccache *c, size_t i)
{
    int32_t x = c->heap[i];
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!lfu_less(c, x, c->heap[par]))
            break;
        heap_set(c, i, c->heap[par]);
        i = par;
    }
    heap_set(c, i, x);
}

static void lru_unlink(struct ccache *c, int32_t x)
{
    struct centry *t = &c->e[x];
    if (t->prev >= 0)
        c->e[t->prev].next = t->next;
    else
        c->head = t->next;
    if (t->next >= 0)
        c->e[t->next].prev = t->prev;
    else
        c->tail = t->prev;
}

static void lru_push_front(struct ccache *c, int32_t x)
{
    struct centry *t = &c->e[x];
    t->prev = -1;
    t->next = c->head;
    if (c->head >= 0)
        c->e[c->head].prev = x;
    else
        c->tail = x;
    c->head = x;
}

/* Look key up; on a hit mark it used and return its id, else -1. */
static int32_t cc_lookup(struct ccache *c, uint64_t key)
{
    int64_t x = map_get(&c->map, key);
    if (x < 0)
        return -1;
    c->e[x].uses++;
    c->e[x].last = ++c->clock;
    if (c->lfu) {
        heap_down(c, (size_t)c->e[x].prev);
    } else if (c->head != x) {
        lru_unlink(c, (int32_t)x);
        lru_push_front(c, (int32_t)x);
    }
    return (int32_t)x;
}

static void cc_evict_one(struct ccache *c)
{
    int32_t x;
    if (c->lfu) {
        x = c->heap[0];
        c->n_heap--;
        if (c->n_heap) {
            heap_set(c, 0, c->heap[c->n_heap]);
            heap_down(c, 0);
        }
    } else {
        x = c->tail;
        lru_unlink(c, x);
    }
    map_del(&c->map, c->e[x].key);
    c->used -= c->e[x].len;
    c->st.evictions++;
    c->st.evicted_tokens += (uint64_t)c->e[x].len;
    c->free_ids[c->n_free++] = x;
}

/* Store an entry of len tokens computed at p0 (the key is not resident),
 * evicting until it fits the tokens and the entry limit.  An entry larger
 * than the whole cache is not stored. */
static int cc_insert(struct ccache *c, uint64_t key, int64_t len, int64_t p0,
                     struct kv_err *e)
{
    if (len <= 0 || len > c->cap)
        return 0;
    while (c->used + len > c->cap ||
           (c->max_n && (int64_t)c->map.n >= c->max_n))
        cc_evict_one(c);
    int32_t x;
    if (c->n_free) {
        x = c->free_ids[--c->n_free];
    } else {
        if (c->n >= INT32_MAX - 1)
            return kv_err_set(e, "more than 2^31 cache entries");
        if (grow((void **)&c->e, &c->cap_e, c->n + 1, sizeof *c->e) < 0 ||
            grow((void **)&c->free_ids, &c->cap_free, c->n + 1,
                 sizeof *c->free_ids) < 0 ||
            (c->lfu && grow((void **)&c->heap, &c->cap_heap, c->n + 1,
                            sizeof *c->heap) < 0))
            return kv_err_set(e, "out of memory");
        x = (int32_t)c->n++;
    }
    c->e[x] = (struct centry){ key, len, p0, 1, ++c->clock, -1, -1 };
    if (map_put(&c->map, key, (uint32_t)x) < 0)
        return kv_err_set(e, "out of memory");
    if (c->lfu) {
        c->heap[c->n_heap] = x;
        c->e[x].prev = (int32_t)c->n_heap;
        c->n_heap++;
        heap_up(c, c->n_heap - 1);
    } else {
        lru_push_front(c, x);
    }
    c->used += len;
    c->st.stored_tokens += (uint64_t)len;
    if (c->map.n > c->st.entries_max)
        c->st.entries_max = c->map.n;
    return 0;
}

static void cc_release(struct ccache *c)
{
    free(c->e);
    free(c->free_ids);
    free(c->heap);
    map_release(&c->map);
}

static size_t cc_mem(const struct ccache *c)
{
    return c->cap_e * sizeof *c->e + c->cap_free * sizeof *c->free_ids +
           c->cap_heap * sizeof *c->heap + map_mem(&c->map);
}

/* ---- conversations ------------------------------------------------------- */

struct hseg {
    uint64_t key;
    int64_t len;
    int kind;
};

struct session {
    uint64_t id;
    struct hseg *h;
    size_t n, cap;
    int32_t prev, next;   /* LRU */
};

/* ---- the replay ---------------------------------------------------------- */

struct kv_sim {
    struct kv_sim_opts o;
    uint64_t n_req;
    struct kv_sim_stats none;
    struct prefix prefix[2];        /* in order, chunk-sorted */
    struct radix radix;
    struct ccache cc[3];            /* chunk LRU, chunk LFU, oracle */
    /* conversations */
    struct session *ses;
    size_t n_ses, cap_ses;
    int32_t ses_head, ses_tail;
    int32_t *ses_free;
    size_t n_ses_free, cap_ses_free;
    struct map ses_map;
    /* scratch */
    struct kv_sim_seg *seg, *seg_sorted;
    size_t cap_seg, cap_seg_sorted;
};

static int on(const struct kv_sim *s, int p)
{
    return (s->o.policies >> p) & 1u;
}

void kv_sim_free(struct kv_sim *s);

int kv_sim_create(struct kv_sim **out, const struct kv_sim_opts *o,
                  struct kv_err *e)
{
    if (!o->policies || (o->policies >> KV_SIM_NPOLICIES))
        return kv_err_set(e, "no policy to simulate");
    if (o->block_size < 1 || o->block_size > 1 << 20)
        return kv_err_set(e, "block size %lld out of range",
                          (long long)o->block_size);
    if (o->capacity_tokens < 1)
        return kv_err_set(e, "capacity of %lld tokens: less than one token",
                          (long long)o->capacity_tokens);
    if (o->max_chunks < 0)
        return kv_err_set(e, "a limit of %lld chunks: negative",
                          (long long)o->max_chunks);
    if ((o->policies & (3u << KV_SIM_PREFIX)) &&
        o->capacity_tokens < o->block_size)
        return kv_err_set(e, "capacity of %lld tokens is smaller than one "
                          "block of %lld", (long long)o->capacity_tokens,
                          (long long)o->block_size);
    struct kv_sim *s = calloc(1, sizeof *s);
    if (!s)
        return kv_err_set(e, "out of memory");
    s->o = *o;
    if (!s->o.max_sessions)
        s->o.max_sessions = 1;
    for (int i = 0; i < 2; i++) {
        s->prefix[i].B = o->block_size;
        s->prefix[i].n_pool = o->capacity_tokens / o->block_size;
    }
    for (int i = 0; i < 3; i++) {
        s->cc[i].cap = i == 2 ? INT64_MAX : o->capacity_tokens;
        s->cc[i].max_n = i == 2 ? 0 : o->max_chunks;
        s->cc[i].lfu = i == 1;
        s->cc[i].head = s->cc[i].tail = -1;
    }
    s->ses_head = s->ses_tail = -1;
    if (rx_init(&s->radix, o->capacity_tokens) < 0) {
        kv_sim_free(s);
        return kv_err_set(e, "out of memory");
    }
    *out = s;
    return 0;
}

void kv_sim_free(struct kv_sim *s)
{
    if (!s)
        return;
    for (int i = 0; i < 2; i++)
        prefix_release(&s->prefix[i]);
    for (int i = 0; i < 3; i++)
        cc_release(&s->cc[i]);
    rx_release(&s->radix);
    for (size_t i = 0; i < s->n_ses; i++)
        free(s->ses[i].h);
    free(s->ses);
    free(s->ses_free);
    map_release(&s->ses_map);
    free(s->seg);
    free(s->seg_sorted);
    free(s);
}

size_t kv_sim_mem(const struct kv_sim *s)
{
    size_t m = sizeof *s;
    for (int i = 0; i < 2; i++)
        m += s->prefix[i].cap_blk * sizeof(struct pblock) +
             s->prefix[i].cap_q * sizeof(struct qent) +
             s->prefix[i].map.cap * sizeof *s->prefix[i].map.s +
             s->prefix[i].cap_hashes * 8 + s->prefix[i].cap_held * 4;
    for (int i = 0; i < 3; i++)
        m += cc_mem(&s->cc[i]);
    m += s->radix.cap_node * sizeof(struct rnode) + map_mem(&s->radix.child) +
         s->radix.cap_heap * sizeof(struct rheap);
    for (size_t i = 0; i < s->n_ses; i++)
        m += s->ses[i].cap * sizeof(struct hseg);
    m += s->cap_ses * sizeof *s->ses + map_mem(&s->ses_map);
    m += (s->cap_seg + s->cap_seg_sorted) * sizeof(struct kv_sim_seg);
    return m;
}

void kv_sim_get(const struct kv_sim *s, int p, struct kv_sim_stats *out)
{
    switch (p) {
    case KV_SIM_PREFIX:        *out = s->prefix[0].st; break;
    case KV_SIM_PREFIX_SORTED: *out = s->prefix[1].st; break;
    case KV_SIM_PREFIX_RADIX:  *out = s->radix.st; break;
    case KV_SIM_CHUNK:         *out = s->cc[0].st; break;
    case KV_SIM_CHUNK_LFU:     *out = s->cc[1].st; break;
    case KV_SIM_ORACLE:        *out = s->cc[2].st; break;
    default:                   *out = s->none; break;
    }
}

/* The conversation with this id: found (moved to the front of the LRU), or
 * created when create is set (dropping the least recent one beyond
 * max_sessions).  NULL when absent and not created. */
static struct session *session_get(struct kv_sim *s, uint64_t id, int create,
                                   struct kv_err *e, int *fail)
{
    int64_t x = map_get(&s->ses_map, id);
    struct session *t;
    if (x >= 0) {
        t = &s->ses[x];
        if (s->ses_head != x) {
            /* unlink, push front */
            if (t->prev >= 0)
                s->ses[t->prev].next = t->next;
            if (t->next >= 0)
                s->ses[t->next].prev = t->prev;
            else
                s->ses_tail = t->prev;
            t->prev = -1;
            t->next = s->ses_head;
            s->ses[s->ses_head].prev = (int32_t)x;
            s->ses_head = (int32_t)x;
        }
        return t;
    }
    if (!create)
        return NULL;
    if (s->ses_map.n >= s->o.max_sessions) {
        int32_t y = s->ses_tail;
        struct session *u = &s->ses[y];
        s->ses_tail = u->prev;
        if (u->prev >= 0)
            s->ses[u->prev].next = -1;
        else
            s->ses_head = -1;
        map_del(&s->ses_map, u->id);
        free(u->h);
        u->h = NULL;
        u->n = u->cap = 0;
        if (grow((void **)&s->ses_free, &s->cap_ses_free, s->n_ses_free + 1,
                 sizeof *s->ses_free) < 0) {
            *fail = kv_err_set(e, "out of memory");
            return NULL;
        }
        s->ses_free[s->n_ses_free++] = y;
    }
    int32_t y;
    if (s->n_ses_free) {
        y = s->ses_free[--s->n_ses_free];
    } else {
        if (s->n_ses >= INT32_MAX - 1 ||
            grow((void **)&s->ses, &s->cap_ses, s->n_ses + 1,
                 sizeof *s->ses) < 0) {
            *fail = kv_err_set(e, "out of memory");
            return NULL;
        }
        y = (int32_t)s->n_ses++;
    }
    t = &s->ses[y];
    memset(t, 0, sizeof *t);
    t->id = id;
    t->prev = -1;
    t->next = s->ses_head;
    if (s->ses_head >= 0)
        s->ses[s->ses_head].prev = y;
    else
        s->ses_tail = y;
    s->ses_head = y;
    if (map_put(&s->ses_map, id, (uint32_t)y) < 0) {
        *fail = kv_err_set(e, "out of memory");
        return NULL;
    }
    return t;
}

static int cmp_seg_key(const void *a, const void *b)
{
    const struct kv_sim_seg *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Record one request's modelled TTFT (and end-to-end latency) and the
 * counters common to all. */
static void account(struct kv_sim_stats *st, const struct kv_sim_cost *c,
                    uint64_t bpt, const struct kv_sim_req *r, int64_t n_prompt,
                    int64_t hit, double pairs, int64_t loaded, int64_t rotated)
{
    int64_t computed = n_prompt - hit;
    double us = c->us_token * (double)computed + c->us_pair * pairs;
    if (loaded)
        us += (double)loaded * (double)bpt / (c->bw_load * 1e3);
    if (rotated)  /* only K moves: half of the bytes */
        us += (double)rotated * (double)bpt / 2.0 / (c->bw_rope * 1e3);
    st->e2e_sum_us += us;
    if (r->out_len > 1)
        st->e2e_sum_us += c->us_decode * (double)(r->out_len - 1);
    if (r->sys.len)
        st->sys_slots++;
    st->requests++;
    st->prompt_tokens += (uint64_t)n_prompt;
    st->hit_tokens += (uint64_t)hit;
    st->prefill_tokens += (uint64_t)computed;
    st->loaded_tokens += (uint64_t)loaded;
    st->rotated_tokens += (uint64_t)rotated;
    hist_add(st, us, r->t);
}

/* Replay the request through the chunk scheme cache c.  seg: [sys?]
 * history, chunks, question, output; hist_end: index of the first new
 * chunk; first_q: index of the question. */
static int chunk_feed(struct kv_sim *s, struct ccache *c,
                      const struct kv_sim_req *r,
                      const struct kv_sim_seg *seg, size_t hist_end,
                      size_t first_q, int64_t n_prompt,
                      uint64_t conv_key_prev, uint64_t conv_key_next,
                      struct kv_err *e)
{
    uint64_t salt = s->o.salt_tenant ? r->tenant : 0;
    int64_t S = r->sys.len, pos = 0, hit = 0, loaded = 0, rotated = 0;
    double pairs = 0;
    uint64_t ctx = s->o.ctx_sys && S ? r->sys.key : 0;
    uint64_t ctx_salt = kv_sim_mix(ctx, salt);
    size_t i = 0;
    int conv_hit = 0;

    if (conv_key_prev) {
        int32_t x = cc_lookup(c, conv_key_prev);
        if (x >= 0) {
            int64_t len = c->e[x].len;
            hit += len;
            loaded += len;
            pos = len;
            /* the rest of the history, if any, is computed */
            int64_t hist_tokens = 0;
            for (size_t k = 0; k < hist_end; k++)
                hist_tokens += seg[k].len;
            if (hist_tokens > len) {
                pairs += causal_pairs(len, hist_tokens - len);
                pos = hist_tokens;
            }
            i = hist_end;
            conv_hit = 1;
            if (S)
                c->st.sys_hits++;
        }
    }
    if (!conv_hit && S) {
        uint64_t key = kv_sim_mix(kv_sim_mix(r->sys.key, salt), 0x535953);
        int32_t x = cc_lookup(c, key);
        if (x >= 0) {
            hit += S;
            loaded += S;
            if (s->o.rotate_always)
                rotated += S;
            c->st.sys_hits++;
        } else {
            pairs += causal_pairs(0, S);
            if (cc_insert(c, key, S, 0, e) < 0)
                return -1;
            if (s->o.miss_copy) {
                loaded += S;
                if (s->o.rotate_always)
                    rotated += S;
            }
        }
        pos = S;
        i = 1;
    }
    for (; i < first_q; i++) {
        const struct kv_sim_seg *g = &seg[i];
        if (g->kind != KV_SIM_SEG_CHUNK) {          /* history text */
            pairs += causal_pairs(pos, g->len);
            pos += g->len;
            continue;
        }
        uint64_t key = kv_sim_mix(g->key, ctx_salt);
        int32_t x = cc_lookup(c, key);
        if (x >= 0) {
            hit += g->len;
            loaded += g->len;
            if (s->o.rotate_always || c->e[x].p0 != pos)
                rotated += g->len;
            if (i >= hist_end)
                c->st.chunk_hits++;
        } else {
            int64_t visible = ctx ? S : 0;
            pairs += causal_pairs(visible, g->len);
            if (cc_insert(c, key, g->len, pos, e) < 0)
                return -1;
            if (s->o.miss_copy) {
                loaded += g->len;
                if (s->o.rotate_always)
                    rotated += g->len;
            }
        }
        pos += g->len;
    }
    /* the question */
    pairs += causal_pairs(pos, r->q_len);
    pos += r->q_len;
    /* The last prompt token is always computed (it gives the logits). */
    if (hit == n_prompt && n_prompt > 0) {
        hit--;
        pairs += (double)n_prompt;
    }
    c->st.chunk_slots += r->n_chunks;
    account(&c->st, &s->o.cost, s->o.bytes_per_token, r, n_prompt, hit,
            pairs, loaded, rotated);
    if (conv_key_next) {
        int64_t len = n_prompt + (r->out_len > 0 ? r->out_len - 1 : 0);
        if (cc_lookup(c, conv_key_next) < 0 &&
            cc_insert(c, conv_key_next, len, 0, e) < 0)
            return -1;
    }
    return 0;
}

/* Add prefix-policy chunk hits: chunks [hist_end, first_q) wholly inside
 * the first hit tokens; and the system prompt's (seg[0]). */
static void prefix_chunk_hits(struct kv_sim_stats *st,
                              const struct kv_sim_seg *seg, size_t first_q,
                              size_t hist_end, int64_t hit)
{
    int64_t pos = 0;
    if (first_q && seg[0].kind == KV_SIM_SEG_SYS && seg[0].len <= hit)
        st->sys_hits++;
    for (size_t i = 0; i < first_q; i++) {
        pos += seg[i].len;
        if (i >= hist_end && seg[i].kind == KV_SIM_SEG_CHUNK && pos <= hit)
            st->chunk_hits++;
    }
}

int kv_sim_check(const struct kv_sim_opts *o, const struct kv_sim_req *r,
                 struct kv_err *e)
{
    int limited = (o->policies & ((1u << KV_SIM_PREFIX) |
                                  (1u << KV_SIM_PREFIX_SORTED) |
                                  (1u << KV_SIM_PREFIX_RADIX) |
                                  (1u << KV_SIM_CHUNK) |
                                  (1u << KV_SIM_CHUNK_LFU))) != 0;
    const struct kv_sim_seg *big = NULL;
    if (!limited)
        return 0;
    if (r->sys.len > o->capacity_tokens)
        big = &r->sys;
    for (size_t i = 0; !big && i < r->n_chunks; i++)
        if (r->chunks[i].len > o->capacity_tokens)
            big = &r->chunks[i];
    if (big)
        return kv_err_set(e, "line %llu: %s '%.*s' of %lld tokens "
                          "(%.0f bytes) does not fit the capacity of "
                          "%lld tokens (%.0f bytes)",
                          (unsigned long long)r->line,
                          big->kind == KV_SIM_SEG_SYS ? "system prompt" :
                          "chunk", big->name_len, big->name,
                          (long long)big->len,
                          (double)big->len * (double)o->bytes_per_token,
                          (long long)o->capacity_tokens,
                          (double)o->capacity_tokens *
                          (double)o->bytes_per_token);
    return 0;
}

/* Counters back to zero; the prefill server's queue goes on. */
static void stats_reset(struct kv_sim_stats *st, uint64_t entries)
{
    double busy = st->busy_until_us;
    memset(st, 0, sizeof *st);
    st->busy_until_us = busy;
    st->entries_max = entries;
}

/* The warm-up is over: what it cached stays, what it counted goes. */
static void warmup_end(struct kv_sim *s)
{
    stats_reset(&s->none, 0);
    for (int i = 0; i < 2; i++)
        stats_reset(&s->prefix[i].st, s->prefix[i].map.n);
    stats_reset(&s->radix.st, (uint64_t)s->radix.n_alive);
    for (int i = 0; i < 3; i++)
        stats_reset(&s->cc[i].st, s->cc[i].map.n);
}

int kv_sim_feed(struct kv_sim *s, const struct kv_sim_req *r,
                struct kv_err *e)
{
    const struct kv_sim_opts *o = &s->o;
    uint64_t req_id = ++s->n_req;

    /* A budget must hold every segment. */
    if (kv_sim_check(o, r, e) < 0)
        return -1;

    /* The conversation, if any. */
    struct session *ses = NULL;
    int fail = 0;
    if (r->session) {
        ses = session_get(s, r->session, 1, e, &fail);
        if (fail)
            return -1;
    }
    size_t n_hist = ses ? ses->n : 0;
    size_t n_seg = (r->sys.len ? 1 : 0) + n_hist + r->n_chunks + 2;
    if (grow((void **)&s->seg, &s->cap_seg, n_seg, sizeof *s->seg) < 0)
        return kv_err_set(e, "out of memory");
    struct kv_sim_seg *seg = s->seg;
    size_t k = 0;
    int64_t n_prompt = 0;
    if (r->sys.len)
        seg[k++] = r->sys;
    size_t hist_begin = k;
    for (size_t i = 0; i < n_hist; i++) {
        seg[k] = (struct kv_sim_seg){ ses->h[i].key, ses->h[i].len,
                                      ses->h[i].kind, "", 0 };
        k++;
    }
    size_t hist_end = k;
    for (size_t i = 0; i < r->n_chunks; i++)
        seg[k++] = r->chunks[i];
    size_t first_q = k;
    seg[k++] = (struct kv_sim_seg){ kv_sim_mix(req_id, 0x51), r->q_len,
                                    KV_SIM_SEG_TEXT, "", 0 };
    seg[k++] = (struct kv_sim_seg){ kv_sim_mix(req_id, 0x4f), r->out_len,
                                    KV_SIM_SEG_TEXT, "", 0 };
    for (size_t i = 0; i < first_q + 1; i++) {
        n_prompt += seg[i].len;
        if (n_prompt > KV_SIM_MAX_PROMPT)
            return kv_err_set(e, "line %llu: prompt longer than 2^40 tokens",
                              (unsigned long long)r->line);
    }

    /* Conversation keys: the history's (what the previous turn stored) and
     * this turn's (what it stores). */
    uint64_t salt = o->salt_tenant ? r->tenant : 0;
    uint64_t conv_prev = 0, conv_next = 0;
    if (ses) {
        uint64_t h = kv_sim_mix(salt, 0x434f4e56);
        if (r->sys.len)
            h = kv_sim_mix(h, seg[0].key);
        for (size_t i = hist_begin; i < k; i++) {
            if (i == hist_end && n_hist)
                conv_prev = h;
            if (seg[i].len)     /* empty segments add no tokens */
                h = kv_sim_mix(h, kv_sim_mix(seg[i].key,
                                             (uint64_t)seg[i].len));
        }
        conv_next = h;
    }

    /* none */
    {
        account(&s->none, &o->cost, o->bytes_per_token, r, n_prompt, 0,
                causal_pairs(0, n_prompt), 0, 0);
        s->none.chunk_slots += r->n_chunks;
    }
    /* prefix */
    for (int v = 0; v < 2; v++) {
        int pol = v ? KV_SIM_PREFIX_SORTED : KV_SIM_PREFIX;
        if (!on(s, pol))
            continue;
        struct kv_sim_seg *ps = seg;
        if (v) {
            if (grow((void **)&s->seg_sorted, &s->cap_seg_sorted, n_seg,
                     sizeof *s->seg_sorted) < 0)
                return kv_err_set(e, "out of memory");
            ps = s->seg_sorted;
            memcpy(ps, seg, k * sizeof *ps);
            /* sort every run of consecutive chunks */
            for (size_t i = 0; i < k;) {
                size_t j = i;
                while (j < k && ps[j].kind == KV_SIM_SEG_CHUNK)
                    j++;
                if (j - i > 1)
                    qsort(ps + i, j - i, sizeof *ps, cmp_seg_key);
                i = j > i ? j : i + 1;
            }
        }
        struct prefix *p = &s->prefix[v];
        int64_t hit = prefix_feed(p, ps, k, n_prompt, r->out_len, salt, e);
        if (hit < 0)
            return -1;
        p->st.chunk_slots += r->n_chunks;
        prefix_chunk_hits(&p->st, ps, first_q, hist_end, hit);
        account(&p->st, &o->cost, o->bytes_per_token, r, n_prompt, hit,
                causal_pairs(hit, n_prompt - hit), 0, 0);
    }
    /* prefix-radix */
    if (on(s, KV_SIM_PREFIX_RADIX)) {
        struct radix *rx = &s->radix;
        int64_t hit = radix_feed(rx, seg, k, n_prompt, r->out_len, salt, e);
        if (hit < 0)
            return -1;
        rx->st.chunk_slots += r->n_chunks;
        prefix_chunk_hits(&rx->st, seg, first_q, hist_end, hit);
        account(&rx->st, &o->cost, o->bytes_per_token, r, n_prompt, hit,
                causal_pairs(hit, n_prompt - hit), 0, 0);
    }
    /* chunk, chunk-lfu, oracle */
    static const int cpol[3] = { KV_SIM_CHUNK, KV_SIM_CHUNK_LFU,
                                 KV_SIM_ORACLE };
    for (int v = 0; v < 3; v++) {
        if (!on(s, cpol[v]))
            continue;
        if (chunk_feed(s, &s->cc[v], r, seg, hist_end, first_q, n_prompt,
                       conv_prev, conv_next, e) < 0)
            return -1;
    }

    /* The conversation goes on with this turn's chunks, question, output. */
    if (ses) {
        size_t add = k - hist_end;
        if (grow((void **)&ses->h, &ses->cap, ses->n + add,
                 sizeof *ses->h) < 0)
            return kv_err_set(e, "out of memory");
        for (size_t i = hist_end; i < k; i++)
            ses->h[ses->n++] = (struct hseg){ seg[i].key, seg[i].len,
                                              seg[i].kind };
    }
    if (o->warmup && req_id == o->warmup)
        warmup_end(s);
    return 0;
}
