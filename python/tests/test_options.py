"""Options given as text or as bools: an argtable integer option of kvattn
(-j, --window, --sinks, ...) given as text is read as argtable reads it and
refused with argtable's own message; a flag keyword takes only True or
False (numpy bools too) and maps to the option's presence; a keyword that
takes a value refuses a bool."""
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvattn, kvchunk, kvmask, kvslot, kvxattn
from conftest import npy_stream, same_array

# texts argtable reads, accepts or refuses (decimal, 0x/0o/0b, KB/MB/GB,
# spaces, signs, over C's int)
TEXTS = ["x", "1.5", "0x2", "1KB", "99999999999", "-1", "", " 3", "3 ", "3x",
         "0o7", "0b11", "+5", "-0x2", "0x", "4000000KB", "2GB", "1kb", "3 KB",
         "1e3", "0", "2", "2147483647", "2147483648", "-2147483649",
         "2097152KB", "0xffffffffffffffffff", "0X3", "0xg", "--5", "1mb",
         "3KB ", "\t4"]


def _refusal(call):
    with pytest.raises(kvtools.Error) as ei:
        call()
    return ei.value


def _same(cli_result, call, what):
    """call() refuses with the program's first line and status, or both
    succeed; returns the program's stdout and call()'s result."""
    st, out, err = cli_result
    if st:
        e = _refusal(call)
        assert (e.status, str(e)) == (st, err), what
        return None, None
    return out, call()


def test_gen_integer_options_as_text(cli):
    opts = [("--kv-heads", "kv_heads"), ("--kv-len", "kv_len"),
            ("--sinks", "sinks"), ("-j", "j")]
    calls = [("kvattn", "gen", "--shape=1,2,3,4", "--seed=5", "-f", "npy",
              "--force", o, t) for o, _ in opts for t in TEXTS]
    res = iter(cli.many(calls))
    for o, kw in opts:
        for t in TEXTS:
            what = "gen %s %r" % (o, t)
            out, got = _same(next(res), lambda: kvattn.gen(
                shape="1,2,3,4", seed=5, **{kw: t}), what)
            if out is not None:
                ref = npy_stream(out)
                for a, r in zip(got.values(), ref):
                    same_array(a, r, what)


def test_toy_integer_options_as_text(cli, tmp_path):
    path = os.path.join(str(tmp_path), "tokens.txt")
    with open(path, "w") as f:
        f.write("5 9 2\n")
    opts = [("--layers", "layers"), ("--layer", "layer"),
            ("--embed-dim", "embed_dim"), ("--rotary-dim", "rotary_dim")]
    texts = ["x", "0x2", "1KB", "2GB", " 2", "2 ", "0b1", "2x", "", "4", "0"]
    calls = [("kvattn", "gen", "--shape=1,2,3,4", "--toy", "--tokens=" + path,
              "-f", "npy", "--force", o, t) for o, _ in opts for t in texts]
    res = iter(cli.many(calls))
    for o, kw in opts:
        for t in texts:
            what = "toy %s %r" % (o, t)
            out, got = _same(next(res), lambda: kvattn.gen(
                shape="1,2,3,4", toy=True, tokens=path, **{kw: t}), what)
            if out is not None:
                ref = npy_stream(out)
                for a, r in zip(got.values(), ref):
                    same_array(a, r, what)


def test_run_integer_options_as_text(cli, tmp_path):
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
               for _ in range(3))
    files = []
    for n, a in zip("qkv", (q, k, v)):
        files.append(os.path.join(str(tmp_path), n + ".npy"))
        np.save(files[-1], a)
    opts = [("--window", "window"), ("--chunk-size", "chunk_size"),
            ("-j", "jobs"), ("--tile-q", "tile_q"), ("--tile-k", "tile_k")]
    calls = [("kvattn", "run", "-q", files[0], "-k", files[1], "-v", files[2],
              "-f", "npy", "--force", o, t) for o, _ in opts for t in TEXTS]
    res = iter(cli.many(calls))
    for o, kw in opts:
        for t in TEXTS:
            out, got = _same(next(res), lambda: kvattn.run(
                q, k, v, **{kw: t}), "run %s %r" % (o, t))
            if out is not None:
                ref = npy_stream(out)
                same_array(got[0], ref[0], "run %s %r" % (o, t))
    # an int over C's int is refused as its text is
    st, _, err = cli("kvattn", "run", "--window", 2**31)
    e = _refusal(lambda: kvattn.run(q, k, v, window=2**31))
    assert (e.status, str(e)) == (st, err)
    assert kvattn.run(q, k, v, window=np.int64(3))[0].tobytes() == \
        kvattn.run(q, k, v, window="0x3")[0].tobytes()


