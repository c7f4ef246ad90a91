# scripts/crosscheck/stage_kvattn.py - kvattn run against torch's own
# attention on the CPU (run by scripts/crosscheck/kvattn.sh).
#
# Each random case is run three ways: kvattn run; torch's
# scaled_dot_product_attention in float64 (the exact reference) and in f32
# (a second route); and, for one case in three, torch's flex_attention
# (eager, f32) with return_lse for the LSE.  Nothing is replaced: torch is
# imported as installed.  Inputs are f32 or bf16 (bf16 widened to f32 for
# torch, exactly as kvattn reads them); the output is compared in f32.
#
# Tolerances are kvattn(1)'s ACCURACY bound for the case, printed by
# 'kvattn bound' (never one machine's digits):
#   |kvattn - float64|  <= bound (--routes 1)
#   |kvattn - torch f32|, |kvattn - flex| <= bound --routes 2
# (torch's f32 routes compute the same sums in another order; their error
# has the same first-order form).  Rows that can attend to nothing must be
# 0 with LSE -inf.
#
# Shapes: bhsd with GQA/MQA (Hq a multiple of Hkv) and Lq != Lk (bottom-right
# alignment); thd varlen (--q-lens/--kv-lens); paged (vLLM's [2, blocks,
# block_size, Hkv, D] cache, a block table and --seq-lens).  Masks: none,
# --causal, --window, an explicit bool mask (nonzero = masked), --mask-keep,
# an additive float mask (-inf and finite values), --mask-binary (1.0 =
# masked) and --block-mask.
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_common import Count, kv  # noqa: E402

SEED = 20260527
rng = random.Random(SEED)
nrng = np.random.default_rng(SEED)
C = Count("kvattn")
TMP = tempfile.mkdtemp(prefix="kvattn-xc-")
torch.set_num_threads(1)
# eager flex_attention warns that it is not compiled, numpy that a broadcast
# view is read-only: both are expected here
warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)


def save(name, a):
    p = os.path.join(TMP, name)
    np.save(p, a)
    return p


def bf16_bits(x):
    """x (f32 numpy) rounded to bf16: the torch tensor and the .npy array
    kvattn reads (descr '<V2', the bits)."""
    t = torch.from_numpy(x).to(torch.bfloat16)
    return t.to(torch.float32).numpy(), t.view(torch.int16).numpy().view("V2")


def inputs(shape_q, shape_k, shape_v, dt):
    q = nrng.standard_normal(shape_q).astype(np.float32)
    k = nrng.standard_normal(shape_k).astype(np.float32)
    v = nrng.standard_normal(shape_v).astype(np.float32)
    if dt == "bf16":
        (q, qf), (k, kf), (v, vf) = bf16_bits(q), bf16_bits(k), bf16_bits(v)
    else:
        qf, kf, vf = q, k, v
    return (q, k, v), (save("q.npy", qf), save("k.npy", kf), save("v.npy", vf))


def bound(files, routes, mask_max):
    out = kv("kvattn", "bound", "-q", files[0], "-k", files[1], "-v", files[2], "--all",
             "--routes", routes, "--mask-max", mask_max).decode()
    d = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    return float(d["out"]), float(d["lse"])


def run(files, extra):
    o, lse = os.path.join(TMP, "o.npy"), os.path.join(TMP, "lse.npy")
    kv("kvattn", "run", "-q", files[0], "-k", files[1], "-v", files[2], "--out-dtype", "f32",
       "--lse", lse, "-o", o, "-j", 1, *extra)
    return np.load(o), np.load(lse)


def sdpa(q, k, v, keep, add, dtype, scale):
    """torch SDPA per [.., Lq, D] with a bool keep mask and/or an additive
    float mask (broadcastable to [B, Hq, Lq, Lk]); GQA by enable_gqa."""
    q, k, v = (torch.from_numpy(x).to(dtype) for x in (q, k, v))
    m = None
    if add is not None:
        m = torch.from_numpy(add).to(dtype)
        if keep is not None:
            m = m.masked_fill(~torch.from_numpy(keep), float("-inf"))
    elif keep is not None:
        m = torch.from_numpy(keep)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale,
                                          enable_gqa=q.shape[-3] != k.shape[-3]).numpy()


