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

# ---- the persistent batch: a request with a prefix hit is a new request -------
# vLLM's model runner adds the step's new requests (scheduled_new_reqs, in
# order) before the returning ones; a hit at the first scheduling does not
# make a request a returning one.
printf '1 2 3 4 5 6 7 8 9 10\n1 2 3 4 5 6 7 8 20 21 22\n30 31 32 33 34\n' >rows.txt
ok 'plan: three new requests, the second with a hit' kvslot plan --prompts rows.txt \
    --enable-prefix-caching -B 4 --max-tokens 32 --max-model-len 20 --output-lens 1 \
    -f text --fields step,req_ids,num_computed_tokens -o rows.out
expect_eq 'rows in scheduling order' "$(field rows.out 1 req_ids)/$(field rows.out 1 num_computed_tokens)" '0 1 2/0 8 0'

# ---- no slot written twice, none written into another request's block --------
# With context parallelism the scheduler's block is the virtual block of
# B * W tokens (vLLM's KV cache manager allocates and hashes those): two
# 12-token prompts sharing 8 tokens, B 4, two ranks: request 1 hits the
# first virtual block (tokens 1-8) and writes its 4 tokens into a block of
# its own.
printf '1 2 3 4 5 6 7 8 9 10 11 12\n1 2 3 4 5 6 7 8 30 31 32 33\n' >p2.txt
ok 'plan: caching with two DCP ranks' kvslot plan --prompts p2.txt \
    --enable-prefix-caching -B 4 --max-tokens 64 --max-model-len 20 \
    --output-lens 1 --cp-size 2 --all-ranks -f text \
    --fields step,num_computed_tokens,block_table,slot_mapping -o dcp.txt
expect_eq 'request 1 hits 8 tokens: one virtual block' \
    "$(field dcp.txt 1 num_computed_tokens)" '0 8'
expect_eq 'block tables in virtual blocks of 8 tokens' \
    "$(sed -n 's/^block_table: //p' dcp.txt | tr '\n' '|')" '1 2 0|1 3 0|'
expect_eq 'rank 0: request 0 writes block 2, request 1 block 3' \
    "$(sed -n 's/^slot_mapping: //p' dcp.txt | head -n 1)" \
    '4 -1 5 -1 6 -1 7 -1 8 -1 9 -1 12 -1 13 -1'
# Rows of cdiv(64, 8) = 8 virtual blocks; newest vLLM rounds the width with
# the rank's block of 4: to a multiple of 128/4 = 32 columns.
printf '1 2 3\n' >one.txt
ok 'plan --cp-size 2: the table width' kvslot plan --prompts one.txt -B 4 --cp-size 2 \
    --max-tokens 8 --max-model-len 64 --output-lens 1 -f text --fields block_table -o w8.txt
expect_eq '8 columns' "$(sed -n 's/^block_table: //p' w8.txt | wc -w | tr -d ' ')" 8
ok 'plan --cp-size 2 --round-stride' kvslot plan --prompts one.txt -B 4 --cp-size 2 \
    --max-tokens 8 --max-model-len 64 --output-lens 1 --round-stride -f text \
    --fields block_table -o w32.txt
expect_eq '32 columns' "$(sed -n 's/^block_table: //p' w32.txt | wc -w | tr -d ' ')" 32
# The invariant over every plan mode on random traces: per step and rank no
# slot appears twice, and the block of a written slot (slot / B) is written
# by one request only until that request finishes or is preempted (a
# request that hits a block shares it and never writes it).
cat >inv.awk <<'AWK'
function flush(   r, n, i, sl, blk, q) {
    if (st == "") return
    n = split(pre, q, " "); for (i = 1; i <= n; i++) release(q[i])
    split(ids, req, " ")
    for (r = 1; r <= nslot; r++) {
        n = split(slots[r], sl, " ")
        delete seen
        for (i = 1; i <= n; i++) {
            if (sl[i] == -1) continue
            if (sl[i] in seen) { print "step " st ": rank " r - 1 " writes slot " sl[i] " twice"; bad++ }
            seen[sl[i]] = 1
            blk = (r - 1) " " int(sl[i] / B)
            if ((blk in writer) && writer[blk] != req[row[i]]) {
                print "step " st ": request " req[row[i]] " writes block " blk " of request " writer[blk]; bad++
            }
            writer[blk] = req[row[i]]
        }
    }
    n = split(fin, q, " "); for (i = 1; i <= n; i++) release(q[i])
    nslot = 0; pre = fin = ""
}
function release(id,   k) { for (k in writer) if (writer[k] == id) delete writer[k] }
/^step:/ { flush(); st = $2 }
/^req_ids:/ { sub(/^req_ids: */, ""); ids = $0 }
/^num_scheduled_tokens:/ { n = split($0, x, " "); t = 0
    for (k = 2; k <= n; k++) for (j = 0; j < x[k]; j++) row[++t] = k - 1 }
