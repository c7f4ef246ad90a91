# scripts/crosscheck/stage_kvmask.py - kvmask against the upstream code that
# builds the same masks (run by scripts/crosscheck/kvmask.sh).
#
# vllm-ascend: its release files are downloaded with 'pip download --no-deps'
# (never installed: they need torch_npu) and the mask builders are executed
# from them, unmodified, through stage_common.load_defs: the named top-level
# functions and classes only, without their imports and decorators.  What
# replaces the NPU runtime and the imports, and nothing else:
#   - torch_npu.npu_format_cast(x, fmt) returns x (the FRACTAL_NZ layout is
#     built on the host by the release's own nd_to_nz_2d / nd_to_nz_spec,
#     loaded from its vllm_ascend/utils.py);
#   - ACL_FORMAT_FRACTAL_NZ is 29, as in vllm_ascend/utils.py;
#   - the @singleton decorator is dropped (a fresh builder per case);
#   - devices are "cpu"; model_config is an object with runner_type and dtype;
#     AscendMetadata is an object with query_start_loc and seq_lens.
# torch: FlexAttention's create_block_mask on the CPU, imported as installed.
# FlashInfer: its packbits / segment_packbits and the BSR mask layout where
# they run on a CPU (they are CUDA or JIT kernels: reported as skipped).
import os
import random
import sys
import time
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage_common import Count, has_defs, kv, load_defs, npys, release_source, same_bytes  # noqa: E402

SEED = 20260526
rng = random.Random(SEED)
C = Count("kvmask")
VA = "vllm-ascend"
# The releases each preset is held to: the newest release on the package
# index that still builds it, and the current one where it still does.
CURRENT = "0.23.0.post1"
SWA = "0.18.0"        # get_swa_mask: removed after 0.18.0
PER_ROW = "0.9.1"     # per-row get_splitfuse_attn_mask(seq_lens, position, ..)
POOL_OLD = "0.11.0"   # get_pooling_mask (later: get_attn_mask(2048, bool))

