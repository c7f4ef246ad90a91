"""kvtools.kvslot.reorg against kvslot reorg on random cases, both context
chunkings, PCP and DCP, interleaving, chunk and workspace sizes, i64 and
i32: every array equal byte for byte, and the refusals the program's."""
import numpy as np

from kvtools import kvslot
from conftest import CASES, same_refusal, same_stream


def case(rng, path):
    vllm = rng.random() < 0.4
    B = int(rng.choice([1, 2, 4, 8, 16]))
    I = int(rng.choice([x for x in (1, 2, 4) if B % x == 0] or [1]))
    if rng.random() < 0.03:
        I = B + 1                               # does not divide B
    P = 1 if vllm else int(rng.integers(1, 4))
    D = int(rng.integers(1, 4))
    n = int(rng.integers(1, 5))
    ctx = [int(x) for x in rng.integers(0, 60, n)]
    W = P * D
    cols = max(-(-max(ctx) // (B * W)), 1) + int(rng.integers(0, 2))
    rows = rng.integers(0, 300, (n + (rng.random() < 0.03), cols))
    np.savetxt(path, rows, fmt="%d")
    kw = {"block_size": B, "block_table": path if rng.random() < 0.7
          else rows.tolist(), "context_lens": ctx}
    args = ["-B%d" % B, "--block-table=" + path,
            "--context-lens=" + ",".join(map(str, ctx)), "-f", "npy"]
    if P > 1 or rng.random() < 0.2:
        kw["pcp_size"] = P
        args.append("--pcp-size=%d" % P)
    if D > 1 or rng.random() < 0.2:
        kw["dcp_size"] = D
        args.append("--dcp-size=%d" % D)
    if I > 1 or rng.random() < 0.2:
        kw["interleave"] = I
        args.append("--interleave=%d" % I)
    if vllm:
        kw["context_chunking"] = "vllm"
        args.append("--context-chunking=vllm")
        if rng.random() < 0.7:
            kw["workspace"] = int(rng.integers(1, 40))
            args.append("--workspace=%d" % kw["workspace"])
    elif rng.random() < 0.6:
        unit = I * P * D
        kw["max_context_chunk"] = unit * int(rng.integers(0, 5)) + \
            (rng.random() < 0.05)
        args.append("--max-context-chunk=%d" % kw["max_context_chunk"])
    if rng.random() < 0.3:
        kw["dtype"] = "i32"
        args.append("--dtype=i32")
    return kw, args


def test_random_against_program(cli, tmp_path):
    rng = np.random.default_rng(4242)
    cases = [case(rng, str(tmp_path / ("bt%d.txt" % c)))
             for c in range(CASES)]
    results = cli.many([("kvslot", "reorg") + tuple(a) for _, a in cases])
    ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot reorg " + " ".join(args)
        if status:
            assert out == b"", what
            if not isinstance(kw["block_table"], str):
                kw["block_table"] = args[1].split("=", 1)[1]
            same_refusal(lambda: kvslot.reorg(**kw), status, err, what)
            continue
        same_stream(kvslot.reorg(**kw), out, what)
        ok += 1
    assert ok >= len(cases) // 2


def test_refusals(cli, tmp_path):
    path = str(tmp_path / "bt.txt")
    with open(path, "w") as f:
        f.write("1 2 3\n")
    bt = "--block-table=" + path
    base = {"block_size": 2, "block_table": path, "context_lens": [3]}
    cases = (
        ({}, ()),
        (dict(base, block_size=0), ("-B0", bt, "--context-lens=3")),
        (dict(base, pcp_size=2000), ("-B2", bt, "--context-lens=3",
                                     "--pcp-size=2000")),
        (dict(base, context_lens="3,-2"), ("-B2", bt, "--context-lens=3,-2")),
        (dict(base, max_mem="x"), ("-B2", bt, "--context-lens=3",
                                   "--max-mem=x")),
        (dict(base, context_chunking="flat"),
         ("-B2", bt, "--context-lens=3", "--context-chunking=flat")),
        (dict(base, interleave=3), ("-B2", bt, "--context-lens=3",
                                    "--interleave=3")),
        (dict(base, context_chunking="vllm", max_context_chunk=4),
         ("-B2", bt, "--context-lens=3", "--context-chunking=vllm",
          "--max-context-chunk=4")),
        (dict(base, workspace=64), ("-B2", bt, "--context-lens=3",
                                    "--workspace=64")),
        (dict(base, context_chunking="vllm", pcp_size=2),
         ("-B2", bt, "--context-lens=3", "--context-chunking=vllm",
          "--pcp-size=2")),
        (dict(base, max_context_chunk=3, dcp_size=2),
         ("-B2", bt, "--context-lens=3", "--max-context-chunk=3",
          "--dcp-size=2")),
        (dict(base, max_mem="100"), ("-B2", bt, "--context-lens=3",
                                     "--max-mem=100")),
        (dict(base, block_table=path + ".none"),
         ("-B2", bt + ".none", "--context-lens=3")),
        (dict(base, context_lens=[3, 4]), ("-B2", bt, "--context-lens=3,4")),
        (dict(base, dtype="u8"), ("-B2", bt, "--context-lens=3",
                                  "--dtype=u8")),
    )
    for kw, args in cases:
        status, out, err = cli("kvslot", "reorg", *args)
        assert status != 0 and out == b"", args
        same_refusal(lambda: kvslot.reorg(**kw), status, err, " ".join(args))
