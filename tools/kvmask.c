/* kvmask - attention masks of every kind the engines build, dense or
 * compact, bit-exact (see man 1 kvmask).
 *
 * This file only turns options into a struct kv_mask (the rule) and a
 * struct kv_mask_values (what a dense element holds), then calls one writer
 * of lib/mask/mask.c. */
#include <argtable2.h>
#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "mask/mask.h"
#include "mask/blockmask.h"

enum fmt { F_AUTO, F_NPY, F_TEXT, F_PGM, F_BITS, F_BLOCK, F_BSR, F_STATS };
enum preset { P_NONE, P_ATTN, P_SPLITFUSE, P_SPLITFUSE_310P, P_POOLING,
              P_MLA, P_PCP_MLA, P_SWA, P_MTP_CP };

static const char *const kind_names[] = {
    "causal", "window", "band", "full", "prefix", "varlen", "chunk", "ascend",
    NULL
};
#define KIND_ASCEND 7

static const char *const preset_names[] = {
    "", "attn", "splitfuse", "splitfuse-310p", "pooling", "mla", "pcp-mla",
    "swa", "mtp-cp", NULL
};

struct opts {
    int kind;                       /* index into kind_names */
    enum preset preset;
    struct kv_mask_spec spec;
    struct kv_mask_values vals;
    struct kv_mask_out out;
    enum fmt fmt;
    int nz, force, verbose, no_mask, quiet;
    int64_t bq, bk, cell;
    int have_block;
    const char *output;
    size_t max_mem;
    /* storage the spec points into */
    int64_t *q_lens, *kv_lens, *positions, *seg_lens, *hole_lo, *hole_hi;
    uint8_t *seg_kinds;
};

static void opts_release(struct opts *o)
{
    free(o->q_lens);
    free(o->kv_lens);
    free(o->positions);
    free(o->seg_lens);
    free(o->seg_kinds);
    free(o->hole_lo);
    free(o->hole_hi);
}

static int lookup(const char *const *names, const char *s)
{
    for (int k = 0; names[k]; k++)
        if (strcmp(names[k], s) == 0)
            return k;
    return -1;
}

static int parse_len(const char *s, const char *opt, int64_t min, int64_t *v)
{
    struct kv_err e;
    if (kv_parse_i64(s, opt, min, KV_MASK_MAX_LEN, v, &e) != 0) {
        kv_usage("%s", e.msg);
        return -1;
    }
    return 0;
}

static int parse_list(const char *s, const char *opt, int64_t min,
                      int64_t **v, size_t *n)
{
    struct kv_err e;
    if (kv_parse_i64_list(s, opt, min, KV_MASK_MAX_LEN, v, n, &e) != 0) {
        kv_usage("%s", e.msg);
        return -1;
    }
    if (*n == 0) {
        kv_usage("%s: expected a comma-separated list of integers", opt);
        return -1;
    }
    return 0;
}

/* --segments FILE: text lines "KIND OFFSET LENGTH [KEY]" (KIND sys, chunk
 * or question; '#' starts a comment) or an integer .npy [n, 3] of
 * kind code (0 sys, 1 chunk, 2 question), offset, length.  Segments must
 * be contiguous from offset 0. */
/* What may follow the segments array seg in a 'kvchunk split' stream: the
 * content keys, one u8 [n, 16] array, and nothing after them. */
static int segment_keys(FILE *f, size_t max_mem, const struct kv_tensor *seg,
                        struct kv_err *e)
{
    struct kv_tensor k;
    char sh[96];
    int rc;

    kv_tensor_init(&k);
    rc = kv_npy_read(f, max_mem, &k, e);
    if (rc != 0)
        return rc < 0 ? kv_err_prefix(e, "after the segments") : 0;
    if (k.dtype != KV_U8 || k.ndim != 2 || k.shape[1] != 16 ||
        (seg->ndim >= 1 && k.shape[0] != seg->shape[0])) {
        kv_err_set(e, "after the segments: expected their keys, a u8 array "
                   "of shape (%lld, 16), got %s %s", seg->ndim >= 1 ?
                   (long long)seg->shape[0] : 0LL, kv_dtype_name(k.dtype),
                   kv_shape_str(k.ndim, k.shape, sh, sizeof sh));
        kv_tensor_release(&k);
        return -1;
    }
    kv_tensor_release(&k);
    if (getc(f) != EOF)
        return kv_err_set(e, "extra data after the segments and their keys");
    return 0;
}

static int read_segments(struct opts *o, const char *path, struct kv_err *e)
{
    const char *name = kv_path_name(path, 0);
    size_t cap = 16, n = 0;
    int64_t expect = 0;
    FILE *f = kv_open_in(path, e);
    if (!f)
        return -1;
    int c = getc(f);
    if (c == 0x93) {                        /* .npy magic */
        struct kv_tensor t;
        int rc;
        ungetc(c, f);
        kv_tensor_init(&t);
        rc = kv_npy_read(f, o->max_mem, &t, e);
        if (rc == 0)    /* then at most the keys, as kvchunk split writes */
            rc = segment_keys(f, o->max_mem, &t, e) < 0 ? -1 : 0;
        kv_close_in(f);
        if (rc != 0) {
            if (rc > 0)
                kv_err_set(e, "'%s': no array in the stream", name);
            else
                kv_err_prefix(e, "'%s'", name);
            kv_tensor_release(&t);
            return -1;
        }
        if (kv_dtype_is_float(t.dtype) || t.dtype == KV_BOOL || t.ndim != 2 ||
            t.shape[1] != 3) {
            char sh[96];
            kv_err_set(e, "'%s': expected an integer array of shape (n, 3), "
                       "got %s %s", name, kv_dtype_name(t.dtype),
                       kv_shape_str(t.ndim, t.shape, sh, sizeof sh));
            kv_tensor_release(&t);
            return -1;
        }
        n = (size_t)t.shape[0];
        o->seg_kinds = malloc(n ? n : 1);
        o->seg_lens = malloc((n ? n : 1) * sizeof *o->seg_lens);
        if (!o->seg_kinds || !o->seg_lens) {
            kv_tensor_release(&t);
            return kv_err_set(e, "out of memory");
        }
        for (size_t k = 0; k < n; k++) {
            int64_t kind = kv_tensor_get_i64(&t, 3 * k);
            int64_t off = kv_tensor_get_i64(&t, 3 * k + 1);
            int64_t len = kv_tensor_get_i64(&t, 3 * k + 2);
            if (kind < 0 || kind > 2) {
                kv_tensor_release(&t);
                return kv_err_set(e, "'%s': row %zu: kind code %lld (expected "
                                  "0 sys, 1 chunk, 2 question)", name, k,
                                  (long long)kind);
            }
            if (len < 0 || len > KV_MASK_MAX_LEN || off != expect) {
                kv_tensor_release(&t);
                return kv_err_set(e, "'%s': row %zu: offset %lld length %lld, "
                                  "expected offset %lld and a length >= 0 "
                                  "(segments are contiguous)", name, k,
                                  (long long)off, (long long)len,
                                  (long long)expect);
            }
            o->seg_kinds[k] = (uint8_t)kind;
            o->seg_lens[k] = len;
            expect += len;
        }
        kv_tensor_release(&t);
        o->spec.seg_kinds = o->seg_kinds;
        o->spec.seg_lens = o->seg_lens;
        o->spec.n_seg = n;
        return 0;
    }
    if (c != EOF)
        ungetc(c, f);
    o->seg_kinds = malloc(cap);
    o->seg_lens = malloc(cap * sizeof *o->seg_lens);
    if (!o->seg_kinds || !o->seg_lens) {
        kv_close_in(f);
        return kv_err_set(e, "out of memory");
    }
    char line[4096];
    size_t lineno = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[32], key[1024], extra[8];
        long long off, len;
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            kv_close_in(f);
            return kv_err_set(e, "'%s': line %zu is too long", name, lineno);
        }
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        int got = sscanf(p, "%31s %lld %lld %1023s %7s", kind, &off, &len, key,
                         extra);
        int k = strcmp(kind, "sys") == 0 ? 0 : strcmp(kind, "chunk") == 0 ? 1
              : strcmp(kind, "question") == 0 ? 2 : -1;
        if (got < 3 || got > 4 || k < 0) {
            kv_close_in(f);
            return kv_err_set(e, "'%s': line %zu: expected 'KIND OFFSET LENGTH "
                              "[KEY]' with KIND sys, chunk or question", name,
                              lineno);
        }
        if (len < 0 || len > KV_MASK_MAX_LEN || off != expect) {
            kv_close_in(f);
            return kv_err_set(e, "'%s': line %zu: offset %lld length %lld, "
                              "expected offset %lld and a length >= 0 "
                              "(segments are contiguous)", name, lineno, off,
                              len, (long long)expect);
        }
        if (n == cap) {
            cap *= 2;
            uint8_t *nk = realloc(o->seg_kinds, cap);
            if (nk)
                o->seg_kinds = nk;
            int64_t *nl = realloc(o->seg_lens, cap * sizeof *nl);
            if (nl)
                o->seg_lens = nl;
            if (!nk || !nl) {
                kv_close_in(f);
                return kv_err_set(e, "out of memory");
            }
        }
        o->seg_kinds[n] = (uint8_t)k;
        o->seg_lens[n] = len;
        n++;
        expect += len;
    }
    int bad = ferror(f);
    kv_close_in(f);
    if (bad)
        return kv_err_set(e, "'%s': read error", name);
    if (n == 0)
        return kv_err_set(e, "'%s': no segments", name);
    o->spec.seg_kinds = o->seg_kinds;
    o->spec.seg_lens = o->seg_lens;
    o->spec.n_seg = n;
    return 0;
}

