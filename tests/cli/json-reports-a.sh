#!/bin/sh
# json-reports-a.sh - -f json of kvattn cmp, kvattn bound, kvxattn recall
# and kvmask's stats: each line parses as JSON, holds the documented keys
# and the same figures as the text report of the same inputs.
. "$KV_TOP/tests/lib.sh"

PY=python3
if ! "$PY" -c 'import json' 2>/dev/null; then
    _report 1 'python3 for the JSON checks'
    done_testing
    exit 1
fi

# chk.py KIND TEXT JSON KEYS: reads the text report as the JSON objects it
# stands for (one per record), and prints 'same' when the JSON lines parse,
# the first object's keys are KEYS (comma-separated, in order) and every
# object equals its text counterpart, figure for figure
cat >"$T/chk.py" <<'PYEOF'
import json, re, sys

def num(s):
    s = s.strip().rstrip(',')
    if s in ('nan', '-nan', 'inf', '-inf'):
        return None
    return int(s) if re.fullmatch(r'-?\d+', s) else float(s)

def nums(s):
    return [num(x) for x in s.replace('(', ' ').replace(')', ' ').replace(',', ' ').split()]

def read_text(kind, lines):
    if kind == 'bound' and len(lines) == 1 and ':' not in lines[0]:
        return [{'out': num(lines[0])}]
    head, recs = {}, []
    for ln in lines:
        if kind == 'recall' and ' head ' in ' ' + ln:
            pre, rest = ln.split(':', 1)
            pre = pre.split()
            r = {'batch': int(pre[1]) if pre[0] == 'batch' else 0,
                 'head': int(pre[-1])}
            t = rest.split()
            for i in range(0, len(t), 2):
                r[t[i]] = num(t[i + 1])
            recs.append(r)
            continue
        k, v = ln.split(':', 1)
        v = v.strip()
        if k == 'shape' and kind == 'cmp':
            head[k] = nums(v)
        elif k == 'worst':
            t = v.split(' ', 1)
            idx = t[1][:t[1].index(')') + 1]
            ab = t[1][len(idx):].split()
            head[k] = [int(t[0]), nums(idx), num(ab[0]), num(ab[1])]
        elif k in ('mismatched', 'mismatched_rows'):
            m = re.fullmatch(r'(\d+) of (\d+) \(atol (\S+) rtol (\S+)\)', v)
            head[k] = int(m.group(1))
            if k == 'mismatched':
                head['of'] = int(m.group(2))
            head['atol'] = num(m.group(3))
            head['rtol'] = num(m.group(4))
        elif k in ('nan', 'mass', 'shape', 'block_size', 'tiles', 'first', 'last'):
            head[k] = nums(v)
        else:
            head[k] = num(v)
    return [head] + recs

kind, text, js, keys = sys.argv[1:5]
want = read_text(kind, [l for l in open(text).read().split('\n') if l])
got = [json.loads(l) for l in open(js).read().split('\n') if l]
if list(got[0].keys()) != keys.split(','):
    print('keys', list(got[0].keys()))
elif got != want:
    print('differ', got, want)
else:
    print('same')
PYEOF

# npy.py FILE V...: a float32 vector as .npy (nan allowed)
cat >"$T/npy.py" <<'PYEOF'
import struct, sys
v = [float(x) for x in sys.argv[2:]]
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(v)
h += ' ' * (63 - (10 + len(h)) % 64) + '\n'
with open(sys.argv[1], 'wb') as f:
    f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode())
    f.write(struct.pack('<%df' % len(v), *v))
PYEOF

same() {   # title kind text json keys
    expect_eq "$1" "$("$PY" "$T/chk.py" "$2" "$3" "$4" "$5" 2>&1)" same
}

# ---- kvattn cmp ---------------------------------------------------------------
CMPKEYS=shape,max_abs,max_rel,rmse,cosine,worst,mismatched,of,atol,rtol
ok 'gen' kvattn gen --shape 1,2,64,16 -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy"
ok 'run f32' kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --causal -o "$T/o.npy"
ok 'run bf16 out' kvattn run -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --causal --out-dtype bf16 -o "$T/ob.npy"
kvattn cmp "$T/ob.npy" "$T/o.npy" >"$T/cmp.txt"
kvattn cmp -f json "$T/ob.npy" "$T/o.npy" >"$T/cmp.json"
expect_eq 'cmp -f json: still exit 1 when not close' "$?" 1
same 'cmp -f json: the text figures' cmp "$T/cmp.txt" "$T/cmp.json" "$CMPKEYS"
expect_eq 'cmp -f json: one line' "$(wc -l <"$T/cmp.json")" 1
ok 'cmp -f json: close, exit 0' kvattn cmp -f json --atol 1e-2 --rtol 0.5 "$T/ob.npy" "$T/o.npy"
cp "$T/.out" "$T/cmp2.json"
kvattn cmp --atol 1e-2 --rtol 0.5 "$T/ob.npy" "$T/o.npy" >"$T/cmp2.txt"
same 'cmp -f json --atol --rtol: the text figures' cmp "$T/cmp2.txt" "$T/cmp2.json" "$CMPKEYS"
expect_out 'cmp -f json --quiet prints nothing' '' kvattn cmp -f json --quiet "$T/o.npy" "$T/o.npy"
"$PY" "$T/npy.py" "$T/na.npy" 1 nan 3 nan
"$PY" "$T/npy.py" "$T/nb.npy" 1 nan 2.5 4
kvattn cmp "$T/na.npy" "$T/nb.npy" >"$T/nan.txt"
kvattn cmp -f json "$T/na.npy" "$T/nb.npy" >"$T/nan.json"
same 'cmp -f json with NaN: the nan field' cmp "$T/nan.txt" "$T/nan.json" \
    shape,max_abs,max_rel,rmse,cosine,worst,nan,mismatched,of,atol,rtol
