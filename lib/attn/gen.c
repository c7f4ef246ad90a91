/* gen.c - synthetic attention inputs (see gen.h for the patterns). */
#include "attn/gen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "core/half.h"

static const char *names[] = {"random", "rope", "local", "sink", "stripes", "mix"};

int kv_gen_pattern_parse(const char *s, enum kv_gen_pattern *p, struct kv_err *e)
{
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(s, names[i]) == 0) {
            *p = (enum kv_gen_pattern)i;
            return 0;
        }
    return kv_err_set(e, "unknown pattern '%s' (random, rope, local, sink, stripes, mix)", s);
}

const char *kv_gen_pattern_name(enum kv_gen_pattern p)
{
    return names[p];
}

/* A counter-based generator: a 64-bit mix of (seed, stream, index). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t seed, uint64_t stream, uint64_t i)
{
    uint64_t z = mix64(seed * 0x9e3779b97f4a7c15ull + mix64(stream + 0x632be59bd9b4e019ull)
                       + i * 0xd1b54a32d192ed03ull);
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

/* Standard normal number i of a stream (Box-Muller on a pair of draws). */
static double normal(uint64_t seed, uint64_t stream, uint64_t i)
{
    double u1 = uniform01(seed, stream, 2 * i), u2 = uniform01(seed, stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

enum { ST_Q = 1, ST_K, ST_V, ST_U, ST_S, ST_STRIPE };

struct job {
    const struct kv_gen_spec *s;
    struct kv_tensor *q, *k, *v;
    enum kv_gen_pattern *head_pat;
};

static void put(struct kv_tensor *t, size_t i, double x)
{
    switch (t->dtype) {
    case KV_F32: ((float *)t->data)[i] = (float)x; break;
    case KV_F16: ((uint16_t *)t->data)[i] = kv_f32_to_f16((float)x); break;
    case KV_BF16: ((uint16_t *)t->data)[i] = kv_f32_to_bf16((float)x); break;
    default: ((double *)t->data)[i] = x; break;
    }
}

/* Flat index of (b, h, p, d) in a bhsd or thd tensor of H heads, L rows. */
static size_t at(const struct kv_gen_spec *s, int64_t H, int64_t L, int64_t b,
                 int64_t h, int64_t p, int64_t d)
{
    if (s->thd)
        return (size_t)((((b * L + p) * H) + h) * s->D + d);
    return (size_t)(((b * H + h) * L + p) * s->D + d);
}

/* Rotate the content vector u by position pos into out. */
static void rotate(const double *u, double *out, int64_t D, double pos, double theta)
{
    for (int64_t m = 0; 2 * m + 1 < D; m++) {
        double ang = pos * pow(theta, -2.0 * (double)m / (double)D);
        double c = cos(ang), sn = sin(ang);
        out[2 * m] = u[2 * m] * c - u[2 * m + 1] * sn;
        out[2 * m + 1] = u[2 * m] * sn + u[2 * m + 1] * c;
    }
    if (D % 2)
        out[D - 1] = u[D - 1];
}

/* One work unit: request b, kv head g and its query heads. */
static void gen_unit(void *ctx, size_t idx)
{
    struct job *j = ctx;
    const struct kv_gen_spec *s = j->s;
    int64_t b = (int64_t)idx / s->Hkv, g = (int64_t)idx % s->Hkv, G = s->Hq / s->Hkv;
    int64_t D = s->D;
    double theta = s->theta > 0 ? s->theta : 10000.0;
    int64_t n_sink = s->n_sink > 0 ? s->n_sink : 4;
    double *u = malloc(sizeof(double) * (size_t)D * 3), *su = u + D, *rot = u + 2 * D;
    if (!u)
        return;   /* cannot happen in practice; the caller checked memory */
    /* content and sink directions belong to the kv head, so the query heads
     * of a GQA group see the same structure */
    uint64_t hid = (uint64_t)(b * s->Hkv + g);
    for (int64_t d = 0; d < D; d++) {
        u[d] = normal(s->seed, ST_U, hid * (uint64_t)D + (uint64_t)d);
        su[d] = normal(s->seed, ST_S, hid * (uint64_t)D + (uint64_t)d);
    }
    enum kv_gen_pattern kp = j->head_pat[g];
    double ak = kp == KV_GEN_RANDOM ? 0.0 : kp == KV_GEN_LOCAL ? 1.0 : 0.6;
    double nk = kp == KV_GEN_RANDOM ? 1.0 : kp == KV_GEN_LOCAL ? 0.5 : 0.8;
    int sinks = kp == KV_GEN_SINK || s->pattern == KV_GEN_MIX;
    for (int64_t p = 0; p < s->Lk; p++) {
        rotate(u, rot, D, (double)p, theta);
        double extra = 0.0;
        if (sinks && p < n_sink)
            extra = 1.0;
        if (kp == KV_GEN_STRIPES && uniform01(s->seed, ST_STRIPE, hid * 1000003u + (uint64_t)p) < 1.0 / 32)
            extra = 0.7;
        for (int64_t d = 0; d < D; d++) {
            size_t i = at(s, s->Hkv, s->Lk, b, g, p, d);
            put(j->k, i, ak * rot[d] + nk * normal(s->seed, ST_K, i) + extra * su[d]);
            put(j->v, i, normal(s->seed, ST_V, i));
        }
    }
    for (int64_t hh = 0; hh < G; hh++) {
        int64_t h = g * G + hh;
        for (int64_t p = 0; p < s->Lq; p++) {
            rotate(u, rot, D, (double)(p + s->Lk - s->Lq), theta);
            double qs = (sinks || kp == KV_GEN_STRIPES) ? 0.5 : 0.0;
            for (int64_t d = 0; d < D; d++) {
                size_t i = at(s, s->Hq, s->Lq, b, h, p, d);
                put(j->q, i, ak * rot[d] + nk * normal(s->seed, ST_Q, i) + qs * su[d]);
            }
        }
    }
    free(u);
}

int kv_gen_qkv(const struct kv_gen_spec *s, struct kv_tensor *q,
               struct kv_tensor *k, struct kv_tensor *v, struct kv_err *e)
{
    struct kv_tensor tq, tk, tv;
    int64_t sq[4], sk[4];
    int nd = s->thd ? 3 : 4;

    if (s->B < 1 || s->Hq < 1 || s->Hkv < 1 || s->Lq < 0 || s->Lk < 0 || s->D < 1)
        return kv_err_set(e, "shape (%lld, %lld, %lld, %lld): sizes must be >= 1",
                          (long long)s->B, (long long)s->Hq, (long long)s->Lq,
                          (long long)s->D);
    if (s->Hq % s->Hkv)
        return kv_err_set(e, "query heads %lld are not a multiple of kv heads %lld",
                          (long long)s->Hq, (long long)s->Hkv);
    if (s->dtype != KV_F32 && s->dtype != KV_F16 && s->dtype != KV_BF16 && s->dtype != KV_F64)
        return kv_err_set(e, "dtype %s: expected f32, f16, bf16 or f64", kv_dtype_name(s->dtype));
    if (s->thd) {
        if (s->B > INT64_MAX / (s->Lq + 1) || s->B > INT64_MAX / (s->Lk + 1))
            return kv_err_set(e, "shape too large");
        sq[0] = s->B * s->Lq; sq[1] = s->Hq; sq[2] = s->D;
        sk[0] = s->B * s->Lk; sk[1] = s->Hkv; sk[2] = s->D;
    } else {
        sq[0] = s->B; sq[1] = s->Hq; sq[2] = s->Lq; sq[3] = s->D;
        sk[0] = s->B; sk[1] = s->Hkv; sk[2] = s->Lk; sk[3] = s->D;
    }
    /* Q, K and V together against the limit, before any allocation */
    size_t nq = kv_dtype_size(s->dtype), nk = nq, total;
    for (int i = 0; i < nd; i++)
        if (kv_size_mul(nq, (size_t)sq[i], &nq) || kv_size_mul(nk, (size_t)sk[i], &nk))
            return kv_err_set(e, "shape too large");
    if (kv_size_add(nq, nk, &total) || kv_size_add(total, nk, &total))
        return kv_err_set(e, "shape too large");
    if (s->max_bytes && total > s->max_bytes)
        return kv_err_set(e, "Q, K and V need %zu bytes, more than the limit of %zu "
                          "(--max-mem)", total, s->max_bytes);
    kv_tensor_init(&tq);
    kv_tensor_init(&tk);
    kv_tensor_init(&tv);
    if (kv_tensor_alloc(&tq, s->dtype, nd, sq, s->max_bytes, e) ||
        kv_tensor_alloc(&tk, s->dtype, nd, sk, s->max_bytes, e) ||
        kv_tensor_alloc(&tv, s->dtype, nd, sk, s->max_bytes, e))
        goto fail;
    enum kv_gen_pattern *hp = malloc(sizeof *hp * (size_t)s->Hkv);
    if (!hp) {
        kv_err_set(e, "out of memory");
        goto fail;
    }
    static const enum kv_gen_pattern cycle[4] = {KV_GEN_ROPE, KV_GEN_LOCAL, KV_GEN_SINK,
                                                 KV_GEN_STRIPES};
    for (int64_t g = 0; g < s->Hkv; g++)
        hp[g] = s->pattern == KV_GEN_MIX ? cycle[g % 4] : s->pattern;
    struct job j = {s, &tq, &tk, &tv, hp};
    kv_parallel_for((size_t)(s->B * s->Hkv), s->n_threads, gen_unit, &j);
    free(hp);
    kv_tensor_move(q, &tq);
    kv_tensor_move(k, &tk);
    kv_tensor_move(v, &tv);
    return 0;
fail:
    kv_tensor_release(&tq);
    kv_tensor_release(&tk);
    kv_tensor_release(&tv);
    return -1;
}
