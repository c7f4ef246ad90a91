#!/bin/sh
# scripts/crosscheck/kvattn-fp8.sh - kvattn quant's FP8 bytes against torch's
# float8 conversion as vLLM applies it ((x.float() / scale).clamp(-max,
# max).to(float8)), for K/V, paged and MLA latent caches, and kvattn run
# and kvattn mla --kv-dtype against torch attention over the dequantized
# cache.  Cases: scripts/crosscheck/stage_kvattn_fp8.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvattn_fp8.py"
