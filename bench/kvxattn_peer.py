"""kvxattn_peer.py - the peers of bench-kvxattn.sh.

  gen DIR L [L ...]       structured f32 Q/K [1, 2, L, 128] into DIR/q<L>.npy, k<L>.npy
  peer Q K S T C THREADS REPEAT [MASK_OUT]
                          the original XAttention estimator (pure-PyTorch path,
                          xattn_estimate(..., use_triton=False)) on the CPU,
                          loaded from the checkout named by $XATTN_SRC; prints
                          the best in-process time (import excluded) and, with
                          MASK_OUT, writes its mask sliced as Xattention_prefill
                          does (uint8)
  bf16 SRC DST            write the f32 .npy SRC as bf16 (nearest even) to DST
  sgemm M N K REPEAT      single-threaded OpenBLAS sgemm rate (GFLOP/s, per
                          second of thread CPU time), the limit the strided
                          GEMM is measured against
  time REPEAT CMD...      best wall time of a whole process
  cmpmask A B             "equal" or "N of M differ" for two block masks
  vectors DIR             write the extra conformance vectors of
                          tests/vectors/xattn/orig (inputs, the original's
                          masks and sums, cases.txt) into DIR

The original needs CUDA and Triton at import; two inert shims make it run
unmodified on a CPU: stub modules for triton / triton.language /
block_sparse_attn (imported at the top, never called on this path) and
Tensor.to("cuda") as a no-op.  Nothing of the original is copied here.
"""
import ctypes
import ctypes.util
import os
import subprocess
import sys
import time
import types

import numpy as np


