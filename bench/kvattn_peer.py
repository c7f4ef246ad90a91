#!/usr/bin/env python3
"""kvattn_peer.py - the peers of bench-kvattn.sh, timed in-process.

  kvattn_peer.py sgemm THREADS             OpenBLAS sgemm GFLOP/s (numpy), wall
                                           and per CPU-second x THREADS
  kvattn_peer.py memcpy NBYTES             memcpy GB/s (numpy copy), wall and
                                           per CPU-second
  kvattn_peer.py prefill DIR THREADS       torch softmax(q k^T s + mask) v, causal
  kvattn_peer.py blockmask DIR S BS RHO    write DIR/bm.npy: random block mask
                                           keeping RHO of the causal blocks
                                           (diagonal always kept); prints density
  kvattn_peer.py paged DIR TOKENS          write a bf16 paged cache, block table,
                                           q for decode (Hq 32, Hkv 8, D 128)
  kvattn_peer.py decode DIR THREADS        torch gather + attention on that cache
  kvattn_peer.py time N CMD...             run CMD (kvattn) N times as a whole
                                           process; best wall and best CPU
                                           (user + sys) time

Peers print "WALL CPU" (seconds, best of runs; CPU summed over threads), the
limits print one rate.  CPU times are printed because the bench machines are
shared: wall-clock ratios there move with the load, CPU-time ratios much less.

Times are the best of several runs, imports and file reading excluded.
"""
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
    elif cmd == "prefill":
        import torch
        d, th = sys.argv[2], int(sys.argv[3])
        torch.set_num_threads(th)
        q = torch.from_numpy(np.load(f"{d}/q.npy"))
        k = torch.from_numpy(np.load(f"{d}/k.npy"))
        v = torch.from_numpy(np.load(f"{d}/v.npy"))
        s = q.shape[2]
        scale = 1.0 / q.shape[-1] ** 0.5
        mask = torch.triu(torch.full((s, s), float("-inf")), 1)

        def run():
            with torch.no_grad():
                torch.softmax(q @ k.transpose(-1, -2) * scale + mask, dim=-1) @ v
        print("%.4f %.4f" % best_of(run, 2))
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
    elif cmd == "time":
        print("%.4f %.4f" % run_times(int(sys.argv[2]), sys.argv[3:]))
    else:
        sys.exit(f"kvattn_peer.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
