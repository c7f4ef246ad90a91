/* bound_inputs.h - the bound of kvattn run's output for given Q, K, V:
 * the scans and formulas of bound.h put together the way kvattn bound
 * reports them (kvattn(1), ACCURACY). */
#ifndef KV_ATTN_BOUND_INPUTS_H
#define KV_ATTN_BOUND_INPUTS_H

#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

struct kv_bound_report {
    double out, lse;        /* bounds on |out - exact| and |lse - exact| */
    int64_t keys, head_dim; /* n and d of the formulas */
    double score_max;       /* A */
    double v_max;           /* V */
};

/* Q, K, V with the head dim last (bhsd [B, H, S, D], thd [T, H, D]),
 * scale (has_scale = 0: 1/sqrt(D)), the largest finite |value| of an
 * additive mask, routes >= 1 (the bound times routes, for two routes
 * compared with each other), the output dtype (f32, f16, bf16), and for
 * bf16 Q, K and V whether P is rounded to bf16 (run's default).  Fills r
 * or returns -1 with the message kvattn bound prints. */
int kv_bound_for_inputs(const struct kv_tensor *q, const struct kv_tensor *k,
                        const struct kv_tensor *v, int has_scale, double scale,
                        double mask_abs, int64_t routes,
                        enum kv_dtype out_dtype, int p_round,
                        struct kv_bound_report *r, struct kv_err *e);

/* The variants of kvattn run whose bound differs (kvattn bound --softcap,
 * --alibi, --alibi-slopes, --sinks): the softcap (0: none), ALiBi with the
 * standard slopes of Q's heads, or given slopes (any dtype, [Hq]), and the
 * sink logits (any dtype, [Hq]); NULL tensors for none. */
struct kv_bound_input_variants {
    double softcap;
    int alibi;
    const struct kv_tensor *alibi_slopes;
    const struct kv_tensor *sinks;
};

/* kv_bound_for_inputs for a run with the variants iv (NULL: none, the
 * same bound as kv_bound_for_inputs). */
int kv_bound_for_inputs_var(const struct kv_tensor *q, const struct kv_tensor *k,
                            const struct kv_tensor *v, int has_scale, double scale,
                            double mask_abs, int64_t routes,
                            enum kv_dtype out_dtype, int p_round,
                            const struct kv_bound_input_variants *iv,
                            struct kv_bound_report *r, struct kv_err *e);

#endif
