#!/bin/sh
# kvslot-trace.sh - kvslot plan --trace: a Mooncake-format trace planned
# as the same requests given by --prompts, --arrivals and --output-lens
# (made here by Python from kvslot(1)'s rule: token j of the block with
# hash id h is h * 512 + j, arrival step 1 + floor(timestamp / M)), which
# make crosscheck holds to vLLM's scheduler; --summary against a recount of
# the per-step output; bad traces and options.
. "$KV_TOP/tests/lib.sh"
MC="$VEC/traces/mooncake-conversation.jsonl"
err_has() {  # title pattern: the last command's stderr matches
    if grep -q -- "$2" "$T/.err"; then _report 0 "$1"
    else _report 1 "$1" "stderr: $(head -c 600 "$T/.err")"; fi
}
as_prompts() {  # trace ms-per-step: $T/p.txt, $T/arr, $T/out
    python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = float(sys.argv[2])
with open(sys.argv[3] + "/p.txt", "w") as f:
    for r in rows:
        t = [h * 512 + j for h in r["hash_ids"] for j in range(512)]
        f.write(" ".join(map(str, t[:r["input_length"]])) + "\n")
open(sys.argv[3] + "/arr", "w").write(",".join(str(1 + int(r["timestamp"] // ms)) for r in rows))
open(sys.argv[3] + "/out", "w").write(",".join(str(r["output_length"]) for r in rows))' "$1" "$2" "$T"
}
A="--max-tokens 4096 -B 16 --max-model-len 131072 --num-blocks 9000 --enable-prefix-caching --decode -q -f text"

head -40 "$MC" >"$T/t40.jsonl"
for ms in 10 250; do
    as_prompts "$T/t40.jsonl" $ms
    ok "--trace, $ms ms a step" kvslot plan --trace "$T/t40.jsonl" --ms-per-step $ms $A -o "$T/a$ms.txt"
    ok "--prompts, $ms ms a step" kvslot plan --prompts "$T/p.txt" --arrivals "$(cat "$T/arr")" --output-lens "$(cat "$T/out")" $A -o "$T/b$ms.txt"
    expect_file_eq "--trace = --prompts, --arrivals, --output-lens ($ms ms)" "$T/a$ms.txt" "$T/b$ms.txt"
done
expect_eq 'some prefix hits' "$(grep -c '^num_cached_tokens:.* [1-9]' "$T/a10.txt" | awk '{ print ($1 > 0) }')" 1

# --- --summary: the per-step output's counts -------------------------------
ok '--summary' kvslot plan --trace "$T/t40.jsonl" $A --summary -o "$T/sum.txt"
ok 'the steps, for a recount' kvslot plan --trace "$T/t40.jsonl" $A --fields step,req_ids,num_cached_tokens,preempted,evicted_hashes,free_blocks -o "$T/steps.txt"
expect_eq '--summary = a recount of the steps' "$(cat "$T/sum.txt")" "$(python3 -c '
import sys
seen = set(); hit = steps = pre = ev = 0; low = None; cur = {}
for line in open(sys.argv[1]):
    k, _, v = line.partition(":"); v = v.split(); cur[k] = v
    if k != "free_blocks":
        continue
    steps += 1
    for i, c in zip(cur.get("req_ids", []), cur.get("num_cached_tokens", [])):
        if i not in seen:
            seen.add(i); hit += int(c)
    pre += len(cur.get("preempted", [])); ev += len(cur.get("evicted_hashes", []))
    low = int(v[0]) if low is None else min(low, int(v[0])); cur = {}
print("steps %d prefix_hit_tokens %d preemptions %d evictions %d peak_blocks %d"
      % (steps, hit, pre, ev, 9000 - 1 - low))' "$T/steps.txt")"
expect_eq 'evictions happen at 9000 blocks' "$(awk '{ print ($8 > 0) }' "$T/sum.txt")" 1

# --- bad input ----------------------------------------------------------------
printf '%s\n' '{"timestamp": 100, "input_length": 20, "output_length": 2, "hash_ids": [1]}' >"$T/g"
B="--max-tokens 64 -B 4 --max-model-len 64 -q -f text"
badline() {  # title pattern line
    { cat "$T/g"; printf '%s\n' "$3"; } >"$T/bad.jsonl"
    expect_fail 1 "$1" kvslot plan --trace "$T/bad.jsonl" $B -o "$T/none.txt"
    err_has "$1: names line 2" "line 2"
    err_has "$1: says why" "$2"
    [ ! -e "$T/none.txt" ]; _report $? "$1: no output file"
}
badline 'malformed line' 'malformed JSON' '{"timestamp": 1,'
badline 'output_length 0' 'output_length 0' '{"timestamp": 101, "input_length": 20, "output_length": 0, "hash_ids": [1]}'
badline 'negative hash id' 'out of range' '{"timestamp": 101, "input_length": 20, "output_length": 1, "hash_ids": [-3]}'
badline 'time going back' 'time goes backwards' '{"timestamp": 50, "input_length": 20, "output_length": 1, "hash_ids": [1]}'
badline 'hash_ids too short' 'expected 2' '{"timestamp": 101, "input_length": 600, "output_length": 1, "hash_ids": [1]}'
expect_fail 2 '--trace with --prompts' kvslot plan --trace "$T/g" --prompts "$T/g" $B
expect_fail 2 '--trace with --output-lens' kvslot plan --trace "$T/g" --output-lens 3 $B
expect_fail 2 '--ms-per-step without --trace' kvslot plan --prompt-lens 4 --ms-per-step 5 $B
expect_fail 2 '--summary without --trace' kvslot plan --prompt-lens 4 --summary $B
expect_fail 2 '--summary without --num-blocks' kvslot plan --trace "$T/g" --summary $B
expect_fail 2 '--ms-per-step 0' kvslot plan --trace "$T/g" --ms-per-step 0 $B
expect_fail 1 'no such trace' kvslot plan --trace "$T/nothing.jsonl" $B

done_testing
