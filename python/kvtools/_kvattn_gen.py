"""kvattn gen in-process: the deterministic synthetic Q, K, V of
lib/attn/gen (kv_gen_qkv), with --shape B,H,S,D or --model-config and
--shape B,S, the toy projection of kvchunk (--toy, lib/chunk/toy), and an
MLA config's set of both forms' inputs (what --dir receives, lib/attn
kv_mla_gen_*), as numpy arrays."""
import math
import os

import numpy as np

from ._core import (ffi, lib, new_err, err_text, usage, fail, take_tensor,
                    int_list, int_opt, arg_int, _text)

PROG = "kvattn"
SUB = "kvattn gen"
I32_MAX = 2**31 - 1


# the argtable integer options, as argtable names them in its messages
_ARG_INT = {"--kv-heads": "--kv-heads=H", "--kv-len": "--kv-len=N",
            "--sinks": "--sinks=N", "-j": "-j N", "--layers": "--layers=L",
            "--layer": "--layer=l", "--embed-dim": "--embed-dim=E",
            "--rotary-dim": "--rotary-dim=R", "--block-size": "--block-size=N"}


def _int_arg(opt, v):
    """An argtable integer option: any int the program's parser takes,
    refused with argtable's messages."""
    return arg_int(SUB, _ARG_INT[opt], v)


def _geometry(shape, model_config, kv_heads, s):
    """gen_geometry: B, H, S, D and the KV heads into s; the model or None."""
    m = None
    if model_config is not None:
        m = ffi.new("struct kv_model *")
        e = new_err()
        if lib.kv_model_load(os.fsencode(model_config), 0, m, e) < 0:
            usage(SUB, "--model-config: %s" % err_text(e))
        if m.kv_lora_rank:
            usage(SUB, "--model-config: %s: an MLA model (kv_lora_rank %d); "
                  "gen makes per-head Q, K, V" % (os.fsdecode(model_config),
                                                  m.kv_lora_rank))
    if shape is None:
        usage(SUB, "--shape B,S is required" if m is not None
              else "--shape B,H,S,D is required")
    sh = int_list(SUB, "--shape", shape, 1, I32_MAX)
    if len(sh) == 2 and m is not None:
        s.B, s.Lq = int(sh[0]), int(sh[1])
        s.Hq, s.D, s.Hkv = m.n_heads, m.head_dim, m.n_kv_heads
    elif len(sh) == 4:
        s.B, s.Hq, s.Lq, s.D = (int(x) for x in sh)
        s.Hkv = m.n_kv_heads if m is not None else s.Hq
        if m is not None and not kv_heads and s.Hq % s.Hkv:
            usage(SUB, "--shape: %d query heads are not a multiple of the %d "
                  "KV heads of '%s'; give --kv-heads" % (s.Hq, s.Hkv,
                                                          os.fsdecode(model_config)))
    else:
        usage(SUB, ("--shape: expected B,S or B,H,S,D, got '%s'" if m is not None
                    else "--shape: expected B,H,S,D (4 numbers), got '%s'")
              % _text(shape))
    s.Lk = s.Lq
    if kv_heads:
        if kv_heads < 1 or s.Hq % kv_heads:
            usage(SUB, "--kv-heads: expected a divisor of %d, got %d" % (s.Hq, kv_heads))
        s.Hkv = kv_heads
    return m


