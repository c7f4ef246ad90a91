/* blas.h - OpenBLAS, opened when a program first needs its sgemm.
 *
 * The f32 paths of kvattn and kvxattn multiply their tiles with OpenBLAS's
 * sgemm, called single-threaded from kvtools' own workers
 * (kv_parallel_for).  Linked, OpenBLAS would make every run pay its
 * start-up (its kernels chosen for the CPU, its buffers: about 1.5 ms) even
 * when nothing calls it (the bf16 tiles, the decode kernels, --scalar,
 * merge, cmp, gen), so libkv opens it with dlopen when a path that will
 * multiply with it is set up.
 *
 * OpenBLAS reads OPENBLAS_NUM_THREADS once, when it is loaded, and starts
 * that many threads of its own, which spin for a while looking for work and
 * take cores from the workers.  Unless the user has set the variable,
 * kv_blas_load shows OpenBLAS the value 1 while it loads and removes it
 * again at once: the environment the program and the programs it runs see
 * stays the user's.
 *
 * KVTOOLS_OPENBLAS names the library to open instead of libopenblas.so.0
 * (a path, or a name the dynamic loader looks up as for a linked library).
 */
#ifndef KV_BLAS_H
#define KV_BLAS_H

struct kv_err;

/* An sgemm operand as it is (N) or transposed (T); CBLAS's values. */
enum kv_blas_trans { KV_BLAS_N = 111, KV_BLAS_T = 112 };

/* Open OpenBLAS and find cblas_sgemm and openblas_set_num_threads in it,
 * once per process (thread-safe: every later call returns the first one's
 * result at once).  Returns 0, or -1 with e naming the library and the
 * dynamic loader's reason.  It sets and removes an environment variable,
 * so call it before the threads start: in the set-up of each path that
 * will call kv_blas_sgemm, where its failure is that path's error. */
int kv_blas_load(struct kv_err *e);

/* C = alpha op(A) op(B) + beta C, row-major, C m x n (ldc apart), op(A)
 * m x k, op(B) k x n: cblas_sgemm of OpenBLAS with CblasRowMajor.  Loads
 * OpenBLAS if kv_blas_load has not; a caller that skipped kv_blas_load and
 * has no OpenBLAS gets the reason on stderr and an abort. */
void kv_blas_sgemm(enum kv_blas_trans ta, enum kv_blas_trans tb, int m, int n, int k,
                   float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc);

/* OpenBLAS's own thread count for the products to come
 * (openblas_set_num_threads): applied now if OpenBLAS is loaded, else kept
 * and applied when it loads.  Never loads it. */
void kv_blas_set_threads(int n);

#endif
