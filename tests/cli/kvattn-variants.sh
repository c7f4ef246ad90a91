#!/bin/sh
# kvattn-variants.sh - kvattn run's variants (--softcap, --alibi,
# --alibi-slopes, --sinks) against a float64 NumPy reference on random
# shapes with adversarial magnitudes, through every route (dense tiles,
# decode kernels, thd varlen, paged, explicit and block masks, bf16 tiles,
# the scalar loops, small tiles), each held to the bound kvattn bound
# states for it; -j 1 and -j 2 give the same bytes; kvattn merge with
# sinks; bad input refused.  Runs at every ISA level (tests/run.sh).
. "$KV_TOP/tests/lib.sh"
need_numpy

# The reference: scores in float64 from the same f32 (or bf16) values,
# scale rounded to f32 as kvattn takes it; softcap C tanh(s / C); ALiBi
# slope_h (j - i') with i' = i + Lk - Lq; the causal mask; the sink
# concatenated as one more column, softmax, the column dropped (gpt-oss).
cat >"$T/gen.py" <<'EOF'
import sys, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(int(sys.argv[2]))

def f32(x): return np.float32(x)

def std_slopes(H):
    P = 1
    while P * 2 <= H:
        P *= 2
    b = float(f32(2.0 ** (-8.0 / P))); c = float(f32(2.0 ** (-4.0 / P)))
    s = [b ** (k + 1) for k in range(min(H, P))]
    s += [c ** (2 * (k - P) + 1) for k in range(P, H)]
    return np.array(s, dtype=np.float32)

def bf16(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r

def bf16_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)

def ref(q, k, v, scale, causal, cap, slopes, sinks, mask=None):
    # one request: q [Hq, Lq, D], k/v [Hkv, Lk, D]
    Hq, Lq, D = q.shape; Hkv, Lk = k.shape[0], k.shape[1]; G = Hq // Hkv
    q = q.astype(np.float64); kk = np.repeat(k.astype(np.float64), G, 0)
    vv = np.repeat(v.astype(np.float64), G, 0)
    s = np.einsum('hid,hjd->hij', q, kk) * float(f32(scale))
    if cap:
        s = cap * np.tanh(s / cap)
    i = np.arange(Lq)[:, None] + Lk - Lq; j = np.arange(Lk)[None, :]
    if slopes is not None:
        s = s + slopes.astype(np.float64)[:, None, None] * (j - i)
    keep = np.ones((Hq, Lq, Lk), bool)
    if causal:
        keep &= (j <= i)[None]
    if mask is not None:
        keep &= ~mask
    s = np.where(keep, s, -np.inf)
    if sinks is not None:
        s = np.concatenate([s, np.broadcast_to(sinks.astype(np.float64)[:, None, None],
                                               (Hq, Lq, 1))], -1)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m); l = e.sum(-1, keepdims=True)
    p = e / np.where(l == 0, 1, l)
    if sinks is not None:
        p = p[..., :-1]
    with np.errstate(divide='ignore'):
        lse = (m + np.log(l))[..., 0]
    return p @ vv, lse

cases = []
def case(name, opts, files):
    cases.append((name, opts))
    for f, a in files.items():
        np.save('%s/%s_%s.npy' % (out, name, f), a)

def variant(rng, Hq, big):
    """Pick a variant mix: softcap, alibi (std/file), sinks, with extreme values."""
    cap = [None, 0.25, 3.0, 50.0][rng.integers(4)]
    al = ['none', 'std', 'file'][rng.integers(3)]
    slopes = None
    if al == 'std':
        slopes = std_slopes(Hq)
    elif al == 'file':
        slopes = (rng.standard_normal(Hq) * [0.01, 0.5, 2.0][rng.integers(3)]).astype(np.float32)
    sinks = None
    if rng.integers(3) > 0:
        sinks = (rng.standard_normal(Hq) * [1.0, 8.0, 40.0][rng.integers(3)]).astype(np.float32)
        if big:
            sinks[0] = 60.0      # dominates the row
            sinks[-1] = -80.0    # weighs nothing
    if cap is None and al == 'none' and sinks is None:
        cap = 1.0
    return cap, al, slopes, sinks

