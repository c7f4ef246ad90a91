"""kvmask in-process: one function per mask KIND, one keyword per long
option of kvmask(1) (dashes become underscores, the same defaults).

    kvmask.causal(q=2, k=5, keep=True)        # kvmask causal -q 2 -k 5 --keep
    kvmask.window(n=8, window=3, dtype="f16")
    kvmask.block("causal", n=1024, block_size=128)   # -f block: 8 arrays

Dense masks come back as numpy arrays rendered straight into their
buffer (out= names an array to render into instead, reused from call to
call); their bytes are those of the program's .npy output after its
header.  bf16 is numpy's 2-byte void '<V2' (what np.load gives for the
program's output) or ml_dtypes.bfloat16 when that is installed.
"""
import numpy as np

from ._core import (Error, ffi, lib, new_err, err_text, usage, fail,
                    int_opt, int_list, max_mem as _max_mem, jobs as _jobs,
                    memstream_call, load_npy_stream, nproc, _KV2NP)

__all__ = ["causal", "window", "band", "full", "prefix", "varlen", "chunk",
           "ascend", "block", "to_flex_block_mask", "BLOCK_FIELDS"]

PROG = "kvmask"
MAX_LEN = 1 << 40
BLOCK_FIELDS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks",
                "full_kv_indices", "q_num_blocks", "q_indices",
                "full_q_num_blocks", "full_q_indices")
_DTYPES = {}                    # --dtype names parsed so far
_KINDS = ("causal", "window", "band", "full", "prefix", "varlen", "chunk",
          "local", "tree")


def _human(b):
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    k = 0
    while b >= 1024 and k < 6:
        b /= 1024
        k += 1
    return "%.0f bytes" % b if k == 0 else "%.1f %s" % (b, units[k])


def _len(opt, v, lo):
    return int_opt(PROG, opt, v, lo, MAX_LEN)


# The options of some kinds only, in the order kvmask checks them: the
# keyword, the option, and the kinds that take it (the rest refuse it
# when given at all, whatever its value).
_DENSE = ("causal", "window", "band", "full", "prefix")
_ONLY = (("window", "-w", ("window", "varlen")), ("pre", "--pre", ("band",)),
         ("next", "--next", ("band",)), ("prefix", "-p", ("prefix", "tree")),
         ("parents", "--parents", ("tree",)),
         ("q_lens", "--q-lens", ("varlen",)),
         ("kv_lens", "--kv-lens", ("varlen",)), ("sys", "--sys", ("chunk",)),
         ("chunks", "--chunks", ("chunk",)),
         ("question", "--question", ("chunk",)),
         ("segments", "--segments", ("chunk",)),
         ("n", "-n", _DENSE + ("local",)), ("q", "-q", _DENSE + ("local",)),
         ("k", "-k", _DENSE + ("local",)),
         ("align", "--align", _DENSE + ("varlen", "local")),
         ("chunk_size", "--chunk-size", ("local",)))


def _foreign(kind, kw):
    """Refuse, as kvmask does, a keyword of kw (not None) that is an
    option of other kinds than kind."""
    for key, opt, kinds in _ONLY:
        if kw.get(key) is not None and kind not in kinds:
            usage(PROG, "%s: not an option of '%s'" % (opt, kind))


def _lst(opt, v, lo):
    return int_list(PROG, opt, v, lo, MAX_LEN)


