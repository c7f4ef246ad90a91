#!/usr/bin/env python3
"""Regenerate the kvmask conformance goldens with the upstream expressions.

Run by hand (never by make check) with a python3 that has numpy and torch:

    python3 tests/vectors/masks/gen.py

It writes tests/vectors/masks/gen/*.npy (small arrays, compared byte for
byte with kvmask output) and tests/golden/kvmask/*.cksum (POSIX cksum of
the .npy of masks too large to commit: the 2048 and 512 templates).

Each mask is built the way the upstream project builds it, as described in
the kvtools spec (masks-slots.md sections A, E, F): torch.triu/tril,
masked_fill, .to(dtype) conversions, torch.where with Python scalars,
index_select of cached rows times a scale, FlexAttention's tile sums and
stable descending argsort, FlashInfer's little-endian packbits and BSR mask
layout.  The expressions are written here from those descriptions; kvmask is
an independent implementation in C.
"""
import io
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
OUT = os.path.join(HERE, "gen")
CK = os.path.join(TOP, "tests", "golden", "kvmask")
os.makedirs(OUT, exist_ok=True)
os.makedirs(CK, exist_ok=True)


# ---- writing ---------------------------------------------------------------

def npy_bytes(a):
    """np.save bytes; a bf16 torch tensor becomes descr '<V2' (what np.save
    writes for an ml_dtypes.bfloat16 array)."""
    buf = io.BytesIO()
    if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16:
        bits = a.contiguous().view(torch.int16).numpy().astype("<u2")
        np.save(buf, bits)
        raw = buf.getvalue()
        return raw.replace(b"'descr': '<u2'", b"'descr': '<V2'")
    if isinstance(a, torch.Tensor):
        a = a.contiguous().numpy()
    np.save(buf, np.ascontiguousarray(a))
    return buf.getvalue()


def save(name, *arrays):
    with open(os.path.join(OUT, name + ".npy"), "wb") as f:
        for a in arrays:
            f.write(npy_bytes(a))


def save_cksum(name, a):
    data = npy_bytes(a)
    out = subprocess.run(["cksum"], input=data, capture_output=True,
                         check=True).stdout.decode().split()
    with open(os.path.join(CK, name + ".cksum"), "w") as f:
        f.write("%s %s\n" % (out[0], out[1]))


# ---- vllm-ascend AttentionMaskBuilder (spec A.1, A.2) -----------------------

def generate_attn_mask(n, dtype):
    """HEAD form: zeros in dtype, masked_fill of the strict upper triangle
    with -inf for fp16 and 1 otherwise."""
    upper = ~torch.ones((n, n), dtype=torch.bool).tril_()
    fill = float("-inf") if dtype == torch.float16 else 1
    return torch.zeros((n, n), dtype=dtype).masked_fill_(upper, fill)


def generate_attn_mask_v0(n, dtype):
    """2025-07 form: fp32 zeros, finfo(float32).min for fp16, then cast."""
    upper = ~torch.ones((n, n), dtype=torch.bool).tril_()
    fill = torch.finfo(torch.float32).min if dtype == torch.float16 else 1
    return torch.zeros((n, n), dtype=torch.float32).masked_fill_(
        upper, fill).to(dtype)


class Builder:
    """The get_attn_mask cache: rebuilt only when n grows, else .to()."""
    def __init__(self):
        self.cache = None
        self.n = 0

    def get_attn_mask(self, n, dtype):
        if self.cache is None or n > self.n:
            self.cache = generate_attn_mask(n, dtype)
            self.n = n
        elif self.cache.dtype != dtype:
            self.cache = self.cache.to(dtype)
        return self.cache[:n, :n].contiguous()


def splitfuse_rows(seq_lens, query_lens, dtype, cache_len=64):
    """2025-08..11 per-row splitfuse mask: rows of the cached causal mask at
    each token's position, columns up to max(seq_lens), times the scale
    (fp16: 1, bf16: -10000)."""
    cache = generate_attn_mask(cache_len, dtype)
    pos = []
    for s, q in zip(seq_lens, query_lens):
        pos += list(range(s - q, s))
    rows = torch.index_select(cache, 0, torch.tensor(pos))[:, :max(seq_lens)]
    scale = 1 if dtype == torch.float16 else -10000
    return rows * scale


