#!/bin/sh
# kvmask.sh - kvmask's command line: every kind and format, agreement
# between formats, segments files, bad input, limits.
. "$KV_TOP/tests/lib.sh"
G="$VEC/masks/gen"

# ---- basics -----------------------------------------------------------------
ok 'help exits 0' kvmask --help
grep -q 'causal, window, band' "$T/.out"; expect_eq 'help lists the kinds' $? 0
expect_eq 'help: no option runs into its description' \
    "$(awk '/^  -/ && substr($0, 31, 1) != " "' "$T/.out")" ''
ok 'version' kvmask --version
expect_out 'causal 4 as text (0 = attend, 1 = masked)' '# 0 = attend, 1 = masked (Ascend'\''s convention; --keep: 1 = attend)
0 1 1 1
0 0 1 1
0 0 0 1
0 0 0 0' kvmask causal -n 4 -f text
expect_out 'causal --keep' '# 1 = attend, 0 = masked (--keep: FlexAttention'\''s and FlashInfer'\''s convention)
1 0 0
1 1 0
1 1 1' kvmask causal -n 3 --keep -f text
expect_out 'f16 default fill -inf' '# 0 = attend, -inf = masked (Ascend'\''s convention; --keep: 1 = attend)
0 -inf
0 0' kvmask causal -n 2 --dtype f16 -f text
expect_out 'bf16 --fill -10000 is -9984' '# 0 = attend, -9984 = masked (Ascend'\''s convention; --keep: 1 = attend)
0 -9984
0 0' kvmask causal -n 2 --dtype bf16 --fill -10000 -f text
expect_out 'f16 --fill min' '# 0 = attend, -65504 = masked (Ascend'\''s convention; --keep: 1 = attend)
0 -65504
0 0' kvmask causal -n 2 --dtype f16 --fill min -f text
expect_out 'f32 --fill 1' '# 0 = attend, 1 = masked (Ascend'\''s convention; --keep: 1 = attend)
0 1
0 0' kvmask causal -n 2 --dtype f32 --fill 1 -f text
expect_out 'i8 --keep' '# 1 = attend, 0 = masked (--keep: FlexAttention'\''s and FlashInfer'\''s convention)
1 0
1 1' kvmask causal -n 2 --dtype i8 --keep -f text
expect_out 'full' '# 0 = attend, 1 = masked (Ascend'\''s convention; --keep: 1 = attend)
0 0 0
0 0 0' kvmask full -q 2 -k 3 -f text
expect_out 'window -w 2 -n 4 --keep' '# 1 = attend, 0 = masked (--keep: FlexAttention'\''s and FlashInfer'\''s convention)
1 0 0 0
1 1 0 0
0 1 1 0
0 0 1 1' kvmask window -w 2 -n 4 --keep -f text
expect_out 'band --pre 1 --next 1' '# 1 = attend, 0 = masked (--keep: FlexAttention'\''s and FlashInfer'\''s convention)
1 1 0 0
1 1 1 0
0 1 1 1
0 0 1 1' kvmask band --pre 1 --next 1 -n 4 --keep -f text
expect_out 'prefix -p 2' '# 1 = attend, 0 = masked (--keep: FlexAttention'\''s and FlashInfer'\''s convention)
1 1 0 0
1 1 0 0
1 1 1 0
1 1 1 1' kvmask prefix -p 2 -n 4 --keep -f text
expect_out 'batch and heads repeat the matrix (blank line between)' '# 1 = attend, 0 = masked (--keep: FlexAttention'\''s and FlashInfer'\''s convention)
1 0
1 1

1 0
1 1' kvmask causal -n 2 --batch 2 --keep -f text
expect_out 'pgm header' 'P5
3 2
255' sh -c 'kvmask causal -q 2 -k 3 -f pgm | head -3'
kvmask causal -q 2 -k 3 -f pgm -o "$T/p.pgm"
expect_eq 'pgm pixels: white = attend' "$(tail -c 6 "$T/p.pgm" | od -An -tu1 | tr -s ' ')" \
    ' 255 255 0 255 255 255'
