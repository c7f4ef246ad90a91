#!/bin/sh
# tests/cli/libkv.sh - libkv(3): the page lints, and the C program of its
# EXAMPLES builds against the library of this build and prints what the
# page says it prints.
. "$KV_TOP/tests/lib.sh"

page="$KV_TOP/man/libkv.3"
if command -v mandoc >/dev/null 2>&1; then
    ok 'mandoc -Tlint libkv.3' mandoc -Tlint -W warning "$page"
fi
# the literal display of EXAMPLES, mdoc escapes undone
awk '/^\.Sh / { inex = ($2 == "EXAMPLES"); next }
     inex && /^\.Bd -literal/ { on = 1; next }
     on && /^\.Ed/ { exit }
     on { gsub(/\\e/, "\\"); print }' "$page" >"$T/example.c"
want=$(sed -n 's/^\.Ql \(kept .*\) :$/\1/p' "$page")
lib=${KV_UNIT:+$(dirname "$KV_UNIT")/libkv.a}
if [ -n "$lib" ] && [ -f "$lib" ] && [ -s "$T/example.c" ]; then
    # the build's own compiler, flags (a sanitizer's too) and libraries
    # (the cross build's argtable2 from its sysroot), as make check passes them
    # shellcheck disable=SC2086
    ok 'the EXAMPLES program builds against libkv.a' \
        ${KV_CC:-cc} ${KV_LINK:--std=c11 -pthread} -D_GNU_SOURCE -I"$KV_TOP/lib" \
        -o "$T/example" "$T/example.c" \
        ${KV_LDLIBS:-"$lib" -lxxhash -lnettle -largtable2 -lsqlite3 -lhiredis -ljansson -ldl -lm -pthread}
    expect_out 'it prints what the page says' "$want" ${KV_RUNNER:-} "$T/example"
else
    _report 1 'libkv.a and the EXAMPLES program' "lib '$lib', example $(wc -c <"$T/example.c") bytes"
fi
done_testing
