"""kvtools.kvchunk.split against kvchunk split: random text prompts (with
escaped separators) and token-id prompts, with and without a geometry
(keys), equal byte for byte (the .npy stream) and as text; refusals with
the program's message."""
import os
import pathlib

import numpy as np

from kvtools import kvchunk
from conftest import CASES, npy_stream, same_array, same_refusal


def _text(rng, sep):
    parts = []
    for _ in range(int(rng.integers(0, 6))):
        w = "".join(rng.choice(list("ab c\\#xy"), int(rng.integers(0, 8))))
        parts.append(w)
    return sep.join(parts)


def _case(rng, tmp_path, c):
    kw, args = {}, []
    path = os.path.join(tmp_path, "p%d" % c)
    if rng.random() < 0.35:                       # token ids
        sep = [int(x) for x in rng.integers(0, 4, int(rng.integers(1, 3)))]
        ids = [int(x) for x in rng.integers(0, 4, int(rng.integers(0, 30)))]
        with open(path, "w") as f:
            f.write(" ".join(map(str, ids)))
        kw.update(ids=True, sep_ids=sep)
        args += ["--ids", "--sep-ids", ",".join(map(str, sep))]
        prompt = ids if rng.random() < 0.7 else pathlib.Path(path)
    else:
        sep = str(rng.choice(["##", "#", "|", "ab"]))
        text = _text(rng, sep)
        with open(path, "w") as f:
            f.write(text)
        if sep != "##" or rng.random() < 0.3:
            kw["sep"] = sep
            args += ["--sep", sep]
        prompt = text if rng.random() < 0.7 else pathlib.Path(path)
    if rng.random() < 0.6:
        kw["shape"] = "%d,%d,%d" % (rng.integers(1, 4), rng.integers(1, 4),
                                    rng.choice([8, 16, 64]))
    if rng.random() < 0.3:
        kw["chunk_context"] = str(rng.choice(["sys", "none"]))
    for k in ("model", "salt"):
        if rng.random() < 0.2:
            kw[k] = "%s%d" % (k, rng.integers(0, 99))
    if rng.random() < 0.05:
        kw["max_mem"] = "66000"
    for k, v in kw.items():
        if k not in ("ids", "sep_ids", "sep"):
            args += ["--" + k.replace("_", "-"), v]
    fmt = str(rng.choice(["npy", "text"]))
    kw["format"] = fmt
    return prompt, kw, ["split", "-f", fmt, "--force"] + args + [path]


def test_split_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(61)
    cases = [_case(rng, str(tmp_path), c) for c in range(CASES)]
    results = cli.many([("kvchunk",) + tuple(a) for _, _, a in cases])
    n_ok = 0
    for (prompt, kw, args), (status, out, err) in zip(cases, results):
        what = "kvchunk " + " ".join(map(str, args))
        if status != 0:
            same_refusal(lambda: kvchunk.split(prompt, **kw), status, err,
                         what, path_dir=str(tmp_path))
            continue
        got = kvchunk.split(prompt, **kw)
        if kw["format"] == "text":
            assert got == out.decode(), what
        else:
            ref = npy_stream(out)
            got = got if isinstance(got, tuple) else (got,)
            assert len(got) == len(ref), what
            for g, r in zip(got, ref):
                same_array(g, r, what)
        n_ok += 1
    assert n_ok > len(cases) // 2


def test_split_refusals(cli, tmp_path):
    p = os.path.join(tmp_path, "p")
    with open(p, "w") as f:
        f.write("1 2 3")
    for kw, args in [
        (dict(ids=True), ["--ids"]),
        (dict(sep_ids=[1]), ["--sep-ids", "1"]),
        (dict(ids=True, sep_ids=[1], sep="#"),
         ["--ids", "--sep-ids", "1", "--sep", "#"]),
        (dict(sep=""), ["--sep", ""]),
        (dict(ids=True, sep_ids="1,x"), ["--ids", "--sep-ids", "1,x"]),
        (dict(ids=True, sep_ids=[2**31]), ["--ids", "--sep-ids", 2**31]),
        (dict(shape="1,1"), ["--shape", "1,1"]),
        (dict(format="pgm"), ["-f", "pgm"]),
        (dict(max_mem="x"), ["--max-mem", "x"]),
    ]:
        status, out, err = cli("kvchunk", "split", *(args + [p]))
        assert status != 0 and out == b"", args
        prompt = [1, 2, 3] if kw.get("ids") else "1 2 3"
        same_refusal(lambda: kvchunk.split(prompt, **kw), status, err,
                     str(args))
