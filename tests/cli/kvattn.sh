#!/bin/sh
# kvattn.sh - kvattn run/merge/cmp/gen against float64 numpy references
# (tests/vectors/kvattn, made by make-vectors.py there), route
# equivalences, goldens, and bad input.
. "$KV_TOP/tests/lib.sh"
V="$VEC/kvattn"
status() {   # N title cmd...: exit status exactly N (stdout may be non-empty)
    _want=$1; _t=$2; shift 2
    "$@" >"$T/.out" 2>"$T/.err"; _st=$?
    if [ "$_st" = "$_want" ]; then _report 0 "$_t"
    else _report 1 "$_t" "exit $_st, expected $_want: $(head -c 600 "$T/.err")"; fi
}
err_has() {  # title pattern: the last command's stderr matches
    if grep -q -- "$2" "$T/.err"; then _report 0 "$1"
    else _report 1 "$1" "stderr: $(head -c 600 "$T/.err")"; fi
}
out_has() {  # title pattern: the last command's stdout matches
    if grep -q -- "$2" "$T/.out"; then _report 0 "$1"
    else _report 1 "$1" "stdout: $(head -c 600 "$T/.out")"; fi
}
close() {   # title got ref [cmp options]: kvattn cmp must say close
    _t=$1; shift
    ok "$_t" kvattn cmp --atol 1e-5 --rtol 1e-5 "$@"
}

# --- conformance against the float64 reference
ok 'run causal (GQA 2, Lq 37 < Lk 53)' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --causal -o "$T/o.npy" --lse "$T/l.npy"
close 'causal output = reference' "$T/o.npy" "$V/ref_causal_out.npy"
close 'causal lse = reference' "$T/l.npy" "$V/ref_causal_lse.npy"
ok 'run window 5' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --window 5 -o "$T/w.npy"
close 'window output = reference' "$T/w.npy" "$V/ref_window5_out.npy"
ok 'run bool mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$V/mask_bool.npy" -o "$T/m.npy" --lse "$T/ml.npy"
close 'bool mask (1 = masked) = reference' "$T/m.npy" "$V/ref_mask_out.npy"
close 'bool mask lse = reference' "$T/ml.npy" "$V/ref_mask_lse.npy"
ok 'run keep mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$V/mask_keep_u8.npy" --mask-keep -o "$T/mk.npy"
close 'u8 keep mask with --mask-keep = reference' "$T/mk.npy" "$V/ref_mask_out.npy"
ok 'run additive mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$V/mask_add.npy" -o "$T/ma.npy"
close 'additive f32 mask [Hq, Lq, Lk] = reference' "$T/ma.npy" "$V/ref_add_out.npy"
ok 'run block mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --causal --block-mask "$V/block_mask.npy" --block-size 16 -o "$T/b.npy"
close 'block mask + causal inside kept blocks = reference' "$T/b.npy" "$V/ref_block_out.npy"
ok 'run thd varlen' kvattn run --layout thd -q "$V/thd_q.npy" -k "$V/thd_k.npy" -v "$V/thd_v.npy" --q-lens 5,1,12 --kv-lens 9,1,20 --causal -o "$T/t.npy"
close 'thd varlen causal = per-request reference' "$T/t.npy" "$V/ref_thd_out.npy"
ok 'run paged decode' kvattn run --layout thd -q "$V/decode_q.npy" --kv-cache "$V/cache.npy" --block-table "$V/block_table.txt" --seq-lens 10,7 --causal -o "$T/p.npy" --lse "$T/pl.npy"
close 'paged decode = gathered reference' "$T/p.npy" "$V/ref_paged_out.npy"
close 'paged decode lse = reference' "$T/pl.npy" "$V/ref_paged_lse.npy"

