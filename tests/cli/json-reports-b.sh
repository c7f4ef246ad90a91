#!/bin/sh
# json-reports-b.sh - -f json of kvslot plan (its steps and --summary),
# kvchunk sim, info, stat and fsck: each line parses as one JSON object, has
# the documented fields in the text output's order, and its figures equal
# the text (or CSV) output's for the same inputs.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1

# kv_lines TEXT JSON: "name: value" text against one JSON object a line
# (fsck's problems: {"problem": LINE} before the counters).
kv_lines() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().splitlines()
objs = [json.loads(l) for l in open(sys.argv[2])]
back = []
for o in objs:
    assert isinstance(o, dict), o
    if list(o) == ["problem"]:
        back.append(o["problem"])
        continue
    for k, v in o.items():
        assert isinstance(v, (str, int)) and not isinstance(v, bool), (k, v)
        back.append("%s: %s" % (k, v))
if back != text:
    sys.exit("json %r\ntext %r" % (back, text))
EOF
}

# steps TEXT JSON: kvslot plan's "name: v v v" steps against an object a
# step (scalars, lists, a matrix as a list of rows, hashes as hex strings).
steps() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().splitlines()
back = []
for l in open(sys.argv[2]):
    o = json.loads(l)
    for k, v in o.items():
        rows = v if v and isinstance(v, list) and isinstance(v[0], list) \
            else [v]
        for r in rows:
            vals = r if isinstance(r, list) else [r]
            assert all(isinstance(x, (int, str)) for x in vals), (k, r)
            back.append(" ".join([k + ":"] + [str(x) for x in vals]))
if back != text:
    sys.exit("first difference at line %d" % next(
        i for i in range(max(len(back), len(text)))
        if i >= len(back) or i >= len(text) or back[i] != text[i]))
EOF
}

# ---- kvslot plan: a step an object ------------------------------------------
P="--prompt-lens 3,2,8 --max-tokens 10 -B 2 --max-model-len 12 --decode"
ok 'plan -f json' kvslot plan $P -f json -o plan.json
ok 'plan -f text' kvslot plan $P -f text -o plan.txt
ok 'plan: an object a step, the same fields and figures as the text' \
    steps plan.txt plan.json
expect_eq 'plan: the keys of a step, in order' "$(python3 -c '
import json; print(",".join(json.loads(open("plan.json").readline())))')" \
"step,req_ids,num_scheduled_tokens,query_start_loc,seq_lens,\
num_computed_tokens,positions,req_indices,token_indices,block_table_indices,\
block_numbers,block_offsets,slot_mapping,max_query_len,num_tokens,num_reqs,\
block_table,waiting,blocked,preempted,finished,free_blocks"
expect_eq 'plan: one line a step' "$(wc -l <plan.json)" \
    "$(grep -c '^step:' plan.txt)"
F=step,block_table,max_query_len
ok 'plan --fields' kvslot plan $P --fields $F -f json -o f.json
expect_eq 'plan --fields: the first step' "$(head -n 1 f.json)" \
    '{"step":1,"block_table":[[1,2,0,0,0,0],[3,0,0,0,0,0],[4,5,6,0,0,0]],"max_query_len":5}'

# prefix caching: evicted hashes as strings, --summary over a trace
printf '1 2 3 4 5 6 7 8\n1 2 3 4 5 6 9 9\n9 8 7 6 5 4 3 2\n' >p.txt
A="--prompts p.txt --max-tokens 8 -B 2 --max-model-len 12 --num-blocks 8 \
--enable-prefix-caching --output-lens 2 --decode"
ok 'plan, prefix caching -f json' kvslot plan $A -f json -o apc.json
ok 'plan, prefix caching -f text' kvslot plan $A -f text -o apc.txt
ok 'plan, prefix caching: the same figures' steps apc.txt apc.json
expect_eq 'plan, prefix caching: some hashes evicted' \
    "$(grep -c '"evicted_hashes":\["' apc.json | awk '{ print ($1 > 0) }')" 1
