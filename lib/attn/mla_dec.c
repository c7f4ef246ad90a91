/* mla_dec.c - the absorbed MLA's bf16 decode tiles (see mla_dec.h).
 *
 * Q K^T with the query rows in the lanes: a key's pair c is one word,
 * broadcast, against pair c of 16 query rows, so the latent rows are read
 * where they lie in the cache, with no packed copy of them; the register
 * tile is 4 x 16 rows by 6 keys (2 x 16 or 16 rows by 8 keys for fewer
 * rows, few enough key rows for their pointers to stay in registers).
 * The scores come out keys by rows and are transposed in 16 x 16 blocks
 * into the rows-by-keys layout of mla.c's softmax.  P V reads the tile's
 * rows again (from the cache, now) and meanwhile fetches the next tile's
 * from memory, a line per step, so that Q K^T finds them there.
 */
#include "attn/mla_dec.h"

#include <string.h>

#include "core/isa.h"

int kv_mla_dec_route(enum kv_bf16_route r)
{
    return r == KV_BF16_AVX512 || r == KV_BF16_MODEL_X86;
}

static inline uint32_t ld32(const uint16_t *p)
{
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

static uint32_t word_at(const uint16_t *p, int64_t c, int64_t kfull)
{
    uint32_t w;
    if (c < kfull) {
        memcpy(&w, p + 2 * c, sizeof w);
        return w;
    }
    return p[2 * c];        /* after an odd d: (p[d - 1], 0) */
}

void kv_mla_dec_pack_q(int64_t n, int64_t d, const uint16_t *q, int64_t ldq, int64_t ldr,
                       uint32_t *qt)
{
    const int64_t kp = (d + 1) / 2, kfull = d / 2;
    for (int64_t c = 0; c < kp; c++) {
        uint32_t *dst = qt + c * ldr;
        for (int64_t r = 0; r < n; r++)
            dst[r] = word_at(q + r * ldq, c, kfull);
        for (int64_t r = n; r < ldr; r++)
            dst[r] = 0;
    }
}

/* The model of the instruction, one score at a time in the lanes' order. */
static void qk_model(int64_t n, int64_t d, const uint32_t *qt, int64_t ldr,
                     const uint16_t *const *k, int64_t nk, float scale, float *s, int64_t lds)
{
    const int64_t kp = (d + 1) / 2, kfull = d / 2;
    for (int64_t t = 0; t < nk; t++)
        for (int64_t r = 0; r < n; r++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < kp; c++)
                acc = kv_bf16_dot2_x86(acc, word_at(k[t], c, kfull), qt[c * ldr + r]);
            s[r * lds + t] = acc * scale;
        }
}

#if defined(__x86_64__) && defined(__GNUC__) && (defined(__clang__) || __GNUC__ >= 10)
#include <immintrin.h>
#define DEC_X86 1
#define DEC_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* One step of a register tile: pair c of the keys (word w(t)) against
 * qv, the pair of the rows. */
#define QK_STEP(RV, NK, WORD)                                                             \
    do {                                                                                  \
        _Pragma("GCC unroll 16")                                                          \
        for (int t = 0; t < NK; t++) {                                                    \
            __m512i b = _mm512_set1_epi32((int)(WORD));                                   \
            _Pragma("GCC unroll 4")                                                       \
            for (int v = 0; v < RV; v++)                                                  \
                acc[v][t] = _mm512_dpbf16_ps(acc[v][t], (__m512bh)qv[v], (__m512bh)b);    \
        }                                                                                 \
    } while (0)

/* QK_STEP for one vector of rows, the key's word broadcast from memory by
 * the instruction itself ({1to16}), which spares the separate broadcast
 * a tile of one vector would need for every instruction. */
typedef uint32_t u32_any __attribute__((aligned(1), may_alias));
#define QK_STEP_MEM(NK, PTR)                                                              \
    do {                                                                                  \
        _Pragma("GCC unroll 16")                                                          \
        for (int t = 0; t < NK; t++)                                                      \
            __asm__("vdpbf16ps %2%{1to16%}, %1, %0"                                       \
                    : "+v"(acc[0][t]) : "v"(qv[0]), "m"(*(const u32_any *)(const void *)(PTR))); \
    } while (0)

