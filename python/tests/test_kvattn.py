"""kvtools.kvattn against kvattn: run (dense, thd, masks, dtypes),
merge, cmp and bound on random cases, equal byte for byte (the reports
to the digits the program prints); threads; errors."""
import os
import threading

import numpy as np
import pytest

import kvtools
from kvtools import kvattn
from conftest import CASES, same_array


def bf16(x):
    """f32 values rounded to bf16 (nearest even), as '<V2' arrays."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u.view("V2")


def rand(rng, shape, dt):
    x = rng.standard_normal(shape).astype(np.float32)
    if dt == "bf16":
        return bf16(x)
    return x.astype({"f16": np.float16, "f32": np.float32, "f64": np.float64}[dt])


def attn_case(rng, d, c):
    """(python kwargs, program args) of one random run."""
    dt = ["f32", "f16", "bf16", "f64"][int(rng.integers(0, 4))]
    D = int(rng.choice([4, 8, 16, 32]))
    hkv = int(rng.integers(1, 3))
    hq = hkv * int(rng.integers(1, 3))
    kw, args = {}, ["run"]
    if rng.random() < 0.3:
        n = int(rng.integers(1, 4))
        ql = [int(x) for x in rng.integers(1, 7, n)]
        kl = [q + int(rng.integers(0, 5)) for q in ql]
        q = rand(rng, (sum(ql), hq, D), dt)
        k = rand(rng, (sum(kl), hkv, D), dt)
        v = rand(rng, (sum(kl), hkv, D), dt)
        kw.update(layout="thd", q_lens=ql, kv_lens=kl)
        args += ["--layout", "thd", "--q-lens", ",".join(map(str, ql)),
                 "--kv-lens", ",".join(map(str, kl))]
    else:
        B, Lq = int(rng.integers(1, 3)), int(rng.integers(1, 20))
        Lk = Lq + int(rng.integers(0, 20))
        q = rand(rng, (B, hq, Lq, D), dt)
        k = rand(rng, (B, hkv, Lk, D), dt)
        v = rand(rng, (B, hkv, Lk, D), dt)
    if rng.random() < 0.5:
        kw["causal"] = True
        args.append("--causal")
    if rng.random() < 0.2:
        kw["window"] = int(rng.integers(1, 8))
        args += ["--window", kw["window"]]
    if rng.random() < 0.2:
        kw["chunk_size"] = int(rng.integers(1, 12))
        args += ["--chunk-size", kw["chunk_size"]]
    if rng.random() < 0.2:
        kw["scale"] = float(rng.uniform(0.05, 1.0))
        args += ["--scale", repr(kw["scale"])]
    if rng.random() < 0.3:
        kw["out_dtype"] = ["f32", "f16", "bf16", "f64"][int(rng.integers(0, 4))]
        args += ["--out-dtype", kw["out_dtype"]]
    if rng.random() < 0.2:
        kw["lse_base"] = "2"
        args += ["--lse-base", "2"]
    if rng.random() < 0.3:
        kw["jobs"] = int(rng.integers(1, 5))
        args += ["-j", kw["jobs"]]
    for name, a in (("q", q), ("k", k), ("v", v)):
        p = os.path.join(d, "%s%d.npy" % (name, c))
        np.save(p, a)
        args += ["-" + name, p]
    args += ["-o", os.path.join(d, "o%d.npy" % c), "--lse", os.path.join(d, "l%d.npy" % c)]
    return (q, k, v), kw, args


def test_run_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(21)
    cases = [attn_case(rng, str(tmp_path), c) for c in range(CASES)]
    results = cli.many([("kvattn",) + tuple(a) for _, _, a in cases])
    n_ok = 0
    for c, ((qkv, kw, args), (status, _, err)) in enumerate(zip(cases, results)):
        what = "kvattn " + " ".join(map(str, args))
        if status != 0:
            with pytest.raises(kvtools.Error) as ei:
                kvattn.run(*qkv, **kw)
            assert str(ei.value) == err, what
            continue
        out, lse = kvattn.run(*qkv, **kw)
        same_array(out, np.load(os.path.join(tmp_path, "o%d.npy" % c)), what)
        same_array(lse, np.load(os.path.join(tmp_path, "l%d.npy" % c)), what + " lse")
        n_ok += 1
    assert n_ok > CASES // 2


def test_merge_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(22)
    cases = []
    for c in range(CASES):
        n = int(rng.integers(2, 4))
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5)))
        D = int(rng.integers(1, 9))
        parts, args = [], ["merge"]
        for i in range(n):
            o = rng.standard_normal(shape + (D,)).astype(np.float32)
            l = (rng.standard_normal(shape) * 3).astype(np.float32)
            if rng.random() < 0.2:
                l[0] = -np.inf
            parts.append((o, l))
            for nm, a in (("o", o), ("l", l)):
                p = os.path.join(tmp_path, "%s%d_%d.npy" % (nm, c, i))
                np.save(p, a)
                args.append(p)
        kw = {}
        if rng.random() < 0.3:
            kw["out_dtype"] = "f16"
            args += ["--out-dtype", "f16"]
        r = rng.random()
        if r < 0.5:
            # one sink per query head (the parts' middle axis); now and
            # then the wrong length, an error
            hq = shape[1] + (1 if rng.random() < 0.05 else 0)
            sk = (rng.standard_normal(hq) * 2).astype(
                [np.float32, np.float16, np.float64][
                    int(rng.choice(3, p=[0.6, 0.35, 0.05]))])
            p = os.path.join(tmp_path, "s%d.npy" % c)
            np.save(p, sk)
            kw["sinks"] = sk
            args += ["--sinks", p]
        if r < 0.25 or r > 0.97:
            kw["parts_have_sinks"] = True
            args.append("--parts-have-sinks")
        args += ["-o", os.path.join(tmp_path, "m%d.npy" % c),
                 "--lse-out", os.path.join(tmp_path, "ml%d.npy" % c)]
        cases.append((parts, kw, args))
    results = cli.many([("kvattn",) + tuple(a) for _, _, a in cases])
    n_ok = n_sinks = 0
    for c, ((parts, kw, args), (status, _, err)) in enumerate(zip(cases, results)):
        what = "kvattn " + " ".join(map(str, args))
        if status != 0:
            with pytest.raises(kvtools.Error) as ei:
                kvattn.merge(parts, **kw)
            assert str(ei.value) == err, what
            assert ei.value.status == status, what
            continue
        o, l = kvattn.merge(parts, **kw)
        n_ok += 1
        n_sinks += "sinks" in kw
        same_array(o, np.load(os.path.join(tmp_path, "m%d.npy" % c)), "merge")
        same_array(l, np.load(os.path.join(tmp_path, "ml%d.npy" % c)), "merge lse")
    assert n_ok > CASES // 8 and n_sinks > CASES // 40


def report(text):
    return dict(line.split(": ", 1) for line in text.decode().splitlines())


def test_cmp_and_bound_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(23)
    calls, cases = [], []
    for c in range(CASES):
        a = rng.standard_normal((2, 3, 5)).astype(np.float32)
        b = a + rng.standard_normal(a.shape).astype(np.float32) * 1e-4
        pa, pb = os.path.join(tmp_path, "a%d.npy" % c), os.path.join(tmp_path, "b%d.npy" % c)
        np.save(pa, a)
        np.save(pb, b)
        atol = float(rng.choice([1e-8, 1e-5, 1e-3]))
        calls.append(("kvattn", "cmp", pa, pb, "--atol", repr(atol)))
        calls.append(("kvattn", "bound", "--all", "-q", pa, "-k", pb, "-v", pa))
        cases.append((a, b, atol))
    results = cli.many(calls)
    for c, (a, b, atol) in enumerate(cases):
        st, out, _ = results[2 * c]
        r = kvattn.cmp(a, b, atol=atol)
        rep = report(out)
        assert (st == 0) == r.close
        for f in ("max_abs", "max_rel", "rmse", "cosine"):
            assert "%.9g" % r[f] == rep[f], f
        st, out, _ = results[2 * c + 1]
        assert st == 0
        bd = kvattn.bound(a, b, a)
        rep = report(out)
        assert "%.3g" % bd["out"] == rep["out"]
        assert "%.3g" % bd["lse"] == rep["lse"]
        assert str(bd["keys"]) == rep["keys"]


def test_threads_give_the_same_result():
    rng = np.random.default_rng(24)
    q = rng.standard_normal((2, 4, 64, 32)).astype(np.float32)
    k = rng.standard_normal((2, 2, 96, 32)).astype(np.float32)
    v = rng.standard_normal((2, 2, 96, 32)).astype(np.float32)
    ref_o, ref_l = kvattn.run(q, k, v, causal=True, jobs=1)
    ref_m = kvtools.kvmask.causal(n=300, dtype="f16", jobs=1)
    got, errors = [], []

    def work(j):
        try:
            for _ in range(10):
                o, l = kvattn.run(q, k, v, causal=True, jobs=j)
                m = kvtools.kvmask.causal(n=300, dtype="f16", jobs=j)
                got.append((o.tobytes() == ref_o.tobytes(),
                            l.tobytes() == ref_l.tobytes(),
                            m.tobytes() == ref_m.tobytes()))
        except Exception as e:          # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(j,)) for j in (1, 2, 3, 0)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert len(got) == 40 and all(all(g) for g in got)


def test_torch_like_inputs_through_array_interface():
    class Wrapped:                      # anything with __array__
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None):
            return self.a

    rng = np.random.default_rng(25)
    q = rng.standard_normal((1, 1, 4, 8)).astype(np.float32)
    o1, _ = kvattn.run(q, q, q)
    o2, _ = kvattn.run(Wrapped(q), Wrapped(q), Wrapped(q))
    assert o1.tobytes() == o2.tobytes()
    o3, _ = kvattn.run(np.asfortranarray(q), q, q)      # copied to C order
    assert o1.tobytes() == o3.tobytes()


def test_errors(capfd):
    q = np.zeros((1, 1, 4, 8), np.float32)
    with pytest.raises(kvtools.Error) as ei:
        kvattn.run(q, q[..., :4], q)
    assert str(ei.value).startswith("kvattn: ")
    with pytest.raises(kvtools.Error) as ei:
        kvattn.run(q)
    assert ei.value.status == 2
    with pytest.raises(kvtools.Error):
        kvattn.cmp(q, q[0])
    with pytest.raises(ValueError):
        kvattn.run(q, q, q, window=0)
    with pytest.raises(ValueError):
        kvattn.run(q, q, q, chunk_size=0)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_paged_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(26)
    cases = []
    for c in range(CASES):
        dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
        bs = int(rng.choice([1, 4, 16]))
        B, hkv, D = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.choice([8, 16]))
        hq = hkv * int(rng.integers(1, 3))
        sl = [int(x) for x in rng.integers(1, 40, B)]
        cols = max((s + bs - 1) // bs for s in sl)
        nb = B * cols + 1
        table = rng.permutation(np.arange(1, nb))[:B * cols].reshape(B, cols)
        cache = rand(rng, (2, nb, bs, hkv, D), dt)
        lq = int(rng.integers(1, min(sl) + 1))
        q = rand(rng, (B, hq, lq, D), dt)
        kw = dict(seq_lens=sl)
        args = ["run", "--seq-lens", ",".join(map(str, sl))]
        if rng.random() < 0.5:
            kw["causal"] = True
            args.append("--causal")
        paths = {}
        for name, a in (("q", q), ("cache", cache), ("bt", table)):
            paths[name] = os.path.join(tmp_path, "%s%d.npy" % (name, c))
            np.save(paths[name], a)
        args += ["-q", paths["q"], "--kv-cache", paths["cache"], "--block-table", paths["bt"],
                 "-o", os.path.join(tmp_path, "o%d.npy" % c),
                 "--lse", os.path.join(tmp_path, "l%d.npy" % c)]
        cases.append((q, cache, table, kw, args))
    results = cli.many([("kvattn",) + tuple(a) for *_, a in cases])
    for c, ((q, cache, table, kw, args), (status, _, err)) in enumerate(zip(cases, results)):
        what = "kvattn " + " ".join(map(str, args))
        assert status == 0, what + ": " + err
        out, lse = kvattn.paged(q, cache, table, **kw)
        same_array(out, np.load(os.path.join(tmp_path, "o%d.npy" % c)), what)
        same_array(lse, np.load(os.path.join(tmp_path, "l%d.npy" % c)), what + " lse")
