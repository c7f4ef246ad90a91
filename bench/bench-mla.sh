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
kernel() {   # best wall and CPU of the attention call over 5 runs
    for _ in 1 2 3 4 5; do
        "$KVATTN" mla "$@" -v 2>&1 >/dev/null | sed -n 's/^kvattn: mla attention \([0-9.]*\) s (\([0-9.]*\) s cpu).*/\1 \2/p'
    done | sort -n | awk 'NR == 1 { w = $1 } { c = (NR == 1 || $2 < c) ? $2 : c } END { print w, c }'
}
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
    # the attention call alone (kvattn mla -v), without starting the
    # process and mapping the 38 MB cache file, which cost several ms
    KK=$(kernel -q "$D/h$H/q_absorbed.npy" --kv-cache "$D/h$H/kv_cache.npy" \
         --block-table "$D/h$H/block_table.npy" --seq-lens $T --model-config "$CFG" \
         -j "$TH" -o "$D/o.npy")
    KKB=$(awk -v t="$(second "$KK")" -v n=$LB -v th="$TH" 'BEGIN { printf "%.2f", n / (t / th) / 1e9 }')
    line "  attention call (cpu / $TH threads)" "memcpy $(second "$MB") GB/s" "${KKB} GB/s" \
        "$(ratio "$KKB" "$(second "$MB")" '%.3f of memcpy')" "-"
    KKG=$(awk -v t="$(second "$KK")" -v n=$T -v h=$H -v th="$TH" \
          'BEGIN { printf "%.1f", 2 * h * n * (576 + 512) / (t / th) / 1e9 }')
    line "  its FLOP rate (cpu / $TH threads)" "${KV_PEAK_BF16:+peak $KV_PEAK_BF16 GF/s}" "${KKG} GF/s" \
        "${KV_PEAK_BF16:+$(ratio "$KKG" "${KV_PEAK_BF16:-1}" '%.3f of peak')}" "-"
    if "$PY" -c 'import torch' 2>/dev/null; then
        for py in "$PY" ${PYNEW:+"$PYNEW"}; do
            v=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
            TP=$("$py" "$PEER" mla "$D/h$H" "$TH" "$(cat "$D/h$H/scale")") || exit 1
            line "  vs torch $v (in process)" "$(first "$TP") s" "$(first "$KD") s" \
                "$(ratio "$(first "$TP")" "$(first "$KD")" '%.2fx')" "(whole process)"
        done
    fi
done

