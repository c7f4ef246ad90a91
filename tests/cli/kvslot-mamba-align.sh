#!/bin/sh
# kvslot-mamba-align.sh - kvslot plan with Mamba groups in cache mode
# align (vLLM 0.33.0's MambaManager and _mamba_block_aligned_split):
# kvslot(1)'s worked example exactly; the mode vLLM derives from prefix
# caching; sub-block chunks when a block is wider than the budget; the
# refusals; beside an attention group of another block size.  The invariants over random plans are tests/unit/plan_mamba.c;
# vLLM itself is make crosscheck CROSSCHECK=kvslot-hybrid (its
# full+mamba-align mix).
. "$KV_TOP/tests/lib.sh"
printf '1 2 3 4 5 6 7 8 9 10\n1 2 3 4 5 6 7 8 9 10 11 12 13\n' >"$T/p.txt"
EX="--prompts $T/p.txt --arrivals 1,3 --enable-prefix-caching --output-lens 3,2 --max-tokens 8 -B 4 --max-model-len 16 --num-blocks 12 --kv-groups mamba=16384,full --kernel-block 4 --decode -f text"

# --- kvslot(1), KV-cache groups in the plan: the Mamba align example ----
expect_out 'the Mamba align example of kvslot(1), step by step' "step: 1
req_ids: 0
num_scheduled_tokens: 8
num_cached_tokens: 0
block_table.g0: 0 1 0 0
block_table.g1: 2 3 0 0
free_blocks: 8
step: 2
req_ids: 0
num_scheduled_tokens: 2
num_cached_tokens: 0
block_table.g0: 0 1 4 0
block_table.g1: 2 3 5 0
free_blocks: 6
step: 3
req_ids: 0 1
num_scheduled_tokens: 1 4
num_cached_tokens: 0 8
block_table.g0: 0 0 4 0
block_table.g0: 0 1 6 0
block_table.g1: 2 3 5 0
block_table.g1: 2 3 7 0
free_blocks: 4
step: 4
req_ids: 0 1
num_scheduled_tokens: 1 1
num_cached_tokens: 0 8
block_table.g0: 0 0 4 0
block_table.g0: 0 0 6 8
block_table.g1: 2 3 5 0
block_table.g1: 2 3 7 9
free_blocks: 3
step: 5
req_ids: 1
num_scheduled_tokens: 1
num_cached_tokens: 8
block_table.g0: 0 0 0 8
block_table.g1: 2 3 7 9
free_blocks: 6" kvslot plan $EX --fields step,req_ids,num_scheduled_tokens,num_cached_tokens,block_table,free_blocks

# --- the mode: align with prefix caching unless told ------------------
kvslot plan $EX --mamba-cache-mode align >"$T/align.txt"
kvslot plan $EX >"$T/default.txt"
expect_file_eq 'with prefix caching the mode is align unless told' \
    "$T/default.txt" "$T/align.txt"
N="--prompt-lens 10 --output-lens 3 --max-tokens 3 -B 4 --max-model-len 16 --num-blocks 10 --kv-groups mamba=16384,full --kernel-block 4 --decode -f text"
expect_out 'without it none: one state block of the model length' "block_table.g0: 1 0 0 0" \
    kvslot plan $N --fields block_table.g0 --steps 1
# a budget of 3 below the block of 4: a chunk advances inside the block,
# the next stops at its end; the row keeps the running state and the one
# before it
expect_out 'align without prefix caching: chunks inside a block wider than the budget' \
    "num_scheduled_tokens: 3
block_table.g0: 1 0 0 0
num_scheduled_tokens: 1
block_table.g0: 1 0 0 0
num_scheduled_tokens: 3
block_table.g0: 1 3 0 0
num_scheduled_tokens: 1
block_table.g0: 0 3 0 0
num_scheduled_tokens: 2
block_table.g0: 0 3 1 0
num_scheduled_tokens: 1
block_table.g0: 0 0 1 0
num_scheduled_tokens: 1
block_table.g0: 0 0 1 0" kvslot plan $N --mamba-cache-mode align --fields num_scheduled_tokens,block_table.g0

# --- refusals ---------------------------------------------------------
expect_fail 2 'an unknown Mamba cache mode' kvslot plan $N --mamba-cache-mode aligned
cp "$T/.err" "$T/e"
ok 'naming the modes' grep -q "expected none or align, got 'aligned'" "$T/e"
expect_fail 2 'mode none with prefix caching: vLLM asserts' kvslot plan $EX --mamba-cache-mode none
# --- align beside an attention group of another block size (vLLM runs
# it): the Mamba alignment makes the cache block 8 (4 x cdiv(16384, 4 x
# 2048)); the sliding layer's half-size page grows its block to 16.  A
# prompt of 10, 3 tokens a step: chunks of 3 and 3 (no boundary inside),
# then 2, stopping at the block boundary 8, then the last 2, when the
# Mamba row takes its second state (4) and the full group its second
# block (5), group by group; once 10 tokens are processed the Mamba
# state before the block of the last token (1) is freed; the sliding
# group's one block of 16 holds every token.
expect_out 'align beside a group of another block size, by hand' "num_scheduled_tokens: 3
block_table.g0: 1 0
block_table.g2: 3 0
num_scheduled_tokens: 3
block_table.g0: 1 0
block_table.g2: 3 0
num_scheduled_tokens: 2
block_table.g0: 1 0
block_table.g2: 3 0
num_scheduled_tokens: 2
block_table.g0: 1 4
block_table.g2: 3 5
num_scheduled_tokens: 1
block_table.g0: 0 4
block_table.g2: 3 5
num_scheduled_tokens: 1
block_table.g0: 0 4
block_table.g2: 3 5" \
    kvslot plan --prompt-lens 10 --max-tokens 3 -B 4 --max-model-len 16 --kernel-block 4 \
    --kv-groups mamba=16384,sliding=4:2048,full --mamba-cache-mode align \
    --output-lens 3 --decode -f text --fields num_scheduled_tokens,block_table.g0,block_table.g2
done_testing
