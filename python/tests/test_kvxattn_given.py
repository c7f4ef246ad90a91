"""kvtools.kvxattn.estimate's options as kvxattn estimate takes them:
threshold beside thresholds refused whenever passed (its default value
too), and a compat chunk too wide for int32 key columns refused, with the
program's status and message."""
import os

import numpy as np

from kvtools import kvxattn
from conftest import npy_stream, same_array, same_refusal


def test_threshold_beside_thresholds(cli, tmp_path):
    rng = np.random.default_rng(3670)
    q = rng.standard_normal((1, 2, 16, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 32, 8)).astype(np.float32)
    pq, pk = os.path.join(str(tmp_path), "q.npy"), os.path.join(str(tmp_path), "k.npy")
    pt = os.path.join(str(tmp_path), "t.txt")
    np.save(pq, q)
    np.save(pk, k)
    with open(pt, "w") as f:
        f.write("0.9 0.5\n")
    base = ["estimate", "-q", pq, "-k", pk, "--block-size", 8, "--stride", 4]
    kw0 = dict(block_size=8, stride=4)
    for kw, a in ((dict(threshold=0.9, thresholds=[0.9, 0.5]),
                   ["--threshold", 0.9, "--thresholds", pt]),
                  (dict(threshold=0.5, thresholds=[0.9, 0.5]),
                   ["--threshold", 0.5, "--thresholds", pt]),
                  (dict(thresholds=[0.9, 0.5]), ["--thresholds", pt]),
                  (dict(threshold=None, thresholds=[0.9, 0.5]),
                   ["--thresholds", pt]),
                  (dict(), []), (dict(threshold=0.9), ["--threshold", 0.9]),
                  (dict(compat_chunk_size=2**33), ["--compat-chunk-size", 2**33]),
                  (dict(compat_chunk_size=64), ["--compat-chunk-size", 64])):
        status, out, err = cli("kvxattn", *map(str, base + a + ["-f", "npy"]))
        what = " ".join(map(str, a))
        if status != 0:
            same_refusal(lambda: kvxattn.estimate(q, k, **kw0, **kw), status,
                         err, what)
            continue
        same_array(kvxattn.estimate(q, k, **kw0, **kw), npy_stream(out)[0],
                   what)
