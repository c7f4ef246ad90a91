/* bound_inputs.c - kvattn run's output bound for given inputs. */
#include <math.h>
#include <stdlib.h>
#include "attn/attn.h"
#include "attn/bound.h"
#include "attn/bound_inputs.h"

/* The largest |value| of t (0 for none). */
static double abs_max(const struct kv_tensor *t)
{
    double mx = 0.0;
    for (size_t i = 0; t && i < kv_tensor_numel(t); i++)
        mx = fmax(mx, fabs(kv_tensor_get_f64(t, i)));
    return mx;
}

int kv_bound_for_inputs_var(const struct kv_tensor *q, const struct kv_tensor *k,
                            const struct kv_tensor *v, int has_scale, double scale,
                            double mask_abs, int64_t routes,
                            enum kv_dtype out_dtype, int p_round,
                            const struct kv_bound_input_variants *iv,
                            struct kv_bound_report *r, struct kv_err *e)
{
    struct kv_bound_variants var = {0};
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
    if (iv) {
        /* ALiBi: |slope (j - i')| <= max|slope| max(Lq, Lk); sinks:
         * max |sink| */
        int64_t hq = q->shape[1], nq = q->ndim == 4 ? q->shape[2] : q->shape[0];
        double smax = abs_max(iv->alibi_slopes);
        if (iv->alibi) {
            float *sl = malloc((size_t)(hq > 0 ? hq : 1) * sizeof *sl);
            if (!sl)
                return kv_err_set(e, "out of memory");
            kv_attn_alibi_slopes(hq, sl);
            for (int64_t h = 0; h < hq; h++)
                smax = fmax(smax, fabs((double)sl[h]));
            free(sl);
        }
        var.softcap = iv->softcap;
        var.has_sink = iv->sinks != NULL;
        var.sink_abs = abs_max(iv->sinks);
        var.bias_abs = smax * (double)(nq > n ? nq : n);
    }
    double la = kv_bound_variants_lse_abs(n, A, &var);
    double bo = (double)routes * kv_bound_attn_out_var(n, d, A, V, out_dtype, &var);
    double bl = (double)routes * kv_bound_attn_lse_var(n, d, A, la, 0, &var);
    if (q->dtype == KV_BF16 && k->dtype == KV_BF16 && v->dtype == KV_BF16) {
        /* the bf16 tiles: the looser instruction, P rounded unless told */
        double X = kv_bound_scan_x(q, k, scale);
        bo = (double)routes * kv_bound_attn_out_bf16_var(n, d, A, V, X, out_dtype, 1,
                                                         p_round, &var);
        bl = (double)routes * kv_bound_attn_lse_bf16_var(n, d, A, la, X, 1, 0, &var);
    }
    r->out = bo;
    r->lse = bl;
    r->keys = n;
    r->head_dim = d;
    r->score_max = A;
    r->v_max = V;
    return 0;
}

int kv_bound_for_inputs(const struct kv_tensor *q, const struct kv_tensor *k,
                        const struct kv_tensor *v, int has_scale, double scale,
                        double mask_abs, int64_t routes,
                        enum kv_dtype out_dtype, int p_round,
                        struct kv_bound_report *r, struct kv_err *e)
{
    return kv_bound_for_inputs_var(q, k, v, has_scale, scale, mask_abs, routes,
                                   out_dtype, p_round, NULL, r, e);
}
