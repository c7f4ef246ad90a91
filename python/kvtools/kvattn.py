"""kvattn in-process: reference attention, LSE merge, comparison and the
error bound (kvattn run, paged, merge, cmp, bound), and synthetic inputs
(kvattn gen).

    out, lse = kvattn.run(q, k, v, causal=True)
    b = kvattn.bound(q, k, v)                  # kvattn bound --all

Inputs are numpy arrays (or torch CPU tensors, or anything with
__array__) and are read in place when C-ordered; outputs are numpy arrays
over the buffers libkv filled.
"""
import math

import numpy as np

from ._core import (Error, Tensor, ffi, lib, new_err, err_text, usage, fail,
                    int_list, float_opt, max_mem as _max_mem, take_tensor,
                    as_array, arg_int)

__all__ = ["run", "paged", "mla", "merge", "cmp", "bound", "quant", "index",
           "gen"]

PROG = "kvattn"
RUN = "kvattn run"          # usage errors name the subcommand
LOG2E = 1.4426950408889634074
LN2 = 0.69314718055994530942


def _out_dtype(opt, s, prog):
    if s is None:
        return lib.KV_NDTYPES
    s = np.dtype(s).name if not isinstance(s, str) else s
    e = new_err()
    out = ffi.new("enum kv_dtype *")
    if lib.kv_dtype_parse(s.encode(), out, e) != 0 or out[0] not in (
            lib.KV_F32, lib.KV_F16, lib.KV_BF16, lib.KV_F64):
        usage(prog, "%s: expected f32, f16, bf16 or f64, got '%s'" % (opt, s))
    return out[0]


def _threads(jobs, prog):
    if jobs is None:
        return 0
    if not isinstance(jobs, int) or jobs < 0 or jobs > 1024:
        usage(prog, "-j: expected a thread count in 0..1024, got %s" % jobs)
    return jobs


def _lse_base(s, prog):
    s = str(s)
    if s == "e":
        return False
    if s == "2":
        return True
    usage(prog, "--lse-base: expected e or 2, got '%s'" % s)


def _scaled(a, f):
    """(float)(x * f) per element, as the program scales an LSE."""
    if a.dtype == np.float32:
        return (a.astype(np.float64) * f).astype(np.float32)
    return a * f


