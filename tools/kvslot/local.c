/* kvslot local: the virtual batches of a chunked local attention layer
 * (Llama 4), as vLLM's make_local_attention_virtual_batches builds them
 * from one step (lib/slot/groups.h); 'kvslot step --chunk-size' is the
 * same (stepcmd.c). */
#include "kvslot.h"
#include "slot/groups.h"

/* Write the virtual batches of one step: C the chunk, B the block size,
 * table the --block-table path, sched/comp the per-request token counts
 * (comp may be NULL).  Returns an exit code. */
int run_local(struct common *c, int64_t C, int64_t B, const char *table,
              const int64_t *sched, size_t n_sched, const int64_t *comp)
{
    int rc, opened = 0;
    int64_t *ids = NULL, *seq = NULL;
    size_t rows = 0, cols = 0;
    struct kv_local_batches lb;
    struct kv_out ko;
    struct out o;
    struct kv_err e;

    memset(&lb, 0, sizeof lb);
    if (n_sched == 0) {
        rc = kv_usage("--scheduled: no requests");
        goto done;
    }
    if (C % B) {
        rc = kv_usage("--chunk-size %lld: not a multiple of --block-size %lld",
                      (long long)C, (long long)B);
        goto done;
    }
    seq = malloc(n_sched * sizeof *seq);
    if (!seq) {
        rc = kv_fail("out of memory");
        goto done;
    }
    for (size_t r = 0; r < n_sched; r++) {
        if (comp && comp[r] > INT32_MAX - sched[r]) {
            rc = kv_usage("--computed: request %zu: %lld + %lld tokens exceed "
                          "2^31 - 1", r, (long long)comp[r],
                          (long long)sched[r]);
            goto done;
        }
        seq[r] = sched[r] + (comp ? comp[r] : 0);
    }
    /* short rows: vLLM's block table tensor is zero-filled */
    if (kv_read_int_table(table, 0, kv_default_max_mem(), &ids, &rows,
                          &cols, &e)) {
        rc = kv_fail("--block-table: %s", e.msg);
        goto done;
    }
    if (rows != n_sched) {
        rc = kv_fail("--block-table: %zu rows for %zu requests", rows, n_sched);
        goto done;
    }
    if (kv_local_virtual_batches(&lb, C, B, sched, seq, n_sched, ids, cols,
                                 &e)) {
        rc = kv_fail("%s", e.msg);
        goto done;
    }
    if ((rc = open_output(c, &ko, &o)))
        goto done;
    opened = 1;
    out_hold(&o);
    emit_vec(&o, "query_start_loc", lb.query_start_loc, lb.n_virtual + 1);
    emit_vec(&o, "seq_lens", lb.seq_lens, lb.n_virtual);
    emit_mat(&o, "block_table", lb.block_table, lb.n_virtual, lb.pages);
    emit_scalar(&o, "max_query_len", lb.max_query_len);
    emit_scalar(&o, "max_seq_len", lb.max_seq_len);
    emit_vec(&o, "req_indices", lb.req_indices, lb.n_virtual);
    emit_vec(&o, "k_start", lb.k_start, lb.n_virtual);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    kv_local_batches_release(&lb);
    free(seq);
    free(ids);
    return rc;
}

/* kvslot local: the same as 'kvslot step --chunk-size' (stepcmd.c). */
int cmd_local(int argc, char **argv)
{
    struct arg_str *cs = arg_str1(NULL, "chunk-size", "C",
                                  "attention_chunk_size");
    struct arg_str *bs = arg_str1("B", "block-size", "B",
                                  "tokens per KV-cache block");
    struct arg_str *bt = arg_str1(NULL, "block-table", "FILE",
                                  "block table, one row per request (text or "
                                  "integer .npy)");
    struct arg_str *sc = arg_str1(NULL, "scheduled", "n0,n1,..",
                                  "tokens scheduled per request");
    struct arg_str *cp = arg_str0(NULL, "computed", "c0,c1,..",
                                  "tokens already computed per request "
                                  "(default 0)");
    struct common c;
    void *argtable[20];
    int n = 0, rc;
    int64_t C, B, *sched = NULL, *comp = NULL;
    size_t n_sched = 0, n_comp = 0;

    common_make(&c);
    argtable[n++] = cs; argtable[n++] = bs; argtable[n++] = bt;
    argtable[n++] = sc; argtable[n++] = cp; argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("local", argtable, argc, argv, c.help, c.version, c.end,
                   "\nThe virtual batches of chunked local attention, the same "
                   "as 'kvslot step\n--chunk-size' (man 1 kvslot, LOCAL "
                   "ATTENTION).");
    if (rc >= 0)
        goto done;
    if ((rc = opt_i64(cs, "--chunk-size", 1, INT32_MAX, 0, &C)) ||
        (rc = opt_i64(bs, "--block-size", 1, INT32_MAX, 0, &B)) ||
        (rc = opt_list(sc, "--scheduled", 0, &sched, &n_sched)) ||
        (rc = opt_list(cp, "--computed", 0, &comp, &n_comp)))
        goto done;
    if (cp->count && n_comp != n_sched) {
        rc = kv_usage("--computed has %zu values, --scheduled has %zu",
                      n_comp, n_sched);
        goto done;
    }
    rc = run_local(&c, C, B, bt->sval[0], sched, n_sched, comp);
done:
    free(sched);
    free(comp);
    free(c.fields);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