class _Spec:
    """The rule of one mask and the arrays its spec points into."""

    def __init__(self, kind, n, q, k, window, pre, next, prefix, q_lens,
                 kv_lens, sys, chunks, question, align, chunk_size=None,
                 parents=None, segments=None, max_mem=None):
        s = ffi.new("struct kv_mask_spec *")
        self.spec, self.keep = s, []
        ki = _KINDS.index(kind)
        if ki <= 4 or kind == "local":
            s.kind = (lib.KV_MASK_CAUSAL, lib.KV_MASK_WINDOW, lib.KV_MASK_BAND,
                      lib.KV_MASK_FULL, lib.KV_MASK_PREFIX,
                      lib.KV_MASK_LOCAL)[min(ki, 5)]
            if n is not None and (q is not None or k is not None):
                usage(PROG, "-n: give either -n N or -q SQ -k SKV")
            if n is not None:
                s.n_q = s.n_kv = _len("-n", n, 1)
            elif q is not None and k is not None:
                s.n_q = _len("-q", q, 1)
                s.n_kv = _len("-k", k, 1)
            else:
                usage(PROG, "%s: give the size with -n N or -q SQ -k SKV" % kind)
            if kind == "window" and window is None:
                usage(PROG, "-w: window needs -w W (keys including self)")
            if kind == "band" and (pre is None or next is None):
                usage(PROG, "--pre/--next: band needs --pre P --next N")
            if kind == "prefix" and prefix is None:
                usage(PROG, "-p: prefix needs -p P")
            if kind == "local":
                if chunk_size is None:
                    usage(PROG, "--chunk-size: local needs --chunk-size C")
                s.chunk_size = _len("--chunk-size", chunk_size, 1)
        if window is not None:
            s.window = _len("-w", window, 1)
        if pre is not None:
            s.pre = _len("--pre", pre, 0)
        if next is not None:
            s.next = _len("--next", next, 0)
        if prefix is not None:
            s.prefix = _len("-p", prefix, 0)
        if kind == "tree":
            s.kind = lib.KV_MASK_TREE
            if parents is None:
                usage(PROG, "--parents: tree needs --parents p0,p1,.. (-1 = a root)")
            pl = int_list(PROG, "--parents", parents, -1, MAX_LEN)
            if len(pl) == 0:
                usage(PROG, "--parents: expected a comma-separated list of integers")
            self.keep.append(pl)
            s.parents = ffi.cast("int64_t *", ffi.from_buffer(pl))
            s.n_q = len(pl)
            s.n_kv = len(pl) + s.prefix
        if kind == "varlen":
            s.kind = lib.KV_MASK_VARLEN
            if q_lens is None:
                usage(PROG, "--q-lens: varlen needs --q-lens a,b,..")
            ql = _lst("--q-lens", q_lens, 0)
            self.keep.append(ql)
            s.q_lens = ffi.cast("int64_t *", ffi.from_buffer(ql))
            s.n_req = len(ql)
            if kv_lens is not None:
                kl = _lst("--kv-lens", kv_lens, 0)
                if len(kl) != len(ql):
                    usage(PROG, "--kv-lens: %d value%s for %d requests in "
                          "--q-lens" % (len(kl), "" if len(kl) == 1 else "s",
                                        len(ql)))
                self.keep.append(kl)
                s.kv_lens = ffi.cast("int64_t *", ffi.from_buffer(kl))
        if kind == "chunk" and segments is not None:
            s.kind = lib.KV_MASK_CHUNK
            if sys is not None or chunks is not None or question is not None:
                usage(PROG, "--segments: give either --segments FILE or "
                      "--sys/--chunks/--question")
            self._segments(segments, max_mem)
        elif kind == "chunk":
            s.kind = lib.KV_MASK_CHUNK
            if sys is None and chunks is None and question is None:
                usage(PROG, "chunk: give --segments FILE or --sys N --chunks "
                      "a,b,.. --question M")
            sv = _len("--sys", sys, 0) if sys is not None else 0
            qv = _len("--question", question, 0) if question is not None else 0
            cl = _lst("--chunks", chunks, 0) if chunks is not None else \
                np.zeros(0, np.int64)
            kinds = np.array([0] + [1] * len(cl) + [2], dtype=np.uint8)
            lens = np.concatenate([[sv], cl, [qv]]).astype(np.int64)
            if int(lens.sum()) == 0:
                usage(PROG, "--sys/--chunks/--question: the prompt is empty")
            self.keep += [kinds, lens]
            s.seg_kinds = ffi.cast("uint8_t *", ffi.from_buffer(kinds))
            s.seg_lens = ffi.cast("int64_t *", ffi.from_buffer(lens))
            s.n_seg = len(lens)
        if align == "top-left":
            s.top_left = 1
        elif align != "bottom-right":
            usage(PROG, "--align: expected bottom-right or top-left, got '%s'"
                  % align)
        m = ffi.new("struct kv_mask *")
        lib.kv_mask_init(m)
        e = new_err()
        if lib.kv_mask_make(m, s, e) != 0:
            msg = err_text(e)
            # geometry errors name the option: usage errors (chunk: data)
            if kind == "chunk":
                fail(PROG, msg)
            usage(PROG, msg)
        self.mask = ffi.gc(m, lib.kv_mask_release)


    def _segments(self, segments, max_mem):
        """--segments: a file (text or kvchunk split's .npy stream), or an
        integer array [n, 3] of kind code, offset and length (read as the
        same .npy)."""
        import os
        import tempfile
        mm = _max_mem(PROG, max_mem)
        tmp = None
        if isinstance(segments, (str, bytes, os.PathLike)):
            path = os.fsencode(segments)
        else:
            fd, tmp = tempfile.mkstemp(suffix=".npy")
            with os.fdopen(fd, "wb") as f:
                np.save(f, np.asarray(segments))
            path = os.fsencode(tmp)
        kinds = ffi.new("uint8_t **")
        lens = ffi.new("int64_t **")
        n = ffi.new("size_t *")
        e = new_err()
        try:
            rc = lib.kv_mask_segments_read(path, mm, ffi.NULL, ffi.NULL, kinds,
                                           lens, n, e)
        finally:
            if tmp:
                os.unlink(tmp)
        if rc != 0:
            msg = err_text(e)
            if tmp:         # the array, not the temporary file, is named
                msg = msg.replace("'%s'" % tmp, "'<array>'")
            fail(PROG, "--segments: %s" % msg)
        k = ffi.gc(kinds[0], lib.free)
        ln = ffi.gc(lens[0], lib.free)
        if n[0] * 18.0 > mm:
            fail(PROG, "--segments: the segments need %s (%d of them), more "
                 "than --max-mem %s; raise --max-mem"
                 % (_human(n[0] * 18.0), n[0], _human(float(mm))))
        self.keep += [k, ln]
        self.spec.seg_kinds, self.spec.seg_lens = k, ln
        self.spec.n_seg = n[0]


