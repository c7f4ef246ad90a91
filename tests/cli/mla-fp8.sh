#!/bin/sh
# mla-fp8.sh - an FP8 latent cache (vLLM's kv_cache_dtype fp8 for MLA: one
# scale for the whole row, c_kv and k_pe alike): kvattn quant's bytes
# against a NumPy search of the nearest FP8 value (ties to the even byte);
# kvattn mla --kv-dtype, dense and sparse, against a float64 reference of
# MLA over the bytes' values times the scale (rounded to f32 once), within
# the bound -v prints; bad scales and dtypes.
. "$KV_TOP/tests/lib.sh"
need_numpy
CFG="$KV_TOP/tests/configs/deepseek-v2-lite.json"
D="$T/m"
ok 'gen: two requests of 3 queries over 40 keys' kvattn gen --model-config "$CFG" --shape 2,3 --kv-len 40 --dtype f32 --dir "$D" --block-size 16
SL=$(cat "$D/seq_lens"); QL=$(cat "$D/q_lens")
cat >"$T/ref.py" <<'EOF'
import sys, numpy as np
def values(fmt):   # every byte's value from the format's definition
    m, bias = (3, 7) if fmt == 'fp8_e4m3' else (2, 15)
    out = np.empty(256)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        f, mant, top = (b & 0x7f) >> m, b & ((1 << m) - 1), 0x7f >> m
        if fmt == 'fp8_e4m3' and f == top and mant == (1 << m) - 1:
            v = np.nan
        elif fmt == 'fp8_e5m2' and f == top:
            v = np.inf if mant == 0 else np.nan
        elif f == 0:
            v = mant * 2.0 ** (1 - bias - m)
        else:
            v = (mant + (1 << m)) * 2.0 ** (f - bias - m)
        out[b] = s * v
    return out
cmd, fmt = sys.argv[1], sys.argv[2]
vals = values(fmt)
if cmd == 'bytes':     # x.npy q.npy scale: nearest value of x / scale, clamped, ties to even
    x = np.load(sys.argv[3]).astype(np.float32); q = np.load(sys.argv[4]); s = np.float32(sys.argv[5])
    y = (x / s).astype(np.float32).astype(np.float64).ravel()
    mx = 448.0 if fmt == 'fp8_e4m3' else 57344.0
    fin = np.where(np.isfinite(vals[:128]))[0]
    a = np.minimum(np.abs(y), mx)
    d = np.abs(vals[fin][None, :] - a[:, None])
    want = np.empty(len(y), np.int64)
    for i in range(len(y)):
        best = fin[d[i] == d[i].min()]
        want[i] = best[0] if len(best) == 1 else [c for c in best if c % 2 == 0][0]
    want |= np.where(np.signbit(y), 0x80, 0)
    assert q.dtype == np.uint8 and q.shape == x.shape, (q.dtype, q.shape)
    bad = int((q.ravel() != want).sum()); print(bad); sys.exit(1 if bad else 0)