kvmask causal -n 3 -f pgm --cell 2 -o "$T/p2.pgm"
expect_eq 'pgm --cell 2 size' "$(wc -c <"$T/p2.pgm")" $((11 + 36))
expect_out 'stats' 'shape: 4 4
kept: 10
total: 16
density: 0.625
first: 0 0 0 0
last: 0 1 2 3' kvmask causal -n 4 -f stats
expect_out 'stats with tiles' 'shape: 5 5
kept: 15
total: 25
density: 0.6
block_size: 2 2
tiles: 3 3
full: 1
partial: 5
empty: 3
sparsity: 0.333333333
first: 0 0 0 0 0
last: 0 1 2 3 4' kvmask causal -n 5 -f stats --block-size 2
expect_out 'stats: empty rows show -1' 'first: -1 -1 0
last: -1 -1 0' sh -c 'kvmask causal -q 3 -k 1 -f stats | tail -2'

# ---- npy shapes ---------------------------------------------------------------
kvmask causal -n 3 --batch 2 --heads 4 -o "$T/bh.npy"
expect_eq 'npy header with batch and heads' "$(head -c 80 "$T/bh.npy" | tail -c +11 | sed 's/ *$//')" \
    "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 4, 3, 3), }"
expect_eq 'npy size' "$(wc -c <"$T/bh.npy")" $((128 + 72))
kvmask causal -n 3 -f block --block-size 2 --heads 5 -o "$T/bm.npy"
expect_eq 'block: leading dims [1, H]' "$(head -c 80 "$T/bm.npy" | tail -c +11 | sed 's/ *$//')" \
    "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 5, 2), }"

# ---- the same mask through every format ------------------------------------------
# kept count from stats = ones in the dense text = set bits of the packed
# bits = elements of the BSR blocks that are set; random geometries.
popcount_text() { grep -v '^#' "$1" | tr -cd '1' | wc -c; }
# the bytes of the "packed:" line of -f bits --text
popcount_bits() { sed -n 's/^packed://p' "$1" | tr ' ' '\n' |
    awk '{ x = $1; while (x > 0) { n += x % 2; x = int(x / 2) } } END { print n + 0 }'; }
awk 'BEGIN { srand(7); for (i = 0; i < 8; i++)
    print int(rand() * 40) + 1, int(rand() * 40) + 1, int(rand() * 9) + 1,
          int(rand() * 5) + 1, int(rand() * 4) + 1 }' >"$T/geo"
while read -r q k w p x; do
    for args in "causal -q $q -k $k" "window -w $w -q $q -k $k" \
                "band --pre $p --next $x -q $q -k $k" "prefix -p $w -q $q -k $k" \
                "causal -q $q -k $k --align top-left" \
                "varlen --q-lens $p,$x,$w --kv-lens $w,$((p + x)),$x" \
                "chunk --sys $p --chunks $x,$w,$p --question $x"; do
        # shellcheck disable=SC2086
        kvmask $args --keep -f text -o "$T/t.txt"
        kvmask $args -f stats -o "$T/s.txt"
        kept=$(sed -n 's/^kept: //p' "$T/s.txt")
        expect_eq "text = stats: $args" "$(popcount_text "$T/t.txt")" "$kept"
        kvmask $args -f bits --text -o "$T/b.txt"
        expect_eq "bits = stats: $args" "$(popcount_bits "$T/b.txt")" "$kept"
        kvmask $args -f bsr --block-size 3,1 --text -o "$T/r.txt"
        expect_eq "bsr = stats: $args" "$(sed -n 's/^packed_mask:/packed:/p' "$T/r.txt" >"$T/r2.txt"; popcount_bits "$T/r2.txt")" "$kept"
        kvmask $args -f block --block-size 4,3 --text -o "$T/k.txt"
        kvmask $args -f stats --block-size 4,3 -o "$T/s2.txt"
        expect_eq "block = stats tiles: $args" \
            "$(awk '/^kv_num_blocks:/ { getline; for (i = 1; i <= NF; i++) p += $i }
                    /^full_kv_num_blocks:/ { getline; for (i = 1; i <= NF; i++) f += $i }
                    END { print p, f }' "$T/k.txt")" \
            "$(awk '/^partial:/ { p = $2 } /^full:/ { f = $2 } END { print p, f }' "$T/s2.txt")"
    done
done <"$T/geo"

# ---- the same bytes for any -j (a writer thread or none) -------------------------------
for args in "causal -n 3000 --dtype f16" "window -w 50 -n 20000 -f block --block-size 64" \
            "band --pre 9 --next 3 -n 6000 -f bsr --block-size 60" "causal -n 9000 -f bits"; do
    # shellcheck disable=SC2086
    kvmask $args -j 1 -o "$T/j1.npy"
    kvmask $args -j 2 -o "$T/j2.npy"
    expect_file_eq "-j 1 = -j 2: $args" "$T/j1.npy" "$T/j2.npy"
