/* xxh.c - XXH3 through the fastest build the CPU can run (see xxh.h). */
#define XXH_STATIC_LINKING_ONLY
#include <string.h>
#include <xxhash.h>
#include "core/xxh.h"
#include "core/isa.h"

/* xxh_avx2.c */
uint64_t kv_xxh3_64_avx2(const void *p, size_t n);
void kv_xxh3_128_cat_avx2(const void *a, size_t na, const void *b, size_t nb,
                          uint8_t out[16]);

static int force_library;

void kv_xxh_force_library(int on)
{
    force_library = on;
}

static int use_avx2(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return !force_library && kv_isa_has(KV_ISA_AVX2);
#else
    return 0;
#endif
}

uint64_t kv_xxh3_64(const void *p, size_t n)
{
    if (use_avx2())
        return kv_xxh3_64_avx2(p, n);
    return XXH3_64bits(p, n);
}

void kv_xxh3_128_cat(const void *a, size_t na, const void *b, size_t nb,
                     uint8_t out[16])
{
    if (use_avx2()) {
        kv_xxh3_128_cat_avx2(a, na, b, nb, out);
        return;
    }
    XXH3_state_t st;
    XXH128_canonical_t c;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, a, na);
    if (nb)
        XXH3_128bits_update(&st, b, nb);
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(out, c.digest, 16);
}
