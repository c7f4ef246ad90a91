#!/bin/sh
# kvattn-fp8.sh - kvattn quant and attention over an FP8 cache: the bytes
# against a NumPy reference that searches the nearest of the format's 256
# values (ties to the even byte) after x / scale and the clamp; per token
# and head scales; run with --kv-dtype against run on the dequantized
# values; bad input.
. "$KV_TOP/tests/lib.sh"
need_numpy
cat >"$T/ref.py" <<'EOF'
# The FP8 reference, independent of kvtools' conversion: decode every byte
# from the format's definition, then pick the nearest finite value.
import sys, numpy as np
def values(fmt):
    m, bias = (3, 7) if fmt == 'fp8_e4m3' else (2, 15)
    out = np.empty(256)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        f, mant = (b & 0x7f) >> m, b & ((1 << m) - 1)
        top = 0x7f >> m
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
def quant(x32, fmt):
    vals = values(fmt)
    mx = 448.0 if fmt == 'fp8_e4m3' else 57344.0
    fin = np.where(np.isfinite(vals[:128]))[0]
    q = np.empty(x32.shape, np.uint8)
    for i, x in enumerate(x32.ravel()):
        if np.isnan(x):
            q.flat[i] = 0x7f | (0x80 if np.signbit(x) else 0); continue
        a = min(abs(float(x)), mx)
        d = np.abs(vals[fin] - a)
        best = fin[d == d.min()]
        b = best[0] if len(best) == 1 else [c for c in best if c % 2 == 0][0]
        q.flat[i] = b | (0x80 if np.signbit(x) else 0)
    return q
def load(p):
    return np.load(p)
cmd = sys.argv[1]
if cmd == 'gen':
    rng = np.random.default_rng(int(sys.argv[3]))
    x = (rng.standard_normal((3, 2, 17, 8)) * np.exp(rng.uniform(-12, 6, (3, 2, 17, 8)))).astype(np.float32)
    x.flat[:6] = [0.0, -0.0, np.inf, -np.inf, 1e30, -1e-30]
    np.save(sys.argv[2], x)
elif cmd == 'gen-finite':
    rng = np.random.default_rng(int(sys.argv[3]))
    np.save(sys.argv[2], (rng.standard_normal(tuple(int(v) for v in sys.argv[4].split(','))) * 3).astype(np.float32))
elif cmd == 'check':   # x.npy q.npy fmt scale
    x = load(sys.argv[2]); q = load(sys.argv[3]); fmt = sys.argv[4]
    s = np.float32(sys.argv[5])
    want = quant((x.astype(np.float32) / s).astype(np.float32), fmt)
    assert q.dtype == np.uint8 and q.shape == x.shape, (q.dtype, q.shape)
    bad = int((q != want).sum())
    print(bad); sys.exit(1 if bad else 0)
elif cmd == 'check-cache':   # cache.npy q.npy fmt kscale vscale
    x = load(sys.argv[2]); q = load(sys.argv[3]); fmt = sys.argv[4]
    ks, vs = np.float32(sys.argv[5]), np.float32(sys.argv[6])
    want = np.concatenate([quant((x[0] / ks).astype(np.float32), fmt)[None],
                           quant((x[1] / vs).astype(np.float32), fmt)[None]])
    bad = int((q != want).sum()); print(bad); sys.exit(1 if bad else 0)
elif cmd == 'check-pth':   # x.npy q.npy scales.npy
    x = load(sys.argv[2]).astype(np.float32); q = load(sys.argv[3]); sc = load(sys.argv[4])
    amax = np.abs(x).max(axis=-1)
    s = np.maximum((amax / np.float32(448)).astype(np.float32), np.float32(1e-6))
    inv = (np.float32(1) / s).astype(np.float32)
    want = quant((x * inv[..., None]).astype(np.float32), 'fp8_e4m3')
    bad = int((q != want).sum()) + int((sc != s).sum()); print(bad); sys.exit(1 if bad else 0)
elif cmd == 'dequant':   # q.npy fmt scale out.npy
    vals = values(sys.argv[3]).astype(np.float32)
    np.save(sys.argv[5], vals[load(sys.argv[2])] * np.float32(sys.argv[4]))
