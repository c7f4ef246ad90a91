#!/bin/sh
# kvmask-tree.sh - kvmask tree (speculative-decoding token trees): a
# hand-checked tree, random trees against an independent NumPy rule (each
# token sees the prefix, its ancestors and itself), every dense value
# convention, kvattn run --mask on a tree mask against a float64
# reference, and bad parent lists refused.
. "$KV_TOP/tests/lib.sh"
need_numpy

# root 0; 1 and 2 children of 0; 3 and 4 children of 1; 5 a child of 2
text_of() {   # title want kvmask args...: the text output, comment lines dropped
    _t=$1; _w=$2; shift 2
    if kvmask "$@" -f text -o "$T/.txt" 2>"$T/.err"; then
        expect_eq "$_t" "$(sed '/^#/d' "$T/.txt")" "$_w"
    else
        _report 1 "$_t" "exit $?: $(head -c 600 "$T/.err")"
    fi
}
golden_tree='1 0 0 0 0 0
1 1 0 0 0 0
1 0 1 0 0 0
1 1 0 1 0 0
1 1 0 0 1 0
1 0 1 0 0 1'
text_of 'a six-token tree, --keep' "$golden_tree" tree --parents -1,0,0,1,1,2 --keep
text_of 'a prefix of 2 keys: every token sees it' '0 0 0 1 1
0 0 0 0 1
0 0 1 1 0' tree --parents -1,0,-1 -p 2
text_of 'f32: 0 and -inf, as vLLM'"'"'s tree_attn_bias' '0 -inf -inf
0 0 -inf
0 0 0' tree --parents -1,0,1 --dtype f32
ok 'a chain: causal' kvmask tree --parents -1,0,1,2,3,4,5 -o "$T/chain.npy"
ok 'causal of 7' kvmask causal -n 7 -o "$T/causal.npy"
expect_file_eq 'a chain is the causal mask, byte for byte' "$T/chain.npy" "$T/causal.npy"
text_of 'every token a root: the prefix and itself' '1 1 1 1 1 0 0
1 1 1 1 0 1 0
1 1 1 1 0 0 1' tree --parents -1,-1,-1 -p 4 --keep
ok '--batch and --heads broadcast' kvmask tree --parents -1,0,0 --batch 2 --heads 3 -o "$T/bh.npy"

if [ -n "$PY" ]; then
    # random trees (parents before children), prefixes and conventions
    # against the rule written independently: walk each token's chain
    cat >"$T/ref.py" <<'EOF'
import sys, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(7)
lines = []
for c in range(40):
    n = int(rng.integers(1, [5, 20, 200][c % 3]))
    par = [-1] + [int(rng.integers(-1, t)) if rng.random() < 0.9 else -1 for t in range(1, n)]
    P = int(rng.integers(0, 50)) if c % 2 else 0
    keep = np.zeros((n, P + n), bool)
    keep[:, :P] = True
    for t in range(n):
        x = t
        while x >= 0:
            keep[t, P + x] = True
            x = par[x]
    np.save('%s/r%d_keep.npy' % (out, c), keep)
    np.save('%s/r%d_mask.npy' % (out, c), ~keep)
    lines.append('%d %s %d' % (c, ','.join(map(str, par)), P))
open(out + '/trees', 'w').write('\n'.join(lines) + '\n')
# attention through a tree mask, in float64
n, P, H, D = 9, 23, 2, 16
par = [-1, 0, 0, 1, 1, 2, 3, 3, 6]
q = rng.standard_normal((1, H, n, D)).astype(np.float32)
k = rng.standard_normal((1, H, P + n, D)).astype(np.float32)
v = rng.standard_normal((1, H, P + n, D)).astype(np.float32)
keep = np.zeros((n, P + n), bool); keep[:, :P] = True
for t in range(n):
    x = t
    while x >= 0:
        keep[t, P + x] = True; x = par[x]
