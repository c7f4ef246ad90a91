#!/bin/sh
# bench-kvattn.sh - kvattn run against its peers, in one run:
#   PyTorch CPU attention, softmax(q @ k^T * scale + mask) @ v, same threads,
#   timed in-process (bench/kvattn_peer.py); the machine's OpenBLAS sgemm
#   rate (numpy matmul) and memcpy bandwidth as the limits.
# kvattn is timed as a whole process (reading the inputs included), best of
# several runs.  One line per case: case, peer, kvattn, ratio, target.
: "${KV_TOP:?}"; : "${PY:=python3}"
PEER="$KV_TOP/bench/kvattn_peer.py"
TH=$(nproc)
D=$(mktemp -d "${TMPDIR:-/tmp}/kvattn-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT

now() { date +%s.%N; }
# best TIMES cmd...: best wall time of the command, in seconds
best() {
    n=$1; shift; b=
    i=0
    while [ $i -lt "$n" ]; do
        s=$(now); "$@" >/dev/null || { echo "bench: $* failed" >&2; exit 1; }; e=$(now)
        b=$(awk -v s="$s" -v e="$e" -v b="$b" 'BEGIN { t = e - s; if (b == "" || t < b) b = t; printf "%.4f", b }')
        i=$((i + 1))
    done
    echo "$b"
}
line() { printf '%-44s %-22s %-22s %-22s %s\n' "$@"; }

if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench-kvattn: $PY lacks numpy/torch; skipped"; exit 0
fi
line case peer kvattn ratio target

# --- causal prefill B=1 H=8 S=4096 D=128 f32
S=4096
kvattn gen --shape 1,8,$S,128 --pattern random --seed 1 -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy"
GF=$("$PY" "$PEER" sgemm "$TH")
TT=$("$PY" "$PEER" prefill "$D" "$TH")
KT=$(best 5 kvattn run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal -j "$TH" -o "$D/o.npy")
line "causal prefill 1x8x4096x128 f32 (-j $TH)" "torch ${TT}s" "${KT}s" \
    "$(awk -v a="$TT" -v b="$KT" 'BEGIN { printf "%.1fx faster", a / b }')" ">= 3x"
KG=$(awk -v t="$KT" -v s=$S 'BEGIN { printf "%.1f", 4 * s * s * 128 * 8 / 2 / t / 1e9 }')
line "  causal FLOPs rate vs sgemm" "sgemm ${GF} GF/s" "${KG} GF/s" \
    "$(awk -v a="$KG" -v b="$GF" 'BEGIN { printf "%.0f%%", 100 * a / b }')" ">= 50%"

# --- block-sparse at density rho (random block mask, BS 128, diagonal kept);
# dense and sparse runs alternate so that both see the same machine load
for rho in 0.1 0.3 0.5; do
    dens=$("$PY" "$PEER" blockmask "$D" $S 128 $rho)
    BD=; BT=
    for i in 1 2 3; do
        d=$(best 1 kvattn run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal -j "$TH" -o "$D/o.npy")
        t=$(best 1 kvattn run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal \
            --block-mask "$D/bm.npy" --block-size 128 -j "$TH" -o "$D/ob.npy")
        BD=$(awk -v a="$d" -v b="$BD" 'BEGIN { print (b == "" || a < b) ? a : b }')
        BT=$(awk -v a="$t" -v b="$BT" 'BEGIN { print (b == "" || a < b) ? a : b }')
    done
    line "block-sparse density $dens (BS 128)" "dense ${BD}s" "${BT}s" \
        "$(awk -v a="$BT" -v b="$BD" 'BEGIN { printf "%.2f x dense", a / b }')" \
        "<= $(awk -v r="$dens" 'BEGIN { printf "%.2f", r + 0.1 }') x dense"
done

# --- paged decode Hq 32 Hkv 8 D 128, 32768 cached tokens, bf16
T=32768
"$PY" "$PEER" paged "$D" $T
KVB=$((2 * T * 8 * 128 * 2))
MB=$("$PY" "$PEER" memcpy $KVB)
DT=$("$PY" "$PEER" decode "$D" "$TH")
KD=$(best 9 kvattn run --layout thd -q "$D/dq.npy" --kv-cache "$D/cache.npy" \
     --block-table "$D/table.txt" --seq-lens $T -j "$TH" -o "$D/od.npy")
KB=$(awk -v t="$KD" -v n=$KVB 'BEGIN { printf "%.2f", n / t / 1e9 }')
line "paged decode 32k tokens bf16 (-j $TH)" "torch ${DT}s" "${KD}s" \
    "$(awk -v a="$DT" -v b="$KD" 'BEGIN { printf "%.1fx faster", a / b }')" "-"
line "  KV bytes / time vs memcpy" "memcpy ${MB} GB/s" "${KB} GB/s" \
    "$(awk -v a="$KB" -v b="$MB" 'BEGIN { printf "%.0f%%", 100 * a / b }')" ">= 50%"
