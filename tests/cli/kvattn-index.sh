#!/bin/sh
# kvattn-index.sh - kvattn index (DeepSeek-V3.2's lightning indexer)
# against a float64 NumPy reference of sum_h w relu(scale q.k) and its
# top-k (highest first, ties by the smaller index, -1 past the visible
# keys); exact ties from repeated keys and all-zero scores; threads; bad
# input.
. "$KV_TOP/tests/lib.sh"
need_numpy
cat >"$T/ref.py" <<'EOF'
import sys, numpy as np
cmd = sys.argv[1]
if cmd == 'gen':   # dir seed tq tk h d [dup]
    d, seed, tq, tk, h, hd = sys.argv[2], int(sys.argv[3]), *map(int, sys.argv[4:8])
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((tq, h, hd)).astype(np.float32)
    k = rng.standard_normal((tk, hd)).astype(np.float32)
    w = rng.standard_normal((tq, h)).astype(np.float32)
    if len(sys.argv) > 8:          # repeated keys: exact ties
        k[1::3] = k[0]
    np.save(d + '/q.npy', q); np.save(d + '/k.npy', k); np.save(d + '/w.npy', w)
elif cmd == 'check':   # dir topk causal idx.npy [scores.npy]
    d, topk, causal = sys.argv[2], int(sys.argv[3]), sys.argv[4] == '1'
    q = np.load(d + '/q.npy').astype(np.float64); k = np.load(d + '/k.npy').astype(np.float64)
    w = np.load(d + '/w.npy').astype(np.float64)
    tq, tk = q.shape[0], k.shape[0]
    s = np.einsum('ihd,td->iht', q, k) / np.sqrt(q.shape[2])
    sc = np.einsum('ih,iht->it', w, np.maximum(s, 0))
    got = np.load(sys.argv[5])
    assert got.dtype == np.int32 and got.shape == (tq, topk), (got.dtype, got.shape)
    bad = 0
    for i in range(tq):
        last = i + tk - tq if causal else tk - 1
        t = np.arange(last + 1)
        order = t[np.lexsort((t, -sc[i, :last + 1]))][:topk]
        want = np.full(topk, -1, np.int32); want[:len(order)] = order
        if (got[i] != want).any():
            bad += 1
            if bad < 4: print('row', i, got[i][:8], want[:8])
    if len(sys.argv) > 6:
        gs = np.load(sys.argv[6])
        for i in range(tq):
            for m in range(topk):
                if got[i, m] < 0:
                    bad += not np.isneginf(gs[i, m])
                else:
                    bad += abs(gs[i, m] - sc[i, got[i, m]]) > 1e-6 * max(1, abs(sc[i, got[i, m]]))
    print(bad); sys.exit(1 if bad else 0)
EOF
ref() { "$PY" "$T/ref.py" "$@"; }
mkdir "$T/a" "$T/b" "$T/c"
ref gen "$T/a" 1 7 40 4 16
ok 'index: prefill tail (7 queries over 40 keys), top 9' kvattn index -q "$T/a/q.npy" -k "$T/a/k.npy" --weights "$T/a/w.npy" --topk 9 -o "$T/i.npy" --scores "$T/s.npy"
ok 'indices and scores = float64 reference (causal, bottom-right)' ref check "$T/a" 9 1 "$T/i.npy" "$T/s.npy"
ok 'index --no-causal, top 40' kvattn index -q "$T/a/q.npy" -k "$T/a/k.npy" --weights "$T/a/w.npy" --topk 40 --no-causal -o "$T/i2.npy"
ok '--no-causal = reference' ref check "$T/a" 40 0 "$T/i2.npy"
ref gen "$T/b" 2 30 30 3 8
ok 'index: square prefill, top 64 (-1 past the visible keys)' kvattn index -q "$T/b/q.npy" -k "$T/b/k.npy" --weights "$T/b/w.npy" --topk 64 -o "$T/i3.npy"
ok 'square prefill = reference' ref check "$T/b" 64 1 "$T/i3.npy"
ref gen "$T/c" 3 12 45 2 8 dup
ok 'index: repeated keys (exact ties)' kvattn index -q "$T/c/q.npy" -k "$T/c/k.npy" --weights "$T/c/w.npy" --topk 20 -o "$T/i4.npy" -j 1
ok 'ties go to the smaller index' ref check "$T/c" 20 1 "$T/i4.npy"
ok 'index -j 3' kvattn index -q "$T/c/q.npy" -k "$T/c/k.npy" --weights "$T/c/w.npy" --topk 20 -o "$T/i5.npy" -j 3
expect_file_eq 'bit-identical for any -j' "$T/i5.npy" "$T/i4.npy"
expect_out 'text output, one row per query' "$(printf '0 -1 -1\n1 0 -1')" \
    sh -c "'$PY' -c \"
import numpy as np
np.save('$T/q1.npy', np.ones((2, 1, 2), np.float32)); np.save('$T/k1.npy', np.array([[1, 0], [2, 0]], np.float32))
np.save('$T/w1.npy', np.ones((2, 1), np.float32))\" && kvattn index -q '$T/q1.npy' -k '$T/k1.npy' --weights '$T/w1.npy' --topk 3 -f text"

expect_fail 2 'index without --weights' kvattn index -q "$T/a/q.npy" -k "$T/a/k.npy" -o "$T/bad.npy"
expect_fail 2 '--topk 0' kvattn index -q "$T/a/q.npy" -k "$T/a/k.npy" --weights "$T/a/w.npy" --topk 0 -o "$T/bad.npy"
expect_fail 2 '-o and --scores one file' kvattn index -q "$T/a/q.npy" -k "$T/a/k.npy" --weights "$T/a/w.npy" -o "$T/same.npy" --scores "$T/same.npy"
expect_fail 1 'weights of the wrong shape' kvattn index -q "$T/a/q.npy" -k "$T/a/k.npy" --weights "$T/b/w.npy" -o "$T/bad.npy"
expect_fail 1 'keys of another head size' kvattn index -q "$T/a/q.npy" -k "$T/c/k.npy" --weights "$T/a/w.npy" -o "$T/bad.npy"
"$PY" -c "
import numpy as np
np.save('$T/k5.npy', np.load('$T/b/k.npy')[:5])"
expect_fail 1 'causal with more queries than keys' kvattn index -q "$T/b/q.npy" -k "$T/k5.npy" --weights "$T/b/w.npy" -o "$T/bad.npy"
"$PY" -c "
import numpy as np
q = np.load('$T/a/q.npy'); q[3, 1, 2] = np.nan; np.save('$T/qn.npy', q)"
expect_fail 1 'a NaN in the queries' kvattn index -q "$T/qn.npy" -k "$T/a/k.npy" --weights "$T/a/w.npy" -o "$T/bad.npy"
ok 'nothing written on failure' test ! -e "$T/bad.npy"
done_testing
