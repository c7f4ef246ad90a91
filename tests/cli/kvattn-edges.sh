#!/bin/sh
# kvattn-edges.sh - edges of kvattn and kvxattn outputs: a 1-d or 0-d mask
# broadcasts numpy style; cmp counts an infinity against another value as
# an infinite difference; a result and its side outputs (--lse, --lse-out,
# --scores, the scales of quant, gen's Q K V, mla's --lse, kvxattn's --sums and
# --per-block) are committed together, so a failed write of one leaves
# every file as it was; kvxattn's threshold 1 stops where the float64
# running sum reaches the row's total, as the original's cumulative sum.
. "$KV_TOP/tests/lib.sh"
need_numpy
cd "$T" || exit 1
"$PY" - <<'PYEOF' || exit 1
import numpy as np
rng = np.random.default_rng(7)
np.save('q.npy', rng.standard_normal((1, 2, 3, 16)).astype(np.float32))
np.save('k.npy', rng.standard_normal((1, 1, 5, 16)).astype(np.float32))
np.save('v.npy', rng.standard_normal((1, 1, 5, 16)).astype(np.float32))
np.save('m1.npy', np.array([0, 0, 1, 0, 0], bool))
np.save('m2.npy', np.array([[0, 0, 1, 0, 0]], bool))
np.save('m0.npy', np.array(False))
np.save('m0t.npy', np.array(True))
np.save('a.npy', np.array([1, np.inf], np.float32))
np.save('b.npy', np.array([1, 5], np.float32))
np.save('c.npy', np.array([1, -np.inf], np.float32))
np.save('iq.npy', rng.standard_normal((6, 2, 8)).astype(np.float32))
np.save('ik.npy', rng.standard_normal((6, 8)).astype(np.float32))
np.save('iw.npy', rng.standard_normal((6, 2)).astype(np.float32))
np.save('xq.npy', np.array([[[[1.0]]]], np.float32))
np.save('xk.npy', np.array([[[[0.0], [-46.0], [-57.0]]]], np.float32))
np.save('bq.npy', rng.standard_normal((1, 2, 256, 16)).astype(np.float32))
np.save('bk.npy', rng.standard_normal((1, 2, 256, 16)).astype(np.float32))
PYEOF

# ---- masks of fewer than 2 axes broadcast as numpy broadcasts them --------
ok 'a [Lk] key mask' kvattn run -q q.npy -k k.npy -v v.npy --mask m1.npy -o o1.npy
ok 'the same mask as [1, Lk]' kvattn run -q q.npy -k k.npy -v v.npy --mask m2.npy -o o2.npy
expect_eq '[Lk] and [1, Lk] give the same bytes' "$(cmp o1.npy o2.npy && echo same)" same
ok 'a 0-d mask (False: nothing masked)' kvattn run -q q.npy -k k.npy -v v.npy --mask m0.npy -o o0.npy
ok 'no mask' kvattn run -q q.npy -k k.npy -v v.npy -o on.npy
expect_eq 'a 0-d False mask is no mask' "$(cmp o0.npy on.npy && echo same)" same
ok 'a 0-d True mask (every key masked)' kvattn run -q q.npy -k k.npy -v v.npy --mask m0t.npy -f text -o ot.txt
expect_eq 'every row fully masked is 0' "$(tr ' ' '\n' <ot.txt | grep -v '^$' | sort -u | tr '\n' ' ')" '0 '

# ---- cmp: an infinity against another value -------------------------------
ok 'cmp [1, inf] with [1, 5]: exit 1 (a mismatch)' sh -c 'kvattn cmp a.npy b.npy; test $? = 1'
expect_eq 'max_abs, max_rel and rmse are infinite' \
    "$(grep -E '^(max_abs|max_rel|rmse):' "$T/.out" | tr '\n' ' ')" \
    'max_abs: inf max_rel: inf rmse: inf '
ok 'cmp -f json' sh -c 'kvattn cmp a.npy b.npy -f json; test $? = 1'
expect_eq 'JSON: null for the infinite figures' \
    "$(grep -o '"max_abs":[^,]*,"max_rel":[^,]*,"rmse":[^,]*' "$T/.out")" \
    '"max_abs":null,"max_rel":null,"rmse":null'
ok 'cmp [1, inf] with [1, -inf]' sh -c 'kvattn cmp a.npy c.npy; test $? = 1'
expect_eq 'opposite infinities: max_abs inf, max_rel over finite B only' \
    "$(grep -E '^(max_abs|max_rel):' "$T/.out" | tr '\n' ' ')" 'max_abs: inf max_rel: 0 '
ok 'cmp [1, inf] with itself' kvattn cmp a.npy a.npy
expect_eq 'the same infinity is no difference' "$(grep '^max_abs:' "$T/.out")" 'max_abs: 0'

