#!/bin/sh
# kvchunk-mooncake.sh - kvchunk sim on Mooncake-format traces: the hit an
# unbounded cache gives, against tests/mooncake_ref.py (an independent
# count, standard library Python) on the shipped conversation trace and on
# random ones; hit rates that never fall as the budget grows (prefix, one
# block size); prefix-lfu equal to prefix where nothing is evicted; and
# bad lines, each refused with its number and nothing written.
. "$KV_TOP/tests/lib.sh"
MC="$VEC/traces/mooncake-conversation.jsonl"
REF="$KV_TOP/tests/mooncake_ref.py"
err_has() {  # title pattern: the last command's stderr matches
    if grep -q -- "$2" "$T/.err"; then _report 0 "$1"
    else _report 1 "$1" "stderr: $(head -c 600 "$T/.err")"; fi
}
csv_field() {  # file policy column-name [capacity_tokens]
    awk -F, -v p="$2" -v c="$3" -v cap="${4:-}" '
        NR == 1 { for (i = 1; i <= NF; i++) { if ($i == c) k = i; if ($i == "capacity_tokens") q = i }; next }
        $1 == p && (cap == "" || $q == cap) { print $k }' "$1"
}
hit_prompt() {  # file policy: "hit_tokens prompt_tokens"
    echo "$(csv_field "$1" "$2" hit_tokens) $(csv_field "$1" "$2" prompt_tokens)"
}

# --- the shipped trace: unbounded hit = the reference's -------------------
ok 'conversation trace, unbounded' kvchunk sim -q -B 512 --capacity-tokens inf --csv -o "$T/mc.csv" "$MC"
ref=$(python3 "$REF" prefix 512 "$MC")
expect_eq 'prefix hit at B 512 = reference' "$(hit_prompt "$T/mc.csv" prefix)" "$ref"
expect_eq 'the figure kvchunk(1) states' "$ref" "54063104 144793823"
expect_eq 'prefix-lfu = prefix when nothing is evicted' "$(hit_prompt "$T/mc.csv" prefix-lfu)" "$ref"
expect_eq 'prefix-radix = reference' "$(hit_prompt "$T/mc.csv" prefix-radix)" "$(python3 "$REF" radix "$MC")"
expect_eq 'named format, same rows' "$(kvchunk sim -q -B 512 --capacity-tokens inf --csv --trace-format mooncake "$MC")" "$(cat "$T/mc.csv")"
expect_eq 'requests' "$(csv_field "$T/mc.csv" prefix requests)" 12031
expect_eq 'without -B, the trace'"'"'s own blocks' "$(kvchunk sim -q --capacity-tokens inf --csv "$MC")" "$(cat "$T/mc.csv")"

# --- a sweep: prefix never falls as the budget grows ----------------------
CAPS=10000,100000,1000000,3000000,10000000,100000000,1000000000,inf
ok 'conversation trace, 8 budgets' kvchunk sim -q -B 512 --capacity-tokens $CAPS --csv -o "$T/sweep.csv" "$MC"
monotone() {  # file policy: every budget's hit_tokens >= the one before
    awk -F, -v p="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "hit_tokens") k = i; next }
        $1 == p { if (n++ && $k + 0 < last + 0) bad = 1; last = $k } END { exit bad || n < 2 }' "$1"
}
ok 'prefix: hits never fall as capacity grows' monotone "$T/sweep.csv" prefix
expect_eq 'the sweep ends at the unbounded figure' "$(csv_field "$T/sweep.csv" prefix hit_tokens 1125899906842624)" 54063104
expect_eq 'a sweep row = a run at that budget' \
    "$(csv_field "$T/sweep.csv" prefix-lfu hit_tokens 3000000)" \
    "$(kvchunk sim -q -B 512 --capacity-tokens 3000000 --csv "$MC" | awk -F, '$1 == "prefix-lfu" { print $6 }')"

# --- random traces: the reference at B 512 and B 16, radix ---------------
for s in 1 2 3; do
    python3 "$REF" gen $s 300 "$T/r$s.jsonl"
    for B in 512 16; do
        ok "random $s, B $B" kvchunk sim -q -B $B --capacity-tokens inf --csv -o "$T/r$s-$B.csv" "$T/r$s.jsonl"
        expect_eq "random $s, B $B: prefix = reference" "$(hit_prompt "$T/r$s-$B.csv" prefix)" "$(python3 "$REF" prefix $B "$T/r$s.jsonl")"
        ok "random $s, B $B: sweep" kvchunk sim -q -p prefix -B $B --capacity-tokens 512,1024,3000,8192,20000,80000,400000,inf --csv -o "$T/rs$s-$B.csv" "$T/r$s.jsonl"
        ok "random $s, B $B: hits never fall" monotone "$T/rs$s-$B.csv" prefix
    done
    expect_eq "random $s: radix = reference" "$(hit_prompt "$T/r$s-512.csv" prefix-radix)" "$(python3 "$REF" radix "$T/r$s.jsonl")"
done

