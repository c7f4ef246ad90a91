"""kvslot-reorg-vllm.py - kvslot reorg --context-chunking vllm against vLLM
0.33.0's own MLA chunked-context code (scripts/crosscheck/kvslot-reorg-vllm.sh).

From vllm/model_executor/layers/attention/mla_attention.py of the release
(the installed package when it is 0.33.0, else its wheel fetched with
'pip download --no-deps'), these definitions are compiled unchanged and run
on the CPU: plan_mla_context_chunks and its _ContextChunkPlan,
build_mla_chunked_context_metadata (with the MLACommonPrefillMetadata
dataclasses it fills), align_mla_chunked_context_workspace_size and
reorg_kvcache; get_dcp_local_seq_lens from vllm/v1/attention/backends/utils.py
and cdiv, round_down, round_up from vllm/utils/math_utils.py.  What is stood
in for, all of it infrastructure:
  - async_tensor_h2d (a host-to-device copy): torch.tensor on the CPU, and
    PIN_MEMORY False;
  - VllmConfig, for align_mla_chunked_context_workspace_size: an object
    holding the block size, the DCP size and the interleave it reads;
  - the gather kernels (cp_gather_cache) and the DCP all-gather
    (MLADCPManager.kv_gather): every rank's workspace is built here as the
    kernel fills it, the rank's local rows local_starts[i] ..
    + padded_local_seq_lens[i] of each request of the chunk back to back
    (rows past the rank's context are padding), each row tagged with its
    (request, position); the all-gather stacks the ranks' workspaces in
    rank order.
For random steps (block size, DCP 1, 2, 4, 8, interleave, workspace,
contexts with zeros among them, query lengths) every chunk's plan (request
range, starts, lengths, padded local lengths, rows per rank, cumulative
lengths), the per-rank context lengths, and every map row's place in the
gathered buffer and in reorg_kvcache's output must be what kvslot says.

usage: python kvslot-reorg-vllm.py KVSLOT [--cases N] [--seed S]
Prints the failing cases and 'N passed, M failed'.
"""
import __future__
import argparse
import ast
import dataclasses
import importlib.util
import itertools
import math
import os
import random
import sys
import tempfile
import types
import typing

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_common import release_source, run_cases, run_kvslot  # noqa: E402

VERSION = "0.33.0"


def vllm_source(member):
    """The text of vllm/<member> of release VERSION: the installed file when
    the installed vllm is that release, else from its wheel."""
    try:
        from importlib.metadata import version
        if version("vllm") == VERSION:
            spec = importlib.util.find_spec("vllm")
            path = os.path.join(spec.submodule_search_locations[0], member[len("vllm/"):])
            with open(path) as f:
                return f.read()
    except Exception:  # noqa: BLE001 - not installed: fetch the release
        pass
    return release_source("vllm", VERSION, member)


def load(source, names, env, filename):
    """Compile the top-level definitions named (decorators kept: the
    dataclasses need theirs) in a module whose globals start as env."""
    tree = ast.parse(source, filename)
    body = [n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in names]
    missing = set(names) - {n.name for n in body}
    if missing:
        raise SystemExit("%s: no %s" % (filename, ", ".join(sorted(missing))))
    code = compile(ast.Module(body=body, type_ignores=[]), filename, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, env)
    return env


def upstream():
    # a module of its own, registered: dataclasses look their module up
    mod = types.ModuleType("kvx_vllm_mla_attention")
    sys.modules[mod.__name__] = mod
    env = mod.__dict__
    env.update({"dataclass": dataclasses.dataclass, "Callable": typing.Callable,
                "torch": torch, "np": np, "math": math, "itertools": itertools,
                "lcm": math.lcm, "PIN_MEMORY": False, "TYPE_CHECKING": False})
    mu = vllm_source("vllm/utils/math_utils.py")
    load(mu, ["cdiv", "round_down", "round_up"], env, "math_utils.py")
    ut = vllm_source("vllm/v1/attention/backends/utils.py")
    load(ut, ["get_dcp_local_seq_lens"], env, "backends/utils.py")

    def async_tensor_h2d(data, device=None, dtype=None, out=None):
        return torch.tensor(np.asarray(data), dtype=dtype)

    env["async_tensor_h2d"] = async_tensor_h2d
    src = vllm_source("vllm/model_executor/layers/attention/mla_attention.py")
    load(src, ["_ContextChunkPlan", "plan_mla_context_chunks", "MLACommonPrefillMetadata",
               "build_mla_chunked_context_metadata",
               "align_mla_chunked_context_workspace_size", "reorg_kvcache"],
         env, "mla_attention.py")
    return env


