/* kvchunk slice: one layer's K or V for kvattn (libkv's kv_slice_layer,
 * chunk/slice.h). */
#include "kvchunk.h"

int cmd_slice(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct common c;
    struct arg_str *layer, *part, *layout;
    struct out_args oa;
    struct arg_file *in;
    add(&t, layer = arg_str0(NULL, "layer", "L", "layer (default 0)"));
    add(&t, part = arg_str0(NULL, "part", "k|v", "K or V (default k)"));
    add(&t, layout = arg_str0(NULL, "layout", "thd|bhsd", "output layout: "
                              "[T, HKV, D] or [1, HKV, T, D] (default thd)"));
    add_out(&t, &oa, NULL);
    add(&t, in = arg_file0(NULL, NULL, "KV", "KV [L, 2, T, HKV, D] .npy "
                           "(default stdin)"));
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nOne layer's K or V of a KV tensor, "
                   "for kvattn.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct kv_err e;
    size_t lim;
    int64_t l = 0;
    int is_v = 0, bhsd = 0;
    if (sval(layer) && kv_parse_i64(sval(layer), "--layer", 0, 1 << 20, &l,
                                    &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if (sval(part)) {
        if (!strcmp(sval(part), "v"))
            is_v = 1;
        else if (strcmp(sval(part), "k")) {
            rc = kv_usage("--part: expected k or v, got '%s'", sval(part));
            free_table(&t);             /* it holds the value */
            return rc;
        }
    }
    if (sval(layout)) {
        if (!strcmp(sval(layout), "bhsd"))
            bhsd = 1;
        else if (strcmp(sval(layout), "thd")) {
            rc = kv_usage("--layout: expected thd or bhsd, got '%s'",
                          sval(layout));
            free_table(&t);             /* it holds the value */
            return rc;
        }
    }
    if ((rc = max_mem(&c, &lim)) != 0) {
        free_table(&t);
        return rc;
    }
    const char *path = in->count ? in->filename[0] : "-";
    struct kv_tensor x, y;
    kv_tensor_init(&x);
    kv_tensor_init(&y);
    rc = 1;
    if (kv_slice_read(path, lim, &x, &e) < 0)
        goto fail;
    if (l >= x.shape[0]) {
        kv_usage("--layer: %lld out of range [0, %lld)", (long long)l,
                 (long long)x.shape[0]);
        rc = 2;
        goto out;
    }
    if (kv_slice_layer(&x, l, is_v ? KV_SLICE_V : KV_SLICE_K,
                       bhsd ? KV_SLICE_BHSD : KV_SLICE_THD, lim, &y, &e) < 0)
        goto fail;
    rc = kv_write_tensors(sval(oa.out), KV_FMT_AUTO, oa.force->count, &y, 1);
    goto out;
fail:
    rc = kv_fail_err(&e);
out:
    kv_tensor_release(&x);
    kv_tensor_release(&y);
    free_table(&t);
    return rc;
}
