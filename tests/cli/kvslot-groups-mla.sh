#!/bin/sh
# kvslot-groups-mla.sh - kvslot groups on the MLA models whose caches vLLM
# 0.33.0 builds beyond one latent a layer: DeepSeek-V3.2's indexer under
# IndexCache (index_topk_pattern / index_topk_freq), and dots3_note's
# sliding-window MLA layers beside sparse MLA, grouped as vLLM packs a
# block-outermost layout.  Goldens written by vLLM's own builder
# (scripts/crosscheck/kvslot-groups.py golden) and worked by hand below;
# the configs of tests/configs/reduced are reduced by hand (README there).
. "$KV_TOP/tests/lib.sh"
G=kvslot/groups-mla
C=$KV_TOP/tests/configs

for f in "$C"/reduced/*.json "$C"/dsa/deepseek-v3.2-exp.json; do
    b=$(basename "$f" .json)
    golden "$b.json: groups equal vLLM's builder" "$G/$b.json" \
        kvslot groups --model-config "$f" -f json
done

# --- worked by hand ------------------------------------------------------
# dots3_note, 8 layers, full at 0 and 4, blocks of 16, bf16: every latent
# row is the swa_ latent, 1024 + 64 = 1088 values, 16 x 1088 x 2 = 34816
# bytes a block; an indexer 128 + 4 = 132 bytes a token, 2112 a block.
# Layout BLHNC packs: bucket {0, 0.indexer, 4, 4.indexer} (two page sizes,
# two layers each: balanced, 2 repeats) and bucket {1,2,3,5,6,7} (one page
# size, 6); _approximate_gcd([2, 6], floor 2) = 2, so the first stays one
# group, 2 x 34816 + 2 x 2112 = 73856 bytes, the second splits into
# cdiv(6, 2) = 3, repeat r to group r mod 3: {1,5} {2,6} {3,7}, 69632.
expect_out 'dots3_note: packed groups, by hand' \
'model_type: dots3_note
num_layers: 8
num_caches: 10
block_size: 16
num_groups: 4
padding_layers: 6
group 0: mla uniform_type block_size=16 page_bytes=73856 layers=0,0.indexer,4,4.indexer
group 1: mla_sliding_window uniform_type window=128 block_size=16 page_bytes=69632 layers=1,5
group 2: mla_sliding_window uniform_type window=128 block_size=16 page_bytes=69632 layers=2,6
group 3: mla_sliding_window uniform_type window=128 block_size=16 page_bytes=69632 layers=3,7' \
    kvslot groups --model-config "$C/reduced/test-dots3-note-reduced.json"

# IndexCache: index_topk_pattern FFSFSS keeps the indexer of layers 0, 1
# and 3 only; all MLA, one uniform-type group: 6 x 16 x 576 x 2 + 3 x 2112
# = 110592 + 6336 = 116928 bytes.
expect_out 'V3.2 IndexCache: indexers of the F layers only' \
'{"kind":"mla","uniform_type":true,"block_size":16,"page_bytes":116928,"layers":["0","0.indexer","1","1.indexer","2","3","3.indexer","4","5"]}' \
    sh -c '"$1" groups --model-config "$2" -f json | sed "s/.*\"groups\":\[\(.*\)\]}$/\1/"' sh \
    "$(command -v kvslot)" "$C/reduced/test-deepseek-v32-indexcache-reduced.json"

# index_topk_freq 3 (offset 2): layers 0 and 4 keep theirs (max(i - 1, 0)
# a multiple of 3), 2 and 6 not.  The MLA bucket is unbalanced (4 latents,
# 2 indexers): one group; with no repeat the sliding bucket is a state
# bucket, 4 states fit the widest block (143488 / 34816 = 4): one group.
expect_out 'dots3_note IndexCache: unbalanced bucket, one group each' \
'num_groups: 2
padding_layers: 2
group 0: mla uniform_type block_size=16 page_bytes=143488 layers=0,0.indexer,2,4,4.indexer,6
group 1: mla_sliding_window uniform_type window=512 block_size=16 page_bytes=139264 layers=1,3,5,7' \
    sh -c '"$1" groups --model-config "$2" | grep -e ^group -e num_groups -e padding' sh \
    "$(command -v kvslot)" "$C/reduced/test-dots3-note-indexcache-reduced.json"

# --- refused as vLLM refuses ---------------------------------------------
D='"model_type": "dots3_note", "num_hidden_layers": 2, "num_attention_heads": 1, "hidden_size": 8, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "swa_qk_rope_head_dim": 64, "sliding_window_size": 128, "layer_types": ["full_attention", "sliding_attention"]'
printf '{%s, "swa_kv_lora_rank": 256, "index_topk": 64}' "$D" >"$T/narrow.json"
expect_fail 1 'dots3_note: a swa_ latent narrower than the MLA latent' \
    kvslot groups --model-config "$T/narrow.json"
grep -q "narrower than the MLA latent (576).*asserts" "$T/.err"; _report $? '... with the reason'
printf '{%s, "swa_kv_lora_rank": 1024}' "$D" >"$T/notopk.json"
expect_fail 1 'dots3_note: no index_topk' kvslot groups --model-config "$T/notopk.json"
grep -q "needs 'index_topk'" "$T/.err"; _report $? '... named'
printf '{%s, "swa_kv_lora_rank": 1024, "index_topk": 64}' "$D" | sed 's/"sliding_attention"/"chunked"/' >"$T/lt.json"
expect_fail 1 'dots3_note: an unknown layer type' kvslot groups --model-config "$T/lt.json"
grep -q "layer 1: expected full_attention or sliding_attention" "$T/.err"; _report $? '... named'
printf '{%s, "swa_kv_lora_rank": 1024, "index_topk": 64, "index_topk_pattern": 3}' "$D" >"$T/pat.json"
expect_fail 1 'index_topk_pattern of the wrong type' kvslot groups --model-config "$T/pat.json"

# DeepSeek-V4 and V4.1 keep sliding-window MLA caches beside compressed
# ones, Kimi K3 delta-attention states, Step 5 a circular buffer: refused
# by name, not read as another model
for mt in deepseek_v4 deepseek_v41 kimi_k3 step5; do
    printf '{"model_type": "%s", "num_hidden_layers": 2, "kv_lora_rank": 512}' "$mt" >"$T/v4.json"
    expect_fail 1 "$mt: refused" kvslot groups --model-config "$T/v4.json"
    grep -q "model_type '$mt': its cache layout is not modelled" "$T/.err"; _report $? "... by name"
done

# --- plan runs the packed groups (MLA as full attention, the windowed
# latents as sliding windows) ------------------------------------------------
printf '1 2 3 4 5 6 7 8 9 10\n' >"$T/p.txt"
expect_out 'plan: dots3_note groups, first step' \
'block_table.g0: 1 2 3 0
block_table.g1: 4 5 6 0
block_table.g2: 7 8 9 0
block_table.g3: 10 11 12 0' \
    kvslot plan --model-config "$C/reduced/test-dots3-note-reduced.json" -B 4 \
    --max-model-len 16 --prompts "$T/p.txt" --max-tokens 16 --output-lens 1 \
    --steps 1 --fields block_table.g0,block_table.g1,block_table.g2,block_table.g3 -f text

done_testing
