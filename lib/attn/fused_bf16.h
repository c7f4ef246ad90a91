/* fused_bf16.h - the fused attention item on VDPBF16PS (AVX512_BF16),
 * for bf16 Q, K and V on the avx512bf16 route with P rounded to bf16 (not
 * --no-p-round).  Included by fused_x86.c, after exp512_le0 and exp512_w
 * (the weights' exp), once per copy, with these defined: BF(name) (the
 * copy's name), BF_ATTR (its target attribute), BF_DOT(acc, a, b)
 * (VDPBF16PS or its model on 16 lanes, a and b words of pairs) and
 * BF_PAIR(e0, e1) (two vectors of weights rounded to bf16, as words of
 * pairs, e0's low).
 *
 * The shape of fused_kern.h, with the reduction axes taken in pairs, as
 * the instruction wants them: each f32 lane adds the products of two bf16
 * pairs, acc += a1 b1, then += a0 b0 (bf16.h).  One item is M stacked
 * query rows cut into panels of 32 rows, one row per lane of two vectors:
 *
 *   Q K^T   Q^T of a panel is packed once per item as words, pair c of row
 *           r (Q[r][2c], Q[r][2c+1]) at qt[c * 32 + r]; a key row is read
 *           where it lies, its pair c the word at c (after an odd D, from
 *           a copy ending in a zero).  8 keys x 32 rows per register tile,
 *           the key's word broadcast, the pairs in order in every lane:
 *           the same sums, in the same order, as the bf16 tiles' Q K^T
 *           (bf16_kern.h), then the same multiply by the scale.
 *   softmax online and lane-wise in f32, as fused_kern.h; the running sum
 *           adds the unrounded weights key by key; each weight is then
 *           rounded to bf16 (VCVTNE2PS2BF16: nearest even, a NaN quieted)
 *           and two keys' weights of a row make one word, P of key 2t in
 *           the low half: pt[t * 32 + r].
 *   P V     the block's values packed in pairs of keys once per block
 *           (V[2t][c], V[2t+1][c]) at vp[t * Dv + c], a zero row after an
 *           odd count; 8 value columns x 32 rows per register tile, O^T
 *           rescaled by the softmax's factor first, then the pairs of keys
 *           in order in every lane.
 *
 * A panel takes the key groups its rows can see, rounded up to a pair of
 * keys: a key past a panel's last diagonal that completes a pair, and the
 * keys of the group a row may not see, get -inf before the softmax, so
 * weight 0.  Softcap and ALiBi act on the f32 scores as in fused_kern.h,
 * the sinks when the row is finished. */

#define BRP FUSED_ROWS  /* rows per panel: two vectors of 16 lanes */
#define BKT FUSED_KT    /* keys per Q K^T register tile (even: P V pairs them) */
#define BCT 8           /* value columns per P V register tile */

BF_ATTR static inline __m512i BF(bf_word)(const void *p)
{
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return _mm512_set1_epi32((int)w);
}

BF_ATTR static inline __m512i BF(bf_load)(const uint32_t *p)
{
    return _mm512_loadu_si512((const void *)p);
}

/* S^T[j][r] = scale * sum over the kp pairs of K[j] . Q[r], for the ng
 * groups of BKT keys whose rows (as bytes) kr[] points at. */
