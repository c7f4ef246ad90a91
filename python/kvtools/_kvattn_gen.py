"""kvattn gen in-process: the deterministic synthetic Q, K, V of
lib/attn/gen (kv_gen_qkv), with --shape B,H,S,D or --model-config and
--shape B,S, as numpy arrays.  The toy projection (--toy) and an MLA
config's --dir set are not here."""
from ._core import (ffi, lib, new_err, err_text, usage, fail, take_tensor,
                    int_list, int_opt, _text)

PROG = "kvattn"
SUB = "kvattn gen"
I32_MAX = 2**31 - 1


def _int_arg(opt, v):
    """An argtable integer option: any int the program's parser takes."""
    return int_opt(SUB, opt, v, -2**31, I32_MAX)


def _geometry(shape, model_config, kv_heads, s):
    """gen_geometry: B, H, S, D and the KV heads into s; the model or None."""
    m = None
    if model_config is not None:
        m = ffi.new("struct kv_model *")
        e = new_err()
        if lib.kv_model_load(str(model_config).encode(), 0, m, e) < 0:
            usage(SUB, "--model-config: %s" % err_text(e))
        if m.kv_lora_rank:
            raise NotImplementedError(
                "kvtools.kvattn.gen: an MLA --model-config writes its inputs "
                "into --dir; run kvattn gen for it")
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
                  "KV heads of '%s'; give --kv-heads" % (s.Hq, s.Hkv, model_config))
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
        pattern=None, seed=None, sinks=None, dtype=None, layout="bhsd",
        j=None, max_mem=None):
    """kvattn gen: deterministic synthetic Q, K, V with the structures of
    real attention (pattern random, rope, local, sink, stripes or mix, the
    default).  shape is B,H,S,D, or B,S with model_config (config.json:
    heads, KV heads, head size and dtype; a full B,H,S,D overrides H and
    D).  Returns {"q": Q, "k": K, "v": V}, the arrays the program writes
    to -q, -k and -v, bhsd [B, H, S, D] or thd [B*S, H, D]; bf16 as the
    package's bf16 dtype."""
    kvh = _int_arg("--kv-heads", kv_heads) if kv_heads is not None else 0
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
        usage(SUB, "--max-mem: %s" % err_text(e))
    s.max_bytes = mm[0]
    q = ffi.new("struct kv_tensor *")
    k = ffi.new("struct kv_tensor *")
    v = ffi.new("struct kv_tensor *")
    if lib.kv_gen_qkv(s, q, k, v, e):
        for t in (q, k, v):
            lib.kv_tensor_release(t)
        fail(PROG, err_text(e))
    return {"q": take_tensor(q), "k": take_tensor(k), "v": take_tensor(v)}
