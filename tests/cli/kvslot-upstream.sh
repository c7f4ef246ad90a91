#!/bin/sh
# kvslot-upstream.sh - cases where an earlier kvslot disagreed with the
# upstream code it reproduces; each expected value was computed with the
# upstream expressions (vLLM, vllm-ascend), not with kvslot.
. "$KV_TOP/tests/lib.sh"

# --- pcp: which leading requests are decodes ------------------------------
# vllm-ascend classify_decode_request_mask needs context (computed > 0) and
# vLLM MRV2 is_prefilling is computed < prompt length: a one-token request
# with nothing computed is a prefill in both, padded and split like one.
expect_out 'pcp ascend: a 1-token request with nothing computed is a prefill' \
'pcp_tokens: 2 4
num_pcp_pads: 3 2
pcp_unpad_mask: 1 0 0 0 1 1 1 1 1 1 0 0
pcp_allgather_restore_idx: 0 6 7 1 2 3 8 9 10 11 4 5' \
    kvslot pcp --pcp-size 2 --tokens 1,6 --computed 0,0 -f text \
    --fields pcp_tokens,num_pcp_pads,pcp_unpad_mask,pcp_allgather_restore_idx
expect_out 'pcp vllm: a 1-token request with nothing computed is split, not replicated' \
'num_tokens_per_rank: 3 4
padded_gather_idx: 0 1 2 0 3 4 5 6
gathered_kv_write_mask: 1 1 1 0 1 1 1 1
hidden_restore_idx: 0 1 2 4 5 6 7' \
    kvslot pcp --layout vllm --pcp-size 2 --tokens 1,6 --computed 0,0 -f text \
    --fields num_tokens_per_rank,padded_gather_idx,gathered_kv_write_mask,hidden_restore_idx
expect_out 'pcp: with context a 1-token request is still a decode' \
'pcp_tokens: 1 4
num_pcp_pads: 1 2' \
    kvslot pcp --pcp-size 2 --tokens 1,6 --computed 9,0 -f text \
    --fields pcp_tokens,num_pcp_pads
expect_out 'pcp: without --computed the docstring default stands' \
'pcp_tokens: 1 4 4' \
    kvslot pcp --pcp-size 2 --tokens 1,5,8 -f text --fields pcp_tokens

# --- pcp --layout vllm: a rank without tokens -----------------------------
# MRV2 partition_batch gives a rank with no segment one empty row of
# request 0, not an empty batch; with no local tokens it zeroes the row's
# sequence length (real_seq_lens.zero_()), whatever request 0 has computed.
expect_out 'pcp vllm: an empty rank keeps one empty row of request 0' \
'rank: 2
positions:
req_indices:
row_req_ids: 0
query_start_loc: 0 0
seq_lens: 0' \
    kvslot pcp --layout vllm --pcp-size 4 --tokens 2 --computed 2 --rank 2 -f text \
    --fields rank,positions,req_indices,row_req_ids,query_start_loc,seq_lens

# --- plan: a prompt of max_model_len tokens -------------------------------
# vLLM's InputProcessor._validate_prompt_len refuses a generation prompt of
# max_model_len tokens ("plus the number of requested output tokens (at
# least 1) is longer than the maximum model length"); the scheduler would
# otherwise cap a running chunk at max_model_len - 1 - computed and never
# finish it.
expect_fail 2 'plan: a prompt of --max-model-len tokens is refused' \
    kvslot plan --prompt-lens 3,12 --max-tokens 10 -B 2 --max-model-len 12
grep -q 'request 1: prompt length 12' "$T/.err"; _report $? 'the message names request 1 and its length' "$(cat "$T/.err")"
ok 'plan: a prompt of --max-model-len - 1 tokens runs' \
    kvslot plan --prompt-lens 3,11 --max-tokens 10 -B 2 --max-model-len 12 -f text

