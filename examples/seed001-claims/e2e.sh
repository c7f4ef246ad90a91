#!/bin/sh
# e2e.sh - the end-to-end claim against output length: the workload of
# sweep.sh at 80% reuse, 4096-token chunks, the pool of 272K tokens (POOL),
# with outputs of L tokens for each L of LENS, under the design's and the
# device's costs (both decode at 13.4 ms a token); per line the mean and
# standard deviation over SEEDS of the end-to-end and TTFT speedups.
# Usage: sh e2e.sh KVCHUNK MODEL_CONFIG >e2e.dat
set -eu
KVCHUNK=${1:?usage: e2e.sh KVCHUNK MODEL_CONFIG}
MODEL=${2:?}
SEEDS=${SEEDS:-1 2 3}
LENS=${LENS:-1 2 4 8 16 32 64 128 256 512}
POOL=${POOL:-33.2G}
WARM=${WARM:-1500}
N=${N:-1500}
W=$(mktemp -d "${TMPDIR:-/tmp}/kve2e.XXXXXX")
trap 'rm -rf "$W"' EXIT
echo "# out_len design_e2e sd device_e2e sd design_ttft sd device_ttft sd"
for l in $LENS; do
    for s in $SEEDS; do
        "$KVCHUNK" sim gen --seed "$s" -n $((WARM + N)) --docs 32 --topk 4 \
            --zipf 0 --fresh 0.2 --doc-len 4096 --sys-len 600 --q-len 40 \
            --out-len "$l" --rate 0 -o "$W/t"
        for k in design device; do
            # shellcheck disable=SC2046
            "$KVCHUNK" sim $(grep -v '^#' "costs-$k.txt") --model-config "$MODEL" \
                --pool-bytes "$POOL" --max-chunks 500 --rotate always --miss-copy \
                --chunk-context isolated --warmup "$WARM" -p none,chunk --csv -q \
                -j 1 "$W/t" | awk -F, -v k=$k -v l=$l '
                NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                $1 == "chunk" { print l, k, $c["e2e_speedup_vs_none"], $c["speedup_vs_none"] }'
        done
    done
done | awk '
{ n[$1, $2]++; e[$1, $2] += $3; e2[$1, $2] += $3 * $3; t[$1, $2] += $4; t2[$1, $2] += $4 * $4
  if (!($1 in seen)) { seen[$1] = 1; order[++m] = $1 } }
function sd(s, q, k) { v = q / k - (s / k) ^ 2; return sqrt(v > 0 ? v : 0) }
END {
    for (i = 1; i <= m; i++) {
        l = order[i]; a = l SUBSEP "design"; b = l SUBSEP "device"
        printf "%s %.4f %.4f %.4f %.4f %.4f %.4f %.4f %.4f\n", l,
            e[a] / n[a], sd(e[a], e2[a], n[a]), e[b] / n[b], sd(e[b], e2[b], n[b]),
            t[a] / n[a], sd(t[a], t2[a], n[a]), t[b] / n[b], sd(t[b], t2[b], n[b])
    }
}'
