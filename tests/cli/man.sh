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

# Rendering slips: a single quote opened inside another ('Ql a No or Ql b'
# on one macro line, which groff renders as nested quotes), or columns
# narrower than their cells (groff runs the cells together).
o=$(printf '\001'); c=$(printf '\002')
for m in "$KV_TOP"/man/*.[157]; do
    page=$(basename "$m")
    n=$(grep -c -E '^\.[A-Z][a-z] .*Ql [^ ]*( [,.;:])? No ' "$m")
    expect_eq "$page: no Ql ... No on one macro line" "$n" 0
    for r in mandoc groff; do
        case $r in
        mandoc) command -v mandoc >/dev/null 2>&1 || continue
                mandoc -Tutf8 "$m" 2>/dev/null >"$T/render.txt" ;;
        groff)  command -v groff >/dev/null 2>&1 || continue
                groff -mdoc -Tutf8 -rLL=80n "$m" 2>/dev/null >"$T/render.txt" ;;
        esac
        # the quotes as one byte each (awk may count bytes or characters)
        nested=$(col -b <"$T/render.txt" | sed "s/‘/$o/g; s/’/$c/g" |
            awk -v o="$o" -v c="$c" '{ for (i = 1; i <= length($0); i++) {
                x = substr($0, i, 1)
                if (x == o) { if (d) { print NR; exit } d = 1 }
                else if (x == c) d = 0 } }')
        expect_eq "$page ($r): no quote opened inside another" "$nested" ""
    done
done
for w in i64signed payload_lenthe; do
    if command -v groff >/dev/null 2>&1; then
        n=$(cat "$KV_TOP"/man/*.[157] | groff -mdoc -Tutf8 -rLL=80n 2>/dev/null | grep -c "$w")
        expect_eq "groff: no column run together ($w)" "$n" 0
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
