#!/bin/sh
# kvslot-step.sh - kvslot step: --chunk-size writes what kvslot local
# writes (text and .npy, byte for byte); --parents writes a token tree's
# depths, depth counts and positions, against a golden written from vLLM
# 0.20.2's own tree drafter (propose_tree of llm_base_proposer.py, run by
# scripts/crosscheck/kvattn-variants.py on the same tree and roots) and a
# hand-worked tree; bad parent lists refused with kvmask tree's messages.
. "$KV_TOP/tests/lib.sh"

# --- --chunk-size: the virtual batches, as kvslot local ----------------------
printf '0 1 2 3 4 5 6 7 8 9\n10 11 12 13 14 15 16 17 18 19\n20 21 22 23 24 25 26 27 28 29\n' >"$T/bt.txt"
set -- --chunk-size 4 -B 2 --block-table "$T/bt.txt" --scheduled 4,10,5 --computed 2,7,4
kvslot local "$@" -f text >"$T/local.txt" 2>"$T/.err"
kvslot step "$@" -f text >"$T/step.txt" 2>"$T/.err"
expect_file_eq 'step --chunk-size = local (text)' "$T/local.txt" "$T/step.txt"
expect_eq '... and that is vLLM'"'"'s docstring example' \
    "$(sed -n 1p "$T/step.txt")" 'query_start_loc: 0 2 4 5 9 13 14 18 19'
kvslot local "$@" -o "$T/local.npy" 2>"$T/.err"
kvslot step "$@" -o "$T/step.npy" 2>"$T/.err"
expect_file_eq 'step --chunk-size = local (npy)' "$T/local.npy" "$T/step.npy"
expect_fail 2 'step --chunk-size: a chunk not a multiple of the block' \
    kvslot step --chunk-size 6 -B 4 --block-table "$T/bt.txt" --scheduled 4,10,5
expect_fail 2 'step --chunk-size without --block-table' \
    kvslot step --chunk-size 4 -B 2 --scheduled 4
expect_fail 2 'step --chunk-size with --max-model-len' \
    kvslot step "$@" --max-model-len 9
set --

# --- --parents: a token tree ---------------------------------------------------
# root 0; 1 and 2 children of 0; 3 and 4 children of 1; 5 a child of 2
expect_out 'a six-token tree, one request at 0' 'depths: 0 1 1 2 2 2
depth_counts: 2 3
positions: 0 1 1 2 2 2' kvslot step --parents -1,0,0,1,1,2 -f text
# roots at 10 and 5; max_model_len 15: depth 2 needs 10 + 5 >= 15, zeroed
expect_out 'two requests, the drafter'"'"'s max_model_len rule' 'depths: 0 1 1 2 2 2
depth_counts: 2 3
positions: 10 11 11 0 0 0 5 6 6 7 7 7' \
    kvslot step --parents -1,0,0,1,1,2 --computed 10,5 --max-model-len 15 -f text
# vLLM's shape: 3 children of the root, 2 under each, 1 under each of those;
# roots at 100, 7 and 0, max_model_len 110
golden 'tree 3x2x1 = vLLM 0.20.2'"'"'s propose_tree' kvslot/step/tree-3x2x1.txt \
    kvslot step --parents -1,0,0,0,1,1,2,2,3,3,4,5,6,7,8,9 --computed 100,7,0 \
    --max-model-len 110 -f text
# a list in another order than by depth: depths still follow the parents
expect_out 'a tree not listed by depth' 'depths: 0 1 2 1 3
depth_counts: 2 1 1
positions: 3 4 5 4 6' kvslot step --parents -1,0,1,0,2 --computed 3 -f text
kvslot step --parents -1,0,0,1 -o "$T/t.npy" 2>"$T/.err"
ok '.npy: three arrays' test "$(od -An -c "$T/t.npy" | grep -o 'N   U   M   P   Y' | wc -l)" = 3

# --- refusals, the same as kvmask tree's ----------------------------------------
for bad in -1,0,5 -1,2,0 -1,1 -1,0,3,2 ''; do
    expect_fail 2 "--parents '$bad' refused" kvslot step --parents "$bad"
    m1=$(sed -n 1p "$T/.err" | sed 's/^kvslot step: //')
    kvmask tree --parents "$bad" >/dev/null 2>"$T/.err2"
    m2=$(sed -n 1p "$T/.err2" | sed 's/^kvmask: //')
    expect_eq "... with kvmask tree's message" "$m1" "$m2"
done
grep -q "forward reference" "$T/.err2" 2>/dev/null || true
expect_fail 2 'neither --chunk-size nor --parents' kvslot step
expect_fail 2 'both --chunk-size and --parents' kvslot step --parents -1 --chunk-size 4
expect_fail 2 '--parents with -B' kvslot step --parents -1,0 -B 4
expect_fail 2 '--computed: empty' kvslot step --parents -1,0 --computed ''
expect_fail 2 '--computed: negative' kvslot step --parents -1,0 --computed -1
expect_fail 2 '--max-model-len 0' kvslot step --parents -1,0 --max-model-len 0
done_testing
