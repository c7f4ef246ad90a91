"""kvtools.kvchunk.sim, sim_gen, sim_from_split and toy against kvchunk
sim, sim gen, sim from-split and toy: random options over generated,
hand-written and Mooncake traces (reports as -f json's rows, the table and
the CSV), generated traces and converted split output equal as text, toy
KV and Q equal byte for byte (the .npy); refusals with the program's
message and status; four threads at once and any -j give the same
report."""
import json
import os
import pathlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import kvtools
from kvtools import kvchunk
from conftest import CASES, TOP, npy_stream, same_array, same_refusal

CONFIGS = os.path.join(TOP, "tests", "configs")
MOONCAKE = os.path.join(TOP, "tests", "vectors", "traces",
                        "mooncake-conversation.jsonl")

TOY_TRACE = "0 - - A:8 2 1\n1 - - A:8 3 1\n2 - - A:8 0 1\n3 - - X:3 0 1\n"


def _gen_kw(rng, small=True):
    """Random sim gen options: mostly valid, now and then one refused."""
    kw = {"seed": int(rng.integers(0, 1000)),
          "requests": int(rng.integers(0, 120 if small else 400)),
          "docs": int(rng.integers(20, 200))}
    pool = {
        "topk": lambda: int(rng.integers(0, 6)),
        "zipf": lambda: float(rng.choice([0, 0.5, 1.0, 1.3])),
        "fresh": lambda: float(rng.choice([0, 0.2, 0.7])),
        "order": lambda: str(rng.choice(["retrieval", "sorted", "random"])),
        "sys_variants": lambda: int(rng.integers(0, 4)),
        "tenants": lambda: int(rng.integers(1, 4)),
        "topics": lambda: int(rng.integers(0, 5)),
        "turns": lambda: int(rng.integers(1, 4)),
        "conversations": lambda: int(rng.integers(1, 9)),
        "rate": lambda: float(rng.choice([0, 0.5, 4])),
        "doc_len": lambda: str(rng.choice(["64", "20-200", "100~0.5"])),
        "sys_len": lambda: str(rng.choice(["50", "10-90"])),
        "q_len": lambda: str(rng.choice(["0", "5-30"])),
        "out_len": lambda: str(rng.choice(["1", "16", "4-40"])),
    }
    for k, f in pool.items():
        if rng.random() < 0.35:
            kw[k] = f()
    if rng.random() < 0.1:               # refused
        k, v = [("docs", 0), ("order", "best"), ("zipf", 11), ("topk", 500),
                ("doc_len", "x"), ("rate", -1), ("topics", 1000),
                ("seed", "-3")][int(rng.integers(0, 8))]
        kw[k] = v
    return kw


def _args(kw):
    out = []
    for k, v in kw.items():
        if v is True:
            out.append("--" + k.replace("_", "-"))
        elif v is not False and v is not None:
            out += ["--" + k.replace("_", "-"), str(v)]
    return out


def test_sim_gen_equals_cli(cli):
    rng = np.random.default_rng(71)
    cases = [_gen_kw(rng) for _ in range(CASES)]
    results = cli.many([("kvchunk", "sim", "gen") + tuple(_args(kw))
                        for kw in cases])
    n_ok = 0
    for kw, (status, out, err) in zip(cases, results):
        what = "kvchunk sim gen " + " ".join(_args(kw))
        if status != 0:
            same_refusal(lambda: kvchunk.sim_gen(**kw), status, err, what)
            continue
        assert kvchunk.sim_gen(**kw) == out.decode(), what
        n_ok += 1
    assert n_ok >= len(cases) // 2


class _Pieces:
    """A binary file object that keeps what it is given and the size of
    the largest write."""

    def __init__(self):
        self.parts, self.largest = [], 0

    def write(self, b):
        self.parts.append(bytes(b))
        self.largest = max(self.largest, len(b))
        return len(b)