# --- plan --reorder decode-extend-prefill ---------------------------------
# The newest vLLM reorder_batch_to_split_decodes_and_prefills orders the
# batch decode (context, <= 1 token), extend (context, more tokens), prefill
# (no context) and resolves the permutation cycle by cycle; the older form
# (split-decodes) only moves one-token requests to the front.  Expected rows
# from a transcription of the v1 scheduler, persistent batch and that
# function.
REG="kvslot plan --prompt-lens 2,2,3,2 --output-lens 3,1,3,1 --max-tokens 5 -B 2 --max-model-len 6 --steps 2 -f text --fields step,req_ids,num_scheduled_tokens,num_computed_tokens"
expect_out 'reorder decode-extend-prefill: extend before prefill, fresh 1-token prompt stays a prefill' \
'step: 1
req_ids: 0 1 2
num_scheduled_tokens: 2 2 1
num_computed_tokens: 0 0 0
step: 2
req_ids: 0 2 3
num_scheduled_tokens: 1 2 2
num_computed_tokens: 2 1 0' $REG --reorder decode-extend-prefill
expect_out 'reorder split-decodes (older vLLM) on the same plan' \
'step: 1
req_ids: 2 1 0
num_scheduled_tokens: 1 2 2
num_computed_tokens: 0 0 0
step: 2
req_ids: 0 3 2
num_scheduled_tokens: 1 2 2
num_computed_tokens: 2 0 1' $REG --reorder split-decodes
expect_fail 2 'reorder: an unknown order' $REG --reorder sideways

# --- block tables of the newest vLLM --------------------------------------
# vLLM's block_table.py now sizes rows with get_block_table_width: the
# column count is rounded up to a multiple of 128 / gcd(128, block_size)
# (rows hold a multiple of lcm(128, block_size) tokens).  For block sizes
# dividing 128 that is the earlier 128 / block_size rule; for 48 it is 8
# columns (11 -> 16), for 96 it is 4 (6 -> 8), where 128 // B gave 2 and 1.
expect_out 'round-stride, block size 48: rows of 16 columns' \
'block_table_indices: 0 0 0 16 16 32 32 32 32 32' \
    kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 48 --max-model-len 500 \
    --steps 1 --round-stride --fields block_table_indices -f text
expect_out 'round-stride, block size 96: rows of 8 columns' \
'block_table_indices: 0 0 0 8 8 16 16 16 16 16' \
    kvslot plan --prompt-lens 3,2,8 --max-tokens 10 -B 96 --max-model-len 500 \
    --steps 1 --round-stride --fields block_table_indices -f text

# The slot-mapping kernel now takes KV_CACHE_BLOCK_SIZE and
# BLOCKS_PER_KV_BLOCK and builds the CP virtual block from the allocation
# block, as vllm-ascend does: interleave 4 over kernel blocks of 2 inside
# allocation blocks of 4 is a valid configuration (block_size % I == 0).
expect_out 'hybrid + CP: the default virtual block is the allocation block (I=4 > K=2 accepted)' \
'slot_mapping: 40 41 42 43 -1 -1 -1 -1
slot_mapping: -1 -1 -1 -1 40 41 42 43' \
    kvslot map -B 4 --kernel-block-size 2 --block-table "$VEC/slots/b4_seven_tokens.txt" \
    --scheduled 8 --cp-size 2 --interleave 4 --all-ranks --fields slot_mapping -f text

# --- hybrid blocks: the null block in use ---------------------------------
# map_to_kernel_blocks (vLLM) and _convert_physical_to_logical_blocks
# (vllm-ascend) expand every block id a request holds, the null block 0
# included (0 -> 0 .. k-1, e.g. sliding-window blocks replaced by the null
# block); only the unused tail of a row stays 0.
printf '0 5 0 0\n' >"$T/null.txt"
expect_out 'hybrid: a null block before the last used block expands like any id' \
'block_table: 0 1 10 11 0 0 0 0
slot_mapping: 20 21' \
    kvslot map -B 4 --kernel-block-size 2 --block-table "$T/null.txt" \
    --scheduled 2 --computed 4 --fields block_table,slot_mapping -f text

done_testing
