"""kvxattn in-process: XAttention block selection (kvxattn estimate).

    mask = kvxattn.estimate(q, k, threshold=0.9)
    mask, sums = kvxattn.estimate(q, k, sums=True)

Q [B, Hq, Lq, D] and K [B, Hkv, Lk, D] (layout="thd": [T, H, D]), f32,
f16 or bf16; the mask is bool [B, Hq, ceil(Lq/BS), ceil(Lk/BS)], 1 = keep,
the bytes of the program's .npy output.
"""
import math
import re

import numpy as np

from ._core import (Error, Tensor, as_array, ffi, lib, new_err, err_text,
                    usage, fail, int_opt, float_opt, max_mem as _core_max_mem,
                    take_tensor, is_bf16)

__all__ = ["estimate", "recall"]

PROG = "kvxattn"
USAGE = "kvxattn estimate"     # usage errors name the subcommand
F32_MIN = 1.1754943508222875e-38


_max_mem = _core_max_mem      # --max-mem as every program reads it


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


def _layer_row(thresholds, layer, hq):
    """Row layer of a layer x head thresholds table, as --layer reads it."""
    t = np.asarray(thresholds, np.float64)
    if t.ndim < 1 or t.ndim > 2:
        fail(PROG, "thresholds: expected a 1-d or 2-d numeric array")
    rows, cols = (t.shape[0], t.shape[1]) if t.ndim == 2 else (1, t.shape[0])
    if rows <= layer or cols != hq:
        fail(PROG, "thresholds has %d rows of %d; --layer %d needs at least "
             "%d rows of %d (one per query head)" % (rows, cols, layer,
                                                    layer + 1, hq))
    return np.ascontiguousarray(t.reshape(rows, cols)[layer])


def estimate(q, k, layout="bhsd", stride=8, block_size=128, threshold=None,
             thresholds=None, no_causal=False, q_offset=None, norm=None,
             keep_sink=False, keep_recent=False, select_mode="inverse",
             rule="original", compat_chunk_size=None, sums=False, jobs=None,
             max_mem=None, layer=None):
    """kvxattn estimate -q Q -k K [...]: the XAttention block mask; with
    sums=True also the f32 block sums (--sums), as (mask, sums).
    thresholds: one per query head (--thresholds); threshold (None: 0.9,
    the program's default) is refused beside it, as --threshold is.
    layer: row L of a layer x head thresholds table (--layer; a 1-d
    thresholds is one row)."""
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
                  "the forced blocks, 1 keeps blocks until their running sum "
                  "reaches the row's total), got '%s'"
                  % threshold)
    if layer is not None:
        if thresholds is None:
            usage(USAGE, "--layer needs --thresholds FILE")
        layer = int_opt(USAGE, "--layer", layer, 0, 2**31 - 1)
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
    if thresholds is not None and layer is not None:
        th = _layer_row(thresholds, layer, hq)
    elif thresholds is not None:
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


RUSAGE = "kvxattn recall"


def _f32(x, what, thd):
    """Q or K for recall: f32 [B, H, L, D] (bf16 and f16 widened, thd as
    [1, H, T, D]), checked finite; and whether it came as bf16."""
    a, kt, src_bf16 = _input(x, what, thd)
    if kt == lib.KV_BF16:
        a = (np.frombuffer(a.tobytes(), np.uint16).astype(np.uint32) << 16) \
            .view(np.float32).reshape(a.shape)
    return np.ascontiguousarray(a, dtype=np.float32), src_bf16


def _mask_arrays(mask):
    """The arrays of the mask argument: a BlockMask stream given as a list
    or tuple of arrays (its first four read, as the program reads them),
    else one dense block mask."""
    if isinstance(mask, (list, tuple)) and len(mask) and \
            all(hasattr(m, "shape") for m in mask):
        return [as_array(m)[0] for m in mask[:4]]
    if isinstance(mask, (list, tuple)) and not len(mask):
        fail(PROG, "mask: no array")
    return [as_array(mask)[0]]


def _shape_text(shape):
    return "[%s]" % ", ".join(str(int(n)) for n in shape)


