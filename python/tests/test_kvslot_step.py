"""kvtools.kvslot.step and kvslot.local against kvslot step and kvslot
local on random cases: chunked local attention's virtual batches
(--chunk-size) and token trees (--parents), every array equal byte for
byte (i64 and i32), and the same refusals with the same messages."""
import numpy as np

from kvtools import kvslot
from conftest import CASES, same_refusal, same_stream


def table_rows(rng, n, cols):
    """n rows of block ids, now and then a short one."""
    rows = []
    for _ in range(n):
        w = cols if rng.random() < 0.85 else int(rng.integers(0, cols + 1))
        rows.append([int(x) for x in rng.integers(0, 1000, w)])
    return rows


def local_case(rng, path):
    """(keywords, the program's arguments after the subcommand)."""
    B = int(rng.choice([1, 2, 4, 16]))
    C = B * int(rng.integers(1, 5))
    if rng.random() < 0.05:
        C += 1                                  # not a multiple: refused
    n = int(rng.integers(1, 5))
    sched = [int(x) for x in rng.integers(0 if rng.random() < 0.2 else 1,
                                          40, n)]
    comp = [int(x) for x in rng.integers(0, 60, n)] \
        if rng.random() < 0.7 else None
    seq = max(s + (comp[i] if comp else 0) for i, s in enumerate(sched))
    cols = -(-seq // B) + int(rng.integers(0, 3))
    if rng.random() < 0.05:
        cols = max(cols - 2, 0)                 # too short for the keys
    rows = table_rows(rng, n + (rng.random() < 0.04), cols)
    with open(path, "w") as f:
        f.write("".join(" ".join(map(str, r)) + "\n" for r in rows))
    dtype = "i32" if rng.random() < 0.3 else "i64"
    kw = dict(chunk_size=C, block_size=B, scheduled=sched, computed=comp,
              dtype=dtype, block_table=path if rng.random() < 0.5 else rows)
    args = ["--chunk-size=%d" % C, "-B%d" % B, "--block-table=" + path,
            "--scheduled=" + ",".join(map(str, sched)), "--dtype=" + dtype,
            "-f", "npy"]
    if comp is not None:
        args.append("--computed=" + ",".join(map(str, comp)))
    return kw, args


def tree_case(rng):
    n = int(rng.integers(1, 30))
    par = [-1] + [int(rng.integers(-1 if rng.random() < 0.1 else 0, t))
                  for t in range(1, n)]
    if rng.random() < 0.05:
        par[int(rng.integers(0, n))] = n + 3    # a forward reference
    kw, args = {"parents": par}, ["--parents=" + ",".join(map(str, par))]
    if rng.random() < 0.6:
        comp = [int(x) for x in rng.integers(0, 100, int(rng.integers(1, 4)))]
        kw["computed"] = comp
        args.append("--computed=" + ",".join(map(str, comp)))
    if rng.random() < 0.6:
        kw["max_model_len"] = int(rng.integers(1, 120))
        args.append("--max-model-len=%d" % kw["max_model_len"])
    if rng.random() < 0.3:
        kw["dtype"] = "i32"
        args.append("--dtype=i32")
    return kw, args + ["-f", "npy"]


def check(cli, sub, fn, cases):
    results = cli.many([("kvslot", sub) + tuple(a) for _, a in cases])
    ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot %s %s" % (sub, " ".join(args))
        if status:
            assert out == b"", what
            same_refusal(lambda: fn(**kw), status, err, what)
            continue
        same_stream(fn(**kw), out, what)
        ok += 1
    return ok


def test_step_local_random(cli, tmp_path):
    rng = np.random.default_rng(5150)
    n = CASES // 2
    cases = [local_case(rng, str(tmp_path / ("bt%d.txt" % c)))
             for c in range(n)]
    assert check(cli, "step", kvslot.step, cases) >= n // 2


def test_step_tree_random(cli):
    rng = np.random.default_rng(5151)
    n = CASES // 2
    cases = [tree_case(rng) for _ in range(n)]
    assert check(cli, "step", kvslot.step, cases) >= n // 2


def test_local_random(cli, tmp_path):
    rng = np.random.default_rng(5152)
    n = CASES
    cases = [local_case(rng, str(tmp_path / ("bt%d.txt" % c)))
             for c in range(n)]
    assert check(cli, "local", kvslot.local, cases) >= n // 2


def test_i32_overflow(cli, tmp_path):
    path = tmp_path / "bt.txt"
    path.write_text("1 %d\n" % (2**31 + 5))
    args = ("--chunk-size=2", "-B1", "--block-table=%s" % path,
            "--scheduled=2", "--dtype=i32")
    status, out, err = cli("kvslot", "step", *args)
    assert status == 1 and out == b""
    same_refusal(lambda: kvslot.step(chunk_size=2, block_size=1,
                                     block_table=str(path), scheduled=[2],
                                     dtype="i32"), status, err, "i32")


def test_refusals(cli, tmp_path):
    path = str(tmp_path / "bt.txt")
    with open(path, "w") as f:
        f.write("1 2 3\n")
    bt = "--block-table=" + path
    cases = (
        ("step", {}, ()),
        ("step", {"chunk_size": 4, "parents": [-1]},
         ("--chunk-size=4", "--parents=-1")),
        ("step", {"chunk_size": 4, "block_size": 2}, ("--chunk-size=4", "-B2")),
        ("step", {"chunk_size": 4, "block_size": 2, "block_table": path,
                  "scheduled": [3], "max_model_len": 5},
         ("--chunk-size=4", "-B2", bt, "--scheduled=3", "--max-model-len=5")),
        ("step", {"chunk_size": 0, "block_size": 2, "block_table": path,
                  "scheduled": [3]},
         ("--chunk-size=0", "-B2", bt, "--scheduled=3")),
        ("step", {"chunk_size": 4, "block_size": 2, "block_table": path,
                  "scheduled": "3,x"},
         ("--chunk-size=4", "-B2", bt, "--scheduled=3,x")),
        ("step", {"chunk_size": 4, "block_size": 2, "block_table": path,
                  "scheduled": [3], "computed": [1, 2]},
         ("--chunk-size=4", "-B2", bt, "--scheduled=3", "--computed=1,2")),
        ("step", {"chunk_size": 4, "block_size": 2, "block_table": path,
                  "scheduled": [3], "dtype": "u8"},
         ("--chunk-size=4", "-B2", bt, "--scheduled=3", "--dtype=u8")),
        ("step", {"chunk_size": 4, "block_size": 2,
                  "block_table": path + ".none", "scheduled": [3]},
         ("--chunk-size=4", "-B2", bt + ".none", "--scheduled=3")),
        ("step", {"parents": [-1, 0], "block_size": 2},
         ("--parents=-1,0", "-B2")),
        ("step", {"parents": [-1, 2, 0]}, ("--parents=-1,2,0",)),
        ("step", {"parents": [-1, -2]}, ("--parents=-1,-2",)),
        ("step", {"parents": [-1], "max_model_len": 0},
         ("--parents=-1", "--max-model-len=0")),
        ("step", {"parents": [-1], "computed": [2**31]},
         ("--parents=-1", "--computed=%d" % 2**31)),
        ("local", {"chunk_size": 4, "block_size": 2, "block_table": path},
         ("--chunk-size=4", "-B2", bt)),
        ("local", {"chunk_size": 4, "block_size": 3, "block_table": path,
                   "scheduled": [3]},
         ("--chunk-size=4", "-B3", bt, "--scheduled=3")),
        ("local", {"chunk_size": 4, "block_size": 2, "block_table": path,
                   "scheduled": [3, 1]},
         ("--chunk-size=4", "-B2", bt, "--scheduled=3,1")),
        ("local", {"chunk_size": 4, "block_size": 2, "block_table": path,
                   "scheduled": [3], "computed": [2**31 - 2]},
         ("--chunk-size=4", "-B2", bt, "--scheduled=3",
          "--computed=%d" % (2**31 - 2))),
    )
    for sub, kw, args in cases:
        status, out, err = cli("kvslot", sub, *args)
        assert status != 0 and out == b"", args
        fn = kvslot.step if sub == "step" else kvslot.local
        same_refusal(lambda: fn(**kw), status, err, " ".join(args))
