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

# An empty value of a long option names the option (argtable alone says
# 'option "" requires an argument').
for p in "kvmask causal -n 3 --max-mem" "kvslot map -B 4 --scheduled 3 --block-table" "kvattn gen --shape" "kvxattn estimate --threshold" "kvchunk split --sep"; do
    set -- $p
    prog=$1; [ -x "$KV_BIN/$prog" ] || continue
    eval "last=\${$#}"
    expect_fail 2 "$prog: $last ''" "$@" ""
    grep -q -- "$last: expected a value, got an empty one" "$T/.err"; _report $? "$prog: the message names $last"
done
if [ -x "$KV_BIN/kvmask" ]; then
    expect_fail 1 "-o '': an error" kvmask causal -n 3 -f text -o ""
    grep -q "empty output file name" "$T/.err"; _report $? "-o '': the message says the name is empty"
fi

# -o FILE: written through a temporary file and renamed, never half-written;
# a device or FIFO is written in place, not replaced.
# kvmask -f text's first line names its values
H="# 0 = attend, 1 = masked (Ascend's convention; --keep: 1 = attend)"
if [ -x "$KV_BIN/kvmask" ]; then
    ok "-o writes the file" kvmask causal -n 4 -f text -o "$T/m.txt"
    expect_eq "-o file content" "$(cat "$T/m.txt")" "$(printf '%s\n0 1 1 1\n0 0 1 1\n0 0 0 1\n0 0 0 0' "$H")"
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
    expect_eq "FIFO got the mask" "$(cat "$T/fifo.out")" "$(printf '%s\n0 1 1\n0 0 1\n0 0 0' "$H")"
    # a symbolic link is followed, never replaced: the file it names is
    # renamed over in its own directory, or written in place when it is a
    # FIFO or a descriptor of the caller
    mkdir -p "$T/ln/sub" "$T/ln/other"
    echo old >"$T/ln/target.txt"
    ln -s target.txt "$T/ln/link"
    ok "-o through a symlink" kvmask causal -n 2 -f text -o "$T/ln/link"
    if [ -L "$T/ln/link" ]; then _report 0 "the symlink is still a symlink"
    else _report 1 "the symlink is still a symlink"; fi
    expect_eq "the file it names got the mask" "$(cat "$T/ln/target.txt")" "$(printf '%s\n0 1\n0 0' "$H")"
    ln -s link "$T/ln/chain"
    ok "-o through a chain of two symlinks" kvmask causal -n 3 -f text -o "$T/ln/chain"
    if [ -L "$T/ln/chain" ] && [ -L "$T/ln/link" ]; then _report 0 "both links are still links"
    else _report 1 "both links are still links"; fi
    expect_eq "the end of the chain got the mask" "$(cat "$T/ln/target.txt")" "$(printf '%s\n0 1 1\n0 0 1\n0 0 0' "$H")"
    ln -s ../other/new.txt "$T/ln/sub/dangling"
    ok "-o through a relative symlink to a file not yet made" kvmask causal -n 2 -f text -o "$T/ln/sub/dangling"
    if [ -L "$T/ln/sub/dangling" ]; then _report 0 "the dangling link is still a link"
    else _report 1 "the dangling link is still a link"; fi
    expect_eq "the file was made where the link points" "$(cat "$T/ln/other/new.txt")" "$(printf '%s\n0 1\n0 0' "$H")"
    expect_eq "no temporary file left beside the link or the file" "$(ls "$T/ln" "$T/ln/sub" "$T/ln/other" | grep -c "\.tmp\.")" 0
    ln -s ../fifo "$T/ln/fifolink"
    cat "$T/fifo" >"$T/fifo2.out" &
    ok "-o through a symlink to a FIFO" kvmask causal -n 2 -f text -o "$T/ln/fifolink"
    wait
    if [ -p "$T/fifo" ] && [ -L "$T/ln/fifolink" ]; then _report 0 "the FIFO and its link stay"
    else _report 1 "the FIFO and its link stay"; fi
    expect_eq "the FIFO got the mask through the link" "$(cat "$T/fifo2.out")" "$(printf '%s\n0 1\n0 0' "$H")"
    ln -s loop1 "$T/ln/loop2"; ln -s loop2 "$T/ln/loop1"
    expect_fail 1 "-o through a loop of symlinks: an error" kvmask causal -n 2 -f text -o "$T/ln/loop1"
    if [ -e /proc/self/fd/0 ]; then
        echo before >"$T/app.txt"
        ok "-o to a descriptor of the caller" sh -c 'kvmask causal -n 2 -f text -o /proc/self/fd/7 7>>"$1"' sh "$T/app.txt"
        expect_eq "a descriptor is written in place, in append mode" "$(cat "$T/app.txt")" "$(printf 'before\n%s\n0 1\n0 0' "$H")"
    fi
