"""kvslot-map-ascend.py - kvslot map's default context-parallel convention
against vllm-ascend 0.23.0.post1's own BlockTable
(scripts/crosscheck/kvslot-map-ascend.sh).

vllm-ascend does not import without an NPU (torch_npu), so its release is
fetched with 'pip download --no-deps' (stage_common.release_source) and
the class BlockTable of vllm_ascend/worker/block_table.py is compiled
unchanged and run on the CPU: its __init__, add_row (with its physical to
logical block conversion for kernel blocks) and compute_slot_mapping, which
under context parallelism is _compute_pcp_dcp_slot_mapping (PCP x DCP
ranks).  What is stood in for, all of it infrastructure:
  - CpuGpuBuffer (vllm.v1.utils): a CPU tensor with its numpy view, whose
    "gpu" side is a second CPU tensor;
  - get_pcp_group / get_dcp_group: groups of the case's world sizes, with
    the rank under test;
  - cdiv, PAD_SLOT_ID and the KV-cache spec classes (the spec classes are
    only named in branches a group of None never takes), and the Triton
    slot-mapping kernel of the branch without context parallelism (never
    taken: every case has PCP x DCP > 1).
For random steps (PCP 1, 2, 4 and DCP 1, 2, 4 with at least two ranks in
all, block sizes 1 to 64, kernel blocks dividing them, every interleave
dividing the block, one to five requests with computed and scheduled
tokens) the slot mapping of every rank (PCP rank q, DCP rank d) must equal
row q*D + d of 'kvslot map --all-ranks' given --pcp-size and --cp-size and
no --cp-convention (the default), and the output of 'kvslot map --pcp-rank q
--cp-rank d' for one rank a case.

usage: python kvslot-map-ascend.py KVSLOT [--cases N] [--seed S]
Prints the failing cases and 'N passed, M failed'.
"""
import argparse
import os
import random
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_common import load_defs, release_source, run_cases, run_kvslot  # noqa: E402

VA, VERSION = "vllm-ascend", "0.23.0.post1"


class CpuGpuBuffer:
    """vllm.v1.utils.CpuGpuBuffer on a host without a device."""

    def __init__(self, *size, dtype, device, pin_memory=False, with_numpy=True):
        self.cpu = torch.zeros(*size, dtype=dtype)
        self.gpu = torch.zeros_like(self.cpu)
        if with_numpy:
            self.np = self.cpu.numpy()

    def copy_to_gpu(self, n=None):
        cpu, gpu = (self.cpu, self.gpu) if n is None else (self.cpu[:n], self.gpu[:n])
        return gpu.copy_(cpu)


class Group:
    def __init__(self, world, rank):
        self.world_size, self.rank_in_group = world, rank


GROUPS = {}


class NotASpec:
    pass