/^slot_mapping:/ { sub(/^slot_mapping: */, ""); slots[++nslot] = $0 }
/^preempted:/ { sub(/^preempted: */, ""); pre = $0 }
/^finished:/ { sub(/^finished: */, ""); fin = $0 }
END { flush(); print bad + 0 }
AWK
awk 'BEGIN { srand(20); for (t = 1; t <= 24; t++) {
    n = 2 + int(rand() * 6); f = "tr" t ".txt"
    for (p = 0; p < 3; p++) { pl[p] = int(rand() * 13); for (j = 0; j < pl[p]; j++) pre[p, j] = int(rand() * 4) }
    for (i = 0; i < n; i++) { p = int(rand() * 3); l = ""; m = pl[p] + 1 + int(rand() * 12)
        for (j = 0; j < m; j++) l = l (j ? " " : "") (j < pl[p] ? pre[p, j] : int(rand() * 6))
        print l > f }
    close(f) } }'
bad=0 runs=0 first=
for t in $(seq 1 24); do
    for cp in "" "--cp-size 2" "--cp-size 2 --interleave 2" "--cp-size 4" \
              "--cp-size 2 --pcp-size 2 --cp-convention pcp-dcp"; do
        for mode in "--enable-prefix-caching" "" "--enable-prefix-caching --no-reserve-full-isl" \
                    "--enable-prefix-caching --reorder decode-extend-prefill --round-stride" \
                    "--reorder split-decodes --no-reserve-full-isl" \
                    "--enable-prefix-caching --async-scheduling" "--async-scheduling --no-reserve-full-isl"; do
            nb=$((t % 3 == 0 ? 0 : 16 + t % 7))
            nbopt=; [ $nb -gt 0 ] && nbopt="--num-blocks $nb"
            runs=$((runs + 1))
            if ! kvslot plan --prompts tr$t.txt -B 2 --max-tokens $((6 + t % 11)) \
                --max-model-len 48 --output-lens $((1 + t % 4)) $nbopt --decode \
                $cp $mode --all-ranks -f text -o inv.out \
                --fields step,req_ids,num_scheduled_tokens,slot_mapping,preempted,finished 2>inv.err ||
               [ "$(awk -v B=2 -f inv.awk inv.out | tail -n 1)" != 0 ]; then
                bad=$((bad + 1))
                [ -n "$first" ] || first="tr$t $cp $mode: $(awk -v B=2 -f inv.awk inv.out | head -n 1)$(head -c 200 inv.err)"
            fi
        done
    done
done
expect_eq "$runs random plans over every mode: no slot written twice or into a block another request holds" "$bad" 0
[ -z "$first" ] || echo "# $first"
# ---- asynchronous scheduling --------------------------------------------------------
# Step k+1 is scheduled before step k's output is processed: requests that
# finish in step k still hold their blocks and count as running in step
# k+1.  Three 4-token prompts, one output token each, blocks of 2, four
# usable blocks, 8 tokens a step.  Step 1: requests 0 and 1 (4 blocks), both
# finishing.  Synchronous: they are freed and request 2 runs in step 2.
# Asynchronous: step 2 sees no free block; requests 0 and 1 wait for their
# last token and are not scheduled: the step has no rows and request 2 is
# blocked; it runs in step 3.
A="--prompt-lens 4,4,4 --output-lens 1 -B 2 --num-blocks 5 --max-tokens 8 --max-model-len 16 --decode -f text --fields step,req_ids,num_scheduled_tokens,blocked,finished,free_blocks"
ok 'plan, synchronous' kvslot plan $A -o sync.out
ok 'plan --async-scheduling' kvslot plan $A --async-scheduling -o async.out
expect_eq 'synchronous: two steps' "$(sed -n 's/^step: //p' sync.out | tr '\n' ' ')" '1 2 '
expect_eq 'synchronous: request 2 in step 2' "$(field sync.out 2 req_ids)" 2
expect_eq 'asynchronous: three steps' "$(sed -n 's/^step: //p' async.out | tr '\n' ' ')" '1 2 3 '
expect_eq 'asynchronous: step 1 reports 0 and 1 finished' "$(field async.out 1 finished)" '0 1'
expect_eq 'asynchronous: step 2 has no rows, request 2 blocked, no block free' \
    "$(field async.out 2 req_ids)/$(field async.out 2 blocked)/$(field async.out 2 free_blocks)" '/2/0'
expect_eq 'asynchronous: request 2 in step 3' "$(field async.out 3 req_ids)" 2
# --max-num-seqs 2 with blocks enough: the finishing requests still count.
ok 'plan --async-scheduling --max-num-seqs 2' kvslot plan --prompt-lens 4,4,4 \
    --output-lens 1 -B 2 --max-tokens 16 --max-model-len 16 --max-num-seqs 2 \
    --decode --async-scheduling -f text --fields step,req_ids -o seqs.out
expect_eq 'request 2 waits a step for a running slot' \
    "$(sed -n 's/^\(step\|req_ids\): *//p' seqs.out | tr '\n' '|')" '1|0 1|2||3|2|'
