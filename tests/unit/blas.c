/* blas.c - OpenBLAS opened on first need (lib/core/blas.c): not mapped
 * before kv_blas_load, OPENBLAS_NUM_THREADS shown as 1 while it loads and
 * gone afterwards, the user's value kept, a thread count asked for before
 * the load applied by it, a missing or wrong library reported (and, for
 * kv_blas_sgemm without kv_blas_load, an abort), and kv_blas_sgemm's
 * four transpositions with padded leading dimensions against an exact
 * reference.  The load happens once per process, so each case that loads
 * runs in a child of its own. */
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/blas.h"
#include "core/err.h"
#include "tap.h"

#define LIB "libopenblas.so.0"
#define MISSING "/nonexistent/libopenblas.so.0"

/* The handle of OpenBLAS if it is mapped already, else NULL. */
static void *mapped(void)
{
    return dlopen(LIB, RTLD_LAZY | RTLD_NOLOAD);
}

/* OpenBLAS's thread count (it must be mapped), or -1. */
static int blas_threads(void)
{
    void *h = mapped();
    int (*get)(void);
    if (!h)
        return -1;
    get = (int (*)(void))dlsym(h, "openblas_get_num_threads");
    return get ? get() : -1;
}

/* Run fn in a child; its exit status (0: every check held, else the
 * number of the first that failed), or 100 + the signal that ended it. */
static int in_child(int (*fn)(void))
{
    int st;
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn());
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

static int load_default(void)
{
    struct kv_err e;
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("KVTOOLS_OPENBLAS");
    if (mapped())
        return 1;
    if (kv_blas_load(&e))
        return 2;
    if (!mapped())
        return 3;
    if (getenv("OPENBLAS_NUM_THREADS"))
        return 4;
    if (blas_threads() != 1)
        return 5;
    return kv_blas_load(&e) ? 6 : 0;
}

static int load_user_value(void)
{
    struct kv_err e;
    const char *v;
    setenv("OPENBLAS_NUM_THREADS", "2", 1);
    unsetenv("KVTOOLS_OPENBLAS");
    if (kv_blas_load(&e))
        return 1;
    v = getenv("OPENBLAS_NUM_THREADS");
    if (!v || strcmp(v, "2") != 0)
        return 2;
    return blas_threads() == 2 ? 0 : 3;
}

static int threads_before_load(void)
{
    struct kv_err e;
    setenv("OPENBLAS_NUM_THREADS", "2", 1);
    unsetenv("KVTOOLS_OPENBLAS");
    kv_blas_set_threads(1);
    if (mapped())
        return 1;
    if (kv_blas_load(&e))
        return 2;
    return blas_threads() == 1 ? 0 : 3;
}

static int load_missing(void)
{
    struct kv_err e, e2;
    unsetenv("OPENBLAS_NUM_THREADS");
    setenv("KVTOOLS_OPENBLAS", MISSING, 1);
    if (kv_blas_load(&e) != -1)
        return 1;
    if (!strstr(e.msg, "cannot load OpenBLAS") || !strstr(e.msg, MISSING))
        return 2;
    if (getenv("OPENBLAS_NUM_THREADS"))
        return 3;
    if (kv_blas_load(&e2) != -1 || strcmp(e.msg, e2.msg) != 0)
        return 4;
    kv_blas_set_threads(1);             /* nothing loaded: a no-op */
    return mapped() ? 5 : 0;
}

static int load_not_blas(void)
{
    struct kv_err e;
    setenv("KVTOOLS_OPENBLAS", "libm.so.6", 1);
    if (kv_blas_load(&e) != -1)
        return 1;
    return strstr(e.msg, "libm.so.6") && strstr(e.msg, "cblas_sgemm") ? 0 : 2;
}

