#!/bin/sh
# examples/demo.sh - a pipeline through every kvtools program (make demo).
set -eu
: "${KV_BIN:?run through make demo}"
PATH="$KV_BIN:$PATH"
D=$(mktemp -d "${TMPDIR:-/tmp}/kvdemo.XXXXXX")
trap 'rm -rf "$D"' EXIT
step() { printf '\n== %s\n' "$*"; }

# --- kvmask ---------------------------------------------------------------
# (kvmask steps)
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
kvattn cmp --atol 1e-6 "$D/om.npy" "$D/o.npy"
step 'kvattn: XAttention block mask -> block-sparse attention -> error'
kvxattn estimate -q "$D/q.npy" -k "$D/k.npy" --block-size 64 --threshold 0.8 \
    -o "$D/bm.npy"
kvattn run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal \
    --block-mask "$D/bm.npy" --block-size 64 -o "$D/os.npy"
kvattn cmp --atol 1e-2 "$D/os.npy" "$D/o.npy" || echo "(not within 1e-2: the price of sparsity)"
# --- end kvattn -----------------------------------------------------------

# --- kvxattn --------------------------------------------------------------
# (kvxattn steps)
# --- end kvxattn ----------------------------------------------------------

# --- kvchunk --------------------------------------------------------------
# (kvchunk steps)
# --- end kvchunk ----------------------------------------------------------

# --- kvchunk sim ----------------------------------------------------------
# (kvchunk sim steps)
# --- end kvchunk sim ------------------------------------------------------

printf '\ndemo: done\n'
