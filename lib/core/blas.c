/* blas.c - OpenBLAS opened on first need (see blas.h).
 *
 * One pthread_once runs the load; `loaded` says it found both functions,
 * and is what kv_blas_sgemm and kv_blas_set_threads read (the pointers are
 * written before it is set).  A thread count asked for before the load is
 * kept in `want_threads` and applied by the load. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "core/blas.h"
#include "core/cli.h"
#include "core/err.h"

#define DEFAULT_LIB "libopenblas.so.0"
#define ROW_MAJOR 101                   /* CblasRowMajor */

/* Lazy binding, as when linked: binding OpenBLAS's thousands of functions
 * at once would cost half a millisecond.  And its own symbols looked up in
 * it first (RTLD_DEEPBIND): most of its ten thousand relocations name its
 * own tables, which a search from the program's scope (every library the
 * program links) reaches last, another 0.2 to 0.4 ms.  The address and
 * thread sanitizers' runtimes refuse RTLD_DEEPBIND. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define KV_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KV_SANITIZER 1
#endif
#if defined(RTLD_DEEPBIND) && !defined(KV_SANITIZER)
#define OPEN_FLAGS (RTLD_LAZY | RTLD_LOCAL | RTLD_DEEPBIND)
#else
#define OPEN_FLAGS (RTLD_LAZY | RTLD_LOCAL)
#endif

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta,
                         float *c, int ldc);
typedef void (*threads_fn)(int n);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static sgemm_fn blas_sgemm;
static threads_fn blas_threads;
static struct kv_err load_err;
static atomic_int loaded;
static atomic_int want_threads;

static void load(void)
{
    const char *name = getenv("KVTOOLS_OPENBLAS");
    int lend;
    void *h;

    if (!name || !*name)
        name = DEFAULT_LIB;
    /* OpenBLAS starts its threads while it initialises, inside dlopen */
    lend = getenv("OPENBLAS_NUM_THREADS") == NULL &&
           setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0;
    h = dlopen(name, OPEN_FLAGS);
    if (lend)
        unsetenv("OPENBLAS_NUM_THREADS");
    if (!h) {
        kv_err_set(&load_err, "cannot load OpenBLAS: %s", dlerror());
        return;
    }
    dlerror();
    blas_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    if (blas_sgemm)
        blas_threads = (threads_fn)dlsym(h, "openblas_set_num_threads");
    if (!blas_sgemm || !blas_threads) {
        const char *why = dlerror();
        kv_err_set(&load_err, "cannot use '%s' as OpenBLAS: %s", name,
                   why ? why : "a function is missing");
        blas_sgemm = NULL;
        blas_threads = NULL;
        dlclose(h);
        return;
    }
    atomic_store(&loaded, 1);
    int n = atomic_load(&want_threads);
    if (n > 0)
        blas_threads(n);
}

int kv_blas_load(struct kv_err *e)
{
    pthread_once(&load_once, load);
    if (atomic_load(&loaded))
        return 0;
    return kv_err_set(e, "%s", load_err.msg);
}

void kv_blas_sgemm(enum kv_blas_trans ta, enum kv_blas_trans tb, int m, int n, int k,
                   float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc)
{
    if (!atomic_load(&loaded)) {
        struct kv_err e;
        if (kv_blas_load(&e)) {
            kv_warn("%s", e.msg);
            abort();
        }
    }
    blas_sgemm(ROW_MAJOR, (int)ta, (int)tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void kv_blas_set_threads(int n)
{
    atomic_store(&want_threads, n);
    if (atomic_load(&loaded))
        blas_threads(n);
}
