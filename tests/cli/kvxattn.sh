#!/bin/sh
# kvxattn.sh - kvxattn estimate and recall from the command line: the public
# conformance vectors, formats, dtypes and layouts, options, thread counts.
. "$KV_TOP/tests/lib.sh"
X="$VEC/xattn"
Q="$X/in_peaky_q.npy"; K="$X/in_peaky_k.npy"; Q256="$X/in_peaky_q_last256.npy"
RQ="$X/in_rand_q.npy"; RK="$X/in_rand_k.npy"
SQ="$X/small_q_f32.npy"; SK="$X/small_k_f32.npy"
SMALL="--stride 4 --block-size 32"

# --- the public vectors: default (clean) geometry and compat mode
expect_out 'c01 default' "$(cat "$X/c01_mask.txt")" kvxattn estimate -q "$RQ" -k "$RK" -f text
expect_out 'c05 default' "$(cat "$X/c05_mask.txt")" kvxattn estimate -q "$Q" -k "$K" -f text
expect_out 'c14 default offset Lk-Lq' "$(cat "$X/c14_mask.txt")" kvxattn estimate -q "$Q256" -k "$K" -f text
expect_out 'c14 --q-offset 768' "$(cat "$X/c14_mask.txt")" kvxattn estimate -q "$Q256" -k "$K" --q-offset 768 -f text
expect_out 'c01 --compat-chunk-size 16384' "$(cat "$X/c01_mask.txt")" kvxattn estimate -q "$RQ" -k "$RK" --compat-chunk-size 16384 -f text
expect_out 'c05 --compat-chunk-size 16384' "$(cat "$X/c05_mask.txt")" kvxattn estimate -q "$Q" -k "$K" --compat-chunk-size 16384 -f text
expect_out 'c14 --compat-chunk-size 384' "$(cat "$X/c14_mask.txt")" kvxattn estimate -q "$Q256" -k "$K" --compat-chunk-size 384 -f text
expect_out 'c05 explicit defaults' "$(cat "$X/c05_mask.txt")" kvxattn estimate -q "$Q" -k "$K" --stride 8 --block-size 128 --threshold 0.9 --rule original --select-mode inverse --norm 1 -f text

# block sums of the public vectors within 1e-5 (kvattn cmp is the assertion)
for c in "c01 $RQ $RK" "c05 $Q $K" "c14 $Q256 $K"; do
    set -- $c
    ok "$1 sums" kvxattn estimate -q "$2" -k "$3" --sums "$T/$1s.npy" -o "$T/$1m.npy"
    ok "$1 sums within 1e-5" kvattn cmp "$T/$1s.npy" "$X/$1_sums.npy" --atol 1e-5 --rtol 0 --quiet
    ok "$1 mask equal (npy)" kvattn cmp "$T/$1m.npy" "$X/$1_mask.npy" --atol 0 --rtol 0 --quiet
done
ok 'c14 compat sums' kvxattn estimate -q "$Q256" -k "$K" --compat-chunk-size 384 --sums "$T/c14cs.npy" -o "$T/c14cm.npy"
ok 'c14 compat sums within 1e-5' kvattn cmp "$T/c14cs.npy" "$X/c14_sums.npy" --atol 1e-5 --rtol 0 --quiet

# npy output and sums: the mask and sums streams
ok 'npy mask and --sums' kvxattn estimate -q "$Q" -k "$K" --sums "$T/s1.npy" -o "$T/m1.npy"
expect_eq 'sums file size (2x8x8 f32)' "$(wc -c < "$T/s1.npy" | tr -d ' ')" 640
expect_eq 'mask file size (2x8x8 bool)' "$(wc -c < "$T/m1.npy" | tr -d ' ')" 256
ok 'stdin input' sh -c 'kvxattn estimate -q - -k "$1" -o "$2" < "$3"' sh "$K" "$T/m2.npy" "$Q"
expect_file_eq 'stdin gives the same mask' "$T/m2.npy" "$T/m1.npy"

# bit-identical for any thread count
ok '-j 1' kvxattn estimate -q "$Q" -k "$K" -j 1 --sums "$T/sj1.npy" -o "$T/mj1.npy"
ok '-j 3' kvxattn estimate -q "$Q" -k "$K" -j 3 --sums "$T/sj3.npy" -o "$T/mj3.npy"
expect_file_eq '-j 1 and -j 3 masks equal' "$T/mj1.npy" "$T/mj3.npy"
expect_file_eq '-j 1 and -j 3 sums bit-identical' "$T/sj1.npy" "$T/sj3.npy"

