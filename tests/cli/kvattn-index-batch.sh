#!/bin/sh
# kvattn-index-batch.sh - kvattn index over a packed batch (--q-lens,
# --kv-lens): byte for byte the rows of one call per request, in order,
# causal or not, with scores, for any -j; its indices (positions in each
# request) piped into kvattn mla --topk-indices for a batch of requests;
# lengths that do not fit the inputs refused.
. "$KV_TOP/tests/lib.sh"
need_numpy
"$PY" - "$T" <<'EOF'
import sys, numpy as np
t = sys.argv[1]; rng = np.random.default_rng(11)
H, D = 3, 8
for name, ql, kl in (('a', [4, 0, 3, 1], [9, 5, 3, 20]), ('b', [2, 5, 1], [7, 1, 3])):
    q = rng.standard_normal((sum(ql), H, D)).astype(np.float32)
    k = rng.standard_normal((sum(kl), D)).astype(np.float32)
    k[3] = k[1]                                   # equal scores: the smaller index
    w = rng.uniform(-1, 1, (sum(ql), H)).astype(np.float32)
    np.save('%s/%s_q.npy' % (t, name), q); np.save('%s/%s_k.npy' % (t, name), k)
    np.save('%s/%s_w.npy' % (t, name), w)
    q0 = k0 = 0
    for b, (lq, lk) in enumerate(zip(ql, kl)):
        np.save('%s/%s%d_q.npy' % (t, name, b), q[q0:q0 + lq])
        np.save('%s/%s%d_k.npy' % (t, name, b), k[k0:k0 + lk])
        np.save('%s/%s%d_w.npy' % (t, name, b), w[q0:q0 + lq])
        q0 += lq; k0 += lk
EOF
cat >"$T/cat.py" <<'EOF'
import sys, numpy as np
out, parts = sys.argv[1], sys.argv[2:]
np.save(out, np.concatenate([np.load(p) for p in parts]))
EOF
each() {   # each NAME N OPTS..: one call per request, the rows concatenated
    _nm=$1; _cnt=$2; shift 2; _i=0; _parts=; _sparts=
    while [ $_i -lt "$_cnt" ]; do
        kvattn index -q "$T/$_nm${_i}_q.npy" -k "$T/$_nm${_i}_k.npy" --weights "$T/$_nm${_i}_w.npy" \
            -o "$T/p$_i.npy" --scores "$T/ps$_i.npy" "$@" || return 1
        _parts="$_parts $T/p$_i.npy"; _sparts="$_sparts $T/ps$_i.npy"; _i=$((_i + 1))
    done
    # shellcheck disable=SC2086
    "$PY" "$T/cat.py" "$T/each.npy" $_parts && "$PY" "$T/cat.py" "$T/each_s.npy" $_sparts
}
A="-q $T/a_q.npy -k $T/a_k.npy --weights $T/a_w.npy"
# shellcheck disable=SC2086
{
ok 'a batch of 4 requests (one without queries), causal, top 6' kvattn index $A --q-lens 4,0,3,1 --kv-lens 9,5,3,20 --topk 6 -o "$T/i.npy" --scores "$T/s.npy"
ok 'one call per request' each a 4 --topk 6
expect_file_eq 'the batch = the requests one by one' "$T/i.npy" "$T/each.npy"
expect_file_eq 'their scores too' "$T/s.npy" "$T/each_s.npy"
ok 'the batch at -j 1' kvattn index $A --q-lens 4,0,3,1 --kv-lens 9,5,3,20 --topk 6 -o "$T/i1.npy" -j 1
expect_file_eq 'any -j' "$T/i.npy" "$T/i1.npy"
ok '--no-causal: more queries than keys in a request' kvattn index -q "$T/b_q.npy" -k "$T/b_k.npy" --weights "$T/b_w.npy" --q-lens 2,5,1 --kv-lens 7,1,3 --topk 4 --no-causal -o "$T/i2.npy" --scores "$T/s2.npy"
ok 'one call per request, --no-causal' each b 3 --topk 4 --no-causal
expect_file_eq '--no-causal batch = the requests one by one' "$T/i2.npy" "$T/each.npy"
expect_file_eq 'and their scores' "$T/s2.npy" "$T/each_s.npy"
expect_fail 1 'lengths that sum to fewer queries than Q holds' kvattn index $A --q-lens 4,0,3 --kv-lens 9,5,3 -o "$T/bad.npy"
expect_fail 1 'more keys than K holds' kvattn index $A --q-lens 4,0,3,1 --kv-lens 9,5,3,21 -o "$T/bad.npy"
expect_fail 1 'causal: a request with more queries than keys' kvattn index -q "$T/b_q.npy" -k "$T/b_k.npy" --weights "$T/b_w.npy" --q-lens 2,5,1 --kv-lens 7,1,3 -o "$T/bad.npy"
expect_fail 2 '--kv-lens without --q-lens' kvattn index $A --kv-lens 9,5,3,20 -o "$T/bad.npy"
expect_fail 2 'lists of different lengths' kvattn index $A --q-lens 4,0,3,1 --kv-lens 9,5 -o "$T/bad.npy"
expect_fail 2 'a negative length' kvattn index $A --q-lens 4,-1,3,1 --kv-lens 9,5,3,20 -o "$T/bad.npy"
}
ok 'nothing written on failure' test ! -e "$T/bad.npy"
printf '{"num_attention_heads": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "index_n_heads": 4, "index_head_dim": 32, "index_topk": 16}' >"$T/v32.json"
ok 'gen: two requests of 3 queries over 40 keys (DeepSeek-V3.2)' kvattn gen --model-config "$T/v32.json" --shape 2,3 --kv-len 40 --dtype f32 --dir "$T/g"
G="$T/g"
ok 'index the batch' kvattn index -q "$G/index_q.npy" -k "$G/index_k.npy" --weights "$G/index_weights.npy" --q-lens 3,3 --kv-lens 40,40 --topk 16 -o "$T/gi.npy"
"$PY" -c "
import numpy as np
g = '$G'; q, k, w = (np.load(g + f) for f in ('/index_q.npy', '/index_k.npy', '/index_weights.npy'))
for b in range(2):
    np.save('$T/g%d_q.npy' % b, q[3 * b:3 * b + 3]); np.save('$T/g%d_k.npy' % b, k[40 * b:40 * b + 40])
    np.save('$T/g%d_w.npy' % b, w[3 * b:3 * b + 3])"
ok 'each request alone' each g 2 --topk 16
expect_file_eq 'the same indices' "$T/gi.npy" "$T/each.npy"
M="-q $G/q_absorbed.npy --kv-cache $G/kv_cache.npy --block-table $G/block_table.npy --seq-lens 40,40 --q-lens 3,3 --causal --model-config $T/v32.json"
# shellcheck disable=SC2086
ok 'the batch piped into sparse MLA' sh -c "kvattn index -q '$G/index_q.npy' -k '$G/index_k.npy' --weights '$G/index_weights.npy' --q-lens 3,3 --kv-lens 40,40 --topk 16 | kvattn mla $M --topk-indices - -o '$T/o1.npy'"
# shellcheck disable=SC2086
ok 'sparse MLA over the per-request indices' kvattn mla $M --topk-indices "$T/each.npy" -o "$T/o2.npy"
expect_file_eq 'the same output' "$T/o1.npy" "$T/o2.npy"
done_testing
