"""kvxattn in-process: XAttention block selection (kvxattn estimate).

    mask = kvxattn.estimate(q, k, threshold=0.9)
    mask, sums = kvxattn.estimate(q, k, sums=True)

Q [B, Hq, Lq, D] and K [B, Hkv, Lk, D] (layout="thd": [T, H, D]), f32,
f16 or bf16; the mask is bool [B, Hq, ceil(Lq/BS), ceil(Lk/BS)], 1 = keep,
the bytes of the program's .npy output.
"""
import math

import numpy as np

from ._core import (Error, Tensor, as_array, ffi, lib, new_err, err_text,
                    usage, fail, int_opt, float_opt, max_mem as _max_mem,
                    take_tensor, is_bf16)

__all__ = ["estimate"]

PROG = "kvxattn"
USAGE = "kvxattn estimate"     # usage errors name the subcommand
F32_MIN = 1.1754943508222875e-38


def _input(x, what, thd):
    """Q or K as the program reads it: bf16 kept as it is, other float
    dtypes as f32, thd [T, H, D] as [1, H, T, D] in f32; checked finite.
    Also whether it came as bf16 (both did: the bf16 route, whatever the
    layout, as in the program)."""
    a, kt = as_array(x)
    if kt == lib.KV_BF16:
        f32 = (np.frombuffer(a.tobytes(), np.uint16).astype(np.uint32) << 16) \
            .view(np.float32).reshape(a.shape)
    elif a.dtype.kind == "f":
        f32 = a.astype(np.float32, copy=False)
    else:
        fail(PROG, "%s: expected f32, f16 or bf16, got %s" % (what, a.dtype))
    src_bf16 = kt == lib.KV_BF16
    if a.ndim != (3 if thd else 4):
        fail(PROG, "%s: expected %s, got shape (%s)" % (
            what, "3 dims [T, H, D] (--layout thd)" if thd else
            "4 dims [B, H, L, D] (--layout bhsd)",
            ", ".join(str(n) for n in a.shape)))
    if thd:
        a = np.ascontiguousarray(f32.transpose(1, 0, 2)[None])
        kt = lib.KV_F32
        f32 = a
    elif kt != lib.KV_BF16:
        a = np.ascontiguousarray(f32)
    bad = ~np.isfinite(f32)
    if bad.any():
        i = np.unravel_index(int(np.argmax(bad)), f32.shape)
        x = f32[i]
        if thd:
            i = (i[2], i[1], i[3])
        fail(PROG, "%s: element (%s) is %s" % (
            what, ", ".join(str(int(n)) for n in i), "nan" if np.isnan(x) else "inf"))
    return a, kt, src_bf16