def test_sim_gen_streams_into_out(cli, tmp_path):
    """out= streams the trace as the program writes it: a path (-o, the
    program's temporary file renamed into place), a binary and a text file
    object, in pieces of at most 64 KiB; a refusal writes nothing."""
    import io
    kw = {"seed": 5, "requests": 6000, "docs": 300, "turns": 2,
          "conversations": 40, "rate": 3, "doc_len": "20-200"}
    st, ref, _ = cli("kvchunk", "sim", "gen", *_args(kw))
    assert st == 0 and len(ref) > 4 << 16
    path = os.path.join(str(tmp_path), "t.txt")
    assert kvchunk.sim_gen(out=path, **kw) is None
    with open(path, "rb") as f:
        assert f.read() == ref
    assert os.listdir(str(tmp_path)) == ["t.txt"]     # no temporary left
    assert kvchunk.sim_gen(out=pathlib.Path(path), seed=6) is None
    st, ref6, _ = cli("kvchunk", "sim", "gen", "--seed", 6)
    assert open(path, "rb").read() == ref6
    pieces = _Pieces()
    assert kvchunk.sim_gen(out=pieces, **kw) is None
    assert b"".join(pieces.parts) == ref
    assert len(pieces.parts) > 4 and pieces.largest <= 1 << 16
    t = io.StringIO()
    kvchunk.sim_gen(out=t, **kw)
    assert t.getvalue() == ref.decode()
    with open(path, "wb") as f:
        kvchunk.sim_gen(out=f, **kw)
    assert open(path, "rb").read() == ref
    # refused before anything is written, as the program refuses it
    st, out, err = cli("kvchunk", "sim", "gen", "--docs", 0, "-o", path + "2")
    b = io.BytesIO()
    for dst in (b, path + "2"):
        same_refusal(lambda: kvchunk.sim_gen(docs=0, out=dst), st, err,
                     "sim gen --docs 0")
    assert b.getvalue() == b"" and not os.path.exists(path + "2")
    # a file object that fails: its error, and the generator stopped

    class Full:
        def write(self, b):
            raise OSError(28, "No space left on device")
    try:
        kvchunk.sim_gen(out=Full(), **kw)
        raise AssertionError("no error")
    except OSError as ex:
        assert ex.errno == 28


def _traces(tmp_path):
    """A few traces as files: generated ones (single and multi-turn,
    tenants, system prompts), the spec's toy trace, a slice of the shipped
    Mooncake trace and a malformed one."""
    rng = np.random.default_rng(72)
    out = []
    for i in range(4):
        kw = _gen_kw(rng, small=False)
        kw.pop("order", None)
        kw.update(requests=int(rng.integers(50, 300)), docs=60,
                  topk=int(rng.integers(1, 5)), topics=0, seed=i)
        for k in ("zipf", "rate", "doc_len", "seed", "fresh"):
            kw[k] = {"zipf": 1.0, "rate": 2, "doc_len": "20-120",
                     "seed": i, "fresh": 0.1}[k]
        p = os.path.join(tmp_path, "g%d.txt" % i)
        with open(p, "w") as f:
            f.write(kvchunk.sim_gen(**kw))
        out.append(p)
    for name, text in (("toy.txt", TOY_TRACE),
                       ("bad.txt", "0 - - A:8 2 1\n1 - - A:-8 3 1\n")):
        p = os.path.join(tmp_path, name)
        with open(p, "w") as f:
            f.write(text)
        out.append(p)
    p = os.path.join(tmp_path, "moon.jsonl")
    with open(MOONCAKE) as f, open(p, "w") as g:
        for _, line in zip(range(200), f):
            g.write(line)
    out.append(p)
    return out


