"""kvslot step and kvslot local in-process: the virtual batches of
chunked local attention (libkv's kv_local_virtual_batches) and a
speculative-decoding token tree's depths and positions (kv_tree_check,
kv_tree_depths), as dicts of numpy arrays named and ordered as the
program writes them; scalars are 0-d arrays."""
import os

import numpy as np

from ._core import ffi, lib, new_err, err_text, usage, fail, int_opt, _text

I32_MAX = 2**31 - 1
I64_MAX = 2**63 - 1


def out_dtype(prog, dtype):
    """--dtype: np.int64 or np.int32."""
    if dtype in ("i64", "int64", None):
        return np.int64
    if dtype in ("i32", "int32"):
        return np.int32
    usage(prog, "--dtype: expected i64 or i32, got '%s'" % (dtype,))


def as_dtype(prog, fields, odt):
    """The dict of int64 arrays fields in the output dtype; with i32 the
    first value over 32 bits, field by field in order, refused as the
    program refuses it."""
    if odt is np.int64:
        return fields
    out = {}
    for name, a in fields.items():
        bad = (a < -2**31) | (a > I32_MAX)
        if bad.any():
            fail(prog, "--dtype i32: %s holds %d, over 32 bits; use --dtype "
                 "i64" % (name, int(a.reshape(-1)[np.argmax(bad.reshape(-1))])))
        out[name] = a.astype(np.int32)
    return out


def req_list(prog, opt, v, lo=0):
    """A per-request count list as the program reads it: item by item, a
    bad value naming its request ("--scheduled: request 2: ...")."""
    if isinstance(v, (list, tuple, np.ndarray)) and not isinstance(v, str):
        a = np.asarray(v)
        if a.ndim == 1 and (a.size == 0 or a.dtype.kind in "iu"):
            a = a.astype(np.int64)
            if a.size == 0 or a.min() >= lo:
                return a
        v = ",".join(str(x) for x in v)
    items = _text(v).split(",")
    out = np.zeros(len(items), np.int64)
    e = new_err()
    x = ffi.new("int64_t *")
    for k, item in enumerate(items):
        label = "%s: request %d" % (opt, k)
        if len(item.encode()) >= 64:
            usage(prog, "%s: '%s...' is too long" % (label, item[:20]))
        if lib.kv_parse_i64(item.encode(), label.encode(), lo, I64_MAX, x,
                            e) != 0:
            usage(prog, err_text(e))
        out[k] = x[0]
    return out


def read_table(prog, what, path, pad, max_mem):
    """An integer table file (text rows or an integer .npy; short rows
    padded with pad) as int64 [rows, cols], read by libkv as the programs
    read it; its errors prefixed with what."""
    e = new_err()
    out = ffi.new("int64_t **")
    rows = ffi.new("size_t *")
    cols = ffi.new("size_t *")
    if lib.kv_read_int_table(os.fsencode(path), pad, max_mem, out, rows, cols,
                             e) != 0:
        fail(prog, what + err_text(e))
    n = rows[0] * cols[0]
    a = np.frombuffer(ffi.buffer(out[0], 8 * n), np.int64).copy() \
        if n else np.zeros(0, np.int64)
    lib.free(out[0])
    return a.reshape(rows[0], cols[0])


def _block_table(prog, block_table, max_mem, prefix="--block-table: "):
    """int64 [rows, cols]: a file (text rows or an integer .npy, short rows
    padded with 0 as vLLM's zero-filled tensor reads them) or rows (an
    array, or lists of which the short ones are padded with 0)."""
    if isinstance(block_table, (str, bytes, os.PathLike)):
        return read_table(prog, prefix, block_table, 0, max_mem)
    if isinstance(block_table, (list, tuple)) and block_table and \
            all(isinstance(r, (list, tuple, np.ndarray)) for r in block_table):
        width = max(len(r) for r in block_table)
        block_table = [list(r) + [0] * (width - len(r)) for r in block_table]
    a = np.asarray(block_table)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or (a.size and a.dtype.kind not in "iu"):
        fail(prog, "--block-table: expected a 2-d integer array, found "
             "%d-d %s" % (a.ndim, a.dtype))
    return np.ascontiguousarray(a, dtype=np.int64)


def _local(prog, C, B, block_table, sched, comp, dtype, max_mem):
    if len(sched) == 0:
        usage(prog, "--scheduled: no requests")
    if C % B:
        usage(prog, "--chunk-size %d: not a multiple of --block-size %d"
              % (C, B))
    if comp is not None:
        for r in range(len(sched)):
            if comp[r] > I32_MAX - sched[r]:
                usage(prog, "--computed: request %d: %d + %d tokens exceed "
                      "2^31 - 1" % (r, comp[r], sched[r]))
    seq = sched + (0 if comp is None else comp)
    ids = _block_table(prog, block_table, max_mem)
    if ids.shape[0] != len(sched):
        fail(prog, "--block-table: %d rows for %d requests"
             % (ids.shape[0], len(sched)))
    sched = np.ascontiguousarray(sched, np.int64)
    seq = np.ascontiguousarray(seq, np.int64)
    b = ffi.new("struct kv_local_batches *")
    e = new_err()
    try:
        if lib.kv_local_virtual_batches(
                b, C, B, ffi.cast("int64_t *", ffi.from_buffer(sched)),
                ffi.cast("int64_t *", ffi.from_buffer(seq)), len(sched),
                ffi.cast("int64_t *", ffi.from_buffer(ids)) if ids.size
                else ffi.NULL, ids.shape[1], e) != 0:
            fail(prog, err_text(e))
        nv, pages = b.n_virtual, b.pages

        def vec(p, n):
            return np.frombuffer(ffi.buffer(p, 8 * n), np.int64).copy() \
                if n else np.zeros(0, np.int64)
        out = {"query_start_loc": vec(b.query_start_loc, nv + 1),
               "seq_lens": vec(b.seq_lens, nv),
               "block_table": vec(b.block_table, nv * pages).reshape(nv, pages),
               "max_query_len": np.array(b.max_query_len, np.int64),
               "max_seq_len": np.array(b.max_seq_len, np.int64),
               "req_indices": vec(b.req_indices, nv),
               "k_start": vec(b.k_start, nv)}
    finally:
        lib.kv_local_batches_release(b)
    return as_dtype(prog, out, out_dtype(prog, dtype))


