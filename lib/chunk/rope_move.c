/* rope_move.c - the exact move of stored K by a position delta (see
 * rope.h): the delta's rotation and its kernels, the direct rotation in
 * double, and the measure of the move's error.
 *
 * The move is the hot loop of `kvchunk get` and `assemble`: a bf16 K slab
 * is widened to f32, rotated with one f32 multiply per term and one f32
 * subtraction, and rounded once to bf16.  rotate_ref() is the scalar
 * reference; rotate_bf16_avx2() does the same operations in the same order
 * eight lanes at a time, so the two agree bit for bit (C11 mode keeps the
 * compiler from contracting a*b - c*d into an FMA).
 */
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

double kv_rope_angle(int64_t p, double theta)
{
    return remainder((double)p * theta, 2.0 * M_PI);
}

int kv_rope_can_move(const struct kv_rope *r, int64_t p0, int64_t p_new,
                     int64_t n_tokens, int64_t seq_end, struct kv_err *e)
{
    if (r->scaling == KV_ROPE_SCALE_DYNAMIC &&
        (r->style == KV_ROPE_NEOX || r->style == KV_ROPE_GPTJ)) {
        /* checked even when the chunk stays where it was: in a sequence
         * longer than max_pos every frequency differs from the stored K's */
        int64_t end_new = seq_end > 0 ? seq_end : p_new + n_tokens;
        int64_t end_old = p0 + n_tokens;
        if (end_new > r->max_pos || end_old > r->max_pos)
            return kv_err_set(e, "cannot place a chunk computed at position "
                              "%lld at %lld exactly: dynamic NTK changes every "
                              "frequency once the sequence is longer than "
                              "max_position_embeddings %lld (here %lld)",
                              (long long)p0, (long long)p_new,
                              (long long)r->max_pos,
                              (long long)(end_new > end_old ? end_new
                                                            : end_old));
    }
    if (p_new == p0)
        return 0;
    if (r->style == KV_ROPE_LEARNED)
        return kv_err_set(e, "cannot move a chunk from position %lld to "
                          "%lld: learned absolute position embeddings make "
                          "every layer's KV depend on the absolute position; "
                          "recompute it", (long long)p0, (long long)p_new);
    return 0;
}

void kv_rope_delta_release(struct kv_rope_delta *d)
{
    free(d->c);
    free(d->s);
    free(d->cd);
    free(d->sd);
    memset(d, 0, sizeof *d);
}

int kv_rope_delta_init(struct kv_rope_delta *d, const struct kv_rope *r,
                       int64_t delta, struct kv_err *e)
{
    struct kv_rope_delta t;
    memset(&t, 0, sizeof t);
    if (kv_rope_check(r, e) < 0)
        return -1;
    t.style = r->style;
    t.head_dim = r->head_dim;
    if (r->style == KV_ROPE_LEARNED && delta != 0)
        return kv_rope_can_move(r, 0, delta, 1, 0, e);
    if (r->style == KV_ROPE_NONE || r->style == KV_ROPE_LEARNED ||
        delta == 0) {
        t.identity = 1;
        *d = t;
        return 0;
    }
    int dim = kv_rope_dim(r), half = dim / 2;
    t.rotary_dim = dim;
    double *f = malloc((size_t)half * sizeof *f);
    t.c = malloc((size_t)dim * sizeof *t.c);
    t.s = malloc((size_t)dim * sizeof *t.s);
    t.cd = malloc((size_t)dim * sizeof *t.cd);
    t.sd = malloc((size_t)dim * sizeof *t.sd);
    if (!f || !t.c || !t.s || !t.cd || !t.sd) {
        free(f);
        kv_rope_delta_release(&t);
        return kv_err_set(e, "out of memory");
    }
    if (kv_rope_inv_freq(r, f, e) < 0) {
        free(f);
        kv_rope_delta_release(&t);
        return -1;
    }
    for (int i = 0; i < half; i++) {
        double a = kv_rope_angle(delta, f[i]);
        double c = cos(a), s = sin(a);
        int j0, j1;             /* the pair: out[j0] = x0 c - x1 s, ... */
        if (r->style == KV_ROPE_NEOX) {
            j0 = i;
            j1 = i + half;
        } else {
            j0 = 2 * i;
            j1 = 2 * i + 1;
        }
        t.cd[j0] = c;
        t.sd[j0] = s;
        t.cd[j1] = c;
        t.sd[j1] = -s;
    }
    for (int j = 0; j < dim; j++) {
        t.c[j] = (float)t.cd[j];
        t.s[j] = (float)t.sd[j];
    }
    free(f);
    *d = t;
    return 0;
}