def _sim_kw(rng, moon):
    pol = ["none", "prefix", "prefix-lfu", "prefix-radix"] if moon else \
        ["none", "prefix", "prefix-lfu", "prefix-radix", "prefix-sorted",
         "chunk", "chunk-lfu", "oracle"]
    kw = {}
    if rng.random() < 0.7:
        k = int(rng.integers(1, 4))
        kw["policies"] = ",".join(rng.choice(pol, k, replace=False))
    r = rng.random()
    if r < 0.5:
        kw["capacity_tokens"] = ",".join(
            str(int(x)) for x in rng.integers(600, 20000,
                                              int(rng.integers(1, 3))))
    elif r < 0.7:
        kw["capacity_bytes"] = str(rng.choice(["1G", "4G,8G", "16G"]))
    elif r < 0.8:
        kw["pool_bytes"] = "2G"
    chunky = any(p in kw.get("policies", "chunk") for p in
                 ("chunk", "oracle"))
    pools = any(p in kw.get("policies", "prefix") for p in
                ("prefix", "prefix-sorted", "prefix-lfu"))
    if pools and rng.random() < 0.3:
        kw["block_size"] = int(rng.choice([4, 16, 64]))
    if chunky:
        for k, f in (("rotate", lambda: str(rng.choice(["moved", "always"]))),
                     ("miss_copy", lambda: True),
                     ("chunk_context", lambda: str(rng.choice(["sys",
                                                               "isolated"]))),
                     ("tier", lambda: str(rng.choice(["hbm", "host",
                                                      "disk"])))):
            if rng.random() < 0.25:
                kw[k] = f()
        if "chunk" in kw.get("policies", "chunk") and rng.random() < 0.2:
            kw["max_chunks"] = int(rng.integers(1, 50))
    for k, f in (("warmup", lambda: int(rng.integers(0, 30))),
                 ("salt", lambda: "tenant"),
                 ("max_sessions", lambda: int(rng.integers(1, 20))),
                 ("us_per_token", lambda: float(rng.choice([10, 80.5]))),
                 ("us_per_pair", lambda: 0.01),
                 ("us_per_output_token", lambda: 7),
                 ("dtype", lambda: str(rng.choice(["fp8", "f32"]))),
                 ("layers", lambda: int(rng.integers(1, 40))),
                 ("model_config", lambda: os.path.join(CONFIGS, str(
                     rng.choice(["llama-3.1-8b.json", "deepseek-v3.json",
                                 "gpt2.json"]))))):
        if rng.random() < 0.12:
            kw[k] = f()
    if rng.random() < 0.1:               # refused
        k, v = [("tier", "tape"), ("rotate", "never"), ("capacity_tokens", "x"),
                ("policies", "none,lru"), ("bw_net", 5), ("max_sessions", 0),
                ("us_per_token", "-1"), ("trace_format", "csv"),
                ("kv_heads", 4)][int(rng.integers(0, 9))]
        kw[k] = v
    fmt = rng.random()
    if fmt < 0.2:
        kw["csv"] = True
    elif fmt < 0.4:
        kw["format"] = "text"
    kw["jobs"] = int(rng.integers(1, 4))
    return kw


def _sim_args(kw):
    a = []
    for k, v in kw.items():
        if k == "format":
            a += ["-f", v]
        elif k == "jobs":
            a += ["-j", str(v)]
        elif v is True:
            a.append("--" + k.replace("_", "-"))
        else:
            a += ["--" + k.replace("_", "-"), str(v)]
    if "format" not in kw and not kw.get("csv"):
        a += ["-f", "json"]
    return a


def test_sim_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(73)
    traces = _traces(str(tmp_path))
    cases = []
    for _ in range(CASES):
        t = traces[int(rng.integers(0, len(traces)))]
        kw = _sim_kw(rng, t.endswith(".jsonl"))
        cases.append((t, kw))
    results = cli.many([("kvchunk", "sim") + tuple(_sim_args(kw)) + (t,)
                        for t, kw in cases])
    n_ok = 0
    for (t, kw), (status, out, err) in zip(cases, results):
        what = "kvchunk sim " + " ".join(_sim_args(kw)) + " " + t
        as_bytes = rng.random() < 0.3
        src = open(t, "rb").read() if as_bytes else \
            (pathlib.Path(t) if rng.random() < 0.5 else t)
        if status != 0:
            same_refusal(lambda: kvchunk.sim(src, **kw), status, err, what,
                         path_dir=str(tmp_path) if as_bytes else None)
            continue
        got = kvchunk.sim(src, **kw)
        if "format" in kw or kw.get("csv"):
            assert got == out.decode(), what
        else:
            assert got == [json.loads(x) for x in out.decode().splitlines()], \
                what
        n_ok += 1
    assert n_ok >= len(cases) // 2


