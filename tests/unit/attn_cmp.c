/* attn_cmp.c - lib/cmp: numpy.isclose semantics (B is the reference),
 * infinities, NaN, the statistics, shape errors, and the mass variant. */
#include <math.h>
#include <string.h>

#include "attn/cmp.h"
#include "tap.h"

static struct kv_tensor vec(const float *x, int64_t n)
{
    struct kv_tensor t;
    kv_tensor_init(&t);
    kv_tensor_alloc(&t, KV_F32, 1, &n, 0, NULL);
    memcpy(t.data, x, (size_t)n * sizeof(float));
    return t;
}

int main(void)
{
    struct kv_cmp_result r;
    struct kv_err e = {{0}};
    float a1[4] = {1.0f, 2.0f, -3.0f, 0.0f}, b1[4] = {1.0f, 2.00001f, -3.0f, 1e-9f};
    struct kv_tensor a = vec(a1, 4), b = vec(b1, 4);
    TAP_OK(kv_cmp_tensors(&a, &b, 1e-8, 1e-5, 0, &r, &e) == 0 && r.n_bad == 0,
           "default tolerances: close");
    TAP_OK(kv_cmp_tensors(&a, &b, 0, 1e-7, 0, &r, &e) == 0 && r.n_bad == 2 && r.worst == 1,
           "rtol 1e-7, atol 0: two mismatches, worst is the first (index %zu)", r.worst);
    TAP_OK(fabs(r.max_abs - 1e-5) < 1e-7 && r.max_rel > 4e-6 && r.rmse > 0 &&
           fabs(r.cosine - 1) < 1e-9, "statistics: max_abs %.3g, max_rel %.3g", r.max_abs,
           r.max_rel);
    /* asymmetry: |a-b| <= atol + rtol |b| */
    float a2[1] = {1.0f}, b2[1] = {2.0f};
    struct kv_tensor x = vec(a2, 1), y = vec(b2, 1);
    int r1 = kv_cmp_tensors(&x, &y, 0, 0.5, 0, &r, &e) == 0 && r.n_bad == 0;
    int r2 = kv_cmp_tensors(&y, &x, 0, 0.5, 0, &r, &e) == 0 && r.n_bad == 1;
    TAP_OK(r1 && r2, "rtol scales |b|, as numpy.isclose(a, b)");
    kv_tensor_release(&x); kv_tensor_release(&y);
    /* infinities and NaN */
    float a3[4] = {INFINITY, -INFINITY, NAN, 1.0f}, b3[4] = {INFINITY, INFINITY, NAN, 1.0f};
    x = vec(a3, 4); y = vec(b3, 4);
    kv_cmp_tensors(&x, &y, 1e-8, 1e-5, 0, &r, &e);
    TAP_OK(r.n_bad == 2 && r.n_nan_a == 1 && r.n_nan_b == 1 && r.worst == 1,
           "inf = inf close, -inf vs inf and NaN vs NaN not (%zu bad)", r.n_bad);
    kv_cmp_tensors(&x, &y, 1e-8, 1e-5, 1, &r, &e);
    TAP_OK(r.n_bad == 1, "--equal-nan: NaN in both places is close");
    kv_tensor_release(&x); kv_tensor_release(&y);
    /* shapes */
    float c4[3] = {0, 0, 0};
    x = vec(c4, 3);
    TAP_OK(kv_cmp_tensors(&a, &x, 0, 0, 0, &r, &e) == -1 && strstr(e.msg, "(4,)") &&
           strstr(e.msg, "(3,)"), "shape mismatch names both: %s", e.msg);
    /* cosine of orthogonal and of zero vectors */
    float o1[2] = {1, 0}, o2[2] = {0, 1}, z[2] = {0, 0};
    struct kv_tensor p = vec(o1, 2), q = vec(o2, 2), zz = vec(z, 2);
    kv_cmp_tensors(&p, &q, 0, 0, 0, &r, &e);
    TAP_OK(fabs(r.cosine) < 1e-12, "orthogonal: cosine 0");
    kv_cmp_tensors(&zz, &zz, 0, 0, 0, &r, &e);
    TAP_OK(r.cosine == 1 && r.n_bad == 0, "zero vs zero: cosine 1, close");
    /* mass maps: rows of the last axis */
    float m1[6] = {0.5f, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f}, m2[6] = {0.5f, 0.25f, 0.25f, 1.0f, 0, 0};
    int64_t sh[2] = {2, 3};
    struct kv_tensor ma, mb;
    kv_tensor_init(&ma); kv_tensor_init(&mb);
    kv_tensor_alloc(&ma, KV_F32, 2, sh, 0, NULL);
    kv_tensor_alloc(&mb, KV_F32, 2, sh, 0, NULL);
    memcpy(ma.data, m1, sizeof m1);
    memcpy(mb.data, m2, sizeof m2);
    TAP_OK(kv_cmp_mass(&ma, &mb, 0.01, 0, &r, &e) == 0 && r.n_rows == 2 &&
           fabs(r.max_tv - 0.25) < 1e-9 && r.n_bad == 1 && r.worst_row == 0 &&
           r.max_mass_diff < 1e-9, "mass: TV distance 0.25 in row 0, row 1 equal");
    TAP_OK(kv_cmp_mass(&ma, &mb, 0.3, 0, &r, &e) == 0 && r.n_bad == 0,
           "mass: within atol 0.3");
    ((float *)ma.data)[0] = -1;
    TAP_OK(kv_cmp_mass(&ma, &mb, 0.3, 0, &r, &e) == -1, "mass: negative values refused");
    kv_tensor_release(&ma); kv_tensor_release(&mb);
    kv_tensor_release(&p); kv_tensor_release(&q); kv_tensor_release(&zz);
    kv_tensor_release(&a); kv_tensor_release(&b); kv_tensor_release(&x);
    return tap_done();
}
