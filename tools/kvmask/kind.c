/* kvmask: KIND, the options that belong to other kinds, and the geometry
 * of the mask (sizes, lengths, segments) each kind takes. */
#include "kvmask.h"

static const char *const kind_names[] = {
    "causal", "window", "band", "full", "prefix", "varlen", "chunk", "ascend",
    "local", "tree", NULL
};

/* KIND, the options that belong to other kinds, --max-mem, -j, --align. */
int kind_options(const struct margs *a, struct opts *o)
{
    struct kv_err e;

    if (a->kind->count == 0) {
        kv_usage("missing KIND (causal, window, band, full, prefix, varlen, "
                 "chunk, ascend, local, tree)");
        return KV_EXIT_USAGE;
    }
    o->kind = lookup(kind_names, a->kind->sval[0]);
    if (o->kind < 0) {
        kv_usage("unknown KIND '%s' (causal, window, band, full, prefix, "
                 "varlen, chunk, ascend, local, tree)", a->kind->sval[0]);
        return KV_EXIT_USAGE;
    }
    /* options that belong to other kinds */
    {
        struct { void *opt; int count; const char *name; unsigned kinds; } only[] = {
#define K(x) (1u << (x))
            { a->w, a->w->count, "-w", K(1) | K(5) | K(KIND_ASCEND) },
            { a->pre, a->pre->count, "--pre", K(2) },
            { a->next, a->next->count, "--next", K(2) },
            { a->prefix, a->prefix->count, "-p", K(4) | K(KIND_TREE) },
            { a->parents, a->parents->count, "--parents", K(KIND_TREE) },
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
            { a->n, a->n->count, "-n", 0x1f | K(KIND_ASCEND) | K(KIND_LOCAL) },
            { a->sq, a->sq->count, "-q", 0x1f | K(KIND_LOCAL) },
            { a->skv, a->skv->count, "-k", 0x1f | K(KIND_LOCAL) },
            { a->align, a->align->count, "--align", 0x1f | K(5) | K(KIND_LOCAL) },
            { a->keep, a->keep->count, "--keep", 0x7f | K(KIND_LOCAL) | K(KIND_TREE) },
            { a->fill, a->fill->count, "--fill", 0x7f | K(KIND_LOCAL) | K(KIND_TREE) },
            { a->chunksize, a->chunksize->count, "--chunk-size", K(KIND_LOCAL) },
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

/* The size of a causal, window, band, full, prefix or local mask, from -n
 * or -q/-k, and the option each of them cannot do without (their values
 * are parsed by the caller).  Returns 0 or the exit status. */
static int geometry_dense(const struct margs *a, struct opts *o, int64_t nv)
{
    static const enum kv_mask_kind kinds[] = { KV_MASK_CAUSAL,
        KV_MASK_WINDOW, KV_MASK_BAND, KV_MASK_FULL, KV_MASK_PREFIX };
    o->spec.kind = o->kind == KIND_LOCAL ? KV_MASK_LOCAL : kinds[o->kind];
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
    if (o->kind == KIND_LOCAL &&
        (!a->chunksize->count ||
         parse_len(a->chunksize->sval[0], "--chunk-size", 1,
                   &o->spec.chunk_size) != 0)) {
        if (!a->chunksize->count)
            kv_usage("--chunk-size: local needs --chunk-size C");
        return KV_EXIT_USAGE;
    }
    return 0;
}

/* The requests of a varlen mask: --q-lens, and --kv-lens with as many
 * values when given.  Returns 0 or the exit status. */
static int geometry_varlen(const struct margs *a, struct opts *o)
{
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
    return 0;
}

/* A chunk mask's segments from --sys, --chunks and --question: the system
 * prompt, each chunk, then the question, in the layout a segments file
 * gives.  Returns 0 or the exit status. */
static int chunk_from_lengths(const struct margs *a, struct opts *o)
{
    int64_t *cl = NULL, s = 0, q = 0;
    size_t nc = 0;
    if (a->sys->count && parse_len(a->sys->sval[0], "--sys", 0, &s))
        return KV_EXIT_USAGE;
    if (a->question->count &&
        parse_len(a->question->sval[0], "--question", 0, &q))
        return KV_EXIT_USAGE;
    /* an empty chunk is skipped, as in a segments file */
    if (a->chunks->count &&
        parse_list(a->chunks->sval[0], "--chunks", 0, &cl, &nc))
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
    return 0;
}

/* The segments of a chunk mask, from --segments FILE or from the lengths
 * on the command line (one or the other).  Returns 0 or the exit status. */
static int geometry_chunk(const struct margs *a, struct opts *o)
{
    struct kv_err e;

    o->spec.kind = KV_MASK_CHUNK;
    if (a->segments->count &&
        (a->sys->count || a->chunks->count || a->question->count)) {
        kv_usage("--segments: give either --segments FILE or --sys/--chunks/"
                 "--question");
        return KV_EXIT_USAGE;
    }
    if (a->segments->count) {
        if (read_segments(o, a->segments->sval[0], &e) != 0)
            return kv_fail("--segments: %s", e.msg);
    } else if (a->sys->count || a->chunks->count || a->question->count) {
        return chunk_from_lengths(a, o);
    } else {
        kv_usage("chunk: give --segments FILE or --sys N --chunks a,b,.. "
                 "--question M");
        return KV_EXIT_USAGE;
    }
    return 0;
}

/* The size and the rule of the mask (nv: -n, for ascend). */
int geometry(const struct margs *a, struct opts *o, int64_t *nv_out)
{
    int64_t nv = 0;
    int rc;
    *nv_out = 0;
    if (a->n->count && parse_len(a->n->sval[0], "-n", 1, &nv) != 0)
        return KV_EXIT_USAGE;
    if ((o->kind <= 4 || o->kind == KIND_LOCAL) &&
        (rc = geometry_dense(a, o, nv)))
        return rc;
    if (a->w->count && parse_len(a->w->sval[0], "-w", 1, &o->spec.window) != 0)
        return KV_EXIT_USAGE;
    if (a->pre->count && parse_len(a->pre->sval[0], "--pre", 0, &o->spec.pre) != 0)
        return KV_EXIT_USAGE;
    if (a->next->count && parse_len(a->next->sval[0], "--next", 0, &o->spec.next) != 0)
        return KV_EXIT_USAGE;
    if (a->prefix->count && parse_len(a->prefix->sval[0], "-p", 0, &o->spec.prefix) != 0)
        return KV_EXIT_USAGE;
    if (o->kind == 5 && (rc = geometry_varlen(a, o)))  /* varlen */
        return rc;
    if (o->kind == 6 && (rc = geometry_chunk(a, o)))   /* chunk */
        return rc;
    if (o->kind == KIND_TREE) {             /* speculative-decoding tree */
        size_t np = 0;
        o->spec.kind = KV_MASK_TREE;
        if (!a->parents->count) {
            kv_usage("--parents: tree needs --parents p0,p1,.. (-1 = a root)");
            return KV_EXIT_USAGE;
        }
        if (parse_list(a->parents->sval[0], "--parents", -1, &o->parents, &np) != 0)
            return KV_EXIT_USAGE;
        o->spec.parents = o->parents;
        o->spec.n_q = (int64_t)np;
        o->spec.n_kv = (int64_t)np + o->spec.prefix;
    }

    *nv_out = nv;
    return 0;
}
