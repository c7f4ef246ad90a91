"""kvtools.kvattn.run over an FP8 cache whose v_scale is near the top of
f32 and whose keys are many: the output (at most max|v| v_scale) is
finite, as the program's, byte for byte, dense K and V and a paged cache
read dequantized (--scalar), e4m3 and e5m2."""
import os

import numpy as np

from kvtools import kvattn
from conftest import same_array


def case(rng, fmt):
    """q, K and V bytes of the largest values (one sign a feature), 1,024
    keys, and the scales."""
    top = 0x7E if fmt == "fp8_e4m3" else 0x7B           # the largest finite bytes
    lo = top - 8
    hq, hkv, d, s = 4, 2, 16, 1024
    q = rng.standard_normal((1, hq, 2, d)).astype(np.float32)
    k = rng.integers(0x20, 0x40, (1, hkv, s, d)).astype(np.uint8)
    v = rng.integers(lo, top + 1, (1, hkv, s, d)).astype(np.uint8)
    v[..., ::3] |= 0x80
    vs = 1e35 if fmt == "fp8_e4m3" else 5e33
    return q, k, v, 0.05, vs


def test_big_v_scale_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(5)
    d = str(tmp_path)
    for fmt in ("fp8_e4m3", "fp8_e5m2"):
        q, k, v, ks, vs = case(rng, fmt)
        for name, a in (("q", q), ("k", k), ("v", v)):
            np.save(os.path.join(d, name + ".npy"), a)
        o = os.path.join(d, "o.npy")
        st, _, err = cli("kvattn", "run", "-q", os.path.join(d, "q.npy"), "-k",
                         os.path.join(d, "k.npy"), "-v", os.path.join(d, "v.npy"),
                         "--kv-dtype", fmt, "--k-scale", repr(ks), "--v-scale", repr(vs),
                         "-o", o)
        assert st == 0, err
        out = kvattn.run(q, k, v, kv_dtype=fmt, k_scale=ks, v_scale=vs, lse=False)
        assert np.isfinite(out).all(), fmt
        same_array(out, np.load(o), "dense " + fmt)

        # the same keys as a paged cache [2, blocks, 16, Hkv, D], dequantized
        kt, vt = k[0].transpose(1, 0, 2), v[0].transpose(1, 0, 2)
        cache = np.stack([kt.reshape(-1, 16, 2, 16), vt.reshape(-1, 16, 2, 16)])
        bt = rng.permutation(cache.shape[1])
        cache = cache[:, np.argsort(bt)]
        qt = np.ascontiguousarray(q[0].transpose(1, 0, 2))
        np.save(os.path.join(d, "c.npy"), cache)
        np.save(os.path.join(d, "qt.npy"), qt)
        np.save(os.path.join(d, "bt.npy"), bt[None].astype(np.int64))
        st, _, err = cli("kvattn", "run", "--layout", "thd", "-q", os.path.join(d, "qt.npy"),
                         "--kv-cache", os.path.join(d, "c.npy"), "--block-table",
                         os.path.join(d, "bt.npy"), "--seq-lens", "1024", "--q-lens", "2",
                         "--causal", "--scalar", "--kv-dtype", fmt, "--k-scale", repr(ks),
                         "--v-scale", repr(vs), "-o", o)
        assert st == 0, err
        out = kvattn.run(qt, layout="thd", kv_cache=cache, block_table=bt[None],
                         seq_lens=[1024], q_lens=[2], causal=True, scalar=True,
                         kv_dtype=fmt, k_scale=ks, v_scale=vs, lse=False)
        assert np.isfinite(out).all(), fmt
        same_array(out, np.load(o), "paged " + fmt)


def test_paged_kernels_equal_cli(cli, tmp_path):
    """A paged FP8 cache without --scalar: decode and spec-decode shapes
    read the bytes in kvattn run's kernels (scales folded in), and the
    package hands them the bytes too, so the output and LSE are the
    program's, byte for byte (it dequantized the cache itself and gave
    the bytes of the dequantize-first route)."""
    rng = np.random.default_rng(11)
    d = str(tmp_path)
    for i in range(24):
        fmt = ("fp8_e4m3", "fp8_e5m2")[i % 2]
        hkv, hq, dim, bs = 2, int(rng.choice([2, 4, 8])), int(rng.choice([32, 64])), 16
        nb = int(rng.integers(4, 24))
        cache = rng.integers(0, 0x70, (2, nb, bs, hkv, dim)).astype(np.uint8)
        cache[..., ::2] |= 0x80
        seq = int(rng.integers(1, nb * bs + 1))
        ql = int(rng.choice([1, 1, 2, 4]))
        ql = min(ql, seq)
        bt = rng.permutation(nb)[None].astype(np.int64)
        q = rng.standard_normal((ql, hq, dim)).astype(np.float32)
        ks, vs = float(rng.uniform(0.01, 2)), float(rng.uniform(0.01, 2))
        for name, a in (("q", q), ("c", cache), ("bt", bt)):
            np.save(os.path.join(d, name + ".npy"), a)
        o, lo = os.path.join(d, "o.npy"), os.path.join(d, "l.npy")
        st, _, err = cli("kvattn", "run", "--layout", "thd", "-q", os.path.join(d, "q.npy"),
                         "--kv-cache", os.path.join(d, "c.npy"), "--block-table",
                         os.path.join(d, "bt.npy"), "--seq-lens", str(seq), "--q-lens",
                         str(ql), "--causal", "--kv-dtype", fmt, "--k-scale", repr(ks),
                         "--v-scale", repr(vs), "-o", o, "--lse", lo)
        assert st == 0, err
        out, lse = kvattn.run(q, layout="thd", kv_cache=cache, block_table=bt,
                              seq_lens=[seq], q_lens=[ql], causal=True,
                              kv_dtype=fmt, k_scale=ks, v_scale=vs)
        same_array(out, np.load(o), "paged %s case %d" % (fmt, i))
        same_array(lse, np.load(lo), "paged %s case %d lse" % (fmt, i))
