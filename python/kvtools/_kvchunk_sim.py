"""kvchunk sim, sim gen, sim from-split and toy in-process: libkv's
kv_chunk_sim_* (the options read and checked as the program reads them,
the replay over threads, the report) and kv_chunk_toy_* (the toy
projection of token ids), with the programs' messages."""
import json
import os

from ._core import (ffi, lib, new_err, err_text, usage, fail, memstream_call,
                    take_tensor, _text)
from . import kvchunk as _kc

_SIM_KEYS = ("capacity_tokens", "capacity_bytes", "pool_bytes", "max_chunks",
             "rotate", "warmup", "policies", "block_size", "model_config",
             "layers", "kv_heads", "head_dim", "dtype", "chunk_context",
             "salt", "max_sessions", "us_per_token", "us_per_pair",
             "us_per_output_token", "tier", "bw_hbm", "bw_host", "bw_disk",
             "bw_net", "bw_rope", "jobs", "trace_format", "trace_block_size",
             "max_mem")

_GEN_KEYS = ("seed", "requests", "docs", "topk", "zipf", "fresh", "order",
             "sys_variants", "tenants", "topics", "turns", "conversations",
             "rate", "doc_len", "sys_len", "q_len", "out_len")


def _no_empty(prog, values):
    """An option given as "" (or an empty list) is refused as the program
    refuses --NAME '': before any other check."""
    for k, v in values.items():
        if v is not None and _text(v) == "":
            usage(prog, "--%s: expected a value, got an empty one"
                  % k.replace("_", "-"))


def _fill(o, values, keep):
    """Set o's string fields from values (None: not given), keeping the
    C strings alive in keep."""
    for k, v in values.items():
        if v is None:
            continue
        c = ffi.new("char[]", _text(v).encode())
        keep.append(c)
        setattr(o, k, c)


def _open(prog, src, keep):
    """The input as the program reads its file operand: a path (str or
    os.PathLike; '-' is standard input) or the text itself as bytes (named
    <stdin> in messages, as the program reading it from a pipe names it).
    Returns (FILE *, name as bytes); a path's bytes are the file system's
    (os.fsencode), as the program is given them."""
    e = new_err()
    if isinstance(src, (bytes, bytearray, memoryview)):
        buf = ffi.from_buffer(src)
        keep.append(buf)
        f = lib.fmemopen(buf, len(buf), b"r")
        if f == ffi.NULL:
            raise MemoryError("fmemopen")
        return f, b"<stdin>"
    if not isinstance(src, (str, os.PathLike)):
        raise TypeError("expected a path (str or os.PathLike) or the text as "
                        "bytes, got %s" % type(src).__name__)
    path = os.fsencode(src)
    f = lib.kv_open_in(path, e)
    if f == ffi.NULL:
        fail(prog, err_text(e))
    return f, ffi.string(lib.kv_path_name(path, 0))


def sim(trace, capacity_tokens=None, capacity_bytes=None, pool_bytes=None,
        max_chunks=None, rotate=None, miss_copy=False, warmup=None,
        policies=None, csv=False, format=None, block_size=None,
        model_config=None, layers=None, kv_heads=None, head_dim=None,
        dtype=None, chunk_context=None, salt=None, max_sessions=None,
        us_per_token=None, us_per_pair=None, us_per_output_token=None,
        tier=None, bw_hbm=None, bw_host=None, bw_disk=None, bw_net=None,
        bw_rope=None, jobs=None, trace_format=None, trace_block_size=None,
        max_mem=None):
    """kvchunk sim [options] TRACE: the trace replayed through the cache
    policies (none, prefix, prefix-lfu, prefix-radix, prefix-sorted,
    chunk, chunk-lfu, oracle: those of policies) at one budget or a sweep
    (capacity_tokens, capacity_bytes or pool_bytes: a size or a list),
    one keyword per long option of the program with its defaults.

    trace: a path (str or os.PathLike), native or Mooncake JSONL as
    trace_format says, or the trace's text as bytes (named <stdin> in
    messages, as the program names a piped trace).

    Returns the rows -f json prints, a dict a budget and policy with the
    CSV's fields (policy, token_hit_rate, ..., speedup_vs_prefix None
    where the CSV leaves it empty); format="text" gives the table and
    csv=True the CSV, each as the str the program prints.  jobs is -j (0
    or None: every core); the result is the same for any.  max_mem is
    --max-mem (a size as _core.max_mem reads it, default 75% of RAM): a
    request whose replay would take the tables over it is refused before
    it is fed (kvtools.Error, status 1, as the program).  The replay runs
    without the GIL.  -o, -q and -v have no keyword: the report is
    returned and nothing is printed."""
    given = dict(locals())
    prog = "kvchunk sim"
    vals = {k: given[k] for k in _SIM_KEYS}
    _no_empty(prog, dict(vals, format=format))
    o = ffi.new("struct kv_chunk_sim_opts *")
    keep = []
    _fill(o, vals, keep)
    if format is None and not csv:
        format = "json"
    _fill(o, {"format": format}, keep)
    o.miss_copy = 1 if miss_copy else 0
    o.csv = 1 if csv else 0
    cs = ffi.new("struct kv_chunk_sim *")
    e = new_err()
    u = ffi.new("int *")
    if lib.kv_chunk_sim_load(cs, o, e) != 0:
        usage(prog, err_text(e))
    try:
        f, name = _open(prog, trace, keep)
        try:
            rc = lib.kv_chunk_sim_run(cs, f, name, ffi.NULL,
                                      ffi.NULL, u, e)
        finally:
            lib.kv_close_in(f)
        if rc != 0:
            fail(prog, err_text(e), 2 if u[0] else 1)
        rc, data = memstream_call(lambda out: lib.kv_chunk_sim_write(out, cs,
                                                                     e))
        if rc != 0:
            fail(prog, err_text(e))
    finally:
        lib.kv_chunk_sim_release(cs)
    text = data.decode("utf-8", "replace")
    if cs.format != 2:                  # KV_CHUNK_SIM_JSON
        return text
    return [json.loads(line) for line in text.splitlines()]


