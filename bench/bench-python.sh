#!/bin/sh
# bench-python.sh - three routes to the same outputs: the kvtools Python
# call (python/, built in place by make python), the C library called
# from C (bench/lib_call.c), and a subprocess of the program plus np.load
# (what Python users did before), with Debian's python3 and numpy.
#   mask16    kvmask causal -n 16 (bool)
#   slot1     kvslot map -B 16, one request of 16 tokens (slot_mapping)
#   mask8192  kvmask causal -n 8192 --dtype f16 (128 MiB), a new array
#             each call (C: a new malloc'd buffer)
#   mask8192-out  the same into one array reused (out=; C: one buffer)
#   attn4096  kvattn run --causal, Q/K/V [1, 4, 4096, 64] f32
# ROUNDS rounds (default 9) interleave the C library and Python, the one
# first in odd rounds going second in even ones; a round's time is the
# best of 3 calls (tiny cases: of 3 batches of 1000 calls).  Reported: the
# median round of each route, and py/C as the median of the rounds' own
# ratios (two neighbouring runs share the machine's load; the medians
# drop the rounds another job disturbed); cpu py/C is the same for the
# process CPU time of those calls (every thread's), which other jobs on
# the machine disturb far less than wall time.  The subprocess route runs
# in the first three rounds.  The outputs of the three are checked equal
# byte for byte.
# Targets: mask16 and slot1 through Python under 20 us and at least 50x
# faster than the subprocess route; the 8192^2 mask and attn4096 through
# Python within 1.1x of the C library.
set -eu
: "${KV_TOP:?run through make bench}"
ROUNDS=${ROUNDS:-9}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
D=$(mktemp -d "${TMPDIR:-/tmp}/kvbench.XXXXXX")
trap 'rm -rf "$D"' EXIT
LIB=$(dirname "$KV_BIN")/libkv.a
${CC:-cc} -std=c11 -O2 -D_GNU_SOURCE -I"$KV_TOP/lib" -o "$D/lib_call" \
    "$KV_TOP/bench/lib_call.c" "$LIB" -lxxhash -lnettle -largtable2 -lsqlite3 -lhiredis \
    -ljansson -ldl -lm -pthread
PYTHONPATH="$KV_TOP/python" "$PY" -c 'import kvtools' 2>/dev/null || {
    echo "bench-python: the Python package is not built (make python)" >&2; exit 1; }
PYTHONPATH="$KV_TOP/python" "$PY" -c '
import numpy as np, sys
r = np.random.default_rng(0)
for n in "qkv":
    np.save(sys.argv[1] + "/" + n + ".npy", r.standard_normal((1, 4, 4096, 64)).astype(np.float32))' "$D"

# the median of the numbers on stdin, one a line
median() { sort -g | awk '{ v[NR] = $1 } END {
    print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

run_c() {
    "$D/lib_call" "$1" 3 "$D/$1.c" "$D/q.npy" "$D/k.npy" "$D/v.npy" >"$D/$1.t"
    awk '{ print $1 }' "$D/$1.t" >>"$D/$1.tc"
    awk '{ print $2 }' "$D/$1.t" >>"$D/$1.uc"
}
run_py() {   # case round
    sub=0; [ "$2" -le 3 ] && sub=3
    PYTHONPATH="$KV_TOP/python" KV_BIN=$KV_BIN "$PY" "$KV_TOP/bench/python_routes.py" \
        "$1" 3 "$D/$1" "$D" $sub >"$D/$1.t"
    awk '$1 == "python" { print $2 }' "$D/$1.t" >>"$D/$1.tp"
    awk '$1 == "python" { print $3 }' "$D/$1.t" >>"$D/$1.up"
    awk '$1 == "subprocess" { print $2 }' "$D/$1.t" >>"$D/$1.ts"
}

printf '%-13s %12s %12s %12s %9s %9s %9s  %s\n' case python C-library subprocess py/C cpu-py/C sub/py target
for c in mask16 slot1 mask8192 mask8192-out attn4096; do
    : >"$D/$c.tc"; : >"$D/$c.tp"; : >"$D/$c.ts"; : >"$D/$c.uc"; : >"$D/$c.up"
    r=1
    while [ $r -le "$ROUNDS" ]; do
        if [ $((r % 2)) = 1 ]; then run_c $c; run_py $c $r; else run_py $c $r; run_c $c; fi
        r=$((r + 1))
    done
    cmp -s "$D/$c.py" "$D/$c.c" || { echo "bench-python: $c: the Python output differs from the C library's" >&2; exit 1; }
    cmp -s "$D/$c.py" "$D/$c.sub" || { echo "bench-python: $c: the Python output differs from the program's" >&2; exit 1; }
    tp=$(median <"$D/$c.tp"); tc=$(median <"$D/$c.tc"); ts=$(median <"$D/$c.ts")
    ratio=$(paste "$D/$c.tp" "$D/$c.tc" | awk '{ print $1 / $2 }' | median)
    cratio=$(paste "$D/$c.up" "$D/$c.uc" | awk '{ print ($2 > 0) ? $1 / $2 : 0 }' | median)
    case $c in mask16|slot1) t='< 20 us, sub/py >= 50x' ;; *) t='py/C <= 1.1x' ;; esac
    awk -v c=$c -v p="$tp" -v l="$tc" -v s="$ts" -v q="$ratio" -v r="$cratio" -v t="$t" 'BEGIN {
        f = (p < 1e-3) ? 1e6 : 1e3; u = (p < 1e-3) ? "us" : "ms"
        printf "%-13s %10.2f%s %10.2f%s %10.2f%s %8.2fx %8.2fx %8.1fx  %s\n",
            c, p * f, u, l * f, u, s * f, u, q, r, s / p, t }'
done
