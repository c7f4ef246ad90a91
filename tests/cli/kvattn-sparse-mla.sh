#!/bin/sh
# kvattn-sparse-mla.sh - kvattn mla --topk-indices (DeepSeek-V3.2's sparse
# MLA) against a float64 NumPy reference over the selected latent rows;
# every position selected equals the dense absorbed form within its bound;
# the indexer's output feeds it; threads; bad indices.
. "$KV_TOP/tests/lib.sh"
need_numpy
CFG="$KV_TOP/tests/configs/deepseek-v2-lite.json"
D="$T/m"
ok 'gen: two requests of 3 queries over 40 keys' kvattn gen --model-config "$CFG" --shape 2,3 --kv-len 40 --dtype f32 --dir "$D" --block-size 16
SL=$(cat "$D/seq_lens"); QL=$(cat "$D/q_lens"); SC=$(cat "$D/scale")
cat >"$T/ref.py" <<'EOF'
import sys, numpy as np
cmd, d = sys.argv[1], sys.argv[2]
def f64(path):   # f32, or bf16 stored as '<V2'
    a = np.load(path)
    if a.dtype.kind == 'V':
        a = (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64)
q = f64(d + '/q_absorbed.npy')
c = f64(d + '/kv_cache.npy')
bt = np.load(d + '/block_table.npy')
sl = [int(x) for x in open(d + '/seq_lens').read().split(',')]
ql = [int(x) for x in open(d + '/q_lens').read().split(',')]
scale = float(open(d + '/scale').read())
bs, dl = c.shape[1], 512
req, pos = [], []
for b, (lq, lk) in enumerate(zip(ql, sl)):
    for i in range(lq):
        req.append(b); pos.append(i + lk - lq)
