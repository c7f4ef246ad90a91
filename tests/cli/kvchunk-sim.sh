#!/bin/sh
# kvchunk-sim.sh - kvchunk sim, sim gen and sim from-split: the spec's toy
# trace, goldens, the invariants (oracle = 1 - distinct/total, nothing above
# the oracle, prefix = chunk for one system prompt, top-1, sorted order),
# determinism, and bad input.
. "$KV_TOP/tests/lib.sh"
G=sim
err_has() {  # title pattern: the last command's stderr matches
    if grep -q -- "$2" "$T/.err"; then _report 0 "$1"
    else _report 1 "$1" "stderr: $(head -c 600 "$T/.err")"; fi
}
csv_field() {  # file policy column-name: one value of a --csv output
    awk -F, -v p="$2" -v c="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next }
        $1 == p { print $k }' "$1"
}

# --- help -------------------------------------------------------------------
ok 'sim --help' kvchunk sim --help
ok 'sim gen --help' kvchunk sim gen --help
ok 'sim from-split --help' kvchunk sim from-split --help

# --- the spec's toy trace (masks-slots.md D): B = 4, token hit rate 12/32 ---
cat >"$T/toy.txt" <<'EOF'
# time tenant sys chunks question output
0 - - A:8 2 1
1 - - A:8 3 1
2 - - A:8 0 1
3 - - X:3 0 1
EOF
golden 'toy trace, csv' $G/toy.csv kvchunk sim -B 4 --capacity-tokens 1000 --csv "$T/toy.txt"
kvchunk sim -B 4 --capacity-tokens 1000 --csv -o "$T/toy.csv" "$T/toy.txt"
expect_eq 'toy: prefix token hit rate 12/32' "$(csv_field "$T/toy.csv" prefix token_hit_rate)" 0.375000
ok 'toy trace, radix' kvchunk sim --capacity-tokens 1000 --csv -p prefix-radix -o "$T/toy-radix.csv" "$T/toy.txt"
expect_eq 'toy: radix hits token by token, 15/32' "$(csv_field "$T/toy-radix.csv" prefix-radix hit_tokens)" 15
expect_eq 'csv header starts with policy,token_hit_rate' \
    "$(head -n 1 "$T/toy.csv" | cut -d, -f1-2)" policy,token_hit_rate
golden 'toy trace, table' $G/toy.txt kvchunk sim -B 4 --capacity-tokens 1000 "$T/toy.txt"
ok 'toy trace from stdin' sh -c "kvchunk sim -B 4 --capacity-tokens 1000 --csv <'$T/toy.txt' >'$T/toy2.csv'"
expect_file_eq 'stdin = file' "$T/toy.csv" "$T/toy2.csv"

# the same trace as JSON lines
cat >"$T/toy.jsonl" <<'EOF'
{"t":0,"sys":null,"chunks":[{"id":"A","len":8}],"q_len":2,"out_len":1}
{"t":1,"chunks":[{"id":"A","len":8}],"q_len":3,"out_len":1}
{"t":2,"tenant":null,"chunks":[{"id":"A","len":8}],"q_len":0,"out_len":1}
{"t":3,"chunks":[{"id":"X","len":3}],"q_len":0,"out_len":1}
EOF
golden 'toy trace as JSON lines' $G/toy.csv kvchunk sim -B 4 --capacity-tokens 1000 --csv "$T/toy.jsonl"
printf '{"chunks":[{"id":"A","len":8}],"q_len":2,"out_len":1}\n{"chunks":[{"id":"A","len":-8}],"q_len":2,"out_len":1}\n' >"$T/bad.jsonl"
expect_fail 1 'JSON: negative length' kvchunk sim "$T/bad.jsonl"
err_has 'JSON: names the line and key' "line 2, key 'chunks': negative length"

# --- gen: deterministic, golden -------------------------------------------
golden 'gen small trace' $G/gen-small.txt kvchunk sim gen --seed 3 -n 12 --docs 50 --topk 3 --zipf 0.8 --sys-variants 2 --tenants 2 --doc-len 100-300 --rate 4
ok 'gen a' kvchunk sim gen --seed 5 -n 3000 --docs 400 --topk 5 -o "$T/a.txt"
ok 'gen b' sh -c "kvchunk sim gen --seed 5 -n 3000 --docs 400 --topk 5 >'$T/b.txt'"
expect_file_eq 'same seed, same trace (-o and stdout)' "$T/a.txt" "$T/b.txt"
ok 'gen c' kvchunk sim gen --seed 6 -n 3000 --docs 400 --topk 5 -o "$T/c.txt"
if cmp -s "$T/a.txt" "$T/c.txt"; then _report 1 'another seed, another trace'
else _report 0 'another seed, another trace'; fi
expect_eq 'gen writes --requests lines' "$(wc -l <"$T/a.txt" | tr -d ' ')" 3000
ok 'gen with every shape' kvchunk sim gen --seed 2 -n 2000 --docs 300 --topk 4 --zipf 1.1 --order random --sys-variants 3 --tenants 4 --topics 10 --turns 5 --conversations 16 --doc-len 400~0.5 --q-len 10-60 --out-len 32 -o "$T/shapes.txt"
expect_eq 'multi-turn lines carry a session' "$(awk 'NF == 7' "$T/shapes.txt" | wc -l | tr -d ' ')" 2000

