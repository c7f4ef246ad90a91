"""kvslot-hash-golden.py - write tests/golden/kvslot/hash/: block hashes
computed by vLLM 0.33.0's own code, for tests/cli/kvslot-hash.sh.

    PY=$(sh scripts/pyenv crosscheck)
    $PY scripts/crosscheck/kvslot-hash-golden.py tests/golden/kvslot/hash

prompts.jsonl (written here, fixed) holds the prompts; for each case below
NAME.txt holds what vLLM computes for them, in kvslot hash's text form (one
hex digest a line, a blank line between prompts), by the same route as
kvslot-hash.py (a vllm Request with get_request_block_hasher, after
init_none_hash with PYTHONHASHSEED set or unset).  The files are written
once and reviewed; 'make golden' never rewrites them.
"""
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "kvslot_hash_check", os.path.join(HERE, "kvslot-hash.py"))
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

PROMPTS = [
    {"token_ids": list(range(1, 10))},
    {"token_ids": list(range(1, 5))},
    {"token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "cache_salt": "tenant-a"},
    {"token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "cache_salt": ""},
    {"token_ids": [255, 256, 65535, 65536, 2147483647, 2147483648,
                   4611686018427387904, 0, 17, 99, 100000, 3]},
    {"token_ids": [7] * 33, "lora_name": "sql-adapter",
     "lora_path": "/adapters/sql"},
    {"token_ids": [7] * 33, "lora_name": "b", "lora_path": "b",
     "cache_salt": "b"},
    {"token_ids": [5, 6, 7, 8, 9, 10, 11, 12], "cache_salt": "\u00e9\u65e5"},
    {"token_ids": []},
    {"token_ids": [128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053,
                   5679, 13, 128009, 1, 2, 3, 4, 5, 6]},
]
# name: (algo, PYTHONHASHSEED or None, block size)
CASES = {
    "sha256-B4": ("sha256", None, 4),
    "sha256-B16": ("sha256", None, 16),
    "sha256-seed0-B4": ("sha256", "0", 4),
    "sha256_cbor-B4": ("sha256_cbor", None, 4),
    "xxhash-seed0-B4": ("xxhash", "0", 4),
    "xxhash_cbor-seed42-B4": ("xxhash_cbor", "42", 4),
}


def main():
    out = sys.argv[1]
    by_name, run, replaced = check.load_vllm()
    print("replaced:", replaced, file=sys.stderr)
    with open(os.path.join(out, "prompts.jsonl"), "w") as f:
        for p in PROMPTS:
            f.write(json.dumps(p) + "\n")
    for name, (algo, seed, B) in CASES.items():
        fn = by_name(algo)
        lines = []
        for i, p in enumerate(PROMPTS):
            q = json.loads(json.dumps(p))      # as a server decodes it
            lora = (q["lora_name"], q["lora_path"]) if "lora_name" in q \
                else None
            hashes = run(fn, seed, B, q["token_ids"], q.get("cache_salt"),
                         lora)
            if i:
                lines.append("")
            lines.extend(h.hex() for h in hashes)
        with open(os.path.join(out, name + ".txt"), "w") as f:
            f.write("".join(x + "\n" for x in lines))
    check.set_seed(None)


if __name__ == "__main__":
    main()
