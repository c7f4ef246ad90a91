/* attn_plan.c - validation and planning of an attention call: the
 * operands' dtypes, ranks and the head geometry, the requests' query and
 * key spans, base pointers and strides (dense, thd or paged), the output,
 * the masks and the scale, then the cut into work items (tiles of stacked
 * heads, or decode mode's key chunks) and one work space per thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_int.h"
#include "core/cli.h"
#include "core/half.h"

/* ---- validation ---------------------------------------------------- */

/* Broadcast strides of a tensor t (numpy rules, aligned right) against the
 * target shape tgt[0..nt).  st gets nt element strides (0 = broadcast). */
static int bcast_strides(const struct kv_tensor *t, int nt, const int64_t *tgt,
                         int64_t *st, const char *what, struct kv_err *e)
{
    char a[128], b[128];
    if (t->ndim > nt)
        goto bad;
    int64_t stride = 1;
    for (int k = nt - 1; k >= 0; k--) {
        int ti = t->ndim - (nt - k);
        if (ti < 0) {
            st[k] = 0;
            continue;
        }
        if (t->shape[ti] == tgt[k])
            st[k] = tgt[k] == 1 ? 0 : stride;
        else if (t->shape[ti] == 1)
            st[k] = 0;
        else
            goto bad;
        stride *= t->shape[ti];
    }
    return 0;
bad:
    return kv_err_set(e, "%s shape %s does not broadcast to %s", what,
                      shp(t, a, sizeof a), kv_shape_str(nt, tgt, b, sizeof b));
}

static int check_lens(const int64_t *v, size_t n, const char *what, struct kv_err *e)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0)
            return kv_err_set(e, "%s: length %lld of request %zu is negative",
                              what, (long long)v[i], i);
    return 0;
}

/* Free what attn_plan_build/attn_plan_items allocated; safe on a partial plan. */
void attn_plan_free(struct plan *p)
{
    if (p->pool)
        for (int i = 0; i < p->n_pool; i++) {
            struct scratch *w = &p->pool[i];
            free(w->qs); free(w->qt); free(w->s); free(w->o); free(w->kt); free(w->vt);
            free(w->m); free(w->l); free(w->lo); free(w->hi);
            free(w->keep);
            free(w->qb); free(w->pb); free(w->kp); free(w->vp);
            free(w->ft);
            free(w->fkr);
        }
    free(p->pool);
    free(p->slopes);
    free(p->sinks);
    free(p->items);
    free(p->part);
    free(p->q_start); free(p->q_len); free(p->kv_start); free(p->kv_len);
}

