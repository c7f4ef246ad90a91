/* slot.c - unit and property tests of lib/slot/slot.c, lib/slot/plan.c, lib/slot/pcp.c.
 *
 * The property tests check the library against references written here
 * from the definitions, not from the library's formulas:
 *  - a token's home under context parallelism: the rank that owns it is
 *    (p / I) % W, and it is that rank's k-th token of the request (k counts
 *    the earlier positions the same rank owns), stored at the k-th slot of
 *    the request's kernel blocks: kt[k / K] * K + k % K;
 *  - the PCP all-gather restore index must put every token back at its
 *    padded position, and the MRV2 gather/restore indices must invert each
 *    other with every token written exactly once.
 */
#include <stdlib.h>
#include <string.h>
#include "tap.h"
#include "slot/slot.h"
#include "slot/plan.h"
#include "slot/pcp.h"
#include "slot/mla_cp.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static int64_t rnd(int64_t lo, int64_t hi)   /* inclusive */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* --- the worked examples through the library --------------------------- */

static void test_seed004(void)
{
    struct kv_plan_config c;
    struct kv_plan *p = NULL;
    struct kv_plan_step st;
    struct kv_err e;
    int64_t prompts[3] = { 3, 2, 8 };
    static const int64_t slots1[] = { 2, 3, 4, 6, 7, 8, 9, 10, 11, 12 };
    static const int64_t slots2[] = { 5, 14, 13, 16, 17 };
    const int64_t *want[2] = { slots1, slots2 };
    size_t n_want[2] = { 10, 5 };

    memset(&c, 0, sizeof c);
    c.n_reqs = 3;
    c.prompt_lens = prompts;
    c.max_num_batched_tokens = 10;
    c.max_num_seqs = 256;
    c.block_size = 2;
    c.max_model_len = 12;
    TAP_OK(kv_plan_new(&p, &c, &e) == 0, "seed 004: plan created");
    for (int s = 0; s < 2; s++) {
        struct kv_slot_geom g = { 2, 2, 12, 1, 0, 1, KV_SLOT_VIRTUAL_KERNEL };
        struct kv_slot_table t = { NULL, 0, 0, NULL };
        struct kv_slot_step ss;
        int rc = kv_plan_step(p, &st, &e);
        TAP_OK(rc == 0 && st.n_cols == 6, "seed 004: step %d ran", s + 1);
        t.ids = st.block_table;
        t.n_rows = st.n_rows;
        t.n_cols = st.n_cols;
        kv_slot_step_init(&ss);
        rc = kv_slot_compute(&g, &t, st.n_rows, st.num_scheduled,
                             st.num_computed, ~0u, &ss, &e);
        TAP_OK(rc == 0 && ss.n_tokens == n_want[s] &&
               memcmp(ss.slot_mapping, want[s], n_want[s] * 8) == 0,
               "seed 004: step %d slot mapping", s + 1);
        kv_slot_step_release(&ss);
    }
    kv_plan_free(p);
}

