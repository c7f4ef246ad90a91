#!/bin/sh
# bench-decode.sh - paged decode over f32, bf16 and FP8 (e4m3, e5m2)
# caches: Llama-3-8B's attention (Hq 32, Hkv 8, D 128), block size 16,
# 32768 cached tokens in blocks of a random permutation, one query.
# The rate is the cache's bytes (K and V of the request) per second of
# kv_attn_run, against memcpy of as many bytes on as many threads, both
# timed in one process, round after round (bench/decode_call.c): the
# median of the rounds' ratios, by wall time and by CPU time (user + sys
# of all threads: on a shared machine it moves much less with the load).
# Targets: 0.8 of memcpy for f32 and bf16, 0.7 over the FP8 bytes.  Beside
# it, torch eager doing the same decode (bench/decode_peer.py: gather the
# pages, widen FP8 with its scales, einsum, softmax, einsum) on Debian's
# torch ($PY) and the current one ($PYNEW), in process, which kvattn must
# beat: the ratio is torch's time over kvattn's (in-process both).
: "${KV_TOP:?}"; : "${KV_BIN:?}"; : "${PY:=python3}"; : "${PYNEW:=}"
TH=$(nproc)
D=$(mktemp -d "${TMPDIR:-/tmp}/decode-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT
LIB=$(dirname "$KV_BIN")/libkv.a
if ! ${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -I"$KV_TOP/lib" -o "$D/decode_call" \
    "$KV_TOP/bench/decode_call.c" "$LIB" -lxxhash -lnettle -largtable2 -lsqlite3 -lhiredis \
    -ljansson -ldl -lm -pthread; then
    echo "bench-decode: cannot build bench/decode_call.c"; exit 1
fi
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
flags=$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
have=
for f in avx2 avx512f avx512bw avx512vl avx512_bf16 asimd; do
    case " $flags " in *" $f "*) have="${have:+$have,}$f" ;; esac
done
tag="[${cpu:-unknown}: ${have:-no vector flags}]"
echo "# paged decode 32k tokens, Hq 32 Hkv 8 D 128, block 16, -j $TH; $tag"
line() { printf '%-30s %-12s %-12s %-16s %-16s %-16s %s\n' "$@"; }
line case kvattn memcpy "of memcpy" "cpu: of memcpy" "torch eager" "target"
# peer PYTHON DTYPE: "WALL CPU" of torch eager, or empty
peer() { [ -n "$1" ] && "$1" "$KV_TOP/bench/decode_peer.py" "$2" "$TH" 2>/dev/null; }
# torch TIME KVATTN_TIME PYTHON: "torch X.Y 0.123s 12.3x" or "-"
vs() {
    [ -z "$1" ] && { echo "-"; return; }
    v=$("$3" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
    awk -v a="$1" -v b="$2" -v v="$v" 'BEGIN { printf "torch %s %.4gs %.1fx", v, a, a / b }'
}
st=0
for dt in f32 bf16 fp8_e4m3 fp8_e5m2; do
    case $dt in fp8*) tgt=0.7 ;; *) tgt=0.8 ;; esac
    # bytes kv_GB/s memcpy_GB/s median min max cpu_kv cpu_memcpy cpu_median cpu_min cpu_max
    R=$("$D/decode_call" "$dt" "$TH" 9) || { echo "bench-decode: decode_call $dt failed"; st=1; continue; }
    # shellcheck disable=SC2086
    set -- $R
    kt=$(awk -v n="$1" -v r="$2" 'BEGIN { printf "%.6f", n / r / 1e9 }')
    # the load averages after the rounds: the machine may be shared
    la=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
    line "$dt (-j $TH)" "${2}GB/s" "${3}GB/s" "$(printf '%.2f (%.2f-%.2f)' "$4" "$5" "$6")" \
        "$(printf '%.2f (%.2f-%.2f)' "$9" "${10}" "${11}")" "-" ">= $tgt of memcpy $tag${la:+ load $la}"
    for py in "$PY" ${PYNEW:+"$PYNEW"}; do
        T=$(peer "$py" "$dt")
        line "  beside torch eager" "${kt}s" "-" "-" "-" "$(vs "$(echo "$T" | cut -d' ' -f1)" "$kt" "$py")" \
            "ahead $tag"
    done
done
exit $st
