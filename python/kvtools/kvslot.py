"""kvslot in-process: one step's attention metadata (kvslot map).

    kvslot.map(block_size=16, block_table=[[1, 2]], scheduled=[5])

returns a dict of numpy arrays named and ordered as kvslot(1) writes
them (vLLM's names); scalars are 0-d arrays, as np.load gives them.
"""
import numpy as np

from ._core import (ffi, lib, new_err, err_text, usage, fail, int_opt,
                    int_list, max_mem as _max_mem)

__all__ = ["map", "MAP_FIELDS"]

PROG = "kvslot map"
I32_MAX = 2**31 - 1
MAP_DEFAULT = ("query_start_loc", "seq_lens", "num_computed_tokens",
               "positions", "req_indices", "token_indices",
               "block_table_indices", "block_numbers", "block_offsets",
               "slot_mapping", "max_query_len", "num_tokens")
MAP_FIELDS = ("query_start_loc", "seq_lens", "num_computed_tokens",
              "num_scheduled_tokens", "positions", "req_indices",
              "token_indices", "block_table_indices", "block_numbers",
              "block_offsets", "slot_mapping", "cp_owner", "max_query_len",
              "num_tokens", "num_reqs", "block_table")
_TOKEN = ("positions", "req_indices", "token_indices", "block_table_indices",
          "block_numbers", "block_offsets", "slot_mapping", "cp_owner")
_ALL_NAMES = ("step", "req_ids") + MAP_FIELDS[:-1] + ("block_table",
              "waiting", "blocked", "preempted", "finished", "free_blocks",
              "num_cached_tokens", "shared_blocks", "evicted_hashes")


def _fields(s):
    if s is None:
        return MAP_DEFAULT
    if not isinstance(s, str):
        s = ",".join(s)
    names = []
    rest = s
    while rest:
        name, _, tail = rest.partition(",")
        if name == "" or len(name) >= 64:
            usage(PROG, "--fields: empty or overlong name in '%s'" % rest)
        if name not in MAP_FIELDS:
            usage(PROG, "--fields: unknown field '%s' for map; valid: %s"
                  % (name, " ".join(MAP_FIELDS)))
        names.append(name)
        rest = tail
    if not names:
        usage(PROG, "--fields: no field named")
    return tuple(names)


def _table(block_table, max_mem):
    """The block table as int64 [rows, cols]: an array-like, or a file the
    way the program reads it (text rows or an integer .npy)."""
    if isinstance(block_table, (str, bytes)):
        e = new_err()
        out = ffi.new("int64_t **")
        rows = ffi.new("size_t *")
        cols = ffi.new("size_t *")
        path = block_table.encode() if isinstance(block_table, str) else block_table
        if lib.kv_read_int_table(path, 0, max_mem, out, rows, cols, e) != 0:
            fail(PROG, err_text(e))
        n = rows[0] * cols[0]
        a = np.frombuffer(ffi.buffer(out[0], 8 * n), np.int64).copy() \
            if n else np.zeros(0, np.int64)
        lib.free(out[0])
        return a.reshape(rows[0], cols[0])
    a = np.asarray(block_table)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or (a.size and a.dtype.kind not in "iu"):
        fail(PROG, "block table: expected a 1-d or 2-d integer array, found "
             "%d-d %s" % (a.ndim, a.dtype))
    return np.ascontiguousarray(a, dtype=np.int64)


def _take(p, n):
    if n == 0 or p == ffi.NULL:
        return np.zeros(0, np.int64)
    owner = ffi.gc(p, lib.free)
    return np.frombuffer(ffi.buffer(owner, 8 * n), np.int64)


