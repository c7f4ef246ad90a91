"""The options of some mask kinds only (-w, --pre, -p, --q-lens, -n,
--align, --chunk-size ...): kvtools.kvmask refuses one given to another
kind, whatever its value (align="bottom-right" too), with kvmask's status
and message, and takes it where the kind does, as kvmask KIND does."""
import numpy as np
import pytest

from kvtools import kvmask
from conftest import npy_stream, same_array, same_refusal

BASE = {"causal": dict(n=4), "window": dict(n=4, window=2),
        "band": dict(n=4, pre=1, next=1), "full": dict(n=4),
        "prefix": dict(n=4, prefix=1), "varlen": dict(q_lens=[2, 2]),
        "chunk": dict(sys=1, chunks=[2], question=1),
        "local": dict(n=4, chunk_size=2), "tree": dict(parents=[-1, 0])}
EXTRA = (("window", 2), ("pre", 1), ("next", 0), ("prefix", 0),
         ("parents", [-1]), ("q_lens", [4]), ("kv_lens", [4]), ("sys", 1),
         ("chunks", [1]), ("question", 1), ("n", 4), ("q", 4), ("k", 4),
         ("align", "bottom-right"), ("align", "top-left"),
         ("chunk_size", 2), ("keep", True), ("fill", "-inf"))
OPT = {"window": "-w", "pre": "--pre", "next": "--next", "prefix": "-p",
       "parents": "--parents", "q_lens": "--q-lens", "kv_lens": "--kv-lens",
       "sys": "--sys", "chunks": "--chunks", "question": "--question",
       "n": "-n", "q": "-q", "k": "-k", "align": "--align",
       "chunk_size": "--chunk-size", "fill": "--fill", "dtype": "--dtype"}


def args(kind, kw, fmt):
    a = [kind]
    for key, v in kw.items():
        if key == "keep":
            a.append("--keep")
        else:
            a += [OPT[key], ",".join(map(str, v)) if isinstance(v, list) else v]
    return a + ["-f", fmt]


def cases(block):
    out = []
    for kind, base in BASE.items():
        for key, v in EXTRA:
            if key in base or (block and key in ("keep", "fill")):
                continue
            if block and kind == "tree":
                continue
            kw = dict(base, **{key: v})
            if key in ("q", "k") and "n" in base:
                kw = dict(kw, q=3, k=4)
                del kw["n"]
            if key == "fill":
                kw["dtype"] = "f32"
            out.append((kind, kw))
    return out


def _call(kind, kw, fmt):
    if fmt == "block":
        return list(kvmask.block(kind, **kw).values())
    return [getattr(kvmask, kind)(**kw)]


@pytest.mark.parametrize("fmt", ["npy", "block"])
def test_kind_options(cli, fmt):
    """Each option on each kind, dense and -f block: the program's
    refusal, or its arrays."""
    todo = cases(fmt == "block")
    res = cli.many([("kvmask",) + tuple(map(str, args(k, kw, fmt)))
                    for k, kw in todo])
    n_ok = n_fail = 0
    for (kind, kw), (status, out, err) in zip(todo, res):
        what = "kvmask " + " ".join(map(str, args(kind, kw, fmt)))
        if status != 0:
            same_refusal(lambda: _call(kind, kw, fmt), status, err, what)
            n_fail += 1
            continue
        got, ref = _call(kind, kw, fmt), npy_stream(out)
        assert len(got) == len(ref), what
        for a, r in zip(got, ref):
            same_array(a, r, what)
        n_ok += 1
    assert n_ok > 10 and n_fail > 40, (n_ok, n_fail)


def test_block_value_options(cli):
    """-f block with --keep (taken, the tensors the same), --dtype or
    --fill (refused); keywords left None are options not given."""
    for kw, a in ((dict(keep=True), ["--keep"]), (dict(keep=False), []),
                  (dict(dtype=None, fill=None), []),
                  (dict(dtype="f32"), ["--dtype", "f32"]),
                  (dict(fill="-inf"), ["--fill", "-inf"])):
        status, out, err = cli("kvmask", "causal", "-n", 5, *a, "-f", "block")
        what = " ".join(a)
        if status != 0:
            same_refusal(lambda: kvmask.block("causal", n=5, **kw), status,
                         err, what)
            continue
        got = kvmask.block("causal", n=5, **kw)
        for (name, v), r in zip(got.items(), npy_stream(out)):
            same_array(v, r, what + " " + name)


def test_tree_block_refused_after_kind_options(cli):
    """-f block of a tree: its own refusal, after the options' check."""
    for kw, a in ((dict(parents=[-1, 0]), []),
                  (dict(parents=[-1, 0], align="bottom-right"),
                   ["--align", "bottom-right"])):
        status, out, err = cli("kvmask", "tree", "--parents", "-1,0", *a,
                               "-f", "block")
        assert status == 2 and out == b""
        same_refusal(lambda: kvmask.block("tree", **kw), status, err,
                     " ".join(a))
    assert np.asarray(kvmask.tree(parents=[-1, 0], prefix=0)).shape == (2, 2)
