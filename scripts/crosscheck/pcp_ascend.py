"""pcp_ascend.py - kvslot pcp --layout ascend against vllm-ascend's own
PCPManager (vllm_ascend/worker/pcp_utils.py) and BlockTable
(vllm_ascend/worker/block_table.py) of the installed release
(scripts/crosscheck/kvslot-pcp.sh).

vllm-ascend does not import without an NPU (torch_npu), so the two classes
are taken from the installed package's source files as they are (ast: the
class definitions, compiled unchanged) and run on the CPU.  What is stood in
for, all of it infrastructure:
  - CpuGpuBuffer (vllm.v1.utils, which is not installed here): a CPU tensor
    with its numpy view, whose "gpu" side is a second CPU tensor;
  - VllmConfig: an object holding the attributes PCPManager.__init__ and
    generate_pcp_metadata read (no speculative decoding, max_num_seqs,
    max_num_batched_tokens, hf_config.model_type "llama" so no hybrid
    attention, use_mla False, cp_kv_cache_interleave_size);
  - the input batch (NPUInputBatch): an object holding
    num_computed_tokens_cpu, the one attribute generate_pcp_metadata reads;
  - AscendPrefillContextParallelMetadata (vllm_ascend.attention.utils,
    imported inside generate_pcp_metadata): a plain attribute holder;
  - get_pcp_group / get_dcp_group: BlockTable.__init__ asks them for the
    world sizes; the case's sizes and ranks are set on the object after.
The model runner's steps between the calls (model_runner_v1.py,
_prepare_inputs) are written out here: init_batch_info, then
update_tokens_for_pcp, positions = num_computed_tokens[req] + its pcp
positions, BlockTable.compute_slot_mapping on the unsplit batch,
get_padded_slot_mapping, generate_pcp_metadata with the per-rank query
lengths; the attention builder (attention_cp.py) takes the cumulative sums
of attn_mask_seqlens[0] and head/tail_attn_nomask_seqlens[1], which is what
kvslot prints.

usage: python pcp_ascend.py KVSLOT [--cases N] [--seed S]
Prints the failing cases and 'N passed, M failed'.
"""
import argparse
import ast
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import types
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from stage_common import run_cases, run_kvslot  # noqa: E402

spec = importlib.util.find_spec("vllm_ascend")
PKG = spec.submodule_search_locations[0]
VERSION = "?"
try:
    from importlib.metadata import version
    VERSION = version("vllm_ascend")
except Exception:  # noqa: BLE001
    pass


class CpuGpuBuffer:
    """vllm.v1.utils.CpuGpuBuffer on a host without a device: .cpu, .np
    (its numpy view) and .gpu (a second CPU tensor), copy_to_gpu."""

    def __init__(self, *size, dtype, device, pin_memory=False, with_numpy=True):
        self.cpu = torch.zeros(*size, dtype=dtype)
        self.gpu = torch.zeros_like(self.cpu)
        if with_numpy:
            self.np = self.cpu.numpy()

    def copy_to_gpu(self, n=None):
        cpu, gpu = (self.cpu, self.gpu) if n is None else (self.cpu[:n], self.gpu[:n])
        return gpu.copy_(cpu)


class Holder:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class NoGroup:
    world_size = 1
    rank_in_group = 0


def load_class(path, name, ns):
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), ns)
            return ns[name]
    raise SystemExit("no class %s in %s" % (name, path))


