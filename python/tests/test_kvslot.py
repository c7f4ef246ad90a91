"""kvtools.kvslot.map against kvslot map: random steps equal byte for
byte, field by field, in the program's order."""
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvslot
from conftest import CASES, npy_stream, same_array


def test_map_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(11)
    cases = []
    for c in range(CASES):
        B = int(rng.choice([1, 2, 4, 8, 16]))
        n = int(rng.integers(1, 5))
        cols = int(rng.integers(1, 6))
        table = rng.integers(0, 50, (n + int(rng.integers(0, 2)), cols)).astype(np.int64)
        sched = [int(x) for x in rng.integers(0, 2 * B + 3, n)]
        kw = dict(block_size=B, block_table=table, scheduled=sched)
        path = os.path.join(tmp_path, "t%d.npy" % c)
        np.save(path, table)
        args = ["map", "-B", B, "--block-table", path,
                "--scheduled", ",".join(map(str, sched))]
        if rng.random() < 0.5:
            comp = [int(x) for x in rng.integers(0, B * cols, n)]
            kw["computed"] = comp
            args += ["--computed", ",".join(map(str, comp))]
        if rng.random() < 0.3:
            kw["pad_to"] = int(rng.integers(0, 30))
            args += ["--pad-to", kw["pad_to"]]
        if rng.random() < 0.3:
            kw["dtype"] = "i32"
            args += ["--dtype", "i32"]
        if rng.random() < 0.2:
            f = ["slot_mapping", "num_scheduled_tokens", "num_reqs",
                 "block_table", "cp_owner", "positions"]
            pick = [f[i] for i in rng.permutation(len(f))[:int(rng.integers(1, 4))]]
            kw["fields"] = ",".join(pick)
            args += ["--fields", kw["fields"]]
        if rng.random() < 0.2 and B % 2 == 0:
            kw["kernel_block_size"] = B // 2
            args += ["--kernel-block-size", B // 2]
        args += ["-f", "npy"]
        cases.append((kw, args))
    results = cli.many([("kvslot",) + tuple(a) for _, a in cases])
    n_ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(map(str, args))
        if status != 0:
            with pytest.raises(kvtools.Error) as ei:
                kvslot.map(**kw)
            # a table file is named in the program's messages, not an array
            if "'" + str(tmp_path) not in err:
                assert str(ei.value) == err, what
            continue
        got = kvslot.map(**kw)
        ref = npy_stream(out)
        assert len(got) == len(ref), what
        for (name, a), r in zip(got.items(), ref):
            same_array(a, r, what + " " + name)
        n_ok += 1
    assert n_ok > CASES // 3


def test_map_example():
    m = kvslot.map(block_size=4, block_table=[[1, 2, 3]], scheduled=[5])
    assert m["slot_mapping"].tolist() == [4, 5, 6, 7, 8]
    assert int(m["num_tokens"]) == 5


def test_map_errors(capfd):
    with pytest.raises(kvtools.Error):
        kvslot.map(block_size=4, block_table=[[1]], scheduled=[9])
    with pytest.raises(kvtools.Error) as ei:
        kvslot.map(block_size=0, block_table=[[1]], scheduled=[1])
    assert ei.value.status == 2
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_plan_equals_cli(cli):
    rng = np.random.default_rng(12)
    cases = []
    for _ in range(CASES):
        n = int(rng.integers(1, 5))
        M = int(rng.integers(4, 40))
        plens = [int(x) for x in rng.integers(1, M + 2, n)]   # M and M+1 refused
        kw = dict(prompt_lens=plens, max_tokens=int(rng.integers(1, 24)),
                  block_size=int(rng.choice([1, 2, 4, 16])), max_model_len=M)
        args = ["plan", "--prompt-lens", ",".join(map(str, plens)),
                "--max-tokens", kw["max_tokens"], "-B", kw["block_size"],
                "--max-model-len", M]
        if rng.random() < 0.5:
            kw["output_lens"] = int(rng.integers(1, 6))
            args += ["--output-lens", kw["output_lens"]]
        if rng.random() < 0.4:
            kw["decode"] = True
            args.append("--decode")
            if "output_lens" not in kw:      # a decode ends at the output lengths
                kw["output_lens"] = int(rng.integers(1, 6))
                args += ["--output-lens", kw["output_lens"]]
        if rng.random() < 0.3:
            kw["num_blocks"] = int(rng.integers(2, 30))
            args += ["--num-blocks", kw["num_blocks"]]
        if rng.random() < 0.3:
            kw["steps"] = int(rng.integers(1, 6))
            args += ["--steps", kw["steps"]]
        if rng.random() < 0.2:
            kw["max_num_seqs"] = int(rng.integers(1, 4))
            args += ["--max-num-seqs", kw["max_num_seqs"]]
        if rng.random() < 0.2:
            kw["reorder"] = ["split-decodes", "decode-extend-prefill"][int(rng.integers(0, 2))]
            args += ["--reorder", kw["reorder"]]
        if rng.random() < 0.2:
            kw["dtype"] = "i32"
            args += ["--dtype", "i32"]
        args += ["-f", "npy"]
        cases.append((kw, args))
    results = cli.many([("kvslot",) + tuple(a) for _, a in cases])
    n_ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot " + " ".join(map(str, args))
        if status != 0:
            with pytest.raises(kvtools.Error) as ei:
                list(kvslot.plan(**kw))
            assert str(ei.value) == err, what
            continue
        steps = list(kvslot.plan(**kw))
        ref = npy_stream(out)
        nf = len(kvslot.PLAN_DEFAULT)
        assert len(ref) == nf * len(steps), what
        for s, st in enumerate(steps):
            assert list(st) == list(kvslot.PLAN_DEFAULT)
            for (name, a), r in zip(st.items(), ref[s * nf:(s + 1) * nf]):
                same_array(a, r, "%s step %d %s" % (what, s + 1, name))
        n_ok += 1
    assert n_ok > CASES // 3


def test_plan_yields_steps_lazily():
    g = kvslot.plan(prompt_lens=[3, 2, 8], max_tokens=10, block_size=2,
                    max_model_len=12, decode=True)
    first = next(g)
    assert first["slot_mapping"].tolist() == [2, 3, 4, 6, 7, 8, 9, 10, 11, 12]
