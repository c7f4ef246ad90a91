#!/bin/sh
# seed001-claims.sh - examples/seed001-claims (the chunk-cache design's
# claims) run with one seed: six claims, each with a verdict; the single-hit
# speedups equal the cost model's arithmetic done here by hand; the
# workload's document reuse is what it was asked for; the plots are PNGs.
. "$KV_TOP/tests/lib.sh"
cp -R "$KV_TOP/examples/seed001-claims" "$T/ex"
cd "$T/ex" || exit 1
rm -f ./*.csv ./*.dat ./*.png claims.md sizing.md
ok 'make (one seed, short traces)' make -s claims.md check KV_BIN="$KV_BIN" \
    MODEL="$KV_TOP/tests/configs/llama-3.1-8b.json" SEEDS=1 WARM=600 N=600
expect_eq 'six claims' "$(grep -c '^| [0-9]' claims.md)" 6
# The design's slow-end costs over 131072 bytes a token: compute 12.207 us a
# token, copy 131072 / 178.957e3 us, rotate K 65536 / 268.435e3 us.  One
# 4096-token chunk, a 1-token system prompt and question: the miss computes
# 4098 tokens and copies and rotates 4097 (system prompt and chunk); the hit
# computes the question and copies and rotates 4097.
want=$(awk 'BEGIN { c = 131072 / 178957 + 65536 / 268435
    for (k = 1; k <= 3; k += 2) {
        miss = (k * 4096 + 2) * 12.207 + (k * 4096 + 1) * c
        hit = 12.207 + (k * 4096 + 1) * c
        printf "%.1fx ", miss / hit } }')
# the first figure of a row's third column (a number before x or -)
first() { awk -F'|' -v r="$1" '$2 == " " r " " { x = $4; sub(/^ */, "", x); sub(/[-x].*/, "", x); print x }' claims.md; }
expect_eq "one hit and three hits: the cost model's $want" "$(first 1)x $(first 2)x " "$want"
# claim 1 holds when its figure is within 8-16x (~12x), claim 2 within 30-50x
verdict() { awk -F'|' -v r="$1" '$2 == " " r " " { print ($5 ~ /^ holds/) }' claims.md; }
expect_eq 'claim 1: the verdict agrees with the figure' "$(verdict 1)" \
    "$(awk -v v="$(first 1)" 'BEGIN { print (v >= 8 && v <= 16) }')"
expect_eq 'claim 2: the verdict agrees with the figure' "$(verdict 2)" \
    "$(awk -v v="$(first 2)" 'BEGIN { print (v >= 30 && v <= 50) }')"
# --fresh F makes the reuse 1 - F: the unlimited cache hits that share
bad=$(awk -F, 'NR > 1 { d = $9 - $3; if (d < -0.04 || d > 0.04) print $2, $3, $4, $9 }' sweep.csv | head -3)
expect_eq 'the oracle hits the reuse asked for (within 0.04)' "$bad" ''
# the pool: 4.3 GiB of 131072-byte tokens, and the design's per-layer blocks
expect_eq 'sizing: 35225 tokens with all layers, 17612 blocks of one' \
    "$(grep -o '17612 blocks\|or 35225' claims.md | tr '\n' ' ')" '17612 blocks or 35225 '
ok 'the plots' make -s hit.png ttft.png pool.png e2e.png KV_BIN="$KV_BIN" \
    MODEL="$KV_TOP/tests/configs/llama-3.1-8b.json" SEEDS=1 WARM=600 N=600
for p in hit ttft pool e2e; do
    ok "$p.png is a PNG" sh -c "od -An -c -N4 $p.png | grep -q 'P   N   G'"
done
done_testing
