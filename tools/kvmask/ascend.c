/* kvmask ascend: the options of vllm-ascend's presets handed to
 * mask/ascend.h, which holds their sizes, values and MTP context-parallel
 * geometry. */
#include "kvmask.h"

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
    struct kv_err e;

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
    if (kv_ascend_mtp_dims(h, q, nh, cp, rank, I, &max_q, &max_k, &e)) {
        kv_usage("%s", e.msg);
        goto out;
    }
    size_t rows = (size_t)max_q * nh;
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
    kv_ascend_mtp_holes(h, q, nh, cp, rank, I, max_q, o->hole_lo, o->hole_hi);
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

/* The mask and values of `kvmask ascend --preset P` (kv_ascend_setup);
 * 0 or the usage error's exit status, said. */
int setup_ascend(struct opts *o, int have_dtype, enum kv_dtype dt,
                 const char *cache_dtype, int64_t n, int have_n,
                 int fallback)
{
    struct kv_err e;
    if (kv_ascend_setup((enum kv_ascend_preset)o->preset, have_dtype, dt,
                        cache_dtype, n, have_n, fallback, &o->spec, &o->vals,
                        &e))
        return kv_usage("%s", e.msg);
    return 0;
}
