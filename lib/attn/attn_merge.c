/* attn_merge.c - the LSE merge of partial attention outputs over disjoint
 * key sets (kv_attn_merge), in float64. */
#include <math.h>
#include <stdlib.h>

#include "attn/attn_row.h"

/* ---- LSE merge ----------------------------------------------------- */

int kv_attn_merge(const struct kv_tensor *outs, const struct kv_tensor *lses,
                  size_t n, enum kv_dtype out_dtype, struct kv_tensor *out,
                  struct kv_tensor *lse, struct kv_err *e)
{
    return kv_attn_merge_sinks(outs, lses, n, NULL, 0, out_dtype, out, lse, e);
}

/* The sinks as f64 [Hq] against the LSE's axis 1 (bhsd [B, Hq, Lq], thd
 * [Tq, Hq]); *inner gets the product of the axes after it. */
static int merge_sinks(const struct kv_tensor *sinks, const struct kv_tensor *l0,
                       double **sk, size_t *inner, struct kv_err *e)
{
    char a[128], c[128];
    if (sinks->dtype != KV_F32 && sinks->dtype != KV_F16 && sinks->dtype != KV_BF16)
        return kv_err_set(e, "sinks: dtype %s, expected f32 (or f16, bf16): one value per "
                          "query head", kv_dtype_name(sinks->dtype));
    if (l0->ndim < 2 || l0->ndim > 3)
        return kv_err_set(e, "lse shape %s: with sinks the LSE is [B, Hq, Lq] or [Tq, Hq]",
                          shp(l0, a, sizeof a));
    if (sinks->ndim != 1 || sinks->shape[0] != l0->shape[1])
        return kv_err_set(e, "sinks: shape %s, expected (%lld,): one value per query head "
                          "of lse %s", shp(sinks, a, sizeof a), (long long)l0->shape[1],
                          shp(l0, c, sizeof c));
    size_t H = (size_t)sinks->shape[0];
    *sk = malloc((H ? H : 1) * sizeof(double));
    if (!*sk)
        return kv_err_set(e, "out of memory");
    for (size_t h = 0; h < H; h++) {
        (*sk)[h] = kv_tensor_get_f64(sinks, h);
        if (!isfinite((*sk)[h])) {
            kv_err_set(e, "sinks: value %g of head %zu is not finite", (*sk)[h], h);
            free(*sk);
            *sk = NULL;
            return -1;
        }
    }
    *inner = l0->ndim == 3 ? (size_t)l0->shape[2] : 1;
    return 0;
}

