"""mla_cp.py - kvslot reorg against vllm-ascend's own _reorg_kvcache.

vllm-ascend does not import without an NPU (torch_npu), so its method is
taken from the installed package's source file as it is (ast: the function
definition of AscendMlaCPImpl._reorg_kvcache, compiled unchanged) and run
with the infrastructure replaced: get_dcp_group() and get_pcp_group() are
all-gathers that concatenate the ranks' tensors along dim 0, as
torch.distributed's all_gather into one tensor does.  For random steps
(PCP and DCP sizes, interleave, block size, context lengths, context
chunking) every rank's loaded buffer is built as mla_cache_load reads it
(the rank's local sequence through the block table, padded chunk slices
back to back), each row tagged with its (request, position); the method
reorganises the gathered rows, and its output must be, row for row, what
kvslot reorg's map says.  The chunk metadata given to the method is that of
vllm-ascend's build_chunked_metadata, written out here.
Prints one line per case and 'N passed, M failed'.
"""
import ast
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

spec = importlib.util.find_spec("vllm_ascend")
SRC = os.path.join(spec.submodule_search_locations[0], "attention", "context_parallel", "mla_cp.py")


def load_reorg():
    tree = ast.parse(open(SRC).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_reorg_kvcache":
            mod = ast.Module(body=[node], type_ignores=[])
            ns = {"torch": torch, "CPChunkedContextMetadata": object}
            ns["get_dcp_group"] = lambda: GROUPS["dcp"]
            ns["get_pcp_group"] = lambda: GROUPS["pcp"]
            exec(compile(mod, SRC, "exec"), ns)
            return ns["_reorg_kvcache"]
    raise SystemExit("no _reorg_kvcache in " + SRC)


class Group:
    """all_gather(x, dim) of a group: its members' tensors (parts(x))
    concatenated along dim, as torch.distributed gathers into one tensor."""

    def __init__(self):
        self.parts = None

    def all_gather(self, x, dim):
        return torch.cat(self.parts(x), dim)


GROUPS = {"dcp": Group(), "pcp": Group()}


class Meta:
    pass


def cdiv(a, b):
    return -(-a // b)


def case(reorg, d, rng, k):
    pcp, dcp = int(rng.choice([1, 2])), int(rng.choice([1, 2, 4]))
    if pcp * dcp == 1:
        dcp = 2
    W = pcp * dcp
    I = int(rng.choice([1, 1, 2, 4]))
    B = I * int(rng.choice([1, 2, 4, 16]))
    V = I * W
    n = int(rng.integers(1, 5))
    ctx = [int(x) for x in rng.integers(0, 200, n)]
    mcc = V * int(rng.choice([0, 1, 3, 8, 100]))
    maxctx = max(ctx)
    eff = mcc if mcc else cdiv(max(maxctx, 1), V) * V
    cs, nc = eff // V * I, cdiv(maxctx, eff)
    cols = max(1, max(cdiv(cdiv(c, V) * I, B) for c in ctx))
    bt = np.zeros((n, cols), np.int64)
    ids = rng.permutation(n * cols) + 1
    bt[:, :] = ids.reshape(n, cols)
    np.savetxt(os.path.join(d, "bt.txt"), bt, fmt="%d")
    args = ["kvslot", "reorg", "-B", str(B), "--block-table", os.path.join(d, "bt.txt"),
            "--context-lens", ",".join(map(str, ctx)), "--pcp-size", str(pcp),
            "--dcp-size", str(dcp), "--interleave", str(I), "-f", "text"]
    if mcc:
        args += ["--max-context-chunk", str(mcc)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = [list(map(int, l.split()[1:])) for l in out.splitlines() if l.startswith("map:")]
    # local lengths and the metadata of build_chunked_metadata
    base = [c // I // W * I for c in ctx]
    lens = [[base[b] + min(max(ctx[b] - base[b] * W - r * I, 0), I) for r in range(W)]
            for b in range(n)]
    padded_ctx = [cdiv(c, V) * I for c in ctx]
    ok = True
    for c in range(nc):
        pl = [max(0, min(p, (c + 1) * cs) - c * cs) for p in padded_ctx]
        toks = sum(pl)
        # each rank's buffer: the padded slices of its local sequence, tagged
        bufs = []
        for r in range(W):
            buf = np.full((max(toks, 0), 2), -1.0, np.float32)
            o = 0
            for b in range(n):
                for t in range(pl[b]):
                    j = c * cs + t
                    if j < lens[b][r]:
                        buf[o + t] = (b, (j // I) * V + r * I + j % I)
                o += pl[b]
            bufs.append(torch.from_numpy(buf))
        # the DCP gather inside each PCP rank, then the PCP gather
        gathered_by_pcp = [torch.cat([bufs[p * dcp + q] for q in range(dcp)], 0)
                           for p in range(pcp)]
        meta = Meta()
        meta.padded_local_chunk_seq_lens = [None] * nc
        meta.padded_local_chunk_seq_lens[c] = pl
        meta.local_context_lens_allranks = lens
        real = [sum(min(max(0, lens[b][r] - c * cs), pl[b]) for r in range(W)) for b in range(n)]
        meta.cu_seq_lens_lst = [None] * nc
        meta.cu_seq_lens_lst[c] = list(np.concatenate([[0], np.cumsum(real)]).astype(int))
        meta.max_seq_lens = [None] * nc
        meta.max_seq_lens[c] = max(real)
        meta.chunk_size = cs
        self = Meta()
        self.dcp_size, self.pcp_size = dcp, pcp
        self.kv_lora_rank, self.qk_rope_head_dim = 1, 1
        # rank (0, 0)'s view: its own buffer; the groups hand back the others
        GROUPS["dcp"].parts = lambda x: [bufs[q] for q in range(dcp)]
        GROUPS["pcp"].parts = lambda x: gathered_by_pcp
        kv_c, k_pe = reorg(self, bufs[0][:, :1], bufs[0][:, 1:], chunked_context=meta,
                           chunk_idx=c, toks=toks)
        got = torch.cat([kv_c, k_pe], 1).numpy().astype(int)
        want = np.full((meta.cu_seq_lens_lst[c][-1], 2), -2, int)
        for row in rows:
            req, pos, chunk, pr, dr, li, ls, g, ro = row
            if chunk == c:
                want[ro] = (req, pos)
        ok &= got.shape == want.shape and bool((got == want).all())
    print(("ok   " if ok else "FAIL ") +
          f"case {k}: pcp {pcp} dcp {dcp} I {I} B {B} ctx {ctx} chunk {mcc}: "
          f"{len(rows)} rows as _reorg_kvcache places them", flush=True)
    return ok


def main():
    reorg = load_reorg()
    rng = np.random.default_rng(23)
    p = f = 0
    with tempfile.TemporaryDirectory() as d:
        for k in range(200):
            if case(reorg, d, rng, k):
                p += 1
            else:
                f += 1
    print(f"{p} passed, {f} failed")
    return 0 if f == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
