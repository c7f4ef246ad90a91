/* reader.c - the trace reader: one request per line, as tab-separated
 * fields or JSON lines (man 1 kvchunk, TRACE FORMAT), checked field by
 * field, or Mooncake's JSONL (mooncake.c).  The generator and the split
 * converter are in trace.c. */
#include "sim/internal.h"

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
    int format;            /* KV_SIM_FORMAT_* */
    int64_t block_size;    /* Mooncake: tokens per hash_id */
    int pending;           /* line holds a request line not yet returned */
    int64_t *ids;          /* Mooncake: the line's hash_ids */
    size_t ids_cap;
    size_t pending_n;
};

int kv_sim_reader_open(struct kv_sim_reader **out, FILE *f, const char *name,
                       struct kv_err *e)
{
    struct kv_sim_reader *r = calloc(1, sizeof *r);
    if (!r)
        return kv_err_set(e, "out of memory");
    r->f = f;
    r->name = name ? name : "<stdin>";
    r->block_size = 512;
    *out = r;
    return 0;
}

void kv_sim_reader_free(struct kv_sim_reader *r)
{
    if (!r)
        return;
    free(r->line);
    free(r->chunks);
    free(r->ids);
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
        if (sim_grow((void **)&r->tok, &r->tok_cap, nt + 1, sizeof *r->tok) < 0)
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
                        if (sim_grow((void **)&j->r->tok, &j->r->tok_cap, nt + 1,
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
                        if (sim_grow((void **)&r->chunks, &r->chunks_cap, nc + 1,
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

/* Read one line into r->line (without its end of line): 1 with *n its
 * length, 0 at the end of the file, -1 on a read error or a line longer
 * than KV_SIM_MAX_LINE (refused before it is read whole). */
static int read_line(struct kv_sim_reader *r, size_t *n, struct kv_err *e)
{
    size_t k = 0;
    int c = EOF;
    errno = 0;
    while ((c = getc_unlocked(r->f)) != EOF) {
        if (k + 1 >= r->line_cap &&
            sim_grow((void **)&r->line, &r->line_cap, k + 2, 1) < 0)
            return kv_err_set(e, "out of memory");
        if (c == '\n')
            break;
        r->line[k++] = (char)c;
        if (k > KV_SIM_MAX_LINE)
            return kv_err_set(e, "'%s' line %llu: longer than %zu MiB",
                              r->name, (unsigned long long)r->line_no + 1,
                              KV_SIM_MAX_LINE >> 20);
    }
    if (c == EOF && ferror(r->f))
        return kv_err_set(e, "cannot read '%s': %s", r->name,
                          strerror(errno ? errno : EIO));
    if (c == EOF && k == 0)
        return 0;
    r->line_no++;
    while (k && r->line[k - 1] == '\r')
        k--;
    r->line[k] = 0;
    *n = k;
    return 1;
}

/* Skip blank and comment lines: 1 with r->line holding a request line of
 * *n bytes (leading blanks dropped into *skip), 0 at the end, -1. */
static int next_request_line(struct kv_sim_reader *r, size_t *n,
                             size_t *skip, struct kv_err *e)
{
    if (r->pending) {
        r->pending = 0;
        *n = r->pending_n;
    } else {
        for (;;) {
            int got = read_line(r, n, e);
            if (got <= 0)
                return got;
            size_t i = 0;
            while (i < *n && (r->line[i] == ' ' || r->line[i] == '\t'))
                i++;
            if (i < *n && r->line[i] != '#')
                break;
        }
    }
    size_t i = 0;
    while (i < *n && (r->line[i] == ' ' || r->line[i] == '\t'))
        i++;
    if (memchr(r->line, '\0', *n))
        return kv_err_set(e, "'%s' line %llu: NUL byte in the line",
                          r->name, (unsigned long long)r->line_no);
    *skip = i;
    return 1;
}

int kv_sim_reader_set_format(struct kv_sim_reader *r, int format,
                             int64_t block_size, struct kv_err *e)
{
    if (format < KV_SIM_FORMAT_AUTO || format > KV_SIM_FORMAT_MOONCAKE)
        return kv_err_set(e, "unknown trace format %d", format);
    if (block_size < 1 || block_size > 1 << 20)
        return kv_err_set(e, "trace block size %lld out of range",
                          (long long)block_size);
    r->format = format;
    r->block_size = block_size;
    return 0;
}

int kv_sim_reader_format(struct kv_sim_reader *r, int *format,
                         struct kv_err *e)
{
    if (r->format == KV_SIM_FORMAT_AUTO) {
        size_t n, skip;
        int got = next_request_line(r, &n, &skip, e);
        if (got < 0)
            return -1;
        r->format = got && sim_mooncake_detect(r->line + skip, n - skip)
                        ? KV_SIM_FORMAT_MOONCAKE : KV_SIM_FORMAT_NATIVE;
        if (got) {
            r->pending = 1;
            r->pending_n = n;
        }
    }
    *format = r->format;
    return 0;
}

int kv_sim_reader_next(struct kv_sim_reader *r, struct kv_sim_req *req,
                       struct kv_err *e)
{
    int fmt;
    if (kv_sim_reader_format(r, &fmt, e) < 0)
        return -1;
    for (;;) {
        size_t n, i;
        int got = next_request_line(r, &n, &i, e);
        if (got <= 0)
            return got;
        char *s = r->line;
        if (fmt == KV_SIM_FORMAT_MOONCAKE)
            return sim_mooncake_line(r->name, r->line_no, s + i, n - i,
                                     r->block_size, &r->last_t, &r->chunks,
                                     &r->chunks_cap, &r->ids, &r->ids_cap,
                                     req, e);
        /* Split into at most 8 fields. */
        const char *f[8];
        size_t fl[8];
        int nf = 0;
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
                if (sim_grow((void **)&r->chunks, &r->chunks_cap, nc + 1,
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
