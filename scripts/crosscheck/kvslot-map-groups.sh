#!/bin/sh
# scripts/crosscheck/kvslot-map-groups.sh - 'kvslot map --kv-groups /
# --model-config' against vLLM 0.33.0's MultiGroupBlockTable (its Triton
# slot-mapping kernel under Triton's CPU interpreter), installed by
# scripts/pyenv crosscheck: KVX_MAP_GROUP_CASES random group specs (default
# 1000) and three steps for every config.json in tests/configs (with dsa/,
# published/ and the hand-reduced ones of reduced/), a third of them under
# DCP 2 and a third under DCP 4 (also against MRV2's slot-mapping kernel;
# sliding windows refused with vLLM's message).  What is
# replaced is listed in kvslot-map-groups.py.  KVX_SEED (default 34).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore VLLM_LOGGING_LEVEL=ERROR TORCH_CPP_LOG_LEVEL=ERROR
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || {
    echo "kvslot-map-groups: cannot make the crosscheck environment"
    echo "0 passed, 1 failed"; exit 1; }
"$py" "$KV_TOP/scripts/crosscheck/kvslot-map-groups.py" "$KV_BIN/kvslot" \
    "${KVX_MAP_GROUP_CASES:-1000}" "${KVX_SEED:-34}" "$KV_TOP"/tests/configs/*.json \
    "$KV_TOP"/tests/configs/dsa/*.json "$KV_TOP"/tests/configs/published/*.json \
    "$KV_TOP"/tests/configs/reduced/*.json 2>&1 |
    grep -v -e '^W[0-9]\{4\} ' -e 'RequestsDependencyWarning' -e '^  warnings.warn' \
        -e 'Model Runner V2 requires Triton' -e 'Failed to import from vllm._C'
