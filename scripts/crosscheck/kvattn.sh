#!/bin/sh
# scripts/crosscheck/kvattn.sh - kvattn run against torch's scaled_dot_product_attention and
# flex_attention (CPU) beside its float64 reference.
# Run by scripts/crosscheck/run.sh (make crosscheck); the cases and what
# replaces what are described in scripts/crosscheck/stage_kvattn.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvattn.py"
