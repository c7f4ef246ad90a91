/* groups.c - unit tests of lib/slot/groups.c (KV-cache groups and the
 * local-attention virtual batches) and of the chunked local mask kind of
 * lib/mask/mask.c.
 *
 * Groups: invariants on random explicit specs (every cache in exactly one
 * group, the layers of a group share one spec, one page size across groups
 * unless one uniform-type group holds everything, the page of a layer is
 * its block times its token bytes or a padding at least that large, groups
 * split from one kind differ in size by at most one) and refusals.  The
 * exact answers are held against vLLM by the goldens of
 * tests/cli/kvslot-groups.sh and by make crosscheck; the packed grouping
 * of a block-outermost layout with Mamba states, which no config derives
 * yet, against vLLM's answer written here.
 * Virtual batches: vLLM's own docstring example, and invariants on random
 * steps (queries add up, each virtual request's keys lie in one chunk and
 * end at its last query, its blocks come from its request's row).
 * Local mask: rows, columns, kept count and tile states against the rule
 * j <= i' and j / C == i' / C written out here. */
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "mask/mask.h"
#include "slot/groups.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t lo, int64_t hi)   /* inclusive */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

static int same_spec(const struct kv_cache_spec *a,
                     const struct kv_cache_spec *b)
{
    return a->kind == b->kind && a->block_size == b->block_size &&
           a->token_bytes == b->token_bytes && a->window == b->window &&
           a->state_bytes == b->state_bytes &&
           kv_cache_spec_page(a) == kv_cache_spec_page(b);
}

/* A random spec string of repeated patterns. */
static void random_spec(char *buf, size_t len)
{
    static const char *const kinds[] = {
        "full", "sliding=128", "sliding=4096", "chunked=8192", "mamba=1097728",
        "mamba=70000", "full:2048", "sliding=64:1024"
    };
    int n = (int)rnd(1, 4);
    size_t k = (size_t)snprintf(buf, len, "%d*(", (int)rnd(1, 9));
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(buf + k, len - k, "%s%d*%s", i ? "," : "",
                              (int)rnd(1, 5), kinds[rnd(0, 7)]);
    snprintf(buf + k, len - k, ")%s", rnd(0, 3) ? "" : ",full");
}

static void test_invariants(void)
{
    int bad = 0, runs = 0;
    char spec[256], why[300] = "";
    for (int t = 0; t < 2000; t++) {
        struct kv_groups g;
        struct kv_err e;
        struct kv_groups_opts o = { rnd(0, 1) ? 16 : 4 * rnd(1, 32),
                                    rnd(0, 1) ? 16 : 64, 131072, 0,
                                    (int)rnd(0, 1) };
        random_spec(spec, sizeof spec);
        kv_groups_init(&g);
        if (kv_groups_from_spec(&g, spec, &o, &e) != 0) {
            bad++;
            snprintf(why, sizeof why, "%.100s: %.150s", spec, e.msg);
            continue;
        }
        runs++;
        size_t *seen = calloc(g.n_specs, sizeof *seen);
        int ok = seen != NULL;
        for (size_t i = 0; ok && i < g.n_groups; i++) {
            const struct kv_group *gr = &g.group[i];
            const struct kv_cache_spec *f = &g.spec[gr->specs[0]];
            for (size_t k = 0; k < gr->n_specs; k++) {
                const struct kv_cache_spec *s = &g.spec[gr->specs[k]];
                seen[gr->specs[k]]++;
                if (!gr->uniform_type && !same_spec(s, f))
                    ok = 0;
                int64_t page = kv_cache_spec_page(s);
                if (s->kind != KV_CACHE_MAMBA &&
                    page < s->block_size * s->token_bytes)
                    ok = 0;
                if (s->kind == KV_CACHE_MAMBA && page < s->state_bytes)
                    ok = 0;
            }
            if (!gr->uniform_type &&
                gr->page_bytes != g.group[0].page_bytes)
                ok = 0;
            if (gr->uniform_type && g.n_groups != 1)
                ok = 0;
        }
        for (size_t i = 0; ok && i < g.n_specs; i++)
            if (seen[i] != 1)
                ok = 0;
        /* the groups split from one spec: sizes equal up to one
         * (layers[i::n]) */
        for (size_t i = 0; ok && i < g.n_groups; i++)
            for (size_t j = 0; j < g.n_groups; j++) {
                const struct kv_group *a = &g.group[i], *b = &g.group[j];
                if (same_spec(&g.spec[a->specs[0]], &g.spec[b->specs[0]]) &&
                    a->n_specs > b->n_specs + 1)
                    ok = 0;
            }
        if (!ok) {
            bad++;
            snprintf(why, sizeof why, "%.200s -B %lld --kernel-block %lld%s: "
                     "an invariant fails", spec, (long long)o.block_size,
                     (long long)o.kernel_block,
                     o.mamba_align ? " --mamba-cache-mode align" : "");
        }
        free(seen);
        kv_groups_release(&g);
    }
    TAP_OK(bad == 0 && runs == 2000,
           "2000 random specs: each cache in one group, one spec and one page "
           "per group, pages hold their tokens%s%s", bad ? " -- " : "", why);
}

