"""kvslot-plan-trace.py - 'kvslot plan --trace' step for step against vLLM
0.33.0's own Scheduler on the first requests of a Mooncake-format trace
(scripts/crosscheck/kvslot-plan-trace.sh).

    kvslot-plan-trace.py KVSLOT TRACE [--requests N] [--ms-per-step M]

The first N requests (300) become vLLM Requests as kvslot(1), "Mooncake
traces", makes them: token j of the block with hash id h is h * 512 + j, a
prompt the first input_length tokens of its blocks, output_length tokens
generated, arrival at step 1 + floor(timestamp / M).  vLLM's Scheduler,
KV cache manager and block pool run them in vllm_plan.py's synchronous
engine loop, with its replacements (the platform, the model config, the
KV-event recorder, the model runner's sampled tokens; listed there), with
prefix caching, in two pools: one with room to spare and one small enough
to evict and preempt.  kvslot plan --trace must print the same steps
(scheduled requests and tokens, computed and cached tokens, block tables,
waiting queue, preemptions, finishes, free and shared blocks, evicted
hashes), and its --summary line the counts of vLLM's steps.
Ends with 'N passed, M failed': one per pool and check.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vllm_plan as V  # noqa: E402  (imports vllm_host first)

BS, BUDGET, SEQS = 16, 8192, 256


def load(path, n, ms):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    prompts = [[h * 512 + j for h in r["hash_ids"] for j in range(512)]
               [:r["input_length"]] for r in rows]
    arrivals = [1 + int(r["timestamp"] // ms) for r in rows]
    outs = [r["output_length"] for r in rows]
    return rows, prompts, arrivals, outs


def summary(vs, num_blocks):
    seen = set()
    hit = pre = ev = 0
    low = None
    for s in vs:
        for i, c in s["cached"].items():
            if i not in seen and c is not None:
                seen.add(i)
                hit += c
        pre += len(s["preempted"])
        ev += len(s.get("evicted", []))
        low = s["free"] if low is None else min(low, s["free"])
    return ("steps %d prefix_hit_tokens %d preemptions %d evictions %d "
            "peak_blocks %d" % (len(vs), hit, pre, ev, num_blocks - 1 - low))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("trace")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--ms-per-step", type=float, default=50)
    a = ap.parse_args()
    rows, prompts, arrivals, outs = load(a.trace, a.requests, a.ms_per_step)
    mml = BS * (-(-max(len(p) + o for p, o in zip(prompts, outs)) // BS)) + BS
    need = max(-(-(len(p) + o) // BS) for p, o in zip(prompts, outs))
    V.MAX_STEPS = 10 ** 7     # the loop's guard, sized for a real trace
    passed = failed = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.jsonl")
        with open(path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        for num_blocks in (need * 8, need + 64):
            t = {"bs": BS, "mml": mml, "prompts": prompts, "budget": BUDGET,
                 "seqs": SEQS, "num_blocks": num_blocks, "outs": outs,
                 "arrivals": arrivals, "salts": None, "loras": None}
            vs, verr = V.run_vllm(t, True, True)
            base = ["plan", "--trace", path, "--ms-per-step",
                    repr(a.ms_per_step), "--max-tokens", str(BUDGET), "-B",
                    str(BS), "--max-model-len", str(mml), "--num-blocks",
                    str(num_blocks), "--max-num-seqs", str(SEQS),
                    "--enable-prefix-caching", "--decode", "-q", "-f", "text"]
            p = subprocess.run([a.kvslot] + base + [
                "--fields", V.FIELDS + V.APC_FIELDS], capture_output=True,
                text=True)
            name = "%d requests, %d blocks" % (len(prompts), num_blocks)
            if verr is not None or p.returncode:
                failed += 1
                print("# %s: vLLM %s; kvslot exit %d %s" %
                      (name, verr, p.returncode, p.stderr[:300]))
            else:
                diff = V.compare(vs, V.parse_kvslot(p.stdout, True), True)
                if diff is None:
                    passed += 1
                    print("# %s: %d steps, %d preemptions, the same" %
                          (name, len(vs),
                           sum(len(s["preempted"]) for s in vs)))
                else:
                    failed += 1
                    print("# %s: first difference at step %s, %s: vLLM %r, "
                          "kvslot %r" % ((name,) + tuple(
                              str(x)[:300] for x in diff)))
            q = subprocess.run([a.kvslot] + base + ["--summary"],
                               capture_output=True, text=True)
            want = summary(vs, num_blocks) if verr is None else None
            if q.returncode == 0 and q.stdout.strip() == want:
                passed += 1
            else:
                failed += 1
                print("# %s --summary: kvslot %r, vLLM's steps %r" %
                      (name, q.stdout.strip() or q.stderr[:200], want))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
