/* xxh_avx2.c - the xxHash header compiled for AVX2, under its own names
 * (kvx2_...), called by xxh.c only when the CPU has AVX2. */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx2")
#endif
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#define XXH_INLINE_ALL
#define XXH_NAMESPACE kvx2_
#include <xxhash.h>

uint64_t kv_xxh3_64_avx2(const void *p, size_t n);
void kv_xxh3_128_cat_avx2(const void *a, size_t na, const void *b, size_t nb,
                          uint8_t out[16]);

uint64_t kv_xxh3_64_avx2(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

void kv_xxh3_128_cat_avx2(const void *a, size_t na, const void *b, size_t nb,
                          uint8_t out[16])
{
    XXH3_state_t st;
    XXH128_canonical_t c;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, a, na);
    if (nb)
        XXH3_128bits_update(&st, b, nb);
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(out, c.digest, 16);
}
