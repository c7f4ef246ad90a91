/* pcp.c - the DualChunkSwap split of prefill context parallelism (see
 * pcp.h).  Index sets are built request by request; the all-gather restore
 * index is the inverse of the permutation the ranks' positions form (the
 * upstream argsort of distinct values). */
#include <stdlib.h>
#include <string.h>
#include "slot/pcp.h"
#include "core/tensor.h"

static int grab(int64_t **p, size_t n, struct kv_err *e)
{
    size_t bytes;

    if (kv_size_mul(n ? n : 1, sizeof **p, &bytes))
        return kv_err_set(e, "pcp layout of %zu entries is too large", n);
    *p = calloc(1, bytes);
    if (!*p)
        return kv_err_set(e, "out of memory for %zu entries", n);
    return 0;
}

size_t kv_pcp_count_decodes(const int64_t *tokens, const int64_t *computed,
                            size_t n_reqs, int64_t threshold)
{
    size_t d = 0;

    while (d < n_reqs && tokens[d] <= threshold &&
           (!computed || computed[d] > 0))
        d++;
    return d;
}

static int check_input(const int64_t *tokens, const int64_t *computed,
                       size_t n_reqs, size_t n_decodes, int64_t pcp_size,
                       struct kv_err *e)
{
    if (pcp_size < 1 || pcp_size > (1 << 16))
        return kv_err_set(e, "pcp size %lld: expected 1 .. 65536",
                          (long long)pcp_size);
    if (n_decodes > n_reqs)
        return kv_err_set(e, "%zu decode requests but only %zu requests",
                          n_decodes, n_reqs);
    for (size_t i = 0; i < n_reqs; i++) {
        if (tokens[i] < 1 || tokens[i] > (INT64_C(1) << 40))
            return kv_err_set(e, "request %zu: %lld tokens: expected 1 .. "
                              "2^40", i, (long long)tokens[i]);
        if (computed && (computed[i] < 0 || computed[i] > (INT64_C(1) << 40)))
            return kv_err_set(e, "request %zu: %lld computed tokens: "
                              "expected 0 .. 2^40", i,
                              (long long)computed[i]);
    }
    return 0;
}

void kv_pcp_ascend_release(struct kv_pcp_ascend *p)
{
    free(p->pcp_tokens);
    free(p->num_pcp_pads);
    free(p->unpad_mask);
    free(p->restore_idx);
    free(p->positions);
    free(p->q_head_idx);
    free(p->q_tail_idx);
    free(p->q_full_idx);
    free(p->kv_head_nomask);
    free(p->kv_head_mask);
    free(p->kv_tail_nomask);
    free(p->kv_tail_mask);
    free(p->attn_mask_seqlens);
    free(p->head_attn_nomask_seqlens);
    free(p->tail_attn_nomask_seqlens);
    memset(p, 0, sizeof *p);
}

/* Padded length, per-rank tokens and chunk of request i (ascend). */
static void ascend_sizes(int64_t n, int is_decode, int64_t P, int64_t *padded,
                         int64_t *local, int64_t *chunk)
{
    if (is_decode) {
        *padded = n * P;
        *local = n;
        *chunk = n;
    } else {
        *padded = (n + 2 * P - 1) / (2 * P) * (2 * P);
        *local = *padded / P;
        *chunk = *local / 2 > 1 ? *local / 2 : 1;
    }
}

/* Position (inside the padded request) of rank k's j-th local token. */
static int64_t ascend_pos(int64_t j, int64_t chunk, int is_decode, int64_t P,
                          int64_t k)
{
    if (is_decode || j < chunk)
        return k * chunk + j;
    return (2 * P - 1 - k) * chunk + (j - chunk);
}

