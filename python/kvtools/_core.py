"""What every kvtools module shares: the error, arrays in and out of
libkv's struct kv_tensor, and the option checks the programs make before
any work (with the programs' own messages)."""
import numpy as np

from ._kv import ffi, lib

__all__ = ["Error"]


class Error(ValueError):
    """Bad input: str(err) is the message the program prints on stderr
    ("kvmask: -w: ..."); err.prog is the program, err.msg the message after
    its name, err.status the exit status the program would return (1 for
    bad data, 2 for usage)."""

    def __init__(self, prog, msg, status=1):
        super().__init__("%s: %s" % (prog, msg))
        self.prog = prog
        self.msg = msg
        self.status = status


def fail(prog, msg, status=1):
    raise Error(prog, msg, status)


def usage(prog, msg):
    raise Error(prog, msg, 2)


def new_err():
    return ffi.new("struct kv_err *")


def err_text(e):
    return ffi.string(e.msg).decode("utf-8", "replace")


# numpy dtype <-> enum kv_dtype.  bf16 has no numpy dtype: it is the 2-byte
# void '<V2' that np.load gives for it, or ml_dtypes.bfloat16 when that is
# installed, or a torch.bfloat16 tensor.
_NP2KV = {
    np.dtype(np.bool_): lib.KV_BOOL, np.dtype(np.uint8): lib.KV_U8,
    np.dtype(np.int8): lib.KV_I8, np.dtype(np.int16): lib.KV_I16,
    np.dtype(np.int32): lib.KV_I32, np.dtype(np.int64): lib.KV_I64,
    np.dtype(np.float16): lib.KV_F16, np.dtype(np.float32): lib.KV_F32,
    np.dtype(np.float64): lib.KV_F64, np.dtype(np.uint16): lib.KV_U16,
    np.dtype(np.uint32): lib.KV_U32, np.dtype(np.uint64): lib.KV_U64,
}
_KV2NP = {v: k for k, v in _NP2KV.items()}

try:                                    # optional
    import ml_dtypes as _ml
    BF16 = np.dtype(_ml.bfloat16)
except ImportError:                     # pragma: no cover - Debian has none
    BF16 = np.dtype("V2")
_KV2NP[lib.KV_BF16] = BF16

DTYPE_NAMES = {
    "bool": lib.KV_BOOL, "u8": lib.KV_U8, "i8": lib.KV_I8, "i16": lib.KV_I16,
    "i32": lib.KV_I32, "i64": lib.KV_I64, "f16": lib.KV_F16,
    "bf16": lib.KV_BF16, "f32": lib.KV_F32, "f64": lib.KV_F64,
}


def is_bf16(dt):
    return dt == BF16 or dt == np.dtype("V2") or dt.name == "bfloat16"


def as_array(x):
    """x as a C-ordered little-endian numpy array and its kv dtype, without
    a copy when it already is one.  Takes numpy arrays, torch CPU tensors
    (through __dlpack__; bf16 through an int16 view of the same memory),
    anything with __array__, and nested lists."""
    bf = False
    mod = type(x).__module__
    if mod.startswith("torch"):
        if x.device.type != "cpu":
            raise Error("kvtools", "a tensor on '%s': give a CPU tensor"
                        % x.device)
        x = x.detach()
        if str(x.dtype) == "torch.bfloat16":
            import torch
            x = x.view(torch.int16)
            bf = True
        x = np.from_dlpack(x) if hasattr(np, "from_dlpack") else x.numpy()
    a = np.asarray(x)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    a = np.ascontiguousarray(a)
    if bf:                              # torch bf16 read through int16
        return a.view(BF16), lib.KV_BF16
    if is_bf16(a.dtype):
        return a, lib.KV_BF16
    kt = _NP2KV.get(a.dtype)
    if kt is None:
        raise Error("kvtools", "dtype '%s' is not one kvtools reads (bool, "
                    "u8, i8, i16, i32, i64, f16, bf16, f32, f64)" % a.dtype)
    return a, kt


class Tensor:
    """A struct kv_tensor that borrows a numpy array's memory (the array
    is kept alive with it)."""
    __slots__ = ("array", "ptr")

    def __init__(self, x, name=None):
        self.array, kt = as_array(x)
        t = ffi.new("struct kv_tensor *")
        t.dtype = kt
        a = self.array
        if a.ndim > 8:
            raise Error("kvtools", "%s: %d dimensions, at most 8"
                        % (name or "array", a.ndim))
        t.ndim = a.ndim
        for d, n in enumerate(a.shape):
            t.shape[d] = n
        t.nbytes = a.nbytes
        t.data = ffi.from_buffer(a) if a.nbytes else ffi.NULL
        self.ptr = t


