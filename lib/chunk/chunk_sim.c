/* chunk_sim.c - kvchunk sim's options read and checked as the program
 * reads them (chunk_sim.h): the policies, the model's bytes per token,
 * the numbers, the modes, the budgets (a list sweeps), the options no
 * policy given reads, the trace format and the report's form. */
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "chunk/chunk_sim.h"
#include "chunk/model.h"

#define PREFIX_POOLS ((1u << KV_SIM_PREFIX) | (1u << KV_SIM_PREFIX_SORTED) | \
                      (1u << KV_SIM_PREFIX_LFU))

/* --model-config: the model whose bytes per token the budgets are
 * divided by (kv_model_bytes_per_token: K and V per head, or an MLA
 * model's latent), and its element size when the file names a dtype. */
static int model_config(const char *path, struct kv_model *m, int64_t *elt,
                        struct kv_err *e)
{
    struct kv_err me;
    if (kv_model_load(path, 0, m, &me) < 0)
        return kv_err_set(e, "--model-config: %s", me.msg);
    if (m->n_layers > 100000 || m->n_kv_heads > 100000 ||
        m->head_dim > 100000 || m->kv_lora_rank + m->qk_rope_head_dim > 100000)
        return kv_err_set(e, "--model-config: %s: geometry out of range",
                          path);
    if (m->have_dtype)
        *elt = (int64_t)kv_dtype_size(m->dtype);
    return 0;
}

/* Bytes per token of a KV element type named by --dtype: 1, 2 or 4, or 0. */
static int64_t elt_size(const char *d)
{
    if (!strcmp(d, "fp8") || !strcmp(d, "fp8e4m3") || !strcmp(d, "u8") ||
        !strcmp(d, "i8"))
        return 1;
    if (!strcmp(d, "f16") || !strcmp(d, "bf16") || !strcmp(d, "float16") ||
        !strcmp(d, "bfloat16"))
        return 2;
    if (!strcmp(d, "f32") || !strcmp(d, "float32"))
        return 4;
    return 0;
}

/* The numbers: model geometry (bytes per token), block size, sessions,
 * jobs, costs and the bandwidths of the four tiers. */
static int load_numbers(const struct kv_chunk_sim_opts *o,
                        struct kv_chunk_sim *cs, double bw[4], int64_t *B,
                        struct kv_err *e)
{
    int64_t ms = 100000, elt = 2, wu = 0, nj = 0;
    struct kv_model m;
    struct kv_sim_opts *so = &cs->sim;
    /* without a config: the Llama-3.1-8B geometry, 32 x 8 x 128 */
    memset(&m, 0, sizeof m);
    m.n_layers = 32;
    m.n_kv_heads = 8;
    m.head_dim = 128;
    if (o->model_config && model_config(o->model_config, &m, &elt, e) < 0)
        return -1;
    /* an MLA model caches one latent row per layer: it has no KV heads or
     * head dim that an option could set */
    if (m.kv_lora_rank && (o->kv_heads || o->head_dim))
        return kv_err_set(e, "%s: '%s' is an MLA model, whose cache holds "
                          "%lld latent values per token and layer, not KV "
                          "heads", o->kv_heads ? "--kv-heads" : "--head-dim",
                          o->model_config,
                          (long long)(m.kv_lora_rank + m.qk_rope_head_dim));
    if (kv_parse_i64_opt(o->block_size, "--block-size", 1, 1 << 20, B, e) < 0 ||
        kv_parse_i64_opt(o->layers, "--layers", 1, 100000, &m.n_layers, e) < 0 ||
        kv_parse_i64_opt(o->kv_heads, "--kv-heads", 1, 100000, &m.n_kv_heads, e) < 0 ||
        kv_parse_i64_opt(o->head_dim, "--head-dim", 1, 100000, &m.head_dim, e) < 0 ||
        kv_parse_i64_opt(o->max_sessions, "--max-sessions", 1, 1000000000, &ms,
                         e) < 0 ||
        kv_parse_i64_opt(o->jobs, "-j", 0, 1024, &nj, e) < 0 ||
        kv_parse_f64_opt(o->us_per_token, "--us-per-token", 0, 1e12,
                         &so->cost.us_token, e) < 0 ||
        kv_parse_f64_opt(o->us_per_pair, "--us-per-pair", 0, 1e12, &so->cost.us_pair,
                         e) < 0 ||
        kv_parse_f64_opt(o->us_per_output_token, "--us-per-output-token", 0, 1e12,
                         &so->cost.us_decode, e) < 0 ||
        kv_parse_i64_opt(o->max_chunks, "--max-chunks", 1, INT32_MAX, &so->max_chunks,
                         e) < 0 ||
        kv_parse_i64_opt(o->warmup, "--warmup", 0, INT64_MAX, &wu, e) < 0 ||
        kv_parse_f64_opt(o->bw_hbm, "--bw-hbm", 1e-9, 1e12, &bw[0], e) < 0 ||
        kv_parse_f64_opt(o->bw_host, "--bw-host", 1e-9, 1e12, &bw[1], e) < 0 ||
        kv_parse_f64_opt(o->bw_disk, "--bw-disk", 1e-9, 1e12, &bw[2], e) < 0 ||
        kv_parse_f64_opt(o->bw_net, "--bw-net", 1e-9, 1e12, &bw[3], e) < 0 ||
        kv_parse_f64_opt(o->bw_rope, "--bw-rope", 1e-9, 1e12, &so->cost.bw_rope,
                         e) < 0)
        return -1;
    if (o->dtype && !(elt = elt_size(o->dtype)))
        return kv_err_set(e, "--dtype: expected fp8, f16, bf16 or f32, got "
                          "'%s'", o->dtype);
    /* at most 2e5 * 1e5 * 1e5 * 4 = 8e15 */
    so->bytes_per_token = (uint64_t)kv_model_bytes_per_token(&m, (size_t)elt);
    so->block_size = *B;
    so->max_sessions = (size_t)ms;
    so->warmup = (uint64_t)wu;
    cs->jobs = (int)nj;
    return 0;
}

