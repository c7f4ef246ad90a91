/* isa.c - unit tests of lib/core/isa.c: level names, KVTOOLS_ISA parsing and
 * the cap. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/isa.h"
#include "tap.h"

/* The cap read by threads asking for the first time at once: a pool's
 * workers do that in a program that never asked before it started them.
 * Each of `tries` children (its cap not read yet) releases RACE_THREADS
 * threads together; KVTOOLS_ISA=generic must bar the vector levels in
 * every one of them.  Returns the children in which a thread saw one.
 * RACE_TRIES natively, a tenth under emulation (KV_RUNNER), where a fork
 * costs some ten milliseconds. */
#define RACE_TRIES 2000
#define RACE_THREADS 8
static pthread_barrier_t race_go;
static enum kv_isa race_level;

static void *race_ask(void *arg)
{
    pthread_barrier_wait(&race_go);
    *(int *)arg = kv_isa_has(race_level);
    return NULL;
}

static int race_children(enum kv_isa vec, int tries)
{
    int bad = 0;
    race_level = vec;
    setenv("KVTOOLS_ISA", "generic", 1);
    for (int t = 0; t < tries; t++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            pthread_t th[RACE_THREADS];
            int saw[RACE_THREADS], any = 0;
            pthread_barrier_init(&race_go, NULL, RACE_THREADS);
            for (int i = 0; i < RACE_THREADS; i++)
                pthread_create(&th[i], NULL, race_ask, &saw[i]);
            for (int i = 0; i < RACE_THREADS; i++) {
                pthread_join(th[i], NULL);
                any |= saw[i];
            }
            _exit(any);
        }
        int st;
        if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
            return -1;
        bad += WEXITSTATUS(st) != 0;
    }
    unsetenv("KVTOOLS_ISA");
    return bad;
}

int main(int argc, char **argv)
{
    struct kv_err e;
    enum kv_isa l, lv[KV_ISA_NATIVE];
    int n = kv_isa_levels(lv);

    if (argc > 1 && strcmp(argv[1], "--levels") == 0) {   /* for tests/run.sh */
        for (int i = 0; i < n; i++)
            puts(kv_isa_name(lv[i]));
        return 0;
    }

    TAP_OK(n >= 1 && lv[0] == KV_ISA_GENERIC, "generic is always a level (%d levels)", n);
    if (n > 1) {     /* before this process reads its cap */
        const char *emu = getenv("KV_RUNNER");
        int tries = emu && *emu ? RACE_TRIES / 10 : RACE_TRIES;
        int bad = race_children(lv[n - 1], tries);
        TAP_OK(bad == 0, "KVTOOLS_ISA=generic holds for %d threads asking at once "
               "(%d of %d tries saw %s)", RACE_THREADS, bad, tries, kv_isa_name(lv[n - 1]));
    }
    TAP_OK(kv_isa_parse("generic", &l, &e) == 0 && l == KV_ISA_GENERIC, "parse generic");
    TAP_OK(kv_isa_parse("native", &l, &e) == 0 && l == KV_ISA_NATIVE, "parse native");
    TAP_OK(kv_isa_parse("sse9", &l, &e) < 0 && strstr(e.msg, "'sse9'") &&
               strstr(e.msg, "generic"), "unknown name refused: %s", e.msg);
#if defined(__x86_64__)
    TAP_OK(kv_isa_parse("avx512bf16", &l, &e) == 0 && l == KV_ISA_AVX512BF16, "parse avx512bf16");
    TAP_OK(kv_isa_parse("neon", &l, &e) < 0 && strstr(e.msg, "x86-64"), "other architecture refused: %s", e.msg);
#elif defined(__aarch64__)
    TAP_OK(kv_isa_parse("neon-bf16", &l, &e) == 0 && l == KV_ISA_NEON_BF16, "parse neon-bf16");
    TAP_OK(kv_isa_parse("avx2", &l, &e) < 0 && strstr(e.msg, "aarch64"), "other architecture refused: %s", e.msg);
#endif
    for (int i = 0; i < n; i++)
        TAP_OK(strcmp(kv_isa_name(lv[i]), "?") != 0, "level %d is %s", i, kv_isa_name(lv[i]));
    /* each cap allows exactly the levels up to it */
    for (int c = 0; c < n; c++) {
        kv_isa_set_cap(lv[c]);
        int ok = kv_isa_best() == lv[c];
        for (int i = 0; i < n; i++)
            ok &= kv_isa_has(lv[i]) == (i <= c);
        TAP_OK(ok, "cap %s allows the levels up to it", kv_isa_name(lv[c]));
    }
    kv_isa_set_cap(KV_ISA_NATIVE);
    TAP_OK(kv_isa_best() == lv[n - 1], "native allows the best level, %s", kv_isa_name(lv[n - 1]));
    setenv("KVTOOLS_ISA", "bogus", 1);
    TAP_OK(kv_isa_check_env(&e) < 0 && strstr(e.msg, "KVTOOLS_ISA: "), "bad KVTOOLS_ISA: %s", e.msg);
    setenv("KVTOOLS_ISA", "generic", 1);
    TAP_OK(kv_isa_check_env(&e) == 0, "KVTOOLS_ISA=generic accepted");
    return tap_done();
}