# --- spec C.4: two parts merged by LSE
ok 'C.4 part {0,1}' kvattn run -q "$V/c4_q.npy" -k "$V/c4_k01.npy" -v "$V/c4_v01.npy" --scale 1 -o "$T/c4a.npy" --lse "$T/c4al.npy"
ok 'C.4 part {2,3}' kvattn run -q "$V/c4_q.npy" -k "$V/c4_k23.npy" -v "$V/c4_v23.npy" --scale 1 -o "$T/c4b.npy" --lse "$T/c4bl.npy"
golden 'C.4 part {0,1} as text' kvattn/c4-part01.txt kvattn run -q "$V/c4_q.npy" -k "$V/c4_k01.npy" -v "$V/c4_v01.npy" --scale 1 -f text
ok 'merge' kvattn merge "$T/c4a.npy" "$T/c4al.npy" "$T/c4b.npy" "$T/c4bl.npy" -o "$T/c4.npy" --lse-out "$T/c4l.npy"
ok 'C.4 merged out [1.416582, 1.777234]' kvattn cmp --atol 1e-6 --rtol 0 "$T/c4.npy" "$V/c4_ref_out.npy"
ok 'C.4 merged lse 2.369279' kvattn cmp --atol 1e-6 --rtol 0 "$T/c4l.npy" "$V/c4_ref_lse.npy"
golden 'merged C.4 as text' kvattn/c4-merged.txt kvattn merge "$T/c4a.npy" "$T/c4al.npy" "$T/c4b.npy" "$T/c4bl.npy" -f text
# base-2 LSE (FlashInfer): 0.701413 / ln 2 and 2.160224 / ln 2
expect_out 'C.4 part {0,1} lse in base 2' '1.0119256' kvattn run -q "$V/c4_q.npy" -k "$V/c4_k01.npy" -v "$V/c4_v01.npy" --scale 1 -o "$T/c4a2.npy" --lse - --lse-base 2 -f text
ok 'C.4 part {2,3} lse in base 2' kvattn run -q "$V/c4_q.npy" -k "$V/c4_k23.npy" -v "$V/c4_v23.npy" --scale 1 -o "$T/c4b2.npy" --lse "$T/c4bl2.npy" --lse-base 2
ok 'C.4 part {0,1} lse in base 2 (file)' kvattn run -q "$V/c4_q.npy" -k "$V/c4_k01.npy" -v "$V/c4_v01.npy" --scale 1 -o "$T/c4a2.npy" --lse "$T/c4al2.npy" --lse-base 2
ok 'merge base-2 parts' kvattn merge --lse-base 2 "$T/c4a2.npy" "$T/c4al2.npy" "$T/c4b2.npy" "$T/c4bl2.npy" -o "$T/c42.npy" --lse-out "$T/c4l2.txt" -f npy
ok 'merged out the same as in base e' kvattn cmp --atol 1e-6 --rtol 0 "$T/c42.npy" "$V/c4_ref_out.npy"
ok 'merged lse in base 2 (2.369279 / ln 2)' kvattn merge --lse-base 2 "$T/c4a2.npy" "$T/c4al2.npy" "$T/c4b2.npy" "$T/c4bl2.npy" -o "$T/c42b.npy" --lse-out "$T/c4l2.txt" -f text
ok 'merged lse text is 3.41814' grep -q '^3.41814' "$T/c4l2.txt"

