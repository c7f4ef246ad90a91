/* rope.c - RoPE descriptions: the styles, the scalings and their
 * parameters, the layers without RoPE or with a local base, the checks,
 * the description written into keys, and the inverse frequencies (see
 * rope.h).  The move of stored K by a position delta is in rope_move.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chunk/rope.h"
#include "core/half.h"
#include "core/isa.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

void kv_rope_init(struct kv_rope *r, int head_dim)
{
    memset(r, 0, sizeof *r);
    r->style = KV_ROPE_NEOX;
    r->head_dim = head_dim;
    r->rotary_dim = 0;
    r->theta = 10000.0;
    r->scaling = KV_ROPE_SCALE_NONE;
    r->factor = 1.0;
    r->low_freq_factor = 1.0;
    r->high_freq_factor = 4.0;
    r->original_max_pos = 8192;
    r->beta_fast = 32.0;
    r->beta_slow = 1.0;
    r->attention_factor = 0.0;
    r->yarn_truncate = 1;
    r->max_pos = 0;
}

int kv_rope_parse_style(const char *s, enum kv_rope_style *out,
                        struct kv_err *e)
{
    static const struct { const char *name; enum kv_rope_style v; } t[] = {
        {"neox", KV_ROPE_NEOX}, {"gptj", KV_ROPE_GPTJ},
        {"none", KV_ROPE_NONE}, {"learned", KV_ROPE_LEARNED},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(s, t[i].name) == 0) {
            *out = t[i].v;
            return 0;
        }
    return kv_err_set(e, "--rope: expected neox, gptj, none or learned, "
                      "got '%s'", s);
}

static const char *scaling_name(enum kv_rope_scaling s)
{
    switch (s) {
    case KV_ROPE_SCALE_LINEAR: return "linear";
    case KV_ROPE_SCALE_NTK: return "ntk";
    case KV_ROPE_SCALE_LLAMA3: return "llama3";
    case KV_ROPE_SCALE_YARN: return "yarn";
    case KV_ROPE_SCALE_DYNAMIC: return "dynamic";
    default: return "none";
    }
}

static const char *style_name(enum kv_rope_style s)
{
    switch (s) {
    case KV_ROPE_NEOX: return "neox";
    case KV_ROPE_GPTJ: return "gptj";
    case KV_ROPE_LEARNED: return "learned";
    default: return "none";
    }
}

/* Parse one "key=value" number of a scaling spec into r. */
static int scaling_param(struct kv_rope *r, const char *key, size_t klen,
                         const char *val, struct kv_err *e)
{
    char *end;
    double v = strtod(val, &end);
    if (end == val || (*end != '\0' && *end != ',') || !isfinite(v))
        return kv_err_set(e, "--rope-scaling: bad number for '%.*s'",
                          (int)klen, key);
#define IS(name) (klen == strlen(name) && strncmp(key, name, klen) == 0)
    if (IS("factor"))
        r->factor = v;
    else if (IS("low_freq_factor") || IS("low"))
        r->low_freq_factor = v;
    else if (IS("high_freq_factor") || IS("high"))
        r->high_freq_factor = v;
    else if (IS("original_max_position_embeddings") || IS("orig")) {
        if (v < 1 || v > 1e15 || v != floor(v))
            return kv_err_set(e, "--rope-scaling: original_max_position_"
                              "embeddings must be a positive integer");
        r->original_max_pos = (int64_t)v;
    } else if (IS("beta_fast"))
        r->beta_fast = v;
    else if (IS("beta_slow"))
        r->beta_slow = v;
    else if (IS("attention_factor") || IS("mscale"))
        r->attention_factor = v;
    else if (IS("truncate")) {
        if (v != 0 && v != 1)
            return kv_err_set(e, "--rope-scaling: truncate must be 0 or 1");
        r->yarn_truncate = (int)v;
    }
    else if (IS("max_position_embeddings") || IS("max_pos")) {
        if (v < 1 || v > 1e15 || v != floor(v))
            return kv_err_set(e, "--rope-scaling: max_position_embeddings "
                              "must be a positive integer");
        r->max_pos = (int64_t)v;
    } else
        return kv_err_set(e, "--rope-scaling: unknown parameter '%.*s'",
                          (int)klen, key);
#undef IS
    return 0;
}

