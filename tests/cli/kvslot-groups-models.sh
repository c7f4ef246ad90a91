#!/bin/sh
# kvslot-groups-models.sh - which model types kvslot groups derives from a
# config.json and which it refuses: the rule of each vLLM 0.33.0 model file
# (lib/slot/groups_models.c), worked by hand on small configs.  The same
# rules on every reviewed type are compared with vLLM's own builder by
# scripts/crosscheck/kvslot-groups.py (family_configs).
. "$KV_TOP/tests/lib.sh"

B='"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256, "head_dim": 64, "max_position_embeddings": 4096'
# one layer of 2 x 2 heads x 64 x 2 bytes: 512 bytes a token, 8192 a block
cfg() { printf '{"model_type": "%s", %s%s}' "$1" "$B" "${2:+, $2}" >"$T/c.json"; }
groups() { kvslot groups --model-config "$T/c.json" | grep '^group'; }

# --- derived -----------------------------------------------------------
# commandr.py: Cohere 2's sliding layers see sliding_window + 1 keys; its
# class fills layer_types as all but every 4th layer
cfg cohere2 '"sliding_window": 64'
expect_out 'cohere2: window + 1 on the layers transformers fills in' \
'group 0: sliding_window window=65 block_size=16 page_bytes=8192 layers=0
group 1: sliding_window window=65 block_size=16 page_bytes=8192 layers=1
group 2: sliding_window window=65 block_size=16 page_bytes=8192 layers=2
group 3: full block_size=16 page_bytes=8192 layers=3' groups

# MistralConfig's sliding_window is 4096 when the config has none; null is
# none
cfg mistral
expect_out 'mistral: the class default window on every layer' \
'group 0: sliding_window window=4096 block_size=16 page_bytes=8192 layers=0,1,2,3' groups
cfg mistral '"sliding_window": null'
expect_out 'mistral: sliding_window null is none' \
'group 0: full block_size=16 page_bytes=8192 layers=0,1,2,3' groups
# mistral.py's MistralAttention is llama.py's LlamaAttention, which reads
# layer_types per layer (a sliding layer gets config.sliding_window); so
# do Phi-3 and ERNIE 4.5, built as LlamaForCausalLM
for mt in mistral phi3 ernie4_5; do
    cfg $mt '"sliding_window": 64, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]'
    expect_out "$mt: mixed layer_types, per layer as llama.py reads them" \
'group 0: sliding_window window=64 block_size=16 page_bytes=8192 layers=0,2
group 1: full block_size=16 page_bytes=8192 layers=1,3' groups
done
# without head_dim, the config class's default: Qwen3Config's is 128 and
# Gemma2Config's 256 whatever hidden_size / heads (64 here); LlamaConfig's
# is hidden_size / heads
B0='"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256, "max_position_embeddings": 4096'
printf '{"model_type": "qwen3", %s}' "$B0" >"$T/c.json"
expect_out 'qwen3 without head_dim: 128' \
'group 0: full block_size=16 page_bytes=16384 layers=0,1,2,3' groups
printf '{"model_type": "gemma2", %s, "sliding_window": null}' "$B0" >"$T/c.json"
expect_out 'gemma2 without head_dim: 256' \
'group 0: full block_size=16 page_bytes=32768 layers=0,1,2,3' groups
printf '{"model_type": "llama", %s}' "$B0" >"$T/c.json"
expect_out 'llama without head_dim: hidden_size / heads' \
'group 0: full block_size=16 page_bytes=8192 layers=0,1,2,3' groups
cfg llama '"sliding_window": 64, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]'
expect_out 'llama: layer_types per layer' \
'group 0: sliding_window window=64 block_size=16 page_bytes=8192 layers=0,2
group 1: full block_size=16 page_bytes=8192 layers=1,3' groups

