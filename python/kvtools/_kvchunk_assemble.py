"""kvchunk assemble, slice and selftest-rope in-process: a prompt's KV
from the store (libkv's kv_assemble_*), one layer's K or V of a KV
(kv_slice_layer), and a model's RoPE moves against the exact rotation
(kv_rope_selftest), with the programs' checks, in their order, and their
messages."""
import os

from ._core import (Error, Tensor, ffi, lib, new_err, err_text, usage, fail,
                    int_opt, float_opt, memstream_call, take_tensor)
from . import kvchunk as _kc
from ._kvchunk_split import _empty, _prompt_usage, _split_ids, _split_text


def _ns(prog, ns_options):
    """The namespace options as assemble and selftest-rope read them: a
    geometry required, checked (usage errors)."""
    for k in ns_options:
        if k not in _kc._NS_KEYS:
            raise TypeError("unexpected keyword argument '%s'" % k)
    ns, keep, have_shape, _ = _kc._namespace_parsed(prog, ns_options)
    if not have_shape:
        usage(prog, "--shape L,HKV,D is required")
    e = new_err()
    if lib.kv_ns_check(ns, e) != 0:
        usage(prog, err_text(e))
    return ns, keep


def _timeout_usage(prog, store, timeout):
    """--timeout checked before any work, as the program checks it."""
    if timeout is None:
        return
    spec = _kc.default_store() if store is None else str(store)
    if spec.startswith("dir:") or "://" not in spec:
        usage(prog, "--timeout is for redis:// and redis-cluster:// stores; "
              "a dir: store has none")
    t = float_opt(prog, "--timeout", timeout)
    if not (0 < t <= 3600):
        usage(prog, "--timeout: expected seconds in (0, 3600], got '%s'"
              % timeout)


def assemble(prompt, sep=None, ids=False, sep_ids=None, store=None,
             timeout=None, format="npy", report=None, jobs=None,
             kv_only=False, max_mem=None, **ns_options):
    """kvchunk assemble [--sep S | --ids --sep-ids A,B] PROMPT [--store
    SPEC] [namespace options]: every segment of the prompt but the
    question looked up in the store (the system prompt as a chunk of
    --chunk-context none), every hit moved to its offset.  Returns the
    program's .npy stream as a dict: "kv", the KV [L, 2, T, HKV, D] (an
    MLA model_config: the latent [L, T, D]) with zeros where a segment
    missed; "segments", int64 [n, 3] (kind, offset, length) as split
    gives them; "misses", int64 [m, 4] (segment, offset, length, the base
    position to compute it at).  kv_only=True gives {"kv": KV} alone.
    format="text" gives the plan, "KIND OFFSET LENGTH KEY|- hit P0|miss
    BASE" a line, as a str; report=PATH also writes the plan to PATH.
    jobs is -j (None or 0: all cores); the result is the same for any.

    prompt: the text (str, as UTF-8, or bytes), or with ids=True the
    token ids (a sequence or an integer array); a path (os.PathLike) is
    read as the program reads its PROMPT file.  A shape or a
    model_config is required.  report may be a str, bytes or
    os.PathLike path ("-" is refused, as by the program).  -o, --force,
    -q and -v have no keyword: the result is returned."""
    prog = "kvchunk assemble"
    for opt, v in (("--sep", sep), ("--store", store), ("--timeout", timeout),
                   ("--report", report), ("--max-mem", max_mem),
                   ("--sep-ids", sep_ids if isinstance(sep_ids, str)
                    else None)):
        _empty(prog, opt, v)
    ns, keep = _ns(prog, ns_options)
    nj = int_opt(prog, "-j", jobs, 0, 1024) if jobs is not None else 0
    lim = _kc._store_max_mem(prog, max_mem)
    _prompt_usage(prog, ids, sep, sep_ids)
    _timeout_usage(prog, store, timeout)
    if report is not None and os.fsencode(report) == b"-":
        usage(prog, "--report: a file name, not '-'")
    want_kv = format == "npy"
    if kv_only and not want_kv:
        usage(prog, "--kv-only: only for the npy stream (-f text, or text on "
              "a terminal, writes the plan)")
    per_seg = lib.kv_assemble_seg_bytes()
    sp = _split_ids(prog, prompt, sep_ids, lim, per_seg) if ids else \
        _split_text(prog, prompt, sep, lim, per_seg)
    a = ffi.new("struct kv_assembly *")
    try:
        e = new_err()
        if lib.kv_assemble_init(a, ns, sp, lim, 1 if want_kv else 0, e) != 0:
            fail(prog, err_text(e))
        s, _ = _kc._open(prog, store, timeout, 0, lim=a.store_bytes)
        if lib.kv_assemble_fetch(a, s, nj, e) != 0:
            fail(prog, err_text(e))
        if format not in ("npy", "text"):
            usage(prog, "-f: expected npy or text, got '%s'" % format)
        if report is not None and \
                lib.kv_assemble_report(a, os.fsencode(report), e) != 0:
            fail(prog, err_text(e))
        if format == "text":
            _, data = memstream_call(lambda f: lib.kv_assemble_plan(f, a))
            return data.decode()
        out = {"kv": take_tensor(ffi.addressof(a, "kv"))}
        if kv_only:
            return out
        st = ffi.new("struct kv_tensor *")
        mt = ffi.new("struct kv_tensor *")
        if lib.kv_assemble_tables(a, st, mt, e) != 0:
            fail(prog, err_text(e))
        out["segments"] = take_tensor(st)
        out["misses"] = take_tensor(mt)
        return out
    finally:
        lib.kv_assemble_release(a)
        lib.kv_split_release(sp)


