#!/bin/sh
# tests/run.sh - run every unit test binary and tests/cli/*.sh (or the files
# named) and end with the sum, one line: 'N passed, N failed'.
#
# Each file's whole output (its TAP, its own closing line, anything on its
# stderr) goes to the log, $KV_LOG; the terminal gets one line per file
# (PASS or FAIL, its counts), then every failure again (the 'not ok' lines
# with their diagnostics, or the end of the output of a file that crashed)
# with the command that reruns that file, then the sum.  KV_VERBOSE=1
# (make check V=1) prints every file's whole output instead, as it comes.
# KV_AGAIN is the command that reruns the tests (make check and its
# variables); a failure's line adds TESTS=... to it.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export KV_TOP KV_BIN
verbose=${KV_VERBOSE:-0}
again=${KV_AGAIN:-make check}
log=${KV_LOG:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvrun.XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -n "$log" ] || log=$KV_TOP/build/check.log
mkdir -p "$(dirname "$log")"
: >"$log"
out=$work/out           # one file's output
failures=$work/failures # what the end repeats
: >"$failures"
pass=0; fail=0

# shown NAME: a path as the user would type it (relative to the top)
shown() {
    case $1 in "$KV_TOP"/*) printf '%s\n' "${1#"$KV_TOP"/}" ;; *) printf '%s\n' "$1" ;; esac
}

run_one() {   # name rerun-command cmd...
    name=$1; cmd_again=$2; shift 2
    s=$(date +%s)
    "$@" >"$out" 2>&1; st=$?
    { echo "# $name"; cat "$out"; echo "# $name: exit $st, $(( $(date +%s) - s )) s"; } >>"$log"
    [ "$verbose" = 1 ] && { echo "# $name"; cat "$out"; }
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
    if [ -z "$line" ]; then
        p=0; f=1; why="exit $st, no closing line"
    else
        p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}; why=
        if [ "$st" != 0 ] && [ "$f" = 0 ]; then f=1; why="exit $st"; fi
    fi
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$f" = 0 ]; then
        [ "$verbose" = 1 ] || echo "PASS  $name ($p ok)"
        return
    fi
    [ "$verbose" = 1 ] || echo "FAIL  $name ($p ok, $f not ok)"
    {
        echo "FAIL  $name${why:+: $why}"
        # each 'not ok' with the diagnostic lines after it (at most 40 lines)
        awk '/^not ok/ { p = 1; print "  " $0; next }
             p && /^#/ { print "  " $0; next } { p = 0 }' "$out" >"$work/nok"
        if [ -s "$work/nok" ]; then
            head -n 40 "$work/nok"
            [ "$(wc -l <"$work/nok")" -le 40 ] || echo "  ... (the rest is in the log)"
        else
            tail -n 15 "$out" | sed 's/^/  | /'
        fi
        echo "  again: $cmd_again"
    } >>"$failures"
}
if [ $# -gt 0 ]; then
    set -- "$@"
else
    set -- "${KV_UNIT:-}"/* "$KV_TOP"/tests/cli/*.sh
fi
# The numeric suites also run at every lower vector level this CPU has
# (KVTOOLS_ISA, see lib/core/isa.h), unless KVTOOLS_ISA is set already.
numeric='attn attn_bf16 attn_cmp half rope chunk_e2e xattn xattn_recall xattn_threshold
xattn_vectors kvattn.sh kvxattn.sh kvxattn_recall.sh kvchunk.sh
mla mla_latent mla.sh mla-chunk.sh blas openblas.sh
attn_variants kvattn-variants.sh mla_sparse kvattn-sparse-mla.sh kvattn-fp8.sh mla-fp8.sh mla-ds-fp8.sh
kvattn-local.sh attn_fused attn_fp8_decode attn_fused_bf16 mla_dec'
levels=
if [ -z "${KVTOOLS_ISA:-}" ] && [ -x "${KV_UNIT:-}/isa" ]; then
    levels=$(${KV_RUNNER:-} "$KV_UNIT/isa" --levels | sed '$d')
fi
isa=${KVTOOLS_ISA:+KVTOOLS_ISA=$KVTOOLS_ISA }
for t in "$@"; do
    b=$(basename "$t" .sh); b2=$(basename "$t")
    rerun="$again TESTS=$(shown "$t")"
    case $t in
    *.sh) [ -f "$t" ] && run_one "$b2" "$isa$rerun" sh "$t" ;;
    *)    [ -f "$t" ] && [ -x "$t" ] && run_one "$b2" "$isa$rerun" ${KV_RUNNER:-} "$t" ;;
    esac
    case " $(echo $numeric) " in *" $b "*|*" $b2 "*) ;; *) continue ;; esac
    for lv in $levels; do
        case $t in
        *.sh) KVTOOLS_ISA=$lv run_one "$b2 (KVTOOLS_ISA=$lv)" "KVTOOLS_ISA=$lv $rerun" sh "$t" ;;
        *)    KVTOOLS_ISA=$lv run_one "$b2 (KVTOOLS_ISA=$lv)" "KVTOOLS_ISA=$lv $rerun" ${KV_RUNNER:-} "$t" ;;
        esac
    done
done
if [ -s "$failures" ]; then
    echo
    echo "failures (every file's whole output: $(shown "$log")):"
    cat "$failures"
elif [ "$verbose" != 1 ]; then
    echo "the whole output: $(shown "$log")"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