# --- routes and numerics agree
ok 'run -j 1' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --causal -j 1 -o "$T/j1.npy"
ok 'run -j 3 with small tiles' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --causal -j 3 -o "$T/j3.npy"
expect_file_eq 'output bit-identical for -j 1 and -j 3' "$T/j1.npy" "$T/j3.npy"
expect_file_eq 'output bit-identical for -j 1 and all cores' "$T/j1.npy" "$T/o.npy"
ok 'run --scalar' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --causal --scalar -o "$T/sc.npy"
close 'plain scalar path = fast path' "$T/sc.npy" "$T/o.npy"
ok 'run --out-dtype bf16' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --causal --out-dtype bf16 -o "$T/obf.npy"
ok 'bf16 output within bf16 rounding' kvattn cmp --atol 1e-2 --rtol 1e-2 "$T/obf.npy" "$V/ref_causal_out.npy"
status 1 'bf16 output not within 1e-5' kvattn cmp --atol 1e-5 --rtol 1e-5 "$T/obf.npy" "$V/ref_causal_out.npy"
# kvmask's causal tensor drives the same attention as --causal
if [ -x "$KV_BIN/kvmask" ]; then
    ok 'kvmask causal -q 37 -k 53' kvmask causal -q 37 -k 53 -f npy -o "$T/kc.npy"
    ok 'run --mask (kvmask causal)' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/kc.npy" -o "$T/kco.npy"
    close 'kvmask causal tensor = implicit --causal' "$T/kco.npy" "$T/o.npy"
    ok 'kvmask causal --keep' kvmask causal -q 37 -k 53 --keep -f npy -o "$T/kk.npy"
    ok 'run --mask --mask-keep' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/kk.npy" --mask-keep -o "$T/kko.npy"
    close 'keep-convention kvmask tensor = reference' "$T/kko.npy" "$V/ref_causal_out.npy"
    ok 'kvmask causal f32 additive' kvmask causal -q 37 -k 53 --dtype f32 -f npy -o "$T/kf.npy"
    ok 'run with the additive mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/kf.npy" -o "$T/kfo.npy"
    close 'additive -inf kvmask tensor = reference' "$T/kfo.npy" "$V/ref_causal_out.npy"
    ok 'kvmask causal bf16 --fill min' kvmask causal -q 37 -k 53 --dtype bf16 --fill min -f npy -o "$T/kb.npy"
    ok 'run with the bf16 finite-min mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/kb.npy" -o "$T/kbo.npy"
    close 'finite min fill weighs nothing either' "$T/kbo.npy" "$V/ref_causal_out.npy"
    ok 'kvmask window 5, batch and heads' kvmask window -w 5 -q 37 -k 53 --batch 2 --heads 4 -f npy -o "$T/kw.npy"
    ok 'run with the [B, H, Lq, Lk] window mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/kw.npy" -o "$T/kwo.npy"
    close 'kvmask window tensor = --window reference' "$T/kwo.npy" "$V/ref_window5_out.npy"
    # float masks in other conventions: keep (1.0 = attend), Ascend's
    # 1.0 = masked in bf16, -0.0 / -10000 (310P), finfo(f32).min fill
    ok 'kvmask causal --keep f32' kvmask causal -q 37 -k 53 --keep --dtype f32 -f npy -o "$T/kkf.npy"
    ok 'run --mask-keep with a float keep mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/kkf.npy" --mask-keep -o "$T/kkfo.npy"
    close 'float keep mask (1.0 = attend) = reference' "$T/kkfo.npy" "$V/ref_causal_out.npy"
    ok 'kvmask causal bf16 --fill 1' kvmask causal -q 37 -k 53 --dtype bf16 --fill 1 -f npy -o "$T/k1.npy"
    ok 'run --mask-binary with the bf16 1.0 mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/k1.npy" --mask-binary -o "$T/k1o.npy"
    close 'bf16 1.0 = masked with --mask-binary = reference' "$T/k1o.npy" "$V/ref_causal_out.npy"
    ok 'run without --mask-binary: 1.0 is added' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/k1.npy" -o "$T/k1a.npy"
    err_has 'warns that a 0/1 float mask is added' 'mask-binary'
    status 1 'the added 0/1 mask is not the causal result' kvattn cmp --atol 1e-3 "$T/k1a.npy" "$V/ref_causal_out.npy"
    ok 'kvmask causal f16 --fill -10000' kvmask causal -q 37 -k 53 --dtype f16 --fill -10000 -f npy -o "$T/k4.npy"
    ok 'run --mask-binary with -10000 / 0' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/k4.npy" --mask-binary -o "$T/k4o.npy"
    close 'f16 -10000 binary = reference' "$T/k4o.npy" "$V/ref_causal_out.npy"
    ok 'kvmask causal f32 --fill min' kvmask causal -q 37 -k 53 --dtype f32 --fill min -f npy -o "$T/kmin.npy"
    ok 'run with finfo(f32).min added' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/kmin.npy" -o "$T/kmino.npy"
    close 'f32 min fill = reference' "$T/kmino.npy" "$V/ref_causal_out.npy"
fi

# kvslot's metadata drives the paged run: its block table (.npy) and seq_lens
if [ -x "$KV_BIN/kvslot" ]; then
    ok 'kvslot map block table' kvslot map -B 4 --block-table "$V/block_table.txt" --scheduled 1,1 --computed 9,6 --fields block_table -f npy -o "$T/kbt.npy"
    ok 'kvslot map seq_lens' kvslot map -B 4 --block-table "$V/block_table.txt" --scheduled 1,1 --computed 9,6 --fields seq_lens -f text -o "$T/ksl.txt"
    SL=$(sed 's/^seq_lens: //; s/ /,/g' "$T/ksl.txt")
    ok 'run on kvslot metadata' kvattn run --layout thd -q "$V/decode_q.npy" --kv-cache "$V/cache.npy" --block-table "$T/kbt.npy" --seq-lens "$SL" -o "$T/ks.npy"
    close 'kvslot-driven paged decode = reference' "$T/ks.npy" "$V/ref_paged_out.npy"