def take_tensor(t):
    """A numpy array over the buffer of a struct kv_tensor that libkv
    filled: the array owns it from now on (freed with it), no copy."""
    dt = _KV2NP[t.dtype]
    shape = tuple(t.shape[d] for d in range(t.ndim))
    n = t.nbytes
    if n == 0 or t.data == ffi.NULL:
        lib.kv_tensor_release(t)
        return np.zeros(shape, dtype=dt)
    owner = ffi.gc(t.data, lib.free)
    t.data = ffi.NULL
    t.nbytes = 0
    return np.frombuffer(ffi.buffer(owner, n), dtype=dt).reshape(shape)


def kv_dtype(prog, opt, s, allowed=None):
    """Parse a dtype option the way the programs do (names as kvtools
    spells them and numpy's long names)."""
    if isinstance(s, np.dtype) or isinstance(s, type):
        s = np.dtype(s).name
    s = str(s)
    e = new_err()
    out = ffi.new("enum kv_dtype *")
    if lib.kv_dtype_parse(s.encode(), out, e) != 0:
        usage(prog, "%s: %s" % (opt, err_text(e)))
    return out[0]


_DEFAULT_MAX_MEM = []
_NPROC = []


def nproc():
    """Online cores (kv_nproc reads them from the system: asked once)."""
    if not _NPROC:
        _NPROC.append(lib.kv_nproc())
    return _NPROC[0]


def max_mem(prog, s):
    """--max-mem: None = the default, 75% of RAM (asked once)."""
    if s is None:
        if not _DEFAULT_MAX_MEM:
            _DEFAULT_MAX_MEM.append(lib.kv_default_max_mem())
        return _DEFAULT_MAX_MEM[0]
    if str(s) == "":    # the programs refuse --max-mem '' (no default)
        usage(prog, "--max-mem: expected a value, got an empty one")
    out = ffi.new("size_t *")
    e = new_err()
    if lib.kv_parse_max_mem(str(s).encode(), out, e) != 0:
        usage(prog, err_text(e))
    return out[0]


def _text(v):
    """An option value as the text the program would have been given."""
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (list, tuple, np.ndarray)):
        return ",".join(_text(x) for x in np.asarray(v).reshape(-1).tolist())
    return str(v)


I64_MAX = 2**63 - 1


def int_list(prog, opt, v, lo=0, hi=I64_MAX, empty_ok=False):
    """A list option (--q-lens 3,2 or [3, 2] or an array) as int64, with
    the program's parser and messages."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and 0 < len(v) <= 64 and \
            all(type(x) is int for x in v) and min(v) >= lo and max(v) <= hi:
        return np.array(v, dtype=np.int64)     # the quickest way, short lists
    if isinstance(v, (list, tuple, np.ndarray)) and len(v):
        try:                            # the quick way for good input
            a = np.asarray(v)
            if a.dtype.kind in "iu" and a.ndim == 1:
                a = np.ascontiguousarray(a, dtype=np.int64)
                if a.min() >= lo and a.max() <= hi:
                    return a
        except (ValueError, TypeError, OverflowError):
            pass
    s = _text(v)
    e = new_err()
    out = ffi.new("int64_t **")
    n = ffi.new("size_t *")
    if lib.kv_parse_i64_list(s.encode(), opt.encode(), lo, hi, out, n, e) != 0:
        usage(prog, err_text(e))
    a = np.frombuffer(ffi.buffer(out[0], 8 * n[0]), dtype=np.int64).copy() \
        if n[0] else np.zeros(0, np.int64)
    lib.free(out[0])
    if n[0] == 0 and not empty_ok:
        usage(prog, "%s: expected a comma-separated list of integers" % opt)
    return a


def int_opt(prog, opt, v, lo=0, hi=I64_MAX):
    """An integer option, with the program's parser and messages."""
    if type(v) is int and lo <= v <= hi:
        return v
    e = new_err()
    out = ffi.new("int64_t *")
    if lib.kv_parse_i64(_text(v).encode(), opt.encode(), lo, hi, out, e) != 0:
        usage(prog, err_text(e))
    return out[0]


_SPACE = " \t\n\v\f\r"
_LONG_MIN, _LONG_MAX = -2**63, 2**63 - 1
_INT_MIN, _INT_MAX = -2**31, 2**31 - 1


def _space_sign(s, i):
    """Past the white space and the sign at s[i:], as strtol reads them:
    (sign, index of what follows)."""
    while i < len(s) and s[i] in _SPACE:
        i += 1
    sign = 1
    if i < len(s) and s[i] in "+-":
        sign = -1 if s[i] == "-" else 1
        i += 1
    return sign, i


def _strtol(s, at, base):
    """strtol(s + at, &end, base) of C: (value clamped to long, end);
    end == at when no digit was read."""
    sign, i = _space_sign(s, at)
    digits = "0123456789abcdef"[:base]
    if base == 16 and s[i:i + 2].lower() == "0x" and i + 2 < len(s) and \
            s[i + 2].lower() in digits:
        i += 2
    j = i
    while j < len(s) and s[j].lower() in digits:
        j += 1
    if j == i:
        return 0, at
    return max(_LONG_MIN, min(_LONG_MAX, sign * int(s[i:j], base))), j


