"""kvattn-variants.py - kvattn run's variants and kvmask tree against the
upstream code that defines them.

Run by scripts/crosscheck/kvattn-variants.sh with the programs on PATH:
  1. sinks: transformers' GptOssAttention (float64, small random weights,
     eager attention) run whole on random hidden states; the query, key,
     value and sinks its eager_attention_forward receives, rounded to f32,
     go to kvattn run --sinks; the reference is that same upstream function
     called again in float64 on the rounded tensors (causal, Lq <= Lk
     bottom-right aligned, decode rows included);
  2. softcap: transformers' Gemma2Attention and its eager_attention_forward
     (attn_logit_softcapping, query_pre_attn_scalar) likewise, against
     kvattn run --softcap;
  3. ALiBi: transformers' BloomAttention (float64, random query_key_value,
     dense = identity and zero residual, so that its output is the merged
     attention) with build_alibi_tensor's bias, against kvattn run --alibi;
     and BLOOM's _get_alibi_slopes for 1..80 heads, which kvattn run
     --alibi-slopes turns into the bytes of kvattn run --alibi;
  4. trees: vLLM 0.20.2's tree-attention bias (_get_depth_counts and
     _prepare_tree_attn_bias of vllm/v1/attention/backends/tree_attn.py,
     the last release that ships it, read from its wheel and executed as
     written, as TreeAttentionMetadataBuilder.__init__ calls them) on random
     token trees, against kvmask tree --dtype f32, byte for byte; and
     the depth counts and the drafter's positions against kvslot step
     --parents: _get_depth_counts on the random trees, and the tree
     drafter of that release (SpecDecodeBaseProposer.propose_tree and the
     tree set-up of its __init__, vllm/v1/spec_decode/llm_base_proposer.py,
     executed as written) on random batches of trees with as many children
     under every node of a level, the shape it drafts, with random root
     positions and max_model_len: the positions it hands the model are
     kvslot step's positions of the draft tokens.
Each kvattn comparison holds the output (and the LSE where the upstream
code has one) to the bound kvattn bound states for the case.  Replaced:
the models' mask builders (an additive causal mask is passed in),
RoPE's position embeddings (random cos/sin of the right shape),
BloomAttention's query_key_value (the identity: its input is the fused,
f32-rounded Q, K, V in BLOOM's per-token layout [H, 3, D]), and
TreeAttentionMetadataBuilder's config object (its two calls are made
directly); around propose_tree, the draft model (zeros for hidden states,
random logits), the metadata builder it calls (a stand-in returning the
batch's seq_lens and a block table), the forward context and the CUDA
graph dispatcher (no-ops) and the proposer's buffers (CPU tensors).  Prints one line per case and 'N passed, M failed'.
"""
import __future__
import ast
import contextlib
import dataclasses
import glob
import math
import os
import subprocess
import sys
import tempfile
import zipfile
from types import SimpleNamespace as NS

import numpy as np
import torch
from transformers import BloomConfig, Gemma2Config, GptOssConfig
from transformers.models.bloom import modeling_bloom as bl
from transformers.models.gemma2 import modeling_gemma2 as g2
from transformers.models.gpt_oss import modeling_gpt_oss as go

TOP = os.environ["KV_TOP"]
VLLM_TREE = os.environ.get("KV_VLLM_TREE_WHEEL_DIR", os.path.join(TOP, "build", "crosscheck"))
P = F = 0
rng = np.random.default_rng(35)
torch.manual_seed(35)


def check(ok, what):
    global P, F
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        P += 1
    else:
        F += 1


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(map(str, args)) + ": " + r.stderr)
    return r.stdout


def bound(d, q, k, v, extra):
    out = run("kvattn", "bound", "--all", "-q", q, "-k", k, "-v", v, *extra)
    vals = dict(line.split(": ") for line in out.strip().splitlines())
    return float(vals["out"]), float(vals["lse"])