/* Plan, step 1: the operands' dtypes and ranks, and the head geometry. */
static int plan_heads(const struct kv_attn_req *r, struct plan *p, int thd, struct kv_err *e)
{
    char a[128], c[128];
    const struct kv_tensor *q = r->q, *k = r->k, *v = r->v;
    int qnd = thd ? 3 : 4;
    if (!q)
        return kv_err_set(e, "no query tensor");
    if (!is_input_float(q->dtype))
        return kv_err_set(e, "query: dtype %s is not a float type (f32, f16, bf16, f64)",
                          kv_dtype_name(q->dtype));
    if (q->ndim != qnd)
        return kv_err_set(e, "query shape %s: layout %s needs %d dimensions",
                          shp(q, a, sizeof a), thd ? "thd" : "bhsd", qnd);
    p->Hq = q->shape[thd ? 1 : 1];
    p->D = q->shape[qnd - 1];
    p->paged = r->kv_cache != NULL;
    if (p->paged) {
        const struct kv_tensor *kc = r->kv_cache;
        if (k || v)
            return kv_err_set(e, "a paged cache replaces -k/-v: give one or the other");
        if (!is_input_float(kc->dtype))
            return kv_err_set(e, "kv cache: dtype %s is not a float type", kv_dtype_name(kc->dtype));
        if (kc->ndim != 5 || kc->shape[0] != 2)
            return kv_err_set(e, "kv cache shape %s: expected [2, num_blocks, block_size, Hkv, D]",
                              shp(kc, a, sizeof a));
        p->Hkv = kc->shape[3];
        p->Dv = kc->shape[4];
        if (kc->shape[4] != p->D)
            return kv_err_set(e, "head size differs: query %s, kv cache %s",
                              shp(q, a, sizeof a), shp(kc, c, sizeof c));
        if (kc->shape[2] < 1)
            return kv_err_set(e, "kv cache shape %s: block size 0", shp(kc, a, sizeof a));
    } else {
        if (!k || !v)
            return kv_err_set(e, "need both keys and values (or a paged kv cache)");
        if (!is_input_float(k->dtype) || !is_input_float(v->dtype))
            return kv_err_set(e, "keys/values: dtype %s/%s is not a float type",
                              kv_dtype_name(k->dtype), kv_dtype_name(v->dtype));
        if (k->ndim != qnd || v->ndim != qnd)
            return kv_err_set(e, "keys %s, values %s: layout %s needs %d dimensions",
                              shp(k, a, sizeof a), shp(v, c, sizeof c),
                              thd ? "thd" : "bhsd", qnd);
        p->Hkv = k->shape[1];
        p->Dv = v->shape[qnd - 1];
        if (k->shape[qnd - 1] != p->D)
            return kv_err_set(e, "head size differs: query %s, keys %s",
                              shp(q, a, sizeof a), shp(k, c, sizeof c));
        for (int d = 0; d < qnd - 1; d++)
            if (k->shape[d] != v->shape[d])
                return kv_err_set(e, "keys %s and values %s disagree",
                                  shp(k, a, sizeof a), shp(v, c, sizeof c));
        if (!thd && k->shape[0] != q->shape[0])
            return kv_err_set(e, "batch differs: query %s, keys %s",
                              shp(q, a, sizeof a), shp(k, c, sizeof c));
    }
    if (p->D < 1 || p->Dv < 1)
        return kv_err_set(e, "head size must be at least 1: query %s", shp(q, a, sizeof a));
    if (p->Hkv < 1 || p->Hq < 1 || p->Hq % p->Hkv != 0)
        return kv_err_set(e, "query heads %lld are not a multiple of kv heads %lld "
                          "(query %s, %s %s)", (long long)p->Hq, (long long)p->Hkv,
                          shp(q, a, sizeof a), p->paged ? "kv cache" : "keys",
                          shp(p->paged ? r->kv_cache : k, c, sizeof c));
    p->G = p->Hq / p->Hkv;
    return 0;
}