def test_sim_refusals(cli, tmp_path):
    toy = os.path.join(str(tmp_path), "toy.txt")
    with open(toy, "w") as f:
        f.write(TOY_TRACE)
    bad = [
        dict(capacity_tokens=1000, capacity_bytes="1G"),
        dict(policies="none,oracle", capacity_tokens=100),
        dict(policies="prefix", rotate="always"),
        dict(csv=True, format="json"),
        dict(format="xml"),
        dict(capacity_tokens=2, block_size=4),
        dict(warmup=4),
        dict(tier="host", bw_disk=3),
        dict(model_config=os.path.join(CONFIGS, "deepseek-v3.json"),
             head_dim=64),
        dict(trace_format="mooncake"),
        dict(capacity_tokens=4),        # a segment over the budget
    ]
    for kw in bad:
        a = _sim_args(kw)
        status, out, err = cli("kvchunk", "sim", *(a + [toy]))
        assert status != 0 and out == b"", a
        same_refusal(lambda: kvchunk.sim(toy, **kw), status, err,
                     "kvchunk sim " + " ".join(a))
    status, _, err = cli("kvchunk", "sim", os.path.join(str(tmp_path), "no"))
    same_refusal(lambda: kvchunk.sim(os.path.join(str(tmp_path), "no")),
                 status, err, "a missing trace")
    # a Mooncake trace has no chunks
    status, _, err = cli("kvchunk", "sim", "-p", "chunk", MOONCAKE)
    same_refusal(lambda: kvchunk.sim(MOONCAKE, policies="chunk"), status,
                 err, "kvchunk sim -p chunk mooncake")
    # the text as bytes is named <stdin>, as a piped trace
    try:
        kvchunk.sim(TOY_TRACE.encode(), warmup=4)
    except kvtools.Error as x:
        assert str(x) == "kvchunk sim: '<stdin>': --warmup 4 leaves nothing " \
            "to count: the trace has 4 requests" and x.status == 1
    else:
        raise AssertionError("warmup 4 of 4 requests not refused")


def test_sim_max_mem(cli, tmp_path):
    """max_mem is --max-mem: a request whose replay would grow the tables
    past it is refused before it is fed, as the program refuses it (status
    1, nothing printed); a bad size is a usage error; above the need the
    report equals the program's."""
    big = os.path.join(str(tmp_path), "big.txt")
    with open(big, "w") as f:
        f.write("0 - - D:1048576 8 1\n1 - - D:1048576 8 1\n")
    huge = os.path.join(str(tmp_path), "huge.txt")
    with open(huge, "w") as f:
        f.write("0 - - D:2147483648 8 1\n")
    base = dict(policies="prefix", capacity_tokens="inf")
    for path, mm in ((big, "4M"), (huge, "1G"), (big, "lots"), (big, "0")):
        kw = dict(base, max_mem=mm)
        a = _sim_args(kw)
        status, out, err = cli("kvchunk", "sim", "-q", *(a + [path]))
        assert status == (1 if mm[0].isdigit() and mm != "0" else 2), a
        assert out == b"", a
        same_refusal(lambda: kvchunk.sim(path, **kw), status, err,
                     "kvchunk sim " + " ".join(a))
    assert "(--max-mem)" in str(_refusal(big, dict(base,
                                                          max_mem="4M")))
    kw = dict(base, max_mem="256M")
    status, out, err = cli("kvchunk", "sim", "-q", *(_sim_args(kw) + [big]))
    assert status == 0, err
    assert kvchunk.sim(big, **kw) == \
        [json.loads(x) for x in out.decode().splitlines()]


def _refusal(trace, kw):
    """The kvtools.Error kvchunk.sim(trace, **kw) raises."""
    try:
        kvchunk.sim(trace, **kw)
    except kvtools.Error as x:
        return x
    raise AssertionError("not refused: %r" % (kw,))


def test_sim_threads(tmp_path):
    trace = kvchunk.sim_gen(seed=5, requests=400, docs=80, topk=4,
                            doc_len="20-100", turns=2).encode()
    kw = dict(capacity_tokens="3000,9000",
              policies="none,prefix,prefix-radix,chunk,chunk-lfu,oracle")
    want = kvchunk.sim(trace, jobs=1, **kw)
    assert kvchunk.sim(trace, jobs=4, **kw) == want
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda j: kvchunk.sim(trace, jobs=j % 3, **kw),
                          range(8)))
    assert all(g == want for g in got)
    assert len(want) == 2 * 6              # a row per budget and policy
    assert [(r["capacity_tokens"], r["policy"]) for r in want[::5]] == \
        [(3000, "none"), (3000, "oracle"), (9000, "chunk-lfu")]


