/* attn_decode_kern.h - the decode kernels (Q K^T and P V over all kv
 * heads, the keys and values read in place from a paged or packed cache),
 * written once over a small set of vector operations and included by
 * attn_decode_x86.c for AVX-512 (16 lanes) and AVX2+FMA (8 lanes), which
 * defines first:
 *
 *   VT, VL            the f32 vector type and its lanes
 *   V_LOAD(p), V_STORE(p, x), V_SET1(x), V_ZERO(), V_FMA(a, b, c) (a b + c)
 *   V_F32(ptr, c), V_BF16(ptr, c), V_F16(ptr, c)
 *                     VL elements from element c of a row, as f32 (exact)
 *   V_E4M3(ptr, fix), V_E5M2(ptr)
 *                     VL FP8 bytes from ptr as f32, unscaled and exact
 *                     (e4m3: its value / 2^8); fix: the group holds e4m3
 *                     NaN bytes, which then give NaN
 *   V_NANS(tok, nt, len, top)
 *                     whether the len bytes from each of tok[0..nt) hold a
 *                     byte whose low 7 bits are above top
 *   QK_KEYS           keys Q K^T takes at a time, with 4 query rows
 *   V_SUMS(a, cnt, scale, dst, lds)
 *                     the 4 QK_KEYS scores of 4 rows x QK_KEYS keys from
 *                     their lane vectors a[QK_KEYS r + k]: scale * (the
 *                     lane sum of the vector), the first cnt keys of each
 *                     row stored at dst + r lds
 *   PV_CT             vectors of a row's outputs P V keeps in registers
 *   DK(name), DK_ATTR the name of this level's copy, its target
 *
 * Each element of S and of the output is summed in the same order at
 * either level but for the lanes of Q K^T: a score's products at features
 * t, t + VL, ... go to lane t in one FMA chain and V_SUMS adds the lanes
 * (kvattn(1) states both orders); P V adds key by key into each output
 * element.  FP8 keys and values enter unscaled: Q K^T scales each score by
 * the plan's fp8_ks (scale 2^8 k_scale for e4m3, rounded once) instead of
 * its scale, and each output row is multiplied by fp8_vs after its
 * division by the sum of its weights (finish_row). */

/* One element run of a row of dtype kind (DEC_*), from element c. */
__attribute__((always_inline)) DK_ATTR static inline VT DK(dk_load)(int kind, const char *row,
                                                                  int64_t c, int fix)
{
    switch (kind) {
    case DEC_BF16: return V_BF16(row, c);
    case DEC_F16: return V_F16(row, c);
    case DEC_E4M3: return V_E4M3(row + c, fix);
    case DEC_E5M2: return V_E5M2(row + c);
    default: return V_F32(row, c);
    }
}

/* Whether the rows of a group hold e4m3 NaN bytes (an e5m2 NaN byte
 * converts to NaN as it is). */
__attribute__((always_inline)) DK_ATTR static inline int DK(dk_nans)(int kind,
                                                                  const char *const *tok,
                                                                  int64_t nt, int64_t len)
{
    switch (kind) {
    case DEC_E4M3: return V_NANS(tok, nt, len, 0x7e);
    default: return 0;
    }
}

/* The group of nb keys from j0 + jb of a run j0.. j0 + n of Q K^T (qk:
 * keys) or P V (values; the work item's keys end at z): its rows of kv
 * head 0 into tok, the group ahead to prefetch into pf, and whether its
 * rows hold NaN bytes. */
__attribute__((always_inline)) DK_ATTR static inline int
DK(dk_group)(const struct plan *p, int64_t b, int64_t j0, int64_t jb, int64_t nb, int64_t n,
             int64_t z, int qk, int kind, const char **tok, struct pf_group *pf)
{
    dec_rows(p, qk ? &p->k : &p->v, b, j0 + jb, nb, tok);
    const int fix = DK(dk_nans)(kind, tok, nb, p->Hkv * (qk ? p->D : p->Dv));
    pf_ahead(p, b, j0, jb, n, z, qk ? DEC_GROUP : DEC_PV_KEYS, qk, pf);
    return fix;
}