int kv_pcp_ascend_split(const int64_t *tokens, const int64_t *computed,
                        size_t n_reqs, size_t n_decodes, int64_t P,
                        int64_t rank, struct kv_pcp_ascend *out,
                        struct kv_err *e)
{
    struct kv_pcp_ascend a;
    size_t n_padded = 0, n_local = 0, n_q = 0, n_hn = 0, n_tn = 0;
    size_t at, q, hn, tn, pi;
    int64_t h = rank, t = 2 * P - 1 - rank, qo = 0, ko = 0;
    int64_t sum_c = 0, sum_h = 0, sum_t = 0;

    if (check_input(tokens, computed, n_reqs, n_decodes, P, e))
        return -1;
    if (rank < 0 || rank >= P)
        return kv_err_set(e, "rank %lld is not below the pcp size %lld",
                          (long long)rank, (long long)P);
    memset(&a, 0, sizeof a);
    a.n_reqs = n_reqs;
    a.n_decodes = n_decodes;
    a.n_prefills = n_reqs - n_decodes;
    a.pcp_size = P;
    a.rank = rank;
    for (size_t i = 0; i < n_reqs; i++) {
        int64_t pad, loc, c;
        ascend_sizes(tokens[i], i < n_decodes, P, &pad, &loc, &c);
        n_padded += (size_t)pad;
        n_local += (size_t)loc;
        if (i >= n_decodes) {
            n_q += (size_t)(loc / 2);
            n_hn += (size_t)(loc / 2 * h);
            n_tn += (size_t)(loc / 2 * t);
        }
    }
    a.n_padded = n_padded;
    a.n_local = n_local;
    a.n_q = n_q;
    a.n_head_nomask = n_hn;
    a.n_tail_nomask = n_tn;
    if (grab(&a.pcp_tokens, n_reqs, e) || grab(&a.num_pcp_pads, n_reqs, e) ||
        grab(&a.unpad_mask, n_padded, e) ||
        grab(&a.restore_idx, n_padded, e) ||
        grab(&a.positions, n_local, e) || grab(&a.q_head_idx, n_q, e) ||
        grab(&a.q_tail_idx, n_q, e) || grab(&a.q_full_idx, 2 * n_q, e) ||
        grab(&a.kv_head_nomask, n_hn, e) || grab(&a.kv_head_mask, n_q, e) ||
        grab(&a.kv_tail_nomask, n_tn, e) || grab(&a.kv_tail_mask, n_q, e) ||
        grab(&a.attn_mask_seqlens, a.n_prefills, e) ||
        grab(&a.head_attn_nomask_seqlens, a.n_prefills, e) ||
        grab(&a.tail_attn_nomask_seqlens, a.n_prefills, e)) {
        kv_pcp_ascend_release(&a);
        return -1;
    }
    /* global: pads, unpad mask, restore index (all ranks' positions) */
    at = 0;
    for (size_t i = 0, start = 0; i < n_reqs; i++) {
        int dec = i < n_decodes;
        int64_t n = tokens[i], pad, loc, c;
        ascend_sizes(n, dec, P, &pad, &loc, &c);
        a.pcp_tokens[i] = loc;
        a.num_pcp_pads[i] = pad - n;
        for (int64_t j = 0; j < pad; j++)
            a.unpad_mask[start + (size_t)j] = dec ? j % P == 0 : j < n;
        start += (size_t)pad;
    }
    /* rank-major all-gather: rank k's j-th local token of request i sits
     * at k*n_local + (local offset); its padded index is start + pos. */
    for (int64_t k = 0; k < P; k++) {
        size_t lo = 0, start = 0;
        for (size_t i = 0; i < n_reqs; i++) {
            int dec = i < n_decodes;
            int64_t pad, loc, c;
            ascend_sizes(tokens[i], dec, P, &pad, &loc, &c);
            for (int64_t j = 0; j < loc; j++) {
                int64_t pos = ascend_pos(j, c, dec, P, k);
                a.restore_idx[start + (size_t)pos] =
                    k * (int64_t)n_local + (int64_t)(lo + (size_t)j);
            }
            lo += (size_t)loc;
            start += (size_t)pad;
        }
    }
    /* this rank: positions and head/tail index sets */
    at = q = hn = tn = pi = 0;
    for (size_t i = 0; i < n_reqs; i++) {
        int dec = i < n_decodes;
        int64_t pad, loc, c, base = computed ? computed[i] : 0;
        ascend_sizes(tokens[i], dec, P, &pad, &loc, &c);
        for (int64_t j = 0; j < loc; j++)
            a.positions[at + (size_t)j] =
                base + (dec ? j : ascend_pos(j, c, 0, P, rank));
        at += (size_t)loc;
        if (dec)
            continue;
        c = loc / 2;
        for (int64_t j = 0; j < c; j++) {
            a.q_head_idx[q + (size_t)j] = qo + j;
            a.q_tail_idx[q + (size_t)j] = qo + c + j;
            a.kv_head_mask[q + (size_t)j] = ko + c * h + j;
            a.kv_tail_mask[q + (size_t)j] = ko + c * t + j;
        }
        for (int64_t j = 0; j < c * h; j++)
            a.kv_head_nomask[hn++] = ko + j;
        for (int64_t j = 0; j < c * t; j++)
            a.kv_tail_nomask[tn++] = ko + j;
        q += (size_t)c;
        sum_c += c;
        sum_h += c * h;
        sum_t += c * t;
        a.attn_mask_seqlens[pi] = sum_c;
        a.head_attn_nomask_seqlens[pi] = sum_h;
        a.tail_attn_nomask_seqlens[pi] = sum_t;
        pi++;
        qo += loc;
        ko += loc * P;
    }
    /* q_full_idx = argsort(q_head ++ q_tail): the values are distinct */
    {
        int64_t *v = a.q_full_idx;
        /* q_head ++ q_tail holds every value in [0, 2 n_q) once, because
         * each prefill contributes [qo, qo + 2c) and loc = 2c */
        for (size_t j = 0; j < n_q; j++) {
            v[a.q_head_idx[j]] = (int64_t)j;
            v[a.q_tail_idx[j]] = (int64_t)(n_q + j);
        }
    }
    *out = a;
    return 0;
}

