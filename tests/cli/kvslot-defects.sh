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

# --- plan: every allocation that grows with the input counts ----------------
# a million-token prompt: each step's seven token fields need 56 MB
expect_fail 1 'plan: the per-step arrays count against --max-mem' \
    kvslot plan --prompt-lens 1000000 --max-tokens 2147483647 -B 1048576 \
    --max-model-len 2147483647 --steps 1 --max-mem 20M -o "$T/p.npy"
msg_has 'plan: ... with the bytes needed, step metadata included' \
    'of step metadata and inputs) needs [0-9]* bytes, more than --max-mem 20971520'
expect_eq 'plan: ... and no output file' "$(ls "$T"/p.npy* 2>/dev/null)" ''
ok 'plan: the same plan within --max-mem' \
    kvslot plan --prompt-lens 1000000 --max-tokens 2147483647 -B 1048576 \
    --max-model-len 2147483647 --steps 1 --max-mem 100M -o "$T/p.npy"
# --all-ranks keeps every rank's padded row: 8 ranks x 10^8 slots
expect_fail 1 'plan: --all-ranks rows of --pad-to slots count' \
    kvslot plan --prompt-lens 10 --max-tokens 16 -B 2 --max-model-len 64 --cp-size 8 \
    --all-ranks --pad-to 100000000 --steps 1 --max-mem 1G -f text
msg_has 'plan: ... (7.2 GB: the rows and the padded copy)' 'needs 72[0-9]\{8\} bytes'
# --prompts is read within --max-mem, not a fixed 1 GiB
awk 'BEGIN { for (i = 0; i < 250000; i++) printf "%d ", 1000 + i % 9000; print "" }' >"$T/long.txt"
expect_fail 1 'plan: a --prompts table over --max-mem' \
    kvslot plan --prompts "$T/long.txt" --max-tokens 64 -B 16 --max-model-len 400000 \
    --steps 1 --max-mem 1M -f text
msg_has 'plan: ... names --prompts' '^kvslot plan: --prompts: '
# the chunk-cache plan: a block table row of cdiv(M, B) columns a request
kvchunk split -f text --shape 2,2,16 --dtype f32 -o "$T/rag-segs.txt" - <<'TXT'
You are terse.##Rome is in Italy.##Where?
TXT
expect_fail 1 'plan --chunk-cache: its state counts against --max-mem' \
    kvslot plan --chunk-cache --segments "$T/rag-segs.txt" --max-tokens 2147483647 -B 4 \
    --max-model-len 2147483647 --chunk-pool-blocks 16 --steps 3 --max-mem 100M -f text
msg_has 'plan --chunk-cache: ... with the bytes needed' \
    'the chunk-cache plan needs [0-9]* bytes, more than --max-mem 104857600'

# --- map: the output is held to --max-mem before any work --------------------
printf '3 5\n' >"$T/bt2.txt"
expect_fail 1 'map --all-ranks --pad-to: an output over --max-mem is refused at once' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 12 --cp-size 8 --all-ranks \
    --pad-to 1000000000 --max-mem 1G -o "$T/m.npy"
msg_has 'map: ... with its size' 'the output of 8000000078 entries needs 64000000624 bytes, more than --max-mem 1073741824'
expect_eq 'map: ... and no output file' "$(ls "$T"/m.npy* 2>/dev/null)" ''
expect_fail 1 'map --pad-to alone: the same limit' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 12 --pad-to 1000000000 --max-mem 1G -f text
# --dtype i32 halves an npy output: 4 bytes an entry
ok 'map: --dtype i32 counts 4 bytes an entry' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 8 --fields slot_mapping \
    --pad-to 250000 --max-mem 1000020 -f npy --dtype i32 -o "$T/m32.npy"
expect_fail 1 'map: ... and 8 in i64' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 8 --fields slot_mapping \
    --pad-to 250000 --max-mem 1000020 -f npy -o "$T/m64.npy"
# hybrid blocks: the expanded table counts beside the one read
awk 'BEGIN { for (i = 1; i <= 20000; i++) printf "%d ", i; print "" }' >"$T/wide.txt"
expect_fail 1 'map: the kernel-block table counts against --max-mem' \
    kvslot map -B 1024 --kernel-block-size 1 --block-table "$T/wide.txt" --scheduled 1 \
    --max-mem 10M -f text
msg_has 'map: ... named' 'the block table with its kernel blocks needs 164000000 bytes'