def _tree(prog, parents, comp, M, dtype):
    e = new_err()
    out = ffi.new("int64_t **")
    n = ffi.new("size_t *")
    if not isinstance(parents, str):
        parents = ",".join(str(int(x)) for x in np.asarray(parents).reshape(-1))
    if lib.kv_parse_i64_list(parents.encode(), b"--parents", -1,
                             lib.KV_TREE_MAX, out, n, e) != 0:
        usage(prog, err_text(e))
    par = np.frombuffer(ffi.buffer(out[0], 8 * n[0]), np.int64).copy() \
        if n[0] else np.zeros(0, np.int64)
    lib.free(out[0])
    if comp is not None and len(comp) == 0:
        usage(prog, "--computed: no requests")
    if comp is not None:
        for r in range(len(comp)):
            if comp[r] > I32_MAX:
                usage(prog, "--computed: request %d: %d exceeds 2^31 - 1"
                      % (r, comp[r]))
    pp = ffi.cast("int64_t *", ffi.from_buffer(par)) if par.size else ffi.NULL
    if lib.kv_tree_check(pp, par.size, e) != 0:
        usage(prog, err_text(e))
    depth = np.zeros(par.size, np.int64)
    if lib.kv_tree_depths(pp, par.size,
                          ffi.cast("int64_t *", ffi.from_buffer(depth)),
                          e) != 0:
        fail(prog, err_text(e))
    D = int(depth.max())
    counts = np.bincount(depth, minlength=D + 1).astype(np.int64)
    cum = np.cumsum(np.concatenate(([0], counts[1:])))
    base = np.zeros(1, np.int64) if comp is None else comp.astype(np.int64)
    # the drafter's exceeds_max_model_len: a token at depth d >= 1 whose
    # root's position plus the tokens at depths 1..d reach M gets 0
    pos = base[:, None] + depth[None, :]
    if M > 0:
        over = (depth[None, :] > 0) & (base[:, None] + cum[depth][None, :] >= M)
        pos[over] = 0
    return as_dtype(prog, {"depths": depth, "depth_counts": counts[1:].copy(),
                           "positions": pos.reshape(-1)},
                    out_dtype(prog, dtype))


def step(chunk_size=None, block_size=None, block_table=None, scheduled=None,
         parents=None, max_model_len=None, computed=None, dtype="i64"):
    """kvslot step: with chunk_size (and block_size, block_table,
    scheduled, computed), the virtual batches of chunked local attention
    (query_start_loc, seq_lens, block_table, max_query_len, max_seq_len,
    req_indices, k_start); with parents (each token's parent, -1 a root;
    max_model_len, computed: the requests' tokens before the root), the
    tree's depths, depth_counts and positions.  A dict of numpy arrays."""
    prog = "kvslot step"
    if (chunk_size is None) == (parents is None):
        usage(prog, "expected one of --chunk-size and --parents")
    comp = None if computed is None else req_list(prog, "--computed", computed)
    if chunk_size is not None:
        if max_model_len is not None:
            usage(prog, "--max-model-len: only with --parents")
        if block_size is None or block_table is None or scheduled is None:
            usage(prog, "--chunk-size needs -B, --block-table and "
                  "--scheduled")
        C = int_opt(prog, "--chunk-size", chunk_size, 1, I32_MAX)
        B = int_opt(prog, "--block-size", block_size, 1, I32_MAX)
        sched = req_list(prog, "--scheduled", scheduled)
        if comp is not None and len(comp) != len(sched):
            usage(prog, "--computed has %d values, --scheduled has %d"
                  % (len(comp), len(sched)))
        return _local(prog, C, B, block_table, sched, comp, dtype,
                      lib.kv_default_max_mem())
    for v, name in ((block_size, "-B"), (block_table, "--block-table"),
                    (scheduled, "--scheduled")):
        if v is not None:
            usage(prog, "%s: only with --chunk-size" % name)
    M = 0 if max_model_len is None else \
        int_opt(prog, "--max-model-len", max_model_len, 1, I32_MAX)
    return _tree(prog, parents, comp, M, dtype)


def local(chunk_size=None, block_size=None, block_table=None, scheduled=None,
          computed=None, dtype="i64"):
    """kvslot local --chunk-size C -B B --block-table T --scheduled ..
    [--computed ..]: the same as step(chunk_size=...)."""
    prog = "kvslot local"
    for v, name in ((chunk_size, "--chunk-size=C"),
                    (block_size, "-B|--block-size=B"),
                    (block_table, "--block-table=FILE"),
                    (scheduled, "--scheduled=n0,n1,..")):
        if v is None:
            usage(prog, "missing option " + name)
    C = int_opt(prog, "--chunk-size", chunk_size, 1, I32_MAX)
    B = int_opt(prog, "--block-size", block_size, 1, I32_MAX)
    sched = req_list(prog, "--scheduled", scheduled)
    comp = None if computed is None else req_list(prog, "--computed", computed)
    if comp is not None and len(comp) != len(sched):
        usage(prog, "--computed has %d values, --scheduled has %d"
              % (len(comp), len(sched)))
    return _local(prog, C, B, block_table, sched, comp, dtype,
                  lib.kv_default_max_mem())
