/* kvmask: the output: batch and heads, the format and its options, the
 * size checks, and the one call to a writer of lib/mask. */
#include "kvmask.h"

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

int rows_over(const struct opts *o, double n, double bytes, const char *what,
              struct kv_err *e)
{
    char a[32], b[32];
    if (n * bytes <= (double)o->max_mem)
        return 0;
    human_size(n * bytes, a, sizeof a);
    human_size((double)o->max_mem, b, sizeof b);
    return kv_err_set(e, "%s need %s (%.0f of them), more than --max-mem %s; "
                      "raise --max-mem", what, a, n, b);
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

/* -f text's first line, a comment that names the two values: the default
 * (0 = attend, 1 or the fill = masked) is Ascend's convention, the
 * opposite of FlexAttention's and FlashInfer's (--keep).  Readers of the
 * integer tables skip it ('#'). */
static int text_header(FILE *f, const struct opts *o, struct kv_err *e)
{
    char ks[48], ms[48];
    const char *why;
    kv_mask_value_text(o->vals.dtype, o->vals.keep, ks, sizeof ks);
    kv_mask_value_text(o->vals.dtype, o->vals.mask, ms, sizeof ms);
    if (strcmp(ks, "0") != 0 && strcmp(ks, "-0") != 0)
        why = "--keep: FlexAttention's and FlashInfer's convention";
    else if (o->kind == KIND_ASCEND)
        why = "vllm-ascend's values";
    else
        why = "Ascend's convention; --keep: 1 = attend";
    if (fprintf(f, "# %s = attend, %s = masked (%s)\n", ks, ms, why) < 0)
        return kv_err_set(e, "write error: %s", strerror(errno));
    return 0;
}

int run(struct opts *o)
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
            /* a tree is written dense only */
            int tree = o->kind == KIND_TREE;
            kv_mask_release(&m);
            opts_release(o);
            return kv_fail("the %s output needs %s (%lld x %lld %s), more "
                           "than --max-mem %s; %s--max-mem",
                           o->fmt == F_BITS ? "bits" : "dense", a, nq, nkv,
                           kv_dtype_name(o->vals.dtype), b,
                           tree ? "a tree is written dense only: raise "
                                : "use a compact format (-f block, bsr or "
                                  "stats) or raise ");
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
        rc = text_header(f, o, &e);
        if (rc == 0)
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
        rc = (o->json ? kv_mask_write_stats_json : kv_mask_write_stats)(
            f, &m, o->have_block ? o->bq : 0, o->have_block ? o->bk : 0, &e);
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


/* --batch, --heads. */
int outer_dims(const struct margs *a, struct opts *o)
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
int output_options(const struct margs *a, struct opts *o)
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
        /* json: the stats report as one JSON line, under stats' rules */
        o->json = a->format->count && strcmp(a->format->sval[0], "json") == 0;
        if (o->json) {
            o->fmt = F_STATS;
        } else if (a->format->count) {
            int k = lookup(fmts, a->format->sval[0]);
            if (k <= 0) {
                kv_usage("-f: expected npy, text, pgm, bits, block, bsr, "
                         "stats or json, got '%s'", a->format->sval[0]);
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
    if (o->kind == KIND_TREE && o->fmt != F_NPY && o->fmt != F_TEXT && o->fmt != F_PGM) {
        kv_usage("-f: a tree mask is written dense (npy, text or pgm): its rows "
                 "are not intervals");
        return KV_EXIT_USAGE;
    }
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
            kv_usage("--block-size: only with -f block, bsr, stats or json");
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