def rows(b, js):
    return np.stack([c[bt[b, j // bs], j % bs, 0] for j in js])
if cmd == 'pick':     # out.npy k seed: random causal selections, -1 padding, some empty rows
    k, rng = int(sys.argv[4]), np.random.default_rng(int(sys.argv[5]))
    idx = np.full((len(req), k), -1, np.int32)
    for t in range(len(req)):
        n = [0, 1, k, k // 2][t % 4] if t % 5 else 0
        sel = rng.permutation(pos[t] + 1)[:n]
        slots = rng.permutation(k)[:len(sel)]
        idx[t, slots] = sel
    np.save(sys.argv[3], idx)
elif cmd == 'all':    # every visible position
    k = max(pos) + 1
    idx = np.full((len(req), k), -1, np.int32)
    for t in range(len(req)):
        idx[t, :pos[t] + 1] = np.arange(pos[t] + 1)
    np.save(sys.argv[3], idx)
elif cmd == 'check':  # idx.npy out.npy lse.npy bound
    idx, out, lse = np.load(sys.argv[3]), np.load(sys.argv[4]), np.load(sys.argv[5])
    bound = float(sys.argv[6])
    out = f64(sys.argv[4])
    bad = 0
    for t in range(len(req)):
        js = [j for j in idx[t] if j >= 0]
        for h in range(q.shape[1]):
            if not js:
                bad += (out[t, h] != 0).any() or not np.isneginf(lse[t, h]); continue
            L = rows(req[t], js)
            s = L @ q[t, h] * scale
            m = s.max(); p = np.exp(s - m)
            want = (p @ L[:, :dl]) / p.sum()
            w_lse = m + np.log(p.sum())
            # the output within kvattn's stated bound; the LSE within 1e-5
            bad += np.abs(out[t, h] - want).max() > bound or abs(lse[t, h] - w_lse) > 1e-5 * max(1, abs(w_lse))
    print(bad); sys.exit(1 if bad else 0)
EOF
ref() { "$PY" "$T/ref.py" "$@"; }
ref pick "$D" "$D/idx.npy" 16 1
ok 'sparse mla (16 of up to 40 keys, -1 padding, empty rows)' kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --causal --scale "$SC" --kv-lora-rank 512 --topk-indices "$D/idx.npy" -o "$T/o.npy" --lse "$T/l.npy" -j 1 -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
expect_eq '-v names the sparse form' "$(grep -c 'mla sparse absorbed form' "$T/.err")" 1
ok "output within the stated bound ($B) of a float64 reference, LSE within 1e-5" ref check "$D" "$D/idx.npy" "$T/o.npy" "$T/l.npy" "$B"
ok 'sparse mla -j 3' kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --causal --model-config "$CFG" --topk-indices "$D/idx.npy" -o "$T/o3.npy" -j 3
expect_file_eq 'bit-identical for any -j (and --model-config = its scale and rank)' "$T/o3.npy" "$T/o.npy"
ref all "$D" "$D/all.npy"
ok 'every visible position selected' kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --causal --model-config "$CFG" --topk-indices "$D/all.npy" -o "$T/oa.npy"
ok 'dense absorbed form' kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --causal --model-config "$CFG" -o "$T/od.npy" -v
B2=$(sed -n 's/.*error bound //p' "$T/.err")
B2=$("$PY" -c "print(2 * $B2)")
ok "all selected = the dense absorbed form within twice its bound ($B2)" kvattn cmp --atol "$B2" --rtol 0 "$T/oa.npy" "$T/od.npy"
# bf16 inputs: the same kernel's bf16 route and its bound
D2="$T/b"
ok 'gen bf16' kvattn gen --model-config "$CFG" --shape 1,2 --kv-len 70 --dtype bf16 --dir "$D2" --block-size 16
"$PY" "$T/ref.py" pick "$D2" "$D2/idx.npy" 24 2
ok 'sparse mla on bf16' kvattn mla -q "$D2/q_absorbed.npy" --kv-cache "$D2/kv_cache.npy" --block-table "$D2/block_table.npy" --seq-lens "$(cat "$D2/seq_lens")" --q-lens "$(cat "$D2/q_lens")" --causal --model-config "$CFG" --topk-indices "$D2/idx.npy" -o "$T/ob.npy" --lse "$T/lb.npy" -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
ok "bf16: within the stated bound ($B)" ref check "$D2" "$D2/idx.npy" "$T/ob.npy" "$T/lb.npy" "$B"

# few queries of many heads: each query's heads in groups of 32 (70
# heads: 32, 32 and 6), every group over all of its keys; within the
# bound, and the same bytes for any -j (at each vector cap: run.sh runs
# the file under each)
D4="$T/g"
ok 'gen bf16: 2 requests of 2 queries, 70 heads' kvattn gen --model-config "$CFG" --shape 2,70,2 --kv-len 300 --dtype bf16 --dir "$D4" --block-size 16
"$PY" "$T/ref.py" pick "$D4" "$D4/idx.npy" 96 4
M4="-q $D4/q_absorbed.npy --kv-cache $D4/kv_cache.npy --block-table $D4/block_table.npy --seq-lens $(cat "$D4/seq_lens") --q-lens $(cat "$D4/q_lens") --causal --model-config $CFG --topk-indices $D4/idx.npy"
# shellcheck disable=SC2086
ok 'sparse mla, 70 heads, -j 1' kvattn mla $M4 -o "$T/g1.npy" --lse "$T/gl1.npy" -j 1 -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
ok "70 heads: within the stated bound ($B)" ref check "$D4" "$D4/idx.npy" "$T/g1.npy" "$T/gl1.npy" "$B"
for j in 2 3; do
    # shellcheck disable=SC2086
    ok "70 heads -j $j" kvattn mla $M4 -o "$T/g$j.npy" --lse "$T/gl$j.npy" -j "$j"
    expect_file_eq "70 heads: -j $j gives the same output" "$T/g$j.npy" "$T/g1.npy"
    expect_file_eq "70 heads: -j $j gives the same LSE" "$T/gl$j.npy" "$T/gl1.npy"
done

# a decode query over 1,100 of 1,200 keys: chunks of 512 merged (the
# merge by whichever thread ends a query's last chunk): the same bytes for
# any -j, and from the scalar merge and rescale (KVTOOLS_ISA=avx2) and the
# AVX-512 ones (both caps below AVX512_BF16, so both on the f32 tiles),
# f32 and bf16 output, and with an fp8_ds_mla cache (its rows'
# power-of-two scale)
D3="$T/c"
ok 'gen bf16 decode over 1200 keys' kvattn gen --model-config "$CFG" --shape 1,1 --kv-len 1200 --dtype bf16 --dir "$D3"
"$PY" -c "
import numpy as np
np.save('$D3/idx.npy', np.random.default_rng(3).permutation(1200)[:1100].astype(np.int32).reshape(1, -1))"
M3="-q $D3/q_absorbed.npy --block-table $D3/block_table.npy --seq-lens 1200 --causal --model-config $CFG --topk-indices $D3/idx.npy"
ok 'quant: the 1200 keys as fp8_ds_mla' kvattn quant --kv-dtype fp8_ds_mla -k "$D3/kv_cache.npy" -o "$D3/cds.npy"
# the two caps: avx2 and avx512 on x86-64; on another CPU (aarch64, where
# both merges are scalar) generic and neon, for the same -j checks
lo=avx2 hi=avx512
# shellcheck disable=SC2086
env KVTOOLS_ISA=avx2 kvattn mla $M3 --kv-cache "$D3/kv_cache.npy" -o "$T/probe.npy" 2>/dev/null || { lo=generic hi=neon; }
for c in "bf16 --kv-cache $D3/kv_cache.npy" "f32 --kv-cache $D3/kv_cache.npy" \
         "bf16 --kv-cache $D3/cds.npy --kv-dtype fp8_ds_mla"; do
    # shellcheck disable=SC2086
    set -- $c
    od=$1; shift
    for run in "$lo 1" "$hi 1" "$hi 2" "$lo 3"; do
        # shellcheck disable=SC2086
        set -- $run "$@"
        isa=$1 j=$2; shift 2
        # shellcheck disable=SC2086
        ok "$od, $*, KVTOOLS_ISA=$isa -j $j" env KVTOOLS_ISA="$isa" kvattn mla $M3 "$@" \
            --out-dtype "$od" -j "$j" -o "$T/m-$isa-$j.npy" --lse "$T/ml-$isa-$j.npy"
        [ "$isa $j" = "$lo 1" ] && continue
        expect_file_eq "$od, $*: KVTOOLS_ISA=$isa -j $j gives the same output" "$T/m-$isa-$j.npy" "$T/m-$lo-1.npy"
        expect_file_eq "$od, $*: and the same LSE" "$T/ml-$isa-$j.npy" "$T/ml-$lo-1.npy"
    done
done

# a cache file is read by the rows the indices select (pread, no mapping):
# the output and LSE are those of the cache read whole (from stdin), bit
# for bit, and -v's bound too, on f32, bf16, FP8 and fp8_ds_mla caches; a
# cache file cut short or longer than its header says is refused
M="-q $D/q_absorbed.npy --block-table $D/block_table.npy --seq-lens $SL --q-lens $QL --causal --model-config $CFG --topk-indices $D/idx.npy"
# shellcheck disable=SC2086
ok 'the cache file, -v' kvattn mla $M --kv-cache "$D/kv_cache.npy" -o "$T/of.npy" -v
B1=$(sed -n 's/.*error bound //p' "$T/.err")
# shellcheck disable=SC2086
ok 'the cache from stdin, read whole' kvattn mla $M --kv-cache - -o "$T/oin.npy" --lse "$T/lin.npy" -v <"$D/kv_cache.npy"
expect_eq '-v: the same bound from the file and from stdin' "$(sed -n 's/.*error bound //p' "$T/.err")" "$B1"
expect_file_eq 'rows read from the file: the output of the cache read whole' "$T/oin.npy" "$T/o.npy"
expect_file_eq 'and its LSE' "$T/lin.npy" "$T/l.npy"
M2="-q $D2/q_absorbed.npy --block-table $D2/block_table.npy --seq-lens $(cat "$D2/seq_lens") --q-lens $(cat "$D2/q_lens") --causal --model-config $CFG --topk-indices $D2/idx.npy"
# shellcheck disable=SC2086
ok 'bf16 cache from stdin' kvattn mla $M2 --kv-cache - -o "$T/obin.npy" <"$D2/kv_cache.npy"
expect_file_eq 'bf16: rows read from the file = the cache read whole' "$T/obin.npy" "$T/ob.npy"
ok 'quant: an FP8 latent cache' kvattn quant --kv-dtype fp8_e4m3 --k-scale 0.02 -k "$D/kv_cache.npy" -o "$T/c8.npy"
ok 'quant: an fp8_ds_mla cache' kvattn quant --kv-dtype fp8_ds_mla -k "$D/kv_cache.npy" -o "$T/cds.npy"
for c in "c8 --kv-dtype fp8_e4m3 --k-scale 0.02" "cds --kv-dtype fp8_ds_mla"; do
    # shellcheck disable=SC2086
    set -- $c
    f=$1; shift
    # shellcheck disable=SC2086
    ok "$1 $2: by rows" kvattn mla $M --kv-cache "$T/$f.npy" "$@" -o "$T/of.npy" --lse "$T/lf.npy"
    # shellcheck disable=SC2086
    ok "$1 $2: read whole" kvattn mla $M --kv-cache - "$@" -o "$T/ofin.npy" --lse "$T/lfin.npy" <"$T/$f.npy"
    expect_file_eq "$1 $2: the same output" "$T/of.npy" "$T/ofin.npy"
    expect_file_eq "$1 $2: the same LSE" "$T/lf.npy" "$T/lfin.npy"
done
sz=$(wc -c <"$D/kv_cache.npy")
head -c $((sz - 100)) "$D/kv_cache.npy" >"$T/cut.npy"
# shellcheck disable=SC2086
expect_fail 1 'a cache file cut short' kvattn mla $M --kv-cache "$T/cut.npy" -o "$T/bad.npy"
expect_eq 'its message' "$(grep -c "cut.npy': truncated data" "$T/.err")" 1
{ cat "$D/kv_cache.npy"; printf 'x'; } >"$T/long.npy"
# shellcheck disable=SC2086
expect_fail 1 'a cache file longer than its array' kvattn mla $M --kv-cache "$T/long.npy" -o "$T/bad.npy"

bad() {   # title python-expression-on-idx
    rm -f "$T/bad_idx.npy"
    "$PY" -c "
import numpy as np
idx = np.load('$D/idx.npy'); $2; np.save('$T/bad_idx.npy', idx)" || echo "# could not make the bad indices"
    expect_fail 1 "$1" kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --causal --model-config "$CFG" --topk-indices "$T/bad_idx.npy" -o "$T/bad.npy"
    if grep -q -- '--topk-indices' "$T/.err"; then _report 0 "$1: the message names --topk-indices"
    else _report 1 "$1: the message names --topk-indices" "$(cat "$T/.err")"; fi
}
bad 'an index past the keys' 'idx[1, 0] = 40'
bad 'an index below -1' 'idx[1, 0] = -2'
bad 'an index after the query position (causal)' 'idx[0, :] = -1; idx[0, 0] = 39'
bad 'a key named twice' 'idx[3, :] = -1; idx[3, :2] = 5'
bad 'one row too few' 'idx = idx[:-1]'
bad 'int64 indices' 'idx = idx.astype(np.int64)'
expect_fail 2 '--topk-indices with the naive form' kvattn mla -q "$D/q.npy" --c-kv "$D/c_kv.npy" --k-pe "$D/k_pe.npy" --w-uk "$D/w_uk.npy" --w-uv "$D/w_uv.npy" --topk-indices "$D/idx.npy" -o "$T/bad.npy"
ok 'nothing written on failure' test ! -e "$T/bad.npy"
done_testing
