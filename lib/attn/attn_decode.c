/* attn_decode.c - decode mode: few queries per request, each item one
 * query of one request against one key chunk for all heads at once, rows
 * padded to Gp per kv head (attn_run_decode_item); the all-heads kernels that
 * read each (paged) key and value row once, Q K^T and P V on the bf16
 * tiles when Q, K and V are bf16; and the merge of the key chunks
 * (attn_merge_decode). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* Decode over all kv heads: for each key, the rows of every kv head
 * (padded to Gp per head) against that key, the keys ahead prefetched as
 * above.  Keys j0.. j0 + n of a work item whose keys end at z. */
#define DECODE_KERNELS(NAME, TARGET, LOAD, NANS)                               \
__attribute__((target(TARGET)))                                                \
static void NAME##_dqk(const struct plan *p, int64_t b, int64_t j0, int64_t n, \
                       const float *qs, float *s, int64_t lds)                 \
{                                                                              \
    const int64_t D = p->D, Hkv = p->Hkv, Gp = p->Gp;                          \
    const size_t hstep = (size_t)p->k.sh * p->k.esize;                         \
    const char *tok[16];                                                       \
    const __m512 lsc = _mm512_set1_ps(p->fp8_ks);                              \
    __m512 acc[4][16];                                                         \
    (void)lsc;                                                                 \
    /* 16 keys at a time: the 16-lane sums of each row kept, then summed     \
     * across lanes for all 16 keys at once (kv_sum16_avx512) */               \
    for (int64_t jb = 0; jb < n; jb += 16) {                                   \
        const int64_t nb = n - jb < 16 ? n - jb : 16;                          \
        dec_rows(p, &p->k, b, j0 + jb, nb, tok);                               \
        const int fix = NANS(tok, nb, Hkv * D);                                \
        (void)fix;                                                             \
        const int64_t ja = jb + DEC_AHEAD;                                     \
        struct pf_group pf;                                                    \
        if (ja < n)                                                            \
            pf_group_at(p, &p->k, b, j0 + ja, 16, j0 + n, &pf);                \
        else                                                                   \
            pf_group_at(p, &p->v, b, j0 + ja - n, 16, j0 + n, &pf);            \
        for (int64_t g = 0; g < Hkv; g++) {                                    \
            pf_part(&pf, Hkv, g, Hkv);                                         \
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {            \
                const float *q0 = qs + r0 * D;                                 \
                /* two keys at a time: each row's Q loaded once for both */    \
                for (int64_t t = 0; t < 16; t += 2) {                          \
                    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;\
                    __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                 \
                    if (t < nb) {                                              \
                        const char *kr = tok[t] + g * hstep;                   \
                        const char *ks = tok[t + 1 < nb ? t + 1 : t] + g * hstep;\
                        for (int64_t c = 0; c < D; c += 16) {                  \
                            __m512 kv = LOAD(kr, c, lsc, fix), kw = LOAD(ks, c, lsc, fix);\
                            __m512 x0 = _mm512_loadu_ps(q0 + c), x1 = _mm512_loadu_ps(q0 + D + c);\
                            __m512 x2 = _mm512_loadu_ps(q0 + 2 * D + c);       \
                            __m512 x3 = _mm512_loadu_ps(q0 + 3 * D + c);       \
                            a0 = _mm512_fmadd_ps(x0, kv, a0);                  \
                            a1 = _mm512_fmadd_ps(x1, kv, a1);                  \
                            a2 = _mm512_fmadd_ps(x2, kv, a2);                  \
                            a3 = _mm512_fmadd_ps(x3, kv, a3);                  \
                            b0 = _mm512_fmadd_ps(x0, kw, b0);                  \
                            b1 = _mm512_fmadd_ps(x1, kw, b1);                  \
                            b2 = _mm512_fmadd_ps(x2, kw, b2);                  \
                            b3 = _mm512_fmadd_ps(x3, kw, b3);                  \
                        }                                                      \
                    }                                                          \
                    acc[0][t] = a0;                                            \
                    acc[1][t] = a1;                                            \
                    acc[2][t] = a2;                                            \
                    acc[3][t] = a3;                                            \
                    acc[0][t + 1] = b0;                                        \
                    acc[1][t + 1] = b1;                                        \
                    acc[2][t + 1] = b2;                                        \
                    acc[3][t + 1] = b3;                                        \
                }                                                              \
                for (int r = 0; r < 4; r++)                                    \
                    _mm512_mask_storeu_ps(s + (r0 + r) * lds + jb,             \
                        (__mmask16)((1u << nb) - 1),                           \
                        _mm512_mul_ps(_mm512_set1_ps(p->scale), kv_sum16_avx512(acc[r]))); \
            }                                                                  \
        }                                                                      \
    }                                                                          \
}                                                                              \
__attribute__((target(TARGET)))                                                \
static void NAME##_dpv(const struct plan *p, int64_t b, int64_t j0, int64_t n, \
                       int64_t z, const float *s, int64_t lds, float *o)       \
{                                                                              \
    const int64_t Dv = p->Dv, Hkv = p->Hkv, Gp = p->Gp;                        \
    const size_t hstep = (size_t)p->v.sh * p->v.esize;                         \
    const char *tok[DEC_PV_KEYS];                                              \
    const __m512 lsc = _mm512_set1_ps(p->fp8_vs);                              \
    (void)lsc;                                                                 \
    /* DEC_PV_KEYS keys at a time (read front to back, then again from L1):  \
     * 4 rows x 64 columns of the output stay in registers over the block,   \
     * each element still summed key by key, the same FMAs in the same      \
     * order as one key at a time */                                          \
    for (int64_t jb = 0; jb < n; jb += DEC_PV_KEYS) {                          \
        const int64_t nb = n - jb < DEC_PV_KEYS ? n - jb : DEC_PV_KEYS;        \
        dec_rows(p, &p->v, b, j0 + jb, nb, tok);                               \
        const int fix = NANS(tok, nb, Hkv * Dv);                               \
        (void)fix;                                                             \
        const int64_t ja = jb + DEC_AHEAD;                                     \
        struct pf_group pf;                                                    \
        if (ja < n)                                                            \
            pf_group_at(p, &p->v, b, j0 + ja, DEC_PV_KEYS, j0 + n, &pf);       \
        else                                                                   \
            pf_group_at(p, &p->k, b, j0 + ja, DEC_PV_KEYS, z, &pf);            \
        for (int64_t g = 0; g < Hkv; g++) {                                    \
            pf_part(&pf, Hkv, g, Hkv);                                         \
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {            \
                const float *s0 = s + r0 * lds + jb;                           \
                float *o0 = o + r0 * Dv;                                       \
                int64_t c0 = 0;                                                \
                for (; c0 + 64 <= Dv; c0 += 64) {                              \
                    __m512 acc[4][4];                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                            \
                            acc[r][c] = _mm512_loadu_ps(o0 + r * Dv + c0 + 16 * c); \
                    for (int64_t t = 0; t < nb; t++) {                         \
                        const char *vr = tok[t] + g * hstep;                   \
                        __m512 x0 = LOAD(vr, c0, lsc, fix), x1 = LOAD(vr, c0 + 16, lsc, fix); \
                        __m512 x2 = LOAD(vr, c0 + 32, lsc, fix), x3 = LOAD(vr, c0 + 48, lsc, fix); \
                        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                          \
                            __m512 pr = _mm512_set1_ps(s0[r * lds + t]);       \
                            acc[r][0] = _mm512_fmadd_ps(pr, x0, acc[r][0]);    \
                            acc[r][1] = _mm512_fmadd_ps(pr, x1, acc[r][1]);    \
                            acc[r][2] = _mm512_fmadd_ps(pr, x2, acc[r][2]);    \
                            acc[r][3] = _mm512_fmadd_ps(pr, x3, acc[r][3]);    \
                        }                                                      \
                    }                                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)                            \
                            _mm512_storeu_ps(o0 + r * Dv + c0 + 16 * c, acc[r][c]); \
                }                                                              \
                for (; c0 < Dv; c0 += 16) {                                    \
                    __m512 acc[4];                                             \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        acc[r] = _mm512_loadu_ps(o0 + r * Dv + c0);            \
                    for (int64_t t = 0; t < nb; t++) {                         \
                        __m512 x = LOAD(tok[t] + g * hstep, c0, lsc, fix);          \
                        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                            \
                            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(s0[r * lds + t]), x, acc[r]); \
                    }                                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++)                                \
                        _mm512_storeu_ps(o0 + r * Dv + c0, acc[r]);            \
                }                                                              \
            }                                                                  \
        }                                                                      \
    }                                                                          \
}

