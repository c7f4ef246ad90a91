/* bf16_kern.h - the bf16 tile kernel, one source for every route.
 *
 * Included by bf16.c once per route and kernel, with these defined: KERN
 * (the function's name; or MMLA alone, see there), KERN_ATTR (its target
 * attribute, may be empty), VF (16 f32 lanes), VP (16 bf16 pairs),
 * VF_ZERO(), VF_LOAD_N(p, n) and
 * VF_STORE_N(p, v, n) (the first n <= 16 lanes, the rest zero / left
 * alone), VF_SCALE(v, s), VP_LOAD(p) (16 packed words), VP_BCAST(w) (one
 * pair in every lane) and VF_DOT(acc, a, b) (the instruction or its
 * model); for the decode tiles also DQK with VF_SUM16 and DPV with
 * VP_ZIP_LO, VP_ZIP_HI and VP_ZERO.  See bf16.h for the operations and
 * the layouts.
 *
 * MR rows of A against one panel of 32 columns: 2 MR accumulators, two
 * panel loads and MR broadcasts per pair (a last panel of at most 16
 * columns: its first half only).  Rows past M reuse row 0 and are not
 * stored.
 */
#ifndef KERN_MR
#define KERN_MR 8
#endif

#ifdef KERN
KERN_ATTR
static void KERN(int64_t M, int64_t N, int64_t kp, const uint16_t *A, int64_t lda,
                 const uint32_t *Bp, int64_t ps, float *C, int64_t ldc, float alpha,
                 int accumulate)
{
    for (int64_t r0 = 0; r0 < M; r0 += KERN_MR) {
        const int64_t mr = M - r0 < KERN_MR ? M - r0 : KERN_MR;
        const uint16_t *a[KERN_MR];
        for (int i = 0; i < KERN_MR; i++)
            a[i] = A + (r0 + (i < mr ? i : 0)) * lda;
        for (int64_t c0 = 0; c0 < N; c0 += 32) {
            const int64_t n0 = N - c0 < 16 ? N - c0 : 16;
            const int64_t n1 = N - c0 - 16 < 0 ? 0 : N - c0 - 16 < 16 ? N - c0 - 16 : 16;
            const uint32_t *bp = Bp + (c0 / 32) * ps;
            VF acc0[KERN_MR], acc1[KERN_MR];
#pragma GCC unroll 8
            for (int i = 0; i < KERN_MR; i++) {
                float *crow = C + (r0 + (i < mr ? i : 0)) * ldc + c0;
                acc0[i] = accumulate ? VF_LOAD_N(crow, n0) : VF_ZERO();
                acc1[i] = accumulate && n1 ? VF_LOAD_N(crow + 16, n1) : VF_ZERO();
            }
            if (n1) {
                for (int64_t k = 0; k < kp; k++, bp += 32) {
                    VP b0 = VP_LOAD(bp), b1 = VP_LOAD(bp + 16);
#pragma GCC unroll 8
                    for (int i = 0; i < KERN_MR; i++) {
                        uint32_t w;
                        memcpy(&w, a[i] + 2 * k, sizeof w);
                        VP x = VP_BCAST(w);
                        acc0[i] = VF_DOT(acc0[i], x, b0);
                        acc1[i] = VF_DOT(acc1[i], x, b1);
                    }
                }
            } else {        /* a last half panel: its first 16 columns */
                for (int64_t k = 0; k < kp; k++, bp += 32) {
                    VP b0 = VP_LOAD(bp);
#pragma GCC unroll 8
                    for (int i = 0; i < KERN_MR; i++) {
                        uint32_t w;
                        memcpy(&w, a[i] + 2 * k, sizeof w);
                        acc0[i] = VF_DOT(acc0[i], VP_BCAST(w), b0);
                    }
                }
            }
#pragma GCC unroll 8
            for (int i = 0; i < KERN_MR; i++) {
                if (i >= mr)
                    break;
                float *crow = C + (r0 + i) * ldc + c0;
                VF_STORE_N(crow, accumulate ? acc0[i] : VF_SCALE(acc0[i], alpha), n0);
                if (n1)
                    VF_STORE_N(crow + 16, accumulate ? acc1[i] : VF_SCALE(acc1[i], alpha), n1);
            }
        }
    }
}

