#!/bin/sh
# mla.sh - kvattn mla (Multi-head Latent Attention) and kvattn gen with an
# MLA config: the two forms agree within their documented bounds on a
# DeepSeek geometry, outputs are deterministic, bad input is refused.
. "$KV_TOP/tests/lib.sh"
C2="$KV_TOP/tests/configs/deepseek-v2-lite.json"
C3="$KV_TOP/tests/configs/deepseek-v3.json"
D="$T/d"
bound() {   # the bound kvattn mla -v printed last
    sed -n 's/.*error bound \([^ ]*\)$/\1/p' "$T/.err"
}

ok 'gen: DeepSeek-V2-Lite inputs, 2 decodes + a 40-token prefill chunk' \
    kvattn gen --model-config "$C2" --shape 3,1 --kv-len 150 --dtype f32 --seed 7 --dir "$D"
for f in q q_absorbed c_kv k_pe w_uk w_uv kv_cache block_table; do
    [ -s "$D/$f.npy" ] || _report 1 "gen wrote $f.npy"
done
expect_eq 'gen: seq_lens and q_lens' "$(cat "$D/seq_lens") $(cat "$D/q_lens")" '150,150,150 1,1,1'
expect_eq 'gen: the config scale 192 ** -0.5 * mscale(40, 0.707) * mscale(40, 0.707), as Python prints it' "$(cat "$D/scale")" 0.1147213867929261
shape_of() {   # the shape line kvattn cmp prints for a file against itself
    kvattn cmp "$1" "$1" >"$T/.shape" 2>&1; head -n 1 "$T/.shape"
}
expect_eq 'gen: absorbed Q [T, H, 576], cache [1 + blocks, 64, 1, 576], block table [B, 3]' \
    "$(shape_of "$D/q_absorbed.npy"); $(shape_of "$D/kv_cache.npy"); $(shape_of "$D/block_table.npy")" \
    'shape: (3, 16, 576); shape: (10, 64, 1, 576); shape: (3, 3)'
expect_eq 'gen: naive Q [T, H, 192], W_UK [H, 512, 128]' \
    "$(shape_of "$D/q.npy"); $(shape_of "$D/w_uk.npy")" 'shape: (3, 16, 192); shape: (16, 512, 128)'
ok 'absorbed form (FlashMLA shape), projected by W_UV' \
    kvattn mla -v -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" \
    --block-table "$D/block_table.npy" --seq-lens 150,150,150 --causal \
    --model-config "$C2" --w-uv "$D/w_uv.npy" -o "$T/abs.npy" --lse "$T/abs_lse.npy"
ba=$(bound)
ok 'naive form' kvattn mla -v -q "$D/q.npy" --c-kv "$D/c_kv.npy" --k-pe "$D/k_pe.npy" \
    --w-uk "$D/w_uk.npy" --w-uv "$D/w_uv.npy" --q-lens 1,1,1 --kv-lens 150,150,150 \
    --causal --model-config "$C2" -o "$T/naive.npy" --lse "$T/naive_lse.npy"
bn=$(bound)
atol=$(awk -v a="$ba" -v b="$bn" 'BEGIN { printf "%.3g", a + b }')
ok "the forms agree within the sum of their bounds ($atol)" \
    kvattn cmp --atol "$atol" --rtol 0 "$T/abs.npy" "$T/naive.npy"
ok 'and their LSEs agree' kvattn cmp --atol 1e-4 --rtol 0 "$T/abs_lse.npy" "$T/naive_lse.npy"
# bf16 Q and cache: the absorbed form on the bf16 tiles where the CPU (and
# KVTOOLS_ISA) allows, against the f32 path on the same values
# (KVTOOLS_ISA=generic), within the sum of the two bounds it prints
ok 'gen: DeepSeek-V3 bf16, two decodes' \
    kvattn gen --model-config "$C3" --shape 2,1 --kv-len 300 --dtype bf16 --seed 3 --dir "$T/b16"
ok 'absorbed form, bf16' kvattn mla -v -q "$T/b16/q_absorbed.npy" --kv-cache "$T/b16/kv_cache.npy" \
    --block-table "$T/b16/block_table.npy" --seq-lens 300,300 --causal --model-config "$C3" \
    --out-dtype f32 -o "$T/b16t.npy"
b1=$(bound)
ok 'the same on the f32 path' env KVTOOLS_ISA=generic kvattn mla -v -q "$T/b16/q_absorbed.npy" \
    --kv-cache "$T/b16/kv_cache.npy" --block-table "$T/b16/block_table.npy" --seq-lens 300,300 \
    --causal --model-config "$C3" --out-dtype f32 -o "$T/b16f.npy"