/* Plan, step 2: the requests' query and key spans, from the layout and the lengths. */
static int plan_requests(const struct kv_attn_req *r, struct plan *p, int thd,
                         struct kv_err *e)
{
    char a[128];
    const struct kv_tensor *q = r->q, *k = r->k;
    int64_t B;
    if (!thd) {
        B = q->shape[0];
        if (r->q_lens || r->kv_lens)
            return kv_err_set(e, "--q-lens/--kv-lens need the thd layout");
    } else if (r->q_lens) {
        B = (int64_t)r->n_q_lens;
    } else if (p->paged && r->seq_lens) {
        B = (int64_t)r->n_seq_lens;
    } else {
        B = 1;
    }
    if (p->paged && !r->seq_lens)
        return kv_err_set(e, "a paged cache needs --seq-lens");
    if (r->seq_lens && (int64_t)r->n_seq_lens != B)
        return kv_err_set(e, "--seq-lens has %zu entries for %lld requests",
                          r->n_seq_lens, (long long)B);
    if (r->kv_lens && r->n_kv_lens != r->n_q_lens)
        return kv_err_set(e, "--kv-lens has %zu entries, --q-lens %zu",
                          r->n_kv_lens, r->n_q_lens);
    if (r->kv_lens && p->paged)
        return kv_err_set(e, "a paged cache takes --seq-lens, not --kv-lens");
    if (check_lens(r->q_lens, r->n_q_lens, "--q-lens", e) ||
        check_lens(r->kv_lens, r->n_kv_lens, "--kv-lens", e) ||
        check_lens(r->seq_lens, r->n_seq_lens, "--seq-lens", e))
        return -1;
    p->B = B;
    size_t nb = (size_t)(B > 0 ? B : 1);
    p->q_start = calloc(nb, sizeof(int64_t));
    p->q_len = calloc(nb, sizeof(int64_t));
    p->kv_start = calloc(nb, sizeof(int64_t));
    p->kv_len = calloc(nb, sizeof(int64_t));
    if (!p->q_start || !p->q_len || !p->kv_start || !p->kv_len)
        return kv_err_set(e, "out of memory");
    if (!thd) {
        int64_t Lk = p->paged ? 0 : k->shape[2];
        for (int64_t b = 0; b < B; b++) {
            p->q_len[b] = q->shape[2];
            p->kv_len[b] = Lk;
            if (r->seq_lens) {
                if (!p->paged && r->seq_lens[b] > Lk)
                    return kv_err_set(e, "--seq-lens: %lld keys for request %lld, keys %s hold %lld",
                                      (long long)r->seq_lens[b], (long long)b,
                                      shp(k, a, sizeof a), (long long)Lk);
                p->kv_len[b] = r->seq_lens[b];
            }
        }
    } else {
        int64_t Tq = q->shape[0], sq = 0, sk = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t lq = r->q_lens ? r->q_lens[b] : (p->paged ? 1 : Tq);
            int64_t lk = r->kv_lens ? r->kv_lens[b] : r->q_lens ? lq : (p->paged ? 0 : k->shape[0]);
            if (p->paged)
                lk = r->seq_lens[b];
            else if (r->seq_lens)
                return kv_err_set(e, "thd layout takes --kv-lens, not --seq-lens");
            p->q_start[b] = sq;
            p->q_len[b] = lq;
            p->kv_start[b] = sk;
            p->kv_len[b] = lk;
            if (lq > INT64_MAX / 4 - sq || lk > INT64_MAX / 4 - sk)
                return kv_err_set(e, "lengths overflow");
            sq += lq;
            sk += lk;
        }
        if (sq != Tq)
            return kv_err_set(e, "query %s holds %lld tokens, the query lengths add up to %lld",
                              shp(q, a, sizeof a), (long long)Tq, (long long)sq);
        if (!p->paged && sk != k->shape[0])
            return kv_err_set(e, "keys %s hold %lld tokens, the kv lengths add up to %lld",
                              shp(k, a, sizeof a), (long long)k->shape[0], (long long)sk);
    }
    return 0;
}

/* Plan, step 3: base pointers and strides of q, k and v (paged or dense). */
static int plan_operands(const struct kv_attn_req *r, struct plan *p, int thd,
                         struct kv_err *e)
{
    char a[128];
    const struct kv_tensor *q = r->q, *k = r->k, *v = r->v;
    int64_t B = p->B;
    p->q.dtype = q->dtype;
    p->q.base = q->data;
    p->q.esize = kv_dtype_size(q->dtype);
    if (thd) {
        p->q.sb = 0; p->q.sh = p->D; p->q.ss = p->Hq * p->D;
    } else {
        p->q.sb = p->Hq * q->shape[2] * p->D; p->q.sh = q->shape[2] * p->D; p->q.ss = p->D;
    }
    if (p->paged) {
        const struct kv_tensor *kc = r->kv_cache;
        int64_t nblk = kc->shape[1], bs = kc->shape[2];
        p->page = bs;
        p->page_stride = bs * p->Hkv * p->D;
        p->bt = r->block_table;
        p->bt_cols = (int64_t)r->bt_cols;
        if (!r->block_table)
            return kv_err_set(e, "a paged cache needs --block-table");
        if ((int64_t)r->bt_rows < B)
            return kv_err_set(e, "block table has %zu rows for %lld requests",
                              r->bt_rows, (long long)B);
        for (int64_t b = 0; b < B; b++) {
            int64_t need = (p->kv_len[b] + bs - 1) / bs;
            if (need > p->bt_cols)
                return kv_err_set(e, "block table too short: request %lld has %lld tokens, "
                                  "needs %lld blocks of %lld, table (%zu, %zu) has %zu",
                                  (long long)b, (long long)p->kv_len[b], (long long)need,
                                  (long long)bs, r->bt_rows, r->bt_cols, r->bt_cols);
            for (int64_t c2 = 0; c2 < need; c2++) {
                int64_t id = p->bt[b * p->bt_cols + c2];
                if (id < 0 || id >= nblk)
                    return kv_err_set(e, "block table row %lld: block %lld outside the "
                                      "cache %s", (long long)b, (long long)id, shp(kc, a, sizeof a));
            }
        }
        p->k.dtype = p->v.dtype = kc->dtype;
        p->k.esize = p->v.esize = kv_dtype_size(kc->dtype);
        p->k.base = kc->data;
        p->v.base = (char *)kc->data + (size_t)(nblk * p->page_stride) * p->k.esize;
        p->k.sh = p->v.sh = p->D;
        p->k.ss = p->v.ss = p->Hkv * p->D;
    } else {
        p->k.dtype = k->dtype;
        p->v.dtype = v->dtype;
        p->k.base = k->data;
        p->v.base = v->data;
        p->k.esize = kv_dtype_size(k->dtype);
        p->v.esize = kv_dtype_size(v->dtype);
        if (thd) {
            p->k.sb = 0; p->k.sh = p->D; p->k.ss = p->Hkv * p->D;
            p->v.sb = 0; p->v.sh = p->Dv; p->v.ss = p->Hkv * p->Dv;
        } else {
            int64_t Lk = k->shape[2];
            p->k.sb = p->Hkv * Lk * p->D; p->k.sh = Lk * p->D; p->k.ss = p->D;
            p->v.sb = p->Hkv * Lk * p->Dv; p->v.sh = Lk * p->Dv; p->v.ss = p->Dv;
        }
    }
    return 0;
}

