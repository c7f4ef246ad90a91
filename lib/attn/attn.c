/* attn.c - tiled online-softmax attention (see attn.h): the entry point.
 *
 * Work is cut into items (request b, a group of hs query heads that share
 * one kv head, a tile of query positions [i0, i1)).  The hs heads of an
 * item are stacked into one row block of M = hs * (i1 - i0) rows, so a
 * decode step with GQA reads each K/V row once for the whole group.  For
 * every key tile [j0, j1) inside the item's reachable key range:
 *
 *   S = scale * Qtile Ktile^T                (sgemm, or the scalar loops)
 *   S += mask (-inf outside causal/window bounds, explicit masks)
 *   m' = max(m, rowmax S); P = exp(S - m'); l = l e^(m - m') + rowsum P
 *   O = O e^(m - m') + P Vtile               (sgemm)
 *
 * and at the end O /= l, LSE = m + log l.  Key tiles that no row of the
 * item may see (beyond the causal diagonal, before the window, blocks the
 * block mask drops) are never touched.  Each item is computed by one
 * thread in a fixed order, so results do not depend on the thread count.
 *
 * This file runs a call: the plan (attn_plan.c), the items on the
 * threads (attn_tile.c, its block-sparse tiles in attn_sparse.c; decode
 * mode in attn_decode.c), the counters.  The row kernels they share are
 * in attn_row.h, the plan and work spaces in attn_int.h, the LSE merge in
 * attn_merge.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_row.h"
#include "core/blas.h"
#include "core/cli.h"
#include "core/fp8.h"

/* The cap kv_attn_limit_isa puts on isa_level (attn_int.h) for tests;
 * 99: none. */
int attn_isa_cap = 99;

int kv_attn_limit_isa(int level)
{
    attn_isa_cap = level < 0 ? 99 : level;
    return isa_level();
}

void kv_attn_exp_n(float *x, size_t n)
{
    (void)exp_sum(x, (int64_t)n, 0.0f, 0);
}

void kv_attn_softcap_n(float *x, size_t n, float C, int scalar)
{
    softcap_row(x, (int64_t)n, C, (float)(1.0 / (double)C), scalar);
}

static struct kv_attn_stats last_stats;

/* Whether the plan's tiles multiply with sgemm: not the scalar loops, not
 * decode mode or the fused kernels alone (their own), not the bf16 tiles unless P stays f32
 * (then P V is an sgemm).  OpenBLAS is loaded for these only. */
static int uses_sgemm(const struct plan *p)
{
    return !p->scalar && !p->decode && (!p->fused || p->fused_blas) &&
           (p->bf16 == KV_BF16_NONE || p->p_f32);
}

void kv_attn_last_stats(struct kv_attn_stats *s)
{
    *s = last_stats;
}

/* Run request r.  With fp8 (an FP8 cache whose f32 image r->kv_cache
 * stands for, fmt its format): only when the decode kernels read it
 * (attn_dec_fp8_set), else 1 is returned and nothing done. */
static int run_req(const struct kv_attn_req *r, const struct kv_tensor *fp8, int fmt,
                   struct kv_tensor *out, struct kv_tensor *lse, struct kv_err *e)
{
    struct plan p;
    struct kv_tensor o, l;
    int64_t oshape[KV_MAX_DIMS];
    int ond = 0;

    kv_tensor_init(&o);
    kv_tensor_init(&l);
    if (attn_plan_build(r, &p, oshape, &ond, e))
        goto fail;
    if (kv_tensor_alloc(&o, p.out.dtype, ond, oshape, r->max_bytes, e))
        goto fail;
    kv_advise_huge(o.data, o.nbytes);
    if (lse && kv_tensor_alloc(&l, KV_F32, ond - 1, oshape, r->max_bytes, e))
        goto fail;
    if (attn_plan_items(&p, r, r->n_threads, e))
        goto fail;
    if (fp8 && !attn_dec_fp8_set(&p, fp8, fmt, r->k_scale, r->v_scale)) {
        attn_plan_free(&p);
        kv_tensor_release(&o);
        kv_tensor_release(&l);
        return 1;
    }
    /* after the items: they decide decode mode, which never calls sgemm */
    if (uses_sgemm(&p) && kv_blas_load(e))
        goto fail;
    p.progress = r->progress;
    p.progress_ctx = r->progress_ctx;
    atomic_init(&p.n_done, 0);
    atomic_init(&p.progress_busy, 0);
    p.out.base = o.data;
    p.lse = lse ? l.data : NULL;
    if (!r->scalar)
        kv_blas_set_threads(1);
    if (p.decode) {
        float *acc = malloc((size_t)p.Dv * sizeof(float));
        if (!acc) {
            kv_err_set(e, "out of memory");
            goto fail;
        }
        kv_parallel_for(p.n_items, p.n_pool, attn_run_decode_item, &p);
        attn_merge_decode(&p, acc);
        free(acc);
    } else {
        kv_parallel_for(p.n_items, p.n_pool, attn_run_item, &p);
    }
    memset(&last_stats, 0, sizeof last_stats);
    last_stats.items = p.n_items;
    last_stats.decode = p.decode;
    last_stats.fp8_kernels = p.fp8 != 0;
    last_stats.bf16_route = !p.decode ? p.bf16 : attn_dec_tiles_ok(&p) ? p.bf16 : KV_BF16_NONE;
    for (size_t i = 0; i < p.n_items; i++) {
        last_stats.tiles_done += p.items[i].done;
        last_stats.tiles_skipped += p.items[i].skipped;
        if (p.fused && p.hs * (p.items[i].i1 - p.items[i].i0) >= FUSED_MIN_ROWS)
            last_stats.fused_items++;
    }
    attn_plan_free(&p);
    kv_tensor_move(out, &o);
    if (lse)
        kv_tensor_move(lse, &l);
    return 0;
fail:
    attn_plan_free(&p);
    kv_tensor_release(&o);
    kv_tensor_release(&l);
    return -1;
}