static void test_b3(void)
{
    static const int64_t bt[4] = { 10, 11, 12, 13 };
    struct kv_slot_table t = { bt, 1, 4, NULL };
    int64_t n = 16;
    struct kv_err e;
    /* I=2 rank 1: -1 -1 40 41 -1 -1 42 43 ... */
    struct kv_slot_geom g = { 4, 4, 64, 2, 1, 2, KV_SLOT_VIRTUAL_KERNEL };
    struct kv_slot_step s;
    static const int64_t want[16] = { -1, -1, 40, 41, -1, -1, 42, 43,
                                      -1, -1, 44, 45, -1, -1, 46, 47 };
    int64_t lens[2];

    kv_slot_step_init(&s);
    TAP_OK(kv_slot_compute(&g, &t, 1, &n, NULL,
                           1u << KV_SLOT_SLOT_MAPPING, &s, &e) == 0 &&
           memcmp(s.slot_mapping, want, sizeof want) == 0,
           "B.3 I=2 rank 1");
    kv_slot_step_release(&s);
    kv_slot_cp_local_lens(7, 2, 1, lens);
    TAP_OK(lens[0] == 4 && lens[1] == 3, "B.3 local lens L=7 -> 4 3");
    kv_slot_cp_local_lens(1, 2, 1, lens);
    TAP_OK(lens[0] == 1 && lens[1] == 0, "B.3 local lens L=1 -> 1 0");
    g.interleave = 3;
    TAP_OK(kv_slot_geom_check(&g, &e) == -1, "interleave 3 with B 4 refused");
    g.interleave = 4;
    g.kernel_block_size = 2;
    TAP_OK(kv_slot_geom_check(&g, &e) == -1,
           "interleave 4 > kernel block 2 refused in the vLLM layout");
    g.virt = KV_SLOT_VIRTUAL_PHYSICAL;
    TAP_OK(kv_slot_geom_check(&g, &e) == 0,
           "interleave 4 > kernel block 2 allowed in the vllm-ascend layout");
    g.virt = KV_SLOT_VIRTUAL_KERNEL;
    g.cp_world = 1;
    g.cp_rank = 0;
    TAP_OK(kv_slot_geom_check(&g, &e) == 0,
           "interleave 4 > kernel block 2 allowed on one rank (plain slots)");
}

static void test_pcp_docstring(void)
{
    static const int64_t tok[3] = { 1, 5, 8 };
    static const int64_t restore[18] = { 0, 9, 1, 2, 10, 11, 12, 13, 3, 4, 5,
                                         6, 14, 15, 16, 17, 7, 8 };
    static const int64_t pos0[9] = { 0, 0, 1, 6, 7, 0, 1, 6, 7 };
    static const int64_t pos1[9] = { 0, 2, 3, 4, 5, 2, 3, 4, 5 };
    struct kv_pcp_ascend a;
    struct kv_err e;

    memset(&a, 0, sizeof a);
    TAP_OK(kv_pcp_ascend_split(tok, NULL, 3, 1, 2, 0, &a, &e) == 0 &&
           a.n_padded == 18 &&
           memcmp(a.restore_idx, restore, sizeof restore) == 0 &&
           memcmp(a.positions, pos0, sizeof pos0) == 0,
           "C.1 docstring rank 0: restore index and positions");
    kv_pcp_ascend_release(&a);
    TAP_OK(kv_pcp_ascend_split(tok, NULL, 3, 1, 2, 1, &a, &e) == 0 &&
           memcmp(a.positions, pos1, sizeof pos1) == 0,
           "C.1 docstring rank 1: positions");
    kv_pcp_ascend_release(&a);
    TAP_OK(kv_pcp_count_decodes(tok, NULL, 3, 1) == 1, "one leading decode");
    {
        static const int64_t none[3] = { 0, 0, 0 }, some[3] = { 9, 0, 3 };
        TAP_OK(kv_pcp_count_decodes(tok, none, 3, 1) == 0,
               "a 1-token request without context is a prefill");
        TAP_OK(kv_pcp_count_decodes(tok, some, 3, 1) == 1,
               "a 1-token request with context is a decode");
    }
}

/* --- property: CP slot mapping against the home of every token --------- */