/* The loads of the kernels: 16 elements from element c of a row, as f32
 * (f32, bf16, f16: exact; FP8: the exact value times the factor), and
 * whether the rows of a group of keys hold NaN bytes (never for the
 * float dtypes). */
#define DL_F32(ptr, c, sc, fix) LOAD_F32(ptr, c)
#define DL_BF16(ptr, c, sc, fix) LOAD_BF16(ptr, c)
#define DL_F16(ptr, c, sc, fix) LOAD_F16(ptr, c)
#define DL_E4M3(ptr, c, sc, fix) fp8_e4m3_16((ptr) + (c), sc, fix)
#define DL_E5M2(ptr, c, sc, fix) fp8_e5m2_16((ptr) + (c), sc, fix)
#define NO_NANS(tok, nt, len) 0
#define E4M3_NANS(tok, nt, len) fp8_nans(tok, nt, len, 0x7e)
#define E5M2_NANS(tok, nt, len) fp8_nans(tok, nt, len, 0x7c)
#define FP8_TARGET "avx512f,avx512bw,avx512vl"

/* Whether the len bytes from each of tok[0..nt) hold a NaN byte: one whose
 * magnitude (low 7 bits) is above top (e4m3: 0x7f; e5m2: 0x7d-0x7f).  The
 * rows of a group are checked once, so that the loads below need no test
 * of their own unless one is there. */
