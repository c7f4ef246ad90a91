"""kvslot in-process: one step's attention metadata (kvslot map).

    kvslot.map(block_size=16, block_table=[[1, 2]], scheduled=[5])

returns a dict of numpy arrays named and ordered as kvslot(1) writes
them (vLLM's names); scalars are 0-d arrays, as np.load gives them.
plan, step, local, cplens, pcp and reorg are the other subcommands that
write arrays; groups and hash return what their -f json prints.
"""
import os

import numpy as np

from ._core import (ffi, lib, new_err, err_text, usage, fail, int_opt,
                    int_list, max_mem as _max_mem, _text)
from . import _plan_cc
from ._kvslot_groups import groups
from ._kvslot_step import step, local, as_dtype, read_table
from ._kvslot_hash import hash
from ._kvslot_cp import cplens
from ._kvslot_pcp import pcp
from ._kvslot_reorg import reorg

__all__ = ["map", "plan", "groups", "step", "local", "hash", "cplens",
           "pcp", "reorg", "MAP_FIELDS", "PLAN_FIELDS", "SUMMARY_FIELDS",
           "CC_FIELDS"]

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
_BIT = {name: 1 << MAP_FIELDS.index(name) for name in _TOKEN}
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
        if len(names) >= len(_ALL_NAMES):      # the program's list holds NF
            usage(PROG, "--fields: too many fields")
        names.append(name)
        rest = tail
    if not names:
        usage(PROG, "--fields: no field named")
    return tuple(names)


def _slot_options_used(prog, names, pad, all_ranks):
    """--pad-to and --all-ranks shape slot_mapping alone: refused when the
    fields leave it out, as the program refuses them."""
    if "slot_mapping" not in names and (pad or all_ranks):
        usage(prog, "%s shapes slot_mapping, which --fields leaves out"
              % ("--pad-to" if pad else "--all-ranks"))


def _table(block_table, max_mem, sched=None, comp=None, span=0):
    """The block table as int64 [rows, cols]: an array-like, or a file the
    way the program reads it (kv_map_table_read: text rows or an integer
    .npy, a short row refused where request r's sched[r] tokens after
    comp[r] need a column past its end, a column covering span positions;
    span 0: unchecked)."""
    if isinstance(block_table, (str, bytes, os.PathLike)):
        e = new_err()
        out = ffi.new("int64_t **")
        rows = ffi.new("size_t *")
        cols = ffi.new("size_t *")
        n = 0 if sched is None else len(sched)
        if lib.kv_map_table_read(
                os.fsencode(block_table), max_mem, n,
                ffi.cast("int64_t *", ffi.from_buffer(sched)) if n else ffi.NULL,
                ffi.NULL if comp is None else
                ffi.cast("int64_t *", ffi.from_buffer(comp)), span, out, rows,
                cols, e) != 0:
            fail(PROG, err_text(e))
        return _take(out[0], rows[0] * cols[0]).reshape(rows[0], cols[0])
    try:
        a = np.asarray(block_table)
    except ValueError:              # rows of different lengths
        fail(PROG, "block table: rows of different lengths; give a 2-d "
             "integer array (or a file, whose short rows the program pads)")
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


def _cp_numbers(prog, cp_size, cp_rank, pcp_size, pcp_rank, interleave):
    """--cp-size, --cp-rank, --pcp-size, --pcp-rank, --interleave, each in
    its range (None: not given, the default)."""
    def opt(name, v, default, lo, hi=2**63 - 1):
        return default if v is None else int_opt(prog, name, v, lo, hi)
    return (opt("--cp-size", cp_size, 1, 1, 1 << 16),
            opt("--cp-rank", cp_rank, 0, 0),
            opt("--pcp-size", pcp_size, 1, 1, 1 << 16),
            opt("--pcp-rank", pcp_rank, 0, 0),
            opt("--interleave", interleave, 1, 1, I32_MAX))


def _cp_options(prog, cp, B, convention):
    """The world and rank of the KV-cache shards under --cp-convention,
    with block size B, and the interleave: (cpw, cpr, I)."""
    W, R, P, Q, I = cp
    if R >= W:
        usage(prog, "--cp-rank %d: expected below --cp-size %d" % (R, W))
    if Q >= P:
        usage(prog, "--pcp-rank %d: expected below --pcp-size %d" % (Q, P))
    if B % I:
        usage(prog, "--interleave %d does not divide -B %d" % (I, B))
    if convention in ("pcp-dcp", None):    # vllm-ascend: PCP x DCP ranks
        return P * W, Q * W + R, I
    if convention == "dcp":            # vLLM: DCP alone shards
        return W, R, I
    usage(prog, "--cp-convention: expected pcp-dcp or dcp, got '%s'"
          % convention)