def _outer(out, batch, heads, block):
    if block:
        out.n_outer_dims = 2
        out.outer[0] = out.outer[1] = 1
        if batch is not None:
            out.outer[0] = _len("--batch", batch, 1)
        if heads is not None:
            out.outer[1] = _len("--heads", heads, 1)
        return
    if batch is not None:
        out.outer[out.n_outer_dims] = _len("--batch", batch, 1)
        out.n_outer_dims += 1
    if heads is not None:
        out.outer[out.n_outer_dims] = _len("--heads", heads, 1)
        out.n_outer_dims += 1


def _dense(kind, n=None, q=None, k=None, window=None, pre=None, next=None,
           prefix=None, q_lens=None, kv_lens=None, sys=None, chunks=None,
           question=None, align=None, keep=False, dtype="bool",
           fill=None, batch=None, heads=None, jobs=None, max_mem=None,
           out=None, chunk_size=None, parents=None, segments=None):
    _foreign(kind, locals())
    if align is None:
        align = "bottom-right"
    dst = out
    out = ffi.new("struct kv_mask_out *")
    mm = _max_mem(PROG, max_mem)
    out.threads = _jobs(PROG, jobs) or nproc()
    if out.threads > 1024:
        out.threads = 1024
    if align not in ("bottom-right", "top-left"):
        usage(PROG, "--align: expected bottom-right or top-left, got '%s'"
              % align)
    sp = _Spec(kind, n, q, k, window, pre, next, prefix, q_lens, kv_lens,
               sys, chunks, question, align, chunk_size, parents, segments,
               max_mem)
    _outer(out, batch, heads, False)
    return _render(sp.mask, _values(dtype, keep, fill), out, mm, dst)


def _values(dtype, keep, fill):
    """--dtype, --keep and --fill as kvmask checks them."""
    e = new_err()
    dt = _DTYPES.get(dtype)
    if dt is None:
        dtp = ffi.new("enum kv_dtype *")
        if lib.kv_dtype_parse(str(dtype).encode(), dtp, e) != 0:
            usage(PROG, "--dtype: %s" % err_text(e))
        dt = _DTYPES[dtype] = dtp[0]
    vals = ffi.new("struct kv_mask_values *")
    if lib.kv_mask_values_plain(vals, dt, 1 if keep else 0,
                                str(fill).encode() if fill is not None
                                else ffi.NULL, e) != 0:
        usage(PROG, err_text(e))
    return vals