/* Value of an Ascend fill rule converted the way `.to(dtype)` converts it:
 * x is -inf or 1. */
static int ascend_value(enum kv_dtype dt, double x, uint32_t *bits,
                        const char *why)
{
    if (kv_mask_value_bits(dt, x, bits) != 0)
        return kv_usage("%s: %g cannot be converted to %s", why, x,
                        kv_dtype_name(dt));
    return 0;
}

/* Local keys of one context-parallel rank among the first L tokens when
 * tokens go to the cp ranks in turns of I (vllm-ascend pcp_utils). */
static int64_t cp_local_len(int64_t L, int64_t cp, int64_t rank, int64_t I)
{
    int64_t full = L / I / cp * I;
    int64_t rest = L - full * cp - rank * I;
    return full + (rest < 0 ? 0 : rest > I ? I : rest);
}

/* `ascend --preset mtp-cp`: the CP decode mask of MTP requests
 * (generate_mtp_attention_mask_for_decode): bool [R, max_q, max_k], True =
 * masked.  Query t of a request sits at global position P = history + t;
 * with n = the rank's local keys at positions <= P, the row masks local
 * columns [n, kv_local) when n >= 1; everything else is False. */
static int setup_mtp(struct opts *o, struct arg_str *history,
                     struct arg_str *qlens, struct arg_str *cpsize,
                     struct arg_str *cprank, struct arg_str *interleave,
                     int other_geometry)
{
    int64_t *h = NULL, *q = NULL, cp, rank, I = 1, max_q = 0, max_k = 0;
    size_t nh = 0, nq = 0;
    int rc = KV_EXIT_USAGE;

    if (other_geometry)
        return kv_usage("-n/--seq-lens/--positions: not with --preset mtp-cp "
                        "(the geometry is --history and --q-lens)");
    if (!history->count || !qlens->count || !cpsize->count || !cprank->count)
        return kv_usage("--preset mtp-cp needs --history, --q-lens, "
                        "--cp-size and --cp-rank");
    if (parse_list(history->sval[0], "--history", 0, &h, &nh) ||
        parse_list(qlens->sval[0], "--q-lens", 1, &q, &nq) ||
        parse_len(cpsize->sval[0], "--cp-size", 1, &cp) ||
        parse_len(cprank->sval[0], "--cp-rank", 0, &rank) ||
        (interleave->count &&
         parse_len(interleave->sval[0], "--interleave", 1, &I)))
        goto out;
    if (nh != nq) {
        kv_usage("--q-lens: %zu value%s for %zu requests in --history", nq,
                 nq == 1 ? "" : "s", nh);
        goto out;
    }
    if (rank >= cp) {
        kv_usage("--cp-rank: expected an integer below --cp-size %lld, got "
                 "%lld", (long long)cp, (long long)rank);
        goto out;
    }
    for (size_t r = 0; r < nh; r++) {
        if (h[r] + q[r] > KV_MASK_MAX_LEN) {
            kv_usage("--history: request %zu is too long", r);
            goto out;
        }
        max_q = q[r] > max_q ? q[r] : max_q;
        int64_t k = cp_local_len(h[r] + q[r], cp, rank, I);
        max_k = k > max_k ? k : max_k;
    }
    if (max_k == 0) {
        kv_usage("--cp-rank: rank %lld holds no key of these requests",
                 (long long)rank);
        goto out;
    }
    if ((double)max_q * (double)nh > (double)KV_MASK_MAX_LEN) {
        kv_usage("--q-lens: too many rows");
        goto out;
    }
    size_t rows = (size_t)max_q * nh;
    o->hole_lo = malloc(rows * sizeof *o->hole_lo);
    o->hole_hi = malloc(rows * sizeof *o->hole_hi);
    if (!o->hole_lo || !o->hole_hi) {
        rc = kv_fail("out of memory");
        goto out;
    }
    for (size_t r = 0; r < nh; r++) {
        int64_t kl = cp_local_len(h[r] + q[r], cp, rank, I);
        for (int64_t t = 0; t < max_q; t++) {
            size_t at = r * (size_t)max_q + (size_t)t;
            int64_t nk = t < q[r] ? cp_local_len(h[r] + t + 1, cp, rank, I) : 0;
            o->hole_lo[at] = o->hole_hi[at] = 0;
            if (nk >= 1 && nk < kl) {
                o->hole_lo[at] = nk;
                o->hole_hi[at] = kl;
            }
        }
    }
    o->spec.kind = KV_MASK_HOLE;
    o->spec.n_q = (int64_t)rows;
    o->spec.n_kv = max_k;
    o->spec.hole_lo = o->hole_lo;
    o->spec.hole_hi = o->hole_hi;
    o->spec.rows_per_mat = max_q;
    rc = 0;
out:
    free(h);
    free(q);
    return rc;
}