/* A comma-separated list of budgets into cs->caps (tokens); B is the
 * block a prefix pool's budget must hold (1 when -B was not given). */
static int load_caps(struct kv_chunk_sim *cs, const char *list,
                     const char *opt, int64_t B, struct kv_err *e)
{
    int in_bytes = strcmp(opt, "--capacity-tokens") != 0;
    uint64_t bpt = cs->sim.bytes_per_token;
    const char *p = list;
    struct kv_err pe;
    cs->n_caps = 0;
    for (;;) {
        char buf[64];
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        size_t v;
        if (len == 0 || len >= sizeof buf)
            return kv_err_set(e, "%s: expected a size or a comma-separated "
                              "list, got '%s'", opt, list);
        if (cs->n_caps == KV_CHUNK_SIM_MAX_CAPS)
            return kv_err_set(e, "%s: at most %d budgets", opt,
                              KV_CHUNK_SIM_MAX_CAPS);
        memcpy(buf, p, len);
        buf[len] = 0;
        if (!strcmp(buf, "inf")) {
            v = (size_t)1 << 50;     /* unbounded: more than any trace */
        } else if (kv_parse_size(buf, &v, &pe) < 0) {
            return kv_err_set(e, "%s: %s", opt, pe.msg);
        } else if (in_bytes) {
            if (v < bpt)
                return kv_err_set(e, "%s: %zu bytes is less than one token "
                                  "(%llu bytes)", opt, v,
                                  (unsigned long long)bpt);
            v /= bpt;
        }
        if (v < 1 || v > (size_t)1 << 50)
            return kv_err_set(e, "%s: expected a count from 1 to 2^50 "
                              "tokens, got '%s'", opt, buf);
        if ((cs->policies & PREFIX_POOLS) && (int64_t)v < B)
            return kv_err_set(e, "capacity of %zu tokens is smaller than one "
                              "block of %lld", v, (long long)B);
        cs->caps[cs->n_caps++] = (int64_t)v;
        if (!c)
            break;
        p = c + 1;
    }
    cs->sim.capacity_tokens = cs->caps[0];
    return 0;
}

static const char *const tiers[4] = { "hbm", "host", "disk", "net" };

/* The words: chunk context, salt, tier (and its bandwidth), rotation,
 * and the budgets. */
