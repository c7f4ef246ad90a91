#!/bin/sh
# scripts/crosscheck/mla_cp.sh - kvslot reorg against vllm-ascend's own
# _reorg_kvcache (release of scripts/requirements/crosscheck.txt), 200 random
# context-parallel steps; only the all-gathers are replaced (see mla_cp.py).
: "${KV_TOP:?}"
PY=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
exec "$PY" "$KV_TOP/scripts/crosscheck/mla_cp.py"
