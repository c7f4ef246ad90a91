/* fused_kern.h - the fused attention item, written once over a small set
 * of vector operations and included by fused_x86.c (AVX-512, AVX2+FMA) and
 * fused_neon.c (aarch64 Advanced SIMD), each of which defines first:
 *
 *   VT, VL          the f32 vector type and its lanes
 *   V_LOAD(p), V_STORE(p, x), V_SET1(x), V_ZERO()
 *   V_FMA(a, b, c)  a * b + c, one rounding
 *   V_MUL, V_ADD, V_SUB
 *   V_MAX(a, b)     the larger; b when a is NaN (so that a running max
 *                   passes NaN scores over, as rowmax does)
 *   V_EXP(x)        the vector exp of attn_row.h (or its port), for the
 *                   softmax's arguments x <= 0, -inf or NaN
 *   KT, CT          keys per Q K^T tile, value columns per P V tile
 *   FK(name)        the name of this level's copy
 *   FK_SOFTCAP(s, n, C, inv)  softcap of n contiguous scores
 *
 * One item is M stacked query rows (position-major, as attn_run_item
 * stacks them) against the keys they may see.  The rows are cut into
 * panels of RP = 2 VL rows, one row per vector lane: Q^T of a panel is
 * D x RP, its output O^T is Dv x RP, its scores S^T are keys x RP.  With
 * the rows across the lanes the online softmax is lane-wise (a running
 * max and sum per lane, no reduction across a vector) and so is the
 * rescaling of the output.  Keys go in blocks of kb (fkb, 128 by
 * default): the block's key rows are taken where they lie (f32) or from
 * their f32 copies (zero rows after the last), and every panel of the
 * item runs against them: S^T = scale K Q^T in KT x RP register tiles,
 * or 4 x RP where KT would leave 1 to 3 keys (the K rows broadcast one
 * feature at a time), the masks, exp and sums, then O^T = alpha O^T +
 * V^T P^T in CT x RP register tiles (4 x RP, 1 x RP for the last columns),
 * V read the same way.  A panel takes only the key groups its rows can see
 * (on the causal diagonal, up to its last row's diagonal), and the keys a
 * row of it may not see are set to -inf before the softmax. */

#define RP (2 * VL)

/* S^T[j][r] = scale * sum_d K[j][d] Q^T[d][r] for the nt (KT or 4) keys
 * whose rows kr[] points at, into nt rows of st. */
FK_ATTR __attribute__((always_inline)) static inline void
FK(fk_qk_tile)(int64_t D, const float *qt, const void *const *kr, int nt, VT vs, float *st)
{
    VT a0[KT], a1[KT];
    const float *k[KT];
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        a0[t] = a1[t] = V_ZERO();
        k[t] = kr[t];
    }
    const float *q = qt;
    for (int64_t d = 0; d < D; d++, q += RP) {
        VT q0 = V_LOAD(q), q1 = V_LOAD(q + VL);
#pragma GCC unroll 16
        for (int t = 0; t < nt; t++) {
            VT kk = V_SET1(k[t][d]);
            a0[t] = V_FMA(kk, q0, a0[t]);
            a1[t] = V_FMA(kk, q1, a1[t]);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < nt; t++) {
        V_STORE(st + t * RP, V_MUL(a0[t], vs));
        V_STORE(st + t * RP + VL, V_MUL(a1[t], vs));
    }
}

/* S^T for the nk keys whose rows kr[] points at: tiles of KT keys, and of
 * 4 where KT would leave a part of 1 to 3 keys (128 keys at KT 6: 20 x 6
 * and 2 x 4, not 22 x 6 with 4 zero rows).  The last tile may run past
 * the nk keys, by 3 rows at most: kr[] holds zero rows there and st room
 * for them.  Each score is the same sum whatever its tile. */
FK_ATTR static void FK(fk_qk)(int64_t D, const float *qt, const void *const *kr, int64_t nk,
                              float scale, float *st)
{
    const VT vs = V_SET1(scale);
    for (int64_t r = nk; r > 0;) {
        if (r >= KT + 4 || r == KT || (r > 4 && r < KT)) {
            FK(fk_qk_tile)(D, qt, kr, KT, vs, st);
            kr += KT, st += KT * RP, r -= KT;
        } else {
            FK(fk_qk_tile)(D, qt, kr, 4, vs, st);
            kr += 4, st += 4 * RP, r -= 4;
        }
    }
}

/* Online-softmax update of one panel from its n rows of S^T, turned into
 * weights in place.  m, l: the panel's running maxima and sums; alpha
 * gets the factors the output is to be rescaled by.  The rules of
 * row_softmax: a row with nothing to attend yet (max -inf) keeps m = -inf
 * and weighs 0 (NaN stays NaN); its sum and output are 0 or NaN, so the
 * factor exp(-inf) = 0 it gets here leaves them as they are. */
