"""kvtools.kvxattn.estimate(layer=) as kvxattn estimate --layer reads a
layer x head thresholds table (.npy 2-d or 1-d, or text, one line a
layer): on random cases the block mask equals the program's byte for
byte; --layer without --thresholds, a layer past the table and a row of
the wrong length refused with the program's status (and message where it
does not name the file)."""
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvxattn
from conftest import npy_stream, same_array, same_refusal


def test_layer_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(9090)
    ok = refused = 0
    for c in range(40):
        H = int(rng.choice([1, 2, 4]))
        S = int(rng.choice([16, 24, 32]))
        q = rng.standard_normal((1, H, S, 8)).astype(np.float32)
        k = rng.standard_normal((1, H, S, 8)).astype(np.float32)
        L = int(rng.integers(1, 5))
        cols = H if rng.random() < 0.9 else H + 1
        t = rng.uniform(0.3, 1.0, (L, cols)).round(3)
        if L == 1 and rng.random() < 0.3:
            t = t[0]                              # 1-d: one row
        d = str(tmp_path)
        pq, pk = os.path.join(d, "q%d.npy" % c), os.path.join(d, "k%d.npy" % c)
        np.save(pq, q)
        np.save(pk, k)
        if rng.random() < 0.5:
            pt = os.path.join(d, "t%d.npy" % c)
            np.save(pt, t)
        else:
            pt = os.path.join(d, "t%d.txt" % c)
            with open(pt, "w") as f:
                for row in np.atleast_2d(t):
                    f.write(" ".join(repr(float(x)) for x in row) + "\n")
        layer = int(rng.integers(0, L + (rng.random() < 0.15)))
        args = ["estimate", "-q", pq, "-k", pk, "--block-size", 8,
                "--stride", 4, "--thresholds", pt, "--layer", layer,
                "-f", "npy"]
        status, out, err = cli("kvxattn", *map(str, args))
        kw = dict(block_size=8, stride=4, thresholds=t, layer=layer)
        what = "layer %d of %s" % (layer, t.shape)
        if status:
            assert out == b"", what
            with pytest.raises(kvtools.Error) as ei:
                kvxattn.estimate(q, k, **kw)
            assert ei.value.status == status, what
            # the program names its file; the package its argument
            assert str(ei.value) == err.replace(" '%s'" % pt, ""), what
            refused += 1
            continue
        same_array(kvxattn.estimate(q, k, **kw), npy_stream(out)[0], what)
        ok += 1
    assert ok >= 20 and refused >= 1


def test_layer_needs_thresholds(cli, tmp_path):
    q = np.ones((1, 2, 16, 8), np.float32)
    pq = os.path.join(str(tmp_path), "q.npy")
    np.save(pq, q)
    for kw, a in ((dict(layer=1), ["--layer", "1"]),
                  (dict(layer=-1, thresholds=[[0.9, 0.9]]),
                   ["--layer", "-1", "--thresholds", pq]),
                  (dict(layer="x", thresholds=[[0.9, 0.9]]),
                   ["--layer", "x", "--thresholds", pq])):
        status, out, err = cli("kvxattn", "estimate", "-q", pq, "-k", pq,
                               "--block-size", "8", "--stride", "4", *a)
        assert status == 2 and out == b"", a
        same_refusal(lambda: kvxattn.estimate(q, q, block_size=8, stride=4, **kw),
                     status, err, " ".join(a))
