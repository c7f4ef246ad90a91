#!/bin/sh
# kvslot-hash.sh - kvslot hash: vLLM 0.33.0's block hashes against goldens
# vLLM's own code computed (tests/golden/kvslot/hash, written by
# scripts/crosscheck/kvslot-hash-golden.py), the SHA-256 ones also against
# Python's own pickle and hashlib (tests/kvslot_hash_ref.py; pickle frames
# past 64 KiB included), the input and output forms against each other,
# --cacheability against an exact content match, and bad input.
. "$KV_TOP/tests/lib.sh"
H="$GOLD/kvslot/hash"
REF="$KV_TOP/tests/kvslot_hash_ref.py"
err_has() {  # title pattern: the last command's stderr matches
    if grep -q -- "$2" "$T/.err"; then _report 0 "$1"
    else _report 1 "$1" "stderr: $(head -c 600 "$T/.err")"; fi
}

# --- goldens from vLLM's own code ---------------------------------------
vllm_golden() {  # name args...: kvslot hash ARGS prompts.jsonl = NAME.txt
    _g=$1; shift
    ok "vLLM golden $_g" kvslot hash "$@" -o "$T/$_g.txt" "$H/prompts.jsonl"
    expect_file_eq "vLLM golden $_g: same bytes" "$T/$_g.txt" "$H/$_g.txt"
}
vllm_golden sha256-B4 -B 4
vllm_golden sha256-B16 -B 16
vllm_golden sha256-seed0-B4 -B 4 --hash-seed 0
vllm_golden sha256_cbor-B4 -B 4 --algo sha256_cbor
vllm_golden xxhash-seed0-B4 -B 4 --algo xxhash --hash-seed 0
vllm_golden xxhash_cbor-seed42-B4 -B 4 --algo xxhash_cbor --hash-seed 42

# --- SHA-256 against Python's pickle and hashlib -------------------------
ok 'sha256 B 4 = pickle + hashlib' kvslot hash -B 4 -o "$T/s4.txt" "$H/prompts.jsonl"
python3 "$REF" sha256 4 - "$H/prompts.jsonl" >"$T/r4.txt"
expect_file_eq 'sha256 B 4 = pickle + hashlib: same bytes' "$T/s4.txt" "$T/r4.txt"
python3 -c '
import json, random
r = random.Random(5)
for B in (13100, 13101):
    t = [r.choice([70000 + i, i % 200, 300, 2 ** 33]) for i in range(2 * B + 7)]
    print(json.dumps({"token_ids": t, "cache_salt": "x" * 70000 if B % 2 else "s",
                      "lora_name": "a", "lora_path": "a"}))' >"$T/big.jsonl"
for B in 13100 13101; do
    ok "pickle frames past 64 KiB, B $B" kvslot hash -B $B --hash-seed 9 -o "$T/big$B.txt" "$T/big.jsonl"
    python3 "$REF" sha256 $B 9 "$T/big.jsonl" >"$T/bigr$B.txt"
    expect_file_eq "pickle frames past 64 KiB, B $B: same bytes" "$T/big$B.txt" "$T/bigr$B.txt"
done

# --- input and output forms ----------------------------------------------
printf '1 2 3 4 5 6 7 8 9\n\n1,2,3,4\n' >"$T/p.txt"
printf '[1, 2, 3, 4, 5, 6, 7, 8, 9]\n{"token_ids": []}\n{"prompt_token_ids": [1, 2, 3, 4], "cache_salt": null}\n' >"$T/p.jsonl"
ok 'text prompts' kvslot hash -B 4 -o "$T/pt.txt" "$T/p.txt"
ok 'JSON prompts' kvslot hash -B 4 -o "$T/pj.txt" "$T/p.jsonl"
expect_file_eq 'text and JSON prompts hash alike' "$T/pt.txt" "$T/pj.txt"
expect_eq 'two blocks, an empty prompt, one block' "$(cat "$T/pt.txt")" "$(head -2 "$H/sha256-B4.txt")


