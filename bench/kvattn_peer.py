#!/usr/bin/env python3
"""kvattn_peer.py - the peers of bench-kvattn.sh, timed in-process.

  kvattn_peer.py sgemm THREADS             OpenBLAS sgemm GFLOP/s (numpy), wall
                                           and per CPU-second x THREADS
  kvattn_peer.py memcpy NBYTES             memcpy GB/s (numpy copy), wall and
                                           per CPU-second
  kvattn_peer.py prefill DIR THREADS [DT]  torch causal attention on DIR/q,k,v.npy
                                           in dtype DT (f32, default, or bf16):
                                           scaled_dot_product_attention where
                                           torch has it (2.x), else
                                           softmax(q k^T s + mask) v; fewer kv
                                           heads than query heads: enable_gqa
  kvattn_peer.py varlen DIR THREADS LENS  the same on a packed thd batch of causal
                                           requests (LENS a,b,..): one SDPA call
                                           per request
  kvattn_peer.py flex DIR THREADS BS       torch 2.x FlexAttention: create_block_mask
                                           from DIR/bm.npy (causal inside kept
                                           blocks) and flex_attention, compiled
                                           for the CPU when torch.compile works
                                           (else eager); prints "WALL CPU MODE"
  kvattn_peer.py version                   "torch X numpy Y"
  kvattn_peer.py blockmask DIR S BS RHO    write DIR/bm.npy: random block mask
                                           keeping RHO of the causal blocks
                                           (diagonal always kept); prints density
  kvattn_peer.py paged DIR TOKENS          write a bf16 paged cache, block table,
                                           q for decode (Hq 32, Hkv 8, D 128)
  kvattn_peer.py decode DIR THREADS        torch gather + attention on that cache
  kvattn_peer.py time N CMD...             run CMD (kvattn) N times as a whole
                                           process; best wall and best CPU
                                           (user + sys) time
  kvattn_peer.py capability                torch's ATen CPU capability (AVX2,
                                           AVX512, ...: ATEN_CPU_CAPABILITY caps it)
  kvattn_peer.py avx512 CMD...             run CMD once; "none" when no thread of
                                           it was seen holding AVX-512 state
                                           (zmm, k registers) after its start,
                                           else "used" (Linux's
                                           /proc/PID/task/*/arch_status)

Peers print "WALL CPU" (seconds, best of runs; CPU summed over threads), the
limits print one rate.  CPU times are printed because the bench machines are
shared: wall-clock ratios there move with the load, CPU-time ratios much less.

Times are the best of several runs, imports and file reading excluded.
"""
import os
import sys
import time

import numpy as np


def best_of(fn, n=3):
    """Best wall and best CPU time of n calls."""
    best, cpu = float("inf"), float("inf")
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return best, cpu


def run_times(n, cmd):
    """Best wall and best CPU (children's user + sys) time of n runs.

    The -o file is removed before each run, as a fresh result would be: a
    rename(2) over an existing file makes ext4 flush the new one first, a
    cost the in-process peer never pays."""
    import os
    import resource
    import subprocess
    best, cpu = float("inf"), float("inf")
    outs = [cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "-o"]
    for _ in range(n):
        for o in outs:
            if os.path.isfile(o):
                os.remove(o)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = min(cpu, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return best, cpu


def avx512_state(cmd):
    """Run cmd; whether any of its threads held AVX-512 state after its start.

    Linux stamps a task when a context switch finds its AVX-512 registers
    (the upper halves of zmm0-15, zmm16-31, k0-7) in use, and
    /proc/PID/task/TID/arch_status gives the milliseconds since
    (AVX512_elapsed_ms, -1 never).  A child inherits its parent's stamp, so
    only a stamp younger than the child (10 ms of slack: the stamp counts
    in jiffies) is its own.  Sampled every millisecond: code that leaves
    the registers clean before every switch (vzeroupper) goes unseen, the
    kernels of a run of seconds do not."""
    import glob
    import subprocess
    if not os.path.exists("/proc/self/arch_status"):
        return "unknown"
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    samples = used = 0
    while p.poll() is None:
        age = (time.monotonic() - t0) * 1000
        for f in glob.glob(f"/proc/{p.pid}/task/*/arch_status"):
            try:
                ms = int(open(f).read().split()[1])
            except (OSError, IndexError, ValueError):
                continue
            samples += 1
            used += 0 <= ms < age - 10
        time.sleep(0.001)
    if p.returncode != 0:
        sys.exit(f"kvattn_peer.py: {cmd[0]} exited {p.returncode}")
    return "unknown" if samples == 0 else f"used ({used} of {samples})" if used else "none"


def save_bf16(path, a32):
    """Write f32 array a32 as bf16 (.npy descr '<V2'), rounding to nearest even."""
    u = a32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    shape = "(" + "".join(f"{d}, " for d in a32.shape)[:-2] + ("," if a32.ndim == 1 else "") + ")"
    hdr = "{'descr': '<V2', 'fortran_order': False, 'shape': %s, }" % shape
    hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr.encode())
        f.write(r.tobytes())


