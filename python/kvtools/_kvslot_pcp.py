"""kvslot pcp in-process: the DualChunkSwap split of prefill context
parallelism (libkv's kv_pcp_ascend_split, the vllm-ascend layout) or
vLLM MRV2's split (kv_pcp_vllm_split), with each rank's slot mapping when
a block table is given (kv_slot_compute)."""
import os

import numpy as np

from ._core import ffi, lib, new_err, err_text, usage, fail, int_opt, _text
from ._kvslot_step import req_list, out_dtype
from ._kvslot_cp import parse_max_mem, mem_check, SIZE_MAX

PROG = "kvslot pcp"
I32_MAX = 2**31 - 1
I64_MAX = 2**63 - 1
ASCEND_FIELDS = (
    "pcp_tokens", "num_pcp_pads", "pcp_unpad_mask",
    "pcp_allgather_restore_idx", "rank", "positions", "q_head_idx",
    "q_tail_idx", "kv_with_q_head_nomask_idx", "kv_with_q_head_mask_idx",
    "kv_with_q_tail_nomask_idx", "kv_with_q_tail_mask_idx", "q_full_idx",
    "attn_mask_seqlens", "head_attn_nomask_seqlens",
    "tail_attn_nomask_seqlens", "slot_mapping")
VLLM_FIELDS = (
    "num_tokens_per_rank", "padded_gather_idx", "gathered_kv_write_mask",
    "hidden_restore_idx", "slot_mapping", "rank", "positions", "req_indices",
    "row_req_ids", "query_start_loc", "seq_lens")
# the fields written once, before the ranks' own
ASCEND_GLOBAL = ASCEND_FIELDS[:4]
VLLM_GLOBAL = VLLM_FIELDS[:5]


def _fields(fields, names, what):
    """The set of names --fields selects (None: all), checked as the
    program checks them."""
    if fields is None:
        return None
    s = fields if isinstance(fields, str) else ",".join(fields)
    out = set()
    rest = s
    while rest:
        name, sep, tail = rest.partition(",")
        if name == "" or len(name.encode()) >= 64:
            usage(PROG, "--fields: empty or overlong name")
        if name not in names:
            usage(PROG, "--fields: unknown field '%s' for %s; valid: %s"
                  % (name, what, " ".join(names)))
        out.add(name)
        rest = tail
    return out


def _vec(p, n):
    n = int(n)
    if n <= 0:
        return np.zeros(0, np.int64)
    return np.frombuffer(ffi.buffer(p, 8 * n), np.int64).copy()


def _ptr(a):
    return ffi.cast("int64_t *", ffi.from_buffer(a)) if a is not None and \
        a.size else ffi.NULL