/* The mask and values of `kvmask ascend --preset P`. */
static int setup_ascend(struct opts *o, int have_dtype, enum kv_dtype dt,
                        const char *cache_dtype, int64_t n, int have_n,
                        int fallback)
{
    static const int64_t size[] = { 0, 0, 2048, 2048, 2048, 512, 512, 2048, 0 };
    struct kv_mask_values *v = &o->vals;
    enum kv_dtype def[] = { KV_BOOL, KV_F16, KV_I8, KV_F16, KV_BOOL, KV_F16,
                            KV_F16, KV_BOOL, KV_BOOL };
    int per_row = o->spec.kind == KV_MASK_POSITIONS;

    if (o->preset == P_MTP_CP) {
        if (!have_dtype)
            dt = KV_BOOL;
        v->dtype = dt;
        v->pad = 0;
        kv_mask_value_bits(dt, 0.0, &v->keep);
        return ascend_value(dt, 1.0, &v->mask, "--dtype");
    }
    if (per_row && o->preset != P_SPLITFUSE)
        return kv_usage("--seq-lens: only with --preset splitfuse");
    if (fallback && !per_row)
        return kv_usage("--fallback: only with --preset splitfuse --seq-lens");
    if (cache_dtype && o->preset != P_ATTN)
        return kv_usage("--cache-dtype: only with --preset attn");
    if (!have_dtype)
        dt = per_row ? KV_F16 : def[o->preset];
    v->dtype = dt;
    v->pad = 0;
    if (dt != KV_BOOL && dt != KV_U8 && dt != KV_I8 && dt != KV_F16 &&
        dt != KV_BF16 && dt != KV_F32)
        return kv_usage("--dtype: '%s' is not a mask dtype (bool, u8, i8, "
                        "f16, bf16, f32)", kv_dtype_name(dt));
    if (!per_row) {
        if (o->preset == P_ATTN) {
            if (!have_n)
                return kv_usage("-n: required by --preset attn");
        } else if (!have_n) {
            n = size[o->preset];
        } else if (n > size[o->preset]) {
            return kv_usage("-n: the %s mask is %lld x %lld; -n takes a "
                            "top-left slice of at most %lld, got %lld",
                            preset_names[o->preset],
                            (long long)size[o->preset],
                            (long long)size[o->preset],
                            (long long)size[o->preset], (long long)n);
        }
        o->spec.n_q = o->spec.n_kv = n;
        o->spec.top_left = 1;
        if (o->preset == P_SWA) {
            o->spec.kind = KV_MASK_WINDOW;
            if (o->spec.window < 1)
                return kv_usage("-w: --preset swa needs the window -w W >= 1");
        } else {
            o->spec.kind = KV_MASK_CAUSAL;
            if (o->spec.window)
                return kv_usage("-w: only with --preset swa");
        }
    }
    kv_mask_value_bits(dt, 0.0, &v->keep);
    switch (o->preset) {
    case P_ATTN: {
        /* fill rule of the dtype the cache was built with, then .to(dt) */
        enum kv_dtype cd = dt;
        if (cache_dtype) {
            struct kv_err e;
            if (kv_dtype_parse(cache_dtype, &cd, &e) != 0)
                return kv_usage("--cache-dtype: %s", e.msg);
        }
        return ascend_value(dt, cd == KV_F16 ? -INFINITY : 1.0, &v->mask,
                            "--cache-dtype");
    }
    case P_SPLITFUSE:
        if (!per_row)
            return ascend_value(dt, 1.0, &v->mask, "--dtype");
        if (dt != KV_F16 && dt != KV_BF16)
            return kv_usage("--dtype: per-row splitfuse masks are f16 or bf16 "
                            "(the upstream scale factor is defined for no "
                            "other dtype)");
        if (fallback) {           /* explicit -10000 fill, zeros set */
            kv_mask_value_bits(dt, -10000.0, &v->mask);
        } else if (dt == KV_F16) { /* cache rows 0/-inf, scale 1 */
            kv_mask_value_bits(dt, -INFINITY, &v->mask);
        } else {                   /* cache rows 0/1 times -10000 */
            kv_mask_value_bits(dt, -10000.0, &v->mask);
            kv_mask_value_bits(dt, -0.0, &v->keep);
        }
        return 0;
    case P_SPLITFUSE_310P:
        if (dt != KV_F16)
            return kv_usage("--dtype: the 310P splitfuse mask is f16");
        kv_mask_value_bits(dt, -10000.0, &v->mask);
        kv_mask_value_bits(dt, -0.0, &v->keep);    /* 0 * -10000 */
        return 0;
    case P_MLA:
        return ascend_value(dt, dt == KV_F16 ? -INFINITY : 1.0, &v->mask,
                            "--dtype");
    default:
        return ascend_value(dt, 1.0, &v->mask, "--dtype");
    }
}

/* Parse "B" or "B,C" into bq, bk. */
static int parse_block(const char *s, int64_t *bq, int64_t *bk)
{
    int64_t *v = NULL;
    size_t n = 0;
    if (parse_list(s, "--block-size", 1, &v, &n) != 0)
        return -1;
    if (n > 2) {
        free(v);
        return kv_usage("--block-size: expected B or B,C, got '%s'", s);
    }
    *bq = v[0];
    *bk = n == 2 ? v[1] : v[0];
    free(v);
    return 0;
}

