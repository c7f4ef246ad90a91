#!/bin/sh
# kvslot-hybrid.sh - kvslot plan with KV-cache groups (--kv-groups,
# --model-config): kvslot(1)'s worked example exactly; one full-attention
# group equals the plan without groups; --fields' per-group names; JSON;
# the refusals (context parallelism where vLLM 0.33.0 refuses it, groups
# plan does not model, bad group names).  The invariants over random
# plans are tests/unit/plan_groups.c; vLLM itself is make crosscheck
# CROSSCHECK=kvslot-hybrid.
. "$KV_TOP/tests/lib.sh"
Q="--prompt-lens 10 --output-lens 4 --max-tokens 8 -B 4 --max-model-len 16 --num-blocks 9 --decode"
P="$Q -f text"

# --- kvslot(1), KV-cache groups in the plan: the worked example --------
expect_out 'the worked example of kvslot(1), step by step' "step: 1
num_computed_tokens: 0
block_table.g0: 1 2 0 0
block_table.g1: 3 4 0 0
free_blocks: 4
step: 2
num_computed_tokens: 8
block_table.g0: 0 2 1 0
block_table.g1: 3 4 5 0
free_blocks: 3
step: 3
num_computed_tokens: 10
block_table.g0: 0 2 1 0
block_table.g1: 3 4 5 0
free_blocks: 3
step: 4
num_computed_tokens: 11
block_table.g0: 0 0 1 0
block_table.g1: 3 4 5 0
free_blocks: 4
step: 5
num_computed_tokens: 12
block_table.g0: 0 0 1 2
block_table.g1: 3 4 5 6
free_blocks: 2" kvslot plan $P --kv-groups sliding=4,full --kernel-block 4 \
    --fields step,num_computed_tokens,block_table,free_blocks
cp "$T/.out" "$T/worked.out"
# MLA beside SlidingWindowMLASpec: vLLM's FullAttentionManager and
# SlidingWindowManager, the same steps on the MLA block
ok 'mla_sliding=4,mla plans as sliding=4,full' kvslot plan $P \
    --kv-groups mla_sliding=4,mla \
    --fields step,num_computed_tokens,block_table,free_blocks
expect_eq '... step by step' "$(cat "$T/.out")" "$(cat "$T/worked.out")"
expect_fail 2 'mla_sliding with --cp-size: DCP not support sliding window' \
    kvslot plan $P --kv-groups mla_sliding=4,mla --cp-size 2

# Groups of different block sizes (a sliding window of 2,048-byte tokens
# grows to blocks of 16 beside full attention's 8): each group allocates
# in its own block size from the one pool and maps slots in it.
D="--prompt-lens 10,7 --output-lens 4,3 --max-tokens 8 -B 4 --max-model-len 32 --num-blocks 9 -f text"
expect_out 'blocks of 16 and 8 tokens, step by step' "step: 1
num_computed_tokens: 0
block_table.g0: 1 0 0 0
block_table.g1: 2 0 0 0
slot_mapping.g0: 16 17 18 19 20 21 22 23
slot_mapping.g1: 16 17 18 19 20 21 22 23
free_blocks: 6
step: 2
num_computed_tokens: 8 0
block_table.g0: 1 0 0 0
block_table.g0: 4 0 0 0
block_table.g1: 2 3 0 0
block_table.g1: 5 0 0 0
slot_mapping.g0: 24 25 64 65 66 67 68 69
slot_mapping.g1: 24 25 40 41 42 43 44 45
free_blocks: 3
step: 3
num_computed_tokens: 10 6
block_table.g0: 1 0 0 0
block_table.g0: 4 0 0 0
block_table.g1: 2 3 0 0
block_table.g1: 5 0 0 0
slot_mapping.g0: 26 70
slot_mapping.g1: 26 46
free_blocks: 3" kvslot plan $D --kv-groups 'sliding=8:2048,full' --steps 3 \
    --fields step,num_computed_tokens,block_table,slot_mapping,free_blocks

