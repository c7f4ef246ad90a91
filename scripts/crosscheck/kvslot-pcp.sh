#!/bin/sh
# scripts/crosscheck/kvslot-pcp.sh - 'kvslot pcp' against the upstream code
# of both layouts (make crosscheck CROSSCHECK=kvslot-pcp):
#  --layout ascend: vllm-ascend's PCPManager (init_batch_info,
#    update_tokens_for_pcp, get_padded_slot_mapping, generate_pcp_metadata)
#    and BlockTable.compute_slot_mapping, taken from the installed release's
#    source (scripts/pyenv crosscheck) and compiled unchanged, only the
#    device buffers, the config and the input batch stood in for
#    (pcp_ascend.py lists them);
#  --layout vllm: vLLM's model-runner-V2 PCPManager.partition_batch and
#    _convert_to_gathered_slot_mappings, imported unmodified
#    (scripts/pyenv crosscheck); the global slots come from its slot-mapping
#    kernel (MRV2 _compute_slot_mappings_kernel) under Triton's CPU
#    interpreter (pcp_vllm.py).
# Environment: KVX_PCP_CASES (default 3000 per layout), KVX_SEED (26).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
here=$KV_TOP/scripts/crosscheck
export PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore VLLM_LOGGING_LEVEL=ERROR TORCH_CPP_LOG_LEVEL=ERROR
n=${KVX_PCP_CASES:-3000}; seed=${KVX_SEED:-26}
P=0; F=0
tally() {
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$last" ]; then F=$((F + 1)); return; fi
    P=$((P + ${last%% passed*})); f=${last#*, }; F=$((F + ${f%% failed*}))
}
out=$(mktemp)
if py=$(sh "$KV_TOP/scripts/pyenv" crosscheck); then
    "$py" "$here/pcp_ascend.py" "$KV_BIN/kvslot" --cases "$n" --seed "$seed" 2>&1 | tee "$out"
    tally "$out"
else
    echo "kvslot-pcp: cannot make the crosscheck environment"; F=$((F + 1))
fi
if py=$(sh "$KV_TOP/scripts/pyenv" crosscheck); then
    "$py" "$here/pcp_vllm.py" "$KV_BIN/kvslot" --cases "$n" --seed "$seed" 2>&1 |
        grep -v -e '^W[0-9]\{4\} ' -e 'RequestsDependencyWarning' -e '^  warnings.warn' \
            -e 'Model Runner V2 requires Triton' -e 'Failed to import from vllm._C' | tee "$out"
    tally "$out"
else
    echo "kvslot-pcp: cannot make the crosscheck environment"; F=$((F + 1))
fi
rm -f "$out"
echo "$P passed, $F failed"
[ "$F" = 0 ]
