"""kvtools.kvslot.plan(chunk_cache=True) against kvslot plan --chunk-cache:
random segment lists (prompts sharing chunks by key, now and then a key
with another length) under random pools, budgets and chunk-cache limits,
every step's arrays equal byte for byte to the program's .npy stream, the
evicted keys equal to its text output, the same refusals with the same
messages, and the same results from four threads at once."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kvtools
from kvtools import kvslot
from conftest import CASES, npy_stream, same_array, same_refusal

KEYS = ["%032x" % (0x9e3779b97f4a7c15 * (k + 1) % 2**128) for k in range(12)]


def random_segments(rng):
    """Segment lists as kvchunk split -f text writes them with keys: a few
    prompts, each a sys prompt, chunks and a question, drawn from a small
    set of (key, length) pairs so that prompts share chunks."""
    sys_pool = [(KEYS[0], int(rng.integers(1, 20))),
                (KEYS[1], int(rng.integers(1, 20)))]
    chunk_pool = [(KEYS[2 + k], int(rng.integers(1, 40))) for k in range(8)]
    if rng.random() < 0.3:                  # one key with two lengths
        chunk_pool.append((chunk_pool[0][0], chunk_pool[0][1] + 1))
    lines = []
    for _ in range(int(rng.integers(1, 6))):
        key, n = sys_pool[int(rng.integers(0, len(sys_pool)))]
        lines.append("sys 0 %d %s" % (n, key))
        off = n
        for _ in range(int(rng.integers(0, 4))):
            key, n = chunk_pool[int(rng.integers(0, len(chunk_pool)))]
            lines.append("chunk %d %d %s" % (off, n, key))
            off += n
        n = int(rng.integers(1, 12))
        lines.append("question %d %d" % (off, n))
    return "\n".join(lines) + "\n"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


_OPTS = {"block_size": "-B", "segments": "--segments"}


def cli_args(kw):
    """kvslot plan --chunk-cache's arguments for the keywords kw."""
    args = ["plan", "--chunk-cache"]
    for k, v in kw.items():
        if k == "chunk_cache":
            continue
        opt = _OPTS.get(k, "--" + k.replace("_", "-"))
        if v is True:
            args.append(opt)
        elif v is not False:
            args += [opt, ",".join(map(str, v)) if isinstance(v, list) else v]
    return [str(a) for a in args] + ["-f", "npy"]