def _bytes_bound(tokens, P, dtype):
    """The program's bound on what the split holds (its pcp_bytes), npy
    output: 4 bytes an entry for --dtype i32, else 8."""
    n = sum(int(t) + 2 * P for t in tokens)
    arrays = n * 8 * (2 * (4 + 4 // P + 1) + 3)
    per = 4 if dtype == "i32" else 8
    return min(arrays + n * (2 * P + 8) * per + len(tokens) * 64, SIZE_MAX)


def _table(block_table, max_mem, tokens, comp, span):
    if isinstance(block_table, (str, bytes, os.PathLike)):
        e = new_err()
        out = ffi.new("int64_t **")
        rows = ffi.new("size_t *")
        cols = ffi.new("size_t *")
        if lib.kv_map_table_read(os.fsencode(block_table), max_mem,
                                 len(tokens), _ptr(tokens), _ptr(comp), span,
                                 out, rows, cols, e) != 0:
            fail(PROG, err_text(e))
        a = _vec(out[0], rows[0] * cols[0]).reshape(rows[0], cols[0])
        lib.free(out[0])
        return a
    try:
        a = np.asarray(block_table)
    except ValueError:
        fail(PROG, "--block-table: rows of different lengths")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or (a.size and a.dtype.kind not in "iu"):
        fail(PROG, "--block-table: expected a 2-d integer array, found "
             "%d-d %s" % (a.ndim, a.dtype))
    return np.ascontiguousarray(a, dtype=np.int64)


def _slots(g, t, tokens, comp):
    """The slot mapping of the unsplit batch under geometry g."""
    from .kvslot import _BIT
    st = ffi.new("struct kv_slot_step *")
    e = new_err()
    lib.kv_slot_step_init(st)
    try:
        if lib.kv_slot_compute(g, t, len(tokens), _ptr(tokens), _ptr(comp),
                               _BIT["slot_mapping"], st, e) != 0:
            fail(PROG, err_text(e))
        return _vec(st.slot_mapping, st.n_tokens)
    finally:
        lib.kv_slot_step_release(st)


def pcp(pcp_size=None, tokens=None, decodes=None, computed=None, rank=None,
        layout="ascend", block_size=None, block_table=None, dcp_size=None,
        dcp_rank=None, interleave=None, max_mem=None, fields=None,
        dtype="i64"):
    """kvslot pcp --pcp-size P --tokens n0,n1,.. [...]: a dict of the
    fields written once (ascend: pcp_tokens, num_pcp_pads, pcp_unpad_mask,
    pcp_allgather_restore_idx; vllm: num_tokens_per_rank,
    padded_gather_idx, gathered_kv_write_mask, hidden_restore_idx,
    slot_mapping) and "ranks", one dict a rank written (rank=k: that one)
    with its own fields, in the program's order.  A keyword left None is
    an option not given."""
    for v, name in ((pcp_size, "--pcp-size=P"), (tokens, "--tokens=n0,n1,..")):
        if v is None:
            usage(PROG, "missing option " + name)

    def opt(name, v, default, lo, hi=I64_MAX):
        return default if v is None else int_opt(PROG, name, v, lo, hi)
    P = opt("--pcp-size", pcp_size, 1, 1, 1 << 16)
    D = opt("--decodes", decodes, -1, 0)
    k_only = opt("--rank", rank, -1, 0)
    B = opt("-B", block_size, 0, 1, I32_MAX)
    DS = opt("--dcp-size", dcp_size, 1, 1, 1 << 16)
    DR = opt("--dcp-rank", dcp_rank, 0, 0)
    I = opt("--interleave", interleave, 1, 1, I32_MAX)
    lay = "ascend" if layout is None else _text(layout)
    if lay not in ("ascend", "vllm"):
        usage(PROG, "--layout: expected ascend or vllm, got '%s'" % lay)
    vllm = lay == "vllm"
    sel = _fields(fields, VLLM_FIELDS if vllm else ASCEND_FIELDS,
                  "pcp --layout " + lay)
    if k_only >= P:
        usage(PROG, "--rank %d: expected below --pcp-size %d" % (k_only, P))
    if DR >= DS:
        usage(PROG, "--dcp-rank %d: expected below --dcp-size %d" % (DR, DS))
    tok = req_list(PROG, "--tokens", tokens, 1)
    comp = None if computed is None else req_list(PROG, "--computed",
                                                  computed)
    if len(tok) == 0:
        usage(PROG, "--tokens: no requests")
    if comp is not None and len(comp) != len(tok):
        usage(PROG, "--computed has %d values, --tokens has %d"
              % (len(comp), len(tok)))
    if D > len(tok):
        usage(PROG, "--decodes %d: only %d requests" % (D, len(tok)))
    mm = parse_max_mem(PROG, max_mem)
    mem_check(PROG, _bytes_bound(tok, P, dtype), mm, "the split")
    n_dec = D if D >= 0 else lib.kv_pcp_count_decodes(_ptr(tok), _ptr(comp),
                                                      len(tok), 1)
    if (block_size is None) != (block_table is None):
        usage(PROG, "-B and --block-table go together")
    if not B and ((dcp_size is not None and not vllm) or
                  dcp_rank is not None or interleave is not None):
        usage(PROG, "%s only shapes slot_mapping: give -B and --block-table "
              "too" % ("--dcp-size" if dcp_size is not None and not vllm
                       else "--dcp-rank" if dcp_rank is not None
                       else "--interleave"))
    if B and B % I:
        usage(PROG, "--interleave %d does not divide -B %d" % (I, B))
    g = ffi.new("struct kv_slot_geom *")
    t = ffi.new("struct kv_slot_table *")
    ids = None
    if B:
        ids = _table(block_table, mm, tok, comp, B * (DS if vllm else P * DS))
        g.block_size = g.kernel_block_size = B
        g.interleave = I
        g.virt = lib.KV_SLOT_VIRTUAL_KERNEL
        g.max_model_len = I64_MAX // 4
        t.ids = _ptr(ids)
        t.n_rows, t.n_cols = ids.shape
    run = (tok, comp, n_dec, P, DS, DR, B, k_only, g, t)
    flat = _vllm(run, sel) if vllm else _ascend(run, sel)
    odt = out_dtype(PROG, dtype)
    if odt is np.int32:
        for name, a in flat:
            if a is None:
                continue
            bad = (a < -2**31) | (a > I32_MAX)
            if bad.any():
                fail(PROG, "--dtype i32: %s holds %d, over 32 bits; use "
                     "--dtype i64" % (name, int(a.reshape(-1)[np.argmax(
                         bad.reshape(-1))])))
    out, ranks = {}, []
    glob = VLLM_GLOBAL if vllm else ASCEND_GLOBAL
    for name, a in flat:
        if a is not None and odt is np.int32:
            a = a.astype(odt)
        if name == "@rank":
            ranks.append({})
        elif name in glob and not ranks:
            out[name] = a
        else:
            ranks[-1][name] = a
    out["ranks"] = ranks
    return out


def _want(sel, name):
    return sel is None or name in sel


def _ascend(run, sel):
    tok, comp, n_dec, P, DS, DR, B, k_only, g, t = run
    e = new_err()
    pa = ffi.new("struct kv_pcp_ascend *")
    flat = []
    try:
        if lib.kv_pcp_ascend_split(_ptr(tok), _ptr(comp), len(tok), n_dec, P,
                                   0, pa, e) != 0:
            fail(PROG, err_text(e))
        if B:
            g.cp_world = P * DS
            g.cp_rank = 0
            _slots(g, t, tok, comp)
        n = len(tok)
        for name, p, m in (("pcp_tokens", pa.pcp_tokens, n),
                           ("num_pcp_pads", pa.num_pcp_pads, n),
                           ("pcp_unpad_mask", pa.unpad_mask, pa.n_padded),
                           ("pcp_allgather_restore_idx", pa.restore_idx,
                            pa.n_padded)):
            if _want(sel, name):
                flat.append((name, _vec(p, m)))
        for k in range(P):
            if k_only >= 0 and k != k_only:
                continue
            if k > 0:
                lib.kv_pcp_ascend_release(pa)
                if lib.kv_pcp_ascend_split(_ptr(tok), _ptr(comp), len(tok),
                                           n_dec, P, k, pa, e) != 0:
                    fail(PROG, err_text(e))
            flat.append(("@rank", None))
            npf = pa.n_reqs - pa.n_decodes
            fs = (("positions", pa.positions, pa.n_local),
                  ("q_head_idx", pa.q_head_idx, pa.n_q),
                  ("q_tail_idx", pa.q_tail_idx, pa.n_q),
                  ("kv_with_q_head_nomask_idx", pa.kv_head_nomask,
                   pa.n_head_nomask),
                  ("kv_with_q_head_mask_idx", pa.kv_head_mask, pa.n_q),
                  ("kv_with_q_tail_nomask_idx", pa.kv_tail_nomask,
                   pa.n_tail_nomask),
                  ("kv_with_q_tail_mask_idx", pa.kv_tail_mask, pa.n_q),
                  ("q_full_idx", pa.q_full_idx, 2 * pa.n_q),
                  ("attn_mask_seqlens", pa.attn_mask_seqlens, npf),
                  ("head_attn_nomask_seqlens", pa.head_attn_nomask_seqlens,
                   npf),
                  ("tail_attn_nomask_seqlens", pa.tail_attn_nomask_seqlens,
                   npf))
            if _want(sel, "rank"):
                flat.append(("rank", np.array(k, np.int64)))
            for name, p, m in fs:
                if _want(sel, name):
                    flat.append((name, _vec(p, m)))
            if B and _want(sel, "slot_mapping"):
                g.cp_rank = k * DS + DR
                gs = _slots(g, t, tok, comp)
                mask = _vec(pa.unpad_mask, pa.n_padded)
                pad = np.full(pa.n_padded, -1, np.int64)
                pad[mask != 0] = gs[:int((mask != 0).sum())]
                flat.append(("slot_mapping", pad))
    finally:
        lib.kv_pcp_ascend_release(pa)
    return flat


def _vllm(run, sel):
    tok, comp, n_dec, P, DS, DR, B, k_only, g, t = run
    e = new_err()
    pv = ffi.new("struct kv_pcp_vllm *")
    flat = []
    try:
        if lib.kv_pcp_vllm_split(_ptr(tok), _ptr(comp), len(tok), n_dec, P,
                                 DS, pv, e) != 0:
            fail(PROG, err_text(e))
        m = P * pv.padded
        sm = None
        if B:
            g.cp_world = DS
            g.cp_rank = DR
            gs = _slots(g, t, tok, comp)
            gi = _vec(pv.gather_idx, m)
            wm = _vec(pv.write_mask, m)
            sm = np.full(m, -1, np.int64)
            sm[wm != 0] = gs[gi[wm != 0]]
        per_rank = _vec(pv.per_rank, P)
        for name, a in (("num_tokens_per_rank", per_rank),
                        ("padded_gather_idx", _vec(pv.gather_idx, m)),
                        ("gathered_kv_write_mask", _vec(pv.write_mask, m)),
                        ("hidden_restore_idx",
                         _vec(pv.restore_idx, pv.n_tokens))):
            if _want(sel, name):
                flat.append((name, a))
        if sm is not None and _want(sel, "slot_mapping"):
            flat.append(("slot_mapping", sm))
        row_start = _vec(pv.row_start, P + 1)
        row_req = _vec(pv.row_req, pv.n_rows)
        row_pos = _vec(pv.row_pos, pv.n_rows)
        row_len = _vec(pv.row_len, pv.n_rows)
        positions = _vec(pv.positions, int(per_rank.sum()))
        for k in range(P):
            if k_only >= 0 and k != k_only:
                continue
            r0, r1 = int(row_start[k]), int(row_start[k + 1])
            t0 = int(per_rank[:k].sum())
            nk = int(per_rank[k])
            lens = row_len[r0:r1]
            reqs = row_req[r0:r1]
            qsl = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
            c = np.zeros(len(reqs), np.int64) if comp is None else comp[reqs]
            sl = c + row_pos[r0:r1] + lens
            ri = np.repeat(reqs, lens).astype(np.int64)
            flat.append(("@rank", None))
            if _want(sel, "rank"):
                flat.append(("rank", np.array(k, np.int64)))
            if _want(sel, "positions"):
                flat.append(("positions", positions[t0:t0 + nk].copy()))
            if _want(sel, "req_indices"):
                flat.append(("req_indices", ri))
            if r1 == r0:
                # MRV2 partition_batch gives a rank without tokens one
                # empty row of request 0, its sequence length zeroed
                reqs = np.zeros(1, np.int64)
                qsl = np.zeros(2, np.int64)
                sl = np.zeros(1, np.int64)
            for name, a in (("row_req_ids", reqs), ("query_start_loc", qsl),
                            ("seq_lens", sl)):
                if _want(sel, name):
                    flat.append((name, np.ascontiguousarray(a, np.int64)))
    finally:
        lib.kv_pcp_vllm_release(pv)
    return flat
