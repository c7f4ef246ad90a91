"""kvslot-map-groups.py - 'kvslot map' with KV-cache groups against vLLM
0.33.0's own MultiGroupBlockTable (vllm/v1/worker/block_table.py), run by
scripts/crosscheck/kvslot-map-groups.sh.

What runs unmodified: MultiGroupBlockTable and its BlockTables (add_row,
commit_block_table, compute_slot_mapping: the Triton kernel
ComputeSlotMappingKernel under Triton's CPU interpreter), one BlockTable a
group with the group's block size, and SlotMappingMode.NONE for a Mamba
group, as GPUModelRunner.may_reinitialize_input_batch builds them.
The groups and their block sizes are 'kvslot groups -f json' (held to
vLLM's own builder by the kvslot-groups part).

Replaced (infrastructure): the platform (vllm_host's bare Platform
reporting "cpu"); pinned memory off (vllm.v1.utils.PIN_MEMORY, a platform
probe); the interpreter's 0/1 masks taken as booleans (vllm_map.py's
_BoolMasks); the runner's positions (num_computed + arange per request,
the rule kvslot-map holds kvslot map's positions to) are made here.

Cases: random --kv-groups specs (full, sliding, chunked local, Mamba and
MLA layers, random -B and kernel blocks) and every config.json given, each
with a random step (1-5 requests, fresh, chunked and decode rows) and a
random block table a group; every group's slot_mapping.gK and
block_table.gK equal vLLM's, and slot_mapping of a Mamba group is refused.
Prints 'N passed, M failed'.

usage: python kvslot-map-groups.py KVSLOT CASES SEED [CONFIG...]
"""
import json
import os
import random
import subprocess
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_map  # noqa: E402,F401  (the platform and the interpreter's masks)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import vllm.v1.utils as vutils  # noqa: E402
from vllm.v1.worker.block_table import MultiGroupBlockTable, SlotMappingMode  # noqa: E402

vutils.PIN_MEMORY = False
P = F = SKIPPED = 0


def check(ok, what):
    global P, F
    if ok:
        P += 1
    else:
        F += 1
        print("FAIL " + what, flush=True)


def text_fields(out):
    """kvslot's text output: name -> list of rows (each a list of ints)."""
    d = {}
    for ln in out.splitlines():
        name, _, vals = ln.partition(":")
        d.setdefault(name, []).append([int(x) for x in vals.split()])
    return d


def random_spec(rng):
    kinds = ["full", "sliding=%d" % rng.choice((4, 16, 64, 1024)),
             "chunked=%d" % rng.choice((16, 64, 256)), "mla",
             "mamba=%d" % rng.choice((4096, 65536, 1097728))]
    pick = rng.sample(kinds, rng.randint(1, 3))
    if all(p.startswith("mamba") for p in pick):
        pick.append("full")
    body = ",".join("%d*%s" % (rng.randint(1, 3), p) for p in pick)
    return "%d*(%s)" % (rng.randint(1, 3), body)


def vllm_step(groups, tables, comp, sched):
    """MultiGroupBlockTable's block tables and slot mappings for one step."""
    n = len(sched)
    blocks = [g["block_size"] for g in groups]
    cols = [max(len(t[r]) for r in range(n)) for t in tables]
    modes = [SlotMappingMode.NONE if g["kind"] == "mamba" else SlotMappingMode.TOKEN_TO_KV_SLOT
             for g in groups]
    mg = MultiGroupBlockTable(max_num_reqs=n, max_num_batched_tokens=sum(sched) + 1,
                              pin_memory=False, device=torch.device("cpu"),
                              block_sizes=blocks, max_num_blocks=cols,
                              slot_mapping_modes=modes)
    for r in range(n):
        mg.add_row(tuple(t[r] for t in tables), r)
    mg.commit_block_table(n)
    qsl = torch.tensor(np.concatenate([[0], np.cumsum(sched)]), dtype=torch.int32)
    pos = torch.tensor([c + i for c, s in zip(comp, sched) for i in range(s)], dtype=torch.int64)
    mg.compute_slot_mapping(n, qsl, pos)
    t = len(pos)
    return ([bt.slot_mapping.gpu[:t].tolist() for bt in mg.block_tables],
            [bt.block_table.np[:n, :c].tolist() for bt, c in zip(mg.block_tables, cols)])


