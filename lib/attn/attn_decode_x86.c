/* attn_decode_x86.c - decode mode's kernels on x86-64: the Q K^T and P V
 * kernels over all kv heads (attn_decode_kern.h) at AVX-512 and at
 * AVX2+FMA, with the loads of each level (f32, bf16, f16 and the FP8
 * bytes), the prefetch of the keys and values ahead of them, and the
 * callers of the decode-shaped bf16 tiles.  attn_decode.c runs them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_decode.h"
#include "attn/attn_row.h"
#include "attn/bf16.h"
#include "core/fp8.h"

#ifdef ATTN_X86
#include "attn/sum16_x86.h"

/* The decode kernels read the cache a group of keys (every kv head) at a
 * time: Q K^T over a key tile, then P V over it, then the next tile.  A
 * paged cache puts the groups at random places, and the hardware
 * prefetcher stops at every page, so the kernels ask for the keys
 * DEC_AHEAD ahead in that order (the rest of the key tile, then its
 * values, then the next tile's keys), a part with each kv head of the
 * current group, in memory order.  They go to L1 (PREFETCHT0): on a Zen 5
 * (48 KiB L1) that reads the cache at 1.1-1.2 times the rate of asking
 * for L2 (PREFETCHT1), for f32, bf16 and FP8 alike; the addresses of a
 * group's keys take one division, not one per key. */
#define DEC_GROUP 16
#define DEC_AHEAD 32

/* The group of keys j.. j + cnt (cnt <= DEC_GROUP; before jend) of
 * operand o: each key's row of kv head 0, the head stride and the row
 * length. */
struct pf_group {
    const char *tok[DEC_GROUP];
    int64_t nt, len;
    size_t hstep;
};

/* The rows of kv head 0 of keys j.. j + n of request b in operand o,
 * into tok[0..n): kv_row's addresses, one division for the whole run. */
static inline void dec_rows(const struct plan *p, const struct operand *o, int64_t b,
                            int64_t j, int64_t n, const char **tok)
{
    if (!p->paged) {
        for (int64_t t = 0; t < n; t++)
            tok[t] = kv_row(p, o, b, 0, j + t);
        return;
    }
    const int64_t *bt = p->bt + b * p->bt_cols;
    int64_t c = j / p->page, off = j - c * p->page;
    for (int64_t t = 0; t < n; t++) {
        tok[t] = o->base + (size_t)(bt[c] * p->page_stride + off * o->ss) * o->esize;
        if (++off == p->page) {
            off = 0;
            c++;
        }
    }
}

static void pf_group_at(const struct plan *p, const struct operand *o, int64_t b, int64_t j,
                        int64_t cnt, int64_t jend, struct pf_group *g)
{
    g->nt = jend - j < cnt ? jend - j : cnt;
    if (g->nt < 0)
        g->nt = 0;
    dec_rows(p, o, b, j, g->nt, g->tok);
    g->len = (o == &p->k ? p->D : p->Dv) * (int64_t)o->esize;
    g->hstep = (size_t)o->sh * o->esize;
}

/* The group DEC_AHEAD keys after key j0 + jb of a run j0.. j0 + n of Q K^T
 * (qk) or P V: the run's own keys while they last, then for Q K^T its
 * values from j0, for P V the next keys from j0 + n, up to z. */
static void pf_ahead(const struct plan *p, int64_t b, int64_t j0, int64_t jb, int64_t n,
                     int64_t z, int64_t cnt, int qk, struct pf_group *g)
{
    const int64_t ja = jb + DEC_AHEAD;
    if (ja < n)
        pf_group_at(p, qk ? &p->k : &p->v, b, j0 + ja, cnt, j0 + n, g);
    else if (qk)
        pf_group_at(p, &p->v, b, j0 + ja - n, cnt, j0 + n, g);
    else
        pf_group_at(p, &p->k, b, j0 + ja, cnt, z, g);
}

