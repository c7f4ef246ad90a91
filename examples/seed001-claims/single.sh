#!/bin/sh
# single.sh - the design's first two claims, as it states them: one prompt
# of K chunks of 4096 tokens (a 1-token system prompt and question, so the
# chunks are what is measured) computed and cached (a miss: compute, store,
# copy and rotate into place), then the same prompt again (every chunk a
# hit: copy and rotate).  The speedup is the miss's TTFT over the hit's,
# both from `kvchunk sim` in the design's flow (--rotate always
# --miss-copy): the miss from a one-request trace, the hit from the
# two-request trace with the first request as warm-up.
# Usage: sh single.sh KVCHUNK MODEL_CONFIG >single.csv
set -eu
KVCHUNK=${1:?usage: single.sh KVCHUNK MODEL_CONFIG}
MODEL=${2:?}
W=$(mktemp -d "${TMPDIR:-/tmp}/kvsingle.XXXXXX")
trap 'rm -rf "$W"' EXIT
echo "cost,chunks,miss_ms,hit_ms,speedup"
for k in 1 3 4 5; do
    ch=$(awk -v k=$k 'BEGIN { for (i = 1; i <= k; i++) printf "%sd%d:4096", (i > 1 ? "," : ""), i }')
    printf '0 - s1:1 %s 1 1\n' "$ch" >"$W/one"
    printf '0 - s1:1 %s 1 1\n1 - s1:1 %s 1 1\n' "$ch" "$ch" >"$W/two"
    for c in design design-fast device machine; do
        # shellcheck disable=SC2046
        set -- $(grep -v '^#' "costs-$c.txt") --model-config "$MODEL" \
            --pool-bytes 33.2G --max-chunks 500 --rotate always --miss-copy \
            --chunk-context isolated -p none,chunk --csv -q
        miss=$("$KVCHUNK" sim "$@" "$W/one" | awk -F, '$1 == "chunk" { print $16 }')
        hit=$("$KVCHUNK" sim "$@" --warmup 1 "$W/two" | awk -F, '$1 == "chunk" { print $16 }')
        awk -v c=$c -v k=$k -v m="$miss" -v h="$hit" 'BEGIN { printf "%s,%d,%s,%s,%.2f\n", c, k, m, h, m / h }'
    done
done
