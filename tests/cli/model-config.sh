#!/bin/sh
# model-config.sh - --model-config config.json: what kvchunk info prints for
# each shipped config (values written here by hand), keys equal to those of
# the equivalent explicit options, overrides, a put/get move under Llama
# 3.1's llama3-scaled RoPE, kvattn gen and kvchunk sim geometry, and bad
# files refused.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1
C="$KV_TOP/tests/configs"
S="dir:$T/store"

info() {   # config field
    kvchunk info --model-config "$C/$1.json" | sed -n "s/^$2: //p"
}
# file  layers kv_heads head_dim dtype bytes_per_token
while read -r f l h d dt b; do
    expect_eq "info $f: $l layers, $h KV heads, head dim $d, $dt, $b bytes per token" \
        "$(info "$f" layers) $(info "$f" kv_heads) $(info "$f" head_dim) $(info "$f" dtype) $(info "$f" bytes_per_token)" \
        "$l $h $d $dt $b"
done <<'EOF'
llama-3.1-8b 32 8 128 bf16 131072
qwen2.5-7b 28 4 128 bf16 57344
qwen2.5-7b-instruct-yarn 28 4 128 bf16 57344
mistral-7b-v0.1 32 8 128 bf16 131072
phi-3-mini-4k 32 32 96 bf16 393216
phi-2 32 32 80 f16 327680
gpt-j-6b 28 16 256 f16 458752
EOF
expect_eq 'info llama: the llama3 scaling' "$(info llama-3.1-8b rope)" \
    'neox theta=500000 rotary_dim=128 head_dim=128 scaling=llama3 factor=8 low_freq_factor=1 high_freq_factor=4 original_max_position_embeddings=8192'
expect_eq 'info gpt-j: interleaved pairs, 64 rotary dims' "$(info gpt-j-6b rope)" \
    'gptj theta=10000 rotary_dim=64 head_dim=256 scaling=none'
expect_eq 'info phi-2: partial rotary 0.4 of 80' \
    "$(info phi-2 rope | sed 's/ head_dim.*//')" 'neox theta=10000 rotary_dim=32'
expect_eq 'info mistral: sliding window 4096' "$(info mistral-7b-v0.1 sliding_window)" 4096
expect_eq 'info qwen: use_sliding_window false is no window' \
    "$(info qwen2.5-7b sliding_window)" 0
expect_eq 'info qwen yarn: factor 4 over 32768' \
    "$(info qwen2.5-7b-instruct-yarn rope | grep -o 'scaling=yarn factor=4 original_max_position_embeddings=32768')" \
    'scaling=yarn factor=4 original_max_position_embeddings=32768'

# ---- the same keys whichever way the model is described -------------------
printf '1 2 3 4 5 6 7' >c.tok
printf '9 9 9' >sys.tok
LLAMA="--shape 32,8,128 --dtype bf16 --rope neox --rope-theta 500000 --rope-scaling llama3:factor=8,low=1,high=4,orig=8192"
k1=$(kvchunk key --model-config "$C/llama-3.1-8b.json" --tokens c.tok --context sys.tok)
k2=$(kvchunk key $LLAMA --tokens c.tok --context sys.tok)
expect_eq 'llama key from the config = key from explicit options' "$k1" "$k2"
expect_eq 'a key is 32 hex digits' "$(printf %s "$k1" | tr -d '0-9a-f' | wc -c | tr -d ' ')$(printf %s "$k1" | wc -c | tr -d ' ')" 032
k3=$(kvchunk key --model-config "$C/mistral-7b-v0.1.json" --tokens c.tok --context sys.tok)
k4=$(kvchunk key --shape 32,8,128 --dtype bf16 --rope-theta 10000 --tokens c.tok --context sys.tok)
expect_eq 'mistral key from the config = key from explicit options' "$k3" "$k4"
k5=$(kvchunk key --model-config "$C/llama-3.1-8b.json" --rope-theta 10000 --tokens c.tok --context sys.tok)
ok 'an explicit option changes the key' test "$k5" != "$k1"
ok 'explicit options override the file' kvchunk info -v \
    --model-config "$C/llama-3.1-8b.json" --shape 2,8,128 --rope-theta 10000
expect_eq '-v says which options override it' \
    "$(grep -c 'overrides .*llama-3.1-8b.json' "$T/.err")" 2
expect_eq 'and the override holds' "$(sed -n 's/^layers: //p' "$T/.out")" 2
ok 'a scaling given replaces the file'"'"'s' kvchunk info \
    --model-config "$C/llama-3.1-8b.json" --rope-scaling none
expect_eq 'scaling none' "$(grep -c 'scaling=none$' "$T/.out")" 1

