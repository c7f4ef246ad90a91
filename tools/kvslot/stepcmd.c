/* kvslot step: the metadata an attention backend builds for one step
 * beyond the common fields of 'kvslot map'.
 *
 *   --chunk-size C   chunked local attention (Llama 4): vLLM's virtual
 *                    batches, written by local.c ('kvslot local' is the
 *                    same command under its older name);
 *   --parents LIST   a speculative-decoding token tree: each token's depth
 *                    and position, as vLLM 0.20.2's tree-attention drafter
 *                    (llm_base_proposer.py propose_tree, over the tree of
 *                    vllm/v1/attention/backends/tree_attn.py) places them.
 *
 * The parent list is checked by lib/mask/tree.h, the check kvmask tree
 * uses, so both programs accept and refuse the same trees. */
#include "kvslot.h"
#include "mask/tree.h"

/* The tree's fields for n_reqs requests whose roots sit at positions
 * base[r] (the tokens before the root):
 *   depths       [n]        0 for a root, its parent's + 1;
 *   depth_counts [D]        tokens at depth 1..D (vLLM's _get_depth_counts
 *                           over the choices, which leave the root out);
 *   positions    [n_reqs*n] base + depth, request by request; a token at
 *                           depth d >= 1 gets 0 when base + the tokens at
 *                           depths 1..d reach max_len (the drafter's
 *                           exceeds_max_model_len rule), max_len 0: never.
 * Returns an exit code. */
static int write_tree(struct common *c, const int64_t *par, int64_t n,
                      const int64_t *base, size_t n_reqs, int64_t max_len)
{
    struct kv_out ko;
    struct out o;
    struct kv_err e;
    int64_t *depth = NULL, *counts = NULL, *cum = NULL, *pos = NULL;
    int64_t max_depth = 0;
    int rc;

    if (kv_tree_check(par, n, &e))
        return kv_usage("%s", e.msg);
    depth = malloc((size_t)n * sizeof *depth);
    counts = calloc((size_t)n + 1, sizeof *counts);
    cum = calloc((size_t)n + 1, sizeof *cum);
    if (!depth || !counts || !cum ||
        (n_reqs > SIZE_MAX / sizeof *pos / (size_t)n) ||
        !(pos = malloc(n_reqs * (size_t)n * sizeof *pos))) {
        rc = kv_fail("out of memory");
        goto done;
    }
    if (kv_tree_depths(par, n, depth, &e)) {
        rc = kv_fail("%s", e.msg);
        goto done;
    }
    for (int64_t t = 0; t < n; t++) {
        counts[depth[t]]++;
        if (depth[t] > max_depth)
            max_depth = depth[t];
    }
    for (int64_t d = 1; d <= max_depth; d++)
        cum[d] = cum[d - 1] + counts[d];
    for (size_t r = 0; r < n_reqs; r++)
        for (int64_t t = 0; t < n; t++) {
            int64_t d = depth[t];
            int over = max_len > 0 && d > 0 && base[r] + cum[d] >= max_len;
            pos[r * (size_t)n + (size_t)t] = over ? 0 : base[r] + d;
        }
    if ((rc = open_output(c, &ko, &o)))
        goto done;
    out_hold(&o);
    emit_vec(&o, "depths", depth, (size_t)n);
    emit_vec(&o, "depth_counts", counts + 1, (size_t)max_depth);
    emit_vec(&o, "positions", pos, n_reqs * (size_t)n);
    rc = close_output(&ko, &o);
done:
    free(depth);
    free(counts);
    free(cum);
    free(pos);
    return rc;
}

/* The options of one form given with the other are refused. */
static int only_with(const struct arg_str *a, const char *name,
                     const char *form)
{
    if (a->count == 0)
        return 0;
    return kv_usage("%s: only with %s", name, form);
}

