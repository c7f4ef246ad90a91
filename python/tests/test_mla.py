"""kvtools.kvattn.mla against kvattn mla: the absorbed form (dense and
sparse, projected or not, on an FP8 latent cache or not) and the naive
form on random cases, byte for byte."""
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvattn
from conftest import CASES, same_array
from test_kvattn import rand


def absorbed_case(rng, d, c):
    dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
    Dl, R = int(rng.choice([16, 32])), int(rng.choice([8, 16]))
    H, bs = int(rng.integers(1, 5)), int(rng.choice([1, 4, 16]))
    n = int(rng.integers(1, 4))
    sl = [int(x) for x in rng.integers(1, 40, n)]
    ql = [int(rng.integers(1, min(4, s) + 1)) for s in sl]
    cols = max((s + bs - 1) // bs for s in sl)
    nb = n * cols + 1
    bt = rng.permutation(np.arange(1, nb))[:n * cols].reshape(n, cols)
    q = rand(rng, (sum(ql), H, Dl + R), dt)
    cache = rand(rng, (nb, bs, 1, Dl + R), dt)
    fp8 = rng.random() < 0.25      # an FP8 latent cache: finite bytes, one scale
    if fp8:
        cache = (rng.integers(0, 0x78, (nb, bs, 1, Dl + R)) |
                 (rng.integers(0, 2, (nb, bs, 1, Dl + R)) << 7)).astype(np.uint8)
    kw = dict(kv_cache=cache, block_table=bt, seq_lens=sl, q_lens=ql,
              kv_lora_rank=Dl, scale=float(rng.uniform(0.05, 0.3)))
    files = {"q": q, "c": cache, "bt": bt}
    args = ["mla", "--seq-lens", ",".join(map(str, sl)), "--q-lens",
            ",".join(map(str, ql)), "--kv-lora-rank", Dl, "--scale", repr(kw["scale"])]
    if fp8:
        kw["kv_dtype"] = ["fp8_e4m3", "fp8_e5m2"][int(rng.integers(0, 2))]
        kw["k_scale"] = float(np.float32(rng.uniform(0.001, 0.1)))
        args += ["--kv-dtype", kw["kv_dtype"], "--k-scale", repr(kw["k_scale"])]
    if rng.random() < 0.5:
        kw["causal"] = True
        args.append("--causal")
    if "causal" not in kw and rng.random() < 0.3:       # sparse: top-k rows
        K = int(rng.integers(1, 6))
        rows = []
        for r, n_q in enumerate(ql):
            for _ in range(n_q):
                pick = rng.permutation(sl[r])[:K]
                rows.append(list(pick) + [-1] * (K - len(pick)))
        kw["topk_indices"] = np.array(rows, np.int32)
        files["topk"] = kw["topk_indices"]
    if rng.random() < 0.3:
        kw["w_uv"] = rand(rng, (H, Dl, int(rng.choice([8, 16]))), dt)
        files["wuv"] = kw["w_uv"]
    if rng.random() < 0.3:
        kw["out_dtype"] = "f32"
        args += ["--out-dtype", "f32"]
    p = {}
    for name, a in files.items():
        p[name] = os.path.join(d, "%s%d.npy" % (name, c))
        np.save(p[name], a)
    args += ["-q", p["q"], "--kv-cache", p["c"], "--block-table", p["bt"]]
    if "wuv" in p:
        args += ["--w-uv", p["wuv"]]
    if "topk" in p:
        args += ["--topk-indices", p["topk"]]
    return q, kw, args


def naive_case(rng, d, c):
    dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
    Dl, R, P, Vd = 16, 8, int(rng.choice([8, 16])), int(rng.choice([8, 16]))
    H = int(rng.integers(1, 4))
    T = int(rng.integers(1, 12))
    Tk = T + int(rng.integers(0, 10))
    q = rand(rng, (T, H, P + R), dt)
    files = {"q": q, "ckv": rand(rng, (Tk, Dl), dt), "kpe": rand(rng, (Tk, R), dt),
             "wuk": rand(rng, (H, Dl, P), dt), "wuv": rand(rng, (H, Dl, Vd), dt)}
    kw = dict(c_kv=files["ckv"], k_pe=files["kpe"], w_uk=files["wuk"], w_uv=files["wuv"],
              q_lens=[T], kv_lens=[Tk])
    args = ["mla", "--q-lens", T, "--kv-lens", Tk]
    if rng.random() < 0.5:
        kw["causal"] = True
        args.append("--causal")
    p = {}
    for name, a in files.items():
        p[name] = os.path.join(d, "n%s%d.npy" % (name, c))
        np.save(p[name], a)
    args += ["-q", p["q"], "--c-kv", p["ckv"], "--k-pe", p["kpe"], "--w-uk", p["wuk"],
             "--w-uv", p["wuv"]]
    return q, kw, args


def test_mla_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(51)
    cases = []
    for c in range(CASES):
        q, kw, args = (absorbed_case if c % 3 else naive_case)(rng, str(tmp_path), c)
        args += ["-o", os.path.join(tmp_path, "o%d.npy" % c),
                 "--lse", os.path.join(tmp_path, "l%d.npy" % c)]
        cases.append((q, kw, args))
    results = cli.many([("kvattn",) + tuple(a) for _, _, a in cases])
    n_ok = 0
    for c, ((q, kw, args), (status, _, err)) in enumerate(zip(cases, results)):
        what = "kvattn " + " ".join(map(str, args))
        if status != 0:
            with pytest.raises(kvtools.Error) as ei:
                kvattn.mla(q, **kw)
            if "'" not in err:
                assert str(ei.value) == err, what
            continue
        out, lse = kvattn.mla(q, **kw)
        same_array(out, np.load(os.path.join(tmp_path, "o%d.npy" % c)), what)
        same_array(lse, np.load(os.path.join(tmp_path, "l%d.npy" % c)), what + " lse")
        n_ok += 1
    assert n_ok > len(cases) // 2


def test_mla_usage_errors(capfd):
    q = np.zeros((1, 1, 24), np.float32)
    with pytest.raises(kvtools.Error) as ei:
        kvattn.mla(q)
    assert ei.value.status == 2
    with pytest.raises(kvtools.Error) as ei:
        kvattn.mla(q, kv_cache=np.zeros((2, 4, 1, 24), np.float32),
                   block_table=[[1]], seq_lens=[3], kv_lora_rank=16)
    assert "needs --model-config or --scale" in str(ei.value)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
