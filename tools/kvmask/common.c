/* kvmask: the option parsers the steps share (names, lengths, lists) and
 * the release of what the options allocated. */
#include "kvmask.h"

void opts_release(struct opts *o)
{
    free(o->q_lens);
    free(o->kv_lens);
    free(o->positions);
    free(o->seg_lens);
    free(o->seg_kinds);
    free(o->hole_lo);
    free(o->hole_hi);
    free(o->parents);
}

int lookup(const char *const *names, const char *s)
{
    for (int k = 0; names[k]; k++)
        if (strcmp(names[k], s) == 0)
            return k;
    return -1;
}

int parse_len(const char *s, const char *opt, int64_t min, int64_t *v)
{
    struct kv_err e;
    if (kv_parse_i64(s, opt, min, KV_MASK_MAX_LEN, v, &e) != 0) {
        kv_usage("%s", e.msg);
        return -1;
    }
    return 0;
}

int parse_list(const char *s, const char *opt, int64_t min,
               int64_t **v, size_t *n)
{
    struct kv_err e;
    if (kv_parse_i64_list(s, opt, min, KV_MASK_MAX_LEN, v, n, &e) != 0) {
        kv_usage("%s", e.msg);
        return -1;
    }
    if (*n == 0) {
        kv_usage("%s: expected a comma-separated list of integers", opt);
        return -1;
    }
    return 0;
}
