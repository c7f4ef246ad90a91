# scripts/crosscheck/stage_kvattn_fp8.py - the FP8 KV cache against torch.
#
# Quantization: for random f32, bf16 and f16 tensors (normal values over a
# wide range of magnitudes, exact midpoints between FP8 neighbours and the
# floats either side of them, subnormals, values past the largest finite,
# infinities, NaN, signed zeros) and random scales, kvattn quant's bytes
# must equal torch 2.15's (x.float() / scale).clamp(-max, max).to(fp8)
# viewed as uint8 (vLLM's reference expression for its cache-writing
# kernels), for e4m3 and e5m2, per tensor and for a paged cache with its
# two scales.  fp8_per_token_head: torch computes the scales and bytes from
# vLLM's rule (max(absmax / 448, 1e-6), x * (1 / scale)).
# Attention: kvattn run --kv-dtype on the bytes against torch's
# scaled_dot_product_attention in float64 on the dequantized values
# (bytes.view(fp8).float() * scale), within kvattn's stated bound.
# MLA: a latent cache quantized with one scale for the whole row, as vLLM's
# concat_and_cache_mla writes kv_cache_dtype fp8 (bytes against torch's),
# and kvattn mla --kv-dtype, dense and sparse, against float64 attention
# over its dequantized rows, within the bound -v prints.
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from stage_common import Count, kv, npys, run_mla_sparse_maybe  # noqa: E402

FMTS = {"fp8_e4m3": (torch.float8_e4m3fn, 448.0), "fp8_e5m2": (torch.float8_e5m2, 57344.0)}
rng = np.random.default_rng(20261128)
c = Count("kvattn-fp8")
tmp = tempfile.mkdtemp(prefix="kvfp8.")


def save(name, arr):
    p = os.path.join(tmp, name)
    if isinstance(arr, torch.Tensor) and arr.dtype == torch.bfloat16:
        raw = arr.contiguous().view(torch.int16).numpy().view(np.uint16)
        with open(p, "wb") as f:
            h = "{'descr': '<V2', 'fortran_order': False, 'shape': %r, }" % (tuple(arr.shape),)
            h += " " * (118 - len(h)) + "\n"
            f.write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode())
            f.write(raw.tobytes())
    else:
        np.save(p, arr.numpy() if isinstance(arr, torch.Tensor) else arr)
    return p


def adversarial(fmt, shape):
    """Values that probe every rounding case of fmt after division by 1."""
    dt, mx = FMTS[fmt]
    allv = torch.arange(256, dtype=torch.uint8).view(dt).float()
    fin = allv[torch.isfinite(allv) & (allv >= 0)].sort().values
    mids = ((fin[1:].double() + fin[:-1].double()) / 2).float()
    pool = torch.cat([fin, -fin, mids, -mids, torch.nextafter(mids, torch.zeros_like(mids)),
                      torch.nextafter(mids, torch.full_like(mids, float("inf"))),
                      torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"),
                                    mx * 1.01, -mx * 1.5, mx * 1.0001, 1e30, -1e-30])])
    n = int(np.prod(shape))
    idx = torch.from_numpy(rng.integers(0, len(pool), n))
    return pool[idx].reshape(shape)


def torch_quant(x, scale, fmt):
    dt, mx = FMTS[fmt]
    return (x.float() / torch.tensor(scale, dtype=torch.float32)).clamp(-mx, mx).to(dt).view(torch.uint8)


