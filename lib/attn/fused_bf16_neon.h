/* fused_bf16_neon.h - the fused attention item on BFDOT (aarch64 FEAT_BF16),
 * for bf16 Q, K and V on the neon-bf16 route (or its model, model-arm)
 * with P rounded to bf16 (not --no-p-round).  Included by fused_neon.c,
 * after exp_neon, once per copy, with these defined: BN(name) (the copy's
 * name), BN_ATTR (its target attribute), BN_DOT(acc, a, b) (BFDOT or its
 * model on 4 lanes, a and b words of pairs), BN_DOTL(acc, a, b, j) (the
 * same with word j of b in every lane: BFDOT by element) and BN_PAIR(e0,
 * e1) (two vectors of weights rounded to bf16 as words of pairs, e0's
 * low).
 *
 * The kernel of fused_bf16.h on 4 lanes: the reduction axes in pairs, each
 * f32 lane adding the BFDOT step of one pair after the other (bf16.h:
 * kv_bf16_dot2_arm).  One item is M stacked query rows cut into panels of
 * 8 rows, one row per lane of two vectors:
 *
 *   Q K^T   Q^T of a panel packed once per item as words, pair c of row r
 *           at qt[c * 8 + r]; a key row read where it lies (after an odd D
 *           from a copy ending in a zero), four pairs at a time, each pair
 *           taken by element.  8 keys x 8 rows per register tile (16
 *           accumulators, 8 key vectors, 2 query vectors): every lane adds
 *           the pairs in order, the order of the bf16 tiles (bf16_kern.h;
 *           BFMMLA's two steps give the same bits), then the multiply by
 *           the scale.
 *   softmax online and lane-wise in f32 as fused_kern.h; the running sum
 *           adds the unrounded weights key by key; each weight is then
 *           rounded to bf16, nearest even in integer arithmetic (a NaN
 *           stays a NaN; no flush: kv_f32_to_bf16's rounding, whatever
 *           FPCR says), two keys' weights of a row in one word, key 2t in
 *           the low half: pt[t * 8 + r].
 *   P V     the block's values packed in pairs of keys once per block,
 *           (V[2t][c], V[2t+1][c]) at vp[t * Dv + c], a zero row after an
 *           odd count; 8 value columns x 8 rows per register tile, four
 *           columns' words in a vector taken by element, O^T rescaled by
 *           the softmax's factor first, then the pairs of keys in order.
 *
 * A panel takes the key groups its rows can see, rounded up to a pair of
 * keys, as fused_bf16.h; softcap, ALiBi and the sinks as fused_kern.h. */

#define NRP 8  /* rows per panel: two vectors of 4 lanes */
#define NKT 8  /* keys per Q K^T register tile (even: P V pairs them) */
#define NCT 8  /* value columns per P V register tile */

/* Four words (pairs) of a bf16 row from p, which may lie at any even
 * address. */
#define BN_LOAD4(p) vreinterpretq_u32_u8(vld1q_u8((const uint8_t *)(const void *)(p)))

