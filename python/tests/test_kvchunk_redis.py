"""kvtools.kvchunk's store functions on a redis:// store, against the
program on an identical store: a private redis-server on 127.0.0.1 (a
free port, nothing saved to disk, stopped after the module), one Redis
database for the package and one for the program.  put's key and state,
get's KV (and its misses), ls's entries and stat's counters equal; fsck
(with and without --repair, on damaged values) and rm on two copies of
one store give the same reports and leave the same entries; pin, unpin,
evict and put --pin are refused with the program's messages, as is a
server that is not there.  Skipped, saying why, without redis-server."""
import json
import os
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kvtools
from kvtools import kvchunk
from conftest import CASES, same_refusal

NS = dict(chunk_context="none", base_policy="free")
NS_ARGS = ["--chunk-context", "none", "--base-policy", "free"]
GEOM = dict(shape="1,1,8", dtype="f16")
GEOM_ARGS = ["--shape", "1,1,8", "--dtype", "f16"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(f):
    """One RESP reply."""
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read(f) for _ in range(n)]
    raise RuntimeError("not a RESP reply: %r" % line)


def redis(port, db, *cmd):
    """Run one command on database db of the server; its reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        f = s.makefile("rb")

        def send(*args):
            b = [a if isinstance(a, bytes) else str(a).encode() for a in args]
            s.sendall(b"*%d\r\n" % len(b) +
                      b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in b))
            return _read(f)
        send("SELECT", db)
        return send(*cmd)


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed: the redis:// store "
                    "tests need one (Debian's redis-server)")
    d = tmp_path_factory.mktemp("redis")
    for _ in range(10):
        p = _free_port()
        srv = subprocess.Popen(
            [exe, "--port", str(p), "--bind", "127.0.0.1", "--dir", str(d),
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--logfile", str(d / "log"), "--maxmemory", "256mb",
             "--maxmemory-policy", "allkeys-lru"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        up = False
        for _ in range(50):
            if srv.poll() is not None:
                break                   # the port was taken: another
            try:
                up = redis(p, 0, "PING") == "PONG"
                break
            except OSError:
                time.sleep(0.1)
        if up:
            break
        srv.kill()
        srv.wait()
    else:
        pytest.skip("redis-server did not start on a free port")
    yield p
    srv.terminate()
    srv.wait()


def url(port, db):
    return "redis://127.0.0.1:%d/%d" % (port, db)


def _chunk(rng, d, i):
    """A random chunk: tokens (a list and a file), KV (an array and a
    file), base position."""
    T = int(rng.integers(1, 7))
    tok = [int(x) for x in rng.integers(0, 50000, T)]
    kv = (rng.standard_normal((1, 2, T, 1, 8)) * 3).astype(np.float16)
    tf, kf = os.path.join(d, "t%d.txt" % i), os.path.join(d, "kv%d.npy" % i)
    with open(tf, "w") as f:
        f.write(" ".join(map(str, tok)) + "\n")
    np.save(kf, kv)
    return tok, tf, kv, kf, int(rng.integers(0, 1000))


def _cli_put(cli, store, c, ttl=None):
    tok, tf, kv, kf, p0 = c
    args = ["put", "--store", store, "--tokens", tf, "--kv", kf,
            "--base-pos", str(p0)] + NS_ARGS
    if ttl:
        args += ["--ttl", str(ttl)]
    return cli("kvchunk", *args)


def _cli_get(cli, store, c, at, out):
    tf = c[1]
    return cli("kvchunk", "get", "--store", store, "--tokens", tf, "--at",
               str(at), "-o", out, *(GEOM_ARGS + NS_ARGS))


def _same_get(cli, py_store, cli_store, c, at, out):
    """get in-process from py_store and by the program from cli_store."""
    got = kvchunk.get(c[0], at, store=py_store, **GEOM, **NS)
    st, o, err = _cli_get(cli, cli_store, c, at, out)
    if st == 3:
        assert got is None, err
        return 0
    assert st == 0, err
    ref = np.load(out)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    assert got.tobytes() == ref.tobytes()
    return 1


def _ls_lines(cli, store):
    st, out, err = cli("kvchunk", "ls", "--store", store)
    assert st == 0, err
    return out.decode().splitlines()


def test_redis_put_get_ls_stat(cli, port, tmp_path):
    """The package on database 1, the program on database 2, the same
    operations in the same order."""
    rng = np.random.default_rng(6379)
    a, b = url(port, 1), url(port, 2)
    for db in (1, 2):
        redis(port, db, "FLUSHDB")
    chunks, keys, hits = [], set(), 0
    for i in range(CASES):
        c = _chunk(rng, str(tmp_path), i)
        chunks.append(c)
        ttl = int(rng.integers(100, 1000)) if rng.random() < 0.2 else None
        for _ in range(2 if rng.random() < 0.2 else 1):     # again: present
            key, state = kvchunk.put(c[0], c[2], c[4], store=a, ttl=ttl, **NS)
            st, out, err = _cli_put(cli, b, c, ttl)
            assert st == 0, err
            assert out.decode() == "%s %s\n" % (key, state)
            keys.add(key)
        for _ in range(int(rng.integers(0, 3))):
            old = chunks[int(rng.integers(0, len(chunks)))]
            at = int(rng.integers(0, 5000))
            hits += _same_get(cli, a, b, old, at, str(tmp_path / "g.npy"))
            if rng.random() < 0.3:      # a miss on both
                miss = ([x + 1 for x in old[0]],
                        str(tmp_path / "m.txt")) + old[2:]
                with open(miss[1], "w") as f:
                    f.write(" ".join(map(str, miss[0])) + "\n")
                _same_get(cli, a, b, miss, at, str(tmp_path / "g.npy"))
    assert hits >= 4
    # each side's chunks read by the other: the same values, the same format
    for c in chunks[:10]:
        assert _same_get(cli, b, a, c, 7, str(tmp_path / "x.npy")) == 1
    lines = _ls_lines(cli, b)
    got = kvchunk.ls(store=a)
    assert sorted(lines) == sorted(
        "%s %d %d %d %d %d %.0f" % (g["key"], g["tokens"], g["bytes"],
                                    g["base_pos"], g["hits"], g["pinned"],
                                    g["last_access"]) for g in got)
    assert sorted(g["key"] for g in got) == sorted(keys)
    st, out, err = cli("kvchunk", "stat", "--store", b, "-f", "json")
    assert st == 0, err
    assert kvchunk.stat(store=a) == json.loads(out)
    st, out, err = cli("kvchunk", "stat", "--store", b)
    assert kvchunk.stat(store=a, format="text") == out.decode()
    # and on one database: the same listing, line for line
    assert ["%s %d %d %d %d %d %.0f" % (g["key"], g["tokens"], g["bytes"],
                                        g["base_pos"], g["hits"], g["pinned"],
                                        g["last_access"])
            for g in kvchunk.ls(store=b)] == lines


def _copy_db(port, src, dst):
    redis(port, dst, "FLUSHDB")
    for k in redis(port, src, "KEYS", "*"):
        redis(port, dst, "RESTORE", k, 0, redis(port, src, "DUMP", k), "REPLACE")


def _damage(rng, port, db):
    """A value's byte flipped or its tail cut, or a foreign value under
    the store's prefix, or nothing."""
    keys = [k for k in redis(port, db, "KEYS", "kvc:1:*") if k != b"kvc:1:stats"]
    r = rng.random()
    if keys and r < 0.4:
        k = keys[int(rng.integers(0, len(keys)))]
        n = redis(port, db, "STRLEN", k)
        redis(port, db, "SETRANGE", k, int(rng.integers(0, n)), b"\xff")
    elif keys and r < 0.6:
        k = keys[int(rng.integers(0, len(keys)))]
        v = redis(port, db, "GET", k)
        redis(port, db, "SET", k, v[:int(rng.integers(0, len(v)))])
    elif r < 0.7:
        redis(port, db, "SET", "kvc:1:%032x" % int(rng.integers(0, 2**62)),
              b"not a blob")


