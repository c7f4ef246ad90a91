"""pcp_vllm.py - kvslot pcp --layout vllm against vLLM's own model-runner-V2
PCPManager (vllm/v1/worker/gpu/pcp_manager.py), imported from the installed
release and run unmodified on the CPU (scripts/crosscheck/kvslot-pcp.sh).

For each random batch and each PCP rank, a PCPManager is built as
maybe_build_pcp_manager builds it (shard_decode_requests as vLLM's
ParallelConfig.pcp_shard_decode_requests gives it: PCP without DCP) and
its partition_batch splits a global InputBatch made by InputBatch.make_dummy
and filled with the batch (scheduled and computed tokens, positions,
is_prefilling), at CUDAGraphMode.NONE.  Compared: num_tokens_per_rank (each
rank's local token count), padded_gather_idx, gathered_kv_write_mask and
hidden_restore_idx (the manager's), and per rank positions, req_indices,
row_req_ids, query_start_loc and seq_lens of the local batch.

The slot mapping: MRV2 computes the global batch's slots in the Triton
kernel _compute_slot_mappings_kernel (vllm/v1/worker/gpu/block_table.py),
run here unmodified under Triton's CPU interpreter as
BlockTables.compute_slot_mappings launches it (vllm_map.mrv2_slots: one
DCP-sharded group, the interpreter's masks taken as booleans); the
manager's own _convert_to_gathered_slot_mappings (torch) then gathers them.

Stood in for: the platform (vllm_host.py), the interpreter's mask dtype
(vllm_map.py) and, there being no device,
pinned host memory (vllm.utils.torch_utils.PIN_MEMORY set False);
nothing in PCPManager.

usage: python pcp_vllm.py KVSLOT [--cases N] [--seed S]
Prints the failing cases and 'N passed, M failed'.
"""
import argparse
import dataclasses
import os
import random
import subprocess
import sys
import tempfile

import vllm_map  # noqa: F401  (TRITON_INTERPRET, the platform)
from vllm_map import mrv2_slots
from stage_common import run_cases, run_kvslot

import numpy as np  # noqa: E402
import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import CUDAGraphMode  # noqa: E402
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor  # noqa: E402
from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers  # noqa: E402
from vllm.v1.worker.gpu.pcp_manager import PCPManager  # noqa: E402
import vllm.utils.torch_utils  # noqa: E402

# No device: host memory is not pinned (async_tensor_h2d reads this flag,
# which the platform stand-in would otherwise leave set).
vllm.utils.torch_utils.PIN_MEMORY = False

CPU = torch.device("cpu")


def global_batch(tok, comp, nd):
    n, T = len(tok), int(sum(tok))
    b = InputBatch.make_dummy(n, T, InputBuffers(n, T, CPU), is_padding=False)
    sched = np.array(tok, dtype=np.int32)
    computed = np.array(comp, dtype=np.int32)
    qsl = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sched, out=qsl[1:])
    pos = np.concatenate([c + np.arange(t) for c, t in zip(computed, sched)])
    prefilling = np.arange(n) >= nd
    # a prefill's prompt ends after this step's tokens; a decode's before
    prefill_len = np.where(prefilling, computed + sched + 1, computed)
    return dataclasses.replace(
        b, num_scheduled_tokens=sched, query_start_loc_np=qsl,
        query_start_loc=torch.from_numpy(qsl.copy()),
        positions=torch.from_numpy(pos.astype(np.int64)),
        input_ids=torch.arange(T, dtype=torch.int32),
        num_computed_tokens_np=computed, prefill_len_np=prefill_len.astype(np.int32),
        num_computed_prefill_tokens_np=np.minimum(computed, prefill_len).astype(np.int32),
        is_prefilling_np=prefilling, has_prefill=bool(prefilling.any()),
        decode_graph_eligible=not bool(prefilling.any()),
        seq_lens_cpu_upper_bound=torch.from_numpy((computed + sched).astype(np.int32)))


def upstream(c, k):
    P, D, I = c["P"], c["D"], c["I"]
    tok = c["tok"]
    n, T = len(tok), sum(tok)
    m = PCPManager(pcp_world_size=P, pcp_rank=k, device=CPU,
                   shard_decode_requests=(P > 1 and D == 1),
                   max_num_reqs=n, max_num_tokens=T, block_tables=None,
                   dcp_world_size=D, dcp_rank=c["dr"], cp_interleave=I)
    g = global_batch(tok, c["comp"], c["nd"])
    desc = BatchExecutionDescriptor(cg_mode=CUDAGraphMode.NONE, num_tokens=T, num_reqs=None)
    loc = m.partition_batch(g, desc)
    nr, nt = loc.num_reqs, loc.num_tokens
    out = {"padded_gather_idx": m._padded_gather_idx.tolist(),
           "gathered_kv_write_mask": m._gathered_kv_write_mask.int().tolist(),
           "hidden_restore_idx": m._hidden_restore_idx.tolist(),
           "num_tokens": nt,
           "positions": loc.positions[:nt].tolist(),
           "req_indices": np.repeat(loc.idx_mapping_np[:nr],
                                    loc.num_scheduled_tokens[:nr]).tolist(),
           "row_req_ids": loc.idx_mapping_np[:nr].tolist(),
           "query_start_loc": loc.query_start_loc_np[:nr + 1].tolist(),
           "seq_lens": loc.seq_lens[:nr].tolist()}
    if c["B"] and k == 0:
        qsl = [0]
        for t in tok:
            qsl.append(qsl[-1] + t)
        slots = mrv2_slots(c["bt"], qsl, g.positions.tolist(), c["B"], D, c["dr"], I)
        out["slot_mapping"] = m._convert_to_gathered_slot_mappings(
            torch.tensor([slots], dtype=torch.int64))[0].tolist()
    return out