static void test_cp_property(int iters)
{
    int bad_perm = 0, bad_once = 0, bad_fast = 0, runs = 0;

    for (int it = 0; it < iters; it++) {
        static const int64_t sizes[] = { 1, 2, 4, 8, 16 };
        int64_t B = sizes[rnd(0, 4)], K, W = rnd(1, 4), I;
        size_t n = (size_t)rnd(1, 6), cols = (size_t)rnd(1, 6), kcols;
        int virt = (int)rnd(0, 1);
        int64_t *ids, *kids = NULL, *sched, *comp, *kt, *seen;
        size_t pool, n_seen = 0;
        struct kv_slot_geom g;
        struct kv_slot_table t = { NULL, 0, 0, NULL };
        struct kv_err e;
        int64_t ktot = 0;

        do
            K = sizes[rnd(0, 4)];
        while (K > B);
        do
            I = sizes[rnd(0, 4)];
        while ((virt ? B : K) % I);
        memset(&g, 0, sizeof g);
        g.block_size = B;
        g.kernel_block_size = K;
        g.cp_world = W;
        g.interleave = I;
        g.virt = virt ? KV_SLOT_VIRTUAL_PHYSICAL : KV_SLOT_VIRTUAL_KERNEL;
        /* distinct allocation block ids (1..pool), a random permutation */
        pool = n * cols + 3;
        ids = malloc(n * cols * sizeof *ids);
        {
            int64_t *perm = malloc(pool * sizeof *perm);
            for (size_t i = 0; i < pool; i++)
                perm[i] = (int64_t)i + 1;
            for (size_t i = pool - 1; i > 0; i--) {
                size_t j = (size_t)rnd(0, (int64_t)i);
                int64_t x = perm[i];
                perm[i] = perm[j];
                perm[j] = x;
            }
            memcpy(ids, perm, n * cols * sizeof *ids);
            free(perm);
        }
        if (kv_slot_expand_hybrid(ids, n, cols, B, K, &kids, &kcols, &e)) {
            TAP_OK(0, "expand hybrid: %s", e.msg);
            return;
        }
        /* the test's own expansion */
        kt = malloc(n * kcols * sizeof *kt);
        for (size_t r = 0; r < n; r++)
            for (size_t c = 0; c < kcols; c++) {
                size_t blk = c / (size_t)(B / K);
                kt[r * kcols + c] = ids[r * cols + blk] * (B / K) +
                                    (int64_t)(c % (size_t)(B / K));
            }
        if (memcmp(kt, kids, n * kcols * sizeof *kt) != 0)
            bad_perm++;
        /* capacity of a row: every rank holds cols*B tokens */
        sched = malloc(n * sizeof *sched);
        comp = malloc(n * sizeof *comp);
        for (size_t r = 0; r < n; r++) {
            int64_t cap = (int64_t)cols * B * W;
            int64_t len = rnd(0, cap);
            comp[r] = rnd(0, len);
            sched[r] = len - comp[r];
            ktot += sched[r];
        }
        t.ids = kids;
        t.n_rows = n;
        t.n_cols = kcols;
        g.max_model_len = (int64_t)cols * B * W;
        seen = malloc(((size_t)ktot + 1) * sizeof *seen);
        {
            struct kv_slot_step *per = calloc((size_t)W, sizeof *per);
            int ok = 1;
            for (int64_t r = 0; r < W && ok; r++) {
                g.cp_rank = r;
                ok = kv_slot_compute(&g, &t, n, sched, comp,
                                     1u << KV_SLOT_SLOT_MAPPING, &per[r],
                                     &e) == 0;
            }
            if (!ok) {
                TAP_OK(0, "cp property: compute failed: %s", e.msg);
                return;
            }
            for (size_t r = 0, q = 0; r < n; r++) {
                int64_t cnt[8] = { 0 };
                for (int64_t p = 0; p < comp[r] + sched[r]; p++) {
                    int64_t own = (p / I) % W, k = cnt[own]++;
                    int64_t home = kt[r * kcols + (size_t)(k / K)] * K + k % K;
                    int writers = 0;
                    if (p < comp[r])
                        continue;
                    for (int64_t w = 0; w < W; w++) {
                        int64_t s = per[w].slot_mapping[q];
                        if (s != KV_SLOT_PAD) {
                            writers++;
                            if (w != own || s != home)
                                bad_perm++;
                            else
                                seen[n_seen++] = own * (INT64_C(1) << 40) + s;
                        }
                    }
                    if (writers != 1)
                        bad_once++;
                    q++;
                }
            }
            /* no (rank, slot) written twice in the whole batch */
            qsort(seen, n_seen, sizeof *seen, cmp_i64);
            for (size_t i = 1; i < n_seen; i++)
                if (seen[i] == seen[i - 1])
                    bad_once++;
            /* the same table stored as int32 gives the same slots */
            {
                int32_t *k32 = malloc(n * kcols * sizeof *k32 + 4);
                struct kv_slot_table t32 = t;
                struct kv_slot_step s32;
                for (size_t x = 0; x < n * kcols; x++)
                    k32[x] = (int32_t)kids[x];
                t32.ids = NULL;
                t32.ids32 = k32;
                g.cp_rank = W - 1;
                kv_slot_step_init(&s32);
                if (kv_slot_compute(&g, &t32, n, sched, comp,
                                    1u << KV_SLOT_SLOT_MAPPING, &s32, &e) ||
                    memcmp(s32.slot_mapping, per[W - 1].slot_mapping,
                           (size_t)ktot * 8) != 0)
                    bad_fast++;
                kv_slot_step_release(&s32);
                free(k32);
            }
            /* W == 1: the block-walking fast path against kv_slot_of */
            if (W == 1) {
                for (size_t r = 0, q = 0; r < n; r++)
                    for (int64_t j = 0; j < sched[r]; j++, q++)
                        if (per[0].slot_mapping[q] !=
                            kv_slot_of(&g, kids + r * kcols, comp[r] + j,
                                       NULL, NULL, NULL))
                            bad_fast++;
            }
            for (int64_t r = 0; r < W; r++)
                kv_slot_step_release(&per[r]);
            free(per);
        }
        runs++;
        free(ids);
        free(kids);
        free(kt);
        free(sched);
        free(comp);
        free(seen);
    }
    TAP_OK(bad_perm == 0, "cp property (%d batches): every slot is the "
           "token's home slot on its owner rank (%d bad)", runs, bad_perm);
    TAP_OK(bad_once == 0, "cp property: every token written by exactly one "
           "rank, no slot written twice (%d bad)", bad_once);
    TAP_OK(bad_fast == 0, "no-CP fast path agrees with kv_slot_of, int32 "
           "tables with int64 ones (%d bad)",
           bad_fast);
}