__attribute__((target(FP8_TARGET)))
static int fp8_nans(const char *const *tok, int64_t nt, int64_t len, int top)
{
    const __m512i mag = _mm512_set1_epi8(0x7f), lim = _mm512_set1_epi8((char)top);
    __mmask64 any = 0;
    for (int64_t t = 0; t < nt; t++) {
        int64_t c = 0;
        for (; c + 64 <= len; c += 64)
            any |= _mm512_cmpgt_epu8_mask(_mm512_and_si512(
                _mm512_loadu_si512((const void *)(tok[t] + c)), mag), lim);
        for (; c < len; c += 16)
            any |= _mm_cmpgt_epu8_mask(_mm_and_si128(
                _mm_loadu_si128((const __m128i *)(const void *)(tok[t] + c)),
                _mm512_castsi512_si128(mag)), _mm512_castsi512_si128(lim));
    }
    return any != 0;
}

/* A byte of either format made an f16 pattern of its value (e4m3 / 2^8,
 * e5m2 exactly), widened to f32 by VCVTPH2PS (exact, subnormals
 * included) and multiplied by sc: for e4m3 sc = 2^8 scale, exact (the
 * caller checks that it is finite), so each product is the exact value
 * times scale rounded once to f32 -- the number kv_fp8_dequantize gives.
 * With fix (the group holds NaN bytes), a NaN byte gives NaN of its sign
 * with the default payload (0x7fc00000), as NAN * scale does there. */
__attribute__((target(FP8_TARGET), always_inline))
static inline __m512 fp8_nan_fix(__m512 v, __mmask16 nan)
{
    return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)),
        _mm512_set1_epi32(0x7fc00000))));
}

__attribute__((target(FP8_TARGET), always_inline))
static inline __m512 fp8_e4m3_16(const char *ptr, __m512 sc, int fix)
{
    /* the byte sign-extended and shifted: magnitude in bits 7-13, the
     * sign in bits 14 and 15; bit 14 cleared */
    __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)ptr));
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16((short)0xbfff));
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(h), sc);
    if (fix)
        v = fp8_nan_fix(v, _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                                                   _mm256_set1_epi16(0x3f80)));
    return v;
}

__attribute__((target(FP8_TARGET), always_inline))
static inline __m512 fp8_e5m2_16(const char *ptr, __m512 sc, int fix)
{
    __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)ptr));
    __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_slli_epi16(w, 8)), sc);
    if (fix)
        v = fp8_nan_fix(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
    return v;
}

#define DEC_PV_KEYS 8
DECODE_KERNELS(dec_f32, "avx512f", DL_F32, NO_NANS)
DECODE_KERNELS(dec_bf16, "avx512f", DL_BF16, NO_NANS)
DECODE_KERNELS(dec_f16, "avx512f", DL_F16, NO_NANS)
DECODE_KERNELS(dec_e4m3, FP8_TARGET, DL_E4M3, E4M3_NANS)
DECODE_KERNELS(dec_e5m2, FP8_TARGET, DL_E5M2, E5M2_NANS)