done

# ---- segments files (what kvchunk split writes) --------------------------------------
cat >"$T/seg.txt" <<'EOF'
# kind offset length key
sys 0 3 4e1195df
chunk 3 2 0011aabb
chunk 5 3 ccdd0011
question 8 2
EOF
same_file() { kvmask "$@" -o "$T/o.npy" && cmp -s "$T/o.npy" "$G/chunk_s3_c2-3_q2.npy"; }
ok 'chunk --segments text = --sys/--chunks/--question' same_file chunk --segments "$T/seg.txt" --keep
ok 'chunk --segments int .npy [n,3]' same_file chunk --segments "$G/segments_s3_c2-3_q2.npy" --keep
ok 'chunk --segments from stdin' sh -c "kvmask chunk --segments - --keep <'$T/seg.txt' >'$T/o2.npy' && cmp -s '$T/o2.npy' '$G/chunk_s3_c2-3_q2.npy'"
printf 'sys 0 3\nchunk 4 2\n' >"$T/gap.txt"
expect_fail 1 'segments with a gap' kvmask chunk --segments "$T/gap.txt"
grep -q 'offset 4' "$T/.err"; expect_eq 'gap message names the offset' $? 0
printf 'sys 0 3\nfoo 3 2\n' >"$T/kind.txt"
expect_fail 1 'segments with an unknown kind' kvmask chunk --segments "$T/kind.txt"
printf 'sys 0 3x\nquestion 3 1\n' >"$T/junk.txt"
expect_fail 1 'segments: a length with trailing junk' kvmask chunk --segments "$T/junk.txt"
grep -q "length '3x' is not an integer" "$T/.err"; expect_eq '... named' $? 0
printf 'sys 0 3\nchunk 3 2.5\nquestion 5 1\n' >"$T/frac.txt"
expect_fail 1 'segments: a fractional length' kvmask chunk --segments "$T/frac.txt"
printf 'sys 0 99999999999999999999\n' >"$T/huge.txt"
expect_fail 1 'segments: a length past 64 bits' kvmask chunk --segments "$T/huge.txt"
grep -q "length '99999999999999999999' is not an integer" "$T/.err"; expect_eq '... named as written' $? 0
printf 'sys 0 3 %s\nquestion 3 1\n' 0123456789abcdef0123456789abcdef >"$T/key.txt"
ok 'segments: a key after the length' kvmask chunk --segments "$T/key.txt"
printf 'chunk 0 3\nsys 3 2\n' >"$T/order.txt"
expect_fail 1 'segments: sys after a chunk' kvmask chunk --segments "$T/order.txt"
expect_fail 1 'segments: missing file' kvmask chunk --segments "$T/nope.txt"
: >"$T/empty.txt"
expect_fail 1 'segments: empty file' kvmask chunk --segments "$T/empty.txt"
kvmask causal -n 2 -o "$T/bool.npy"
expect_fail 1 'segments: wrong npy' kvmask chunk --segments "$T/bool.npy"
# the stream kvchunk split writes: segments, then (with --shape) their
# keys, and nothing else
if [ -x "$KV_BIN/kvchunk" ]; then
    printf 'You are helpful.##Doc one text.##Doc two.##What?' >"$T/pr.txt"
    kvchunk split -f npy -o "$T/sp0.npy" "$T/pr.txt"
    kvchunk split --shape 2,2,8 -f npy -o "$T/sp.npy" "$T/pr.txt"
    kvmask chunk --segments "$T/sp0.npy" -o "$T/sp0m.npy"
    ok 'segments: the split stream with its keys' kvmask chunk --segments "$T/sp.npy" -o "$T/spm.npy"
    expect_file_eq 'segments: the keys change nothing' "$T/spm.npy" "$T/sp0m.npy"
    cat "$T/sp0.npy" "$T/sp0.npy" >"$T/sp00.npy"
    expect_fail 1 'segments: a second segments array instead of keys' kvmask chunk --segments "$T/sp00.npy"
    cat "$T/sp.npy" "$T/sp0.npy" >"$T/sp3.npy"
    expect_fail 1 'segments: a third array' kvmask chunk --segments "$T/sp3.npy"
    cp "$T/sp0.npy" "$T/spg.npy"; printf 'junk' >>"$T/spg.npy"
    expect_fail 1 'segments: trailing bytes' kvmask chunk --segments "$T/spg.npy"