/* --- property: PCP restore indices invert the split -------------------- */

static void test_pcp_property(int iters)
{
    int bad_a = 0, bad_q = 0, bad_kv = 0, bad_v = 0;

    for (int it = 0; it < iters; it++) {
        size_t n = (size_t)rnd(1, 5), nd = (size_t)rnd(0, (int64_t)n);
        int64_t P = rnd(1, 4);
        int64_t *tok = malloc(n * sizeof *tok), *comp = malloc(n * 8);
        int64_t *start = malloc((n + 1) * 8);
        struct kv_err e;

        for (size_t i = 0; i < n; i++) {
            tok[i] = i < nd ? 1 : rnd(1, 40);
            comp[i] = i < nd ? rnd(1, 50) : rnd(0, 1) * rnd(0, 30);
        }
        /* ascend: identities (request, padded index) gathered rank-major */
        {
            struct kv_pcp_ascend a[4];
            int64_t *gath_req = NULL, *gath_x = NULL;
            size_t nl;
            memset(a, 0, sizeof a);
            for (int64_t k = 0; k < P; k++)
                if (kv_pcp_ascend_split(tok, NULL, n, nd, P, k, &a[k], &e)) {
                    TAP_OK(0, "pcp ascend split: %s", e.msg);
                    return;
                }
            nl = a[0].n_local;
            start[0] = 0;
            for (size_t i = 0; i < n; i++)
                start[i + 1] = start[i] + a[0].pcp_tokens[i] * P;
            gath_req = malloc((size_t)P * nl * 8 + 8);
            gath_x = malloc((size_t)P * nl * 8 + 8);
            for (int64_t k = 0; k < P; k++) {
                size_t at = 0;
                if (a[k].n_local != nl)
                    bad_a++;
                for (size_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < a[k].pcp_tokens[i]; j++, at++) {
                        gath_req[(size_t)k * nl + at] = (int64_t)i;
                        /* decode copies: rank k holds copy k */
                        gath_x[(size_t)k * nl + at] =
                            i < nd ? k * tok[i] + j : a[k].positions[at];
                    }
            }
            for (size_t i = 0; i < n; i++)
                for (int64_t x = start[i]; x < start[i + 1]; x++) {
                    int64_t src = a[0].restore_idx[x];
                    if (src < 0 || src >= P * (int64_t)nl ||
                        gath_req[src] != (int64_t)i ||
                        gath_x[src] != x - start[i])
                        bad_a++;
                    /* unpad mask: real prefill tokens, first decode copy */
                    if (a[0].unpad_mask[x] !=
                        (i < nd ? (x - start[i]) % P == 0
                                : x - start[i] < tok[i]))
                        bad_a++;
                }
            /* q_full_idx inverts q_head ++ q_tail; kv mask sets hold the
             * q chunk's own padded positions, nomask sets everything before */
            for (int64_t k = 0; k < P; k++) {
                struct kv_pcp_ascend *r = &a[k];
                size_t qo = 0, q = 0, hn = 0, tn = 0;
                int64_t ko = 0, qp = 0;
                for (size_t m = 0; m < 2 * r->n_q; m++) {
                    int64_t f = r->q_full_idx[m];
                    int64_t v = f < (int64_t)r->n_q ? r->q_head_idx[f]
                                                    : r->q_tail_idx[f - (int64_t)r->n_q];
                    if (v != (int64_t)m)
                        bad_q++;
                }
                for (size_t i = 0; i < n; i++) {
                    int64_t loc = r->pcp_tokens[i], c = loc / 2;
                    const int64_t *pos = r->positions + qo;
                    if (i < nd) {
                        qo += (size_t)loc;
                        continue;
                    }
                    for (int64_t j = 0; j < c; j++) {
                        if (r->q_head_idx[q + (size_t)j] != qp + j ||
                            r->q_tail_idx[q + (size_t)j] != qp + c + j ||
                            r->kv_head_mask[q + (size_t)j] - ko != pos[j] ||
                            r->kv_tail_mask[q + (size_t)j] - ko != pos[c + j])
                            bad_kv++;
                    }
                    /* nomask: [ko, ko + first position of the chunk) */
                    for (int64_t j = 0; j < pos[0]; j++)
                        if (hn >= r->n_head_nomask ||
                            r->kv_head_nomask[hn++] != ko + j)
                            bad_kv++;
                    for (int64_t j = 0; j < pos[c]; j++)
                        if (tn >= r->n_tail_nomask ||
                            r->kv_tail_nomask[tn++] != ko + j)
                            bad_kv++;
                    q += (size_t)c;
                    qp += loc;
                    qo += (size_t)loc;
                    ko += loc * P;
                }
                if (hn != r->n_head_nomask || tn != r->n_tail_nomask)
                    bad_kv++;
            }
            for (int64_t k = 0; k < P; k++)
                kv_pcp_ascend_release(&a[k]);
            free(gath_req);
            free(gath_x);
        }
        /* vllm: gather and restore invert each other; every token is
         * written exactly once; positions are computed + offset */
        {
            struct kv_pcp_vllm v;
            size_t total = 0, writes = 0;
            int64_t *qsl = malloc((n + 1) * 8);
            memset(&v, 0, sizeof v);
            if (kv_pcp_vllm_split(tok, comp, n, nd, P, 1 + (int64_t)(it % 3), &v, &e)) {
                TAP_OK(0, "pcp vllm split: %s", e.msg);
                return;
            }
            qsl[0] = 0;
            for (size_t i = 0; i < n; i++)
                qsl[i + 1] = qsl[i] + tok[i];
            total = (size_t)qsl[n];
            for (size_t g = 0; g < total; g++) {
                int64_t s = v.restore_idx[g];
                if (s < 0 || s >= P * v.padded || v.gather_idx[s] != (int64_t)g ||
                    !v.write_mask[s])
                    bad_v++;
            }
            for (int64_t s = 0; s < P * v.padded; s++)
                writes += (size_t)v.write_mask[s];
            if (writes != total)
                bad_v++;
            for (size_t l = 0, at = 0; l < (size_t)P; l++)
                for (int64_t j = 0; j < v.per_rank[l]; j++, at++) {
                    int64_t g = v.token_idx[at];
                    size_t i = 0;
                    while (qsl[i + 1] <= g)
                        i++;
                    if (v.positions[at] != comp[i] + (g - qsl[i]))
                        bad_v++;
                }
            kv_pcp_vllm_release(&v);
            free(qsl);
        }
        free(tok);
        free(comp);
        free(start);
    }
    TAP_OK(bad_a == 0, "pcp ascend property (%d batches): the restore index "
           "puts every gathered token back at its padded position, unpad "
           "mask exact (%d bad)", iters, bad_a);
    TAP_OK(bad_q == 0, "pcp ascend: q_full_idx inverts q_head ++ q_tail "
           "(%d bad)", bad_q);
    TAP_OK(bad_kv == 0, "pcp ascend: kv mask/nomask sets match the chunks' "
           "positions (%d bad)", bad_kv);
    TAP_OK(bad_v == 0, "pcp vllm property: gather and restore invert each "
           "other, each token written once (%d bad)", bad_v);
}