/* Round an f32 to bf16, nearest even; NaN stays NaN with the quiet bit. */
static inline uint16_t to_bf16(float f)
{
    union { float f; uint32_t u; } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v.u >> 16) | 0x0040u);
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}

static inline int partner(const struct kv_rope_delta *d, int j)
{
    int half = d->rotary_dim / 2;
    if (d->style == KV_ROPE_NEOX)
        return j < half ? j + half : j - half;
    return j ^ 1;
}

/* The scalar reference: one head vector at a time through a scratch copy
 * of its rotated part, so that src == dst works.  f32 storage rotates in
 * double, f16/bf16 in f32; one rounding either way. */
void kv_rope_rotate_ref(const struct kv_rope_delta *d, enum kv_dtype dtype,
                        const void *src, void *dst, size_t n_vecs)
{
    size_t D = (size_t)d->head_dim, es = kv_dtype_size(dtype);
    if (d->identity) {
        if (src != dst)
            memmove(dst, src, n_vecs * D * es);
        return;
    }
    int r = d->rotary_dim;
    double stack[1024], *buf = stack, *heap = NULL;
    if (r > 1024) {
        /* absurd head dims only; on failure leave dst as it is */
        heap = malloc((size_t)r * sizeof *heap);
        if (!heap)
            return;
        buf = heap;
    }
    for (size_t v = 0; v < n_vecs; v++) {
        const unsigned char *in = (const unsigned char *)src + v * D * es;
        unsigned char *out = (unsigned char *)dst + v * D * es;
        if (dtype == KV_F32) {
            const float *x = (const float *)(const void *)in;
            float *y = (float *)(void *)out;
            for (int j = 0; j < r; j++)
                buf[j] = x[j];
            for (int j = 0; j < r; j++)
                y[j] = (float)(buf[j] * d->cd[j] -
                               buf[partner(d, j)] * d->sd[j]);
        } else {
            const uint16_t *x = (const uint16_t *)(const void *)in;
            uint16_t *y = (uint16_t *)(void *)out;
            for (int j = 0; j < r; j++)
                buf[j] = dtype == KV_BF16 ? kv_bf16_to_f32(x[j])
                                          : kv_f16_to_f32(x[j]);
            for (int j = 0; j < r; j++) {
                float t = (float)buf[j] * d->c[j];
                float u = (float)buf[partner(d, j)] * d->s[j];
                float o = t - u;
                y[j] = dtype == KV_BF16 ? to_bf16(o) : kv_f32_to_f16(o);
            }
        }
        if (src != dst && (size_t)r < D)
            memcpy(out + (size_t)r * es, in + (size_t)r * es,
                   (D - (size_t)r) * es);
    }
    free(heap);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1

__attribute__((target("avx2")))
static inline __m256 load_bf16x8(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    return _mm256_castsi256_ps(w);
}

__attribute__((target("avx2")))
static inline void store_bf16x8(uint16_t *p, __m256 f)
{
    const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    __m256i u = _mm256_castps_si256(f);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
    __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
    __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
    __m256i r = _mm256_blendv_epi8(rounded, nanv, isnan);
    /* pack 8 x u32 (each <= 0xffff) to 8 x u16 in order */
    __m256i packed = _mm256_packus_epi32(r, r);
    packed = _mm256_permute4x64_epi64(packed, 0x08);
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_castsi256_si128(packed));
}

/* bf16 rotation, eight lanes: same operations as the reference.  Needs
 * r a multiple of 16 (NeoX halves in whole vectors) or of 8 (GPT-J). */
