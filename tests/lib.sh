# tests/lib.sh - the TAP helpers every tests/cli/*.sh sources.
#
#   . "$KV_TOP/tests/lib.sh"
#   ok 'title' cmd args...              passes when cmd exits 0
#   expect_fail N 'title' cmd args...   exit status exactly N, no signal
#                                       death, stdout empty
#   expect_eq 'title' "$got" "$want"    string equality
#   expect_out 'title' 'expected stdout' cmd args...
#   expect_file_eq 'title' got want     byte equality of two files
#   golden 'title' name cmd args...     stdout compared with tests/golden/name
#                                       (make golden rewrites it)
#   done_testing                        prints the plan and 'N passed, N failed'
#   need_numpy                          PY = a python3 with numpy, or fail
#
# Never pipe the program under test: run it through these helpers (a pipe
# hides its exit status).  $T is a fresh temporary directory, removed at exit.
set -u
: "${KV_BIN:?KV_BIN not set (run through make check)}"
: "${KV_TOP:?KV_TOP not set}"
PATH="$KV_BIN:$PATH"
export PATH
VEC="$KV_TOP/tests/vectors"
GOLD="$KV_TOP/tests/golden"
T=$(mktemp -d "${TMPDIR:-/tmp}/kvtest.XXXXXX")
trap 'rm -rf "$T"' EXIT
_n=0
_pass=0
_fail=0
_nl='
'

_report() {   # status title [diag]
    _n=$((_n + 1))
    # a TAP line is one line: a title's newlines are written as \n
    case $2 in
    *"$_nl"*) _title=$(printf '%s\n' "$2" | awk 'NR > 1 { printf "\\n" } { printf "%s", $0 }') ;;
    *) _title=$2 ;;
    esac
    if [ "$1" = 0 ]; then
        _pass=$((_pass + 1)); printf 'ok %s - %s\n' "$_n" "$_title"
    else
        _fail=$((_fail + 1)); printf 'not ok %s - %s\n' "$_n" "$_title"
        [ -n "${3:-}" ] && printf '%s\n' "$3" | sed 's/^/# /'
    fi
    return 0
}

ok() {
    _t=$1; shift
    if "$@" >"$T/.out" 2>"$T/.err"; then _report 0 "$_t"
    else _report 1 "$_t" "exit $?: $(head -c 600 "$T/.err")"; fi
}

expect_fail() {
    _want=$1; _t=$2; shift 2
    "$@" >"$T/.out" 2>"$T/.err"; _st=$?
    if [ "$_st" -gt 128 ]; then
        _report 1 "$_t" "died with signal $((_st - 128)): $(head -c 600 "$T/.err")"
    elif [ "$_st" != "$_want" ]; then
        _report 1 "$_t" "exit $_st, expected $_want: $(head -c 600 "$T/.err")"
    elif [ -s "$T/.out" ]; then
        _report 1 "$_t" "stdout not empty: $(head -c 200 "$T/.out")"
    elif [ ! -s "$T/.err" ]; then
        _report 1 "$_t" "no message on stderr"
    else
        _report 0 "$_t"
    fi
}

expect_eq() {
    if [ "$2" = "$3" ]; then _report 0 "$1"
    else _report 1 "$1" "got:
$2
expected:
$3"; fi
}

expect_out() {
    _t=$1; _want=$2; shift 2
    if "$@" >"$T/.out" 2>"$T/.err"; then
        expect_eq "$_t" "$(cat "$T/.out")" "$_want"
    else
        _report 1 "$_t" "exit $?: $(head -c 600 "$T/.err")"
    fi
}

expect_file_eq() {
    if cmp -s "$2" "$3"; then _report 0 "$1"
    else _report 1 "$1" "$2 and $3 differ"; fi
}

golden() {
    _t=$1; _name=$2; shift 2
    if ! "$@" >"$T/.out" 2>"$T/.err"; then
        _report 1 "$_t" "exit $?: $(head -c 600 "$T/.err")"; return 0
    fi
    if [ "${KV_GOLDEN_UPDATE:-0}" = 1 ]; then
        mkdir -p "$(dirname "$GOLD/$_name")"; cp "$T/.out" "$GOLD/$_name"
    fi
    if [ ! -f "$GOLD/$_name" ]; then _report 1 "$_t" "no golden file $_name"
    elif cmp -s "$T/.out" "$GOLD/$_name"; then _report 0 "$_t"
    else _report 1 "$_t" "$(diff "$GOLD/$_name" "$T/.out" | head -20)"; fi
}

# need_numpy: PY becomes a python3 with numpy, Debian's first (the float64
# references' interpreter; sh scripts/setup installs python3-numpy), or
# the file fails here.
need_numpy() {
    PY=
    for _p in /usr/bin/python3 python3; do
        if "$_p" -c 'import numpy' 2>/dev/null; then PY=$_p; return 0; fi
    done
    _report 1 'python3 with numpy (sh scripts/setup installs python3-numpy)'
    done_testing
    exit 1
}

done_testing() {
    echo "1..$_n"
    echo "$_pass passed, $_fail failed"
    [ "$_fail" = 0 ]
}
