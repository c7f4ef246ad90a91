#!/bin/sh
# kvchunk.sh - the kvchunk command line: split, key, put, get, assemble,
# ls, stat, evict, rm, pin, fsck; end to end with the toy projection;
# usage errors.  Reliability (crash, corruption, permissions, disk full)
# is in kvchunk-reliability.sh, Redis in kvchunk-redis.sh.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1
S="dir:$T/store"
SH="--shape 2,2,16"

# token ids of a text: its bytes
tok() { printf '%s' "$2" | od -An -tu1 -v >"$1"; }

# ---- split ----------------------------------------------------------------
printf 'You are helpful.##Doc one.##Doc \\## two.##What?' >p.txt
golden 'split: segments as text' kvchunk/split.txt kvchunk split -f text p.txt
golden 'split: with keys' kvchunk/split-keys.txt \
    kvchunk split -f text $SH --model toy p.txt
golden 'split: stdin, --sep' kvchunk/split-sep.txt \
    sh -c "printf 'a||bb||ccc' | kvchunk split -f text --sep '||'"
printf '1 2 9 9 3 4 9 9 5' >ids.txt
expect_out 'split --ids --sep-ids' 'sys 0 2
chunk 2 2
question 4 1' kvchunk split -f text --ids --sep-ids 9,9 ids.txt
ok 'split -f npy -o' kvchunk split -f npy -o segs.npy $SH p.txt
expect_eq 'split npy: segments then keys' \
    "$(od -An -c -j1 -N5 segs.npy | tr -d ' ')" 'NUMPY'
expect_fail 2 'split --ids without --sep-ids' kvchunk split --ids ids.txt \
    2>/dev/null
expect_fail 1 'split: missing file' kvchunk split nosuch.txt
expect_fail 2 'info: a bad --max-mem refused' kvchunk info --shape 1,1,8 --max-mem x

# ---- key ------------------------------------------------------------------
printf '89 111 117' >sys.tok
printf '1 2 3 4 5' >c1.tok
golden 'key is stable' kvchunk/key.txt kvchunk key $SH --tokens c1.tok \
    --context sys.tok
golden 'key --explain' kvchunk/key-explain.txt kvchunk key $SH --model toy \
    --tokens c1.tok --context sys.tok --explain
k1=$(kvchunk key $SH --tokens c1.tok --context sys.tok)
# token ids as one .npy: the same key; a second array or trailing bytes
# after it are refused, not ignored
python3 -c '
import struct, sys
def npy(vals):
    h = "{\x27descr\x27: \x27<i4\x27, \x27fortran_order\x27: False, \x27shape\x27: (%d,), }" % len(vals)
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<%di" % len(vals), *vals)
ids = [int(x) for x in open("c1.tok").read().split()]
open("c1.npy-tok", "wb").write(npy(ids))
open("c1two.npy-tok", "wb").write(npy(ids) + npy(ids))
open("c1junk.npy-tok", "wb").write(npy(ids) + b"junk")
'
expect_eq 'key of .npy token ids' "$(kvchunk key $SH --tokens c1.npy-tok --context sys.tok)" "$k1"
expect_fail 1 'token ids: a second array refused' kvchunk key $SH --tokens c1two.npy-tok --context sys.tok
expect_fail 1 'token ids: trailing bytes refused' kvchunk key $SH --tokens c1junk.npy-tok --context sys.tok
k2=$(kvchunk key $SH --tokens c1.tok)
k3=$(kvchunk key $SH --tokens c1.tok --chunk-context none)
k4=$(kvchunk key $SH --tokens c1.tok --context sys.tok --salt t1)
k5=$(kvchunk key --shape 2,2,16 --rotary-dim 8 --tokens c1.tok \
    --context sys.tok)
[ "$k1" != "$k2" ] && [ "$k1" != "$k3" ] && [ "$k1" != "$k4" ] &&
    [ "$k1" != "$k5" ] && [ "$k2" != "$k3" ]
expect_eq 'context, mode, salt, rope all change the key' $? 0
k6=$(kvchunk key $SH --nope-layers 1 --tokens c1.tok --context sys.tok)
expect_eq 'NoPE layers change the key' "$([ "$k6" != "$k1" ] && echo yes)" yes
expect_fail 2 'NoPE layer past the last layer' kvchunk key $SH \
    --nope-layers 2 --tokens c1.tok