def run(q, k=None, v=None, layout="bhsd", causal=False, window=None,
        mask=None, mask_keep=False, mask_binary=False, block_mask=None,
        block_size=None, q_lens=None, kv_lens=None, kv_cache=None,
        block_table=None, seq_lens=None, scale=None, lse_base="e",
        out_dtype=None, jobs=None, max_mem=None, tile_q=None, tile_k=None,
        scalar=False, no_p_round=False, lse=True, softcap=None, alibi=False,
        alibi_slopes=None, sinks=None, kv_dtype=None, k_scale=None,
        v_scale=None, chunk_size=None):
    """kvattn run: O = softmax(scale Q K^T + mask) V.  Returns (out, lse)
    (lse=False: out alone, and the LSE is not computed).  The variants:
    softcap (s = C tanh(s / C)), alibi or alibi_slopes ([Hq]), sinks ([Hq]);
    kv_dtype "fp8_e4m3"/"fp8_e5m2" reads k and v (or the paged cache) as
    FP8 bytes (u8) with k_scale and v_scale."""
    # argtable reads its integers before the program checks anything
    window, chunk_size, block_size, jobs, tile_q, tile_k = (
        None if x is None else arg_int(RUN, o, x) for o, x in (
            ("--window=W", window), ("--chunk-size=C", chunk_size),
            ("--block-size=BS", block_size), ("-j N", jobs),
            ("--tile-q=N", tile_q), ("--tile-k=N", tile_k)))
    if layout == "thd":
        thd = True
    elif layout == "bhsd":
        thd = False
    else:
        usage(RUN, "--layout: expected bhsd or thd, got '%s'" % layout)
    if kv_cache is not None:
        if k is not None or v is not None:
            usage(RUN, "--kv-cache replaces -k/-v")
        if block_table is None or seq_lens is None:
            usage(RUN, "--kv-cache needs --block-table and --seq-lens")
    elif k is None or v is None:
        usage(RUN, "-k FILE and -v FILE are required (or --kv-cache)")
    elif block_table is not None:
        usage(RUN, "--block-table needs --kv-cache")
    r = ffi.new("struct kv_attn_req *")
    r.layout = lib.KV_ATTN_THD if thd else lib.KV_ATTN_BHSD
    r.causal = 1 if causal else 0
    if window is not None:
        if not isinstance(window, (int, np.integer)) or window < 1:
            usage(RUN, "--window: expected a window of at least 1 key, got %s"
                  % window)
        r.window = int(window)
    if chunk_size is not None:
        if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            usage(RUN, "--chunk-size: expected a chunk of at least 1 key, got %s"
                  % chunk_size)
        r.chunk = int(chunk_size)
    if (mask_keep or mask_binary) and mask is None:
        usage(RUN, "%s needs --mask" % ("--mask-keep" if mask_keep
                                         else "--mask-binary"))
    if mask_keep and mask_binary:
        usage(RUN, "--mask-keep and --mask-binary exclude each other (with "
              "--mask-keep a float mask is read as nonzero = keep)")
    if block_mask is not None and block_size is None:
        usage(RUN, "--block-mask needs --block-size")
    if block_size is not None:
        if block_mask is None:
            usage(RUN, "--block-size needs --block-mask")
        if block_size < 1:
            usage(RUN, "--block-size: expected at least 1, got %d" % block_size)
        r.block_size = int(block_size)
    keep = []

    def lens(opt, x):
        a = int_list(RUN, opt, x, -(2**63), 2**63 - 1, empty_ok=True)
        keep.append(a)
        return (ffi.cast("int64_t *", ffi.from_buffer(a)) if len(a) else
                ffi.NULL), len(a)

    if q_lens is not None:
        r.q_lens, r.n_q_lens = lens("--q-lens", q_lens)
    if kv_lens is not None:
        r.kv_lens, r.n_kv_lens = lens("--kv-lens", kv_lens)
    if seq_lens is not None:
        r.seq_lens, r.n_seq_lens = lens("--seq-lens", seq_lens)
    if (q_lens is not None or kv_lens is not None) and not thd:
        usage(RUN, "--q-lens/--kv-lens need --layout thd")
    if scale is not None:
        s = float(scale)
        if not math.isfinite(s):
            usage(RUN, "--scale: expected a finite number, got %g" % s)
        r.has_scale = 1
        r.scale = s
    fp8 = _variants(r, softcap, alibi, alibi_slopes, kv_dtype, k_scale,
                    v_scale)
    base2 = _lse_base(lse_base, RUN)
    r.out_dtype = _out_dtype("--out-dtype", out_dtype, RUN)
    r.n_threads = _threads(jobs, RUN)
    r.max_bytes = _max_mem(RUN, max_mem)
    if tile_q is not None:
        if not 1 <= tile_q <= 4096:
            usage(RUN, "--tile-q: expected 1..4096, got %d" % tile_q)
        r.tile_q = tile_q
    if tile_k is not None:
        if not 1 <= tile_k <= 65536:
            usage(RUN, "--tile-k: expected 1..65536, got %d" % tile_k)
        r.tile_k = tile_k
    r.scalar = 1 if scalar else 0
    r.p_f32 = 1 if no_p_round else 0
    r.mask_keep = 1 if mask_keep else 0
    r.mask_binary = 1 if mask_binary else 0
    tq = Tensor(q, "q")
    if tq.array.ndim == (4 if thd else 3):
        sh = "(%s)" % ", ".join(str(n) for n in tq.array.shape)
        if thd:
            fail(PROG, "query shape %s: --layout thd takes Q [T, Hq, D]; a "
                 "[B, Hq, Lq, D] query is the default layout bhsd (drop "
                 "--layout thd)" % sh)
        fail(PROG, "query shape %s: the layout is bhsd (the default), Q [B, "
             "Hq, Lq, D]; for Q [T, Hq, D] give --layout thd" % sh)
    r.q = tq.ptr
    if fp8 is not None:
        if kv_cache is not None:
            # the bytes go to the library as kvattn run gives them: its
            # decode kernels read them, other shapes dequantize there
            a, kt = as_array(kv_cache)
            if kt != lib.KV_U8:
                fail(PROG, "'kv_cache': an FP8 cache is stored as u8 (man 5 "
                     "kvnpy), got %s" % _dtname(kt))
            r.kv_fp8 = int(fp8[0]) + 1
            r.k_scale, r.v_scale = fp8[1], fp8[2]
        else:
            k = _fp8_values("k", k, (fp8[0], fp8[1], fp8[1]))
            v, r.v_exp = _fp8_v_values("v", v, fp8)
    if kv_cache is not None:
        tc = Tensor(kv_cache, "kv_cache")
        r.kv_cache = tc.ptr
        keep.append(tc)
        bt = np.ascontiguousarray(np.asarray(block_table, dtype=np.int64))
        if bt.ndim == 1:
            bt = bt.reshape(1, -1)
        keep.append(bt)
        r.block_table = ffi.cast("int64_t *", ffi.from_buffer(bt)) if bt.size else ffi.NULL
        r.bt_rows, r.bt_cols = bt.shape
    else:
        tk, tv = Tensor(k, "k"), Tensor(v, "v")
        keep += [tk, tv]
        r.k, r.v = tk.ptr, tv.ptr
    if mask is not None:
        tm = Tensor(mask, "mask")
        keep.append(tm)
        r.mask = tm.ptr
    if block_mask is not None:
        tb = Tensor(block_mask, "block_mask")
        keep.append(tb)
        r.block_mask = tb.ptr
    for name, x in (("sinks", sinks), ("alibi_slopes", alibi_slopes)):
        if x is not None:
            tx = Tensor(x, name)
            keep.append(tx)
            setattr(r, name, tx.ptr)
    out = ffi.new("struct kv_tensor *")
    lt = ffi.new("struct kv_tensor *") if lse else ffi.NULL
    e = new_err()
    if lib.kv_attn_run(r, out, lt, e) != 0:
        fail(PROG, err_text(e))
    o = take_tensor(out)
    if not lse:
        return o
    l = take_tensor(lt)
    if base2:
        l = _scaled(l, LOG2E)
    return o, l


def _fp8_scale(opt, x, prog):
    """--k-scale/--v-scale: finite and > 0, kept as an f32."""
    s = 1.0 if x is None else float_opt(prog, opt, x)
    e = new_err()
    if lib.kv_fp8_scale_check(s, opt.encode(), e) != 0:
        usage(prog, err_text(e))
    return float(np.float32(s))


def _fp8_format(opt, s, prog):
    e = new_err()
    f = ffi.new("enum kv_fp8 *")
    if lib.kv_fp8_parse(str(s).encode(), f, e) != 0:
        usage(prog, "%s: %s" % (opt, err_text(e)))
    return f[0]


