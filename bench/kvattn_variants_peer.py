#!/usr/bin/env python3
"""kvattn_variants_peer.py - torch eager attention with kvattn run's
variants, the peer of bench-kvattn-variants.sh, timed in-process.

  kvattn_variants_peer.py DIR THREADS VARIANT    VARIANT: plain, sinks,
      softcap or alibi on DIR/q,k,v.npy (and DIR/sinks.npy, DIR/slopes.npy),
      causal, f32, in the eager form of the transformers code that defines
      each: q k^T * scale, then softcap C tanh(s / C) (Gemma 2), + the ALiBi
      bias slope (j - i) (BLOOM's, with the diagonal at 0), + the causal
      mask, softmax, the sink concatenated and dropped (gpt-oss), @ v.
      Prints "WALL CPU" (seconds, best of 3).
"""
import sys
import time

import numpy as np
import torch


def best_of(fn, n=3):
    best, cpu = float("inf"), float("inf")
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return best, cpu


def main():
    d, th, var = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    torch.set_num_threads(th)
    q, k, v = (torch.from_numpy(np.load(f"{d}/{n}.npy")) for n in "qkv")
    B, H, S, D = q.shape
    scale = D ** -0.5
    mask = torch.triu(torch.full((S, S), float("-inf")), 1)
    sinks = torch.from_numpy(np.load(f"{d}/sinks.npy"))
    slopes = torch.from_numpy(np.load(f"{d}/slopes.npy"))
    pos = torch.arange(S)
    bias = slopes[:, None, None] * (pos[None, :] - pos[:, None])[None].float()

    def run():
        with torch.no_grad():
            s = torch.matmul(q, k.transpose(2, 3)) * scale
            if var == "softcap":
                s = torch.tanh(s / 30.0) * 30.0
            if var == "alibi":
                s = s + bias
            s = s + mask
            if var == "sinks":
                c = torch.cat([s, sinks.reshape(1, -1, 1, 1).expand(B, -1, S, -1)], -1)
                c = c - c.max(dim=-1, keepdim=True).values
                p = torch.softmax(c, dim=-1)[..., :-1]
            else:
                p = torch.softmax(s, dim=-1)
            torch.matmul(p, v)
    print("%.4f %.4f" % best_of(run))


if __name__ == "__main__":
    main()