/* Prefetch part `part` of `parts` of the group's rows (key by key, in
 * memory order for a paged or thd cache).  Inlined by force: GCC
 * takes a function that only prefetches for a pure one and drops the
 * call. */
__attribute__((always_inline)) static inline void pf_part(const struct pf_group *g,
                                                          int64_t Hkv, int64_t part,
                                                          int64_t parts)
{
    if ((size_t)g->len == g->hstep) {
        /* a key's rows of all kv heads lie back to back: the part is a
         * range of the group's bytes, key after key */
        const int64_t tb = Hkv * g->len, tot = g->nt * tb;
        const int64_t a = part * tot / parts, z = (part + 1) * tot / parts;
        int64_t t = a / tb, off = a - t * tb;
        for (int64_t x = a; x < z; x += 64) {
            _mm_prefetch(g->tok[t] + off, _MM_HINT_T0);
            if ((off += 64) >= tb) {
                off -= tb;
                t++;
            }
        }
        return;
    }
    const int64_t rows = g->nt * Hkv, r1 = (part + 1) * rows / parts;
    for (int64_t r = part * rows / parts; r < r1; r++) {
        const char *row = g->tok[r / Hkv] + (size_t)(r % Hkv) * g->hstep;
        for (int64_t c = 0; c < g->len; c += 64)
            _mm_prefetch(row + c, _MM_HINT_T0);
    }
}

/* The dtypes of the kernels' keys and values, and the values P V takes at
 * a time. */
enum { DEC_F32, DEC_BF16, DEC_F16, DEC_E4M3, DEC_E5M2 };
#define DEC_PV_KEYS 8

/* The FP8 loads and checks of the kernels at AVX-512 (F, BW, VL). */
#define FP8_TARGET "avx512f,avx512bw,avx512vl"

/* Whether the len bytes from each of tok[0..nt) hold a NaN byte: one whose
 * magnitude (low 7 bits) is above top (e4m3: 0x7f; e5m2: 0x7d-0x7f).  The
 * rows of a group are checked once, so that the loads below need no test
 * of their own unless one is there. */
__attribute__((target(FP8_TARGET)))
static int fp8_nans(const char *const *tok, int64_t nt, int64_t len, int top)
{
    /* the largest magnitude of the rows, compared with top at the end */
    const __m512i mag = _mm512_set1_epi8(0x7f);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0;
    __m128i m2 = _mm_setzero_si128();
    for (int64_t t = 0; t < nt; t++) {
        int64_t c = 0;
        for (; c + 128 <= len; c += 128) {
            m0 = _mm512_max_epu8(m0, _mm512_and_si512(
                _mm512_loadu_si512((const void *)(tok[t] + c)), mag));
            m1 = _mm512_max_epu8(m1, _mm512_and_si512(
                _mm512_loadu_si512((const void *)(tok[t] + c + 64)), mag));
        }
        for (; c < len; c += 16)
            m2 = _mm_max_epu8(m2, _mm_and_si128(
                _mm_loadu_si128((const __m128i *)(const void *)(tok[t] + c)),
                _mm512_castsi512_si128(mag)));
    }
    m0 = _mm512_max_epu8(_mm512_max_epu8(m0, m1), _mm512_castsi128_si512(m2));
    return _mm512_cmpgt_epu8_mask(m0, _mm512_set1_epi8((char)top)) != 0;
}

/* A byte of either format made an f16 pattern of its value (e4m3 / 2^8,
 * e5m2 exactly), widened to f32 by VCVTPH2PS: exact, subnormals included,
 * and unscaled -- the kernels apply the factors once to each score and
 * each output row (attn_dec_fp8_set).  With fix (the group holds NaN
 * bytes), an e4m3 NaN byte, which the pattern would make 480 / 2^8, gives
 * NaN (an e5m2 NaN byte is a NaN pattern already). */