# the generator's shapes
ok 'gen zipf top-1' kvchunk sim gen --seed 4 -n 20000 --docs 100 --topk 1 --zipf 1.0 --rate 10 -o "$T/z.txt"
top=$(awk '{ split($4, c, ":"); n[c[1]]++ } END { for (d in n) if (n[d] > m) m = n[d]; printf "%.3f", m / NR }' "$T/z.txt")
ok "zipf 1.0 over 100: the top document is 1/H(100) = 0.193 of draws ($top)" awk -v x="$top" 'BEGIN { exit !(x > 0.175 && x < 0.211) }'
span=$(awk 'END { printf "%.0f", $1 }' "$T/z.txt")
ok "poisson arrivals at 10/s: 20000 requests in about 2000 s ($span)" awk -v x="$span" 'BEGIN { exit !(x > 1900 && x < 2100) }'
ok 'gen sorted' kvchunk sim gen --seed 4 -n 500 --docs 1000 --topk 8 --order sorted -o "$T/so.txt"
unsorted=$(awk '{ n = split($4, c, ","); for (i = 2; i <= n; i++) { split(c[i-1], a, ":"); split(c[i], b, ":"); if (substr(a[1], 2) + 0 > substr(b[1], 2) + 0) bad++ } } END { print bad + 0 }' "$T/so.txt")
expect_eq 'sorted order: ids ascend in every request' "$unsorted" 0
ok 'gen log-normal lengths' kvchunk sim gen --seed 4 -n 3000 --docs 5000 --topk 1 --zipf 0 --doc-len 400~0.6 -o "$T/ln.txt"
med=$(awk '{ split($4, c, ":"); if (!(c[1] in seen)) { seen[c[1]]; print c[2] } }' "$T/ln.txt" | sort -n | awk '{ v[NR] = $1 } END { print v[int(NR / 2)] }')
ok "log-normal median 400 over the documents ($med)" awk -v x="$med" 'BEGIN { exit !(x > 370 && x < 430) }'
ok 'gen topics' kvchunk sim gen --seed 4 -n 3000 --docs 1000 --topk 4 --topics 50 --zipf 0.5 -o "$T/tp.txt"
ok 'gen no topics' kvchunk sim gen --seed 4 -n 3000 --docs 1000 --topk 4 --zipf 0.5 -o "$T/ntp.txt"
pairs() { awk '{ n = split($4, c, ","); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) p[c[i] "," c[j]] } END { print length(p) }' "$1"; }
tp=$(pairs "$T/tp.txt"); ntp=$(pairs "$T/ntp.txt")
ok "topic clusters: documents co-retrieved in fewer distinct pairs ($tp < $ntp)" test "$tp" -lt "$ntp"

