#!/bin/sh
# kvslot-sched.sh - kvslot plan's scheduler against vLLM 0.33.0's rules, on
# cases whose every value is derived by hand below: admission by the whole
# prompt (scheduler_reserve_full_isl) and by the chunk, long evicting plans
# that end.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1
field() {   # file step name
    sed -n "/^step: $2\$/,/^step: /s/^$3: *//p" "$1" | head -n 1
}
F=step,req_ids,num_scheduled_tokens,blocked,free_blocks

# ---- admission by the whole prompt ---------------------------------------------
# Two 8-token prompts, blocks of 4, three usable blocks, 10 tokens a step.
# Step 1: request 0 takes 8 tokens (blocks 1, 2); 2 tokens of budget are
# left for request 1, whose chunk needs one block (one is free) but whose
# prompt needs two: vLLM 0.33.0 leaves it waiting.
printf '1 2 3 4 5 6 7 8\n11 12 13 14 15 16 17 18\n' >two.txt
R="--prompts two.txt -B 4 --num-blocks 4 --max-tokens 10 --max-model-len 16 --output-lens 1 --decode -f text --fields $F"
ok 'plan, whole-prompt admission (the default)' kvslot plan $R -o full.txt
expect_eq 'step 1 schedules request 0 alone' "$(field full.txt 1 req_ids)" 0
expect_eq 'step 1: 8 tokens' "$(field full.txt 1 num_scheduled_tokens)" 8
expect_eq 'step 1: request 1 is blocked' "$(field full.txt 1 blocked)" 1
expect_eq 'step 2: request 1, all 8 tokens' \
    "$(field full.txt 2 req_ids)/$(field full.txt 2 num_scheduled_tokens)" 1/8
expect_eq 'two steps' "$(grep -c '^step:' full.txt)" 2
ok 'plan --no-reserve-full-isl' kvslot plan $R --no-reserve-full-isl -o chunk.txt
expect_eq 'by the chunk: both in step 1' "$(field chunk.txt 1 req_ids)" '0 1'
expect_eq 'by the chunk: 8 and 2 tokens' "$(field chunk.txt 1 num_scheduled_tokens)" '8 2'
expect_eq 'by the chunk: the rest in step 2' "$(field chunk.txt 2 num_scheduled_tokens)" 6
ok 'the same with prefix caching' kvslot plan $R --enable-prefix-caching -o fullapc.txt
expect_eq 'with caching: request 1 waits too' \
    "$(field fullapc.txt 1 req_ids)/$(field fullapc.txt 1 blocked)" 0/1
# A hit counts as held: request 1 shares request 0's first block, so its
# whole prompt needs one new block, and one is free.
printf '1 2 3 4 5 6 7 8\n1 2 3 4 15 16 17 18\n' >share.txt
ok 'a shared first block' kvslot plan --prompts share.txt -B 4 --num-blocks 4 \
    --max-tokens 10 --max-model-len 16 --output-lens 1 --enable-prefix-caching \
    -f text --fields $F,num_computed_tokens -o share.txt.out
expect_eq 'the hit makes room: both in step 1' "$(field share.txt.out 1 req_ids)" '0 1'
expect_eq 'request 1 computes 2 of its 4 own tokens' \
    "$(field share.txt.out 1 num_computed_tokens)/$(field share.txt.out 1 num_scheduled_tokens)" '0 4/8 2'
# A preempted request is checked the same way when it comes back: prompts
# of 4 and 3 tokens, blocks of 2, four usable blocks, 3 tokens a step.
# Step 1: 0 takes 3 tokens (2 blocks).  Step 2: 0 its 4th token, 1 two
# tokens (1 block): 1 free.  Step 3: 0 (5 tokens, an output) takes the last
# block; 1 needs a second block: it preempts itself (its block back: 1 free).
# Step 4: 1's whole prompt needs 2 blocks, 1 is free: it waits until 0 is
# done; admitted by the chunk (2 tokens, 1 block) it runs and is preempted
# again in step 5.
OOM="--prompt-lens 4,3 --output-lens 4 -B 2 --num-blocks 5 --max-tokens 3 --max-model-len 16 --decode -f text --fields step,req_ids,num_scheduled_tokens,preempted,blocked,free_blocks"
ok 'a preemption under whole-prompt admission' kvslot plan $OOM -o oom.txt
expect_eq 'step 3 preempts request 1' "$(field oom.txt 3 preempted)" 1
expect_eq 'step 4: request 1 is held back by its whole prompt' \
    "$(field oom.txt 4 req_ids)/$(field oom.txt 4 blocked)" '0/1'
expect_eq 'it comes back in step 6 with its 3 tokens' \
    "$(field oom.txt 6 req_ids)/$(field oom.txt 6 num_scheduled_tokens)" '1/3'
ok 'the same by the chunk' kvslot plan $OOM --no-reserve-full-isl -o oomc.txt
expect_eq 'by the chunk: request 1 back in step 4' \
    "$(field oomc.txt 4 req_ids)/$(field oomc.txt 4 num_scheduled_tokens)" '0 1/1 2'
expect_eq 'and preempted again in step 5' "$(field oomc.txt 5 preempted)" 1

# ---- long plans with evictions end ---------------------------------------------
# 45 prompts of 5 tokens through a pool of 2 blocks: every prompt evicts the
# hashes of the one before; vLLM 0.33.0 takes 45 steps.
awk 'BEGIN { for (k = 0; k < 45; k++) { l = ""; for (j = 0; j < 5; j++)
    l = l (j ? " " : "") 10 * k + j; print l } }' >p45.txt
ok 'a 45-step evicting plan ends' timeout 60 kvslot plan --prompts p45.txt \
    --enable-prefix-caching --max-tokens 8 -B 4 --max-model-len 8 --num-blocks 3 \
    --output-lens 1 --decode -f text --fields step -o p45.out
expect_eq 'in 45 steps' "$(grep -c '^step:' p45.out)" 45
seq 0 215 | xargs -n 8 >h.txt
ok '27 prompts through 7 blocks end' timeout 60 kvslot plan --prompts h.txt \
    --enable-prefix-caching --max-tokens 64 -B 4 --max-model-len 16 \
    --output-lens 1 --num-blocks 8 -f text --fields step,finished --decode -o h.out
expect_eq 'every request finishes' \
    "$(sed -n 's/^finished: *//p' h.out | tr ' ' '\n' | grep -c .)" 27
done_testing
