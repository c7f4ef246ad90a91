"""kvslot map / cplens against vLLM's own model-runner code
(scripts/crosscheck/kvslot-map.sh).

vLLM 0.33.0 computes the slot mapping only in Triton kernels (no numpy
form is left).  The V1 model runner's ComputeSlotMappingKernel.kernel
(vllm/v1/worker/block_table.py) runs here unmodified under Triton's CPU
interpreter (TRITON_INTERPRET=1: the kernel's body executed on CPU tensors),
launched as BlockTable.compute_slot_mapping launches it.  MRV2's
_compute_slot_mappings_kernel (vllm/v1/worker/gpu/block_table.py) runs
there too, launched as BlockTables.compute_slot_mappings launches it, on
every batch without PCP x DCP or the kernel-block layout (MRV2 shards by DCP
alone, on the allocation table); the interpreter evaluates ~ on a loaded
boolean in int8 and its load refuses such a mask, so its masked loads and
stores are given 0/1 integer masks as booleans (_BoolMasks; the kernel is
unchanged).  The hybrid kernel-block table
is vLLM's AttentionGroup.map_to_kernel_block_table (torch), the per-rank KV
lengths its get_dcp_local_seq_lens (torch).

usage: python vllm_map.py KVSLOT [--batches N] [--seed S]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "1"
# An empty CUDA_VISIBLE_DEVICES is what vllm.triton_utils takes for a host
# whose GPUs are not set up yet: it keeps the real triton (no placeholder).
os.environ["CUDA_VISIBLE_DEVICES"] = ""
# The platform: a bare Platform reporting "cpu" (vllm_host.py).
import vllm_host  # noqa: E402,F401
from stage_common import run_kvslot  # noqa: E402

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens  # noqa: E402
from vllm.v1.worker.block_table import ComputeSlotMappingKernel  # noqa: E402
from vllm.v1.worker.gpu.block_table import _compute_slot_mappings_kernel  # noqa: E402
import triton.runtime.interpreter as _tri  # noqa: E402


class _BoolMasks:
    """Triton's CPU interpreter, its masked loads and stores taking a mask
    of 0/1 integers as the booleans they are.  The interpreter evaluates
    ~x on a loaded i1 value in int8 (0/1), and its load refuses a mask that
    is not of numpy bool; on a GPU the same value is an i1.  Only masks of
    0 and 1 are converted; anything else is an error."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    @staticmethod
    def _mask(m):
        if m.dtype != bool:
            assert set(m.ravel().tolist()) <= {0, 1}, "mask not 0/1"
            m = m.astype(bool)
        return m

    def load(self, ptrs, mask, other, dtype):
        return self._real.load(ptrs, self._mask(mask), other, dtype)

    def store(self, ptrs, value, mask):
        return self._real.store(ptrs, value, self._mask(mask))


_tri._interpreter = _BoolMasks(_tri._interpreter)
from vllm.v1.worker.utils import AttentionGroup  # noqa: E402

PAD = -1


def v1_slots(bt, qsl, pos, B, W, rank, I):
    """V1 ComputeSlotMappingKernel.kernel, one program per request plus the
    padding program, as BlockTable.compute_slot_mapping launches it."""
    n = len(pos)
    table = torch.tensor(bt, dtype=torch.int32)
    out = torch.full((n,), 12345, dtype=torch.int64)
    ComputeSlotMappingKernel.kernel[(len(qsl),)](
        n, n, torch.tensor(qsl, dtype=torch.int32), torch.tensor(pos, dtype=torch.int64),
        table, table.stride(0), out,
        KV_CACHE_BLOCK_SIZE=B, TOTAL_CP_WORLD_SIZE=W, TOTAL_CP_RANK=rank,
        CP_KV_CACHE_INTERLEAVE_SIZE=I, PAD_ID=PAD,
        BLOCK_SIZE=ComputeSlotMappingKernel.triton_block_size)
    return out.tolist()


def mrv2_slots(bt, qsl, pos, B, W, rank, I, pad=5):
    """MRV2 _compute_slot_mappings_kernel, one KV cache group (sharded
    over DCP when W > 1, as an MLA group is), launched as
    BlockTables.compute_slot_mappings launches it: one program per request
    and one that pads the buffer's tail."""
    n = len(pos)
    table = torch.tensor(bt, dtype=torch.int32)
    out = torch.full((1, n + pad), 12345, dtype=torch.int64)
    _compute_slot_mappings_kernel[(1, len(qsl))](
        out.shape[1], torch.arange(len(qsl) - 1, dtype=torch.int64),
        torch.tensor(qsl, dtype=torch.int32), torch.tensor(pos, dtype=torch.int64),
        torch.tensor([table.data_ptr()], dtype=torch.uint64),
        torch.tensor([table.stride(0)], dtype=torch.int64),
        torch.tensor([B], dtype=torch.int32), torch.tensor([True]), torch.tensor([True]),
        out, out.stride(0), rank,
        CP_SIZE=W, CP_INTERLEAVE=I, PAD_ID=PAD, TRITON_BLOCK_SIZE=1024)
    got = out[0].tolist()
    assert got[n:] == [PAD] * pad, "the padding program left %s" % got[n:]
    return got[:n]