fi

# ---- bad input: exit 2, empty stdout, a message naming the option -------------------
usage() {   # title pattern args...
    _t=$1; _p=$2; shift 2
    expect_fail 2 "$_t" kvmask "$@"
    if grep -q -e "$_p" "$T/.err"; then _report 0 "$_t: names $_p"
    else _report 1 "$_t: names $_p" "$(cat "$T/.err")"; fi
}
usage 'no kind' 'KIND'
usage 'unknown kind' 'KIND' triangle -n 3
usage '-n 0' '-n' causal -n 0
usage '-n abc' '-n' causal -n abc
usage '-n too large' '-n' causal -n 99999999999999999999
usage 'no size' '-n' causal
usage '-n and -q' '-n' causal -n 3 -q 2 -k 3
usage '-q without -k' '-q' causal -q 3
usage '--q-lens 1,2 --kv-lens 1' '--kv-lens' varlen --q-lens 1,2 --kv-lens 1
usage 'no queries at all' '--q-lens' varlen --q-lens 0,0
usage 'no keys at all' '--kv-lens' varlen --q-lens 1,2 --kv-lens 0,0
usage '--q-lens -1' '--q-lens' varlen --q-lens 2,-1
usage '--q-lens missing' '--q-lens' varlen
usage '-w -3' '-w' window -n 4 -w -3
usage '-w 0' '-w' window -n 4 -w 0
usage 'window without -w' '-w' window -n 4
usage 'band without --next' '--next' band -n 4 --pre 1
usage '--pre -1' '--pre' band -n 4 --pre -1 --next 0
usage 'prefix without -p' '-p' prefix -n 4
usage '-w on causal' '-w' causal -n 4 -w 2
usage '--block-size 0' '--block-size' causal -n 8 -f block --block-size 0
usage '--block-size 1,2,3' '--block-size' causal -n 8 -f block --block-size 1,2,3
usage '--block-size with npy' '--block-size' causal -n 8 --block-size 2
usage 'bsr N % C' '--block-size' causal -n 10 -f bsr --block-size 4,3
usage 'tiles beyond int32' '--block-size' causal -n 1099511627776 -f block --block-size 1
usage 'dense size overflows' 'overflows' causal -n 1099511627776 --batch 1099511627776 --heads 16
usage 'BlockMask size overflows' '--batch' causal -n 4 -f block --batch 1099511627776 --heads 1099511627776
usage '--dtype i64' '--dtype' causal -n 3 --dtype i64
usage '--dtype nonsense' '--dtype' causal -n 3 --dtype f12
usage '--fill on bool' '--fill' causal -n 3 --fill -inf
usage '--fill abc' '--fill' causal -n 3 --dtype f16 --fill abc
usage '--fill with --keep' '--fill' causal -n 3 --dtype f16 --keep --fill 1
usage '-f xyz' '-f' causal -n 3 -f xyz
usage '--layout nz with text' '--layout' causal -n 3 -f text --layout nz
usage '--layout xx' '--layout' causal -n 3 --layout xx
usage '--align sideways' '--align' causal -n 3 --align sideways
usage '--batch 0' '--batch' causal -n 3 --batch 0
usage '--heads with bits' '--heads' causal -n 3 -f bits --heads 2
usage '--text with npy' '--text' causal -n 3 -f npy --text
usage 'chunk prompt of empty segments' 'empty' chunk --sys 0 --chunks 0,0 --question 0
ok 'an empty chunk on the command line' kvmask chunk --sys 2 --chunks 2,0,1 --question 1 -f npy -o "$T/c0.npy"
ok 'the same without it' kvmask chunk --sys 2 --chunks 2,1 --question 1 -f npy -o "$T/c1.npy"
expect_file_eq 'an empty chunk is skipped, as in a segments file' "$T/c0.npy" "$T/c1.npy"
expect_out 'mtp-cp stats: the shape of the npy batch [2, 4, 5]' 'shape: 2 4 5' \
    sh -c 'kvmask ascend --preset mtp-cp --history 5,3 --q-lens 4,2 --cp-size 2 --cp-rank 0 -f stats | head -1'
