#!/bin/sh
# kvslot.sh - the worked examples of seed 004 and spec masks-slots.md B.3,
# B.4, B.5, C.1, C.2, C.3, reproduced number for number, and bad input.
. "$KV_TOP/tests/lib.sh"
V="$VEC/slots"

# --- seed 004 / spec B.5: kvslot plan ------------------------------------
PLAN="kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 --steps 2 -f text"
golden 'seed 004 plan, every field of both steps' kvslot/seed004.txt $PLAN
field() {   # step name: the line of that field in that step of $T/.out
    awk -v s="$1" -v n="$2:" '$1 == "step:" { cur = $2 } cur == s && $1 == n' "$T/.out"
}
ok 'seed 004 plan runs' $PLAN
expect_eq 'step 1 slot_mapping' "$(field 1 slot_mapping)" 'slot_mapping: 2 3 4 6 7 8 9 10 11 12'
expect_eq 'step 2 slot_mapping' "$(field 2 slot_mapping)" 'slot_mapping: 5 14 13 16 17'
expect_eq 'step 1 positions' "$(field 1 positions)" 'positions: 0 1 2 0 1 0 1 2 3 4'
expect_eq 'step 1 req_indices' "$(field 1 req_indices)" 'req_indices: 0 0 0 1 1 2 2 2 2 2'
expect_eq 'step 1 token_indices' "$(field 1 token_indices)" 'token_indices: 0 1 2 12 13 24 25 26 27 28'
expect_eq 'step 1 block_table_indices' "$(field 1 block_table_indices)" 'block_table_indices: 0 0 1 6 6 12 12 13 13 14'
expect_eq 'step 1 block_numbers' "$(field 1 block_numbers)" 'block_numbers: 1 1 2 3 3 4 4 5 5 6'
expect_eq 'step 1 block_offsets' "$(field 1 block_offsets)" 'block_offsets: 0 1 0 0 1 0 1 0 1 0'
expect_eq 'step 1 query_start_loc' "$(field 1 query_start_loc)" 'query_start_loc: 0 3 5 10'
expect_eq 'step 1 seq_lens' "$(field 1 seq_lens)" 'seq_lens: 3 2 5'
expect_eq 'step 1 num_scheduled_tokens' "$(field 1 num_scheduled_tokens)" 'num_scheduled_tokens: 3 2 5'
expect_eq 'step 1 num_computed_tokens' "$(field 1 num_computed_tokens)" 'num_computed_tokens: 0 0 0'
expect_eq 'step 1 max_query_len' "$(field 1 max_query_len)" 'max_query_len: 5'
expect_eq 'step 1 num_reqs' "$(field 1 num_reqs)" 'num_reqs: 3'
expect_eq 'step 1 block table' "$(field 1 block_table)" 'block_table: 1 2 0 0 0 0
block_table: 3 0 0 0 0 0
block_table: 4 5 6 0 0 0'
expect_eq 'step 2 positions' "$(field 2 positions)" 'positions: 3 2 5 6 7'
expect_eq 'step 2 req_indices' "$(field 2 req_indices)" 'req_indices: 0 1 2 2 2'
expect_eq 'step 2 token_indices' "$(field 2 token_indices)" 'token_indices: 3 14 29 30 31'
expect_eq 'step 2 block_table_indices' "$(field 2 block_table_indices)" 'block_table_indices: 1 7 14 15 15'
expect_eq 'step 2 block_numbers' "$(field 2 block_numbers)" 'block_numbers: 2 7 6 8 8'
expect_eq 'step 2 block_offsets' "$(field 2 block_offsets)" 'block_offsets: 1 0 1 0 1'
expect_eq 'step 2 query_start_loc' "$(field 2 query_start_loc)" 'query_start_loc: 0 1 2 5'
expect_eq 'step 2 seq_lens' "$(field 2 seq_lens)" 'seq_lens: 4 3 8'
expect_eq 'step 2 num_computed_tokens' "$(field 2 num_computed_tokens)" 'num_computed_tokens: 3 2 5'
expect_eq 'step 2 max_query_len' "$(field 2 max_query_len)" 'max_query_len: 3'
expect_eq 'step 2 block table: blocks 7 and 8 appended' "$(field 2 block_table)" 'block_table: 1 2 0 0 0 0
block_table: 3 7 0 0 0 0
block_table: 4 5 6 8 0 0'
ok 'plan --pad-to 10' \
    kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 \
    --steps 2 --pad-to 10 --fields step,slot_mapping -f text -o "$T/pad.txt"
expect_eq 'step 2 slot buffer padded to the 10-token budget' \
    "$(sed -n 4p "$T/pad.txt")" 'slot_mapping: 5 14 13 16 17 -1 -1 -1 -1 -1'

expect_out 'B.5: newest vLLM row stride (64 columns for block size 2)' \
'block_table_indices: 1 65 130 131 131
slot_mapping: 5 14 13 16 17' \
    sh -c 'kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 --steps 2 --round-stride --fields block_table_indices,slot_mapping -f text | tail -n 2'