def one_case(kvslot, d, rng, what, gopts):
    out = subprocess.run([kvslot, "groups", "-f", "json"] + gopts,
                         capture_output=True, text=True)
    if out.returncode != 0:
        global SKIPPED
        SKIPPED += 1    # a spec vLLM's builder refuses (the kvslot-groups part)
        return
    groups = json.loads(out.stdout)["groups"]
    n = rng.randint(1, 5)
    comp = [rng.choice((0, 0, rng.randint(0, 300))) for _ in range(n)]
    sched = [rng.choice((1, rng.randint(1, 200))) for _ in range(n)]
    tables, files = [], []
    for k, g in enumerate(groups):
        B = g["block_size"]
        t = []
        for r in range(n):
            need = (comp[r] + sched[r] + B - 1) // B if g["kind"] != "mamba" else 1
            t.append([rng.randint(1, 1 << 20) for _ in range(need + rng.randint(0, 2))])
        width = max(len(x) for x in t)
        t = [x + [0] * (width - len(x)) for x in t]
        tables.append(t)
        f = os.path.join(d, "bt%d.txt" % k)
        with open(f, "w") as fh:
            fh.write("".join(" ".join(map(str, row)) + "\n" for row in t))
        files.append("g%d=%s" % (k, f))
    att = [k for k, g in enumerate(groups) if g["kind"] != "mamba"]
    fields = ",".join(["slot_mapping"] + ["block_table.g%d" % k for k in range(len(groups))])
    args = [kvslot, "map"] + gopts + ["--scheduled", ",".join(map(str, sched)),
                                      "--computed", ",".join(map(str, comp)),
                                      "--fields", fields, "-f", "text"]
    for f in files:
        args += ["--block-table", f]
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode != 0:
        check(False, "%s: kvslot map: %s" % (what, res.stderr.strip()))
        return
    ours = text_fields(res.stdout)
    slots, bts = vllm_step(groups, tables, comp, sched)
    for k in range(len(groups)):
        if k in att:
            check(ours.get("slot_mapping.g%d" % k) == [slots[k]],
                  "%s: slot_mapping.g%d = vLLM's (%s, block %d)"
                  % (what, k, groups[k]["kind"], groups[k]["block_size"]))
        check(ours.get("block_table.g%d" % k) == bts[k],
              "%s: block_table.g%d = vLLM's" % (what, k))
    for k, g in enumerate(groups):
        if g["kind"] == "mamba":
            r = subprocess.run(args[:-4] + ["--fields", "slot_mapping.g%d" % k, "-f", "text"],
                               capture_output=True, text=True)
            check(r.returncode == 2 and not r.stdout,
                  "%s: slot_mapping.g%d of a Mamba group refused" % (what, k))


def main():
    kvslot, cases, seed, configs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as d:
        for c in range(cases):
            spec = random_spec(rng)
            gopts = ["--kv-groups", spec, "-B", str(rng.choice((4, 8, 16, 32))),
                     "--kernel-block", str(rng.choice((4, 8, 16))),
                     "--max-model-len", str(rng.choice((1024, 4096, 262144)))]
            one_case(kvslot, d, rng, "case %d (%s)" % (c, " ".join(gopts)), gopts)
        for cfg in configs:
            for c in range(3):
                gopts = ["--model-config", cfg, "--max-model-len", "4096"]
                one_case(kvslot, d, rng, "%s step %d" % (os.path.basename(cfg), c), gopts)
    print("%d specs refused by the builder, as vLLM's (not mapped)" % SKIPPED)
    print("%d passed, %d failed" % (P, F))
    return 1 if F else 0


if __name__ == "__main__":
    sys.exit(main())