def test_sim_from_split_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(74)
    lines = []
    for _ in range(20):
        parts = ["s%d" % rng.integers(0, 3)] + \
            ["c%d" % x for x in rng.integers(0, 6, int(rng.integers(0, 4)))] + \
            ["q%d" % rng.integers(0, 99)]
        lines.append(kvchunk.split("##".join(parts), shape="2,2,16",
                                   format="text"))
    p = os.path.join(str(tmp_path), "segs.txt")
    with open(p, "w") as f:
        f.write("".join(lines))
    for kw in (dict(), dict(rate=0), dict(rate=2.5, tenant="t1", out_len=9),
               dict(tenant="a b"), dict(rate="x"), dict(out_len=-1)):
        status, out, err = cli("kvchunk", "sim", "from-split", *_args(kw), p)
        what = "kvchunk sim from-split " + " ".join(_args(kw))
        if status != 0:
            same_refusal(lambda: kvchunk.sim_from_split(p, **kw), status,
                         err, what)
            continue
        assert kvchunk.sim_from_split(p, **kw) == out.decode(), what
        assert kvchunk.sim_from_split(open(p, "rb").read(), **kw) == \
            out.decode(), what
    # and the trace it makes replays as the program replays it
    tr = kvchunk.sim_from_split(p)
    assert kvchunk.sim(tr.encode(), format="text") == \
        cli("kvchunk", "sim", "-f", "text", _write(tmp_path, "t.txt", tr))[1] \
        .decode()
    status, _, err = cli("kvchunk", "sim", "from-split",
                         _write(tmp_path, "bad.txt", "sys 0 5\n"))
    same_refusal(lambda: kvchunk.sim_from_split(
        pathlib.Path(tmp_path, "bad.txt")), status, err, "from-split bad")


def test_sim_from_split_random(cli, tmp_path):
    """CASES random segment lists (prompts drawn from a pool that shares
    sys prompts and chunks, now and then a malformed line) and options:
    the same trace text, or the same refusal."""
    rng = np.random.default_rng(76)
    pool = []
    for _ in range(40):
        parts = ["s%d" % rng.integers(0, 3)] + \
            ["c%d" % x for x in rng.integers(0, 8, int(rng.integers(0, 4)))] + \
            ["q%d" % rng.integers(0, 99)]
        pool.append(kvchunk.split("##".join(parts), shape="2,2,16",
                                  format="text"))
    bad = ["sys 0 5\n", "chunk 0 3 zz\n", "question -1 2\n", "x\n"]
    opts = (("rate", lambda: [0, 0.5, 2.5, 100, "x", -1][int(rng.integers(0, 6))]),
            ("tenant", lambda: ["t1", "a b", "T"][int(rng.integers(0, 3))]),
            ("out_len", lambda: [1, 9, 300, 0, -1][int(rng.integers(0, 5))]))
    cases = []
    for c in range(CASES):
        text = "".join(pool[int(i)] for i in
                       rng.integers(0, len(pool), int(rng.integers(1, 9))))
        if rng.random() < 0.05:
            text += bad[int(rng.integers(0, len(bad)))]
        kw = {k: f() for k, f in opts if rng.random() < 0.4}
        cases.append((_write(tmp_path, "s%d.txt" % c, text), text, kw))
    results = cli.many([("kvchunk", "sim", "from-split") + tuple(_args(kw)) +
                        (p,) for p, _, kw in cases])
    n_ok = 0
    for (p, text, kw), (status, out, err) in zip(cases, results):
        what = "kvchunk sim from-split %s %s" % (" ".join(_args(kw)), p)
        src = p if len(p) % 2 else text.encode()
        if status != 0:
            same_refusal(lambda: kvchunk.sim_from_split(src, **kw), status,
                         err, what, path_dir=str(tmp_path))
            continue
        assert kvchunk.sim_from_split(src, **kw) == out.decode(), what
        n_ok += 1
    assert CASES // 2 < n_ok < CASES


