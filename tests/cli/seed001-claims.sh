#!/bin/sh
# seed001-claims.sh - examples/seed001-claims run small: the table has every
# claim, the single-hit speedup equals the cost model's own arithmetic
# (computed here by hand), and every verdict agrees with its figure and the
# claimed range.
. "$KV_TOP/tests/lib.sh"
cp -R "$KV_TOP/examples/seed001-claims" "$T/ex"
cd "$T/ex" || exit 1
rm -f *.trace *.csv *.dat *.png claims.txt
ok 'make claims.txt (300 requests)' make -s claims.txt check KV_BIN="$KV_BIN" REQUESTS=300
expect_eq 'five claims, three again with the larger pool' \
    "$(grep -c -E '(holds|does not hold|not modelled)' claims.txt)" 8
# one 4096-token chunk: a miss computes 4098 tokens at 14.65 us; a hit
# computes the 1-token question and copies 4097 tokens of 128 KiB at
# 179 GB/s (the system prompt is a hit too)
want=$(awk 'BEGIN { miss = 4098 * 14.65e-3; hit = 14.65e-3 + 4097 * 131072 / 179e9 * 1e3
    printf "%.1fx", miss / hit }')
col() { awk -v r="$1" '$0 ~ r { split($0, f, /  +/); print f[3]; exit }' claims.txt; }
expect_eq "one chunk hit: the cost model's $want" "$(col '^one chunk hit')" "$want"
want4=$(awk 'BEGIN { miss = (4 * 4096 + 2) * 14.65e-3
    hit = 14.65e-3 + (4 * 4096 + 1) * 131072 / 179e9 * 1e3; printf "%.1fx", miss / hit }')
expect_eq "four hits: the cost model's $want4, no more than one" "$(col '^4 chunk hits')" "$want4"
# every verdict from its figure: a-b% against the claim's range
bad=$(awk '/% *[0-9]+-[0-9]+%/ {
    n = split($0, f, /  +/); seed = f[2]; sim = f[3]; v = f[4]
    split(seed, s, /[-%]/); split(sim, m, /[-%]/)
    inside = m[1] >= s[1] && m[2] <= s[2]
    if (inside != (v == "holds")) print }' claims.txt)
expect_eq 'every range verdict agrees with its figures' "$bad" ''
ok 'the picture' make -s ttft.png KV_BIN="$KV_BIN" REQUESTS=300
ok 'is a PNG' sh -c "od -An -c -N4 ttft.png | grep -q 'P   N   G'"
done_testing