def slice(kv, layer=None, part=None, layout=None, max_mem=None):
    """kvchunk slice [--layer L] [--part k|v] [--layout thd|bhsd] KV: one
    layer's K or V (default layer 0, k) of a KV [L, 2, T, HKV, D], as a
    new array [T, HKV, D] (thd, the default) or [1, HKV, T, D] (bhsd), for
    kvtools.kvattn.  kv: an array, or a path (os.PathLike) read as the
    program reads its KV file.  The KV and the slice together must fit
    max_mem.  -o, --force, -q and -v have no keyword: the array is
    returned."""
    prog = "kvchunk slice"
    for opt, v in (("--layer", layer), ("--part", part), ("--layout", layout),
                   ("--max-mem", max_mem)):
        _empty(prog, opt, v)
    ly = int_opt(prog, "--layer", layer, 0, 1 << 20) if layer is not None \
        else 0
    if part is not None and str(part) not in ("k", "v"):
        usage(prog, "--part: expected k or v, got '%s'" % part)
    if layout is not None and str(layout) not in ("thd", "bhsd"):
        usage(prog, "--layout: expected thd or bhsd, got '%s'" % layout)
    lim = _kc._store_max_mem(prog, max_mem)
    e = new_err()
    if isinstance(kv, os.PathLike):
        x = ffi.gc(ffi.new("struct kv_tensor *"), lib.kv_tensor_release)
        if lib.kv_slice_read(os.fsencode(kv), lim, x, e) != 0:
            fail(prog, err_text(e))
        held = None
    else:
        held = Tensor(kv, "kv")
        x = held.ptr
        if lib.kv_slice_check(x, b"kv", e) != 0:
            fail(prog, err_text(e))
    if ly >= x.shape[0]:
        usage(prog, "--layer: %d out of range [0, %d)" % (ly, x.shape[0]))
    y = ffi.new("struct kv_tensor *")
    if lib.kv_slice_layer(x, ly, lib.KV_SLICE_V if str(part) == "v" else
                          lib.KV_SLICE_K, lib.KV_SLICE_BHSD
                          if str(layout) == "bhsd" else lib.KV_SLICE_THD,
                          lim, y, e) != 0:
        fail(prog, err_text(e))
    del held
    return take_tensor(y)


SELFTEST_NAMES = ("p0", "p_new", "max_rel", "rms_rel", "max_ulp", "rms_ulp")


def selftest_rope(vectors=None, seed=None, format="json", max_mem=None,
                  **ns_options):
    """kvchunk selftest-rope [--vectors N] [--seed N] [namespace options]:
    this model's RoPE moves measured against the exact rotation, ten
    moves (p0, p_new).  Returns one dict a move, the program's columns
    (p0, p_new, max_rel, rms_rel, max_ulp, rms_ulp) and ok, whether it is
    within 1 ulp RMS and 2 ulps max of the KV dtype; format="text" gives
    the program's table as a str.  When a move is not, raises
    kvtools.Error with the program's message ("N of 10 moves above 1 ulp
    RMS or 2 ulps max"), the result in err.report.  max_mem is taken and
    unused, as by the program."""
    prog = "kvchunk selftest-rope"
    for opt, v in (("--vectors", vectors), ("--seed", seed),
                   ("--max-mem", max_mem)):
        _empty(prog, opt, v)
    ns, keep = _ns(prog, ns_options)
    nv = int_opt(prog, "--vectors", vectors, 1, 1000000) \
        if vectors is not None else 2000
    sd = int_opt(prog, "--seed", seed, 0, 2**63 - 1) if seed is not None \
        else 1
    if format not in ("json", "text"):
        usage(prog, "-f: expected text or json, got '%s'" % format)
    n = lib.KV_ROPE_SELFTEST_MOVES
    res = ffi.new("struct kv_rope_error[]", n)
    bad = ffi.new("int *")
    e = new_err()
    if lib.kv_rope_selftest(ffi.addressof(ns, "rope"), lib.kv_ns_dtype(ns),
                            nv, sd, res, bad, e) != 0:
        fail(prog, err_text(e))
    rows = []
    for i in range(n):
        r = res[i]
        rows.append(dict(zip(SELFTEST_NAMES, (
            lib.kv_rope_selftest_moves[i][0], lib.kv_rope_selftest_moves[i][1],
            r.max_rel, r.rms_rel, r.max_ulp, r.rms_ulp))))
        rows[-1]["ok"] = bool(lib.kv_rope_selftest_ok(ffi.addressof(res, i)))
    out = rows
    if format == "text":
        out = "p0 p_new max_rel rms_rel max_ulp rms_ulp\n" + "".join(
            "%d %d %.3g %.3g %.3f %.3f%s\n" % (
                r["p0"], r["p_new"], r["max_rel"], r["rms_rel"],
                r["max_ulp"], r["rms_ulp"], "" if r["ok"] else " FAIL")
            for r in rows)
    if bad[0]:
        err = Error(prog, "%d of %d moves above 1 ulp RMS or 2 ulps max"
                    % (bad[0], n), 1)
        err.report = out
        raise err
    return out