def check_quant(i):
    fmt = ["fp8_e4m3", "fp8_e5m2"][i % 2]
    shape = tuple(int(v) for v in rng.integers(1, 9, 3)) + (int(rng.integers(1, 33)),)
    kind = i % 3
    scale = float(np.float32(np.exp(rng.uniform(-6, 4))))
    if kind == 0:
        x = adversarial(fmt, shape)
        scale = 1.0
    elif kind == 1:
        mag = torch.from_numpy(np.exp(rng.uniform(-25, 12, shape))).float()
        x = torch.from_numpy(rng.standard_normal(shape)).float() * mag
    else:
        x = torch.from_numpy(rng.standard_normal(shape) * 50).float()
    dtype = [torch.float32, torch.bfloat16, torch.float16][(i // 2) % 3]
    x = x.to(dtype)
    p = save("x%d.npy" % i, x)
    got = npys(kv("kvattn", "quant", "--kv-dtype", fmt, "--k-scale", repr(scale), "-k", p))[0]
    want = torch_quant(x, scale, fmt).numpy()
    c.check(got.dtype == np.uint8 and got.shape == want.shape and (got == want).all(),
            "quant", "%s %s %s scale %r: %d bytes differ" % (
                fmt, dtype, shape, scale, int((got != want).sum()) if got.shape == want.shape else -1))
    os.unlink(p)


def check_cache(i):
    fmt = ["fp8_e4m3", "fp8_e5m2"][i % 2]
    shape = (2, int(rng.integers(1, 6)), 4, int(rng.integers(1, 4)), 8)
    x = torch.from_numpy(rng.standard_normal(shape) * 30).float()
    ks, vs = (float(np.float32(np.exp(rng.uniform(-3, 2)))) for _ in range(2))
    p = save("c%d.npy" % i, x)
    got = npys(kv("kvattn", "quant", "--kv-dtype", fmt, "--kv-cache", p, "--k-scale", repr(ks),
                  "--v-scale", repr(vs)))[0]
    want = torch.stack([torch_quant(x[0], ks, fmt), torch_quant(x[1], vs, fmt)]).numpy()
    c.check((got == want).all(), "paged cache", "%s %s" % (fmt, shape))


def check_pth(i):
    shape = (int(rng.integers(1, 7)), int(rng.integers(1, 5)), int(rng.integers(1, 65)))
    x = torch.from_numpy(rng.standard_normal(shape) * np.exp(rng.uniform(-8, 8))).float()
    if i % 4 == 0:
        x[0, 0] = 0.0   # a row of zeros: the 1e-6 floor
    p = save("p%d.npy" % i, x)
    sp = os.path.join(tmp, "ps%d.npy" % i)
    got = npys(kv("kvattn", "quant", "--kv-dtype", "fp8_per_token_head", "-k", p,
                  "--scales-out", sp))[0]
    s = torch.clamp(x.abs().amax(-1) / torch.tensor(448.0), min=1e-6)
    want = (x * (torch.tensor(1.0) / s)[..., None]).clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    gs = np.load(sp)
    c.check((got == want.numpy()).all() and (gs == s.numpy()).all(), "per token head", str(shape))


def check_attn(i):
    fmt = ["fp8_e4m3", "fp8_e5m2"][i % 2]
    b, hq, g, lq, lk, d = 1, 4, 2, int(rng.integers(1, 20)), int(rng.integers(1, 40)), 32
    lk = max(lk, lq)
    q = torch.from_numpy(rng.standard_normal((b, hq, lq, d))).float()
    k = torch.from_numpy(rng.standard_normal((b, hq // g, lk, d)) * 2).float()
    v = torch.from_numpy(rng.standard_normal((b, hq // g, lk, d))).float()
    ks, vs = 0.01, 0.005
    pk, pv, pq = save("k.npy", k), save("v.npy", v), save("q.npy", q)
    k8 = os.path.join(tmp, "k8.npy")
    v8 = os.path.join(tmp, "v8.npy")
    kv("kvattn", "quant", "--kv-dtype", fmt, "-k", pk, "-v", pv, "--k-scale", ks, "--v-scale", vs,
       "-o", k8, "--v-out", v8)
    out = npys(kv("kvattn", "run", "-q", pq, "-k", k8, "-v", v8, "--kv-dtype", fmt,
                  "--k-scale", ks, "--v-scale", vs, "--causal"))[0]
    dt, _ = FMTS[fmt]
    kd = torch.from_numpy(np.load(k8)).view(dt).double() * torch.tensor(ks, dtype=torch.float32).double()
    vd = torch.from_numpy(np.load(v8)).view(dt).double() * torch.tensor(vs, dtype=torch.float32).double()
    kd = kd.float().double()
    vd = vd.float().double()
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.double(), kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1),
        is_causal=False, attn_mask=torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq))
    pkd, pvd = save("kd.npy", kd.float()), save("vd.npy", vd.float())
    bound = float(kv("kvattn", "bound", "-q", pq, "-k", pkd, "-v", pvd).decode().split()[0])
    err = float((torch.from_numpy(out).double() - ref).abs().max())
    c.check(err <= bound, "attention", "%s lq %d lk %d: error %.3g > bound %.3g" % (fmt, lq, lk, err, bound))


def check_mla(i):
    """An MLA latent cache [blocks, block_size, 1, Dl + R] with one scale for
    the whole row (vLLM's concat_and_cache_mla with kv_cache_dtype fp8:
    c_kv and k_pe alike): the bytes, then kvattn mla --kv-dtype (sparse in
    half the cases) against float64 attention over the dequantized rows."""
    fmt = ["fp8_e4m3", "fp8_e5m2"][i % 2]
    nb, bs, dl, r, h = int(rng.integers(2, 6)), int(rng.integers(1, 9)), 32, 8, int(rng.integers(1, 5))
    x = torch.from_numpy(rng.standard_normal((nb, bs, 1, dl + r)) * 3).to(
        [torch.float32, torch.bfloat16][(i // 2) % 2])
    ks = float(np.float32(np.exp(rng.uniform(-5, 0))))
    p = save("m%d.npy" % i, x)
    c8 = os.path.join(tmp, "m8.npy")
    kv("kvattn", "quant", "--kv-dtype", fmt, "--k-scale", repr(ks), "-k", p, "-o", c8)
    got = np.load(c8)
    c.check((got == torch_quant(x, ks, fmt).numpy()).all(), "mla latent cache", "%s %s" % (fmt, x.dtype))
    lk = int(rng.integers(1, (nb - 1) * bs + 1))
    lq = int(rng.integers(1, min(lk, 4) + 1))
    bt = rng.permutation(nb - 1)[: (lk + bs - 1) // bs] + 1
    q = torch.from_numpy(rng.standard_normal((lq, h, dl + r))).float()
    pq, pbt = save("mq.npy", q), save("mbt.npy", bt[None].astype(np.int32))
    args = ["mla", "-q", pq, "--kv-cache", c8, "--kv-dtype", fmt, "--k-scale", repr(ks),
            "--block-table", pbt, "--seq-lens", lk, "--q-lens", lq, "--causal", "--scale", 0.125,
            "--kv-lora-rank", dl, "-v"]
    out, bound, sel, err = run_mla_sparse_maybe(args, rng, lq, lk, i % 4 >= 2,
                                                os.path.join(tmp, "msel.npy"))
    if err is not None:
        c.check(False, "mla over the cache", err)
        return
    dt, _ = FMTS[fmt]
    deq = (torch.from_numpy(got).view(dt).float() * torch.tensor(ks, dtype=torch.float32)).double()
    rows = torch.stack([deq[bt[j // bs], j % bs, 0] for j in range(lk)])
    err = 0.0
    for t in range(lq):
        js = list(range(t + lk - lq + 1)) if sel is None else [j for j in sel[t] if j >= 0]
        L = rows[js]
        pr = torch.softmax(q[t].double() @ L.T * 0.125, -1)
        err = max(err, float((torch.from_numpy(out[t]) - pr @ L[:, :dl]).abs().max()))
    c.check(err <= bound, "mla over the cache", "%s lq %d lk %d%s: error %.3g > bound %.3g" % (
        fmt, lq, lk, " sparse" if sel is not None else "", err, bound))


def case(group, fn, i):
    """One case; an exception (kvattn exiting non-zero, say) fails it."""
    try:
        fn(i)
    except Exception as e:  # noqa: BLE001 - any error fails the case
        c.check(False, group, "case %d: %s: %s" % (i, type(e).__name__, e))


for i in range(600):
    case("quant", check_quant, i)
for i in range(60):
    case("paged cache", check_cache, i)
for i in range(60):
    case("per token head", check_pth, i)
for i in range(40):
    case("attention", check_attn, i)
for i in range(60):
    case("mla latent cache", check_mla, i)
sys.exit(c.close())
