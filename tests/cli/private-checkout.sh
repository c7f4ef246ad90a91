#!/bin/sh
# private-checkout.sh - the suite's result does not depend on where the
# checkout lives: a clone in a directory only root can enter (mode 0700)
# runs kvchunk-reliability.sh, whose read-only and unreadable store cases
# drop to user nobody, natively and, where the cross tools are installed
# (sh scripts/setup --arm64), on aarch64 under qemu.  The
# clone gets this tree's programs laid out as a build would (under
# emulation a wrapper that names the binary inside the clone) and this
# tree's test files.
. "$KV_TOP/tests/lib.sh"

skip_point() {   # title reason
    _n=$((_n + 1)); _pass=$((_pass + 1))
    echo "ok $_n - $1 # SKIP $2"
}

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null 2>&1 ||
    ! command -v git >/dev/null 2>&1; then
    skip_point 'a clone in a 0700 directory' 'needs root, setpriv and git'
    done_testing
    exit
fi
P=$(mktemp -d "${TMPDIR:-/tmp}/kvpriv.XXXXXX")
trap 'rm -rf "$T" "$P"' EXIT
chmod 700 "$P"
if git -C "$KV_TOP" rev-parse --git-dir >/dev/null 2>&1; then
    ok 'git clone into a 0700 directory' git clone -q "$KV_TOP" "$P/kv"
else
    ok 'copy the sources into a 0700 directory' sh -c \
        'mkdir "$2" && cp -R "$1/Makefile" "$1/lib" "$1/tools" "$1/tests" "$1/scripts" "$2"' \
        sh "$KV_TOP" "$P/kv"
fi
mkdir -p "$P/kv/tests/cli"
cp "$KV_TOP/tests/lib.sh" "$P/kv/tests/lib.sh"
cp "$KV_TOP/tests/cli/kvchunk-reliability.sh" "$P/kv/tests/cli/"

# run_case NAME BUILD PROGRAM RUNNER: PROGRAM copied to the clone's
# BUILD/bin, run through BUILD/run wrappers under RUNNER (if any), as
# 'make check' would run it there.
run_case() {
    b="$P/kv/$2"
    mkdir -p "$b/bin" "$b/run"
    cp "$3" "$b/bin/kvchunk"
    bin="$b/bin"
    if [ -n "$4" ]; then
        printf '#!/bin/sh\nexec %s %s "$@"\n' "$4" "$b/bin/kvchunk" >"$b/run/kvchunk"
        chmod +x "$b/run/kvchunk"
        bin="$b/run"
        # the build-local sysroot lives in the checkout too
        [ -d "$KV_TOP/$2/sysroot" ] && cp -R "$KV_TOP/$2/sysroot" "$b/"
    fi
    # a KVTOOLS_ISA this CPU's run was given (avx2, say) names no level of
    # the other architecture, whose program this case may run under qemu
    (cd "$P/kv" && { [ -z "$4" ] || [ -n "${KV_RUNNER:-}" ] || unset KVTOOLS_ISA; } &&
        KV_TOP="$P/kv" KV_BIN="$bin" KV_UNIT="$b/tests" \
        KV_RUNNER="$4" sh tests/cli/kvchunk-reliability.sh) >"$T/$1.out" 2>&1
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$T/$1.out" | tail -n 1)
    case $line in
    *' passed, 0 failed') _report 0 "$1: kvchunk-reliability.sh in the 0700 clone ($line)" ;;
    *) _report 1 "$1: kvchunk-reliability.sh in the 0700 clone" \
           "${line:-no summary}
$(grep -A 3 '^not ok' "$T/$1.out" | head -n 30)" ;;
    esac
    grep -q '^ok .* - kvchunk starts as nobody' "$T/$1.out"
    _report $? "$1: the unprivileged runs start the program"
}

# native: this build's program, or beside a cross build the checkout's
# native one, brought up to date first
if [ -z "${KV_RUNNER:-}" ]; then
    native=$KV_BIN/kvchunk
else
    native=$KV_TOP/build/bin/kvchunk
    if command -v cc >/dev/null 2>&1; then
        ok 'native: kvchunk up to date' make -s -C "$KV_TOP" CROSS_COMPILE= build/bin/kvchunk
    fi
fi
if [ -x "$native" ]; then
    run_case native build "$native" ""
else
    skip_point 'native: kvchunk-reliability.sh in the 0700 clone' 'no native build'
fi

# aarch64 under qemu: this build's program when it is one, else the
# checkout's cross build, made or brought up to date here, where the cross
# tools and the build-local sysroot are installed (never a stale binary)
X=build/aarch64-linux-gnu
arm=
if [ -n "${KV_RUNNER:-}" ]; then
    arm=${KV_UNIT:+$(dirname "$KV_UNIT")/bin/kvchunk}
    runner=$KV_RUNNER
elif command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 &&
    command -v qemu-aarch64 >/dev/null 2>&1 &&
    [ -f "$KV_TOP/$X/sysroot/usr/lib/aarch64-linux-gnu/libargtable2.a" ]; then
    runner="qemu-aarch64 -cpu max"
    ok 'aarch64: kvchunk up to date' \
        make -s -C "$KV_TOP" CROSS_COMPILE=aarch64-linux-gnu- "$X/bin/kvchunk"
    arm=$KV_TOP/$X/bin/kvchunk
fi
if [ -n "$arm" ] && [ -f "$arm" ]; then
    run_case aarch64 "$X" "$arm" "$runner"
else
    skip_point 'aarch64: kvchunk-reliability.sh in the 0700 clone' \
        'no cross tools (sh scripts/setup --arm64)'
fi
done_testing