/* ---- the same kernels with AVX2+FMA (8 lanes) --------------------------
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

#define DECODE_KERNELS_AVX2(NAME, LOAD, NANS)                                  \
__attribute__((target(AVX2_TARGET)))                                           \
static void NAME##_dqk(const struct plan *p, int64_t b, int64_t j0, int64_t n, \
                       const float *qs, float *s, int64_t lds)                 \
{                                                                              \
    const int64_t D = p->D, Hkv = p->Hkv, Gp = p->Gp;                          \
    const size_t hstep = (size_t)p->k.sh * p->k.esize;                         \
    const char *tok[16];                                                       \
    const __m256 lsc = _mm256_set1_ps(p->fp8_ks);                              \
    __m256 acc[4][16];                                                         \
    float out[16];                                                             \
    (void)lsc;                                                                 \
    for (int64_t jb = 0; jb < n; jb += 16) {                                   \
        const int64_t nb = n - jb < 16 ? n - jb : 16;                          \
        dec_rows(p, &p->k, b, j0 + jb, nb, tok);                               \
        const int fix = NANS(tok, nb, Hkv * D);                                \
        (void)fix;                                                             \
        const int64_t ja = jb + DEC_AHEAD;                                     \
        struct pf_group pf;                                                    \
        if (ja < n)                                                            \
            pf_group_at(p, &p->k, b, j0 + ja, 16, j0 + n, &pf);                \
        else                                                                   \
            pf_group_at(p, &p->v, b, j0 + ja - n, 16, j0 + n, &pf);            \
        for (int64_t g = 0; g < Hkv; g++) {                                    \
            pf_part(&pf, Hkv, g, Hkv);                                         \
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {            \
                const float *q0 = qs + r0 * D;                                 \
                for (int64_t t = 0; t < 16; t += 2) {                          \
                    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;\
                    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                 \
                    if (t < nb) {                                              \
                        const char *kr = tok[t] + g * hstep;                   \
                        const char *ks = tok[t + 1 < nb ? t + 1 : t] + g * hstep;\
                        for (int64_t c = 0; c < D; c += 8) {                   \
                            __m256 kv = LOAD(kr, c, lsc, fix), kw = LOAD(ks, c, lsc, fix);\
                            __m256 x0 = _mm256_loadu_ps(q0 + c), x1 = _mm256_loadu_ps(q0 + D + c);\
                            __m256 x2 = _mm256_loadu_ps(q0 + 2 * D + c);       \
                            __m256 x3 = _mm256_loadu_ps(q0 + 3 * D + c);       \
                            a0 = _mm256_fmadd_ps(x0, kv, a0);                  \
                            a1 = _mm256_fmadd_ps(x1, kv, a1);                  \
                            a2 = _mm256_fmadd_ps(x2, kv, a2);                  \
                            a3 = _mm256_fmadd_ps(x3, kv, a3);                  \
                            b0 = _mm256_fmadd_ps(x0, kw, b0);                  \
                            b1 = _mm256_fmadd_ps(x1, kw, b1);                  \
                            b2 = _mm256_fmadd_ps(x2, kw, b2);                  \
                            b3 = _mm256_fmadd_ps(x3, kw, b3);                  \
                        }                                                      \
                    }                                                          \
                    acc[0][t] = a0;                                            \
                    acc[1][t] = a1;                                            \
                    acc[2][t] = a2;                                            \
                    acc[3][t] = a3;                                            \
                    acc[0][t + 1] = b0;                                        \
                    acc[1][t + 1] = b1;                                        \
                    acc[2][t + 1] = b2;                                        \
                    acc[3][t + 1] = b3;                                        \
                }                                                              \
                const __m256 sc = _mm256_set1_ps(p->scale);                    \
                for (int r = 0; r < 4; r++) {                                  \
                    _mm256_storeu_ps(out, _mm256_mul_ps(sc, dec_sum8_avx2(acc[r])));\
                    _mm256_storeu_ps(out + 8, _mm256_mul_ps(sc, dec_sum8_avx2(acc[r] + 8)));\
                    memcpy(s + (r0 + r) * lds + jb, out, (size_t)nb * sizeof(float));\
                }                                                              \
            }                                                                  \
        }                                                                      \
    }                                                                          \
}                                                                              \
__attribute__((target(AVX2_TARGET)))                                           \
static void NAME##_dpv(const struct plan *p, int64_t b, int64_t j0, int64_t n, \
                       int64_t z, const float *s, int64_t lds, float *o)       \
{                                                                              \
    const int64_t Dv = p->Dv, Hkv = p->Hkv, Gp = p->Gp;                        \
    const size_t hstep = (size_t)p->v.sh * p->v.esize;                         \
    const char *tok[DEC_PV_KEYS];                                              \
    const __m256 lsc = _mm256_set1_ps(p->fp8_vs);                              \
    (void)lsc;                                                                 \
    for (int64_t jb = 0; jb < n; jb += DEC_PV_KEYS) {                          \
        const int64_t nb = n - jb < DEC_PV_KEYS ? n - jb : DEC_PV_KEYS;        \
        dec_rows(p, &p->v, b, j0 + jb, nb, tok);                               \
        const int fix = NANS(tok, nb, Hkv * Dv);                               \
        (void)fix;                                                             \
        const int64_t ja = jb + DEC_AHEAD;                                     \
        struct pf_group pf;                                                    \
        if (ja < n)                                                            \
            pf_group_at(p, &p->v, b, j0 + ja, DEC_PV_KEYS, j0 + n, &pf);       \
        else                                                                   \
            pf_group_at(p, &p->k, b, j0 + ja, DEC_PV_KEYS, z, &pf);            \
        for (int64_t g = 0; g < Hkv; g++) {                                    \
            pf_part(&pf, Hkv, g, Hkv);                                         \
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {            \
                const float *s0 = s + r0 * lds + jb;                           \
                float *o0 = o + r0 * Dv;                                       \
                for (int64_t c0 = 0; c0 < Dv; c0 += 16) {                      \
                    __m256 acc[4][2];                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {      \
                        acc[r][0] = _mm256_loadu_ps(o0 + r * Dv + c0);         \
                        acc[r][1] = _mm256_loadu_ps(o0 + r * Dv + c0 + 8);     \
                    }                                                          \
                    for (int64_t t = 0; t < nb; t++) {                         \
                        const char *vr = tok[t] + g * hstep;                   \
                        __m256 x0 = LOAD(vr, c0, lsc, fix), x1 = LOAD(vr, c0 + 8, lsc, fix); \
                        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {  \
                            __m256 pr = _mm256_set1_ps(s0[r * lds + t]);       \
                            acc[r][0] = _mm256_fmadd_ps(pr, x0, acc[r][0]);    \
                            acc[r][1] = _mm256_fmadd_ps(pr, x1, acc[r][1]);    \
                        }                                                      \
                    }                                                          \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {      \
                        _mm256_storeu_ps(o0 + r * Dv + c0, acc[r][0]);         \
                        _mm256_storeu_ps(o0 + r * Dv + c0 + 8, acc[r][1]);     \
                    }                                                          \
                }                                                              \
            }                                                                  \
        }                                                                      \
    }                                                                          \
}

/* The 8-element loads: as the 16-element ones above. */
#define D8_F32(ptr, c, sc, fix) _mm256_loadu_ps((const float *)(const void *)(ptr) + (c))
#define D8_BF16(ptr, c, sc, fix) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32( \
    _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)(const void *)(ptr) + (c)))), 16))
