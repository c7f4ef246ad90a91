#!/bin/sh
# mla-chunk.sh - kvchunk with an MLA model (DeepSeek): latent chunks
# [L, T, kv_lora_rank + R] keyed, stored, fetched and assembled, k_pe moved
# by the position delta, byte counts of the latent.
. "$KV_TOP/tests/lib.sh"
C2="$KV_TOP/tests/configs/deepseek-v2-lite.json"
C3="$KV_TOP/tests/configs/deepseek-v3.json"
cd "$T" || exit 1
printf 'Rome is in Italy.' | od -An -tu1 >rome.tok
printf '##Rome is in Italy.##' >p.txt
# two roundings of bf16 at the largest toy value (|k| < 2.45, ulp 2^-6)
TOL=0.032

expect_out 'info: a latent row of 512 + 64, 27 layers, bf16' \
'layers: 27
kv_heads: 1
head_dim: 576
dtype: bf16
bytes_per_token: 31104' sh -c "kvchunk info --model-config '$C2' | grep -E '^(layers|kv_heads|head_dim|dtype|bytes_per_token):'"
expect_out 'info: DeepSeek-V3 bytes per token 61 x 576 x 2' 'bytes_per_token: 70272' \
    sh -c "kvchunk info --model-config '$C3' | grep bytes_per_token"
ok 'the rope of k_pe: interleaved pairs, 64 dims, yarn' kvchunk info --model-config "$C2"
grep -q 'rope: gptj theta=10000 rotary_dim=64 head_dim=64 scaling=yarn factor=40' "$T/.out"
_report $? 'info names the k_pe RoPE'
ok 'toy latent chunk at position 50' kvchunk toy --model-config "$C2" --tokens rome.tok --pos 50 -o r50.npy
ok 'the same tokens at 0' kvchunk toy --model-config "$C2" --tokens rome.tok --pos 0 -o r0.npy
ok 'and at 1000' kvchunk toy --model-config "$C2" --tokens rome.tok --pos 1000 -o r1000.npy
ok 'put' kvchunk put --store dir:st --model-config "$C2" --base-policy free \
    --tokens rome.tok --kv r50.npy --base-pos 50
ok 'get --at 1000' kvchunk get --store dir:st --model-config "$C2" --base-policy free \
    --tokens rome.tok --at 1000 -o g1000.npy
ok "moved = computed at 1000 within two bf16 roundings ($TOL)" \
    kvattn cmp --atol $TOL --rtol 0 g1000.npy r1000.npy
ok 'get --at 50 is the stored chunk' kvchunk get --store dir:st --model-config "$C2" \
    --base-policy free --tokens rome.tok --at 50 -o g50.npy
expect_file_eq 'bit for bit (a move by 0 copies)' g50.npy r50.npy
ok 'assemble: the chunk lands at 0' kvchunk assemble --store dir:st --model-config "$C2" \
    --base-policy free --kv-only -o asm.npy p.txt
ok "assembled = computed at 0 within $TOL" kvattn cmp --atol $TOL --rtol 0 asm.npy r0.npy
expect_out 'assemble plan: the chunk is a hit from base 50' 'chunk 0 17 hit 50' \
    sh -c "kvchunk assemble --store dir:st --model-config '$C2' --base-policy free -f text p.txt | awk '\$1 == \"chunk\" { print \$1, \$2, \$3, \$5, \$6 }'"
# the key: a latent namespace is its own
ok 'key (MLA)' kvchunk key --model-config "$C2" --tokens rome.tok
k1=$(cat "$T/.out")
ok 'key (K/V of the same width)' kvchunk key --shape 27,1,576 --rope gptj --rotary-dim 64 --tokens rome.tok
k2=$(cat "$T/.out")
[ "$k1" != "$k2" ]
_report $? 'a latent chunk never answers for a K/V chunk'
ok 'key --explain names the latent layout' kvchunk key --model-config "$C2" --tokens rome.tok --explain
grep -q 'layout=LTD kv_lora_rank=512' "$T/.out"
_report $? 'layout=LTD kv_lora_rank=512 in the namespace text'
# transformers' cache layout: de-interleaved k_pe
ok 'toy and get in the neox (transformers) layout' kvchunk toy --model-config "$C2" --rope neox \
    --tokens rome.tok --pos 7 -o n7.npy
ok 'put (neox)' kvchunk put --store dir:st --model-config "$C2" --rope neox --base-policy free \
    --tokens rome.tok --kv n7.npy --base-pos 7
ok 'get (neox) at 1000' kvchunk get --store dir:st --model-config "$C2" --rope neox \
    --base-policy free --tokens rome.tok --at 1000 -o n1000.npy
ok 'the reference (neox) at 1000' kvchunk toy --model-config "$C2" --rope neox --tokens rome.tok \
    --pos 1000 -o nr1000.npy
ok "neox: moved = computed within $TOL" kvattn cmp --atol $TOL --rtol 0 n1000.npy nr1000.npy
# sim counts the latent's bytes
ok 'a trace' kvchunk sim gen --seed 1 --requests 20 --docs 6 --topk 2 -o tr.txt
ok 'sim with the MLA config' kvchunk sim --csv --model-config "$C2" tr.txt
awk -F, 'NR > 1 && $11 % 31104 != 0 { bad = 1 } END { exit bad }' "$T/.out"
_report $? 'stored bytes are whole latent rows of 31104 bytes a token'
# bad input
expect_fail 1 'put: a K/V tensor for a latent namespace' kvchunk put --store dir:st \
    --model-config "$C2" --base-policy free --tokens rome.tok --kv asm.npy --base-pos 0 --dtype f32
kvchunk toy --shape 2,2,64 --tokens rome.tok -o kv.npy 2>/dev/null
expect_fail 1 'put: [L, 2, T, H, D] where the latent is expected' kvchunk put --store dir:st \
    --model-config "$C2" --base-policy free --tokens rome.tok --kv kv.npy --base-pos 0
expect_fail 2 'toy: --q does not apply to the latent' kvchunk toy --model-config "$C2" \
    --tokens rome.tok --q 0
done_testing