/* An FP8 cache: the plan of an f32 cache of its shape (made from a copy of
 * its header that says f32; the plan reads no data), then pointed at the
 * bytes when the decode kernels take them; else the cache dequantized to
 * f32 (kv_fp8_dequantize, max_bytes counting it; V at v_scale 2^-v_exp,
 * kv_attn_fp8_v_exp) and the request run on that.  Both read the same
 * numbers. */
static int run_fp8(const struct kv_attn_req *r, struct kv_tensor *out, struct kv_tensor *lse,
                   struct kv_err *e)
{
    const struct kv_tensor *c = r->kv_cache;
    if (!c)
        return kv_err_set(e, "an FP8 cache is a paged cache (kv_cache)");
    if (c->dtype != KV_U8)
        return kv_err_set(e, "an FP8 cache is stored as u8, got %s", kv_dtype_name(c->dtype));
    if (r->kv_fp8 - 1 != KV_FP8_E4M3 && r->kv_fp8 - 1 != KV_FP8_E5M2)
        return kv_err_set(e, "unknown FP8 format %d", r->kv_fp8 - 1);
    if (kv_fp8_scale_check(r->k_scale, "k_scale", e) ||
        kv_fp8_scale_check(r->v_scale, "v_scale", e))
        return -1;
    const enum kv_fp8 fmt = (enum kv_fp8)(r->kv_fp8 - 1);
    struct kv_attn_req r2 = *r;
    struct kv_tensor img = *c, f;
    img.dtype = KV_F32;
    r2.kv_fp8 = 0;
    r2.v_exp = 0;
    r2.kv_cache = &img;
    int rc = run_req(&r2, c, fmt, out, lse, e);
    if (rc != 1)
        return rc;
    kv_tensor_init(&f);
    if (kv_tensor_alloc(&f, KV_F32, c->ndim, c->shape, r->max_bytes, e))
        return kv_err_prefix(e, "the FP8 cache in f32");
    const size_t half = kv_tensor_numel(c) / 2;
    const uint8_t *b = c->data;
    /* the values at v_scale 2^-v_exp, the output times 2^v_exp */
    const int64_t dv = c->ndim ? c->shape[c->ndim - 1] : 1;
    const int vx = kv_attn_fp8_v_exp(fmt, r->v_scale, half / (size_t)(dv > 0 ? dv : 1));
    kv_fp8_dequantize(b, half, r->k_scale, fmt, f.data);
    kv_fp8_dequantize(b + half, half, ldexpf(r->v_scale, -vx), fmt, (float *)f.data + half);
    r2.kv_cache = &f;
    r2.v_exp = vx;
    rc = run_req(&r2, NULL, 0, out, lse, e);
    kv_tensor_release(&f);
    return rc;
}

int kv_attn_fp8_v_exp(int fmt, float v_scale, size_t n_keys)
{
    int ex;
    double x = (double)kv_fp8_max((enum kv_fp8)fmt) * (double)v_scale *
               (double)(n_keys ? n_keys : 1);
    if (!(x > 0x1p126))
        return 0;
    (void)frexp(x, &ex);            /* x <= 2^ex */
    return ex - 126;
}

int kv_attn_run(const struct kv_attn_req *r, struct kv_tensor *out,
                struct kv_tensor *lse, struct kv_err *e)
{
    if (r->kv_fp8)
        return run_fp8(r, out, lse, e);
    return run_req(r, NULL, 0, out, lse, e);
}