# Qwen2Config: no window unless use_sliding_window; the layers from
# max_window_layers on slide, and Qwen2Model asserts against a mix
cfg qwen2 '"sliding_window": 64'
expect_out 'qwen2: a window without use_sliding_window is none' \
'group 0: full block_size=16 page_bytes=8192 layers=0,1,2,3' groups
cfg qwen2 '"sliding_window": 64, "use_sliding_window": true, "max_window_layers": 0'
expect_out 'qwen2: use_sliding_window, every layer from 0' \
'group 0: sliding_window window=64 block_size=16 page_bytes=8192 layers=0,1,2,3' groups
cfg qwen2 '"sliding_window": 64, "use_sliding_window": true, "max_window_layers": 2'
expect_fail 1 'qwen2: sliding from layer 2 of 4 is refused' kvslot groups --model-config "$T/c.json"
grep -q "max_window_layers' (2).*Qwen2Model asserts" "$T/.err"; _report $? '... as vLLM asserts'

# Qwen2.5-VL: qwen2.py over its text_config, whose max_window_layers is
# 80 by default: with use_sliding_window, no layer of 4 slides
printf '{"model_type": "qwen2_5_vl", "text_config": {"model_type": "qwen2_5_vl_text", %s, "sliding_window": 64, "use_sliding_window": true}}' "$B" >"$T/c.json"
expect_out 'qwen2_5_vl: text_config, max_window_layers 80' \
'group 0: full block_size=16 page_bytes=8192 layers=0,1,2,3' groups

# qwen3_5.py: Qwen3-Next's gated delta net on the linear_attention layers
# (all but every 4th), read from text_config: a state of ((2 x 2 x 32 +
# 4 x 32) x 3 + 4 x 32 x 32) x 2 = 9728 bytes; 9728 / 512 a token makes
# the attention block 19, 32 in multiples of 16, the state padded to
# 32 x 512 = 16384
printf '{"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", %s, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4}}' "$B" >"$T/c.json"
expect_out 'qwen3_5: gated delta net from text_config' \
'group 0: mamba block_size=4096 page_bytes=16384 layers=0
group 1: mamba block_size=4096 page_bytes=16384 layers=1
group 2: mamba block_size=4096 page_bytes=16384 layers=2
group 3: full block_size=32 page_bytes=16384 layers=3' groups
sed 's/"text_config": {"model_type": "qwen3_5_text", /"text_config": {/' "$T/c.json" >"$T/c2.json"
expect_fail 1 'qwen3_5: a text_config without its model_type' \
    kvslot groups --model-config "$T/c2.json"
grep -q "give text_config its model_type" "$T/.err"; _report $? '... says so'

# minicpm3.py: attention over all 4 heads of 32 + 16 values, not MLA:
# 2 x 4 x 48 x 2 = 768 bytes a token
cfg minicpm3 '"qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "kv_lora_rank": 64'
expect_out 'minicpm3: every head, q/k head size' \
'group 0: full block_size=16 page_bytes=12288 layers=0,1,2,3' groups

# the KV heads vLLM counts: Falcon's multi_query (its default) is one;
# DBRX's attn_config.kv_n_heads (1 by default)
printf '{"model_type": "falcon", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}' >"$T/c.json"
expect_out 'falcon: multi_query by default, one KV head (2 x 64 x 2 x 16)' \
'group 0: full block_size=16 page_bytes=4096 layers=0,1' groups
cfg dbrx '"attn_config": {"kv_n_heads": 4}'
expect_out 'dbrx: attn_config.kv_n_heads' \
'group 0: full block_size=16 page_bytes=16384 layers=0,1,2,3' groups