def _render(m, vals, out, mm, dst):
    """The dense mask of m with values vals into a new array (or dst),
    after the program's size checks."""
    e = new_err()
    nbytes = ffi.new("size_t *")
    over = lib.kv_mask_dense_bytes(m, vals, out, 0, nbytes)
    need = float(np.dtype(_KV2NP[vals.dtype]).itemsize) * m.n_q * m.n_kv
    for d in range(out.n_outer_dims):
        need *= out.outer[d]
    if not over:
        need = float(nbytes[0])
    if need >= 18446744073709551615.0:
        usage(PROG, "-n/-q/-k/--batch/--heads: the size of the dense output "
              "overflows (more than 16 EiB)")
    if need > mm:
        fail(PROG, "the dense output needs %s (%d x %d %s), more than "
             "--max-mem %s; use a compact format (-f block, bsr or stats) "
             "or raise --max-mem" % (_human(need), m.n_q, m.n_kv,
                                     _dtname(vals.dtype), _human(float(mm))))
    shape = ffi.new("int64_t[8]")
    nd = lib.kv_mask_dense_shape(m, out, shape)
    shp = tuple(shape[i] for i in range(nd))
    if dst is None:
        a = np.empty(shp, dtype=_KV2NP[vals.dtype])
    else:
        a = dst
        if not isinstance(a, np.ndarray) or a.shape != shp or \
                a.dtype != _KV2NP[vals.dtype] or not a.flags.c_contiguous or \
                not a.flags.writeable:
            raise Error(PROG, "out: expected a writeable C-ordered %s array of "
                        "shape %s" % (np.dtype(_KV2NP[vals.dtype]), shp))
    if a.nbytes and lib.kv_mask_render(m, vals, out, ffi.from_buffer(a),
                                       a.nbytes, e) != 0:
        fail(PROG, err_text(e))
    return a


def _dtname(kt):
    for k, v in {"bool": lib.KV_BOOL, "u8": lib.KV_U8, "i8": lib.KV_I8,
                 "i16": lib.KV_I16, "i32": lib.KV_I32, "i64": lib.KV_I64,
                 "f16": lib.KV_F16, "bf16": lib.KV_BF16, "f32": lib.KV_F32,
                 "f64": lib.KV_F64}.items():
        if v == kt:
            return k
    return "?"


def causal(n=None, q=None, k=None, **options):
    """kvmask causal: keep j <= i' (i' = i + k - q unless align="top-left").
    Options: align, keep, dtype, fill, batch, heads, jobs, max_mem."""
    return _dense("causal", n=n, q=q, k=k, **options)


def window(n=None, q=None, k=None, window=None, **options):
    """kvmask window -w W: keep i' - W < j <= i'."""
    return _dense("window", n=n, q=q, k=k, window=window, **options)


def band(n=None, q=None, k=None, pre=None, next=None, **options):
    """kvmask band --pre P --next N: keep i' - P <= j <= i' + N."""
    return _dense("band", n=n, q=q, k=k, pre=pre, next=next, **options)


def full(n=None, q=None, k=None, **options):
    """kvmask full: keep everything."""
    return _dense("full", n=n, q=q, k=k, **options)


def prefix(n=None, q=None, k=None, prefix=None, **options):
    """kvmask prefix -p P: keep j < P or j <= i'."""
    return _dense("prefix", n=n, q=q, k=k, prefix=prefix, **options)


def varlen(q_lens=None, kv_lens=None, window=None, **options):
    """kvmask varlen --q-lens a,b.. [--kv-lens c,d..] [-w W]: the same
    request, causal (or a window) inside it."""
    return _dense("varlen", q_lens=q_lens, kv_lens=kv_lens, window=window,
                  **options)


def chunk(sys=None, chunks=None, question=None, segments=None, **options):
    """kvmask chunk --sys N --chunks a,b,.. --question M (or --segments
    FILE, as kvchunk split writes it; an integer array [n, 3] of kind code,
    offset and length works too): the chunk-isolated RAG mask."""
    return _dense("chunk", sys=sys, chunks=chunks, question=question,
                  segments=segments, **options)


def local(n=None, q=None, k=None, chunk_size=None, **options):
    """kvmask local --chunk-size C: keep j <= i' and j // C == i' // C
    (Llama 4's chunked local attention)."""
    return _dense("local", n=n, q=q, k=k, chunk_size=chunk_size, **options)


def tree(parents=None, prefix=0, **options):
    """kvmask tree --parents p0,p1,.. [-p P]: each draft token sees the P
    prefix tokens, its ancestors and itself (a speculative-decoding tree;
    -1 = a root).  Dense only."""
    return _dense("tree", prefix=prefix, parents=parents, **options)


