"""kvslot cplens in-process: per-rank KV lengths under interleaving
(libkv's kv_slot_cp_local_lens, vLLM's get_dcp_local_seq_lens)."""
import numpy as np

from ._core import ffi, lib, usage, fail, int_opt, max_mem
from ._kvslot_step import req_list, out_dtype, as_dtype

I32_MAX = 2**31 - 1
SIZE_MAX = 2**64 - 1


parse_max_mem = max_mem       # --max-mem as every program reads it


def mem_check(prog, need, max_mem, what):
    """Refused (exit 1) when need bytes pass --max-mem, as the programs
    refuse it; need saturates at SIZE_MAX."""
    if need <= max_mem:
        return
    if need >= SIZE_MAX:
        fail(prog, "%s needs more bytes than the address space holds" % what)
    fail(prog, "%s needs %d bytes, more than --max-mem %d; raise --max-mem"
         % (what, need, max_mem))


def cplens(cp_size=None, interleave=1, seq_lens=None, cp_rank=None,
           max_mem=None, dtype="i64"):
    """kvslot cplens --cp-size W --seq-lens L0,L1,.. [--interleave I]
    [--cp-rank R]: {"cp_local_seq_lens": [n_reqs, W]} (R: [n_reqs], that
    rank's column)."""
    prog = "kvslot cplens"
    for v, name in ((cp_size, "--cp-size=W"), (seq_lens, "--seq-lens=L0,L1,..")):
        if v is None:
            usage(prog, "missing option " + name)
    W = int_opt(prog, "--cp-size", cp_size, 1, 1 << 16)
    I = 1 if interleave is None else \
        int_opt(prog, "--interleave", interleave, 1, I32_MAX)
    R = -1 if cp_rank is None else int_opt(prog, "--cp-rank", cp_rank, 0)
    if R >= W:
        usage(prog, "--cp-rank %d: expected below --cp-size %d" % (R, W))
    lens = req_list(prog, "--seq-lens", seq_lens)
    if len(lens) == 0:
        usage(prog, "--seq-lens: no requests")
    mm = parse_max_mem(prog, max_mem)
    cells = len(lens) * W
    shown = len(lens) if R >= 0 else cells
    mem_check(prog, min(cells * 8 + shown * 21, SIZE_MAX), mm,
              "the table of per-rank lengths")
    out = np.zeros((len(lens), W), np.int64)
    p = ffi.cast("int64_t *", ffi.from_buffer(out))
    for i, L in enumerate(lens):
        lib.kv_slot_cp_local_lens(int(L), W, I, p + i * W)
    res = out[:, R].copy() if R >= 0 else out
    return as_dtype(prog, {"cp_local_seq_lens": res}, out_dtype(prog, dtype))
