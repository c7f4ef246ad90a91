/* xattn_kern.h - the strided scores of the f32 estimate in register
 * tiles, written once over a few vector operations and included by
 * xattn_kern_x86.c (AVX-512F, AVX2+FMA) and xattn_kern_neon.c (aarch64
 * Advanced SIMD), each of which defines first:
 *
 *   VT, VL          the f32 vector type and its lanes
 *   V_LOAD(p), V_STORE(p, x), V_SET1(x), V_ZERO()
 *   V_FMA(a, b, c)  a * b + c, one rounding
 *   MR, NV          rows and vectors of columns of a register tile
 *                   (NR = NV VL keys: the packed panel's width)
 *   XK(name)        the name of this level's copy
 *   XK_ATTR         its target attribute (or nothing)
 *
 * The keys of one (batch, kv head) are packed by xattn_eng.c in panels of
 * NR reshaped rows, feature-major: panel p holds key row p NR + j's
 * feature f at [f NR + j] (zeros after the last key).  A tile is MR query
 * rows (their f32 rows ldq apart, each sd features) against one panel:
 * every score is one lane of one accumulator, c = fma(q[f], k[f], c) for
 * f = 0, 1, ..., sd - 1 from c = 0, whatever the level, the tile or the
 * panel: the same bits on every level that runs this file and for any
 * -j. */

#define NR (NV * VL)

/* The scores of the m <= MR query rows at q against the keys [j0, j1),
 * into c (ldc apart, column j0 first).  The panels cut at j0 and j1 go
 * through a small buffer; the columns outside [j0, j1) are not stored. */
XK_ATTR void XK(xattn_kern_tile)(const float *q, int64_t ldq, int m, int64_t sd,
                                 const float *kp, int64_t j0, int64_t j1, float *c,
                                 int64_t ldc)
{
    const float *qr[MR];

    for (int r = 0; r < MR; r++)
        qr[r] = q + (r < m ? r : m - 1) * ldq;
    for (int64_t p = j0 / NR; p * NR < j1; p++) {
        const float *b = kp + p * sd * NR;
        int64_t lo = p * NR > j0 ? p * NR : j0, hi = p * NR + NR < j1 ? p * NR + NR : j1;
        VT acc[MR][NV];

#pragma GCC unroll 16
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                acc[r][v] = V_ZERO();
        for (int64_t f = 0; f < sd; f++, b += NR) {
            VT bv[NV];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                bv[v] = V_LOAD(b + v * VL);
#pragma GCC unroll 16
            for (int r = 0; r < MR; r++) {
                VT a = V_SET1(qr[r][f]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    acc[r][v] = V_FMA(a, bv[v], acc[r][v]);
            }
        }
        if (lo == p * NR && hi == p * NR + NR) {
            float *o = c + (p * NR - j0);
            for (int r = 0; r < m; r++)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    V_STORE(o + r * ldc + v * VL, acc[r][v]);
        } else {
            float t[MR * NR];
            for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    V_STORE(t + r * NR + v * VL, acc[r][v]);
            for (int r = 0; r < m; r++)
                memcpy(c + r * ldc + (lo - j0), t + r * NR + (lo - p * NR),
                       (size_t)(hi - lo) * sizeof(float));
        }
    }
}

#undef NR
