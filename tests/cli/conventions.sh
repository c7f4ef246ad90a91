#!/bin/sh
# conventions.sh - what every program promises (DESIGN.md): --help on
# stdout with exit 0, --version, unknown options rejected with exit 2 and a
# 'Try ... --help' hint, nothing on stdout on error.
. "$KV_TOP/tests/lib.sh"

for p in kvmask kvslot kvattn kvxattn kvchunk; do
    [ -x "$KV_BIN/$p" ] || continue
    expect_out "$p --version" "$p (kvtools) $(sed -n 's/^#define KV_VERSION "\(.*\)"/\1/p' "$KV_TOP/lib/kv.h")" "$p" --version
    ok "$p --help exits 0" "$p" --help
    if [ -s "$T/.out" ]; then _report 0 "$p --help prints on stdout"
    else _report 1 "$p --help prints on stdout"; fi
    expect_fail 2 "$p --no-such-option" "$p" --no-such-option
    if grep -q "Try '$p" "$T/.err"; then _report 0 "$p usage error hints at --help"
    else _report 1 "$p usage error hints at --help" "$(cat "$T/.err")"; fi
    if grep -q "^$p" "$T/.err"; then _report 0 "$p messages start with the program name"
    else _report 1 "$p messages start with the program name" "$(cat "$T/.err")"; fi
done
done_testing
