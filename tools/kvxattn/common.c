/* kvxattn: what both subcommands share: the -f formats, the progress
 * line, and the writers of a block mask (pgm, density, the FlexAttention
 * BlockMask stream). */
#include "kvxattn.h"

int parse_format(const char *s, int recall, int *fmt)
{
    static const char *names[] = {"npy", "text", "pgm", "stats", "block",
                                  "rows", "json"};
    static const int vals[] = {FMT_NPY, FMT_TEXT, FMT_PGM, FMT_STATS,
                               FMT_BLOCK, FMT_ROWS, FMT_JSON};

    for (int i = 0; i < 7; i++) {
        if (recall ? (i >= 2 && i < 5) : i >= 5)
            continue;
        if (strcmp(s, names[i]) == 0) {
            *fmt = vals[i];
            return 0;
        }
    }
    return kv_usage("-f: expected %s, got '%s'",
                    recall ? "text, json, rows or npy"
                           : "npy, text, pgm, stats or block",
                    s);
}

void scores_overflow(struct kv_err *e, int given, const char *how,
                     const char *opt, double x, const char *fix)
{
    if (given && strstr(e->msg, "not finite in f32"))
        kv_err_set(e, "a score of Q and K %s %s %g is not finite in f32 (inf "
                   "or nan): give a %s %s", how, opt, x, fix, opt);
}

int mem_add(size_t *sum, size_t a, size_t b, size_t c, size_t size)
{
    size_t n;
    return kv_size_mul(a, b, &n) || kv_size_mul(n, c, &n) ||
           kv_size_mul(n, size, &n) || kv_size_add(*sum, n, sum) ? -1 : 0;
}

int mem_take(size_t *max, size_t extra, struct kv_err *e)
{
    if (!*max)
        return 0;
    if (extra >= *max)
        return kv_err_set(e, "the block masks and results need %zu bytes of "
                          "memory, more than --max-mem %zu", extra, *max);
    *max -= extra;
    return 0;
}

int open_side_npy(struct kv_out *so, const char *path, const struct kv_tensor *t,
                  struct kv_err *e)
{
    memset(so, 0, sizeof *so);
    if (!path)
        return 0;
    if (kv_out_open(so, path, e))
        return -1;
    if (kv_npy_write(so->f, t, e)) {
        kv_out_abort(so);
        return -1;
    }
    return 0;
}

void mem_need(struct kv_err *e, size_t extra, size_t max)
{
    size_t need, left;
    if (max && sscanf(e->msg, "the work needs %zu bytes of memory, more than "
                      "--max-mem %zu", &need, &left) == 2)
        kv_err_set(e, "the work needs %zu bytes of memory, more than "
                   "--max-mem %zu", need + extra, max);
}

void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    kv_progress_update(ctx, done, total);
}

