"""kvtools.kvattn.quant and .mla with kv_dtype "fp8_ds_mla" (DeepSeek-V3.2's
656-byte latent rows) against kvattn quant / kvattn mla, byte for byte:
random latent caches of each dtype with adversarial tiles, both cache
shapes, dense and sparse; the refusals carry the program's messages."""
import io
import os

import numpy as np
import pytest

import kvtools
from kvtools import kvattn
from conftest import CASES, same_array, same_refusal
from test_kvattn import rand


def latent(rng, shape, dt):
    x = rand(rng, shape, "f32") * np.float32(np.exp(rng.uniform(-8, 8)))
    rows = x.reshape(-1, 576)
    for r in rng.integers(0, len(rows), 3):        # tiles that probe the rule
        t = int(rng.integers(0, 4)) * 128
        kind = int(rng.integers(0, 3))
        if kind == 0:
            rows[r, t:t + 128] = 0                     # the 1e-4 floor
        elif kind == 1:
            rows[r, t + 3] = np.float32(448 * 2.0 ** int(rng.integers(-20, 20)))
        else:
            rows[r, t:t + 128] *= np.float32(1e-9)     # e4m3 subnormals
    if dt == "f32":
        return x
    if dt == "f16":
        return x.astype(np.float16)
    u = x.view(np.uint32)
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16).view("V2")


def test_quant_ds_mla_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(656)
    cases, calls = [], []
    for c in range(CASES):
        dt = ["f32", "bf16", "f16"][c % 3]
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5))) + \
            ((1,) if c % 2 else ()) + (576,)
        x = latent(rng, shape, dt)
        p = os.path.join(tmp_path, "x%d.npy" % c)
        np.save(p, x)
        cases.append((x, dt, shape))
        calls.append(("kvattn", "quant", "--kv-dtype", "fp8_ds_mla", "-k", p))
    for (x, dt, shape), (status, out, err) in zip(cases, cli.many(calls)):
        if status != 0:         # a probe tile over f16's range is inf: refused
            same_refusal(lambda: kvattn.quant(k=x, kv_dtype="fp8_ds_mla"),
                         status, err, "quant %s %s" % (dt, shape),
                         path_dir=str(tmp_path))
            continue
        got = kvattn.quant(k=x, kv_dtype="fp8_ds_mla")
        assert got.dtype == np.uint8 and got.shape == shape[:-1] + (656,)
        same_array(got, np.load(io.BytesIO(out)), "quant %s %s" % (dt, shape))


