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
    char a[128], c[128];
    struct kv_tensor o, l;
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
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    if (kv_tensor_alloc(&o, od, o0->ndim, o0->shape, 0, e) ||
        kv_tensor_alloc(&l, KV_F32, o0->ndim - 1, o0->shape, 0, e)) {
        kv_tensor_release(&o);
        return -1;
    }
    size_t Dv = (size_t)o0->shape[o0->ndim - 1];
    size_t rows = kv_tensor_numel(&l);
    double *acc = malloc((Dv ? Dv : 1) * sizeof(double));
    double *w = malloc(n * sizeof(double));
    float *row = malloc((Dv ? Dv : 1) * sizeof(float));
    if (!acc || !w || !row) {
        free(acc); free(w); free(row);
        kv_tensor_release(&o);
        kv_tensor_release(&l);
        return kv_err_set(e, "out of memory");
    }
    float *lo = l.data;
    for (size_t r = 0; r < rows; r++) {
        double m = -INFINITY, sum = 0.0;
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
    free(acc); free(w); free(row);
    kv_tensor_move(out, &o);
    if (lse)
        kv_tensor_move(lse, &l);
    else
        kv_tensor_release(&l);
    return 0;
}
