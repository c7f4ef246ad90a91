"""The kernel under test: a deliberately simple NumPy attention, written
the way a kernel is (key tiles, an online softmax, the output in the
input's dtype), so that the test beside it has something real to check.

attention(q, k, v, causal, window, mask, scale) takes vLLM's bhsd shapes
Q [B, Hq, Lq, D], K/V [B, Hkv, Lk, D] with GQA, bottom-right aligned
causal and sliding windows (W keys including the diagonal) and an
additive float mask [Lq, Lk].

attention_broken is the same kernel with one classic slip: its window
keeps one key too many (i' - W <= j instead of i' - W < j).
"""
import numpy as np

TILE = 16


def _attention(q, k, v, causal=False, window=None, mask=None, scale=None,
               window_slip=0):
    out_dtype = q.dtype
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    scale = np.float32(1 / np.sqrt(D) if scale is None else scale)
    pos = np.arange(Lq)[:, None] + (Lk - Lq)          # i'
    out = np.zeros((B, Hq, Lq, v.shape[-1]), np.float32)
    for b in range(B):
        for h in range(Hq):
            qh, kh, vh = q[b, h], k[b, h // g], v[b, h // g]
            m = np.full((Lq, 1), -np.inf, np.float32)
            s_sum = np.zeros((Lq, 1), np.float32)
            acc = np.zeros((Lq, vh.shape[-1]), np.float32)
            for j0 in range(0, Lk, TILE):
                j = np.arange(j0, min(j0 + TILE, Lk))[None, :]
                s = (qh @ kh[j0:j0 + TILE].T) * scale
                if mask is not None:
                    s = s + np.asarray(mask, np.float32)[:, j0:j0 + TILE]
                keep = np.ones(s.shape, bool)
                if causal or window:
                    keep &= j <= pos
                if window:
                    keep &= j > pos - window - window_slip
                s = np.where(keep, s, -np.inf)
                m_new = np.maximum(m, s.max(axis=1, keepdims=True))
                m_safe = np.where(np.isinf(m_new), 0, m_new)
                p = np.exp(s - m_safe)
                corr = np.exp(np.where(np.isinf(m), -np.inf, m - m_safe))
                s_sum = s_sum * corr + p.sum(axis=1, keepdims=True)
                acc = acc * corr + p @ vh[j0:j0 + TILE]
                m = m_new
            out[b, h] = np.where(s_sum > 0, acc / np.where(s_sum > 0, s_sum, 1), 0)
    return out.astype(out_dtype)


def attention(q, k, v, causal=False, window=None, mask=None, scale=None):
    return _attention(q, k, v, causal, window, mask, scale)


def attention_broken(q, k, v, causal=False, window=None, mask=None,
                     scale=None):
    return _attention(q, k, v, causal, window, mask, scale, window_slip=1)