def causal_mask(lq, lk):
    """The additive bottom-right causal mask [1, 1, lq, lk] (0 / -inf)."""
    i = torch.arange(lq)[:, None] + (lk - lq)
    j = torch.arange(lk)[None, :]
    m = torch.zeros(lq, lk, dtype=torch.float64)
    m[j > i] = -math.inf
    return m[None, None]


def f32(t):
    return t.detach().to(torch.float32).contiguous()


def compare(d, name, q, k, v, ref_o, opts, ref_lse=None, files=()):
    """q/k/v f32 bhsd tensors; ref_o [B, Lq, Hq, D] (transformers' layout)."""
    paths = {}
    for n, t in (("q", q), ("k", k), ("v", v)):
        paths[n] = os.path.join(d, n + ".npy")
        np.save(paths[n], t.numpy())
    extra = []
    for flag, arr in files:
        p = os.path.join(d, flag.strip("-") + ".npy")
        np.save(p, arr)
        extra += [flag, p]
    extra += opts
    o = os.path.join(d, "o.npy")
    lse = os.path.join(d, "l.npy")
    run("kvattn", "run", "-q", paths["q"], "-k", paths["k"], "-v", paths["v"], "--causal",
        "-o", o, "--lse", lse, *extra)
    bo, bl_ = bound(d, paths["q"], paths["k"], paths["v"], extra)
    got = np.load(o).astype(np.float64)             # [B, Hq, Lq, D]
    want = ref_o.detach().numpy().transpose(0, 2, 1, 3)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    check(err <= bo, "%s: output within %.3g (max error %.3g)" % (name, bo, err))
    if ref_lse is not None:
        gl = np.load(lse).astype(np.float64)
        e2 = float(np.max(np.abs(gl - ref_lse))) if gl.size else 0.0
        check(e2 <= bl_, "%s: LSE within %.3g (max error %.3g)" % (name, bl_, e2))


# ---- 1. gpt-oss sinks ---------------------------------------------------