@pytest.mark.parametrize("sub,call", [
    ("mla", lambda t: kvattn.mla(None, jobs=t)),
    ("index", lambda t: kvattn.index(None, None, None, jobs=t)),
])
def test_threads_as_text_refused_first(cli, sub, call):
    """argtable's refusal comes before the program's own checks."""
    for t in ["x", "", "3x", "99999999999", "1.5", "2GB"]:
        st, _, err = cli("kvattn", sub, "-j", t)
        e = _refusal(lambda: call(t))
        assert (e.status, str(e)) == (st, err), (sub, t)


FLAG_CASES = [
    (lambda f: kvmask.causal(4, keep=f), "kvmask", "keep"),
    (lambda f: kvslot.plan(prompt_lens=[3, 2], max_tokens=2, block_size=2,
                           max_model_len=8, decode=f), "kvslot plan", "decode"),
    (lambda f: kvchunk.sim(b"", miss_copy=f), "kvchunk sim", "miss_copy"),
    (lambda f: kvattn.index(None, None, None, no_causal=f), "kvattn index",
     "no_causal"),
    (lambda f: kvxattn.estimate(None, None, keep_sink=f), "kvxattn estimate",
     "keep_sink"),
]


@pytest.mark.parametrize("call,prog,kw", FLAG_CASES)
def test_flag_keywords_take_only_bools(call, prog, kw):
    for bad in [1, 0, "yes", "", "1", 1.0, [True], np.int64(1)]:
        e = _refusal(lambda: call(bad))
        assert e.status == 2
        assert str(e) == "%s: %s: expected True or False (a flag), got %r" % (
            prog, kw, bad)


def test_flags_map_to_presence(cli):
    for f, args in [(True, ["--keep"]), (np.True_, ["--keep"]),
                    (False, []), (np.False_, []), (None, [])]:
        st, out, _ = cli("kvmask", "causal", "-n", 5, "--dtype", "u8",
                         "-f", "npy", "--force", *args)
        assert st == 0
        same_array(kvmask.causal(5, dtype="u8", keep=f), npy_stream(out)[0],
                   "keep=%r" % (f,))
    st, out, _ = cli("kvslot", "plan", "--prompt-lens", "3,2", "--max-tokens",
                     2, "-B", 2, "--max-model-len", 8, "--decode",
                     "-f", "npy", "--force")
    assert st == 0
    ref = npy_stream(out)
    got = kvslot.plan(prompt_lens=[3, 2], max_tokens=2, block_size=2,
                      max_model_len=8, decode=np.True_)
    flat = [a for step in got for a in step.values()]
    assert len(flat) == len(ref)
    for a, r in zip(flat, ref):
        same_array(a, r, "plan decode=np.True_")


@pytest.mark.parametrize("call,prog,kw", [
    (lambda b: kvchunk.sim(b"", warmup=b), "kvchunk sim", "warmup"),
    (lambda b: kvmask.window(8, window=b), "kvmask", "window"),
    (lambda b: kvattn.run(None, jobs=b), "kvattn run", "jobs"),
    (lambda b: kvslot.cplens(cp_size=2, interleave=1, seq_lens=b),
     "kvslot cplens", "seq_lens"),
    (lambda b: kvchunk.sim_gen(requests=b), "kvchunk sim gen", "requests"),
])
def test_value_keywords_refuse_bools(call, prog, kw):
    for b in [True, False, np.True_]:
        e = _refusal(lambda: call(b))
        assert e.status == 2
        assert str(e) == "%s: %s: --%s takes a value, got %r (a bool)" % (
            prog, kw, kw.replace("_", "-"), b)