/* Plan, step 4: the output's dtype, shape and strides. */
static int plan_output(const struct kv_attn_req *r, struct plan *p, int thd, int64_t *out_shape,
                       int *out_ndim, struct kv_err *e)
{
    const struct kv_tensor *q = r->q;
    int qnd = thd ? 3 : 4;
    enum kv_dtype od = r->out_dtype == KV_NDTYPES ? q->dtype : r->out_dtype;
    if (!is_input_float(od))
        return kv_err_set(e, "output dtype %s is not a float type", kv_dtype_name(od));
    p->out.dtype = od;
    p->out.esize = kv_dtype_size(od);
    *out_ndim = qnd;
    for (int d = 0; d < qnd - 1; d++)
        out_shape[d] = q->shape[d];
    out_shape[qnd - 1] = p->Dv;
    if (thd) {
        p->out.sb = 0; p->out.sh = p->Dv; p->out.ss = p->Hq * p->Dv;
        p->lsb = 0; p->lsh = 1; p->lss = p->Hq;
    } else {
        int64_t Lq = q->shape[2];
        p->out.sb = p->Hq * Lq * p->Dv; p->out.sh = Lq * p->Dv; p->out.ss = p->Dv;
        p->lsb = p->Hq * Lq; p->lsh = Lq; p->lss = 1;
    }
    return 0;
}

