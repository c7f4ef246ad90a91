"""kvtools.kvattn.gen against kvattn gen on random shapes, seeds,
patterns, dtypes, layouts and model configs: Q, K and V equal, byte for
byte, to the .npy files the program writes with -q, -k, -v, and the same
refusals with the same messages."""
import os

import numpy as np

from kvtools import kvattn
from kvtools.testing import model_configs
from conftest import CASES, npy_stream, same_array, same_refusal

PATTERNS = ["random", "rope", "local", "sink", "stripes", "mix"]
# per-head configs (an MLA config's set: test_kvattn_gen_mla.py)
CONFIGS = ["llama-3.1-8b", "mistral-7b-v0.1", "qwen2.5-7b", "gemma-3-1b",
           "gpt2", "phi-2", "opt-125m"]


def random_case(rng, configs):
    kw, args = {}, []
    names = [c for c in CONFIGS if c in configs]
    if names and rng.random() < 0.3:
        cfg = configs[str(rng.choice(names))]
        kw["model_config"] = cfg
        args.append("--model-config=" + cfg)
        S = int(rng.integers(1, 9))
        shape = [int(rng.integers(1, 3)), S]
    else:
        H = int(rng.choice([1, 2, 3, 4, 6, 8]))
        S = int(rng.integers(1, 40))
        D = int(rng.choice([2, 4, 6, 8, 16, 32, 64] + ([5] if rng.random() < 0.05 else [])))
        shape = [int(rng.integers(1, 4)), H, S, D]
        if rng.random() < 0.5:
            kvh = int(rng.choice([d for d in range(1, H + 1) if H % d == 0]))
            if rng.random() < 0.05:
                kvh = H + 1 if H > 1 else 0
            kw["kv_heads"] = kvh
            args.append("--kv-heads=%d" % kvh)
    kw["shape"] = shape
    args.append("--shape=" + ",".join(map(str, shape)))
    if rng.random() < 0.4:
        n = S + int(rng.integers(-1 if rng.random() < 0.1 else 0, 20))
        kw["kv_len"] = n
        args.append("--kv-len=%d" % n)
    if rng.random() < 0.8:
        p = str(rng.choice(PATTERNS + (["diag"] if rng.random() < 0.05 else [])))
        kw["pattern"] = p
        args.append("--pattern=" + p)
    if rng.random() < 0.8:
        sd = int(rng.integers(0, 2**62))
        kw["seed"] = sd
        args.append("--seed=%d" % sd)
    if rng.random() < 0.3:
        n = int(rng.integers(0, 6))
        kw["sinks"] = n
        args.append("--sinks=%d" % n)
    if rng.random() < 0.5:
        dt = str(rng.choice(["f32", "f16", "bf16", "f64"] +
                            (["i32"] if rng.random() < 0.05 else [])))
        kw["dtype"] = dt
        args.append("--dtype=" + dt)
    if rng.random() < 0.4:
        kw["layout"] = "thd"
        args.append("--layout=thd")
    if rng.random() < 0.3:
        j = int(rng.integers(1, 3))
        kw["j"] = j
        args.append("-j%d" % j)
    return kw, args


def test_gen_random(cli, tmp_path):
    rng = np.random.default_rng(6060)
    configs = model_configs()
    n = CASES
    cases = []
    for c in range(n):
        kw, args = random_case(rng, configs)
        files = [str(tmp_path / ("%s%d.npy" % (x, c))) for x in "qkv"]
        cases.append((kw, args + ["-q", files[0], "-k", files[1], "-v", files[2]], files))
    results = cli.many([("kvattn", "gen") + tuple(a) for _, a, _ in cases])
    ok = 0
    for (kw, args, files), (status, out, err) in zip(cases, results):
        what = "kvattn gen " + " ".join(args)
        assert out == b"", what
        if status:
            same_refusal(lambda: kvattn.gen(**kw), status, err, what)
            continue
        got = kvattn.gen(**kw)
        assert list(got) == ["q", "k", "v"], what
        for name, path in zip("qkv", files):
            with open(path, "rb") as f:
                ref = npy_stream(f.read())
            assert len(ref) == 1, what
            same_array(got[name], ref[0], what + " " + name)
            os.unlink(path)
        ok += 1
    assert ok >= n // 2