s = np.einsum('bhid,bhjd->bhij', q.astype(np.float64), k.astype(np.float64)) * float(np.float32(D ** -0.5))
s = np.where(keep, s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
np.save(out + '/aq.npy', q); np.save(out + '/ak.npy', k); np.save(out + '/av.npy', v)
np.save(out + '/ao.npy', (p @ v.astype(np.float64)).astype(np.float32))
EOF
    "$PY" "$T/ref.py" "$T"
    while read -r c par P; do
        ok "random tree $c ($P prefix keys): --keep" kvmask tree --parents "$par" -p "$P" --keep -o "$T/k.npy"
        # compare the data bytes (the headers may pad differently)
        kvattn cmp --atol 0 --rtol 0 "$T/k.npy" "$T/r${c}_keep.npy" >"$T/.cmp" 2>&1
        expect_eq "random tree $c: the rule, element for element" "$?" 0
        ok "random tree $c: the default (1 = masked)" kvmask tree --parents "$par" -p "$P" -o "$T/m.npy"
        kvattn cmp --atol 0 --rtol 0 "$T/m.npy" "$T/r${c}_mask.npy" >"$T/.cmp" 2>&1
        expect_eq "random tree $c: 1 = masked, element for element" "$?" 0
    done <"$T/trees"
    ok 'kvattn run --mask on a tree mask' sh -c 'kvmask tree --parents -1,0,0,1,1,2,3,3,6 -p 23 -o "$1/tm.npy" && kvattn run -q "$1/aq.npy" -k "$1/ak.npy" -v "$1/av.npy" --mask "$1/tm.npy" -o "$1/to.npy"' sh "$T"
    ok 'equals attention over the tree in float64' kvattn cmp --atol "$(kvattn bound -q "$T/aq.npy" -k "$T/ak.npy" -v "$T/av.npy")" --rtol 0 "$T/to.npy" "$T/ao.npy"
fi

# bad parent lists: usage errors, stdout empty
expect_fail 2 'a token its own parent' kvmask tree --parents -1,0,2
grep -q "token 2 is its own parent (a cycle)" "$T/.err"; _report $? 'names the token'
expect_fail 2 'a cycle' kvmask tree --parents -1,2,1
grep -q "a cycle through token 1" "$T/.err"; _report $? 'says cycle'
expect_fail 2 'a forward reference' kvmask tree --parents -1,2,0
grep -q "token 1: parent 2 comes after it (a forward reference" "$T/.err"; _report $? 'says forward reference'
expect_fail 2 'a parent past the tokens' kvmask tree --parents -1,0,7
grep -q "parent 7 is not a token" "$T/.err"; _report $? 'names the parent'
expect_fail 2 'a parent below -1' kvmask tree --parents -1,-2
expect_fail 2 'not a number' kvmask tree --parents -1,x
expect_fail 2 'no --parents' kvmask tree
expect_fail 2 '--parents on another kind' kvmask causal -n 4 --parents -1,0
expect_fail 2 '-n on a tree' kvmask tree --parents -1,0 -n 4
expect_fail 2 'a compact format' kvmask tree --parents -1,0 -f bits
expect_fail 2 'block format' kvmask tree --parents -1,0 -f block --block-size 2
expect_fail 2 'stats' kvmask tree --parents -1,0 -f stats
expect_fail 1 'a tree over --max-mem' kvmask tree --parents -1,0 -p 100000 --max-mem 1K
cp "$T/.err" "$T/e"
ok '... says it is written dense only' grep -q 'a tree is written dense only: raise --max-mem' "$T/e"
ok '... and suggests no compact format, which tree refuses' sh -c '! grep -q "compact format" "$1"' - "$T/e"
expect_fail 2 'a prefix past 2^40 keys' kvmask tree --parents -1,0 -p 1099511627776
cp "$T/.err" "$T/e"
ok '... names -p, the option given' grep -q '^kvmask: -p: 1099511627776 prefix keys and 2 tokens' "$T/e"
done_testing
