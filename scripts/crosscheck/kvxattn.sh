#!/bin/sh
# scripts/crosscheck/kvxattn.sh - kvxattn estimate against torch runs of the XAttention estimate
# expressions, and the public vectors under tests/vectors/xattn.
# Run by scripts/crosscheck/run.sh (make crosscheck); the cases and what
# replaces what are described in scripts/crosscheck/stage_kvxattn.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvxattn.py"
