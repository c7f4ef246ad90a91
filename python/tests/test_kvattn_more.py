"""kvtools.kvattn's variants of run (softcap, alibi, alibi_slopes, sinks,
an FP8 cache with its scales; dense, thd and paged), quant and index
against kvattn on random cases: equal byte for byte, and the same
refusals with the same messages (a message naming a file aside: the
program names the path, the package the argument)."""
import os

import numpy as np

from kvtools import kvattn
from conftest import CASES, npy_stream, same_array, same_refusal


def bf16(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return u.view("V2")


def rand(rng, shape, dt, scale=1.0):
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    if dt == "bf16":
        return bf16(x)
    return x.astype({"f16": np.float16, "f32": np.float32}[dt])


def save(d, name, a, args, opt):
    p = os.path.join(d, name + ".npy")
    np.save(p, a)
    args += [opt, p]


def variant_case(rng, d, c):
    """(python args, kwargs, program args, output path) of one run with
    variants, dense (bhsd or thd) or paged."""
    dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
    D = int(rng.choice([4, 8, 16]))
    hkv = int(rng.integers(1, 3))
    hq = hkv * int(rng.integers(1, 3))
    fp8 = rng.random() < 0.3
    kw, args, pos = {}, ["run"], []
    form = int(rng.integers(0, 3))
    if form == 2:                                   # paged
        bs, nb = int(rng.choice([2, 4])), int(rng.integers(4, 9))
        n = int(rng.integers(1, 3))
        sl = [int(x) for x in rng.integers(1, bs * 3, n)]
        q = rand(rng, (n, hq, D), dt)
        cache = rand(rng, (2, nb, bs, hkv, D), "f32" if fp8 else dt)
        bt = np.stack([rng.permutation(nb)[:3] for _ in range(n)]).astype(np.int64)
        pos = [q]
        if fp8:
            cache = rng.integers(0, 256, cache.shape).astype(np.uint8)
        kw.update(kv_cache=cache, block_table=bt, seq_lens=sl)
        save(d, "c%d" % c, cache, args, "--kv-cache")
        save(d, "t%d" % c, bt, args, "--block-table")
        args += ["--seq-lens", ",".join(map(str, sl))]
    else:
        if form == 1:
            n = int(rng.integers(1, 3))
            ql = [int(x) for x in rng.integers(1, 6, n)]
            kl = [x + int(rng.integers(0, 4)) for x in ql]
            qs, ks = (sum(ql), hq, D), (sum(kl), hkv, D)
            kw.update(layout="thd", q_lens=ql, kv_lens=kl)
            args += ["--layout", "thd", "--q-lens", ",".join(map(str, ql)),
                     "--kv-lens", ",".join(map(str, kl))]
        else:
            lq = int(rng.integers(1, 12))
            qs, ks = (1, hq, lq, D), (1, hkv, lq + int(rng.integers(0, 10)), D)
        q = rand(rng, qs, dt)
        k, v = rand(rng, ks, dt), rand(rng, ks, dt)
        if fp8:
            k = rng.integers(0, 256, ks).astype(np.uint8)
            v = rng.integers(0, 256, ks).astype(np.uint8)
            if rng.random() < 0.05:                 # refused: not bytes
                v = v.astype(np.int16)
        pos = [q, k, v]
        save(d, "k%d" % c, k, args, "-k")
        save(d, "v%d" % c, v, args, "-v")
    save(d, "q%d" % c, q, args, "-q")
    if rng.random() < 0.5:
        kw["causal"] = True
        args.append("--causal")
    if fp8:
        kw["kv_dtype"] = ["fp8", "fp8_e4m3", "fp8_e5m2"][int(rng.integers(0, 3))]
        args += ["--kv-dtype", kw["kv_dtype"]]
    for opt in ("k_scale", "v_scale"):
        if rng.random() < (0.5 if fp8 else 0.03):   # without FP8: refused
            kw[opt] = float(rng.choice([0.25, 0.5, 2.0, 1e-3] * 8 + [0.0]))
            args += ["--" + opt.replace("_", "-"), repr(kw[opt])]
    if rng.random() < 0.4:
        kw["softcap"] = float(rng.choice([0.5, 5.0, 30.0] * 6 + [-1.0]))
        args += ["--softcap", repr(kw["softcap"])]
    a = rng.random()
    if a < 0.25:
        kw["alibi"] = True
        args.append("--alibi")
    if a > 0.7 or a < 0.02:                         # both: refused
        s = (rng.random(hq) * 0.5).astype(np.float32)
        kw["alibi_slopes"] = s
        save(d, "a%d" % c, s, args, "--alibi-slopes")
    if rng.random() < 0.4:
        s = rand(rng, (hq,), ["f32", "f16", "bf16"][int(rng.integers(0, 3))])
        kw["sinks"] = s
        save(d, "s%d" % c, s, args, "--sinks")
    if rng.random() < 0.3:
        kw["jobs"] = int(rng.integers(1, 4))
        args += ["-j", kw["jobs"]]
    o = os.path.join(d, "o%d.npy" % c)
    args += ["-o", o, "--lse", os.path.join(d, "l%d.npy" % c)]
    return pos, kw, args, o


def test_run_variants_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(41)
    d = str(tmp_path)
    cases = [variant_case(rng, d, c) for c in range(CASES)]
    results = cli.many([("kvattn",) + tuple(a) for _, _, a, _ in cases])
    n_ok = 0
    for c, ((pos, kw, args, o), (status, _, err)) in enumerate(zip(cases, results)):
        what = "kvattn " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: kvattn.run(*pos, **kw), status, err, what, d)
            continue
        out, lse = kvattn.run(*pos, **kw)
        same_array(out, np.load(o), what)
        same_array(lse, np.load(os.path.join(d, "l%d.npy" % c)), what + " lse")
        n_ok += 1
    assert n_ok > CASES // 2


