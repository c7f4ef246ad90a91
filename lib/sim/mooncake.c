/* mooncake.c - one line of a Mooncake trace (the FAST'25 release's JSONL,
 * read by sglang, guidellm, aiperf and dynamo) as a simulator request:
 *
 *   {"timestamp": 0, "input_length": 6758, "output_length": 500,
 *    "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}
 *
 *   timestamp      arrival in milliseconds from the trace start (>= 0,
 *                  never decreasing)
 *   input_length   prompt tokens (>= 1)
 *   output_length  generated tokens (>= 0)
 *   hash_ids       one integer per block of B prompt tokens, the last block
 *                  possibly partial, so exactly ceil(input_length / B) of
 *                  them; equal ids mean equal prompts up to the end of that
 *                  block (the ids are remapped prefix hashes)
 *
 * Other keys are ignored; a key given twice is refused.  Block i becomes a
 * segment of min(B, input_length - i B) tokens whose content key is made
 * of its id, so that equal ids give equal tokens: a prefix policy at block
 * size B then hashes exactly the blocks the trace names.  The lines are
 * parsed by jansson. */
#include <jansson.h>
#include "sim/internal.h"

int sim_mooncake_detect(const char *s, size_t n)
{
    json_error_t je;
    json_t *o;
    int yes;
    if (!n || s[0] != '{')
        return 0;
    o = json_loadb(s, n, 0, &je);
    yes = json_is_object(o) && (json_object_get(o, "hash_ids") ||
                                json_object_get(o, "input_length"));
    json_decref(o);
    return yes;
}

/* A required integer key of o in [min, max] into *v. */
static int get_int(const char *name, uint64_t line, json_t *o,
                   const char *key, int64_t min, int64_t max, int64_t *v,
                   struct kv_err *e)
{
    json_t *x = json_object_get(o, key);
    if (!x)
        return kv_err_set(e, "'%s' line %llu: missing key '%s'", name,
                          (unsigned long long)line, key);
    if (!json_is_integer(x))
        return kv_err_set(e, "'%s' line %llu, key '%s': expected an integer",
                          name, (unsigned long long)line, key);
    json_int_t i = json_integer_value(x);
    if (i < min || i > max)
        return kv_err_set(e, "'%s' line %llu, key '%s': %lld is out of "
                          "range (%lld to %lld)", name,
                          (unsigned long long)line, key, (long long)i,
                          (long long)min, (long long)max);
    *v = (int64_t)i;
    return 0;
}

int sim_mooncake_line(const char *name, uint64_t line, const char *s,
                      size_t n, int64_t B, double *last_t,
                      struct kv_sim_seg **chunks, size_t *cap,
                      int64_t **ids_out, size_t *ids_cap,
                      struct kv_sim_req *req, struct kv_err *e)
{
    json_error_t je;
    json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    struct kv_sim_req q;
    int64_t in_len, out_len;
    int rc = -1;
    if (!o)
        return kv_err_set(e, "'%s' line %llu, column %d: malformed JSON: %s",
                          name, (unsigned long long)line, je.column, je.text);
    if (!json_is_object(o)) {
        kv_err_set(e, "'%s' line %llu: expected a JSON object", name,
                   (unsigned long long)line);
        goto out;
    }
    memset(&q, 0, sizeof q);
    q.line = line;
    q.prompt_blocks = 1;
    json_t *ts = json_object_get(o, "timestamp");
    if (!ts) {
        kv_err_set(e, "'%s' line %llu: missing key 'timestamp'", name,
                   (unsigned long long)line);
        goto out;
    }
    if (!json_is_number(ts)) {
        kv_err_set(e, "'%s' line %llu, key 'timestamp': expected "
                   "milliseconds", name, (unsigned long long)line);
        goto out;
    }
    double ms = json_number_value(ts);
    if (!isfinite(ms) || ms < 0) {
        kv_err_set(e, "'%s' line %llu, key 'timestamp': negative time "
                   "(%g ms)", name, (unsigned long long)line, ms);
        goto out;
    }
    q.t = ms / 1000.0;
    if (q.t < *last_t) {
        kv_err_set(e, "'%s' line %llu, key 'timestamp': time goes "
                   "backwards (%g ms after %g ms)", name,
                   (unsigned long long)line, ms, *last_t * 1000.0);
        goto out;
    }
    if (get_int(name, line, o, "input_length", 1, KV_SIM_MAX_PROMPT, &in_len,
                e) < 0 ||
        get_int(name, line, o, "output_length", 0, KV_SIM_MAX_LEN - 1,
                &out_len, e) < 0)
        goto out;
    json_t *ids = json_object_get(o, "hash_ids");
    if (!ids) {
        kv_err_set(e, "'%s' line %llu: missing key 'hash_ids'", name,
                   (unsigned long long)line);
        goto out;
    }
    if (!json_is_array(ids)) {
        kv_err_set(e, "'%s' line %llu, key 'hash_ids': expected an array",
                   name, (unsigned long long)line);
        goto out;
    }
    size_t nb = json_array_size(ids);
    int64_t want = (in_len + B - 1) / B;
    if ((int64_t)nb != want) {
        kv_err_set(e, "'%s' line %llu, key 'hash_ids': %zu ids for an "
                   "input_length of %lld at %lld tokens a block (expected "
                   "%lld)", name, (unsigned long long)line, nb,
                   (long long)in_len, (long long)B, (long long)want);
        goto out;
    }
    if (sim_grow((void **)chunks, cap, nb ? nb : 1, sizeof **chunks) < 0 ||
        sim_grow((void **)ids_out, ids_cap, nb ? nb : 1, sizeof **ids_out) < 0) {
        kv_err_set(e, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nb; i++) {
        json_t *x = json_array_get(ids, i);
        if (!json_is_integer(x)) {
            kv_err_set(e, "'%s' line %llu, key 'hash_ids': element %zu is "
                       "not an integer", name, (unsigned long long)line, i);
            goto out;
        }
        int64_t left = in_len - (int64_t)i * B;
        struct kv_sim_seg *g = &(*chunks)[i];
        g->key = kv_sim_mix((uint64_t)json_integer_value(x),
                            0x4d6f6f6e63616b65ULL);
        g->len = left < B ? left : B;
        g->kind = KV_SIM_SEG_TEXT;
        g->name = "hash_ids";
        g->name_len = 8;
        (*ids_out)[i] = (int64_t)json_integer_value(x);
    }
    q.chunks = *chunks;
    q.hash_ids = *ids_out;
    q.n_chunks = nb;
    q.out_len = out_len;
    *last_t = q.t;
    *req = q;
    rc = 1;
out:
    json_decref(o);
    return rc;
}