# --- the last-token rule --------------------------------------------------
cat >"$T/rule.jsonl" <<'EOF2'
{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 5, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
{"timestamp": 9, "input_length": 1030, "output_length": 1, "hash_ids": [1, 2, 3]}
EOF2
ok 'last-token rule' kvchunk sim -q -p prefix -B 512 --capacity-tokens inf --csv -o "$T/rule.csv" "$T/rule.jsonl"
expect_eq 'a full-prompt hit is one block short; a partial tail is not' "$(csv_field "$T/rule.csv" prefix hit_tokens)" 1536

# --- LRU against LFU, worked by hand ---------------------------------------
# Blocks of 2 tokens, a pool of 3.  Each prompt is 3 tokens: one full block
# (ids 1, 2, 3: contents A, B, C) and a partial one of its own, so it takes
# 2 blocks and can hit 1.  Prompts A A A B C A.  LRU: A hits twice; C
# then takes the least recently freed blocks, A's among them, so the last A
# misses and takes B's: 4 tokens, 2 evictions.  LFU: A has 3 uses and
# outlives B and C, so the last A hits too: 6 tokens, one eviction (B's
# block, taken by C's partial block).
cat >"$T/lfu.jsonl" <<'EOF2'
{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1, 101]}
{"timestamp": 1, "input_length": 3, "output_length": 1, "hash_ids": [1, 102]}
{"timestamp": 2, "input_length": 3, "output_length": 1, "hash_ids": [1, 103]}
{"timestamp": 3, "input_length": 3, "output_length": 1, "hash_ids": [2, 104]}
{"timestamp": 4, "input_length": 3, "output_length": 1, "hash_ids": [3, 105]}
{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": [1, 106]}
EOF2
ok 'LRU and LFU, by hand' kvchunk sim -q -B 2 --trace-block-size 2 --capacity-tokens 6 -p prefix,prefix-lfu --csv -o "$T/lfu.csv" "$T/lfu.jsonl"
expect_eq 'LRU: 4 tokens, 2 evictions' "$(csv_field "$T/lfu.csv" prefix hit_tokens) $(csv_field "$T/lfu.csv" prefix evictions)" "4 2"
expect_eq 'LFU: 6 tokens, 1 eviction' "$(csv_field "$T/lfu.csv" prefix-lfu hit_tokens) $(csv_field "$T/lfu.csv" prefix-lfu evictions)" "6 1"
expect_eq 'without -B, --trace-block-size is the block' \
    "$(kvchunk sim -q --trace-block-size 2 --capacity-tokens 6 -p prefix,prefix-lfu --csv "$T/lfu.jsonl")" "$(cat "$T/lfu.csv")"

# --- bad input --------------------------------------------------------------
printf '%s\n' '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}' >"$T/good1"
bad() {  # title pattern line: a trace of a good line then LINE
    { cat "$T/good1"; printf '%s\n' "$3"; } >"$T/bad.jsonl"
    expect_fail 1 "$1" kvchunk sim -q --capacity-tokens inf -o "$T/out.csv" "$T/bad.jsonl"
    err_has "$1: names line 2" "line 2"
    err_has "$1: says why" "$2"
    [ ! -e "$T/out.csv" ]; _report $? "$1: no output file"
}
bad 'malformed line' 'malformed JSON' '{"timestamp": 1, "input_length": 600,'
bad 'missing field' "missing key 'output_length'" '{"timestamp": 1, "input_length": 600, "hash_ids": [1, 2]}'
bad 'missing hash_ids' "missing key 'hash_ids'" '{"timestamp": 1, "input_length": 600, "output_length": 2}'
bad 'negative timestamp' 'negative time' '{"timestamp": -1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
{ printf '%s\n' '{"timestamp": 10, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
  printf '%s\n' '{"timestamp": 9, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'; } >"$T/back.jsonl"
expect_fail 1 'timestamps going back' kvchunk sim -q --capacity-tokens inf "$T/back.jsonl"
err_has 'timestamps going back: line 2' "line 2, key 'timestamp': time goes backwards"
bad 'hash_ids too short' '1 ids for an input_length of 600 at 512 tokens a block (expected 2)' '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1]}'
bad 'hash_ids too long' 'expected 2' '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2, 3]}'
bad 'hash_ids not integers' 'not an integer' '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, "b"]}'
bad 'zero input_length' 'out of range' '{"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []}'
bad 'a key twice' 'duplicate' '{"timestamp": 1, "timestamp": 2, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
bad 'not an object' 'expected a JSON object' '[1, 2]'
# at another block size the same line is wrong
expect_fail 1 'block size 256: 2 ids are too few for 600 tokens' kvchunk sim -q --trace-block-size 256 --capacity-tokens inf "$T/good1"
err_has 'block size 256: names line 1' "line 1, key 'hash_ids'"
# a 100 MB line is refused before it is read whole
{ cat "$T/good1"; printf '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2], "x": "'
  head -c 100000000 /dev/zero | tr '\0' 'a'; printf '"}\n'; } >"$T/big.jsonl"
expect_fail 1 'a 100 MB line' kvchunk sim -q --capacity-tokens inf -o "$T/out.csv" "$T/big.jsonl"
err_has 'a 100 MB line: line 2' "line 2: longer than 64 MiB"
[ ! -e "$T/out.csv" ]; _report $? 'a 100 MB line: no output file'
rm -f "$T/big.jsonl"
# options and formats
expect_fail 2 'chunk policies need chunks' kvchunk sim -q -p prefix,chunk --capacity-tokens inf "$MC"
err_has 'chunk policies: says which' "policy 'chunk' needs retrieved chunks"
expect_fail 2 'unknown format' kvchunk sim -q --trace-format csv "$MC"
expect_fail 2 'block size 0' kvchunk sim -q --trace-block-size 0 "$MC"
printf '0 - - A:8 2 1\n' >"$T/native.txt"
expect_fail 1 'mooncake named, native given' kvchunk sim -q --trace-format mooncake --capacity-tokens inf "$T/native.txt"
err_has 'mooncake named, native given: line 1' "line 1"
expect_fail 1 'native named, mooncake given' kvchunk sim -q --trace-format native --capacity-tokens inf "$T/good1"
ok 'native traces still read' kvchunk sim -q -B 4 --capacity-tokens 1000 "$T/native.txt"

done_testing