def cc_case(rng, path):
    """Random keywords of a chunk-cache plan (now and then refused)."""
    text = random_segments(rng)
    kw = dict(chunk_cache=True, segments=write(path, text),
              block_size=int(rng.choice([1, 2, 4, 8, 16])),
              max_tokens=int(rng.choice([4, 16, 64, 512])),
              max_model_len=int(rng.choice([160, 200, 400])))
    n_prompts = text.count("sys ")
    r = rng.random()
    if r < 0.3:
        kw["output_lens"] = int(rng.integers(1, 9))
    elif r < 0.5:
        kw["output_lens"] = [int(x) for x in rng.integers(1, 9, n_prompts)]
    if rng.random() < 0.5:
        kw["decode"] = True             # to max_model_len without output_lens
        if rng.random() < 0.7:          # or the first steps of it
            kw["steps"] = int(rng.integers(10, 60))
    elif rng.random() < 0.3:
        kw["steps"] = int(rng.integers(1, 20))
    if rng.random() < 0.3:
        per = -(-kw["max_model_len"] // kw["block_size"])   # one request
        kw["num_blocks"] = per + 1 + int(rng.integers(0, 3 * per))
    if rng.random() < 0.2:
        kw["max_num_seqs"] = int(rng.integers(1, 4))
    if rng.random() < 0.3:
        kw["chunk_context"] = str(rng.choice(["sys", "none"]))
    if rng.random() < 0.3:
        kw["chunk_pool_blocks"] = int(rng.integers(60, 200)) // kw["block_size"] + 1
    elif rng.random() < 0.3:
        kw["chunk_cache_gpu_memory_utilization"] = \
            ["0.05", "0.3", "0.9", 0.5][int(rng.integers(0, 4))]
    if rng.random() < 0.3:
        kw["max_chunks"] = int(rng.integers(2, 6))
    if rng.random() < 0.2:
        kw["max_chunk_tokens"] = int(rng.integers(38, 60))
    if rng.random() < 0.3:
        f = list(kvslot.CC_FIELDS)
        kw["fields"] = [f[i] for i in rng.permutation(len(f))[:int(rng.integers(1, 8))]]
    if rng.random() < 0.1:
        kw["dtype"] = "i32"
    r = rng.random()                            # now and then a refusal
    if r < 0.02:
        kw["chunk_cache_gpu_memory_utilization"] = ["1", "0", "x", "-0.1"][int(rng.integers(0, 4))]
    elif r < 0.04:
        kw["chunk_context"] = "all"
    elif r < 0.06:
        kw["fields"] = "step,nosuch"
    elif r < 0.08:
        kw["output_lens"] = [1] * (n_prompts + 1)
    elif r < 0.1:
        kw["max_mem"] = "100"
    elif r < 0.12:
        kw["max_model_len"] = 30
    elif r < 0.14:
        kw["chunk_pool_blocks"] = 1
    elif r < 0.16:
        kw["num_blocks"] = 2
    return kw, cli_args(kw)


def check_case(kw, args, status, out, err):
    """The steps equal the program's (None when it refused, as the package
    did)."""
    what = "kvslot " + " ".join(args)
    if status != 0:
        same_refusal(lambda: list(kvslot.plan(**kw)), status, err, what)
        return None
    steps = list(kvslot.plan(**kw))
    got = [(n, a) for st in steps for n, a in st.items()
           if n != "chunk_evicted_keys"]    # the program's text only
    ref = npy_stream(out)
    assert len(got) == len(ref), what
    for (name, a), r in zip(got, ref):
        same_array(a, r, what + " " + name)
    return steps


def test_plan_cc_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(3608)
    cases = [cc_case(rng, tmp_path / ("s%d.txt" % c))
             for c in range(CASES)]
    results = cli.many([("kvslot",) + tuple(a) for _, a in cases])
    n_ok = n_hit = n_evict = 0
    for (kw, args), (status, out, err) in zip(cases, results):
        steps = check_case(kw, args, status, out, err)
        n_ok += steps is not None
        if steps and "chunk_hits" in steps[0]:
            n_hit += sum(int(s["chunk_hits"]) for s in steps) > 0
            n_evict += sum(int(s.get("chunk_evictions", 0))
                           for s in steps) > 0
    assert n_ok > len(cases) * 2 // 3
    assert n_hit > len(cases) // 5 and n_evict > 0   # hits and evictions


def test_plan_cc_evicted_keys(cli, tmp_path):
    """chunk_evicted_keys, which the .npy stream leaves out: the keys of
    the program's text output, 16 bytes each."""
    text = "".join("sys 0 3 %s\nchunk 3 5 %s\nquestion 8 2\n" % (KEYS[0], k)
                   for k in KEYS[2:9])
    kw = dict(chunk_cache=True, segments=write(tmp_path / "s.txt", text),
              block_size=4, max_tokens=8, max_model_len=32, max_chunks=3,
              output_lens=1, fields="step,chunk_evictions,chunk_evicted_keys")
    args = cli_args(kw)[:-2] + ["-f", "text"]
    status, out, err = cli("kvslot", *args)
    assert status == 0, err
    want = [line.split()[1:] for line in out.decode().splitlines()
            if line.startswith("chunk_evicted_keys:")]
    steps = list(kvslot.plan(**kw))
    assert len(steps) == len(want)
    for st, keys in zip(steps, want):
        assert st["chunk_evicted_keys"].dtype == np.uint8
        assert [bytes(k).hex() for k in st["chunk_evicted_keys"]] == keys
        assert int(st["chunk_evictions"]) == len(keys)
    assert sum(len(k) for k in want) > 0


def test_plan_cc_refusals(cli, tmp_path):
    good = write(tmp_path / "g.txt", "sys 0 4 %s\nchunk 4 6 %s\nquestion 10 "
                 "3\n" % (KEYS[0], KEYS[2]))
    nokey = write(tmp_path / "nokey.txt", "sys 0 4\nquestion 4 3\n")
    badkey = write(tmp_path / "badkey.txt", "sys 0 4 12345678zz\nquestion 4 "
                   "3\n")
    nosys = write(tmp_path / "nosys.txt", "chunk 0 3 %s\n" % KEYS[2])
    empty = write(tmp_path / "empty.txt", "")
    base = dict(chunk_cache=True, segments=good, max_tokens=8, block_size=4,
                max_model_len=64)
    cases = [
        dict(segments=nokey), dict(segments=badkey), dict(segments=nosys),
        dict(segments=empty), dict(segments=str(tmp_path / "none.txt")),
        dict(output_lens="1,2"), dict(output_lens="0"),
        dict(output_lens="x"), dict(output_lens="1" * 70),
        dict(chunk_context="both"), dict(fields=""), dict(fields="step,x"),
        dict(segments=""), dict(chunk_context=""), dict(output_lens=""),
        dict(fields=",".join(["step"] * 37)),
        dict(chunk_cache_gpu_memory_utilization="1.0"),
        dict(chunk_cache_gpu_memory_utilization="abc"),
        dict(max_mem="0"), dict(max_mem="200"), dict(max_mem="2x"),
        dict(max_tokens=0), dict(block_size="x"), dict(max_model_len=1),
        dict(steps=0), dict(num_blocks=1), dict(max_num_seqs=0),
        dict(chunk_pool_blocks=0), dict(max_chunks=0),
        dict(max_chunk_tokens=5), dict(max_model_len=12),
        dict(chunk_pool_blocks=2), dict(num_blocks=3),
        dict(max_chunks=1), dict(dtype="i16"), dict(dtype="i16", fields="x"),
        dict(block_size=None), dict(max_tokens=None, max_model_len=None),
        dict(prompt_lens=4), dict(enable_prefix_caching=True),
        dict(reorder="split-decodes"), dict(pad_to=8),
    ]
    cases = [dict(base, **kw) for kw in cases]
    calls = []
    for kw in cases:
        a = cli_args({k: v for k, v in kw.items() if v is not None})
        calls.append(("kvslot",) + tuple(a))
    for kw, c, (status, out, err) in zip(cases, calls, cli.many(calls)):
        what = " ".join(c)
        assert status in (1, 2) and out == b"", what
        same_refusal(lambda: list(kvslot.plan(**kw)), status, err, what)
    # the chunk-cache plan's options without chunk_cache
    for k, v in (("segments", good), ("max_chunks", 3),
                 ("chunk_context", "none")):
        args = ["plan", "--prompt-lens", "4", "--max-tokens", "8", "-B", "4",
                "--max-model-len", "64", "--" + k.replace("_", "-"), str(v)]
        status, out, err = cli("kvslot", *args)
        same_refusal(lambda: list(kvslot.plan(
            prompt_lens=4, max_tokens=8, block_size=4, max_model_len=64,
            **{k: v})), status, err, " ".join(args))
    with pytest.raises(kvtools.Error) as ei:
        list(kvslot.plan(**dict(base, chunk_context="x")))
    assert ei.value.status == 2 and "--chunk-context" in ei.value.msg


def test_plan_cc_defaults(cli, tmp_path):
    """The keywords' defaults are the program's: the same steps with
    chunk_context="sys", the utilization 0.15, 500 chunks of at most 4096
    tokens given or left out."""
    text = random_segments(np.random.default_rng(5))
    kw = dict(chunk_cache=True, segments=write(tmp_path / "s.txt", text),
              block_size=4, max_tokens=16, max_model_len=256, decode=True)
    plain = [{n: a.tobytes() for n, a in st.items()} for st in kvslot.plan(**kw)]
    given = [{n: a.tobytes() for n, a in st.items()} for st in kvslot.plan(
        chunk_context="sys", chunk_cache_gpu_memory_utilization=0.15,
        max_chunks=500, max_chunk_tokens=4096, max_num_seqs=256, **kw)]
    assert plain == given and len(plain) > 1
    status, out, err = cli("kvslot", *cli_args(kw))
    assert status == 0, err
    assert check_case(kw, cli_args(kw), status, out, err) is not None


def test_plan_cc_threads(tmp_path):
    """Four threads at once give the single-threaded results."""
    rng = np.random.default_rng(77)
    texts = [random_segments(rng) for i in range(4)]
    paths = [write(tmp_path / ("t%d.txt" % i), t) for i, t in enumerate(texts)]
    paths_n = [t.count("sys ") for t in texts]

    def run(i):
        return [{n: a.tobytes() for n, a in st.items()} for st in kvslot.plan(
            chunk_cache=True, segments=paths[i % 4], block_size=2,
            max_tokens=8, max_model_len=1024, decode=True,
            chunk_pool_blocks=400,
            output_lens=[5, 9, 2, 7, 3][:paths_n[i % 4]],
            chunk_context="none" if i % 2 else "sys")]

    want = [run(i) for i in range(4)]
    with ThreadPoolExecutor(4) as ex:
        for rep in range(4):
            got = list(ex.map(run, range(8)))
            for i, g in enumerate(got):
                assert g == want[i % 4], "thread %d" % i
    assert all(len(w) > 2 for w in want)
