"""mla.py - kvtools' MLA against transformers' DeepSeek code and torch.

Run by scripts/crosscheck/mla.sh with the programs on PATH:
  1. the softmax scale: DeepseekV2Attention.scaling / DeepseekV3Attention.scaling
     (the module itself, built on the meta device with one head) on every
     MLA config of tests/configs, on random yarn factors, mscale_all_dim and
     head dims, and on mscale_all_dim 0, bit-equal to the scale kvattn gen
     writes;
  2. k_pe moves: transformers' DeepseekV3RotaryEmbedding (its YaRN
     inv_freq) and apply_rotary_pos_emb_interleave on raw interleaved k_pe,
     against kvchunk put / get --at of the same rows, in vLLM's interleaved
     cache layout (gptj) and transformers' de-interleaved one (neox);
  3. attention: torch's scaled_dot_product_attention over K = [c W_UK |
     k_pe], V = c W_UV, against kvattn mla in both forms.
Prints one line per case and 'N passed, M failed'.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import DeepseekV2Config, DeepseekV3Config
from transformers.models.deepseek_v2 import modeling_deepseek_v2 as ds2
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

TOP = os.environ["KV_TOP"]
P = F = 0


def check(ok, what):
    global P, F
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        P += 1
    else:
        F += 1


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(args) + ": " + r.stderr)
    return r.stdout


def scale_case(d, cfg, name):
    path = os.path.join(d, "cfg.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(d, "g")
    run("kvattn", "gen", "--model-config", path, "--shape", "1,1,1", "--kv-len", "1",
        "--dtype", "f32", "--dir", out)
    ours = float(open(os.path.join(out, "scale")).read())
    # the module's own attribute: one head and a narrow hidden size (the
    # scale reads neither), no memory allocated
    c = dict(cfg)
    c.update({"num_attention_heads": 1, "num_key_value_heads": 1, "hidden_size": 64,
              "q_lora_rank": 16})
    v2 = cfg.get("model_type") == "deepseek_v2"
    with torch.device("meta"):
        conf = (DeepseekV2Config if v2 else DeepseekV3Config)(**c)
        att = (ds2.DeepseekV2Attention if v2 else ds.DeepseekV3Attention)(conf, layer_idx=0)
    want = att.scaling
    check(ours == want, f"scale {name}: {ours!r} vs transformers {want!r}")


def small(cfg):
    c = dict(cfg)
    c.update({"num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "kv_lora_rank": 16})
    return c


def move_case(d, cfg, name, layout, pos, rng):
    """Raw k_pe rows stored at base 0 (unrotated), fetched at pos: each row
    turned by pos, as transformers turns raw k_pe at position pos."""
    c = small(cfg)
    R = c["qk_rope_head_dim"]
    Dl = c["kv_lora_rank"]
    T = 5
    path = os.path.join(d, "m.json")
    with open(path, "w") as f:
        json.dump(dict(c, torch_dtype="float32"), f)
    raw = rng.standard_normal((T, R)).astype(np.float32)          # interleaved pairs
    stored = raw if layout == "gptj" else np.concatenate([raw[:, 0::2], raw[:, 1::2]], 1)
    lat = np.zeros((1, T, Dl + R), np.float32)
    lat[0, :, :Dl] = rng.standard_normal((T, Dl))
    lat[0, :, Dl:] = stored
    np.save(os.path.join(d, "lat.npy"), lat)
    with open(os.path.join(d, "tok.txt"), "w") as f:
        f.write(" ".join(str(int(x)) for x in rng.integers(0, 1000, T)))
    st = "dir:" + os.path.join(d, "st")
    common = ["--store", st, "--model-config", path, "--rope", layout, "--base-policy", "free",
              "--tokens", os.path.join(d, "tok.txt")]
    run("kvchunk", "put", *common, "--kv", os.path.join(d, "lat.npy"), "--base-pos", "0")
    run("kvchunk", "get", *common, "--at", str(pos), "-o", os.path.join(d, "got.npy"))
    got = np.load(os.path.join(d, "got.npy"))
    tc = DeepseekV3Config(**c)
    rope = ds.DeepseekV3RotaryEmbedding(tc)
    x = torch.zeros(1, 1, T, R)
    pids = torch.full((1, T), pos, dtype=torch.long)
    cos, sin = rope(x, pids)
    k = torch.from_numpy(raw).view(1, 1, T, R)
    _, kr = ds.apply_rotary_pos_emb_interleave(k, k, cos, sin)
    kr = kr.view(T, R).numpy() / rope.attention_scaling
    want = kr if layout == "neox" else np.stack([kr[:, :R // 2], kr[:, R // 2:]], 2).reshape(T, R)
    err = float(np.abs(got[0, :, Dl:] - want).max())
    tol = (pos + 16) * 2.0 ** -21 * float(np.abs(raw).max())
    same = bool((got[0, :, :Dl] == lat[0, :, :Dl]).all())
    check(err <= tol and same,
          f"move {name} {layout} to {pos}: k_pe err {err:.3g} <= {tol:.3g}, c_kv bit-equal {same}")


def attn_case(d, cfg, name, T, S, rng):
    c = small(cfg)
    path = os.path.join(d, "a.json")
    with open(path, "w") as f:
        json.dump(c, f)
    out = os.path.join(d, "ag")
    run("kvattn", "gen", "--model-config", path, "--shape", f"1,2,{T}", "--kv-len", str(S),
        "--dtype", "f32", "--dir", out)
    L = lambda n: torch.from_numpy(np.load(os.path.join(out, n + ".npy")).astype(np.float64))
    q, ckv, kpe, wuk, wuv = L("q"), L("c_kv"), L("k_pe"), L("w_uk"), L("w_uv")
    scale = float(open(os.path.join(out, "scale")).read())
    P_ = wuk.shape[2]
    K = torch.cat([torch.einsum("sl,hlp->hsp", ckv, wuk), kpe.unsqueeze(0).expand(2, -1, -1)], -1)
    V = torch.einsum("sl,hlv->hsv", ckv, wuv)
    Q = q.permute(1, 0, 2)                                   # [H, T, P + R]
    i = torch.arange(T).unsqueeze(1) + S - T
    mask = torch.arange(S).unsqueeze(0) <= i                 # bottom-right causal
    ref = torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=scale)
    ref = ref.permute(1, 0, 2).numpy()
    run("kvattn", "mla", "-q", os.path.join(out, "q.npy"), "--c-kv", os.path.join(out, "c_kv.npy"),
        "--k-pe", os.path.join(out, "k_pe.npy"), "--w-uk", os.path.join(out, "w_uk.npy"),
        "--w-uv", os.path.join(out, "w_uv.npy"), "--causal", "--model-config", path,
        "-o", os.path.join(d, "n.npy"))
    run("kvattn", "mla", "-q", os.path.join(out, "q_absorbed.npy"),
        "--kv-cache", os.path.join(out, "kv_cache.npy"),
        "--block-table", os.path.join(out, "block_table.npy"), "--seq-lens", str(S),
        "--q-lens", str(T), "--causal", "--model-config", path,
        "--w-uv", os.path.join(out, "w_uv.npy"), "-o", os.path.join(d, "ab.npy"))
    for f in ("n", "ab"):
        got = np.load(os.path.join(d, f + ".npy"))
        err = float(np.abs(got - ref).max())
        check(err <= 1e-5, f"attention {name} {'naive' if f == 'n' else 'absorbed'} "
              f"T {T} S {S}: vs torch SDPA (float64) {err:.3g} <= 1e-5")


def main():
    rng = np.random.default_rng(2026)
    cfgs = {}
    shipped = {}
    cdir = os.path.join(TOP, "tests", "configs")
    for n in sorted(os.listdir(cdir)):
        if n.endswith(".json"):
            with open(os.path.join(cdir, n)) as f:
                c = json.load(f)
            if c.get("kv_lora_rank"):
                shipped[n[:-5]] = c
    for n in ("deepseek-v2-lite", "deepseek-v3"):
        cfgs[n] = shipped[n]
    with tempfile.TemporaryDirectory() as d:
        for n, c in shipped.items():
            scale_case(d, c, n)
        base = cfgs["deepseek-v3"]
        for k in range(40):
            c = json.loads(json.dumps(base))
            c["rope_scaling"]["factor"] = round(float(rng.choice([1, 2, 4, 8, 16, 40, 64]) *
                                                      rng.uniform(1.0, 1.5)) * 8) / 8
            c["max_position_embeddings"] = int(c["rope_scaling"]["factor"] * 4096)
            c["rope_scaling"]["mscale_all_dim"] = float(rng.choice([0.5, 0.707, 1, 2]))
            c["qk_nope_head_dim"] = int(rng.choice([64, 128, 192]))
            c["qk_rope_head_dim"] = int(rng.choice([32, 64]))
            scale_case(d, c, f"random {k}")
        c = json.loads(json.dumps(base))
        c["rope_scaling"] = None
        scale_case(d, c, "no rope_scaling")
        # transformers reads "mscale_all_dim": 0 as no adjustment
        c = json.loads(json.dumps(base))
        c["rope_scaling"]["mscale_all_dim"] = 0
        scale_case(d, c, "mscale_all_dim 0")
        for n, c in cfgs.items():
            for layout in ("gptj", "neox"):
                for pos in (1, 77, 1000, 4095):
                    move_case(d, c, n, layout, pos, rng)
        for n, c in cfgs.items():
            attn_case(d, c, n, 1, 200, rng)
            attn_case(d, c, n, 17, 90, rng)
        c = json.loads(json.dumps(cfgs["deepseek-v2-lite"]))
        c["rope_scaling"]["mscale_all_dim"] = 0
        for layout in ("gptj", "neox"):
            move_case(d, c, "deepseek-v2-lite mscale_all_dim 0", layout, 1000, rng)
    print(f"{P} passed, {F} failed")
    return 0 if F == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