def splitfuse_fallback(seq_lens, query_lens, dtype):
    """2025-07 fallback: [sum(q), max(seq)] zeros; per request columns >=
    context_len set to -10000, then the lower triangle (incl. diagonal) of
    the [context_len, seq_len) block reset to 0."""
    m = torch.zeros((sum(query_lens), max(seq_lens)), dtype=dtype)
    r0 = 0
    for s, q in zip(seq_lens, query_lens):
        cl = s - q
        m[r0:r0 + q, cl:] = -10000
        blk = m[r0:r0 + q, cl:s]
        blk[torch.tril(torch.ones((q, q), dtype=torch.bool))] = 0
        m[r0:r0 + q, cl:s] = blk
        r0 += q
    return m


def mla_mask(dtype):
    fill = torch.finfo(torch.float32).min if dtype == torch.float16 else 1
    pre = torch.triu(torch.ones(512, 512, dtype=dtype), 1)
    return torch.where(pre == 1, fill, 0).to(dtype)


def pcp_mla_mask(dtype):
    return torch.triu(torch.ones(512, 512, dtype=dtype), 1)


def swa_mask(w):
    ones = torch.ones(2048, 2048, dtype=torch.bool)
    return torch.triu(ones, diagonal=1) + torch.tril(ones, -w)


