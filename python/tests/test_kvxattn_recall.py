"""kvtools.kvxattn.recall against kvxattn recall: random cases equal byte
for byte (per-token recall, block masses), value for value (-f json) and
as text (-f text); refusals with the program's message."""
import json
import os

import numpy as np

from kvtools import kvxattn
from conftest import CASES, npy_stream, same_array, same_refusal
from test_kvattn import bf16


def _mask(rng, B, hq, nqb, nkb):
    """A random block mask in one of the forms the program reads: dense
    (2, 3 or 4 dims, bool, int or 0/1 float) or a BlockMask stream."""
    keep = rng.random((B, hq, nqb, nkb)) < rng.random()
    form = int(rng.integers(0, 4))
    if form == 0:
        return keep[0, 0].astype(np.uint8)
    if form == 1:
        return keep[0].astype(np.float32)
    if form == 2:
        return keep.astype(np.int32)
    cnt = keep.sum(-1).astype(np.int32)
    idx = np.zeros((B, hq, nqb, nkb), np.int32)
    for b, h, qb in np.ndindex(B, hq, nqb):
        ix = np.flatnonzero(keep[b, h, qb])
        idx[b, h, qb, :len(ix)] = ix
    z = np.zeros_like(cnt)
    return [cnt, idx, z, np.zeros_like(idx)]


def _save(path, m):
    with open(path, "wb") as f:
        for a in (m if isinstance(m, list) else [m]):
            np.save(f, a)


def test_recall_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(47)
    cases = []
    for c in range(CASES):
        dt = ["f32", "f16", "bf16"][int(rng.integers(0, 3))]
        B, hkv = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        hq = hkv * int(rng.integers(1, 3))
        D = int(rng.choice([4, 8, 16]))
        bs = int(rng.choice([4, 8, 16]))
        lq = int(rng.integers(1, 40))
        lk = lq + int(rng.integers(0, 40))
        q = rng.standard_normal((B, hq, lq, D)).astype(np.float32)
        k = rng.standard_normal((B, hkv, lk, D)).astype(np.float32)
        if dt == "f16":
            q, k = q.astype(np.float16), k.astype(np.float16)
        elif dt == "bf16":
            q, k = bf16(q), bf16(k)
        pq, pk, pm = (os.path.join(tmp_path, "%s%d.npy" % (x, c))
                      for x in "qkm")
        np.save(pq, q)
        np.save(pk, k)
        nqb, nkb = -(-lq // bs), -(-lk // bs)
        if rng.random() < 0.05:          # a mask that does not fit
            nkb += 1
        m = _mask(rng, B, hq, nqb, nkb)
        _save(pm, m)
        kw = dict(block_size=bs)
        args = ["recall", "-q", pq, "-k", pk, "-m", pm, "--block-size", bs,
                "--quiet"]
        if B == 1 and rng.random() < 0.3:          # packed [T, H, D]
            q, k = q[0].transpose(1, 0, 2).copy(), k[0].transpose(1, 0, 2).copy()
            np.save(pq, q)
            np.save(pk, k)
            kw["layout"] = "thd"
            args += ["--layout", "thd"]
        if rng.random() < 0.2:
            kw["no_causal"] = True
            args.append("--no-causal")
        if rng.random() < 0.2:           # with --no-causal: refused
            kw["q_offset"] = int(rng.integers(0, 50))
            args += ["--q-offset", kw["q_offset"]]
        if rng.random() < 0.3:
            kw["scale"] = float(rng.choice([0.05, 0.3, 1.0, 2.5]))
            args += ["--scale", repr(kw["scale"])]
        if rng.random() < 0.3:
            kw["jobs"] = int(rng.integers(1, 3))
            args += ["-j", kw["jobs"]]
        fmt = str(rng.choice(["npy", "rows", "json", "text"]))
        kw["format"] = fmt
        args += ["-f", fmt, "--force"]
        pb = None
        if rng.random() < 0.4:
            pb = os.path.join(tmp_path, "b%d.npy" % c)
            kw["per_block"] = True
            args += ["--per-block", pb]
        cases.append(((q, k, m), kw, args, pb))
    results = cli.many([("kvxattn",) + tuple(a) for _, _, a, _ in cases])
    n_ok = 0
    for (qkm, kw, args, pb), (status, out, err) in zip(cases, results):
        what = "kvxattn " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: kvxattn.recall(*qkm, **kw), status, err,
                         what, path_dir=str(tmp_path))
            continue
        got = kvxattn.recall(*qkm, **kw)
        if pb:
            got, masses = got
            same_array(masses, np.load(pb), what + " per-block")
        fmt = kw["format"]
        if fmt == "npy":
            same_array(got, npy_stream(out)[0], what)
        elif fmt == "rows":
            ref = np.array([float(x) for x in out.split()]).reshape(got.shape)
            assert np.array_equal(got, ref), what
        elif fmt == "json":
            ref = [json.loads(x) for x in out.decode().splitlines()]
            assert got == ref, what
        else:
            assert got == out.decode(), what
        n_ok += 1
    assert n_ok > len(cases) // 2


