"""kvtools.kvslot.groups against kvslot groups -f json on random layer
specs and the test configs with random options: the dict equals the
program's JSON value for value, and the refusals are the program's, with
its exit status and message."""
import json
import os

import numpy as np

from kvtools import kvslot
from conftest import CASES, same_refusal, TOP

CONFIGS = ("gemma-3-1b.json", "gpt-oss-20b.json", "llama-4-scout.json",
           "gpt2.json", "deepseek-v3.json", "mistral-7b-v0.1.json")
# one attention family a model (vLLM's): MLA (with DeepSeek-V3.2's indexer)
# apart; a few cases mix them, which is refused
LAYERS = (("full", "full:2048", "sliding=4", "sliding=128:8192", "chunked=32",
           "chunked=64:1024", "mamba=65536", "mamba=9000"),
          ("mla", "mla:576", "mla_sliding=8", "mla", "indexer:132",
           "mamba=65536"))
DTYPES = ("auto", "bfloat16", "float16", "float32", "fp8", "fp8_e5m2")


def spec(rng):
    items = []
    kinds = LAYERS[int(rng.random() < 0.35)]
    if rng.random() < 0.05:
        kinds = LAYERS[0] + LAYERS[1]
    for _ in range(int(rng.integers(1, 5))):
        layer = kinds[int(rng.integers(0, len(kinds)))]
        if rng.random() < 0.3:
            layer = "%d*%s" % (int(rng.integers(1, 5)), layer)
        elif rng.random() < 0.15:
            layer = "%d*(%s,%s)" % (int(rng.integers(1, 4)), layer,
                                    kinds[int(rng.integers(0, len(kinds)))])
        items.append(layer)
    return ",".join(items)


def case(rng):
    """(keywords, the program's arguments) of one random case."""
    kw, args = {}, ["groups", "-f", "json"]
    if rng.random() < 0.3:
        path = os.path.join(TOP, "tests", "configs",
                            CONFIGS[int(rng.integers(0, len(CONFIGS)))])
        kw["model_config"] = path
        args.append("--model-config=" + path)
    else:
        s = spec(rng)
        kw["kv_groups"] = s
        args.append("--kv-groups=" + s)
    if rng.random() < 0.6:
        kw["block_size"] = int(rng.choice([1, 8, 16, 32, 64, 128]))
        args.append("-B%d" % kw["block_size"])
    if rng.random() < 0.4:
        kw["kernel_block"] = int(rng.choice([1, 16, 32, 64]))
        args.append("--kernel-block=%d" % kw["kernel_block"])
    if rng.random() < 0.6:
        kw["max_model_len"] = int(rng.choice([64, 1000, 4096, 131072]))
        args.append("--max-model-len=%d" % kw["max_model_len"])
    if rng.random() < 0.4:
        kw["kv_cache_dtype"] = DTYPES[int(rng.integers(0, len(DTYPES)))]
        args.append("--kv-cache-dtype=" + kw["kv_cache_dtype"])
    if rng.random() < 0.4:
        kw["mamba_cache_mode"] = ("none", "align")[int(rng.integers(0, 2))]
        args.append("--mamba-cache-mode=" + kw["mamba_cache_mode"])
    return kw, args


def test_random_against_program(cli):
    rng = np.random.default_rng(20261128)
    cases = [case(rng) for _ in range(CASES)]
    results = cli.many([("kvslot",) + tuple(a) for _, a in cases])
    ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = " ".join(args)
        if status:
            same_refusal(lambda: kvslot.groups(**kw), status, err, what)
            continue
        assert kvslot.groups(**kw) == json.loads(out), what
        ok += 1
    assert ok >= len(cases) // 2


REFUSALS = (
    ({}, ()),
    ({"kv_groups": "full", "model_config": "x.json"},
     ("--kv-groups=full", "--model-config=x.json")),
    ({"kv_groups": "full", "block_size": 0}, ("--kv-groups=full", "-B0")),
    ({"kv_groups": "full", "kernel_block": "x"},
     ("--kv-groups=full", "--kernel-block=x")),
    ({"kv_groups": "full", "max_model_len": -3},
     ("--kv-groups=full", "--max-model-len=-3")),
    ({"kv_groups": "full", "kv_cache_dtype": "int4"},
     ("--kv-groups=full", "--kv-cache-dtype=int4")),
    ({"kv_groups": "full", "mamba_cache_mode": "all"},
     ("--kv-groups=full", "--mamba-cache-mode=all")),
    ({"kv_groups": "full,bad"}, ("--kv-groups=full,bad",)),
    ({"kv_groups": "mamba=100"}, ("--kv-groups=mamba=100",)),
    ({"model_config": "/nonexistent/config.json"},
     ("--model-config=/nonexistent/config.json",)),
)


def test_refusals(cli):
    for kw, args in REFUSALS:
        status, out, err = cli("kvslot", "groups", "-f", "json", *args)
        assert status != 0 and out == b"", args
        same_refusal(lambda: kvslot.groups(**kw), status, err, " ".join(args))
