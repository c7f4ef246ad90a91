/* mla_bound.c - the error bounds of MLA's forms (see mla.h) and the scans
 * of the inputs that give their A, V and X: the attention bounds of
 * attn/bound.h applied to the absorbed and naive geometries. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/bound.h"
#include "attn/mla.h"

double kv_mla_bound_absorbed(int64_t n, int64_t d, double A, double V, enum kv_dtype od)
{
    return kv_bound_attn_out(n, d, A, V, od);
}

double kv_mla_bound_absorbed_bf16(int64_t n, int64_t d, double A, double V, double X,
                                  enum kv_dtype od, int odd)
{
    return kv_bound_attn_out_bf16(n, d, A, V, X, od, odd, 1);
}

double kv_mla_bound_naive(int64_t n, int64_t dl, int64_t d, double A, double V,
                          enum kv_dtype od)
{
    /* scores: dot products of length dl (the K expansion) then d; values:
     * one f32 projection of length dl, whose error passes through the
     * convex combination unchanged. */
    return kv_bound_attn_out(n, dl + d, A, V, od) + 1.01 * (double)dl * KV_BOUND_U * V;
}

double kv_mla_bound_projected(double b, double w_l1, double o_abs, enum kv_dtype od)
{
    double r = b * w_l1 * 1.01 + KV_BOUND_U * o_abs;
    if (od == KV_F16)
        r += ldexp(o_abs, -11);
    else if (od == KV_BF16)
        r += ldexp(o_abs, -8);
    return r;
}

/* Largest 2-norm of n rows of length d starting every `stride` elements
 * at element `off` of t. */
static double max_norm(const struct kv_tensor *t, int64_t stride, int64_t off, int64_t d)
{
    size_t n = kv_tensor_numel(t);
    double best = 0.0;
    for (size_t r = (size_t)off; stride > 0 && r + (size_t)d <= n; r += (size_t)stride) {
        double s = 0.0;
        for (int64_t i = 0; i < d; i++) {
            double x = kv_tensor_get_f64(t, r + (size_t)i);
            s += x * x;
        }
        best = s > best ? s : best;
    }
    return sqrt(best);
}

void kv_mla_scan_absorbed(const struct kv_tensor *q, const struct kv_tensor *cache,
                          int64_t dl, double scale, double *A, double *V)
{
    int64_t D = q->shape[q->ndim - 1];
    *A = fabs(scale) * max_norm(q, D, 0, D) * max_norm(cache, D, 0, D) * (1.0 + 1e-12);
    double vm = 0.0;
    size_t n = kv_tensor_numel(cache);
    for (size_t i = 0; i < n; i++)
        if ((int64_t)(i % (size_t)D) < dl)
            vm = fmax(vm, fabs(kv_tensor_get_f64(cache, i)));
    *V = vm;
}

void kv_mla_scan_naive(const struct kv_mla_naive_req *r, double scale, double *A, double *V,
                       double *w_uv_col_l1)
{
    int64_t H = r->w_uk->shape[0], Dl = r->w_uk->shape[1], P = r->w_uk->shape[2];
    int64_t R = r->k_pe->shape[1], Vd = r->w_uv->shape[2];
    double qn = max_norm(r->q, P + R, 0, P), qp = max_norm(r->q, P + R, P, R);
    double cn = max_norm(r->c_kv, Dl, 0, Dl), kp = max_norm(r->k_pe, R, 0, R);
    double wf = 0.0, wc = 0.0, w1 = 0.0;
    for (int64_t h = 0; h < H; h++) {
        double s = 0.0;
        for (int64_t i = 0; i < Dl * P; i++) {
            double x = kv_tensor_get_f64(r->w_uk, (size_t)(h * Dl * P + i));
            s += x * x;
        }
        wf = fmax(wf, sqrt(s));
        for (int64_t v = 0; v < Vd; v++) {
            double s2 = 0.0, s1 = 0.0;
            for (int64_t l = 0; l < Dl; l++) {
                double x = kv_tensor_get_f64(r->w_uv, (size_t)((h * Dl + l) * Vd + v));
                s2 += x * x;
                s1 += fabs(x);
            }
            wc = fmax(wc, sqrt(s2));
            w1 = fmax(w1, s1);
        }
    }
    *A = fabs(scale) * (qn * cn * wf + qp * kp) * (1.0 + 1e-12);
    *V = cn * wc * (1.0 + 1e-12);
    if (w_uv_col_l1)
        *w_uv_col_l1 = w1;
}

int kv_mla_rows_read(const struct kv_mla_req *r, size_t max_bytes, struct kv_tensor *rows,
                     struct kv_err *e)
{
    const struct kv_tensor *c = r->cache;
    int64_t NB = c->shape[0], bs = c->shape[1], D = c->shape[c->ndim - 1];
    size_t n_slots, es = kv_dtype_size(c->dtype), n = 0;
    if (c->ndim != 4 || kv_size_mul((size_t)NB, (size_t)bs, &n_slots))
        return kv_err_set(e, "the latent cache is not [n_blocks, block_size, 1, D]");
    unsigned char *seen = calloc(n_slots ? n_slots : 1, 1);
    if (!seen)
        return kv_err_set(e, "out of memory");
    for (size_t b = 0; b < r->n_seq_lens && b < r->bt_rows; b++) {
        if (r->q_lens && r->q_lens[b] == 0)
            continue;                   /* no query: no key is read */
        for (int64_t j = 0; j < r->seq_lens[b] && j / bs < (int64_t)r->bt_cols; j++) {
            int64_t id = r->block_table[b * r->bt_cols + (size_t)(j / bs)];
            if (id < 0 || id >= NB)
                continue;
            size_t s = (size_t)(id * bs + j % bs);
            n += !seen[s];
            seen[s] = 1;
        }
    }
    int64_t shape[2] = {(int64_t)n, D};
    struct kv_tensor x;
    kv_tensor_init(&x);
    if (kv_tensor_alloc(&x, c->dtype, 2, shape, max_bytes, e)) {
        free(seen);
        return -1;
    }
    size_t k = 0, row = (size_t)D * es;
    for (size_t s = 0; s < n_slots; s++)
        if (seen[s])
            memcpy((char *)x.data + k++ * row, (const char *)c->data + s * row, row);
    free(seen);
    kv_tensor_move(rows, &x);
    return 0;
}