def load():
    src = release_source(VA, VERSION, "vllm_ascend/worker/block_table.py")
    env = {"np": np, "torch": torch, "CpuGpuBuffer": CpuGpuBuffer,
           "cdiv": lambda a, b: -(-a // b), "PAD_SLOT_ID": -1,
           "get_pcp_group": lambda: GROUPS["pcp"], "get_dcp_group": lambda: GROUPS["dcp"],
           "KVCacheGroupSpec": NotASpec, "MambaSpec": NotASpec,
           "UniformTypeKVCacheSpecs": NotASpec, "_compute_slot_mapping_kernel": None,
           "get_total_cp_world_size": None}
    return load_defs(src, ["BlockTable"], env, "vllm_ascend/worker/block_table.py").BlockTable


def gen(rng):
    while True:
        P, D = rng.choice((1, 2, 4)), rng.choice((1, 2, 4))
        if P * D > 1:
            break
    B = rng.choice((1, 2, 4, 8, 16, 64))
    divs = [x for x in range(1, B + 1) if B % x == 0]
    K = rng.choice(divs) if rng.random() < 0.3 else B
    I = rng.choice(divs)
    n = rng.randint(1, 5)
    comp = [rng.choice((0, rng.randint(0, 50), rng.randint(0, 400))) for _ in range(n)]
    sch = [rng.choice((1, rng.randint(1, 12), rng.randint(1, 200))) for _ in range(n)]
    V = B * P * D
    cols = max(-(-(c + s) // V) for c, s in zip(comp, sch)) + rng.randint(0, 2)
    ids = rng.sample(range(1, 20000), n * cols)
    bt = [ids[r * cols:(r + 1) * cols] for r in range(n)]
    return {"P": P, "D": D, "B": B, "K": K, "I": I, "comp": comp, "sch": sch, "bt": bt}


def upstream(BlockTable, c, q, d):
    """vllm-ascend's slot mapping of PCP rank q, DCP rank d."""
    P, D, B, K = c["P"], c["D"], c["B"], c["K"]
    n, cols = len(c["bt"]), len(c["bt"][0])
    GROUPS["pcp"], GROUPS["dcp"] = Group(P, q), Group(D, d)
    ntok = sum(c["sch"])
    t = BlockTable(B, n, cols, ntok + 16, False, torch.device("cpu"), kernel_sizes=[K],
                   cp_kv_cache_interleave_size=c["I"])
    for r, row in enumerate(c["bt"]):
        t.add_row(row, r)
    qsl = torch.tensor(np.concatenate([[0], np.cumsum(c["sch"])]), dtype=torch.int32)
    pos = torch.tensor(np.concatenate([np.arange(a, a + s) for a, s in zip(c["comp"], c["sch"])]),
                       dtype=torch.int64)
    t.compute_slot_mapping(n, qsl, pos)
    return t.slot_mapping.cpu[:ntok].tolist()


def check(BlockTable, kvslot, c, tmp, rng):
    path = os.path.join(tmp, "bt.txt")
    with open(path, "w") as f:
        for row in c["bt"]:
            f.write(" ".join(map(str, row)) + "\n")
    base = ["map", "-B", str(c["B"]), "--block-table", path,
            "--scheduled", ",".join(map(str, c["sch"])),
            "--computed", ",".join(map(str, c["comp"])),
            "--pcp-size", str(c["P"]), "--cp-size", str(c["D"]), "--interleave", str(c["I"]),
            "--fields", "slot_mapping", "-f", "text"]
    if c["K"] != c["B"]:
        base += ["--kernel-block-size", str(c["K"])]
    got, err = run_kvslot(kvslot, base + ["--all-ranks"])
    if err:
        return err
    rows = got.get("slot_mapping", [])
    if len(rows) != c["P"] * c["D"]:
        return "%d rows, expected %d ranks" % (len(rows), c["P"] * c["D"])
    for q in range(c["P"]):
        for d in range(c["D"]):
            want = upstream(BlockTable, c, q, d)
            if rows[q * c["D"] + d] != want:
                return "pcp rank %d dcp rank %d: kvslot %s, vllm-ascend %s" % (
                    q, d, rows[q * c["D"] + d], want)
    q, d = rng.randrange(c["P"]), rng.randrange(c["D"])
    one, err = run_kvslot(kvslot, base + ["--pcp-rank", str(q), "--cp-rank", str(d)])
    if err:
        return err
    if one.get("slot_mapping") != [upstream(BlockTable, c, q, d)]:
        return "--pcp-rank %d --cp-rank %d: kvslot %s" % (q, d, one.get("slot_mapping"))
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=12)
    a = ap.parse_args()
    BlockTable = load()
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ok, bad = run_cases(a.cases, lambda: gen(rng),
                            lambda c: check(BlockTable, a.kvslot, c, tmp, rng),
                            lambda c: "P=%d D=%d B=%d K=%d I=%d computed=%s scheduled=%s" % (
                                c["P"], c["D"], c["B"], c["K"], c["I"], c["comp"], c["sch"]))
    print("kvslot map (default --cp-convention) against vllm-ascend %s "
          "BlockTable._compute_pcp_dcp_slot_mapping:" % VERSION)
    print("%d passed, %d failed" % (ok, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
