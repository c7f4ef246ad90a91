"""kvtools.kvchunk.evict, fsck, rm, pin and unpin against the programs:
random dir: stores copied twice, the same operation done by the program
on one copy and in-process on the other; the reports (evict's lines,
fsck's text and -f json) equal, and the stores after it equal entry for
entry (kvchunk ls); refusals with the program's message."""
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kvtools
from kvtools import kvchunk
from conftest import CASES, same_refusal

NS = dict(chunk_context="none", base_policy="free")


def _fill(rng, store, n):
    keys = []
    for _ in range(n):
        T = int(rng.integers(1, 6))
        tok = [int(x) for x in rng.integers(0, 1000, T)]
        kv = rng.standard_normal((1, 2, T, 1, 8)).astype(np.float16)
        key, _ = kvchunk.put(tok, kv, int(rng.integers(0, 50)), store=store,
                             pin=rng.random() < 0.2, **NS)
        keys.append(key)
        if rng.random() < 0.4:
            kvchunk.get(tok, 3, store=store, shape="1,1,8", dtype="f16", **NS)
    return keys


def _ls(cli, store):
    st, out, err = cli("kvchunk", "ls", "--store", store)
    assert st == 0, err
    return [line.split()[:6] for line in out.decode().splitlines()]


def _entries(store):
    """kvchunk.ls but for last_access (the two stores' operations run at
    other times)."""
    return [{k: v for k, v in x.items() if k != "last_access"}
            for x in kvchunk.ls(store=store)]


def _damage(rng, path):
    """Corrupt a blob, leave a stale temporary file, or neither."""
    blobs = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs
             if f.endswith(".kvc")]
    if blobs and rng.random() < 0.5:
        with open(blobs[int(rng.integers(0, len(blobs)))], "r+b") as f:
            f.truncate(int(rng.integers(1, 40)))
    if rng.random() < 0.4:
        with open(os.path.join(path, "v1", "staging", "tmp.x"), "w") as f:
            f.write("x")


KINDS = ["evict", "rm", "pin", "unpin", "fsck"]


def _op(rng, keys, store, cli_store, kind):
    """(function, keywords, the program's arguments) of one random op of
    kind."""
    if kind == "evict":
        size = int(rng.integers(0, 60000))
        kw, args = dict(max_size=size), ["--max-size", str(size)]
        if rng.random() < 0.5:
            lw = float(np.round(rng.uniform(0.05, 1.0), 2))
            kw["low_watermark"] = lw
            args += ["--low-watermark", repr(lw)]
        return kvchunk.evict, kw, ["evict"] + args
    if kind == "fsck":
        kw, args = {}, []
        if rng.random() < 0.5:
            kw["repair"] = True
            args.append("--repair")
        if rng.random() < 0.5:
            kw["format"] = "text"
        else:
            args += ["-f", "json"]
        return kvchunk.fsck, kw, ["fsck"] + args
    n = int(rng.integers(1, 4))
    ks = [keys[int(rng.integers(0, len(keys)))] for _ in range(n)]
    if rng.random() < 0.2:
        ks.insert(int(rng.integers(0, n)), "%032x" % int(rng.integers(0, 2**62)))
    fn = getattr(kvchunk, kind)
    return fn, dict(keys=ks), [kind] + ks


def _report(fn, kw, out):
    """The program's stdout as the function returns it."""
    text = out.decode()
    if fn is kvchunk.evict:
        return {k: int(v) for k, v in
                (line.split(": ") for line in text.splitlines())}
    if kw.get("format") == "text":
        return text
    lines = [json.loads(x) for x in text.splitlines()]
    r = dict(lines[-1])
    r["problems"] = [x["problem"] for x in lines[:-1]]
    return r


