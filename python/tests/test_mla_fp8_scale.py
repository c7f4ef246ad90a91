"""kvtools.kvattn.mla over an FP8 latent cache whose scale is near the top
of f32 and whose keys are many: the output (at most 448 or 57344 times
the scale) is finite, as the program's, byte for byte, dense and sparse
(--topk-indices), fp8_e4m3 and fp8_e5m2 with one k_scale and fp8_ds_mla
with tile scales up to 2^112."""
import os

import numpy as np

from kvtools import kvattn
from conftest import same_array

BS, NK = 64, (3000, 500)


def common(rng, w):
    """Block table, tiny queries (every weight near 1) and top-k rows."""
    nb = sum((n + BS - 1) // BS for n in NK) + 1
    perm = rng.permutation(np.arange(1, nb))
    bt = np.zeros((2, (NK[0] + BS - 1) // BS), np.int64)
    o = 0
    for b, n in enumerate(NK):
        k = (n + BS - 1) // BS
        bt[b, :k] = perm[o:o + k]
        o += k
    q = (rng.standard_normal((2, 4, w)) * 1e-38).astype(np.float32)
    idx = np.full((2, 1024), -1, np.int32)
    idx[0] = rng.permutation(NK[0])[:1024]
    idx[1, :400] = rng.permutation(NK[1])[:400]
    return nb, bt, q, idx


def latent_bytes(rng, nb, w, top):
    """u8 [nb, BS, 1, w]: the largest byte, a sign a dimension, a tenth of
    the bytes random."""
    sign = (rng.random(w) < 0.5).astype(np.uint8) * 0x80
    c = np.broadcast_to(top | sign, (nb, BS, 1, w)).copy()
    m = rng.random(c.shape) < 0.1
    c[m] = (rng.integers(0, top + 1, m.sum()) | rng.integers(0, 2, m.sum()) * 0x80).astype(
        np.uint8)
    return c


def ds_bytes(rng, nb):
    """fp8_ds_mla rows [nb, BS, 656] of the largest c_kv bytes and tile
    scales 2^108 .. 2^112, k_pe random bf16."""
    c = np.zeros((nb, BS, 656), np.uint8)
    c[:, :, :512] = latent_bytes(rng, nb, 512, 0x7E)[:, :, 0]
    s = np.ldexp(np.float32(1), rng.integers(108, 113, (nb, BS, 4))).astype(np.float32)
    c[:, :, 512:528] = s.view(np.uint8).reshape(nb, BS, 16)
    pe = rng.standard_normal((nb, BS, 64)).astype(np.float32).view(np.uint32) >> 16
    c[:, :, 528:] = pe.astype(np.uint16).view(np.uint8).reshape(nb, BS, 128)
    return c


def test_big_k_scale_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(11)
    d = str(tmp_path)
    nb, bt, q, idx = common(rng, 576)
    for name, a in (("q", q), ("bt", bt), ("idx", idx)):
        np.save(os.path.join(d, name + ".npy"), a)
    cases = (("fp8_e4m3", 1e35, latent_bytes(rng, nb, 576, 0x7E)),
             ("fp8_e5m2", 5e33, latent_bytes(rng, nb, 576, 0x7B)),
             ("fp8_ds_mla", None, ds_bytes(rng, nb)))
    for fmt, ks, c in cases:
        np.save(os.path.join(d, "c.npy"), c)
        scale = ["--k-scale", repr(ks)] if ks is not None else []
        for sparse in (False, True):
            o = os.path.join(d, "o.npy")
            st, _, err = cli("kvattn", "mla", "-q", os.path.join(d, "q.npy"), "--kv-cache",
                             os.path.join(d, "c.npy"), "--kv-dtype", fmt, *scale,
                             "--block-table", os.path.join(d, "bt.npy"), "--seq-lens",
                             "%d,%d" % NK, "--scale", "0.1", "--kv-lora-rank", "512",
                             *(["--topk-indices", os.path.join(d, "idx.npy")] if sparse
                               else []), "-o", o)
            assert st == 0, err
            out, _ = kvattn.mla(q, kv_cache=c, block_table=bt, seq_lens=list(NK),
                                topk_indices=idx if sparse else None, scale=0.1,
                                kv_lora_rank=512, kv_dtype=fmt, k_scale=ks)
            what = "%s %s" % (fmt, "sparse" if sparse else "dense")
            assert np.isfinite(out).all(), what
            assert np.abs(out).max() > 1e35, what
            same_array(out, np.load(o), what)
