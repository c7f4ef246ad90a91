#!/bin/sh
# docs/kvmask-pictures.sh - redraw the kvmask pictures of the README from
# `kvmask -f pgm` (needs netpbm: pnmpad, pnmcat, pnmtopng; run by hand
# after `make`, then commit the PNG files).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
K="$top/build/bin/kvmask"
d=$(mktemp -d "${TMPDIR:-/tmp}/kvpics.XXXXXX")
trap 'rm -rf "$d"' EXIT
frame() {   # pgm in, framed pgm out: 2 px black edge, 10 px white margin
    pnmpad -black -left 2 -right 2 -top 2 -bottom 2 "$1" |
        pnmpad -white -left 10 -right 10 -top 10 -bottom 10
}
n=0
for args in "causal -n 24" "window -w 6 -n 24" "band --pre 3 --next 2 -n 24" \
            "prefix -p 8 -n 24" "varlen --q-lens 4,6,8,6" \
            "chunk --sys 4 --chunks 5,6,5 --question 4"; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    "$K" $args -f pgm --cell 6 -o "$d/m$n.pgm"
    frame "$d/m$n.pgm" >"$d/f$n.pgm"
done
pnmcat -lr "$d"/f1.pgm "$d"/f2.pgm "$d"/f3.pgm "$d"/f4.pgm "$d"/f5.pgm \
    "$d"/f6.pgm | pnmtopng >"$top/docs/kvmask-gallery.png"
"$K" chunk --sys 6 --chunks 8,10,7 --question 5 -f pgm --cell 8 -o "$d/rag.pgm"
frame "$d/rag.pgm" | pnmtopng >"$top/docs/kvmask-rag.png"
"$K" causal -q 16 -k 40 -f pgm --cell 8 -o "$d/q.pgm"
frame "$d/q.pgm" | pnmtopng >"$top/docs/kvmask-chunked-prefill.png"
