/* kvchunk selftest-rope: moves of this RoPE against the exact rotation
 * (libkv's kv_rope_selftest, chunk/rope_selftest.h). */
#include "kvchunk.h"

int cmd_selftest_rope(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct common c;
    struct arg_str *vecs, *seed;
    add_ns(&t, &na, 1);
    add(&t, vecs = arg_str0(NULL, "vectors", "N", "random head vectors per "
                            "move (default 2000)"));
    add(&t, seed = arg_str0(NULL, "seed", "N", "seed (default 1)"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nMeasure RoPE moves of this model "
                   "against the exact rotation: exit 0 when every move is "
                   "within\n1 ulp RMS and 2 ulps max of the KV dtype, 1 when "
                   "not.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    int64_t nv = 2000, sd = 1;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape && kv_err_set(&e, "--shape L,HKV,D is required") < 0)
        || ns_finish(&v, &e) < 0 ||
        (sval(vecs) && kv_parse_i64(sval(vecs), "--vectors", 1, 1000000, &nv,
                                    &e) < 0) ||
        (sval(seed) && kv_parse_i64(sval(seed), "--seed", 0, INT64_MAX, &sd,
                                    &e) < 0)) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    enum { NP = KV_ROPE_SELFTEST_MOVES };
    struct kv_rope_error res[NP];
    int bad = 0;
    if (kv_rope_selftest(&v.ns.rope, v.ns.dtype, (size_t)nv, (uint64_t)sd,
                         res, &bad, &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    printf("p0 p_new max_rel rms_rel max_ulp rms_ulp\n");
    for (int i = 0; i < NP; i++)
        printf("%lld %lld %.3g %.3g %.3f %.3f%s\n",
               (long long)kv_rope_selftest_moves[i][0],
               (long long)kv_rope_selftest_moves[i][1], res[i].max_rel,
               res[i].rms_rel, res[i].max_ulp, res[i].rms_ulp,
               kv_rope_selftest_ok(&res[i]) ? "" : " FAIL");
    free_table(&t);
    rc = kv_close_stdout();
    if (rc == 0 && bad) {
        kv_warn("%d of %d moves above 1 ulp RMS or 2 ulps max", bad, (int)NP);
        rc = 1;
    }
    return rc;
}
