"""kvslot plan's peer in make bench: vLLM's own Scheduler (the installed
release, build/pyenv/crosscheck) scheduling the same requests to completion.

The scheduler is set up as the crosscheck sets it up
(scripts/crosscheck/vllm_plan.py make_scheduler: the same stand-ins for the
platform, the model config and the model runner, which samples one token
per completed prompt), without KV events, which an engine publishes only
when asked.  The timed part is what an engine core does with the requests:
making them (their block hashes, with prefix caching) and the
schedule() / update_from_output() loop until every request has finished.

With --kv-groups SPEC the KV cache config holds the groups 'kvslot groups'
derives (the kvslot on PATH), as scripts/crosscheck/kvslot-hybrid.py sets
them up: vLLM's HybridKVCacheCoordinator with prefix caching, its
no-prefix-cache coordinator without.

usage: python kvslot_vllm.py (--prompts FILE.npy | --prompt-lens a,b,..)
           --output-lens n|a,b,.. --max-tokens N -B B --max-model-len M
           --num-blocks K --max-num-seqs S [--enable-prefix-caching]
           [--kv-groups SPEC [--kernel-block K]] [--repeat R] [--cpu]
prints: best seconds (--cpu: CPU seconds of the process), steps, scheduled
tokens
"""
import argparse
import importlib.util
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "scripts", "crosscheck"))
import numpy as np  # noqa: E402
import vllm_plan as vp  # noqa: E402


def lens(text, n):
    v = [int(x) for x in text.split(",")]
    return v * n if len(v) == 1 else v


def run(t, apc, clock=time.perf_counter):
    sched, _, hasher = vp.make_scheduler(t, apc, True, events=False)
    n = len(t["prompts"])
    t0 = clock()
    reqs = {}
    for i in range(n):
        reqs[i] = vp.make_request(t, i, hasher)
        sched.add_request(reqs[i])
    done = steps = tokens = 0
    while done < n:
        so = sched.schedule()
        if so.total_num_scheduled_tokens == 0:
            raise SystemExit("kvslot_vllm: step %d schedules nothing" % (steps + 1))
        steps += 1
        tokens += so.total_num_scheduled_tokens
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            r = reqs[int(rid)]
            if r.num_computed_tokens >= r.num_tokens:
                sampled.append([vp.token_at(t, int(rid), r.num_tokens)])
            else:
                sampled.append([])
        mro = vp.ModelRunnerOutput(req_ids=ids,
                                   req_id_to_index={x: k for k, x in enumerate(ids)},
                                   sampled_token_ids=sampled)
        done += len(vp.finished_ids(sched.update_from_output(so, mro)))
    return clock() - t0, steps, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts")
    ap.add_argument("--prompt-lens")
    ap.add_argument("--output-lens", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("-B", type=int, required=True)
    ap.add_argument("--max-model-len", type=int, required=True)
    ap.add_argument("--num-blocks", type=int, required=True)
    ap.add_argument("--max-num-seqs", type=int, required=True)
    ap.add_argument("--enable-prefix-caching", action="store_true")
    ap.add_argument("--kv-groups")
    ap.add_argument("--kernel-block", type=int)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--cpu", action="store_true",
                    help="time the loop in CPU seconds (time.process_time)")
    a = ap.parse_args()
    if a.prompts:
        prompts = np.load(a.prompts).tolist()
    else:
        prompts = [[1] * k for k in lens(a.prompt_lens, 1)]
    t = {"bs": a.B, "mml": a.max_model_len, "prompts": prompts,
         "budget": a.max_tokens, "seqs": a.max_num_seqs,
         "num_blocks": a.num_blocks, "outs": lens(a.output_lens, len(prompts)),
         "arrivals": None, "salts": None, "loras": None}
    if a.kv_groups:
        # the groups kvslot groups derives; importing the cross-check's
        # driver makes vp.make_scheduler build them
        if a.kernel_block not in (None, a.B):
            raise SystemExit("kvslot_vllm: --kernel-block must equal -B")
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                            "scripts", "crosscheck", "kvslot-hybrid.py")
        spec = importlib.util.spec_from_file_location("kvslot_hybrid", path)
        kh = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(kh)
        kh.KVSLOT = shutil.which("kvslot") or "kvslot"
        t["spec"] = a.kv_groups
        t["mix"] = "spec"       # none of the cross-check's packed or Mamba mixes
        t["groups"] = kh.kvslot_groups(a.kv_groups, a.B, a.max_model_len)
    best = None
    for _ in range(a.repeat):
        r = run(t, a.enable_prefix_caching,
                time.process_time if a.cpu else time.perf_counter)
        best = r if best is None or r[0] < best[0] else best
    print("%.6f %d %d" % best)


if __name__ == "__main__":
    main()
