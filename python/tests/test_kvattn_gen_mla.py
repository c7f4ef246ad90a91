"""kvtools.kvattn.gen with an MLA model's config against kvattn gen
--model-config ... --dir DIR: on random geometries, seeds, dtypes, block
sizes and configs (with and without DeepSeek-V3.2's indexer) the dict
holds the files the program writes into DIR, in its order, the arrays
equal to its .npy files byte for byte and the text files' values equal;
the same refusals with the same messages; the same sets under four
threads at once."""
import io
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from kvtools import kvattn
from conftest import CASES, TOP, same_array, same_refusal

ORDER = ["q", "q_absorbed", "c_kv", "k_pe", "w_uk", "w_uv", "kv_cache",
         "block_table", "seq_lens", "q_lens", "scale"]
INDEX = ["index_q", "index_k", "index_weights", "index_topk"]
SMALL = {"num_attention_heads": 3, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
         "qk_nope_head_dim": 8, "v_head_dim": 12, "torch_dtype": "float32"}


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """name -> path: small MLA configs with and without an indexer (one
    with its keys in text_config), a real DeepSeek config of each kind,
    and configs the program refuses."""
    d = tmp_path_factory.mktemp("mla-configs")
    out = {}

    def put(name, cfg):
        p = d / (name + ".json")
        p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
        out[name] = str(p)
    idx = dict(SMALL, index_n_heads=2, index_head_dim=4, index_topk=5)
    put("small", SMALL)
    put("small-bf16", dict(SMALL, torch_dtype="bfloat16", num_attention_heads=2))
    put("indexer", idx)
    put("text-config", {"model_type": "x", "text_config": idx})
    put("no-heads", {k: v for k, v in idx.items() if k != "num_attention_heads"})
    put("two-of-three", {k: v for k, v in idx.items() if k != "index_topk"})
    put("zero-heads", dict(idx, index_n_heads=0))
    put("wide", dict(idx, index_head_dim=70000))
    put("big-indexer", dict(idx, index_head_dim=4096))
    put("topk-text", dict(idx, index_topk="5"))
    put("no-nope", {k: v for k, v in SMALL.items() if k != "qk_nope_head_dim"})
    put("broken", '{"kv_lora_rank": 16, ')
    for name, rel in (("v2-lite", "deepseek-v2-lite.json"),
                      ("v3.2", os.path.join("dsa", "deepseek-v3.2-exp.json"))):
        p = os.path.join(TOP, "tests", "configs", rel)
        if os.path.exists(p):
            out[name] = p
    return out


def read_dir(d):
    """The program's set: {name: bytes}."""
    return {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}


def same_set(got, files, what):
    """got (the package's dict) holds what the program wrote (files)."""
    names = ORDER + (INDEX if "index_topk" in files else [])
    assert list(got) == names, what
    assert sorted(files) == sorted(n + ".npy" if n + ".npy" in files else n
                                   for n in names), what
    for n in names:
        if n + ".npy" in files:
            same_array(got[n], np.load(io.BytesIO(files[n + ".npy"])), what + " " + n)
            continue
        text = files[n].decode()
        assert text.endswith("\n") and "\n" not in text[:-1], what + " " + n
        if n in ("seq_lens", "q_lens"):
            assert got[n].dtype == np.int64, what
            assert ",".join(str(int(x)) for x in got[n]) == text[:-1], what + " " + n
        elif n == "scale":
            assert isinstance(got[n], float) and got[n] == float(text), what
        else:
            assert isinstance(got[n], int) and got[n] == int(text), what


def random_case(rng, configs):
    names = [n for n in ("small", "small-bf16", "indexer", "text-config",
                         "v2-lite", "v3.2") if n in configs]
    name = str(rng.choice(names))
    kw = {"model_config": configs[name]}
    args = ["--model-config=" + configs[name]]
    B, S = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    if name in ("v2-lite", "v3.2") or rng.random() < 0.5:
        shape = [B, int(rng.integers(1, 4)), S]    # a real config: few heads
    else:
        shape = [B, S]
    kw["shape"] = shape if rng.random() < 0.5 else ",".join(map(str, shape))
    args.append("--shape=" + ",".join(map(str, shape)))
    opts = (("kv_len", "--kv-len", lambda: S + int(rng.integers(-1, 30))),
            ("block_size", "--block-size",
             lambda: int(rng.choice([1, 2, 3, 16, 64] + ([0] if rng.random() < 0.1 else [])))),
            ("seed", "--seed", lambda: int(rng.integers(0, 2**62))),
            ("dtype", "--dtype", lambda: str(rng.choice(["f32", "f16", "bf16"] +
                                                        (["f64"] if rng.random() < 0.1 else [])))),
            ("max_mem", "--max-mem", lambda: str(rng.choice(["64M", "20k", "50%"]))))
    for key, opt, val in opts:
        if rng.random() < (0.15 if key == "max_mem" else 0.6):
            v = val()
            kw[key] = v
            args.append("%s=%s" % (opt, v))
    return kw, args


