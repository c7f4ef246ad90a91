"""The Python side of bench/bench-python.sh: one case through the
kvtools Python call and through a subprocess of the program plus np.load,
each the best of REPEAT (tiny cases in batches of 1000 calls; the
subprocess route SUB times, default REPEAT, 0 to leave it out).  Prints
'python SECONDS CPU-SECONDS' (wall, and the process's CPU time of that
call) and 'subprocess SECONDS' and writes both outputs' data
bytes (OUT.py, OUT.sub) for the bench to compare with the C library's.

    python_routes.py CASE REPEAT OUT DIR [SUB]  (DIR holds q.npy k.npy v.npy)
"""
import io
import os
import subprocess
import sys
import time

import numpy as np

import kvtools
from kvtools import kvattn, kvmask, kvslot


def best(fn, reps, batch, cpu=None):
    """The best wall seconds per call of reps batches; cpu (a list) gets
    that batch's process CPU seconds per call (every thread's)."""
    t_best = None
    for _ in range(reps):
        r = None
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(batch):
            r = None        # the last result freed first, as C frees it
            r = fn()
        t = (time.perf_counter() - t0) / batch
        if t_best is None or t < t_best:
            t_best = t
            if cpu is not None:
                cpu[:] = [(time.process_time() - c0) / batch]
    return t_best, r


def main():
    case, reps, out, d = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    sub_reps = int(sys.argv[5]) if len(sys.argv) > 5 else reps
    kvbin = os.environ["KV_BIN"]
    if case == "mask16":
        py = lambda: kvmask.causal(n=16)
        argv = [os.path.join(kvbin, "kvmask"), "causal", "-n", "16"]
        pick = lambda r: r
    elif case in ("mask8192", "mask8192-out"):
        buf = np.empty((8192, 8192), np.float16)
        py = (lambda: kvmask.causal(n=8192, dtype="f16")) if case == "mask8192" \
            else (lambda: kvmask.causal(n=8192, dtype="f16", out=buf))
        argv = [os.path.join(kvbin, "kvmask"), "causal", "-n", "8192", "--dtype", "f16"]
        pick = lambda r: r
    elif case == "slot1":
        bt = np.array([[1, 2]], np.int64)
        np.save(os.path.join(d, "bt.npy"), bt)
        py = lambda: kvslot.map(block_size=16, block_table=bt, scheduled=[16],
                                fields="slot_mapping")
        argv = [os.path.join(kvbin, "kvslot"), "map", "-B", "16", "--block-table",
                os.path.join(d, "bt.npy"), "--scheduled", "16", "--fields",
                "slot_mapping", "-f", "npy"]
        pick = lambda r: r["slot_mapping"] if isinstance(r, dict) else r
    elif case == "attn4096":
        q, k, v = (np.load(os.path.join(d, n + ".npy")) for n in "qkv")
        py = lambda: kvattn.run(q, k, v, causal=True)[0]
        argv = [os.path.join(kvbin, "kvattn"), "run", "--causal"] + \
            sum((["-" + n, os.path.join(d, n + ".npy")] for n in "qkv"), [])
        pick = lambda r: r
    else:
        sys.exit("python_routes: unknown case '%s'" % case)

    def sub():
        p = subprocess.run(argv, stdout=subprocess.PIPE, check=True)
        return np.load(io.BytesIO(p.stdout))

    tiny = case in ("mask16", "slot1")
    cpu = []
    t_py, r_py = best(py, reps, 1000 if tiny else 1, cpu)
    with open(out + ".py", "wb") as f:
        f.write(np.ascontiguousarray(pick(r_py)).tobytes())
    print("python %.9f %.9f" % (t_py, cpu[0]))
    if sub_reps:
        t_sub, r_sub = best(sub, sub_reps, 20 if tiny else 1)
        with open(out + ".sub", "wb") as f:
            f.write(np.ascontiguousarray(pick(r_sub)).tobytes())
        print("subprocess %.9f" % t_sub)


if __name__ == "__main__":
    main()
