#!/bin/sh
# kvxattn_orig.sh - the extra conformance vectors of the original estimator
# (tests/vectors/xattn/orig): with --compat-chunk-size every mask equals the
# original's and the block sums agree within 1e-5; the clean default gives
# the same masks exactly where no artifact of the original applies.
. "$KV_TOP/tests/lib.sh"
O="$VEC/xattn/orig"
cd "$O" || exit 1

differs() {   # title A B: kvattn cmp says "not equal" (exit 1)
    kvattn cmp "$2" "$3" --atol 0 --rtol 0 --quiet >/dev/null 2>&1
    _st=$?
    if [ "$_st" = 1 ]; then _report 0 "$1"; else _report 1 "$1" "kvattn cmp exit $_st"; fi
}
while read -r name q k opts; do
    ok "$name compat: estimate" kvxattn estimate -q "$q" -k "$k" $opts -o "$T/m.npy" --sums "$T/s.npy"
    ok "$name compat: mask equals the original's" kvattn cmp "$T/m.npy" "${name}_mask.npy" --atol 0 --rtol 0 --quiet
    ok "$name compat: sums within 1e-5" kvattn cmp "$T/s.npy" "${name}_sums.npy" --atol 1e-5 --rtol 0 --quiet
    clean=$(printf '%s\n' "$opts" | sed 's/--compat-chunk-size [0-9]*//')
    ok "$name clean: estimate" kvxattn estimate -q "$q" -k "$k" $clean -o "$T/c.npy"
    case $name in
    o05|o06|o07|o09|o11)
        differs "$name clean: differs (an artifact applies)" "$T/c.npy" "${name}_mask.npy" ;;
    *)
        ok "$name clean: same mask as the original" kvattn cmp "$T/c.npy" "${name}_mask.npy" --atol 0 --rtol 0 --quiet ;;
    esac
done < cases.txt
done_testing