def _prefixed(s, letter, base):
    """A number with a 0X, 0O or 0B prefix after optional space and sign,
    as argtable reads one: (value, end), end 0 when it is not one."""
    sign, i = _space_sign(s, 0)
    if s[i:i + 1] != "0" or s[i + 1:i + 2].upper() != letter:
        return 0, 0
    v, end = _strtol(s, i + 2, base)
    if end == i + 2:
        return 0, 0
    return sign * v, end


def arg_int(prog, opt, v):
    """An option the program reads as an argtable integer (opt as argtable
    names it in its messages: "-j N", "--window=W"): an int in C's int
    range, or its text read as argtable reads it (decimal, 0x/0o/0b
    prefixes, a KB/MB/GB suffix), refused with argtable's own messages."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        if _INT_MIN <= v <= _INT_MAX:
            return int(v)
        usage(prog, "integer overflow at option %s (%s is too large)" % (opt, v))
    s = _text(v)
    if s == "" and opt.startswith("--"):
        usage(prog, "%s: expected a value, got an empty one" % opt.split("=")[0])
    for letter, base in (("X", 16), ("O", 8), ("B", 2)):
        val, end = _prefixed(s, letter, base)
        if end:
            break
    else:
        val, end = _strtol(s, 0, 10)
        if end == 0:
            usage(prog, 'invalid argument "%s" to option %s' % (s, opt))
    over = not _INT_MIN <= val <= _INT_MAX
    rest = s[end:]
    scale = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}.get(rest[:2].upper())
    if scale and rest[2:].strip(_SPACE) == "":
        over = not _INT_MIN // scale <= val <= _INT_MAX // scale
        val *= scale
    elif rest.strip(_SPACE) != "":
        usage(prog, 'invalid argument "%s" to option %s' % (s, opt))
    if over:
        usage(prog, "integer overflow at option %s (%s is too large)" % (opt, s))
    return val


def float_opt(prog, opt, v):
    e = new_err()
    out = ffi.new("double *")
    if lib.kv_parse_f64(_text(v).encode(), opt.encode(), out, e) != 0:
        usage(prog, err_text(e))
    return out[0]


def jobs(prog, j):
    """-j: 0 or None = all cores."""
    if j is None:
        return 0
    return int_opt(prog, "-j", j, 0, 1 << 30)


def i64_ptr(a):
    return ffi.cast("const int64_t *", ffi.from_buffer(a)) if a is not None and a.size else ffi.NULL


def memstream_call(fn):
    """Run fn(FILE *) on an in-memory stream; return the bytes written."""
    buf = ffi.new("char **")
    size = ffi.new("size_t *")
    f = lib.open_memstream(buf, size)
    if f == ffi.NULL:
        raise MemoryError("open_memstream")
    try:
        rc = fn(f)
    finally:
        lib.fclose(f)
        data = ffi.buffer(buf[0], size[0])[:] if buf[0] != ffi.NULL else b""
        lib.free(buf[0])
    return rc, data


def load_npy_stream(data):
    """Every array of a .npy stream, in order."""
    import io
    f = io.BytesIO(data)
    out = []
    while f.tell() < len(data):
        out.append(np.load(f))
    return out


def _is_bool(v):
    return isinstance(v, (bool, np.bool_))


def bool_keywords(module, prog=None, rest=None):
    """Wrap the public functions of module so that a flag keyword (one
    whose default is a bool) takes only True or False (a numpy bool too;
    None is the default) and maps to the option's presence, and a keyword
    that takes a value refuses a bool, whose text "1" the program would
    read as a number.  Both raise kvtools.Error (status 2) naming the
    keyword; prog names the program in it (default: MODULE SUBCOMMAND).
    The keywords a function takes as **options are those of rest (a
    function whose signature names them), or left to the callee."""
    import functools
    import inspect

    def kinds(f):
        ps = inspect.signature(f).parameters.items() if f else ()
        return ({n for n, p in ps if _is_bool(p.default)},
                {n for n, p in ps if not _is_bool(p.default) and
                 p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)})

    mod = module.__name__.rsplit(".", 1)[-1]
    for name in module.__all__:
        f = getattr(module, name)
        if not inspect.isfunction(f):
            continue
        fl, vals = kinds(f)
        if any(p.kind == p.VAR_KEYWORD
               for p in inspect.signature(f).parameters.values()):
            rf, rv = kinds(rest)
            fl, vals = fl | rf, vals | (rv - fl)
        who = prog or "%s %s" % (mod, name.replace("_", " "))

        def wrap(f, fl, vals, who):
            @functools.wraps(f)
            def call(*args, **kw):
                for k, v in kw.items():
                    if k in fl:
                        if v is not None and not _is_bool(v):
                            usage(who, "%s: expected True or False (a flag), "
                                  "got %r" % (k, v))
                    elif k in vals and _is_bool(v):
                        usage(who, "%s: --%s takes a value, got %r (a bool)"
                              % (k, k.replace("_", "-"), v))
                return f(*args, **kw)
            return call
        setattr(module, name, wrap(f, fl, vals, who))