fi

# kvmask's packed varlen mask drives a thd run: with the lengths, or alone
# (one packed "request" of all tokens, the mask keeping requests apart)
if [ -x "$KV_BIN/kvmask" ]; then
    ok 'kvmask varlen' kvmask varlen --q-lens 5,1,12 --kv-lens 9,1,20 -f npy -o "$T/vm.npy"
    ok 'thd run with lengths and the varlen mask' kvattn run --layout thd -q "$V/thd_q.npy" -k "$V/thd_k.npy" -v "$V/thd_v.npy" --q-lens 5,1,12 --kv-lens 9,1,20 --mask "$T/vm.npy" -o "$T/vm1.npy"
    close 'varlen mask = per-request reference' "$T/vm1.npy" "$V/ref_thd_out.npy"
    ok 'thd run with the varlen mask alone' kvattn run --layout thd -q "$V/thd_q.npy" -k "$V/thd_k.npy" -v "$V/thd_v.npy" --mask "$T/vm.npy" -o "$T/vm2.npy"
    close 'the mask alone = per-request reference' "$T/vm2.npy" "$V/ref_thd_out.npy"
fi

# --- NaN propagates to its row, empty rows are 0 / -inf
ok 'run with a NaN query' kvattn run -q "$V/q_nan.npy" -k "$V/k.npy" -v "$V/v.npy" --causal -o "$T/nan.npy"
status 1 'NaN row differs from the reference' kvattn cmp --atol 1e-5 "$T/nan.npy" "$V/ref_causal_out.npy"
out_has 'cmp reports the 16 NaN of that row' '^nan: 16 0$'
out_has 'and only them' '^mismatched: 16 of 4736'

ok 'empty request (kv 0) runs' kvattn run --layout thd -q "$V/thd_q.npy" -k "$V/thd_k.npy" -v "$V/thd_v.npy" --q-lens 5,1,12 --kv-lens 9,0,21 --causal -o "$T/e.npy" --lse "$T/el.npy" -f text
ok 'its row has lse -inf' grep -q -- '^-inf -inf -inf -inf$' "$T/el.npy"

# --- cmp
expect_out 'cmp identical' "shape: (2, 4, 37, 16)
max_abs: 0
max_rel: 0
rmse: 0
cosine: 1
worst: 0 (0, 0, 0, 0) $(kvattn cmp "$T/o.npy" "$T/o.npy" | sed -n 's/^worst: 0 (0, 0, 0, 0) //p')
mismatched: 0 of 4736 (atol 1e-08 rtol 1e-05)" kvattn cmp "$T/o.npy" "$T/o.npy"
status 1 'cmp different tensors exits 1' kvattn cmp "$T/w.npy" "$T/o.npy"
ok 'cmp --quiet close' kvattn cmp --quiet --atol 1e-5 "$T/o.npy" "$V/ref_causal_out.npy"
expect_fail 2 'cmp shape mismatch exits 2' kvattn cmp "$T/o.npy" "$V/k.npy"
err_has 'shape message names both shapes' '(2, 4, 37, 16) and (2, 2, 53, 16)' 
ok 'cmp --mass of a map with itself' kvattn cmp --mass "$V/mask_keep_u8.npy" "$V/mask_keep_u8.npy"
expect_fail 2 'cmp --mass refuses negative values' kvattn cmp --mass "$T/o.npy" "$T/o.npy"

