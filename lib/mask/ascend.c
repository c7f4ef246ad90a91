/* ascend.c - vllm-ascend's attention-mask presets (ascend.h). */
#include <math.h>
#include <string.h>
#include "mask/ascend.h"

const char *const kv_ascend_preset_names[] = {
    "", "attn", "splitfuse", "splitfuse-310p", "pooling", "mla", "pcp-mla",
    "swa", "mtp-cp", NULL
};

int kv_ascend_preset_parse(const char *s, enum kv_ascend_preset *out,
                           struct kv_err *e)
{
    for (int i = 1; s && kv_ascend_preset_names[i]; i++)
        if (!strcmp(s, kv_ascend_preset_names[i])) {
            *out = (enum kv_ascend_preset)i;
            return 0;
        }
    return kv_err_set(e, "--preset: expected attn, splitfuse, splitfuse-310p, "
                      "pooling, mla, pcp-mla, swa or mtp-cp%s%s%s",
                      s ? ", got '" : "", s ? s : "", s ? "'" : "");
}

/* Value of an Ascend fill rule converted the way `.to(dtype)` converts it:
 * x is -inf or 1. */
static int fill_value(enum kv_dtype dt, double x, uint32_t *bits,
                      const char *why, struct kv_err *e)
{
    if (kv_mask_value_bits(dt, x, bits) != 0)
        return kv_err_set(e, "%s: %g cannot be converted to %s", why, x,
                          kv_dtype_name(dt));
    return 0;
}

/* The size and kind of a whole-matrix preset (all but mtp-cp and the
 * per-row splitfuse mask): -n is a top-left slice of the builder's. */
static int preset_geometry(enum kv_ascend_preset p, int64_t n, int have_n,
                           struct kv_mask_spec *s, struct kv_err *e)
{
    static const int64_t size[] = { 0, 0, 2048, 2048, 2048, 512, 512, 2048, 0 };
    if (p == KV_ASCEND_ATTN) {
        if (!have_n)
            return kv_err_set(e, "-n: required by --preset attn");
    } else if (!have_n) {
        n = size[p];
    } else if (n > size[p]) {
        return kv_err_set(e, "-n: the %s mask is %lld x %lld; -n takes a "
                          "top-left slice of at most %lld, got %lld",
                          kv_ascend_preset_names[p], (long long)size[p],
                          (long long)size[p], (long long)size[p], (long long)n);
    }
    s->n_q = s->n_kv = n;
    s->top_left = 1;
    if (p == KV_ASCEND_SWA) {
        s->kind = KV_MASK_WINDOW;
        if (s->window < 1)
            return kv_err_set(e, "-w: --preset swa needs the window -w W >= 1");
    } else {
        s->kind = KV_MASK_CAUSAL;
        if (s->window)
            return kv_err_set(e, "-w: only with --preset swa");
    }
    return 0;
}

/* The per-row splitfuse mask's values: the upstream scale factor. */
static int splitfuse_rows(enum kv_dtype dt, int fallback,
                          struct kv_mask_values *v, struct kv_err *e)
{
    if (dt != KV_F16 && dt != KV_BF16)
        return kv_err_set(e, "--dtype: per-row splitfuse masks are f16 or bf16 "
                          "(the upstream scale factor is defined for no "
                          "other dtype)");
    if (fallback) {           /* explicit -10000 fill, zeros set */
        kv_mask_value_bits(dt, -10000.0, &v->mask);
    } else if (dt == KV_F16) { /* cache rows 0/-inf, scale 1 */
        kv_mask_value_bits(dt, -INFINITY, &v->mask);
    } else {                   /* cache rows 0/1 times -10000 */
        kv_mask_value_bits(dt, -10000.0, &v->mask);
        kv_mask_value_bits(dt, -0.0, &v->keep);
    }
    return 0;
}

int kv_ascend_setup(enum kv_ascend_preset p, int have_dtype, enum kv_dtype dt,
                    const char *cache_dtype, int64_t n, int have_n,
                    int fallback, struct kv_mask_spec *s,
                    struct kv_mask_values *v, struct kv_err *e)
{
    static const enum kv_dtype def[] = { KV_BOOL, KV_F16, KV_I8, KV_F16,
                                         KV_BOOL, KV_F16, KV_F16, KV_BOOL,
                                         KV_BOOL };
    int per_row = s->kind == KV_MASK_POSITIONS;