def _keep(mask, nb, hq, nqb, nkb):
    """The block mask as bytes [B, Hq, nqb, nkb] (1 = keep), checked as
    the program checks a mask file."""
    t = _mask_arrays(mask)
    fit = "[%d, %d, %d, %d]" % (nb, hq, nqb, nkb)
    i32 = np.dtype(np.int32)
    if len(t) == 4 and t[0].dtype == i32 and t[1].dtype == i32 and \
            t[0].ndim == 3 and t[1].ndim == 4:
        m = np.zeros((nb, hq, nqb, nkb), np.uint8)
        for part in range(2):
            cnt, idx = t[2 * part], t[2 * part + 1]
            if cnt.ndim != 3 or idx.ndim != 4 or cnt.dtype != i32 or \
                    idx.dtype != i32 or cnt.shape[2] != nqb or \
                    idx.shape[2] != nqb or idx.shape[3] != nkb or \
                    cnt.shape[0] not in (nb, 1) or cnt.shape[1] not in (hq, 1) \
                    or idx.shape[:2] != cnt.shape[:2]:
                fail(PROG, "mask: BlockMask indices of shape %s do not fit %s "
                     "(batch, query heads, query blocks, key blocks; batch and "
                     "heads may be 1)" % (_shape_text(idx.shape), fit))
            for b in range(nb):
                for h in range(hq):
                    cb = 0 if cnt.shape[0] == 1 else b
                    ch = 0 if cnt.shape[1] == 1 else h
                    for qb in range(nqb):
                        c = int(cnt[cb, ch, qb])
                        if c < 0 or c > idx.shape[3]:
                            fail(PROG, "mask: block count %d out of range" % c)
                        ix = idx[cb, ch, qb, :c]
                        bad = (ix < 0) | (ix >= nkb)
                        if bad.any():
                            fail(PROG, "mask: block index %d outside 0..%d"
                                 % (int(ix[int(np.argmax(bad))]), nkb - 1))
                        m[b, h, qb, ix] = 1
        return m
    if len(t) > 1:
        fail(PROG, "mask: holds %d arrays; expected one dense block mask or a "
             "BlockMask of eight" % len(t))
    d = t[0]
    db = d.shape[0] if d.ndim == 4 else 1
    dh = d.shape[0] if d.ndim == 3 else d.shape[1] if d.ndim == 4 else 1
    if d.ndim < 2 or d.ndim > 4 or d.shape[-2] != nqb or d.shape[-1] != nkb \
            or db not in (1, nb) or dh not in (1, hq):
        fail(PROG, "mask: shape %s does not fit %s (batch, query heads, query "
             "blocks, key blocks)" % (_shape_text(d.shape), fit))
    if is_bf16(d.dtype):
        d = (np.frombuffer(d.tobytes(), np.uint16).astype(np.uint32) << 16) \
            .view(np.float32).reshape(d.shape)
    if d.dtype.kind == "f":
        x = d.reshape(-1).astype(np.float64)
        bad = (x != 0.0) & (x != 1.0)
        if bad.any():
            fail(PROG, "mask: a float block mask must hold only 0 and 1 (1 = "
                 "keep), found %g; an additive mask (0 = keep) reads inverted"
                 % x[int(np.argmax(bad))])
    d = d.reshape(db, dh, nqb, nkb) != 0
    return np.ascontiguousarray(np.broadcast_to(d, (nb, hq, nqb, nkb)),
                                dtype=np.uint8)


def _report(keep, rr, causal, qoff, lq, block):
    """The report's lines (-f json) as dicts: the overall figures, then one
    per query head."""
    nb, hq, nqb, nkb = keep.shape
    nbh = nb * hq
    kept = ffi.new("int64_t[]", max(2 * nbh, 1))
    lib.kv_xattn_density(ffi.from_buffer(keep), nbh, nqb, nkb, causal, qoff,
                         lq, block, kept, kept + nbh)
    r = rr.reshape(nbh, lq)
    rmin = [float(x) for x in r.min(axis=1)]
    rmean = []
    for i in range(nbh):                # summed in order, as the program
        s = 0.0
        for x in r[i].tolist():
            s += x
        rmean.append(s / lq)
    mn = min(rmin) if nbh else math.inf
    sm = 0.0
    for x in rmean:
        sm += x
    fig = lambda x: float("%.6f" % x) if math.isfinite(x) else None
    tk = sum(kept[i] for i in range(nbh))
    tv = sum(kept[nbh + i] for i in range(nbh))
    lines = [dict(recall_min=fig(mn), recall_mean=fig(sm / nbh),
                  density=fig(tk / tv if tv else 0.0), kept=tk, valid=tv)]
    for i in range(nbh):
        k, v = kept[i], kept[nbh + i]
        lines.append(dict(batch=i // hq, head=i % hq, recall_min=fig(rmin[i]),
                          recall_mean=fig(rmean[i]),
                          density=fig(k / v if v else 0.0), kept=k, valid=v))
    return lines


