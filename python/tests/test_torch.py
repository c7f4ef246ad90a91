"""With torch installed: CPU tensors in (f32 and bf16, through __dlpack__
and an int16 view), the oracle on torch outputs, and to_flex_block_mask
equal to FlexAttention's own create_block_mask.  Skipped without torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kvtools import kvattn, kvmask                      # noqa: E402
from kvtools.testing import assert_attention_close     # noqa: E402


def test_tensors_in():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    o1, l1 = kvattn.run(q, k, v, causal=True)
    o2, l2 = kvattn.run(q.numpy(), k.numpy(), v.numpy(), causal=True)
    assert o1.tobytes() == o2.tobytes() and l1.tobytes() == l2.tobytes()
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    ob, _ = kvattn.run(qb, kb, vb, causal=True)
    as_v2 = [t.view(torch.int16).numpy().view("V2") for t in (qb, kb, vb)]
    assert ob.tobytes() == kvattn.run(*as_v2, causal=True)[0].tobytes()
    qd, kd, vd = qb.double(), kb.double(), vb.double()
    s = (qd @ kd.transpose(-1, -2)) / qd.shape[-1] ** 0.5
    s = s.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), -np.inf)
    ref = torch.softmax(s, dim=-1) @ vd     # float64, any torch release
    assert_attention_close(ref.bfloat16(), qb, kb, vb, causal=True)


@pytest.mark.parametrize("n,kind,extra", [(300, "causal", {}),
                                          (513, "window", {"window": 100}),
                                          (256, "full", {})])
def test_flex_block_mask_equals_create_block_mask(n, kind, extra):
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    BlockMask, create_block_mask = fa.BlockMask, fa.create_block_mask
    mods = {"causal": lambda b, h, qi, kj: kj <= qi,
            "window": lambda b, h, qi, kj: (kj <= qi) & (kj > qi - 100),
            "full": lambda b, h, qi, kj: kj >= 0}
    bm = kvmask.to_flex_block_mask(kind, n=n, block_size=128, **extra)
    assert isinstance(bm, BlockMask)
    ref = create_block_mask(mods[kind], 1, 1, n, n, device="cpu", BLOCK_SIZE=128)
    for f in ("kv_num_blocks", "full_kv_num_blocks", "q_num_blocks",
              "full_q_num_blocks"):
        assert torch.equal(getattr(bm, f), getattr(ref, f)), f
    for f, nf in (("kv_indices", "kv_num_blocks"),
                  ("full_kv_indices", "full_kv_num_blocks")):
        cnt = getattr(ref, nf)
        for r in range(cnt.shape[2]):
            c = int(cnt[0, 0, r])
            assert torch.equal(getattr(bm, f)[0, 0, r, :c],
                               getattr(ref, f)[0, 0, r, :c]), (f, r)


@pytest.mark.parametrize("align", [None, "bottom-right", "top-left"])
def test_flex_block_mask_align(align):
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k = 200, 450
    off = 0 if align == "top-left" else k - q
    bm = kvmask.to_flex_block_mask("causal", q=q, k=k, block_size=128,
                                   align=align)
    ref = fa.create_block_mask(lambda b, h, qi, kj: kj <= qi + off, 1, 1, q, k,
                               device="cpu", BLOCK_SIZE=128)
    for f in ("kv_num_blocks", "full_kv_num_blocks"):
        assert torch.equal(getattr(bm, f), getattr(ref, f)), f
    x = torch.arange(q).view(-1, 1)
    y = torch.arange(k).view(1, -1)
    assert torch.equal(bm.mask_mod(0, 0, x, y), ref.mask_mod(0, 0, x, y))