/* The rows P V fetches for the next tile, one cache line per step of its
 * loop, so that the misses are spread over the work instead of queueing
 * at once. */
struct pf {
    const uint16_t *const *k;       /* rows k[0 .. n) */
    int64_t n, row, off, bytes;     /* the next line: k[row] + off */
};

static inline void pf_step(struct pf *p)
{
    if (p->row < p->n) {
        __builtin_prefetch((const char *)(const void *)p->k[p->row] + p->off);
        p->off += 64;
        if (p->off > p->bytes) {    /* up to the row's last byte's line */
            p->off = 0;
            p->row++;
        }
    }
}

/* One register tile: RV vectors of 16 rows (qt at their first) against
 * the keys k[0 .. nk) (nk <= NK; the others repeat k[0] and are not
 * stored), st[t * ldr + 16 v + lane] = the unscaled sum over the kfull
 * pairs (and with odd the last, half pair), in order from zero. */
#define QK_TILE(NAME, RV, NK)                                                            \
DEC_ATTR static void NAME(int64_t kfull, int odd, const uint32_t *qt, int64_t ldr,       \
                          const uint16_t *const *k, int nk, float *st)                   \
{                                                                                         \
    __m512 acc[RV][NK];                                                                   \
    __m512i qv[RV];                                                                       \
    const uint16_t *kr[NK];                                                               \
    _Pragma("GCC unroll 16")                                                              \
    for (int t = 0; t < NK; t++) {                                                        \
        kr[t] = k[t < nk ? t : 0];                                                        \
        _Pragma("GCC unroll 4")                                                           \
        for (int v = 0; v < RV; v++)                                                      \
            acc[v][t] = _mm512_setzero_ps();                                              \
    }                                                                                     \
    const uint32_t *q = qt;                                                               \
    for (int64_t c = 0; c < kfull; c++, q += ldr) {                                       \
        _Pragma("GCC unroll 4")                                                           \
        for (int v = 0; v < RV; v++)                                                      \
            qv[v] = _mm512_loadu_si512((const void *)(q + 16 * v));                       \
        if (RV == 1)                                                                      \
            QK_STEP_MEM(NK, kr[t] + 2 * c);                                               \
        else                                                                              \
            QK_STEP(RV, NK, ld32(kr[t] + 2 * c));                                         \
    }                                                                                     \
    if (odd) {                                                                            \
        _Pragma("GCC unroll 4")                                                           \
        for (int v = 0; v < RV; v++)                                                      \
            qv[v] = _mm512_loadu_si512((const void *)(q + 16 * v));                       \
        QK_STEP(RV, NK, kr[t][2 * kfull]);                                                \
    }                                                                                     \
    _Pragma("GCC unroll 16")                                                              \
    for (int t = 0; t < NK; t++)                                                          \
        if (t < nk) {                                                                     \
            _Pragma("GCC unroll 4")                                                       \
            for (int v = 0; v < RV; v++)                                                  \
                _mm512_storeu_ps(st + t * ldr + 16 * v, acc[v][t]);                       \
        }                                                                                 \
}

QK_TILE(qk_tile4, 4, 6)
QK_TILE(qk_tile2, 2, 8)
QK_TILE(qk_tile1, 1, 8)

/* s[r * lds + t] = st[t * ldr + r] * scale for r < n, t < nk: 16 x 16
 * blocks transposed in registers. */
