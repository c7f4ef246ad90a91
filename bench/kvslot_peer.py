"""kvslot_peer.py - the NumPy peer of `kvslot map` and the bench's helpers.

    gen DIR TOKENS REQS BS SEED   write DIR/bt.npy, DIR/sched.txt,
                                  DIR/computed.txt (a random batch)
    peer DIR BS REPEAT            time vLLM's vectorised slot mapping in
                                  process (best of REPEAT), save
                                  DIR/peer.npy, print the seconds
    run REPEAT CMD...             time a whole process (best of REPEAT);
                                  {i} in an argument becomes the run's
                                  number (a fresh output file each run)
    same A.npy B.npy              exit 0 when the arrays are equal

The peer is the NumPy form of vLLM's model runner (_prepare_inputs and
BlockTable.compute_slot_mapping): request indices by np.repeat, positions
from computed counts plus a batched arange, then
block_table[req, pos // B] * B + pos % B.
"""
import subprocess
import sys
import time

import numpy as np


def gen(d, tokens, reqs, bs, seed):
    rng = np.random.default_rng(seed)
    # scheduled counts: random split of `tokens` over `reqs` requests
    cuts = np.sort(rng.choice(np.arange(1, tokens), reqs - 1, replace=False))
    sched = np.diff(np.concatenate([[0], cuts, [tokens]])).astype(np.int64)
    comp = rng.integers(0, 512, reqs).astype(np.int64)
    cols = int(((comp + sched).max() + bs - 1) // bs)
    pool = rng.permutation(reqs * cols) + 1
    bt = pool.reshape(reqs, cols).astype(np.int32)
    np.save(f"{d}/bt.npy", bt)
    with open(f"{d}/sched.txt", "w") as f:
        f.write(",".join(map(str, sched.tolist())))
    with open(f"{d}/computed.txt", "w") as f:
        f.write(",".join(map(str, comp.tolist())))


def slot_mapping(bt, sched, comp, bs, arange):
    num_reqs = sched.shape[0]
    req_indices = np.repeat(arange[:num_reqs], sched)
    cu = np.cumsum(sched)
    total = int(cu[-1])
    offsets = np.repeat(cu - sched, sched)
    positions = comp[req_indices] + (arange[:total] - offsets)
    bti = req_indices * bt.shape[1] + positions // bs
    block_numbers = bt.ravel()[bti]
    return block_numbers.astype(np.int64) * bs + positions % bs


def peer(d, bs, repeat):
    bt = np.load(f"{d}/bt.npy")
    sched = np.array(open(f"{d}/sched.txt").read().split(","), np.int64)
    comp = np.array(open(f"{d}/computed.txt").read().split(","), np.int64)
    arange = np.arange(int(sched.sum()) + len(sched), dtype=np.int64)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = slot_mapping(bt, sched, comp, bs, arange)
        best = min(best, time.perf_counter() - t0)
    np.save(f"{d}/peer.npy", out)
    print(f"{best:.6f}")


def run(repeat, cmd):
    best = float("inf")
    for i in range(repeat):
        argv = [a.replace("{i}", str(i)) for a in cmd]
        t0 = time.perf_counter()
        subprocess.run(argv, check=True)
        best = min(best, time.perf_counter() - t0)
    print(f"{best:.6f}")


def main():
    a = sys.argv[1:]
    if a[0] == "gen":
        gen(a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]))
    elif a[0] == "peer":
        peer(a[1], int(a[2]), int(a[3]))
    elif a[0] == "run":
        run(int(a[1]), a[2:])
    elif a[0] == "same":
        x, y = np.load(a[1]), np.load(a[2])
        sys.exit(0 if x.shape == y.shape and np.array_equal(x, y) else 1)
    else:
        sys.exit(f"kvslot_peer.py: unknown mode {a[0]!r}")


if __name__ == "__main__":
    main()
