/* xattn_call.c - kvxattn's estimate timed the way the original's is: the
 * library call on Q and K already in memory, repeated in one process, the
 * best wall time kept.  The bench compares it with the original's
 * xattn_estimate timed in a warm Python (bench/kvxattn_peer.py peer), so
 * both sides leave out process start-up and reading the inputs.
 *
 *   xattn_call Q.npy K.npy THREADS REPEAT [THRESHOLD]
 *
 * Defaults as kvxattn estimate's (stride 8, block 128, causal, inverse);
 * bf16 Q and K take the CPU's bf16 route, as the command does.  Prints the
 * best seconds.  Built and run by bench/bench-kvxattn.sh; not part of
 * kvtools.
 */
#include <stdio.h>
#include <stdlib.h>
#include "attn/bf16.h"
#include "attn/xattn.h"
#include "core/cli.h"
#include "core/npy.h"
#include "core/tensor.h"

int main(int argc, char **argv)
{
    struct kv_tensor q = {0}, k = {0};
    struct kv_xattn_opts o;
    struct kv_err e = {0};
    double thr, best = -1.0;
    int reps;

    if (argc < 5) {
        fprintf(stderr, "usage: xattn_call Q.npy K.npy THREADS REPEAT [THRESHOLD]\n");
        return 2;
    }
    if (kv_npy_load(argv[1], 0, &q, &e) || kv_npy_load(argv[2], 0, &k, &e)) {
        fprintf(stderr, "xattn_call: %s\n", e.msg);
        return 1;
    }
    thr = argc > 5 ? atof(argv[5]) : 0.9;
    reps = atoi(argv[4]);
    kv_xattn_opts_init(&o);
    o.nthreads = atoi(argv[3]);
    o.thresholds = malloc((size_t)q.shape[1] * sizeof(double));
    if (!o.thresholds)
        return 1;
    for (int64_t h = 0; h < q.shape[1]; h++)
        ((double *)o.thresholds)[h] = thr;
    if (q.dtype == KV_BF16 && k.dtype == KV_BF16)
        o.bf16_route = (int)kv_bf16_route_best();
    for (int r = 0; r < reps; r++) {
        struct kv_tensor mask = {0};
        double t0 = kv_now(), dt;
        if (kv_xattn_estimate(&q, &k, &o, &mask, NULL, NULL, &e)) {
            fprintf(stderr, "xattn_call: %s\n", e.msg);
            return 1;
        }
        dt = kv_now() - t0;
        best = best < 0.0 || dt < best ? dt : best;
        kv_tensor_release(&mask);
    }
    printf("%.6f\n", best);
    return 0;
}