__attribute__((target("avx2")))
static void rotate_bf16_avx2(const struct kv_rope_delta *d,
                             const uint16_t *src, uint16_t *dst,
                             size_t n_vecs)
{
    size_t D = (size_t)d->head_dim;
    int r = d->rotary_dim, half = r / 2;
    for (size_t v = 0; v < n_vecs; v++) {
        const uint16_t *x = src + v * D;
        uint16_t *y = dst + v * D;
        if (d->style == KV_ROPE_NEOX) {
            for (int j = 0; j < half; j += 8) {
                __m256 x1 = load_bf16x8(x + j), x2 = load_bf16x8(x + j + half);
                __m256 c1 = _mm256_loadu_ps(d->c + j);
                __m256 s1 = _mm256_loadu_ps(d->s + j);
                __m256 c2 = _mm256_loadu_ps(d->c + j + half);
                __m256 s2 = _mm256_loadu_ps(d->s + j + half);
                __m256 o1 = _mm256_sub_ps(_mm256_mul_ps(x1, c1),
                                          _mm256_mul_ps(x2, s1));
                __m256 o2 = _mm256_sub_ps(_mm256_mul_ps(x2, c2),
                                          _mm256_mul_ps(x1, s2));
                store_bf16x8(y + j, o1);
                store_bf16x8(y + j + half, o2);
            }
        } else {
            for (int j = 0; j < r; j += 8) {
                __m256 xv = load_bf16x8(x + j);
                __m256 xs = _mm256_permute_ps(xv, 0xB1);  /* swap pairs */
                __m256 c = _mm256_loadu_ps(d->c + j);
                __m256 s = _mm256_loadu_ps(d->s + j);
                __m256 o = _mm256_sub_ps(_mm256_mul_ps(xv, c),
                                         _mm256_mul_ps(xs, s));
                store_bf16x8(y + j, o);
            }
        }
        if (src != dst && (size_t)r < D)
            memcpy(y + r, x + r, (D - (size_t)r) * 2);
    }
}

__attribute__((target("avx512f,avx512bw")))
static inline __m512 load_bf16x16(const uint16_t *p)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h),
                                                 16));
}

