"""kvchunk in-process: a chunk's content key (kvchunk key), the store's
put and get with the same store URLs (dir:PATH, redis://HOST:PORT[/DB],
redis-cluster://HOST:PORT[,..]; default $KVCHUNK_STORE, else
dir:${XDG_CACHE_HOME:-~/.cache}/kvchunk), and the RoPE move of a chunk's
KV (what get --at does to a stored chunk); the store's upkeep: ls,
stat, evict, fsck, rm, pin, unpin; the trace simulator (sim, sim_gen,
sim_from_split) and the toy projection (toy); a prompt's KV from the
store (assemble), one layer's K or V of a KV (slice) and the RoPE
moves measured against the exact rotation (selftest_rope).

    kvchunk.key([101, 7, 42], shape="32,8,128", model="llama-3.1-8b")
    kvchunk.put(tokens, kv, base_pos=0, store="dir:/tmp/cache")
    moved = kvchunk.get(tokens, at=512, shape="32,8,128", store=...)
    moved = kvchunk.rope_move(kv, base_pos=0, at=512, rope_theta=500000)
    rows = kvchunk.sim("trace.txt", capacity_tokens=100000)  # dicts
    kv = kvchunk.toy([101, 7, 42], shape="32,8,128", pos=512)
    r = kvchunk.assemble("sys##chunk##question", shape="32,8,128", store=...)
    k0 = kvchunk.slice(r["kv"], layer=0, part="k")   # also selftest_rope

The namespace keywords are kvchunk's namespace options (model_config,
model, tokenizer, lora, salt, dtype, shape, rope, rope_theta, rotary_dim,
rope_scaling, nope_layers, chunk_context, base_policy), with its defaults.
"""
import numpy as np

from ._core import (Error, as_array, ffi, lib, new_err, err_text, usage, fail,
                    max_mem)

LAYOUT_LATENT = lib.KV_BLOB_LAYOUT_LATENT     # an MLA model's latent chunk

__all__ = ["key", "rope_move", "put", "get", "default_store", "info", "ls",
           "stat", "split", "evict", "fsck", "rm", "pin", "unpin"]

_NS_KEYS = ("model_config", "model", "tokenizer", "lora", "salt", "dtype",
            "shape", "rope", "rope_theta", "rotary_dim", "rope_scaling",
            "nope_layers", "chunk_context", "base_policy")