static int load_modes(const struct kv_chunk_sim_opts *o,
                      struct kv_chunk_sim *cs, const double bw[4], int64_t B,
                      struct kv_err *e)
{
    const char *cx = o->chunk_context ? o->chunk_context : "sys";
    const char *st = o->salt ? o->salt : "none";
    int ti = 0;
    if (!strcmp(cx, "sys"))
        cs->sim.ctx_sys = 1;
    else if (!strcmp(cx, "isolated") || !strcmp(cx, "none"))
        cs->sim.ctx_sys = 0;
    else
        return kv_err_set(e, "--chunk-context: expected sys or isolated "
                          "(none), got '%s'", cx);
    if (!strcmp(st, "tenant"))
        cs->sim.salt_tenant = 1;
    else if (strcmp(st, "none"))
        return kv_err_set(e, "--salt: expected none or tenant, got '%s'", st);
    if (o->tier) {
        for (ti = 0; ti < 4 && strcmp(o->tier, tiers[ti]); ti++)
            ;
        if (ti == 4)
            return kv_err_set(e, "--tier: expected hbm, host, disk or net, "
                              "got '%s'", o->tier);
    }
    cs->sim.cost.bw_load = bw[ti];
    cs->tier = tiers[ti];
    if (o->rotate) {
        if (!strcmp(o->rotate, "always"))
            cs->sim.rotate_always = 1;
        else if (strcmp(o->rotate, "moved"))
            return kv_err_set(e, "--rotate: expected moved or always, got "
                              "'%s'", o->rotate);
    }
    cs->sim.miss_copy = o->miss_copy != 0;
    if (!!o->capacity_tokens + !!o->capacity_bytes + !!o->pool_bytes > 1)
        return kv_err_set(e, "--capacity-tokens, --capacity-bytes and "
                          "--pool-bytes: give one");
    if (o->capacity_tokens)
        return load_caps(cs, o->capacity_tokens, "--capacity-tokens", B, e);
    if (o->pool_bytes)
        return load_caps(cs, o->pool_bytes, "--pool-bytes", B, e);
    return load_caps(cs, o->capacity_bytes ? o->capacity_bytes : "16G",
                     "--capacity-bytes", B, e);
}

/* Options no selected policy reads are refused, naming the option: the
 * chunk scheme's (--rotate, --miss-copy, --tier, --bw-rope,
 * --chunk-context) need chunk, chunk-lfu or oracle; --max-chunks chunk or
 * chunk-lfu; -B a block pool (prefix, prefix-sorted, prefix-lfu); a
 * bandwidth only its --tier; a budget a policy other than none and
 * oracle. */
static int refuse_unused(const struct kv_chunk_sim_opts *o, unsigned pol,
                         struct kv_err *e)
{
    unsigned chunk = (1u << KV_SIM_CHUNK) | (1u << KV_SIM_CHUNK_LFU),
             loads = chunk | (1u << KV_SIM_ORACLE);
    const char *loads_what = "chunk, chunk-lfu or oracle";
    const struct {
        int given;
        const char *name;
        unsigned need;
        const char *what;
    } opt[] = {
        { o->rotate != NULL, "--rotate", loads, loads_what },
        { o->miss_copy, "--miss-copy", loads, loads_what },
        { o->tier != NULL, "--tier", loads, loads_what },
        { o->bw_rope != NULL, "--bw-rope", loads, loads_what },
        { o->chunk_context != NULL, "--chunk-context", loads, loads_what },
        { o->max_chunks != NULL, "--max-chunks", chunk, "chunk or chunk-lfu" },
        { o->block_size != NULL, "-B", PREFIX_POOLS,
          "prefix, prefix-sorted or prefix-lfu" },
    };
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if (opt[i].given && !(pol & opt[i].need))
            return kv_err_set(e, "%s: no policy given reads it (it applies "
                              "to %s)", opt[i].name, opt[i].what);
    const char *caps[3] = { o->capacity_tokens, o->capacity_bytes,
                            o->pool_bytes };
    static const char *const cap_names[3] = {
        "--capacity-tokens", "--capacity-bytes", "--pool-bytes" };
    for (int i = 0; i < 3; i++)
        if (caps[i] &&
            !(pol & ~((1u << KV_SIM_NONE) | (1u << KV_SIM_ORACLE))))
            return kv_err_set(e, "%s: no policy given has a budget (none and "
                              "oracle have none)", cap_names[i]);
    const char *bw[4] = { o->bw_hbm, o->bw_host, o->bw_disk, o->bw_net };
    const char *tier = o->tier ? o->tier : "hbm";
    for (int i = 0; i < 4; i++) {
        if (!bw[i])
            continue;
        if (!(pol & loads))
            return kv_err_set(e, "--bw-%s: no policy given reads it (it "
                              "applies to chunk, chunk-lfu or oracle)",
                              tiers[i]);
        if (strcmp(tier, tiers[i]))
            return kv_err_set(e, "--bw-%s: chunk KV is loaded from %s "
                              "(--tier), at --bw-%s", tiers[i], tier, tier);
    }
    return 0;
}

