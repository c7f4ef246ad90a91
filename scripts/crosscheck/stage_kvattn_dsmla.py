# scripts/crosscheck/stage_kvattn_dsmla.py - fp8_ds_mla, DeepSeek-V3.2's
# 656-byte latent cache, against vLLM 0.33.0.
#
# vLLM writes it (for DeepSeek-V3.2, outside context parallelism) in the
# Triton kernel _fused_norm_rope_kernel of
# vllm/models/deepseek_v32/common/kernels.py, which RMS-normalizes c_kv,
# rotates k_pe and stores both; its CUDA twin (concat_and_cache_mla) is not
# in the wheel.  Three groups of cases:
#   kernel   vLLM's own kernel, unmodified, run by Triton's CPU interpreter
#            (fused_norm_rope with RMS-norm weights of random magnitudes per
#            128-value tile, zero tiles among them, and a RoPE of angle 0):
#            kvattn quant of the normalized c_kv and k_pe it hands back
#            (kv_c_out, k_pe_out, the f32 values it quantized) must give the
#            bytes it wrote at each slot, byte for byte.  The interpreter's
#            own narrowing of f32 (triton 3.9's _convert_float) rounds half
#            up and drops the carry into the exponent for fp8, and truncates
#            for bf16, unlike the GPU's cvt.rn.satfinite.e4m3x2.f32 and
#            cvt.rn.bf16.f32; for those two conversions it is replaced here
#            by torch's (nearest even, the fp8 one clamped to +-448 first).
#   torch    the kernel's arithmetic written in torch 2.15 (the rule the
#            kernel's source states; checked to be there, line by line):
#            amax * (1/448), max with 1e-4, exp2(ceil(log2)), x / scale
#            clamped to +-448 and converted to float8_e4m3fn, k_pe to
#            bfloat16; on f32, bf16 and f16 latent caches with adversarial
#            tiles (zeros, e4m3 subnormals, amax = 448 2^k (1 + j ulp),
#            huge values, midpoints between e4m3 values).
#   read     kvattn mla --kv-dtype fp8_ds_mla, dense and sparse, from both
#            cache shapes, against float64 attention over the rows torch
#            dequantizes (bytes.view(float8_e4m3fn).float() * scale, the
#            bf16 k_pe widened), within the bound -v prints.
import os
import sys
import tempfile

