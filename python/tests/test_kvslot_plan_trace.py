"""kvtools.kvslot.plan with a recorded trace (trace, ms_per_step, summary)
against kvslot plan --trace: random Mooncake-format traces and excerpts of
the shipped one (tests/vectors/traces), every step's arrays equal byte for
byte, summary=True's counters equal to the numbers of the program's
--summary line, the same refusals with the same messages, and the same
results from four threads at once."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kvtools
from kvtools import kvslot
from conftest import CASES, npy_stream, same_array, same_refusal, TOP

MOONCAKE = os.path.join(TOP, "tests", "vectors", "traces",
                        "mooncake-conversation.jsonl")


def _shipped(n=None):
    with open(MOONCAKE) as f:
        return [line for _, line in zip(range(n or 10**9), f)]


def write_trace(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


def random_rows(rng):
    """A small trace whose prompts share leading blocks (prefix hits)."""
    rows, t, next_id = [], 0, 100
    for _ in range(int(rng.integers(1, 6))):
        n_in = int(rng.integers(1, 1400))
        ids = []
        for b in range((n_in + 511) // 512):
            if b < 2 and rng.random() < 0.5:
                ids.append(b)                   # a shared prefix block
            else:
                ids.append(next_id)
                next_id += 1
        t += int(rng.integers(0, 80)) if rng.random() < 0.8 else \
            float(rng.random() * 50)
        rows.append({"timestamp": t, "input_length": n_in,
                     "output_length": int(rng.integers(1, 12)),
                     "hash_ids": ids})
    return rows


_OPTS = {"block_size": "-B"}


def cli_args(kw):
    """kvslot plan's arguments for the keywords kw (True: a flag)."""
    args = ["plan"]
    for k, v in kw.items():
        opt = _OPTS.get(k, "--" + k.replace("_", "-"))
        if v is True:
            args.append(opt)
        elif v is not False:
            args += [opt, ",".join(map(str, v)) if isinstance(v, list) else v]
    return [str(a) for a in args] + ["-f", "npy"]


def summary_line(out):
    """The program's --summary line as a dict of ints, in its order."""
    w = out.decode().split()
    assert len(w) == 10, out
    return {w[i]: int(w[i + 1]) for i in range(0, 10, 2)}


def trace_case(rng, path):
    """Random keywords of a plan of a random trace or an excerpt of the
    shipped one (now and then refused), and the program's arguments."""
    if rng.random() < 0.3:
        lines = _shipped(400)
        at = int(rng.integers(0, len(lines) - 4))
        rows = lines[at:at + int(rng.integers(1, 4))]
        M = 131072
    else:
        rows = random_rows(rng)
        M = int(rng.choice([1500, 2048]))
    kw = dict(trace=write_trace(path, rows), block_size=int(rng.choice([16, 32, 64])),
              max_model_len=M, max_tokens=int(rng.choice([256, 512, 2048])))
    if rng.random() < 0.6:
        kw["ms_per_step"] = [5, 10, 50, 250, 0.5, "7.25", "1e2"][int(rng.integers(0, 7))]
    if rng.random() < 0.6:
        kw["enable_prefix_caching"] = True
    if rng.random() < 0.6:     # room for the longest request, or little more
        need = max(-(-(r["input_length"] + r["output_length"]) //
                     kw["block_size"]) for r in
                   (json.loads(x) if isinstance(x, str) else x for x in rows))
        kw["num_blocks"] = need + 1 + int(rng.integers(0, need + 1))
    if rng.random() < 0.5:
        kw["decode"] = True
        if rng.random() < 0.75:     # decoding to max_model_len is ~1000 steps
            kw["steps"] = int(rng.integers(20, 120))
    elif rng.random() < 0.3:
        kw["steps"] = int(rng.integers(1, 30))
    if "num_blocks" in kw and rng.random() < 0.5:
        kw["summary"] = True
    for key, vals in (("async_scheduling", None), ("no_reserve_full_isl", None),
                      ("max_num_seqs", (1, 2, 3)),
                      ("reorder", ("split-decodes", "decode-extend-prefill")),
                      ("dtype", ("i32",))):
        if rng.random() < 0.15:
            kw[key] = True if vals is None else vals[int(rng.integers(0, len(vals)))]
    if not kw.get("summary") and rng.random() < 0.4:
        f = ["step", "req_ids", "num_cached_tokens", "slot_mapping",
             "block_table", "preempted", "evicted_hashes", "free_blocks",
             "waiting", "shared_blocks"]
        kw["fields"] = [f[i] for i in rng.permutation(len(f))[:int(rng.integers(1, 5))]]
    r = rng.random()                            # now and then a refusal
    if r < 0.03:
        kw["ms_per_step"] = ["0", "-5", "x", "", "1e13", "nan"][int(rng.integers(0, 6))]
    elif r < 0.06:
        key, v = [("prompt_lens", "4"), ("output_lens", "3"), ("arrivals", "2"),
                  ("salt", "s"), ("lora_ids", "1"),
                  ("prompts", kw["trace"])][int(rng.integers(0, 6))]
        kw[key] = v
    elif r < 0.08 and "num_blocks" in kw:
        del kw["num_blocks"]
        kw["summary"] = True
    elif r < 0.1:
        kw["max_model_len"] = 100                # a prompt does not fit
    return kw, cli_args(kw)