int kv_rope_parse_scaling(const char *s, struct kv_rope *r, struct kv_err *e)
{
    static const struct { const char *name; enum kv_rope_scaling v; } t[] = {
        {"none", KV_ROPE_SCALE_NONE}, {"linear", KV_ROPE_SCALE_LINEAR},
        {"ntk", KV_ROPE_SCALE_NTK}, {"llama3", KV_ROPE_SCALE_LLAMA3},
        {"yarn", KV_ROPE_SCALE_YARN}, {"dynamic", KV_ROPE_SCALE_DYNAMIC},
    };
    struct kv_rope tmp = *r;
    const char *colon = strchr(s, ':');
    size_t nlen = colon ? (size_t)(colon - s) : strlen(s);
    size_t i;

    for (i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strlen(t[i].name) == nlen && strncmp(s, t[i].name, nlen) == 0)
            break;
    if (i == sizeof t / sizeof t[0])
        return kv_err_set(e, "--rope-scaling: expected none, linear, ntk, "
                          "llama3, yarn or dynamic, got '%.*s'", (int)nlen, s);
    tmp.scaling = t[i].v;
    if (colon) {
        const char *p = colon + 1;
        if (*p == '\0')
            return kv_err_set(e, "--rope-scaling: nothing after ':'");
        while (*p) {
            const char *eq = strchr(p, '=');
            const char *comma = strchr(p, ',');
            if (!comma)
                comma = p + strlen(p);
            if (!eq || eq > comma) {
                /* a bare number: the factor */
                if (scaling_param(&tmp, "factor", 6, p, e) < 0)
                    return -1;
            } else if (scaling_param(&tmp, p, (size_t)(eq - p), eq + 1, e) < 0)
                return -1;
            p = *comma ? comma + 1 : comma;
        }
    }
    *r = tmp;
    return 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int kv_rope_parse_nope(const char *s, struct kv_rope *r, struct kv_err *e)
{
    int32_t v[KV_ROPE_MAX_NOPE];
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > (1 << 20) || (*end && *end != ','))
            return kv_err_set(e, "--nope-layers: expected layer numbers "
                              "a,b,.., got '%s'", s);
        if (n == KV_ROPE_MAX_NOPE)
            return kv_err_set(e, "--nope-layers: at most %d layers",
                              KV_ROPE_MAX_NOPE);
        v[n++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_i32);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || v[i] != v[m - 1])
            v[m++] = v[i];
    memcpy(r->nope_layers, v, (size_t)m * sizeof *v);
    r->n_nope = m;
    return 0;
}

int kv_rope_layer_is_nope(const struct kv_rope *r, int64_t layer)
{
    for (int i = 0; i < r->n_nope; i++)
        if (r->nope_layers[i] == layer)
            return 1;
    return 0;
}

int kv_rope_layer_is_local(const struct kv_rope *r, int64_t layer)
{
    for (int i = 0; i < r->n_local; i++)
        if (r->local_layers[i] == layer)
            return 1;
    return 0;
}

void kv_rope_local(const struct kv_rope *r, struct kv_rope *out)
{
    kv_rope_init(out, r->head_dim);
    out->style = r->style;
    out->rotary_dim = r->rotary_dim;
    out->theta = r->local_theta;
}

int kv_rope_dim(const struct kv_rope *r)
{
    return r->rotary_dim > 0 ? r->rotary_dim : r->head_dim;
}