# stats: density per head and overall (c05: 52 of 72 causal blocks)
ok 'stats' kvxattn estimate -q "$Q" -k "$K" -f stats -j 1 -o "$T/st.txt"
expect_eq 'stats density lines' "$(grep -v '^time:' "$T/st.txt")" "shape: 1 2 8 8
density: 0.722222
kept: 52
valid: 72
head 0: density 0.722222 kept 26 valid 36
head 1: density 0.722222 kept 26 valid 36"
ok 'stats -j 3' kvxattn estimate -q "$Q" -k "$K" -f stats -j 3 -o "$T/st3.txt"
expect_file_eq 'stats are the same bytes for -j 1 and -j 3' "$T/st.txt" "$T/st3.txt"
ok 'stats --jobs 2 (the spelling kvmask uses)' kvxattn estimate -q "$Q" -k "$K" -f stats --jobs 2 -o "$T/stj.txt"
expect_file_eq 'stats --jobs 2 = -j 1' "$T/st.txt" "$T/stj.txt"
ok 'stats -v' kvxattn estimate -q "$Q" -k "$K" -f stats -v -o "$T/stv.txt"
expect_eq 'stats -v adds the time split' "$(grep -c '^time: total .* gemm .* softmax .* select ' "$T/stv.txt")" 1
# 8.2 keeps 9 more cells than the intended rule on c05 (spec xattn.md 8.2)
ok 'rule intended' kvxattn estimate -q "$Q" -k "$K" --rule intended -f stats -o "$T/si.txt"
expect_eq 'intended keeps 9 fewer blocks' "$(grep '^kept:' "$T/si.txt")" "kept: 43"

# pgm picture
ok 'pgm' kvxattn estimate -q "$Q" -k "$K" -f pgm -o "$T/m.pgm"
expect_eq 'pgm header' "$(head -c 12 "$T/m.pgm" | tr '\n' ' ')" "P5 8 16 255 "

# FlexAttention BlockMask: a dense causal selection equals kvmask's causal
# BlockMask; recall reads it back
ok 'block c01' kvxattn estimate -q "$RQ" -k "$RK" -f block -o "$T/xb.npy"
ok 'kvmask causal block' kvmask causal -n 1024 -f block --block-size 128 --heads 2 -o "$T/kb.npy"
expect_file_eq 'c01 block = kvmask causal block' "$T/xb.npy" "$T/kb.npy"
ok 'block c01 --text' kvxattn estimate -q "$RQ" -k "$RK" -f block --text -o "$T/xb.txt"
ok 'kvmask causal block --text' kvmask causal -n 1024 -f block --block-size 128 --heads 2 --text -o "$T/kb.txt"
expect_file_eq 'c01 block text = kvmask causal block text' "$T/xb.txt" "$T/kb.txt"
ok 'block chunked, threshold 1' kvxattn estimate -q "$Q256" -k "$K" --threshold 1 -f block -o "$T/xb2.npy"
ok 'kvmask causal 256 x 1024 block' kvmask causal -q 256 -k 1024 -f block --block-size 128 --heads 2 -o "$T/kb2.npy"
expect_file_eq 'chunked block = kvmask causal block' "$T/xb2.npy" "$T/kb2.npy"
ok 'block c05' kvxattn estimate -q "$Q" -k "$K" -f block -o "$T/xb5.npy"
ok 'recall of the BlockMask' kvxattn recall -q "$Q" -k "$K" --mask "$T/xb5.npy" -o "$T/rb.txt"
ok 'recall of the dense mask' kvxattn recall -q "$Q" -k "$K" --mask "$X/c05_mask.npy" -o "$T/rm.txt"
expect_file_eq 'BlockMask and dense mask give the same recall' "$T/rb.txt" "$T/rm.txt"
ok 'recall of kvmask block' kvxattn recall -q "$Q256" -k "$K" --mask "$T/kb2.npy" -o "$T/rk.txt"
expect_eq 'causal BlockMask covers everything' "$(head -1 "$T/rk.txt")" 'recall_min: 1.000000'

# per-head thresholds (0: forced blocks only; 1: every causal block)
printf '0 1\n' > "$T/thr.txt"
expect_out '--thresholds per head' "1 0 0 0 0 0 0 0
1 1 0 0 0 0 0 0
1 0 1 0 0 0 0 0
1 0 0 1 0 0 0 0
1 0 0 0 1 0 0 0
1 0 0 0 0 1 0 0
1 0 0 0 0 0 1 0
1 0 0 0 0 0 0 1