def check_case(kw, args, status, out, err):
    what = "kvslot " + " ".join(args)
    if status != 0:
        same_refusal(lambda: kvslot.plan(**kw) if kw.get("summary")
                     else list(kvslot.plan(**kw)), status, err, what)
        return 0
    if kw.get("summary"):
        got = kvslot.plan(**kw)
        assert isinstance(got, dict), what
        assert list(got.items()) == list(summary_line(out).items()), what
        return 1
    steps = list(kvslot.plan(**kw))
    ref = npy_stream(out)
    got = [(n, a) for st in steps for n, a in st.items()]
    assert len(got) == len(ref), what
    for (name, a), r in zip(got, ref):
        same_array(a, r, what + " " + name)
    return 1


def test_plan_trace_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(3636)
    cases = [trace_case(rng, tmp_path / ("t%d.jsonl" % c))
             for c in range(CASES)]
    results = cli.many([("kvslot",) + tuple(a) for _, a in cases])
    n_ok = n_sum = n_hit = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        good = check_case(kw, args, status, out, err)
        n_ok += good
        if good and kw.get("summary"):
            n_sum += 1
            n_hit += summary_line(out)["prefix_hit_tokens"] > 0
    assert n_ok > len(cases) * 2 // 3
    assert n_sum > len(cases) // 10 and n_hit > 0   # summaries, with hits


def test_plan_trace_shipped_excerpt(cli, tmp_path):
    """kvslot-trace.sh's run: the first 40 requests of the shipped trace,
    every step and the summary, equal to the program's."""
    path = write_trace(tmp_path / "t40.jsonl", _shipped(40))
    kw = dict(trace=path, max_tokens=4096, block_size=16,
              max_model_len=131072, num_blocks=9000,
              enable_prefix_caching=True, decode=True)
    fields = "step,req_ids,num_cached_tokens,evicted_hashes,free_blocks"
    steps, summary = cli_args(dict(kw, fields=fields)), cli_args(
        dict(kw, summary=True))
    (st, out, err), (st2, out2, err2) = cli.many([("kvslot",) + tuple(steps),
                                                  ("kvslot",) + tuple(summary)])
    assert st == 0 and st2 == 0, err + err2
    assert check_case(dict(kw, fields=fields), steps, st, out, err)
    s = kvslot.plan(summary=True, **kw)
    assert s == summary_line(out2)
    assert s["steps"] == 1844 and s["prefix_hit_tokens"] > 0 and \
        s["evictions"] > 0


def test_plan_trace_refusals(cli, tmp_path):
    good = write_trace(tmp_path / "g.jsonl", [
        {"timestamp": 100, "input_length": 20, "output_length": 2,
         "hash_ids": [1]}])
    bad = {
        "malformed": '{"timestamp": 1,',
        "output0": {"timestamp": 101, "input_length": 20, "output_length": 0,
                    "hash_ids": [1]},
        "negative": {"timestamp": 101, "input_length": 20, "output_length": 1,
                     "hash_ids": [-3]},
        "backwards": {"timestamp": 50, "input_length": 20, "output_length": 1,
                      "hash_ids": [1]},
        "short": {"timestamp": 101, "input_length": 600, "output_length": 1,
                  "hash_ids": [1]},
    }
    base = dict(max_tokens=64, block_size=4, max_model_len=64)
    with open(good) as f:
        first = f.read().splitlines()[0]
    cases = [dict(trace=write_trace(tmp_path / (name + ".jsonl"),
                                    [first, line]))
             for name, line in bad.items()]
    none = str(tmp_path / "nothing.jsonl")
    cases += [
        dict(trace=good, prompts=good), dict(trace=good, output_lens=3),
        dict(trace=good, salt="a", lora_ids=2),
        dict(trace=good, arrivals=[1, 2], prompt_lens=4),
        dict(prompt_lens=4, ms_per_step=5), dict(prompt_lens=4, summary=True),
        dict(trace=good, summary=True), dict(trace=good, ms_per_step=0),
        dict(trace=good, ms_per_step="2ms"), dict(trace=good, ms_per_step=""),
        dict(trace="", ms_per_step=3), dict(trace=none),
        dict(trace=none, ms_per_step="0"), dict(trace=good, max_model_len=20),
        dict(trace=good, num_blocks=1, summary=True),
    ]
    cases = [dict(base, **kw) for kw in cases]
    calls = [("kvslot",) + tuple(cli_args(kw)) for kw in cases]
    for kw, c, (status, out, err) in zip(cases, calls, cli.many(calls)):
        what = " ".join(c)
        assert status in (1, 2) and out == b"", what
        same_refusal(lambda: kvslot.plan(**kw) if kw.get("summary")
                     else list(kvslot.plan(**kw)), status, err, what)
    with pytest.raises(kvtools.Error) as ei:
        kvslot.plan(trace=good, summary=True, **base)
    assert ei.value.status == 2 and "--num-blocks" in ei.value.msg


def test_plan_trace_threads(tmp_path):
    """Four threads at once give the single-threaded results."""
    path = write_trace(tmp_path / "t.jsonl", _shipped(10))
    kw = dict(trace=path, max_tokens=2048, block_size=16,
              max_model_len=131072, num_blocks=1800,
              enable_prefix_caching=True, decode=True, ms_per_step=50)

    def run(i):
        if i % 2:
            return kvslot.plan(summary=True, **kw)
        return [{n: a.tobytes() for n, a in st.items()}
                for st in kvslot.plan(fields="step,req_ids,slot_mapping,"
                                      "num_cached_tokens,free_blocks", **kw)]

    want = [run(0), run(1)]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(run, range(8)))
    for i, g in enumerate(got):
        assert g == want[i % 2], "thread %d" % i
    assert want[1]["steps"] == len(want[0]) and want[1]["evictions"] > 0