int kv_rope_check(const struct kv_rope *r, struct kv_err *e)
{
    int rd = kv_rope_dim(r);
    if (r->head_dim < 1 || r->head_dim > 65536)
        return kv_err_set(e, "head dim %d out of range [1, 65536]",
                          r->head_dim);
    if (r->n_nope < 0 || r->n_nope > KV_ROPE_MAX_NOPE)
        return kv_err_set(e, "bad NoPE layer count %d", r->n_nope);
    if (r->n_local < 0 || r->n_local > KV_ROPE_MAX_NOPE)
        return kv_err_set(e, "bad local layer count %d", r->n_local);
    if (r->n_local && (!(r->local_theta > 1.0) || !isfinite(r->local_theta)))
        return kv_err_set(e, "the local layers' RoPE base %.17g must be > 1",
                          r->local_theta);
    if (r->style == KV_ROPE_NONE || r->style == KV_ROPE_LEARNED)
        return 0;
    if (rd < 2 || rd > r->head_dim || rd % 2)
        return kv_err_set(e, "--rotary-dim: %d must be even and in [2, "
                          "head dim %d]", rd, r->head_dim);
    if (!(r->theta > 1.0) || !isfinite(r->theta))
        return kv_err_set(e, "--rope-theta: %.17g must be > 1", r->theta);
    if (r->scaling != KV_ROPE_SCALE_NONE &&
        (!(r->factor > 0) || !isfinite(r->factor)))
        return kv_err_set(e, "--rope-scaling: factor %.17g must be > 0",
                          r->factor);
    switch (r->scaling) {
    case KV_ROPE_SCALE_NTK:
        if (rd < 4)
            return kv_err_set(e, "--rope-scaling: ntk needs a rotary dim "
                              ">= 4");
        break;
    case KV_ROPE_SCALE_LLAMA3:
        if (!(r->low_freq_factor > 0) || !(r->high_freq_factor >=
                                           r->low_freq_factor))
            return kv_err_set(e, "--rope-scaling: llama3 needs 0 < "
                              "low_freq_factor <= high_freq_factor");
        if (r->original_max_pos < 1)
            return kv_err_set(e, "--rope-scaling: llama3 needs "
                              "original_max_position_embeddings");
        break;
    case KV_ROPE_SCALE_YARN:
        if (r->original_max_pos < 1)
            return kv_err_set(e, "--rope-scaling: yarn needs "
                              "original_max_position_embeddings");
        if (!(r->beta_fast > 0) || !(r->beta_slow > 0))
            return kv_err_set(e, "--rope-scaling: yarn needs beta_fast "
                              "and beta_slow > 0");
        if (r->attention_factor < 0 || !isfinite(r->attention_factor))
            return kv_err_set(e, "--rope-scaling: attention_factor must "
                              "be >= 0");
        break;
    case KV_ROPE_SCALE_DYNAMIC:
        if (r->max_pos < 1)
            return kv_err_set(e, "--rope-scaling: dynamic needs "
                              "max_position_embeddings=N");
        break;
    default:
        break;
    }
    return 0;
}

int kv_rope_describe(const struct kv_rope *r, char *buf, size_t len)
{
    int n;
    if (r->style == KV_ROPE_NONE || r->style == KV_ROPE_LEARNED) {
        n = snprintf(buf, len, "%s head_dim=%d", style_name(r->style),
                     r->head_dim);
        return n < 0 || (size_t)n >= len ? -1 : n;
    }
    n = snprintf(buf, len, "%s theta=%.17g rotary_dim=%d head_dim=%d "
                 "scaling=%s", style_name(r->style), r->theta,
                 kv_rope_dim(r), r->head_dim, scaling_name(r->scaling));
    if (n < 0 || (size_t)n >= len)
        return -1;
    size_t used = (size_t)n;
    switch (r->scaling) {
    case KV_ROPE_SCALE_LINEAR:
    case KV_ROPE_SCALE_NTK:
        n = snprintf(buf + used, len - used, " factor=%.17g", r->factor);
        break;
    case KV_ROPE_SCALE_LLAMA3:
        n = snprintf(buf + used, len - used, " factor=%.17g "
                     "low_freq_factor=%.17g high_freq_factor=%.17g "
                     "original_max_position_embeddings=%lld", r->factor,
                     r->low_freq_factor, r->high_freq_factor,
                     (long long)r->original_max_pos);
        break;
    case KV_ROPE_SCALE_YARN:
        /* The attention factor only scales the stored K; it is not part
         * of the rotation, so it is not part of the description. */
        n = snprintf(buf + used, len - used, " factor=%.17g "
                     "original_max_position_embeddings=%lld "
                     "beta_fast=%.17g beta_slow=%.17g", r->factor,
                     (long long)r->original_max_pos, r->beta_fast,
                     r->beta_slow);
        /* only when not the default, so that older keys stay as they were */
        if (n >= 0 && (size_t)n < len - used && !r->yarn_truncate) {
            size_t at = used + (size_t)n;
            int m = snprintf(buf + at, len - at, " truncate=0");
            n = m < 0 ? m : n + m;
        }
        break;
    case KV_ROPE_SCALE_DYNAMIC:
        n = snprintf(buf + used, len - used, " factor=%.17g "
                     "max_position_embeddings=%lld", r->factor,
                     (long long)r->max_pos);
        break;
    default:
        n = 0;
        break;
    }
    if (n < 0 || (size_t)n >= len - used)
        return -1;
    used += (size_t)n;
    for (int i = 0; i < r->n_nope; i++) {
        n = snprintf(buf + used, len - used, "%s%d",
                     i == 0 ? " nope_layers=" : ",", r->nope_layers[i]);
        if (n < 0 || (size_t)n >= len - used)
            return -1;
        used += (size_t)n;
    }
    if (r->n_local) {
        n = snprintf(buf + used, len - used, " local_theta=%.17g",
                     r->local_theta);
        if (n < 0 || (size_t)n >= len - used)
            return -1;
        used += (size_t)n;
    }
    for (int i = 0; i < r->n_local; i++) {
        n = snprintf(buf + used, len - used, "%s%d",
                     i == 0 ? " local_layers=" : ",", r->local_layers[i]);
        if (n < 0 || (size_t)n >= len - used)
            return -1;
        used += (size_t)n;
    }
    return (int)used;
}