kvmask causal -n 6 -o "$T/m1.npy"
kvmask window -n 6 -w 2 -o "$T/m2.npy"
kvattn cmp --mass "$T/m1.npy" "$T/m2.npy" >"$T/mass.txt"
kvattn cmp --mass -f json "$T/m1.npy" "$T/m2.npy" >"$T/mass.json"
same 'cmp --mass -f json: the text figures' cmp "$T/mass.txt" "$T/mass.json" \
    shape,max_abs,max_rel,rmse,cosine,worst,rows,mass,max_mass_diff,max_tv,worst_row,mismatched_rows,atol,rtol
expect_fail 2 'cmp -f xml: usage error' kvattn cmp -f xml "$T/o.npy" "$T/o.npy"

# ---- kvattn bound -------------------------------------------------------------
ok 'bound --all' kvattn bound -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --all
cp "$T/.out" "$T/b.txt"
ok 'bound --all -f json' kvattn bound -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --all -f json
cp "$T/.out" "$T/b.json"
same 'bound --all -f json: the text figures' bound "$T/b.txt" "$T/b.json" out,lse,keys,head_dim,score_max,v_max
ok 'bound' kvattn bound -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --routes 3
cp "$T/.out" "$T/b1.txt"
ok 'bound -f json' kvattn bound -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" --routes 3 -f json
cp "$T/.out" "$T/b1.json"
same 'bound -f json: the bound alone' bound "$T/b1.txt" "$T/b1.json" out
expect_fail 2 'bound -f xml: usage error' kvattn bound -q "$T/q.npy" -k "$T/k.npy" -v "$T/v.npy" -f xml

# ---- kvxattn recall -----------------------------------------------------------
RKEYS=recall_min,recall_mean,density,kept,valid
ok 'recall gen' kvattn gen --shape 2,2,320,32 --pattern sink --seed 9 -q "$T/rq.npy" -k "$T/rk.npy" -v "$T/rv.npy"
ok 'recall estimate' kvxattn estimate -q "$T/rq.npy" -k "$T/rk.npy" --threshold 0.5 --stride 4 --block-size 64 -o "$T/rm.npy"
ok 'recall' kvxattn recall -q "$T/rq.npy" -k "$T/rk.npy" --mask "$T/rm.npy" --block-size 64
cp "$T/.out" "$T/r.txt"
ok 'recall -f json' kvxattn recall -q "$T/rq.npy" -k "$T/rk.npy" --mask "$T/rm.npy" --block-size 64 -f json
cp "$T/.out" "$T/r.json"
same 'recall -f json: the text figures' recall "$T/r.txt" "$T/r.json" "$RKEYS"
expect_eq 'recall -f json: a line per head after the total' "$(wc -l <"$T/r.json")" 5
expect_eq 'recall -f json: head lines name batch and head' \
    "$(sed -n 5p "$T/r.json" | cut -c1-20)" '{"batch":1,"head":1,'
expect_eq 'recall: the mask is sparse' "$(awk '/^density:/ { print ($2 < 1) }' "$T/r.txt")" 1
expect_fail 2 'recall -f stats: usage error' kvxattn recall -q "$T/rq.npy" -k "$T/rk.npy" --mask "$T/rm.npy" -f stats

# ---- kvmask -f json -----------------------------------------------------------
SKEYS=shape,kept,total,density,block_size,tiles,full,partial,empty,sparsity,first,last
kvmask window -q 7 -k 9 -w 3 -f stats --block-size 2,4 >"$T/s.txt"
ok 'kvmask -f json' kvmask window -q 7 -k 9 -w 3 -f json --block-size 2,4
cp "$T/.out" "$T/s.json"
same 'kvmask -f json: the stats figures' stats "$T/s.txt" "$T/s.json" "$SKEYS"
kvmask causal -q 3 -k 1 -f stats >"$T/s2.txt"
ok 'kvmask -f json: empty rows' kvmask causal -q 3 -k 1 -f json
cp "$T/.out" "$T/s2.json"
same 'kvmask -f json without tiles, empty rows -1' stats "$T/s2.txt" "$T/s2.json" shape,kept,total,density,first,last
expect_fail 2 'kvmask -f json with --batch: as stats, a usage error' kvmask causal -n 4 --batch 2 -f json

done_testing