os.environ["TRITON_INTERPRET"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
sys.path.insert(0, os.path.dirname(__file__))
import vllm_host  # noqa: E402,F401  (the platform: a bare "cpu")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from stage_common import Count, kv, npys, run_mla_sparse_maybe  # noqa: E402

rng = np.random.default_rng(20261128)
c = Count("kvattn-dsmla")
tmp = tempfile.mkdtemp(prefix="kvdsmla.")
F8 = torch.float8_e4m3fn


def save(name, t):
    p = os.path.join(tmp, name)
    if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16:
        np.save(p, t.contiguous().view(torch.int16).numpy().view(np.uint16).view("V2"))
    else:
        np.save(p, t.numpy() if isinstance(t, torch.Tensor) else t)
    return p


def quant(path):
    return npys(kv("kvattn", "quant", "--kv-dtype", "fp8_ds_mla", "-k", path))[0]


def gpu_conversions():
    """Triton's interpreter narrowing f32 to fp8e4nv and bf16 as the GPU
    does (nearest even; fp8 saturating), every other conversion its own."""
    import triton.language as tl
    import triton.runtime.interpreter as ti
    own = ti._convert_float

    def conv(x, src, dst, rounding_mode):
        if src == tl.float32 and dst in (tl.float8e4nv, tl.bfloat16):
            t = torch.from_numpy(np.ascontiguousarray(x, np.float32))
            if dst == tl.float8e4nv:
                return t.clamp(-448.0, 448.0).to(F8).view(torch.uint8).numpy()
            return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return own(x, src, dst, rounding_mode)
    ti._convert_float = conv


def source_rule():
    """The lines of vLLM's kernel that make the rule the torch cases use."""
    import vllm.models.deepseek_v32.common.kernels as k
    src = open(k.__file__).read()
    need = ["tile_amax = tl.max(tl.abs(kv_2d), axis=1, keep_dims=True)",
            "tile_scale = tl.maximum(tile_amax * (1.0 / FP8_MAX), 1e-4)",
            "tile_scale = tl.math.exp2(tl.math.ceil(tl.math.log2(tile_scale)))",
            "kv_c_fp8 = tl.reshape((kv_2d / tile_scale).to(fp8_dtype), (KV_DIM,))",
            "tl.store(rope_dst + dim_off * 2, r1.to(tl.bfloat16))",
            "_FP8_MAX = 224.0 if _USE_FNUZ else 448.0"]
    missing = [n for n in need if n not in src]
    c.check(not missing, "the rule in vLLM's source", "not found: %s" % missing)
    return k


def torch_ds_mla(x):
    """[..., 576] (f32, bf16 or f16) -> u8 [..., 656], the kernel's arithmetic."""
    xf = x.float()
    tiles = xf[..., :512].reshape(xf.shape[:-1] + (4, 128))
    amax = tiles.abs().amax(-1, keepdim=True)
    s = torch.maximum(amax * (1.0 / 448.0), torch.tensor(1e-4, dtype=torch.float32))
    s = torch.exp2(torch.ceil(torch.log2(s)))
    q = (tiles / s).clamp(-448.0, 448.0).to(F8).view(torch.uint8).reshape(xf.shape[:-1] + (512,))
    sb = s.reshape(xf.shape[:-1] + (4,)).contiguous().view(torch.uint8)
    rope = x[..., 512:].to(torch.bfloat16).contiguous().view(torch.uint8)
    return torch.cat([q, sb, rope], -1)


def check_kernel(k, i):
    T, bs = int(rng.integers(1, 9)), int(rng.choice([1, 4, 16, 64]))
    nb = (T + bs - 1) // bs + 1
    kv_c = torch.from_numpy(rng.standard_normal((T, 512))).float()
    mag = np.repeat(np.exp(rng.uniform(-25, 25, 4)), 128)
    mag[128 * int(rng.integers(0, 4)):][:128] *= rng.integers(0, 2)   # a zero tile, at times
    w = torch.from_numpy(mag * rng.uniform(0.5, 1.5, 512)).float()
    k_pe = torch.from_numpy(rng.standard_normal((T, 64)) * np.exp(rng.uniform(-5, 5))).float()
    cos_sin = torch.cat([torch.ones(4, 32), torch.zeros(4, 32)], 1)   # angle 0
    slots = torch.from_numpy(rng.permutation(nb * bs)[:T]).long()
    cache = torch.zeros(nb, bs, 656, dtype=torch.uint8)
    kv_out, kpe_out = torch.empty_like(kv_c), torch.empty_like(k_pe)
    k.fused_norm_rope(torch.zeros(T, dtype=torch.int64), torch.randn(T, 64), torch.ones(64), 1e-6,
                      kv_c, w, 1e-6, k_pe, cos_sin, None, None, None, 1e-6, None,
                      torch.zeros(T, 8, dtype=torch.int32), slot_mapping=slots,
                      mla_kv_cache=cache, mla_kv_cache_dtype="fp8_ds_mla", has_indexer=False,
                      kv_c_out=kv_out, k_pe_out=kpe_out)
    got = quant(save("k%d.npy" % i, torch.cat([kv_out, kpe_out], -1)))
    want = cache.view(-1, 656)[slots].numpy()
    c.check(got.shape == want.shape and (got == want).all(), "vLLM's kernel",
            "case %d: %d of %d bytes differ" % (i, int((got != want).sum()), want.size))


def adversarial(shape, dt):
    x = torch.from_numpy(rng.standard_normal(shape) * np.exp(rng.uniform(-6, 6))).float()
    rows = x.view(-1, 576)
    n = rows.shape[0]
    for r in range(n):
        t = 128 * int(rng.integers(0, 4))
        kind = int(rng.integers(0, 6))
        if kind == 0:
            rows[r, t:t + 128] = 0
        elif kind == 1:
            rows[r, t:t + 128] *= 1e-9
        elif kind == 2:
            j = int(rng.integers(0, 5))
            rows[r, t + 1] = float(np.float32(448 * 2.0 ** int(rng.integers(-14, 40))) *
                                   np.float32(1 + j * 2.0 ** -23))
        elif kind == 3:
            rows[r, t:t + 128] *= 1e25
        elif kind == 4:   # midpoints of e4m3 neighbours once divided by the scale (2^0)
            v = torch.arange(256, dtype=torch.uint8).view(F8).float()
            v = v[torch.isfinite(v) & (v >= 0)].sort().values
            mids = (v[1:] + v[:-1]) / 2
            rows[r, t:t + 128] = mids[torch.from_numpy(rng.integers(0, len(mids), 128))]
            rows[r, t] = 448 * 0.75     # amax 336: s = 0.75, scale 1
    big = torch.finfo(dt).max
    return x.clamp(-big, big).to(dt)


def check_torch(i):
    dt = [torch.float32, torch.bfloat16, torch.float16][i % 3]
    shape = (int(rng.integers(1, 5)), int(rng.integers(1, 9))) + ((1,) if i % 2 else ()) + (576,)
    x = adversarial(shape, dt)
    got = quant(save("t%d.npy" % i, x))
    want = torch_ds_mla(x).numpy()
    c.check(got.shape == want.shape and (got == want).all(), "torch rule",
            "case %d %s %s: %d bytes differ" % (i, dt, shape, int((got != want).sum())
                                                 if got.shape == want.shape else -1))


def check_read(i):
    nb, bs, h = int(rng.integers(2, 6)), int(rng.choice([1, 4, 16])), int(rng.integers(1, 5))
    x = adversarial((nb, bs, 1, 576), torch.float32) if i % 3 == 0 else \
        torch.from_numpy(rng.standard_normal((nb, bs, 1, 576)) * 2).float()
    cache = torch_ds_mla(x)
    if i % 2:
        cache = cache[:, :, 0]
    pc = save("r%d.npy" % i, cache)
    lk = int(rng.integers(1, (nb - 1) * bs + 1))
    lq = int(rng.integers(1, min(lk, 4) + 1))
    bt = rng.permutation(nb - 1)[: (lk + bs - 1) // bs] + 1
    q = torch.from_numpy(rng.standard_normal((lq, h, 576)) / 16).float()
    scale = 0.05
    args = ["mla", "-q", save("rq.npy", q), "--kv-cache", pc, "--kv-dtype", "fp8_ds_mla",
            "--block-table", save("rbt.npy", bt[None].astype(np.int32)), "--seq-lens", lk,
            "--q-lens", lq, "--causal", "--scale", scale, "--kv-lora-rank", 512, "-v"]
    out, bound, sel, err = run_mla_sparse_maybe(args, rng, lq, lk, i % 4 >= 2,
                                                os.path.join(tmp, "rsel.npy"))
    if err is not None:
        c.check(False, "read", err)
        return
    rows8 = cache.reshape(-1, 656)
    sc = rows8[:, 512:528].contiguous().view(torch.float32).repeat_interleave(128, 1)
    deq = torch.cat([rows8[:, :512].contiguous().view(F8).float() * sc,
                     rows8[:, 528:].contiguous().view(torch.bfloat16).float()], 1).double()
    deq = deq.view(nb, bs, 576)
    rows = torch.stack([deq[bt[j // bs], j % bs] for j in range(lk)])
    err = 0.0
    for t in range(lq):
        js = list(range(t + lk - lq + 1)) if sel is None else [j for j in sel[t] if j >= 0]
        L = rows[js]
        p = torch.softmax(q[t].double() @ L.T * scale, -1)
        err = max(err, float((torch.from_numpy(out[t]) - p @ L[:, :512]).abs().max()))
    c.check(err <= bound, "read", "case %d lq %d lk %d%s: error %.3g > bound %.3g" % (
        i, lq, lk, " sparse" if sel is not None else "", err, bound))


def case(group, fn, *a):
    try:
        fn(*a)
    except Exception as e:  # noqa: BLE001 - any error fails the case
        c.check(False, group, "%s: %s" % (type(e).__name__, e))


kern = None
try:
    kern = source_rule()
    gpu_conversions()
except Exception as e:  # noqa: BLE001
    c.check(False, "the rule in vLLM's source", "%s: %s" % (type(e).__name__, e))
for i in range(40 if kern else 0):
    case("vLLM's kernel", check_kernel, kern, i)
for i in range(120):
    case("torch rule", check_torch, i)
for i in range(40):
    case("read", check_read, i)
sys.exit(c.close())