def gen(rng):
    """Decodes first (one token, or up to three as with speculative
    decoding, with context), then prefills (fresh or continued)."""
    P = rng.choice((2, 2, 3, 4, 8))
    D = rng.choice((1, 1, 2, 4))
    nd = rng.choice((0, 0, 1, 2, 3, 5))
    npf = rng.choice((0, 1, 1, 2, 3, 4)) if nd else rng.choice((1, 1, 2, 3, 4))
    tok = [rng.choice((1, 1, 1, 2, 3)) for _ in range(nd)]
    for _ in range(npf):
        tok.append(rng.choice((1, rng.randint(1, 2 * P), rng.randint(1, 4 * P),
                               rng.randint(1, 40), rng.randint(1, 300))))
    comp = [rng.randint(1, 200) for _ in range(nd)] + \
        [rng.choice((0, 0, rng.randint(1, 100))) for _ in range(npf)]
    c = {"P": P, "D": D, "I": 1, "B": 0, "dr": 0, "tok": tok, "comp": comp, "nd": nd}
    if rng.random() < 0.5:
        B = rng.choice((1, 2, 4, 8, 16, 64))
        divs = [d for d in range(1, B + 1) if B % d == 0]
        c["B"], c["I"], c["dr"] = B, rng.choice(divs), rng.randrange(D)
        V = B * D
        need = [-(-(a + t) // V) for a, t in zip(comp, tok)]
        cols = max(need) + rng.randint(0, 2)
        ids = rng.sample(range(1, 5000), len(tok) * cols)
        c["bt"] = [[ids[r * cols + j] if j < need[r] else 0 for j in range(cols)]
                   for r in range(len(tok))]
    elif D > 1:
        c["I"] = rng.choice((1, 2, 4))
    return c


RANKED = ("positions", "req_indices", "row_req_ids", "query_start_loc", "seq_lens")


def check(kvslot, c, tmp):
    P, D = c["P"], c["D"]
    args = ["pcp", "--layout", "vllm", "--pcp-size", str(P),
            "--tokens", ",".join(map(str, c["tok"])),
            "--computed", ",".join(map(str, c["comp"])),
            "--decodes", str(c["nd"]), "-f", "text"]
    if c["B"]:
        path = os.path.join(tmp, "bt.txt")
        with open(path, "w") as f:
            for row in c["bt"]:
                f.write(" ".join(map(str, row)) + "\n")
        args += ["-B", str(c["B"]), "--block-table", path, "--interleave", str(c["I"])]
    if D > 1:
        args += ["--dcp-size", str(D)]
        if c["B"]:
            args += ["--dcp-rank", str(c["dr"])]
    got, err = run_kvslot(kvslot, args)
    if err:
        return err
    per_rank = []
    for k in range(P):
        want = upstream(c, k)
        per_rank.append(want["num_tokens"])
        if k == 0:
            for f in ("padded_gather_idx", "gathered_kv_write_mask", "hidden_restore_idx") + \
                    (("slot_mapping",) if c["B"] else ()):
                if got.get(f, [[]])[0] != want[f]:
                    return "%s: kvslot %s, vLLM %s" % (f, got.get(f), want[f])
        for f in RANKED:
            g = got.get(f, [])
            g = g[k] if k < len(g) else None
            if g != want[f]:
                return "rank %d %s: kvslot %s, vLLM %s" % (k, f, g, want[f])
    if got.get("num_tokens_per_rank", [[]])[0] != per_rank:
        return "num_tokens_per_rank: kvslot %s, vLLM %s" % (got.get("num_tokens_per_rank"), per_rank)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=26)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ok, bad = run_cases(
            a.cases, lambda: gen(rng), lambda c: check(a.kvslot, c, tmp),
            lambda c: "P=%d D=%d I=%d B=%d decodes=%d tokens=%s computed=%s"
            % (c["P"], c["D"], c["I"], c["B"], c["nd"], c["tok"], c["comp"]))
    print("kvslot pcp --layout vllm against vLLM %s PCPManager (model runner V2), "
          "its slot-mapping kernel under TRITON_INTERPRET=1:" % vllm.__version__)
    print("%d passed, %d failed" % (ok, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