def load():
    ns = {"np": np, "torch": torch, "F": F, "TYPE_CHECKING": TYPE_CHECKING,
          "CpuGpuBuffer": CpuGpuBuffer, "VllmConfig": object, "NPUInputBatch": object,
          "cdiv": lambda a, b: -(-a // b),
          "get_pcp_group": NoGroup, "get_dcp_group": NoGroup}
    # generate_pcp_metadata imports its metadata class inside the function
    utils = types.ModuleType("vllm_ascend.attention.utils")
    utils.AscendPrefillContextParallelMetadata = Holder
    sys.modules["vllm_ascend.attention.utils"] = utils
    mgr = load_class(os.path.join(PKG, "worker", "pcp_utils.py"), "PCPManager", ns)
    bt = load_class(os.path.join(PKG, "worker", "block_table.py"), "BlockTable", ns)
    return mgr, bt


def config(P, D, I, max_tokens, max_reqs):
    return Holder(
        speculative_config=None,
        scheduler_config=Holder(max_num_batched_tokens=max_tokens, max_num_seqs=max_reqs),
        model_config=Holder(hf_config=Holder(model_type="llama"), use_mla=False),
        parallel_config=Holder(cp_kv_cache_interleave_size=I,
                               prefill_context_parallel_size=P,
                               decode_context_parallel_size=D))


def upstream(classes, c, k, dr):
    """Run vllm-ascend's code for PCP rank k (DCP rank dr) on case c as
    model_runner_v1._prepare_inputs drives it; returns kvslot's fields."""
    Mgr, BlockTable = classes
    P, D, I, B = c["P"], c["D"], c["I"], c["B"]
    tok = np.array(c["tok"], dtype=np.int32)
    comp = np.array(c["comp"], dtype=np.int32)
    n = len(tok)
    max_tokens = 8 * (int(tok.sum()) + 2 * P * n) + 64
    cfg = config(P, D, I, max_tokens, n)
    arange_np = np.arange(max_tokens * P * 2, dtype=np.int64)
    m = Mgr(P, k, D, dr, max_tokens * 2, n, torch.device("cpu"), cfg, False)
    m.init_batch_info(tok.copy(), n)
    sched = tok.copy()
    pcp_tokens, pos = m.update_tokens_for_pcp(sched, arange_np)
    pcp_tokens = np.array(pcp_tokens)
    total = int(pcp_tokens.sum())
    req_idx = np.repeat(np.arange(n), pcp_tokens)
    out = {"pcp_tokens": pcp_tokens.tolist(),
           "num_pcp_pads": m.num_pcp_pads_cpu[:n].tolist(),
           "pcp_unpad_mask": m.pcp_unpad_mask_cpu[:m.pcp_padded_tokens_length].astype(int).tolist(),
           "pcp_allgather_restore_idx": m.pcp_allgather_restore_idx.np[:total * P].tolist(),
           "positions": (comp[req_idx] + pos[:total]).tolist()}
    if B:
        bt = BlockTable(B, n, len(c["bt"][0]), max_tokens, False, torch.device("cpu"),
                        kernel_sizes=[B], cp_kv_cache_interleave_size=I)
        bt.pcp_world_size, bt.pcp_rank, bt.dcp_world_size, bt.dcp_rank = P, k, D, dr
        for r, row in enumerate(c["bt"]):
            bt.block_table.np[r, :len(row)] = row
        # the unsplit batch: positions computed + arange, before the split
        ureq = np.repeat(np.arange(n), tok)
        upos = comp[ureq] + np.concatenate([np.arange(t) for t in tok])
        bt.compute_slot_mapping(ureq, upos)
        ntok = int(tok.sum())
        sm = bt.slot_mapping.gpu[:max_tokens]
        sm.copy_(bt.slot_mapping.cpu[:max_tokens])
        padded = m.get_padded_slot_mapping(total, total, sm[:ntok].to(torch.int32))
        out["slot_mapping"] = padded[:total * P].tolist()
    meta, _ = m.generate_pcp_metadata(total, torch.from_numpy(pcp_tokens.astype(np.int32)),
                                      Holder(num_computed_tokens_cpu=comp), tok.copy(),
                                      torch.zeros((n, 4), dtype=torch.int32), n, n)
    if m.num_prefill_reqs:
        out["q_head_idx"] = meta.q_head_idx_tensor.tolist()
        out["q_tail_idx"] = meta.q_tail_idx_tensor.tolist()
        out["kv_with_q_head_nomask_idx"] = meta.kv_with_q_head_nomask_idx_tensor.tolist()
        out["kv_with_q_head_mask_idx"] = meta.kv_with_q_head_mask_idx_tensor.tolist()
        out["kv_with_q_tail_nomask_idx"] = meta.kv_with_q_tail_nomask_idx_tensor.tolist()
        out["kv_with_q_tail_mask_idx"] = meta.kv_with_q_tail_mask_idx_tensor.tolist()
        out["q_full_idx"] = meta.q_full_idx.tolist()
        out["attn_mask_seqlens"] = torch.cumsum(meta.attn_mask_seqlens[0], 0).tolist()
        out["head_attn_nomask_seqlens"] = torch.cumsum(meta.head_attn_nomask_seqlens[1], 0).tolist()
        out["tail_attn_nomask_seqlens"] = torch.cumsum(meta.tail_attn_nomask_seqlens[1], 0).tolist()
    else:
        for f in ("q_head_idx", "q_tail_idx", "kv_with_q_head_nomask_idx",
                  "kv_with_q_head_mask_idx", "kv_with_q_tail_nomask_idx",
                  "kv_with_q_tail_mask_idx", "q_full_idx", "attn_mask_seqlens",
                  "head_attn_nomask_seqlens", "tail_attn_nomask_seqlens"):
            out[f] = []
    return out, m.num_decode_reqs


def gen(rng):
    """A batch as vllm-ascend's runner sees it: decodes (one token, with
    context) first, then prefills, the first of more than one token (its
    init_batch_info calls every leading request of at most one token a
    decode)."""
    P = rng.choice((2, 2, 3, 4, 8))
    D = rng.choice((1, 1, 1, 2, 4))
    nd = rng.choice((0, 0, 1, 2, 3))
    npf = rng.choice((0, 1, 1, 2, 3, 4)) if nd else rng.choice((1, 1, 2, 3, 4))
    tok = [1] * nd
    for j in range(npf):
        lo = 2 if j == 0 else 1
        tok.append(rng.choice((lo, rng.randint(lo, 4 * P), rng.randint(lo, 40),
                               rng.randint(lo, 300))))
    comp = [rng.randint(1, 200) for _ in range(nd)] + \
        [rng.choice((0, 0, rng.randint(1, 100))) for _ in range(npf)]
    c = {"P": P, "D": D, "I": 1, "B": 0, "tok": tok, "comp": comp, "nd": nd}
    if rng.random() < 0.5:
        B = rng.choice((1, 2, 4, 8, 16, 64))
        divs = [d for d in range(1, B + 1) if B % d == 0]
        c["B"], c["I"] = B, rng.choice(divs)
        V = B * P * D
        need = [-(-(a + t) // V) for a, t in zip(comp, tok)]
        cols = max(need) + rng.randint(0, 2)
        ids = rng.sample(range(1, 5000), len(tok) * cols)
        c["bt"] = [[ids[r * cols + j] if j < need[r] else 0 for j in range(cols)]
                   for r in range(len(tok))]
    return c


GLOBAL = ("pcp_tokens", "num_pcp_pads", "pcp_unpad_mask", "pcp_allgather_restore_idx")
RANKED = ("positions", "q_head_idx", "q_tail_idx", "kv_with_q_head_nomask_idx",
          "kv_with_q_head_mask_idx", "kv_with_q_tail_nomask_idx", "kv_with_q_tail_mask_idx",
          "q_full_idx", "attn_mask_seqlens", "head_attn_nomask_seqlens",
          "tail_attn_nomask_seqlens")


def check(kvslot, classes, c, tmp, rng):
    P, D = c["P"], c["D"]
    args = ["pcp", "--pcp-size", str(P), "--tokens", ",".join(map(str, c["tok"])),
            "--computed", ",".join(map(str, c["comp"])), "-f", "text"]
    # kvslot's default decode count needs context (computed > 0), which
    # every generated decode has; half the cases say --decodes outright
    if rng.random() < 0.5:
        args += ["--decodes", str(c["nd"])]
    dr = 0
    if c["B"]:
        path = os.path.join(tmp, "bt.txt")
        with open(path, "w") as f:
            for row in c["bt"]:
                f.write(" ".join(map(str, row)) + "\n")
        dr = rng.randrange(D)
        args += ["-B", str(c["B"]), "--block-table", path, "--interleave", str(c["I"])]
        if D > 1:
            args += ["--dcp-size", str(D), "--dcp-rank", str(dr)]
    got, err = run_kvslot(kvslot, args)
    if err:
        return err
    for k in range(P):
        want, nd = upstream(classes, c, k, dr)
        if nd != c["nd"]:
            return "the generator's decodes %d, init_batch_info's %d" % (c["nd"], nd)
        if k == 0:
            for f in GLOBAL:
                if got.get(f, [[]])[0] != want[f]:
                    return "%s: kvslot %s, vllm-ascend %s" % (f, got.get(f), want[f])
        fields = RANKED + (("slot_mapping",) if c["B"] else ())
        for f in fields:
            g = got.get(f, [])
            g = g[k] if k < len(g) else None
            if g != want[f]:
                return "rank %d %s: kvslot %s, vllm-ascend %s" % (k, f, g, want[f])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=26)
    a = ap.parse_args()
    classes = load()
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ok, bad = run_cases(
            a.cases, lambda: gen(rng),
            lambda c: check(a.kvslot, classes, c, tmp, rng),
            lambda c: "P=%d D=%d I=%d B=%d tokens=%s computed=%s"
            % (c["P"], c["D"], c["I"], c["B"], c["tok"], c["comp"]))
    print("kvslot pcp --layout ascend against vllm-ascend %s PCPManager and BlockTable:"
          % VERSION)
    print("%d passed, %d failed" % (ok, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
