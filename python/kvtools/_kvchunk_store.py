"""kvchunk evict, fsck, rm, pin and unpin in-process: the store-only
subcommands that change a store, with the same store URLs, checks,
reports and messages."""
from ._core import Error, ffi, lib, new_err, err_text, usage, fail
from .kvchunk import _open, _store_max_mem

EVICT_NAMES = ("removed", "removed_bytes", "skipped_busy", "bytes_before",
               "bytes_after")
FSCK_NAMES = ("checked", "corrupt", "unindexed", "orphan_rows", "stale_tmp",
              "repaired", "index_unreadable", "wrong_totals")


def _text(v):
    return v if isinstance(v, str) else str(v)


def evict(max_size=None, store=None, timeout=None, low_watermark=None,
          max_mem=None):
    """kvchunk evict --max-size SIZE [--low-watermark F]: least recently
    used, unpinned entries removed down to F * SIZE (default 0.9) when the
    store is larger than SIZE.  Returns the report the program prints, as
    a dict: removed, removed_bytes, skipped_busy, bytes_before,
    bytes_after."""
    prog = "kvchunk evict"
    e = new_err()
    if max_size is None:
        usage(prog, "--max-size SIZE is required")
    size = ffi.new("size_t *")
    lw = ffi.new("double *", 0.9)
    if lib.kv_parse_size(_text(max_size).encode(), size, e) < 0 or \
            (low_watermark is not None and
             lib.kv_parse_f64(_text(low_watermark).encode(), b"--low-watermark",
                              lw, e) < 0):
        usage(prog, err_text(e))
    if not (0 < lw[0] <= 1):
        usage(prog, "--low-watermark: expected a number in (0, 1], got '%s'"
              % low_watermark)
    lim = _store_max_mem(prog, max_mem)
    s, _ = _open(prog, store, timeout, 0, lim=lim)
    r = ffi.new("struct kv_evict_report *")
    if lib.kv_store_evict(s, size[0], lw[0], r, e) < 0:
        fail(prog, err_text(e))
    return dict(zip(EVICT_NAMES, (r.removed, r.removed_bytes, r.skipped_busy,
                                  r.total_before, r.total_after)))


@ffi.def_extern()
def kv_py_fsck_line(ctx, line):
    ffi.from_handle(ctx).append(ffi.string(line).decode("utf-8", "replace"))


def fsck(store=None, timeout=None, repair=False, format="json", max_mem=None):
    """kvchunk fsck [--repair]: every blob and the index checked.  Returns
    the counters -f json prints (checked, corrupt, unindexed, orphan_rows,
    stale_tmp, repaired, index_unreadable, wrong_totals) and "problems",
    the lines the program prints before them; format="text" gives the text
    report as a str.  Problems found and not repaired raise kvtools.Error with the
    program's message ("N problems found; 'fsck --repair' fixes them"),
    the report in err.report, as the program prints it and exits 1."""
    prog = "kvchunk fsck"
    if format not in ("text", "json"):
        usage(prog, "-f: expected text or json, got '%s'" % format)
    lim = _store_max_mem(prog, max_mem)
    s, _ = _open(prog, store, timeout, 0, lim=lim)
    lines = []
    h = ffi.new_handle(lines)
    r = ffi.new("struct kv_fsck_report *")
    e = new_err()
    if lib.kv_store_fsck(s, 1 if repair else 0, lib.kv_py_fsck_line, h, r,
                         e) < 0:
        fail(prog, err_text(e))
    v = (r.checked, r.corrupt, r.unindexed, r.orphan_rows, r.stale_tmp,
         r.repaired, r.index_unreadable, r.wrong_totals)
    counts = dict(zip(FSCK_NAMES, v))
    if format == "json":
        out = dict(counts)
        out["problems"] = lines
    else:
        out = "".join(x + "\n" for x in lines) + \
            "".join("%s: %d\n" % kv for kv in counts.items())
    problems = r.corrupt + r.unindexed + r.orphan_rows + r.stale_tmp + \
        r.index_unreadable + r.wrong_totals
    if problems and not repair:
        err = Error(prog, "%d problems found; 'fsck --repair' fixes them"
                    % problems, 1)
        err.report = out
        raise err
    return out


def _keys(prog, keys):
    if isinstance(keys, (str, bytes)):
        keys = [keys]
    keys = [k.decode() if isinstance(k, bytes) else str(k) for k in keys]
    if not keys:
        usage(prog, "missing option KEY")
    out = []
    for k in keys:
        try:
            b = bytes.fromhex(k) if len(k) == 32 else None
        except ValueError:
            b = None
        if b is None:
            usage(prog, "KEY: expected 32 hex digits, got '%s'" % k)
        out.append((k, b))
    return out


def _each(prog, keys, store, timeout, max_mem, op):
    ks = _keys(prog, keys)
    lim = _store_max_mem(prog, max_mem)
    s, _ = _open(prog, store, timeout, 0, lim=lim)
    found = ffi.new("int *")
    e = new_err()
    for k, b in ks:
        found[0] = 0
        if op(s, b, found, e) < 0:
            fail(prog, err_text(e))
        if not found[0]:
            fail(prog, "%s: no such entry" % k)


def rm(keys, store=None, timeout=None, max_mem=None):
    """kvchunk rm KEY...: remove entries (keys: 32 hex digits each, one
    or a list), in turn, stopping at the first absent one with the
    program's message."""
    _each("kvchunk rm", keys, store, timeout, max_mem,
          lambda s, b, f, e: lib.kv_store_rm(s, b, f, e))


def pin(keys, store=None, timeout=None, max_mem=None):
    """kvchunk pin KEY...: keep entries from eviction."""
    _each("kvchunk pin", keys, store, timeout, max_mem,
          lambda s, b, f, e: lib.kv_store_pin(s, b, 1, f, e))


def unpin(keys, store=None, timeout=None, max_mem=None):
    """kvchunk unpin KEY...: let entries be evicted again."""
    _each("kvchunk unpin", keys, store, timeout, max_mem,
          lambda s, b, f, e: lib.kv_store_pin(s, b, 0, f, e))