int kv_attn_merge_sinks(const struct kv_tensor *outs, const struct kv_tensor *lses,
                        size_t n, const struct kv_tensor *sinks, int parts_have_sinks,
                        enum kv_dtype out_dtype, struct kv_tensor *out,
                        struct kv_tensor *lse, struct kv_err *e)
{
    char a[128], c[128];
    struct kv_tensor o, l;
    double *sk = NULL;
    size_t inner = 1, H = 1;
    if (n < 1)
        return kv_err_set(e, "merge needs at least one part");
    const struct kv_tensor *o0 = &outs[0];
    if (o0->ndim < 1)
        return kv_err_set(e, "output 1: shape %s has no feature axis", shp(o0, a, sizeof a));
    for (size_t i = 0; i < n; i++) {
        const struct kv_tensor *oi = &outs[i], *li = &lses[i];
        if (!kv_dtype_is_float(oi->dtype) || !kv_dtype_is_float(li->dtype))
            return kv_err_set(e, "part %zu: dtypes %s/%s, expected float", i + 1,
                              kv_dtype_name(oi->dtype), kv_dtype_name(li->dtype));
        int same = oi->ndim == o0->ndim;
        for (int d = 0; same && d < o0->ndim; d++)
            same = oi->shape[d] == o0->shape[d];
        if (!same)
            return kv_err_set(e, "output shapes differ: part 1 %s, part %zu %s",
                              shp(o0, a, sizeof a), i + 1, shp(oi, c, sizeof c));
        same = li->ndim == o0->ndim - 1;
        for (int d = 0; same && d < li->ndim; d++)
            same = li->shape[d] == o0->shape[d];
        if (!same)
            return kv_err_set(e, "part %zu: lse shape %s does not match output %s "
                              "without its last axis", i + 1, shp(li, a, sizeof a),
                              shp(oi, c, sizeof c));
    }
    enum kv_dtype od = out_dtype == KV_NDTYPES ? o0->dtype : out_dtype;
    if (!is_input_float(od))
        return kv_err_set(e, "output dtype %s is not a float type", kv_dtype_name(od));
    if (sinks) {
        if (merge_sinks(sinks, &lses[0], &sk, &inner, e))
            return -1;
        H = (size_t)sinks->shape[0];
    }
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    if (kv_tensor_alloc(&o, od, o0->ndim, o0->shape, 0, e) ||
        kv_tensor_alloc(&l, KV_F32, o0->ndim - 1, o0->shape, 0, e)) {
        kv_tensor_release(&o);
        free(sk);
        return -1;
    }
    size_t Dv = (size_t)o0->shape[o0->ndim - 1];
    size_t rows = kv_tensor_numel(&l);
    double *acc = malloc((Dv ? Dv : 1) * sizeof(double));
    double *w = malloc(n * sizeof(double));
    float *row = malloc((Dv ? Dv : 1) * sizeof(float));
    if (!acc || !w || !row) {
        free(acc); free(w); free(row); free(sk);
        kv_tensor_release(&o);
        kv_tensor_release(&l);
        return kv_err_set(e, "out of memory");
    }
    float *lo = l.data;
    for (size_t r = 0; r < rows; r++) {
        double m = -INFINITY, sum = 0.0, sink = sk ? sk[r / inner % H] : -INFINITY;
        int nan = 0;
        for (size_t i = 0; i < n; i++) {
            double x = kv_tensor_get_f64(&lses[i], r);
            if (x == INFINITY)
                x = -INFINITY;
            if (isnan(x))
                nan = 1;
            w[i] = x;
            if (x > m)
                m = x;
        }
        if (sk && !parts_have_sinks && sink > m)
            m = sink;
        for (size_t d = 0; d < Dv; d++)
            acc[d] = 0.0;
        double L;
        if (nan) {
            L = NAN;
            for (size_t d = 0; d < Dv; d++)
                acc[d] = NAN;
        } else if (m == -INFINITY) {
            L = -INFINITY;
        } else {
            for (size_t i = 0; i < n; i++) {
                w[i] = exp(w[i] - m);
                sum += w[i];
            }
            /* the sink: added once, or removed from all parts but one */
            if (sk && !parts_have_sinks)
                sum += exp(sink - m);
            else if (sk && n > 1)
                sum = fmax(sum - (double)(n - 1) * exp(sink - m), exp(sink - m));
            L = m + log(sum);
            for (size_t i = 0; i < n; i++) {
                double wi = w[i] / sum;
                if (wi == 0.0)
                    continue;
                for (size_t d = 0; d < Dv; d++)
                    acc[d] += wi * kv_tensor_get_f64(&outs[i], r * Dv + d);
            }
        }
        for (size_t d = 0; d < Dv; d++)
            row[d] = (float)acc[d];
        if (od == KV_F64) {
            double *dst = (double *)o.data + r * Dv;
            for (size_t d = 0; d < Dv; d++)
                dst[d] = acc[d];
        } else {
            store_f32((char *)o.data + r * Dv * kv_dtype_size(od), row, od, (int64_t)Dv);
        }
        lo[r] = (float)L;
    }
    free(acc); free(w); free(row); free(sk);
    kv_tensor_move(out, &o);
    if (lse)
        kv_tensor_move(lse, &l);
    else
        kv_tensor_release(&l);
    return 0;
}
