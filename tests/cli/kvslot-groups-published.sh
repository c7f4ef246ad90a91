#!/bin/sh
# kvslot-groups-published.sh - kvslot groups on the published config.json
# files of tests/configs/published (where each was copied from is in
# tests/configs/SOURCES): every one byte for byte against the golden that
# vLLM 0.33.0's own KV-cache config builder wrote
# (scripts/crosscheck/kvslot-groups.py golden), Nemotron-H's sizes worked
# by hand, and Python's NaN and Infinity, which Nemotron-H's files carry,
# read as json.load reads them.
. "$KV_TOP/tests/lib.sh"
G=kvslot/groups-published
C=$KV_TOP/tests/configs/published

n=0
for f in "$C"/*.json; do
    b=$(basename "$f" .json)
    golden "$b.json: groups equal vLLM's builder" "$G/$b.json" \
        kvslot groups --model-config "$f" -f json
    n=$((n + 1))
done
expect_eq 'every published config has a golden' "$(ls "$GOLD/$G" | wc -l)" "$n"
expect_eq '... and is traced in SOURCES' \
    "$(cd "$C" && for f in *.json; do grep -c "^file: published/$f\$" ../SOURCES; done | sort -u)" 1

# --- Nemotron-H 56B by hand ----------------------------------------------
# 118 layers: 54 Mamba2 (M), 10 attention (*), 54 MLP (-, no cache).
# Mamba state: conv (4 - 1) x (256 x 64 + 2 x 8 x 256) bf16 = 122880 bytes,
# SSM 256 x 64 x 256 float32 = 16777216; 16900096 in all.  Attention
# 2 x 8 x 128 x 2 = 4096 bytes a token, so the block is
# 16 x ceil(16900096 / (16 x 4096)) = 4128 tokens and the Mamba page is
# padded to 4128 x 4096 = 16908288; 54 states in groups of the 10
# attention layers' size: ceil(54 / 10) = 6 groups.
ok 'nemotron-h-56b: text' kvslot groups --model-config "$C/nemotron-h-56b-base-8k.json"
expect_eq '... 64 caches' "$(sed -n 's/^num_caches: //p' "$T/.out")" 64
expect_eq '... the attention block is 4128 tokens' "$(sed -n 's/^block_size: //p' "$T/.out")" 4128
expect_eq '... the Mamba page is padded to 16908288' \
    "$(sed -n 's/^mamba_page_size_padded: //p' "$T/.out")" 16908288
expect_eq '... six Mamba groups and one attention group' \
    "$(grep -c '^group .*: mamba' "$T/.out") $(grep -c '^group .*: full' "$T/.out")" '6 1'

# --- Gemma 3 by hand: sizes the file leaves to Gemma3TextConfig ----------
# Both files give no head_dim (256) and no layer pattern (every 6th layer
# full); the 4B's gives no heads either: the class's 8 query and 4 KV
# heads.  A page of 16 tokens: 16 x 2 x KV x 256 x 2 bytes.
ok 'gemma-3-4b-it: text' kvslot groups --model-config "$C/gemma-3-4b-it.json"
expect_eq '... 34 caches of 65536-byte pages (4 KV heads of 256)' \
    "$(sed -n 's/^num_caches: //p' "$T/.out") $(grep -c 'page_bytes=65536 ' "$T/.out")" '34 7'
expect_eq '... the full layers are every 6th' \
    "$(sed -n 's/^group .*: full .*layers=//p' "$T/.out")" '5,11,17,23,29'
ok 'gemma-3-12b-it: text' kvslot groups --model-config "$C/gemma-3-12b-it.json"
expect_eq '... 48 caches of 131072-byte pages (8 KV heads of 256)' \
    "$(sed -n 's/^num_caches: //p' "$T/.out") $(grep -c 'page_bytes=131072 ' "$T/.out")" '48 6'
expect_eq '... the full layers are every 6th' \
    "$(sed -n 's/^group .*: full .*layers=//p' "$T/.out")" '5,11,17,23,29,35,41,47'

# A config without num_key_value_heads takes its class's: a number of its
# own (Gemma 3's 4, Mistral's 8), or the query heads (Llama's), or none
# (Nemotron's None, which vLLM's nemotron.py cannot take: refused).
kvh() {   # model_type: the page bytes of 16 tokens of head_dim 64, 16 heads
    printf '{"model_type": "%s", "num_hidden_layers": 2, "num_attention_heads": 16, "hidden_size": 1024, "head_dim": 64, "torch_dtype": "bfloat16"}\n' "$1" >"$T/kvh.json"
    kvslot groups --model-config "$T/kvh.json"
}
for t in 'gemma3_text 16384' 'mistral 32768' 'llama 65536'; do
    set -- $t
    ok "$1 without KV heads" kvh "$1"
    expect_eq "... pages of $2 bytes" "$(grep -o 'page_bytes=[0-9]*' "$T/.out" | sort -u)" "page_bytes=$2"
done
expect_fail 1 'nemotron without KV heads' kvh nemotron
grep -q "no 'num_key_value_heads'" "$T/.err"
_report $? '... refused naming the key'

# --- Python's non-finite words ------------------------------------------
grep -q 'Infinity' "$C/nemotron-h-56b-base-8k.json"
_report $? 'the published Nemotron-H file carries Infinity (time_step_limit)'
sed 's/"time_step_limit": \[/"time_step_limit": [NaN, -Infinity, /' \
    "$C/nemotron-h-56b-base-8k.json" >"$T/nan.json"
golden 'NaN and -Infinity in a key kvslot does not read' \
    "$G/nemotron-h-56b-base-8k.json" kvslot groups --model-config "$T/nan.json" -f json
sed 's/"sliding_window": 128/"sliding_window": Infinity/' \
    "$KV_TOP/tests/configs/gpt-oss-20b.json" >"$T/inf.json"
expect_fail 1 'Infinity where kvslot reads a number' \
    kvslot groups --model-config "$T/inf.json"
grep -q "'sliding_window': expected an integer" "$T/.err"
_report $? '... refused naming the key'
sed 's/"sliding_window": 128/"sliding_window": Infinityx/' \
    "$KV_TOP/tests/configs/gpt-oss-20b.json" >"$T/word.json"
expect_fail 1 'a longer word is not JSON' \
    kvslot groups --model-config "$T/word.json"
grep -q 'line [0-9]*, column [0-9]*' "$T/.err"
_report $? '... refused with its place'

done_testing