class GroupStandIn:
    """The attributes of an AttentionGroup that map_to_kernel_block_table
    reads (the runner sizes kernel_block_table and kernel_block_offsets)."""

    def __init__(self, B, K, rows, cols):
        self.kernel_block_size = K
        self.kv_cache_spec = type("Spec", (), {"block_size": B})()
        self.kernel_block_table = torch.zeros((1, rows, cols * (B // K)), dtype=torch.int32)
        self.kernel_block_offsets = torch.arange(B // K, dtype=torch.int32)
        self.kernel_block_stride = None


def kernel_table(bt, B, K):
    g = GroupStandIn(B, K, len(bt), len(bt[0]))
    return AttentionGroup.map_to_kernel_block_table(
        g, torch.tensor(bt, dtype=torch.int32)).tolist()


def gen_batch(rng):
    B = rng.choice((1, 2, 4, 8, 16, 32, 64))
    conv = rng.choice(("none", "none", "dcp", "dcp", "pcp-dcp"))
    P = D = 1
    if conv == "dcp":
        D = rng.choice((2, 3, 4, 8))
    elif conv == "pcp-dcp":
        P, D = rng.choice((2, 4)), rng.choice((1, 2, 4))
    W = P * D
    divs = [d for d in range(1, B + 1) if B % d == 0]
    I = rng.choice(divs)
    K = None
    if rng.random() < 0.35 and B > 1:
        K = rng.choice([d for d in divs if d < B])
    n = rng.randint(1, 6)
    comp = [rng.choice((0, 0, rng.randint(0, 3 * B * W), rng.randint(0, 40 * B))) for _ in range(n)]
    sch = [rng.choice((1, 1, rng.randint(1, 2 * B * W), rng.randint(1, 60))) for _ in range(n)]
    need = [-(-(c + s) // (B * W)) for c, s in zip(comp, sch)]
    cols = max(need) + rng.randint(0, 2)
    ids = rng.sample(range(1, 4000), n * cols)
    bt = [[ids[r * cols + j] if j < need[r] + rng.randint(0, 1) else 0 for j in range(cols)]
          for r in range(n)]
    vb = "physical"
    if K and (W == 1 or K % I == 0) and rng.random() < 0.5:
        vb = "kernel"
    return {"vb": vb, "B": B, "conv": conv, "P": P, "D": D, "W": W, "I": I, "K": K,
            "comp": comp, "sch": sch, "bt": bt}


def check_batch(kvslot, b, tmp):
    """vLLM 0.33.0 writes KV through allocation-block slot mappings: the
    kernels run on the allocation table with block size B (with hybrid
    blocks this equals kvslot's --virtual-block physical, its default).
    Older vLLM ran the same kernel on the kernel-block table with block size
    K: kvslot's --virtual-block kernel."""
    path = os.path.join(tmp, "bt.txt")
    with open(path, "w") as f:
        for row in b["bt"]:
            f.write(" ".join(map(str, row)) + "\n")
    args = ["map", "-B", str(b["B"]), "--block-table", path,
            "--scheduled", ",".join(map(str, b["sch"])),
            "--computed", ",".join(map(str, b["comp"])),
            "--all-ranks", "--fields", "slot_mapping,block_table", "-f", "text"]
    if b["W"] > 1 or b["I"] > 1:
        args += ["--interleave", str(b["I"])]
    if b["conv"] == "dcp":
        args += ["--cp-size", str(b["D"])]
    elif b["conv"] == "pcp-dcp":
        args += ["--cp-convention", "pcp-dcp", "--pcp-size", str(b["P"]), "--cp-size", str(b["D"])]
    if b["K"]:
        args += ["--kernel-block-size", str(b["K"]), "--virtual-block", b["vb"]]
    ks, err = run_kvslot(kvslot, args)
    qsl = [0]
    pos = []
    for c, s in zip(b["comp"], b["sch"]):
        qsl.append(qsl[-1] + s)
        pos += range(c, c + s)
    if b["vb"] == "kernel":
        # older vLLM: the kernel ran on the kernel-block table, block size K
        kt = kernel_table(b["bt"], b["B"], b["K"])
        want = [v1_slots(kt, qsl, pos, b["K"], b["W"], r, b["I"]) for r in range(b["W"])]
    else:
        want = [v1_slots(b["bt"], qsl, pos, b["B"], b["W"], r, b["I"]) for r in range(b["W"])]
    if err:
        return "vLLM writes %s; kvslot %s" % (want[0][:16], err), args
    if ks["slot_mapping"] != want:
        return "slot_mapping: vLLM %s, kvslot %s" % (want, ks["slot_mapping"]), args
    if b["conv"] != "pcp-dcp" and b["vb"] == "physical":
        # model runner V2: only DCP shards, on the allocation table
        mrv2 = [mrv2_slots(b["bt"], qsl, pos, b["B"], b["W"], r, b["I"]) for r in range(b["W"])]
        b["mrv2"] = True
        if ks["slot_mapping"] != mrv2:
            return "slot_mapping: vLLM MRV2 %s, kvslot %s" % (mrv2, ks["slot_mapping"]), args
    if b["K"]:
        kt = kernel_table(b["bt"], b["B"], b["K"])
        r = b["B"] // b["K"]
        for row, krow, orig in zip(ks["block_table"], kt, b["bt"]):
            used = max((j + 1 for j, x in enumerate(orig) if x), default=0) * r
            if row[:used] != krow[:used]:
                return "kernel block table: vLLM %s, kvslot %s" % (krow[:used], row[:used]), args
    return None, args


def check_cplens(kvslot, rng):
    W = rng.choice((1, 2, 3, 4, 8))
    I = rng.choice((1, 2, 4, 16, 64))
    lens = [rng.choice((0, 1, rng.randint(0, 3 * W * I), rng.randint(0, 5000)))
            for _ in range(rng.randint(1, 8))]
    want = get_dcp_local_seq_lens(torch.tensor(lens, dtype=torch.int32), dcp_size=W,
                                  dcp_rank=None, cp_kv_cache_interleave_size=I).tolist()
    rank = rng.randrange(W)
    one = get_dcp_local_seq_lens(torch.tensor(lens, dtype=torch.int32), dcp_size=W,
                                 dcp_rank=rank, cp_kv_cache_interleave_size=I).tolist()
    args = ["cplens", "--cp-size", str(W), "--seq-lens", ",".join(map(str, lens)),
            "--interleave", str(I), "-f", "text"]
    ks, err = run_kvslot(kvslot, args)
    if err:
        return "kvslot " + err, args
    if ks["cp_local_seq_lens"] != want:
        return "vLLM %s, kvslot %s" % (want, ks["cp_local_seq_lens"]), args
    ks, err = run_kvslot(kvslot, args + ["--cp-rank", str(rank)])
    got = [x for row in ks["cp_local_seq_lens"] for x in row] if ks else None
    if err or got != one:
        return "rank %d: vLLM %s, kvslot %s" % (rank, one, got or err), args
    return None, args


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--batches", type=int, default=2000)
    ap.add_argument("--cplens", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--show", type=int, default=5)
    o = ap.parse_args()
    print("vLLM %s (torch %s): V1 ComputeSlotMappingKernel and MRV2"
          " _compute_slot_mappings_kernel under TRITON_INTERPRET=1"
          ", map_to_kernel_block_table, get_dcp_local_seq_lens"
          % (vllm.__version__, torch.__version__.split("+")[0]), flush=True)
    rng = random.Random(o.seed)
    counts = {}
    shown = 0
    tmp = tempfile.mkdtemp(prefix="kvxmap")
    fails = 0
    toks = 0
    n_mrv2 = 0
    try:
        for i in range(o.batches):
            b = gen_batch(rng)
            toks += sum(b["sch"])
            kind = "map " + b["conv"] + (" hybrid-" + b["vb"] if b["K"] else "")
            diff, args = check_batch(o.kvslot, b, tmp)
            n_mrv2 += bool(b.get("mrv2"))
            c = counts.setdefault(kind, [0, 0])
            c[diff is not None] += 1
            if diff:
                fails += 1
                if shown < o.show:
                    shown += 1
                    print("FAIL batch %d (%s): %s" % (i, kind, diff))
                    print("  block table: %s" % b["bt"])
                    print("  kvslot %s" % " ".join(a if a != os.path.join(tmp, "bt.txt")
                                                   else "bt.txt" for a in args))
        for i in range(o.cplens):
            diff, args = check_cplens(o.kvslot, rng)
            c = counts.setdefault("cplens", [0, 0])
            c[diff is not None] += 1
            if diff:
                fails += 1
                if shown < o.show:
                    shown += 1
                    print("FAIL cplens %d: %s\n  kvslot %s" % (i, diff, " ".join(args)))
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    for k in sorted(counts):
        print("  %-22s %d passed, %d failed" % (k, counts[k][0], counts[k][1]))
    total = sum(c[0] + c[1] for c in counts.values())
    print("  %d slot-mapping batches (%d tokens, every rank; %d of them also through"
          " MRV2's _compute_slot_mappings_kernel), %d cplens cases"
          % (o.batches, toks, n_mrv2, o.cplens))
    print("%d passed, %d failed" % (total - fails, fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