# --- replay: determinism and invariants ----------------------------------
ok 'sim a' kvchunk sim --capacity-tokens 40000 --csv -p none,prefix,prefix-radix,prefix-sorted,chunk,chunk-lfu,oracle -o "$T/a.csv" "$T/a.txt"
ok 'sim a again' kvchunk sim --capacity-tokens 40000 --csv -p none,prefix,prefix-radix,prefix-sorted,chunk,chunk-lfu,oracle -o "$T/a2.csv" "$T/a.txt"
expect_file_eq 'identical seeds, identical results' "$T/a.csv" "$T/a2.csv"
# oracle chunk hit rate = 1 - distinct / total chunk slots
want=$(awk '{ n = split($4, c, ","); for (i = 1; i <= n; i++) { t++; if (!(c[i] in s)) { s[c[i]]; d++ } } }
    END { printf "%.6f", 1 - d / t }' "$T/a.txt")
expect_eq 'oracle chunk hit rate = 1 - distinct/total' "$(csv_field "$T/a.csv" oracle chunk_hit_rate)" "$want"
above=$(awk -F, 'NR > 1 { h[$1] = $2; c[$1] = $3 } END { for (p in h) if (h[p] > h["oracle"] || c[p] > c["oracle"]) print p }' "$T/a.csv")
expect_eq 'no hit rate above the oracle' "$above" ""
for f in shapes; do
    ok "sim $f" kvchunk sim --capacity-tokens 100000 --csv -p none,prefix,prefix-radix,prefix-sorted,chunk,chunk-lfu,oracle -o "$T/$f.csv" "$T/$f.txt"
    above=$(awk -F, 'NR > 1 { h[$1] = $2; c[$1] = $3 } END { for (p in h) if (h[p] > h["oracle"] || c[p] > c["oracle"]) print p }' "$T/$f.csv")
    expect_eq "$f: no hit rate above the oracle" "$above" ""
done
# a sweep of budgets in one pass = one run per budget
ok 'sweep' kvchunk sim --capacity-tokens 20000,60000,200000 --csv -p none,prefix,prefix-radix,prefix-sorted,chunk,chunk-lfu,oracle -o "$T/sweep.csv" "$T/shapes.txt"
: >"$T/each.csv"
for c in 20000 60000 200000; do
    kvchunk sim --capacity-tokens $c --csv -p none,prefix,prefix-radix,prefix-sorted,chunk,chunk-lfu,oracle "$T/shapes.txt" | sed 1d >>"$T/each.csv"
done
sed 1d "$T/sweep.csv" >"$T/sweep-rows.csv"
expect_file_eq 'sweep rows = one run per budget' "$T/sweep-rows.csv" "$T/each.csv"
ok 'sweep in bytes, table' kvchunk sim --capacity-bytes 1G,4G -o "$T/sweep.txt" "$T/a.txt"
expect_eq 'sweep table: a row per budget and policy' "$(grep -c 'G ' "$T/sweep.txt")" 8
expect_fail 2 'sweep: a budget below one block' kvchunk sim --capacity-tokens 20000,8 "$T/a.txt"
expect_fail 2 'sweep: empty item' kvchunk sim --capacity-tokens 20000,,30000 "$T/a.txt"

# threads: the prefix policies beside the others, the same results
ok 'sim -j 1' kvchunk sim -j 1 --capacity-tokens 60000 --csv -p none,prefix,prefix-radix,prefix-sorted,chunk,chunk-lfu,oracle -o "$T/j1.csv" "$T/shapes.txt"
ok 'sim -j 2' kvchunk sim -j 2 --capacity-tokens 60000 --csv -p none,prefix,prefix-radix,prefix-sorted,chunk,chunk-lfu,oracle -o "$T/j2.csv" "$T/shapes.txt"
expect_file_eq 'results do not depend on -j' "$T/j1.csv" "$T/j2.csv"
ok 'sim -j 2, more requests than a batch' sh -c "cat '$T/a.txt' '$T/a.txt' | awk '{ \$1 = NR; print }' >'$T/aa.txt'"
ok 'aa -j 1' kvchunk sim -j 1 --capacity-tokens 20000 --csv -o "$T/aa1.csv" "$T/aa.txt"
ok 'aa -j 2' kvchunk sim -j 2 --capacity-tokens 20000 --csv -o "$T/aa2.csv" "$T/aa.txt"
expect_file_eq 'results do not depend on -j (several batches)' "$T/aa1.csv" "$T/aa2.csv"
printf '0 - - a:5 1 1\n' >"$T/err.txt"
awk '{ $1 = NR; print }' "$T/a.txt" >>"$T/err.txt"
printf '9999 - - big:500000 1 1\n' >>"$T/err.txt"
expect_fail 1 'error after several batches, -j 2' kvchunk sim -j 2 --capacity-tokens 20000 "$T/err.txt"
err_has 'names the last line' "line 3002: chunk 'big'"
err_has 'sizes in plain bytes' "of 500000 tokens (65536000000 bytes) does not fit the capacity of 20000 tokens (2621440000 bytes)"

# one system prompt, top-1, sorted order: prefix and chunk agree
ok 'gen top-1 sorted' kvchunk sim gen --seed 9 -n 2000 --docs 300 --topk 1 --order sorted --sys-len 640 --doc-len 512 -o "$T/t1.txt"
ok 'sim top-1 sorted' kvchunk sim --capacity-tokens 10M --csv -o "$T/t1.csv" "$T/t1.txt"
expect_eq 'top-1 sorted, block-aligned: prefix = chunk token hit rate' \
    "$(csv_field "$T/t1.csv" prefix token_hit_rate)" "$(csv_field "$T/t1.csv" chunk token_hit_rate)"
expect_eq 'top-1 sorted, block-aligned: prefix = chunk chunk hit rate' \
    "$(csv_field "$T/t1.csv" prefix chunk_hit_rate)" "$(csv_field "$T/t1.csv" chunk chunk_hit_rate)"
ok 'gen top-1 sorted, ragged lengths' kvchunk sim gen --seed 9 -n 2000 --docs 300 --topk 1 --order sorted --sys-len 601 --doc-len 100-900 -o "$T/t2.txt"
ok 'sim top-1 sorted, ragged lengths' kvchunk sim --capacity-tokens 10M --csv -o "$T/t2.csv" "$T/t2.txt"
d=$(awk -F, '$1 == "prefix" { p = $6 } $1 == "chunk" { c = $6; n = $4 } END { print (c >= p && c - p < 16 * n) ? "yes" : "no: " p " " c }' "$T/t2.csv")
expect_eq 'top-1 sorted, any lengths: within one block per request' "$d" yes
# geometry and capacity in bytes: 2 * 4 * 2 * 64 * 2 = 2048 bytes per token
ok 'capacity in bytes' kvchunk sim --layers 4 --kv-heads 2 --head-dim 64 --dtype f16 --capacity-bytes 80M --csv -o "$T/bytes.csv" "$T/a.txt"
ok 'the same in tokens' kvchunk sim --layers 4 --kv-heads 2 --head-dim 64 --dtype f16 --capacity-tokens 40960 --csv -o "$T/tokens.csv" "$T/a.txt"
expect_file_eq 'capacity-bytes = capacity-tokens x bytes per token' "$T/bytes.csv" "$T/tokens.csv"
expect_eq 'capacity_bytes column' "$(csv_field "$T/bytes.csv" chunk capacity_bytes)" 83886080
ok 'cost model options' kvchunk sim --us-per-token 50 --us-per-pair 0.001 --tier host --bw-host 10 --bw-rope 100 --chunk-context isolated --salt tenant --csv -o "$T/cost.csv" "$T/shapes.txt"

# queueing: three 10-token requests at once, 1 ms per token: 10, 20, 30 ms
printf '0 - - a:10 0 1\n0 - - b:10 0 1\n0 - - c:10 0 1\n' >"$T/q.txt"
ok 'queued ttft' kvchunk sim -p none --us-per-token 1000 --us-per-pair 0 --csv -o "$T/q.csv" "$T/q.txt"
expect_eq 'queued mean: (10 + 20 + 30) / 3 ms' "$(csv_field "$T/q.csv" none queued_ttft_mean_ms)" 20.0000
expect_eq 'unqueued mean: 10 ms' "$(csv_field "$T/q.csv" none ttft_mean_ms)" 10.0000
printf '0 - - a:10 0 1\n1 - - b:10 0 1\n2 - - c:10 0 1\n' >"$T/q2.txt"
ok 'spaced arrivals' kvchunk sim -p none --us-per-token 1000 --us-per-pair 0 --csv -o "$T/q2.csv" "$T/q2.txt"
expect_eq 'no wait when the server keeps up' "$(csv_field "$T/q2.csv" none queued_ttft_mean_ms)" 10.0000

# tenants: shared by default, apart with --salt tenant
printf '0 alice s1:64 d1:64 8 1\n1 bob s1:64 d1:64 8 1\n' >"$T/ten.txt"
ok 'tenants shared' kvchunk sim -p prefix,chunk --capacity-tokens 1000 --csv -o "$T/ten1.csv" "$T/ten.txt"
ok 'tenants apart' kvchunk sim -p prefix,chunk --capacity-tokens 1000 --salt tenant --csv -o "$T/ten2.csv" "$T/ten.txt"
expect_eq 'shared: bob reuses alice s prompt (prefix)' "$(csv_field "$T/ten1.csv" prefix hit_tokens)" 128
expect_eq 'shared: bob reuses alice s prompt (chunk)' "$(csv_field "$T/ten1.csv" chunk hit_tokens)" 128
expect_eq 'salted: nothing shared (prefix)' "$(csv_field "$T/ten2.csv" prefix hit_tokens)" 0
expect_eq 'salted: nothing shared (chunk)' "$(csv_field "$T/ten2.csv" chunk hit_tokens)" 0
# chunk context: the same document behind two system prompts
printf '0 - s1:64 d1:64 8 1\n1 - s2:64 d1:64 8 1\n' >"$T/ctx.txt"
ok 'chunk context sys' kvchunk sim -p chunk --capacity-tokens 1000 --csv -o "$T/ctx1.csv" "$T/ctx.txt"
ok 'chunk context isolated' kvchunk sim -p chunk --capacity-tokens 1000 --chunk-context isolated --csv -o "$T/ctx2.csv" "$T/ctx.txt"
expect_eq 'sys context: another system prompt misses' "$(csv_field "$T/ctx1.csv" chunk chunk_hits)" 0
expect_eq 'isolated: it hits' "$(csv_field "$T/ctx2.csv" chunk chunk_hits)" 1
# re-rotation: a chunk loaded at a position other than the one it was
# computed at is rotated (K only), the system prompt never
printf '0 - s1:64 d1:32,d2:32 8 1\n1 - s1:64 d2:32,d1:32 8 1\n2 - s1:64 d2:32,d1:32 8 1\n' >"$T/rot.txt"
ok 'rotation' kvchunk sim -p chunk --layers 1 --kv-heads 1 --head-dim 1 --dtype f32 --capacity-tokens 1000 --csv -o "$T/rot.csv" "$T/rot.txt"
expect_eq 'moved chunks: 4 loads at a new position, 8 bytes a token' "$(csv_field "$T/rot.csv" chunk bytes_rotated)" 1024
expect_eq 'bytes per token follow the geometry: 2 x 1 x 1 x 1 x 4' "$(csv_field "$T/rot.csv" chunk bytes_loaded)" 2048
# conversations: a turn's prompt is the conversation so far; beyond
# --max-sessions the least recent conversation is forgotten
printf '0 - - d1:10 5 7 A\n1 - - d2:10 5 7 B\n2 - - - 3 1 A\n' >"$T/conv.txt"
ok 'conversations' kvchunk sim -p none --csv -o "$T/conv1.csv" "$T/conv.txt"
expect_eq 'turn 2 of A: 10 + 5 + 7 + 3 tokens' "$(csv_field "$T/conv1.csv" none prompt_tokens)" $((15 + 15 + 25))
ok 'conversations, one remembered' kvchunk sim -p none --max-sessions 1 --csv -o "$T/conv2.csv" "$T/conv.txt"
expect_eq 'A forgotten: turn 2 is 3 tokens' "$(csv_field "$T/conv2.csv" none prompt_tokens)" $((15 + 15 + 3))

# radix: leaves evicted least recently used first
printf '0 - - A:8 0 1\n1 - - C:8 0 1\n2 - - A:8 0 1\n3 - - D:8 0 1\n4 - - A:8 0 1\n5 - - C:8 0 1\n' >"$T/rx.txt"
ok 'radix eviction' kvchunk sim -p prefix-radix --capacity-tokens 20 --csv -o "$T/rx.csv" "$T/rx.txt"
expect_eq 'radix: A kept (hit twice, 7 tokens each), C and D evicted' \
    "$(csv_field "$T/rx.csv" prefix-radix hit_tokens) $(csv_field "$T/rx.csv" prefix-radix evictions)" "14 2"

# LFU keeps the frequent chunk that LRU lets go
printf '0 - - hot:10 1 1\n1 - - hot:10 1 1\n2 - - a:10 1 1\n3 - - b:10 1 1\n4 - - hot:10 1 1\n' >"$T/lfu.txt"
ok 'lru vs lfu' kvchunk sim -p chunk,chunk-lfu --capacity-tokens 20 --csv -o "$T/lfu.csv" "$T/lfu.txt"
expect_eq 'lru: hot evicted' "$(csv_field "$T/lfu.csv" chunk chunk_hits)" 1
expect_eq 'lfu: hot kept' "$(csv_field "$T/lfu.csv" chunk-lfu chunk_hits)" 2

# --- from-split ---------------------------------------------------------------
cat >"$T/split.txt" <<'EOF'
sys 0 600 5f1e0c8a9b7d6e5f4a3b2c1d0e9f8a7b
chunk 600 512 0123456789abcdef0123456789abcdef
chunk 1112 480 fedcba9876543210fedcba9876543210
question 1592 40 11111111111111111111111111111111
sys 0 600 5f1e0c8a9b7d6e5f4a3b2c1d0e9f8a7b
chunk 600 480 fedcba9876543210fedcba9876543210
chunk 1080 512 0123456789abcdef0123456789abcdef
question 1592 33
EOF
golden 'from-split' $G/from-split.txt kvchunk sim from-split --rate 2 --out-len 64 "$T/split.txt"
ok 'from-split -o' kvchunk sim from-split -o "$T/split.trace" "$T/split.txt"
# a question with no segment before it: a prompt of the question alone
printf 'question 0 5\nchunk 0 4 0123456789abcdef0123456789abcdef\nquestion 4 1\n' >"$T/bare.txt"
expect_out 'from-split: a question with nothing before it' \
    "0.000000 - - - 5 128
1.000000 - - 0123456789abcdef0123456789abcdef:4 1 128" \
    kvchunk sim from-split "$T/bare.txt"
ok 'replay the converted trace' kvchunk sim -B 16 --capacity-tokens 100000 --csv -o "$T/split.csv" "$T/split.trace"
expect_eq 'reordered chunks: chunk caching reuses both' "$(csv_field "$T/split.csv" chunk chunk_hit_rate)" 0.500000
expect_eq 'reordered chunks: prefix caching reuses none' "$(csv_field "$T/split.csv" prefix chunk_hit_rate)" 0.000000

# real prompts through kvchunk split: the same two documents, swapped
printf 'You are a helpful assistant.##The first document, on caching.##The second document, on attention.##What is new?' >"$T/p1.txt"
printf 'You are a helpful assistant.##The second document, on attention.##The first document, on caching.##And now?' >"$T/p2.txt"
for p in p1 p2; do kvchunk split -f text --shape 32,8,128 "$T/$p.txt" >>"$T/real-split.txt" 2>/dev/null; done
ok 'from-split of real kvchunk split output' kvchunk sim from-split -o "$T/real.trace" "$T/real-split.txt"
ok 'replay it' kvchunk sim -B 4 --capacity-tokens 10000 --csv -o "$T/real.csv" "$T/real.trace"
expect_eq 'real prompts: both documents reused by chunk caching' "$(csv_field "$T/real.csv" chunk chunk_hit_rate)" 0.500000
expect_eq 'real prompts: neither by prefix caching' "$(csv_field "$T/real.csv" prefix chunk_hit_rate)" 0.000000

# --- a trace worked by hand: the design's flow, max chunks, warm-up, decode --
# Geometry 1 layer x 1 KV head x 500 x f32: 2 * 500 * 4 = 4000 bytes a token.
# Costs: 10 us per computed token, no attention term; a copy at 4 GB/s is
# 4000 / 4e3 = 1 us a token; a rotation moves K only, 2000 bytes at 2 GB/s,
# 1 us a token; decoding 100 us per output token after the first.
#   req 1: S:10 A:100, question 5, output 3     req 2: S:10 B:100, q 5, out 1
#   req 3: S:10 A:100, q 5, out 2               req 4: S:10 A:100,B:100, q 5, out 1
# none: computes every token: 115, 115, 115, 215 -> 1150 1150 1150 2150 us,
#   mean 1400 us; end to end + 200, 0, 100, 0 -> mean 1475 us.
# chunk, --rotate always --miss-copy --max-chunks 2 (the system prompt is an
# entry too; LRU):
#   1: S, A miss: 115 computed (1150) + 110 copied (110) + rotated (110) = 1370
#      entries S A
#   2: S hit, B miss: 105 computed (1050) + copied S,B 110 + rotated 110 = 1270
#      B in: two entries already, the LRU one (A) out: S B
#   3: S hit, A miss: the same, 1270; B out: S A
#   4: S hit, A hit, B miss: 105 computed (1050) + copied 210 + rotated 210
#      = 1470; B in, S (used first) out
#   TTFT mean (1370 + 1270 + 1270 + 1470) / 4 = 1345 us; end to end
#   (1570 + 1270 + 1370 + 1470) / 4 = 1420 us; chunk hits 1 of 5 (0.2), with
#   the system prompt 4 of 9 (0.444444); speedup 1400 / 1345 = 1.0409
# oracle (no limit), same flow: 3: S, A hit: 5 computed (50) + 110 + 110 = 270;
#   4: all hit: 50 + 210 + 210 = 470; TTFT mean (1370 + 1270 + 270 + 470) / 4
#   = 845 us, end to end (1570 + 1270 + 370 + 470) / 4 = 920 us; chunk hits
#   3 of 5, with the system prompt 6 of 9
cat >"$T/hand.txt" <<'EOF2'
0 - S:10 A:100 5 3
1 - S:10 B:100 5 1
2 - S:10 A:100 5 2
3 - S:10 A:100,B:100 5 1
EOF2
HAND="--layers 1 --kv-heads 1 --head-dim 500 --dtype f32 --us-per-token 10 --us-per-pair 0 --bw-hbm 4 --bw-rope 2 --us-per-output-token 100 --capacity-tokens 1000 -p none,chunk,oracle --csv"
ok 'hand trace: the design flow' kvchunk sim $HAND --rotate always --miss-copy --max-chunks 2 -o "$T/hand.csv" "$T/hand.txt"
row() { echo "$(csv_field "$T/$1.csv" $2 ttft_mean_ms) $(csv_field "$T/$1.csv" $2 e2e_mean_ms) $(csv_field "$T/$1.csv" $2 chunk_hit_rate) $(csv_field "$T/$1.csv" $2 chunk_hit_rate_sys)"; }
expect_eq 'hand: none 1400 us, end to end 1475 us' "$(row hand none)" "1.4000 1.4750 0.000000 0.000000"
expect_eq 'hand: chunk 1345 us, 1420 us, 1/5, 4/9' "$(row hand chunk)" "1.3450 1.4200 0.200000 0.444444"
expect_eq 'hand: oracle 845 us, 920 us, 3/5, 6/9' "$(row hand oracle)" "0.8450 0.9200 0.600000 0.666667"
expect_eq 'hand: chunk speedup 1400/1345, end to end 1475/1420' \
    "$(csv_field "$T/hand.csv" chunk speedup_vs_none) $(csv_field "$T/hand.csv" chunk e2e_speedup_vs_none)" "1.0409 1.0387"
expect_eq 'hand: max 2 entries, 3 evictions' \
    "$(csv_field "$T/hand.csv" chunk entries_max) $(csv_field "$T/hand.csv" chunk evictions)" "2 3"
expect_eq 'hand: copies 110 + 110 + 110 + 210 tokens of 4000 bytes' "$(csv_field "$T/hand.csv" chunk bytes_loaded)" 2160000
# --warmup 2: requests 3 and 4 only: chunk (1270 + 1470) / 2 = 1370 us, end to
# end (1370 + 1470) / 2 = 1420; chunk hits 1 of 3, with the system prompt 3
# of 5; none (1150 + 2150) / 2 = 1650 us
ok 'hand trace: --warmup 2' kvchunk sim $HAND --rotate always --miss-copy --max-chunks 2 --warmup 2 -o "$T/hand-w.csv" "$T/hand.txt"
expect_eq 'warm-up: chunk 1370 us, 1420 us, 1/3, 3/5' "$(row hand-w chunk)" "1.3700 1.4200 0.333333 0.600000"
expect_eq 'warm-up: none 1650 us, two requests' \
    "$(csv_field "$T/hand-w.csv" none ttft_mean_ms) $(csv_field "$T/hand-w.csv" none requests)" "1.6500 2"
# The default flow: a hit is rotated only where it moved, a miss copies
# nothing, no entry limit: 1: 1150; 2: S hit in place, 1050 + 10 = 1060, B
# stored at 10; 3: S and A (stored at 10) in place: 50 + 110 = 160; 4: B
# moves from 10 to 110: 50 + 210 copied + 100 rotated = 360: mean 682.5 us
ok 'hand trace: the default flow' kvchunk sim $HAND -o "$T/hand-d.csv" "$T/hand.txt"
expect_eq 'default: 682.5 us, B rotated (100 tokens)' \
    "$(csv_field "$T/hand-d.csv" chunk ttft_mean_ms) $(csv_field "$T/hand-d.csv" chunk bytes_rotated)" "0.6825 400000"
# --pool-bytes with a model: 4.3 GiB over 2 x 32 layers x 8 KV heads x 128 x
# 2 bytes (131072 bytes a token, all layers) = 4617089843 / 131072 = 35225
ok '--pool-bytes 4.3G with a config' kvchunk sim --pool-bytes 4.3G --model-config "$KV_TOP/tests/configs/llama-3.1-8b.json" -o "$T/pool.csv" --csv "$T/hand.txt"
expect_eq 'pool: 35225 tokens' "$(csv_field "$T/pool.csv" chunk capacity_tokens)" 35225
# The table's sizes in full however large: inf is 2^50 tokens, here of
# 100000 x 2 x 100000 x 100000 x 4 = 8e15 bytes, 2^50 x 8e15 / 2^60 =
# 7812500000000 EiB (more characters than the widest column)
kvchunk sim -q -p chunk --capacity-tokens 1000,inf --layers 100000 --kv-heads 100000 \
    --head-dim 100000 --dtype f32 "$T/hand.txt" >"$T/huge.txt"
expect_eq 'table: a huge budget keeps its unit' "$(awk 'NR == 3 { print $1 }' "$T/huge.txt")" 7812500000000.0E
# An MLA model's bytes per token are its latent's, 27 layers x (512 + 64)
# for DeepSeek-V2-Lite, whatever else is given: --dtype and --layers change
# the element size and the layer count of that latent (1 GiB over 31104
# bytes in bf16: 34521 tokens; over 62208 in f32: 17260); --kv-heads and
# --head-dim do not apply to it and are refused
DSV2="$KV_TOP/tests/configs/deepseek-v2-lite.json"
printf '0 - S:10 A:100 5 3\n' >"$T/one.txt"
for o in '' '--dtype bf16' '--layers 27' '--dtype f32' '--layers 9 --dtype f32'; do
    case $o in *f32*9*|*9*f32*) want=51781 ;; *f32*) want=17260 ;; *) want=34521 ;; esac
    ok "MLA config ${o:-alone}" kvchunk sim --model-config "$DSV2" --capacity-bytes 1G --csv \
        --policies chunk $o -o "$T/mla.csv" "$T/one.txt"
    expect_eq "... $want tokens of the latent" "$(csv_field "$T/mla.csv" chunk capacity_tokens)" "$want"
