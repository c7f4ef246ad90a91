#!/bin/sh
# kvxattn_bad.sh - bad input: exit 2 (usage) or 1 (data), a message naming
# the values, nothing on stdout, no half-written output file.
. "$KV_TOP/tests/lib.sh"
X="$VEC/xattn"
Q="$X/in_peaky_q.npy"; K="$X/in_peaky_k.npy"; Q256="$X/in_peaky_q_last256.npy"
SQ="$X/small_q_f32.npy"; SK="$X/small_k_f32.npy"

msg_has() {   # title word...: the last stderr contains every word
    _t=$1; shift
    for _w in "$@"; do
        if ! grep -q -- "$_w" "$T/.err"; then
            _report 1 "$_t" "stderr lacks '$_w': $(cat "$T/.err")"; return
        fi
    done
    _report 0 "$_t"
}

expect_fail 2 'no subcommand' kvxattn
expect_fail 2 'unknown subcommand' kvxattn frobnicate
expect_fail 2 'missing -k' kvxattn estimate -q "$Q"
expect_fail 2 'stride not dividing the block' kvxattn estimate -q "$Q" -k "$K" --stride 24
msg_has 'stride message names 24 and 128' 24 128
expect_fail 2 'stride 0' kvxattn estimate -q "$Q" -k "$K" --stride 0
expect_fail 2 'threshold above 1' kvxattn estimate -q "$Q" -k "$K" --threshold 1.5
msg_has 'threshold message says what 0 and 1 mean' 1.5 'forced blocks' 'running sum reaches the row'
expect_fail 2 'threshold below 0' kvxattn estimate -q "$Q" -k "$K" --threshold -0.1
expect_fail 2 'threshold not a number' kvxattn estimate -q "$Q" -k "$K" --threshold high
expect_fail 2 'threshold and thresholds' kvxattn estimate -q "$Q" -k "$K" --threshold 0.5 --thresholds /dev/null
expect_fail 2 '--layer without --thresholds' kvxattn estimate -q "$Q" -k "$K" --layer 3
expect_fail 2 'q offset not a multiple of the block' kvxattn estimate -q "$Q256" -k "$K" --q-offset 700
msg_has 'offset message names 700 and 128' 700 128
expect_fail 2 'q offset with compat' kvxattn estimate -q "$Q256" -k "$K" --q-offset 768 --compat-chunk-size 384
expect_fail 2 'compat chunk not a multiple of the block' kvxattn estimate -q "$Q" -k "$K" --compat-chunk-size 200
# one chunk of 2^40 is 2^37 reshaped key columns at stride 8: too many for
# any input, refused before reading it
expect_fail 2 'compat chunk of more than 2^31 reshaped columns' kvxattn estimate -q "$Q" -k "$K" --compat-chunk-size 1099511627776
msg_has '  ... naming the option and the count' '--compat-chunk-size' '137438953472 reshaped key columns'
expect_fail 2 'bad format' kvxattn estimate -q "$Q" -k "$K" -f jpeg
expect_fail 2 'bad rule' kvxattn estimate -q "$Q" -k "$K" --rule best
expect_fail 2 'bad select mode' kvxattn estimate -q "$Q" -k "$K" --select-mode random
expect_fail 2 'bad layout' kvxattn estimate -q "$Q" -k "$K" --layout hsd
expect_fail 2 'norm 0' kvxattn estimate -q "$Q" -k "$K" --norm 0
# the scores are divided by --norm in f32: a divisor that is no normal f32
# is refused before any work, naming the option
for n in 1e-50 1e-38 1e39; do
    expect_fail 2 "norm $n: not a normal f32" kvxattn estimate -q "$SQ" -k "$SK" --norm $n
    msg_has "norm $n: the message names --norm and the range" '--norm' 'normal f32' "$n"
