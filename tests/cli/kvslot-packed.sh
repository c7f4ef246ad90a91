#!/bin/sh
# kvslot-packed.sh - --kv-groups 'packed:SPEC': the block-outermost layout
# whose groups vLLM 0.33.0 packs by page size (_get_packed_kv_cache_groups),
# spelled out without a config; kvslot plan on it equals kvslot plan
# --model-config on the dots3_note configs it spells; the bad forms are
# usage errors.  scripts/crosscheck/kvslot-hybrid.py (mixes
# mla+sliding-packed, mamba-packed, mamba-align-packed) holds the plan to
# vLLM's Scheduler.
. "$KV_TOP/tests/lib.sh"
C=$KV_TOP/tests/configs/reduced
DOTS='packed:2*(mla:2176,indexer,3*mla_sliding=128:2176)'
IDXC='packed:2*(mla:2176,indexer,mla_sliding=512:2176,mla:2176,mla_sliding=512:2176)'

# --- groups --------------------------------------------------------------
# The grouping of tests/cli/kvslot-groups-mla.sh's hand-worked dots3_note
# (one MLA group of 2 x 34816 + 2 x 2112 = 73856 bytes, three sliding
# groups of two layers, 69632), the layers numbered in the spec's order.
expect_out 'packed: dots3_note groups, layers in spec order' \
'num_layers: 10
num_caches: 10
block_size: 16
num_groups: 4
padding_layers: 6
group 0: mla uniform_type block_size=16 page_bytes=73856 layers=0,1.indexer,5,6.indexer
group 1: mla_sliding_window uniform_type window=128 block_size=16 page_bytes=69632 layers=2,7
group 2: mla_sliding_window uniform_type window=128 block_size=16 page_bytes=69632 layers=3,8
group 3: mla_sliding_window uniform_type window=128 block_size=16 page_bytes=69632 layers=4,9' \
    kvslot groups --kv-groups "$DOTS"

# the same groups (kind, window, block and page) as the config gives
for pair in "test-dots3-note-reduced|$DOTS" "test-dots3-note-indexcache-reduced|$IDXC"; do
    cfg=${pair%%|*} spec=${pair#*|}
    kvslot groups --model-config "$C/$cfg.json" | sed -n 's/ layers=.*//p' >"$T/cfg.txt"
    kvslot groups --kv-groups "$spec" | sed -n 's/ layers=.*//p' >"$T/spec.txt"
    expect_file_eq "$cfg: the spec's groups equal the config's" "$T/spec.txt" "$T/cfg.txt"
done

# packed keeps every page: a 4,096-byte sliding layer beside a 2,048-byte
# full one, two groups of 16 tokens a block; unpacked, the full layer's
# block grows to 32 (unify_kv_cache_spec_page_size)
expect_out 'packed: no page grows' \
'group 0: sliding_window uniform_type window=4 block_size=16 page_bytes=65536 layers=0
group 1: full uniform_type block_size=16 page_bytes=32768 layers=1' \
    sh -c '"$1" groups --kv-groups packed:sliding=4,full:2048 | grep ^group' sh \
    "$(command -v kvslot)"
expect_out 'unpacked: the smaller page grows its block' \
'group 0: sliding_window window=4 block_size=16 page_bytes=65536 layers=0
group 1: full block_size=32 page_bytes=65536 layers=1' \
    sh -c '"$1" groups --kv-groups sliding=4,full:2048 | grep ^group' sh \
    "$(command -v kvslot)"
# one page size: nothing to pack, the usual grouping
expect_out 'packed with one page size: as unpacked' \
"$(kvslot groups --kv-groups '2*(sliding=8,full)')" \
    kvslot groups --kv-groups 'packed:2*(sliding=8,full)'
# unpacked, the indexer's page cannot grow to the latent's (vLLM refuses)
expect_fail 2 'unpacked dots3_note spec refused' \
    kvslot groups --kv-groups "${DOTS#packed:}"

# A sliding-window bucket of two page sizes in unequal counts (a state
# bucket: nothing repeats) split into groups: vLLM zips its page sizes'
# layer lists, which keeps only as many repeats as the shorter has.
# 2 x (8192, 2048, 2048) pages at blocks of 4 beside two 8192-byte full
# layers: 16384 / 8192 = 2 states a block, cdiv(6, 2) = 3 groups, 2
# repeats; vLLM's third group is empty (StopIteration).  3 x 8192 and
# 2 x 2048 beside three full layers: 3 a block, cdiv(5, 3) = 2 groups, 2
# repeats keep 4 of the 5 layers ('KV cache groups miss layers: [layer.2]'
# from vLLM's exact-partition check).  kvslot packed them and lost the
# layers; it refuses them as vLLM fails on them.
expect_fail 2 'packed: an uneven split vLLM leaves a group empty in is refused' \
    kvslot groups --kv-groups 'packed:2*(sliding=2:2048,2*sliding=2:512,full:2048)' \
    -B 4 --kernel-block 4
grep -qF 'vLLM 0.33.0 cannot pack the bucket of layer 0: 6 layers of 2 page sizes in unequal counts, split into 3 groups, keep 4 of them (an empty group raises StopIteration)' "$T/.err"
_report $? '... with the numbers' "$(cat "$T/.err")"
expect_fail 2 'packed: an uneven split that loses a layer is refused' \
    kvslot plan --prompt-lens 3 --max-tokens 8 -B 4 --kernel-block 4 --max-model-len 16 \
    --kv-groups 'packed:3*sliding=2:2048,2*sliding=2:512,3*full:2048'
grep -qF 'split into 2 groups, keep 4 of them (KV cache groups miss layers)' "$T/.err"
_report $? '... with the numbers' "$(cat "$T/.err")"

# --- plan: --kv-groups equals --model-config ------------------------------
P="$T/prompts.txt"
awk 'BEGIN { srand(7); for (r = 0; r < 6; r++) { n = (r < 3) ? 40 + 70 * r : 20 + 9 * r
     s = ""; for (i = 0; i < n; i++) s = s (i ? " " : "") ((r % 3 == 0 && i < 64) ? i + 1 : int(rand() * 50) + 1)
     print s } }' >"$P"