1 0 0 0 0 0 0 0
1 1 0 0 0 0 0 0
1 1 1 0 0 0 0 0
1 1 1 1 0 0 0 0
1 1 1 1 1 0 0 0
1 1 1 1 1 1 0 0
1 1 1 1 1 1 1 0
1 1 1 1 1 1 1 1" kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thr.txt" -f text
printf '0.5 0.5\n0.9 0.9\n0.1 0.2\n' > "$T/table.txt"
expect_out '--thresholds table --layer 1' "$(cat "$X/c05_mask.txt")" kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/table.txt" --layer 1 -f text
ok 'threshold 0 accepted' kvxattn estimate -q "$Q" -k "$K" --threshold 0 -f text
ok 'threshold 1 accepted' kvxattn estimate -q "$Q" -k "$K" --threshold 1 -f text

# keep-sink marks query-block row 0
ok 'keep-sink' kvxattn estimate -q "$Q" -k "$K" --keep-sink -f text -o "$T/ks.txt"
expect_eq 'keep-sink row 0 all kept' "$(head -1 "$T/ks.txt")" "1 1 1 1 1 1 1 1"

# dtypes and layouts: f16/bf16 inputs equal their exact f32 values; thd
ok 'f32 small' kvxattn estimate -q "$SQ" -k "$SK" $SMALL -f text -o "$T/s32.txt"
ok 'f16 small' kvxattn estimate -q "$X/small_q_f16.npy" -k "$X/small_k_f16.npy" $SMALL -f text -o "$T/s16.txt"
expect_file_eq 'f16 input = its f32 values' "$T/s16.txt" "$T/s32.txt"
ok 'bf16 small' kvxattn estimate -q "$X/small_q_bf16.npy" -k "$X/small_k_bf16.npy" $SMALL -f text -o "$T/sb16.txt"
ok 'bf16 values as f32' kvxattn estimate -q "$X/small_q_bf16as32.npy" -k "$X/small_k_bf16as32.npy" $SMALL -f text -o "$T/sb32.txt"
expect_file_eq 'bf16 input = its f32 values' "$T/sb16.txt" "$T/sb32.txt"
ok 'thd layout' kvxattn estimate -q "$X/small_q_thd.npy" -k "$X/small_k_thd.npy" --layout thd $SMALL -f text -o "$T/sthd.txt"
expect_file_eq 'thd = bhsd' "$T/sthd.txt" "$T/s32.txt"
ok 'non-causal, odd lengths, stride 16, slash' kvxattn estimate -q "$SQ" -k "$SK" --no-causal --stride 16 --select-mode slash --keep-recent -f text -o "$T/nc.txt"
expect_eq 'non-causal shape 3 x 3 per head' "$(head -3 "$T/nc.txt" | awk '{print NF}' | tr '\n' ' ')" "3 3 3 "

# recall: a dense causal mask covers everything; the estimate's mask less
ok 'dense causal mask' kvxattn estimate -q "$Q" -k "$K" --threshold 1 -o "$T/dense.npy"
ok 'recall dense' kvxattn recall -q "$Q" -k "$K" --mask "$T/dense.npy" -o "$T/rd.txt"
expect_eq 'recall of a dense mask is 1' "$(grep '^recall_min:' "$T/rd.txt")" "recall_min: 1.000000"
ok 'recall c05 mask' kvxattn recall -q "$Q" -k "$K" --mask "$X/c05_mask.npy" --per-block "$T/pb.npy" -o "$T/rc.txt"
expect_eq 'recall report fields' "$(cut -d: -f1 "$T/rc.txt" | head -5 | tr '\n' ' ')" "recall_min recall_mean density kept valid "
expect_eq 'per-block file size (2x8x8 f32)' "$(wc -c < "$T/pb.npy" | tr -d ' ')" 640
ok 'recall per-token npy' kvxattn recall -q "$Q256" -k "$K" --mask "$X/c14_mask.npy" -f npy -o "$T/rr.npy"
expect_eq 'per-token recall size (2x256 f64)' "$(wc -c < "$T/rr.npy" | tr -d ' ')" 4224

ok '--help' kvxattn estimate --help
ok 'recall --help' kvxattn recall --help
ok '--version' kvxattn --version
done_testing
