/* kvattn quant: an FP8 KV cache written from f32, bf16 or f16 keys and
 * values as vLLM writes one (man 1 kvattn, QUANT), and the dequantization
 * that kvattn run uses to read such a cache (fp8_dequant_input). */
#include "kvattn.h"
#include "core/fp8.h"
#include "attn/mla_ds.h"

struct quant_opts {
    const char *k, *v, *cache, *out, *v_out, *scales_out;
    enum kv_fp8 fmt;
    int per_token_head, ds_mla;
    float k_scale, v_scale;
    enum kv_format ofmt;
    int force;
    size_t max_mem;
};

/* Replace in->t (u8 bytes of format t) by its f32 values: the first
 * `split` elements times scale_a, the rest times scale_b (split = numel
 * for one scale).  The mapping or buffer of the bytes is released. */
int fp8_dequant_input(struct input *in, int fmt, float scale_a,
                      float scale_b, size_t split, size_t max_bytes,
                      struct kv_err *e)
{
    struct kv_tensor f;
    kv_tensor_init(&f);
    if (in->t.dtype != KV_U8)
        return kv_err_set(e, "an FP8 cache is stored as u8 (man 5 kvnpy), "
                          "got %s", kv_dtype_name(in->t.dtype));
    if (kv_tensor_alloc(&f, KV_F32, in->t.ndim, in->t.shape, max_bytes, e))
        return -1;
    size_t n = kv_tensor_numel(&in->t);
    if (split > n)
        split = n;
    const uint8_t *q = in->t.data;
    kv_fp8_dequantize(q, split, scale_a, (enum kv_fp8)fmt, f.data);
    kv_fp8_dequantize(q + split, n - split, scale_b, (enum kv_fp8)fmt,
                      (float *)f.data + split);
    input_release(in);
    kv_tensor_move(&in->t, &f);
    return 0;
}

/* Quantize one input into a u8 tensor (and, per token and head, its
 * scales); a paged cache [2, ...] takes k_scale for its keys and v_scale
 * for its values. */
static int quant_one(const struct quant_opts *o, const struct kv_tensor *x,
                     float sa, float sb, int is_cache, struct kv_tensor *q,
                     struct kv_tensor *sc, struct kv_err *e)
{
    if (x->dtype != KV_F32 && x->dtype != KV_BF16 && x->dtype != KV_F16)
        return kv_err_set(e, "expected f32, bf16 or f16 values, got %s",
                          kv_dtype_name(x->dtype));
    if (x->ndim < 1)
        return kv_err_set(e, "expected an array of at least one dimension");
    if (o->ds_mla)
        return kv_ds_mla_quantize(x, o->max_mem, q, e);
    if (kv_tensor_alloc(q, KV_U8, x->ndim, x->shape, o->max_mem, e))
        return -1;
    size_t n = kv_tensor_numel(x), split = is_cache ? n / 2 : n;
    if (!o->per_token_head) {
        kv_fp8_quantize(x, 0, split, sa, o->fmt, q->data);
        kv_fp8_quantize(x, split, n - split, sb, o->fmt, q->data);
        return 0;
    }
    size_t d = (size_t)x->shape[x->ndim - 1];
    if (x->ndim < 2 || d == 0)
        return kv_err_set(e, "fp8_per_token_head needs [..., H, D] with D > 0");
    if (kv_tensor_alloc(sc, KV_F32, x->ndim - 1, x->shape, o->max_mem, e))
        return -1;
    return kv_fp8_quantize_rows(x, n, d, q->data, sc->data, e);
}

