/* xattn_vectors.c - the public XAttention conformance vectors: masks equal
 * and block sums within the sum of two bounds of the original estimator's output, in the
 * clean default geometry and in --compat-chunk-size mode, for several
 * thread counts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "attn/xattn.h"
#include "attn/bound.h"
#include "tap.h"

static const char *top;

static int load(const char *name, struct kv_tensor *t)
{
    char path[4096];
    struct kv_err e;

    snprintf(path, sizeof(path), "%s/tests/vectors/xattn/%s", top, name);
    kv_tensor_init(t);
    if (kv_npy_load(path, 0, t, &e)) {
        printf("# %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* Run one case and compare with the vector's mask and sums. */
static void check_case(const char *title, const char *qn, const char *kn,
                       const char *cn, int64_t q_offset, int64_t chunk,
                       int nthreads)
{
    struct kv_tensor q, k, wm, ws, m, s;
    struct kv_xattn_opts o;
    struct kv_err e;
    double thr[2] = {0.9, 0.9}, maxerr = 0.0;
    char name[64];
    int64_t nbad = 0;

    if (load(qn, &q) || load(kn, &k)) {
        TAP_OK(0, "%s: inputs", title);
        return;
    }
    snprintf(name, sizeof(name), "%s_mask.npy", cn);
    load(name, &wm);
    snprintf(name, sizeof(name), "%s_sums.npy", cn);
    load(name, &ws);
    kv_xattn_opts_init(&o);
    o.thresholds = thr;
    o.q_offset = q_offset;
    o.compat_chunk = chunk;
    o.nthreads = nthreads;
    kv_tensor_init(&m);
    kv_tensor_init(&s);
    if (kv_xattn_estimate(&q, &k, &o, &m, &s, NULL, &e)) {
        TAP_OK(0, "%s: %s", title, e.msg);
        goto out;
    }
    TAP_OK(m.ndim == 4 && memcmp(m.shape, wm.shape, sizeof(m.shape)) == 0,
           "%s: mask shape", title);
    for (size_t i = 0; i < wm.nbytes && i < m.nbytes; i++)
        nbad += (((uint8_t *)m.data)[i] != 0) != (((uint8_t *)wm.data)[i] != 0);
    TAP_OK(m.nbytes == wm.nbytes && nbad == 0, "%s: mask equal (%lld differ)",
           title, (long long)nbad);
    /* two f32 computations of the same sums (the original's and ours): each
     * within the relative bound of kvxattn(1) ACCURACY of the exact sums */
    int64_t D = q.shape[q.ndim - 1], Lk = k.shape[k.ndim - 2];
    double beta = kv_bound_xattn_sum(o.stride, D, kv_bound_xattn_A(&q, &k, o.norm),
                                     (Lk + o.stride - 1) / o.stride,
                                     (o.block_size / o.stride) * (o.block_size / o.stride));
    for (size_t i = 0; i < kv_tensor_numel(&ws) && s.nbytes == ws.nbytes; i++) {
        double a = ((float *)s.data)[i], b = ((float *)ws.data)[i];
        double d = fabs(a - b) / (2 * beta * fmax(fabs(a), fabs(b)) + 1e-300);
        if (a != b && d > maxerr)
            maxerr = d;
    }
    TAP_OK(s.nbytes == ws.nbytes && maxerr <= 1.0,
           "%s: sums within the sum of two bounds (worst %.3g of it)", title, maxerr);
out:
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&wm);
    kv_tensor_release(&ws);
    kv_tensor_release(&m);
    kv_tensor_release(&s);
}

int main(void)
{
    top = getenv("KV_TOP");
    if (!top)
        top = ".";
    for (int j = 1; j <= 3; j += 2) {
        char t[64];
        snprintf(t, sizeof(t), "c01 default -j%d", j);
        check_case(t, "in_rand_q.npy", "in_rand_k.npy", "c01", -1, 0, j);
        snprintf(t, sizeof(t), "c05 default -j%d", j);
        check_case(t, "in_peaky_q.npy", "in_peaky_k.npy", "c05", -1, 0, j);
        snprintf(t, sizeof(t), "c14 q offset 768 -j%d", j);
        check_case(t, "in_peaky_q_last256.npy", "in_peaky_k.npy", "c14", 768,
                   0, j);
        snprintf(t, sizeof(t), "c14 default offset -j%d", j);
        check_case(t, "in_peaky_q_last256.npy", "in_peaky_k.npy", "c14", -1,
                   0, j);
    }
    check_case("c01 compat 16384", "in_rand_q.npy", "in_rand_k.npy", "c01",
               -1, 16384, 2);
    check_case("c05 compat 16384", "in_peaky_q.npy", "in_peaky_k.npy", "c05",
               -1, 16384, 2);
    check_case("c14 compat 384", "in_peaky_q_last256.npy", "in_peaky_k.npy",
               "c14", -1, 384, 2);
    return tap_done();
}