static void expect_refused(const char *spec, const char *want)
{
    struct kv_groups g;
    struct kv_err e;
    struct kv_groups_opts o = { 16, 16, 4096, 0, 0 };
    kv_groups_init(&g);
    int rc = kv_groups_from_spec(&g, spec, &o, &e);
    TAP_OK(rc == -1 && strstr(e.msg, want) && g.n_groups == 0,
           "'%s' refused: %s", spec, rc ? e.msg : "(accepted)");
    kv_groups_release(&g);
}

static void test_refusals(void)
{
    expect_refused("full,attention", "unknown layer type 'attention'");
    expect_refused("", "empty spec");
    expect_refused("sliding", "expected '=' and the window");
    expect_refused("3*(full", "expected ')'");
    expect_refused("full)", "unbalanced ')'");
    expect_refused("0*full", "out of range");
    expect_refused("full,mla", "MLA and other attention layers");
    expect_refused("full;full", "expected ',' or the end");
    struct kv_groups g;
    struct kv_err e;
    struct kv_groups_opts o = { 16, 16, 0, 0, 0 };
    kv_groups_init(&g);
    TAP_OK(kv_groups_from_spec(&g, "mamba=100,full", &o, &e) == -1 &&
           strstr(e.msg, "model length"),
           "a Mamba layer without a model length is refused: %s", e.msg);
    kv_groups_release(&g);
}

/* The worked example of vLLM's make_local_attention_virtual_batches
 * docstring (its cu_seqlens_q_local line is not the cumulative sum of its
 * own q_seqlens_local line; the sum is what the code computes). */
static void test_local_example(void)
{
    const int64_t q[] = { 4, 10, 5 }, k[] = { 6, 17, 9 };
    int64_t bt[30];
    for (int i = 0; i < 30; i++)
        bt[i] = i;
    struct kv_local_batches b;
    struct kv_err e;
    memset(&b, 0, sizeof b);
    int rc = kv_local_virtual_batches(&b, 4, 2, q, k, 3, bt, 10, &e);
    const int64_t qsl[] = { 0, 2, 4, 5, 9, 13, 14, 18, 19 };
    const int64_t sl[] = { 4, 2, 4, 4, 4, 1, 4, 1 };
    const int64_t tab[] = { 0, 1, 2, 3, 12, 13, 14, 15, 16, 17, 18, 19, 22,
                            23, 24, 25 };
    const int64_t ks[] = { 0, 4, 4, 8, 12, 16, 4, 8 };
    TAP_OK(rc == 0 && b.n_virtual == 8 && b.pages == 2 &&
           !memcmp(b.query_start_loc, qsl, sizeof qsl) &&
           !memcmp(b.seq_lens, sl, sizeof sl) &&
           !memcmp(b.block_table, tab, sizeof tab) &&
           !memcmp(b.k_start, ks, sizeof ks) && b.max_query_len == 4 &&
           b.max_seq_len == 4,
           "vLLM's docstring example: chunk 4, block 2, q 4,10,5, keys 6,17,9");
    kv_local_batches_release(&b);
    TAP_OK(kv_local_virtual_batches(&b, 6, 4, q, k, 3, bt, 10, &e) == -1 &&
           strstr(e.msg, "not a multiple"), "chunk not a multiple of the "
           "block refused: %s", e.msg);
    const int64_t k2[] = { 6, 9, 9 };
    TAP_OK(kv_local_virtual_batches(&b, 4, 2, q, k2, 3, bt, 10, &e) == -1 &&
           strstr(e.msg, "request 1"), "fewer keys than queries refused: %s",
           e.msg);
}