def flex(q, k, v, keep, scale):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    q, k, v = (torch.from_numpy(x) for x in (q, k, v))
    lq, lk = q.shape[-2], k.shape[-2]
    bm = None
    if keep is not None:
        shape = (lq, lk) if keep.ndim == 2 else (q.shape[0], q.shape[1], lq, lk)
        kt = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(keep, shape)))
        if kt.dim() == 2:
            def mm(b, h, qi, ki): return kt[qi, ki]
        else:
            def mm(b, h, qi, ki): return kt[b, h, qi, ki]
        B = kt.shape[0] if kt.dim() == 4 else None
        H = kt.shape[1] if kt.dim() == 4 else None
        bm = create_block_mask(mm, B, H, lq, lk, device="cpu")
    o, lse = flex_attention(q, k, v, block_mask=bm, scale=scale, enable_gqa=q.shape[1] != k.shape[1],
                            return_lse=True)
    return o.numpy(), lse.numpy()


def close(got, ref, tol, keep_rows):
    """|got - ref| <= tol where a row attends somewhere; 0 elsewhere."""
    ref = np.where(keep_rows[..., None], ref, 0.0)
    return np.all(np.abs(got.astype(np.float64) - ref) <= tol) and np.all(np.isfinite(got))


def lse_ok(got, ref, tol, keep_rows):
    g, r = got.astype(np.float64), ref.astype(np.float64)
    ok_dead = np.all(np.isneginf(g[~keep_rows]))
    return ok_dead and np.all(np.abs(g[keep_rows] - r[keep_rows]) <= tol)


