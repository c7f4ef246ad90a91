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
# (kvattn steps)
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
