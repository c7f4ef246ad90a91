/* kvchunk assemble: a prompt's KV from the store, misses listed. */
#include "kvchunk.h"

struct move_job {
    const struct kv_rope *rope;
    const struct kv_split *sp;
    const struct kv_blob_ref *refs;
    const int *status;
    void *dst;
    int64_t T;
    size_t first;          /* segment index of job index 0 */
    struct kv_err err;
    int failed;
};

static void move_one(void *ctx, size_t k)
{
    struct move_job *j = ctx;
    size_t i = j->first + k;
    if (j->status[i] != KV_GET_HIT || !j->refs[i].payload)
        return;
    const struct kv_blob_meta *m = &j->refs[i].meta;
    const struct kv_segment *g = &j->sp->segs[i];
    struct kv_err e;
    if (move_hit(j->rope, m, j->refs[i].payload, g->offset - m->base_pos, j->dst,
                 j->T, g->offset, &e) < 0) {
        j->failed = 1;
        j->err = e;
    }
}

/* What a streaming store hands each hit to: the checks of assemble_fetch,
 * then the move into the tensor, in the thread that read the blob. */
struct asm_sink {
    const struct nsv *v;
    const struct kv_split *sp;
    int32_t *base;
    void *dst;                 /* NULL: no tensor */
    size_t first;              /* segment index of the batch's 0 */
};

static int asm_hit(void *ctx, size_t k, const struct kv_blob_ref *ref,
                   struct kv_err *why, struct kv_err *e)
{
    const struct asm_sink *a = ctx;
    const struct nsv *v = a->v;
    const struct kv_blob_meta *m = &ref->meta;
    size_t i = a->first + k;
    const struct kv_segment *g = &a->sp->segs[i];
    if (m->n_layers != v->ns.n_layers || m->n_kv_heads != v->ns.n_kv_heads ||
        m->head_dim != v->ns.head_dim || m->dtype != v->ns.dtype) {
        kv_err_set(why, "stored shape differs from --shape");
        return 1;
    }
    if (kv_rope_can_move(&v->ns.rope, m->base_pos, g->offset, g->length,
                         (int64_t)a->sp->n_tokens, e) < 0)
        return -1;
    a->base[i] = m->base_pos;
    if (a->dst && move_hit(&v->ns.rope, m, ref->payload,
                           g->offset - m->base_pos, a->dst,
                           (int64_t)a->sp->n_tokens, g->offset, e) < 0)
        return -1;
    return 0;
}

/* Look the segments up in batches, so that a prompt of many chunks holds
 * few blobs (open files, Redis replies) at a time; every hit is checked
 * against the shape and the RoPE, moved into kvt (when given) and let go.
 * base[i] receives each hit's base position.  0 or -1 with e. */
static int assemble_fetch(struct kv_store *s, const struct nsv *v,
                          const struct kv_split *sp, struct kv_chunk_req *req,
                          struct kv_blob_ref *refs, int *status,
                          struct kv_err *why, int32_t *base,
                          struct kv_tensor *kvt, size_t n_look, int64_t nj,
                          struct kv_err *e)
{
    enum { BATCH = 64 };
    for (size_t b0 = 0; b0 < n_look; b0 += BATCH) {
        size_t nb = n_look - b0 < BATCH ? n_look - b0 : BATCH;
        struct asm_sink as = {v, sp, base, kvt ? kvt->data : NULL, b0};
        struct kv_get_sink sink = {asm_hit, &as};
        if (kv_store_get_each(s, req + b0, nb, refs + b0, status + b0,
                              why + b0, &sink, e) < 0)
            return -1;
        /* what the store held rather than streamed (dir:) */
        size_t held = 0;
        for (size_t i = b0; i < b0 + nb; i++) {
            if (status[i] != KV_GET_HIT || !refs[i].payload)
                continue;
            const struct kv_blob_meta *m = &refs[i].meta;
            if (m->n_layers != v->ns.n_layers ||
                m->n_kv_heads != v->ns.n_kv_heads ||
                m->head_dim != v->ns.head_dim || m->dtype != v->ns.dtype) {
                status[i] = KV_GET_COLLISION;
                kv_err_set(&why[i], "stored shape differs from --shape");
                kv_blob_ref_release(&refs[i]);
                continue;
            }
            if (kv_rope_can_move(&v->ns.rope, m->base_pos, sp->segs[i].offset,
                                 sp->segs[i].length, (int64_t)sp->n_tokens,
                                 e) < 0)
                return -1;
            base[i] = m->base_pos;
            held++;
        }
        if (kvt && held) {
            struct move_job job;
            memset(&job, 0, sizeof job);
            job.rope = &v->ns.rope;
            job.sp = sp;
            job.refs = refs;
            job.status = status;
            job.dst = kvt->data;
            job.T = (int64_t)sp->n_tokens;
            job.first = b0;
            kv_parallel_for(nb, (int)nj, move_one, &job);
            if (job.failed) {
                *e = job.err;
                return -1;
            }
        }
        for (size_t i = b0; i < b0 + nb; i++)
            kv_blob_ref_release(&refs[i]);
    }
    return 0;
}