static int sgemm_missing(void)
{
    float a = 1.0f, b = 1.0f, c = 0.0f;
    setenv("KVTOOLS_OPENBLAS", MISSING, 1);
    kv_blas_sgemm(KV_BLAS_N, KV_BLAS_N, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
    return 1;                           /* not reached: it aborts */
}

/* Run sgemm_missing in a child whose stderr is a pipe; its status as
 * in_child's, and what it wrote to stderr in msg (at most n - 1 bytes). */
static int sgemm_missing_said(char *msg, size_t n)
{
    int fd[2], st;
    size_t got = 0;
    ssize_t r;
    if (pipe(fd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        _exit(sgemm_missing());
    }
    close(fd[1]);
    while (pid > 0 && got + 1 < n && (r = read(fd[0], msg + got, n - 1 - got)) > 0)
        got += (size_t)r;
    while (got > 0 && msg[got - 1] == '\n')
        got--;
    msg[got] = 0;
    close(fd[0]);
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

/* Small integers, so that every product and sum below is exact in f32. */
static float val(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((int)((*s >> 16) % 9u) - 4);
}

/* kv_blas_sgemm against the plain triple loop in double: op(A) m x k,
 * op(B) k x n, every leading dimension padded; 0 when they agree exactly. */
static int sgemm_case(enum kv_blas_trans ta, enum kv_blas_trans tb, int m, int n, int k)
{
    int ar = ta == KV_BLAS_N ? m : k, ac = ta == KV_BLAS_N ? k : m;
    int br = tb == KV_BLAS_N ? k : n, bc = tb == KV_BLAS_N ? n : k;
    int lda = ac + 3, ldb = bc + 2, ldc = n + 5, bad = 0;
    float *a = malloc(sizeof(float) * (size_t)(ar * lda));
    float *b = malloc(sizeof(float) * (size_t)(br * ldb));
    float *c = malloc(sizeof(float) * (size_t)(m * ldc));
    float *c0 = malloc(sizeof(float) * (size_t)(m * ldc));
    unsigned s = (unsigned)(m * 131 + n * 17 + k + ta * 3 + tb);

    if (!a || !b || !c || !c0) {
        free(a); free(b); free(c); free(c0);
        return -1;
    }
    for (int i = 0; i < ar * lda; i++)
        a[i] = val(&s);
    for (int i = 0; i < br * ldb; i++)
        b[i] = val(&s);
    for (int i = 0; i < m * ldc; i++)
        c0[i] = c[i] = val(&s);
    kv_blas_sgemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, -2.0f, c, ldc);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++) {
            double want = c0[i * ldc + j];
            if (j < n) {
                double dot = 0.0;
                for (int l = 0; l < k; l++)
                    dot += (double)(ta == KV_BLAS_N ? a[i * lda + l] : a[l * lda + i]) *
                           (tb == KV_BLAS_N ? b[l * ldb + j] : b[j * ldb + l]);
                want = 0.5 * dot - 2.0 * want;
            }
            bad += (double)c[i * ldc + j] != want;   /* the padding untouched */
        }
    free(a); free(b); free(c); free(c0);
    return bad;
}

int main(void)
{
    static const int dims[][3] = {{1, 1, 1}, {5, 7, 9}, {70, 65, 130}, {256, 33, 64}};
    static const char *const tn[] = {"N", "T"};
    cpu_set_t cpus;
    int st, ncpu = 1;

    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
        ncpu = CPU_COUNT(&cpus);
    TAP_OK(!mapped(), "OpenBLAS not mapped at start");
    st = in_child(load_default);
    TAP_OK(st == 0, "loaded with one thread, the variable gone again (%d)", st);
    if (ncpu >= 2) {
        st = in_child(load_user_value);
        TAP_OK(st == 0, "OPENBLAS_NUM_THREADS=2 of the user kept (%d)", st);
    } else {
        TAP_OK(1, "OPENBLAS_NUM_THREADS=2 of the user kept # SKIP one CPU");
    }
    st = in_child(threads_before_load);
    TAP_OK(st == 0, "a thread count asked for before the load applied by it (%d)", st);
    st = in_child(load_missing);
    TAP_OK(st == 0, "a missing library: the error names it, every call (%d)", st);
    st = in_child(load_not_blas);
    TAP_OK(st == 0, "a library without cblas_sgemm: the error says so (%d)", st);
    char said[512];
    st = sgemm_missing_said(said, sizeof said);
    TAP_OK(st == 100 + SIGABRT, "kv_blas_sgemm with no OpenBLAS and no kv_blas_load aborts (%d)",
           st);
    TAP_OK(strstr(said, "cannot load OpenBLAS: " MISSING) != NULL,
           "its message names the library: %s", said);
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int m = dims[d][0], n = dims[d][1], k = dims[d][2];
                int bad = sgemm_case(ta ? KV_BLAS_T : KV_BLAS_N, tb ? KV_BLAS_T : KV_BLAS_N,
                                     m, n, k);
                TAP_OK(bad == 0, "sgemm %s%s %dx%dx%d exact, padding untouched (%d wrong)",
                       tn[ta], tn[tb], m, n, k, bad);
            }
    return tap_done();
}
