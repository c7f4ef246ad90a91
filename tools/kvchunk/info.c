/* kvchunk info: what kvchunk understood of a model. */
#include "kvchunk.h"

/* The model as kvchunk understands it: from --model-config, explicit
 * options, or both. */
static int print_info(const struct ns_args *na, const struct nsv *v,
                      int json, struct kv_err *e)
{
    struct kv_model m;
    json_t *o = json ? json_object() : NULL;
    if (json && !o)
        return kv_err_set(e, "out of memory");
    uint8_t d[16];
    char rope[4096], hex[33];
    if (sval(na->model_config)) {
        if (kv_model_load(sval(na->model_config), 0, &m, e) < 0) {
            json_decref(o);
            return -1;
        }
        if (json) {
            json_object_set_new(o, "model_config",
                                json_string(sval(na->model_config)));
            json_object_set_new(o, "model_type", json_string(
                m.model_type[0] ? m.model_type : "-"));
            json_object_set_new(o, "heads", json_integer(m.n_heads));
            json_object_set_new(o, "max_position_embeddings",
                                json_integer(m.max_pos));
            json_object_set_new(o, "sliding_window",
                                json_integer(m.sliding_window));
        } else {
            printf("model_config: %s\nmodel_type: %s\nheads: %lld\n"
                   "max_position_embeddings: %lld\nsliding_window: %lld\n",
                   sval(na->model_config),
                   m.model_type[0] ? m.model_type : "-",
                   (long long)m.n_heads, (long long)m.max_pos,
                   (long long)m.sliding_window);
        }
    }
    if (kv_rope_describe(&v->ns.rope, rope, sizeof rope) < 0 ||
        kv_ns_digest(&v->ns, d, e) < 0) {
        json_decref(o);
        return kv_err_set(e, "cannot describe the namespace");
    }
    kv_hex(d, hex);
    /* the namespace's geometry: a latent chunk is L, 1, kv_lora_rank + R */
    struct kv_model g;
    memset(&g, 0, sizeof g);
    g.n_layers = v->ns.n_layers;
    g.n_kv_heads = v->ns.n_kv_heads;
    g.head_dim = v->ns.head_dim;
    g.kv_lora_rank = v->ns.kv_lora_rank;
    g.qk_rope_head_dim = v->ns.kv_lora_rank ? v->ns.head_dim - v->ns.kv_lora_rank : 0;
    int64_t bpt = kv_model_bytes_per_token(&g, kv_dtype_size(v->ns.dtype));
    if (json) {
        json_object_set_new(o, "layers", json_integer(v->ns.n_layers));
        json_object_set_new(o, "kv_heads", json_integer(v->ns.n_kv_heads));
        json_object_set_new(o, "head_dim", json_integer(v->ns.head_dim));
        json_object_set_new(o, "dtype",
                            json_string(kv_dtype_name(v->ns.dtype)));
        json_object_set_new(o, "rope", json_string(rope));
        json_object_set_new(o, "bytes_per_token", json_integer(bpt));
        json_object_set_new(o, "ns_digest", json_string(hex));
        return report_json(stdout, o) < 0
               ? kv_err_set(e, "out of memory") : 0;
    }
    printf("layers: %lld\nkv_heads: %lld\nhead_dim: %lld\ndtype: %s\n"
           "rope: %s\nbytes_per_token: %lld\nns_digest: %s\n",
           (long long)v->ns.n_layers, (long long)v->ns.n_kv_heads,
           (long long)v->ns.head_dim, kv_dtype_name(v->ns.dtype), rope,
           (long long)bpt, hex);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct common c;
    struct arg_str *fmt;
    int json = 0;
    add_ns(&t, &na, 1);
    add(&t, fmt = arg_str0("f", "format", "text|json",
                           "output format (default text)"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nPrint what kvchunk understood of "
                   "the model: geometry, RoPE, bytes per token, namespace.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim; /* checked as every subcommand checks it; info reads no input */
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = report_format(fmt, &json)) != 0) {
        free_table(&t);
        return rc;
    }
    if (ns_values(&na, c.verbose->count, &v, &e) < 0 ||
        (!v.have_shape &&
         kv_err_set(&e, "--model-config FILE or --shape L,HKV,D is required")
             < 0) ||
        ns_finish(&v, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    rc = print_info(&na, &v, json, &e);
    free_table(&t);
    return rc < 0 ? kv_fail_err(&e) : kv_close_stdout();
}