# a freed row is filled by a new prefill in front of two decodes
REO="kvslot plan --prompt-lens 2,2,2,2 --output-lens 1,5,5,5 --max-tokens 16 -B 2 --max-model-len 8 --max-num-seqs 3 --steps 2 --fields step,req_ids,num_scheduled_tokens -f text"
expect_out 'persistent batch: the new request takes the freed row 0' 'step: 1
req_ids: 0 1 2
num_scheduled_tokens: 2 2 2
step: 2
req_ids: 3 1 2
num_scheduled_tokens: 2 1 1' $REO
expect_out '--reorder split-decodes swaps the decode to the front' 'step: 1
req_ids: 0 1 2
num_scheduled_tokens: 2 2 2
step: 2
req_ids: 2 1 3
num_scheduled_tokens: 1 1 2' $REO --reorder split-decodes
expect_out 'condense: a finished row is filled by the last row' 'req_ids: 0 1 2
req_ids: 2 1' \
    sh -c 'kvslot plan --prompt-lens 2,2,2 --output-lens 1,5,5 --max-tokens 16 -B 2 --max-model-len 8 --steps 2 --fields req_ids -f text'

# --- the same steps through kvslot map -----------------------------------
expect_out 'map: seed 004 step 1' 'slot_mapping: 2 3 4 6 7 8 9 10 11 12
token_indices: 0 1 2 12 13 24 25 26 27 28' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,5 \
    --max-model-len 12 --fields slot_mapping,token_indices -f text
golden 'map: seed 004 step 2, default fields' kvslot/map-step2.txt \
    kvslot map -B 2 --block-table "$V/seed004_step2.txt" --scheduled 1,1,3 \
    --computed 3,2,5 --max-model-len 12 -f text
expect_out 'map: --pad-to' 'slot_mapping: 5 14 13 16 17 -1 -1 -1 -1 -1' \
    kvslot map -B 2 --block-table "$V/seed004_step2.txt" --scheduled 1,1,3 \
    --computed 3,2,5 --pad-to 10 --fields slot_mapping -f text
# an int32 .npy block table, written by plan itself, read back by map
ok 'plan writes the step-2 block table as int32 npy' \
    kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 \
    --steps 2 --fields block_table -f npy --dtype i32 -o "$T/tables.npy"
# the stream holds two arrays; keep the second (header 128 bytes + 3*6*4)
tail -c $((128 + 72)) "$T/tables.npy" >"$T/bt2.npy"
expect_out 'map reads an int32 .npy block table' 'slot_mapping: 5 14 13 16 17' \
    kvslot map -B 2 --block-table "$T/bt2.npy" --scheduled 1,1,3 \
    --computed 3,2,5 --fields slot_mapping -f text
ok 'plan writes the block tables as int64 npy' \
    kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 \
    --steps 2 --fields block_table -f npy -o "$T/tables64.npy"
tail -c $((128 + 144)) "$T/tables64.npy" >"$T/bt2_64.npy"
expect_out 'map reads an int64 .npy block table' 'slot_mapping: 5 14 13 16 17' \
    kvslot map -B 2 --block-table "$T/bt2_64.npy" --scheduled 1,1,3 \
    --computed 3,2,5 --fields slot_mapping -f text
head -c 100 "$T/bt2.npy" >"$T/cut.npy"
expect_fail 1 'a truncated .npy block table' \
    kvslot map -B 2 --block-table "$T/cut.npy" --scheduled 1,1,3 --fields slot_mapping
expect_out 'map reads the block table from stdin' 'slot_mapping: 5 14 13 16 17' \
    sh -c "kvslot map -B 2 --block-table - --scheduled 1,1,3 --computed 3,2,5 --fields slot_mapping -f text <'$V/seed004_step2.txt'"
ok 'map writes npy' kvslot map -B 2 --block-table "$V/seed004_step2.txt" \
    --scheduled 1,1,3 --computed 3,2,5 --fields slot_mapping,num_tokens \
    -f npy -o "$T/m.npy"
expect_eq 'npy: magic' "$(head -c 6 "$T/m.npy" | tail -c 5)" NUMPY
expect_eq 'npy: int64 [5] then a 0-d num_tokens' \
    "$(tr -c '[:print:]' '\n' <"$T/m.npy" | grep -o "'descr': '[<a-z0-9]*'\|'shape': ([0-9, ]*)" | tr '\n' ' ')" \
    "'descr': '<i8' 'shape': (5,) 'descr': '<i8' 'shape': () "
expect_eq 'npy: stream size' "$(wc -c <"$T/m.npy" | tr -d ' ')" $((128 + 40 + 128 + 8))
golden 'plan npy stream (checksum)' kvslot/seed004.npy.cksum \
    sh -c 'kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 --steps 2 -f npy | cksum'

# --- spec B.3: context parallel slot mapping -----------------------------
B3="$V/b3_one_request.txt"
cp_map() {  # interleave rank [extra options]
    _i=$1; _r=$2; shift 2
    kvslot map -B 4 --block-table "$B3" --scheduled 16 --cp-size 2 \
        --cp-rank "$_r" --interleave "$_i" --fields slot_mapping -f text "$@"
}
expect_out 'B.3 I=1 rank 0' 'slot_mapping: 40 -1 41 -1 42 -1 43 -1 44 -1 45 -1 46 -1 47 -1' cp_map 1 0
expect_out 'B.3 I=1 rank 1' 'slot_mapping: -1 40 -1 41 -1 42 -1 43 -1 44 -1 45 -1 46 -1 47' cp_map 1 1
expect_out 'B.3 I=2 rank 0' 'slot_mapping: 40 41 -1 -1 42 43 -1 -1 44 45 -1 -1 46 47 -1 -1' cp_map 2 0
expect_out 'B.3 I=2 rank 1' 'slot_mapping: -1 -1 40 41 -1 -1 42 43 -1 -1 44 45 -1 -1 46 47' cp_map 2 1
expect_out 'B.3 I=4 rank 0' 'slot_mapping: 40 41 42 43 -1 -1 -1 -1 44 45 46 47 -1 -1 -1 -1' cp_map 4 0
expect_out 'B.3 PCPxDCP (vllm-ascend), pcp 2 dcp 2: every rank' \
'slot_mapping: 40 -1 -1 -1 41 -1 -1 -1 42 -1 -1 -1 43 -1 -1 -1
slot_mapping: -1 40 -1 -1 -1 41 -1 -1 -1 42 -1 -1 -1 43 -1 -1
slot_mapping: -1 -1 40 -1 -1 -1 41 -1 -1 -1 42 -1 -1 -1 43 -1
slot_mapping: -1 -1 -1 40 -1 -1 -1 41 -1 -1 -1 42 -1 -1 -1 43' \
    kvslot map -B 4 --block-table "$B3" --scheduled 16 --cp-size 2 \
    --pcp-size 2 --cp-convention pcp-dcp --all-ranks --fields slot_mapping -f text