DEC_ATTR static void transpose_out(int64_t n, int64_t nk, const float *st, int64_t ldr,
                                   float scale, float *s, int64_t lds)
{
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t t0 = 0; t0 < nk; t0 += 16) {
        const __mmask16 km = nk - t0 >= 16 ? (__mmask16)0xffff
                                           : (__mmask16)((1u << (nk - t0)) - 1);
        for (int64_t r0 = 0; r0 < n; r0 += 16) {
            __m512 x[16], a[16], b[16];
            for (int i = 0; i < 16; i++)
                x[i] = t0 + i < nk ? _mm512_mul_ps(_mm512_loadu_ps(st + (t0 + i) * ldr + r0), vs)
                                   : _mm512_setzero_ps();
            for (int i = 0; i < 8; i++) {
                a[2 * i] = _mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]);
                a[2 * i + 1] = _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]);
            }
            /* b[4m + c], 128-bit lane L: keys 4m .. 4m + 3 of row 4L + c */
            for (int m = 0; m < 4; m++) {
                __m512d p0 = _mm512_castps_pd(a[4 * m]), p1 = _mm512_castps_pd(a[4 * m + 1]);
                __m512d p2 = _mm512_castps_pd(a[4 * m + 2]), p3 = _mm512_castps_pd(a[4 * m + 3]);
                b[4 * m] = _mm512_castpd_ps(_mm512_unpacklo_pd(p0, p2));
                b[4 * m + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p0, p2));
                b[4 * m + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(p1, p3));
                b[4 * m + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(p1, p3));
            }
            for (int c = 0; c < 4; c++) {
                __m512 y0 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0x88);
                __m512 y1 = _mm512_shuffle_f32x4(b[c], b[4 + c], 0xdd);
                __m512 y2 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0x88);
                __m512 y3 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], 0xdd);
                __m512 o[4] = {_mm512_shuffle_f32x4(y0, y2, 0x88),
                               _mm512_shuffle_f32x4(y1, y3, 0x88),
                               _mm512_shuffle_f32x4(y0, y2, 0xdd),
                               _mm512_shuffle_f32x4(y1, y3, 0xdd)};
                for (int l = 0; l < 4; l++) {
                    int64_t r = r0 + 4 * l + c;
                    if (r < n)
                        _mm512_mask_storeu_ps(s + r * lds + t0, km, o[l]);
                }
            }
        }
    }
}

DEC_ATTR static void qk_avx512(int64_t n, int64_t d, const uint32_t *qt, int64_t ldr,
                               const uint16_t *const *k, int64_t nk, float scale, float *st,
                               float *s, int64_t lds)
{
    const int64_t kfull = d / 2, nv = (n + 15) / 16;
    const int odd = (int)(d & 1);
    for (int64_t v0 = 0; v0 < nv;) {
        const int64_t rv = nv - v0 >= 4 ? 4 : nv - v0 >= 2 ? 2 : 1;
        const int64_t tk = rv == 4 ? 6 : 8;
        const uint32_t *q = qt + 16 * v0;
        for (int64_t t0 = 0; t0 < nk; t0 += tk) {
            int nt = nk - t0 < tk ? (int)(nk - t0) : (int)tk;
            float *o = st + t0 * ldr + 16 * v0;
            if (rv == 4)
                qk_tile4(kfull, odd, q, ldr, k + t0, nt, o);
            else if (rv == 2)
                qk_tile2(kfull, odd, q, ldr, k + t0, nt, o);
            else
                qk_tile1(kfull, odd, q, ldr, k + t0, nt, o);
        }
        v0 += rv;
    }
    transpose_out(n, nk, st, ldr, scale, s, lds);
}

/* P V, 8 rows by 32 value columns (c0 ..) over the keys v[0 .. nk): two
 * keys' rows interleaved by VPUNPCKLWD / VPUNPCKHWD, which pairs columns
 * 8i + 0..3 (low) and 8i + 4..7 (high) of each 128-bit lane; the
 * accumulators hold the columns in that order, put back on the way out.
 * Each output element is one lane that adds the pairs of keys in order,
 * from o's value. */