int write_pgm(FILE *f, const struct kv_tensor *m, struct kv_err *e)
{
    int64_t w = m->shape[3];
    int64_t h = m->shape[0] * m->shape[1] * m->shape[2];
    const uint8_t *src = m->data;

    fprintf(f, "P5\n%lld %lld\n255\n", (long long)w, (long long)h);
    for (size_t i = 0; i < m->nbytes; i++)
        putc(src[i] ? 255 : 0, f);
    if (ferror(f))
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

/* Density per (batch, head) and overall. */
void write_density(FILE *f, const struct kv_tensor *m, int causal,
                   int64_t q_offset, int64_t lq, int64_t block,
                   const char *prefix, const double *rmin,
                   const double *rmean)
{
    int64_t nb = m->shape[0], hq = m->shape[1];
    int64_t nbh = nb * hq, tk = 0, tv = 0;
    int64_t *kept = calloc((size_t)nbh * 2, sizeof(int64_t));

    if (!kept)
        return;
    kv_xattn_density(m->data, nbh, m->shape[2], m->shape[3], causal,
                     q_offset, lq, block, kept, kept + nbh);
    for (int64_t i = 0; i < nbh; i++) {
        tk += kept[i];
        tv += kept[nbh + i];
    }
    fprintf(f, "%sdensity: %.6f\nkept: %lld\nvalid: %lld\n", prefix,
            tv ? (double)tk / (double)tv : 0.0, (long long)tk, (long long)tv);
    for (int64_t i = 0; i < nbh; i++) {
        if (nb > 1)
            fprintf(f, "batch %lld ", (long long)(i / hq));
        fprintf(f, "head %lld:", (long long)(i % hq));
        if (rmin)
            fprintf(f, " recall_min %.6f recall_mean %.6f", rmin[i],
                    rmean[i]);
        fprintf(f, " density %.6f kept %lld valid %lld\n",
                kept[nbh + i] ? (double)kept[i] / (double)kept[nbh + i] : 0.0,
                (long long)kept[i], (long long)kept[nbh + i]);
    }
    free(kept);
}

/* An int32 tensor as kvmask prints a compact array: a "name:" line, then
 * one line per innermost row, the leading dimensions one after another. */
static int write_field(FILE *f, const char *name, const struct kv_tensor *t,
                       struct kv_err *e)
{
    const int32_t *v = t->data;
    int64_t w = t->ndim ? t->shape[t->ndim - 1] : 1;
    size_t n = t->nbytes / sizeof(int32_t);

    fprintf(f, "%s:\n", name);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%d%c", (int)v[i], (int64_t)(i + 1) % w ? ' ' : '\n');
    if (ferror(f))
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

/* FlexAttention BlockMask: the eight int32 tensors built from tile states.
 * A kept block's state follows the attention it stands for: the number of
 * (query, key) pairs inside it that causality allows (query token t at kv
 * position q_offset + t) among its real rows and columns, so the diagonal
 * and edge blocks are partial, the blocks below the diagonal full, and a
 * kept block wholly in the future (--keep-sink) empty. */
int write_block(FILE *f, const struct kv_tensor *m, int causal,
                int64_t q_offset, int64_t lq, int64_t lk, int64_t bs,
                int text, struct kv_err *e)
{
    int64_t nbh = m->shape[0] * m->shape[1], nqb = m->shape[2];
    int64_t nkb = m->shape[3];
    const uint8_t *src = m->data;
    uint8_t *tiles = malloc(m->nbytes ? m->nbytes : 1);
    struct kv_tensor out[KV_BM_NFIELDS];
    int rc = -1;

    if (!tiles)
        return kv_err_set(e, "out of memory");
    for (int i = 0; i < KV_BM_NFIELDS; i++)
        kv_tensor_init(&out[i]);
    for (int64_t qb = 0; qb < nqb; qb++) {
        int64_t rows = (qb + 1) * bs <= lq ? bs : lq - qb * bs;
        for (int64_t kb = 0; kb < nkb; kb++) {
            int64_t cols = (kb + 1) * bs <= lk ? bs : lk - kb * bs;
            uint64_t kept = 0;
            uint8_t st;
            for (int64_t r = 0; r < rows; r++) {
                int64_t c = cols;
                if (causal) {
                    c = q_offset + qb * bs + r - kb * bs + 1;
                    c = c < 0 ? 0 : c > cols ? cols : c;
                }
                kept += (uint64_t)c;
            }
            st = kv_tile_state(kept, rows, cols, bs, bs);
            for (int64_t i = 0; i < nbh; i++) {
                size_t at = (size_t)((i * nqb + qb) * nkb + kb);
                tiles[at] = src[at] ? st : KV_TILE_EMPTY;
            }
        }
    }
    if (kv_blockmask_build(tiles, 2, m->shape, nqb, nkb, out, e) == 0) {
        rc = 0;
        for (int i = 0; i < KV_BM_NFIELDS && rc == 0; i++)
            rc = text ? write_field(f, kv_blockmask_names[i], &out[i], e)
                      : kv_npy_write(f, &out[i], e);
    }
    for (int i = 0; i < KV_BM_NFIELDS; i++)
        kv_tensor_release(&out[i]);
    free(tiles);
    return rc;
}
