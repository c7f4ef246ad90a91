# scripts/crosscheck/stage_kvxattn.py - kvxattn estimate against torch runs
# of the XAttention estimate expressions (run by scripts/crosscheck/kvxattn.sh).
#
# The original estimator (mit-han-lab/x-attention, xattn_estimate) is not a
# package on the index and is not kept here: its outputs are, as the public
# conformance vectors under tests/vectors/xattn (c01, c05, c14, produced by
# the original on a CPU) and the twelve under tests/vectors/xattn/orig (one
# per rule or artifact).  This part first re-checks kvxattn against every
# one of them (masks bit for bit, block sums within kvxattn(1)'s ACCURACY
# bound), then runs the estimate's expressions, as the XAttention paper and
# the original's torch path state them, in torch float64 on random
# structured inputs:
#   antidiagonal reshape (query groups reversed, key groups forward),
#   score = Qr.Kr / sqrt(D) / S / norm, causal masking by whole S-token
#   groups (the diagonal group included), softmax over the reshaped keys a
#   row may see, block sums over (BS/S) x (BS/S), and the threshold
#   selection in double (blocks 0 and diagonal forced, strict '<', the
#   crossing block kept; the first-chunk lag when the query starts at key 0;
#   block 0 always kept; future blocks cleared);
# and compares kvxattn's sums (within the ACCURACY bound) and masks (every
# row whose decision margin, the distance of each compared cumulative sum
# from threshold x T relative to T, exceeds four times that bound; rows
# closer to the edge are counted apart, not compared: another exact order of
# sums may keep one block more or less there).
import os
import random
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_common import TOP, Count, kv  # noqa: E402

SEED = 20260528
rng = random.Random(SEED)
nrng = np.random.default_rng(SEED)
C = Count("kvxattn")
TMP = tempfile.mkdtemp(prefix="kvxattn-xc-")
VEC = os.path.join(TOP, "tests", "vectors", "xattn")
U = 2.0 ** -24