# The preimage of kvchunk(1), hashed by hand (python3-xxhash, outside the
# test): "kvchunk/1\0", 0x01, XXH3-128 of the twelve namespace lines, 0x02,
# XXH3-128 of the sys tokens as int32 LE, 0x03, u32 n, the tokens.
printf '1 2 3 70000 -5' >hand.tok
printf '9 8 7' >hand-sys.tok
expect_out 'key equals the preimage of the man page hashed by hand' \
    7b407391b1caa25df8f02b45a78dc229 kvchunk key --shape 2,4,8 --model m1 \
    --rope-theta 500000 --rope-scaling llama3:factor=8,low=1,high=4,orig=8192 \
    --tokens hand.tok --context hand-sys.tok
printf '1\n2\n3 4,5\n' >c1b.tok
expect_out 'token files: any whitespace' "$k1" \
    kvchunk key $SH --tokens c1b.tok --context sys.tok
expect_out 'tokens from stdin' "$k1" \
    sh -c "printf '1 2 3 4 5' | kvchunk key $SH --tokens - --context sys.tok"

# ---- usage errors (exit 2, nothing on stdout) -------------------------------
expect_fail 2 'no subcommand' kvchunk
expect_fail 2 'unknown subcommand' kvchunk frobnicate
expect_fail 2 'key without --shape' kvchunk key --tokens c1.tok
expect_fail 2 'key without --tokens' kvchunk key $SH
expect_fail 2 'bad --shape' kvchunk key --shape 2,2 --tokens c1.tok
expect_fail 2 'bad --dtype' kvchunk key $SH --dtype i8 --tokens c1.tok
expect_fail 2 'bad --rope' kvchunk key $SH --rope alibi --tokens c1.tok
expect_fail 2 'bad --rope-scaling' kvchunk key $SH --rope-scaling cubic:2 \
    --tokens c1.tok
expect_fail 2 'odd --rotary-dim' kvchunk key $SH --rotary-dim 7 --tokens c1.tok
expect_fail 2 '--rotary-dim past the head dim' kvchunk key $SH \
    --rotary-dim 32 --tokens c1.tok
expect_fail 2 'bad --chunk-context' kvchunk key $SH --chunk-context all \
    --tokens c1.tok
expect_fail 2 'get without --at' kvchunk get --store "$S" $SH --tokens c1.tok
expect_fail 2 'get --at -1' kvchunk get --store "$S" $SH --tokens c1.tok \
    --at -1
expect_fail 2 'rm: bad key' kvchunk rm --store "$S" nothex
expect_fail 2 'evict without --max-size' kvchunk evict --store "$S"
expect_fail 2 'bad --store scheme' kvchunk stat --store ftp://x
expect_fail 1 'stat of a store never written' kvchunk stat --store dir:nostore
expect_eq 'it says so' "$(grep -c 'nothing has been put there yet' "$T/.err")" 1
printf '1 x 3' >bad.tok
expect_fail 1 'junk in a token file' kvchunk key $SH --tokens bad.tok
ok 'help' kvchunk put --help
expect_eq 'help: the usage line names the subcommand' \
    "$(kvchunk get --help | sed -n '1s/ \[.*//p')" 'Usage: kvchunk get'
expect_eq 'help: --store names the default store' \
    "$(kvchunk stat --help | grep -c 'KVCHUNK_STORE')" 1
expect_eq 'usage errors point at the subcommand help' \
    "$(kvchunk get --at 1 2>&1 >/dev/null | tail -n 1)" \
    "Try 'kvchunk get --help' for more information."

# ---- put / get ------------------------------------------------------------
ok 'toy KV of a chunk at its base position 3' \
    kvchunk toy $SH --dtype f32 --tokens c1.tok --pos 3 -o c1kv.npy
kf=$(kvchunk key $SH --dtype f32 --tokens c1.tok --context sys.tok)
expect_out 'put' "$kf stored" kvchunk put --store "$S" --tokens c1.tok \
    --context sys.tok --kv c1kv.npy --base-pos 3
expect_out 'put again: present' "$kf present" kvchunk put --store "$S" \
    --tokens c1.tok --context sys.tok --kv c1kv.npy --base-pos 3
expect_fail 2 'put: base position against the policy' kvchunk put \
    --store "$S" --tokens c1.tok --context sys.tok --kv c1kv.npy --base-pos 4
