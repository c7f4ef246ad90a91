/* assemble.c - a prompt's KV from the chunk store: keys, lookups in
 * batches, hits moved to their offsets, misses with their base positions
 * (see assemble.h). */
#include <stdlib.h>
#include <string.h>
#include "chunk/assemble.h"
#include "chunk/latent.h"
#include "core/cli.h"
#include "core/npy.h"

int kv_chunk_move(const struct kv_rope *rope, const struct kv_blob_meta *m,
                  const void *src, int64_t delta, void *dst, int64_t T,
                  int64_t off, struct kv_err *e)
{
    if (m->layout == KV_BLOB_LAYOUT_LATENT) {
        struct kv_latent_chunk c = {m->n_layers, m->n_tokens,
                                    (int64_t)m->head_dim - rope->head_dim,
                                    rope->head_dim, m->dtype};
        return kv_latent_move(rope, &c, delta, src, dst, T, off, e);
    }
    struct kv_rope_chunk ch = {m->n_layers, m->n_tokens, m->n_kv_heads,
                               m->head_dim, m->dtype};
    return kv_rope_move_kv(rope, &ch, delta, src, dst, T, off, e);
}

size_t kv_assemble_seg_bytes(void)
{
    const struct kv_assembly *a = NULL;
    /* the request, the reference, the status, the reason of a miss, the
     * base, and its rows of the plan and of the miss list */
    return sizeof *a->req + sizeof *a->refs + sizeof *a->status +
           sizeof *a->why + sizeof *a->base + 3 * 8 + 4 * sizeof *a->miss;
}

int kv_split_keys(const struct kv_namespace *ns, const struct kv_split *sp,
                  struct kv_chunk_req *req, struct kv_err *e)
{
    /* the system prompt is cached like a chunk that attended to nothing */
    struct kv_namespace sn = *ns;
    uint8_t nsd[16], snd[16], ctx[16], sctx[16];
    const int32_t *sys = sp->tokens + sp->segs[0].offset;
    size_t n_sys = (size_t)sp->segs[0].length;
    sn.mask = KV_CTX_NONE;
    if (kv_ns_digest(ns, nsd, e) < 0 || kv_ns_digest(&sn, snd, e) < 0)
        return -1;
    kv_ctx_digest(ns->mask, sys, n_sys, ctx);
    kv_ctx_digest(sn.mask, sys, n_sys, sctx);
    for (size_t i = 0; i < sp->n_segs; i++) {
        const struct kv_segment *g = &sp->segs[i];
        struct kv_chunk_req *r = &req[i];
        int is_sys = g->kind == KV_SEG_SYS;
        memset(r, 0, sizeof *r);
        if (g->kind == KV_SEG_QUESTION)
            continue;
        memcpy(r->ns, is_sys ? snd : nsd, 16);
        memcpy(r->ctx, is_sys ? sctx : ctx, 16);
        r->tokens = sp->tokens + g->offset;
        r->n_tokens = (size_t)g->length;
        kv_chunk_key(r->ns, r->ctx, r->tokens, r->n_tokens, r->key);
    }
    return 0;
}

int kv_assemble_init(struct kv_assembly *a, const struct kv_namespace *ns,
                     const struct kv_split *sp, size_t max_bytes,
                     int want_kv, struct kv_err *e)
{
    size_t n = sp->n_segs, need;
    memset(a, 0, sizeof *a);
    kv_tensor_init(&a->kv);
    a->ns = ns;
    a->sp = sp;
    a->n_segs = n;
    a->want_kv = want_kv != 0;
    a->req = calloc(n, sizeof *a->req);
    a->refs = calloc(n, sizeof *a->refs);
    a->status = calloc(n, sizeof *a->status);
    a->why = calloc(n, sizeof *a->why);
    if (!a->req || !a->refs || !a->status || !a->why)
        return kv_err_set(e, "out of memory");
    if (kv_split_keys(ns, sp, a->req, e) < 0)
        return -1;
    int64_t shape[5] = {ns->n_layers, 2, (int64_t)sp->n_tokens,
                        ns->n_kv_heads, ns->head_dim};
    int nd = 5;
    if (ns->kv_lora_rank) {     /* latent [L, T, D] */
        int64_t lat[3] = {ns->n_layers, (int64_t)sp->n_tokens, ns->head_dim};
        memcpy(shape, lat, sizeof lat);
        nd = 3;
    }
    if (kv_shape_check(nd, shape, ns->dtype, max_bytes, &need, e) < 0)
        return -1;
    if (!(a->base = calloc(n, sizeof *a->base)))
        return kv_err_set(e, "out of memory");
    if (want_kv) {
        if (kv_tensor_alloc(&a->kv, ns->dtype, nd, shape, max_bytes, e) < 0)
            return -1;
        kv_advise_huge(a->kv.data, a->kv.nbytes);
    }
    /* a Redis reply is read beside the assembled KV: the rest of the
     * limit bounds it */
    a->store_bytes = max_bytes;
    if (max_bytes && want_kv)
        a->store_bytes = a->kv.nbytes < max_bytes ? max_bytes - a->kv.nbytes
                                                  : 1;
    if (n)
        a->status[n - 1] = KV_GET_ABSENT;
    return 0;
}

