#!/bin/sh
# scripts/crosscheck/kvattn-index.sh - kvattn index against transformers
# 5.23.0's DeepseekV32Indexer, unmodified, with small random weights.
# Cases: scripts/crosscheck/stage_kvattn_index.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvattn_index.py"
