/* cmp.h - compare two tensors the way numerical experiments need:
 * error statistics plus a numpy.allclose decision, and a variant for
 * attention-mass maps.
 *
 * Elements are read as float64 whatever their dtypes.  "Close" follows
 * numpy.isclose with B as the reference: |a - b| <= atol + rtol * |b|;
 * infinities are close only to the same infinity; NaN is close to nothing
 * unless equal_nan, when NaN in both places is close.
 */
#ifndef KV_CMP_H
#define KV_CMP_H

#include <stddef.h>
#include "core/err.h"
#include "core/tensor.h"

struct kv_cmp_result {
    size_t n;               /* elements compared */
    size_t n_bad;           /* elements not close */
    size_t n_nan_a, n_nan_b;
    double max_abs;         /* max |a - b| over finite pairs */
    double max_rel;         /* max |a - b| / |b| over finite pairs with b != 0 */
    double rmse;            /* over finite pairs */
    double cosine;          /* a.b / (|a| |b|); 1 when both are all zero */
    size_t worst;           /* flat index: the first element not close, else
                             * the largest |a - b| */
    double worst_a, worst_b;
    /* mass mode (kv_cmp_mass): per row of the last axis */
    size_t n_rows;
    double mass_a, mass_b;  /* mean row sum */
    double max_mass_diff;   /* max |sum a - sum b| over rows */
    double max_tv;          /* max total-variation distance of the rows
                             * normalised to sum 1 */
    size_t worst_row;
};

/* Element-wise comparison.  Shapes must be equal (the message names both).
 * Fills r; returns 0 (r->n_bad says whether they are close) or -1. */
int kv_cmp_tensors(const struct kv_tensor *a, const struct kv_tensor *b,
                   double atol, double rtol, int equal_nan,
                   struct kv_cmp_result *r, struct kv_err *e);

/* Attention-mass maps: the element statistics as above, plus per row of
 * the last axis the row sums and the total-variation distance
 * 0.5 * sum |a/sum(a) - b/sum(b)|.  A row is "bad" when its TV distance
 * exceeds atol + rtol or its sums differ by more than atol + rtol * sum(b);
 * r->n_bad counts bad rows.  Values must be finite and non-negative. */
int kv_cmp_mass(const struct kv_tensor *a, const struct kv_tensor *b,
                double atol, double rtol, struct kv_cmp_result *r,
                struct kv_err *e);

#endif