def gen(outdir, lengths):
    rng = np.random.default_rng(1)
    for n in lengths:
        n = int(n)
        pos = np.arange(n)[:, None] * np.arange(1, 129)[None, :] / (n * 0.25)
        band = (1.5 * np.cos(pos)).astype(np.float32)
        for name in "qk":
            x = rng.standard_normal((1, 2, n, 128)).astype(np.float32)
            x += band[None, None]
            hot = rng.integers(0, n, size=max(4, n // 512))
            x[:, :, hot, :] += 1.0
            np.save(os.path.join(outdir, "%s%d.npy" % (name, n)), x)


class _Anything(types.ModuleType):
    """A module whose every attribute is a harmless callable/decorator."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _anything


def _anything(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return _anything


def load_original():
    src = os.environ.get("XATTN_SRC")
    if not src:
        sys.exit("XATTN_SRC not set")
    triton = _Anything("triton")
    tl = _Anything("triton.language")
    triton.language = tl
    bsa = _Anything("block_sparse_attn")
    sys.modules.setdefault("triton", triton)
    sys.modules.setdefault("triton.language", tl)
    sys.modules.setdefault("block_sparse_attn", bsa)
    import torch

    orig_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        dev = args[0] if args else kwargs.get("device")
        if isinstance(dev, str) and dev.startswith("cuda"):
            return self
        if isinstance(dev, torch.device) and dev.type == "cuda":
            return self
        return orig_to(self, *args, **kwargs)

    torch.Tensor.to = to
    sys.path.insert(0, src)
    from xattn.src.Xattention import xattn_estimate

    return torch, xattn_estimate


def load_any(torch, path):
    """An .npy file as a tensor; bf16 files ('<V2') as torch.bfloat16."""
    a = np.load(path)
    if a.dtype == np.dtype("V2"):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def to_bf16(src, dst):
    """Write the f32 .npy src as bf16 (.npy descr '<V2'), nearest even."""
    a = np.load(src).astype(np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    shape = "(" + "".join("%d, " % d for d in a.shape)[:-2] + ")"
    hdr = "{'descr': '<V2', 'fortran_order': False, 'shape': %s, }" % shape
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(dst, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode())
        f.write(r.tobytes())


def peer(qp, kp, stride, thr, chunk, threads, repeat, mask_out=None):
    torch, xattn_estimate = load_original()
    torch.set_num_threads(int(threads))
    q = load_any(torch, qp)
    k = load_any(torch, kp)
    best = None
    masks = None
    for _ in range(int(repeat)):
        t0 = time.perf_counter()
        with torch.no_grad():
            _, masks = xattn_estimate(q, k, block_size=128, stride=int(stride),
                                      norm=1, softmax=True,
                                      threshold=float(thr),
                                      chunk_size=int(chunk),
                                      select_mode="inverse", use_triton=False,
                                      causal=True, kdb=1)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    if mask_out:
        nq = (q.shape[2] + 127) // 128
        nk = (k.shape[2] + 127) // 128
        np.save(mask_out, masks[:, :, :nq, :nk].numpy().astype(np.uint8))
    print("%.6f" % best)


def sgemm(m, n, k, repeat):
    name = ctypes.util.find_library("openblas") or "libopenblas.so.0"
    lib = ctypes.CDLL(name)
    lib.openblas_set_num_threads(1)
    m, n, k = int(m), int(n), int(k)
    a = np.random.default_rng(0).standard_normal((m, k)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, k)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    fp = ctypes.POINTER(ctypes.c_float)
    best = None
    for _ in range(int(repeat)):
        # thread CPU time, as kvxattn -v reports its GEMM time: a shared
        # machine then slows neither side's rate
        t0 = time.thread_time()
        # cblas_sgemm(RowMajor=101, NoTrans=111, Trans=112, ...)
        lib.cblas_sgemm(101, 111, 112, m, n, k, ctypes.c_float(1.0),
                        a.ctypes.data_as(fp), k, b.ctypes.data_as(fp), k,
                        ctypes.c_float(0.0), c.ctypes.data_as(fp), n)
        dt = time.thread_time() - t0
        best = dt if best is None else min(best, dt)
    print("%.3f" % (2.0 * m * n * k / best * 1e-9))


def timecmd(repeat, cmd):
    best = None
    for _ in range(int(repeat)):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    print("%.6f" % best)


def cmpmask(a, b):
    x = np.load(a).astype(bool)
    y = np.load(b).astype(bool)
    if x.shape != y.shape:
        print("shapes differ %s %s" % (x.shape, y.shape))
    elif (x == y).all():
        print("equal")
    else:
        print("%d of %d differ" % ((x != y).sum(), x.size))


# name, inputs, chunk size, stride, thresholds (one, or one per head),
# causal, keep_sink, keep_recent: each exercises one rule or artifact.
VECTOR_CASES = [
    ("o01", "a", 16384, 4, [0.8], True, False, False),     # stride 4
    ("o02", "a", 16384, 16, [0.95], True, False, False),   # stride 16
    ("o03", "d", 16384, 8, [0.9], True, False, False),     # odd lengths
    ("o04", "d", 2048, 8, [0.7], True, True, True),        # keep_sink/recent
    ("o05", "a", 256, 8, [0.9], True, False, False),       # -0 slice, 4 chunks
    ("o06", "b", 256, 8, [0.9], True, False, False),       # -0 slice, chunked
    ("o07", "b", 16384, 8, [0.9], True, False, False),     # misplaced query
    ("o08", "c", 384, 8, [0.9], True, False, False),       # odd chunked step
    ("o09", "a", 16384, 8, [0.9], False, False, False),    # zero keys, non-causal
    ("o10", "a", 1024, 8, [0.6], False, False, True),      # non-causal, recent
    ("o11", "e", 1024, 16, [0.5, 0.55], True, True, False),  # per head, sink
    ("o12", "a", 16384, 8, [0.85, 0.9], True, False, False),  # per head
]


def vectors(outdir):
    torch, xattn_estimate = load_original()
    rng = np.random.default_rng(2025)

    def peaky(h, n, d):
        x = rng.standard_normal((1, h, n, d)).astype(np.float32)
        pos = np.arange(n)[:, None] * np.arange(1, d + 1)[None, :] / (n * 0.3)
        x += (1.6 * np.cos(pos)).astype(np.float32)[None, None]
        x[:, :, rng.integers(0, n, size=max(3, n // 200)), :] += 1.5
        return x

    q1024, k1024 = peaky(2, 1024, 16), peaky(2, 1024, 16)
    q1001, k1001 = peaky(2, 1001, 16), peaky(2, 1001, 16)
    k969, k2048 = peaky(2, 969, 16), peaky(2, 2048, 16)
    inputs = {
        "a": (q1024, k1024),
        "b": (q1024[:, :, 768:].copy(), k1024),
        "c": (peaky(2, 201, 16), k969),
        "d": (q1001, k1001),
        "e": (peaky(2, 640, 16), k2048),
    }
    for key, (q, k) in inputs.items():
        np.save(os.path.join(outdir, "in_%s_q.npy" % key), q)
        np.save(os.path.join(outdir, "in_%s_k.npy" % key), k)
    lines = []
    for name, key, chunk, stride, thr, causal, sink, recent in VECTOR_CASES:
        q, k = inputs[key]
        th = thr[0] if len(thr) == 1 else torch.tensor(thr, dtype=torch.float32)
        with torch.no_grad():
            sums, masks = xattn_estimate(
                torch.from_numpy(q), torch.from_numpy(k), block_size=128,
                stride=stride, norm=1, softmax=True, threshold=th,
                chunk_size=chunk, select_mode="inverse", use_triton=False,
                causal=causal, kdb=1, keep_sink=sink, keep_recent=recent)
        nq = (q.shape[2] + 127) // 128
        nk = (k.shape[2] + 127) // 128
        np.save(os.path.join(outdir, name + "_mask.npy"),
                masks[:, :, :nq, :nk].numpy().astype(np.uint8))
        np.save(os.path.join(outdir, name + "_sums.npy"),
                sums[:, :, :nq, :nk].float().numpy())
        opts = ["--compat-chunk-size", str(chunk), "--stride", str(stride)]
        if len(thr) == 1:
            opts += ["--threshold", repr(thr[0])]
        else:
            # the original reads a float32 tensor: pass its exact values
            opts += ["--thresholds", name + "_thr.txt"]
            with open(os.path.join(outdir, name + "_thr.txt"), "w") as f:
                f.write(" ".join(repr(float(np.float32(t))) for t in thr) + "\n")
        if not causal:
            opts.append("--no-causal")
        if sink:
            opts.append("--keep-sink")
        if recent:
            opts.append("--keep-recent")
        lines.append("%s in_%s_q.npy in_%s_k.npy %s" % (name, key, key,
                                                        " ".join(opts)))
    with open(os.path.join(outdir, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    if argv[1] == "gen":
        gen(argv[2], argv[3:])
    elif argv[1] == "peer":
        peer(*argv[2:])
    elif argv[1] == "bf16":
        to_bf16(argv[2], argv[3])
    elif argv[1] == "sgemm":
        sgemm(*argv[2:])
    elif argv[1] == "vectors":
        vectors(argv[2])
    elif argv[1] == "cmpmask":
        cmpmask(argv[2], argv[3])
    elif argv[1] == "time":
        timecmd(argv[2], argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
