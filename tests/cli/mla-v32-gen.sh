#!/bin/sh
# mla-v32-gen.sh - kvattn gen --model-config with a DeepSeek-V3.2 config
# (index_n_heads, index_head_dim, index_topk): the indexer's inputs beside
# both MLA forms', their shapes and packing, a function of the seed; the
# pipeline kvattn index | kvattn mla --topk-indices on them against a
# float64 NumPy reference of the indexer's top-k and sparse MLA; configs
# with part of the indexer refused.
. "$KV_TOP/tests/lib.sh"
need_numpy
CFG="$KV_TOP/tests/configs/dsa/deepseek-v3.2-exp.json"
D="$T/g"
ok 'gen: V3.2, two requests of 3 queries over 40 keys, 4 heads' kvattn gen --model-config "$CFG" --shape 2,4,3 --kv-len 40 --dtype f32 --dir "$D" --block-size 16
expect_eq 'index_topk is the config'"'"'s' "$(cat "$D/index_topk")" 2048
cat >"$T/ref.py" <<'EOF'
import sys, numpy as np
cmd, d = sys.argv[1], sys.argv[2]
if cmd == 'shapes':
    q, k, w = (np.load(d + '/index_' + n + '.npy') for n in ('q', 'k', 'weights'))
    print(q.dtype, q.shape, k.dtype, k.shape, w.dtype, w.shape)
    sys.exit(0)
