#!/bin/sh
# openblas.sh - kvattn and kvxattn load OpenBLAS only for the computations
# that multiply with its sgemm (KVTOOLS_OPENBLAS in their ENVIRONMENT):
# naming a library that does not exist fails exactly those (exit 1, a
# message naming the library, nothing written) and leaves every other
# computation as it was, bit for bit.
. "$KV_TOP/tests/lib.sh"
BAD=/nonexistent/libopenblas.so.0
C2="$KV_TOP/tests/configs/deepseek-v2-lite.json"

said() {    # title: the last stderr names the library and the loader's reason
    case $(cat "$T/.err") in
    *"cannot load OpenBLAS: $BAD: "*) _report 0 "$1" ;;
    *) _report 1 "$1" "$(cat "$T/.err")" ;;
    esac
}
absent() {  # title files...: none of them exists
    _t=$1; shift
    for f in "$@"; do
        if [ -e "$f" ]; then _report 1 "$_t" "$f exists"; return; fi
    done
    _report 0 "$_t"
}
no_blas() { KVTOOLS_OPENBLAS=$BAD "$@"; }

ok 'gen f32 (no OpenBLAS)' no_blas kvattn gen --shape 1,4,256,64 --seed 3 \
    -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy"
ok 'gen bf16 (no OpenBLAS)' no_blas kvattn gen --shape 1,4,256,64 --seed 3 --dtype bf16 \
    -q "$T/q16.npy" -k "$T/k16.npy" -v "$T/v16.npy"
QKV="-q $T/q.npy -k $T/k.npy -v $T/v.npy"
QKV16="-q $T/q16.npy -k $T/k16.npy -v $T/v16.npy"

# --- kvattn run: the f32 BLAS tiles need sgemm; the fused kernels (where
# the CPU has a vector level and KVTOOLS_ISA allows one) and the scalar
# loops do not.  Tiles of 16 rows are too few for the fused kernels.
fused=no
if [ "${KVTOOLS_ISA:-native}" != generic ] &&
   [ "$(${KV_RUNNER:-} "$KV_UNIT/isa" --levels | wc -l)" -gt 1 ]; then
    fused=yes
fi
if [ $fused = yes ]; then
    ok 'run f32 on the fused kernels without OpenBLAS' no_blas kvattn run $QKV --causal \
        -o "$T/of.npy" --lse "$T/lf.npy"
    ok 'run f32' kvattn run $QKV --causal -o "$T/of2.npy" --lse "$T/lf2.npy"
    expect_file_eq 'run f32 on the fused kernels: the same bits either way' "$T/of.npy" \
        "$T/of2.npy"
fi
expect_fail 1 'run f32 on the BLAS tiles: exit 1 without OpenBLAS' no_blas kvattn run $QKV \
    --causal --tile-q 16 -o "$T/o.npy" --lse "$T/l.npy"
said 'run f32: the message names the library and the reason'
absent 'run f32: neither output written' "$T/o.npy" "$T/l.npy"
ok 'run f32 --scalar without OpenBLAS' no_blas kvattn run $QKV --causal --scalar \
    -o "$T/os.npy" --lse "$T/ls.npy"
ok 'run f32 --scalar' kvattn run $QKV --causal --scalar -o "$T/os2.npy"
expect_file_eq 'run --scalar: the same bits either way' "$T/os.npy" "$T/os2.npy"

# bf16 Q, K, V: the bf16 tiles (when the CPU has them) need no sgemm, but
# P kept f32 (--no-p-round) is multiplied by V with it
ok 'run bf16' kvattn run $QKV16 --causal --verbose -o "$T/o16.npy"
tiles16=yes     # does this CPU (at this KVTOOLS_ISA) have a bf16 route?
grep -q 'bf16 tiles: none' "$T/.err" && tiles16=no
if [ $tiles16 = no ] && [ $fused = yes ]; then
    ok 'run bf16, no bf16 tiles: the fused kernels without OpenBLAS' no_blas kvattn run \
        $QKV16 --causal -o "$T/o16b.npy"
    expect_file_eq 'run bf16 on the fused kernels: the same bits either way' "$T/o16b.npy" \
        "$T/o16.npy"
elif [ $tiles16 = no ]; then
    expect_fail 1 'run bf16, no bf16 tiles on this CPU: exit 1 without OpenBLAS' \
        no_blas kvattn run $QKV16 --causal -o "$T/o16b.npy"
    said 'run bf16, no bf16 tiles: the message'
