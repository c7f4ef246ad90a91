#!/bin/sh
# conventions.sh - what every program promises (DESIGN.md): --help on
# stdout with exit 0, --version, unknown options rejected with exit 2 and a
# 'Try ... --help' hint, nothing on stdout on error.
. "$KV_TOP/tests/lib.sh"

for p in kvmask kvslot kvattn kvxattn kvchunk; do
    [ -x "$KV_BIN/$p" ] || continue
    expect_out "$p --version" "$p (kvtools) $(sed -n 's/^#define KV_VERSION "\(.*\)"/\1/p' "$KV_TOP/lib/core/kv.h")" "$p" --version
    ok "$p --help exits 0" "$p" --help
    if [ -s "$T/.out" ]; then _report 0 "$p --help prints on stdout"
    else _report 1 "$p --help prints on stdout"; fi
    expect_fail 2 "$p --no-such-option" "$p" --no-such-option
    if grep -q "Try '$p" "$T/.err"; then _report 0 "$p usage error hints at --help"
    else _report 1 "$p usage error hints at --help" "$(cat "$T/.err")"; fi
    if grep -q "^$p" "$T/.err"; then _report 0 "$p messages start with the program name"
    else _report 1 "$p messages start with the program name" "$(cat "$T/.err")"; fi
done

# -o FILE: written through a temporary file and renamed, never half-written;
# a device or FIFO is written in place, not replaced.
if [ -x "$KV_BIN/kvmask" ]; then
    ok "-o writes the file" kvmask causal -n 4 -f text -o "$T/m.txt"
    expect_eq "-o file content" "$(cat "$T/m.txt")" "$(printf '0 1 1 1\n0 0 1 1\n0 0 0 1\n0 0 0 0')"
    expect_eq "-o leaves no temporary file" "$(ls "$T" | grep -c 'm.txt.tmp')" 0
    echo keep >"$T/old.txt"
    expect_fail 2 "a failing run leaves -o untouched" kvmask causal -n 0 -f text -o "$T/old.txt"
    expect_eq "old -o content kept" "$(cat "$T/old.txt")" keep
    mkfifo "$T/fifo"
    cat "$T/fifo" >"$T/fifo.out" &
    ok "-o to a FIFO" kvmask causal -n 3 -f text -o "$T/fifo"
    wait
    if [ -p "$T/fifo" ]; then _report 0 "the FIFO is still a FIFO"
    else _report 1 "the FIFO is still a FIFO"; fi
    expect_eq "FIFO got the mask" "$(cat "$T/fifo.out")" "$(printf '0 1 1\n0 0 1\n0 0 0')"
fi
# The progress line: on a terminal's stderr only, not with --quiet.
# KV_PROGRESS_DELAY=0 shows it at once instead of after a second.
if [ -x "$KV_BIN/kvmask" ] && command -v script >/dev/null 2>&1; then
    KV_PROGRESS_DELAY=0 script -qec "kvmask causal -n 8192 --dtype f16 -o '$T/p.npy'" /dev/null >"$T/pty.out" 2>&1
    if grep -q 'kvmask: mask: *[0-9]*%' "$T/pty.out"; then _report 0 "progress line on a terminal"
    else _report 1 "progress line on a terminal" "$(od -c "$T/pty.out" | head -5)"; fi
    KV_PROGRESS_DELAY=0 script -qec "kvmask causal -n 8192 --dtype f16 --quiet -o '$T/p.npy'" /dev/null >"$T/pty.out" 2>&1
    expect_eq "--quiet: no progress line" "$(wc -c <"$T/pty.out" | tr -d ' ')" 0
    KV_PROGRESS_DELAY=0 kvmask causal -n 8192 --dtype f16 -o "$T/p.npy" 2>"$T/p.err"
    expect_eq "no progress line when stderr is not a terminal" "$(wc -c <"$T/p.err" | tr -d ' ')" 0
fi
done_testing