def gen(shape=None, model_config=None, kv_heads=None, kv_len=None,
        pattern=None, seed=None, sinks=None, dtype=None, layout=None,
        j=None, max_mem=None, toy=False, tokens=None, pos=None, layers=None,
        layer=None, embed_dim=None, rope=None, rope_theta=None,
        rotary_dim=None, kv=False, block_size=None):
    """kvattn gen: deterministic synthetic Q, K, V with the structures of
    real attention (pattern random, rope, local, sink, stripes or mix, the
    default).  shape is B,H,S,D, or B,S with model_config (config.json:
    heads, KV heads, head size and dtype; a full B,H,S,D overrides H and
    D).  Returns {"q": Q, "k": K, "v": V}, the arrays the program writes
    to -q, -k and -v, bhsd [B, H, S, D] or thd [B*S, H, D]; bf16 as the
    package's bf16 dtype.

    toy=True is --toy, the toy projection of kvchunk: token ids (tokens:
    a file as --tokens reads it, or a list or array of ints) at positions
    pos, pos + 1, ... of layer `layer` of a layers-layer model (embed_dim,
    rope, rope_theta, rotary_dim; shape 1,H,T,D); kv=True also returns
    "kv", the whole [L, 2, T, Hkv, D] KV that --kv writes.

    With an MLA model's config (one with kv_lora_rank), shape is B,S or
    B,H,S and the result is what the program writes into --dir, keyed by
    file name without .npy, in the program's order: q, q_absorbed, c_kv,
    k_pe, w_uk, w_uv, kv_cache, block_table; seq_lens and q_lens as int64
    arrays of B values (kv_len, S) and scale (the model's softmax scale) a
    float; and for a config with DeepSeek-V3.2's indexer index_q, index_k,
    index_weights and index_topk (an int).  kv_len, block_size (default
    64), seed, dtype (f32, f16 or bf16; default the config's) and max_mem
    apply; the per-head options are refused, as the program refuses
    them."""
    _refuse_empty(shape=shape, model_config=model_config, kv_heads=kv_heads,
                  kv_len=kv_len, pattern=pattern, seed=seed, sinks=sinks,
                  dtype=dtype, layout=layout, max_mem=max_mem, tokens=tokens,
                  pos=pos, layers=layers, layer=layer, embed_dim=embed_dim,
                  rope=rope, rope_theta=rope_theta, rotary_dim=rotary_dim,
                  block_size=block_size)
    # argtable reads its integers before the program checks anything
    kv_heads, kv_len, sinks, j, layers, layer, embed_dim, rotary_dim, \
        block_size = (None if v is None else _int_arg(o, v) for o, v in (
            ("--kv-heads", kv_heads), ("--kv-len", kv_len), ("--sinks", sinks),
            ("-j", j), ("--layers", layers), ("--layer", layer),
            ("--embed-dim", embed_dim), ("--rotary-dim", rotary_dim),
            ("--block-size", block_size)))
    kvh = kv_heads if kv_heads is not None else 0
    mla = _mla_probe(model_config)
    if mla == 1:
        _mla_refuse_unused(kv_heads, pattern, sinks, layout, j, toy,
                           (tokens, pos, layers, layer, embed_dim, rope,
                            rope_theta, rotary_dim), kv)
        return _mla(model_config, shape, kv_len, block_size, seed, dtype,
                    max_mem)
    if mla == 0 and block_size is not None:
        _int_arg("--block-size", block_size)
        usage(SUB, "--dir and --block-size need an MLA --model-config")
    s = ffi.new("struct kv_gen_spec *")
    m = _geometry(shape, model_config, kvh, s)
    e = new_err()
    if kv_len is not None:
        n = _int_arg("--kv-len", kv_len)
        if n < s.Lq:
            usage(SUB, "--kv-len: expected at least S = %d, got %d" % (s.Lq, n))
        s.Lk = n
    s.pattern = lib.KV_GEN_MIX
    if pattern is not None:
        p = ffi.new("enum kv_gen_pattern *")
        if lib.kv_gen_pattern_parse(_text(pattern).encode(), p, e):
            usage(SUB, "--pattern: %s" % err_text(e))
        s.pattern = p[0]
    if seed is not None:
        s.seed = int_opt(SUB, "--seed", seed, 0, 2**63 - 1)
    if sinks is not None:
        n = _int_arg("--sinks", sinks)
        if n < 1:
            usage(SUB, "--sinks: expected at least 1, got %d" % n)
        s.n_sink = n
    s.dtype = m.dtype if m is not None and m.have_dtype else lib.KV_F32
    if dtype is not None:
        out = ffi.new("enum kv_dtype *")
        if lib.kv_dtype_parse(_text(dtype).encode(), out, e) or \
                out[0] not in (lib.KV_F32, lib.KV_F16, lib.KV_BF16, lib.KV_F64):
            usage(SUB, "--dtype: expected f32, f16, bf16 or f64, got '%s'" % _text(dtype))
        s.dtype = out[0]
    if j is not None:
        n = _int_arg("-j", j)
        if n < 0 or n > 1024:
            usage(SUB, "-j: expected a thread count in 0..1024, got %d" % n)
        s.n_threads = n
    if layout is not None and _text(layout) != "bhsd":
        if _text(layout) != "thd":
            usage(SUB, "--layout: expected bhsd or thd, got '%s'" % _text(layout))
        s.thd = 1
    mm = ffi.new("size_t *")
    if lib.kv_parse_max_mem(_text(max_mem).encode() if max_mem is not None
                            else ffi.NULL, mm, e):
        usage(SUB, err_text(e))
    s.max_bytes = mm[0]
    toy_opts = (tokens, pos, layers, layer, embed_dim, rope, rope_theta,
                rotary_dim)
    if toy:
        return _toy(s, m, kv_len, pattern, sinks, toy_opts, kv)
    if any(x is not None for x in toy_opts) or kv:
        usage(SUB, "--tokens, --pos, --layers, --layer, --embed-dim, --rope*, "
              "--kv need --toy")
    q = ffi.new("struct kv_tensor *")
    k = ffi.new("struct kv_tensor *")
    v = ffi.new("struct kv_tensor *")
    if lib.kv_gen_qkv(s, q, k, v, e):
        for t in (q, k, v):
            lib.kv_tensor_release(t)
        fail(PROG, err_text(e))
    return {"q": take_tensor(q), "k": take_tensor(k), "v": take_tensor(v)}


