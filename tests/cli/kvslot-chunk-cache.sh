#!/bin/sh
# kvslot-chunk-cache.sh - kvslot plan --chunk-cache, seed 001's flow: the
# step of two identical prompts checked value by value (written by hand
# below), then proved end to end: the plan's chunk passes and copies are
# executed with kvchunk toy/put/assemble at the plan's positions, and the
# question's attention over the result equals attention over the prompt's KV
# computed in place, within kvattn's documented bound.  Bad input last.
. "$KV_TOP/tests/lib.sh"
cd "$T" || exit 1

tok() { printf '%s' "$2" | od -An -tu1 -v >"$1"; }
M='--shape 2,2,16 --dtype f32'
S="--store dir:$T/st"
printf 'You are terse.##Rome is in Italy.##Paris is in France.##Where?' >p.txt
ok 'split with keys' kvchunk split -f text $M -o segs1.txt p.txt
cat segs1.txt segs1.txt >segs.txt          # the same prompt twice
ok 'plan --chunk-cache' kvslot plan --chunk-cache --segments segs.txt \
    --max-tokens 32 -B 4 --max-model-len 64 --output-lens 1 \
    --chunk-pool-blocks 16 -f text -o plan.txt
field() { sed -n "/^step: $1\$/,/^step: /s/^$2: *//p" plan.txt | head -n 1; }

# Step 1 by hand.  Segments: sys 0..13 (14 tokens), Rome 14..30 (17),
# Paris 31..49 (19), question 50..55 (6).  Prompt 0 misses all three and
# computes them in chunk passes: sys at 0, the chunks at the virtual start
# 14 (after the sys prompt they attend to).  Prompt 1, admitted next in the
# same step, finds all three kept and computes only its question.
expect_eq 'lookups: three segments of each prompt' "$(field 1 chunk_req)" '0 0 0 1 1 1'
expect_eq 'prompt 0 misses, the identical prompt 1 hits' "$(field 1 chunk_hit)" '0 0 0 1 1 1'
expect_eq 'chunk passes for prompt 0 only' "$(field 1 pass_req)" '0 0 0'
expect_eq 'virtual starts: sys 0, chunks 14' "$(field 1 chunk_base_pos)" '0 14 14 0 14 14'
expect_eq 'real positions' "$(field 1 chunk_pos)" '0 14 31 0 14 31'
expect_eq 'passes: query_start_loc' "$(field 1 pass_query_start_loc)" '0 14 31 50'
expect_eq 'the chunks attend to the 14 sys tokens' "$(field 1 pass_context_lens)" '0 14 14'
# chunk pool, blocks of 4 from block 0: sys in blocks 0-3 (slots 0..13),
# Rome in 4-8 (slots 16..32), Paris in 9-13 (slots 36..54)
expect_eq 'pass slots: Rome after sys' \
    "$(field 1 pass_slot_mapping | cut -d' ' -f14-16)" '13 16 17'
expect_eq 'pass slots: the last of Paris' \
    "$(field 1 pass_slot_mapping | awk '{ print $NF }')" 54
# main pool from block 1: prompt 0 in blocks 1-14 (slot = 4 + position),
# prompt 1 in blocks 15-28 (slot = 60 + position); one run per chunk
expect_eq 'copies: from the chunk pool' "$(field 1 copy_src)" '0 16 36 0 16 36'
expect_eq 'copies: to the main pool' "$(field 1 copy_dst)" '4 18 35 60 74 91'
expect_eq 'copies: lengths' "$(field 1 copy_len)" '14 17 19 14 17 19'
expect_eq 'copies: K rotated by real - virtual' "$(field 1 copy_delta)" '0 0 17 0 0 17'
expect_eq 'the question starts after 50 computed tokens' \
    "$(field 1 num_computed_tokens)" '50 50'
expect_eq 'question positions' "$(field 1 positions)" '50 51 52 53 54 55 50 51 52 53 54 55'
expect_eq 'question slots' "$(field 1 slot_mapping)" '54 55 56 57 58 59 110 111 112 113 114 115'
expect_eq 'seq_lens' "$(field 1 seq_lens)" '56 56'
expect_eq 'both finish after one token' "$(field 1 finished)" '0 1'
expect_eq 'the pool keeps three chunks' "$(field 1 chunk_pool_entries)" 3
expect_eq 'one step' "$(grep -c '^step:' plan.txt)" 1

