"""kvtools.kvslot.cplens against kvslot cplens on random cases: the
per-rank lengths equal byte for byte (every rank or one, i64 and i32),
and the same refusals with the same messages."""
import numpy as np

from kvtools import kvslot
from conftest import CASES, same_refusal, same_stream


def case(rng):
    W = int(rng.integers(1, 9))
    n = int(rng.integers(1, 6))
    big = rng.random() < 0.1
    lens = [int(x) for x in rng.integers(0, 2**33 if big else 200, n)]
    kw = {"cp_size": W, "seq_lens": lens}
    args = ["--cp-size=%d" % W, "--seq-lens=" + ",".join(map(str, lens)),
            "-f", "npy"]
    if rng.random() < 0.7:
        kw["interleave"] = int(rng.choice([1, 2, 4, 16, 64]))
        args.append("--interleave=%d" % kw["interleave"])
    if rng.random() < 0.4:
        kw["cp_rank"] = int(rng.integers(0, W + (rng.random() < 0.1)))
        args.append("--cp-rank=%d" % kw["cp_rank"])
    if rng.random() < 0.3:
        kw["dtype"] = "i32"
        args.append("--dtype=i32")
    if rng.random() < 0.05:
        kw["max_mem"] = "64"
        args.append("--max-mem=64")
    return kw, args


def test_random_against_program(cli):
    rng = np.random.default_rng(2718)
    cases = [case(rng) for _ in range(CASES)]
    results = cli.many([("kvslot", "cplens") + tuple(a) for _, a in cases])
    ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot cplens " + " ".join(args)
        if status:
            assert out == b"", what
            same_refusal(lambda: kvslot.cplens(**kw), status, err, what)
            continue
        same_stream(kvslot.cplens(**kw), out, what)
        ok += 1
    assert ok >= len(cases) // 2


def test_refusals(cli):
    cases = (
        ({}, ()),
        ({"cp_size": 2}, ("--cp-size=2",)),
        ({"cp_size": 0, "seq_lens": [3]}, ("--cp-size=0", "--seq-lens=3")),
        ({"cp_size": 2, "seq_lens": [3], "interleave": 0},
         ("--cp-size=2", "--seq-lens=3", "--interleave=0")),
        ({"cp_size": 2, "seq_lens": [3], "cp_rank": 2},
         ("--cp-size=2", "--seq-lens=3", "--cp-rank=2")),
        ({"cp_size": 2, "seq_lens": "3,-1"}, ("--cp-size=2", "--seq-lens=3,-1")),
        ({"cp_size": 2, "seq_lens": "3", "max_mem": "x"},
         ("--cp-size=2", "--seq-lens=3", "--max-mem=x")),
        ({"cp_size": 2, "seq_lens": [3], "dtype": "f32"},
         ("--cp-size=2", "--seq-lens=3", "--dtype=f32")),
        ({"cp_size": 1, "seq_lens": [2**40], "dtype": "i32"},
         ("--cp-size=1", "--seq-lens=%d" % 2**40, "--dtype=i32")),
    )
    for kw, args in cases:
        status, out, err = cli("kvslot", "cplens", *args)
        assert status != 0 and out == b"", args
        same_refusal(lambda: kvslot.cplens(**kw), status, err, " ".join(args))