expect_out 'B.3 DCP alone (vLLM): PCP ranks do not shard' \
'slot_mapping: 40 -1 41 -1 42 -1 43 -1 44 -1 45 -1 46 -1 47 -1
slot_mapping: -1 40 -1 41 -1 42 -1 43 -1 44 -1 45 -1 46 -1 47' \
    kvslot map -B 4 --block-table "$B3" --scheduled 16 --cp-size 2 \
    --pcp-size 2 --pcp-rank 1 --cp-convention dcp --all-ranks --fields slot_mapping -f text
expect_out 'B.3 cp_owner' 'cp_owner: 0 0 1 1 0 0 1 1' \
    kvslot map -B 4 --block-table "$B3" --scheduled 8 --cp-size 2 --interleave 2 \
    --fields cp_owner -f text
expect_out 'B.3 a chunk that starts mid-sequence' 'slot_mapping: 42 -1 43 -1' \
    kvslot map -B 4 --block-table "$B3" --scheduled 4 --computed 5 --cp-size 2 \
    --cp-rank 1 --fields slot_mapping -f text
# hybrid blocks: allocation block 4, kernel block 2
expect_out 'B.2 hybrid: kernel ids 20..23' 'block_numbers: 20 20 21 21 22 22 23 23
slot_mapping: 40 41 42 43 44 45 46 47' \
    kvslot map -B 4 --kernel-block-size 2 --block-table "$V/b4_seven_tokens.txt" \
    --scheduled 8 --fields block_numbers,slot_mapping -f text
for i in 1 2; do
    kvslot map -B 4 --kernel-block-size 2 --block-table "$V/b4_seven_tokens.txt" \
        --scheduled 8 --cp-size 2 --interleave $i --all-ranks \
        --virtual-block kernel --fields slot_mapping -f text -o "$T/k$i.txt" 2>"$T/.err"
    kvslot map -B 4 --kernel-block-size 2 --block-table "$V/b4_seven_tokens.txt" \
        --scheduled 8 --cp-size 2 --interleave $i --all-ranks \
        --virtual-block physical --fields slot_mapping -f text -o "$T/p$i.txt" 2>"$T/.err"
    expect_file_eq "B.3 hybrid P=4 K=2 W=2 I=$i: older vLLM (kernel) and vllm-ascend (physical) agree" "$T/k$i.txt" "$T/p$i.txt"
done
expect_out 'B.3 hybrid I=4 > K: vllm-ascend layout' \
'slot_mapping: 40 41 42 43 -1 -1 -1 -1
slot_mapping: -1 -1 -1 -1 40 41 42 43' \
    kvslot map -B 4 --kernel-block-size 2 --block-table "$V/b4_seven_tokens.txt" \
    --scheduled 8 --cp-size 2 --interleave 4 --all-ranks --virtual-block physical \
    --fields slot_mapping -f text
expect_fail 2 'B.3 hybrid I=4 > K refused under the older vLLM (kernel) layout' \
    kvslot map -B 4 --kernel-block-size 2 --block-table "$V/b4_seven_tokens.txt" \
    --scheduled 8 --cp-size 2 --interleave 4 --virtual-block kernel
# one rank: the interleave moves nothing, every layout writes plain slots
expect_out 'hybrid I=4 > K without context parallelism: plain slots' \
    'slot_mapping: 40 41 42 43 44 45 46 47' \
    kvslot map -B 4 --kernel-block-size 2 --block-table "$V/b4_seven_tokens.txt" \
    --scheduled 8 --interleave 4 --virtual-block kernel --fields slot_mapping -f text

# --- per-rank KV lengths -------------------------------------------------
expect_out 'B.3 cplens W=2' 'cp_local_seq_lens: 3 2
cp_local_seq_lens: 4 3
cp_local_seq_lens: 5 4
cp_local_seq_lens: 1 0' kvslot cplens --cp-size 2 --seq-lens 5,7,9,1 -f text
expect_out 'cplens one rank, interleave 2' 'cp_local_seq_lens: 3 4 5' \
    kvslot cplens --cp-size 2 --cp-rank 0 --interleave 2 --seq-lens 5,7,9 -f text

# --- spec B.4: slot mapping under PCP ------------------------------------
B4="$V/b4_seven_tokens.txt"
expect_out 'B.4 vllm-ascend padded slot mapping, both ranks' 'rank: 0
slot_mapping: 40 -1 41 -1 42 -1 43 -1
rank: 1
slot_mapping: -1 40 -1 41 -1 42 -1 -1' \
    kvslot pcp --pcp-size 2 --tokens 7 -B 4 --block-table "$B4" \
    --fields rank,slot_mapping -f text
