#!/bin/sh
# scripts/crosscheck/kvslot-map-ascend.sh - 'kvslot map' under its default
# --cp-convention (pcp-dcp) against vllm-ascend 0.23.0.post1's own
# BlockTable (add_row, compute_slot_mapping, _compute_pcp_dcp_slot_mapping),
# compiled unchanged from the release's source fetched with 'pip download
# --no-deps' (make crosscheck CROSSCHECK=kvslot-map-ascend); only its
# device buffers and process groups are stood in for (kvslot-map-ascend.py
# lists them).  Environment: KVX_MAP_ASCEND_CASES (default 1500), KVX_SEED (12).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export KV_TOP PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) ||
    { echo "kvslot-map-ascend: cannot make the crosscheck environment"; echo "0 passed, 1 failed"; exit 1; }
exec "$py" "$KV_TOP/scripts/crosscheck/kvslot-map-ascend.py" "$KV_BIN/kvslot" \
    --cases "${KVX_MAP_ASCEND_CASES:-1500}" --seed "${KVX_SEED:-12}"