# chatglm.py: multi_query_group_num KV heads only with multi_query_attention,
# and its head size is hidden_size / heads (64) whatever head_dim says
cfg chatglm '"multi_query_attention": true, "multi_query_group_num": 1, "kv_channels": 128'
sed 's/"head_dim": 64/"head_dim": 128/' "$T/c.json" >"$T/c2.json" && mv "$T/c2.json" "$T/c.json"
expect_out 'chatglm: one KV group of 64 values (1 x 64 x 2 x 2 x 16)' \
'group 0: full block_size=16 page_bytes=4096 layers=0,1,2,3' groups
cfg chatglm '"multi_query_group_num": 1'
expect_out 'chatglm: every head without multi_query_attention' \
'group 0: full block_size=16 page_bytes=16384 layers=0,1,2,3' groups

# glm_moe_dsa is DeepSeek-V3.2's model: GlmMoeDsaConfig's index_topk
# (2048) gives every layer an indexer; latent 512 + 64 by default:
# 4 x 16 x 576 x 2 + 4 x 16 x 132 = 73728 + 8448
cfg glm_moe_dsa
expect_out 'glm_moe_dsa: sparse MLA and its indexer from the class defaults' \
'group 0: mla uniform_type block_size=16 page_bytes=82176 layers=0,0.indexer,1,1.indexer,2,2.indexer,3,3.indexer' groups
# glm4_moe_lite's class reads head_dim as qk_rope_head_dim: 128 + 48
cfg glm4_moe_lite '"kv_lora_rank": 128, "qk_rope_head_dim": 32, "qk_nope_head_dim": 64'
sed 's/"head_dim": 64/"head_dim": 48/' "$T/c.json" >"$T/c2.json" && mv "$T/c2.json" "$T/c.json"
expect_out 'glm4_moe_lite: head_dim is the rope part' \
'group 0: mla block_size=16 page_bytes=5632 layers=0,1,2,3' groups

# --- refused -------------------------------------------------------------
# transformers fills OLMo 3's layer_types by a rule kvslot does not follow
cfg olmo3 '"sliding_window": 64'
expect_fail 1 'olmo3 with a window and no layer_types' kvslot groups --model-config "$T/c.json"
grep -q "model_type 'olmo3' with a sliding window needs 'layer_types'" "$T/.err"; _report $? '... by name'
cfg olmo3 '"sliding_window": 64, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"]'
expect_out 'olmo3 with layer_types' \
'group 0: sliding_window window=64 block_size=16 page_bytes=8192 layers=0
group 1: sliding_window window=64 block_size=16 page_bytes=8192 layers=1
group 2: sliding_window window=64 block_size=16 page_bytes=8192 layers=2
group 3: full block_size=16 page_bytes=8192 layers=3' groups

# vLLM builds caches kvslot does not model: refused by name, not read as
# full attention
for mt in glm5_next qwen4_exp minimax_m3 minimax_m3_vl hy_v4 inkling_text \
          longcat_flash gemma4_text mimo_v2_flash exaone_moe step3p5 \
          minimax_m2 deepseek_v41 kimi_k3 step5 step5_vl; do
    cfg "$mt" '"kv_lora_rank": 512, "sliding_window": 64'
    expect_fail 1 "$mt: refused" kvslot groups --model-config "$T/c.json"
    grep -q "model_type '$mt': its cache layout is not modelled: vLLM builds" "$T/.err"
    _report $? "... by name, with what vLLM builds"
done
# a model type no one has compared with vLLM's model files
for mt in a_model_from_next_year flint granitemoe_swa; do
    cfg "$mt"
    expect_fail 1 "$mt: not reviewed" kvslot groups --model-config "$T/c.json"
    grep -q "model_type '$mt' has not been compared with vLLM" "$T/.err"; _report $? '... by name'
done
# plan and map refuse it the same way
cfg hy_v4
printf '1 2 3\n' >"$T/p.txt"
expect_fail 1 'plan: hy_v4 refused' kvslot plan --model-config "$T/c.json" \
    --prompts "$T/p.txt" --max-tokens 4 -B 4 --max-model-len 16
grep -q "model_type 'hy_v4'" "$T/.err"; _report $? '... by name'

done_testing
