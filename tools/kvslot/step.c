/* kvslot: writing one step's fields (map and plan). */
#include <jansson.h>
#include "kvslot.h"

/* ---------------------------------------------------------------------- */
/* writing one step                                                       */


/* Block hashes: 16 hex digits each in text (JSON strings in JSON), their
 * int64 bits in npy. */
static void emit_hashes(struct out *o, const char *name, const uint64_t *h,
                        size_t n)
{
    if (o->npy == OUT_JSON) {
        json_t *f = json_array();
        for (size_t i = 0; f && i < n; i++) {
            char hex[20];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h[i]);
            json_array_append_new(f, json_string(hex));
        }
        out_json_field(o, name, f);
        return;
    }
    if (o->npy) {               /* int64 bits whatever --dtype says */
        enum kv_dtype dt = o->dtype;
        o->dtype = KV_I64;
        emit_vec(o, name, (const int64_t *)(const void *)h, n);
        o->dtype = dt;
        return;
    }
    out_bytes(o, name, strlen(name));
    out_bytes(o, ":", 1);
    for (size_t i = 0; i < n; i++) {
        char hex[18];
        snprintf(hex, sizeof hex, " %016llx", (unsigned long long)h[i]);
        out_bytes(o, hex, 17);
    }
    out_bytes(o, "\n", 1);
}

/* block_table.gK or slot_mapping.gK of each group selected: one table
 * (mat: rows x cols) or vector (cols entries) a group; in JSON, commas
 * between them. */
static void emit_groups(struct out *o, const char *base, const int64_t *v,
                        const unsigned char *sel, size_t ng, int mat,
                        size_t rows, size_t cols)
{
    char name[64];
    int first = 1;
    for (size_t g = 0; g < ng; g++) {
        if (!sel[g])
            continue;
        if (!first && o->npy == OUT_JSON)
            out_bytes(o, ",", 1);
        first = 0;
        snprintf(name, sizeof name, "%s.g%zu", base, g);
        if (mat)
            emit_mat(o, name, v + g * rows * cols, rows, cols);
        else
            emit_vec(o, name, v + g * cols, cols);
    }
}

void write_step(struct out *o, const enum fid *fl, size_t nf,
                const struct stepview *v)
{
    const struct kv_slot_step *s = v->s;
    const struct kv_plan_step *p = v->plan;

    for (size_t i = 0; i < nf; i++) {
        const char *nm = fnames[fl[i]];
        switch (fl[i]) {
        case F_STEP: emit_scalar(o, nm, p->step); break;
        case F_REQ_IDS: emit_vec(o, nm, p->req_ids, p->n_rows); break;
        case F_QSL: emit_vec(o, nm, s->query_start_loc, s->n_reqs + 1); break;
        case F_SEQ_LENS: emit_vec(o, nm, s->seq_lens, s->n_reqs); break;
        case F_NUM_COMPUTED:
            emit_vec(o, nm, s->num_computed_tokens, s->n_reqs);
            break;
        case F_NUM_SCHEDULED:
            emit_vec(o, nm, s->num_scheduled_tokens, s->n_reqs);
            break;
        case F_POSITIONS: emit_vec(o, nm, s->positions, s->n_tokens); break;
        case F_REQ_INDICES:
            emit_vec(o, nm, s->req_indices, s->n_tokens);
            break;
        case F_TOKEN_INDICES:
            emit_vec(o, nm, s->token_indices, s->n_tokens);
            break;
        case F_BTI:
            emit_vec(o, nm, s->block_table_indices, s->n_tokens);
            break;
        case F_BLOCK_NUMBERS:
            emit_vec(o, nm, s->block_numbers, s->n_tokens);
            break;
        case F_BLOCK_OFFSETS:
            emit_vec(o, nm, s->block_offsets, s->n_tokens);
            break;
        case F_SLOT_MAPPING:
            if (v->n_groups)
                emit_groups(o, nm, v->gslots, v->sm_sel, v->n_groups, 0,
                            1, v->pad_to);
            else if (v->slot_all)
                emit_mat(o, nm, v->slot_all, v->n_ranks, v->pad_to);
            else
                emit_vec(o, nm, v->slot_padded, v->pad_to);
            break;
        case F_CP_OWNER: emit_vec(o, nm, s->cp_owner, s->n_tokens); break;
        case F_MAX_QUERY_LEN: emit_scalar(o, nm, s->max_query_len); break;
        case F_NUM_TOKENS: emit_scalar(o, nm, (int64_t)s->n_tokens); break;
        case F_NUM_REQS: emit_scalar(o, nm, (int64_t)s->n_reqs); break;
        case F_BLOCK_TABLE:
            if (v->n_groups)
                emit_groups(o, nm, v->gtables, v->bt_sel, v->n_groups,
                            1, v->t_rows, v->t_cols);
            else
                emit_mat(o, nm, v->table, v->t_rows, v->t_cols);
            break;
        case F_WAITING: emit_vec(o, nm, p->waiting, p->n_waiting); break;
        case F_BLOCKED: emit_vec(o, nm, p->blocked, p->n_blocked); break;
        case F_PREEMPTED:
            emit_vec(o, nm, p->preempted, p->n_preempted);
            break;
        case F_FINISHED: emit_vec(o, nm, p->finished, p->n_finished); break;
        case F_FREE_BLOCKS: emit_scalar(o, nm, p->free_blocks); break;
        case F_NUM_CACHED:
            emit_vec(o, nm, p->num_cached, p->num_cached ? p->n_rows : 0);
            break;
        case F_SHARED: emit_vec(o, nm, p->shared, p->n_shared); break;
        case F_EVICTED: emit_hashes(o, nm, p->evicted, p->n_evicted); break;
        case NF: break;
        }
    }
}