# check: dir c8.npy scale out.npy bound [idx.npy]: MLA over the dequantized cache in float64
d, c8, s, bound = sys.argv[3], np.load(sys.argv[4]), np.float32(sys.argv[5]), float(sys.argv[7])
out = np.load(sys.argv[6]).astype(np.float64)
c = (vals[c8] * np.float64(s)).astype(np.float32).astype(np.float64)
q = np.load(d + '/q_absorbed.npy').astype(np.float64)
bt = np.load(d + '/block_table.npy')
sl = [int(x) for x in open(d + '/seq_lens').read().split(',')]
ql = [int(x) for x in open(d + '/q_lens').read().split(',')]
scale = float(open(d + '/scale').read())
idx = np.load(sys.argv[8]) if len(sys.argv) > 8 else None
bs, dl, t, bad = c.shape[1], out.shape[2], 0, 0
for b, (lq, lk) in enumerate(zip(ql, sl)):
    for i in range(lq):
        js = range(i + lk - lq + 1) if idx is None else [j for j in idx[t] if j >= 0]
        L = np.stack([c[bt[b, j // bs], j % bs, 0] for j in js])
        for h in range(q.shape[1]):
            sc = L @ q[t, h] * scale
            p = np.exp(sc - sc.max())
            bad += np.abs(out[t, h] - (p @ L[:, :dl]) / p.sum()).max() > bound
        t += 1
print(bad); sys.exit(1 if bad else 0)
EOF
ref() { "$PY" "$T/ref.py" "$@"; }
for fmt in fp8_e4m3 fp8_e5m2; do
    ok "$fmt: quant the latent cache with one scale" kvattn quant --kv-dtype $fmt --k-scale 0.0173 -k "$D/kv_cache.npy" -o "$T/c8.npy"
    ok "$fmt: the bytes = the nearest value of x / scale, ties to even" ref bytes $fmt "$D/kv_cache.npy" "$T/c8.npy" 0.0173
    ok "$fmt: mla --kv-dtype, dense" kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$T/c8.npy" --kv-dtype $fmt --k-scale 0.0173 --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --causal --model-config "$CFG" -o "$T/o.npy" -v
    B=$(sed -n 's/.*error bound //p' "$T/.err")
    ok "$fmt: dense within the bound ($B) of float64 MLA over the dequantized cache" ref check $fmt "$D" "$T/c8.npy" 0.0173 "$T/o.npy" "$B"
    "$PY" -c "
import numpy as np
rng = np.random.default_rng(5); ql = [3, 3]; sl = [40, 40]; idx = np.full((6, 12), -1, np.int32); t = 0
for lq, lk in zip(ql, sl):
    for i in range(lq):
        sel = rng.permutation(i + lk - lq + 1)[:9]; idx[t, rng.permutation(12)[:9]] = sel; t += 1
np.save('$T/idx.npy', idx)"
    ok "$fmt: mla --kv-dtype --topk-indices" kvattn mla -q "$D/q_absorbed.npy" --kv-cache "$T/c8.npy" --kv-dtype $fmt --k-scale 0.0173 --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --causal --model-config "$CFG" --topk-indices "$T/idx.npy" -o "$T/os.npy" -v
    B=$(sed -n 's/.*error bound //p' "$T/.err")
    ok "$fmt: sparse within the bound ($B) of float64 over the selected dequantized rows" ref check $fmt "$D" "$T/c8.npy" 0.0173 "$T/os.npy" "$B" "$T/idx.npy"
done
# A scale near the top of f32 over many keys of the largest values: the
# output (at most max(format) k_scale) is finite while the unnormalised
# sums over the keys are not, unless the latent is read at k_scale 2^-k
# and the output multiplied by 2^k after the division.  Tiny queries make
# every weight near 1; two requests of 5,000 and 700 keys, 4 heads.
G="$T/big"; mkdir -p "$G"
"$PY" - "$G" <<'EOF'
import sys, numpy as np
g = sys.argv[1]; rng = np.random.default_rng(7); W, bs, nk = 576, 64, [5000, 700]
nb = sum((n + bs - 1) // bs for n in nk) + 1
for fmt, top in (('fp8_e4m3', 0x7e), ('fp8_e5m2', 0x7b)):
    sign = (rng.random(W) < 0.5).astype(np.uint8) * 0x80
    c = np.broadcast_to(top | sign, (nb, bs, 1, W)).copy()
    m = rng.random(c.shape) < 0.1
    c[m] = (rng.integers(0, top + 1, m.sum()) | rng.integers(0, 2, m.sum()) * 0x80).astype(np.uint8)
    np.save('%s/%s.npy' % (g, fmt), c)
perm = rng.permutation(np.arange(1, nb)); bt = np.zeros((2, 79), np.int32); o = 0
for b, n in enumerate(nk):
    k = (n + bs - 1) // bs; bt[b, :k] = perm[o:o + k]; o += k
np.save(g + '/block_table.npy', bt)
np.save(g + '/q_absorbed.npy', (rng.standard_normal((2, 4, W)) * 1e-38).astype(np.float32))
idx = np.full((2, 2048), -1, np.int32)
idx[0] = rng.permutation(5000)[:2048]; idx[1, :600] = rng.permutation(700)[:600]
np.save(g + '/idx.npy', idx)
for f, v in (('seq_lens', '5000,700'), ('q_lens', '1,1'), ('scale', '0.1')):
    open('%s/%s' % (g, f), 'w').write(v)
EOF
for fs in fp8_e4m3:1e35 fp8_e5m2:5e33; do
    fmt=${fs%:*} S=${fs#*:}
    BIG="-q $G/q_absorbed.npy --kv-cache $G/$fmt.npy --kv-dtype $fmt --k-scale $S --block-table $G/block_table.npy --seq-lens 5000,700 --scale 0.1 --kv-lora-rank 512"
    # shellcheck disable=SC2086
    {
    ok "$fmt --k-scale $S over 5,000 keys: dense, -j 1" kvattn mla $BIG -j 1 -o "$T/b1.npy" -v
    B=$(sed -n 's/.*error bound //p' "$T/.err")
    ok "finite and within the bound ($B) of float64 MLA over the dequantized cache" ref check $fmt "$G" "$G/$fmt.npy" $S "$T/b1.npy" "$B"
    ok '-j 2' kvattn mla $BIG -j 2 -o "$T/b2.npy"
    ok '-j 1 = -j 2, byte for byte' cmp "$T/b1.npy" "$T/b2.npy"
    ok 'sparse, 2,048 of the keys, -j 1' kvattn mla $BIG --topk-indices "$G/idx.npy" -j 1 -o "$T/s1.npy" -v
    B=$(sed -n 's/.*error bound //p' "$T/.err")
    ok "finite and within the bound ($B) of float64 over the selected rows" ref check $fmt "$G" "$G/$fmt.npy" $S "$T/s1.npy" "$B" "$G/idx.npy"
    ok '-j 2' kvattn mla $BIG --topk-indices "$G/idx.npy" -j 2 -o "$T/s2.npy"
    ok '-j 1 = -j 2, byte for byte' cmp "$T/s1.npy" "$T/s2.npy"
    ok 'the cache from stdin (read whole): the same bytes' kvattn mla $(echo "$BIG" | sed 's|--kv-cache [^ ]*|--kv-cache -|') --topk-indices "$G/idx.npy" -o "$T/s3.npy" <"$G/$fmt.npy"
    ok 'byte for byte' cmp "$T/s1.npy" "$T/s3.npy"
    }
done
M="-q $D/q_absorbed.npy --block-table $D/block_table.npy --seq-lens $SL --q-lens $QL --model-config $CFG -o $T/bad.npy"
# shellcheck disable=SC2086
{
expect_fail 2 'a scale of nan' kvattn mla --kv-cache "$T/c8.npy" --kv-dtype fp8_e5m2 --k-scale nan $M
expect_fail 2 'a scale of inf' kvattn mla --kv-cache "$T/c8.npy" --kv-dtype fp8_e5m2 --k-scale inf $M
expect_fail 2 'a scale of 0' kvattn mla --kv-cache "$T/c8.npy" --kv-dtype fp8_e5m2 --k-scale 0 $M
expect_fail 2 'a scale that is 0 in f32' kvattn mla --kv-cache "$T/c8.npy" --kv-dtype fp8_e5m2 --k-scale 1e-50 $M
expect_fail 2 '--k-scale without --kv-dtype' kvattn mla --kv-cache "$T/c8.npy" --k-scale 2 $M
expect_fail 2 'an unknown --kv-dtype' kvattn mla --kv-cache "$T/c8.npy" --kv-dtype fp4 $M
expect_fail 1 'an f32 cache read as FP8' kvattn mla --kv-cache "$D/kv_cache.npy" --kv-dtype fp8_e4m3 $M
}
expect_fail 2 '--kv-dtype with the naive form' kvattn mla -q "$D/q.npy" --c-kv "$D/c_kv.npy" --k-pe "$D/k_pe.npy" --w-uk "$D/w_uk.npy" --w-uv "$D/w_uv.npy" --kv-dtype fp8_e4m3 -o "$T/bad.npy"
ok 'nothing written on failure' test ! -e "$T/bad.npy"
done_testing