fi
# An input read as one .npy array refuses a second array or any trailing
# byte (the streams of several arrays are read only where kvnpy(5) says so).
if [ -x "$KV_BIN/kvslot" ]; then
    printf '5 6 7 8\n' >"$T/bt.txt"
    ok "one int32 block table" kvslot map -B 4 --block-table "$T/bt.txt" --scheduled 3 --fields block_table --dtype i32 -f npy -o "$T/bt.npy"
    cat "$T/bt.npy" "$T/bt.npy" >"$T/bt2.npy"
    cp "$T/bt.npy" "$T/btg.npy"; printf 'garbage' >>"$T/btg.npy"
    expect_out "one .npy block table is read" "slot_mapping: 20 21 22" kvslot map -B 4 --block-table "$T/bt.npy" --scheduled 3 --fields slot_mapping -f text
    expect_fail 1 "kvslot map: a block table of two arrays (file)" kvslot map -B 4 --block-table "$T/bt2.npy" --scheduled 3 -f text
    grep -q "more than one array" "$T/.err"; _report $? "kvslot map: the message says more than one array"
    expect_fail 1 "kvslot map: a block table of two arrays (stdin)" sh -c 'kvslot map -B 4 --block-table - --scheduled 3 -f text <"$1"' sh "$T/bt2.npy"
    expect_fail 1 "kvslot map: a block table with trailing bytes (file)" kvslot map -B 4 --block-table "$T/btg.npy" --scheduled 3 -f text
    grep -q "extra data after the array" "$T/.err"; _report $? "kvslot map: the message says extra data"
    expect_fail 1 "kvslot map: a block table with trailing bytes (stdin)" sh -c 'kvslot map -B 4 --block-table - --scheduled 3 -f text <"$1"' sh "$T/btg.npy"
    # integers of 18, 19 and 20 digits in a text table (no overflow on the
    # way: make ubsan check)
    printf '9223372036854775808 1\n' >"$T/bt19.txt"
    expect_fail 1 "a block-table value of 2^63: refused" kvslot map -B 4 --block-table "$T/bt19.txt" --scheduled 3 -f text
    grep -q "expected an integer, found '9223372036854775808'" "$T/.err"; _report $? "the message names the value"
    printf '99999999999999999999 1\n' >"$T/bt20.txt"
    expect_fail 1 "a block-table value of 20 digits: refused" kvslot map -B 4 --block-table "$T/bt20.txt" --scheduled 3 -f text
    printf '3 100000000000000000 1000000000000000000\n' >"$T/bt18.txt"
    expect_out "values of 18 and 19 digits are read" "block_table: 3 100000000000000000 1000000000000000000" kvslot map -B 4 --block-table "$T/bt18.txt" --scheduled 3 --fields block_table -f text
fi
if [ -x "$KV_BIN/kvattn" ]; then
    ok "kvattn gen: a Q K V stream" sh -c 'kvattn gen --shape 1,2,4,8 -f npy >"$1"' sh "$T/qkv.npy"
    ok "kvattn gen: Q, K, V files" kvattn gen --shape 1,2,4,8 -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy"
    expect_fail 1 "kvattn run: the Q K V stream as -q" kvattn run -q "$T/qkv.npy" -k "$T/k.npy" -v "$T/v.npy" -f text
    expect_fail 1 "kvattn run: the Q K V stream as -q on stdin" sh -c 'kvattn run -q - -k "$1" -v "$2" -f text <"$3"' sh "$T/k.npy" "$T/v.npy" "$T/qkv.npy"
fi
# Out of memory is a failure of resources, exit 1 (kvtools(7)), also where
# the library's other errors are usage errors.  (Not under ASan, whose
# shadow memory needs more address space than the limit, nor qemu.)
if [ -x "$KV_BIN/kvslot" ] && [ -z "${ASAN_OPTIONS:-}" ] && [ -z "${KV_RUNNER:-}" ]; then
    printf '1 2 3 4\n5 6 7\n' >"$T/p.txt"
    expect_fail 1 "out of memory for the scheduler: exit 1" sh -c 'ulimit -v 400000 && exec kvslot plan --prompts "$1" -B 4 --max-tokens 64 --max-model-len 20 --output-lens 1 --num-blocks 1000000000' sh "$T/p.txt"
    grep -q "out of memory" "$T/.err"; _report $? "the message says out of memory"
    if grep -q "Try '" "$T/.err"; then _report 1 "no usage hint for out of memory" "$(cat "$T/.err")"
    else _report 0 "no usage hint for out of memory"; fi
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
