#!/bin/sh
# tests/cli/python.sh - the kvtools Python package (python/): built in
# place by make check (make python) against Debian's python3, cffi and
# numpy, no network; pytest over python/tests (every case against the
# programs in KV_BIN) and the example examples/pytest-golden, each test
# one TAP line.  KVTOOLS_CASES sets the random cases per function
# (default 1000, for every function).  Skipped under emulation.
. "$KV_TOP/tests/lib.sh"

# Under emulation (make check CROSS_COMPILE=...) the programs are another
# architecture's, whose floating-point routes may differ from this
# machine's Python module: the comparison is for native builds.
if [ -n "${KV_RUNNER:-}" ]; then
    _n=$((_n + 1)); _pass=$((_pass + 1))
    echo "ok $_n - the Python package # SKIP the programs run under emulation"
    done_testing
    exit 0
fi

PY=${PYTHON:-}
for p in $PY /usr/bin/python3 python3; do
    if "$p" -c 'import cffi, numpy, pytest' 2>/dev/null; then PY=$p; break; fi
    PY=
done
if [ -z "$PY" ]; then
    _report 1 'python3 with cffi, numpy and pytest' \
        'none found: sh scripts/setup installs python3-cffi python3-numpy python3-pytest'
    done_testing
    exit 1
fi
PYTHONPATH="$KV_TOP/python"
export PYTHONPATH
if ! "$PY" -c 'import kvtools' 2>"$T/imp"; then
    # not built by make check (a run of this file alone): build it here
    (cd "$KV_TOP/python" && "$PY" setup.py -q build_ext --inplace \
        --build-temp "$T/build") >"$T/build.log" 2>&1
fi
ok 'import kvtools (built in place)' "$PY" -c 'import kvtools, kvtools.testing'

# the plugin by name, unless its entry point is already visible (an
# installed kvtools, or pip's egg-info left in python/)
PLUGIN=$("$PY" -c '
from importlib.metadata import entry_points
try:
    eps = entry_points(group="pytest11")
except TypeError:
    eps = entry_points().get("pytest11", [])
print("" if any(e.value == "kvtools.testing" for e in eps) else "-p kvtools.testing")')

# pytest -v lines "file::test[param] PASSED" become TAP lines
pytest_tap() {   # label dir args...
    _label=$1; _dir=$2; shift 2
    (cd "$_dir" && "$PY" -m pytest -v -p no:cacheprovider $PLUGIN \
        --tb=short "$@") >"$T/pytest.log" 2>&1
    _st=$?
    grep -E ' (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)' "$T/pytest.log" |
        grep '::' >"$T/lines" || true
    while IFS= read -r line; do
        name=${line%% *}
        case $line in
        *' PASSED'*|*' XFAIL'*|*' SKIPPED'*) _report 0 "$_label ${name##*/}" ;;
        *) _report 1 "$_label ${name##*/}" "$(grep -A 30 "^_* .*${name##*::}" "$T/pytest.log" | head -40)" ;;
        esac
    done <"$T/lines"
    if [ ! -s "$T/lines" ] || { [ "$_st" != 0 ] && ! grep -q FAILED "$T/lines"; }; then
        _report 1 "$_label: pytest ran" "exit $_st: $(tail -20 "$T/pytest.log")"
    fi
}

KV_BIN=$KV_BIN KVTOOLS_CASES=${KVTOOLS_CASES:-1000} pytest_tap python "$KV_TOP/python/tests"
if [ -d "$KV_TOP/examples/pytest-golden" ]; then
    pytest_tap pytest-golden "$KV_TOP/examples/pytest-golden"
fi
done_testing