def test_gen_mla_random(cli, configs, tmp_path):
    rng = np.random.default_rng(7070)
    n = CASES
    cases = []
    for c in range(n):
        kw, args = random_case(rng, configs)
        d = str(tmp_path / ("d%d" % c))
        cases.append((kw, args, d))
    results = cli.many([("kvattn", "gen") + tuple(a) + ("--dir", d) for _, a, d in cases])
    ok = indexed = 0
    for (kw, args, d), (status, out, err) in zip(cases, results):
        what = "kvattn gen " + " ".join(args)
        assert out == b"", what
        if status:
            assert not os.path.exists(d), what
            same_refusal(lambda: kvattn.gen(**kw), status, err, what)
            continue
        files = read_dir(d)
        shutil.rmtree(d)
        got = kvattn.gen(**kw)
        same_set(got, files, what)
        ok += 1
        indexed += "index_topk" in got
    assert ok >= n // 2 and indexed >= n // 8, (ok, indexed)


def test_gen_mla_refusals(cli, configs, tmp_path):
    small, idx = configs["small"], configs["indexer"]
    cases = [
        ({}, small),
        ({"shape": "1,2,3,4"}, small),
        ({"shape": "0,2"}, small),
        ({"shape": "1,x"}, small),
        ({"shape": "1,2"}, configs["no-heads"]),
        ({"shape": "1,2", "kv_len": 1}, small),
        ({"shape": "1,2", "block_size": 0}, small),
        ({"shape": "1,2", "block_size": 70000}, small),
        ({"shape": "1,2", "seed": -1}, small),
        ({"shape": "1,2", "seed": "x"}, small),
        ({"shape": "1,2", "dtype": "f64"}, small),
        ({"shape": "1,2", "dtype": "q"}, small),
        ({"shape": "1,2", "max_mem": "x"}, small),
        ({"shape": "1,2", "max_mem": "1k"}, small),
        ({"shape": "1,2", "kv_len": 200, "max_mem": "30k"}, idx),
        ({"shape": "1,2", "kv_len": 8, "max_mem": "20k"}, configs["big-indexer"]),
        # each part under the limit, the whole set over it
        ({"shape": "1,2", "kv_len": 8, "max_mem": "200000"}, configs["big-indexer"]),
        ({"shape": "1,2"}, configs["two-of-three"]),
        ({"shape": "1,2"}, configs["zero-heads"]),
        ({"shape": "1,2"}, configs["wide"]),
        ({"shape": "1,2"}, configs["topk-text"]),
        ({"shape": "1,2"}, configs["no-nope"]),
        ({"shape": "1,2"}, configs["broken"]),
        ({"shape": "1,2", "seed": -1}, configs["two-of-three"]),
    ]
    unused = (("kv_heads", "--kv-heads", 1), ("pattern", "--pattern", "mix"),
              ("sinks", "--sinks", 2), ("layout", "--layout", "bhsd"),
              ("j", "-j", 2), ("pos", "--pos", 3), ("layers", "--layers", 2),
              ("layer", "--layer", 0), ("embed_dim", "--embed-dim", 8),
              ("rope", "--rope", "neox"), ("rope_theta", "--rope-theta", 500.0),
              ("rotary_dim", "--rotary-dim", 4))
    for key, opt, v in unused:
        cases.append(({"shape": "1,2", key: v}, small))
    opt_of = {"shape": "--shape", "kv_len": "--kv-len", "block_size": "--block-size",
              "seed": "--seed", "dtype": "--dtype", "max_mem": "--max-mem"}
    opt_of.update({k: o for k, o, _ in unused})
    d = str(tmp_path / "never")
    for kw, cfg in cases:
        args = ["--model-config=" + cfg] + \
            [("%s%s" if opt_of[k] == "-j" else "%s=%s") % (opt_of[k], v)
             for k, v in kw.items()]
        status, out, err = cli("kvattn", "gen", *args, "--dir", d)
        what = "kvattn gen " + " ".join(args)
        assert status != 0 and out == b"" and not os.path.exists(d), what
        same_refusal(lambda: kvattn.gen(model_config=cfg, **kw), status, err, what)
    # --toy and --kv, flags in the program, keywords here
    for key, opt in (("toy", "--toy"), ("kv", "--kv")):
        status, out, err = cli("kvattn", "gen", "--model-config=" + small,
                               "--shape=1,2", opt + ("=x" if key == "kv" else ""),
                               "--dir", d)
        same_refusal(lambda: kvattn.gen(model_config=small, shape="1,2", **{key: True}),
                     status, err, "kvattn gen MLA " + opt)
    # --block-size without an MLA config
    llama = os.path.join(TOP, "tests", "configs", "llama-3.1-8b.json")
    for extra in ((), ("--model-config=" + llama,)):
        status, out, err = cli("kvattn", "gen", "--shape=1,2,3,4", "--block-size=16", *extra)
        kw = {"model_config": llama} if extra else {}
        same_refusal(lambda: kvattn.gen(shape="1,2,3,4", block_size=16, **kw),
                     status, err, "kvattn gen --block-size " + " ".join(extra))