def _refuse_empty(**given):
    """An option given as "" is refused before any other check, as the
    program refuses --NAME '' (the keywords in the order --help lists
    them)."""
    for key, v in given.items():
        if isinstance(v, (str, bytes)) and len(v) == 0:
            usage(SUB, "--%s: expected a value, got an empty one"
                  % key.replace("_", "-"))


def _toy_layout(src, thd):
    """[T, H, D] -> bhsd [1, H, T, D] or thd [T, H, D], as gen lays it."""
    return src.copy() if thd else \
        np.ascontiguousarray(src.transpose(1, 0, 2)[None])


def _toy_tokens(tokens, lim):
    if isinstance(tokens, (str, bytes, os.PathLike)):
        t = ffi.new("struct kv_tokens *")
        e = new_err()
        if lib.kv_tokens_load(os.fsencode(tokens), lim, t, e):
            fail(PROG, err_text(e))
        ids = np.frombuffer(ffi.buffer(t.ids, 4 * t.n), np.int32).copy() \
            if t.n else np.zeros(0, np.int32)
        lib.kv_tokens_release(t)
        return ids
    a = np.asarray(tokens)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        fail(PROG, "tokens: expected a 1-d list of integer token ids")
    if a.size and (a.min() < 0 or a.max() > I32_MAX):
        fail(PROG, "tokens: token ids must be in 0 .. 2^31 - 1")
    return np.ascontiguousarray(a, np.int32)