/* --- property: the plan never loses a request or a block --------------- */

static void test_plan_property(int iters)
{
    int bad = 0;

    for (int it = 0; it < iters; it++) {
        size_t n = (size_t)rnd(1, 12);
        int64_t B = rnd(1, 4), M = rnd(4, 24), prompts[12], outs[12];
        struct kv_plan_config c;
        struct kv_plan *p = NULL;
        struct kv_err e;
        int64_t need = 0, finished = 0;
        int guard = 0;

        for (size_t i = 0; i < n; i++) {
            prompts[i] = rnd(1, M - 1);
            outs[i] = rnd(1, 6);
        }
        for (size_t i = 0; i < n; i++) {
            int64_t o = outs[i] < M - prompts[i] ? outs[i] : M - prompts[i];
            int64_t tk = prompts[i] + (o < 1 ? 1 : o) - 1;
            int64_t b = (tk + B - 1) / B;
            if (b > need)
                need = b;
        }
        memset(&c, 0, sizeof c);
        c.n_reqs = n;
        c.prompt_lens = prompts;
        c.output_lens = outs;
        c.max_num_batched_tokens = rnd(1, 20);
        c.max_num_seqs = rnd(1, 8);
        c.block_size = B;
        c.max_model_len = M;
        c.num_blocks = need + 1 + rnd(0, 6);
        c.split_decodes = (int)rnd(0, 2);
        c.round_stride = (int)rnd(0, 1);
        if (kv_plan_new(&p, &c, &e)) {
            bad++;
            continue;
        }
        for (;;) {
            struct kv_plan_step st;
            int64_t used = 0;
            if (kv_plan_step(p, &st, &e) || ++guard > 100000) {
                bad++;
                break;
            }
            /* blocks in tables are distinct, non-zero, and with the free
             * ones account for the whole pool */
            {
                int64_t *all = malloc((st.n_rows * st.n_cols + 1) * 8);
                size_t m = 0;
                for (size_t x = 0; x < st.n_rows * st.n_cols; x++)
                    if (st.block_table[x])
                        all[m++] = st.block_table[x];
                qsort(all, m, 8, cmp_i64);
                for (size_t x = 1; x < m; x++)
                    if (all[x] == all[x - 1])
                        bad++;
                used = (int64_t)m;
                free(all);
            }
            if (used + st.free_blocks > c.num_blocks - 1)
                bad++;
            if (st.num_tokens > c.max_num_batched_tokens || st.num_tokens < 1)
                bad++;
            finished += (int64_t)st.n_finished;
            if (st.all_done)
                break;
        }
        if (finished != (int64_t)n)
            bad++;
        kv_plan_free(p);
    }
    TAP_OK(bad == 0, "plan property (%d runs): every request finishes, blocks "
           "never shared, budget kept (%d bad)", iters, bad);
}