elif cmd == 'dequant-cache':   # q.npy fmt ks vs out.npy
    vals = values(sys.argv[3]).astype(np.float32); q = load(sys.argv[2])
    np.save(sys.argv[6], np.concatenate([(vals[q[0]] * np.float32(sys.argv[4]))[None],
                                         (vals[q[1]] * np.float32(sys.argv[5]))[None]]))
EOF
ref() { "$PY" "$T/ref.py" "$@"; }

ref gen "$T/x.npy" 7
for fmt in fp8_e4m3 fp8_e5m2; do
    for s in 1 0.0173 3.5; do
        ok "quant $fmt scale $s" kvattn quant --kv-dtype $fmt --k-scale $s -k "$T/x.npy" -o "$T/q.npy"
        ok "quant $fmt scale $s: bytes = nearest-value reference (saturation, NaN, zeros)" \
            ref check "$T/x.npy" "$T/q.npy" $fmt $s
    done
done
# bf16 input: the values widen to f32 first
"$PY" -c "
import numpy as np
x = np.load('$T/x.npy'); b = (x.view(np.uint32) >> 16).astype(np.uint16)
import sys
with open('$T/xb.npy', 'wb') as f:
    h = \"{'descr': '<V2', 'fortran_order': False, 'shape': %r, }\" % (x.shape,)
    h = h + ' ' * (118 - len(h)) + '\n'
    f.write(b'\x93NUMPY\x01\x00' + len(h).to_bytes(2, 'little') + h.encode()); f.write(b.tobytes())
np.save('$T/xbf.npy', (b.astype(np.uint32) << 16).view(np.float32))
"
ok 'quant bf16 input' kvattn quant --kv-dtype fp8_e4m3 --k-scale 0.5 -k "$T/xb.npy" -o "$T/qb.npy"
ok 'quant bf16 = quant of its f32 values' ref check "$T/xbf.npy" "$T/qb.npy" fp8_e4m3 0.5
# -k and -v into one stream, or V to its own file
ref gen "$T/y.npy" 8
ok 'quant -k -v --v-out' kvattn quant --kv-dtype fp8_e5m2 --k-scale 2 --v-scale 0.25 -k "$T/x.npy" -v "$T/y.npy" -o "$T/qk.npy" --v-out "$T/qv.npy"
ok 'K bytes' ref check "$T/x.npy" "$T/qk.npy" fp8_e5m2 2
ok 'V bytes with --v-scale' ref check "$T/y.npy" "$T/qv.npy" fp8_e5m2 0.25
ok 'quant -k -v into one stream' kvattn quant --kv-dtype fp8_e5m2 --k-scale 2 --v-scale 0.25 -k "$T/x.npy" -v "$T/y.npy" -o "$T/qkv.npy"
expect_eq 'the stream is K then V' "$(cat "$T/qk.npy" "$T/qv.npy" | cksum)" "$(cksum <"$T/qkv.npy")"
# per token and head
ref gen-finite "$T/f.npy" 3 5,4,16
ok 'quant fp8_per_token_head' kvattn quant --kv-dtype fp8_per_token_head -k "$T/f.npy" -o "$T/pq.npy" --scales-out "$T/ps.npy"
ok 'per token head: scales and bytes = reference' ref check-pth "$T/f.npy" "$T/pq.npy" "$T/ps.npy"

