# scripts/crosscheck/stage_kvattn_dsa.py - DeepSeek-V3.2's sparse attention
# (DSA): kvattn index | kvattn mla --topk-indices against transformers
# 5.23.0's DeepseekV32Attention, unmodified.
#
# For random small configs (heads, latent and head sizes, indexer heads and
# size, top-k, default or YaRN RoPE) the module is built with random
# weights, in float64, with the eager attention, and run on random hidden
# states under a causal mask.  Forward hooks only record what the module
# computes: its indexer's top-k indices (its return value), the input of
# o_proj (the attention's output, [S, H * v_head_dim]), the normalised
# latent (kv_a_layernorm's output), the rotary key before RoPE
# (kv_a_proj_with_mqa's output) and the query (q_b_proj's output).  From
# those, with transformers' own RoPE functions:
#   - the indexer's Q, K and head weights, as its forward makes them
#     (float32, as it casts them), for kvattn index;
#   - the latent cache rows [c_kv | RoPE(k_pe)] in a paged cache with a
#     shuffled block table, and the absorbed query [W_UK^T q_nope | RoPE(q_pe)]
#     and W_UV from kv_b_proj's weight, for kvattn mla --w-uv.
# Then `kvattn index ... | kvattn mla ... --topk-indices -` (a pipe) must
# give the module's attention output within kvattn's bound (-v, through
# W_UV) plus the effect of rounding the float64 inputs to the float32 that
# kvattn reads (derived below).  The indices are compared first as in
# stage_kvattn_index.py: transformers scores in float32, kvattn in double,
# so sets that differ only among keys whose float64 scores are within 1e-5
# (near-ties) are accepted and counted, and the attention is then run on
# transformers' indices (its padding past the visible keys becomes -1).
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import DeepseekV32Config
from transformers.models.deepseek_v32 import modeling_deepseek_v32 as m

sys.path.insert(0, os.path.dirname(__file__))
from stage_common import BIN, Count, kv, npys  # noqa: E402

U = 2.0 ** -24          # f32's unit roundoff
rng = np.random.default_rng(3232)
torch.manual_seed(3232)
c = Count("kvattn-dsa")
tmp = tempfile.mkdtemp(prefix="kvdsa.")
counts = {"near_ties": 0, "exact_ties": 0, "yarn": 0, "padded_rows": 0}
worst = [0.0, 0.0, 0.0]     # the largest error, its bound, and the largest output


def p(name):
    return os.path.join(tmp, name)


def make_case():
    h = int(rng.integers(1, 5))
    rope = int(rng.choice([4, 8]))
    nope = int(rng.choice([8, 16]))
    vd = int(rng.choice([8, 16]))
    dl = int(rng.choice([16, 32]))
    nh_i = int(rng.integers(1, 5))
    hd_i = int(rng.choice([16, 32]))
    s = int(rng.integers(2, 40))
    topk = int(rng.integers(1, s + 6))
    yarn = bool(rng.integers(0, 2))
    rp = {"rope_type": "default", "rope_theta": 10000.0}
    if yarn:
        rp = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 1.0,
              "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
              "beta_fast": 32.0, "beta_slow": 1.0}
    cfg = DeepseekV32Config(hidden_size=64, q_lora_rank=32, kv_lora_rank=dl,
                            qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=vd,
                            num_attention_heads=h, num_key_value_heads=h,
                            index_n_heads=nh_i, index_head_dim=hd_i, index_topk=topk,
                            num_hidden_layers=1, rope_parameters=rp)
    cfg._attn_implementation = "eager"
    return cfg, s, yarn


