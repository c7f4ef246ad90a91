"""kvtools.kvmask against kvmask: random cases of every kind, dense and
BlockMask, equal byte for byte; bad ones raise the program's message."""
import numpy as np
import pytest

import kvtools
from kvtools import kvmask
from conftest import CASES, npy_stream, same_array

DTYPES = ["bool", "u8", "i8", "f16", "bf16", "f32"]


def geometry(rng, kind):
    """(python kwargs, program args) of a random geometry of kind."""
    kw, args = {}, [kind]
    if kind in ("causal", "window", "band", "full", "prefix", "local"):
        if rng.random() < 0.5:
            kw["n"] = int(rng.integers(1, 40))
            args += ["-n", kw["n"]]
            nk = kw["n"]
        else:
            kw["q"], kw["k"] = int(rng.integers(1, 40)), int(rng.integers(1, 40))
            args += ["-q", kw["q"], "-k", kw["k"]]
            nk = kw["k"]
        if rng.random() < 0.3:
            kw["align"] = "top-left"
            args += ["--align", "top-left"]
    if kind == "local":
        kw["chunk_size"] = int(rng.integers(0, 9))    # 0 is refused
        args += ["--chunk-size", kw["chunk_size"]]
    if kind == "tree":
        n = int(rng.integers(1, 12))
        # parents before children; now and then a forward reference or a
        # cycle, which are refused
        par = [int(rng.integers(-1, i)) if i else -1 for i in range(n)]
        if rng.random() < 0.15:
            par[0] = n - 1 if n > 1 else 0
        kw["parents"] = par
        args += ["--parents", ",".join(map(str, par))]
        if rng.random() < 0.6:
            kw["prefix"] = int(rng.integers(0, 9))
            args += ["-p", kw["prefix"]]
    if kind == "window":
        kw["window"] = int(rng.integers(0, 12))      # 0 is refused
        args += ["-w", kw["window"]]
    if kind == "band":
        kw["pre"], kw["next"] = int(rng.integers(0, 8)), int(rng.integers(0, 8))
        args += ["--pre", kw["pre"], "--next", kw["next"]]
    if kind == "prefix":
        kw["prefix"] = int(rng.integers(0, nk + 3))
        args += ["-p", kw["prefix"]]
    if kind == "varlen":
        n = int(rng.integers(1, 5))
        ql = [int(x) for x in rng.integers(0, 9, n)]
        kw["q_lens"] = ql
        args += ["--q-lens", ",".join(map(str, ql))]
        if rng.random() < 0.5:
            kl = [int(x) for x in rng.integers(0, 12, n)]
            kw["kv_lens"] = kl
            args += ["--kv-lens", ",".join(map(str, kl))]
        if rng.random() < 0.3:
            kw["window"] = int(rng.integers(1, 6))
            args += ["-w", kw["window"]]
    if kind == "chunk":
        kw["sys"] = int(rng.integers(0, 6))
        kw["chunks"] = [int(x) for x in rng.integers(0, 7, int(rng.integers(1, 4)))]
        kw["question"] = int(rng.integers(0, 6))
        args += ["--sys", kw["sys"], "--chunks", ",".join(map(str, kw["chunks"])),
                 "--question", kw["question"]]
    return kw, args


def values(rng, kw, args):
    dt = DTYPES[int(rng.integers(0, len(DTYPES)))]
    kw["dtype"] = dt
    args += ["--dtype", dt]
    if rng.random() < 0.3:
        kw["keep"] = True
        args += ["--keep"]
    elif dt in ("f16", "bf16", "f32") and rng.random() < 0.5:
        kw["fill"] = ["-inf", "min", "-10000", "-3.5"][int(rng.integers(0, 4))]
        args += ["--fill", kw["fill"]]
    if rng.random() < 0.2:
        kw["batch"] = int(rng.integers(1, 3))
        args += ["--batch", kw["batch"]]
    if rng.random() < 0.2:
        kw["heads"] = int(rng.integers(1, 3))
        args += ["--heads", kw["heads"]]
    if rng.random() < 0.3:
        kw["jobs"] = int(rng.integers(1, 5))
        args += ["-j", kw["jobs"]]


def check(cli_result, call, what):
    status, out, err = cli_result
    if status != 0:
        with pytest.raises(kvtools.Error) as ei:
            call()
        assert str(ei.value) == err, what
        assert ei.value.status == status, what
        return None
    return npy_stream(out)


KINDS = ["causal", "window", "band", "full", "prefix", "varlen", "chunk",
         "local", "tree"]


@pytest.mark.parametrize("kind", KINDS)
def test_dense_equals_cli(cli, kind):
    rng = np.random.default_rng(KINDS.index(kind))
    cases = []
    for _ in range(CASES):
        kw, args = geometry(rng, kind)
        values(rng, kw, args)
        cases.append((kw, args))
    results = cli.many([("kvmask",) + tuple(a) for _, a in cases])
    fn = getattr(kvmask, kind)
    n_ok = 0
    for (kw, args), res in zip(cases, results):
        what = "kvmask " + " ".join(map(str, args))
        ref = check(res, lambda: fn(**kw), what)
        if ref is not None:
            same_array(fn(**kw), ref[0], what)
            n_ok += 1
    assert n_ok > CASES // 3


