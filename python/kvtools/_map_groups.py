"""kvslot.map with KV-cache groups (model_config= or kv_groups=): every
group's block table and slot mapping of one step, through the libkv calls
kvslot map --model-config / --kv-groups makes (slot/map_groups.h):
kv_map_groups_load, _tables, _fields, _compute, _pad and _i32_check."""
import os

import numpy as np

from ._core import (ffi, lib, new_err, err_text, usage, fail, int_opt,
                    int_list, max_mem as _max_mem, _text)

PROG = "kvslot map"
I32_MAX = 2**31 - 1
# the context-parallel keywords, handed to libkv as the program hands it
# their text (all_ranks, a flag, refused when true)
_CP = ("cp_size", "cp_rank", "pcp_size", "pcp_rank", "interleave",
       "cp_convention", "virtual_block")
_COUNTS = {"query_start_loc": 1, "seq_lens": 0, "num_computed_tokens": 0,
           "num_scheduled_tokens": 0}


def _is_path(v):
    return isinstance(v, (str, bytes, os.PathLike))


def _tables(block_table):
    """block_table as the program's --block-table values and the tables
    they name: a dict {K: table} gives group K's (gK=...), a list or tuple
    one table a group in group order, anything else one table.  A table
    is a path (read as kvslot map reads a file) or an array-like, which
    messages call <array>."""
    if isinstance(block_table, dict):
        items = []
        for k, v in block_table.items():
            if type(k) is not int or k < 0:
                usage(PROG, "block_table: groups are keyed by their number "
                      "K >= 0, got %r" % (k,))
            items.append(("g%d=" % k, v))
    elif isinstance(block_table, (list, tuple)):
        items = [("", v) for v in block_table]
    else:
        items = [("", block_table)]
    specs = [p + (os.fsdecode(v) if _is_path(v) else "<array>")
             for p, v in items]
    return specs, [v for _, v in items]


def _i32(name, v):
    """v as int32, refused as the program refuses a value past 32 bits
    (the first one, in C order)."""
    bad = ((v > I32_MAX) | (v < -2**31)).reshape(-1)
    if bad.any():
        fail(PROG, "--dtype i32: %s holds %d, over 32 bits; use --dtype i64"
             % (name, v.reshape(-1)[int(np.argmax(bad))]))
    return v.astype(np.int32)


def _take(st, name, n):
    """Field name of step st (n entries), owned by the array from now on."""
    p = getattr(st, name)
    if n == 0 or p == ffi.NULL:
        return np.zeros(0, np.int64)
    owner = ffi.gc(p, lib.free)
    setattr(st, name, ffi.NULL)
    return np.frombuffer(ffi.buffer(owner, 8 * n), np.int64)


def _load(kw, keep):
    """The groups, the options refused with them, the tables' owners and
    the fields (kv_map_groups_load, _tables, _fields)."""
    def cstr(s):
        keep.append(ffi.new("char[]", s.encode()))
        return keep[-1]

    o = ffi.new("struct kv_map_groups_opts *")
    if kw["model_config"] is not None:
        o.model_config = cstr(os.fsdecode(kw["model_config"]))
    if kw["kv_groups"] is not None:
        o.kv_groups = cstr(_text(kw["kv_groups"]))
    for attr in ("block_size", "max_model_len", "kernel_block") + _CP:
        if kw[attr] is not None:
            setattr(o, attr, cstr(_text(kw[attr])))
    o.all_ranks = int(bool(kw["all_ranks"]))
    o.kernel_block_size = int(kw["kernel_block_size"] is not None)
    m = ffi.gc(ffi.new("struct kv_map_groups *"), lib.kv_map_groups_release)
    e = new_err()
    u = ffi.new("int *")
    if lib.kv_map_groups_load(m, o, u, e) != 0:
        (usage if u[0] else fail)(PROG, err_text(e))
    specs, tables = _tables(kw["block_table"])
    arr = ffi.new("char *[]", [cstr(s) for s in specs])
    keep.append(arr)
    fields = kw["fields"]
    if fields is not None and not isinstance(fields, str):
        fields = ",".join(fields)
    if lib.kv_map_groups_tables(m, arr, len(specs), e) != 0 or \
            lib.kv_map_groups_fields(m, ffi.NULL if fields is None else
                                     cstr(_text(fields)), e) != 0:
        usage(PROG, err_text(e))
    return m, tables


