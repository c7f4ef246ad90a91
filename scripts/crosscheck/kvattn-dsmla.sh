#!/bin/sh
# scripts/crosscheck/kvattn-dsmla.sh - fp8_ds_mla, DeepSeek-V3.2's 656-byte
# latent cache: kvattn quant's bytes against vLLM 0.33.0's own cache
# writer (its Triton kernel, on Triton's CPU interpreter) and against its
# arithmetic in torch 2.15 on adversarial tiles, and kvattn mla
# --kv-dtype fp8_ds_mla against float64 attention over torch's
# dequantization.  Cases: scripts/crosscheck/stage_kvattn_dsmla.py.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
py=$("$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
PYTHONDONTWRITEBYTECODE=1 exec "$py" "$KV_TOP/scripts/crosscheck/stage_kvattn_dsmla.py"
