#!/bin/sh
# bench-kvslot.sh - kvslot side by side with its peers (make bench).
#
#   map:  1,000,000 tokens over 4,096 requests, block size 16, int32 .npy
#         block table in, int64 .npy slot mapping out; the peer is vLLM's
#         NumPy slot-mapping computation timed in process, kvslot the whole
#         process.  Target: kvslot at least 3x faster.
#   plan: 10,000 requests (prompts 1..512, outputs 1..64 tokens) scheduled
#         to completion, every step's slot mapping written as .npy.
#         Target: under 1 s.
# Each case runs a few times and keeps the best (the machine is shared).
set -eu
: "${KV_TOP:?run through make bench}"
PY=${PY:-python3}
PEER="$KV_TOP/bench/kvslot_peer.py"
D=$(mktemp -d "${TMPDIR:-/tmp}/kvbench.XXXXXX")
trap 'rm -rf "$D"' EXIT

printf '%-34s %12s %12s %9s  %s\n' case peer kvslot ratio target

"$PY" "$PEER" gen "$D" 1000000 4096 16 1
peer=$("$PY" "$PEER" peer "$D" 16 9)
ours=$("$PY" "$PEER" run 9 kvslot map -B 16 --block-table "$D/bt.npy" \
    --scheduled "$(cat "$D/sched.txt")" --computed "$(cat "$D/computed.txt")" \
    --fields slot_mapping -f npy -o "$D/ours{i}.npy")
"$PY" "$PEER" same "$D/ours0.npy" "$D/peer.npy" ||
    { echo "bench-kvslot: map output differs from the NumPy peer" >&2; exit 1; }
awk -v p="$peer" -v o="$ours" 'BEGIN {
    printf "%-34s %11.2fms %11.2fms %8.1fx  >= 3x faster\n",
        "map 1M tokens / 4096 requests", p * 1000, o * 1000, p / o }'

prompts=$(awk 'BEGIN { srand(7); for (i = 0; i < 10000; i++)
    printf "%s%d", i ? "," : "", 1 + int(rand() * 512) }')
outs=$(awk 'BEGIN { srand(8); for (i = 0; i < 10000; i++)
    printf "%s%d", i ? "," : "", 1 + int(rand() * 64) }')
ours=$("$PY" "$PEER" run 3 kvslot plan --prompt-lens "$prompts" \
    --output-lens "$outs" --max-tokens 8192 -B 16 --max-model-len 2048 \
    --decode --fields step,num_tokens,slot_mapping -f npy -o "$D/plan{i}.npy")
awk -v o="$ours" 'BEGIN {
    printf "%-34s %12s %11.2fms %9s  < 1000 ms\n",
        "plan 10000 requests to completion", "-", o * 1000, "-" }'