BF_ATTR static void BF(bf_qk)(int64_t kp, const uint32_t *qt, const void *const *kr, int64_t ng,
                          float scale, float *st)
{
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t g = 0; g < ng; g++, kr += BKT, st += BKT * BRP) {
        __m512 a0[BKT], a1[BKT];
        const char *k[BKT];
#pragma GCC unroll 16
        for (int t = 0; t < BKT; t++) {
            a0[t] = a1[t] = _mm512_setzero_ps();
            k[t] = kr[t];
        }
        const uint32_t *q = qt;
        for (int64_t c = 0; c < kp; c++, q += BRP) {
            __m512i q0 = BF(bf_load)(q), q1 = BF(bf_load)(q + 16);
#pragma GCC unroll 16
            for (int t = 0; t < BKT; t++) {
                __m512i kk = BF(bf_word)(k[t] + 4 * c);
                a0[t] = BF_DOT(a0[t], kk, q0);
                a1[t] = BF_DOT(a1[t], kk, q1);
            }
        }
#pragma GCC unroll 16
        for (int t = 0; t < BKT; t++) {
            _mm512_storeu_ps(st + t * BRP, _mm512_mul_ps(a0[t], vs));
            _mm512_storeu_ps(st + t * BRP + 16, _mm512_mul_ps(a1[t], vs));
        }
    }
}

/* Online-softmax update of one panel from its n rows of S^T (n even), as
 * fused_kern.h's fk_softmax, and the weights rounded to bf16 in pairs of
 * keys into pt (n / 2 rows of 32 words). */
BF_ATTR static void BF(bf_softmax)(int64_t n, const float *st, uint32_t *pt, float *m, float *l,
                               __m512 *alpha)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY), low = _mm512_set1_ps(-FLT_MAX);
    __m512 x0 = ninf, x1 = ninf;
    for (int64_t j = 0; j < n; j++) {
        x0 = _mm512_max_ps(_mm512_loadu_ps(st + j * BRP), x0);
        x1 = _mm512_max_ps(_mm512_loadu_ps(st + j * BRP + 16), x1);
    }
    __m512 mo0 = _mm512_loadu_ps(m), mo1 = _mm512_loadu_ps(m + 16);
    __m512 mn0 = _mm512_max_ps(x0, mo0), mn1 = _mm512_max_ps(x1, mo1);
    __m512 b0 = _mm512_max_ps(mn0, low), b1 = _mm512_max_ps(mn1, low);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 2, pt += BRP) {
        const float *s = st + j * BRP;
        __m512 e00 = exp512_w(_mm512_sub_ps(_mm512_loadu_ps(s), b0));
        __m512 e01 = exp512_w(_mm512_sub_ps(_mm512_loadu_ps(s + 16), b1));
        __m512 e10 = exp512_w(_mm512_sub_ps(_mm512_loadu_ps(s + BRP), b0));
        __m512 e11 = exp512_w(_mm512_sub_ps(_mm512_loadu_ps(s + BRP + 16), b1));
        s0 = _mm512_add_ps(_mm512_add_ps(s0, e00), e10);
        s1 = _mm512_add_ps(_mm512_add_ps(s1, e01), e11);
        _mm512_storeu_si512((void *)pt, BF_PAIR(e00, e10));
        _mm512_storeu_si512((void *)(pt + 16), BF_PAIR(e01, e11));
    }
    alpha[0] = exp512_le0(_mm512_sub_ps(mo0, b0));
    alpha[1] = exp512_le0(_mm512_sub_ps(mo1, b1));
    _mm512_storeu_ps(l, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l), alpha[0]), s0));
    _mm512_storeu_ps(l + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(l + 16), alpha[1]), s1));
    _mm512_storeu_ps(m, mn0);
    _mm512_storeu_ps(m + 16, mn1);
}

/* O^T = alpha O^T + V^T P^T over np pairs of keys: the panel's weight
 * words pt and the packed value pairs vp (Dv words a pair), Dv columns. */