def estimate(q, k, layout="bhsd", stride=8, block_size=128, threshold=None,
             thresholds=None, no_causal=False, q_offset=None, norm=None,
             keep_sink=False, keep_recent=False, select_mode="inverse",
             rule="original", compat_chunk_size=None, sums=False, jobs=None,
             max_mem=None):
    """kvxattn estimate -q Q -k K [...]: the XAttention block mask; with
    sums=True also the f32 block sums (--sums), as (mask, sums).
    thresholds: one per query head (--thresholds); threshold (None: 0.9,
    the program's default) is refused beside it, as --threshold is."""
    o = ffi.new("struct kv_xattn_opts *")
    lib.kv_xattn_opts_init(o)
    if layout not in ("bhsd", "thd"):
        usage(USAGE, "--layout: expected bhsd or thd, got '%s'" % layout)
    thd = layout == "thd"
    o.stride = int_opt(USAGE, "--stride", stride, 1, 1 << 20)
    o.block_size = int_opt(USAGE, "--block-size", block_size, 1, 1 << 24)
    if o.block_size % o.stride != 0:
        usage(USAGE, "--stride %d does not divide --block-size %d"
              % (o.stride, o.block_size))
    if threshold is not None and thresholds is not None:
        usage(USAGE, "--threshold and --thresholds exclude each other")
    if thresholds is None:
        thr = 0.9 if threshold is None else \
            float_opt(USAGE, "--threshold", threshold)
        if not (0.0 <= thr <= 1.0):
            usage(USAGE, "--threshold: expected a number in [0, 1] (0 keeps only "
                  "the forced blocks, 1 every block with mass), got '%s'"
                  % threshold)
    o.causal = 0 if no_causal else 1
    if q_offset is not None:
        o.q_offset = int_opt(USAGE, "--q-offset", q_offset, 0, (2**63 - 1) // 4)
        if not o.causal:
            usage(USAGE, "--q-offset places the queries for causal selection; "
                  "with --no-causal every key is visible and it would change "
                  "nothing")
        if o.causal and o.q_offset % o.block_size != 0:
            usage(USAGE, "--q-offset %d is not a multiple of --block-size %d "
                  "(needed for causal selection)" % (o.q_offset, o.block_size))
    if norm is not None:
        nv = float(norm)
        f = float(np.float32(nv)) if math.isfinite(nv) else nv
        if not (f >= F32_MIN) or not math.isfinite(f):
            usage(USAGE, "--norm: expected a number > 0 that is a normal f32 "
                  "(about 1.2e-38 to 3.4e38: the scores are divided by it in "
                  "f32), got '%s'" % norm)
        o.norm = nv
    o.keep_sink = 1 if keep_sink else 0
    o.keep_recent = 1 if keep_recent else 0
    if select_mode == "slash":
        o.select_mode = lib.KV_XATTN_SLASH
    elif select_mode != "inverse":
        usage(USAGE, "--select-mode: expected inverse or slash, got '%s'"
              % select_mode)
    if rule == "intended":
        o.rule = lib.KV_XATTN_RULE_INTENDED
    elif rule != "original":
        usage(USAGE, "--rule: expected original or intended, got '%s'" % rule)
    if compat_chunk_size is not None:
        o.compat_chunk = int_opt(USAGE, "--compat-chunk-size",
                                 compat_chunk_size, 1, 1 << 40)
        if o.compat_chunk // o.stride > 2**31 - 1:
            usage(USAGE, "--compat-chunk-size %d: one chunk is %d reshaped "
                  "key columns (C / --stride), more than 2^31 - 1"
                  % (o.compat_chunk, o.compat_chunk // o.stride))
        if o.compat_chunk % o.block_size != 0:
            usage(USAGE, "--compat-chunk-size %d is not a multiple of "
                  "--block-size %d" % (o.compat_chunk, o.block_size))
        if q_offset is not None:
            usage(USAGE, "--q-offset and --compat-chunk-size exclude each other "
                  "(the original places the query at (ceil(Lk/C) - ceil(Lq/C)) "
                  "* C)")
    o.nthreads = int_opt(USAGE, "-j", jobs, 0, 256) if jobs is not None else 0
    o.max_bytes = _max_mem(USAGE, max_mem)
    qa, qt, qsrc = _input(q, "Q", thd)
    ka, kt, ksrc = _input(k, "K", thd)
    tq, tk = Tensor(qa), Tensor(ka)
    if qsrc and ksrc:
        o.bf16_route = lib.kv_bf16_route_best()
    elif qt == lib.KV_BF16 or kt == lib.KV_BF16:    # one bf16: both f32
        for t, a, dt in ((tq, qa, qt), (tk, ka, kt)):
            if dt == lib.KV_BF16:
                w = (np.frombuffer(a.tobytes(), np.uint16).astype(np.uint32)
                     << 16).view(np.float32).reshape(a.shape)
                t.__init__(w)
    hq = qa.shape[1]
    if thresholds is not None:
        th = np.ascontiguousarray(np.asarray(thresholds, np.float64).reshape(-1))
        if len(th) != hq:
            fail(PROG, "thresholds: %d values for %d query heads" % (len(th), hq))
    else:
        th = np.full(max(hq, 1), thr, np.float64)
    o.thresholds = ffi.cast("double *", ffi.from_buffer(th))
    e = new_err()
    qs = ffi.new("int64_t[4]", list(tq.array.shape))
    ks = ffi.new("int64_t[4]", list(tk.array.shape))
    off = ffi.new("int64_t *")
    if lib.kv_xattn_check(o, qs, ks, off, e) != 0:
        fail(PROG, err_text(e))
    m = ffi.new("struct kv_tensor *")
    sm = ffi.new("struct kv_tensor *") if sums else ffi.NULL
    if lib.kv_xattn_estimate(tq.ptr, tk.ptr, o, m, sm, ffi.NULL, e) != 0:
        fail(PROG, err_text(e))
    mask = take_tensor(m)
    return (mask, take_tensor(sm)) if sums else mask