def test_mla_ds_mla_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(576)
    n_ok = 0
    cases, calls = [], []
    for c in range(CASES):
        H, bs, n = int(rng.integers(1, 4)), int(rng.choice([1, 4, 16])), int(rng.integers(1, 3))
        sl = [int(v) for v in rng.integers(1, 30, n)]
        ql = [int(rng.integers(1, min(3, s) + 1)) for s in sl]
        cols = max((s + bs - 1) // bs for s in sl)
        nb = n * cols + 1
        bt = rng.permutation(np.arange(1, nb))[:n * cols].reshape(n, cols)
        q = rand(rng, (sum(ql), H, 576), ["f32", "bf16"][c % 2])
        cache = kvattn.quant(k=latent(rng, (nb, bs, 1, 576), "f32"), kv_dtype="fp8_ds_mla")
        if c % 3 == 0:
            cache = cache[:, :, 0]                     # vLLM's [blocks, block_size, 656]
        kw = dict(kv_cache=cache, block_table=bt, seq_lens=sl, q_lens=ql,
                  kv_lora_rank=512, scale=0.07, kv_dtype="fp8_ds_mla", causal=True)
        files = {"q": q, "c": cache, "bt": bt}
        args = ["mla", "--seq-lens", ",".join(map(str, sl)), "--q-lens", ",".join(map(str, ql)),
                "--kv-lora-rank", 512, "--scale", 0.07, "--kv-dtype", "fp8_ds_mla", "--causal"]
        if c % 2:
            rows = []
            for b, n_q in enumerate(ql):
                for i in range(n_q):
                    pick = rng.permutation(i + sl[b] - n_q + 1)[:4]
                    rows.append(list(pick) + [-1] * (4 - len(pick)))
            kw["topk_indices"] = files["topk"] = np.array(rows, np.int32)
        opt = {"q": "-q", "c": "--kv-cache", "bt": "--block-table", "topk": "--topk-indices"}
        for name, a in files.items():
            p = os.path.join(tmp_path, "%s%d.npy" % (name, c))
            np.save(p, a)
            args += [opt[name], p]
        o, lp = os.path.join(tmp_path, "o%d.npy" % c), os.path.join(tmp_path, "l%d.npy" % c)
        cases.append((c, q, kw, o, lp))
        calls.append(("kvattn",) + tuple(args + ["-o", o, "--lse", lp]))
    for (c, q, kw, o, lp), (status, _, err) in zip(cases, cli.many(calls)):
        assert status == 0, err
        out, lse = kvattn.mla(q, **kw)
        same_array(out, np.load(o), "mla case %d" % c)
        same_array(lse, np.load(lp), "mla case %d lse" % c)
        n_ok += 1
    assert n_ok == CASES


def test_ds_mla_refusals(cli, tmp_path):
    rng = np.random.default_rng(3)
    cache = kvattn.quant(k=latent(rng, (3, 4, 576), "f32"), kv_dtype="fp8_ds_mla")
    q = rand(rng, (1, 2, 576), "f32")
    pbt = os.path.join(tmp_path, "bt")
    with open(pbt, "w") as f:
        f.write("1\n")
    base = dict(block_table=[[1]], seq_lens=[3], kv_lora_rank=512, scale=0.1)
    bad = cache.copy()
    bad[1, 2, 516:520] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
    for c, (kw, status, text) in enumerate([
            (dict(kv_cache=bad, kv_dtype="fp8_ds_mla"), 1,
             "row 6: the scale of c_kv 128..255 is nan"),
            (dict(kv_cache=cache[..., :576].copy(), kv_dtype="fp8_ds_mla"), 1,
             "fp8_ds_mla rows are 656 bytes"),
            (dict(kv_cache=cache, kv_dtype="fp8_ds_mla", k_scale=2.0), 2,
             "fp8_ds_mla rows carry their own scales")]):
        with pytest.raises(kvtools.Error) as ei:
            kvattn.mla(q, **dict(base, **kw))
        assert ei.value.status == status and text in str(ei.value)
        pq, pc = os.path.join(tmp_path, "q.npy"), os.path.join(tmp_path, "c%d.npy" % c)
        np.save(pq, q)
        np.save(pc, kw["kv_cache"])
        args = ["mla", "-q", pq, "--kv-cache", pc, "--block-table", pbt, "--seq-lens", 3,
                "--kv-lora-rank", 512, "--scale", 0.1, "--kv-dtype", "fp8_ds_mla"]
        if "k_scale" in kw:
            args += ["--k-scale", 2]
        st, out, err = cli("kvattn", *args)
        assert st == status and out == b"" and text in err
    x = latent(rng, (2, 576), "f32")
    x[1, 7] = np.inf
    with pytest.raises(kvtools.Error) as ei:
        kvattn.quant(k=x, kv_dtype="fp8_ds_mla")
    assert "element 583 (row 1, c_kv 7) is inf" in str(ei.value)
    with pytest.raises(kvtools.Error) as ei:
        kvattn.quant(k=x[:, :500].copy(), kv_dtype="fp8_ds_mla")
    assert ei.value.status == 1
    with pytest.raises(kvtools.Error) as ei:
        kvattn.quant(k=x, v=x, kv_dtype="fp8_ds_mla")
    assert ei.value.status == 2