usage '--dtype with block' '--dtype' causal -n 4 -f block --dtype f16
usage '--fill with stats' '--dtype' causal -n 4 -f stats --dtype f16 --fill min
usage '--dtype with bsr' '--dtype' causal -n 4 -f bsr --block-size 2 --dtype u8
usage '--cache-dtype with bits' '--cache-dtype' ascend --preset attn -n 4 --cache-dtype bf16 -f bits
ok '--keep with bits is harmless' kvmask causal -n 4 -f bits --keep -o "$T/kb.npy"
ok 'bits without --keep' kvmask causal -n 4 -f bits -o "$T/b.npy"
expect_file_eq '--keep does not change the packed attend mask' "$T/kb.npy" "$T/b.npy"
usage '--cell 0' '--cell' causal -n 3 -f pgm --cell 0
usage '--preset missing' '--preset' ascend -n 3
usage '--preset nope' '--preset' ascend --preset nope
grep -q 'mtp-cp' "$T/.err"; expect_eq 'the preset list names mtp-cp' $? 0
ok 'help' kvmask --help
grep -q 'swa|mtp-cp' "$T/.out"; expect_eq 'help lists mtp-cp among the presets' $? 0
usage 'attn without -n' '-n' ascend --preset attn
usage 'splitfuse -n 4096' '-n' ascend --preset splitfuse -n 4096
usage 'mla -n 513' '-n' ascend --preset mla -n 513
usage 'swa without -w' '-w' ascend --preset swa
usage '-inf to int8' 'cache-dtype' ascend --preset attn -n 4 --dtype i8 --cache-dtype f16
usage 'per-row splitfuse in f32' '--dtype' ascend --preset splitfuse --seq-lens 5,3 --dtype f32
usage '--q-lens above --seq-lens' '--q-lens' ascend --preset splitfuse --seq-lens 5,3 --q-lens 6,1
usage '--q-lens count' '--q-lens' ascend --preset splitfuse --seq-lens 5,3 --q-lens 2
usage '--positions out of range' '--positions' ascend --preset splitfuse --seq-lens 5,3 --positions 1,5
usage '--keep on ascend' '--keep' ascend --preset attn -n 4 --keep
usage 'mtp-cp without --cp-rank' 'cp-rank' ascend --preset mtp-cp --history 5 --q-lens 4 --cp-size 2
usage 'mtp-cp rank >= size' '--cp-rank' ascend --preset mtp-cp --history 5 --q-lens 4 --cp-size 2 --cp-rank 2
usage 'mtp-cp counts differ' '--q-lens' ascend --preset mtp-cp --history 5,3 --q-lens 4 --cp-size 2 --cp-rank 0
usage 'mtp-cp with -n' '-n' ascend --preset mtp-cp -n 4 --history 5 --q-lens 4 --cp-size 2 --cp-rank 0
usage 'mtp-cp as block' '-f' ascend --preset mtp-cp --history 5 --q-lens 4 --cp-size 2 --cp-rank 0 -f block
usage '--history on attn' '--history' ascend --preset attn -n 4 --history 3
usage '--interleave 0' '--interleave' ascend --preset mtp-cp --history 5 --q-lens 4 --cp-size 2 --cp-rank 0 --interleave 0
usage '--bitorder sideways' '--bitorder' causal -n 4 -f bits --bitorder sideways
usage '--bitorder with npy' '--bitorder' causal -n 4 --bitorder big
usage '--sys with --segments' '--segments' chunk --segments x --sys 2
usage 'chunk without segments' 'segments' chunk
usage 'empty prompt' 'empty' chunk --sys 0 --question 0
usage '--max-mem bad' '--max-mem' causal -n 3 --max-mem lots
expect_eq '--max-mem named once' "$(grep -o -- '--max-mem' "$T/.err" | wc -l)" 1
usage '-j -1' '-j' causal -n 3 -j -1

# ---- limits -----------------------------------------------------------------------
expect_fail 1 'dense output over --max-mem' kvmask causal -n 100000 --max-mem 1M -f npy
grep -q 'compact format' "$T/.err"; expect_eq 'the message suggests a compact format' $? 0
grep -q '9.3 GiB' "$T/.err"; expect_eq 'the message names the size' $? 0
ok 'the same mask as block fits' kvmask causal -n 100000 --max-mem 1M -f block -o "$T/fits.npy"
# stats prints two numbers per row: 2^40 rows are refused at once, by size
expect_fail 1 'stats of 2^40 rows: refused' timeout 60 kvmask causal -n 1099511627776 -f stats
grep -q 'stats output needs up to 28.0 TiB' "$T/.err"; expect_eq 'stats over --max-mem: the message names the size' $? 0
expect_fail 1 'stats with tiles of 2^37 rows: refused' timeout 60 kvmask causal -n 137438953472 -f stats --block-size 128
expect_fail 1 'stats over a small --max-mem' kvmask causal -n 100000 -f stats --max-mem 1M
ok 'stats within --max-mem' kvmask causal -n 100000 -f stats --max-mem 2M -o "$T/st.txt"
expect_eq 'stats within --max-mem: the last row' "$(sed -n 's/^last: .* //p' "$T/st.txt")" 99999
# the per-row arrays kvmask builds before the mask (and the mask keeps a
# copy of) count against --max-mem, before they are made
expect_fail 1 'mtp-cp: the key ranges of 2e7 rows over --max-mem' kvmask ascend \
    --preset mtp-cp --history 0 --q-lens 20000000 --cp-size 1 --cp-rank 0 \
    -f stats --max-mem 10M
