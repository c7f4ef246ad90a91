#!/bin/sh
# kvslot-map-groups.sh - kvslot map with KV-cache groups: every group's
# slot mapping and block table against goldens written from vLLM 0.33.0's
# own MultiGroupBlockTable (scripts/crosscheck/kvslot-map-groups.py's
# vllm_step on the same tables and step): sliding window beside full
# attention, Llama 4 Scout's config (chunked local and full), Mamba state
# groups beside full attention; the shared fields equal map's without
# groups; the per-group fields selected by NAME.gK; bad input refused.
. "$KV_TOP/tests/lib.sh"
G=$GOLD/kvslot/map-groups
F=slot_mapping,block_table

bts() {   # NAME N: --block-table gK=FILE for groups 0..N-1
    _i=0
    while [ $_i -lt "$2" ]; do printf -- '--block-table g%d=%s ' $_i "$G/$1-bt$_i.txt"; _i=$((_i + 1)); done
}
# shellcheck disable=SC2046
golden 'sliding window 8 + full, -B 4 = vLLM'"'"'s MultiGroupBlockTable' kvslot/map-groups/sliding-full.txt \
    kvslot map --kv-groups '2*(sliding=8,full)' -B 4 $(bts sliding-full 2) \
    --scheduled 3,5 --computed 2,1 --fields $F -f text
# shellcheck disable=SC2046
golden 'Llama 4 Scout (3 chunked-local groups, 1 full) = vLLM'"'"'s' kvslot/map-groups/llama-4-scout.txt \
    kvslot map --model-config "$KV_TOP/tests/configs/llama-4-scout.json" --max-model-len 4096 \
    $(bts llama-4-scout 4) --scheduled 1,12,40 --computed 130,17,0 --fields $F -f text
# shellcheck disable=SC2046
golden 'three Mamba groups + full: no slot mapping for the state groups' kvslot/map-groups/mamba-full.txt \
    kvslot map --kv-groups '2*(3*mamba=65536,full)' -B 16 --max-model-len 1024 \
    $(bts mamba-full 4) --scheduled 20,7 --computed 5,0 --fields $F -f text

# the tables in group order, without gK=
ok 'tables in group order' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    --block-table "$G/sliding-full-bt0.txt" --block-table "$G/sliding-full-bt1.txt" \
    --scheduled 3,5 --computed 2,1 --fields $F -f text -o "$T/order.txt"
expect_file_eq '... the same as gK=' "$T/order.txt" "$G/sliding-full.txt"
# the shared fields are map's; a group's block size and table give its own
kvslot map --kv-groups '2*(sliding=8,full)' -B 4 $(bts sliding-full 2) --scheduled 3,5 \
    --computed 2,1 --max-model-len 64 --fields positions,query_start_loc,token_indices,slot_mapping.g1 \
    -f text >"$T/g.txt" 2>"$T/.err"
kvslot map -B 16 --block-table "$G/sliding-full-bt1.txt" --scheduled 3,5 --computed 2,1 \
    --max-model-len 64 --fields positions,query_start_loc,token_indices,slot_mapping -f text \
    | sed 's/^slot_mapping:/slot_mapping.g1:/' >"$T/one.txt"
expect_file_eq 'one group = map without groups at its block size' "$T/one.txt" "$T/g.txt"
expect_out 'NAME.gK: that group alone, at the name'"'"'s first place' 'block_numbers.g1: 9 9 9 11 11 11 11 11
positions: 2 3 4 1 2 3 4 5' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 $(bts sliding-full 2) \
    --scheduled 3,5 --computed 2,1 --fields block_numbers.g1,positions -f text

# --- refusals ------------------------------------------------------------------
expect_fail 2 'slot_mapping of a Mamba group' kvslot map --kv-groups '2*(3*mamba=65536,full)' -B 16 \
    --max-model-len 1024 $(bts mamba-full 4) --scheduled 20,7 --computed 5,0 --fields slot_mapping.g0
expect_fail 2 'a group with no table' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    --block-table g0="$G/sliding-full-bt0.txt" --scheduled 3,5 --computed 2,1
expect_fail 2 'two tables for one group' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    --block-table g0="$G/sliding-full-bt0.txt" --block-table g0="$G/sliding-full-bt1.txt" --scheduled 3,5
expect_fail 2 'named and unnamed tables mixed' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    --block-table g0="$G/sliding-full-bt0.txt" --block-table "$G/sliding-full-bt1.txt" --scheduled 3,5
expect_fail 2 'a group past the last' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    $(bts sliding-full 2) --scheduled 3,5 --fields slot_mapping.g2
expect_fail 2 'a named table with no file' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    --block-table g0="$G/sliding-full-bt0.txt" --block-table g1= --scheduled 3,5 --computed 2,1
expect_eq '... says so' "$(grep -c "'g1=': no file named" "$T/.err")" 1
expect_fail 2 'a group named with a leading zero' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    --block-table g0="$G/sliding-full-bt0.txt" --block-table g01="$G/sliding-full-bt1.txt" \
    --scheduled 3,5 --computed 2,1