def test_quant_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(42)
    d = str(tmp_path)
    cases = []
    for c in range(CASES):
        dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
        kw, args = {}, ["quant"]
        r = rng.random()
        shape = tuple(int(x) for x in rng.integers(1, 5, int(rng.integers(2, 4))))
        if r < 0.25:
            x = rand(rng, (2,) + tuple(int(n) for n in rng.integers(1, 4, 4)), dt)
            if rng.random() < 0.05:
                x = x[:1]                           # refused: not [2, ...]
            kw["kv_cache"] = x
            save(d, "c%d" % c, x, args, "--kv-cache")
        else:
            if r < 0.85:
                kw["k"] = rand(rng, shape, dt, 40)
                save(d, "k%d" % c, kw["k"], args, "-k")
            if r > 0.6:
                kw["v"] = rand(rng, shape, dt, 40)
                if rng.random() < 0.03:
                    kw["v"] = rng.standard_normal(shape)    # f64: refused
                save(d, "v%d" % c, kw["v"], args, "-v")
        kd = ["fp8", "fp8_e4m3", "fp8_e5m2", "fp8_per_token_head", "int8"][
            int(rng.choice(5, p=[0.25, 0.2, 0.25, 0.27, 0.03]))]
        if rng.random() > 0.02:
            kw["kv_dtype"] = kd
            args += ["--kv-dtype", kd]
        for opt in ("k_scale", "v_scale"):
            if rng.random() < 0.3:
                kw[opt] = float(rng.choice([0.5, 0.01, 3.0, -1.0]))
                args += ["--" + opt.replace("_", "-"), repr(kw[opt])]
        o = os.path.join(d, "o%d.npy" % c)
        args += ["-o", o]
        if kw.get("kv_dtype") == "fp8_per_token_head":
            args += ["--scales-out", os.path.join(d, "s%d.npy" % c)]
        cases.append((kw, args, o))
    results = cli.many([("kvattn",) + tuple(a) for _, a, _ in cases])
    n_ok = 0
    for c, ((kw, args, o), (status, _, err)) in enumerate(zip(cases, results)):
        what = "kvattn " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: kvattn.quant(**kw), status, err, what, d)
            continue
        got = kvattn.quant(**kw)
        with open(o, "rb") as f:
            ref = npy_stream(f.read())
        if kw["kv_dtype"] == "fp8_per_token_head":
            got, scales = got
            with open(os.path.join(d, "s%d.npy" % c), "rb") as f:
                rs = npy_stream(f.read())
            scales = list(scales) if isinstance(scales, tuple) else [scales]
            assert len(scales) == len(rs), what
            for a, b in zip(scales, rs):
                same_array(a, b, what + " scales")
        got = list(got) if isinstance(got, tuple) else [got]
        assert len(got) == len(ref), what
        for a, b in zip(got, ref):
            same_array(a, b, what)
        n_ok += 1
    assert n_ok > CASES // 2