void kv_pcp_vllm_release(struct kv_pcp_vllm *p)
{
    free(p->per_rank);
    free(p->gather_idx);
    free(p->write_mask);
    free(p->restore_idx);
    free(p->row_start);
    free(p->row_req);
    free(p->row_pos);
    free(p->row_len);
    free(p->positions);
    free(p->token_idx);
    memset(p, 0, sizeof *p);
}

/* Chunk c of a prefill of n tokens in the vllm layout: [*lo, *lo + *len). */
static void vllm_chunk(int64_t n, int64_t P, int64_t c, int64_t *lo,
                       int64_t *len)
{
    int64_t size = (n + 2 * P - 1) / (2 * P);
    int64_t rest = n - c * size;

    *lo = c * size;
    *len = rest <= 0 ? 0 : rest < size ? rest : size;
}

/* Whether every rank gets request i whole (vLLM replicated_requests):
 * decodes, and under DCP the prefills too short to fill all 2P chunks. */
static int vllm_replicated(int64_t n, int dec, int64_t P, int64_t dcp)
{
    int64_t size = (n + 2 * P - 1) / (2 * P);

    return dec || (dcp > 1 && (2 * P - 1) * size >= n);
}

int kv_pcp_vllm_split(const int64_t *tokens, const int64_t *computed,
                      size_t n_reqs, size_t n_decodes, int64_t P,
                      int64_t dcp_size, struct kv_pcp_vllm *out,
                      struct kv_err *e)
{
    struct kv_pcp_vllm v;
    size_t max_rows, n_local = 0, row = 0, at = 0;
    int64_t *qsl = NULL;
    /* PCP alone keeps a replicated KV cache: each decode has one owner
     * rank (pcp_shard_decode_requests); DCP needs it on every rank */
    int shard = P > 1 && dcp_size == 1;