DT = {"bool": torch.bool, "u8": torch.uint8, "i8": torch.int8,
      "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def npu_stub():
    m = types.SimpleNamespace()
    m.npu_format_cast = lambda x, fmt: x
    return m


def utils_defs(ver):
    src = release_source(VA, ver, "vllm_ascend/utils.py")
    return load_defs(src, ["_round_up", "_custom_pad", "_custom_reshape",
                           "_custom_transpose", "nd_to_nz_2d", "nd_to_nz_spec"],
                     {"torch": torch}, "%s/utils.py" % ver)


def builder(ver):
    src = release_source(VA, ver, "vllm_ascend/attention/attention_mask.py")
    return load_defs(src, ["_generate_attn_mask", "AttentionMaskBuilder"],
                     {"torch": torch}, "%s/attention_mask.py" % ver)


def builder310(ver):
    src = release_source(VA, ver, "vllm_ascend/_310p/attention/attention_mask.py")
    u = utils_defs(ver)
    names = ["AttentionMaskBuilder310"]
    for extra in ("COMPRESSED_MASK_SEQ_LEN", "PAGED_ATTENTION_COMPRESSED_MASK_VALUE",
                  "is_compressed_mask_supported"):
        if extra in src:
            names.append(extra)
    env = {"torch": torch, "torch_npu": npu_stub(), "ACL_FORMAT_FRACTAL_NZ": 29,
           "AscendMetadata": object, "nd_to_nz_2d": u.nd_to_nz_2d,
           "nd_to_nz_spec": u.nd_to_nz_spec}
    return load_defs(src, names, env, "%s/_310p/attention_mask.py" % ver)


def builder091():
    src = release_source(VA, PER_ROW, "vllm_ascend/attention/attention.py")
    return load_defs(src, ["generate_attn_mask", "AttentionMaskBuilder"],
                     {"torch": torch, "Optional": __import__("typing").Optional},
                     "%s/attention.py" % PER_ROW)


def kvnpy(*args):
    a = npys(kv("kvmask", *args))
    return a[0]


def ascend_cases():
    cur = builder(CURRENT)
    swa = builder(SWA)
    old = builder(POOL_OLD)
    b310 = builder310(CURRENT)
    b310_18 = builder310(SWA)
    b091 = builder091()
    mc = types.SimpleNamespace
    # Which builder each release has (for the man page and the log).
    for ver in (PER_ROW, POOL_OLD, "0.13.0", SWA, CURRENT):
        try:
            path = "vllm_ascend/attention/attention.py" if ver == PER_ROW else \
                "vllm_ascend/attention/attention_mask.py"
            s = release_source(VA, ver, path)
            have = [n for n in ("get_attn_mask", "get_splitfuse_attn_mask", "get_pooling_mask",
                                "get_mla_mask", "get_pcp_mla_mask", "get_swa_mask") if n in s]
            print("  vllm-ascend %-13s %s" % (ver, " ".join(have)))
        except Exception as e:  # noqa: BLE001
            print("  vllm-ascend %s: %s" % (ver, e))

    # attn: get_attn_mask(N, dtype) of the current release, with the builder's
    # cache first built for another dtype (--cache-dtype) in some cases; the
    # 2025-07 form (0.9.1, fill finfo(f32).min then cast) beside it.
    for _ in range(300):
        n = rng.choice([1, 2, 3, 7, 16, 17, 64, 100, 128, 255, 300, 513])
        d = rng.choice(list(DT))
        cache = rng.choice([None, None] + [c for c in DT if not (c in ("bool", "u8", "i8") and d != c and
                                                                  c != "bool")])
        b = cur.AttentionMaskBuilder("cpu")
        args = ["ascend", "--preset", "attn", "-n", n, "--dtype", d, "-f", "npy"]
        if cache and cache != d:
            if DT[d] in (torch.bool, torch.uint8, torch.int8) and cache == "f16":
                continue  # -inf cannot become an integer: kvmask refuses it
            b.get_attn_mask(n, DT[cache])
            args += ["--cache-dtype", cache]
        ref = b.get_attn_mask(n, DT[d])
        C.run("attn (%s)" % CURRENT, " ".join(map(str, args)),
              lambda: same_bytes(kvnpy(*args), ref))
        if d in ("f16", "bf16", "f32") and not cache:
            ref2 = b091.AttentionMaskBuilder.initialize_from_len(n, DT[d]).get_attn_mask(n, DT[d], "cpu")
            C.run("attn, 2025-07 form (%s)" % PER_ROW, " ".join(map(str, args)),
                  lambda: same_bytes(kvnpy(*args), ref2))
    # attn in the 310P FRACTAL_NZ layout: _get_causal_mask of the 310P builder.
    for _ in range(60):
        n = rng.randint(1, 200)
        b = b310.AttentionMaskBuilder310("cpu", n)
        ref = b._get_causal_mask(n)
        args = ["ascend", "--preset", "attn", "-n", n, "--layout", "nz"]
        C.run("attn nz, 310P (%s)" % CURRENT, " ".join(map(str, args)),
              lambda: same_bytes(kvnpy(*args), ref))

    # splitfuse template, and its top-left slices.
    tmpl = cur.AttentionMaskBuilder("cpu").get_splitfuse_attn_mask()
    full = kvnpy("ascend", "--preset", "splitfuse", "-n", 2048)
    C.run("splitfuse (%s)" % CURRENT, "-n 2048", lambda: same_bytes(full, tmpl))
    for _ in range(15):
        n = rng.randint(1, 2048)
        C.run("splitfuse (%s)" % CURRENT, "-n %d" % n,
              lambda: same_bytes(kvnpy("ascend", "--preset", "splitfuse", "-n", n),
                                 tmpl[:n, :n].contiguous()))
    # per-row splitfuse of 0.9.1: one row per scheduled token.
    for _ in range(400):
        r = rng.randint(1, 6)
        seq = [rng.randint(1, 300) for _ in range(r)]
        d = rng.choice(["f16", "bf16"])
        if rng.random() < 0.5:
            ql = [rng.randint(1, s) for s in seq]
            pos = [p for s, q in zip(seq, ql) for p in range(s - q, s)]
            extra = ["--q-lens", ",".join(map(str, ql))]
        else:
            m = max(seq)
            pos = [rng.randint(0, m - 1) for _ in range(rng.randint(1, 20))]
            extra = ["--positions", ",".join(map(str, pos))]
        b = b091.AttentionMaskBuilder.initialize_from_len(rng.choice([max(seq), 2048]), DT[d])
        ref = b.get_splitfuse_attn_mask(seq, torch.tensor(pos), DT[d], "cpu")
        args = ["ascend", "--preset", "splitfuse", "--seq-lens", ",".join(map(str, seq)),
                "--dtype", d] + extra
        C.run("splitfuse per-row (%s)" % PER_ROW, " ".join(map(str, args)),
              lambda: same_bytes(kvnpy(*args), ref))
    # the 310P per-row splitfuse mask (f16 -inf rows in FRACTAL_NZ), columns
    # up to max_seqlen: held to kvmask's rows at max_seqlen = max(seq_lens).
    for ver, mod in ((CURRENT, b310), (SWA, b310_18)):
        for _ in range(100):
            r = rng.randint(1, 5)
            seq = [rng.randint(1, 200) for _ in range(r)]
            ql = [rng.randint(1, s) for s in seq]
            qsl = torch.tensor([0] + list(np.cumsum(ql)), dtype=torch.int32)
            mod.AttentionMaskBuilder310.chunked_prefill_attn_mask = None
            mod.AttentionMaskBuilder310("cpu", max(seq))
            meta = mc(query_start_loc=qsl, seq_lens=torch.tensor(seq, dtype=torch.int32))
            ref = mod.AttentionMaskBuilder310.get_splitfuse_mask(meta, "cpu")
            args = ["ascend", "--preset", "splitfuse", "--seq-lens", ",".join(map(str, seq)),
                    "--q-lens", ",".join(map(str, ql)), "--dtype", "f16", "--layout", "nz"]
            C.run("splitfuse per-row nz, 310P (%s)" % ver, " ".join(map(str, args)),
                  lambda: same_bytes(kvnpy(*args), ref))

    # splitfuse-310p: the compressed mask of the current 310P builder.
    if has_defs(release_source(VA, CURRENT, "vllm_ascend/_310p/attention/attention_mask.py"),
                ["AttentionMaskBuilder310"]):
        ref = b310.AttentionMaskBuilder310.get_compressed_splitfuse_mask("cpu")
        C.run("splitfuse-310p (%s)" % CURRENT, "-n 2048",
              lambda: same_bytes(kvnpy("ascend", "--preset", "splitfuse-310p", "-n", 2048), ref))
        for _ in range(12):
            n = rng.randint(1, 2048)
            C.run("splitfuse-310p (%s)" % CURRENT, "-n %d" % n,
                  lambda: same_bytes(kvnpy("ascend", "--preset", "splitfuse-310p", "-n", n),
                                     ref[:n, :n].contiguous()))

    # pooling: get_attention_mask of a pooling model (current), and 0.11.0's
    # get_pooling_mask.
    ref = cur.AttentionMaskBuilder("cpu").get_attention_mask(True, mc(runner_type="pooling"))
    ref_old = old.AttentionMaskBuilder(16, torch.float16).get_pooling_mask("cpu")
    for n in [2048] + [rng.randint(1, 2048) for _ in range(12)]:
        C.run("pooling (%s)" % CURRENT, "-n %d" % n,
              lambda: same_bytes(kvnpy("ascend", "--preset", "pooling", "-n", n),
                                 ref[:n, :n].contiguous()))
        C.run("pooling (%s)" % POOL_OLD, "-n %d" % n,
              lambda: same_bytes(kvnpy("ascend", "--preset", "pooling", "-n", n),
                                 ref_old[:n, :n].contiguous()))

    # mla and pcp-mla, every dtype.
    for d in DT:
        b = cur.AttentionMaskBuilder("cpu")
        for preset, fn in (("mla", b.get_mla_mask), ("pcp-mla", b.get_pcp_mla_mask)):
            ref = fn(DT[d])
            for n in [512] + [rng.randint(1, 512) for _ in range(8)]:
                C.run("%s (%s)" % (preset, CURRENT), "%s -n %d" % (d, n),
                      lambda: same_bytes(kvnpy("ascend", "--preset", preset, "-n", n, "--dtype", d),
                                         ref[:n, :n].contiguous()))

    # swa: get_swa_mask of 0.18.0 for random windows; the 310P builder's
    # f16 -inf SWA mask in FRACTAL_NZ against kvmask window.
    for _ in range(40):
        w = rng.randint(1, 2100)
        ref = swa.AttentionMaskBuilder("cpu").get_swa_mask(torch.float16, w)
        n = rng.choice([2048, rng.randint(1, 600), rng.randint(1, 600)])
        C.run("swa (%s)" % SWA, "-w %d -n %d" % (w, n),
              lambda: same_bytes(kvnpy("ascend", "--preset", "swa", "-w", w, "-n", n),
                                 ref[:n, :n].contiguous()))
    for ver, mod in ((CURRENT, b310), (SWA, b310_18)):
        if not hasattr(mod.AttentionMaskBuilder310, "get_swa_mask"):
            print("  vllm-ascend %s: the 310P builder has no get_swa_mask" % ver)
            continue
        for _ in range(30):
            n, w = rng.randint(1, 300), rng.randint(1, 320)
            b = mod.AttentionMaskBuilder310("cpu", n)
            b.max_seqlen = n
            ref = b.get_swa_mask(torch.float16, w)
            args = ["window", "-w", w, "-n", n, "--dtype", "f16", "--layout", "nz"]
            C.run("swa nz, 310P (%s)" % ver, " ".join(map(str, args)),
                  lambda: same_bytes(kvnpy(*args), ref))


# mtp-cp: the method generate_mtp_attention_mask_for_decode of the current
# release's PCP manager (vllm_ascend/worker/pcp_utils.py), executed on an
# object holding only the attributes it reads (ranks, sizes, the number of
# decode requests and its CPU mask buffer).
def mtp_cases():
    import ast
    src = release_source(VA, CURRENT, "vllm_ascend/worker/pcp_utils.py")
    fn = None
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == "generate_mtp_attention_mask_for_decode":
            fn = node
    if fn is None:
        print("  vllm-ascend %s: no generate_mtp_attention_mask_for_decode" % CURRENT)
        return
    fn.decorator_list = []
    import __future__
    code = compile(ast.Module(body=[fn], type_ignores=[]), "pcp_utils.py", "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    env = {"torch": torch, "np": np}
    exec(code, env)
    gen = env["generate_mtp_attention_mask_for_decode"]
    for _ in range(300):
        nreq = rng.randint(1, 5)
        w = rng.randint(2, 8)  # PCP x DCP ranks, as the method multiplies them
        r = rng.randint(0, w - 1)
        hist = [rng.randint(0, 60) for _ in range(nreq)]
        ql = [rng.randint(1, 6) for _ in range(nreq)]
        buf = torch.ones(nreq, 8, 128, dtype=torch.bool)
        me = types.SimpleNamespace(pcp_world_rank=0, pcp_world_size=1, dcp_world_size=w,
                                   dcp_world_rank=r, num_decode_reqs=nreq,
                                   dcp_mtp_attn_mask=types.SimpleNamespace(cpu=buf))
        ref = gen(me, hist, np.array(ql))
        args = ["ascend", "--preset", "mtp-cp", "--history", ",".join(map(str, hist)),
                "--q-lens", ",".join(map(str, ql)), "--cp-size", w, "--cp-rank", r]
        try:
            got = kvnpy(*args)
        except RuntimeError as e:
            # a rank without any key of these requests: kvmask refuses, the
            # release returns its buffer as it was, uncleared (kvmask(1))
            none = all(h + q - 1 < r for h, q in zip(hist, ql))
            C.check("holds no key" in str(e) and none,
                    "mtp-cp (%s): rank without keys refused" % CURRENT, " ".join(map(str, args)))
            continue
        mq, mk = got.shape[1], got.shape[2]
        # the buffer beyond [R, max q, max kv_local] is zero
        ok = (not ref[:, mq:, :].any() and not ref[:, :, mk:].any()
              and np.array_equal(got, ref[:, :mq, :mk].numpy()))
        C.check(ok, "mtp-cp (%s)" % CURRENT, " ".join(map(str, args)))


# ---- FlexAttention create_block_mask --------------------------------------

def flex_cases():
    from torch.nn.attention.flex_attention import create_block_mask
    names = ["kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
             "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"]

    def compare(bm, args, group):
        got = npys(kv("kvmask", *args, "-f", "block"))
        ref = [getattr(bm, n) for n in names]
        bad = [n for n, a, r in zip(names, got, ref)
               if r is None or a.dtype != np.int32 or not np.array_equal(a, r.to(torch.int32).numpy())]
        C.check(not bad, group, "%s: differ in %s" % (" ".join(map(str, args)), ",".join(bad)))

    def bs():
        r = rng.choice([16, 32, 64, 128])
        c = rng.choice([16, 32, 64, 128])
        return r, c

    for _ in range(700):
        kind = rng.choice(["causal", "window", "prefix", "band", "full", "varlen", "chunk"])
        r, c = bs()
        if kind in ("causal", "window", "prefix", "band", "full"):
            sq = rng.randint(1, 700)
            skv = sq if rng.random() < 0.5 else rng.randint(1, 700)
            top = rng.random() < 0.3
            off = 0 if top else skv - sq
            args = [kind, "-q", sq, "-k", skv]
            if top:
                args += ["--align", "top-left"]
            if kind == "causal":
                def mm(b, h, q, k, off=off): return q + off >= k
            elif kind == "full":
                def mm(b, h, q, k): return k >= 0
            elif kind == "window":
                w = rng.randint(1, 300)
                args += ["-w", w]
                def mm(b, h, q, k, off=off, w=w): return (q + off >= k) & (q + off - w < k)
            elif kind == "band":
                p, nx = rng.randint(0, 200), rng.randint(0, 200)
                args += ["--pre", p, "--next", nx]
                def mm(b, h, q, k, off=off, p=p, nx=nx): return (k >= q + off - p) & (k <= q + off + nx)
            else:
                p = rng.randint(0, 300)
                args += ["-p", p]
                def mm(b, h, q, k, off=off, p=p): return (k < p) | (q + off >= k)
        elif kind == "varlen":
            nreq = rng.randint(1, 6)
            ql = [rng.randint(0, 150) for _ in range(nreq)]
            kl = [q if rng.random() < 0.4 else rng.randint(0, 200) for q in ql]
            if sum(ql) == 0:
                ql[0] = 1
            if sum(kl) == 0:
                kl[-1] = 1
            w = rng.choice([None, None, rng.randint(1, 100)])
            qid = torch.tensor(sum(([i] * q for i, q in enumerate(ql)), []), dtype=torch.int64)
            kid = torch.tensor(sum(([i] * k for i, k in enumerate(kl)), []), dtype=torch.int64)
            qoff = torch.tensor(np.cumsum([0] + ql)[:-1], dtype=torch.int64)
            koff = torch.tensor(np.cumsum([0] + kl)[:-1], dtype=torch.int64)
            qlt, klt = torch.tensor(ql), torch.tensor(kl)
            sq, skv = sum(ql), sum(kl)
            args = ["varlen", "--q-lens", ",".join(map(str, ql)), "--kv-lens", ",".join(map(str, kl))]
            if w:
                args += ["-w", w]

            def mm(b, h, q, k, w=w):
                rq, rk = qid[q], kid[k]
                a = q - qoff[rq]
                bb = k - koff[rk]
                lim = a + klt[rq] - qlt[rq]
                ok = (rq == rk) & (bb <= lim)
                if w:
                    ok = ok & (bb > lim - w)
                return ok
        else:
            sysn = rng.randint(0, 100)
            ch = [rng.randint(0, 120) for _ in range(rng.randint(1, 5))]
            qn = rng.randint(0, 60)
            if sysn + sum(ch) + qn == 0:
                qn = 1
            seg, kind_of = [], []
            seg += [0] * sysn
            kind_of += [0] * sysn
            for i, n in enumerate(ch):
                seg += [i + 1] * n
                kind_of += [1] * n
            seg += [len(ch) + 1] * qn
            kind_of += [2] * qn
            segt, kt = torch.tensor(seg), torch.tensor(kind_of)
            sq = skv = len(seg)
            args = ["chunk", "--sys", sysn, "--chunks", ",".join(map(str, ch)), "--question", qn]

            def mm(b, h, q, k):
                return (k <= q) & ((kt[q] != 1) | (kt[k] == 0) | (segt[k] == segt[q]))
        bm = create_block_mask(mm, None, None, sq, skv, device="cpu", BLOCK_SIZE=(r, c))
        compare(bm, args + ["--block-size", "%d,%d" % (r, c)], "flex create_block_mask %s" % kind)


# ---- FlashInfer -------------------------------------------------------------
# Its packbits and segment_packbits are CUDA kernels built at run time (JIT):
# they do not run on a CPU, and numpy.packbits, whose semantics their
# documentation states, stands in for segment_packbits.  The BSR mask path of
# BlockSparseAttentionWrapper.plan is otherwise pure torch: its
# _compute_page_mask_indptr and convert_bsr_mask_layout are executed from
# the installed package's files (flashinfer is not imported: it needs its
# CUDA runtime packages).

def flashinfer_cases():
    import importlib.metadata as md
    dist = md.distribution("flashinfer-python")
    base = str(dist.locate_file("flashinfer"))
    env = {"torch": torch, "Tuple": tuple, "Optional": None}
    sp = load_defs(open(os.path.join(base, "sparse.py")).read(), ["convert_bsr_mask_layout"],
                   env, "flashinfer/sparse.py")
    pf = load_defs(open(os.path.join(base, "prefill.py")).read(), ["_compute_page_mask_indptr"],
                   env, "flashinfer/prefill.py")
    ver = dist.version
    try:
        import flashinfer.quantization  # noqa: F401
        print("  flashinfer %s: importable" % ver)
    except Exception as e:  # noqa: BLE001
        print("  flashinfer %s: packbits/segment_packbits are CUDA JIT kernels, not run "
              "(import: %s); numpy.packbits stands in" % (ver, str(e).splitlines()[0][:80]))

    def seg_packbits(x, indptr):
        out, ind = [], [0]
        for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist()):
            seg = np.packbits(x[a:b].numpy().astype(np.uint8), bitorder="little")
            out.append(seg)
            ind.append(ind[-1] + len(seg))
        return np.concatenate(out) if out else np.zeros(0, np.uint8), np.array(ind, np.int32)

    for _ in range(300):
        kind = rng.choice(["causal", "window", "prefix", "chunk"])
        r = rng.choice([1, 2, 4, 8, 16, 64])
        c = rng.choice([1, 2, 4, 8, 16, 64])
        if kind == "chunk":
            args = ["chunk", "--sys", rng.randint(0, 40), "--chunks",
                    "%d,%d" % (rng.randint(1, 60), rng.randint(0, 60)), "--question", rng.randint(1, 20)]
        else:
            sq = rng.randint(1, 200)
            args = [kind, "-q", sq, "-k", rng.randint(1, 4) * c * rng.randint(1, 16)]
            args += {"causal": [], "window": ["-w", rng.randint(1, 80)], "prefix": ["-p", rng.randint(0, 50)]}[kind]
        dense = kvnpy(*args, "--keep", "-f", "npy").astype(bool)
        m, n = dense.shape
        if n % c:
            continue
        mb = (m + r - 1) // r
        pad = np.zeros((mb * r, n), bool)
        pad[:m] = dense
        blocks = pad.reshape(mb, r, n // c, c).transpose(0, 2, 1, 3)
        keep = blocks.any(axis=(2, 3))
        indptr = torch.tensor(np.concatenate([[0], np.cumsum(keep.sum(1))]), dtype=torch.int32)
        indices = torch.tensor(np.nonzero(keep)[1], dtype=torch.int32)
        mask = torch.from_numpy(np.ascontiguousarray(blocks[keep]))
        qo = r * torch.arange(mb + 1, dtype=torch.int32)
        qo[-1] = m
        mind = pf._compute_page_mask_indptr(qo, indptr, torch.full((mb,), c, dtype=torch.int32), c)
        flat = sp.convert_bsr_mask_layout(mask, indptr)
        packed, _ = seg_packbits(flat.contiguous().view(-1), mind)
        got = npys(kv("kvmask", *args, "-f", "bsr", "--block-size", "%d,%d" % (r, c)))
        ok = (len(got) == 3 and np.array_equal(got[0], indptr.numpy())
              and np.array_equal(got[1], indices.numpy()) and np.array_equal(got[2], packed))
        C.check(ok, "flashinfer %s bsr plan mask" % ver,
                " ".join(map(str, args)) + " --block-size %d,%d" % (r, c))


def main():
    print("kvmask cross-check: vllm-ascend %s (attn, splitfuse, splitfuse-310p, pooling, mla, "
          "pcp-mla, mtp-cp), %s (swa), %s (per-row splitfuse), %s (get_pooling_mask); torch %s "
          "FlexAttention; flashinfer-python's BSR plan; seed %d"
          % (CURRENT, SWA, PER_ROW, POOL_OLD, torch.__version__, SEED))
    for part in (ascend_cases, mtp_cases, flex_cases, flashinfer_cases):
        t = time.time()
        try:
            part()
        except Exception as e:  # noqa: BLE001 - a crash fails the part, counts still print
            C.check(False, part.__name__, "%s: %s" % (type(e).__name__, e))
        print("  (%s: %.0f s)" % (part.__name__, time.time() - t))
    return C.close()


if __name__ == "__main__":
    sys.exit(main())