def _toy(s, model, kv_len, pattern, sinks, o, want_kv):
    """gen_toy and run_toy: the checks in the program's order, then the
    toy's Q of one layer and its K, V (and the whole KV)."""
    tokens, pos, layers, layer, embed_dim, rope, rope_theta, rotary_dim = o
    e = new_err()
    if tokens is None:
        usage(SUB, "--toy needs --tokens FILE")
    if s.B != 1 or kv_len is not None or pattern is not None or sinks is not None:
        usage(SUB, "--toy: --shape must be 1,H,T,D; --kv-len, --pattern and "
              "--sinks do not apply")
    n_layers = _int_arg("--layers", layers) if layers is not None else \
        (model.n_layers if model is not None and model.n_layers else 1)
    lay = _int_arg("--layer", layer) if layer is not None else 0
    embed = _int_arg("--embed-dim", embed_dim) if embed_dim is not None else 32
    if n_layers < 1 or lay < 0 or lay >= n_layers:
        usage(SUB, "--layer: expected 0..%d, got %d" % (n_layers - 1, lay))
    if embed < 1:
        usage(SUB, "--embed-dim: expected at least 1, got %d" % embed)
    p0 = int_opt(SUB, "--pos", pos, 0, I32_MAX) if pos is not None else 0
    toy = ffi.new("struct kv_toy *")
    lib.kv_toy_init(toy, n_layers, s.Hq, s.Hkv, s.D)
    lib.kv_rope_init(ffi.addressof(toy, "rope"), s.D)
    if model is not None and model.n_layers:
        toy.rope = model.rope
    if rope is not None:
        st = ffi.new("enum kv_rope_style *")
        if lib.kv_rope_parse_style(_text(rope).encode(), st, e):
            usage(SUB, "--rope: %s" % err_text(e))
        toy.rope.style = st[0]
    if rope_theta is not None:
        th = float(rope_theta)
        if not (th > 1.0) or not math.isfinite(th):
            usage(SUB, "--rope-theta: expected a number > 1, got %g" % th)
        toy.rope.theta = th
    if rotary_dim is not None:
        toy.rope.rotary_dim = _int_arg("--rotary-dim", rotary_dim)
    if lib.kv_rope_check(ffi.addressof(toy, "rope"), e):
        usage(SUB, "--rope: %s" % err_text(e))
    toy.seed = s.seed
    toy.embed_dim = embed
    if lib.kv_toy_check(toy, e):
        usage(PROG, "--toy: %s" % err_text(e))
    es = lib.kv_dtype_size(s.dtype)
    T = s.Lq
    if s.max_bytes:
        need = float(es) * T * s.D * (2.0 * n_layers * s.Hkv + 2.0 * s.Hq +
                                      2.0 * s.Hkv)
        if need > s.max_bytes:
            fail(PROG, "--toy needs %.0f bytes, more than the limit of %d "
                 "(--max-mem)" % (need, s.max_bytes))
    ids = _toy_tokens(tokens, s.max_bytes)
    if len(ids) != T:
        fail(PROG, "--tokens: %d token ids, --shape says %d" % (len(ids), T))
    if p0 + len(ids) > I32_MAX:
        fail(PROG, "--pos %d: the tokens would end past 2^31" % p0)
    posv = np.arange(p0, p0 + len(ids), dtype=np.int64)
    tp = ffi.cast("const int32_t *", ffi.from_buffer(ids)) if ids.size else ffi.NULL
    pp = ffi.cast("const int64_t *", ffi.from_buffer(posv)) if posv.size else ffi.NULL
    kvt = ffi.new("struct kv_tensor *")
    qt = ffi.new("struct kv_tensor *")
    if lib.kv_toy_kv(toy, tp, pp, len(ids), s.dtype, s.max_bytes, kvt, e) or \
            lib.kv_toy_q(toy, tp, pp, len(ids), lay, s.dtype, s.max_bytes, qt, e):
        lib.kv_tensor_release(kvt)
        lib.kv_tensor_release(qt)
        fail(PROG, err_text(e))
    kva = take_tensor(kvt)
    qa = take_tensor(qt)
    out = {"q": _toy_layout(qa, s.thd),
           "k": _toy_layout(kva[lay, 0], s.thd),
           "v": _toy_layout(kva[lay, 1], s.thd)}
    if want_kv:
        out["kv"] = kva
    return out