/* --trace-format, --trace-block-size */
static int load_trace_opts(const struct kv_chunk_sim_opts *o,
                           struct kv_chunk_sim *cs, struct kv_err *e)
{
    static const char *const fmts[3] = { "auto", "native", "mooncake" };
    cs->trace_block = 512;
    cs->block_given = o->block_size != NULL;
    if (kv_parse_i64_opt(o->trace_block_size, "--trace-block-size", 1, 1 << 20,
                         &cs->trace_block, e) < 0)
        return -1;
    if (!o->trace_format)
        return 0;
    for (int i = 0; i < 3; i++)
        if (!strcmp(o->trace_format, fmts[i])) {
            cs->trace_format = i;    /* KV_SIM_FORMAT_* in this order */
            return 0;
        }
    return kv_err_set(e, "--trace-format: expected auto, native or mooncake, "
                      "got '%s'", o->trace_format);
}

int kv_chunk_sim_load(struct kv_chunk_sim *cs,
                      const struct kv_chunk_sim_opts *o, struct kv_err *e)
{
    struct kv_err pe;
    int64_t B = 16;
    double bw[4] = { 1000, 25, 5, 3 };
    int json = 0;
    memset(cs, 0, sizeof *cs);
    cs->policies = (1u << KV_SIM_NONE) | (1u << KV_SIM_PREFIX) |
                   (1u << KV_SIM_CHUNK) | (1u << KV_SIM_ORACLE);
    cs->sim.cost = (struct kv_sim_cost){ 80, 0.0035, 1000, 200, 0 };
    if (o->policies && kv_sim_policy_parse(o->policies, &cs->policies,
                                           &pe) < 0)
        return kv_err_set(e, "--policies: %s", pe.msg);
    if (load_numbers(o, cs, bw, &B, e) < 0 ||
        load_modes(o, cs, bw, o->block_size ? B : 1, e) < 0 ||
        refuse_unused(o, cs->policies, e) < 0)
        return -1;
    cs->sim.policies = cs->policies | (1u << KV_SIM_NONE);
    cs->policies_given = o->policies != NULL;
    if (load_trace_opts(o, cs, e) < 0)
        return -1;
    if (o->format && strcmp(o->format, "text")) {
        if (strcmp(o->format, "json"))
            return kv_err_set(e, "-f: expected text or json, got '%s'",
                              o->format);
        json = 1;
    }
    if (o->csv && json)
        return kv_err_set(e, "--csv and -f json: choose one");
    cs->format = json ? KV_CHUNK_SIM_JSON
                      : o->csv ? KV_CHUNK_SIM_CSV : KV_CHUNK_SIM_TEXT;
    if (kv_parse_max_mem(o->max_mem, &cs->max_mem, e) < 0)
        return -1;
    if (!cs->jobs)
        cs->jobs = kv_nproc();
    return 0;
}

size_t kv_chunk_sim_mem(const struct kv_chunk_sim *cs)
{
    size_t mem = 0;
    for (int i = 0; i < cs->n_units; i++)
        mem += kv_sim_mem(cs->units[i].s);
    return mem;
}

void kv_chunk_sim_release(struct kv_chunk_sim *cs)
{
    for (int i = 0; i < cs->n_units; i++)
        kv_sim_free(cs->units[i].s);
    cs->n_units = 0;
}