done
ok 'norm 3e38: the largest f32 range is taken' kvxattn estimate -q "$SQ" -k "$SK" --norm 3e38 -f stats
# a normal --norm so small that these scores overflow: a data error that
# names --norm
expect_fail 1 'norm 1.2e-38: the scores overflow' kvxattn estimate -q "$SQ" -k "$SK" --norm 1.2e-38
msg_has 'norm 1.2e-38: the message names --norm' 'divided by --norm' 'not finite' 'larger --norm'
expect_fail 2 'both inputs on stdin' kvxattn estimate -q - -k -
# --q-offset only places the queries for causality: with --no-causal it
# would change nothing
expect_fail 2 '--q-offset with --no-causal: refused' kvxattn estimate -q "$SQ" -k "$SK" --no-causal --q-offset 0
msg_has '  ... naming both' '--q-offset' '--no-causal'
expect_fail 2 'recall --q-offset with --no-causal: refused' kvxattn recall -q "$SQ" -k "$SK" --mask "$SQ" --no-causal --q-offset 0
msg_has '  ... naming both' '--q-offset' '--no-causal'
# two outputs in one file: a usage error, nothing written
mkdir -p "$T/od"
expect_fail 2 '--sums and -o: the same file' kvxattn estimate -q "$SQ" -k "$SK" --sums "$T/od/x.npy" -o "$T/od/../od/x.npy"
msg_has '  ... naming both options' '--sums and -o both write'
if [ -e "$T/od/x.npy" ]; then _report 1 '  ... nothing written'; else _report 0 '  ... nothing written'; fi
printf 'old' >"$T/od/y.npy"
ln -s y.npy "$T/od/link.npy"
expect_fail 2 '--sums and -o: a link to the same file' kvxattn estimate -q "$SQ" -k "$SK" --sums "$T/od/y.npy" -o "$T/od/link.npy"
expect_eq '  ... the file untouched' "$(cat "$T/od/y.npy")" old
expect_fail 2 '--sums - and the mask on stdout' kvxattn estimate -q "$SQ" -k "$SK" --sums -
msg_has '  ... both standard output' 'both write standard output'
expect_fail 2 'recall: --per-block and -o: the same file' kvxattn recall -q "$SQ" -k "$SK" --mask "$SQ" --per-block "$T/od/y.npy" -o "$T/od/link.npy"
msg_has '  ... naming both options' '--per-block and -o both write'
ok '--sums and -o: /dev/null may take both' kvxattn estimate -q "$SQ" -k "$SK" --sums /dev/null -o /dev/null

