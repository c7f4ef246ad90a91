#!/bin/sh
# scripts/crosscheck/mla.sh - kvattn mla, kvattn gen and kvchunk's latent
# moves against transformers' DeepSeek-V3 code (yarn_apply_mscale,
# DeepseekV3RotaryEmbedding, apply_rotary_pos_emb_interleave) and torch's
# scaled_dot_product_attention, at the releases of
# scripts/requirements/crosscheck.txt.  Nothing of upstream is replaced.
: "${KV_TOP:?}"
PY=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || { echo "0 passed, 1 failed"; exit 1; }
exec "$PY" "$KV_TOP/scripts/crosscheck/mla.py"
