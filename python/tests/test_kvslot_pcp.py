"""kvtools.kvslot.pcp against kvslot pcp on random cases, both layouts,
with and without a block table, --rank, --fields and i32: the fields
written once and then each rank's, flattened in order, equal the
program's .npy stream byte for byte, and the refusals are the program's."""
import numpy as np

from kvtools import kvslot
from kvtools._kvslot_pcp import ASCEND_FIELDS, VLLM_FIELDS
from conftest import CASES, npy_stream, same_array, same_refusal

def flatten(d):
    """The arrays of pcp's dict in the program's order."""
    out = [(k, v) for k, v in d.items() if k != "ranks"]
    for r in d["ranks"]:
        out += list(r.items())
    return out


def case(rng, path):
    vllm = rng.random() < 0.5
    P = int(rng.integers(1, 5))
    n = int(rng.integers(1, 6))
    tok = [int(x) for x in rng.integers(1, 30, n)]
    if rng.random() < 0.5:
        tok[0] = 1
    kw = {"pcp_size": P, "tokens": tok}
    args = ["--pcp-size=%d" % P, "--tokens=" + ",".join(map(str, tok)),
            "-f", "npy"]
    if vllm:
        kw["layout"] = "vllm"
        args.append("--layout=vllm")
    comp = None
    if rng.random() < 0.6:
        comp = [int(x) for x in rng.integers(0, 40, n)]
        kw["computed"] = comp
        args.append("--computed=" + ",".join(map(str, comp)))
    if rng.random() < 0.2:
        kw["decodes"] = int(rng.integers(0, n + 1))
        args.append("--decodes=%d" % kw["decodes"])
    if rng.random() < 0.3:
        kw["rank"] = int(rng.integers(0, P + (rng.random() < 0.1)))
        args.append("--rank=%d" % kw["rank"])
    DS = 1
    if rng.random() < 0.5:
        B = int(rng.choice([2, 4, 8]))
        DS = int(rng.choice([1, 2]))
        span = B * (DS if vllm else P * DS)
        need = max(t + (comp[i] if comp else 0) for i, t in enumerate(tok))
        cols = -(-need // span) + 1
        rows = rng.integers(0, 500, (n, cols))
        np.savetxt(path, rows, fmt="%d")
        kw["block_size"], kw["block_table"] = B, path
        args += ["-B%d" % B, "--block-table=" + path]
        if DS > 1 or rng.random() < 0.3:
            kw["dcp_size"] = DS
            args.append("--dcp-size=%d" % DS)
            if rng.random() < 0.5:
                kw["dcp_rank"] = int(rng.integers(0, DS))
                args.append("--dcp-rank=%d" % kw["dcp_rank"])
        if rng.random() < 0.3:
            kw["interleave"] = int(rng.choice([1, 2]))
            args.append("--interleave=%d" % kw["interleave"])
    elif vllm and rng.random() < 0.3:
        kw["dcp_size"] = 2
        args.append("--dcp-size=2")
    if rng.random() < 0.2:
        names = VLLM_FIELDS if vllm else ASCEND_FIELDS
        pick = [names[int(i)] for i in rng.integers(0, len(names), 3)]
        kw["fields"] = ",".join(pick)
        args.append("--fields=" + kw["fields"])
    if rng.random() < 0.3:
        kw["dtype"] = "i32"
        args.append("--dtype=i32")
    return kw, args


def test_random_against_program(cli, tmp_path):
    rng = np.random.default_rng(31337)
    cases = [case(rng, str(tmp_path / ("bt%d.txt" % c)))
             for c in range(CASES)]
    results = cli.many([("kvslot", "pcp") + tuple(a) for _, a in cases])
    ok = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        what = "kvslot pcp " + " ".join(args)
        if status:
            assert out == b"", what
            same_refusal(lambda: kvslot.pcp(**kw), status, err, what)
            continue
        got = flatten(kvslot.pcp(**kw))
        ref = npy_stream(out)
        assert len(got) == len(ref), what
        for (name, a), r in zip(got, ref):
            same_array(a, r, what + " " + name)
        ok += 1
    assert ok >= len(cases) // 2


def test_refusals(cli, tmp_path):
    path = str(tmp_path / "bt.txt")
    with open(path, "w") as f:
        f.write("1 2 3\n")
    cases = (
        ({}, ()),
        ({"pcp_size": 2}, ("--pcp-size=2",)),
        ({"pcp_size": 0, "tokens": [3]}, ("--pcp-size=0", "--tokens=3")),
        ({"pcp_size": 2, "tokens": [3], "layout": "x"},
         ("--pcp-size=2", "--tokens=3", "--layout=x")),
        ({"pcp_size": 2, "tokens": [3], "fields": "rank,nope"},
         ("--pcp-size=2", "--tokens=3", "--fields=rank,nope")),
        ({"pcp_size": 2, "tokens": [3], "rank": 2},
         ("--pcp-size=2", "--tokens=3", "--rank=2")),
        ({"pcp_size": 2, "tokens": "3,0"}, ("--pcp-size=2", "--tokens=3,0")),
        ({"pcp_size": 2, "tokens": [3], "computed": [1, 2]},
         ("--pcp-size=2", "--tokens=3", "--computed=1,2")),
        ({"pcp_size": 2, "tokens": [3], "decodes": 2},
         ("--pcp-size=2", "--tokens=3", "--decodes=2")),
        ({"pcp_size": 2, "tokens": [3], "block_size": 4},
         ("--pcp-size=2", "--tokens=3", "-B4")),
        ({"pcp_size": 2, "tokens": [3], "interleave": 2},
         ("--pcp-size=2", "--tokens=3", "--interleave=2")),
        ({"pcp_size": 2, "tokens": [3], "block_size": 4, "block_table": path,
          "interleave": 3},
         ("--pcp-size=2", "--tokens=3", "-B4", "--block-table=" + path,
          "--interleave=3")),
        ({"pcp_size": 2, "tokens": [3], "max_mem": "100"},
         ("--pcp-size=2", "--tokens=3", "--max-mem=100")),
        ({"pcp_size": 2, "tokens": [3], "dtype": "x"},
         ("--pcp-size=2", "--tokens=3", "--dtype=x")),
    )
    for kw, args in cases:
        status, out, err = cli("kvslot", "pcp", *args)
        assert status != 0 and out == b"", args
        same_refusal(lambda: kvslot.pcp(**kw), status, err, " ".join(args))
