"""kvslot-hash.py - 'kvslot hash' against vLLM 0.33.0's own block hashing
(scripts/crosscheck/kvslot-hash.sh).

    kvslot-hash.py KVSLOT [--prompts N] [--seed S]

N random prompts (10000) with shared prefixes, spread over configurations
(algorithm sha256, sha256_cbor, xxhash or xxhash_cbor; PYTHONHASHSEED unset
for the SHA-256 ones, or a seed; block sizes 1 to 128 and one above the
64 KiB pickle frame), with per-prompt cache salts and LoRA adapters (ASCII,
one-character strings CPython shares, Latin-1 and other Unicode, long
ones).  vLLM computes each prompt's hashes the way its engine does: a
vllm.v1.request.Request built with the block hasher of
get_request_block_hasher(block_size, get_hash_fn_by_name(algo)), after
init_none_hash(hash_fn) with PYTHONHASHSEED set or unset; kvslot hash gets
the same prompts as JSON lines and must print the same hex digests.  The
platform is replaced: a bare Platform reporting "cpu" (vllm_host.py; vLLM
would probe the machine, and vllm-ascend's plugin needs torch_npu).

Where vllm.v1.request cannot be imported (no torch), the functions of
vllm/v1/core/kv_cache_utils.py that compute the hashes are executed from
the installed file's own source, unmodified (init_none_hash,
resolve_none_hash_seed, hash_block_tokens, generate_block_hash_extra_keys
and its helpers, get_request_block_hasher), with these stand-ins, printed
at the start:
  - the Request: an object with the attributes the block hasher reads
    (block_hashes, num_tokens, all_token_ids, mm_features=None,
    lora_request with lora_name and lora_path, cache_salt,
    prompt_embeds=None);
  - the module's logger (a no-op) and BlockHash (typing.NewType, the
    identity at run time, as in the module).
vllm/utils/hashing.py is imported as it is (pickle, cbor2, xxhash).
Ends with 'N passed, M failed': one per prompt.
"""
import __future__
import argparse
import ast
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import types

ALGOS = ["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"]
# salts and LoRA strings: one-character ones CPython shares (so a pickle
# repeats them by memo), Latin-1 and other Unicode, long ones.  Never the
# literal tags "lora" or "cache_salt" (interned here like vLLM's own).
STRS = ["a", "b", "\u00e9", "\u00ff", "", "s1", "tenant-7", "\u65e5\u672c",
        "\U0001f600x", "x" * 300, "y" * 70000, "\u0100"]


def load_vllm():
    """(hash_fn_by_name, block_hashes(algo_fn, seed, B, tokens, salt,
    lora)) and a description of what was replaced."""
    try:
        # the platform: vLLM probes the machine (and loads vllm-ascend's
        # plugin, which needs torch_npu); a bare Platform reporting "cpu"
        # stands in (vllm_host.py); hashing does not depend on it
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import vllm_host  # noqa: F401
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils as K
        from vllm.v1.request import Request
        from vllm.sampling_params import SamplingParams
        from vllm.lora.request import LoRARequest

        def run(fn, seed, B, tokens, salt, lora, k=[0]):
            set_seed(seed)
            K.init_none_hash(fn)
            k[0] += 1
            lr = LoRARequest(lora[0], k[0], lora[1]) if lora else None
            req = Request(str(k[0]), tokens, SamplingParams(max_tokens=1),
                          None, lora_request=lr, cache_salt=salt,
                          block_hasher=K.get_request_block_hasher(B, fn))
            return [bytes(h) for h in req.block_hashes]
        return (get_hash_fn_by_name, run, "the platform (vllm_host.py); "
                "vLLM's own Request and block hasher")
    except ImportError as exc:
        why = str(exc)
    # the installed package's files, without importing the package (its
    # __init__ imports torch)
    top = importlib.util.find_spec("vllm").submodule_search_locations[0]
    spec = importlib.util.spec_from_file_location(
        "vllm_utils_hashing", os.path.join(top, "utils", "hashing.py"))
    hashing = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hashing)
    get_hash_fn_by_name = hashing.get_hash_fn_by_name
    path = os.path.join(top, "v1", "core", "kv_cache_utils.py")
    tree = ast.parse(open(path).read(), path)
    want = {"init_none_hash", "resolve_none_hash_seed", "hash_block_tokens",
            "generate_block_hash_extra_keys", "_gen_mm_extra_hash_keys",
            "_gen_lora_extra_hash_keys", "_gen_prompt_embeds_extra_hash_keys",
            "get_request_block_hasher", "DEFAULT_NONE_HASH_SEED",
            "_NON_CRYPTO_HASH_FUNCTIONS", "_NONE_HASH_SEED"}
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in want:
            body.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            t = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(t, ast.Name) and t.id in want and node.value:
                body.append(node)
    ns = {"os": os, "hashlib": __import__("hashlib"),
          "xxhash": hashing.xxhash, "xxhash_cbor": hashing.xxhash_cbor,
          "BlockHash": lambda b: b,
          "logger": types.SimpleNamespace(warning=lambda *a, **k: None,
                                          info=lambda *a, **k: None),
          "get_mm_features_in_window": None, "tensor_data": None,
          "Any": object, "Callable": object, "Request": object,
          "Sequence": object}
    mod = ast.Module(body=body, type_ignores=[])
    # annotations stay unevaluated (the typing names are not needed)
    exec(compile(mod, path, "exec",
                 flags=__future__.annotations.compiler_flag), ns)

    def run(fn, seed, B, tokens, salt, lora):
        set_seed(seed)
        ns["init_none_hash"](fn)
        req = types.SimpleNamespace(
            block_hashes=[], num_tokens=len(tokens), all_token_ids=tokens,
            mm_features=None, cache_salt=salt, prompt_embeds=None,
            lora_request=(types.SimpleNamespace(lora_name=lora[0],
                                                lora_path=lora[1])
                          if lora else None))
        return [bytes(h) for h in
                ns["get_request_block_hasher"](B, fn)(req)]
    return (get_hash_fn_by_name, run,
            "the Request, the logger and BlockHash (%s)" % why)


