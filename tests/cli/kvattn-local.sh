#!/bin/sh
# kvattn-local.sh - kvattn run --chunk-size (Llama 4's chunked local
# attention: key j is kept for query i when j <= i' and j // C == i' // C,
# i' = i + Lk - Lq, the bottom-right alignment of chunked prefill) and
# --window, alone and together, against a float64 NumPy reference on
# random shapes through every route (dense tiles, decode kernels, thd
# varlen, paged prefill and decode, bf16 inputs, block masks, the scalar
# loops, small tiles, more queries than keys), each held to the bound
# kvattn bound states; -j 1 and -j 2 give the same bytes; --chunk-size
# equals --mask of kvmask local's mask to that bound; bad values refused.  Runs at every
# ISA level (tests/run.sh).
. "$KV_TOP/tests/lib.sh"
need_numpy

cat >"$T/gen.py" <<'PYEOF'
import sys, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(int(sys.argv[2]))

def bf16(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def bf16_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)

def keep_of(Lq, Lk, C, W, causal):
    """The implicit masks: i' = i + Lk - Lq; causal j <= i'; window W
    i' - W < j; chunk C: causal and j // C == i' // C."""
    i = np.arange(Lq)[:, None] + Lk - Lq; j = np.arange(Lk)[None, :]
    keep = np.ones((Lq, Lk), bool)
    if causal or C:
        keep &= j <= i
    if W:
        keep &= j > i - W
    if C:
        keep &= (j // C) == (np.maximum(i, 0) // C)
    return keep

def ref(q, k, v, scale, keep):
    # one request: q [Hq, Lq, D], k/v [Hkv, Lk, D]
    Hq = q.shape[0]; G = Hq // k.shape[0]
    q = q.astype(np.float64); kk = np.repeat(k.astype(np.float64), G, 0)
    vv = np.repeat(v.astype(np.float64), G, 0)
    s = np.einsum('hid,hjd->hij', q, kk) * float(np.float32(scale))
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m); l = e.sum(-1, keepdims=True)
    with np.errstate(divide='ignore'):
        lse = (m + np.log(l))[..., 0]
    return (e / np.where(l == 0, 1, l)) @ vv, lse

cases = []
def case(name, opts, files):
    cases.append((name, opts))
    for f, a in files.items():
        np.save('%s/%s_%s.npy' % (out, name, f), a)

