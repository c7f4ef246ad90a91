#!/bin/sh
# scripts/crosscheck/run.sh [PART...] - run kvtools against the upstream
# releases' own code (make crosscheck).  Each part is scripts/crosscheck/
# PART.sh: it makes the virtual environment it needs (scripts/pyenv), runs
# its cases and ends with a line 'N passed, M failed'.  This script runs the
# parts named (default: all), prints each one's time, and ends with the sums.
# It needs the network the first time (the Python package index); it is not
# part of 'make check'.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export KV_TOP KV_BIN PATH="$KV_BIN:$PATH"
here=$KV_TOP/scripts/crosscheck
if [ $# -eq 0 ]; then
    set --
    for f in "$here"/*.sh; do
        b=$(basename "$f" .sh); [ "$b" = run ] || set -- "$@" "$b"
    done
fi
P=0; F=0; st=0
for part in "$@"; do
    f=$here/$part.sh
    [ -f "$f" ] || { echo "crosscheck: no part $part" >&2; st=1; continue; }
    echo "== crosscheck $part"
    s=$(date +%s)
    out=$(mktemp); sh "$f" 2>&1 | tee "$out"; rc=$?
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    rm -f "$out"
    if [ -z "$last" ]; then
        echo "crosscheck: $part printed no 'N passed, M failed' line"; F=$((F + 1)); st=1
    else
        p=${last%% passed*}; f2=${last#*, }; f2=${f2%% failed*}
        P=$((P + p)); F=$((F + f2))
        [ "$f2" = 0 ] || st=1
    fi
    echo "== crosscheck $part: $(( $(date +%s) - s )) s"
done
echo "$P passed, $F failed"
exit $st
