/* kvslot cplens: per-rank KV lengths under interleaving. */
#include "kvslot.h"

int cmd_cplens(int argc, char **argv)
{
    struct arg_str *cps = arg_str1(NULL, "cp-size", "W",
                                   "ranks that shard the KV cache");
    struct arg_str *il = arg_str0(NULL, "interleave", "I",
                                  "cp_kv_cache_interleave_size (default 1)");
    struct arg_str *sl = arg_str1(NULL, "seq-lens", "L0,L1,..",
                                  "sequence length of each request");
    struct arg_str *rk = arg_str0(NULL, "cp-rank", "R",
                                  "only this rank's lengths");
    struct arg_str *mm = arg_str0(NULL, "max-mem", "SIZE",
                                  "memory limit (default 75% of RAM)");
    struct common c;
    void *argtable[16];
    int n = 0, rc, opened = 0;
    int64_t W, I, R, *lens = NULL, *out = NULL;
    size_t n_lens = 0, max_mem = 0;
    struct kv_err e;
    struct kv_out ko;
    struct out o;

    common_make(&c);
    argtable[n++] = cps; argtable[n++] = il; argtable[n++] = sl;
    argtable[n++] = rk; argtable[n++] = mm; argtable[n++] = c.format;
    argtable[n++] = c.dtype; argtable[n++] = c.output; argtable[n++] = c.force;
    argtable[n++] = c.help; argtable[n++] = c.version; argtable[n++] = c.end;
    rc = parse_sub("cplens", argtable, argc, argv, c.help, c.version, c.end,
                   "\nPer-rank KV lengths under interleaving (man 1 kvslot).");
    if (rc >= 0)
        goto done;
    if ((rc = opt_i64(cps, "--cp-size", 1, 1 << 16, 1, &W)) ||
        (rc = opt_i64(il, "--interleave", 1, INT32_MAX, 1, &I)) ||
        (rc = opt_i64(rk, "--cp-rank", 0, INT64_MAX, -1, &R)))
        goto done;
    if (R >= W) {
        rc = kv_usage("--cp-rank %lld: expected below --cp-size %lld",
                      (long long)R, (long long)W);
        goto done;
    }
    if ((rc = opt_list(sl, "--seq-lens", 0, &lens, &n_lens)))
        goto done;
    if (n_lens == 0) {
        rc = kv_usage("--seq-lens: no requests");
        goto done;
    }
    if (kv_parse_max_mem(mm->count ? mm->sval[0] : NULL, &max_mem, &e)) {
        rc = kv_usage("%s", e.msg);
        goto done;
    }
    {
        /* every rank's lengths, and the output held until complete: up to
         * 21 characters an entry in text, 8 bytes in npy */
        size_t cells = mem_mul(n_lens, (size_t)W);
        size_t shown = R >= 0 ? n_lens : cells;
        if ((rc = mem_check(mem_add(mem_mul(cells, 8), mem_mul(shown, 21)), max_mem,
                            "the table of per-rank lengths")))
            goto done;
    }
    out = malloc(n_lens * (size_t)W * sizeof *out);
    if (!out) {
        rc = kv_fail("out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_lens; i++)
        kv_slot_cp_local_lens(lens[i], W, I, out + i * (size_t)W);
    if (R >= 0)
        for (size_t i = 0; i < n_lens; i++)
            out[i] = out[i * (size_t)W + (size_t)R];
    if ((rc = open_output(&c, &ko, &o)))
        goto done;
    opened = 1;
    out_hold(&o);    /* an i32 overflow found mid-way leaves no output */
    if (R >= 0)
        emit_vec(&o, "cp_local_seq_lens", out, n_lens);
    else
        emit_mat(&o, "cp_local_seq_lens", out, n_lens, (size_t)W);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    free(lens);
    free(out);
    free(c.fields);     /* made by common_make, not in this table */
    arg_freetable(argtable, (size_t)n);
    return rc;
}