for pair in "test-dots3-note-reduced|$DOTS" "test-dots3-note-indexcache-reduced|$IDXC"; do
    cfg=${pair%%|*} spec=${pair#*|}
    for mode in '' '--enable-prefix-caching' '--enable-prefix-caching --async-scheduling' \
                '--num-blocks 60' '--enable-prefix-caching --num-blocks 60'; do
        set -- plan --prompts "$P" --output-lens 9,3,40,2,17,5 --arrivals 1,1,2,4,6,6 \
            --max-tokens 64 -B 16 --max-model-len 512 -f json $mode
        kvslot "$@" --model-config "$C/$cfg.json" >"$T/a.json" 2>"$T/a.err"
        kvslot "$@" --kv-groups "$spec" >"$T/b.json" 2>"$T/b.err"
        expect_eq "$cfg${mode:+ ($mode)}: plan ran" "$(cat "$T/a.err" "$T/b.err")" ""
        expect_file_eq "$cfg${mode:+ ($mode)}: --kv-groups plan equals --model-config's" \
            "$T/b.json" "$T/a.json"
        [ "$cfg$mode" = "test-dots3-note-reduced--enable-prefix-caching --num-blocks 60" ] &&
            cp "$T/b.json" "$T/small.json"
    done
done
grep -q '"num_cached_tokens":\[[^]]*[1-9]' "$T/small.json"
_report $? '... a small pool with prefix-cache hits'
grep -q '"preempted":\[[0-9]' "$T/small.json"
_report $? '... and preemptions'

# a packed group whose first layer is an indexer (the order vLLM's
# DeepSeek modules register theirs) runs as full attention, as vLLM's
# scheduler runs that group's first spec: the plan equals the latent-first
# one; an indexer with no latent in its group is still refused
set -- plan --prompts "$P" --output-lens 9,3,40,2,17,5 --max-tokens 64 -B 16 \
    --max-model-len 512 --enable-prefix-caching --num-blocks 60 -f json
kvslot "$@" --kv-groups "$DOTS" >"$T/a.json"
expect_out 'indexer-led packed group: planned as the latent-led one' "$(cat "$T/a.json")" \
    kvslot "$@" --kv-groups 'packed:2*(indexer,mla:2176,3*mla_sliding=128:2176)'
expect_fail 2 'an indexer without a latent in its group refused' \
    kvslot "$@" --kv-groups 'packed:indexer,mla_sliding=8'
grep -q 'group 0 is mla_indexer: plan does not model it' "$T/.err"
_report $? '... naming the group'

# --- packed with Mamba layers --------------------------------------------
# vLLM aligns the hybrid block first (Platform._align_hybrid_block_size:
# the first attention layer's 2,048 bytes a token need 48 tokens to hold
# a 98,304-byte state, so every attention block is 48 and the state needs
# no padding), then packs: pages of 98,304 (Mamba, full) and 196,608
# (sliding).  No bucket mixes page sizes, so nothing repeats: the full
# bucket stays whole (2 x 98,304, the widest block), the Mamba bucket
# (a state bucket) splits into 196,608 / 98,304 = 2 states a block,
# cdiv(4, 2) = 2 groups, layers[i::2]; the sliding bucket (a state bucket
# when nothing repeats) 1 a block, 2 groups.  vLLM 0.33.0's own grouping
# of these specs in the layout BLHNC gives the same five groups.
MAMBA='packed:2*(2*mamba=98304,full:2048,sliding=8)'
for mode in none align; do
    mb=48
    [ $mode = none ] && mb=512
    expect_out "packed with Mamba, cache mode $mode: the aligned block, then packed" \
"num_layers: 8
num_caches: 8
block_size: 48
mamba_block_size: $mb
mamba_page_size_padded: 0
num_groups: 5
padding_layers: 2
group 0: mamba uniform_type block_size=$mb page_bytes=196608 layers=0,4
group 1: mamba uniform_type block_size=$mb page_bytes=196608 layers=1,5
group 2: full uniform_type block_size=48 page_bytes=196608 layers=2,6
group 3: sliding_window uniform_type window=8 block_size=48 page_bytes=196608 layers=3
group 4: sliding_window uniform_type window=8 block_size=48 page_bytes=196608 layers=7" \
        kvslot groups --kv-groups "$MAMBA" --max-model-len 512 --mamba-cache-mode $mode
done
# its plan in cache mode align, asynchronous, prefix caching on, a pool of
# 13 blocks: chunks split at the 48-token blocks, the first request
# preempted with a step in flight and resumed on its own 96 cached tokens,
# the second prompt hitting the same 96 in every group; the golden file is the
# plan vLLM 0.33.0's AsyncScheduler makes on the groups above (every step
# equal, scripts/crosscheck/kvslot-hybrid.py's mix mamba-align-packed)
awk 'BEGIN { for (r = 0; r < 2; r++) { s = ""
     for (i = 0; i < 100 + 20 * r; i++) s = s (i ? " " : "") (i < 100 ? i % 37 + 1 : i % 11 + 1)
     print s } }' >"$T/pm.txt"