expect_fail 2 'put: a base position but no --context' kvchunk put \
    --store "$S" --tokens c1.tok --kv c1kv.npy --base-pos 3
expect_eq 'it says --context is missing' \
    "$(grep -c 'no --context was given' "$T/.err")" 1
expect_fail 2 'put: tokens and KV both from stdin' kvchunk put --store "$S" \
    --tokens - --context sys.tok --kv - --base-pos 3
expect_fail 2 'key: tokens and context both from stdin' kvchunk key $SH \
    --tokens - --context -
expect_fail 1 'put: KV of another length' kvchunk put --store "$S" \
    --tokens sys.tok --kv c1kv.npy --base-pos 0
ok 'get at 3 (no move)' kvchunk get --store "$S" $SH --dtype f32 \
    --tokens c1.tok --context sys.tok --at 3 -o same.npy
expect_file_eq 'get at the base position returns the stored bytes' \
    same.npy c1kv.npy
expect_fail 3 'get in another dtype: a miss' kvchunk get --store "$S" $SH \
    --tokens c1.tok --context sys.tok --at 3
expect_eq 'the miss names what the key covered' \
    "$(grep -c '(5 tokens, 3 context tokens, bf16 KV;' "$T/.err")" 1
ok 'get at 1000' kvchunk get --store "$S" $SH --dtype f32 --tokens c1.tok \
    --context sys.tok --at 1000 -o moved.npy
ok 'toy at 1000' kvchunk toy $SH --dtype f32 --tokens c1.tok --pos 1000 \
    -o direct.npy
if [ -x "$KV_BIN/kvattn" ]; then
    ok 'moved == computed at 1000 (kvattn cmp)' kvattn cmp --quiet \
        --atol 1e-6 --rtol 1e-6 moved.npy direct.npy
    ok 'moved != computed at 999' sh -c "kvchunk toy $SH \
        --dtype f32 --tokens c1.tok --pos 999 -o d999.npy &&
        ! kvattn cmp --quiet --atol 1e-6 --rtol 1e-6 moved.npy d999.npy"
fi
# moves never chain: every get starts from the stored copy
ok 'get at 1000 again' kvchunk get --store "$S" $SH --dtype f32 \
    --tokens c1.tok --context sys.tok --at 1000 -o moved2.npy
expect_file_eq 'the same move gives the same bytes' moved2.npy moved.npy
ok 'get at 3 after the moves' kvchunk get --store "$S" $SH --dtype f32 \
    --tokens c1.tok --context sys.tok --at 3 -o same2.npy
expect_file_eq 'moves never chain: the stored bytes again' same2.npy c1kv.npy
if [ -x "$KV_BIN/kvattn" ]; then
    ok 'NoPE layer 0: toy, put, get, compare' sh -c "
        kvchunk toy $SH --dtype f32 --nope-layers 0 --tokens c1.tok --pos 3 \
            -o n3.npy &&
        kvchunk put --store '$S' --nope-layers 0 --tokens c1.tok \
            --context sys.tok --kv n3.npy --base-pos 3 &&
        kvchunk get --store '$S' $SH --dtype f32 --nope-layers 0 \
            --tokens c1.tok --context sys.tok --at 700 -o n700.npy &&
        kvchunk toy $SH --dtype f32 --nope-layers 0 --tokens c1.tok \
            --pos 700 -o nd.npy &&
        kvattn cmp --quiet --atol 1e-6 --rtol 1e-6 n700.npy nd.npy"
fi
expect_fail 3 'get: miss exits 3 with empty stdout' kvchunk get --store "$S" \
    $SH --dtype f32 --tokens sys.tok --at 0
expect_fail 3 'get: other dtype is another namespace' kvchunk get \
    --store "$S" $SH --tokens c1.tok --context sys.tok --at 0
# rope none: a move is a copy, byte for byte
ok 'toy, no RoPE' kvchunk toy $SH --rope none --tokens c1.tok --pos 0 \
    -o nope.npy
ok 'put, no RoPE, isolated (--durable)' kvchunk put --store "$S" \
    --rope none --chunk-context none --tokens c1.tok --kv nope.npy \
    --base-pos 0 --durable
ok 'get, no RoPE, at 77' kvchunk get --store "$S" $SH --rope none \
    --chunk-context none --tokens c1.tok --at 77 -o nope77.npy
