#!/bin/sh
# bench-kvattn-variants.sh - kvattn run's variants (--sinks, --softcap,
# --alibi) against plain causal attention of the same shape (the target:
# each within 1.15x of it), and beside torch eager doing the same
# (bench/kvattn_variants_peer.py: the transformers expressions of gpt-oss,
# Gemma 2 and BLOOM), Debian's torch ($PY) and the current one ($PYNEW).
# kvattn is timed as a whole process (kvattn_peer.py time), wall and CPU
# time (user + sys of all threads: on a shared machine it moves much less
# with the load); plain and variant runs alternate, best of 6 each, so
# that both see the same load.
: "${KV_TOP:?}"; : "${PY:=python3}"; : "${PYNEW:=}"
PEER="$KV_TOP/bench/kvattn_peer.py"
VPEER="$KV_TOP/bench/kvattn_variants_peer.py"
TH=$(nproc)
D=$(mktemp -d "${TMPDIR:-/tmp}/kvattn-var-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT
line() { printf '%-44s %-10s %-12s %-20s %-20s %s\n' "$@"; }
cell() {
    if [ -z "$1" ]; then echo "-"; return; fi
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4gs %.2fx", a, a / b }'
}
first() { echo "$1" | cut -d' ' -f1; }
second() { echo "$1" | cut -d' ' -f2; }
timed() { n=$1; shift; "$PY" "$PEER" time "$n" "$@" || exit 1; }
KVATTN=$(command -v kvattn) || { echo "bench-kvattn-variants: kvattn not on PATH"; exit 1; }
if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench-kvattn-variants: $PY lacks numpy/torch; skipped"; exit 0
fi
S=${KV_BENCH_VARIANTS_S:-4096}
kvattn gen --shape 1,8,$S,128 --pattern random --seed 3 -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy"
"$PY" -c 'import numpy as np, sys
np.save(sys.argv[1] + "/sinks.npy", (np.arange(8, dtype=np.float32) - 4) * 0.5)
np.save(sys.argv[1] + "/slopes.npy", 2.0 ** -np.arange(1, 9, dtype=np.float32))' "$D"
echo "peers: Debian $("$PY" "$PEER" version); current $([ -n "$PYNEW" ] && "$PYNEW" "$PEER" version || echo "not installed")"
line "case (1x8x${S}x128 f32 causal, -j $TH)" kvattn "vs plain" "torch eager" "torch eager (new)" target
plain=; plainc=
# best WALL CPU of two "WALL CPU" lines
best2() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
    if (a == "") { print b; exit } printf "%s %s\n", (y[1] < x[1] ? y[1] : x[1]), (y[2] < x[2] ? y[2] : x[2]) }'; }
for var in sinks softcap alibi; do
    case $var in
    sinks) opt="--sinks $D/sinks.npy" ;;
    softcap) opt="--softcap 30" ;;
    alibi) opt="--alibi-slopes $D/slopes.npy" ;;
    esac
    # alternate: plain, variant, plain, variant ... best of each
    bp=; bv=
    for r in 1 2 3; do
        P=$(timed 2 "$KVATTN" run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal -j "$TH" -o "$D/o.npy")
        # shellcheck disable=SC2086
        V=$(timed 2 "$KVATTN" run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal $opt -j "$TH" -o "$D/o.npy")
        bp=$(best2 "$bp" "$P")
        bv=$(best2 "$bv" "$V")
    done
    plain=$(best2 "$plain" "$bp")
    TO=$("$PY" "$VPEER" "$D" "$TH" $var)
    TN=$([ -n "$PYNEW" ] && "$PYNEW" "$VPEER" "$D" "$TH" $var)
    line "  --$var" "$(first "$bv")s" "$(awk -v a="$(first "$bv")" -v b="$(first "$bp")" 'BEGIN { printf "%.3fx", a / b }')" \
        "$(cell "$(first "$TO")" "$(first "$bv")")" "$(cell "$(first "$TN")" "$(first "$bv")")" "<= 1.15x plain, ahead of torch"
    line "    the same (cpu)" "$(second "$bv")s" "$(awk -v a="$(second "$bv")" -v b="$(second "$bp")" 'BEGIN { printf "%.3fx", a / b }')" \
        "$(cell "$(second "$TO")" "$(second "$bv")")" "$(cell "$(second "$TN")" "$(second "$bv")")" "<= 1.15x plain, ahead of torch"
done
TO=$("$PY" "$VPEER" "$D" "$TH" plain)
TN=$([ -n "$PYNEW" ] && "$PYNEW" "$VPEER" "$D" "$TH" plain)
line "  plain causal" "$(first "$plain")s" "1" "$(cell "$(first "$TO")" "$(first "$plain")")" "$(cell "$(first "$TN")" "$(first "$plain")")" "(the reference)"
line "    the same (cpu)" "$(second "$plain")s" "1" "$(cell "$(second "$TO")" "$(second "$plain")")" "$(cell "$(second "$TN")" "$(second "$plain")")" "(the reference)"
