# scripts/crosscheck/stage_kvchunk_rope.py - kvchunk's position moves against
# what each model's transformers code does with positions (run by
# scripts/crosscheck/kvchunk-rope.sh).
#
# For every config in tests/configs (and rope-type variants of Llama 3.1's
# made here: none, linear, dynamic, yarn, longrope) the model's transformers
# module is imported as installed and read for how K depends on position:
#   - a *RotaryEmbedding class: its own initialisation (the model's
#     compute_default_rope_parameters or ROPE_INIT_FUNCTIONS[rope_type], per
#     layer type for Gemma 3) is run unmodified in float64: torch.float and
#     torch.float32 name float64 while it runs (the only change); the
#     rotation is the module's own apply_rotary_pos_emb / apply_rotary_emb
#     (rotate_half pairs, GPT-J's rotate_every_two, Llama 4's complex
#     pairs), fed with cos/sin (or freqs_cis) of positions x inv_freq in
#     float64 times the attention scaling, as the module's forward builds
#     them; partial rotary as the attention module slices it; the layers the
#     config marks as NoPE (Llama 4's no_rope_layers) are not rotated;
#   - GPT-J's create_sinusoidal_positions table (sin | cos of the same
#     products), likewise in float64;
#   - no rotary and ALiBi (build_alibi_tensor, BLOOM): K does not depend on
#     position, a move must be an exact copy;
#   - no rotary and learned absolute positions (GPT-2's wpe, OPT's learned
#     embedding): K depends on the absolute position through every layer,
#     so a chunk cannot be moved: get at another position must fail;
#   - MLA (kv_lora_rank): kvchunk keeps latent chunks (c_kv copied, k_pe
#     rotated); their moves are held to transformers' DeepSeek-V3 code by
#     the 'mla' part, so here only 'kvchunk info' must accept the config;
#   - layers that rotate with different frequencies (Gemma 3's local and
#     global bases): each layer must move with its own, or the move be
#     refused (exit 1, a move that cannot be exact).
# Each case stores random f32 raw keys rotated to P0 (rounded once to f32,
# what an engine stores) with 'kvchunk put --dtype f32', fetches them with
# 'kvchunk get --at POS' and compares with the raw keys rotated to POS by
# transformers, within 4 x 2^-24 x the row's largest |k| (the stored
# rounding carried through the rotation plus kvchunk's one rounding).
import copy
import importlib
import inspect
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # before transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_common import BIN, TOP, Count  # noqa: E402

import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402

SEED = 20260529
rng = random.Random(SEED)
nrng = np.random.default_rng(SEED)
C = Count("kvchunk-rope")
TMP = tempfile.mkdtemp(prefix="kvchunk-xc-")
CFG = os.path.join(TOP, "tests", "configs")
U = 2.0 ** -24
T = 3   # tokens per chunk


class Float64:
    """torch.float and torch.float32 name float64 inside the block."""

    def __enter__(self):
        self.saved = torch.float, torch.float32
        torch.float = torch.float32 = torch.float64

    def __exit__(self, *a):
        torch.float, torch.float32 = self.saved


def text_config(d):
    cfg = AutoConfig.for_model(d["model_type"], **{k: v for k, v in d.items() if k != "model_type"})
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def modeling(cfg):
    return importlib.import_module(type(cfg).__module__.replace(".configuration_", ".modeling_"))