# ---- executed: passes with kvchunk toy + put, copies with assemble --------
tok sys.tok 'You are terse.'
tok rome.tok 'Rome is in Italy.'
tok paris.tok 'Paris is in France.'
tok q.tok 'Where?'
set -- $(field 1 chunk_base_pos)
ok 'pass 0: sys at its virtual start' kvchunk toy $M --tokens sys.tok --pos "$1" -o sys.npy
ok 'pass 1: Rome at its virtual start' kvchunk toy $M --tokens rome.tok --pos "$2" -o rome.npy
ok 'pass 2: Paris at its virtual start' kvchunk toy $M --tokens paris.tok --pos "$3" -o paris.npy
ok 'keep sys' kvchunk put $S $M --chunk-context none --tokens sys.tok --kv sys.npy --base-pos "$1"
ok 'keep Rome' kvchunk put $S $M --tokens rome.tok --context sys.tok --kv rome.npy --base-pos "$2"
ok 'keep Paris' kvchunk put $S $M --tokens paris.tok --context sys.tok --kv paris.npy --base-pos "$3"
ok 'assemble: every segment hits' kvchunk assemble $S $M -f text p.txt
expect_eq 'assemble agrees with the plan: hits and virtual starts' \
    "$(awk '$1 != "question" { printf "%s%s %s", (NR > 1 ? " " : ""), $5, $6 }' "$T/.out")" \
    'hit 0 hit 14 hit 14'
# (the prompt without its question, so that the KV holds the 50 chunk tokens)
printf 'You are terse.##Rome is in Italy.##Paris is in France.##' >chunks.txt
ok 'the copies: KV moved to the real positions' kvchunk assemble $S $M --kv-only \
    chunks.txt -o chunks.npy

# Attention of the question rows over the chunk tokens (the question sees
# all of them; its own keys are the same either way and are left out), from
# the copied KV and from the KV computed with every token in place.
cat sys.tok rome.tok paris.tok >all.tok
ok 'KV in place' kvchunk toy $M --tokens all.tok --pos 0 -o direct.npy
ok 'K copied' kvchunk slice --layer 1 --part k chunks.npy -o k1.npy
ok 'V copied' kvchunk slice --layer 1 --part v chunks.npy -o v1.npy
ok 'K in place' kvchunk slice --layer 1 --part k direct.npy -o k2.npy
ok 'V in place' kvchunk slice --layer 1 --part v direct.npy -o v2.npy
ok 'question Q at the plan positions' kvchunk toy $M --heads 4 --q 1 \
    --tokens q.tok --pos "$(field 1 positions | cut -d' ' -f1)" -o q.npy
ok 'attention over the copies' kvattn run --layout thd --q-lens 6 --kv-lens 50 \
    -q q.npy -k k1.npy -v v1.npy -o o1.npy
ok 'attention in place' kvattn run --layout thd --q-lens 6 --kv-lens 50 \
    -q q.npy -k k2.npy -v v2.npy -o o2.npy
ok 'bound' kvattn bound --routes 2 -q q.npy -k k2.npy -v v2.npy
tol=$(cat "$T/.out")
ok "equal within kvattn's bound ($tol)" kvattn cmp --quiet --atol "$tol" o1.npy o2.npy
# the same check fails when the chunks sit one position off
ok 'KV one position off' sh -c "kvchunk toy $M --tokens all.tok --pos 1 -o off.npy &&
    kvchunk slice --layer 1 --part k off.npy -o k3.npy &&
    kvattn run --layout thd --q-lens 6 --kv-lens 50 -q q.npy -k k3.npy -v v2.npy -o o3.npy"
ok 'one position off is not within the bound' sh -c \
    "! kvattn cmp --quiet --atol $tol o3.npy o2.npy"

# ---- a small pool: eviction, least recently used first ----------------------
ok 'plan with room for two chunks' kvslot plan --chunk-cache --segments segs.txt \
    --max-tokens 32 -B 4 --max-model-len 64 --output-lens 1 \
    --chunk-pool-blocks 9 --max-chunks 2 -f text -o small.txt