/* Sixteen f32 -> bf16, nearest even, NaN kept quiet (as to_bf16). */
__attribute__((target("avx512f,avx512bw")))
static inline __m256i round_bf16x16(__m512 f)
{
    __m512i u = _mm512_castps_si512(f);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)),
        16);
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    r = _mm512_mask_blend_epi32(nan, r,
                                _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

/* out = x * c - xp * s for sixteen lanes starting at dim j. */
__attribute__((target("avx512f,avx512bw")))
static inline __m256i rot16(const struct kv_rope_delta *d, __m512 x, __m512 xp,
                            int j)
{
    __m512 o = _mm512_sub_ps(_mm512_mul_ps(x, _mm512_loadu_ps(d->c + j)),
                             _mm512_mul_ps(xp, _mm512_loadu_ps(d->s + j)));
    return round_bf16x16(o);
}

/* bf16 rotation, sixteen lanes.  With stream set (dst 64-byte aligned,
 * head vectors a multiple of 64 bytes, NeoX halves a multiple of 32) whole
 * cache lines go out with non-temporal stores: the move of a large chunk
 * into an assembled tensor that will not be read back soon. */
__attribute__((target("avx512f,avx512bw")))
static void rotate_bf16_avx512(const struct kv_rope_delta *d,
                               const uint16_t *src, uint16_t *dst,
                               size_t n_vecs, int stream)
{
    size_t D = (size_t)d->head_dim;
    int r = d->rotary_dim, half = r / 2;
    for (size_t v = 0; v < n_vecs; v++) {
        const uint16_t *x = src + v * D;
        uint16_t *y = dst + v * D;
        /* the hardware prefetcher alone leaves the loads waiting: ask for
         * the vector eight ahead (prefetches never fault) */
        for (size_t q = 0; q < D * 2; q += 64)
            _mm_prefetch((const char *)(x + 8 * D) + q, _MM_HINT_T0);
        if (d->style == KV_ROPE_NEOX && stream) {
            for (int j = 0; j < half; j += 32) {
                __m512 a1 = load_bf16x16(x + j);
                __m512 a2 = load_bf16x16(x + j + half);
                __m512 b1 = load_bf16x16(x + j + 16);
                __m512 b2 = load_bf16x16(x + j + 16 + half);
                __m512i lo = _mm512_inserti64x4(
                    _mm512_castsi256_si512(rot16(d, a1, a2, j)),
                    rot16(d, b1, b2, j + 16), 1);
                __m512i hi = _mm512_inserti64x4(
                    _mm512_castsi256_si512(rot16(d, a2, a1, j + half)),
                    rot16(d, b2, b1, j + 16 + half), 1);
                _mm512_stream_si512((void *)(y + j), lo);
                _mm512_stream_si512((void *)(y + j + half), hi);
            }
        } else if (d->style == KV_ROPE_NEOX) {
            for (int j = 0; j < half; j += 16) {
                __m512 x1 = load_bf16x16(x + j);
                __m512 x2 = load_bf16x16(x + j + half);
                _mm256_storeu_si256((__m256i *)(void *)(y + j),
                                    rot16(d, x1, x2, j));
                _mm256_storeu_si256((__m256i *)(void *)(y + j + half),
                                    rot16(d, x2, x1, j + half));
            }
        } else {
            for (int j = 0; j < r; j += 16) {
                __m512 xv = load_bf16x16(x + j);
                __m512 xs = _mm512_permute_ps(xv, 0xB1);   /* swap pairs */
                _mm256_storeu_si256((__m256i *)(void *)(y + j),
                                    rot16(d, xv, xs, j));
            }
        }
        if (src != dst && (size_t)r < D)
            memcpy(y + r, x + r, (D - (size_t)r) * 2);
    }
    if (stream)
        _mm_sfence();
}

/* Copy n bytes with non-temporal stores, whole cache lines (dst 64-byte
 * aligned, n a multiple of 64): a large slab that will not be read back
 * soon, without the read-for-ownership of ordinary stores. */
__attribute__((target("avx512f")))
static void copy_stream_avx512(void *dst, const void *src, size_t n)
{
    const char *s = src;
    char *d = dst;
    for (size_t i = 0; i < n; i += 64)
        _mm512_stream_si512((void *)(d + i),
                            _mm512_loadu_si512((const void *)(s + i)));
    _mm_sfence();
}
#endif

static int force_level;

void kv_rope_force_scalar(int on)
{
    force_level = on;
}

/* Pick the fastest path that applies; stream asks for non-temporal stores
 * where the AVX-512 path can use them. */
static void rotate_impl(const struct kv_rope_delta *d, enum kv_dtype dtype,
                        const void *src, void *dst, size_t n_vecs, int stream)
{
#ifdef HAVE_AVX2_PATH
    int r = d->rotary_dim;
    if (!d->identity && dtype == KV_BF16 && force_level != 1) {
        if (force_level == 0 && kv_isa_has(KV_ISA_AVX512) &&
            (d->style == KV_ROPE_NEOX ? r % 32 == 0 : r % 16 == 0)) {
            int st = stream && d->style == KV_ROPE_NEOX && r % 64 == 0 &&
                     ((uintptr_t)dst % 64) == 0 && d->head_dim % 32 == 0 &&
                     src != dst && r == d->head_dim;
            rotate_bf16_avx512(d, src, dst, n_vecs, st);
            return;
        }
        if (kv_isa_has(KV_ISA_AVX2) &&
            (d->style == KV_ROPE_NEOX ? r % 16 == 0 : r % 8 == 0)) {
            /* in place is fine: each vector is read fully before written */
            rotate_bf16_avx2(d, src, dst, n_vecs);
            return;
        }
    }
#else
    (void)stream;
#endif
    kv_rope_rotate_ref(d, dtype, src, dst, n_vecs);
}

void kv_rope_rotate(const struct kv_rope_delta *d, enum kv_dtype dtype,
                    const void *src, void *dst, size_t n_vecs)
{
    rotate_impl(d, dtype, src, dst, n_vecs, 0);
}

/* memcpy, streaming when it pays and the CPU can (see above). */
static void copy_slab(void *dst, const void *src, size_t n, int stream)
{
#ifdef HAVE_AVX2_PATH
    if (stream && force_level == 0 && ((uintptr_t)dst % 64) == 0 &&
        n % 64 == 0 && kv_isa_has(KV_ISA_AVX512) &&
        ((const char *)src + n <= (char *)dst ||
         (char *)dst + n <= (const char *)src)) {
        copy_stream_avx512(dst, src, n);
        return;
    }
#else
    (void)stream;
#endif
    memmove(dst, src, n);
}

void kv_rope_apply_f64(const struct kv_rope *r, const double *inv_freq,
                       int64_t p, double mscale, double *x)
{
    if (r->style != KV_ROPE_NEOX && r->style != KV_ROPE_GPTJ) {
        if (mscale != 1.0)
            for (int j = 0; j < r->head_dim; j++)
                x[j] *= mscale;
        return;
    }
    int dim = kv_rope_dim(r), half = dim / 2;
    for (int i = 0; i < half; i++) {
        double a = kv_rope_angle(p, inv_freq[i]);
        double c = cos(a) * mscale, s = sin(a) * mscale;
        int j0 = r->style == KV_ROPE_NEOX ? i : 2 * i;
        int j1 = r->style == KV_ROPE_NEOX ? i + half : 2 * i + 1;
        double x0 = x[j0], x1 = x[j1];
        x[j0] = x0 * c - x1 * s;
        x[j1] = x1 * c + x0 * s;
    }
}

int kv_rope_move_kv(const struct kv_rope *r, const struct kv_rope_chunk *c,
                    int64_t delta, const void *src, void *dst,
                    int64_t dst_stride_t, int64_t dst_off, struct kv_err *e)
{
    size_t es = kv_dtype_size(c->dtype), vec, slab_src, row_dst, chk;
    if (c->dtype != KV_BF16 && c->dtype != KV_F16 && c->dtype != KV_F32)
        return kv_err_set(e, "RoPE moves need f16, bf16 or f32 KV, not %s",
                          kv_dtype_name(c->dtype));
    if (c->head_dim != r->head_dim)
        return kv_err_set(e, "KV head dim %lld differs from the RoPE head "
                          "dim %d", (long long)c->head_dim, r->head_dim);
    if (c->n_layers < 0 || c->n_tokens < 0 || c->n_kv_heads < 0 ||
        dst_off < 0 || dst_stride_t < dst_off + c->n_tokens)
        return kv_err_set(e, "chunk of %lld tokens does not fit at offset "
                          "%lld of %lld", (long long)c->n_tokens,
                          (long long)dst_off, (long long)dst_stride_t);
    if (kv_size_mul((size_t)c->n_kv_heads, (size_t)c->head_dim, &vec) ||
        kv_size_mul(vec, es, &vec) ||
        kv_size_mul(vec, (size_t)c->n_tokens, &slab_src) ||
        kv_size_mul(vec, (size_t)dst_stride_t, &row_dst) ||
        kv_size_mul(row_dst, 2 * (size_t)c->n_layers, &chk))
        return kv_err_set(e, "KV size overflows");
    struct kv_rope_delta d, dl;
    struct kv_rope local;
    memset(&dl, 0, sizeof dl);
    if (kv_rope_delta_init(&d, r, delta, e) < 0)
        return -1;
    if (r->n_local) {
        kv_rope_local(r, &local);
        if (kv_rope_delta_init(&dl, &local, delta, e) < 0) {
            kv_rope_delta_release(&d);
            return -1;
        }
    }
    size_t n_vecs = (size_t)c->n_tokens * (size_t)c->n_kv_heads;
    for (int64_t l = 0; l < c->n_layers; l++) {
        const unsigned char *ks = (const unsigned char *)src +
                                  (size_t)(2 * l) * slab_src;
        const unsigned char *vs = ks + slab_src;
        unsigned char *kd = (unsigned char *)dst + (size_t)(2 * l) * row_dst +
                            (size_t)dst_off * vec;
        unsigned char *vd = kd + row_dst;
        /* a large slab goes to memory that will not be read back soon */
        int stream = slab_src >= (1u << 20);
        const struct kv_rope_delta *dd = kv_rope_layer_is_local(r, l) ? &dl
                                                                       : &d;
        if (dd->identity || kv_rope_layer_is_nope(r, l))
            copy_slab(kd, ks, slab_src, stream);
        else
            rotate_impl(dd, c->dtype, ks, kd, n_vecs, stream);
        if (vd != vs)
            copy_slab(vd, vs, slab_src, stream);
    }
    kv_rope_delta_release(&d);
    kv_rope_delta_release(&dl);
    return 0;
}

/* A small generator for kv_rope_measure: uniform in [-1, 1). */
static double measure_rand(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-52 - 1.0;
}

static double load_elem(enum kv_dtype dt, const void *p, size_t i)
{
    switch (dt) {
    case KV_BF16: return kv_bf16_to_f32(((const uint16_t *)p)[i]);
    case KV_F16: return kv_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Round x once to dtype into dst[i] (round to odd in f32 first, so that
 * the second rounding to f16/bf16 is exact rounding of x). */
static void store_elem(enum kv_dtype dt, void *dst, size_t i, double x)
{
    if (dt == KV_F32) {
        ((float *)dst)[i] = (float)x;
        return;
    }
    float f = (float)x;
    if (isfinite(f) && (double)f != x) {
        union { float f; uint32_t u; } v;
        v.f = f;
        if (!(v.u & 1u))
            f = nextafterf(f, (double)f > x ? -INFINITY : INFINITY);
    }
    ((uint16_t *)dst)[i] = dt == KV_BF16 ? to_bf16(f) : kv_f32_to_f16(f);
}

int kv_rope_measure(const struct kv_rope *r, enum kv_dtype dtype, int64_t p0,
                    int64_t p_new, size_t n_vecs, uint64_t seed,
                    struct kv_rope_error *out, struct kv_err *e)
{
    if (dtype != KV_BF16 && dtype != KV_F16 && dtype != KV_F32)
        return kv_err_set(e, "measure: dtype must be f16, bf16 or f32");
    if (p0 < 0 || p_new < 0)
        return kv_err_set(e, "measure: positions must be >= 0");
    if (kv_rope_check(r, e) < 0 ||
        kv_rope_can_move(r, p0, p_new, 1, 0, e) < 0)
        return -1;
    size_t D = (size_t)r->head_dim, es = kv_dtype_size(dtype);
    int rd = kv_rope_dim(r);
    double *freq = malloc(((size_t)rd / 2 + 1) * sizeof *freq);
    double *k = malloc(D * sizeof *k), *x = malloc(D * sizeof *x);
    unsigned char *stored = malloc(D * es), *moved = malloc(D * es);
    struct kv_rope_delta d;
    memset(&d, 0, sizeof d);
    if (!freq || !k || !x || !stored || !moved) {
        kv_err_set(e, "out of memory");
        goto fail;
    }
    if ((r->style == KV_ROPE_NEOX || r->style == KV_ROPE_GPTJ) &&
        kv_rope_inv_freq(r, freq, e) < 0)
        goto fail;
    if (kv_rope_delta_init(&d, r, p_new - p0, e) < 0)
        goto fail;
    double ulp = dtype == KV_BF16 ? 0x1p-7 : dtype == KV_F16 ? 0x1p-10
                                                              : 0x1p-23;
    double mx = 0, ss = 0;
    size_t n = 0;
    uint64_t st = seed;
    for (size_t v = 0; v < n_vecs; v++) {
        double kmax = 0;
        for (size_t j = 0; j < D; j++) {
            k[j] = measure_rand(&st);
            if (fabs(k[j]) > kmax)
                kmax = fabs(k[j]);
        }
        memcpy(x, k, D * sizeof *x);
        kv_rope_apply_f64(r, freq, p0, 1.0, x);
        for (size_t j = 0; j < D; j++)
            store_elem(dtype, stored, j, x[j]);
        kv_rope_rotate(&d, dtype, stored, moved, 1);
        memcpy(x, k, D * sizeof *x);
        kv_rope_apply_f64(r, freq, p_new, 1.0, x);
        for (size_t j = 0; j < D; j++) {
            double err = fabs(load_elem(dtype, moved, j) - x[j]) / kmax;
            if (err > mx)
                mx = err;
            ss += err * err;
            n++;
        }
    }
    out->n = n;
    out->max_rel = mx;
    out->rms_rel = n ? sqrt(ss / (double)n) : 0;
    out->max_ulp = out->max_rel / ulp;
    out->rms_ulp = out->rms_rel / ulp;
    kv_rope_delta_release(&d);
    free(freq); free(k); free(x); free(stored); free(moved);
    return 0;
fail:
    kv_rope_delta_release(&d);
    free(freq); free(k); free(x); free(stored); free(moved);
    return -1;
}