# The options an MLA config does not use, in the order the program checks
# them (-q, -k, -v, -f and --force have no keyword here).
_MLA_UNUSED = ("--kv-heads", "--pattern", "--sinks", "--layout", "-j",
               "--toy", "--tokens", "--pos", "--layers", "--layer",
               "--embed-dim", "--rope", "--rope-theta", "--rotary-dim",
               "--kv")
_MLA_INTS = {"--sinks", "-j", "--layers", "--layer", "--embed-dim",
             "--rotary-dim"}


def _mla_probe(model_config):
    """Is model_config an MLA model's (kv_lora_rank)?  1, 0, or -1 when it
    does not read as JSON (the per-head path then says why)."""
    if model_config is None:
        return 0
    return lib.kv_latent_probe(os.fsencode(model_config), 0, new_err())


def _mla_refuse_unused(kv_heads, pattern, sinks, layout, j, toy, toy_opts, kv):
    given = (kv_heads, pattern, sinks, layout, j, toy or None) + \
        tuple(toy_opts) + (kv or None,)
    for opt, v in zip(_MLA_UNUSED, given):      # argtable's own checks first
        if v is not None and opt in _MLA_INTS:
            _int_arg(opt, v)
    for opt, v in zip(_MLA_UNUSED, given):
        if v is not None:
            usage(SUB, "%s: not used with an MLA --model-config, which writes "
                  "its inputs into --dir (kvattn(1), MLA)" % opt)


def _mla(model_config, shape, kv_len, block_size, seed, dtype, max_mem):
    """mla_gen of the program: the config, the options checked against it
    (kv_mla_gen_prepare), the indexer's fields, then the set's arrays."""
    e = new_err()
    cfg = ffi.new("char[]", os.fsencode(model_config))
    lat = ffi.new("struct kv_latent *")
    if lib.kv_latent_load_attn(cfg, 0, lat, e):
        usage(SUB, "--model-config: %s" % err_text(e))
    keep = []

    def text(v):
        if v is None:
            return ffi.NULL
        keep.append(ffi.new("char[]", _text(v).encode()))
        return keep[-1]
    a = ffi.new("struct kv_mla_gen_args *")
    a.config = cfg
    a.shape, a.seed, a.dtype, a.max_mem = (text(shape), text(seed),
                                           text(dtype), text(max_mem))
    a.kv_len = _int_arg("--kv-len", kv_len) if kv_len is not None else 0
    a.block_size = _int_arg("--block-size", block_size) \
        if block_size is not None else 64
    p = ffi.new("struct kv_mla_gen_plan *")
    if lib.kv_mla_gen_prepare(lat, a, p, e):
        usage(SUB, err_text(e))
    if lib.kv_mla_index_fields(cfg, ffi.addressof(p[0], "index"), e):
        usage(SUB, "--model-config: %s" % err_text(e))
    st = ffi.new("struct kv_mla_gen_set *")
    if lib.kv_mla_gen_make(p, st, e):
        fail(PROG, err_text(e))
    out = {}
    B, S, Lk = p.g.B, p.g.S, p.g.Lk
    try:
        for i in range(lib.kv_mla_gen_n_files(p)):
            name = ffi.string(lib.kv_mla_gen_files[i]).decode()
            t = lib.kv_mla_gen_tensor(st, i)
            if t != ffi.NULL:
                out[name[:-4]] = take_tensor(ffi.cast("struct kv_tensor *", t))
            elif name in ("seq_lens", "q_lens"):
                out[name] = np.full(B, Lk if name == "seq_lens" else S, np.int64)
            elif name == "scale":
                out[name] = float(p.scale)
            else:
                out[name] = int(p.index.topk)
    finally:
        lib.kv_mla_gen_release(st)
    return out