# ... and with prefix caching (kvslot(1)'s second worked example): full
# attention in blocks of 8 beside a window of 4 in blocks of 4 hash at 4
# (the GCD) and hit at 8 (the LCM); request 1 shares 12 tokens with
# request 0 and hits 8 (the window's run of one block ends on a boundary
# of 8); the full-attention block of tokens 8-15 also holds the entry of
# request 0's prompt tail (12 tokens) and leaves the cache at step 6 with
# both hashes.  vLLM 0.33.0's Scheduler gives these steps and hashes
# (make crosscheck CROSSCHECK=kvslot-hybrid runs such traces at random).
printf '%s\n' '1 2 3 4 5 6 7 8 9 10 11 12 13 14' \
    '1 2 3 4 5 6 7 8 9 10 11 12 50 51 52' \
    '31 32 33 34 35 36 37 38 39 40 31 32 33 34 35 36 37 38 39 40' >"$T/pc.txt"
PC="--prompts $T/pc.txt --output-lens 4,2,2 --arrivals 1,4,6 --max-tokens 16
    -B 4 --max-model-len 32 --num-blocks 10 --kernel-block 4
    --enable-prefix-caching -f text"
expect_out 'blocks of 8 and 4 with prefix caching, step by step' "step: 1
req_ids: 0
num_cached_tokens: 0
block_table.g0: 1 2 0 0 0 0 0 0
block_table.g1: 3 4 5 6 0 0 0 0
evicted_hashes:
step: 2
req_ids: 0
num_cached_tokens: 0
block_table.g0: 1 2 0 0 0 0 0 0
block_table.g1: 0 0 5 6 0 0 0 0
evicted_hashes:
step: 3
req_ids: 0
num_cached_tokens: 0
block_table.g0: 1 2 0 0 0 0 0 0
block_table.g1: 0 0 0 6 0 0 0 0
evicted_hashes:
step: 4
req_ids: 0 1
num_cached_tokens: 0 8
block_table.g0: 1 2 5 0 0 0 0 0
block_table.g0: 1 7 0 0 0 0 0 0
block_table.g1: 0 0 0 6 3 0 0 0
block_table.g1: 0 4 8 9 0 0 0 0
evicted_hashes:
step: 5
req_ids: 1
num_cached_tokens: 8
block_table.g0: 1 7 0 0 0 0 0 0
block_table.g1: 0 0 0 9 0 0 0 0
evicted_hashes:
step: 6
req_ids: 2
num_cached_tokens: 0
block_table.g0: 9 8 0 0 0 0 0 0
block_table.g1: 3 6 5 2 0 0 0 0
evicted_hashes: 5a1a80b7efccde46 66aeb09d314ca3b8" kvslot plan $PC \
    --kv-groups 'full:2048,sliding=4' --steps 6 \
    --fields step,req_ids,num_cached_tokens,block_table,evicted_hashes
# vLLM asserts at the first lookup that a chunked local group's blocks are
# the LCM: a chunked group of 4 beside full attention of 8 is refused
expect_fail 2 'a chunked group of a smaller block with prefix caching: refused' \
    kvslot plan $PC --kv-groups 'full:2048,chunked=8'
cp "$T/.err" "$T/e"
ok "... with vLLM's words" grep -q 'KV cache groups with different block sizes are not compatible with chunked local attention now' "$T/e"
ok 'a chunked group of the LCM is planned' kvslot plan $PC --kv-groups 'chunked=16:1024,full'
expect_fail 2 'different block sizes with --pcp-size: refused' \
    kvslot plan $D --kv-groups 'chunked=16:2048,full' --pcp-size 2

# its slot mappings: each group's block of each new token, offset within
expect_out 'each group writes through its own table' "slot_mapping.g0: 4 5 6 7 8 9 10 11
slot_mapping.g1: 12 13 14 15 16 17 18 19
slot_mapping.g0: 4 5
slot_mapping.g1: 20 21
slot_mapping.g0: 6
slot_mapping.g1: 22
slot_mapping.g0: 7
slot_mapping.g1: 23
slot_mapping.g0: 8
slot_mapping.g1: 24" kvslot plan $P --kv-groups sliding=4,full --kernel-block 4 \
    --fields slot_mapping

# a group picked by name, the other left out
expect_out '--fields block_table.g1 writes group 1 alone' "block_table.g1: 3 4 0 0
block_table.g1: 3 4 5 0" kvslot plan $P --kv-groups sliding=4,full \
    --kernel-block 4 --fields block_table.g1 --steps 2

