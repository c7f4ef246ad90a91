#!/bin/sh
# bench-kvslot-map.sh - kvslot map against vLLM's NumPy slot-mapping
# computation (bench/kvslot_peer.py) on both peers' NumPy: Debian's ($PY)
# and the current release ($PYNEW, see bench/run.sh; skipped without it).
#   1,000,000 tokens over 4,096 requests, block size 16, int32 .npy block
#   table in, int64 .npy slot mapping out; the peer timed in process,
#   kvslot the whole process, best of 9.  Targets: kvslot ahead of both,
#   and (an earlier target) at least 3x faster than Debian's.  A second
#   line per peer times kvslot's library call the way the peer is timed
#   (in memory, best of 9 in one process: bench/slot_call.c, KV_SLOT_CALL),
#   its array checked equal to the peer's.
set -eu
: "${KV_TOP:?run through make bench}"
PY=${PY:-python3}
PYNEW=${PYNEW:-}
PEER="$KV_TOP/bench/kvslot_peer.py"
D=$(mktemp -d "${TMPDIR:-/tmp}/kvbench.XXXXXX")
trap 'rm -rf "$D"' EXIT

printf '%-34s %-14s %12s %12s %9s  %s\n' case numpy peer kvslot ratio target
"$PY" "$PEER" gen "$D" 1000000 4096 16 1
ours=$("$PY" "$PEER" run 9 kvslot map -B 16 --block-table "$D/bt.npy" \
    --scheduled "$(cat "$D/sched.txt")" --computed "$(cat "$D/computed.txt")" \
    --fields slot_mapping -f npy -o "$D/ours{i}.npy")
call=
[ -x "${KV_SLOT_CALL:-}" ] &&
    call=$("$KV_SLOT_CALL" "$D/bt.npy" "$D/sched.txt" "$D/computed.txt" 16 9 "$D/call.npy")
for py in "$PY" ${PYNEW:+"$PYNEW"}; do
    v=$("$py" -c 'import numpy; print(numpy.__version__)')
    peer=$("$py" "$PEER" peer "$D" 16 9)
    "$py" "$PEER" same "$D/ours0.npy" "$D/peer.npy" ||
        { echo "bench-kvslot-map: output differs from the NumPy $v peer" >&2; exit 1; }
    t=ahead; [ "$py" = "$PY" ] && t='ahead, >= 3x faster'
    awk -v p="$peer" -v o="$ours" -v v="$v" -v t="$t" 'BEGIN {
        printf "%-34s %-14s %11.2fms %11.2fms %8.1fx  %s\n",
            "map 1M tokens / 4096 requests", "numpy " v, p * 1000, o * 1000, p / o, t }'
    [ -n "$call" ] || continue
    "$py" "$PEER" same "$D/call.npy" "$D/peer.npy" ||
        { echo "bench-kvslot-map: the library call differs from the NumPy $v peer" >&2; exit 1; }
    awk -v p="$peer" -v o="$call" -v v="$v" 'BEGIN {
        printf "%-34s %-14s %11.2fms %11.2fms %8.1fx  like for like\n",
            "  the same, library call", "numpy " v, p * 1000, o * 1000, p / o }'
done
