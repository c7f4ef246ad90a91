#!/bin/sh
# scripts/crosscheck/kvslot-plan-trace.sh - 'kvslot plan --trace' step for
# step against vLLM 0.33.0's Scheduler on the first 300 requests of the
# shipped Mooncake conversation trace (make crosscheck
# CROSSCHECK=kvslot-plan-trace; kvslot-plan-trace.py says how, vllm_plan.py
# what stands in for the rest of an engine).
# Environment: KVX_REQUESTS (default 300), KVX_MS_PER_STEP (50).
# Ends with 'N passed, M failed'.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "kvslot-plan-trace: cannot make the crosscheck environment"; echo "0 passed, 1 failed"; exit 1; }
export VLLM_LOGGING_LEVEL=ERROR PYTHONWARNINGS=ignore TORCH_CPP_LOG_LEVEL=ERROR PYTHONDONTWRITEBYTECODE=1
"$py" "$KV_TOP/scripts/crosscheck/kvslot-plan-trace.py" "$KV_BIN/kvslot" \
    "$KV_TOP/tests/vectors/traces/mooncake-conversation.jsonl" \
    --requests "${KVX_REQUESTS:-300}" --ms-per-step "${KVX_MS_PER_STEP:-50}" 2>&1 |
    grep -v -e '^W[0-9]\{4\} ' -e 'RequestsDependencyWarning' -e '^  warnings.warn' \
        -e 'Model Runner V2 requires Triton' -e 'Failed to import from vllm._C'