expect_fail 2 'a field named with a leading zero' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    $(bts sliding-full 2) --scheduled 3,5 --computed 2,1 --fields slot_mapping.g01
expect_fail 2 'a shared field named for a group' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    $(bts sliding-full 2) --scheduled 3,5 --fields positions.g0
expect_fail 2 'DCP with a sliding window' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    $(bts sliding-full 2) --scheduled 3,5 --cp-size 2
expect_eq '... with vLLM'"'"'s message' "$(head -n 1 "$T/.err")" \
    "kvslot map: vLLM 0.33.0 refuses group 0 (sliding_window) with --cp-size 2: DCP not support sliding window."
expect_fail 2 'two tables without groups' kvslot map -B 4 --block-table "$G/sliding-full-bt0.txt" \
    --block-table "$G/sliding-full-bt1.txt" --scheduled 3,5
expect_fail 2 '--model-config and --kv-groups' kvslot map --kv-groups full -B 4 \
    --model-config "$KV_TOP/tests/configs/gpt2.json" --block-table x --scheduled 1
expect_fail 1 'a table too short for its group' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    $(bts sliding-full 2) --scheduled 100,5 --computed 2,1

# --max-mem bounds the output with groups as without: two slot mappings of
# 100 (--pad-to) and two 1 x 3 tables are 206 entries, 1648 bytes as i64
printf '1 2 3\n' >"$T/t0.txt"
printf '4 5 6\n' >"$T/t1.txt"
expect_fail 1 'groups: an output over --max-mem is refused' \
    kvslot map --kv-groups 'sliding=8,full' -B 4 --block-table "g0=$T/t0.txt" \
    --block-table "g1=$T/t1.txt" --scheduled 5 --pad-to 100 --fields $F --max-mem 1k -o "$T/mm.npy"
expect_eq '... with the message map gives without groups' "$(head -n 1 "$T/.err")" \
    'kvslot map: the output of 206 entries needs 1648 bytes, more than --max-mem 1024; raise --max-mem'
expect_eq '... and no output file' "$(ls "$T" | grep -c '^mm\.npy')" 0
ok 'groups: the same output as i32 (824 bytes) fits' \
    kvslot map --kv-groups 'sliding=8,full' -B 4 --block-table "g0=$T/t0.txt" \
    --block-table "g1=$T/t1.txt" --scheduled 5 --pad-to 100 --fields $F --max-mem 1k \
    --dtype i32 -o "$T/mm.npy"
expect_fail 1 'groups: a huge --pad-to over the default --max-mem' \
    kvslot map --kv-groups 'sliding=8,full' -B 4 --block-table "g0=$T/t0.txt" \
    --block-table "g1=$T/t1.txt" --scheduled 5 --pad-to 2147483647 --max-mem 1G -f npy
# one full-attention group counts its default fields as map without groups
kvslot map -B 4 --block-table "$T/t0.txt" --scheduled 3 --computed 2 --pad-to 50 \
    --max-mem 500 -f text 2>"$T/one.err"
expect_fail 1 'one full group over --max-mem' kvslot map --kv-groups full -B 4 \
    --block-table "$T/t0.txt" --scheduled 3 --computed 2 --pad-to 50 --max-mem 500 -f text