int cmd_step(int argc, char **argv)
{
    struct arg_str *cs = arg_str0(NULL, "chunk-size", "C",
                                  "chunked local attention: "
                                  "attention_chunk_size");
    struct arg_str *bs = arg_str0("B", "block-size", "B",
                                  "tokens per KV-cache block (--chunk-size)");
    struct arg_str *bt = arg_str0(NULL, "block-table", "FILE",
                                  "block table, one row per request "
                                  "(--chunk-size)");
    struct arg_str *sc = arg_str0(NULL, "scheduled", "n0,n1,..",
                                  "tokens scheduled per request "
                                  "(--chunk-size)");
    struct arg_str *pa = arg_str0(NULL, "parents", "p0,p1,..",
                                  "a token tree: each token's parent, -1 = "
                                  "the root");
    struct arg_str *ml = arg_str0(NULL, "max-model-len", "N",
                                  "tree positions past N become 0 (the "
                                  "drafter's rule; --parents)");
    struct arg_str *cp = arg_str0(NULL, "computed", "c0,c1,..",
                                  "tokens already computed per request "
                                  "(default 0; --parents: one request)");
    struct common c;
    void *argtable[24];
    int n = 0, rc;
    int64_t C = 0, B = 0, M = 0, *sched = NULL, *comp = NULL, *par = NULL;
    size_t n_sched = 0, n_comp = 0, n_par = 0;
    struct kv_err e;

    common_make(&c);
    argtable[n++] = cs; argtable[n++] = bs; argtable[n++] = bt;
    argtable[n++] = sc; argtable[n++] = pa; argtable[n++] = ml;
    argtable[n++] = cp; argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("step", argtable, argc, argv, c.help, c.version, c.end,
                   "\nA step's backend metadata: the virtual batches of "
                   "chunked local attention\n(--chunk-size) or a "
                   "speculative-decoding tree's depths and positions\n"
                   "(--parents); man 1 kvslot, STEP.");
    if (rc >= 0)
        goto done;
    if (!cs->count == !pa->count) {
        rc = kv_usage("expected one of --chunk-size and --parents");
        goto done;
    }
    if ((rc = opt_list(cp, "--computed", 0, &comp, &n_comp)))
        goto done;
    if (cs->count) {
        if ((rc = only_with(ml, "--max-model-len", "--parents")))
            goto done;
        if (!bs->count || !bt->count || !sc->count) {
            rc = kv_usage("--chunk-size needs -B, --block-table and "
                          "--scheduled");
            goto done;
        }
        if ((rc = opt_i64(cs, "--chunk-size", 1, INT32_MAX, 0, &C)) ||
            (rc = opt_i64(bs, "--block-size", 1, INT32_MAX, 0, &B)) ||
            (rc = opt_list(sc, "--scheduled", 0, &sched, &n_sched)))
            goto done;
        if (cp->count && n_comp != n_sched) {
            rc = kv_usage("--computed has %zu values, --scheduled has %zu",
                          n_comp, n_sched);
            goto done;
        }
        rc = run_local(&c, C, B, bt->sval[0], sched, n_sched, comp);
        goto done;
    }
    if ((rc = only_with(bs, "-B", "--chunk-size")) ||
        (rc = only_with(bt, "--block-table", "--chunk-size")) ||
        (rc = only_with(sc, "--scheduled", "--chunk-size")) ||
        (rc = opt_i64(ml, "--max-model-len", 1, INT32_MAX, 0, &M)))
        goto done;
    if (kv_parse_i64_list(pa->sval[0], "--parents", -1, KV_TREE_MAX, &par,
                          &n_par, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if (cp->count && n_comp == 0) {
        rc = kv_usage("--computed: no requests");
        goto done;
    }
    for (size_t r = 0; r < n_comp; r++)
        if (comp[r] > INT32_MAX) {
            rc = kv_usage("--computed: request %zu: %lld exceeds 2^31 - 1", r,
                          (long long)comp[r]);
            goto done;
        }
    {
        static const int64_t zero = 0;
        rc = write_tree(&c, par, (int64_t)n_par, comp ? comp : &zero,
                        comp ? n_comp : 1, M);
    }
done:
    free(sched);
    free(comp);
    free(par);
    free(c.fields);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