expect_file_eq 'no RoPE: moved bytes == stored bytes' nope77.npy nope.npy
ok 'learned positions: put at 0' kvchunk put --store "$S" --rope learned \
    --chunk-context none --tokens c1.tok --kv nope.npy --base-pos 0
expect_fail 1 'learned positions: a move is refused' kvchunk get \
    --store "$S" $SH --rope learned --chunk-context none --tokens c1.tok \
    --at 5
DYN='--rope-scaling dynamic:factor=2,max_pos=100 --chunk-context none'
ok 'dynamic NTK: toy at 0' kvchunk toy $SH --dtype f32 $DYN --tokens c1.tok \
    --pos 0 -o dyn.npy
ok 'dynamic NTK: put at 0' kvchunk put --store "$S" $SH --dtype f32 $DYN \
    --tokens c1.tok --kv dyn.npy --base-pos 0
ok 'dynamic NTK: a move inside max_pos' kvchunk get --store "$S" $SH \
    --dtype f32 $DYN --tokens c1.tok --at 50 -o dyn50.npy
expect_fail 1 'dynamic NTK: a move past max_pos is refused' kvchunk get \
    --store "$S" $SH --dtype f32 $DYN --tokens c1.tok --at 500
expect_eq 'dynamic NTK: the reason' \
    "$(grep -c 'dynamic NTK changes every frequency' "$T/.err")" 1
ok 'dynamic NTK: rm the entry' sh -c "kvchunk rm --store '$S' \
    \$(kvchunk key $SH --dtype f32 $DYN --tokens c1.tok)"
ok 'get -f text' kvchunk get --store "$S" $SH --rope none \
    --chunk-context none --tokens c1.tok --at 0 -f text -o nope.txt
expect_eq 'text: one line per head vector' "$(wc -l <nope.txt | tr -d ' ')" \
    "$(( 2 * 2 * 5 * 2 + 2 * 2 * 5 - 1 ))"

# ---- assemble, end to end ----------------------------------------------------
# prompt: sys ## A ## B ## q ; cache A and B at base len(sys), sys at 0;
# assemble sys ## B ## A ## q2 and compare with the toy computed in place.
SYS='You are a careful assistant.'
A='Paris is the capital of France.'
B='The Seine flows through Paris.'
tok sys2.tok "$SYS"
tok a.tok "$A"
tok b.tok "$B"
ls_=$(printf '%s' "$SYS" | wc -c | tr -d ' ')
M="$SH --dtype f32 --model toy"
ok 'toy: sys at 0' kvchunk toy $M --tokens sys2.tok --pos 0 -o sys.npy
ok 'toy: A at its base' kvchunk toy $M --tokens a.tok --pos "$ls_" -o a.npy
ok 'toy: B at its base' kvchunk toy $M --tokens b.tok --pos "$ls_" -o b.npy
ok 'put sys' kvchunk put --store "$S" $M --chunk-context none \
    --tokens sys2.tok --kv sys.npy --base-pos 0
ok 'put A' kvchunk put --store "$S" $M --tokens a.tok --context sys2.tok \
    --kv a.npy --base-pos "$ls_"
ok 'put B' kvchunk put --store "$S" $M --tokens b.tok --context sys2.tok \
    --kv b.npy --base-pos "$ls_"
printf '%s##%s##%s##%s' "$SYS" "$B" "$A" 'Which river?' >p2.txt
golden 'assemble -f text: the plan' kvchunk/assemble-plan.txt \
    kvchunk assemble --store "$S" $M -f text p2.txt
ok 'assemble: the stream' kvchunk assemble --store "$S" $M -o stream.npy \
    --report plan.txt p2.txt
expect_eq 'assemble --report' "$(cat plan.txt)" \
    "$(cat "$GOLD/kvchunk/assemble-plan.txt")"
expect_fail 2 'assemble: -o and --report in one file' kvchunk assemble \
    --store "$S" $M -o same.txt --report ./same.txt p2.txt
expect_eq '  ... naming both, nothing written' \
    "$(grep -c -- "-o and --report both write" "$T/.err")$(ls same.txt 2>/dev/null)" 1
expect_fail 2 'assemble: --report - is refused before any lookup' \
    kvchunk assemble --store "dir:$T/no-such-store" $M --report - p2.txt
