#!/bin/sh
# kvxattn_example.sh - examples/xattn-density runs, small: the sweep
# (kvxattn estimate and recall, kvattn run sparse and dense, kvattn cmp) and
# its assertions (density and recall never fall as the threshold rises,
# mean recall at least the threshold minus 0.05).  The plot needs gnuplot
# and is left to `make examples`.
. "$KV_TOP/tests/lib.sh"
EX="$KV_TOP/examples/xattn-density"
ok 'xattn-density: small sweep and its checks' make -s --no-print-directory \
    -C "$EX" KV_BIN="$KV_BIN" OUT="$T/xd" LENGTHS='512 1024' STRIDES='8 16' \
    THRESHOLDS='0.5 0.9 0.99' check
expect_eq 'xattn-density: one row per length, stride and threshold' \
    "$(awk -F'\t' 'NR > 1 && NF == 8' "$T/xd/results.tsv" | wc -l | tr -d ' ')" 12
expect_eq 'xattn-density: threshold 0.99 keeps nearly all the mass' \
    "$(awk -F'\t' '$3 == 0.99 && $5 < 0.99' "$T/xd/results.tsv" | wc -l | tr -d ' ')" 0
done_testing
