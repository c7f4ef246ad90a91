#!/bin/sh
# kvslot-groups.sh - kvslot groups against the goldens vLLM 0.33.0's own
# KV-cache config builder wrote (scripts/crosscheck/kvslot-groups.py, modes
# golden and golden-spec): every shipped config and ten explicit specs; the
# text form; bad input refused clearly; kvslot local on vLLM's docstring
# example; kvmask local.
. "$KV_TOP/tests/lib.sh"
G=kvslot/groups

# --- every shipped config, byte for byte -------------------------------
n=0
for f in "$KV_TOP"/tests/configs/*.json; do
    b=$(basename "$f" .json)
    golden "$b.json: groups equal vLLM's builder" "$G/$b.json" \
        kvslot groups --model-config "$f" -f json
    n=$((n + 1))
done
expect_eq 'every shipped config has a golden' \
    "$(ls "$GOLD/$G" | grep -vc '^spec-')" "$n"

# --- the explicit form (NAME|SPEC|OPTIONS, as the goldens were written) --
while IFS='|' read -r name spec opts; do
    # shellcheck disable=SC2086
    golden "--kv-groups '$spec' $opts" "$G/$name.json" \
        kvslot groups --kv-groups "$spec" $opts -f json
done <<'EOF'
spec-sliding-5to1|6*(5*sliding=1024,full)|
spec-chunked-3to1|12*(3*chunked=8192,full)|
spec-mamba-3to1|12*(3*mamba=1097728,full:2048)|--max-model-len 262144
spec-mamba-align|12*(3*mamba=1097728,full:2048)|--max-model-len 262144 --mamba-cache-mode align
spec-mla-mamba|4*(3*mamba=1097728,mla:1152)|--max-model-len 131072
spec-uniform-type|sliding=128:4096,sliding=128:2048|
spec-eagle-padding|13*full,12*sliding=128|
spec-padded-page|full:4096,sliding=64:3072|
spec-block4|full,sliding=128|-B 4
spec-kernel-block|2*(full:2048,mamba=70000)|-B 16 --kernel-block 64 --max-model-len 4096
spec-mla-indexer|61*(mla:1152,indexer)|
EOF

# --- the text form, worked by hand ---------------------------------------
# Gemma 3 1B: 26 layers, every sixth full (5, 11, 17, 23); the 22 sliding
# layers split into ceil(22 / 4) = 6 groups, layers[i::6].
expect_out 'gemma-3-1b, text' "model_type: gemma3_text
num_layers: 26
num_caches: 26
block_size: 16
num_groups: 7
padding_layers: 2
group 0: sliding_window window=512 block_size=16 page_bytes=16384 layers=0,7,14,21
group 1: sliding_window window=512 block_size=16 page_bytes=16384 layers=1,8,15,22
group 2: sliding_window window=512 block_size=16 page_bytes=16384 layers=2,9,16,24
group 3: sliding_window window=512 block_size=16 page_bytes=16384 layers=3,10,18,25
group 4: sliding_window window=512 block_size=16 page_bytes=16384 layers=4,12,19
group 5: sliding_window window=512 block_size=16 page_bytes=16384 layers=6,13,20
group 6: full block_size=16 page_bytes=16384 layers=5,11,17,23" \
    kvslot groups --model-config "$KV_TOP/tests/configs/gemma-3-1b.json"
# Qwen3-Next's sizes: 2,048 bytes a token, a 1,097,728-byte state:
# 16 * ceil(1097728 / (16 * 2048)) = 544 tokens, the Mamba page padded to
# 544 * 2048.
ok 'a Mamba hybrid, text' kvslot groups --kv-groups '3*mamba=1097728,full:2048' --max-model-len 4096
expect_eq '... the attention block is 544 tokens' "$(sed -n 's/^block_size: //p' "$T/.out")" 544
expect_eq '... the Mamba page is padded to 544 * 2048' \
    "$(sed -n 's/^mamba_page_size_padded: //p' "$T/.out")" 1114112
expect_eq '... the Mamba block is the model length' \
    "$(sed -n 's/^mamba_block_size: //p' "$T/.out")" 4096
ok 'stdin as the config' kvslot groups --model-config - -f json <"$KV_TOP/tests/configs/gpt-oss-20b.json"
expect_file_eq '... the same as the file' "$T/.out" "$GOLD/$G/gpt-oss-20b.json"
ok '-o writes the file' kvslot groups --kv-groups full -o "$T/g.txt"
expect_eq '... and nothing on stdout' "$(cat "$T/.out")" ''
expect_eq '... the file' "$(sed -n 's/^num_groups: //p' "$T/g.txt")" 1

# --- bad input -------------------------------------------------------------
expect_fail 2 'neither --model-config nor --kv-groups' kvslot groups
expect_fail 2 'both --model-config and --kv-groups' \
    kvslot groups --model-config "$KV_TOP/tests/configs/gpt2.json" --kv-groups full
expect_fail 2 'an unknown layer type' kvslot groups --kv-groups 'full,attention'
grep -q "unknown layer type 'attention'" "$T/.err"; _report $? '... named'
expect_fail 2 'MLA beside other attention' kvslot groups --kv-groups 'full,mla'
grep -q 'MLA and other attention layers' "$T/.err"; _report $? '... said so'
expect_fail 2 'a Mamba layer without a model length' kvslot groups --kv-groups 'mamba=100,full'
grep -q 'max-model-len' "$T/.err"; _report $? '... names --max-model-len'
# MLA beside an indexer and Mamba: the Mamba alignment makes the block
# 1,024 tokens; the indexer's 135,168-byte page does not divide the latent's
# 1,179,648 and an MLA page cannot be padded (vLLM raises NotImplementedError)
expect_fail 2 'an MLA page that cannot be unified' \
    kvslot groups --kv-groups '4*(3*mamba=1097728,mla:1152,indexer)' --max-model-len 131072
grep -q 'layer 4.indexer: MLA page of 135168 bytes' "$T/.err"; _report $? '... names the layer and its page'
expect_fail 2 'unbalanced parentheses' kvslot groups --kv-groups '3*(full'
expect_fail 2 'a count of 0' kvslot groups --kv-groups '0*full'
expect_fail 2 'a window missing' kvslot groups --kv-groups 'sliding'
expect_fail 2 'an unknown format' kvslot groups --kv-groups full -f yaml
expect_fail 2 'an unknown cache mode' kvslot groups --kv-groups full --mamba-cache-mode all
expect_fail 2 'an unknown cache dtype' kvslot groups --kv-groups full --kv-cache-dtype int4
expect_fail 2 'block size 0' kvslot groups --kv-groups full -B 0
echo '{"model_type": "falcon_h1", "num_hidden_layers": 2}' >"$T/falcon.json"
expect_fail 1 'a model whose caches are not modelled' kvslot groups --model-config "$T/falcon.json"
grep -q "falcon_h1.*not modelled" "$T/.err"; _report $? '... refused by name'
printf '{"model_type": "gemma3_text", "num_hidden_layers": 2, "num_attention_heads": 1, "hidden_size": 8, "sliding_window": 4, "layer_types": ["sliding_attention", "local"]}' >"$T/lt.json"
expect_fail 1 'an unknown layer_types entry' kvslot groups --model-config "$T/lt.json"
grep -q "unknown type 'local'" "$T/.err"; _report $? '... named'
printf '{"model_type": "nemotron_h", "num_hidden_layers": 3, "num_attention_heads": 1, "hidden_size": 8, "hybrid_override_pattern": "M*X", "mamba_num_heads": 1, "mamba_head_dim": 1, "n_groups": 1, "ssm_state_size": 1, "conv_kernel": 4}' >"$T/nh.json"
expect_fail 1 'an unknown hybrid_override_pattern letter' kvslot groups --model-config "$T/nh.json"
grep -q "unknown layer type 'X'" "$T/.err"; _report $? '... named'
printf '{"model_type": "nemotron_h", "num_hidden_layers": 3, "hybrid_override_pattern": "M*"}' >"$T/nh2.json"
expect_fail 1 'a pattern of the wrong length' kvslot groups --model-config "$T/nh2.json"
expect_fail 1 'malformed JSON' kvslot groups --model-config "$KV_TOP/tests/configs/bad/syntax.json"
expect_fail 1 'no such file' kvslot groups --model-config "$T/none.json"

# --- kvslot local: vLLM's docstring example ---------------------------------
# chunk 4, block 2; 4, 10 and 5 queries over 6, 17 and 9 keys.  The
# docstring's cu_seqlens_q_local line is not the sum of its own
# q_seqlens_local line (2,2,1,4,4,1,4,1); the code computes the sum.
printf '0 1 2 3 4 5 6 7 8 9\n10 11 12 13 14 15 16 17 18 19\n20 21 22 23 24 25 26 27 28 29\n' >"$T/bt.txt"
expect_out 'local: the virtual batches of vLLM'"'"'s example' "query_start_loc: 0 2 4 5 9 13 14 18 19
seq_lens: 4 2 4 4 4 1 4 1
block_table: 0 1
block_table: 2 3
block_table: 12 13
block_table: 14 15
block_table: 16 17
block_table: 18 19
block_table: 22 23
block_table: 24 25
max_query_len: 4
max_seq_len: 4
req_indices: 0 0 1 1 1 1 2 2
k_start: 0 4 4 8 12 16 4 8" \
    kvslot local --chunk-size 4 -B 2 --block-table "$T/bt.txt" --scheduled 4,10,5 --computed 2,7,4 -f text
# a start column past the row is clipped to the table's last column
printf '7 8\n' >"$T/bt1.txt"
expect_out 'local: the column clipped to the last' "query_start_loc: 0 1
seq_lens: 1
block_table: 8 8
max_query_len: 1
max_seq_len: 1
req_indices: 0
k_start: 8" \
    kvslot local --chunk-size 4 -B 2 --block-table "$T/bt1.txt" --scheduled 1 --computed 8 -f text
expect_fail 2 'local: a chunk not a multiple of the block' \
    kvslot local --chunk-size 6 -B 4 --block-table "$T/bt.txt" --scheduled 4,10,5
expect_fail 1 'local: rows and requests differ' \
    kvslot local --chunk-size 4 -B 2 --block-table "$T/bt.txt" --scheduled 4,10
expect_fail 2 'local: --computed of another length' \
    kvslot local --chunk-size 4 -B 2 --block-table "$T/bt.txt" --scheduled 4,10,5 --computed 1

# --- kvmask local ------------------------------------------------------------
# 3 chunked-prefill rows over 10 keys, chunk 4: positions 7, 8 and 9; 7 sees
# 4..7, 8 and 9 open the chunk at 8.
expect_out 'kvmask local, bottom-right' "# 1 = attend, 0 = masked (--keep: FlexAttention's and FlashInfer's convention)
0 0 0 0 1 1 1 1 0 0
0 0 0 0 0 0 0 0 1 0
0 0 0 0 0 0 0 0 1 1" kvmask local --chunk-size 4 -q 3 -k 10 --keep -f text
expect_out 'kvmask local, top-left' "# 1 = attend, 0 = masked (--keep: FlexAttention's and FlashInfer's convention)
1 0 0 0 0 0 0 0 0 0
1 1 0 0 0 0 0 0 0 0
1 1 1 0 0 0 0 0 0 0" kvmask local --chunk-size 4 -q 3 -k 10 --align top-left --keep -f text
ok 'kvmask local, stats' kvmask local --chunk-size 4 -q 3 -k 10 -f stats
expect_eq '... 7 kept' "$(sed -n 's/^kept: //p' "$T/.out")" 7
expect_fail 2 'kvmask local without --chunk-size' kvmask local -n 4
expect_fail 2 '--chunk-size on another kind' kvmask causal -n 4 --chunk-size 2

# --- SlidingWindowMLASpec (mla_sliding=W) beside MLA ---------------------
# vLLM 0.33.0's get_kv_cache_groups on the same specs gives these groups.
expect_out 'mla_sliding beside mla: full+sliding groups on the MLA block' \
'num_layers: 6
num_caches: 6
block_size: 64
num_groups: 3
padding_layers: 0
group 0: mla_sliding_window window=128 block_size=64 page_bytes=262144 layers=0,3
group 1: mla_sliding_window window=128 block_size=64 page_bytes=262144 layers=1,4
group 2: mla block_size=64 page_bytes=262144 layers=2,5' \
    kvslot groups --kv-groups '2*(mla_sliding=128,mla_sliding=128,mla)' -B 64
# SlidingWindowMLASpec.merge asks only for one window: latents of two sizes
# share a bucket, the second size's layers after the first's
expect_out 'mla_sliding of two sizes merge into one bucket' \
'num_layers: 6
num_caches: 6
block_size: 16
num_groups: 3
padding_layers: 0
group 0: mla block_size=16 page_bytes=65536 layers=0,1
group 1: mla_sliding_window window=16 block_size=16 page_bytes=65536 layers=2,3
group 2: mla_sliding_window window=16 block_size=16 page_bytes=65536 layers=4,5' \
    kvslot groups -B 16 --kv-groups \
    'mla,mla,mla_sliding=16:1152,mla_sliding=16:576,mla_sliding=16:1152,mla_sliding=16:576'
expect_out '... and one uniform spec, the first layer'"'"'s' \
'{"num_layers":2,"num_caches":2,"block_size":16,"num_groups":1,"padding_layers":0,"groups":[{"kind":"mla_sliding_window","uniform_type":false,"sliding_window":16,"block_size":16,"page_bytes":18432,"layers":["0","1"]}]}' \
    kvslot groups -B 16 -f json --kv-groups 'mla_sliding=16:1152,mla_sliding=16:576'
expect_fail 2 'mla_sliding without a window' kvslot groups --kv-groups 'mla_sliding,mla'
expect_fail 2 'mla_sliding beside non-MLA attention' \
    kvslot groups --kv-groups 'mla_sliding=4,full'
done_testing