def test_block_equals_cli(cli):
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(CASES):
        kind = ["causal", "window", "band", "full", "prefix", "varlen",
                "chunk"][int(rng.integers(0, 7))]
        kw, args = geometry(rng, kind)
        bs = [int(rng.integers(1, 20))]
        if rng.random() < 0.5:
            bs.append(int(rng.integers(1, 20)))
        kw["block_size"] = ",".join(map(str, bs)) if len(bs) == 2 else bs[0]
        args += ["-f", "block", "--block-size", ",".join(map(str, bs))]
        if rng.random() < 0.2:
            kw["heads"] = 2
            args += ["--heads", 2]
        cases.append((kind, kw, args))
    results = cli.many([("kvmask",) + tuple(a) for _, _, a in cases])
    for (kind, kw, args), res in zip(cases, results):
        what = "kvmask " + " ".join(map(str, args))
        ref = check(res, lambda: kvmask.block(kind, **kw), what)
        if ref is not None:
            got = kvmask.block(kind, **kw)
            assert list(got) == list(kvmask.BLOCK_FIELDS)
            for name, r in zip(kvmask.BLOCK_FIELDS, ref):
                same_array(got[name], r, what + " " + name)


def test_examples_of_the_page():
    m = kvmask.causal(q=2, k=5, keep=True)
    assert m.tolist() == [[True, True, True, True, False], [True] * 5]
    m = kvmask.window(n=4, window=2, dtype="f32")
    assert m[3].tolist() == [-np.inf, -np.inf, 0.0, 0.0]


def test_errors_raise_and_print_nothing(capfd):
    for call, msg in [
        (lambda: kvmask.causal(n=0),
         "kvmask: -n: expected an integer from 1 to 1099511627776, got '0'"),
        (lambda: kvmask.causal(), "kvmask: causal: give the size with -n N or -q SQ -k SKV"),
        (lambda: kvmask.window(n=4), "kvmask: -w: window needs -w W (keys including self)"),
        (lambda: kvmask.causal(n=4, dtype="f99"), None),
        (lambda: kvmask.causal(n=1 << 20, dtype="f32", max_mem="1M"), None),
    ]:
        with pytest.raises(kvtools.Error) as ei:
            call()
        assert isinstance(ei.value, ValueError)
        if msg:
            assert str(ei.value) == msg
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_out_renders_into_the_callers_array():
    buf = np.full((40, 40), 7, np.float16)
    got = kvmask.window(n=40, window=5, dtype="f16", out=buf)
    assert got is buf
    assert buf.tobytes() == kvmask.window(n=40, window=5, dtype="f16").tobytes()
    with pytest.raises(kvtools.Error):
        kvmask.window(n=40, window=5, dtype="f32", out=buf)
    with pytest.raises(kvtools.Error):
        kvmask.window(n=40, window=5, dtype="f16", out=buf[:, :20])


def test_ascend_equals_cli(cli):
    rng = np.random.default_rng(8)
    presets = ["attn", "splitfuse", "splitfuse-310p", "pooling", "mla", "pcp-mla",
               "swa", "mtp-cp", "bogus"]
    cases = []
    for _ in range(CASES):
        p = presets[int(rng.integers(0, len(presets)))]
        kw, args = {"preset": p}, ["ascend", "--preset", p]
        r = rng.random()
        if p == "mtp-cp":
            n = int(rng.integers(1, 4))
            kw["history"] = [int(x) for x in rng.integers(0, 20, n)]
            kw["q_lens"] = [int(x) for x in rng.integers(1, 4, n)]
            kw["cp_size"] = int(rng.integers(1, 4))
            kw["cp_rank"] = int(rng.integers(0, 4))
            args += ["--history", ",".join(map(str, kw["history"])),
                     "--q-lens", ",".join(map(str, kw["q_lens"])),
                     "--cp-size", kw["cp_size"], "--cp-rank", kw["cp_rank"]]
            if rng.random() < 0.5:
                kw["interleave"] = int(rng.integers(1, 4))
                args += ["--interleave", kw["interleave"]]
        elif p == "splitfuse" and r < 0.5:
            n = int(rng.integers(1, 4))
            kw["seq_lens"] = [int(x) for x in rng.integers(1, 30, n)]
            args += ["--seq-lens", ",".join(map(str, kw["seq_lens"]))]
            if rng.random() < 0.4:
                kw["q_lens"] = [int(rng.integers(1, s + 2)) for s in kw["seq_lens"]]
                args += ["--q-lens", ",".join(map(str, kw["q_lens"]))]
            elif rng.random() < 0.3:
                kw["positions"] = [int(x) for x in rng.integers(0, 35, 5)]
                args += ["--positions", ",".join(map(str, kw["positions"]))]
            if rng.random() < 0.3:
                kw["fallback"] = True
                args.append("--fallback")
        else:
            if p == "attn" or rng.random() < 0.7:
                kw["n"] = int(rng.integers(1, 60))
                args += ["-n", kw["n"]]
            if p == "swa" or rng.random() < 0.05:
                kw["window"] = int(rng.integers(1, 10))
                args += ["-w", kw["window"]]
            if p == "attn" and rng.random() < 0.5:
                kw["cache_dtype"] = ["f16", "bf16", "f32"][int(rng.integers(0, 3))]
                args += ["--cache-dtype", kw["cache_dtype"]]
        if rng.random() < 0.5:
            kw["dtype"] = DTYPES[int(rng.integers(0, len(DTYPES)))]
            args += ["--dtype", kw["dtype"]]
        if rng.random() < 0.15:
            kw["heads"] = 2
            args += ["--heads", 2]
        if p in ("splitfuse", "pooling", "swa") and "n" not in kw and "seq_lens" not in kw:
            kw["n"] = 40                         # not the full 2048^2 every time
            args += ["-n", 40]
        cases.append((kw, args))
    results = cli.many([("kvmask",) + tuple(a) for _, a in cases])
    n_ok = 0
    for (kw, args), res in zip(cases, results):
        what = "kvmask " + " ".join(map(str, args))
        ref = check(res, lambda: kvmask.ascend(**kw), what)
        if ref is not None:
            same_array(kvmask.ascend(**kw), ref[0], what)
            n_ok += 1
    assert n_ok > CASES // 3
