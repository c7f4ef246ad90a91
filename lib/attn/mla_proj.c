/* mla_proj.c - MLA's two projections around the absorbed form (see
 * mla.h): the query absorbed into the latent space by W_UK, and the
 * latent output projected by W_UV, each summed in double and rounded once. */
#include "attn/mla.h"

#include <stdlib.h>
#include <string.h>

#include "core/half.h"

int kv_mla_absorb_q(const struct kv_tensor *q, const struct kv_tensor *w_uk,
                    enum kv_dtype dtype, size_t max_bytes, struct kv_tensor *out,
                    struct kv_err *e)
{
    if (q->ndim != 3 || w_uk->ndim != 3 || w_uk->shape[0] != q->shape[1] ||
        w_uk->shape[2] > q->shape[2])
        return kv_err_set(e, "absorb: expected Q [T, H, P + R] and W_UK [H, Dl, P]");
    int64_t T = q->shape[0], H = q->shape[1], Dq = q->shape[2];
    int64_t Dl = w_uk->shape[1], P = w_uk->shape[2], R = Dq - P;
    int64_t shape[3] = {T, H, Dl + R};
    struct kv_tensor o, qd, wd;
    kv_tensor_init(&o);
    kv_tensor_init(&qd);
    kv_tensor_init(&wd);
    enum kv_dtype dt = dtype == KV_NDTYPES ? q->dtype : dtype;
    if (!kv_dtype_is_float(dt) || !kv_dtype_is_float(q->dtype) || !kv_dtype_is_float(w_uk->dtype))
        return kv_err_set(e, "absorb: float tensors only");
    int rc = -1;
    double *row = malloc((size_t)(Dl + R) * sizeof(double) + 1);
    float *rf = malloc((size_t)(Dl + R) * sizeof(float) + 1);
    if (!row || !rf) {
        kv_err_set(e, "out of memory");
        goto out;
    }
    if (kv_tensor_alloc(&o, dt, 3, shape, max_bytes, e) ||
        kv_tensor_convert(&qd, q, KV_F64, e) || kv_tensor_convert(&wd, w_uk, KV_F64, e))
        goto out;
    const double *Q = qd.data, *W = wd.data;
    size_t es = kv_dtype_size(dt);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++) {
            const double *qr = Q + (t * H + h) * Dq;
            const double *w = W + h * Dl * P;
            for (int64_t l = 0; l < Dl; l++) {
                double s = 0.0;
                for (int64_t p = 0; p < P; p++)
                    s += w[l * P + p] * qr[p];
                row[l] = s;
            }
            for (int64_t k = 0; k < R; k++)
                row[Dl + k] = qr[P + k];
            char *dst = (char *)o.data + (size_t)((t * H + h) * (Dl + R)) * es;
            if (dt == KV_F64) {
                memcpy(dst, row, (size_t)(Dl + R) * sizeof(double));
            } else {
                for (int64_t k = 0; k < Dl + R; k++)
                    rf[k] = (float)row[k];
                kv_f32_store_n(dt, rf, dst, (size_t)(Dl + R));
            }
        }
    }
    kv_tensor_move(out, &o);
    rc = 0;
out:
    free(row);
    free(rf);
    kv_tensor_release(&o);
    kv_tensor_release(&qd);
    kv_tensor_release(&wd);
    return rc;
}

int kv_mla_project(const struct kv_tensor *o, const struct kv_tensor *w_uv,
                   enum kv_dtype dtype, size_t max_bytes, struct kv_tensor *out,
                   struct kv_err *e)
{
    if (o->ndim != 3 || w_uv->ndim != 3 || w_uv->shape[0] != o->shape[1] ||
        w_uv->shape[1] != o->shape[2])
        return kv_err_set(e, "project: expected O [T, H, Dl] and W_UV [H, Dl, Vd]");
    int64_t T = o->shape[0], H = o->shape[1], Dl = o->shape[2], Vd = w_uv->shape[2];
    int64_t shape[3] = {T, H, Vd};
    enum kv_dtype dt = dtype == KV_NDTYPES ? o->dtype : dtype;
    struct kv_tensor r, od, wd;
    kv_tensor_init(&r);
    kv_tensor_init(&od);
    kv_tensor_init(&wd);
    if (!kv_dtype_is_float(dt) || !kv_dtype_is_float(o->dtype) || !kv_dtype_is_float(w_uv->dtype))
        return kv_err_set(e, "project: float tensors only");
    int rc = -1;
    double *acc = malloc((size_t)Vd * sizeof(double) + 1);
    float *rf = malloc((size_t)Vd * sizeof(float) + 1);
    if (!acc || !rf) {
        kv_err_set(e, "out of memory");
        goto out;
    }
    if (kv_tensor_alloc(&r, dt, 3, shape, max_bytes, e) ||
        kv_tensor_convert(&od, o, KV_F64, e) || kv_tensor_convert(&wd, w_uv, KV_F64, e))
        goto out;
    const double *O = od.data, *W = wd.data;
    size_t es = kv_dtype_size(dt);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++) {
            const double *orow = O + (t * H + h) * Dl, *w = W + h * Dl * Vd;
            for (int64_t v = 0; v < Vd; v++)
                acc[v] = 0.0;
            for (int64_t l = 0; l < Dl; l++)
                for (int64_t v = 0; v < Vd; v++)
                    acc[v] += orow[l] * w[l * Vd + v];
            char *dst = (char *)r.data + (size_t)((t * H + h) * Vd) * es;
            if (dt == KV_F64) {
                memcpy(dst, acc, (size_t)Vd * sizeof(double));
            } else {
                for (int64_t v = 0; v < Vd; v++)
                    rf[v] = (float)acc[v];
                kv_f32_store_n(dt, rf, dst, (size_t)Vd);
            }
        }
    }
    kv_tensor_move(out, &r);
    rc = 0;
out:
    free(acc);
    free(rf);
    kv_tensor_release(&r);
    kv_tensor_release(&od);
    kv_tensor_release(&wd);
    return rc;
}
