#!/bin/sh
# scripts/crosscheck/kvslot-groups.sh - 'kvslot groups' and 'kvslot local'
# against vLLM 0.33.0's own code (make crosscheck CROSSCHECK=kvslot-groups):
# its KV-cache specs, the sliding-window block size, the hybrid Mamba
# alignment and the KV-cache config builder's grouping (get_kv_cache_groups),
# run unmodified from the release installed by scripts/pyenv crosscheck, on
#  - every config.json in tests/configs (and dsa/, the published files of
#    published/ that tests/configs/SOURCES traces, and the hand-reduced
#    ones of reduced/) at block sizes 4, 16, 32 and 64, KV-cache dtypes
#    auto and fp8, Mamba cache modes none and align;
#  - a minimal config of every model type kvslot derives (family_configs in
#    kvslot-groups.py: with and without windows, layer_types, Qwen's
#    use_sliding_window / max_window_layers, MLA sizes and the config
#    classes' defaults, KV-head conventions) at block sizes 16, 32 and 4,
#    and of the types it refuses.  A refusal counts as agreement only
#    where kvslot refuses by name (the message names the model_type) the
#    types whose caches it does not model or that no one has compared
#    with vLLM (REFUSED, UNREVIEWED: vLLM's own builder is not run on
#    them, their layers being of kinds this stand-in does not build), or
#    a type whose class fills layer_types by a rule kvslot does not follow
#    when the config lacks them (FILLED), or where vLLM's own code refuses
#    the config (Qwen2Model's assertion against mixed layer types); a
#    config the transformers class itself rejects is not run, and listed;
#  - KVX_DOTS3_CASES random dots3_note-shaped configs (layer patterns,
#    windows, latents, IndexCache rules), whose groups vLLM packs for
#    the block-outermost layout its backend needs;
#  - KVX_GROUP_CASES random --kv-groups specs (full, sliding, chunked local,
#    Mamba, MLA and sliding-window MLA layers in patterns with repeats and
#    stragglers, random
#    block sizes, kernel blocks, Mamba state sizes and model lengths),
#    including the ones vLLM refuses, which kvslot must refuse too;
#  - KVX_LOCAL_CASES random steps through make_local_attention_virtual_batches
#    against 'kvslot local'.
# What stands in for an engine is listed in kvslot-groups.py.  The goldens
# of tests/golden/kvslot/groups (and groups-published, groups-mla) come
# from the same script ('golden' and 'golden-spec' modes).
# Environment: KVX_GROUP_CASES (default 3000), KVX_DOTS3_CASES (500),
# KVX_LOCAL_CASES (3000),
# KVX_SEED (20).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export PYTHONDONTWRITEBYTECODE=1 PYTHONWARNINGS=ignore VLLM_LOGGING_LEVEL=ERROR TORCH_CPP_LOG_LEVEL=ERROR
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || {
    echo "kvslot-groups: cannot make the crosscheck environment"
    echo "0 passed, 1 failed"; exit 1; }
"$py" "$KV_TOP/scripts/crosscheck/kvslot-groups.py" check "$KV_BIN/kvslot" \
    "$KV_TOP"/tests/configs/*.json "$KV_TOP"/tests/configs/dsa/*.json \
    "$KV_TOP"/tests/configs/published/*.json \
    "$KV_TOP"/tests/configs/reduced/*.json 2>&1 |
    grep -v -e '^W[0-9]\{4\} ' -e 'RequestsDependencyWarning' -e '^  warnings.warn' \
        -e 'Failed to import from vllm._C'