# a chunk of 4: at 8 computed the chunk starts at 8, blocks 1 and 2 go
# (block 2, freed after block 1, frontmost: group 0 takes it again); at
# 12 block 2 goes and comes back as the fourth
expect_out 'chunked local attention frees the blocks before its chunk' "block_table.g0: 1 2 0 0
block_table.g0: 0 0 2 0
block_table.g0: 0 0 2 0
block_table.g0: 0 0 2 0
block_table.g0: 0 0 0 2" kvslot plan $P --kv-groups chunked=4,full \
    --kernel-block 4 --fields block_table.g0

# --- a Mamba group (cache mode none): one state block of the model length
# a request holds from its first step to its end; no slot mapping of its own
expect_out 'a Mamba group holds one state block a request' "step: 1
req_ids: 0
block_table.g0: 1 0 0 0
block_table.g1: 2 3 0 0
slot_mapping.g1: 8 9 10 11 12 13 14 15
free_blocks: 8
step: 2
req_ids: 0 1
block_table.g0: 1 0 0 0
block_table.g0: 5 0 0 0
block_table.g1: 2 3 4 0
block_table.g1: 6 7 0 0
slot_mapping.g1: 16 17 24 25 26 27 28 29
free_blocks: 4" kvslot plan --prompt-lens 10,6 --output-lens 4 --max-tokens 8 -B 4 \
    --max-model-len 16 --num-blocks 12 --kv-groups mamba=16384,full --kernel-block 4 \
    -f text --fields step,req_ids,block_table,slot_mapping,free_blocks --steps 2
expect_fail 2 'slot_mapping of a Mamba group' \
    kvslot plan $P --kv-groups mamba=16384,full --kernel-block 4 --fields slot_mapping.g0
printf '1 2 3 4 5\n' >"$T/p5.txt"
expect_fail 2 'a Mamba group in mode none with prefix caching: vLLM asserts' \
    kvslot plan --prompts "$T/p5.txt" --enable-prefix-caching --max-tokens 8 -B 4 \
    --max-model-len 16 --kv-groups mamba=16384,full --kernel-block 4 --mamba-cache-mode none
cp "$T/.err" "$T/e"
ok 'naming the mode vLLM needs' grep -q "mamba_cache_mode='align'" "$T/e"

# --- a shipped config: Gemma 3 1B's seven groups (six sliding windows of
# 512, one full), each with its table; after the 1,000-token prefill a
# window's next token reads from token 489 on: blocks 0-29 are freed, 33
# of the 63 left
G3="$KV_TOP/tests/configs/gemma-3-1b.json"
ng=$(kvslot groups --model-config "$G3" | sed -n 's/^num_groups: //p')
kvslot plan --prompt-lens 1000 --output-lens 3 --max-tokens 2048 -B 16 --max-model-len 4096 \
    --model-config "$G3" -f text --fields step,block_table --decode > "$T/g3.txt"
expect_eq 'Gemma 3 1B: a table for each of the groups kvslot groups derives' \
    "$(grep -c '^block_table\.g' "$T/g3.txt")" "$((3 * ng))"
expect_eq 'its sliding-window groups free the blocks before the window' \
    "$(awk '$1 == "block_table.g0:" { n = 0; for (i = 2; i <= NF; i++) n += $i != 0; print n }' "$T/g3.txt" | tr '\n' ' ')" \
    "63 33 33 "

# --- one full-attention group is the plan without groups ---------------
PP="--prompt-lens 7,12,3 --output-lens 5 --max-tokens 9 -B 4 --max-model-len 24 --num-blocks 9 --decode -f text --fields step,req_ids,num_scheduled_tokens,block_table,slot_mapping,preempted,free_blocks"
kvslot plan $PP > "$T/plain.txt"
kvslot plan $PP --kv-groups full:4096 | sed 's/^\(block_table\|slot_mapping\)\.g0:/\1:/' > "$T/one.txt"
expect_file_eq 'one full-attention group plans as no groups (preemptions too)' \
    "$T/one.txt" "$T/plain.txt"
