# make-vectors.py - how the kvattn conformance vectors were made (numpy,
# float64).  Not run by make check: the .npy files are committed.
import numpy as np

rng = np.random.default_rng(20261121)
B, Hq, Hkv, Lq, Lk, D = 2, 4, 2, 37, 53, 16
q = rng.standard_normal((B, Hq, Lq, D)).astype(np.float32)
k = rng.standard_normal((B, Hkv, Lk, D)).astype(np.float32)
v = rng.standard_normal((B, Hkv, Lk, D)).astype(np.float32)
np.save("q.npy", q); np.save("k.npy", k); np.save("v.npy", v)


def attn(q, k, v, keep=None, add=None, scale=None):
    """Plain float64 attention; keep/add broadcast over [B, Hq, Lq, Lk]."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k = np.repeat(k, g, axis=1); v = np.repeat(v, g, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale else 1 / np.sqrt(q.shape[-1]))
    if add is not None:
        s = s + add
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    empty = ~np.isfinite(mx)
    mx = np.where(empty, 0, mx)
    p = np.exp(s - mx)
    l = p.sum(-1, keepdims=True)
    o = np.where(empty, 0, (p / np.where(l == 0, 1, l)) @ v)
    lse = np.where(empty[..., 0], -np.inf, np.log(np.where(l == 0, 1, l))[..., 0] + mx[..., 0])
    return o, lse


i = np.arange(Lq)[:, None] + Lk - Lq
j = np.arange(Lk)[None, :]
causal = j <= i
o, l = attn(q, k, v, keep=causal)
np.save("ref_causal_out.npy", o); np.save("ref_causal_lse.npy", l)
win = (j <= i) & (j > i - 5)
o, l = attn(q, k, v, keep=win)
np.save("ref_window5_out.npy", o)
# masked-convention bool mask [Lq, Lk]: causal plus random holes
mask = ~causal | (rng.random((Lq, Lk)) < 0.2)
np.save("mask_bool.npy", mask)
np.save("mask_keep_u8.npy", (~mask).astype(np.uint8))
o, l = attn(q, k, v, keep=~mask)
np.save("ref_mask_out.npy", o); np.save("ref_mask_lse.npy", l)
# additive f32 mask [Hq, Lq, Lk] with -inf, -10000 and small values
u = rng.random((Hq, Lq, Lk))
add = np.where(u < 0.3, -np.inf, np.where(u < 0.4, -10000.0, u - 0.5)).astype(np.float32)
np.save("mask_add.npy", add)
o, l = attn(q, k, v, add=add.astype(np.float64))
np.save("ref_add_out.npy", o)
# block mask [B, Hq, ceil(Lq/16), ceil(Lk/16)], 1 = keep, with causality inside
bs = 16
bm = rng.random((B, Hq, -(-Lq // bs), -(-Lk // bs))) < 0.6
np.save("block_mask.npy", bm)
bkeep = np.repeat(np.repeat(bm, bs, axis=2), bs, axis=3)[:, :, :Lq, :Lk]
o, l = attn(q, k, v, keep=bkeep & causal)
np.save("ref_block_out.npy", o)
# thd varlen: requests (q 5, kv 9), (q 1, kv 1), (q 12, kv 20), causal
ql, kl = [5, 1, 12], [9, 1, 20]
tq = rng.standard_normal((sum(ql), Hq, D)).astype(np.float32)
tk = rng.standard_normal((sum(kl), Hkv, D)).astype(np.float32)
tv = rng.standard_normal((sum(kl), Hkv, D)).astype(np.float32)
np.save("thd_q.npy", tq); np.save("thd_k.npy", tk); np.save("thd_v.npy", tv)
outs, qs, ks = [], 0, 0
for a, c in zip(ql, kl):
    qq = tq[qs:qs + a].transpose(1, 0, 2)[None]
    kk = tk[ks:ks + c].transpose(1, 0, 2)[None]
    vv = tv[ks:ks + c].transpose(1, 0, 2)[None]
    ii = np.arange(a)[:, None] + c - a
    o, l = attn(qq, kk, vv, keep=np.arange(c)[None, :] <= ii)
    outs.append(o[0].transpose(1, 0, 2))
    qs += a; ks += c
np.save("ref_thd_out.npy", np.concatenate(outs))
# paged decode: cache [2, 7, 4, Hkv, D] bf16-free f32, two requests, q [2, Hq, D]
nb, page = 7, 4
cache = rng.standard_normal((2, nb, page, Hkv, D)).astype(np.float32)
np.save("cache.npy", cache)
table = [[3, 0, 5], [6, 2, 4]]
seq = [10, 7]
with open("block_table.txt", "w") as f:
    for row in table:
        f.write(" ".join(map(str, row)) + "\n")
dq = rng.standard_normal((2, Hq, D)).astype(np.float32)
np.save("decode_q.npy", dq)
outs, lses = [], []
for r in range(2):
    idx = [table[r][t // page] * page + t % page for t in range(seq[r])]
    kk = cache[0].reshape(nb * page, Hkv, D)[idx].transpose(1, 0, 2)[None]
    vv = cache[1].reshape(nb * page, Hkv, D)[idx].transpose(1, 0, 2)[None]
    o, l = attn(dq[r][None, :, None, :], kk, vv)
    outs.append(o[0, :, 0]); lses.append(l[0, :, 0])
np.save("ref_paged_out.npy", np.stack(outs)); np.save("ref_paged_lse.npy", np.stack(lses))
# spec C.4: one query, scaled scores [0.5, -1, 2, 0.25] (q = 1, D = 1, scale 1)
np.save("c4_q.npy", np.ones((1, 1, 1, 1), np.float32))
np.save("c4_k01.npy", np.array([0.5, -1.0], np.float32).reshape(1, 1, 2, 1))
np.save("c4_k23.npy", np.array([2.0, 0.25], np.float32).reshape(1, 1, 2, 1))
np.save("c4_v01.npy", np.array([[1, 0], [0, 1]], np.float32).reshape(1, 1, 2, 2))
np.save("c4_v23.npy", np.array([[2, 2], [-1, 3]], np.float32).reshape(1, 1, 2, 2))
np.save("c4_ref_out.npy", np.array([1.416582, 1.777234], np.float32).reshape(1, 1, 1, 2))
np.save("c4_ref_lse.npy", np.array([2.369279], np.float32).reshape(1, 1, 1))
# one NaN in query row (1, 2, 3)
q[1, 2, 3, 0] = np.nan
np.save("q_nan.npy", q)
