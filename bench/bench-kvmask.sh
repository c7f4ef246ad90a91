#!/bin/sh
# bench-kvmask.sh - kvmask against its peers, in one run:
#   the upstream PyTorch/NumPy expressions timed in-process
#   (bench/kvmask_peer.py: vllm-ascend _generate_attn_mask, the torch.triu
#   splitfuse template, FlashInfer-style np.packbits, FlexAttention's dense
#   block-mask construction), and memset of the same bytes as the limit.
# kvmask is timed as a whole process writing to /dev/null, best of several
# runs.  One line per case: case, peer, kvmask, ratio, target; each peer
# runs on Debian's torch and numpy ($PY) and, on a line of its own, on the
# current releases ($PYNEW, see bench/run.sh; skipped without them).
: "${KV_TOP:?}"; : "${PY:=python3}"; : "${PYNEW:=}"
PEER="$KV_TOP/bench/kvmask_peer.py"

D=$(mktemp -d "${TMPDIR:-/tmp}/kvmask-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT
# Output goes to a null device of our own when we may make one: a shared
# machine's /dev/null has been seen replaced by a regular file.
SINK=/dev/null
if mknod "$D/null" c 1 3 2>/dev/null; then SINK="$D/null"; fi
[ -c "$SINK" ] || echo "bench-kvmask: warning: $SINK is not a character device" >&2

now() { date +%s.%N; }
# best TIMES cmd...: best wall time of the command, in seconds
best() {
    n=$1; shift; b=
    i=0
    while [ $i -lt "$n" ]; do
        s=$(now); "$@" >"$SINK" || { echo "bench: $* failed" >&2; exit 1; }; e=$(now)
        b=$(awk -v s="$s" -v e="$e" -v b="$b" 'BEGIN { t = e - s; if (b == "" || t < b) b = t; printf "%.4f", b }')
        i=$((i + 1))
    done
    echo "$b"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1fx faster", a / b }'; }
line() { printf '%-40s %-22s %-12s %-18s %s\n' "$@"; }

if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    echo "bench-kvmask: $PY lacks numpy/torch; skipped"; exit 0
fi
ver() { "$1" -c 'import numpy, torch; print("torch", torch.__version__.split("+")[0], "numpy", numpy.__version__)'; }
echo "peers: Debian $(ver "$PY")${PYNEW:+; current $(ver "$PYNEW")}"
line case peer kvmask ratio target
# current CASE LABEL TARGET PEER-ARGS...: the peer on the current releases
# against the kvmask time $KT, on a line of its own
current() {
    [ -n "$PYNEW" ] || return 0
    _c=$1 _l=$2 _t=$3; shift 3
    _n=$("$PYNEW" "$PEER" "$@") || { echo "bench: current peer $* failed" >&2; exit 1; }
    line "  $_c, current peers" "$_l ${_n}s" "${KT}s" "$(ratio "$_n" "$KT")" "$_t"
}

# --- dense causal f16, n = 8192 (128 MiB)
N=8192
B=$((N * N * 2))
TT=$("$PY" "$PEER" attn $N)
KT=$(best 5 kvmask ascend --preset attn -n $N --dtype f16 -f npy --force)
line "dense causal f16 n=$N" "torch ${TT}s" "${KT}s" "$(ratio "$TT" "$KT")" ">= 3x faster"
current "the same" torch ">= 3x faster" attn $N
MS=$("$PY" "$PEER" memset $B)
line "  vs memset of the same 128 MiB" "memset ${MS}s" "${KT}s" \
    "$(awk -v a="$KT" -v b="$MS" 'BEGIN { printf "%.1fx memset", a / b }')" \
    "<= 2x memset ($(awk -v b="$MS" 'BEGIN { printf "%.4f", 2 * b }')s)"
# the same in CPU time (user + sys of the process, best of 9): on a busy
# machine a process's wall time carries its start-up under load, which the
# in-process memset never pays
KC=$("$PY" -c '
import resource, subprocess, sys
best = float("inf")
for _ in range(9):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    best = min(best, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
print("%.4f" % best)' kvmask ascend --preset attn -n $N --dtype f16 -f npy --force)
line "  the same in CPU time" "memset ${MS}s" "${KC}s" \
    "$(awk -v a="$KC" -v b="$MS" 'BEGIN { printf "%.1fx memset", a / b }')" "<= 1.5x memset"
FW=$("$PY" "$PEER" filewrite $B "$D/peer.bin")
KF=$(best 5 kvmask ascend --preset attn -n $N --dtype f16 -o "$D/m.npy")
line "  the same to a file (-o)" "write(2) ${FW}s" "${KF}s" \
    "$(awk -v a="$KF" -v b="$FW" 'BEGIN { printf "%.1fx write", a / b }')" "(info)"

# --- the 2048 splitfuse template (int8, 4 MiB)
TT=$("$PY" "$PEER" splitfuse)
KT=$(best 5 kvmask ascend --preset splitfuse -f npy --force)
line "splitfuse template int8 2048" "torch.triu ${TT}s" "${KT}s" "$(ratio "$TT" "$KT")" "faster"
current "the same" torch.triu faster splitfuse

# --- FlashInfer packed bits, causal n = 16384
N=16384
TT=$("$PY" "$PEER" packbits $N)
KT=$(best 3 kvmask causal -n $N -f bits --force)
line "bits causal n=$N" "tril+packbits ${TT}s" "${KT}s" "$(ratio "$TT" "$KT")" "faster"
current "the same" tril+packbits faster packbits $N

# --- FlexAttention BlockMask
N=16384
TT=$("$PY" "$PEER" blockmask $N 128)
KT=$(best 3 kvmask causal -n $N -f block --block-size 128 --force)
line "block causal n=$N bs 128" "torch ${TT}s" "${KT}s" "$(ratio "$TT" "$KT")" "faster"
current "the same" torch faster blockmask $N 128
N=1048576
KT=$(best 3 kvmask causal -n $N -f block --block-size 128 --force)
MEM=$( (/usr/bin/time -f %M kvmask causal -n $N -f block --block-size 128 --force >"$SINK") 2>&1 | tail -n 1)
line "block causal n=$N bs 128 (1 GiB)" "(dense: 1 TiB)" "${KT}s" "max RSS ${MEM} KiB" "< 1 s, a few MB"