def set_seed(seed):
    if seed is None:
        os.environ.pop("PYTHONHASHSEED", None)
    else:
        os.environ["PYTHONHASHSEED"] = seed


def configs(r, n):
    """(algo, seed, B, prompts) groups covering n prompts."""
    out = []
    left = n
    while left > 0:
        algo = r.choice(ALGOS)
        seed = str(r.randrange(10 ** r.randrange(1, 12)))
        if "sha256" in algo and r.random() < 0.5:
            seed = None
        B = r.choice([1, 2, 3, 4, 5, 16, 16, 16, 32, 64, 128])
        if r.random() < 0.02:
            B = 13200
        k = min(left, r.randrange(20, 200))
        left -= k
        out.append((algo, seed, B, k))
    return out


def token(r):
    c = r.random()
    if c < 0.3:
        return r.randrange(256)
    if c < 0.6:
        return r.randrange(256, 65536)
    if c < 0.98:
        return r.randrange(65536, 2 ** 31)
    return r.randrange(2 ** 31, 2 ** 62)


def decoded(s):
    """s as a server has it: a str decoded from JSON, a separate object
    unless CPython shares it (the empty and one-character ones)."""
    return json.loads(json.dumps(s))


def prompts(r, k, B):
    bases = [[token(r) for _ in range(r.randrange(0, 8 * B + 5))]
             for _ in range(3)]
    big = B > 1000
    for _ in range(k):
        if big:
            toks = [token(r) for _ in range(r.randrange(B, 2 * B + 3))]
        else:
            base = r.choice(bases)
            toks = base[:r.randrange(len(base) + 1)] + \
                [token(r) for _ in range(r.randrange(0, 3 * B + 2))]
        salt = decoded(r.choice(STRS)) if r.random() < 0.3 else None
        lora = None
        if r.random() < 0.3:
            name = r.choice(STRS[:-2] + ["adapter"])
            path = r.choice([name, "/models/x", r.choice(STRS)]) or "p"
            lora = (decoded(name), decoded(path))
        yield toks, salt, lora


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvslot")
    ap.add_argument("--prompts", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=37)
    a = ap.parse_args()
    by_name, run, replaced = load_vllm()
    print("# replaced:", replaced)
    r = random.Random(a.seed)
    passed = failed = shown = 0
    with tempfile.TemporaryDirectory() as d:
        for algo, seed, B, k in configs(r, a.prompts):
            fn = by_name(algo)
            cases = list(prompts(r, k, B))
            path = os.path.join(d, "p.jsonl")
            with open(path, "w") as f:
                for toks, salt, lora in cases:
                    o = {"token_ids": toks}
                    if salt is not None:
                        o["cache_salt"] = salt
                    if lora:
                        o["lora_name"], o["lora_path"] = lora
                    f.write(json.dumps(o) + "\n")
            cmd = [a.kvslot, "hash", "-B", str(B), "--algo", algo, "-f",
                   "json", path]
            if seed is not None:
                cmd[2:2] = ["--hash-seed", seed]
            p = subprocess.run(cmd, capture_output=True, text=True)
            got = [json.loads(x)["hashes"] for x in p.stdout.splitlines()]
            if p.returncode or len(got) != len(cases):
                failed += len(cases)
                print("# %s seed=%s B=%d: kvslot exit %d: %s" %
                      (algo, seed, B, p.returncode, p.stderr[:300]))
                continue
            for i, (toks, salt, lora) in enumerate(cases):
                want = [h.hex() for h in run(fn, seed, B, toks, salt, lora)]
                if want == got[i]:
                    passed += 1
                    continue
                failed += 1
                if shown < 5:
                    shown += 1
                    print("# %s seed=%s B=%d prompt %d (%d tokens, salt %r, "
                          "lora %r): vLLM %s, kvslot %s" %
                          (algo, seed, B, i, len(toks),
                           None if salt is None else salt[:20],
                           lora and (lora[0][:20], lora[1][:20]),
                           want[:2], got[i][:2]))
    set_seed(None)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