done
expect_eq 'info agrees: 62208 bytes per token in f32' \
    "$(kvchunk info --model-config "$DSV2" --dtype f32 | sed -n 's/^bytes_per_token: //p')" 62208
ok 'pool sizing the same: --pool-bytes 1G in f32' kvchunk sim --model-config "$DSV2" \
    --pool-bytes 1G --dtype f32 --csv --policies chunk -o "$T/mla.csv" "$T/one.txt"
expect_eq '... 17260 tokens' "$(csv_field "$T/mla.csv" chunk capacity_tokens)" 17260
expect_fail 2 'MLA config with --kv-heads: refused' kvchunk sim --model-config "$DSV2" \
    --kv-heads 2 "$T/one.txt"
expect_fail 2 'MLA config with --head-dim: refused' kvchunk sim --model-config "$DSV2" \
    --head-dim 64 "$T/one.txt"
# options no selected policy reads are refused, naming them
for c in '--rotate|-p prefix --rotate always' '--miss-copy|-p prefix,none --miss-copy' \
         '--tier|-p prefix --tier host' '--bw-rope|-p prefix-radix --bw-rope 5' \
         '--chunk-context|-p prefix --chunk-context isolated' '--max-chunks|-p oracle --max-chunks 3' \
         '-B|-p chunk,oracle -B 8' '-B|-p prefix-radix -B 4' '--bw-hbm|-p prefix --bw-hbm 5' \
         '--bw-disk|--bw-disk 5' '--bw-hbm|--tier host --bw-hbm 5' \
         '--capacity-tokens|-p none,oracle' '--pool-bytes|-p oracle --pool-bytes 1G'; do
    name=${c%%|*}
    c=${c#*|}
    case $c in *pool-bytes*) cap= ;; *) cap='--capacity-tokens 1000' ;; esac
    expect_fail 2 "sim $c: refused" kvchunk sim $cap $c "$T/one.txt"
    expect_eq "... naming $name" "$(grep -c -- "^kvchunk sim: $name: " "$T/.err")" 1