grep -q 'key ranges of the mtp-cp rows need 610.4 MiB' "$T/.err"
expect_eq '  ... named, with the size' $? 0
expect_fail 1 'splitfuse: the positions of 2e7 rows over --max-mem' kvmask ascend \
    --preset splitfuse --seq-lens 20000000 --q-lens 20000000 -f stats --max-mem 10M
grep -q 'positions of the splitfuse rows need 305.2 MiB' "$T/.err"
expect_eq '  ... named, with the size' $? 0
awk 'BEGIN { for (i = 0; i < 100000; i++) print "chunk", i, 1 }' >"$T/many.seg"
expect_fail 1 'chunk: 1e5 segments over --max-mem 1M' kvmask chunk \
    --segments "$T/many.seg" -f block --max-mem 1M -o "$T/many.npy"
grep -q 'the segments read so far need' "$T/.err"
expect_eq '  ... named' $? 0
ok '  ... and within a limit that holds them' kvmask chunk \
    --segments "$T/many.seg" -f block --max-mem 8M -o "$T/many.npy"
if mknod "$T/null" c 1 3 2>/dev/null; then
    ok '-o to a character device writes into it' kvmask causal -n 64 -o "$T/null"
    expect_eq '-o left the device a device' "$([ -c "$T/null" ] && echo yes)" yes
fi
expect_fail 2 '-o: no file left behind on error' kvmask causal -n 0 -o "$T/never.npy"
expect_eq '-o: file absent' "$(ls "$T" | grep -c never)" 0
kvmask causal -n 131072 -f block --block-size 128 -o "$T/big.npy"
expect_eq 'block n=131072: 4 counts + 4 index matrices' "$(wc -c <"$T/big.npy")" \
    $(( 4 * (128 + 1024 * 4) + 4 * (128 + 1024 * 1024 * 4) ))
expect_out 'causal -n 1048576 -f block (1 GiB of indices) streams in 64M' 1073873920 \
    sh -c 'kvmask causal -n 1048576 -f block --block-size 128 --max-mem 64M | wc -c'

# on a terminal (script(1) gives the program a pty): binary refused with a
# message that names what it is, compact formats as text fields
on_tty() {   # title expected-status pattern command
    _t=$1; _want=$2; _p=$3; shift 3
    script -qec "$*" /dev/null >"$T/.tty" 2>&1 </dev/null; _st=$?
    if [ "$_st" != "$_want" ]; then
        _report 1 "$_t" "exit $_st, expected $_want: $(head -c 300 "$T/.tty")"
    elif ! grep -q -e "$_p" "$T/.tty"; then
        _report 1 "$_t" "no '$_p' in: $(head -c 300 "$T/.tty")"
    else
        _report 0 "$_t"
    fi
}
if command -v script >/dev/null 2>&1; then
    on_tty 'tty: pgm refused as a picture' 2 'binary PGM picture' kvmask causal -n 3 -f pgm
    on_tty 'tty: npy refused' 2 'binary .npy' kvmask causal -n 3 -f npy
    on_tty 'tty: default is text' 0 '^0 1 1' kvmask causal -n 3
    on_tty 'tty: block as text fields' 0 '^full_kv_num_blocks:' kvmask causal -n 4 -f block --block-size 2
    on_tty 'tty: pgm with --force' 0 '^P5' kvmask causal -n 3 -f pgm --force
    on_tty 'tty: -o - is the terminal too: text by default' 0 '^0 1 1' kvmask causal -n 3 -o -
    on_tty 'tty: -o - -f npy refused' 2 'binary .npy' kvmask causal -n 3 -f npy -o -
fi

done_testing