def _variants(r, softcap, alibi, alibi_slopes, kv_dtype, k_scale, v_scale):
    """The variants' options into r, checked as kvattn run checks them;
    returns (format, k_scale, v_scale) for an FP8 cache, else None."""
    if softcap is not None:
        c = float_opt(RUN, "--softcap", softcap)
        if not (c > 0.0) or not math.isfinite(c) or \
                not math.isfinite(float(np.float32(c))):
            usage(RUN, "--softcap: expected a finite cap > 0, got '%s'"
                  % softcap)
        r.softcap = c
    fp8 = None
    if kv_dtype is not None:
        fp8 = _fp8_format("--kv-dtype", kv_dtype, RUN)
    elif k_scale is not None or v_scale is not None:
        usage(RUN, "%s needs --kv-dtype (the scales are an FP8 cache's)"
              % ("--k-scale" if k_scale is not None else "--v-scale"))
    ks = _fp8_scale("--k-scale", k_scale, RUN)
    vs = _fp8_scale("--v-scale", v_scale, RUN)
    if alibi and alibi_slopes is not None:
        usage(RUN, "--alibi and --alibi-slopes exclude each other (--alibi "
              "takes the standard slopes)")
    r.alibi = 1 if alibi else 0
    return None if fp8 is None else (fp8, ks, vs)


