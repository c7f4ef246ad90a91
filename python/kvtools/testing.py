"""kvtools.testing: assertions for kernel tests whose tolerance is a
stated error bound, and fixtures with the shipped model configs.  It is a
pytest plugin (entry point pytest11 'kvtools'), so an installed kvtools
gives every test session the fixtures; the assertions work anywhere.

    from kvtools.testing import assert_attention_close
    out = my_kernel(q, k, v)
    assert_attention_close(out, q, k, v, causal=True)

assert_attention_close computes kvattn's reference output and the bound
that kvattn(1) ACCURACY states for inputs like these and for actual's
dtype, counted twice (the kernel under test is held to the bound the
reference meets, and the reference has its own error): it fails only
where an element is further from the reference than that.
"""
import glob
import json
import os

import numpy as np

from . import kvattn, kvmask, kvslot
from ._core import as_array, is_bf16

__all__ = ["assert_attention_close", "attention_tolerance",
           "assert_mask_equal", "assert_slots_equal", "model_configs"]


def _f64(a):
    """An array of any kvtools dtype as float64 (bf16 included)."""
    a, _ = as_array(a)
    if is_bf16(a.dtype):
        u = np.frombuffer(a.tobytes(), np.uint16).astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64).reshape(a.shape)
    return a.astype(np.float64)


def _dtype_name(a):
    a, _ = as_array(a)
    if is_bf16(a.dtype):
        return "bf16"
    return {"float16": "f16", "float32": "f32"}.get(a.dtype.name, "f32")


def attention_tolerance(actual, q, k, v, **run_options):
    """The absolute tolerance assert_attention_close holds actual to: twice
    kvattn bound's output bound for actual's dtype (with --mask-max from
    an additive mask, and the scale and the variants of run_options:
    softcap, alibi, alibi_slopes, sinks; an FP8 cache's values)."""
    mask = run_options.get("mask")
    mask_max = 0.0
    if mask is not None and not run_options.get("mask_keep") and \
            not run_options.get("mask_binary"):
        m = _f64(mask)
        if m.dtype.kind == "f" and np.asarray(mask).dtype.kind in "fV":
            fin = np.abs(m[np.isfinite(m)])
            mask_max = float(fin.max()) if fin.size else 0.0
    if run_options.get("kv_dtype") is not None:    # FP8 bytes: their values
        fmt = kvattn._fp8_format("--kv-dtype", run_options["kv_dtype"], "kvattn")
        ks = kvattn._fp8_scale("--k-scale", run_options.get("k_scale"), "kvattn")
        vs = kvattn._fp8_scale("--v-scale", run_options.get("v_scale"), "kvattn")
        k = kvattn._fp8_values("k", k, (fmt, ks, ks))
        v = kvattn._fp8_values("v", v, (fmt, vs, vs))
    b = kvattn.bound(q, k, v, scale=run_options.get("scale"),
                     mask_max=mask_max, routes=2,
                     out_dtype=_dtype_name(actual),
                     no_p_round=run_options.get("no_p_round", False),
                     softcap=run_options.get("softcap"),
                     alibi=run_options.get("alibi", False),
                     alibi_slopes=run_options.get("alibi_slopes"),
                     sinks=run_options.get("sinks"))
    return b["out"]


def assert_attention_close(actual, q, k, v, **run_options):
    """Assert that actual is attention of q, k, v (kvattn.run's options:
    causal, window, mask, layout, q_lens, scale ...) within the stated
    bound.  On failure the message names the worst element, its index,
    both values, the bound and how many elements exceed it."""
    opts = dict(run_options)
    opts.pop("out_dtype", None)
    ref = kvattn.run(q, k, v, out_dtype="f64", lse=False, **opts)
    tol = attention_tolerance(actual, q, k, v, **run_options)
    a = _f64(actual)
    if a.shape != ref.shape:
        raise AssertionError("attention output shape %s, the reference has %s"
                             % (a.shape, ref.shape))
    err = np.abs(a - ref)
    bad = ~(err <= tol)                 # NaN counts as exceeding
    n_bad = int(bad.sum())
    if n_bad == 0:
        return
    score = np.where(np.isnan(err), np.inf, err)
    worst = np.unravel_index(int(np.argmax(score)), a.shape)
    raise AssertionError(
        "attention output differs from the reference beyond the stated bound: "
        "%d of %d elements exceed %.3g; worst at index %s: actual %r, "
        "reference %r, error %.3g (%.1fx the bound)"
        % (n_bad, a.size, tol, tuple(int(i) for i in worst), float(a[worst]),
           float(ref[worst]), float(err[worst]), float(err[worst]) / tol
           if tol > 0 else float("inf")))


def _rows(a):
    a = np.asarray(a)
    return a.reshape(-1, a.shape[-1]) if a.ndim >= 2 else a.reshape(1, -1)