golden 'assemble -f text --report: the plan on stdout' \
    kvchunk/assemble-plan.txt \
    kvchunk assemble --store "$S" $M -f text --report plan3.txt p2.txt
expect_eq '  ... and in the report' "$(cat plan3.txt)" \
    "$(cat "$GOLD/kvchunk/assemble-plan.txt")"
# a report that cannot be written fails before anything reaches stdout
if [ -w /dev/full ]; then
    expect_fail 1 'assemble -f text --report /dev/full: exit 1, stdout empty' \
        kvchunk assemble --store "$S" $M -f text --report /dev/full p2.txt
    expect_fail 1 'assemble (npy) --report /dev/full: exit 1, stdout empty' \
        kvchunk assemble --store "$S" $M -f npy --report /dev/full p2.txt
else
    ok 'assemble --report /dev/full # SKIP no /dev/full' true
    ok 'assemble --report /dev/full # SKIP no /dev/full' true
fi
# with an empty question every segment is cached: the assembled KV must
# equal the toy KV of the whole prompt computed in place
printf '%s##%s##%s##' "$SYS" "$B" "$A" >p4.txt
ok 'assemble --kv-only' kvchunk assemble --store "$S" $M --kv-only \
    -o asm.npy p4.txt
printf '%s%s%s' "$SYS" "$B" "$A" >whole.txt
od -An -tu1 -v whole.txt >whole.tok
ok 'toy: the whole prompt in place' kvchunk toy $M --tokens whole.tok \
    --pos 0 -o whole.npy
if [ -x "$KV_BIN/kvattn" ]; then
    ok 'assembled KV == toy KV computed in place' kvattn cmp --quiet \
        --atol 1e-6 --rtol 1e-5 asm.npy whole.npy
    ok 'layer 1 K and layer 0 V slices' sh -c "
        kvchunk slice --layer 1 --part k asm.npy -o ak.npy &&
        kvchunk slice --layer 1 --part k whole.npy -o wk.npy &&
        kvchunk slice --layer 0 --part v --layout bhsd asm.npy -o av.npy &&
        kvchunk slice --layer 0 --part v --layout bhsd whole.npy -o wv.npy &&
        kvattn cmp --quiet --atol 1e-6 --rtol 1e-5 ak.npy wk.npy &&
        cmp -s av.npy wv.npy"
fi
# attention over the assembled KV with the kvmask chunk mask == attention
# over the KV computed from scratch with that mask (and != plain causal)
if [ -x "$KV_BIN/kvattn" ] && [ -x "$KV_BIN/kvmask" ]; then
    T_=$(wc -c <whole.txt | tr -d ' ')
    ok 'segments for kvmask' kvchunk split -f text -o segs4.txt p4.txt
    ok 'kvmask chunk --segments' kvmask chunk --segments segs4.txt -o mask.npy
    ok 'segments as .npy' kvchunk split -f npy -o segs4.npy p4.txt
    ok 'kvmask chunk --segments reads the .npy form' kvmask chunk \
        --segments segs4.npy -o mask-npy.npy
    expect_file_eq 'the same mask from text and .npy segments' mask-npy.npy \
        mask.npy
    ok 'toy Q of layer 0' kvchunk toy $M --heads 4 --q 0 --tokens whole.tok \
        --pos 0 -o q.npy
    ok 'K, V of layer 0 (assembled, from scratch)' sh -c "
        kvchunk slice asm.npy -o ak0.npy &&
        kvchunk slice --part v asm.npy -o av0.npy &&
        kvchunk slice whole.npy -o wk0.npy &&
        kvchunk slice --part v whole.npy -o wv0.npy"
    ok 'attention, assembled' kvattn run --layout thd --q-lens "$T_" \
        -q q.npy -k ak0.npy -v av0.npy --mask mask.npy -o o1.npy
    ok 'attention, from scratch' kvattn run --layout thd --q-lens "$T_" \
        -q q.npy -k wk0.npy -v wv0.npy --mask mask.npy -o o2.npy
    ok 'equal' kvattn cmp --quiet --atol 1e-6 --rtol 1e-5 o1.npy o2.npy
    ok 'and not plain causal attention' sh -c "kvattn run --layout thd \
        --q-lens $T_ -q q.npy -k wk0.npy -v wv0.npy --causal -o o3.npy &&
        ! kvattn cmp --quiet --atol 1e-6 --rtol 1e-5 o1.npy o3.npy"
