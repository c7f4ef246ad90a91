/* bf16.h - bf16 dot-product tiles for attention (Q K^T and P V).
 *
 * The GEMM-shaped work of bf16 attention runs on the CPU's bf16 pair
 * dot-product instruction: each f32 lane adds the products of two bf16
 * pairs, acc += a0*b0 + a1*b1.  Two instructions exist and round
 * differently, so each has a route of its own:
 *
 *   x86-64   VDPBF16PS (AVX512_BF16): per Intel's pseudo-code the odd pair
 *            first, acc' = acc + a1*b1, then acc'' = acc' + a0*b0; the
 *            products are exact, each add rounds to nearest even; bf16
 *            inputs and f32 outputs that are subnormal count as zero
 *            (DAZ, FTZ), whatever MXCSR says; an output is subnormal
 *            when, rounded to 24 bits with the exponent unbounded, it is
 *            below 2^-126 (underflow after rounding, as x86 detects it).
 *   aarch64  BFDOT (FEAT_BF16, FPCR.EBF = 0): per Arm's BFDotAdd the two
 *            products first, p = a0*b0 + a1*b1, then acc + p; both adds
 *            round to odd (overflow gives infinity), subnormal inputs and
 *            results count as zero, a NaN result is the default NaN.
 *
 * Each instruction also has a software model, written from that
 * pseudo-code (kv_bf16_dot2_x86, kv_bf16_dot2_arm), and the tile kernel is
 * compiled from one source against the instruction and against its model
 * (bf16_kern.h), so the tile code is exercised on every CPU and the tests
 * check the instruction against its model bit for bit where it exists.
 *
 * Layouts.  A is row-major bf16, lda elements a row, pairs (A[2k], A[2k+1])
 * along the reduction axis (an odd length ends in a zero).  B is "packed":
 * element (k, c) -- the pair that meets A's pair k in output column c, the
 * even-indexed element in the low 16 bits -- sits at
 *   Bp[(c / 32) * ps + k * 32 + c % 32]        (uint32 words)
 * so 32 columns form a panel of ps words (ps >= 32 * pairs).
 */
#ifndef KV_ATTN_BF16_H
#define KV_ATTN_BF16_H

#include <stddef.h>
#include <stdint.h>

enum kv_bf16_route {
    KV_BF16_NONE = 0,      /* no bf16 tiles: widen to f32 (the f32 path) */
    KV_BF16_AVX512,        /* VDPBF16PS */
    KV_BF16_NEON,          /* BFDOT */
    KV_BF16_MODEL_X86,     /* the software model of VDPBF16PS */
    KV_BF16_MODEL_ARM      /* the software model of BFDOT */
};

/* The instruction route this CPU has and KVTOOLS_ISA allows (isa.h:
 * avx512bf16 or neon-bf16), else KV_BF16_NONE. */
enum kv_bf16_route kv_bf16_route_best(void);

/* r, or KV_BF16_NONE when r is an instruction route (KV_BF16_AVX512,
 * KV_BF16_NEON) this CPU lacks or KVTOOLS_ISA bars: the caller then takes
 * its f32 path.  The models run anywhere. */
enum kv_bf16_route kv_bf16_route_usable(enum kv_bf16_route r);

/* "avx512bf16", "neon-bf16", "model-x86", "model-arm" or "none". */
const char *kv_bf16_route_name(enum kv_bf16_route r);

/* 1 when route r rounds to odd (BFDOT and its model), else 0. */
int kv_bf16_route_odd(enum kv_bf16_route r);

/* One f32 lane of each instruction, from its pseudo-code: acc plus the
 * products of the bf16 pairs a and b (even element in the low half). */
float kv_bf16_dot2_x86(float acc, uint32_t a, uint32_t b);
float kv_bf16_dot2_arm(float acc, uint32_t a, uint32_t b);

/* BFMMLA (FEAT_BF16, FPCR.EBF = 0) on one 128-bit segment, from Arm's
 * pseudo-code (BFMatMulAdd): n holds a 2x4 block of A (row i: words n[2i],
 * n[2i + 1]), m a 4x2 block of B (column j: words m[2j], m[2j + 1]), and
 * acc[2i + j] += row i . column j as two BFDotAdd steps, the first pair
 * then the second: kv_bf16_dot2_arm twice.  So a tile on BFMMLA gives the
 * same bits as one on BFDOT that takes the pairs in the same order. */
