"""kvtools.kvslot.plan with KV-cache groups (kv_groups, model_config,
kernel_block, mamba_cache_mode) against kvslot plan on random cases:
every step's arrays, block_table.gK and slot_mapping.gK among them, equal
byte for byte, and the same refusals with the same messages."""
import os

import numpy as np

from kvtools import kvslot
from conftest import CASES, npy_stream, same_array, same_refusal, TOP

CONFIGS = ("gemma-3-1b.json", "gpt-oss-20b.json", "llama-4-scout.json",
           "gpt2.json")
# one attention kind per model (vLLM's): the MLA kinds apart
LAYERS = (("full", "sliding=4", "sliding=8", "chunked=8", "mamba=65536",
           "full:2048", "sliding=4:8192", "sliding=16"),
          ("mla", "mla_sliding=4", "mla_sliding=8", "mamba=65536"))


def spec(rng):
    items = []
    kinds = LAYERS[int(rng.random() < 0.3)]
    for _ in range(int(rng.integers(1, 4))):
        layer = kinds[int(rng.integers(0, len(kinds)))]
        if rng.random() < 0.3:
            layer = "%d*%s" % (int(rng.integers(1, 4)), layer)
        items.append(layer)
    if rng.random() < 0.03:
        items.append(("nonsense=1", "indexer")[int(rng.integers(0, 2))])
    return ",".join(items)


def groups_case(rng, c):
    n = int(rng.integers(1, 5))
    M = int(rng.integers(8, 40))
    B = int(rng.choice([1, 2, 4]))
    plens = [int(x) for x in rng.integers(1, M + 1, n)]
    kw = dict(prompt_lens=plens, max_tokens=int(rng.integers(1, 24)),
              block_size=B, max_model_len=M)
    args = ["plan", "--prompt-lens", ",".join(map(str, plens)), "--max-tokens",
            kw["max_tokens"], "-B", B, "--max-model-len", M]
    r = rng.random()
    if r < 0.75:
        kw["kv_groups"] = spec(rng)
        args += ["--kv-groups", kw["kv_groups"]]
    elif r < 0.95:
        path = os.path.join(TOP, "tests", "configs",
                            CONFIGS[int(rng.integers(0, len(CONFIGS)))])
        if rng.random() < 0.03:
            path = os.path.join(TOP, "tests", "configs", "none.json")
        kw["model_config"] = path
        args += ["--model-config", path]
    if rng.random() < 0.02 and "kv_groups" in kw:
        kw["model_config"] = os.path.join(TOP, "tests", "configs", "gpt2.json")
        args += ["--model-config", kw["model_config"]]   # refused: both
    if rng.random() < 0.5 and (len(kw) > 4 or rng.random() < 0.1):
        kw["kernel_block"] = int(rng.choice([1, 2, 4, 16, 0 if rng.random() < 0.1 else 8]))
        args += ["--kernel-block", kw["kernel_block"]]
    if rng.random() < 0.05:
        kw["mamba_cache_mode"] = str(rng.choice(["none", "align"]))
        args += ["--mamba-cache-mode", kw["mamba_cache_mode"]]
    if rng.random() < 0.5:
        kw["output_lens"] = int(rng.integers(1, 6))
        args += ["--output-lens", kw["output_lens"]]
        if rng.random() < 0.5:
            kw["decode"] = True
            args.append("--decode")
    if rng.random() < 0.3:
        kw["num_blocks"] = int(rng.integers(4, 40))
        args += ["--num-blocks", kw["num_blocks"]]
    if rng.random() < 0.1:
        kw["cp_size"] = int(rng.integers(1, 3))
        args += ["--cp-size", kw["cp_size"]]
    if rng.random() < 0.05:
        kw["all_ranks"] = True
        args.append("--all-ranks")
    if rng.random() < 0.2:
        kw["pad_to"] = kw["max_tokens"] + int(rng.integers(0, 4))
        args += ["--pad-to", kw["pad_to"]]
    if rng.random() < 0.2:
        kw["dtype"] = "i32"
        args += ["--dtype", "i32"]
    if rng.random() < 0.4:
        f = ["step", "slot_mapping", "block_table", "slot_mapping.g0",
             "slot_mapping.g1", "block_table.g1", "block_table.g0",
             "positions", "free_blocks", "block_numbers", "block_table.g9"]
        pick = [f[i] for i in rng.permutation(len(f))[:int(rng.integers(1, 5))]]
        kw["fields"] = ",".join(pick) if rng.random() < 0.5 else pick
        args += ["--fields", ",".join(pick)]
    args += ["-f", "npy"]
    return kw, args


