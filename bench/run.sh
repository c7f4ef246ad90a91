#!/bin/sh
# bench/run.sh - run bench/*.sh (or the ones named in $BENCH / arguments)
# side by side with their peers.
#
# Two sets of peers: Debian's (python3-numpy, python3-torch; installed when
# root and missing) in $PY, the fallback that needs no package index, and
# the current releases pinned in scripts/requirements/crosscheck.txt (the
# environment make crosscheck uses, build/pyenv/crosscheck, made by
# scripts/pyenv), in $PYNEW (empty when they cannot be installed: those
# columns then show "-"), and vLLM's own scheduler for kvslot plan from the
# same environment, in $PYVLLM.
# First it prints the machine:
# the CPU model, the flags that decide kvtools' routes, and the roofline
# measured by bench/peak.c (peak FLOP/s of f32 FMA and of VDPBF16PS, memcpy
# and memset GB/s, per CPU-second of each thread times the threads: the
# machine's rate when the threads have their cores, steady under load),
# exported as KV_PEAK_FMA, KV_PEAK_BF16, KV_MEMCPY and
# KV_MEMSET for the bench scripts.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export KV_TOP KV_BIN PATH="$KV_BIN:$PATH"
PY=python3
# Debian's torch is built for Debian's python; prefer it when there are two.
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bench: installing python3-numpy python3-torch"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
          apt-get install -y -qq python3-numpy python3-torch >/dev/null
    fi
fi
PYNEW=$(sh "$KV_TOP/scripts/pyenv" crosscheck) || {
    echo "bench: the current peers and vLLM could not be installed (no package index?): Debian's only, kvslot plan's vLLM rows skipped"
    PYNEW=
}
PYVLLM=$PYNEW
export PY PYNEW PYVLLM

echo "== machine"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
flags=$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
have=
for f in avx2 avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16 bf16; do
    case " $flags " in *" $f "*) have="$have $f" ;; *) have="$have no-$f" ;; esac
done
echo "cpu: ${cpu:-unknown} ($(nproc) threads here)"
echo "flags:$have"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvbench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ${CC:-cc} -O2 -pthread -o "$tmp/peak" "$KV_TOP/bench/peak.c" 2>/dev/null; then
    "$tmp/peak" "$(nproc)" cpu >"$tmp/peak.txt"
    sed "s/^/roofline (per CPU-second x $(nproc) threads): /" "$tmp/peak.txt"
    KV_PEAK_FMA=$(awk '$1 == "fma_f32" { print $2 }' "$tmp/peak.txt")
    KV_PEAK_BF16=$(awk '$1 == "dp_bf16" && $2 != "-" { print $2 }' "$tmp/peak.txt")
    KV_MEMCPY=$(awk '$1 == "memcpy" { print $2 }' "$tmp/peak.txt")
    KV_MEMSET=$(awk '$1 == "memset" { print $2 }' "$tmp/peak.txt")
    KV_PEAK_FMA_AVX2=$(awk '$1 == "fma_f32_avx2" { print $2 }' "$tmp/peak.txt")
    export KV_PEAK_FMA KV_PEAK_BF16 KV_MEMCPY KV_MEMSET KV_PEAK_FMA_AVX2
fi

if [ $# -gt 0 ]; then set -- "$@"; else set -- "$KV_TOP"/bench/bench-*.sh; fi
st=0
for b in "$@"; do
    [ -f "$b" ] || continue
    echo "== $(basename "$b" .sh)"
    sh "$b" || st=1
done
exit $st
