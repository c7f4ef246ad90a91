#!/bin/sh
# bench-kvattn.sh - kvattn run against its peers, in one run:
#   Debian's PyTorch ($PY, the fallback peer) and the current PyTorch from
#   the package index ($PYNEW, scripts/pyenv crosscheck; empty when it could not
#   be installed): scaled_dot_product_attention where torch has it (2.x),
#   softmax(q @ k^T * scale + mask) @ v before, FlexAttention's
#   create_block_mask + flex_attention for the block-sparse rows, same
#   threads, timed in-process (bench/kvattn_peer.py); and the roofline: the
#   OpenBLAS sgemm rate, the measured peak of the dot-product instructions
#   and memcpy bandwidth (bench/peak.c, run by bench/run.sh: KV_PEAK_*).
# kvattn is timed as a whole process (reading the inputs included), best of
# several runs.  Each peer column shows the peer's time and how many times
# faster kvattn is (peer time / kvattn time).  Lines marked (cpu) compare
# CPU time (user + sys, all threads) instead of wall time: on a shared
# machine they move much less with the load.
: "${KV_TOP:?}"; : "${PY:=python3}"; : "${PYNEW:=}"
PEER="$KV_TOP/bench/kvattn_peer.py"
TH=$(nproc)
D=$(mktemp -d "${TMPDIR:-/tmp}/kvattn-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT

line() { printf '%-40s %-10s %-20s %-20s %s\n' "$@"; }
# ratio A B FORMAT: awk printf of A / B
ratio() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { printf f, a / b }'; }
# cell PEER_TIME KVATTN_TIME: "0.123s 4.5x" (or "-" without the peer)
cell() {
    if [ -z "$1" ]; then echo "-"; return; fi
    awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4gs %.2fx", a, a / b }'
}
# timed N cmd...: "WALL CPU" of the best of N runs of a kvattn command
timed() { n=$1; shift; "$PY" "$PEER" time "$n" "$@" || exit 1; }
first() { echo "$1" | cut -d' ' -f1; }
second() { echo "$1" | cut -d' ' -f2; }
# new ARGS...: the current peer's output ("" without it)
new() { [ -n "$PYNEW" ] && "$PYNEW" "$PEER" "$@"; }
KVATTN=$(command -v kvattn) || { echo "bench-kvattn: kvattn not on PATH"; exit 1; }

if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench-kvattn: $PY lacks numpy/torch; skipped"; exit 0
fi
OLDV=$("$PY" "$PEER" version)
NEWV=$(new version || echo "not installed")
echo "peers: Debian $OLDV; current $NEWV"
line case kvattn "torch $(echo "$OLDV" | cut -d' ' -f2)" "torch $(echo "$NEWV" | cut -d' ' -f2)" target

# --- causal prefill B=1 H=8 S=4096 D=128, f32 and bf16
S=4096
kvattn gen --shape 1,8,$S,128 --pattern random --seed 1 -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy"
mkdir -p "$D/b"
kvattn gen --shape 1,8,$S,128 --pattern random --seed 1 --dtype bf16 \
    -q "$D/b/q.npy" -k "$D/b/k.npy" -v "$D/b/v.npy"
GF=$("$PY" "$PEER" sgemm "$TH")
TT=$("$PY" "$PEER" prefill "$D" "$TH")
NT=$(new prefill "$D" "$TH")
KT=$(timed 5 "$KVATTN" run -q "$D/q.npy" -k "$D/k.npy" -v "$D/v.npy" --causal -j "$TH" -o "$D/o.npy")
line "causal prefill 1x8x4096x128 f32 (-j $TH)" "$(first "$KT")s" "$(cell "$(first "$TT")" "$(first "$KT")")" \
    "$(cell "$(first "$NT")" "$(first "$KT")")" ">= 3x, ahead"
line "  the same (cpu)" "$(second "$KT")s" "$(cell "$(second "$TT")" "$(second "$KT")")" \
    "$(cell "$(second "$NT")" "$(second "$KT")")" ">= 3x, ahead"
TB=$("$PY" "$PEER" prefill "$D/b" "$TH" bf16)
NB=$(new prefill "$D/b" "$TH" bf16)
KB=$(timed 5 "$KVATTN" run -q "$D/b/q.npy" -k "$D/b/k.npy" -v "$D/b/v.npy" --causal -j "$TH" -o "$D/ob.npy")
line "causal prefill 1x8x4096x128 bf16 (-j $TH)" "$(first "$KB")s" "$(cell "$(first "$TB")" "$(first "$KB")")" \
    "$(cell "$(first "$NB")" "$(first "$KB")")" "ahead of torch 2.x"
line "  the same (cpu)" "$(second "$KB")s" "$(cell "$(second "$TB")" "$(second "$KB")")" \
    "$(cell "$(second "$NB")" "$(second "$KB")")" "ahead of torch 2.x"
line "  bf16 vs kvattn's own f32" "" "f32 $(first "$KT")s" "$(ratio "$(first "$KT")" "$(first "$KB")" '%.2fx faster')" ">= 1.6x"
line "  the same (cpu)" "" "f32 $(second "$KT")s" "$(ratio "$(second "$KT")" "$(second "$KB")" '%.2fx faster')" ">= 1.6x"
# roofline: the causal FLOPs (4 S^2 D H / 2) per CPU-second x threads
# against sgemm's and the instructions' peaks measured the same way
for dt in f32 bf16; do
    if [ $dt = f32 ]; then t=$KT; pk=${KV_PEAK_FMA:-}; pn="fma"; tg="(roofline)"
    else t=$KB; pk=${KV_PEAK_BF16:-}; pn="vdpbf16ps"; tg=">= 0.75 of peak (fused)"; fi
    KG=$(awk -v t="$(second "$t")" -v s=$S -v th="$TH" 'BEGIN { printf "%.1f", 4 * s * s * 128 * 8 / 2 / (t / th) / 1e9 }')
    line "  $dt GFLOP/s (cpu) vs sgemm, peak" "${KG}" "sgemm $(second "$GF") $(ratio "$KG" "$(second "$GF")" '%.2f')" \
        "$pn ${pk:--} $( [ -n "$pk" ] && ratio "$KG" "$pk" '%.2f')" "$tg"
done

# --- f32 causal prefill on the fused kernels: more shapes, and the AVX2
# code on this CPU, each against torch 2.x's SDPA in the same run (CPU
# time: the machines are shared), useful FLOPs (4 L^2 D H / 2 per
# request) per CPU-second x threads against the FMA peak of the same code
CPUN=$(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo 2>/dev/null | head -1 | sed 's/ [0-9]*-Core Processor//')
ISA=$(grep -o -w 'avx512_bf16\|avx512f\|avx2\|asimd' /proc/cpuinfo 2>/dev/null | sort -u | tr '\n' ' ')
echo "fused kernels on: ${CPUN:-unknown} (${ISA% }), -j $TH, (cpu) times"
[ "$(uname -m)" = aarch64 ] ||
    echo "fused kernels on aarch64 (NEON f32, BFDOT bf16): not measured, no Arm CPU here (tested under qemu-user only)"
# fused_row LABEL DIR LENS ISA PEAK TARGET [kvattn options]: one row; LENS
# empty for a bhsd batch (its shape from q.npy), else the thd requests'
# lengths
#
# The AVX2 rows model an AVX2-only CPU on both sides (isa_cap, in the
# subshell of each command): kvattn at KVTOOLS_ISA=avx2, and torch with
# its ATen kernels at ATEN_CPU_CAPABILITY=avx2 (its fused SDPA and exps),
# MKL (its sgemm: torch 2.15's wheel links MKL, not OpenBLAS) at
# MKL_ENABLE_INSTRUCTIONS=AVX2 and oneDNN at ONEDNN_MAX_CPU_ISA (DNNL_ before
# oneDNN 3) AVX2; OpenBLAS, if either loads it, at OPENBLAS_CORETYPE=Haswell;
# and for both glibc's string functions (memcpy, memset: on an AVX-512 CPU
# their EVEX forms on ymm16-31) held to AVX2 by GLIBC_TUNABLES.  The line
# after the row says whether any thread of either side still held
# AVX-512 state (kvattn_peer.py avx512: Linux's arch_status) and which
# capability ATen ran at.  The row's peak is peak.c's AVX2 FMA peak
# (256-bit FMAs on the same cores: the FMA rate of an AVX2-only Zen 3,
# two 256-bit FMA pipes, per cycle).
isa_cap() {
    [ "$1" = avx2 ] || return 0
    export ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
        DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell \
        GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD
}
fused_row() {
    label=$1 dir=$2 lens=$3 isa=$4 pk=$5 tgt=$6; shift 6
    if [ -z "$lens" ]; then
        NT=$(isa_cap "$isa"; new prefill "$dir" "$TH")
        KT=$(isa_cap "$isa"; KVTOOLS_ISA=$isa timed 3 "$KVATTN" run -q "$dir/q.npy" -k "$dir/k.npy" \
             -v "$dir/v.npy" --causal -j "$TH" "$@" -o "$dir/o.npy")
        fl=$("$PY" -c "import numpy as n; s = n.load('$dir/q.npy', mmap_mode='r').shape; print(4 * s[0] * s[1] * s[2] ** 2 * s[3] / 2)")
    else
        NT=$(isa_cap "$isa"; new varlen "$dir" "$TH" "$lens")
        KT=$(isa_cap "$isa"; KVTOOLS_ISA=$isa timed 3 "$KVATTN" run --layout thd --q-lens "$lens" \
             -q "$dir/q.npy" -k "$dir/k.npy" -v "$dir/v.npy" --causal -j "$TH" "$@" -o "$dir/o.npy")
        fl=$("$PY" -c "import numpy as n; s = n.load('$dir/q.npy', mmap_mode='r').shape; print(sum(4 * s[1] * int(l) ** 2 * s[2] / 2 for l in '$lens'.split(',')))")
    fi
    G=$(awk -v f="$fl" -v t="$(second "$KT")" -v th="$TH" 'BEGIN { printf "%.1f", f / (t / th) / 1e9 }')
    line "$label" "$(second "$KT")s" "${G} GFLOP/s $( [ -n "$pk" ] && ratio "$G" "$pk" '%.2f of peak')" \
        "$(cell "$(second "$NT")" "$(second "$KT")")" "$tgt"
}
fdir() { mkdir -p "$D/$1"; shift; kvattn gen --pattern random --seed 1 "$@"; }
fdir f1 --shape 1,8,4096,128 -q "$D/f1/q.npy" -k "$D/f1/k.npy" -v "$D/f1/v.npy"
fused_row "f32 1x8x4096x128 native (cpu)" "$D/f1" "" native "${KV_PEAK_FMA:-}" ">= 0.75 of peak, >= 1.3x"
fused_row "  AVX2 code, both (KVTOOLS_ISA=avx2)" "$D/f1" "" avx2 "${KV_PEAK_FMA_AVX2:-}" ">= 0.75 of peak, >= 1.3x"
if [ -n "$PYNEW" ]; then
    AK=$(isa_cap avx2; KVTOOLS_ISA=avx2 "$PY" "$PEER" avx512 "$KVATTN" run -q "$D/f1/q.npy" \
         -k "$D/f1/k.npy" -v "$D/f1/v.npy" --causal -j "$TH" -o "$D/f1/o.npy")
    AT=$(isa_cap avx2; "$PYNEW" "$PEER" avx512 "$PYNEW" "$PEER" prefill "$D/f1" "$TH")
    echo "    AVX-512 state in the AVX2 row: kvattn $AK; torch $AT, ATen at $(isa_cap avx2; new capability)"
fi
rm -rf "$D/f1"
for sh in 1,8,4096,64 1,8,4096,256 1,8,1024,128 1,8,16384,128; do
    fdir f2 --shape $sh -q "$D/f2/q.npy" -k "$D/f2/k.npy" -v "$D/f2/v.npy"
    fused_row "f32 $(echo $sh | tr , x) (cpu)" "$D/f2" "" native "${KV_PEAK_FMA:-}" ">= 1.2x"
    rm -rf "$D/f2"
done
fdir f3 --shape 1,32,4096,128 --kv-heads 4 -q "$D/f3/q.npy" -k "$D/f3/k.npy" -v "$D/f3/v.npy"
fused_row "f32 GQA 8:1 1x32x4096x128 (cpu)" "$D/f3" "" native "${KV_PEAK_FMA:-}" ">= 1.2x"
rm -rf "$D/f3"
VL=512,3072,128,1536,2048,1024
fdir f4 --shape 1,8,8320,128 --layout thd -q "$D/f4/q.npy" -k "$D/f4/k.npy" -v "$D/f4/v.npy"
fused_row "f32 varlen $VL H8 D128 (cpu)" "$D/f4" "$VL" native "${KV_PEAK_FMA:-}" ">= 1.2x"
rm -rf "$D/f4"

# --- block-sparse at density rho (random block mask, BS 128, diagonal kept);
# dense and sparse runs alternate so that both see the same machine load,
# best of 5 each (a ratio of two noisy times needs more runs than a time);
# the current peer is FlexAttention on the same block mask
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
    FX=$(new flex "$D" "$TH" 128 2>"$D/flex.err")
    mode=$(echo "$FX" | cut -d' ' -f3)
    tgt="<= $(awk -v r="$dens" 'BEGIN { printf "%.2f", r + 0.1 }') x dense"
    line "block-sparse density $dens (BS 128)" "${BT}s" "dense ${BD}s $(ratio "$BT" "$BD" '%.2fx')" \
        "$(cell "$(first "$FX")" "$BT") ${mode:+flex $mode}" "$tgt, ahead"
    line "  the same (cpu)" "${CT}s" "dense ${CD}s $(ratio "$CT" "$CD" '%.2fx')" \
        "$(cell "$(second "$FX")" "$CT")" "$tgt, ahead"
done

# --- paged decode Hq 32 Hkv 8 D 128, 32768 cached tokens, bf16
T=32768
"$PY" "$PEER" paged "$D" $T
KVB=$((2 * T * 8 * 128 * 2))
MB=$("$PY" "$PEER" memcpy $KVB)
DT=$("$PY" "$PEER" decode "$D" "$TH")
ND=$(new decode "$D" "$TH")
KD=$(timed 9 "$KVATTN" run --layout thd -q "$D/dq.npy" --kv-cache "$D/cache.npy" \
     --block-table "$D/table.txt" --seq-lens $T -j "$TH" -o "$D/od.npy")
line "paged decode 32k tokens bf16 (-j $TH)" "$(first "$KD")s" "$(cell "$(first "$DT")" "$(first "$KD")")" \
    "$(cell "$(first "$ND")" "$(first "$KD")")" "ahead"
KB=$(awk -v t="$(first "$KD")" -v n=$KVB 'BEGIN { printf "%.2f", n / t / 1e9 }')
line "  KV bytes / time vs memcpy" "${KB}GB/s" "memcpy $(first "$MB")GB/s" \
    "$(ratio "$KB" "$(first "$MB")" '%.2f of memcpy')" ">= 0.8"
MC=${KV_MEMCPY:-$(second "$MB")}
KC=$(awk -v t="$(second "$KD")" -v n=$KVB -v th="$TH" 'BEGIN { printf "%.2f", n / (t / th) / 1e9 }')
line "  the same (cpu x $TH threads)" "${KC}GB/s" "memcpy ${MC}GB/s" \
    "$(ratio "$KC" "$MC" '%.2f of memcpy')" ">= 0.8"
# the attention alone (kvattn -v: its CPU time, mapping the inputs and
# writing the output left out, as the in-process peers leave them out)
KA=
for i in 1 2 3 4 5 6 7 8 9; do
    c=$("$KVATTN" run --layout thd -q "$D/dq.npy" --kv-cache "$D/cache.npy" --block-table "$D/table.txt" \
        --seq-lens $T -j "$TH" --quiet --verbose -o "$D/od.npy" 2>&1 | sed -n 's/.*(\([0-9.]*\) CPU-s).*/\1/p')
    KA=$(awk -v a="$c" -v b="$KA" 'BEGIN { print (b == "" || a < b) ? a : b }')
done
KAG=$(awk -v t="$KA" -v n=$KVB -v th="$TH" 'BEGIN { printf "%.2f", n / (t / th) / 1e9 }')
line "  attention alone (cpu x $TH threads)" "${KAG}GB/s" "memcpy ${MC}GB/s" \
    "$(ratio "$KAG" "$MC" '%.2f of memcpy')" ">= 0.8"
