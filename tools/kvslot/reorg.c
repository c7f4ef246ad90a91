/* kvslot reorg: MLA context parallel, the AllGatherKV index map. */
#include "kvslot.h"

/* Whether every value reorg writes fits --dtype i32 (checked before the
 * output is touched, so that nothing is held in memory to be undone). */
static int reorg_fits_i32(const struct kv_mla_cp_map *m, const int64_t *rows9, int vllm)
{
    size_t nc = (size_t)m->n_chunks, nr = m->n_req;
    const struct { const int64_t *v; size_t n; const char *name; } f[] = {
        {&m->chunk_size, 1, "chunk_size"},
        {m->toks, nc, "toks"},
        {m->padded_lens, nc * nr, "padded_local_chunk_seq_lens"},
        {m->cu_seq_lens, nc * (nr + 1), "cu_seq_lens"},
        {m->starts, vllm ? nc * nr : 0, "chunk_starts"},
        {m->seq_lens, vllm ? nc * nr : 0, "chunk_seq_lens"},
        {rows9, m->n * 9, "map"},
    };
    for (size_t i = 0; i < N_ELEMS(f); i++)
        for (size_t j = 0; j < f[i].n; j++)
            if (f[i].v[j] < INT32_MIN || f[i].v[j] > INT32_MAX)
                return kv_fail("--dtype i32: %s holds %lld, over 32 bits; use --dtype i64",
                               f[i].name, (long long)f[i].v[j]);
    return 0;
}

/* The combinations of options reorg refuses, with a usage error: an
 * interleave that does not divide the block size, each chunking's size
 * option given to the other, PCP under vLLM's chunking, and an ascend
 * chunk that is not a whole number of I x P x D tokens.  Returns 0 or the
 * exit status. */
static int reorg_check(int vllm, int mc_given, int ws_given, int64_t B, int64_t P,
                       int64_t D, int64_t I, int64_t MC)
{
    if (B % I)
        return kv_usage("--interleave %lld must divide --block-size %lld", (long long)I,
                        (long long)B);
    if (vllm && mc_given)
        return kv_usage("--max-context-chunk is vllm-ascend's chunking; vLLM's "
                        "(--context-chunking vllm) is sized by --workspace");
    if (!vllm && ws_given)
        return kv_usage("--workspace sizes vLLM's chunking; give --context-chunking vllm "
                        "(vllm-ascend's is sized by --max-context-chunk)");
    if (vllm && P > 1)
        return kv_usage("--pcp-size %lld: vLLM's context chunking shards over DCP only",
                        (long long)P);
    if (MC % (I * P * D))
        return kv_usage("--max-context-chunk %lld: expected a multiple of I x P x D = %lld",
                        (long long)MC, (long long)(I * P * D));
    return 0;
}

/* vLLM's workspace rows as align_mla_chunked_context_workspace_size leaves
 * them: at least one alignment unit, rounded up to the block size B, and
 * to lcm(B, I x D) under DCP. */
static int64_t vllm_workspace(int64_t B, int64_t D, int64_t I, int64_t WS)
{
    int64_t a = B, v = I * D, x = a, y = v;
    while (y) { /* x = gcd(B, I x D) */
        int64_t t = x % y;
        x = y;
        y = t;
    }
    if (D > 1)
        a = B / x * v;
    WS = (WS > a ? WS : a);
    return (WS + a - 1) / a * a;
}

/* The map's entries as rows of nine integers in the order the "map"
 * output names its columns.  Returns a buffer the caller frees, or NULL
 * when out of memory. */
static int64_t *map_rows9(const struct kv_mla_cp_map *m)
{
    int64_t *rows9 = malloc((m->n ? m->n : 1) * 9 * sizeof *rows9);
    if (!rows9)
        return NULL;
    for (size_t i = 0; i < m->n; i++) {
        const struct kv_mla_cp_entry *x = &m->e[i];
        int64_t r[9] = {x->req, x->pos, x->chunk, x->pcp_rank, x->dcp_rank, x->local_index,
                        x->local_slot, x->gathered, x->reorg};
        memcpy(rows9 + 9 * i, r, sizeof r);
    }
    return rows9;
}

/* Writes reorg's fields to o in their fixed order; the chunk starts and
 * lengths only under vLLM's chunking. */
static void reorg_emit(struct out *o, const struct kv_mla_cp_map *m, const int64_t *rows9,
                       int vllm, size_t n_ctx, size_t n_ranks)
{
    size_t nc = (size_t)m->n_chunks;
    emit_scalar(o, "chunk_size", m->chunk_size);
    emit_vec(o, "toks", m->toks, nc);
    if (vllm) {
        emit_mat(o, "chunk_starts", m->starts, nc, n_ctx);
        emit_mat(o, "chunk_seq_lens", m->seq_lens, nc, n_ctx);
    }
    emit_mat(o, "padded_local_chunk_seq_lens", m->padded_lens, nc, n_ctx);
    emit_mat(o, "cu_seq_lens", m->cu_seq_lens, nc, n_ctx + 1);
    emit_mat(o, "local_context_lens", m->local_lens, n_ctx, n_ranks);
    emit_mat(o, "map", rows9, m->n, 9);
}

