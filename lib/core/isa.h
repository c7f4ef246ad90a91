/* isa.h - which vector instructions the fast paths may use.
 *
 * Every hand-written fast path asks kv_isa_has() before it runs.  The answer
 * is what the CPU has, capped by the environment variable KVTOOLS_ISA, so
 * that one machine can run (and the tests can check) every path a user's CPU
 * would take: the way OPENBLAS_CORETYPE caps OpenBLAS's dispatch.
 *
 * Levels, lowest first.  A cap allows its own level and those below it on
 * the same architecture; "generic" (plain C, the reference code) exists on
 * both, and so does "native", the default (everything the CPU has).
 *
 *   x86-64:  generic < avx2 (AVX2, FMA, F16C) < avx512 (AVX-512 F, BW, DQ,
 *            VL) < avx512bf16 (+ AVX512_BF16) < avx512fp16 (+ AVX512_FP16)
 *   aarch64: generic < neon (Advanced SIMD) < neon-bf16 (+ BF16: bfdot,
 *            bfmmla)
 */
#ifndef KV_ISA_H
#define KV_ISA_H

#include "core/err.h"

enum kv_isa {
    KV_ISA_GENERIC = 0,
    KV_ISA_AVX2,
    KV_ISA_AVX512,
    KV_ISA_AVX512BF16,
    KV_ISA_AVX512FP16,
    KV_ISA_NEON,
    KV_ISA_NEON_BF16,
    KV_ISA_NATIVE
};

/* 1 when the CPU has level l (and every level below it on its
 * architecture) and the cap allows it; 0 otherwise.  Cheap after the first
 * call.  An invalid KVTOOLS_ISA counts as "generic" here; programs call
 * kv_isa_check_env() at start-up to refuse it. */
int kv_isa_has(enum kv_isa l);

/* The highest level kv_isa_has() allows on this machine. */
enum kv_isa kv_isa_best(void);

/* Every level this CPU has, lowest first, "generic" included, into out[]
 * (room for KV_ISA_NATIVE entries); returns the count.  Ignores the cap:
 * it is what the tests loop over. */
int kv_isa_levels(enum kv_isa *out);

/* The level's name as KVTOOLS_ISA spells it. */
const char *kv_isa_name(enum kv_isa l);

/* Parse a KVTOOLS_ISA value.  0 and *out on success; -1 and e for a name
 * that is unknown or belongs to the other architecture. */
int kv_isa_parse(const char *s, enum kv_isa *out, struct kv_err *e);

/* Check KVTOOLS_ISA (unset and empty mean native).  0, or -1 and e naming
 * the variable, its value and the accepted names. */
int kv_isa_check_env(struct kv_err *e);

/* Replace the cap in this process (tests); KV_ISA_NATIVE lifts it. */
void kv_isa_set_cap(enum kv_isa cap);

#endif
