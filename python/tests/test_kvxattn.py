"""kvtools.kvxattn.estimate against kvxattn estimate: random cases equal
byte for byte (mask and block sums)."""
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvxattn
from conftest import CASES, npy_stream, same_array
from test_kvattn import bf16


def test_estimate_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(31)
    cases = []
    for c in range(CASES):
        dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
        B, hkv = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        hq = hkv * int(rng.integers(1, 3))
        D = int(rng.choice([8, 16, 32]))
        bs = int(rng.choice([8, 16, 32]))
        stride = int(rng.choice([s for s in (1, 2, 4, 8) if bs % s == 0]))
        if rng.random() < 0.03:                  # a usage error
            stride = 3
        lq = int(rng.integers(1, 80))
        lk = lq + (bs * int(rng.integers(0, 4)) if rng.random() < 0.85
                   else int(rng.integers(0, 60)))
        q = rng.standard_normal((B, hq, lq, D)).astype(np.float32)
        k = rng.standard_normal((B, hkv, lk, D)).astype(np.float32)
        if dt == "f16":
            q, k = q.astype(np.float16), k.astype(np.float16)
        elif dt == "bf16":
            q, k = bf16(q), bf16(k)
        pq, pk = os.path.join(tmp_path, "q%d.npy" % c), os.path.join(tmp_path, "k%d.npy" % c)
        np.save(pq, q)
        np.save(pk, k)
        kw = dict(stride=stride, block_size=bs, sums=True)
        args = ["estimate", "-q", pq, "-k", pk, "--stride", stride, "--block-size", bs]
        if B == 1 and rng.random() < 0.3:          # packed [T, H, D]
            q, k = q[0].transpose(1, 0, 2).copy(), k[0].transpose(1, 0, 2).copy()
            np.save(pq, q)
            np.save(pk, k)
            kw["layout"] = "thd"
            args += ["--layout", "thd"]
        if rng.random() < 0.5:
            kw["threshold"] = float(rng.choice([0.0, 0.5, 0.9, 0.95, 1.0]))
            args += ["--threshold", repr(kw["threshold"])]
        if rng.random() < 0.2:
            kw["no_causal"] = True
            args.append("--no-causal")
        if rng.random() < 0.15:          # with --no-causal: refused
            kw["q_offset"] = int(rng.choice([0, bs, 2 * bs, bs // 2 + 1]))
            args += ["--q-offset", kw["q_offset"]]
        if rng.random() < 0.2:
            kw["rule"] = "intended"
            args += ["--rule", "intended"]
        if rng.random() < 0.2:
            kw["keep_sink"] = True
            args.append("--keep-sink")
        if rng.random() < 0.2:
            kw["select_mode"] = "slash"
            args += ["--select-mode", "slash"]
        if rng.random() < 0.2:
            kw["compat_chunk_size"] = bs * int(rng.integers(1, 4))
            args += ["--compat-chunk-size", kw["compat_chunk_size"]]
        if rng.random() < 0.3:
            kw["jobs"] = int(rng.integers(1, 4))
            args += ["-j", kw["jobs"]]
        sp = os.path.join(tmp_path, "s%d.npy" % c)
        args += ["--sums", sp, "-f", "npy"]
        cases.append(((q, k), kw, args, sp))
    results = cli.many([("kvxattn",) + tuple(a) for _, _, a, _ in cases])
    n_ok = 0
    for (qk, kw, args, sp), (status, out, err) in zip(cases, results):
        what = "kvxattn " + " ".join(map(str, args))
        if status != 0:
            with pytest.raises(kvtools.Error) as ei:
                kvxattn.estimate(*qk, **kw)
            if "'" not in err:          # messages naming a file differ
                assert str(ei.value) == err, what
            continue
        mask, sums = kvxattn.estimate(*qk, **kw)
        same_array(mask, npy_stream(out)[0], what)
        same_array(sums, np.load(sp), what + " sums")
        n_ok += 1
    assert n_ok > len(cases) // 2


def test_estimate_errors(capfd):
    q = np.zeros((1, 1, 16, 8), np.float32)
    q[0, 0, 3, 2] = np.nan
    with pytest.raises(kvtools.Error) as ei:
        kvxattn.estimate(q, np.zeros((1, 1, 16, 8), np.float32), block_size=8)
    assert str(ei.value) == "kvxattn: Q: element (0, 0, 3, 2) is nan"
    with pytest.raises(kvtools.Error) as ei:
        kvxattn.estimate(q, q, stride=3, block_size=8)
    assert ei.value.status == 2
    assert str(ei.value) == ("kvxattn estimate: --stride 3 does not divide "
                             "--block-size 8")
    with pytest.raises(kvtools.Error) as ei:
        kvxattn.estimate(q, q, block_size=8, no_causal=True, q_offset=0)
    assert str(ei.value) == ("kvxattn estimate: --q-offset places the queries for "
                             "causal selection; with --no-causal every key is "
                             "visible and it would change nothing")
    assert ei.value.status == 2
    out, err = capfd.readouterr()
    assert out == "" and err == ""