expect_out 'B.4 vLLM MRV2 gathered slot mapping' 'slot_mapping: 40 41 46 -1 42 43 44 45' \
    kvslot pcp --layout vllm --pcp-size 2 --tokens 7 -B 4 --block-table "$B4" \
    --fields slot_mapping -f text

# --- spec C.1: the update_tokens_for_pcp docstring -----------------------
expect_out 'C.1 docstring [1,5,8] P=2' 'pcp_tokens: 1 4 4
num_pcp_pads: 1 3 0
pcp_unpad_mask: 1 0 1 1 1 1 1 0 0 0 1 1 1 1 1 1 1 1
pcp_allgather_restore_idx: 0 9 1 2 10 11 12 13 3 4 5 6 14 15 16 17 7 8
rank: 0
positions: 0 0 1 6 7 0 1 6 7
rank: 1
positions: 0 2 3 4 5 2 3 4 5' \
    kvslot pcp --pcp-size 2 --tokens 1,5,8 \
    --fields pcp_tokens,num_pcp_pads,pcp_unpad_mask,pcp_allgather_restore_idx,rank,positions -f text
expect_out 'C.1 --decodes 1 is what vLLM infers' "$(cat "$T/.out")" \
    kvslot pcp --pcp-size 2 --tokens 1,5,8 --decodes 1 \
    --fields pcp_tokens,num_pcp_pads,pcp_unpad_mask,pcp_allgather_restore_idx,rank,positions -f text
expect_out 'C.1 model positions add the computed tokens' 'positions: 9 2 3 4 5 2 3 4 5' \
    kvslot pcp --pcp-size 2 --tokens 1,5,8 --computed 9,0,0 --rank 1 \
    --fields positions -f text

# --- spec C.2: head/tail index sets --------------------------------------
golden 'C.2 one 7-token prefill, both ranks' kvslot/pcp-7.txt \
    kvslot pcp --pcp-size 2 --tokens 7 -f text
expect_out 'C.2 7 tokens rank 0' 'positions: 0 1 6 7
q_head_idx: 0 1
q_tail_idx: 2 3
kv_with_q_head_nomask_idx:
kv_with_q_head_mask_idx: 0 1
kv_with_q_tail_nomask_idx: 0 1 2 3 4 5
kv_with_q_tail_mask_idx: 6 7' \
    kvslot pcp --pcp-size 2 --tokens 7 --rank 0 -f text \
    --fields positions,q_head_idx,q_tail_idx,kv_with_q_head_nomask_idx,kv_with_q_head_mask_idx,kv_with_q_tail_nomask_idx,kv_with_q_tail_mask_idx
expect_out 'C.2 7 tokens rank 1, restore and unpad' 'pcp_unpad_mask: 1 1 1 1 1 1 1 0
pcp_allgather_restore_idx: 0 1 4 5 6 7 2 3
positions: 2 3 4 5
kv_with_q_head_nomask_idx: 0 1
kv_with_q_head_mask_idx: 2 3
kv_with_q_tail_nomask_idx: 0 1 2 3
kv_with_q_tail_mask_idx: 4 5' \
    kvslot pcp --pcp-size 2 --tokens 7 --rank 1 -f text \
    --fields pcp_unpad_mask,pcp_allgather_restore_idx,positions,kv_with_q_head_nomask_idx,kv_with_q_head_mask_idx,kv_with_q_tail_nomask_idx,kv_with_q_tail_mask_idx
expect_out 'C.2 two prefills [5,8] rank 1' 'q_head_idx: 0 1 4 5
q_tail_idx: 2 3 6 7
kv_with_q_head_nomask_idx: 0 1 8 9
kv_with_q_head_mask_idx: 2 3 10 11
kv_with_q_tail_nomask_idx: 0 1 2 3 8 9 10 11
kv_with_q_tail_mask_idx: 4 5 12 13
q_full_idx: 0 1 4 5 2 3 6 7
attn_mask_seqlens: 2 4
head_attn_nomask_seqlens: 2 4
tail_attn_nomask_seqlens: 4 8' \
    kvslot pcp --pcp-size 2 --tokens 5,8 --rank 1 -f text \
    --fields q_head_idx,q_tail_idx,kv_with_q_head_nomask_idx,kv_with_q_head_mask_idx,kv_with_q_tail_nomask_idx,kv_with_q_tail_mask_idx,q_full_idx,attn_mask_seqlens,head_attn_nomask_seqlens,tail_attn_nomask_seqlens

# --- spec C.3: vLLM MRV2 layout ------------------------------------------
expect_out 'C.3 one 7-token prefill P=2 (the docstring example: rank 0 has A B G)' \
'num_tokens_per_rank: 3 4
padded_gather_idx: 0 1 6 0 2 3 4 5
gathered_kv_write_mask: 1 1 1 0 1 1 1 1
hidden_restore_idx: 0 1 4 5 6 7 2
rank: 0
positions: 0 1 6
rank: 1
positions: 2 3 4 5' \
    kvslot pcp --layout vllm --pcp-size 2 --tokens 7 -f text \
    --fields num_tokens_per_rank,padded_gather_idx,gathered_kv_write_mask,hidden_restore_idx,rank,positions
expect_out 'C.3 P=4 n=10: ranks get 2 2 2 4' 'num_tokens_per_rank: 2 2 2 4' \
    kvslot pcp --layout vllm --pcp-size 4 --tokens 10 --fields num_tokens_per_rank -f text