def test_index_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(43)
    d = str(tmp_path)
    cases = []
    for c in range(CASES):
        dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
        tq, h, D = int(rng.integers(1, 8)), int(rng.integers(1, 4)), int(rng.choice([4, 8, 16]))
        tk = tq + int(rng.integers(-1 if rng.random() < 0.1 else 0, 12))
        q, k = rand(rng, (tq, h, D), dt), rand(rng, (max(tk, 1), D), dt)
        w = rand(rng, (tq, h), dt)
        if rng.random() < 0.03:
            w = rand(rng, (tq, h + 1), dt)          # refused
        if rng.random() < 0.03 and dt == "f32":
            q[0, 0, 0] = np.inf                     # refused
        kw, args = {}, ["index"]
        save(d, "q%d" % c, q, args, "-q")
        save(d, "k%d" % c, k, args, "-k")
        save(d, "w%d" % c, w, args, "--weights")
        kw["topk"] = int(rng.integers(1, 20)) if rng.random() > 0.02 else 0
        args += ["--topk", kw["topk"]]
        if rng.random() < 0.3:
            kw["no_causal"] = True
            args.append("--no-causal")
        if rng.random() < 0.3:
            kw["scale"] = float(rng.choice([0.1, 1.0, 0.37]))
            args += ["--scale", repr(kw["scale"])]
        if rng.random() < 0.3:
            kw["jobs"] = int(rng.integers(1, 4))
            args += ["-j", kw["jobs"]]
        o, s = os.path.join(d, "o%d.npy" % c), os.path.join(d, "s%d.npy" % c)
        args += ["-o", o, "--scores", s]
        cases.append(((q, k, w), kw, args, o, s))
    results = cli.many([("kvattn",) + tuple(a) for _, _, a, _, _ in cases])
    n_ok = 0
    for (pos, kw, args, o, s), (status, _, err) in zip(cases, results):
        what = "kvattn " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: kvattn.index(*pos, **kw), status, err, what, d)
            continue
        idx, sco = kvattn.index(*pos, scores=True, **kw)
        same_array(idx, np.load(o), what)
        same_array(sco, np.load(s), what + " scores")
        n_ok += 1
    assert n_ok > CASES // 2


def test_bound_variants_equal_cli(cli, tmp_path):
    """kvattn bound --softcap, --alibi, --alibi-slopes, --sinks: the same
    report (to the digits the program prints) and the same refusals."""
    rng = np.random.default_rng(44)
    d = str(tmp_path)
    cases = []
    for c in range(CASES):
        dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
        hq, D = int(rng.integers(1, 4)), int(rng.choice([4, 8, 16]))
        lq, lk = int(rng.integers(1, 9)), int(rng.integers(1, 20))
        q = rand(rng, (1, hq, lq, D), dt, float(rng.choice([0.5, 3.0])))
        k, v = rand(rng, (1, hq, lk, D), dt), rand(rng, (1, hq, lk, D), dt)
        kw, args = {}, ["bound", "--all"]
        save(d, "q%d" % c, q, args, "-q")
        save(d, "k%d" % c, k, args, "-k")
        save(d, "v%d" % c, v, args, "-v")
        if rng.random() < 0.5:
            kw["softcap"] = float(rng.choice([0.5, 5.0, 30.0] * 6 + [0.0]))
            args += ["--softcap", repr(kw["softcap"])]
        a = rng.random()
        if a < 0.3:
            kw["alibi"] = True
            args.append("--alibi")
        if a > 0.6 or a < 0.02:
            kw["alibi_slopes"] = (rng.random(hq) * 0.5).astype(np.float32)
            save(d, "a%d" % c, kw["alibi_slopes"], args, "--alibi-slopes")
        if rng.random() < 0.5:
            kw["sinks"] = rand(rng, (hq,), "f32", 4.0)
            save(d, "s%d" % c, kw["sinks"], args, "--sinks")
        if rng.random() < 0.3:
            kw["out_dtype"] = ["f16", "bf16"][int(rng.integers(0, 2))]
            args += ["--out-dtype", kw["out_dtype"]]
        cases.append(((q, k, v), kw, args))
    results = cli.many([("kvattn",) + tuple(a) for _, _, a in cases])
    n_ok = 0
    for (pos, kw, args), (status, out, err) in zip(cases, results):
        what = "kvattn " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: kvattn.bound(*pos, **kw), status, err, what, d)
            continue
        rep = dict(line.split(": ", 1) for line in out.decode().splitlines())
        b = kvattn.bound(*pos, **kw)
        for f in ("out", "lse"):
            assert "%.3g" % b[f] == rep[f], what + " " + f
        assert str(b["keys"]) == rep["keys"], what
        n_ok += 1
    assert n_ok > len(cases) // 2