ok 'that plan preempts' grep -q '^preempted: [0-9]' "$T/plain.txt"

# --- JSON: one key a group ----------------------------------------------
kvslot plan $Q --kv-groups 'sliding=4,full' --kernel-block 4 -f json \
    --fields step,block_table,slot_mapping.g1 --steps 1 > "$T/j.json"
expect_eq 'JSON: block_table.g0, block_table.g1, slot_mapping.g1' "$(cat "$T/j.json")" \
    '{"step":1,"block_table.g0":[[1,2,0,0]],"block_table.g1":[[3,4,0,0]],"slot_mapping.g1":[12,13,14,15,16,17,18,19]}'

# --- a pool under the bound on a window's blocks ---------------------------
# 20 tokens and 2 outputs, a budget of 16: the window of 4 holds 4 blocks
# for the first chunk, then 2; vLLM 0.33.0's admission asks for 3 + 5 = 8,
# less than the 9 of the cap (window + budget); 8 blocks run, 7 never do
W='plan --prompt-lens 20 --output-lens 3 --max-tokens 16 -B 4 --max-model-len 32
   --kv-groups full:2048,sliding=4 --kernel-block 4 --decode -f text'
expect_out 'a pool of 8 blocks under the windowed bound runs as in vLLM' "step: 1
num_scheduled_tokens: 16
block_table.g1: 3 4 5 6 0 0 0 0
free_blocks: 2
step: 2
num_scheduled_tokens: 4
block_table.g1: 0 0 0 6 4 0 0 0
free_blocks: 3
step: 3
num_scheduled_tokens: 1
block_table.g1: 0 0 0 0 4 6 0 0
free_blocks: 3
step: 4
num_scheduled_tokens: 1
block_table.g1: 0 0 0 0 4 6 0 0
free_blocks: 3" kvslot $W --num-blocks 9 \
    --fields step,num_scheduled_tokens,block_table.g1,free_blocks
expect_fail 2 'a pool of 7: never admitted, refused' kvslot $W --num-blocks 8
cp "$T/.err" "$T/e"
ok 'naming the request and its peak' \
    grep -q 'request 0 needs 8 blocks at its peak (20 tokens), the pool has 7 (besides the null block): it could never run' "$T/e"
# a chunk of 32 in blocks of 128 need not start on a block: 31 tokens of
# the chunk and 27 in flight straddle two blocks (96..153), which vLLM's
# admission cap (cdiv(32 + 27, 128) = 1) does not count.  140 tokens take
# 2 full blocks and 2 chunked ones, the pool has 3: vLLM 0.33.0 preempts
# the request without end; the bound on its blocks counted 3 and planned
# it without a trial, which never ended
expect_fail 2 'a chunk that straddles a block past the pool: refused' timeout 60 \
    kvslot plan --prompt-lens 140 --output-lens 1 --max-tokens 27 -B 128 \
    --max-model-len 512 --num-blocks 4 --kv-groups chunked=32,full
cp "$T/.err" "$T/e"
ok '... as preempted without end' \
    grep -q 'request 0 needs more blocks at its peak (140 tokens) than the pool.s 3 (besides the null block): it would be preempted without end' "$T/e"
ok '... a pool of 4 plans it' timeout 60 kvslot plan --prompt-lens 140 --output-lens 1 \
    --max-tokens 27 -B 128 --max-model-len 512 --num-blocks 5 --kv-groups chunked=32,full -q

# a pool under the bound where the one running request preempts itself:
# vLLM 0.33.0 schedules nothing in that step and readmits it in the next
printf '%s\n' '31 5 27 3 16 19' '6 6' \
    '35 37 15 37 27 29 32 34 19 4 7 20 23 6 31 17 37 28 2 34 10' \
    '35 37 15 37 27 29 32 34 19 4 7 20 23 6 31 17 37' \
    '35 37 15 37 27 29 32 34 15 21 15 26 26 7 14 3 21 40' >"$T/self.txt"