# Paris evicts Rome (sys is pinned as its context); prompt 1 hits sys,
# misses Rome (evicting Paris, the least recently used) and misses Paris
# (evicting Rome: sys was used later)
expect_eq 'small pool: hits' "$(sed -n 's/^chunk_hit: //p' small.txt)" '0 0 0 1 0 0'
expect_eq 'small pool: evictions' "$(sed -n 's/^chunk_evictions: //p' small.txt)" 3
expect_eq 'small pool: the first key evicted is Rome' \
    "$(sed -n 's/^chunk_evicted_keys: \([0-9a-f]*\).*/\1/p' small.txt)" \
    "$(sed -n 's/^chunk 14 17 //p' segs1.txt)"

# ---- a key must match its length ---------------------------------------------
# prompt 1 lists Rome's key with 18 tokens (one more than it was kept with):
# a miss (the seed names a chunk by its hash and its token count), computed
# and copied whole, so every one of the 51 positions before the question is
# written
awk 'NR == 2 { print "chunk 14 18 " $4; next }
     NR == 3 { print "chunk 32 19 " $4; next }
     NR == 4 { print "question 51 6"; next } { print }' segs1.txt >long1.txt
cat segs1.txt long1.txt >lens.txt
ok 'plan: one key with two lengths' kvslot plan --chunk-cache --segments lens.txt \
    --max-tokens 32 -B 4 --max-model-len 64 --output-lens 1 \
    --chunk-pool-blocks 32 -f text -o lens_plan.txt
lf() { sed -n "s/^$1: *//p" lens_plan.txt | head -n 1; }
expect_eq 'the 18-token use of a 17-token key is a miss' "$(lf chunk_hit)" '0 0 0 1 0 1'
expect_eq 'prompt 1 copies 14 + 18 + 19 tokens' \
    "$(lf copy_len | cut -d' ' -f4-)" '14 18 19'
expect_eq 'and computes the chunk at 18 tokens' \
    "$(lf pass_query_start_loc)" '0 14 31 50 68'
expect_eq 'the pool keeps both lengths' "$(lf chunk_pool_entries)" 4

# ---- default pool sizes come from the input ---------------------------------------
# a 100-token chunk: the seed's split of the main pool (29 blocks) gives a
# chunk pool of 7, too small for the chunk and its 1-block context (26); the
# default is raised to 26, sized without touching memory for the pools
printf 'Sys.##%s##Q?' "$(printf '%0100d' 0 | tr 0 x)" >long.txt
ok 'split a prompt with a 100-token chunk' kvchunk split -f text $M -o long_segs.txt long.txt
if [ -z "${ASAN_OPTIONS:-}" ]; then
    ok 'default pools: planned in 300 MB of address space' sh -c \
        "ulimit -v 300000; exec kvslot plan --chunk-cache --segments long_segs.txt \
         --max-tokens 32 -B 4 --max-model-len 200 --output-lens 1 -f text -v -o long_plan.txt"
else
    ok 'default pools' kvslot plan --chunk-cache --segments long_segs.txt \
        --max-tokens 32 -B 4 --max-model-len 200 --output-lens 1 -f text -v -o long_plan.txt
fi
expect_eq 'the default chunk pool holds the chunk and its context' \
    "$(grep -c 'chunk pool of 26 blocks' "$T/.err")" 1
expect_eq 'both segments computed' "$(sed -n 's/^pass_query_start_loc: //p' long_plan.txt)" '0 4 104'
expect_fail 2 'a chunk pool given too small' kvslot plan --chunk-cache \
    --segments long_segs.txt --max-tokens 32 -B 4 --max-model-len 200 --chunk-pool-blocks 3
expect_eq 'names the size that fits' \
    "$(grep -c 'need 26 chunk-pool blocks, the pool has 3 (--chunk-pool-blocks 26 or more' "$T/.err")" 1
expect_fail 2 'a main pool given too small' kvslot plan --chunk-cache \
    --segments long_segs.txt --max-tokens 32 -B 4 --max-model-len 200 --output-lens 1 --num-blocks 5