# ---- a move under llama3 scaling: put at 3, get at 5000 -------------------
# Two layers of Llama 3.1's geometry and RoPE keep the test small.
M="--model-config $C/llama-3.1-8b.json --shape 2,8,128 --dtype f32"
ok 'toy KV at the base position 3' kvchunk toy $M --tokens c.tok --pos 3 -o kv3.npy
ok 'put' kvchunk put --store "$S" $M --tokens c.tok --context sys.tok \
    --kv kv3.npy --base-pos 3
ok 'get at 5000' kvchunk get --store "$S" $M --tokens c.tok --context sys.tok \
    --at 5000 -o moved.npy
ok 'toy KV computed at 5000' kvchunk toy $M --tokens c.tok --pos 5000 -o kv5000.npy
if [ -x "$KV_BIN/kvattn" ]; then
    # one rounding of f32 on values of the toy's magnitude, per element
    ok 'moved == computed at 5000 within the move bound' kvattn cmp --quiet \
        --atol 1e-6 --rtol 1e-6 moved.npy kv5000.npy
fi
ok 'selftest-rope: llama3 moves within 1 ulp RMS, 2 max (bf16)' \
    kvchunk selftest-rope --model-config "$C/llama-3.1-8b.json" --shape 1,8,128
ok 'selftest-rope: yarn moves (Qwen 2.5 config)' \
    kvchunk selftest-rope --model-config "$C/qwen2.5-7b-instruct-yarn.json" --shape 1,4,128

# ---- how positions enter: learned, ALiBi, per-layer RoPE ------------------
expect_eq 'info gpt2: learned absolute positions' "$(info gpt2 rope)" 'learned head_dim=64'
expect_eq 'info opt: learned absolute positions' "$(info opt-125m rope)" 'learned head_dim=64'
expect_eq 'info bloom: ALiBi, K without positions' "$(info bloom-560m rope)" 'none head_dim=64'
expect_eq 'info bloom: 24 layers of 16 heads of 64' \
    "$(info bloom-560m layers) $(info bloom-560m kv_heads) $(info bloom-560m head_dim)" '24 16 64'
expect_eq 'info gemma 3: the sliding layers'"'"' own base (all but every 6th layer)' \
    "$(info gemma-3-1b rope)" \
    'neox theta=1000000 rotary_dim=256 head_dim=256 scaling=none local_theta=10000 local_layers=0,1,2,3,4,6,7,8,9,10,12,13,14,15,16,18,19,20,21,22,24,25'
tr -d '\n' <"$C/gemma-3-1b.json" | sed 's/"rope_scaling": null/"rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]/' >g3lt.json
ok 'gemma 3 with layer_types and a scaling' kvchunk info --model-config g3lt.json
expect_eq '  ... the sliding layers named by layer_types, the scaling global only' \
    "$(sed -n 's/^rope: //p' "$T/.out")" \
    'neox theta=1000000 rotary_dim=256 head_dim=256 scaling=linear factor=8 local_theta=10000 local_layers=0,2'
expect_eq 'info llama 4: interleaved pairs, llama3 bands 1 and 1, every 4th layer NoPE' \
    "$(info llama-4-scout rope)" \
    'gptj theta=500000 rotary_dim=128 head_dim=128 scaling=llama3 factor=16 low_freq_factor=1 high_freq_factor=1 original_max_position_embeddings=8192 nope_layers=3,7,11,15,19,23,27,31,35,39,43,47'
tr -d '\n' <"$C/llama-4-scout.json" |
    sed 's/"no_rope_layers": \[[^]]*\]/"no_rope_layers": [1, 0, 1, 1, 0, 1]/' >l4flags.json
tr -d '\n' <"$C/llama-4-scout.json" |
    sed 's/"no_rope_layers": \[[^]]*\]/"no_rope_layers": []/' >l4empty.json
sed 's/"num_hidden_layers": 48/"num_hidden_layers": 6/' l4flags.json >l4six.json
ok 'llama 4 with its own flags' kvchunk info --model-config l4six.json
expect_eq 'no_rope_layers: 0 marks a NoPE layer' \
    "$(sed -n 's/^rope: .*nope_layers=//p' "$T/.out")" 1,4
ok 'llama 4 with an empty list' kvchunk info --model-config l4empty.json
expect_eq 'an empty list: every no_rope_layer_interval-th layer' \
    "$(sed -n 's/^rope: .*nope_layers=\([0-9]*,[0-9]*\),.*/\1/p' "$T/.out")" 3,7
ok 'DeepSeek-V3: MLA keys latent chunks' kvchunk key --explain \
    --model-config "$C/deepseek-v3.json" --tokens c.tok
expect_eq 'DeepSeek-V3: naming kv_lora_rank' "$(grep -c 'kv_lora_rank=512' "$T/.out")" 1