def block(kind, block_size=128, batch=None, heads=None, jobs=None,
          max_mem=None, align=None, **geometry):
    """kvmask KIND -f block [--block-size B[,C]]: the FlexAttention
    BlockMask tensors as a dict (BLOCK_FIELDS order, int32, leading dims
    [B, H]), never the dense mask."""
    if kind not in _KINDS:
        usage(PROG, "unknown KIND '%s' (causal, window, band, full, prefix, "
              "varlen, chunk, ascend, local, tree)" % kind)
    _foreign(kind, dict(geometry, align=align))
    if align is None:
        align = "bottom-right"
    if kind == "tree":
        usage(PROG, "-f: a tree mask is written dense (npy, text or pgm): its "
              "rows are not intervals")
    dtype, fill = geometry.get("dtype"), geometry.get("fill")
    if dtype is not None or fill is not None:
        # the values are checked first, as kvmask checks them
        _values("bool" if dtype is None else dtype, geometry.get("keep"), fill)
        usage(PROG, "--%s: only for dense output (npy, text, pgm); -f block "
              "describes where rows attend, whatever the values"
              % ("dtype" if dtype is not None else "fill"))
    geometry.pop("dtype", None)
    geometry.pop("fill", None)
    geometry.pop("keep", None)      # the program takes --keep, unused
    bs = int_list(PROG, "--block-size", block_size, 1, MAX_LEN)
    if len(bs) > 2:
        usage(PROG, "--block-size: expected B or B,C, got '%s'"
              % ",".join(str(x) for x in bs))
    bq, bk = int(bs[0]), int(bs[-1])
    mm = _max_mem(PROG, max_mem)
    out = ffi.new("struct kv_mask_out *")
    out.threads = _jobs(PROG, jobs) or nproc()
    if align not in ("bottom-right", "top-left"):
        usage(PROG, "--align: expected bottom-right or top-left, got '%s'"
              % align)
    g = dict(n=None, q=None, k=None, window=None, pre=None, next=None,
             prefix=None, q_lens=None, kv_lens=None, sys=None, chunks=None,
             question=None, chunk_size=None, segments=None)
    for key in geometry:
        if key not in g:
            raise TypeError("block() got an unexpected keyword argument '%s'"
                            % key)
    g.update(geometry)
    sp = _Spec(kind, align=align, max_mem=max_mem, **g)
    _outer(out, batch, heads, True)
    m = sp.mask
    n_qb = (m.n_q + bq - 1) // bq
    n_kb = (m.n_kv + bk - 1) // bk
    if n_qb > 2**31 - 1 or n_kb > 2**31 - 1:
        usage(PROG, "--block-size: %d x %d with blocks %d x %d: tile indices "
              "do not fit int32" % (m.n_q, m.n_kv, bq, bk))
    if float(out.outer[0]) * out.outer[1] * n_qb * n_kb * 4 > 4.6e18:
        usage(PROG, "--batch/--heads: the BlockMask index tensors would be "
              "larger than 2^62 bytes")
    e = new_err()
    rc, data = memstream_call(
        lambda f: lib.kv_mask_write_block(f, m, bq, bk, out, mm, e))
    if rc != 0:
        fail(PROG, err_text(e))
    return dict(zip(BLOCK_FIELDS, load_npy_stream(data)))


def _mask_mod(kind, n_q, n_kv, align, window=None, pre=None, next=None,
              prefix=None, **_):
    off = 0 if align == "top-left" else n_kv - n_q
    if kind == "causal":
        return lambda b, h, qi, kj: kj <= qi + off
    if kind == "window":
        return lambda b, h, qi, kj: (kj <= qi + off) & (kj > qi + off - window)
    if kind == "band":
        return lambda b, h, qi, kj: (kj >= qi + off - pre) & (kj <= qi + off + next)
    if kind == "full":
        return lambda b, h, qi, kj: kj >= 0
    if kind == "prefix":
        return lambda b, h, qi, kj: (kj < prefix) | (kj <= qi + off)
    return None


