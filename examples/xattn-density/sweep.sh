#!/bin/sh
# sweep.sh L 'STRIDES' 'THRESHOLDS' PATTERN HEADS DIM OUT - one length of
# the xattn-density experiment; prints one tab-separated line per (stride,
# threshold): L S T density recall_mean recall_min rmse cosine.
set -eu
L=$1; STRIDES=$2; THRESHOLDS=$3; PATTERN=$4; H=$5; D=$6; OUT=$7
W="$OUT/work-$L"
mkdir -p "$W"
kvattn gen --shape "1,$H,$L,$D" --pattern "$PATTERN" --seed "$L" \
    -q "$W/q.npy" -k "$W/k.npy" -v "$W/v.npy"
kvattn run -q "$W/q.npy" -k "$W/k.npy" -v "$W/v.npy" --causal -o "$W/dense.npy"
for S in $STRIDES; do
    for T in $THRESHOLDS; do
        kvxattn estimate -q "$W/q.npy" -k "$W/k.npy" --stride "$S" \
            --threshold "$T" -o "$W/mask.npy"
        kvxattn recall -q "$W/q.npy" -k "$W/k.npy" --mask "$W/mask.npy" \
            -o "$W/recall.txt"
        kvattn run -q "$W/q.npy" -k "$W/k.npy" -v "$W/v.npy" --causal \
            --block-mask "$W/mask.npy" --block-size 128 -o "$W/sparse.npy"
        # exit 1 only says "not allclose": the numbers are what we want
        kvattn cmp "$W/sparse.npy" "$W/dense.npy" --atol 1e-2 \
            >"$W/cmp.txt" || [ $? -eq 1 ]
        awk -v L="$L" -v S="$S" -v T="$T" '
            /^density:/ { den = $2 } /^recall_mean:/ { rm = $2 }
            /^recall_min:/ { rn = $2 } /^rmse:/ { e = $2 }
            /^cosine:/ { c = $2 }
            END { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", L, S, T, den, rm, rn, e, c }' \
            "$W/recall.txt" "$W/cmp.txt"
    done
done
rm -rf "$W"