DEC_ATTR static void pv_tile(const uint32_t *p, int64_t ldp, const uint16_t *const *v, int64_t nk,
                             int64_t c0, float *o, int64_t ldo, struct pf *pfp)
{
    struct pf pf = *pfp;
    const __m512i il = _mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16,
                                        11, 10, 9, 8, 3, 2, 1, 0);
    const __m512i ih = _mm512_set_epi32(31, 30, 29, 28, 23, 22, 21, 20,
                                        15, 14, 13, 12, 7, 6, 5, 4);
    const __m512i i0 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4,
                                        19, 18, 17, 16, 3, 2, 1, 0);
    const __m512i i1 = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12,
                                        27, 26, 25, 24, 11, 10, 9, 8);
    __m512 lo[8], hi[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        __m512 x = _mm512_loadu_ps(o + r * ldo + c0), y = _mm512_loadu_ps(o + r * ldo + c0 + 16);
        lo[r] = _mm512_permutex2var_ps(x, il, y);
        hi[r] = _mm512_permutex2var_ps(x, ih, y);
    }
    const int64_t np = (nk + 1) / 2;
    for (int64_t t = 0; t < np; t++) {
        pf_step(&pf);
        __m512i a = _mm512_loadu_si512((const void *)(v[2 * t] + c0));
        __m512i b = 2 * t + 1 < nk ? _mm512_loadu_si512((const void *)(v[2 * t + 1] + c0))
                                   : _mm512_setzero_si512();
        __m512i zl = _mm512_unpacklo_epi16(a, b), zh = _mm512_unpackhi_epi16(a, b);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m512i x = _mm512_set1_epi32((int)p[r * ldp + t]);
            lo[r] = _mm512_dpbf16_ps(lo[r], (__m512bh)x, (__m512bh)zl);
            hi[r] = _mm512_dpbf16_ps(hi[r], (__m512bh)x, (__m512bh)zh);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(o + r * ldo + c0, _mm512_permutex2var_ps(lo[r], i0, hi[r]));
        _mm512_storeu_ps(o + r * ldo + c0 + 16, _mm512_permutex2var_ps(lo[r], i1, hi[r]));
    }
    *pfp = pf;
}

DEC_ATTR static void pv_avx512(int64_t n, const uint32_t *p, int64_t ldp,
                               const uint16_t *const *v, int64_t nk, int64_t dv, int64_t ahead,
                               int64_t d, float *o, int64_t ldo)
{
    /* the rows of the next tile come in from memory while this one works
     * from the cache: a line every step */
    struct pf pf = {v, nk + ahead, nk, 0, 2 * d};
    for (int64_t c0 = 0; c0 < dv; c0 += 32)
        for (int64_t r0 = 0; r0 < n; r0 += 8)
            pv_tile(p + r0 * ldp, ldp, v, nk, c0, o + r0 * ldo, ldo, &pf);
}
#endif

void kv_mla_dec_qk(enum kv_bf16_route r, int64_t n, int64_t d, const uint32_t *qt,
                   int64_t ldr, const uint16_t *const *k, int64_t nk, float scale, float *st,
                   float *s, int64_t lds)
{
#ifdef DEC_X86
    if (r == KV_BF16_AVX512) {
        qk_avx512(n, d, qt, ldr, k, nk, scale, st, s, lds);
        return;
    }
#else
    (void)st;
#endif
    (void)r;
    qk_model(n, d, qt, ldr, k, nk, scale, s, lds);
}

void kv_mla_dec_pv(enum kv_bf16_route r, int64_t n, const uint32_t *p, int64_t ldp,
                   const uint16_t *const *v, int64_t nk, int64_t dv, int64_t ahead, int64_t d,
                   float *o, int64_t ldo)
{
#ifdef DEC_X86
    if (r == KV_BF16_AVX512) {
        pv_avx512(n, p, ldp, v, nk, dv, ahead, d, o, ldo);
        return;
    }
#else
    (void)ahead;
    (void)d;
#endif
    for (int64_t r0 = 0; r0 < n; r0 += 4)
        for (int64_t t0 = 0; t0 < nk; t0 += 16)
            kv_bf16_dec_pv(r, p + r0 * ldp + t0 / 2, ldp, v + t0, nk - t0 < 16 ? (int)(nk - t0) : 16,
                           dv, o + r0 * ldo, ldo);
}