def lse64(q, k, keep, add, scale, hq, hkv):
    """log-sum-exp of the float64 scores (the exact LSE)."""
    qt, kt = torch.from_numpy(q).double(), torch.from_numpy(k).double()
    kt = kt.repeat_interleave(hq // hkv, dim=-3)
    s = (qt @ kt.transpose(-1, -2)) * scale
    if add is not None:
        s = s + torch.from_numpy(add).double()
    if keep is not None:
        s = s.masked_fill(~torch.from_numpy(keep), float("-inf"))
    return torch.logsumexp(s, dim=-1).numpy()


def bhsd_case(i):
    b = rng.randint(1, 2)
    hkv = rng.choice([1, 2, 4])
    hq = hkv * rng.choice([1, 2, 4])
    lq = rng.randint(1, 160)
    lk = rng.choice([lq, rng.randint(1, 260)])
    d = rng.choice([16, 32, 64, 128])
    dt = rng.choice(["f32", "bf16"])
    kind = rng.choice(["none", "causal", "window", "bool", "keep", "add-inf", "add", "binary",
                       "block", "causal+block"])
    (q, k, v), files = inputs((b, hq, lq, d), (b, hkv, lk, d), (b, hkv, lk, d), dt)
    scale = 1 / np.sqrt(d) if rng.random() < 0.7 else rng.uniform(0.05, 0.3)
    extra = ["--scale", repr(float(scale))]
    ii = np.arange(lq)[:, None] + lk - lq
    jj = np.arange(lk)[None, :]
    keep, add, mask_max = None, None, 0.0
    if kind in ("causal", "causal+block"):
        keep = jj <= ii
        extra.append("--causal")
    if kind == "window":
        w = rng.randint(1, 80)
        keep = (jj <= ii) & (jj > ii - w)
        extra += ["--window", w]
    if kind in ("bool", "keep", "binary"):
        shp = rng.choice([(lq, lk), (1, hq, lq, lk), (b, 1, lq, lk), (b, hq, lq, lk)])
        keep = nrng.random(shp) < 0.7
        if kind == "bool":
            extra += ["--mask", save("m.npy", ~keep)]
        elif kind == "keep":
            extra += ["--mask", save("m.npy", keep.astype(np.uint8)), "--mask-keep"]
        else:
            extra += ["--mask", save("m.npy", (~keep).astype(np.float32)), "--mask-binary"]
    if kind in ("add", "add-inf"):
        shp = rng.choice([(lq, lk), (b, hq, lq, lk)])
        add = (nrng.random(shp) * -6).astype(np.float32)
        mask_max = 6.0
        if kind == "add-inf":
            add[nrng.random(shp) < 0.3] = -np.inf
        extra += ["--mask", save("m.npy", add)]
        keep = np.isfinite(add)
        add = np.where(keep, add, 0).astype(np.float32)
    if kind in ("block", "causal+block"):
        bs = rng.choice([8, 16, 32])
        nqb, nkb = -(-lq // bs), -(-lk // bs)
        blk = nrng.random((b, hq, nqb, nkb)) < 0.6
        extra += ["--block-mask", save("bm.npy", blk.astype(np.uint8)), "--block-size", bs]
        tok = np.repeat(np.repeat(blk, bs, axis=2), bs, axis=3)[:, :, :lq, :lk]
        keep = tok if keep is None else (keep & tok)
    full = np.broadcast_to(keep, (b, hq, lq, lk)) if keep is not None else np.ones((b, hq, lq, lk), bool)
    rows = full.any(-1)
    got, glse = run(files, extra)
    t1, l1 = bound(files, 1, mask_max)
    t2, l2 = bound(files, 2, mask_max)
    tag = "bhsd %s %s" % (kind, dt)
    what = "case %d: b=%d hq=%d hkv=%d lq=%d lk=%d d=%d %s" % (i, b, hq, hkv, lq, lk, d, " ".join(map(str, extra)))
    ref64 = sdpa(q, k, v, keep, add, torch.float64, scale)
    C.check(close(got, ref64, t1, rows), "%s vs float64 SDPA" % tag, what)
    C.check(lse_ok(glse, lse64(q, k, keep, add, scale, hq, hkv), l1, rows), "%s LSE vs float64" % tag, what)
    ref32 = sdpa(q, k, v, keep, add, torch.float32, scale)
    C.check(close(got, ref32, t2, rows), "%s vs torch SDPA f32" % tag, what)
    if add is None and i % 3 == 0:
        fo, fl = flex(q, k, v, keep, scale)
        C.check(close(got, fo, t2, rows), "%s vs flex_attention" % tag, what)
        C.check(lse_ok(glse, fl, l2, rows), "%s LSE vs flex_attention" % tag, what)


def thd_case(i):
    nreq = rng.randint(1, 5)
    hkv = rng.choice([1, 2, 4])
    hq = hkv * rng.choice([1, 2, 4])
    d = rng.choice([32, 64, 128])
    ql = [rng.randint(1, 60) for _ in range(nreq)]
    kl = [q + rng.choice([0, 0, rng.randint(0, 80)]) for q in ql]
    dt = rng.choice(["f32", "bf16"])
    causal = rng.random() < 0.7
    (q, k, v), files = inputs((sum(ql), hq, d), (sum(kl), hkv, d), (sum(kl), hkv, d), dt)
    extra = ["--layout", "thd", "--q-lens", ",".join(map(str, ql)), "--kv-lens", ",".join(map(str, kl))]
    if causal:
        extra.append("--causal")
    got, glse = run(files, extra)
    t1, l1 = bound(files, 1, 0)
    t2, _ = bound(files, 2, 0)
    ok64 = ok32 = okl = True
    qo = ko = 0
    for a, c in zip(ql, kl):
        qs = q[qo:qo + a].transpose(1, 0, 2)[None]
        ks = k[ko:ko + c].transpose(1, 0, 2)[None]
        vs = v[ko:ko + c].transpose(1, 0, 2)[None]
        keep = (np.arange(c)[None, :] <= np.arange(a)[:, None] + c - a) if causal else None
        rows = np.ones((1, hq, a), bool)
        g = got[qo:qo + a].transpose(1, 0, 2)[None]
        gl = glse[qo:qo + a].transpose(1, 0)[None]
        sc = 1 / np.sqrt(d)
        ok64 &= close(g, sdpa(qs, ks, vs, keep, None, torch.float64, sc), t1, rows)
        ok32 &= close(g, sdpa(qs, ks, vs, keep, None, torch.float32, sc), t2, rows)
        okl &= lse_ok(gl, lse64(qs, ks, keep, None, sc, hq, hkv), l1, rows)
        qo, ko = qo + a, ko + c
    what = "case %d: hq=%d hkv=%d d=%d %s" % (i, hq, hkv, d, " ".join(map(str, extra)))
    tag = "thd varlen %s%s" % ("causal " if causal else "", dt)
    C.check(ok64, "%s vs float64 SDPA" % tag, what)
    C.check(okl, "%s LSE vs float64" % tag, what)
    C.check(ok32, "%s vs torch SDPA f32" % tag, what)


def paged_case(i):
    nreq = rng.randint(1, 5)
    hkv = rng.choice([1, 2, 4])
    hq = hkv * rng.choice([1, 2, 4, 8])
    d = rng.choice([32, 64, 128])
    bsz = rng.choice([1, 4, 16])
    seq = [rng.randint(1, 120) for _ in range(nreq)]
    ql = [rng.choice([1, 1, rng.randint(1, s)]) for s in seq]
    dt = rng.choice(["f32", "bf16"])
    per = [-(-s // bsz) for s in seq]
    nb = sum(per) + rng.randint(0, 4)
    perm = nrng.permutation(nb)
    table = np.zeros((nreq, max(per)), np.int32)
    at = 0
    for r, p in enumerate(per):
        table[r, :p] = perm[at:at + p]
        at += p
    (q, cache, _), files = inputs((sum(ql), hq, d), (2, nb, bsz, hkv, d), (1,), dt)
    extra = ["--layout", "thd", "--kv-cache", files[1], "--block-table", save("bt.npy", table),
             "--seq-lens", ",".join(map(str, seq)), "--q-lens", ",".join(map(str, ql)), "--causal"]
    o, lse = os.path.join(TMP, "o.npy"), os.path.join(TMP, "lse.npy")
    kv("kvattn", "run", "-q", files[0], "--out-dtype", "f32", "--lse", lse, "-o", o, "-j", 1, *extra)
    got, glse = np.load(o), np.load(lse)
    # the bound of the whole cache as K and V (a superset of every request's
    # keys), in the cache's own dtype: bf16 inputs run the bf16 tiles, whose
    # bound (P rounded to bf16) is not the f32 one
    fk, fv = cache[0].reshape(-1, hkv, d), cache[1].reshape(-1, hkv, d)
    if dt == "bf16":
        fk, fv = bf16_bits(np.ascontiguousarray(fk))[1], bf16_bits(np.ascontiguousarray(fv))[1]
    flatk = save("fk.npy", fk)
    flatv = save("fv.npy", fv)
    t1, l1 = bound((files[0], flatk, flatv), 1, 0)
    t2, _ = bound((files[0], flatk, flatv), 2, 0)
    ok64 = ok32 = okl = True
    qo = 0
    for r, (s, a) in enumerate(zip(seq, ql)):
        blocks = table[r, :per[r]]
        ks = cache[0][blocks].reshape(-1, hkv, d)[:s].transpose(1, 0, 2)[None]
        vs = cache[1][blocks].reshape(-1, hkv, d)[:s].transpose(1, 0, 2)[None]
        qs = q[qo:qo + a].transpose(1, 0, 2)[None]
        keep = np.arange(s)[None, :] <= np.arange(a)[:, None] + s - a
        rows = np.ones((1, hq, a), bool)
        g = got[qo:qo + a].transpose(1, 0, 2)[None]
        gl = glse[qo:qo + a].transpose(1, 0)[None]
        sc = 1 / np.sqrt(d)
        ok64 &= close(g, sdpa(qs, ks, vs, keep, None, torch.float64, sc), t1, rows)
        ok32 &= close(g, sdpa(qs, ks, vs, keep, None, torch.float32, sc), t2, rows)
        okl &= lse_ok(gl, lse64(qs, ks, keep, None, sc, hq, hkv), l1, rows)
        qo += a
    what = "case %d: hq=%d hkv=%d d=%d block_size=%d %s" % (i, hq, hkv, d, bsz, " ".join(map(str, extra)))
    tag = "paged %s" % dt
    C.check(ok64, "%s vs float64 SDPA" % tag, what)
    C.check(okl, "%s LSE vs float64" % tag, what)
    C.check(ok32, "%s vs torch SDPA f32" % tag, what)


def main():
    print("kvattn cross-check: torch %s scaled_dot_product_attention (float64 and f32) and "
          "flex_attention (eager, f32) on the CPU; seed %d" % (torch.__version__, SEED))
    for name, fn, n in (("bhsd", bhsd_case, 330), ("thd", thd_case, 120), ("paged", paged_case, 120)):
        t = time.time()
        for i in range(n):
            try:
                fn(i)
            except (RuntimeError, subprocess.SubprocessError, ValueError) as e:
                C.check(False, "%s error" % name, "case %d: %s" % (i, e))
        print("  (%s: %d cases, %.0f s)" % (name, n, time.time() - t))
    return C.close()


if __name__ == "__main__":
    sys.exit(main())