    if (p == KV_ASCEND_MTP_CP) {
        if (!have_dtype)
            dt = KV_BOOL;
        v->dtype = dt;
        v->pad = 0;
        kv_mask_value_bits(dt, 0.0, &v->keep);
        return fill_value(dt, 1.0, &v->mask, "--dtype", e);
    }
    if (per_row && p != KV_ASCEND_SPLITFUSE)
        return kv_err_set(e, "--seq-lens: only with --preset splitfuse");
    if (fallback && !per_row)
        return kv_err_set(e, "--fallback: only with --preset splitfuse --seq-lens");
    if (cache_dtype && p != KV_ASCEND_ATTN)
        return kv_err_set(e, "--cache-dtype: only with --preset attn");
    if (!have_dtype)
        dt = per_row ? KV_F16 : def[p];
    v->dtype = dt;
    v->pad = 0;
    if (dt != KV_BOOL && dt != KV_U8 && dt != KV_I8 && dt != KV_F16 &&
        dt != KV_BF16 && dt != KV_F32)
        return kv_err_set(e, "--dtype: '%s' is not a mask dtype (bool, u8, i8, "
                          "f16, bf16, f32)", kv_dtype_name(dt));
    if (!per_row && preset_geometry(p, n, have_n, s, e))
        return -1;
    kv_mask_value_bits(dt, 0.0, &v->keep);
    switch (p) {
    case KV_ASCEND_ATTN: {
        /* fill rule of the dtype the cache was built with, then .to(dt) */
        enum kv_dtype cd = dt;
        if (cache_dtype && kv_dtype_parse(cache_dtype, &cd, e) != 0)
            return kv_err_prefix(e, "--cache-dtype");
        return fill_value(dt, cd == KV_F16 ? -INFINITY : 1.0, &v->mask,
                          "--cache-dtype", e);
    }
    case KV_ASCEND_SPLITFUSE:
        if (per_row)
            return splitfuse_rows(dt, fallback, v, e);
        return fill_value(dt, 1.0, &v->mask, "--dtype", e);
    case KV_ASCEND_SPLITFUSE_310P:
        if (dt != KV_F16)
            return kv_err_set(e, "--dtype: the 310P splitfuse mask is f16");
        kv_mask_value_bits(dt, -10000.0, &v->mask);
        kv_mask_value_bits(dt, -0.0, &v->keep);    /* 0 * -10000 */
        return 0;
    case KV_ASCEND_MLA:
        return fill_value(dt, dt == KV_F16 ? -INFINITY : 1.0, &v->mask,
                          "--dtype", e);
    default:
        return fill_value(dt, 1.0, &v->mask, "--dtype", e);
    }
}

int64_t kv_ascend_cp_local_len(int64_t L, int64_t cp, int64_t rank, int64_t I)
{
    int64_t full = L / I / cp * I;
    int64_t rest = L - full * cp - rank * I;
    return full + (rest < 0 ? 0 : rest > I ? I : rest);
}

int kv_ascend_mtp_dims(const int64_t *history, const int64_t *q_lens,
                       size_t n_req, int64_t cp, int64_t rank, int64_t I,
                       int64_t *max_q, int64_t *max_k, struct kv_err *e)
{
    int64_t mq = 0, mk = 0;
    if (rank >= cp)
        return kv_err_set(e, "--cp-rank: expected an integer below --cp-size "
                          "%lld, got %lld", (long long)cp, (long long)rank);
    for (size_t r = 0; r < n_req; r++) {
        if (history[r] + q_lens[r] > KV_MASK_MAX_LEN)
            return kv_err_set(e, "--history: request %zu is too long", r);
        mq = q_lens[r] > mq ? q_lens[r] : mq;
        int64_t k = kv_ascend_cp_local_len(history[r] + q_lens[r], cp, rank, I);
        mk = k > mk ? k : mk;
    }
    if (mk == 0)
        return kv_err_set(e, "--cp-rank: rank %lld holds no key of these "
                          "requests", (long long)rank);
    if ((double)mq * (double)n_req > (double)KV_MASK_MAX_LEN)
        return kv_err_set(e, "--q-lens: too many rows");
    *max_q = mq;
    *max_k = mk;
    return 0;
}

void kv_ascend_mtp_holes(const int64_t *history, const int64_t *q_lens,
                         size_t n_req, int64_t cp, int64_t rank, int64_t I,
                         int64_t max_q, int64_t *lo, int64_t *hi)
{
    for (size_t r = 0; r < n_req; r++) {
        int64_t kl = kv_ascend_cp_local_len(history[r] + q_lens[r], cp, rank, I);
        for (int64_t t = 0; t < max_q; t++) {
            size_t at = r * (size_t)max_q + (size_t)t;
            int64_t nk = t < q_lens[r] ?
                kv_ascend_cp_local_len(history[r] + t + 1, cp, rank, I) : 0;
            lo[at] = hi[at] = 0;
            if (nk >= 1 && nk < kl) {
                lo[at] = nk;
                hi[at] = kl;
            }
        }
    }
}