BF_ATTR static void BF(bf_pv)(int64_t Dv, int64_t np, const uint32_t *pt, const uint32_t *vp,
                          const __m512 *alpha, float *ot)
{
    int64_t c0 = 0;
    for (; c0 + BCT <= Dv; c0 += BCT) {
        __m512 a0[BCT], a1[BCT];
        float *o = ot + c0 * BRP;
#pragma GCC unroll 16
        for (int t = 0; t < BCT; t++) {
            a0[t] = _mm512_mul_ps(_mm512_loadu_ps(o + t * BRP), alpha[0]);
            a1[t] = _mm512_mul_ps(_mm512_loadu_ps(o + t * BRP + 16), alpha[1]);
        }
        const uint32_t *p = pt, *vr = vp + c0;
        for (int64_t j = 0; j < np; j++, p += BRP, vr += Dv) {
            __m512i p0 = BF(bf_load)(p), p1 = BF(bf_load)(p + 16);
#pragma GCC unroll 16
            for (int t = 0; t < BCT; t++) {
                __m512i vv = BF(bf_word)(vr + t);
                a0[t] = BF_DOT(a0[t], vv, p0);
                a1[t] = BF_DOT(a1[t], vv, p1);
            }
        }
#pragma GCC unroll 16
        for (int t = 0; t < BCT; t++) {
            _mm512_storeu_ps(o + t * BRP, a0[t]);
            _mm512_storeu_ps(o + t * BRP + 16, a1[t]);
        }
    }
    for (; c0 < Dv; c0++) {
        float *o = ot + c0 * BRP;
        __m512 a0 = _mm512_mul_ps(_mm512_loadu_ps(o), alpha[0]);
        __m512 a1 = _mm512_mul_ps(_mm512_loadu_ps(o + 16), alpha[1]);
        const uint32_t *p = pt, *vr = vp + c0;
        for (int64_t j = 0; j < np; j++, p += BRP, vr += Dv) {
            __m512i vv = BF(bf_word)(vr);
            a0 = BF_DOT(a0, vv, BF(bf_load)(p));
            a1 = BF_DOT(a1, vv, BF(bf_load)(p + 16));
        }
        _mm512_storeu_ps(o, a0);
        _mm512_storeu_ps(o + 16, a1);
    }
}

/* The bf16 row x of d elements as (d + 1) / 2 words of pairs, the even
 * element low (after an odd d, a zero), each stride words after the last. */
static inline void BF(bf_words)(uint32_t *dst, int64_t stride, const char *x, int64_t d)
{
    const uint16_t *h = (const uint16_t *)(const void *)x;
    if (d % 2 == 0) {
        /* little-endian: the pairs are the row's words as they lie */
        for (int64_t c = 0; 2 * c < d; c++)
            memcpy(dst + c * stride, x + 4 * c, sizeof *dst);
        return;
    }
    for (int64_t c = 0; 2 * c < d; c++)
        dst[c * stride] = (uint32_t)h[2 * c] | (2 * c + 1 < d ? (uint32_t)h[2 * c + 1] << 16 : 0u);
}

/* Two value rows r0, r1 (r1 NULL: a zero row) of Dv bf16 as Dv words of
 * pairs, r0's element in the low half. */
BF_ATTR static void BF(bf_pack_pair)(uint32_t *dst, const char *x0, const char *x1, int64_t Dv)
{
    const uint16_t *r0 = (const uint16_t *)(const void *)x0;
    const uint16_t *r1 = (const uint16_t *)(const void *)x1;
    int64_t c = 0;
    for (; c + 16 <= Dv; c += 16) {
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(r0 + c)));
        __m512i hi = r1 ? _mm512_slli_epi32(
                              _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(r1 + c))), 16)
                        : _mm512_setzero_si512();
        _mm512_storeu_si512((void *)(dst + c), _mm512_or_si512(lo, hi));
    }
    for (; c < Dv; c++)
        dst[c] = (uint32_t)r0[c] | (r1 ? (uint32_t)r1[c] << 16 : 0u);
}