/* Plan, step 5: the mask, block mask and scale. */
static int plan_masks(const struct kv_attn_req *r, struct plan *p, int thd,
                      struct kv_err *e)
{
    const struct kv_tensor *q = r->q, *k = r->k;
    int64_t B = p->B;
    if (r->window < 0)
        return kv_err_set(e, "window %lld is negative", (long long)r->window);
    if (r->chunk < 0)
        return kv_err_set(e, "chunk size %lld is negative", (long long)r->chunk);
    p->causal = r->causal || r->chunk > 0;
    p->window = r->window;
    p->chunk = r->chunk;
    if (r->mask) {
        const struct kv_tensor *m = r->mask;
        int64_t tgt[4], st[4];
        if (p->paged)
            return kv_err_set(e, "an explicit mask cannot be combined with a paged cache");
        if (m->dtype == KV_F16 || m->dtype == KV_BF16 || m->dtype == KV_F32 || m->dtype == KV_F64) {
            p->mfloat = 1;
            /* a keep-convention float mask (kvmask --keep --dtype f32) is
             * 1.0 = attend, 0 = masked: never additive */
            p->mbinary = r->mask_binary || r->mask_keep;
        }
        p->mdtype = m->dtype;
        p->msize = kv_dtype_size(m->dtype);
        p->mkeep = r->mask_keep;
        p->mask = m->data;
        if (!thd) {
            tgt[0] = B; tgt[1] = p->Hq; tgt[2] = q->shape[2]; tgt[3] = k->shape[2];
            if (bcast_strides(m, 4, tgt, st, "mask", e))
                return -1;
            p->msb = st[0]; p->msh = st[1]; p->msi = st[2]; p->msj = st[3];
        } else {
            tgt[0] = p->Hq; tgt[1] = q->shape[0]; tgt[2] = k->shape[0];
            if (bcast_strides(m, 3, tgt, st, "mask", e))
                return -1;
            p->msb = 0; p->msh = st[0]; p->msi = st[1]; p->msj = st[2];
            p->mpacked = 1;
        }
        if (kv_tensor_numel(m) == 0)
            p->mask = NULL;
    }
    if (r->block_mask) {
        const struct kv_tensor *m = r->block_mask;
        int64_t tgt[4], st[4];
        if (thd && B != 1)
            return kv_err_set(e, "a block mask needs the bhsd layout or a single request");
        if (r->block_size < 1)
            return kv_err_set(e, "a block mask needs --block-size");
        if (kv_dtype_is_float(m->dtype))
            return kv_err_set(e, "block mask: dtype %s, expected bool or integer (1 = keep)",
                              kv_dtype_name(m->dtype));
        int64_t bs = r->block_size, Lq = 0, Lk = 0;
        for (int64_t b = 0; b < B; b++) {
            if (p->q_len[b] > Lq) Lq = p->q_len[b];
            if (p->kv_len[b] > Lk) Lk = p->kv_len[b];
        }
        if (!p->paged && !thd)
            Lk = k->shape[2];
        tgt[0] = B; tgt[1] = p->Hq; tgt[2] = (Lq + bs - 1) / bs; tgt[3] = (Lk + bs - 1) / bs;
        if (bcast_strides(m, 4, tgt, st, "block mask", e))
            return -1;
        p->bm = m;
        p->bs = bs;
        p->bsb = st[0]; p->bsh = st[1]; p->bsq = st[2]; p->bsk = st[3];
        if (kv_tensor_numel(m) == 0)
            p->bm = NULL;
    }
    if (r->has_scale) {
        if (!isfinite(r->scale))
            return kv_err_set(e, "scale %g is not finite", r->scale);
        p->scale = (float)r->scale;
    } else {
        p->scale = (float)(1.0 / sqrt((double)p->D));
    }
    p->scalar = r->scalar;
    p->generic = r->generic;
    p->p_f32 = r->p_f32;
    p->bf16 = KV_BF16_NONE;
    if (!r->scalar && p->q.dtype == KV_BF16 && p->k.dtype == KV_BF16 &&
        p->v.dtype == KV_BF16 && r->bf16_route >= 0)
        p->bf16 = r->bf16_route > 0 ? (enum kv_bf16_route)r->bf16_route
                                    : kv_bf16_route_best();
    p->bf16 = kv_bf16_route_usable(p->bf16);
    return 0;
}

/* A vector of one float per query head (sinks, ALiBi slopes): f32, f16 or
 * bf16 [Hq], every value finite; copied to a new f32 array *dst. */
static int per_head(const struct kv_tensor *t, int64_t Hq, const char *what, float **dst,
                    struct kv_err *e)
{
    char a[128];
    if (t->dtype != KV_F32 && t->dtype != KV_F16 && t->dtype != KV_BF16)
        return kv_err_set(e, "%s: dtype %s, expected f32 (or f16, bf16): one value per "
                          "query head", what, kv_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != Hq)
        return kv_err_set(e, "%s: shape %s, expected (%lld,): one value per query head",
                          what, shp(t, a, sizeof a), (long long)Hq);
    float *v = malloc((size_t)Hq * sizeof(float));
    if (!v)
        return kv_err_set(e, "out of memory");
    for (int64_t h = 0; h < Hq; h++) {
        const char *x = (const char *)t->data + (size_t)h * kv_dtype_size(t->dtype);
        uint16_t u;
        if (t->dtype == KV_F32) {
            memcpy(&v[h], x, sizeof(float));
        } else {
            memcpy(&u, x, sizeof u);
            v[h] = t->dtype == KV_F16 ? kv_f16_to_f32(u) : kv_bf16_to_f32(u);
        }
    }
    for (int64_t h = 0; h < Hq; h++)
        if (!isfinite(v[h])) {
            kv_err_set(e, "%s: value %g of head %lld is not finite", what, (double)v[h],
                       (long long)h);
            free(v);
            return -1;
        }
    *dst = v;
    return 0;
}