/* A stored chunk of another geometry, dtype or layout (KV or an MLA
 * latent) than the namespace's. */
static int other_shape(const struct kv_namespace *ns,
                       const struct kv_blob_meta *m)
{
    unsigned layout = ns->kv_lora_rank ? KV_BLOB_LAYOUT_LATENT
                                       : KV_BLOB_LAYOUT_KV;
    return m->n_layers != ns->n_layers || m->n_kv_heads != ns->n_kv_heads ||
           m->head_dim != ns->head_dim || m->dtype != ns->dtype ||
           (m->layout ? m->layout : KV_BLOB_LAYOUT_KV) != layout;
}

/* The hits a store held rather than streamed, moved in parallel.  Each
 * job index has its own error slot, so that two moves failing at once
 * write nothing in common, and the failure reported is the lowest
 * index's, whichever thread ran it. */
struct move_job {
    const struct kv_assembly *a;
    size_t first;          /* segment index of job index 0 */
    struct kv_err *err;    /* per job index */
    unsigned char *failed; /* per job index */
};

static void move_one(void *ctx, size_t k)
{
    struct move_job *j = ctx;
    const struct kv_assembly *a = j->a;
    size_t i = j->first + k;
    if (a->status[i] != KV_GET_HIT || !a->refs[i].payload)
        return;
    const struct kv_blob_meta *m = &a->refs[i].meta;
    const struct kv_segment *g = &a->sp->segs[i];
    struct kv_err e;
    if (kv_chunk_move(&a->ns->rope, m, a->refs[i].payload,
                      g->offset - m->base_pos, a->kv.data,
                      (int64_t)a->sp->n_tokens, g->offset, &e) < 0) {
        j->failed[k] = 1;
        j->err[k] = e;
    }
}

/* What a streaming store hands each hit to: the checks of fetch_batch,
 * then the move into the tensor, in the thread that read the blob. */
struct asm_sink {
    struct kv_assembly *a;
    size_t first;              /* segment index of the batch's 0 */
};

static int asm_hit(void *ctx, size_t k, const struct kv_blob_ref *ref,
                   struct kv_err *why, struct kv_err *e)
{
    const struct asm_sink *as = ctx;
    struct kv_assembly *a = as->a;
    const struct kv_namespace *ns = a->ns;
    const struct kv_blob_meta *m = &ref->meta;
    size_t i = as->first + k;
    const struct kv_segment *g = &a->sp->segs[i];
    if (other_shape(ns, m)) {
        kv_err_set(why, "stored shape differs from --shape");
        return 1;
    }
    if (kv_rope_can_move(&ns->rope, m->base_pos, g->offset, g->length,
                         (int64_t)a->sp->n_tokens, e) < 0)
        return -1;
    a->base[i] = m->base_pos;
    if (a->want_kv && kv_chunk_move(&ns->rope, m, ref->payload,
                                    g->offset - m->base_pos, a->kv.data,
                                    (int64_t)a->sp->n_tokens, g->offset,
                                    e) < 0)
        return -1;
    return 0;
}

/* Look segments [b0, b0 + nb) up; every hit checked, moved into the
 * tensor (when there is one) and let go.  0 or -1 with e. */
