/* kvchunk sim: trace replay, gen and from-split (lib/sim); the
 * dispatch and the option readers the three share. */
#include "kvchunk.h"

int parse_order(const char *s, int *out)
{
    if (!strcmp(s, "retrieval"))
        *out = KV_SIM_ORDER_RETRIEVAL;
    else if (!strcmp(s, "sorted"))
        *out = KV_SIM_ORDER_SORTED;
    else if (!strcmp(s, "random"))
        *out = KV_SIM_ORDER_RANDOM;
    else
        return -1;
    return 0;
}

int opt_f64(struct arg_str *a, const char *opt, double min,
            double max, double *out)
{
    struct kv_err e;
    double v;
    if (!a->count)
        return 0;
    if (kv_parse_f64(a->sval[0], opt, &v, &e) < 0)
        return kv_usage("%s", e.msg);
    if (!(v >= min && v <= max))
        return kv_usage("%s: expected a number from %g to %g, got '%s'",
                        opt, min, max, a->sval[0]);
    *out = v;
    return 0;
}

int cmd_sim(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "gen"))
        return cmd_sim_gen(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "from-split"))
        return cmd_sim_from_split(argc - 1, argv + 1);
    return cmd_sim_replay(argc, argv);
}
