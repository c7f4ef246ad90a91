/* kvslot pcp: the DualChunkSwap split of prefill context parallelism. */
#include "kvslot.h"
#include "slot/map_groups.h"

/* Is name selected by --fields (NULL = everything)? */
static int selected(const char *fields, const char *name)
{
    size_t n = strlen(name);
    const char *p = fields;

    if (!fields)
        return 1;
    while ((p = strstr(p, name)) != NULL) {
        if ((p == fields || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
        p += n;
    }
    return 0;
}

static const char *const pcp_ascend_fields[] = {
    "pcp_tokens", "num_pcp_pads", "pcp_unpad_mask",
    "pcp_allgather_restore_idx", "rank", "positions", "q_head_idx",
    "q_tail_idx", "kv_with_q_head_nomask_idx", "kv_with_q_head_mask_idx",
    "kv_with_q_tail_nomask_idx", "kv_with_q_tail_mask_idx", "q_full_idx",
    "attn_mask_seqlens", "head_attn_nomask_seqlens",
    "tail_attn_nomask_seqlens", "slot_mapping",
};

static const char *const pcp_vllm_fields[] = {
    "num_tokens_per_rank", "padded_gather_idx", "gathered_kv_write_mask",
    "hidden_restore_idx", "slot_mapping", "rank", "positions", "req_indices",
    "row_req_ids", "query_start_loc", "seq_lens",
};

/* Every name in --fields must be one of names[]. */
static int check_names(const char *fields, const char *const *names,
                       size_t n_names, const char *what)
{
    char name[64];

    if (!fields)
        return 0;
    while (*fields) {
        size_t len = strcspn(fields, ",");
        int ok = 0;
        if (len == 0 || len >= sizeof name)
            return kv_usage("--fields: empty or overlong name");
        memcpy(name, fields, len);
        name[len] = '\0';
        for (size_t i = 0; i < n_names; i++)
            if (strcmp(name, names[i]) == 0)
                ok = 1;
        if (!ok) {
            char valid[1024];
            size_t k = 0;
            valid[0] = '\0';
            for (size_t i = 0; i < n_names; i++)
                k += (size_t)snprintf(valid + k, sizeof valid - k, "%s%s",
                                      k ? " " : "", names[i]);
            return kv_usage("--fields: unknown field '%s' for %s; valid: %s",
                            name, what, valid);
        }
        fields += len;
        if (*fields == ',')
            fields++;
    }
    return 0;
}

/* Slot mapping of the unsplit batch (tokens per request, computed) for a
 * CP geometry, into *out (malloc'd, n_tokens entries). */
static int batch_slots(const struct kv_slot_geom *g,
                       const struct kv_slot_table *t, size_t n_reqs,
                       const int64_t *tokens, const int64_t *computed,
                       int64_t **out, struct kv_err *e)
{
    struct kv_slot_step st;

    kv_slot_step_init(&st);
    if (kv_slot_compute(g, t, n_reqs, tokens, computed,
                        1u << KV_SLOT_SLOT_MAPPING, &st, e))
        return -1;
    *out = st.slot_mapping;
    st.slot_mapping = NULL;
    kv_slot_step_release(&st);
    return 0;
}

static const char pcp_synopsis[] =
    "\nThe DualChunkSwap split of prefill context parallelism: per-rank "
    "positions,\npads, unpad mask, all-gather restore index, head/tail "
    "index sets; with --layout\nvllm the gather index, KV write mask, "
    "restore index and each rank's rows\n(man 1 kvslot).";

/* pcp --layout vllm's fields. */
static void pcp_write_vllm(struct out *po, const char *fields,
                           const struct kv_pcp_vllm *pv, int64_t P,
                           int64_t k_only, const int64_t *computed,
                           const int64_t *sm)
{
    if (selected(fields, "num_tokens_per_rank"))
        emit_vec(po, "num_tokens_per_rank", pv->per_rank, (size_t)P);
    if (selected(fields, "padded_gather_idx"))
        emit_vec(po, "padded_gather_idx", pv->gather_idx,
                 (size_t)(P * pv->padded));
    if (selected(fields, "gathered_kv_write_mask"))
        emit_vec(po, "gathered_kv_write_mask", pv->write_mask,
                 (size_t)(P * pv->padded));
    if (selected(fields, "hidden_restore_idx"))
        emit_vec(po, "hidden_restore_idx", pv->restore_idx, pv->n_tokens);
    if (sm && selected(fields, "slot_mapping"))
        emit_vec(po, "slot_mapping", sm, (size_t)(P * pv->padded));
    for (int64_t k = 0; k < P; k++) {
        int64_t r0 = pv->row_start[k], r1 = pv->row_start[k + 1];
        size_t t0 = 0, nr = (size_t)(r1 - r0);
        int64_t *qsl, *sl, *ri;
        if (k_only >= 0 && k != k_only)
            continue;
        for (int64_t q = 0; q < k; q++)
            t0 += (size_t)pv->per_rank[q];
        qsl = malloc((nr + 2) * sizeof *qsl);
        sl = malloc((nr ? nr : 1) * sizeof *sl);
        ri = malloc(((size_t)pv->per_rank[k] ? (size_t)pv->per_rank[k] : 1) *
                    sizeof *ri);
        if (!qsl || !sl || !ri) {
            free(qsl);
            free(sl);
            free(ri);
            po->failed = 1;
            kv_err_set(&po->err, "out of memory");
            break;
        }
        qsl[0] = 0;
        for (size_t r = 0; r < nr; r++) {
            size_t i = (size_t)pv->row_req[r0 + (int64_t)r];
            qsl[r + 1] = qsl[r] + pv->row_len[r0 + (int64_t)r];
            sl[r] = (computed ? computed[i] : 0) +
                    pv->row_pos[r0 + (int64_t)r] + pv->row_len[r0 + (int64_t)r];
            for (int64_t j = qsl[r]; j < qsl[r + 1]; j++)
                ri[j] = (int64_t)i;
        }
        if (selected(fields, "rank"))
            emit_scalar(po, "rank", k);
        if (selected(fields, "positions"))
            emit_vec(po, "positions", pv->positions + t0,
                     (size_t)pv->per_rank[k]);
        if (selected(fields, "req_indices"))
            emit_vec(po, "req_indices", ri, (size_t)pv->per_rank[k]);
        if (nr == 0) {
            /* MRV2 partition_batch gives a rank without tokens one
             * empty row of request 0, its sequence length zeroed */
            static const int64_t req0 = 0;
            qsl[1] = 0;
            sl[0] = 0;
            if (selected(fields, "row_req_ids"))
                emit_vec(po, "row_req_ids", &req0, 1);
            if (selected(fields, "query_start_loc"))
                emit_vec(po, "query_start_loc", qsl, 2);
            if (selected(fields, "seq_lens"))
                emit_vec(po, "seq_lens", sl, 1);
            free(qsl);
            free(sl);
            free(ri);
            continue;
        }
        if (selected(fields, "row_req_ids"))
            emit_vec(po, "row_req_ids", pv->row_req + r0, nr);
        if (selected(fields, "query_start_loc"))
            emit_vec(po, "query_start_loc", qsl, nr + 1);
        if (selected(fields, "seq_lens"))
            emit_vec(po, "seq_lens", sl, nr);
        free(qsl);
        free(sl);
        free(ri);
    }
}

/* pcp --layout ascend's fields: the global ones from rank 0, then each
 * rank's (a is split again per rank). */
static void pcp_write_ascend(struct out *po, const char *fields,
                             struct kv_pcp_ascend *pa,
                             const struct kv_slot_geom *g0,
                             const struct kv_slot_table *t, int64_t P,
                             int64_t DS, int64_t DR, int64_t k_only, int64_t B,
                             size_t n_tok, const int64_t *tokens,
                             const int64_t *computed, size_t n_dec,
                             int64_t **gslots)
{
    struct kv_slot_geom g = *g0;
    /* the global fields (the same on every rank), from rank 0 */
    if (selected(fields, "pcp_tokens"))
        emit_vec(po, "pcp_tokens", pa->pcp_tokens, n_tok);
    if (selected(fields, "num_pcp_pads"))
        emit_vec(po, "num_pcp_pads", pa->num_pcp_pads, n_tok);
    if (selected(fields, "pcp_unpad_mask"))
        emit_vec(po, "pcp_unpad_mask", pa->unpad_mask, pa->n_padded);
    if (selected(fields, "pcp_allgather_restore_idx"))
        emit_vec(po, "pcp_allgather_restore_idx", pa->restore_idx,
                 pa->n_padded);
    for (int64_t k = 0; k < P && !po->failed; k++) {
        if (k_only >= 0 && k != k_only)
            continue;
        if (k > 0) {
            kv_pcp_ascend_release(pa);
            if (kv_pcp_ascend_split(tokens, computed, n_tok, n_dec, P, k,
                                    pa, &po->err)) {
                po->failed = 1;
                break;
            }
        }
        if (selected(fields, "rank"))
            emit_scalar(po, "rank", k);
        if (selected(fields, "positions"))
            emit_vec(po, "positions", pa->positions, pa->n_local);
        if (selected(fields, "q_head_idx"))
            emit_vec(po, "q_head_idx", pa->q_head_idx, pa->n_q);
        if (selected(fields, "q_tail_idx"))
            emit_vec(po, "q_tail_idx", pa->q_tail_idx, pa->n_q);
        if (selected(fields, "kv_with_q_head_nomask_idx"))
            emit_vec(po, "kv_with_q_head_nomask_idx", pa->kv_head_nomask,
                     pa->n_head_nomask);
        if (selected(fields, "kv_with_q_head_mask_idx"))
            emit_vec(po, "kv_with_q_head_mask_idx", pa->kv_head_mask,
                     pa->n_q);
        if (selected(fields, "kv_with_q_tail_nomask_idx"))
            emit_vec(po, "kv_with_q_tail_nomask_idx", pa->kv_tail_nomask,
                     pa->n_tail_nomask);
        if (selected(fields, "kv_with_q_tail_mask_idx"))
            emit_vec(po, "kv_with_q_tail_mask_idx", pa->kv_tail_mask,
                     pa->n_q);
        if (selected(fields, "q_full_idx"))
            emit_vec(po, "q_full_idx", pa->q_full_idx, 2 * pa->n_q);
        if (selected(fields, "attn_mask_seqlens"))
            emit_vec(po, "attn_mask_seqlens", pa->attn_mask_seqlens,
                     pa->n_reqs - pa->n_decodes);
        if (selected(fields, "head_attn_nomask_seqlens"))
            emit_vec(po, "head_attn_nomask_seqlens",
                     pa->head_attn_nomask_seqlens, pa->n_reqs - pa->n_decodes);
        if (selected(fields, "tail_attn_nomask_seqlens"))
            emit_vec(po, "tail_attn_nomask_seqlens",
                     pa->tail_attn_nomask_seqlens, pa->n_reqs - pa->n_decodes);
        if (B && selected(fields, "slot_mapping")) {
            /* this rank's slots of the unsplit batch, scattered into
             * the padded all-gather layout (get_padded_slot_mapping) */
            struct kv_err e2;
            size_t src = 0;
            int64_t *pad = malloc((pa->n_padded ? pa->n_padded : 1) *
                                  sizeof *pad);
            g.cp_rank = k * DS + DR;
            free(*gslots);
            *gslots = NULL;
            if (!pad || batch_slots(&g, t, n_tok, tokens, computed,
                                    gslots, &e2)) {
                free(pad);
                po->failed = 1;
                kv_err_set(&po->err, "out of memory");
                break;
            }
            for (size_t j = 0; j < pa->n_padded; j++)
                pad[j] = pa->unpad_mask[j] ? (*gslots)[src++] : KV_SLOT_PAD;
            emit_vec(po, "slot_mapping", pad, pa->n_padded);
            free(pad);
        }
    }
}

struct pcp_args {
    struct arg_str *ps, *tok, *dec, *comp, *rk, *lay, *bs, *table, *ds, *dr,
                   *il, *maxmem;
    struct common c;
};

/* pcp's options, in the order --help lists them; returns the count. */
static int pcp_args_make(struct pcp_args *a, void **t)
{
    int n = 0;
    common_make(&a->c);
    a->c.fields->hdr.glossary = "fields to write (pcp keeps its fixed order)";
    t[n++] = a->ps = arg_str1(NULL, "pcp-size", "P", "PCP world size");
    t[n++] = a->tok = arg_str1(NULL, "tokens", "n0,n1,..",
                               "tokens scheduled per request");
    t[n++] = a->dec = arg_str0(NULL, "decodes", "D",
                               "the first D requests are decodes "
                               "(default: leading 1-token requests)");
    t[n++] = a->comp = arg_str0(NULL, "computed", "c0,c1,..",
                                "tokens already computed per request");
    t[n++] = a->rk = arg_str0(NULL, "rank", "k", "only this rank");
    t[n++] = a->lay = arg_str0(NULL, "layout", "ascend|vllm",
                               "vllm-ascend (padded) or vLLM MRV2 "
                               "(default ascend)");
    t[n++] = a->bs = arg_str0("B", "block-size", "N",
                              "block size (with --block-table: "
                              "slot_mapping)");
    t[n++] = a->table = arg_str0(NULL, "block-table", "FILE",
                                 "block table: text rows or int .npy");
    t[n++] = a->ds = arg_str0(NULL, "dcp-size", "D",
                              "decode context parallel size (default 1; "
                              "--layout vllm: also places decodes)");
    t[n++] = a->dr = arg_str0(NULL, "dcp-rank", "d",
                              "this DCP rank (default 0)");
    t[n++] = a->il = arg_str0(NULL, "interleave", "I",
                              "cp_kv_cache_interleave_size (default 1)");
    t[n++] = a->maxmem = arg_str0(NULL, "max-mem", "SIZE",
                                  "memory limit (default 75% of RAM)");
    n += common_add(&a->c, t + n);
    return n;
}

/* One pcp run: the options' values, the block table and the split. */
struct pcp_run {
    int64_t P, D, k_only, B, DS, DR, I;
    size_t max_mem;
    int64_t *tokens, *computed, *ids, *gslots, *sm;
    size_t n_tok, n_comp, n_dec;
    int vllm;
    const char *fields;
    struct kv_pcp_ascend a;
    struct kv_pcp_vllm v;
    struct kv_slot_geom g;
    struct kv_slot_table t;
};

/* The numeric options and the layout, checked against each other. */
static int pcp_numbers(const struct pcp_args *a, struct pcp_run *r)
{
    int rc;
    if ((rc = opt_i64(a->ps, "--pcp-size", 1, 1 << 16, 1, &r->P)) ||
        (rc = opt_i64(a->dec, "--decodes", 0, INT64_MAX, -1, &r->D)) ||
        (rc = opt_i64(a->rk, "--rank", 0, INT64_MAX, -1, &r->k_only)) ||
        (rc = opt_i64(a->bs, "-B", 1, INT32_MAX, 0, &r->B)) ||
        (rc = opt_i64(a->ds, "--dcp-size", 1, 1 << 16, 1, &r->DS)) ||
        (rc = opt_i64(a->dr, "--dcp-rank", 0, INT64_MAX, 0, &r->DR)) ||
        (rc = opt_i64(a->il, "--interleave", 1, INT32_MAX, 1, &r->I)))
        return rc;
    if (a->lay->count && strcmp(a->lay->sval[0], "vllm") == 0)
        r->vllm = 1;
    else if (a->lay->count && strcmp(a->lay->sval[0], "ascend") != 0)
        return kv_usage("--layout: expected ascend or vllm, got '%s'",
                        a->lay->sval[0]);
    r->fields = a->c.fields->count ? a->c.fields->sval[0] : NULL;
    if ((rc = r->vllm ? check_names(r->fields, pcp_vllm_fields,
                                    N_ELEMS(pcp_vllm_fields),
                                    "pcp --layout vllm")
                      : check_names(r->fields, pcp_ascend_fields,
                                    N_ELEMS(pcp_ascend_fields),
                                    "pcp --layout ascend")))
        return rc;
    if (r->k_only >= r->P)
        return kv_usage("--rank %lld: expected below --pcp-size %lld",
                        (long long)r->k_only, (long long)r->P);
    if (r->DR >= r->DS)
        return kv_usage("--dcp-rank %lld: expected below --dcp-size %lld",
                        (long long)r->DR, (long long)r->DS);
    return 0;
}

/* An upper bound on what the split holds, all of it growing with the
 * tokens N (each request padded to a multiple of 2P) and the ranks P: the
 * arrays of two ranks' splits (index sets up to 2N + 4N/P entries each,
 * the head and tail key sets included), the batch's slots, and the output,
 * which is kept in memory until it is complete: (2P + 8) N entries at
 * most, at 4 or 8 bytes in npy and up to 21 characters in text. */
static size_t pcp_bytes(const struct pcp_run *r, const struct pcp_args *a)
{
    size_t n = 0, P = (size_t)r->P, out;
    for (size_t i = 0; i < r->n_tok; i++)
        n = mem_add(n, mem_add((size_t)r->tokens[i], 2 * P));
    size_t arrays = mem_mul(mem_mul(n, 8), 2 * (4 + 4 / P + 1) + 3);
    const char *f = a->c.format->count ? a->c.format->sval[0] : "auto";
    const char *d = a->c.dtype->count ? a->c.dtype->sval[0] : "i64";
    size_t per = strcmp(f, "text") == 0 ? 21 : strcmp(d, "i32") == 0 ? 4 : 8;
    if (strcmp(f, "auto") == 0 && kv_isatty(stdout) && !a->c.output->count)
        per = 21;
    out = mem_mul(mem_mul(n, 2 * P + 8), per);
    return mem_add(mem_add(arrays, out), mem_mul(r->n_tok, 8 * 8));
}

/* The requests (--tokens, --computed, --decodes) and the block table. */
static int pcp_requests(const struct pcp_args *a, struct pcp_run *r)
{
    struct kv_err e;
    size_t rows = 0, cols = 0;
    int rc;
    if ((rc = opt_list(a->tok, "--tokens", 1, &r->tokens, &r->n_tok)) ||
        (rc = opt_list(a->comp, "--computed", 0, &r->computed, &r->n_comp)))
        return rc;
    if (r->n_tok == 0)
        return kv_usage("--tokens: no requests");
    if (a->comp->count && r->n_comp != r->n_tok)
        return kv_usage("--computed has %zu values, --tokens has %zu",
                        r->n_comp, r->n_tok);
    if (r->D > (int64_t)r->n_tok)
        return kv_usage("--decodes %lld: only %zu requests", (long long)r->D,
                        r->n_tok);
    if (kv_parse_max_mem(a->maxmem->count ? a->maxmem->sval[0] : NULL,
                         &r->max_mem, &e))
        return kv_usage("%s", e.msg);
    if ((rc = mem_check(pcp_bytes(r, a), r->max_mem, "the split")))
        return rc;
    r->n_dec = r->D >= 0 ? (size_t)r->D
                         : kv_pcp_count_decodes(r->tokens, r->computed,
                                                r->n_tok, 1);
    if (!!a->bs->count != !!a->table->count)
        return kv_usage("-B and --block-table go together");
    if (!r->B && ((a->ds->count && !r->vllm) || a->dr->count ||
                  a->il->count))
        /* they only shape slot_mapping (but the DCP size places decodes
         * and short prefills in the vllm layout); silently ignoring them
         * would let a caller believe the split depends on them */
        return kv_usage("%s only shapes slot_mapping: give -B and "
                        "--block-table too",
                        a->ds->count && !r->vllm ? "--dcp-size" :
                        a->dr->count ? "--dcp-rank" : "--interleave");
    if (r->B && r->B % r->I)
        return kv_usage("--interleave %lld does not divide -B %lld",
                        (long long)r->I, (long long)r->B);
    if (!r->B)
        return 0;
    if (kv_map_table_read(a->table->sval[0], r->max_mem, r->n_tok,
                          r->tokens, r->computed,
                          r->B * (r->vllm ? r->DS : r->P * r->DS), &r->ids,
                          &rows, &cols, &e))
        return kv_fail_err(&e);
    memset(&r->g, 0, sizeof r->g);
    r->g.block_size = r->B;
    r->g.kernel_block_size = r->B;
    r->g.interleave = r->I;
    r->g.virt = KV_SLOT_VIRTUAL_KERNEL;
    r->g.max_model_len = INT64_MAX / 4;
    r->t.ids = r->ids;
    r->t.n_rows = rows;
    r->t.n_cols = cols;
    return 0;
}

/* The split of either layout, and with -B the slots it needs. */
static int pcp_split(struct pcp_run *r)
{
    struct kv_err e;
    if (!r->vllm) {
        /* rank 0 validates the input and gives the global fields */
        if (kv_pcp_ascend_split(r->tokens, r->computed, r->n_tok, r->n_dec,
                                r->P, 0, &r->a, &e))
            return kv_fail_err(&e);
        if (!r->B)
            return 0;
        /* checked once here so that the rank loop cannot fail */
        r->g.cp_world = r->P * r->DS;
        r->g.cp_rank = 0;
        if (batch_slots(&r->g, &r->t, r->n_tok, r->tokens, r->computed,
                        &r->gslots, &e))
            return kv_fail_err(&e);
        return 0;
    }
    if (kv_pcp_vllm_split(r->tokens, r->computed, r->n_tok, r->n_dec, r->P,
                          r->DS, &r->v, &e))
        return kv_fail_err(&e);
    if (!r->B)
        return 0;
    /* newest convention: only DCP shards the KV cache */
    size_t m = (size_t)r->P * (size_t)r->v.padded;
    r->g.cp_world = r->DS;
    r->g.cp_rank = r->DR;
    if (batch_slots(&r->g, &r->t, r->n_tok, r->tokens, r->computed,
                    &r->gslots, &e))
        return kv_fail_err(&e);
    r->sm = malloc((m ? m : 1) * sizeof *r->sm);
    if (!r->sm)
        return kv_fail("out of memory");
    for (size_t j = 0; j < m; j++)
        r->sm[j] = r->v.write_mask[j] ? r->gslots[r->v.gather_idx[j]]
                                      : KV_SLOT_PAD;
    return 0;
}

int cmd_pcp(int argc, char **argv)
{
    struct pcp_args a;
    struct pcp_run r;
    struct kv_out ko;
    struct out o;
    void *argtable[24];
    int n = pcp_args_make(&a, argtable), rc, opened = 0;

    memset(&r, 0, sizeof r);
    r.D = r.k_only = -1;
    rc = parse_sub("pcp", argtable, argc, argv, a.c.help, a.c.version,
                   a.c.end, pcp_synopsis);
    if (rc >= 0 || (rc = pcp_numbers(&a, &r)) || (rc = pcp_requests(&a, &r)) ||
        (rc = pcp_split(&r)) || (rc = open_output(&a.c, &ko, &o)))
        goto done;
    opened = 1;
    out_hold(&o);    /* an i32 overflow found mid-way leaves no output */
    if (r.vllm)
        pcp_write_vllm(&o, r.fields, &r.v, r.P, r.k_only, r.computed, r.sm);
    else
        pcp_write_ascend(&o, r.fields, &r.a, &r.g, &r.t, r.P, r.DS, r.DR,
                         r.k_only, r.B, r.n_tok, r.tokens, r.computed, r.n_dec,
                         &r.gslots);
    opened = 0;
    rc = close_output(&ko, &o);
done:
    if (opened) {
        out_release(&o);
        kv_out_abort(&ko);
    }
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_pcp_ascend_release(&r.a);
    kv_pcp_vllm_release(&r.v);
    free(r.tokens);
    free(r.computed);
    free(r.ids);
    free(r.gslots);
    free(r.sm);
    arg_freetable(argtable, (size_t)n);
    return rc;
}
