#!/bin/sh
# kvslot-apc.sh - kvslot plan --enable-prefix-caching: small scenarios whose
# every value is derived by hand below (block size 4, block 0 the null
# block, the free queue from block 1): a shared prefix hit in the same step,
# the last token never a hit, a cached block evicted from the free queue's
# head, a hit taken out of the middle of the free queue, preemption with
# the hit blocks not counted as free; arrivals, salts, bad input.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1
F=step,req_ids,num_scheduled_tokens,num_computed_tokens,num_cached_tokens,slot_mapping,block_table,shared_blocks,evicted_hashes,waiting,blocked,preempted,finished,free_blocks
field() {   # file step name
    sed -n "/^step: $2\$/,/^step: /s/^$3: *//p" "$1" | head -n 1
}

# ---- two prompts sharing 8 tokens, then two late arrivals -------------------
printf '1 2 3 4 5 6 7 8 9 10\n1 2 3 4 5 6 7 8 20 21 22\n' >p.txt
printf '30 31 32 33 34 35 36 37 38 39 40 41 42 43\n1 2 3 4 5 6 7 8 50 51\n' >>p.txt
ok 'plan' kvslot plan --prompts p.txt --arrivals 1,1,2,3 --enable-prefix-caching \
    --max-tokens 32 -B 4 --max-model-len 20 --num-blocks 6 --output-lens 1 \
    --decode -f text --fields $F -o a.txt
# Step 1: request 0 misses (empty cache), takes blocks 1 2 3 and caches its
# two full blocks as they are scheduled; request 1, scheduled next, hits
# both (8 tokens) and takes block 4 for tokens 8-10.
expect_eq 'step 1: the second request starts at 8 computed tokens' \
    "$(field a.txt 1 num_computed_tokens)" '0 8'
expect_eq 'step 1: num_cached_tokens' "$(field a.txt 1 num_cached_tokens)" '0 8'
expect_eq 'step 1: it computes only its 3 own tokens' "$(field a.txt 1 num_scheduled_tokens)" '10 3'
expect_eq 'step 1: block tables share blocks 1 and 2' \
    "$(sed -n '/^step: 1$/,/^step: 2$/s/^block_table: //p' a.txt | tr '\n' '|')" \
    '1 2 3 0 0|1 2 4 0 0|'
expect_eq 'step 1: shared_blocks' "$(field a.txt 1 shared_blocks)" '1 2'
expect_eq 'step 1: the slot mapping skips the cached tokens' \
    "$(field a.txt 1 slot_mapping)" '4 5 6 7 8 9 10 11 12 13 16 17 18'
# Both finish; request 0 frees 3 (ref 0, no hash: to the front), 2 and 1
# (ref 1), then request 1 frees 4 (no hash: to the front), 2 and 1 (hashed:
# to the tail, last first): the queue is 4 3 5 2 1.  Step 2: request 2
# (14 tokens) takes 4 3 5 2; block 2 holds the hash of tokens 5-8: evicted.
expect_eq 'step 2: blocks from the free queue head' \
    "$(field a.txt 2 block_table)" '4 3 5 2 0'
expect_eq 'step 2: one hash evicted' "$(field a.txt 2 evicted_hashes | wc -w | tr -d ' ')" 1
# Request 2 finishes: its partial block 2 goes to the front, its full
# blocks 5 3 4 to the tail: the queue is 2 1 5 3 4.  Step 3: request 3
# shares 8 tokens with request 0, but only block 1 (tokens 1-4) is still
# cached: it leaves the middle of the free queue; the hash of its second
# block is gone; its new blocks are 2 and 5 from the head (5's hash, tokens
# 38-41, evicted).
expect_eq 'step 3: one block hit' "$(field a.txt 3 num_cached_tokens)" 4
expect_eq 'step 3: hit block 1, then new blocks from the head' \
    "$(field a.txt 3 block_table)" '1 2 5 0 0'
expect_eq 'step 3: one hash evicted' "$(field a.txt 3 evicted_hashes | wc -w | tr -d ' ')" 1
# The hashes are XXH3-64 chains (kvslot(1)); pinned: a change breaks every
# recorded plan.
expect_eq 'the hash of tokens 5-8 after 1-4 (golden)' \
    "$(field a.txt 2 evicted_hashes)" 80e4df7f9ab4f357
# --dtype i32: the hashes keep their int64 bits (a u64 hash does not fit 32
# bits), the other fields are int32; every step is written.
ok 'plan -f npy --dtype i32 with evicted_hashes' kvslot plan --prompts p.txt \
    --arrivals 1,1,2,3 --enable-prefix-caching --max-tokens 32 -B 4 \
    --max-model-len 20 --num-blocks 6 --output-lens 1 --decode -f npy \
    --dtype i32 --fields step,evicted_hashes -o a32.npy
