#!/bin/sh
# scripts/crosscheck/kvslot-hash.sh - 'kvslot hash' against vLLM 0.33.0's
# own block hashing (make crosscheck CROSSCHECK=kvslot-hash): 10,000 random
# prompts, the four hash algorithms, seeds, block sizes, cache salts and
# LoRA adapters, each prompt's hashes from a vLLM Request with its block
# hasher against kvslot's (kvslot-hash.py says what stands in where torch
# is missing).
# Environment: KVX_PROMPTS (default 10000), KVX_SEED (37).
# Ends with 'N passed, M failed' (one per prompt).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "kvslot-hash: cannot make the crosscheck environment"; echo "0 passed, 1 failed"; exit 1; }
export VLLM_LOGGING_LEVEL=ERROR PYTHONWARNINGS=ignore PYTHONDONTWRITEBYTECODE=1
"$py" "$KV_TOP/scripts/crosscheck/kvslot-hash.py" "$KV_BIN/kvslot" \
    --prompts "${KVX_PROMPTS:-10000}" --seed "${KVX_SEED:-37}"
