#!/bin/sh
# mla-ds-fp8.sh - fp8_ds_mla, DeepSeek-V3.2's 656-byte latent rows (512
# e4m3 c_kv values, 4 f32 power-of-two scales of 128 values each, 64 bf16
# k_pe values): kvattn quant's bytes against a NumPy reference (the scale
# rule in f32, then the nearest e4m3 value by search, ties to the even
# byte, and the nearest bf16 by search), on random and adversarial tiles;
# kvattn mla --kv-dtype fp8_ds_mla, dense and sparse, from both cache
# shapes, against float64 MLA over the rows' values within the bound -v
# prints; wrong row sizes, bad scales and options refused.
. "$KV_TOP/tests/lib.sh"
need_numpy
CFG="$KV_TOP/tests/configs/deepseek-v2-lite.json"
D="$T/m"
ok 'gen: two requests of 3 queries over 40 keys' kvattn gen --model-config "$CFG" --shape 2,3 --kv-len 40 --dtype f32 --dir "$D" --block-size 16
SL=$(cat "$D/seq_lens"); QL=$(cat "$D/q_lens")
cat >"$T/ref.py" <<'EOF'
import math, sys, numpy as np
def e4m3():   # every byte's value from the format's definition (0x7f, 0xff: NaN)
    out = np.empty(256)
    for b in range(256):
        f, m = (b & 0x7f) >> 3, b & 7
        v = np.nan if (f == 15 and m == 7) else (m * 2.0 ** -9 if f == 0 else (8 + m) * 2.0 ** (f - 10))
        out[b] = -v if b & 0x80 else v
    return out
V = e4m3()
def scale(amax):       # f32: amax * f32(1/448), at least f32(1e-4), 2^ceil(f32 log2)
    s = max(np.float32(amax) * np.float32(1 / 448), np.float32(1e-4))
    return 2.0 ** math.ceil(np.float32(math.log2(float(s))))
def nearest(y, vals, codes):   # nearest value of each y, ties to the even code
    out = []
    for row in np.abs(vals[None, :] - y[:, None]):
        best = codes[row == row.min()]
        out.append(best[0] if len(best) == 1 else [c for c in best if c % 2 == 0][0])
    return np.array(out, np.int64)
def quant(x):          # x [..., 576] float64 of f32/bf16 values -> u8 [..., 656]
    rows = x.reshape(-1, 576)
    out = np.zeros((len(rows), 656), np.uint8)
    fin = np.arange(127)
    for r, row in enumerate(rows):
        for t in range(4):
            v = row[128 * t:128 * t + 128]
            s = scale(np.abs(v).max())
            y = np.minimum(np.abs(v / s), 448.0)
            q = nearest(y, V[fin], fin) | np.where(np.signbit(v), 0x80, 0)
            out[r, 128 * t:128 * t + 128] = q
            out[r, 512 + 4 * t:516 + 4 * t] = np.frombuffer(np.float32(s).tobytes(), np.uint8)
        for i, v in enumerate(row[512:]):
            u = int(np.float32(v).view(np.uint32)) >> 16
            lo = float(np.uint32(u << 16).view(np.float32))
            hi = float(np.uint32((u + 1) << 16).view(np.float32))
            if not np.isfinite(v) or v == lo:
                h = u
            else:
                dl, dh = abs(v - lo), abs(hi - v)
                h = u if dl < dh else u + 1 if dh < dl else u + (u & 1)
            out[r, 528 + 2 * i:530 + 2 * i] = np.frombuffer(np.uint16(h).tobytes(), np.uint8)
    return out.reshape(x.shape[:-1] + (656,))
