/* mask_mem.c - unit tests of lib/mask/mask_mem.c: kv_mask_render gives,
 * for every kind, dtype, outer dims and thread count, the bytes that
 * kv_mask_write_npy writes after its header, and the shape that header
 * names; a buffer too small is refused and left untouched. */
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "mask/mask.h"
#include "mask/mask_mem.h"
#include "tap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t lo, int64_t hi)   /* inclusive */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

/* The data of kv_mask_write_npy's output (header parsed back) into *data,
 * its shape into t. */
static int npy_data(const struct kv_mask *m, const struct kv_mask_values *v,
                    const struct kv_mask_out *o, struct kv_tensor *t)
{
    char *buf = NULL;
    size_t len = 0;
    struct kv_err e;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -1;
    int rc = kv_mask_write_npy(f, m, v, o, 0, &e);
    fclose(f);
    if (rc == 0) {
        f = fmemopen(buf, len, "rb");
        rc = !f || kv_npy_read(f, 0, t, &e);
        if (f)
            fclose(f);
    }
    free(buf);
    return rc;
}

int main(void)
{
    static const enum kv_dtype dts[] = { KV_BOOL, KV_U8, KV_I8, KV_F16,
                                         KV_BF16, KV_F32 };
    int bad = 0, cases = 0;
    for (int c = 0; c < 400; c++) {
        struct kv_mask_spec s;
        struct kv_mask m;
        struct kv_mask_values v;
        struct kv_mask_out o;
        struct kv_err e;
        int64_t ql[4], kl[4];
        memset(&s, 0, sizeof s);
        memset(&o, 0, sizeof o);
        s.kind = (enum kv_mask_kind)rnd(0, 5);
        s.n_q = rnd(1, 300);
        s.n_kv = rnd(1, 300);
        s.top_left = (int)rnd(0, 1);
        s.window = rnd(1, 40);
        s.pre = rnd(0, 20);
        s.next = rnd(0, 20);
        s.prefix = rnd(0, 50);
        if (s.kind == KV_MASK_VARLEN) {
            s.n_req = (size_t)rnd(1, 4);
            for (size_t r = 0; r < s.n_req; r++) {
                ql[r] = rnd(0, 60);
                kl[r] = ql[r] + rnd(0, 30);
            }
            s.q_lens = ql;
            s.kv_lens = kl;
            s.window = rnd(0, 1) ? 0 : s.window;
        }
        o.threads = (int)rnd(1, 5);
        o.n_outer_dims = (int)rnd(0, 2);
        o.outer[0] = rnd(1, 3);
        o.outer[1] = rnd(1, 2);
        kv_mask_init(&m);
        enum kv_dtype dt = dts[rnd(0, 5)];
        if (kv_mask_make(&m, &s, &e) ||
            kv_mask_values_plain(&v, dt, (int)rnd(0, 1), NULL, &e)) {
            kv_mask_release(&m);
            continue;
        }
        struct kv_tensor ref;
        kv_tensor_init(&ref);
        size_t bytes;
        int64_t shape[KV_MAX_DIMS];
        int nd = kv_mask_dense_shape(&m, &o, shape);
        int ok = npy_data(&m, &v, &o, &ref) == 0 &&
                 kv_mask_dense_bytes(&m, &v, &o, 0, &bytes) == 0 &&
                 bytes == ref.nbytes && nd == ref.ndim &&
                 !memcmp(shape, ref.shape, (size_t)nd * sizeof *shape);
        unsigned char *got = malloc(bytes + 1);
        if (ok && got) {
            memset(got, 0xa5, bytes + 1);
            ok = kv_mask_render(&m, &v, &o, got, bytes, &e) == 0 &&
                 (bytes == 0 || !memcmp(got, ref.data, bytes)) &&
                 got[bytes] == 0xa5;
        }
        cases++;
        if (!ok) {
            bad++;
            if (bad <= 5)
                TAP_OK(0, "kind %d %lld x %lld dtype %s threads %d outer %d",
                       (int)s.kind, (long long)s.n_q, (long long)s.n_kv,
                       kv_dtype_name(dt), o.threads, o.n_outer_dims);
        }
        free(got);
        kv_tensor_release(&ref);
        kv_mask_release(&m);
    }
    TAP_OK(bad == 0 && cases > 300, "kv_mask_render equals kv_mask_write_npy's "
           "data and shape (%d random masks, %d differ)", cases, bad);

    /* too small a buffer: refused, untouched */
    {
        struct kv_mask_spec s = { .kind = KV_MASK_CAUSAL, .n_q = 8, .n_kv = 8 };
        struct kv_mask m;
        struct kv_mask_values v;
        struct kv_mask_out o = { .threads = 1 };
        struct kv_err e;
        unsigned char buf[64];
        kv_mask_init(&m);
        memset(buf, 0x5a, sizeof buf);
        int rc = kv_mask_make(&m, &s, &e) || kv_mask_values_plain(&v, KV_BOOL, 1, NULL, &e);
        TAP_OK(rc == 0 && kv_mask_render(&m, &v, &o, buf, 63, &e) == -1 &&
               buf[0] == 0x5a && strstr(e.msg, "64 bytes") != NULL,
               "a 63-byte buffer for 64 bytes is refused: %s", e.msg);
        kv_mask_release(&m);
    }
    return tap_done();
}
