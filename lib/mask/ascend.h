/* ascend.h - vllm-ascend's attention-mask presets: the size, the default
 * dtype and the element values of each builder's mask, and the geometry
 * of the MTP context-parallel decode mask.  kvmask ascend and the Python
 * package's kvmask.ascend both make their masks through it. */
#ifndef KV_MASK_ASCEND_H
#define KV_MASK_ASCEND_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"
#include "mask/mask.h"

enum kv_ascend_preset {
    KV_ASCEND_NONE, KV_ASCEND_ATTN, KV_ASCEND_SPLITFUSE,
    KV_ASCEND_SPLITFUSE_310P, KV_ASCEND_POOLING, KV_ASCEND_MLA,
    KV_ASCEND_PCP_MLA, KV_ASCEND_SWA, KV_ASCEND_MTP_CP
};

/* The presets' names, indexed by the enum ("" for NONE), NULL-terminated. */
extern const char *const kv_ascend_preset_names[];

/* The preset named s: 0, or -1 with e ("--preset: expected attn, ...,
 * got 's'"; s NULL: no preset named). */
int kv_ascend_preset_parse(const char *s, enum kv_ascend_preset *out,
                           struct kv_err *e);

/* The mask geometry and element values of preset p.  dt is --dtype when
 * have_dtype, cache_dtype --cache-dtype or NULL, n -n when have_n,
 * fallback --fallback.  A per-row splitfuse mask (s->kind already
 * KV_MASK_POSITIONS) keeps its geometry; any other preset but mtp-cp sets
 * s's kind, size and top-left alignment (s->window is -w).  0, or -1 with
 * the usage error's message in e. */
int kv_ascend_setup(enum kv_ascend_preset p, int have_dtype, enum kv_dtype dt,
                    const char *cache_dtype, int64_t n, int have_n,
                    int fallback, struct kv_mask_spec *s,
                    struct kv_mask_values *v, struct kv_err *e);

/* Local keys of one context-parallel rank among the first L tokens when
 * tokens go to the cp ranks in turns of I (vllm-ascend pcp_utils). */
int64_t kv_ascend_cp_local_len(int64_t L, int64_t cp, int64_t rank, int64_t I);

/* --preset mtp-cp: n_req requests with history[r] tokens before q_lens[r]
 * new ones on rank `rank` of cp (turns of I).  Checks the geometry and
 * gives the mask's rows per request (*max_q) and columns (*max_k); 0, or
 * -1 with the usage error's message in e. */
int kv_ascend_mtp_dims(const int64_t *history, const int64_t *q_lens,
                       size_t n_req, int64_t cp, int64_t rank, int64_t I,
                       int64_t *max_q, int64_t *max_k, struct kv_err *e);

/* The masked key range [lo, hi) of each of the n_req * max_q rows
 * (generate_mtp_attention_mask_for_decode): query t of a request sits at
 * global position history + t; with k the rank's local keys up to it, the
 * row masks local columns [k, kv_local) when k >= 1, nothing otherwise. */
void kv_ascend_mtp_holes(const int64_t *history, const int64_t *q_lens,
                         size_t n_req, int64_t cp, int64_t rank, int64_t I,
                         int64_t max_q, int64_t *lo, int64_t *hi);

#endif
