#!/bin/sh
# bench-mla.sh - kvattn mla (absorbed MLA decode, FlashMLA's shape) against
# memcpy of the latent bytes it reads: DeepSeek-V3's geometry (latent
# 512 + 64, block size 64, bf16), 32768 cached tokens, one decode query,
# 128 heads (one rank) and 16 heads (tensor parallel 8).  kvattn is timed
# as a whole process, best of several runs; the memcpy rate is numpy's
# (bench/kvattn_peer.py).  At 128 heads decode does 2 x 128 x (576 + 512)
# FLOPs per 1152 bytes read, so it is compute-bound on a CPU: the row
# states the FLOP rate as well.  The peers: the same decode as torch code
# does it on the bf16 tensors (gather the pages, two bf16 matmuls and a
# softmax; bench/kvattn_peer.py mla), in process, on Debian's torch ($PY)
# and the current one ($PYNEW).
: "${KV_TOP:?}"; : "${PY:=python3}"; : "${PYNEW:=}"
PEER="$KV_TOP/bench/kvattn_peer.py"
TH=$(nproc)
D=$(mktemp -d "${TMPDIR:-/tmp}/mla-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT
CFG="$KV_TOP/tests/configs/deepseek-v3.json"

line() { printf '%-44s %-22s %-22s %-16s %s\n' "$@"; }
ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, a / b }'; }
timed() { n=$1; shift; "$PY" "$PEER" time "$n" "$@" || exit 1; }
first() { echo "$1" | cut -d' ' -f1; }
second() { echo "$1" | cut -d' ' -f2; }
KVATTN=$(command -v kvattn) || { echo "bench-mla: kvattn not on PATH"; exit 1; }
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "bench-mla: $PY lacks numpy; skipped"; exit 0
fi
echo "# cpu: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1), $TH threads"
line case peer kvattn ratio target
T=32768
LB=$((T * 576 * 2))
MB=$("$PY" "$PEER" memcpy $LB)
for H in 128 16; do
    kvattn gen --model-config "$CFG" --shape 1,$H,1 --kv-len $T --dtype bf16 --dir "$D/h$H" ||
        exit 1
    KD=$(timed 7 "$KVATTN" mla -q "$D/h$H/q_absorbed.npy" --kv-cache "$D/h$H/kv_cache.npy" \
         --block-table "$D/h$H/block_table.npy" --seq-lens $T --model-config "$CFG" \
         -j "$TH" -o "$D/o.npy")
    KB=$(awk -v t="$(first "$KD")" -v n=$LB 'BEGIN { printf "%.2f", n / t / 1e9 }')
    line "mla decode 32k, $H heads, bf16 (-j $TH)" "memcpy $(first "$MB") GB/s" "${KB} GB/s" \
        "$(ratio "$KB" "$(first "$MB")" '%.3f of memcpy')" "-"
    KC=$(awk -v t="$(second "$KD")" -v n=$LB -v th="$TH" 'BEGIN { printf "%.2f", n / (t / th) / 1e9 }')
    line "  the same (cpu / $TH threads)" "memcpy $(second "$MB") GB/s" "${KC} GB/s" \
        "$(ratio "$KC" "$(second "$MB")" '%.3f of memcpy')" "-"
    KG=$(awk -v t="$(second "$KD")" -v n=$T -v h=$H -v th="$TH" \
         'BEGIN { printf "%.1f", 2 * h * n * (576 + 512) / (t / th) / 1e9 }')
    line "  FLOP rate (cpu / $TH threads)" "-" "${KG} GF/s" "-" "-"
    if "$PY" -c 'import torch' 2>/dev/null; then
        for py in "$PY" ${PYNEW:+"$PYNEW"}; do
            v=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
            TP=$("$py" "$PEER" mla "$D/h$H" "$TH" "$(cat "$D/h$H/scale")") || exit 1
            line "  vs torch $v (in process)" "$(first "$TP") s" "$(first "$KD") s" \
                "$(ratio "$(first "$TP")" "$(first "$KD")" '%.2fx')" "(whole process)"
        done
    fi
done