/* YaRN: the (fractional) plane index at which a wavelength makes
 * n_rot full turns over max_pos positions. */
static double yarn_correction_dim(double n_rot, int dim, double base,
                                  double max_pos)
{
    return (dim * log(max_pos / (n_rot * 2.0 * M_PI))) / (2.0 * log(base));
}

int kv_rope_inv_freq(const struct kv_rope *r, double *inv_freq,
                     struct kv_err *e)
{
    if (kv_rope_check(r, e) < 0)
        return -1;
    if (r->style == KV_ROPE_NONE || r->style == KV_ROPE_LEARNED)
        return 0;
    int dim = kv_rope_dim(r), half = dim / 2;
    double base = r->theta;
    if (r->scaling == KV_ROPE_SCALE_NTK)
        base = r->theta * pow(r->factor, (double)dim / (dim - 2));
    for (int i = 0; i < half; i++)
        inv_freq[i] = 1.0 / pow(base, (2.0 * i) / dim);

    switch (r->scaling) {
    case KV_ROPE_SCALE_LINEAR:
        for (int i = 0; i < half; i++)
            inv_freq[i] /= r->factor;
        break;
    case KV_ROPE_SCALE_LLAMA3: {
        double orig = (double)r->original_max_pos;
        double low_wl = orig / r->low_freq_factor;
        double high_wl = orig / r->high_freq_factor;
        for (int i = 0; i < half; i++) {
            double wl = 2.0 * M_PI / inv_freq[i];
            if (wl < high_wl)
                continue;                       /* high frequency: kept */
            if (wl > low_wl) {
                inv_freq[i] /= r->factor;       /* low frequency: scaled */
                continue;
            }
            if (r->high_freq_factor == r->low_freq_factor)
                continue;   /* no band between (Llama 4: 1 and 1); at
                             * wl == low_wl exactly HF divides 0 by 0 */
            double smooth = (orig / wl - r->low_freq_factor) /
                            (r->high_freq_factor - r->low_freq_factor);
            inv_freq[i] = (1.0 - smooth) * inv_freq[i] / r->factor +
                          smooth * inv_freq[i];
        }
        break;
    }
    case KV_ROPE_SCALE_YARN: {
        double mp = (double)r->original_max_pos;
        double lo = yarn_correction_dim(r->beta_fast, dim, base, mp);
        double hi = yarn_correction_dim(r->beta_slow, dim, base, mp);
        if (r->yarn_truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        if (lo < 0)
            lo = 0;
        if (hi > dim - 1)
            hi = dim - 1;
        if (lo == hi)
            hi += 0.001;
        for (int i = 0; i < half; i++) {
            double ramp = (i - lo) / (hi - lo);
            if (ramp < 0)
                ramp = 0;
            if (ramp > 1)
                ramp = 1;
            double extra = 1.0 - ramp;          /* share of extrapolation */
            double f_ext = inv_freq[i], f_int = inv_freq[i] / r->factor;
            inv_freq[i] = f_int * (1.0 - extra) + f_ext * extra;
        }
        break;
    }
    default:
        /* none, ntk (base already changed), dynamic (default below
         * max_pos, and moves past it are refused) */
        break;
    }
    return 0;
}

double kv_rope_mscale(const struct kv_rope *r)
{
    if (r->style != KV_ROPE_NEOX && r->style != KV_ROPE_GPTJ)
        return 1.0;
    if (r->scaling != KV_ROPE_SCALE_YARN)
        return 1.0;
    if (r->attention_factor > 0)
        return r->attention_factor;
    if (r->factor <= 1.0)
        return 1.0;
    return 0.1 * log(r->factor) + 1.0;
}