# --- gen
golden 'gen rope text' kvattn/gen-rope.txt kvattn gen --shape 1,2,3,4 --pattern rope --seed 7 -f text
ok 'gen files' kvattn gen --shape 1,4,64,32 --kv-heads 2 --seed 1 -q "$T/gq.npy" -k "$T/gk.npy" -v "$T/gv.npy"
ok 'gen again' kvattn gen --shape 1,4,64,32 --kv-heads 2 --seed 1 -j 1 -q "$T/gq2.npy" -k "$T/gk2.npy" -v "$T/gv2.npy"
expect_file_eq 'gen is deterministic for any -j' "$T/gq.npy" "$T/gq2.npy"
ok 'gen bf16 thd' kvattn gen --shape 2,4,16,8 --kv-heads 1 --dtype bf16 --layout thd -q "$T/bq.npy" -k "$T/bk.npy" -v "$T/bv.npy"
ok 'run on bf16 thd input' kvattn run --layout thd -q "$T/bq.npy" -k "$T/bk.npy" -v "$T/bv.npy" --q-lens 16,16 --causal -o "$T/bo.npy"
# bf16 Q, K, V: the bf16 tiles where the CPU has them (P rounded, or not)
# against the scalar f32 route, within twice the bound of bound
ok 'gen bf16 prefill' kvattn gen --shape 1,4,150,32 --kv-heads 2 --dtype bf16 --seed 3 -q "$T/tq.npy" -k "$T/tk.npy" -v "$T/tv.npy"
ok 'run bf16 causal' kvattn run -q "$T/tq.npy" -k "$T/tk.npy" -v "$T/tv.npy" --causal --out-dtype f32 --tile-k 64 -o "$T/to1.npy"
ok 'run bf16 causal --no-p-round' kvattn run -q "$T/tq.npy" -k "$T/tk.npy" -v "$T/tv.npy" --causal --out-dtype f32 --no-p-round -o "$T/to2.npy"
ok 'run bf16 causal --scalar' kvattn run -q "$T/tq.npy" -k "$T/tk.npy" -v "$T/tv.npy" --causal --out-dtype f32 --scalar -o "$T/to0.npy"
TB=$(kvattn bound -q "$T/tq.npy" -k "$T/tk.npy" -v "$T/tv.npy" --routes 2)
TBN=$(kvattn bound -q "$T/tq.npy" -k "$T/tk.npy" -v "$T/tv.npy" --routes 2 --no-p-round)
ok "bf16 tiles within twice the bound ($TB) of the scalar route" kvattn cmp --atol "$TB" --rtol 0 "$T/to1.npy" "$T/to0.npy"
ok "--no-p-round within twice its bound ($TBN)" kvattn cmp --atol "$TBN" --rtol 0 "$T/to2.npy" "$T/to0.npy"

# --- gen --toy: kvchunk's toy projection (token ids at positions, RoPE on Q and K)
printf '5 6 7 8 9 10 11\n' >"$T/tok.txt"
ok 'gen --toy at position 0' kvattn gen --toy --tokens "$T/tok.txt" --shape 1,4,7,16 --kv-heads 2 -q "$T/y0q.npy" -k "$T/y0k.npy" -v "$T/y0v.npy"
ok 'gen --toy at position 100' kvattn gen --toy --tokens "$T/tok.txt" --pos 100 --shape 1,4,7,16 --kv-heads 2 -q "$T/y1q.npy" -k "$T/y1k.npy" -v "$T/y1v.npy"
ok 'toy V does not depend on the position' kvattn cmp --atol 0 --rtol 0 "$T/y1v.npy" "$T/y0v.npy"
status 1 'toy K does' kvattn cmp "$T/y1k.npy" "$T/y0k.npy"
ok 'attention at 0' kvattn run -q "$T/y0q.npy" -k "$T/y0k.npy" -v "$T/y0v.npy" --causal -o "$T/y0o.npy"
ok 'attention at 100' kvattn run -q "$T/y1q.npy" -k "$T/y1k.npy" -v "$T/y1v.npy" --causal -o "$T/y1o.npy"
close 'RoPE: shifting every position leaves attention unchanged' "$T/y1o.npy" "$T/y0o.npy"
if [ -x "$KV_BIN/kvchunk" ]; then
    ok 'gen --toy --kv' kvattn gen --toy --tokens "$T/tok.txt" --shape 1,2,7,16 --layers 2 --layer 1 --kv "$T/ykv.npy"
    ok 'kvchunk toy' kvchunk toy --tokens "$T/tok.txt" --shape 2,2,16 --dtype f32 -o "$T/ckv.npy"
    expect_file_eq 'the same KV as kvchunk toy' "$T/ykv.npy" "$T/ckv.npy"
fi
expect_fail 2 '--toy without --tokens' kvattn gen --toy --shape 1,2,7,16
expect_fail 1 '--toy with a token count that is not T' kvattn gen --toy --tokens "$T/tok.txt" --shape 1,2,8,16
expect_fail 2 '--tokens without --toy' kvattn gen --tokens "$T/tok.txt" --shape 1,2,7,16

