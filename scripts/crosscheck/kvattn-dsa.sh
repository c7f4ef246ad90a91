#!/bin/sh
# scripts/crosscheck/kvattn-dsa.sh - DeepSeek-V3.2's sparse attention:
# kvattn index | kvattn mla --topk-indices against transformers 5.23.0's
# DeepseekV32Attention (its indexer and MLA), unmodified, float64, small
# random weights.  Cases: scripts/crosscheck/stage_kvattn_dsa.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvattn_dsa.py"