def deq(c):            # u8 [..., 656] -> float64 [..., 576]
    r = c.reshape(-1, 656)
    s = r[:, 512:528].copy().view(np.float32).astype(np.float64)
    nope = V[r[:, :512]] * np.repeat(s, 128, axis=1)
    rope = (r[:, 528:].copy().view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.concatenate([nope, rope.astype(np.float64)], 1).reshape(c.shape[:-1] + (576,))
cmd = sys.argv[1]
if cmd == 'adversarial':   # tiles probing the scale rule and the rounding
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3, 1, 576)).astype(np.float32)
    rows = x.reshape(-1, 576)
    rows[0, :128] = 0                                  # amax 0: the 1e-4 floor, 2^-13
    rows[0, 128:256] *= np.float32(1e-7)               # below the floor: e4m3 subnormals
    rows[0, 256] = 448 * 2.0 ** 5                      # amax exactly 448 2^k
    rows[1, :128] *= np.float32(1e30)                  # huge
    for k in range(6):                                 # amax 448 2^e (1 + k ulp): log2 at an integer
        rows[2 + k // 2, 128 * (k % 2) + 5] = np.float32(448 * 2.0 ** (k - 3)) * np.float32(1 + k * 2.0 ** -23)
    rows[5, 300:310] = -0.0
    rows[6, 512:] = np.float32(3.0) + np.float32(2.0 ** -8) * np.arange(64)   # bf16 midpoints
    rows[7, 513] = np.float32(np.inf)                  # k_pe is not scaled: kept
    np.save(sys.argv[2], x)
    sys.exit(0)
if cmd == 'bytes':     # x.npy q.npy
    x = np.load(sys.argv[2])
    x = x.view(np.uint16).astype(np.uint32) << 16 if x.dtype.str == '|V2' else x
    x = x.view(np.float32).astype(np.float64) if x.dtype == np.uint32 else x.astype(np.float64)
    q = np.load(sys.argv[3]); want = quant(x)
    assert q.dtype == np.uint8 and q.shape == want.shape, (q.dtype, q.shape, want.shape)
    bad = int((q != want).sum()); print(bad); sys.exit(1 if bad else 0)
# check: dir c.npy out.npy bound [idx.npy]: MLA over the cache's values in float64
d, c, bound = sys.argv[2], deq(np.load(sys.argv[3])), float(sys.argv[5])
c = c.reshape(c.shape[0], c.shape[1], 576)
out = np.load(sys.argv[4]).astype(np.float64)
q = np.load(d + '/q_absorbed.npy').astype(np.float64)
bt = np.load(d + '/block_table.npy')
sl = [int(x) for x in open(d + '/seq_lens').read().split(',')]
ql = [int(x) for x in open(d + '/q_lens').read().split(',')]
scale = float(open(d + '/scale').read())
idx = np.load(sys.argv[6]) if len(sys.argv) > 6 else None
bs, t, bad = c.shape[1], 0, 0
for b, (lq, lk) in enumerate(zip(ql, sl)):
    for i in range(lq):
        js = range(i + lk - lq + 1) if idx is None else [j for j in idx[t] if j >= 0]
        L = np.stack([c[bt[b, j // bs], j % bs] for j in js])
        for h in range(q.shape[1]):
            sc = L @ q[t, h] * scale
            p = np.exp(sc - sc.max())
            bad += np.abs(out[t, h] - (p @ L[:, :512]) / p.sum()).max() > bound
        t += 1
print(bad); sys.exit(1 if bad else 0)
EOF
ref() { "$PY" "$T/ref.py" "$@"; }
said() { cp "$T/.err" "$T/msg"; ok "$1" grep -qF "$2" "$T/msg"; }
ok 'quant fp8_ds_mla: the f32 latent cache' kvattn quant --kv-dtype fp8_ds_mla -k "$D/kv_cache.npy" -o "$T/c.npy"
ok 'the bytes = the NumPy reference (scales, e4m3 by search, bf16 by search)' ref bytes "$D/kv_cache.npy" "$T/c.npy"
ok 'adversarial tiles (floor, subnormals, 448 2^k, huge, bf16 midpoints, inf k_pe)' ref adversarial "$T/adv.npy"
ok 'quant the adversarial tiles' kvattn quant --kv-dtype fp8_ds_mla -k "$T/adv.npy" -o "$T/adv8.npy"
ok 'their bytes = the reference' ref bytes "$T/adv.npy" "$T/adv8.npy"
"$PY" -c "
import numpy as np
x = np.load('$D/kv_cache.npy')[:2, :, 0]
b = ((x.view(np.uint32) + 0x7fff + ((x.view(np.uint32) >> 16) & 1)) >> 16).astype(np.uint16)
np.save('$T/xb.npy', b.view('V2'))"
ok 'quant a bf16 latent cache [blocks, block_size, 576]' kvattn quant --kv-dtype fp8_ds_mla -k "$T/xb.npy" -o "$T/cb.npy"
ok 'its bytes = the reference' ref bytes "$T/xb.npy" "$T/cb.npy"
M="-q $D/q_absorbed.npy --block-table $D/block_table.npy --seq-lens $SL --q-lens $QL --causal --model-config $CFG"
# shellcheck disable=SC2086
{
ok 'mla --kv-dtype fp8_ds_mla, dense' kvattn mla --kv-cache "$T/c.npy" --kv-dtype fp8_ds_mla $M -o "$T/o.npy" -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
ok "dense within the bound ($B) of float64 MLA over the rows' values" ref check "$D" "$T/c.npy" "$T/o.npy" "$B"
"$PY" -c "import numpy as np; c = np.load('$T/c.npy'); np.save('$T/c3.npy', c[:, :, 0])"
ok "the cache as vLLM shapes it, [blocks, block_size, 656]: the same output" kvattn mla --kv-cache "$T/c3.npy" --kv-dtype fp8_ds_mla $M -o "$T/o3.npy"
ok 'byte for byte' cmp "$T/o.npy" "$T/o3.npy"
"$PY" -c "
import numpy as np
rng = np.random.default_rng(5); idx = np.full((6, 12), -1, np.int32); t = 0
for lq, lk in zip([3, 3], [40, 40]):
    for i in range(lq):
        sel = rng.permutation(i + lk - lq + 1)[:9]; idx[t, rng.permutation(12)[:9]] = sel; t += 1
np.save('$T/idx.npy', idx)"
ok 'mla --kv-dtype fp8_ds_mla --topk-indices' kvattn mla --kv-cache "$T/c.npy" --kv-dtype fp8_ds_mla $M --topk-indices "$T/idx.npy" -o "$T/os.npy" -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
ok "sparse within the bound ($B) of float64 over the selected rows" ref check "$D" "$T/c.npy" "$T/os.npy" "$B" "$T/idx.npy"
# Tile scales near the top of f32 over many keys of the largest bytes: the
# output (at most 448 times the largest scale) is finite while the
# unnormalised sums over the keys are not, unless the rows are read at
# 2^-k of their values and the output multiplied by 2^k after the
# division.  Tiny queries make every weight near 1; two requests of 5,000
# and 700 keys, 4 heads, the vLLM shape [blocks, block_size, 656].
G="$T/big"; mkdir -p "$G"
"$PY" - "$G" <<'EOF'
import sys, numpy as np
g = sys.argv[1]; rng = np.random.default_rng(9); bs, nk = 64, [5000, 700]
nb = sum((n + bs - 1) // bs for n in nk) + 1
sign = (rng.random(512) < 0.5).astype(np.uint8) * 0x80
c = np.zeros((nb, bs, 656), np.uint8)
c[:, :, :512] = 0x7e | sign
m = rng.random((nb, bs, 512)) < 0.1
c[:, :, :512][m] = (rng.integers(0, 0x7f, m.sum()) | rng.integers(0, 2, m.sum()) * 0x80).astype(np.uint8)
s = np.ldexp(np.float32(1), rng.integers(108, 113, (nb, bs, 4))).astype(np.float32)
c[:, :, 512:528] = s.view(np.uint8).reshape(nb, bs, 16)
pe = rng.standard_normal((nb, bs, 64)).astype(np.float32).view(np.uint32) >> 16
c[:, :, 528:] = pe.astype(np.uint16).view(np.uint8).reshape(nb, bs, 128)
np.save(g + '/c.npy', c)
perm = rng.permutation(np.arange(1, nb)); bt = np.zeros((2, 79), np.int32); o = 0
for b, n in enumerate(nk):
    k = (n + bs - 1) // bs; bt[b, :k] = perm[o:o + k]; o += k
np.save(g + '/block_table.npy', bt)
np.save(g + '/q_absorbed.npy', (rng.standard_normal((2, 4, 576)) * 1e-38).astype(np.float32))
idx = np.full((2, 2048), -1, np.int32)
idx[0] = rng.permutation(5000)[:2048]; idx[1, :600] = rng.permutation(700)[:600]
np.save(g + '/idx.npy', idx)
for f, v in (('seq_lens', '5000,700'), ('q_lens', '1,1'), ('scale', '0.1')):
    open('%s/%s' % (g, f), 'w').write(v)
EOF
BIG="-q $G/q_absorbed.npy --kv-cache $G/c.npy --kv-dtype fp8_ds_mla --block-table $G/block_table.npy --seq-lens 5000,700 --scale 0.1 --kv-lora-rank 512"
# shellcheck disable=SC2086
{
ok 'tile scales up to 2^110 over 5,000 keys: dense, -j 1' kvattn mla $BIG -j 1 -o "$T/b1.npy" -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
ok "finite and within the bound ($B) of float64 MLA over the rows' values" ref check "$G" "$G/c.npy" "$T/b1.npy" "$B"
ok '-j 2' kvattn mla $BIG -j 2 -o "$T/b2.npy"
ok '-j 1 = -j 2, byte for byte' cmp "$T/b1.npy" "$T/b2.npy"
ok 'sparse, 2,048 of the keys, -j 1' kvattn mla $BIG --topk-indices "$G/idx.npy" -j 1 -o "$T/s1.npy" -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
ok "finite and within the bound ($B) of float64 over the selected rows" ref check "$G" "$G/c.npy" "$T/s1.npy" "$B" "$G/idx.npy"
ok '-j 2' kvattn mla $BIG --topk-indices "$G/idx.npy" -j 2 -o "$T/s2.npy"
ok '-j 1 = -j 2, byte for byte' cmp "$T/s1.npy" "$T/s2.npy"
}
poke() { "$PY" -c "
import numpy as np, sys
c = np.load('$T/c.npy'); c[3, 5, 0, 516:520] = np.frombuffer(np.float32($1).tobytes(), np.uint8); np.save('$T/bad$2.npy', c)"; }
poke "'nan'" 1; poke "'inf'" 2; poke -0.5 3
expect_fail 1 'a NaN scale' kvattn mla --kv-cache "$T/bad1.npy" --kv-dtype fp8_ds_mla $M -o "$T/bad.npy"
said 'it names the row and the tile' "row 53: the scale of c_kv 128..255 is nan"
expect_fail 1 'an infinite scale' kvattn mla --kv-cache "$T/bad2.npy" --kv-dtype fp8_ds_mla $M -o "$T/bad.npy"
expect_fail 1 'a negative scale' kvattn mla --kv-cache "$T/bad3.npy" --kv-dtype fp8_ds_mla $M -o "$T/bad.npy"
kvattn quant --kv-dtype fp8_e4m3 -k "$D/kv_cache.npy" -o "$T/plain8.npy"
expect_fail 1 'a plain FP8 cache (576-byte rows) read as fp8_ds_mla' kvattn mla --kv-cache "$T/plain8.npy" --kv-dtype fp8_ds_mla $M -o "$T/bad.npy"
said 'the message gives the row size' "fp8_ds_mla rows are 656 bytes"
expect_fail 1 'an f32 cache read as fp8_ds_mla' kvattn mla --kv-cache "$D/kv_cache.npy" --kv-dtype fp8_ds_mla $M -o "$T/bad.npy"
expect_fail 2 '--k-scale with fp8_ds_mla' kvattn mla --kv-cache "$T/c.npy" --kv-dtype fp8_ds_mla --k-scale 2 $M -o "$T/bad.npy"
expect_fail 2 'a kv_lora_rank other than 512' kvattn mla --kv-cache "$T/c.npy" --kv-dtype fp8_ds_mla -q "$D/q_absorbed.npy" --block-table "$D/block_table.npy" --seq-lens "$SL" --q-lens "$QL" --scale 0.1 --kv-lora-rank 256 -o "$T/bad.npy"
}
"$PY" -c "
import numpy as np
x = np.load('$D/kv_cache.npy'); x[1, 2, 0, 7] = np.nan; np.save('$T/xnan.npy', x)
np.save('$T/x500.npy', x[..., :500])"
expect_fail 1 'quant: a NaN c_kv value' kvattn quant --kv-dtype fp8_ds_mla -k "$T/xnan.npy" -o "$T/bad.npy"
said 'it names the element' "element 10375 (row 18, c_kv 7) is nan"
expect_fail 1 'quant: rows of 500 values' kvattn quant --kv-dtype fp8_ds_mla -k "$T/x500.npy" -o "$T/bad.npy"
expect_fail 2 'quant: --k-scale with fp8_ds_mla' kvattn quant --kv-dtype fp8_ds_mla --k-scale 2 -k "$D/kv_cache.npy" -o "$T/bad.npy"
expect_fail 2 'quant: -v with fp8_ds_mla' kvattn quant --kv-dtype fp8_ds_mla -k "$D/kv_cache.npy" -v "$D/kv_cache.npy" -o "$T/bad.npy"
ok 'nothing written on failure' test ! -e "$T/bad.npy"
done_testing