def _report(kw, out):
    text = out.decode()
    if kw.get("format") == "text":
        return text
    lines = [json.loads(x) for x in text.splitlines()]
    r = dict(lines[-1])
    r["problems"] = [x["problem"] for x in lines[:-1]]
    return r


def _entries(store):
    """kvchunk.ls but for last_access (the two databases' operations run
    at other times)."""
    return sorted((x["key"], x["tokens"], x["bytes"], x["base_pos"],
                   x["hits"], x["pinned"]) for x in kvchunk.ls(store=store))


def _fsck_rm_lane(cli, port, tmp, dbs, seed, n):
    """n fsck and rm, in turn, eight on each copy of a filled and damaged
    store (database dbs[0]) into two databases (dbs[1], dbs[2]): the
    program's on one, the function's on the other, the same report or
    refusal and the same entries after each (kvchunk.ls, and the
    program's ls after the eighth).  Returns the (operation, status)
    pairs met."""
    rng = np.random.default_rng(seed)
    src, a, b = url(port, dbs[0]), url(port, dbs[1]), url(port, dbs[2])
    os.makedirs(tmp, exist_ok=True)
    kinds = set()
    for case in range(n):
        if case % 8 == 0:
            if case:
                assert sorted(_ls_lines(cli, a)) == sorted(_ls_lines(cli, b))
            redis(port, dbs[0], "FLUSHDB")
            keys = []
            for i in range(int(rng.integers(1, 10))):
                c = _chunk(rng, tmp, i)
                keys.append(kvchunk.put(c[0], c[2], c[4], store=src, **NS)[0])
            _damage(rng, port, dbs[0])
            _copy_db(port, dbs[0], dbs[1])
            _copy_db(port, dbs[0], dbs[2])
        if case % 2:
            kw, args = {}, []
            if rng.random() < 0.5:
                kw["repair"] = True
                args.append("--repair")
            if rng.random() < 0.5:
                kw["format"] = "text"
            else:
                args += ["-f", "json"]
            fn, args = kvchunk.fsck, ["fsck"] + args
        else:
            ks = [keys[int(rng.integers(0, len(keys)))]
                  for _ in range(int(rng.integers(1, 3)))]
            if rng.random() < 0.3:
                ks.append("%032x" % int(rng.integers(0, 2**62)))
            fn, kw, args = kvchunk.rm, dict(keys=ks), ["rm"] + ks
        st, out, err = cli("kvchunk", args[0], "--store", a, *args[1:])
        what = "kvchunk %s (databases %s, case %d)" % (" ".join(args), dbs, case)
        if st and not (fn is kvchunk.fsck and out):
            assert out == b"", what
            same_refusal(lambda: fn(store=b, **kw), st, err, what)
        elif st:                        # fsck: problems found, not repaired
            with pytest.raises(kvtools.Error) as ei:
                fn(store=b, **kw)
            assert str(ei.value) == err and ei.value.status == st, what
            assert ei.value.report == _report(kw, out), what
        else:
            got = fn(store=b, **kw)
            if fn is kvchunk.fsck:
                assert got == _report(kw, out), what
        kinds.add((args[0], st))
        assert _entries(a) == _entries(b), what
    return kinds


