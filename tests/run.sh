#!/bin/sh
# tests/run.sh - run every unit test binary and tests/cli/*.sh (or the files
# named), echo their TAP, and end with the sum: 'N passed, N failed'.
: "${KV_TOP:?}"; : "${KV_BIN:?}"
export KV_TOP KV_BIN
pass=0; fail=0
log=$(mktemp "${TMPDIR:-/tmp}/kvrun.XXXXXX")
trap 'rm -f "$log"' EXIT
run_one() {   # name cmd...
    name=$1; shift
    echo "# $name"
    "$@" >"$log" 2>&1; st=$?
    cat "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "not ok - $name: exit $st, no summary line"
        fail=$((fail + 1)); return
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$st" != 0 ] && [ "$f" = 0 ]; then
        echo "not ok - $name: exit $st"; fail=$((fail + 1))
    fi
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
attn_variants kvattn-variants.sh'
levels=
if [ -z "${KVTOOLS_ISA:-}" ] && [ -x "${KV_UNIT:-}/isa" ]; then
    levels=$(${KV_RUNNER:-} "$KV_UNIT/isa" --levels | sed '$d')
fi
for t in "$@"; do
    case $t in
    *.sh) [ -f "$t" ] && run_one "$(basename "$t")" sh "$t" ;;
    *)    [ -f "$t" ] && [ -x "$t" ] && run_one "$(basename "$t")" ${KV_RUNNER:-} "$t" ;;
    esac
    b=$(basename "$t" .sh); b2=$(basename "$t")
    case " $(echo $numeric) " in *" $b "*|*" $b2 "*) ;; *) continue ;; esac
    for lv in $levels; do
        case $t in
        *.sh) KVTOOLS_ISA=$lv run_one "$b2 (KVTOOLS_ISA=$lv)" sh "$t" ;;
        *)    KVTOOLS_ISA=$lv run_one "$b2 (KVTOOLS_ISA=$lv)" ${KV_RUNNER:-} "$t" ;;
        esac
    done
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
