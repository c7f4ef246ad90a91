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
expect_fail 2 'a shared field named for a group' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    $(bts sliding-full 2) --scheduled 3,5 --fields positions.g0
expect_fail 2 'context parallelism with groups' kvslot map --kv-groups '2*(sliding=8,full)' -B 4 \
    $(bts sliding-full 2) --scheduled 3,5 --cp-size 2
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
done_testing
