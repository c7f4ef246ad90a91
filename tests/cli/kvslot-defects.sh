#!/bin/sh
# kvslot-defects.sh - kvslot's refusals and limits: overflow, --max-mem
# counted over every allocation that grows with the input, outputs checked
# before any work, option combinations that would be ignored, and the
# context chunking of both engines.
. "$KV_TOP/tests/lib.sh"

# the message of the last expect_fail holds a string
msg_has() {
    if grep -q -- "$2" "$T/.err"; then _report 0 "$1"
    else _report 1 "$1" "stderr: $(head -c 400 "$T/.err")"; fi
}

# --- reorg: slots past int64 ----------------------------------------------
echo 9223372036854775807 >"$T/big.txt"
expect_fail 1 'reorg: a block id whose slots pass int64' \
    kvslot reorg -B 2 --block-table "$T/big.txt" --context-lens 1 -f text
msg_has 'reorg: ... names the block and the overflow' 'block_table\[0\]\[0\] = 9223372036854775807: its slots overflow int64'
echo 4611686018427387902 >"$T/edge.txt"
expect_out 'reorg: the largest block id whose slots fit' 'chunk_size: 1
toks: 1
padded_local_chunk_seq_lens: 1
cu_seq_lens: 0 1
local_context_lens: 1
map: 0 0 0 0 0 0 9223372036854775804 0 0' \
    kvslot reorg -B 2 --block-table "$T/edge.txt" --context-lens 1 -f text

# --- reorg: the whole map counts against --max-mem --------------------------
echo 1 >"$T/one.txt"
expect_fail 1 'reorg: a map over --max-mem is refused' \
    kvslot reorg -B 1048576 --block-table "$T/one.txt" --context-lens 1000000 --max-mem 10M -f text
msg_has 'reorg: ... with the bytes it needs' 'the map of 1000000 context tokens in 1 chunks needs [0-9]* bytes, more than --max-mem 10485760'
# the size is known before the table is read: a missing table is not reached
expect_fail 1 'reorg: the limit is checked before the table is read' \
    kvslot reorg -B 1048576 --block-table "$T/missing.txt" --context-lens 1000000 --max-mem 10M -f text
msg_has 'reorg: ... (the message is the limit)' 'more than --max-mem'
ok 'reorg: the same map within --max-mem' \
    kvslot reorg -B 1048576 --block-table "$T/one.txt" --context-lens 1000 --max-mem 10M -f text
# 2^36 chunks of one request would not fit any memory: refused at once
expect_fail 1 'reorg: 2^36 vLLM chunks are refused, not walked' \
    kvslot reorg -B 16 --block-table "$T/one.txt" --context-lens 1099511627776 \
    --context-chunking vllm --workspace 16 -f text

# --- reorg --context-chunking vllm ---------------------------------------------
printf '1 2 3 4 5 6 7 8\n0\n9 10 11 12 13 14 15 16\n' >"$T/r3.txt"
# a request without context ends a chunk: 5, 0, 7 is two chunks
expect_out 'reorg vllm: contexts 5,0,7 in two chunks' 'chunk_size: 65536
toks: 5 7
chunk_starts: 0 0 0
chunk_starts: 0 0 0
chunk_seq_lens: 5 0 0
chunk_seq_lens: 0 0 7
padded_local_chunk_seq_lens: 5 0 0
padded_local_chunk_seq_lens: 0 0 7
cu_seq_lens: 0 5 5 5
cu_seq_lens: 0 0 0 7
local_context_lens: 5
local_context_lens: 0
local_context_lens: 7
map: 0 0 0 0 0 0 1 0 0
map: 0 1 0 0 0 1 2 1 1
map: 0 2 0 0 0 2 3 2 2
map: 0 3 0 0 0 3 4 3 3
map: 0 4 0 0 0 4 5 4 4
map: 2 0 1 0 0 0 9 0 0
map: 2 1 1 0 0 1 10 1 1
map: 2 2 1 0 0 2 11 2 2
map: 2 3 1 0 0 3 12 3 3
map: 2 4 1 0 0 4 13 4 4
map: 2 5 1 0 0 5 14 5 5
map: 2 6 1 0 0 6 15 6 6' \
    kvslot reorg -B 1 --block-table "$T/r3.txt" --context-lens 5,0,7 --context-chunking vllm -f text
# DCP 2, workspace 4 rows (2 a rank): 5 = 4 + 1, 7 = 4 + 3 (splits at the
# alignment lcm(B, I x D) = 2), as vLLM's plan_mla_context_chunks gives
kvslot reorg -B 2 --block-table "$T/r3.txt" --context-lens 5,0,7 --context-chunking vllm \
    --workspace 4 --dcp-size 2 -f text >"$T/v2.txt"
expect_eq 'reorg vllm: DCP 2, requests split across chunks' "$(sed -n '2,10p' "$T/v2.txt")" 'toks: 2 1 2 2
chunk_starts: 0 0 0
chunk_starts: 4 0 0
chunk_starts: 0 0 0
chunk_starts: 0 0 4
chunk_seq_lens: 4 0 0
chunk_seq_lens: 1 0 0
chunk_seq_lens: 0 0 4
chunk_seq_lens: 0 0 3'
# the gathered rows of chunk 0: rank 0 holds positions 0 2, rank 1 1 3
expect_eq 'reorg vllm: DCP 2, the first chunk gathered and reorganised' \
    "$(grep '^map: 0 [0-9]* 0 ' "$T/v2.txt")" 'map: 0 0 0 0 0 0 2 0 0
map: 0 2 0 0 0 1 3 1 1
map: 0 1 0 0 1 0 2 2 2
map: 0 3 0 0 1 1 3 3 3'
# the workspace is rounded up as vLLM aligns it: 3 rows become 4
kvslot reorg -B 2 --block-table "$T/r3.txt" --context-lens 5,0,7 --context-chunking vllm \
    --workspace 3 --dcp-size 2 -f text >"$T/v3.txt"
expect_file_eq 'reorg vllm: --workspace rounded up to the alignment' "$T/v3.txt" "$T/v2.txt"
expect_fail 2 'reorg vllm: --max-context-chunk is vllm-ascend'"'"'s, refused' \
    kvslot reorg -B 1 --block-table "$T/r3.txt" --context-lens 5,0,7 --context-chunking vllm \
    --max-context-chunk 4 -f text
expect_fail 2 'reorg: --workspace without --context-chunking vllm is refused' \
    kvslot reorg -B 1 --block-table "$T/r3.txt" --context-lens 5,0,7 --workspace 4 -f text
expect_fail 2 'reorg vllm: PCP is refused (vLLM chunks over DCP only)' \
    kvslot reorg -B 1 --block-table "$T/r3.txt" --context-lens 5,0,7 --context-chunking vllm \
    --pcp-size 2 -f text
expect_fail 2 'reorg: an unknown --context-chunking' \
    kvslot reorg -B 1 --block-table "$T/r3.txt" --context-lens 5 --context-chunking tpu -f text
expect_fail 1 'reorg: --dtype i32 with a slot over 32 bits writes nothing' \
    kvslot reorg -B 2 --block-table "$T/edge.txt" --context-lens 1 -f npy --dtype i32

done_testing