# --- DeepSeek-V3.2's sparse MLA (DSA): each query attends to 2,048 of
# 32,768 keys (random distinct visible positions, bench/mla_peer.py pick),
# against the dense absorbed form over all of them, same inputs, 128
# heads, bf16: one decode query, and 16 queries at the end of the context
# (a prefill chunk).  Target: sparse under 1/8 of dense, kernel and whole
# process.  The kernel is the attention call alone (kvattn mla -v's
# wall-clock and CPU times, best of 5); the whole process includes
# starting, reading the inputs and writing the output: of the 38 MB cache
# the sparse form reads only the rows the indices select (pread), the
# dense form maps it whole.  Beside it torch 2.x, eager, doing the same
# sparse MLA in process on the bf16 tensors (bench/mla_peer.py sparse;
# files read before its clock starts), which kvattn's whole process must
# beat, in wall-clock and in CPU time.  The machine may be shared: the
# load average is printed with the rows.
# Then the like-for-like pair: the same sparse MLA called in process from
# Python, kvtools.kvattn.mla(..., topk_indices=) on the numpy arrays
# already in memory (no process start, no reading of the cache: $PY with
# numpy, the package at $KV_PYPATH, default python/, which make python
# builds), against torch eager in its process as above.  ROUNDS rounds
# (default 7) interleave the two, the one first in odd rounds going
# second in even ones; a round's time is the best of 3 calls.  Reported:
# each side's median round, and the median of the rounds' own ratios,
# torch / kvtools, in wall-clock and in CPU time (every thread's), which
# kvtools must beat (> 1).  The call's output is checked equal, byte for
# byte, to the program's.
MP="$KV_TOP/bench/mla_peer.py"
: "${KV_PYPATH:=$KV_TOP/python}"; : "${ROUNDS:=7}"
median() { sort -g | awk '{ v[NR] = $1 } END {
    print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
col() { awk -v c="$1" '{ print $c }' "$2" | median; }
rcol() { paste "$2" "$3" | awk -v c="$1" '{ print $c / $(c + 2) }' | median; }
echo "# load average before the sparse rows: $(cut -d' ' -f1-3 /proc/loadavg)"
for S in 1 16; do
    G="$D/dsa$S"
    kvattn gen --model-config "$CFG" --shape 1,128,$S --kv-len $T --dtype bf16 --dir "$G" || exit 1
    "$PY" "$MP" pick "$G" 2048 7 || exit 1
    set -- -q "$G/q_absorbed.npy" --kv-cache "$G/kv_cache.npy" --block-table "$G/block_table.npy" \
        --seq-lens $T --q-lens $S --causal --model-config "$CFG" -j "$TH" -o "$D/o.npy"
    KD=$(kernel "$@")
    KS=$(kernel "$@" --topk-indices "$G/topk.npy")
    line "sparse mla 2048/32k, $S q, kernel" "dense $(first "$KD") s" "$(first "$KS") s" \
        "$(ratio "$(first "$KS")" "$(first "$KD")" '%.3f of dense')" "< 0.125"
    line "  the same, CPU time" "dense $(second "$KD") s" "$(second "$KS") s" \
        "$(ratio "$(second "$KS")" "$(second "$KD")" '%.3f of dense')" "< 0.125"
    WD=$(timed 5 "$KVATTN" mla "$@")
    WS=$(timed 5 "$KVATTN" mla "$@" --topk-indices "$G/topk.npy")
    line "  whole process" "dense $(first "$WD") s" "$(first "$WS") s" \
        "$(ratio "$(first "$WS")" "$(first "$WD")" '%.3f of dense')" "< 0.125"
    line "  whole process, CPU time" "dense $(second "$WD") s" "$(second "$WS") s" \
        "$(ratio "$(second "$WS")" "$(second "$WD")" '%.3f of dense')" "< 0.125"
    for py in ${PYNEW:+"$PYNEW"}; do
        v=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) || continue
        TP=$("$py" "$MP" sparse "$G" "$TH") || exit 1
        line "  vs torch $v eager sparse (in process)" "$(first "$TP") s" "$(first "$WS") s" \
            "$(ratio "$(first "$TP")" "$(first "$WS")" '%.2fx')" "> 1 (whole process)"
        line "  the same, CPU time" "$(second "$TP") s" "$(second "$WS") s" \
            "$(ratio "$(second "$TP")" "$(second "$WS")" '%.2fx')" "> 1 (whole process)"
        PYTHONPATH="$KV_PYPATH" "$PY" -c 'import kvtools' 2>/dev/null || {
            echo "# kvtools.kvattn.mla rows skipped: no kvtools package at $KV_PYPATH (make python)"
            continue; }
        "$KVATTN" mla "$@" --topk-indices "$G/topk.npy" || exit 1
        : >"$D/kp"; : >"$D/tp"
        r=1
        while [ $r -le "$ROUNDS" ]; do
            for side in $( [ $((r % 2)) = 1 ] && echo kv torch || echo torch kv); do
                if [ $side = kv ]; then
                    PYTHONPATH="$KV_PYPATH" "$PY" "$MP" kvtools "$G" "$TH" "$CFG" "$D/o.npy" \
                        >>"$D/kp" || exit 1
                else
                    "$py" "$MP" sparse "$G" "$TH" >>"$D/tp" || exit 1
                fi
            done
            r=$((r + 1))
        done
        line "  kvtools.kvattn.mla vs torch $v" "$(col 1 "$D/tp") s" \
            "$(col 1 "$D/kp") s" "$(rcol 1 "$D/tp" "$D/kp" | awk '{ printf "%.2fx", $1 }')" \
            "> 1 (in process, $ROUNDS rounds)"
        line "  the same, CPU time" "$(col 2 "$D/tp") s" "$(col 2 "$D/kp") s" \
            "$(rcol 2 "$D/tp" "$D/kp" | awk '{ printf "%.2fx", $1 }')" \
            "> 1 (in process, $ROUNDS rounds)"
    done
    echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -rf "$G"
done
