/* kvmask ascend: the masks vllm-ascend's builders produce, their presets
 * and their values, and the MTP context-parallel geometry. */
#include "kvmask.h"

const char *const preset_names[] = {
    "", "attn", "splitfuse", "splitfuse-310p", "pooling", "mla", "pcp-mla",
    "swa", "mtp-cp", NULL
};

/* Value of an Ascend fill rule converted the way `.to(dtype)` converts it:
 * x is -inf or 1. */
static int ascend_value(enum kv_dtype dt, double x, uint32_t *bits,
                        const char *why)
{
    if (kv_mask_value_bits(dt, x, bits) != 0)
        return kv_usage("%s: %g cannot be converted to %s", why, x,
                        kv_dtype_name(dt));
    return 0;
}

/* Local keys of one context-parallel rank among the first L tokens when
 * tokens go to the cp ranks in turns of I (vllm-ascend pcp_utils). */
static int64_t cp_local_len(int64_t L, int64_t cp, int64_t rank, int64_t I)
{
    int64_t full = L / I / cp * I;
    int64_t rest = L - full * cp - rank * I;
    return full + (rest < 0 ? 0 : rest > I ? I : rest);
}

/* `ascend --preset mtp-cp`: the CP decode mask of MTP requests
 * (generate_mtp_attention_mask_for_decode): bool [R, max_q, max_k], True =
 * masked.  Query t of a request sits at global position P = history + t;
 * with n = the rank's local keys at positions <= P, the row masks local
 * columns [n, kv_local) when n >= 1; everything else is False. */
int setup_mtp(struct opts *o, struct arg_str *history,
              struct arg_str *qlens, struct arg_str *cpsize,
              struct arg_str *cprank, struct arg_str *interleave,
              int other_geometry)
{
    int64_t *h = NULL, *q = NULL, cp, rank, I = 1, max_q = 0, max_k = 0;
    size_t nh = 0, nq = 0;
    int rc = KV_EXIT_USAGE;

    if (other_geometry)
        return kv_usage("-n/--seq-lens/--positions: not with --preset mtp-cp "
                        "(the geometry is --history and --q-lens)");
    if (!history->count || !qlens->count || !cpsize->count || !cprank->count)
        return kv_usage("--preset mtp-cp needs --history, --q-lens, "
                        "--cp-size and --cp-rank");
    if (parse_list(history->sval[0], "--history", 0, &h, &nh) ||
        parse_list(qlens->sval[0], "--q-lens", 1, &q, &nq) ||
        parse_len(cpsize->sval[0], "--cp-size", 1, &cp) ||
        parse_len(cprank->sval[0], "--cp-rank", 0, &rank) ||
        (interleave->count &&
         parse_len(interleave->sval[0], "--interleave", 1, &I)))
        goto out;
    if (nh != nq) {
        kv_usage("--q-lens: %zu value%s for %zu requests in --history", nq,
                 nq == 1 ? "" : "s", nh);
        goto out;
    }
    if (rank >= cp) {
        kv_usage("--cp-rank: expected an integer below --cp-size %lld, got "
                 "%lld", (long long)cp, (long long)rank);
        goto out;
    }
    for (size_t r = 0; r < nh; r++) {
        if (h[r] + q[r] > KV_MASK_MAX_LEN) {
            kv_usage("--history: request %zu is too long", r);
            goto out;
        }
        max_q = q[r] > max_q ? q[r] : max_q;
        int64_t k = cp_local_len(h[r] + q[r], cp, rank, I);
        max_k = k > max_k ? k : max_k;
    }
    if (max_k == 0) {
        kv_usage("--cp-rank: rank %lld holds no key of these requests",
                 (long long)rank);
        goto out;
    }
    if ((double)max_q * (double)nh > (double)KV_MASK_MAX_LEN) {
        kv_usage("--q-lens: too many rows");
        goto out;
    }
    size_t rows = (size_t)max_q * nh;
    struct kv_err e;
    /* two bounds per row, here and in the mask */
    if (rows_over(o, (double)rows, 4 * sizeof(int64_t),
                  "the key ranges of the mtp-cp rows", &e)) {
        rc = kv_fail_err(&e);
        goto out;
    }
    o->hole_lo = malloc(rows * sizeof *o->hole_lo);
    o->hole_hi = malloc(rows * sizeof *o->hole_hi);
    if (!o->hole_lo || !o->hole_hi) {
        rc = kv_fail("out of memory");
        goto out;
    }
    for (size_t r = 0; r < nh; r++) {
        int64_t kl = cp_local_len(h[r] + q[r], cp, rank, I);
        for (int64_t t = 0; t < max_q; t++) {
            size_t at = r * (size_t)max_q + (size_t)t;
            int64_t nk = t < q[r] ? cp_local_len(h[r] + t + 1, cp, rank, I) : 0;
            o->hole_lo[at] = o->hole_hi[at] = 0;
            if (nk >= 1 && nk < kl) {
                o->hole_lo[at] = nk;
                o->hole_hi[at] = kl;
            }
        }
    }
    o->spec.kind = KV_MASK_HOLE;
    o->spec.n_q = (int64_t)rows;
    o->spec.n_kv = max_k;
    o->spec.hole_lo = o->hole_lo;
    o->spec.hole_hi = o->hole_hi;
    o->spec.rows_per_mat = max_q;
    rc = 0;
out:
    free(h);
    free(q);
    return rc;
}