def sim_gen(seed=None, requests=None, docs=None, topk=None, zipf=None,
            fresh=None, order=None, sys_variants=None, tenants=None,
            topics=None, turns=None, conversations=None, rate=None,
            doc_len=None, sys_len=None, q_len=None, out_len=None,
            topic_clusters=None, out=None):
    """kvchunk sim gen [options]: a synthetic RAG request trace, the
    text the program writes (a str, one request a line), one keyword per
    long option with its defaults (topic_clusters is topics' other
    name).  The same options and seed give the same text.  Give it to
    sim() as bytes: kvchunk.sim(kvchunk.sim_gen(...).encode()).

    out streams the trace instead, as the program writes it, and None is
    returned: a path (str or os.PathLike) is -o FILE (a temporary file
    beside it, renamed into place once the whole trace is written;
    nothing is left at the path on failure), a file object (binary, or
    text: io.TextIOBase) receives the bytes in pieces of at most 64 KiB
    as the generator writes them.  The trace is never held whole in
    memory."""
    prog = "kvchunk sim gen"
    _no_empty(prog, {k: v for k, v in locals().items()
                     if k not in ("prog", "out")})
    if topic_clusters is not None:
        if topics is not None:
            raise TypeError("topics and topic_clusters name one option: give "
                            "one")
        topics = topic_clusters
    given = dict(locals())
    vals = {k: given[k] for k in _GEN_KEYS}
    o = ffi.new("struct kv_chunk_sim_gen_opts *")
    keep = []
    _fill(o, vals, keep)
    g = ffi.new("struct kv_sim_gen_opts *")
    e = new_err()
    if lib.kv_chunk_sim_gen_load(o, g, e) != 0:
        usage(prog, err_text(e))
    if out is None:
        rc, data = memstream_call(lambda f: lib.kv_sim_gen(f, g, e))
        if rc != 0:
            fail(prog, err_text(e))
        return data.decode("utf-8", "replace")
    if isinstance(out, (str, bytes, os.PathLike)):
        _gen_to_path(prog, g, os.fsencode(out))
    else:
        _gen_to_file(prog, g, out)
    return None


def _gen_to_path(prog, g, path):
    """kv_sim_gen into -o PATH, through the program's kv_out."""
    e = new_err()
    ko = ffi.new("struct kv_out *")
    if lib.kv_out_open(ko, path, e) != 0:
        fail(prog, err_text(e))
    if lib.kv_sim_gen(ko.f, g, e) != 0:
        lib.kv_out_abort(ko)
        fail(prog, err_text(e))
    if lib.kv_out_commit(ko, e) != 0:
        fail(prog, err_text(e))


def _gen_to_file(prog, g, dst):
    """kv_sim_gen on a thread (without the GIL) into a pipe whose other
    end is copied into the file object dst as it arrives."""
    import codecs
    import io
    import threading
    if not hasattr(dst, "write"):
        raise TypeError("out: expected a path or a file object, got %s"
                        % type(dst).__name__)
    text = isinstance(dst, io.TextIOBase)
    dec = codecs.getincrementaldecoder("utf-8")("replace") if text else None
    r, w = os.pipe()
    f = lib.fdopen(w, b"w")
    if f == ffi.NULL:
        os.close(r)
        os.close(w)
        raise OSError("fdopen")
    e = new_err()
    res = []

    def produce():
        rc = lib.kv_sim_gen(f, g, e)
        if lib.fclose(f) != 0 and rc == 0:
            rc = -1
        res.append(rc)
    th = threading.Thread(target=produce, daemon=True)
    th.start()
    try:
        with os.fdopen(r, "rb", buffering=0) as src:
            while True:
                b = src.read(1 << 16)
                if not b:
                    break
                dst.write(dec.decode(b) if text else b)
            if text:
                dst.write(dec.decode(b"", final=True))
    finally:
        th.join()
    if res[0] != 0:
        fail(prog, err_text(e) if e.msg[0] != b"\0" else
             "writing the trace: the pipe was closed")