expect_out 'a request preempting itself: an empty step, then readmitted' "step: 1
req_ids: 0 1
preempted:
free_blocks: 2
step: 2
req_ids: 0 2
preempted:
free_blocks: 1
step: 3
req_ids: 2
preempted:
free_blocks: 2
step: 4
req_ids:
preempted: 2
free_blocks: 7
step: 5
req_ids: 2
preempted:
free_blocks: 4" kvslot plan --prompts "$T/self.txt" --max-tokens 8 -B 4 \
    --max-model-len 26 --num-blocks 8 --max-num-seqs 2 --output-lens 2,1,3,6,1 \
    --decode --enable-prefix-caching --no-reserve-full-isl --arrivals 1,1,1,2,5 \
    --kv-groups chunked=4:1024,full --kernel-block 4 --steps 5 -f text \
    --fields step,req_ids,preempted,free_blocks

# --- refusals -------------------------------------------------------------
expect_fail 2 'DCP with a sliding window: vLLM refuses it' \
    kvslot plan $P --kv-groups sliding=4,full --kernel-block 4 --cp-size 2
cp "$T/.err" "$T/e"
ok 'with vLLM'"'"'s message' grep -q 'DCP not support sliding window' "$T/e"
# vLLM 0.33.0's Scheduler hands its KV cache manager a PCP size of 1: PCP
# is refused by its model runner (MRV2 PCP takes MLA models only), never
# by the coordinator's or the managers' PCP assertions
for apc in '' --enable-prefix-caching; do
expect_fail 2 "PCP with a chunked group ($apc): refused" \
    kvslot plan --prompts /dev/null $apc --max-tokens 8 -B 4 \
    --max-model-len 16 --kv-groups chunked=4,full --kernel-block 4 --pcp-size 2
cp "$T/.err" "$T/e"
ok '... with the model runner'"'"'s message' grep -q 'MRV2 PCP currently supports MLA models only' "$T/e"
done
expect_fail 2 'PCP with a sliding window alone: refused' \
    kvslot plan $P --kv-groups sliding=4 --kernel-block 4 --pcp-size 2 --cp-convention dcp
cp "$T/.err" "$T/e"
ok '... with the model runner'"'"'s message' grep -q 'MRV2 PCP currently supports MLA models only' "$T/e"
# an MLA model passes vLLM's PCP check and its scheduler leaves PCP out:
# not modelled, and not said to be vLLM's refusal
expect_fail 2 'PCP with sliding-window MLA: not modelled' \
    kvslot plan $P --kv-groups mla,mla_sliding=8 --kernel-block 4 --pcp-size 2
cp "$T/.err" "$T/e"
ok '... said so' grep -q 'plan does not model it' "$T/e"
ok '... not as vLLM'"'"'s refusal' sh -c '! grep -q "vLLM 0.33.0 refuses" "$1"' - "$T/e"
# DCP with a chunked group: the managers assert in the prefix-cache
# lookup, so only with prefix caching is it vLLM's refusal
expect_fail 2 'DCP with a chunked group, no prefix caching: not modelled' \
    kvslot plan $P --kv-groups chunked=8,full --kernel-block 4 --cp-size 2
cp "$T/.err" "$T/e"
ok '... said so' grep -q 'plan does not model it' "$T/e"
expect_fail 2 'DCP with a chunked group alone under prefix caching: refused' \
    kvslot plan $P --enable-prefix-caching --kv-groups chunked=8 --kernel-block 4 --cp-size 2
cp "$T/.err" "$T/e"
ok '... with the manager'"'"'s message' grep -q 'DCP not support chunked local attn now' "$T/e"
expect_fail 2 'DCP with a chunked group and full attention under prefix caching: refused' \
    kvslot plan $P --enable-prefix-caching --kv-groups chunked=8,full --kernel-block 4 --cp-size 2
cp "$T/.err" "$T/e"
ok '... with the coordinator'"'"'s message' grep -q 'DCP with hybrid KV cache layouts only supports' "$T/e"
expect_fail 2 'block_table.g2 of two groups' \
    kvslot plan $P --kv-groups sliding=4,full --kernel-block 4 --fields block_table.g2
expect_fail 2 'block_table.g0 without groups' \
    kvslot plan $P --fields block_table.g0
expect_fail 2 '--kernel-block without groups' kvslot plan $P --kernel-block 4
expect_fail 2 '--model-config and --kv-groups together' \
    kvslot plan $P --kv-groups full --model-config /dev/null
done_testing