#define D8_F16(ptr, c, sc, fix) _mm256_cvtph_ps(_mm_loadu_si128( \
    (const __m128i *)(const void *)((const uint16_t *)(const void *)(ptr) + (c))))
#define D8_E4M3(ptr, c, sc, fix) fp8_e4m3_8((ptr) + (c), sc, fix)
#define D8_E5M2(ptr, c, sc, fix) fp8_e5m2_8((ptr) + (c), sc, fix)
#define E4M3_NANS8(tok, nt, len) fp8_nans_avx2(tok, nt, len, 0x7e)
#define E5M2_NANS8(tok, nt, len) fp8_nans_avx2(tok, nt, len, 0x7c)

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

/* fp8_nan_fix with AVX2: the lanes of nan (all ones) become NaN of their
 * sign with the default payload. */
__attribute__((target(AVX2_TARGET), always_inline))
static inline __m256 fp8_nan_fix8(__m256 v, __m256 nan)
{
    __m256 q = _mm256_or_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))),
                            _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
    return _mm256_blendv_ps(v, q, nan);
}

/* 8 bytes as fp8_e4m3_16 and fp8_e5m2_16 convert 16: the same f16
 * patterns, the same products. */
__attribute__((target(AVX2_TARGET), always_inline))
static inline __m256 fp8_e4m3_8(const char *ptr, __m256 sc, int fix)
{
    __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)ptr));
    __m128i h = _mm_and_si128(_mm_slli_epi16(w, 7), _mm_set1_epi16((short)0xbfff));
    __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), sc);
    if (fix) {
        __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)),
                                      _mm_set1_epi16(0x3f80));
        v = fp8_nan_fix8(v, _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan)));
    }
    return v;
}

__attribute__((target(AVX2_TARGET), always_inline))
static inline __m256 fp8_e5m2_8(const char *ptr, __m256 sc, int fix)
{
    __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)ptr));
    __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(_mm_slli_epi16(w, 8)), sc);
    if (fix)
        v = fp8_nan_fix8(v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return v;
}

DECODE_KERNELS_AVX2(d8_f32, D8_F32, NO_NANS)
DECODE_KERNELS_AVX2(d8_bf16, D8_BF16, NO_NANS)
DECODE_KERNELS_AVX2(d8_f16, D8_F16, NO_NANS)
DECODE_KERNELS_AVX2(d8_e4m3, D8_E4M3, E4M3_NANS8)
DECODE_KERNELS_AVX2(d8_e5m2, D8_E5M2, E5M2_NANS8)
#endif