int cmd_reorg(int argc, char **argv)
{
    struct arg_str *bs = arg_str1("B", "block-size", "N", "block size");
    struct arg_str *tab = arg_str1(NULL, "block-table", "FILE",
                                   "block table (text rows or integer .npy), one row a request");
    struct arg_str *cl = arg_str1(NULL, "context-lens", "C0,C1,..",
                                  "context tokens of each request (num_computed_tokens)");
    struct arg_str *ps = arg_str0(NULL, "pcp-size", "P", "prefill context-parallel ranks (default 1)");
    struct arg_str *ds = arg_str0(NULL, "dcp-size", "D", "decode context-parallel ranks (default 1)");
    struct arg_str *il = arg_str0(NULL, "interleave", "I",
                                  "cp_kv_cache_interleave_size (default 1)");
    struct arg_str *cc = arg_str0(NULL, "context-chunking", "ascend|vllm",
                                  "how the context is cut into chunks (default ascend)");
    struct arg_str *mc = arg_str0(NULL, "max-context-chunk", "N",
                                  "ascend: context tokens a chunk (multiple of I x P x D; "
                                  "default one chunk)");
    struct arg_str *ws = arg_str0(NULL, "workspace", "N",
                                  "vllm: chunked_prefill_workspace_size rows (default 65536)");
    struct arg_str *mm = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct common c;
    void *argtable[24];
    int n = 0, rc, opened = 0, vllm = 0;
    int64_t B, P, D, I, MC, WS, *ctx = NULL, *bt = NULL, *rows9 = NULL, n_chunks = 0;
    size_t n_ctx = 0, bt_rows = 0, bt_cols = 0, max_mem = 0, n_ent = 0, bytes = 0, need;
    struct kv_out ko;
    struct out o;
    struct kv_mla_cp_map m;
    struct kv_err e = {{0}};
    memset(&m, 0, sizeof m);
    common_make(&c);
    argtable[n++] = bs; argtable[n++] = tab; argtable[n++] = cl; argtable[n++] = ps;
    argtable[n++] = ds; argtable[n++] = il; argtable[n++] = cc; argtable[n++] = mc;
    argtable[n++] = ws; argtable[n++] = mm; argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("reorg", argtable, argc, argv, c.help, c.version, c.end,
                   "\nMLA context parallel: where every context token of a chunked-prefill\n"
                   "step sits on the ranks, in the all-gathered buffer and in the\n"
                   "reorganised contiguous layout (man 1 kvslot).");
    if (rc >= 0)
        goto done;
    if ((rc = opt_i64(bs, "--block-size", 1, 1 << 20, 1, &B)) ||
        (rc = opt_i64(ps, "--pcp-size", 1, 1024, 1, &P)) ||
        (rc = opt_i64(ds, "--dcp-size", 1, 1024, 1, &D)) ||
        (rc = opt_i64(il, "--interleave", 1, 1 << 20, 1, &I)) ||
        (rc = opt_i64(mc, "--max-context-chunk", 0, INT64_C(1) << 40, 0, &MC)) ||
        (rc = opt_i64(ws, "--workspace", 1, INT64_C(1) << 40, 65536, &WS)) ||
        (rc = opt_list(cl, "--context-lens", 0, &ctx, &n_ctx)))
        goto done;
    if (kv_parse_max_mem(mm->count ? mm->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    if (cc->count && strcmp(cc->sval[0], "vllm") == 0) {
        vllm = 1;
    } else if (cc->count && strcmp(cc->sval[0], "ascend") != 0) {
        rc = kv_usage("--context-chunking: expected ascend or vllm, got '%s'", cc->sval[0]);
        goto done;
    }
    if (n_ctx == 0) {
        rc = kv_usage("--context-lens: no requests");
        goto done;
    }
    if ((rc = reorg_check(vllm, mc->count > 0, ws->count > 0, B, P, D, I, MC)))
        goto done;
    if (vllm)
        WS = vllm_workspace(B, D, I, WS);
    struct kv_mla_cp_geom g = {B, P, D, I, MC, vllm ? KV_MLA_CP_CHUNK_VLLM
                                                    : KV_MLA_CP_CHUNK_ASCEND, WS};
    /* the map, its rows as written, and the context lengths, before the
     * block table is read */
    if (kv_mla_cp_size(&g, ctx, n_ctx, &n_ent, &n_chunks, &bytes, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    need = mem_add(mem_add(bytes, mem_mul(n_ent + 1, 9 * sizeof *rows9)),
                   mem_mul(n_ctx, sizeof *ctx));
    if (need > max_mem) {
        char what[128];
        snprintf(what, sizeof what, "the map of %zu context tokens in %lld chunks", n_ent,
                 (long long)n_chunks);
        rc = mem_check(need, max_mem, what);
        goto done;
    }
    if (kv_read_int_table(tab->sval[0], 0, max_mem - need, &bt, &bt_rows, &bt_cols, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    if (kv_mla_cp_build(&g, bt, bt_rows, bt_cols, ctx, n_ctx, &m, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    if (!(rows9 = map_rows9(&m))) {
        rc = kv_fail("out of memory");
        goto done;
    }
    if ((rc = open_output(&c, &ko, &o)))
        goto done;
    opened = 1;
    if (o.npy && o.dtype == KV_I32 && (rc = reorg_fits_i32(&m, rows9, vllm)))
        goto done;
    reorg_emit(&o, &m, rows9, vllm, n_ctx, (size_t)(P * D));
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_mla_cp_map_release(&m);
    free(ctx);
    free(bt);
    free(rows9);
    free(c.fields);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