def map(block_size=None, block_table=None, scheduled=None, computed=None,
        pad_to=None, kernel_block_size=None, max_model_len=None, cp_size=None,
        cp_rank=None, pcp_size=None, pcp_rank=None, interleave=None,
        all_ranks=False, cp_convention=None, virtual_block=None, fields=None,
        dtype="i64", max_mem=None, model_config=None, kv_groups=None,
        kernel_block=None):
    """kvslot map -B BLOCK_SIZE --block-table T --scheduled n0,n1..
    [--computed c0,c1..] [...]: the metadata of one step as a dict.
    model_config (a config.json path) or kv_groups (a spec), with
    kernel_block, gives KV-cache groups (block_size is then optional):
    block_table is one table a group, a list in group order or a dict
    {K: table} (the program's gK=FILE); a table is an array or a path.
    Each group's block_table_indices, block_numbers, block_offsets,
    slot_mapping and block_table are keyed NAME.gK, and fields may name
    one group's.  A keyword left None is an option not given: cp_size and
    pcp_size default to 1, cp_rank and pcp_rank to 0, interleave to 1,
    cp_convention to "pcp-dcp" and virtual_block to "physical", as in the
    program; with groups they are handed to libkv as the program's options
    (each attention group's slot mapping under DCP, PCP and all_ranks
    refused as the program refuses them)."""
    kw = dict(locals())
    groups = model_config is not None or kv_groups is not None
    if block_table is None or scheduled is None or (groups and isinstance(
            block_table, (list, tuple, dict)) and not block_table):
        usage(PROG, "missing option " + ("--scheduled=n0,n1,.." if
                                         scheduled is None else
                                         "--block-table=[gK=]FILE"))
    if groups:
        from ._map_groups import map_groups
        return map_groups(kw)
    if block_size is None:
        usage(PROG, "-B N is required (or --model-config / --kv-groups)")
    if kernel_block is not None:
        usage(PROG, "--kernel-block needs --model-config or --kv-groups")
    B = int_opt(PROG, "-B", block_size, 1, I32_MAX)
    K = B if kernel_block_size is None else \
        int_opt(PROG, "--kernel-block-size", kernel_block_size, 1, I32_MAX)
    M = 0 if max_model_len is None else \
        int_opt(PROG, "--max-model-len", max_model_len, 1, (2**63 - 1) // 2)
    cp = _cp_numbers(PROG, cp_size, cp_rank, pcp_size, pcp_rank, interleave)
    pad = -1 if pad_to is None else int_opt(PROG, "--pad-to", pad_to, 0, I32_MAX)
    if B % K:
        usage(PROG, "--kernel-block-size %d does not divide -B %d" % (K, B))
    cpw, cpr, I = _cp_options(PROG, cp, B, cp_convention)
    g = ffi.new("struct kv_slot_geom *")
    g.block_size, g.kernel_block_size = B, K
    g.cp_world, g.cp_rank, g.interleave = cpw, cpr, I
    if virtual_block == "kernel":
        g.virt = lib.KV_SLOT_VIRTUAL_KERNEL
    elif virtual_block in ("physical", None):
        g.virt = lib.KV_SLOT_VIRTUAL_PHYSICAL
    else:
        usage(PROG, "--virtual-block: expected kernel or physical, got '%s'"
              % virtual_block)
    if g.virt == lib.KV_SLOT_VIRTUAL_KERNEL and cpw > 1 and K % I:
        usage(PROG, "--interleave %d does not divide the kernel block size "
              "%d: the older vLLM layout would write some slots twice (see "
              "--virtual-block physical)" % (I, K))
    names = _fields(fields)
    _slot_options_used(PROG, names, pad >= 0, all_ranks)
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
    ids = _table(block_table, mm, sched, comp, B * cpw)
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
        want |= _BIT.get(name, 0)
    st = ffi.new("struct kv_slot_step *")
    lib.kv_slot_step_init(st)
    sp = ffi.cast("int64_t *", ffi.from_buffer(sched))
    cp = ffi.cast("int64_t *", ffi.from_buffer(comp)) if comp is not None else ffi.NULL
    # the step without its token arrays first, as the program checks it:
    # they are made once the output has passed max_mem
    if lib.kv_slot_compute(g, t, len(sched), sp, cp, 0, st, e) != 0:
        fail(PROG, err_text(e))
    st = ffi.gc(st, lib.kv_slot_step_release)
    nr, nt = st.n_reqs, st.n_tokens
    n_slots = nt
    if pad >= 0:
        if pad < nt:
            usage(PROG, "--pad-to %d is less than the %d scheduled tokens"
                  % (pad, nt))
        n_slots = pad
    lf = ffi.new("enum kv_slot_field[]", [MAP_FIELDS.index(n) for n in names])
    output_check(lib.kv_map_entries(lf, len(names), nt, len(sched), ids.shape[1],
                                    cpw if all_ranks else 1, n_slots),
                 odt is np.int32, mm)
    if odt is np.int32 and lib.kv_map_i32_check(
            sum(1 << MAP_FIELDS.index(n) for n in set(names)), st, t, K, M,
            n_slots, e) != 0:
        fail(PROG, err_text(e))
    if want:
        lib.kv_slot_step_release(st)
        if lib.kv_slot_compute(g, t, len(sched), sp, cp, want, st, e) != 0:
            fail(PROG, err_text(e))
    sizes = {"query_start_loc": nr + 1, "seq_lens": nr,
             "num_computed_tokens": nr, "num_scheduled_tokens": nr}
    arrays = {}
    for name in names:              # owned by the arrays from now on
        if name in sizes or name in _TOKEN:
            if name not in arrays:
                arrays[name] = _take(getattr(st, name), sizes.get(name, nt))
                setattr(st, name, ffi.NULL)
    res = {}
    for name in names:
        if name == "slot_mapping":
            if all_ranks:
                v = np.empty((cpw, n_slots), np.int64)
                for rank in range(cpw):
                    g.cp_rank = rank
                    _slots(g, t, sched, comp, v[rank])
                g.cp_rank = cpr
            else:
                v = pad_slots(arrays["slot_mapping"], n_slots)
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
        if odt is np.int32:         # kv_map_i32_check held them
            v = v.astype(np.int32)
        res[name] = v
    return res


def output_check(entries, i32, mm):
    """kvslot map's --max-mem bound on its output (kv_map_output_check),
    before any of it is made: entries of 8 bytes, 4 with dtype i32."""
    e = new_err()
    if lib.kv_map_output_check(entries, 4 if i32 else 8, mm, e) != 0:
        fail(PROG, err_text(e))


def pad_slots(v, n_slots):
    """A slot mapping padded with -1 to n_slots entries, made once."""
    if n_slots <= len(v):
        return v
    out = np.full(n_slots, -1, np.int64)
    out[:len(v)] = v
    return out


def _slots(g, t, sched, comp, out):
    """Fill out (n_slots, -1 past the tokens) with one rank's slots."""
    out[:] = -1
    at = 0
    buf = ffi.cast("int64_t *", ffi.from_buffer(out))
    for r, n in enumerate(sched):
        c = 0 if comp is None else int(comp[r])
        if n:
            lib.kv_slot_fill(g, t, r, c, int(n), MAP_FIELDS.index("slot_mapping"),
                             buf + at)
        at += int(n)
    return out


PLAN_DEFAULT = ("step", "req_ids", "num_scheduled_tokens", "query_start_loc",
                "seq_lens", "num_computed_tokens", "positions", "req_indices",
                "token_indices", "block_table_indices", "block_numbers",
                "block_offsets", "slot_mapping", "max_query_len", "num_tokens",
                "num_reqs", "block_table", "waiting", "blocked", "preempted",
                "finished", "free_blocks")
PLAN_CACHE = ("num_cached_tokens", "shared_blocks", "evicted_hashes")
CC_FIELDS = _plan_cc.field_names()
SUMMARY_FIELDS = ("steps", "prefix_hit_tokens", "preemptions", "evictions",
                  "peak_blocks")
PLAN_FIELDS = PLAN_DEFAULT[:2] + MAP_FIELDS[:11] + ("cp_owner",) + \
    PLAN_DEFAULT[13:] + PLAN_CACHE


def _vec(p, n):
    if n == 0 or p == ffi.NULL:
        return np.zeros(0, np.int64)
    return np.frombuffer(ffi.buffer(p, 8 * n), np.int64).copy()


def _per_request(prog, opt, v, lo):
    """A per-request list option (--prompt-lens, --arrivals ...) checked
    item by item, a bad value naming its request ("--arrivals: request
    2: ..."), as the program checks it."""
    if isinstance(v, (list, tuple, np.ndarray)) and len(v) and \
            all(type(x) is int and x >= lo for x in v):
        return np.array(v, dtype=np.int64)
    items = _text(v).split(",")
    return np.array([int_opt(prog, "%s: request %d" % (opt, k), x, lo)
                     for k, x in enumerate(items)], dtype=np.int64)


def _one_each(prog, opt, a, n):
    """One value for all requests, or one each."""
    if len(a) != 1 and len(a) != n:
        usage(prog, "%s has %d values for %d requests" % (opt, len(a), n))
    return np.repeat(a, n) if len(a) == 1 and n > 1 else a


def _prompt_table(prog, prompts, max_mem):
    """--prompts: the token ids of each request, a row each, -1 padding
    its end: a file (text rows or an integer .npy), a 2-d integer array,
    or a list of lists.  Returns (lengths, table)."""
    if isinstance(prompts, (str, bytes)):
        t = read_table(prog, "--prompts: ", prompts, -1, max_mem)
    elif isinstance(prompts, np.ndarray) and prompts.ndim == 2:
        t = np.ascontiguousarray(prompts, dtype=np.int64)
    else:
        rows = [list(r) for r in prompts]
        w = max((len(r) for r in rows), default=0)
        t = np.full((len(rows), w), -1, np.int64)
        for i, r in enumerate(rows):
            t[i, :len(r)] = r
    lens = np.zeros(t.shape[0], np.int64)
    for i, row in enumerate(t):
        n = len(row)
        stop = np.flatnonzero(row < 0)
        ln = int(stop[0]) if len(stop) else n
        if (row[ln:] != -1).any():
            fail(prog, "--prompts: request %d: token %d is %d; ids are >= 0 "
                 "(-1 pads only the end of a row)" % (i, ln, row[ln]))
        if ln == 0:
            fail(prog, "--prompts: request %d (line %d) is empty" % (i, i + 1))
        lens[i] = ln
    if t.shape[0] == 0:
        fail(prog, "--prompts: no requests")
    return lens, t


def _salts(prog, salt, n):
    """--salt: one cache salt for all requests, or one each."""
    parts = salt.split(",") if isinstance(salt, str) else [str(x) for x in salt]
    if len(parts) != 1 and len(parts) != n:
        usage(prog, "--salt has %d values for %d requests" % (len(parts), n))
    if len(parts) == 1:
        parts = parts * n
    return [ffi.new("char[]", x.encode()) for x in parts]


def _plan_fields(prog, fields, apc):
    names = PLAN_DEFAULT
    if fields is not None:
        if not isinstance(fields, str):
            fields = ",".join(fields)
        names, rest = [], fields
        while rest:
            name, _, tail = rest.partition(",")
            if name == "" or len(name) >= 64:
                usage(prog, "--fields: empty or overlong name in '%s'" % rest)
            if name not in _ALL_NAMES:
                usage(prog, "--fields: unknown field '%s' for plan; valid: %s"
                      % (name, " ".join(_ALL_NAMES)))
            if len(names) >= len(_ALL_NAMES):
                usage(prog, "--fields: too many fields")
            names.append(name)
            rest = tail
        names = tuple(names)
    elif apc:
        names = PLAN_DEFAULT + PLAN_CACHE
    return names


def plan(prompt_lens=None, max_tokens=None, block_size=None,
         max_model_len=None, output_lens=None, steps=None, num_blocks=None,
         max_num_seqs=256, no_reserve_full_isl=False, async_scheduling=False,
         decode=False, pad_to=None, round_stride=False, reorder=None,
         fields=None, dtype="i64", max_mem=None, prompts=None, arrivals=None,
         enable_prefix_caching=False, salt=None, lora_ids=None, cp_size=None,
         cp_rank=None, pcp_size=None, pcp_rank=None, interleave=None,
         all_ranks=False, cp_convention=None, model_config=None,
         kv_groups=None, kernel_block=None, mamba_cache_mode=None, trace=None,
         ms_per_step=None, summary=False, chunk_cache=False, segments=None,
         chunk_context=None, chunk_pool_blocks=None,
         chunk_cache_gpu_memory_utilization=None, max_chunks=None,
         max_chunk_tokens=None):
    """kvslot plan --prompt-lens a,b,.. (or --prompts) --max-tokens N -B B
    --max-model-len M [...]: runs vLLM's scheduler and block allocator and
    yields each step's metadata as a dict (kvslot(1)'s fields, in its
    order).  Without decode=True (or steps) the plan stops once every
    prompt is computed, as the program does.  prompts (token ids: a file,
    a -1-padded 2-d array or a list of lists) with enable_prefix_caching
    adds num_cached_tokens, shared_blocks and evicted_hashes (u64 hashes
    as int64, with dtype i32 too); cp_size ... give each rank's slots
    (all_ranks: every rank's, a row each).  model_config (a config.json path) or kv_groups
    (a spec) gives KV-cache groups: their fields are block_table.gK and
    slot_mapping.gK, and fields may name one group's; mamba_cache_mode
    ("none" or "align"; default "align" with enable_prefix_caching, as vLLM
    derives it) is the Mamba groups' cache mode.  trace (a
    Mooncake-format JSONL path) gives the requests instead, arriving at
    step 1 + floor(timestamp / ms_per_step) (None: 10 ms); with summary=True
    (which needs num_blocks) plan runs to its end and returns, instead of
    steps, kvslot plan --summary's counters as a dict of ints: steps,
    prefix_hit_tokens, preemptions, evictions and peak_blocks.  A keyword
    left None is an option not given (reorder "none", cp_size and pcp_size
    1, cp_rank and pcp_rank 0, interleave 1, cp_convention "pcp-dcp";
    chunk_context "sys", chunk_cache_gpu_memory_utilization 0.15,
    max_chunks 500, max_chunk_tokens 4096): the program refuses the
    scheduler's options with --chunk-cache, and the chunk cache's without
    it, whatever their value.

    chunk_cache=True is kvslot plan --chunk-cache, seed 001's chunk cache:
    segments (kvchunk split -f text lists with keys: a path, "-" or None
    for stdin), output_lens, max_tokens, block_size, max_model_len, steps,
    num_blocks, max_num_seqs, decode, chunk_context ("sys" or "none"),
    chunk_pool_blocks (None: main pool * utilization / 0.70),
    chunk_cache_gpu_memory_utilization, max_chunks, max_chunk_tokens,
    fields, dtype and max_mem; each step a dict of the fields of
    CC_FIELDS (chunk_evicted_keys, which the program writes as text only,
    as an (n, 16) uint8 array of keys)."""
    args = dict(locals())
    if chunk_cache:
        return _plan_cc.plan_cc(
            args, segments, output_lens, max_tokens, block_size,
            max_model_len, steps, num_blocks, max_num_seqs, decode,
            chunk_context, chunk_pool_blocks,
            chunk_cache_gpu_memory_utilization, max_chunks, max_chunk_tokens,
            fields, dtype, max_mem)
    _plan_cc.check_not_cc(args)
    prog = "kvslot plan"
    e = new_err()
    for opt, v in (("--trace", trace), ("--ms-per-step", ms_per_step)):
        if v is not None and _text(v) == "":
            usage(prog, "%s: expected a value, got an empty one" % opt)
    mm = _max_mem(prog, max_mem)
    if max_tokens is None or block_size is None or max_model_len is None:
        usage(prog, "--max-tokens, -B and --max-model-len are required")
    budget = int_opt(prog, "--max-tokens", max_tokens, 1, I32_MAX)
    B = int_opt(prog, "-B", block_size, 1, I32_MAX)
    M = int_opt(prog, "--max-model-len", max_model_len, 1, I32_MAX)
    K_steps = int_opt(prog, "--steps", steps, 1) if steps is not None else None
    nb = int_opt(prog, "--num-blocks", num_blocks, 2, I32_MAX) \
        if num_blocks is not None else 0
    ms = int_opt(prog, "--max-num-seqs", max_num_seqs, 1, I32_MAX)
    pad = int_opt(prog, "--pad-to", pad_to, 0, I32_MAX) if pad_to is not None else -1
    cp = _cp_numbers(prog, cp_size, cp_rank, pcp_size, pcp_rank, interleave)
    apc = bool(enable_prefix_caching)
    pg = _plan_groups(prog, B, M, cp, apc, model_config, kv_groups,
                      kernel_block, mamba_cache_mode)
    cpw, cpr, I = _cp_options(prog, cp, pg.block_size if pg.n else B,
                              cp_convention)
    if fields is not None and not isinstance(fields, str):
        fields = ",".join(fields)
    e = new_err()
    if lib.kv_plan_groups_fields(pg, ffi.NULL if fields is None else
                                 _text(fields).encode(), e) != 0:
        usage(prog, err_text(e))
    names = _plan_fields(prog, None if pg.fields == ffi.NULL else
                         ffi.string(pg.fields).decode(), apc)
    given = [x is not None for x in (prompt_lens, prompts, arrivals,
                                     output_lens, salt, lora_ids)]
    tr = _plan_trace(prog, trace, ms_per_step, summary, nb, given, mm)
    table = None
    if tr is not None:
        plens = _vec(tr.prompt_lens, tr.n)
    elif (prompt_lens is None) == (prompts is None):
        usage(prog, "give --prompt-lens or --prompts, one of them")
    elif prompt_lens is not None:
        plens = _per_request(prog, "--prompt-lens", prompt_lens, 1)
        if len(plens) == 0:
            usage(prog, "--prompt-lens: no requests")
    else:
        plens, table = _prompt_table(prog, prompts, mm)
    np_ = len(plens)
    arr = _one_each(prog, "--arrivals", _per_request(
        prog, "--arrivals", arrivals, 1), np_) if arrivals is not None else None
    lora = _one_each(prog, "--lora-ids", _per_request(
        prog, "--lora-ids", lora_ids, 0), np_) if lora_ids is not None else None
    salts = _salts(prog, salt, np_) if salt is not None else None
    olens = None
    if output_lens is not None:
        olens = _per_request(prog, "--output-lens", output_lens, 1)
        if len(olens) == 1 and np_ > 1:
            olens = np.repeat(olens, np_)
        if len(olens) != np_:
            usage(prog, "--output-lens has %d values for %d requests"
                  % (len(olens), np_))
    if pg.n:
        B = pg.block_size
        if all_ranks:
            usage(prog, "--all-ranks with KV-cache groups: not modelled "
                  "(one rank's slot mapping a group is written)")
    if apc and table is None and tr is None:
        usage(prog, "--enable-prefix-caching needs --prompts FILE (the token "
              "ids the block hashes are made of)")
    if not apc and (salt is not None or lora_ids is not None):
        usage(prog, "%s: an extra key of the block hashes, needs "
              "--enable-prefix-caching" % ("--salt" if salt is not None
                                          else "--lora-ids"))
    for i, n in enumerate(plens):
        if n >= M:
            usage(prog, "%s: request %d: prompt length %d leaves no room for "
                  "an output token under --max-model-len %d"
                  % ("--prompts" if table is not None else "--prompt-lens",
                     i, n, M))
    if pad >= 0 and pad < budget:
        usage(prog, "--pad-to %d is less than --max-tokens %d" % (pad, budget))
    _slot_options_used(prog, names, pad >= 0, all_ranks)
    cfg = ffi.new("struct kv_plan_config *")
    if reorder == "split-decodes":
        cfg.split_decodes = 1
    elif reorder == "decode-extend-prefill":
        cfg.split_decodes = 2
    elif reorder not in ("none", None):
        usage(prog, "--reorder: expected none, split-decodes or "
              "decode-extend-prefill, got '%s'" % reorder)
    if dtype in ("i64", "int64", None):
        odt = np.int64
    elif dtype in ("i32", "int32"):
        odt = np.int32
    else:
        usage(prog, "--dtype: expected i64 or i32, got '%s'" % dtype)
    cfg.max_bytes = mm
    cfg.n_reqs = np_
    keep = [plens, olens, arr, lora, salts, table, pg, tr]
    cfg.n_groups = pg.n
    cfg.groups = pg.g
    p64 = lambda a: ffi.cast("int64_t *", ffi.from_buffer(a))
    cfg.prompt_lens = p64(plens)
    if olens is not None:
        cfg.output_lens = p64(olens)
    cfg.max_num_batched_tokens = budget
    cfg.max_num_seqs = ms
    # with context parallelism the scheduler's block is the virtual block
    # of B tokens on each of the cpw ranks
    cfg.block_size = B * cpw
    cfg.kernel_block_size = B
    cfg.max_model_len = M
    cfg.num_blocks = nb
    cfg.round_stride = 1 if round_stride else 0
    cfg.prefix_caching = 1 if apc else 0
    if table is not None:
        rows = ffi.new("int64_t *[]", np_)
        for i in range(np_):
            rows[i] = p64(table) + i * table.shape[1]
        keep.append(rows)
        cfg.prompt_tokens = rows
    if arr is not None:
        cfg.arrivals = p64(arr)
    if salts is not None:
        sp = ffi.new("char *[]", salts)
        keep.append(sp)
        cfg.salts = sp
    if lora is not None:
        cfg.lora_ids = p64(lora)
    if tr is not None:
        cfg.output_lens, cfg.arrivals = tr.output_lens, tr.arrivals
        cfg.prompt_tokens = tr.tokens
    cfg.admit_by_chunk = 1 if no_reserve_full_isl else 0
    cfg.async_scheduling = 1 if async_scheduling else 0
    cfg.skip_waiting = 0 if "waiting" in names else 1
    cfg.skip_shared = 0 if "shared_blocks" in names else 1
    if summary:                 # no step is written
        names = ()
        cfg.skip_waiting = cfg.skip_shared = 1
        if pg.n:
            skip = ffi.new("unsigned char[]", [1] * pg.n)
            keep.append(skip)
            cfg.skip_tables = skip
    want = 1 << MAP_FIELDS.index("slot_mapping")
    for name in names:
        if name in _TOKEN:
            want |= 1 << MAP_FIELDS.index(name)
    if pg.n:        # each group's slot mapping is kv_plan_group_slots'
        want &= ~(1 << MAP_FIELDS.index("slot_mapping"))
    pp = ffi.new("struct kv_plan **")
    if lib.kv_plan_new(pp, cfg, e) != 0:
        usage(prog, err_text(e))
    sched = ffi.gc(pp[0], lib.kv_plan_free)
    if odt is np.int32:
        pool = nb if nb else np_ * (M // B + 1) + 1
        if pool > I32_MAX // B:
            usage(prog, "--dtype i32: a pool of %d blocks of %d tokens (%s) has "
                  "slots past 32 bits; use --dtype i64"
                  % (pool, B, "--num-blocks" if nb else
                     "enough for every request"))
        if np_ * M > I32_MAX:
            usage(prog, "--dtype i32: token indices of %d requests * "
                  "--max-model-len %d pass 32 bits; use --dtype i64" % (np_, M))
    if summary:
        return _plan_summary(prog, sched, np_, nb, K_steps, decode)
    geom = (B, M, cpw, cpr, I, bool(all_ranks), pg)
    return _plan_steps(prog, sched, cfg, keep, names, want, geom, pad, odt,
                       K_steps, decode)


def _plan_steps(prog, sched, cfg, keep, names, want, geom, pad, odt, K_steps,
                decode):
    B, M, cpw, cpr, I, all_ranks, pg = geom
    e = new_err()
    k = 0
    while K_steps is None or k < K_steps:
        ss = ffi.new("struct kv_plan_step *")
        if lib.kv_plan_step(sched, ss, e) != 0:
            fail(prog, err_text(e))
        k += 1
        g = ffi.new("struct kv_slot_geom *")
        g.block_size = g.kernel_block_size = B
        g.max_model_len = M
        g.cp_world, g.cp_rank, g.interleave = cpw, cpr, I
        g.virt = lib.KV_SLOT_VIRTUAL_KERNEL
        t = ffi.new("struct kv_slot_table *")
        t.ids = ss.block_table
        t.n_rows, t.n_cols = ss.n_rows, ss.n_cols
        st = ffi.gc(ffi.new("struct kv_slot_step *"), lib.kv_slot_step_release)
        if lib.kv_slot_compute(g, t, ss.n_rows, ss.num_scheduled,
                               ss.num_computed, want, st, e) != 0:
            fail(prog, err_text(e))
        nr, nt = st.n_reqs, st.n_tokens
        out = {}
        for name in names:
            if pg.n and name in ("slot_mapping", "block_table"):
                _group_fields(out, name, g, ss, pg, pad if pad >= 0
                              else st.n_tokens, odt)
                continue
            if name == "step":
                v = np.array(ss.step, np.int64)
            elif name == "req_ids":
                v = _vec(ss.req_ids, ss.n_rows)
            elif name in ("query_start_loc", "seq_lens", "num_computed_tokens",
                          "num_scheduled_tokens"):
                v = _vec(getattr(st, name), nr + 1 if name == "query_start_loc"
                         else nr)
            elif name == "slot_mapping" and all_ranks:
                v = np.stack([_rank_slots(g, t, ss, r, max(pad, nt))
                              for r in range(cpw)])
                g.cp_rank = cpr
            elif name == "slot_mapping":
                v = _vec(st.slot_mapping, nt)
                if pad > nt:
                    v = np.concatenate([v, np.full(pad - nt, -1, np.int64)])
            elif name in _TOKEN:
                v = _vec(getattr(st, name), nt)
            elif name == "max_query_len":
                v = np.array(st.max_query_len, np.int64)
            elif name == "num_tokens":
                v = np.array(nt, np.int64)
            elif name == "num_reqs":
                v = np.array(nr, np.int64)
            elif name == "block_table":
                v = _vec(ss.block_table, ss.n_rows * ss.n_cols).reshape(
                    ss.n_rows, ss.n_cols)
            elif name == "free_blocks":
                v = np.array(ss.free_blocks, np.int64)
            elif name == "num_cached_tokens":
                v = _vec(ss.num_cached, ss.n_rows if ss.num_cached != ffi.NULL
                         else 0)
            elif name == "shared_blocks":
                v = _vec(ss.shared, ss.n_shared)
            elif name == "evicted_hashes":
                v = _vec(ffi.cast("int64_t *", ss.evicted), ss.n_evicted)
            else:               # waiting blocked preempted finished
                v = _vec(getattr(ss, name), getattr(ss, "n_" + name))
            out[name] = v
        # i32: a value over 32 bits refused as the program refuses it, not
        # truncated; evicted_hashes stay int64 bits whatever the dtype
        conv = as_dtype(prog, {k: v for k, v in out.items()
                               if k != "evicted_hashes"}, odt)
        yield {k: v if k == "evicted_hashes" else conv[k]
               for k, v in out.items()}
        if ss.all_done or (not decode and ss.prompts_done and K_steps is None):
            return


def _plan_trace(prog, trace, ms_per_step, summary, nb, given, max_mem):
    """--trace, --ms-per-step and --summary through kv_plan_trace_load:
    the trace's requests (a struct kv_sim_requests, freed with it), or None
    without a trace.  given: whether each option a trace replaces was
    given (--prompt-lens, --prompts, --arrivals, --output-lens, --salt,
    --lora-ids, in this order)."""
    o = ffi.new("struct kv_plan_trace_opts *")
    keep = []
    for attr, v in (("trace", trace), ("ms_per_step", ms_per_step)):
        if v is not None:
            if attr == "trace":
                import os
                v = os.fspath(v)
            keep.append(ffi.new("char[]", _text(v).encode()))
            setattr(o, attr, keep[-1])
    o.summary = 1 if summary else 0
    o.num_blocks = nb
    o.others = sum(1 << i for i, g in enumerate(given) if g)
    t = ffi.new("struct kv_sim_requests *")
    e = new_err()
    u = ffi.new("int *")
    if lib.kv_plan_trace_load(o, max_mem, t, u, e) != 0:
        (usage if u[0] else fail)(prog, err_text(e))
    return None if trace is None else ffi.gc(t, lib.kv_sim_requests_release)


def _plan_summary(prog, sched, n_reqs, nb, K_steps, decode):
    """summary=True: the plan run to its end in libkv
    (kv_plan_summary_run), its counters as kvslot plan --summary prints
    them."""
    s = ffi.gc(ffi.new("struct kv_plan_summary *"), lib.kv_plan_summary_release)
    lib.kv_plan_summary_init(s, nb, n_reqs)
    e = new_err()
    if lib.kv_plan_summary_run(sched, -1 if K_steps is None else K_steps,
                               1 if decode else 0, s, e) != 0:
        fail(prog, err_text(e))
    return {name: int(getattr(s, name)) for name in SUMMARY_FIELDS}


def _plan_groups(prog, B, M, cp, apc, model_config, kv_groups, kernel_block,
                 mamba_cache_mode):
    """--model-config / --kv-groups (and --kernel-block,
    --mamba-cache-mode) through kv_plan_groups_load: a struct kv_plan_groups
    (n = 0 without them)."""
    W, R, P, Q, I = cp
    pg = ffi.gc(ffi.new("struct kv_plan_groups *"), lib.kv_plan_groups_release)
    o = ffi.new("struct kv_plan_groups_opts *")
    keep = []
    for attr, v in (("model_config", model_config), ("kv_groups", kv_groups),
                    ("mamba_cache_mode", mamba_cache_mode),
                    ("kernel_block", kernel_block)):
        if v is not None:
            if attr == "model_config":
                import os
                v = os.fspath(v)
            keep.append(ffi.new("char[]", _text(v).encode()))
            setattr(o, attr, keep[-1])
    o.block_size, o.max_model_len = B, M
    o.dcp, o.pcp, o.prefix_caching = W, P, 1 if apc else 0
    e = new_err()
    u = ffi.new("int *")
    if lib.kv_plan_groups_load(pg, o, u, e) != 0:
        (usage if u[0] else fail)(prog, err_text(e))
    return pg


def _group_fields(out, name, g, ss, pg, pad_to, odt):
    """A step's block_table.gK (each group's table) or slot_mapping.gK
    (kv_plan_group_slots) for the groups the fields select, into out."""
    sel = pg.bt_sel if name == "block_table" else pg.sm_sel
    rc = ss.n_rows * ss.n_cols
    for k in range(pg.n):
        if not sel[k]:
            continue
        if name == "block_table":
            v = _vec(ss.tables + k * rc, rc).reshape(ss.n_rows, ss.n_cols)
        else:
            v = np.empty(pad_to, np.int64)
            lib.kv_plan_group_slots(g, ss, pg.g, k, ffi.cast(
                "int64_t *", ffi.from_buffer(v)), pad_to)
        out["%s.g%d" % (name, k)] = v


def _rank_slots(g, t, ss, rank, n_slots):
    """One rank's slot mapping of a plan step, padded with -1 to n_slots."""
    e = new_err()
    g.cp_rank = rank
    st = ffi.gc(ffi.new("struct kv_slot_step *"), lib.kv_slot_step_release)
    if lib.kv_slot_compute(g, t, ss.n_rows, ss.num_scheduled, ss.num_computed,
                           1 << MAP_FIELDS.index("slot_mapping"), st, e) != 0:
        fail("kvslot plan", err_text(e))
    v = _vec(st.slot_mapping, st.n_tokens)
    if n_slots > st.n_tokens:
        v = np.concatenate([v, np.full(n_slots - st.n_tokens, -1, np.int64)])
    return v
