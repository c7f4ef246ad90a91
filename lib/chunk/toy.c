/* toy.c - the deterministic toy projection: token ids at positions -> K/V
 * and Q with RoPE (definition in toy.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "chunk/toy.h"
#include "core/half.h"

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [-1, 1) from (seed, tag, a, b, c). */
static double unif(uint64_t seed, int tag, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = splitmix64(seed ^ ((uint64_t)tag << 56));
    x = splitmix64(x ^ a);
    x = splitmix64(x ^ b);
    x = splitmix64(x ^ c);
    return (double)(x >> 11) * 0x1p-52 - 1.0;
}

void kv_toy_init(struct kv_toy *m, int64_t n_layers, int64_t n_heads,
                 int64_t n_kv_heads, int64_t head_dim)
{
    memset(m, 0, sizeof *m);
    m->n_layers = n_layers;
    m->n_heads = n_heads;
    m->n_kv_heads = n_kv_heads;
    m->head_dim = head_dim;
    m->embed_dim = 32;
    kv_rope_init(&m->rope, (int)head_dim);
}

int kv_toy_check(const struct kv_toy *m, struct kv_err *e)
{
    if (m->n_layers < 1 || m->n_layers > 4096)
        return kv_err_set(e, "layers %lld out of range [1, 4096]",
                          (long long)m->n_layers);
    if (m->n_kv_heads < 1 || m->n_kv_heads > 4096)
        return kv_err_set(e, "kv heads %lld out of range [1, 4096]",
                          (long long)m->n_kv_heads);
    if (m->n_heads < 1 || m->n_heads > 65536 ||
        m->n_heads % m->n_kv_heads)
        return kv_err_set(e, "query heads %lld must be a positive multiple "
                          "of the kv heads %lld", (long long)m->n_heads,
                          (long long)m->n_kv_heads);
    if (m->head_dim < 1 || m->head_dim > 65536)
        return kv_err_set(e, "head dim %lld out of range [1, 65536]",
                          (long long)m->head_dim);
    if (m->embed_dim < 1 || m->embed_dim > 65536)
        return kv_err_set(e, "embed dim %lld out of range [1, 65536]",
                          (long long)m->embed_dim);
    if (m->rope.head_dim != m->head_dim)
        return kv_err_set(e, "RoPE head dim %d differs from head dim %lld",
                          m->rope.head_dim, (long long)m->head_dim);
    return kv_rope_check(&m->rope, e);
}

/* Round x to f32 with round-to-odd: a second rounding to a narrower format
 * (f16, bf16) then gives the correctly rounded result of x. */
static float round_odd_f32(double x)
{
    float f = (float)x;
    if (isfinite(f) && (double)f != x) {
        union { float f; uint32_t u; } v;
        v.f = f;
        if (!(v.u & 1u))
            f = nextafterf(f, (double)f > x ? -INFINITY : INFINITY);
    }
    return f;
}

void kv_toy_store(enum kv_dtype dtype, void *dst, size_t i, double x)
{
    switch (dtype) {
    case KV_F64:
        ((double *)dst)[i] = x;
        break;
    case KV_F32:
        ((float *)dst)[i] = (float)x;
        break;
    case KV_F16:
        ((uint16_t *)dst)[i] = kv_f32_to_f16_ref(round_odd_f32(x));
        break;
    case KV_BF16:
        ((uint16_t *)dst)[i] = kv_f32_to_bf16_ref(round_odd_f32(x));
        break;
    default:
        break;
    }
}

static int check_dtype(enum kv_dtype dtype, struct kv_err *e)
{
    if (dtype != KV_F16 && dtype != KV_BF16 && dtype != KV_F32 &&
        dtype != KV_F64)
        return kv_err_set(e, "toy projection writes f16, bf16, f32 or f64, "
                          "not %s", kv_dtype_name(dtype));
    return 0;
}

/* The weight (tag, layer) as rows x embed_dim doubles, 1/sqrt(E) folded
 * in; NULL when out of memory.  Caller frees. */
static double *weights(const struct kv_toy *m, int tag, int64_t layer,
                       size_t rows)
{
    size_t E = (size_t)m->embed_dim;
    double scale = 1.0 / sqrt((double)m->embed_dim);
    double *w = malloc(rows * E * sizeof *w);
    if (!w)
        return NULL;
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < E; i++)
            w[r * E + i] = unif(m->seed, tag, (uint64_t)layer, (uint64_t)r,
                                (uint64_t)i) * scale;
    return w;
}

/* y[0..D) = rows [row0, row0 + D) of w times x. */
static void project(const struct kv_toy *m, const double *w, size_t row0,
                    const double *x, double *y)
{
    size_t E = (size_t)m->embed_dim;
    for (int64_t d = 0; d < m->head_dim; d++) {
        const double *wr = w + (row0 + (size_t)d) * E;
        double acc = 0;
        for (size_t i = 0; i < E; i++)
            acc += wr[i] * x[i];
        y[d] = acc;
    }
}

/* Embeddings of n tokens, n x embed_dim; NULL when out of memory. */
static double *embed(const struct kv_toy *m, const int32_t *tokens, size_t n)
{
    size_t E = (size_t)m->embed_dim, sz;
    if (kv_size_mul(n ? n : 1, E * sizeof(double), &sz))
        return NULL;
    double *x = malloc(sz);
    if (!x)
        return NULL;
    for (size_t t = 0; t < n; t++)
        for (size_t i = 0; i < E; i++)
            x[t * E + i] = unif(m->seed, 'E', (uint64_t)(uint32_t)tokens[t],
                                (uint64_t)i, 0);
    return x;
}

