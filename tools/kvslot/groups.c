/* kvslot groups: the KV-cache groups, page sizes and block sizes vLLM
 * derives for a model (lib/slot/groups.h), as text or one JSON object. */
#include "kvslot.h"
#include "slot/groups.h"
#include <jansson.h>

/* --kv-cache-dtype: bytes per value, 0 for auto (the model's dtype). */
static int cache_dtype(const char *s, int *bytes)
{
    static const struct { const char *name; int bytes; } t[] = {
        { "auto", 0 }, { "bfloat16", 2 }, { "bf16", 2 }, { "float16", 2 },
        { "f16", 2 }, { "float32", 4 }, { "f32", 4 }, { "fp8", 1 },
        { "fp8_e4m3", 1 }, { "fp8_e5m2", 1 },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (!strcmp(s, t[i].name)) {
            *bytes = t[i].bytes;
            return 0;
        }
    return -1;
}

/* The layer a cache belongs to, "7" or "7.indexer". */
static void cache_name(const struct kv_cache_spec *s, char *buf, size_t len)
{
    snprintf(buf, len, "%lld%s", (long long)s->layer,
             s->kind == KV_CACHE_MLA_INDEXER ? ".indexer" : "");
}

static int write_text(FILE *f, const struct kv_groups *g)
{
    if (g->model_type[0])
        fprintf(f, "model_type: %s\n", g->model_type);
    fprintf(f, "num_layers: %lld\n", (long long)g->n_layers);
    fprintf(f, "num_caches: %zu\n", g->n_specs);
    fprintf(f, "block_size: %lld\n", (long long)g->block_size);
    if (g->mamba_block_size) {
        fprintf(f, "mamba_block_size: %lld\n", (long long)g->mamba_block_size);
        fprintf(f, "mamba_page_size_padded: %lld\n",
                (long long)g->mamba_page_padded);
    }
    fprintf(f, "num_groups: %zu\n", g->n_groups);
    fprintf(f, "padding_layers: %lld\n", (long long)g->padding_layers);
    for (size_t i = 0; i < g->n_groups; i++) {
        const struct kv_group *gr = &g->group[i];
        fprintf(f, "group %zu: %s%s", i, kv_cache_kind_name(gr->kind),
                gr->uniform_type ? " uniform_type" : "");
        if (gr->window)
            fprintf(f, " %s=%lld",
                    gr->kind == KV_CACHE_CHUNKED ? "chunk" : "window",
                    (long long)gr->window);
        fprintf(f, " block_size=%lld page_bytes=%lld layers=",
                (long long)gr->block_size, (long long)gr->page_bytes);
        for (size_t k = 0; k < gr->n_specs; k++) {
            char nm[32];
            cache_name(&g->spec[gr->specs[k]], nm, sizeof nm);
            fprintf(f, "%s%s", k ? "," : "", nm);
        }
        fputc('\n', f);
    }
    return 0;
}

static json_t *to_json(const struct kv_groups *g)
{
    json_t *o = json_object(), *arr = json_array();
    if (!o || !arr) {
        json_decref(o);
        json_decref(arr);
        return NULL;
    }
    if (g->model_type[0])
        json_object_set_new(o, "model_type", json_string(g->model_type));
    json_object_set_new(o, "num_layers", json_integer(g->n_layers));
    json_object_set_new(o, "num_caches", json_integer((json_int_t)g->n_specs));
    json_object_set_new(o, "block_size", json_integer(g->block_size));
    if (g->mamba_block_size) {
        json_object_set_new(o, "mamba_block_size",
                            json_integer(g->mamba_block_size));
        json_object_set_new(o, "mamba_page_size_padded",
                            json_integer(g->mamba_page_padded));
    }
    json_object_set_new(o, "num_groups", json_integer((json_int_t)g->n_groups));
    json_object_set_new(o, "padding_layers", json_integer(g->padding_layers));
    for (size_t i = 0; i < g->n_groups; i++) {
        const struct kv_group *gr = &g->group[i];
        json_t *x = json_object(), *ls = json_array();
        json_object_set_new(x, "kind", json_string(kv_cache_kind_name(gr->kind)));
        json_object_set_new(x, "uniform_type", json_boolean(gr->uniform_type));
        if (gr->kind == KV_CACHE_SLIDING || gr->kind == KV_CACHE_MLA_SLIDING)
            json_object_set_new(x, "sliding_window", json_integer(gr->window));
        if (gr->kind == KV_CACHE_CHUNKED)
            json_object_set_new(x, "attention_chunk_size",
                                json_integer(gr->window));
        json_object_set_new(x, "block_size", json_integer(gr->block_size));
        json_object_set_new(x, "page_bytes", json_integer(gr->page_bytes));
        for (size_t k = 0; k < gr->n_specs; k++) {
            char nm[32];
            cache_name(&g->spec[gr->specs[k]], nm, sizeof nm);
            json_array_append_new(ls, json_string(nm));
        }
        json_object_set_new(x, "layers", ls);
        json_array_append_new(arr, x);
    }
    json_object_set_new(o, "groups", arr);
    return o;
}

int cmd_groups(int argc, char **argv)
{
    struct arg_str *mc = arg_str0(NULL, "model-config", "FILE",
                                  "a Hugging Face config.json ('-': stdin)");
    struct arg_str *kg = arg_str0(NULL, "kv-groups", "SPEC",
                                  "the layers spelled out (man 1 kvslot, "
                                  "GROUPS)");
    struct arg_str *bs = arg_str0("B", "block-size", "B",
                                  "vLLM --block-size (default 16)");
    struct arg_str *kb = arg_str0(NULL, "kernel-block", "K",
                                  "the attention backend's smallest kernel "
                                  "block (default 16)");
    struct arg_str *ml = arg_str0(NULL, "max-model-len", "N",
                                  "default: max_position_embeddings");
    struct arg_str *dt = arg_str0(NULL, "kv-cache-dtype", "DTYPE",
                                  "auto|bfloat16|float16|float32|fp8 "
                                  "(default auto)");
    struct arg_str *mm = arg_str0(NULL, "mamba-cache-mode", "MODE",
                                  "none|align (default none)");
    struct arg_str *fmt = arg_str0("f", "format", "text|json",
                                   "output format (default text)");
    struct arg_str *out = arg_str0("o", "output", "FILE", "write to FILE");
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *ver = arg_lit0(NULL, "version",
                                   "print the version and exit");
    struct arg_end *end = arg_end(20);
    void *argtable[] = { mc, kg, bs, kb, ml, dt, mm, fmt, out, help, ver,
                         end };
    struct kv_groups_opts o = { 0, 0, 0, 0, 0 };
    struct kv_groups g;
    struct kv_out ko;
    struct kv_err e;
    int rc, json = 0;

    kv_groups_init(&g);
    rc = parse_sub("groups", argtable, argc, argv, help, ver, end,
                   "\nThe KV-cache groups, page sizes and block sizes vLLM "
                   "0.33.0 derives (man 1 kvslot, GROUPS).");
    if (rc >= 0)
        goto done;
    if (mc->count + kg->count != 1) {
        rc = kv_usage("give either --model-config FILE or --kv-groups SPEC");
        goto done;
    }
    if ((rc = opt_i64(bs, "--block-size", 1, 1 << 20, 0, &o.block_size)) ||
        (rc = opt_i64(kb, "--kernel-block", 1, 1 << 20, 16, &o.kernel_block)) ||
        (rc = opt_i64(ml, "--max-model-len", 1, (int64_t)1 << 40, 0,
                      &o.max_model_len)))
        goto done;
    if (dt->count && cache_dtype(dt->sval[0], &o.cache_dtype_bytes) < 0) {
        rc = kv_usage("--kv-cache-dtype: unknown dtype '%s' (auto, bfloat16, "
                      "float16, float32, fp8)", dt->sval[0]);
        goto done;
    }
    if (mm->count) {
        if (!strcmp(mm->sval[0], "align"))
            o.mamba_align = 1;
        else if (strcmp(mm->sval[0], "none")) {
            rc = kv_usage("--mamba-cache-mode: expected none or align, got "
                          "'%s'", mm->sval[0]);
            goto done;
        }
    }
    if (fmt->count) {
        if (!strcmp(fmt->sval[0], "json"))
            json = 1;
        else if (strcmp(fmt->sval[0], "text")) {
            rc = kv_usage("-f: expected text or json, got '%s'", fmt->sval[0]);
            goto done;
        }
    }
    if (mc->count ? kv_groups_from_config(&g, mc->sval[0], &o, &e)
                  : kv_groups_from_spec(&g, kg->sval[0], &o, &e)) {
        rc = mc->count ? kv_fail_err(&e) : kv_usage("--kv-groups: %s", e.msg);
        goto done;
    }
    char *text = NULL;
    if (json) {
        json_t *j = to_json(&g);
        text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(j);
    } else {
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (m) {
            write_text(m, &g);
            if (fclose(m))
                text = NULL;
        }
    }
    if (!text) {
        rc = kv_fail("out of memory");
        goto done;
    }
    if (kv_out_open(&ko, out->count ? out->sval[0] : NULL, &e)) {
        free(text);
        rc = kv_fail_err(&e);
        goto done;
    }
    fputs(text, ko.f);
    if (json)
        fputc('\n', ko.f);
    free(text);
    if (out->count)
        rc = kv_out_commit(&ko, &e) ? kv_fail_err(&e) : KV_EXIT_OK;
    else
        rc = kv_close_stdout();
done:
    if (rc < 0)
        rc = KV_EXIT_OK;
    kv_groups_release(&g);
    arg_freetable(argtable, sizeof argtable / sizeof *argtable);
    return rc;
}
