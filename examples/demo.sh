#!/bin/sh
# examples/demo.sh - a pipeline through every kvtools program (make demo).
set -eu
: "${KV_BIN:?run through make demo}"
PATH="$KV_BIN:$PATH"
D=$(mktemp -d "${TMPDIR:-/tmp}/kvdemo.XXXXXX")
trap 'rm -rf "$D"' EXIT
step() { printf '\n== %s\n' "$*"; }

# --- kvmask ---------------------------------------------------------------
step 'kvmask: a gallery (1 = attend): causal q4 kv8, vLLM window W=3, Ascend band pre 1 next 1, prefix-LM P=3'
for args in 'causal -q 4 -k 8' 'window -w 3 -n 6' 'band --pre 1 --next 1 -n 6' 'prefix -p 3 -n 6'; do
    echo "kvmask $args"
    # shellcheck disable=SC2086
    kvmask $args --keep -f text
done
step 'kvmask: a packed varlen batch (FlashAttention varlen: 2 new tokens over 5 keys, then 3 over 3)'
kvmask varlen --q-lens 2,3 --kv-lens 5,3 --keep -f text
step 'kvmask: vllm-ascend bf16 splitfuse rows hold -9984 and -0'
kvmask ascend --preset splitfuse --seq-lens 5,3 --q-lens 2,3 --dtype bf16 -f text
step 'kvmask: the chunk-isolated RAG mask of sys 3 + chunks 2, 3 + question 2'
printf 'sys 0 3\nchunk 3 2\nchunk 5 3\nquestion 8 2\n' >"$D/segs.txt"
kvmask chunk --segments "$D/segs.txt" --keep -f text
step 'kvmask: its FlexAttention BlockMask (2x2 tiles) and statistics'
kvmask chunk --segments "$D/segs.txt" -f block --block-size 2 --text | head -8
kvmask chunk --segments "$D/segs.txt" -f stats --block-size 2 | head -10
step 'kvmask: a 1M-token causal BlockMask, streamed (bytes)'
kvmask causal -n 1048576 -f block --block-size 128 -v | wc -c
# --- end kvmask -----------------------------------------------------------

# --- kvslot ---------------------------------------------------------------
step 'kvslot: the scheduler, two steps of the vllm-ascend example'
kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 \
    --steps 2 --fields step,num_scheduled_tokens,slot_mapping,block_table -f text
step 'kvslot: step 2 block table -> slot mapping of each of two DCP ranks'
printf '1 2 0 0 0 0\n3 7 0 0 0 0\n4 5 6 8 0 0\n' >"$D/bt.txt"
kvslot map -B 2 --block-table "$D/bt.txt" --scheduled 1,1,3 --computed 3,2,5 \
    --cp-size 2 --all-ranks --fields positions,slot_mapping -f text
step 'kvslot: DualChunkSwap split of a 7-token prefill over 2 ranks'
kvslot pcp --pcp-size 2 --tokens 7 -f text \
    --fields pcp_unpad_mask,pcp_allgather_restore_idx,rank,positions
# --- end kvslot -----------------------------------------------------------

# --- kvattn ---------------------------------------------------------------
step 'kvattn: synthetic Q/K/V (sinks, stripes, RoPE locality), causal attention'
kvattn gen --shape 1,8,512,64 --kv-heads 2 --seed 1 \
    -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy"
kvattn run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal \
    -o "$D/o.npy" --lse "$D/lse.npy"
step 'kvattn: the kvmask causal tensor gives the same attention'
kvmask causal -n 512 >"$D/causal.npy"
kvattn run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --mask "$D/causal.npy" \
    -o "$D/om.npy"
# within the sum of the two routes' documented bounds (kvattn(1) ACCURACY)
kvattn cmp --atol "$(kvattn bound --routes 2 -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy")" \
    "$D/om.npy" "$D/o.npy"
step 'kvattn: XAttention block mask -> block-sparse attention -> error'
kvxattn estimate -q "$D/q.npy" -k "$D/k.npy" --block-size 64 --threshold 0.8 \
    -o "$D/bm.npy"
kvattn run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal \
    --block-mask "$D/bm.npy" --block-size 64 -o "$D/os.npy"
