# scripts/crosscheck/stage_kvattn_index.py - kvattn index against
# transformers 5.23.0's DeepseekV32Indexer.
#
# For random small configs (indexer heads, head size, RoPE part, top-k) the
# module is built with random weights and run on random hidden states with
# a causal mask, unmodified; it returns each query's top-k key indices.
# The same module's own projections, LayerNorm and transformers'
# apply_rotary_pos_emb give the indexer's Q and K, and its weights_proj
# times H^-0.5 the head weights, which kvattn index takes.  Per query, the
# indices must agree where the query sees at least top-k keys (transformers
# pads shorter rows with masked keys, kvattn with -1: those rows compare the
# visible part).  transformers scores in float32, kvattn in double: an
# index set that differs is accepted only where the keys swapped have
# float64 scores within 1e-5 of each other (a near-tie), and such cases are
# counted.
import os
import sys
import tempfile

import numpy as np
import torch
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as m
from transformers import DeepseekV32Config

sys.path.insert(0, os.path.dirname(__file__))
from stage_common import Count, kv, npys  # noqa: E402

rng = np.random.default_rng(32)
torch.manual_seed(32)
c = Count("kvattn-index")
tmp = tempfile.mkdtemp(prefix="kvidx.")
near_ties = [0, 0]   # [within 1e-5, exactly equal scores (torch's order among ties is its own)]


def case(i):
    global near_ties
    nh = int(rng.integers(1, 9))
    hd = int(rng.choice([16, 32, 64]))
    rope = int(rng.choice([8, hd // 2]))
    hidden = 64
    qlora = 32
    s = int(rng.integers(2, 48))
    topk = int(rng.integers(1, s + 8))
    cfg = DeepseekV32Config(hidden_size=hidden, q_lora_rank=qlora, index_n_heads=nh,
                            index_head_dim=hd, qk_rope_head_dim=rope, index_topk=topk,
                            num_attention_heads=2, num_hidden_layers=1)
    mod = m.DeepseekV32Indexer(cfg, 0).float().eval()
    for p in mod.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(1, s, hidden)
    qr = torch.randn(1, s, qlora)
    pos = torch.arange(s, dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, rope, 2, dtype=torch.float32) / rope))
    fr = torch.outer(pos, inv)
    emb = torch.cat([fr, fr], -1)[None]
    cos, sin = emb.cos(), emb.sin()
    mask = torch.ones(s, s, dtype=torch.bool).tril()[None]
    with torch.no_grad():
        got_tf = mod(x, qr, (cos, sin), mask, None).numpy()[0]
        q = mod.wq_b(qr).view(1, s, nh, hd)
        q_rot, q_pass = torch.split(q, [rope, hd - rope], dim=-1)
        k = mod.k_norm(mod.wk(x)).unsqueeze(2)
        k_rot, k_pass = torch.split(k, [rope, hd - rope], dim=-1)
        q_rot, k_rot = m.apply_rotary_pos_emb(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q_pass], -1)[0]
        k = torch.cat([k_rot, k_pass], -1).squeeze(2)[0]
        w = (mod.weights_proj(x).float() * nh ** -0.5)[0]
    pq, pk, pw = (os.path.join(tmp, n) for n in ("q.npy", "k.npy", "w.npy"))
    np.save(pq, q.numpy()); np.save(pk, k.numpy()); np.save(pw, w.numpy())
    got = npys(kv("kvattn", "index", "-q", pq, "-k", pk, "--weights", pw, "--topk", topk))[0]
    qd, kd, wd = q.double().numpy(), k.double().numpy(), w.double().numpy()
    sc = np.einsum("ih,iht->it", wd, np.maximum(np.einsum("ihd,td->iht", qd, kd) * hd ** -0.5, 0))
    kk = min(topk, s)
    for r in range(s):
        vis = r + 1
        mine = [t for t in got[r] if t >= 0]
        if vis >= kk:
            theirs = list(got_tf[r][:kk])
        else:
            theirs = [t for t in got_tf[r] if t < vis]
        if len(mine) != len(theirs):
            return "row %d: %d indices, transformers %d" % (r, len(mine), len(theirs))
        if set(mine) != set(theirs):
            a, b = set(mine) - set(theirs), set(theirs) - set(mine)
            gap = max(abs(sc[r, x] - sc[r, y]) for x in a for y in b)
            if gap > 1e-5 * max(1.0, abs(sc[r]).max()):
                return "row %d: %s against %s (gap %.3g)" % (r, sorted(a), sorted(b), gap)
            near_ties[int(gap == 0)] += 1
    return None


for i in range(300):
    try:
        err = case(i)
    except Exception as e:  # noqa: BLE001
        err = "%s: %s" % (type(e).__name__, e)
    c.check(err is None, "DeepseekV32Indexer top-k", "case %d: %s" % (i, err))
print("  rows whose sets differ only among equal scores: %d; among scores within 1e-5: %d"
      % (near_ties[1], near_ties[0]))
sys.exit(c.close())
