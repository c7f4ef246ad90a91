"""kvtools.kvmask.chunk(segments=) against kvmask chunk --segments on
random segment files (text lines and kvchunk split's .npy stream, its keys
after it or not, some of them bad) and arrays: equal byte for byte, and
the same refusals with the same messages."""
import os

import numpy as np

from kvtools import kvmask
from conftest import CASES, npy_stream, same_array, same_refusal

NAMES = ("sys", "chunk", "question")


def segments_case(rng, d, c):
    n = int(rng.integers(1, 6))
    kinds = [0] + [1] * (n - 2) + [2] if n >= 2 else [int(rng.integers(0, 3))]
    if rng.random() < 0.2:
        kinds = [int(x) for x in rng.integers(0, 3, n)]
    lens = [int(x) for x in rng.integers(0, 7, n)]
    offs = list(np.cumsum([0] + lens[:-1]))
    bad = rng.random()
    if bad < 0.04:
        offs[-1] += 1                               # not contiguous
    elif bad < 0.06:
        kinds[0] = 3                                # no such kind
    rows = np.array([[k, o, ln] for k, o, ln in zip(kinds, offs, lens)], np.int64)
    p = os.path.join(d, "s%d" % c)
    form = rng.random()
    if form < 0.4:
        p += ".txt"
        with open(p, "w") as f:
            f.write("# kind offset length\n")
            for k, o, ln in rows:
                name = NAMES[k] if k < 3 else "other"
                f.write("%s %d %d%s\n" % (name, o, ln, " %032x" % c if rng.random() < 0.5 else ""))
        seg = p
    else:
        p += ".npy"
        with open(p, "wb") as f:
            np.save(f, rows.astype(np.int32) if rng.random() < 0.3 else rows)
            if rng.random() < 0.4:
                keys = rng.integers(0, 256, (len(rows) + (1 if bad > 0.97 else 0), 16))
                np.save(f, keys.astype(np.uint8))
        seg = p if form < 0.8 or bad > 0.97 else rows
    kw = {"segments": seg}
    args = ["chunk", "--segments", p]
    if rng.random() < 0.3:
        kw["dtype"] = "f16"
        args += ["--dtype", "f16"]
    if rng.random() < 0.2:
        kw["keep"] = True
        args.append("--keep")
    if rng.random() < 0.03:
        kw["sys"] = 2                               # refused: both
        args += ["--sys", 2]
    return kw, args + ["-f", "npy"]


def test_segments_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(61)
    d = str(tmp_path)
    cases = [segments_case(rng, d, c) for c in range(CASES)]
    results = cli.many([("kvmask",) + tuple(a) for _, a in cases])
    n_ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvmask " + " ".join(map(str, args))
        if status != 0:
            # an array has no name: '<array>' where the program names the file
            same_refusal(lambda: kvmask.chunk(**kw), status, err, what,
                         expect=err if isinstance(kw["segments"], str) else
                         err.replace("'%s'" % args[2], "'<array>'"))
            continue
        same_array(kvmask.chunk(**kw), npy_stream(out)[0], what)
        n_ok += 1
    assert n_ok > CASES // 2
