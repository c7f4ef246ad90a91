/* cmp.c - error statistics and the allclose decision (see cmp.h). */
#include "attn/cmp.h"

#include <math.h>
#include <string.h>

static int same_shape(const struct kv_tensor *a, const struct kv_tensor *b,
                      struct kv_err *e)
{
    char sa[128], sb[128];
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++)
        same = a->shape[d] == b->shape[d];
    if (!same)
        return kv_err_set(e, "shapes differ: %s and %s",
                          kv_shape_str(a->ndim, a->shape, sa, sizeof sa),
                          kv_shape_str(b->ndim, b->shape, sb, sizeof sb));
    return 0;
}

static int is_close(double x, double y, double atol, double rtol, int equal_nan)
{
    if (isnan(x) || isnan(y))
        return equal_nan && isnan(x) && isnan(y);
    if (isinf(x) || isinf(y))
        return x == y;
    return fabs(x - y) <= atol + rtol * fabs(y);
}

int kv_cmp_tensors(const struct kv_tensor *a, const struct kv_tensor *b,
                   double atol, double rtol, int equal_nan,
                   struct kv_cmp_result *r, struct kv_err *e)
{
    struct kv_cmp_result res;
    double sq = 0.0, ab = 0.0, aa = 0.0, bb = 0.0, worst_diff = -1.0;
    size_t n_fin = 0, n_inf = 0;
    int have_bad = 0;

    if (same_shape(a, b, e))
        return -1;
    if (!(atol >= 0) || !(rtol >= 0))
        return kv_err_set(e, "tolerances must be >= 0 (atol %g, rtol %g)", atol, rtol);
    memset(&res, 0, sizeof res);
    res.n = kv_tensor_numel(a);
    for (size_t i = 0; i < res.n; i++) {
        double x = kv_tensor_get_f64(a, i), y = kv_tensor_get_f64(b, i);
        res.n_nan_a += isnan(x) != 0;
        res.n_nan_b += isnan(y) != 0;
        int close = is_close(x, y, atol, rtol, equal_nan);
        if (!close) {
            res.n_bad++;
            if (!have_bad) {
                have_bad = 1;
                res.worst = i;
                res.worst_a = x;
                res.worst_b = y;
            }
        }
        if (isfinite(x) && isfinite(y)) {
            double d = fabs(x - y);
            n_fin++;
            sq += d * d;
            ab += x * y;
            aa += x * x;
            bb += y * y;
            if (d > res.max_abs)
                res.max_abs = d;
            if (y != 0.0 && d / fabs(y) > res.max_rel)
                res.max_rel = d / fabs(y);
            if (!have_bad && d > worst_diff) {
                worst_diff = d;
                res.worst = i;
                res.worst_a = x;
                res.worst_b = y;
            }
        } else if (!isnan(x) && !isnan(y) && x != y) {
            /* an infinity against another value: the difference is
             * infinite (numpy's |a - b|), not left out */
            res.max_abs = INFINITY;
            if (isfinite(y) && y != 0.0)
                res.max_rel = INFINITY;
            n_inf++;
        }
    }
    res.rmse = n_inf ? INFINITY : n_fin ? sqrt(sq / (double)n_fin) : 0.0;
    if (aa == 0.0 && bb == 0.0)
        res.cosine = 1.0;
    else if (aa == 0.0 || bb == 0.0)
        res.cosine = 0.0;
    else
        res.cosine = ab / (sqrt(aa) * sqrt(bb));
    *r = res;
    return 0;
}

int kv_cmp_mass(const struct kv_tensor *a, const struct kv_tensor *b,
                double atol, double rtol, struct kv_cmp_result *r,
                struct kv_err *e)
{
    struct kv_cmp_result res;
    if (kv_cmp_tensors(a, b, atol, rtol, 0, &res, e))
        return -1;
    if (a->ndim < 1)
        return kv_err_set(e, "a mass map needs at least one axis");
    size_t cols = (size_t)a->shape[a->ndim - 1];
    size_t rows = cols ? res.n / cols : 0;
    double sum_a = 0.0, sum_b = 0.0;
    for (size_t i = 0; i < res.n; i++) {
        double x = kv_tensor_get_f64(a, i), y = kv_tensor_get_f64(b, i);
        if (!(x >= 0) || !(y >= 0) || isinf(x) || isinf(y))
            return kv_err_set(e, "mass maps must be finite and non-negative: "
                              "element %zu is %g and %g", i, x, y);
    }
    res.n_bad = 0;
    res.n_rows = rows;
    res.max_tv = 0.0;
    res.max_mass_diff = 0.0;
    res.worst_row = 0;
    for (size_t row = 0; row < rows; row++) {
        double ma = 0.0, mb = 0.0, tv = 0.0;
        for (size_t j = 0; j < cols; j++) {
            ma += kv_tensor_get_f64(a, row * cols + j);
            mb += kv_tensor_get_f64(b, row * cols + j);
        }
        for (size_t j = 0; j < cols; j++) {
            double x = ma > 0 ? kv_tensor_get_f64(a, row * cols + j) / ma : 0.0;
            double y = mb > 0 ? kv_tensor_get_f64(b, row * cols + j) / mb : 0.0;
            tv += fabs(x - y);
        }
        if ((ma > 0) != (mb > 0))
            tv = 2.0;              /* one row empty, the other not */
        tv *= 0.5;
        sum_a += ma;
        sum_b += mb;
        double dm = fabs(ma - mb);
        int bad = tv > atol + rtol || dm > atol + rtol * mb;
        if (bad && res.n_bad == 0)
            res.worst_row = row;
        res.n_bad += bad != 0;
        if (tv > res.max_tv) {
            res.max_tv = tv;
            if (res.n_bad == 0)
                res.worst_row = row;
        }
        if (dm > res.max_mass_diff)
            res.max_mass_diff = dm;
    }
    res.mass_a = rows ? sum_a / (double)rows : 0.0;
    res.mass_b = rows ? sum_b / (double)rows : 0.0;
    *r = res;
    return 0;
}
