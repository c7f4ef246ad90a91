"""kvslot reorg in-process: MLA context parallelism's map of every context
token of a chunked-prefill step (libkv's kv_mla_cp_size, kv_mla_cp_build):
its rank, its slot, its row in the all-gathered buffer and in the
reorganised contiguous layout."""
import numpy as np

from ._core import ffi, lib, new_err, err_text, usage, fail, int_opt, _text
from ._kvslot_step import req_list, out_dtype, _block_table
from ._kvslot_cp import parse_max_mem, mem_check, SIZE_MAX

PROG = "kvslot reorg"
I32_MAX = 2**31 - 1
MAP_COLUMNS = ("req", "pos", "chunk", "pcp_rank", "dcp_rank", "local_index",
               "local_slot", "gathered", "reorg")


def _vllm_workspace(B, D, I, WS):
    """vLLM's workspace rows as align_mla_chunked_context_workspace_size
    leaves them: at least one alignment unit, rounded up to the block size
    B, and to lcm(B, I x D) under DCP."""
    a, v = B, I * D
    x, y = a, v
    while y:
        x, y = y, x % y
    if D > 1:
        a = B // x * v
    WS = max(WS, a)
    return (WS + a - 1) // a * a


def _vec(p, n):
    n = int(n)
    if n <= 0:
        return np.zeros(0, np.int64)
    return np.frombuffer(ffi.buffer(p, 8 * n), np.int64).copy()


def reorg(block_size=None, block_table=None, context_lens=None, pcp_size=None,
          dcp_size=None, interleave=None, context_chunking="ascend",
          max_context_chunk=None, workspace=None, max_mem=None, dtype="i64"):
    """kvslot reorg -B N --block-table T --context-lens C0,C1,.. [...]: a
    dict of chunk_size, toks, (vllm chunking: chunk_starts,
    chunk_seq_lens), padded_local_chunk_seq_lens, cu_seq_lens,
    local_context_lens and map (one row a context token, columns
    MAP_COLUMNS), numpy arrays in the program's order.  A keyword left
    None is an option not given."""
    for v, name in ((block_size, "-B|--block-size=N"),
                    (block_table, "--block-table=FILE"),
                    (context_lens, "--context-lens=C0,C1,..")):
        if v is None:
            usage(PROG, "missing option " + name)

    def opt(name, v, default, lo, hi):
        return default if v is None else int_opt(PROG, name, v, lo, hi)
    B = opt("--block-size", block_size, 1, 1, 1 << 20)
    P = opt("--pcp-size", pcp_size, 1, 1, 1024)
    D = opt("--dcp-size", dcp_size, 1, 1, 1024)
    I = opt("--interleave", interleave, 1, 1, 1 << 20)
    MC = opt("--max-context-chunk", max_context_chunk, 0, 0, 1 << 40)
    WS = opt("--workspace", workspace, 65536, 1, 1 << 40)
    ctx = req_list(PROG, "--context-lens", context_lens)
    mm = parse_max_mem(PROG, max_mem)
    cc = "ascend" if context_chunking is None else _text(context_chunking)
    if cc not in ("ascend", "vllm"):
        usage(PROG, "--context-chunking: expected ascend or vllm, got '%s'"
              % cc)
    vllm = cc == "vllm"
    if len(ctx) == 0:
        usage(PROG, "--context-lens: no requests")
    if B % I:
        usage(PROG, "--interleave %d must divide --block-size %d" % (I, B))
    if vllm and max_context_chunk is not None:
        usage(PROG, "--max-context-chunk is vllm-ascend's chunking; vLLM's "
              "(--context-chunking vllm) is sized by --workspace")
    if not vllm and workspace is not None:
        usage(PROG, "--workspace sizes vLLM's chunking; give "
              "--context-chunking vllm (vllm-ascend's is sized by "
              "--max-context-chunk)")
    if vllm and P > 1:
        usage(PROG, "--pcp-size %d: vLLM's context chunking shards over DCP "
              "only" % P)
    if MC % (I * P * D):
        usage(PROG, "--max-context-chunk %d: expected a multiple of I x P x "
              "D = %d" % (MC, I * P * D))
    if vllm:
        WS = _vllm_workspace(B, D, I, WS)
    g = ffi.new("struct kv_mla_cp_geom *")
    g.block_size, g.pcp_size, g.dcp_size, g.interleave = B, P, D, I
    g.max_context_chunk = MC
    g.chunking = lib.KV_MLA_CP_CHUNK_VLLM if vllm else \
        lib.KV_MLA_CP_CHUNK_ASCEND
    g.workspace = WS
    e = new_err()
    n_ent = ffi.new("size_t *")
    n_chunks = ffi.new("int64_t *")
    nbytes = ffi.new("size_t *")
    cp = ffi.cast("int64_t *", ffi.from_buffer(ctx))
    if lib.kv_mla_cp_size(g, cp, len(ctx), n_ent, n_chunks, nbytes, e) != 0:
        fail(PROG, err_text(e))
    need = min(nbytes[0] + (n_ent[0] + 1) * 72 + len(ctx) * 8, SIZE_MAX)
    if need > mm:
        mem_check(PROG, need, mm, "the map of %d context tokens in %d chunks"
                  % (n_ent[0], n_chunks[0]))
    bt = _block_table(PROG, block_table, mm - need, prefix="")
    m = ffi.new("struct kv_mla_cp_map *")
    try:
        if lib.kv_mla_cp_build(g, ffi.cast("int64_t *", ffi.from_buffer(bt))
                               if bt.size else ffi.NULL, bt.shape[0],
                               bt.shape[1], cp, len(ctx), m, e) != 0:
            fail(PROG, err_text(e))
        nc, nr = int(m.n_chunks), int(m.n_req)
        # an entry is nine int64 in the map's column order
        assert ffi.sizeof("struct kv_mla_cp_entry") == 72
        rows9 = np.frombuffer(ffi.buffer(m.e, 72 * m.n), np.int64).copy() \
            if m.n else np.zeros(0, np.int64)
        out = {"chunk_size": np.array(m.chunk_size, np.int64),
               "toks": _vec(m.toks, nc)}
        if vllm:
            out["chunk_starts"] = _vec(m.starts, nc * nr).reshape(nc, nr)
            out["chunk_seq_lens"] = _vec(m.seq_lens, nc * nr).reshape(nc, nr)
        out["padded_local_chunk_seq_lens"] = \
            _vec(m.padded_lens, nc * nr).reshape(nc, nr)
        out["cu_seq_lens"] = _vec(m.cu_seq_lens, nc * (nr + 1)).reshape(
            nc, nr + 1)
        out["local_context_lens"] = _vec(m.local_lens, nr * P * D).reshape(
            nr, P * D)
        out["map"] = rows9.reshape(int(m.n), 9)
    finally:
        lib.kv_mla_cp_map_release(m)
    odt = out_dtype(PROG, dtype)
    if odt is np.int32:
        # the program's check before writing, then its writer's own
        for name in ("chunk_size", "toks", "padded_local_chunk_seq_lens",
                     "cu_seq_lens", "chunk_starts", "chunk_seq_lens", "map",
                     "local_context_lens"):
            if name not in out:
                continue
            a = out[name].reshape(-1)
            bad = (a < -2**31) | (a > I32_MAX)
            if bad.any():
                fail(PROG, "--dtype i32: %s holds %d, over 32 bits; use "
                     "--dtype i64" % (name, int(a[np.argmax(bad)])))
        out = {k: v.astype(np.int32) for k, v in out.items()}
    return out