# attention over the FP8 cache = attention over its dequantized values
ref gen-finite "$T/q.npy" 4 1,4,9,16
ref gen-finite "$T/k.npy" 5 1,2,13,16
ref gen-finite "$T/v.npy" 6 1,2,13,16
ok 'quant K, V' kvattn quant --kv-dtype fp8_e4m3 --k-scale 0.02 --v-scale 0.03 -k "$T/k.npy" -v "$T/v.npy" -o "$T/k8.npy" --v-out "$T/v8.npy"
ref dequant "$T/k8.npy" fp8_e4m3 0.02 "$T/kd.npy"
ref dequant "$T/v8.npy" fp8_e4m3 0.03 "$T/vd.npy"
ok 'run on the dequantized values' kvattn run -q "$T/q.npy" -k "$T/kd.npy" -v "$T/vd.npy" --causal -o "$T/o_ref.npy" --lse "$T/l_ref.npy"
ok 'run --kv-dtype fp8_e4m3' kvattn run -q "$T/q.npy" -k "$T/k8.npy" -v "$T/v8.npy" --kv-dtype fp8_e4m3 --k-scale 0.02 --v-scale 0.03 --causal -o "$T/o8.npy" --lse "$T/l8.npy"
expect_file_eq 'FP8 output = output on the dequantized values (bit for bit)' "$T/o8.npy" "$T/o_ref.npy"
expect_file_eq 'FP8 LSE = LSE on the dequantized values' "$T/l8.npy" "$T/l_ref.npy"
# paged cache [2, num_blocks, block_size, Hkv, D]
ref gen-finite "$T/c.npy" 9 2,4,4,2,16
ref gen-finite "$T/qt.npy" 10 3,4,16
printf '1 3 2\n' >"$T/bt.txt"
ok 'quant --kv-cache' kvattn quant --kv-dtype fp8_e5m2 --kv-cache "$T/c.npy" --k-scale 0.5 --v-scale 0.125 -o "$T/c8.npy"
ok 'cache bytes: keys with --k-scale, values with --v-scale' ref check-cache "$T/c.npy" "$T/c8.npy" fp8_e5m2 0.5 0.125
"$PY" "$T/ref.py" dequant-cache "$T/c8.npy" fp8_e5m2 0.5 0.125 "$T/cd.npy"
ok 'paged run on the dequantized cache' kvattn run -q "$T/qt.npy" --layout thd --kv-cache "$T/cd.npy" --block-table "$T/bt.txt" --seq-lens 11 --q-lens 3 -o "$T/po_ref.npy"
ok 'paged run --kv-dtype fp8_e5m2' kvattn run -q "$T/qt.npy" --layout thd --kv-cache "$T/c8.npy" --block-table "$T/bt.txt" --seq-lens 11 --q-lens 3 --kv-dtype fp8_e5m2 --k-scale 0.5 --v-scale 0.125 -o "$T/po8.npy"
# (decode mode: the kernels fold the scales into each score and output row,
# exactly when they are powers of two, as here)
expect_file_eq 'paged FP8 output = output on the dequantized cache (scales powers of two)' "$T/po8.npy" "$T/po_ref.npy"

# paged decode over FP8 bytes (the decode kernels read them in place where
# the CPU has AVX2 or AVX-512) against float64 attention over the bytes' exact
# values times the scales, within the bound kvattn(1) states for the kernels:
# that of kvattn bound for head dim d + 1 (Q and K given a zero feature, the
# scale 1/sqrt(d) kept) plus 1.01 u V; every finite byte (subnormals, the
# largest) in two cases; and, in two more, softcap, ALiBi and sinks, which
# act on the score with scale and k_scale in it
cat >"$T/dec.py" <<'EOF'
import sys, numpy as np
exec(open(sys.argv[1]).read().split("cmd = sys.argv[1]")[0])
d, fmt, seed, kind = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
ks, vs = np.float32(sys.argv[6]), np.float32(sys.argv[7])
rng = np.random.default_rng(seed)
Hq, Hkv, D, bs, S = 8, 2, 64, 16, 300
vals = values(fmt)
fin = np.where(np.isfinite(vals))[0].astype(np.uint8)
nb = (S + bs - 1) // bs + 3
if kind == 'all':
    c8 = rng.choice(fin, size=(2, nb, bs, Hkv, D))
else:
    c8 = quant((rng.standard_normal((2, nb, bs, Hkv, D)) * 2).astype(np.float32), fmt)