def test_gen_mla_threads(configs):
    """Four threads generating at once give the sets one thread gives."""
    calls = [dict(model_config=configs[n], shape=[2, 2, 3], kv_len=9 + i,
                  block_size=4, seed=i, dtype=dt)
             for i, (n, dt) in enumerate([("indexer", "f32"), ("small", "bf16"),
                                          ("text-config", "f16"), ("indexer", "bf16")] * 4)]
    ref = [kvattn.gen(**kw) for kw in calls]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda kw: kvattn.gen(**kw), calls))
    for r, g in zip(ref, got):
        assert list(r) == list(g)
        for k in r:
            if isinstance(r[k], np.ndarray):
                assert r[k].dtype == g[k].dtype and r[k].tobytes() == g[k].tobytes(), k
            else:
                assert r[k] == g[k], k


def test_gen_empty_option_refused(cli, configs, tmp_path):
    """An option given as "" is refused before anything else, with the MLA
    config as without one, as the program refuses --NAME ''."""
    opts = ("shape", "kv_len", "seed", "dtype", "max_mem", "block_size",
            "pattern", "layout", "tokens", "rope_theta")
    for cfg in (configs["indexer"], None):
        for key in opts:
            kw = {"shape": "1,2" if cfg else "1,2,3,4"}
            args = ["--shape=" + kw["shape"]]
            if cfg:
                kw["model_config"] = cfg
                args.append("--model-config=" + cfg)
            kw[key] = ""
            opt = "--" + key.replace("_", "-")
            args = [a for a in args if not a.startswith(opt + "=")] + [opt, ""]
            status, out, err = cli("kvattn", "gen", *args, "--dir",
                                   str(tmp_path / "never"))
            assert err == "kvattn gen: %s: expected a value, got an empty one" % opt
            same_refusal(lambda: kvattn.gen(**kw), status, err, " ".join(args))


def test_gen_config_path_not_utf8(cli, configs, tmp_path):
    """A config path whose bytes are not UTF-8 (a str as os.listdir gives
    it, bytes, or a PathLike) names the file the program is given: the
    MLA set and the per-head Q, K, V as the program makes them."""
    import pathlib
    d = os.fsencode(str(tmp_path))
    mla = os.path.join(d, b"m\xe9.json")
    shutil.copyfile(configs["indexer"], mla)
    st, _, err = cli("kvattn", "gen", "--model-config", os.fsdecode(mla),
                     "--shape", "2,3", "--dir", tmp_path / "out")
    assert st == 0, err
    files = read_dir(tmp_path / "out")
    for p in (mla, os.fsdecode(mla), pathlib.Path(os.fsdecode(mla))):
        same_set(kvattn.gen(model_config=p, shape="2,3"), files, repr(p))
    ph = os.path.join(d, b"g\xe9.json")
    shutil.copyfile(os.path.join(TOP, "tests", "configs", "gpt2.json"), ph)
    st, out, err = cli("kvattn", "gen", "--model-config", os.fsdecode(ph),
                       "--shape", "1,5")
    assert st == 0, err
    want = np.load(io.BytesIO(out))
    for p in (ph, os.fsdecode(ph), pathlib.Path(os.fsdecode(ph))):
        same_array(kvattn.gen(model_config=p, shape="1,5")["q"], want, repr(p))
    st, _, err = cli("kvattn", "gen", "--model-config", "", "--shape", "1,5")
    for p in ("", b""):
        same_refusal(lambda: kvattn.gen(model_config=p, shape="1,5"), st, err, repr(p))