int kv_toy_kv(const struct kv_toy *m, const int32_t *tokens,
              const int64_t *positions, size_t n, enum kv_dtype dtype,
              size_t max_bytes, struct kv_tensor *out, struct kv_err *e)
{
    if (kv_toy_check(m, e) < 0 || check_dtype(dtype, e) < 0)
        return -1;
    int64_t shape[5] = {m->n_layers, 2, (int64_t)n, m->n_kv_heads,
                        m->head_dim};
    struct kv_tensor t;
    kv_tensor_init(&t);
    if (kv_tensor_alloc(&t, dtype, 5, shape, max_bytes, e) < 0)
        return -1;
    size_t H = (size_t)m->n_kv_heads, D = (size_t)m->head_dim;
    int rd = kv_rope_dim(&m->rope);
    struct kv_rope local;
    kv_rope_local(&m->rope, &local);
    double *freq = malloc(((size_t)rd + 2) * sizeof *freq);
    double *y = malloc(D * sizeof *y);
    double *x = embed(m, tokens, n);
    if (!freq || !x || !y) {
        free(freq); free(x); free(y);
        kv_tensor_release(&t);
        return kv_err_set(e, "out of memory");
    }
    /* the global frequencies, then the local layers' (when there are any) */
    double *freq_l = freq + rd / 2 + 1;
    if (kv_rope_inv_freq(&m->rope, freq, e) < 0 ||
        (m->rope.n_local && kv_rope_inv_freq(&local, freq_l, e) < 0)) {
        free(freq); free(x); free(y);
        kv_tensor_release(&t);
        return -1;
    }
    double ms = kv_rope_mscale(&m->rope);
    size_t E = (size_t)m->embed_dim;
    for (int64_t l = 0; l < m->n_layers; l++) {
        double *wk = weights(m, 'K', l, H * D), *wv = weights(m, 'V', l, H * D);
        int is_local = kv_rope_layer_is_local(&m->rope, l);
        if (!wk || !wv) {
            free(wk); free(wv); free(freq); free(x); free(y);
            kv_tensor_release(&t);
            return kv_err_set(e, "out of memory");
        }
        for (size_t tk = 0; tk < n; tk++)
            for (size_t h = 0; h < H; h++) {
                size_t kbase = ((((size_t)l * 2 + 0) * n + tk) * H + h) * D;
                size_t vbase = ((((size_t)l * 2 + 1) * n + tk) * H + h) * D;
                project(m, wk, h * D, x + tk * E, y);
                if (is_local)
                    kv_rope_apply_f64(&local, freq_l, positions[tk], 1.0, y);
                else if (!kv_rope_layer_is_nope(&m->rope, l))
                    kv_rope_apply_f64(&m->rope, freq, positions[tk], ms, y);
                for (size_t d = 0; d < D; d++)
                    kv_toy_store(dtype, t.data, kbase + d, y[d]);
                project(m, wv, h * D, x + tk * E, y);
                for (size_t d = 0; d < D; d++)
                    kv_toy_store(dtype, t.data, vbase + d, y[d]);
            }
        free(wk);
        free(wv);
    }
    free(freq); free(x); free(y);
    kv_tensor_move(out, &t);
    return 0;
}

int kv_toy_q(const struct kv_toy *m, const int32_t *tokens,
             const int64_t *positions, size_t n, int64_t layer,
             enum kv_dtype dtype, size_t max_bytes, struct kv_tensor *out,
             struct kv_err *e)
{
    if (kv_toy_check(m, e) < 0 || check_dtype(dtype, e) < 0)
        return -1;
    if (layer < 0 || layer >= m->n_layers)
        return kv_err_set(e, "layer %lld out of range [0, %lld)",
                          (long long)layer, (long long)m->n_layers);
    int64_t shape[3] = {(int64_t)n, m->n_heads, m->head_dim};
    struct kv_tensor t;
    kv_tensor_init(&t);
    if (kv_tensor_alloc(&t, dtype, 3, shape, max_bytes, e) < 0)
        return -1;
    size_t Hq = (size_t)m->n_heads, D = (size_t)m->head_dim;
    size_t E = (size_t)m->embed_dim;
    int rd = kv_rope_dim(&m->rope);
    struct kv_rope local;
    kv_rope_local(&m->rope, &local);
    /* a local layer's queries turn with the local layers' RoPE */
    const struct kv_rope *lr = kv_rope_layer_is_local(&m->rope, layer)
                               ? &local : &m->rope;
    double *freq = malloc(((size_t)rd / 2 + 1) * sizeof *freq);
    double *y = malloc(D * sizeof *y);
    double *x = embed(m, tokens, n);
    double *wq = weights(m, 'Q', layer, Hq * D);
    if (!freq || !x || !y || !wq) {
        free(freq); free(x); free(y); free(wq);
        kv_tensor_release(&t);
        return kv_err_set(e, "out of memory");
    }
    if (kv_rope_inv_freq(lr, freq, e) < 0) {
        free(freq); free(x); free(y); free(wq);
        kv_tensor_release(&t);
        return -1;
    }
    double ms = kv_rope_mscale(lr);
    for (size_t tk = 0; tk < n; tk++)
        for (size_t h = 0; h < Hq; h++) {
            project(m, wq, h * D, x + tk * E, y);
            if (!kv_rope_layer_is_nope(&m->rope, layer))
                kv_rope_apply_f64(lr, freq, positions[tk], ms, y);
            for (size_t d = 0; d < D; d++)
                kv_toy_store(dtype, t.data, (tk * Hq + h) * D + d, y[d]);
        }
    free(freq); free(x); free(y); free(wq);
    kv_tensor_move(out, &t);
    return 0;
}