def test_redis_fsck_rm(cli, port, tmp_path):
    """CASES fsck and CASES rm in two lanes at once, each with its own
    three databases (_fsck_rm_lane)."""
    with ThreadPoolExecutor(2) as ex:
        kinds = set().union(*ex.map(
            lambda ln: _fsck_rm_lane(cli, port, os.path.join(str(tmp_path),
                                                             "lane%d" % ln[0]),
                                     ln[1], 6380 + ln[0], CASES),
            [(0, (3, 4, 5)), (1, (8, 10, 11))]))
    assert len(kinds) >= 3, kinds


def test_redis_refusals(cli, port, tmp_path):
    """What a Redis store does not do, and a server that is not there."""
    store = url(port, 6)
    redis(port, 6, "FLUSHDB")
    c = _chunk(np.random.default_rng(1), str(tmp_path), 0)
    key, _ = kvchunk.put(c[0], c[2], c[4], store=store, **NS)
    cases = [(kvchunk.pin, dict(keys=[key]), ["pin", key]),
             (kvchunk.unpin, dict(keys=[key]), ["unpin", key]),
             (kvchunk.evict, dict(max_size="1M"), ["evict", "--max-size", "1M"])]
    for fn, kw, args in cases:
        st, out, err = cli("kvchunk", args[0], "--store", store, *args[1:])
        assert st != 0 and out == b"", args
        same_refusal(lambda: fn(store=store, **kw), st, err, " ".join(args))
    st, out, err = cli("kvchunk", "put", "--store", store, "--tokens", c[1],
                       "--kv", c[3], "--base-pos", str(c[4]), "--pin", *NS_ARGS)
    assert st == 2, err
    same_refusal(lambda: kvchunk.put(c[0], c[2], c[4], store=store, pin=True,
                                     **NS), st, err, "put --pin")
    gone = "redis://127.0.0.1:%d" % _free_port()
    for fn, kw, args in ((kvchunk.stat, {}, ["stat"]), (kvchunk.ls, {}, ["ls"]),
                         (kvchunk.get, dict(tokens=c[0], at=0, **GEOM, **NS),
                          ["get", "--tokens", c[1], "--at", "0"] + GEOM_ARGS + NS_ARGS)):
        st, out, err = cli("kvchunk", args[0], "--store", gone, *args[1:])
        assert st == 1 and "cannot connect" in err, err
        same_refusal(lambda: fn(store=gone, **kw), st, err, " ".join(args))


def test_redis_get_threads(port, tmp_path):
    """Four threads reading one Redis store at once get what one gets."""
    store = url(port, 7)
    redis(port, 7, "FLUSHDB")
    rng = np.random.default_rng(7)
    chunks = [_chunk(rng, str(tmp_path), i) for i in range(8)]
    for c in chunks:
        kvchunk.put(c[0], c[2], c[4], store=store, **NS)
    calls = [(c, int(rng.integers(0, 3000))) for c in chunks * 4]
    ref = [kvchunk.get(c[0], at, store=store, **GEOM, **NS) for c, at in calls]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda x: kvchunk.get(x[0][0], x[1], store=store,
                                                **GEOM, **NS), calls))
    for r, g in zip(ref, got):
        assert r.tobytes() == g.tobytes()
