"""kvtools.kvchunk.info against kvchunk info: random namespaces (shapes,
model configs, RoPE options, ids) equal value for value (-f json) and as
text; refusals with the program's message."""
import json

import numpy as np

from kvtools import kvchunk
from kvtools.testing import model_configs
from conftest import CASES, same_refusal

CONFIGS = sorted(model_configs().values())
SCALINGS = ["none", "linear:2", "ntk:4", "dynamic:2", "linear:0",
            "yarn:factor=4,original_max_position_embeddings=2048",
            "llama3:factor=8,low_freq_factor=1,high_freq_factor=4,"
            "original_max_position_embeddings=8192", "longrope:2"]


def _case(rng):
    kw = {}
    if CONFIGS and rng.random() < 0.4:
        kw["model_config"] = CONFIGS[int(rng.integers(0, len(CONFIGS)))]
    if "model_config" not in kw or rng.random() < 0.2:
        if rng.random() < 0.95:
            kw["shape"] = "%d,%d,%d" % (rng.integers(1, 80), rng.integers(1, 16),
                                        rng.choice([32, 64, 96, 128, 7]))
    if rng.random() < 0.3:
        kw["dtype"] = str(rng.choice(["f16", "bf16", "f32", "i8"]))
    if rng.random() < 0.3:
        kw["rope"] = str(rng.choice(["neox", "gptj", "none", "learned", "x"]))
    if rng.random() < 0.3:
        kw["rope_theta"] = str(rng.choice(["10000", "500000", "1e6", "-1"]))
    if rng.random() < 0.2:
        kw["rotary_dim"] = int(rng.choice([16, 32, 64, 3]))
    if rng.random() < 0.3:
        kw["rope_scaling"] = str(rng.choice(SCALINGS))
    if rng.random() < 0.15:
        kw["nope_layers"] = str(rng.choice(["0", "1,3", "0,200"]))
    if rng.random() < 0.2:
        kw["chunk_context"] = str(rng.choice(["sys", "none", "all"]))
    if rng.random() < 0.2:
        kw["base_policy"] = str(rng.choice(["context", "zero", "free", "x"]))
    for k in ("model", "tokenizer", "lora", "salt"):
        if rng.random() < 0.15:
            kw[k] = "%s-%d" % (k, rng.integers(0, 1000))
    return kw


def test_info_equals_cli(cli):
    rng = np.random.default_rng(53)
    cases = [_case(rng) for _ in range(CASES)]
    fmts = [str(rng.choice(["json", "text"])) for _ in cases]
    calls = []
    for kw, fmt in zip(cases, fmts):
        args = ["info", "-f", fmt]
        for k, v in kw.items():
            args += ["--" + k.replace("_", "-"), v]
        calls.append(("kvchunk",) + tuple(args))
    n_ok = 0
    for kw, fmt, call, (status, out, err) in zip(cases, fmts, calls,
                                                 cli.many(calls)):
        what = " ".join(map(str, call))
        if status != 0:
            same_refusal(lambda: kvchunk.info(format=fmt, **kw), status, err,
                         what)
            continue
        got = kvchunk.info(format=fmt, **kw)
        if fmt == "json":
            assert got == json.loads(out), what
            assert list(got) == list(json.loads(out)), what     # key order
        else:
            assert got == out.decode(), what
        n_ok += 1
    assert n_ok > len(cases) // 3      # about half are refused


def test_info_refusals(cli):
    for kw, args in [
        (dict(), []),
        (dict(format="xml", shape="1,1,8"), ["-f", "xml", "--shape", "1,1,8"]),
        (dict(shape="1,1"), ["--shape", "1,1"]),
        (dict(shape="1,1,8", rotary_dim=9), ["--shape", "1,1,8",
                                             "--rotary-dim", 9]),
        (dict(shape="1,1,8", model=""), ["--shape", "1,1,8", "--model", ""]),
        (dict(shape="1,1,8", max_mem="x"), ["--shape", "1,1,8",
                                             "--max-mem", "x"]),
        (dict(shape="1,1,8", max_mem="0"), ["--shape", "1,1,8",
                                             "--max-mem", "0"]),
    ]:
        status, out, err = cli("kvchunk", "info", *args)
        assert status == 2 and out == b"", args
        same_refusal(lambda: kvchunk.info(**kw), status, err, str(args))