def load_bf16_as_f32(path):
    a = np.load(path)
    return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def load_any(path, torch):
    """An .npy file as a torch tensor: bf16 ('<V2') as torch.bfloat16."""
    a = np.load(path)
    if a.dtype == np.dtype("V2"):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def inductor_cxx(d, torch):
    """Make torch.compile's C++ kernels link against this torch.

    Inductor links its kernels with -L<python's libdir> before torch's own
    library directory; where Debian's python3-torch is installed (the other
    peer), -ltorch then finds Debian's older libtorch and the kernels fail
    to load.  A compiler wrapper that drops the system -L paths fixes it."""
    import os
    import torch._inductor.config as ic
    w = os.path.join(d, "cxx")
    with open(w, "w") as f:
        f.write('#!/bin/sh\nfor a; do shift; case $a in -L/usr/lib/*) continue;; esac; '
                'set -- "$@" "$a"; done\nexec g++ "$@"\n')
    os.chmod(w, 0o755)
    ic.cpp.cxx = (None, w)


def main():
    cmd = sys.argv[1]
    if cmd == "sgemm":
        # numpy's matmul is the machine's OpenBLAS sgemm, on all cores
        # (bench-kvattn.sh runs kvattn with -j nproc as well)
        n = 2048
        a = np.random.default_rng(0).random((n, n), dtype=np.float32)
        b = np.random.default_rng(1).random((n, n), dtype=np.float32)
        th = int(sys.argv[2])
        t, c = best_of(lambda: a @ b, 5)
        # wall rate, and the rate per CPU-second times the threads
        print(f"{2 * n ** 3 / t / 1e9:.1f} {2 * n ** 3 / (c / th) / 1e9:.1f}")
    elif cmd == "memcpy":
        n = int(sys.argv[2])
        src = np.ones(n, np.uint8)
        dst = np.empty_like(src)
        t, c = best_of(lambda: np.copyto(dst, src), 5)
        print(f"{n / t / 1e9:.2f} {n / c / 1e9:.2f}")
    elif cmd == "version":
        import torch
        print(f"torch {torch.__version__.split('+')[0]} numpy {np.__version__}")
    elif cmd == "prefill":
        import torch
        d, th = sys.argv[2], int(sys.argv[3])
        dt = torch.bfloat16 if len(sys.argv) > 4 and sys.argv[4] == "bf16" else torch.float32
        torch.set_num_threads(th)
        q, k, v = (load_any(f"{d}/{n}.npy", torch).to(dt) for n in "qkv")
        s = q.shape[2]
        scale = 1.0 / q.shape[-1] ** 0.5
        sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
        mask = torch.triu(torch.full((s, s), float("-inf")), 1).to(dt)

        gqa = {}
        if k.shape[1] != q.shape[1]:
            # fewer kv heads: SDPA's own GQA (2.5 and later), else repeated
            if sdpa is not None and "enable_gqa" in sdpa.__doc__:
                gqa = {"enable_gqa": True}
            else:
                k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], 1) for t in (k, v))

        def run():
            with torch.no_grad():
                if sdpa is not None:
                    sdpa(q, k, v, is_causal=True, **gqa)
                else:
                    torch.softmax(q @ k.transpose(-1, -2) * scale + mask, dim=-1) @ v
        print("%.4f %.4f" % best_of(run, 2))
    elif cmd == "varlen":
        # a packed batch (thd q, k, v of DIR) of causal requests of the
        # given lengths: SDPA has no varlen form on the CPU, so one call
        # per request on its slice, as a user of torch would write it
        import torch
        d, th = sys.argv[2], int(sys.argv[3])
        lens = [int(x) for x in sys.argv[4].split(",")]
        torch.set_num_threads(th)
        q, k, v = (load_any(f"{d}/{n}.npy", torch) for n in "qkv")
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def run():
            with torch.no_grad():
                t0 = 0
                for n in lens:
                    qs, ks, vs = (x[t0:t0 + n].transpose(0, 1).unsqueeze(0) for x in (q, k, v))
                    sdpa(qs, ks, vs, is_causal=True)
                    t0 += n
        print("%.4f %.4f" % best_of(run, 2))
    elif cmd == "flex":
        import os
        d, th, bs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", f"{d}/inductor")
        import torch
        torch.set_num_threads(th)
        inductor_cxx(d, torch)
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        q, k, v = (load_any(f"{d}/{n}.npy", torch) for n in "qkv")
        keep = torch.from_numpy(np.load(f"{d}/bm.npy"))
        B, H, S = q.shape[0], q.shape[1], q.shape[2]

        def mask_mod(b, h, qi, kv):
            return keep[b, h, qi // bs, kv // bs] & (qi >= kv)
        mode = "compiled"
        try:
            cbm = torch.compile(create_block_mask)
            fa = torch.compile(flex_attention)
            bm = cbm(mask_mod, B, H, S, S, device="cpu", BLOCK_SIZE=bs)
            with torch.no_grad():
                fa(q, k, v, block_mask=bm)
        except Exception as e:          # no C++ toolchain for inductor, say
            print(f"flex: torch.compile failed ({type(e).__name__}); eager", file=sys.stderr)
            mode = "eager"
            cbm, fa = create_block_mask, flex_attention
            bm = cbm(mask_mod, B, H, S, S, device="cpu", BLOCK_SIZE=bs)

        def run():
            with torch.no_grad():
                m = cbm(mask_mod, B, H, S, S, device="cpu", BLOCK_SIZE=bs)
                fa(q, k, v, block_mask=m)
        print("%.4f %.4f %s" % (*best_of(run, 2), mode))
    elif cmd == "blockmask":
        d, s, bs, rho = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
        nb = -(-s // bs)
        rng = np.random.default_rng(7)
        causal = np.tril(np.ones((nb, nb), bool))
        keep = (rng.random((1, 8, nb, nb)) < rho) & causal
        keep |= np.eye(nb, dtype=bool)
        np.save(f"{d}/bm.npy", keep)
        print(f"{keep.sum() / (causal.sum() * 8):.3f}")
    elif cmd == "paged":
        d, tokens = sys.argv[2], int(sys.argv[3])
        page, hkv, hd = 16, 8, 128
        nblocks = tokens // page
        rng = np.random.default_rng(3)
        cache = rng.standard_normal((2, nblocks, page, hkv, hd), dtype=np.float32)
        save_bf16(f"{d}/cache.npy", cache)
        del cache
        table = rng.permutation(nblocks)
        with open(f"{d}/table.txt", "w") as f:
            f.write(" ".join(map(str, table)) + "\n")
        save_bf16(f"{d}/dq.npy", rng.standard_normal((1, 32, hd), dtype=np.float32))
    elif cmd == "decode":
        import torch
        d, th = sys.argv[2], int(sys.argv[3])
        torch.set_num_threads(th)
        cache = torch.from_numpy(np.load(f"{d}/cache.npy").view(np.int16)).view(torch.bfloat16)
        table = torch.tensor([int(x) for x in open(f"{d}/table.txt").read().split()])
        q = torch.from_numpy(load_bf16_as_f32(f"{d}/dq.npy"))[0]      # [32, 128]
        scale = 1.0 / 128 ** 0.5

        def run():
            with torch.no_grad():
                k = cache[0][table].reshape(-1, 8, 128).float()      # [T, 8, D]
                v = cache[1][table].reshape(-1, 8, 128).float()
                qq = q.view(8, 4, 128)
                s = torch.einsum("hgd,thd->hgt", qq, k) * scale
                torch.einsum("hgt,thd->hgd", torch.softmax(s, -1), v)
        print("%.4f %.4f" % best_of(run, 3))
    elif cmd == "mla":
        # absorbed MLA decode as torch code does it: gather the latent
        # pages of the block table, the scores of the 576-wide queries,
        # softmax, the probabilities times the first 512 (the V part), all
        # on bf16 tensors (the matmuls accumulate in f32)
        import torch
        d, th, scale = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        torch.set_num_threads(th)
        q = load_any(f"{d}/q_absorbed.npy", torch)[0]                 # [H, 576]
        cache = load_any(f"{d}/kv_cache.npy", torch)                  # [nb, 64, 1, 576]
        table = torch.from_numpy(np.load(f"{d}/block_table.npy")[0].astype(np.int64))
        t = int(open(f"{d}/seq_lens").read().split(",")[0])
        dl = 512

        def run():
            with torch.no_grad():
                kv = cache[table].reshape(-1, cache.shape[-1])[:t]    # [T, 576]
                s = (q @ kv.T).float() * scale
                p = torch.softmax(s, -1).to(torch.bfloat16)
                p @ kv[:, :dl]
        print("%.4f %.4f" % best_of(run, 5))
    elif cmd == "time":
        print("%.4f %.4f" % run_times(int(sys.argv[2]), sys.argv[3:]))
    elif cmd == "capability":
        import torch
        print(torch.backends.cpu.get_cpu_capability())
    elif cmd == "avx512":
        print(avx512_state(sys.argv[2:]))
    else:
        sys.exit(f"kvattn_peer.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