done
ok 'sim --tier disk --bw-disk 5 -p chunk: read' kvchunk sim --capacity-tokens 1000 -p chunk \
    --tier disk --bw-disk 5 -o /dev/null "$T/one.txt"
# sim gen --fresh: new documents have new ids (docs and up), never repeated
ok 'gen --fresh' kvchunk sim gen --seed 2 -n 400 --docs 20 --topk 4 --fresh 0.25 --zipf 0 --rate 0 -o "$T/fresh.txt"
expect_eq 'fresh: every document above the hot set appears once' \
    "$(awk '{ n = split($4, d, ","); for (i = 1; i <= n; i++) { split(d[i], x, ":"); id = substr(x[1], 2) + 0; if (id >= 20) c[id]++ } }
        END { for (k in c) if (c[k] > 1) bad++; print bad + 0 }' "$T/fresh.txt")" 0
# ... and the oracle's chunk hit rate after a warm-up is 1 - fresh (0.75),
# within 3 standard errors of 1200 slots (0.0375)
ok 'replay it after 100 requests' kvchunk sim -p none,oracle --warmup 100 --csv -o "$T/fresh.csv" "$T/fresh.txt"
expect_eq 'fresh: reuse = 1 - fresh' "$(awk -v h="$(csv_field "$T/fresh.csv" oracle chunk_hit_rate)" 'BEGIN { print (h > 0.7125 && h < 0.7875) }')" 1
expect_fail 2 'bad --rotate' kvchunk sim --rotate sometimes "$T/hand.txt"
expect_fail 2 'zero --max-chunks' kvchunk sim --max-chunks 0 "$T/hand.txt"
expect_fail 2 'two budgets' kvchunk sim --pool-bytes 1G --capacity-bytes 1G "$T/hand.txt"
expect_fail 1 'warm-up longer than the trace' kvchunk sim --warmup 4 "$T/hand.txt"
err_has 'warm-up: says so' "warmup 4 leaves nothing"
expect_fail 2 'gen: fresh above 1' kvchunk sim gen --fresh 1.5