/* One item through the kernels above (see the top of this file). */
BF_ATTR void BF(attn_fused_item_bf16)(struct plan *p, struct item *it, struct scratch *w)
{
    const int64_t b = it->b, h0 = it->h0, i0 = it->i0, ni = it->i1 - it->i0;
    const int64_t hs = p->hs, M = hs * ni, D = p->D, Dv = p->Dv, kp = (D + 1) / 2;
    const int64_t Mp = (M + BRP - 1) / BRP * BRP, kvh = h0 / p->G, kb = p->fkb;
    uint32_t *qt = (uint32_t *)(void *)w->ft;
    float *ot = (float *)(void *)(qt + Mp * kp), *st = ot + Mp * Dv;
    uint32_t *pt = (uint32_t *)(void *)(st + (kb + 2 * BKT) * BRP);
    float *sl = (float *)(void *)(pt + (kb + 2 * BKT) * BRP), *pos = sl + Mp, *row = pos + Mp;
    uint32_t *zero = (uint32_t *)(void *)(row + Dv), *kc = zero + kp, *vp = kc + kb * kp;
    const void **kr = w->fkr;

    memset(qt, 0, (size_t)(Mp * kp) * sizeof *qt);
    memset(ot, 0, (size_t)(Mp * Dv) * sizeof *ot);
    memset(zero, 0, (size_t)kp * sizeof *zero);
    attn_fused_rows(p, it, w, Mp, sl, pos);
    for (int64_t r = 0; r < M; r++)
        BF(bf_words)(qt + (r / BRP) * kp * BRP + r % BRP, BRP,
                     q_row(p, b, h0 + r % hs, i0 + r / hs), D);
    const int64_t jlo = w->lo[0], jhi = w->hi[Mp - 1];
    for (int64_t j0 = jlo; j0 < jhi; j0 += kb) {
        const int64_t n = j0 + kb < jhi ? kb : jhi - j0, ng = (n + BKT - 1) / BKT;
        it->done++;
        /* the block's key rows (where they lie, or copies ending in a zero
         * after an odd D), then zero keys up to a whole group */
        for (int64_t j = 0; j < ng * BKT; j++) {
            if (j >= n) {
                kr[j] = zero;
            } else if (D % 2 == 0) {
                kr[j] = kv_row(p, &p->k, b, kvh, j0 + j);
            } else {
                BF(bf_words)(kc + j * kp, 1, kv_row(p, &p->k, b, kvh, j0 + j), D);
                kr[j] = kc + j * kp;
            }
        }
        for (int64_t j = 0; j < n; j += 2)
            BF(bf_pack_pair)(vp + (j / 2) * Dv, kv_row(p, &p->v, b, kvh, j0 + j),
                             j + 1 < n ? kv_row(p, &p->v, b, kvh, j0 + j + 1) : NULL, Dv);
        for (int64_t r0 = 0; r0 < Mp; r0 += BRP) {
            const int64_t *lo = w->lo + r0, *hi = w->hi + r0;
            /* the keys of the block some row of the panel sees, in whole
             * groups, and up to a whole pair */
            int64_t a = lo[0] - j0, z = hi[BRP - 1] - j0;
            a = a < 0 ? 0 : a / BKT * BKT;
            z = z > n ? n : z;
            if (a >= z)
                continue;
            const int64_t z2 = z + (z - a) % 2, ga = a / BKT, gz = (z2 + BKT - 1) / BKT;
            float *s = st;
            BF(bf_qk)(kp, qt + r0 * kp, kr + ga * BKT, gz - ga, p->scale, s);
            if (p->softcap)
                softcap_512(s, (z2 - a) * BRP, p->softcap, p->inv_softcap);
            if (p->slopes)
                fk_alibi_512(z2 - a, j0 + a, sl + r0, pos + r0, s);
            attn_fused_mask(s, BRP, j0, a, z, z2, lo, hi);
            __m512 alpha[2];
            BF(bf_softmax)(z2 - a, s, pt, w->m + r0, w->l + r0, alpha);
            BF(bf_pv)(Dv, (z2 - a) / 2, pt, vp + (a / 2) * Dv, alpha, ot + r0 * Dv);
        }
    }
    attn_fused_finish(p, it, w, ot, BRP, row);
}

#undef BRP
#undef BKT
#undef BCT
#undef BF_ATTR
#undef BF
#undef BF_DOT
#undef BF_PAIR