b2=$(bound)
atol=$(awk -v a="$b1" -v b="$b2" 'BEGIN { printf "%.3g", a + b }')
ok "bf16: the routes agree within the sum of their bounds ($atol)" \
    kvattn cmp --atol "$atol" --rtol 0 "$T/b16t.npy" "$T/b16f.npy"
ok 'absorbed, latent output [T, H, 512]' \
    kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" \
    --block-table "$D/block_table.npy" --seq-lens 150,150,150 --causal \
    --model-config "$C2" -o "$T/lat.npy"
ok 'thread count does not change a bit (-j 1 vs -j 2)' \
    kvattn mla -j 1 -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" \
    --block-table "$D/block_table.npy" --seq-lens 150,150,150 --causal \
    --model-config "$C2" -o "$T/lat1.npy"
expect_file_eq 'bit-identical' "$T/lat1.npy" "$T/lat.npy"
ok 'an explicit --scale and --kv-lora-rank give the same bytes' \
    kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" \
    --block-table "$D/block_table.npy" --seq-lens 150,150,150 --causal \
    --scale 0.1147213867929261 --kv-lora-rank 512 -o "$T/lat2.npy"
expect_file_eq 'same bytes' "$T/lat2.npy" "$T/lat.npy"

# chunked prefill: 40 queries at the end of 150 keys, one request
ok 'gen: a chunked-prefill step (40 queries, 150 keys), V3 geometry, 8 heads' \
    kvattn gen --model-config "$C3" --shape 1,8,40 --kv-len 150 --dtype f32 --dir "$T/p"
ok 'absorbed, chunked prefill' kvattn mla -v -q "$T/p/q_absorbed.npy" \
    --kv-cache "$T/p/kv_cache.npy" --block-table "$T/p/block_table.npy" --seq-lens 150 \
    --q-lens 40 --causal --model-config "$C3" --w-uv "$T/p/w_uv.npy" -o "$T/pa.npy"
ba=$(bound)
ok 'naive, chunked prefill' kvattn mla -v -q "$T/p/q.npy" --c-kv "$T/p/c_kv.npy" \
    --k-pe "$T/p/k_pe.npy" --w-uk "$T/p/w_uk.npy" --w-uv "$T/p/w_uv.npy" --q-lens 40 \
    --kv-lens 150 --causal --model-config "$C3" -o "$T/pn.npy"
bn=$(bound)
atol=$(awk -v a="$ba" -v b="$bn" 'BEGIN { printf "%.3g", a + b }')
ok "chunked prefill: the forms agree within $atol" \
    kvattn cmp --atol "$atol" --rtol 0 "$T/pa.npy" "$T/pn.npy"
ok 'and much closer in fact (1e-5)' kvattn cmp --atol 1e-5 --rtol 0 "$T/pa.npy" "$T/pn.npy"

# gen is a function of the seed
ok 'gen again with the same seed' \
    kvattn gen --model-config "$C2" --shape 3,1 --kv-len 150 --dtype f32 --seed 7 --dir "$T/d2"
expect_file_eq 'same cache bytes' "$T/d2/kv_cache.npy" "$D/kv_cache.npy"
expect_file_eq 'same block table' "$T/d2/block_table.npy" "$D/block_table.npy"

# bad input
expect_fail 2 'both forms at once' kvattn mla -q "$D/q.npy" --kv-cache "$D/kv_cache.npy" \
    --c-kv "$D/c_kv.npy"
expect_fail 2 'absorbed without a scale' kvattn mla -q "$D/q_absorbed.npy" \
    --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens 150,150,150 \
    --kv-lora-rank 512
expect_fail 2 'naive without W_UV' kvattn mla -q "$D/q.npy" --c-kv "$D/c_kv.npy" \
    --k-pe "$D/k_pe.npy" --w-uk "$D/w_uk.npy"
expect_fail 2 'a non-MLA config for --model-config' kvattn mla -q "$D/q_absorbed.npy" \
    --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens 150,150,150 \
    --model-config "$KV_TOP/tests/configs/llama-3.1-8b.json"
expect_fail 1 'a seq_len past the block table' kvattn mla -q "$D/q_absorbed.npy" \
    --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens 150,150,500 \
    --model-config "$C2"
expect_fail 1 'the naive form with the absorbed query' kvattn mla -q "$D/q_absorbed.npy" \
    --c-kv "$D/c_kv.npy" --k-pe "$D/k_pe.npy" --w-uk "$D/w_uk.npy" --w-uv "$D/w_uv.npy" \
    --q-lens 1,1,1 --kv-lens 150,150,150
expect_fail 2 'gen: an MLA config needs --dir' kvattn gen --model-config "$C2" --shape 1,4
expect_fail 2 'gen: --dir needs an MLA config' kvattn gen --shape 1,2,4,8 --dir "$T/x"
done_testing