/* Plan, step 6: the variants -- softcap, ALiBi slopes, sinks. */
static int plan_variants(const struct kv_attn_req *r, struct plan *p, struct kv_err *e)
{
    if (r->softcap != 0.0) {
        if (!(r->softcap > 0.0) || !isfinite(r->softcap) || !isfinite((float)r->softcap))
            return kv_err_set(e, "softcap %g: expected a finite number > 0", r->softcap);
        p->softcap = (float)r->softcap;
        p->inv_softcap = (float)(1.0 / r->softcap);
        if (!(p->softcap > 0.0f) || !isfinite(p->inv_softcap))
            return kv_err_set(e, "softcap %g is out of the f32 range", r->softcap);
    }
    if (r->alibi && r->alibi_slopes)
        return kv_err_set(e, "give the standard ALiBi slopes or a slopes file, not both");
    if (r->alibi_slopes && per_head(r->alibi_slopes, p->Hq, "ALiBi slopes", &p->slopes, e))
        return -1;
    if (r->alibi) {
        p->slopes = malloc((size_t)p->Hq * sizeof(float));
        if (!p->slopes)
            return kv_err_set(e, "out of memory");
        kv_attn_alibi_slopes(p->Hq, p->slopes);
    }
    if (r->sinks && per_head(r->sinks, p->Hq, "sinks", &p->sinks, e))
        return -1;
    return 0;
}

void kv_attn_alibi_slopes(int64_t n_heads, float *slopes)
{
    int64_t P = 1;
    while (P * 2 <= n_heads)
        P *= 2;
    double b = (float)exp2(-8.0 / (double)P), c = (float)exp2(-4.0 / (double)P);
    for (int64_t k = 0; k < n_heads && k < P; k++)
        slopes[k] = (float)pow(b, (double)(k + 1));
    for (int64_t k = P; k < n_heads; k++)
        slopes[k] = (float)pow(c, (double)(2 * (k - P) + 1));
}

/* Fill p from r, validating every shape; allocates the per-request arrays. */
int attn_plan_build(const struct kv_attn_req *r, struct plan *p, int64_t *out_shape,
                    int *out_ndim, struct kv_err *e)
{
    int thd = r->layout == KV_ATTN_THD;
    memset(p, 0, sizeof *p);
    if (r->v_exp < 0 || r->v_exp > 126)
        return kv_err_set(e, "v_exp %d: expected 0 .. 126", r->v_exp);
    p->fp8_vs = r->v_exp ? ldexpf(1.0f, r->v_exp) : 0.0f;
    if (plan_heads(r, p, thd, e) || plan_requests(r, p, thd, e) ||
        plan_operands(r, p, thd, e) || plan_output(r, p, thd, out_shape, out_ndim, e) ||
        plan_masks(r, p, thd, e) || plan_variants(r, p, e))
        return -1;
    return 0;
}