def assert_mask_equal(actual, expected, **mask_options):
    """Assert two masks are equal element for element.  expected is an
    array, or a kvmask kind ("causal", ...) built with mask_options.  On
    failure the message shows the first differing row of both."""
    if isinstance(expected, str):
        expected = getattr(kvmask, expected)(**mask_options)
    a, _ = as_array(actual)
    e, _ = as_array(expected)
    if a.shape != e.shape:
        raise AssertionError("mask shape %s, expected %s" % (a.shape, e.shape))
    av, ev = _f64(a), _f64(e)
    same = (av == ev) | (np.isnan(av) & np.isnan(ev))
    if same.all():
        return
    ra, re_ = _rows(av), _rows(ev)
    rows = np.nonzero(~_rows(same).all(axis=1))[0]
    r = int(rows[0])
    idx = np.unravel_index(r, a.shape[:-1]) if a.ndim >= 2 else ()
    col = int(np.nonzero(~_rows(same)[r])[0][0])
    raise AssertionError(
        "masks differ in %d row(s); first at row %s, column %d:\n"
        "  actual:   %s\n  expected: %s"
        % (len(rows), tuple(int(i) for i in idx), col,
           _fmt_row(ra[r]), _fmt_row(re_[r])))


def _fmt_row(r):
    return " ".join("%g" % x for x in r.tolist())


def assert_slots_equal(actual, expected=None, **map_options):
    """Assert slot metadata equal: dicts of arrays (kvslot.map's fields) or
    two arrays.  expected None: kvslot.map(**map_options).  On failure the
    message names the field and shows the first differing request's
    tokens on both sides (requests from query_start_loc when present)."""
    if expected is None:
        expected = kvslot.map(**map_options)
    if not isinstance(expected, dict):
        actual, expected = {"slot_mapping": actual}, {"slot_mapping": expected}
    qsl = expected.get("query_start_loc")
    for name, e in expected.items():
        if name not in actual:
            raise AssertionError("field '%s' is missing" % name)
        a = np.asarray(actual[name]).astype(np.int64)
        e = np.asarray(e).astype(np.int64)
        if a.shape != e.shape:
            raise AssertionError("%s: shape %s, expected %s"
                                 % (name, a.shape, e.shape))
        if np.array_equal(a, e):
            continue
        if a.ndim == 0:
            raise AssertionError("%s: %d, expected %d" % (name, a, e))
        ra, re_ = _rows(a), _rows(e)
        r = int(np.nonzero((ra != re_).any(axis=1))[0][0])
        t = int(np.nonzero(ra[r] != re_[r])[0][0])
        lo, hi, what = 0, ra.shape[1], "row %d" % r
        if qsl is not None and a.ndim == 1 and len(a) >= int(qsl[-1]):
            q = np.asarray(qsl)
            req = int(np.searchsorted(q, t, side="right") - 1)
            if 0 <= req < len(q) - 1:
                lo, hi = int(q[req]), int(q[req + 1])
                what = "request %d (tokens %d..%d)" % (req, lo, hi - 1)
            elif t >= int(q[-1]):
                lo, what = int(q[-1]), "padding (tokens %d..)" % int(q[-1])
        raise AssertionError(
            "%s differs first at %s, token %d:\n  actual:   %s\n  expected: %s"
            % (name, what, t, " ".join(map(str, ra[r][lo:hi].tolist())),
               " ".join(map(str, re_[r][lo:hi].tolist()))))


def _config_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "configs"),
              os.path.join(here, "..", "..", "tests", "configs")):
        if glob.glob(os.path.join(d, "*.json")):
            return os.path.normpath(d)
    return None


def model_configs():
    """{name: path} of the model configs kvtools ships (config.json files
    of the models its tests cover)."""
    d = _config_dir()
    if d is None:
        return {}
    return {os.path.basename(p)[:-5]: p
            for p in sorted(glob.glob(os.path.join(d, "*.json")))}


class ModelConfig(dict):
    """A parsed config.json; .name and .path say which."""

    def __init__(self, name, path):
        with open(path) as f:
            super().__init__(json.load(f))
        self.name = name
        self.path = path


# ---- pytest plugin ---------------------------------------------------

try:
    import pytest
except ImportError:                     # the assertions work without it
    pytest = None

if pytest is not None:
    @pytest.fixture(params=sorted(model_configs()) or [None])
    def kv_model_config(request):
        """Each shipped model config in turn (a dict with .name, .path)."""
        if request.param is None:
            pytest.skip("no model configs shipped with this kvtools")
        return ModelConfig(request.param, model_configs()[request.param])

    @pytest.fixture
    def kv_model_configs():
        """Every shipped model config: {name: ModelConfig}."""
        return {n: ModelConfig(n, p) for n, p in model_configs().items()}

    def pytest_report_header(config):
        return "kvtools: stated-bound oracle (kvtools.testing), %d model configs" \
            % len(model_configs())