fi
ok 'assemble -j 1' kvchunk assemble --store "$S" $M -j 1 -o j1.npy p4.txt
ok 'assemble -j 3' kvchunk assemble --store "$S" $M -j 3 -o j3.npy p4.txt
expect_file_eq 'bit-identical for any -j' j1.npy j3.npy
# the same prompt as token ids, split on a separator id
{ cat sys2.tok; echo 35 35; cat b.tok; echo 35 35; cat a.tok; echo 35 35; } \
    >p4.ids
ok 'assemble --ids --sep-ids 35,35' kvchunk assemble --store "$S" $M --ids \
    --sep-ids 35,35 --kv-only -o ids.npy p4.ids
expect_file_eq 'token ids give the same KV as the text' ids.npy asm.npy
# more chunks than one lookup batch: every other one cached
printf 'S' | od -An -tu1 >s.tok
i=1; prompt=S
while [ $i -le 70 ]; do
    prompt="$prompt##chunk number $i"
    if [ $((i % 2)) = 0 ]; then
        tok c$i.tok "chunk number $i"
        kvchunk toy $M --tokens c$i.tok --pos 1 -o c$i.npy &&
            kvchunk put --store "dir:$T/many" $M --tokens c$i.tok --context s.tok \
                --kv c$i.npy --base-pos 1 >/dev/null
    fi
    i=$((i + 1))
done
printf '%s##q' "$prompt" >many.txt
ok 'assemble 70 chunks' kvchunk assemble --store "dir:$T/many" $M -f text \
    -o many.plan many.txt
expect_eq '35 hits, 37 misses (sys, 35 chunks, question)' \
    "$(grep -c ' hit ' many.plan) $(grep -c ' miss ' many.plan)" '35 37'
# a chunk that is not cached is a miss with the position to compute it at
printf '%s##%s##new text##%s' "$SYS" "$A" 'q' >p3.txt
golden 'assemble: misses with base positions' kvchunk/assemble-miss.txt \
    kvchunk assemble --store "$S" $M -f text p3.txt

# ---- ls, stat, pin, evict, rm ---------------------------------------------
ok 'ls' kvchunk ls --store "$S"
expect_eq 'ls: one line per entry' "$(wc -l <"$T/.out" | tr -d ' ')" 7
ok 'stat' kvchunk stat --store "$S"
expect_eq 'stat: named fields' "$(cut -d: -f1 "$T/.out" | tr '\n' ' ')" \
    'entries bytes hits misses evictions collisions_rejected checksum_failures puts '
ka=$(kvchunk key $M --tokens a.tok --context sys2.tok)
ok 'pin A' kvchunk pin --store "$S" "$ka"
expect_fail 1 'pin: no such entry' kvchunk pin --store "$S" \
    00000000000000000000000000000000
ok 'evict to 1 byte' kvchunk evict --store "$S" --max-size 1
expect_out 'only the pinned entry is left' "$ka" \
    sh -c "kvchunk ls --store '$S' | cut -d' ' -f1"
if command -v script >/dev/null 2>&1; then
    script -qec "kvchunk ls --store '$S'" /dev/null >tty.txt 2>&1 </dev/null
    expect_eq 'ls on a terminal: a header, pinned, a UTC date' \
        "$(tr -d '\r' <tty.txt | awk 'NR == 1 { print $1, $6 }
            NR == 2 { print $6, ($7 ~ /^20[0-9][0-9]-[01][0-9]-[0-3][0-9]T.*Z$/) }')" \
        'KEY PINNED
yes 1'
fi
ok 'unpin' kvchunk unpin --store "$S" "$ka"
ok 'rm' kvchunk rm --store "$S" "$ka"
expect_fail 1 'rm again: no such entry' kvchunk rm --store "$S" "$ka"
expect_out 'empty store' 'entries: 0' \
    sh -c "kvchunk stat --store '$S' | head -1"
ok 'fsck of a clean store' kvchunk fsck --store "$S"

# ---- selftest-rope ---------------------------------------------------------
ok 'selftest-rope: Llama 3.1' kvchunk selftest-rope --shape 1,1,128 \
    --rope-theta 500000 --vectors 200 \
    --rope-scaling llama3:factor=8,low=1,high=4,orig=8192