void kv_bf16_mmla_arm(float acc[4], const uint32_t n[4], const uint32_t m[4]);

/* C[M x N] (rows ldc apart) = alpha * A Bp over kp pairs when accumulate
 * is 0; C += A Bp (C is the accumulator's start) when it is 1.  A as
 * above (M rows), Bp packed with panel stride ps, read in whole panels (32
 * columns, so a panel past N must be readable).  r must not be NONE; a
 * hardware route the CPU lacks must not be asked for. */
void kv_bf16_gemm(enum kv_bf16_route r, int64_t M, int64_t N, int64_t kp,
                  const uint16_t *A, int64_t lda, const uint32_t *Bp, int64_t ps,
                  float *C, int64_t ldc, float alpha, int accumulate);

/* kv_bf16_gemm on BFMMLA-shaped steps (kp even): on the instruction for
 * KV_BF16_NEON (a CPU that has it), else on its model (kv_bf16_mmla_arm).
 * The route KV_BF16_NEON takes it by itself whenever kp is even. */
void kv_bf16_gemm_mmla(enum kv_bf16_route r, int64_t M, int64_t N, int64_t kp,
                       const uint16_t *A, int64_t lda, const uint32_t *Bp, int64_t ps,
                       float *C, int64_t ldc, float alpha, int accumulate);

/* Decode Q K^T: out[r * 16 + t] (r < 4, t < 16) = Q row r (q + r * ldq:
 * kp pairs as words, kp a multiple of 16) . key t (k[t]: 2 kp bf16), for
 * t < nk, else 0.  Lane l of the instruction accumulates pairs 16c + l
 * over c in order; the 16 lanes are then summed as halves (l + 8),
 * quarters (l + 4), pairs (l + 2) and the last two.  r is
 * KV_BF16_AVX512 or KV_BF16_MODEL_X86 (any other route: the model). */
void kv_bf16_dec_qk(enum kv_bf16_route r, const uint32_t *q, int64_t ldq, int64_t kp,
                    const uint16_t *const *k, int nk, float *out);

/* Decode P V: o[r * ldo + c] (r < 4, c < dv, dv a multiple of 32) +=
 * sum over t < (nv + 1) / 2 of P pair t of row r (p[r * ldp + t]: P of
 * value 2t low, of value 2t + 1 high) . (v[2t][c], v[2t + 1][c]), the
 * value rows v[0..nv) of dv bf16 (nv <= 16; after an odd nv a zero row).
 * Each output element is one lane: it accumulates the pairs in order, on
 * the instruction or its model.  r as for kv_bf16_dec_qk. */
void kv_bf16_dec_pv(enum kv_bf16_route r, const uint32_t *p, int64_t ldp,
                    const uint16_t *const *v, int nv, int64_t dv, float *o, int64_t ldo);

/* Pack one row of B^T: the d elements of row (key) j, for Q K^T: pair k of
 * column j is (row[2k], row[2k+1]). */
void kv_bf16_pack_col(uint32_t *Bp, int64_t ps, int64_t j, const uint16_t *row,
                      int64_t d);

/* Pack one whole panel of B^T (its first word at P, 32 (d + 1) / 2
 * words): column c < n is rows[c], d elements (pair k is (rows[c][2k],
 * rows[c][2k+1]), after an odd d a zero); columns n..31 are zero.  The
 * same words as kv_bf16_pack_col on each row, in one pass that reads and
 * writes whole cache lines. */
void kv_bf16_pack_panel(uint32_t *P, const uint16_t *const *rows, int n, int64_t d);
/* Pack two rows of B (values j and j+1, j even), for P V: pair j/2 of
 * column c is (r0[c], r1[c]); r1 NULL stands for a zero row. */
void kv_bf16_pack_rows(uint32_t *Bp, int64_t ps, int64_t j, const uint16_t *r0,
                       const uint16_t *r1, int64_t n_cols);

#endif