expect_eq 'names the size that fits' \
    "$(grep -c 'needs 27 blocks, the pool has 4 besides the null block (--num-blocks 28 or more)' "$T/.err")" 1
if [ -z "${ASAN_OPTIONS:-}" ]; then
    ok 'pools of two billion blocks cost nothing until used' sh -c \
        "ulimit -v 300000; exec kvslot plan --chunk-cache --segments long_segs.txt \
         --max-tokens 32 -B 4 --max-model-len 200 --output-lens 1 -f text \
         --num-blocks 2000000000 --chunk-pool-blocks 2000000000 -o huge_plan.txt"
fi

# ---- --fields and --max-mem, as plan --help lists them -------------------------
ok 'plan --chunk-cache --fields' kvslot plan --chunk-cache --segments segs.txt \
    --max-tokens 32 -B 4 --max-model-len 64 --output-lens 1 \
    --chunk-pool-blocks 16 -f text --fields copy_len,step -o fields.txt
expect_eq 'only the fields named, in their order' "$(cat fields.txt)" \
    "$(printf 'copy_len: 14 17 19 14 17 19\nstep: 1')"
expect_fail 2 'an unknown field' kvslot plan --chunk-cache --segments segs.txt \
    --max-tokens 32 -B 4 --max-model-len 64 --fields copy_len,nosuch
expect_eq '  ... named, with the valid ones' \
    "$(grep -c "unknown field 'nosuch' for plan --chunk-cache; valid: step chunk_req" "$T/.err")" 1
ok 'plan --chunk-cache --max-mem' kvslot plan --chunk-cache --segments segs.txt \
    --max-tokens 32 -B 4 --max-model-len 64 --output-lens 1 \
    --chunk-pool-blocks 16 -f text --max-mem 1M -o mem.txt
expect_file_eq '  ... the same plan' mem.txt plan.txt
expect_fail 1 'segment lists over --max-mem' kvslot plan --chunk-cache \
    --segments segs.txt --max-tokens 32 -B 4 --max-model-len 64 --max-mem 100
expect_eq '  ... refused with the sizes' \
    "$(grep -c "segs.txt' has [0-9]* bytes, over --max-mem 100" "$T/.err")" 1

# ---- bad input ----------------------------------------------------------------
kvchunk split -f text p.txt >nokeys.txt
expect_fail 2 'segments without keys' kvslot plan --chunk-cache --segments nokeys.txt \
    --max-tokens 32 -B 4 --max-model-len 64
expect_eq 'it says keys are missing' "$(grep -c 'without its key' "$T/.err")" 1
sed '2s/ [0-9a-f]*$/ 12345678zz/' segs1.txt >badkey.txt
expect_fail 2 'a malformed key' kvslot plan --chunk-cache --segments badkey.txt \
    --max-tokens 32 -B 4 --max-model-len 64
expect_eq 'it names the key, not a missing one' \
    "$(grep -c "line 2: the chunk's key '12345678zz' is not 32 lowercase hex digits" "$T/.err")" 1
expect_fail 2 'a chunk over --max-chunk-tokens' kvslot plan --chunk-cache \
    --segments segs.txt --max-tokens 32 -B 4 --max-model-len 64 --max-chunk-tokens 18
expect_eq 'naming the prompt and the limit' \
    "$(grep -c 'prompt 0: segment 2 has 19 tokens, over --max-chunk-tokens 18' "$T/.err")" 1
expect_fail 2 'a chunk pool smaller than a chunk and its context' kvslot plan \
    --chunk-cache --segments segs.txt --max-tokens 32 -B 4 --max-model-len 64 \
    --chunk-pool-blocks 8
expect_eq 'naming the pool size' "$(grep -c 'need 9 chunk-pool blocks, the pool has 8' "$T/.err")" 1
expect_fail 2 'a prompt past --max-model-len' kvslot plan --chunk-cache \
    --segments segs.txt --max-tokens 32 -B 4 --max-model-len 40
printf 'chunk 0 3 00000000000000000000000000000000\n' >nosys.txt
expect_fail 2 'a prompt that does not start with sys' kvslot plan --chunk-cache \
    --segments nosys.txt --max-tokens 32 -B 4 --max-model-len 64
done_testing