#endif

#ifdef DQK
/* Decode Q K^T (bf16.h: kv_bf16_dec_qk): 4 rows against up to 16 keys,
 * each key's 16 lanes summed by VF_SUM16 (the lanes of 16 vectors).  For
 * a head dim of 128 (64 pairs) the query rows stay in registers over the
 * keys; the sums are the same. */
KERN_ATTR
static void DQK(const uint32_t *q, int64_t ldq, int64_t kp, const uint16_t *const *k,
                int nk, float *out)
{
    VF acc[4][16];
    if (kp == 64) {
        VP qv[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                qv[r][c] = VP_LOAD(q + r * ldq + 16 * c);
        for (int t = 0; t < 16; t++) {
            VF a[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                a[r] = VF_ZERO();
            if (t < nk) {
                const uint32_t *kw = (const uint32_t *)(const void *)k[t];
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    VP kv = VP_LOAD(kw + 16 * c);
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
                        a[r] = VF_DOT(a[r], qv[r][c], kv);
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[r][t] = a[r];
        }
    } else {
        for (int t = 0; t < 16; t++) {
            VF a0 = VF_ZERO(), a1 = a0, a2 = a0, a3 = a0;
            if (t < nk) {
                const uint32_t *kw = (const uint32_t *)(const void *)k[t];
                for (int64_t c = 0; c < kp; c += 16) {
                    VP kv = VP_LOAD(kw + c);
                    a0 = VF_DOT(a0, VP_LOAD(q + c), kv);
                    a1 = VF_DOT(a1, VP_LOAD(q + ldq + c), kv);
                    a2 = VF_DOT(a2, VP_LOAD(q + 2 * ldq + c), kv);
                    a3 = VF_DOT(a3, VP_LOAD(q + 3 * ldq + c), kv);
                }
            }
            acc[0][t] = a0;
            acc[1][t] = a1;
            acc[2][t] = a2;
            acc[3][t] = a3;
        }
    }
    for (int r = 0; r < 4; r++)
        VF_STORE_N(out + 16 * r, VF_SUM16(acc[r]), 16);
}
#undef DQK
#undef VF_SUM16
#endif

#ifdef DPV
/* Decode P V (bf16.h: kv_bf16_dec_pv): 4 rows of P pairs against up to 16
 * value rows, taken two by two; 64 output columns at a time stay in
 * registers over all the pairs.  VP_ZIP_LO / VP_ZIP_HI (a, b) pair the
 * bf16 elements 0..15 / 16..31 of a with the same elements of b, a's in
 * the low half; VP_ZERO() is 32 bf16 zeros. */
KERN_ATTR
static void DPV(const uint32_t *p, int64_t ldp, const uint16_t *const *v, int nv, int64_t dv,
                float *o, int64_t ldo)
{
    const int np = (nv + 1) / 2;
    for (int64_t c0 = 0; c0 < dv; c0 += 64) {
        const int nc = dv - c0 < 64 ? 2 : 4;        /* 16-column vectors */
        VF acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                acc[r][c] = c < nc ? VF_LOAD_N(o + r * ldo + c0 + 16 * c, 16) : VF_ZERO();
        for (int t = 0; t < np; t++) {
            const uint32_t *v0 = (const uint32_t *)(const void *)(v[2 * t] + c0);
            const uint32_t *v1 = 2 * t + 1 < nv
                ? (const uint32_t *)(const void *)(v[2 * t + 1] + c0) : NULL;
            VP z[4];
            VP a = VP_LOAD(v0), b = v1 ? VP_LOAD(v1) : VP_ZERO();
            z[0] = VP_ZIP_LO(a, b);
            z[1] = VP_ZIP_HI(a, b);
            if (nc == 4) {
                a = VP_LOAD(v0 + 16);
                b = v1 ? VP_LOAD(v1 + 16) : VP_ZERO();
                z[2] = VP_ZIP_LO(a, b);
                z[3] = VP_ZIP_HI(a, b);
            } else {
                z[2] = z[3] = VP_ZERO();
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                VP x = VP_BCAST(p[r * ldp + t]);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    if (c < nc)
                        acc[r][c] = VF_DOT(acc[r][c], x, z[c]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++)
                if (c < nc)
                    VF_STORE_N(o + r * ldo + c0 + 16 * c, acc[r][c], 16);
    }
}
#undef DPV
#undef VP_ZIP_LO
#undef VP_ZIP_HI
#undef VP_ZERO
#endif

#ifdef MMLA
/* The tile kernel on BFMMLA-shaped steps (bf16.h: kv_bf16_gemm; kp even):
 * one step adds a 2x4 block of A (two rows, two pairs each) times a 4x2
 * block of B to a 2x2 block of C.  With these defined: VM (a 2x2 f32
 * block: C[r][c] in lane 2r + c), VQ (four words), VM_ZERO(), VQ_LOAD4(p)
 * (words p[0..3]), VQ_LOAD22(p0, p1) (words p0[0..1], p1[0..1]),
 * VQ_ZIP1(x, y) / VQ_ZIP2(x, y) (words x0 y0 x1 y1 / x2 y2 x3 y3),
 * VM_MMLA(acc, a, b) (the instruction or its model), VM_GET(v, i) and
 * VM_SET(f) (lane i; a block from four floats).  4 rows by 8 columns at a
 * time: 8 blocks; rows past M reuse the last row and are not stored. */
KERN_ATTR
static void MMLA(int64_t M, int64_t N, int64_t kp, const uint16_t *A, int64_t lda,
                 const uint32_t *Bp, int64_t ps, float *C, int64_t ldc, float alpha,
                 int accumulate)
{
    for (int64_t r0 = 0; r0 < M; r0 += 4) {
        const uint32_t *a[4];
        for (int i = 0; i < 4; i++)
            a[i] = (const uint32_t *)(const void *)(A + (r0 + i < M ? r0 + i : M - 1) * lda);
        for (int64_t c0 = 0; c0 < N; c0 += 8) {
            const uint32_t *bp = Bp + (c0 / 32) * ps + c0 % 32;
            VM acc[2][4];           /* [row pair][column pair] */
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    for (int e = 0; accumulate && e < 4; e++) {
                        int64_t r = r0 + 2 * h + e / 2, c = c0 + 2 * q + e % 2;
                        if (r < M && c < N)
                            f[e] = C[r * ldc + c];
                    }
                    acc[h][q] = VM_SET(f);
                }
            for (int64_t k = 0; k < kp; k += 2, bp += 64) {
                VQ x0 = VQ_LOAD4(bp), y0 = VQ_LOAD4(bp + 32);
                VQ x1 = VQ_LOAD4(bp + 4), y1 = VQ_LOAD4(bp + 36);
                VQ b[4] = {VQ_ZIP1(x0, y0), VQ_ZIP2(x0, y0), VQ_ZIP1(x1, y1), VQ_ZIP2(x1, y1)};
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    VQ av = VQ_LOAD22(a[2 * h] + k, a[2 * h + 1] + k);
#pragma GCC unroll 4
                    for (int q = 0; q < 4; q++)
                        acc[h][q] = VM_MMLA(acc[h][q], av, b[q]);
                }
            }
            for (int h = 0; h < 2; h++)
                for (int q = 0; q < 4; q++)
                    for (int e = 0; e < 4; e++) {
                        int64_t r = r0 + 2 * h + e / 2, c = c0 + 2 * q + e % 2;
                        if (r < M && c < N)
                            C[r * ldc + c] = accumulate ? VM_GET(acc[h][q], e)
                                                        : VM_GET(acc[h][q], e) * alpha;
                    }
        }
    }
}
#undef MMLA
#undef VM
#undef VQ
#undef VM_ZERO
#undef VQ_LOAD4
#undef VQ_LOAD22
#undef VQ_ZIP1
#undef VQ_ZIP2
#undef VM_MMLA
#undef VM_GET
#undef VM_SET
#endif

#undef KERN
#undef KERN_ATTR
#undef KERN_MR
#undef VF
#undef VP
#undef VF_ZERO
#undef VF_LOAD_N
#undef VF_STORE_N
#undef VF_SCALE
#undef VP_LOAD
#undef VP_BCAST
#undef VF_DOT