expect_eq 'i32: one int32 step and one int64 hash array a step' \
    "$(grep -ac "'descr': '<i4'" a32.npy) $(grep -ac "'descr': '<i8'" a32.npy)" \
    "$(grep -c '^step:' a.txt) $(grep -c '^step:' a.txt)"
expect_eq 'i32: the hash of tokens 5-8 in its int64 bits' \
    "$(od -An -tx1 -v a32.npy | tr -d ' \n' | grep -c 57f3b49a7fdfe480)" 1
expect_eq 'waiting lists only arrived requests' "$(field a.txt 1 waiting)" ''

# ---- never the whole prompt --------------------------------------------------
printf '1 2 3 4 5 6 7 8\n1 2 3 4 5 6 7 8\n' >same.txt
ok 'plan: the same 8-token prompt twice' kvslot plan --prompts same.txt \
    --enable-prefix-caching --max-tokens 32 -B 4 --max-model-len 16 \
    --output-lens 1 -f text --fields $F -o s.txt
expect_eq 'the second hits one block, not two: its last token is computed' \
    "$(field s.txt 1 num_computed_tokens)" '0 4'
expect_eq 'and computes 4 tokens' "$(field s.txt 1 num_scheduled_tokens)" '8 4'

# ---- preemption ---------------------------------------------------------------
printf '1 2 3 4 5 6 7 8\n11 12 13 14 15 16 17 18\n' >pp.txt
ok 'plan with 4 usable blocks' kvslot plan --prompts pp.txt --enable-prefix-caching \
    --max-tokens 32 -B 4 --max-model-len 16 --num-blocks 5 --output-lens 6 \
    --decode -f text --fields $F -o b.txt
# Step 1 fills the pool (1 2 | 3 4).  Step 2: request 0's first output
# token needs a third block: the last running request (1) is preempted, its
# blocks go back 4 then 3, and request 0 takes 4, evicting its hash.
expect_eq 'step 2: request 1 preempted' "$(field b.txt 2 preempted)" 1
expect_eq 'step 2: request 0 takes block 4' "$(field b.txt 2 block_table)" '1 2 4 0'
expect_eq 'step 2: block 4'"'"'s hash evicted' "$(field b.txt 2 evicted_hashes | wc -w | tr -d ' ')" 1
# Step 3: request 1 would hit its cached block 3, which is the only free
# block: a hit in the free queue does not count as free, so it must wait.
expect_eq 'step 3: request 1 blocked' "$(field b.txt 3 blocked)" 1
expect_eq 'every request finishes, none dropped' \
    "$(sed -n 's/^finished: //p' b.txt | tr -s ' \n' ' ' | sed 's/ $//')" '0 1'
# Step 7: request 0 finished at step 6 and request 0's blocks evicted request
# 1's; request 1 recomputes its 8 prompt tokens and its first output token.
expect_eq 'step 7: request 1 from scratch' "$(field b.txt 7 num_scheduled_tokens)" 9

# ---- extra keys ------------------------------------------------------------------
ok 'two salts: no sharing' kvslot plan --prompts same.txt --enable-prefix-caching \
    --salt a,b --max-tokens 32 -B 4 --max-model-len 16 --output-lens 1 -f text \
    --fields num_computed_tokens -o salt.txt
expect_eq 'different salts never share a block' "$(cat salt.txt)" 'num_computed_tokens: 0 0'
ok 'one salt for both' kvslot plan --prompts same.txt --enable-prefix-caching \
    --salt a --max-tokens 32 -B 4 --max-model-len 16 --output-lens 1 -f text \
    --fields num_computed_tokens -o salt1.txt
expect_eq 'the same salt shares' "$(cat salt1.txt)" 'num_computed_tokens: 0 4'
ok 'LoRA ids 1,2' kvslot plan --prompts same.txt --enable-prefix-caching \
    --lora-ids 1,2 --max-tokens 32 -B 4 --max-model-len 16 --output-lens 1 \
    -f text --fields num_computed_tokens -o lora.txt
expect_eq 'different adapters never share' "$(cat lora.txt)" 'num_computed_tokens: 0 0'

# ---- off: the plan of the lengths alone, byte for byte --------------------------
ok 'prompts without caching' kvslot plan --prompts p.txt --max-tokens 32 -B 4 \
    --max-model-len 20 --num-blocks 6 --output-lens 1 --decode -f text -o off1.txt
ok 'the same lengths' kvslot plan --prompt-lens 10,11,14,10 --max-tokens 32 -B 4 \
    --max-model-len 20 --num-blocks 6 --output-lens 1 --decode -f text -o off2.txt
expect_file_eq 'the same plan' off1.txt off2.txt

# ---- an arrival after the first has finished -----------------------------------
printf '1 2 3 4 5 6 7 8 9 10\n1 2 3 4 5 6 7 8 20 21 22\n' >two.txt
ok 'plan: the second arrives at step 3' kvslot plan --prompts two.txt --arrivals 1,3 \
    --enable-prefix-caching --max-tokens 32 -B 4 --max-model-len 20 \
    --output-lens 1 --decode -f text --fields $F -o late.txt