FK_ATTR static void FK(fk_softmax)(int64_t n, float *st, float *m, float *l, VT *alpha)
{
    const VT ninf = V_SET1(-INFINITY), low = V_SET1(-FLT_MAX);
    VT x0 = ninf, x1 = ninf;
    for (int64_t j = 0; j < n; j++) {
        x0 = V_MAX(V_LOAD(st + j * RP), x0);
        x1 = V_MAX(V_LOAD(st + j * RP + VL), x1);
    }
    VT mo0 = V_LOAD(m), mo1 = V_LOAD(m + VL);
    VT mn0 = V_MAX(x0, mo0), mn1 = V_MAX(x1, mo1);
    VT b0 = V_MAX(mn0, low), b1 = V_MAX(mn1, low);
    VT s0 = V_ZERO(), s1 = V_ZERO();
    for (int64_t j = 0; j < n; j++) {
        float *s = st + j * RP;
        VT e0 = V_EXP(V_SUB(V_LOAD(s), b0)), e1 = V_EXP(V_SUB(V_LOAD(s + VL), b1));
        V_STORE(s, e0);
        V_STORE(s + VL, e1);
        s0 = V_ADD(s0, e0);
        s1 = V_ADD(s1, e1);
    }
    alpha[0] = V_EXP(V_SUB(mo0, b0));
    alpha[1] = V_EXP(V_SUB(mo1, b1));
    V_STORE(l, V_ADD(V_MUL(V_LOAD(l), alpha[0]), s0));
    V_STORE(l + VL, V_ADD(V_MUL(V_LOAD(l + VL), alpha[1]), s1));
    V_STORE(m, mn0);
    V_STORE(m + VL, mn1);
}

/* O^T = alpha O^T + V^T P^T for the nc (CT, 4 or 1) value columns from
 * column c0, over the n keys of the panel's weights pt (S^T) and value
 * rows v (ldv apart). */
FK_ATTR __attribute__((always_inline)) static inline void
FK(fk_pv_tile)(int64_t n, const float *pt, const float *v, int64_t ldv, const VT *alpha,
               int64_t c0, int nc, float *ot)
{
    VT a0[CT], a1[CT];
    float *o = ot + c0 * RP;
#pragma GCC unroll 16
    for (int t = 0; t < nc; t++) {
        a0[t] = V_MUL(V_LOAD(o + t * RP), alpha[0]);
        a1[t] = V_MUL(V_LOAD(o + t * RP + VL), alpha[1]);
    }
    const float *p = pt, *vr = v + c0;
    for (int64_t j = 0; j < n; j++, p += RP, vr += ldv) {
        VT p0 = V_LOAD(p), p1 = V_LOAD(p + VL);
#pragma GCC unroll 16
        for (int t = 0; t < nc; t++) {
            VT vv = V_SET1(vr[t]);
            a0[t] = V_FMA(vv, p0, a0[t]);
            a1[t] = V_FMA(vv, p1, a1[t]);
        }
    }
#pragma GCC unroll 16
    for (int t = 0; t < nc; t++) {
        V_STORE(o + t * RP, a0[t]);
        V_STORE(o + t * RP + VL, a1[t]);
    }
}

/* O^T = alpha O^T + V^T P^T over Dv columns: tiles of CT columns, of 4
 * where CT would leave 1 to 3 (128 columns at CT 6: 20 x 6 and 2 x 4),
 * single columns for what is left under 4.  Each output keeps its own
 * sum over the keys in order whatever its tile. */
FK_ATTR static void FK(fk_pv)(int64_t Dv, int64_t n, const float *pt, const float *v, int64_t ldv,
                           const VT *alpha, float *ot)
{
    int64_t c0 = 0;
    while (c0 < Dv) {
        const int64_t r = Dv - c0;
        if (r >= CT + 4 || r == CT) {
            FK(fk_pv_tile)(n, pt, v, ldv, alpha, c0, CT, ot);
            c0 += CT;
        } else if (r >= 4) {
            FK(fk_pv_tile)(n, pt, v, ldv, alpha, c0, 4, ot);
            c0 += 4;
        } else {
            FK(fk_pv_tile)(n, pt, v, ldv, alpha, c0, 1, ot);
            c0 += 1;
        }
    }
}

/* ALiBi on n rows of S^T, the first key ja: s += slope (j - i') per lane,
 * the distance exact in f32 (positions below 2^23: attn_fused_level). */