class Model:
    """How one model's K depends on position, from its transformers code."""

    def __init__(self, d):
        self.cfg = cfg = text_config(d)
        self.mod = mod = modeling(cfg)
        self.layers = cfg.num_hidden_layers
        self.kind = None
        self.max_pos = getattr(cfg, "max_position_embeddings", None) or 1 << 20
        rot = [c for n, c in vars(mod).items() if n.endswith("RotaryEmbedding") and inspect.isclass(c)
               and "Vision" not in n]
        if getattr(cfg, "kv_lora_rank", None):
            self.kind = "mla"
        elif rot:
            self.kind = "rope"
            with Float64():
                self.rope = rot[0](cfg)
            self.apply = getattr(mod, "apply_rotary_pos_emb", None) or getattr(mod, "apply_rotary_emb")
            self.args = list(inspect.signature(self.apply).parameters)
            # cos and sin as wide as the rotated dims (cat(freqs, freqs), the
            # usual) or half as wide (gpt-oss rotates the two halves with
            # the same angles): the model's own forward says which
            self.half = False
            if hasattr(self.rope, "inv_freq") and self.args[:3] != ["xq", "xk", "freqs_cis"]:
                with torch.no_grad():
                    c, _ = self.rope(torch.zeros(1, dtype=torch.float64), torch.arange(2)[None])
                self.half = c.shape[-1] == self.rope.inv_freq.numel()
        elif hasattr(mod, "create_sinusoidal_positions"):
            self.kind = "gptj"
            self.rd = cfg.rotary_dim or cfg.n_embd // cfg.n_head
            with Float64():
                self.table = mod.create_sinusoidal_positions(8, self.rd)  # dtype probe
            self.apply = mod.apply_rotary_pos_emb
        elif hasattr(mod, "build_alibi_tensor"):
            self.kind = "alibi"
        else:
            self.kind = "learned"
        self.hkv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads

    def layer_rope(self, layer):
        """(inv_freq float64, attention scaling) of a layer, None for NoPE."""
        cfg = self.cfg
        nope = getattr(cfg, "no_rope_layers", None)
        if nope and not nope[layer]:
            return None
        if hasattr(self.rope, "inv_freq"):
            return self.rope.inv_freq, self.rope.attention_scaling
        lt = cfg.layer_types[layer]
        return getattr(self.rope, lt + "_inv_freq"), getattr(self.rope, lt + "_attention_scaling")

    def uniform(self):
        """True when every rotated layer has the same frequencies."""
        got = [self.layer_rope(i) for i in range(self.layers)]
        got = [g for g in got if g is not None]
        return all(torch.equal(g[0], got[0][0]) and g[1] == got[0][1] for g in got)

    def rotate(self, k, pos):
        """k [L, T, HKV, D] float64 raw keys at positions pos [T]."""
        out = k.copy()
        p = torch.tensor(pos, dtype=torch.float64)
        for layer in range(self.layers):
            kt = torch.from_numpy(k[layer])[None]          # [1, T, H, D]
            if self.kind == "gptj":
                rd = self.rd
                inv = 1.0 / (10000 ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
                f = p[:, None] * inv[None]
                sin, cos = torch.sin(f)[None], torch.cos(f)[None]
                r = self.apply(kt[..., :rd], sin, cos)
                out[layer, ..., :rd] = r[0].numpy()
                continue
            lr = self.layer_rope(layer)
            if lr is None:
                continue
            inv, scale = lr
            assert inv.dtype == torch.float64, "inv_freq is %s" % inv.dtype
            rd = inv.numel() * 2
            f = p[:, None] * inv[None]                      # [T, rd/2]
            if self.args[:3] == ["xq", "xk", "freqs_cis"]:
                fc = torch.polar(torch.ones_like(f), f)[None] * scale
                _, r = self.apply(kt[..., :rd], kt[..., :rd], fc)
                out[layer, ..., :rd] = r[0].numpy()
            else:
                emb = (f if self.half else torch.cat((f, f), dim=-1))[None]
                cos, sin = emb.cos() * scale, emb.sin() * scale
                kh = kt[..., :rd].transpose(1, 2)            # [1, H, T, rd]
                _, r = self.apply(kh, kh, cos, sin)
                out[layer, ..., :rd] = r[0].transpose(0, 1).numpy()
        return out


def kvchunk(*args):
    return subprocess.run([os.path.join(BIN, "kvchunk")] + [str(a) for a in args], capture_output=True)


def configs():
    out = []
    for f in sorted(os.listdir(CFG)):
        if f.endswith(".json"):
            out.append((f[:-5], os.path.join(CFG, f), json.load(open(os.path.join(CFG, f)))))
    base = json.load(open(os.path.join(CFG, "llama-3.1-8b.json")))
    for name, rs in (("none", None),
                     ("linear", {"rope_type": "linear", "factor": 4.0}),
                     ("dynamic", {"rope_type": "dynamic", "factor": 2.0}),
                     ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}),
                     ("yarn-mscale_all_dim-0", {"rope_type": "yarn", "factor": 4.0, "mscale": 0.707,
                                                "mscale_all_dim": 0, "original_max_position_embeddings": 8192}),
                     ("longrope", {"rope_type": "longrope", "short_factor": [1.0] * 64,
                                   "long_factor": [2.0] * 64, "original_max_position_embeddings": 8192})):
        d = copy.deepcopy(base)
        d["rope_scaling"] = rs
        p = os.path.join(TMP, "llama-3.1-8b-%s.json" % name)
        json.dump(d, open(p, "w"))
        out.append(("llama-3.1-8b rope_scaling=%s" % name, p, d))
    return out