def map_groups(kw):
    """kvslot.map's keywords kw with model_config or kv_groups: the step's
    dict, named and ordered as kvslot map writes it."""
    from .kvslot import MAP_FIELDS, _table, _slot_options_used, output_check
    keep = []
    m, tables = _load(kw, keep)
    names = [MAP_FIELDS[m.fl[i]] for i in range(m.nf)]
    pad = -1 if kw["pad_to"] is None else \
        int_opt(PROG, "--pad-to", kw["pad_to"], 0, I32_MAX)
    sched = int_list(PROG, "--scheduled", kw["scheduled"], 0, empty_ok=True)
    comp = None if kw["computed"] is None else \
        int_list(PROG, "--computed", kw["computed"], 0, empty_ok=True)
    if len(sched) == 0:
        usage(PROG, "--scheduled: no requests")
    if comp is not None and len(comp) != len(sched):
        usage(PROG, "--computed has %d values, --scheduled has %d"
              % (len(comp), len(sched)))
    _slot_options_used(PROG, names, pad >= 0, False)
    mm = _max_mem(PROG, kw["max_mem"])
    e = new_err()
    sp = ffi.cast("int64_t *", ffi.from_buffer(sched))
    cp = ffi.NULL if comp is None else ffi.cast("int64_t *",
                                                ffi.from_buffer(comp))
    ids, tabs = [None] * m.n, [None] * m.n
    for k in range(m.n):
        g = m.g[k]
        if not g.use_table:
            continue
        # an attention group's file read and checked in its block size, as
        # the program reads it; a Mamba group's state indices unchecked
        ids[k] = _table(tables[g.table], mm, sched, comp,
                        0 if g.kind == lib.KV_CACHE_MAMBA else
                        g.geom.block_size * g.geom.cp_world)
        t = ffi.new("struct kv_slot_table *")
        t.ids = ffi.cast("int64_t *", ffi.from_buffer(ids[k])) \
            if ids[k].size else ffi.NULL
        t.n_rows, t.n_cols = ids[k].shape
        tabs[k] = t
        # checked as the program checks it, without the token arrays: they
        # are made once the output has passed max_mem
        if lib.kv_map_groups_compute(m, k, t, g.path, sp, cp, len(sched), 0,
                                     e) != 0:
            fail(PROG, err_text(e))
    if lib.kv_map_groups_pad(m, pad, e) != 0:
        usage(PROG, err_text(e))
    dtype = kw["dtype"]
    if dtype not in ("i64", "int64", "i32", "int32", None):
        usage(PROG, "--dtype: expected i64 or i32, got '%s'" % dtype)
    i32 = dtype in ("i32", "int32")
    output_check(lib.kv_map_groups_entries(m, len(sched)), i32, mm)
    if i32 and lib.kv_map_groups_i32_check(m, e) != 0:
        fail(PROG, err_text(e))
    for k in range(m.n):
        if tabs[k] is not None and m.g[k].kind != lib.KV_CACHE_MAMBA:
            lib.kv_slot_step_release(ffi.addressof(m.g[k], "st"))
            if lib.kv_map_groups_compute(m, k, tabs[k], m.g[k].path, sp, cp,
                                         len(sched), 1, e) != 0:
                fail(PROG, err_text(e))
    return _arrays(m, names, ids, len(sched), i32)


def _arrays(m, names, ids, n_sched, i32):
    """The fields of the computed step m: the shared ones from its first
    attention group, the per-group ones as NAME.gK (block_table.gK the
    first n_sched rows of group K's table, slot_mapping.gK padded with -1
    to m.n_slots)."""
    from .kvslot import MAP_FIELDS, pad_slots
    f0 = m.g[m.first].st
    nr, nt = f0.n_reqs, f0.n_tokens
    res = {}
    for name in names:
        f = MAP_FIELDS.index(name)
        if name in ("block_table_indices", "block_numbers", "block_offsets",
                    "slot_mapping", "block_table"):
            out = []
            for k in range(m.n):
                g = m.g[k]
                if not g.sel[f]:
                    continue
                if name == "block_table":
                    v = ids[k][:n_sched].copy()
                else:
                    v = _take(g.st, name, nt)
                    if name == "slot_mapping":
                        v = pad_slots(v, m.n_slots)
                out.append(("%s.g%d" % (name, k), v))
        elif name in _COUNTS:
            out = [(name, _take(f0, name, nr + _COUNTS[name]))]
        elif name == "max_query_len":
            out = [(name, np.array(f0.max_query_len, np.int64))]
        elif name == "num_tokens":
            out = [(name, np.array(nt, np.int64))]
        elif name == "num_reqs":
            out = [(name, np.array(nr, np.int64))]
        else:                   # positions, req_indices, token_indices ...
            out = [(name, _take(f0, name, nt))]
        for key, v in out:
            res[key] = _i32(key, v) if i32 else v
    return res