expect_eq 'selftest-rope: ten moves' "$(grep -c '^[0-9]' "$T/.out")" 10
ok 'selftest-rope: gptj, partial, yarn, f16' kvchunk selftest-rope \
    --shape 1,1,64 --rope gptj --rotary-dim 32 --dtype f16 --vectors 200 \
    --rope-scaling yarn:factor=4,orig=4096
expect_fail 1 'selftest-rope: learned positions refused' kvchunk \
    selftest-rope --shape 1,1,64 --rope learned
expect_fail 1 'selftest-rope: dynamic NTK past max_pos refused' kvchunk \
    selftest-rope --shape 1,1,64 --rope-scaling dynamic:factor=2,max_pos=4096

# ---- the default store --------------------------------------------------------
ok 'KVCHUNK_STORE names the default store' env KVCHUNK_STORE="dir:$T/env" \
    kvchunk put --tokens c1.tok --context sys.tok --kv c1kv.npy --base-pos 3
ok 'XDG_CACHE_HOME/kvchunk otherwise' env -u KVCHUNK_STORE \
    XDG_CACHE_HOME="$T/xdg" kvchunk put --tokens c1.tok --context sys.tok \
    --kv c1kv.npy --base-pos 3
ok 'the store is there' test -d "$T/xdg/kvchunk/v1/objects"

# ---- a store that does not exist is an error for every reader ---------------
for cmd in "get $SH --dtype f32 --tokens c1.tok --context sys.tok --at 0" \
    "assemble $SH -f text" "ls" "stat" "fsck" "evict --max-size 1M" \
    "rm 00000000000000000000000000000000" "pin 00000000000000000000000000000000"; do
    set -- $cmd
    expect_fail 1 "$1 of a missing store: an error" kvchunk $cmd --store "dir:$T/typo"
    expect_eq "  ... naming it" "$(grep -c "no store at '$T/typo'" "$T/.err")" 1
    ok "  ... and not creating it" test ! -e "$T/typo"
done </dev/null
# put --max-size smaller than the entry: it is evicted at once and says so
expect_out 'put --max-size 1: evicted, not stored' "$kf evicted" kvchunk put \
    --store "dir:$T/tiny" $SH --dtype f32 --tokens c1.tok --context sys.tok \
    --kv c1kv.npy --base-pos 3 --max-size 1
expect_eq '  ... with the reason' "$(grep -c 'evicted at once' "$T/.err")" 1
ok '  ... and the store is empty' sh -c "test \"\$(kvchunk ls --store 'dir:$T/tiny' | wc -l)\" = 0"
expect_out 'put --max-size large enough: stored' "$kf stored" kvchunk put \
    --store "dir:$T/roomy" $SH --dtype f32 --tokens c1.tok --context sys.tok \
    --kv c1kv.npy --base-pos 3 --max-size 1M

# ---- options of one kind of store only -------------------------------------
expect_fail 2 'put --ttl to a dir: store: refused' kvchunk put \
    --store "dir:$T/ttl" $SH --dtype f32 --tokens c1.tok --context sys.tok \
    --kv c1kv.npy --base-pos 3 --ttl 60
expect_eq '  ... saying where --ttl applies' "$(grep -c 'ttl is for redis' "$T/.err")" 1
ok '  ... before creating the store' test ! -e "$T/ttl"
expect_fail 2 'put --pin to a Redis Cluster: refused before connecting' \
    kvchunk put --store redis-cluster://127.0.0.1:1 $SH --dtype f32 \
    --tokens c1.tok --context sys.tok --kv c1kv.npy --base-pos 3 --pin
for sub in 'ls' 'stat' 'fsck' "get $SH --dtype f32 --tokens c1.tok --at 3" \
    "put $SH --dtype f32 --chunk-context none --tokens c1.tok --kv c1kv.npy --base-pos 0"; do
    expect_fail 2 "${sub%% *} --timeout with a dir: store: refused" \
        kvchunk $sub --store "dir:$T/tmo" --timeout 5
    expect_eq '  ... saying where --timeout applies' \
        "$(grep -c 'timeout is for redis' "$T/.err")" 1
done
ok '  ... and no store was made' test ! -e "$T/tmo"
expect_fail 2 'put --ttl: refused before the KV is read' kvchunk put \
    --store "dir:$T/ttl" $SH --dtype f32 --tokens c1.tok --kv no-such.npy \
    --base-pos 3 --ttl 60