# --- bad input: exit 1 or 2, empty stdout, a message
ok 'gen 3-head query' kvattn gen --shape 2,3,37,16 -q "$T/q3.npy" -k "$T/k3.npy" -v "$T/v3.npy"
expect_fail 1 'Hq not a multiple of Hkv' kvattn run -q "$T/q3.npy" -k "$V/k.npy" -v "$V/v.npy"
err_has 'message names both shapes' '(2, 3, 37, 16).*(2, 2, 53, 16)' 
ok 'gen D 8 keys' kvattn gen --shape 2,2,53,8 -q "$T/q8.npy" -k "$T/k8.npy" -v "$T/v8.npy"
expect_fail 1 'head size differs' kvattn run -q "$V/q.npy" -k "$T/k8.npy" -v "$T/v8.npy"
err_has 'message names both shapes' '(2, 4, 37, 16).*(2, 2, 53, 8)' 
expect_fail 1 'mask does not broadcast' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$V/block_mask.npy"
err_has 'the message names both shapes' 'mask shape (2, 4, 3, 4) does not broadcast to (2, 4, 37, 53)'
err_has 'message names both shapes' '(2, 4, 3, 4).*(2, 4, 37, 53)' 
expect_fail 1 'block mask of the wrong block count' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --block-mask "$V/block_mask.npy" --block-size 8
err_has 'the message names both block counts' 'block mask shape (2, 4, 3, 4) does not broadcast to (2, 4, 5, 7)'
expect_fail 1 'block table too short' kvattn run --layout thd -q "$V/decode_q.npy" --kv-cache "$V/cache.npy" --block-table "$V/block_table.txt" --seq-lens 13,7
err_has 'the message names the request, its need and the table shape' 'request 0 has 13 tokens, needs 4 blocks of 4, table (2, 3) has 3'
err_has 'message says so' 'block table too short' 
expect_fail 1 'kv lengths do not add up' kvattn run --layout thd -q "$V/thd_q.npy" -k "$V/thd_k.npy" -v "$V/thd_v.npy" --q-lens 5,1,12 --kv-lens 9,1,19
expect_fail 1 'missing file' kvattn run -q "$T/none.npy" -k "$V/k.npy" -v "$V/v.npy"
expect_fail 2 '--mask-keep with --mask-binary' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$V/mask_add.npy" --mask-keep --mask-binary
expect_fail 2 '--mask-binary without --mask' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask-binary
expect_fail 2 'bad --lse-base' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --lse-base 10
err_has 'message names the option and value' 'lse-base.*10'
expect_fail 2 'two inputs from standard input (block table)' kvattn run --layout thd -q - --kv-cache "$V/cache.npy" --block-table - --seq-lens 13,7
expect_fail 1 'merge parts of different shapes' kvattn merge "$T/c4a.npy" "$T/c4al.npy" "$T/o.npy" "$T/l.npy"
expect_fail 2 'run without -q' kvattn run -k "$V/k.npy" -v "$V/v.npy"
expect_fail 2 '--window 0' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --window 0
expect_fail 2 '--block-mask without --block-size' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --block-mask "$V/block_mask.npy"
expect_fail 2 'bad --out-dtype' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --out-dtype i8
expect_fail 2 '--q-lens without thd' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --q-lens 3
expect_fail 2 '--lse and -o the same file' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" -o "$T/same.npy" --lse "$T/same.npy"
ok 'query from standard input' sh -c "kvattn run -q - -k '$V/k.npy' -v '$V/v.npy' --causal -o '$T/stdin.npy' <'$V/q.npy'"
expect_file_eq 'the same output as from a file' "$T/stdin.npy" "$T/o.npy"
expect_fail 2 'two inputs from standard input' kvattn run -q - -k - -v "$V/v.npy"
ok 'text output' kvattn run -q "$V/c4_q.npy" -k "$V/c4_k01.npy" -v "$V/c4_v01.npy" --scale 1 -f text --lse "$T/c4l.txt"
ok 'text lse with -f text' grep -q '^0.70141' "$T/c4l.txt"
expect_fail 2 'cmp with a missing file: trouble, not "not close"' kvattn cmp "$T/none.npy" "$V/q.npy"
err_has 'message names the file' 'none.npy'
if [ -w /dev/full ]; then
    status 2 'cmp: a report that cannot be written is trouble too' sh -c "kvattn cmp '$V/q.npy' '$V/q.npy' >/dev/full"
    err_has 'and says why' 'write error'
    status 1 'run: a write error is a data error' sh -c "kvattn run -q '$V/c4_q.npy' -k '$V/c4_k01.npy' -v '$V/c4_v01.npy' -f text >/dev/full"