def _recall_opts(layout, block_size, no_causal, q_offset, scale, format,
                 jobs, max_mem):
    """The options as the program checks them, in its order."""
    o = ffi.new("struct kv_xattn_opts *")
    lib.kv_xattn_opts_init(o)
    if layout not in ("bhsd", "thd"):
        usage(RUSAGE, "--layout: expected bhsd or thd, got '%s'" % layout)
    o.block_size = int_opt(RUSAGE, "--block-size", block_size, 1, 1 << 24)
    o.stride = 1
    o.causal = 0 if no_causal else 1
    if q_offset is not None:
        o.q_offset = int_opt(RUSAGE, "--q-offset", q_offset, 0,
                             (2**63 - 1) // 4)
        if not o.causal:
            usage(RUSAGE, "--q-offset places the queries for causal attention; "
                  "with --no-causal every key is visible and it would change "
                  "nothing")
    if scale is not None:
        e = new_err()
        out = ffi.new("double *")
        ok = lib.kv_parse_f64(str(scale).encode(), b"--scale", out, e) == 0
        f = out[0] if ok else math.nan        # as an f32: finite, nonzero
        if not (f > 0) or not (f < 3.4028235677973366e38) or \
                np.float32(f) == 0:
            usage(RUSAGE, "--scale: expected a number > 0 that is a finite "
                  "nonzero f32, got '%s'" % scale)
        o.scale = out[0]
    if format not in ("npy", "rows", "json", "text"):
        usage(RUSAGE, "-f: expected text, json, rows or npy, got '%s'"
              % format)
    o.nthreads = int_opt(RUSAGE, "-j", jobs, 0, 256) if jobs is not None else 0
    o.max_bytes = _max_mem(RUSAGE, max_mem)
    return o


def recall(q, k, mask, layout="bhsd", block_size=128, no_causal=False,
           q_offset=None, scale=None, per_block=False, format="npy",
           jobs=None, max_mem=None):
    """kvxattn recall -q Q -k K -m M [...]: the exact attention mass each
    query token's kept blocks cover.

    mask: a block mask [nqb, nkb], [Hq, nqb, nkb] or [B, Hq, nqb, nkb]
    (nonzero = keep; float masks hold only 0 and 1), or a BlockMask as the
    list of its arrays (kv_num_blocks, kv_indices, full_kv_num_blocks,
    full_kv_indices, ...: what kvmask -f block writes).
    format: "npy" or "rows" (the default here: arrays out) gives the f64
    per-token recall [B, Hq, Lq]; "json" the report's lines as a list of
    dicts (the overall figures first, then one per head); "text" the text
    report as a str.  per_block=True (--per-block) also gives the f32
    block masses [B, Hq, nqb, nkb]: (result, block_mass)."""
    o = _recall_opts(layout, block_size, no_causal, q_offset, scale, format,
                     jobs, max_mem)
    thd = layout == "thd"
    qa, qsrc = _f32(q, "Q", thd)
    ka, ksrc = _f32(k, "K", thd)
    nb, hq, lq, d = qa.shape
    bs = o.block_size
    nqb, nkb = (lq + bs - 1) // bs, (ka.shape[2] + bs - 1) // bs
    e = new_err()
    if nb != ka.shape[0] or d != ka.shape[3] or ka.shape[1] < 1 or \
            hq % ka.shape[1] != 0:
        qs = ffi.new("int64_t[4]", list(qa.shape))
        ks = ffi.new("int64_t[4]", list(ka.shape))
        if lib.kv_xattn_check(o, qs, ks, ffi.new("int64_t *"), e) == 0:
            fail(PROG, "Q and K do not fit")
        fail(PROG, err_text(e))
    nbh = nb * hq
    extra = nbh * nqb * nkb + nbh * lq * 8 + \
        (nbh * nqb * nkb * 4 if per_block else 0) + nbh * 2 * 8
    mx = o.max_bytes
    if mx:
        if extra >= mx:
            fail(PROG, "the block masks and results need %d bytes of memory, "
                 "more than --max-mem %d" % (extra, mx))
        o.max_bytes = mx - extra
    keep = _keep(mask, nb, hq, nqb, nkb)
    if qsrc and ksrc:
        o.bf16_route = lib.kv_bf16_route_best()
    tq, tk = Tensor(qa), Tensor(ka)
    rr = ffi.new("struct kv_tensor *")
    bm = ffi.new("struct kv_tensor *") if per_block else ffi.NULL
    kp = ffi.cast("const uint8_t *", ffi.from_buffer(keep)) if keep.size \
        else ffi.NULL
    if lib.kv_xattn_recall(tq.ptr, tk.ptr, kp, o, rr, bm, e) != 0:
        msg = err_text(e)
        if scale is not None and "not finite in f32" in msg:
            msg = ("a score of Q and K times --scale %g is not finite in f32 "
                   "(inf or nan): give a smaller --scale" % o.scale)
        m = re.match(r"the work needs (\d+) bytes of memory, more than "
                     r"--max-mem \d+$", msg)
        if mx and m:
            msg = "the work needs %d bytes of memory, more than --max-mem %d" \
                % (int(m.group(1)) + extra, mx)
        fail(PROG, msg)
    out = take_tensor(rr)
    masses = take_tensor(bm) if per_block else None
    if format in ("json", "text"):
        qoff = o.q_offset if o.q_offset >= 0 else ka.shape[2] - lq
        lines = _report(keep, out, o.causal, max(qoff, 0), lq, bs)
        out = lines if format == "json" else _text_report(lines, nb)
    return (out, masses) if per_block else out


def _text_report(lines, nb):
    """The text report (-f text) from the json lines."""
    t = lines[0]
    s = ["recall_min: %.6f\nrecall_mean: %.6f\n" % (t["recall_min"],
                                                   t["recall_mean"]),
         "density: %.6f\nkept: %d\nvalid: %d\n" % (t["density"], t["kept"],
                                                   t["valid"])]
    for x in lines[1:]:
        s.append("%shead %d: recall_min %.6f recall_mean %.6f density %.6f "
                 "kept %d valid %d\n" % ("batch %d " % x["batch"] if nb > 1
                                         else "", x["head"], x["recall_min"],
                                         x["recall_mean"], x["density"],
                                         x["kept"], x["valid"]))
    return "".join(s)
