#!/usr/bin/env python3
"""kvmask_peer.py - the peers of bench-kvmask.sh, timed in-process.

  kvmask_peer.py memset NBYTES       memset of NBYTES (ctypes, buffer touched)
  kvmask_peer.py devnull NBYTES      writing NBYTES to /dev/null in 4 MiB writes
  kvmask_peer.py filewrite NBYTES F  writing NBYTES to the new file F in 4 MiB writes
  kvmask_peer.py attn N              vllm-ascend _generate_attn_mask(N, fp16)
  kvmask_peer.py splitfuse           torch.triu(torch.ones(2048, 2048), 1).to(int8)
  kvmask_peer.py packbits N          causal bool N x N (torch.tril) then
                                     np.packbits(bitorder="little"), FlashInfer style
  kvmask_peer.py blockmask N BS      FlexAttention create_block_mask's dense
                                     construction: tile sums, full/partial,
                                     stable descending argsort, transposes

Prints the best time of several runs in seconds; imports excluded.
"""
import ctypes
import os
import sys
import time

import numpy as np


def best_of(fn, n=3):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    cmd = sys.argv[1]
    if cmd == "memset":
        n = int(sys.argv[2])
        buf = np.ones(n, np.uint8)
        print("%.4f" % best_of(lambda: ctypes.memset(buf.ctypes.data, 0, n), 5))
        return
    if cmd == "filewrite":
        n, path = int(sys.argv[2]), sys.argv[3]
        chunk = np.ones(4 << 20, np.uint8)
        mv = memoryview(chunk)

        def run():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            left = n
            while left > 0:
                left -= os.write(fd, mv[:min(left, len(mv))])
            os.close(fd)
        print("%.4f" % best_of(run, 5))
        os.unlink(path)
        return
    if cmd == "devnull":
        n = int(sys.argv[2])
        chunk = np.ones(4 << 20, np.uint8)
        mv = memoryview(chunk)
        fd = os.open("/dev/null", os.O_WRONLY)

        def run():
            left = n
            while left > 0:
                left -= os.write(fd, mv[:min(left, len(mv))])
        print("%.4f" % best_of(run, 5))
        return

    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    if cmd == "attn":
        n = int(sys.argv[2])

        def gen():
            upper = ~torch.ones((n, n), dtype=torch.bool).tril_()
            return torch.zeros((n, n), dtype=torch.float16).masked_fill_(
                upper, float("-inf"))
        print("%.4f" % best_of(gen))
    elif cmd == "splitfuse":
        print("%.4f" % best_of(lambda: torch.triu(
            torch.ones(2048, 2048), diagonal=1).to(torch.int8), 5))
    elif cmd == "packbits":
        n = int(sys.argv[2])

        def pack():
            m = torch.tril(torch.ones(n, n, dtype=torch.bool))
            return np.packbits(m.numpy().ravel(), bitorder="little")
        print("%.4f" % best_of(pack))
    elif cmd == "blockmask":
        n, bs = int(sys.argv[2]), int(sys.argv[3])

        def ordered(d):
            d = d.to(torch.int32)
            return (d.sum(dim=-1).to(torch.int32),
                    torch.argsort(d, dim=-1, descending=True,
                                  stable=True).to(torch.int32))

        def build():
            i = torch.arange(n).unsqueeze(1)
            j = torch.arange(n).unsqueeze(0)
            m = (i >= j).view(1, 1, n, n)
            t = m.view(1, 1, n // bs, bs, n // bs, bs).permute(0, 1, 2, 4, 3, 5)
            s = t.sum(dim=[-2, -1])
            full = s == bs * bs
            partial = (s > 0) & (s < bs * bs)
            out = [ordered(partial), ordered(full)]
            out += [ordered(partial.transpose(-2, -1)),
                    ordered(full.transpose(-2, -1))]
            return out
        print("%.4f" % best_of(build))
    else:
        sys.exit("kvmask_peer.py: unknown case " + cmd)


if __name__ == "__main__":
    main()
