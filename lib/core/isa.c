/* isa.c - the CPU's vector levels, capped by KVTOOLS_ISA (see isa.h).
 *
 * Both are read once, under pthread_once, whichever thread asks first: a
 * pool's threads asking at the same moment all see the finished values.
 * The cap is published whole (an atomic store of the parsed level), never
 * through a default written first, which a thread reading between the
 * two writes would take for "no cap". */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "core/isa.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif
#endif

static const char *const names[] = {
    [KV_ISA_GENERIC] = "generic",
    [KV_ISA_AVX2] = "avx2",
    [KV_ISA_AVX512] = "avx512",
    [KV_ISA_AVX512BF16] = "avx512bf16",
    [KV_ISA_AVX512FP16] = "avx512fp16",
    [KV_ISA_NEON] = "neon",
    [KV_ISA_NEON_BF16] = "neon-bf16",
    [KV_ISA_NATIVE] = "native",
};

/* The levels of this build's architecture, lowest first. */
#if defined(__x86_64__)
static const enum kv_isa arch_levels[] = {
    KV_ISA_GENERIC, KV_ISA_AVX2, KV_ISA_AVX512, KV_ISA_AVX512BF16,
    KV_ISA_AVX512FP16};
#define ARCH_NAME "x86-64"
#elif defined(__aarch64__)
static const enum kv_isa arch_levels[] = {KV_ISA_GENERIC, KV_ISA_NEON,
                                          KV_ISA_NEON_BF16};
#define ARCH_NAME "aarch64"
#else
static const enum kv_isa arch_levels[] = {KV_ISA_GENERIC};
#define ARCH_NAME "this architecture"
#endif
#define N_ARCH_LEVELS (int)(sizeof arch_levels / sizeof arch_levels[0])

static pthread_once_t detect_once = PTHREAD_ONCE_INIT;
static int cpu_top;          /* index in arch_levels of the CPU's best */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static atomic_int cap = -1;  /* an enum kv_isa, -1 before it is read; KV_ISA_NATIVE: no cap */

/* The highest index in arch_levels the CPU runs: each level needs all of
 * its features (and the ones below). */
#if defined(__x86_64__) && defined(__GNUC__)
/* CPUID bits the compilers' __builtin_cpu_supports does not name in every
 * version (clang 14 knows neither f16c nor avx512fp16).  Only asked once
 * the builtin has confirmed AVX (AVX-512) and the OS's support for it. */
static int cpuid_bit(unsigned leaf, int reg, int bit)
{
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(leaf, 0, &r[0], &r[1], &r[2], &r[3]))
        return 0;
    return (int)(r[reg] >> bit) & 1;
}
#endif

static int detect(void)
{
    int top = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
          cpuid_bit(1, 2, 29)))              /* ECX bit 29: F16C */
        return top;
    top = 1;
    if (!(__builtin_cpu_supports("avx512f") &&
          __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512vl")))
        return top;
    top = 2;
#if defined(__clang__) || __GNUC__ >= 12
    if (!__builtin_cpu_supports("avx512bf16"))
        return top;
    top = 3;
    if (!cpuid_bit(7, 3, 23))                /* EDX bit 23: AVX512_FP16 */
        return top;
    top = 4;
#endif
#elif defined(__aarch64__) && defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    if (!(hw & HWCAP_ASIMD))
        return top;
    top = 1;
    if (hw2 & HWCAP2_BF16)
        top = 2;
#endif
    return top;
}

/* Index of l in arch_levels, or -1 when l is not of this architecture. */
static int level_index(enum kv_isa l)
{
    for (int i = 0; i < N_ARCH_LEVELS; i++)
        if (arch_levels[i] == l)
            return i;
    return -1;
}

int kv_isa_parse(const char *s, enum kv_isa *out, struct kv_err *e)
{
    for (int l = 0; l <= KV_ISA_NATIVE; l++) {
        if (strcmp(s, names[l]) != 0)
            continue;
        if (l != KV_ISA_NATIVE && level_index((enum kv_isa)l) < 0)
            return kv_err_set(e, "'%s' is not a level of %s", s, ARCH_NAME);
        *out = (enum kv_isa)l;
        return 0;
    }
    char list[256] = "";
    for (int i = 0; i < N_ARCH_LEVELS; i++) {
        strcat(list, names[arch_levels[i]]);
        strcat(list, ", ");
    }
    strcat(list, "native");
    return kv_err_set(e, "'%s' is not a vector level (%s)", s, list);
}

int kv_isa_check_env(struct kv_err *e)
{
    const char *s = getenv("KVTOOLS_ISA");
    enum kv_isa l;
    if (!s || !*s)
        return 0;
    if (kv_isa_parse(s, &l, e) < 0)
        return kv_err_prefix(e, "KVTOOLS_ISA");
    return 0;
}

static void detect_init(void)
{
    cpu_top = detect();
}

static int top_level(void)
{
    pthread_once(&detect_once, detect_init);
    return cpu_top;
}

/* KVTOOLS_ISA's level (an unknown name: generic), unless kv_isa_set_cap
 * came first. */
static void read_env(void)
{
    const char *s = getenv("KVTOOLS_ISA");
    enum kv_isa l = KV_ISA_NATIVE;
    if (s && *s && kv_isa_parse(s, &l, NULL) < 0)
        l = KV_ISA_GENERIC;
    int unset = -1;
    atomic_compare_exchange_strong(&cap, &unset, (int)l);
}

static enum kv_isa cap_level(void)
{
    int c = atomic_load(&cap);
    if (c < 0) {
        pthread_once(&env_once, read_env);
        c = atomic_load(&cap);
    }
    return (enum kv_isa)c;
}

void kv_isa_set_cap(enum kv_isa c)
{
    atomic_store(&cap, (int)c);
}

int kv_isa_has(enum kv_isa l)
{
    int i = level_index(l);
    if (i < 0 || i > top_level())
        return 0;
    enum kv_isa c = cap_level();
    return c == KV_ISA_NATIVE || i <= level_index(c);
}

enum kv_isa kv_isa_best(void)
{
    for (int i = N_ARCH_LEVELS - 1; i > 0; i--)
        if (kv_isa_has(arch_levels[i]))
            return arch_levels[i];
    return KV_ISA_GENERIC;
}

int kv_isa_levels(enum kv_isa *out)
{
    int top = top_level();
    for (int i = 0; i <= top; i++)
        out[i] = arch_levels[i];
    return top + 1;
}

const char *kv_isa_name(enum kv_isa l)
{
    return (unsigned)l <= KV_ISA_NATIVE ? names[l] : "?";
}