def _text(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return ",".join(str(int(x)) for x in v)
    return str(v)


def _namespace(prog, ns_options, shape_default=None):
    for k in ns_options:
        if k not in _NS_KEYS:
            raise TypeError("unexpected keyword argument '%s'" % k)
    o = ffi.new("struct kv_ns_options *")
    keep = []
    for k in _NS_KEYS:
        v = ns_options.get(k)
        if v is None and k == "shape" and shape_default is not None and \
                ns_options.get("model_config") is None:
            v = shape_default
        if v is not None:
            if _text(v) == "":
                usage(prog, "--%s: expected a value, got an empty one"
                      % k.replace("_", "-"))
            c = ffi.new("char[]", _text(v).encode())
            keep.append(c)
            setattr(o, k, c)
    ns = ffi.new("struct kv_namespace *")
    have = ffi.new("int *")
    e = new_err()
    if lib.kv_ns_from_options(o, ns, have, e) != 0:
        usage(prog, err_text(e))
    return ns, keep


def _namespace_parsed(prog, ns_options):
    """The namespace options as kvchunk put reads them before the KV
    (kv_ns_parse_options): (ns, keep, have_shape, have_dtype)."""
    o = ffi.new("struct kv_ns_options *")
    keep = []
    for k in _NS_KEYS:
        v = ns_options.get(k)
        if v is not None:
            if _text(v) == "":
                usage(prog, "--%s: expected a value, got an empty one"
                      % k.replace("_", "-"))
            c = ffi.new("char[]", _text(v).encode())
            keep.append(c)
            setattr(o, k, c)
    ns = ffi.new("struct kv_namespace *")
    hs, hd = ffi.new("int *"), ffi.new("int *")
    e = new_err()
    if lib.kv_ns_parse_options(o, ns, hs, hd, e) != 0:
        usage(prog, err_text(e))
    return ns, keep, hs[0], hd[0]


def _put_config_ns(prog, a, kt, n_tok, ns_options):
    """put with model_config: the namespace from the config and the
    options over it, the KV checked against it as the program does (an
    MLA config: a latent chunk [L, T, Dl + R] in the namespace's dtype;
    otherwise KV [L, 2, T, HKV, D] giving what the config left open)."""
    ns, keep, have_shape, have_dtype = _namespace_parsed(prog, ns_options)
    shp = "(%s)" % ", ".join(str(n) for n in a.shape)
    if len(a.shape) == 1:
        shp = "(%d,)" % a.shape[0]
    if lib.kv_ns_lora_rank(ns):
        if a.ndim != 3 or a.shape[1] != n_tok or a.shape[0] != ns.n_layers or \
                a.shape[2] != ns.head_dim:
            fail(prog, "kv: expected a latent chunk [L, T, Dl + R] = [%d, %d, "
                 "%d], found %s" % (ns.n_layers, n_tok, ns.head_dim, shp))
        if kt != lib.kv_ns_dtype(ns):
            fail(prog, "kv is %s, the namespace says %s"
                 % (_dt_name(kt), _dt_name(lib.kv_ns_dtype(ns))))
    else:
        if a.ndim != 5 or a.shape[1] != 2 or a.shape[2] != n_tok:
            fail(prog, "kv: expected KV [L, 2, %d, HKV, D], found %s"
                 % (n_tok, shp))
        if kt not in (lib.KV_F16, lib.KV_BF16, lib.KV_F32):
            fail(prog, "kv: KV must be f16, bf16 or f32, found %s" % _dt_name(kt))
        if have_dtype and kt != lib.kv_ns_dtype(ns):
            fail(prog, "kv is %s, --dtype says %s"
                 % (_dt_name(kt), _dt_name(lib.kv_ns_dtype(ns))))
        L, _, _, H, D = a.shape
        if have_shape and (L, H, D) != (ns.n_layers, ns.n_kv_heads, ns.head_dim):
            fail(prog, "kv has shape %s, --shape says %d,%d,%d"
                 % (shp, ns.n_layers, ns.n_kv_heads, ns.head_dim))
        if not (1 <= L <= 1 << 20 and 1 <= H <= 1 << 20 and 1 <= D <= 65536):
            fail(prog, "kv: bad KV shape %s" % shp)
        lib.kv_ns_set_dtype(ns, kt)
        ns.n_layers, ns.n_kv_heads, ns.head_dim = L, H, D
    e = new_err()
    if lib.kv_ns_check(ns, e) != 0:
        fail(prog, err_text(e), 2)
    return ns, keep


def _put_ns(prog, a, kt, tok, ns_options):
    """put without model_config: the namespace takes the KV's dtype and
    geometry unless dtype or shape say otherwise (then they must agree)."""
    if a.ndim != 5 or a.shape[1] != 2 or a.shape[2] != tok.size:
        fail(prog, "kv: expected KV [L, 2, %d, HKV, D], found (%s)"
             % (tok.size, ", ".join(str(n) for n in a.shape)))
    if kt not in (lib.KV_F16, lib.KV_BF16, lib.KV_F32):
        fail(prog, "kv: KV must be f16, bf16 or f32, found %s" % a.dtype)
    dtn = "bf16" if kt == lib.KV_BF16 else _DT_NAMES[a.dtype.name]
    L, _, T, H, D = a.shape
    shp = "%d,%d,%d" % (L, H, D)
    given = dict(ns_options)
    opts = dict(ns_options)
    opts.setdefault("dtype", dtn)
    opts.setdefault("shape", shp)
    ns, keep = _namespace(prog, opts)
    if given.get("dtype") is not None and lib.kv_ns_dtype(ns) != kt:
        fail(prog, "kv is %s, --dtype says %s" % (dtn, given["dtype"]))
    if given.get("shape") is not None and \
            (ns.n_layers, ns.n_kv_heads, ns.head_dim) != (L, H, D):
        fail(prog, "kv has shape (%s), --shape says %d,%d,%d" % (
            ", ".join(str(n) for n in a.shape), ns.n_layers, ns.n_kv_heads,
            ns.head_dim))
    return ns, keep


def _dt_name(kt):
    return ffi.string(lib.kv_dtype_name(kt)).decode()


def _ids(prog, opt, x):
    a = np.asarray(x)
    if a.size and a.dtype.kind not in "iu":
        fail(prog, "%s: expected integer token ids, got %s" % (opt, a.dtype))
    a = a.reshape(-1)
    if a.size and (a.min() < -2**31 or a.max() > 2**31 - 1):
        fail(prog, "%s: a token id does not fit int32" % opt)
    return np.ascontiguousarray(a, dtype=np.int32)


def key(tokens, context=None, explain=False, **ns_options):
    """kvchunk key --tokens T [--context C] [namespace options]: the
    chunk's content key, 32 hex digits; explain=True gives a dict with the
    namespace text and the digests too (kvchunk key --explain)."""
    prog = "kvchunk key"
    ns, keep = _namespace(prog, ns_options)
    if context is not None and lib.kv_ns_mask(ns) == 1:
        usage(prog, "--context: a chunk of --chunk-context none attended to "
              "no context; leave out --context '%s' or use --chunk-context sys"
              % "<array>")
    tok = _ids(prog, "--tokens", tokens)
    ctx = _ids(prog, "--context", context) if context is not None else \
        np.zeros(0, np.int32)
    e = new_err()
    nsd = ffi.new("uint8_t[16]")
    ctd = ffi.new("uint8_t[16]")
    k = ffi.new("uint8_t[16]")
    if lib.kv_ns_digest(ns, nsd, e) != 0:
        fail(prog, err_text(e))
    lib.kv_ctx_digest(lib.kv_ns_mask(ns),
                      ffi.cast("int32_t *", ffi.from_buffer(ctx)) if ctx.size
                      else ffi.NULL, ctx.size, ctd)
    lib.kv_chunk_key(nsd, ctd, ffi.cast("int32_t *", ffi.from_buffer(tok))
                     if tok.size else ffi.NULL, tok.size, k)
    hexkey = bytes(ffi.buffer(k, 16)).hex()
    if not explain:
        return hexkey
    txt = ffi.new("char **")
    if lib.kv_ns_text(ns, txt, e) != 0:
        fail(prog, err_text(e))
    text = ffi.string(txt[0]).decode()
    lib.free(txt[0])
    return {"namespace": text, "ns_digest": bytes(ffi.buffer(nsd, 16)).hex(),
            "ctx_digest": bytes(ffi.buffer(ctd, 16)).hex(),
            "tokens": int(tok.size), "key": hexkey}


def rope_move(kv, base_pos, at, seq_end=None, **ns_options):
    """A chunk's KV [L, 2, T, Hkv, D] (f16, bf16 or f32) computed at
    base_pos, moved to position at: every layer's K rotated by at -
    base_pos with the namespace's RoPE (rope, rope_theta, rotary_dim,
    rope_scaling, nope_layers, or model_config), V copied.  The bytes
    kvchunk get --at writes for such a chunk.  Returns a new array."""
    prog = "kvchunk"
    a, kt = as_array(kv)
    if a.ndim != 5 or a.shape[1] != 2:
        fail(prog, "kv: expected [L, 2, T, HKV, D], got shape (%s)"
             % ", ".join(str(n) for n in a.shape))
    if kt not in (lib.KV_F16, lib.KV_BF16, lib.KV_F32):
        fail(prog, "kv: expected f16, bf16 or f32, got %s" % a.dtype)
    L, _, T, H, D = a.shape
    ns, keep = _namespace(prog, ns_options, "%d,%d,%d" % (L, H, D))
    if (ns.n_layers, ns.n_kv_heads, ns.head_dim) != (L, H, D):
        fail(prog, "kv: shape (%s) does not match the namespace's L,HKV,D "
             "%d,%d,%d" % (", ".join(str(n) for n in a.shape), ns.n_layers,
                           ns.n_kv_heads, ns.head_dim))
    e = new_err()
    if lib.kv_rope_can_move(ffi.addressof(ns, "rope"), int(base_pos), int(at),
                            T, 0 if seq_end is None else int(seq_end), e) != 0:
        fail(prog, err_text(e))
    c = ffi.new("struct kv_rope_chunk *")
    c.n_layers, c.n_tokens, c.n_kv_heads, c.head_dim = L, T, H, D
    c.dtype = kt
    out = np.empty_like(a)
    if a.size and lib.kv_rope_move_kv(ffi.addressof(ns, "rope"), c,
                                      int(at) - int(base_pos),
                                      ffi.from_buffer(a), ffi.from_buffer(out),
                                      T, 0, e) != 0:
        fail(prog, err_text(e))
    return out


_DT_NAMES = {"float16": "f16", "float32": "f32"}


def default_store():
    """The store kvchunk uses without --store."""
    import os
    s = os.environ.get("KVCHUNK_STORE")
    if s:
        return s
    x = os.environ.get("XDG_CACHE_HOME")
    if x:
        return "dir:%s/kvchunk" % x
    return "dir:%s/.cache/kvchunk" % (os.environ.get("HOME") or ".")


def _open(prog, store, timeout, read_only, ttl=0, durable=False, lim=0):
    spec = default_store() if store is None else str(store)
    o = ffi.new("struct kv_store_opts *")
    lib.kv_store_opts_init(o)
    o.read_only = 1 if read_only > 0 else 0
    o.must_exist = 1 if read_only >= 0 else 0
    o.ttl = ttl
    o.durable = 1 if durable else 0
    o.max_bytes = lim
    if timeout is not None:
        if spec.startswith("dir:") or "://" not in spec:
            usage(prog, "--timeout is for redis:// and redis-cluster:// "
                  "stores; a dir: store has none")
        t = float(timeout)
        if not (0 < t <= 3600):
            usage(prog, "--timeout: expected seconds in (0, 3600], got '%s'"
                  % timeout)
        o.timeout = t
    sp = ffi.new("struct kv_store **")
    e = new_err()
    if lib.kv_store_open(spec.encode(), o, sp, e) != 0:
        msg = err_text(e)
        if msg.startswith("--store:"):
            usage(prog, msg)
        fail(prog, msg)
    return ffi.gc(sp[0], lib.kv_store_close), spec


def _is_redis(store):
    spec = default_store() if store is None else str(store)
    return spec.startswith("redis://") or spec.startswith("redis-cluster://")


def _req(ns, tok, ctx):
    r = ffi.new("struct kv_chunk_req *")
    e = new_err()
    if lib.kv_ns_digest(ns, r.ns, e) != 0:
        return None, err_text(e)
    lib.kv_ctx_digest(lib.kv_ns_mask(ns),
                      ffi.cast("int32_t *", ffi.from_buffer(ctx)) if ctx.size
                      else ffi.NULL, ctx.size, r.ctx)
    tp = ffi.cast("int32_t *", ffi.from_buffer(tok)) if tok.size else ffi.NULL
    lib.kv_chunk_key(r.ns, r.ctx, tp, tok.size, r.key)
    r.tokens = tp
    r.n_tokens = tok.size
    return r, None


def put(tokens, kv, base_pos, context=None, store=None, timeout=None,
        ttl=None, pin=False, durable=False, max_size=None, max_mem=None,
        **ns_options):
    """kvchunk put --tokens T --kv KV --base-pos P0 [--context C]
    [--store SPEC] [namespace options]: store a chunk's KV [L, 2, T, Hkv,
    D] under its content key.  Returns (key, "stored" | "present" |
    "evicted").  The namespace takes the KV's dtype and geometry unless
    dtype or shape say otherwise (then they must agree).  With an MLA
    model_config (kv_lora_rank), kv is the latent chunk [L, T, Dl + R] in
    the namespace's dtype, as kvchunk put --model-config takes it."""
    import time
    from ._core import int_opt
    prog = "kvchunk put"
    p0 = int_opt(prog, "--base-pos", base_pos, 0, 2**31 - 1)
    ttl_s = int_opt(prog, "--ttl", ttl, 1, 2**31 - 1) if ttl is not None else 0
    msize = 0
    if max_size is not None:
        out = ffi.new("size_t *")
        e = new_err()
        if lib.kv_parse_size(str(max_size).encode(), out, e) != 0:
            usage(prog, err_text(e))
        msize = out[0]
    lim = _store_max_mem(prog, max_mem)
    if _is_redis(store) and (pin or msize):
        usage(prog, "%s is for dir: stores; a Redis server evicts by its own "
              "maxmemory-policy" % ("--pin" if pin else "--max-size"))
    if not _is_redis(store) and ttl_s:
        usage(prog, "--ttl is for redis:// and redis-cluster:// stores; a dir: "
              "store keeps an entry until evict or rm removes it (put "
              "--max-size bounds it)")
    a, kt = as_array(kv)
    tok = _ids(prog, "--tokens", tokens)
    if ns_options.get("model_config") is not None:
        ns, keep = _put_config_ns(prog, a, kt, tok.size, ns_options)
    else:
        ns, keep = _put_ns(prog, a, kt, tok, ns_options)
    if context is not None and lib.kv_ns_mask(ns) == 1:
        usage(prog, "--context: a chunk of --chunk-context none attended to "
              "no context; leave out --context '<array>' or use "
              "--chunk-context sys")
    ctx = _ids(prog, "--context", context) if context is not None else \
        np.zeros(0, np.int32)
    want = lib.kv_base_pos_for(ns, ctx.size)
    if want >= 0 and p0 != want:
        base = ("context", "zero", "free")[lib.kv_ns_base(ns)]
        after = base == "context" and lib.kv_ns_mask(ns) == 0
        usage(prog, "--base-pos %d: with --base-policy %s%s the chunk must be "
              "computed at %d%s" % (p0, base, " (after the context tokens)"
                                    if after else "", want,
                                    "; no --context was given: name the system "
                                    "prompt the chunk attended to"
                                    if after and context is None else ""))
    if p0 + tok.size > 2**31 - 1:
        usage(prog, "--base-pos %d: the chunk would end past position 2^31" % p0)
    from ._core import Tensor
    tx = Tensor(a)
    m = ffi.new("struct kv_blob_meta *")
    hdr = ffi.new("uint8_t **")
    e = new_err()
    tp = ffi.cast("int32_t *", ffi.from_buffer(tok)) if tok.size else ffi.NULL
    cp = ffi.cast("int32_t *", ffi.from_buffer(ctx)) if ctx.size else ffi.NULL
    if lib.kv_chunk_blob(ns, cp, ctx.size, tp, tok.size, tx.ptr, p0,
                         time.time_ns(), m, hdr, e) != 0:
        fail(prog, err_text(e))
    hdr_owner = ffi.gc(hdr[0], lib.free)
    if _is_redis(store) and lim:
        blob = m.header_len + m.payload_len
        if blob > (lim - a.nbytes) // 2:
            fail(prog, "a put to Redis needs %d bytes (the KV, and the %d-byte "
                 "blob twice: the value and the command), more than --max-mem "
                 "%d" % (a.nbytes + 2 * blob, blob, lim))
    s, _ = _open(prog, store, timeout, -1, ttl_s, durable, lim)
    existed = ffi.new("int *")
    found = ffi.new("int *")
    er = ffi.new("struct kv_evict_report *")
    if lib.kv_store_put(s, m, hdr_owner, ffi.from_buffer(a) if a.size else ffi.NULL,
                        existed, e) != 0 or \
            (pin and lib.kv_store_pin(s, m.key, 1, found, e) != 0) or \
            (msize and lib.kv_store_evict(s, msize, 0.9, er, e) != 0):
        fail(prog, err_text(e))
    hexkey = bytes(ffi.buffer(m.key, 16)).hex()
    state = "present" if existed[0] else "stored"
    if msize and er.removed:
        st = ffi.new("int[1]")
        r, err = _req(ns, tok, ctx)
        ref = ffi.new("struct kv_blob_ref *")
        why = new_err()
        if lib.kv_store_get(s, r, 1, ref, st, why, e) != 0:
            fail(prog, err_text(e))
        if st[0] != 0:
            state = "evicted"
        lib.kv_blob_ref_release(ref)
    return hexkey, state


def get(tokens, at, context=None, store=None, timeout=None, max_mem=None,
        **ns_options):
    """kvchunk get --tokens T --at POS [--context C] [--store SPEC]
    [namespace options]: the cached chunk's KV moved to position at, as a
    new array, or None on a miss (the program's exit 3)."""
    from ._core import int_opt
    prog = "kvchunk get"
    ns, keep = _namespace(prog, ns_options)
    if context is not None and lib.kv_ns_mask(ns) == 1:
        usage(prog, "--context: a chunk of --chunk-context none attended to "
              "no context; leave out --context '<array>' or use "
              "--chunk-context sys")
    pos = int_opt(prog, "--at", at, 0, 2**31 - 1)
    lim = _store_max_mem(prog, max_mem)
    tok = _ids(prog, "--tokens", tokens)
    ctx = _ids(prog, "--context", context) if context is not None else \
        np.zeros(0, np.int32)
    r, err = _req(ns, tok, ctx)
    if r is None:
        fail(prog, err)
    if pos + tok.size > 2**31 - 1:
        usage(prog, "--at %d: the chunk would end past position 2^31" % pos)
    s, _ = _open(prog, store, timeout, 0, 0, False, lim)
    ref = ffi.gc(ffi.new("struct kv_blob_ref *"), lib.kv_blob_ref_release)
    st = ffi.new("int[1]")
    why = new_err()
    e = new_err()
    if lib.kv_store_get(s, r, 1, ref, st, why, e) != 0:
        fail(prog, err_text(e))
    mt = ref.meta
    # a miss as for the program: absent, rejected, or of another shape
    # (geometry, dtype, or layout: a latent chunk for a KV namespace, KV
    # for a latent one)
    if st[0] != 0 or (mt.n_layers, mt.n_kv_heads, mt.head_dim) != (
            ns.n_layers, ns.n_kv_heads, ns.head_dim) or \
            mt.dtype != lib.kv_ns_dtype(ns) or \
            (mt.layout == LAYOUT_LATENT) != bool(lib.kv_ns_lora_rank(ns)):
        return None
    if lib.kv_rope_can_move(ffi.addressof(ns, "rope"), mt.base_pos, pos,
                            tok.size, 0, e) != 0:
        fail(prog, err_text(e))
    from ._core import _KV2NP
    rope = ffi.addressof(ns, "rope")
    if mt.layout == LAYOUT_LATENT:
        # a latent chunk [L, T, Dl + R]: c_kv copied, k_pe rotated
        out = np.empty((mt.n_layers, mt.n_tokens, mt.head_dim),
                       dtype=_KV2NP[mt.dtype])
        c = ffi.new("struct kv_latent_chunk *")
        c.n_layers, c.n_tokens, c.dtype = mt.n_layers, mt.n_tokens, mt.dtype
        c.kv_lora_rank = mt.head_dim - rope.head_dim
        c.rope_dim = rope.head_dim
        if out.size and lib.kv_latent_move(rope, c, pos - mt.base_pos,
                                           ref.payload, ffi.from_buffer(out),
                                           mt.n_tokens, 0, e) != 0:
            fail(prog, err_text(e))
        return out
    out = np.empty((mt.n_layers, 2, mt.n_tokens, mt.n_kv_heads, mt.head_dim),
                   dtype=_KV2NP[mt.dtype])
    c = ffi.new("struct kv_rope_chunk *")
    c.n_layers, c.n_tokens = mt.n_layers, mt.n_tokens
    c.n_kv_heads, c.head_dim, c.dtype = mt.n_kv_heads, mt.head_dim, mt.dtype
    if out.size and lib.kv_rope_move_kv(ffi.addressof(ns, "rope"), c,
                                        pos - mt.base_pos, ref.payload,
                                        ffi.from_buffer(out), mt.n_tokens, 0,
                                        e) != 0:
        fail(prog, err_text(e))
    return out


def info(format="json", max_mem=None, **ns_options):
    """kvchunk info [namespace options]: what kvchunk understood of the
    model, as the dict -f json prints (the model_config's model_type,
    heads, max_position_embeddings and sliding_window when one is given,
    then layers, kv_heads, head_dim, dtype, rope, bytes_per_token and
    ns_digest); format="text" gives the text report as a str.  max_mem is
    checked and unused, as by the program."""
    prog = "kvchunk info"
    _store_max_mem(prog, max_mem)
    if format not in ("text", "json"):
        usage(prog, "-f: expected text or json, got '%s'" % format)
    for k in ns_options:
        if k not in _NS_KEYS:
            raise TypeError("unexpected keyword argument '%s'" % k)
    ns, keep, have_shape, _ = _namespace_parsed(prog, ns_options)
    if not have_shape:
        usage(prog, "--model-config FILE or --shape L,HKV,D is required")
    e = new_err()
    if lib.kv_ns_check(ns, e) != 0:
        usage(prog, err_text(e))
    out = {}
    cfg = ns_options.get("model_config")
    if cfg is not None:
        m = ffi.new("struct kv_model *")
        if lib.kv_model_load(str(cfg).encode(), 0, m, e) < 0:
            fail(prog, err_text(e))
        mt = ffi.string(m.model_type).decode("utf-8", "replace")
        out.update(model_config=str(cfg), model_type=mt or "-",
                   heads=m.n_heads, max_position_embeddings=m.max_pos,
                   sliding_window=m.sliding_window)
    rope = ffi.new("char[]", 4096)
    d = ffi.new("uint8_t[16]")
    if lib.kv_rope_describe(ffi.addressof(ns, "rope"), rope, 4096) < 0 or \
            lib.kv_ns_digest(ns, d, e) < 0:
        fail(prog, "cannot describe the namespace")
    g = ffi.new("struct kv_model *")
    g.n_layers, g.n_kv_heads, g.head_dim = ns.n_layers, ns.n_kv_heads, \
        ns.head_dim
    lora = lib.kv_ns_lora_rank(ns)
    g.kv_lora_rank = lora
    g.qk_rope_head_dim = ns.head_dim - lora if lora else 0
    dt = lib.kv_ns_dtype(ns)
    out.update(layers=ns.n_layers, kv_heads=ns.n_kv_heads,
               head_dim=ns.head_dim, dtype=_dt_name(dt),
               rope=ffi.string(rope).decode("utf-8", "replace"),
               bytes_per_token=lib.kv_model_bytes_per_token(
                   g, lib.kv_dtype_size(dt)),
               ns_digest=bytes(ffi.buffer(d, 16)).hex())
    if format == "json":
        return out
    return "".join("%s: %s\n" % kv for kv in out.items())


@ffi.def_extern()
def kv_py_ls_entry(ctx, en):
    """kv_store_ls's callback: one entry into the list ctx holds."""
    ffi.from_handle(ctx).append(dict(
        key=bytes(ffi.buffer(en.key, 16)).hex(), tokens=en.n_tokens,
        bytes=en.bytes, base_pos=en.base_pos, hits=en.hits,
        pinned=bool(en.pinned), last_access=en.last_access))
    return 0


_store_max_mem = max_mem      # --max-mem as every program reads it


def ls(store=None, timeout=None, max_mem=None):
    """kvchunk ls [--store SPEC]: the store's entries as a list of dicts
    with the program's columns: key (32 hex digits), tokens, bytes,
    base_pos, hits, pinned (a bool) and last_access (unix seconds, a
    float; 0 = unknown), in the program's order."""
    prog = "kvchunk ls"
    lim = _store_max_mem(prog, max_mem)
    s, _ = _open(prog, store, timeout, 1, lim=lim)
    out = []
    h = ffi.new_handle(out)
    e = new_err()
    if lib.kv_store_ls(s, lib.kv_py_ls_entry, h, e) < 0:
        fail(prog, err_text(e))
    return out


STAT_NAMES = ("entries", "bytes", "hits", "misses", "evictions",
              "collisions_rejected", "checksum_failures", "puts")


def stat(store=None, timeout=None, format="json", max_mem=None):
    """kvchunk stat [--store SPEC]: the store's counters as the dict -f
    json prints (entries, bytes, hits, misses, evictions,
    collisions_rejected, checksum_failures, puts); format="text" gives
    the text report as a str."""
    prog = "kvchunk stat"
    if format not in ("text", "json"):
        usage(prog, "-f: expected text or json, got '%s'" % format)
    lim = _store_max_mem(prog, max_mem)
    s, _ = _open(prog, store, timeout, 1, lim=lim)
    st = ffi.new("struct kv_store_stats *")
    e = new_err()
    if lib.kv_store_stat(s, st, e) < 0:
        fail(prog, err_text(e))
    v = (st.entries, st.bytes, st.hits, st.misses, st.evictions,
         st.collisions, st.checksum_failures, st.puts)
    out = dict(zip(STAT_NAMES, v))
    if format == "json":
        return out
    return "".join("%s: %d\n" % kv for kv in out.items())


from ._kvchunk_split import split    # noqa: E402 (uses the helpers above)
from ._kvchunk_store import evict, fsck, rm, pin, unpin  # noqa: E402
from ._kvchunk_sim import sim, sim_gen, sim_from_split, toy  # noqa: E402
__all__ += ["sim", "sim_gen", "sim_from_split", "toy"]
from ._kvchunk_assemble import assemble, slice, selftest_rope  # noqa: E402
__all__ += ["assemble", "slice", "selftest_rope"]