static void test_local_random(void)
{
    int bad = 0;
    char why[300] = "";
    for (int t = 0; t < 3000 && !bad; t++) {
        int64_t C = (int64_t)1 << rnd(0, 6), B = (int64_t)1 << rnd(0, 6);
        if (C % B)
            B = C;
        size_t n = (size_t)rnd(1, 6);
        int64_t q[6], k[6], tot = 0;
        size_t cols = 1;
        for (size_t r = 0; r < n; r++) {
            q[r] = rnd(1, 70);      /* vLLM assumes every request has some */
            k[r] = q[r] + rnd(0, 90);
            tot += q[r];
            if ((size_t)((k[r] + B - 1) / B) > cols)
                cols = (size_t)((k[r] + B - 1) / B);
        }
        int64_t *bt = malloc(n * cols * sizeof *bt);
        for (size_t i = 0; i < n * cols; i++)
            bt[i] = (int64_t)i + 1000 * (int64_t)(i / cols);
        struct kv_local_batches b;
        struct kv_err e;
        memset(&b, 0, sizeof b);
        if (kv_local_virtual_batches(&b, C, B, q, k, n, bt, cols, &e)) {
            bad = 1;
            snprintf(why, sizeof why, "refused: %.200s", e.msg);
        }
        if (!bad && b.query_start_loc[b.n_virtual] != tot) {
            bad = 1;
            snprintf(why, sizeof why, "queries add up to %lld, not %lld",
                     (long long)b.query_start_loc[b.n_virtual], (long long)tot);
        }
        for (size_t v = 0; !bad && v < b.n_virtual; v++) {
            size_t r = (size_t)b.req_indices[v];
            int64_t ks = b.k_start[v], kl = b.seq_lens[v];
            /* keys inside one chunk, up to the request's keys */
            if (ks < 0 || ks % C || kl < 1 || kl > C || ks + kl > k[r])
                bad = 1;
            for (size_t p = 0; !bad && p < b.pages; p++) {
                int64_t x = b.block_table[v * b.pages + p];
                if (x / 1000 != (int64_t)r)
                    bad = 1;
            }
            if (bad)
                snprintf(why, sizeof why, "virtual request %zu of request %zu "
                         "(chunk %lld, block %lld, %lld queries, %lld keys)",
                         v, r, (long long)C, (long long)B, (long long)q[r],
                         (long long)k[r]);
        }
        /* the last virtual request of each request ends at its keys */
        for (size_t v = 0; !bad && v < b.n_virtual; v++)
            if ((v + 1 == b.n_virtual ||
                 b.req_indices[v + 1] != b.req_indices[v]) &&
                b.k_start[v] + b.seq_lens[v] != k[b.req_indices[v]]) {
                bad = 1;
                snprintf(why, sizeof why, "request %lld does not end at its "
                         "keys", (long long)b.req_indices[v]);
            }
        kv_local_batches_release(&b);
        free(bt);
    }
    TAP_OK(!bad, "3000 random steps: queries add up, keys in one chunk, "
           "blocks from the request's row%s%s", bad ? " -- " : "", why);
}

/* ---- the local mask ------------------------------------------------- */

static int rule(int64_t i, int64_t j, int64_t off, int64_t C)
{
    int64_t ip = i + off;
    return ip >= 0 && j <= ip && j / C == ip / C;
}

