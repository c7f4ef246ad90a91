/* xxh.h - XXH3 hashes (64 and 128 bit) at the speed of the CPU.
 *
 * The same values as libxxhash's XXH3_64bits and XXH3_128bits, computed by
 * the xxHash header compiled for AVX2 when the CPU has it (xxh_avx2.c),
 * else by the shared library.  Debian's libxxhash is built for a baseline
 * CPU and hashes at a few GB/s; the AVX2 build runs near memory speed,
 * which is what the chunk key and the blob checksum need.
 */
#ifndef KV_XXH_H
#define KV_XXH_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of p[0..n). */
uint64_t kv_xxh3_64(const void *p, size_t n);

/* XXH3-128 of the concatenation a[0..na) b[0..nb) (b may be NULL when nb
 * is 0), as its canonical big-endian 16 bytes. */
void kv_xxh3_128_cat(const void *a, size_t na, const void *b, size_t nb,
                     uint8_t out[16]);

/* Tests: 1 = use the shared library only. */
void kv_xxh_force_library(int on);

#endif
