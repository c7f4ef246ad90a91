"""kvtools.kvchunk.ls and stat against kvchunk ls and stat: dir: stores
filled with random puts, gets, pins and misses list the same entries
(value for value with ls's lines) and the same counters (-f json and
text); refusals with the program's message."""
import json
import os
from concurrent.futures import ThreadPoolExecutor

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


def _same_ls_stat(cli, store, text):
    """ls and stat (-f json, and the text report when text) of store
    equal the program's; returns the number of entries."""
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
    st, out, err = cli("kvchunk", "stat", "--store", store, "-f", "json")
    assert st == 0, err
    got = kvchunk.stat(store=store)
    assert got == json.loads(out) and list(got) == list(json.loads(out))
    if text:
        st, out, err = cli("kvchunk", "stat", "--store", store)
        assert kvchunk.stat(store=store, format="text") == out.decode()
    return len(lines)


def _lane(cli, tmp, lane, n):
    """n comparisons of ls and stat, each after one more random operation
    (_fill) on a store; a new store every 50."""
    rng = np.random.default_rng(59 + lane)
    n_entries = 0
    for c in range(n):
        store = "dir:" + os.path.join(tmp, "store%d-%d" % (lane, c // 50))
        _fill(rng, cli, store, 1)
        n_entries += _same_ls_stat(cli, store, c % 4 == 0)
    return n_entries


def test_ls_stat_equal_cli(cli, tmp_path):
    """CASES comparisons in four lanes at once (each its own stores)."""
    n = [CASES // 4 + (i < CASES % 4) for i in range(4)]
    with ThreadPoolExecutor(4) as ex:
        n_entries = sum(ex.map(lambda i: _lane(cli, str(tmp_path), i, n[i]),
                               range(4)))
    assert n_entries > CASES


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
