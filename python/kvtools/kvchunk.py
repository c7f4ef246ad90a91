"""kvchunk in-process: a chunk's content key (kvchunk key) and the RoPE
move of a chunk's KV (what kvchunk get --at does to a stored chunk).

    kvchunk.key([101, 7, 42], shape="32,8,128", model="llama-3.1-8b")
    moved = kvchunk.rope_move(kv, base_pos=0, at=512, rope_theta=500000)

The namespace keywords are kvchunk's namespace options (model_config,
model, tokenizer, lora, salt, dtype, shape, rope, rope_theta, rotary_dim,
rope_scaling, nope_layers, chunk_context, base_policy), with its defaults.
"""
import numpy as np

from ._core import (Error, as_array, ffi, lib, new_err, err_text, usage, fail)

__all__ = ["key", "rope_move"]

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