/* One assemble run: the prompt's segments, their lookups and the tensor. */
struct asm_run {
    struct kv_split sp;
    size_t n;                   /* segments; the question is the last */
    struct kv_chunk_req *req;
    struct kv_blob_ref *refs;
    int *status;
    struct kv_err *why;
    int32_t *base;              /* each hit's base position */
    int64_t *miss, n_miss;      /* [n_miss, 4]: segment, offset, length, base */
    struct kv_tensor kvt;
    struct kv_store *s;
    double t0, t1;              /* start, lookups done (for -v) */
};

/* Free what an assemble run holds. */
static void asm_release(struct asm_run *r)
{
    for (size_t i = 0; r->refs && i < r->n; i++)
        kv_blob_ref_release(&r->refs[i]);
    free(r->refs);
    free(r->base);
    free(r->req);
    free(r->status);
    free(r->why);
    free(r->miss);
    kv_tensor_release(&r->kvt);
    kv_split_release(&r->sp);
    kv_store_close(r->s);
}

/* Read the prompt, key its segments and look every one but the question up,
 * each hit moved into r->kvt when want_kv.  0, -1 with e, or the exit code
 * of a store that did not open. */
static int assemble_lookup(const struct prompt_args *pa,
                           const struct store_args *sa, const struct nsv *v,
                           size_t lim, int64_t nj, int want_kv,
                           struct asm_run *r, struct kv_err *e)
{
    size_t need, n;
    int rc;
    /* per segment: the request, the reference, the status, the reason of
     * a miss, the base, and its rows of the plan and the miss list */
    if (read_prompt(pa, lim, sizeof *r->req + sizeof *r->refs +
                    sizeof *r->status + sizeof *r->why + sizeof *r->base +
                    3 * 8 + 4 * sizeof *r->miss, &r->sp, e) < 0)
        return -1;
    n = r->n = r->sp.n_segs;
    r->req = calloc(n, sizeof *r->req);
    r->refs = calloc(n, sizeof *r->refs);
    r->status = calloc(n, sizeof *r->status);
    r->why = calloc(n, sizeof *r->why);
    if (!r->req || !r->refs || !r->status || !r->why)
        return kv_err_set(e, "out of memory");
    if (segment_keys(&v->ns, &r->sp, r->req, e) < 0)
        return -1;
    int64_t shape[5] = {v->ns.n_layers, 2, (int64_t)r->sp.n_tokens,
                        v->ns.n_kv_heads, v->ns.head_dim};
    int nd = 5;
    if (v->ns.kv_lora_rank) {   /* latent [L, T, D] */
        int64_t lat[3] = {v->ns.n_layers, (int64_t)r->sp.n_tokens, v->ns.head_dim};
        memcpy(shape, lat, sizeof lat);
        nd = 3;
    }
    if (kv_shape_check(nd, shape, v->ns.dtype, lim, &need, e) < 0)
        return -1;
    if (!(r->base = calloc(n, sizeof *r->base)))
        return kv_err_set(e, "out of memory");
    if (want_kv && kv_tensor_alloc(&r->kvt, v->ns.dtype, nd, shape, lim, e) < 0)
        return -1;
    if (want_kv)
        kv_advise_huge(r->kvt.data, r->kvt.nbytes);
    /* a Redis reply is read beside the assembled KV: the rest of the
     * limit bounds it */
    size_t left = lim;
    if (lim && want_kv)
        left = r->kvt.nbytes < lim ? lim - r->kvt.nbytes : 1;
    if ((rc = open_store(sa, 0, 0, 0, left, &r->s)) != 0)
        return rc;
    r->status[n - 1] = KV_GET_ABSENT;
    /* in batches, so that a prompt of many chunks holds few blobs (open
     * files, Redis replies) at a time; every hit is checked, moved into
     * the tensor and let go */
    rc = assemble_fetch(r->s, v, &r->sp, r->req, r->refs, r->status, r->why,
                        r->base, want_kv ? &r->kvt : NULL, n - 1, nj, e);
    r->t1 = kv_now();
    if (rc < 0)
        return -1;
    for (size_t i = 0; i + 1 < n; i++)
        if (r->status[i] == KV_GET_COLLISION || r->status[i] == KV_GET_CORRUPT)
            kv_warn("miss: segment %zu: %s (%s)", i,
                    status_name(r->status[i]), r->why[i].msg);
    return 0;
}

