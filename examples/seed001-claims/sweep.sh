#!/bin/sh
# sweep.sh - the steady-state RAG workload through `kvchunk sim` in the
# design's flow, over chunk size x document reuse x seed x cost table, each
# run sweeping the pool size; one CSV line per point (sweep.csv).
#
# Workload (`kvchunk sim gen`): a 600-token system prompt (one), 4
# documents a request, a 40-token question, 128 output tokens.  The
# documents come from a hot set of HOT_TOKENS tokens (HOT_TOKENS / chunk
# documents, uniform popularity) except a share F never seen before
# (--fresh F): the workload's document reuse is 1 - F, whatever the trace
# length.  The first WARM requests fill the pool and are not counted
# (--warmup); N are counted.
#
# Cache (`kvchunk sim`): the chunk pool in bytes (--pool-bytes, tokens of
# all layers of Llama-3.1-8B), at most 500 chunks (the design's
# max_chunks), every hit copied and re-rotated, every miss computed then
# copied (--rotate always --miss-copy), chunk keys by content alone
# (--chunk-context isolated), LRU.
#
# Usage: sh sweep.sh KVCHUNK MODEL_CONFIG >sweep.csv (SEEDS, CHUNKS, REUSES,
# POOLS, COSTS, WARM, N, HOT_TOKENS from the environment).
set -eu
KVCHUNK=${1:?usage: sweep.sh KVCHUNK MODEL_CONFIG}
MODEL=${2:?}
SEEDS=${SEEDS:-1 2 3}
CHUNKS=${CHUNKS:-512 1024 4096}
REUSES=${REUSES:-0.5 0.6 0.7 0.8 0.9}
POOLS=${POOLS:-4.3G,8.6G,17.2G,33.2G,66.4G}
COSTS=${COSTS:-design device machine}
WARM=${WARM:-1500}
N=${N:-1500}
HOT_TOKENS=${HOT_TOKENS:-131072}
W=$(mktemp -d "${TMPDIR:-/tmp}/kvsweep.XXXXXX")
trap 'rm -rf "$W"' EXIT
echo "cost,chunk,reuse,seed,pool_bytes,pool_tokens,hit,hit_sys,oracle_hit,ttft_ms,none_ttft_ms,ttft_reduction,ttft_speedup,e2e_speedup"
for c in $CHUNKS; do
    docs=$((HOT_TOKENS / c))
    for r in $REUSES; do
        fresh=$(awk -v r="$r" 'BEGIN { printf "%.4f", 1 - r }')
        for s in $SEEDS; do
            "$KVCHUNK" sim gen --seed "$s" -n $((WARM + N)) --docs "$docs" \
                --topk 4 --zipf 0 --fresh "$fresh" --doc-len "$c" \
                --sys-len 600 --q-len 40 --out-len 128 --rate 0 -o "$W/t"
            for k in $COSTS; do
                # shellcheck disable=SC2046
                "$KVCHUNK" sim $(grep -v '^#' "costs-$k.txt") \
                    --model-config "$MODEL" --pool-bytes "$POOLS" \
                    --max-chunks 500 --rotate always --miss-copy \
                    --chunk-context isolated --warmup "$WARM" \
                    -p none,chunk,oracle --csv -q -j 1 -o "$W/o" "$W/t"
                awk -F, -v k="$k" -v c="$c" -v r="$r" -v s="$s" '
                    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
                    { p = $1 }
                    p == "none" { none = $col["ttft_mean_ms"]; next }
                    p == "oracle" { orc = $col["chunk_hit_rate"]; next }
                    p == "chunk" { n++; cb[n] = $col["capacity_bytes"]; ct[n] = $col["capacity_tokens"]
                        h[n] = $col["chunk_hit_rate"]; hs[n] = $col["chunk_hit_rate_sys"]
                        t[n] = $col["ttft_mean_ms"]; sp[n] = $col["speedup_vs_none"]
                        e2e[n] = $col["e2e_speedup_vs_none"] }
                    END { for (i = 1; i <= n; i++)
                        printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%.6f,%s,%s\n", k, c, r, s,
                            cb[i], ct[i], h[i], hs[i], orc, t[i], none, 1 - t[i] / none, sp[i], e2e[i] }' "$W/o"
            done
        done
    done
done