def rel_bound(q, k, S, BS, D, norm, m):
    """kvxattn(1) ACCURACY: the relative bound of a block sum."""
    a = float(np.abs(q).max()) * float(np.abs(k).max()) / (np.sqrt(D) * norm)
    wx = (2 * S * D + 10) * a + 8 + 1
    p = (BS // S) ** 2
    return 1.01 * U * (2 * wx + m + p + 1)


def estimate(args, q, k):
    qf, kf = os.path.join(TMP, "q.npy"), os.path.join(TMP, "k.npy")
    np.save(qf, q)
    np.save(kf, k)
    mf, sf = os.path.join(TMP, "m.npy"), os.path.join(TMP, "s.npy")
    kv("kvxattn", "estimate", "-q", qf, "-k", kf, "--sums", sf, "-o", mf, "-j", 1, *args)
    return np.load(mf), np.load(sf)


# ---- the public vectors -----------------------------------------------------

def vector_cases():
    cases = [("c01", "in_rand_q.npy", "in_rand_k.npy", "--compat-chunk-size 16384 --stride 8 --threshold 0.9"),
             ("c05", "in_peaky_q.npy", "in_peaky_k.npy", "--compat-chunk-size 16384 --stride 8 --threshold 0.9"),
             ("c14", "in_peaky_q_last256.npy", "in_peaky_k.npy", "--compat-chunk-size 384 --stride 8 --threshold 0.9")]
    for line in open(os.path.join(VEC, "orig", "cases.txt")):
        f = line.split()
        if f:
            cases.append(("orig/" + f[0], "orig/" + f[1], "orig/" + f[2], " ".join(f[3:])))
    for name, qn, kn, opts in cases:
        d = os.path.dirname(os.path.join(VEC, name))
        args = opts.split()
        if "--thresholds" in args:
            i = args.index("--thresholds")
            args[i + 1] = os.path.join(d, args[i + 1])
        q, k = np.load(os.path.join(VEC, qn)), np.load(os.path.join(VEC, kn))
        m, s = estimate(args, q, k)
        rm = np.load(os.path.join(VEC, name + "_mask.npy"))
        rs = np.load(os.path.join(VEC, name + "_sums.npy")).astype(np.float64)
        st = int(args[args.index("--stride") + 1])
        rb = rel_bound(q, k, st, 128, q.shape[-1], 1.0, -(-k.shape[-2] // st))
        # the original stores its sums in f32: one more rounding each side
        tol = (2 * rb + 2 * U) * np.abs(rs) + 1e-12
        C.check(np.array_equal(m.astype(np.uint8), rm), "original vectors: mask", "%s %s" % (name, opts))
        C.check(s.shape == rs.shape and np.all(np.abs(s - rs) <= tol), "original vectors: sums",
                "%s %s: max diff %.3g" % (name, opts, float(np.abs(s - rs).max())))


# ---- torch runs of the estimate expressions ------------------------------------

def torch_estimate(q, k, S, BS, causal, norm):
    """Block sums A [B, H, nqb, nkb] (float64) of the clean geometry."""
    B, H, Lq, D = q.shape
    hkv, Lk = k.shape[1], k.shape[2]
    qt = torch.from_numpy(q).double()
    kt = torch.from_numpy(k).double().repeat_interleave(H // hkv, dim=1)
    lqp, lkp = -(-Lq // BS) * BS, -(-Lk // BS) * BS
    qp = torch.nn.functional.pad(qt, (0, 0, 0, lqp - Lq))
    kp = torch.nn.functional.pad(kt, (0, 0, 0, lkp - Lk))
    qr = qp.view(B, H, lqp // S, S, D).flip(3).reshape(B, H, lqp // S, S * D)
    kr = kp.view(B, H, lkp // S, S * D)
    sc = (qr @ kr.transpose(-1, -2)) / np.sqrt(D) / S / norm
    off_r = (Lk - Lq) // S
    i = torch.arange(lqp // S)[:, None]
    j = torch.arange(lkp // S)[None, :]
    see = j < -(-Lk // S)
    if causal:
        see = see & (j <= off_r + i)
    sc = sc.masked_fill(~see, float("-inf"))
    p = torch.softmax(sc, dim=-1)
    p = torch.where(i < -(-Lq // S), p, torch.zeros(()))
    p = torch.nan_to_num(p, nan=0.0)
    r = BS // S
    a = p.view(B, H, lqp // BS, r, lkp // BS, r).sum(dim=(3, 5))
    return a.numpy()


def select_row(a, diag, tau, causal, lag):
    """One row of the selection; returns (kept set, decision margin / T)."""
    n = len(a)
    t = float(np.sum(a))  # block order
    req = tau * t
    keep = set()
    margins = []
    if causal:
        forced = [diag] if lag else [0, diag]
        forced = sorted(set(forced))
        keep.update(forced)
        acc = float(sum(a[f] for f in forced))
        cand = [b for b in range(n) if b not in forced]
    else:
        acc, cand = 0.0, list(range(n))
    cand.sort(key=lambda b: (-a[b], b))
    if causal and lag:
        # candidate 1 kept if req > 0; candidate p >= 2 judged on the sum
        # before the previous candidate
        prev = acc
        for idx, b in enumerate(cand):
            judge = acc if idx == 0 else prev
            if idx == 0:
                ok = req > 0
            else:
                ok = judge < req
                margins.append(abs(judge - req))
            if not ok:
                break
            keep.add(b)
            prev = acc
            acc += float(a[b])
    else:
        for b in cand:
            margins.append(abs(acc - req))
            if not acc < req:
                break
            keep.add(b)
            acc += float(a[b])
    keep.add(0)
    if causal:
        keep = {b for b in keep if b <= diag}
    m = min(margins) / t if margins and t > 0 else np.inf
    return keep, m


def structured(B, H, L, D, hot, amp, offset=0):
    """noise + a low-frequency position code + a per-head direction that is
    strong on a few hot tokens (the conformance vectors' 'peaky' inputs)."""
    x = nrng.standard_normal((B, H, L, D)) * 0.6
    pos = np.arange(offset, offset + L)[:, None]
    w = 1.0 / (40.0 * (1 + np.arange(D // 4)))
    code = np.concatenate([np.sin(pos * w), np.cos(pos * w)], axis=1)
    x[..., : code.shape[1]] += 1.2 * code
    u = nrng.standard_normal((H, D))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    for h in range(H):
        x[:, h, hot] += amp * u[h]
    return x.astype(np.float32), u


def random_cases(n):
    near = 0
    for case in range(n):
        BS = rng.choice([32, 64, 128])
        S = rng.choice([s for s in (4, 8, 16) if BS % s == 0])
        D = rng.choice([16, 32, 64])
        hkv = rng.choice([1, 2])
        H = hkv * rng.choice([1, 2])
        Lk = rng.randint(BS // 2, 1400)
        causal = rng.random() < 0.8
        chunked = causal and rng.random() < 0.4 and Lk > BS
        Lq = Lk - BS * rng.randint(1, (Lk - 1) // BS) if chunked else Lk
        tau = round(rng.uniform(0.5, 0.98), 3)
        norm = rng.choice([1.0, 1.0, 0.5, 2.0])
        rule = rng.choice(["original", "original", "intended"])
        hot = nrng.choice(Lk, size=max(1, Lk // 50), replace=False)
        k, _ = structured(1, hkv, Lk, D, hot, 4.0)
        qf, _ = structured(1, H, Lk, D, hot, 2.0)
        q = qf[:, :, Lk - Lq:]
        args = ["--block-size", BS, "--stride", S, "--threshold", tau, "--norm", norm, "--rule", rule]
        if not causal:
            args.append("--no-causal")
        m, s = estimate(args, q, k)
        a = torch_estimate(q, k, S, BS, causal, norm)
        rb = rel_bound(q, k, S, BS, D, norm, -(-Lk // S))
        what = "case %d: Lq=%d Lk=%d D=%d H=%d/%d %s" % (case, Lq, Lk, D, H, hkv, " ".join(map(str, args)))
        tol = (rb + U) * np.abs(a) + 1e-300
        C.check(s.shape == a.shape and np.all(np.abs(s - a) <= tol), "estimate sums vs torch float64",
                what + ": max rel %.3g" % float(np.max(np.abs(s - a) / np.maximum(np.abs(a), 1e-300))))
        off_b = (Lk - Lq) // BS
        lag = causal and rule == "original" and Lk == Lq
        ok = True
        for h in range(H):
            for qb in range(a.shape[2]):
                keep, margin = select_row(a[0, h, qb], off_b + qb, tau, causal, lag)
                if margin <= 4 * rb:
                    near += 1
                    continue
                want = np.zeros(a.shape[3], bool)
                want[sorted(keep)] = True
                if not np.array_equal(m[0, h, qb].astype(bool), want):
                    ok = False
        C.check(ok, "estimate mask vs torch float64 (%s, %s)" % ("causal" if causal else "non-causal",
                                                                  "lag" if lag else "no lag"), what)
    print("  rows within 4x the bound of the threshold, not compared: %d" % near)


def main():
    print("kvxattn cross-check: the original's conformance vectors (x-attention e379887, "
          "tests/vectors/xattn) and torch %s float64 runs of the estimate; seed %d"
          % (torch.__version__, SEED))
    t = time.time()
    vector_cases()
    print("  (vectors: %.0f s)" % (time.time() - t))
    t = time.time()
    random_cases(400)
    print("  (random: %.0f s)" % (time.time() - t))
    return C.close()


if __name__ == "__main__":
    sys.exit(main())
