"""cffi (API mode) declaration of kvtools._kv: libkv's public calls.

The module is compiled by the platform's C compiler from the same lib/
sources the programs link (../lib beside this directory), or, when
KVTOOLS_LIBKV names a static libkv built with -fPIC (make python does
that), linked against it.  cffi checks every declaration (cdef/*.h) against
the real headers at compile time: a struct given with '...' takes its
layout from the header, so a field added to libkv needs no change here.
"""
import glob
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, ".."))
LIB = os.path.join(TOP, "lib")

# The declarations, one file per part of libkv, in cdef/ beside this file;
# they are read in the order of their names.
CDEF = "".join(open(f).read() for f in
               sorted(glob.glob(os.path.join(HERE, "cdef", "*.h"))))

SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include "core/kv.h"
#include "core/fp8.h"
#include "mask/mask.h"
#include "mask/mask_mem.h"
#include "mask/ascend.h"
#include "mask/segments.h"
#include "mask/tree.h"
#include "slot/hash.h"
#include "slot/pcp.h"
#include "slot/mla_cp.h"
#include "slot/slot.h"
#include "slot/plan.h"
#include "slot/plan_kvgroups.h"
#include "slot/map_groups.h"
#include "slot/plan_trace.h"
#include "slot/plan_cc.h"
#include "attn/attn.h"
#include "attn/bound_inputs.h"
#include "attn/cmp.h"
#include "attn/xattn.h"
#include "attn/mla.h"
#include "attn/mla_sparse.h"
#include "attn/mla_ds.h"
#include "attn/bf16.h"
#include "attn/indexer.h"
#include "attn/gen.h"
/* mask.h and chunk.h each define enum kv_seg_kind (the same three
 * values); this file includes both, so chunk.h's is renamed here */
#define kv_seg_kind kv_chunk_seg_kind
#define KV_SEG_SYS KV_CHUNK_SEG_SYS
#define KV_SEG_CHUNK KV_CHUNK_SEG_CHUNK
#define KV_SEG_QUESTION KV_CHUNK_SEG_QUESTION
#include "chunk/chunk.h"
#include "chunk/rope.h"
#include "chunk/ns_opts.h"
#include "chunk/store.h"
#include "chunk/chunk_put.h"
#include "chunk/latent.h"
#include "chunk/toy.h"
#include "chunk/chunk_sim.h"
#include "chunk/chunk_toy.h"
#include "chunk/assemble.h"
#include "chunk/slice.h"
#include "chunk/rope_selftest.h"
#undef kv_seg_kind
#undef KV_SEG_SYS
#undef KV_SEG_CHUNK
#undef KV_SEG_QUESTION

/* the namespace's context mode, for kv_ctx_digest (an enum field) */
static int kv_ns_mask(const struct kv_namespace *ns) { return (int)ns->mask; }
static int kv_ns_base(const struct kv_namespace *ns) { return (int)ns->base; }
static int64_t kv_ns_lora_rank(const struct kv_namespace *ns) { return ns->kv_lora_rank; }
static int kv_ns_dtype(const struct kv_namespace *ns) { return (int)ns->dtype; }
static void kv_ns_set_dtype(struct kv_namespace *ns, int dtype)
{
    ns->dtype = (enum kv_dtype)dtype;
}
"""

LIBS = ["xxhash", "nettle", "argtable2", "sqlite3", "hiredis", "jansson", "dl", "m"]
CFLAGS = ["-std=c11", "-O2", "-pthread"]

ffibuilder = FFI()
ffibuilder.cdef(CDEF)

# libkv itself: KVTOOLS_LIBKV names a static libkv built with -fPIC (make
# python); otherwise setup.py'"'"'s build_ext compiles lib_sources() into the
# build directory first and links the objects (LIBKV_OBJECTS_FROM_SETUP).
_prebuilt = os.environ.get("KVTOOLS_LIBKV")


def lib_sources():
    if not os.path.isdir(LIB):
        raise SystemExit("kvtools: the C sources are not beside this "
                         "directory ('%s' is missing); build from a kvtools "
                         "checkout" % LIB)
    return sorted(glob.glob(os.path.join(LIB, "*", "*.c")))


ffibuilder.set_source(
    "kvtools._kv", SOURCE, include_dirs=[LIB],
    define_macros=[("_GNU_SOURCE", None)], extra_compile_args=CFLAGS,
    extra_objects=[os.path.abspath(_prebuilt)] if _prebuilt else [],
    libraries=LIBS, extra_link_args=["-pthread"])

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