printf '4 5 6' >m.tok
while read -r f shape; do
    MM="--model-config $C/$f.json --shape $shape --dtype f32"
    ok "$f: toy KV at 3" kvchunk toy $MM --tokens m.tok --pos 3 -o "$f.3.npy"
    ok "$f: put at 3" kvchunk put --store "dir:$T/st-$f" $MM --tokens m.tok \
        --context sys.tok --kv "$f.3.npy" --base-pos 3
    ok "$f: get where it was computed" kvchunk get --store "dir:$T/st-$f" $MM \
        --tokens m.tok --context sys.tok --at 3 -o "$f.same.npy"
    expect_file_eq "$f: unchanged" "$f.3.npy" "$f.same.npy"
done <<'EOF'
gpt2 4,12,64
opt-125m 4,12,64
bloom-560m 4,16,64
gemma-3-1b 7,1,256
llama-4-scout 4,8,128
EOF
for f in gpt2 opt-125m; do
    expect_fail 1 "$f: a move is refused" kvchunk get --store "dir:$T/st-$f" \
        --model-config "$C/$f.json" --shape 4,12,64 --dtype f32 --tokens m.tok \
        --context sys.tok --at 40 -o "$f.40.npy"
    expect_eq "$f: learned positions named" \
        "$(grep -c 'learned absolute position embeddings' "$T/.err")" 1
done
ok 'bloom: a move' kvchunk get --store "dir:$T/st-bloom-560m" \
    --model-config "$C/bloom-560m.json" --shape 4,16,64 --dtype f32 --tokens m.tok \
    --context sys.tok --at 40 -o bloom.40.npy
expect_file_eq 'bloom: a move is a copy (ALiBi leaves K alone)' bloom-560m.3.npy bloom.40.npy
printf '%s' '{"num_hidden_layers": 4, "num_attention_heads": 2, "head_dim": 8,
 "model_type": "gemma3_text", "sliding_window": 4, "layer_types": ["sliding_attention",
 "sliding_attention", "full_attention", "sliding_attention"], "rope_parameters": {
 "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000},
 "sliding_attention": {"rope_type": "default", "rope_theta": 10000}}}' >g3v5.json
ok 'gemma 3 with rope_parameters by layer type (transformers 5)' \
    kvchunk info --model-config g3v5.json
expect_eq '  ... full_attention global, sliding_attention local' \
    "$(sed -n 's/^rope: //p' "$T/.out")" \
    'neox theta=1000000 rotary_dim=8 head_dim=8 scaling=linear factor=8 local_theta=10000 local_layers=0,1,3'
G3="--model-config $C/gemma-3-1b.json --shape 7,1,256 --dtype f32"
ok 'gemma 3: get at 40' kvchunk get --store "dir:$T/st-gemma-3-1b" $G3 \
    --tokens m.tok --context sys.tok --at 40 -o g3.40.npy
ok 'gemma 3: toy KV computed at 40' kvchunk toy $G3 --tokens m.tok --pos 40 -o g3.toy40.npy
ok 'gemma 3: the same with every layer on the global base' kvchunk toy \
    --shape 7,1,256 --dtype f32 --rope-theta 1000000 --tokens m.tok --pos 40 -o g3.one40.npy
if [ -x "$KV_BIN/kvattn" ]; then
    ok 'gemma 3: moved == computed at 40 (sliding layers on base 10000, layer 5 on 1000000)' \
        kvattn cmp --quiet --atol 1e-6 --rtol 1e-6 g3.40.npy g3.toy40.npy
    ok 'gemma 3: one base for every layer is not the same' sh -c \
        "! kvattn cmp --quiet --atol 1e-6 --rtol 1e-6 g3.toy40.npy g3.one40.npy"
fi
L4="--model-config $C/llama-4-scout.json --shape 4,8,128 --dtype f32"
ok 'llama 4: get at 40' kvchunk get --store "dir:$T/st-llama-4-scout" $L4 \
    --tokens m.tok --context sys.tok --at 40 -o l4.40.npy
ok 'llama 4: toy KV computed at 40' kvchunk toy $L4 --tokens m.tok --pos 40 -o l4.toy40.npy
if [ -x "$KV_BIN/kvattn" ]; then
    ok 'llama 4: moved == computed at 40 (layer 3 NoPE, copied)' kvattn cmp --quiet \
        --atol 1e-6 --rtol 1e-6 l4.40.npy l4.toy40.npy
fi
ok 'selftest-rope: Llama 4 bands 1 and 1' \
    kvchunk selftest-rope --model-config "$C/llama-4-scout.json" --shape 1,8,128