# --- the default CP convention is vllm-ascend 0.23.0.post1's: PCP x DCP -----
# (its BlockTable._compute_pcp_dcp_slot_mapping gives these slots)
expect_out 'map: PCP x DCP by default (vllm-ascend 0.23.0.post1)' \
    'slot_mapping: -1 -1 12 -1 -1 -1 13 -1 -1 -1 14 -1' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 12 --cp-size 2 --pcp-size 2 \
    --pcp-rank 1 --cp-rank 0 --fields slot_mapping -f text
expect_out 'map: --cp-convention dcp is vLLM 0.33.0'"'"'s' \
    'slot_mapping: 12 -1 13 -1 14 -1 15 -1 20 -1 21 -1' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 12 --cp-size 2 --pcp-size 2 \
    --pcp-rank 1 --cp-rank 0 --cp-convention dcp --fields slot_mapping -f text
expect_fail 2 'map: an unknown --cp-convention' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 4 --cp-convention pcp -f text

# --- async scheduling: what kvslot(1) says about it holds ---------------------
tr='--prompt-lens 1,50 --output-lens 2,4 --arrivals 1,3 -B 2 --max-model-len 64 --max-tokens 200 --decode -f text --fields step,slot_mapping'
# shellcheck disable=SC2086
kvslot plan $tr >"$T/sync.txt"
# shellcheck disable=SC2086
kvslot plan $tr --async-scheduling >"$T/async.txt"
expect_eq 'async: step 3 slots differ from the synchronous engine (as documented)' \
    "$(grep '^slot_mapping:' "$T/sync.txt" | sed -n 3p | cut -d' ' -f2-4) | $(grep '^slot_mapping:' "$T/async.txt" | sed -n 3p | cut -d' ' -f2-4)" \
    '2 3 4 | 4 5 6'
expect_eq 'async: no trailing empty step after the last token (as documented)' \
    "$(grep -c '^step:' "$T/async.txt") $(tail -2 "$T/async.txt" | head -1)" '6 step: 6'
expect_eq 'kvslot(1) no longer says the two engines give the same tables' \
    "$(grep -c 'engines give the same block' "$KV_TOP/man/kvslot.1")" 0
expect_eq 'kvslot(1) says the trailing schedule() is left out' \
    "$(grep -c 'trailing step is left out' "$KV_TOP/man/kvslot.1")" 1

# --- pcp: the split and its held output count against --max-mem --------------
expect_fail 1 'pcp: a split over --max-mem is refused before any work' \
    kvslot pcp --pcp-size 2 --tokens 10000000 -f npy -o "$T/pcp.npy" --max-mem 1G
msg_has 'pcp: ... with the bytes needed' 'the split needs [0-9]* bytes, more than --max-mem 1073741824'
expect_eq 'pcp: ... and no output file' "$(ls "$T"/pcp.npy* 2>/dev/null)" ''
ok 'pcp: a small split within --max-mem' \
    kvslot pcp --pcp-size 2 --tokens 1000,7 -f npy -o "$T/pcp.npy" --max-mem 10M

# --- options that shape a field --fields leaves out are refused -----------------
expect_fail 2 'map: --pad-to without slot_mapping among --fields' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 4 --pad-to 16 --fields positions -f text
msg_has 'map: ... names --pad-to' '--pad-to shapes slot_mapping, which --fields leaves out'
expect_fail 2 'map: --all-ranks without slot_mapping among --fields' \
    kvslot map -B 4 --block-table "$T/bt2.txt" --scheduled 4 --cp-size 2 --all-ranks \
    --fields positions -f text
expect_fail 2 'plan: --pad-to without slot_mapping among --fields' \
    kvslot plan --prompt-lens 3 --max-tokens 8 -B 2 --max-model-len 16 --pad-to 16 \
    --fields step,positions -f text
ok 'plan: --pad-to with slot_mapping' \
    kvslot plan --prompt-lens 3 --max-tokens 8 -B 2 --max-model-len 16 --pad-to 16 \
    --fields step,slot_mapping -f text

# --- cplens: every rank's lengths count against --max-mem ----------------------
expect_fail 1 'cplens: 2000 requests x 65536 ranks over --max-mem' \
    kvslot cplens --cp-size 65536 --seq-lens "$(awk 'BEGIN { for (i = 0; i < 2000; i++) printf "%s7", i ? "," : "" }')" \
    --max-mem 100M -f text
msg_has 'cplens: ... with the bytes needed' 'the table of per-rank lengths needs 3801088000 bytes'
expect_out 'cplens: a small table within --max-mem' 'cp_local_seq_lens: 3 2' \
    kvslot cplens --cp-size 2 --seq-lens 5 --max-mem 1M -f text

done_testing