/* One work space per thread for tiles of M stacked rows (attn_plan_items). */
static int pool_alloc(struct plan *p, const struct kv_attn_req *r, int64_t M, int nt,
                      struct kv_err *e)
{
    /* transposed queries, and the scores stored transposed (attn_sp_tile) */
    const int64_t nqt = p->bm ? SP_LD(M) * p->D : 1, ns = p->bm ? SP_LD(M) * p->tk : M * p->tk;
    size_t per = (size_t)(M * p->D + nqt + ns + M * p->Dv + p->tk * p->D + p->tk * p->Dv
                          + 3 * M) * sizeof(float) + (size_t)(2 * M) * sizeof(int64_t);
    if (p->bf16 != KV_BF16_NONE) {
        p->ldqb = (p->D + 1) / 2 * 2;
        p->ldpb = (p->tk + 2) / 2 * 2;
        p->psk = 32 * ((p->D + 1) / 2);
        p->psv = 32 * ((p->tk + 1) / 2);
        per += (size_t)(M * (p->ldqb + p->ldpb)) * sizeof(uint16_t)
               + (size_t)(((p->tk + 31) / 32) * p->psk + ((p->Dv + 31) / 32) * p->psv)
                 * sizeof(uint32_t);
    }
    if (p->fused)
        per += attn_fused_floats(p, M) * sizeof(float)
               + (size_t)(p->fkb + 2 * FUSED_KT) * sizeof(float *);
    if (r->max_bytes && per * (size_t)nt > r->max_bytes)
        return kv_err_set(e, "attention needs %zu bytes of work space, limit is %zu",
                          per * (size_t)nt, r->max_bytes);
    p->pool = calloc((size_t)nt, sizeof *p->pool);
    if (!p->pool)
        return kv_err_set(e, "out of memory");
    p->n_pool = nt;
    for (int i = 0; i < nt; i++) {
        struct scratch *w = &p->pool[i];
        atomic_init(&w->busy, 0);
        w->qs = malloc((size_t)(M * p->D) * sizeof(float));
        w->qt = malloc((size_t)nqt * sizeof(float));
        w->s = malloc((size_t)ns * sizeof(float));
        w->o = malloc((size_t)(M * p->Dv) * sizeof(float));
        w->kt = malloc((size_t)(p->tk * p->D) * sizeof(float));
        w->vt = malloc((size_t)(p->tk * p->Dv) * sizeof(float));
        w->m = malloc((size_t)M * sizeof(float));
        w->l = malloc((size_t)M * sizeof(float));
        w->lo = malloc((size_t)M * sizeof(int64_t));
        w->hi = malloc((size_t)M * sizeof(int64_t));
        w->keep = malloc((size_t)(p->hs * (p->bm ? p->tk / p->bs + 2 : 1)));
        if (p->bf16 != KV_BF16_NONE) {
            /* zeroed: the models read whole panels, padding included */
            w->qb = calloc((size_t)(M * p->ldqb), sizeof(uint16_t));
            w->pb = calloc((size_t)(M * p->ldpb), sizeof(uint16_t));
            w->kp = calloc((size_t)(((p->tk + 31) / 32) * p->psk), sizeof(uint32_t));
            w->vp = calloc((size_t)(((p->Dv + 31) / 32) * p->psv), sizeof(uint32_t));
            if (!w->qb || !w->pb || !w->kp || !w->vp)
                return kv_err_set(e, "out of memory for bf16 work space");
        }
        if (p->fused && (!(w->ft = malloc(attn_fused_floats(p, M) * sizeof(float))) ||
                         !(w->fkr = malloc((size_t)(p->fkb + 2 * FUSED_KT) * sizeof *w->fkr))))
            return kv_err_set(e, "out of memory for fused work space");
        if (!w->qs || !w->qt || !w->s || !w->o || !w->kt || !w->vt || !w->m || !w->l ||
            !w->lo || !w->hi || !w->keep)
            return kv_err_set(e, "out of memory for %zu bytes of work space", per);
    }
    return 0;
}

/* Cut the work into items and allocate one scratch set per thread. */
int attn_plan_items(struct plan *p, const struct kv_attn_req *r, int n_threads,
                    struct kv_err *e)
{
    int64_t target = r->tile_q > 0 ? r->tile_q : 256;
    p->hs = p->G;
    if (p->bm && p->bsh != 0)
        p->hs = 1;                  /* blocks differ per head: do not stack */
    if (p->hs > target)
        p->hs = 1;
    p->tq = target / p->hs;
    if (p->tq < 1)
        p->tq = 1;
    p->tk = r->tile_k > 0 ? r->tile_k : 512;
    if (p->bm && p->tq > p->bs)
        p->tq = p->bs;