expect_fail 1 'missing file' kvxattn estimate -q "$T/nope.npy" -k "$K"
msg_has 'names the file' nope.npy
expect_fail 1 'head counts that do not divide' kvxattn estimate -q "$X/small_q_3h.npy" -k "$SK"
msg_has 'head message names 3 and 2' 3 2
expect_fail 1 'mismatched head dim' kvxattn estimate -q "$SQ" -k "$X/small_k_d8.npy"
msg_has 'head dim message names 16 and 8' 16 8
expect_fail 1 'Lq > Lk causal without offset' kvxattn estimate -q "$Q" -k "$Q256"
msg_has 'names 1024 and 256 and the option to give' 1024 256 --q-offset
ok 'Lq > Lk causal with an explicit offset' kvxattn estimate -q "$Q" -k "$Q256" --q-offset 0 -f text
expect_fail 1 'default offset not block aligned' kvxattn estimate -q "$Q256" -k "$K" --block-size 512
msg_has 'names the default --q-offset 1024 - 256 = 768 and the block' --q-offset 1024 256 768 512
expect_fail 1 'bhsd input with 3 dims (thd file)' kvxattn estimate -q "$X/small_q_thd.npy" -k "$X/small_k_thd.npy"
expect_fail 1 'thd input with 4 dims' kvxattn estimate -q "$SQ" -k "$SK" --layout thd
# a NaN (and an infinity) in the last element of Q: refused, named by index
cp "$SQ" "$T/qnan.npy"; chmod u+w "$T/qnan.npy"
_sz=$(wc -c <"$T/qnan.npy")
printf '\000\000\300\177' | dd of="$T/qnan.npy" bs=1 seek=$((_sz - 4)) conv=notrunc 2>/dev/null
expect_fail 1 'a NaN in Q' kvxattn estimate -q "$T/qnan.npy" -k "$SK"
msg_has 'names the element and nan' "(0, 1, 299, 15)" nan
expect_fail 1 'a NaN in Q (recall)' kvxattn recall -q "$T/qnan.npy" -k "$SK" --mask "$T/none.npy"
msg_has 'recall names the element' "(0, 1, 299, 15)"
printf '\000\000\200\377' | dd of="$T/qnan.npy" bs=1 seek=$((_sz - 4)) conv=notrunc 2>/dev/null
expect_fail 1 'an infinity in Q' kvxattn estimate -q "$T/qnan.npy" -k "$SK"
msg_has 'names inf' inf
# finite inputs whose scores overflow f32: 1e20 everywhere makes every dot
# product +inf; K alternating +-1e20 makes inf - inf = nan.  Refused on
# every path (sgemm, the bf16 tiles, the scalar reference), nothing written
fill() {   # out header-file count word...: its 128-byte header, the words repeated
    _fo=$1; _fh=$2; _fc=$3; shift 3
    head -c 128 "$_fh" >"$_fo.h"
    : >"$_fo.b"
    _fk=0
    while [ $_fk -lt "$_fc" ]; do printf "$*" >>"$_fo.b"; _fk=$((_fk + 1)); done
    cat "$_fo.h" "$_fo.b" >"$_fo"; rm -f "$_fo.h" "$_fo.b"
}
fill "$T/big.npy" "$SQ" 4800 '\354\170\255\140\354\170\255\140'
fill "$T/alt.npy" "$SQ" 4800 '\354\170\255\140\354\170\255\340'
fill "$T/bigb.npy" "$X/small_q_bf16.npy" 4800 '\255\140\255\140'
ok 'a mask of that shape' kvxattn estimate -q "$SQ" -k "$SK" -o "$T/okmask.npy"
for isa in native generic; do
    case $isa in generic) E="env KVTOOLS_ISA=generic" ;; *) E= ;; esac
    expect_fail 1 "scores overflow to inf ($isa)" $E kvxattn estimate -q "$T/big.npy" -k "$T/big.npy" -o "$T/ov.npy"
    msg_has "inf scores: the message says so ($isa)" 'not finite' 'too large'
    expect_fail 1 "inf - inf scores ($isa)" $E kvxattn estimate -q "$T/big.npy" -k "$T/alt.npy" -o "$T/ov.npy"
    msg_has "nan scores: the message ($isa)" 'not finite'
    expect_fail 1 "bf16 inputs, inf scores ($isa)" $E kvxattn estimate -q "$T/bigb.npy" -k "$T/bigb.npy" -o "$T/ov.npy"
    msg_has "bf16: the message ($isa)" 'not finite'
    expect_fail 1 "recall: inf scores ($isa)" $E kvxattn recall -q "$T/big.npy" -k "$T/big.npy" --mask "$T/okmask.npy" -o "$T/ov.npy"
    msg_has "recall: the message ($isa)" 'not finite'
