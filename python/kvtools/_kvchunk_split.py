"""kvchunk split in-process: a prompt sys##chunk##..##question into its
segments (libkv's kv_split_text / kv_split_ids) and, when the namespace
has a geometry, each segment's chunk key (the question has none)."""
import os

import numpy as np

from ._core import ffi, lib, new_err, err_text, usage, fail
from . import kvchunk as _kc

SEG_NAMES = ("sys", "chunk", "question")


def _empty(prog, opt, v):
    if v is not None and (str(v) == "" or
                          isinstance(v, (bytes, bytearray)) and not v):
        usage(prog, "%s: expected a value, got an empty one" % opt)


def _prompt_usage(prog, ids, sep, sep_ids):
    """--ids, --sep and --sep-ids together as the programs check them."""
    if ids and sep_ids is None:
        usage(prog, "--ids needs --sep-ids")
    if not ids and sep_ids is not None:
        usage(prog, "--sep-ids needs --ids")
    if sep is not None and ids:
        usage(prog, "--sep is for text prompts; use --sep-ids with --ids")


def _count_sep(a, sep):
    """Non-overlapping occurrences of sep in a (bytes or int32 arrays as
    bytes of one item size each): the program's bound of the segments."""
    if isinstance(a, bytes):
        return a.count(sep) if sep else 0
    n, k, i = len(a), 0, 0
    m = len(sep)
    while m and i + m <= n:
        if a[i] == sep[0] and a[i:i + m].tolist() == list(sep):
            k += 1
            i += m
        else:
            i += 1
    return k


def _fits(prog, n, n_seg, held, lim, per_seg=None):
    if per_seg is None:                 # split's: a key and a row a segment
        per_seg = ffi.sizeof("struct kv_chunk_req") + 3 * 8 + 16
    need = float(held) + 4.0 * n + float(n_seg) * \
        (ffi.sizeof("struct kv_segment") + per_seg)
    if lim and need > lim:
        fail(prog, "the prompt's %d tokens and up to %d segments need %.0f "
             "bytes, more than --max-mem %d" % (n, n_seg, need, lim))


def _split_ids(prog, prompt, sep_ids, lim, per_seg=None):
    txt = sep_ids if isinstance(sep_ids, str) else \
        ",".join(str(int(x)) for x in np.asarray(sep_ids).reshape(-1))
    out = ffi.new("int64_t **")
    nn = ffi.new("size_t *")
    e = new_err()
    if lib.kv_parse_i64_list(txt.encode(), b"--sep-ids", -2**31, 2**31 - 1,
                             out, nn, e) != 0:
        fail(prog, err_text(e))
    sep = np.frombuffer(ffi.buffer(out[0], 8 * nn[0]), np.int64).copy() \
        if nn[0] else np.zeros(0, np.int64)
    lib.free(out[0])
    if not sep.size:
        fail(prog, "--sep-ids: empty separator")
    if sep.size > 64:
        fail(prog, "--sep-ids: at most 64 ids")
    sep = np.ascontiguousarray(sep, np.int32)
    e = new_err()
    if isinstance(prompt, os.PathLike):
        t = ffi.new("struct kv_tokens *")
        if lib.kv_tokens_load(os.fsencode(prompt), lim, t, e) != 0:
            fail(prog, err_text(e))
        ids = np.frombuffer(ffi.buffer(t.ids, 4 * t.n), np.int32).copy() \
            if t.n else np.zeros(0, np.int32)
        lib.kv_tokens_release(t)
    else:
        ids = np.ascontiguousarray(_kc._ids(prog, "PROMPT", prompt), np.int32)
    _fits(prog, ids.size, _count_sep(ids, sep) + 1, 4 * ids.size, lim,
          per_seg)
    sp = ffi.new("struct kv_split *")
    ip = ffi.cast("int32_t *", ffi.from_buffer(ids)) if ids.size else ffi.NULL
    if lib.kv_split_ids(ip, ids.size, ffi.cast("int32_t *",
                                               ffi.from_buffer(sep)),
                        sep.size, sp, e) != 0:
        fail(prog, err_text(e))
    return sp