# ---- kvattn gen and kvchunk sim ------------------------------------------
if [ -x "$KV_BIN/kvattn" ]; then
    ok 'kvattn gen --model-config qwen --shape 1,16' kvattn gen \
        --model-config "$C/qwen2.5-7b.json" --shape 1,16 -q q.npy -k k.npy -v v.npy
    expect_eq 'Q [1, 28, 16, 128] bf16' \
        "$(head -c 100 q.npy | grep -a -o "'descr': '[^']*'.*'shape': ([0-9, ]*)")" \
        "'descr': '<V2', 'fortran_order': False, 'shape': (1, 28, 16, 128)"
    expect_eq 'K [1, 4, 16, 128]' \
        "$(head -c 100 k.npy | grep -a -o "'shape': ([0-9, ]*)")" "'shape': (1, 4, 16, 128)"
    expect_fail 2 'kvattn gen: the config needs --shape B,S' kvattn gen \
        --model-config "$C/qwen2.5-7b.json" --shape 1,2,3
    expect_fail 2 'kvattn gen: an MLA config is refused' kvattn gen \
        --model-config "$C/deepseek-v2-lite.json" --shape 1,16
fi
ok 'sim trace' kvchunk sim gen --seed 1 -n 20 --docs 20 -o trace.txt
ok 'sim with the llama config' kvchunk sim --model-config "$C/llama-3.1-8b.json" \
    --capacity-bytes 1G trace.txt
cp "$T/.out" cfg.txt
ok 'sim with the same geometry given' kvchunk sim --layers 32 --kv-heads 8 \
    --head-dim 128 --dtype bf16 --capacity-bytes 1G trace.txt
expect_file_eq 'the same results' cfg.txt "$T/.out"
ok 'sim with the DeepSeek config (MLA latent bytes)' kvchunk sim \
    --model-config "$C/deepseek-v2-lite.json" --capacity-bytes 1G trace.txt
ok 'MLA: more tokens fit in the same bytes' test "$(cmp -s cfg.txt "$T/.out"; echo $?)" = 1

# ---- bad files --------------------------------------------------------------
expect_fail 2 'malformed JSON' kvchunk info --model-config "$C/bad/syntax.json"
expect_eq 'the message has the file, line and column' \
    "$(grep -c 'syntax.json: line 4, column [0-9]*:' "$T/.err")" 1
expect_fail 2 'a missing key' kvchunk key --model-config "$C/bad/no-layers.json" \
    --tokens c.tok
expect_eq 'the key is named' "$(grep -c '"num_hidden_layers"' "$T/.err")" 1
expect_fail 2 'a string where a number belongs' kvchunk info \
    --model-config "$C/bad/type.json"
expect_fail 2 'heads not a multiple of KV heads' kvchunk info \
    --model-config "$C/bad/gqa.json"
expect_fail 2 'longrope refused' kvchunk info --model-config "$C/bad/longrope.json"
expect_eq 'saying what is supported' "$(grep -c "'longrope' is not supported" "$T/.err")" 1
ok 'an MLA model keys latent chunks' kvchunk key --explain \
    --model-config "$C/deepseek-v2-lite.json" --tokens c.tok
expect_eq 'naming kv_lora_rank' "$(grep -c 'kv_lora_rank=512' "$T/.out")" 1
printf '{"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 7}' >odd.json
expect_fail 2 'an odd head dim' kvchunk info --model-config odd.json
expect_eq 'names the config field, not an option' \
    "$(grep -c '"head_dim": 7 is odd' "$T/.err") $(grep -c -- '--rotary-dim' "$T/.err")" '1 0'
printf '{"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 8, "partial_rotary_factor": 0.375}' >prf.json
expect_fail 2 'an odd partial rotary dim' kvchunk info --model-config prf.json
expect_eq 'names partial_rotary_factor' "$(grep -c '"partial_rotary_factor": a rotary dim of 3' "$T/.err")" 1
expect_fail 2 'a missing file' kvchunk info --model-config nosuch.json
expect_fail 2 'sim: a bad config' kvchunk sim --model-config "$C/bad/gqa.json" trace.txt
expect_fail 2 'info with neither a config nor --shape' kvchunk info

# Python's json.load reads NaN, Infinity and -Infinity as values, and
# published configs carry them (Nemotron-H's "time_step_limit": [0.0,
# Infinity]); a key that does not shape the cache keys the same whatever
# number it holds
P="$C/published/nemotron-h-56b-base-8k.json"
ok 'a published config with Infinity is read' kvchunk key --model-config "$P" --tokens c.tok
cp "$T/.out" inf.key
sed 's/Infinity/1e300/' "$P" >noinf.json
ok 'the same config with a finite number there' kvchunk key --model-config noinf.json --tokens c.tok
expect_file_eq 'the same key either way' inf.key "$T/.out"
printf '{"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 8, "rope_theta": Infinity}' >infth.json
expect_fail 2 'Infinity where a number is read' kvchunk info --model-config infth.json
expect_eq 'names the key' "$(grep -c 'rope_theta' "$T/.err")" 1
done_testing
