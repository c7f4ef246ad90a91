"""Shared pieces of the package's tests: the programs to compare with
(KV_BIN, the directory of kvmask, kvslot, kvattn), the number of random
cases per function (KVTOOLS_CASES, default 1000) and a runner that calls
a program and reads its .npy stream."""
import io
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

CASES = int(os.environ.get("KVTOOLS_CASES", "1000"))


def _bin_dir():
    d = os.environ.get("KV_BIN")
    if d and os.path.exists(os.path.join(d, "kvmask")):
        return d
    p = shutil.which("kvmask")
    return os.path.dirname(p) if p else None


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


def npy_stream(data):
    f = io.BytesIO(data)
    out = []
    while f.tell() < len(data):
        out.append(np.load(f))
    return out


def same_array(py, ref, what):
    """py equals the program's array: dtype, shape and every byte."""
    py = np.asarray(py)
    assert py.dtype == ref.dtype, "%s: dtype %s, the program's %s" % (what, py.dtype, ref.dtype)
    assert py.shape == ref.shape, "%s: shape %s, the program's %s" % (what, py.shape, ref.shape)
    assert py.tobytes() == ref.tobytes(), "%s: bytes differ" % what
