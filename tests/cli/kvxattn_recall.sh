#!/bin/sh
# kvxattn_recall.sh - kvxattn recall against kvattn's exact attention: the
# recall of a query token is the share of its softmax mass inside the kept
# blocks, which is exp(LSE(block-sparse) - LSE(dense)) of kvattn run.
. "$KV_TOP/tests/lib.sh"

# max |exp(sparse - dense) - recall| over three text files of equal layout
maxdiff() {
    paste -d' ' "$1" "$2" "$3" | awk '{
        n = NF / 3
        for (i = 1; i <= n; i++) {
            d = exp($(n + i) - $i) - $(2 * n + i); if (d < 0) d = -d
            if (d > m) m = d; c++
        }
    } END { if (c == 0) print "no values"; else if (m < 2e-5) print "close"; else print "differ " m }'
}

check_case() {   # title gen-args estimate-args
    _t=$1; _g=$2; _e=$3
    ok "$_t: gen" kvattn gen $_g -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy"
    ok "$_t: estimate" kvxattn estimate -q "$T/q.npy" -k "$T/k.npy" $_e -o "$T/m.npy"
    ok "$_t: dense attention" kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --causal -f text -o "$T/d.txt" --lse "$T/dl.txt"
    ok "$_t: block-sparse attention" kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --causal --block-mask "$T/m.npy" --block-size 128 -f text -o "$T/s.txt" --lse "$T/sl.txt"
    ok "$_t: recall" kvxattn recall -q "$T/q.npy" -k "$T/k.npy" --mask "$T/m.npy" -f rows -o "$T/r.txt"
    expect_eq "$_t: recall = exp(lse sparse - lse dense)" "$(maxdiff "$T/dl.txt" "$T/sl.txt" "$T/r.txt")" close
}

check_case 'full prefill, GQA 4/2, 1000 tokens, threshold 0.6' \
    '--shape 1,4,1000,64 --kv-heads 2 --pattern mix --seed 3' '--threshold 0.6'
ok 'the mask is sparse' kvxattn recall -q "$T/q.npy" -k "$T/k.npy" --mask "$T/m.npy" -o "$T/rep.txt"
expect_eq 'recall below 1 somewhere' "$(awk '/^recall_min:/ { print ($2 < 0.99) }' "$T/rep.txt")" 1
check_case 'chunked step, 256 queries of 1024 keys' \
    '--shape 1,2,256,64 --kv-len 1024 --pattern local --seed 5' '--threshold 0.7 --stride 16'
check_case 'batch 2, stride 4' \
    '--shape 2,2,640,32 --pattern sink --seed 9' '--threshold 0.5 --stride 4'

# a mask that keeps every causal block: recall 1, sparse = dense
ok 'dense gen' kvattn gen --shape 1,2,512,64 --seed 1 -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy"
ok 'threshold 1 mask' kvxattn estimate -q "$T/q.npy" -k "$T/k.npy" --threshold 1 -o "$T/m1.npy"
ok 'dense' kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --causal -o "$T/d.npy"
ok 'sparse with every block' kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --causal --block-mask "$T/m1.npy" --block-size 128 -o "$T/s.npy"
ok 'kvattn cmp: equal within the sum of two bounds' kvattn cmp "$T/s.npy" "$T/d.npy" \
    --atol "$(kvattn bound --routes 2 -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy")"
ok 'recall of the full mask' kvxattn recall -q "$T/q.npy" -k "$T/k.npy" --mask "$T/m1.npy" -o "$T/r1.txt"
expect_eq 'recall_min line' "$(head -1 "$T/r1.txt")" 'recall_min: 1.000000'
ok 'recall -v' kvxattn recall -q "$T/q.npy" -k "$T/k.npy" --mask "$T/m1.npy" -v -o "$T/r1v.txt"
expect_file_eq 'recall -v: the same report' "$T/r1v.txt" "$T/r1.txt"
expect_eq 'recall -v: timings on stderr' "$(grep -c '^kvxattn: read .* s, recall .* s' "$T/.err")" 1
done_testing
