#!/bin/sh
# bench/run.sh - run bench/*.sh (or the ones named in $BENCH / arguments)
# side by side with their peers.  Installs the peers' Python dependencies
# (Debian's python3-numpy, python3-torch) when root and missing.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export KV_TOP KV_BIN PATH="$KV_BIN:$PATH"
PY=python3
# Debian's torch is built for Debian's python; prefer it when there are two.
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
if ! "$PY" -c 'import numpy, torch' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bench: installing python3-numpy python3-torch"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive \
          apt-get install -y -qq python3-numpy python3-torch >/dev/null
    fi
fi
export PY
if [ $# -gt 0 ]; then set -- "$@"; else set -- "$KV_TOP"/bench/bench-*.sh; fi
st=0
for b in "$@"; do
    [ -f "$b" ] || continue
    echo "== $(basename "$b" .sh)"
    sh "$b" || st=1
done
exit $st