# A request preempted with a step in flight: prompts of 4 and 3, outputs of
# 4 and 2, blocks of 2, four usable blocks, 3 tokens a step.  Steps 1-5 as
# synchronous (request 1 preempts itself in step 3); step 5 samples request
# 0's last token; step 6 is scheduled before that output: request 0 is not
# scheduled again and its blocks are still held, so step 6 is empty and
# request 1 runs from step 7.
ok 'a preemption under asynchronous scheduling' kvslot plan --prompt-lens 4,3 \
    --output-lens 4,2 -B 2 --num-blocks 5 --max-tokens 3 --max-model-len 16 --decode \
    --async-scheduling -f text --fields step,req_ids,num_scheduled_tokens,num_computed_tokens,preempted,blocked,finished -o pre.out
expect_eq 'step 3 preempts request 1' "$(field pre.out 3 preempted)" 1
expect_eq 'step 5 reports request 0 finished' "$(field pre.out 5 finished)" 0
expect_eq 'step 6 has no rows and request 1 blocked' \
    "$(field pre.out 6 req_ids)/$(field pre.out 6 blocked)" /1
expect_eq 'request 1 recomputes its 3 tokens in step 7' \
    "$(field pre.out 7 req_ids)/$(field pre.out 7 num_scheduled_tokens)/$(field pre.out 7 num_computed_tokens)" 1/3/0
expect_eq 'eight steps' "$(grep -c '^step:' pre.out)" 8

# ---- idle steps are not run -------------------------------------------------------
# vLLM's engine runs no step with nothing to schedule: the clock moves on to
# the next arrival.
printf '1 2 3\n4 5 6\n' >idle.txt
ok 'a request arriving at step 2147483647' timeout 60 kvslot plan --prompts idle.txt \
    --arrivals 1,2147483647 --max-tokens 8 -B 4 --max-model-len 16 --output-lens 2 \
    --decode -f text --fields step,req_ids -o idle.out
expect_eq 'four steps: two of each request' \
    "$(sed -n 's/^step: //p' idle.out | tr '\n' ' ')" '1 2 2147483647 2147483648 '
ok 'a gap of three steps' kvslot plan --prompts idle.txt --arrivals 1,5 \
    --max-tokens 8 -B 4 --max-model-len 16 --output-lens 1 --decode -f text \
    --fields step,req_ids -o gap.out
expect_eq 'steps 1 and 5' "$(sed -n 's/^step: //p' gap.out | tr '\n' ' ')" '1 5 '
# asynchronous: step 2 is scheduled while request 0's last token is in
# flight (no rows), then the clock moves on to step 2147483647
ok 'the same, asynchronous' timeout 60 kvslot plan --prompts idle.txt \
    --arrivals 1,2147483647 --max-tokens 8 -B 4 --max-model-len 16 --output-lens 1 \
    --decode --async-scheduling -f text --fields step,req_ids -o idlea.out
expect_eq 'steps 1, 2 (no rows), 2147483647' \
    "$(sed -n 's/^\(step\|req_ids\): *//p' idlea.out | tr '\n' '|')" '1|0|2||2147483647|1|'
ok '--steps counts the steps run' kvslot plan --prompts idle.txt --arrivals 1,5 \
    --max-tokens 8 -B 4 --max-model-len 16 --output-lens 1 --steps 2 -f text \
    --fields step -o gap2.out
expect_eq 'two steps: 1 and 5' "$(sed -n 's/^step: //p' gap2.out | tr '\n' ' ')" '1 5 '

# ---- options that only matter with prefix caching ----------------------------------
expect_fail 2 '--salt without --enable-prefix-caching' kvslot plan --prompts idle.txt \
    --salt a --max-tokens 8 -B 4 --max-model-len 16
expect_eq 'names --salt' "$(grep -c -- '--salt: .*--enable-prefix-caching' "$T/.err")" 1
expect_fail 2 '--lora-ids without --enable-prefix-caching' kvslot plan --prompts idle.txt \
    --lora-ids 1 --max-tokens 8 -B 4 --max-model-len 16
expect_eq 'names --lora-ids' "$(grep -c -- '--lora-ids: .*--enable-prefix-caching' "$T/.err")" 1

# ---- bad prompts are bad data (exit 1), named right ---------------------------------
expect_fail 1 'an unreadable --prompts' kvslot plan --prompts nonexistent.txt \
    --max-tokens 8 -B 4 --max-model-len 16
printf -- '-1 1 2\n' >pad.txt
expect_fail 1 'a row that starts with -1' kvslot plan --prompts pad.txt \
    --max-tokens 8 -B 4 --max-model-len 16
expect_eq 'names token 0 and its value' "$(grep -c 'request 0: token 0 is -1' "$T/.err")" 1
printf '1 2 -7 4\n' >neg.txt
expect_fail 1 'a negative id inside a row' kvslot plan --prompts neg.txt \
    --max-tokens 8 -B 4 --max-model-len 16
expect_eq 'names token 2 and its value' "$(grep -c 'request 0: token 2 is -7' "$T/.err")" 1
expect_fail 2 '--output-lens of the wrong count' kvslot plan --prompts p2.txt \
    --output-lens 1,2,3 --max-tokens 8 -B 4 --max-model-len 20
expect_eq 'names the count of requests, not --prompt-lens' \
    "$(grep -c -- '--output-lens has 3 values for 2 requests' "$T/.err")" 1
done_testing