def test_gen_stream_order(cli):
    """Without -q, -k, -v the program's stream is Q, K, V in that order."""
    status, out, err = cli("kvattn", "gen", "--shape=2,4,5,8", "--kv-heads=2",
                           "--seed=9", "-f", "npy")
    assert status == 0, err
    got = kvattn.gen(shape="2,4,5,8", kv_heads=2, seed=9)
    for (name, a), r in zip(got.items(), npy_stream(out)):
        same_array(a, r, name)


def test_gen_refusals(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = (
        ({}, ()),
        ({"shape": "1,2,3"}, ("--shape=1,2,3",)),
        ({"shape": "1,2,x,4"}, ("--shape=1,2,x,4",)),
        ({"shape": "1,4,3,8", "kv_heads": 3}, ("--shape=1,4,3,8", "--kv-heads=3")),
        ({"shape": "1,4,3,8", "kv_len": 2}, ("--shape=1,4,3,8", "--kv-len=2")),
        ({"shape": "1,4,3,8", "pattern": "x"}, ("--shape=1,4,3,8", "--pattern=x")),
        ({"shape": "1,4,3,8", "seed": -1}, ("--shape=1,4,3,8", "--seed=-1")),
        ({"shape": "1,4,3,8", "sinks": 0}, ("--shape=1,4,3,8", "--sinks=0")),
        ({"shape": "1,4,3,8", "dtype": "i8"}, ("--shape=1,4,3,8", "--dtype=i8")),
        ({"shape": "1,4,3,8", "layout": "x"}, ("--shape=1,4,3,8", "--layout=x")),
        ({"shape": "1,4,3,8", "j": 2000}, ("--shape=1,4,3,8", "-j2000")),
        ({"shape": "1,4,3,8", "max_mem": "x"}, ("--shape=1,4,3,8", "--max-mem=x")),
        ({"shape": "1,4,300,8", "max_mem": "1k"}, ("--shape=1,4,300,8", "--max-mem=1k")),
        ({"shape": "1,3", "model_config": str(bad)},
         ("--shape=1,3", "--model-config=" + str(bad))),
    )
    for kw, args in cases:
        status, out, err = cli("kvattn", "gen", *args)
        what = "kvattn gen " + " ".join(args)
        assert status != 0 and out == b"", what
        same_refusal(lambda: kvattn.gen(**kw), status, err, what)


def test_max_mem_named_once(cli, tmp_path):
    """A bad max_mem names --max-mem once, in kvattn gen and its other
    subcommands as in the other programs, and the package says the same."""
    files = [str(tmp_path / (x + ".npy")) for x in "qkv"]
    status, out, err = cli("kvattn", "gen", "--shape=1,2,3,4", "-q", files[0],
                           "-k", files[1], "-v", files[2])
    assert status == 0, err
    q, k, v = (np.load(f) for f in files)
    calls = (
        ("gen", lambda: kvattn.gen(shape="1,2,3,4", max_mem="x"),
         ("--shape=1,2,3,4",)),
        ("run", lambda: kvattn.run(q, k, v, max_mem="x"),
         ("-q", files[0], "-k", files[1], "-v", files[2])),
        ("cmp", lambda: kvattn.cmp(q, q, max_mem="x"), (files[0], files[0])),
    )
    for sub, call, args in calls:
        status, out, err = cli("kvattn", sub, *args, "--max-mem=x")
        assert err == "kvattn %s: --max-mem: bad size 'x'" % sub, err
        same_refusal(call, status, err, "kvattn %s --max-mem=x" % sub)


def toy_case(rng, configs, path):
    """(keywords, the program's arguments) of a random --toy call."""
    kw, args = {"toy": True}, ["--toy"]
    names = [c for c in CONFIGS if c in configs]
    T = int(rng.integers(1, 9))
    if names and rng.random() < 0.25:
        cfg = configs[str(rng.choice(names))]
        kw["model_config"] = cfg
        args.append("--model-config=" + cfg)
        shape = [1, T]
    else:
        H = int(rng.choice([1, 2, 4]))
        D = int(rng.choice([2, 4, 8, 16] + ([3] if rng.random() < 0.05 else [])))
        shape = [1 if rng.random() < 0.95 else 2, H, T, D]
        if rng.random() < 0.5:
            kvh = int(rng.choice([d for d in range(1, H + 1) if H % d == 0]))
            kw["kv_heads"] = kvh
            args.append("--kv-heads=%d" % kvh)
    kw["shape"] = shape
    args.append("--shape=" + ",".join(map(str, shape)))
    n = T if rng.random() < 0.95 else T + 1
    ids = [int(x) for x in rng.integers(0, 50000, n)]
    with open(path, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    kw["tokens"] = path if rng.random() < 0.5 else ids
    args.append("--tokens=" + path)
    opts = (("pos", "--pos", lambda: int(rng.integers(0, 5000))),
            ("layers", "--layers", lambda: int(rng.integers(1, 4))),
            ("layer", "--layer", lambda: int(rng.integers(0, 3))),
            ("embed_dim", "--embed-dim", lambda: int(rng.integers(1, 40))),
            ("rope", "--rope", lambda: str(rng.choice(["neox", "gptj", "none"]))),
            ("rope_theta", "--rope-theta",
             lambda: float(rng.choice([500.0, 10000.0, 1e6]))),
            ("rotary_dim", "--rotary-dim", lambda: int(rng.choice([2, 4]))),
            ("seed", "--seed", lambda: int(rng.integers(0, 2**40))),
            ("dtype", "--dtype", lambda: str(rng.choice(["f32", "f16", "bf16", "f64"]))),
            ("layout", "--layout", lambda: "thd"))
    for key, opt, val in opts:
        if rng.random() < 0.35:
            v = val()
            kw[key] = v
            args.append("%s=%s" % (opt, v))
    return kw, args


def few_layers(configs, d):
    """The CONFIGS of configs with 2 or 3 of their layers, in d: the toy's
    layers are alike, and the 12 to 32 of a real model made each case's
    KV (--kv) that many times larger."""
    import json
    out = {}
    for i, name in enumerate(c for c in CONFIGS if c in configs):
        with open(configs[name]) as f:
            j = json.load(f)
        for k in ("num_hidden_layers", "n_layer"):
            if k in j:
                j[k] = 2 + i % 2
        out[name] = os.path.join(d, name + ".json")
        with open(out[name], "w") as f:
            json.dump(j, f)
    return out


def test_gen_toy_random(cli, tmp_path):
    rng = np.random.default_rng(6161)
    configs = few_layers(model_configs(), str(tmp_path))
    n = CASES
    cases = []
    for c in range(n):
        kw, args = toy_case(rng, configs, str(tmp_path / ("t%d.txt" % c)))
        files = [str(tmp_path / ("%s%d.npy" % (x, c))) for x in ("q", "k", "v", "kv")]
        kw["kv"] = True
        cases.append((kw, args + ["-q", files[0], "-k", files[1], "-v", files[2],
                                  "--kv", files[3]], files))
    results = cli.many([("kvattn", "gen") + tuple(a) for _, a, _ in cases])
    ok = 0
    for (kw, args, files), (status, out, err) in zip(cases, results):
        what = "kvattn gen " + " ".join(args)
        assert out == b"", what
        if status:
            same_refusal(lambda: kvattn.gen(**kw), status, err, what)
            continue
        got = kvattn.gen(**kw)
        assert list(got) == ["q", "k", "v", "kv"], what
        for name, path in zip(("q", "k", "v", "kv"), files):
            with open(path, "rb") as f:
                ref = npy_stream(f.read())
            same_array(got[name], ref[0], what + " " + name)
        ok += 1
    assert ok >= n // 3


def test_gen_toy_options_need_toy(cli):
    status, out, err = cli("kvattn", "gen", "--shape=1,2,3,4", "--layers=2")
    assert status == 2 and out == b""
    same_refusal(lambda: kvattn.gen(shape="1,2,3,4", layers=2), status, err,
                 "--layers without --toy")