/* --- MLA context chunking, vLLM's scheme --------------------------------- */

/* vLLM's plan_mla_context_chunks written from its description: requests in
 * order while their padded rows fit the budget; the first that does not is
 * cut at the longest multiple of the alignment (at most the chunk, below
 * its remaining context) whose rows fit, searched linearly here; a request
 * without context ends the chunk.  Fills st/ln [chunk][n]; returns the
 * chunk count (-1 when a chunk would be empty). */
static int64_t ref_rows(int64_t x, int64_t W, int64_t I)
{
    return W > 1 ? (x + I * W - 1) / (I * W) * I : x;
}

static int64_t ref_vllm_plan(const int64_t *ctx, size_t n, int64_t W, int64_t I, int64_t align,
                             int64_t budget, int64_t mcc, int64_t *st, int64_t *ln)
{
    int64_t nc = 0, start = 0;
    size_t b = 0;
    while (b < n) {
        if (ctx[b] == 0) {
            b++;
            continue;
        }
        int64_t rows = 0, any = 0;
        for (; b < n && ctx[b] > 0; b++, start = 0) {
            int64_t rem = ctx[b] - start;
            int64_t need = ref_rows(ctx[b], W, I) - ref_rows(start, W, I);
            if (rows + need > budget) {
                int64_t best = 0;
                for (int64_t len = align; len <= mcc && len < rem; len += align)
                    if (ref_rows(start + len, W, I) - ref_rows(start, W, I) <= budget - rows)
                        best = len;
                if (best) {
                    st[nc * (int64_t)n + (int64_t)b] = start;
                    ln[nc * (int64_t)n + (int64_t)b] = best;
                    start += best;
                    any = 1;
                }
                break;
            }
            rows += need;
            st[nc * (int64_t)n + (int64_t)b] = start;
            ln[nc * (int64_t)n + (int64_t)b] = rem;
            any = 1;
        }
        if (!any)
            return -1;
        nc++;
    }
    return nc;
}