#ifdef ATTN_X86
/* Decode Q K^T on the bf16 tiles (kv_bf16_dec_qk): qp holds the query
 * rows as bf16 pairs, D / 2 words a row; keys 16 at a time, each kv head's
 * rows four at a time.  Keys j0.. j0 + n. */
static void dec_qk_tiles(const struct plan *p, int64_t b, int64_t j0, int64_t n,
                         const uint32_t *qp, float *s, int64_t lds)
{
    const int64_t Hkv = p->Hkv, Gp = p->Gp, kp = p->D / 2;
    const size_t hstep = (size_t)p->k.sh * p->k.esize;
    const uint16_t *kr[DEC_GROUP];
    const char *row0[DEC_GROUP];
    float out[64];
    for (int64_t jb = 0; jb < n; jb += DEC_GROUP) {
        const int nb = (int)(n - jb < DEC_GROUP ? n - jb : DEC_GROUP);
        const int64_t ja = jb + DEC_AHEAD;
        struct pf_group pf;
        if (ja < n)
            pf_group_at(p, &p->k, b, j0 + ja, DEC_GROUP, j0 + n, &pf);
        else
            pf_group_at(p, &p->v, b, j0 + ja - n, DEC_GROUP, j0 + n, &pf);
        for (int t = 0; t < nb; t++)
            row0[t] = kv_row(p, &p->k, b, 0, j0 + jb + t);
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
static void dec_pv_tiles(const struct plan *p, int64_t b, int64_t j0, int64_t n, int64_t z,
                         const uint16_t *pb, int64_t ldpb, float *o)
{
    const int64_t Hkv = p->Hkv, Gp = p->Gp, Dv = p->Dv;
    const size_t hstep = (size_t)p->v.sh * p->v.esize;
    const uint16_t *vr[DEC_GROUP];
    const char *row0[DEC_GROUP];
    const uint32_t *pw = (const uint32_t *)(const void *)pb;
    for (int64_t jb = 0; jb < n; jb += DEC_GROUP) {
        const int nb = (int)(n - jb < DEC_GROUP ? n - jb : DEC_GROUP);
        const int64_t ja = jb + DEC_AHEAD;
        struct pf_group pf;
        if (ja < n)
            pf_group_at(p, &p->v, b, j0 + ja, DEC_GROUP, j0 + n, &pf);
        else
            pf_group_at(p, &p->k, b, j0 + ja, DEC_GROUP, z, &pf);
        for (int t = 0; t < nb; t++)
            row0[t] = kv_row(p, &p->v, b, 0, j0 + jb + t);
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
#endif

/* Decode mode with bf16 Q, K and V: Q K^T on the bf16 tiles (VDPBF16PS or
 * its model); P V too (dec_pv_tiles_ok) unless P is kept f32, then in f32
 * as for the other dtypes. */
int attn_dec_tiles_ok(const struct plan *p)
{
#ifdef ATTN_X86
    return p->k.dtype == KV_BF16 && p->D % 32 == 0 &&
           (p->bf16 == KV_BF16_AVX512 || p->bf16 == KV_BF16_MODEL_X86);
#else
    (void)p;
    return 0;
#endif
}

#ifdef ATTN_X86
static int dec_pv_tiles_ok(const struct plan *p)
{
    return attn_dec_tiles_ok(p) && !p->p_f32 && p->Dv % 32 == 0;
}
#endif

/* Whether a plan may run in decode mode: the kernels above exist at
 * AVX-512 and AVX2 for f32, bf16 and f16 keys and values of 16-multiple
 * head dims (the decode-shaped tiles of attn_tile.c, AVX-512 only). */
int attn_dec_ok(const struct plan *p)
{
#ifdef ATTN_X86
    return !p->scalar && !p->generic && isa_level() >= ISA_AVX2 && p->D % 16 == 0 &&
           p->Dv % 16 == 0 && p->k.dtype == p->v.dtype &&
           (p->k.dtype == KV_F32 || p->k.dtype == KV_BF16 || p->k.dtype == KV_F16);
#else
    (void)p;
    return 0;
#endif
}

/* An FP8 cache in decode mode: the kernels read its bytes where the CPU
 * has AVX-512 (F, BW, VL) or AVX2 (with FMA, F16C) and the factors are finite (2^8 k_scale for
 * e4m3); other plans dequantize the cache first (attn.c). */
int attn_dec_fp8_set(struct plan *p, const struct kv_tensor *cache, int fmt, float ks, float vs)
{
#ifdef ATTN_X86
    const float f = fmt == KV_FP8_E4M3 ? 256.0f : 1.0f;
    if (!p->decode || !p->paged || p->scalar || p->generic || isa_level() == ISA_SCALAR ||
        !isfinite(ks * f) || !isfinite(vs * f))
        return 0;
    const int64_t nblk = cache->shape[1];
    p->fp8 = fmt + 1;
    p->fp8_ks = ks * f;
    p->fp8_vs = vs * f;
    p->k.dtype = p->v.dtype = KV_U8;
    p->k.esize = p->v.esize = 1;
    p->k.base = cache->data;
    p->v.base = (char *)cache->data + (size_t)(nblk * p->page_stride);
    return 1;
#else
    (void)p; (void)cache; (void)fmt; (void)ks; (void)vs;
    return 0;
#endif
}

/* Dispatch the all-heads decode kernels on the key/value dtype. */
static void dec_qk(const struct plan *p, int64_t b, int64_t j0, int64_t n, const float *qs,
                   float *s, int64_t lds)
{
#ifdef ATTN_X86
    if (isa_level() == ISA_AVX2) {
        switch (p->k.dtype) {
        case KV_U8:
            if (p->fp8 - 1 == KV_FP8_E5M2)
                d8_e5m2_dqk(p, b, j0, n, qs, s, lds);
            else
                d8_e4m3_dqk(p, b, j0, n, qs, s, lds);
            break;
        case KV_BF16: d8_bf16_dqk(p, b, j0, n, qs, s, lds); break;
        case KV_F16: d8_f16_dqk(p, b, j0, n, qs, s, lds); break;
        default: d8_f32_dqk(p, b, j0, n, qs, s, lds); break;
        }
        return;
    }
    switch (p->k.dtype) {
    case KV_U8:
        if (p->fp8 - 1 == KV_FP8_E5M2)
            dec_e5m2_dqk(p, b, j0, n, qs, s, lds);
        else
            dec_e4m3_dqk(p, b, j0, n, qs, s, lds);
        break;
    case KV_BF16: dec_bf16_dqk(p, b, j0, n, qs, s, lds); break;
    case KV_F16: dec_f16_dqk(p, b, j0, n, qs, s, lds); break;
    default: dec_f32_dqk(p, b, j0, n, qs, s, lds); break;
    }
#else
    (void)p; (void)b; (void)j0; (void)n; (void)qs; (void)s; (void)lds;
#endif
}

static void dec_pv(const struct plan *p, int64_t b, int64_t j0, int64_t n, int64_t z,
                   const float *s, int64_t lds, float *o)
{
#ifdef ATTN_X86
    if (isa_level() == ISA_AVX2) {
        switch (p->v.dtype) {
        case KV_U8:
            if (p->fp8 - 1 == KV_FP8_E5M2)
                d8_e5m2_dpv(p, b, j0, n, z, s, lds, o);
            else
                d8_e4m3_dpv(p, b, j0, n, z, s, lds, o);
            break;
        case KV_BF16: d8_bf16_dpv(p, b, j0, n, z, s, lds, o); break;
        case KV_F16: d8_f16_dpv(p, b, j0, n, z, s, lds, o); break;
        default: d8_f32_dpv(p, b, j0, n, z, s, lds, o); break;
        }
        return;
    }
    switch (p->v.dtype) {
    case KV_U8:
        if (p->fp8 - 1 == KV_FP8_E5M2)
            dec_e5m2_dpv(p, b, j0, n, z, s, lds, o);
        else
            dec_e4m3_dpv(p, b, j0, n, z, s, lds, o);
        break;
    case KV_BF16: dec_bf16_dpv(p, b, j0, n, z, s, lds, o); break;
    case KV_F16: dec_f16_dpv(p, b, j0, n, z, s, lds, o); break;
    default: dec_f32_dpv(p, b, j0, n, z, s, lds, o); break;
    }
#else
    (void)p; (void)b; (void)j0; (void)n; (void)z; (void)s; (void)lds; (void)o;
#endif
}

/* Decode mode: one item is query i of request b against the key chunk
 * [j0, j1), for every head at once.  Leaves the unnormalised partial
 * (m, l, o) of each head in p->part. */
void attn_run_decode_item(void *ctx, size_t idx)
{
    struct plan *p = ctx;
    struct item *it = &p->items[idx];
    struct scratch *w = scratch_get(p);
    const int64_t b = it->b, i = it->i0, D = p->D, Dv = p->Dv, tk = p->tk;
    const int64_t G = p->G, Gp = p->Gp, R = p->Hkv * Gp;
    int64_t lo, hi;

    memset(w->qs, 0, (size_t)(R * D) * sizeof(float));
    memset(w->o, 0, (size_t)(R * Dv) * sizeof(float));
    memset(w->s, 0, (size_t)(R * tk) * sizeof(float));
    for (int64_t g = 0; g < p->Hkv; g++)
        for (int64_t gg = 0; gg < G; gg++)
            load_f32(w->qs + (g * Gp + gg) * D, q_row(p, b, g * G + gg, i), p->q.dtype, D);
    for (int64_t r = 0; r < R; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0f;
    }
    /* the query rows as bf16 pairs for the bf16 tiles (exact: Q is bf16) */
    uint16_t *qp = attn_dec_tiles_ok(p) ? malloc((size_t)(R * D) * sizeof(uint16_t)) : NULL;
    if (qp)
        kv_f32_to_bf16_n(w->qs, qp, (size_t)(R * D));
    row_bounds(p, b, i, &lo, &hi);
    int64_t a = lo > it->j0 ? lo : it->j0, z = hi < it->j1 ? hi : it->j1;
#ifdef ATTN_X86
    const int pv_tiles = qp && dec_pv_tiles_ok(p);
    /* the first keys, which no group before them asks for */
    for (int64_t j = a; j < a + DEC_AHEAD && j < z; j += DEC_GROUP) {
        struct pf_group pf;
        pf_group_at(p, &p->k, b, j, DEC_GROUP, z, &pf);
        pf_part(&pf, p->Hkv, 0, 1);
    }
#endif
    for (int64_t j0 = a, j1; j0 < z; j0 = j1) {
        j1 = j0 + tk < z ? j0 + tk : z;
        const int64_t n = j1 - j0;
        it->done++;
#ifdef ATTN_X86
        if (qp)
            dec_qk_tiles(p, b, j0, n, (const uint32_t *)(const void *)qp, w->s, tk);
        else
#endif
            dec_qk(p, b, j0, n, w->qs, w->s, tk);
        for (int64_t g = 0; g < p->Hkv; g++)
            for (int64_t gg = 0; gg < G; gg++) {
                int64_t r = g * Gp + gg;
                float *sr = w->s + r * tk;
                row_mask(p, sr, n, b, g * G + gg, i, j0, lo, hi);
                row_softmax(p, sr, n, &w->m[r], &w->l[r], w->o + r * Dv);
            }
#ifdef ATTN_X86
        if (pv_tiles) {
            /* P rounded to bf16, a zero after an odd n (the padding rows
             * of a kv head carry zero scores, never used) */
            for (int64_t r = 0; r < R; r++) {
                kv_f32_to_bf16_n(w->s + r * tk, w->pb + r * p->ldpb, (size_t)n);
                w->pb[r * p->ldpb + n] = 0;
            }
            dec_pv_tiles(p, b, j0, n, z, w->pb, p->ldpb, w->o);
        } else
#endif
            dec_pv(p, b, j0, n, z, w->s, tk, w->o);
    }
    free(qp);
    float *part = p->part + idx * (size_t)(p->Hq * (Dv + 2));
    for (int64_t g = 0; g < p->Hkv; g++)
        for (int64_t gg = 0; gg < G; gg++) {
            int64_t r = g * Gp + gg;
            float *dst = part + (g * G + gg) * (Dv + 2);
            dst[0] = w->m[r];
            dst[1] = w->l[r];
            memcpy(dst + 2, w->o + r * Dv, (size_t)Dv * sizeof(float));
        }
    atomic_store(&w->busy, 0);
    item_done(p);
}

/* Decode mode: merge the key chunks of each (request, query, head) in
 * chunk order and store the rows. */
void attn_merge_decode(struct plan *p, float *acc)
{
    const int64_t Dv = p->Dv, stride = p->Hq * (Dv + 2);
    for (size_t i0 = 0, i1; i0 < p->n_items; i0 = i1) {
        const struct item *first = &p->items[i0];
        for (i1 = i0 + 1; i1 < p->n_items; i1++)
            if (p->items[i1].b != first->b || p->items[i1].i0 != first->i0)
                break;
        for (int64_t h = 0; h < p->Hq; h++) {
            float m = -INFINITY, l = 0.0f;
            for (size_t c = i0; c < i1; c++) {
                float mc = p->part[c * stride + h * (Dv + 2)];
                if (mc > m)
                    m = mc;
            }
            memset(acc, 0, (size_t)Dv * sizeof(float));
            for (size_t c = i0; c < i1; c++) {
                const float *pc = p->part + c * stride + h * (Dv + 2);
                float wgt = m == -INFINITY ? 1.0f : expf(pc[0] - m);
                l += wgt * pc[1];
                for (int64_t d = 0; d < Dv; d++)
                    acc[d] += wgt * pc[2 + d];
            }
            finish_row(p, first->b, h, first->i0, acc, m, l);
        }
    }
}