n = 0
for route in ['dense', 'dense', 'window', 'decode', 'thd', 'paged', 'paged_prefill', 'bf16',
              'block', 'scalar', 'tiles', 'empty']:
    n += 1
    name = 'c%02d_%s' % (n, route)
    Hkv = int(rng.integers(1, 3)); G = int([1, 2, 4][rng.integers(3)]); Hq = Hkv * G
    D = int([16, 32, 64, 128][rng.integers(4)])
    Lk = int(rng.integers(20, 600))
    Lq = int(rng.integers(1, 5)) if route == 'decode' else int(rng.integers(1, min(Lk, 200) + 1))
    if route == 'empty':
        Lq = Lk + 5                  # the first 5 rows see nothing
    C = int([1, 3, 16, 64, 100, 1000][rng.integers(6)])
    W = int(rng.integers(1, 80)) if route == 'window' else 0
    opts = ['--chunk-size', str(C)] + (['--window', str(W)] if W else [])
    scale = 1.0 / np.sqrt(D)
    files = {}
    if route in ('thd', 'paged', 'paged_prefill'):
        R = 3
        lks = [int(rng.integers(1, 300)) for _ in range(R)]
        lqs = [int(rng.integers(1, 5)) if route == 'paged' else int(rng.integers(1, x + 1))
               for x in lks]
        qs_, ks_, vs_, os_, ls_ = [], [], [], [], []
        for r in range(R):
            qr = (rng.standard_normal((Hq, lqs[r], D)) * 3.0).astype(np.float32)
            kr = rng.standard_normal((Hkv, lks[r], D)).astype(np.float32)
            vr = rng.standard_normal((Hkv, lks[r], D)).astype(np.float32)
            o, l = ref(qr, kr, vr, scale, keep_of(lqs[r], lks[r], C, 0, True))
            qs_.append(qr.transpose(1, 0, 2)); ks_.append(kr.transpose(1, 0, 2))
            vs_.append(vr.transpose(1, 0, 2)); os_.append(o.transpose(1, 0, 2))
            ls_.append(np.ascontiguousarray(l.T))
        Q = np.concatenate(qs_); Kt = np.concatenate(ks_); Vt = np.concatenate(vs_)
        files.update(q=Q, ro=np.concatenate(os_).astype(np.float32),
                     rl=np.concatenate(ls_).astype(np.float32), bq=Q, bk=Kt, bv=Vt)
        run = ['--layout', 'thd', '-q', '@%s_q.npy' % name, '--q-lens', ','.join(map(str, lqs))]
        if route == 'thd':
            files.update(k=Kt, v=Vt)
            run += ['-k', '@%s_k.npy' % name, '-v', '@%s_v.npy' % name,
                    '--kv-lens', ','.join(map(str, lks))]
        else:
            bsz = 16
            nblk = sum((x + bsz - 1) // bsz for x in lks) + 2
            cache = np.zeros((2, nblk, bsz, Hkv, D), np.float32)
            perm = rng.permutation(np.arange(1, nblk))
            bt = np.zeros((R, max((x + bsz - 1) // bsz for x in lks)), np.int32); at = 0
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
        case(name, run + opts, files)
        continue
    q = (rng.standard_normal((Hq, Lq, D)) * [0.3, 3.0, 12.0][rng.integers(3)]).astype(np.float32)
    k = rng.standard_normal((Hkv, Lk, D)).astype(np.float32)
    v = rng.standard_normal((Hkv, Lk, D)).astype(np.float32)
    run = ['-q', '@%s_q.npy' % name, '-k', '@%s_k.npy' % name, '-v', '@%s_v.npy' % name]
    keep = keep_of(Lq, Lk, C, W, False)
    if route == 'bf16':
        qb, kb, vb = bf16(q), bf16(k), bf16(v)
        q, k, v = bf16_f32(qb), bf16_f32(kb), bf16_f32(vb)
        files.update(q=qb[None].view('V2'), k=kb[None].view('V2'), v=vb[None].view('V2'))
        run += ['--out-dtype', 'f32']
    else:
        files.update(q=q[None], k=k[None], v=v[None])
    if route == 'block':
        bs = 16
        nb = ((Lq + bs - 1) // bs, (Lk + bs - 1) // bs)
        bm = rng.random((1, 1) + nb) < 0.6
        files['bm'] = bm
        run += ['--block-mask', '@%s_bm.npy' % name, '--block-size', '16']
        keep = keep & np.repeat(np.repeat(bm[0, 0], bs, 0), bs, 1)[:Lq, :Lk]
    if route == 'scalar': run += ['--scalar']
    if route == 'tiles': run += ['--tile-q', '5', '--tile-k', '7']
    o, l = ref(q, k, v, scale, keep)
    files.update(ro=o[None].astype(np.float32), rl=l[None].astype(np.float32),
                 bq=q[None], bk=k[None], bv=v[None])
    case(name, run + opts, files)

with open(out + '/cases', 'w') as f:
    for name, opts in cases:
        f.write(name + ' ' + ' '.join(opts) + '\n')
PYEOF

for seed in 1 2; do
    mkdir -p "$T/s$seed"
    if ! "$PY" "$T/gen.py" "$T/s$seed" $seed >"$T/.gen" 2>&1; then
        _report 1 "reference generator, seed $seed" "$(head -c 600 "$T/.gen")"; continue
    fi
    while read -r name rest; do
        # shellcheck disable=SC2086
        set -- $(echo "$rest" | sed "s|@|$T/s$seed/|g")
        if ! kvattn bound --all -q "$T/s$seed/${name}_bq.npy" -k "$T/s$seed/${name}_bk.npy" \
            -v "$T/s$seed/${name}_bv.npy" >"$T/.b" 2>&1; then
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

# --- --chunk-size = --mask of kvmask local ---------------------------------
"$PY" - "$T" <<'PYEOF'
import sys, numpy as np
t = sys.argv[1]
rng = np.random.default_rng(34)
np.save(t + '/eq.npy', rng.standard_normal((2, 4, 70, 64)).astype(np.float32))
np.save(t + '/ek.npy', rng.standard_normal((2, 2, 150, 64)).astype(np.float32))
np.save(t + '/ev.npy', rng.standard_normal((2, 2, 150, 64)).astype(np.float32))
PYEOF
E="-q $T/eq.npy -k $T/ek.npy -v $T/ev.npy"
# the two routes differ in the tiles they walk (the mask's from key 0, the
# chunk's from its start), so they agree to the bound, not to the bit
# shellcheck disable=SC2086
kvattn bound --all $E >"$T/.b" 2>&1
bo=$(sed -n 's/^out: //p' "$T/.b"); bl=$(sed -n 's/^lse: //p' "$T/.b")
expect_eq 'kvattn bound of the inputs' "$(test -n "$bo" && test -n "$bl" && echo yes)" yes
for C in 1 16 48 200; do
    ok "kvmask local --chunk-size $C -q 70 -k 150" kvmask local --chunk-size $C -q 70 -k 150 -o "$T/lm.npy"
    # shellcheck disable=SC2086
    ok "run --mask of it" kvattn run $E --mask "$T/lm.npy" -o "$T/mo.npy" --lse "$T/ml.npy"
    # shellcheck disable=SC2086
    ok "run --chunk-size $C" kvattn run $E --chunk-size $C -o "$T/co.npy" --lse "$T/cl.npy"
    ok "--chunk-size $C = --mask of kvmask local (output, to $bo)" \
        kvattn cmp --atol "$bo" --rtol 0 "$T/mo.npy" "$T/co.npy"
    ok "... (LSE, to $bl)" kvattn cmp --atol "$bl" --rtol 0 "$T/ml.npy" "$T/cl.npy"
done
# with a window too: the intersection
ok 'kvmask local --chunk-size 48 as a keep mask' kvmask local --chunk-size 48 -q 70 -k 150 --keep -o "$T/lk.npy"
ok 'kvmask window -w 20 as a keep mask' kvmask window -w 20 -q 70 -k 150 --keep -o "$T/wk.npy"
"$PY" -c "import numpy as np; np.save('$T/both.npy', np.load('$T/lk.npy') & np.load('$T/wk.npy'))"
# shellcheck disable=SC2086
ok 'run --mask-keep of both' kvattn run $E --mask "$T/both.npy" --mask-keep -o "$T/bo.npy"
# shellcheck disable=SC2086
ok 'run --chunk-size 48 --window 20' kvattn run $E --chunk-size 48 --window 20 -o "$T/bc.npy"
ok '--chunk-size with --window = --mask of both' kvattn cmp --atol "$bo" --rtol 0 "$T/bo.npy" "$T/bc.npy"
# and a mask that differs from the chunk's in one key is told apart
"$PY" -c "import numpy as np; m = np.load('$T/both.npy'); m[..., 69, 149] = False; np.save('$T/both1.npy', m)"
# shellcheck disable=SC2086
ok 'run --mask-keep with one key less' kvattn run $E --mask "$T/both1.npy" --mask-keep -o "$T/b1.npy"
kvattn cmp --atol "$bo" --rtol 0 "$T/b1.npy" "$T/bc.npy" >/dev/null 2>&1
expect_eq '... differs beyond the bound (kvattn cmp exits 1)' "$?" 1

# --- hand-checked: chunk 2, three keys 1, 2, 3 of zero scores ---------------
"$PY" - "$T" <<'PYEOF'
import sys, numpy as np
t = sys.argv[1]
np.save(t + '/hq.npy', np.zeros((1, 1, 3, 4), np.float32))
np.save(t + '/hk.npy', np.zeros((1, 1, 3, 4), np.float32))
v = np.zeros((1, 1, 3, 4), np.float32); v[0, 0, :, 0] = [1, 2, 3]
np.save(t + '/hv.npy', v)
PYEOF
# rows 0, 1, 2 see keys {0}, {0, 1}, {2}: means 1, 1.5 and 3
kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --chunk-size 2 -f text >"$T/h.txt" 2>&1
expect_eq 'chunk 2 over three keys: 1, 1.5, 3' "$(awk 'NF { printf "%.6f\n", $1 }' "$T/h.txt")" '1.000000
1.500000
3.000000'

# --- bad values ---------------------------------------------------------------
expect_fail 2 '--chunk-size 0' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --chunk-size 0
expect_fail 2 '--chunk-size -3' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --chunk-size -3
expect_fail 2 '--chunk-size x' kvattn run -q "$T/hq.npy" -k "$T/hk.npy" -v "$T/hv.npy" --chunk-size x
done_testing