/* The mask and values of `kvmask ascend --preset P`. */
int setup_ascend(struct opts *o, int have_dtype, enum kv_dtype dt,
                 const char *cache_dtype, int64_t n, int have_n,
                 int fallback)
{
    static const int64_t size[] = { 0, 0, 2048, 2048, 2048, 512, 512, 2048, 0 };
    struct kv_mask_values *v = &o->vals;
    enum kv_dtype def[] = { KV_BOOL, KV_F16, KV_I8, KV_F16, KV_BOOL, KV_F16,
                            KV_F16, KV_BOOL, KV_BOOL };
    int per_row = o->spec.kind == KV_MASK_POSITIONS;

    if (o->preset == P_MTP_CP) {
        if (!have_dtype)
            dt = KV_BOOL;
        v->dtype = dt;
        v->pad = 0;
        kv_mask_value_bits(dt, 0.0, &v->keep);
        return ascend_value(dt, 1.0, &v->mask, "--dtype");
    }
    if (per_row && o->preset != P_SPLITFUSE)
        return kv_usage("--seq-lens: only with --preset splitfuse");
    if (fallback && !per_row)
        return kv_usage("--fallback: only with --preset splitfuse --seq-lens");
    if (cache_dtype && o->preset != P_ATTN)
        return kv_usage("--cache-dtype: only with --preset attn");
    if (!have_dtype)
        dt = per_row ? KV_F16 : def[o->preset];
    v->dtype = dt;
    v->pad = 0;
    if (dt != KV_BOOL && dt != KV_U8 && dt != KV_I8 && dt != KV_F16 &&
        dt != KV_BF16 && dt != KV_F32)
        return kv_usage("--dtype: '%s' is not a mask dtype (bool, u8, i8, "
                        "f16, bf16, f32)", kv_dtype_name(dt));
    if (!per_row) {
        if (o->preset == P_ATTN) {
            if (!have_n)
                return kv_usage("-n: required by --preset attn");
        } else if (!have_n) {
            n = size[o->preset];
        } else if (n > size[o->preset]) {
            return kv_usage("-n: the %s mask is %lld x %lld; -n takes a "
                            "top-left slice of at most %lld, got %lld",
                            preset_names[o->preset],
                            (long long)size[o->preset],
                            (long long)size[o->preset],
                            (long long)size[o->preset], (long long)n);
        }
        o->spec.n_q = o->spec.n_kv = n;
        o->spec.top_left = 1;
        if (o->preset == P_SWA) {
            o->spec.kind = KV_MASK_WINDOW;
            if (o->spec.window < 1)
                return kv_usage("-w: --preset swa needs the window -w W >= 1");
        } else {
            o->spec.kind = KV_MASK_CAUSAL;
            if (o->spec.window)
                return kv_usage("-w: only with --preset swa");
        }
    }
    kv_mask_value_bits(dt, 0.0, &v->keep);
    switch (o->preset) {
    case P_ATTN: {
        /* fill rule of the dtype the cache was built with, then .to(dt) */
        enum kv_dtype cd = dt;
        if (cache_dtype) {
            struct kv_err e;
            if (kv_dtype_parse(cache_dtype, &cd, &e) != 0)
                return kv_usage("--cache-dtype: %s", e.msg);
        }
        return ascend_value(dt, cd == KV_F16 ? -INFINITY : 1.0, &v->mask,
                            "--cache-dtype");
    }
    case P_SPLITFUSE:
        if (!per_row)
            return ascend_value(dt, 1.0, &v->mask, "--dtype");
        if (dt != KV_F16 && dt != KV_BF16)
            return kv_usage("--dtype: per-row splitfuse masks are f16 or bf16 "
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
    case P_SPLITFUSE_310P:
        if (dt != KV_F16)
            return kv_usage("--dtype: the 310P splitfuse mask is f16");
        kv_mask_value_bits(dt, -10000.0, &v->mask);
        kv_mask_value_bits(dt, -0.0, &v->keep);    /* 0 * -10000 */
        return 0;
    case P_MLA:
        return ascend_value(dt, dt == KV_F16 ? -INFINITY : 1.0, &v->mask,
                            "--dtype");
    default:
        return ascend_value(dt, 1.0, &v->mask, "--dtype");
    }
}