FK_ATTR static void FK(fk_alibi)(int64_t n, int64_t ja, const float *sl, const float *pos,
                              float *st)
{
    const VT s0 = V_LOAD(sl), s1 = V_LOAD(sl + VL), p0 = V_LOAD(pos), p1 = V_LOAD(pos + VL);
    for (int64_t j = 0; j < n; j++, st += RP) {
        VT jj = V_SET1((float)(ja + j));
        V_STORE(st, V_FMA(s0, V_SUB(jj, p0), V_LOAD(st)));
        V_STORE(st + VL, V_FMA(s1, V_SUB(jj, p1), V_LOAD(st + VL)));
    }
}

/* One item through the fused kernels (see the top of this file). */
FK_ATTR void FK(attn_fused_item)(struct plan *p, struct item *it, struct scratch *w)
{
    const int64_t b = it->b, h0 = it->h0, i0 = it->i0, ni = it->i1 - it->i0;
    const int64_t hs = p->hs, M = hs * ni, D = p->D, Dv = p->Dv;
    const int64_t Mp = (M + RP - 1) / RP * RP, kvh = h0 / p->G, kb = p->fkb;
    float *qt = w->ft, *ot = qt + Mp * D, *st = ot + Mp * Dv, *sl = st + (kb + 2 * KT) * RP;
    float *pos = sl + Mp, *row = pos + Mp, *zero = row + (D > Dv ? D : Dv), *kc = zero + D;
    const void **kr = w->fkr;
    int64_t jlo = 0, jhi = 0;

    memset(qt, 0, (size_t)(Mp * D) * sizeof(float));
    memset(ot, 0, (size_t)(Mp * Dv) * sizeof(float));
    attn_fused_rows(p, it, w, Mp, sl, pos);
    for (int64_t r = 0; r < M; r++) {
        float *q = qt + (r / RP) * D * RP + r % RP;
        load_f32(row, q_row(p, b, h0 + r % hs, i0 + r / hs), p->q.dtype, D);
        for (int64_t d = 0; d < D; d++)
            q[d * RP] = row[d];
    }
    jlo = w->lo[0];
    jhi = w->hi[Mp - 1];
    const int direct_k = !p->paged && p->k.dtype == KV_F32;
    const int direct_v = !p->paged && p->v.dtype == KV_F32;
    memset(zero, 0, (size_t)D * sizeof(float));
    for (int64_t j0 = jlo; j0 < jhi; j0 += kb) {
        const int64_t n = j0 + kb < jhi ? kb : jhi - j0, ng = (n + KT - 1) / KT;
        it->done++;
        /* the block's key rows (f32 where they lie, or their f32 copies),
         * then zero rows up to a whole group of KT and 4 more (fk_qk's
         * last tile of 4 may run 3 past the keys) */
        for (int64_t j = 0; j < ng * KT + 4; j++) {
            if (j >= n) {
                kr[j] = zero;
            } else if (direct_k) {
                kr[j] = (const float *)kv_row(p, &p->k, b, kvh, j0 + j);
            } else {
                load_f32(kc + j * D, kv_row(p, &p->k, b, kvh, j0 + j), p->k.dtype, D);
                kr[j] = kc + j * D;
            }
        }
        const float *vb;
        int64_t ldv;
        if (direct_v) {
            vb = (const float *)kv_row(p, &p->v, b, kvh, j0);
            ldv = p->v.ss;
        } else {
            for (int64_t j = 0; j < n; j++)
                load_f32(w->vt + j * Dv, kv_row(p, &p->v, b, kvh, j0 + j), p->v.dtype, Dv);
            vb = w->vt;
            ldv = Dv;
        }
        for (int64_t r0 = 0; r0 < Mp; r0 += RP) {
            const int64_t *lo = w->lo + r0, *hi = w->hi + r0;
            /* the keys of the block some row of the panel sees, in whole groups */
            int64_t a = lo[0] - j0, z = hi[RP - 1] - j0;
            a = a < 0 ? 0 : a / KT * KT;
            z = z > n ? n : z;
            if (a >= z)
                continue;
            float *s = st;
            FK(fk_qk)(D, qt + r0 * D, kr + a, z - a, p->scale, s);
            if (p->softcap)
                FK_SOFTCAP(s, (z - a) * RP, p->softcap, p->inv_softcap);
            if (p->slopes)
                FK(fk_alibi)(z - a, j0 + a, sl + r0, pos + r0, s);
            attn_fused_mask(s, RP, j0, a, z, z, lo, hi);
            VT alpha[2];
            FK(fk_softmax)(z - a, s, w->m + r0, w->l + r0, alpha);
            FK(fk_pv)(Dv, z - a, s, vb + a * ldv, ldv, alpha, ot + r0 * Dv);
        }
    }
    attn_fused_finish(p, it, w, ot, RP, row);
}

#undef RP
