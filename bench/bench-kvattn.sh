#!/bin/sh
# bench-kvattn.sh - kvattn run against its peers, in one run:
#   PyTorch CPU attention, softmax(q @ k^T * scale + mask) @ v, same threads,
#   timed in-process (bench/kvattn_peer.py); the machine's OpenBLAS sgemm
#   rate (numpy matmul) and memcpy bandwidth as the limits.
# kvattn is timed as a whole process (reading the inputs included), best of
# several runs.  One line per case: case, peer, kvattn, ratio, target.
# Lines marked (cpu) compare CPU time (user + sys, all threads) instead of
# wall time: on a shared machine they move much less with the load.
: "${KV_TOP:?}"; : "${PY:=python3}"
PEER="$KV_TOP/bench/kvattn_peer.py"
TH=$(nproc)
D=$(mktemp -d "${TMPDIR:-/tmp}/kvattn-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT

line() { printf '%-44s %-22s %-22s %-16s %s\n' "$@"; }
# ratio A B FORMAT: awk printf of A / B
ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, a / b }'; }
# timed N cmd...: "WALL CPU" of the best of N runs of a kvattn command
timed() { n=$1; shift; "$PY" "$PEER" time "$n" "$@" || exit 1; }
first() { echo "$1" | cut -d' ' -f1; }
second() { echo "$1" | cut -d' ' -f2; }
KVATTN=$(command -v kvattn) || { echo "bench-kvattn: kvattn not on PATH"; exit 1; }

if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench-kvattn: $PY lacks numpy/torch; skipped"; exit 0
fi
line case peer kvattn ratio target

# --- causal prefill B=1 H=8 S=4096 D=128 f32
S=4096
kvattn gen --shape 1,8,$S,128 --pattern random --seed 1 -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy"
GF=$("$PY" "$PEER" sgemm "$TH")
TT=$("$PY" "$PEER" prefill "$D" "$TH")
KT=$(timed 5 "$KVATTN" run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal -j "$TH" -o "$D/o.npy")
line "causal prefill 1x8x4096x128 f32 (-j $TH)" "torch $(first "$TT")s" "$(first "$KT")s" \
    "$(ratio "$(first "$TT")" "$(first "$KT")" '%.1fx faster')" ">= 3x"
line "  the same (cpu)" "torch $(second "$TT")s" "$(second "$KT")s" \
    "$(ratio "$(second "$TT")" "$(second "$KT")" '%.1fx faster')" ">= 3x"
KG=$(awk -v t="$(first "$KT")" -v s=$S 'BEGIN { printf "%.1f", 4 * s * s * 128 * 8 / 2 / t / 1e9 }')
line "  causal FLOPs rate vs sgemm" "sgemm $(first "$GF") GF/s" "${KG} GF/s" \
    "$(ratio "$KG" "$(first "$GF")" '%.2f')" ">= 0.50"
KC=$(awk -v t="$(second "$KT")" -v s=$S -v th="$TH" 'BEGIN { printf "%.1f", 4 * s * s * 128 * 8 / 2 / (t / th) / 1e9 }')
line "  the same (cpu)" "sgemm $(second "$GF") GF/s" "${KC} GF/s" \
    "$(ratio "$KC" "$(second "$GF")" '%.2f')" ">= 0.50"

# --- block-sparse at density rho (random block mask, BS 128, diagonal kept);
# dense and sparse runs alternate so that both see the same machine load,
# best of 5 each (a ratio of two noisy times needs more runs than a time)
for rho in 0.1 0.3 0.5; do
    dens=$("$PY" "$PEER" blockmask "$D" $S 128 $rho)
    BD=; BT=; CD=; CT=
    for i in 1 2 3 4 5; do
        d=$(timed 1 "$KVATTN" run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal -j "$TH" -o "$D/o.npy")
        t=$(timed 1 "$KVATTN" run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal \
            --block-mask "$D/bm.npy" --block-size 128 -j "$TH" -o "$D/ob.npy")
        BD=$(awk -v a="$(first "$d")" -v b="$BD" 'BEGIN { print (b == "" || a < b) ? a : b }')
        BT=$(awk -v a="$(first "$t")" -v b="$BT" 'BEGIN { print (b == "" || a < b) ? a : b }')
        CD=$(awk -v a="$(second "$d")" -v b="$CD" 'BEGIN { print (b == "" || a < b) ? a : b }')
        CT=$(awk -v a="$(second "$t")" -v b="$CT" 'BEGIN { print (b == "" || a < b) ? a : b }')
    done
    tgt="<= $(awk -v r="$dens" 'BEGIN { printf "%.2f", r + 0.1 }') x dense"
    line "block-sparse density $dens (BS 128)" "dense ${BD}s" "${BT}s" \
        "$(ratio "$BT" "$BD" '%.2f x dense')" "$tgt"
    line "  the same (cpu)" "dense ${CD}s" "${CT}s" "$(ratio "$CT" "$CD" '%.2f x dense')" "$tgt"
done

# --- paged decode Hq 32 Hkv 8 D 128, 32768 cached tokens, bf16
T=32768
"$PY" "$PEER" paged "$D" $T
KVB=$((2 * T * 8 * 128 * 2))
MB=$("$PY" "$PEER" memcpy $KVB)
DT=$("$PY" "$PEER" decode "$D" "$TH")
KD=$(timed 9 "$KVATTN" run --layout thd -q "$D/dq.npy" --kv-cache "$D/cache.npy" \
     --block-table "$D/table.txt" --seq-lens $T -j "$TH" -o "$D/od.npy")
line "paged decode 32k tokens bf16 (-j $TH)" "torch $(first "$DT")s" "$(first "$KD")s" \
    "$(ratio "$(first "$DT")" "$(first "$KD")" '%.1fx faster')" "-"
KB=$(awk -v t="$(first "$KD")" -v n=$KVB 'BEGIN { printf "%.2f", n / t / 1e9 }')
line "  KV bytes / time vs memcpy" "memcpy $(first "$MB") GB/s" "${KB} GB/s" \
    "$(ratio "$KB" "$(first "$MB")" '%.2f')" ">= 0.50"
KC=$(awk -v t="$(second "$KD")" -v n=$KVB -v th="$TH" 'BEGIN { printf "%.2f", n / (t / th) / 1e9 }')
line "  the same (cpu / $TH threads)" "memcpy $(second "$MB") GB/s" "${KC} GB/s" \
    "$(ratio "$KC" "$(second "$MB")" '%.2f')" ">= 0.50"
