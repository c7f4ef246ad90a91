"""kvtools.kvslot.plan with kv_groups="packed:SPEC" (a block-outermost
layout, its groups packed as vLLM packs them) against kvslot plan on
random cases: every step's arrays equal byte for byte, the same refusals
with the same messages (bad packed forms, a split vLLM cannot make)."""
import numpy as np

from kvtools import kvslot
from conftest import CASES, npy_stream, same_array, same_refusal

SPECS = ("packed:2*(mla:2176,indexer,3*mla_sliding=128:2176)",
         "packed:2*(indexer,mla:2176,mla_sliding=8:2176)",
         "packed:mla:1152,indexer,mla,2*mla_sliding=4:1152",
         "packed:2*(full:2048,3*sliding=8)",
         "packed:sliding=4,full:2048,chunked=16",
         # refused: vLLM's split of an uneven sliding bucket fails
         "packed:2*(sliding=2:2048,2*sliding=2:512,full:2048)",
         # refused: bad forms
         "packed", "packed:", "full,packed:full", "packed:indexer,mla_sliding=8")


def case(rng):
    n = int(rng.integers(1, 6))
    M = int(rng.integers(16, 160))
    plens = [int(x) for x in rng.integers(1, M, n)]
    kw = dict(prompt_lens=plens, max_tokens=int(rng.integers(4, 48)),
              block_size=4, kernel_block=4, max_model_len=M,
              kv_groups=SPECS[int(rng.integers(0, len(SPECS)))],
              output_lens=int(rng.integers(1, 8)))
    args = ["plan", "--prompt-lens", ",".join(map(str, plens)), "--max-tokens",
            kw["max_tokens"], "-B", 4, "--kernel-block", 4, "--max-model-len", M,
            "--kv-groups", kw["kv_groups"], "--output-lens", kw["output_lens"]]
    if rng.random() < 0.5:
        kw["num_blocks"] = int(rng.integers(60, 240))
        args += ["--num-blocks", kw["num_blocks"]]
    if rng.random() < 0.5:
        kw["async_scheduling"] = True
        args.append("--async-scheduling")
    return kw, args + ["-f", "npy"]


def test_plan_packed_equal_cli(cli):
    rng = np.random.default_rng(44)
    cases = [case(rng) for _ in range(CASES)]
    results = cli.many([("kvslot",) + tuple(map(str, a)) for _, a in cases])
    n_ok = n_refused = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: list(kvslot.plan(**kw)), status, err, what)
            n_refused += 1
            continue
        got = [(n, a) for st in kvslot.plan(**kw) for n, a in st.items()]
        ref = npy_stream(out)
        assert len(got) == len(ref), what
        for (name, a), r in zip(got, ref):
            same_array(a, r, what + " " + name)
        n_ok += 1
    assert n_ok > len(cases) // 4 and n_refused > len(cases) // 10