__attribute__((target(FP8_TARGET), always_inline))
static inline __m512 fp8_e4m3_16(const char *ptr, int fix)
{
    /* the byte sign-extended and shifted: magnitude in bits 7-13, the
     * sign in bits 14 and 15; bit 14 cleared */
    __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)ptr));
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16((short)0xbfff));
    __m512 v = _mm512_cvtph_ps(h);
    if (fix)
        v = _mm512_mask_mov_ps(v, _mm256_cmpeq_epi16_mask(
                                      _mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                                      _mm256_set1_epi16(0x3f80)),
                               _mm512_set1_ps(NAN));
    return v;
}

__attribute__((target(FP8_TARGET), always_inline))
static inline __m512 fp8_e5m2_16(const char *ptr)
{
    __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)ptr));
    return _mm512_cvtph_ps(_mm256_slli_epi16(w, 8));
}

/* The scores of 4 rows x 4 keys from their 16 lane vectors (a[4 r + k]),
 * the lanes added at once (kv_sum16_avx512) and scaled; the first cnt
 * keys of each row stored (lds apart). */
__attribute__((target(FP8_TARGET), always_inline))
static inline void dec_sums_512(const __m512 *a, int64_t cnt, float scale, float *dst,
                                int64_t lds)
{
    const __m512 x = _mm512_mul_ps(_mm512_set1_ps(scale), kv_sum16_avx512(a));
    const __mmask8 m = (__mmask8)(cnt >= 4 ? 0xf : (1u << cnt) - 1);
    _mm_mask_storeu_ps(dst, m, _mm512_castps512_ps128(x));
    _mm_mask_storeu_ps(dst + lds, m, _mm512_extractf32x4_ps(x, 1));
    _mm_mask_storeu_ps(dst + 2 * lds, m, _mm512_extractf32x4_ps(x, 2));
    _mm_mask_storeu_ps(dst + 3 * lds, m, _mm512_extractf32x4_ps(x, 3));
}

#define VEC_BITS 512
#include "attn/vec_ops.h"
#define V_F32(ptr, c) LOAD_F32(ptr, c)
#define V_BF16(ptr, c) LOAD_BF16(ptr, c)
#define V_F16(ptr, c) LOAD_F16(ptr, c)
#define V_E4M3(ptr, fix) fp8_e4m3_16(ptr, fix)
#define V_E5M2(ptr) fp8_e5m2_16(ptr)
#define V_NANS(tok, nt, len, top) fp8_nans(tok, nt, len, top)
#define V_SUMS(a, cnt, scale, dst, lds) dec_sums_512(a, cnt, scale, dst, lds)
#define QK_KEYS 4
#define PV_CT 4
#define DK(name) name##_512
#define DK_ATTR __attribute__((target(FP8_TARGET)))
#include "attn/attn_decode_kern.h"
#undef VEC_BITS
#include "attn/vec_ops.h"
#undef V_F32
#undef V_BF16
#undef V_F16
#undef V_E4M3
#undef V_E5M2
#undef V_NANS
#undef V_SUMS
#undef QK_KEYS
#undef PV_CT
#undef DK
#undef DK_ATTR

/* ---- AVX2+FMA (8 lanes) ------------------------------------------------
 * Q K^T keeps 8-lane sums of each (row, key) and adds the lanes of eight
 * keys at once (dec_sum8_avx2): lane t of a score's sum is its products
 * at features t, t + 8, ... in one FMA chain, then the 8 lanes as
 * ((0+1)+(2+3)) + ((4+5)+(6+7)) -- another order than the 16 lanes of
 * AVX-512, inside the same bound (kvattn(1)).  P V adds key by key into
 * each output element in the same FMAs and order as the AVX-512 kernels,
 * 4 rows x 16 columns in registers (16 YMM registers, not 32). */
#define AVX2_TARGET "avx2,fma,f16c"

/* Lane t of the result: the sum of a[t]'s 8 lanes in the order above. */
__attribute__((target(AVX2_TARGET), always_inline))
static inline __m256 dec_sum8_avx2(const __m256 *a)
{
    /* hadd of hadds: lane t (t < 4) holds a[t]'s lanes 0-3 summed as
     * (0+1)+(2+3), lane 4 + t its lanes 4-7 */
    __m256 x = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 y = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20),
                         _mm256_permute2f128_ps(x, y, 0x31));
}