def _write(d, name, text):
    p = os.path.join(str(d), name)
    with open(p, "w") as f:
        f.write(text)
    return p


TOY_CONFIGS = ["llama-3.1-8b.json", "deepseek-v2-lite.json", "gpt-j-6b.json",
               "qwen2.5-7b-instruct-yarn.json"]


def _few_layers(d):
    """TOY_CONFIGS with 1 or 2 of their layers, in d: the layers are
    alike, and 27 to 32 of them made a case's KV that many times larger."""
    out = {}
    for i, name in enumerate(TOY_CONFIGS):
        with open(os.path.join(CONFIGS, name)) as f:
            j = json.load(f)
        j["num_hidden_layers"] = 1 + i % 2
        out[name] = os.path.join(d, name)
        with open(out[name], "w") as f:
            json.dump(j, f)
    return out


def _toy_case(rng, tok_path, configs=None):
    kw = {}
    if rng.random() < 0.2:
        name = str(rng.choice(TOY_CONFIGS))
        kw["model_config"] = configs[name] if configs else \
            os.path.join(CONFIGS, name)
        if rng.random() < 0.5:
            kw["shape"] = "2,%d,%d" % (rng.integers(1, 3), rng.choice([16, 64,
                                                                       128]))
    else:
        kw["shape"] = "%d,%d,%d" % (rng.integers(1, 4), rng.integers(1, 4),
                                    rng.choice([8, 16, 32, 64]))
    kw["dtype"] = str(rng.choice(["f16", "bf16", "f32"]))
    for k, f in (("pos", lambda: int(rng.integers(0, 5000))),
                 ("seed", lambda: int(rng.integers(0, 99))),
                 ("embed_dim", lambda: int(rng.choice([4, 32, 48]))),
                 ("rope", lambda: str(rng.choice(["neox", "gptj", "none"]))),
                 ("rope_theta", lambda: 500000),
                 ("rotary_dim", lambda: 8)):
        if rng.random() < 0.3:
            kw[k] = f()
    if rng.random() < 0.3:
        kw["q"] = int(rng.integers(0, 3))
        if rng.random() < 0.5:
            kw["heads"] = int(rng.choice([2, 4, 6]))
    if rng.random() < 0.08:              # refused
        k, v = [("pos", 2**31 - 3), ("heads", 0), ("max_mem", "100"),
                ("embed_dim", 0), ("pos", -1)][int(rng.integers(0, 5))]
        kw[k] = v
    n = int(rng.integers(0, 24))
    ids = [int(x) for x in rng.integers(0, 50000, n)]
    with open(tok_path, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    return ids, kw


def test_toy_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(75)
    configs = _few_layers(str(tmp_path))
    cases = []
    for c in range(CASES):
        tp = os.path.join(str(tmp_path), "t%d.txt" % c)
        ids, kw = _toy_case(rng, tp, configs)
        cases.append((tp, ids, kw))
    results = cli.many([("kvchunk", "toy", "--tokens", tp) + tuple(_args(kw))
                        for tp, _, kw in cases])
    n_ok = 0
    for (tp, ids, kw), (status, out, err) in zip(cases, results):
        what = "kvchunk toy --tokens %s %s" % (tp, " ".join(_args(kw)))
        toks = pathlib.Path(tp) if rng.random() < 0.3 else ids
        if status != 0:
            same_refusal(lambda: kvchunk.toy(toks, **kw), status, err, what)
            continue
        got = kvchunk.toy(toks, **kw)
        (ref,) = npy_stream(out)
        same_array(got, ref, what)
        n_ok += 1
    assert n_ok >= len(cases) // 2


def test_toy_refusals(cli, tmp_path):
    tp = _write(tmp_path, "tok.txt", "1 2 3\n")
    for args, call in (
            ([], lambda: kvchunk.toy([1, 2, 3])),
            (["--shape", "2,2,16"], lambda: kvchunk.toy(shape="2,2,16")),
            (["--shape", "2,2,16", "--tokens", tp, "--heads", "4"],
             lambda: kvchunk.toy([1, 2, 3], shape="2,2,16", heads=4)),
            (["--shape", "2,2,16", "--tokens", tp, "--q", "2"],
             lambda: kvchunk.toy([1, 2, 3], shape="2,2,16", q=2)),
            (["--model-config", os.path.join(CONFIGS, "deepseek-v3.json"),
              "--tokens", tp, "--q", "0"],
             lambda: kvchunk.toy([1, 2, 3], q=0, model_config=os.path.join(
                 CONFIGS, "deepseek-v3.json"))),
            (["--shape", "2,2,16", "--tokens", tp, "--pos", "2147483646"],
             lambda: kvchunk.toy([1, 2, 3], shape="2,2,16", pos=2147483646))):
        status, out, err = cli("kvchunk", "toy", "-o",
                               os.path.join(str(tmp_path), "o.npy"), *args)
        assert status != 0 and out == b"", args
        same_refusal(call, status, err, "kvchunk toy " + " ".join(args))


def test_path_not_utf8(cli, tmp_path):
    """A path whose bytes are not UTF-8 (a str as os.listdir gives it, or
    a PathLike) names the file the program is given, as every path does."""
    d = os.fsencode(str(tmp_path))
    tr = os.path.join(d, b"tr\xe9.txt")
    with open(tr, "wb") as f:
        f.write(TOY_TRACE.encode())
    want = cli("kvchunk", "sim", "-f", "text", os.fsdecode(tr))[1].decode()
    assert want.startswith("policy")
    for p in (os.fsdecode(tr), pathlib.Path(os.fsdecode(tr))):
        assert kvchunk.sim(p, format="text") == want
        assert kvchunk.sim(p) == kvchunk.sim(TOY_TRACE.encode())
    segs = os.path.join(d, b"s\xe9gs.txt")
    with open(segs, "w") as f:
        f.write(kvchunk.split("s0##c1##q2", shape="2,2,16", format="text"))
    want = cli("kvchunk", "sim", "from-split", os.fsdecode(segs))[1].decode()
    assert want and kvchunk.sim_from_split(os.fsdecode(segs)) == want


def test_empty_values_refused(cli, tmp_path):
    """An option given as "" is refused as the program refuses --NAME ''
    (usage, before any other check); max_mem="" is no default."""
    tr = _write(tmp_path, "toy.txt", TOY_TRACE)
    ids = _write(tmp_path, "ids.txt", "1 2 3\n")
    toy = ["toy", "--tokens", ids, "--shape", "1,1,8"]
    sim = lambda **kw: kvchunk.sim(tr, **kw)                   # noqa: E731
    split = lambda **kw: kvchunk.sim_from_split(tr, **kw)      # noqa: E731
    for fn, kw, args in [
        (sim, dict(capacity_tokens=""), ["sim", "--capacity-tokens", "", tr]),
        (sim, dict(policies=[]), ["sim", "--policies", "", tr]),
        (sim, dict(jobs="", salt="x"),
         ["sim", "--jobs", "", "--salt", "x", tr]),
        (sim, dict(format=""), ["sim", "--format", "", tr]),
        (kvchunk.sim_gen, dict(topic_clusters=""),
         ["sim", "gen", "--topic-clusters", ""]),
        (kvchunk.sim_gen, dict(docs=0, order=""),
         ["sim", "gen", "--docs", "0", "--order", ""]),
        (split, dict(tenant=""), ["sim", "from-split", "--tenant", "", tr]),
        (kvchunk.toy, dict(tokens=[1, 2], shape="1,1,8", max_mem=""),
         toy + ["--max-mem", ""]),
        (kvchunk.toy, dict(tokens=[1], shape="1,1,8", pos=""),
         toy + ["--pos", ""]),
        (kvchunk.info, dict(shape="1,1,8", max_mem=""),
         ["info", "--shape", "1,1,8", "--max-mem", ""]),
    ]:
        status, out, err = cli("kvchunk", *args)
        assert status == 2 and out == b"" and "got an empty one" in err, args
        same_refusal(lambda: fn(**kw), status, err, " ".join(args))
