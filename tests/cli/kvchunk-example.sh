#!/bin/sh
# kvchunk-example.sh - examples/chunk-vs-prefix runs, small, in a temporary
# directory: four traces (Zipf 0.8 and 1.0, 1 and 8 system prompts, top-5
# in retrieval order), one sweep over cache budgets each, and the
# example's assertion that chunk caching reuses at least as much as prefix
# caching and never more than the oracle.  The plots are left to
# `make examples` (they need gnuplot).
. "$KV_TOP/tests/lib.sh"
EX="$KV_TOP/examples/chunk-vs-prefix"
mkdir -p "$T/cvp"
ok 'chunk-vs-prefix: small traces, sweep and check' make -s \
    --no-print-directory -C "$T/cvp" -f "$EX/Makefile" KV_BIN="$KV_BIN" \
    REQUESTS=3000 DOCS=1000 CAPS='32768 262144 2097152' check
for f in zipf0.8-sys1 zipf0.8-sys8 zipf1.0-sys1 zipf1.0-sys8; do
    expect_eq "$f: 4 policies x 3 budgets" \
        "$(awk -F, 'NR > 1' "$T/cvp/$f.csv" | wc -l | tr -d ' ')" 12
done
done_testing
