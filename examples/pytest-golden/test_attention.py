"""A kernel test in the style of vLLM's tests/kernels: the kernel under
test (simple_attention.attention) parametrised over shapes, dtypes and
masks, with kvtools as the oracle.  No atol to tune: assert_attention_close
holds the kernel to the error bound kvattn(1) states for these inputs and
the output's dtype.

test_broken_kernel_is_caught runs the kernel with a window one key too
wide: the oracle must catch every case.  (The bound is a worst case over
every summation order: it catches wrong semantics, a mask or an
alignment; a precision slip smaller than the bound, such as P rounded to
f16 in an f32 kernel, passes.)
"""
import numpy as np
import pytest

from kvtools import kvmask
from kvtools.testing import assert_attention_close
from simple_attention import attention, attention_broken

NUM_HEADS = [(4, 4), (8, 2)]            # (query heads, kv heads): MHA, GQA
SEQ_LENS = [(1, 37), (16, 16), (29, 64)]   # (queries, keys): decode, prefill, chunked
HEAD_SIZES = [32, 64]
DTYPES = [np.float32, np.float16]
MASKS = ["none", "causal", "window", "prefix"]
SEED = 0


def make_inputs(num_heads, seq_lens, head_size, dtype, seed=SEED):
    rng = np.random.default_rng(seed)
    (hq, hkv), (lq, lk) = num_heads, seq_lens
    q = rng.standard_normal((2, hq, lq, head_size)).astype(dtype)
    k = rng.standard_normal((2, hkv, lk, head_size)).astype(dtype)
    v = rng.standard_normal((2, hkv, lk, head_size)).astype(dtype)
    return q, k, v


def mask_options(mask, seq_lens):
    """The same mask for the kernel and for the oracle."""
    lq, lk = seq_lens
    if mask == "causal":
        return dict(causal=True)
    if mask == "window":
        return dict(window=8)
    if mask == "prefix":
        # an additive mask built by kvmask: 0 = attend, -inf = masked
        return dict(mask=kvmask.prefix(q=lq, k=lk, prefix=4, dtype="f32"))
    return {}


@pytest.mark.parametrize("num_heads", NUM_HEADS)
@pytest.mark.parametrize("seq_lens", SEQ_LENS)
@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", MASKS)
def test_attention(num_heads, seq_lens, head_size, dtype, mask):
    q, k, v = make_inputs(num_heads, seq_lens, head_size, dtype)
    opts = mask_options(mask, seq_lens)
    out = attention(q, k, v, **opts)
    assert_attention_close(out, q, k, v, **opts)


@pytest.mark.parametrize("seq_lens", SEQ_LENS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_broken_kernel_is_caught(seq_lens, dtype):
    q, k, v = make_inputs((8, 2), seq_lens, 64, dtype)
    opts = dict(window=8)
    out = attention_broken(q, k, v, **opts)
    with pytest.raises(AssertionError, match="exceed"):
        assert_attention_close(out, q, k, v, **opts)