else
    ok 'run bf16 on the bf16 tiles without OpenBLAS' no_blas kvattn run $QKV16 --causal \
        -o "$T/o16b.npy"
    expect_file_eq 'run bf16: the same bits either way' "$T/o16b.npy" "$T/o16.npy"
    expect_fail 1 'run bf16 --no-p-round: exit 1 without OpenBLAS' \
        no_blas kvattn run $QKV16 --causal --no-p-round -o "$T/o16c.npy"
    said 'run bf16 --no-p-round: the message'
fi
absent 'run bf16: nothing written on failure' "$T/o16c.npy"

# decode: a query or two per request against many keys runs on the decode
# kernels where the CPU has them (no sgemm), else on the f32 tiles
ok 'gen decode' kvattn gen --shape 1,4,1,64 --kv-len 256 --seed 5 \
    -q "$T/dq.npy" -k "$T/dk.npy" -v "$T/dv.npy"
DQKV="-q $T/dq.npy -k $T/dk.npy -v $T/dv.npy"
ok 'run decode' kvattn run $DQKV --causal --verbose -o "$T/do.npy"
if grep -q 'decode kernels' "$T/.err"; then
    ok 'run decode on the decode kernels without OpenBLAS' no_blas kvattn run $DQKV \
        --causal -o "$T/do2.npy"
    expect_file_eq 'run decode: the same bits either way' "$T/do2.npy" "$T/do.npy"
else
    expect_fail 1 'run decode, no decode kernels here: exit 1 without OpenBLAS' \
        no_blas kvattn run $DQKV --causal -o "$T/do2.npy"
    said 'run decode, no decode kernels: the message'
    absent 'run decode: nothing written on failure' "$T/do2.npy"
fi

# --- the other subcommands never load it
ok 'merge without OpenBLAS' no_blas kvattn merge "$T/os.npy" "$T/ls.npy" "$T/os.npy" \
    "$T/ls.npy" -o "$T/m.npy"
ok 'merge of a part with itself is the part' kvattn cmp "$T/m.npy" "$T/os.npy" \
    --atol 1e-6 --rtol 0 --quiet
ok 'cmp without OpenBLAS' no_blas kvattn cmp "$T/os.npy" "$T/os2.npy" --atol 0 --rtol 0
ok 'bound without OpenBLAS' no_blas kvattn bound $QKV
ok 'gen --model-config (MLA) without OpenBLAS' no_blas kvattn gen --model-config "$C2" \
    --shape 2,1 --kv-len 70 --dtype f32 --seed 7 --dir "$T/d"

# --- kvattn mla: both forms multiply with sgemm
D="$T/d"
expect_fail 1 'mla absorbed: exit 1 without OpenBLAS' no_blas kvattn mla \
    -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" \
    --seq-lens 70,70 --causal --model-config "$C2" -o "$T/abs.npy"
said 'mla absorbed: the message'
expect_fail 1 'mla naive: exit 1 without OpenBLAS' no_blas kvattn mla -q "$D/q.npy" \
    --c-kv "$D/c_kv.npy" --k-pe "$D/k_pe.npy" --w-uk "$D/w_uk.npy" --w-uv "$D/w_uv.npy" \
    --q-lens 1,1 --kv-lens 70,70 --causal --model-config "$C2" -o "$T/naive.npy"
said 'mla naive: the message'
absent 'mla: nothing written' "$T/abs.npy" "$T/naive.npy"
# bf16 Q and latent cache: the absorbed form on the bf16 tiles needs no
# sgemm where the CPU has them (tiles16, as for run above)
ok 'gen: MLA inputs in bf16' kvattn gen --model-config "$C2" --shape 2,1 --kv-len 70 \
    --dtype bf16 --seed 7 --dir "$T/d16"
if [ "$tiles16" = yes ]; then
    ok 'mla absorbed bf16 on the bf16 tiles without OpenBLAS' no_blas kvattn mla \
        -q "$T/d16/q_absorbed.npy" --kv-cache "$T/d16/kv_cache.npy" \
        --block-table "$T/d16/block_table.npy" --seq-lens 70,70 --causal --model-config "$C2" \
        -o "$T/abs16.npy"
else
    expect_fail 1 'mla absorbed bf16, no bf16 tiles on this CPU: exit 1 without OpenBLAS' \
        no_blas kvattn mla -q "$T/d16/q_absorbed.npy" --kv-cache "$T/d16/kv_cache.npy" \
        --block-table "$T/d16/block_table.npy" --seq-lens 70,70 --causal --model-config "$C2" \
        -o "$T/abs16.npy"