def nd_to_nz_2d(x):
    """Ascend FRACTAL_NZ: pad rows/cols to multiples of 16, output
    (1, C16/16, R16, 16) with out[0, j//16, i, j%16] = x[i, j]."""
    r, c = x.shape
    r16, c16 = -(-r // 16) * 16, -(-c // 16) * 16
    p = torch.zeros((r16, c16), dtype=x.dtype)
    p[:r, :c] = x
    return p.reshape(r16, c16 // 16, 16).permute(1, 0, 2).unsqueeze(0)


def cp_local_len(L, cp, rank, I):
    full = L // I // cp * I
    return full + min(max(L - full * cp - rank * I, 0), I)


def mtp_cp_mask(history, q_lens, cp, rank, I):
    """CP MTP decode mask (spec A.5): bool [R, max_q, max_k], True = masked;
    row t masks local columns k >= n(P+1) when n >= 1, inside
    [q_len) x [kv_len_local)."""
    kl = [cp_local_len(h + q, cp, rank, I) for h, q in zip(history, q_lens)]
    m = torch.zeros(len(q_lens), max(q_lens), max(kl), dtype=torch.bool)
    for r, (h, q) in enumerate(zip(history, q_lens)):
        for t in range(q):
            n = cp_local_len(h + t + 1, cp, rank, I)
            if n >= 1:
                m[r, t, n:kl[r]] = True
    return m


# ---- keep masks: FlashAttention / FIA / attention-gym (spec A.3, A.4, F) -----

def idx(q, kv):
    i = torch.arange(q).unsqueeze(1)
    j = torch.arange(kv).unsqueeze(0)
    return i, j


def fa_causal(q, kv):
    i, j = idx(q, kv)
    return j <= i + kv - q


def fa_window(q, kv, w):
    """FlashAttention window_size = (W-1, 0), bottom-right."""
    i, j = idx(q, kv)
    ip = i + kv - q
    return (j <= ip) & (j >= ip - (w - 1))


def fia_band(q, kv, pre, nxt):
    """torch_npu reference: triu(k=next+1) + tril(k=-pre-1) masked, with the
    origin moved to the bottom-right corner."""
    ones = torch.ones(q, kv, dtype=torch.bool)
    d = kv - q
    masked = torch.triu(ones, diagonal=nxt + 1 + d) | torch.tril(
        ones, diagonal=-pre - 1 + d)
    return ~masked


def fia_top_left(q, kv):
    return ~torch.triu(torch.ones(q, kv, dtype=torch.bool), diagonal=1)


def varlen(qs, kvs, w=0):
    m = torch.zeros(sum(qs), sum(kvs), dtype=torch.bool)
    r0 = c0 = 0
    for q, kv in zip(qs, kvs):
        m[r0:r0 + q, c0:c0 + kv] = fa_window(q, kv, w) if w else fa_causal(q, kv)
        r0 += q
        c0 += kv
    return m


def chunk_mask(sys_len, chunks, q_len):
    """Seed 001 RAG mask: sys causal; chunk tokens see every sys token and
    their own chunk causally; question tokens see everything up to
    themselves."""
    seg = [-1] * sys_len
    for c, n in enumerate(chunks):
        seg += [c] * n
    seg += [-2] * q_len
    n = len(seg)
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            m[i, j] = seg[i] < 0 or seg[j] == -1 or seg[j] == seg[i]
    return m


def prefix_lm(q, kv, p):
    i, j = idx(q, kv)
    return (j < p) | (i >= j)


# ---- FlexAttention create_block_mask (spec E.1) -----------------------------

def dense_to_ordered(d):
    d = d.to(torch.int32)
    num = d.sum(dim=-1).to(torch.int32)
    ind = torch.argsort(d, dim=-1, descending=True, stable=True).to(torch.int32)
    return num.contiguous(), ind.contiguous()


def ordered_to_dense(num, ind):
    rows, cols = ind.shape[-2], ind.shape[-1]
    out = torch.zeros(ind.shape[:-2] + (rows, cols + 1), dtype=torch.int32)
    valid = torch.arange(cols) < num.unsqueeze(-1)
    where = torch.where(valid, ind.long(), torch.tensor(cols))
    out.scatter_(-1, where, 1)
    return out[..., :cols]


def transpose_ordered(num, ind):
    return dense_to_ordered(ordered_to_dense(num, ind).transpose(-2, -1))


def block_mask(mask, b, h, bq, bk):
    """mask: [Q, KV] bool (True = attend), broadcast to [B, H, Q, KV]."""
    q, kv = mask.shape
    m = mask.expand(b, h, q, kv)
    pq, pk = (-q) % bq, (-kv) % bk
    m = torch.nn.functional.pad(m, (0, pk, 0, pq))
    _, _, Q, KV = m.shape
    m = m.view(b, h, Q // bq, bq, KV // bk, bk).permute(0, 1, 2, 4, 3, 5)
    s = m.sum(dim=[-2, -1])
    full = s == bq * bk
    partial = (s > 0) & (s < bq * bk)
    kvn, kvi = dense_to_ordered(partial.to(torch.int8))
    fkvn, fkvi = dense_to_ordered(full.to(torch.int8))
    qn, qi = transpose_ordered(kvn, kvi)
    fqn, fqi = transpose_ordered(fkvn, fkvi)
    return [kvn, kvi, fkvn, fkvi, qn, qi, fqn, fqi]


# ---- FlashInfer (spec E.2) --------------------------------------------------

def packbits_little(m):
    return np.packbits(m.numpy().astype(np.uint8).ravel(), bitorder="little")


def bsr(mask, r, c):
    """indptr, indices and the packed mask of BlockSparseAttentionWrapper."""
    M, N = mask.shape
    assert N % c == 0
    mb = -(-M // r)
    p = torch.zeros(mb * r, N, dtype=torch.bool)
    p[:M] = mask
    tiles = p.view(mb, r, N // c, c).permute(0, 2, 1, 3)   # [mb, nb, r, c]
    nz = tiles.any(dim=-1).any(dim=-1)
    indptr = [0]
    indices = []
    packed = []
    for a in range(mb):
        cols = torch.nonzero(nz[a]).flatten().tolist()
        indices += cols
        indptr.append(len(indices))
        if cols:
            rows = min(r, M - a * r)    # the last block row: its real rows
            blocks = tiles[a, cols, :rows]                  # [k, rows, c]
            seg = blocks.permute(1, 0, 2).reshape(-1)        # [rows][k][c]
            packed.append(packbits_little(seg))
    packed = np.concatenate(packed) if packed else np.zeros(0, np.uint8)
    return (np.array(indptr, np.int32), np.array(indices, np.int32), packed)


def main():
    # Ascend builder
    for dt, name in [(torch.float16, "f16"), (torch.bfloat16, "bf16"),
                     (torch.float32, "f32"), (torch.bool, "bool"),
                     (torch.int8, "i8")]:
        save("ascend_attn_%s_7" % name, generate_attn_mask(7, dt))
    assert torch.equal(generate_attn_mask_v0(9, torch.float16),
                       generate_attn_mask(9, torch.float16))
    save("ascend_attn_v0_f16_9", generate_attn_mask_v0(9, torch.float16))
    b = Builder()
    b.get_attn_mask(8, torch.float16)
    save("ascend_attn_cache_f16_then_bf16_5", b.get_attn_mask(5, torch.bfloat16))
    b = Builder()
    b.get_attn_mask(8, torch.bool)
    save("ascend_attn_cache_bool_then_f16_5", b.get_attn_mask(5, torch.float16))
    b = Builder()
    b.get_attn_mask(8, torch.float16)
    save("ascend_attn_cache_f16_then_bool_6", b.get_attn_mask(6, torch.bool))

    tmpl = torch.triu(torch.ones(2048, 2048), diagonal=1).to(torch.int8)
    save_cksum("ascend_splitfuse_i8_2048", tmpl)
    save("ascend_splitfuse_i8_slice9", tmpl[:9, :9])
    save_cksum("ascend_pooling_bool_2048", tmpl.to(torch.bool))
    save_cksum("ascend_splitfuse_as_bool_2048", tmpl.to(torch.bool))
    for dt, name in [(torch.float16, "f16"), (torch.bfloat16, "bf16")]:
        save_cksum("ascend_mla_%s_512" % name, mla_mask(dt))
        save_cksum("ascend_pcp_mla_%s_512" % name, pcp_mla_mask(dt))
    save("ascend_mla_f16_slice6", mla_mask(torch.float16)[:6, :6])
    save("ascend_mla_bf16_slice6", mla_mask(torch.bfloat16)[:6, :6])
    for w in (1, 2, 5, 100):
        save_cksum("ascend_swa_w%d_2048" % w, swa_mask(w))
    save("ascend_swa_w2_slice6", swa_mask(2)[:6, :6])
    p310 = torch.triu(torch.ones(2048, 2048), 1).to(torch.float16).mul_(-10000.0)
    save_cksum("ascend_310p_splitfuse_f16_2048", p310)
    save("ascend_310p_splitfuse_f16_slice6", p310[:6, :6])
    for seq, ql, tag in [([5, 3], [2, 3], "a"), ([9, 4, 6], [3, 4, 1], "b")]:
        for dt, name in [(torch.float16, "f16"), (torch.bfloat16, "bf16")]:
            save("ascend_splitfuse_rows_%s_%s" % (tag, name),
                 splitfuse_rows(seq, ql, dt))
            save("ascend_splitfuse_fallback_%s_%s" % (tag, name),
                 splitfuse_fallback(seq, ql, dt))
    save("ascend_attn_f16_13_nz", nd_to_nz_2d(generate_attn_mask(13, torch.float16)))
    save("causal_keep_f16_q13_kv30_nz", nd_to_nz_2d(fa_causal(13, 30).to(torch.float16)))
    save("ascend_attn_f16_40_nz", nd_to_nz_2d(generate_attn_mask(40, torch.float16)))

    for args in [([5], [4], 2, 0, 1), ([5], [4], 2, 1, 1),
                 ([5, 2, 11], [4, 2, 3], 2, 0, 1), ([9, 30], [3, 5], 4, 3, 2),
                 ([16, 7], [2, 4], 4, 1, 4)]:
        h, q, cp, rank, I = args
        save("ascend_mtp_cp_h%s_q%s_cp%d_r%d_i%d" % (
            "-".join(map(str, h)), "-".join(map(str, q)), cp, rank, I),
            mtp_cp_mask(h, q, cp, rank, I))
    # spec A.5 example, rank 0 and rank 1
    assert mtp_cp_mask([5], [4], 2, 0, 1)[0].int().tolist() == [
        [0, 0, 0, 1, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]
    assert mtp_cp_mask([5], [4], 2, 1, 1)[0].int().tolist() == [
        [0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]]

    # keep masks
    for q, kv in [(2, 5), (5, 2), (7, 7), (3, 9)]:
        save("fa_causal_q%d_kv%d" % (q, kv), fa_causal(q, kv))
    for w in (1, 2, 3, 5):
        for q, kv in [(4, 9), (9, 9), (6, 3)]:
            save("fa_window_w%d_q%d_kv%d" % (w, q, kv), fa_window(q, kv, w))
    for pre, nxt in [(2, 0), (0, 2), (3, 1), (1, 4)]:
        for q, kv in [(3, 6), (6, 6), (7, 4)]:
            save("fia_band_pre%d_next%d_q%d_kv%d" % (pre, nxt, q, kv),
                 fia_band(q, kv, pre, nxt))
    assert torch.equal(fia_band(3, 6, 2, 0), fa_window(3, 6, 3))
    save("fia_top_left_q3_kv6", fia_top_left(3, 6))
    save("fia_top_left_q6_kv4", fia_top_left(6, 4))
    save("flex_prefix_p3_6", prefix_lm(6, 6, 3))
    save("flex_prefix_p4_9", prefix_lm(9, 9, 4))
    save("flex_prefix_p5_q4_kv9", prefix_lm(4, 9, 5))
    save("fa_varlen_q2-3_kv5-3", varlen([2, 3], [5, 3]))
    save("fa_varlen_q1-1-1_kv4-2-7", varlen([1, 1, 1], [4, 2, 7]))
    save("fa_varlen_q3-2", varlen([3, 2], [3, 2]))
    save("fa_varlen_w2_q3-4_kv6-4", varlen([3, 4], [6, 4], 2))
    save("chunk_s3_c2-3_q2", chunk_mask(3, [2, 3], 2))
    save("chunk_s0_c2-2_q1", chunk_mask(0, [2, 2], 1))
    save("chunk_s2_c3_q0", chunk_mask(2, [3], 0))
    # the segments of `kvchunk split` as an int .npy [n, 3]: kind, offset, length
    save("segments_s3_c2-3_q2", np.array([[0, 0, 3], [1, 3, 2], [1, 5, 3],
                                          [2, 8, 2]], np.int64))

    # FlexAttention BlockMask streams (C order)
    causal = lambda q, kv: fa_causal(q, kv) if q == kv else idx(q, kv)[0] >= idx(q, kv)[1]
    bm6 = block_mask(causal(6, 6), 1, 1, 2, 2)
    names = ["kv_num_blocks", "kv_indices", "full_kv_num_blocks",
             "full_kv_indices", "q_num_blocks", "q_indices",
             "full_q_num_blocks", "full_q_indices"]
    for n, t in zip(names, bm6):     # the public vectors (two in F order)
        pub = np.load(os.path.join(HERE, "flex_causal_bs2_%s.npy" % n))
        assert np.array_equal(pub, t.numpy()), n
    save("flex_causal_bs2_6", *bm6)
    save("flex_causal_bs2_5", *block_mask(causal(5, 5), 1, 1, 2, 2))
    save("flex_causal_tl_q10_kv13_bs4x3", *block_mask(causal(10, 13), 1, 1, 4, 3))
    save("flex_causal_br_q10_kv13_bs4x3", *block_mask(fa_causal(10, 13), 1, 1, 4, 3))
    i, j = idx(11, 11)
    save("flex_window_w3_11_bs4", *block_mask((i - j <= 3) & (i >= j), 1, 1, 4, 4))
    save("flex_prefix_p5_13_bs4", *block_mask(prefix_lm(13, 13, 5), 1, 1, 4, 4))
    save("flex_document_3-5-4_bs4", *block_mask(varlen([3, 5, 4], [3, 5, 4]), 1, 1, 4, 4))
    save("flex_causal_b2_h3_7_bs3", *block_mask(causal(7, 7), 2, 3, 3, 3))
    save("flex_chunk_s3_c2-3_q2_bs2", *block_mask(chunk_mask(3, [2, 3], 2), 1, 1, 2, 2))

    # FlashInfer
    save("flashinfer_causal_6_bits", packbits_little(fa_causal(6, 6)))
    a = packbits_little(fa_causal(2, 5))
    b2 = packbits_little(fa_causal(3, 3))
    save("flashinfer_varlen_q2-3_kv5-3_bits", np.concatenate([a, b2]),
         np.array([0, len(a), len(a) + len(b2)], np.int32))
    save("flashinfer_window_w3_q5_kv11_bits", packbits_little(fa_window(5, 11, 3)))
    save("flashinfer_bsr_causal_6_r2c2", *bsr(fa_causal(6, 6), 2, 2))
    save("flashinfer_bsr_causal_q10_kv12_r4c3", *bsr(fa_causal(10, 12), 4, 3))
    save("flashinfer_bsr_window_w5_16_r4c4", *bsr(fa_window(16, 16, 5), 4, 4))
    save("flashinfer_bsr_varlen_q3-5_kv4-8_r2c4", *bsr(varlen([3, 5], [4, 8]), 2, 4))
    print("wrote", OUT, "and", CK)


if __name__ == "__main__":
    sys.exit(main())