def _lane(cli, tmp, lane, n):
    """n operations (the five kinds in turn, in random order), eight in
    turn on each of n / 8 pairs of equal stores (filled, damaged,
    copied): the program's on one, the function's on the other, the
    stores equal after each (kvchunk.ls, and the program's ls after the
    eighth).  Returns the (operation, status) pairs met."""
    rng = np.random.default_rng(4242 + lane)
    seen = set()
    a = b = None
    kinds = []
    for c in range(n):
        if not kinds:
            kinds = [KINDS[int(i)] for i in rng.permutation(len(KINDS))]
        if c % 8 == 0:
            if a:
                assert _ls(cli, a) == _ls(cli, b)
                for p in (a, b):
                    shutil.rmtree(p[4:])
            a, b = ("dir:" + os.path.join(tmp, "%s%d-%d" % (x, lane, c))
                    for x in "ab")
            keys = _fill(rng, a, int(rng.integers(1, 12)))
            _damage(rng, a[4:])
            shutil.copytree(a[4:], b[4:])
        fn, kw, args = _op(rng, keys, a, b, kinds.pop())
        st, out, err = cli("kvchunk", args[0], "--store", a, *args[1:])
        what = "kvchunk %s (lane %d, case %d)" % (" ".join(args), lane, c)
        if st and not (args[0] == "fsck" and out):
            assert out == b"", what
            same_refusal(lambda: fn(store=b, **kw), st, err, what)
        elif st:                        # fsck: problems found, not repaired
            with pytest.raises(kvtools.Error) as ei:
                fn(store=b, **kw)
            assert str(ei.value) == err and ei.value.status == st, what
            assert ei.value.report == _report(fn, kw, out), what
        else:
            assert fn(store=b, **kw) == (None if not out else _report(fn, kw, out)), what
        assert _entries(a) == _entries(b), what
        seen.add((args[0], st))
    return seen


def test_store_ops_equal_cli(cli, tmp_path):
    """CASES operations of each kind, in four lanes at once (each its own
    stores)."""
    n = [len(KINDS) * CASES // 4 + (i < len(KINDS) * CASES % 4)
         for i in range(4)]
    with ThreadPoolExecutor(4) as ex:
        seen = set().union(*ex.map(lambda i: _lane(cli, str(tmp_path), i, n[i]),
                                   range(4)))
    assert len(seen) >= 5 and {("fsck", 1), ("evict", 0), ("rm", 0)} <= seen


def test_store_ops_refusals(cli, tmp_path):
    store = "dir:" + os.path.join(tmp_path, "s")
    missing = "dir:" + os.path.join(tmp_path, "none")
    key, _ = kvchunk.put([1, 2], np.zeros((1, 2, 2, 1, 8), np.float16), 0,
                         store=store)
    cases = [
        (kvchunk.evict, {}, ["evict"]),
        (kvchunk.evict, dict(max_size="x"), ["evict", "--max-size", "x"]),
        (kvchunk.evict, dict(max_size="1M", low_watermark=0),
         ["evict", "--max-size", "1M", "--low-watermark", "0"]),
        (kvchunk.evict, dict(max_size="1M", low_watermark="y"),
         ["evict", "--max-size", "1M", "--low-watermark", "y"]),
        (kvchunk.evict, dict(max_size="1M", max_mem="lots"),
         ["evict", "--max-size", "1M", "--max-mem", "lots"]),
        (kvchunk.fsck, dict(format="xml"), ["fsck", "-f", "xml"]),
        (kvchunk.rm, dict(keys=["xyz"]), ["rm", "xyz"]),
        (kvchunk.rm, dict(keys=[]), ["rm"]),
        (kvchunk.rm, dict(keys=["0" * 32]), ["rm", "0" * 32]),
        (kvchunk.pin, dict(keys=[key, "1" * 32]), ["pin", key, "1" * 32]),
        (kvchunk.unpin, dict(keys="g" * 32), ["unpin", "g" * 32]),
    ]
    for fn, kw, args in cases:
        st, out, err = cli("kvchunk", args[0], "--store", store, *args[1:])
        what = "kvchunk " + " ".join(args)
        assert st != 0 and out == b"", what
        same_refusal(lambda: fn(store=store, **kw), st, err, what)
    for fn, kw, args in [(kvchunk.rm, dict(keys=[key]), ["rm", key]),
                         (kvchunk.fsck, {}, ["fsck"]),
                         (kvchunk.evict, dict(max_size="1M"),
                          ["evict", "--max-size", "1M"])]:
        st, out, err = cli("kvchunk", args[0], "--store", missing, *args[1:])
        what = "missing store: " + " ".join(args)
        assert st != 0 and out == b"", what
        same_refusal(lambda: fn(store=missing, **kw), st, err, what)