def to_flex_block_mask(kind, block_size=128, mask_mod=None, **options):
    """A torch.nn.attention.flex_attention.BlockMask of kvmask KIND (needs
    torch).  mask_mod defaults to the kind's rule for causal, window, band,
    full and prefix; give your own for varlen and chunk."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask
    t = block(kind, block_size=block_size, **options)
    bs = int_list(PROG, "--block-size", block_size, 1, MAX_LEN)
    bq, bk = int(bs[0]), int(bs[-1])
    n, q, k = options.get("n"), options.get("q"), options.get("k")
    n_q, n_kv = (n, n) if n is not None else (q, k)
    if mask_mod is None:
        if n_q is None:
            raise Error(PROG, "%s: give mask_mod for this kind" % kind)
        rule = dict(options)
        align = rule.pop("align", None) or "bottom-right"
        mask_mod = _mask_mod(kind, int(n_q), int(n_kv), align, **rule)
    tt = {key: torch.from_numpy(np.ascontiguousarray(v)) for key, v in t.items()}
    kwargs = {}
    if n_q is not None:
        kwargs["seq_lengths"] = (int(n_q), int(n_kv))
    try:
        return BlockMask.from_kv_blocks(
            tt["kv_num_blocks"], tt["kv_indices"], tt["full_kv_num_blocks"],
            tt["full_kv_indices"], BLOCK_SIZE=(bq, bk), mask_mod=mask_mod,
            **kwargs)
    except TypeError:       # torch before seq_lengths
        return BlockMask.from_kv_blocks(
            tt["kv_num_blocks"], tt["kv_indices"], tt["full_kv_num_blocks"],
            tt["full_kv_indices"], BLOCK_SIZE=(bq, bk), mask_mod=mask_mod)


def _preset_names():
    names, i = [], 1
    while lib.kv_ascend_preset_names[i] != ffi.NULL:
        names.append(ffi.string(lib.kv_ascend_preset_names[i]).decode())
        i += 1
    return tuple(names)


PRESETS = _preset_names()       # the presets of mask/ascend.h, in order


def ascend(preset=None, n=None, window=None, seq_lens=None, q_lens=None,
           positions=None, fallback=False, cache_dtype=None, history=None,
           cp_size=None, cp_rank=None, interleave=None, dtype=None,
           batch=None, heads=None, jobs=None, max_mem=None, out=None):
    """kvmask ascend --preset P: the masks vllm-ascend's builders produce,
    value for value (attn, splitfuse, splitfuse-310p, pooling, mla,
    pcp-mla, swa, mtp-cp; splitfuse with seq_lens gives the per-row
    mask of those requests)."""
    dst = out
    mm = _max_mem(PROG, max_mem)
    o = ffi.new("struct kv_mask_out *")
    o.threads = _jobs(PROG, jobs) or nproc()
    if o.threads > 1024:
        o.threads = 1024
    nv = _len("-n", n, 1) if n is not None else 0
    w = _len("-w", window, 1) if window is not None else 0
    e = new_err()
    dt = lib.KV_BOOL
    if dtype is not None:
        dtp = ffi.new("enum kv_dtype *")
        if lib.kv_dtype_parse(str(dtype).encode(), dtp, e) != 0:
            usage(PROG, "--dtype: %s" % err_text(e))
        dt = dtp[0]
    pp = ffi.new("enum kv_ascend_preset *")
    if lib.kv_ascend_preset_parse(preset.encode() if isinstance(preset, str)
                                  else ffi.NULL, pp, e) != 0:
        usage(PROG, err_text(e))
    if (history is not None or cp_size is not None or cp_rank is not None or
            interleave is not None) and preset != "mtp-cp":
        usage(PROG, "--history/--cp-size/--cp-rank/--interleave: only with "
              "--preset mtp-cp")
    s = ffi.new("struct kv_mask_spec *")
    s.kind = lib.KV_MASK_CAUSAL
    s.window = w
    keep = []
    if preset == "mtp-cp":
        if n is not None or seq_lens is not None or positions is not None:
            usage(PROG, "-n/--seq-lens/--positions: not with --preset mtp-cp "
                  "(the geometry is --history and --q-lens)")
        if history is None or q_lens is None or cp_size is None or cp_rank is None:
            usage(PROG, "--preset mtp-cp needs --history, --q-lens, --cp-size "
                  "and --cp-rank")
        h = _lst("--history", history, 0)
        q = _lst("--q-lens", q_lens, 1)
        cp = _len("--cp-size", cp_size, 1)
        rank = _len("--cp-rank", cp_rank, 0)
        I = _len("--interleave", interleave, 1) if interleave is not None else 1
        if len(h) != len(q):
            usage(PROG, "--q-lens: %d value%s for %d requests in --history"
                  % (len(q), "" if len(q) == 1 else "s", len(h)))
        dims = ffi.new("int64_t[2]")
        if lib.kv_ascend_mtp_dims(ffi.cast("int64_t *", ffi.from_buffer(h)),
                                  ffi.cast("int64_t *", ffi.from_buffer(q)),
                                  len(h), cp, rank, I, dims, dims + 1, e) != 0:
            usage(PROG, err_text(e))
        max_q, max_k = dims[0], dims[1]
        rows = max_q * len(h)
        if rows * 4 * 8 > mm:
            fail(PROG, "the key ranges of the mtp-cp rows need %s (%d of them), "
                 "more than --max-mem %s; raise --max-mem"
                 % (_human(rows * 32.0), rows, _human(float(mm))))
        lo = np.zeros(rows, np.int64)
        hi = np.zeros(rows, np.int64)
        lib.kv_ascend_mtp_holes(ffi.cast("int64_t *", ffi.from_buffer(h)),
                                ffi.cast("int64_t *", ffi.from_buffer(q)),
                                len(h), cp, rank, I, max_q,
                                ffi.cast("int64_t *", ffi.from_buffer(lo)),
                                ffi.cast("int64_t *", ffi.from_buffer(hi)))
        keep += [lo, hi]
        s.kind = lib.KV_MASK_HOLE
        s.n_q, s.n_kv = rows, max_k
        s.hole_lo = ffi.cast("int64_t *", ffi.from_buffer(lo))
        s.hole_hi = ffi.cast("int64_t *", ffi.from_buffer(hi))
        s.rows_per_mat = max_q
    elif seq_lens is not None:
        if n is not None:
            usage(PROG, "-n: not with --seq-lens (the mask is sum(q) x "
                  "max(seq-lens))")
        sl = _lst("--seq-lens", seq_lens, 1)
        maxs = int(sl.max())
        if positions is not None:
            if q_lens is not None:
                usage(PROG, "--positions: give either --positions or --q-lens")
            pos = _lst("--positions", positions, 0)
            for p in pos:
                if p >= maxs:
                    usage(PROG, "--positions: position %d is not below "
                          "max(--seq-lens) = %d" % (p, maxs))
        else:
            ql = None
            if q_lens is not None:
                ql = _lst("--q-lens", q_lens, 1)
                if len(ql) != len(sl):
                    usage(PROG, "--q-lens: %d value%s for %d requests in "
                          "--seq-lens" % (len(ql), "" if len(ql) == 1 else "s",
                                          len(sl)))
            tot = 0
            for r in range(len(sl)):
                qq = int(ql[r]) if ql is not None else int(sl[r])
                if qq > sl[r]:
                    usage(PROG, "--q-lens: request %d has %d new tokens but a "
                          "sequence of %d" % (r, qq, sl[r]))
                tot += qq
            if tot > MAX_LEN:
                usage(PROG, "--q-lens: too many rows")
            parts = []
            for r in range(len(sl)):
                qq = int(ql[r]) if ql is not None else int(sl[r])
                parts.append(np.arange(sl[r] - qq, sl[r], dtype=np.int64))
            pos = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        pos = np.ascontiguousarray(pos, dtype=np.int64)
        keep.append(pos)
        s.kind = lib.KV_MASK_POSITIONS
        s.n_q, s.n_kv = len(pos), maxs
        s.positions = ffi.cast("int64_t *", ffi.from_buffer(pos)) if len(pos) else ffi.NULL
    elif positions is not None or q_lens is not None:
        usage(PROG, "%s: only with --preset splitfuse --seq-lens"
              % ("--positions" if positions is not None else "--q-lens"))
    v = ffi.new("struct kv_mask_values *")
    cd = str(cache_dtype).encode() if cache_dtype is not None else ffi.NULL
    if lib.kv_ascend_setup(pp[0], dtype is not None, dt, cd, nv,
                           n is not None, 1 if fallback else 0, s, v, e) != 0:
        usage(PROG, err_text(e))
    if batch is not None:
        o.outer[o.n_outer_dims] = _len("--batch", batch, 1)
        o.n_outer_dims += 1
    if heads is not None:
        o.outer[o.n_outer_dims] = _len("--heads", heads, 1)
        o.n_outer_dims += 1
    m = ffi.new("struct kv_mask *")
    lib.kv_mask_init(m)
    if lib.kv_mask_make(m, s, e) != 0:
        usage(PROG, err_text(e))
    m = ffi.gc(m, lib.kv_mask_release)
    return _render(m, v, o, mm, dst)

