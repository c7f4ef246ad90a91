/* stats.c - the policy names and their parser, the TTFT and queueing
 * histograms and their quantiles, and the causal attention count the cost
 * model charges. */
#include "sim/internal.h"

/* ---- policies ------------------------------------------------------------ */

static const char *const policy_names[KV_SIM_NPOLICIES] = {
    "none", "prefix", "prefix-sorted", "chunk", "chunk-lfu", "oracle",
    "prefix-radix", "prefix-lfu"
};

const char *kv_sim_policy_name(int p)
{
    return p >= 0 && p < KV_SIM_NPOLICIES ? policy_names[p] : "?";
}

int kv_sim_policy_parse(const char *list, unsigned *mask, struct kv_err *e)
{
    unsigned m = 0;
    const char *p = list;
    if (!*p)
        return kv_err_set(e, "empty policy list");
    for (;;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        int found = -1;
        for (int i = 0; i < KV_SIM_NPOLICIES; i++)
            if (strlen(policy_names[i]) == n && !memcmp(policy_names[i], p, n))
                found = i;
        if (found < 0)
            return kv_err_set(e, "unknown policy '%.*s' (expected none, "
                              "prefix, prefix-lfu, prefix-radix, "
                              "prefix-sorted, chunk, chunk-lfu or oracle)", (int)(n > 40 ? 40 : n),
                              p);
        if (m & (1u << found))
            return kv_err_set(e, "policy '%s' given twice",
                              policy_names[found]);
        m |= 1u << found;
        if (!c)
            break;
        p = c + 1;
    }
    *mask = m;
    return 0;
}

static void hist_put(uint64_t *hist, double us)
{
    int b = 0;
    if (us > 1e-3) {
        b = (int)floor((log10(us) + 3.0) * 100.0);
        if (b >= KV_SIM_HIST)
            b = KV_SIM_HIST - 1;
        if (b < 0)
            b = 0;
    }
    hist[b]++;
}

/* Record one request's modelled TTFT us, arriving at t seconds. */
void sim_hist_add(struct kv_sim_stats *st, double us, double t)
{
    double t_us = t * 1e6, start, q;
    int first = st->requests <= 1;   /* account() counted this one */
    hist_put(st->hist, us);
    st->ttft_sum_us += us;
    if (us > st->ttft_max_us)
        st->ttft_max_us = us;
    if (first || us < st->ttft_min_us)
        st->ttft_min_us = us;
    start = st->busy_until_us > t_us ? st->busy_until_us : t_us;
    st->busy_until_us = start + us;
    q = st->busy_until_us - t_us;
    hist_put(st->queued_hist, q);
    st->queued_sum_us += q;
    if (q > st->queued_max_us)
        st->queued_max_us = q;
    if (first || q < st->queued_min_us)
        st->queued_min_us = q;
}

/* Quantile q of a histogram whose samples lie in [min, max]: the geometric
 * middle of the bucket that holds it, clamped to [min, max] (so that the
 * quantiles of equal samples are that sample, never a bucket's middle). */
static double quantile(const uint64_t *hist, double min, double max,
                       double q)
{
    uint64_t total = 0, acc = 0;
    for (int i = 0; i < KV_SIM_HIST; i++)
        total += hist[i];
    if (!total)
        return 0;
    uint64_t want = (uint64_t)ceil(q * (double)total);
    if (want < 1)
        want = 1;
    for (int i = 0; i < KV_SIM_HIST; i++) {
        acc += hist[i];
        if (acc >= want) {
            double v = i ? pow(10.0, (i + 0.5) / 100.0 - 3.0) : 0;
            if (v > max)
                v = max;
            return v < min ? min : v;
        }
    }
    return max;
}

double kv_sim_ttft_quantile(const struct kv_sim_stats *s, double q)
{
    return quantile(s->hist, s->ttft_min_us, s->ttft_max_us, q);
}

double kv_sim_queued_quantile(const struct kv_sim_stats *s, double q)
{
    return quantile(s->queued_hist, s->queued_min_us, s->queued_max_us,
                    q);
}

/* Keys a causal run of n tokens starting at position p attends to:
 * sum of (p + i + 1) for i < n. */
double sim_causal_pairs(int64_t p, int64_t n)
{
    return (double)n * (double)p + (double)n * (double)(n + 1) / 2.0;
}
