"""decode_peer.py - the paged decode of bench/decode_call.c as torch code
does it in eager mode, for bench/bench-decode.sh.

  decode_peer.py DTYPE THREADS [TOKENS]

One request of TOKENS cached tokens (default 32768) in a paged cache
[2, n_blocks, 16, 8, 128] whose blocks are a random permutation, one
decode query of 32 heads (GQA 4:1): gather the request's pages through the
block table, the scores of each kv head's 4 query heads, softmax, the
weights times the values -- the reference paged attention of vLLM's tests.
DTYPE f32 and bf16 compute in that dtype (torch's bf16 matmuls accumulate
in f32); fp8_e4m3 and fp8_e5m2 keep the cache as bytes, view them as
torch.float8_e4m3fn / float8_e5m2, widen the gathered pages to f32 and
multiply by the scales (as vLLM's reference does), then compute in f32.
Prints "WALL CPU": the best wall and CPU seconds of 5 calls, making the
cache excluded.  Not part of kvtools.
"""
import sys
import time

import numpy as np
import torch


def best_of(fn, n=5):
    best, cpu = float("inf"), float("inf")
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return best, cpu


def main():
    dt, th = sys.argv[1], int(sys.argv[2])
    tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 32768
    torch.set_num_threads(th)
    page, hkv, hd, hq = 16, 8, 128, 32
    nblocks = (tokens + page - 1) // page
    rng = np.random.default_rng(5)
    table = torch.from_numpy(rng.permutation(nblocks))
    q = torch.from_numpy(rng.standard_normal((hq, hd), dtype=np.float32))
    scale = 1.0 / hd ** 0.5
    ks, vs = 0.25, 0.5
    shape = (2, nblocks, page, hkv, hd)
    if dt.startswith("fp8"):
        f8 = torch.float8_e4m3fn if dt == "fp8_e4m3" else torch.float8_e5m2
        x = torch.from_numpy(rng.uniform(-448 if dt == "fp8_e4m3" else -4, 448 if dt == "fp8_e4m3" else 4,
                                         shape).astype(np.float32))
        cache = x.to(f8).view(torch.uint8)
        del x
    else:
        cache = torch.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32))
        if dt == "bf16":
            cache = cache.to(torch.bfloat16)
            q = q.to(torch.bfloat16)

    def pages(i, s):
        p = cache[i][table].reshape(-1, hkv, hd)[:tokens]
        if dt.startswith("fp8"):
            p = p.view(f8).float() * s
        return p

    def run():
        with torch.no_grad():
            k, v = pages(0, ks), pages(1, vs)
            qq = q.view(hkv, hq // hkv, hd)
            s = torch.einsum("hgd,thd->hgt", qq, k) * scale
            torch.einsum("hgt,thd->hgd", torch.softmax(s.float(), -1).to(v.dtype), v)
    run()
    print("%.5f %.5f" % best_of(run))


if __name__ == "__main__":
    main()
