#!/bin/sh
# scripts/crosscheck/run.sh [PART...] - run kvtools against the upstream
# releases' own code (make crosscheck).  Each part is scripts/crosscheck/
# PART.sh: it takes the virtual environment every part shares
# (scripts/pyenv crosscheck, build/pyenv/crosscheck), runs its cases and
# ends with a line 'N passed, M failed'.  This script makes that
# environment first if it is missing or out of date (the Python package
# index, the first time: see the README for its size and time), runs the
# parts named (default: all), prints each one's time, and ends with the
# sums.  It is not part of 'make check'.
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
s=$(date +%s)
if sh "$KV_TOP/scripts/pyenv" crosscheck >/dev/null; then
    echo "== crosscheck: environment build/pyenv/crosscheck ready ($(( $(date +%s) - s )) s)"
else
    echo "crosscheck: cannot make build/pyenv/crosscheck (no package index?): the parts will fail"
fi
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