def run_case(i):
    cfg, s, yarn = make_case()
    counts["yarn"] += yarn
    mod = m.DeepseekV32Attention(cfg, 0).double().eval()
    for prm in mod.parameters():
        torch.nn.init.normal_(prm, std=0.3)
    h, dl, rope = cfg.num_attention_heads, cfg.kv_lora_rank, cfg.qk_rope_head_dim
    nope, vd, topk = cfg.qk_nope_head_dim, cfg.v_head_dim, cfg.index_topk
    x = torch.randn(1, s, cfg.hidden_size, dtype=torch.float64)
    # the RoPE cos/sin the model's rotary embedding gives these positions
    # (its inv_freq and attention scaling, for default and YaRN alike)
    rot = m.DeepseekV32RotaryEmbedding(cfg)
    pos = torch.arange(s)[None]
    cos, sin = rot(x, pos)
    cos, sin = cos.double(), sin.double()
    if cos.shape[-1] != rope:
        return "the rotary embedding has %d dims, qk_rope_head_dim %d" % (cos.shape[-1], rope)
    mask = torch.full((1, 1, s, s), torch.finfo(torch.float64).min, dtype=torch.float64).triu(1)
    rec = {}
    hooks = [
        mod.indexer.register_forward_hook(lambda md, a, o: rec.__setitem__("idx", o)),
        mod.indexer.register_forward_pre_hook(
            lambda md, a: rec.__setitem__("ix_in", a), with_kwargs=False),
        mod.o_proj.register_forward_pre_hook(lambda md, a: rec.__setitem__("att", a[0])),
        mod.kv_a_layernorm.register_forward_hook(lambda md, a, o: rec.__setitem__("ckv", o)),
        mod.kv_a_proj_with_mqa.register_forward_hook(lambda md, a, o: rec.__setitem__("kva", o)),
        mod.q_b_proj.register_forward_hook(lambda md, a, o: rec.__setitem__("qb", o)),
    ]
    with torch.no_grad():
        mod(x, (cos, sin), mask)
        for hk in hooks:
            hk.remove()
        # the indexer's Q, K and weights, as its forward computes them
        ix = mod.indexer
        hs, q_resid = rec["ix_in"][0], rec["ix_in"][1]
        iq = ix.wq_b(q_resid).view(1, s, ix.n_heads, ix.head_dim)
        q_rot, q_pass = torch.split(iq, [rope, ix.head_dim - rope], dim=-1)
        ik = ix.k_norm(ix.wk(hs)).unsqueeze(2)
        k_rot, k_pass = torch.split(ik, [rope, ix.head_dim - rope], dim=-1)
        q_rot, k_rot = m.apply_rotary_pos_emb(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
        iq = torch.cat([q_rot, q_pass], -1)[0].float()
        ik = torch.cat([k_rot, k_pass], -1).squeeze(2)[0].float()
        iw = (ix.weights_proj(hs.to(ix.weights_proj.weight.dtype)).float() * ix.n_heads ** -0.5)[0]
        # the main attention's latent rows and absorbed query
        ckv = rec["ckv"][0]                                       # [s, dl]
        kpe = rec["kva"][..., dl:].view(1, 1, s, rope)
        qs = rec["qb"].view(1, s, h, nope + rope).transpose(1, 2)  # [1, h, s, nope + rope]
        q_nope, q_pe = torch.split(qs, [nope, rope], dim=-1)
        q_pe, kpe = m.apply_rotary_pos_emb_interleave(q_pe, kpe, cos, sin)
        wkv = mod.kv_b_proj.weight.detach().view(h, nope + vd, dl)         # [h, nope + vd, dl]
        w_uk, w_uv = wkv[:, :nope, :], wkv[:, nope:, :]
        qa = torch.einsum("hsp,hpl->shl", q_nope[0], w_uk)          # [s, h, dl]
        qabs = torch.cat([qa, q_pe[0].transpose(0, 1)], -1)         # [s, h, dl + rope]
        latent = torch.cat([ckv, kpe[0, 0]], -1)                    # [s, dl + rope]
        want = rec["att"][0].view(s, h, vd).numpy()
        got_tf = rec["idx"][0].numpy()
    # the paged cache: blocks of bs rows, handed out shuffled (block 0 unused)
    bs = int(rng.integers(1, 9))
    nb = (s + bs - 1) // bs
    perm = rng.permutation(nb) + 1
    cache = np.zeros((nb + 1, bs, 1, dl + rope))
    for j in range(s):
        cache[perm[j // bs], j % bs, 0] = latent[j].numpy()
    np.save(p("cache.npy"), cache.astype(np.float32))
    np.save(p("bt.npy"), perm[None].astype(np.int32))
    np.save(p("q.npy"), qabs.numpy().astype(np.float32))
    np.save(p("wuv.npy"), np.ascontiguousarray(w_uv.transpose(1, 2).numpy(), np.float32))   # [h, dl, vd]
    np.save(p("iq.npy"), iq.numpy())
    np.save(p("ik.npy"), ik.numpy())
    np.save(p("iw.npy"), iw.numpy())
    scale = repr(float(mod.scaling))
    mla = [os.path.join(BIN, "kvattn"), "mla", "-q", p("q.npy"), "--kv-cache", p("cache.npy"),
           "--block-table", p("bt.npy"), "--seq-lens", str(s), "--q-lens", str(s), "--causal",
           "--scale", scale, "--kv-lora-rank", str(dl), "--w-uv", p("wuv.npy"), "-v"]
    # kvattn index's indices against transformers' (as stage_kvattn_index.py)
    mine = npys(kv("kvattn", "index", "-q", p("iq.npy"), "-k", p("ik.npy"), "--weights",
                   p("iw.npy"), "--topk", topk))[0]
    sc = np.einsum("ih,iht->it", iw.double().numpy(), np.maximum(
        np.einsum("ihd,td->iht", iq.double().numpy(), ik.double().numpy()) * ix.head_dim ** -0.5, 0))
    kk = min(topk, s)
    differ = False
    for r in range(s):
        a = set(int(t) for t in mine[r] if t >= 0)
        b = set(int(t) for t in got_tf[r][:kk] if t <= r)
        if r + 1 < kk:
            counts["padded_rows"] += 1
        if a != b:
            if len(a) != len(b):
                return "row %d: %d indices, transformers %d" % (r, len(a), len(b))
            gap = max(abs(sc[r, u] - sc[r, v]) for u in a - b for v in b - a)
            if gap > 1e-5 * max(1.0, abs(sc[r]).max()):
                return "row %d: indices %s against %s (gap %.3g)" % (r, sorted(a - b),
                                                                    sorted(b - a), gap)
            differ = True
            counts["exact_ties"] += gap == 0
    if not differ:
        # the pipeline itself: kvattn index | kvattn mla --topk-indices -
        ix_cmd = [os.path.join(BIN, "kvattn"), "index", "-q", p("iq.npy"), "-k", p("ik.npy"),
                  "--weights", p("iw.npy"), "--topk", str(topk)]
        p1 = subprocess.Popen(ix_cmd, stdout=subprocess.PIPE)
        p2 = subprocess.run(mla + ["--topk-indices", "-"], stdin=p1.stdout, capture_output=True)
        p1.stdout.close()
        if p1.wait() != 0 or p2.returncode != 0:
            return "pipeline failed: %s" % p2.stderr.decode(errors="replace").strip()
        out_b, err_b = p2.stdout, p2.stderr
    else:
        counts["near_ties"] += 1
        t_idx = np.where(got_tf[:, :kk] <= np.arange(s)[:, None], got_tf[:, :kk], -1)
        np.save(p("tidx.npy"), t_idx.astype(np.int32))
        r2 = subprocess.run(mla + ["--topk-indices", p("tidx.npy")], capture_output=True)
        if r2.returncode != 0:
            return "kvattn mla failed: %s" % r2.stderr.decode(errors="replace").strip()
        out_b, err_b = r2.stdout, r2.stderr
    got = npys(out_b)[0].astype(np.float64)
    bound = float(err_b.decode().split("error bound ")[1].split()[0])
    # Rounding kvattn's inputs from float64 to float32 (relative U each):
    # a score moves by at most scale sum_i |q_i| |L_i| 2U <= 2U A with A =
    # scale max|q'|_2 max|L|_2 (Cauchy-Schwarz); softmax weights p then
    # move their average of V by at most 2 max|ds| max|V| (its Jacobian
    # diag(p) - p p^T has infinity norm <= 2); V itself by U max|V|; and
    # the projection by W_UV (its columns' L1 norm w1, rounded too: U) adds
    # U |O'| w1.  With the f32 output's own rounding counted in the bound.
    qn = np.linalg.norm(qabs.numpy(), axis=-1).max()
    ln = np.linalg.norm(latent.numpy(), axis=-1).max()
    vmax = np.abs(latent.numpy()[:, :dl]).max()
    w1 = np.abs(w_uv.numpy()).sum(-1).max()
    A = float(mod.scaling) * qn * ln
    allow = (4 * U * A * vmax + U * vmax) * w1 + U * vmax * w1
    err = np.abs(got - want).max()
    if err > worst[0]:
        worst[:] = [err, bound + allow, np.abs(want).max()]
    if not err <= bound + allow:
        return "error %.3g > bound %.3g + input rounding %.3g" % (err, bound, allow)
    return None


for i in range(int(os.environ.get("KV_DSA_CASES", "200"))):
    try:
        why = run_case(i)
    except Exception as e:  # noqa: BLE001 - any error fails the case
        why = "%s: %s" % (type(e).__name__, e)
    c.check(why is None, "DeepseekV32Attention (indexer + sparse MLA)", "case %d: %s" % (i, why))
print("  cases with YaRN's scale: %d; run on transformers' indices after ties: %d (rows whose "
      "sets differ only among equal scores, as relu's zeros make them: %d); rows with fewer "
      "visible keys than top-k: %d" % (counts["yarn"], counts["near_ties"],
                                       counts["exact_ties"], counts["padded_rows"]))
print("  largest error %.3g against its allowance %.3g (outputs up to %.3g)" % tuple(worst))
sys.exit(c.close())