done
absent_ov() { if [ -e "$T/ov.npy" ]; then _report 1 "$1" "written"; else _report 0 "$1"; fi; }
absent_ov 'overflow: no output written'
expect_fail 2 'recall --scale below the smallest f32' kvxattn recall -q "$SQ" -k "$SK" --mask "$T/okmask.npy" --scale 1e-50
expect_fail 2 'recall --scale above the largest f32' kvxattn recall -q "$SQ" -k "$SK" --mask "$T/okmask.npy" --scale 1e39
expect_fail 1 'recall --scale 3e38: the scores overflow' kvxattn recall -q "$SQ" -k "$SK" --mask "$T/okmask.npy" --scale 3e38
msg_has 'recall --scale 3e38: the message names --scale' 'times --scale' 'not finite' 'smaller --scale'
# bf16 Q and K are read as they are (mapped, not widened): the same check
# on the bf16 bits, the first bad one named
cp "$X/small_q_bf16.npy" "$T/qb.npy"; chmod u+w "$T/qb.npy"
_szb=$(wc -c <"$T/qb.npy")
printf '\300\177' | dd of="$T/qb.npy" bs=1 seek=$((_szb - 2)) conv=notrunc 2>/dev/null
expect_fail 1 'a NaN in bf16 Q' kvxattn estimate -q "$T/qb.npy" -k "$X/small_k_bf16.npy"
msg_has 'bf16: names the element and nan' "(0, 1, 299, 15)" nan
printf '\200\377' | dd of="$T/qb.npy" bs=1 seek=$((_szb - 2)) conv=notrunc 2>/dev/null
printf '\200\177' | dd of="$T/qb.npy" bs=1 seek=$((_szb - 4)) conv=notrunc 2>/dev/null
expect_fail 1 'infinities in bf16 Q' kvxattn estimate -q "$T/qb.npy" -k "$X/small_k_bf16.npy"
msg_has 'bf16: names the first, inf' "(0, 1, 299, 14)" inf
# bf16 K: a NaN in keys no query sees (--q-offset 0, Lk > Lq) and an
# infinity in the first key are refused and named the same way, whether
# the bf16 tiles meet them (native) or the check before the f32 path does
python3 -c '
import struct, sys
def npy(path, l, bad):
    h = "{\x27descr\x27: \x27<V2\x27, \x27fortran_order\x27: False, \x27shape\x27: (1, 2, %d, 16), }" % l
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    v = [0x3f80 + (i % 7) for i in range(2 * l * 16)]
    for at, x in bad:
        v[at] = x
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        f.write(struct.pack("<%dH" % len(v), *v))
t = sys.argv[1]
npy(t + "/kq.npy", 64, [])
npy(t + "/kc.npy", 200, [])
npy(t + "/kn.npy", 200, [(2 * 200 * 16 - 1, 0x7fc0)])
npy(t + "/ki.npy", 200, [(0, 0xff80), (2 * 200 * 16 - 1, 0x7fc0)])
' "$T"
for isa in generic native; do
    expect_fail 1 "a NaN in bf16 K no query sees ($isa)" env KVTOOLS_ISA=$isa kvxattn estimate -q "$T/kq.npy" -k "$T/kn.npy" --q-offset 0 -o "$T/ov.npy"
    msg_has "bf16 K: names it ($isa)" "K '" "(0, 1, 199, 15)" nan
    expect_fail 1 "bf16 K: an infinity first ($isa)" env KVTOOLS_ISA=$isa kvxattn estimate -q "$T/kq.npy" -k "$T/ki.npy" --q-offset 0 -o "$T/ov.npy"
    msg_has "bf16 K: names the first ($isa)" "(0, 0, 0, 0)" inf
done
absent_ov 'bf16 K refused: no output written'
ok 'bf16 Q and K, --q-offset 0, Lk > Lq: accepted' kvxattn estimate -q "$T/kq.npy" -k "$T/kc.npy" --q-offset 0 -o "$T/kqm.npy"
# the first bad value is named whatever the -j and wherever the scan's
# chunks (65536 values) split the file: Q holds 131072
cp "$Q" "$T/qbig.npy"; chmod u+w "$T/qbig.npy"
poke() {   # element bytes: overwrite one f32 after the 128-byte header
    printf "$2" | dd of="$T/qbig.npy" bs=1 seek=$((128 + 4 * $1)) conv=notrunc 2>/dev/null
}
poke 100000 '\000\000\300\177'; poke 120000 '\000\000\200\177'
for j in 1 2; do
    expect_fail 1 "a NaN in the second chunk, -j $j" kvxattn estimate -q "$T/qbig.npy" -k "$K" -j $j
    msg_has "names the first, -j $j" "(0, 1, 538, 32)" nan