# vLLM 0.33.0 (values from its PCPManager.partition_batch): without DCP a
# decode has one owner rank; with DCP it is replicated and rank 0's copy
# is written, and so is a prefill too short to fill all 2P chunks.
expect_out 'C.3 without DCP the i-th decode goes to rank i % P' \
'num_tokens_per_rank: 3 2
padded_gather_idx: 0 1 4 2 3 0
gathered_kv_write_mask: 1 1 1 1 1 0
hidden_restore_idx: 0 1 3 4 2' \
    kvslot pcp --layout vllm --pcp-size 2 --tokens 1,4 --computed 6,0 -f text \
    --fields num_tokens_per_rank,padded_gather_idx,gathered_kv_write_mask,hidden_restore_idx
expect_out 'C.3 sharded decodes: ranks 0 1 0' \
'padded_gather_idx: 0 2 3 4 1 5 6 7
hidden_restore_idx: 0 4 1 2 3 5 6 7
rank: 0
row_req_ids: 0 2 3
rank: 1
row_req_ids: 1 3 3' \
    kvslot pcp --layout vllm --pcp-size 2 --tokens 1,1,1,5 --computed 3,4,5,0 -f text \
    --fields padded_gather_idx,hidden_restore_idx,rank,row_req_ids
expect_out 'C.3 with DCP decodes are replicated, written by rank 0 only' \
'num_tokens_per_rank: 3 3
padded_gather_idx: 0 1 4 0 2 3
gathered_kv_write_mask: 1 1 1 0 1 1
hidden_restore_idx: 0 1 4 5 2' \
    kvslot pcp --layout vllm --pcp-size 2 --dcp-size 2 --tokens 1,4 --computed 6,0 -f text \
    --fields num_tokens_per_rank,padded_gather_idx,gathered_kv_write_mask,hidden_restore_idx
expect_out 'C.3 with DCP a prefill that leaves a chunk empty is replicated' \
'num_tokens_per_rank: 8 8
padded_gather_idx: 0 1 2 3 4 5 10 11 0 1 2 3 6 7 8 9
gathered_kv_write_mask: 1 1 1 1 1 1 1 1 0 0 0 0 1 1 1 1
hidden_restore_idx: 0 1 2 3 4 5 12 13 14 15 6 7
rank: 1
positions: 6 0 1 2 2 3 4 5
seq_lens: 7 3 4 6' \
    kvslot pcp --layout vllm --pcp-size 2 --dcp-size 2 --tokens 1,3,8 --computed 6,0,0 -f text \
    --fields num_tokens_per_rank,padded_gather_idx,gathered_kv_write_mask,hidden_restore_idx,rank,positions,seq_lens --rank 1

# --- plan: running out of blocks -----------------------------------------
OOM="kvslot plan --prompt-lens 4,4,4 --max-tokens 16 -B 2 --max-model-len 8 --num-blocks 6 --output-lens 2 --decode -f text"
golden 'plan with 5 usable blocks: waits and preemption' kvslot/oom.txt $OOM
ok 'plan out of blocks runs' $OOM
expect_eq 'step 1: request 2 waits for blocks' "$(field 1 blocked)" 'blocked: 2'
expect_eq 'step 1: request 2 is still waiting' "$(field 1 waiting)" 'waiting: 2'
expect_eq 'step 2: request 1 preempts itself' "$(field 2 preempted)" 'preempted: 1'
expect_eq 'every request finishes, none dropped' \
    "$(awk '$1 == "finished:" { for (i = 2; i <= NF; i++) print $i }' "$T/.out" | sort | tr '\n' ' ')" '0 1 2 '
expect_out 'plan without --decode stops when every prompt is done' 'step: 1
step: 2
step: 3
step: 4' \
    kvslot plan --prompt-lens 3,2,8 --max-tokens 5 -B 2 --max-model-len 12 --fields step -f text
ok 'plan --decode runs to completion' kvslot plan --prompt-lens 3,2,8 \
    --max-tokens 10 -B 2 --max-model-len 12 --decode --fields step,finished,num_tokens -f text
expect_eq 'every request runs until max-model-len' \
    "$(awk '$1 == "finished:" { for (i = 2; i <= NF; i++) print $i }' "$T/.out" | sort | tr '\n' ' ')" '0 1 2 '
expect_eq 'tokens computed over the run: (12-1)*3' \
    "$(awk '$1 == "num_tokens:" { s += $2 } END { print s }' "$T/.out")" 33

# --- bad input: exit 2 or 1, a message naming the value, empty stdout ----
expect_fail 1 'table too short for the positions' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,14
grep -q 'request 2' "$T/.err"; _report $? 'the message names request 2' "$(cat "$T/.err")"
expect_fail 2 'negative scheduled count' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,-2,5
grep -q 'request 1' "$T/.err"; _report $? 'the message names request 1' "$(cat "$T/.err")"
expect_fail 2 'negative computed count' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,5 --computed 0,0,-1
expect_fail 1 'map: request longer than --max-model-len' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,5 \
    --computed 0,0,8 --max-model-len 12
grep -q 'request 2' "$T/.err"; _report $? 'the message names request 2' "$(cat "$T/.err")"
expect_fail 2 'plan: prompt longer than --max-model-len' \
    kvslot plan --prompt-lens 3,20,8 --max-tokens 10 -B 2 --max-model-len 12