static int run_quant(const struct quant_opts *o)
{
    struct kv_err e = {{0}};
    struct input k, v;
    struct kv_tensor qk, qv, sk, sv;
    int rc = KV_EXIT_DATA;
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    kv_tensor_init(&qk);
    kv_tensor_init(&qv);
    kv_tensor_init(&sk);
    kv_tensor_init(&sv);
    const char *kin = o->cache ? o->cache : o->k;
    if (input_load(&k, kin, o->max_mem, &e))
        goto fail;
    if (o->cache && (k.t.ndim != 5 || k.t.shape[0] != 2)) {
        char sh[128];
        kv_shape_str(k.t.ndim, k.t.shape, sh, sizeof sh);
        kv_err_set(&e, "'%s': shape %s: a paged cache is [2, num_blocks, "
                   "block_size, Hkv, D]", o->cache, sh);
        goto fail;
    }
    if (o->v && input_load(&v, o->v, o->max_mem, &e))
        goto fail;
    if (quant_one(o, &k.t, o->k_scale, o->v_scale, o->cache != NULL, &qk, &sk, &e)) {
        kv_err_prefix(&e, "'%s'", kin);
        goto fail;
    }
    if (o->v && quant_one(o, &v.t, o->v_scale, o->v_scale, 0, &qv, &sv, &e)) {
        kv_err_prefix(&e, "'%s'", o->v);
        goto fail;
    }
    /* Everything computed: the values, V's own file and the scales are
     * written together (a failure in one leaves all as they were). */
    const struct kv_tensor *ss[2] = {&sk, &sv}, *vs[1] = {&qv}, *ks[2] = {&qk, &qv};
    struct tensor_out w[3] = {{o->out, o->ofmt, o->force, ks, o->v && !o->v_out ? 2 : 1}};
    int nw = 1;
    if (o->v && o->v_out)
        w[nw++] = (struct tensor_out){o->v_out, o->ofmt, o->force, vs, 1};
    if (o->per_token_head)
        w[nw++] = (struct tensor_out){o->scales_out, KV_FMT_NPY, 1, ss, o->v ? 2 : 1};
    if ((rc = write_outputs(w, nw)))
        goto done;
    rc = kv_close_stdout();
    goto done;
fail:
    rc = kv_fail_err(&e);
done:
    input_release(&k);
    input_release(&v);
    kv_tensor_release(&qk);
    kv_tensor_release(&qv);
    kv_tensor_release(&sk);
    kv_tensor_release(&sv);
    return rc;
}

static const char quant_synopsis[] =
    "\nFP8 KV cache as vLLM writes it: q = fp8(clamp(x / scale, -max, max)),\n"
    "round to nearest even (u8 storage).  -k K [-v V] or --kv-cache C\n"
    "[2,num_blocks,block_size,Hkv,D]; -o gets K's bytes (then V's unless\n"
    "--v-out).  fp8_per_token_head: one scale per row, max(absmax/448, 1e-6).\n"
    "fp8_ds_mla: -k latent [..., 576] -> u8 [..., 656] (DeepSeek-V3.2).";