def _fp8_v_values(name, x, fmt_scales):
    """The values of FP8 V, as kvattn run reads them: at v_scale 2^-v_exp
    where v_scale is so large that its sums over the keys could overflow
    f32 (kv_attn_fp8_v_exp; the output is multiplied by 2^v_exp after the
    division by the sum of the weights).  Returns (values, v_exp)."""
    fmt, _, vs = fmt_scales
    a, _ = as_array(x)
    d = a.shape[-1] if a.ndim and a.shape[-1] > 0 else 1
    vx = lib.kv_attn_fp8_v_exp(fmt, vs, a.size // d)
    vs = float(np.float32(math.ldexp(vs, -vx)))
    return _fp8_values(name, x, (fmt, vs, vs)), vx


def _fp8_values(name, x, fmt_scales):
    """FP8 bytes (u8) as f32 values: the first half of a paged cache (its
    keys) times k_scale, the rest times v_scale."""
    fmt, sa, sb = fmt_scales
    a, kt = as_array(x)
    if kt != lib.KV_U8:
        fail(PROG, "'%s': an FP8 cache is stored as u8 (man 5 kvnpy), got %s"
             % (name, _dtname(kt)))
    y = np.empty(a.shape, np.float32)
    n = a.size
    split = n // 2 if name == "kv_cache" else n
    if n:
        src = ffi.cast("uint8_t *", ffi.from_buffer(a))
        dst = ffi.cast("float *", ffi.from_buffer(y))
        lib.kv_fp8_dequantize(src, split, sa, fmt, dst)
        lib.kv_fp8_dequantize(src + split, n - split, sb, fmt, dst + split)
    return y


def _ds_mla_values(x, mm, exp=False):
    """An fp8_ds_mla cache (u8 [num_blocks, block_size, (1,) 656]) as its
    f32 values [num_blocks, block_size, 1, 576].  exp: as kvattn mla reads
    it, at 2^-v_exp of its values, v_exp the least that keeps 448 times
    the largest tile scale times the cache's rows under 2^126
    (kv_attn_fp8_v_exp); returns (values, v_exp)."""
    a, _ = as_array(x)
    if a.ndim != 3 and not (a.ndim == 4 and a.shape[2] == 1):
        fail(PROG, "'kv_cache': shape %s: an fp8_ds_mla cache is [num_blocks, "
             "block_size, 656] (or [num_blocks, block_size, 1, 656])" % _shape(a))
    t, out, e = Tensor(a, "kv_cache"), ffi.new("struct kv_tensor *"), new_err()
    vx = 0
    if exp and a.shape[-1]:
        vx = lib.kv_attn_fp8_v_exp(0, lib.kv_ds_mla_max_scale(t.ptr),
                                   a.size // a.shape[-1])
    if lib.kv_ds_mla_dequantize(t.ptr, _left(mm, 0), out, e) != 0:
        fail(PROG, "'kv_cache': %s" % err_text(e))
    y = take_tensor(out)
    y = y.reshape(a.shape[0], a.shape[1], 1, y.shape[-1])
    if vx:
        y *= np.float32(math.ldexp(1.0, -vx))
    return (y, vx) if exp else y


def _fp8_latent_values(x, fmt_scale):
    """An FP8 latent cache (u8, one k_scale) as kvattn mla reads it: f32 at
    k_scale 2^-v_exp, v_exp the least that keeps max(format) k_scale times
    the cache's rows under 2^126 (kv_attn_fp8_v_exp; kv_mla_req.v_exp
    multiplies the output by 2^v_exp after the division by the sum of the
    weights).  Returns (values, v_exp)."""
    fmt, ks = fmt_scale
    a, _ = as_array(x)
    w = a.shape[-1] if a.ndim and a.shape[-1] > 0 else 1
    vx = lib.kv_attn_fp8_v_exp(fmt, ks, a.size // w)
    s = float(np.float32(math.ldexp(ks, -vx)))
    return _fp8_values("kv_cache", x, (fmt, s, s)), vx


def _dtname(kt):
    return ffi.string(lib.kv_dtype_name(kt)).decode()


def paged(q, kv_cache, block_table, seq_lens, **options):
    """kvattn run --kv-cache C --block-table T --seq-lens ..: attention
    over vLLM's paged cache [2, num_blocks, block_size, Hkv, D]."""
    return run(q, kv_cache=kv_cache, block_table=block_table,
               seq_lens=seq_lens, **options)


def merge(parts, out_dtype=None, lse_base="e", max_mem=None, sinks=None,
          parts_have_sinks=False):
    """kvattn merge OUT1 LSE1 OUT2 LSE2 ..: parts is a sequence of (out,
    lse) pairs; returns the merged (out, lse).  sinks ([Hq], one logit per
    query head, natural units) is counted once in the merged sum;
    parts_have_sinks: every part was computed with the sinks."""
    parts = list(parts)
    if parts_have_sinks and sinks is None:
        usage("kvattn merge", "--parts-have-sinks needs --sinks FILE")
    if len(parts) < 1:
        usage("kvattn merge", "expected pairs OUT LSE, got 0 file(s)")
    od = _out_dtype("--out-dtype", out_dtype, "kvattn merge")
    base2 = _lse_base(lse_base, "kvattn merge")
    n = len(parts)
    outs = ffi.new("struct kv_tensor[]", n)
    lses = ffi.new("struct kv_tensor[]", n)
    keep = []
    for i, p in enumerate(parts):
        try:
            o, l = p
        except (TypeError, ValueError):
            raise Error(PROG, "merge: part %d is not an (out, lse) pair" % i)
        if base2:
            l = np.asarray(l).astype(np.float64) * LN2
        to, tl = Tensor(o, "out"), Tensor(l, "lse")
        keep += [to, tl]
        outs[i] = to.ptr[0]
        lses[i] = tl.ptr[0]
    ts = ffi.NULL
    if sinks is not None:
        tsk = Tensor(sinks, "sinks")
        keep.append(tsk)
        ts = tsk.ptr
    mo = ffi.new("struct kv_tensor *")
    ml = ffi.new("struct kv_tensor *")
    e = new_err()
    if lib.kv_attn_merge_sinks(outs, lses, n, ts, 1 if parts_have_sinks else 0,
                               od, mo, ml, e) != 0:
        fail(PROG, err_text(e))
    o, l = take_tensor(mo), take_tensor(ml)
    if base2:
        l = _scaled(l, LOG2E)
    return o, l


class CmpResult(dict):
    """kvattn cmp's report: the fields of its text output; close says
    whether the exit status would be 0.  Attribute access works too."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name)


def cmp(a, b, atol=1e-8, rtol=1e-5, equal_nan=False, mass=False,
        max_mem=None):
    """kvattn cmp A B: compare A with the reference B (numpy.isclose rules
    with B as the reference); returns a CmpResult (close, max_abs,
    max_rel, rmse, cosine, worst, worst_index, worst_a, worst_b,
    mismatched ...).  Different shapes raise."""
    for opt, x in (("--atol", atol), ("--rtol", rtol)):
        if not (x >= 0) or not math.isfinite(x):
            usage("kvattn cmp", "%s: expected a finite number >= 0, got %g" % (opt, x))
    _max_mem("kvattn cmp", max_mem)
    ta, tb = Tensor(a, "A"), Tensor(b, "B")
    r = ffi.new("struct kv_cmp_result *")
    e = new_err()
    rc = (lib.kv_cmp_mass(ta.ptr, tb.ptr, atol, rtol, r, e) if mass else
          lib.kv_cmp_tensors(ta.ptr, tb.ptr, atol, rtol, 1 if equal_nan else 0,
                             r, e))
    if rc != 0:
        raise Error(PROG, err_text(e), 2)
    res = CmpResult(
        shape=tuple(ta.array.shape), n=r.n, max_abs=r.max_abs,
        max_rel=r.max_rel, rmse=r.rmse, cosine=r.cosine,
        nan=(r.n_nan_a, r.n_nan_b), close=r.n_bad == 0, atol=atol, rtol=rtol)
    if r.n:
        res.update(worst=r.worst,
                   worst_index=tuple(int(x) for x in
                                     np.unravel_index(r.worst, ta.array.shape))
                   if ta.array.ndim else (),
                   worst_a=r.worst_a, worst_b=r.worst_b)
    if mass:
        res.update(rows=r.n_rows, mass=(r.mass_a, r.mass_b),
                   max_mass_diff=r.max_mass_diff, max_tv=r.max_tv,
                   worst_row=r.worst_row, mismatched_rows=r.n_bad)
    else:
        res.update(mismatched=r.n_bad)
    return res


def bound(q, k, v, scale=None, mask_max=0.0, routes=1, out_dtype="f32",
          no_p_round=False, max_mem=None, softcap=None, alibi=False,
          alibi_slopes=None, sinks=None):
    """kvattn bound --all: the documented error bound of kvattn run's
    output (and LSE) for these inputs, against exact attention, with run's
    variants (softcap, alibi or alibi_slopes, sinks) when given.  Returns
    a dict: out, lse, keys, head_dim, score_max, v_max."""
    routes_v = routes
    if not isinstance(routes_v, (int, np.integer)) or not 1 <= routes_v <= 1000:
        usage("kvattn bound", "--routes: expected an integer from 1 to 1000, got '%s'"
              % routes)
    has_scale = scale is not None
    s = float_opt("kvattn bound", "--scale", scale) if has_scale else 0.0
    mm = float_opt("kvattn bound", "--mask-max", mask_max)
    od = lib.KV_F32 if out_dtype is None else \
        _out_dtype("--out-dtype", out_dtype, "kvattn bound")
    _max_mem("kvattn bound", max_mem)
    iv = ffi.new("struct kv_bound_input_variants *")
    if softcap is not None:
        iv.softcap = float_opt("kvattn bound", "--softcap", softcap)
        if not (iv.softcap > 0.0) or not math.isfinite(iv.softcap):
            usage("kvattn bound", "--softcap: expected a finite cap > 0, got "
                  "'%s'" % softcap)
    if alibi and alibi_slopes is not None:
        usage("kvattn bound", "--alibi and --alibi-slopes exclude each other")
    iv.alibi = 1 if alibi else 0
    tq, tk, tv = Tensor(q, "q"), Tensor(k, "k"), Tensor(v, "v")
    keep = []
    for name, x in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if x is not None:
            keep.append(Tensor(x, name))
            setattr(iv, name, keep[-1].ptr)
    rep = ffi.new("struct kv_bound_report *")
    e = new_err()
    if lib.kv_bound_for_inputs_var(tq.ptr, tk.ptr, tv.ptr,
                                   1 if has_scale else 0, s, mm,
                                   int(routes_v), od, 0 if no_p_round else 1,
                                   iv, rep, e) != 0:
        fail(PROG, err_text(e))
    return {"out": rep.out, "lse": rep.lse, "keys": rep.keys,
            "head_dim": rep.head_dim, "score_max": rep.score_max,
            "v_max": rep.v_max}


def mla(q, kv_cache=None, block_table=None, seq_lens=None, topk_indices=None,
        c_kv=None, k_pe=None, w_uk=None, w_uv=None, q_lens=None, kv_lens=None,
        causal=False, model_config=None, scale=None, kv_lora_rank=None,
        out_dtype=None, jobs=None, max_mem=None, kv_dtype=None, k_scale=None):
    """kvattn mla: DeepSeek's Multi-head Latent Attention, absorbed (q
    [T, H, Dl + R], kv_cache [num_blocks, block_size, 1, Dl + R],
    block_table, seq_lens, and model_config or scale and kv_lora_rank;
    topk_indices int32 [T, K] for the sparse form; w_uv projects the
    output; kv_dtype "fp8_e4m3"/"fp8_e5m2" reads kv_cache as FP8 bytes
    (u8) with the one k_scale, "fp8_ds_mla" as DeepSeek-V3.2's 656-byte
    rows [num_blocks, block_size, (1,) 656]) or naive (q [T, H, P + R], c_kv, k_pe,
    w_uk, w_uv).  Returns (out, lse)."""
    import numpy as np
    prog = "kvattn mla"
    if jobs is not None:
        jobs = arg_int(prog, "-j N", jobs)
    absorbed = kv_cache is not None
    if absorbed == (c_kv is not None):
        usage(prog, "give --kv-cache (absorbed) or --c-kv (naive), one of them")
    if absorbed and (block_table is None or seq_lens is None):
        usage(prog, "--kv-cache needs --block-table and --seq-lens")
    if absorbed and (k_pe is not None or w_uk is not None or kv_lens is not None):
        usage(prog, "--k-pe, --w-uk and --kv-lens belong to the naive form (--c-kv)")
    if not absorbed and (k_pe is None or w_uk is None or w_uv is None):
        usage(prog, "--c-kv needs --k-pe, --w-uk and --w-uv")
    if not absorbed and topk_indices is not None:
        usage(prog, "--topk-indices belongs to the absorbed form (--kv-cache)")
    if not absorbed and (kv_dtype is not None or k_scale is not None):
        usage(prog, "--kv-dtype and --k-scale belong to the absorbed form (its "
              "latent cache)")
    if k_scale is not None and kv_dtype is None:
        usage(prog, "--k-scale needs --kv-dtype (the scale is an FP8 cache's)")
    if not absorbed and (block_table is not None or seq_lens is not None or
                         kv_lora_rank is not None):
        usage(prog, "--block-table, --seq-lens and --kv-lora-rank belong to the "
              "absorbed form")
    has_scale, sc, rank = False, 0.0, 0
    cfg = None
    e = new_err()
    if model_config is not None:
        cfg = ffi.new("struct kv_latent *")
        if lib.kv_latent_load_attn(str(model_config).encode(), 0, cfg, e) != 0:
            usage(prog, "--model-config: %s" % err_text(e))
        sc, has_scale, rank = cfg.softmax_scale, True, cfg.kv_lora_rank
    if scale is not None:
        sc = float_opt(prog, "--scale", scale)
        if not math.isfinite(sc):
            usage(prog, "--scale: expected a finite number, got '%s'" % scale)
        has_scale = True
    if absorbed and not has_scale:
        usage(prog, "the absorbed form needs --model-config or --scale (MLA's "
              "scale is 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), not that "
              "of Q's width)")
    if kv_lora_rank is not None:
        from ._core import int_opt
        rank = int_opt(prog, "--kv-lora-rank", kv_lora_rank, 1, 1 << 20)
    if absorbed and not rank:
        usage(prog, "the absorbed form needs --kv-lora-rank or --model-config")
    od = _out_dtype("--out-dtype", out_dtype, prog)
    threads = _threads(jobs, prog)
    mm = _max_mem(prog, max_mem)
    fp8 = None
    if kv_dtype == "fp8_ds_mla":
        if k_scale is not None:
            usage(prog, "--k-scale: fp8_ds_mla rows carry their own scales")
        if rank != 512:
            usage(prog, "--kv-dtype fp8_ds_mla: kv_lora_rank is %d, the format "
                  "holds 512 c_kv values and 64 k_pe values a row" % rank)
        fp8 = "fp8_ds_mla"
    elif kv_dtype is not None:
        fp8 = _fp8_format("--kv-dtype", kv_dtype, prog)
        fp8 = (fp8, _fp8_scale("--k-scale", k_scale, prog),
               _fp8_scale("--k-scale", k_scale, prog))
    keep = []

    def lens(opt, x):
        a = int_list(prog, opt, x, -(2**63), 2**63 - 1, empty_ok=True)
        keep.append(a)
        return (ffi.cast("int64_t *", ffi.from_buffer(a)) if len(a) else
                ffi.NULL), len(a)

    ql = lens("--q-lens", q_lens) if q_lens is not None else (ffi.NULL, 0)
    kl = lens("--kv-lens", kv_lens) if kv_lens is not None else (ffi.NULL, 0)
    sl = lens("--seq-lens", seq_lens) if seq_lens is not None else (ffi.NULL, 0)
    tq = Tensor(q, "q")
    tw = Tensor(w_uv, "w_uv") if w_uv is not None else None
    held = tq.array.nbytes + (tw.array.nbytes if tw else 0)
    out = ffi.new("struct kv_tensor *")
    lse = ffi.new("struct kv_tensor *")
    if absorbed:
        v_exp = 0
        if fp8 == "fp8_ds_mla":
            kv_cache, v_exp = _ds_mla_values(kv_cache, mm, exp=True)
        elif fp8 is not None:     # one scale for the whole row
            kv_cache, v_exp = _fp8_latent_values(kv_cache, fp8[:2])
        tc = Tensor(kv_cache, "kv_cache")
        bt = np.ascontiguousarray(np.asarray(block_table, dtype=np.int64))
        if bt.ndim == 1:
            bt = bt.reshape(1, -1)
        keep += [tc, bt]
        cw = tc.array.shape[-1] if tc.array.ndim else 0
        if cfg is not None and cfg.kv_lora_rank and kv_lora_rank is None and \
                cw != cfg.kv_lora_rank + cfg.rope_dim:
            fail(PROG, "kv_cache: latent rows of %d values, but '%s' has "
                 "kv_lora_rank + qk_rope_head_dim = %d"
                 % (cw, model_config, cfg.kv_lora_rank + cfg.rope_dim))
        r = ffi.new("struct kv_mla_req *")
        r.q, r.cache = tq.ptr, tc.ptr
        r.block_table = ffi.cast("int64_t *", ffi.from_buffer(bt)) if bt.size else ffi.NULL
        r.bt_rows, r.bt_cols = bt.shape
        r.seq_lens, r.n_seq_lens = sl
        r.q_lens, r.n_q_lens = ql
        r.kv_lora_rank, r.causal, r.scale = rank, 1 if causal else 0, sc
        r.out_dtype = lib.KV_F32 if w_uv is not None else od
        r.n_threads = threads
        r.v_exp = v_exp
        held += tc.array.nbytes + bt.size * 8 + (len(keep) and 0) + \
            (r.n_q_lens + r.n_seq_lens) * 8
        r.max_bytes = _left(mm, held)
        if tq.ptr.dtype == lib.KV_BF16 and tc.ptr.dtype == lib.KV_BF16:
            r.bf16_route = lib.kv_bf16_route_best()
        if topk_indices is not None:
            ti = Tensor(topk_indices, "topk_indices")
            keep.append(ti)
            a = ti.array
            if ti.ptr.dtype != lib.KV_I32 or a.ndim != 2:
                fail(PROG, "--topk-indices: %s (%s), expected int32 [T, K] "
                     "(kvattn index writes it)" % (a.dtype, ", ".join(
                         str(n) for n in a.shape)))
            rc = lib.kv_mla_sparse(r, ffi.cast("int32_t *", ffi.from_buffer(a))
                                   if a.size else ffi.NULL, a.shape[0], a.shape[1],
                                   out, lse, e)
        else:
            rc = lib.kv_mla_absorbed(r, out, lse, e)
        if rc != 0:
            fail(PROG, err_text(e))
        if w_uv is not None:
            proj = ffi.new("struct kv_tensor *")
            pd = od if od != lib.KV_NDTYPES else tq.ptr.dtype
            if lib.kv_mla_project(out, tw.ptr, pd, r.max_bytes, proj, e) != 0:
                lib.kv_tensor_release(out)
                lib.kv_tensor_release(lse)
                fail(PROG, err_text(e))
            lib.kv_tensor_release(out)
            out = proj
    else:
        tk, tp, tu = Tensor(c_kv, "c_kv"), Tensor(k_pe, "k_pe"), Tensor(w_uk, "w_uk")
        keep += [tk, tp, tu]
        if cfg is not None and cfg.kv_lora_rank and tu.array.ndim == 3 and \
                tp.array.ndim == 2 and (tu.array.shape[1] != cfg.kv_lora_rank or
                                        tu.array.shape[2] != cfg.nope_dim or
                                        tp.array.shape[1] != cfg.rope_dim):
            fail(PROG, "--w-uk [H, %d, %d] and --k-pe [Tk, %d] do not match "
                 "kv_lora_rank %d, qk_nope_head_dim %d, qk_rope_head_dim %d of "
                 "'%s'" % (tu.array.shape[1], tu.array.shape[2], tp.array.shape[1],
                           cfg.kv_lora_rank, cfg.nope_dim, cfg.rope_dim,
                           model_config))
        r = ffi.new("struct kv_mla_naive_req *")
        r.q, r.c_kv, r.k_pe, r.w_uk, r.w_uv = tq.ptr, tk.ptr, tp.ptr, tu.ptr, tw.ptr
        r.q_lens, r.n_q_lens = ql
        r.kv_lens, r.n_kv_lens = kl
        r.causal = 1 if causal else 0
        r.has_scale, r.scale = (1 if has_scale else 0), sc
        r.out_dtype, r.n_threads = od, threads
        held += tk.array.nbytes + tp.array.nbytes + tu.array.nbytes + \
            (r.n_q_lens + r.n_kv_lens) * 8
        r.max_bytes = _left(mm, held)
        if lib.kv_mla_naive(r, out, lse, e) != 0:
            fail(PROG, err_text(e))
    return take_tensor(out), take_tensor(lse)


def _left(max_mem, held):
    """What the memory limit leaves once the inputs are held (0: none)."""
    if not max_mem:
        return 0
    if held >= max_mem:
        fail(PROG, "the inputs take %d bytes, more than the limit of %d "
             "(--max-mem)" % (held, max_mem))
    return max_mem - held


def _shape(a):
    return "(%s)" % ", ".join(str(n) for n in a.shape)


def _quant_one(name, x, fmt, per_token, sa, sb, is_cache):
    """One input as FP8 bytes (and, per token and head, its scales)."""
    a, kt = as_array(x)
    if kt not in (lib.KV_F32, lib.KV_BF16, lib.KV_F16):
        fail(PROG, "'%s': expected f32, bf16 or f16 values, got %s"
             % (name, _dtname(kt)))
    if a.ndim < 1:
        fail(PROG, "'%s': expected an array of at least one dimension" % name)
    t = Tensor(a, name)
    q = np.empty(a.shape, np.uint8)
    n = a.size
    qp = ffi.cast("uint8_t *", ffi.from_buffer(q)) if n else ffi.NULL
    if not per_token:
        split = n // 2 if is_cache else n
        if n:
            lib.kv_fp8_quantize(t.ptr, 0, split, sa, fmt, qp)
            lib.kv_fp8_quantize(t.ptr, split, n - split, sb, fmt, qp)
        return q, None
    d = a.shape[-1]
    if a.ndim < 2 or d == 0:
        fail(PROG, "'%s': fp8_per_token_head needs [..., H, D] with D > 0"
             % name)
    sc = np.empty(a.shape[:-1], np.float32)
    e = new_err()
    if n and lib.kv_fp8_quantize_rows(
            t.ptr, n, d, qp, ffi.cast("float *", ffi.from_buffer(sc)), e) != 0:
        fail(PROG, "'%s': %s" % (name, err_text(e)))
    return q, sc


def quant(k=None, v=None, kv_cache=None, kv_dtype=None, k_scale=None,
          v_scale=None, max_mem=None):
    """kvattn quant --kv-dtype T (-k K [-v V] | --kv-cache C): an FP8 KV
    cache as vLLM writes one, u8 bytes.  Returns K's bytes, or (K's, V's)
    with both (V's alone quantize with v_scale); a paged cache [2, ...]
    takes k_scale for its keys and v_scale for its values.  kv_dtype
    "fp8_per_token_head" returns (bytes, scales), each an array or a (K,
    V) pair, the scales f32 [..., H]; "fp8_ds_mla" takes one MLA latent
    cache [..., 576] as k and returns its 656-byte rows [..., 656]."""
    prog = PROG
    if kv_dtype is None:
        usage(prog, "--kv-dtype is required (fp8_e4m3, fp8_e5m2, "
              "fp8_per_token_head, fp8_ds_mla)")
    if kv_dtype == "fp8_ds_mla":
        return _quant_ds_mla(k, v, kv_cache, k_scale, v_scale, max_mem)
    per_token = kv_dtype == "fp8_per_token_head"
    fmt = lib.KV_FP8_E4M3 if per_token else \
        _fp8_format("--kv-dtype", kv_dtype, prog)
    if kv_cache is not None and (k is not None or v is not None):
        usage(prog, "--kv-cache replaces -k/-v")
    if kv_cache is None and k is None and v is None:
        usage(prog, "give -k FILE (and -v FILE) or --kv-cache FILE")
    ks_opt = "--k-scale"
    if kv_cache is None and k is None:     # values alone: with --v-scale
        k, v = v, None
        if k_scale is not None:
            usage(prog, "--k-scale: no keys given (-k)")
        k_scale, ks_opt = v_scale, "--v-scale"
    if per_token:
        if k_scale is not None or v_scale is not None:
            usage(prog, "fp8_per_token_head computes its scales (drop "
                  "--k-scale/--v-scale)")
        if kv_cache is not None:
            usage(prog, "fp8_per_token_head: give -k and -v (the scales are "
                  "per token and head of each)")
    elif kv_cache is None and v is None and v_scale is not None and \
            ks_opt == "--k-scale":
        usage(prog, "--v-scale: no values given (-v)")
    sa = _fp8_scale(ks_opt, k_scale, prog)
    sb = sa if ks_opt == "--v-scale" else _fp8_scale("--v-scale", v_scale, prog)
    _max_mem(prog, max_mem)
    first = kv_cache if kv_cache is not None else k
    name = "kv_cache" if kv_cache is not None else "k"
    if kv_cache is not None:
        a, _ = as_array(kv_cache)
        if a.ndim != 5 or a.shape[0] != 2:
            fail(prog, "'kv_cache': shape %s: a paged cache is [2, num_blocks, "
                 "block_size, Hkv, D]" % _shape(a))
        first = a
    qk, sk = _quant_one(name, first, fmt, per_token, sa, sb, kv_cache is not None)
    if v is None:
        return (qk, sk) if per_token else qk
    qv, sv = _quant_one("v", v, fmt, per_token, sb, sb, False)
    return ((qk, qv), (sk, sv)) if per_token else (qk, qv)


def _quant_ds_mla(k, v, kv_cache, k_scale, v_scale, max_mem):
    """kvattn quant --kv-dtype fp8_ds_mla -k LATENT: u8 [..., 656]."""
    if kv_cache is not None or v is not None or k is None or \
            k_scale is not None or v_scale is not None:
        usage(PROG, "fp8_ds_mla quantizes an MLA latent cache [..., 576], given "
              "as -k, with scales of its own (no -v, --kv-cache, --k-scale, "
              "--v-scale, --scales-out)")
    mm = _max_mem(PROG, max_mem)
    a, kt = as_array(k)
    if kt not in (lib.KV_F32, lib.KV_BF16, lib.KV_F16):
        fail(PROG, "'k': expected f32, bf16 or f16 values, got %s" % _dtname(kt))
    if a.ndim < 1:
        fail(PROG, "'k': expected an array of at least one dimension")
    t, out, e = Tensor(a, "k"), ffi.new("struct kv_tensor *"), new_err()
    if lib.kv_ds_mla_quantize(t.ptr, _left(mm, 0), out, e) != 0:
        fail(PROG, "'k': %s" % err_text(e))
    return take_tensor(out)


def _index_input(name, x, ndim):
    """An indexer input as f32 (bf16 and f16 widened exactly)."""
    a, kt = as_array(x)
    if kt not in (lib.KV_F32, lib.KV_BF16, lib.KV_F16):
        fail(PROG, "%s '<array>': expected f32, bf16 or f16, got %s"
             % (name, _dtname(kt)))
    if a.ndim != ndim:
        fail(PROG, "%s '<array>': shape %s, expected %d dimensions"
             % (name, _shape(a), ndim))
    if kt == lib.KV_F32:
        return a
    t = Tensor(a, name)
    out = ffi.new("struct kv_tensor *")
    e = new_err()
    if lib.kv_tensor_convert(out, t.ptr, lib.KV_F32, e) != 0:
        fail(PROG, err_text(e))
    return take_tensor(out)


def index(q, k, weights, topk=2048, scale=None, no_causal=False,
          scores=False, jobs=None, max_mem=None, q_lens=None, kv_lens=None):
    """kvattn index -q Q -k K --weights W: DeepSeek-V3.2's lightning
    indexer, the top-k key indices per query (int32 [Tq, topk], -1 where a
    row sees fewer keys); scores=True also returns their f32 scores, as
    (indices, scores).  q_lens (and kv_lens, default q_lens) pack a batch
    of requests; each query's indices are positions in its own request."""
    from ._core import int_opt
    if jobs is not None:
        jobs = arg_int(PROG, "-j N", jobs)
    tk_ = int_opt(PROG, "--topk", topk, 1, 2**31 - 1)
    if kv_lens is not None and q_lens is None:
        usage(PROG, "--kv-lens needs --q-lens")
    lens = None
    if q_lens is not None:
        ql = int_list(PROG, "--q-lens", q_lens, 0, 2**63 // 8 - 1)
        kl = ql if kv_lens is None else \
            int_list(PROG, "--kv-lens", kv_lens, 0, 2**63 // 8 - 1)
        if len(kl) != len(ql) or not len(ql):
            usage(PROG, "--q-lens and --kv-lens: %d and %d requests, expected the "
                  "same number, at least one" % (len(ql), len(kl)))
        lens = (ql, kl)
    has_scale = scale is not None
    if has_scale:
        sc = float(scale)
        if not math.isfinite(sc) or sc <= 0:
            usage(PROG, "--scale: expected a finite number > 0, got %g" % sc)
    causal = not no_causal
    threads = _threads(jobs, PROG)
    _max_mem(PROG, max_mem)
    qa = _index_input("-q", q, 3)
    ka = _index_input("-k", k, 2)
    wa = _index_input("--weights", weights, 2)
    tq, h, d = qa.shape
    if ka.shape[1] != d:
        fail(PROG, "keys [%d, %d] and queries [%d, %d, %d]: the head sizes "
             "differ" % (ka.shape[0], ka.shape[1], tq, h, d))
    if wa.shape != (tq, h):
        fail(PROG, "--weights [%d, %d]: expected [%d, %d], one per query and "
             "head" % (wa.shape[0], wa.shape[1], tq, h))
    for name, a in (("-q", qa), ("-k", ka), ("--weights", wa)):
        bad = ~np.isfinite(a.reshape(-1))
        if bad.any():
            fail(PROG, "%s: element %d is not finite" % (name, int(np.argmax(bad))))
    if lens is None and causal and tq > ka.shape[0]:
        fail(PROG, "%d queries over %d keys: causal queries are the last of "
             "the keys (or give --no-causal)" % (tq, ka.shape[0]))
    idx = np.empty((tq, tk_), np.int32)
    sco = np.empty((tq, tk_), np.float32) if scores else None
    r = ffi.new("struct kv_indexer_req *")
    fp = lambda a: ffi.cast("float *", ffi.from_buffer(a)) if a.size else ffi.NULL
    r.q, r.k, r.w = fp(qa), fp(ka), fp(wa)
    r.n_q, r.n_k, r.n_heads, r.head_dim = tq, ka.shape[0], h, d
    r.scale = sc if has_scale else 1.0 / math.sqrt(d) if d else math.inf
    r.topk, r.causal, r.n_threads = tk_, 1 if causal else 0, threads
    if lens is not None:
        r.q_lens, r.kv_lens = (ffi.cast("int64_t *", ffi.from_buffer(a)) for a in lens)
        r.n_reqs = len(lens[0])
    e = new_err()
    if lib.kv_indexer_topk(r, ffi.cast("int32_t *", ffi.from_buffer(idx))
                           if idx.size else ffi.NULL,
                           fp(sco) if scores else ffi.NULL, e) != 0:
        fail(PROG, err_text(e))
    return (idx, sco) if scores else idx


from ._kvattn_gen import gen  # noqa: E402  (kvattn gen)