/* fp8_nans with AVX2: a byte's magnitude m is above top when
 * max(m, top + 1) == m (unsigned). */
__attribute__((target(AVX2_TARGET)))
static int fp8_nans_avx2(const char *const *tok, int64_t nt, int64_t len, int top)
{
    const __m256i mag = _mm256_set1_epi8(0x7f), lim = _mm256_set1_epi8((char)(top + 1));
    __m256i any = _mm256_setzero_si256();
    for (int64_t t = 0; t < nt; t++) {
        int64_t c = 0;
        for (; c + 32 <= len; c += 32) {
            __m256i m = _mm256_and_si256(
                _mm256_loadu_si256((const __m256i *)(const void *)(tok[t] + c)), mag);
            any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_max_epu8(m, lim), m));
        }
        for (; c < len; c += 16) {
            __m128i m = _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(tok[t] + c)),
                                      _mm256_castsi256_si128(mag));
            __m128i hit = _mm_cmpeq_epi8(_mm_max_epu8(m, _mm256_castsi256_si128(lim)), m);
            any = _mm256_or_si256(any, _mm256_set_m128i(_mm_setzero_si128(), hit));
        }
    }
    return !_mm256_testz_si256(any, any);
}

/* 8 bytes as fp8_e4m3_16 and fp8_e5m2_16 convert 16: the same f16
 * patterns, the same values. */
__attribute__((target(AVX2_TARGET), always_inline))
static inline __m256 fp8_e4m3_8(const char *ptr, int fix)
{
    __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)ptr));
    __m128i h = _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16((short)0xbfff));
    __m256 v = _mm256_cvtph_ps(h);
    if (fix) {
        __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)),
                                      _mm_set1_epi16(0x3f80));
        v = _mm256_blendv_ps(v, _mm256_set1_ps(NAN),
                             _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan)));
    }
    return v;
}

__attribute__((target(AVX2_TARGET), always_inline))
static inline __m256 fp8_e5m2_8(const char *ptr)
{
    __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)ptr));
    return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
}

/* The scores of 4 rows x 2 keys from their 8 lane vectors (a[2 r + k]),
 * the lanes added at once (dec_sum8_avx2) and scaled; the first cnt keys
 * of each row stored (lds apart). */
__attribute__((target(AVX2_TARGET), always_inline))
static inline void dec_sums_avx2(const __m256 *a, int64_t cnt, float scale, float *dst,
                                 int64_t lds)
{
    float out[8];
    _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_set1_ps(scale), dec_sum8_avx2(a)));
    for (int r = 0; r < 4; r++) {
        dst[r * lds] = out[2 * r];
        if (cnt > 1)
            dst[r * lds + 1] = out[2 * r + 1];
    }
}

#define VEC_BITS 256
#include "attn/vec_ops.h"
#define V_F32(ptr, c) _mm256_loadu_ps((const float *)(const void *)(ptr) + (c))
#define V_BF16(ptr, c) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32( \
    _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)(const void *)(ptr) + (c)))), 16))
#define V_F16(ptr, c) _mm256_cvtph_ps(_mm_loadu_si128( \
    (const __m128i *)(const void *)((const uint16_t *)(const void *)(ptr) + (c))))
#define V_E4M3(ptr, fix) fp8_e4m3_8(ptr, fix)
#define V_E5M2(ptr) fp8_e5m2_8(ptr)
#define V_NANS(tok, nt, len, top) fp8_nans_avx2(tok, nt, len, top)
#define V_SUMS(a, cnt, scale, dst, lds) dec_sums_avx2(a, cnt, scale, dst, lds)
#define QK_KEYS 2
#define PV_CT 2
#define DK(name) name##_256
#define DK_ATTR __attribute__((target(AVX2_TARGET)))
#include "attn/attn_decode_kern.h"

