#!/bin/sh
# scripts/crosscheck/kvmask.sh - kvmask against vllm-ascend's AttentionMaskBuilder (from its release files),
# torch FlexAttention's create_block_mask and FlashInfer's CPU helpers.
# Run by scripts/crosscheck/run.sh (make crosscheck); the cases and what
# replaces what are described in scripts/crosscheck/stage_kvmask.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvmask.py"