# ---- options that would be ignored -------------------------------------------
# a chunk of --chunk-context none attended to nothing: its --context would be
# left out of the key without a word
for sub in 'key' "get --at 3 --store dir:$T/ctx" \
    "put --kv c1kv.npy --base-pos 3 --store dir:$T/ctx"; do
    expect_fail 2 "${sub%% *} --context with --chunk-context none: refused" \
        kvchunk $sub $SH --dtype f32 --tokens c1.tok \
        --context sys.tok --chunk-context none
    expect_eq '  ... naming both options' \
        "$(grep -c -- '--context: a chunk of --chunk-context none' "$T/.err")" 1
done
expect_fail 2 'toy --heads without --q: refused (the KV has no query heads)' \
    kvchunk toy --shape 2,2,32 --model m --tokens c1.tok --heads 4 -o h.npy
# a prompt's split (4 bytes a token, the segments) and what split and
# assemble keep per segment count against --max-mem, before they are made:
# 300000 segments of one token
awk 'BEGIN { for (i = 0; i < 300000; i++) printf "a##" }' >manyseg.txt
expect_fail 1 'split: 300000 segments over --max-mem 8M' kvchunk split \
    --max-mem 8M -f text -o ms.txt manyseg.txt
expect_eq '  ... with the size needed' \
    "$(grep -c "the prompt's 900000 tokens and up to 300001 segments need" "$T/.err")" 1
expect_fail 1 'assemble: 300000 segments over --max-mem 8M' kvchunk assemble \
    --store "dir:$T/ms" $SH --max-mem 8M -f text -o ms.txt manyseg.txt
expect_eq '  ... refused for its segments, before the KV' \
    "$(grep -c "up to 300001 segments need" "$T/.err")" 1
ok 'split: within a limit that holds them' kvchunk split --max-mem 100M -f text \
    -o ms.txt manyseg.txt
# slice: the slice beside the KV read (16 KiB here) counts against --max-mem
ok 'toy KV for slice' kvchunk toy --shape 2,2,32 --dtype f32 --model m \
    --tokens c1.tok -o sl.npy
expect_fail 1 'slice: the slice beside the KV counts against --max-mem' \
    kvchunk slice sl.npy --max-mem "$(( $(wc -c <sl.npy) ))" -o sl1.npy
expect_eq '  ... saying so' "$(grep -c 'the slice needs [0-9]* bytes beside' "$T/.err")" 1
expect_fail 2 'slice --part x: refused' kvchunk slice --part x sl.npy
expect_eq '  ... naming the value' "$(head -n 1 "$T/.err")" \
    "kvchunk slice: --part: expected k or v, got 'x'"
expect_fail 2 'slice --layout hd: refused' kvchunk slice --layout hd sl.npy
expect_eq '  ... naming the value' "$(head -n 1 "$T/.err")" \
    "kvchunk slice: --layout: expected thd or bhsd, got 'hd'"
expect_fail 2 'assemble --kv-only -f text: refused (the plan has no KV)' \
    kvchunk assemble --store "dir:$T/ctx" $SH --dtype f32 -f text --kv-only \
    p2.txt

# ---- a store URL's password is never printed -----------------------------------
# (port 1 on loopback: nothing listens there, so each fails at once)
while read -r st user url; do
    expect_fail "$st" "no password in the error: $url" env KVCHUNK_STORE="$url" \
        kvchunk ls --timeout 1
    expect_eq "  ... the password is not shown" "$(grep -c 's3cr3t' "$T/.err")" 0
    expect_eq "  ... the URL is, with the user" "$(grep -c 'admin:\*\*\*@' "$T/.err")" "$user"
done <<'EOF'
2 1 redis://admin:s3cr3t@127.0.0.1:1/x
2 1 redis://admin:s3cr3t@127.0.0.1:99999/1
2 1 redis://admin:s3cr3t@/1
2 1 redis+tls://admin:s3cr3t@127.0.0.1:1
2 0 redis-cluster://admin:s3cr3t@127.0.0.1:1,x:y
1 0 redis://admin:s3cr3t@127.0.0.1:1/1
1 0 redis-cluster://admin:s3cr3t@127.0.0.1:1
1 0 redis://:s3cr3t@127.0.0.1:1
EOF
done_testing
