#!/usr/bin/env python3
"""kvslot_hash_ref.py - independent references for tests/cli/kvslot-hash.sh,
standard library only.

    kvslot_hash_ref.py sha256 B SEED FILE   the SHA-256 (pickle) block
        hashes of the prompts in FILE (JSON lines), in kvslot hash's text
        form, as vLLM's rule reads: H((parent, tuple(block), extra_keys))
        with H = sha256(pickle.dumps(x, protocol=5)), NONE_HASH = H(SEED)
        (SEED '-': "vllm-none-hash"); extra keys ("lora", name, path) on
        every block, ("cache_salt", salt) on block 0
    kvslot_hash_ref.py cache B FILE          "B PROMPTS TOKENS HIT" of an
        unbounded prefix cache, blocks matched by their whole content
        (salt, LoRA and every token up to the block's end), not by a hash
"""
import hashlib
import json
import pickle
import sys


def prompts(path):
    with open(path) as f:
        for line in f:
            p = json.loads(line)
            if isinstance(p, list):
                p = {"token_ids": p}
            yield p


def sha256(B, seed, path):
    fn = lambda x: hashlib.sha256(pickle.dumps(x, protocol=5)).digest()
    none = fn("vllm-none-hash" if seed == "-" else seed)
    out = []
    for i, p in enumerate(prompts(path)):
        if i:
            out.append("")
        toks = p["token_ids"]
        parent = none
        for b in range(len(toks) // B):
            extra = []
            if p.get("lora_name") is not None:
                extra.append(("lora", p["lora_name"], p["lora_path"]))
            if b == 0 and p.get("cache_salt"):
                extra.append(("cache_salt", p["cache_salt"]))
            parent = fn((parent, tuple(toks[b * B:(b + 1) * B]),
                         tuple(extra) if extra else None))
            out.append(parent.hex())
    sys.stdout.write("".join(x + "\n" for x in out))


def cache(B, path):
    seen = set()
    n = tokens = hit = 0
    for p in prompts(path):
        toks = p["token_ids"]
        head = (p.get("cache_salt") or None, p.get("lora_name"),
                p.get("lora_path"))
        key = lambda k: (head, tuple(toks[:k * B]))
        k = 0
        while k < (len(toks) - 1) // B and key(k + 1) in seen:
            k += 1
        for j in range(1, len(toks) // B + 1):
            seen.add(key(j))
        n += 1
        tokens += len(toks)
        hit += k * B
    print(B, n, tokens, hit)


if __name__ == "__main__":
    a = sys.argv
    if len(a) == 5 and a[1] == "sha256":
        sha256(int(a[2]), a[3], a[4])
    elif len(a) == 4 and a[1] == "cache":
        cache(int(a[2]), a[3])
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)