# --- bad input ------------------------------------------------------------------
printf '0 - - a:5 1 1\n1 - - a:5 1 1\n2 - - a:5,b:x 1 1\n' >"$T/bad1.txt"
expect_fail 1 'malformed chunk length' kvchunk sim "$T/bad1.txt"
err_has 'names the line and field' "line 3, field 4 (chunks)"
printf '0 - - a:5 1 1\n1 - - a:-5 1 1\n' >"$T/bad2.txt"
expect_fail 1 'negative length' kvchunk sim "$T/bad2.txt"
err_has 'negative length: line 2' "line 2.*negative length"
printf '0 - - a:5 1\n' >"$T/bad3.txt"
expect_fail 1 'too few fields' kvchunk sim "$T/bad3.txt"
err_has 'too few fields: line 1' "line 1: 5 fields"
printf '0 - - a:5 1 1\n1 - - big:5000 1 1\n' >"$T/bad4.txt"
expect_fail 1 'chunk larger than the budget' kvchunk sim --capacity-tokens 1000 "$T/bad4.txt"
err_has 'budget: names the line' "line 2: chunk 'big'.*does not fit"
expect_fail 2 'budget below one block' kvchunk sim --capacity-tokens 8 "$T/toy.txt"
expect_fail 2 'budget below one token' kvchunk sim --capacity-bytes 1000 "$T/toy.txt"
expect_fail 2 'unknown policy' kvchunk sim -p prefix,lru "$T/toy.txt"
err_has 'unknown policy named' "'lru'"
expect_fail 2 'both capacities' kvchunk sim --capacity-tokens 100 --capacity-bytes 1G "$T/toy.txt"
expect_fail 2 'bad dtype' kvchunk sim --dtype f64 "$T/toy.txt"
expect_fail 2 'bad tier' kvchunk sim --tier tape "$T/toy.txt"
expect_fail 2 'bad chunk context' kvchunk sim --chunk-context some "$T/toy.txt"
expect_fail 1 'missing trace' kvchunk sim "$T/nope.txt"
expect_fail 2 'gen: bad order' kvchunk sim gen --order shuffled
expect_fail 2 'gen: topk above docs' kvchunk sim gen --docs 3 --topk 5
expect_fail 2 'gen: zero doc length' kvchunk sim gen --doc-len 0
expect_fail 2 'gen: bad distribution' kvchunk sim gen --doc-len 9-3
expect_fail 2 'gen: negative zipf' kvchunk sim gen --zipf -1
expect_fail 2 'gen: topics above docs' kvchunk sim gen --docs 10 --topics 11
printf 'sys 0 5 aa\nchunk 5 3 bb\n' >"$T/bad5.txt"
expect_fail 1 'from-split: no question' kvchunk sim from-split "$T/bad5.txt"
printf 'sys 0 5 aa\nslice 5 3 bb\nquestion 8 1 cc\n' >"$T/bad6.txt"
expect_fail 1 'from-split: bad kind' kvchunk sim from-split "$T/bad6.txt"
err_has 'from-split: names the line' "line 2, field 1"
printf 'chunk 0 -3 bb\nquestion 8 1 cc\n' >"$T/bad7.txt"
expect_fail 1 'from-split: negative length' kvchunk sim from-split "$T/bad7.txt"
# --max-mem: a request is refused before it is fed when the tables it
# would grow (a prefix pool's per-block ones: a 2^20-token document is 65536
# blocks of 16) pass the limit; exit 1, nothing on stdout
printf '0 - - D:1048576 8 1\n1 - - D:1048576 8 1\n' >"$T/big.txt"
expect_fail 1 'max-mem: a large document refused' \
    kvchunk sim -q -p prefix --capacity-tokens inf --max-mem 4M "$T/big.txt"
err_has 'max-mem: names the line and the limit' \
    "^kvchunk sim: '.*big.txt' line 1: replaying it takes about [0-9]* bytes, more than 4194304 bytes (--max-mem)"
ok 'max-mem: accepted above its need' \
    kvchunk sim -q -p prefix --capacity-tokens inf --max-mem 256M "$T/big.txt"
printf '0 - - D:2147483648 8 1\n' >"$T/huge.txt"
expect_fail 1 'max-mem: a 2^31-token document refused, not allocated' \
    kvchunk sim -q -p prefix --capacity-tokens inf --max-mem 1G "$T/huge.txt"
expect_fail 2 'max-mem: bad size' kvchunk sim --max-mem lots "$T/toy.txt"
err_has 'max-mem: bad size named' "^kvchunk sim: --max-mem: bad size 'lots'"
expect_fail 2 'max-mem: zero' kvchunk sim --max-mem 0 "$T/toy.txt"
ok 'no output file left behind' test ! -e "$T/never.txt"
expect_fail 1 'failed run writes no -o file' kvchunk sim -o "$T/never.txt" "$T/bad1.txt"
ok 'no output file after failure' test ! -e "$T/never.txt"
done_testing
