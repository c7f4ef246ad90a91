/* kvchunk selftest-rope: moves of this RoPE against the exact rotation. */
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
    static const int64_t pairs[][2] = {
        {0, 1}, {0, 4096}, {0, 131072}, {1, 0}, {4096, 0}, {131072, 0},
        {100, 32768}, {4096, 131072}, {131072, 4096}, {65536, 65537},
    };
    enum { NP = sizeof pairs / sizeof pairs[0] };
    struct kv_rope_error res[NP];
    for (int i = 0; i < NP; i++)
        if (kv_rope_measure(&v.ns.rope, v.ns.dtype, pairs[i][0], pairs[i][1],
                            (size_t)nv, (uint64_t)sd + (uint64_t)i, &res[i],
                            &e) < 0) {
            free_table(&t);
            return kv_fail_err(&e);
        }
    int bad = 0;
    printf("p0 p_new max_rel rms_rel max_ulp rms_ulp\n");
    for (int i = 0; i < NP; i++) {
        int ok = res[i].rms_ulp <= 1.0 && res[i].max_ulp <= 2.0;
        bad += !ok;
        printf("%lld %lld %.3g %.3g %.3f %.3f%s\n", (long long)pairs[i][0],
               (long long)pairs[i][1], res[i].max_rel, res[i].rms_rel,
               res[i].max_ulp, res[i].rms_ulp, ok ? "" : " FAIL");
    }
    free_table(&t);
    rc = kv_close_stdout();
    if (rc == 0 && bad) {
        kv_warn("%d of %d moves above 1 ulp RMS or 2 ulps max", bad, (int)NP);
        rc = 1;
    }
    return rc;
}
