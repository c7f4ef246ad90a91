/* blas.c - OpenBLAS started with one thread (see blas.h).
 *
 * OpenBLAS's own threads spin for about 0.1 s looking for work, most of a
 * short run.  The thread count is read from the environment when the
 * library initialises, so unless the user has chosen one, OpenBLAS must
 * find OPENBLAS_NUM_THREADS=1 there.
 *
 * With glibc the executable's preinit array runs before any library's
 * initialiser, but the C library's start-up then resets the environment to
 * the array the kernel passed, so setenv there is lost.  Instead one entry
 * of that array, of a shell variable no library reads at start-up (PWD,
 * PATH, ...), is lent to "OPENBLAS_NUM_THREADS=1" and given back by a
 * constructor of the executable, which runs after the libraries'
 * initialisers and before main: the environment the program and its children
 * see is the user's own.  Elsewhere (or with no such variable) restart
 * once with the variable set (nothing has been read or written yet); if
 * that fails, carry on. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/blas.h"

static char **blas_env_slot;
static char *blas_env_saved;
static int blas_env_lent;

#if defined(__ELF__) && defined(__GLIBC__)
/* Whether s is the entry of a variable the shell sets and no library
 * reads while initialising, so it can be lent for a moment. */
static int env_lendable(const char *s)
{
    static const char *const name[] = {"_=", "PWD=", "OLDPWD=", "SHLVL=",
                                       "SHELL=", "HOSTNAME=", "USER=",
                                       "LOGNAME=", "TERM=", "MAIL=",
                                       "PATH=", "HOME="};
    for (size_t i = 0; i < sizeof(name) / sizeof(name[0]); i++)
        if (strncmp(s, name[i], strlen(name[i])) == 0)
            return 1;
    return 0;
}

static void blas_env_preinit(int argc, char **argv, char **envp)
{
    static char one[] = "OPENBLAS_NUM_THREADS=1";

    (void)argc;
    (void)argv;
    if (!envp)
        return;
    for (size_t i = 0; envp[i]; i++)
        if (strncmp(envp[i], "OPENBLAS_NUM_THREADS=", 21) == 0)
            return;
    for (size_t i = 0; envp[i]; i++)
        if (env_lendable(envp[i])) {
            blas_env_slot = &envp[i];
            blas_env_saved = envp[i];
            envp[i] = one;
            blas_env_lent = 1;
            return;
        }
}

__attribute__((used, section(".preinit_array")))
static void (*const blas_env_hook)(int, char **, char **) = blas_env_preinit;

__attribute__((constructor))
static void blas_env_restore(void)
{
    if (blas_env_slot)
        *blas_env_slot = blas_env_saved;
    blas_env_slot = NULL;
}
#endif

void kv_blas_single_thread(char **argv)
{
    if (blas_env_lent || getenv("OPENBLAS_NUM_THREADS"))
        return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
}

