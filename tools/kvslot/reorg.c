/* kvslot reorg: MLA context parallel, the AllGatherKV index map. */
#include "kvslot.h"

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
    struct arg_str *mc = arg_str0(NULL, "max-context-chunk", "N",
                                  "context tokens a chunk (multiple of I x P x D; default one chunk)");
    struct common c;
    void *argtable[20];
    int n = 0, rc, opened = 0;
    int64_t B, P, D, I, MC, *ctx = NULL, *bt = NULL, *rows9 = NULL;
    size_t n_ctx = 0, bt_rows = 0, bt_cols = 0;
    struct kv_out ko;
    struct out o;
    struct kv_mla_cp_map m;
    struct kv_err e = {{0}};
    memset(&m, 0, sizeof m);
    common_make(&c);
    argtable[n++] = bs; argtable[n++] = tab; argtable[n++] = cl; argtable[n++] = ps;
    argtable[n++] = ds; argtable[n++] = il; argtable[n++] = mc; argtable[n++] = c.format;
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
        (rc = opt_list(cl, "--context-lens", 0, &ctx, &n_ctx)))
        goto done;
    if (n_ctx == 0) {
        rc = kv_usage("--context-lens: no requests");
        goto done;
    }
    if (B % I) {
        rc = kv_usage("--interleave %lld must divide --block-size %lld", (long long)I,
                      (long long)B);
        goto done;
    }
    if (MC % (I * P * D)) {
        rc = kv_usage("--max-context-chunk %lld: expected a multiple of I x P x D = %lld",
                      (long long)MC, (long long)(I * P * D));
        goto done;
    }
    if (kv_read_int_table(tab->sval[0], 0, kv_default_max_mem(), &bt, &bt_rows, &bt_cols, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    struct kv_mla_cp_geom g = {B, P, D, I, MC};
    if (kv_mla_cp_build(&g, bt, bt_rows, bt_cols, ctx, n_ctx, &m, &e)) {
        rc = kv_fail_err(&e);
        goto done;
    }
    rows9 = malloc((m.n ? m.n : 1) * 9 * sizeof *rows9);
    if (!rows9) {
        rc = kv_fail("out of memory");
        goto done;
    }
    for (size_t i = 0; i < m.n; i++) {
        const struct kv_mla_cp_entry *x = &m.e[i];
        int64_t r[9] = {x->req, x->pos, x->chunk, x->pcp_rank, x->dcp_rank, x->local_index,
                        x->local_slot, x->gathered, x->reorg};
        memcpy(rows9 + 9 * i, r, sizeof r);
    }
    if ((rc = open_output(&c, &ko, &o)))
        goto done;
    opened = 1;
    out_hold(&o);
    size_t nc = (size_t)m.n_chunks;
    emit_scalar(&o, "chunk_size", m.chunk_size);
    emit_vec(&o, "toks", m.toks, nc);
    emit_mat(&o, "padded_local_chunk_seq_lens", m.padded_lens, nc, n_ctx);
    emit_mat(&o, "cu_seq_lens", m.cu_seq_lens, nc, n_ctx + 1);
    emit_mat(&o, "local_context_lens", m.local_lens, n_ctx, (size_t)(P * D));
    emit_mat(&o, "map", rows9, m.n, 9);
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