def same_steps(kw, out, what):
    """kvslot.plan(**kw)'s steps, every array equal to the program's
    stream out; returns them."""
    steps = list(kvslot.plan(**kw))
    ref = npy_stream(out)
    got = [a for st in steps for a in st.values()]
    names = [n for st in steps for n in st]
    assert len(got) == len(ref), what
    for name, a, r in zip(names, got, ref):
        same_array(a, r, what + " " + name)
    return steps


def test_plan_groups_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(36)
    cases = [groups_case(rng, c) for c in range(CASES)]
    results = cli.many([("kvslot",) + tuple(map(str, a)) for _, a in cases])
    n_ok = n_g1 = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: list(kvslot.plan(**kw)), status, err, what,
                         os.path.join(TOP, "tests", "configs"))
            continue
        steps = same_steps(kw, out, what)
        n_ok += 1
        n_g1 += any(n.endswith(".g1") for st in steps for n in st)
    assert n_ok > len(cases) // 4
    assert n_g1 > len(cases) // 10         # several groups do plan


def test_plan_group_names():
    """The worked example of kvslot(1): two groups, their tables by name."""
    steps = list(kvslot.plan(prompt_lens=[10], max_tokens=4, block_size=4,
                             max_model_len=16, output_lens=3, decode=True,
                             kv_groups="sliding=4,full", kernel_block=4,
                             fields="step,block_table.g1,slot_mapping"))
    assert list(steps[0]) == ["step", "block_table.g1", "slot_mapping.g0",
                              "slot_mapping.g1"]


def test_plan_mixed_blocks_prefix_caching_equal_cli(cli, tmp_path):
    """Groups of different block sizes with prefix caching (hashes at the
    GCD, hits at the LCM, the prompt tail's entry evicted with its block)
    on prompts sharing prefixes: every step equal to the program's, hits
    and evictions among them, a chunked group of less than the LCM refused
    alike."""
    rng = np.random.default_rng(37)
    specs = ("full:2048,sliding=%d", "sliding=%d:2048,full", "full:1024,full",
             "full:2048,sliding=%d:1024", "chunked=16:1024,full",
             "full:2048,chunked=8", "mla:2048,mla_sliding=%d")
    cases = []
    for c in range(CASES):
        sp = specs[int(rng.integers(0, len(specs)))]
        sp = sp % int(rng.integers(2, 12)) if "%d" in sp else sp
        base = [int(x) for x in rng.integers(1, 9, 40)]
        prompts = []
        for _ in range(int(rng.integers(1, 5))):
            n = int(rng.integers(1, 40))
            k = int(rng.integers(0, n + 1))
            prompts.append(base[:k] + [int(x) for x in rng.integers(1, 9, n - k)])
        kw = dict(prompts=prompts, max_tokens=int(rng.integers(4, 40)),
                  block_size=4, max_model_len=48, kv_groups=sp, kernel_block=4,
                  enable_prefix_caching=True, decode=True,
                  output_lens=[int(x) for x in rng.integers(1, 6, len(prompts))],
                  arrivals=sorted(int(x) for x in rng.integers(1, 6, len(prompts))),
                  async_scheduling=bool(rng.random() < 0.5))
        path = tmp_path / ("p%d.txt" % c)
        path.write_text("".join(" ".join(map(str, p)) + "\n" for p in prompts))
        args = ["plan", "--prompts", str(path), "--max-tokens", kw["max_tokens"],
                "-B", 4, "--max-model-len", 48, "--kv-groups", sp,
                "--kernel-block", 4, "--enable-prefix-caching", "--decode",
                "--output-lens", ",".join(map(str, kw["output_lens"])),
                "--arrivals", ",".join(map(str, kw["arrivals"]))]
        if kw["async_scheduling"]:
            args.append("--async-scheduling")
        if rng.random() < 0.7:
            kw["num_blocks"] = int(rng.integers(30, 60))
            args += ["--num-blocks", kw["num_blocks"]]
        cases.append((kw, args + ["-f", "npy"]))
    results = cli.many([("kvslot",) + tuple(map(str, a)) for _, a in cases])
    n_ok = n_hit = n_evicted = n_refused = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: list(kvslot.plan(**kw)), status, err, what)
            n_refused += "chunked local attention" in err
            continue
        steps = same_steps(kw, out, what)
        n_ok += 1
        n_hit += any(np.any(st["num_cached_tokens"] > 0) for st in steps)
        n_evicted += any(len(st["evicted_hashes"]) for st in steps)
    assert n_ok > len(cases) // 2 and n_refused > 0
    assert n_hit > len(cases) // 10 and n_evicted > 0