int cmd_quant(int argc, char **argv)
{
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version and exit");
    struct arg_file *k = arg_file0("k", NULL, "FILE", "keys (f32, bf16 or f16 .npy)");
    struct arg_file *v = arg_file0("v", NULL, "FILE", "values (.npy)");
    struct arg_file *cache = arg_file0(NULL, "kv-cache", "FILE", "paged cache [2,num_blocks,block_size,Hkv,D]");
    struct arg_str *dt = arg_str0(NULL, "kv-dtype", "T", "fp8_e4m3 (or fp8), fp8_e5m2, fp8_per_token_head, fp8_ds_mla");
    struct arg_str *ks = arg_str0(NULL, "k-scale", "S", "keys' scale (default 1)");
    struct arg_str *vs = arg_str0(NULL, "v-scale", "S", "values' scale (default 1)");
    struct arg_file *out = arg_file0("o", NULL, "FILE", "output (default stdout)");
    struct arg_file *vout = arg_file0(NULL, "v-out", "FILE", "write V's bytes here, not after K's");
    struct arg_file *sout = arg_file0(NULL, "scales-out", "FILE", "fp8_per_token_head: the scales (f32)");
    struct arg_str *fmt = arg_str0("f", NULL, "npy|text", "output format");
    struct arg_lit *force = arg_lit0(NULL, "force", "write binary to a terminal");
    struct arg_str *mem = arg_str0(NULL, "max-mem", "SIZE", "memory limit (default 75% of RAM)");
    struct arg_end *end = arg_end(20);
    void *t[] = {help, version, k, v, cache, dt, ks, vs, out, vout, sout, fmt, force, mem, end};
    struct quant_opts o;
    struct kv_err e = {{0}};
    int rc;
    memset(&o, 0, sizeof o);
    if ((rc = kv_arg_parse(t, argc, argv, help, version, end,
                           "kvattn quant --kv-dtype T (-k K [-v V] | --kv-cache C) [options]",
                           quant_synopsis)) >= 0)
        goto out;
    rc = KV_EXIT_USAGE;
    if (!dt->count) {
        kv_usage("--kv-dtype is required (fp8_e4m3, fp8_e5m2, fp8_per_token_head, "
                 "fp8_ds_mla)");
        goto out;
    }
    if (strcmp(dt->sval[0], "fp8_per_token_head") == 0) {
        o.fmt = KV_FP8_E4M3;
        o.per_token_head = 1;
    } else if (strcmp(dt->sval[0], "fp8_ds_mla") == 0) {
        o.fmt = KV_FP8_E4M3;
        o.ds_mla = 1;
    } else if (kv_fp8_parse(dt->sval[0], &o.fmt, &e)) {
        kv_usage("--kv-dtype: %s", e.msg);
        goto out;
    }
    o.k = k->count ? k->filename[0] : NULL;
    o.v = v->count ? v->filename[0] : NULL;
    o.cache = cache->count ? cache->filename[0] : NULL;
    o.out = out->count ? out->filename[0] : NULL;
    o.v_out = vout->count ? vout->filename[0] : NULL;
    o.scales_out = sout->count ? sout->filename[0] : NULL;
    if (o.ds_mla && (o.cache || o.v || !o.k || ks->count || vs->count || o.scales_out)) {
        kv_usage("fp8_ds_mla quantizes an MLA latent cache [..., 576], given as -k, with "
                 "scales of its own (no -v, --kv-cache, --k-scale, --v-scale, --scales-out)");
        goto out;
    }
    if (o.cache && (o.k || o.v)) {
        kv_usage("--kv-cache replaces -k/-v");
        goto out;
    }
    if (!o.cache && !o.k && !o.v) {
        kv_usage("give -k FILE (and -v FILE) or --kv-cache FILE");
        goto out;
    }
    if (!o.cache && !o.k) {
        o.k = o.v;          /* values alone: quantized with --v-scale */
        o.v = NULL;
        if (ks->count) {
            kv_usage("--k-scale: no keys given (-k)");
            goto out;
        }
        ks = vs;
    }
    if (o.v_out && !o.v) {
        kv_usage("--v-out needs -k and -v");
        goto out;
    }
    if (o.per_token_head) {
        if (ks->count || vs->count) {
            kv_usage("fp8_per_token_head computes its scales (drop --k-scale/--v-scale)");
            goto out;
        }
        if (o.cache) {
            kv_usage("fp8_per_token_head: give -k and -v (the scales are per token "
                     "and head of each)");
            goto out;
        }
        if (!o.scales_out) {
            kv_usage("fp8_per_token_head needs --scales-out FILE for its scales");
            goto out;
        }
    } else if (o.scales_out) {
        kv_usage("--scales-out: only fp8_per_token_head computes scales");
        goto out;
    } else if (!o.cache && !o.v && vs->count && ks != vs) {
        kv_usage("--v-scale: no values given (-v)");
        goto out;
    }
    if ((rc = parse_fp8_scale(ks, ks == vs ? "--v-scale" : "--k-scale", &o.k_scale)) ||
        (rc = parse_fp8_scale(vs, "--v-scale", &o.v_scale)))
        goto out;
    if (ks == vs)
        o.v_scale = o.k_scale;
    const char *opts[] = {"-o", "--v-out", "--scales-out"};
    const char *outs[] = {o.out ? o.out : "-", o.v_out, o.scales_out};
    if ((rc = outputs_distinct(opts, outs, 3)))
        goto out;
    if (is_stdin(o.k) + is_stdin(o.v) + is_stdin(o.cache) > 1) {
        rc = kv_usage("only one input can be standard input");
        goto out;
    }
    if ((rc = parse_format(fmt, &o.ofmt)) || (rc = parse_max_mem(mem, &o.max_mem)))
        goto out;
    o.force = force->count > 0;
    rc = run_quant(&o);
out:
    arg_freetable(t, sizeof t / sizeof *t);
    return rc;
}