golden 'packed with Mamba in align: the plan vLLM makes' kvslot/plan-packed-mamba.txt \
    kvslot plan --prompts "$T/pm.txt" --output-lens 3,2 --arrivals 1,5 --max-tokens 64 \
    -B 16 --max-model-len 512 --num-blocks 14 --max-num-seqs 8 --kv-groups "$MAMBA" \
    --mamba-cache-mode align --enable-prefix-caching --async-scheduling -f text \
    --fields step,req_ids,num_scheduled_tokens,num_computed_tokens,num_cached_tokens,preempted,free_blocks,block_table

# --- bad forms: exit 2, nothing on stdout, the place named ---------------
bad() {   # spec message
    expect_fail 2 "groups refuses '$1'" kvslot groups --kv-groups "$1"
    grep -qF -- "$2" "$T/.err"
    _report $? "... '$2'" "$(cat "$T/.err")"
    expect_fail 2 "plan refuses '$1'" kvslot plan --prompt-lens 3 --max-tokens 8 -B 4 \
        --max-model-len 16 --kv-groups "$1"
    grep -qF -- "$2" "$T/.err"
    _report $? "... '$2'" "$(cat "$T/.err")"
}
bad 'packed' "--kv-groups: at offset 6: expected ':' and the layers after 'packed'"
bad 'packed:' "--kv-groups: at offset 7: no layers after 'packed:'"
bad 'packed;full' "at offset 6: expected ':' and the layers after 'packed'"
bad 'packed full' "at offset 6: expected ':' and the layers after 'packed'"
bad 'full,packed:full' "at offset 5: 'packed:' goes before the first layer, once"
bad 'packed:packed:full' "at offset 7: 'packed:' goes before the first layer, once"
bad '2*(packed:full)' "at offset 3: 'packed:' goes before the first layer, once"
bad 'packedx:full' "unknown layer type 'packedx'"
bad 'packed:,full' "at offset 7: unknown layer type"
expect_fail 2 'map refuses a bad packed spec' kvslot map --kv-groups 'full,packed:full' \
    --block-table g0=/dev/null --scheduled 1
done_testing
