/* decode_call.c - paged decode's bytes per second against memcpy of the
 * same number of bytes, in one process, for bench/bench-decode.sh.
 *
 *   decode_call DTYPE THREADS ROUNDS [TOKENS [HQ HKV D]]
 *
 * DTYPE is f32, bf16, fp8_e4m3 or fp8_e5m2.  One request of TOKENS cached
 * tokens (default 32768) in a paged cache [2, n_blocks, 16, HKV, D]
 * (default Hq 32, Hkv 8, D 128: Llama-3-8B's attention) whose blocks are
 * a random permutation, as a long-running engine's free list leaves them;
 * one decode query.  Each round times kv_attn_run on THREADS threads and
 * a memcpy of the cache's bytes on THREADS threads (each its share, its
 * own source and destination, all as large as the cache together), one
 * after the other so that both see the same load.  Prints one line:
 *
 *   bytes  kvattn_GB/s  memcpy_GB/s  median  min  max
 *          kvattn_cpu_GB/s  memcpy_cpu_GB/s  median  min  max
 *
 * the two rates the best of the rounds, the ratios kvattn / memcpy of
 * each round (median, min, max); then the same by CPU time (the process's,
 * all threads: bytes per CPU-second times the threads).  Built and run by bench/bench-decode.sh;
 * not part of kvtools.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "attn/attn.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/tensor.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct cp { char *dst; const char *src; size_t n; };

static void *cp_run(void *arg)
{
    struct cp *c = arg;
    memcpy(c->dst, c->src, c->n);
    return NULL;
}

/* memcpy of nt shares of the buffers on nt threads; seconds. */
static double copy_time(struct cp *c, int nt)
{
    pthread_t t[64];
    double t0 = now();
    for (int i = 1; i < nt; i++)
        pthread_create(&t[i], NULL, cp_run, &c[i]);
    cp_run(&c[0]);
    for (int i = 1; i < nt; i++)
        pthread_join(t[i], NULL);
    return now() - t0;
}

