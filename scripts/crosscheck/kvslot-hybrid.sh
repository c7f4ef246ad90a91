#!/bin/sh
# scripts/crosscheck/kvslot-hybrid.sh - 'kvslot plan' with KV-cache groups
# step for step against vLLM 0.33.0's own Scheduler, KVCacheManager,
# HybridKVCacheCoordinator, single-type managers and BlockPool (make
# crosscheck CROSSCHECK=kvslot-hybrid).
#
# Random traces with a fixed seed per group mix: full attention with
# sliding windows (Gemma-like patterns, two windows), sliding windows
# alone, full attention with chunked local attention, full attention with
# Mamba layers (cache mode "none": one state block of the model length),
# full attention with Mamba layers in cache mode "align" (vLLM's
# CacheConfig.mamba_cache_mode and MambaSpec: every group in blocks of the
# block size, prefill chunks split at block boundaries, the states cached
# at the prompt's last block boundary; some with a sliding-window or
# chunked group; all eight configurations), Mamba in cache mode "align"
# beside attention groups of 2 or 4 times its block (layers of 2,048 or
# 1,024 bytes a token beside 4,096; the cache block size the aligned one,
# hits at the LCM, prompts sharing prefixes of whole LCMs),
# MLA with sliding-window MLA layers, and groups of different block sizes
# (layers of 2,048 or 1,024 bytes a token beside 4,096: sliding, chunked or
# full groups of 2 or 4 times the block, or none of the block; with prefix
# caching vLLM hashes at their GCD and hits at their LCM, and prompts
# there share prefixes of whole LCMs so that hits happen; a chunked group
# of less than the LCM is refused by both at the first lookup, with
# vLLM's words); their groups are what 'kvslot groups
# --kv-groups SPEC' derives, each group a FullAttentionSpec,
# SlidingWindowSpec, ChunkedLocalAttentionSpec, MLAAttentionSpec,
# SlidingWindowMLASpec or MambaSpec in one pool.  The mix
# mla+sliding-packed has vLLM build its groups itself: per-layer specs of
# a dots3_note-shaped model (N repeats of sparse MLA layers, the latent
# padded to the sliding layers' or not, DeepSeek-V3.2's indexer before or
# after it on every such layer or under an IndexCache rule, beside
# sliding-window MLA layers of one window or two; one trace in five
# standard full, sliding and chunked layers of different bytes a token)
# grouped by get_kv_cache_groups in the block-outermost layout BLHNC
# (_get_packed_kv_cache_groups), then get_kv_cache_config_from_groups and
# generate_scheduler_kv_cache_config as the engine calls them, against
# 'kvslot plan --kv-groups packed:SPEC' (half of them on longer prompts
# sharing prefixes); each group's layers must equal the ones 'kvslot
# groups' packs, and a model vLLM fails to pack (a bucket split unevenly)
# must be refused by kvslot.  The mixes mamba-packed and
# mamba-align-packed do the same for packed models with Mamba layers
# (vLLM 0.33.0 packs them; nothing refuses a block-outermost layout with
# Mamba), in cache mode none and align: N repeats of Mamba layers of one
# state beside full, sliding and chunked layers of several bytes a token,
# or (one in four) beside MLA, an indexer and sliding-window MLA; the
# block and the padded state from vLLM's own
# Platform._align_hybrid_block_size (the model class and the backend
# stood in for), so that the attention block grows to hold a state (to a
# multiple of 128 with MLA) before vLLM packs, and the Mamba buckets split
# to fit the widest block; half of them on longer prompts.  Each trace
# runs in one of eight configurations in turn: prefix caching on and
# off, full-prompt reservation on and off, synchronous and asynchronous scheduling (Mamba
# in cache mode none: the four without prefix caching); pools as small as
# the largest request allows, and with a sliding or chunked group some
# (three in ten) under kvslot's bound on a window's blocks, down to the
# blocks of the longest prompt's first chunk: vLLM runs some and cannot go
# on with others, which kvslot must refuse (counted per mix).  The steps with a prefix-cache hit are
# counted per mix, and the steps compared (the runs vLLM cannot go on
# with, which kvslot refuses, apart).
# The engine stand-ins are vllm_plan.py's (see kvslot-plan.sh); the KV
# cache config uses the engine's default prefix_cache_retention_interval
# (0) and vLLM's resolve_kv_cache_block_sizes.
#
# Then the context-parallel refusals: DCP with a sliding window (vLLM's
# SlidingWindowSpec refuses it at start-up), DCP with a chunked group
# under prefix caching (its HybridKVCacheCoordinator asserts), PCP with a
# chunked group (its model runner's PCPManager.validate_config refuses PCP
# without MLA), each
# raised by vLLM's own code and expected word for word from kvslot (exit
# 2, nothing on stdout).
#
# Environment: KVX_HYBRID_TRACES (traces per mix, default 3000), KVX_SEED
# (34), KVX_JOBS (2).  Ends with 'N passed, M failed' (one per trace and
# refusal).
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "kvslot-hybrid: cannot make the crosscheck environment"; echo "0 passed, 1 failed"; exit 1; }
export VLLM_LOGGING_LEVEL=ERROR PYTHONWARNINGS=ignore TORCH_CPP_LOG_LEVEL=ERROR PYTHONDONTWRITEBYTECODE=1
"$py" "$KV_TOP/scripts/crosscheck/kvslot-hybrid.py" "$KV_BIN/kvslot" \
    --traces "${KVX_HYBRID_TRACES:-3000}" --seed "${KVX_SEED:-34}" --jobs "${KVX_JOBS:-2}" 2>&1 |
    grep -v -e '^W[0-9]\{4\} ' -e 'RequestsDependencyWarning' -e '^  warnings.warn' \
        -e 'Model Runner V2 requires Triton' -e 'Failed to import from vllm._C'