def test_recall_refusals(cli, tmp_path):
    q = np.zeros((1, 2, 16, 8), np.float32)
    k = np.zeros((1, 1, 16, 8), np.float32)
    bad = q.copy()
    bad[0, 1, 3, 2] = np.inf
    m = np.ones((2, 2), np.bool_)
    pq, pk, pb, pm = (os.path.join(tmp_path, x + ".npy") for x in "qkbm")
    np.save(pq, q)
    np.save(pk, k)
    np.save(pb, bad)
    np.save(pm, m)
    calls = [
        (dict(block_size=8, scale=0), ["--scale", "0"], q),
        (dict(block_size=8, scale="1e60"), ["--scale", "1e60"], q),
        (dict(block_size=0), [], q),
        (dict(block_size=8, format="pgm"), ["-f", "pgm"], q),
        (dict(block_size=8, layout="x"), ["--layout", "x"], q),
        (dict(block_size=8, no_causal=True, q_offset=0),
         ["--no-causal", "--q-offset", "0"], q),
        (dict(block_size=8), [], bad),
        (dict(block_size=4), [], q),            # the mask does not fit
        (dict(block_size=8, max_mem="100"), ["--max-mem", "100"], q),
        (dict(block_size=8, max_mem="lots"), ["--max-mem", "lots"], q),
    ]
    for kw, extra, qq in calls:
        args = ["recall", "-q", pb if qq is bad else pq, "-k", pk, "-m", pm,
                "--quiet", "--block-size", kw["block_size"]] + extra
        status, out, err = cli("kvxattn", *args)
        assert status != 0 and out == b"", args
        expect = None
        if qq is bad:
            expect = "kvxattn: Q: element (0, 1, 3, 2) is inf"
        elif kw["block_size"] == 4:
            expect = ("kvxattn: mask: shape [2, 2] does not fit [1, 2, 4, 4] "
                      "(batch, query heads, query blocks, key blocks)")
        same_refusal(lambda: kvxattn.recall(qq, k, m, **kw), status, err,
                     " ".join(map(str, args)), path_dir=str(tmp_path),
                     expect=expect)
    # a float mask must be 0/1, a stream of two arrays is neither form
    with open(pm, "wb") as f:
        np.save(f, m)
        np.save(f, m)
    status, _, err = cli("kvxattn", "recall", "-q", pq, "-k", pk, "-m", pm,
                         "--block-size", 8, "--quiet")
    same_refusal(lambda: kvxattn.recall(q, k, [m, m], block_size=8), status,
                 err, "two arrays", path_dir=str(tmp_path),
                 expect="kvxattn: mask: holds 2 arrays; expected one dense "
                 "block mask or a BlockMask of eight")
    fm = np.full((2, 2), -np.inf, np.float32)
    np.save(pm, fm)
    status, _, err = cli("kvxattn", "recall", "-q", pq, "-k", pk, "-m", pm,
                         "--block-size", 8, "--quiet")
    same_refusal(lambda: kvxattn.recall(q, k, fm, block_size=8), status, err,
                 "additive mask", path_dir=str(tmp_path),
                 expect="kvxattn: mask: a float block mask must hold only 0 "
                 "and 1 (1 = keep), found -inf; an additive mask (0 = keep) "
                 "reads inverted")


def test_estimate_max_mem_message(cli, tmp_path):
    """A bad --max-mem is refused with the parser's message, once."""
    q = np.zeros((1, 1, 16, 8), np.float32)
    p = os.path.join(tmp_path, "q.npy")
    np.save(p, q)
    status, out, err = cli("kvxattn", "estimate", "-q", p, "-k", p,
                           "--max-mem", "lots")
    assert status == 2 and err == "kvxattn estimate: --max-mem: bad size 'lots'"
    same_refusal(lambda: kvxattn.estimate(q, q, max_mem="lots"), status, err,
                 "estimate --max-mem lots")
