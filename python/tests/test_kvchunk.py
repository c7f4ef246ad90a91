"""kvtools.kvchunk against kvchunk: content keys of random chunks and
namespaces equal kvchunk key's; rope_move equals what kvchunk get --at
writes for a chunk kvchunk put stored at base_pos."""
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvchunk
from conftest import CASES, same_array
from test_kvattn import bf16

from kvtools.testing import model_configs

# the shipped configs, from the package (in place: the tree's tests/configs)
CONFIGS = sorted(model_configs().values())


def namespace(rng):
    kw, args = {}, []
    if rng.random() < 0.3:
        kw["model_config"] = CONFIGS[int(rng.integers(0, len(CONFIGS)))]
    else:
        kw["shape"] = "%d,%d,%d" % (int(rng.integers(1, 5)), int(rng.integers(1, 4)),
                                    int(rng.choice([8, 16, 64])))
    for opt, vals in (("model", ["m", "Qwen/Qwen2.5-7B@main"]), ("salt", ["s1", ""]),
                      ("lora", ["a1"]), ("tokenizer", ["tok"]),
                      ("dtype", ["f16", "bf16", "f32", "i8"]),
                      ("rope", ["neox", "gptj", "none", "learned"]),
                      ("rope_theta", ["500000", "10000", "0.5"]),
                      ("rope_scaling", ["linear:4", "ntk:factor=2", "none"]),
                      ("chunk_context", ["sys", "none"]),
                      ("base_policy", ["context", "zero", "free"])):
        if rng.random() < 0.25:
            kw[opt] = vals[int(rng.integers(0, len(vals)))]
    for k, v in kw.items():
        args += ["--" + k.replace("_", "-"), v]
    return kw, args


def test_key_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(41)
    cases = []
    for c in range(CASES):
        kw, args = namespace(rng)
        tok = rng.integers(0, 50000, int(rng.integers(0, 40)))
        p = os.path.join(tmp_path, "t%d.txt" % c)
        with open(p, "w") as f:
            f.write(" ".join(map(str, tok)) + "\n")
        args += ["--tokens", p]
        ctx = None
        if rng.random() < 0.3:
            ctx = rng.integers(0, 50000, int(rng.integers(1, 10)))
            pc = os.path.join(tmp_path, "c%d.txt" % c)
            with open(pc, "w") as f:
                f.write(" ".join(map(str, ctx)) + "\n")
            args += ["--context", pc]
        cases.append((tok, ctx, kw, args))
    results = cli.many([("kvchunk", "key") + tuple(a) for _, _, _, a in cases])
    n_ok = 0
    for (tok, ctx, kw, args), (status, out, err) in zip(cases, results):
        what = "kvchunk key " + " ".join(map(str, args))
        if status != 0:
            with pytest.raises(kvtools.Error) as ei:
                kvchunk.key(tok, context=ctx, **kw)
            if "'" + str(tmp_path) not in err:
                assert str(ei.value) == err, what
            continue
        assert kvchunk.key(tok, context=ctx, **kw) == out.decode().strip(), what
        n_ok += 1
    assert n_ok > len(cases) // 3