static uint64_t rng = 88172645463325252ull;
static double unif(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: decode_call f32|bf16|fp8_e4m3|fp8_e5m2 THREADS ROUNDS "
                "[TOKENS [HQ HKV D]]\n");
        return 2;
    }
    const char *dt = argv[1];
    int nt = atoi(argv[2]), rounds = atoi(argv[3]);
    int64_t T = argc > 4 ? atoll(argv[4]) : 32768;
    int64_t Hq = argc > 7 ? atoll(argv[5]) : 32, Hkv = argc > 7 ? atoll(argv[6]) : 8;
    int64_t D = argc > 7 ? atoll(argv[7]) : 128, BS = 16;
    if (nt < 1 || nt > 64 || rounds < 1 || T < 1 || rounds > 1000)
        return 2;
    enum kv_dtype kd = KV_F32;
    enum kv_fp8 f8 = KV_FP8_E4M3;
    int fp8 = 0;
    struct kv_err e = {{0}};
    if (strcmp(dt, "bf16") == 0)
        kd = KV_BF16;
    else if (strncmp(dt, "fp8", 3) == 0) {
        if (kv_fp8_parse(dt, &f8, &e))
            return 2;
        kd = KV_U8;
        fp8 = 1;
    } else if (strcmp(dt, "f32") != 0)
        return 2;
    int64_t nblk = (T + BS - 1) / BS;
    struct kv_tensor cache, q, out;
    kv_tensor_init(&cache);
    kv_tensor_init(&q);
    kv_tensor_init(&out);
    int64_t cs[5] = { 2, nblk, BS, Hkv, D }, qs[3] = { 1, Hq, D };
    if (kv_tensor_alloc(&cache, kd, 5, cs, 0, &e) || kv_tensor_alloc(&q, KV_F32, 3, qs, 0, &e)) {
        fprintf(stderr, "decode_call: %s\n", e.msg);
        return 1;
    }
    size_t n = cache.nbytes / kv_dtype_size(kd);
    /* FP8 bytes of values spread over [-4, 4] (no NaN), by table */
    uint8_t lut[4096];
    for (int i = 0; i < 4096; i++)
        lut[i] = kv_fp8_from_f32(((float)i - 2048.0f) / 512.0f, f8);
    for (size_t i = 0; i < n; i++) {
        float x = (float)unif();
        if (kd == KV_F32)
            ((float *)cache.data)[i] = x;
        else if (kd == KV_BF16)
            ((uint16_t *)cache.data)[i] = kv_f32_to_bf16(x);
        else
            ((uint8_t *)cache.data)[i] = lut[(size_t)(x * 2048.0f + 2048.0f) & 4095];
    }
    for (int64_t i = 0; i < Hq * D; i++)
        ((float *)q.data)[i] = (float)unif();
    if (kd == KV_BF16) {
        /* bf16 Q with a bf16 cache: the route engines take */
        struct kv_tensor qb;
        kv_tensor_init(&qb);
        if (kv_tensor_alloc(&qb, KV_BF16, 3, qs, 0, &e))
            return 1;
        for (int64_t i = 0; i < Hq * D; i++)
            ((uint16_t *)qb.data)[i] = kv_f32_to_bf16(((float *)q.data)[i]);
        kv_tensor_release(&q);
        q = qb;
    }
    int64_t *bt = malloc((size_t)nblk * sizeof *bt);
    for (int64_t i = 0; i < nblk; i++)
        bt[i] = i;
    for (int64_t i = nblk - 1; i > 0; i--) {
        int64_t j = (int64_t)((unif() + 1.0) / 2.0 * (double)(i + 1));
        if (j > i)
            j = i;
        int64_t t = bt[i]; bt[i] = bt[j]; bt[j] = t;
    }
    struct kv_attn_req r;
    memset(&r, 0, sizeof r);
    r.layout = KV_ATTN_THD;
    r.q = &q;
    r.kv_cache = &cache;
    r.block_table = bt;
    r.bt_rows = 1;
    r.bt_cols = (size_t)nblk;
    int64_t ql = 1;
    r.q_lens = &ql;
    r.n_q_lens = 1;
    r.seq_lens = &T;
    r.n_seq_lens = 1;
    r.out_dtype = KV_NDTYPES;
    r.n_threads = nt;
    if (fp8) {
        r.kv_fp8 = (int)f8 + 1;
        r.k_scale = 0.25f;
        r.v_scale = 0.5f;
    }
    /* the bytes the decode reads: the request's blocks of K and V */
    size_t bytes = (size_t)(2 * T * Hkv * D) * kv_dtype_size(kd);
    struct cp c[64];
    size_t share = (bytes / (size_t)nt + 63) & ~(size_t)63;
    for (int i = 0; i < nt; i++) {
        c[i].n = share;
        c[i].dst = malloc(share);
        char *src = malloc(share);
        memset(src, i + 1, share);
        memset(c[i].dst, 0, share);
        c[i].src = src;
    }
    double *ratio = malloc((size_t)rounds * sizeof *ratio);
    double *rcpu = malloc((size_t)rounds * sizeof *rcpu);
    double best_k = 1e30, best_m = 1e30, best_kc = 1e30, best_mc = 1e30;
    for (int rd = -1; rd < rounds; rd++) {
        double c0 = cpu(), t0 = now();
        if (kv_attn_run(&r, &out, NULL, &e)) {
            fprintf(stderr, "decode_call: %s\n", e.msg);
            return 1;
        }
        double tk = now() - t0, ck = cpu() - c0;
        kv_tensor_release(&out);
        c0 = cpu();
        double tm = copy_time(c, nt), cm = cpu() - c0;
        if (rd < 0)
            continue;       /* the first round warms the pages and the threads */
        ratio[rd] = ((double)bytes / tk) / ((double)(share * (size_t)nt) / tm);
        rcpu[rd] = ((double)bytes / ck) / ((double)(share * (size_t)nt) / cm);
        if (ck < best_kc)
            best_kc = ck;
        if (cm < best_mc)
            best_mc = cm;
        if (tk < best_k)
            best_k = tk;
        if (tm < best_m)
            best_m = tm;
    }
    qsort(ratio, (size_t)rounds, sizeof *ratio, cmpd);
    qsort(rcpu, (size_t)rounds, sizeof *rcpu, cmpd);
    printf("%zu %.2f %.2f %.3f %.3f %.3f %.2f %.2f %.3f %.3f %.3f\n", bytes,
           (double)bytes / best_k / 1e9, (double)(share * (size_t)nt) / best_m / 1e9,
           ratio[rounds / 2], ratio[0], ratio[rounds - 1],
           (double)bytes / best_kc * nt / 1e9, (double)(share * (size_t)nt) / best_mc * nt / 1e9,
           rcpu[rounds / 2], rcpu[0], rcpu[rounds - 1]);
    free(rcpu);
    for (int i = 0; i < nt; i++) {
        free(c[i].dst);
        free((void *)c[i].src);
    }
    free(ratio);
    free(bt);
    kv_tensor_release(&cache);
    kv_tensor_release(&q);
    return 0;
}