def gptoss_cases(d, n):
    captured = {}
    orig = go.eager_attention_forward

    def spy(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
        captured.update(q=query, k=key, v=value, scaling=scaling)
        return orig(module, query, key, value, attention_mask, scaling, dropout, **kw)

    for c in range(n):
        kv = int(rng.integers(1, 3))
        g = int([1, 2, 4][rng.integers(3)])
        hd = int([16, 32, 64][rng.integers(3)])
        cfg = GptOssConfig(hidden_size=64, num_attention_heads=kv * g, num_key_value_heads=kv,
                           head_dim=hd, num_hidden_layers=1, attention_dropout=0.0,
                           layer_types=["full_attention"])
        cfg._attn_implementation = "eager"
        m = go.GptOssAttention(cfg, 0).double().eval()
        with torch.no_grad():
            for p in m.parameters():
                p.normal_(0, 0.3)
            m.sinks.normal_(0, [0.5, 4.0, 20.0][c % 3])
            m.sinks.copy_(m.sinks.float().double())     # the f32 sinks kvattn reads
        L = int(rng.integers(1, 80))
        x = torch.randn(1, L, 64, dtype=torch.float64)
        cos = torch.randn(1, L, hd // 2, dtype=torch.float64)
        sin = torch.randn(1, L, hd // 2, dtype=torch.float64)
        go.eager_attention_forward = spy
        try:
            with torch.no_grad():
                m(x, (cos, sin), causal_mask(L, L))
        finally:
            go.eager_attention_forward = orig
        q, k, v = f32(captured["q"]), f32(captured["k"]), f32(captured["v"])
        # Lq <= Lk: the last lq queries against all keys (a chunked or
        # decode step), the mask bottom-right aligned
        lq = [L, 1, max(1, L // 3)][c % 3]
        q = q[:, :, L - lq:].contiguous()
        sinks = m.sinks.detach().to(torch.float32)
        with torch.no_grad():
            ref, _ = orig(m, q.double(), k.double(), v.double(), causal_mask(lq, L),
                          captured["scaling"])
        scale = captured["scaling"]
        # the LSE the reference's softmax has: log(sum e^s + e^sink)
        s = torch.matmul(q.double(), go.repeat_kv(k.double(), m.num_key_value_groups)
                         .transpose(2, 3)) * scale + causal_mask(lq, L)
        s = torch.cat([s, sinks.double().reshape(1, -1, 1, 1).expand(1, -1, lq, 1)], -1)
        ref_lse = torch.logsumexp(s, -1).numpy()
        compare(d, "gpt-oss sinks %d (Hq %d Hkv %d D %d Lq %d Lk %d)" % (c, kv * g, kv, hd, lq, L),
                q, k, v, ref, ["--scale", repr(float(np.float32(scale)))], ref_lse,
                files=[("--sinks", sinks.numpy())])


# ---- 2. Gemma 2 softcap -------------------------------------------------

def gemma2_cases(d, n):
    captured = {}
    orig = g2.eager_attention_forward

    def spy(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
            softcap=None, **kw):
        captured.update(q=query, k=key, v=value, scaling=scaling, softcap=softcap)
        return orig(module, query, key, value, attention_mask, dropout, scaling, softcap, **kw)

    for c in range(n):
        kv = int(rng.integers(1, 3))
        g = int([1, 2, 4][rng.integers(3)])
        hd = int([16, 32, 64][rng.integers(3)])
        cap = [50.0, 5.0, 0.5][c % 3]
        cfg = Gemma2Config(hidden_size=64, num_attention_heads=kv * g, num_key_value_heads=kv,
                           head_dim=hd, num_hidden_layers=1, attention_dropout=0.0,
                           attn_logit_softcapping=cap, query_pre_attn_scalar=hd,
                           layer_types=["full_attention"])
        cfg._attn_implementation = "eager"
        m = g2.Gemma2Attention(cfg, 0).double().eval()
        with torch.no_grad():
            for p in m.parameters():
                p.normal_(0, [0.3, 1.0, 3.0][c % 3])
        L = int(rng.integers(1, 80))
        x = torch.randn(1, L, 64, dtype=torch.float64)
        cos = torch.randn(1, L, hd, dtype=torch.float64)
        sin = torch.randn(1, L, hd, dtype=torch.float64)
        g2.eager_attention_forward = spy
        try:
            with torch.no_grad():
                m(x, (cos, sin), causal_mask(L, L))
        finally:
            g2.eager_attention_forward = orig
        q, k, v = f32(captured["q"]), f32(captured["k"]), f32(captured["v"])
        lq = [L, 1, max(1, L // 2)][c % 3]
        q = q[:, :, L - lq:].contiguous()
        scale = float(np.float32(captured["scaling"]))
        with torch.no_grad():
            ref, _ = orig(m, q.double(), k.double(), v.double(), causal_mask(lq, L),
                          scaling=scale, softcap=captured["softcap"])
        compare(d, "gemma2 softcap %g %d (Hq %d Hkv %d D %d Lq %d Lk %d)"
                % (cap, c, kv * g, kv, hd, lq, L), q, k, v, ref,
                ["--scale", repr(scale), "--softcap", repr(captured["softcap"])])


# ---- 3. BLOOM ALiBi ----------------------------------------------------

def bloom_cases(d, n):
    for c in range(n):
        H = int(rng.integers(1, 13))
        hd = int([8, 16, 32][rng.integers(3)])
        hid = H * hd
        cfg = BloomConfig(hidden_size=hid, n_head=H, n_layer=1, attention_dropout=0.0,
                          hidden_dropout=0.0)
        cfg._attn_implementation = "eager"
        m = bl.BloomAttention(cfg, 0).double().eval()
        L = int(rng.integers(1, 100))
        qs = [0.5, 2.0, 6.0][c % 3]
        q32 = (torch.randn(1, H, L, hd) * qs).to(torch.float32)
        k32 = torch.randn(1, H, L, hd).to(torch.float32)
        v32 = torch.randn(1, H, L, hd).to(torch.float32)
        # the fused projection's output as BLOOM lays it out per token,
        # [H, 3, D], fed through an identity query_key_value
        fused = torch.stack([q32, k32, v32], 3).double()       # [1, H, L, 3, D]
        fused = fused.permute(0, 2, 1, 3, 4).reshape(1, L, 3 * hid)
        m.inv_norm_factor = float(np.float32(m.inv_norm_factor))   # the f32 scale kvattn takes
        with torch.no_grad():
            m.query_key_value = torch.nn.Identity()
            m.dense.weight.copy_(torch.eye(hid, dtype=torch.float64))
            m.dense.bias.zero_()
            alibi = bl.build_alibi_tensor(torch.ones(1, L, dtype=torch.long), H, torch.float64)
            out, _ = m(fused, torch.zeros(1, L, hid, dtype=torch.float64), alibi,
                       causal_mask(L, L))
        ref = out.reshape(1, L, H, hd)
        compare(d, "bloom alibi %d (H %d D %d L %d)" % (c, H, hd, L), q32, k32, v32, ref,
                ["--scale", repr(m.inv_norm_factor), "--alibi"])
    # the standard slopes, bit for bit
    q = torch.randn(1, 80, 3, 8).to(torch.float32)
    for H in range(1, 81):
        slopes = bl._get_alibi_slopes(H, torch.device("cpu")).to(torch.float32).numpy()
        qq = q[:, :H].contiguous()
        np.save(os.path.join(d, "sq.npy"), qq.numpy())
        np.save(os.path.join(d, "ss.npy"), slopes)
        a = run("kvattn", "run", "-q", os.path.join(d, "sq.npy"), "-k", os.path.join(d, "sq.npy"),
                "-v", os.path.join(d, "sq.npy"), "--causal", "--alibi", "-f", "text")
        b = run("kvattn", "run", "-q", os.path.join(d, "sq.npy"), "-k", os.path.join(d, "sq.npy"),
                "-v", os.path.join(d, "sq.npy"), "--causal", "--alibi-slopes",
                os.path.join(d, "ss.npy"), "-f", "text")
        check(a == b, "%d heads: --alibi = --alibi-slopes of BLOOM's _get_alibi_slopes" % H)


# ---- 4. vLLM tree-attention masks ------------------------------------------

def vllm_tree_functions():
    whl = sorted(glob.glob(os.path.join(VLLM_TREE, "vllm-0.20.2-*.whl")))
    if not whl:
        os.makedirs(VLLM_TREE, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "vllm==0.20.2", "-d", VLLM_TREE], check=True)
        whl = sorted(glob.glob(os.path.join(VLLM_TREE, "vllm-0.20.2-*.whl")))
    src = zipfile.ZipFile(whl[0]).read("vllm/v1/attention/backends/tree_attn.py").decode()
    tree = ast.parse(src)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("_get_depth_counts", "_prepare_tree_attn_bias")]
    assert len(keep) == 2, "tree_attn.py of vLLM 0.20.2 lacks the bias functions"
    ns = {"torch": torch}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "tree_attn.py", "exec"), ns)
    return ns["_get_depth_counts"], ns["_prepare_tree_attn_bias"]


def random_tree(max_nodes):
    """A speculative token tree as vLLM takes it: paths sorted by depth, then
    lexicographically (the order speculative_token_tree lists them)."""
    paths = [(0,)]
    n = int(rng.integers(1, max_nodes + 1))
    while len(paths) < n:
        parent = paths[int(rng.integers(len(paths)))] if rng.random() < 0.8 else ()
        kids = [p for p in paths if len(p) == len(parent) + 1 and p[:-1] == parent]
        paths.append(parent + (len(kids),))
    return sorted(set(paths), key=lambda p: (len(p), p))


def tree_cases(d, n):
    depth_counts, tree_bias = vllm_tree_functions()
    for c in range(n):
        choices = random_tree([4, 12, 60][c % 3])
        bias = tree_bias(choices, depth_counts(choices), dtype=torch.float32,
                         device=torch.device("cpu"))
        # kvmask's parents: node 0 is vLLM's root, node t the t-th choice
        parents = [-1] + [0 if len(p) == 1 else choices.index(p[:-1]) + 1 for p in choices]
        out = os.path.join(d, "t.npy")
        run("kvmask", "tree", "--parents", ",".join(map(str, parents)), "--dtype", "f32",
            "-o", out)
        ours = np.load(out)
        want = bias.numpy()
        check(ours.shape == want.shape and ours.tobytes() == want.tobytes(),
              "tree %d (%d nodes, depth %d): kvmask tree = vLLM 0.20.2's tree_attn_bias"
              % (c, len(parents), max(len(p) for p in choices)))


def vllm_drafter_functions():
    """propose_tree and the tree set-up of SpecDecodeBaseProposer.__init__
    (from 'spec_token_tree = ...' to 'self.tree_draft_pos_offsets = ...'),
    from vLLM 0.20.2's wheel, executed as written."""
    whl = sorted(glob.glob(os.path.join(VLLM_TREE, "vllm-0.20.2-*.whl")))
    src = zipfile.ZipFile(whl[0]).read("vllm/v1/spec_decode/llm_base_proposer.py").decode()
    cls = next(n for n in ast.parse(src).body
               if isinstance(n, ast.ClassDef) and n.name == "SpecDecodeBaseProposer")
    fns = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    init, body = fns["__init__"], fns["__init__"].body
    first = next(i for i, st in enumerate(body)
                 if "spec_token_tree = self.speculative_config" in ast.unparse(st))
    last = next(i for i, st in enumerate(body)
                if "self.tree_draft_pos_offsets =" in ast.unparse(st))
    init.name, init.body = "tree_init", body[first:last + 1]
    mod = ast.Module(body=[init, fns["propose_tree"]], type_ignores=[])
    ast.fix_missing_locations(mod)
    return mod


class _Builder:
    """Stands in for TreeAttentionMetadataBuilder (propose_tree checks the
    type and calls build_for_drafting)."""
    def __init__(self, block_size, cols):
        self.kv_cache_spec = NS(block_size=block_size)
        self.cols = cols

    def build_for_drafting(self, common_attn_metadata, draft_index):
        m = common_attn_metadata
        b = m.seq_lens.shape[0]
        table = torch.arange(b * self.cols, dtype=torch.int32).view(b, self.cols) + 1
        return NS(max_seq_len=int(m.seq_lens.max()), seq_lens=m.seq_lens.clone(),
                  block_table=table, slot_mapping=None,
                  num_actual_tokens=m.num_actual_tokens)


@dataclasses.dataclass
class _Common:
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    num_actual_tokens: int
    max_query_len: int


def drafter_positions(mod, choices, roots, max_model_len):
    """The positions propose_tree gives the model for every draft token of
    choices (batch-major), for requests whose roots sit at roots."""
    seen = []

    class Model:
        def __call__(self, input_ids, positions, hidden_states, inputs_embeds):
            seen.append(positions.clone())
            h = torch.zeros(positions.shape[0], 4)
            return h, h

        def compute_logits(self, x):
            return torch.randn(x.shape[0], 16, generator=gen)

    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    b, n = len(roots), len(choices)
    ns = {"torch": torch, "ast": ast, "replace": dataclasses.replace,
          "set_forward_context": lambda *a, **k: contextlib.nullcontext(),
          "TreeAttentionMetadataBuilder": _Builder, "PADDING_SLOT_ID": -1}
    # annotations stay unevaluated: their types are vLLM's config classes
    exec(compile(mod, "llm_base_proposer.py", "exec",
                 flags=__future__.annotations.compiler_flag, dont_inherit=True), ns)
    builder = _Builder(16, (max(roots) + n + 16) // 16 + 1)
    me = NS(speculative_config=NS(speculative_token_tree=str(choices)),
            max_batch_size=b, max_model_len=max_model_len,
            draft_attn_groups=[NS(get_metadata_builder=lambda: builder,
                                  layer_names=["draft.0"])],
            input_ids=torch.zeros(b * (n + 1), dtype=torch.int32),
            positions=torch.zeros(b * (n + 1), dtype=torch.int64),
            hidden_states=torch.zeros(b * (n + 1), 4),
            arange=torch.arange(b + 1, dtype=torch.int32),
            cudagraph_dispatcher=NS(dispatch=lambda t: (None, NS(num_tokens=t))),
            vllm_config=None, model=Model(),
            _get_slot_mapping=lambda t, sm: sm)
    ns["tree_init"](me, None, None, None)
    pos = torch.tensor(roots, dtype=torch.int64)
    common = _Common(torch.arange(b + 1, dtype=torch.int32), pos + 1, b, 1)
    ns["propose_tree"](me, b, torch.randn(b, 16, generator=gen), pos,
                       torch.zeros(b, 4), common)
    return seen[-1].view(b, -1).tolist() if seen else [[] for _ in roots]


def uniform_tree():
    """A tree with as many children under every node of a level, listed as
    vLLM lists it (by depth, then lexicographically)."""
    levels, paths = [[()]], []
    for _ in range(int(rng.integers(1, 5))):
        k = int(rng.integers(1, 4))
        if len(levels[-1]) * k > 40:
            break
        levels.append([p + (c,) for p in levels[-1] for c in range(k)])
        paths += levels[-1]
    return paths


def step_cases(d, n):
    depth_counts, _ = vllm_tree_functions()
    for c in range(n):                      # depth counts of random trees
        choices = random_tree([4, 12, 60][c % 3])
        parents = [-1] + [0 if len(p) == 1 else choices.index(p[:-1]) + 1 for p in choices]
        out = run("kvslot", "step", "--parents", ",".join(map(str, parents)), "-f", "text")
        got = [ln.split(":")[1].split() for ln in out.splitlines() if ln.startswith("depth_counts")]
        check(list(map(int, got[0])) == depth_counts(choices),
              "tree %d (%d nodes): kvslot step depth_counts = vLLM 0.20.2's _get_depth_counts"
              % (c, len(parents)))
    mod = vllm_drafter_functions()
    for c in range(n):                      # the drafter's positions
        choices = uniform_tree()
        # one child more under every deepest node, so that the drafter runs
        # the model on every level of choices
        deep = [p for p in choices if len(p) == len(choices[-1])]
        roots = [int(x) for x in rng.integers(0, 200, size=int(rng.integers(1, 5)))]
        mml = int(rng.integers(1, 260)) if c % 2 else 100000
        want = drafter_positions(mod, choices + [p + (0,) for p in deep], roots, mml)
        want = [w[:len(choices)] for w in want]
        parents = [-1] + [0 if len(p) == 1 else choices.index(p[:-1]) + 1 for p in choices]
        out = run("kvslot", "step", "--parents", ",".join(map(str, parents)),
                  "--computed", ",".join(map(str, roots)), "--max-model-len", mml,
                  "-f", "text")
        pos = [int(x) for ln in out.splitlines() if ln.startswith("positions:")
               for x in ln.split()[1:]]
        ours = [pos[r * len(parents) + 1:(r + 1) * len(parents)] for r in range(len(roots))]
        check(ours == want, "drafter %d (%d drafts, depth %d, %d requests, max_model_len %d): "
              "kvslot step positions = vLLM 0.20.2's propose_tree"
              % (c, len(choices), len(choices[-1]), len(roots), mml))


def main():
    n = int(os.environ.get("KV_CROSSCHECK_CASES", "60"))
    with tempfile.TemporaryDirectory() as d:
        for part in sys.argv[1:] or ["gptoss", "gemma2", "bloom", "tree", "step"]:
            try:
                {"gptoss": gptoss_cases, "gemma2": gemma2_cases, "bloom": bloom_cases,
                 "tree": lambda dd, nn: tree_cases(dd, 10 * nn),
                 "step": lambda dd, nn: step_cases(dd, 5 * nn)}[part](d, n)
            except Exception as ex:        # a part that cannot run fails
                check(False, "%s: %s" % (part, ex))
    print("%d passed, %d failed" % (P, F))
    return 1 if F else 0


if __name__ == "__main__":
    sys.exit(main())