kvattn cmp --atol 1e-2 "$D/os.npy" "$D/o.npy" || echo "(not within 1e-2: the price of sparsity)"
# --- end kvattn -----------------------------------------------------------

# --- kvxattn --------------------------------------------------------------
step 'kvxattn: XAttention block selection on 2048 tokens, density, exact mass kept'
kvattn gen --shape 1,2,2048,64 --seed 2 --pattern local \
    -q "$D/xq.npy" -k "$D/xk.npy" -v "$D/xv.npy"
kvxattn estimate -q "$D/xq.npy" -k "$D/xk.npy" --threshold 0.8 -o "$D/xm.npy" \
    --sums "$D/xs.npy"
kvxattn recall -q "$D/xq.npy" -k "$D/xk.npy" --mask "$D/xm.npy"
kvxattn estimate -q "$D/xq.npy" -k "$D/xk.npy" --threshold 0.8 -f text | head -8
step 'kvxattn: the original estimator with chunk size 512 (each later chunk sees only itself)'
kvxattn estimate -q "$D/xq.npy" -k "$D/xk.npy" --threshold 0.8 \
    --compat-chunk-size 512 -f stats | sed -n 1,4p
step 'kvxattn: the selection as a FlexAttention BlockMask, read back by recall'
kvxattn estimate -q "$D/xq.npy" -k "$D/xk.npy" --threshold 0.8 -f block \
    -o "$D/xb.npy"
kvxattn recall -q "$D/xq.npy" -k "$D/xk.npy" --mask "$D/xb.npy" | sed -n 1,3p
# --- end kvxattn ----------------------------------------------------------

# --- kvchunk --------------------------------------------------------------
step 'kvchunk: a RAG prompt split into segments with content keys'
printf 'You are terse.##Rome is in Italy.##Paris is in France.##Where?' \
    >"$D/prompt.txt"
kvchunk split -f text --shape 2,2,64 "$D/prompt.txt"
step 'kvchunk: cache one chunk computed after the system prompt (toy model)'
printf 'You are terse.' | od -An -tu1 >"$D/sys.tok"
printf 'Rome is in Italy.' | od -An -tu1 >"$D/rome.tok"
kvchunk toy --shape 2,2,64 --tokens "$D/rome.tok" --pos 14 -o "$D/rome.npy"
kvchunk put --store "dir:$D/cache" --tokens "$D/rome.tok" \
    --context "$D/sys.tok" --kv "$D/rome.npy" --base-pos 14
step 'kvchunk: the chunk reused at position 33 of another prompt'
printf 'You are terse.##Paris is in France.##Rome is in Italy.##Where?' \
    >"$D/prompt2.txt"
kvchunk assemble --store "dir:$D/cache" --shape 2,2,64 -f text "$D/prompt2.txt"
kvchunk stat --store "dir:$D/cache"
# --- end kvchunk ----------------------------------------------------------

# --- kvchunk sim ----------------------------------------------------------
step "kvchunk sim: the same documents, prefix caching vs chunk caching"
kvchunk sim gen --seed 1 -n 5000 --docs 1000 --topk 5 --zipf 0.9 --sys-variants 4 -o "$D/trace.txt"
head -n 3 "$D/trace.txt"
kvchunk sim --capacity-tokens 300000 -p none,prefix,prefix-sorted,chunk,oracle "$D/trace.txt"
step "kvchunk sim: real prompts, split with keys, the documents swapped"
printf 'You are a careful assistant.##On caching.##On attention.##What is new?' >"$D/p1.txt"
printf 'You are a careful assistant.##On attention.##On caching.##And now?' >"$D/p2.txt"
for p in p1 p2; do kvchunk split -f text --shape 32,8,128 "$D/$p.txt"; done >"$D/split.txt"
kvchunk sim from-split -o "$D/real.trace" "$D/split.txt"
cat "$D/real.trace"
kvchunk sim -B 4 --capacity-tokens 1000 -p prefix,prefix-radix,chunk "$D/real.trace"
# --- end kvchunk sim ------------------------------------------------------

printf '\ndemo: done\n'