static void human_size(double b, char *buf, size_t len)
{
    const char *u[] = { "bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    int k = 0;
    while (b >= 1024 && k < 6) {
        b /= 1024;
        k++;
    }
    if (k == 0)
        snprintf(buf, len, "%.0f bytes", b);
    else
        snprintf(buf, len, "%.1f %s", b, u[k]);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    kv_progress_update(ctx, done, total);
}

/* stats streams its text, but its 'first:' and 'last:' fields grow with
 * the rows: like the dense formats it is held to --max-mem (before any
 * work: counting the kept elements of 2^40 rows alone would not end).
 * block and bsr stream within --max-mem whatever their size.  Returns 0
 * or the exit status after the message. */
static int stats_size_check(const struct opts *o, const struct kv_mask *m)
{
    char a[32], b[32];
    int digits = 2;     /* up to the digits of n_kv, a sign and a space */
    double need;

    if (o->fmt != F_STATS)
        return 0;
    for (int64_t x = m->n_kv; x >= 10; x /= 10)
        digits++;
    need = 2.0 * (double)m->n_q * digits;
    if (need <= (double)o->max_mem)
        return 0;
    human_size(need, a, sizeof a);
    human_size((double)o->max_mem, b, sizeof b);
    return kv_fail("the stats output needs up to %s (first and last of %lld "
                   "rows), more than --max-mem %s; raise --max-mem", a,
                   (long long)m->n_q, b);
}

static int run(struct opts *o)
{
    struct kv_progress prog;
    struct kv_mask m;
    struct kv_err e;
    struct kv_out out = { 0 };
    FILE *f;
    double t0 = kv_now();
    int rc;

    kv_mask_init(&m);
    if (kv_mask_make(&m, &o->spec, &e) != 0) {
        opts_release(o);
        /* geometry errors name the option: they are usage errors */
        return o->spec.kind == KV_MASK_CHUNK ? kv_fail_err(&e)
                                             : kv_usage("%s", e.msg);
    }
    /* sizes of what will be written, before anything is written */
    if (o->fmt == F_NPY || o->fmt == F_TEXT || o->fmt == F_PGM ||
        o->fmt == F_BITS) {
        size_t bytes = 0;
        double need;
        int over;
        if (o->fmt == F_BITS) {
            need = (double)m.n_q * (double)m.n_kv / 8;
        } else if (o->fmt == F_PGM) {
            need = (double)m.n_q * (double)m.n_kv * (double)o->cell *
                   (double)o->cell;
            for (int d = 0; d < o->out.n_outer_dims; d++)
                need *= (double)o->out.outer[d];
        } else {
            over = kv_mask_dense_bytes(&m, &o->vals, &o->out, o->nz, &bytes);
            need = (double)kv_dtype_size(o->vals.dtype) * (double)m.n_q *
                   (double)m.n_kv;
            for (int d = 0; d < o->out.n_outer_dims; d++)
                need *= (double)o->out.outer[d];
            if (!over)
                need = (double)bytes;
            if (o->fmt == F_TEXT)
                need *= 2;
        }
        if (need >= 18446744073709551615.0) {
            kv_mask_release(&m);
            opts_release(o);
            return kv_usage("-n/-q/-k/--batch/--heads: the size of the %s "
                            "output overflows (more than 16 EiB)",
                            o->fmt == F_BITS ? "bits" : "dense");
        }
        if (need > (double)o->max_mem) {
            char a[32], b[32];
            human_size(need, a, sizeof a);
            human_size((double)o->max_mem, b, sizeof b);
            long long nq = m.n_q, nkv = m.n_kv;
            kv_mask_release(&m);
            opts_release(o);
            return kv_fail("the %s output needs %s (%lld x %lld %s), more "
                           "than --max-mem %s; use a compact format "
                           "(-f block, bsr or stats) or raise --max-mem",
                           o->fmt == F_BITS ? "bits" : "dense", a, nq, nkv,
                           kv_dtype_name(o->vals.dtype), b);
        }
    }
    if (o->fmt == F_BLOCK || o->fmt == F_BSR ||
        (o->fmt == F_STATS && o->have_block)) {
        int64_t n_qb = (m.n_q + o->bq - 1) / o->bq;
        int64_t n_kb = (m.n_kv + o->bk - 1) / o->bk;
        const char *why = NULL;
        double reps = (double)o->out.outer[0] * (double)o->out.outer[1];
        if (n_qb > INT32_MAX || n_kb > INT32_MAX)
            why = "tile indices do not fit int32";
        else if (o->fmt == F_BLOCK &&
                 reps * (double)n_qb * (double)n_kb * 4 > 4.6e18) {
            kv_mask_release(&m);
            opts_release(o);
            return kv_usage("--batch/--heads: the BlockMask index tensors "
                            "would be larger than 2^62 bytes");
        }
        else if (o->fmt == F_BSR && m.n_kv % o->bk != 0)
            why = "FlashInfer BSR needs the key length to be a multiple of "
                  "the block width C";
        if (why) {
            kv_usage("--block-size: %lld x %lld with blocks %lld x %lld: %s",
                     (long long)m.n_q, (long long)m.n_kv, (long long)o->bq,
                     (long long)o->bk, why);
            kv_mask_release(&m);
            opts_release(o);
            return KV_EXIT_USAGE;
        }
    }
    if ((rc = stats_size_check(o, &m)) != 0) {
        kv_mask_release(&m);
        opts_release(o);
        return rc;
    }
    if (kv_out_open(&out, o->output, &e) != 0) {
        kv_mask_release(&m);
        opts_release(o);
        return kv_fail_err(&e);
    }
    f = out.f;
    kv_progress_start(&prog, "mask", o->quiet);
    o->out.progress = on_progress;
    o->out.progress_ctx = &prog;
    switch (o->fmt) {
    case F_NPY:
        rc = kv_mask_write_npy(f, &m, &o->vals, &o->out, o->nz, &e);
        break;
    case F_TEXT:
        rc = kv_mask_write_text(f, &m, &o->vals, &o->out, &e);
        break;
    case F_PGM:
        rc = kv_mask_write_pgm(f, &m, &o->out, o->cell, &e);
        break;
    case F_BITS:
        rc = kv_mask_write_bits(f, &m, &o->out, &e);
        break;
    case F_BLOCK:
        rc = kv_mask_write_block(f, &m, o->bq, o->bk, &o->out, o->max_mem, &e);
        break;
    case F_BSR:
        rc = kv_mask_write_bsr(f, &m, o->bq, o->bk, !o->no_mask, &o->out,
                               o->max_mem, &e);
        break;
    default:
        rc = kv_mask_write_stats(f, &m, o->have_block ? o->bq : 0,
                                 o->have_block ? o->bk : 0, &e);
    }
    kv_progress_end(&prog);
    if (o->verbose)
        kv_warn("%lld x %lld mask written in %.3f s", (long long)m.n_q,
                (long long)m.n_kv, kv_now() - t0);
    kv_mask_release(&m);
    opts_release(o);
    if (rc != 0) {
        kv_out_abort(&out);
        return kv_fail_err(&e);
    }
    if (o->output) {
        if (kv_out_commit(&out, &e) != 0)
            return kv_fail_err(&e);
        return 0;
    }
    return kv_close_stdout();
}

static const char synopsis[] =
    "\nKIND is causal, window, band, full, prefix, varlen, chunk or ascend.\n"
    "Attention masks, dense (npy, text, pgm) or compact (bits, block, bsr,\n"
    "stats), bit-exact with vLLM, vllm-ascend, FlexAttention and FlashInfer.";

static const char extra[] =
    "Rules (i' = i + SKV - SQ, or i with --align top-left):\n"
    "  causal  j <= i'            window  i'-W < j <= i'\n"
    "  band    i'-P <= j <= i'+N  full    always\n"
    "  prefix  j < P or j <= i'   varlen  same request, causal inside\n"
    "  chunk   sys causal; chunk: all sys + own chunk causal; question: j <= i\n"
    "  ascend  vllm-ascend builder outputs: --preset attn|splitfuse|\n"
    "          splitfuse-310p|pooling|mla|pcp-mla|swa|mtp-cp\n"
    "Values: 0 = attend, fill = masked (default); --keep: 1 = attend.\n"
    "See man 1 kvmask.";

struct margs {
    struct arg_str *kind, *n, *sq, *skv, *w, *pre, *next, *prefix, *qlens, *kvlens, *sys, *chunks, *question, *segments, *preset, *seqlens, *positions, *cachedt, *history, *cpsize, *cprank, *interleave, *align, *dtype, *fill, *batch, *heads, *format, *layout, *block, *bitorder, *cell, *output, *maxmem, *jobs;
    struct arg_lit *fallback, *keep, *text, *nomask, *force, *quiet, *verbose, *help, *version;
    struct arg_end *end;
};

/* kvmask's options, in the order --help lists them; returns the count. */
static int margs_make(struct margs *a, void **t)
{
    int k = 0;
    t[k++] = a->kind = arg_str0(NULL, NULL, "KIND", "mask kind (see below)");
    t[k++] = a->n = arg_str0("n", NULL, "N", "square mask: N rows, N columns");
    t[k++] = a->sq = arg_str0("q", NULL, "SQ", "query rows");
    t[k++] = a->skv = arg_str0("k", NULL, "SKV", "key columns");
    t[k++] = a->w = arg_str0("w", "window", "W", "window: W keys including self");
    t[k++] = a->pre = arg_str0(NULL, "pre", "P", "band: keys before i'");
    t[k++] = a->next = arg_str0(NULL, "next", "N", "band: keys after i'");
    t[k++] = a->prefix = arg_str0("p", "prefix", "P", "prefix: P leading keys seen by all");
    t[k++] = a->qlens = arg_str0(NULL, "q-lens", "a,b,..", "varlen: query length of each request");
    t[k++] = a->kvlens = arg_str0(NULL, "kv-lens", "c,d,..", "varlen: key length of each request (default: q-lens)");
    t[k++] = a->sys = arg_str0(NULL, "sys", "N", "chunk: system prompt tokens");
    t[k++] = a->chunks = arg_str0(NULL, "chunks", "a,b,..", "chunk: chunk lengths");
    t[k++] = a->question = arg_str0(NULL, "question", "M", "chunk: question tokens");
    t[k++] = a->segments = arg_str0(NULL, "segments", "FILE", "chunk: segments as written by kvchunk split");
    t[k++] = a->preset = arg_str0(NULL, "preset", "NAME", "ascend: the mask (see below)");
    t[k++] = a->seqlens = arg_str0(NULL, "seq-lens", "a,b,..", "ascend splitfuse: per-row mask of these requests");
    t[k++] = a->positions = arg_str0(NULL, "positions", "p,q,..", "ascend splitfuse: row positions (default from --q-lens)");
    t[k++] = a->fallback = arg_lit0(NULL, "fallback", "ascend splitfuse: the explicit -10000 fallback build");
    t[k++] = a->cachedt = arg_str0(NULL, "cache-dtype", "DT", "ascend attn: dtype of the call that built the cache");
    t[k++] = a->history = arg_str0(NULL, "history", "h1,h2,..", "ascend mtp-cp: tokens before each decode request");
    t[k++] = a->cpsize = arg_str0(NULL, "cp-size", "W", "ascend mtp-cp: context-parallel ranks (pcp x dcp)");
    t[k++] = a->cprank = arg_str0(NULL, "cp-rank", "R", "ascend mtp-cp: this rank");
    t[k++] = a->interleave = arg_str0(NULL, "interleave", "I", "ascend mtp-cp: tokens per rank in turn (default 1)");
    t[k++] = a->align = arg_str0(NULL, "align", "SIDE", "diagonal at bottom-right (default) or top-left");
    t[k++] = a->keep = arg_lit0(NULL, "keep", "1/True = attend, 0 = masked");
    t[k++] = a->dtype = arg_str0(NULL, "dtype", "DT", "bool|u8|i8|f16|bf16|f32 (default bool)");
    t[k++] = a->fill = arg_str0(NULL, "fill", "-inf|min|NUM", "masked value of float dtypes (default -inf)");
    t[k++] = a->batch = arg_str0(NULL, "batch", "B", "leading batch dimension");
    t[k++] = a->heads = arg_str0(NULL, "heads", "H", "leading heads dimension");
    t[k++] = a->format = arg_str0("f", "format", "FMT", "npy|text|pgm|bits|block|bsr|stats");
    t[k++] = a->layout = arg_str0(NULL, "layout", "nd|nz", "dense layout (nz: Ascend FRACTAL_NZ)");
    t[k++] = a->block = arg_str0(NULL, "block-size", "B[,C]", "tile size of block/bsr/stats (default 128)");
    t[k++] = a->text = arg_lit0(NULL, "text", "compact formats as text fields");
    t[k++] = a->nomask = arg_lit0(NULL, "no-mask", "bsr: leave out the packed block mask");
    t[k++] = a->bitorder = arg_str0(NULL, "bitorder", "little|big", "bits/bsr bit order (default little, as FlashInfer attention)");
    t[k++] = a->cell = arg_str0(NULL, "cell", "K", "pgm: K x K pixels per element (default 1)");
    t[k++] = a->output = arg_str0("o", "output", "FILE", "write to FILE (temp file + rename)");
    t[k++] = a->force = arg_lit0(NULL, "force", "write binary to a terminal");
    t[k++] = a->maxmem = arg_str0(NULL, "max-mem", "SIZE", "refuse dense output larger than SIZE (default 75% of RAM)");
    t[k++] = a->jobs = arg_str0("j", "jobs", "N", "threads (output is the same for any N)");
    t[k++] = a->quiet = arg_lit0(NULL, "quiet", "no progress line");
    t[k++] = a->verbose = arg_lit0("v", "verbose", "print timings");
    t[k++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[k++] = a->version = arg_lit0(NULL, "version", "print the version and exit");
    t[k++] = a->end = arg_end(20);
    return k;
}

/* KIND, the options that belong to other kinds, --max-mem, -j, --align. */
static int kind_options(const struct margs *a, struct opts *o)
{
    struct kv_err e;

    if (a->kind->count == 0) {
        kv_usage("missing KIND (causal, window, band, full, prefix, varlen, "
                 "chunk, ascend)");
        return KV_EXIT_USAGE;
    }
    o->kind = lookup(kind_names, a->kind->sval[0]);
    if (o->kind < 0) {
        kv_usage("unknown KIND '%s' (causal, window, band, full, prefix, "
                 "varlen, chunk, ascend)", a->kind->sval[0]);
        return KV_EXIT_USAGE;
    }
    /* options that belong to other kinds */
    {
        struct { void *opt; int count; const char *name; unsigned kinds; } only[] = {
#define K(x) (1u << (x))
            { a->w, a->w->count, "-w", K(1) | K(5) | K(KIND_ASCEND) },
            { a->pre, a->pre->count, "--pre", K(2) },
            { a->next, a->next->count, "--next", K(2) },
            { a->prefix, a->prefix->count, "-p", K(4) },
            { a->qlens, a->qlens->count, "--q-lens", K(5) | K(KIND_ASCEND) },
            { a->kvlens, a->kvlens->count, "--kv-lens", K(5) },
            { a->sys, a->sys->count, "--sys", K(6) },
            { a->chunks, a->chunks->count, "--chunks", K(6) },
            { a->question, a->question->count, "--question", K(6) },
            { a->segments, a->segments->count, "--segments", K(6) },
            { a->preset, a->preset->count, "--preset", K(KIND_ASCEND) },
            { a->seqlens, a->seqlens->count, "--seq-lens", K(KIND_ASCEND) },
            { a->positions, a->positions->count, "--positions", K(KIND_ASCEND) },
            { a->fallback, a->fallback->count, "--fallback", K(KIND_ASCEND) },
            { a->cachedt, a->cachedt->count, "--cache-dtype", K(KIND_ASCEND) },
            { a->history, a->history->count, "--history", K(KIND_ASCEND) },
            { a->cpsize, a->cpsize->count, "--cp-size", K(KIND_ASCEND) },
            { a->cprank, a->cprank->count, "--cp-rank", K(KIND_ASCEND) },
            { a->interleave, a->interleave->count, "--interleave", K(KIND_ASCEND) },
            { a->n, a->n->count, "-n", 0x1f | K(KIND_ASCEND) },
            { a->sq, a->sq->count, "-q", 0x1f },
            { a->skv, a->skv->count, "-k", 0x1f },
            { a->align, a->align->count, "--align", 0x1f | K(5) },
            { a->keep, a->keep->count, "--keep", 0x7f },
            { a->fill, a->fill->count, "--fill", 0x7f },
#undef K
        };
        for (size_t k = 0; k < sizeof only / sizeof only[0]; k++)
            if (only[k].count && !(only[k].kinds & (1u << o->kind))) {
                kv_usage("%s: not an option of '%s'", only[k].name,
                         kind_names[o->kind]);
                return KV_EXIT_USAGE;
            }
    }
    if (a->maxmem->count) {
        if (kv_parse_max_mem(a->maxmem->sval[0], &o->max_mem, &e) != 0) {
            kv_usage("%s", e.msg);
            return KV_EXIT_USAGE;
        }
    } else {
        o->max_mem = kv_default_max_mem();
    }
    o->out.threads = kv_nproc();
    if (a->jobs->count) {
        int64_t j;
        if (parse_len(a->jobs->sval[0], "-j", 0, &j) != 0)
            return KV_EXIT_USAGE;
        if (j > 0)
            o->out.threads = j > 1024 ? 1024 : (int)j;
    }
    o->spec.top_left = 0;
    if (a->align->count) {
        if (strcmp(a->align->sval[0], "top-left") == 0)
            o->spec.top_left = 1;
        else if (strcmp(a->align->sval[0], "bottom-right") != 0) {
            kv_usage("--align: expected bottom-right or top-left, got '%s'",
                     a->align->sval[0]);
            return KV_EXIT_USAGE;
        }
    }

    return 0;
}

/* The size and the rule of the mask (nv: -n, for ascend). */
static int geometry(const struct margs *a, struct opts *o, int64_t *nv_out)
{
    struct kv_err e;

    int64_t nv = 0;
    *nv_out = 0;
    if (a->n->count && parse_len(a->n->sval[0], "-n", 1, &nv) != 0)
        return KV_EXIT_USAGE;
    if (o->kind <= 4) {
        static const enum kv_mask_kind kinds[] = { KV_MASK_CAUSAL,
            KV_MASK_WINDOW, KV_MASK_BAND, KV_MASK_FULL, KV_MASK_PREFIX };
        o->spec.kind = kinds[o->kind];
        if (a->n->count && (a->sq->count || a->skv->count)) {
            kv_usage("-n: give either -n N or -q SQ -k SKV");
            return KV_EXIT_USAGE;
        }
        if (a->n->count) {
            o->spec.n_q = o->spec.n_kv = nv;
        } else if (a->sq->count && a->skv->count) {
            if (parse_len(a->sq->sval[0], "-q", 1, &o->spec.n_q) ||
                parse_len(a->skv->sval[0], "-k", 1, &o->spec.n_kv))
                return KV_EXIT_USAGE;
        } else {
            kv_usage("%s: give the size with -n N or -q SQ -k SKV",
                     kind_names[o->kind]);
            return KV_EXIT_USAGE;
        }
        if (o->kind == 1) {
            if (!a->w->count) {
                kv_usage("-w: window needs -w W (keys including self)");
                return KV_EXIT_USAGE;
            }
        }
        if (o->kind == 2 && (!a->pre->count || !a->next->count)) {
            kv_usage("--pre/--next: band needs --pre P --next N");
            return KV_EXIT_USAGE;
        }
        if (o->kind == 4 && !a->prefix->count) {
            kv_usage("-p: prefix needs -p P");
            return KV_EXIT_USAGE;
        }
    }
    if (a->w->count && parse_len(a->w->sval[0], "-w", 1, &o->spec.window) != 0)
        return KV_EXIT_USAGE;
    if (a->pre->count && parse_len(a->pre->sval[0], "--pre", 0, &o->spec.pre) != 0)
        return KV_EXIT_USAGE;
    if (a->next->count && parse_len(a->next->sval[0], "--next", 0, &o->spec.next) != 0)
        return KV_EXIT_USAGE;
    if (a->prefix->count && parse_len(a->prefix->sval[0], "-p", 0, &o->spec.prefix) != 0)
        return KV_EXIT_USAGE;
    if (o->kind == 5) {                      /* varlen */
        size_t nq = 0, nk = 0;
        o->spec.kind = KV_MASK_VARLEN;
        if (!a->qlens->count) {
            kv_usage("--q-lens: varlen needs --q-lens a,b,..");
            return KV_EXIT_USAGE;
        }
        if (parse_list(a->qlens->sval[0], "--q-lens", 0, &o->q_lens, &nq) != 0)
            return KV_EXIT_USAGE;
        if (a->kvlens->count) {
            if (parse_list(a->kvlens->sval[0], "--kv-lens", 0, &o->kv_lens, &nk))
                return KV_EXIT_USAGE;
            if (nk != nq) {
                kv_usage("--kv-lens: %zu value%s for %zu requests in --q-lens",
                         nk, nk == 1 ? "" : "s", nq);
                return KV_EXIT_USAGE;
            }
        }
        o->spec.q_lens = o->q_lens;
        o->spec.kv_lens = o->kv_lens;
        o->spec.n_req = nq;
    }
    if (o->kind == 6) {                      /* chunk */
        o->spec.kind = KV_MASK_CHUNK;
        if (a->segments->count && (a->sys->count || a->chunks->count || a->question->count)) {
            kv_usage("--segments: give either --segments FILE or --sys/--chunks/"
                     "--question");
            return KV_EXIT_USAGE;
        }
        if (a->segments->count) {
            if (read_segments(o, a->segments->sval[0], &e) != 0) {
                return kv_fail("--segments: %s", e.msg);
            }
        } else if (a->sys->count || a->chunks->count || a->question->count) {
            int64_t *cl = NULL, s = 0, q = 0;
            size_t nc = 0;
            if (a->sys->count && parse_len(a->sys->sval[0], "--sys", 0, &s))
                return KV_EXIT_USAGE;
            if (a->question->count && parse_len(a->question->sval[0], "--question",
                                             0, &q))
                return KV_EXIT_USAGE;
            /* an empty chunk is skipped, as in a segments file */
            if (a->chunks->count && parse_list(a->chunks->sval[0], "--chunks", 0,
                                            &cl, &nc))
                return KV_EXIT_USAGE;
            o->seg_kinds = malloc(nc + 2);
            o->seg_lens = malloc((nc + 2) * sizeof *o->seg_lens);
            if (!o->seg_kinds || !o->seg_lens) {
                free(cl);
                return kv_fail("out of memory");
            }
            o->seg_kinds[0] = KV_SEG_SYS;
            o->seg_lens[0] = s;
            for (size_t k = 0; k < nc; k++) {
                o->seg_kinds[k + 1] = KV_SEG_CHUNK;
                o->seg_lens[k + 1] = cl[k];
            }
            o->seg_kinds[nc + 1] = KV_SEG_QUESTION;
            o->seg_lens[nc + 1] = q;
            int64_t total = s + q;
            for (size_t k = 0; k < nc; k++)
                total += cl[k];
            free(cl);
            if (total == 0) {
                kv_usage("--sys/--chunks/--question: the prompt is empty");
                return KV_EXIT_USAGE;
            }
            o->spec.seg_kinds = o->seg_kinds;
            o->spec.seg_lens = o->seg_lens;
            o->spec.n_seg = nc + 2;
        } else {
            kv_usage("chunk: give --segments FILE or --sys N --chunks a,b,.. "
                     "--question M");
            return KV_EXIT_USAGE;
        }
    }

    *nv_out = nv;
    return 0;
}

/* The values of kept and masked elements (ascend: its presets). */
static int mask_values(const struct margs *a, struct opts *o, int64_t nv)
{
    struct kv_err e;

    enum kv_dtype dt = KV_BOOL;
    if (a->dtype->count && kv_dtype_parse(a->dtype->sval[0], &dt, &e) != 0) {
        kv_usage("--dtype: %s", e.msg);
        return KV_EXIT_USAGE;
    }
    if (o->kind == KIND_ASCEND) {
        int p = a->preset->count ? lookup(preset_names, a->preset->sval[0]) : -1;
        if (p <= 0) {
            kv_usage("--preset: expected attn, splitfuse, splitfuse-310p, "
                     "pooling, mla, pcp-mla, swa or mtp-cp%s%s%s",
                     a->preset->count ? ", got '" : "",
                     a->preset->count ? a->preset->sval[0] : "",
                     a->preset->count ? "'" : "");
            return KV_EXIT_USAGE;
        }
        o->preset = (enum preset)p;
        o->spec.kind = KV_MASK_CAUSAL;
        if ((a->history->count || a->cpsize->count || a->cprank->count ||
             a->interleave->count) && o->preset != P_MTP_CP) {
            kv_usage("--history/--cp-size/--cp-rank/--interleave: only with "
                     "--preset mtp-cp");
            return KV_EXIT_USAGE;
        }
        if (o->preset == P_MTP_CP) {
            if (setup_mtp(o, a->history, a->qlens, a->cpsize, a->cprank, a->interleave,
                          a->n->count || a->seqlens->count || a->positions->count) != 0)
                return KV_EXIT_USAGE;
        } else if (a->seqlens->count) {
            int64_t *sl = NULL, *ql = NULL;
            size_t ns = 0, nq = 0, np = 0;
            if (a->n->count) {
                kv_usage("-n: not with --seq-lens (the mask is sum(q) x "
                         "max(seq-lens))");
                return KV_EXIT_USAGE;
            }
            if (parse_list(a->seqlens->sval[0], "--seq-lens", 1, &sl, &ns))
                return KV_EXIT_USAGE;
            int64_t maxs = 0;
            for (size_t r = 0; r < ns; r++)
                maxs = sl[r] > maxs ? sl[r] : maxs;
            if (a->positions->count) {
                if (a->qlens->count) {
                    free(sl);
                    kv_usage("--positions: give either --positions or --q-lens");
                    return KV_EXIT_USAGE;
                }
                if (parse_list(a->positions->sval[0], "--positions", 0,
                               &o->positions, &np)) {
                    free(sl);
                    return KV_EXIT_USAGE;
                }
                for (size_t k = 0; k < np; k++)
                    if (o->positions[k] >= maxs) {
                        free(sl);
                        kv_usage("--positions: position %lld is not below "
                                 "max(--seq-lens) = %lld",
                                 (long long)o->positions[k], (long long)maxs);
                        return KV_EXIT_USAGE;
                    }
            } else {
                if (a->qlens->count) {
                    if (parse_list(a->qlens->sval[0], "--q-lens", 1, &ql, &nq)) {
                        free(sl);
                        return KV_EXIT_USAGE;
                    }
                    if (nq != ns) {
                        kv_usage("--q-lens: %zu value%s for %zu requests in "
                                 "--seq-lens", nq, nq == 1 ? "" : "s", ns);
                        free(sl);
                        free(ql);
                        return KV_EXIT_USAGE;
                    }
                }
                int64_t tot = 0;
                for (size_t r = 0; r < ns; r++) {
                    int64_t q = ql ? ql[r] : sl[r];
                    if (q > sl[r]) {
                        kv_usage("--q-lens: request %zu has %lld new tokens but "
                                 "a sequence of %lld", r, (long long)q,
                                 (long long)sl[r]);
                        free(sl);
                        free(ql);
                        return KV_EXIT_USAGE;
                    }
                    tot += q;
                }
                if (tot > KV_MASK_MAX_LEN) {
                    kv_usage("--q-lens: too many rows");
                    free(sl);
                    free(ql);
                    return KV_EXIT_USAGE;
                }
                o->positions = malloc((size_t)tot * sizeof *o->positions);
                if (!o->positions) {
                    free(sl);
                    free(ql);
                    return kv_fail("out of memory");
                }
                for (size_t r = 0; r < ns; r++) {
                    int64_t q = ql ? ql[r] : sl[r];
                    for (int64_t k = 0; k < q; k++)
                        o->positions[np++] = sl[r] - q + k;
                }
                free(ql);
            }
            free(sl);
            o->spec.kind = KV_MASK_POSITIONS;
            o->spec.n_q = (int64_t)np;
            o->spec.n_kv = maxs;
            o->spec.positions = o->positions;
        } else if (o->preset != P_MTP_CP && (a->positions->count || a->qlens->count)) {
            kv_usage("%s: only with --preset splitfuse --seq-lens",
                     a->positions->count ? "--positions" : "--q-lens");
            return KV_EXIT_USAGE;
        }
        if (setup_ascend(o, a->dtype->count, dt, a->cachedt->count ?
                         a->cachedt->sval[0] : NULL, nv, a->n->count,
                         a->fallback->count) != 0)
            return KV_EXIT_USAGE;
    } else if (kv_mask_values_plain(&o->vals, dt, a->keep->count,
                                    a->fill->count ? a->fill->sval[0] : NULL,
                                    &e) != 0) {
        kv_usage("%s", e.msg);
        return KV_EXIT_USAGE;
    }

    return 0;
}

/* --batch, --heads. */
static int outer_dims(const struct margs *a, struct opts *o)
{
    if (a->batch->count) {
        if (parse_len(a->batch->sval[0], "--batch", 1, &o->out.outer[o->out.n_outer_dims]))
            return KV_EXIT_USAGE;
        o->out.n_outer_dims++;
    }
    if (a->heads->count) {
        if (parse_len(a->heads->sval[0], "--heads", 1, &o->out.outer[o->out.n_outer_dims]))
            return KV_EXIT_USAGE;
        o->out.n_outer_dims++;
    }

    return 0;
}

/* The output format and what it allows. */
static int output_options(const struct margs *a, struct opts *o)
{
    if (a->format->count && strcmp(a->format->sval[0], "block") == 0) {
        /* a BlockMask always has [B, H] leading dims */
        o->out.n_outer_dims = 2;
        o->out.outer[0] = o->out.outer[1] = 1;
        if (a->batch->count &&
            parse_len(a->batch->sval[0], "--batch", 1, &o->out.outer[0]))
            return KV_EXIT_USAGE;
        if (a->heads->count &&
            parse_len(a->heads->sval[0], "--heads", 1, &o->out.outer[1]))
            return KV_EXIT_USAGE;
    }
    {
        static const char *const fmts[] = { "", "npy", "text", "pgm", "bits",
                                            "block", "bsr", "stats", NULL };
        o->fmt = F_AUTO;
        if (a->format->count) {
            int k = lookup(fmts, a->format->sval[0]);
            if (k <= 0) {
                kv_usage("-f: expected npy, text, pgm, bits, block, bsr or "
                         "stats, got '%s'", a->format->sval[0]);
                return KV_EXIT_USAGE;
            }
            o->fmt = (enum fmt)k;
        }
    }
    /* "-o -" is standard output, with its terminal rules */
    o->output = a->output->count && strcmp(a->output->sval[0], "-") != 0 ?
               a->output->sval[0] : NULL;
    int to_tty = !o->output && kv_isatty(stdout);
    if (o->fmt == F_AUTO)
        o->fmt = to_tty ? F_TEXT : F_NPY;
    o->out.text = a->text->count || (to_tty && !a->force->count);
    if (a->layout->count) {
        if (strcmp(a->layout->sval[0], "nz") == 0) {
            o->nz = 1;
        } else if (strcmp(a->layout->sval[0], "nd") != 0) {
            kv_usage("--layout: expected nd or nz, got '%s'", a->layout->sval[0]);
            return KV_EXIT_USAGE;
        }
        if (o->nz && o->fmt != F_NPY) {
            kv_usage("--layout: nz is a dense .npy layout (-f npy)");
            return KV_EXIT_USAGE;
        }
        if (o->nz && o->out.n_outer_dims) {
            kv_usage("--layout: nz is for a 2-d mask (no --batch/--heads)");
            return KV_EXIT_USAGE;
        }
    }
    if ((a->dtype->count || a->fill->count || a->cachedt->count) &&
        (o->fmt == F_BITS || o->fmt == F_BLOCK || o->fmt == F_BSR ||
         o->fmt == F_STATS)) {
        /* compact formats describe where rows attend, not the values */
        kv_usage("%s: only for dense output (npy, text, pgm); -f %s "
                 "describes where rows attend, whatever the values",
                 a->dtype->count ? "--dtype" : a->fill->count ? "--fill" :
                 "--cache-dtype", a->format->sval[0]);
        return KV_EXIT_USAGE;
    }
    if (a->text->count && o->fmt != F_BITS && o->fmt != F_BLOCK && o->fmt != F_BSR) {
        kv_usage("--text: only for -f bits, block or bsr (use -f text)");
        return KV_EXIT_USAGE;
    }
    if (a->nomask->count && o->fmt != F_BSR) {
        kv_usage("--no-mask: only with -f bsr");
        return KV_EXIT_USAGE;
    }
    o->no_mask = a->nomask->count;
    if (a->bitorder->count) {
        if (o->fmt != F_BITS && o->fmt != F_BSR) {
            kv_usage("--bitorder: only with -f bits or bsr");
            return KV_EXIT_USAGE;
        }
        if (strcmp(a->bitorder->sval[0], "big") == 0) {
            o->out.bits_big = 1;
        } else if (strcmp(a->bitorder->sval[0], "little") != 0) {
            kv_usage("--bitorder: expected little or big, got '%s'",
                     a->bitorder->sval[0]);
            return KV_EXIT_USAGE;
        }
    }
    o->cell = 1;
    if (a->cell->count) {
        if (o->fmt != F_PGM) {
            kv_usage("--cell: only with -f pgm");
            return KV_EXIT_USAGE;
        }
        if (parse_len(a->cell->sval[0], "--cell", 1, &o->cell))
            return KV_EXIT_USAGE;
        if (o->cell > 64) {
            kv_usage("--cell: expected an integer from 1 to 64, got '%s'",
                     a->cell->sval[0]);
            return KV_EXIT_USAGE;
        }
    }
    o->bq = o->bk = 128;
    if (a->block->count) {
        if (o->fmt != F_BLOCK && o->fmt != F_BSR && o->fmt != F_STATS) {
            kv_usage("--block-size: only with -f block, bsr or stats");
            return KV_EXIT_USAGE;
        }
        if (parse_block(a->block->sval[0], &o->bq, &o->bk))
            return KV_EXIT_USAGE;
        o->have_block = 1;
    }
    if (o->out.n_outer_dims && (o->fmt == F_BITS || o->fmt == F_BSR ||
                               o->fmt == F_STATS)) {
        kv_usage("%s: FlashInfer masks and stats have no batch/head "
                 "dimensions", a->batch->count ? "--batch" : "--heads");
        return KV_EXIT_USAGE;
    }
    if (o->spec.rows_per_mat > 0 && (o->fmt == F_BITS || o->fmt == F_BLOCK ||
                                    o->fmt == F_BSR)) {
        kv_usage("-f: the mtp-cp mask is a batch of different matrices; use "
                 "npy, text, pgm or stats");
        return KV_EXIT_USAGE;
    }
    if (!o->output && o->fmt == F_PGM && !a->force->count && kv_isatty(stdout)) {
        return kv_usage("refusing to write a binary PGM picture to a terminal; "
                      "use -o FILE, redirect the output, or add --force");
        return KV_EXIT_USAGE;
    }
    if (!o->output && (o->fmt == F_NPY || o->fmt == F_PGM ||
                      ((o->fmt == F_BITS || o->fmt == F_BLOCK ||
                        o->fmt == F_BSR) && !o->out.text))) {
        int rc = kv_check_binary_ok(stdout, a->force->count);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct margs a;
    void *argtable[64];
    int n_args = margs_make(&a, argtable);
    struct opts o;
    int64_t nv = 0;
    int rc;

    kv_setprogname(argv[0]);
    memset(&o, 0, sizeof o);
    rc = kv_arg_parse(argtable, argc, argv, a.help, a.version, a.end, synopsis,
                      extra);
    if (rc >= 0 || (rc = kind_options(&a, &o)) || (rc = geometry(&a, &o, &nv)) ||
        (rc = mask_values(&a, &o, nv)) || (rc = outer_dims(&a, &o)) ||
        (rc = output_options(&a, &o))) {
        opts_release(&o);
        arg_freetable(argtable, (size_t)n_args);
        return rc;
    }
    o.force = a.force->count;
    o.verbose = a.verbose->count;
    o.quiet = a.quiet->count;
    rc = run(&o);
    arg_freetable(argtable, (size_t)n_args);
    return rc;
}