def sim_from_split(segments, rate=None, tenant=None, out_len=None):
    """kvchunk sim from-split [--rate R] [--tenant NAME] [--out-len N]
    FILE: the segment lists kvchunk split -f text prints for many prompts
    (KIND OFFSET LENGTH KEY, a prompt ending at its question line) as a
    trace for sim(), keys becoming ids; the text (a str) the program
    writes.  segments: a path (str or os.PathLike) or the text as bytes
    (named <stdin> in messages)."""
    prog = "kvchunk sim from-split"
    vals = {"rate": rate, "tenant": tenant, "out_len": out_len}
    _no_empty(prog, vals)
    o = ffi.new("struct kv_chunk_sim_split_opts *")
    keep = []
    _fill(o, vals, keep)
    r = ffi.new("double *")
    ol = ffi.new("int64_t *")
    e = new_err()
    if lib.kv_chunk_sim_split_load(o, r, ol, e) != 0:
        usage(prog, err_text(e))
    f, name = _open(prog, segments, keep)
    out = ffi.new("char **")
    n = ffi.new("size_t *")
    u = ffi.new("int *")
    try:
        rc = lib.kv_chunk_sim_split_run(o, r[0], ol[0], f, name,
                                        out, n, u, e)
    finally:
        lib.kv_close_in(f)
    if rc != 0:
        fail(prog, err_text(e), 2 if u[0] else 1)
    try:
        return ffi.buffer(out[0], n[0])[:].decode("utf-8", "replace") \
            if n[0] else ""
    finally:
        lib.free(out[0])


def toy(tokens=None, pos=None, seed=None, heads=None, q=None,
        embed_dim=None, max_mem=None, **ns_options):
    """kvchunk toy --tokens T [--pos P] [--seed N] [--heads HQ] [--q
    LAYER] [--embed-dim E] [namespace options]: the toy projection of
    token ids at positions pos.. as a new array: the KV [L, 2, T, HKV, D]
    (RoPE on K), with q=LAYER that layer's Q [T, HQ, D] (heads query
    heads, default HKV), or an MLA model_config's latent chunk [L, T, Dl +
    R]; dtype as the namespace says (default bf16).  tokens: the ids (a
    sequence or an integer array), or a path (os.PathLike) read as the
    program reads --tokens.  The namespace keywords are kvchunk's (shape
    or model_config required).  -o, --force, -q and -v have no keyword:
    the array is returned."""
    prog = "kvchunk toy"
    for k in ns_options:
        if k not in _kc._NS_KEYS:
            raise TypeError("unexpected keyword argument '%s'" % k)
    vals = {"pos": pos, "seed": seed, "heads": heads, "q": q,
            "embed_dim": embed_dim, "max_mem": max_mem}
    _no_empty(prog, vals)
    ns, keep, have_shape, _ = _kc._namespace_parsed(prog, ns_options)
    o = ffi.new("struct kv_chunk_toy_opts *")
    o.ns = ns
    o.have_shape = have_shape
    _fill(o, vals, keep)
    if tokens is not None:
        _fill(o, {"tokens": "<array>"}, keep)
    t = ffi.new("struct kv_chunk_toy *")
    e = new_err()
    if lib.kv_chunk_toy_load(t, o, e) != 0:
        usage(prog, err_text(e))
    tk = None
    if isinstance(tokens, os.PathLike):
        tk = ffi.gc(ffi.new("struct kv_tokens *"), lib.kv_tokens_release)
        if lib.kv_tokens_load(os.fsencode(tokens), t.max_bytes, tk, e) != 0:
            fail(prog, err_text(e))
        if tk.n > (2**31 - 1) // 2:
            fail(prog, "--tokens: %d tokens is too many" % tk.n)
        ids, n = tk.ids, tk.n
    else:
        a = _kc._ids(prog, "--tokens", tokens)
        ids = ffi.cast("int32_t *", ffi.from_buffer(a)) if a.size else \
            ffi.NULL
        n = a.size
    x = ffi.new("struct kv_tensor *")
    if lib.kv_chunk_toy_run(t, ids, n, x, e) != 0:
        fail(prog, err_text(e))
    return take_tensor(x)


__all__ = ["sim", "sim_gen", "sim_from_split", "toy"]
