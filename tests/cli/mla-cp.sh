#!/bin/sh
# mla-cp.sh - kvslot reorg: the MLA context-parallel AllGatherKV map
# (tests/unit/mla_cp.c proves it end to end with attention; these are the
# numbers of small cases worked by hand and the errors).
. "$KV_TOP/tests/lib.sh"
printf '7 8\n' >"$T/bt1.txt"
printf '7 8\n9 0\n' >"$T/bt2.txt"

# DCP 2, I 1, one request of 5 context tokens: rank 0 holds 0 2 4 (local
# 0 1 2, slots 28 29 30 in block 7), rank 1 holds 1 3; 3 rows a rank,
# gathered [p0 p2 p4 | p1 p3 pad], reorganised [p0 p2 p4 p1 p3]
expect_out 'DCP 2, 5 tokens, by hand' 'chunk_size: 3
toks: 3
padded_local_chunk_seq_lens: 3
cu_seq_lens: 0 5
local_context_lens: 3 2
map: 0 0 0 0 0 0 28 0 0
map: 0 2 0 0 0 1 29 1 1
map: 0 4 0 0 0 2 30 2 2
map: 0 1 0 0 1 0 28 3 3
map: 0 3 0 0 1 1 29 4 4' \
    kvslot reorg -B 4 --block-table "$T/bt1.txt" --context-lens 5 --dcp-size 2 -f text

# PCP 2 x DCP 2 (rank = pcp * 2 + dcp), two requests of 6 and 2 tokens:
# request 0: ranks hold 0 4 | 1 5 | 2 | 3 (2 padded rows each), request 1:
# 0 | 1 | - | - (1 padded row); toks 3; the gathered row of rank r is
# r * 3 + offset
expect_out 'PCP 2 x DCP 2, two requests, by hand' 'chunk_size: 2
toks: 3
padded_local_chunk_seq_lens: 2 1
cu_seq_lens: 0 6 8
local_context_lens: 2 2 1 1
local_context_lens: 1 1 0 0
map: 0 0 0 0 0 0 28 0 0
map: 0 4 0 0 0 1 29 1 1
map: 0 1 0 0 1 0 28 3 2
map: 0 5 0 0 1 1 29 4 3
map: 0 2 0 1 0 0 28 6 4
map: 0 3 0 1 1 0 28 9 5
map: 1 0 0 0 0 0 36 2 6
map: 1 1 0 0 1 0 36 5 7' \
    kvslot reorg -B 4 --block-table "$T/bt2.txt" --context-lens 6,2 --pcp-size 2 --dcp-size 2 -f text

# chunks of 4 context tokens (local chunk 2 rows) over DCP 2: request of 6
ok 'chunked context' kvslot reorg -B 4 --block-table "$T/bt1.txt" --context-lens 6 \
    --dcp-size 2 --max-context-chunk 4 -f text
expect_eq 'two chunks: toks 2 1, cu 0 4 | 0 2' \
    "$(grep -E '^(toks|cu_seq_lens):' "$T/.out")" 'toks: 2 1
cu_seq_lens: 0 4
cu_seq_lens: 0 2'
ok 'npy stream' kvslot reorg -B 4 --block-table "$T/bt1.txt" --context-lens 5 --dcp-size 2 \
    -f npy -o "$T/m.npy"
[ -s "$T/m.npy" ]
_report $? 'wrote the arrays'

expect_fail 2 'max-context-chunk not a multiple of I P D' kvslot reorg -B 4 \
    --block-table "$T/bt1.txt" --context-lens 5 --dcp-size 2 --max-context-chunk 3
expect_fail 2 'interleave not dividing the block' kvslot reorg -B 4 \
    --block-table "$T/bt1.txt" --context-lens 5 --dcp-size 2 --interleave 3
expect_fail 1 'a context past the block table' kvslot reorg -B 4 \
    --block-table "$T/bt1.txt" --context-lens 40 --dcp-size 2
expect_fail 1 'more requests than block table rows' kvslot reorg -B 4 \
    --block-table "$T/bt1.txt" --context-lens 5,5 --dcp-size 2
expect_fail 2 'no requests' kvslot reorg -B 4 --block-table "$T/bt1.txt" --context-lens ''
done_testing
