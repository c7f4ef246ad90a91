"""Shared pieces of the package's tests: the programs to compare with
(KV_BIN, the directory of kvmask, kvslot, kvattn), the number of random
cases per function (KVTOOLS_CASES, default 1000) and a runner that calls
a program and reads its .npy stream.  TOP is the source tree, for its test
data (tests/configs, tests/golden, tests/vectors): KV_TOP, or the tree
these tests sit in."""
import io
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kvtools

CASES = int(os.environ.get("KVTOOLS_CASES", "1000"))
TOP = os.environ.get("KV_TOP") or os.path.join(os.path.dirname(__file__),
                                               "..", "..")


def _bin_dir():
    d = os.environ.get("KV_BIN")
    if d and os.path.exists(os.path.join(d, "kvmask")):
        return d
    p = shutil.which("kvmask")
    return os.path.dirname(p) if p else None


def _fast_base():
    """KVTOOLS_TMP, or /dev/shm where it is a writable directory: the
    comparisons make and remove thousands of small stores, whose directory
    operations cost milliseconds each on a journaled disk and microseconds
    in memory."""
    d = os.environ.get("KVTOOLS_TMP")
    if d:
        return d
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK) else None


@pytest.fixture
def tmp_path(tmp_path_factory):
    """pytest's tmp_path, made in memory where the machine allows it
    (_fast_base) and removed after the test."""
    base = _fast_base()
    if base is None:
        yield tmp_path_factory.mktemp("t")
        return
    d = tempfile.mkdtemp(prefix="kvtools-test-", dir=base)
    try:
        yield pathlib.Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def kvbin():
    d = _bin_dir()
    if not d:
        pytest.skip("the programs are not built (set KV_BIN)")
    return d


class Cli:
    """Runs a program; result: (status, stdout bytes, first stderr line)."""

    def __init__(self, d):
        self.d = d

    def __call__(self, prog, *args):
        p = subprocess.run([os.path.join(self.d, prog)] + [str(a) for a in args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = p.stderr.decode().splitlines()
        return p.returncode, p.stdout, err[0] if err else ""

    def many(self, calls):
        """[(prog, args..)] run four at a time, results in order."""
        with ThreadPoolExecutor(4) as ex:
            return list(ex.map(lambda c: self(*c), calls))


@pytest.fixture(scope="session")
def cli(kvbin):
    return Cli(kvbin)


_HEADER = re.compile(r"\{'descr': '([^']*)', 'fortran_order': False, "
                     r"'shape': \(([^)]*)\), \}")


_HEADERS = {}


def _header(raw):
    """(dtype, shape, count) of a version 1.0 header as the programs write
    it, or None (parsed once per distinct header: a comparison meets the
    same few thousands of times)."""
    h = _HEADERS.get(raw)
    if h is None:
        m = _HEADER.match(raw.decode("latin1"))
        if m is None:
            return None
        shape = tuple(int(x) for x in m.group(2).split(",") if x.strip())
        count = 1
        for x in shape:
            count *= x
        h = _HEADERS[raw] = (np.dtype(m.group(1)), shape, count)
    return h


def npy_stream(data):
    """Every array of a .npy stream, in order (version 1.0 headers as the
    programs write them parsed directly: np.load per array is the slow
    part of comparing thousands of small streams; anything else goes
    through np.load).  The arrays are read-only views of data."""
    out, at, n = [], 0, len(data)
    while at < n:
        h = None
        if data[at:at + 8] == b"\x93NUMPY\x01\x00":
            hl = int.from_bytes(data[at + 8:at + 10], "little")
            h = _header(data[at + 10:at + 10 + hl])
        if h is None:
            f = io.BytesIO(data[at:])
            a = np.load(f)
            out.append(a)
            at += f.tell()
            continue
        dt, shape, count = h
        start = at + 10 + hl
        out.append(np.frombuffer(data, dt, count, start).reshape(shape))
        at = start + count * dt.itemsize
    return out


def _isnan(a):
    """np.isnan, also of bf16 (held as V2: exponent all ones, mantissa
    not zero)."""
    if a.dtype.kind == "f":
        return np.isnan(a)
    return (a.view(np.uint16) & 0x7FFF) > 0x7F80


def same_array(py, ref, what):
    """py equals the program's array: dtype, shape and every byte, but for
    the sign and payload of a NaN: where both hold a NaN, which NaN follows
    the operand order the compiler chose (the package and the program are
    compiled apart, with other flags under the sanitizers), as IEEE 754
    leaves it open."""
    py = np.asarray(py)
    assert py.dtype == ref.dtype, "%s: dtype %s, the program's %s" % (what, py.dtype, ref.dtype)
    assert py.shape == ref.shape, "%s: shape %s, the program's %s" % (what, py.shape, ref.shape)
    if py.tobytes() == ref.tobytes():
        return
    assert py.dtype.kind == "f" or py.dtype == np.dtype("V2"), "%s: bytes differ" % what
    nan, rnan = _isnan(py), _isnan(ref)
    assert np.array_equal(nan, rnan), "%s: bytes differ (NaNs at other places)" % what
    assert py[~nan].tobytes() == ref[~nan].tobytes(), "%s: bytes differ" % what


def same_stream(got, out, what):
    """The dict got holds the arrays of the program's .npy stream out, in
    its order, each equal as same_array holds it."""
    ref = npy_stream(out)
    assert len(got) == len(ref), what
    for (name, a), r in zip(got.items(), ref):
        same_array(a, r, what + " " + name)


def same_refusal(call, status, err, what, path_dir=None, expect=None):
    """call() refuses as the program did: kvtools.Error with the program's
    exit status and its first stderr line err (or expect), unless err names
    a file under path_dir (the program names the path, the package the
    argument)."""
    with pytest.raises(kvtools.Error) as ei:
        call()
    assert ei.value.status == status, what + ": " + err
    if path_dir is None or path_dir not in err:
        assert str(ei.value) == (err if expect is None else expect), what