grep -q 'request 1' "$T/.err"; _report $? 'the message names request 1' "$(cat "$T/.err")"
expect_fail 2 '--cp-rank >= --cp-size' \
    kvslot map -B 4 --block-table "$B3" --scheduled 16 --cp-size 2 --cp-rank 2
expect_fail 2 'interleave does not divide the block size' \
    kvslot map -B 4 --block-table "$B3" --scheduled 16 --cp-size 2 --interleave 3
expect_fail 2 'mismatched list lengths' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,5 --computed 0,0
expect_fail 2 'plan: mismatched --output-lens' \
    kvslot plan --prompt-lens 3,2,8 --output-lens 1,2 --max-tokens 10 -B 2 --max-model-len 12
expect_fail 2 'plan: a pool too small for one request' \
    kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 --num-blocks 4
grep -q 'request 0 needs 6 blocks of 2 tokens' "$T/.err"; _report $? 'the message names request 0 and its need' "$(cat "$T/.err")"
expect_fail 1 'plan: state over --max-mem' \
    kvslot plan --prompt-lens 3 --max-tokens 10 -B 1 --max-model-len 100000 --max-mem 1M
grep -q 'needs [0-9]* bytes, more than --max-mem 1048576' "$T/.err"; _report $? 'the message gives the size needed' "$(cat "$T/.err")"
expect_fail 1 'more requests than table rows' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 1,1,1,1
expect_fail 2 '--pad-to below the token count' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,5 --pad-to 4
expect_fail 2 'unknown field' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,5 --fields slots
grep -q "unknown field 'slots' for map; valid: query_start_loc .* block_table\$" "$T/.err"; _report $? 'the --fields message lists the valid fields' "$(cat "$T/.err")"
grep -q "^Try 'kvslot map --help'" "$T/.err"; _report $? 'a usage error after parsing points at the subcommand help' "$(cat "$T/.err")"
expect_fail 2 'pcp: unknown field' kvslot pcp --pcp-size 2 --tokens 7 --layout vllm --fields rank,slots
grep -q "unknown field 'slots' for pcp --layout vllm; valid: num_tokens_per_rank .* seq_lens\$" "$T/.err"; _report $? 'the pcp --fields message lists the valid fields' "$(cat "$T/.err")"
expect_fail 1 'missing block table file' \
    kvslot map -B 2 --block-table "$T/nope.txt" --scheduled 3
expect_fail 2 'pcp --rank >= --pcp-size' kvslot pcp --pcp-size 2 --tokens 7 --rank 2
expect_fail 2 'pcp zero tokens' kvslot pcp --pcp-size 2 --tokens 7,0
expect_fail 2 'cplens --cp-rank >= --cp-size' kvslot cplens --cp-size 2 --cp-rank 2 --seq-lens 5
expect_fail 2 'unknown subcommand' kvslot frob
expect_fail 2 '-f with an unknown format' \
    kvslot cplens --cp-size 2 --seq-lens 5 -f png
expect_fail 2 'a list value that is not a number' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,x,5
grep -q -- "--scheduled: request 1: expected an integer >= 0, got 'x'" "$T/.err"; _report $? 'the message names the request and the value, not an int64 bound' "$(cat "$T/.err")"
# --dtype i32: values over 32 bits are refused, naming the request and
# value; i64 (the default) widens; unused columns and fitting values pass
printf '1 2 2147483647\n' >"$T/big.txt"
expect_out 'a block id near INT32_MAX widens to i64 slots' \
    'slot_mapping: 34359738352 34359738353' \
    kvslot map -B 16 --block-table "$T/big.txt" --scheduled 2 --computed 32 --fields slot_mapping -f text
expect_fail 1 '--dtype i32 refuses a slot over 32 bits' \
    kvslot map -B 16 --block-table "$T/big.txt" --scheduled 2 --computed 32 --dtype i32 -o "$T/i32.npy"
grep -q 'request 0: block 2147483647 of column 2 gives slots up to 34359738367' "$T/.err"; _report $? 'the message names the request, block and slot' "$(cat "$T/.err")"
[ ! -e "$T/i32.npy" ]; _report $? 'nothing written to -o'
ok '--dtype i32 ignores a huge id in a column the step does not use' \
    kvslot map -B 16 --block-table "$T/big.txt" --scheduled 3 --dtype i32 -o "$T/i32.npy"
printf '1\n1\n1\n' >"$T/three.txt"
ok '--dtype i32: token index 2 * 1073741823 + 1 = INT32_MAX fits' \
    kvslot map -B 16 --block-table "$T/three.txt" --scheduled 1,1,2 --max-model-len 1073741823 --dtype i32 --fields token_indices -o "$T/i32.npy"
expect_fail 1 '--dtype i32: token index one over INT32_MAX refused' \
    kvslot map -B 16 --block-table "$T/three.txt" --scheduled 1,1,3 --max-model-len 1073741823 --dtype i32 --fields token_indices -o "$T/i32.npy"