/* Q K^T of keys j0.. j0 + n of request b, every kv head's rows (padded
 * to Gp per head, four at a time) against each key, into s (lds apart):
 * DEC_GROUP keys at a time (their rows found, checked for NaN bytes and
 * the group ahead prefetched), QK_KEYS keys x 4 rows within it in
 * registers, each query vector loaded once for all the keys, the sums kept
 * per lane and their lanes added at once (V_SUMS). */
__attribute__((always_inline)) DK_ATTR static inline void
DK(dk_qk)(const struct plan *p, int64_t b, int64_t j0, int64_t n, const float *qs, float *s,
          int64_t lds, int kind)
{
    const int64_t D = p->D, Hkv = p->Hkv, Gp = p->Gp;
    const size_t hstep = (size_t)p->k.sh * p->k.esize;
    const char *tok[DEC_GROUP];
    const float sscale = kind == DEC_E4M3 || kind == DEC_E5M2 ? p->fp8_ks : p->scale;
    for (int64_t jb = 0; jb < n; jb += DEC_GROUP) {
        const int64_t nb = n - jb < DEC_GROUP ? n - jb : DEC_GROUP;
        struct pf_group pf;
        const int fix = DK(dk_group)(p, b, j0, jb, nb, n, j0 + n, 1, kind, tok, &pf);
        for (int64_t g = 0; g < Hkv; g++) {
            pf_part(&pf, Hkv, g, Hkv);
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {
                const float *q0 = qs + r0 * D;
                for (int64_t t = 0; t < nb; t += QK_KEYS) {
                    /* past the group's last key, its first again (not stored) */
                    const char *kr[QK_KEYS];
                    VT a[4 * QK_KEYS];
#pragma GCC unroll 4
                    for (int k = 0; k < QK_KEYS; k++)
                        kr[k] = tok[t + k < nb ? t + k : t] + g * hstep;
#pragma GCC unroll 16
                    for (int i = 0; i < 4 * QK_KEYS; i++)
                        a[i] = V_ZERO();
                    for (int64_t c = 0; c < D; c += VL) {
                        VT x[4];
#pragma GCC unroll 4
                        for (int r = 0; r < 4; r++)
                            x[r] = V_LOAD(q0 + r * D + c);
#pragma GCC unroll 4
                        for (int k = 0; k < QK_KEYS; k++) {
                            VT kv = DK(dk_load)(kind, kr[k], c, fix);
#pragma GCC unroll 4
                            for (int r = 0; r < 4; r++)
                                a[r * QK_KEYS + k] = V_FMA(x[r], kv, a[r * QK_KEYS + k]);
                        }
                    }
                    V_SUMS(a, nb - t, sscale, s + r0 * lds + jb + t, lds);
                }
            }
        }
    }
}

/* P V of values j0.. j0 + n of a work item whose keys end at z, added to
 * o: DEC_PV_KEYS values at a time (read front to back, then again from
 * L1), 4 rows x PV_CT vectors of the output in registers over them, each
 * element summed key by key -- the same FMAs in the same order as one key
 * at a time. */
