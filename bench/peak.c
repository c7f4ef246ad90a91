/* peak.c - the roofline of make bench: the measured peak rate of the
 * dot-product instructions kvtools' kernels use, and memory bandwidth.
 *
 *   peak THREADS [cpu]   prints "name value unit" lines (rates on THREADS
 *                        threads by wall time, or with cpu per CPU-second
 *                        of each thread times THREADS):
 *     fma_f32   GFLOP/s of AVX-512 (else AVX2) f32 FMA, THREADS threads
 *     fma_f32_avx2  the same of AVX2 FMA (256-bit code, also on AVX-512 CPUs)
 *     dp_bf16   GFLOP/s of VDPBF16PS (2 FLOPs per bf16 pair), where present
 *     memcpy    GB/s copied (bytes of the source per second), THREADS threads
 *     memset    GB/s written
 *
 * Each thread runs independent accumulator chains (enough to hide the
 * latency), best of 30 runs (10 for memory).  Built and run by bench/run.sh; not part of
 * kvtools.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define ITERS 20000000L
enum { K_FMA512, K_FMA256, K_BF16, K_MEMCPY, K_MEMSET };
struct job { int kind; double flops, cpu; char *src, *dst; size_t n; float sink; };

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if defined(__x86_64__)
#define CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
__attribute__((target("avx512f")))
static float fma512(long n)
{
#define D0(i) __m512 a##i = _mm512_set1_ps(1.0f + (float)(i) * 1e-3f);
#define F0(i) a##i = _mm512_fmadd_ps(a##i, m, c);
#define S0(i) s = _mm512_add_ps(s, a##i);
    CHAINS(D0)
    __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f), s = _mm512_setzero_ps();
    for (long k = 0; k < n; k++) {
        CHAINS(F0)
        __asm__("" : "+v"(m));
    }
    CHAINS(S0)
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma")))
static float fma256(long n)
{
#define D1(i) __m256 a##i = _mm256_set1_ps(1.0f + (float)(i) * 1e-3f);
#define F1(i) a##i = _mm256_fmadd_ps(a##i, m, c);
#define S1(i) s = _mm256_add_ps(s, a##i);
    CHAINS(D1)
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f), s = _mm256_setzero_ps();
    for (long k = 0; k < n; k++) {
        CHAINS(F1)
        __asm__("" : "+v"(m));
    }
    CHAINS(S1)
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0];
}

#if defined(__clang__) || __GNUC__ >= 10
__attribute__((target("avx512f,avx512bf16")))
static float dpbf16(long n)
{
#define D2(i) __m512 a##i = _mm512_set1_ps((float)(i));
#define F2(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
#define S2(i) s = _mm512_add_ps(s, a##i);
    CHAINS(D2)
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = x;
    __m512 s = _mm512_setzero_ps();
    for (long k = 0; k < n; k++) {
        CHAINS(F2)
        __asm__("" : "+v"(x));
    }
    CHAINS(S2)
    return _mm512_reduce_add_ps(s);
}
#define HAVE_BF16 1
#endif
#endif

static void *run(void *arg)
{
    struct job *j = arg;
    double c0 = thread_cpu();
    switch (j->kind) {
#if defined(__x86_64__)
    case K_FMA512: j->sink = fma512(ITERS / 4); j->flops = 12.0 * 32 * (ITERS / 4); break;
    case K_FMA256: j->sink = fma256(ITERS / 4); j->flops = 12.0 * 16 * (ITERS / 4); break;
#ifdef HAVE_BF16
    case K_BF16: j->sink = dpbf16(ITERS / 4); j->flops = 12.0 * 64 * (ITERS / 4); break;
#endif
#endif
    case K_MEMCPY: memcpy(j->dst, j->src, j->n); j->flops = (double)j->n; break;
    case K_MEMSET: memset(j->dst, j->n & 1, j->n); j->flops = (double)j->n; break;
    }
    j->cpu = thread_cpu() - c0;
    return NULL;
}

/* Best rate of 5 runs of kind on nt threads (units per second). */
static int by_cpu;

static double measure(int kind, int nt, size_t bytes)
{
    double best = 0.0;
    struct job *j = calloc((size_t)nt, sizeof *j);
    pthread_t *t = calloc((size_t)nt, sizeof *t);
    for (int i = 0; i < nt; i++) {
        j[i].kind = kind;
        j[i].n = bytes / (size_t)nt;
        if (bytes) {
            j[i].src = malloc(j[i].n);
            j[i].dst = malloc(j[i].n);
            memset(j[i].src, 1, j[i].n);
            memset(j[i].dst, 2, j[i].n);
        }
    }
    for (int r = 0; r < (bytes ? 10 : 30); r++) {
        double t0 = now(), total = 0.0, cpu = 0.0;
        for (int i = 0; i < nt; i++)
            pthread_create(&t[i], NULL, run, &j[i]);
        for (int i = 0; i < nt; i++) {
            pthread_join(t[i], NULL);
            total += j[i].flops;
            cpu += j[i].cpu;
        }
        /* wall, or per CPU-second times the threads (steady on a shared
         * machine: what the threads do when they run) */
        double rate = by_cpu ? total / (cpu / nt) : total / (now() - t0);
        if (rate > best)
            best = rate;
    }
    for (int i = 0; i < nt; i++) {
        free(j[i].src);
        free(j[i].dst);
    }
    free(j);
    free(t);
    return best;
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 1;
    by_cpu = argc > 2 && strcmp(argv[2], "cpu") == 0;
    if (nt < 1)
        nt = 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        printf("fma_f32 %.1f GFLOP/s (AVX-512)\n", measure(K_FMA512, nt, 0) / 1e9);
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        printf("fma_f32 %.1f GFLOP/s (AVX2)\n", measure(K_FMA256, nt, 0) / 1e9);
    /* the AVX2 code's own peak, which KVTOOLS_ISA=avx2 runs are held to
     * (on an AVX-512 CPU: the same cores running 256-bit code) */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        printf("fma_f32_avx2 %.1f GFLOP/s (AVX2)\n", measure(K_FMA256, nt, 0) / 1e9);
#ifdef HAVE_BF16
    if (__builtin_cpu_supports("avx512bf16"))
        printf("dp_bf16 %.1f GFLOP/s (VDPBF16PS)\n", measure(K_BF16, nt, 0) / 1e9);
    else
        printf("dp_bf16 - (no AVX512_BF16)\n");
#endif
#endif
    printf("memcpy %.2f GB/s\n", measure(K_MEMCPY, nt, (size_t)256 << 20) / 1e9);
    printf("memset %.2f GB/s\n", measure(K_MEMSET, nt, (size_t)256 << 20) / 1e9);
    return 0;
}
