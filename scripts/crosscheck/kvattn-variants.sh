#!/bin/sh
# scripts/crosscheck/kvattn-variants.sh - kvattn run --sinks, --softcap and
# --alibi against transformers' gpt-oss, Gemma 2 and BLOOM attention,
# kvmask tree against vLLM 0.20.2's tree-attention bias and kvslot step
# --parents against that release's depth counts and tree drafter (the last
# vLLM release with vllm/v1/attention/backends/tree_attn.py; its wheel is
# downloaded into build/crosscheck), at the releases of
# scripts/requirements/crosscheck.txt.  What is replaced is listed in
# kvattn-variants.py.  KV_CROSSCHECK_CASES sets the cases per model (60).
: "${KV_TOP:?}"
PY=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
exec "$PY" "$KV_TOP/scripts/crosscheck/kvattn-variants.py" "$@"