static inline uint32_t BN(bn_word)(const void *p)
{
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* Step J of four (pair c + J) of the Q K^T tile: both query vectors of
 * the pair against word J of the 8 keys' vectors. */
#define BN_QK_STEP(J)                                                  \
    do {                                                               \
        uint32x4_t q0 = vld1q_u32(q + (J) * NRP);                      \
        uint32x4_t q1 = vld1q_u32(q + (J) * NRP + 4);                  \
        _Pragma("GCC unroll 8")                                        \
        for (int t = 0; t < NKT; t++) {                                \
            a0[t] = BN_DOTL(a0[t], q0, kk[t], J);                      \
            a1[t] = BN_DOTL(a1[t], q1, kk[t], J);                      \
        }                                                              \
    } while (0)

/* S^T[j][r] = scale * sum over the kp pairs of K[j] . Q[r], for the ng
 * groups of NKT keys whose rows (as bytes) kr[] points at. */
BN_ATTR static void BN(bn_qk)(int64_t kp, const uint32_t *qt, const void *const *kr, int64_t ng,
                              float scale, float *st)
{
    const float32x4_t vs = vdupq_n_f32(scale);
    for (int64_t g = 0; g < ng; g++, kr += NKT, st += NKT * NRP) {
        float32x4_t a0[NKT], a1[NKT];
        const char *k[NKT];
#pragma GCC unroll 8
        for (int t = 0; t < NKT; t++) {
            a0[t] = a1[t] = vdupq_n_f32(0.0f);
            k[t] = kr[t];
        }
        const uint32_t *q = qt;
        int64_t c = 0;
        for (; c + 4 <= kp; c += 4, q += 4 * NRP) {
            uint32x4_t kk[NKT];
#pragma GCC unroll 8
            for (int t = 0; t < NKT; t++)
                kk[t] = BN_LOAD4(k[t] + 4 * c);
            BN_QK_STEP(0);
            BN_QK_STEP(1);
            BN_QK_STEP(2);
            BN_QK_STEP(3);
        }
        for (; c < kp; c++, q += NRP) {
            uint32x4_t q0 = vld1q_u32(q), q1 = vld1q_u32(q + 4);
#pragma GCC unroll 8
            for (int t = 0; t < NKT; t++) {
                uint32x4_t kw = vdupq_n_u32(BN(bn_word)(k[t] + 4 * c));
                a0[t] = BN_DOT(a0[t], q0, kw);
                a1[t] = BN_DOT(a1[t], q1, kw);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < NKT; t++) {
            vst1q_f32(st + t * NRP, vmulq_f32(a0[t], vs));
            vst1q_f32(st + t * NRP + 4, vmulq_f32(a1[t], vs));
        }
    }
}
#undef BN_QK_STEP

/* Online-softmax update of one panel from its n rows of S^T (n even), as
 * fused_kern.h's fk_softmax, and the weights rounded to bf16 in pairs of
 * keys into pt (n / 2 rows of 8 words). */
BN_ATTR static void BN(bn_softmax)(int64_t n, const float *st, uint32_t *pt, float *m, float *l,
                                   float32x4_t *alpha)
{
    const float32x4_t ninf = vdupq_n_f32(-INFINITY), low = vdupq_n_f32(-FLT_MAX);
    float32x4_t x0 = ninf, x1 = ninf;
    /* the number when a score is NaN: the running max passes it over */
    for (int64_t j = 0; j < n; j++) {
        x0 = vmaxnmq_f32(vld1q_f32(st + j * NRP), x0);
        x1 = vmaxnmq_f32(vld1q_f32(st + j * NRP + 4), x1);
    }
    float32x4_t mo0 = vld1q_f32(m), mo1 = vld1q_f32(m + 4);
    float32x4_t mn0 = vmaxnmq_f32(x0, mo0), mn1 = vmaxnmq_f32(x1, mo1);
    float32x4_t b0 = vmaxnmq_f32(mn0, low), b1 = vmaxnmq_f32(mn1, low);
    float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0;
    for (int64_t j = 0; j < n; j += 2, pt += NRP) {
        const float *s = st + j * NRP;
        float32x4_t e00 = exp_neon(vsubq_f32(vld1q_f32(s), b0));
        float32x4_t e01 = exp_neon(vsubq_f32(vld1q_f32(s + 4), b1));
        float32x4_t e10 = exp_neon(vsubq_f32(vld1q_f32(s + NRP), b0));
        float32x4_t e11 = exp_neon(vsubq_f32(vld1q_f32(s + NRP + 4), b1));
        s0 = vaddq_f32(vaddq_f32(s0, e00), e10);
        s1 = vaddq_f32(vaddq_f32(s1, e01), e11);
        vst1q_u32(pt, BN_PAIR(e00, e10));
        vst1q_u32(pt + 4, BN_PAIR(e01, e11));
    }
    alpha[0] = exp_neon(vsubq_f32(mo0, b0));
    alpha[1] = exp_neon(vsubq_f32(mo1, b1));
    vst1q_f32(l, vaddq_f32(vmulq_f32(vld1q_f32(l), alpha[0]), s0));
    vst1q_f32(l + 4, vaddq_f32(vmulq_f32(vld1q_f32(l + 4), alpha[1]), s1));
    vst1q_f32(m, mn0);
    vst1q_f32(m + 4, mn1);
}

/* Column J of four (column c0 + 4 H + J) of the P V tile: word J of the
 * value vector against both weight vectors of the pair. */
#define BN_PV_COL(H, J)                                                \
    do {                                                               \
        a0[4 * (H) + (J)] = BN_DOTL(a0[4 * (H) + (J)], p0, vv[H], J);  \
        a1[4 * (H) + (J)] = BN_DOTL(a1[4 * (H) + (J)], p1, vv[H], J);  \
    } while (0)

/* O^T = alpha O^T + V^T P^T over np pairs of keys: the panel's weight
 * words pt and the packed value pairs vp (Dv words a pair), Dv columns. */
BN_ATTR static void BN(bn_pv)(int64_t Dv, int64_t np, const uint32_t *pt, const uint32_t *vp,
                              const float32x4_t *alpha, float *ot)
{
    int64_t c0 = 0;
    for (; c0 + NCT <= Dv; c0 += NCT) {
        float32x4_t a0[NCT], a1[NCT];
        float *o = ot + c0 * NRP;
#pragma GCC unroll 8
        for (int t = 0; t < NCT; t++) {
            a0[t] = vmulq_f32(vld1q_f32(o + t * NRP), alpha[0]);
            a1[t] = vmulq_f32(vld1q_f32(o + t * NRP + 4), alpha[1]);
        }
        const uint32_t *p = pt, *vr = vp + c0;
        for (int64_t j = 0; j < np; j++, p += NRP, vr += Dv) {
            uint32x4_t p0 = vld1q_u32(p), p1 = vld1q_u32(p + 4);
            uint32x4_t vv[2] = {vld1q_u32(vr), vld1q_u32(vr + 4)};
            BN_PV_COL(0, 0);
            BN_PV_COL(0, 1);
            BN_PV_COL(0, 2);
            BN_PV_COL(0, 3);
            BN_PV_COL(1, 0);
            BN_PV_COL(1, 1);
            BN_PV_COL(1, 2);
            BN_PV_COL(1, 3);
        }
#pragma GCC unroll 8
        for (int t = 0; t < NCT; t++) {
            vst1q_f32(o + t * NRP, a0[t]);
            vst1q_f32(o + t * NRP + 4, a1[t]);
        }
    }
    for (; c0 < Dv; c0++) {
        float *o = ot + c0 * NRP;
        float32x4_t a0 = vmulq_f32(vld1q_f32(o), alpha[0]);
        float32x4_t a1 = vmulq_f32(vld1q_f32(o + 4), alpha[1]);
        const uint32_t *p = pt, *vr = vp + c0;
        for (int64_t j = 0; j < np; j++, p += NRP, vr += Dv) {
            uint32x4_t vv = vdupq_n_u32(*vr);
            a0 = BN_DOT(a0, vld1q_u32(p), vv);
            a1 = BN_DOT(a1, vld1q_u32(p + 4), vv);
        }
        vst1q_f32(o, a0);
        vst1q_f32(o + 4, a1);
    }
}
#undef BN_PV_COL

/* The bf16 row x of d elements as (d + 1) / 2 words of pairs, the even
 * element low (after an odd d, a zero), each stride words after the last. */
static inline void BN(bn_words)(uint32_t *dst, int64_t stride, const char *x, int64_t d)
{
    const uint16_t *h = (const uint16_t *)(const void *)x;
    for (int64_t c = 0; 2 * c < d; c++)
        dst[c * stride] = (uint32_t)h[2 * c] | (2 * c + 1 < d ? (uint32_t)h[2 * c + 1] << 16 : 0u);
}

/* Two value rows (x1 NULL: a zero row) of Dv bf16 as Dv words of pairs,
 * x0's element in the low half. */
BN_ATTR static void BN(bn_pack_pair)(uint32_t *dst, const char *x0, const char *x1, int64_t Dv)
{
    const uint16_t *r0 = (const uint16_t *)(const void *)x0;
    const uint16_t *r1 = (const uint16_t *)(const void *)x1;
    int64_t c = 0;
    if (r1)
        for (; c + 8 <= Dv; c += 8) {
            uint16x8_t lo = vld1q_u16(r0 + c), hi = vld1q_u16(r1 + c);
            vst1q_u32(dst + c, vreinterpretq_u32_u16(vzip1q_u16(lo, hi)));
            vst1q_u32(dst + c + 4, vreinterpretq_u32_u16(vzip2q_u16(lo, hi)));
        }
    for (; c < Dv; c++)
        dst[c] = (uint32_t)r0[c] | (r1 ? (uint32_t)r1[c] << 16 : 0u);
}

/* One item through the kernels above (see the top of this file). */
BN_ATTR void BN(attn_fused_item_bf16)(struct plan *p, struct item *it, struct scratch *w)
{
    const int64_t b = it->b, h0 = it->h0, i0 = it->i0, ni = it->i1 - it->i0;
    const int64_t hs = p->hs, M = hs * ni, D = p->D, Dv = p->Dv, kp = (D + 1) / 2;
    const int64_t Mp = (M + NRP - 1) / NRP * NRP, kvh = h0 / p->G, kb = p->fkb;
    /* the layout of fused_bf16.h's work space (attn_fused_floats), in
     * panels of 8 rows */
    uint32_t *qt = (uint32_t *)(void *)w->ft;
    float *ot = (float *)(void *)(qt + Mp * kp), *st = ot + Mp * Dv;
    uint32_t *pt = (uint32_t *)(void *)(st + (kb + 2 * NKT) * NRP);
    float *sl = (float *)(void *)(pt + (kb + 2 * NKT) * NRP), *pos = sl + Mp, *row = pos + Mp;
    uint32_t *zero = (uint32_t *)(void *)(row + Dv), *kc = zero + kp, *vp = kc + kb * kp;
    const void **kr = w->fkr;

    memset(qt, 0, (size_t)(Mp * kp) * sizeof *qt);
    memset(ot, 0, (size_t)(Mp * Dv) * sizeof *ot);
    memset(zero, 0, (size_t)kp * sizeof *zero);
    attn_fused_rows(p, it, w, Mp, sl, pos);
    for (int64_t r = 0; r < M; r++)
        BN(bn_words)(qt + (r / NRP) * kp * NRP + r % NRP, NRP,
                     q_row(p, b, h0 + r % hs, i0 + r / hs), D);
    const int64_t jlo = w->lo[0], jhi = w->hi[Mp - 1];
    for (int64_t j0 = jlo; j0 < jhi; j0 += kb) {
        const int64_t n = j0 + kb < jhi ? kb : jhi - j0, ng = (n + NKT - 1) / NKT;
        it->done++;
        /* the block's key rows (where they lie, or copies ending in a zero
         * after an odd D), then zero keys up to a whole group */
        for (int64_t j = 0; j < ng * NKT; j++) {
            if (j >= n) {
                kr[j] = zero;
            } else if (D % 2 == 0) {
                kr[j] = kv_row(p, &p->k, b, kvh, j0 + j);
            } else {
                BN(bn_words)(kc + j * kp, 1, kv_row(p, &p->k, b, kvh, j0 + j), D);
                kr[j] = kc + j * kp;
            }
        }
        for (int64_t j = 0; j < n; j += 2)
            BN(bn_pack_pair)(vp + (j / 2) * Dv, kv_row(p, &p->v, b, kvh, j0 + j),
                             j + 1 < n ? kv_row(p, &p->v, b, kvh, j0 + j + 1) : NULL, Dv);
        for (int64_t r0 = 0; r0 < Mp; r0 += NRP) {
            const int64_t *lo = w->lo + r0, *hi = w->hi + r0;
            /* the keys of the block some row of the panel sees, in whole
             * groups, and up to a whole pair */
            int64_t a = lo[0] - j0, z = hi[NRP - 1] - j0;
            a = a < 0 ? 0 : a / NKT * NKT;
            z = z > n ? n : z;
            if (a >= z)
                continue;
            const int64_t z2 = z + (z - a) % 2, ga = a / NKT, gz = (z2 + NKT - 1) / NKT;
            float *s = st;
            BN(bn_qk)(kp, qt + r0 * kp, kr + ga * NKT, gz - ga, p->scale, s);
            if (p->softcap)
                softcap_ref(s, (z2 - a) * NRP, p->softcap, p->inv_softcap);
            if (p->slopes)
                fk_alibi_neon(z2 - a, j0 + a, sl + r0, pos + r0, s);
            attn_fused_mask(s, NRP, j0, a, z, z2, lo, hi);
            float32x4_t alpha[2];
            BN(bn_softmax)(z2 - a, s, pt, w->m + r0, w->l + r0, alpha);
            BN(bn_pv)(Dv, (z2 - a) / 2, pt, vp + (a / 2) * Dv, alpha, ot + r0 * Dv);
        }
    }
    attn_fused_finish(p, it, w, ot, NRP, row);
}

#undef NRP
#undef NKT
#undef NCT
#undef BN_LOAD4
#undef BN_ATTR
#undef BN
#undef BN_DOT
#undef BN_DOTL
#undef BN_PAIR