static int fetch_batch(struct kv_assembly *a, struct kv_store *s, size_t b0,
                       size_t nb, int n_threads, struct kv_err *e)
{
    const struct kv_namespace *ns = a->ns;
    const struct kv_split *sp = a->sp;
    struct asm_sink as = {a, b0};
    struct kv_get_sink sink = {asm_hit, &as};
    if (kv_store_get_each(s, a->req + b0, nb, a->refs + b0, a->status + b0,
                          a->why + b0, &sink, e) < 0)
        return -1;
    /* what the store held rather than streamed (dir:) */
    size_t held = 0;
    uint64_t held_bytes = 0;
    for (size_t i = b0; i < b0 + nb; i++) {
        if (a->status[i] != KV_GET_HIT || !a->refs[i].payload)
            continue;
        const struct kv_blob_meta *m = &a->refs[i].meta;
        if (other_shape(ns, m)) {
            a->status[i] = KV_GET_COLLISION;
            kv_err_set(&a->why[i], "stored shape differs from --shape");
            kv_blob_ref_release(&a->refs[i]);
            continue;
        }
        if (kv_rope_can_move(&ns->rope, m->base_pos, sp->segs[i].offset,
                             sp->segs[i].length, (int64_t)sp->n_tokens,
                             e) < 0)
            return -1;
        a->base[i] = m->base_pos;
        held++;
        held_bytes += m->payload_len;
    }
    if (a->want_kv && held) {
        /* a thread for each MOVE_BYTES of payload, at most: starting a
         * thread costs more than moving a small chunk, and on a busy
         * machine far more.  The moves are independent: the same bytes
         * for any count */
        enum { MOVE_BYTES = 1 << 20 };
        uint64_t cap = held_bytes / MOVE_BYTES + 1;
        int nt = n_threads > 0 ? n_threads : kv_nproc();
        if ((uint64_t)nt > cap)
            nt = (int)cap;
        if ((size_t)nt > held)
            nt = (int)held;
        struct move_job job;
        job.a = a;
        job.first = b0;
        job.err = malloc(nb * sizeof *job.err);
        job.failed = calloc(nb, 1);
        if (!job.err || !job.failed) {
            free(job.err);
            free(job.failed);
            return kv_err_set(e, "out of memory");
        }
        kv_parallel_for(nb, nt, move_one, &job);
        size_t k = 0;
        while (k < nb && !job.failed[k])
            k++;
        if (k < nb)
            *e = job.err[k];
        free(job.err);
        free(job.failed);
        if (k < nb)
            return -1;
    }
    for (size_t i = b0; i < b0 + nb; i++)
        kv_blob_ref_release(&a->refs[i]);
    return 0;
}

/* The misses, each with the position its KV must be computed at. */
static int list_misses(struct kv_assembly *a, struct kv_err *e)
{
    const struct kv_split *sp = a->sp;
    int64_t ctx_len = sp->segs[0].length, mi = 0, n_miss = 0;
    for (size_t i = 0; i < a->n_segs; i++)
        n_miss += a->status[i] != KV_GET_HIT;
    free(a->miss);
    a->miss = calloc((size_t)n_miss * 4 + 1, sizeof *a->miss);
    a->n_miss = 0;
    if (!a->miss)
        return kv_err_set(e, "out of memory");
    a->n_miss = n_miss;
    for (size_t i = 0; i < a->n_segs; i++) {
        const struct kv_segment *g = &sp->segs[i];
        int64_t basep;
        if (a->status[i] == KV_GET_HIT)
            continue;
        if (g->kind == KV_SEG_SYS)
            basep = 0;
        else if (g->kind == KV_SEG_QUESTION)
            basep = g->offset;
        else {
            basep = kv_base_pos_for(a->ns, ctx_len);
            if (basep < 0)
                basep = g->offset;
        }
        a->miss[4 * mi] = (int64_t)i;
        a->miss[4 * mi + 1] = g->offset;
        a->miss[4 * mi + 2] = g->length;
        a->miss[4 * mi + 3] = basep;
        mi++;
    }
    return 0;
}