/* The misses, each with the position its KV must be computed at. */
static int assemble_misses(const struct nsv *v, struct asm_run *r,
                           struct kv_err *e)
{
    int64_t ctx_len = r->sp.segs[0].length, mi = 0;
    r->n_miss = 0;
    for (size_t i = 0; i < r->n; i++)
        r->n_miss += r->status[i] != KV_GET_HIT;
    r->miss = calloc((size_t)r->n_miss * 4 + 1, sizeof *r->miss);
    if (!r->miss)
        return kv_err_set(e, "out of memory");
    for (size_t i = 0; i < r->n; i++) {
        const struct kv_segment *g = &r->sp.segs[i];
        int64_t basep;
        if (r->status[i] == KV_GET_HIT)
            continue;
        if (g->kind == KV_SEG_SYS)
            basep = 0;
        else if (g->kind == KV_SEG_QUESTION)
            basep = g->offset;
        else {
            basep = kv_base_pos_for(&v->ns, ctx_len);
            if (basep < 0)
                basep = g->offset;
        }
        r->miss[4 * mi] = (int64_t)i;
        r->miss[4 * mi + 1] = g->offset;
        r->miss[4 * mi + 2] = g->length;
        r->miss[4 * mi + 3] = basep;
        mi++;
    }
    return 0;
}

/* The plan as text: KIND OFFSET LENGTH KEY|- hit|miss BASE. */
static void assemble_plan(FILE *pf, const struct asm_run *r)
{
    int64_t mi = 0;
    for (size_t i = 0; i < r->n; i++) {
        const struct kv_segment *g = &r->sp.segs[i];
        char hex[33] = "-";
        if (g->kind != KV_SEG_QUESTION)
            kv_hex(r->req[i].key, hex);
        fprintf(pf, "%s %lld %lld %s", kv_seg_kind_name(g->kind),
                (long long)g->offset, (long long)g->length, hex);
        if (r->status[i] == KV_GET_HIT)
            fprintf(pf, " hit %d\n", r->base[i]);
        else
            fprintf(pf, " miss %lld\n", (long long)r->miss[4 * mi++ + 3]);
    }
}

/* The KV tensor, then (unless kv_only) the segments and the misses. */
static int assemble_npy(FILE *f, const struct asm_run *r, int kv_only,
                        struct kv_err *e)
{
    struct kv_tensor segt, mt;
    int64_t ss[2] = {(int64_t)r->n, 3}, ms[2] = {r->n_miss, 4};
    kv_tensor_init(&segt);
    kv_tensor_init(&mt);
    int bad = kv_tensor_alloc(&segt, KV_I64, 2, ss, 0, e) < 0 ||
              kv_tensor_alloc(&mt, KV_I64, 2, ms, 0, e) < 0;
    if (!bad) {
        int64_t *d = segt.data;
        for (size_t i = 0; i < r->n; i++) {
            d[3 * i] = r->sp.segs[i].kind;
            d[3 * i + 1] = r->sp.segs[i].offset;
            d[3 * i + 2] = r->sp.segs[i].length;
        }
        if (r->n_miss)
            memcpy(mt.data, r->miss, (size_t)r->n_miss * 4 * sizeof *r->miss);
        bad = kv_npy_write(f, &r->kvt, e) < 0 ||
              (!kv_only && (kv_npy_write(f, &segt, e) < 0 ||
                            kv_npy_write(f, &mt, e) < 0));
    }
    kv_tensor_release(&segt);
    kv_tensor_release(&mt);
    return bad ? -1 : 0;
}

/* assemble's own options. */
struct asm_args {
    struct arg_str *fmt, *out, *report, *jobs;
    struct arg_lit *force, *kv_only;
};