done
poke 70000 '\000\000\200\177'
expect_fail 1 'an earlier infinity' kvxattn estimate -q "$T/qbig.npy" -k "$K" -j 2
msg_has 'names the infinity' "(0, 1, 69, 48)" inf
poke 5 '\000\000\300\377'
expect_fail 1 'a NaN in the first chunk' kvxattn estimate -q "$T/qbig.npy" -k "$K" -j 2
msg_has 'names it' "(0, 0, 0, 5)" nan
# a last chunk that is partial and not a multiple of the scan's vectors:
# [1, 2, 4097, 17] holds 139298 values, the third chunk 8226 of them; bad
# values near its end (in the scalar tail or the last vectors, depending
# on the vector width) and inside it, bf16 and f32, at every vector level
python3 -c '
import struct, sys
def npy(path, descr, fmt, size):
    n = 2 * 4097 * 17
    h = "{\x27descr\x27: \x27%s\x27, \x27fortran_order\x27: False, \x27shape\x27: (1, 2, 4097, 17), }" % descr
    h += " " * (63 - (10 + len(h)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode())
        f.write(struct.pack("<" + fmt, 0x3f80 if size == 2 else 0x3f800000) * n)
t = sys.argv[1]
npy(t + "/odd_b.npy", "<V2", "H", 2)
npy(t + "/odd_f.npy", "<f4", "I", 4)
' "$T"
odd() {   # file element-size element bytes
    printf "$4" | dd of="$1" bs=1 seek=$((128 + $2 * $3)) conv=notrunc 2>/dev/null
}
for isa in generic native; do
    for ty in b f; do
        if [ $ty = b ]; then sz=2; nan='\300\177'; inf='\200\377'; one='\200\077'
        else sz=4; nan='\000\000\300\177'; inf='\000\000\200\177'; one='\000\000\200\077'; fi
        f="$T/odd_$ty.npy"
        odd "$f" $sz 139297 "$nan"
        expect_fail 1 "$ty: a NaN in the last value of a partial chunk ($isa)" env KVTOOLS_ISA=$isa kvxattn estimate -q "$f" -k "$f" -j 2
        msg_has "$ty: names it ($isa)" "(0, 1, 4096, 16)" nan
        odd "$f" $sz 139267 "$inf"
        expect_fail 1 "$ty: an infinity 31 values before the end ($isa)" env KVTOOLS_ISA=$isa kvxattn estimate -q "$f" -k "$f" -j 2
        msg_has "$ty: names the infinity ($isa)" "(0, 1, 4095, 3)" inf
        odd "$f" $sz 131077 "$nan"
        expect_fail 1 "$ty: a NaN early in the partial chunk ($isa)" env KVTOOLS_ISA=$isa kvxattn estimate -q "$f" -k "$f" -j 1
        msg_has "$ty: names the first ($isa)" "(0, 1, 3613, 7)" nan
        for i in 139297 139267 131077; do odd "$f" $sz $i "$one"; done
        ok "$ty: finite again, accepted ($isa)" env KVTOOLS_ISA=$isa kvxattn estimate -q "$f" -k "$f" -j 2 -o "$T/odd_m.npy"
    done
done
expect_fail 1 'integer input' kvxattn estimate -q "$X/c05_mask.npy" -k "$K"
printf '0.9 0.9 0.9\n' > "$T/thr3.txt"
expect_fail 1 'thresholds file of the wrong length' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thr3.txt"
msg_has 'names 3 values and 2 heads' 3 2
printf '0.9 1.2\n' > "$T/thrbad.txt"
expect_fail 1 'threshold in a file outside [0, 1]' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thrbad.txt"
# a thresholds .npy (2 heads, f64) is read whole: good alone, refused with
# a second array or trailing bytes after it
python3 -c '
import struct, sys
h = "{\x27descr\x27: \x27<f8\x27, \x27fortran_order\x27: False, \x27shape\x27: (2,), }"
h += " " * (63 - (10 + len(h)) % 64) + "\n"
a = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<2d", 0.9, 0.9)
t = sys.argv[1]
open(t + "/thr.npy", "wb").write(a)
open(t + "/thr2.npy", "wb").write(a + a)
open(t + "/thrjunk.npy", "wb").write(a + b"junk")
' "$T"
ok 'thresholds as one .npy' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thr.npy" -o "$T/thr-ok.npy"
expect_fail 1 'thresholds .npy: a second array refused' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thr2.npy"
expect_fail 1 'thresholds .npy: trailing bytes refused' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thrjunk.npy"
printf '0.9 0.9\n0.8 0.8\n' > "$T/tab.txt"
expect_fail 1 '--layer beyond the table' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/tab.txt" --layer 2
expect_fail 1 'a table without --layer' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/tab.txt"
printf '0.9 x\n' > "$T/thrx.txt"
expect_fail 1 'thresholds file with a word' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thrx.txt"
expect_fail 1 'compat: more query chunks than key chunks' kvxattn estimate -q "$Q" -k "$Q256" --compat-chunk-size 256

# no output file is left behind on failure
expect_fail 1 'failure with -o' kvxattn estimate -q "$Q" -k "$K" --thresholds "$T/thr3.txt" -o "$T/out.npy" --sums "$T/sums.npy"
expect_eq 'no -o file written' "$(ls "$T" | grep -c 'out.npy\|sums.npy')" 0

# recall
expect_fail 2 'recall without --mask' kvxattn recall -q "$Q" -k "$K"
expect_fail 1 'recall mask of the wrong shape' kvxattn recall -q "$Q" -k "$K" --mask "$X/c14_mask.npy"
msg_has 'names the mask shape' '(1, 2, 2, 8)'
expect_fail 1 'recall mismatched head dim' kvxattn recall -q "$SQ" -k "$X/small_k_d8.npy" --mask "$X/c14_mask.npy"
# a BlockMask of 64 x 128 tiles read with --block-size 64: 16 query blocks
# fit, but its 8 key blocks are not the 16 the queries need
ok 'a BlockMask of 64 x 128 tiles' kvmask causal -n 1024 -f block --block-size 64,128 --heads 2 -o "$T/bm64x128.npy"
expect_fail 1 'recall BlockMask with other key blocks' kvxattn recall -q "$Q" -k "$K" --mask "$T/bm64x128.npy" --block-size 64
msg_has 'names the index shape and the key blocks' '(1, 2, 16, 8)' 16
ok 'a BlockMask of 64 x 64 tiles is read' kvmask causal -n 1024 -f block --block-size 64 -o "$T/bm64.npy"
ok 'recall of it' kvxattn recall -q "$Q" -k "$K" --mask "$T/bm64.npy" --block-size 64
expect_fail 1 'recall over --max-mem' kvxattn recall -q "$Q" -k "$K" --mask "$X/c05_mask.npy" --max-mem 1M
msg_has 'names --max-mem and the bytes' --max-mem 1048576
expect_fail 1 'estimate over --max-mem' kvxattn estimate -q "$Q" -k "$K" --max-mem 1M
msg_has 'names --max-mem' --max-mem
expect_fail 1 'recall of a float mask that is not 0/1 (block sums)' kvxattn recall -q "$Q" -k "$K" --mask "$X/c05_sums.npy"
msg_has 'says a float mask holds 0 and 1' 'only 0 and 1'
ok 'an all-keep f32 block mask from kvmask' kvmask full -n 8 --keep --dtype f32 --heads 2 -o "$T/f1.npy"
ok 'recall of a 0/1 float mask' kvxattn recall -q "$Q" -k "$K" --mask "$T/f1.npy" -o "$T/f1.txt"
expect_eq 'it keeps everything' "$(head -1 "$T/f1.txt")" 'recall_min: 1.000000'
expect_fail 2 'recall bad scale' kvxattn recall -q "$Q" -k "$K" --mask "$X/c05_mask.npy" --scale -1

# binary to a terminal (script(1) gives a pty) is refused, naming what it is
if command -v script >/dev/null 2>&1; then
    for _f in pgm npy; do
        script -qec "kvxattn estimate -q '$Q' -k '$K' -f $_f" /dev/null >"$T/.tty" 2>&1 </dev/null
        expect_eq "tty: -f $_f refused with exit 2" "$?" 2
    done
    script -qec "kvxattn estimate -q '$Q' -k '$K' -f pgm" /dev/null >"$T/.tty" 2>&1 </dev/null
    expect_eq 'tty: the pgm message says PGM' "$(grep -c 'binary PGM picture' "$T/.tty")" 1
    script -qec "kvxattn recall -q '$Q' -k '$K' --mask '$X/c05_mask.npy' -f npy" /dev/null >"$T/.tty" 2>&1 </dev/null
    expect_eq 'tty: recall -f npy refused with exit 2' "$?" 2
    script -qec "kvxattn estimate -q '$Q' -k '$K' -f block" /dev/null >"$T/.tty" 2>&1 </dev/null
    expect_eq 'tty: -f block prints text fields, as kvmask does' "$?:$(grep -c '^full_kv_indices:' "$T/.tty")" 0:1
    script -qec "kvxattn estimate -q '$Q' -k '$K' -f block --force" /dev/null >"$T/.tty" 2>&1 </dev/null
    expect_eq 'tty: -f block --force writes the .npy stream' "$?:$(grep -a -o 'NUMPY' "$T/.tty" | wc -l)" 0:8
fi
expect_fail 2 '--text with -f npy' kvxattn estimate -q "$Q" -k "$K" -f npy --text
# --max-mem counts what the tools hold beside the library's work: the
# -f block tensors (17 bytes per block), recall's spread mask and results
# (64 heads x 256 x 256 blocks here, 5 MiB beside about 19 MiB of work)
ok 'gen: 64 heads, 2048 tokens' kvattn gen --shape 1,64,2048,8 --seed 1 \
    -q "$T/mq.npy" -k "$T/mk.npy" -v /dev/null
ok '  ... its mask' kvxattn estimate -q "$T/mq.npy" -k "$T/mk.npy" --block-size 8 -o "$T/mm.npy"
expect_fail 1 '-f block: its tensors count against --max-mem' kvxattn estimate \
    -q "$T/mq.npy" -k "$T/mk.npy" --block-size 8 -f block -o "$T/mb.npy" --max-mem 30M -j 1
msg_has '  ... with the size needed' 'need 7[0-9]* bytes' 'more than --max-mem 31457280'
ok '  ... and within a limit that holds them, it runs' kvxattn estimate \
    -q "$T/mq.npy" -k "$T/mk.npy" --block-size 8 -f block -o /dev/null --max-mem 200M -j 1
expect_fail 1 'recall: the spread mask and results count against --max-mem' \
    kvxattn recall -q "$T/mq.npy" -k "$T/mk.npy" --mask "$T/mm.npy" --block-size 8 \
    --max-mem 22M -j 1
msg_has '  ... the whole need, against the limit given' 'the work needs 2[0-9]* bytes' \
    'more than --max-mem 23068672'
ok '  ... and within a limit that holds them, it runs' kvxattn recall \
    -q "$T/mq.npy" -k "$T/mk.npy" --mask "$T/mm.npy" --block-size 8 --max-mem 64M -j 1
done_testing
