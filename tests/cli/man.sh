#!/bin/sh
# man.sh - every man page passes mandoc -Tlint, and every .Dl line in the
# EXAMPLES section of a section-1 page runs and exits 0 (in order, in one
# fresh directory per page).  A '.\" no-run' line before a .Dl skips it.
. "$KV_TOP/tests/lib.sh"

for m in "$KV_TOP"/man/*.[157]; do
    [ -f "$m" ] || continue
    if command -v mandoc >/dev/null 2>&1; then
        ok "mandoc -Tlint $(basename "$m")" mandoc -Tlint -W warning "$m"
    fi
done

# Extract the runnable example commands of one page, one per line.
examples() {
    awk '
    /^\.Sh / { inex = ($2 == "EXAMPLES"); next }
    !inex { next }
    /^\.\\" no-run/ { skip = 1; next }
    /^\.Dl / {
        if (skip) { skip = 0; next }
        line = substr($0, 5)
        gsub(/\\-/, "-", line); gsub(/\\\(aq/, "\047", line)
        gsub(/\\\(dq/, "\"", line); gsub(/\\&/, "", line)
        gsub(/\\e/, "\\", line)
        print line
        next
    }
    { skip = 0 }' "$1"
}

for m in "$KV_TOP"/man/*.1; do
    [ -f "$m" ] || continue
    page=$(basename "$m")
    prog=${page%.1}
    [ -x "$KV_BIN/$prog" ] || continue
    dir="$T/$page"
    mkdir -p "$dir"
    examples "$m" >"$T/$page.cmds"
    while IFS= read -r cmd; do
        ok "$page example: $cmd" sh -c "cd '$dir' && $cmd >/dev/null"
    done <"$T/$page.cmds"
done
done_testing