# ---- side outputs are committed with the result ---------------------------
old() { for f in "$@"; do echo old >"$f"; done; }
kept() { for f in "$@"; do [ "$(cat "$f")" = old ] || { echo "$f replaced"; return; }; done; echo kept; }
old l.npy
expect_fail 1 'run: -o in a missing directory' kvattn run -q q.npy -k k.npy -v v.npy -o nodir/o.npy --lse l.npy
expect_eq 'run: --lse left as it was' "$(kept l.npy)" kept
if [ -w /dev/full ]; then
    expect_fail 1 'run: standard output full' sh -c 'kvattn run -q q.npy -k k.npy -v v.npy --lse l.npy >/dev/full'
    expect_eq 'run: --lse left as it was (stdout full)' "$(kept l.npy)" kept
    expect_eq 'run: one message' "$(grep -c 'write error' "$T/.err")" 1
fi
ok 'run with --lse' kvattn run -q q.npy -k k.npy -v v.npy -o oa.npy --lse la.npy
ok 'run with --lse, again' kvattn run -q q.npy -k k.npy -v v.npy -o ob.npy --lse lb.npy
old lm.npy
expect_fail 1 'merge: -o in a missing directory' kvattn merge oa.npy la.npy ob.npy lb.npy -o nodir/m.npy --lse-out lm.npy
expect_eq 'merge: --lse-out left as it was' "$(kept lm.npy)" kept
old sc.npy
expect_fail 1 'index: -o in a missing directory' kvattn index -q iq.npy -k ik.npy --weights iw.npy --topk 2 --scores sc.npy -o nodir/i.npy
expect_eq 'index: --scores left as it was' "$(kept sc.npy)" kept
old k8.npy sc8.npy
expect_fail 1 'quant: --v-out in a missing directory' kvattn quant --kv-dtype fp8_per_token_head \
    -k k.npy -v v.npy -o k8.npy --v-out nodir/v8.npy --scales-out sc8.npy
expect_eq 'quant: the cache and the scales left as they were' "$(kept k8.npy sc8.npy)" kept
old gq.npy gk.npy
expect_fail 1 'gen: -v in a missing directory' kvattn gen --shape 1,2,4,8 -q gq.npy -k gk.npy -v nodir/gv.npy
expect_eq 'gen: Q and K left as they were' "$(kept gq.npy gk.npy)" kept
C2="$KV_TOP/tests/configs/deepseek-v2-lite.json"
ok 'gen: an MLA set' kvattn gen --model-config "$C2" --shape 1,1 --kv-len 40 --dtype f32 --dir mla
old ml.npy
expect_fail 1 'mla: -o in a missing directory' kvattn mla -q mla/q_absorbed.npy --kv-cache mla/kv_cache.npy \
    --block-table mla/block_table.npy --seq-lens 40 --causal --model-config "$C2" --lse ml.npy -o nodir/m.npy
expect_eq 'mla: --lse left as it was' "$(kept ml.npy)" kept
old s.npy
expect_fail 1 'kvxattn estimate: -o in a missing directory' kvxattn estimate -q bq.npy -k bk.npy \
    --sums s.npy -o nodir/m.npy
expect_eq 'kvxattn estimate: --sums left as it was' "$(kept s.npy)" kept
ok 'kvxattn estimate: a mask' kvxattn estimate -q bq.npy -k bk.npy -o bm.npy
old pb.npy
expect_fail 1 'kvxattn recall: -o in a missing directory' kvxattn recall -q bq.npy -k bk.npy \
    --mask bm.npy --per-block pb.npy -o nodir/r.txt
expect_eq 'kvxattn recall: --per-block left as it was' "$(kept pb.npy)" kept
mkdir adir
expect_fail 1 'run: --lse names a directory, the result on standard output' \
    kvattn run -q q.npy -k k.npy -v v.npy -o - --lse adir
expect_eq 'the message names the directory' "$(grep -c "cannot write 'adir': Is a directory" "$T/.err")" 1
ln -s r4.npy lnk.npy
expect_fail 2 'run: --lse a dangling link to the -o file' \
    kvattn run -q q.npy -k k.npy -v v.npy -o r4.npy --lse lnk.npy
expect_eq 'nothing written through the link' "$(ls r4.npy 2>/dev/null | wc -l | tr -d ' ')" 0
expect_eq 'no temporary file left' "$(ls | grep -c '\.tmp\.')" 0

# ---- kvxattn --threshold 1: the running sum in float64 --------------------
# Non-causal, one block a key: the sums are 1, e^-46 and e^-57 of their
# total; after the first, the float64 running sum already equals the total
# (1 + 1e-20 rounds to 1), so the next is not kept (the comparison is
# strictly <), as the original's torch.cumsum in float64 decides.
expect_out 'threshold 1: blocks under the running sum'"'"'s rounding are left out' '1 0 0' \
    kvxattn estimate -q xq.npy -k xk.npy --stride 1 --block-size 1 --threshold 1 --no-causal -f text
done_testing