    /* decode mode: few queries per request, the decode kernels available,
     * no block mask.  The choice depends on the shapes only, never on the
     * thread count, so the output stays bit-identical for any -j. */
    /* (the model of BFDOT has no decode tile: its route runs the tiles) */
    p->decode = r->tile_q == 0 && !p->bm && attn_dec_ok(p) && p->bf16 != KV_BF16_MODEL_ARM;
    for (int64_t b = 0; p->decode && b < p->B; b++)
        if (p->q_len[b] > 4)
            p->decode = 0;
    p->Gp = (p->G + 3) / 4 * 4;
    if (p->Hkv * p->Gp > 1024)
        p->decode = 0;
    if (p->decode) {
        size_t n = 0;
        p->kc = 4096;
        for (int64_t b = 0; b < p->B; b++) {
            int64_t chunks = p->kv_len[b] > 0 ? (p->kv_len[b] + p->kc - 1) / p->kc : 1;
            n += (size_t)(p->q_len[b] * chunks);
        }
        p->items = calloc(n ? n : 1, sizeof *p->items);
        size_t part_bytes;
        if (kv_size_mul(n ? n : 1, (size_t)(p->Hq * (p->Dv + 2)) * sizeof(float), &part_bytes))
            return kv_err_set(e, "too many requests");
        if (r->max_bytes && part_bytes > r->max_bytes)
            return kv_err_set(e, "attention needs %zu bytes for partial results, limit is %zu",
                              part_bytes, r->max_bytes);
        p->part = malloc(part_bytes);
        if (!p->items || !p->part)
            return kv_err_set(e, "out of memory");
        p->n_items = n;
        size_t at = 0;
        for (int64_t b = 0; b < p->B; b++)
            for (int64_t i = 0; i < p->q_len[b]; i++) {
                int64_t c0 = 0;
                do {
                    struct item *it = &p->items[at++];
                    it->b = b; it->i0 = i; it->i1 = i + 1;
                    it->j0 = c0;
                    it->j1 = c0 + p->kc < p->kv_len[b] ? c0 + p->kc : p->kv_len[b];
                    c0 += p->kc;
                } while (c0 < p->kv_len[b]);
            }
        p->hs = p->Hkv * p->Gp;     /* rows of the work space */
        p->tq = 1;
    }

    size_t n = 0;
    for (int64_t b = 0; !p->decode && b < p->B; b++) {
        int64_t per = 0;
        for (int64_t i0 = 0; i0 < p->q_len[b];) {
            int64_t i1 = i0 + p->tq;
            if (p->bm && i1 > (i0 / p->bs + 1) * p->bs)
                i1 = (i0 / p->bs + 1) * p->bs;
            if (i1 > p->q_len[b])
                i1 = p->q_len[b];
            per++;
            i0 = i1;
        }
        n += (size_t)(per * (p->Hq / p->hs));
    }
    if (!p->decode) {
        p->items = calloc(n ? n : 1, sizeof *p->items);
        if (!p->items)
            return kv_err_set(e, "out of memory");
        p->n_items = n;
    }
    size_t at = 0;
    for (int64_t b = 0; !p->decode && b < p->B; b++) {
        /* head by head, so that the threads share one head's keys and
         * values in the cache; within a head the last query tiles run
         * first (after the reversal below): under a causal mask they are
         * the costliest */
        for (int64_t h0 = 0; h0 < p->Hq; h0 += p->hs)
            for (int64_t i0 = 0; i0 < p->q_len[b];) {
                int64_t i1 = i0 + p->tq;
                if (p->bm && i1 > (i0 / p->bs + 1) * p->bs)
                    i1 = (i0 / p->bs + 1) * p->bs;
                if (i1 > p->q_len[b])
                    i1 = p->q_len[b];
                struct item *it = &p->items[at++];
                it->b = b; it->h0 = h0; it->i0 = i0; it->i1 = i1;
                i0 = i1;
            }
    }
    /* reverse so that late (long) tiles run first */
    for (size_t i = 0, j = n ? n - 1 : 0; !p->decode && i < j; i++, j--) {
        struct item t = p->items[i];
        p->items[i] = p->items[j];
        p->items[j] = t;
    }

    /* the fused kernels' key blocks, and whether they take the plan */
    p->fkb = r->tile_k > 0 ? r->tile_k : 128;
    p->fused = p->decode ? FUSED_NONE : attn_fused_level(p);
    for (size_t i = 0; p->fused && i < p->n_items; i++)
        if (p->hs * (p->items[i].i1 - p->items[i].i0) < FUSED_MIN_ROWS)
            p->fused_blas = 1;
    int64_t M = p->fused ? (p->hs * p->tq + FUSED_ROWS - 1) / FUSED_ROWS * FUSED_ROWS
                         : (p->hs * p->tq + 3) / 4 * 4;
    n = p->n_items;
    int nt = n_threads > 0 ? n_threads : kv_nproc();
    if (nt < 1)
        nt = 1;
    if ((size_t)nt > n && n > 0)
        nt = (int)n;
    return pool_alloc(p, r, M, nt, e);
}
