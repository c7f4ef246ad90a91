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
Under decode context parallelism (DCP) the rank's group is a stand-in
(vllm.v1.worker.block_table.get_dcp_group: world size and rank, what
BlockTable reads of it), and every attention group's slot mapping is
also held to MRV2's _compute_slot_mappings_kernel (vLLM's default model
runner, BlockTables with cp_size the DCP world; vllm_map.mrv2_slots)
where its slots fit int32: that kernel multiplies the int32 block id by
the block size in int32, so a slot past 2^31 - 1 (a block id near 2^20
in blocks of 4128) wraps there; those are held to V1's kernel alone.
A sliding-window group under DCP is refused by kvslot with the message
vLLM's own SlidingWindowSpec.max_memory_usage_bytes asserts (run here on
a spec of the group's window and block, the parallel config a stand-in).

Cases: random --kv-groups specs (full, sliding, chunked local, Mamba and
MLA layers, random -B and kernel blocks), a third of them with DCP 2 and a
third with DCP 4 (a random rank, an interleave dividing every attention
group's block), and every config.json given, its three steps without DCP,
with DCP 2 and with DCP 4, each with a random step (1-5 requests, fresh, chunked and decode rows) and a
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
import vllm.v1.worker.block_table as vbt  # noqa: E402
from vllm.v1.kv_cache_interface import SlidingWindowSpec  # noqa: E402
from vllm.v1.worker.block_table import MultiGroupBlockTable, SlotMappingMode  # noqa: E402

vutils.PIN_MEMORY = False
P = F = SKIPPED = REFUSED = MRV2_WIDE = MRV2 = 0
DCP_STEPS = {2: 0, 4: 0}


class DcpGroup:
    """What BlockTable reads of vLLM's DCP process group."""

    def __init__(self, world, rank):
        self.world_size, self.rank_in_group = world, rank


def vllm_sliding_refusal(g, W):
    """vLLM's own start-up check of a sliding-window group under DCP W:
    SlidingWindowSpec.max_memory_usage_bytes's assertion message, or None."""
    spec = SlidingWindowSpec(block_size=g["block_size"], num_kv_heads=1, head_size=64,
                             dtype=torch.float16, sliding_window=g.get("sliding_window", 8))
    par = type("Par", (), {"decode_context_parallel_size": W})()
    cfg = type("Cfg", (), {"parallel_config": par})()
    try:
        spec.max_memory_usage_bytes(cfg)
    except AssertionError as e:
        return str(e)
    except Exception:  # noqa: BLE001  (past the check: the stand-in ends)
        return None
    return None


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


def vllm_step(groups, tables, comp, sched, cp=(1, 0, 1)):
    """MultiGroupBlockTable's block tables and slot mappings for one step,
    on DCP rank cp[1] of cp[0] with interleave cp[2]."""
    W, R, I = cp
    vbt.get_dcp_group = lambda: DcpGroup(W, R)
    n = len(sched)
    blocks = [g["block_size"] for g in groups]
    cols = [max(len(t[r]) for r in range(n)) for t in tables]
    modes = [SlotMappingMode.NONE if g["kind"] == "mamba" else SlotMappingMode.TOKEN_TO_KV_SLOT
             for g in groups]
    mg = MultiGroupBlockTable(max_num_reqs=n, max_num_batched_tokens=sum(sched) + 1,
                              pin_memory=False, device=torch.device("cpu"),
                              block_sizes=blocks, max_num_blocks=cols,
                              cp_kv_cache_interleave_size=I,
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


def cp_options(rng, groups, W):
    """A random DCP rank and an interleave dividing every attention group's
    block, and kvslot map's options for them (none when W is 1)."""
    if W == 1:
        return (1, 0, 1), []
    att = [g["block_size"] for g in groups if g["kind"] != "mamba"]
    I = rng.choice([i for i in (1, 1, 2, 4, 8) if all(b % i == 0 for b in att)])
    R = rng.randrange(W)
    return (W, R, I), ["--cp-size", str(W), "--cp-rank", str(R), "--interleave", str(I)]


def sliding_refused(kvslot, groups, W, args, what):
    """DCP beside a sliding window: kvslot refuses it (status 2, nothing on
    stdout) with the message vLLM's spec asserts.  True when it applied."""
    global REFUSED
    sw = [g for g in groups if g["kind"] in ("sliding_window", "mla_sliding_window")]
    if W == 1 or not sw:
        return False
    want = vllm_sliding_refusal(sw[0], W)
    res = subprocess.run(args, capture_output=True, text=True)
    check(want is not None and res.returncode == 2 and not res.stdout
          and res.stderr.splitlines()[0].endswith(want),
          "%s: DCP %d with a sliding window refused as vLLM's spec (%r): %r"
          % (what, W, want, res.stderr.strip()))
    REFUSED += 1
    return True


def one_case(kvslot, d, rng, what, gopts, W=1):
    out = subprocess.run([kvslot, "groups", "-f", "json"] + gopts,
                         capture_output=True, text=True)
    if out.returncode != 0:
        global SKIPPED
        SKIPPED += 1    # a spec vLLM's builder refuses (the kvslot-groups part)
        return
    groups = json.loads(out.stdout)["groups"]
    cp, copts = cp_options(rng, groups, W)
    span = cp[0]
    n = rng.randint(1, 5)
    comp = [rng.choice((0, 0, rng.randint(0, 300))) for _ in range(n)]
    sched = [rng.choice((1, rng.randint(1, 200))) for _ in range(n)]
    tables, files = [], []
    for k, g in enumerate(groups):
        B = g["block_size"]
        t = []
        for r in range(n):
            need = (comp[r] + sched[r] + B * span - 1) // (B * span) \
                if g["kind"] != "mamba" else 1
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
    args = [kvslot, "map"] + gopts + copts + ["--scheduled", ",".join(map(str, sched)),
                                      "--computed", ",".join(map(str, comp)),
                                      "--fields", fields, "-f", "text"]
    for f in files:
        args += ["--block-table", f]
    what += " DCP %d rank %d interleave %d" % cp if W > 1 else ""
    if sliding_refused(kvslot, groups, W, args, what):
        return
    res = subprocess.run(args, capture_output=True, text=True)
    if res.returncode != 0:
        check(False, "%s: kvslot map: %s" % (what, res.stderr.strip()))
        return
    ours = text_fields(res.stdout)
    if W > 1:
        DCP_STEPS[W] += 1
    slots, bts = vllm_step(groups, tables, comp, sched, cp)
    qsl = [0]
    for x in sched:
        qsl.append(qsl[-1] + x)
    pos = [c + i for c, s in zip(comp, sched) for i in range(s)]
    for k in range(len(groups)):
        if k in att:
            check(ours.get("slot_mapping.g%d" % k) == [slots[k]],
                  "%s: slot_mapping.g%d = vLLM's (%s, block %d)"
                  % (what, k, groups[k]["kind"], groups[k]["block_size"]))
        if k in att and W > 1 and \
                (max(map(max, tables[k])) + 1) * groups[k]["block_size"] > 2**31 - 1:
            # MRV2's kernel multiplies the int32 block id by the int32
            # block size in int32 (V1's widens the id to int64 first): a
            # slot past 2^31 - 1 wraps there, on a GPU as here
            global MRV2_WIDE
            MRV2_WIDE += 1
        elif k in att and W > 1:
            global MRV2
            MRV2 += 1
            mr = vllm_map.mrv2_slots(tables[k], qsl, pos, groups[k]["block_size"], *cp)
            check(ours.get("slot_mapping.g%d" % k) == [mr],
                  "%s: slot_mapping.g%d = MRV2's kernel's" % (what, k))
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
            one_case(kvslot, d, rng, "case %d (%s)" % (c, " ".join(gopts)), gopts,
                     (1, 2, 4)[c % 3])
        for cfg in configs:
            for c in range(3):
                gopts = ["--model-config", cfg, "--max-model-len", "4096"]
                one_case(kvslot, d, rng, "%s step %d" % (os.path.basename(cfg), c), gopts,
                         (1, 2, 4)[c])
    print("%d specs refused by the builder, as vLLM's (not mapped)" % SKIPPED)
    print("%d steps with DCP beside a sliding window, refused as vLLM's spec "
          "refuses them" % REFUSED)
    print("%d steps mapped under DCP 2, %d under DCP 4; %d of their group slot "
          "mappings also against MRV2's kernel" % (DCP_STEPS[2], DCP_STEPS[4], MRV2))
    print("%d DCP slot mappings with slots past 2^31 - 1 held to V1's kernel "
          "alone (MRV2's computes them in int32)" % MRV2_WIDE)
    print("%d passed, %d failed" % (P, F))
    return 1 if F else 0


if __name__ == "__main__":
    sys.exit(main())