def map(block_size, block_table, scheduled, computed=None, pad_to=None,
        kernel_block_size=None, max_model_len=None, cp_size=1, cp_rank=0,
        pcp_size=1, pcp_rank=0, interleave=1, all_ranks=False,
        cp_convention="dcp", virtual_block="physical", fields=None,
        dtype="i64", max_mem=None):
    """kvslot map -B BLOCK_SIZE --block-table T --scheduled n0,n1..
    [--computed c0,c1..] [...]: the metadata of one step as a dict."""
    B = int_opt(PROG, "-B", block_size, 1, I32_MAX)
    K = B if kernel_block_size is None else \
        int_opt(PROG, "--kernel-block-size", kernel_block_size, 1, I32_MAX)
    M = 0 if max_model_len is None else \
        int_opt(PROG, "--max-model-len", max_model_len, 1, (2**63 - 1) // 2)
    W = int_opt(PROG, "--cp-size", cp_size, 1, 1 << 16)
    R = int_opt(PROG, "--cp-rank", cp_rank, 0)
    P = int_opt(PROG, "--pcp-size", pcp_size, 1, 1 << 16)
    Q = int_opt(PROG, "--pcp-rank", pcp_rank, 0)
    I = int_opt(PROG, "--interleave", interleave, 1, I32_MAX)
    pad = -1 if pad_to is None else int_opt(PROG, "--pad-to", pad_to, 0, I32_MAX)
    if B % K:
        usage(PROG, "--kernel-block-size %d does not divide -B %d" % (K, B))
    if R >= W:
        usage(PROG, "--cp-rank %d: expected below --cp-size %d" % (R, W))
    if Q >= P:
        usage(PROG, "--pcp-rank %d: expected below --pcp-size %d" % (Q, P))
    if B % I:
        usage(PROG, "--interleave %d does not divide -B %d" % (I, B))
    if cp_convention == "pcp-dcp":
        cpw, cpr = P * W, Q * W + R
    elif cp_convention == "dcp":
        cpw, cpr = W, R
    else:
        usage(PROG, "--cp-convention: expected dcp or pcp-dcp, got '%s'"
              % cp_convention)
    g = ffi.new("struct kv_slot_geom *")
    g.block_size, g.kernel_block_size = B, K
    g.cp_world, g.cp_rank, g.interleave = cpw, cpr, I
    if virtual_block == "kernel":
        g.virt = lib.KV_SLOT_VIRTUAL_KERNEL
    elif virtual_block == "physical":
        g.virt = lib.KV_SLOT_VIRTUAL_PHYSICAL
    else:
        usage(PROG, "--virtual-block: expected kernel or physical, got '%s'"
              % virtual_block)
    if g.virt == lib.KV_SLOT_VIRTUAL_KERNEL and cpw > 1 and K % I:
        usage(PROG, "--interleave %d does not divide the kernel block size "
              "%d: the older vLLM layout would write some slots twice (see "
              "--virtual-block physical)" % (I, K))
    names = _fields(fields)
    if dtype in ("i64", "int64", None):
        odt = np.int64
    elif dtype in ("i32", "int32"):
        odt = np.int32
    else:
        usage(PROG, "--dtype: expected i64 or i32, got '%s'" % dtype)
    sched = int_list(PROG, "--scheduled", scheduled, 0, empty_ok=True)
    comp = int_list(PROG, "--computed", computed, 0, empty_ok=True) \
        if computed is not None else None
    if len(sched) == 0:
        usage(PROG, "--scheduled: no requests")
    if comp is not None and len(comp) != len(sched):
        usage(PROG, "--computed has %d values, --scheduled has %d"
              % (len(comp), len(sched)))
    mm = _max_mem(PROG, max_mem)
    ids = _table(block_table, mm)
    e = new_err()
    if K != B:
        out = ffi.new("int64_t **")
        kc = ffi.new("size_t *")
        if lib.kv_slot_expand_hybrid(ffi.cast("int64_t *", ffi.from_buffer(ids)),
                                     ids.shape[0], ids.shape[1], B, K, out, kc,
                                     e) != 0:
            fail(PROG, err_text(e))
        n = ids.shape[0] * kc[0]
        ids = _take(out[0], n).reshape(ids.shape[0], kc[0])
    if M == 0:
        if ids.shape[1] == 0 or ids.shape[1] > ((2**63 - 1) // 4) // K // cpw:
            fail(PROG, "'%s': a block table without columns holds no tokens"
                 % (block_table if isinstance(block_table, str) else "<array>"))
        M = ids.shape[1] * K * cpw
    g.max_model_len = M
    t = ffi.new("struct kv_slot_table *")
    t.ids = ffi.cast("int64_t *", ffi.from_buffer(ids)) if ids.size else ffi.NULL
    t.n_rows, t.n_cols = ids.shape
    want = 0
    for name in names:
        if name in _TOKEN:
            want |= 1 << MAP_FIELDS.index(name)
    st = ffi.new("struct kv_slot_step *")
    lib.kv_slot_step_init(st)
    sp = ffi.cast("int64_t *", ffi.from_buffer(sched))
    cp = ffi.cast("int64_t *", ffi.from_buffer(comp)) if comp is not None else ffi.NULL
    if lib.kv_slot_compute(g, t, len(sched), sp, cp, want, st, e) != 0:
        fail(PROG, err_text(e))
    st = ffi.gc(st, lib.kv_slot_step_release)
    nr, nt = st.n_reqs, st.n_tokens
    sizes = {"query_start_loc": nr + 1, "seq_lens": nr,
             "num_computed_tokens": nr, "num_scheduled_tokens": nr}
    arrays = {}
    for name in names:              # owned by the arrays from now on
        if name in sizes or name in _TOKEN:
            if name not in arrays:
                arrays[name] = _take(getattr(st, name), sizes.get(name, nt))
                setattr(st, name, ffi.NULL)
    n_slots = nt
    if pad >= 0:
        if pad < nt:
            usage(PROG, "--pad-to %d is less than the %d scheduled tokens"
                  % (pad, nt))
        n_slots = pad
    res = {}
    for name in names:
        if name == "slot_mapping":
            if all_ranks:
                rows = []
                for rank in range(cpw):
                    g.cp_rank = rank
                    rows.append(_slots(g, t, sched, comp, nt, n_slots))
                v = np.stack(rows) if rows else np.zeros((0, n_slots), np.int64)
                g.cp_rank = cpr
            else:
                v = arrays["slot_mapping"]
                if n_slots > nt:
                    v = np.concatenate([v, np.full(n_slots - nt, -1, np.int64)])
        elif name in arrays:
            v = arrays[name]
        elif name == "max_query_len":
            v = np.array(st.max_query_len, np.int64)
        elif name == "num_tokens":
            v = np.array(nt, np.int64)
        elif name == "num_reqs":
            v = np.array(nr, np.int64)
        else:                       # block_table: the scheduled rows
            v = ids[:len(sched)] if ids.shape[0] >= len(sched) else ids
        if odt is np.int32:
            if v.size and (v.max() > I32_MAX or v.min() < -2**31):
                bad = v.max() if v.max() > I32_MAX else v.min()
                fail(PROG, "--dtype i32: %s holds %d, over 32 bits; use "
                     "--dtype i64" % (name, bad))
            v = v.astype(np.int32)
        res[name] = v
    return res


def _slots(g, t, sched, comp, nt, n_slots):
    out = np.full(n_slots, -1, np.int64)
    at = 0
    buf = ffi.cast("int64_t *", ffi.from_buffer(out))
    for r, n in enumerate(sched):
        c = 0 if comp is None else int(comp[r])
        if n:
            lib.kv_slot_fill(g, t, r, c, int(n), MAP_FIELDS.index("slot_mapping"),
                             buf + at)
        at += int(n)
    return out
