/* bound_inputs.c - kvattn run's output bound for given inputs. */
#include <math.h>
#include "attn/bound.h"
#include "attn/bound_inputs.h"

int kv_bound_for_inputs(const struct kv_tensor *q, const struct kv_tensor *k,
                        const struct kv_tensor *v, int has_scale, double scale,
                        double mask_abs, int64_t routes,
                        enum kv_dtype out_dtype, int p_round,
                        struct kv_bound_report *r, struct kv_err *e)
{
    int64_t d = q->ndim ? q->shape[q->ndim - 1] : 0;
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || d < 1 ||
        k->shape[k->ndim - 1] != d)
        return kv_err_set(e, "Q and K need the same head dim as their last "
                          "dimension");
    if (!has_scale)
        scale = 1.0 / sqrt((double)d);
    /* keys a row can see: bhsd [B, H, S, D] S; packed thd [T, H, D] T */
    int64_t n = k->ndim == 4 ? k->shape[2] : k->ndim == 3 ? k->shape[0]
              : (int64_t)(kv_tensor_numel(k) / (size_t)d);
    double A, V;
    kv_bound_scan(q, k, v, scale, fabs(mask_abs), &A, &V);
    double bo = (double)routes * kv_bound_attn_out(n, d, A, V, out_dtype);
    double bl = (double)routes * kv_bound_attn_lse(n, d, A, A + log((double)n), 0);
    if (q->dtype == KV_BF16 && k->dtype == KV_BF16 && v->dtype == KV_BF16) {
        /* the bf16 tiles: the looser instruction, P rounded unless told */
        double X = kv_bound_scan_x(q, k, scale);
        bo = (double)routes * kv_bound_attn_out_bf16(n, d, A, V, X, out_dtype, 1,
                                                     p_round);
        bl = (double)routes * kv_bound_attn_lse_bf16(n, d, A, A + log((double)n),
                                                     X, 1, 0);
    }
    r->out = bo;
    r->lse = bl;
    r->keys = n;
    r->head_dim = d;
    r->score_max = A;
    r->v_max = V;
    return 0;
}
