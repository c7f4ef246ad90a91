#!/bin/sh
# kvslot-apc-ref.sh - kvslot plan --enable-prefix-caching against
# tests/apc_ref.py, an independent transcription of the same vLLM rules
# that matches blocks by their exact content: 200 random traces (shared
# prefixes over a small vocabulary, block sizes 1-8, staggered arrivals,
# small pools that preempt; half admitted by the chunk, a third under
# asynchronous scheduling), every step compared: each scheduled request's
# tokens, computed and cached tokens and blocks, the waiting, blocked,
# preempted and finished requests, the free blocks.
. "$KV_TOP/tests/lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
    echo "# no python3: skipped"
    done_testing
    exit
fi
F=step,req_ids,num_scheduled_tokens,num_computed_tokens,num_cached_tokens,block_table,waiting,blocked,preempted,finished,free_blocks
N=200
ok 'the traces' python3 "$KV_TOP/tests/apc_ref.py" gen-all $N "$T"
failed=0
k=1
while [ $k -le $N ]; do
    d="$T/t$k"
    kvslot plan --prompts "$d/prompts.txt" $(cat "$d/args") --enable-prefix-caching \
        --decode -f text --fields $F -o "$d/out.txt" 2>"$d/err" ||
        failed=$((failed + 1))
    k=$((k + 1))
done
expect_eq 'kvslot plans every trace' "$failed" 0
python3 "$KV_TOP/tests/apc_ref.py" check-all $N "$T" >"$T/check"
expect_eq "every step of the $N traces as the reference has it" \
    "$(cut -d' ' -f1 "$T/check")" 0
[ "$(cut -d' ' -f1 "$T/check")" = 0 ] || echo "# $(cut -d' ' -f2- "$T/check")"
done_testing