def opts_of(cap, al, slopes, sinks, name):
    o = []
    if cap: o += ['--softcap', repr(cap)]
    if al == 'std': o += ['--alibi']
    if al == 'file': o += ['--alibi-slopes', '@%s_slopes.npy' % name]
    if sinks is not None: o += ['--sinks', '@%s_sinks.npy' % name]
    return o

n = 0
for route in ['dense', 'dense', 'decode', 'thd', 'paged', 'mask', 'block', 'bf16', 'scalar',
              'tiles', 'empty']:
    n += 1
    name = 'c%02d_%s' % (n, route)
    Hkv = int(rng.integers(1, 3)); G = int([1, 2, 4][rng.integers(3)]); Hq = Hkv * G
    if route == 'dense' and n == 1:
        Hq, Hkv, G = 12, 12, 1       # non-power-of-two heads: the extra slopes
    D = int([16, 32, 64, 80, 128][rng.integers(5)])
    if route in ('decode', 'paged', 'bf16'):
        D = int([32, 64, 128][rng.integers(3)])
    Lk = int(rng.integers(20, 700))
    Lq = int(rng.integers(1, 5)) if route in ('decode', 'paged') else int(rng.integers(1, min(Lk, 200) + 1))
    if route == 'empty':
        Lq = Lk + 7                  # the first 7 rows see nothing
    big = rng.integers(2) == 1
    qs = [0.3, 3.0, 12.0][rng.integers(3)]
    q = (rng.standard_normal((Hq, Lq, D)) * qs).astype(np.float32)
    k = (rng.standard_normal((Hkv, Lk, D))).astype(np.float32)
    vscale = 1000.0 if big else 1.0
    v = (rng.standard_normal((Hkv, Lk, D)) * vscale).astype(np.float32)
    if route == 'bf16':
        qb, kb, vb = bf16(q), bf16(k), bf16(v)
        q, k, v = bf16_f32(qb), bf16_f32(kb), bf16_f32(vb)
    cap, al, slopes, sinks = variant(rng, Hq, big)
    if route == 'dense' and n == 1:
        al, slopes = 'std', std_slopes(Hq)
    if route in ('bf16', 'decode', 'paged'):     # all three on these routes
        cap = cap or 3.0
        if al == 'none':
            al, slopes = 'std', std_slopes(Hq)
        if sinks is None:
            sinks = (rng.standard_normal(Hq) * 8.0).astype(np.float32)
    causal = route != 'mask' or rng.integers(2) == 1
    scale = 1.0 / np.sqrt(D)
    files = {}
    if slopes is not None and al == 'file': files['slopes'] = slopes
    if sinks is not None: files['sinks'] = sinks
    vo = opts_of(cap, al, slopes, sinks, name)
    mask = None
    if route in ('dense', 'scalar', 'tiles', 'empty', 'decode', 'mask', 'block'):
        files.update(q=q[None], k=k[None], v=v[None])
        run = ['-q', '@%s_q.npy' % name, '-k', '@%s_k.npy' % name, '-v', '@%s_v.npy' % name]
        if route == 'mask':
            mask = rng.random((Hq, Lq, Lk)) < 0.3
            files['mask'] = mask
            run += ['--mask', '@%s_mask.npy' % name]
        if route == 'block':
            bs = 16
            nb = ((Lq + bs - 1) // bs, (Lk + bs - 1) // bs)
            bm = rng.random((1, 1) + nb) < 0.6
            files['bm'] = bm
            run += ['--block-mask', '@%s_bm.npy' % name, '--block-size', '16']
            mask = ~np.repeat(np.repeat(bm[0, 0], bs, 0), bs, 1)[:Lq, :Lk]
            mask = np.broadcast_to(mask, (Hq, Lq, Lk))
        if route == 'scalar': run += ['--scalar']
        if route == 'tiles': run += ['--tile-q', '5', '--tile-k', '7']
        o, l = ref(q, k, v, scale, causal, cap, slopes, sinks, mask)
        files.update(ro=o[None].astype(np.float32), rl=l[None].astype(np.float32))
        files.update(bq=q[None], bk=k[None], bv=v[None])
    elif route == 'bf16':
        files.update(q=qb[None].view('V2'), k=kb[None].view('V2'), v=vb[None].view('V2'))
        run = ['-q', '@%s_q.npy' % name, '-k', '@%s_k.npy' % name, '-v', '@%s_v.npy' % name,
               '--out-dtype', 'f32']
        o, l = ref(q, k, v, scale, causal, cap, slopes, sinks)
        files.update(ro=o[None].astype(np.float32), rl=l[None].astype(np.float32))
        files.update(bq=qb[None].view('V2'), bk=kb[None].view('V2'), bv=vb[None].view('V2'))
    else:
        # thd: three requests; paged: the same through a block cache
        R = 3
        lks = [int(rng.integers(1, 300)) for _ in range(R)]
        lqs = [int(rng.integers(1, 5)) if route == 'paged' else int(rng.integers(1, x + 1)) for x in lks]
        qs_, ks_, vs_, os_, ls_ = [], [], [], [], []
        for r in range(R):
            qr = (rng.standard_normal((Hq, lqs[r], D)) * 3.0).astype(np.float32)
            kr = rng.standard_normal((Hkv, lks[r], D)).astype(np.float32)
            vr = (rng.standard_normal((Hkv, lks[r], D)) * vscale).astype(np.float32)
            o, l = ref(qr, kr, vr, scale, True, cap, slopes, sinks)
            qs_.append(qr.transpose(1, 0, 2)); ks_.append(kr.transpose(1, 0, 2))
            vs_.append(vr.transpose(1, 0, 2)); os_.append(o.transpose(1, 0, 2)); ls_.append(np.ascontiguousarray(l.T))
        Q = np.concatenate(qs_); Kt = np.concatenate(ks_); Vt = np.concatenate(vs_)
        files.update(q=Q, ro=np.concatenate(os_).astype(np.float32),
                     rl=np.concatenate(ls_).astype(np.float32), bq=Q, bk=Kt, bv=Vt)
        run = ['--layout', 'thd', '-q', '@%s_q.npy' % name, '--causal',
               '--q-lens', ','.join(map(str, lqs))]
        if route == 'thd':
            files.update(k=Kt, v=Vt)
            run += ['-k', '@%s_k.npy' % name, '-v', '@%s_v.npy' % name,
                    '--kv-lens', ','.join(map(str, lks))]
        else:
            bsz = 16
            nblk = sum((x + bsz - 1) // bsz for x in lks) + 2
            cache = np.zeros((2, nblk, bsz, Hkv, D), np.float32)
            perm = rng.permutation(np.arange(1, nblk))
            cols = max((x + bsz - 1) // bsz for x in lks)
            bt = np.zeros((R, cols), np.int32); at = 0; off = 0
            for r in range(R):
                for c in range((lks[r] + bsz - 1) // bsz):
                    blk = perm[at]; at += 1
                    a, z = c * bsz, min((c + 1) * bsz, lks[r])
                    cache[0, blk, :z - a] = ks_[r][a:z]
                    cache[1, blk, :z - a] = vs_[r][a:z]
                    bt[r, c] = blk
            files.update(cache=cache, bt=bt)
            run += ['--kv-cache', '@%s_cache.npy' % name, '--block-table', '@%s_bt.npy' % name,
                    '--seq-lens', ','.join(map(str, lks))]
    if causal and route != 'thd' and route != 'paged':
        run += ['--causal']
    case(name, run + vo, files)

with open(out + '/cases', 'w') as f:
    for name, opts in cases:
        f.write(name + ' ' + ' '.join(opts) + '\n')
EOF

# The bound kvattn bound states for a case: its variant options only
bound_opts() {   # case options...: the variant options among them
    _o=
    while [ $# -gt 0 ]; do
        case $1 in
        --softcap|--alibi-slopes|--sinks) _o="$_o $1 $2"; shift 2 ;;
        --alibi) _o="$_o $1"; shift ;;
        --mask) _o="$_o --mask-max 0"; shift 2 ;;
        *) shift ;;
        esac
    done
    echo "$_o"
}

for seed in 1 2; do
    mkdir -p "$T/s$seed"
    if ! "$PY" "$T/gen.py" "$T/s$seed" $seed >"$T/.gen" 2>&1; then
        _report 1 "reference generator, seed $seed" "$(head -c 600 "$T/.gen")"; continue
    fi
    while read -r name rest; do
        # shellcheck disable=SC2086
        set -- $(echo "$rest" | sed "s|@|$T/s$seed/|g")
        b=$(bound_opts "$@")
        # shellcheck disable=SC2086
        if ! kvattn bound --all -q "$T/s$seed/${name}_bq.npy" -k "$T/s$seed/${name}_bk.npy" \
            -v "$T/s$seed/${name}_bv.npy" $(echo "$b" | sed "s|@|$T/s$seed/|g") >"$T/.b" 2>&1; then
            _report 1 "$name: kvattn bound" "$(head -c 600 "$T/.b")"; continue
        fi
        bo=$(sed -n 's/^out: //p' "$T/.b"); bl=$(sed -n 's/^lse: //p' "$T/.b")
        ok "seed $seed $name: run $rest" kvattn run "$@" -o "$T/o.npy" --lse "$T/l.npy" -j 2
        ok "seed $seed $name: output within the bound $bo" \
            kvattn cmp --atol "$bo" --rtol 0 "$T/o.npy" "$T/s$seed/${name}_ro.npy"
        ok "seed $seed $name: LSE within the bound $bl" \
            kvattn cmp --atol "$bl" --rtol 0 "$T/l.npy" "$T/s$seed/${name}_rl.npy"
        ok "seed $seed $name: -j 1" kvattn run "$@" -o "$T/o1.npy" --lse "$T/l1.npy" -j 1
        expect_file_eq "seed $seed $name: -j 1 and -j 2 give the same output bytes" "$T/o1.npy" "$T/o.npy"
        expect_file_eq "seed $seed $name: and the same LSE bytes" "$T/l1.npy" "$T/l.npy"
    done <"$T/s$seed/cases"
done

# --- hand-checked values
"$PY" - "$T" <<'EOF'
import sys, numpy as np
t = sys.argv[1]
np.save(t + '/hq.npy', np.zeros((1, 2, 1, 4), np.float32))
np.save(t + '/hk.npy', np.zeros((1, 1, 3, 4), np.float32))
v = np.zeros((1, 1, 3, 4), np.float32); v[0, 0, :, 0] = [1, 2, 3]
np.save(t + '/hv.npy', v)
np.save(t + '/hs.npy', np.array([0.0, np.log(3.0)], np.float32))
np.save(t + '/hs1.npy', np.array([0.0], np.float32))
np.save(t + '/hsi.npy', np.array([0.0, np.inf], np.float32))
np.save(t + '/hsd.npy', np.array([0, 1], np.int32))
np.save(t + '/hs2d.npy', np.zeros((1, 2), np.float32))
np.save(t + '/sl.npy', np.array([1.0, 0.5], np.float32))
EOF
# scores 0: three keys of weight 1 and a sink e^0 (head 0) or e^ln3 = 3
# (head 1): out = (1 + 2 + 3) / 4 = 1.5 and 6 / 6 = 1, LSE = log 4, log 6
text6() {   # the numbers of a text output, 6 decimals, blank lines dropped
    awk 'NF { for (i = 1; i <= NF; i++) printf "%s%.6f", (i > 1 ? " " : ""), $i; print "" }' "$1"
}
ok 'sinks: zero scores' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --sinks "$T/hs.npy" -f text -o "$T/h.txt" --lse "$T/hl.txt"
expect_eq 'sinks: out (1+2+3)/4 and 6/6' "$(text6 "$T/h.txt")" '1.500000 0.000000 0.000000 0.000000
1.000000 0.000000 0.000000 0.000000'
expect_eq 'sinks: the LSE includes the sink (log 4, log 6)' "$(text6 "$T/hl.txt")" '1.386294
1.791759'
# ALiBi slopes 1 and 0.5 on zero scores, one query at position 2: biases
# -2, -1, 0 and -1, -0.5, 0
"$PY" -c 'import math
for s in (1.0, 0.5):
    w = [math.exp(-s * d) for d in (2, 1, 0)]
    print("%.6f" % (sum(x * y for x, y in zip(w, (1, 2, 3))) / sum(w)))' >"$T/al.want"
kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --alibi-slopes "$T/sl.npy" -f text >"$T/al.txt" 2>&1
expect_eq 'alibi-slopes: slope (j - i) on zero scores' \
    "$(awk 'NF { printf "%.6f\n", $1 }' "$T/al.txt")" "$(cat "$T/al.want")"
# the standard slopes of 2 heads are 2^-4 and 2^-8
"$PY" -c 'import numpy as np; np.save("'"$T"'/sl2.npy", np.array([2.0**-4, 2.0**-8], np.float32))'
ok '--alibi on 2 heads' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --alibi -o "$T/a1.npy" --lse "$T/a1l.npy"
ok '--alibi-slopes 2^-4, 2^-8' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --alibi-slopes "$T/sl2.npy" -o "$T/a2.npy" --lse "$T/a2l.npy"
expect_file_eq 'the standard slopes of 2 heads are 2^-4 and 2^-8' "$T/a1.npy" "$T/a2.npy"
# softcap: zero scores stay zero (plain average 2), and a row that sees
# nothing with a sink gives 0 and LSE = the sink
ok 'softcap of zero scores' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --softcap 0.1 -f text -o "$T/sc.txt"
expect_eq 'softcap of zero scores: the plain mean' "$(text6 "$T/sc.txt")" '2.000000 0.000000 0.000000 0.000000
2.000000 0.000000 0.000000 0.000000'
"$PY" -c 'import numpy as np; np.save("'"$T"'/m.npy", np.ones((1, 1, 1, 3), bool))'
ok 'a fully masked row with a sink' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --mask "$T/m.npy" --sinks "$T/hs.npy" -f text -o "$T/mo.txt" --lse "$T/ml.txt"
expect_eq 'a fully masked row with a sink: 0' "$(text6 "$T/mo.txt")" '0.000000 0.000000 0.000000 0.000000
0.000000 0.000000 0.000000 0.000000'
expect_eq 'and LSE = the sink' "$(text6 "$T/ml.txt")" '0.000000
1.098612'

# --- merge: sharded outputs and the sink counted once
"$PY" - "$T" <<'EOF'
import sys, numpy as np
t = sys.argv[1]
rng = np.random.default_rng(5)
q = rng.standard_normal((1, 4, 6, 32)).astype(np.float32)
k = rng.standard_normal((1, 2, 90, 32)).astype(np.float32) * 2
v = rng.standard_normal((1, 2, 90, 32)).astype(np.float32)
np.save(t + '/mq.npy', q); np.save(t + '/mk.npy', k); np.save(t + '/mv.npy', v)
for i, (a, z) in enumerate([(0, 40), (40, 90)]):
    np.save(t + '/mk%d.npy' % i, np.ascontiguousarray(k[:, :, a:z]))
    np.save(t + '/mv%d.npy' % i, np.ascontiguousarray(v[:, :, a:z]))
np.save(t + '/msk.npy', (rng.standard_normal(4) * 3).astype(np.float32))
EOF
M="-q $T/mq.npy --sinks $T/msk.npy"
ok 'merge: the whole row with the sink' kvattn run $M -k "$T/mk.npy" -v "$T/mv.npy" -o "$T/w.npy" --lse "$T/wl.npy"
ok 'merge: shard 0 without the sink' kvattn run -q "$T/mq.npy" -k "$T/mk0.npy" -v "$T/mv0.npy" -o "$T/p0.npy" --lse "$T/p0l.npy"
ok 'merge: shard 1 without the sink' kvattn run -q "$T/mq.npy" -k "$T/mk1.npy" -v "$T/mv1.npy" -o "$T/p1.npy" --lse "$T/p1l.npy"
ok 'merge --sinks adds the sink once' kvattn merge --sinks "$T/msk.npy" "$T/p0.npy" "$T/p0l.npy" "$T/p1.npy" "$T/p1l.npy" -o "$T/mm.npy" --lse-out "$T/mml.npy"
ok 'merged = whole (output)' kvattn cmp --atol 2e-6 --rtol 0 "$T/mm.npy" "$T/w.npy"
ok 'merged = whole (LSE)' kvattn cmp --atol 2e-6 --rtol 0 "$T/mml.npy" "$T/wl.npy"
ok 'merge: shard 0 with the sink' kvattn run $M -k "$T/mk0.npy" -v "$T/mv0.npy" -o "$T/s0.npy" --lse "$T/s0l.npy"
ok 'merge: shard 1 with the sink' kvattn run $M -k "$T/mk1.npy" -v "$T/mv1.npy" -o "$T/s1.npy" --lse "$T/s1l.npy"
ok 'merge --sinks --parts-have-sinks counts it once' kvattn merge --sinks "$T/msk.npy" --parts-have-sinks "$T/s0.npy" "$T/s0l.npy" "$T/s1.npy" "$T/s1l.npy" -o "$T/ms.npy" --lse-out "$T/msl.npy"
ok 'merged = whole (output)' kvattn cmp --atol 2e-6 --rtol 0 "$T/ms.npy" "$T/w.npy"
ok 'merged = whole (LSE)' kvattn cmp --atol 2e-6 --rtol 0 "$T/msl.npy" "$T/wl.npy"
ok 'sink on one shard only, plain merge' kvattn merge "$T/s0.npy" "$T/s0l.npy" "$T/p1.npy" "$T/p1l.npy" -o "$T/mo1.npy"
ok 'merged = whole' kvattn cmp --atol 2e-6 --rtol 0 "$T/mo1.npy" "$T/w.npy"
ok 'plain merge of shards that each carry the sink' kvattn merge "$T/s0.npy" "$T/s0l.npy" "$T/s1.npy" "$T/s1l.npy" -o "$T/bad.npy"
kvattn cmp --atol 1e-4 --rtol 0 "$T/bad.npy" "$T/w.npy" >"$T/.out" 2>&1
expect_eq 'counts it twice: not the whole row (kvattn cmp exit 1)' "$?" 1

# --- bad input
H="-q $T/hq.npy -k $T/hk.npy -v $T/hv.npy"
expect_fail 1 'sinks of the wrong length' kvattn run $H --sinks "$T/hs1.npy"
grep -q "sinks: shape (1,), expected (2,)" "$T/.err"; _report $? 'names the shapes'
expect_fail 1 'sinks of an integer dtype' kvattn run $H --sinks "$T/hsd.npy"
grep -q "sinks: dtype i32" "$T/.err"; _report $? 'names the dtype'
expect_fail 1 'sinks of two dimensions' kvattn run $H --sinks "$T/hs2d.npy"
expect_fail 1 'a non-finite sink' kvattn run $H --sinks "$T/hsi.npy"
grep -q "sinks: value inf of head 1 is not finite" "$T/.err"; _report $? 'names the head'
expect_fail 1 'ALiBi slopes of the wrong length' kvattn run $H --alibi-slopes "$T/hs1.npy"
expect_fail 1 'a non-finite ALiBi slope' kvattn run $H --alibi-slopes "$T/hsi.npy"
expect_fail 2 'softcap 0' kvattn run $H --softcap 0
expect_fail 2 'softcap < 0' kvattn run $H --softcap -30
expect_fail 2 'softcap nan' kvattn run $H --softcap nan
expect_fail 2 'softcap inf' kvattn run $H --softcap inf
expect_fail 2 'softcap not a number' kvattn run $H --softcap x
expect_fail 2 '--alibi with --alibi-slopes' kvattn run $H --alibi --alibi-slopes "$T/sl.npy"
expect_fail 1 'merge --sinks: wrong length' kvattn merge --sinks "$T/hs1.npy" "$T/p0.npy" "$T/p0l.npy" "$T/p1.npy" "$T/p1l.npy" -o "$T/x.npy"
expect_fail 2 'merge --parts-have-sinks without --sinks' kvattn merge --parts-have-sinks "$T/p0.npy" "$T/p0l.npy" "$T/p1.npy" "$T/p1l.npy" -o "$T/x.npy"
done_testing
