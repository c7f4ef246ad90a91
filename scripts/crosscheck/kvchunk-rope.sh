#!/bin/sh
# scripts/crosscheck/kvchunk-rope.sh - kvchunk's RoPE moves against transformers' own RoPE
# initialisation (ROPE_INIT_FUNCTIONS) and rotations, in float64.
# Run by scripts/crosscheck/run.sh (make crosscheck); the cases and what
# replaces what are described in scripts/crosscheck/stage_kvchunk_rope.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvchunk_rope.py"