def test_rope_move_equals_get_at(cli, tmp_path):
    rng = np.random.default_rng(42)
    base = "dir:" + os.path.join(tmp_path, "store")
    cases, puts = [], []
    for c in range(CASES):
        store = base + str(c // 50)      # opening a store costs with its size
        L, H, D = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.choice([8, 16, 64]))
        T = int(rng.integers(1, 20))
        dt = ["f16", "bf16", "f32"][int(rng.integers(0, 3))]
        kv = rng.standard_normal((L, 2, T, H, D)).astype(np.float32)
        kv = {"f16": kv.astype(np.float16), "f32": kv, "bf16": bf16(kv)}[dt]
        kw = dict(shape="%d,%d,%d" % (L, H, D), dtype=dt, base_policy="free")
        if rng.random() < 0.3:
            kw["rope"] = "gptj"
        if rng.random() < 0.3:
            kw["rope_theta"] = "500000"
        if rng.random() < 0.3 and D >= 16:
            kw["rotary_dim"] = str(D // 2)
        if rng.random() < 0.3:
            kw["rope_scaling"] = "linear:4"
        p0, p1 = int(rng.integers(0, 5000)), int(rng.integers(0, 5000))
        pk = os.path.join(tmp_path, "kv%d.npy" % c)
        np.save(pk, kv)
        pt = os.path.join(tmp_path, "t%d.txt" % c)
        with open(pt, "w") as f:
            f.write(" ".join(str(x) for x in [c] + list(range(1, T))) + "\n")
        ns = []
        for k, v in kw.items():
            ns += ["--" + k.replace("_", "-"), v]
        puts.append(("kvchunk", "put", "--store", store, "--tokens", pt, "--kv",
                     pk, "--base-pos", p0, *ns))
        cases.append((kv, p0, p1, kw, ("kvchunk", "get", "--store", store, "--tokens", pt,
                                       "--at", p1, "-f", "npy") + tuple(ns)))
    for st, _, err in cli.many(puts):   # one store, written four at a time
        assert st == 0, err
    results = cli.many([a for *_, a in cases])
    for (kv, p0, p1, kw, args), (status, out, err) in zip(cases, results):
        assert status == 0, err
        ref = np.load(__import__("io").BytesIO(out))
        same_array(kvchunk.rope_move(kv, p0, p1, **kw), ref, " ".join(map(str, args)))


def test_rope_move_refuses_learned_positions():
    kv = np.zeros((1, 2, 3, 1, 8), np.float32)
    with pytest.raises(kvtools.Error):
        kvchunk.rope_move(kv, 0, 5, rope="learned")
    assert kvchunk.rope_move(kv, 4, 4, rope="learned").tobytes() == kv.tobytes()


def test_put_and_get_meet_the_program(cli, tmp_path):
    """Python put, the program's get; the program's put, Python get: the
    same bytes either way, in one dir: store (a chunk the package put is
    found by the program under the same key); a miss is None."""
    rng = np.random.default_rng(43)
    base = "dir:" + os.path.join(tmp_path, "store")
    calls, cases, puts = [], [], []
    for c in range(CASES):
        store = base + str(c // 50)      # opening a store costs with its size
        L, H, D = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.choice([8, 16]))
        T = int(rng.integers(1, 12))
        dt = ["f16", "bf16", "f32"][int(rng.integers(0, 3))]
        kv = rng.standard_normal((L, 2, T, H, D)).astype(np.float32)
        kv = {"f16": kv.astype(np.float16), "f32": kv, "bf16": bf16(kv)}[dt]
        tok = [10000 + c] + [int(x) for x in rng.integers(0, 1000, T - 1)]
        ns = dict(shape="%d,%d,%d" % (L, H, D), dtype=dt, base_policy="free")
        if rng.random() < 0.3:
            ns["rope_theta"] = "500000"
        p0, p1 = int(rng.integers(0, 3000)), int(rng.integers(0, 3000))
        pt = os.path.join(tmp_path, "t%d.txt" % c)
        with open(pt, "w") as f:
            f.write(" ".join(map(str, tok)) + "\n")
        nsargs = sum((["--" + k.replace("_", "-"), v] for k, v in ns.items()), [])
        if c % 2 == 0:                   # Python puts, the program gets
            key, state = kvchunk.put(tok, kv, p0, store=store, **ns)
            assert state == "stored"
        else:                            # the program puts, Python gets
            pk = os.path.join(tmp_path, "kv%d.npy" % c)
            np.save(pk, kv)
            puts.append(("kvchunk", "put", "--store", store, "--tokens", pt,
                         "--kv", pk, "--base-pos", p0, *nsargs))
        cases.append((tok, kv, p0, p1, ns, store))
        calls.append(("kvchunk", "get", "--store", store, "--tokens", pt, "--at", p1,
                      "-f", "npy", *nsargs))
    for st, out, err in cli.many(puts):
        assert st == 0 and out.decode().endswith(" stored\n"), err
    results = cli.many(calls)
    for (tok, kv, p0, p1, ns, store), (status, out, err) in zip(cases, results):
        assert status == 0, err
        ref = np.load(__import__("io").BytesIO(out))
        same_array(kvchunk.get(tok, p1, store=store, **ns), ref, "get %s" % ns)
        same_array(kvchunk.rope_move(kv, p0, p1, **ns), ref, "rope_move %s" % ns)
    assert kvchunk.get([1, 2, 3], 0, store=store, shape="1,1,8") is None


def test_get_latent_chunks_equals_cli(cli, tmp_path):
    """MLA models' latent chunks [L, T, Dl + R]: the program puts them,
    Python's get equals the program's get --at (k_pe rotated, c_kv copied),
    bytes for bytes; another dtype is a miss."""
    import json
    rng = np.random.default_rng(44)
    base = "dir:" + os.path.join(tmp_path, "store")
    configs = [c for c in CONFIGS if os.path.basename(c).startswith("deepseek")]
    assert configs
    # the configs with 1 to 3 of their layers: the layers are alike, and
    # 61 of them made each case's chunk 60 times the bytes
    small = []
    for i, c in enumerate(configs):
        with open(c) as f:
            j = json.load(f)
        j["num_hidden_layers"] = 1 + i % 3
        small.append(os.path.join(tmp_path, "cfg%d.json" % i))
        with open(small[-1], "w") as f:
            json.dump(j, f)
    calls, cases, puts = [], [], []
    for c in range(CASES):
        store = base + str(c // 50)      # opening a store costs with its size
        cfg = small[c % len(small)]
        with open(cfg) as f:
            j = json.load(f)
        L, D = j["num_hidden_layers"], j["kv_lora_rank"] + j["qk_rope_head_dim"]
        T = int(rng.integers(1, 6))
        x = bf16(rng.standard_normal((L, T, D)).astype(np.float32))
        tok = [20000 + c] + [int(v) for v in rng.integers(0, 1000, T - 1)]
        p0, p1 = int(rng.integers(0, 3000)), int(rng.integers(0, 3000))
        pt, pk = os.path.join(tmp_path, "t%d.txt" % c), os.path.join(tmp_path, "x%d.npy" % c)
        with open(pt, "w") as f:
            f.write(" ".join(map(str, tok)) + "\n")
        np.save(pk, x)
        ns = ["--model-config", cfg, "--base-policy", "free"]
        if c % 2:                        # Python puts, the program gets
            key, state = kvchunk.put(tok, x, p0, store=store, model_config=cfg,
                                     base_policy="free")
            assert state == "stored"
        else:
            puts.append(("kvchunk", "put", "--store", store, "--tokens", pt,
                         "--kv", pk, "--base-pos", p0, *ns))
        cases.append((tok, p1, cfg, store))
        calls.append(("kvchunk", "get", "--store", store, "--tokens", pt, "--at",
                      p1, "-f", "npy", *ns))
    for st, out, err in cli.many(puts):
        assert st == 0 and out.decode().endswith(" stored\n"), err
    for (tok, p1, cfg, store), (status, out, err) in zip(cases, cli.many(calls)):
        assert status == 0, err
        ref = np.load(__import__("io").BytesIO(out))
        got = kvchunk.get(tok, p1, store=store, model_config=cfg, base_policy="free")
        same_array(got, ref, "get latent %s" % cfg)
        if tok[0] % 4 == 0:             # another dtype: a miss
            assert kvchunk.get(tok, p1, store=store, model_config=cfg,
                               base_policy="free", dtype="f16") is None


def test_put_latent_refusals_equal_cli(cli, tmp_path):
    """put with an MLA model_config refuses what the program refuses (a
    KV that is not a latent chunk of the config, another dtype), with the
    program's message (the program names the file, Python 'kv')."""
    import json
    store = "dir:" + os.path.join(tmp_path, "store")
    cfg = [c for c in CONFIGS if os.path.basename(c).startswith("deepseek")][0]
    with open(cfg) as f:
        j = json.load(f)
    L, D = j["num_hidden_layers"], j["kv_lora_rank"] + j["qk_rope_head_dim"]
    pt = os.path.join(tmp_path, "t.txt")
    with open(pt, "w") as f:
        f.write("1 2 3\n")
    x = np.zeros((L, 3, D), np.float32)
    bad = [x[:, :2], x[:, :, 1:], np.zeros((L, 2, 3, 1, D), np.float32)]
    if j.get("torch_dtype", "bfloat16") != "float32":
        bad.append(x)                    # f32 under a bf16 namespace
    for c, b in enumerate(bad):
        pk = os.path.join(tmp_path, "b%d.npy" % c)
        np.save(pk, b)
        st, out, err = cli("kvchunk", "put", "--store", store, "--tokens", pt,
                           "--kv", pk, "--base-pos", 0, "--model-config", cfg,
                           "--base-policy", "free")
        assert st == 1 and out == b"", err
        with pytest.raises(kvtools.Error) as ei:
            kvchunk.put([1, 2, 3], b, 0, store=store, model_config=cfg,
                        base_policy="free")
        assert str(ei.value) == err.replace("'%s'" % pk, "kv")
        assert ei.value.status == 1


def _put_other_layout(store, ns_kw, tok, x, layout, payload):
    """Store under the key of the namespace of ns_kw (for tok, no
    context, base 0) a blob built from x whose header says layout, with
    payload as its bytes (what kvchunk put never writes: a chunk of the
    other layout under this namespace's key)."""
    from kvtools._core import Tensor, ffi, lib, new_err, err_text
    ns, keep = kvchunk._namespace("t", ns_kw)
    t = np.ascontiguousarray(tok, np.int32)
    tp = ffi.cast("int32_t *", ffi.from_buffer(t))
    tx = Tensor(x)
    m = ffi.new("struct kv_blob_meta *")
    hdr = ffi.new("uint8_t **")
    e = new_err()
    assert lib.kv_chunk_blob(ns, ffi.NULL, 0, tp, t.size, tx.ptr, 0, 0, m,
                             hdr, e) == 0, err_text(e)
    lib.free(hdr[0])
    pb = np.ascontiguousarray(payload).view(np.uint8)
    m.layout = layout
    m.payload_xxh3 = lib.kv_blob_checksum(ffi.from_buffer(pb), pb.size)
    assert lib.kv_blob_header(m, tp, hdr, e) == 0, err_text(e)
    assert m.payload_len == pb.size
    s, _ = kvchunk._open("t", store, None, -1)
    existed = ffi.new("int *")
    rc = lib.kv_store_put(s, m, hdr[0], ffi.from_buffer(pb), existed, e)
    lib.free(hdr[0])
    del s                                # closes the store
    assert rc == 0, err_text(e)


def test_get_other_layout_is_a_miss(cli, tmp_path):
    """A latent chunk stored under a KV namespace's key, or KV under an MLA
    namespace's key, is of another shape: get returns None and the program
    exits 3 with 'stored shape differs from --shape', nothing on stdout,
    rather than writing the stored chunk as a hit."""
    import json
    from kvtools._core import lib
    cfg = [c for c in CONFIGS if os.path.basename(c).startswith("deepseek")][0]
    with open(cfg) as f:
        j = json.load(f)
    L, D = j["num_hidden_layers"], j["kv_lora_rank"] + j["qk_rope_head_dim"]
    tok = [7, 8, 9]
    pt = os.path.join(tmp_path, "t.txt")
    with open(pt, "w") as f:
        f.write("7 8 9\n")
    kv_ns = dict(shape="1,1,8", dtype="f32", chunk_context="none")
    mla_ns = dict(model_config=cfg, base_policy="free")
    kv = np.ones((1, 2, 3, 1, 8), np.float32)
    lat = bf16(np.ones((L, 3, D), np.float32))
    for n, (ns_kw, x, layout, payload, args) in enumerate((
            (kv_ns, kv, lib.KV_BLOB_LAYOUT_LATENT, kv[:, 0],
             ["--shape", "1,1,8", "--dtype", "f32", "--chunk-context", "none"]),
            (mla_ns, lat, lib.KV_BLOB_LAYOUT_KV,
             np.concatenate([lat, lat], axis=1),
             ["--model-config", cfg, "--base-policy", "free"]))):
        store = "dir:" + os.path.join(tmp_path, "s%d" % n)
        _put_other_layout(store, ns_kw, tok, x, layout, payload)
        assert kvchunk.get(tok, 5, store=store, **ns_kw) is None
        st, out, err = cli("kvchunk", "get", "--store", store, "--tokens", pt,
                           "--at", 5, "-f", "npy", *args)
        assert st == 3 and out == b"", (st, err)
        assert "stored shape differs from --shape" in err, err
