#!/usr/bin/env python3
"""mla_peer.py - the peers and inputs of bench-mla.sh's sparse MLA rows.

  mla_peer.py pick DIR K SEED        write DIR/topk.npy: for each query of the
                                     set in DIR (kvattn gen --dir), K distinct
                                     random positions among those it sees
                                     (causal), in random order, int32 [T, K]
  mla_peer.py sparse DIR THREADS     torch, eager: DeepSeek-V3.2's sparse MLA
                                     as torch code does it on the bf16
                                     tensors: each query's selected latent
                                     rows gathered through the block table,
                                     the scores of the 576-wide queries, a
                                     softmax, the probabilities times the
                                     first 512 (the V part)
  mla_peer.py dense DIR THREADS      the same over every visible position
  mla_peer.py kvtools DIR THREADS CONFIG [OUT]
                                     kvtools.kvattn.mla(..., topk_indices=)
                                     in process on the same arrays (the
                                     package on PYTHONPATH); with OUT (the
                                     program's output, .npy) it first checks
                                     that the call gives the same bytes

The three print "WALL CPU" (seconds, best of 3; imports and file reading
excluded), as bench/kvattn_peer.py does.
"""
import sys
import time

import numpy as np


def best_of(fn, n=3):
    best, cpu = float("inf"), float("inf")
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return best, cpu


def lens(d):
    sl = [int(x) for x in open(d + "/seq_lens").read().split(",")]
    ql = [int(x) for x in open(d + "/q_lens").read().split(",")]
    return sl, ql


def kvtools_sparse(d, threads, config, check):
    """The sparse MLA through the kvtools package, in process: the inputs
    as numpy arrays already in memory, the same call kvattn mla makes."""
    from kvtools import kvattn
    q = np.load(d + "/q_absorbed.npy")
    c = np.load(d + "/kv_cache.npy")
    bt = np.load(d + "/block_table.npy")
    idx = np.load(d + "/topk.npy")
    sl = open(d + "/seq_lens").read().strip()
    ql = open(d + "/q_lens").read().strip()

    def run():
        return kvattn.mla(q, kv_cache=c, block_table=bt, seq_lens=sl, q_lens=ql,
                          causal=True, topk_indices=idx, model_config=config,
                          jobs=threads)[0]
    out = run()
    if check:
        want = np.load(check)
        if want.shape != out.shape or want.tobytes() != out.tobytes():
            sys.exit("mla_peer.py: kvtools.kvattn.mla's output differs from %s" % check)
    print("%.4f %.4f" % best_of(run, 3))


def main():
    cmd, d = sys.argv[1], sys.argv[2]
    sl, ql = lens(d)
    if cmd == "pick":
        k, rng = int(sys.argv[3]), np.random.default_rng(int(sys.argv[4]))
        rows = []
        for lq, lk in zip(ql, sl):
            for i in range(lq):
                vis = i + lk - lq + 1
                sel = rng.choice(vis, size=min(k, vis), replace=False).astype(np.int32)
                row = np.full(k, -1, np.int32)
                row[: len(sel)] = sel
                rows.append(row)
        np.save(d + "/topk.npy", np.stack(rows))
        return
    if cmd == "kvtools":
        kvtools_sparse(d, int(sys.argv[3]), sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
        return
    import torch
    torch.set_num_threads(int(sys.argv[3]))
    a = np.load(d + "/q_absorbed.npy")
    q = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)          # [T, H, 576]
    c = np.load(d + "/kv_cache.npy")
    cache = torch.from_numpy(c.view(np.int16)).view(torch.bfloat16)
    bs = cache.shape[1]
    flat = cache.reshape(-1, cache.shape[-1])                             # [slots, 576]
    bt = torch.from_numpy(np.load(d + "/block_table.npy").astype(np.int64))
    scale = float(open(d + "/scale").read())
    idx = torch.from_numpy(np.load(d + "/topk.npy").astype(np.int64)) if cmd == "sparse" else None
    dl = 512
    pos = []
    for b, (lq, lk) in enumerate(zip(ql, sl)):
        pos += [(b, i + lk - lq) for i in range(lq)]

    def run():
        with torch.no_grad():
            for t, (b, p) in enumerate(pos):
                j = idx[t][idx[t] >= 0] if idx is not None else torch.arange(p + 1)
                rows = flat[bt[b][j // bs] * bs + j % bs]                 # [k, 576]
                s = (q[t] @ rows.T).float() * scale                      # [H, k]
                pr = torch.softmax(s, -1).to(torch.bfloat16)
                pr @ rows[:, :dl]
    print("%.4f %.4f" % best_of(run, 3))


if __name__ == "__main__":
    main()