/* Write the plan (text, and --report) or the tensors (npy); the exit code. */
static int assemble_write(const struct asm_args *aa, int want_kv, int verbose,
                          const struct asm_run *r, struct kv_err *e)
{
    struct kv_out o, ro;
    enum kv_format f;
    int rc;
    memset(&o, 0, sizeof o);
    memset(&ro, 0, sizeof ro);
    if (kv_out_open(&o, sval(aa->out), e) < 0)
        return kv_fail_err(e);
    if ((rc = out_format(aa->fmt, o.f, aa->force->count, &f)) != 0) {
        kv_out_abort(&o);
        return rc;
    }
    if (sval(aa->report) && kv_out_open(&ro, sval(aa->report), e) < 0) {
        kv_out_abort(&o);
        return kv_fail_err(e);
    }
    if (f == KV_FMT_TEXT)
        assemble_plan(o.f, r);
    if (ro.f)
        assemble_plan(ro.f, r);
    if (ro.f && ferror(ro.f))
        kv_err_set(e, "cannot write '%s'", sval(aa->report));
    else if (f == KV_FMT_NPY && !want_kv)
        kv_err_set(e, "internal: no KV tensor for npy output");
    else if (f != KV_FMT_NPY ||
             assemble_npy(o.f, r, aa->kv_only->count > 0, e) == 0)
        goto commit;
    if (ro.f)
        kv_out_abort(&ro);
    kv_out_abort(&o);
    return kv_fail_err(e);
commit:
    if (verbose) {
        size_t hits = 0;
        for (size_t i = 0; i < r->n; i++)
            hits += r->status[i] == KV_GET_HIT;
        kv_warn("%zu segments, %zu hits, %lld misses; lookup %.3f s, move "
                "and write %.3f s", r->n, hits, (long long)r->n_miss,
                r->t1 - r->t0, kv_now() - r->t1);
    }
    rc = o.path ? (kv_out_commit(&o, e) < 0 ? kv_fail_err(e) : 0)
                : kv_close_stdout();
    if (rc == 0 && ro.f && kv_out_commit(&ro, e) < 0)
        return kv_fail_err(e);
    if (rc != 0 && ro.f)
        kv_out_abort(&ro);
    return rc;
}

int cmd_assemble(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct prompt_args pa;
    struct store_args sa;
    struct common c;
    struct asm_args aa;
    add_prompt(&t, &pa);
    add_ns(&t, &na, 1);
    add_store(&t, &sa);
    add(&t, aa.fmt = arg_str0("f", "format", "npy|text", "npy: KV, segments, "
                              "misses; text: the plan only"));
    add(&t, aa.out = arg_str0("o", "output", "FILE", "write to FILE"));
    add(&t, aa.report = arg_str0(NULL, "report", "FILE", "also write the "
                                 "plan as text to FILE"));
    add(&t, aa.jobs = arg_str0("j", "jobs", "N", "threads (default: all "
                               "cores)"));
    add(&t, aa.kv_only = arg_lit0(NULL, "kv-only", "write the KV tensor only "
                                  "(no segments, no misses)"));
    add(&t, aa.force = arg_lit0(NULL, "force", "binary to a terminal"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nAssemble a prompt's KV from the "
                   "store: every hit moved to its position.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    int64_t nj = 0;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (sval(aa.jobs) && kv_parse_i64(sval(aa.jobs), "-j", 0, 1024, &nj,
                                       &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    double tmo;
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = prompt_usage(&pa)) != 0 ||
        (rc = store_usage(&sa, &tmo)) != 0) {
        free_table(&t);
        return rc;
    }
    if (sval(aa.report) && !strcmp(sval(aa.report), "-")) {
        free_table(&t);
        return kv_usage("--report: a file name, not '-'");
    }
    {
        const char *opt[2] = {"-o", "--report"};
        const char *path[2] = {sval(aa.out) ? sval(aa.out) : "-",
                               sval(aa.report)};
        if (kv_outputs_distinct(opt, path, 2, &e) < 0) {
            free_table(&t);
            return kv_usage("%s", e.msg);
        }
    }
    int want_kv = sval(aa.fmt) ? strcmp(sval(aa.fmt), "npy") == 0
                               : (sval(aa.out) != NULL || !kv_isatty(stdout));
    if (aa.kv_only->count && !want_kv) {
        free_table(&t);
        return kv_usage("--kv-only: only for the npy stream (-f text, or "
                        "text on a terminal, writes the plan)");
    }
    struct asm_run r;
    memset(&r, 0, sizeof r);
    kv_tensor_init(&r.kvt);
    r.t0 = kv_now();
    rc = assemble_lookup(&pa, &sa, &v, lim, nj, want_kv, &r, &e);
    if (rc == 0 && assemble_misses(&v, &r, &e) < 0)
        rc = -1;
    if (rc == 0)
        rc = assemble_write(&aa, want_kv, c.verbose->count > 0, &r, &e);
    if (rc < 0)
        rc = kv_fail_err(&e);
    asm_release(&r);
    free_table(&t);
    return rc;
}