__attribute__((always_inline)) DK_ATTR static inline void
DK(dk_pv)(const struct plan *p, int64_t b, int64_t j0, int64_t n, int64_t z, const float *s,
          int64_t lds, float *o, int kind)
{
    const int64_t Dv = p->Dv, Hkv = p->Hkv, Gp = p->Gp;
    const size_t hstep = (size_t)p->v.sh * p->v.esize;
    const char *tok[DEC_PV_KEYS];
    for (int64_t jb = 0; jb < n; jb += DEC_PV_KEYS) {
        const int64_t nb = n - jb < DEC_PV_KEYS ? n - jb : DEC_PV_KEYS;
        struct pf_group pf;
        const int fix = DK(dk_group)(p, b, j0, jb, nb, n, z, 0, kind, tok, &pf);
        for (int64_t g = 0; g < Hkv; g++) {
            pf_part(&pf, Hkv, g, Hkv);
            for (int64_t r0 = g * Gp; r0 < (g + 1) * Gp; r0 += 4) {
                const float *s0 = s + r0 * lds + jb;
                float *o0 = o + r0 * Dv;
                int64_t c0 = 0;
                for (; c0 + PV_CT * VL <= Dv; c0 += PV_CT * VL) {
                    VT acc[4][PV_CT];
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                        for (int c = 0; c < PV_CT; c++)
                            acc[r][c] = V_LOAD(o0 + r * Dv + c0 + VL * c);
                    for (int64_t t = 0; t < nb; t++) {
                        const char *vr = tok[t] + g * hstep;
                        VT x[PV_CT];
#pragma GCC unroll 4
                        for (int c = 0; c < PV_CT; c++)
                            x[c] = DK(dk_load)(kind, vr, c0 + VL * c, fix);
#pragma GCC unroll 4
                        for (int r = 0; r < 4; r++) {
                            VT pr = V_SET1(s0[r * lds + t]);
#pragma GCC unroll 4
                            for (int c = 0; c < PV_CT; c++)
                                acc[r][c] = V_FMA(pr, x[c], acc[r][c]);
                        }
                    }
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                        for (int c = 0; c < PV_CT; c++)
                            V_STORE(o0 + r * Dv + c0 + VL * c, acc[r][c]);
                }
                for (; c0 < Dv; c0 += VL) {
                    VT acc[4];
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
                        acc[r] = V_LOAD(o0 + r * Dv + c0);
                    for (int64_t t = 0; t < nb; t++) {
                        VT x = DK(dk_load)(kind, tok[t] + g * hstep, c0, fix);
#pragma GCC unroll 4
                        for (int r = 0; r < 4; r++)
                            acc[r] = V_FMA(V_SET1(s0[r * lds + t]), x, acc[r]);
                    }
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
                        V_STORE(o0 + r * Dv + c0, acc[r]);
                }
            }
        }
    }
}

/* The entries of this level: the kernels above for the dtype of the plan's
 * keys and values (DEC_*), each a copy of its own. */
DK_ATTR static void DK(dec_qk)(const struct plan *p, int64_t b, int64_t j0, int64_t n,
                               const float *qs, float *s, int64_t lds, int kind)
{
    switch (kind) {
    case DEC_BF16: DK(dk_qk)(p, b, j0, n, qs, s, lds, DEC_BF16); break;
    case DEC_F16: DK(dk_qk)(p, b, j0, n, qs, s, lds, DEC_F16); break;
    case DEC_E4M3: DK(dk_qk)(p, b, j0, n, qs, s, lds, DEC_E4M3); break;
    case DEC_E5M2: DK(dk_qk)(p, b, j0, n, qs, s, lds, DEC_E5M2); break;
    default: DK(dk_qk)(p, b, j0, n, qs, s, lds, DEC_F32); break;
    }
}

DK_ATTR static void DK(dec_pv)(const struct plan *p, int64_t b, int64_t j0, int64_t n,
                               int64_t z, const float *s, int64_t lds, float *o, int kind)
{
    switch (kind) {
    case DEC_BF16: DK(dk_pv)(p, b, j0, n, z, s, lds, o, DEC_BF16); break;
    case DEC_F16: DK(dk_pv)(p, b, j0, n, z, s, lds, o, DEC_F16); break;
    case DEC_E4M3: DK(dk_pv)(p, b, j0, n, z, s, lds, o, DEC_E4M3); break;
    case DEC_E5M2: DK(dk_pv)(p, b, j0, n, z, s, lds, o, DEC_E5M2); break;
    default: DK(dk_pv)(p, b, j0, n, z, s, lds, o, DEC_F32); break;
    }
}
