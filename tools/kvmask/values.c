/* kvmask: what a dense element holds: dtype, fill and keep. */
#include "kvmask.h"

/* The values of kept and masked elements (ascend: its presets). */
int mask_values(const struct margs *a, struct opts *o, int64_t nv)
{
    struct kv_err e;

    enum kv_dtype dt = KV_BOOL;
    if (a->dtype->count && kv_dtype_parse(a->dtype->sval[0], &dt, &e) != 0) {
        kv_usage("--dtype: %s", e.msg);
        return KV_EXIT_USAGE;
    }
    if (o->kind == KIND_ASCEND) {
        int p = a->preset->count ? lookup(kv_ascend_preset_names, a->preset->sval[0]) : -1;
        if (p <= 0) {
            kv_usage("--preset: expected attn, splitfuse, splitfuse-310p, "
                     "pooling, mla, pcp-mla, swa or mtp-cp%s%s%s",
                     a->preset->count ? ", got '" : "",
                     a->preset->count ? a->preset->sval[0] : "",
                     a->preset->count ? "'" : "");
            return KV_EXIT_USAGE;
        }
        o->preset = (enum preset)p;
        o->spec.kind = KV_MASK_CAUSAL;
        if ((a->history->count || a->cpsize->count || a->cprank->count ||
             a->interleave->count) && o->preset != P_MTP_CP) {
            kv_usage("--history/--cp-size/--cp-rank/--interleave: only with "
                     "--preset mtp-cp");
            return KV_EXIT_USAGE;
        }
        if (o->preset == P_MTP_CP) {
            /* usage errors exit 2, memory ones 1 */
            int mrc = setup_mtp(o, a->history, a->qlens, a->cpsize, a->cprank,
                                a->interleave, a->n->count ||
                                a->seqlens->count || a->positions->count);
            if (mrc != 0)
                return mrc;
        } else if (a->seqlens->count) {
            int64_t *sl = NULL, *ql = NULL;
            size_t ns = 0, nq = 0, np = 0;
            if (a->n->count) {
                kv_usage("-n: not with --seq-lens (the mask is sum(q) x "
                         "max(seq-lens))");
                return KV_EXIT_USAGE;
            }
            if (parse_list(a->seqlens->sval[0], "--seq-lens", 1, &sl, &ns))
                return KV_EXIT_USAGE;
            int64_t maxs = 0;
            for (size_t r = 0; r < ns; r++)
                maxs = sl[r] > maxs ? sl[r] : maxs;
            if (a->positions->count) {
                if (a->qlens->count) {
                    free(sl);
                    kv_usage("--positions: give either --positions or --q-lens");
                    return KV_EXIT_USAGE;
                }
                if (parse_list(a->positions->sval[0], "--positions", 0,
                               &o->positions, &np)) {
                    free(sl);
                    return KV_EXIT_USAGE;
                }
                for (size_t k = 0; k < np; k++)
                    if (o->positions[k] >= maxs) {
                        free(sl);
                        kv_usage("--positions: position %lld is not below "
                                 "max(--seq-lens) = %lld",
                                 (long long)o->positions[k], (long long)maxs);
                        return KV_EXIT_USAGE;
                    }
            } else {
                if (a->qlens->count) {
                    if (parse_list(a->qlens->sval[0], "--q-lens", 1, &ql, &nq)) {
                        free(sl);
                        return KV_EXIT_USAGE;
                    }
                    if (nq != ns) {
                        kv_usage("--q-lens: %zu value%s for %zu requests in "
                                 "--seq-lens", nq, nq == 1 ? "" : "s", ns);
                        free(sl);
                        free(ql);
                        return KV_EXIT_USAGE;
                    }
                }
                int64_t tot = 0;
                for (size_t r = 0; r < ns; r++) {
                    int64_t q = ql ? ql[r] : sl[r];
                    if (q > sl[r]) {
                        kv_usage("--q-lens: request %zu has %lld new tokens but "
                                 "a sequence of %lld", r, (long long)q,
                                 (long long)sl[r]);
                        free(sl);
                        free(ql);
                        return KV_EXIT_USAGE;
                    }
                    tot += q;
                }
                if (tot > KV_MASK_MAX_LEN) {
                    kv_usage("--q-lens: too many rows");
                    free(sl);
                    free(ql);
                    return KV_EXIT_USAGE;
                }
                /* one position per row, here and in the mask */
                struct kv_err re;
                if (rows_over(o, (double)tot, 2 * sizeof(int64_t),
                              "the positions of the splitfuse rows", &re)) {
                    free(sl);
                    free(ql);
                    return kv_fail_err(&re);
                }
                o->positions = malloc((size_t)tot * sizeof *o->positions);
                if (!o->positions) {
                    free(sl);
                    free(ql);
                    return kv_fail("out of memory");
                }
                for (size_t r = 0; r < ns; r++) {
                    int64_t q = ql ? ql[r] : sl[r];
                    for (int64_t k = 0; k < q; k++)
                        o->positions[np++] = sl[r] - q + k;
                }
                free(ql);
            }
            free(sl);
            o->spec.kind = KV_MASK_POSITIONS;
            o->spec.n_q = (int64_t)np;
            o->spec.n_kv = maxs;
            o->spec.positions = o->positions;
        } else if (o->preset != P_MTP_CP && (a->positions->count || a->qlens->count)) {
            kv_usage("%s: only with --preset splitfuse --seq-lens",
                     a->positions->count ? "--positions" : "--q-lens");
            return KV_EXIT_USAGE;
        }
        if (setup_ascend(o, a->dtype->count, dt, a->cachedt->count ?
                         a->cachedt->sval[0] : NULL, nv, a->n->count,
                         a->fallback->count) != 0)
            return KV_EXIT_USAGE;
    } else if (kv_mask_values_plain(&o->vals, dt, a->keep->count,
                                    a->fill->count ? a->fill->sval[0] : NULL,
                                    &e) != 0) {
        kv_usage("%s", e.msg);
        return KV_EXIT_USAGE;
    }

    return 0;
}
