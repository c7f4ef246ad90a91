#!/bin/sh
# scripts/crosscheck/kvslot-reorg-vllm.sh - 'kvslot reorg --context-chunking
# vllm' against vLLM 0.33.0's own plan_mla_context_chunks,
# build_mla_chunked_context_metadata and reorg_kvcache, compiled unchanged
# from the release's source (make crosscheck CROSSCHECK=kvslot-reorg-vllm);
# only the host-to-device copies, the config, the gather kernel and the DCP
# all-gather are stood in for (kvslot-reorg-vllm.py lists them).
# Environment: KVX_REORG_CASES (default 2000), KVX_SEED (33).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export KV_TOP PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) ||
    { echo "kvslot-reorg-vllm: cannot make the crosscheck environment"; echo "0 passed, 1 failed"; exit 1; }
exec "$py" "$KV_TOP/scripts/crosscheck/kvslot-reorg-vllm.py" "$KV_BIN/kvslot" \
    --cases "${KVX_REORG_CASES:-2000}" --seed "${KVX_SEED:-33}"