fi
expect_fail 2 'merge with an odd file count' kvattn merge "$T/c4a.npy" "$T/c4al.npy" "$T/c4b.npy"
expect_fail 2 'gen without --shape' kvattn gen
expect_fail 2 'gen bad pattern' kvattn gen --shape 1,1,2,2 --pattern nope
expect_fail 2 'unknown subcommand' kvattn frobnicate
expect_fail 2 '-f with an unknown format' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" -f pgm
expect_fail 1 'error with -o FILE' kvattn run -q "$V/q.npy" -k "$T/k8.npy" -v "$T/v8.npy" -o "$T/half.npy"
ok 'leaves no file behind' test ! -e "$T/half.npy"
# --- merge: any number of parts, -inf parts
ok 'merge of three parts' kvattn merge "$T/c4a.npy" "$T/c4al.npy" "$T/c4b.npy" "$T/c4bl.npy" "$T/c4a.npy" "$T/c4al.npy" -o "$T/m3.npy" --lse-out "$T/m3l.npy"
ok 'merge of the first two' kvattn merge "$T/c4a.npy" "$T/c4al.npy" "$T/c4b.npy" "$T/c4bl.npy" -o "$T/m2.npy" --lse-out "$T/m2l.npy"
ok 'merged with the third' kvattn merge "$T/m2.npy" "$T/m2l.npy" "$T/c4a.npy" "$T/c4al.npy" -o "$T/m21.npy" --lse-out "$T/m21l.npy"
close 'three parts at once = two, then the third (output)' "$T/m3.npy" "$T/m21.npy"
close 'three parts at once = two, then the third (LSE)' "$T/m3l.npy" "$T/m21l.npy"
if [ -x "$KV_BIN/kvmask" ]; then
    # kvmask full --keep is all ones: as a 1 = masked mask every row is empty
    ok 'kvmask full --keep (all masked as a 1 = masked mask)' kvmask full -q 37 -k 53 --keep -f npy -o "$T/all.npy"
    ok 'run with every key masked' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/all.npy" -o "$T/eo.npy" --lse "$T/el2.npy"
    ok 'the same as text' kvattn run -q "$V/q.npy" -k "$V/k.npy" -v "$V/v.npy" --mask "$T/all.npy" -f text -o "$T/eo.txt" --lse "$T/el2.txt"
    expect_eq 'every row empty: output all 0' "$(tr ' ' '\n' <"$T/eo.txt" | sed '/^$/d' | sort -u)" 0
    expect_eq 'every row empty: LSE all -inf' "$(tr ' ' '\n' <"$T/el2.txt" | sed '/^$/d' | sort -u)" -inf
    ok 'merge a part with an empty part' kvattn merge "$T/o.npy" "$T/l.npy" "$T/eo.npy" "$T/el2.npy" -o "$T/me.npy" --lse-out "$T/mel.npy"
    ok 'the -inf part adds nothing (output)' kvattn cmp --atol 0 --rtol 0 "$T/me.npy" "$T/o.npy"
    ok 'the -inf part adds nothing (LSE)' kvattn cmp --atol 0 --rtol 0 "$T/mel.npy" "$T/l.npy"
fi

# every option of SUB --help is in kvattn.1 OPTIONS (its subsection or the
# options common to all subcommands)
for sub in run merge cmp gen; do
    kvattn $sub --help >"$T/help.txt" 2>&1
    sed -n 's/^  \(-[a-zA-Z]\), --[a-z-]*.*/\1/p; s/^  \(--[a-z-]*\).*/\1/p; s/^  \(-[a-zA-Z]\) .*/\1/p' "$T/help.txt" |
        sort -u >"$T/helpopts.txt"
    awk -v s="$sub" '/^\.Sh OPTIONS/ { on = 1; sec = 1; next } /^\.Sh / { on = 0 }
        on && /^\.Ss / { sec = ($2 == s) } on && sec && /^\.It /' "$KV_TOP/man/kvattn.1" >"$T/its.txt"
    while read -r o; do
        grep -q "Fl ${o#-}\( \|\$\)" "$T/its.txt"; _report $? "$sub --help $o is in kvattn.1 OPTIONS"
    done <"$T/helpopts.txt"
done

done_testing