grep -q 'request 2: token index 2 \* --max-model-len 1073741823 + 2 exceeds 32 bits' "$T/.err"; _report $? 'the message names the request and index' "$(cat "$T/.err")"
# every option of SUB --help (short form where it has one) is in the
# SYNOPSIS of SUB in kvslot.1 and in its OPTIONS, and every SYNOPSIS option
# of SUB is in SUB --help
MAN1="$KV_TOP/man/kvslot.1"
for sub in map plan pcp cplens; do
    kvslot $sub --help >"$T/help.txt" 2>&1
    helpopts=$(sed -n 's/^  \(-[a-zA-Z]\), --[a-z-]*.*/\1/p; s/^  \(--[a-z-]*\).*/\1/p' "$T/help.txt" |
        grep -v -- '^-h$\|^--version$' | sort -u)
    synopts=$(awk -v s="$sub" '/^\.Sh SYNOPSIS/ { on = 1 } /^\.Sh DESCRIPTION/ { on = 0 }
        !on { next }
        $1 == ".Cm" && $2 == s { cur = 1; next }
        $1 == ".Nm" || $1 == ".Pp" { cur = 0 }
        $1 == ".Nm" { out = 0 }
        cur && /output options/ { oo = 1 }
        /^Output options/ { out = 1 }
        cur || (out && oo) { for (i = 1; i < NF; i++) {
            if ($i ~ /^\.?[A-Z][a-z]$/) m = $i
            if ($i ~ /^\.?Fl$/ || ($i == "|" && m ~ /Fl$/)) print "-" $(i+1) } }' "$MAN1" |
        sort -u)
    for o in $helpopts; do
        printf '%s\n' "$synopts" | grep -qx -- "$o"; _report $? "$sub --help $o is in the kvslot.1 synopsis of $sub"
        grep -q "^\.It .*Fl ${o#-}\( \|\$\)" "$MAN1"; _report $? "$sub --help $o is in kvslot.1 OPTIONS"
    done
    for o in $synopts; do
        printf '%s\n' "$helpopts" | grep -qx -- "$o"; _report $? "kvslot.1 synopsis $sub $o is in $sub --help"
    done
done
# short and empty text rows: padded with 0 where unused, refused where a
# position needs a column past the row's end (it would write to block 0)
printf '1 2 3\n\n4\n' >"$T/short.txt"
expect_out 'a short row pads with 0 where no position reaches' \
    'slot_mapping: 2 3 4 5 6 8 9
block_table: 1 2 3
block_table: 0 0 0
block_table: 4 0 0' \
    kvslot map -B 2 --block-table "$T/short.txt" --scheduled 5,0,2 --fields slot_mapping,block_table -f text
expect_fail 1 'an empty row for a request with a token' \
    kvslot map -B 2 --block-table "$T/short.txt" --scheduled 5,1,2
grep -q "request 1: position 0 needs block table column 0, row 1 (line 2 of '.*short.txt') has 0 entries" "$T/.err"; _report $? 'the message names the request, position and row length' "$(cat "$T/.err")"
expect_fail 1 'a position past the end of a short row' \
    kvslot map -B 2 --block-table "$T/short.txt" --scheduled 5,0,3
expect_fail 1 'a position past the end of a short row, CP world 2' \
    kvslot map -B 2 --block-table "$T/short.txt" --scheduled 5,0,5 --cp-size 2
ok 'the same row holds 4 positions over CP world 2' \
    kvslot map -B 2 --block-table "$T/short.txt" --scheduled 5,0,4 --cp-size 2 -f text
expect_fail 1 'pcp: a position past the end of a short row' \
    kvslot pcp --pcp-size 2 --tokens 5,1,5 -B 2 --block-table "$T/short.txt"
expect_fail 2 'plan --dtype i32 with a pool whose slots pass 32 bits' \
    kvslot plan --prompt-lens 3 --max-tokens 4 -B 1024 --max-model-len 4096 --num-blocks 3000000 --dtype i32 -o "$T/p32.npy"
grep -q 'a pool of 3000000 blocks of 1024 tokens (--num-blocks) has slots past 32 bits' "$T/.err"; _report $? 'the message names the pool and block size' "$(cat "$T/.err")"
[ ! -e "$T/p32.npy" ]; _report $? 'nothing written to -o'
expect_fail 2 'pcp --dcp-size without a block table (it would do nothing)' \
    kvslot pcp --pcp-size 2 --tokens 5 --dcp-size 2
grep -q -- '--dcp-size only shapes slot_mapping: give -B and --block-table too' "$T/.err"; _report $? 'the message says what is missing' "$(cat "$T/.err")"
expect_fail 2 'pcp --layout vllm --dcp-rank without a block table' \
    kvslot pcp --layout vllm --pcp-size 2 --tokens 5 --dcp-size 2 --dcp-rank 1
grep -q -- '--dcp-rank only shapes slot_mapping' "$T/.err"; _report $? 'the message names --dcp-rank' "$(cat "$T/.err")"
expect_fail 2 'pcp --interleave without a block table' \
    kvslot pcp --pcp-size 2 --tokens 5 --interleave 2
expect_fail 2 'a bad --max-mem' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3 --max-mem 1X
expect_eq 'the --max-mem message names the option once' "$(head -1 "$T/.err")" \
    "kvslot map: --max-mem: bad size '1X' (use a number with an optional K, M, G or T suffix)"
# pcp and cplens --dtype i32: a value over 32 bits fails (it was silently
# truncated) and nothing reaches the output
expect_fail 1 'pcp --dtype i32 with slots over 32 bits' \
    kvslot pcp --pcp-size 2 --tokens 3 --computed 64 -B 16 --block-table "$T/big.txt" --dtype i32 -f npy
grep -q 'slot_mapping holds 34359738352, over 32 bits' "$T/.err"; _report $? 'the message names the field and value' "$(cat "$T/.err")"
expect_fail 1 'cplens --dtype i32 with a length over 32 bits' \
    kvslot cplens --cp-size 1 --seq-lens 5,3000000000 --dtype i32 -f npy