static void test_local_mask(void)
{
    int bad = 0;
    char why[300] = "";
    for (int t = 0; t < 400 && !bad; t++) {
        struct kv_mask_spec s;
        struct kv_mask m;
        struct kv_err e;
        memset(&s, 0, sizeof s);
        s.kind = KV_MASK_LOCAL;
        s.n_q = rnd(1, 70);
        s.n_kv = rnd(1, 90);
        s.top_left = (int)rnd(0, 1);
        s.chunk_size = rnd(1, 20);
        kv_mask_init(&m);
        if (kv_mask_make(&m, &s, &e)) {
            bad = 1;
            snprintf(why, sizeof why, "refused: %.200s", e.msg);
            break;
        }
        int64_t off = s.top_left ? 0 : s.n_kv - s.n_q;
        uint64_t kept = 0;
        for (int64_t i = 0; i < s.n_q; i++)
            for (int64_t j = 0; j < s.n_kv; j++) {
                int want = rule(i, j, off, s.chunk_size);
                kept += (uint64_t)want;
                if (kv_mask_at(&m, i, j) != want)
                    bad = 1;
            }
        for (int64_t i = 0; i < s.n_q && !bad; i++) {
            int64_t lo[2], hi[2];
            int n = kv_mask_row(&m, i, lo, hi);
            for (int64_t j = 0; j < s.n_kv; j++) {
                int in = 0;
                for (int k = 0; k < n; k++)
                    in |= j >= lo[k] && j < hi[k];
                if (in != rule(i, j, off, s.chunk_size))
                    bad = 1;
            }
        }
        for (int64_t j = 0; j < s.n_kv && !bad; j++) {
            int64_t lo[2], hi[2];
            int n = kv_mask_col(&m, j, lo, hi);
            for (int64_t i = 0; i < s.n_q; i++) {
                int in = 0;
                for (int k = 0; k < n; k++)
                    in |= i >= lo[k] && i < hi[k];
                if (in != rule(i, j, off, s.chunk_size))
                    bad = 1;
            }
        }
        if (!bad && kv_mask_kept(&m) != kept)
            bad = 1;
        /* tile states from the spans against brute force */
        int64_t bq = rnd(1, 9), bk = rnd(1, 9);
        int64_t nqb = (s.n_q + bq - 1) / bq, nkb = (s.n_kv + bk - 1) / bk;
        uint8_t *ref = malloc((size_t)(nqb * nkb));
        kv_tile_states_ref(&m, bq, bk, ref);
        for (int cols = 0; cols < 2 && !bad; cols++) {
            struct kv_tile_scan sc;
            memset(&sc, 0, sizeof sc);
            if (kv_tile_scan_init(&sc, &m, cols, bq, bk, &e)) {
                bad = 1;
                break;
            }
            for (int64_t blk = 0; blk < (cols ? nkb : nqb) && !bad; blk++) {
                kv_tile_runs(&sc, &m, cols, blk, bq, bk);
                for (size_t r = 0; r < sc.n_runs; r++)
                    for (int64_t x = sc.runs[r].start; x < sc.runs[r].end; x++) {
                        int64_t qb = cols ? x : blk, kb = cols ? blk : x;
                        if (ref[qb * nkb + kb] != sc.runs[r].state)
                            bad = 1;
                    }
            }
            kv_tile_scan_release(&sc);
        }
        free(ref);
        if (bad)
            snprintf(why, sizeof why, "%lld x %lld, chunk %lld, %s",
                     (long long)s.n_q, (long long)s.n_kv,
                     (long long)s.chunk_size,
                     s.top_left ? "top-left" : "bottom-right");
        kv_mask_release(&m);
    }
    TAP_OK(!bad, "local mask: rule, rows, columns, kept count and tile "
           "states agree on 400 random geometries%s%s", bad ? " -- " : "",
           why);
    struct kv_mask_spec s;
    struct kv_mask m;
    struct kv_err e;
    memset(&s, 0, sizeof s);
    s.kind = KV_MASK_LOCAL;
    s.n_q = s.n_kv = 4;
    kv_mask_init(&m);
    TAP_OK(kv_mask_make(&m, &s, &e) == -1 && strstr(e.msg, "--chunk-size"),
           "local mask: chunk size 0 refused: %s", e.msg);
    kv_mask_release(&m);
}

/* vLLM's packed grouping of a block-outermost layout with a Mamba state
 * bucket (_get_packed_kv_cache_groups, run on these specs with layout
 * BLHNC: groups [0 2 4 6 8 10] of 327680 bytes, [1 5 9] and [3 7 11] of
 * 300000): full layers of 65536- and 32768-byte pages in one unbalanced
 * bucket, whole; six Mamba states of 100000 bytes, three of which fit the
 * widest block, so two groups, state r to group r mod 2. */
static void test_packed_mamba(void)
{
    static const char order[] = "fmhmfmfmhmfm";
    static const size_t want[3][6] = { { 0, 2, 4, 6, 8, 10 }, { 1, 5, 9 },
                                       { 3, 7, 11 } };
    static const size_t want_n[3] = { 6, 3, 3 };
    static const int64_t want_page[3] = { 327680, 300000, 300000 };
    struct kv_cache_spec sp[12];
    struct kv_groups g;
    struct kv_err e;
    int good = 1;

    memset(sp, 0, sizeof sp);
    for (size_t i = 0; i < 12; i++) {
        sp[i].layer = (int64_t)i;
        sp[i].block_size = 16;
        sp[i].n_kv_heads = 1;
        if (order[i] == 'm') {
            sp[i].kind = KV_CACHE_MAMBA;
            sp[i].state_bytes = 100000;
        } else {
            sp[i].kind = KV_CACHE_FULL;
            sp[i].token_bytes = order[i] == 'f' ? 4096 : 2048;
            sp[i].head_size = sp[i].token_bytes / 2;
        }
    }
    kv_groups_init(&g);
    g.block_outermost = 1;
    TAP_OK(kv_groups_build(&g, sp, 12, &e) == 0 && g.n_groups == 3,
           "packed: three groups (%zu)", g.n_groups);
    for (size_t k = 0; k < 3 && g.n_groups == 3; k++) {
        good &= g.group[k].uniform_type && g.group[k].n_specs == want_n[k] &&
                g.group[k].page_bytes == want_page[k];
        for (size_t j = 0; good && j < want_n[k]; j++)
            good &= g.group[k].specs[j] == want[k][j];
    }
    TAP_OK(good, "packed: the groups and pages of vLLM's packing");
    TAP_OK(g.padding_layers == 6, "packed: padding layers 3 + 3 (%lld)",
           (long long)g.padding_layers);
    kv_groups_release(&g);
}

int main(void)
{
    test_invariants();
    test_packed_mamba();
    test_refusals();
    test_local_example();
    test_local_random();
    test_local_mask();
    return tap_done();
}