expect_eq 'step 2 is empty (nothing has arrived)' "$(field late.txt 2 req_ids)" ''
# request 0 finished at step 1: its partial block 3 went to the front, its
# cached blocks 2 1 to the tail; the hits take 1 and 2 out of the queue, the
# new block comes from its head, 3 again
expect_eq 'step 3: 8 tokens cached' "$(field late.txt 3 num_cached_tokens)" 8
expect_eq 'step 3: blocks 1 2, then 3 from the head' "$(field late.txt 3 block_table)" '1 2 3 0 0'

# ---- context parallelism inside plan: each step's slot mapping as map has it -----
ok 'plan --cp-size 2 --interleave 2 --all-ranks' kvslot plan --prompts p.txt \
    --enable-prefix-caching --max-tokens 32 -B 4 --max-model-len 20 --num-blocks 6 \
    --output-lens 1 --steps 1 --cp-size 2 --interleave 2 --all-ranks -f text \
    --fields num_scheduled_tokens,num_computed_tokens,block_table,slot_mapping -o cp.txt
sed -n 's/^block_table: //p' cp.txt >cpbt.txt
sched=$(sed -n 's/^num_scheduled_tokens: //p' cp.txt | tr ' ' ,)
comp=$(sed -n 's/^num_computed_tokens: //p' cp.txt | tr ' ' ,)
# blocks of 8 tokens (4 on each rank), 5 of them: request 1 hits the first;
# request 3 would too, but its whole prompt needs a second block: none left
expect_eq 'virtual blocks of 8 tokens: three requests run' "$sched/$comp" '10,3,14/0,8,0'
ok 'map of the same step' kvslot map -B 4 --block-table cpbt.txt --scheduled "$sched" \
    --computed "$comp" --max-model-len 20 --cp-size 2 --interleave 2 --all-ranks \
    --fields slot_mapping -f text
expect_eq 'the same slot mapping of both ranks' "$(sed -n 's/^slot_mapping: //p' cp.txt)" \
    "$(sed -n 's/^slot_mapping: //p' "$T/.out")"
expect_eq 'two rows, one per rank' "$(grep -c '^slot_mapping:' cp.txt)" 2
ok 'plan --cp-rank 1' kvslot plan --prompts p.txt --enable-prefix-caching \
    --max-tokens 32 -B 4 --max-model-len 20 --num-blocks 6 --output-lens 1 \
    --steps 1 --cp-size 2 --interleave 2 --cp-rank 1 -f text --fields slot_mapping -o r1.txt
expect_eq 'rank 1 alone is the second row' "$(sed -n 's/^slot_mapping: //p' r1.txt)" \
    "$(sed -n 's/^slot_mapping: //p' cp.txt | sed -n 2p)"
expect_fail 2 'a rank past the world' kvslot plan --prompt-lens 3 --max-tokens 8 \
    -B 4 --max-model-len 16 --cp-size 2 --cp-rank 2

# ---- bad input --------------------------------------------------------------------
printf '1 2 x\n' >nan.txt
expect_fail 1 'a token that is not a number' kvslot plan --prompts nan.txt \
    --max-tokens 8 -B 4 --max-model-len 16
expect_eq 'names the line' "$(grep -c 'line 1' "$T/.err")" 1
printf '1 2\n\n3 4\n' >empty.txt
expect_fail 1 'an empty prompt line' kvslot plan --prompts empty.txt \
    --max-tokens 8 -B 4 --max-model-len 16
expect_eq 'names the request and the line' "$(grep -c 'request 1 (line 2) is empty' "$T/.err")" 1
printf '1 2 3 4 5 6\n' >long.txt
expect_fail 2 'a prompt as long as --max-model-len' kvslot plan --prompts long.txt \
    --max-tokens 8 -B 4 --max-model-len 6
expect_fail 2 'caching without token ids' kvslot plan --prompt-lens 3,4 \
    --enable-prefix-caching --max-tokens 8 -B 4 --max-model-len 16
expect_fail 2 'both --prompts and --prompt-lens' kvslot plan --prompts p.txt \
    --prompt-lens 3 --max-tokens 8 -B 4 --max-model-len 16
printf '1 2 -5\n' >neg.txt
expect_fail 1 'a negative token id' kvslot plan --prompts neg.txt \
    --max-tokens 8 -B 4 --max-model-len 16
expect_fail 2 'arrivals of the wrong count' kvslot plan --prompts p.txt \
    --arrivals 1,2 --max-tokens 8 -B 4 --max-model-len 20
expect_fail 2 'an arrival at step 0' kvslot plan --prompts p.txt \
    --arrivals 0 --max-tokens 8 -B 4 --max-model-len 20
expect_fail 2 'salts of the wrong count' kvslot plan --prompts p.txt \
    --enable-prefix-caching --salt a,b --max-tokens 8 -B 4 --max-model-len 20
done_testing