    if (check_input(tokens, computed, n_reqs, n_decodes, P, e))
        return -1;
    if (dcp_size < 1 || dcp_size > (1 << 16))
        return kv_err_set(e, "dcp size %lld: expected 1 .. 65536",
                          (long long)dcp_size);
    memset(&v, 0, sizeof v);
    v.n_reqs = n_reqs;
    v.n_decodes = n_decodes;
    v.pcp_size = P;
    v.dcp_size = dcp_size;
    max_rows = (size_t)P * 2 * n_reqs;
    if (grab(&qsl, n_reqs + 1, e) || grab(&v.per_rank, (size_t)P, e) ||
        grab(&v.row_start, (size_t)P + 1, e) ||
        grab(&v.row_req, max_rows, e) || grab(&v.row_pos, max_rows, e) ||
        grab(&v.row_len, max_rows, e))
        goto fail;
    for (size_t i = 0; i < n_reqs; i++)
        qsl[i + 1] = qsl[i] + tokens[i];
    v.n_tokens = (size_t)qsl[n_reqs];
    /* rows of every rank in request order (decodes lead, so this is the
     * order of vLLM's _reorder_segments: decodes, then prefills, each
     * request's chunks by start): a split prefill's chunks k and 2P-1-k,
     * a replicated request whole (a sharded decode on its owner only) */
    for (int64_t k = 0; k < P; k++) {
        int64_t count = 0, ordinal = 0;
        v.row_start[k] = (int64_t)row;
        for (size_t i = 0; i < n_reqs; i++) {
            int dec = i < n_decodes;
            if (vllm_replicated(tokens[i], dec, P, dcp_size)) {
                if (shard && ordinal++ % P != k)
                    continue;
                v.row_req[row] = (int64_t)i;
                v.row_pos[row] = 0;
                v.row_len[row] = tokens[i];
                count += tokens[i];
                row++;
                continue;
            }
            for (int half = 0; half < 2; half++) {
                int64_t lo, len, ck = half ? 2 * P - 1 - k : k;
                vllm_chunk(tokens[i], P, ck, &lo, &len);
                if (len == 0)
                    continue;
                v.row_req[row] = (int64_t)i;
                v.row_pos[row] = lo;
                v.row_len[row] = len;
                count += len;
                row++;
            }
        }
        v.per_rank[k] = count;
        if (count > v.padded)
            v.padded = count;
        n_local += (size_t)count;
    }
    v.row_start[P] = (int64_t)row;
    v.n_rows = row;
    if (grab(&v.positions, n_local, e) || grab(&v.token_idx, n_local, e) ||
        grab(&v.gather_idx, (size_t)P * (size_t)v.padded, e) ||
        grab(&v.write_mask, (size_t)P * (size_t)v.padded, e) ||
        grab(&v.restore_idx, v.n_tokens, e))
        goto fail;
    for (int64_t k = 0; k < P; k++) {
        int64_t local = 0;
        for (int64_t r = v.row_start[k]; r < v.row_start[k + 1]; r++) {
            size_t i = (size_t)v.row_req[r];
            int dec = i < n_decodes;
            int64_t base = computed ? computed[i] : 0;
            for (int64_t j = 0; j < v.row_len[r]; j++) {
                int64_t g = qsl[i] + v.row_pos[r] + j;
                size_t slot = (size_t)(k * v.padded + local);
                v.positions[at] = base + v.row_pos[r] + j;
                v.token_idx[at] = g;
                v.gather_idx[slot] = g;
                /* a replicated request is written by rank 0's copy; a
                 * split prefill or a sharded decode has one copy */
                int w = !vllm_replicated(tokens[i], dec, P, v.dcp_size) ||
                        (dec && shard) || k == 0;
                v.write_mask[slot] = w;
                if (w)
                    v.restore_idx[g] = (int64_t)slot;
                at++;
                local++;
            }
        }
    }
    free(qsl);
    *out = v;
    return 0;
fail:
    free(qsl);
    kv_pcp_vllm_release(&v);
    return -1;
}