class Holder:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def gen(rng):
    D = rng.choice((1, 1, 2, 4, 8))
    I = rng.choice((1, 1, 2, 4))
    B = I * rng.choice((1, 2, 4, 16))
    n = rng.randint(1, 6)
    ctx = [0 if rng.random() < 0.25 else rng.choice((rng.randint(1, 8), rng.randint(1, 300)))
           for _ in range(n)]
    ws = rng.choice((1, rng.randint(1, 64), rng.randint(1, 600), 65536))
    return {"D": D, "I": I, "B": B, "ctx": ctx, "ws": ws,
            "q": [rng.randint(1, 5) for _ in range(n)]}


def check(env, kvslot, c, tmp, rng):
    D, I, B, ctx = c["D"], c["I"], c["B"], c["ctx"]
    V = I * D
    n = len(ctx)
    cols = max(1, max(math.ceil(math.ceil(x / V) * I / B) for x in ctx))
    ids = rng.sample(range(1, 50000), n * cols)
    path = os.path.join(tmp, "bt.txt")
    with open(path, "w") as f:
        for r in range(n):
            f.write(" ".join(map(str, ids[r * cols:(r + 1) * cols])) + "\n")
    args = ["reorg", "-B", str(B), "--block-table", path, "--context-lens",
            ",".join(map(str, ctx)), "--dcp-size", str(D), "--interleave", str(I),
            "--context-chunking", "vllm", "--workspace", str(c["ws"]), "-f", "text"]
    got, err = run_kvslot(kvslot, args)
    if err:
        return err
    # vLLM: the workspace as its builder sizes it, then the metadata
    cfg = Holder(parallel_config=Holder(decode_context_parallel_size=D,
                                        cp_kv_cache_interleave_size=I),
                 cache_config=Holder(block_size=B))
    ws = env["align_mla_chunked_context_workspace_size"](cfg, c["ws"])
    qsl = [0] + list(itertools.accumulate(c["q"]))
    meta = env["build_mla_chunked_context_metadata"](
        context_lens_cpu=torch.tensor(ctx, dtype=torch.int32),
        prefill_query_start_loc_cpu=torch.tensor(qsl, dtype=torch.int32),
        chunked_prefill_workspace=torch.zeros(ws * (D + 1), 1),
        chunked_prefill_workspace_size=ws, block_size=B, align_chunk_to_block=True,
        device="cpu", dcp_world_size=D, dcp_local_block_size=I, dcp_virtual_block_size=V,
        dcp_manager=None)
    chunks = meta.chunks if meta is not None else []
    kv_toks = got.get("toks", [[]])[0]
    if len(kv_toks) != len(chunks):
        return "%d chunks, vLLM %d" % (len(kv_toks), len(chunks))
    if chunks and got["chunk_size"][0][0] != ws:
        return "chunk_size %s, vLLM's max_context_chunk %d" % (got["chunk_size"][0], ws)
    lens = (env["get_dcp_local_seq_lens"](torch.tensor(ctx), D, None, I).tolist()
            if D > 1 else [[x] for x in ctx])
    if got["local_context_lens"] != lens:
        return "local_context_lens %s, vLLM %s" % (got["local_context_lens"], lens)
    rows = got.get("map", [])
    for k, ch in enumerate(chunks):
        rs, re_ = ch.request_slice.start, ch.request_slice.stop
        seq = ch.seq_lens.tolist()
        starts = got["chunk_starts"][k]
        kl = got["chunk_seq_lens"][k]
        pl_kv = got["padded_local_chunk_seq_lens"][k]
        if D > 1:
            local_starts, pl = list(ch.local_starts), list(ch.padded_local_seq_lens)
            toks = ch.num_local_context_tokens
        else:
            local_starts, pl = ch.starts.tolist(), seq
            toks = ch.num_context_tokens
        want_starts = [0] * n
        want_len = [0] * n
        want_pl = [0] * n
        for i, b in enumerate(range(rs, re_)):
            want_len[b], want_pl[b] = seq[i], pl[i]
            # kvslot gives the context offset; vLLM's local start is its
            # padded rows (the same number without DCP)
            want_starts[b] = starts[b]
            lr = (-(-starts[b] // V) * I) if D > 1 else starts[b]
            if lr != local_starts[i]:
                return "chunk %d request %d: start %d (local %d), vLLM local start %d" % (
                    k, b, starts[b], lr, local_starts[i])
        if kl != want_len or pl_kv != want_pl or starts != want_starts:
            return "chunk %d: lengths %s padded %s, vLLM %s padded %s (requests %d..%d)" % (
                k, kl, pl_kv, want_len, want_pl, rs, re_)
        if kv_toks[k] != toks:
            return "chunk %d: toks %d, vLLM %d" % (k, kv_toks[k], toks)
        cu = got["cu_seq_lens"][k]
        if [x - cu[rs] for x in cu[rs:re_ + 1]] != ch.cu_seq_lens.tolist():
            return "chunk %d: cu_seq_lens %s, vLLM %s" % (k, cu, ch.cu_seq_lens.tolist())
        # every rank's workspace as the gather kernel fills it, tagged
        bufs = []
        for r in range(D):
            buf = np.full((toks, 2), -1.0)
            o = 0
            for i, b in enumerate(range(rs, re_)):
                for t in range(pl[i]):
                    j = local_starts[i] + t
                    if D == 1:
                        buf[o + t] = (b, j)
                    elif j < lens[b][r]:
                        buf[o + t] = (b, (j // I) * V + r * I + j % I)
                o += pl[i]
            bufs.append(torch.from_numpy(buf))
        gathered = torch.cat(bufs, 0)
        if D > 1:
            kv_c, k_pe = env["reorg_kvcache"](
                gathered[:, :1], gathered[:, 1:], padded_local_chunk_seq_lens_lst=pl,
                local_context_lens_allranks=ch.local_context_lens_allranks,
                local_starts=ch.local_starts, sum_seq_len=ch.num_context_tokens,
                max_seq_len=ch.max_seq_len, toks=toks)
            out = torch.cat([kv_c, k_pe], 1).numpy().astype(int)
        else:
            out = gathered.numpy().astype(int)   # the workspace is the layout
        mine = [r for r in rows if r[2] == k]
        if len(mine) != out.shape[0]:
            return "chunk %d: %d map rows, vLLM's layout %d" % (k, len(mine), out.shape[0])
        g_np = gathered.numpy().astype(int)
        for req, pos, chunk, pr, dr, li, ls, g, ro in mine:
            if tuple(out[ro]) != (req, pos) or tuple(g_np[g]) != (req, pos):
                return "chunk %d: request %d position %d at gathered %d reorg %d, vLLM has %s " \
                       "and %s there" % (k, req, pos, g, ro, tuple(g_np[g]), tuple(out[ro]))
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=33)
    a = ap.parse_args()
    env = upstream()
    rng = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ok, bad = run_cases(a.cases, lambda: gen(rng),
                            lambda c: check(env, a.kvslot, c, tmp, rng),
                            lambda c: "D=%d I=%d B=%d workspace=%d ctx=%s" % (
                                c["D"], c["I"], c["B"], c["ws"], c["ctx"]))
    print("kvslot reorg --context-chunking vllm against vLLM %s plan_mla_context_chunks, "
          "build_mla_chunked_context_metadata and reorg_kvcache:" % VERSION)
    print("%d passed, %d failed" % (ok, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