#if defined(__clang__) || __GNUC__ >= 10
#define DEC_DP 1
/* Decode Q K^T with VDPBF16PS itself (the route KV_BF16_AVX512): the sums
 * of kv_bf16_dec_qk -- per key and row the same instructions over the
 * pairs in the same order, the 16 lanes added by kv_sum16_avx512, times
 * the scale -- with 4 rows x 4 keys in registers (dec_sums_512), so that
 * each query vector is loaded once for 4 keys. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
static void dec_qk_dp(const struct plan *p, int64_t b, int64_t j0, int64_t n,
                      const uint32_t *qp, float *s, int64_t lds)
{
    const int64_t Hkv = p->Hkv, Gp = p->Gp, kp = p->D / 2;
    const size_t hstep = (size_t)p->k.sh * p->k.esize;
    const char *tok[DEC_GROUP];
    for (int64_t jb = 0; jb < n; jb += DEC_GROUP) {
        const int64_t nb = n - jb < DEC_GROUP ? n - jb : DEC_GROUP;
        dec_rows(p, &p->k, b, j0 + jb, nb, tok);
        struct pf_group pf;
        pf_ahead(p, b, j0, jb, n, j0 + n, DEC_GROUP, 1, &pf);
        for (int64_t g = 0; g < Hkv; g++) {
            pf_part(&pf, Hkv, g, Hkv);
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {
                const uint32_t *q0 = qp + r0 * kp;
                for (int64_t t = 0; t < nb; t += 4) {
                    const uint32_t *kr[4];
                    __m512 a[16];
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++)
                        kr[k] = (const uint32_t *)(const void *)(tok[t + k < nb ? t + k : t] +
                                                                 g * hstep);
#pragma GCC unroll 16
                    for (int i = 0; i < 16; i++)
                        a[i] = _mm512_setzero_ps();
                    for (int64_t c = 0; c < kp; c += 16) {
                        __m512i x[4];
#pragma GCC unroll 4
                        for (int r = 0; r < 4; r++)
                            x[r] = _mm512_loadu_si512((const void *)(q0 + r * kp + c));
#pragma GCC unroll 4
                        for (int k = 0; k < 4; k++) {
                            __m512i kv = _mm512_loadu_si512((const void *)(kr[k] + c));
#pragma GCC unroll 4
                            for (int r = 0; r < 4; r++)
                                a[4 * r + k] = _mm512_dpbf16_ps(a[4 * r + k], (__m512bh)x[r],
                                                                (__m512bh)kv);
                        }
                    }
                    dec_sums_512(a, nb - t, p->scale, s + r0 * lds + jb + t, lds);
                }
            }
        }
    }
}
#endif

/* Decode Q K^T on the bf16 tiles (kv_bf16_dec_qk): qp holds the query
 * rows as bf16 pairs, D / 2 words a row; keys 16 at a time, each kv head's
 * rows four at a time.  Keys j0.. j0 + n. */
void attn_dec_qk_tiles(const struct plan *p, int64_t b, int64_t j0, int64_t n,
                       const uint32_t *qp, float *s, int64_t lds)
{
#ifdef DEC_DP
    if (p->bf16 == KV_BF16_AVX512) {
        dec_qk_dp(p, b, j0, n, qp, s, lds);
        return;
    }
#endif
    const int64_t Hkv = p->Hkv, Gp = p->Gp, kp = p->D / 2;
    const size_t hstep = (size_t)p->k.sh * p->k.esize;
    const uint16_t *kr[DEC_GROUP];
    const char *row0[DEC_GROUP];
    float out[64];
    for (int64_t jb = 0; jb < n; jb += DEC_GROUP) {
        const int nb = (int)(n - jb < DEC_GROUP ? n - jb : DEC_GROUP);
        struct pf_group pf;
        pf_ahead(p, b, j0, jb, n, j0 + n, DEC_GROUP, 1, &pf);
        dec_rows(p, &p->k, b, j0 + jb, nb, row0);
        for (int64_t g = 0; g < Hkv; g++) {
            pf_part(&pf, Hkv, g, Hkv);
            for (int t = 0; t < nb; t++)
                kr[t] = (const uint16_t *)(const void *)(row0[t] + g * hstep);
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {
                kv_bf16_dec_qk(p->bf16, qp + r0 * kp, kp, kp, kr, nb, out);
                for (int r = 0; r < 4; r++)
                    for (int t = 0; t < nb; t++)
                        s[(r0 + r) * lds + jb + t] = p->scale * out[16 * r + t];
            }
        }
    }
}

