#!/bin/sh
# scripts/crosscheck/python-wheel.sh - the Python package built as one
# wheel and installed in a fresh virtual environment outside the tree (made
# by the crosscheck environment's interpreter), where its tests pass:
# scripts/wheel-check.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
exec sh "$KV_TOP/scripts/wheel-check" "$py"
