"""kvtools.testing: the oracle passes right answers, catches wrong ones
and says where; the mask and slot assertions name the first differing
row; the fixtures give the shipped configs."""
import numpy as np
import pytest

from kvtools import kvattn, kvmask, kvslot
from kvtools.testing import (assert_attention_close, assert_mask_equal,
                             assert_slots_equal, attention_tolerance)


def numpy_attention(q, k, v, causal=False):
    """Plain float64 attention, bhsd, bottom-right causal."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        lq, lk = s.shape[-2:]
        s = np.where(np.tril(np.ones((lq, lk), bool), lk - lq), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.fixture
def qkv():
    rng = np.random.default_rng(5)
    return (rng.standard_normal((1, 4, 33, 16)).astype(np.float32),
            rng.standard_normal((1, 2, 40, 16)).astype(np.float32),
            rng.standard_normal((1, 2, 40, 16)).astype(np.float32))


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_right_answers_pass(qkv, dt):
    out = numpy_attention(*qkv, causal=True).astype(dt)
    assert_attention_close(out, *qkv, causal=True)
    o, _ = kvattn.run(*qkv, causal=True)
    assert_attention_close(o, *qkv, causal=True)


def test_wrong_answers_fail_with_the_worst_element(qkv):
    out = numpy_attention(*qkv, causal=True).astype(np.float32)
    out[0, 2, 7, 3] += 1e-3
    with pytest.raises(AssertionError) as ei:
        assert_attention_close(out, *qkv, causal=True)
    msg = str(ei.value)
    assert "1 of %d elements exceed" % out.size in msg
    assert "worst at index (0, 2, 7, 3)" in msg
    # a kernel that forgot the mask
    with pytest.raises(AssertionError):
        assert_attention_close(numpy_attention(*qkv).astype(np.float32), *qkv,
                               causal=True)


def test_tolerance_is_the_stated_bound(qkv):
    out = np.zeros((1, 4, 33, 16), np.float16)
    b = kvattn.bound(*qkv, routes=2, out_dtype="f16")["out"]
    assert attention_tolerance(out, *qkv) == b
    assert attention_tolerance(out.astype(np.float32), *qkv) < b


def test_mask_equal_names_the_first_row():
    m = kvmask.causal(n=6)
    assert_mask_equal(m.copy(), m)
    assert_mask_equal(m, "causal", n=6)
    bad = m.copy()
    bad[4, 5] = False
    bad[5, 0] = True
    with pytest.raises(AssertionError) as ei:
        assert_mask_equal(bad, m)
    assert "2 row(s); first at row (4,), column 5" in str(ei.value)


def test_slots_equal_names_the_request():
    opts = dict(block_size=4, block_table=[[1, 2], [3, 4]], scheduled=[3, 5])
    m = kvslot.map(**opts)
    assert_slots_equal(m, **opts)
    bad = {k: v.copy() for k, v in m.items()}
    bad["slot_mapping"][4] = 99
    with pytest.raises(AssertionError) as ei:
        assert_slots_equal(bad, m)
    assert "slot_mapping differs first at request 1 (tokens 3..7), token 4" in str(ei.value)
    assert "12 99 14 15 16" in str(ei.value)


def test_model_config_fixture(kv_model_config):
    assert kv_model_config.name
    assert "model_type" in kv_model_config or "architectures" in kv_model_config


def test_attention_close_with_variants():
    """The oracle takes run's variants: the reference and the bound are
    those of softcap, ALiBi and sinks; a kernel that ignores the sinks is
    caught."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 12, 8)).astype(np.float32) for _ in range(3))
    sinks = np.array([1.5, -0.5], np.float32)
    opts = dict(causal=True, softcap=5.0, alibi=True, sinks=sinks)
    good = kvattn.run(q, k, v, out_dtype="f32", **opts)[0]
    assert_attention_close(good, q, k, v, **opts)
    no_sinks = kvattn.run(q, k, v, causal=True, softcap=5.0, alibi=True)[0]
    with pytest.raises(AssertionError):
        assert_attention_close(no_sinks, q, k, v, **opts)