/* Decode P V on the bf16 tiles (kv_bf16_dec_pv): pb holds the rows of P
 * rounded to bf16, ldpb elements apart (an odd n padded with a zero);
 * values 16 at a time, each kv head's rows four at a time, added to o.
 * Values j0.. j0 + n of a work item whose keys end at z. */
void attn_dec_pv_tiles(const struct plan *p, int64_t b, int64_t j0, int64_t n, int64_t z,
                       const uint16_t *pb, int64_t ldpb, float *o)
{
    const int64_t Hkv = p->Hkv, Gp = p->Gp, Dv = p->Dv;
    const size_t hstep = (size_t)p->v.sh * p->v.esize;
    const uint16_t *vr[DEC_GROUP];
    const char *row0[DEC_GROUP];
    const uint32_t *pw = (const uint32_t *)(const void *)pb;
    for (int64_t jb = 0; jb < n; jb += DEC_GROUP) {
        const int nb = (int)(n - jb < DEC_GROUP ? n - jb : DEC_GROUP);
        struct pf_group pf;
        pf_ahead(p, b, j0, jb, n, z, DEC_GROUP, 0, &pf);
        dec_rows(p, &p->v, b, j0 + jb, nb, row0);
        for (int64_t g = 0; g < Hkv; g++) {
            pf_part(&pf, Hkv, g, Hkv);
            for (int t = 0; t < nb; t++)
                vr[t] = (const uint16_t *)(const void *)(row0[t] + g * hstep);
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4)
                kv_bf16_dec_pv(p->bf16, pw + (r0 * ldpb + jb) / 2, ldpb / 2, vr, nb, Dv,
                               o + r0 * Dv, Dv);
        }
    }
}

/* The kernels' dtype of a plan's keys and values. */
static int dec_kind(const struct plan *p)
{
    switch (p->k.dtype) {
    case KV_U8: return p->fp8 - 1 == KV_FP8_E5M2 ? DEC_E5M2 : DEC_E4M3;
    case KV_BF16: return DEC_BF16;
    case KV_F16: return DEC_F16;
    default: return DEC_F32;
    }
}

void attn_dec_qk(const struct plan *p, int64_t b, int64_t j0, int64_t n, const float *qs,
                 float *s, int64_t lds)
{
    if (isa_level() == ISA_AVX2)
        dec_qk_256(p, b, j0, n, qs, s, lds, dec_kind(p));
    else
        dec_qk_512(p, b, j0, n, qs, s, lds, dec_kind(p));
}

void attn_dec_pv(const struct plan *p, int64_t b, int64_t j0, int64_t n, int64_t z,
                 const float *s, int64_t lds, float *o)
{
    if (isa_level() == ISA_AVX2)
        dec_pv_256(p, b, j0, n, z, s, lds, o, dec_kind(p));
    else
        dec_pv_512(p, b, j0, n, z, s, lds, o, dec_kind(p));
}

/* The first keys of a work item (a.. z of request b), which no group
 * before them asks for. */
void attn_dec_prefetch_first(const struct plan *p, int64_t b, int64_t a, int64_t z)
{
    for (int64_t j = a; j < a + DEC_AHEAD && j < z; j += DEC_GROUP) {
        struct pf_group pf;
        pf_group_at(p, &p->k, b, j, DEC_GROUP, z, &pf);
        pf_part(&pf, p->Hkv, 0, 1);
    }
}
#endif