head -8 "$VEC/traces/mooncake-conversation.jsonl" >t8.jsonl
S="--trace t8.jsonl --max-tokens 4096 -B 16 --max-model-len 131072 \
--num-blocks 9000 --enable-prefix-caching --decode -q --summary"
ok 'plan --summary -f json' kvslot plan $S -f json -o sum.json
ok 'plan --summary -f text' kvslot plan $S -f text -o sum.txt
expect_eq 'plan --summary: the text line from the JSON' "$(python3 -c '
import json; o = json.load(open("sum.json"))
assert list(o) == ["steps", "prefix_hit_tokens", "preemptions", "evictions",
                   "peak_blocks"], o
print(" ".join("%s %d" % kv for kv in o.items()))')" "$(cat sum.txt)"
expect_fail 2 'plan -f yaml' kvslot plan $P -f yaml
printf '1 2\n' >bt.txt
expect_fail 2 'map has no -f json' kvslot map -B 2 --block-table bt.txt \
    --scheduled 1 -f json

# ---- kvchunk sim: a row an object ------------------------------------------
cat >toy.txt <<'EOF'
# time tenant sys chunks question output
0 - - A:8 2 1
1 - - A:8 3 1
2 - - A:8 0 1
3 - - X:3 0 1
EOF
Q="-B 4 --capacity-tokens 1000,40"
ok 'sim -f json' kvchunk sim $Q -f json -o sim.json toy.txt
ok 'sim --csv' kvchunk sim $Q --csv -o sim.csv toy.txt
ok 'sim: the CSV figures, the CSV names' python3 - <<'EOF'
import csv, json
rows = list(csv.DictReader(open("sim.csv")))
objs = [json.loads(l) for l in open("sim.json")]
assert len(rows) == len(objs) == 8, (len(rows), len(objs))
for r, o in zip(rows, objs):
    assert list(o) == list(r), (list(o), list(r))
    for k, v in r.items():
        if k == "policy":
            assert o[k] == v, (k, o[k], v)
        elif v == "":
            assert o[k] is None, (k, o[k])
        else:
            assert not isinstance(o[k], (bool, str)) and o[k] == float(v), \
                (k, o[k], v)
EOF
expect_fail 2 'sim: --csv and -f json together' kvchunk sim $Q --csv -f json \
    toy.txt
expect_fail 2 'sim -f csv' kvchunk sim $Q -f csv toy.txt

# ---- kvchunk info, stat, fsck ----------------------------------------------
I="--shape 2,2,16 --dtype f32"
kvchunk info $I -f json >info.json
kvchunk info $I >info.txt
ok 'info: the text fields and values' kv_lines info.txt info.json
expect_eq 'info: its keys' "$(python3 -c '
import json; print(",".join(json.load(open("info.json"))))')" \
    'layers,kv_heads,head_dim,dtype,rope,bytes_per_token,ns_digest'
expect_fail 2 'info -f npy' kvchunk info $I -f npy

printf '1 2 3 4 5 6 7 8' >c.tok
ok 'toy KV' kvchunk toy $I --tokens c.tok -o kv.npy
ok 'put' kvchunk put --store dir:st $I --tokens c.tok --kv kv.npy --base-pos 0
kvchunk stat --store dir:st -f json >stat.json
kvchunk stat --store dir:st >stat.txt
ok 'stat: the text fields and values' kv_lines stat.txt stat.json
expect_eq 'stat: entries, bytes, puts' "$(python3 -c '
import json; o = json.load(open("stat.json"))
print(o["entries"], o["bytes"] > 0, o["puts"])')" '1 True 1'
kvchunk fsck --store dir:st -f json >fsck.json
kvchunk fsck --store dir:st >fsck.txt
ok 'fsck, clean: the text fields and values' kv_lines fsck.txt fsck.json
# a damaged blob: a problem line, then the counters; exit 1 either way
f=$(find st -name '*.kvc')
printf 'XXXX' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null
kvchunk fsck --store dir:st -f json >bad.json 2>bad.err
expect_eq 'fsck -f json, a corrupt blob: exit 1' "$?" 1
kvchunk fsck --store dir:st >bad.txt 2>/dev/null
ok 'fsck, a corrupt blob: the problem and the counters' kv_lines bad.txt \
    bad.json
expect_eq 'fsck: corrupt 1' "$(python3 -c '
import json; print(json.loads(open("bad.json").read().splitlines()[-1])["corrupt"])')" 1
expect_fail 2 'fsck -f text,json' kvchunk fsck --store dir:st -f text,json

done_testing