def _split_text(prog, prompt, sep, lim, per_seg=None):
    if isinstance(prompt, os.PathLike):
        path = os.fspath(prompt)
        try:
            with open(path, "rb") as f:
                buf = f.read()
        except OSError as x:
            fail(prog, "cannot open '%s': %s" % (path, x.strerror.lower()
                                                   if x.strerror else x))
        cap = 1 << 16
        while len(buf) >= cap:
            if cap >= lim:
                fail(prog, "'%s' is larger than --max-mem" % path)
            cap *= 2
    else:
        buf = prompt.encode() if isinstance(prompt, str) else bytes(prompt)
        cap = 1 << 16
        while len(buf) >= cap:
            cap *= 2
    # bytes as given (a separator need not be UTF-8), as the program's
    # argument is
    s = b"##" if sep is None else bytes(sep) \
        if isinstance(sep, (bytes, bytearray)) else os.fsencode(str(sep))
    _fits(prog, len(buf), _count_sep(buf, s) + 1, cap, lim, per_seg)
    sp = ffi.new("struct kv_split *")
    e = new_err()
    if lib.kv_split_text(buf, len(buf), s, sp, e) != 0:
        fail(prog, err_text(e))
    return sp


def split(prompt, sep=None, ids=False, sep_ids=None, format="npy",
          max_mem=None, **ns_options):
    """kvchunk split [--sep S | --ids --sep-ids A,B] PROMPT [namespace
    options]: the segments as an int64 array [n, 3] of (kind, offset,
    length), kind 0 sys, 1 chunk, 2 question; when the namespace has a
    geometry (shape or model_config) also each segment's 16-byte key as a
    uint8 array [n, 16] (zeros for the question): (segments, keys), the
    two arrays of the program's .npy stream.  format="text" gives the
    text lines as a str.

    prompt: the text (str, as UTF-8, or bytes), or with ids=True the
    token ids (a sequence or an integer array); a path (os.PathLike) is
    read as the program reads its PROMPT file."""
    prog = "kvchunk split"
    _empty(prog, "--sep", sep)
    _empty(prog, "--sep-ids", sep_ids if isinstance(sep_ids, str) else None)
    for k in ns_options:
        if k not in _kc._NS_KEYS:
            raise TypeError("unexpected keyword argument '%s'" % k)
    ns, keep, have_shape, _ = _kc._namespace_parsed(prog, ns_options)
    lim = _kc._store_max_mem(prog, max_mem)
    _prompt_usage(prog, ids, sep, sep_ids)
    e = new_err()
    if have_shape and lib.kv_ns_check(ns, e) != 0:
        usage(prog, err_text(e))
    sp = _split_ids(prog, prompt, sep_ids, lim) if ids else \
        _split_text(prog, prompt, sep, lim)
    try:
        n = sp.n_segs
        segs = np.zeros((n, 3), np.int64)
        for i in range(n):
            g = sp.segs[i]
            segs[i] = (g.kind, g.offset, g.length)
        keys = np.zeros((n, 16), np.uint8) if have_shape else None
        if have_shape:
            _keys(prog, ns, sp, keys)
    finally:
        lib.kv_split_release(sp)
    if format not in ("npy", "text"):
        usage(prog, "-f: expected npy or text, got '%s'" % format)
    if format == "text":
        out = []
        for i, (kd, off, ln) in enumerate(segs.tolist()):
            line = "%s %d %d" % (SEG_NAMES[kd], off, ln)
            if have_shape and kd != 2:
                line += " " + keys[i].tobytes().hex()
            out.append(line + "\n")
        return "".join(out)
    return (segs, keys) if have_shape else segs


def _keys(prog, ns, sp, keys):
    """Each segment's key but the question's: sys in the namespace of a
    chunk that attended to nothing, the chunks after the sys tokens."""
    sn = ffi.new("struct kv_namespace *")
    ffi.memmove(sn, ns, ffi.sizeof("struct kv_namespace"))
    sn.mask = lib.KV_CTX_NONE
    sys_tok = sp.tokens + sp.segs[0].offset
    n_sys = sp.segs[0].length
    e = new_err()
    r = ffi.new("struct kv_chunk_req *")
    for i in range(sp.n_segs):
        g = sp.segs[i]
        if g.kind == lib.KV_CHUNK_SEG_QUESTION:
            continue
        n_ = sn if g.kind == lib.KV_CHUNK_SEG_SYS else ns
        if lib.kv_ns_digest(n_, r.ns, e) != 0:
            fail(prog, err_text(e))
        lib.kv_ctx_digest(lib.kv_ns_mask(n_), sys_tok, n_sys, r.ctx)
        lib.kv_chunk_key(r.ns, r.ctx, sp.tokens + g.offset, g.length, r.key)
        keys[i] = np.frombuffer(ffi.buffer(r.key, 16), np.uint8)