perm = rng.permutation(nb)[: (S + bs - 1) // bs]
q = (rng.standard_normal((1, Hq, D)) * (0.01 if kind == 'all' else 1)).astype(np.float32)
kf = (vals[c8[0]].astype(np.float32) * ks)[perm].reshape(-1, Hkv, D)[:S]
vf = (vals[c8[1]].astype(np.float32) * vs)[perm].reshape(-1, Hkv, D)[:S]
np.save(d + '/dc8.npy', c8.astype(np.uint8))
np.savetxt(d + '/dbt.txt', perm[None], fmt='%d')
np.save(d + '/dq.npy', q)
pad = lambda x: np.concatenate([x, np.zeros(x.shape[:-1] + (1,), np.float32)], -1)
np.save(d + '/dbq.npy', pad(q[:, :, None, :]))
np.save(d + '/dbk.npy', pad(kf.transpose(1, 0, 2)[None]))
np.save(d + '/dbv.npy', vf.transpose(1, 0, 2)[None])
k64 = (vals[c8[0]] * np.float64(ks))[perm].reshape(-1, Hkv, D)[:S]
v64 = (vals[c8[1]] * np.float64(vs))[perm].reshape(-1, Hkv, D)[:S]
o = np.empty((1, Hq, D)); l = np.empty((1, Hq))
var = len(sys.argv) > 8   # softcap 5, standard ALiBi slopes, sinks
sk = (rng.standard_normal(Hq) * 3).astype(np.float32)
np.save(d + '/dsk.npy', sk)
for h in range(Hq):
    s = k64[:, h // (Hq // Hkv)] @ q[0, h].astype(np.float64) / np.sqrt(D)
    if var:
        s = 5 * np.tanh(s / 5) + 2.0 ** -(h + 1) * (np.arange(S) - (S - 1))
    m = max(s.max(), sk[h]) if var else s.max(); p = np.exp(s - m)
    z = p.sum() + (np.exp(np.float64(sk[h]) - m) if var else 0)
    o[0, h] = p @ v64[:, h // (Hq // Hkv)] / z; l[0, h] = m + np.log(z)
np.save(d + '/dro.npy', o.astype(np.float32)); np.save(d + '/drl.npy', l.astype(np.float32))
EOF
for c in "fp8_e4m3 1 near 0.02 0.03" "fp8_e5m2 2 near 0.5 0.125" "fp8_e4m3 3 all 0.001 0.002" \
         "fp8_e5m2 4 all 1e-4 3e-5" "fp8_e4m3 5 near 0.37 0.61 var" "fp8_e5m2 6 near 3.5 0.25 var"; do
    # shellcheck disable=SC2086
    set -- $c
    # var: softcap, ALiBi and sinks, applied to the score with k_scale in it
    vr=
    [ "${6:-}" = var ] && vr="--softcap 5 --alibi --sinks $T/dsk.npy"
    lab="$1 $3 bytes${vr:+, softcap, ALiBi, sinks}"
    ok "decode $lab: inputs" "$PY" "$T/dec.py" "$T/ref.py" "$T" "$@"
    # shellcheck disable=SC2086
    b=$(kvattn bound --all --scale 0.125 $vr -q "$T/dbq.npy" -k "$T/dbk.npy" -v "$T/dbv.npy")
    bo=$(echo "$b" | awk '$1 == "out:" { o = $2 } $1 == "v_max:" { v = $2 }
        END { printf "%.6g", o + 1.01 * v / 16777216 }')
    bl=$(echo "$b" | sed -n 's/^lse: //p')
    # shellcheck disable=SC2086
    ok "decode $lab: run" kvattn run --layout thd -q "$T/dq.npy" --kv-cache "$T/dc8.npy" \
        --block-table "$T/dbt.txt" --seq-lens 300 --kv-dtype "$1" --k-scale "$4" --v-scale "$5" \
        $vr -o "$T/do.npy" --lse "$T/dl.npy" -j 2
    ok "decode $lab: output within the bound $bo of float64" \
        kvattn cmp --atol "$bo" --rtol 0 "$T/do.npy" "$T/dro.npy"
    ok "decode $lab: LSE within the bound $bl" \
        kvattn cmp --atol "$bl" --rtol 0 "$T/dl.npy" "$T/drl.npy"
    # shellcheck disable=SC2086
    ok "decode $lab: -j 1" kvattn run --layout thd -q "$T/dq.npy" --kv-cache "$T/dc8.npy" \
        --block-table "$T/dbt.txt" --seq-lens 300 --kv-dtype "$1" --k-scale "$4" --v-scale "$5" \
        $vr -o "$T/do1.npy" -j 1
    expect_file_eq "decode $lab: -j 1 and -j 2 give the same bytes" "$T/do1.npy" "$T/do.npy"
done

# a value scale near the top of f32 over 2,048 keys: the output is at
# most max|v| v_scale, finite, but the unnormalised sum of the weighted
# values is not, so every route divides by the sum of the weights before
# the value scale comes in; against float64, within the bound above, for
# the decode kernels (paged, one query), the dequantized cache (paged with
# --scalar, and 64 causal queries on the tiles) and dense K and V
cat >"$T/big.py" <<'EOF'
import sys, numpy as np
exec(open(sys.argv[1]).read().split("cmd = sys.argv[1]")[0])
d, fmt, ks, vs = sys.argv[2], sys.argv[3], np.float32(sys.argv[4]), np.float32(sys.argv[5])
rng = np.random.default_rng(11)
Hq, Hkv, D, bs, S, L = 4, 2, 32, 16, 2048, 64
vals = values(fmt)
fin = np.where(np.isfinite(vals) & (vals > 0))[0]
big = fin[vals[fin] >= vals[fin].max() / 8]      # the largest values, one sign a feature
nb = S // bs + 2
c8 = np.empty((2, nb, bs, Hkv, D), np.uint8)
c8[0] = quant(rng.standard_normal((nb, bs, Hkv, D)).astype(np.float32), fmt)
c8[1] = rng.choice(big, size=(nb, bs, Hkv, D)) | np.where(np.arange(D) % 3 == 0, 0x80, 0)
perm = rng.permutation(nb)[: S // bs]
k8 = c8[0][perm].reshape(S, Hkv, D); v8 = c8[1][perm].reshape(S, Hkv, D)
q = rng.standard_normal((L, Hq, D)).astype(np.float32)
np.save(d + '/bc8.npy', c8); np.savetxt(d + '/bbt.txt', perm[None], fmt='%d')
np.save(d + '/bq1.npy', q[-1:]); np.save(d + '/bq.npy', q)
np.save(d + '/bk8.npy', k8.transpose(1, 0, 2)[None]); np.save(d + '/bv8.npy', v8.transpose(1, 0, 2)[None])
np.save(d + '/bqd.npy', q[-1:].transpose(1, 0, 2)[None])
pad = lambda x: np.concatenate([x, np.zeros(x.shape[:-1] + (1,), np.float32)], -1)
np.save(d + '/bbq.npy', pad(q.transpose(1, 0, 2)[None]))
np.save(d + '/bbk.npy', pad((vals[k8] * ks).astype(np.float32).transpose(1, 0, 2)[None]))
np.save(d + '/bbv.npy', (vals[v8] * vs).astype(np.float32).transpose(1, 0, 2)[None])
k64, v64 = vals[k8] * np.float64(ks), vals[v8] * np.float64(vs)
o = np.empty((L, Hq, D))
for i in range(L):
    n = S - L + i + 1
    for h in range(Hq):
        s = k64[:n, h // (Hq // Hkv)] @ q[i, h].astype(np.float64) / np.sqrt(D)
        p = np.exp(s - s.max())
        o[i, h] = p @ v64[:n, h // (Hq // Hkv)] / p.sum()
assert np.isfinite(o.astype(np.float32)).all()
np.save(d + '/bro.npy', o.astype(np.float32)); np.save(d + '/bro1.npy', o[-1:].astype(np.float32))
np.save(d + '/brod.npy', o[-1:].astype(np.float32).transpose(1, 0, 2)[None])
EOF
for c in "fp8_e4m3 0.05 1e35" "fp8_e5m2 1e-4 5e33"; do
    # shellcheck disable=SC2086
    set -- $c
    lab="v_scale $3 ($1)"
    ok "$lab: inputs" "$PY" "$T/big.py" "$T/ref.py" "$T" "$@"
    b=$(kvattn bound --all --scale 0.1767766952966369 -q "$T/bbq.npy" -k "$T/bbk.npy" -v "$T/bbv.npy")
    bo=$(echo "$b" | awk '$1 == "out:" { o = $2 } $1 == "v_max:" { v = $2 }
        END { printf "%.6g", o + 1.01 * v / 16777216 }')
    f8="--kv-dtype $1 --k-scale $2 --v-scale $3"
    pg="--layout thd --kv-cache $T/bc8.npy --block-table $T/bbt.txt --seq-lens 2048"
    # shellcheck disable=SC2086
    ok "$lab: paged decode" kvattn run -q "$T/bq1.npy" $pg --q-lens 1 $f8 -o "$T/bo1.npy" -j 2
    ok "$lab: paged decode within the bound $bo of float64" \
        kvattn cmp --atol "$bo" --rtol 0 "$T/bo1.npy" "$T/bro1.npy"
    # shellcheck disable=SC2086
    ok "$lab: -j 1" kvattn run -q "$T/bq1.npy" $pg --q-lens 1 $f8 -o "$T/bo1j.npy" -j 1
    expect_file_eq "$lab: -j 1 and -j 2 give the same bytes" "$T/bo1j.npy" "$T/bo1.npy"
    # shellcheck disable=SC2086
    ok "$lab: paged decode, dequantized (--scalar)" kvattn run -q "$T/bq1.npy" $pg \
        --q-lens 1 $f8 --scalar -o "$T/bo1s.npy"
    ok "$lab: dequantized within the bound" \
        kvattn cmp --atol "$bo" --rtol 0 "$T/bo1s.npy" "$T/bro1.npy"
    # shellcheck disable=SC2086
    ok "$lab: 64 causal queries, paged" kvattn run -q "$T/bq.npy" $pg --q-lens 64 \
        --causal $f8 -o "$T/bo.npy" -j 2
    ok "$lab: 64 queries within the bound" kvattn cmp --atol "$bo" --rtol 0 "$T/bo.npy" "$T/bro.npy"
    # shellcheck disable=SC2086
    ok "$lab: dense K and V" kvattn run -q "$T/bqd.npy" -k "$T/bk8.npy" -v "$T/bv8.npy" \
        $f8 -o "$T/bod.npy"
    ok "$lab: dense within the bound" kvattn cmp --atol "$bo" --rtol 0 "$T/bod.npy" "$T/brod.npy"
done

# bad input
expect_fail 2 'quant without --kv-dtype' kvattn quant -k "$T/x.npy" -o "$T/bad.npy"
expect_fail 2 'unknown --kv-dtype' kvattn quant --kv-dtype fp8_e4m3fnuz -k "$T/x.npy" -o "$T/bad.npy"
expect_fail 2 '--k-scale 0' kvattn quant --kv-dtype fp8 --k-scale 0 -k "$T/x.npy" -o "$T/bad.npy"
expect_fail 2 '--k-scale nan' kvattn quant --kv-dtype fp8 --k-scale nan -k "$T/x.npy" -o "$T/bad.npy"
expect_fail 2 '--k-scale 1e-60 (zero in f32)' kvattn quant --kv-dtype fp8 --k-scale 1e-60 -k "$T/x.npy" -o "$T/bad.npy"
expect_fail 2 '--v-scale without -v' kvattn quant --kv-dtype fp8 --v-scale 2 -k "$T/x.npy" -o "$T/bad.npy"
expect_fail 2 '-o and --v-out one file' kvattn quant --kv-dtype fp8 -k "$T/x.npy" -v "$T/y.npy" -o "$T/same.npy" --v-out "$T/same.npy"
expect_fail 2 'per token head without --scales-out' kvattn quant --kv-dtype fp8_per_token_head -k "$T/f.npy" -o "$T/bad.npy"
expect_fail 2 'per token head with --k-scale' kvattn quant --kv-dtype fp8_per_token_head --k-scale 2 -k "$T/f.npy" -o "$T/bad.npy" --scales-out "$T/bs.npy"
expect_fail 1 'per token head on non-finite values' kvattn quant --kv-dtype fp8_per_token_head -k "$T/x.npy" -o "$T/bad.npy" --scales-out "$T/bs.npy"
expect_fail 1 'quant of an integer array' kvattn quant --kv-dtype fp8 -k "$T/k8.npy" -o "$T/bad.npy"
expect_fail 1 'run --kv-dtype on f32 keys' kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --kv-dtype fp8_e4m3 -o "$T/bad.npy"
expect_fail 2 'run --k-scale without --kv-dtype' kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --k-scale 2 -o "$T/bad.npy"
expect_fail 2 'run --k-scale -1' kvattn run -q "$T/q.npy" -k "$T/k8.npy" -v "$T/v8.npy" --kv-dtype fp8 --k-scale -1 -o "$T/bad.npy"
ok 'nothing written on failure' test ! -e "$T/bad.npy"
done_testing