# check: dir topk out.npy bound (request 0 of the set: its rows are the first)
topk, out, bound = int(sys.argv[3]), np.load(sys.argv[4]).astype(np.float64), float(sys.argv[5])
sl = [int(x) for x in open(d + '/seq_lens').read().split(',')]
ql = [int(x) for x in open(d + '/q_lens').read().split(',')]
lq, lk = ql[0], sl[0]
iq = np.load(d + '/index_q.npy').astype(np.float64)[:lq]
ik = np.load(d + '/index_k.npy').astype(np.float64)[:lk]
iw = np.load(d + '/index_weights.npy').astype(np.float64)[:lq]
q = np.load(d + '/q_absorbed.npy').astype(np.float64)
c = np.load(d + '/kv_cache.npy').astype(np.float64)
bt = np.load(d + '/block_table.npy')
scale = float(open(d + '/scale').read())
bs, dl, bad = c.shape[1], out.shape[2], 0
sc = np.einsum('ih,iht->it', iw, np.maximum(np.einsum('ihd,td->iht', iq, ik) / np.sqrt(iq.shape[2]), 0))
for i in range(lq):
    last = i + lk - lq
    t = np.arange(last + 1)
    js = t[np.lexsort((t, -sc[i, :last + 1]))][:topk]
    L = np.stack([c[bt[0, j // bs], j % bs, 0] for j in js])
    for h in range(q.shape[1]):
        s = L @ q[i, h] * scale
        p = np.exp(s - s.max())
        bad += np.abs(out[i, h] - (p @ L[:, :dl]) / p.sum()).max() > bound
print(bad); sys.exit(1 if bad else 0)
EOF
ref() { "$PY" "$T/ref.py" "$@"; }
expect_eq 'indexer inputs: q [B S, 64, 128], k [B Lk, 128], weights f32 [B S, 64]' "$(ref shapes "$D")" "float32 (6, 64, 128) float32 (80, 128) float32 (6, 64)"
ok 'gen again, same seed' kvattn gen --model-config "$CFG" --shape 2,4,3 --kv-len 40 --dtype f32 --dir "$T/g2" --block-size 16
expect_file_eq 'the indexer inputs are a function of the seed' "$T/g2/index_q.npy" "$D/index_q.npy"
# a config as Python's json.load reads it: Infinity as a value elsewhere
sed '0,/{/s//{"time_step_limit": [0.0, Infinity],/' "$CFG" >"$T/inf.json"
ok 'gen: the same config with an Infinity in a key it does not read' kvattn gen --model-config "$T/inf.json" --shape 2,4,3 --kv-len 40 --dtype f32 --dir "$T/g3" --block-size 16
expect_file_eq 'the same indexer inputs' "$T/g3/index_q.npy" "$D/index_q.npy"
expect_file_eq 'the same latent cache' "$T/g3/kv_cache.npy" "$D/kv_cache.npy"
# request 0: its indexer rows are the first 3 queries and 40 keys
"$PY" -c "
import numpy as np
d = '$D'
np.save('$T/q0.npy', np.load(d + '/index_q.npy')[:3]); np.save('$T/k0.npy', np.load(d + '/index_k.npy')[:40])
np.save('$T/w0.npy', np.load(d + '/index_weights.npy')[:3]); np.save('$T/qa0.npy', np.load(d + '/q_absorbed.npy')[:3])"
ok 'kvattn index on request 0, top 7' kvattn index -q "$T/q0.npy" -k "$T/k0.npy" --weights "$T/w0.npy" --topk 7 -o "$T/idx.npy"
ok 'kvattn mla --topk-indices on its indices' kvattn mla -q "$T/qa0.npy" --kv-cache "$D/kv_cache.npy" --block-table "$D/block_table.npy" --seq-lens 40 --q-lens 3 --causal --model-config "$CFG" --topk-indices "$T/idx.npy" -o "$T/o.npy" -v
B=$(sed -n 's/.*error bound //p' "$T/.err")
ok "index | mla within the bound ($B) of float64 top-k and sparse MLA" ref check "$D" 7 "$T/o.npy" "$B"
ok 'a V3 config (no indexer) writes no indexer inputs' kvattn gen --model-config "$KV_TOP/tests/configs/deepseek-v3.json" --shape 1,2,2 --kv-len 8 --dir "$T/v3"
ok 'no index_q.npy' test ! -e "$T/v3/index_q.npy"
"$PY" -c "
import json
d = json.load(open('$CFG')); del d['index_topk']; json.dump(d, open('$T/part.json', 'w'))
d = json.load(open('$CFG')); d['index_n_heads'] = 0; json.dump(d, open('$T/zero.json', 'w'))"
expect_fail 2 'a config with two of the three index fields' kvattn gen --model-config "$T/part.json" --shape 1,2,2 --kv-len 8 --dir "$T/bad"
expect_fail 2 'index_n_heads 0' kvattn gen --model-config "$T/zero.json" --shape 1,2,2 --kv-len 8 --dir "$T/bad"
ok 'nothing written on failure' test ! -e "$T/bad"
# --max-mem holds the whole set at once: the MLA inputs and the indexer's
# together (here 18.7 MB and 2.3 MB), not each alone under the limit
ok 'gen: 8 queries over 4096 keys, one head' kvattn gen --model-config "$CFG" --shape 1,1,8 \
    --kv-len 4096 --dtype f32 --dir "$T/mm"
N=$("$PY" -c "import glob, numpy as np
print(sum(np.load(f).nbytes for f in glob.glob('$T/mm/*.npy')))")
ok '... the set fits --max-mem of its own bytes' kvattn gen --model-config "$CFG" --shape 1,1,8 \
    --kv-len 4096 --dtype f32 --dir "$T/mm2" --max-mem "$N"
expect_fail 1 '... and is refused one byte under it' kvattn gen --model-config "$CFG" \
    --shape 1,1,8 --kv-len 4096 --dtype f32 --dir "$T/mm3" --max-mem $((N - 1))
expect_eq '... with both sizes' "$(head -n 1 "$T/.err")" "kvattn: the MLA inputs and the \
indexer's need 19570944 + 2361344 bytes, more than the limit of $((N - 1)) (--max-mem)"
ok '... and writes nothing' test ! -e "$T/mm3"
# a set without an indexer into the folder of one with it: one set, not
# the new inputs beside the old indexer's
ok 'gen without an indexer over a V3.2 set' kvattn gen --model-config \
    "$KV_TOP/tests/configs/deepseek-v2-lite.json" --shape 1,2,3 --dir "$D"
expect_eq '... leaves only its own files' "$(ls "$D" | LC_ALL=C sort | tr '\n' ' ')" \
    "block_table.npy c_kv.npy k_pe.npy kv_cache.npy q.npy q_absorbed.npy q_lens scale seq_lens w_uk.npy w_uv.npy "
done_testing