int kv_assemble_fetch(struct kv_assembly *a, struct kv_store *s,
                      int n_threads, struct kv_err *e)
{
    /* in batches, so that a prompt of many chunks holds few blobs (open
     * files, Redis replies) at a time */
    enum { BATCH = 64 };
    size_t n_look = a->n_segs ? a->n_segs - 1 : 0;
    for (size_t b0 = 0; b0 < n_look; b0 += BATCH) {
        size_t nb = n_look - b0 < BATCH ? n_look - b0 : BATCH;
        if (fetch_batch(a, s, b0, nb, n_threads, e) < 0)
            return -1;
    }
    return list_misses(a, e);
}

int kv_assemble_tables(const struct kv_assembly *a, struct kv_tensor *segs,
                       struct kv_tensor *misses, struct kv_err *e)
{
    int64_t ss[2] = {(int64_t)a->n_segs, 3}, ms[2] = {a->n_miss, 4};
    struct kv_tensor st, mt;
    kv_tensor_init(&st);
    kv_tensor_init(&mt);
    if (kv_tensor_alloc(&st, KV_I64, 2, ss, 0, e) < 0 ||
        kv_tensor_alloc(&mt, KV_I64, 2, ms, 0, e) < 0) {
        kv_tensor_release(&st);
        return -1;
    }
    int64_t *d = st.data;
    for (size_t i = 0; i < a->n_segs; i++) {
        d[3 * i] = a->sp->segs[i].kind;
        d[3 * i + 1] = a->sp->segs[i].offset;
        d[3 * i + 2] = a->sp->segs[i].length;
    }
    if (a->n_miss)
        memcpy(mt.data, a->miss, (size_t)a->n_miss * 4 * sizeof *a->miss);
    *segs = st;
    *misses = mt;
    return 0;
}

void kv_assemble_plan(FILE *f, const struct kv_assembly *a)
{
    int64_t mi = 0;
    for (size_t i = 0; i < a->n_segs; i++) {
        const struct kv_segment *g = &a->sp->segs[i];
        char hex[33] = "-";
        if (g->kind != KV_SEG_QUESTION)
            kv_hex(a->req[i].key, hex);
        fprintf(f, "%s %lld %lld %s", kv_seg_kind_name(g->kind),
                (long long)g->offset, (long long)g->length, hex);
        if (a->status[i] == KV_GET_HIT)
            fprintf(f, " hit %d\n", a->base[i]);
        else
            fprintf(f, " miss %lld\n", (long long)a->miss[4 * mi++ + 3]);
    }
}

int kv_assemble_report(const struct kv_assembly *a, const char *path,
                       struct kv_err *e)
{
    struct kv_out o;
    memset(&o, 0, sizeof o);
    /* kv_out_open takes NULL and "-" for stdout, which libkv leaves to
     * its caller */
    if (!path || !strcmp(path, "-"))
        return kv_err_set(e, "--report: a file name, not '-'");
    if (kv_out_open(&o, path, e) < 0)
        return -1;
    kv_assemble_plan(o.f, a);
    if (ferror(o.f)) {
        kv_out_abort(&o);
        return kv_err_set(e, "cannot write '%s'", path);
    }
    return kv_out_commit(&o, e);
}

int kv_assemble_npy(FILE *f, const struct kv_assembly *a, int kv_only,
                    struct kv_err *e)
{
    struct kv_tensor segt, mt;
    kv_tensor_init(&segt);
    kv_tensor_init(&mt);
    int bad = kv_assemble_tables(a, &segt, &mt, e) < 0 ||
              kv_npy_write(f, &a->kv, e) < 0 ||
              (!kv_only && (kv_npy_write(f, &segt, e) < 0 ||
                            kv_npy_write(f, &mt, e) < 0));
    kv_tensor_release(&segt);
    kv_tensor_release(&mt);
    return bad ? -1 : 0;
}

void kv_assemble_release(struct kv_assembly *a)
{
    for (size_t i = 0; a->refs && i < a->n_segs; i++)
        kv_blob_ref_release(&a->refs[i]);
    free(a->refs);
    free(a->base);
    free(a->req);
    free(a->status);
    free(a->why);
    free(a->miss);
    kv_tensor_release(&a->kv);
    memset(a, 0, sizeof *a);
}