fi

# --- kvxattn: the f32 path's sgemm at the generic level (the vector
# levels, $fused above, run register tiles of their own); the bf16
# dot-product route needs none
G="env KVTOOLS_ISA=generic"
ok 'kvxattn --version without OpenBLAS' no_blas kvxattn --version
ok 'estimate f32' kvxattn estimate -q "$T/q.npy" -k "$T/k.npy" -o "$T/x.npy"
ok 'estimate f32, generic' $G kvxattn estimate -q "$T/q.npy" -k "$T/k.npy" -o "$T/xg.npy"
expect_fail 1 'estimate f32, generic: exit 1 without OpenBLAS' no_blas $G kvxattn estimate \
    -q "$T/q.npy" -k "$T/k.npy" -o "$T/xb.npy" --sums "$T/xs.npy"
said 'estimate f32: the message'
expect_fail 1 'recall f32, generic: exit 1 without OpenBLAS' no_blas $G kvxattn recall \
    -q "$T/q.npy" -k "$T/k.npy" --mask "$T/x.npy" -o "$T/r.txt"
said 'recall f32: the message'
absent 'estimate, recall: nothing written' "$T/xb.npy" "$T/xs.npy" "$T/r.txt"
if [ "$fused" = yes ]; then
    ok 'estimate f32 on the register tiles without OpenBLAS' no_blas kvxattn estimate \
        -q "$T/q.npy" -k "$T/k.npy" -o "$T/xv.npy"
    expect_file_eq 'estimate f32: the same mask either way' "$T/xv.npy" "$T/x.npy"
    ok 'recall f32 on the register tiles without OpenBLAS' no_blas kvxattn recall \
        -q "$T/q.npy" -k "$T/k.npy" --mask "$T/x.npy" -o "$T/rv.txt"
fi
ok 'estimate bf16' kvxattn estimate -q "$T/q16.npy" -k "$T/k16.npy" -o "$T/x16.npy"
if [ $tiles16 = no ] && [ "$fused" = yes ]; then
    ok 'estimate bf16, no bf16 route: widened onto the f32 register tiles without OpenBLAS' \
        no_blas kvxattn estimate -q "$T/q16.npy" -k "$T/k16.npy" -o "$T/x16b.npy"
    expect_file_eq 'estimate bf16: the same mask either way' "$T/x16b.npy" "$T/x16.npy"
elif [ $tiles16 = no ]; then
    expect_fail 1 'estimate bf16, no bf16 route on this CPU: exit 1 without OpenBLAS' \
        no_blas kvxattn estimate -q "$T/q16.npy" -k "$T/k16.npy" -o "$T/x16b.npy"
else
    ok 'estimate bf16 on the bf16 route without OpenBLAS' no_blas kvxattn estimate \
        -q "$T/q16.npy" -k "$T/k16.npy" -o "$T/x16b.npy"
    expect_file_eq 'estimate bf16: the same mask either way' "$T/x16b.npy" "$T/x16.npy"
fi

# --- the variable names the library; one without cblas_sgemm is refused
ok 'KVTOOLS_OPENBLAS=libopenblas.so.0 (the default, named)' $G \
    KVTOOLS_OPENBLAS=libopenblas.so.0 kvxattn estimate -q "$T/q.npy" -k "$T/k.npy" -o "$T/xn.npy"
expect_file_eq 'the same mask as by default' "$T/xn.npy" "$T/xg.npy"
expect_fail 1 'KVTOOLS_OPENBLAS=libm.so.6: exit 1' $G KVTOOLS_OPENBLAS=libm.so.6 \
    kvxattn estimate -q "$T/q.npy" -k "$T/k.npy" -o "$T/xm.npy"
case $(cat "$T/.err") in
*"'libm.so.6'"*cblas_sgemm*) _report 0 'libm.so.6: the message says it lacks cblas_sgemm' ;;
*) _report 1 'libm.so.6: the message says it lacks cblas_sgemm' "$(cat "$T/.err")" ;;
esac
ok 'OPENBLAS_NUM_THREADS=2 of the user' $G OPENBLAS_NUM_THREADS=2 kvxattn estimate \
    -q "$T/q.npy" -k "$T/k.npy" -o "$T/xt.npy"
expect_file_eq 'the same mask with OpenBLAS on two threads' "$T/xt.npy" "$T/xg.npy"
done_testing