static void test_mla_cp_vllm(int iters)
{
    int bad_plan = 0, bad_once = 0, bad_budget = 0, runs = 0;
    struct kv_err e = {{0}};
    for (int it = 0; it < iters; it++) {
        int64_t D = (int64_t[]){1, 1, 2, 4}[rnd(0, 3)];
        int64_t I = (int64_t[]){1, 1, 2, 4}[rnd(0, 3)];
        int64_t B = I * rnd(1, 4), V = I * D;
        int64_t g_ = B, v_ = V;
        while (v_) {
            int64_t t = g_ % v_;
            g_ = v_;
            v_ = t;
        }
        int64_t align = D > 1 ? B / g_ * V : B;
        int64_t ws = align * rnd(1, 6);
        size_t n = (size_t)rnd(1, 6);
        int64_t ctx[6], cols = 1;
        for (size_t b = 0; b < n; b++) {
            ctx[b] = rnd(0, 3) == 0 ? 0 : rnd(1, 4 * ws);
            int64_t need = (ctx[b] + V - 1) / V * I / B + 1;
            cols = need > cols ? need : cols;
        }
        int64_t *bt = malloc((size_t)cols * n * sizeof *bt);
        for (size_t i = 0; i < (size_t)cols * n; i++)
            bt[i] = (int64_t)i + 1;
        struct kv_mla_cp_geom g = {B, 1, D, I, 0, KV_MLA_CP_CHUNK_VLLM, ws};
        struct kv_mla_cp_map m;
        int64_t st[6 * 64] = {0}, ln[6 * 64] = {0};
        int64_t budget = D > 1 ? ws / D : ws;
        int64_t nc = ref_vllm_plan(ctx, n, D, I, align, budget, ws, st, ln);
        if (nc < 0 || nc > 64) {
            free(bt);
            continue;
        }
        runs++;
        if (kv_mla_cp_build(&g, bt, n, (size_t)cols, ctx, n, &m, &e)) {
            bad_plan++;
            free(bt);
            continue;
        }
        if (m.n_chunks != nc ||
            memcmp(m.starts, st, (size_t)nc * n * sizeof *st) ||
            memcmp(m.seq_lens, ln, (size_t)nc * n * sizeof *ln))
            bad_plan++;
        /* every context token once; every rank's rows within the budget */
        int64_t seen[6][400];
        memset(seen, 0, sizeof seen);
        for (size_t k = 0; k < m.n; k++)
            if (m.e[k].pos < 400)
                seen[m.e[k].req][m.e[k].pos]++;
        for (size_t b = 0; b < n; b++)
            for (int64_t p = 0; p < ctx[b] && p < 400; p++)
                bad_once += seen[b][p] != 1;
        for (int64_t c = 0; c < m.n_chunks; c++)
            bad_budget += m.toks[c] > budget;
        kv_mla_cp_map_release(&m);
        free(bt);
    }
    TAP_OK(bad_plan == 0, "vLLM context chunks (%d runs): the plan of vLLM's "
           "plan_mla_context_chunks as described (%d differ)", runs, bad_plan);
    TAP_OK(bad_once == 0 && bad_budget == 0, "vLLM context chunks: every token once, "
           "every rank's rows within the budget (%d, %d bad)", bad_once, bad_budget);

    /* by hand: contexts 5, 0, 7 make two chunks in a large workspace */
    int64_t ctx3[3] = {5, 0, 7}, bt3[3] = {1, 2, 3};
    struct kv_mla_cp_geom g3 = {16, 1, 1, 1, 0, KV_MLA_CP_CHUNK_VLLM, 64};
    struct kv_mla_cp_map m3;
    int ok3 = kv_mla_cp_build(&g3, bt3, 3, 1, ctx3, 3, &m3, &e) == 0;
    TAP_OK(ok3 && m3.n_chunks == 2 && m3.seq_lens[0] == 5 && m3.seq_lens[5] == 7 &&
           m3.toks[0] == 5 && m3.toks[1] == 7,
           "vLLM context chunks: 5,0,7 is two chunks (a request without context ends one)");
    if (ok3)
        kv_mla_cp_map_release(&m3);

    /* a context of 2^40 tokens cut into 2^36 slices is counted, not walked */
    int64_t big = (int64_t)1 << 40;
    struct kv_mla_cp_geom gb = {16, 1, 1, 1, 0, KV_MLA_CP_CHUNK_VLLM, 16};
    size_t ne = 0, bytes = 0;
    int64_t nch = 0;
    int okb = kv_mla_cp_size(&gb, &big, 1, &ne, &nch, &bytes, &e) == 0;
    TAP_OK(okb && nch == ((int64_t)1 << 36) && ne == (size_t)big &&
           bytes > (size_t)big * sizeof(struct kv_mla_cp_entry),
           "vLLM context chunks: the size of a 2^40-token context (%lld chunks, %zu bytes)",
           (long long)nch, bytes);

    /* the slots of a block id near 2^63 overflow: refused, not wrapped */
    int64_t huge[1] = {INT64_MAX}, one[1] = {1};
    struct kv_mla_cp_geom ga = {2, 1, 1, 1, 0, KV_MLA_CP_CHUNK_ASCEND, 0};
    TAP_OK(kv_mla_cp_build(&ga, huge, 1, 1, one, 1, &m3, &e) < 0 && strstr(e.msg, "overflow"),
           "reorg map: a block id whose slots pass int64 is refused (%s)", e.msg);
}

int main(void)
{
    test_seed004();
    test_b3();
    test_pcp_docstring();
    test_cp_property(3000);
    test_pcp_property(2000);
    test_plan_property(500);
    test_mla_cp_vllm(3000);
    return tap_done();
}