grep -q 'cp_local_seq_lens holds 3000000000, over 32 bits' "$T/.err"; _report $? 'the message names the field and value' "$(cat "$T/.err")"
expect_out 'cplens --dtype i32: 3000000000 over 2 ranks fits' \
    'cp_local_seq_lens: 1500000000 1500000000' kvslot cplens --cp-size 2 --seq-lens 3000000000 --dtype i32 -f text
ok 'map --help' kvslot map --help
ok 'plan --help' kvslot plan --help
ok 'pcp --help' kvslot pcp --help
# --dcp-size alone places decodes in the vllm layout: its own option in the
# synopsis, and --help names what that layout writes
kvslot pcp --help >"$T/pcp-help.txt" 2>&1
grep -q 'with --layout' "$T/pcp-help.txt" && grep -q 'also places decodes' "$T/pcp-help.txt"
_report $? 'pcp --help: the vllm layout and --dcp-size' "$(cat "$T/pcp-help.txt")"
if command -v mandoc >/dev/null 2>&1; then
    mandoc -Tascii "$KV_TOP/man/kvslot.1" 2>/dev/null | col -b | tr -s ' \n' '  ' >"$T/kvslot-man.txt"
    grep -q '\[--dcp-size d\] \[--dcp-rank r\]' "$T/kvslot-man.txt"
    _report $? 'kvslot(1) synopsis: --dcp-size and --dcp-rank each optional'
fi
ok 'cplens --help' kvslot cplens --help
# text block tables: a '#' comment line is skipped, not an empty row; a u64
# .npy id past INT64_MAX is refused, not wrapped
printf '# two requests\n1 2 3\n   # between\n4 5\n' >"$T/bt-comment.txt"
expect_out 'comment lines in a block table are skipped' 'slot_mapping: 2 3 8 9' \
    kvslot map -B 2 --block-table "$T/bt-comment.txt" --scheduled 2,2 -f text --fields slot_mapping
expect_fail 1 'a u64 block id past INT64_MAX is refused' \
    kvslot map -B 2 --block-table "$VEC/slots/table_u64_past_int64.npy" --scheduled 2 -f text
expect_eq 'the message says the id is too large' \
    "$(grep -c 'value 9223372036854775813 at index 1 is too large' "$T/.err")" 1
# pcp and cplens speak .npy too: the arrays of the text form, in its order
hdrs() { tr -c '[:print:]' '\n' <"$1" | grep -o "'descr': '[<a-z0-9]*'\|'shape': ([0-9, ]*)" | tr '\n' ' '; }
ok 'pcp writes npy' kvslot pcp --pcp-size 2 --tokens 7 --rank 0 \
    --fields positions,pcp_tokens -f npy -o "$T/pcp.npy"
expect_eq 'pcp npy: pcp_tokens [1] then positions [4], the fixed order' "$(hdrs "$T/pcp.npy")" \
    "'descr': '<i8' 'shape': (1,) 'descr': '<i8' 'shape': (4,) "
expect_eq 'pcp npy: the values of the text form (4 | 0 1 6 7)' \
    "$(od -An -td8 -j128 -N8 "$T/pcp.npy" | tr -s ' \n' ' ')|$(od -An -td8 -j264 "$T/pcp.npy" | tr -s ' \n' ' ')" \
    ' 4 | 0 1 6 7 '
ok 'pcp --dtype i32 npy' kvslot pcp --pcp-size 2 --tokens 7 --rank 1 --fields positions --dtype i32 -f npy -o "$T/pcp32.npy"
expect_eq 'pcp npy i32: positions 2 3 4 5' "$(hdrs "$T/pcp32.npy")|$(od -An -td4 -j128 "$T/pcp32.npy" | tr -s ' \n' ' ')" \
    "'descr': '<i4' 'shape': (4,) | 2 3 4 5 "
ok 'cplens writes npy' kvslot cplens --cp-size 2 --seq-lens 5,7,9,1 -f npy -o "$T/cpl.npy"
expect_eq 'cplens npy: [R, W] int64, rows as the text lines' \
    "$(hdrs "$T/cpl.npy")|$(od -An -td8 -j128 "$T/cpl.npy" | tr -s ' \n' ' ')" \
    "'descr': '<i8' 'shape': (4, 2) | 3 2 4 3 5 4 1 0 "
# a table too narrow for the positions when --max-model-len allows them:
# data error naming the request, position and column
expect_fail 1 'table too narrow for a position under a larger --max-model-len' \
    kvslot map -B 2 --block-table "$V/seed004_step1.txt" --scheduled 3,2,14 --max-model-len 100
grep -q 'request 2: position 13 needs block table column 6, the table has 6 columns' "$T/.err"; _report $? 'the message names the request, position and column' "$(cat "$T/.err")"
# every field a subcommand can write is named in kvslot.1 (a .Va line)
for args in "map -B 2 --block-table $V/seed004_step1.txt --scheduled 1" \
    "plan --prompt-lens 3 --max-tokens 4 -B 2 --max-model-len 12" \
    "pcp --pcp-size 2 --tokens 7" "pcp --layout vllm --pcp-size 2 --tokens 7"; do
    kvslot $args --fields nope >/dev/null 2>"$T/.err"
    fl=$(sed -n 's/.*; valid: //p' "$T/.err")
    [ -n "$fl" ]; _report $? "kvslot $args: --fields lists the valid fields"
    for f in $fl; do
        grep -qE "^\.(It )?Va (.*[ ,])?$f( |,|\$)" "$KV_TOP/man/kvslot.1"; _report $? "${args%% *} field $f is named in kvslot.1"
    done
done
done_testing
