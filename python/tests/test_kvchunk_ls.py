"""kvtools.kvchunk.ls and stat against kvchunk ls and stat: dir: stores
filled with random puts, gets, pins and misses list the same entries
(value for value with ls's lines) and the same counters (-f json and
text); refusals with the program's message."""
import json
import os

import numpy as np

from kvtools import kvchunk
from conftest import CASES, same_refusal


def _fill(rng, cli, store, n):
    """n random operations on store: puts (in-process and by the
    program), gets that hit and miss, pins."""
    keys = []
    for i in range(n):
        T = int(rng.integers(1, 6))
        tok = [int(x) for x in rng.integers(0, 1000, T)]
        kv = rng.standard_normal((1, 2, T, 1, 8)).astype(np.float16)
        p0 = int(rng.integers(0, 100))
        pin = rng.random() < 0.2
        key, _ = kvchunk.put(tok, kv, p0, store=store, pin=pin,
                             chunk_context="none", base_policy="free")
        keys.append(key)
        if rng.random() < 0.5:
            kvchunk.get(tok, p0 + int(rng.integers(0, 5)), store=store,
                        shape="1,1,8", dtype="f16", chunk_context="none", base_policy="free")
        if rng.random() < 0.3:            # a miss
            assert kvchunk.get([int(x) + 1000 for x in tok], 0, store=store,
                               shape="1,1,8", dtype="f16",
                               chunk_context="none", base_policy="free") is None
        if rng.random() < 0.2:
            st, _, err = cli("kvchunk", "pin", "--store", store,
                             keys[int(rng.integers(0, len(keys)))])
            assert st == 0, err
    return keys


def test_ls_stat_equal_cli(cli, tmp_path):
    rng = np.random.default_rng(59)
    n_stores = max(CASES // 100, 4)
    n_entries = 0
    for c in range(n_stores):
        store = "dir:" + os.path.join(tmp_path, "store%d" % c)
        _fill(rng, cli, store, int(rng.integers(1, 12)))
        st, out, err = cli("kvchunk", "ls", "--store", store)
        assert st == 0, err
        got = kvchunk.ls(store=store)
        lines = out.decode().splitlines()
        assert len(got) == len(lines)
        for g, line in zip(got, lines):
            f = line.split()
            assert [g["key"], g["tokens"], g["bytes"], g["base_pos"],
                    g["hits"], int(g["pinned"]),
                    "%.0f" % g["last_access"]] == \
                [f[0], int(f[1]), int(f[2]), int(f[3]), int(f[4]),
                 int(f[5]), f[6]], line
        n_entries += len(got)
        st, out, err = cli("kvchunk", "stat", "--store", store, "-f", "json")
        assert st == 0, err
        assert kvchunk.stat(store=store) == json.loads(out)
        assert list(kvchunk.stat(store=store)) == list(json.loads(out))
        st, out, err = cli("kvchunk", "stat", "--store", store)
        assert kvchunk.stat(store=store, format="text") == out.decode()
    assert n_entries > n_stores


def test_ls_stat_refusals(cli, tmp_path):
    missing = "dir:" + os.path.join(tmp_path, "none")
    store = "dir:" + os.path.join(tmp_path, "s")
    kvchunk.put([1, 2], np.zeros((1, 2, 2, 1, 8), np.float16), 0, store=store)
    for sub, fn in (("ls", kvchunk.ls), ("stat", kvchunk.stat)):
        for kw, args in [
            (dict(store=missing), ["--store", missing]),
            (dict(store="nosuch:x"), ["--store", "nosuch:x"]),
            (dict(store=store, timeout=1), ["--store", store, "--timeout", 1]),
            (dict(store=store, max_mem="lots"),
             ["--store", store, "--max-mem", "lots"]),
        ]:
            status, out, err = cli("kvchunk", sub, *args)
            assert status != 0 and out == b"", args
            same_refusal(lambda: fn(**kw), status, err, sub + str(args))
    status, out, err = cli("kvchunk", "stat", "--store", store, "-f", "xml")
    same_refusal(lambda: kvchunk.stat(store=store, format="xml"), status, err,
                 "stat -f xml")


def test_put_get_max_mem_message(cli, tmp_path):
    """put and get refuse a bad --max-mem with the parser's message, once."""
    store = "dir:" + os.path.join(tmp_path, "s")
    kv = np.zeros((1, 2, 2, 1, 8), np.float16)
    pt, pk = os.path.join(tmp_path, "t"), os.path.join(tmp_path, "kv.npy")
    with open(pt, "w") as f:
        f.write("1 2")
    np.save(pk, kv)
    status, out, err = cli("kvchunk", "put", "--store", store, "--tokens", pt,
                           "--kv", pk, "--base-pos", 0, "--max-mem", "lots")
    assert status == 2 and err == "kvchunk put: --max-mem: bad size 'lots'"
    same_refusal(lambda: kvchunk.put([1, 2], kv, 0, store=store,
                                     max_mem="lots"), status, err, "put")
    status, out, err = cli("kvchunk", "get", "--store", store, "--tokens", pt,
                           "--at", 0, "--shape", "1,1,8", "--max-mem", "lots")
    assert status == 2 and err == "kvchunk get: --max-mem: bad size 'lots'"
    same_refusal(lambda: kvchunk.get([1, 2], 0, store=store, shape="1,1,8",
                                     max_mem="lots"), status, err, "get")
