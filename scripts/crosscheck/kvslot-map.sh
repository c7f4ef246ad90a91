#!/bin/sh
# scripts/crosscheck/kvslot-map.sh - 'kvslot map' and 'kvslot cplens'
# against vLLM 0.33.0's own model-runner code (make crosscheck
# CROSSCHECK=kvslot-map), installed by scripts/pyenv crosscheck.
#
# vLLM 0.33.0 has no numpy or torch form of the slot mapping left: its V1
# runner computes it in a Triton kernel (ComputeSlotMappingKernel in
# vllm/v1/worker/block_table.py).  That kernel runs unmodified under Triton's
# CPU interpreter (TRITON_INTERPRET=1), launched as
# BlockTable.compute_slot_mapping launches it, on random batches (block sizes
# 1 to 64, 1-6 requests, chunked and decode rows) without context
# parallelism, with DCP (world 2-8, every rank, every interleave dividing the
# block size) and with PCP x DCP (the kernel's total CP world and rank,
# kvslot --cp-convention pcp-dcp); hybrid blocks use vLLM's
# AttentionGroup.map_to_kernel_block_table (torch), both for kvslot's
# block_table field and for the older layout (--virtual-block kernel: the
# kernel on the kernel-block table).  MRV2's _compute_slot_mappings_kernel
# runs there too, unmodified, on the batches without PCP x DCP or the
# kernel-block layout (the interpreter's masked loads and stores take its
# 0/1 integer masks as booleans: the interpreter computes ~ on a loaded
# boolean in int8).  cplens is held to get_dcp_local_seq_lens
# (vllm/v1/attention/backends/utils.py, torch), all ranks and one rank.
#
# Replaced: the platform (a bare Platform reporting "cpu"); the interpreter's
# mask dtype (above); CUDA_VISIBLE_DEVICES
# is set empty so vllm.triton_utils keeps the real triton on a host without
# a GPU driver; for map_to_kernel_block_table, an object holding the
# attributes of an AttentionGroup it reads.
#
# kvslot pcp (both layouts) is compared in kvslot-pcp.sh.
#
# Environment: KVX_BATCHES (default 1500), KVX_CPLENS (1000), KVX_SEED (26).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "kvslot-map: cannot make the crosscheck environment"; echo "0 passed, 1 failed"; exit 1; }
export VLLM_LOGGING_LEVEL=ERROR PYTHONWARNINGS=ignore TORCH_CPP_LOG_LEVEL=ERROR PYTHONDONTWRITEBYTECODE=1
"$py" "$KV_TOP/scripts/crosscheck/vllm_map.py" "$KV_BIN/kvslot" \
    --batches "${KVX_BATCHES:-1500}" --cplens "${KVX_CPLENS:-1000}" --seed "${KVX_SEED:-26}" 2>&1 |
    grep -v -e '^W[0-9]\{4\} ' -e 'RequestsDependencyWarning' -e '^  warnings.warn' \
        -e 'Model Runner V2 requires Triton' -e 'Failed to import from vllm._C'