def check_config(name, path, d, cases):
    try:
        m = Model(d)
    except Exception as e:  # noqa: BLE001
        C.check(False, name, "transformers: %s: %s" % (type(e).__name__, e))
        return
    ns = ["--model-config", path, "--dtype", "f32", "--base-policy", "free", "--chunk-context", "none"]
    info = kvchunk("info", *ns)
    if m.kind == "mla":
        lat = "head_dim: %d" % (d["kv_lora_rank"] + d["qk_rope_head_dim"])
        C.check(info.returncode == 0 and lat.encode() in info.stdout,
                "%s (MLA): latent chunks (moves checked by the mla part)" % name,
                "kvchunk info exit %d" % info.returncode)
        return
    rs = getattr(m.cfg, "rope_parameters", None) or {}
    if isinstance(rs, dict) and rs.get("rope_type") == "longrope":
        C.check(info.returncode == 2, "%s: refused" % name, "kvchunk info exit %d" % info.returncode)
        return
    if info.returncode != 0:
        C.check(False, name, "kvchunk info: %s" % info.stderr.decode().strip())
        return
    group = "%s (%s)" % (name, m.kind)
    store = "dir:" + os.path.join(TMP, "store")
    for c in range(cases):
        p0 = rng.randint(0, 4096)
        top = min(m.max_pos - T, 1 << 20) if m.kind != "learned" else m.max_pos - T
        if rs and isinstance(rs, dict) and rs.get("rope_type") == "dynamic":
            top = min(top, m.max_pos - T)
        pos = rng.choice([p0 + 1, max(0, p0 - 1), rng.randint(0, top), rng.randint(0, min(top, 8192))])
        pos = min(pos, top)
        raw = nrng.standard_normal((m.layers, T, m.hkv, m.hd)).astype(np.float32).astype(np.float64)
        if m.kind in ("rope", "gptj"):
            stored = m.rotate(raw, list(range(p0, p0 + T)))
            want = m.rotate(raw, list(range(pos, pos + T)))
        else:
            stored = want = raw
        stored32 = stored.astype(np.float32)
        kvarr = np.stack([stored32, nrng.standard_normal(stored.shape).astype(np.float32)], axis=1)
        kvf, tokf, outf = (os.path.join(TMP, x) for x in ("kv.npy", "tok.txt", "got.npy"))
        np.save(kvf, kvarr)
        with open(tokf, "w") as f:
            f.write(" ".join(str(rng.randint(1, 1 << 30)) for _ in range(T)) + "\n")
        put = kvchunk("put", *ns, "--store", store, "--tokens", tokf, "--kv", kvf, "--base-pos", p0)
        if put.returncode != 0:
            C.check(False, group, "put: %s" % put.stderr.decode().strip())
            continue
        get = kvchunk("get", *ns, "--store", store, "--tokens", tokf, "--at", pos, "-o", outf)
        what = "P0=%d -> %d" % (p0, pos)
        if m.kind == "learned":
            if pos == p0:
                ok = get.returncode == 0 and np.array_equal(np.load(outf), kvarr)
            else:
                ok = get.returncode != 0 and not get.stdout
            C.check(ok, "%s: no move across positions" % group,
                    what + ": get exit %d (learned absolute positions: K cannot move)" % get.returncode)
            continue
        if get.returncode != 0:
            # a move that cannot be exact must be refused (exit 1): so it is
            # where the model's layers rotate with different frequencies
            refused = get.returncode == 1 and not get.stdout
            if refused and m.kind == "rope" and not m.uniform():
                C.check(True, "%s: move refused, layers rotate differently" % group, what)
            else:
                C.check(False, group, what + ": get: %s" % get.stderr.decode().strip())
            continue
        g = np.load(outf)
        tol = 4 * U * np.abs(want).max(axis=-1, keepdims=True) + 1e-30
        err = np.abs(g[:, 0].astype(np.float64) - want)
        okv = np.array_equal(g[:, 1], kvarr[:, 1])
        bad = np.argwhere((err > tol).any(axis=(1, 2, 3)))
        C.check(okv and not len(bad), group,
                what + ": %s; max err %.3g (x tol %.3g)%s" % (
                    "layers %s differ" % bad.ravel()[:8].tolist() if len(bad) else "ok",
                    float(err.max()), float((err / tol).max()), "" if okv else "; V changed"))


def main():
    print("kvchunk RoPE cross-check: transformers %s (its RoPE initialisation in float64 and "
          "the model families' rotations), torch %s; seed %d"
          % (transformers.__version__, torch.__version__, SEED))
    t = time.time()
    for name, path, d in configs():
        check_config(name, path, d, 24)
    print("  (%.0f s)" % (time.time() - t))
    return C.close()


if __name__ == "__main__":
    sys.exit(main())