expect_eq '... the same message as without groups' "$(head -n 1 "$T/.err")" "$(head -n 1 "$T/one.err")"
# --- decode context parallelism ----------------------------------------------
# kvslot(1)'s hand-worked example (KV-cache groups in a step): groups of
# blocks of 8 and 4, one request at positions 4 to 9, DCP rank 1 of 2
printf '3\n' >"$T/dg0.txt"
printf '6 9\n' >"$T/dg1.txt"
D="--kv-groups chunked=16:2048,full -B 4 --block-table $T/dg0.txt --block-table $T/dg1.txt --computed 4 --scheduled 6"
# shellcheck disable=SC2086
expect_out 'DCP rank 1 of 2: the man page'"'"'s example' 'slot_mapping.g0: -1 26 -1 27 -1 28
slot_mapping.g1: -1 26 -1 27 -1 36' kvslot map $D --cp-size 2 --cp-rank 1 --fields slot_mapping -f text
# shellcheck disable=SC2086
expect_out '... rank 0 holds the even positions' 'slot_mapping.g0: 26 -1 27 -1 28 -1
slot_mapping.g1: 26 -1 27 -1 36 -1' kvslot map $D --cp-size 2 --fields slot_mapping -f text
# interleave 2 over 2 ranks: positions 4,5 and 8,9 on rank 0, 6,7 on rank 1
# (group 1: 8,9 are the next virtual block's, block 9's slots 0 and 1)
# shellcheck disable=SC2086
expect_out '... interleave 2' 'slot_mapping.g0: -1 -1 26 27 -1 -1
slot_mapping.g1: -1 -1 26 27 -1 -1' kvslot map $D --cp-size 2 --cp-rank 1 --interleave 2 --fields slot_mapping -f text
# shellcheck disable=SC2086
expect_out '... the dcp convention and the kernel virtual block change nothing' 'slot_mapping.g0: -1 26 -1 27 -1 28
slot_mapping.g1: -1 26 -1 27 -1 36' kvslot map $D --cp-size 2 --cp-rank 1 --cp-convention dcp \
    --virtual-block kernel --fields slot_mapping -f text
# each group's table is read over its virtual block: a row of one column
# holds 16 positions of group 0 under DCP 2, so position 15 needs no more
printf '3\n' >"$T/dg1s.txt"
ok 'a table read in the group'"'"'s virtual block (block 4 x DCP 2)' \
    kvslot map --kv-groups full -B 4 --block-table "$T/dg1s.txt" --scheduled 8 --cp-size 2 -f text
expect_fail 1 '... and a position past it refused' \
    kvslot map --kv-groups full -B 4 --block-table "$T/dg1s.txt" --scheduled 9 --cp-size 2 --max-model-len 64
# shellcheck disable=SC2086
expect_fail 2 'an interleave that does not divide a group'"'"'s block' kvslot map $D --cp-size 2 --interleave 8
expect_eq '... named' "$(head -n 1 "$T/.err")" \
    "kvslot map: --interleave 8 does not divide group 1's block size 4"
# shellcheck disable=SC2086
expect_fail 2 'a rank past the DCP world' kvslot map $D --cp-size 2 --cp-rank 2
# shellcheck disable=SC2086
expect_fail 2 '--all-ranks with groups' kvslot map $D --cp-size 2 --all-ranks
expect_fail 2 'DCP with sliding-window MLA' kvslot map --kv-groups mla,mla_sliding=4 -B 4 \
    --block-table "$T/dg0.txt" --block-table "$T/dg1.txt" --scheduled 2 --cp-size 2
cp "$T/.err" "$T/e"
ok '... with vLLM'"'"'s message' grep -q 'group 1 (mla_sliding_window) with --cp-size 2: DCP not support sliding window.' "$T/e"
ok 'DCP with MLA and its indexer (one group): mapped' kvslot map --kv-groups mla,indexer,mla -B 4 \
    --block-table "$T/dg0.txt" --scheduled 2 --cp-size 2 -f text
# PCP: vLLM's model runner refuses it without MLA, and dense MLA with DCP;
# what it runs (MLA) map does not model
# shellcheck disable=SC2086
expect_fail 2 'PCP without MLA' kvslot map $D --pcp-size 2 --cp-convention dcp
expect_eq '... with vLLM'"'"'s message' "$(head -n 1 "$T/.err")" \
    "kvslot map: vLLM 0.33.0 refuses --pcp-size 2 for a model without MLA: MRV2 PCP currently supports MLA models only."
expect_fail 2 'PCP with DCP and dense MLA' kvslot map --kv-groups mla -B 4 --block-table "$T/dg0.txt" \
    --scheduled 2 --pcp-size 2 --cp-size 2
cp "$T/.err" "$T/e"
ok '... with vLLM'"'"'s message' grep -q 'MRV2 PCP + DCP supports sparse MLA models only.' "$T/e"
expect_fail 2 'PCP with DCP and sparse MLA (an indexer): not modelled' kvslot map \
    --kv-groups mla,indexer,mla -B 4 --block-table "$T/dg0.txt" --scheduled 2 --pcp-size 2 --cp-size 2
cp "$T/.err" "$T/e"
ok '... said so' grep -q 'map does not model it' "$T/e"
# shellcheck disable=SC2016
ok '... not as vLLM'"'"'s refusal' sh -c '! grep -q "vLLM 0.33.0 refuses" "$1"' - "$T/e"
done_testing