$(sed -n 4p "$H/sha256-B4.txt")"
printf '1 2 3 4 5 6 7 8\n' >"$T/one.txt"
ok '--salt' kvslot hash -B 4 --salt tenant-a -o "$T/salt.txt" "$T/one.txt"
expect_eq '--salt = the prompt'"'"'s cache_salt' "$(cat "$T/salt.txt")" "$(sed -n 6,7p "$H/sha256-B4.txt")"
ok 'JSON output' kvslot hash -B 4 -f json -o "$T/out.json" "$H/prompts.jsonl"
expect_eq 'JSON output: the text output'"'"'s hashes' "$(python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sys.stdout.write("\n".join("".join(h + "\n" for h in r["hashes"]) for r in rows))
assert [r["prompt"] for r in rows] == list(range(len(rows)))' "$T/out.json")" "$(cat "$H/sha256-B4.txt")"
ok '--int' kvslot hash -B 4 --int -o "$T/int.txt" "$H/prompts.jsonl"
expect_eq '--int: the last 8 bytes, big-endian' "$(cat "$T/int.txt")" "$(python3 -c '
import sys
for l in open(sys.argv[1]):
    l = l.strip()
    print(int(l[-16:], 16) if l else "")' "$H/sha256-B4.txt")"

# --- cacheability ------------------------------------------------------------
python3 -c '
import json, random
r = random.Random(11)
base = [[r.randrange(50000) for _ in range(r.randrange(300))] for _ in range(4)]
for i in range(150):
    t = r.choice(base)
    t = t[:r.randrange(len(t) + 1)] + [r.randrange(50000) for _ in range(r.randrange(90))]
    p = {"token_ids": t}
    if r.random() < 0.2: p["cache_salt"] = r.choice(["a", "b", ""])
    if r.random() < 0.2: p["lora_name"], p["lora_path"] = r.choice([("x", "/p"), ("y", "/p")])
    print(json.dumps(p))' >"$T/c.jsonl"
ok 'cacheability' kvslot hash --cacheability --block-sizes 1,4,16,64 -o "$T/c.txt" "$T/c.jsonl"
expect_eq 'cacheability = exact content match' "$(awk 'NR > 1 { print $1, $2, $3, $4 }' "$T/c.txt")" \
    "$(for B in 1 4 16 64; do python3 "$REF" cache $B "$T/c.jsonl"; done)"
ok 'cacheability, JSON' kvslot hash --cacheability --block-sizes 1,4,16,64 -f json -o "$T/c.json" "$T/c.jsonl"
expect_eq 'cacheability JSON = text' "$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["block_size"], r["prompts"], r["tokens"], r["hit_tokens"], "%.6f" % r["share"])' "$T/c.json")" "$(sed 1d "$T/c.txt")"

# --- bad input ----------------------------------------------------------------
bad() {  # title pattern line
    printf '1 2 3 4\n%s\n' "$3" >"$T/bad.txt"
    expect_fail 1 "$1" kvslot hash -B 2 -o "$T/nothing.txt" "$T/bad.txt"
    err_has "$1: names line 2" "line 2"
    err_has "$1: says why" "$2"
    [ ! -e "$T/nothing.txt" ]; _report $? "$1: no output file"
}
bad 'a word' "'x' is not an integer" '1 x 3'
bad 'beyond 64 bits' 'does not fit 64 bits' '1 99999999999999999999'
bad 'malformed JSON' 'malformed JSON' '{"token_ids": [1, 2'
bad 'no token_ids' "missing key 'token_ids'" '{"cache_salt": "a"}'
bad 'a float token' 'token 2 is not an integer' '[1, 2.5]'
bad 'lora path without name' "'lora_path' without 'lora_name'" '{"token_ids": [1], "lora_path": "/p"}'
bad 'lora name without path' 'without a path' '{"token_ids": [1, 2], "lora_name": "a"}'
expect_fail 2 'xxhash needs a seed' kvslot hash --algo xxhash "$T/one.txt"
err_has 'xxhash needs a seed: says so' 'PYTHONHASHSEED'
expect_fail 2 'unknown algorithm' kvslot hash --algo md5 "$T/one.txt"
expect_fail 2 'block size 0' kvslot hash -B 0 "$T/one.txt"
expect_fail 2 '--lora-path alone' kvslot hash --lora-path /p "$T/one.txt"
expect_fail 2 '--lora-name alone' kvslot hash --lora-name a "$T/one.txt"
expect_fail 2 '--block-sizes without --cacheability' kvslot hash --block-sizes 4 "$T/one.txt"
expect_fail 1 'no such file' kvslot hash "$T/none.txt"

done_testing
