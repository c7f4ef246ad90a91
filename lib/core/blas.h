/* blas.h - OpenBLAS under kvtools' own worker threads.
 *
 * kvattn and kvxattn call single-threaded OpenBLAS from their own workers
 * (kv_parallel_for).  OpenBLAS reads OPENBLAS_NUM_THREADS once, when the
 * library is loaded, and starts that many threads of its own, which spin
 * for a while looking for work and take cores from the workers.
 */
#ifndef KV_BLAS_H
#define KV_BLAS_H

/* Make sure OpenBLAS started (or starts) with one thread unless the user
 * set OPENBLAS_NUM_THREADS.  Linking this module is enough with the GNU C
 * library: the value is shown to OpenBLAS while it initialises and the
 * environment is given back before main.  Elsewhere this restarts the
 * program once (execv of /proc/self/exe with argv and the variable set), so
 * call it first thing in main, before anything is read or written; if the
 * restart fails it returns and the program carries on as it is. */
void kv_blas_single_thread(char **argv);

#endif
